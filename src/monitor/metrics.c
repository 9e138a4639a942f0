/* vgpu-monitor's Prometheus exposition (metrics.h). Label sets are built once per GPU and
 * per row, then every family is one pass over them: the scrape of a node with 512
 * containers stays a few hundred microseconds of formatting. */
#include "monitor/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "base/prom.h"
#include "base/str.h"

const char *const mon_error_kind_names[MON_ERR_KINDS] = {
    [MON_ERR_REGION_MISSING] = "region_missing",
    [MON_ERR_REGION_TRUNCATED] = "region_truncated",
    [MON_ERR_REGION_CORRUPT] = "region_corrupt",
    [MON_ERR_REGION_UNREADABLE] = "region_unreadable",
    [MON_ERR_LIMITS] = "limits",
    [MON_ERR_NVML] = "nvml",
    [MON_ERR_HTTP_BAD_REQUEST] = "http_bad_request",
    [MON_ERR_HTTP_NOT_FOUND] = "http_not_found",
    [MON_ERR_HTTP_METHOD] = "http_method",
    [MON_ERR_HTTP_TOO_LARGE] = "http_too_large",
    [MON_ERR_HTTP_TIMEOUT] = "http_timeout",
    [MON_ERR_HTTP_OVERLOAD] = "http_overload",
};

int mon_error_kind_from_name(const char *name)
{
    for (int i = 0; i < MON_ERR_KINDS; i++)
        if (strcmp(mon_error_kind_names[i], name) == 0)
            return i;
    return -1;
}

/* A label set: at p, or (p NULL while building) at off in the label buffer. */
struct span {
    const char *p;
    size_t off, len;
};

/* The label sets (labels without braces), in one buffer. */
struct sets {
    struct vg_buf b;
    struct span *gpu_hami, *gpu_hami_nonode, *gpu_vgpu, *gpu_info, *row_hami, *row_vgpu, *ctr_vgpu;
};

static struct span build(struct vg_prom *o, struct sets *s,
                         void (*fn)(struct vg_prom *, const void *, const void *), const void *a,
                         const void *b)
{
    struct span sp = {.off = s->b.len};
    struct vg_prom lo;
    vg_prom_init(&lo, &s->b, o->err);
    vg_prom_set_begin(&lo);
    fn(&lo, a, b);
    int rc = vg_prom_done(&lo);
    if (rc < 0 && o->rc == 0)
        o->rc = rc;
    sp.len = s->b.len - sp.off;
    return sp;
}

static void lbl_gpu_hami(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    char type[MON_MODEL_MAX + 8];
    (void)vg_snprintf(type, sizeof type, "NVIDIA-%s", g->model);
    vg_prom_label(o, "node", x->hostname);
    vg_prom_label_u64(o, "device_index", g->index);
    vg_prom_label(o, "device_uuid", g->uuid);
    vg_prom_label(o, "device_type", type);
}

/* hami_host_gpu_memory_controller_utilization_ratio: HAMi gives it no node label. */
static void lbl_gpu_hami_nonode(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    (void)b;
    char type[MON_MODEL_MAX + 8];
    (void)vg_snprintf(type, sizeof type, "NVIDIA-%s", g->model);
    vg_prom_label_u64(o, "device_index", g->index);
    vg_prom_label(o, "device_uuid", g->uuid);
    vg_prom_label(o, "device_type", type);
}

static void lbl_gpu_vgpu(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    vg_prom_label(o, "Hostname", x->hostname);
    vg_prom_label_u64(o, "gpu", g->index);
    vg_prom_label(o, "UUID", g->uuid);
}

/* vgpu_gpu_info: the GPU labels and its model (model_name: dcgm-exporter's modelName is
 * camelCase, which promtool's lint refuses; join on UUID). */
static void lbl_gpu_info(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    vg_prom_label(o, "Hostname", x->hostname);
    vg_prom_label_u64(o, "gpu", g->index);
    vg_prom_label(o, "UUID", g->uuid);
    vg_prom_label(o, "model_name", g->model);
}

