#define _GNU_SOURCE /* F_OFD_SETLK */
#include "region/region.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/str.h"

/* The file's layout, version 2. Little-endian x86-64/aarch64; docs/protocol.md. Version 1
 * had the same bytes; its readers enforced the device table's limits, and its header had
 * no counters, so the two are not mixed. */
struct shared_device {
    char uuid[REGION_UUID_MAX];
    uint64_t memory_limit;     /* the creator's; a record, never enforced from here */
    uint32_t sm_limit_percent; /* likewise */
    uint32_t reserved0;
    _Atomic uint64_t used; /* bytes held by live processes; bit 63: frozen for a recount */
    union {
        uint64_t reserved[13]; /* zero in a new region */
        struct region_compute compute;
    };
};

enum { SLOT_FREE = 0, SLOT_LIVE = 1 };

struct shared_proc {
    _Atomic uint32_t state;
    _Atomic uint32_t generation;
    _Atomic int32_t pid;
    uint32_t reserved0;
    _Atomic uint64_t used[REGION_MAX_DEVICES];
    /* Threads of this process between their counter and slot updates (version 1: the
     * bytes of the one update in flight; either way non-zero means wait). */
    _Atomic int64_t inflight[REGION_MAX_DEVICES];
};

struct shared_region {
    uint64_t magic;
    uint32_t version;
    uint32_t device_count;
    uint64_t file_size;
    uint32_t proc_count;
    uint32_t reserved0;
    _Atomic uint64_t closed;   /* allocations refused because enforcement failed closed */
    _Atomic uint64_t repaired; /* device counters a recount found wrong */
    _Atomic uint64_t refused;  /* reservations refused: they would pass the limit */
    uint64_t reserved[1];
    struct shared_device devices[REGION_MAX_DEVICES];
    struct shared_proc procs[REGION_MAX_PROCS];
};

_Static_assert(sizeof(struct shared_device) == 192, "region device layout");
_Static_assert(offsetof(struct shared_device, used) == 80, "region device layout");
_Static_assert(sizeof(struct region_compute) == 13 * sizeof(uint64_t), "region compute layout");
_Static_assert(sizeof(struct shared_proc) == 272, "region process layout");
_Static_assert(offsetof(struct shared_region, devices) == 64, "region header layout");
_Static_assert(sizeof(struct shared_region) == 64 + 16 * 192 + 1024 * 272, "region size");

#define FROZEN           (UINT64_C(1) << 63)
#define LOCK_BYTE_REGION 0
#define RECOUNT_WAIT_NS  (200 * 1000 * 1000LL)

struct region {
    int fd;
    struct shared_region *sh;
    /* The device count as validated at open: every index into the device table is
     * checked against this copy, never against the shared file, which any process of
     * the container can write. */
    unsigned device_count;
    /* Process-private limits (region_set_limit), never in the file: cap is the most the
     * container's counter may reach (0 when closed, 2^63 - 1 when there is no limit).
     * Atomic because a live resize (docs/libvgpu.md) sets them while other threads
     * allocate; relaxed loads cost what plain ones do. */
    _Atomic uint64_t cap[REGION_MAX_DEVICES];
    _Atomic uint64_t limit[REGION_MAX_DEVICES];
    _Atomic uint32_t share[REGION_MAX_DEVICES];
    /* What this process holds, as it knows it: the truth for its own slot, and a ceiling
     * no forged counter can lift. */
    _Atomic uint64_t mine[REGION_MAX_DEVICES];
    _Atomic int64_t recount_at; /* last recount forced by a refusal */
    int slot;                   /* -1 when not attached */
    struct shared_proc *me;     /* &sh->procs[slot], NULL when not attached */
    pthread_mutex_t mutex;
    char path[PATH_MAX];
};

/* --- OFD locks: released by the kernel when the last descriptor of the file goes --- */

