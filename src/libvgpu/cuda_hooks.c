/* The CUDA driver wrappers: every allocation path charges the container's region before
 * the driver is called and gives the charge back if the driver fails; every free gives
 * back exactly what its allocation charged; pointers and handles libvgpu did not see
 * allocated are forwarded to the driver untouched. The memory queries report the
 * container's limit as total and (limit - container usage) as free, clamped. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "abi/cuda_array.h"
#include "libvgpu/vgpu.h"

#define REAL lv_g.real

/* ---- initialisation ---- */

LV_EXPORT CUresult cuInit(unsigned int Flags)
{
    if (!lv_load_real())
        return CUDA_ERROR_NO_DEVICE;
    CUresult r = REAL.cuInit(Flags);
    if (r != CUDA_SUCCESS)
        return r;
    return lv_setup_result();
}

/* ---- what the application sees ---- */

/* Clamps (free, total) of region device dev to the container's limit. */
static void virtual_view(int dev, size_t *free_bytes, size_t *total)
{
    uint64_t used = 0, limit = 0;
    if (dev < 0)
        return;
    lv_reclaim_for_view();
    if (region_usage(lv_g.region, (unsigned)dev, &used, &limit) != 0 || limit == 0)
        return;
    if (limit == REGION_LIMIT_CLOSED)
        used = UINT64_MAX; /* closed: nothing is free */
    uint64_t t = limit < *total ? limit : *total;
    uint64_t f = t > used ? t - used : 0;
    if (f > *free_bytes)
        f = *free_bytes; /* never more than the card really has */
    *total = (size_t)t;
    *free_bytes = (size_t)f;
}

LV_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemGetInfo_v2(free_bytes, total));
    CUresult r = REAL.cuMemGetInfo_v2(free_bytes, total);
    if (r != CUDA_SUCCESS || free_bytes == NULL || total == NULL)
        return r;
    CUcontext ctx;
    int dev;
    if (lv_current(&ctx, &dev, NULL) != CUDA_SUCCESS)
        return r;
    lv_pool_resync_all();
    virtual_view(dev, free_bytes, total);
    return r;
}

LV_EXPORT CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemGetInfo(free_bytes, total));
    size_t f, t;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r != CUDA_SUCCESS)
        return r;
    if (free_bytes == NULL || total == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *free_bytes = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
    *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    return r;
}

LV_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDeviceTotalMem_v2(bytes, dev));
    CUresult r = REAL.cuDeviceTotalMem_v2(bytes, dev);
    if (r != CUDA_SUCCESS || bytes == NULL)
        return r;
    size_t f = *bytes;
    virtual_view(lv_regdev_of_cudevice(dev), &f, bytes);
    return r;
}

LV_EXPORT CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDeviceTotalMem(bytes, dev));
    size_t t;
    CUresult r = cuDeviceTotalMem_v2(&t, dev);
    if (r == CUDA_SUCCESS) {
        if (bytes == NULL)
            return CUDA_ERROR_INVALID_VALUE;
        *bytes = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return r;
}

/* ---- contexts: each costs VGPU_CONTEXT_MIB on its device ---- */

LV_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDevicePrimaryCtxRetain(pctx, dev));
    int rd = lv_regdev_of_cudevice(dev);
    if (rd < 0)
        return REAL.cuDevicePrimaryCtxRetain(pctx, dev);
    pthread_mutex_lock(&lv_g.ctx_lock);
    uint64_t cost = lv_g.primary_refs[dev] == 0 ? lv_g.config.context_bytes : 0;
    CUresult r = lv_charge(rd, cost);
    if (r == CUDA_SUCCESS) {
        r = REAL.cuDevicePrimaryCtxRetain(pctx, dev);
        if (r != CUDA_SUCCESS) {
            lv_uncharge(rd, cost);
        } else {
            lv_g.primary_refs[dev]++;
            lv_g.primary_ctx[dev] = *pctx;
            if (cost != 0)
                lv_g.primary_charged[dev] = true;
        }
    }
    pthread_mutex_unlock(&lv_g.ctx_lock);
    return r;
}

