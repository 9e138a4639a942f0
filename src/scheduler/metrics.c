/* The scheduler's allocation series (metrics.h). The label sets of every GPU are built
 * once per scrape and reused by each per-GPU family: a cluster of thousands of GPUs is
 * one escaping pass per label kind, then copies. */
#include "scheduler/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/str.h"
#include "scheduler/internal.h"

/* The labels of GPU g on node i: HAMi's (hami, legacy), or dcgm-exporter's Hostname, UUID
 * and gpu with model_name (vgpu_*: promtool's lint refuses dcgm's camel-case modelName). */
enum labels { L_HAMI, L_LEGACY, L_DCGM, L_KINDS };

static void gpu_labels(struct vg_prom *p, const struct sched_state *s, size_t i, unsigned g,
                       enum labels l)
{
    const struct place_node *n = &s->cluster->nodes[i];
    const struct place_gpu *gpu = &n->gpus[g];
    const char *model = gpu->model < s->cluster->model_count ? s->cluster->models[gpu->model] : "";
    if (l == L_HAMI) {
        vg_prom_label(p, "node", n->name);
        vg_prom_label(p, "device_uuid", gpu->uuid);
        vg_prom_label_u64(p, "device_index", g);
        vg_prom_label(p, "device_type", model);
        vg_prom_label(p, "zone", "vGPU");
    } else if (l == L_LEGACY) {
        vg_prom_label(p, "nodeid", n->name);
        vg_prom_label(p, "deviceuuid", gpu->uuid);
        vg_prom_label_u64(p, "deviceidx", g);
        vg_prom_label(p, "devicetype", model);
        vg_prom_label(p, "zone", "vGPU");
    } else {
        vg_prom_label(p, "Hostname", n->name);
        vg_prom_label(p, "UUID", gpu->uuid);
        vg_prom_label_u64(p, "gpu", g);
        vg_prom_label(p, "model_name", model);
    }
}

/* Every GPU's label set of one kind, built on first use: text, and each GPU's (flat
 * index) offset and length in it. */
struct label_cache {
    struct vg_buf text[L_KINDS];
    size_t *at[L_KINDS], *len[L_KINDS];
};

static void labels_put(struct vg_prom *p, struct label_cache *lc, const struct sched_state *s,
                       enum labels l, size_t flat)
{
    if (lc->at[l] == NULL) {
        const struct place_cluster *c = s->cluster;
        size_t total = 0;
        for (size_t i = 0; i < c->node_count; i++)
            total += c->nodes[i].gpu_count;
        vg_buf_init(&lc->text[l], "metric labels", (size_t)1 << 30);
        lc->at[l] = xcalloc(total + 1, sizeof(size_t));
        lc->len[l] = xcalloc(total + 1, sizeof(size_t));
        struct vg_prom set;
        vg_prom_init(&set, &lc->text[l], p->err);
        size_t f = 0;
        for (size_t i = 0; i < c->node_count; i++)
            for (unsigned g = 0; g < c->nodes[i].gpu_count; g++, f++) {
                lc->at[l][f] = lc->text[l].len;
                vg_prom_set_begin(&set);
                gpu_labels(&set, s, i, g, l);
                lc->len[l][f] = lc->text[l].len - lc->at[l][f];
            }
        int rc = vg_prom_done(&set);
        if (rc < 0 && p->rc == 0)
            p->rc = rc;
    }
    if (p->rc == 0)
        vg_prom_label_set(p, lc->text[l].data + lc->at[l][flat], lc->len[l][flat]);
}

static void labels_free(struct label_cache *lc)
{
    for (int l = 0; l < L_KINDS; l++) {
        vg_buf_free(&lc->text[l]);
        free(lc->at[l]);
        free(lc->len[l]);
    }
}

struct out {
    struct vg_prom *p;
    const struct sched_state *s;
    struct label_cache labels;
};

