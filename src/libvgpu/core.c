/* libvgpu core: loading the real driver, setup from the configuration, the container's
 * region, charging and releasing bytes, pools, contexts, fork and exit.
 *
 * Setup runs once the real driver is initialised (from the cuInit wrapper, from nvmlInit,
 * or lazily from the first intercepted call of a program that initialised the driver
 * some other way). Devices are always named by UUID, taken from the driver for each
 * CUdevice ordinal, so CUDA_VISIBLE_DEVICES in any form (indices, UUIDs) maps the n-th
 * visible device to CUDA_DEVICE_MEMORY_LIMIT_<n> and to the right region entry without
 * libvgpu parsing it. */
#define _GNU_SOURCE
#include "libvgpu/compute.h"
#include "libvgpu/vgpu.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/str.h"

extern char **environ;

struct lv_global lv_g = {
    .setup_lock = PTHREAD_MUTEX_INITIALIZER,
    .attach_lock = PTHREAD_MUTEX_INITIALIZER,
    .ctx_lock = PTHREAD_MUTEX_INITIALIZER,
    .pool_lock = PTHREAD_MUTEX_INITIALIZER,
    .private_fd = -1,
    .limits_gen = &lv_limits_none,
    .limits_lock = PTHREAD_MUTEX_INITIALIZER,
};

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool load_ok;

/* What a missing real entry point answers (driver too old, or no driver at all). */
static CUresult missing_cuda(void)
{
    return CUDA_ERROR_NOT_SUPPORTED;
}
static nvmlReturn_t missing_nvml(void)
{
    return NVML_ERROR_UNINITIALIZED;
}

static void self_marker(void)
{
}

/* True when handle is libvgpu itself (someone named it libcuda.so.1). */
static bool is_self(void *sym)
{
    Dl_info a, b;
    if (sym == NULL || dladdr(sym, &a) == 0 || dladdr((void *)self_marker, &b) == 0)
        return false;
    return a.dli_fbase == b.dli_fbase;
}

static void load_real_once(void)
{
    lv_g.cuda_handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    lv_g.nvml_handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL);