static void lbl_row_hami(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_ctr_stats *c = a;
    const struct mon_exposition *x = b;
    vg_prom_label(o, "namespace", c->ns);
    vg_prom_label(o, "pod", c->pod);
    vg_prom_label(o, "container", c->container);
    vg_prom_label_u64(o, "vdevice_index", c->vdevice);
    vg_prom_label(o, "device_uuid", x->gpus[c->gpu].uuid);
}

static void ctr_labels(struct vg_prom *o, const struct mon_ctr_stats *c,
                       const struct mon_exposition *x)
{
    vg_prom_label(o, "Hostname", x->hostname);
    vg_prom_label(o, "namespace", c->ns);
    vg_prom_label(o, "pod", c->pod);
    vg_prom_label(o, "container", c->container);
    vg_prom_label(o, "pod_uid", c->pod_uid);
}

static void lbl_row_vgpu(struct vg_prom *o, const void *a, const void *b)
{
    const struct mon_ctr_stats *c = a;
    const struct mon_exposition *x = b;
    ctr_labels(o, c, x);
    vg_prom_label_u64(o, "gpu", x->gpus[c->gpu].index);
    vg_prom_label(o, "UUID", x->gpus[c->gpu].uuid);
}

static void lbl_ctr_vgpu(struct vg_prom *o, const void *a, const void *b)
{
    ctr_labels(o, a, b);
}

enum col {
    /* per GPU */
    G_HAMI_USED,
    G_HAMI_UTIL,
    G_HAMI_MEMUTIL,
    G_INFO,
    G_TOTAL,
    G_USED,
    G_ALLOC,
    G_UTIL,
    G_CTRS,
    G_HEALTHY,
    G_XID,
    G_XIDS,
    /* per row */
    R_HAMI_USED,
    R_HAMI_LIMIT,
    R_HAMI_DEV,
    R_HAMI_UTIL,
    R_LIMIT,
    R_USED,
    R_SHARE_LIMIT,
    R_SHARE,
    R_THROTTLED,
    R_BUSY,
    R_PRIORITY,
    R_HELD,
    /* per container */
    C_REFUSED,
    C_CLOSED,
    C_VIOLATIONS,
    C_KILLS,
};

struct fam {
    enum col col;
    const char *name, *type, *help;
};

