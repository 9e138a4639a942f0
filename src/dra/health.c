/* GPU health as device taints (health.h). */
#include "dra/health.h"

#include <errno.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "nvml/loader.h"

bool dra_health_observe(struct dra_gpu_health *h, const struct dra_health_obs *obs, int64_t now)
{
    struct dra_gpu_health before = *h;
    if (!obs->present && !h->lost) {
        h->lost = true;
        h->lost_since = now;
        if (h->xid != 0 || h->ecc)
            h->lost_after_xid = true;
    } else if (obs->present && h->lost) {
        h->lost = false;
        h->lost_since = 0;
        /* Lost and back after a critical XID: the GPU was reset (or fell off the bus
         * and was brought back), which is what clears an XID on real hardware. */
        if (h->lost_after_xid) {
            h->xid = 0;
            h->xid_since = 0;
            h->ecc = false;
            h->ecc_since = 0;
            h->lost_after_xid = false;
        }
    }
    if (obs->xid != 0) {
        if (h->xid != obs->xid)
            h->xid_since = now;
        h->xid = obs->xid;
        h->lost_after_xid = h->lost;
    }
    if (obs->ecc) {
        if (!h->ecc)
            h->ecc_since = now;
        h->ecc = true;
        h->lost_after_xid = h->lost;
    }
    if (obs->monitored == h->unmonitored) {
        h->unmonitored = !obs->monitored;
        h->unmonitored_since = h->unmonitored ? now : 0;
    }
    return before.lost != h->lost || before.xid != h->xid || before.ecc != h->ecc ||
           before.unmonitored != h->unmonitored;
}

bool dra_health_ok(const struct dra_gpu_health *h)
{
    return !h->lost && h->xid == 0 && !h->ecc;
}

static void taint(struct dra_taint *t, const char *driver, const char *name, const char *value,
                  const char *effect, int64_t since)
{
    vg_snprintf(t->key, sizeof t->key, "%s/%s", driver, name);
    vg_strlcpy(t->value, value, sizeof t->value);
    t->effect = effect;
    t->time_added = since;
}

unsigned dra_health_taints(const struct dra_gpu_health *h, const char *driver,
                           struct dra_taint *out)
{
    unsigned n = 0;
    if (h->xid != 0) {
        char value[24];
        vg_snprintf(value, sizeof value, "%llu", h->xid);
        taint(&out[n++], driver, DRA_TAINT_XID, value, "NoSchedule", h->xid_since);
    }
    if (h->ecc)
        taint(&out[n++], driver, DRA_TAINT_ECC, "", "NoSchedule", h->ecc_since);
    if (h->lost)
        taint(&out[n++], driver, DRA_TAINT_LOST, "", "NoSchedule", h->lost_since);
    if (h->unmonitored)
        taint(&out[n++], driver, DRA_TAINT_UNMONITORED, "", "None", h->unmonitored_since);
    return n;
}

void dra_health_message(const struct dra_gpu_health *h, char *out, size_t size)
{
    if (h->lost && h->xid)
        vg_snprintf(out, size, "GPU lost (NVML cannot read it) after XID %llu", h->xid);
    else if (h->lost)
        vg_snprintf(out, size, "GPU lost (NVML cannot read it)");
    else if (h->xid)
        vg_snprintf(out, size, "XID %llu: unhealthy until the GPU is reset", h->xid);
    else if (h->ecc)
        vg_snprintf(out, size, "double-bit ECC error: unhealthy until the GPU is reset");
    else if (h->unmonitored)
        vg_snprintf(out, size, "health not monitored");
    else if (size)
        out[0] = '\0';
}

/* ---- monitor ---------------------------------------------------------------------------- */

struct dra_health_monitor {
    struct nvml_lib lib;
    struct dp_xid_policy policy;
    nvmlEventSet_t events; /* NULL: no XID events */
    const struct dp_gpu *gpus;
    unsigned count;
    nvmlDevice_t handles[DP_MAX_GPUS];
    bool monitored[DP_MAX_GPUS];
};

/* The events watched: critical XIDs (unless XID health is disabled) and double-bit ECC
 * errors, as health.eventTypes says; each GPU registers those it supports. */
static unsigned long long event_mask(const struct dp_xid_policy *p)
{
    unsigned long long mask = 0;
    if ((p->events & DPCONFIG_EVENT_XID_CRITICAL) && !p->disabled)
        mask |= nvmlEventTypeXidCriticalError;
    if (p->events & DPCONFIG_EVENT_DOUBLE_BIT_ECC)
        mask |= nvmlEventTypeDoubleBitEccError;
    return mask;
}

