/* What vgpu-scheduler shows of its model (view.h): allocation metrics, the dashboard's
 * state JSON and the filter verdicts kept per pod, read only (the verdict store that
 * filter writes is pending.c's). */
#include "scheduler/view.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "base/auto.h"
#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"
#include "scheduler/internal.h"

#define MIB 1048576ull

static json_t *verdict_json(const struct sched_verdict *v)
{
    json_t *reasons = json_array();
    for (unsigned r = 0; r < v->reason_count; r++) {
        const struct sched_verdict_reason *re = &v->reasons[r];
        json_t *nodes = json_array();
        for (unsigned k = 0; k < re->count && k < SCHED_VERDICT_EXAMPLES; k++)
            json_array_append_new(nodes, json_string(re->nodes[k]));
        json_array_append_new(reasons, json_pack("{s:s, s:I, s:o}", "reason", re->why, "nodes",
                                                 (json_int_t)re->count, "examples", nodes));
    }
    json_t *o =
        json_pack("{s:I, s:I, s:I, s:o}", "time", (json_int_t)v->time, "offered",
                  (json_int_t)v->offered, "failed", (json_int_t)v->failed, "reasons", reasons);
    json_object_set_new(o, "node", v->node[0] != '\0' ? json_string(v->node) : json_null());
    json_object_set_new(o, "error", json_string(v->error));
    if (v->other_reasons > 0)
        json_object_set_new(o, "otherReasons", json_integer((json_int_t)v->other_reasons));
    return o;
}

char *sched_view_verdict(const struct sched_state *s, const char *key)
{
    const struct sched_verdict *v = sched_map_get(&s->verdicts, key);
    if (v == NULL)
        return NULL;
    VG_AUTO_JSON json_t *o = verdict_json(v);
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- the model, per GPU ------------------------------------------------------------- */

struct gpu_view {
    uint64_t mem_total, mem_used; /* bytes */
    double compute_used;          /* 0..1 */
    double stranded_compute;      /* 0..1 */
    uint64_t stranded_mem;        /* bytes */
    bool blocked;
};

static void gpu_view(const struct sched_state *s, size_t i, unsigned g, struct gpu_view *out)
{
    const struct place_gpu *gpu = &s->cluster->nodes[i].gpus[g];
    out->mem_total = gpu->mem_total_mib * MIB;
    out->mem_used = gpu->mem_used_mib * MIB;
    uint32_t milli = gpu->milli_used > 1000 ? 1000 : gpu->milli_used;
    out->compute_used = milli / 1000.0;
    bool partly = gpu->tenants > 0 && milli < 1000;
    out->stranded_compute = partly ? (1000 - milli) / 1000.0 : 0;
    out->stranded_mem =
        partly && gpu->mem_total_mib > gpu->mem_used_mib ? out->mem_total - out->mem_used : 0;
    out->blocked = sched_gpu_blocked(s, (int32_t)i, g);
}

struct totals {
    uint64_t gpus, mem_total, mem_used, stranded_mem, containers;
    double compute_total, compute_used, stranded;
};

static void node_totals(const struct sched_state *s, size_t i, struct totals *t)
{
    const struct place_node *n = &s->cluster->nodes[i];
    for (unsigned g = 0; g < n->gpu_count; g++) {
        struct gpu_view v;
        gpu_view(s, i, g, &v);
        t->gpus++;
        t->mem_total += v.mem_total;
        t->mem_used += v.mem_used;
        t->stranded_mem += v.stranded_mem;
        t->compute_total += 1.0;
        t->compute_used += v.compute_used;
        t->stranded += v.stranded_compute;
        t->containers += n->gpus[g].tenants;
    }
}

static double frag_ratio(const struct totals *t)
{
    double free_compute = t->compute_total - t->compute_used;
    return free_compute > 1e-9 ? t->stranded / free_compute : 0.0;
}

/* ---- Prometheus text ------------------------------------------------------------------- */

/* A label value escaped for the exposition format (backslash, quote, newline). */
static const char *esc(const char *v, char *buf, size_t size)
{
    size_t o = 0;
    for (const char *p = v; *p != '\0' && o + 3 < size; p++) {
        if (*p == '\\' || *p == '"') {
            buf[o++] = '\\';
            buf[o++] = *p;
        } else if (*p == '\n') {
            buf[o++] = '\\';
            buf[o++] = 'n';
        } else {
            buf[o++] = *p;
        }
    }
    buf[o] = '\0';
    return buf;
}

#define ESC_MAX 600

struct label_cache;

struct out {
    struct vg_buf *b;
    struct vg_err *err;
    int rc;
    struct label_cache *labels;
};

static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    if (o->rc < 0)
        return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) {
        o->rc = vg_err_set(o->err, -E2BIG, "metrics: a line over %zu bytes", sizeof line);
        return;
    }
    o->rc = vg_buf_append(o->b, line, (size_t)n, o->err);
}

