/* fakegpu benchmarks, driven by bench/fakegpu.sh.
 *   fakegpu_launch launch N     N launches of an ordinary (FAKEGPU_KERNEL_NS) kernel on one
 *                               stream, then one synchronize (run under callgrind: the
 *                               difference between two N cancels the set-up cost)
 *   fakegpu_launch fidelity R   R launches each of vgpu_spin 1, 5 and 20 ms, each timed from
 *                               launch to the return of cuStreamSynchronize; prints one
 *                               line per duration: "<ms> <p50 error us> <p99 error us>" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/cuda.h"
#include "base/parse.h"

#define DIE_IF(cond, what)                                                                         \
    do {                                                                                           \
        if (cond) {                                                                                \
            fprintf(stderr, "fakegpu_launch: %s failed\n", what);                                  \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    uint64_t n = 0;
    struct vg_err err;
    if (argc != 3 || vg_parse_u64(argv[2], 1, 10000000, &n, &err) != 0) {
        fprintf(stderr, "usage: fakegpu_launch launch|fidelity COUNT\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction empty, spin;
    CUstream s;
    DIE_IF(cuInit(0) != CUDA_SUCCESS, "cuInit");
    DIE_IF(cuDeviceGet(&dev, 0) != CUDA_SUCCESS, "cuDeviceGet");
    DIE_IF(cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS, "cuDevicePrimaryCtxRetain");
    DIE_IF(cuCtxSetCurrent(ctx) != CUDA_SUCCESS, "cuCtxSetCurrent");
    DIE_IF(cuModuleLoadData(&mod, ".version 8.0\n") != CUDA_SUCCESS, "cuModuleLoadData");
    DIE_IF(cuModuleGetFunction(&empty, mod, "empty") != CUDA_SUCCESS, "cuModuleGetFunction");
    DIE_IF(cuModuleGetFunction(&spin, mod, "vgpu_spin") != CUDA_SUCCESS, "cuModuleGetFunction");
    DIE_IF(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS, "cuStreamCreate");

    if (strcmp(argv[1], "launch") == 0) {
        for (uint64_t i = 0; i < n; i++)
            DIE_IF(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL) != CUDA_SUCCESS,
                   "cuLaunchKernel");
        DIE_IF(cuStreamSynchronize(s) != CUDA_SUCCESS, "cuStreamSynchronize");
        return 0;
    }
    if (strcmp(argv[1], "fidelity") != 0) {
        fprintf(stderr, "fakegpu_launch: unknown mode '%s'\n", argv[1]);
        return 2;
    }
    static const unsigned long long durations_ms[] = {1, 5, 20};
    double *errs = calloc(n, sizeof *errs);
    DIE_IF(!errs, "calloc");
    for (size_t d = 0; d < 3; d++) {
        unsigned long long ns = durations_ms[d] * 1000000ULL;
        void *params[] = {&ns};
        for (uint64_t i = 0; i < n; i++) {
            double t0 = now_us();
            DIE_IF(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL) != CUDA_SUCCESS,
                   "cuLaunchKernel");
            DIE_IF(cuStreamSynchronize(s) != CUDA_SUCCESS, "cuStreamSynchronize");
            errs[i] = now_us() - t0 - (double)ns / 1e3;
        }
        qsort(errs, n, sizeof *errs, cmp_double);
        printf("%llu %.1f %.1f\n", durations_ms[d], errs[n / 2], errs[(n * 99) / 100]);
    }
    free(errs);
    return 0;
}
