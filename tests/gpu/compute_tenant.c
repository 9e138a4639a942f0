/* A compute tenant for libvgpu's share tests: launches vgpu_spin kernels as fast as it is
 * let, on fakegpu or a real GPU (the same binary; set COMPUTE_PTX to tests/gpu/
 * vgpu_spin.ptx on a real GPU).
 *
 *   compute_tenant KERNEL_NS MILLISECONDS [MODE] [SEED]
 *
 * MODE: steady: cuLaunchKernel back to back, every kernel KERNEL_NS long. graph[:N]: a
 * graph of N kernels of KERNEL_NS each (default 4) captured once (the launches made
 * during capture must pass through libvgpu untouched) and replayed with cuGraphLaunch.
 * uniform:LO, loguniform:LO: each kernel's length drawn uniformly (or log-uniformly)
 * from [LO, KERNEL_NS] ns; one function and shape for all of them, as a kernel whose
 * work depends on its data. bursty: random on/off periods of 50..300 ms. ex:
 * cuLaunchKernelEx. coop: cuLaunchCooperativeKernel. infer:N:PERIOD_MS[:graph]: an
 * inference-like tenant, a request every PERIOD_MS of N kernels of KERNEL_NS (one graph of
 * N kernels with :graph), whose latency is from its first launch to the stream's
 * synchronize; prints "requests=<n> p50_us=<n> p99_us=<n> max_us=<n>" over the requests
 * after COMPUTE_WARMUP_MS (COMPUTE_INFER_PHASE_MS: each request that far into a period of
 * the monotonic clock, for tenants that must not drift). SEED seeds the random draws.
 * Prints "launches=<n> gpu_ns=<n>" at the end, where
 * gpu_ns is the kernel time it asked for, and, when COMPUTE_WARMUP_MS is set, the same for
 * the launches made after the warm-up: "window_ns=<wall time after the warm-up>
 * window_gpu_ns=<kernel time launched in it>" (the real-GPU suite's ground truth with
 * tests/gpu/compute_spin.ptx, whose kernel counts only the time it is on the GPU).
 * COMPUTE_HOG_EVENTS=before makes it create CUDA events until the driver refuses one
 * before it launches anything (a tenant that starves the limiter of its timing events);
 * =after does so after one launch.
 * Exits non-zero on any CUDA error. */