static void head(struct out *o, const char *name, const char *type, const char *help)
{
    put(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The labels of GPU g on node i: HAMi's (hami, legacy), or dcgm-exporter's Hostname, UUID
 * and gpu with model_name (vgpu_*: promtool's lint refuses dcgm's camel-case modelName). */
enum labels { L_HAMI, L_LEGACY, L_DCGM };

static void gpu_labels(const struct sched_state *s, size_t i, unsigned g, enum labels l, char *buf,
                       size_t size)
{
    const struct place_node *n = &s->cluster->nodes[i];
    const struct place_gpu *gpu = &n->gpus[g];
    char node[ESC_MAX], uuid[ESC_MAX], model[ESC_MAX];
    (void)esc(n->name, node, sizeof node);
    (void)esc(gpu->uuid, uuid, sizeof uuid);
    (void)esc(gpu->model < s->cluster->model_count ? s->cluster->models[gpu->model] : "", model,
              sizeof model);
    if (l == L_HAMI)
        (void)vg_snprintf(buf, size,
                          "node=\"%s\",device_uuid=\"%s\",device_index=\"%u\",device_type=\"%s\","
                          "zone=\"vGPU\"",
                          node, uuid, g, model);
    else if (l == L_LEGACY)
        (void)vg_snprintf(buf, size,
                          "nodeid=\"%s\",deviceuuid=\"%s\",deviceidx=\"%u\",devicetype=\"%s\","
                          "zone=\"vGPU\"",
                          node, uuid, g, model);
    else
        (void)vg_snprintf(buf, size, "Hostname=\"%s\",UUID=\"%s\",gpu=\"%u\",model_name=\"%s\"",
                          node, uuid, g, model);
}

/* One gauge per GPU: value(s, i, g) under the name, with the labels l. The labels of
 * every GPU are made once per scrape (labels_of). */
typedef double (*gpu_value)(const struct sched_state *s, size_t i, unsigned g);

struct label_cache {
    char *text[3]; /* per enum labels: every GPU's labels, one after the other */
    size_t *at[3]; /* offset of GPU (flat index) in text */
};

static const char *labels_of(struct label_cache *lc, const struct sched_state *s, enum labels l,
                             size_t flat)
{
    if (lc->text[l] == NULL) {
        const struct place_cluster *c = s->cluster;
        size_t total = 0;
        for (size_t i = 0; i < c->node_count; i++)
            total += c->nodes[i].gpu_count;
        struct vg_buf b;
        vg_buf_init(&b, "metric labels", (size_t)1 << 30);
        lc->at[l] = xcalloc(total + 1, sizeof(size_t));
        char one[4 * ESC_MAX];
        struct vg_err err = {0};
        size_t f = 0;
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
                gpu_labels(s, i, g, l, one, sizeof one);
                lc->at[l][f++] = b.len;
                (void)vg_buf_append(&b, one, strlen(one) + 1, &err);
            }
        size_t len = 0;
        if (vg_buf_steal(&b, &lc->text[l], &len, &err) < 0)
            lc->text[l] = xstrdup("");
        vg_buf_free(&b);
    }
    return lc->text[l] + lc->at[l][flat];
}

static void labels_free(struct label_cache *lc)
{
    for (int l = 0; l < 3; l++) {
        free(lc->text[l]);
        free(lc->at[l]);
    }
}

static void per_gpu(struct out *o, const struct sched_state *s, const char *name, const char *help,
                    enum labels l, gpu_value value)
{
    const struct place_cluster *c = s->cluster;
    head(o, name, "gauge", help);
    size_t flat = 0;
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++)
            put(o, "%s{%s} %.17g\n", name, labels_of(o->labels, s, l, flat++), value(s, i, g));
}

static double v_mem_total(const struct sched_state *s, size_t i, unsigned g)
{
    return (double)(s->cluster->nodes[i].gpus[g].mem_total_mib * MIB);
}
static double v_mem_used(const struct sched_state *s, size_t i, unsigned g)
{
    return (double)(s->cluster->nodes[i].gpus[g].mem_used_mib * MIB);
}
static double v_mem_ratio(const struct sched_state *s, size_t i, unsigned g)
{
    const struct place_gpu *gpu = &s->cluster->nodes[i].gpus[g];
    return gpu->mem_total_mib > 0 ? (double)gpu->mem_used_mib / (double)gpu->mem_total_mib : 0;
}
static double v_hundred(const struct sched_state *s, size_t i, unsigned g)
{
    (void)s, (void)i, (void)g;
    return 100;
}
static double v_core_percent(const struct sched_state *s, size_t i, unsigned g)
{
    uint32_t m = s->cluster->nodes[i].gpus[g].milli_used;
    return (m > 1000 ? 1000 : m) / 10.0;
}
static double v_compute(const struct sched_state *s, size_t i, unsigned g)
{
    struct gpu_view v;
    gpu_view(s, i, g, &v);
    return v.compute_used;
}
static double v_tenants(const struct sched_state *s, size_t i, unsigned g)
{
    return s->cluster->nodes[i].gpus[g].tenants;
}
static double v_slots(const struct sched_state *s, size_t i, unsigned g)
{
    return s->cluster->nodes[i].gpus[g].slots;
}
static double v_healthy(const struct sched_state *s, size_t i, unsigned g)
{
    return s->cluster->nodes[i].gpus[g].healthy ? 1 : 0;
}
static double v_blocked(const struct sched_state *s, size_t i, unsigned g)
{
    return sched_gpu_blocked(s, (int32_t)i, g) ? 1 : 0;
}
static double v_stranded(const struct sched_state *s, size_t i, unsigned g)
{
    struct gpu_view v;
    gpu_view(s, i, g, &v);
    return v.stranded_compute;
}
static double v_stranded_mem(const struct sched_state *s, size_t i, unsigned g)
{
    struct gpu_view v;
    gpu_view(s, i, g, &v);
    return (double)v.stranded_mem;
}

