/* fakegpu's shared state: the state file, the locks, process slots, memory accounting,
 * streams, events and NVML's views (see state.h for the contract, timeline.h for the
 * layout and the timing model).
 *
 * Why a file and a robust mutex: every process that uses the same FAKEGPU_STATE_DIR must
 * see the same GPUs without a daemon, and a process may die at any instant (tests kill
 * them on purpose). The file is created and initialised under flock, so two first
 * processes cannot both initialise it; a file that is not ours is refused, never
 * trusted. A holder that dies leaves the mutex EOWNERDEAD; the next locker reaps dead
 * slots and recomputes everything derived, so no half-done update survives.
 *
 * The launch path (fg_stream_launch) is a benchmark figure: it takes the locks, appends
 * one item and returns. The timeline is computed only where an answer needs it. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/parse.h"
#include "base/proc.h"
#include "base/str.h"
#include "fakegpu/state.h"
#include "fakegpu/timeline.h"

#define DEFAULT_DEVICES     "NVIDIA H100 80GB HBM3:81559MiB:132"
#define DEFAULT_CONTEXT_MIB 256
#define DEFAULT_KERNEL_NS   10000
#define DEFAULT_TIMESLICE   2000
#define REAP_INTERVAL_NS    100000000ULL /* 100 ms */
#define WAIT_MIN_SLEEP_NS   20000ULL     /* 20 us */
#define WAIT_MAX_SLEEP_NS   50000000ULL  /* 50 ms: re-check for dead processes */

struct fg_state {
    struct fg_shared *sh;
    uint64_t (*now)(void);
    pthread_mutex_t local; /* serialises this handle's threads */
    bool shared_held;      /* under local: whether this handle holds the shared lock */
    int slot;              /* FG_NO_SLOT until claimed */
    uint64_t slot_gen;
    pid_t pid;           /* the process the slot belongs to */
    unsigned fork_epoch; /* fork_count when the slot was claimed: a fork child claims its own */
    uint64_t context_bytes;
    uint64_t kernel_ns;
};

/* Counts forks in this process's lineage so that the launch path can tell a fork child
 * without a getpid() system call. */
static unsigned fork_count;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void count_fork(void)
{
    __atomic_add_fetch(&fork_count, 1, __ATOMIC_RELAXED);
}

static void register_atfork(void)
{
    pthread_atfork(NULL, NULL, count_fork);
}

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

uint64_t fg_now_ns(struct fg_state *st)
{
    return st->now();
}

uint64_t fg_kernel_ns(struct fg_state *st)
{
    return st->kernel_ns;
}

struct fg_shared *fg_state_shared(struct fg_state *st)
{
    return st->sh;
}

int fg_state_slot(struct fg_state *st)
{
    return st->slot;
}

/* ---- environment ------------------------------------------------------------------ */

static int env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
    const char *v = getenv(name);
    if (v == NULL) {
        *out = def;
        return 0;
    }
    struct vg_err err;
    if (vg_parse_u64(v, min, max, out, &err) != 0) {
        fprintf(stderr, "fakegpu: %s='%.64s' is invalid: %s\n", name, v, err.msg);
        return -EINVAL;
    }
    return 0;
}

/* ---- process identity ------------------------------------------------------------- */

static bool slot_alive(const struct fg_slot *s)
{
    if (kill(s->pid, 0) != 0 && errno == ESRCH)
        return false;
    struct vg_proc_stat st;
    int rc = vg_proc_stat_read(NULL, s->pid, &st, NULL);
    if (rc != 0)
        return rc != -ENOENT && rc != -ESRCH; /* unreadable but present: keep it */
    return !vg_proc_state_exited(st.state) && st.start_time == s->start_time;
}

/* ---- slots and reaping (shared lock held) ---------------------------------------- */

static void release_slot(struct fg_shared *sh, int slot)
{
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        struct fg_stream_shared *s = &sh->streams[i];
        if (s->in_use && s->owner == slot) {
            s->in_use = 0;
            s->closing = 0;
            s->completed = s->submitted;
        }
    }
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        for (int dom = 0; dom <= FG_MAX_MIG; dom++) {
            struct fg_device_runtime *rt = fg_timeline_runtime(sh, d, dom);
            if (rt->current == slot)
                rt->current = FG_NO_SLOT;
        }
    }
    struct fg_slot *sl = &sh->slots[slot];
    sl->in_use = 0;
    memset(sl->used_bytes, 0, sizeof sl->used_bytes);
    memset(sl->contexts, 0, sizeof sl->contexts);
    memset(sl->mig, 0, sizeof sl->mig);
    sl->streams = 0;
}

