/* Cluster model and the incremental summaries.
 *
 * Every summary in struct place_node is a pure function of the per-GPU state and the
 * metric mix, recomputed for the one node an allocate or release touches. Because the
 * fragmentation summary is an integer (weight·milli), releasing exactly undoes
 * allocating: the state after a round trip is bit-identical, which the tests check. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/str.h"
#include "placement/placement.h"

struct place_cluster *place_cluster_new(void)
{
    return vg_calloc(1, sizeof(struct place_cluster));
}

void place_cluster_free(struct place_cluster *c)
{
    if (c == NULL)
        return;
    free(c->nodes);
    free(c);
}

int place_cluster_model(struct place_cluster *c, const char *name, struct vg_err *err)
{
    for (size_t i = 0; i < c->model_count; i++)
        if (strcmp(c->models[i], name) == 0)
            return (int)i;
    if (c->model_count >= PLACE_MAX_MODELS)
        return vg_err_set(err, -ENOSPC, "more than %d GPU models", PLACE_MAX_MODELS);
    if (vg_strlcpy(c->models[c->model_count], name, PLACE_MODEL_MAX) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "GPU model name '%.20s...' longer than %d bytes",
                          name, PLACE_MODEL_MAX - 1);
    return (int)c->model_count++;
}

/* Recomputes one node's summaries and keeps the cluster totals in step. */
static void node_refresh(struct place_cluster *c, struct place_node *n)
{
    c->milli_used -= (uint64_t)n->gpu_count * PLACE_GPU_MILLI - n->free_milli;
    c->frag_total -= n->frag;
    uint32_t free_milli = 0;
    uint16_t free_gpus = 0;
    for (uint16_t g = 0; g < n->gpu_count; g++) {
        free_milli += PLACE_GPU_MILLI - n->gpus[g].milli_used;
        if (n->gpus[g].tenants == 0)
            free_gpus++;
    }
    n->free_milli = free_milli;
    n->free_gpus = free_gpus;
    n->frag = c->metric_mix != NULL ? place_frag_node(c->metric_mix, n) : 0;
    c->milli_used += (uint64_t)n->gpu_count * PLACE_GPU_MILLI - n->free_milli;
    c->frag_total += n->frag;
}

int place_cluster_add_node(struct place_cluster *c, const char *name, uint64_t cpu_milli,
                           uint64_t mem_mib, uint16_t gpu_count, const char *model,
                           uint64_t gpu_mem_mib, struct vg_err *err)
{
    if (gpu_count > PLACE_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "node %s: %u GPUs, at most %d supported", name, gpu_count,
                          PLACE_MAX_GPUS);
    if (c->node_count > (size_t)INT32_MAX - 1)
        return vg_err_set(err, -ENOSPC, "too many nodes");
    int model_index = 0;
    if (gpu_count > 0) {
        model_index = place_cluster_model(c, model != NULL ? model : "", err);
        if (model_index < 0)
            return vg_err_wrap(err, "node %s", name);
    }
    /* Ranks are int32_t: the count check above is the ceiling. */
    if (vg_array_grow(&c->nodes, &c->node_cap, c->node_count + 1, sizeof *c->nodes, INT32_MAX,
                      "node table", err) < 0)
        return vg_err_wrap(err, "adding node %s", name);
    struct place_node *n = &c->nodes[c->node_count];
    memset(n, 0, sizeof *n);
    if (vg_strlcpy(n->name, name, sizeof n->name) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "node name '%.20s...' longer than %d bytes", name,
                          PLACE_NAME_MAX - 1);
    n->cpu_total = cpu_milli;
    n->mem_total = mem_mib;
    n->gpu_count = gpu_count;
    n->model = (uint16_t)model_index;
    n->rank = (uint32_t)c->node_count;
    for (uint16_t g = 0; g < gpu_count; g++) {
        struct place_gpu *gpu = &n->gpus[g];
        gpu->model = (uint16_t)model_index;
        gpu->healthy = true;
        gpu->mem_total_mib = gpu_mem_mib;
        (void)vg_snprintf(gpu->uuid, sizeof gpu->uuid, "GPU-%s-%u", n->name, (unsigned)g);
    }
    /* The new node is free: account for its capacity, then its summaries. */
    c->milli_total += (uint64_t)gpu_count * PLACE_GPU_MILLI;
    c->gpu_count += gpu_count;
    n->free_milli = (uint32_t)gpu_count * PLACE_GPU_MILLI;
    c->node_count++;
    node_refresh(c, n);
    return (int)(c->node_count - 1);
}

