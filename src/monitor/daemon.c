/* vgpu-monitor's daemon: flags, NVML sampling on a libevent timer, the pod watch that
 * names containers, Kubernetes Events and the metrics file (docs/monitor.md).
 *
 * NVML comes through the NVML loader (src/nvml/loader.h), as the device plugin's does. A
 * sample lists every GPU's compute processes (nvmlDeviceGetComputeRunningProcesses_v3,
 * else _v2, else the v1 call) and hands them to the judge; it runs on the loop, between
 * the API client's callbacks. */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/fs.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "kube/kube.h"
#include "monitor/http.h"
#include "monitor/metrics.h"
#include "monitor/monitor.h"
#include "monitor/scan.h"
#include "nvml/loader.h"

/* ---- NVML ------------------------------------------------------------------------ */

struct nvml {
    struct nvml_lib lib; /* stays loaded for the life of the process */
    nvmlEventSet_t events;
    char models[MON_MAX_GPUS][MON_MODEL_MAX];
    unsigned last_xid[MON_MAX_GPUS];
    uint64_t xids[MON_MAX_GPUS];
    unsigned count;
    nvmlDevice_t handles[MON_MAX_GPUS];
    char uuids[MON_MAX_GPUS][VGPU_CONFIG_UUID_MAX];
    nvmlProcessInfo_t infos[MON_MAX_PROCS];
    nvmlProcessInfo_v1_t infos_v1[MON_MAX_PROCS];
    nvmlProcessUtilizationSample_t utils[MON_MAX_PROCS];
    bool util_failing[MON_MAX_GPUS]; /* logged once while it fails */
    unsigned failing[MON_MAX_GPUS];  /* samples in a row a GPU could not be listed */
    uint64_t *error_count;           /* vgpu_monitor_errors_total{kind="nvml"} */
};

