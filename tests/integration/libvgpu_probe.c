/* A CUDA program for libvgpu's integration tests, built twice: libvgpu_probe_link (linked
 * against libcuda.so.1) and libvgpu_probe (reaches the driver with dlopen). The first
 * argument picks how it gets its entry points, the three ways real programs do:
 *   link      direct calls (only in the linked build)
 *   dlsym     dlopen("libcuda.so.1") + dlsym(handle, "cuMemAlloc_v2")
 *   procaddr  dlsym(handle, "cuGetProcAddress_v2"), then every function through it with
 *             cudaVersion 12000, as the CUDA runtime does
 * It runs unchanged on a real GPU; VGPU_TEST_REAL=1 relaxes checks that rely on fakegpu's
 * exact charges (the real driver pads arrays and rounds allocations).
 *
 * Commands (each prints what it saw and exits 0 when everything held):
 *   info                    limit view: "total=<bytes> free=<bytes> devtotal=<bytes>
 *                           uuid=GPU-..." (the UUID of the device the probe uses)
 *   paths                   every allocation path at and just over the limit
 *   hold <bytes>            allocate, print "ready", sleep until killed
 *   random <sec> <seed>     allocate/free random sizes; prints "ok=<n> oom=<n>"
 *   fill                    allocate what cuMemGetInfo says is free, in one piece
 *   fork                    allocate, fork; the child's exit leaves the parent's usage alone
 *   forkfresh <n> <bytes>   never initialise CUDA; fork n children that each do, allocate
 *                           and report (the multiprocessing pattern)
 *   dlnext                  never initialise CUDA; dlsym(RTLD_NEXT) still resolves relative
 *                           to this program, not to libvgpu
 *   threads <n> <sec> <seed>  n threads initialise CUDA at the same moment, then allocate and
 *                           free random sizes against one limit while another thread keeps
 *                           calling cuInit and cuMemGetInfo; then everything must be back
 *                           and one allocation of all that is free must succeed exactly.
 *                           Prints "threads ok=<n> oom=<n> filled=<bytes>"
 *   torture                 600 allocations of 1 MiB under libvgpu_torture.so: one refused
 *                           with CUDA_ERROR_OUT_OF_MEMORY (libvgpu could not record it) must
 *                           have charged nothing and succeed when tried again; after the
 *                           frees, free memory is what it was. Prints "torture oom=<n>" */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "abi/cuda.h"

#define MiB (UINT64_C(1) << 20)

#define API(X)                                                                                     \
    X(cuInit, "cuInit", 12000)                                                                     \
    X(cuDeviceGet, "cuDeviceGet", 12000)                                                           \
    X(cuDeviceGetUuid, "cuDeviceGetUuid", 12000)                                                   \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000)                                 \
    X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 12000)                            \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", 12000)                                                   \
    X(cuCtxCreate_v2, "cuCtxCreate", 3020)                                                         \
    X(cuCtxDestroy_v2, "cuCtxDestroy", 12000)                                                      \
    X(cuMemGetInfo_v2, "cuMemGetInfo", 12000)                                                      \
    X(cuDeviceTotalMem_v2, "cuDeviceTotalMem", 12000)                                              \
    X(cuMemAlloc_v2, "cuMemAlloc", 12000)                                                          \
    X(cuMemFree_v2, "cuMemFree", 12000)                                                            \
    X(cuMemAllocPitch_v2, "cuMemAllocPitch", 12000)                                                \
    X(cuMemAllocManaged, "cuMemAllocManaged", 12000)                                               \
    X(cuMemAllocAsync, "cuMemAllocAsync", 12000)                                                   \
    X(cuMemFreeAsync, "cuMemFreeAsync", 12000)                                                     \
    X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 12000)                                   \
    X(cuMemPoolCreate, "cuMemPoolCreate", 12000)                                                   \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", 12000)                                                 \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", 12000)                                                   \
    X(cuStreamSynchronize, "cuStreamSynchronize", 12000)                                           \
    X(cuArrayCreate_v2, "cuArrayCreate", 12000)                                                    \
    X(cuArrayDestroy, "cuArrayDestroy", 12000)                                                     \
    X(cuMipmappedArrayCreate, "cuMipmappedArrayCreate", 12000)                                     \
    X(cuMipmappedArrayDestroy, "cuMipmappedArrayDestroy", 12000)                                   \
    X(cuMemCreate, "cuMemCreate", 12000)                                                           \
    X(cuMemRelease, "cuMemRelease", 12000)                                                         \
    X(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity", 12000)