static void register_events(struct dra_health_monitor *m)
{
    unsigned long long want = event_mask(&m->policy);
    if (m->policy.off || want == 0 || !m->lib.event_create || !m->lib.event_register ||
        !m->lib.event_wait)
        return;
    nvmlReturn_t rc = m->lib.event_create(&m->events);
    if (rc != NVML_SUCCESS) {
        m->events = NULL;
        vg_log(VG_LOG_WARN, "no XID health: nvmlEventSetCreate failed: GPUs tainted unmonitored",
               "err=\"%s\"", nvml_lib_error(&m->lib, rc));
        return;
    }
    for (unsigned i = 0; i < m->count; i++) {
        if (m->handles[i] == NULL)
            continue;
        unsigned long long mask = want, supported = 0;
        if (m->lib.event_supported &&
            m->lib.event_supported(m->handles[i], &supported) == NVML_SUCCESS)
            mask &= supported;
        rc =
            mask ? m->lib.event_register(m->handles[i], mask, m->events) : NVML_ERROR_NOT_SUPPORTED;
        /* Monitored: its XIDs are watched (XID health disabled leaves every GPU
         * unmonitored, registered or not). */
        m->monitored[i] = rc == NVML_SUCCESS && (mask & nvmlEventTypeXidCriticalError);
        if (rc != NVML_SUCCESS)
            vg_log(VG_LOG_WARN, "no XID events for a GPU: tainted unmonitored", "gpu=%s err=\"%s\"",
                   m->gpus[i].uuid, nvml_lib_error(&m->lib, rc));
    }
}

int dra_health_monitor_new(const char *library, const struct dp_xid_policy *policy,
                           const struct dp_gpu *gpus, unsigned count,
                           struct dra_health_monitor **out, struct vg_err *err)
{
    if (count > DP_MAX_GPUS)
        return vg_err_set(err, -E2BIG, "%u GPUs: at most %d", count, DP_MAX_GPUS);
    struct dra_health_monitor *m = xcalloc(1, sizeof *m);
    static const char *const required[] = {"nvmlDeviceGetHandleByUUID", "nvmlDeviceGetMemoryInfo",
                                           NULL};
    if (nvml_lib_open(&m->lib, library, required, err) < 0) {
        free(m);
        return err->code;
    }
    m->policy = *policy;
    m->gpus = gpus;
    m->count = count;
    for (unsigned i = 0; i < count; i++)
        if (m->lib.by_uuid(gpus[i].uuid, &m->handles[i]) != NVML_SUCCESS)
            m->handles[i] = NULL;
    register_events(m);
    *out = m;
    return 0;
}

void dra_health_monitor_free(struct dra_health_monitor *m)
{
    if (m == NULL)
        return;
    if (m->events && m->lib.event_free)
        m->lib.event_free(m->events);
    nvml_lib_close(&m->lib);
    free(m);
}

void dra_health_monitor_poll(struct dra_health_monitor *m, struct dra_health_obs *obs)
{
    for (unsigned i = 0; i < m->count; i++)
        obs[i] = (struct dra_health_obs){.present = true, .monitored = m->monitored[i]};
    if (m->policy.off) {
        for (unsigned i = 0; i < m->count; i++)
            obs[i].monitored = false;
        return;
    }
    /* Every pending event, none waited for; a burst is bounded so a poll stays short. */
    for (int n = 0; m->events != NULL && n < 1024; n++) {
        nvmlEventData_t ev;
        memset(&ev, 0, sizeof ev);
        if (m->lib.event_wait(m->events, &ev, 0) != NVML_SUCCESS)
            break; /* NVML_ERROR_TIMEOUT: nothing more */
        for (unsigned i = 0; i < m->count; i++) {
            if (m->handles[i] == NULL || m->handles[i] != ev.device)
                continue;
            if (ev.eventType == nvmlEventTypeDoubleBitEccError) {
                vg_log(VG_LOG_WARN, "double-bit ECC error: GPU tainted until it is reset", "gpu=%s",
                       m->gpus[i].uuid);
                obs[i].ecc = true;
                continue;
            }
            if (ev.eventType != nvmlEventTypeXidCriticalError)
                continue;
            bool critical = dp_xid_critical(&m->policy, ev.eventData);
            vg_log(critical ? VG_LOG_WARN : VG_LOG_INFO,
                   critical ? "XID event: GPU tainted until it is reset"
                            : "XID event ignored (health.ignoredXIDs, health.criticalXIDs or "
                              "DP_DISABLE_HEALTHCHECKS)",
                   "gpu=%s xid=%llu", m->gpus[i].uuid, ev.eventData);
            if (critical)
                obs[i].xid = ev.eventData;
        }
    }
    for (unsigned i = 0; i < m->count; i++) {
        nvmlDevice_t dev;
        nvmlMemory_t mem;
        obs[i].present = m->lib.by_uuid(m->gpus[i].uuid, &dev) == NVML_SUCCESS &&
                         m->lib.get_memory(dev, &mem) == NVML_SUCCESS;
    }
}
