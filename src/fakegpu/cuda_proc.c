/* fakegpu libcuda: cuGetProcAddress, driven by one table.
 *
 * Each row is (name as the runtime asks for it, CUDA version that introduced this entry
 * point, per-thread-default-stream flavour or not, function). A request takes, among the
 * rows of that name, the newest one not newer than the caller's cudaVersion; with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM it prefers the _ptsz/_ptds rows and falls
 * back to the plain ones. So "cuMemAlloc" at 3000 is the 32-bit v1 entry point and at
 * 3020 or later cuMemAlloc_v2, as with the real driver. */
#include <string.h>

#include "fakegpu/cuda_internal.h"

struct fg_proc {
    const char *name;
    int version;
    bool per_thread;
    void *fn;
};

#define E(name, ver, fn)                                                                           \
    {                                                                                              \
        name, ver, false, (void *)(fn)                                                             \
    }
#define P(name, ver, fn)                                                                           \
    {                                                                                              \
        name, ver, true, (void *)(fn)                                                              \
    }

static const struct fg_proc fg_procs[] = {
    E("cuInit", 2000, cuInit),
    E("cuDriverGetVersion", 2020, cuDriverGetVersion),
    E("cuGetErrorString", 6000, cuGetErrorString),
    E("cuGetErrorName", 6000, cuGetErrorName),
    E("cuGetProcAddress", 11030, cuGetProcAddress),
    E("cuGetProcAddress", 12000, cuGetProcAddress_v2),

    E("cuDeviceGet", 2000, cuDeviceGet),
    E("cuDeviceGetCount", 2000, cuDeviceGetCount),
    E("cuDeviceGetName", 2000, cuDeviceGetName),
    E("cuDeviceGetUuid", 9020, cuDeviceGetUuid),
    E("cuDeviceGetUuid", 11040, cuDeviceGetUuid_v2),
    E("cuDeviceTotalMem", 2000, cuDeviceTotalMem),
    E("cuDeviceTotalMem", 3020, cuDeviceTotalMem_v2),
    E("cuDeviceGetAttribute", 2000, cuDeviceGetAttribute),
    E("cuDeviceGetPCIBusId", 4010, cuDeviceGetPCIBusId),
    E("cuDeviceGetByPCIBusId", 4010, cuDeviceGetByPCIBusId),
    E("cuDeviceGetDefaultMemPool", 11020, cuDeviceGetDefaultMemPool),
    E("cuDeviceGetMemPool", 11020, cuDeviceGetMemPool),
    E("cuDeviceSetMemPool", 11020, cuDeviceSetMemPool),

    E("cuDevicePrimaryCtxRetain", 7000, cuDevicePrimaryCtxRetain),
    E("cuDevicePrimaryCtxRelease", 7000, cuDevicePrimaryCtxRelease),
    E("cuDevicePrimaryCtxRelease", 11000, cuDevicePrimaryCtxRelease_v2),
    E("cuDevicePrimaryCtxSetFlags", 7000, cuDevicePrimaryCtxSetFlags),
    E("cuDevicePrimaryCtxSetFlags", 11000, cuDevicePrimaryCtxSetFlags_v2),
    E("cuDevicePrimaryCtxGetState", 7000, cuDevicePrimaryCtxGetState),
    E("cuDevicePrimaryCtxReset", 7000, cuDevicePrimaryCtxReset),
    E("cuDevicePrimaryCtxReset", 11000, cuDevicePrimaryCtxReset_v2),
    E("cuCtxCreate", 2000, cuCtxCreate),
    E("cuCtxCreate", 3020, cuCtxCreate_v2),
    E("cuCtxCreate", 11040, cuCtxCreate_v3),
    E("cuCtxCreate", 12050, cuCtxCreate_v4),
    E("cuCtxDestroy", 2000, cuCtxDestroy),
    E("cuCtxDestroy", 4000, cuCtxDestroy_v2),
    E("cuCtxPushCurrent", 2000, cuCtxPushCurrent),
    E("cuCtxPushCurrent", 4000, cuCtxPushCurrent_v2),
    E("cuCtxPopCurrent", 2000, cuCtxPopCurrent),
    E("cuCtxPopCurrent", 4000, cuCtxPopCurrent_v2),
    E("cuCtxSetCurrent", 4000, cuCtxSetCurrent),
    E("cuCtxGetCurrent", 4000, cuCtxGetCurrent),
    E("cuCtxGetDevice", 2000, cuCtxGetDevice),
    E("cuCtxGetFlags", 7000, cuCtxGetFlags),
    E("cuCtxGetApiVersion", 3020, cuCtxGetApiVersion),
    E("cuCtxGetStreamPriorityRange", 5050, cuCtxGetStreamPriorityRange),
    E("cuCtxSynchronize", 2000, cuCtxSynchronize),

    E("cuStreamCreate", 2000, cuStreamCreate),
    E("cuStreamCreateWithPriority", 5050, cuStreamCreateWithPriority),
    E("cuStreamDestroy", 2000, cuStreamDestroy),
    E("cuStreamDestroy", 4000, cuStreamDestroy_v2),
    E("cuStreamSynchronize", 2000, cuStreamSynchronize),
    P("cuStreamSynchronize", 7000, cuStreamSynchronize_ptsz),
    E("cuStreamQuery", 2000, cuStreamQuery),
    P("cuStreamQuery", 7000, cuStreamQuery_ptsz),
    E("cuStreamWaitEvent", 3020, cuStreamWaitEvent),
    P("cuStreamWaitEvent", 7000, cuStreamWaitEvent_ptsz),
    E("cuStreamGetCtx", 9020, cuStreamGetCtx),
    P("cuStreamGetCtx", 9020, cuStreamGetCtx_ptsz),

    E("cuEventCreate", 2000, cuEventCreate),
    E("cuEventRecord", 2000, cuEventRecord),
    P("cuEventRecord", 7000, cuEventRecord_ptsz),
    E("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags),
    P("cuEventRecordWithFlags", 11010, cuEventRecordWithFlags_ptsz),
    E("cuEventQuery", 2000, cuEventQuery),
    E("cuEventSynchronize", 2000, cuEventSynchronize),
    E("cuEventElapsedTime", 2000, cuEventElapsedTime),
    E("cuEventElapsedTime", 12080, cuEventElapsedTime_v2),
    E("cuEventDestroy", 2000, cuEventDestroy),
    E("cuEventDestroy", 4000, cuEventDestroy_v2),

    E("cuModuleLoad", 2000, cuModuleLoad),
    E("cuModuleLoadData", 2000, cuModuleLoadData),
    E("cuModuleLoadDataEx", 2010, cuModuleLoadDataEx),
    E("cuModuleLoadFatBinary", 2000, cuModuleLoadFatBinary),
    E("cuModuleUnload", 2000, cuModuleUnload),
    E("cuModuleGetFunction", 2000, cuModuleGetFunction),
    E("cuFuncGetAttribute", 2020, cuFuncGetAttribute),
    E("cuLaunchKernel", 4000, cuLaunchKernel),
    P("cuLaunchKernel", 7000, cuLaunchKernel_ptsz),
    E("cuLaunchKernelEx", 11060, cuLaunchKernelEx),
    P("cuLaunchKernelEx", 11060, cuLaunchKernelEx_ptsz),
    E("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel),
    P("cuLaunchCooperativeKernel", 9000, cuLaunchCooperativeKernel_ptsz),

    E("cuStreamBeginCapture", 10000, cuStreamBeginCapture),
    P("cuStreamBeginCapture", 10000, cuStreamBeginCapture_ptsz),
    E("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2),
    P("cuStreamBeginCapture", 10010, cuStreamBeginCapture_v2_ptsz),
    E("cuStreamEndCapture", 10000, cuStreamEndCapture),
    P("cuStreamEndCapture", 10000, cuStreamEndCapture_ptsz),
    E("cuStreamIsCapturing", 10000, cuStreamIsCapturing),
    P("cuStreamIsCapturing", 10000, cuStreamIsCapturing_ptsz),
    E("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo),
    P("cuStreamGetCaptureInfo", 10010, cuStreamGetCaptureInfo_ptsz),
    E("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2),
    P("cuStreamGetCaptureInfo", 11030, cuStreamGetCaptureInfo_v2_ptsz),
    E("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3),
    P("cuStreamGetCaptureInfo", 12030, cuStreamGetCaptureInfo_v3_ptsz),
    E("cuThreadExchangeStreamCaptureMode", 10010, cuThreadExchangeStreamCaptureMode),
    E("cuGraphCreate", 10000, cuGraphCreate),
    E("cuGraphDestroy", 10000, cuGraphDestroy),
    E("cuGraphAddMemAllocNode", 11040, cuGraphAddMemAllocNode),
    E("cuGraphInstantiate", 10000, cuGraphInstantiate),
    E("cuGraphInstantiate", 11000, cuGraphInstantiate_v2),
    E("cuGraphInstantiate", 12000, cuGraphInstantiateWithFlags),
    E("cuGraphInstantiateWithFlags", 11040, cuGraphInstantiateWithFlags),
    E("cuGraphLaunch", 10000, cuGraphLaunch),
    P("cuGraphLaunch", 10000, cuGraphLaunch_ptsz),
    E("cuGraphExecDestroy", 10000, cuGraphExecDestroy),

    E("cuMemGetInfo", 2000, cuMemGetInfo),
    E("cuMemGetInfo", 3020, cuMemGetInfo_v2),
    E("cuMemAlloc", 2000, cuMemAlloc),
    E("cuMemAlloc", 3020, cuMemAlloc_v2),
    E("cuMemAllocPitch", 2000, cuMemAllocPitch),
    E("cuMemAllocPitch", 3020, cuMemAllocPitch_v2),
    E("cuMemAllocManaged", 6000, cuMemAllocManaged),
    E("cuMemFree", 2000, cuMemFree),
    E("cuMemFree", 3020, cuMemFree_v2),
    E("cuMemGetAddressRange", 2000, cuMemGetAddressRange),
    E("cuMemGetAddressRange", 3020, cuMemGetAddressRange_v2),
    E("cuMemAllocAsync", 11020, cuMemAllocAsync),
    P("cuMemAllocAsync", 11020, cuMemAllocAsync_ptsz),
    E("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync),
    P("cuMemAllocFromPoolAsync", 11020, cuMemAllocFromPoolAsync_ptsz),
    E("cuMemFreeAsync", 11020, cuMemFreeAsync),
    P("cuMemFreeAsync", 11020, cuMemFreeAsync_ptsz),
    E("cuMemPoolCreate", 11020, cuMemPoolCreate),
    E("cuMemPoolDestroy", 11020, cuMemPoolDestroy),
    E("cuMemPoolTrimTo", 11020, cuMemPoolTrimTo),
    E("cuMemPoolSetAttribute", 11020, cuMemPoolSetAttribute),
    E("cuMemPoolGetAttribute", 11020, cuMemPoolGetAttribute),
    E("cuArrayCreate", 2000, cuArrayCreate),
    E("cuArrayCreate", 3020, cuArrayCreate_v2),
    E("cuArray3DCreate", 2000, cuArray3DCreate),
    E("cuArray3DCreate", 3020, cuArray3DCreate_v2),
    E("cuArrayDestroy", 2000, cuArrayDestroy),
    E("cuMipmappedArrayCreate", 5000, cuMipmappedArrayCreate),
    E("cuMipmappedArrayDestroy", 5000, cuMipmappedArrayDestroy),
    E("cuMemCreate", 10020, cuMemCreate),
    E("cuMemRelease", 10020, cuMemRelease),
    E("cuMemAddressReserve", 10020, cuMemAddressReserve),
    E("cuMemAddressFree", 10020, cuMemAddressFree),
    E("cuMemMap", 10020, cuMemMap),
    E("cuMemUnmap", 10020, cuMemUnmap),
    E("cuMemRetainAllocationHandle", 11000, cuMemRetainAllocationHandle),
    E("cuMemGetAllocationPropertiesFromHandle", 10020, cuMemGetAllocationPropertiesFromHandle),
    E("cuMemExportToShareableHandle", 10020, cuMemExportToShareableHandle),
    E("cuMemImportFromShareableHandle", 10020, cuMemImportFromShareableHandle),
    E("cuMemSetAccess", 10020, cuMemSetAccess),
    E("cuMemGetAllocationGranularity", 10020, cuMemGetAllocationGranularity),
    E("cuMemAllocHost", 2000, cuMemAllocHost),
    E("cuMemAllocHost", 3020, cuMemAllocHost_v2),
    E("cuMemHostAlloc", 2020, cuMemHostAlloc),
    E("cuMemFreeHost", 2000, cuMemFreeHost),
    E("cuMemHostRegister", 4000, cuMemHostRegister),
    E("cuMemHostRegister", 6050, cuMemHostRegister_v2),
    E("cuMemHostUnregister", 4000, cuMemHostUnregister),
    E("cuMemHostGetDevicePointer", 2020, cuMemHostGetDevicePointer),
    E("cuMemHostGetDevicePointer", 3020, cuMemHostGetDevicePointer_v2),

    E("cuMemsetD8", 2000, cuMemsetD8),
    E("cuMemsetD8", 3020, cuMemsetD8_v2),
    P("cuMemsetD8", 7000, cuMemsetD8_v2_ptds),
    E("cuMemsetD16", 2000, cuMemsetD16),
    E("cuMemsetD16", 3020, cuMemsetD16_v2),
    P("cuMemsetD16", 7000, cuMemsetD16_v2_ptds),
    E("cuMemsetD32", 2000, cuMemsetD32),
    E("cuMemsetD32", 3020, cuMemsetD32_v2),
    P("cuMemsetD32", 7000, cuMemsetD32_v2_ptds),
    E("cuMemsetD8Async", 3020, cuMemsetD8Async),
    P("cuMemsetD8Async", 7000, cuMemsetD8Async_ptsz),
    E("cuMemsetD16Async", 3020, cuMemsetD16Async),
    P("cuMemsetD16Async", 7000, cuMemsetD16Async_ptsz),
    E("cuMemsetD32Async", 3020, cuMemsetD32Async),
    P("cuMemsetD32Async", 7000, cuMemsetD32Async_ptsz),

    E("cuMemcpyHtoD", 2000, cuMemcpyHtoD),
    E("cuMemcpyHtoD", 3020, cuMemcpyHtoD_v2),
    P("cuMemcpyHtoD", 7000, cuMemcpyHtoD_v2_ptds),
    E("cuMemcpyDtoH", 2000, cuMemcpyDtoH),
    E("cuMemcpyDtoH", 3020, cuMemcpyDtoH_v2),
    P("cuMemcpyDtoH", 7000, cuMemcpyDtoH_v2_ptds),
    E("cuMemcpyDtoD", 2000, cuMemcpyDtoD),
    E("cuMemcpyDtoD", 3020, cuMemcpyDtoD_v2),
    P("cuMemcpyDtoD", 7000, cuMemcpyDtoD_v2_ptds),
    E("cuMemcpyHtoDAsync", 2000, cuMemcpyHtoDAsync),
    E("cuMemcpyHtoDAsync", 3020, cuMemcpyHtoDAsync_v2),
    P("cuMemcpyHtoDAsync", 7000, cuMemcpyHtoDAsync_v2_ptsz),
    E("cuMemcpyDtoHAsync", 2000, cuMemcpyDtoHAsync),
    E("cuMemcpyDtoHAsync", 3020, cuMemcpyDtoHAsync_v2),
    P("cuMemcpyDtoHAsync", 7000, cuMemcpyDtoHAsync_v2_ptsz),
    E("cuMemcpyDtoDAsync", 3000, cuMemcpyDtoDAsync),
    E("cuMemcpyDtoDAsync", 3020, cuMemcpyDtoDAsync_v2),
    P("cuMemcpyDtoDAsync", 7000, cuMemcpyDtoDAsync_v2_ptsz),
    E("cuMemcpy", 4000, cuMemcpy),
    P("cuMemcpy", 7000, cuMemcpy_ptds),
    E("cuMemcpyAsync", 4000, cuMemcpyAsync),
    P("cuMemcpyAsync", 7000, cuMemcpyAsync_ptsz),
    E("cuMemcpy2D", 2000, cuMemcpy2D),
    E("cuMemcpy2D", 3020, cuMemcpy2D_v2),
    P("cuMemcpy2D", 7000, cuMemcpy2D_v2_ptds),
    E("cuMemcpy2DUnaligned", 2000, cuMemcpy2DUnaligned),
    E("cuMemcpy2DUnaligned", 3020, cuMemcpy2DUnaligned_v2),
    P("cuMemcpy2DUnaligned", 7000, cuMemcpy2DUnaligned_v2_ptds),
    E("cuMemcpy2DAsync", 2000, cuMemcpy2DAsync),
    E("cuMemcpy2DAsync", 3020, cuMemcpy2DAsync_v2),
    P("cuMemcpy2DAsync", 7000, cuMemcpy2DAsync_v2_ptsz),
};

static CUresult lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                       CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (!symbol || !pfn ||
        (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
                               CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    bool want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    const struct fg_proc *best = NULL, *best_plain = NULL;
    for (size_t i = 0; i < sizeof fg_procs / sizeof fg_procs[0]; i++) {
        const struct fg_proc *e = &fg_procs[i];
        if (strcmp(e->name, symbol) != 0)
            continue;
        st = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        if (e->version > cudaVersion)
            continue;
        const struct fg_proc **slot = e->per_thread ? &best : &best_plain;
        if (!*slot || e->version >= (*slot)->version)
            *slot = e;
    }
    if (!want_pt || !best)
        best = best_plain;
    if (status)
        *status = best ? CU_GET_PROC_ADDRESS_SUCCESS : st;
    if (!best)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = best->fn;
    return CUDA_SUCCESS;
}

FG_API CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

FG_API CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    return lookup(symbol, pfn, cudaVersion, flags, NULL);
}
