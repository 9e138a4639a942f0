/* vgpu-monitor's Prometheus exposition (metrics.h). Label sets are built once per GPU and
 * per row, then every family is one pass over them: the scrape of a node with 512
 * containers stays a few hundred microseconds of formatting. */
#include "monitor/metrics.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
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

struct out {
    struct vg_buf *b;
    struct vg_err *err;
    int rc;
};

/* The hot path: a memcpy while the buffer has room (vg_buf's invariants kept: within
 * max, NUL-terminated), vg_buf_append to grow it. */
static inline void put(struct out *o, const char *s, size_t n)
{
    struct vg_buf *b = o->b;
    if (b->data && n < b->cap - b->len && n <= b->max - b->len) {
        memcpy(b->data + b->len, s, n);
        b->len += n;
        b->data[b->len] = '\0';
        return;
    }
    if (o->rc == 0)
        o->rc = vg_buf_append(b, s, n, o->err);
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

static void put_u64(struct out *o, uint64_t v)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(o, tmp + i, sizeof tmp - i);
}

/* v / scale with its fraction, exactly (scale a power of ten up to 10^9). */
static void put_frac(struct out *o, uint64_t v, uint64_t scale, unsigned digits)
{
    put_u64(o, v / scale);
    uint64_t f = v % scale;
    if (f == 0)
        return;
    char tmp[16];
    tmp[0] = '.';
    for (unsigned i = digits; i > 0; i--) {
        tmp[i] = (char)('0' + f % 10);
        f /= 10;
    }
    unsigned n = digits;
    while (n > 1 && tmp[n] == '0')
        n--;
    put(o, tmp, n + 1);
}

/* A label value, escaped as the text format wants (\\, \", \n). */
static void put_value(struct out *o, const char *s)
{
    const char *run = s;
    for (; *s; s++) {
        const char *esc = *s == '\\' ? "\\\\" : *s == '"' ? "\\\"" : *s == '\n' ? "\\n" : NULL;
        if (!esc)
            continue;
        put(o, run, (size_t)(s - run));
        put(o, esc, 2);
        run = s + 1;
    }
    put(o, run, (size_t)(s - run));
}

static void label(struct out *o, bool *first, const char *name, const char *value)
{
    put(o, *first ? "{" : ",", 1);
    *first = false;
    puts_(o, name);
    put(o, "=\"", 2);
    put_value(o, value);
    put(o, "\"", 1);
}

static void label_u(struct out *o, bool *first, const char *name, uint64_t v)
{
    put(o, *first ? "{" : ",", 1);
    *first = false;
    puts_(o, name);
    put(o, "=\"", 2);
    put_u64(o, v);
    put(o, "\"", 1);
}

static void family(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP ", 7);
    puts_(o, name);
    put(o, " ", 1);
    puts_(o, help);
    put(o, "\n# TYPE ", 8);
    puts_(o, name);
    put(o, " ", 1);
    puts_(o, type);
    put(o, "\n", 1);
}

/* A label set: at p, or (p NULL while building) at off in the label buffer. */
struct span {
    const char *p;
    size_t off, len;
};

/* A sample: name, a prebuilt label set, the value (written by the caller), newline. */
static void sample_head(struct out *o, const char *name, struct span sp)
{
    puts_(o, name);
    put(o, sp.p, sp.len);
    put(o, " ", 1);
}

/* The label sets, in one buffer. */
struct sets {
    struct vg_buf b;
    struct span *gpu_hami, *gpu_hami_nonode, *gpu_vgpu, *gpu_info, *row_hami, *row_vgpu, *ctr_vgpu;
};

static struct span build(struct out *o, struct sets *s,
                         void (*fn)(struct out *, const void *, const void *), const void *a,
                         const void *b)
{
    struct span sp = {.off = s->b.len};
    struct out lo = {.b = &s->b, .err = o->err};
    fn(&lo, a, b);
    if (lo.rc < 0 && o->rc == 0)
        o->rc = lo.rc;
    sp.len = s->b.len - sp.off;
    return sp;
}

static void lbl_gpu_hami(struct out *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    bool f = true;
    char type[MON_MODEL_MAX + 8];
    (void)vg_snprintf(type, sizeof type, "NVIDIA-%s", g->model);
    label(o, &f, "node", x->hostname);
    label_u(o, &f, "device_index", g->index);
    label(o, &f, "device_uuid", g->uuid);
    label(o, &f, "device_type", type);
    put(o, "}", 1);
}

/* hami_host_gpu_memory_controller_utilization_ratio: HAMi gives it no node label. */
static void lbl_gpu_hami_nonode(struct out *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    (void)b;
    bool f = true;
    char type[MON_MODEL_MAX + 8];
    (void)vg_snprintf(type, sizeof type, "NVIDIA-%s", g->model);
    label_u(o, &f, "device_index", g->index);
    label(o, &f, "device_uuid", g->uuid);
    label(o, &f, "device_type", type);
    put(o, "}", 1);
}