static int ofd_lock(int fd, short type, off_t byte, bool wait)
{
    struct flock fl = {.l_type = type, .l_whence = SEEK_SET, .l_start = byte, .l_len = 1};
    int rc;
    do
        rc = fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &fl);
    while (rc != 0 && errno == EINTR);
    return rc == 0 ? 0 : -errno;
}

/* True when some other open file description holds the slot's liveness lock. */
static bool slot_held_by_other(int fd, unsigned slot)
{
    struct flock fl = {
        .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 1 + (off_t)slot, .l_len = 1};
    if (fcntl(fd, F_OFD_GETLK, &fl) != 0)
        return true; /* cannot tell: never reclaim on doubt */
    return fl.l_type != F_UNLCK;
}

static void region_lock(struct region *r)
{
    pthread_mutex_lock(&r->mutex);
    (void)ofd_lock(r->fd, F_WRLCK, LOCK_BYTE_REGION, true);
}

static void region_unlock(struct region *r)
{
    (void)ofd_lock(r->fd, F_UNLCK, LOCK_BYTE_REGION, false);
    pthread_mutex_unlock(&r->mutex);
}

/* --- validation --- */

int region_validate(const void *buf, size_t len, struct vg_err *err)
{
    const struct shared_region *sh = buf;
    if (len < sizeof sh->magic + sizeof sh->version)
        return vg_err_set(err, -EPROTO, "region is %zu bytes, too small for a header", len);
    if (sh->magic != REGION_MAGIC)
        return vg_err_set(err, -EPROTO, "not a vgpu region (bad magic)");
    if (sh->version != REGION_VERSION)
        return vg_err_set(err, -EPROTO, "region version %u, this build reads version %u",
                          sh->version, REGION_VERSION);
    if (len != sizeof *sh || sh->file_size != sizeof *sh)
        return vg_err_set(err, -EPROTO, "region is %zu bytes (header says %llu), expected %zu", len,
                          (unsigned long long)sh->file_size, sizeof *sh);
    if (sh->device_count == 0 || sh->device_count > REGION_MAX_DEVICES)
        return vg_err_set(err, -EPROTO, "region has %u devices, expected 1..%d", sh->device_count,
                          REGION_MAX_DEVICES);
    if (sh->proc_count != REGION_MAX_PROCS)
        return vg_err_set(err, -EPROTO, "region has %u process slots, expected %d", sh->proc_count,
                          REGION_MAX_PROCS);
    for (unsigned i = 0; i < sh->device_count; i++) {
        const struct shared_device *d = &sh->devices[i];
        if (memchr(d->uuid, '\0', sizeof d->uuid) == NULL)
            return vg_err_set(err, -EPROTO, "region device %u has an unterminated UUID", i);
        if (d->sm_limit_percent > 100)
            return vg_err_set(err, -EPROTO, "region device %u has SM limit %u%%", i,
                              d->sm_limit_percent);
    }
    return 0;
}

/* --- create and open --- */

static int fill_new_region(struct shared_region *sh, const struct region_config *config,
                           struct vg_err *err)
{
    if (config->device_count == 0 || config->device_count > REGION_MAX_DEVICES)
        return vg_err_set(err, -EINVAL, "a region needs 1..%d devices, not %u", REGION_MAX_DEVICES,
                          config->device_count);
    sh->version = REGION_VERSION;
    sh->device_count = config->device_count;
    sh->file_size = sizeof *sh;
    sh->proc_count = REGION_MAX_PROCS;
    for (unsigned i = 0; i < config->device_count; i++) {
        const struct region_device_config *c = &config->devices[i];
        if (memchr(c->uuid, '\0', sizeof c->uuid) == NULL)
            return vg_err_set(err, -EINVAL, "device %u: UUID too long", i);
        if (c->sm_limit_percent > 100)
            return vg_err_set(err, -EINVAL, "device %u: SM limit %u%% is over 100", i,
                              c->sm_limit_percent);
        memcpy(sh->devices[i].uuid, c->uuid, sizeof c->uuid);
        sh->devices[i].memory_limit = c->memory_limit;
        sh->devices[i].sm_limit_percent = c->sm_limit_percent;
    }
    /* The magic goes last: a reader never sees a half-filled region as valid. */
    atomic_thread_fence(memory_order_release);
    sh->magic = REGION_MAGIC;
    return 0;
}

