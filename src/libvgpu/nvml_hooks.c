/* NVML wrappers: the container's view of memory and processes (what nvidia-smi and
 * pynvml show inside it). Memory: the limit as total, the container's usage as used, and
 * free = total - used, clamped to [0, what the card really has free]. Processes: the
 * container's live processes from its region, with what each holds on that device
 * (context overhead included) and the pid as the container sees it. With no limit (or no
 * region) every call is forwarded untouched. */
#define _GNU_SOURCE
#include <string.h>

#include "libvgpu/vgpu.h"

#define REAL lv_g.real

/* nvmlInit* sets up libvgpu as cuInit does; NVML-only programs initialise the CUDA
 * driver for it (no context is created), so the region is keyed by UUID the same way.
 * Where CUDA sees no device at all (CUDA_VISIBLE_DEVICES), the existing region alone
 * still gives NVML's cards the container's view. */
static nvmlReturn_t after_init(nvmlReturn_t r)
{
    if (r != NVML_SUCCESS)
        return r;
    if (atomic_load(&lv_g.setup) == LV_SETUP_NONE && REAL.cuInit(0) == CUDA_ERROR_NO_DEVICE)
        (void)lv_setup_without_cuda();
    return lv_ensure_setup() == LV_SETUP_FAILED ? NVML_ERROR_UNKNOWN : r;
}

LV_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    if (!lv_load_real())
        return NVML_ERROR_UNINITIALIZED;
    return after_init(REAL.nvmlInit_v2());
}

LV_EXPORT nvmlReturn_t nvmlInit(void)
{
    if (!lv_load_real())
        return NVML_ERROR_UNINITIALIZED;
    return after_init(REAL.nvmlInit());
}

LV_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    if (!lv_load_real())
        return NVML_ERROR_UNINITIALIZED;
    return after_init(REAL.nvmlInitWithFlags(flags));
}

static int region_dev_of(nvmlDevice_t device)
{
    if (lv_ensure_setup() != LV_SETUP_REGION)
        return -1;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    if (REAL.nvmlDeviceGetUUID(device, uuid, sizeof uuid) != NVML_SUCCESS)
        return -1;
    return region_find_device(lv_g.region, uuid);
}

/* The container's (total, free, used) on dev, given the card's real values; false when
 * the device has no limit (real values stand). */
static bool container_view(int dev, unsigned long long *total, unsigned long long *free_b,
                           unsigned long long *used_b)
{
    uint64_t used = 0, limit = 0;
    if (dev < 0)
        return false;
    lv_reclaim_for_view();
    if (region_usage(lv_g.region, (unsigned)dev, &used, &limit) != 0 || limit == 0)
        return false;
    if (limit == REGION_LIMIT_CLOSED)
        used = UINT64_MAX; /* closed: nothing is free */
    uint64_t t = limit < *total ? limit : *total;
    uint64_t u = used < t ? used : t;
    uint64_t f = t - u;
    if (f > *free_b)
        f = *free_b;
    *total = t;
    *used_b = u;
    *free_b = f;
    return true;
}

LV_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (!lv_load_real())
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = REAL.nvmlDeviceGetMemoryInfo(device, memory);
    if (r == NVML_SUCCESS && memory != NULL)
        (void)container_view(region_dev_of(device), &memory->total, &memory->free, &memory->used);
    return r;
}

LV_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (!lv_load_real())
        return NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t r = REAL.nvmlDeviceGetMemoryInfo_v2(device, memory);
    if (r == NVML_SUCCESS && memory != NULL &&
        container_view(region_dev_of(device), &memory->total, &memory->free, &memory->used))
        memory->reserved = 0; /* the driver's reservation is outside the container's slice */
    return r;
}

/* Fills the container's processes on dev into v1 or v2/v3 records. */
static pthread_mutex_t procs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct region_proc_info procs[REGION_MAX_PROCS];

void lv_nvml_after_fork(void)
{
    pthread_mutex_init(&procs_lock, NULL); /* a parent thread may have held it */
}

static nvmlReturn_t container_procs(int dev, unsigned int *count, void *infos, bool v1)
{
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    lv_reclaim_for_view();
    pthread_mutex_lock(&procs_lock);
    int n = region_list_procs(lv_g.region, procs, REGION_MAX_PROCS);
    unsigned have = 0;
    for (int i = 0; i < n && i < REGION_MAX_PROCS; i++)
        if (procs[i].used[dev] > 0)
            have++;
    nvmlReturn_t r = NVML_SUCCESS;
    if (infos == NULL || *count < have) {
        r = have == 0 && infos == NULL ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    } else {
        unsigned k = 0;
        for (int i = 0; i < n && i < REGION_MAX_PROCS; i++) {
            if (procs[i].used[dev] == 0)
                continue;
            if (v1) {
                nvmlProcessInfo_v1_t *o = (nvmlProcessInfo_v1_t *)infos + k;
                o->pid = (unsigned)procs[i].pid;
                o->usedGpuMemory = procs[i].used[dev];
            } else {
                nvmlProcessInfo_v2_t *o = (nvmlProcessInfo_v2_t *)infos + k;
                o->pid = (unsigned)procs[i].pid;
                o->usedGpuMemory = procs[i].used[dev];
                o->gpuInstanceId = 0xFFFFFFFFu; /* not a MIG instance */
                o->computeInstanceId = 0xFFFFFFFFu;
            }
            k++;
        }
    }
    *count = have;
    pthread_mutex_unlock(&procs_lock);
    return r;
}

#define LV_PROCS(fn, v1)                                                                           \
    do {                                                                                           \
        if (!lv_load_real())                                                                       \
            return NVML_ERROR_UNINITIALIZED;                                                       \
        int dev_ = region_dev_of(device);                                                          \
        if (dev_ < 0)                                                                              \
            return REAL.fn(device, infoCount, infos);                                              \
        return container_procs(dev_, infoCount, infos, v1);                                        \
    } while (0)

LV_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                            unsigned int *infoCount,
                                                            nvmlProcessInfo_v1_t *infos)
{
    LV_PROCS(nvmlDeviceGetComputeRunningProcesses, true);
}

LV_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                               unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos)
{
    LV_PROCS(nvmlDeviceGetComputeRunningProcesses_v2, false);
}

LV_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                               unsigned int *infoCount,
                                                               nvmlProcessInfo_v2_t *infos)
{
    LV_PROCS(nvmlDeviceGetComputeRunningProcesses_v3, false);
}
