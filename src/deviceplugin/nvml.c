/* GPU discovery and health through NVML, loaded by the NVML loader (src/nvml/loader.h:
 * dlopen'ed by SONAME, so the plugin starts and says why it has no GPUs on a node without
 * a driver, and every entry point typed from src/abi/nvml.h).
 *
 * Health is polled: a GPU is healthy while NVML can still find it by UUID and read its
 * memory. NVML errors such as GPU_IS_LOST or a vanished device turn it Unhealthy. NUMA
 * comes from sysfs (the PCI device's numa_node), as NVIDIA's plugin reads it.
 *
 * Events: discovery registers every GPU for the event types the policy watches
 * (health.eventTypes: XIDs, double- and single-bit ECC errors; those the GPU supports) in
 * one event set; each health poll drains it with nvmlEventSetWait(set, 0) — never
 * waiting, so the libevent loop is never blocked and no thread is needed; an event is seen
 * within one health interval. A critical XID (dp_xid_critical) or a double-bit ECC error
 * marks its GPU Unhealthy for good, as NVIDIA's plugin does: only a restart of the plugin
 * clears it. MIG devices share their GPU's health. Libraries without the event API (or
 * GPUs refusing registration) get the polled health only; health.disabled turns every
 * check off. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "nvml/loader.h"

struct dp_nvml {
    struct nvml_lib lib;
    nvmlEventSet_t events; /* NULL: no XID health */
    nvmlDevice_t handles[DP_MAX_GPUS];
    unsigned handle_count;
    bool xid_failed[DP_MAX_GPUS]; /* by NVML index: a critical XID was seen */
    struct dp_xid_policy policy;
    char mig_minors[256]; /* the MIG capability table's path */
};

static const char *nvml_error(const struct dp_nvml *nvml, nvmlReturn_t rc)
{
    return nvml_lib_error(&nvml->lib, rc);
}

void dp_nvml_library(const struct dpconfig *cfg, char *path, size_t size)
{
    static const char *const dirs[] = {
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib",
        "/lib",
    };
    const char *root = cfg->flags.plugin.container_driver_root;
    for (size_t i = 0; root && root[0] && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
        char rel[128];
        vg_snprintf(rel, sizeof(rel), "%s/%s", dirs[i], DP_NVML_SONAME);
        if (dp_root_path(root, rel, path, size) == 0 && access(path, R_OK) == 0)
            return;
    }
    vg_strlcpy(path, DP_NVML_SONAME, size);
}

int dp_nvml_open(const char *soname, struct dp_nvml **out, struct vg_err *err)
{
    static const char *const required[] = {
        "nvmlShutdown",
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetPciInfo_v3",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetCudaComputeCapability",
        "nvmlDeviceGetMinorNumber",
        NULL,
    };
    VG_AUTO_FREE struct dp_nvml *nvml = xcalloc(1, sizeof(*nvml));
    int rc = nvml_lib_open(&nvml->lib, soname ? soname : DP_NVML_SONAME, required, err);
    if (rc < 0)
        return rc;
    struct vg_err ignored;
    (void)dp_xid_policy_parse(NULL, &nvml->policy, &ignored);
    vg_strlcpy(nvml->mig_minors, DP_MIG_MINORS_PATH, sizeof(nvml->mig_minors));
    *out = vg_steal_ptr(&nvml);
    return 0;
}

void dp_nvml_free(struct dp_nvml *nvml)
{
    if (!nvml)
        return;
    if (nvml->events)
        nvml->lib.event_free(nvml->events);
    nvml_lib_close(&nvml->lib);
    free(nvml);
}

/* /sys/bus/pci/devices/<domain:bus:dev.fn>/numa_node, -1 when absent or negative. */
static int numa_from_sysfs(const nvmlPciInfo_t *pci)
{
    char path[128];
    if (vg_snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.0/numa_node",
                    pci->domain & 0xffffu, pci->bus & 0xffu, pci->device & 0xffu) < 0)
        return -1;
    VG_AUTO_FILE FILE *f = fopen(path, "re");
    char line[32] = "";
    if (!f || !fgets(line, sizeof(line), f))
        return -1;
    line[strcspn(line, "\n")] = '\0';
    int64_t v;
    struct vg_err ignored;
    if (vg_parse_i64(line, -1, 255, &v, &ignored) < 0)
        return -1;
    return (int)v;
}