int region_init_fd(int fd, const struct region_config *config, struct vg_err *err)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return vg_err_errno(err, errno, "region");
    if (st.st_size != 0)
        return vg_err_set(err, -EEXIST, "region file is not empty (%lld bytes)",
                          (long long)st.st_size);
    /* Only the header and device table are written; the process table stays a hole,
     * which reads as zeros. The caller publishes the file once this returns. */
    const size_t head = offsetof(struct shared_region, procs);
    VG_AUTO_FREE struct shared_region *sh = vg_calloc(1, sizeof *sh);
    if (!sh)
        return vg_err_set(err, -ENOMEM, "region: out of memory");
    int rc = fill_new_region(sh, config, err);
    if (rc < 0)
        return rc;
    /* Every process of the container, whatever its user, must be able to open it; the
     * application's umask is left alone. */
    if (fchmod(fd, 0666) != 0 || ftruncate(fd, (off_t)sizeof *sh) != 0)
        return vg_err_errno(err, errno, "sizing region");
    ssize_t n = pwrite(fd, sh, head, 0);
    if (n != (ssize_t)head)
        return vg_err_errno(err, n < 0 ? errno : EIO, "writing region");
    return 0;
}

int region_create(const char *path, const struct region_config *config, struct vg_err *err)
{
    static _Atomic unsigned counter;
    char tmp[PATH_MAX];
    if (vg_snprintf(tmp, sizeof tmp, "%s.tmp.%d.%u", path, (int)getpid(),
                    atomic_fetch_add(&counter, 1)) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "region path too long: %s", path);
    VG_AUTO_CLOSE int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0)
        return vg_err_errno(err, errno, "creating region %s", tmp);
    int rc = region_init_fd(fd, config, err);
    if (rc < 0)
        vg_err_wrap(err, "region %s", tmp);
    /* link() publishes the complete file atomically and fails if another process won. */
    else if (link(tmp, path) != 0)
        rc = errno == EEXIST ? 1 : vg_err_errno(err, errno, "publishing region %s", path);
    unlink(tmp);
    return rc;
}

/* Releases a region that region_open has not handed out yet (not attached, no mutex). */
static void region_discard(struct region *r)
{
    if (r->sh != NULL)
        munmap(r->sh, sizeof *r->sh);
    if (r->fd >= 0)
        close(r->fd);
    free(r);
}
VG_DEFINE_AUTO(region_discardp, struct region, region_discard)