static void reap(struct fg_shared *sh, uint64_t now)
{
    /* The timeline first, so that work a dead process finished before it died still
     * counts as busy time. */
    fg_timeline_advance(sh, now);
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        if (sh->slots[i].in_use && !slot_alive(&sh->slots[i]))
            release_slot(sh, i);
    }
    sh->last_reap_ns = now;
}

static uint64_t device_used(const struct fg_shared *sh, int dev)
{
    uint64_t used = 0;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        if (sh->slots[i].in_use)
            used += sh->slots[i].used_bytes[dev];
    }
    return used;
}

/* Memory of what a process bound to MIG device mig - 1 (0: the whole GPU) can use, and
 * what is used there. */
static uint64_t mig_total(const struct fg_shared *sh, int dev, unsigned mig)
{
    if (mig == 0 || mig > FG_MAX_MIG || sh->info[dev].mig[mig - 1].gi_id == 0)
        return sh->info[dev].total_bytes;
    return sh->info[dev].mig[mig - 1].memory_bytes;
}

static uint64_t mig_used(const struct fg_shared *sh, int dev, unsigned mig)
{
    if (mig == 0)
        return device_used(sh, dev);
    uint64_t used = 0;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        if (sh->slots[i].in_use && sh->slots[i].mig[dev] == mig)
            used += sh->slots[i].used_bytes[dev];
    }
    return used;
}

/* ---- locking ---------------------------------------------------------------------- */

/* Takes both locks. On success the caller must call unlock(). */
static int lock(struct fg_state *st)
{
    pthread_mutex_lock(&st->local);
    int rc = pthread_mutex_lock(&st->sh->lock);
    if (rc == EOWNERDEAD) {
        /* The holder died mid-update: make the mutex usable, then drop what it owned. */
        pthread_mutex_consistent(&st->sh->lock);
        st->shared_held = true;
        reap(st->sh, st->now());
    } else if (rc != 0) {
        pthread_mutex_unlock(&st->local);
        fprintf(stderr, "fakegpu: cannot lock the shared state: %s\n", VG_STRERROR(rc));
        return -EIO;
    }
    st->shared_held = true;
    return 0;
}

static void unlock(struct fg_state *st)
{
    if (st->shared_held) {
        st->shared_held = false;
        pthread_mutex_unlock(&st->sh->lock);
    }
    pthread_mutex_unlock(&st->local);
}

/* This handle's slot, or FG_NO_SLOT (locks held). A fork child never uses its parent's. */
static int own_slot(struct fg_state *st)
{
    if (st->slot == FG_NO_SLOT)
        return FG_NO_SLOT;
    if (st->fork_epoch != __atomic_load_n(&fork_count, __ATOMIC_RELAXED)) {
        st->slot = FG_NO_SLOT;
        return FG_NO_SLOT;
    }
    struct fg_slot *s = &st->sh->slots[st->slot];
    if (!s->in_use || s->gen != st->slot_gen) {
        st->slot = FG_NO_SLOT;
        return FG_NO_SLOT;
    }
    return st->slot;
}

/* Claims a slot for this process on first use (locks held). */
static int claim_slot(struct fg_state *st)
{
    int slot = own_slot(st);
    if (slot != FG_NO_SLOT)
        return slot;
    struct fg_shared *sh = st->sh;
    reap(sh, st->now());
    pid_t pid = getpid();
    uint64_t start;
    if (vg_proc_start_time(NULL, pid, &start, NULL) != 0)
        return -EIO;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        struct fg_slot *s = &sh->slots[i];
        if (s->in_use)
            continue;
        memset(s, 0, sizeof *s);
        s->pid = pid;
        s->start_time = start;
        s->gen = ++sh->gen_counter;
        s->in_use = 1;
        st->slot = i;
        st->slot_gen = s->gen;
        st->pid = pid;
        st->fork_epoch = __atomic_load_n(&fork_count, __ATOMIC_RELAXED);
        return i;
    }
    return -ENOSPC;
}

int fg_state_lock(struct fg_state *st)
{
    return lock(st);
}

void fg_state_unlock(struct fg_state *st)
{
    unlock(st);
}

void fg_state_reap_locked(struct fg_state *st)
{
    reap(st->sh, st->now());
}

int fg_state_claim_locked(struct fg_state *st)
{
    return claim_slot(st);
}

