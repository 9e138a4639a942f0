/* libvgpu internals shared by its source files.
 *
 * libvgpu sits between a CUDA program and the real driver (LD_PRELOAD or
 * /etc/ld.so.preload). It reaches the real libcuda.so.1 / libnvidia-ml.so.1 by SONAME with
 * dlopen (libvgpu.so is never named libcuda.so.1, and load checks that the library found
 * is not libvgpu itself), and calls them through typed pointers: __typeof__ of the
 * prototype in src/abi/cuda.h, so a wrapper and its real function cannot disagree.
 *
 * Modes. With no memory limit configured and no region file present, every wrapper is a
 * pure forward (one predictable branch). Otherwise the container's shared region (src/
 * region) holds the limits and what the container's processes hold, and every allocation
 * reserves its bytes there with one compare-and-swap before the driver is called, rolled
 * back if the driver fails. An invalid configuration fails CUDA initialisation with
 * CUDA_ERROR_INVALID_VALUE and one line on stderr.
 *
 * Limits are the process's own (its configuration, led by the read-only file at
 * /etc/vgpu/limits), handed to the region as process-private values: the region file,
 * which every process of the container can write, holds only counters. In a vgpu
 * container (that file exists), when libvgpu cannot enforce (the file unreadable or
 * malformed, the region unusable or not listing a visible GPU) it fails closed: one line
 * on stderr, every allocation refused with CUDA_ERROR_OUT_OF_MEMORY and counted in the
 * region's closed counter when the container's region can be opened (else in a private
 * region). */
#ifndef VGPU_LIBVGPU_VGPU_H
#define VGPU_LIBVGPU_VGPU_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "abi/cuda.h"
#include "libvgpu/config.h"
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* libvgpu wraps the old entry points too */
#include "abi/nvml.h"
#include "libvgpu/track.h"
#include "region/region.h"

#define LV_EXPORT      __attribute__((visibility("default")))
#define LV_LIKELY(x)   __builtin_expect(!!(x), 1)
#define LV_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define LV_MAX_CUDEVICES 64 /* CUdevice ordinals we map to region devices */
#define LV_MAX_POOLS     64

/* Every CUDA function libvgpu intercepts (exported, in the cuGetProcAddress table). */
#define LV_CUDA_HOOKS(X)                                                                           \
    X(cuInit)                                                                                      \
    X(cuGetProcAddress)                                                                            \
    X(cuGetProcAddress_v2)                                                                         \
    X(cuDeviceTotalMem)                                                                            \
    X(cuDeviceTotalMem_v2)                                                                         \
    X(cuDevicePrimaryCtxRetain)                                                                    \
    X(cuDevicePrimaryCtxRelease)                                                                   \
    X(cuDevicePrimaryCtxRelease_v2)                                                                \
    X(cuDevicePrimaryCtxReset)                                                                     \
    X(cuDevicePrimaryCtxReset_v2)                                                                  \
    X(cuCtxCreate)                                                                                 \
    X(cuCtxCreate_v2)                                                                              \
    X(cuCtxCreate_v3)                                                                              \
    X(cuCtxCreate_v4)                                                                              \
    X(cuCtxDestroy)                                                                                \
    X(cuCtxDestroy_v2)                                                                             \
    X(cuMemGetInfo)                                                                                \
    X(cuMemGetInfo_v2)                                                                             \
    X(cuMemAlloc)                                                                                  \
    X(cuMemAlloc_v2)                                                                               \
    X(cuMemAllocPitch)                                                                             \
    X(cuMemAllocPitch_v2)                                                                          \
    X(cuMemAllocManaged)                                                                           \
    X(cuMemFree)                                                                                   \
    X(cuMemFree_v2)                                                                                \
    X(cuMemAllocAsync)                                                                             \
    X(cuMemAllocAsync_ptsz)                                                                        \
    X(cuMemAllocFromPoolAsync)                                                                     \
    X(cuMemAllocFromPoolAsync_ptsz)                                                                \
    X(cuMemFreeAsync)                                                                              \
    X(cuMemFreeAsync_ptsz)                                                                         \
    X(cuGraphAddMemAllocNode)                                                                      \
    X(cuMemPoolTrimTo)                                                                             \
    X(cuDeviceGraphMemTrim)                                                                        \
    X(cuMemPoolDestroy)                                                                            \
    X(cuArrayCreate)                                                                               \
    X(cuArrayCreate_v2)                                                                            \
    X(cuArray3DCreate)                                                                             \
    X(cuArray3DCreate_v2)                                                                          \
    X(cuArrayDestroy)                                                                              \
    X(cuMipmappedArrayCreate)                                                                      \
    X(cuMipmappedArrayDestroy)                                                                     \
    X(cuMemCreate)                                                                                 \
    X(cuMemRelease)                                                                                \
    X(cuMemMap)                                                                                    \
    X(cuMemUnmap)                                                                                  \
    X(cuMemRetainAllocationHandle)                                                                 \
    X(cuMemImportFromShareableHandle)                                                              \
    X(cuIpcOpenMemHandle)                                                                          \
    X(cuIpcOpenMemHandle_v2)                                                                       \
    X(cuIpcCloseMemHandle)                                                                         \
    X(cuMemPoolImportPointer)                                                                      \
    X(cuLaunchKernel)                                                                              \
    X(cuLaunchKernel_ptsz)                                                                         \
    X(cuLaunchKernelEx)                                                                            \
    X(cuLaunchKernelEx_ptsz)                                                                       \
    X(cuLaunchCooperativeKernel)                                                                   \
    X(cuLaunchCooperativeKernel_ptsz)                                                              \
    X(cuGraphLaunch)                                                                               \
    X(cuGraphLaunch_ptsz)