#define FIELD(name, base, ver) __typeof__(name) *name;
static struct {
    API(FIELD)
} cu;

static int failures;
static bool real_gpu;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* cuGetProcAddress hands out exactly the ABI asked for: the entry point it returns for
 * (symbol, version, flags) is the one exported under the versioned name that the CUDA
 * headers select for it, whether libvgpu wraps it or not. */
static void check_abi(void *h, __typeof__(cuGetProcAddress_v2) *gpa)
{
    static const struct {
        const char *symbol;
        int version;
        cuuint64_t flags;
        const char *exported;
    } cases[] = {
        {"cuCtxCreate", 2000, 0, "cuCtxCreate"},
        {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
        {"cuCtxCreate", 11040, 0, "cuCtxCreate_v3"},
        {"cuCtxCreate", 12080, 0, "cuCtxCreate_v4"},
        {"cuMemAlloc", 3000, 0, "cuMemAlloc"},
        {"cuMemAlloc", 12000, 0, "cuMemAlloc_v2"},
        {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuMemAllocAsync_ptsz"},
        {"cuMemAllocAsync", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuMemAllocAsync"},
        {"cuMemFreeAsync", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuMemFreeAsync_ptsz"},
        {"cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuLaunchKernel_ptsz"},
        {"cuStreamSynchronize", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
         "cuStreamSynchronize_ptsz"},
        {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        void *fn = NULL;
        CUdriverProcAddressQueryResult st;
        CUresult r = gpa(cases[i].symbol, &fn, cases[i].version, cases[i].flags, &st);
        void *want = dlsym(h, cases[i].exported);
        if (r != CUDA_SUCCESS || fn == NULL || fn != want) {
            fprintf(stderr, "FAIL cuGetProcAddress(%s, %d, %llu) = %p, want %s = %p\n",
                    cases[i].symbol, cases[i].version, (unsigned long long)cases[i].flags, fn,
                    cases[i].exported, want);
            exit(4);
        }
    }
}

static void load(const char *mode)
{
#ifdef PROBE_LINKED
    if (strcmp(mode, "link") == 0) {
#define DIRECT(name, base, ver) cu.name = name;
        API(DIRECT)
        return;
    }
#endif
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == NULL) {
        fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror());
        exit(2);
    }
    if (strcmp(mode, "dlsym") == 0) {
#define BY_DLSYM(name, base, ver) cu.name = (__typeof__(cu.name))dlsym(h, #name);
        API(BY_DLSYM)
    } else if (strcmp(mode, "procaddr") == 0) {
        __typeof__(cuGetProcAddress_v2) *gpa = (__typeof__(gpa))dlsym(h, "cuGetProcAddress_v2");
        if (gpa == NULL) {
            fprintf(stderr, "no cuGetProcAddress_v2\n");
            exit(2);
        }
        CUdriverProcAddressQueryResult st;
#define BY_PROC(name, base, ver)                                                                   \
    if (gpa(base, (void **)&cu.name, ver, CU_GET_PROC_ADDRESS_DEFAULT, &st) != CUDA_SUCCESS)       \
        cu.name = NULL;
        API(BY_PROC)
        check_abi(h, gpa);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
#define NONNULL(name, base, ver)                                                                   \
    if (cu.name == NULL) {                                                                         \
        fprintf(stderr, "no entry point %s\n", #name);                                             \
        exit(2);                                                                                   \
    }
    API(NONNULL)
}

static CUcontext ctx;
static CUdevice dev;

static int setup(void)
{
    CUresult r = cu.cuInit(0);
    if (r != CUDA_SUCCESS) {
        printf("cuInit=%d\n", (int)r);
        return (int)r;
    }
    const char *which = getenv("PROBE_DEVICE");
    if (cu.cuDeviceGet(&dev, which != NULL ? (int)strtol(which, NULL, 10) : 0) != CUDA_SUCCESS)
        exit(2);
    r = cu.cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        printf("context-oom\n");
        exit(5);
    }
    if (r != CUDA_SUCCESS || cu.cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        fprintf(stderr, "cannot make a context\n");
        exit(2);
    }
    return 0;
}

static size_t free_now(void)
{
    size_t f = 0, t = 0;
    CUresult r = cu.cuMemGetInfo_v2(&f, &t);
    CHECK(r == CUDA_SUCCESS, "cuMemGetInfo=%d", (int)r);
    CHECK(f <= t, "free %zu > total %zu", f, t);
    return f;
}

static int cmd_info(void)
{
    size_t f = 0, t = 0, dt = 0;
    CUuuid u = {{0}};
    CHECK(cu.cuMemGetInfo_v2(&f, &t) == CUDA_SUCCESS, "cuMemGetInfo");
    CHECK(cu.cuDeviceTotalMem_v2(&dt, dev) == CUDA_SUCCESS, "cuDeviceTotalMem");
    CHECK(cu.cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS, "cuDeviceGetUuid");
    const unsigned char *b = (const unsigned char *)u.bytes;
    printf("total=%zu free=%zu devtotal=%zu uuid=GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x\n",
           t, f, dt, b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
           b[12], b[13], b[14], b[15]);
    return failures != 0;
}

/* One allocation path: alloc(n) and free(handle). */
struct path {
    const char *name;
    CUresult (*alloc)(size_t n, uint64_t *h);
    CUresult (*release)(uint64_t h);
    size_t quantum; /* sizes must be multiples of this */
};

static CUresult a_plain(size_t n, uint64_t *h)
{
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc_v2(&p, n);
    *h = p;
    return r;
}
static CUresult f_plain(uint64_t h)
{
    return cu.cuMemFree_v2(h);
}
static CUresult a_pitch(size_t n, uint64_t *h)
{
    CUdeviceptr p;
    size_t pitch;
    CUresult r = cu.cuMemAllocPitch_v2(&p, &pitch, 512 * 1024, n / (512 * 1024), 4);
    *h = p;
    return r;
}
static CUresult a_managed(size_t n, uint64_t *h)
{
    CUdeviceptr p;
    CUresult r = cu.cuMemAllocManaged(&p, n, CU_MEM_ATTACH_GLOBAL);
    *h = p;
    return r;
}
static CUresult a_async(size_t n, uint64_t *h)
{
    CUdeviceptr p;
    CUresult r = cu.cuMemAllocAsync(&p, n, NULL);
    *h = p;
    return r;
}
static CUresult f_async(uint64_t h)
{
    CUresult r = cu.cuMemFreeAsync(h, NULL);
    if (r == CUDA_SUCCESS)
        r = cu.cuStreamSynchronize(NULL);
    return r;
}
static CUmemoryPool own_pool;
static CUresult a_pool(size_t n, uint64_t *h)
{
    CUdeviceptr p;
    CUresult r = cu.cuMemAllocFromPoolAsync(&p, n, own_pool, NULL);
    *h = p;
    return r;
}
static CUresult f_pool(uint64_t h)
{
    CUresult r = cu.cuMemFreeAsync(h, NULL);
    if (r == CUDA_SUCCESS)
        r = cu.cuStreamSynchronize(NULL);
    if (r == CUDA_SUCCESS)
        r = cu.cuMemPoolTrimTo(own_pool, 0);
    return r;
}
static CUresult a_array(size_t n, uint64_t *h)
{
    /* 512 KiB rows: at most 65536 of them (32 GiB) is what a driver accepts. */
    CUDA_ARRAY_DESCRIPTOR d = {.Width = 131072,
                               .Height = n / (131072 * 4),
                               .Format = CU_AD_FORMAT_FLOAT,
                               .NumChannels = 1};
    CUarray a;
    CUresult r = cu.cuArrayCreate_v2(&a, &d);
    *h = (uintptr_t)a;
    return r;
}
static CUresult f_array(uint64_t h)
{
    return cu.cuArrayDestroy((CUarray)(uintptr_t)h);
}
static CUresult a_mipmap(size_t n, uint64_t *h)
{
    /* 3D in 4 MiB slices (up to 64 GiB): a 2D mipmapped array may be at most 32768 rows
       high, a 3D one 16384 slices deep. */
    CUDA_ARRAY3D_DESCRIPTOR d = {.Width = 16384,
                                 .Height = 64,
                                 .Depth = n / (16384 * 4 * 64),
                                 .Format = CU_AD_FORMAT_FLOAT,
                                 .NumChannels = 1};
    CUmipmappedArray m;
    CUresult r = cu.cuMipmappedArrayCreate(&m, &d, 1);
    *h = (uintptr_t)m;
    return r;
}
static CUresult f_mipmap(uint64_t h)
{
    return cu.cuMipmappedArrayDestroy((CUmipmappedArray)(uintptr_t)h);
}
static CUresult a_vmm(size_t n, uint64_t *h)
{
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CUmemGenericAllocationHandle g;
    CUresult r = cu.cuMemCreate(&g, n, &prop, 0);
    *h = g;
    return r;
}
static CUresult f_vmm(uint64_t h)
{
    return cu.cuMemRelease(h);
}

static int cmd_paths(void)
{
    CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                            .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    CHECK(cu.cuMemPoolCreate(&own_pool, &props) == CUDA_SUCCESS, "cuMemPoolCreate");
    size_t gran = 2 * MiB;
    CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
    (void)cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    const struct path paths[] = {
        {"cuMemAlloc", a_plain, f_plain, 1},
        {"cuMemAllocPitch", a_pitch, f_plain, 512 * 1024},
        {"cuMemAllocManaged", a_managed, f_plain, 1},
        {"cuMemAllocAsync", a_async, f_async, 1},
        {"cuMemAllocFromPoolAsync", a_pool, f_pool, 1},
        {"cuArrayCreate", a_array, f_array, 131072 * 4},
        {"cuMipmappedArrayCreate", a_mipmap, f_mipmap, 16384 * 4 * 64},
        {"cuMemCreate", a_vmm, f_vmm, gran},
    };
    /* On a real GPU leave room for the driver's padding and rounding. */
    size_t slack = real_gpu ? 64 * MiB : 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        const struct path *p = &paths[i];
        size_t avail = free_now();
        size_t n = (avail - slack) / p->quantum * p->quantum;
        uint64_t h = 0, h2 = 0;
        CUresult r = p->alloc(n, &h);
        CHECK(r == CUDA_SUCCESS, "%s of all %zu free bytes: %d", p->name, n, (int)r);
        if (r != CUDA_SUCCESS)
            continue;
        size_t after = free_now();
        if (!real_gpu)
            CHECK(after == avail - n, "%s: free %zu after, want %zu", p->name, after, avail - n);
        /* Just over: one more quantum (or the slack) past the limit. */
        size_t over = (after + p->quantum) / p->quantum * p->quantum + (real_gpu ? 256 * MiB : 0);
        r = p->alloc(over, &h2);
        CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "%s of %zu bytes past the limit: %d", p->name, over,
              (int)r);
        if (r == CUDA_SUCCESS)
            p->release(h2);
        CHECK(p->release(h) == CUDA_SUCCESS, "%s: free", p->name);
        size_t back = free_now();
        if (!real_gpu)
            CHECK(back == avail, "%s: free %zu after freeing, want %zu", p->name, back, avail);
        printf("%s ok: %zu bytes at the limit, %zu over refused\n", p->name, n, over);
    }
    /* A context: charged on creation, given back on destruction. */
    size_t before = free_now();
    CUcontext c2;
    CHECK(cu.cuCtxCreate_v2(&c2, 0, dev) == CUDA_SUCCESS, "cuCtxCreate");
    size_t with = free_now();
    CHECK(with < before, "a context costs nothing? %zu -> %zu", before, with);
    CUdeviceptr p;
    CHECK(cu.cuMemAlloc_v2(&p, 32 * MiB) == CUDA_SUCCESS, "alloc in second context");
    CHECK(cu.cuCtxDestroy_v2(c2) == CUDA_SUCCESS, "cuCtxDestroy");
    CHECK(cu.cuCtxSetCurrent(ctx) == CUDA_SUCCESS, "back to the primary context");
    size_t after = free_now();
    CHECK(after == before, "context and its allocation not given back: %zu vs %zu", after, before);
    /* A pointer libvgpu never saw is the driver's business (it answers, not libvgpu). */
    CUresult r = cu.cuMemFree_v2((CUdeviceptr)0x1234);
    CHECK(r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY, "free of a bogus pointer: %d",
          (int)r);
    CHECK(cu.cuMemPoolDestroy(own_pool) == CUDA_SUCCESS, "cuMemPoolDestroy");
    return failures != 0;
}

static int cmd_hold(size_t n)
{
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc_v2(&p, n);
    printf("%s\n", r == CUDA_SUCCESS ? "ready" : "oom");
    fflush(stdout);
    for (;;)
        pause();
    return 0;
}

static int cmd_random(double seconds, unsigned seed)
{
    enum { SLOTS = 8 };
    CUdeviceptr held[SLOTS] = {0};
    unsigned long ok = 0, oom = 0;
    srandom(seed);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int i = (int)(random() % SLOTS);
        if (held[i] != 0) {
            CHECK(cu.cuMemFree_v2(held[i]) == CUDA_SUCCESS, "free");
            held[i] = 0;
        } else {
            size_t n = (size_t)(random() % (96 * 1024)) * 1024 + 1;
            CUresult r = cu.cuMemAlloc_v2(&held[i], n);
            if (r == CUDA_SUCCESS) {
                ok++;
            } else {
                CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "alloc: %d", (int)r);
                held[i] = 0;
                oom++;
            }
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    printf("ok=%lu oom=%lu\n", ok, oom);
    return failures != 0;
}

static int cmd_fill(void)
{
    size_t f = free_now();
    CUdeviceptr p;
    CUresult r = cu.cuMemAlloc_v2(&p, f);
    CHECK(r == CUDA_SUCCESS, "allocating all %zu free bytes: %d", f, (int)r);
    CUdeviceptr q;
    CHECK(cu.cuMemAlloc_v2(&q, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "past a full limit");
    printf("filled %zu\n", f);
    return failures != 0;
}

static int cmd_fork(void)
{
    size_t f0 = free_now();
    CUdeviceptr p;
    CHECK(cu.cuMemAlloc_v2(&p, 64 * MiB) == CUDA_SUCCESS, "parent alloc");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child's exit must not give back the parent's bytes. */
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    size_t f1 = free_now();
    CHECK(f1 == f0 - 64 * MiB || real_gpu, "child's exit changed the parent's usage: %zu vs %zu",
          f1, f0 - 64 * MiB);
    CHECK(cu.cuMemFree_v2(p) == CUDA_SUCCESS, "parent free");
    CHECK(free_now() == f0 || real_gpu, "parent's free not given back");
    printf("fork ok\n");
    return failures != 0;
}

/* ---- threads: one process, many threads, one limit ---- */

struct worker {
    pthread_t tid;
    unsigned seed;
    unsigned long ok, oom, errors;
};

static pthread_barrier_t init_barrier, run_barrier;
static double run_seconds;
static size_t budget;         /* free bytes before any allocation: the limit less the context */
static size_t counted;        /* bytes the workers hold (added after, removed before the driver) */
static volatile int run_done; /* set by the main thread when the workers have stopped */

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

static unsigned next_random(unsigned *state)
{
    unsigned x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return *state = x;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    CUcontext c;
    CUdevice d;
    /* Every thread initialises the driver (and libvgpu) at the same moment. */
    pthread_barrier_wait(&init_barrier);
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cu.cuCtxSetCurrent(c) != CUDA_SUCCESS)
        w->errors++;
    pthread_barrier_wait(&run_barrier); /* the main thread measures the budget meanwhile */
    pthread_barrier_wait(&run_barrier);
    enum { SLOTS = 4 };
    CUdeviceptr held[SLOTS] = {0};
    size_t sizes[SLOTS] = {0};
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (seconds_since(&t0) < run_seconds) {
        unsigned i = next_random(&w->seed) % SLOTS;
        if (held[i] != 0) {
            __atomic_fetch_sub(&counted, sizes[i], __ATOMIC_SEQ_CST);
            if (cu.cuMemFree_v2(held[i]) != CUDA_SUCCESS)
                w->errors++;
            held[i] = 0;
            continue;
        }
        size_t n = (size_t)(next_random(&w->seed) % (96 * 1024)) * 1024 + 1;
        CUresult r = cu.cuMemAlloc_v2(&held[i], n);
        if (r == CUDA_SUCCESS) {
            w->ok++;
            sizes[i] = n;
            /* What the threads hold never passes what the limit leaves them. */
            if (__atomic_add_fetch(&counted, n, __ATOMIC_SEQ_CST) > budget)
                w->errors++;
        } else {
            held[i] = 0;
            if (r == CUDA_ERROR_OUT_OF_MEMORY)
                w->oom++;
            else
                w->errors++;
        }
    }
    for (unsigned i = 0; i < SLOTS; i++)
        if (held[i] != 0) {
            __atomic_fetch_sub(&counted, sizes[i], __ATOMIC_SEQ_CST);
            if (cu.cuMemFree_v2(held[i]) != CUDA_SUCCESS)
                w->errors++;
        }
    return NULL;
}

/* Calls cuInit and cuMemGetInfo over and over while the workers allocate. */
static void *initer_main(void *arg)
{
    unsigned long *errors = arg;
    CUcontext c;
    CUdevice d;
    if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
        cu.cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cu.cuCtxSetCurrent(c) != CUDA_SUCCESS)
        (*errors)++;
    while (!__atomic_load_n(&run_done, __ATOMIC_ACQUIRE)) {
        size_t f = 0, t = 0;
        if (cu.cuInit(0) != CUDA_SUCCESS || cu.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS || f > t)
            (*errors)++;
        usleep(200);
    }
    return NULL;
}

static int cmd_threads(int n, double seconds, unsigned seed)
{
    if (n < 1 || n > 64)
        return 2;
    struct worker workers[64];
    memset(workers, 0, sizeof workers);
    run_seconds = seconds;
    pthread_barrier_init(&init_barrier, NULL, (unsigned)n + 1);
    pthread_barrier_init(&run_barrier, NULL, (unsigned)n + 1);
    for (int i = 0; i < n; i++) {
        workers[i].seed = seed * 2654435761u + (unsigned)i * 40503u + 1u;
        if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i]) != 0)
            return 2;
    }
    pthread_barrier_wait(&init_barrier);
    CHECK(setup() == 0, "setup alongside the workers");
    budget = free_now();
    pthread_barrier_wait(&run_barrier);
    unsigned long initer_errors = 0;
    pthread_t initer;
    if (pthread_create(&initer, NULL, initer_main, &initer_errors) != 0)
        return 2;
    pthread_barrier_wait(&run_barrier);
    unsigned long ok = 0, oom = 0, errors = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(workers[i].tid, NULL);
        ok += workers[i].ok;
        oom += workers[i].oom;
        errors += workers[i].errors;
    }
    __atomic_store_n(&run_done, 1, __ATOMIC_RELEASE);
    pthread_join(initer, NULL);
    CHECK(errors == 0, "%lu worker errors (failed calls, or held bytes past the limit)", errors);
    CHECK(initer_errors == 0, "%lu failed cuInit/cuMemGetInfo calls during the run", initer_errors);
    /* Everything came back: all that the limit leaves is free, and takes one allocation. */
    size_t f = free_now();
    CHECK(f == budget, "free after the threads: %zu, want %zu", f, budget);
    CUdeviceptr p, q;
    CHECK(cu.cuMemAlloc_v2(&p, f) == CUDA_SUCCESS, "allocating all %zu free bytes", f);
    CHECK(cu.cuMemAlloc_v2(&q, 2 * MiB) == CUDA_ERROR_OUT_OF_MEMORY, "past a full limit");
    printf("threads ok=%lu oom=%lu filled=%zu\n", ok, oom, f);
    return failures != 0;
}