static void reap_if_due(struct fg_state *st, uint64_t now)
{
    if (now - st->sh->last_reap_ns >= REAP_INTERVAL_NS)
        reap(st->sh, now);
}

/* Reaps the dead among dev's processes (those with a context, memory or a stream on it),
 * the rest when due: what a query about dev shows is exact, for a /proc read per process
 * on dev rather than per process on the machine (NVML tools ask several questions about
 * every device each refresh). has_stream[slot]: the live slot has a stream on dev. */
static void reap_device(struct fg_state *st, int dev, uint64_t now, bool has_stream[FG_MAX_PROCS])
{
    struct fg_shared *sh = st->sh;
    memset(has_stream, 0, FG_MAX_PROCS * sizeof has_stream[0]);
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        if (sh->streams[i].in_use && sh->streams[i].dev == dev &&
            (unsigned)sh->streams[i].owner < FG_MAX_PROCS)
            has_stream[sh->streams[i].owner] = true;
    }
    fg_timeline_advance(sh, now);
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        const struct fg_slot *s = &sh->slots[i];
        if (s->in_use && (s->contexts[dev] != 0 || s->used_bytes[dev] != 0 || has_stream[i]) &&
            !slot_alive(s)) {
            release_slot(sh, i);
            has_stream[i] = false;
        }
    }
    reap_if_due(st, now);
}

static void sleep_ns(uint64_t ns)
{
    if (ns < WAIT_MIN_SLEEP_NS)
        ns = WAIT_MIN_SLEEP_NS;
    if (ns > WAIT_MAX_SLEEP_NS)
        ns = WAIT_MAX_SLEEP_NS;
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ULL),
                          .tv_nsec = (long)(ns % 1000000000ULL)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- opening ---------------------------------------------------------------------- */

static int init_shared(struct fg_shared *sh, const struct fg_device_info *devs, int count,
                       uint64_t timeslice_ns, uint64_t now)
{
    memset(sh, 0, sizeof *sh);
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    int rc = pthread_mutex_init(&sh->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (rc != 0)
        return -rc;
    sh->device_count = (uint32_t)count;
    memcpy(sh->info, devs, sizeof devs[0] * (size_t)count);
    for (int d = 0; d < FG_MAX_DEVICES; d++) {
        for (int dom = 0; dom <= FG_MAX_MIG; dom++) {
            fg_timeline_runtime(sh, d, dom)->current = FG_NO_SLOT;
            fg_timeline_runtime(sh, d, dom)->t = now;
        }
    }
    sh->timeslice_ns = timeslice_ns;
    sh->last_reap_ns = now;
    sh->size = sizeof *sh;
    sh->version = FG_STATE_VERSION;
    /* Last: a file with a magic is a file whose initialisation finished. */
    __atomic_store_n(&sh->magic, FG_STATE_MAGIC, __ATOMIC_RELEASE);
    return 0;
}

/* Unlocks, then closes, the state file: explicitly, since the mapping keeps the open
 * file (and so a flock) alive past close. */
static void unlock_closep(int *fd)
{
    if (*fd >= 0) {
        flock(*fd, LOCK_UN);
        close(*fd);
    }
    *fd = -1;
}

/* Maps the locked state file fd, creating the state when the file is new. */
static int map_locked(int fd, const char *path, const struct fg_device_info *devs, int count,
                      uint64_t timeslice_ns, uint64_t now, struct fg_shared **out)
{
    struct fg_shared *sh;
    struct stat stbuf;
    if (fstat(fd, &stbuf) != 0)
        return -EIO;
    bool fresh = stbuf.st_size == 0;
    if (fresh && ftruncate(fd, (off_t)sizeof *sh) != 0) {
        fprintf(stderr, "fakegpu: cannot size state file '%s': %s\n", path, VG_STRERROR(errno));
        return -EIO;
    }
    if (!fresh && (uint64_t)stbuf.st_size != sizeof *sh) {
        fprintf(stderr,
                "fakegpu: state file '%s' has %lld bytes, expected %zu (another fakegpu "
                "version?); remove it\n",
                path, (long long)stbuf.st_size, sizeof *sh);
        return -EIO;
    }
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "fakegpu: cannot map state file '%s': %s\n", path, VG_STRERROR(errno));
        return -EIO;
    }
    int rc = 0;
    uint64_t magic = __atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE);
    if (magic == 0 && sh->version == 0 && sh->size == 0) {
        /* New, or its creator died before finishing: we hold the flock, so it is ours. */
        rc = init_shared(sh, devs, count, timeslice_ns, now);
    } else if (magic != FG_STATE_MAGIC || sh->version != FG_STATE_VERSION ||
               sh->size != sizeof *sh || sh->device_count == 0 ||
               sh->device_count > FG_MAX_DEVICES || sh->stream_high > FG_STREAM_POOL) {
        fprintf(stderr,
                "fakegpu: state file '%s' is not a fakegpu v%u state (magic %016llx, version "
                "%u); remove it\n",
                path, FG_STATE_VERSION, (unsigned long long)magic, sh->version);
        rc = -EIO;
    }
    if (rc != 0) {
        munmap(sh, sizeof *sh);
        return rc;
    }
    *out = sh;
    return 0;
}