/* One container's share of one GPU, as the model holds it. */
struct share_ref {
    const struct sched_pod *p;
    unsigned k;       /* the container's place among the pod's GPU containers */
    const char *name; /* its name ("" when unknown) */
    unsigned g;       /* the GPU's index on node p->node */
    uint64_t mem_mib;
    unsigned cores; /* percent; 0: no compute limit */
};

/* Visits every container share the model holds (charged pods on known nodes), from the
 * pod records: no decision is decoded. */
typedef void (*share_fn)(void *arg, const struct share_ref *r);

static void each_share(const struct sched_state *s, share_fn fn, void *arg)
{
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (!p->applied || p->node < 0 || (size_t)p->node >= s->cluster->node_count)
            continue;
        const struct place_node *n = &s->cluster->nodes[p->node];
        const char *name = p->names != NULL ? p->names : "";
        for (unsigned k = 0; k < p->share_count; k++) {
            const struct sched_share *sh = &p->shares[k];
            for (unsigned j = 0; j < sh->gpu_count; j++)
                if (sh->gpus[j] < n->gpu_count) {
                    struct share_ref r = {p, k, name, sh->gpus[j], sh->mem[j], sh->milli / 10};
                    fn(arg, &r);
                }
            if (p->names != NULL)
                name += strlen(name) + 1;
        }
    }
}

/* "ns/name" split into its two parts, escaped. */
static void split_key(const char *key, char *ns, char *name, size_t size)
{
    const char *slash = strchr(key, '/');
    char tmp[SCHED_KEY_MAX];
    size_t nl = slash != NULL ? (size_t)(slash - key) : 0;
    if (nl >= sizeof tmp)
        nl = sizeof tmp - 1;
    memcpy(tmp, key, nl);
    tmp[nl] = '\0';
    (void)esc(tmp, ns, size);
    (void)esc(slash != NULL ? slash + 1 : key, name, size);
}

struct share_out {
    struct out *o;
    const struct sched_state *s;
    int which; /* 0 hami memory, 1 hami cores, 2 vgpu memory, 3 vgpu compute, 4/5 legacy */
};

static void share_metric(void *arg, const struct share_ref *r)
{
    struct share_out *so = arg;
    const struct place_node *n = &so->s->cluster->nodes[r->p->node];
    char ns[ESC_MAX], pod[ESC_MAX], node[ESC_MAX], uuid[ESC_MAX], ctr[ESC_MAX];
    split_key(r->p->key, ns, pod, sizeof ns);
    (void)esc(n->name, node, sizeof node);
    (void)esc(n->gpus[r->g].uuid, uuid, sizeof uuid);
    (void)esc(r->name, ctr, sizeof ctr);
    uint64_t bytes = r->mem_mib * MIB;
    switch (so->which) {
    case 0:
    case 1:
        put(so->o,
            "%s{namespace=\"%s\",node=\"%s\",pod=\"%s\",container_index=\"%u\","
            "device_uuid=\"%s\",zone=\"vGPU\"} %llu\n",
            so->which == 0 ? "hami_vgpu_memory_allocated_bytes" : "hami_vgpu_core_allocated_ratio",
            ns, node, pod, r->k, uuid,
            so->which == 0 ? (unsigned long long)bytes : (unsigned long long)r->cores);
        break;
    case 4:
    case 5:
        put(so->o,
            "%s{podnamespace=\"%s\",nodename=\"%s\",podname=\"%s\",containeridx=\"%u\","
            "deviceuuid=\"%s\",zone=\"vGPU\"} %llu\n",
            so->which == 4 ? "vGPUMemoryAllocated" : "vGPUCoreAllocated", ns, node, pod, r->k, uuid,
            so->which == 4 ? (unsigned long long)bytes : (unsigned long long)r->cores);
        break;
    default:
        put(so->o,
            "%s{namespace=\"%s\",pod=\"%s\",container=\"%s\",Hostname=\"%s\",UUID=\"%s\","
            "state=\"%s\"} %.17g\n",
            so->which == 2 ? "vgpu_scheduler_container_memory_allocated_bytes"
                           : "vgpu_scheduler_container_compute_allocated_ratio",
            ns, pod, ctr, node, uuid, r->p->assumed ? "assumed" : "bound",
            so->which == 2 ? (double)bytes : r->cores / 100.0);
    }
}

static void per_share(struct out *o, const struct sched_state *s, int which, const char *name,
                      const char *help)
{
    head(o, name, "gauge", help);
    struct share_out so = {o, s, which};
    each_share(s, share_metric, &so);
}

