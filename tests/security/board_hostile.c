/* A hostile tenant on the compute board: writes everything on it that it can write.
 *   board_hostile slots BOARD UUID OWN_SLOT_FILE SECONDS
 *     fills the slots of the GPU's shared board file (<BOARD>/<UUID>.board, which every
 *     container could write before the device plugin's per-container slot files; the
 *     first 8 are left for honest processes to claim) and every
 *     process slot of its own slot file with a neighbour that claims the whole GPU and has
 *     work pending forever (heartbeat kept fresh, or in the far future, or garbage), for
 *     SECONDS.
 *   board_hostile turn BOARD UUID SECONDS
 *     holds the GPU's turn: first with an expiry in the far future, then (after 0.5 s)
 *     rewriting it every 100 us with an honest-looking expiry, naming itself the next
 *     holder and raising the waiter count; prints the time of that switch in ns of
 *     CLOCK_MONOTONIC.
 * It uses no GPU time. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "base/parse.h"
#include "libvgpu/compute.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *map(const char *path, size_t size)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        perror(path);
        exit(1);
    }
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        perror(path);
        exit(1);
    }
    return m;
}

/* A slot claiming the whole GPU with work pending since boot; style 0: fresh heartbeat,
 * 1: heartbeat an hour ahead, 2: garbage everywhere. */
static void forge(struct vgc_board_slot *s, int64_t t, int style, uint64_t n)
{
    atomic_store(&s->owner, UINT64_C(0xbad0000) + n);
    atomic_store(&s->container, n);
    atomic_store(&s->pending, style == 2 ? 0xffffffffu : 1u);
    atomic_store(&s->pend_since, style == 2 ? INT64_MIN : 0);
    atomic_store(&s->pend_ns, style == 2 ? -1 : 0);
    atomic_store(&s->share_ppm, style == 2 ? INT64_MAX : VGC_PPM);
    atomic_store(&s->claim_ppm, 0xffffffffu);
    atomic_fetch_add(&s->flips, 1);
    atomic_store(&s->heartbeat, style == 1 ? t + INT64_C(3600000000000) : t);
}

int main(int argc, char **argv)
{
    uint64_t secs;
    if (argc < 5 || vg_parse_u64(argv[argc - 1], 1, 3600, &secs, NULL) != 0) {
        fprintf(stderr, "usage: board_hostile slots BOARD UUID OWN_SLOT_FILE SECONDS\n"
                        "       board_hostile turn BOARD UUID SECONDS\n");
        return 2;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.board", argv[2], argv[3]);
    struct vgc_board *b = map(path, sizeof *b);
    int64_t end = now_ns() + (int64_t)secs * 1000000000;
    if (strcmp(argv[1], "slots") == 0 && argc == 6) {
        struct vgc_slot_file *own = map(argv[4], sizeof *own);
        for (uint64_t n = 0; now_ns() < end; n++) {
            int64_t t = now_ns();
            for (int i = 8; i < VGC_BOARD_SLOTS; i++) /* 0..7 left for the honest */
                forge(&b->slots[i], t, i % 3, (uint64_t)i + 1);
            for (int i = 0; i < VGC_CTR_PROCS; i++)
                forge(&own->procs[i], t, i == 0 ? 0 : i % 3, (uint64_t)i + 100);
            usleep(100);
        }
        return 0;
    }
    if (strcmp(argv[1], "turn") == 0 && argc == 5) {
        int64_t honest = now_ns() + 500000000;
        atomic_store(&b->turn, UINT64_C(0xbad));
        atomic_store(&b->turn_until, INT64_MAX);
        while (now_ns() < honest)
            usleep(1000);
        printf("%lld\n", (long long)now_ns());
        fflush(stdout);
        while (now_ns() < end) {
            atomic_store(&b->turn, UINT64_C(0xbad));
            atomic_store(&b->turn_until, now_ns() + VGC_TURN_GRACE_NS);
            atomic_store(&b->turn_next, UINT64_C(0xbad));
            atomic_store(&b->turn_next_key, INT64_MIN);
            atomic_store(&b->turn_waiters, 1000);
            usleep(100);
        }
        return 0;
    }
    fprintf(stderr, "board_hostile: bad arguments\n");
    return 2;
}
