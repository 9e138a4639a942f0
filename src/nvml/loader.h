/* The NVML loader: the one way vgpu's daemons and tools reach the NVIDIA driver's NVML.
 * It is dlopen'ed by SONAME, as NVIDIA's own device plugin does, so a program starts (and
 * says why it has no GPUs) on a node without a driver, and the same binary runs on
 * fakegpu when build/fakegpu is first on LD_LIBRARY_PATH. Every entry point is reached
 * through a pointer typed from our own prototype (src/abi/nvml.h), so a signature
 * mismatch is a compile error, not a crash.
 *
 * One table (loader.c) names every entry point a vgpu program calls; a program says
 * which of them it cannot do without, and the others are NULL where the library lacks
 * them (older drivers, fakegpu builds without an API). Users: src/deviceplugin/nvml.c
 * (discovery, health, MIG, XID events), src/nvml/mig.c (dynamic MIG instances),
 * src/monitor/daemon.c (processes, memory, utilization, XIDs), src/cli/top.c (memory,
 * utilization, processes). */
#ifndef VGPU_NVML_LOADER_H
#define VGPU_NVML_LOADER_H

#include <stdbool.h>

#include "abi/nvml.h"
#include "base/err.h"

#define NVML_LIB_SONAME "libnvidia-ml.so.1"

struct nvml_lib {
    void *handle;
    bool initialized; /* nvmlInit_v2 succeeded: nvml_lib_close calls nvmlShutdown */
    __typeof__(&nvmlInit_v2) init;
    __typeof__(&nvmlShutdown) shutdown;
    __typeof__(&nvmlErrorString) error_string;
    __typeof__(&nvmlDeviceGetCount_v2) get_count;
    __typeof__(&nvmlDeviceGetHandleByIndex_v2) by_index;
    __typeof__(&nvmlDeviceGetHandleByUUID) by_uuid;
    __typeof__(&nvmlDeviceGetName) get_name;
    __typeof__(&nvmlDeviceGetUUID) get_uuid;
    __typeof__(&nvmlDeviceGetPciInfo_v3) get_pci;
    __typeof__(&nvmlDeviceGetMemoryInfo) get_memory;
    __typeof__(&nvmlDeviceGetUtilizationRates) get_utilization;
    __typeof__(&nvmlDeviceGetProcessUtilization) proc_utilization;
    __typeof__(&nvmlDeviceGetCudaComputeCapability) get_cc;
    __typeof__(&nvmlDeviceGetMinorNumber) get_minor;
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v3) procs_v3;
    __typeof__(&nvmlDeviceGetComputeRunningProcesses_v2) procs_v2;
    /* The unversioned call of old drivers (its prototype is under
     * NVML_NO_UNVERSIONED_FUNC_DEFS in src/abi/nvml.h; loader.c checks the type). */
    nvmlReturn_t (*procs_v1)(nvmlDevice_t device, unsigned int *count, nvmlProcessInfo_v1_t *infos);
    /* MIG */
    __typeof__(&nvmlDeviceGetMigMode) get_mig;
    __typeof__(&nvmlDeviceGetMaxMigDeviceCount) mig_max;
    __typeof__(&nvmlDeviceGetMigDeviceHandleByIndex) mig_by_index;
    __typeof__(&nvmlDeviceGetAttributes_v2) attributes;
    __typeof__(&nvmlDeviceGetGpuInstanceId) gi_id;
    __typeof__(&nvmlDeviceGetComputeInstanceId) ci_id;
    /* dynamic MIG (src/nvml/mig.h) */
    __typeof__(&nvmlDeviceGetGpuInstanceProfileInfo) gi_profile_info;
    __typeof__(&nvmlDeviceGetGpuInstancePossiblePlacements_v2) gi_placements;
    __typeof__(&nvmlDeviceCreateGpuInstanceWithPlacement) gi_create_at;
    __typeof__(&nvmlGpuInstanceDestroy) gi_destroy;
    __typeof__(&nvmlDeviceGetGpuInstances) gi_list;
    __typeof__(&nvmlDeviceGetGpuInstanceById) gi_by_id;
    __typeof__(&nvmlGpuInstanceGetInfo) gi_info;
    __typeof__(&nvmlGpuInstanceGetComputeInstanceProfileInfo) ci_profile_info;
    __typeof__(&nvmlGpuInstanceCreateComputeInstance) ci_create;
    __typeof__(&nvmlGpuInstanceGetComputeInstances) ci_list;
    __typeof__(&nvmlComputeInstanceDestroy) ci_destroy;
    /* events */
    __typeof__(&nvmlEventSetCreate) event_create;
    __typeof__(&nvmlDeviceRegisterEvents) event_register;
    __typeof__(&nvmlEventSetWait_v2) event_wait;
    __typeof__(&nvmlEventSetFree) event_free;
    __typeof__(&nvmlDeviceGetSupportedEventTypes) event_supported;
};

/* dlopens soname (NULL: NVML_LIB_SONAME), resolves every entry point of struct nvml_lib
 * (NULL where the library lacks it), checks that each name of required (NVML's own
 * names, NULL-terminated; NULL: none) resolved, and calls nvmlInit_v2, which with
 * nvmlErrorString is always required. Every error reads "NVML: ..." and says which step
 * failed; on one, nothing stays loaded and *lib is zeroed. */
int nvml_lib_open(struct nvml_lib *lib, const char *soname, const char *const *required,
                  struct vg_err *err);
/* nvmlShutdown when initialized. The library stays mapped: driver libraries keep
 * process-wide state past nvmlShutdown (fakegpu does too), and unmapping it under that
 * state is unsafe. */
void nvml_lib_close(struct nvml_lib *lib);
/* NVML's text for rc ("unknown NVML error" without a library). */
const char *nvml_lib_error(const struct nvml_lib *lib, nvmlReturn_t rc);

#endif