static int map_state(const char *dir, const struct fg_device_info *devs, int count,
                     uint64_t timeslice_ns, uint64_t now, struct fg_shared **out)
{
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "fakegpu: cannot create FAKEGPU_STATE_DIR '%s': %s\n", dir,
                VG_STRERROR(errno));
        return -EIO;
    }
    char path[PATH_MAX];
    if (vg_snprintf(path, sizeof path, "%s/fakegpu.state", dir) < 0) {
        fprintf(stderr, "fakegpu: FAKEGPU_STATE_DIR '%.64s...' is too long\n", dir);
        return -EINVAL;
    }
    __attribute__((cleanup(unlock_closep))) int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "fakegpu: cannot open state file '%s': %s\n", path, VG_STRERROR(errno));
        return -EIO;
    }
    while (flock(fd, LOCK_EX) != 0)
        if (errno != EINTR)
            return -EIO;
    return map_locked(fd, path, devs, count, timeslice_ns, now, out);
}

int fg_state_open(struct fg_state **out, const char *dir, const char *devices,
                  uint64_t (*now_ns)(void))
{
    struct vg_err err;
    struct fg_device_info devs[FG_MAX_DEVICES];
    int count = 0;
    if (fg_parse_devices(devices ? devices : DEFAULT_DEVICES, devs, FG_MAX_DEVICES, &count, &err) !=
        0) {
        fprintf(stderr, "fakegpu: %s\n", err.msg);
        return -EINVAL;
    }
    if (fg_parse_mig(getenv("FAKEGPU_MIG"), devs, count, &err) != 0) {
        fprintf(stderr, "fakegpu: %s\n", err.msg);
        return -EINVAL;
    }
    uint64_t context_mib, kernel_ns, timeslice_us;
    if (env_u64("FAKEGPU_CONTEXT_MIB", DEFAULT_CONTEXT_MIB, 0, 1u << 20, &context_mib) != 0 ||
        env_u64("FAKEGPU_KERNEL_NS", DEFAULT_KERNEL_NS, 0, 3600000000000ULL, &kernel_ns) != 0 ||
        env_u64("FAKEGPU_TIMESLICE_US", DEFAULT_TIMESLICE, 1, 10000000, &timeslice_us) != 0)
        return -EINVAL;

    char default_dir[64];
    if (dir == NULL) {
        if (vg_snprintf(default_dir, sizeof default_dir, "/dev/shm/fakegpu-%u",
                        (unsigned)getuid()) < 0)
            return -EINVAL;
        dir = default_dir;
    }
    if (dir[0] == '\0') {
        fprintf(stderr, "fakegpu: FAKEGPU_STATE_DIR is empty\n");
        return -EINVAL;
    }
    pthread_once(&atfork_once, register_atfork);
    struct fg_state *st = calloc(1, sizeof *st);
    if (st == NULL)
        return -ENOMEM;
    st->now = now_ns ? now_ns : monotonic_ns;
    st->slot = FG_NO_SLOT;
    st->pid = getpid();
    st->context_bytes = context_mib << 20;
    st->kernel_ns = kernel_ns;
    pthread_mutex_init(&st->local, NULL);
    int rc = map_state(dir, devs, count, timeslice_us * 1000, st->now(), &st->sh);
    if (rc != 0) {
        pthread_mutex_destroy(&st->local);
        free(st);
        return rc;
    }
    *out = st;
    return 0;
}

void fg_state_close(struct fg_state *st)
{
    if (st == NULL)
        return;
    if (lock(st) == 0) {
        int slot = own_slot(st);
        if (slot != FG_NO_SLOT) {
            fg_timeline_advance(st->sh, st->now());
            release_slot(st->sh, slot);
        }
        unlock(st);
    }
    munmap(st->sh, sizeof *st->sh);
    pthread_mutex_destroy(&st->local);
    free(st);
}