/* The primary context of dev is gone (last release, or reset). Lock held. */
static void primary_gone(CUdevice dev, int rd)
{
    CUcontext ctx = lv_g.primary_ctx[dev];
    lv_g.primary_refs[dev] = 0;
    lv_g.primary_ctx[dev] = NULL;
    if (lv_g.primary_charged[dev])
        lv_uncharge(rd, lv_g.config.context_bytes);
    lv_g.primary_charged[dev] = false;
    if (ctx != NULL)
        lv_context_gone(ctx);
}

static CUresult primary_release(CUdevice dev, bool reset, __typeof__(cuDevicePrimaryCtxRelease) *fn)
{
    int rd = lv_regdev_of_cudevice(dev);
    if (rd < 0)
        return fn(dev);
    pthread_mutex_lock(&lv_g.ctx_lock);
    CUresult r = fn(dev);
    if (r == CUDA_SUCCESS && lv_g.primary_refs[dev] > 0) {
        if (reset || --lv_g.primary_refs[dev] == 0)
            primary_gone(dev, rd);
    }
    pthread_mutex_unlock(&lv_g.ctx_lock);
    return r;
}

LV_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDevicePrimaryCtxRelease_v2(dev));
    return primary_release(dev, false, REAL.cuDevicePrimaryCtxRelease_v2);
}

LV_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDevicePrimaryCtxRelease(dev));
    return primary_release(dev, false, REAL.cuDevicePrimaryCtxRelease);
}

LV_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDevicePrimaryCtxReset_v2(dev));
    return primary_release(dev, true, REAL.cuDevicePrimaryCtxReset_v2);
}

LV_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDevicePrimaryCtxReset(dev));
    return primary_release(dev, true, REAL.cuDevicePrimaryCtxReset);
}

/* Regular contexts: charge, create, record (so cuCtxDestroy gives the charge back). */
#define LV_CTX_CREATE(call, pctx, dev)                                                             \
    do {                                                                                           \
        LV_ENFORCING_OR_FORWARD(call);                                                             \
        int rd_ = lv_regdev_of_cudevice(dev);                                                      \
        if (rd_ < 0 || (pctx) == NULL)                                                             \
            return call;                                                                           \
        uint64_t cost_ = lv_g.config.context_bytes;                                                \
        CUresult r_ = lv_charge(rd_, cost_);                                                       \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = call;                                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            lv_uncharge(rd_, cost_);                                                               \
            return r_;                                                                             \
        }                                                                                          \
        if (lv_record(LV_TRACK_CONTEXT, (uintptr_t) * (pctx), rd_, cost_, *(pctx), NULL) !=        \
            CUDA_SUCCESS)                                                                          \
            lv_uncharge(rd_, cost_); /* untracked: cannot give it back later */                    \
        return r_;                                                                                 \
    } while (0)

LV_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    LV_CTX_CREATE(REAL.cuCtxCreate_v2(pctx, flags, dev), pctx, dev);
}

LV_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    LV_CTX_CREATE(REAL.cuCtxCreate(pctx, flags, dev), pctx, dev);
}

LV_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                                  unsigned int flags, CUdevice dev)
{
    LV_CTX_CREATE(REAL.cuCtxCreate_v3(pctx, paramsArray, numParams, flags, dev), pctx, dev);
}

LV_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                                  unsigned int flags, CUdevice dev)
{
    LV_CTX_CREATE(REAL.cuCtxCreate_v4(pctx, ctxCreateParams, flags, dev), pctx, dev);
}

LV_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuCtxDestroy_v2(ctx));
    CUresult r = REAL.cuCtxDestroy_v2(ctx);
    if (r == CUDA_SUCCESS)
        lv_context_gone(ctx);
    return r;
}

LV_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuCtxDestroy(ctx));
    CUresult r = REAL.cuCtxDestroy(ctx);
    if (r == CUDA_SUCCESS)
        lv_context_gone(ctx);
    return r;
}

/* ---- device memory ---- */

