/* Integration tests of fakegpu's libcuda.so.1 through the real ABI: this program links
 * libcuda.so.1 by SONAME, and cuda_run.sh gives every run a fresh FAKEGPU_STATE_DIR.
 * `cuda_api <case>` runs one case; each failed check prints one line and the program
 * exits 1. */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "abi/cuda.h"
#include "abi/nvml.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CU_EQ(call, want)                                                                          \
    do {                                                                                           \
        CUresult got_ = (call);                                                                    \
        if (got_ != (want)) {                                                                      \
            const char *name_ = NULL;                                                              \
            cuGetErrorName(got_, &name_);                                                          \
            fprintf(stderr, "%s:%d: %s returned %d (%s), want %s\n", __FILE__, __LINE__, #call,    \
                    (int)got_, name_ ? name_ : "?", #want);                                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CU_OK(call) CU_EQ(call, CUDA_SUCCESS)
#define MIB         (1024ULL * 1024ULL)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static CUcontext setup(CUdevice *dev_out)
{
    CUcontext ctx = NULL;
    CUdevice dev = 0;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGet(&dev, 0));
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CU_OK(cuCtxSetCurrent(ctx));
    if (dev_out)
        *dev_out = dev;
    return ctx;
}

static CUfunction get_function(const char *name)
{
    static const char ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n";
    CUmodule mod = NULL;
    CUfunction f = NULL;
    CU_OK(cuModuleLoadData(&mod, ptx));
    CU_OK(cuModuleGetFunction(&f, mod, name));
    return f;
}

static CUresult spin(CUfunction f, unsigned long long ns, CUstream s)
{
    void *params[] = {&ns};
    return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, params, NULL);
}

/* FAKEGPU_DEVICES="Test GPU A:4GiB:40,Test GPU B:8GiB:80" */
static void test_devices(void)
{
    int n = 0;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    CHECK(n == 2);
    const char *names[2] = {"Test GPU A", "Test GPU B"};
    size_t mems[2] = {4096 * MIB, 8192 * MIB};
    int sms[2] = {40, 80};
    CUuuid uuids[2];
    for (int i = 0; i < 2; i++) {
        CUdevice d;
        char name[128], bus[32];
        size_t total = 0;
        int sm = 0, major = 0;
        CU_OK(cuDeviceGet(&d, i));
        CU_OK(cuDeviceGetName(name, sizeof name, d));
        CHECK(strcmp(name, names[i]) == 0);
        CU_OK(cuDeviceTotalMem_v2(&total, d));
        CHECK(total == mems[i]);
        CU_OK(cuDeviceGetAttribute(&sm, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        CHECK(sm == sms[i]);
        CU_OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d));
        CHECK(major >= 7);
        CUuuid v2;
        CU_OK(cuDeviceGetUuid(&uuids[i], d));
        CU_OK(cuDeviceGetUuid_v2(&v2, d));
        CHECK(memcmp(&uuids[i], &v2, sizeof v2) == 0);
        CU_OK(cuDeviceGetPCIBusId(bus, sizeof bus, d));
        CHECK(strlen(bus) >= 12 && bus[4] == ':');
        CUdevice back = -1;
        CU_OK(cuDeviceGetByPCIBusId(&back, bus));
        CHECK(back == d);
        char small[5];
        CU_OK(cuDeviceGetName(small, sizeof small, d)); /* truncated, as the driver does */
        CHECK(strcmp(small, "Test") == 0);
    }
    CHECK(memcmp(&uuids[0], &uuids[1], sizeof uuids[0]) != 0);
    CUdevice d;
    CU_EQ(cuDeviceGet(&d, 2), CUDA_ERROR_INVALID_DEVICE);
    int v = 0;
    CU_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuDriverGetVersion(&v));
    CHECK(v >= 12000);
}

/* One 1 GiB device, FAKEGPU_CONTEXT_MIB=256. */
static void test_capacity(void)
{
    CUdevice dev;
    setup(&dev);
    size_t free0 = 0, total = 0;
    CU_OK(cuMemGetInfo_v2(&free0, &total));
    CHECK(total == 1024 * MIB);
    CHECK(free0 == total - 256 * MIB);

    CUdeviceptr all = 0, extra = 0;
    CU_OK(cuMemAlloc_v2(&all, free0));
    CU_EQ(cuMemAlloc_v2(&extra, 1), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemFree_v2(all));
    CU_OK(cuMemAlloc_v2(&all, free0));
    CU_OK(cuMemFree_v2(all));
    CU_EQ(cuMemAlloc_v2(&all, free0 + 1), CUDA_ERROR_OUT_OF_MEMORY);

    size_t f = 0;
    /* pitched: pitch x height counted */
    CUdeviceptr p;
    size_t pitch = 0;
    CU_OK(cuMemAllocPitch_v2(&p, &pitch, 1000, 100, 4));
    CHECK(pitch >= 1000);
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - pitch * 100);
    CU_OK(cuMemFree_v2(p));
    /* managed */
    CU_OK(cuMemAllocManaged(&p, 10 * MIB, CU_MEM_ATTACH_GLOBAL));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 10 * MIB);
    CU_OK(cuMemFree_v2(p));
    /* arrays: 256 x 256 float4 = 1 MiB */
    CUarray arr;
    CUDA_ARRAY_DESCRIPTOR ad = {256, 256, CU_AD_FORMAT_FLOAT, 4};
    CU_OK(cuArrayCreate_v2(&arr, &ad));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 1 * MIB);
    CU_OK(cuArrayDestroy(arr));
    CU_EQ(cuArrayDestroy(arr), CUDA_ERROR_INVALID_HANDLE);
    CUDA_ARRAY3D_DESCRIPTOR a3 = {64, 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CU_OK(cuArray3DCreate_v2(&arr, &a3));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 64 * 64 * 64);
    CU_OK(cuArrayDestroy(arr));
    CUmipmappedArray mip;
    CUDA_ARRAY3D_DESCRIPTOR m = {256, 256, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1, 0};
    CU_OK(cuMipmappedArrayCreate(&mip, &m, 2));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - (256 * 256 + 128 * 128));
    CU_OK(cuMipmappedArrayDestroy(mip));
    /* past the dimension limits a real driver refuses, whatever memory is free */
    CUDA_ARRAY3D_DESCRIPTOR tall = {16, 32769, 0, CU_AD_FORMAT_FLOAT, 1, 0};
    CU_EQ(cuMipmappedArrayCreate(&mip, &tall, 1), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY_DESCRIPTOR wide = {131073, 1, CU_AD_FORMAT_FLOAT, 1};
    CU_EQ(cuArrayCreate_v2(&arr, &wide), CUDA_ERROR_INVALID_VALUE);
    CUDA_ARRAY3D_DESCRIPTOR deep = {16, 16, 16385, CU_AD_FORMAT_FLOAT, 1, 0};
    CU_EQ(cuArray3DCreate_v2(&arr, &deep), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
    /* async: a freed block stays counted until the pool releases it at synchronize */
    CU_OK(cuMemAllocAsync(&p, 32 * MIB, NULL));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 32 * MIB);
    CU_OK(cuMemFreeAsync(p, NULL));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 32 * MIB);
    CU_OK(cuStreamSynchronize(NULL));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
    /* a release threshold keeps the block across synchronize until trimmed */
    CUmemoryPool pool;
    CU_OK(cuDeviceGetDefaultMemPool(&pool, dev));
    cuuint64_t threshold = 64 * MIB, got = 0;
    CU_OK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
    CU_OK(cuMemAllocFromPoolAsync(&p, 16 * MIB, pool, NULL));
    CU_OK(cuMemFreeAsync(p, NULL));
    CU_OK(cuCtxSynchronize());
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 16 * MIB);
    CU_OK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &got));
    CHECK(got == 16 * MIB);
    CU_OK(cuMemAllocAsync(&p, 16 * MIB, NULL)); /* reuses the cached block: no new charge */
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 16 * MIB);
    CU_OK(cuMemFreeAsync(p, NULL));
    CU_OK(cuMemPoolTrimTo(pool, 0));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
    /* VMM: created memory counts; mapping makes it readable and writable */
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t gran = 0;
    CU_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CHECK(gran == 2 * MIB);
    CUmemGenericAllocationHandle h;
    CU_EQ(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemCreate(&h, 4 * gran, &prop, 0));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 4 * gran);
    CUdeviceptr va;
    CU_OK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    CHECK(va % gran == 0);
    CU_OK(cuMemMap(va, 4 * gran, 0, h, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CU_OK(cuMemSetAccess(va, 4 * gran, &acc, 1));
    CU_OK(cuMemsetD32_v2(va, 0xabcdef01u, gran));
    unsigned word = 0;
    CU_OK(cuMemcpyDtoH_v2(&word, va + 4 * gran - 4, 4));
    CHECK(word == 0xabcdef01u);
    CU_OK(cuMemRelease(h)); /* still mapped: still counted */
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 4 * gran);
    CU_OK(cuMemUnmap(va, 4 * gran));
    CU_OK(cuMemAddressFree(va, 4 * gran));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
    /* host memory is not device memory */
    void *hp = NULL;
    CU_OK(cuMemAllocHost_v2(&hp, 64 * MIB));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
    CU_OK(cuMemFreeHost(hp));
    CU_EQ(cuMemFreeHost(hp), CUDA_ERROR_INVALID_VALUE);
    /* a second context costs another FAKEGPU_CONTEXT_MIB */
    CUcontext c2;
    CU_OK(cuCtxCreate_v2(&c2, 0, dev));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0 - 256 * MIB);
    CU_OK(cuCtxDestroy_v2(c2));
    CU_OK(cuMemGetInfo_v2(&f, &total));
    CHECK(f == free0);
}

