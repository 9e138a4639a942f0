/* A demo tenant: holds some device memory and keeps the GPU busy with vgpu_spin kernels
 * for a while, printing how much GPU time it got. Runs on fakegpu or a real GPU.
 *
 *   worker NAME MEMORY_MIB KERNEL_MS SECONDS [PTX_FILE]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/cuda.h"
#include "base/parse.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int check(CUresult rc, const char *what)
{
    if (rc == CUDA_SUCCESS)
        return 0;
    const char *msg = "unknown error";
    cuGetErrorString(rc, &msg);
    fprintf(stderr, "worker: %s failed: %s (%d)\n", what, msg, (int)rc);
    return -1;
}

/* The PTX text, or a placeholder that fakegpu accepts when no file is given. */
static char *load_image(const char *path)
{
    static char placeholder[] = "// vgpu_spin\n";
    if (path == NULL)
        return placeholder;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return placeholder;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: worker NAME MEMORY_MIB KERNEL_MS SECONDS [PTX_FILE]\n");
        return 2;
    }
    const char *name = argv[1];
    uint64_t mib, kernel_ms, seconds;
    struct vg_err err;
    if (vg_parse_u64(argv[2], 0, 1 << 24, &mib, &err) != 0 ||
        vg_parse_u64(argv[3], 1, 10000, &kernel_ms, &err) != 0 ||
        vg_parse_u64(argv[4], 1, 3600, &seconds, &err) != 0) {
        fprintf(stderr, "worker: %s\n", err.msg);
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction spin;
    CUdeviceptr mem = 0;
    if (check(cuInit(0), "cuInit") || check(cuDeviceGet(&dev, 0), "cuDeviceGet") ||
        check(cuCtxCreate_v2(&ctx, 0, dev), "cuCtxCreate") ||
        check(cuModuleLoadData(&mod, load_image(argc > 5 ? argv[5] : NULL)), "cuModuleLoadData") ||
        check(cuModuleGetFunction(&spin, mod, "vgpu_spin"), "cuModuleGetFunction"))
        return 1;
    size_t free_bytes = 0, total_bytes = 0;
    if (check(cuMemGetInfo_v2(&free_bytes, &total_bytes), "cuMemGetInfo"))
        return 1;
    printf("[%s] the GPU looks like %zu MiB, %zu MiB free\n", name, total_bytes >> 20,
           free_bytes >> 20);
    fflush(stdout);
    if (mib > 0 && check(cuMemAlloc_v2(&mem, (size_t)mib << 20), "cuMemAlloc"))
        return 1;
    printf("[%s] holding %llu MiB, launching %llu ms kernels for %llu s\n", name,
           (unsigned long long)mib, (unsigned long long)kernel_ms, (unsigned long long)seconds);
    fflush(stdout);
    unsigned long long ns = kernel_ms * 1000000ULL;
    void *params[] = {&ns};
    double start = now_s(), next_report = start + 1.0;
    unsigned long long done = 0, done_at_report = 0;
    while (now_s() - start < (double)seconds) {
        if (check(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL),
                  "cuLaunchKernel") ||
            check(cuCtxSynchronize(), "cuCtxSynchronize"))
            return 1;
        done++;
        double t = now_s();
        if (t >= next_report) {
            double share = (double)(done - done_at_report) * (double)kernel_ms / 1000.0 /
                           (t - next_report + 1.0);
            printf("[%s] t=%4.1fs  GPU share over the last second: %3.0f%%\n", name, t - start,
                   share * 100.0);
            fflush(stdout);
            done_at_report = done;
            next_report = t + 1.0;
        }
    }
    double total = now_s() - start;
    printf("[%s] done: %llu kernels, %.2f s of GPU time in %.2f s\n", name, done,
           (double)done * (double)kernel_ms / 1000.0, total);
    if (mem != 0)
        cuMemFree_v2(mem);
    cuCtxDestroy_v2(ctx);
    return 0;
}