void dp_nvml_set_xid_policy(struct dp_nvml *nvml, const struct dp_xid_policy *policy)
{
    nvml->policy = *policy;
}

void dp_nvml_set_mig_minors_path(struct dp_nvml *nvml, const char *path)
{
    vg_strlcpy(nvml->mig_minors, path, sizeof(nvml->mig_minors));
}

/* The capability devices guarding each MIG device, from the driver's table. Without the
 * table (no MIG, or an old driver) they stay unknown and Allocate passes none. */
static int mig_caps(struct dp_nvml *nvml, struct dp_gpu *gpus, unsigned n, struct vg_err *err)
{
    bool any = false;
    for (unsigned i = 0; i < n; i++) {
        for (unsigned k = 0; k < gpus[i].mig_count; k++)
            gpus[i].migs[k].gi_cap = gpus[i].migs[k].ci_cap = -1;
        any |= gpus[i].mig_count > 0;
    }
    if (!any)
        return 0;
    VG_AUTO_FREE char *text = NULL;
    struct vg_err rerr;
    if (vg_read_file(nvml->mig_minors, DP_MIG_MINORS_MAX_BYTES, &text, NULL, &rerr) < 0) {
        vg_log(VG_LOG_WARN, "no MIG capability table: MIG Allocate passes no nvidia-caps devices",
               "path=%s err=\"%s\"", nvml->mig_minors, rerr.msg);
        return 0;
    }
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = 0; k < gpus[i].mig_count; k++) {
            struct dp_mig *m = &gpus[i].migs[k];
            unsigned minor;
            int rc = dp_mig_cap_minor(text, gpus[i].minor, m->gi, -1, &minor, err);
            if (rc < 0 && rc != -ENOENT)
                return rc;
            if (rc == 0)
                m->gi_cap = (int)minor;
            rc = dp_mig_cap_minor(text, gpus[i].minor, m->gi, (int)m->ci, &minor, err);
            if (rc < 0 && rc != -ENOENT)
                return rc;
            if (rc == 0)
                m->ci_cap = (int)minor;
        }
    return 0;
}

#define NO_MIG UINT_MAX

/* An NVML call (step) for GPU gpu (and its MIG device mig, unless NO_MIG) failed with rc. */
static int step_failed(const struct dp_nvml *nvml, unsigned gpu, unsigned mig, const char *step,
                       nvmlReturn_t rc, struct vg_err *err)
{
    if (mig != NO_MIG)
        return vg_err_set(err, -EIO, "NVML: GPU %u MIG device %u: %s: %s", gpu, mig, step,
                          nvml_error(nvml, rc));
    return vg_err_set(err, -EIO, "NVML: GPU %u: %s: %s", gpu, step, nvml_error(nvml, rc));
}