/* One gauge per GPU: value(s, i, g) under the name, with the labels l. */
typedef double (*gpu_value)(const struct sched_state *s, size_t i, unsigned g);

/* HAMi's allocated-memory gauges add to the GPU's labels cores="100" under the name
 * `cores`, and with `memory_limit` the GPU's memory in MiB under that name. */
static void gpu_family(struct out *o, const char *name, const char *help, enum labels l,
                       gpu_value value, const char *cores, const char *memory_limit)
{
    const struct place_cluster *c = o->s->cluster;
    vg_prom_family(o->p, name, "gauge", help);
    size_t flat = 0;
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
            vg_prom_sample(o->p, name);
            labels_put(o->p, &o->labels, o->s, l, flat++);
            if (cores != NULL)
                vg_prom_label(o->p, cores, "100");
            if (memory_limit != NULL)
                vg_prom_label_u64(o->p, memory_limit, c->nodes[i].gpus[g].mem_total_mib);
            vg_prom_double(o->p, value(o->s, i, g));
        }
}

static void per_gpu(struct out *o, const char *name, const char *help, enum labels l,
                    gpu_value value)
{
    gpu_family(o, name, help, l, value, NULL, NULL);
}

static double v_mem_total(const struct sched_state *s, size_t i, unsigned g)
{
    return (double)(s->cluster->nodes[i].gpus[g].mem_total_mib * SCHED_MIB);
}
static double v_mem_used(const struct sched_state *s, size_t i, unsigned g)
{
    return (double)(s->cluster->nodes[i].gpus[g].mem_used_mib * SCHED_MIB);
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
    struct sched_gpu_view v;
    sched_gpu_view(s, i, g, &v);
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
    struct sched_gpu_view v;
    sched_gpu_view(s, i, g, &v);
    return v.stranded_compute;
}
static double v_stranded_mem(const struct sched_state *s, size_t i, unsigned g)
{
    struct sched_gpu_view v;
    sched_gpu_view(s, i, g, &v);
    return (double)v.stranded_mem;
}

static void per_gpu_allocated(struct out *o, const char *name, const char *help, enum labels l,
                              const char *cores, const char *memory_limit)
{
    gpu_family(o, name, help, l, v_mem_used, cores, memory_limit);
}

struct share_out {
    struct out *o;
    int which; /* 0 hami memory, 1 hami cores, 2 vgpu memory, 3 vgpu compute, 4/5 legacy */
    const char *name;
};

/* One share's sample; the pod key "ns/name" gives the namespace and pod labels. */
static void share_metric(void *arg, const struct sched_share_ref *r)
{
    struct share_out *so = arg;
    struct vg_prom *p = so->o->p;
    const struct place_node *n = &so->o->s->cluster->nodes[r->p->node];
    const char *key = r->p->key, *slash = strchr(key, '/');
    size_t ns_len = slash != NULL ? (size_t)(slash - key) : 0;
    const char *pod = slash != NULL ? slash + 1 : key;
    const char *uuid = n->gpus[r->g].uuid;
    uint64_t bytes = r->mem_mib * SCHED_MIB;
    vg_prom_sample(p, so->name);
    /* Families 0, 1 and 4, 5 carry the same labels under two spellings (the even one
     * the bytes, the odd one the cores). */
    static const char *const spelling[2][5] = {
        {"namespace", "node", "pod", "container_index", "device_uuid"},
        {"podnamespace", "nodename", "podname", "containeridx", "deviceuuid"},
    };
    switch (so->which) {
    case 0:
    case 1:
    case 4:
    case 5: {
        const char *const *l = spelling[so->which >= 4];
        vg_prom_label_n(p, l[0], key, ns_len);
        vg_prom_label(p, l[1], n->name);
        vg_prom_label(p, l[2], pod);
        vg_prom_label_u64(p, l[3], r->k);
        vg_prom_label(p, l[4], uuid);
        vg_prom_label(p, "zone", "vGPU");
        vg_prom_u64(p, so->which % 2 == 0 ? bytes : r->cores);
        break;
    }
    default:
        vg_prom_label_n(p, "namespace", key, ns_len);
        vg_prom_label(p, "pod", pod);
        vg_prom_label(p, "container", r->name);
        vg_prom_label(p, "Hostname", n->name);
        vg_prom_label(p, "UUID", uuid);
        vg_prom_label(p, "state", r->p->assumed ? "assumed" : "bound");
        vg_prom_double(p, so->which == 2 ? (double)bytes : r->cores / 100.0);
    }
}