static int nvml_open(struct nvml *n, const char *soname, struct vg_err *err)
{
    static const char *const required[] = {"nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                                           "nvmlDeviceGetUUID", NULL};
    int lrc = nvml_lib_open(&n->lib, soname, required, err);
    if (lrc < 0)
        return lrc;
    if (!n->lib.procs_v3 && !n->lib.procs_v2 && !n->lib.procs_v1)
        return vg_err_set(err, -ENOSYS,
                          "NVML: %s has no nvmlDeviceGetComputeRunningProcesses (_v3, _v2 or "
                          "the unversioned call)",
                          soname);
    nvmlReturn_t rc;
    unsigned count = 0;
    if ((rc = n->lib.get_count(&count)) != NVML_SUCCESS)
        return vg_err_set(err, -EIO, "NVML: device count: %s", n->lib.error_string(rc));
    if (count > MON_MAX_GPUS)
        return vg_err_set(err, -E2BIG, "NVML: %u GPUs, at most %d", count, MON_MAX_GPUS);
    for (unsigned i = 0; i < count; i++) {
        if ((rc = n->lib.by_index(i, &n->handles[i])) != NVML_SUCCESS ||
            (rc = n->lib.get_uuid(n->handles[i], n->uuids[i], sizeof n->uuids[i])) != NVML_SUCCESS)
            return vg_err_set(err, -EIO, "NVML: GPU %u: %s", i, n->lib.error_string(rc));
    }
    n->count = count;
    /* Names and XID events for the metrics: best effort, a GPU without them is shown
     * without them. */
    for (unsigned i = 0; i < count; i++)
        if (!n->lib.get_name ||
            n->lib.get_name(n->handles[i], n->models[i], sizeof n->models[i]) != NVML_SUCCESS)
            (void)vg_strlcpy(n->models[i], "unknown", sizeof n->models[i]);
    if (n->lib.event_create && n->lib.event_register && n->lib.event_wait &&
        n->lib.event_create(&n->events) == NVML_SUCCESS) {
        for (unsigned i = 0; i < count; i++)
            if ((rc = n->lib.event_register(n->handles[i], nvmlEventTypeXidCriticalError,
                                            n->events)) != NVML_SUCCESS)
                vg_log(VG_LOG_DEBUG, "no XID events for a GPU", "gpu=%s error=\"%s\"", n->uuids[i],
                       n->lib.error_string(rc));
    } else {
        n->events = NULL;
    }
    return 0;
}

/* XID events since the last call (at most 64 at a time, without waiting). */
static void nvml_poll_xids(struct nvml *n)
{
    if (!n->events)
        return;
    for (int k = 0; k < 64; k++) {
        nvmlEventData_t ev;
        memset(&ev, 0, sizeof ev);
        if (n->lib.event_wait(n->events, &ev, 0) != NVML_SUCCESS)
            return;
        if (ev.eventType != nvmlEventTypeXidCriticalError)
            continue;
        for (unsigned g = 0; g < n->count; g++) {
            if (n->handles[g] != ev.device)
                continue;
            n->last_xid[g] = (unsigned)(ev.eventData > 999999 ? 999999 : ev.eventData);
            n->xids[g]++;
            vg_log(VG_LOG_WARN, "GPU reported an XID error", "gpu=%s xid=%u", n->uuids[g],
                   n->last_xid[g]);
        }
    }
}

static int cmp_util_pid(const void *a, const void *b)
{
    const nvmlProcessUtilizationSample_t *x = a, *y = b;
    return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* Each process's share of GPU g's SM time over the last second, into procs[0..count)
 * (all on g): NVML's samples newer than 1 s ago, averaged per process (the real driver
 * returns one per process and driver sample period, fakegpu one over the span). No
 * samples (NOT_FOUND: nothing ran) leaves 0; another failure is logged once and leaves 0,
 * which only makes the compute check lenient (docs/monitor.md). */
static void nvml_utils(struct nvml *n, unsigned g, struct mon_proc *procs, size_t count)
{
    if (!n->lib.proc_utilization || count == 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    unsigned long long now_us =
        (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000;
    unsigned c = MON_MAX_PROCS;
    nvmlReturn_t rc = n->lib.proc_utilization(n->handles[g], n->utils, &c, now_us - 1000000ULL);
    if (rc == NVML_ERROR_NOT_FOUND)
        return;
    if (rc != NVML_SUCCESS) {
        if (!n->util_failing[g])
            vg_log(VG_LOG_WARN, "cannot read a GPU's per-process utilization; compute not judged",
                   "gpu=%s error=\"%s\"", n->uuids[g], n->lib.error_string(rc));
        n->util_failing[g] = true;
        return;
    }
    n->util_failing[g] = false;
    qsort(n->utils, c, sizeof n->utils[0], cmp_util_pid);
    for (size_t i = 0; i < count; i++) {
        nvmlProcessUtilizationSample_t key = {.pid = (unsigned)procs[i].pid};
        nvmlProcessUtilizationSample_t *hit =
            bsearch(&key, n->utils, c, sizeof n->utils[0], cmp_util_pid);
        if (!hit)
            continue;
        while (hit > n->utils && hit[-1].pid == key.pid)
            hit--;
        unsigned long long sum = 0, k = 0;
        for (; hit < n->utils + c && hit->pid == key.pid; hit++, k++)
            sum += hit->smUtil < 100 ? hit->smUtil : 100;
        procs[i].util = (unsigned)(sum / k);
    }
}

/* Every GPU's compute processes into out[max]; *count set. A GPU that cannot be listed
 * this time (lost, busy) is logged when it starts failing and skipped. */
static void nvml_sample(struct nvml *n, struct mon_proc *out, size_t max, size_t *count)
{
    size_t total = 0;
    for (unsigned g = 0; g < n->count; g++) {
        unsigned c = (unsigned)(max - total);
        nvmlReturn_t rc;
        bool v1 = false;
        if (n->lib.procs_v3)
            rc = n->lib.procs_v3(n->handles[g], &c, n->infos);
        else if (n->lib.procs_v2)
            rc = n->lib.procs_v2(n->handles[g], &c, n->infos);
        else {
            rc = n->lib.procs_v1(n->handles[g], &c, n->infos_v1);
            v1 = true;
        }
        if (rc != NVML_SUCCESS) {
            if (n->failing[g]++ == 0 && n->error_count)
                (*n->error_count)++;
            if (n->failing[g] == 1)
                vg_log(VG_LOG_WARN, "cannot list a GPU's processes", "gpu=%s error=\"%s\"",
                       n->uuids[g], n->lib.error_string(rc));
            continue;
        }
        n->failing[g] = 0;
        size_t first = total;
        for (unsigned i = 0; i < c; i++) {
            unsigned long long used = v1 ? n->infos_v1[i].usedGpuMemory : n->infos[i].usedGpuMemory;
            pid_t pid = (pid_t)(v1 ? n->infos_v1[i].pid : n->infos[i].pid);
            /* NVML_VALUE_NOT_AVAILABLE: the driver cannot say (not on Linux with a
             * supported driver); nothing to judge. */
            if (used == (unsigned long long)NVML_VALUE_NOT_AVAILABLE)
                continue;
            out[total++] = (struct mon_proc){.pid = pid, .gpu = g, .used = used};
        }
        nvml_utils(n, g, out + first, total - first);
    }
    *count = total;
}

/* ---- the pod watch: container ID → names ----------------------------------------- */

struct pod_ctr {
    uint64_t hash; /* of the container ID */
    char id[MON_CID_MAX];
    char uid[MON_UID_MAX];
    char ns[MON_NAME_MAX], pod[MON_NAME_MAX], name[MON_NAME_MAX];
};

/* A pod of this node by UID, from the moment the watch shows it: its container
 * directories are named by UID, so its metrics and Events carry its namespace and name
 * before kubelet reports any container ID (the containers' own names wait for those). */
struct pod_name {
    char uid[MON_UID_MAX];
    char ns[MON_NAME_MAX], pod[MON_NAME_MAX];
};

struct daemon {
    const struct mon_args *args;
    struct event_base *base;
    struct nvml nvml;
    struct mon_monitor *mon;
    struct kube_client *kube;
    struct kube_watch *watch;
    struct pod_ctr *ctrs;
    size_t ctr_count, ctr_cap;
    struct pod_name *pods;
    size_t pod_count, pod_cap;
    struct mon_proc procs[MON_MAX_PROCS];
    uint64_t events_sent, events_failed, event_seq;
    struct event *timer;
    struct mon_scan *scan;
    struct mon_http *http;
    uint64_t errors[MON_ERR_KINDS];
    struct mon_gpu_stats gpus[MON_MAX_GPUS];
    char hostname[MON_NAME_MAX];
};

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void pods_forget(struct daemon *d, const char *uid)
{
    size_t keep = 0;
    for (size_t i = 0; i < d->ctr_count; i++)
        if (strcmp(d->ctrs[i].uid, uid) != 0)
            d->ctrs[keep++] = d->ctrs[i];
    d->ctr_count = keep;
    keep = 0;
    for (size_t i = 0; i < d->pod_count; i++)
        if (strcmp(d->pods[i].uid, uid) != 0)
            d->pods[keep++] = d->pods[i];
    d->pod_count = keep;
}

/* A name the API gave us, checked before it reaches a log line, an Event or a path. */
static bool copy_name(char *dst, const char *src)
{
    if (!src || !src[0] || strlen(src) >= MON_NAME_MAX)
        return false;
    for (const char *p = src; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '.'))
            return false;
    (void)vg_strlcpy(dst, src, MON_NAME_MAX);
    return true;
}

static void pods_put(struct daemon *d, json_t *pod)
{
    json_t *meta = json_object_get(pod, "metadata");
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    if (!uid || strlen(uid) >= MON_UID_MAX)
        return;
    pods_forget(d, uid);
    struct pod_ctr base;
    memset(&base, 0, sizeof base);
    (void)vg_strlcpy(base.uid, uid, sizeof base.uid);
    if (!copy_name(base.ns, json_string_value(json_object_get(meta, "namespace"))) ||
        !copy_name(base.pod, json_string_value(json_object_get(meta, "name"))))
        return;
    struct vg_err ignored;
    if (vg_array_grow(&d->pods, &d->pod_cap, d->pod_count + 1, sizeof *d->pods, 1u << 16, "pods",
                      &ignored) < 0)
        return;
    struct pod_name *named = &d->pods[d->pod_count++];
    (void)vg_strlcpy(named->uid, base.uid, sizeof named->uid);
    (void)vg_strlcpy(named->ns, base.ns, sizeof named->ns);
    (void)vg_strlcpy(named->pod, base.pod, sizeof named->pod);
    json_t *status = json_object_get(pod, "status");
    static const char *const lists[] = {"containerStatuses", "initContainerStatuses",
                                        "ephemeralContainerStatuses"};
    for (size_t l = 0; l < 3; l++) {
        size_t i;
        json_t *cs;
        json_array_foreach(json_object_get(status, lists[l]), i, cs)
        {
            /* "containerd://<id>", "cri-o://<id>", "docker://<id>" */
            const char *cid = json_string_value(json_object_get(cs, "containerID"));
            const char *sep = cid ? strstr(cid, "://") : NULL;
            struct pod_ctr c = base;
            if (!sep || strlen(sep + 3) != 64 ||
                !copy_name(c.name, json_string_value(json_object_get(cs, "name"))))
                continue;
            (void)vg_strlcpy(c.id, sep + 3, sizeof c.id);
            c.hash = hash_str(c.id);
            if (vg_array_grow(&d->ctrs, &d->ctr_cap, d->ctr_count + 1, sizeof *d->ctrs, 1u << 16,
                              "containers", &ignored) < 0)
                return;
            d->ctrs[d->ctr_count++] = c;
        }
    }
}

static void pods_resync(void *arg, json_t *items, const char *rv)
{
    (void)rv;
    struct daemon *d = arg;
    d->ctr_count = 0;
    d->pod_count = 0;
    size_t i;
    json_t *pod;
    json_array_foreach(items, i, pod) pods_put(d, pod);
    vg_log(VG_LOG_INFO, "pods listed", "pods=%zu containers=%zu named=%zu", json_array_size(items),
           d->ctr_count, d->pod_count);
}

static void pods_event(void *arg, enum kube_event_type type, json_t *pod)
{
    struct daemon *d = arg;
    if (type == KUBE_EVENT_DELETED) {
        const char *uid =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        if (uid)
            pods_forget(d, uid);
    } else {
        pods_put(d, pod);
    }
}

static void pods_error(void *arg, const struct vg_err *err)
{
    (void)arg;
    vg_log(VG_LOG_WARN, "pod watch", "error=\"%s\"", err->msg);
}

static const struct pod_ctr *ctr_find(const struct daemon *d, const char *pod_uid,
                                      const char *container_id)
{
    uint64_t h = hash_str(container_id);
    for (size_t i = 0; i < d->ctr_count; i++)
        if (d->ctrs[i].hash == h && strcmp(d->ctrs[i].id, container_id) == 0 &&
            strcmp(d->ctrs[i].uid, pod_uid) == 0)
            return &d->ctrs[i];
    return NULL;
}

static const struct pod_name *pod_find(const struct daemon *d, const char *pod_uid)
{
    for (size_t i = 0; i < d->pod_count; i++)
        if (strcmp(d->pods[i].uid, pod_uid) == 0)
            return &d->pods[i];
    return NULL;
}

static int resolve(void *arg, const char *pod_uid, const char *container_id,
                   char name[MON_NAME_MAX])
{
    const struct pod_ctr *c = ctr_find(arg, pod_uid, container_id);
    if (!c)
        return -ENOENT;
    (void)vg_strlcpy(name, c->name, MON_NAME_MAX);
    return 0;
}

/* ---- reports: log line, Event ---------------------------------------------------- */

static void event_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)body;
    struct daemon *d = arg;
    if (err->code == 0) {
        d->events_sent++;
        return;
    }
    d->events_failed++;
    vg_log(VG_LOG_WARN, "cannot post an Event", "status=%ld error=\"%s\"", status, err->msg);
}