int sched_view_metrics(const struct sched_state *s, bool legacy, struct vg_buf *b,
                       struct vg_err *err)
{
    struct label_cache lc = {0};
    struct out o = {b, err, 0, &lc};
    const struct place_cluster *c = s->cluster;

    /* HAMi's names, labels and values (its scheduler's cmd/scheduler/metrics.go): core
     * figures in percent of a card, as HAMi writes them. */
    per_gpu(&o, s, "hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU.", L_HAMI,
            v_mem_total);
    per_gpu(&o, s, "hami_gpu_core_limit_ratio",
            "Device core limit for a certain GPU (percent of the card, HAMi's scale).", L_HAMI,
            v_hundred);
    head(&o, "hami_gpu_memory_allocated_bytes", "gauge",
         "Device memory allocated for a certain GPU.");
    {
        char labels[4 * ESC_MAX];
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
                gpu_labels(s, i, g, L_HAMI, labels, sizeof labels);
                put(&o, "hami_gpu_memory_allocated_bytes{%s,device_cores=\"100\"} %.17g\n", labels,
                    v_mem_used(s, i, g));
            }
    }
    per_gpu(&o, s, "hami_gpu_core_allocated_ratio",
            "Device core allocated for a certain GPU (percent of the card, HAMi's scale).", L_HAMI,
            v_core_percent);
    head(&o, "hami_node_gpu_overview", "gauge",
         "GPU overview on a certain node: memory allocated, in bytes.");
    {
        char labels[4 * ESC_MAX];
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
                gpu_labels(s, i, g, L_HAMI, labels, sizeof labels);
                put(&o,
                    "hami_node_gpu_overview{%s,device_cores=\"100\",device_memory_limit=\"%llu\"}"
                    " %.17g\n",
                    labels, (unsigned long long)c->nodes[i].gpus[g].mem_total_mib,
                    v_mem_used(s, i, g));
            }
    }
    per_gpu(&o, s, "hami_node_gpu_memory_allocated_ratio",
            "GPU memory allocated over the GPU's memory (0 to 1).", L_HAMI, v_mem_ratio);
    per_share(&o, s, 0, "hami_vgpu_memory_allocated_bytes",
              "vGPU memory allocated from a container.");
    per_share(&o, s, 1, "hami_vgpu_core_allocated_ratio",
              "vGPU core allocated from a container (percent of the card, HAMi's scale).");

    /* vgpu's own, in base units, with dcgm-exporter's label names. */
    per_gpu(&o, s, "vgpu_scheduler_gpu_memory_total_bytes",
            "GPU memory the inventory offers, in bytes.", L_DCGM, v_mem_total);
    per_gpu(&o, s, "vgpu_scheduler_gpu_memory_allocated_bytes",
            "GPU memory handed out by decisions and promises, in bytes.", L_DCGM, v_mem_used);
    per_gpu(&o, s, "vgpu_scheduler_gpu_compute_allocated_ratio",
            "GPU compute handed out (plus any the inventory withholds), 0 to 1.", L_DCGM,
            v_compute);
    per_gpu(&o, s, "vgpu_scheduler_gpu_containers", "Containers placed on the GPU.", L_DCGM,
            v_tenants);
    per_gpu(&o, s, "vgpu_scheduler_gpu_slots",
            "Most containers the GPU takes at once (0: no bound).", L_DCGM, v_slots);
    per_gpu(&o, s, "vgpu_scheduler_gpu_healthy", "1 when the inventory says the GPU is healthy.",
            L_DCGM, v_healthy);
    per_gpu(&o, s, "vgpu_scheduler_gpu_blocked",
            "1 when a bound pod that does not fit holds the GPU (it takes no new pods).", L_DCGM,
            v_blocked);
    per_gpu(&o, s, "vgpu_scheduler_gpu_stranded_compute_ratio",
            "Unallocated compute on a partly used GPU (it holds a container), 0 to 1.", L_DCGM,
            v_stranded);
    per_gpu(&o, s, "vgpu_scheduler_gpu_stranded_memory_bytes",
            "Unallocated memory on a partly used GPU, in bytes.", L_DCGM, v_stranded_mem);

    struct totals all = {0};
    static const char *const node_names[] = {
        "vgpu_scheduler_node_gpus",
        "vgpu_scheduler_node_memory_total_bytes",
        "vgpu_scheduler_node_memory_allocated_bytes",
        "vgpu_scheduler_node_compute_allocated_ratio",
        "vgpu_scheduler_node_stranded_compute_gpus",
        "vgpu_scheduler_node_fragmentation_ratio",
    };
    static const char *const node_help[] = {
        "GPUs in the node's inventory.",
        "GPU memory on the node, in bytes.",
        "GPU memory handed out on the node, in bytes.",
        "GPU compute handed out on the node over its GPUs' compute, 0 to 1.",
        "Unallocated compute on the node's partly used GPUs, in GPUs.",
        "Stranded compute over unallocated compute on the node, 0 to 1.",
    };
    for (size_t m = 0; m < sizeof node_names / sizeof node_names[0]; m++) {
        head(&o, node_names[m], "gauge", node_help[m]);
        for (size_t i = 0; i < c->node_count; i++) {
            struct totals t = {0};
            node_totals(s, i, &t);
            double v = 0;
            switch (m) {
            case 0:
                v = (double)t.gpus;
                break;
            case 1:
                v = (double)t.mem_total;
                break;
            case 2:
                v = (double)t.mem_used;
                break;
            case 3:
                v = t.compute_total > 0 ? t.compute_used / t.compute_total : 0;
                break;
            case 4:
                v = t.stranded;
                break;
            default:
                v = frag_ratio(&t);
                break;
            }
            char node[ESC_MAX];
            put(&o, "%s{Hostname=\"%s\"} %.17g\n", node_names[m],
                esc(c->nodes[i].name, node, sizeof node), v);
            if (m == 0 && s->nodes[i].present) {
                all.gpus += t.gpus;
                all.mem_total += t.mem_total;
                all.mem_used += t.mem_used;
                all.stranded_mem += t.stranded_mem;
                all.compute_total += t.compute_total;
                all.compute_used += t.compute_used;
                all.stranded += t.stranded;
            }
        }
    }
    head(&o, "vgpu_scheduler_cluster_compute_free_gpus", "gauge",
         "Unallocated compute over the nodes the API lists, in GPUs.");
    put(&o, "vgpu_scheduler_cluster_compute_free_gpus %.17g\n",
        all.compute_total - all.compute_used);
    head(&o, "vgpu_scheduler_cluster_stranded_compute_gpus", "gauge",
         "Unallocated compute on partly used GPUs, in GPUs.");
    put(&o, "vgpu_scheduler_cluster_stranded_compute_gpus %.17g\n", all.stranded);
    head(&o, "vgpu_scheduler_cluster_stranded_memory_bytes", "gauge",
         "Unallocated memory on partly used GPUs, in bytes.");
    put(&o, "vgpu_scheduler_cluster_stranded_memory_bytes %llu\n",
        (unsigned long long)all.stranded_mem);
    head(&o, "vgpu_scheduler_cluster_fragmentation_ratio", "gauge",
         "Stranded compute over unallocated compute in the cluster, 0 to 1.");
    put(&o, "vgpu_scheduler_cluster_fragmentation_ratio %.17g\n", frag_ratio(&all));
    head(&o, "vgpu_scheduler_pending_pods", "gauge",
         "Pods the pod watch shows waiting for a node (GPU or not).");
    put(&o, "vgpu_scheduler_pending_pods %zu\n", sched_pending_count(s));
    per_share(&o, s, 2, "vgpu_scheduler_container_memory_allocated_bytes",
              "GPU memory handed to a container on a GPU, in bytes.");
    per_share(&o, s, 3, "vgpu_scheduler_container_compute_allocated_ratio",
              "GPU compute handed to a container on a GPU, 0 to 1 (0: no compute limit).");

    if (legacy) { /* the names promtool's lint refuses */
        per_gpu(&o, s, "hami_gpu_shared_count", "Number of containers sharing this GPU.", L_HAMI,
                v_tenants);
        per_gpu(&o, s, "GPUDeviceMemoryLimit", "Device memory limit for a certain GPU.", L_LEGACY,
                v_mem_total);
        per_gpu(&o, s, "GPUDeviceCoreLimit", "Device memory core limit for a certain GPU.",
                L_LEGACY, v_hundred);
        head(&o, "GPUDeviceMemoryAllocated", "gauge", "Device memory allocated for a certain GPU.");
        char labels[4 * ESC_MAX];
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
                gpu_labels(s, i, g, L_LEGACY, labels, sizeof labels);
                put(&o, "GPUDeviceMemoryAllocated{%s,devicecores=\"100\"} %.17g\n", labels,
                    v_mem_used(s, i, g));
            }
        per_gpu(&o, s, "GPUDeviceSharedNum", "Number of containers sharing this GPU.", L_LEGACY,
                v_tenants);
        per_gpu(&o, s, "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU.",
                L_LEGACY, v_core_percent);
        head(&o, "nodeGPUOverview", "gauge", "GPU overview on a certain node.");
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
                gpu_labels(s, i, g, L_LEGACY, labels, sizeof labels);
                put(&o,
                    "nodeGPUOverview{%s,devicecores=\"100\",devicememorylimit=\"%llu\"} %.17g\n",
                    labels, (unsigned long long)c->nodes[i].gpus[g].mem_total_mib,
                    v_mem_used(s, i, g));
            }
        per_gpu(&o, s, "nodeGPUMemoryPercentage",
                "GPU Memory Allocated Percentage on a certain GPU.", L_LEGACY, v_mem_ratio);
        per_share(&o, s, 4, "vGPUMemoryAllocated", "vGPU memory allocated from a container.");
        per_share(&o, s, 5, "vGPUCoreAllocated", "vGPU core allocated from a container.");
    }
    labels_free(&lc);
    return o.rc;
}