static void lbl_gpu_vgpu(struct out *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    bool f = true;
    label(o, &f, "Hostname", x->hostname);
    label_u(o, &f, "gpu", g->index);
    label(o, &f, "UUID", g->uuid);
    put(o, "}", 1);
}

/* vgpu_gpu_info: the GPU labels and its model (model_name: dcgm-exporter's modelName is
 * camelCase, which promtool's lint refuses; join on UUID). */
static void lbl_gpu_info(struct out *o, const void *a, const void *b)
{
    const struct mon_gpu_stats *g = a;
    const struct mon_exposition *x = b;
    bool f = true;
    label(o, &f, "Hostname", x->hostname);
    label_u(o, &f, "gpu", g->index);
    label(o, &f, "UUID", g->uuid);
    label(o, &f, "model_name", g->model);
    put(o, "}", 1);
}

static void lbl_row_hami(struct out *o, const void *a, const void *b)
{
    const struct mon_ctr_stats *c = a;
    const struct mon_exposition *x = b;
    bool f = true;
    label(o, &f, "namespace", c->ns);
    label(o, &f, "pod", c->pod);
    label(o, &f, "container", c->container);
    label_u(o, &f, "vdevice_index", c->vdevice);
    label(o, &f, "device_uuid", x->gpus[c->gpu].uuid);
    put(o, "}", 1);
}

static void ctr_labels(struct out *o, bool *f, const struct mon_ctr_stats *c,
                       const struct mon_exposition *x)
{
    label(o, f, "Hostname", x->hostname);
    label(o, f, "namespace", c->ns);
    label(o, f, "pod", c->pod);
    label(o, f, "container", c->container);
    label(o, f, "pod_uid", c->pod_uid);
}

static void lbl_row_vgpu(struct out *o, const void *a, const void *b)
{
    const struct mon_ctr_stats *c = a;
    const struct mon_exposition *x = b;
    bool f = true;
    ctr_labels(o, &f, c, x);
    label_u(o, &f, "gpu", x->gpus[c->gpu].index);
    label(o, &f, "UUID", x->gpus[c->gpu].uuid);
    put(o, "}", 1);
}

static void lbl_ctr_vgpu(struct out *o, const void *a, const void *b)
{
    bool f = true;
    ctr_labels(o, &f, a, b);
    put(o, "}", 1);
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
    {C_REFUSED, "vgpu_container_allocations_refused_total", "counter",
     "GPU memory allocations refused because they would pass the container's limit."},
    {C_CLOSED, "vgpu_container_allocations_failed_closed_total", "counter",
     "GPU memory allocations refused because enforcement could not work (fail-closed)."},
    {C_VIOLATIONS, "vgpu_container_watchdog_violations_total", "counter",
     "Episodes of the container over its GPU memory limit seen by the watchdog."},
    {C_KILLS, "vgpu_container_watchdog_kills_total", "counter",
     "Processes of the container the watchdog killed."},
};

static bool gpu_value(struct out *o, enum col col, const struct mon_gpu_stats *g)
{
    switch (col) {
    case G_HAMI_USED:
    case G_USED:
        if (!g->have_memory)
            return false;
        put_u64(o, g->memory_used);
        return true;
    case G_TOTAL:
        if (!g->have_memory)
            return false;
        put_u64(o, g->memory_total);
        return true;
    case G_HAMI_UTIL:
        if (!g->have_util)
            return false;
        put_u64(o, g->util_percent);
        return true;
    case G_HAMI_MEMUTIL:
        if (!g->have_util)
            return false;
        put_u64(o, g->memory_util_percent);
        return true;
    case G_UTIL:
        if (!g->have_util)
            return false;
        put_frac(o, g->util_percent > 100 ? 100 : g->util_percent, 100, 2);
        return true;
    case G_INFO:
        put_u64(o, 1);
        return true;
    case G_ALLOC:
        put_u64(o, g->allocated);
        return true;
    case G_CTRS:
        put_u64(o, g->containers);
        return true;
    case G_HEALTHY:
        put_u64(o, g->healthy ? 1 : 0);
        return true;
    case G_XID:
        put_u64(o, g->last_xid);
        return true;
    case G_XIDS:
        put_u64(o, g->xids);
        return true;
    default:
        return false;
    }
}

static bool row_value(struct out *o, enum col col, const struct mon_ctr_stats *c)
{
    switch (col) {
    case R_HAMI_USED:
    case R_HAMI_DEV:
    case R_USED:
        if (!c->region)
            return false;
        put_u64(o, c->used);
        return true;
    case R_HAMI_LIMIT:
    case R_LIMIT:
        if (!c->memory_limit)
            return false;
        put_u64(o, c->memory_limit);
        return true;
    case R_HAMI_UTIL:
        if (!c->region)
            return false;
        put_frac(o, c->achieved_ppm, 10000, 4);
        return true;
    case R_SHARE_LIMIT:
        if (!c->share_percent)
            return false;
        put_frac(o, c->share_percent, 100, 2);
        return true;
    case R_SHARE:
        if (!c->region)
            return false;
        put_frac(o, c->achieved_ppm, 1000000, 6);
        return true;
    case R_THROTTLED:
        if (!c->region)
            return false;
        put_frac(o, c->waited_ns, 1000000000, 9);
        return true;
    case R_BUSY:
        if (!c->region)
            return false;
        put_frac(o, c->busy_ns, 1000000000, 9);
        return true;
    case C_REFUSED:
        if (!c->region)
            return false;
        put_u64(o, c->refused);
        return true;
    case C_CLOSED:
        if (!c->region)
            return false;
        put_u64(o, c->closed);
        return true;
    case C_VIOLATIONS:
        put_u64(o, c->violations);
        return true;
    case C_KILLS:
        put_u64(o, c->kills);
        return true;
    default:
        return false;
    }
}