static void post_event(struct daemon *d, const struct mon_report *r, const char *reason,
                       const char *message)
{
    const struct pod_name *pod = pod_find(d, r->pod_uid);
    if (!d->kube || !pod)
        return;
    struct kube_warning w = {.ns = pod->ns,
                             .pod = pod->pod,
                             .uid = pod->uid,
                             .container = r->container,
                             .reason = reason,
                             .message = message,
                             .component = "vgpu-monitor",
                             .node = d->args->node_name};
    struct vg_err err = {0};
    if (kube_post_warning(d->kube, &w, ++d->event_seq, event_done, d, &err) < 0) {
        d->events_failed++;
        vg_log(VG_LOG_WARN, "cannot post an Event", "error=\"%s\"", err.msg);
    }
}

static void condition_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)arg;
    (void)body;
    if (err->code != 0)
        vg_log(VG_LOG_WARN, "cannot set the pod's condition", "status=%ld error=\"%s\"", status,
               err->msg);
    else
        vg_log(VG_LOG_INFO, "pod condition set", "type=vgpu.io/GPUIsolationViolated");
}

/* The pod's condition vgpu.io/GPUIsolationViolated (True while its container is
 * quarantined), through pods/status with a strategic merge patch: conditions merge by
 * type, so kubelet's own and other controllers' are kept. */
