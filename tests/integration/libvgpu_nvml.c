/* NVML as nvidia-smi and pynvml see it inside a container, for libvgpu's integration
 * tests. Built twice like libvgpu_probe: libvgpu_nvml_link (linked against
 * libnvidia-ml.so.1) and libvgpu_nvml (dlopen + dlsym, as pynvml does).
 *   libvgpu_nvml link|dlsym [DEVICE]
 * prints "total=<b> used=<b> free=<b> total2=<b> used2=<b> free2=<b> procs=<n> pids=<p>:<b>,...
 * uuid=GPU-..." from nvmlDeviceGetMemoryInfo, _v2, nvmlDeviceGetComputeRunningProcesses_v3
 * and nvmlDeviceGetUUID (DEVICE is NVML's index, which CUDA_VISIBLE_DEVICES leaves alone), and
 * checks the three agree with each other. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "abi/nvml.h"

#define API(X)                                                                                     \
    X(nvmlInit_v2)                                                                                 \
    X(nvmlDeviceGetHandleByIndex_v2)                                                               \
    X(nvmlDeviceGetMemoryInfo)                                                                     \
    X(nvmlDeviceGetMemoryInfo_v2)                                                                  \
    X(nvmlDeviceGetUUID)                                                                           \
    X(nvmlDeviceGetComputeRunningProcesses_v3)

#define FIELD(name) __typeof__(name) *name;
static struct {
    API(FIELD)
} nv;

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
#ifdef PROBE_LINKED
    if (strcmp(argv[1], "link") == 0) {
#define DIRECT(name) nv.name = name;
        API(DIRECT)
    } else
#endif
    {
        void *h = dlopen("libnvidia-ml.so.1", RTLD_NOW);
        if (h == NULL) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            return 2;
        }
#define BY_DLSYM(name)                                                                             \
    if ((nv.name = (__typeof__(nv.name))dlsym(h, #name)) == NULL)                                  \
        return 2;
        API(BY_DLSYM)
    }
    nvmlReturn_t r = nv.nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        printf("nvmlInit=%d\n", (int)r);
        return 3;
    }
    nvmlDevice_t dev;
    unsigned index = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 0;
    if (nv.nvmlDeviceGetHandleByIndex_v2(index, &dev) != NVML_SUCCESS)
        return 2;
    nvmlMemory_t m1;
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    if (nv.nvmlDeviceGetMemoryInfo(dev, &m1) != NVML_SUCCESS ||
        nv.nvmlDeviceGetMemoryInfo_v2(dev, &m2) != NVML_SUCCESS)
        return 2;
    nvmlProcessInfo_t procs[64];
    unsigned count = 0;
    r = nv.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, NULL);
    if (r != NVML_SUCCESS && r != NVML_ERROR_INSUFFICIENT_SIZE)
        return 2;
    unsigned need = count;
    count = 64;
    if (nv.nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, procs) != NVML_SUCCESS)
        return 2;
    printf("total=%llu used=%llu free=%llu total2=%llu used2=%llu free2=%llu procs=%u pids=",
           m1.total, m1.used, m1.free, m2.total, m2.used, m2.free, count);
    for (unsigned i = 0; i < count; i++)
        printf("%s%u:%llu", i ? "," : "", procs[i].pid, procs[i].usedGpuMemory);
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (nv.nvmlDeviceGetUUID(dev, uuid, sizeof uuid) != NVML_SUCCESS)
        return 2;
    printf(" uuid=%s\n", uuid);
    int bad = 0;
    if (m1.free > m1.total || m1.used > m1.total || m2.total != m1.total || m2.used != m1.used) {
        fprintf(stderr, "FAIL: inconsistent memory views\n");
        bad = 1;
    }
    if (need != count) {
        fprintf(stderr, "FAIL: size query said %u processes, list has %u\n", need, count);
        bad = 1;
    }
    return bad;
}