/* Charge, call, record; on a recording failure the allocation is undone. */
#define LV_ALLOC(call, undo, key_expr, bytes_expr)                                                 \
    do {                                                                                           \
        CUcontext ctx_;                                                                            \
        int rd_;                                                                                   \
        if (lv_current(&ctx_, &rd_, NULL) != CUDA_SUCCESS || rd_ < 0)                              \
            return call;                                                                           \
        uint64_t bytes_ = (bytes_expr);                                                            \
        CUresult r_ = lv_charge(rd_, bytes_);                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = call;                                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            lv_uncharge(rd_, bytes_);                                                              \
            return r_;                                                                             \
        }                                                                                          \
        if (lv_record(LV_TRACK_DEVPTR, (uint64_t)(key_expr), rd_, bytes_, ctx_, NULL) !=           \
            CUDA_SUCCESS) {                                                                        \
            (void)(undo);                                                                          \
            lv_uncharge(rd_, bytes_);                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        }                                                                                          \
        return r_;                                                                                 \
    } while (0)

LV_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAlloc_v2(dptr, bytesize));
    if (dptr == NULL || bytesize == 0)
        return REAL.cuMemAlloc_v2(dptr, bytesize);
    LV_ALLOC(REAL.cuMemAlloc_v2(dptr, bytesize), REAL.cuMemFree_v2(*dptr), *dptr, bytesize);
}

LV_EXPORT CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAlloc(dptr, bytesize));
    if (dptr == NULL || bytesize == 0)
        return REAL.cuMemAlloc(dptr, bytesize);
    LV_ALLOC(REAL.cuMemAlloc(dptr, bytesize), REAL.cuMemFree(*dptr), *dptr, bytesize);
}

LV_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAllocManaged(dptr, bytesize, flags));
    if (dptr == NULL || bytesize == 0)
        return REAL.cuMemAllocManaged(dptr, bytesize, flags);
    /* Charged in full to the current device, where the driver may place every page. */
    LV_ALLOC(REAL.cuMemAllocManaged(dptr, bytesize, flags), REAL.cuMemFree_v2(*dptr), *dptr,
             bytesize);
}

#define LV_PITCH_ALIGN 512 /* estimate charged up front; corrected to pitch x height */

static CUresult pitch_fix(int rd, uint64_t estimate, uint64_t actual)
{
    if (actual > estimate)
        return lv_charge(rd, actual - estimate);
    lv_uncharge(rd, estimate - actual);
    return CUDA_SUCCESS;
}

/* After a pitched allocation succeeded: charge what the driver really gave (pitch x
 * height, not the estimate) and record it; if either fails, the allocation is freed
 * through the entry point of the same ABI and nothing stays charged. */
static CUresult pitch_settle(int rd, CUcontext ctx, uint64_t estimate, CUdeviceptr ptr,
                             uint64_t actual, bool v1)
{
    uint64_t charged = estimate;
    CUresult r = pitch_fix(rd, estimate, actual);
    if (r == CUDA_SUCCESS) {
        charged = actual;
        r = lv_record(LV_TRACK_DEVPTR, ptr, rd, actual, ctx, NULL);
    }
    if (r == CUDA_SUCCESS)
        return CUDA_SUCCESS;
    if (v1)
        REAL.cuMemFree((CUdeviceptr_v1)ptr);
    else
        REAL.cuMemFree_v2(ptr);
    lv_uncharge(rd, charged);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

LV_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes)
{
    LV_ENFORCING_OR_FORWARD(
        REAL.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    CUcontext ctx;
    int rd;
    uint64_t row = ((uint64_t)WidthInBytes + LV_PITCH_ALIGN - 1) / LV_PITCH_ALIGN * LV_PITCH_ALIGN;
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 || row < WidthInBytes ||
        Height > UINT64_MAX / row || lv_current(&ctx, &rd, NULL) != CUDA_SUCCESS || rd < 0)
        return REAL.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    uint64_t estimate = row * Height;
    CUresult r = lv_charge(rd, estimate);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        lv_uncharge(rd, estimate);
        return r;
    }
    return pitch_settle(rd, ctx, estimate, *dptr, (uint64_t)*pPitch * Height, false);
}