static void test_memcpy(void)
{
    setup(NULL);
    enum { N = 1 << 20 };
    unsigned char *src = malloc(N), *dst = malloc(N);
    CHECK(src && dst);
    if (!src || !dst)
        return;
    for (size_t i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr a, b;
    CU_OK(cuMemAlloc_v2(&a, N));
    CU_OK(cuMemAlloc_v2(&b, N));
    CU_OK(cuMemcpyHtoD_v2(a, src, N));
    CU_OK(cuMemcpyDtoD_v2(b, a, N));
    memset(dst, 0, N);
    CU_OK(cuMemcpyDtoH_v2(dst, b, N));
    CHECK(memcmp(src, dst, N) == 0);
    /* async + generic */
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(cuMemsetD8Async(a, 0x5a, N, s));
    CU_OK(cuMemcpyAsync(b, a, N, s));
    CU_OK(cuMemcpyDtoHAsync_v2(dst, b, N, s));
    CU_OK(cuStreamSynchronize(s));
    CHECK(dst[0] == 0x5a && dst[N - 1] == 0x5a);
    CU_OK(cuMemsetD16_v2(a, 0x1234, N / 2));
    CU_OK(cuMemcpy((CUdeviceptr)(uintptr_t)dst, a, 4));
    CHECK(dst[0] == 0x34 && dst[1] == 0x12 && dst[2] == 0x34);
    /* 2D: copy a 100 x 10 window out of a pitched allocation */
    CUdeviceptr p;
    size_t pitch;
    CU_OK(cuMemAllocPitch_v2(&p, &pitch, 100, 10, 4));
    CUDA_MEMCPY2D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_HOST;
    c.srcHost = src;
    c.srcPitch = 100;
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c.dstDevice = p;
    c.dstPitch = pitch;
    c.WidthInBytes = 100;
    c.Height = 10;
    CU_OK(cuMemcpy2D_v2(&c));
    memset(dst, 0, N);
    CUDA_MEMCPY2D back = {0};
    back.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    back.srcDevice = p;
    back.srcPitch = pitch;
    back.dstMemoryType = CU_MEMORYTYPE_HOST;
    back.dstHost = dst;
    back.dstPitch = 100;
    back.WidthInBytes = 100;
    back.Height = 10;
    CU_OK(cuMemcpy2DAsync_v2(&back, s));
    CU_OK(cuStreamSynchronize(s));
    CHECK(memcmp(src, dst, 1000) == 0);
    /* copies outside any allocation are refused */
    CU_EQ(cuMemcpyHtoD_v2(a + N - 8, src, 16), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr base = 0;
    size_t size = 0;
    CU_OK(cuMemGetAddressRange_v2(&base, &size, a + 100));
    CHECK(base == a && size == N);
    CU_OK(cuStreamDestroy_v2(s));
    CU_OK(cuMemFree_v2(a));
    CU_OK(cuMemFree_v2(b));
    CU_OK(cuMemFree_v2(p));
    free(src);
    free(dst);
}

static void test_spin(void)
{
    setup(NULL);
    CUfunction f = get_function("vgpu_spin");
    CUevent e0, e1;
    CU_OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU_OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    CUstream s;
    CU_OK(cuStreamCreate(&s, 0));
    /* warm up once so that set-up cost stays out of the measurement */
    CU_OK(spin(f, 1000000, s));
    CU_OK(cuStreamSynchronize(s));
    double t0 = now_ms();
    CU_OK(cuEventRecord(e0, s));
    CU_OK(spin(f, 20000000ULL, s));
    CU_OK(cuEventRecord(e1, s));
    double launched = now_ms() - t0;
    CU_EQ(cuEventQuery(e1), CUDA_ERROR_NOT_READY);
    CU_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    CU_OK(cuStreamSynchronize(s));
    double took = now_ms() - t0;
    printf("spin 20 ms: launch returned after %.3f ms, synchronize after %.3f ms\n", launched,
           took);
    CHECK(launched < 10.0); /* launches are asynchronous */
    CHECK(took >= 19.5 && took <= 60.0);
    CU_OK(cuEventQuery(e1));
    CU_OK(cuStreamQuery(s));
    float ms = 0;
    CU_OK(cuEventElapsedTime_v2(&ms, e0, e1));
    printf("event elapsed %.3f ms\n", (double)ms);
    CHECK(ms >= 19.5f && ms <= 25.0f);
    /* another kernel runs FAKEGPU_KERNEL_NS (set to 5 ms by the test) */
    CUfunction other = get_function("some_kernel");
    t0 = now_ms();
    CU_OK(cuLaunchKernel(other, 8, 1, 1, 128, 1, 1, 0, NULL, NULL, NULL));
    CU_OK(cuCtxSynchronize());
    took = now_ms() - t0;
    CHECK(took >= 4.5 && took <= 40.0);
    /* spin duration through the packed `extra` buffer and cuLaunchKernelEx */
    unsigned long long ns = 10000000ULL;
    size_t sz = sizeof ns;
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &sz,
                     CU_LAUNCH_PARAM_END};
    CUlaunchConfig cfg = {1, 1, 1, 32, 1, 1, 0, s, NULL, 0};
    t0 = now_ms();
    CU_OK(cuLaunchKernelEx(&cfg, f, NULL, extra));
    CU_OK(cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, s, (void *[]){&ns}));
    CU_OK(cuStreamSynchronize(s));
    took = now_ms() - t0;
    CHECK(took >= 19.5 && took <= 60.0);
    /* events: never recorded, no timing */
    CUevent nt, fresh;
    CU_OK(cuEventCreate(&nt, CU_EVENT_DISABLE_TIMING));
    CU_OK(cuEventCreate(&fresh, 0));
    CU_OK(cuEventRecord(nt, s));
    CU_EQ(cuEventElapsedTime_v2(&ms, e0, nt), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuEventElapsedTime_v2(&ms, e0, fresh), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuEventQuery(fresh));
    CU_OK(cuEventSynchronize(nt));
    /* stream waits on an event of another stream */
    CUstream s2;
    CU_OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    t0 = now_ms();
    CU_OK(spin(f, 15000000ULL, s));
    CU_OK(cuEventRecord(e1, s));
    CU_OK(cuStreamWaitEvent(s2, e1, 0));
    CU_OK(spin(f, 5000000ULL, s2));
    CU_OK(cuStreamSynchronize(s2));
    took = now_ms() - t0;
    CHECK(took >= 19.5 && took <= 60.0);
    CU_OK(cuEventDestroy_v2(nt));
    CU_OK(cuEventDestroy_v2(fresh));
    CU_EQ(cuEventDestroy_v2(fresh), CUDA_ERROR_INVALID_HANDLE);
}