static void patch_condition(struct daemon *d, const struct mon_report *r, bool on,
                            const char *message)
{
    const struct pod_name *pod = pod_find(d, r->pod_uid);
    if (!d->kube || !pod)
        return;
    char ts[32], path[2 * MON_NAME_MAX + 48];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    VG_AUTO_JSON json_t *patch =
        json_pack("{s:{s:[{s:s, s:s, s:s, s:s, s:s, s:s}]}}", "status", "conditions", "type",
                  "vgpu.io/GPUIsolationViolated", "status", on ? "True" : "False", "reason",
                  on ? "RepeatedViolations" : "QuarantineOver", "message", message,
                  "lastTransitionTime", ts, "lastProbeTime", ts);
    struct vg_err err = {0};
    if (!patch ||
        vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/status", pod->ns, pod->pod) <
            0 ||
        kube_patch(d->kube, path, "application/strategic-merge-patch+json", patch, condition_done,
                   d, &err) < 0) {
        vg_log(VG_LOG_WARN, "cannot set the pod's condition", "error=\"%s\"", err.msg);
    }
}

static void on_report(void *arg, const struct mon_report *r)
{
    struct daemon *d = arg;
    const struct pod_name *pod = pod_find(d, r->pod_uid);
    const char *ns = pod ? pod->ns : "", *pname = pod ? pod->pod : "";
    if (d->scan)
        mon_scan_note(d->scan, r->pod_uid, r->container, r->kind);
    const char *policy = d->args->policy == MON_POLICY_KILL ? "kill" : "warn";
    unsigned long long mib = 1ULL << 20;
    char message[512];
    if (strcmp(r->kind, "under") == 0) {
        vg_log(VG_LOG_INFO, "container back under its GPU memory limit",
               "pod_uid=%s namespace=%s pod=%s container=%s gpu=%s used_mib=%llu limit_mib=%llu",
               r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)", r->gpu_uuid,
               (unsigned long long)r->used / mib, (unsigned long long)r->limit / mib);
        return;
    }
    if (strcmp(r->kind, "compute_under") == 0) {
        vg_log(VG_LOG_INFO, "container back within its GPU compute share",
               "pod_uid=%s namespace=%s pod=%s container=%s gpu=%s util=%u ceiling=%u", r->pod_uid,
               ns, pname, r->container[0] ? r->container : "(whole pod)", r->gpu_uuid, r->util,
               r->ceiling);
        return;
    }
    if (strcmp(r->kind, "compute_over") == 0) {
        vg_log(VG_LOG_WARN, "container over its GPU compute share",
               "policy=%s pod_uid=%s namespace=%s pod=%s container=%s gpu=%s util=%u ceiling=%u "
               "margin=%u window_s=%llu",
               policy, r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)",
               r->gpu_uuid, r->util, r->ceiling, r->margin,
               (unsigned long long)d->args->compute_window_s);
        (void)vg_snprintf(message, sizeof message,
                          "%s%s used %u %% of GPU %s over %llu s, over its share of %u %% "
                          "(+%u points); policy %s",
                          r->container[0] ? "container " : "pod", r->container, r->util,
                          r->gpu_uuid, (unsigned long long)d->args->compute_window_s, r->ceiling,
                          r->margin, policy);
        post_event(d, r, "GPUComputeOverShare", message);
        return;
    }
    if (strcmp(r->kind, "over") == 0) {
        vg_log(VG_LOG_WARN, "container over its GPU memory limit",
               "policy=%s pod_uid=%s namespace=%s pod=%s container=%s gpu=%s used_mib=%llu "
               "limit_mib=%llu slack_mib=%llu",
               policy, r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)",
               r->gpu_uuid, (unsigned long long)r->used / mib, (unsigned long long)r->limit / mib,
               (unsigned long long)r->slack / mib);
        (void)vg_snprintf(message, sizeof message,
                          "%s%s uses %llu MiB of GPU %s, over its limit of %llu MiB "
                          "(+%llu MiB slack); policy %s",
                          r->container[0] ? "container " : "pod", r->container,
                          (unsigned long long)r->used / mib, r->gpu_uuid,
                          (unsigned long long)r->limit / mib, (unsigned long long)r->slack / mib,
                          policy);
    } else if (strcmp(r->kind, "unregistered") == 0) {
        vg_log(VG_LOG_WARN, "a GPU process not registered with libvgpu",
               "policy=%s pid=%d why=\"%s\" pod_uid=%s namespace=%s pod=%s container=%s gpu=%s "
               "holds_mib=%llu",
               policy, (int)r->pid, r->why, r->pod_uid, ns, pname,
               r->container[0] ? r->container : "(whole pod)", r->gpu_uuid,
               (unsigned long long)r->freed / mib);
        (void)vg_snprintf(message, sizeof message,
                          "pid %d uses GPU %s (%llu MiB) without being registered with libvgpu "
                          "(%s); policy %s",
                          (int)r->pid, r->gpu_uuid, (unsigned long long)r->freed / mib, r->why,
                          policy);
        post_event(d, r, "GPUBypassDetected", message);
        return;
    } else if (strcmp(r->kind, "quarantine") == 0 || strcmp(r->kind, "release") == 0) {
        bool on = r->kind[0] == 'q';
        if (on) {
            vg_log(VG_LOG_WARN, "container quarantined for repeated GPU isolation violations",
                   "policy=%s pod_uid=%s namespace=%s pod=%s container=%s violations=%u "
                   "quarantine_s=%llu",
                   policy, r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)",
                   r->violations, (unsigned long long)r->until_ms / 1000);
            (void)vg_snprintf(message, sizeof message,
                              "%s%s quarantined for %llu s after %u GPU isolation violations in "
                              "%llu s; %s",
                              r->container[0] ? "container " : "pod", r->container,
                              (unsigned long long)r->until_ms / 1000, r->violations,
                              (unsigned long long)d->args->quarantine_window_s,
                              d->args->policy == MON_POLICY_KILL
                                  ? "its processes are killed, and any that uses a GPU again"
                                  : "policy warn: nothing is killed");
            post_event(d, r, "GPUIsolationViolated", message);
        } else {
            vg_log(VG_LOG_INFO, "container quarantine over",
                   "pod_uid=%s namespace=%s pod=%s container=%s", r->pod_uid, ns, pname,
                   r->container[0] ? r->container : "(whole pod)");
            (void)vg_snprintf(message, sizeof message, "%s%s: quarantine over",
                              r->container[0] ? "container " : "pod", r->container);
        }
        patch_condition(d, r, on, message);
        return;
    } else if (r->why && strcmp(r->why, "limit") != 0) {
        bool q = strcmp(r->why, "quarantine") == 0, c = strcmp(r->why, "compute") == 0;
        vg_log(VG_LOG_WARN,
               q   ? "killed a process of a quarantined container"
               : c ? "killed a process of a container over its GPU compute share"
                   : "killed a process not registered with libvgpu",
               "pid=%d pod_uid=%s namespace=%s pod=%s container=%s gpu=%s freed_mib=%llu",
               (int)r->pid, r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)",
               r->gpu_uuid[0] ? r->gpu_uuid : "-", (unsigned long long)r->freed / mib);
        (void)vg_snprintf(message, sizeof message, "killed pid %d%s%s: %s", (int)r->pid,
                          r->gpu_uuid[0] ? " on GPU " : "", r->gpu_uuid,
                          q   ? "its container is quarantined"
                          : c ? "its container is over its GPU compute share"
                              : "a GPU process not registered with libvgpu");
        post_event(d, r, q ? "GPUQuarantineKill" : c ? "GPUComputeKill" : "GPUBypassKill", message);
        return;
    } else {
        vg_log(VG_LOG_WARN, "killed a process over its container's GPU memory limit",
               "pid=%d pod_uid=%s namespace=%s pod=%s container=%s gpu=%s freed_mib=%llu "
               "left_mib=%llu limit_mib=%llu",
               (int)r->pid, r->pod_uid, ns, pname, r->container[0] ? r->container : "(whole pod)",
               r->gpu_uuid, (unsigned long long)r->freed / mib, (unsigned long long)r->used / mib,
               (unsigned long long)r->limit / mib);
        (void)vg_snprintf(message, sizeof message,
                          "killed pid %d (%llu MiB of GPU %s): %s%s over its limit of %llu MiB",
                          (int)r->pid, (unsigned long long)r->freed / mib, r->gpu_uuid,
                          r->container[0] ? "container " : "pod", r->container,
                          (unsigned long long)r->limit / mib);
    }
    post_event(d, r, strcmp(r->kind, "kill") == 0 ? "GPUMemoryLimitKill" : "GPUMemoryOverLimit",
               message);
}