#define _GNU_SOURCE
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/cuda.h"
#include "base/parse.h"

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "compute_tenant: %s failed: %d\n", #call, (int)r_);                    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static char *read_ptx(void)
{
    const char *path = getenv("COMPUTE_PTX");
    if (path == NULL || path[0] == '\0')
        return strdup("// vgpu_spin (fakegpu accepts any image)\n");
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(2);
    }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strdup(buf);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: compute_tenant KERNEL_NS MILLISECONDS "
                        "[steady|graph[:N]|uniform:LO|loguniform:LO|bursty|ex|coop] [SEED]\n");
        return 2;
    }
    uint64_t ns, ms, seed64 = 1;
    const char *mode = argc > 3 ? argv[3] : "steady";
    if (vg_parse_u64(argv[1], 1, UINT64_C(10000000000), &ns, NULL) != 0 ||
        vg_parse_u64(argv[2], 1, UINT64_C(3600000), &ms, NULL) != 0 ||
        (argc > 4 && vg_parse_u64(argv[4], 0, UINT32_MAX, &seed64, NULL) != 0)) {
        fprintf(stderr, "compute_tenant: bad KERNEL_NS, MILLISECONDS or SEED\n");
        return 2;
    }
    unsigned seed = (unsigned)seed64;
    uint64_t graph_n = 0, lo_ns = 0;
    bool uniform = false, loguniform = false, infer = false;
    uint64_t infer_n = 0, infer_ms = 0;
    if (strncmp(mode, "infer:", 6) == 0) {
        char nbuf[16], pbuf[16];
        const char *c1 = strchr(mode + 6, ':');
        const char *c2 = c1 != NULL ? strchr(c1 + 1, ':') : NULL;
        size_t nl = c1 != NULL ? (size_t)(c1 - mode - 6) : 0;
        size_t pl = c1 == NULL ? 0 : c2 != NULL ? (size_t)(c2 - c1 - 1) : strlen(c1 + 1);
        if (nl == 0 || nl >= sizeof nbuf || pl == 0 || pl >= sizeof pbuf ||
            (c2 != NULL && strcmp(c2, ":graph") != 0)) {
            fprintf(stderr, "compute_tenant: bad \"%s\" (infer:N:PERIOD_MS[:graph])\n", mode);
            return 2;
        }
        memcpy(nbuf, mode + 6, nl);
        nbuf[nl] = '\0';
        memcpy(pbuf, c1 + 1, pl);
        pbuf[pl] = '\0';
        if (vg_parse_u64(nbuf, 1, 64, &infer_n, NULL) != 0 ||
            vg_parse_u64(pbuf, 1, 10000, &infer_ms, NULL) != 0) {
            fprintf(stderr, "compute_tenant: bad \"%s\" (N 1..64, PERIOD_MS 1..10000)\n", mode);
            return 2;
        }
        infer = true;
        if (c2 != NULL)
            graph_n = infer_n;
    } else if (strcmp(mode, "graph") == 0) {
        graph_n = 4;
    } else if (strncmp(mode, "graph:", 6) == 0) {
        if (vg_parse_u64(mode + 6, 1, 1024, &graph_n, NULL) != 0) {
            fprintf(stderr, "compute_tenant: bad graph size in \"%s\"\n", mode);
            return 2;
        }
    } else if (strncmp(mode, "uniform:", 8) == 0 || strncmp(mode, "loguniform:", 11) == 0) {
        uniform = mode[0] == 'u';
        loguniform = !uniform;
        if (vg_parse_u64(strchr(mode, ':') + 1, 1, ns, &lo_ns, NULL) != 0) {
            fprintf(stderr, "compute_tenant: bad lower length in \"%s\" (1..KERNEL_NS)\n", mode);
            return 2;
        }
    } else if (strcmp(mode, "steady") != 0 && strcmp(mode, "bursty") != 0 &&
               strcmp(mode, "ex") != 0 && strcmp(mode, "coop") != 0) {
        fprintf(stderr, "compute_tenant: unknown mode \"%s\"\n", mode);
        return 2;
    }
    uint64_t warm_ms = 0;
    const char *warm_env = getenv("COMPUTE_WARMUP_MS");
    if (warm_env != NULL && vg_parse_u64(warm_env, 0, ms, &warm_ms, NULL) != 0) {
        fprintf(stderr, "compute_tenant: bad COMPUTE_WARMUP_MS \"%s\"\n", warm_env);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    char *ptx = read_ptx();
    CHECK(cuModuleLoadData(&mod, ptx));
    free(ptx);
    CHECK(cuModuleGetFunction(&fn, mod, "vgpu_spin"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const char *hog = getenv("COMPUTE_HOG_EVENTS");
    if (hog != NULL && strcmp(hog, "after") == 0) {
        unsigned long long one = 1000;
        void *one_params[] = {&one};
        CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, one_params, NULL));
        CHECK(cuStreamSynchronize(s));
    }
    if (hog != NULL) {
        CUevent ev;
        unsigned held = 0;
        while (held < 1000000 && cuEventCreate(&ev, 0) == CUDA_SUCCESS)
            held++;
        fprintf(stderr, "compute_tenant: holding %u events\n", held);
    }

    unsigned long long arg = (unsigned long long)ns;
    void *params[] = {&arg};
    CUgraphExec exec = NULL;
    unsigned long long per_launch = (unsigned long long)ns;
    if (graph_n > 0) {
        CUgraph g;
        CHECK(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
        for (uint64_t i = 0; i < graph_n; i++)
            CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        CHECK(cuStreamEndCapture(s, &g));
        CHECK(cuGraphInstantiateWithFlags(&exec, g, 0));
        per_launch = (unsigned long long)(ns * graph_n);
    }
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s;

    if (infer) {
        /* Requests on a fixed schedule (a late one does not shift the next). */
        size_t cap = (size_t)(ms / infer_ms) + 2, n = 0;
        int64_t *lat = calloc(cap, sizeof *lat);
        if (lat == NULL)
            return 1;
        int64_t t0 = now_ns(), stop = t0 + (int64_t)ms * 1000000;
        int64_t warm = t0 + (int64_t)warm_ms * 1000000;
        unsigned long long requests = 0;
        /* COMPUTE_INFER_PHASE_MS: requests at that offset into each period of the
         * monotonic clock, so that tenants started apart keep a fixed phase. */
        int64_t first = t0, period = (int64_t)infer_ms * 1000000;
        const char *phase_env = getenv("COMPUTE_INFER_PHASE_MS");
        uint64_t phase_ms = 0;
        if (phase_env != NULL) {
            if (vg_parse_u64(phase_env, 0, infer_ms - 1, &phase_ms, NULL) != 0) {
                fprintf(stderr,
                        "compute_tenant: bad COMPUTE_INFER_PHASE_MS \"%s\" (0..PERIOD_MS-1)\n",
                        phase_env);
                return 2;
            }
            first = (t0 / period + 1) * period + (int64_t)phase_ms * 1000000;
        }
        for (int64_t next = first; next < stop; next += period) {
            struct timespec at = {.tv_sec = (time_t)(next / 1000000000),
                                  .tv_nsec = (long)(next % 1000000000)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
            int64_t a = now_ns();
            if (exec != NULL) {
                CHECK(cuGraphLaunch(exec, s));
            } else {
                for (uint64_t i = 0; i < infer_n; i++)
                    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
            }
            CHECK(cuStreamSynchronize(s));
            int64_t b = now_ns();
            requests++;
            if (a >= warm && n < cap)
                lat[n++] = b - a;
            if (b > next + period)
                next = b - (b - first) % period; /* skip missed slots, keeping the phase */
        }
        if (n == 0) {
            fprintf(stderr, "compute_tenant: no request after the warm-up\n");
            return 1;
        }
        qsort(lat, n, sizeof *lat, cmp_i64);
        printf("requests=%zu p50_us=%lld p99_us=%lld max_us=%lld gpu_ns=%llu\n", n,
               (long long)(lat[n / 2] / 1000),
               (long long)(lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1] / 1000),
               (long long)(lat[n - 1] / 1000), requests * infer_n * (unsigned long long)ns);
        free(lat);
        return 0;
    }
    int64_t t0 = now_ns(), stop = t0 + (int64_t)ms * 1000000;
    int64_t phase_end = t0;
    int on = 1;
    unsigned long long launches = 0, gpu_ns = 0, warm_gpu_ns = 0;
    int64_t warm_end = t0 + (int64_t)warm_ms * 1000000;
    for (int64_t t = t0; t < stop; t = now_ns()) {
        if (strcmp(mode, "bursty") == 0 && t >= phase_end) {
            on = !on;
            phase_end = t + (50 + (int64_t)(rand_r(&seed) % 251)) * 1000000;
            if (!on) {
                CHECK(cuStreamSynchronize(s));
                struct timespec d = {0, (long)(phase_end - now_ns())};
                if (d.tv_nsec > 0)
                    nanosleep(&d, NULL);
                continue;
            }
        }
        if (uniform)
            arg = lo_ns +
                  (unsigned long long)((double)(ns - lo_ns) * (rand_r(&seed) / (RAND_MAX + 1.0)));
        else if (loguniform)
            arg = (unsigned long long)((double)lo_ns * exp(log((double)ns / (double)lo_ns) *
                                                           (rand_r(&seed) / (RAND_MAX + 1.0))));
        if (uniform || loguniform)
            per_launch = arg;
        if (exec != NULL)
            CHECK(cuGraphLaunch(exec, s));
        else if (strcmp(mode, "ex") == 0)
            CHECK(cuLaunchKernelEx(&cfg, fn, params, NULL));
        else if (strcmp(mode, "coop") == 0)
            CHECK(cuLaunchCooperativeKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params));
        else
            CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        launches++;
        gpu_ns += per_launch;
        if (t < warm_end)
            warm_gpu_ns = gpu_ns;
    }
    CHECK(cuStreamSynchronize(s));
    int64_t end = now_ns();
    printf("launches=%llu gpu_ns=%llu\n", launches, gpu_ns);
    if (warm_env != NULL)
        printf("window_ns=%lld window_gpu_ns=%llu\n", (long long)(end - warm_end),
               gpu_ns - warm_gpu_ns);
    return 0;
}
