/* A CUDA process for the live-resize tests (libvgpu_resize.py, bench/resize_bench.py): it sets
 * up CUDA once, then answers one line per command read on stdin, so a test can hold
 * memory in a running process and watch its limit change under it:
 *   info          "total=<bytes> free=<bytes>" (cuMemGetInfo: the limit as the app sees it)
 *   alloc <bytes> "ok" or "oom" (cuMemAlloc; the allocation is kept)
 *   freeall       "ok" (frees every kept allocation)
 *   wait <bytes> <ms>  polls cuMemGetInfo every 100 us until total is <bytes>:
 *                 "applied ns=<CLOCK_MONOTONIC ns when first seen>", or "timeout total=<bytes>"
 * It prints "ready" once CUDA is set up; it links libcuda.so.1 (fakegpu, or a real driver). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "abi/cuda.h"

#define MAX_HELD 1024

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int main(void)
{
    CUdevice dev;
    CUcontext ctx;
    if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
        cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS ||
        cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
        printf("error CUDA setup\n");
        return 1;
    }
    static CUdeviceptr held[MAX_HELD];
    unsigned n = 0;
    printf("ready\n");
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin) != NULL) {
        size_t free_b = 0, total = 0;
        unsigned long long a = 0, b = 0;
        if (strncmp(line, "info", 4) == 0) {
            CUresult r = cuMemGetInfo_v2(&free_b, &total);
            printf(r == CUDA_SUCCESS ? "total=%zu free=%zu\n" : "error info\n", total, free_b);
        } else if (sscanf(line, "alloc %llu", &a) == 1) {
            CUdeviceptr p;
            CUresult r = n < MAX_HELD ? cuMemAlloc_v2(&p, (size_t)a) : CUDA_ERROR_OUT_OF_MEMORY;
            if (r == CUDA_SUCCESS)
                held[n++] = p;
            printf(r == CUDA_SUCCESS               ? "ok\n"
                   : r == CUDA_ERROR_OUT_OF_MEMORY ? "oom\n"
                                                   : "error %d\n",
                   (int)r);
        } else if (strncmp(line, "freeall", 7) == 0) {
            while (n > 0)
                (void)cuMemFree_v2(held[--n]);
            printf("ok\n");
        } else if (sscanf(line, "wait %llu %llu", &a, &b) == 2) {
            int64_t end = now_ns() + (int64_t)b * 1000000;
            const struct timespec pause = {0, 100000};
            for (;;) {
                if (cuMemGetInfo_v2(&free_b, &total) == CUDA_SUCCESS && total == a) {
                    printf("applied ns=%lld\n", (long long)now_ns());
                    break;
                }
                if (now_ns() > end) {
                    printf("timeout total=%zu\n", total);
                    break;
                }
                nanosleep(&pause, NULL);
            }
        } else {
            printf("error unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