/* Real functions libvgpu calls but does not intercept. */
#define LV_CUDA_CALLS(X)                                                                           \
    X(cuCtxGetCurrent)                                                                             \
    X(cuCtxGetDevice)                                                                              \
    X(cuDeviceGet)                                                                                 \
    X(cuDeviceGetCount)                                                                            \
    X(cuDeviceGetUuid)                                                                             \
    X(cuDeviceGetUuid_v2)                                                                          \
    X(cuDeviceGetDefaultMemPool)                                                                   \
    X(cuDeviceGetMemPool)                                                                          \
    X(cuMemGetAllocationPropertiesFromHandle)                                                      \
    X(cuMemGetAllocationGranularity)                                                               \
    X(cuMemAddressReserve)                                                                         \
    X(cuMemAddressFree)                                                                            \
    X(cuMemGetAddressRange_v2)                                                                     \
    X(cuMemPoolGetAttribute)                                                                       \
    X(cuDeviceGetGraphMemAttribute)                                                                \
    X(cuStreamIsCapturing)                                                                         \
    X(cuStreamIsCapturing_ptsz)                                                                    \
    X(cuThreadExchangeStreamCaptureMode)                                                           \
    X(cuCtxSynchronize)                                                                            \
    X(cuEventCreate)                                                                               \
    X(cuEventRecord)                                                                               \
    X(cuEventRecord_ptsz)                                                                          \
    X(cuEventSynchronize)                                                                          \
    X(cuEventElapsedTime)                                                                          \
    X(cuEventDestroy_v2)

#define LV_NVML_HOOKS(X)                                                                           \
    X(nvmlInit)                                                                                    \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlInitWithFlags)                                                                           \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetMemoryInfo_v2)                                                                  \
    X(nvmlDeviceGetComputeRunningProcesses)                                                        \
    X(nvmlDeviceGetComputeRunningProcesses_v2)                                                     \
    X(nvmlDeviceGetComputeRunningProcesses_v3)

#define LV_NVML_CALLS(X) X(nvmlDeviceGetUUID)

