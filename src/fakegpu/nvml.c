/* fakegpu's libnvidia-ml.so.1: NVML over the shared state, the view a monitor, the
 * device plugin or nvidia-smi-like tools get of the simulated GPUs.
 *
 * NVML only reads: it never claims a process slot, so a monitor never shows up as a GPU
 * process. A device marked lost (fakegpu-ctl health) answers every query through its
 * handle with NVML_ERROR_GPU_IS_LOST; looking the handle up still works. Handles are pointers into
 * a fixed table, checked on every call, so a stale or made-up handle gets
 * NVML_ERROR_INVALID_ARGUMENT instead of a crash. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include "abi/nvml.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/str.h"
#include "fakegpu/state.h"

#define NVML_API __attribute__((visibility("default")))

/* Matches fakegpu's cuDriverGetVersion (CUDA 13.0) and an R580 driver. */
#define FAKE_DRIVER_VERSION "580.65.06"
#define FAKE_NVML_VERSION   "13.580.65.06"
#define FAKE_CUDA_VERSION   13000
#define UTIL_WINDOW_NS      1000000000ULL /* nvmlDeviceGetUtilizationRates: last ~1 s */
#define NOT_MIG             0xFFFFFFFFu
#define PCI_DEVICE_ID       0x233010DEu /* H100 SXM5 device 0x2330, vendor NVIDIA 0x10DE */
#define PCI_SUBSYSTEM_ID    0x16C110DEu

/* A GPU (mig < 0) or one of its MIG devices. */
struct nvmlDevice_st {
    unsigned index;
    int mig;
};

static struct nvmlDevice_st handles[FG_MAX_DEVICES];
static struct nvmlDevice_st mig_handles[FG_MAX_DEVICES][FG_MAX_MIG];

static void init_handles(void)
{
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++) {
        handles[i] = (struct nvmlDevice_st){.index = i, .mig = -1};
        for (int m = 0; m < FG_MAX_MIG; m++)
            mig_handles[i][m] = (struct nvmlDevice_st){.index = i, .mig = m};
    }
}

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned init_count; /* nvmlInit minus nvmlShutdown; read atomically */
static struct fg_state *state;

static bool initialised(void)
{
    return __atomic_load_n(&init_count, __ATOMIC_ACQUIRE) > 0;
}