static pthread_mutex_t global_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fg_state *global_state;
static int global_error;

int fg_state_get(struct fg_state **out)
{
    pthread_mutex_lock(&global_lock);
    if (global_state == NULL && global_error == 0) {
        int rc = fg_state_open(&global_state, getenv("FAKEGPU_STATE_DIR"),
                               getenv("FAKEGPU_DEVICES"), NULL);
        if (rc != 0) {
            global_state = NULL;
            global_error = rc; /* reported once; the environment will not change */
        }
    }
    int rc = global_error;
    if (rc == 0)
        *out = global_state;
    pthread_mutex_unlock(&global_lock);
    return rc;
}

/* ---- devices ---------------------------------------------------------------------- */

int fg_state_device_count(struct fg_state *st)
{
    return (int)st->sh->device_count;
}

static bool bad_dev(struct fg_state *st, int dev)
{
    return dev < 0 || (uint32_t)dev >= st->sh->device_count;
}

int fg_state_device_info(struct fg_state *st, int dev, struct fg_device_info *out)
{
    if (bad_dev(st, dev) || out == NULL)
        return -EINVAL;
    /* Under the lock: MIG instances change at run time. */
    if (lock(st) != 0)
        return -EIO;
    *out = st->sh->info[dev];
    unlock(st);
    out->name[FG_NAME_MAX - 1] = '\0';
    out->uuid[sizeof out->uuid - 1] = '\0';
    out->pci_bus_id[sizeof out->pci_bus_id - 1] = '\0';
    return 0;
}

/* ---- contexts and memory ---------------------------------------------------------- */

/* Charges bytes to this process on dev, exactly within capacity (locks held). */
/* With the lock held. A card that looks full is checked once more after reaping dead
 * processes, so memory a killed process held is never refused to the living. */
static int charge(struct fg_state *st, int slot, int dev, uint64_t bytes)
{
    unsigned mig = st->sh->slots[slot].mig[dev];
    uint64_t total = mig_total(st->sh, dev, mig);
    uint64_t used = mig_used(st->sh, dev, mig);
    if (bytes <= total && used > total - bytes) {
        reap(st->sh, st->now());
        used = mig_used(st->sh, dev, mig);
    }
    if (bytes > total || used > total - bytes)
        return -ENOMEM;
    st->sh->slots[slot].used_bytes[dev] += bytes;
    return 0;
}

int fg_ctx_attach(struct fg_state *st, int dev)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    int slot = claim_slot(st);
    if (slot < 0) {
        rc = slot;
    } else {
        rc = charge(st, slot, dev, st->context_bytes);
        if (rc == 0)
            st->sh->slots[slot].contexts[dev]++;
    }
    unlock(st);
    return rc;
}

int fg_ctx_detach(struct fg_state *st, int dev)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    int slot = own_slot(st);
    struct fg_slot *s = slot == FG_NO_SLOT ? NULL : &st->sh->slots[slot];
    if (s == NULL || s->contexts[dev] == 0) {
        rc = -EINVAL;
    } else {
        s->contexts[dev]--;
        s->used_bytes[dev] -=
            s->used_bytes[dev] < st->context_bytes ? s->used_bytes[dev] : st->context_bytes;
    }
    unlock(st);
    return rc;
}

int fg_mem_reserve(struct fg_state *st, int dev, uint64_t bytes)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    int slot = claim_slot(st);
    rc = slot < 0 ? slot : charge(st, slot, dev, bytes);
    unlock(st);
    return rc;
}

int fg_mem_release(struct fg_state *st, int dev, uint64_t bytes)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    int slot = own_slot(st);
    struct fg_slot *s = slot == FG_NO_SLOT ? NULL : &st->sh->slots[slot];
    if (s == NULL || s->used_bytes[dev] < bytes)
        rc = bytes == 0 ? 0 : -EINVAL;
    else
        s->used_bytes[dev] -= bytes;
    unlock(st);
    return rc;
}

int fg_mem_info(struct fg_state *st, int dev, uint64_t *used, uint64_t *total)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    bool has_stream[FG_MAX_PROCS];
    reap_device(st, dev, st->now(), has_stream);
    /* A process inside a MIG device sees that device's memory, as CUDA shows it there. */
    int slot = own_slot(st);
    unsigned mig = slot == FG_NO_SLOT ? 0 : st->sh->slots[slot].mig[dev];
    if (used != NULL)
        *used = mig_used(st->sh, dev, mig);
    if (total != NULL)
        *total = mig_total(st->sh, dev, mig);
    unlock(st);
    return 0;
}

