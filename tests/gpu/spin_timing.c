/* Real-GPU check of what fakegpu models: how long a vgpu_spin kernel takes from launch
 * to the return of cuStreamSynchronize, what events measure for it, and what an empty
 * launch costs. Runs unchanged on fakegpu, so the two can be compared line by line.
 *
 *   spin_timing PTX_FILE REPEATS
 * prints lines "spin MS wall_p50_us wall_p99_us event_p50_us" and "launch_us P50 P99". */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "abi/cuda.h"
#include "base/parse.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult rc_ = (call);                                                                     \
        if (rc_ != CUDA_SUCCESS) {                                                                 \
            const char *s_ = "?";                                                                  \
            cuGetErrorString(rc_, &s_);                                                            \
            fprintf(stderr, "spin_timing: %s: %s\n", #call, s_);                                   \
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

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        exit(1);
    }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    uint64_t repeats;
    struct vg_err err;
    if (argc != 3 || vg_parse_u64(argv[2], 2, 100000, &repeats, &err) != 0) {
        fprintf(stderr, "usage: spin_timing PTX_FILE REPEATS\n");
        return 2;
    }
    CUdevice dev;
    CUcontext ctx;
    CUmodule mod;
    CUfunction spin;
    CUstream s;
    CUevent start, stop;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuModuleLoadData(&mod, read_file(argv[1])));
    CHECK(cuModuleGetFunction(&spin, mod, "vgpu_spin"));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&start, 0));
    CHECK(cuEventCreate(&stop, 0));
    double *wall = calloc(repeats, sizeof *wall), *event = calloc(repeats, sizeof *event);
    if (wall == NULL || event == NULL)
        return 1;
    static const unsigned long long ms[] = {1, 5, 20};
    for (size_t d = 0; d < sizeof ms / sizeof ms[0]; d++) {
        unsigned long long ns = ms[d] * 1000000ULL;
        void *params[] = {&ns};
        for (uint64_t i = 0; i < repeats; i++) {
            double t0 = now_us();
            CHECK(cuEventRecord(start, s));
            CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
            CHECK(cuEventRecord(stop, s));
            CHECK(cuStreamSynchronize(s));
            wall[i] = now_us() - t0 - (double)ns / 1e3;
            float elapsed_ms = 0;
            CHECK(cuEventElapsedTime(&elapsed_ms, start, stop));
            event[i] = (double)elapsed_ms * 1e3 - (double)ns / 1e3;
        }
        qsort(wall, repeats, sizeof *wall, cmp_double);
        qsort(event, repeats, sizeof *event, cmp_double);
        printf("spin %llu %.1f %.1f %.1f\n", ms[d], wall[repeats / 2], wall[repeats * 99 / 100],
               event[repeats / 2]);
    }
    /* Launch cost: a zero-length spin, timed around the call alone. */
    unsigned long long zero = 0;
    void *params[] = {&zero};
    for (uint64_t i = 0; i < repeats; i++) {
        double t0 = now_us();
        CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
        wall[i] = now_us() - t0;
        if (i % 64 == 63)
            CHECK(cuStreamSynchronize(s));
    }
    CHECK(cuStreamSynchronize(s));
    qsort(wall, repeats, sizeof *wall, cmp_double);
    printf("launch_us %.2f %.2f\n", wall[repeats / 2], wall[repeats * 99 / 100]);
    free(wall);
    free(event);
    return 0;
}