static const struct fam fams[] = {
    {G_HAMI_USED, "hami_host_gpu_memory_used_bytes", "gauge",
     "GPU device memory usage in bytes (NVML; HAMi's name and labels)."},
    {G_HAMI_UTIL, "hami_host_gpu_utilization_ratio", "gauge",
     "GPU core utilization, 0-100 as HAMi exports it (NVML)."},
    {G_HAMI_MEMUTIL, "hami_host_gpu_memory_controller_utilization_ratio", "gauge",
     "GPU memory controller utilization, 0-100 as HAMi exports it (NVML)."},
    {G_INFO, "vgpu_gpu_info", "gauge", "A GPU of the node (value 1)."},
    {G_TOTAL, "vgpu_gpu_memory_total_bytes", "gauge", "GPU memory in bytes (NVML)."},
    {G_USED, "vgpu_gpu_memory_used_bytes", "gauge", "GPU memory in use in bytes (NVML)."},
    {G_ALLOC, "vgpu_gpu_memory_allocated_bytes", "gauge",
     "GPU memory handed out by vgpu: the sum of the memory limits of the containers given "
     "the GPU."},
    {G_UTIL, "vgpu_gpu_utilization_ratio", "gauge",
     "Fraction of the last sample period the GPU was busy, 0-1 (NVML)."},
    {G_CTRS, "vgpu_gpu_containers", "gauge", "Containers given a share of the GPU."},
    {G_HEALTHY, "vgpu_gpu_healthy", "gauge",
     "1 when NVML answers for the GPU, 0 when it does not (lost, fallen off the bus)."},
    {G_XID, "vgpu_gpu_last_xid", "gauge", "The last XID error the GPU reported (0: none seen)."},
    {G_XIDS, "vgpu_gpu_xid_errors_total", "counter", "XID errors the GPU reported."},
    {R_HAMI_USED, "hami_vgpu_memory_used_bytes", "gauge",
     "vGPU device memory usage in bytes (the container's region; HAMi's name and labels)."},
    {R_HAMI_LIMIT, "hami_vgpu_memory_limit_bytes", "gauge",
     "vGPU device memory limit in bytes (the container's limits file)."},
    {R_HAMI_DEV, "hami_container_device_memory_bytes", "gauge",
     "Container device memory usage in bytes (the container's region)."},
    {R_HAMI_UTIL, "hami_container_device_utilization_ratio", "gauge",
     "Container's achieved compute share of the GPU, 0-100 as HAMi exports it."},
    {R_LIMIT, "vgpu_container_memory_limit_bytes", "gauge",
     "The container's GPU memory limit in bytes (its read-only limits file)."},
    {R_USED, "vgpu_container_memory_used_bytes", "gauge",
     "GPU memory the container's processes hold in bytes, as its region reports it."},
    {R_SHARE_LIMIT, "vgpu_container_compute_share_limit_ratio", "gauge",
     "The container's compute share limit, 0-1 (its limits file)."},
    {R_SHARE, "vgpu_container_compute_share_ratio", "gauge",
     "The container's achieved compute share, 0-1, about a one-second average (its region)."},
    {R_THROTTLED, "vgpu_container_throttled_seconds_total", "counter",
     "Time the container's kernel launches waited for its compute share (its region)."},
    {R_BUSY, "vgpu_container_gpu_busy_seconds_total", "counter",
     "GPU time the container's kernels used (its region)."},
    {R_PRIORITY, "vgpu_container_priority", "gauge",
     "The container's task priority, 0 high or 1 low (its limits file; absent: none named)."},
    {R_HELD, "vgpu_container_priority_held_seconds_total", "counter",
     "Time the container's kernel launches waited behind a high-priority container (its "
     "region)."},
    {C_REFUSED, "vgpu_container_allocations_refused_total", "counter",
     "GPU memory allocations refused because they would pass the container's limit."},
    {C_CLOSED, "vgpu_container_allocations_failed_closed_total", "counter",
     "GPU memory allocations refused because enforcement could not work (fail-closed)."},
    {C_VIOLATIONS, "vgpu_container_watchdog_violations_total", "counter",
     "Episodes of the container over its GPU memory limit seen by the watchdog."},
    {C_KILLS, "vgpu_container_watchdog_kills_total", "counter",
     "Processes of the container the watchdog killed."},
};

/* A sample's value: v / scale (scale 1: an integer), digits the scale's exponent. */
struct num {
    uint64_t v, scale;
    unsigned digits;
};

static struct num u(uint64_t v)
{
    return (struct num){v, 1, 0};
}

static struct num frac(uint64_t v, uint64_t scale, unsigned digits)
{
    return (struct num){v, scale, digits};
}

/* The GPU's value for the column; false when it has none (no sample then). */
static bool gpu_value(enum col col, const struct mon_gpu_stats *g, struct num *n)
{
    switch (col) {
    case G_HAMI_USED:
    case G_USED:
        *n = u(g->memory_used);
        return g->have_memory;
    case G_TOTAL:
        *n = u(g->memory_total);
        return g->have_memory;
    case G_HAMI_UTIL:
        *n = u(g->util_percent);
        return g->have_util;
    case G_HAMI_MEMUTIL:
        *n = u(g->memory_util_percent);
        return g->have_util;
    case G_UTIL:
        *n = frac(g->util_percent > 100 ? 100 : g->util_percent, 100, 2);
        return g->have_util;
    case G_INFO:
        *n = u(1);
        return true;
    case G_ALLOC:
        *n = u(g->allocated);
        return true;
    case G_CTRS:
        *n = u(g->containers);
        return true;
    case G_HEALTHY:
        *n = u(g->healthy ? 1 : 0);
        return true;
    case G_XID:
        *n = u(g->last_xid);
        return true;
    case G_XIDS:
        *n = u(g->xids);
        return true;
    default:
        return false;
    }
}

