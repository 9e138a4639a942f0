/* The NVML loader (loader.h): one table from NVML's entry-point names to the slots of
 * struct nvml_lib. */
#define NVML_NO_UNVERSIONED_FUNC_DEFS /* the v1 process call's prototype, for its type */
#include "nvml/loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "base/auto.h"

_Static_assert(__builtin_types_compatible_p(__typeof__(&nvmlDeviceGetComputeRunningProcesses),
                                            __typeof__(((struct nvml_lib *)0)->procs_v1)),
               "procs_v1 is typed as NVML's unversioned nvmlDeviceGetComputeRunningProcesses");

#define ENTRY(name, slot)                                                                          \
    {                                                                                              \
#name, offsetof(struct nvml_lib, slot)                                                     \
    }

static const struct {
    const char *name;
    size_t offset;
} entries[] = {
    ENTRY(nvmlInit_v2, init),
    ENTRY(nvmlShutdown, shutdown),
    ENTRY(nvmlErrorString, error_string),
    ENTRY(nvmlDeviceGetCount_v2, get_count),
    ENTRY(nvmlDeviceGetHandleByIndex_v2, by_index),
    ENTRY(nvmlDeviceGetHandleByUUID, by_uuid),
    ENTRY(nvmlDeviceGetName, get_name),
    ENTRY(nvmlDeviceGetUUID, get_uuid),
    ENTRY(nvmlDeviceGetPciInfo_v3, get_pci),
    ENTRY(nvmlDeviceGetMemoryInfo, get_memory),
    ENTRY(nvmlDeviceGetUtilizationRates, get_utilization),
    ENTRY(nvmlDeviceGetProcessUtilization, proc_utilization),
    ENTRY(nvmlDeviceGetCudaComputeCapability, get_cc),
    ENTRY(nvmlDeviceGetMinorNumber, get_minor),
    ENTRY(nvmlDeviceGetComputeRunningProcesses_v3, procs_v3),
    ENTRY(nvmlDeviceGetComputeRunningProcesses_v2, procs_v2),
    ENTRY(nvmlDeviceGetComputeRunningProcesses, procs_v1),
    ENTRY(nvmlDeviceGetMigMode, get_mig),
    ENTRY(nvmlDeviceGetMaxMigDeviceCount, mig_max),
    ENTRY(nvmlDeviceGetMigDeviceHandleByIndex, mig_by_index),
    ENTRY(nvmlDeviceGetAttributes_v2, attributes),
    ENTRY(nvmlDeviceGetGpuInstanceId, gi_id),
    ENTRY(nvmlDeviceGetComputeInstanceId, ci_id),
    ENTRY(nvmlDeviceGetGpuInstanceProfileInfo, gi_profile_info),
    ENTRY(nvmlDeviceGetGpuInstancePossiblePlacements_v2, gi_placements),
    ENTRY(nvmlDeviceCreateGpuInstanceWithPlacement, gi_create_at),
    ENTRY(nvmlGpuInstanceDestroy, gi_destroy),
    ENTRY(nvmlDeviceGetGpuInstances, gi_list),
    ENTRY(nvmlDeviceGetGpuInstanceById, gi_by_id),
    ENTRY(nvmlGpuInstanceGetInfo, gi_info),
    ENTRY(nvmlGpuInstanceGetComputeInstanceProfileInfo, ci_profile_info),
    ENTRY(nvmlGpuInstanceCreateComputeInstance, ci_create),
    ENTRY(nvmlGpuInstanceGetComputeInstances, ci_list),
    ENTRY(nvmlComputeInstanceDestroy, ci_destroy),
    ENTRY(nvmlEventSetCreate, event_create),
    ENTRY(nvmlDeviceRegisterEvents, event_register),
    ENTRY(nvmlEventSetWait_v2, event_wait),
    ENTRY(nvmlEventSetFree, event_free),
    ENTRY(nvmlDeviceGetSupportedEventTypes, event_supported),
};

/* Unmaps a library that was loaded but not taken into use. */
static void dlclosep(void **handle)
{
    if (*handle != NULL)
        dlclose(*handle);
    *handle = NULL;
}

/* The slot of entry i, read as a data pointer (POSIX: dlsym's result converts). */
static void *slot_get(const struct nvml_lib *lib, size_t i)
{
    void *p;
    memcpy(&p, (const char *)lib + entries[i].offset, sizeof p);
    return p;
}

static int entry_index(const char *name)
{
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (strcmp(entries[i].name, name) == 0)
            return (int)i;
    return -1;
}

int nvml_lib_open(struct nvml_lib *lib, const char *soname, const char *const *required,
                  struct vg_err *err)
{
    memset(lib, 0, sizeof *lib);
    if (!soname)
        soname = NVML_LIB_SONAME;
    VG_AUTO(dlclosep) void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
        return vg_err_set(err, -ENOENT,
                          "NVML: cannot load %s: %s (is the NVIDIA driver installed?)", soname,
                          dlerror());
    struct nvml_lib l;
    memset(&l, 0, sizeof l);
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++) {
        void *sym = dlsym(handle, entries[i].name);
        memcpy((char *)&l + entries[i].offset, &sym, sizeof sym);
    }
    static const char *const always[] = {"nvmlInit_v2", "nvmlErrorString", NULL};
    const char *const *lists[] = {always, required};
    for (size_t k = 0; k < 2; k++)
        for (size_t j = 0; lists[k] && lists[k][j]; j++) {
            int i = entry_index(lists[k][j]);
            if (i < 0) /* a caller's mistake, caught by its first test */
                return vg_err_set(err, -EINVAL, "NVML: %s is not in the loader's table",
                                  lists[k][j]);
            if (!slot_get(&l, (size_t)i))
                return vg_err_set(err, -ENOSYS, "NVML: %s has no %s", soname, lists[k][j]);
        }
    nvmlReturn_t rc = l.init();
    if (rc != NVML_SUCCESS)
        return vg_err_set(err, -EIO, "NVML: nvmlInit failed: %s", l.error_string(rc));
    l.initialized = true;
    l.handle = vg_steal_ptr(&handle); /* stays mapped while in use (nvml_lib_close) */
    *lib = l;
    return 0;
}

void nvml_lib_close(struct nvml_lib *lib)
{
    if (lib->initialized && lib->shutdown)
        lib->shutdown();
    lib->initialized = false;
}

const char *nvml_lib_error(const struct nvml_lib *lib, nvmlReturn_t rc)
{
    return lib && lib->error_string ? lib->error_string(rc) : "unknown NVML error";
}
