/* libvgpu micro-benchmarks (bench/libvgpu.sh runs them with and without libvgpu):
 *   libvgpu_bench launch N       N x cuLaunchKernel of a trivial kernel
 *   libvgpu_bench alloc N [SIZE] N x (cuMemAlloc_v2 + cuMemFree_v2) of SIZE (default 1MiB)
 *   libvgpu_bench rate SECONDS   alloc+free pairs per second (prints "pairs=<n>")
 * Linked against libcuda.so.1; the script picks fakegpu or a real driver. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/cuda.h"
#include "base/parse.h"

static void must(CUresult r, const char *what)
{
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "%s failed: %d\n", what, (int)r);
        exit(1);
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    uint64_t n, size = UINT64_C(1) << 20;
    if (argc < 3 || argc > 4 || vg_parse_u64(argv[2], 0, UINT64_C(1) << 40, &n, NULL) != 0 ||
        (argc == 4 && vg_parse_u64(argv[3], 1, UINT64_C(1) << 40, &size, NULL) != 0)) {
        fprintf(stderr, "usage: libvgpu_bench launch|alloc|rate N [SIZE]\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    must(cuInit(0), "cuInit");
    must(cuDeviceGet(&dev, 0), "cuDeviceGet");
    must(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    must(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (strcmp(argv[1], "launch") == 0) {
        CUmodule mod;
        CUfunction fn;
        must(cuModuleLoadData(&mod, ".version 7.0\n.target sm_70\n"), "cuModuleLoadData");
        must(cuModuleGetFunction(&fn, mod, "bench_empty"), "cuModuleGetFunction");
        for (uint64_t i = 0; i < n; i++)
            must(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel");
        must(cuCtxSynchronize(), "cuCtxSynchronize");
    } else if (strcmp(argv[1], "alloc") == 0) {
        for (uint64_t i = 0; i < n; i++) {
            CUdeviceptr p;
            must(cuMemAlloc_v2(&p, (size_t)size), "cuMemAlloc_v2");
            must(cuMemFree_v2(p), "cuMemFree_v2");
        }
    } else if (strcmp(argv[1], "rate") == 0) {
        unsigned long pairs = 0;
        double end = now() + (double)n;
        while (now() < end) {
            for (int i = 0; i < 64; i++) {
                CUdeviceptr p;
                must(cuMemAlloc_v2(&p, 1 << 20), "cuMemAlloc_v2");
                must(cuMemFree_v2(p), "cuMemFree_v2");
            }
            pairs += 64;
        }
        printf("pairs=%lu\n", pairs);
    } else {
        return 2;
    }
    return 0;
}
