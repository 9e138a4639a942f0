#define _GNU_SOURCE /* strcasestr */
/* Requests: HAMi's defaulting, validation, and the per-card and per-node filters. */
#include <ctype.h>
#include <errno.h>
#include <string.h>

#include "base/str.h"
#include "placement/internal.h"

int place_request_from_hami(const struct place_hami_resources *res,
                            const struct place_hami_defaults *defaults, struct place_request *out,
                            struct vg_err *err)
{
    struct place_hami_defaults chart = {
        .default_memory = 0, .default_cores = 0, .default_gpu_num = 1};
    if (defaults == NULL)
        defaults = &chart;
    if (res->gpumem_percent > 100)
        return vg_err_set(err, -EINVAL, "nvidia.com/gpumem-percentage %lld is above 100",
                          (long long)res->gpumem_percent);
    if (res->gpumem > (int64_t)INT32_MAX)
        return vg_err_set(err, -EINVAL, "nvidia.com/gpumem %lld is out of range",
                          (long long)res->gpumem);
    if (res->gpu == 0 ||
        (res->gpu < 0 && res->gpumem < 0 && res->gpumem_percent < 0 && res->gpucores < 0)) {
        out->gpu_count = 0; /* no GPU asked: not a HAMi container */
        return 0;
    }
    int64_t count = res->gpu;
    if (count < 0) {
        /* Webhook rule 1: a memory or cores key alone adds defaultGPUNum cards. */
        if (defaults->default_gpu_num <= 0)
            return vg_err_set(err, -EINVAL, "GPU memory or cores without nvidia.com/gpu");
        count = defaults->default_gpu_num;
    }
    if (count > PLACE_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "nvidia.com/gpu %lld is above %d", (long long)count,
                          PLACE_MAX_GPUS);
    out->gpu_count = (uint32_t)count;
    out->gpu_mem_mib = 0;
    out->gpu_mem_pct = 0;
    /* The webhook looks at the keys the user wrote, not at defaultMemory. */
    bool partial_memory = res->gpumem > 0 || (res->gpumem_percent > 0 && res->gpumem_percent < 100);
    if (res->gpumem > 0) {
        out->gpu_mem_mib = (uint64_t)res->gpumem;
    } else if (res->gpumem_percent > 0) {
        out->gpu_mem_pct = (uint32_t)res->gpumem_percent;
    } else if (defaults->default_memory > 0) {
        out->gpu_mem_mib = (uint64_t)defaults->default_memory;
    } else {
        out->gpu_mem_pct = 100; /* neither key: the whole card's memory */
    }
    int64_t cores = res->gpucores;
    if (cores < 0) {
        /* Webhook rule 2 (HAMi >= 2.7): a full-memory card without cores is exclusive. */
        cores = partial_memory ? defaults->default_cores : 100;
        if (cores < 0)
            cores = 0;
    }
    if (cores > 100)
        cores = 100;
    out->gpu_milli = (uint32_t)cores * 10;
    /* HAMi's Fit rejects a used card for cores == 100: the card is held alone. */
    out->exclusive = cores == 100;
    return 0;
}

int place_request_resolve(const struct place_cluster *c, struct place_request *r,
                          struct vg_err *err)
{
    if (r->gpu_count > PLACE_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "request for %u GPUs, at most %d", r->gpu_count,
                          PLACE_MAX_GPUS);
    if (r->gpu_milli > PLACE_GPU_MILLI)
        return vg_err_set(err, -EINVAL, "GPU compute share %u milli is above 1000", r->gpu_milli);
    if (r->gpu_mem_pct > 100)
        return vg_err_set(err, -EINVAL, "GPU memory share %u%% is above 100", r->gpu_mem_pct);
    if (r->type_include_count > PLACE_MAX_LIST || r->type_exclude_count > PLACE_MAX_LIST ||
        r->uuid_include_count > PLACE_MAX_LIST || r->uuid_exclude_count > PLACE_MAX_LIST ||
        r->selector_count > PLACE_MAX_LABELS)
        return vg_err_set(err, -EINVAL, "list longer than %d entries", PLACE_MAX_LIST);
    uint64_t mask = 0;
    for (size_t m = 0; m < c->model_count; m++) {
        bool ok = r->type_include_count == 0;
        for (uint8_t i = 0; i < r->type_include_count && !ok; i++)
            ok = r->type_exact ? strcmp(c->models[m], r->type_include[i]) == 0
                               : strcasestr(c->models[m], r->type_include[i]) != NULL;
        for (uint8_t i = 0; i < r->type_exclude_count && ok; i++)
            ok = !(r->type_exact ? strcmp(c->models[m], r->type_exclude[i]) == 0
                                 : strcasestr(c->models[m], r->type_exclude[i]) != NULL);
        if (ok)
            mask |= 1ULL << m;
    }
    r->model_mask = mask;
    if (r->gpu_count == 0)
        r->pod_class = 0;
    else if (r->gpu_count == 1 && r->gpu_milli < PLACE_GPU_MILLI)
        r->pod_class = 0; /* share-gpu */
    else if (r->gpu_count == 1)
        r->pod_class = 1;
    else if (r->gpu_count == 2)
        r->pod_class = 2;
    else if (r->gpu_count <= 4)
        r->pod_class = 3;
    else
        r->pod_class = 4;
    return 0;
}

uint64_t place_gpu_mem_need(const struct place_gpu *g, const struct place_request *r)
{
    if (r->gpu_mem_mib > 0)
        return r->gpu_mem_mib;
    if (r->gpu_mem_pct > 0)
        return g->mem_total_mib * r->gpu_mem_pct / 100;
    return 0;
}

bool place_gpu_usable(const struct place_gpu *g, const struct place_request *r)
{
    if (!g->healthy || g->exclusive || !(r->model_mask >> g->model & 1))
        return false;
    if (r->exclusive && g->tenants > 0)
        return false;
    if (r->avoid_high && g->high > 0)
        return false;
    if (g->slots != 0 && g->tenants >= g->slots)
        return false;
    if (g->milli_used > PLACE_GPU_MILLI)
        return false; /* a card edited by hand past its capacity */
    uint32_t free_milli = PLACE_GPU_MILLI - g->milli_used;
    if (free_milli < r->gpu_milli || (free_milli == 0 && r->gpu_milli == 0))
        return false;
    /* Memory is checked only on cards whose memory is modelled. */
    if (g->mem_total_mib > 0 && g->mem_total_mib - g->mem_used_mib < place_gpu_mem_need(g, r))
        return false;
    if (r->uuid_include_count > 0) {
        bool listed = false;
        for (uint8_t i = 0; i < r->uuid_include_count && !listed; i++)
            listed = strcmp(g->uuid, r->uuid_include[i]) == 0;
        if (!listed)
            return false;
    }
    for (uint8_t i = 0; i < r->uuid_exclude_count; i++)
        if (strcmp(g->uuid, r->uuid_exclude[i]) == 0)
            return false;
    return true;
}

bool place_node_resources_fit(const struct place_node *n, const struct place_request *r)
{
    if (n->cpu_total - n->cpu_used < r->cpu_milli || n->mem_total - n->mem_used < r->mem_mib)
        return false;
    if (r->gpu_count > n->gpu_count)
        return false;
    for (uint8_t s = 0; s < r->selector_count; s++) {
        bool found = false;
        for (uint8_t l = 0; l < n->label_count && !found; l++)
            found = strcmp(n->labels[l].key, r->selector[s].key) == 0 &&
                    strcmp(n->labels[l].value, r->selector[s].value) == 0;
        if (!found)
            return false;
    }
    return true;
}