/* ---- the dashboard's state ---------------------------------------------------------- */

struct named_index {
    const char *name;
    size_t index;
};

static int cmp_named(const void *a, const void *b)
{
    return strcmp(((const struct named_index *)a)->name, ((const struct named_index *)b)->name);
}

/* The state JSON is written directly (4,000 GPUs and 12,000 containers: building a
 * jansson tree first took several times longer). */
struct jw {
    struct vg_buf b;
    struct vg_err err;
    int rc;
};

static void jraw(struct jw *w, const char *s, size_t n)
{
    if (w->rc == 0)
        w->rc = vg_buf_append(&w->b, s, n, &w->err);
}

static void jlit(struct jw *w, const char *s)
{
    jraw(w, s, strlen(s));
}

static void jf(struct jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jf(struct jw *w, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof tmp)
        jraw(w, tmp, (size_t)n);
}

/* A JSON string of n bytes of s (UTF-8 as the API gave it; control bytes escaped). */
static void jstr_n(struct jw *w, const char *s, size_t n)
{
    jraw(w, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        jraw(w, s + run, i - run);
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            jraw(w, e, 2);
        } else {
            jf(w, "\\u%04x", c);
        }
        run = i + 1;
    }
    jraw(w, s + run, n - run);
    jraw(w, "\"", 1);
}