/* ---- streams ---------------------------------------------------------------------- */

/* The stream if it exists and belongs to this process (locks held). */
static struct fg_stream_shared *own_stream(struct fg_state *st, int stream_id)
{
    if (stream_id < 0 || stream_id >= FG_STREAM_POOL)
        return NULL;
    int slot = own_slot(st);
    struct fg_stream_shared *s = &st->sh->streams[stream_id];
    if (slot == FG_NO_SLOT || !s->in_use || s->closing || s->owner != slot ||
        s->owner_gen != st->slot_gen)
        return NULL;
    return s;
}

/* fg_stream_open's work, with the state locked. */
static int stream_open_locked(struct fg_state *st, int dev, int *stream_id)
{
    struct fg_shared *sh = st->sh;
    int slot = claim_slot(st);
    if (slot < 0)
        return slot;
    fg_timeline_advance(sh, st->now()); /* lets closed streams drain and free up */
    if (sh->slots[slot].streams >= FG_MAX_STREAMS)
        return -ENOSPC;
    for (int i = 0; i < FG_STREAM_POOL; i++) {
        struct fg_stream_shared *s = &sh->streams[i];
        if (s->in_use)
            continue;
        s->owner = slot;
        s->owner_gen = st->slot_gen;
        s->dev = dev;
        s->closing = 0;
        s->submitted = s->completed = 0;
        s->in_use = 1;
        if ((uint32_t)i >= sh->stream_high)
            sh->stream_high = (uint32_t)i + 1;
        sh->slots[slot].streams++;
        *stream_id = i;
        return 0;
    }
    return -ENOSPC;
}

int fg_stream_open(struct fg_state *st, int dev, int *stream_id)
{
    if (bad_dev(st, dev) || stream_id == NULL)
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    rc = stream_open_locked(st, dev, stream_id);
    unlock(st);
    return rc;
}

int fg_stream_close(struct fg_state *st, int stream_id)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_stream_shared *s = own_stream(st, stream_id);
    if (s == NULL) {
        rc = -EINVAL;
    } else {
        s->closing = 1;
        st->sh->slots[s->owner].streams--;
        fg_timeline_advance(st->sh, st->now()); /* frees it now if already drained */
    }
    unlock(st);
    return rc;
}

/* Appends an item, waiting in real time while the ring is full (locks held on entry and
 * on return). */
static int push_item(struct fg_state *st, int stream_id, struct fg_item item, uint64_t *seq)
{
    for (;;) {
        struct fg_stream_shared *s = own_stream(st, stream_id);
        if (s == NULL)
            return -EINVAL;
        uint64_t now = st->now();
        if (s->submitted - s->completed >= FG_STREAM_DEPTH) {
            fg_timeline_advance(st->sh, now);
            reap_if_due(st, now);
        }
        if (s->submitted - s->completed < FG_STREAM_DEPTH) {
            item.submit_ns = now;
            s->ring[s->submitted % FG_STREAM_DEPTH] = item;
            s->submitted++;
            if (seq != NULL)
                *seq = s->submitted;
            reap_if_due(st, now);
            return 0;
        }
        /* Full, like a full push buffer: the head must finish before there is room. */
        const struct fg_item *h = &s->ring[s->completed % FG_STREAM_DEPTH];
        uint64_t wait = h->kind == FG_ITEM_KERNEL ? h->remaining_ns : 0;
        unlock(st);
        sleep_ns(wait);
        int rc = lock(st);
        if (rc != 0) {
            pthread_mutex_lock(&st->local); /* the caller's unlock() releases only this */
            return rc;
        }
    }
}

int fg_stream_launch(struct fg_state *st, int stream_id, uint64_t duration_ns, uint64_t *seq)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_item item = {.kind = FG_ITEM_KERNEL, .remaining_ns = duration_ns};
    rc = push_item(st, stream_id, item, seq);
    unlock(st);
    return rc;
}

/* Any in-use stream, for queries and waits (locks held); NULL if gone. */
static struct fg_stream_shared *any_stream(struct fg_state *st, int stream_id)
{
    if (stream_id < 0 || stream_id >= FG_STREAM_POOL)
        return NULL;
    struct fg_stream_shared *s = &st->sh->streams[stream_id];
    return s->in_use ? s : NULL;
}