int region_open(const char *path, struct region **out, struct vg_err *err)
{
    VG_AUTO(region_discardp) struct region *r = vg_calloc(1, sizeof *r);
    if (r == NULL)
        return vg_err_set(err, -ENOMEM, "out of memory opening region");
    r->slot = -1;
    r->fd = -1;
    if (vg_strlcpy(r->path, path, sizeof r->path) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "region path too long: %s", path);
    r->fd = open(path, O_RDWR | O_CLOEXEC);
    if (r->fd < 0)
        return vg_err_errno(err, errno, "opening region %s", path);
    struct stat st;
    if (fstat(r->fd, &st) != 0)
        return vg_err_errno(err, errno, "region %s", path);
    if ((size_t)st.st_size != sizeof *r->sh)
        return vg_err_set(err, -EPROTO, "region %s is %lld bytes, expected %zu (another version?)",
                          path, (long long)st.st_size, sizeof *r->sh);
    r->sh = mmap(NULL, sizeof *r->sh, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
    if (r->sh == MAP_FAILED) {
        r->sh = NULL;
        return vg_err_errno(err, errno, "mapping region %s", path);
    }
    if (region_validate(r->sh, sizeof *r->sh, err) != 0)
        return vg_err_wrap(err, "region %s", path);
    r->device_count = r->sh->device_count;
    for (unsigned d = 0; d < REGION_MAX_DEVICES; d++)
        atomic_store_explicit(&r->cap[d], FROZEN - 1, memory_order_relaxed);
    pthread_mutex_init(&r->mutex, NULL);
    *out = vg_steal_ptr(&r);
    return 0;
}

void region_close(struct region *r)
{
    if (r == NULL)
        return;
    region_detach(r);
    munmap(r->sh, sizeof *r->sh);
    close(r->fd);
    pthread_mutex_destroy(&r->mutex);
    free(r);
}

unsigned region_device_count(const struct region *r)
{
    return r->device_count;
}

const struct region_device_config *region_device(const struct region *r, unsigned dev)
{
    /* The shared layout starts with the same three fields as the config. */
    _Static_assert(offsetof(struct shared_device, memory_limit) ==
                       offsetof(struct region_device_config, memory_limit),
                   "config prefix");
    _Static_assert(offsetof(struct shared_device, sm_limit_percent) ==
                       offsetof(struct region_device_config, sm_limit_percent),
                   "config prefix");
    if (dev >= r->device_count)
        return NULL;
    return (const struct region_device_config *)(const void *)&r->sh->devices[dev];
}

int region_find_device(const struct region *r, const char *uuid)
{
    /* Bounded: the shared copy may have lost its terminator since it was validated. */
    for (unsigned i = 0; i < r->device_count; i++)
        if (strncmp(r->sh->devices[i].uuid, uuid, REGION_UUID_MAX) == 0)
            return (int)i;
    return -ENOENT;
}

/* --- reclaiming dead processes --- */

static bool slot_is_live(struct region *r, unsigned slot)
{
    if (atomic_load(&r->sh->procs[slot].state) != SLOT_LIVE)
        return false;
    return (int)slot == r->slot || slot_held_by_other(r->fd, slot);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waits until no live process is between its counter and slot updates. */
static bool wait_inflight(struct region *r, const bool *dead)
{
    uint64_t deadline = now_ns() + RECOUNT_WAIT_NS;
    for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
        if (dead[s] || atomic_load(&r->sh->procs[s].state) != SLOT_LIVE)
            continue;
        for (unsigned d = 0; d < r->device_count; d++) {
            while (atomic_load(&r->sh->procs[s].inflight[d]) != 0) {
                if (now_ns() > deadline)
                    return false;
                struct timespec pause = {0, 50000};
                nanosleep(&pause, NULL);
            }
        }
    }
    return true;
}

/* What the live slots hold on device d, saturated at FROZEN - 1. */
static uint64_t live_sum(struct shared_region *sh, unsigned d, const bool *dead)
{
    uint64_t sum = 0;
    for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
        if (dead[s] || atomic_load(&sh->procs[s].state) != SLOT_LIVE)
            continue;
        uint64_t u = atomic_load(&sh->procs[s].used[d]);
        sum = u > FROZEN - 1 - sum ? FROZEN - 1 : sum + u;
    }
    return sum;
}

/* What a recount found. */
struct recount_result {
    unsigned dead;     /* slots reclaimed */
    unsigned repaired; /* devices whose counter disagreed with the live slots */
    unsigned insane;   /* devices whose live slots add up past FROZEN - 1 */
};

/* With the region lock held: frees dead slots and recounts every device from the live
 * ones; with force, even when nobody died (a counter another process may have forged).
 * Also completes a recount left half-done by a reclaimer that died. */