static void jstr(struct jw *w, const char *s)
{
    jstr_n(w, s, strlen(s));
}

static void totals_write(struct jw *w, const struct totals *t)
{
    jf(w, "\"gpus\":%llu,\"memTotalBytes\":%llu,\"memAllocatedBytes\":%llu,",
       (unsigned long long)t->gpus, (unsigned long long)t->mem_total,
       (unsigned long long)t->mem_used);
    jf(w, "\"computeTotal\":%.9g,\"computeAllocated\":%.9g,\"strandedCompute\":%.9g,",
       t->compute_total, t->compute_used, t->stranded);
    jf(w, "\"strandedMemoryBytes\":%llu,\"fragmentation\":%.9g,\"containers\":%llu",
       (unsigned long long)t->stranded_mem, frag_ratio(t), (unsigned long long)t->containers);
}

static void verdict_write(struct jw *w, const struct sched_verdict *v)
{
    if (v == NULL) {
        jlit(w, "null");
        return;
    }
    jf(w, "{\"time\":%lld,\"offered\":%u,\"failed\":%u,\"node\":", (long long)v->time, v->offered,
       v->failed);
    if (v->node[0] != '\0')
        jstr(w, v->node);
    else
        jlit(w, "null");
    jlit(w, ",\"error\":");
    jstr(w, v->error);
    if (v->other_reasons > 0)
        jf(w, ",\"otherReasons\":%u", v->other_reasons);
    jlit(w, ",\"reasons\":[");
    for (unsigned r = 0; r < v->reason_count; r++) {
        const struct sched_verdict_reason *re = &v->reasons[r];
        jlit(w, r > 0 ? ",{\"reason\":" : "{\"reason\":");
        jstr(w, re->why);
        jf(w, ",\"nodes\":%u,\"examples\":[", re->count);
        for (unsigned k = 0; k < re->count && k < SCHED_VERDICT_EXAMPLES; k++) {
            if (k > 0)
                jlit(w, ",");
            jstr(w, re->nodes[k]);
        }
        jlit(w, "]}");
    }
    jlit(w, "]}");
}

/* The key's namespace and name as JSON members. */
static void key_write(struct jw *w, const char *key)
{
    const char *slash = strchr(key, '/');
    jlit(w, "\"namespace\":");
    jstr_n(w, key, slash != NULL ? (size_t)(slash - key) : 0);
    jlit(w, ",\"pod\":");
    jstr(w, slash != NULL ? slash + 1 : key);
}

struct share_list {
    struct share_ref *refs;
    size_t n, cap;
};

static void share_collect(void *arg, const struct share_ref *r)
{
    struct share_list *l = arg;
    xarray_grow(&l->refs, &l->cap, l->n + 1, sizeof *l->refs);
    l->refs[l->n++] = *r;
}

/* Orders shares by node and GPU (then pod key: the same order at every refresh). */
static int cmp_share(const void *a, const void *b)
{
    const struct share_ref *x = a, *y = b;
    if (x->p->node != y->p->node)
        return x->p->node < y->p->node ? -1 : 1;
    if (x->g != y->g)
        return x->g < y->g ? -1 : 1;
    int c = strcmp(x->p->key, y->p->key);
    if (c != 0)
        return c;
    return x->k < y->k ? -1 : x->k > y->k;
}