LV_EXPORT CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                   unsigned int WidthInBytes, unsigned int Height,
                                   unsigned int ElementSizeBytes)
{
    LV_ENFORCING_OR_FORWARD(
        REAL.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes));
    CUcontext ctx;
    int rd;
    uint64_t row = ((uint64_t)WidthInBytes + LV_PITCH_ALIGN - 1) / LV_PITCH_ALIGN * LV_PITCH_ALIGN;
    if (dptr == NULL || pPitch == NULL || WidthInBytes == 0 || Height == 0 ||
        lv_current(&ctx, &rd, NULL) != CUDA_SUCCESS || rd < 0)
        return REAL.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    uint64_t estimate = row * Height;
    CUresult r = lv_charge(rd, estimate);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMemAllocPitch(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS) {
        lv_uncharge(rd, estimate);
        return r;
    }
    return pitch_settle(rd, ctx, estimate, *dptr, (uint64_t)*pPitch * Height, true);
}

/* Frees: forget first (so a concurrent allocation that gets the same address back cannot
 * be forgotten by mistake), put back if the driver refuses. */
#define LV_FREE(call, key)                                                                         \
    do {                                                                                           \
        struct lv_track_entry e_;                                                                  \
        if (!lv_track_remove(&lv_g.track, LV_TRACK_DEVPTR, (uint64_t)(key), &e_))                  \
            return call;                                                                           \
        CUresult r_ = call;                                                                        \
        if (LV_UNLIKELY(r_ != CUDA_SUCCESS))                                                       \
            (void)lv_track_insert(&lv_g.track, &e_, NULL);                                         \
        else if (e_.graph)                                                                         \
            lv_graph_freed(e_.dev, e_.bytes);                                                      \
        else if (e_.async)                                                                         \
            lv_pool_freed((CUmemoryPool)e_.pool, e_.dev, e_.bytes);                                \
        else                                                                                       \
            lv_uncharge(e_.dev, e_.bytes);                                                         \
        return r_;                                                                                 \
    } while (0)

LV_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemFree_v2(dptr));
    LV_FREE(REAL.cuMemFree_v2(dptr), dptr);
}

LV_EXPORT CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemFree(dptr));
    LV_FREE(REAL.cuMemFree(dptr), dptr);
}

LV_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemFreeAsync(dptr, hStream));
    LV_FREE(REAL.cuMemFreeAsync(dptr, hStream), dptr);
}

LV_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemFreeAsync_ptsz(dptr, hStream));
    LV_FREE(REAL.cuMemFreeAsync_ptsz(dptr, hStream), dptr);
}

/* ---- stream-ordered allocations: the region holds what each pool holds ---- */

/* Whether an allocation on this stream is being captured: the driver then adds a memory
 * allocation node to the graph instead of growing the pool, so the pool's reserved
 * memory would not show it. */
static bool async_captured(CUstream s, bool ptsz)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = ptsz ? REAL.cuStreamIsCapturing_ptsz(s, &cs) : REAL.cuStreamIsCapturing(s, &cs);
    return r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* The pool is the one the driver allocates from: the explicit one, else the device's
 * current pool (cuDeviceSetMemPool may have made another than the default current).
 * lv_pool_begin charges what the pool's cache cannot serve; after the driver answered,
 * lv_pool_end re-reads what the pool reserves. When the region cannot take what the pool
 * really grew by, the block is freed, the pool trimmed back to its charge, and the
 * allocation refused: a pool never keeps more than was charged. */