static bool row_value(enum col col, const struct mon_ctr_stats *c, struct num *n)
{
    switch (col) {
    case R_HAMI_USED:
    case R_HAMI_DEV:
    case R_USED:
        *n = u(c->used);
        return c->region;
    case R_HAMI_LIMIT:
    case R_LIMIT:
        *n = u(c->memory_limit);
        return c->memory_limit != 0;
    case R_HAMI_UTIL:
        *n = frac(c->achieved_ppm, 10000, 4);
        return c->region;
    case R_SHARE_LIMIT:
        *n = frac(c->share_percent, 100, 2);
        return c->share_percent != 0;
    case R_SHARE:
        *n = frac(c->achieved_ppm, 1000000, 6);
        return c->region;
    case R_THROTTLED:
        *n = frac(c->waited_ns, 1000000000, 9);
        return c->region;
    case R_BUSY:
        *n = frac(c->busy_ns, 1000000000, 9);
        return c->region;
    case R_PRIORITY:
        *n = u(c->priority > 0 ? 1 : 0);
        return c->priority >= 0;
    case R_HELD:
        *n = frac(c->held_ns, 1000000000, 9);
        return c->region;
    case C_REFUSED:
        *n = u(c->refused);
        return c->region;
    case C_CLOSED:
        *n = u(c->closed);
        return c->region;
    case C_VIOLATIONS:
        *n = u(c->violations);
        return true;
    case C_KILLS:
        *n = u(c->kills);
        return true;
    default:
        return false;
    }
}

void mon_metrics_own(struct vg_prom *p, const struct mon_counters *c, const char *policy,
                     uint64_t events_sent, uint64_t events_failed)
{
    /* The watchdog's own counters: one family each, in this order. */
    const struct {
        const char *name, *type, *help;
        uint64_t value;
        bool by_policy; /* labelled with the policy that answered it */
    } own[] = {
        {"vgpu_monitor_samples_total", "counter", "Samples of NVML's per-process GPU memory taken.",
         c->samples, false},
        {"vgpu_monitor_violations_total", "counter",
         "Episodes of a container over its GPU memory limit plus slack.", c->violations, true},
        {"vgpu_monitor_kills_total", "counter", "Processes killed for a container over its limit.",
         c->kills, false},
        {"vgpu_monitor_kill_failures_total", "counter", "Kills that failed.", c->kill_failures,
         false},
        {"vgpu_monitor_processes", "gauge", "GPU processes in the last sample.", c->processes,
         false},
        {"vgpu_monitor_unattributed_processes", "gauge",
         "GPU processes outside every pod in the last sample.", c->unattributed, false},
        {"vgpu_monitor_unlimited_processes", "gauge",
         "Pod GPU processes without a limits file in the last sample.", c->unlimited, false},
        {"vgpu_monitor_unregistered_total", "counter",
         "GPU processes of limited containers seen not registered with libvgpu.", c->unregistered,
         false},
        {"vgpu_monitor_quarantines_total", "counter",
         "Containers quarantined for repeated violations.", c->quarantines, false},
        {"vgpu_monitor_quarantined_containers", "gauge", "Containers in quarantine.",
         c->quarantined, false},
        {"vgpu_monitor_compute_violations_total", "counter",
         "Episodes of a container over its GPU compute share plus the margin.",
         c->compute_violations, false},
        {"vgpu_monitor_events_total", "counter", "Kubernetes Events posted.", events_sent, false},
        {"vgpu_monitor_event_failures_total", "counter", "Events that could not be posted.",
         events_failed, false},
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        vg_prom_family(p, own[i].name, own[i].type, own[i].help);
        vg_prom_sample(p, own[i].name);
        if (own[i].by_policy)
            vg_prom_label(p, "policy", policy);
        vg_prom_u64(p, own[i].value);
    }
}