static int recount_locked(struct region *r, bool force, struct recount_result *out)
{
    struct shared_region *sh = r->sh;
    bool dead[REGION_MAX_PROCS] = {false};
    unsigned ndead = 0;
    bool frozen = false;
    for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
        if (atomic_load(&sh->procs[s].state) == SLOT_LIVE && !slot_is_live(r, s)) {
            dead[s] = true;
            ndead++;
        }
    }
    for (unsigned d = 0; d < r->device_count; d++)
        frozen |= (atomic_load(&sh->devices[d].used) & FROZEN) != 0;
    *out = (struct recount_result){0};
    if (ndead == 0 && !frozen && !force)
        return 0;

    uint64_t before[REGION_MAX_DEVICES];
    for (unsigned d = 0; d < r->device_count; d++)
        before[d] = atomic_fetch_or(&sh->devices[d].used, FROZEN) & ~FROZEN;
    if (!wait_inflight(r, dead)) {
        /* Nothing could change while frozen, so the old counts are still exact unless
         * they were forged; a forced recount cannot tell a stopped process from a forged
         * in-flight mark, so it keeps the larger of the counter and the live slots' sum
         * (never less than the slots show). */
        for (unsigned d = 0; d < r->device_count; d++) {
            uint64_t sum = force ? live_sum(sh, d, dead) : 0;
            atomic_store(&sh->devices[d].used, sum > before[d] ? sum : before[d]);
        }
        return -EAGAIN;
    }
    /* What the dead held, to tell a reclaim from a repair (exact unless one died in the
     * middle of an update). */
    uint64_t dead_sum[REGION_MAX_DEVICES] = {0};
    bool dead_inflight = false;
    for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
        if (!dead[s])
            continue;
        struct shared_proc *p = &sh->procs[s];
        for (unsigned d = 0; d < r->device_count; d++) {
            uint64_t u = atomic_load(&p->used[d]);
            dead_sum[d] = u > FROZEN - 1 - dead_sum[d] ? FROZEN - 1 : dead_sum[d] + u;
            dead_inflight |= atomic_load(&p->inflight[d]) != 0;
        }
        for (unsigned d = 0; d < REGION_MAX_DEVICES; d++) {
            atomic_store(&p->used[d], 0);
            atomic_store(&p->inflight[d], 0);
        }
        atomic_store(&p->pid, 0);
        atomic_store(&p->state, SLOT_FREE);
    }
    for (unsigned d = 0; d < r->device_count; d++) {
        uint64_t sum = live_sum(sh, d, dead);
        if (sum == FROZEN - 1)
            out->insane++;
        /* The counter had to equal what the live and the dead held. */
        uint64_t expected = sum > FROZEN - 1 - dead_sum[d] ? FROZEN - 1 : sum + dead_sum[d];
        if (!dead_inflight && expected != before[d]) {
            out->repaired++;
            atomic_fetch_add(&sh->repaired, 1);
        }
        atomic_store(&sh->devices[d].used, sum);
    }
    out->dead = ndead;
    return 0;
}

int region_reclaim(struct region *r, unsigned *count)
{
    struct recount_result res;
    region_lock(r);
    int rc = recount_locked(r, false, &res);
    region_unlock(r);
    if (count != NULL)
        *count = rc == 0 ? res.dead : 0;
    return rc;
}

int region_recount(struct region *r, unsigned *repaired, unsigned *insane)
{
    struct recount_result res;
    region_lock(r);
    int rc = recount_locked(r, true, &res);
    region_unlock(r);
    if (rc != 0)
        res = (struct recount_result){0};
    if (repaired != NULL)
        *repaired = res.repaired;
    if (insane != NULL)
        *insane = res.insane;
    return rc;
}

/* A counter is frozen while someone recounts: wait for them by taking the region lock,
 * and finish the recount if they died before unfreezing. */
static void wait_unfrozen(struct region *r, unsigned dev)
{
    region_lock(r);
    struct recount_result res;
    if (atomic_load(&r->sh->devices[dev].used) & FROZEN)
        (void)recount_locked(r, false, &res);
    region_unlock(r);
}