static void monitor_counters(struct out *o, const struct mon_exposition *x)
{
    char text[4096];
    int n = mon_format_metrics(x->counters, x->policy, text, sizeof text);
    if (n > 0)
        put(o, text, (size_t)n);
    family(o, "vgpu_monitor_events_total", "counter", "Kubernetes Events posted.");
    puts_(o, "vgpu_monitor_events_total ");
    put_u64(o, x->events_sent);
    put(o, "\n", 1);
    family(o, "vgpu_monitor_event_failures_total", "counter", "Events that could not be posted.");
    puts_(o, "vgpu_monitor_event_failures_total ");
    put_u64(o, x->events_failed);
    put(o, "\n", 1);
    family(o, "vgpu_monitor_errors_total", "counter",
           "Errors the monitor logged and survived, by kind.");
    for (int k = 0; k < MON_ERR_KINDS; k++) {
        puts_(o, "vgpu_monitor_errors_total{kind=\"");
        puts_(o, mon_error_kind_names[k]);
        puts_(o, "\"} ");
        put_u64(o, x->errors ? x->errors[k] : 0);
        put(o, "\n", 1);
    }
}

int mon_metrics_format(const struct mon_exposition *x, struct vg_buf *b, struct vg_err *err)
{
    struct out o = {.b = b, .err = err};
    struct sets s;
    memset(&s, 0, sizeof s);
    vg_buf_init(&s.b, "metric labels", 64u << 20);
    size_t ng = x->gpu_count, nr = x->ctr_count;
    /* One allocation for the label sets (a few hundred bytes per row), and the output
     * grown once to about what it will hold (the families times the rows). */
    if (vg_buf_append(&s.b, "", 0, err) == 0 && (ng + nr) * 700 < s.b.max) {
        size_t want = (ng + nr) * 700;
        char *p = realloc(s.b.data, want + 1);
        if (p) {
            s.b.data = p;
            s.b.cap = want + 1;
        }
    }
    size_t out_want = b->len + (ng * 12 + nr * 20) * 220 + 8192;
    if (b->cap < out_want + 1 && out_want < b->max && vg_buf_append(b, "", 0, err) == 0) {
        char *p = realloc(b->data, out_want + 1);
        if (p) {
            b->data = p;
            b->cap = out_want + 1;
        }
    }
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
        family(&o, fm->name, fm->type, fm->help);
        bool hami = strncmp(fm->name, "hami_", 5) == 0;
        if (fm->col <= G_XIDS) {
            for (size_t g = 0; g < ng; g++) {
                struct span sp = fm->col == G_HAMI_MEMUTIL ? s.gpu_hami_nonode[g]
                                 : hami                    ? s.gpu_hami[g]
                                 : fm->col == G_INFO       ? s.gpu_info[g]
                                                           : s.gpu_vgpu[g];
                size_t mark = b->len;
                sample_head(&o, fm->name, sp);
                if (!gpu_value(&o, fm->col, &x->gpus[g])) {
                    b->len = o.rc == 0 ? mark : b->len; /* no value: no sample */
                    if (b->data)
                        b->data[b->len] = '\0';
                    continue;
                }
                put(&o, "\n", 1);
            }
        } else {
            bool per_ctr = fm->col >= C_REFUSED;
            for (size_t r = 0; r < nr; r++) {
                if (per_ctr && !x->ctrs[r].first)
                    continue;
                struct span sp = per_ctr ? s.ctr_vgpu[r] : hami ? s.row_hami[r] : s.row_vgpu[r];
                size_t mark = b->len;
                sample_head(&o, fm->name, sp);
                if (!row_value(&o, fm->col, &x->ctrs[r])) {
                    b->len = o.rc == 0 ? mark : b->len;
                    if (b->data)
                        b->data[b->len] = '\0';
                    continue;
                }
                put(&o, "\n", 1);
            }
        }
    }
    if (o.rc == 0)
        monitor_counters(&o, x);
    vg_buf_free(&s.b);
    free(s.gpu_hami);
    free(s.gpu_vgpu);
    free(s.gpu_info);
    free(s.gpu_hami_nonode);
    free(s.row_hami);
    free(s.row_vgpu);
    free(s.ctr_vgpu);
    return o.rc;
}