static int cmd_torture(void)
{
    enum { N = 600 };
    static CUdeviceptr p[N];
    size_t f0 = free_now();
    int oom = 0;
    for (int i = 0; i < N; i++) {
        CUresult r = cu.cuMemAlloc_v2(&p[i], MiB);
        if (r == CUDA_ERROR_OUT_OF_MEMORY) {
            oom++;
            CHECK(free_now() == f0 - (size_t)i * MiB, "a refused allocation stayed charged");
            r = cu.cuMemAlloc_v2(&p[i], MiB);
        }
        CHECK(r == CUDA_SUCCESS, "allocation %d: %d", i, (int)r);
    }
    CHECK(free_now() == f0 - N * MiB, "%d MiB allocated, free %zu of %zu", N, free_now(), f0);
    for (int i = 0; i < N; i++)
        CHECK(cu.cuMemFree_v2(p[i]) == CUDA_SUCCESS, "free %d", i);
    CHECK(free_now() == f0, "not everything given back: free %zu of %zu", free_now(), f0);
    printf("torture oom=%d\n", oom);
    return failures != 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s link|dlsym|procaddr COMMAND [ARGS]\n", argv[0]);
        return 2;
    }
    real_gpu = getenv("VGPU_TEST_REAL") != NULL && strcmp(getenv("VGPU_TEST_REAL"), "1") == 0;
    load(argv[1]);
    if (strcmp(argv[2], "dlnext") == 0) {
        /* The object after this program in lookup order defines cuInit: libvgpu when it is
         * preloaded. Resolved relative to libvgpu instead, it would be the real driver. */
        void *next = dlsym(RTLD_NEXT, "cuInit");
        void *first = dlsym(RTLD_DEFAULT, "cuInit");
        Dl_info info;
        const char *where = next != NULL && dladdr(next, &info) ? info.dli_fname : "none";
        printf("next=%s\n", where);
        return next == first ? 0 : 1;
    }
    if (strcmp(argv[2], "threads") == 0 && argc > 5)
        return cmd_threads((int)strtol(argv[3], NULL, 10), strtod(argv[4], NULL),
                           (unsigned)strtoul(argv[5], NULL, 10));
    if (strcmp(argv[2], "forkfresh") == 0 && argc > 4) {
        int n = (int)strtol(argv[3], NULL, 10);
        size_t bytes = (size_t)strtoull(argv[4], NULL, 10);
        int results[2], release[2];
        if (pipe(results) != 0 || pipe(release) != 0)
            return 2;
        for (int i = 0; i < n; i++) {
            if (fork() == 0) {
                close(release[1]);
                char c = '3';
                CUdeviceptr p;
                if (setup() == 0)
                    c = cu.cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS ? '0' : '1';
                if (write(results[1], &c, 1) != 1)
                    _exit(2);
                /* Hold everything until every worker has tried. */
                while (read(release[0], &c, 1) > 0)
                    ;
                _exit(0);
            }
        }
        close(release[0]);
        int bad = 0;
        for (int i = 0; i < n; i++) {
            char c;
            if (read(results[0], &c, 1) != 1 || c != '0')
                bad++;
        }
        close(release[1]);
        while (wait(NULL) > 0)
            ;
        printf("children failed=%d\n", bad);
        return 0;
    }
    int rc = setup();
    if (rc != 0)
        return 3;
    /* Tests that start many processes let every one make its context first. */
    const char *barrier = getenv("PROBE_BARRIER");
    if (barrier != NULL) {
        printf("context\n");
        fflush(stdout);
        for (int i = 0; i < 60000 && access(barrier, F_OK) != 0; i++)
            usleep(1000);
    }
    const char *cmd = argv[2];
    if (strcmp(cmd, "info") == 0)
        return cmd_info();
    if (strcmp(cmd, "paths") == 0)
        return cmd_paths();
    if (strcmp(cmd, "hold") == 0 && argc > 3)
        return cmd_hold((size_t)strtoull(argv[3], NULL, 10));
    if (strcmp(cmd, "random") == 0 && argc > 4)
        return cmd_random(strtod(argv[3], NULL), (unsigned)strtoul(argv[4], NULL, 10));
    if (strcmp(cmd, "fill") == 0)
        return cmd_fill();
    if (strcmp(cmd, "fork") == 0)
        return cmd_fork();
    if (strcmp(cmd, "torture") == 0)
        return cmd_torture();
    fprintf(stderr, "unknown command %s\n", cmd);
    return 2;
}
