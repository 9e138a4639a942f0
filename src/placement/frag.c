/* Task-type mixes and FGD's fragmentation measure (research/fgd-benchmark.md §5).
 *
 * F_n(m) is the node's unallocated GPU share that task type m could not use: all of it
 * when m cannot run on the node, otherwise the cards too small for m. Summed over the
 * mix as Σ weight·milli, an integer, so incremental updates are exact. The evaluation
 * sorts the free shares once and walks them per type: with f sorted descending and
 * prefix sums P, "m fits" is f[k-1] >= d and the usable part is P[count(f >= d)]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "placement/placement.h"

void place_mix_init(struct place_mix *m)
{
    memset(m, 0, sizeof *m);
}

void place_mix_clear(struct place_mix *m)
{
    free(m->types);
    place_mix_init(m);
}

int place_mix_add(struct place_mix *m, const struct place_mix_type *t)
{
    for (size_t i = 0; i < m->count; i++) {
        struct place_mix_type *x = &m->types[i];
        if (x->cpu_milli == t->cpu_milli && x->gpu_count == t->gpu_count &&
            x->gpu_milli == t->gpu_milli && x->model_mask == t->model_mask) {
            x->weight += t->weight;
            m->total_weight += t->weight;
            return 0;
        }
    }
    if (m->count == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 32;
        struct place_mix_type *types = realloc(m->types, cap * sizeof *types);
        if (types == NULL)
            return -ENOMEM;
        m->types = types;
        m->cap = cap;
    }
    m->types[m->count++] = *t;
    m->total_weight += t->weight;
    return 0;
}

int place_mix_observe(struct place_mix *m, const struct place_request *r)
{
    struct place_mix_type t = {
        .cpu_milli = r->cpu_milli,
        .gpu_count = r->gpu_count,
        .gpu_milli = r->gpu_count > 0 ? r->gpu_milli : 0,
        .model_mask =
            r->type_include_count + r->type_exclude_count > 0 ? r->model_mask : UINT64_MAX,
        .weight = 1,
    };
    return place_mix_add(m, &t);
}

static int typical_order(const void *a, const void *b)
{
    const struct place_mix_type *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli > y->cpu_milli ? -1 : 1;
    if (x->gpu_milli != y->gpu_milli)
        return x->gpu_milli > y->gpu_milli ? -1 : 1;
    if (x->gpu_count != y->gpu_count)
        return x->gpu_count > y->gpu_count ? -1 : 1;
    if (x->model_mask != y->model_mask)
        return x->model_mask > y->model_mask ? -1 : 1;
    return 0;
}

void place_mix_keep_typical(struct place_mix *m, unsigned pct)
{
    if (m->count == 0)
        return;
    qsort(m->types, m->count, sizeof *m->types, typical_order);
    uint64_t kept = 0;
    size_t k = 0;
    while (k < m->count && kept * 100 < (uint64_t)pct * m->total_weight)
        kept += m->types[k++].weight;
    m->count = k;
    m->total_weight = kept;
}

uint64_t place_frag_state(const struct place_mix *m, uint16_t model, uint64_t cpu_free,
                          const uint32_t *gpu_free, uint16_t gpu_count)
{
    uint32_t f[PLACE_MAX_GPUS];
    uint64_t prefix[PLACE_MAX_GPUS + 1];
    uint64_t sum = 0;
    /* Insertion sort, descending: at most 16 elements. */
    for (uint16_t i = 0; i < gpu_count; i++) {
        uint32_t v = gpu_free[i];
        uint16_t j = i;
        while (j > 0 && f[j - 1] < v) {
            f[j] = f[j - 1];
            j--;
        }
        f[j] = v;
        sum += v;
    }
    if (sum == 0)
        return 0;
    prefix[0] = 0;
    for (uint16_t i = 0; i < gpu_count; i++)
        prefix[i + 1] = prefix[i] + f[i];
    /* F = W·sum − Σ_{m fits} w_m · (share usable by m). */
    uint64_t usable = 0;
    for (size_t t = 0; t < m->count; t++) {
        const struct place_mix_type *x = &m->types[t];
        if (x->gpu_count == 0 || x->gpu_count > gpu_count || cpu_free < x->cpu_milli ||
            !(x->model_mask >> model & 1))
            continue;
        uint32_t d = x->gpu_milli;
        if (f[x->gpu_count - 1] < d)
            continue;
        uint32_t k = x->gpu_count;
        while (k < gpu_count && f[k] >= d)
            k++;
        usable += x->weight * prefix[k];
    }
    return m->total_weight * sum - usable;
}

uint64_t place_frag_node(const struct place_mix *m, const struct place_node *n)
{
    uint32_t free_milli[PLACE_MAX_GPUS];
    for (uint16_t g = 0; g < n->gpu_count; g++)
        free_milli[g] = PLACE_GPU_MILLI - n->gpus[g].milli_used;
    return place_frag_state(m, n->model, n->cpu_total - n->cpu_used, free_milli, n->gpu_count);
}

int place_frag_cache_init(struct place_frag_cache *fc, size_t node_count)
{
    memset(fc, 0, sizeof *fc);
    fc->entries = calloc(node_count > 0 ? node_count : 1, sizeof *fc->entries);
    if (fc->entries == NULL)
        return -ENOMEM;
    fc->count = node_count;
    return 0;
}

void place_frag_cache_reset(struct place_frag_cache *fc)
{
    for (size_t i = 0; i < fc->count; i++)
        fc->entries[i].valid = false;
}

void place_frag_cache_free(struct place_frag_cache *fc)
{
    free(fc->entries);
    memset(fc, 0, sizeof *fc);
}

uint64_t place_frag_cached(struct place_frag_cache *fc, size_t index, const struct place_mix *m,
                           const struct place_node *n)
{
    if (fc == NULL || index >= fc->count)
        return place_frag_node(m, n);
    struct place_frag_entry key = {.cpu_free = n->cpu_total - n->cpu_used, .valid = true};
    for (uint16_t g = 0; g < n->gpu_count; g++)
        key.milli_used[g] = (uint16_t)n->gpus[g].milli_used;
    struct place_frag_entry *e = &fc->entries[index];
    if (e->valid && e->cpu_free == key.cpu_free &&
        memcmp(e->milli_used, key.milli_used, sizeof key.milli_used) == 0) {
        fc->hits++;
        return e->frag;
    }
    fc->misses++;
    key.frag = place_frag_node(m, n);
    *e = key;
    return key.frag;
}