static nvmlReturn_t from_errno(int rc)
{
    switch (rc) {
    case 0:
        return NVML_SUCCESS;
    case -EINVAL:
        return NVML_ERROR_INVALID_ARGUMENT;
    case -ENOSPC:
        return NVML_ERROR_INSUFFICIENT_SIZE;
    case -ENOMEM:
        return NVML_ERROR_MEMORY;
    case -EIO:
        return NVML_ERROR_DRIVER_NOT_LOADED;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

/* The GPU behind a handle (a GPU's or a MIG device's), or -1 (with *ret set) for no init,
 * a bad handle or a lost GPU; *mig receives the MIG device (-1 for a GPU handle). A MIG
 * handle whose GPU is not (or no longer) in MIG mode with that many instances is bad. */
static int resolve(nvmlDevice_t device, int *mig, nvmlReturn_t *ret)
{
    if (!initialised()) {
        *ret = NVML_ERROR_UNINITIALIZED;
        return -1;
    }
    uintptr_t p = (uintptr_t)device, base = (uintptr_t)&handles[0];
    uintptr_t mbase = (uintptr_t)&mig_handles[0][0];
    int count = fg_state_device_count(state);
    *mig = -1;
    if (p >= base && p < base + sizeof handles && (p - base) % sizeof handles[0] == 0 &&
        device->index < (unsigned)count) {
        /* a GPU */
    } else if (p >= mbase && p < mbase + sizeof mig_handles &&
               (p - mbase) % sizeof mig_handles[0][0] == 0 && device->index < (unsigned)count) {
        struct fg_device_info info;
        if (fg_state_device_info(state, (int)device->index, &info) != 0 || !info.mig_enabled ||
            device->mig < 0 || (unsigned)device->mig >= info.mig_count ||
            info.mig[device->mig].gi_id == 0 || !info.mig[device->mig].has_ci) {
            *ret = NVML_ERROR_INVALID_ARGUMENT;
            return -1;
        }
        *mig = device->mig;
    } else {
        *ret = NVML_ERROR_INVALID_ARGUMENT;
        return -1;
    }
    if (fg_device_lost(state, (int)device->index)) {
        *ret = NVML_ERROR_GPU_IS_LOST; /* what the driver says of a GPU off the bus */
        return -1;
    }
    *ret = NVML_SUCCESS;
    return (int)device->index;
}

/* The GPU behind a GPU handle; a MIG device's handle gets NVML_ERROR_NOT_SUPPORTED (the
 * query is about the whole GPU). */
static int device_index(nvmlDevice_t device, nvmlReturn_t *ret)
{
    int mig;
    int dev = resolve(device, &mig, ret);
    if (dev >= 0 && mig >= 0) {
        *ret = NVML_ERROR_NOT_SUPPORTED;
        return -1;
    }
    return dev;
}

/* The prologue of a device query: the device's index (a MIG handle is NOT_SUPPORTED),
 * INVALID_ARGUMENT unless args_ok, and its record. */
static nvmlReturn_t device_info(nvmlDevice_t device, bool args_ok, int *dev,
                                struct fg_device_info *info)
{
    nvmlReturn_t ret;
    *dev = device_index(device, &ret);
    if (*dev < 0)
        return ret;
    if (!args_ok)
        return NVML_ERROR_INVALID_ARGUMENT;
    return fg_state_device_info(state, *dev, info) != 0 ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

/* ---- init ------------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    static pthread_once_t handles_once = PTHREAD_ONCE_INIT;
    pthread_once(&handles_once, init_handles);
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t ret = NVML_SUCCESS;
    if (state == NULL) {
        int rc = fg_state_get(&state);
        if (rc != 0) {
            state = NULL;
            ret = rc == -EINVAL ? NVML_ERROR_UNKNOWN : from_errno(rc);
        }
    }
    if (ret == NVML_SUCCESS)
        __atomic_add_fetch(&init_count, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&init_lock);
    return ret;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&init_lock);
    nvmlReturn_t ret = NVML_ERROR_UNINITIALIZED;
    if (init_count > 0) {
        __atomic_sub_fetch(&init_count, 1, __ATOMIC_RELEASE);
        ret = NVML_SUCCESS;
    }
    pthread_mutex_unlock(&init_lock);
    return ret;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS:
        return "Success";
    case NVML_ERROR_UNINITIALIZED:
        return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
        return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
        return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
        return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED:
        return "Already Initialized";
    case NVML_ERROR_NOT_FOUND:
        return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
        return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
        return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT:
        return "Timeout";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
        return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST:
        return "GPU is lost";
    case NVML_ERROR_MEMORY:
        return "Insufficient Memory";
    case NVML_ERROR_NO_DATA:
        return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
        return "Argument version mismatch";
    case NVML_ERROR_IN_USE:
        return "In use by another client";
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        return "Insufficient resources";
    default:
        return "Unknown Error";
    }
}

/* ---- system ----------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, FAKE_DRIVER_VERSION);
}

NVML_API nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, FAKE_NVML_VERSION);
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = FAKE_CUDA_VERSION;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- devices ---------------------------------------------------------------------- */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = (unsigned)fg_state_device_count(state);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || index >= (unsigned)fg_state_device_count(state))
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int count = fg_state_device_count(state);
    for (int i = 0; i < count; i++) {
        struct fg_device_info info;
        if (fg_state_device_info(state, i, &info) != 0)
            continue;
        if (strcasecmp(info.uuid, uuid) == 0) {
            *device = &handles[i];
            return NVML_SUCCESS;
        }
        for (unsigned m = 0; info.mig_enabled && m < info.mig_count; m++) {
            if (info.mig[m].gi_id != 0 && info.mig[m].has_ci &&
                strcasecmp(info.mig[m].uuid, uuid) == 0) {
                *device = &mig_handles[i][m];
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

static void format_bus_ids(const struct fg_device_info *info, char *legacy, size_t legacy_size,
                           char *full, size_t full_size)
{
    (void)vg_snprintf(legacy, legacy_size, "%04X:%02X:%02X.0", info->pci_domain, info->pci_bus,
                      info->pci_device);
    (void)vg_snprintf(full, full_size, "%08X:%02X:%02X.0", info->pci_domain, info->pci_bus,
                      info->pci_device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    int count = fg_state_device_count(state);
    for (int i = 0; i < count; i++) {
        struct fg_device_info info;
        char legacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE],
            full[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        if (fg_state_device_info(state, i, &info) != 0)
            continue;
        format_bus_ids(&info, legacy, sizeof legacy, full, sizeof full);
        if (strcasecmp(pciBusId, legacy) == 0 || strcasecmp(pciBusId, full) == 0) {
            *device = &handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    struct fg_device_info info;
    if (dev < 0)
        return ret;
    if (fg_state_device_info(state, dev, &info) != 0)
        return NVML_ERROR_UNKNOWN;
    if (mig < 0)
        return copy_string(name, length, info.name);
    char full[FG_NAME_MAX + 32];
    (void)vg_snprintf(full, sizeof full, "%s MIG %s", info.name, info.mig[mig].profile);
    return copy_string(name, length, full);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    struct fg_device_info info;
    if (dev < 0)
        return ret;
    if (fg_state_device_info(state, dev, &info) != 0)
        return NVML_ERROR_UNKNOWN;
    return copy_string(uuid, length, mig < 0 ? info.uuid : info.mig[mig].uuid);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct fg_device_info info;
    int dev;
    nvmlReturn_t ret = device_info(device, pci != NULL, &dev, &info);
    if (ret != NVML_SUCCESS)
        return ret;
    memset(pci, 0, sizeof *pci);
    format_bus_ids(&info, pci->busIdLegacy, sizeof pci->busIdLegacy, pci->busId, sizeof pci->busId);
    pci->domain = info.pci_domain;
    pci->bus = info.pci_bus;
    pci->device = info.pci_device;
    pci->pciDeviceId = PCI_DEVICE_ID;
    pci->pciSubSystemId = PCI_SUBSYSTEM_ID;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                         int *minor)
{
    struct fg_device_info info;
    int dev;
    nvmlReturn_t ret = device_info(device, major != NULL && minor != NULL, &dev, &info);
    if (ret != NVML_SUCCESS)
        return ret;
    *major = info.cc_major;
    *minor = info.cc_minor;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t ret;
    int dev = device_index(device, &ret);
    if (dev < 0)
        return ret;
    if (index == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *index = (unsigned)dev;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return nvmlDeviceGetIndex(device, minorNumber); /* /dev/nvidia<index> */
}

NVML_API nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                           unsigned int *pendingMode)
{
    struct fg_device_info info;
    int dev;
    nvmlReturn_t ret = device_info(device, currentMode != NULL && pendingMode != NULL, &dev, &info);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned slices, mem_slices;
    fg_mig_geometry(info.name, &slices, &mem_slices);
    if (slices == 0)
        return NVML_ERROR_NOT_SUPPORTED; /* a model without MIG */
    *currentMode = info.mig_enabled ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    *pendingMode = *currentMode;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct fg_device_info info;
    int dev;
    nvmlReturn_t ret = device_info(device, count != NULL, &dev, &info);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned slices, mem_slices;
    fg_mig_geometry(info.name, &slices, &mem_slices);
    if (slices == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *count = slices; /* at most one instance per compute slice */
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                          nvmlDevice_t *migDevice)
{
    struct fg_device_info info;
    int dev;
    nvmlReturn_t ret = device_info(device, migDevice != NULL, &dev, &info);
    if (ret != NVML_SUCCESS)
        return ret;
    unsigned slices, mem_slices;
    fg_mig_geometry(info.name, &slices, &mem_slices);
    if (slices == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (index >= slices)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!info.mig_enabled || index >= info.mig_count || info.mig[index].gi_id == 0 ||
        !info.mig[index].has_ci)
        return NVML_ERROR_NOT_FOUND; /* slot index = MIG device index: gaps stay gaps */
    *migDevice = &mig_handles[dev][index];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                   nvmlDevice_t *device)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(migDevice, &mig, &ret);
    if (dev < 0)
        return ret;
    if (device == NULL || mig < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = &handles[dev];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    if (dev < 0)
        return ret;
    if (isMigDevice == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isMigDevice = mig >= 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t instance_id(nvmlDevice_t device, unsigned int *id, bool compute)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    if (dev < 0)
        return ret;
    if (id == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (mig < 0)
        return NVML_ERROR_NOT_SUPPORTED; /* a GPU handle has no instance */
    struct fg_device_info info;
    if (fg_state_device_info(state, dev, &info) != 0)
        return NVML_ERROR_UNKNOWN;
    *id = compute ? info.mig[mig].ci_id : info.mig[mig].gi_id;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, false);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return instance_id(device, id, true);
}

NVML_API nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                                 nvmlDeviceAttributes_t *attributes)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    if (dev < 0)
        return ret;
    if (attributes == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct fg_device_info info;
    if (fg_state_device_info(state, dev, &info) != 0)
        return NVML_ERROR_UNKNOWN;
    unsigned slices, mem_slices;
    fg_mig_geometry(info.name, &slices, &mem_slices);
    memset(attributes, 0, sizeof *attributes);
    if (mig < 0) {
        attributes->multiprocessorCount = (unsigned)info.sm_count;
        attributes->gpuInstanceSliceCount = slices;
        attributes->computeInstanceSliceCount = slices;
        attributes->memorySizeMB = info.total_bytes >> 20;
    } else {
        const struct fg_mig_info *mi = &info.mig[mig];
        attributes->multiprocessorCount = (unsigned)mi->sm_count;
        attributes->gpuInstanceSliceCount = mi->slices;
        attributes->computeInstanceSliceCount = mi->slices;
        attributes->memorySizeMB = mi->memory_bytes >> 20;
    }
    return NVML_SUCCESS;
}

/* ---- memory and utilization ------------------------------------------------------- */

static nvmlReturn_t memory_info(nvmlDevice_t device, unsigned long long *total,
                                unsigned long long *used)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    if (dev < 0)
        return ret;
    if (mig >= 0) {
        /* What the processes running inside the instance hold. */
        struct fg_device_info info;
        struct fg_proc_usage procs[FG_MAX_PROCS];
        unsigned n = FG_MAX_PROCS;
        if (fg_state_device_info(state, dev, &info) != 0 ||
            fg_procs_on_device(state, dev, UTIL_WINDOW_NS, procs, &n) != 0)
            return NVML_ERROR_UNKNOWN;
        *total = info.mig[mig].memory_bytes;
        *used = 0;
        for (unsigned i = 0; i < n; i++)
            if (procs[i].gi_id == info.mig[mig].gi_id)
                *used += procs[i].used_bytes;
        if (*used > *total)
            *used = *total;
        return NVML_SUCCESS;
    }
    uint64_t u = 0, t = 0;
    int rc = fg_mem_info(state, dev, &u, &t);
    if (rc != 0)
        return from_errno(rc);
    *total = t;
    *used = u;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    if (memory == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    unsigned long long total = 0, used = 0;
    nvmlReturn_t ret = memory_info(device, &total, &used);
    if (ret != NVML_SUCCESS)
        return ret;
    memory->total = total;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    if (memory == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    unsigned long long total = 0, used = 0;
    nvmlReturn_t ret = memory_info(device, &total, &used);
    if (ret != NVML_SUCCESS)
        return ret;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = total;
    memory->reserved = 0;
    memory->used = used;
    memory->free = total - used;
    return NVML_SUCCESS;
}

/* Whether GPU dev is in MIG mode. The driver measures no utilization there, of the GPU
 * or of its processes ("not currently supported on MIG-enabled GPUs", NVML's reference),
 * though fakegpu's instances keep running on their own timelines. */
static bool in_mig_mode(int dev)
{
    struct fg_device_info info;
    return fg_state_device_info(state, dev, &info) == 0 && info.mig_enabled;
}

NVML_API nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device,
                                                    nvmlUtilization_t *utilization)
{
    nvmlReturn_t ret;
    int dev = device_index(device, &ret);
    if (dev < 0)
        return ret;
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (in_mig_mode(dev))
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned pct = 0;
    int rc = fg_util_device(state, dev, UTIL_WINDOW_NS, &pct);
    if (rc != 0)
        return from_errno(rc);
    utilization->gpu = pct;
    utilization->memory = 0; /* the simulation has no memory traffic */
    return NVML_SUCCESS;
}

/* ---- processes -------------------------------------------------------------------- */

/* The processes on a device, with busy time over window_ns. */
/* Through a MIG device's handle, only the processes inside that instance (as the driver
 * answers an unprivileged caller on a MIG device). */
static nvmlReturn_t list_procs(nvmlDevice_t device, uint64_t window_ns, struct fg_proc_usage *procs,
                               unsigned *count)
{
    nvmlReturn_t ret;
    int mig;
    int dev = resolve(device, &mig, &ret);
    if (dev < 0)
        return ret;
    *count = FG_MAX_PROCS;
    int rc = fg_procs_on_device(state, dev, window_ns, procs, count);
    if (rc != 0)
        return from_errno(rc);
    if (mig >= 0) {
        struct fg_device_info info;
        if (fg_state_device_info(state, dev, &info) != 0)
            return NVML_ERROR_UNKNOWN;
        unsigned kept = 0;
        for (unsigned i = 0; i < *count; i++)
            if (procs[i].gi_id == info.mig[mig].gi_id)
                procs[kept++] = procs[i];
        *count = kept;
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                              unsigned int *infoCount,
                                                              nvmlProcessInfo_t *infos)
{
    struct fg_proc_usage procs[FG_MAX_PROCS];
    unsigned n;
    if (infoCount == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t ret = list_procs(device, UTIL_WINDOW_NS, procs, &n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (n > *infoCount || (n > 0 && infos == NULL)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        infos[i].pid = (unsigned)procs[i].pid;
        infos[i].usedGpuMemory = procs[i].used_bytes;
        infos[i].gpuInstanceId = procs[i].gi_id != 0 ? procs[i].gi_id : NOT_MIG;
        infos[i].computeInstanceId = procs[i].gi_id != 0 ? 0 : NOT_MIG;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                              unsigned int *infoCount,
                                                              nvmlProcessInfo_v2_t *infos)
{
    return nvmlDeviceGetComputeRunningProcesses_v3(device, infoCount, infos);
}

NVML_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device,
                                                           unsigned int *infoCount,
                                                           nvmlProcessInfo_v1_t *infos)
{
    struct fg_proc_usage procs[FG_MAX_PROCS];
    unsigned n;
    if (infoCount == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    nvmlReturn_t ret = list_procs(device, UTIL_WINDOW_NS, procs, &n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (n > *infoCount || (n > 0 && infos == NULL)) {
        *infoCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < n; i++) {
        infos[i].pid = (unsigned)procs[i].pid;
        infos[i].usedGpuMemory = procs[i].used_bytes;
    }
    *infoCount = n;
    return NVML_SUCCESS;
}

static unsigned long long realtime_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
}

NVML_API nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                      nvmlProcessUtilizationSample_t *utilization,
                                                      unsigned int *processSamplesCount,
                                                      unsigned long long lastSeenTimeStamp)
{
    if (processSamplesCount == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    /* Samples are stamped with CPU time in microseconds, like the real driver's; the
     * window is what has passed since the caller's last sample, at most the last 1 s. */
    unsigned long long now_us = realtime_us();
    if (lastSeenTimeStamp >= now_us)
        return initialised() ? NVML_ERROR_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
    uint64_t window_ns = (now_us - lastSeenTimeStamp) * 1000ULL;
    if (lastSeenTimeStamp == 0 || window_ns > UTIL_WINDOW_NS)
        window_ns = UTIL_WINDOW_NS;
    if (window_ns < FG_UTIL_BUCKET_NS)
        window_ns = FG_UTIL_BUCKET_NS;
    struct fg_proc_usage procs[FG_MAX_PROCS];
    unsigned n;
    nvmlReturn_t ret = list_procs(device, window_ns, procs, &n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (in_mig_mode((int)device->index))
        return NVML_ERROR_NOT_SUPPORTED; /* a MIG device's handle too: its GPU is */
    /* The span the buckets cover (see fg_util_sum): from the first bucket boundary at or
     * after the window's start. */
    uint64_t now = fg_now_ns(state);
    uint64_t start = now > window_ns ? now - window_ns : 0;
    uint64_t first = (start + FG_UTIL_BUCKET_NS - 1) / FG_UTIL_BUCKET_NS * FG_UTIL_BUCKET_NS;
    uint64_t span = now > first ? now - first : 1;
    unsigned active = 0;
    for (unsigned i = 0; i < n; i++) {
        if (procs[i].busy_ns > 0)
            procs[active++] = procs[i];
    }
    if (active == 0)
        return NVML_ERROR_NOT_FOUND;
    if (utilization == NULL || *processSamplesCount < active) {
        *processSamplesCount = active;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < active; i++) {
        uint64_t pct = (procs[i].busy_ns * 100 + span / 2) / span;
        memset(&utilization[i], 0, sizeof utilization[i]);
        utilization[i].pid = (unsigned)procs[i].pid;
        utilization[i].timeStamp = now_us;
        utilization[i].smUtil = (unsigned)(pct > 100 ? 100 : pct);
    }
    *processSamplesCount = active;
    return NVML_SUCCESS;
}

/* ---- events ----------------------------------------------------------------------- */

/* An event set: per GPU the registered types and the last XID sequence delivered.
 * Sets are checked against a registry (never dereferenced blindly). Waiting polls the
 * shared sequences every millisecond; the XIDs come from fakegpu-ctl xid. */
#define EVENT_SETS     64
#define EVENT_POLL_NS  1000000L
#define EVENTS_SUPPORT ((unsigned long long)nvmlEventTypeXidCriticalError)

struct nvmlEventSet_st {
    unsigned long long types[FG_MAX_DEVICES];
    uint64_t seen[FG_MAX_DEVICES];
    unsigned next; /* device to look at first: fairness between GPUs */
};

static pthread_mutex_t sets_lock = PTHREAD_MUTEX_INITIALIZER;
static struct nvmlEventSet_st *sets[EVENT_SETS];

static bool set_known(nvmlEventSet_t set)
{
    bool known = false;
    pthread_mutex_lock(&sets_lock);
    for (int i = 0; i < EVENT_SETS && !known; i++)
        known = set != NULL && sets[i] == set;
    pthread_mutex_unlock(&sets_lock);
    return known;
}

NVML_API nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlEventSet_st *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    pthread_mutex_lock(&sets_lock);
    int slot = -1;
    for (int i = 0; i < EVENT_SETS && slot < 0; i++)
        if (sets[i] == NULL)
            slot = i;
    if (slot >= 0)
        sets[slot] = s;
    pthread_mutex_unlock(&sets_lock);
    if (slot < 0) {
        free(s);
        return NVML_ERROR_MEMORY;
    }
    *set = s;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    bool found = false;
    pthread_mutex_lock(&sets_lock);
    for (int i = 0; i < EVENT_SETS && !found; i++) {
        if (set != NULL && sets[i] == set) {
            sets[i] = NULL;
            found = true;
        }
    }
    pthread_mutex_unlock(&sets_lock);
    if (!found)
        return NVML_ERROR_INVALID_ARGUMENT;
    free(set);
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                       unsigned long long *eventTypes)
{
    nvmlReturn_t ret;
    int dev = device_index(device, &ret);
    if (dev < 0)
        return ret;
    if (eventTypes == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *eventTypes = EVENTS_SUPPORT;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                               nvmlEventSet_t set)
{
    nvmlReturn_t ret;
    int dev = device_index(device, &ret);
    if (dev < 0)
        return ret;
    if (!set_known(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (eventTypes & ~EVENTS_SUPPORT)
        return NVML_ERROR_NOT_SUPPORTED;
    if (set->types[dev] == 0)
        set->seen[dev] = fg_xid_seq(state, dev); /* only events from now on */
    set->types[dev] |= eventTypes;
    return NVML_SUCCESS;
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

NVML_API nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                          unsigned int timeoutms)
{
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    if (data == NULL || !set_known(set))
        return NVML_ERROR_INVALID_ARGUMENT;
    uint64_t deadline = monotonic_ms() + timeoutms;
    unsigned count = (unsigned)fg_state_device_count(state);
    for (;;) {
        for (unsigned k = 0; k < count; k++) {
            unsigned dev = (set->next + k) % count;
            if (!(set->types[dev] & nvmlEventTypeXidCriticalError))
                continue;
            unsigned code;
            if (fg_xid_next(state, (int)dev, &set->seen[dev], &code) != 0)
                continue;
            set->next = (dev + 1) % count;
            memset(data, 0, sizeof *data);
            data->device = &handles[dev];
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = code;
            data->gpuInstanceId = NVML_INVALID_INSTANCE_ID;
            data->computeInstanceId = NVML_INVALID_INSTANCE_ID;
            return NVML_SUCCESS;
        }
        if (monotonic_ms() >= deadline)
            return NVML_ERROR_TIMEOUT;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = EVENT_POLL_NS};
        nanosleep(&ts, NULL);
    }
}

NVML_API nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                       unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

/* ---- dynamic MIG ------------------------------------------------------------------ */

/* GPU instances and their compute instances have handles of their own: one per (GPU, slot),
 * checked like device handles. The one compute instance fakegpu makes spans its GPU
 * instance, so a GPU instance has at most one and the two share a slot. */
struct nvmlGpuInstance_st {
    unsigned index;
    int slot;
};
struct nvmlComputeInstance_st {
    unsigned index;
    int slot;
};

static struct nvmlGpuInstance_st gi_handles[FG_MAX_DEVICES][FG_MAX_MIG];
static struct nvmlComputeInstance_st ci_handles[FG_MAX_DEVICES][FG_MAX_MIG];
static pthread_once_t mig_handles_once = PTHREAD_ONCE_INIT;

static void init_mig_handles(void)
{
    for (unsigned i = 0; i < FG_MAX_DEVICES; i++)
        for (int k = 0; k < FG_MAX_MIG; k++) {
            gi_handles[i][k] = (struct nvmlGpuInstance_st){.index = i, .slot = k};
            ci_handles[i][k] = (struct nvmlComputeInstance_st){.index = i, .slot = k};
        }
}

static nvmlReturn_t mig_ret(int rc)
{
    switch (rc) {
    case 0:
        return NVML_SUCCESS;
    case -ENOTSUP:
        return NVML_ERROR_NOT_SUPPORTED;
    case -ENOSPC:
        return NVML_ERROR_INSUFFICIENT_RESOURCES;
    case -EBUSY:
        return NVML_ERROR_IN_USE;
    case -EINVAL:
    case -ENOENT:
        return NVML_ERROR_INVALID_ARGUMENT;
    default:
        return NVML_ERROR_UNKNOWN;
    }
}

/* A GPU handle's device in MIG mode with a profile table: its index, record and table. */
static nvmlReturn_t mig_gpu(nvmlDevice_t device, bool args_ok, int *dev,
                            struct fg_device_info *info, const struct fg_mig_profile **table,
                            size_t *count)
{
    pthread_once(&mig_handles_once, init_mig_handles);
    nvmlReturn_t ret = device_info(device, args_ok, dev, info);
    if (ret != NVML_SUCCESS)
        return ret;
    *table = fg_mig_profiles(info, count);
    if (*table == NULL || !info->mig_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* What a GPU or compute instance handle stands for. */
struct mig_ref {
    int dev, slot;
    struct fg_device_info info;
    const struct fg_mig_info *mi; /* into info */
};

/* Resolves a GPU instance handle (ci: a compute instance handle, whose compute instance
 * must exist), then checks args_ok: NVML_SUCCESS with *r filled, or why not. */
static nvmlReturn_t mig_ref(const void *h, bool ci, bool args_ok, struct mig_ref *r)
{
    pthread_once(&mig_handles_once, init_mig_handles);
    if (!initialised())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t p = (uintptr_t)h;
    uintptr_t base = ci ? (uintptr_t)&ci_handles[0][0] : (uintptr_t)&gi_handles[0][0];
    size_t size = ci ? sizeof ci_handles : sizeof gi_handles;
    size_t elem = ci ? sizeof ci_handles[0][0] : sizeof gi_handles[0][0];
    if (p < base || p >= base + size || (p - base) % elem != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = (p - base) / elem;
    r->dev = (int)(n / FG_MAX_MIG);
    r->slot = (int)(n % FG_MAX_MIG);
    if (r->dev >= fg_state_device_count(state) || fg_state_device_info(state, r->dev, &r->info))
        return NVML_ERROR_INVALID_ARGUMENT;
    r->mi = &r->info.mig[r->slot];
    if ((unsigned)r->slot >= r->info.mig_count || r->mi->gi_id == 0 || (ci && !r->mi->has_ci))
        return NVML_ERROR_INVALID_ARGUMENT; /* destroyed: a stale handle */
    if (fg_device_lost(state, r->dev))
        return NVML_ERROR_GPU_IS_LOST;
    return args_ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

/* mig_gpu, then the entry of profile id (INVALID_ARGUMENT when the model has none such). */
static nvmlReturn_t mig_profile(nvmlDevice_t device, bool args_ok, unsigned id, int *dev,
                                struct fg_device_info *info, const struct fg_mig_profile **p)
{
    const struct fg_mig_profile *table;
    size_t count;
    nvmlReturn_t ret = mig_gpu(device, args_ok, dev, info, &table, &count);
    if (ret != NVML_SUCCESS)
        return ret;
    *p = fg_mig_profile_by_id(info, id);
    return *p == NULL ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                          nvmlGpuInstanceProfileInfo_t *info)
{
    struct fg_device_info dinfo;
    const struct fg_mig_profile *table;
    size_t count;
    int dev;
    nvmlReturn_t ret = mig_gpu(device, info != NULL, &dev, &dinfo, &table, &count);
    if (ret != NVML_SUCCESS)
        return ret;
    if (profile > NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (size_t i = 0; i < count; i++) {
        const struct fg_mig_profile *p = &table[i];
        if (p->nvml_profile != profile)
            continue;
        memset(info, 0, sizeof *info);
        info->id = p->id;
        info->sliceCount = p->slices;
        info->instanceCount = p->max_count;
        info->multiprocessorCount = p->sms;
        info->copyEngineCount = p->slices;
        info->memorySizeMB = p->memory_mib;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_SUPPORTED; /* a profile this model does not have */
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(
    nvmlDevice_t device, unsigned int profileId, nvmlGpuInstancePlacement_t *placements,
    unsigned int *count)
{
    struct fg_device_info info;
    const struct fg_mig_profile *p;
    int dev;
    nvmlReturn_t ret = mig_profile(device, count != NULL, profileId, &dev, &info, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    /* Every placement the profile has, taken or not (as the driver lists them). */
    unsigned k = 0;
    for (unsigned s = 0; s < 8; s++) {
        if (!(p->starts & (1u << s)))
            continue;
        if (placements != NULL && k < *count)
            placements[k] = (nvmlGpuInstancePlacement_t){.start = s, .size = p->size};
        k++;
    }
    ret = placements != NULL && k > *count ? NVML_ERROR_INSUFFICIENT_SIZE : NVML_SUCCESS;
    *count = k;
    return ret;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                                unsigned int profileId,
                                                                unsigned int *count)
{
    struct fg_device_info info;
    const struct fg_mig_profile *p;
    int dev;
    nvmlReturn_t ret = mig_profile(device, count != NULL, profileId, &dev, &info, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    /* Instances that fit one after another at the lowest free starts. */
    unsigned busy = 0, have = 0, mask = (1u << p->size) - 1, fit = 0;
    for (unsigned k = 0; k < info.mig_count; k++) {
        const struct fg_mig_info *mi = &info.mig[k];
        if (mi->gi_id == 0)
            continue;
        busy |= ((1u << mi->mem_slices) - 1) << mi->start;
        have += mi->profile_id == p->id;
    }
    for (unsigned s = 0; s < 8 && have + fit < p->max_count; s++) {
        if ((p->starts & (1u << s)) && s + p->size <= 8 && (busy & (mask << s)) == 0) {
            busy |= mask << s;
            fit++;
        }
    }
    *count = fit;
    return NVML_SUCCESS;
}

/* A GPU instance of profile id at start (-1: the first free one the profile allows);
 * size, when not 0, must be the profile's. */
static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned id, int start, unsigned size,
                              nvmlGpuInstance_t *gpuInstance)
{
    struct fg_device_info info;
    const struct fg_mig_profile *p;
    int dev, slot = -1;
    nvmlReturn_t ret = mig_profile(device, gpuInstance != NULL, id, &dev, &info, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    if ((size != 0 && size != p->size) || start >= 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    ret = mig_ret(fg_mig_create_gi(state, dev, id, start, &slot));
    if (ret == NVML_SUCCESS)
        *gpuInstance = &gi_handles[dev][slot];
    return ret;
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                  nvmlGpuInstance_t *gpuInstance)
{
    return create_gi(device, profileId, -1, 0, gpuInstance);
}

NVML_API nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(
    nvmlDevice_t device, unsigned int profileId, const nvmlGpuInstancePlacement_t *placement,
    nvmlGpuInstance_t *gpuInstance)
{
    if (placement == NULL)
        return initialised() ? NVML_ERROR_INVALID_ARGUMENT : NVML_ERROR_UNINITIALIZED;
    if (placement->size == 0 || placement->start >= 8)
        return NVML_ERROR_INVALID_ARGUMENT;
    return create_gi(device, profileId, (int)placement->start, placement->size, gpuInstance);
}

NVML_API nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(gpuInstance, false, true, &r);
    return ret != NVML_SUCCESS ? ret : mig_ret(fg_mig_destroy_gi(state, r.dev, r.slot));
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                                nvmlGpuInstance_t *gpuInstances,
                                                unsigned int *count)
{
    struct fg_device_info info;
    const struct fg_mig_profile *p;
    int dev;
    nvmlReturn_t ret =
        mig_profile(device, gpuInstances != NULL && count != NULL, profileId, &dev, &info, &p);
    if (ret != NVML_SUCCESS)
        return ret;
    /* The buffer holds the profile's instanceCount, as the real call requires. */
    unsigned k = 0;
    for (unsigned m = 0; m < info.mig_count && k < p->max_count; m++)
        if (info.mig[m].gi_id != 0 && info.mig[m].profile_id == profileId)
            gpuInstances[k++] = &gi_handles[dev][m];
    *count = k;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                   nvmlGpuInstance_t *gpuInstance)
{
    struct fg_device_info info;
    const struct fg_mig_profile *table;
    size_t n;
    int dev;
    nvmlReturn_t ret = mig_gpu(device, gpuInstance != NULL, &dev, &info, &table, &n);
    if (ret != NVML_SUCCESS)
        return ret;
    if (id == 0 || id > FG_MAX_MIG || id > info.mig_count || info.mig[id - 1].gi_id != id)
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = &gi_handles[dev][id - 1];
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance,
                                             nvmlGpuInstanceInfo_t *info)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(gpuInstance, false, info != NULL, &r);
    if (ret != NVML_SUCCESS)
        return ret;
    memset(info, 0, sizeof *info);
    info->device = &handles[r.dev];
    info->id = r.mi->gi_id;
    info->profileId = r.mi->profile_id;
    info->placement.start = r.mi->start;
    info->placement.size = r.mi->mem_slices;
    return NVML_SUCCESS;
}

/* The compute instance profile (the NVML_COMPUTE_INSTANCE_PROFILE_* value, also its id)
 * that spans a GPU instance of `slices` compute slices. */
static unsigned full_ci_profile(unsigned slices)
{
    switch (slices) {
    case 1:
        return NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE;
    case 2:
        return NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE;
    case 3:
        return NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE;
    case 4:
        return NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE;
    default:
        return NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE;
    }
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    struct mig_ref r;
    nvmlReturn_t ret =
        mig_ref(gpuInstance, false,
                info != NULL && profile <= NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1, &r);
    if (ret != NVML_SUCCESS)
        return ret;
    /* Only the compute instance spanning the GPU instance is simulated. */
    if (engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED ||
        profile != full_ci_profile(r.mi->slices))
        return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->id = profile;
    info->sliceCount = r.mi->slices;
    info->instanceCount = 1;
    info->multiprocessorCount = (unsigned)r.mi->sm_count;
    info->sharedCopyEngineCount = r.mi->slices;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profileId,
                                                           nvmlComputeInstance_t *computeInstance)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(gpuInstance, false, computeInstance != NULL, &r);
    if (ret != NVML_SUCCESS)
        return ret;
    if (profileId != full_ci_profile(r.mi->slices))
        return NVML_ERROR_INVALID_ARGUMENT;
    ret = mig_ret(fg_mig_create_ci(state, r.dev, r.slot));
    if (ret == NVML_SUCCESS)
        *computeInstance = &ci_handles[r.dev][r.slot];
    return ret;
}

NVML_API nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                         unsigned int profileId,
                                                         nvmlComputeInstance_t *computeInstances,
                                                         unsigned int *count)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(gpuInstance, false, computeInstances != NULL && count != NULL, &r);
    if (ret != NVML_SUCCESS)
        return ret;
    *count = 0;
    if (r.mi->has_ci && profileId == full_ci_profile(r.mi->slices)) {
        computeInstances[0] = &ci_handles[r.dev][r.slot];
        *count = 1;
    }
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(computeInstance, true, true, &r);
    return ret != NVML_SUCCESS ? ret : mig_ret(fg_mig_destroy_ci(state, r.dev, r.slot));
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                    nvmlComputeInstanceInfo_t *info)
{
    struct mig_ref r;
    nvmlReturn_t ret = mig_ref(computeInstance, true, info != NULL, &r);
    if (ret != NVML_SUCCESS)
        return ret;
    memset(info, 0, sizeof *info);
    info->device = &handles[r.dev];
    info->gpuInstance = &gi_handles[r.dev][r.slot];
    info->id = r.mi->ci_id;
    info->profileId = full_ci_profile(r.mi->slices);
    info->placement.start = 0;
    info->placement.size = r.mi->slices;
    return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                                 nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}