#define LV_ALLOC_ASYNC(call, free_call, dptr, bytes, explicit_pool, stream, ptsz)                  \
    do {                                                                                           \
        CUcontext ctx_;                                                                            \
        int rd_;                                                                                   \
        CUdevice cd_;                                                                              \
        if ((dptr) == NULL || (bytes) == 0 || lv_current(&ctx_, &rd_, &cd_) != CUDA_SUCCESS ||     \
            rd_ < 0)                                                                               \
            return call;                                                                           \
        CUmemoryPool pool_ = (explicit_pool);                                                      \
        if (pool_ == NULL && REAL.cuDeviceGetMemPool(&pool_, cd_) != CUDA_SUCCESS &&               \
            REAL.cuDeviceGetDefaultMemPool(&pool_, cd_) != CUDA_SUCCESS)                           \
            pool_ = NULL;                                                                          \
        if (async_captured((stream), (ptsz)))                                                      \
            pool_ = NULL; /* a graph's allocation node: charged on its own until freed */          \
        if (pool_ == NULL) {                                                                       \
            CUresult p_ = lv_charge(rd_, (bytes));                                                 \
            if (p_ != CUDA_SUCCESS)                                                                \
                return p_;                                                                         \
            p_ = call;                                                                             \
            if (p_ != CUDA_SUCCESS) {                                                              \
                lv_uncharge(rd_, (bytes));                                                         \
                return p_;                                                                         \
            }                                                                                      \
            if (lv_record_graph(*(dptr), rd_, cd_, (bytes), ctx_) != CUDA_SUCCESS) {               \
                (void)(free_call);                                                                 \
                lv_uncharge(rd_, (bytes));                                                         \
                return CUDA_ERROR_OUT_OF_MEMORY;                                                   \
            }                                                                                      \
            return CUDA_SUCCESS;                                                                   \
        }                                                                                          \
        CUresult r_ = lv_pool_begin(pool_, rd_, (bytes));                                          \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = call;                                                                                 \
        CUresult s_ = lv_pool_end(pool_, (bytes), r_ == CUDA_SUCCESS);                             \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        if (s_ == CUDA_SUCCESS)                                                                    \
            s_ = lv_record(LV_TRACK_DEVPTR, *(dptr), rd_, (bytes), ctx_, pool_);                   \
        if (s_ != CUDA_SUCCESS) {                                                                  \
            (void)(free_call);                                                                     \
            lv_pool_freed(pool_, rd_, (bytes));                                                    \
            lv_pool_drain(pool_);                                                                  \
            lv_log_oom(rd_, (bytes));                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        }                                                                                          \
        return CUDA_SUCCESS;                                                                       \
    } while (0)

LV_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAllocAsync(dptr, bytesize, hStream));
    LV_ALLOC_ASYNC(REAL.cuMemAllocAsync(dptr, bytesize, hStream),
                   REAL.cuMemFreeAsync(*dptr, hStream), dptr, bytesize, NULL, hStream, false);
}

LV_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAllocAsync_ptsz(dptr, bytesize, hStream));
    LV_ALLOC_ASYNC(REAL.cuMemAllocAsync_ptsz(dptr, bytesize, hStream),
                   REAL.cuMemFreeAsync_ptsz(*dptr, hStream), dptr, bytesize, NULL, hStream, true);
}

LV_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream));
    if (pool == NULL)
        return REAL.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream);
    LV_ALLOC_ASYNC(REAL.cuMemAllocFromPoolAsync(dptr, bytesize, pool, hStream),
                   REAL.cuMemFreeAsync(*dptr, hStream), dptr, bytesize, pool, hStream, false);
}

LV_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream));
    if (pool == NULL)
        return REAL.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream);
    LV_ALLOC_ASYNC(REAL.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, hStream),
                   REAL.cuMemFreeAsync_ptsz(*dptr, hStream), dptr, bytesize, pool, hStream, true);
}

/* A graph's memory allocation node: charged from the node's creation until its address
 * is freed (cuMemFree, cuMemFreeAsync, or the context's end); what the device's graph
 * pool keeps beyond the live allocations is charged on top (lv_graph_resync, core.c). */