#define LV_DECLARE_REAL(name) __typeof__(name) *name;
struct lv_real {
    LV_CUDA_HOOKS(LV_DECLARE_REAL)
    LV_CUDA_CALLS(LV_DECLARE_REAL)
    LV_NVML_HOOKS(LV_DECLARE_REAL)
    LV_NVML_CALLS(LV_DECLARE_REAL)
};

struct lv_pool {
    CUmemoryPool pool; /* NULL: free entry */
    int dev;           /* region device */
    uint64_t charged;  /* bytes of the region charged for this pool */
    uint64_t live;     /* bytes of live allocations from it (ours) */
    uint64_t inflight; /* bytes of allocations between lv_pool_begin and lv_pool_end */
};

enum lv_setup_state {
    LV_SETUP_NONE = 0,   /* not tried yet (or the driver was not initialised) */
    LV_SETUP_PASS = 1,   /* no limit, no region: pure pass-through */
    LV_SETUP_REGION = 2, /* enforcing with the region */
    LV_SETUP_FAILED = 3  /* invalid configuration: CUDA initialisation refused */
};

struct lv_global {
    struct lv_real real;
    void *cuda_handle;
    void *nvml_handle;
    _Atomic int setup; /* enum lv_setup_state */
    pthread_mutex_t setup_lock;
    struct vgpu_config config;
    struct region *region;
    _Atomic bool attached;
    pthread_mutex_t attach_lock;
    int dev_of[LV_MAX_CUDEVICES]; /* CUdevice ordinal -> region device, -1 none */
    int primary_refs[LV_MAX_CUDEVICES];
    CUcontext primary_ctx[LV_MAX_CUDEVICES];
    bool primary_charged[LV_MAX_CUDEVICES];
    pthread_mutex_t ctx_lock;
    _Atomic uint32_t ctx_epoch; /* bumped when a context goes away (thread caches) */
    struct lv_track track;
    pthread_mutex_t pool_lock;
    struct lv_pool pools[LV_MAX_POOLS];
    /* The device graph pools (under core.c's graph lock): per region device, the bytes of live
     * graph allocations charged on their own, what is charged for the rest of what the driver
     * reserves for graphs, and the CUdevice to ask (+1; 0: no graph memory seen). */
    uint64_t graph_live[REGION_MAX_DEVICES], graph_kept[REGION_MAX_DEVICES];
    int graph_cudev[REGION_MAX_DEVICES];
    _Atomic bool graph_mem; /* some graph memory was seen: launches re-read the pools */
    _Atomic int64_t oom_logged_ns[REGION_MAX_DEVICES];
    bool closed;              /* enforcement failed closed: every allocation is refused */
    _Atomic bool attach_said; /* a failed attach was reported */
    int private_fd;           /* the memfd behind a private region when closed (-1: none) */
    /* Live resize (resize.c): the limits generation the device plugin raises, mapped
     * read-only from VGPU_GENERATION_PATH (&lv_limits_none when there is none), and the
     * generation this process's limits were read at. */
    const _Atomic uint64_t *limits_gen;
    _Atomic uint64_t limits_seen;
    pthread_mutex_t limits_lock;
    int limit_index[REGION_MAX_DEVICES]; /* configuration index of region device d (-1) */
};

extern const _Atomic uint64_t lv_limits_none;

extern struct lv_global lv_g;

/* Loads the real libraries' entry points (once). false if libcuda is missing. */
bool lv_load_real(void);
/* Runs setup if not done and the driver is initialised; returns the state. */
int lv_setup_slow(void);
static inline int lv_ensure_setup(void)
{
    int s = atomic_load_explicit(&lv_g.setup, memory_order_acquire);
    if (LV_LIKELY(s != LV_SETUP_NONE))
        return s;
    return lv_setup_slow();
}
/* The start of every wrapper that needs the region: pure forward otherwise (and
 * CUDA_ERROR_INVALID_VALUE when the configuration is invalid). */