/* ---- the loop -------------------------------------------------------------------- */

static void write_metrics(struct daemon *d)
{
    if (!d->args->metrics_file)
        return;
    struct mon_counters c;
    mon_get_counters(d->mon, &c);
    struct vg_err err = {0};
    struct vg_buf b;
    vg_buf_init(&b, "metrics file", 64u << 10);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    mon_metrics_own(&p, &c, d->args->policy == MON_POLICY_KILL ? "kill" : "warn", d->events_sent,
                    d->events_failed);
    if (vg_prom_done(&p) < 0 ||
        vg_write_file_atomic(d->args->metrics_file, b.data, b.len, 0644, 0, &err) < 0)
        vg_log(VG_LOG_WARN, "cannot write the metrics file", "error=\"%s\"", err.msg);
    vg_buf_free(&b);
}

/* One sample: NVML → the judge. Kept a function of its own so benchmarks can count it
 * (callgrind --toggle-collect=mon_daemon_sample). */
__attribute__((noinline)) void mon_daemon_sample(struct daemon *d);
__attribute__((noinline)) void mon_daemon_sample(struct daemon *d)
{
    size_t count = 0;
    nvml_sample(&d->nvml, d->procs, MON_MAX_PROCS, &count);
    struct vg_err err = {0};
    if (mon_judge(d->mon, d->procs, count, &err) < 0)
        vg_log(VG_LOG_WARN, "sample not judged", "error=\"%s\"", err.msg);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    mon_daemon_sample(d);
    nvml_poll_xids(&d->nvml);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    write_metrics(d);
    struct mon_counters c;
    mon_get_counters(d->mon, &c);
    vg_log(VG_LOG_DEBUG, "sample", "n=%llu processes=%llu us=%lld", (unsigned long long)c.samples,
           (unsigned long long)c.processes,
           (long long)((t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000));
    if (d->args->samples && c.samples >= d->args->samples)
        event_base_loopbreak(d->base);
}

/* ---- the metrics endpoint ------------------------------------------------------- */

static int scan_name(void *arg, const char *pod_uid, char ns[MON_NAME_MAX], char pod[MON_NAME_MAX])
{
    const struct pod_name *c = pod_find(arg, pod_uid);
    if (!c)
        return -ENOENT;
    (void)vg_strlcpy(ns, c->ns, MON_NAME_MAX);
    (void)vg_strlcpy(pod, c->pod, MON_NAME_MAX);
    return 0;
}

/* NVML's view of every GPU; a call that fails marks the GPU unhealthy and is counted. */
static void collect_gpus(struct daemon *d)
{
    struct nvml *n = &d->nvml;
    for (unsigned g = 0; g < n->count; g++) {
        struct mon_gpu_stats *s = &d->gpus[g];
        memset(s, 0, sizeof *s);
        s->index = g;
        (void)vg_strlcpy(s->uuid, n->uuids[g], sizeof s->uuid);
        (void)vg_strlcpy(s->model, n->models[g], sizeof s->model);
        s->healthy = true;
        s->last_xid = n->last_xid[g];
        s->xids = n->xids[g];
        nvmlMemory_t mem;
        nvmlReturn_t rc =
            n->lib.get_memory ? n->lib.get_memory(n->handles[g], &mem) : NVML_ERROR_NOT_SUPPORTED;
        if (rc == NVML_SUCCESS) {
            s->have_memory = true;
            s->memory_total = mem.total;
            s->memory_used = mem.used;
        } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
            s->healthy = false;
            d->errors[MON_ERR_NVML]++;
            vg_log(VG_LOG_DEBUG, "NVML: memory info", "gpu=%s error=\"%s\"", s->uuid,
                   n->lib.error_string(rc));
        }
        nvmlUtilization_t util;
        rc = n->lib.get_utilization ? n->lib.get_utilization(n->handles[g], &util)
                                    : NVML_ERROR_NOT_SUPPORTED;
        if (rc == NVML_SUCCESS) {
            s->have_util = true;
            s->util_percent = util.gpu > 100 ? 100 : util.gpu;
            s->memory_util_percent = util.memory > 100 ? 100 : util.memory;
        } else if (rc != NVML_ERROR_NOT_SUPPORTED) {
            s->healthy = false;
            d->errors[MON_ERR_NVML]++;
        }
    }
}