LV_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                          const CUgraphNode *dependencies, size_t numDependencies,
                                          CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies,
                                                        numDependencies, nodeParams));
    CUcontext ctx;
    int cur;
    int rd = nodeParams != NULL && nodeParams->bytesize != 0 &&
                     nodeParams->poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE
                 ? lv_regdev_of_cudevice(nodeParams->poolProps.location.id)
                 : -1;
    if (rd < 0)
        return REAL.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies,
                                           nodeParams);
    if (lv_current(&ctx, &cur, NULL) != CUDA_SUCCESS)
        ctx = NULL; /* charged all the same, until its address is freed */
    uint64_t bytes = nodeParams->bytesize;
    CUresult r = lv_charge(rd, bytes);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuGraphAddMemAllocNode(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
    if (r != CUDA_SUCCESS) {
        lv_uncharge(rd, bytes);
        return r;
    }
    if (lv_record_graph(nodeParams->dptr, rd, nodeParams->poolProps.location.id, bytes, ctx) !=
        CUDA_SUCCESS) {
        /* Cannot follow it: the node stays in the graph, its memory freed at once. */
        (void)REAL.cuMemFree_v2(nodeParams->dptr);
        lv_uncharge(rd, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

/* ---- legacy IPC: the importer is charged what it maps ----
 *
 * cuIpcOpenMemHandle maps another process's cuMemAlloc allocation. The exporter stays
 * charged for it until its cuMemFree; the importer is charged its size too, from the open
 * until its last cuIpcCloseMemHandle (or its context's end): the driver keeps the memory
 * while an importer has it open (CUDA calls freeing it first undefined), so an exporter
 * that frees and allocates again while its importer holds on would otherwise hold more
 * than its container's limit between them. Shared memory is so counted twice within one
 * container, the safe side. The size is the allocation's, as cuMemGetAddressRange gives
 * it; an open the importer cannot afford (or size, or record) is closed again and refused
 * with CUDA_ERROR_OUT_OF_MEMORY. A handle opened again by the same context returns the
 * same address (the driver counts opens): charged once, released at the last close. */

static bool ipc_ref(struct lv_track_entry *e, void *arg)
{
    (void)arg;
    e->refs++;
    return false;
}

static bool ipc_unref(struct lv_track_entry *e, void *arg)
{
    (void)arg;
    e->refs = e->refs > 0 ? e->refs - 1 : 0;
    return e->refs == 0;
}

/* Opens and closes with their bookkeeping, one at a time: the driver counts opens of one
 * handle per context, and two threads each finding no entry after their opens would
 * each charge and insert, the second replacing the first (one reference for two opens),
 * so that one close left the address mapped and uncharged. Recursive: a driver may
 * implement one name by calling the other through its exported symbol, i.e. this hook
 * (fakegpu's cuIpcOpenMemHandle does). */
static pthread_mutex_t ipc_lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

/* After an open in ctx (region device rd) returned *pdptr: charged once per address and
 * tracked, or closed again and refused. ipc_lock held. */
static CUresult ipc_opened(CUdeviceptr *pdptr, CUcontext ctx, int rd)
{
    struct lv_track_entry e;
    if (lv_track_modify(&lv_g.track, LV_TRACK_IPC, *pdptr, ipc_ref, NULL, &e))
        return CUDA_SUCCESS; /* opened before by this context: charged once */
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult c = REAL.cuMemGetAddressRange_v2(&base, &size, *pdptr) == CUDA_SUCCESS && size != 0
                     ? lv_charge(rd, size)
                     : CUDA_ERROR_OUT_OF_MEMORY;
    if (c == CUDA_SUCCESS) {
        struct lv_track_entry n = {.key = *pdptr,
                                   .space = LV_TRACK_IPC,
                                   .dev = (uint16_t)rd,
                                   .refs = 1,
                                   .bytes = size,
                                   .ctx = (uintptr_t)ctx};
        int i = lv_track_insert(&lv_g.track, &n, &e);
        if (i < 0) {
            lv_uncharge(rd, size);
            c = CUDA_ERROR_OUT_OF_MEMORY;
        } else if (i > 0) {
            lv_record_replaced(&e);
        }
    }
    if (c != CUDA_SUCCESS) {
        (void)REAL.cuIpcCloseMemHandle(*pdptr);
        *pdptr = 0;
    }
    return c;
}

#define LV_IPC_OPEN(call)                                                                          \
    do {                                                                                           \
        CUcontext ctx_;                                                                            \
        int rd_;                                                                                   \
        if (pdptr == NULL || lv_current(&ctx_, &rd_, NULL) != CUDA_SUCCESS || rd_ < 0)             \
            return call;                                                                           \
        pthread_mutex_lock(&ipc_lock);                                                             \
        CUresult r_ = call;                                                                        \
        if (r_ == CUDA_SUCCESS)                                                                    \
            r_ = ipc_opened(pdptr, ctx_, rd_);                                                     \
        pthread_mutex_unlock(&ipc_lock);                                                           \
        return r_;                                                                                 \
    } while (0)

LV_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
                                         unsigned int Flags)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuIpcOpenMemHandle_v2(pdptr, handle, Flags));
    LV_IPC_OPEN(REAL.cuIpcOpenMemHandle_v2(pdptr, handle, Flags));
}