static void per_share(struct out *o, int which, const char *name, const char *help)
{
    vg_prom_family(o->p, name, "gauge", help);
    struct share_out so = {o, which, name};
    sched_each_share(o->s, share_metric, &so);
}

static void cluster_gauge(struct vg_prom *p, const char *name, const char *help, double v)
{
    vg_prom_family(p, name, "gauge", help);
    vg_prom_sample(p, name);
    vg_prom_double(p, v);
}

void sched_metrics_allocation(struct vg_prom *p, const struct sched_state *s, bool legacy)
{
    struct out o = {.p = p, .s = s};
    const struct place_cluster *c = s->cluster;

    /* HAMi's names, labels and values (its scheduler's cmd/scheduler/metrics.go): core
     * figures in percent of a card, as HAMi writes them. */
    per_gpu(&o, "hami_gpu_memory_limit_bytes", "Device memory limit for a certain GPU.", L_HAMI,
            v_mem_total);
    per_gpu(&o, "hami_gpu_core_limit_ratio",
            "Device core limit for a certain GPU (percent of the card, HAMi's scale).", L_HAMI,
            v_hundred);
    per_gpu_allocated(&o, "hami_gpu_memory_allocated_bytes",
                      "Device memory allocated for a certain GPU.", L_HAMI, "device_cores", NULL);
    per_gpu(&o, "hami_gpu_core_allocated_ratio",
            "Device core allocated for a certain GPU (percent of the card, HAMi's scale).", L_HAMI,
            v_core_percent);
    per_gpu_allocated(&o, "hami_node_gpu_overview",
                      "GPU overview on a certain node: memory allocated, in bytes.", L_HAMI,
                      "device_cores", "device_memory_limit");
    per_gpu(&o, "hami_node_gpu_memory_allocated_ratio",
            "GPU memory allocated over the GPU's memory (0 to 1).", L_HAMI, v_mem_ratio);
    per_share(&o, 0, "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated from a container.");
    per_share(&o, 1, "hami_vgpu_core_allocated_ratio",
              "vGPU core allocated from a container (percent of the card, HAMi's scale).");

    /* vgpu's own, in base units, with dcgm-exporter's label names. */
    per_gpu(&o, "vgpu_scheduler_gpu_memory_total_bytes",
            "GPU memory the inventory offers, in bytes.", L_DCGM, v_mem_total);
    per_gpu(&o, "vgpu_scheduler_gpu_memory_allocated_bytes",
            "GPU memory handed out by decisions and promises, in bytes.", L_DCGM, v_mem_used);
    per_gpu(&o, "vgpu_scheduler_gpu_compute_allocated_ratio",
            "GPU compute handed out (plus any the inventory withholds), 0 to 1.", L_DCGM,
            v_compute);
    per_gpu(&o, "vgpu_scheduler_gpu_containers", "Containers placed on the GPU.", L_DCGM,
            v_tenants);
    per_gpu(&o, "vgpu_scheduler_gpu_slots", "Most containers the GPU takes at once (0: no bound).",
            L_DCGM, v_slots);
    per_gpu(&o, "vgpu_scheduler_gpu_healthy", "1 when the inventory says the GPU is healthy.",
            L_DCGM, v_healthy);
    per_gpu(&o, "vgpu_scheduler_gpu_blocked",
            "1 when a bound pod that does not fit holds the GPU (it takes no new pods).", L_DCGM,
            v_blocked);
    per_gpu(&o, "vgpu_scheduler_gpu_stranded_compute_ratio",
            "Unallocated compute on a partly used GPU (it holds a container), 0 to 1.", L_DCGM,
            v_stranded);
    per_gpu(&o, "vgpu_scheduler_gpu_stranded_memory_bytes",
            "Unallocated memory on a partly used GPU, in bytes.", L_DCGM, v_stranded_mem);

    struct sched_totals all = {0};
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
        vg_prom_family(p, node_names[m], "gauge", node_help[m]);
        for (size_t i = 0; i < c->node_count; i++) {
            struct sched_totals t = {0};
            sched_node_totals(s, i, &t);
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
                v = sched_frag_ratio(&t);
                break;
            }
            vg_prom_sample(p, node_names[m]);
            vg_prom_label(p, "Hostname", c->nodes[i].name);
            vg_prom_double(p, v);
            if (m == 0 && s->nodes[i].present)
                sched_totals_add(&all, &t);
        }
    }
    cluster_gauge(p, "vgpu_scheduler_cluster_compute_free_gpus",
                  "Unallocated compute over the nodes the API lists, in GPUs.",
                  all.compute_total - all.compute_used);
    cluster_gauge(p, "vgpu_scheduler_cluster_stranded_compute_gpus",
                  "Unallocated compute on partly used GPUs, in GPUs.", all.stranded);
    vg_prom_family(p, "vgpu_scheduler_cluster_stranded_memory_bytes", "gauge",
                   "Unallocated memory on partly used GPUs, in bytes.");
    vg_prom_sample(p, "vgpu_scheduler_cluster_stranded_memory_bytes");
    vg_prom_u64(p, all.stranded_mem);
    cluster_gauge(p, "vgpu_scheduler_cluster_fragmentation_ratio",
                  "Stranded compute over unallocated compute in the cluster, 0 to 1.",
                  sched_frag_ratio(&all));
    vg_prom_family(p, "vgpu_scheduler_pending_pods", "gauge",
                   "Pods the pod watch shows waiting for a node (GPU or not).");
    vg_prom_sample(p, "vgpu_scheduler_pending_pods");
    vg_prom_u64(p, sched_pending_count(s));
    per_share(&o, 2, "vgpu_scheduler_container_memory_allocated_bytes",
              "GPU memory handed to a container on a GPU, in bytes.");
    per_share(&o, 3, "vgpu_scheduler_container_compute_allocated_ratio",
              "GPU compute handed to a container on a GPU, 0 to 1 (0: no compute limit).");

    if (legacy) { /* the names promtool's lint refuses */
        per_gpu(&o, "hami_gpu_shared_count", "Number of containers sharing this GPU.", L_HAMI,
                v_tenants);
        per_gpu(&o, "GPUDeviceMemoryLimit", "Device memory limit for a certain GPU.", L_LEGACY,
                v_mem_total);
        per_gpu(&o, "GPUDeviceCoreLimit", "Device memory core limit for a certain GPU.", L_LEGACY,
                v_hundred);
        per_gpu_allocated(&o, "GPUDeviceMemoryAllocated",
                          "Device memory allocated for a certain GPU.", L_LEGACY, "devicecores",
                          NULL);
        per_gpu(&o, "GPUDeviceSharedNum", "Number of containers sharing this GPU.", L_LEGACY,
                v_tenants);
        per_gpu(&o, "GPUDeviceCoreAllocated", "Device core allocated for a certain GPU.", L_LEGACY,
                v_core_percent);
        per_gpu_allocated(&o, "nodeGPUOverview", "GPU overview on a certain node.", L_LEGACY,
                          "devicecores", "devicememorylimit");
        per_gpu(&o, "nodeGPUMemoryPercentage", "GPU Memory Allocated Percentage on a certain GPU.",
                L_LEGACY, v_mem_ratio);
        per_share(&o, 4, "vGPUMemoryAllocated", "vGPU memory allocated from a container.");
        per_share(&o, 5, "vGPUCoreAllocated", "vGPU core allocated from a container.");
    }
    labels_free(&o.labels);
}