static int64_t clock_us(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (int64_t)t.tv_sec * 1000000 + t.tv_nsec / 1000;
}

/* One scrape: NVML, the containers directory, the text. Kept a function of its own so
 * benchmarks can count it (callgrind --toggle-collect=mon_daemon_scrape). */
__attribute__((noinline)) int mon_daemon_scrape(struct daemon *d, struct vg_buf *out,
                                                struct vg_err *err);
__attribute__((noinline)) int mon_daemon_scrape(struct daemon *d, struct vg_buf *out,
                                                struct vg_err *err)
{
    int64_t t0 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    collect_gpus(d);
    int64_t t1 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    const char *uuids[MON_MAX_GPUS];
    for (unsigned i = 0; i < d->nvml.count; i++)
        uuids[i] = d->nvml.uuids[i];
    struct vg_err serr = {0};
    if (mon_scan_run(d->scan, uuids, d->nvml.count, d->errors, &serr) < 0)
        vg_log(VG_LOG_WARN, "cannot list the containers directory", "error=\"%s\"", serr.msg);
    int64_t t2 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    size_t nrows = 0;
    const struct mon_ctr_stats *rows = mon_scan_rows(d->scan, &nrows);
    for (size_t r = 0; r < nrows; r++) {
        struct mon_gpu_stats *g = &d->gpus[rows[r].gpu];
        g->containers++;
        g->allocated += rows[r].memory_limit;
    }
    struct mon_counters c;
    mon_get_counters(d->mon, &c);
    struct mon_exposition x = {.hostname = d->hostname,
                               .gpus = d->gpus,
                               .gpu_count = d->nvml.count,
                               .ctrs = rows,
                               .ctr_count = nrows,
                               .counters = &c,
                               .policy = d->args->policy == MON_POLICY_KILL ? "kill" : "warn",
                               .events_sent = d->events_sent,
                               .events_failed = d->events_failed,
                               .errors = d->errors};
    int rc = mon_metrics_format(&x, out, err);
    vg_log(VG_LOG_DEBUG, "scrape phases",
           "rows=%zu nvml_cpu_us=%lld scan_cpu_us=%lld format_cpu_us=%lld", nrows,
           (long long)(t1 - t0), (long long)(t2 - t1),
           (long long)(clock_us(CLOCK_PROCESS_CPUTIME_ID) - t2));
    return rc;
}