int fg_stream_done(struct fg_state *st, int stream_id, uint64_t seq, bool *done)
{
    if (done == NULL)
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_stream_shared *s = any_stream(st, stream_id);
    if (s == NULL) {
        rc = -EINVAL;
    } else {
        fg_timeline_advance(st->sh, st->now());
        *done = s->completed >= seq || !s->in_use;
    }
    unlock(st);
    return rc;
}

/* Waits until stream_id's queue is empty or the stream is gone (its owner died); sleeps
 * for at least the kernel work ahead. */
int fg_stream_wait(struct fg_state *st, int stream_id)
{
    if (stream_id < 0 || stream_id >= FG_STREAM_POOL)
        return -EINVAL;
    for (;;) {
        int rc = lock(st);
        if (rc != 0)
            return rc;
        uint64_t now = st->now();
        fg_timeline_advance(st->sh, now);
        reap_if_due(st, now);
        struct fg_stream_shared *s = any_stream(st, stream_id);
        if (s == NULL || s->completed == s->submitted) {
            unlock(st);
            return 0;
        }
        uint64_t pending = fg_stream_pending_ns(s);
        unlock(st);
        sleep_ns(pending);
    }
}

int fg_device_wait(struct fg_state *st, int dev)
{
    if (bad_dev(st, dev))
        return -EINVAL;
    for (;;) {
        int rc = lock(st);
        if (rc != 0)
            return rc;
        struct fg_shared *sh = st->sh;
        uint64_t now = st->now();
        fg_timeline_advance(sh, now);
        reap_if_due(st, now);
        int slot = own_slot(st);
        uint64_t longest = 0;
        bool busy = false;
        for (uint32_t i = 0; slot != FG_NO_SLOT && i < sh->stream_high; i++) {
            struct fg_stream_shared *s = &sh->streams[i];
            if (!s->in_use || s->owner != slot || s->dev != dev || s->completed == s->submitted)
                continue;
            busy = true;
            uint64_t p = fg_stream_pending_ns(s);
            if (p > longest)
                longest = p;
        }
        unlock(st);
        if (!busy)
            return 0;
        sleep_ns(longest);
    }
}

/* ---- events ----------------------------------------------------------------------- */

static struct fg_event_shared *own_event(struct fg_state *st, int event_id)
{
    int slot = own_slot(st);
    if (slot == FG_NO_SLOT || event_id < 0 || event_id >= FG_MAX_EVENTS)
        return NULL;
    struct fg_event_shared *ev = &st->sh->slots[slot].events[event_id];
    return ev->in_use ? ev : NULL;
}

int fg_event_create(struct fg_state *st, int *event_id)
{
    if (event_id == NULL)
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    int slot = claim_slot(st);
    if (slot < 0) {
        rc = slot;
    } else {
        rc = -ENOSPC;
        struct fg_event_shared *evs = st->sh->slots[slot].events;
        for (int i = 0; i < FG_MAX_EVENTS; i++) {
            if (evs[i].in_use)
                continue;
            memset(&evs[i], 0, sizeof evs[i]);
            evs[i].stream = -1;
            evs[i].in_use = 1;
            *event_id = i;
            rc = 0;
            break;
        }
    }
    unlock(st);
    return rc;
}

int fg_event_destroy(struct fg_state *st, int event_id)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_event_shared *ev = own_event(st, event_id);
    if (ev == NULL)
        rc = -EINVAL;
    else
        ev->in_use = 0; /* queued markers find it gone; waits on it pass */
    unlock(st);
    return rc;
}

int fg_event_record(struct fg_state *st, int event_id, int stream_id)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_event_shared *ev = own_event(st, event_id);
    if (ev == NULL || own_stream(st, stream_id) == NULL) {
        unlock(st);
        return -EINVAL;
    }
    uint64_t gen = ++st->sh->gen_counter;
    struct fg_item item = {.kind = FG_ITEM_MARKER, .event = (uint32_t)event_id, .gen = gen};
    uint64_t seq = 0;
    /* The record's generation is set before the marker is queued: push_item may advance
     * the timeline (a periodic reap), and a marker reached before its event knows its
     * generation would never complete the event. */
    uint64_t previous_gen = ev->rec_gen;
    ev->rec_gen = gen;
    rc = push_item(st, stream_id, item, &seq);
    ev = own_event(st, event_id); /* push_item may have dropped the locks */
    if (ev != NULL && rc != 0 && ev->rec_gen == gen) {
        ev->rec_gen = previous_gen;
    } else if (rc == 0 && ev != NULL) {
        ev->stream = stream_id;
        ev->seq = seq;
        fg_timeline_advance(st->sh, st->now()); /* idle stream: completes right away */
    }
    unlock(st);
    return rc;
}