static void test_graph(void)
{
    setup(NULL);
    CUfunction f = get_function("vgpu_spin");
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CUdeviceptr d;
    CU_OK(cuMemAlloc_v2(&d, 4096));
    CU_EQ(cuStreamBeginCapture_v2(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
          CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    double t0 = now_ms();
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    CU_OK(cuStreamIsCapturing(s, &st));
    CHECK(st == CU_STREAM_CAPTURE_STATUS_ACTIVE);
    cuuint64_t id = 0;
    CUgraph live = NULL;
    CU_OK(cuStreamGetCaptureInfo_v2(s, &st, &id, &live, NULL, NULL));
    CHECK(id != 0 && live != NULL);
    for (int i = 0; i < 3; i++)
        CU_OK(spin(f, 10000000ULL, s));
    CU_OK(cuMemsetD32Async(d, 7, 1024, s));
    CU_EQ(cuStreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    CUgraph g;
    CU_OK(cuStreamEndCapture(s, &g));
    CU_OK(cuStreamSynchronize(s));
    double captured = now_ms() - t0;
    CHECK(captured < 15.0); /* captured launches did not run */
    unsigned word = 0;
    CU_OK(cuMemcpyDtoH_v2(&word, d, 4));
    CHECK(word == 0); /* nor did the captured memset */
    CUgraphExec x;
    CU_OK(cuGraphInstantiateWithFlags(&x, g, 0));
    t0 = now_ms();
    CU_OK(cuGraphLaunch(x, s));
    CU_OK(cuGraphLaunch(x, s));
    CU_OK(cuStreamSynchronize(s));
    double ran = now_ms() - t0;
    printf("graph: capture %.3f ms, two replays of 3 x 10 ms %.3f ms\n", captured, ran);
    CHECK(ran >= 59.5 && ran <= 150.0);
    CU_OK(cuMemcpyDtoH_v2(&word, d + 4092, 4));
    CHECK(word == 7);
    CU_OK(cuGraphExecDestroy(x));
    CU_EQ(cuGraphLaunch(x, s), CUDA_ERROR_INVALID_HANDLE);
    CU_OK(cuGraphDestroy(g));
    CU_OK(cuGraphCreate(&g, 0));
    CU_OK(cuGraphInstantiate(&x, g, NULL, NULL, 0));
    CU_OK(cuGraphLaunch(x, NULL));
    CU_OK(cuGraphExecDestroy(x));
    CU_OK(cuGraphDestroy(g));
}

static void test_bad_use(void)
{
    CUdeviceptr p = 0;
    CUcontext ctx = NULL;
    int n;
    CU_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CU_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_NOT_INITIALIZED);
    CU_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
    CU_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuInit(0));
    CU_EQ(cuDeviceGetCount(NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(cuStreamSynchronize(NULL), CUDA_ERROR_INVALID_CONTEXT);
    CU_OK(cuCtxGetCurrent(&ctx));
    CHECK(ctx == NULL);
    CU_EQ(cuCtxSetCurrent((CUcontext)(uintptr_t)0xdeadbeef), CUDA_ERROR_INVALID_CONTEXT);

    CU_OK(cuCtxCreate_v2(&ctx, 0, 0));
    CU_EQ(cuMemAlloc_v2(NULL, 16), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuMemFree_v2((CUdeviceptr)0x12345678), CUDA_ERROR_INVALID_VALUE);
    CU_OK(cuMemAlloc_v2(&p, 16));
    CU_OK(cuMemFree_v2(p));
    CU_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE); /* double free */
    CU_EQ(cuMemAlloc_v2(&p, 1ULL << 40), CUDA_ERROR_OUT_OF_MEMORY);

    CUstream garbage = (CUstream)(uintptr_t)0x1000;
    CUevent bad_event = (CUevent)(uintptr_t)0x2000;
    CU_EQ(cuStreamSynchronize(garbage), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuStreamQuery(garbage), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuStreamDestroy_v2(garbage), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuEventRecord(bad_event, NULL), CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuEventSynchronize(bad_event), CUDA_ERROR_INVALID_HANDLE);
    CUstream s;
    CU_OK(cuStreamCreate(&s, 0));
    CU_OK(cuStreamDestroy_v2(s));
    CU_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE); /* stale */
    CUfunction f = get_function("k");
    CU_EQ(cuLaunchKernel((CUfunction)(uintptr_t)0x3000, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL),
          CUDA_ERROR_INVALID_HANDLE);
    CU_EQ(cuLaunchKernel(f, 0, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuModuleGetFunction(&f, (CUmodule)(uintptr_t)0x4000, "k"), CUDA_ERROR_INVALID_HANDLE);
    CUmodule mod;
    CU_EQ(cuModuleLoad(&mod, "/nonexistent/kernel.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
    const char *str = NULL;
    CU_OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));
    CHECK(str && strcmp(str, "out of memory") == 0);
    CU_OK(cuGetErrorName(CUDA_ERROR_INVALID_HANDLE, &str));
    CHECK(str && strcmp(str, "CUDA_ERROR_INVALID_HANDLE") == 0);
    CU_EQ(cuGetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);

    /* destroyed context */
    CU_OK(cuCtxPushCurrent_v2(ctx)); /* twice on the stack */
    CUcontext popped = NULL;
    CU_OK(cuCtxPopCurrent_v2(&popped));
    CHECK(popped == ctx);
    CU_OK(cuCtxDestroy_v2(ctx));
    CU_EQ(cuCtxDestroy_v2(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EQ(cuCtxSetCurrent(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EQ(cuCtxPushCurrent_v2(ctx), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CU_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT); /* nothing current any more */
    CU_EQ(cuCtxPopCurrent_v2(&popped), CUDA_ERROR_INVALID_CONTEXT);

    /* primary context: retained, released, state */
    unsigned flags = 1;
    int active = 1;
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 0);
    CU_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CU_OK(cuDevicePrimaryCtxGetState(0, &flags, &active));
    CHECK(active == 1);
    CU_OK(cuCtxSetCurrent(ctx));
    CU_OK(cuDevicePrimaryCtxRelease_v2(0));
    CU_EQ(cuMemAlloc_v2(&p, 16), CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_ERROR_INVALID_CONTEXT);
    CU_EQ(cuDevicePrimaryCtxRetain(&ctx, 99), CUDA_ERROR_INVALID_DEVICE);
}

typedef CUresult (*get_proc_v2_fn)(const char *, void **, int, cuuint64_t,
                                   CUdriverProcAddressQueryResult *);

static void test_proc_address(void)
{
    CU_OK(cuInit(0));
    /* the runtime's first step: cuGetProcAddress_v2 of cuGetProcAddress itself */
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CU_OK(cuGetProcAddress_v2("cuGetProcAddress", &fn, 12000, 0, &st));
    CHECK(fn == (void *)cuGetProcAddress_v2 && st == CU_GET_PROC_ADDRESS_SUCCESS);
    get_proc_v2_fn gpa = (get_proc_v2_fn)fn;
    CU_OK(gpa("cuGetProcAddress", &fn, 11030, 0, &st));
    CHECK(fn == (void *)cuGetProcAddress);

    static const struct {
        const char *name;
        void *legacy, *per_thread;
    } names[] = {
        {"cuInit", (void *)cuInit, (void *)cuInit},
        {"cuMemAlloc", (void *)cuMemAlloc_v2, (void *)cuMemAlloc_v2},
        {"cuMemGetInfo", (void *)cuMemGetInfo_v2, (void *)cuMemGetInfo_v2},
        {"cuCtxCreate", (void *)cuCtxCreate_v3, (void *)cuCtxCreate_v3},
        {"cuDeviceTotalMem", (void *)cuDeviceTotalMem_v2, (void *)cuDeviceTotalMem_v2},
        {"cuDeviceGetUuid", (void *)cuDeviceGetUuid_v2, (void *)cuDeviceGetUuid_v2},
        {"cuLaunchKernel", (void *)cuLaunchKernel, (void *)cuLaunchKernel_ptsz},
        {"cuStreamSynchronize", (void *)cuStreamSynchronize, (void *)cuStreamSynchronize_ptsz},
        {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, (void *)cuMemcpyHtoD_v2_ptds},
        {"cuMemcpyAsync", (void *)cuMemcpyAsync, (void *)cuMemcpyAsync_ptsz},
        {"cuMemsetD32", (void *)cuMemsetD32_v2, (void *)cuMemsetD32_v2_ptds},
        {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2,
         (void *)cuStreamBeginCapture_v2_ptsz},
        {"cuGraphInstantiate", (void *)cuGraphInstantiateWithFlags,
         (void *)cuGraphInstantiateWithFlags},
        {"cuGraphLaunch", (void *)cuGraphLaunch, (void *)cuGraphLaunch_ptsz},
        {"cuEventRecord", (void *)cuEventRecord, (void *)cuEventRecord_ptsz},
        {"cuMemAllocAsync", (void *)cuMemAllocAsync, (void *)cuMemAllocAsync_ptsz},
        {"cuEventElapsedTime", (void *)cuEventElapsedTime, (void *)cuEventElapsedTime},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fn = NULL;
        CU_OK(gpa(names[i].name, &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
        if (fn != names[i].legacy)
            fprintf(stderr, "legacy %s: wrong entry point\n", names[i].name);
        CHECK(fn == names[i].legacy);
        CU_OK(gpa(names[i].name, &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
        if (fn != names[i].per_thread)
            fprintf(stderr, "per-thread %s: wrong entry point\n", names[i].name);
        CHECK(fn == names[i].per_thread);
    }
    /* older ABI for older versions */
    CU_OK(gpa("cuMemAlloc", &fn, 3000, 0, &st));
    CHECK(fn == (void *)cuMemAlloc);
    CU_OK(gpa("cuMemAlloc", &fn, 3020, 0, &st));
    CHECK(fn == (void *)cuMemAlloc_v2);
    CU_OK(gpa("cuCtxCreate", &fn, 11000, 0, &st));
    CHECK(fn == (void *)cuCtxCreate_v2);
    CU_OK(gpa("cuCtxCreate", &fn, 12050, 0, &st));
    CHECK(fn == (void *)cuCtxCreate_v4);
    CU_OK(gpa("cuEventElapsedTime", &fn, 12080, 0, &st));
    CHECK(fn == (void *)cuEventElapsedTime_v2);
    CU_OK(gpa("cuMemcpyHtoD", &fn, 6050, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    CHECK(fn == (void *)cuMemcpyHtoD_v2); /* per-thread variants start at 7.0 */
    /* errors */
    fn = (void *)1;
    CU_EQ(gpa("cuNoSuchFunction", &fn, 12000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    CU_EQ(gpa("cuLaunchKernelEx", &fn, 11000, 0, &st), CUDA_ERROR_NOT_FOUND);
    CHECK(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    CU_EQ(gpa("cuInit", &fn, 12000, 0x100, &st), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(gpa(NULL, &fn, 12000, 0, &st), CUDA_ERROR_INVALID_VALUE);
    CU_EQ(cuGetProcAddress("cuNoSuchFunction", &fn, 12000, 0), CUDA_ERROR_NOT_FOUND);
    /* a fetched pointer works */
    CU_OK(gpa("cuDeviceGetCount", &fn, 12000, 0, &st));
    int n = 0;
    CU_OK(((CUresult(*)(int *))fn)(&n));
    CHECK(n == 1);
}

/* ---- several processes ---- */

static void child_exit(void)
{
    fflush(stdout);
    _exit(failures ? 1 : 0);
}

/* N processes each keep their device busy with spins of spin_ns for a window; each
 * reports the spins it completed, with CUDA_VISIBLE_DEVICES=visible[i] (NULL: unset). */
static const double share_window_ms = 1500.0;
static void share_run(int nproc, const char *const *visible, unsigned long long spin_ns,
                      long counts[])
{
    const double window_ms = share_window_ms;
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pids[8];
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < nproc; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(fds[0]);
            if (visible && visible[i])
                setenv("CUDA_VISIBLE_DEVICES", visible[i], 1);
            setup(NULL);
            CUfunction f = get_function("vgpu_spin");
            CUstream s;
            CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
            /* Two batches of 4 spins in flight: the next batch is queued before the
             * previous one is waited for, so the stream never runs dry while this process
             * waits for the CPU, and the device's busy time is the simulator's to give. */
            CUevent batch[2];
            CU_OK(cuEventCreate(&batch[0], CU_EVENT_DEFAULT));
            CU_OK(cuEventCreate(&batch[1], CU_EVENT_DEFAULT));
            long done = 0;
            double t0 = now_ms();
            for (int k = 0; k < 4; k++)
                CU_OK(spin(f, spin_ns, s));
            CU_OK(cuEventRecord(batch[0], s));
            for (int b = 1; now_ms() - t0 < window_ms; b ^= 1) {
                for (int k = 0; k < 4; k++)
                    CU_OK(spin(f, spin_ns, s));
                CU_OK(cuEventRecord(batch[b], s));
                CU_OK(cuEventSynchronize(batch[b ^ 1]));
                if (now_ms() - t0 <= window_ms)
                    done += 4;
            }
            CU_OK(cuStreamSynchronize(s));
            char line[32];
            int len = snprintf(line, sizeof line, "%d %ld\n", i, done);
            CHECK(write(fds[1], line, (size_t)len) == len);
            child_exit();
        }
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    for (int k = 0; k < nproc && in; k++) {
        int i = -1;
        long n = 0;
        CHECK(fscanf(in, "%d %ld", &i, &n) == 2 && i >= 0 && i < nproc);
        if (i >= 0 && i < nproc)
            counts[i] = n;
    }
    if (in)
        fclose(in);
    for (int i = 0; i < nproc; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
}

/* Checks that nproc processes, spinning on one timeline, kept it busy together and took
 * fair shares of it (spin_dev_ns: one spin's device time). */
static void check_shared(int nproc, const long counts[], double spin_dev_ns)
{
    const double window_ms = share_window_ms, spin_ms = spin_dev_ns / 1e6;
    long total = 0;
    for (int i = 0; i < nproc; i++)
        total += counts[i];
    double busy_ms = (double)total * spin_ms;
    printf("%d processes over %.0f ms: device busy %.0f ms (%.0f%%);", nproc, window_ms, busy_ms,
           100.0 * busy_ms / window_ms);
    for (int i = 0; i < nproc; i++)
        printf(" %ld", counts[i]);
    printf(" spins\n");
    /* busy: at least 95 % of the window (docs/benchmarks.md states 99 %: two batches in
     * flight keep each stream fed; the window's last partial batch and start-up are the
     * 5 %); fair: each within 10 % of the mean (measured: within 2 % on a loaded 2-core
     * machine, this case running alone, RUN_SERIAL), so that an unfair split, 2 processes
     * at 45/55 or worse, fails */
    CHECK(busy_ms >= 0.95 * window_ms - 8.0 * spin_ms && busy_ms <= 1.05 * window_ms + 50.0);
    double mean = (double)total / nproc;
    for (int i = 0; i < nproc; i++)
        CHECK((double)counts[i] >= 0.90 * mean && (double)counts[i] <= 1.10 * mean);
}

/* N processes each keep the device busy with 2 ms spins: fair sharing, every process gets
 * about 1/N of the device, and together they keep it busy. */
static void test_share(int nproc)
{
    long counts[8] = {0};
    share_run(nproc, NULL, 2000000ULL, counts);
    check_shared(nproc, counts, 2000000.0);
}

/* ---- CUDA_VISIBLE_DEVICES ----
 * FAKEGPU_DEVICES="Test GPU A:1GiB:10,Test GPU B:2GiB:20,Test GPU C:3GiB:30". Every value is
 * tried in a fresh child (the driver reads the variable once, in cuInit); the first child,
 * with the variable unset, records what each physical device looks like. */

struct phys_dev {
    char name[64];
    char uuid[48];
    char bus[32];
    size_t total;
};
static struct phys_dev *phys; /* shared with the children (MAP_SHARED) */
static int want[3], want_n;   /* the physical device expected behind each ordinal */

static void uuid_text(const CUuuid *u, char *out, size_t size)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    snprintf(out, size, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

/* Runs fn in a child with CUDA_VISIBLE_DEVICES=value (NULL: unset). */
static void with_visible(const char *value, void (*fn)(void))
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (value)
            setenv("CUDA_VISIBLE_DEVICES", value, 1);
        else
            unsetenv("CUDA_VISIBLE_DEVICES");
        failures = 0;
        fn();
        _exit(failures ? 1 : 0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "  ... with CUDA_VISIBLE_DEVICES=%s%s%s\n", value ? "'" : "",
                value ? value : "(unset)", value ? "'" : "");
        failures++;
    }
}

static void record_physical(void)
{
    int n = 0;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    CHECK(n == 3);
    for (int i = 0; i < 3 && i < n; i++) {
        CUuuid u;
        CU_OK(cuDeviceGetName(phys[i].name, sizeof phys[i].name, i));
        CU_OK(cuDeviceGetUuid(&u, i));
        uuid_text(&u, phys[i].uuid, sizeof phys[i].uuid);
        CU_OK(cuDeviceGetPCIBusId(phys[i].bus, sizeof phys[i].bus, i));
        CU_OK(cuDeviceTotalMem_v2(&phys[i].total, i));
    }
    CHECK(strcmp(phys[0].name, "Test GPU A") == 0 && strcmp(phys[2].name, "Test GPU C") == 0);
    CHECK(phys[1].total == 2048 * MIB);
}

/* The ordinals are exactly want[0..want_n), each reporting its physical device. */
static void expect_visible(void)
{
    int n = -1;
    CU_OK(cuInit(0));
    CU_OK(cuDeviceGetCount(&n));
    CHECK(n == want_n);
    for (int i = 0; i < want_n && i < n; i++) {
        const struct phys_dev *p = &phys[want[i]];
        CUdevice d = -1;
        CUuuid u;
        char name[64], uuid[48], bus[32];
        size_t total = 0;
        int sms = 0;
        CU_OK(cuDeviceGet(&d, i));
        CHECK(d == i);
        CU_OK(cuDeviceGetName(name, sizeof name, d));
        CHECK(strcmp(name, p->name) == 0);
        CU_OK(cuDeviceGetUuid_v2(&u, d));
        uuid_text(&u, uuid, sizeof uuid);
        CHECK(strcmp(uuid, p->uuid) == 0);
        CU_OK(cuDeviceGetPCIBusId(bus, sizeof bus, d));
        CHECK(strcmp(bus, p->bus) == 0);
        CU_OK(cuDeviceTotalMem_v2(&total, d));
        CHECK(total == p->total);
        CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, d));
        CHECK(sms == 10 * (want[i] + 1));
    }
    CUdevice d;
    CU_EQ(cuDeviceGet(&d, want_n), CUDA_ERROR_INVALID_DEVICE);
    /* A hidden device cannot be reached by its PCI address either. */
    for (int k = 0; k < 3; k++) {
        int ordinal = -1;
        for (int i = 0; i < want_n; i++)
            if (want[i] == k)
                ordinal = i;
        d = -1;
        CU_EQ(cuDeviceGetByPCIBusId(&d, phys[k].bus),
              ordinal >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE);
        CHECK(ordinal < 0 || d == ordinal);
    }
}

/* No device visible: cuInit fails with NO_DEVICE, as the real driver does, and the driver
 * stays uninitialised. */
static void expect_none(void)
{
    int n = -1;
    CU_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
    CU_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    CUdevice d;
    CU_EQ(cuDeviceGet(&d, 0), CUDA_ERROR_NOT_INITIALIZED);
    CU_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
}

#define NV_API(X)                                                                                  \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlDeviceGetCount_v2)                                                                       \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetMemoryInfo)

/* CUDA_VISIBLE_DEVICES="2,0": memory, contexts and NVML land on the physical devices, and
 * NVML still numbers every device physically. */
static void visible_memory(void)
{
    struct {
#define NV_FIELD(name) __typeof__(name) *name;
        NV_API(NV_FIELD)
    } nv;
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h != NULL);
    if (h == NULL)
        return;
#define NV_SYM(name) nv.name = (__typeof__(nv.name))dlsym(h, #name);
    NV_API(NV_SYM)
    CHECK(nv.nvmlInit_v2 && nv.nvmlDeviceGetCount_v2 && nv.nvmlDeviceGetHandleByIndex_v2 &&
          nv.nvmlDeviceGetUUID && nv.nvmlDeviceGetMemoryInfo);
    if (failures)
        return;

    CUcontext c0, c1;
    CU_OK(cuInit(0));
    CU_OK(cuDevicePrimaryCtxRetain(&c0, 0)); /* physical 2: 3 GiB */
    CU_OK(cuCtxSetCurrent(c0));
    size_t free_b = 0, total = 0;
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == 3072 * MIB && free_b == total - 256 * MIB);
    CUdeviceptr big = 0, small = 0, extra = 0;
    CU_OK(cuMemAlloc_v2(&big, 2560 * MIB)); /* fits on no other device */
    CU_OK(cuCtxCreate_v2(&c1, 0, 1));       /* physical 0: 1 GiB, made current */
    CUdevice d = -1;
    CU_OK(cuCtxGetDevice(&d));
    CHECK(d == 1);
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == 1024 * MIB && free_b == total - 256 * MIB);
    CU_OK(cuMemAlloc_v2(&small, 512 * MIB));
    CU_EQ(cuMemAlloc_v2(&extra, 512 * MIB), CUDA_ERROR_OUT_OF_MEMORY); /* 1 GiB card full */

    CHECK(nv.nvmlInit_v2() == NVML_SUCCESS);
    unsigned count = 0;
    CHECK(nv.nvmlDeviceGetCount_v2(&count) == NVML_SUCCESS && count == 3);
    const unsigned long long used[3] = {768 * MIB, 0, 2816 * MIB};
    for (unsigned i = 0; i < 3 && i < count; i++) {
        nvmlDevice_t dev;
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        nvmlMemory_t m;
        CHECK(nv.nvmlDeviceGetHandleByIndex_v2(i, &dev) == NVML_SUCCESS);
        CHECK(nv.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) == NVML_SUCCESS);
        CHECK(strcmp(uuid, phys[i].uuid) == 0);
        CHECK(nv.nvmlDeviceGetMemoryInfo(dev, &m) == NVML_SUCCESS);
        CHECK(m.total == phys[i].total && m.used == used[i]);
        if (m.used != used[i])
            fprintf(stderr, "  NVML device %u: used %llu, want %llu\n", i, m.used, used[i]);
    }
    CU_OK(cuMemFree_v2(small));
    CU_OK(cuCtxDestroy_v2(c1));
    CU_OK(cuMemFree_v2(big));
}

static void test_visible(void)
{
    phys = mmap(NULL, 3 * sizeof *phys, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(phys != MAP_FAILED);
    if (phys == MAP_FAILED)
        return;
    memset(phys, 0, 3 * sizeof *phys);
    with_visible(NULL, record_physical);
    if (failures)
        return;

    /* The shortest prefix of device 2's UUID that names it alone. */
    char prefix[48] = "";
    for (size_t len = 5; len <= strlen(phys[2].uuid) && prefix[0] == '\0'; len++)
        if (strncmp(phys[2].uuid, phys[0].uuid, len) != 0 &&
            strncmp(phys[2].uuid, phys[1].uuid, len) != 0)
            snprintf(prefix, sizeof prefix, "%.*s", (int)len, phys[2].uuid);
    CHECK(prefix[0] != '\0');

    static const struct {
        const char *value; /* NULL: built below from UUIDs */
        int n, phys[3];
    } cases[] = {
        {"1,0", 2, {1, 0}},
        {"2", 1, {2}},
        {"2,0,1", 3, {2, 0, 1}},
        {"0,2,-1,1", 2, {0, 2}}, /* the list ends at the first invalid entry */
        {"1,7,0", 1, {1}},
        {"0,MIG-GPU-1/0/0,1", 1, {0}},
        {"2,,0", 1, {2}},
        {"1,GPU-,0", 1, {1}},   /* "GPU-" is a prefix of every UUID: ambiguous */
        {" 2 ,\t1", 2, {2, 1}}, /* blanks around an entry are skipped */
        {"1gpu,0", 2, {1, 0}},  /* an index is read like strtoul: "1gpu" is 1 */
        {"0,", 1, {0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        want_n = cases[i].n;
        memcpy(want, cases[i].phys, sizeof want);
        with_visible(cases[i].value, expect_visible);
    }

    char value[160];
    /* A full UUID, a unique prefix, UUIDs and indices mixed. */
    want_n = 1;
    want[0] = 1;
    with_visible(phys[1].uuid, expect_visible);
    want[0] = 2;
    with_visible(prefix, expect_visible);
    snprintf(value, sizeof value, "%s,0,%s", prefix, phys[1].uuid);
    want_n = 3;
    want[0] = 2, want[1] = 0, want[2] = 1;
    with_visible(value, expect_visible);
    snprintf(value, sizeof value, "1,%sf00d,0", phys[2].uuid); /* no such UUID: stops */
    want_n = 1;
    want[0] = 1;
    with_visible(value, expect_visible);

    /* Nothing visible: empty, first entry invalid, ambiguous or unknown UUID, a device
     * named twice (by index or by index and UUID). */
    const char *none[] = {"",    "-1",   "3", "x", ",0", "GPU-", "GPU-zz", "MIG-GPU-1/0/0",
                          "0,0", "1,0,1"};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++)
        with_visible(none[i], expect_none);
    snprintf(value, sizeof value, "%s,2", prefix);
    with_visible(value, expect_none);

    with_visible("2,0", visible_memory);
}

/* A process killed while holding memory gives it back. One 2 GiB device. */
static void test_sigkill(void)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        setup(NULL);
        CUdeviceptr p;
        CU_OK(cuMemAlloc_v2(&p, 1200 * MIB));
        CHECK(write(fds[1], "k", 1) == 1);
        for (;;)
            pause();
    }
    close(fds[1]);
    char c = 0;
    CHECK(read(fds[0], &c, 1) == 1);
    setup(NULL);
    CUdeviceptr p = 0;
    CU_EQ(cuMemAlloc_v2(&p, 1200 * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < 100 && r == CUDA_ERROR_OUT_OF_MEMORY; i++) {
        r = cuMemAlloc_v2(&p, 1200 * MIB);
        if (r == CUDA_ERROR_OUT_OF_MEMORY)
            usleep(20000);
    }
    CU_EQ(r, CUDA_SUCCESS);
}

/* CUDA_VISIBLE_DEVICES names a MIG device (nvml_run.sh dynamic): one device, with the
 * instance's memory (MIG_MIB) and SMs (MIG_SMS), allocations capped there; prints
 * "ready" holding 1 GiB, then waits to be killed. */
static void test_mig(void)
{
    const char *mib_env = getenv("MIG_MIB"), *sms_env = getenv("MIG_SMS");
    CHECK(mib_env != NULL && sms_env != NULL);
    if (mib_env == NULL || sms_env == NULL)
        return;
    unsigned long long want_mib = strtoull(mib_env, NULL, 10);
    int want_sms = (int)strtol(sms_env, NULL, 10);
    CUdevice dev;
    setup(&dev);
    int count = 0, sms = 0;
    CU_OK(cuDeviceGetCount(&count));
    CHECK(count == 1);
    CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(sms == want_sms);
    size_t total = 0, free_b = 0;
    CU_OK(cuDeviceTotalMem_v2(&total, dev));
    CHECK(total == want_mib * MIB);
    CU_OK(cuMemGetInfo_v2(&free_b, &total));
    CHECK(total == want_mib * MIB && free_b < total);
    char name[128];
    CU_OK(cuDeviceGetName(name, sizeof name, dev));
    CHECK(strstr(name, " MIG ") != NULL);
    CUdeviceptr p = 0, q = 0;
    CU_EQ(cuMemAlloc_v2(&p, (size_t)want_mib * MIB), CUDA_ERROR_OUT_OF_MEMORY);
    CU_OK(cuMemAlloc_v2(&q, 1024 * MIB));
    if (failures)
        return;
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}

/* ---- kernels inside MIG devices ----
 * FAKEGPU_DEVICES="NVIDIA H100 80GB HBM3:81559MiB:132",
 * FAKEGPU_MIG="0:1g.10gb,1g.10gb,3g.40gb" (16, 16 and 60 of the GPU's 132 SMs). */

#define MIG_GPU_SMS 132
#define MIG_NV_API(X)                                                                              \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetMigDeviceHandleByIndex)                                                         \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetUtilizationRates)                                                               \
    X(nvmlDeviceGetProcessUtilization)

static struct {
#define MIG_NV_FIELD(name) __typeof__(name) *name;
    MIG_NV_API(MIG_NV_FIELD)
} mig_nv;
static char mig_uuid[3][NVML_DEVICE_UUID_V2_BUFFER_SIZE];
static nvmlDevice_t mig_gpu;

/* The three MIG devices' UUIDs, through NVML as a device plugin would read them. */
static int mig_setup(void)
{
    void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    CHECK(h != NULL);
    if (h == NULL)
        return -1;
#define MIG_NV_SYM(name)                                                                           \
    mig_nv.name = (__typeof__(mig_nv.name))dlsym(h, #name);                                        \
    CHECK(mig_nv.name != NULL);
    MIG_NV_API(MIG_NV_SYM)
    if (failures)
        return -1;
    CHECK(mig_nv.nvmlInit_v2() == NVML_SUCCESS);
    CHECK(mig_nv.nvmlDeviceGetHandleByIndex_v2(0, &mig_gpu) == NVML_SUCCESS);
    for (unsigned k = 0; k < 3 && !failures; k++) {
        nvmlDevice_t m;
        CHECK(mig_nv.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, k, &m) == NVML_SUCCESS);
        CHECK(mig_nv.nvmlDeviceGetUUID(m, mig_uuid[k], sizeof mig_uuid[k]) == NVML_SUCCESS);
    }
    return failures ? -1 : 0;
}

static int mig_want_sms;

/* Device time of work queued by fn between two events on a fresh stream. */
static double timed_ms(CUstream s, void (*fn)(CUstream))
{
    CUevent e0, e1;
    CU_OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
    CU_OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
    CU_OK(cuEventRecord(e0, s));
    fn(s);
    CU_OK(cuEventRecord(e1, s));
    CU_OK(cuEventSynchronize(e1));
    float ms = 0;
    CU_OK(cuEventElapsedTime_v2(&ms, e0, e1));
    CU_OK(cuEventDestroy_v2(e0));
    CU_OK(cuEventDestroy_v2(e1));
    return (double)ms;
}

static CUfunction mig_spin_f;
static CUgraphExec mig_graph;
static void spin_10ms(CUstream s)
{
    CU_OK(spin(mig_spin_f, 10000000ULL, s));
}
static void graph_2x4ms(CUstream s)
{
    CU_OK(cuGraphLaunch(mig_graph, s));
}
static void other_kernel(CUstream s)
{
    CU_OK(cuLaunchKernel(get_function("some_kernel"), 8, 1, 1, 128, 1, 1, 0, s, NULL, NULL));
}

/* Device time `got` of kernels worth want_ms on the whole GPU, at a share of its SMs:
 * at least the stretched time, and little more (launch gaps on a loaded machine); the
 * unstretched time is far below. */
static void check_stretched(const char *what, double got, double want_ms, double share)
{
    double stretched = want_ms / share;
    printf("%s: %.3f ms of device time (%.3f ms on the whole GPU, x %.3f)\n", what, got, want_ms,
           1.0 / share);
    CHECK(got >= stretched - 0.01 && got <= stretched + 5.0);
}

/* In a child with CUDA_VISIBLE_DEVICES=MIG-...: a kernel takes GPU SMs / instance SMs times
 * its duration (times 100 / P more for an MPS client at P %), graph kernels included. */
static void mig_stretch_child(void)
{
    CUdevice dev;
    setup(&dev);
    int sms = 0;
    CU_OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
    CHECK(sms == mig_want_sms);
    if (sms <= 0)
        return;
    const char *pct = getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
    double share = (double)sms / MIG_GPU_SMS * (pct ? strtod(pct, NULL) / 100.0 : 1.0);
    mig_spin_f = get_function("vgpu_spin");
    CUstream s;
    CU_OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CU_OK(spin(mig_spin_f, 1000000ULL, s)); /* set-up cost stays out of the measurements */
    CU_OK(cuStreamSynchronize(s));
    check_stretched("vgpu_spin 10 ms", timed_ms(s, spin_10ms), 10.0, share);
    check_stretched("other kernel (FAKEGPU_KERNEL_NS 1 ms)", timed_ms(s, other_kernel), 1.0, share);
    CUgraph g;
    CU_OK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CU_OK(spin(mig_spin_f, 4000000ULL, s));
    CU_OK(spin(mig_spin_f, 4000000ULL, s));
    CU_OK(cuStreamEndCapture(s, &g));
    CU_OK(cuGraphInstantiateWithFlags(&mig_graph, g, 0));
    check_stretched("graph of 2 x 4 ms", timed_ms(s, graph_2x4ms), 8.0, share);
    CU_OK(cuGraphExecDestroy(mig_graph));
    CU_OK(cuGraphDestroy(g));
    fflush(stdout); /* the child leaves by _exit */
}

static void test_mig_stretch(void)
{
    if (mig_setup() != 0)
        return;
    mig_want_sms = 16; /* 1g.10gb: 132 / 16 = 8.25 times */
    with_visible(mig_uuid[0], mig_stretch_child);
    mig_want_sms = 60; /* 3g.40gb: 2.2 times */
    with_visible(mig_uuid[2], mig_stretch_child);
    /* An MPS client at 50 % inside the 1g.10gb: both shares, 16.5 times. */
    setenv("CUDA_MPS_PIPE_DIRECTORY", "/nonexistent/mps-pipe", 1);
    setenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50", 1);
    mig_want_sms = 16;
    with_visible(mig_uuid[0], mig_stretch_child);
    unsetenv("CUDA_MPS_PIPE_DIRECTORY");
    unsetenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
}

/* One spin's device time in a 1g.10gb (1 ms stretched 8.25 times): two batches of four in
 * flight are 66 ms of work, enough that a process kept off the CPU for a while under load
 * does not let its instance run dry. */
#define MIG_SPIN_NS     1000000ULL
#define MIG_SPIN_DEV_NS (1000000.0 * MIG_GPU_SMS / 16)

/* Two processes in the two 1g.10gb instances, each saturating its own: neither waits for
 * the other (real MIG isolates them), so each keeps its instance busy the whole window. On
 * one shared timeline each would get half. NVML measures no utilization on a GPU in MIG
 * mode, as the driver. */
static void test_mig_isolated(void)
{
    if (mig_setup() != 0)
        return;
    const char *visible[2] = {mig_uuid[0], mig_uuid[1]};
    long counts[2] = {0};
    share_run(2, visible, MIG_SPIN_NS, counts);
    const double spin_ms = MIG_SPIN_DEV_NS / 1e6;
    for (int i = 0; i < 2; i++) {
        double busy_ms = (double)counts[i] * spin_ms;
        printf("instance %d: busy %.0f ms of the %.0f ms window (%ld spins)\n", i, busy_ms,
               share_window_ms, counts[i]);
        CHECK(busy_ms >= 0.95 * share_window_ms - 8.0 * spin_ms &&
              busy_ms <= 1.05 * share_window_ms + 50.0);
    }
    nvmlUtilization_t u;
    unsigned n = 0;
    CHECK(mig_nv.nvmlDeviceGetUtilizationRates(mig_gpu, &u) == NVML_ERROR_NOT_SUPPORTED);
    CHECK(mig_nv.nvmlDeviceGetProcessUtilization(mig_gpu, NULL, &n, 0) == NVML_ERROR_NOT_SUPPORTED);
}

/* Two processes in the same 1g.10gb share its timeline by time slices, as contexts on a
 * whole GPU do: together they keep the instance busy, each about half of it. */
static void test_mig_shared(void)
{
    if (mig_setup() != 0)
        return;
    const char *visible[2] = {mig_uuid[0], mig_uuid[0]};
    long counts[2] = {0};
    share_run(2, visible, MIG_SPIN_NS, counts);
    check_shared(2, counts, MIG_SPIN_DEV_NS);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cuda_api devices|capacity|memcpy|spin|graph|bad_use|"
                        "proc_address|share2|share4|sigkill|visible|mig|mig_stretch|mig_isolated|"
                        "mig_shared\n");
        return 2;
    }
    const char *t = argv[1];
    if (strcmp(t, "devices") == 0)
        test_devices();
    else if (strcmp(t, "capacity") == 0)
        test_capacity();
    else if (strcmp(t, "memcpy") == 0)
        test_memcpy();
    else if (strcmp(t, "spin") == 0)
        test_spin();
    else if (strcmp(t, "graph") == 0)
        test_graph();
    else if (strcmp(t, "bad_use") == 0)
        test_bad_use();
    else if (strcmp(t, "proc_address") == 0)
        test_proc_address();
    else if (strcmp(t, "share2") == 0)
        test_share(2);
    else if (strcmp(t, "share4") == 0)
        test_share(4);
    else if (strcmp(t, "sigkill") == 0)
        test_sigkill();
    else if (strcmp(t, "visible") == 0)
        test_visible();
    else if (strcmp(t, "mig") == 0)
        test_mig();
    else if (strcmp(t, "mig_stretch") == 0)
        test_mig_stretch();
    else if (strcmp(t, "mig_isolated") == 0)
        test_mig_isolated();
    else if (strcmp(t, "mig_shared") == 0)
        test_mig_shared();
    else {
        fprintf(stderr, "cuda_api: unknown case '%s'\n", t);
        return 2;
    }
    if (failures)
        fprintf(stderr, "cuda_api %s: %d check(s) failed\n", t, failures);
    return failures ? 1 : 0;
}