#define LV_ENFORCING_OR_FORWARD(call)                                                              \
    do {                                                                                           \
        int lv_mode_ = lv_ensure_setup();                                                          \
        if (LV_UNLIKELY(lv_mode_ != LV_SETUP_REGION)) {                                            \
            if (lv_mode_ == LV_SETUP_FAILED)                                                       \
                return CUDA_ERROR_INVALID_VALUE;                                                   \
            return call;                                                                           \
        }                                                                                          \
    } while (0)

/* Setup for NVML when cuInit found no visible device: the existing region only (no CUDA
 * ordinals); returns the state (LV_SETUP_NONE while there is no region yet). */
int lv_setup_without_cuda(void);
/* The CUDA result setup failed with (CUDA_SUCCESS unless the configuration is invalid). */
CUresult lv_setup_result(void);

/* Per-thread state of the allocation path. The driver's answers (out-parameters) land in
 * the scratch fields rather than in stack slots whose address escapes, so the inlined
 * wrappers need no stack-protector canary. */
struct lv_thread {
    CUcontext ctx; /* current context last seen, and what it maps to */
    uint32_t epoch;
    int regdev;
    CUdevice cudev;
    CUdevice scratch_dev;
    CUcontext scratch_ctx;
    struct lv_track_entry scratch_new;   /* the entry lv_record inserts */
    struct lv_track_entry scratch_entry; /* an entry lv_record replaced */
};
extern __thread __attribute__((tls_model("initial-exec"))) struct lv_thread lv_thread;
/* The current context changed (or one went away): asks the driver for its device. */
CUresult lv_current_refresh(CUcontext c);

/* Region device of the calling thread's current context (-1: not limited or none), and
 * that context; CUDA error when there is no current context. One driver call
 * (cuCtxGetCurrent) on the way; cuCtxGetDevice only when the context changed. */
static inline CUresult lv_current(CUcontext *ctx, int *regdev, CUdevice *cudev)
{
    CUresult r = lv_g.real.cuCtxGetCurrent(&lv_thread.scratch_ctx);
    if (LV_UNLIKELY(r != CUDA_SUCCESS))
        return r;
    CUcontext c = lv_thread.scratch_ctx;
    if (LV_UNLIKELY(c == NULL))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (LV_UNLIKELY(lv_thread.ctx != c ||
                    lv_thread.epoch !=
                        atomic_load_explicit(&lv_g.ctx_epoch, memory_order_acquire))) {
        r = lv_current_refresh(c);
        if (r != CUDA_SUCCESS)
            return r;
    }
    *ctx = c;
    *regdev = lv_thread.regdev;
    if (cudev != NULL)
        *cudev = lv_thread.cudev;
    return CUDA_SUCCESS;
}
int lv_regdev_of_cudevice(CUdevice dev);

/* Charges bytes on region device dev: CUDA_SUCCESS or CUDA_ERROR_OUT_OF_MEMORY (logged,
 * rate-limited). Reclaims dead processes and re-reads this process's pools before
 * refusing. */
CUresult lv_charge_slow(int dev, uint64_t bytes);
/* Live resize (resize.c). lv_limits_map maps the generation before the configuration is
 * read (setup lock held); lv_limits_current is the whole hot-path cost, one load and a
 * compare where limits are read already; lv_limits_reload re-reads the limits file and
 * gives the region and the compute limiter the new limits. */
void lv_limits_map(void);
void lv_limits_reload(void);
static inline bool lv_limits_current(void)
{
    return LV_LIKELY(atomic_load_explicit(lv_g.limits_gen, memory_order_relaxed) ==
                     atomic_load_explicit(&lv_g.limits_seen, memory_order_relaxed));
}
static inline void lv_limits_check(void)
{
    if (!lv_limits_current())
        lv_limits_reload();
}