LV_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuIpcOpenMemHandle(pdptr, handle, Flags));
    LV_IPC_OPEN(REAL.cuIpcOpenMemHandle(pdptr, handle, Flags));
}

LV_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuIpcCloseMemHandle(dptr));
    pthread_mutex_lock(&ipc_lock);
    CUresult r = REAL.cuIpcCloseMemHandle(dptr);
    struct lv_track_entry e;
    if (r == CUDA_SUCCESS &&
        lv_track_modify(&lv_g.track, LV_TRACK_IPC, dptr, ipc_unref, NULL, &e) && e.refs == 0)
        lv_uncharge(e.dev, e.bytes);
    pthread_mutex_unlock(&ipc_lock);
    return r;
}

/* A pool allocation of another process, imported through a shared pool: as for legacy
 * IPC, the importer is charged the allocation's size until it frees the address
 * (cuMemFree, cuMemFreeAsync: the LV_TRACK_DEVPTR entry), the exporter until its own
 * free; an import the container cannot afford is freed again and refused. */
LV_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                          CUmemPoolPtrExportData *shareData)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemPoolImportPointer(ptr_out, pool, shareData));
    CUcontext ctx;
    int rd;
    if (ptr_out == NULL || lv_current(&ctx, &rd, NULL) != CUDA_SUCCESS || rd < 0)
        return REAL.cuMemPoolImportPointer(ptr_out, pool, shareData);
    CUresult r = REAL.cuMemPoolImportPointer(ptr_out, pool, shareData);
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr base = 0;
    size_t size = 0;
    CUresult c = REAL.cuMemGetAddressRange_v2(&base, &size, *ptr_out) == CUDA_SUCCESS && size != 0
                     ? lv_charge(rd, size)
                     : CUDA_ERROR_OUT_OF_MEMORY;
    if (c == CUDA_SUCCESS &&
        lv_record(LV_TRACK_DEVPTR, *ptr_out, rd, size, ctx, NULL) != CUDA_SUCCESS) {
        lv_uncharge(rd, size);
        c = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (c != CUDA_SUCCESS) {
        (void)REAL.cuMemFree_v2(*ptr_out);
        *ptr_out = 0;
        return c;
    }
    return r;
}

/* What the graph pool kept goes back to the device: re-read, the charge follows. */
LV_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuDeviceGraphMemTrim(device));
    CUresult r = REAL.cuDeviceGraphMemTrim(device);
    if (r == CUDA_SUCCESS)
        lv_graph_resync(lv_regdev_of_cudevice(device));
    return r;
}

LV_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemPoolTrimTo(pool, minBytesToKeep));
    CUresult r = REAL.cuMemPoolTrimTo(pool, minBytesToKeep);
    if (r == CUDA_SUCCESS)
        lv_pool_resync(pool);
    return r;
}

LV_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemPoolDestroy(pool));
    CUresult r = REAL.cuMemPoolDestroy(pool);
    if (r == CUDA_SUCCESS)
        lv_pool_forget(pool);
    return r;
}

/* ---- arrays: element size x channels x extent (what the driver reports) ---- */

/* 0 for a descriptor the driver will refuse (it is forwarded uncharged). */
static uint64_t array_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned ch)
{
    uint64_t n = (uint64_t)cu_array_format_bytes(f) * ch;
    uint64_t dims[3] = {w, h ? h : 1, d ? d : 1};
    if (n == 0 || w == 0)
        return 0;
    for (int i = 0; i < 3; i++) {
        if (dims[i] > UINT64_MAX / n)
            return 0;
        n *= dims[i];
    }
    return n;
}