/* --- slots --- */

int region_attach(struct region *r, struct vg_err *err)
{
    if (r->slot >= 0)
        return 0;
    region_lock(r);
    int rc = -ENOSPC;
    struct recount_result res;
    for (int pass = 0; pass < 2 && rc == -ENOSPC; pass++) {
        if (pass == 1)
            (void)recount_locked(r, false, &res);
        for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
            struct shared_proc *p = &r->sh->procs[s];
            if (atomic_load(&p->state) != SLOT_FREE)
                continue;
            if (ofd_lock(r->fd, F_WRLCK, 1 + (off_t)s, false) != 0)
                continue; /* a process that is still leaving holds it */
            for (unsigned d = 0; d < REGION_MAX_DEVICES; d++) {
                atomic_store(&p->used[d], 0);
                atomic_store(&p->inflight[d], 0);
                atomic_store(&r->mine[d], 0);
            }
            atomic_fetch_add(&p->generation, 1);
            atomic_store(&p->pid, (int32_t)getpid());
            atomic_store(&p->state, SLOT_LIVE);
            r->slot = (int)s;
            r->me = p;
            rc = 0;
            break;
        }
    }
    /* The counters this process is about to trust are recounted from the live slots
     * first: a counter forged before it started does not carry over. */
    if (rc == 0)
        (void)recount_locked(r, true, &res);
    region_unlock(r);
    if (rc != 0)
        return vg_err_set(err, rc, "region %s: all %d process slots are in use", r->path,
                          REGION_MAX_PROCS);
    return 0;
}

void region_detach(struct region *r)
{
    if (r->slot < 0)
        return;
    struct shared_proc *p = &r->sh->procs[r->slot];
    for (unsigned d = 0; d < r->device_count; d++) {
        uint64_t held = atomic_load(&r->mine[d]);
        if (held > 0)
            region_release(r, d, held);
    }
    region_lock(r);
    atomic_store(&p->pid, 0);
    atomic_store(&p->state, SLOT_FREE);
    (void)ofd_lock(r->fd, F_UNLCK, 1 + (off_t)r->slot, false);
    r->slot = -1;
    r->me = NULL;
    region_unlock(r);
}

void region_after_fork(struct region *r)
{
    /* The inherited descriptor shares the parent's open file description and so its
     * locks; closing it here leaves the parent's locks alone (the parent still has its
     * own descriptor) and the child opens its own. */
    pthread_mutex_init(&r->mutex, NULL);
    int fd = open(r->path, O_RDWR | O_CLOEXEC);
    if (fd >= 0) {
        close(r->fd);
        r->fd = fd;
    }
    r->slot = -1;
    r->me = NULL;
    for (unsigned d = 0; d < REGION_MAX_DEVICES; d++)
        atomic_store(&r->mine[d], 0);
}

/* --- limits: process-private --- */

void region_set_limit(struct region *r, unsigned dev, uint64_t limit, uint32_t share_percent)
{
    if (dev >= REGION_MAX_DEVICES)
        return;
    atomic_store_explicit(&r->limit[dev], limit, memory_order_relaxed);
    atomic_store_explicit(&r->cap[dev],
                          limit == REGION_LIMIT_CLOSED       ? 0
                          : limit == 0 || limit > FROZEN - 1 ? FROZEN - 1
                                                             : limit,
                          memory_order_relaxed);
    atomic_store_explicit(&r->share[dev], share_percent > 100 ? 100 : share_percent,
                          memory_order_relaxed);
}

uint32_t region_share(const struct region *r, unsigned dev)
{
    return dev < r->device_count ? atomic_load_explicit(&r->share[dev], memory_order_relaxed) : 0;
}

/* --- the allocation path --- */

/* Takes bytes from this process's own allowance on dev (its private count against the
 * cap); false when it would pass the cap. */