/* The MIG devices of MIG-enabled GPU g (handle dev). */
static int discover_migs(struct dp_nvml *nvml, nvmlDevice_t dev, struct dp_gpu *g,
                         uint64_t gpu_bytes, struct vg_err *err)
{
    g->mig_count = 0;
    if (!nvml->lib.mig_max || !nvml->lib.mig_by_index || !nvml->lib.attributes ||
        !nvml->lib.gi_id || !nvml->lib.ci_id)
        return 0;
    unsigned max = 0;
    nvmlReturn_t rc = nvml->lib.mig_max(dev, &max);
    if (rc != NVML_SUCCESS)
        return step_failed(nvml, g->index, NO_MIG, "nvmlDeviceGetMaxMigDeviceCount", rc, err);
    for (unsigned k = 0; k < max; k++) {
        nvmlDevice_t mig;
        rc = nvml->lib.mig_by_index(dev, k, &mig);
        if (rc == NVML_ERROR_NOT_FOUND)
            continue; /* no MIG device at this index */
        if (rc != NVML_SUCCESS)
            return step_failed(nvml, g->index, k, "nvmlDeviceGetMigDeviceHandleByIndex", rc, err);
        if (g->mig_count == DP_MAX_MIGS)
            return vg_err_set(err, -E2BIG, "NVML: GPU %u has more than %d MIG devices", g->index,
                              DP_MAX_MIGS);
        struct dp_mig *m = &g->migs[g->mig_count];
        memset(m, 0, sizeof(*m));
        nvmlDeviceAttributes_t attr;
        if ((rc = nvml->lib.get_uuid(mig, m->uuid, sizeof(m->uuid))) != NVML_SUCCESS)
            return step_failed(nvml, g->index, k, "nvmlDeviceGetUUID", rc, err);
        if ((rc = nvml->lib.attributes(mig, &attr)) != NVML_SUCCESS)
            return step_failed(nvml, g->index, k, "nvmlDeviceGetAttributes", rc, err);
        if ((rc = nvml->lib.gi_id(mig, &m->gi)) != NVML_SUCCESS)
            return step_failed(nvml, g->index, k, "nvmlDeviceGetGpuInstanceId", rc, err);
        if ((rc = nvml->lib.ci_id(mig, &m->ci)) != NVML_SUCCESS)
            return step_failed(nvml, g->index, k, "nvmlDeviceGetComputeInstanceId", rc, err);
        m->index = k;
        m->memory_mib = attr.memorySizeMB;
        dp_mig_profile(attr.gpuInstanceSliceCount, attr.computeInstanceSliceCount,
                       attr.memorySizeMB, gpu_bytes, m->profile, sizeof(m->profile));
        g->mig_count++;
    }
    return 0;
}

/* The NVML event mask the policy watches. */
static unsigned long long policy_mask(const struct dp_xid_policy *p)
{
    unsigned long long mask = 0;
    if (p->off)
        return 0;
    if ((p->events & DPCONFIG_EVENT_XID_CRITICAL) && !p->disabled)
        mask |= nvmlEventTypeXidCriticalError;
    if (p->events & DPCONFIG_EVENT_DOUBLE_BIT_ECC)
        mask |= nvmlEventTypeDoubleBitEccError;
    if (p->events & DPCONFIG_EVENT_SINGLE_BIT_ECC)
        mask |= nvmlEventTypeSingleBitEccError;
    return mask;
}

/* One event set for every GPU's watched events (health.eventTypes, each GPU registered for
 * those it supports); any failure leaves event health off, with a warning. */
static void register_events(struct dp_nvml *nvml, unsigned count)
{
    unsigned long long want = policy_mask(&nvml->policy);
    if (nvml->events || !nvml->lib.event_create || !nvml->lib.event_register ||
        !nvml->lib.event_wait || !nvml->lib.event_free || want == 0)
        return;
    nvmlReturn_t rc = nvml->lib.event_create(&nvml->events);
    if (rc != NVML_SUCCESS) {
        nvml->events = NULL;
        vg_log(VG_LOG_WARN, "no XID health: nvmlEventSetCreate failed", "err=\"%s\"",
               nvml_error(nvml, rc));
        return;
    }
    for (unsigned i = 0; i < count; i++) {
        unsigned long long mask = want, supported = 0;
        if (nvml->lib.event_supported &&
            nvml->lib.event_supported(nvml->handles[i], &supported) == NVML_SUCCESS)
            mask &= supported;
        if (mask != want)
            vg_log(VG_LOG_INFO, "a GPU does not report every watched event type",
                   "gpu=%u watched=0x%llx supported=0x%llx", i, want, supported);
        if (mask == 0)
            continue;
        rc = nvml->lib.event_register(nvml->handles[i], mask, nvml->events);
        if (rc != NVML_SUCCESS)
            vg_log(VG_LOG_WARN, "no event health for a GPU: nvmlDeviceRegisterEvents failed",
                   "gpu=%u err=\"%s\"", i, nvml_error(nvml, rc));
    }
}

/* Takes every pending event (none waited for) and marks GPUs with a critical XID or a
 * double-bit ECC error. */