static inline CUresult lv_charge(int dev, uint64_t bytes)
{
    if (LV_LIKELY(atomic_load_explicit(&lv_g.attached, memory_order_acquire)) &&
        lv_limits_current() && region_reserve(lv_g.region, (unsigned)dev, bytes) == 0)
        return CUDA_SUCCESS;
    return lv_charge_slow(dev, bytes);
}
static inline void lv_uncharge(int dev, uint64_t bytes)
{
    if (bytes != 0 && atomic_load_explicit(&lv_g.attached, memory_order_relaxed))
        region_release(lv_g.region, (unsigned)dev, bytes);
}
/* Before reporting usage: takes back what dead processes held (rate-limited). */
void lv_reclaim_for_view(void);

/* Graph memory (core.c). lv_record_graph records a graph's allocation (a memory
 * allocation node, or cuMemAllocAsync on a capturing stream) already charged its size;
 * lv_graph_freed gives that back when its address is freed and re-reads the device's
 * graph pool; lv_graph_resync charges what the driver reserves for graphs beyond the live
 * allocations (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), trimming the pool when the region
 * cannot take it; lv_graph_resync_all does so for every device with graph memory. */
CUresult lv_record_graph(uint64_t key, int rd, CUdevice cudev, uint64_t bytes, CUcontext ctx);
void lv_graph_freed(int rd, uint64_t bytes);
void lv_graph_resync(int rd);
void lv_graph_resync_all(void);

/* Releases what an entry that lv_record replaced held. */
void lv_record_replaced(const struct lv_track_entry *old);
/* Records an allocation just made; on failure to record, the caller frees it. */
static inline CUresult lv_record(enum lv_track_space space, uint64_t key, int dev, uint64_t bytes,
                                 CUcontext ctx, CUmemoryPool pool)
{
    lv_thread.scratch_new = (struct lv_track_entry){
        .key = key,
        .space = (uint8_t)space,
        .async = pool != NULL,
        .dev = (uint16_t)dev,
        .bytes = bytes,
        .ctx = (uintptr_t)ctx,
        .pool = (uintptr_t)pool,
    };
    int rc = lv_track_insert(&lv_g.track, &lv_thread.scratch_new, &lv_thread.scratch_entry);
    if (LV_UNLIKELY(rc != 0)) {
        if (rc < 0)
            return CUDA_ERROR_OUT_OF_MEMORY;
        lv_record_replaced(&lv_thread.scratch_entry);
    }
    return CUDA_SUCCESS;
}

/* Pool bookkeeping for stream-ordered allocations. A pool is charged what the driver
 * says it reserves (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) plus what allocations in
 * flight may add; it never holds more than was charged for long: when the region
 * cannot take what a pool grew by, the pool is trimmed back to its charge.
 * lv_pool_begin charges an allocation of bytes before the driver is called (what the
 * pool's cache cannot serve); CUDA_ERROR_OUT_OF_MEMORY when the region refuses or the
 * pool table is full. lv_pool_end, after the driver answered (allocated or not),
 * re-reads the pool: CUDA_ERROR_OUT_OF_MEMORY when it now reserves more than the region
 * allows (the caller frees the block and calls lv_pool_drain). */
CUresult lv_pool_begin(CUmemoryPool pool, int dev, uint64_t bytes);
CUresult lv_pool_end(CUmemoryPool pool, uint64_t bytes, bool allocated);
/* After freeing a block lv_pool_end refused: waits for the free, trims the pool to its
 * charge. */
void lv_pool_drain(CUmemoryPool pool);
void lv_pool_freed(CUmemoryPool pool, int dev, uint64_t bytes);
void lv_pool_resync(CUmemoryPool pool);
void lv_pool_resync_all(void);
void lv_pool_forget(CUmemoryPool pool);

/* A context went away: release its overhead and everything allocated in it. */
void lv_context_gone(CUcontext ctx);

/* Wrapper for an intercepted CUDA symbol name (exact exported name), or NULL. */
void *lv_cuda_wrapper(const char *name);
void *lv_nvml_wrapper(const char *name);

/* Real dlsym (glibc's), resolved without going through libvgpu's own dlsym. */
void *lv_real_dlsym(void *handle, const char *name);

void lv_log_oom(int dev, uint64_t bytes);
void lv_nvml_after_fork(void);

#endif