int fg_event_query(struct fg_state *st, int event_id, uint64_t *time_ns)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    fg_timeline_advance(st->sh, st->now());
    struct fg_event_shared *ev = own_event(st, event_id);
    if (ev == NULL || ev->rec_gen == 0)
        rc = -EINVAL;
    else if (ev->done_gen < ev->rec_gen)
        rc = -EAGAIN;
    else if (time_ns != NULL)
        *time_ns = ev->time_ns;
    unlock(st);
    return rc;
}

int fg_event_wait(struct fg_state *st, int event_id)
{
    for (;;) {
        int rc = lock(st);
        if (rc != 0)
            return rc;
        uint64_t now = st->now();
        fg_timeline_advance(st->sh, now);
        reap_if_due(st, now);
        struct fg_event_shared *ev = own_event(st, event_id);
        if (ev == NULL || ev->done_gen >= ev->rec_gen) {
            unlock(st);
            return ev == NULL ? -EINVAL : 0; /* never recorded: nothing to wait for */
        }
        /* The kernels ahead of the marker are a lower bound on the time left. */
        uint64_t pending = 0;
        struct fg_stream_shared *s = own_stream(st, ev->stream);
        for (uint64_t n = s ? s->completed : 0; s != NULL && n < ev->seq && n < s->submitted; n++) {
            const struct fg_item *it = &s->ring[n % FG_STREAM_DEPTH];
            if (it->kind == FG_ITEM_KERNEL)
                pending += it->remaining_ns;
        }
        unlock(st);
        sleep_ns(pending);
    }
}

int fg_stream_wait_event(struct fg_state *st, int stream_id, int event_id)
{
    int rc = lock(st);
    if (rc != 0)
        return rc;
    fg_timeline_advance(st->sh, st->now());
    struct fg_event_shared *ev = own_event(st, event_id);
    if (ev == NULL || own_stream(st, stream_id) == NULL) {
        rc = -EINVAL;
    } else if (ev->rec_gen != 0 && ev->done_gen < ev->rec_gen) {
        struct fg_item item = {
            .kind = FG_ITEM_WAIT, .event = (uint32_t)event_id, .gen = ev->rec_gen};
        rc = push_item(st, stream_id, item, NULL);
    }
    unlock(st);
    return rc;
}

/* ---- NVML's views ----------------------------------------------------------------- */

int fg_util_device(struct fg_state *st, int dev, uint64_t window_ns, unsigned *gpu_percent)
{
    if (bad_dev(st, dev) || gpu_percent == NULL)
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    uint64_t now = st->now();
    bool has_stream[FG_MAX_PROCS];
    reap_device(st, dev, now, has_stream);
    uint64_t span;
    uint64_t busy = fg_util_sum(&st->sh->dev[dev].util, now, window_ns, &span);
    uint64_t pct = span ? (busy * 100 + span / 2) / span : 0;
    *gpu_percent = (unsigned)(pct > 100 ? 100 : pct);
    unlock(st);
    return 0;
}

int fg_procs_on_device(struct fg_state *st, int dev, uint64_t window_ns, struct fg_proc_usage *out,
                       unsigned *count)
{
    if (bad_dev(st, dev) || count == NULL || (out == NULL && *count > 0))
        return -EINVAL;
    int rc = lock(st);
    if (rc != 0)
        return rc;
    struct fg_shared *sh = st->sh;
    uint64_t now = st->now();
    bool has_stream[FG_MAX_PROCS];
    reap_device(st, dev, now, has_stream);
    unsigned n = 0;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        const struct fg_slot *s = &sh->slots[i];
        if (!s->in_use || (s->contexts[dev] == 0 && s->used_bytes[dev] == 0 && !has_stream[i]))
            continue;
        if (n < *count) {
            uint64_t span;
            out[n].pid = s->pid;
            out[n].used_bytes = s->used_bytes[dev];
            out[n].gi_id = s->mig[dev] == 0 ? 0 : sh->info[dev].mig[s->mig[dev] - 1].gi_id;
            out[n].busy_ns = fg_util_sum(&s->util[dev], now, window_ns, &span);
        }
        n++;
    }
    rc = n > *count ? -ENOSPC : 0;
    *count = n;
    unlock(st);
    return rc;
}