char *sched_view_state(const struct sched_state *s, int64_t now_unix)
{
    const struct place_cluster *c = s->cluster;
    struct share_list shares = {0};
    each_share(s, share_collect, &shares);
    if (shares.n > 1) /* qsort takes no NULL, even for nothing */
        qsort(shares.refs, shares.n, sizeof *shares.refs, cmp_share);
    /* first[i * PLACE_MAX_GPUS + g]: where GPU g of node i starts in shares. */
    size_t slots = c->node_count * PLACE_MAX_GPUS;
    VG_AUTO_FREE size_t *first = xcalloc(slots + 1, sizeof *first);
    for (size_t k = 0, at = 0; at <= slots; at++) {
        while (k < shares.n &&
               (size_t)shares.refs[k].p->node * PLACE_MAX_GPUS + shares.refs[k].g < at)
            k++;
        first[at] = k;
    }
    VG_AUTO_FREE struct named_index *order = xcalloc(c->node_count + 1, sizeof *order);
    for (size_t i = 0; i < c->node_count; i++)
        order[i] = (struct named_index){c->nodes[i].name, i};
    qsort(order, c->node_count, sizeof *order, cmp_named);

    struct jw w = {0};
    vg_buf_init(&w.b, "dashboard state", (size_t)1 << 30);
    struct totals all = {0};
    jf(&w, "{\"version\":1,\"time\":%lld,\"policy\":", (long long)now_unix);
    jstr(&w, place_policy_name(s->opt.policy));
    jlit(&w, ",\"nodes\":[");
    for (size_t k = 0; k < c->node_count; k++) {
        size_t i = order[k].index;
        const struct place_node *n = &c->nodes[i];
        const struct sched_node *sn = &s->nodes[i];
        struct totals t = {0};
        node_totals(s, i, &t);
        if (sn->present) {
            all.gpus += t.gpus;
            all.mem_total += t.mem_total;
            all.mem_used += t.mem_used;
            all.stranded_mem += t.stranded_mem;
            all.compute_total += t.compute_total;
            all.compute_used += t.compute_used;
            all.stranded += t.stranded;
            all.containers += t.containers;
        }
        jlit(&w, k > 0 ? ",{\"name\":" : "{\"name\":");
        jstr(&w, n->name);
        jf(&w, ",\"present\":%s,\"inventory\":%s,\"heartbeat\":%lld,\"totals\":{",
           sn->present ? "true" : "false", sn->has_inventory ? "true" : "false",
           (long long)sn->inventory.heartbeat);
        totals_write(&w, &t);
        jlit(&w, "},\"gpus\":[");
        for (unsigned g = 0; g < n->gpu_count; g++) {
            const struct place_gpu *gpu = &n->gpus[g];
            struct gpu_view v;
            gpu_view(s, i, g, &v);
            jf(&w, "%s{\"index\":%u,\"uuid\":", g > 0 ? "," : "", g);
            jstr(&w, gpu->uuid);
            jlit(&w, ",\"model\":");
            jstr(&w, gpu->model < c->model_count ? c->models[gpu->model] : "");
            jf(&w, ",\"memTotalBytes\":%llu,\"memAllocatedBytes\":%llu,\"computeAllocated\":%.9g",
               (unsigned long long)v.mem_total, (unsigned long long)v.mem_used, v.compute_used);
            jf(&w, ",\"containers\":%u,\"slots\":%u,\"healthy\":%s,\"blocked\":%s", gpu->tenants,
               gpu->slots, gpu->healthy ? "true" : "false", v.blocked ? "true" : "false");
            jf(&w, ",\"strandedCompute\":%.9g,\"strandedMemoryBytes\":%llu,\"tenants\":[",
               v.stranded_compute, (unsigned long long)v.stranded_mem);
            size_t from = first[i * PLACE_MAX_GPUS + g], to = first[i * PLACE_MAX_GPUS + g + 1];
            for (size_t r = from; r < to; r++) {
                const struct share_ref *sr = &shares.refs[r];
                jlit(&w, r > from ? ",{" : "{");
                key_write(&w, sr->p->key);
                jlit(&w, ",\"container\":");
                jstr(&w, sr->name);
                jf(&w, ",\"state\":\"%s\",\"memBytes\":%llu,\"compute\":%.9g}",
                   sr->p->assumed ? "assumed" : "bound", (unsigned long long)(sr->mem_mib * MIB),
                   sr->cores / 100.0);
            }
            jlit(&w, "]}");
        }
        jlit(&w, "]}");
    }
    free(shares.refs);
    jlit(&w, "],\"pending\":[");
    bool any = false;
    for (size_t i = sched_map_next(&s->pending, 0); i < s->pending.cap;
         i = sched_map_next(&s->pending, i + 1)) {
        const char *key = s->pending.slots[i].key;
        jlit(&w, any ? ",{" : "{");
        any = true;
        key_write(&w, key);
        jlit(&w, ",\"lastFilter\":");
        verdict_write(&w, sched_map_get(&s->verdicts, key));
        jlit(&w, "}");
    }
    struct sched_stats st;
    sched_state_stats(s, &st);
    jlit(&w, "],\"cluster\":{");
    totals_write(&w, &all);
    jf(&w, ",\"nodes\":%llu,\"podsBound\":%llu,\"podsAssumed\":%llu,\"podsPending\":%zu}}",
       (unsigned long long)st.nodes, (unsigned long long)st.bound, (unsigned long long)st.assumed,
       s->pending.count);
    char *out = NULL;
    if (w.rc < 0 || vg_buf_steal(&w.b, &out, NULL, &w.err) < 0) {
        vg_buf_free(&w.b);
        return NULL;
    }
    vg_buf_free(&w.b);
    return out;
}

