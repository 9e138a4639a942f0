/* The program of security.attacks.dispatch: takes every driver entry point it uses from
 * the attacker's library (dispatch_lib.c), found by WAY, and tries to get past the
 * container's limits with them. Built twice: dispatch_attack_link links the library
 * (LIB is "-"), dispatch_attack dlopens it from LIB.
 *
 *   dispatch_attack LIB WAY mem         cuMemGetInfo and NVML's view, then 256 MiB at a time
 *                                       until refused (at most 4 GiB); prints "allocated=<n>
 *                                       total=<bytes> nvml_total=<bytes>" (0: the call
 *                                       failed), then "ready", and holds until killed
 *   dispatch_attack LIB WAY launch MS   1 ms kernels back to back for MS milliseconds
 *   dispatch_attack - - early           (unlinked build) before any driver is loaded,
 *                                       RTLD_NEXT from the program, which comes before
 *                                       libvgpu, finds libvgpu's cuInit, as RTLD_DEFAULT
 *   dispatch_attack - - marker          RTLD_NEXT of a name libvgpu does not wrap still
 *                                       resolves after the real caller: from the program
 *                                       the library's definition, from the library none
 * Exits 0 when it ran (the test reads the driver's truth), 3 when a lookup failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dispatch_attack.h"

#define MiB (UINT64_C(1) << 20)

static struct dispatch_api api;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int context(void)
{
    CUdevice dev;
    CUcontext ctx;
    CUresult r = api.cuInit(0);
    if (r == CUDA_SUCCESS)
        r = api.cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS)
        r = api.cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS)
        r = api.cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS)
        fprintf(stderr, "dispatch_attack: no context (%d)\n", (int)r);
    return r == CUDA_SUCCESS ? 0 : -1;
}

__attribute__((noreturn)) static void cmd_mem(void)
{
    (void)context();
    size_t free_bytes = 0, total = 0;
    if (api.cuMemGetInfo_v2(&free_bytes, &total) != CUDA_SUCCESS)
        total = 0;
    unsigned long long nvml_total = 0;
    nvmlDevice_t nd;
    nvmlMemory_t m;
    if (api.nvmlInit_v2() == NVML_SUCCESS &&
        api.nvmlDeviceGetHandleByIndex_v2(0, &nd) == NVML_SUCCESS &&
        api.nvmlDeviceGetMemoryInfo(nd, &m) == NVML_SUCCESS)
        nvml_total = m.total;
    unsigned n = 0;
    CUdeviceptr p;
    while (n < 16 && api.cuMemAlloc_v2(&p, 256 * MiB) == CUDA_SUCCESS)
        n++;
    printf("allocated=%u total=%zu nvml_total=%llu\nready\n", n, total, nvml_total);
    fflush(stdout);
    for (;;)
        pause();
}

static int cmd_launch(long ms)
{
    CUmodule mod;
    CUfunction fn;
    if (context() != 0 || api.cuModuleLoadData(&mod, "// vgpu_spin\n") != CUDA_SUCCESS ||
        api.cuModuleGetFunction(&fn, mod, "vgpu_spin") != CUDA_SUCCESS) {
        fprintf(stderr, "dispatch_attack: no kernel\n");
        return 1;
    }
    unsigned long long kernel_ns = 1000000, launches = 0;
    void *params[] = {&kernel_ns};
    for (int64_t stop = now_ns() + ms * 1000000; now_ns() < stop; launches++)
        if (api.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL) != CUDA_SUCCESS) {
            fprintf(stderr, "dispatch_attack: launch refused\n");
            return 1;
        }
    (void)api.cuCtxSynchronize();
    printf("launches=%llu\n", launches);
    return 0;
}

static int cmd_marker(void)
{
#ifdef DISPATCH_LINKED
    void *from_program = dlsym(RTLD_NEXT, "dispatch_marker");
    void *from_library = dispatch_next_marker(0), *versioned = dispatch_next_marker(1);
    printf("program=%p library=%p versioned=%p marker=%p\n", from_program, from_library, versioned,
           (void *)dispatch_marker);
    return from_program == (void *)dispatch_marker && from_library == NULL && versioned == NULL ? 0
                                                                                                : 1;
#else
    fprintf(stderr, "dispatch_attack: marker needs the linked build\n");
    return 2;
#endif
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: dispatch_attack LIB|- WAY mem|launch MS|early|marker\n");
        return 2;
    }
    if (strcmp(argv[3], "marker") == 0)
        return cmd_marker();
    if (strcmp(argv[3], "early") == 0) {
        void *next = dlsym(RTLD_NEXT, "cuInit"), *first = dlsym(RTLD_DEFAULT, "cuInit");
        printf("next=%p default=%p\n", next, first);
        return next != NULL && next == first ? 0 : 1;
    }
    dispatch_resolve_fn *resolve = NULL;
#ifdef DISPATCH_LINKED
    resolve = dispatch_resolve;
#else
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL)
        resolve = (dispatch_resolve_fn *)dlsym(lib, "dispatch_resolve");
    if (resolve == NULL) {
        fprintf(stderr, "dispatch_attack: %s: %s\n", argv[1], dlerror());
        return 2;
    }
#endif
    if (resolve(argv[2], &api) != 0)
        return 3;
    if (strcmp(argv[3], "mem") == 0)
        cmd_mem();
    if (strcmp(argv[3], "launch") == 0 && argc > 4)
        return cmd_launch(strtol(argv[4], NULL, 10));
    fprintf(stderr, "dispatch_attack: unknown command %s\n", argv[3]);
    return 2;
}