static inline bool take_mine(struct region *r, unsigned dev, uint64_t bytes, uint64_t cap)
{
    uint64_t m = atomic_load_explicit(&r->mine[dev], memory_order_relaxed);
    do {
        if (m > cap || bytes > cap - m)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&r->mine[dev], &m, m + bytes,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

static inline void give_mine(struct region *r, unsigned dev, uint64_t bytes)
{
    uint64_t m = atomic_load_explicit(&r->mine[dev], memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&r->mine[dev], &m, m > bytes ? m - bytes : 0,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

/* Takes bytes off this process's slot (shared by its threads: one atomic step, never
 * below zero). */
static inline void slot_sub(_Atomic uint64_t *slot, uint64_t bytes)
{
    uint64_t m = atomic_load(slot);
    while (!atomic_compare_exchange_weak(slot, &m, m > bytes ? m - bytes : 0))
        ;
}

/* Applies delta to the device counter and this process's slot; for a positive delta the
 * counter must stay within cap. Lock-free unless a recount is running. The protocol a
 * recount relies on: inflight counts the process's threads between their counter and slot
 * updates (raised before the counter changes, lowered only after the slot has caught
 * up), so a recounter that froze the counter either sees an update in flight (and waits)
 * or sees it complete in the slot. */
static int apply(struct region *r, unsigned dev, uint64_t bytes, bool add, uint64_t cap)
{
    struct shared_proc *p = r->me;
    _Atomic uint64_t *counter = &r->sh->devices[dev].used;
    for (;;) {
        atomic_fetch_add(&p->inflight[dev], 1);
        uint64_t old = atomic_load(counter);
        for (;;) {
            if (old & FROZEN)
                break;
            uint64_t next;
            if (add) {
                if (old > cap || bytes > cap - old) {
                    atomic_fetch_sub(&p->inflight[dev], 1);
                    return -ENOMEM;
                }
                next = old + bytes;
            } else {
                next = old > bytes ? old - bytes : 0;
            }
            if (atomic_compare_exchange_weak(counter, &old, next)) {
                if (add)
                    atomic_fetch_add(&p->used[dev], bytes);
                else
                    slot_sub(&p->used[dev], bytes);
                atomic_fetch_sub(&p->inflight[dev], 1);
                return 0;
            }
        }
        atomic_fetch_sub(&p->inflight[dev], 1);
        wait_unfrozen(r, dev);
    }
}

static int64_t mono_ns(void)
{
    return (int64_t)now_ns();
}

/* region_reserve past its first attempt: a frozen counter or a refusal. Before a refusal
 * stands, dead processes are reclaimed and (at most every 100 ms) the counter is recounted
 * from the live slots, so a counter forged high does not lock the container out. */
static __attribute__((noinline, cold)) int reserve_slow(struct region *r, unsigned dev,
                                                        uint64_t bytes, uint64_t cap)
{
    if (!take_mine(r, dev, bytes, cap)) {
        atomic_fetch_add(&r->sh->refused, 1);
        return -ENOMEM; /* this process alone would pass its limit */
    }
    int rc = apply(r, dev, bytes, true, cap);
    if (rc == -ENOMEM) {
        unsigned reclaimed = 0;
        if (region_reclaim(r, &reclaimed) == 0 && reclaimed > 0)
            rc = apply(r, dev, bytes, true, cap);
    }
    if (rc == -ENOMEM) {
        int64_t now = mono_ns(), last = atomic_load(&r->recount_at);
        if ((last == 0 || now - last >= 100000000) &&
            atomic_compare_exchange_strong(&r->recount_at, &last, now)) {
            unsigned repaired = 0;
            if (region_recount(r, &repaired, NULL) == 0 && repaired > 0)
                rc = apply(r, dev, bytes, true, cap);
        }
    }
    if (rc != 0)
        give_mine(r, dev, bytes);
    if (rc == -ENOMEM)
        atomic_fetch_add(&r->sh->refused, 1);
    return rc;
}

/* The allocation path: apply()'s first round written out for one direction, same
 * protocol and the same atomics, falling back to apply() when a recount holds the counter
 * or the reservation is refused. */
int region_reserve(struct region *r, unsigned dev, uint64_t bytes)
{
    struct shared_proc *p = r->me;
    if (__builtin_expect(p == NULL || dev >= r->device_count, 0))
        return -EINVAL;
    struct shared_device *d = &r->sh->devices[dev];
    uint64_t cap = atomic_load_explicit(&r->cap[dev], memory_order_relaxed);
    if (__builtin_expect(!take_mine(r, dev, bytes, cap), 0))
        return reserve_slow(r, dev, bytes, cap);
    atomic_fetch_add(&p->inflight[dev], 1);
    uint64_t old = atomic_load(&d->used);
    /* cap < FROZEN: a frozen counter falls through to the slow path too. */
    while (old <= cap && bytes <= cap - old) {
        if (atomic_compare_exchange_weak(&d->used, &old, old + bytes)) {
            atomic_fetch_add(&p->used[dev], bytes);
            atomic_fetch_sub(&p->inflight[dev], 1);
            return 0;
        }
    }
    atomic_fetch_sub(&p->inflight[dev], 1);
    give_mine(r, dev, bytes);
    return reserve_slow(r, dev, bytes, cap);
}

void region_release(struct region *r, unsigned dev, uint64_t bytes)
{
    struct shared_proc *p = r->me;
    if (__builtin_expect(p == NULL || dev >= r->device_count || bytes == 0, 0))
        return;
    give_mine(r, dev, bytes);
    _Atomic uint64_t *counter = &r->sh->devices[dev].used;
    atomic_fetch_add(&p->inflight[dev], 1);
    uint64_t old = atomic_load(counter);
    while (!(old & FROZEN)) {
        if (atomic_compare_exchange_weak(counter, &old, old > bytes ? old - bytes : 0)) {
            slot_sub(&p->used[dev], bytes);
            atomic_fetch_sub(&p->inflight[dev], 1);
            return;
        }
    }
    atomic_fetch_sub(&p->inflight[dev], 1);
    (void)apply(r, dev, bytes, false, 0);
}

struct region_compute *region_compute(struct region *r, unsigned dev)
{
    if (dev >= r->device_count)
        return NULL;
    return &r->sh->devices[dev].compute;
}

int region_usage(const struct region *r, unsigned dev, uint64_t *used, uint64_t *limit)
{
    if (dev >= r->device_count)
        return -EINVAL;
    if (used != NULL)
        *used = atomic_load(&r->sh->devices[dev].used) & ~FROZEN;
    if (limit != NULL)
        *limit = atomic_load_explicit(&r->limit[dev], memory_order_relaxed);
    return 0;
}

void region_counters(const struct region *r, struct region_counters *out)
{
    out->closed = atomic_load(&r->sh->closed);
    out->repaired = atomic_load(&r->sh->repaired);
    out->refused = atomic_load(&r->sh->refused);
}

void region_note_closed(struct region *r)
{
    atomic_fetch_add(&r->sh->closed, 1);
}

int region_list_procs(struct region *r, struct region_proc_info *out, unsigned max)
{
    unsigned n = 0;
    for (unsigned s = 0; s < REGION_MAX_PROCS; s++) {
        if (!slot_is_live(r, s))
            continue;
        if (n < max) {
            const struct shared_proc *p = &r->sh->procs[s];
            struct region_proc_info *info = &out[n];
            memset(info, 0, sizeof *info);
            info->slot = s;
            info->generation = atomic_load(&p->generation);
            info->pid = atomic_load(&p->pid);
            for (unsigned d = 0; d < r->device_count; d++)
                info->used[d] = atomic_load(&p->used[d]);
        }
        n++;
    }
    return (int)n;
}