static void drain_events(struct dp_nvml *nvml)
{
    if (!nvml->events)
        return;
    unsigned long long mask = policy_mask(&nvml->policy);
    for (int n = 0; n < 1024; n++) {
        nvmlEventData_t ev;
        memset(&ev, 0, sizeof(ev));
        if (nvml->lib.event_wait(nvml->events, &ev, 0) != NVML_SUCCESS)
            return; /* NVML_ERROR_TIMEOUT: nothing more */
        if (!(ev.eventType & mask))
            continue;
        for (unsigned i = 0; i < nvml->handle_count; i++) {
            if (nvml->handles[i] != ev.device)
                continue;
            if (ev.eventType == nvmlEventTypeXidCriticalError) {
                bool critical = dp_xid_critical(&nvml->policy, ev.eventData);
                vg_log(critical ? VG_LOG_WARN : VG_LOG_INFO,
                       critical ? "XID event: GPU unhealthy until the plugin restarts"
                                : "XID event ignored (health.ignoredXIDs, health.criticalXIDs "
                                  "or DP_DISABLE_HEALTHCHECKS)",
                       "gpu=%u xid=%llu", i, ev.eventData);
                nvml->xid_failed[i] |= critical;
            } else if (ev.eventType == nvmlEventTypeDoubleBitEccError) {
                vg_log(VG_LOG_WARN, "double-bit ECC error: GPU unhealthy until the plugin restarts",
                       "gpu=%u", i);
                nvml->xid_failed[i] = true;
            } else {
                vg_log(VG_LOG_INFO, "single-bit ECC error (corrected)", "gpu=%u", i);
            }
        }
    }
}