void place_cluster_refresh(struct place_cluster *c)
{
    c->milli_total = c->milli_used = c->frag_total = c->gpu_count = 0;
    for (size_t i = 0; i < c->node_count; i++) {
        struct place_node *n = &c->nodes[i];
        if (n->gpu_count > 0)
            n->model = n->gpus[0].model;
        c->milli_total += (uint64_t)n->gpu_count * PLACE_GPU_MILLI;
        c->gpu_count += n->gpu_count;
        /* node_refresh subtracts the old contribution: start from a free node. */
        n->free_milli = (uint32_t)n->gpu_count * PLACE_GPU_MILLI;
        n->frag = 0;
        node_refresh(c, n);
    }
}

void place_cluster_set_metric_mix(struct place_cluster *c, const struct place_mix *mix)
{
    c->metric_mix = mix;
    place_cluster_refresh(c);
}

static int check_decision(const struct place_cluster *c, const struct place_request *r,
                          const struct place_decision *d, struct vg_err *err)
{
    if (d->node < 0 || (size_t)d->node >= c->node_count)
        return vg_err_set(err, -EINVAL, "decision names no node");
    const struct place_node *n = &c->nodes[d->node];
    if (d->gpu_count != r->gpu_count)
        return vg_err_set(err, -EINVAL, "decision has %u GPUs, request %u", d->gpu_count,
                          r->gpu_count);
    for (uint16_t i = 0; i < d->gpu_count; i++) {
        if (d->gpus[i] >= n->gpu_count)
            return vg_err_set(err, -EINVAL, "node %s has no GPU %u", n->name, d->gpus[i]);
        for (uint16_t j = 0; j < i; j++)
            if (d->gpus[j] == d->gpus[i])
                return vg_err_set(err, -EINVAL, "GPU %u named twice", d->gpus[i]);
    }
    return 0;
}

int place_allocate(struct place_cluster *c, const struct place_request *r,
                   const struct place_decision *d, struct vg_err *err)
{
    int rc = check_decision(c, r, d, err);
    if (rc < 0)
        return rc;
    struct place_node *n = &c->nodes[d->node];
    if (n->cpu_total - n->cpu_used < r->cpu_milli || n->mem_total - n->mem_used < r->mem_mib)
        return vg_err_set(err, -EINVAL, "node %s lacks CPU or memory", n->name);
    for (uint16_t i = 0; i < d->gpu_count; i++) {
        const struct place_gpu *g = &n->gpus[d->gpus[i]];
        if (PLACE_GPU_MILLI - g->milli_used < d->milli || g->exclusive ||
            (d->exclusive && g->tenants > 0) ||
            (g->mem_total_mib > 0 && g->mem_total_mib - g->mem_used_mib < d->mem_mib[i]))
            return vg_err_set(err, -EINVAL, "GPU %u of node %s cannot take the request", d->gpus[i],
                              n->name);
    }
    n->cpu_used += r->cpu_milli;
    n->mem_used += r->mem_mib;
    for (uint16_t i = 0; i < d->gpu_count; i++) {
        struct place_gpu *g = &n->gpus[d->gpus[i]];
        g->milli_used += d->milli;
        g->mem_used_mib += d->mem_mib[i];
        g->tenants++;
        if (r->high)
            g->high++;
        if (d->exclusive)
            g->exclusive = 1;
    }
    if (d->gpu_count > 0)
        n->class_pods[d->pod_class]++;
    node_refresh(c, n);
    return 0;
}

int place_release(struct place_cluster *c, const struct place_request *r,
                  const struct place_decision *d, struct vg_err *err)
{
    int rc = check_decision(c, r, d, err);
    if (rc < 0)
        return rc;
    struct place_node *n = &c->nodes[d->node];
    if (n->cpu_used < r->cpu_milli || n->mem_used < r->mem_mib ||
        (d->gpu_count > 0 && n->class_pods[d->pod_class] == 0))
        return vg_err_set(err, -EINVAL, "node %s does not hold this request", n->name);
    for (uint16_t i = 0; i < d->gpu_count; i++) {
        const struct place_gpu *g = &n->gpus[d->gpus[i]];
        if (g->tenants == 0 || g->milli_used < d->milli || g->mem_used_mib < d->mem_mib[i] ||
            (d->exclusive && !g->exclusive))
            return vg_err_set(err, -EINVAL, "GPU %u of node %s does not hold this request",
                              d->gpus[i], n->name);
    }
    n->cpu_used -= r->cpu_milli;
    n->mem_used -= r->mem_mib;
    for (uint16_t i = 0; i < d->gpu_count; i++) {
        struct place_gpu *g = &n->gpus[d->gpus[i]];
        g->milli_used -= d->milli;
        g->mem_used_mib -= d->mem_mib[i];
        g->tenants--;
        if (r->high && g->high > 0)
            g->high--;
        if (d->exclusive)
            g->exclusive = 0;
    }
    if (d->gpu_count > 0)
        n->class_pods[d->pod_class]--;
    node_refresh(c, n);
    return 0;
}