static void labelled(struct vg_prom *p, const char *name, const char *label, const char *value,
                     uint64_t v)
{
    vg_prom_sample(p, name);
    vg_prom_label(p, label, value);
    vg_prom_u64(p, v);
}

/* The per-GPU series the daemon has exported from the start (node and uuid labels). */
static void gpu_series(struct vg_prom *p, const struct place_cluster *c, const char *name,
                       const char *help, int which)
{
    vg_prom_family(p, name, "gauge", help);
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++) {
            const struct place_gpu *gpu = &c->nodes[i].gpus[g];
            vg_prom_sample(p, name);
            vg_prom_label(p, "node", c->nodes[i].name);
            vg_prom_label(p, "uuid", gpu->uuid);
            vg_prom_u64(p, which == 0   ? gpu->mem_used_mib
                           : which == 1 ? gpu->milli_used / 10
                                        : gpu->tenants);
        }
}

void sched_metrics_daemon(struct vg_prom *p, const struct sched_state *s,
                          const struct sched_metrics_daemon *d)
{
    struct sched_stats st;
    sched_state_stats(s, &st);
    vg_prom_family(p, "vgpu_scheduler_nodes", "gauge",
                   "Nodes known, and nodes with a valid GPU inventory.");
    labelled(p, "vgpu_scheduler_nodes", "inventory", "any", st.nodes);
    labelled(p, "vgpu_scheduler_nodes", "inventory", "valid", st.nodes_with_inventory);
    vg_prom_family(p, "vgpu_scheduler_pods", "gauge", "Pods holding GPU shares, by state.");
    labelled(p, "vgpu_scheduler_pods", "state", "assumed", st.assumed);
    labelled(p, "vgpu_scheduler_pods", "state", "bound", st.bound);
    vg_prom_family(p, "vgpu_scheduler_decisions_total", "counter", "Filter outcomes.");
    labelled(p, "vgpu_scheduler_decisions_total", "result", "fit", st.filter_fits);
    labelled(p, "vgpu_scheduler_decisions_total", "result", "unschedulable",
             st.filter_unschedulable);
    vg_prom_family(p, "vgpu_scheduler_binds_total", "counter", "Bind calls, by result.");
    labelled(p, "vgpu_scheduler_binds_total", "result", "ok",
             st.binds > st.bind_failures ? st.binds - st.bind_failures : 0);
    labelled(p, "vgpu_scheduler_binds_total", "result", "error", st.bind_failures);
    vg_prom_family(p, "vgpu_scheduler_assumptions_expired_total", "counter",
                   "Filter promises dropped because no bind came.");
    vg_prom_sample(p, "vgpu_scheduler_assumptions_expired_total");
    vg_prom_u64(p, st.expired);
    vg_prom_family(p, "vgpu_scheduler_priority_placements_total", "counter",
                   "High-priority pods placed (nvidia.com/priority 0), by whether a GPU of "
                   "theirs already held another one (shared) or not (apart).");
    labelled(p, "vgpu_scheduler_priority_placements_total", "gpu", "apart", st.priority_apart);
    labelled(p, "vgpu_scheduler_priority_placements_total", "gpu", "shared", st.priority_shared);
    vg_prom_family(p, "vgpu_scheduler_resizes_total", "counter",
                   "Live resize requests answered, and resizes written to their pods after a "
                   "restart.");
    labelled(p, "vgpu_scheduler_resizes_total", "result", "done", d->resizes_done);
    labelled(p, "vgpu_scheduler_resizes_total", "result", "refused", d->resizes_refused);
    labelled(p, "vgpu_scheduler_resizes_total", "result", "reconciled", d->resizes_reconciled);
    vg_prom_family(p, "vgpu_scheduler_errors_total", "counter", "Errors by kind.");
    const struct {
        const char *kind;
        uint64_t n;
    } errors[] = {
        {"bad_request", d->bad_requests},
        {"skipped_node", st.skipped_nodes},
        {"skipped_pod", st.skipped_pods},
        {"conflict", st.conflicts},
        {"api", d->api_errors},
        {"annotation_changed", st.annotation_changes},
        {"unauthorized", d->unauthorized},
        {"unknown_pod", st.unknown_pods},
        {"namespace_bound", st.namespace_bound},
    };
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; e++)
        labelled(p, "vgpu_scheduler_errors_total", "kind", errors[e].kind, errors[e].n);
    const char *const hist = "vgpu_scheduler_request_duration_seconds";
    vg_prom_family(p, hist, "histogram", "Time to answer an extender or webhook call.");
    for (size_t v = 0; v < d->verb_count; v++) {
        const struct sched_metrics_latency *h = &d->latency[v];
        uint64_t cum = 0;
        for (size_t i = 0; i < d->bucket_count; i++) {
            cum += h->counts[i];
            char le[32];
            (void)vg_snprintf(le, sizeof le, "%g", d->bounds[i]);
            vg_prom_sample(p, "vgpu_scheduler_request_duration_seconds_bucket");
            vg_prom_label(p, "verb", h->verb);
            vg_prom_label(p, "le", le);
            vg_prom_u64(p, cum);
        }
        vg_prom_sample(p, "vgpu_scheduler_request_duration_seconds_bucket");
        vg_prom_label(p, "verb", h->verb);
        vg_prom_label(p, "le", "+Inf");
        vg_prom_u64(p, h->count);
        /* In nanoseconds, exactly: the nine decimals the sum always had. */
        vg_prom_sample(p, "vgpu_scheduler_request_duration_seconds_sum");
        vg_prom_label(p, "verb", h->verb);
        vg_prom_fixed(p, h->sum > 0 ? (uint64_t)(h->sum * 1e9 + 0.5) : 0, 1000000000, 9);
        labelled(p, "vgpu_scheduler_request_duration_seconds_count", "verb", h->verb, h->count);
    }
    const struct place_cluster *c = sched_state_cluster(s);
    gpu_series(p, c, "vgpu_scheduler_gpu_memory_used_mib", "GPU memory handed out.", 0);
    gpu_series(p, c, "vgpu_scheduler_gpu_cores_used_percent",
               "GPU compute handed out (plus any the inventory withholds).", 1);
    gpu_series(p, c, "vgpu_scheduler_gpu_tenants", "Containers placed on each GPU.", 2);

    vg_prom_family(p, "vgpu_scheduler_connections", "gauge", "Connections held, by server.");
    for (size_t i = 0; i < d->server_count; i++)
        labelled(p, "vgpu_scheduler_connections", "server", d->servers[i].name,
                 d->servers[i].connections);
    vg_prom_family(p, "vgpu_scheduler_connections_closed_total", "counter",
                   "Connections closed or refused by the server's guard, by reason.");
    for (size_t i = 0; i < d->server_count; i++) {
        const struct sched_metrics_server *sv = &d->servers[i];
        const struct {
            const char *reason;
            uint64_t n;
        } rows[] = {{"timeout", sv->timed_out}, {"evicted", sv->evicted}, {"refused", sv->refused}};
        for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
            vg_prom_sample(p, "vgpu_scheduler_connections_closed_total");
            vg_prom_label(p, "server", sv->name);
            vg_prom_label(p, "reason", rows[r].reason);
            vg_prom_u64(p, rows[r].n);
        }
    }
    vg_prom_family(p, "vgpu_scheduler_accept_paused_total", "counter",
                   "Times accepting paused for want of file descriptors or memory.");
    for (size_t i = 0; i < d->server_count; i++)
        labelled(p, "vgpu_scheduler_accept_paused_total", "server", d->servers[i].name,
                 d->servers[i].accept_pause);
}