static int http_metrics(void *arg, struct vg_buf *out, struct vg_err *err)
{
    int64_t w0 = clock_us(CLOCK_MONOTONIC), c0 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    int rc = mon_daemon_scrape(arg, out, err);
    int64_t w1 = clock_us(CLOCK_MONOTONIC), c1 = clock_us(CLOCK_PROCESS_CPUTIME_ID);
    vg_log(VG_LOG_DEBUG, "scrape", "bytes=%zu us=%lld cpu_us=%lld", out->len, (long long)(w1 - w0),
           (long long)(c1 - c0));
    return rc;
}

static void http_error(void *arg, const char *kind)
{
    struct daemon *d = arg;
    int k = mon_error_kind_from_name(kind);
    if (k >= 0)
        d->errors[k]++;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    vg_log(VG_LOG_INFO, "stopping", "signal=%d", (int)sig);
    event_base_loopbreak(arg);
}

VG_DEFINE_AUTO(event_base_freep, struct event_base, event_base_free)
VG_DEFINE_AUTO(event_freep, struct event, event_free)
VG_DEFINE_AUTO(kube_config_freep, struct kube_config, kube_config_free)
VG_DEFINE_AUTO(kube_client_freep, struct kube_client, kube_client_free)
VG_DEFINE_AUTO(kube_watch_freep, struct kube_watch, kube_watch_free)
VG_DEFINE_AUTO(mon_freep, struct mon_monitor, mon_free)
VG_DEFINE_AUTO(mon_scan_freep, struct mon_scan, mon_scan_free)
VG_DEFINE_AUTO(mon_http_freep, struct mon_http, mon_http_free)