static void monitor_counters(struct vg_prom *p, const struct mon_exposition *x)
{
    mon_metrics_own(p, x->counters, x->policy, x->events_sent, x->events_failed);
    vg_prom_family(p, "vgpu_monitor_errors_total", "counter",
                   "Errors the monitor logged and survived, by kind.");
    for (int k = 0; k < MON_ERR_KINDS; k++) {
        vg_prom_sample(p, "vgpu_monitor_errors_total");
        vg_prom_label(p, "kind", mon_error_kind_names[k]);
        vg_prom_u64(p, x->errors ? x->errors[k] : 0);
    }
}

int mon_metrics_format(const struct mon_exposition *x, struct vg_buf *b, struct vg_err *err)
{
    struct vg_prom o;
    vg_prom_init(&o, b, err);
    struct sets s;
    memset(&s, 0, sizeof s);
    vg_buf_init(&s.b, "metric labels", 64u << 20);
    size_t ng = x->gpu_count, nr = x->ctr_count;
    /* One allocation for the label sets (a few hundred bytes per row), and the output
     * grown once to about what it will hold (the families times the rows); a hint only,
     * so a ceiling it would pass is left to the writes themselves to report. */
    struct vg_err ignored = {0};
    (void)vg_buf_reserve(&s.b, (ng + nr) * 700, &ignored);
    (void)vg_buf_reserve(b, (ng * 12 + nr * 20) * 220 + 8192, &ignored);
    s.gpu_hami = vg_calloc(ng + 1, sizeof *s.gpu_hami);
    s.gpu_vgpu = vg_calloc(ng + 1, sizeof *s.gpu_vgpu);
    s.gpu_info = vg_calloc(ng + 1, sizeof *s.gpu_info);
    s.gpu_hami_nonode = vg_calloc(ng + 1, sizeof *s.gpu_hami_nonode);
    s.row_hami = vg_calloc(nr + 1, sizeof *s.row_hami);
    s.row_vgpu = vg_calloc(nr + 1, sizeof *s.row_vgpu);
    s.ctr_vgpu = vg_calloc(nr + 1, sizeof *s.ctr_vgpu);
    if (!s.gpu_hami || !s.gpu_hami_nonode || !s.gpu_vgpu || !s.gpu_info || !s.row_hami ||
        !s.row_vgpu || !s.ctr_vgpu)
        o.rc = vg_err_set(err, -ENOMEM, "out of memory formatting the metrics");
    for (size_t g = 0; g < ng && o.rc == 0; g++) {
        s.gpu_hami[g] = build(&o, &s, lbl_gpu_hami, &x->gpus[g], x);
        s.gpu_vgpu[g] = build(&o, &s, lbl_gpu_vgpu, &x->gpus[g], x);
        s.gpu_info[g] = build(&o, &s, lbl_gpu_info, &x->gpus[g], x);
        s.gpu_hami_nonode[g] = build(&o, &s, lbl_gpu_hami_nonode, &x->gpus[g], x);
    }
    for (size_t r = 0; r < nr && o.rc == 0; r++) {
        struct mon_label_cache *c = x->ctrs[r].labels;
        if (c && c->text) {
            s.row_hami[r] = (struct span){.p = c->text, .len = c->hami_len};
            s.row_vgpu[r] = (struct span){.p = c->text + c->hami_len, .len = c->row_len};
            s.ctr_vgpu[r] =
                (struct span){.p = c->text + c->hami_len + c->row_len, .len = c->ctr_len};
            continue;
        }
        s.row_hami[r] = build(&o, &s, lbl_row_hami, &x->ctrs[r], x);
        s.row_vgpu[r] = build(&o, &s, lbl_row_vgpu, &x->ctrs[r], x);
        s.ctr_vgpu[r] = build(&o, &s, lbl_ctr_vgpu, &x->ctrs[r], x);
        size_t total = s.row_hami[r].len + s.row_vgpu[r].len + s.ctr_vgpu[r].len;
        if (c && o.rc == 0 && (c->text = malloc(total)) != NULL) {
            /* the three were built one after another */
            memcpy(c->text, s.b.data + s.row_hami[r].off, total);
            c->hami_len = s.row_hami[r].len;
            c->row_len = s.row_vgpu[r].len;
            c->ctr_len = s.ctr_vgpu[r].len;
        }
    }
    /* The label buffer is complete: offsets become pointers. */
    struct span *all[] = {s.gpu_hami, s.gpu_hami_nonode, s.gpu_vgpu, s.gpu_info,
                          s.row_hami, s.row_vgpu,        s.ctr_vgpu};
    size_t counts[] = {ng, ng, ng, ng, nr, nr, nr};
    for (size_t a = 0; a < sizeof all / sizeof all[0] && o.rc == 0; a++)
        for (size_t i = 0; i < counts[a]; i++)
            if (!all[a][i].p)
                all[a][i].p = s.b.data + all[a][i].off;
    for (size_t f = 0; f < sizeof fams / sizeof fams[0] && o.rc == 0; f++) {
        const struct fam *fm = &fams[f];
        vg_prom_family(&o, fm->name, fm->type, fm->help);
        bool hami = strncmp(fm->name, "hami_", 5) == 0;
        struct num n;
        if (fm->col <= G_XIDS) {
            for (size_t g = 0; g < ng; g++) {
                if (!gpu_value(fm->col, &x->gpus[g], &n))
                    continue; /* no value: no sample */
                struct span sp = fm->col == G_HAMI_MEMUTIL ? s.gpu_hami_nonode[g]
                                 : hami                    ? s.gpu_hami[g]
                                 : fm->col == G_INFO       ? s.gpu_info[g]
                                                           : s.gpu_vgpu[g];
                vg_prom_sample(&o, fm->name);
                vg_prom_label_set(&o, sp.p, sp.len);
                vg_prom_fixed(&o, n.v, n.scale, n.digits);
            }
        } else {
            bool per_ctr = fm->col >= C_REFUSED;
            for (size_t r = 0; r < nr; r++) {
                if (per_ctr && !x->ctrs[r].first)
                    continue;
                if (!row_value(fm->col, &x->ctrs[r], &n))
                    continue;
                struct span sp = per_ctr ? s.ctr_vgpu[r] : hami ? s.row_hami[r] : s.row_vgpu[r];
                vg_prom_sample(&o, fm->name);
                vg_prom_label_set(&o, sp.p, sp.len);
                vg_prom_fixed(&o, n.v, n.scale, n.digits);
            }
        }
    }
    /* Dynamic MIG: the instance each container was given, with when it was made (only
     * when there is one, so nodes without dynamic MIG show no empty family). */
    bool any_mig = false;
    for (size_t r = 0; r < nr; r++)
        any_mig |= x->ctrs[r].mig != NULL;
    if (any_mig && o.rc == 0) {
        vg_prom_family(&o, "vgpu_container_mig_instance_created_seconds", "gauge",
                       "The dynamic MIG instance the container was given on this GPU (labels "
                       "mig_uuid, profile): when the device plugin made it, Unix seconds.");
        for (size_t r = 0; r < nr; r++) {
            const struct mon_limits_mig *m = x->ctrs[r].mig;
            if (!m)
                continue;
            vg_prom_sample(&o, "vgpu_container_mig_instance_created_seconds");
            vg_prom_label_set(&o, s.row_vgpu[r].p, s.row_vgpu[r].len);
            vg_prom_label(&o, "mig_uuid", m->uuid);
            vg_prom_label(&o, "profile", m->profile);
            vg_prom_u64(&o, m->created > 0 ? (uint64_t)m->created : 0);
        }
    }
    monitor_counters(&o, x);
    vg_buf_free(&s.b);
    free(s.gpu_hami);
    free(s.gpu_vgpu);
    free(s.gpu_info);
    free(s.gpu_hami_nonode);
    free(s.row_hami);
    free(s.row_vgpu);
    free(s.ctr_vgpu);
    return vg_prom_done(&o);
}
