/* A tenant that forges the GPU's turn (docs/security.md, "The GPU turn"). It uses no GPU
 * time; it only writes the files a container may write: the GPU's turn file and its own
 * slot file.
 *   turn_forger rotate BOARD UUID SECONDS
 *     the attack of the second round: holds the turn under a new made-up owner id every
 *     150 ms (each under the 200 ms grace), rewriting an honest-looking expiry every
 *     100 us and naming itself next, and frees it for 1 ms every 400 ms, so that no wait
 *     passes the stall detector's limits.
 *   turn_forger confirmed BOARD UUID OWN_SLOT_FILE SECONDS
 *     the same, adapted to confirmation: every process slot of its own slot file is live,
 *     with work pending and its turn bit set, and the turn rotates among those ids; every
 *     third period it names a neighbour's live process as the holder instead (read from
 *     the neighbours' slot files), and it keeps the waiter count raised.
 * Each prints nothing and exits 0 after SECONDS. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "libvgpu/compute.h"

#define PERIOD_NS INT64_C(150000000) /* a new holder id this often */
#define FREE_NS   INT64_C(400000000) /* the turn freed this often ... */
#define FREE_FOR  1000               /* ... for this many us */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *map(const char *path, size_t size, int prot)
{
    int fd = open(path, prot == PROT_READ ? O_RDONLY : O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    void *m = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        perror(path);
        exit(1);
    }
    return m;
}

/* A live process id of a neighbour (a slot file in BOARD/UUID other than own); 0: none. */
static uint64_t neighbour_id(const char *board, const char *uuid, const char *own, unsigned pick)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", board, uuid);
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    uint64_t ids[64];
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < 64) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".slot") != 0 || strstr(own, e->d_name) != NULL)
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct vgc_slot_file *f = map(path, sizeof *f, PROT_READ);
        for (int k = 0; k < VGC_CTR_PROCS && n < 64; k++) {
            uint64_t o = atomic_load(&f->procs[k].owner);
            if (o != 0 && atomic_load(&f->procs[k].heartbeat) > now_ns() - VGC_STALE_NS)
                ids[n++] = o;
        }
        munmap(f, sizeof *f);
    }
    closedir(d);
    return n == 0 ? 0 : ids[pick % n];
}

int main(int argc, char **argv)
{
    uint64_t secs;
    bool confirmed = argc == 6 && strcmp(argv[1], "confirmed") == 0;
    if (!(confirmed || (argc == 5 && strcmp(argv[1], "rotate") == 0)) ||
        vg_parse_u64(argv[argc - 1], 1, 3600, &secs, NULL) != 0) {
        fprintf(stderr, "usage: turn_forger rotate BOARD UUID SECONDS\n"
                        "       turn_forger confirmed BOARD UUID OWN_SLOT_FILE SECONDS\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.board", argv[2], argv[3]);
    struct vgc_board *b = map(path, sizeof *b, PROT_READ | PROT_WRITE);
    struct vgc_slot_file *own =
        confirmed ? map(argv[4], sizeof *own, PROT_READ | PROT_WRITE) : NULL;
    int64_t start = now_ns(), end = start + (int64_t)secs * 1000000000;
    uint64_t period = UINT64_MAX;
    uint64_t id = 0;
    int64_t freed = start;
    for (;;) {
        int64_t t = now_ns();
        if (t >= end)
            break;
        if (own != NULL)
            for (int k = 0; k < VGC_CTR_PROCS; k++) {
                struct vgc_board_slot *s = &own->procs[k];
                atomic_store(&s->owner, UINT64_C(0xf0f0000) + (uint64_t)k);
                atomic_store(&s->container, 77);
                atomic_store(&s->pending, 1u);
                atomic_store(&s->pend_since, t - 1000);
                atomic_store(&s->heartbeat, t);
                atomic_store(&own->turn_held, (UINT64_C(1) << VGC_CTR_PROCS) - 1);
            }
        uint64_t p = (uint64_t)((t - start) / PERIOD_NS);
        if (p != period) {
            period = p;
            if (own == NULL)
                id = UINT64_C(0xbad0000) + p * 2 + 1; /* made up, never seen before */
            else if (p % 3 == 2 && (id = neighbour_id(argv[2], argv[3], argv[4], (unsigned)p)) != 0)
                ; /* a neighbour's live process, not holding the turn */
            else
                id = UINT64_C(0xf0f0000) + p % VGC_CTR_PROCS;
        }
        if (t - freed >= FREE_NS) {
            freed = t;
            atomic_store(&b->turn, 0);
            atomic_fetch_add(&b->turn_seq, 1);
            syscall(SYS_futex, &b->turn_seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
            usleep(FREE_FOR);
            continue;
        }
        atomic_store(&b->turn, id);
        atomic_store(&b->turn_until, t + VGC_TURN_GRACE_NS - 10000000);
        atomic_store(&b->turn_next,
                     own != NULL ? UINT64_C(0xf0f0000) + (p + 1) % VGC_CTR_PROCS : id + 2);
        atomic_store(&b->turn_next_key, INT64_MIN);
        if (own != NULL)
            atomic_store(&b->turn_waiters, 1000);
        usleep(100);
    }
    return 0;
}