static int nvml_discover(void *arg, struct dp_gpu *gpus, unsigned *count, struct vg_err *err)
{
    struct dp_nvml *nvml = arg;
    unsigned n = 0;
    nvmlReturn_t rc = nvml->lib.get_count(&n);
    if (rc != NVML_SUCCESS)
        return vg_err_set(err, -EIO, "NVML: nvmlDeviceGetCount: %s", nvml_error(nvml, rc));
    if (n > DP_MAX_GPUS)
        return vg_err_set(err, -E2BIG, "NVML reports %u GPUs; at most %d are supported", n,
                          DP_MAX_GPUS);
    for (unsigned i = 0; i < n; i++) {
        struct dp_gpu *g = &gpus[i];
        memset(g, 0, sizeof(*g));
        nvmlDevice_t dev;
        nvmlMemory_t mem;
        nvmlPciInfo_t pci;
        memset(&pci, 0, sizeof(pci));
        if ((rc = nvml->lib.by_index(i, &dev)) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetHandleByIndex", rc, err);
        if ((rc = nvml->lib.get_uuid(dev, g->uuid, sizeof(g->uuid))) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetUUID", rc, err);
        if ((rc = nvml->lib.get_name(dev, g->model, sizeof(g->model))) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetName", rc, err);
        if ((rc = nvml->lib.get_memory(dev, &mem)) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetMemoryInfo", rc, err);
        if ((rc = nvml->lib.get_pci(dev, &pci)) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetPciInfo", rc, err);
        if ((rc = nvml->lib.get_cc(dev, &g->cc_major, &g->cc_minor)) != NVML_SUCCESS)
            return step_failed(nvml, i, NO_MIG, "nvmlDeviceGetCudaComputeCapability", rc, err);
        if (nvml->lib.get_minor(dev, &g->minor) != NVML_SUCCESS)
            g->minor = i;
        unsigned current = 0, pending = 0;
        if (nvml->lib.get_mig && nvml->lib.get_mig(dev, &current, &pending) == NVML_SUCCESS)
            g->mig_enabled = current == NVML_DEVICE_MIG_ENABLE;
        g->index = i;
        nvml->handles[i] = dev;
        if (g->mig_enabled) {
            int mrc = discover_migs(nvml, dev, g, mem.total, err);
            if (mrc < 0)
                return mrc;
        }
        g->memory_mib = mem.total / (1024 * 1024);
        vg_strlcpy(g->pci_bus_id, pci.busId, sizeof(g->pci_bus_id));
        g->numa = numa_from_sysfs(&pci);
        g->healthy = true;
    }
    int crc = mig_caps(nvml, gpus, n, err);
    if (crc < 0)
        return crc;
    nvml->handle_count = n;
    register_events(nvml, n);
    *count = n;
    return 0;
}

static bool nvml_healthy(void *arg, const struct dp_gpu *gpu)
{
    struct dp_nvml *nvml = arg;
    nvmlDevice_t dev;
    nvmlMemory_t mem;
    if (nvml->policy.off)
        return true; /* health.disabled */
    drain_events(nvml);
    if (gpu->index < DP_MAX_GPUS && nvml->xid_failed[gpu->index])
        return false;
    if (nvml->lib.by_uuid(gpu->uuid, &dev) != NVML_SUCCESS)
        return false;
    return nvml->lib.get_memory(dev, &mem) == NVML_SUCCESS;
}

/* ---- dynamic MIG -------------------------------------------------------------------- */

static uint64_t mig_pause_ms; /* dp_nvml_set_mig_pause: tests only */

void dp_nvml_set_mig_pause(uint64_t ms)
{
    mig_pause_ms = ms;
}

/* Between the GPU instance and its compute instance: where a test kills the plugin. */
static void mig_pause(void)
{
    if (mig_pause_ms == 0)
        return;
    vg_log(VG_LOG_INFO, "GPU instance made; pausing before its compute instance (test knob)",
           "ms=%llu", (unsigned long long)mig_pause_ms);
    struct timespec ts = {.tv_sec = (time_t)(mig_pause_ms / 1000),
                          .tv_nsec = (long)(mig_pause_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static nvmlDevice_t handle_of(const struct dp_nvml *nvml, const struct dp_gpu *gpu)
{
    return gpu->index < nvml->handle_count ? nvml->handles[gpu->index] : NULL;
}

static int nvml_mig_state(void *arg, struct dp_gpu *gpu, struct vg_err *err)
{
    struct dp_nvml *nvml = arg;
    nvmlDevice_t dev = handle_of(nvml, gpu);
    if (!dev)
        return vg_err_set(err, -EINVAL, "GPU %u has no NVML handle", gpu->index);
    int rc = nvml_mig_profiles(&nvml->lib, dev, gpu->mig_profiles, &gpu->mig_profile_count,
                               &gpu->mig_slices, err);
    if (rc == 0)
        rc = nvml_mig_instances(&nvml->lib, dev, gpu->mig_profiles, gpu->mig_profile_count,
                                gpu->mig_instances, &gpu->mig_instance_count, err);
    return rc;
}

/* Whether dev runs a process outside every MIG instance (work a reconfiguration would
 * disturb). */
static bool non_mig_work(const struct dp_nvml *nvml, nvmlDevice_t dev)
{
    if (!nvml->lib.procs_v3)
        return false;
    nvmlProcessInfo_t infos[64];
    unsigned n = 64;
    if (nvml->lib.procs_v3(dev, &n, infos) != NVML_SUCCESS)
        return n > 64; /* too many to list: surely busy */
    for (unsigned i = 0; i < n; i++)
        if (infos[i].gpuInstanceId == NVML_INVALID_INSTANCE_ID)
            return true;
    return false;
}

static int nvml_mig_make(void *arg, const struct dp_gpu *gpu, const struct nvml_mig_profile *p,
                         unsigned start, struct nvml_mig_instance *out, struct vg_err *err)
{
    struct dp_nvml *nvml = arg;
    nvmlDevice_t dev = handle_of(nvml, gpu);
    if (!dev)
        return vg_err_set(err, -EINVAL, "GPU %u has no NVML handle", gpu->index);
    if (non_mig_work(nvml, dev))
        return vg_err_set(err, -EBUSY,
                          "GPU %s runs work outside MIG instances: it is not reconfigured",
                          gpu->uuid);
    return nvml_mig_create(&nvml->lib, dev, p, start, mig_pause, out, err);
}

static int nvml_mig_unmake(void *arg, const struct dp_gpu *gpu, unsigned gi, struct vg_err *err)
{
    struct dp_nvml *nvml = arg;
    nvmlDevice_t dev = handle_of(nvml, gpu);
    if (!dev)
        return vg_err_set(err, -EINVAL, "GPU %u has no NVML handle", gpu->index);
    return nvml_mig_destroy(&nvml->lib, dev, gi, err);
}

struct dp_gpu_source dp_nvml_source(struct dp_nvml *nvml)
{
    return (struct dp_gpu_source){.discover = nvml_discover,
                                  .healthy = nvml_healthy,
                                  .mig_state = nvml_mig_state,
                                  .mig_create = nvml_mig_make,
                                  .mig_destroy = nvml_mig_unmake,
                                  .arg = nvml};
}