int mon_daemon_run(const struct mon_args *args, struct vg_err *err)
{
    vg_log_max_level = args->log_level;
    signal(SIGPIPE, SIG_IGN);
    /* Each scrape builds a few MB of text and frees it once sent: keep that memory in the
     * heap for the next scrape instead of mapping and faulting it in again each time. */
    (void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
    (void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
    VG_AUTO_FREE struct daemon *d = vg_calloc(1, sizeof *d);
    if (!d)
        return vg_err_set(err, -ENOMEM, "out of memory");
    d->args = args;
    d->nvml.error_count = &d->errors[MON_ERR_NVML];
    if (args->node_name)
        (void)vg_strlcpy(d->hostname, args->node_name, sizeof d->hostname);
    else if (gethostname(d->hostname, sizeof d->hostname - 1) != 0)
        (void)vg_strlcpy(d->hostname, "unknown", sizeof d->hostname);
    int rc = nvml_open(&d->nvml, args->nvml_library ? args->nvml_library : NVML_LIB_SONAME, err);
    if (rc < 0)
        return rc;
    VG_AUTO(event_base_freep) struct event_base *base = event_base_new();
    if (!base)
        return vg_err_set(err, -ENOMEM, "event_base_new failed");
    d->base = base;
    VG_AUTO(kube_config_freep) struct kube_config *kcfg = NULL;
    VG_AUTO(kube_client_freep) struct kube_client *kube = NULL;
    if (args->kubeconfig)
        rc = kube_config_load_file(args->kubeconfig, NULL, &kcfg, err);
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_in_cluster(NULL, &kcfg, err);
    if (rc < 0 || (kcfg && kube_client_new(base, kcfg, NULL, &kube, err) < 0))
        return rc < 0 ? rc : err->code;
    if (kube && !args->node_name)
        return vg_err_set(err, -EINVAL, "an API server but no --node-name (or NODE_NAME)");
    d->kube = kube;
    VG_AUTO(kube_watch_freep) struct kube_watch *watch = NULL;
    if (kube) {
        char selector[MON_NAME_MAX + 16];
        (void)vg_snprintf(selector, sizeof selector, "spec.nodeName=%s", args->node_name);
        struct kube_watch_options wo = {
            .path = "/api/v1/pods", .field_selector = selector, .seed = (uint64_t)getpid()};
        struct kube_watch_callbacks cb = {
            .resync = pods_resync, .event = pods_event, .error = pods_error};
        if ((rc = kube_watch_new(kube, &wo, &cb, d, &watch, err)) < 0)
            return rc;
    } else {
        vg_log(VG_LOG_WARN, "no API server: pods are judged as a whole, no Events",
               "hint=\"--kubeconfig or in-cluster\"");
    }
    const char *uuids[MON_MAX_GPUS];
    for (unsigned i = 0; i < d->nvml.count; i++)
        uuids[i] = d->nvml.uuids[i];
    struct mon_options mo = {.policy = args->policy,
                             .region_dir = args->region_dir,
                             .proc_root = args->proc_root,
                             .cgroup_root = args->cgroup_root,
                             .resolve = kube ? resolve : NULL,
                             .resolve_arg = d,
                             .report = on_report,
                             .report_arg = d,
                             .check_registration = args->check_registration,
                             .quarantine_after = args->quarantine_after,
                             .quarantine_window_ms = args->quarantine_window_s * 1000,
                             .quarantine_ms = args->quarantine_s * 1000,
                             .check_compute = args->check_compute,
                             .compute_window_ms = args->compute_window_s * 1000,
                             .compute_margin = (unsigned)args->compute_margin};
    VG_AUTO(mon_freep) struct mon_monitor *mon = NULL;
    if ((rc = mon_new(&mo, uuids, d->nvml.count, &mon, err)) < 0)
        return rc;
    d->mon = mon;
    VG_AUTO(mon_scan_freep) struct mon_scan *scan = NULL;
    if ((rc = mon_scan_new(args->region_dir, scan_name, d, &scan, err)) < 0)
        return rc;
    d->scan = scan;
    VG_AUTO(mon_http_freep) struct mon_http *http = NULL;
    if (args->listen) {
        struct mon_http_handler h = {.metrics = http_metrics, .error = http_error, .arg = d};
        if ((rc = mon_http_new(base, args->listen, 10000, &h, &http, err)) < 0)
            return rc;
        d->http = http;
        vg_log(VG_LOG_INFO, "serving metrics", "listen=%s port=%u", args->listen,
               mon_http_port(http));
    }
    struct timeval tv = {.tv_sec = (time_t)(args->interval_ms / 1000),
                         .tv_usec = (suseconds_t)(args->interval_ms % 1000) * 1000};
    VG_AUTO(event_freep) struct event *timer = event_new(base, -1, EV_PERSIST, on_timer, d);
    VG_AUTO(event_freep) struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    VG_AUTO(event_freep) struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    if (!timer || !sigterm || !sigint)
        return vg_err_set(err, -ENOMEM, "cannot create the loop's events");
    event_add(timer, &tv);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    vg_log(VG_LOG_INFO, "watching",
           "gpus=%u policy=%s interval_ms=%llu registration_check=%s quarantine_after=%u "
           "quarantine_window_s=%llu quarantine_s=%llu compute_check=%s compute_window_s=%llu "
           "compute_margin=%llu region_dir=%s node=%s api=%s",
           d->nvml.count, args->policy == MON_POLICY_KILL ? "kill" : "warn",
           (unsigned long long)args->interval_ms, args->check_registration ? "on" : "off",
           args->quarantine_after, (unsigned long long)args->quarantine_window_s,
           (unsigned long long)args->quarantine_s, args->check_compute ? "on" : "off",
           (unsigned long long)args->compute_window_s, (unsigned long long)args->compute_margin,
           args->region_dir, args->node_name ? args->node_name : "", kube ? "yes" : "no");
    on_timer(-1, 0, d); /* the first sample at once */
    if (args->samples != 1)
        event_base_dispatch(base);
    free(d->ctrs);
    free(d->pods);
    return 0;
}