char *sched_view_explain(const struct sched_state *s, const char *key)
{
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    const struct sched_verdict *v = sched_map_get(&s->verdicts, key);
    bool pending = sched_map_get(&s->pending, key) != NULL;
    if (p == NULL && v == NULL && !pending)
        return NULL;
    const char *state = p != NULL ? (p->assumed ? "assumed" : "bound") : "pending";
    const char *slash = strchr(key, '/');
    VG_AUTO_JSON json_t *o = json_pack(
        "{s:s%, s:s, s:s, s:b}", "namespace", key, slash != NULL ? (size_t)(slash - key) : 0, "pod",
        slash != NULL ? slash + 1 : key, "state", state, "waiting", pending);
    json_object_set_new(
        o, "node", p != NULL && p->node_name[0] != '\0' ? json_string(p->node_name) : json_null());
    json_t *decision = p != NULL && p->decision != NULL ? json_loads(p->decision, 0, NULL) : NULL;
    json_object_set_new(o, "decision", decision != NULL ? decision : json_null());
    json_object_set_new(o, "blocking", json_boolean(p != NULL && p->blocking));
    json_object_set_new(o, "lastFilter", v != NULL ? verdict_json(v) : json_null());
    json_object_set_new(o, "policy", json_string(place_policy_name(s->opt.policy)));
    return json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- /ui/explain's query --------------------------------------------------------------- */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A DNS-1123 name as Kubernetes allows for namespaces and pods. */
static bool k8s_name(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

/* The percent-decoded value of [v, end) into out (size bytes); -EINVAL on a bad escape
 * or one that does not fit. */
static int decode_value(const char *v, const char *end, char *out, size_t size, size_t *len,
                        struct vg_err *err)
{
    size_t o = 0;
    while (v < end) {
        char c = *v++;
        if (c == '%') {
            int hi = end - v >= 2 ? hexval(v[0]) : -1, lo = end - v >= 2 ? hexval(v[1]) : -1;
            if (hi < 0 || lo < 0)
                return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: a bad %%-escape in the query");
            c = (char)(hi * 16 + lo);
            v += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (o + 1 >= size)
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain: pod and namespace must be Kubernetes names "
                              "(1 to 253 lowercase letters, digits, '-' and '.')");
        out[o++] = c;
    }
    out[o] = '\0';
    *len = o;
    return 0;
}

int sched_view_explain_key(const char *query, char *key, size_t size, struct vg_err *err)
{
    static const char names_msg[] = "vgpu: /ui/explain: pod and namespace must be Kubernetes "
                                    "names (1 to 253 lowercase letters, digits, '-' and '.')";
    if (query == NULL || query[0] == '\0')
        return vg_err_set(err, -EINVAL,
                          "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                          "\"default\")");
    size_t qlen = strlen(query);
    if (qlen > SCHED_VIEW_QUERY_MAX)
        return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: the query is over %d bytes",
                          SCHED_VIEW_QUERY_MAX);
    char pod[256] = "", ns[256] = "";
    size_t pod_len = 0, ns_len = 0;
    bool have_pod = false, have_ns = false;
    const char *p = query, *end = query + qlen;
    while (p <= end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *stop = amp != NULL ? amp : end;
        const char *eq = memchr(p, '=', (size_t)(stop - p));
        if (eq == NULL)
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                              "\"default\")");
        size_t klen = (size_t)(eq - p);
        bool is_pod = klen == 3 && memcmp(p, "pod", 3) == 0;
        bool is_ns = klen == 9 && memcmp(p, "namespace", 9) == 0;
        if (!is_pod && !is_ns) {
            char shown[65];
            size_t n = klen < 64 ? klen : 64;
            for (size_t i = 0; i < n; i++)
                shown[i] = p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' ? p[i] : '?';
            shown[n] = '\0';
            return vg_err_set(err, -EINVAL,
                              "vgpu: /ui/explain: unknown parameter \"%s\" (pod and namespace "
                              "only)",
                              shown);
        }
        if ((is_pod && have_pod) || (is_ns && have_ns))
            return vg_err_set(err, -EINVAL, "vgpu: /ui/explain: %s given twice",
                              is_pod ? "pod" : "namespace");
        int rc = decode_value(eq + 1, stop, is_pod ? pod : ns, sizeof pod,
                              is_pod ? &pod_len : &ns_len, err);
        if (rc < 0)
            return rc;
        *(is_pod ? &have_pod : &have_ns) = true;
        if (amp == NULL)
            break;
        p = amp + 1;
    }
    if (!have_pod)
        return vg_err_set(err, -EINVAL,
                          "vgpu: /ui/explain needs ?pod=NAME (and &namespace=NS, default "
                          "\"default\")");
    if (!have_ns) {
        memcpy(ns, "default", 8);
        ns_len = 7;
    }
    if (!k8s_name(pod, pod_len) || !k8s_name(ns, ns_len))
        return vg_err_set(err, -EINVAL, "%s", names_msg);
    if (vg_snprintf(key, size, "%s/%s", ns, pod) < 0)
        return vg_err_set(err, -EINVAL, "%s", names_msg);
    return 0;
}