#define LV_RESOLVE_CUDA(name)                                                                      \
    lv_g.real.name = lv_g.cuda_handle ? lv_real_dlsym(lv_g.cuda_handle, #name) : NULL;             \
    if (lv_g.real.name == NULL || is_self((void *)lv_g.real.name))                                 \
        lv_g.real.name = (__typeof__(lv_g.real.name))(void (*)(void))missing_cuda;
#define LV_RESOLVE_NVML(name)                                                                      \
    lv_g.real.name = lv_g.nvml_handle ? lv_real_dlsym(lv_g.nvml_handle, #name) : NULL;             \
    if (lv_g.real.name == NULL || is_self((void *)lv_g.real.name))                                 \
        lv_g.real.name = (__typeof__(lv_g.real.name))(void (*)(void))missing_nvml;
    LV_CUDA_HOOKS(LV_RESOLVE_CUDA)
    LV_CUDA_CALLS(LV_RESOLVE_CUDA)
    LV_NVML_HOOKS(LV_RESOLVE_NVML)
    LV_NVML_CALLS(LV_RESOLVE_NVML)
    void *init = lv_g.cuda_handle ? lv_real_dlsym(lv_g.cuda_handle, "cuInit") : NULL;
    if (init != NULL && is_self(init)) {
        (void)!write(2, "vgpu: libcuda.so.1 resolves to libvgpu itself; refusing to recurse\n", 68);
        init = NULL;
    }
    load_ok = init != NULL;
}

bool lv_load_real(void)
{
    pthread_once(&load_once, load_real_once);
    return load_ok;
}

/* ---- setup ---- */

static void format_uuid(const CUuuid *u, char *out, size_t size)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    (void)vg_snprintf(out, size,
                      "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                      b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                      b[12], b[13], b[14], b[15]);
}

static CUresult device_uuid(CUdevice d, char *out, size_t size)
{
    CUuuid u;
    CUresult r = lv_g.real.cuDeviceGetUuid_v2(&u, d);
    if (r != CUDA_SUCCESS)
        r = lv_g.real.cuDeviceGetUuid(&u, d);
    if (r == CUDA_SUCCESS)
        format_uuid(&u, out, size);
    return r;
}

static void refuse(const char *msg)
{
    char line[VG_ERR_MSG_MAX + 64];
    int n = vg_snprintf(line, sizeof line, "vgpu: %s; CUDA initialisation refused\n", msg);
    if (n < 0)
        n = (int)strlen(line);
    (void)!write(2, line, (size_t)n);
}

/* Says once, on stderr, that enforcement failed closed (whatever the log level: a
 * refusal nobody explains would look like a driver fault). */
static void say_closed(const char *why)
{
    char line[2 * VG_ERR_MSG_MAX + 64];
    int n = vg_snprintf(line, sizeof line, "vgpu: %s; GPU memory allocations refused\n", why);
    if (n < 0)
        n = (int)strlen(line);
    (void)!write(2, line, (size_t)n);
}

/* The visible CUDA devices (at most REGION_MAX_DEVICES) and their UUIDs. */
static int visible_devices(CUdevice *devs, struct region_config *rc, struct vg_err *err)
{
    int count = 0;
    CUresult r = lv_g.real.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return vg_err_set(err, -EIO, "cuDeviceGetCount failed (%d)", (int)r);
    if (count > REGION_MAX_DEVICES)
        count = REGION_MAX_DEVICES;
    memset(rc, 0, sizeof *rc);
    for (int i = 0; i < count; i++) {
        if (lv_g.real.cuDeviceGet(&devs[i], i) != CUDA_SUCCESS ||
            device_uuid(devs[i], rc->devices[i].uuid, sizeof rc->devices[i].uuid) != CUDA_SUCCESS)
            return vg_err_set(err, -EIO, "cannot read the UUID of CUDA device %d", i);
    }
    rc->device_count = (unsigned)count;
    return count;
}

/* This process's limit and share for region device d, which is CUDA device n (-1: none
 * here). In a vgpu container they are the configuration's (the read-only file, lowered by
 * the environment); outside one, the limits the region's creator recorded follow each
 * card by UUID, as they always did (the environment decides there anyway). */
static void give_limit(unsigned d, int n, bool closed)
{
    uint64_t limit;
    uint32_t share = 0;
    if (closed) {
        limit = REGION_LIMIT_CLOSED;
    } else if (lv_g.config.in_container) {
        unsigned k = n >= 0 ? (unsigned)n : d;
        limit = vgpu_config_memory_limit(&lv_g.config, k);
        share = n >= 0 ? vgpu_config_sm_limit(&lv_g.config, k) : 0;
    } else {
        limit = region_device(lv_g.region, d)->memory_limit;
        share = n >= 0 ? region_device(lv_g.region, d)->sm_limit_percent : 0;
    }
    region_set_limit(lv_g.region, d, limit, share);
    if (d < REGION_MAX_DEVICES)
        lv_g.limit_index[d] = n; /* a live resize gives d the n-th limit again */
}

/* Maps each visible device to its region entry and gives the region this process's
 * limits; false (nothing mapped) when in_container and the region lacks a visible GPU. */
static bool map_devices(const CUdevice *devs, const struct region_config *rc, bool closed)
{
    bool mapped[REGION_MAX_DEVICES] = {false};
    for (unsigned i = 0; i < rc->device_count; i++) {
        int d = region_find_device(lv_g.region, rc->devices[i].uuid);
        if (d < 0 && lv_g.config.in_container)
            return false;
        if (devs[i] >= 0 && devs[i] < LV_MAX_CUDEVICES)
            lv_g.dev_of[devs[i]] = d >= 0 ? d : -1;
        if (d < 0) {
            vg_log(VG_LOG_WARN, "device not in the container's region; not limited", "uuid=%s",
                   rc->devices[i].uuid);
            continue;
        }
        if (!mapped[d])
            give_limit((unsigned)d, (int)i, closed);
        mapped[d] = true;
    }
    /* Entries no visible device maps to are charged by nobody here; their limit serves
     * NVML's view only. */
    for (unsigned d = 0; d < region_device_count(lv_g.region); d++)
        if (!mapped[d])
            give_limit(d, -1, closed);
    return true;
}

/* A region only this process sees (a memfd), for failing closed when the container's
 * region cannot be used. */
static int open_private_region(const struct region_config *rc, struct vg_err *err)
{
    int fd = memfd_create("vgpu-closed", MFD_CLOEXEC);
    if (fd < 0)
        return vg_err_errno(err, errno, "private region");
    char path[64];
    if (region_init_fd(fd, rc, err) < 0 ||
        vg_snprintf(path, sizeof path, "/proc/self/fd/%d", fd) < 0 ||
        region_open(path, &lv_g.region, err) < 0) {
        close(fd);
        return vg_err_wrap(err, "private region");
    }
    lv_g.private_fd = fd;
    return 0;
}

/* Enforcement failed closed (why): says so once and refuses every allocation, counted in
 * the container's region when it can be opened and lists every visible GPU, else in a
 * private one. -1 when not even that works (CUDA initialisation is refused then). */
static int setup_closed(const CUdevice *devs, const struct region_config *rc, const char *why,
                        struct vg_err *out)
{
    say_closed(why);
    lv_g.closed = true;
    for (int i = 0; i < LV_MAX_CUDEVICES; i++)
        lv_g.dev_of[i] = -1;
    struct vg_err err = {0};
    if (lv_g.region == NULL)
        (void)region_open(lv_g.config.region_path, &lv_g.region, &err);
    if (lv_g.region != NULL && map_devices(devs, rc, true))
        return 0;
    if (lv_g.region != NULL) {
        region_close(lv_g.region);
        lv_g.region = NULL;
    }
    if (open_private_region(rc, &err) < 0)
        return vg_err_set(out, err.code, "%s", err.msg);
    if (!map_devices(devs, rc, true))
        return vg_err_set(out, -EIO, "private region does not list every visible GPU");
    return 0;
}

/* 0: enforcing (or closed), 1: no device, < 0: refused. */
static int setup_region(struct vg_err *err)
{
    struct region_config rc;
    CUdevice devs[REGION_MAX_DEVICES];
    int count = visible_devices(devs, &rc, err);
    if (count < 0)
        return count;
    if (count == 0)
        return 1; /* no device: nothing to limit */
    if (lv_g.config.closed) {
        char why[VG_ERR_MSG_MAX + 32];
        (void)vg_snprintf(why, sizeof why, "%s", lv_g.config.closed_why);
        return setup_closed(devs, &rc, why, err);
    }
    /* The record of this configuration a new region keeps (what processes outside a vgpu
     * container follow; docs/protocol.md). */
    for (int i = 0; i < count; i++) {
        rc.devices[i].memory_limit = vgpu_config_memory_limit(&lv_g.config, (unsigned)i);
        rc.devices[i].sm_limit_percent = vgpu_config_sm_limit(&lv_g.config, (unsigned)i);
    }
    const char *path = lv_g.config.region_path;
    /* The device plugin made the container's region and mounts that one file: its
     * directory need not be writable here, so a region is only created where none is. */
    int rc_ = region_open(path, &lv_g.region, err);
    if (rc_ == -ENOENT) {
        rc_ = region_create(path, &rc, err);
        if (rc_ >= 0)
            rc_ = region_open(path, &lv_g.region, err);
    }
    if (rc_ < 0) {
        if (!lv_g.config.in_container)
            return vg_err_wrap(err, "region %s", path);
        char why[VG_ERR_MSG_MAX + 32];
        (void)vg_snprintf(why, sizeof why, "region %s unusable: %s", path, err->msg);
        return setup_closed(devs, &rc, why, err);
    }
    if (!map_devices(devs, &rc, false)) {
        char why[VG_ERR_MSG_MAX + 32];
        (void)vg_snprintf(why, sizeof why, "region %s does not list every visible GPU", path);
        return setup_closed(devs, &rc, why, err);
    }
    vgc_setup(&lv_g.config, lv_g.region, path);
    return 0;
}

/* Reads the configuration and resets the device map; false when the configuration is
 * refused (one line on stderr). Setup lock held. */
static bool load_config_locked(void)
{
    struct vg_err err = {0};
    lv_limits_map(); /* first: a resize from here on is seen */
    if (vgpu_config_load(&lv_g.config, environ, &err) < 0) {
        refuse(err.msg);
        return false;
    }
    vg_log_max_level = lv_g.config.log_level;
    for (int i = 0; i < LV_MAX_CUDEVICES; i++)
        lv_g.dev_of[i] = -1;
    return true;
}

/* Setup's outcome once the driver is loaded and initialised; LV_SETUP_NONE leaves it to
 * be tried again later. Setup lock held. */
static int setup_locked(void)
{
    if (!lv_load_real())
        return LV_SETUP_NONE; /* no driver: stay pass-through, try again later */
    int count;
    if (lv_g.real.cuDeviceGetCount(&count) == CUDA_ERROR_NOT_INITIALIZED)
        return LV_SETUP_NONE; /* the program has not called cuInit yet */
    if (!load_config_locked())
        return LV_SETUP_FAILED;
    bool need_region = lv_g.config.memory_limit_set || lv_g.config.region_path_given ||
                       lv_g.config.from_file || lv_g.config.in_container ||
                       vgpu_config_compute_limited(&lv_g.config);
    if (!need_region)
        return LV_SETUP_PASS;
    struct vg_err err = {0};
    int rc = setup_region(&err);
    if (rc < 0) {
        refuse(err.msg);
        return LV_SETUP_FAILED;
    }
    return rc == 0 ? LV_SETUP_REGION : LV_SETUP_PASS;
}

/* NVML in a process that sees no CUDA device (CUDA_VISIBLE_DEVICES empty, "-1", or naming
 * nothing): cuInit fails there, so nothing can be allocated, but NVML still shows every
 * card. The container's region, when it exists, is keyed by UUID and needs no CUDA
 * ordinal, so it still gives those cards the container's view. A missing region leaves
 * setup undone (the next nvmlInit looks again); a malformed one is refused as in CUDA.
 * Setup lock held. */
static int setup_without_cuda_locked(void)
{
    if (!load_config_locked())
        return LV_SETUP_FAILED;
    if (!lv_g.config.memory_limit_set && !lv_g.config.region_path_given && !lv_g.config.from_file &&
        !lv_g.config.in_container)
        return LV_SETUP_PASS;
    struct vg_err err = {0};
    int rc = region_open(lv_g.config.region_path, &lv_g.region, &err);
    if (rc == -ENOENT)
        return LV_SETUP_NONE;
    if (rc < 0) {
        refuse(err.msg);
        return LV_SETUP_FAILED;
    }
    /* NVML's view only: in a container the n-th entry takes the n-th limit, as the
     * device plugin wrote both. */
    for (unsigned d = 0; d < region_device_count(lv_g.region); d++)
        give_limit(d, -1, lv_g.config.closed);
    return LV_SETUP_REGION;
}

/* Runs one of the above under the setup lock unless setup is already done, and publishes
 * its outcome (LV_SETUP_NONE is not published: the next call tries again). */
static int run_setup(int (*locked)(void))
{
    pthread_mutex_lock(&lv_g.setup_lock);
    int s = atomic_load(&lv_g.setup);
    if (s == LV_SETUP_NONE) {
        s = locked();
        if (s != LV_SETUP_NONE)
            atomic_store_explicit(&lv_g.setup, s, memory_order_release);
    }
    pthread_mutex_unlock(&lv_g.setup_lock);
    return s;
}

int lv_setup_slow(void)
{
    return run_setup(setup_locked);
}

int lv_setup_without_cuda(void)
{
    return run_setup(setup_without_cuda_locked);
}

CUresult lv_setup_result(void)
{
    return lv_ensure_setup() == LV_SETUP_FAILED ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- devices and contexts ---- */

int lv_regdev_of_cudevice(CUdevice dev)
{
    if (dev < 0 || dev >= LV_MAX_CUDEVICES)
        return -1;
    return lv_g.dev_of[dev];
}

/* initial-exec: libvgpu is loaded at start-up (LD_PRELOAD, /etc/ld.so.preload), so its TLS
 * is static and reads cost one instruction instead of a __tls_get_addr call. */
__thread __attribute__((tls_model("initial-exec"))) struct lv_thread lv_thread;

CUresult lv_current_refresh(CUcontext c)
{
    uint32_t epoch = atomic_load_explicit(&lv_g.ctx_epoch, memory_order_acquire);
    CUresult r = lv_g.real.cuCtxGetDevice(&lv_thread.scratch_dev);
    if (r != CUDA_SUCCESS)
        return r;
    lv_thread.ctx = c;
    lv_thread.epoch = epoch;
    lv_thread.cudev = lv_thread.scratch_dev;
    lv_thread.regdev = lv_regdev_of_cudevice(lv_thread.cudev);
    return CUDA_SUCCESS;
}

/* ---- charging ---- */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void lv_log_oom(int dev, uint64_t bytes)
{
    if (vg_log_max_level < VG_LOG_WARN || dev < 0 || dev >= REGION_MAX_DEVICES)
        return;
    /* First refusal per device, then at most one line every 10 s. */
    int64_t now = now_ns(), last = atomic_load(&lv_g.oom_logged_ns[dev]);
    if (last != 0 && now - last < INT64_C(10000000000))
        return;
    if (!atomic_compare_exchange_strong(&lv_g.oom_logged_ns[dev], &last, now))
        return;
    uint64_t used = 0, limit = 0;
    (void)region_usage(lv_g.region, (unsigned)dev, &used, &limit);
    vg_log(VG_LOG_WARN, "allocation refused: container memory limit reached",
           "uuid=%s request=%llu used=%llu limit=%llu",
           region_device(lv_g.region, (unsigned)dev)->uuid, (unsigned long long)bytes,
           (unsigned long long)used, (unsigned long long)limit);
}

static bool ensure_attached(void)
{
    if (LV_LIKELY(atomic_load_explicit(&lv_g.attached, memory_order_acquire)))
        return true;
    pthread_mutex_lock(&lv_g.attach_lock);
    bool ok = atomic_load(&lv_g.attached);
    if (!ok) {
        struct vg_err err = {0};
        ok = region_attach(lv_g.region, &err) == 0;
        if (ok)
            atomic_store_explicit(&lv_g.attached, true, memory_order_release);
        else if (!atomic_exchange(&lv_g.attach_said, true))
            say_closed(err.msg); /* once: every allocation is refused until a slot frees */
    }
    pthread_mutex_unlock(&lv_g.attach_lock);
    return ok;
}

void lv_reclaim_for_view(void)
{
    lv_limits_check(); /* the view shows the newest limit */
    /* At most every 50 ms per process: a probe per live slot is a syscall each. */
    static _Atomic int64_t last;
    int64_t now = now_ns(), prev = atomic_load_explicit(&last, memory_order_relaxed);
    if (prev != 0 && now - prev < 50000000)
        return;
    if (!atomic_compare_exchange_strong(&last, &prev, now))
        return;
    unsigned n = 0;
    (void)region_reclaim(lv_g.region, &n);
}

/* lv_charge's slow path: attach first, or a refusal (maybe after reclaiming). */
CUresult lv_charge_slow(int dev, uint64_t bytes)
{
    if (bytes == 0)
        return CUDA_SUCCESS;
    lv_limits_check();
    if (!ensure_attached())
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (LV_UNLIKELY(lv_g.closed)) {
        region_note_closed(lv_g.region);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int rc = region_reserve(lv_g.region, (unsigned)dev, bytes);
    if (rc == -ENOMEM) {
        /* Pools may have given memory back at a synchronisation we did not see. */
        lv_pool_resync_all();
        rc = region_reserve(lv_g.region, (unsigned)dev, bytes);
    }
    if (rc == 0)
        return CUDA_SUCCESS;
    uint64_t used = 0;
    static _Atomic bool insane_said;
    if (region_usage(lv_g.region, (unsigned)dev, &used, NULL) == 0 && used >= INT64_MAX &&
        !atomic_exchange(&insane_said, true))
        say_closed("the container's region counts more than any GPU holds (forged); "
                   "treated as full");
    lv_log_oom(dev, bytes);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

void lv_record_replaced(const struct lv_track_entry *old)
{
    /* The driver reused an address whose free we never saw (freed with its context). */
    if (old->graph)
        lv_graph_freed(old->dev, old->bytes);
    else if (old->async)
        lv_pool_freed((CUmemoryPool)old->pool, old->dev, old->bytes);
    else
        lv_uncharge(old->dev, old->bytes);
}

/* ---- pools ---- */

static struct lv_pool *pool_find(CUmemoryPool pool, bool create, int dev)
{
    struct lv_pool *free_slot = NULL;
    for (unsigned i = 0; i < LV_MAX_POOLS; i++) {
        struct lv_pool *p = &lv_g.pools[i];
        if (p->pool == pool)
            return p;
        if (p->pool == NULL && free_slot == NULL)
            free_slot = p;
    }
    if (!create || free_slot == NULL)
        return NULL;
    free_slot->pool = pool;
    free_slot->dev = dev;
    free_slot->charged = 0;
    free_slot->live = 0;
    free_slot->inflight = 0;
    return free_slot;
}

static uint64_t sub_sat(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* Brings the pool's charge to what the driver says the pool holds plus what allocations
 * in flight may still add. false when the region cannot take the growth (the charge is
 * left as it was). Lock held. */
static bool pool_resync_locked(struct lv_pool *p)
{
    cuuint64_t reserved = 0;
    if (lv_g.real.cuMemPoolGetAttribute(p->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) !=
        CUDA_SUCCESS)
        reserved = p->live; /* no answer: at least what is allocated from it */
    uint64_t target = reserved + p->inflight < reserved ? UINT64_MAX : reserved + p->inflight;
    bool ok = true;
    if (target < p->charged) {
        lv_uncharge(p->dev, p->charged - target);
        p->charged = target;
    } else if (target > p->charged) {
        /* The pool grew past what was charged (its cache served less than counted on,
         * or the driver rounds up): count what the driver holds. */
        ok = region_reserve(lv_g.region, (unsigned)p->dev, target - p->charged) == 0;
        if (ok)
            p->charged = target;
    }
    if (ok && p->charged == 0 && p->live == 0 && p->inflight == 0)
        p->pool = NULL; /* holds nothing: its slot is free again */
    return ok;
}

/* A resync that may not fail: a pool that holds more than the region took is trimmed
 * to its charge (unused cached memory goes back to the device), then counted again.
 * Lock held. */
static bool pool_settle_locked(struct lv_pool *p)
{
    if (pool_resync_locked(p))
        return true;
    (void)lv_g.real.cuMemPoolTrimTo(p->pool, (size_t)sub_sat(p->charged, p->inflight));
    return pool_resync_locked(p);
}

CUresult lv_pool_begin(CUmemoryPool pool, int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    uint64_t cached = p != NULL ? sub_sat(p->charged, p->live + p->inflight) : 0;
    pthread_mutex_unlock(&lv_g.pool_lock);
    /* Charged outside the lock: a refusal re-reads every pool (lv_charge_slow). */
    uint64_t need = sub_sat(bytes, cached);
    CUresult r = lv_charge(dev, need);
    if (r != CUDA_SUCCESS)
        return r;
    pthread_mutex_lock(&lv_g.pool_lock);
    p = pool_find(pool, true, dev);
    if (p != NULL) {
        p->charged += need;
        p->inflight += bytes;
    }
    pthread_mutex_unlock(&lv_g.pool_lock);
    if (p == NULL) {
        /* The table is full: a pool libvgpu cannot follow is not used at all. */
        lv_uncharge(dev, need);
        lv_log_oom(dev, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return CUDA_SUCCESS;
}

CUresult lv_pool_end(CUmemoryPool pool, uint64_t bytes, bool allocated)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    bool ok = true;
    if (p != NULL) {
        p->inflight = sub_sat(p->inflight, bytes);
        if (allocated)
            p->live += bytes;
        ok = allocated ? pool_resync_locked(p) : pool_settle_locked(p);
    }
    pthread_mutex_unlock(&lv_g.pool_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

void lv_pool_drain(CUmemoryPool pool)
{
    /* The free is stream-ordered: the block returns to the pool when its stream gets
     * there. A refusal is rare; waiting here keeps the pool within its charge. */
    (void)lv_g.real.cuCtxSynchronize();
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    if (p != NULL)
        (void)pool_settle_locked(p);
    pthread_mutex_unlock(&lv_g.pool_lock);
}

void lv_pool_freed(CUmemoryPool pool, int dev, uint64_t bytes)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    if (p != NULL) {
        p->live = sub_sat(p->live, bytes);
        (void)pool_settle_locked(p);
    }
    pthread_mutex_unlock(&lv_g.pool_lock);
    if (p == NULL)
        lv_uncharge(dev, bytes);
}

void lv_pool_resync(CUmemoryPool pool)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    if (p != NULL)
        (void)pool_settle_locked(p);
    pthread_mutex_unlock(&lv_g.pool_lock);
}

void lv_pool_resync_all(void)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    for (unsigned i = 0; i < LV_MAX_POOLS; i++)
        if (lv_g.pools[i].pool != NULL)
            (void)pool_settle_locked(&lv_g.pools[i]);
    pthread_mutex_unlock(&lv_g.pool_lock);
}

/* ---- the device graph pools ----
 *
 * The driver serves graphs' allocations from a pool per device and keeps what a graph
 * freed (its free node, a captured cuMemFreeAsync, a cuMemFree of its address) reserved
 * for the next launch until cuDeviceGraphMemTrim; at a launch it maps what the graph
 * allocates, whatever was charged when the graph was built. So each allocation is charged
 * its size from its creation until its address is freed (graph_live), and whatever the
 * driver reserves for graphs beyond the live allocations is charged on top (graph_kept),
 * re-read after every graph allocation, free, trim and launch. When the region cannot
 * take what the pool grew by, the pool is trimmed and read again; what a launch mapped
 * beyond that stays uncharged until the next re-read (docs/security.md). */

/* Not pool_lock: a refused charge re-reads the pools under it (lv_charge_slow). */
static pthread_mutex_t graph_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t graph_reserved(int rd, bool *ok)
{
    cuuint64_t v = 0;
    int cd = lv_g.graph_cudev[rd] - 1;
    *ok = cd >= 0 && lv_g.real.cuDeviceGetGraphMemAttribute != NULL &&
          lv_g.real.cuDeviceGetGraphMemAttribute(cd, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v) ==
              CUDA_SUCCESS;
    return v;
}

static void graph_resync_locked(int rd)
{
    for (int pass = 0; pass < 2; pass++) {
        bool ok;
        uint64_t reserved = graph_reserved(rd, &ok);
        if (!ok)
            return;
        uint64_t live = lv_g.graph_live[rd], kept = lv_g.graph_kept[rd];
        uint64_t target = reserved > live ? reserved - live : 0;
        if (target <= kept) {
            lv_uncharge(rd, kept - target);
            lv_g.graph_kept[rd] = target;
            return;
        }
        if (lv_charge(rd, target - kept) == CUDA_SUCCESS) {
            lv_g.graph_kept[rd] = target;
            return;
        }
        /* More than the region takes: give the pool's unused memory back, then again. */
        if (pass == 0 && lv_g.real.cuDeviceGraphMemTrim != NULL)
            (void)lv_g.real.cuDeviceGraphMemTrim(lv_g.graph_cudev[rd] - 1);
    }
    lv_log_oom(rd, 0);
}

void lv_graph_resync(int rd)
{
    if (rd < 0 || rd >= REGION_MAX_DEVICES)
        return;
    pthread_mutex_lock(&graph_lock);
    graph_resync_locked(rd);
    pthread_mutex_unlock(&graph_lock);
}

void lv_graph_resync_all(void)
{
    pthread_mutex_lock(&graph_lock);
    for (int rd = 0; rd < REGION_MAX_DEVICES; rd++)
        if (lv_g.graph_cudev[rd] != 0)
            graph_resync_locked(rd);
    pthread_mutex_unlock(&graph_lock);
}

CUresult lv_record_graph(uint64_t key, int rd, CUdevice cudev, uint64_t bytes, CUcontext ctx)
{
    struct lv_track_entry e = {.key = key,
                               .space = LV_TRACK_DEVPTR,
                               .dev = (uint16_t)rd,
                               .bytes = bytes,
                               .ctx = (uintptr_t)ctx,
                               .graph = 1};
    pthread_mutex_lock(&graph_lock);
    lv_g.graph_live[rd] += bytes;
    lv_g.graph_cudev[rd] = cudev + 1;
    pthread_mutex_unlock(&graph_lock);
    atomic_store(&lv_g.graph_mem, true);
    struct lv_track_entry old;
    int rc = lv_track_insert(&lv_g.track, &e, &old);
    if (rc < 0) {
        pthread_mutex_lock(&graph_lock);
        lv_g.graph_live[rd] -= bytes;
        pthread_mutex_unlock(&graph_lock);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (rc > 0)
        lv_record_replaced(&old);
    lv_graph_resync(rd);
    return CUDA_SUCCESS;
}

void lv_graph_freed(int rd, uint64_t bytes)
{
    pthread_mutex_lock(&graph_lock);
    lv_g.graph_live[rd] -= bytes < lv_g.graph_live[rd] ? bytes : lv_g.graph_live[rd];
    lv_uncharge(rd, bytes);
    graph_resync_locked(rd);
    pthread_mutex_unlock(&graph_lock);
}

void lv_pool_forget(CUmemoryPool pool)
{
    pthread_mutex_lock(&lv_g.pool_lock);
    struct lv_pool *p = pool_find(pool, false, 0);
    if (p != NULL) {
        /* The destroyed pool's cache went back to the device; blocks still out are
         * charged on their own from now on (their free finds no pool). */
        if (p->charged > p->live)
            lv_uncharge(p->dev, p->charged - p->live);
        p->pool = NULL;
    }
    pthread_mutex_unlock(&lv_g.pool_lock);
}

/* ---- contexts ---- */

static void release_entry(const struct lv_track_entry *e, void *arg)
{
    (void)arg;
    if (e->graph)
        lv_graph_freed(e->dev, e->bytes);
    else if (e->async)
        lv_pool_freed((CUmemoryPool)e->pool, e->dev, e->bytes);
    else
        lv_uncharge(e->dev, e->bytes);
}

void lv_context_gone(CUcontext ctx)
{
    atomic_fetch_add(&lv_g.ctx_epoch, 1);
    (void)lv_track_remove_context(&lv_g.track, (uintptr_t)ctx, release_entry, NULL);
    lv_pool_resync_all();
}

/* ---- process life ---- */

static void after_fork_child(void)
{
    /* The parent's slot, locks and allocations are not the child's; a child that uses
     * CUDA attaches anew at its first charge. */
    pthread_mutex_init(&lv_g.attach_lock, NULL);
    pthread_mutex_init(&lv_g.ctx_lock, NULL);
    pthread_mutex_init(&lv_g.pool_lock, NULL);
    pthread_mutex_init(&lv_g.setup_lock, NULL);
    if (lv_g.region != NULL)
        region_after_fork(lv_g.region);
    atomic_store(&lv_g.attached, false);
    lv_track_reset_after_fork(&lv_g.track);
    lv_nvml_after_fork();
    vgc_after_fork();
    memset(lv_g.pools, 0, sizeof lv_g.pools);
    pthread_mutex_init(&graph_lock, NULL);
    memset(lv_g.graph_live, 0, sizeof lv_g.graph_live);
    memset(lv_g.graph_kept, 0, sizeof lv_g.graph_kept);
    memset(lv_g.graph_cudev, 0, sizeof lv_g.graph_cudev);
    atomic_store(&lv_g.graph_mem, false);
    memset(lv_g.primary_refs, 0, sizeof lv_g.primary_refs);
    memset(lv_g.primary_charged, 0, sizeof lv_g.primary_charged);
    atomic_fetch_add(&lv_g.ctx_epoch, 1);
}

__attribute__((constructor)) static void lv_constructor(void)
{
    vg_log_max_level = -1; /* silent until the configuration asks */
    lv_track_init(&lv_g.track);
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* No detach at exit: the bytes are given back when the kernel drops the slot's lock as the
 * process's files close, which is after its destructors and next to the driver freeing
 * its memory. Releasing them in a destructor would let another process allocate while
 * the driver still holds the exiting one's memory, briefly putting the container past
 * its limit. The next allocation that needs them (or the next memory query) recounts. */