#define LV_ARRAY(space, call, undo, handle, bytes_expr)                                            \
    do {                                                                                           \
        CUcontext ctx_;                                                                            \
        int rd_;                                                                                   \
        uint64_t bytes_ = (bytes_expr);                                                            \
        if ((handle) == NULL || bytes_ == 0 || lv_current(&ctx_, &rd_, NULL) != CUDA_SUCCESS ||    \
            rd_ < 0)                                                                               \
            return call;                                                                           \
        CUresult r_ = lv_charge(rd_, bytes_);                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            return r_;                                                                             \
        r_ = call;                                                                                 \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            lv_uncharge(rd_, bytes_);                                                              \
            return r_;                                                                             \
        }                                                                                          \
        if (lv_record(space, (uintptr_t) * (handle), rd_, bytes_, ctx_, NULL) != CUDA_SUCCESS) {   \
            (void)(undo);                                                                          \
            lv_uncharge(rd_, bytes_);                                                              \
            return CUDA_ERROR_OUT_OF_MEMORY;                                                       \
        }                                                                                          \
        return r_;                                                                                 \
    } while (0)

#define LV_HANDLE_FREE(space, call, key)                                                           \
    do {                                                                                           \
        struct lv_track_entry e_;                                                                  \
        bool had_ = lv_track_remove(&lv_g.track, space, (uint64_t)(key), &e_);                     \
        CUresult r_ = call;                                                                        \
        if (had_ && r_ != CUDA_SUCCESS)                                                            \
            (void)lv_track_insert(&lv_g.track, &e_, NULL);                                         \
        else if (had_)                                                                             \
            lv_uncharge(e_.dev, e_.bytes);                                                         \
        return r_;                                                                                 \
    } while (0)

LV_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuArrayCreate_v2(pHandle, d));
    if (d == NULL)
        return REAL.cuArrayCreate_v2(pHandle, d);
    LV_ARRAY(LV_TRACK_ARRAY, REAL.cuArrayCreate_v2(pHandle, d), REAL.cuArrayDestroy(*pHandle),
             pHandle, array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels));
}

LV_EXPORT CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuArrayCreate(pHandle, d));
    if (d == NULL)
        return REAL.cuArrayCreate(pHandle, d);
    LV_ARRAY(LV_TRACK_ARRAY, REAL.cuArrayCreate(pHandle, d), REAL.cuArrayDestroy(*pHandle), pHandle,
             array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels));
}

LV_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuArray3DCreate_v2(pHandle, d));
    if (d == NULL)
        return REAL.cuArray3DCreate_v2(pHandle, d);
    LV_ARRAY(LV_TRACK_ARRAY, REAL.cuArray3DCreate_v2(pHandle, d), REAL.cuArrayDestroy(*pHandle),
             pHandle, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels));
}

LV_EXPORT CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuArray3DCreate(pHandle, d));
    if (d == NULL)
        return REAL.cuArray3DCreate(pHandle, d);
    LV_ARRAY(LV_TRACK_ARRAY, REAL.cuArray3DCreate(pHandle, d), REAL.cuArrayDestroy(*pHandle),
             pHandle, array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels));
}

LV_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuArrayDestroy(hArray));
    LV_HANDLE_FREE(LV_TRACK_ARRAY, REAL.cuArrayDestroy(hArray), (uintptr_t)hArray);
}

static uint64_t mipmap_bytes(const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
    uint64_t total = 0, w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned i = 0; i < levels; i++) {
        uint64_t b = array_bytes(w, h, z, d->Format, d->NumChannels);
        if (b == 0 || total + b < total)
            return 0;
        total += b;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    return total;
}

LV_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle,
                                          const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned int levels)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMipmappedArrayCreate(pHandle, d, levels));
    if (d == NULL || levels == 0 || levels > 64)
        return REAL.cuMipmappedArrayCreate(pHandle, d, levels);
    LV_ARRAY(LV_TRACK_MIPMAP, REAL.cuMipmappedArrayCreate(pHandle, d, levels),
             REAL.cuMipmappedArrayDestroy(*pHandle), pHandle, mipmap_bytes(d, levels));
}

LV_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMipmappedArrayDestroy(h));
    LV_HANDLE_FREE(LV_TRACK_MIPMAP, REAL.cuMipmappedArrayDestroy(h), (uintptr_t)h);
}

/* Virtual memory management: vmm.c. */

/* Launches: compute.c (the compute limiter). */
