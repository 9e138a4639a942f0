/* Task-type mixes and FGD's fragmentation measure (docs/openb.md, "FGD's fragmentation measure").
 *
 * F_n(m) is the node's unallocated GPU share that task type m could not use: all of it
 * when m cannot run on the node, otherwise the cards too small for m. Summed over the
 * mix as Σ weight·milli, an integer, so incremental updates are exact. The evaluation
 * sorts the free shares once and walks them per type: with f sorted descending and
 * prefix sums P, "m fits" is f[k-1] >= d and the usable part is P[count(f >= d)].
 *
 * The default policy's two measures live here too: the expected stranded share of a node
 * (place_waste_state, one node against the next few pods of the mix) and the gap balance
 * (place_gaps_*, every partly used card of the cluster against the others, so that
 * remainders of a kind do not pile up while pods that would fill them go elsewhere). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
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
    int rc = vg_array_grow(&m->types, &m->cap, m->count + 1, sizeof *m->types, PLACE_MIX_TYPES_MAX,
                           "request types", NULL);
    if (rc < 0)
        return rc;
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
    fc->entries = vg_calloc(node_count > 0 ? node_count : 1, sizeof *fc->entries);
    if (fc->entries == NULL)
        return -ENOMEM;
    fc->count = node_count;
    return 0;
}

static void fit_set_free(struct place_fit_set *fs)
{
    free(fs->levels);
    free(fs->start);
    free(fs->milli);
    free(fs->cum);
    memset(fs, 0, sizeof *fs);
}

static void fit_index_free(struct place_fit_index *ix)
{
    if (ix->sets != NULL)
        for (size_t i = 0; i < PLACE_MAX_MODELS; i++)
            fit_set_free(&ix->sets[i]);
    free(ix->sets);
    free(ix->other);
    memset(ix, 0, sizeof *ix);
}

void place_frag_cache_reset(struct place_frag_cache *fc)
{
    for (size_t i = 0; i < fc->count; i++)
        fc->entries[i].valid = false;
    fit_index_free(&fc->fit);
}

void place_frag_cache_free(struct place_frag_cache *fc)
{
    free(fc->entries);
    fit_index_free(&fc->fit);
    memset(fc, 0, sizeof *fc);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Builds ix for m (the per-model sets come on first use); on allocation failure ix
 * stays invalid and callers take the slow path. */
static void fit_index_build(struct place_fit_index *ix, const struct place_mix *m)
{
    fit_index_free(ix);
    size_t others = 0;
    for (size_t t = 0; t < m->count; t++)
        if (m->types[t].gpu_count > 1)
            others++;
    ix->sets = vg_calloc(PLACE_MAX_MODELS, sizeof *ix->sets);
    ix->other = vg_malloc((others + 1) * sizeof *ix->other);
    if (ix->sets == NULL || ix->other == NULL) {
        fit_index_free(ix);
        return;
    }
    for (size_t t = 0; t < m->count; t++) {
        if (m->types[t].gpu_count == 0)
            continue;
        ix->gpu_weight += m->types[t].weight;
        if (m->types[t].gpu_count > 1)
            ix->other[ix->other_count++] = t;
    }
    ix->mix = m;
    ix->mix_count = m->count;
    ix->mix_weight = m->total_weight;
    ix->valid = true;
}

static bool fit_single(const struct place_mix_type *x, uint16_t model)
{
    return x->gpu_count == 1 && (x->model_mask >> model & 1);
}

VG_DEFINE_AUTO(fit_set_undo, struct place_fit_set, fit_set_free)

/* Builds model's set: its single-GPU types by CPU level. false on allocation failure
 * (the set is left empty). */
static bool fit_set_build(struct place_fit_set *fs, const struct place_mix *m, uint16_t model)
{
    VG_AUTO(fit_set_undo) struct place_fit_set *undo = fs; /* stolen once built */
    size_t singles = 0;
    for (size_t t = 0; t < m->count; t++)
        singles += fit_single(&m->types[t], model);
    fs->levels = vg_malloc((singles + 1) * sizeof *fs->levels);
    fs->start = vg_malloc((singles + 2) * sizeof *fs->start);
    if (fs->levels == NULL || fs->start == NULL)
        return false;
    for (size_t t = 0; t < m->count; t++)
        if (fit_single(&m->types[t], model))
            fs->levels[fs->level_count++] = m->types[t].cpu_milli;
    qsort(fs->levels, fs->level_count, sizeof *fs->levels, cmp_u64);
    size_t distinct = 0;
    for (size_t i = 0; i < fs->level_count; i++)
        if (distinct == 0 || fs->levels[distinct - 1] != fs->levels[i])
            fs->levels[distinct++] = fs->levels[i];
    fs->level_count = distinct;
    /* Level j holds every type asking at most levels[j]: at most singles entries. */
    size_t cap = distinct * singles + 1;
    fs->milli = vg_malloc(cap * sizeof *fs->milli);
    fs->cum = vg_malloc(cap * sizeof *fs->cum);
    if (fs->milli == NULL || fs->cum == NULL)
        return false;
    size_t k = 0;
    for (size_t j = 0; j < distinct; j++) {
        fs->start[j] = k;
        for (size_t t = 0; t < m->count; t++) {
            const struct place_mix_type *x = &m->types[t];
            if (!fit_single(x, model) || x->cpu_milli > fs->levels[j])
                continue;
            /* Insertion by share; equal shares merge. */
            size_t i = k;
            while (i > fs->start[j] && fs->milli[i - 1] > x->gpu_milli)
                i--;
            if (i > fs->start[j] && fs->milli[i - 1] == x->gpu_milli) {
                fs->cum[i - 1] += x->weight;
                continue;
            }
            memmove(&fs->milli[i + 1], &fs->milli[i], (k - i) * sizeof *fs->milli);
            memmove(&fs->cum[i + 1], &fs->cum[i], (k - i) * sizeof *fs->cum);
            fs->milli[i] = x->gpu_milli;
            fs->cum[i] = x->weight;
            k++;
        }
        for (size_t i = fs->start[j] + 1; i < k; i++)
            fs->cum[i] += fs->cum[i - 1];
    }
    fs->start[distinct] = k;
    fs->built = true;
    (void)vg_steal_ptr(&undo);
    return true;
}

/* Whether ix answers for m, building it when not; false when it cannot be built. */
static bool fit_index_ready(struct place_fit_index *ix, const struct place_mix *m)
{
    if (ix == NULL)
        return false;
    if (!ix->valid || ix->mix != m || ix->mix_count != m->count ||
        ix->mix_weight != m->total_weight)
        fit_index_build(ix, m);
    return ix->valid;
}

static bool type_fits(const struct place_mix_type *x, uint16_t model, uint64_t cpu_free,
                      const uint32_t *gpu_free, uint16_t gpu_count, uint32_t card_free)
{
    if (x->gpu_count == 0 || x->gpu_milli > card_free || x->cpu_milli > cpu_free ||
        x->gpu_count > gpu_count || !(x->model_mask >> model & 1))
        return false;
    if (x->gpu_count > 1) {
        uint32_t cards = 0;
        for (uint16_t g = 0; g < gpu_count; g++)
            cards += gpu_free[g] >= x->gpu_milli;
        return cards >= x->gpu_count;
    }
    return true;
}

uint64_t place_fit_weight(const struct place_mix *m, struct place_fit_index *ix, uint16_t model,
                          uint64_t cpu_free, const uint32_t *gpu_free, uint16_t gpu_count,
                          uint32_t card_free)
{
    uint64_t q = 0;
    struct place_fit_set *fs = NULL;
    if (model < PLACE_MAX_MODELS && fit_index_ready(ix, m)) {
        fs = &ix->sets[model];
        if (!fs->built && !fit_set_build(fs, m, model))
            fs = NULL;
    }
    if (fs == NULL) {
        for (size_t t = 0; t < m->count; t++)
            if (type_fits(&m->types[t], model, cpu_free, gpu_free, gpu_count, card_free))
                q += m->types[t].weight;
        return q;
    }
    /* The highest level not above cpu_free, then the last share not above card_free. */
    size_t lo = 0, hi = fs->level_count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (fs->levels[mid] <= cpu_free)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0) {
        size_t a = fs->start[lo - 1], b = fs->start[lo];
        while (a < b) {
            size_t mid = a + (b - a) / 2;
            if (fs->milli[mid] <= card_free)
                a = mid + 1;
            else
                b = mid;
        }
        if (a > fs->start[lo - 1])
            q += fs->cum[a - 1];
    }
    for (size_t i = 0; i < ix->other_count; i++) {
        const struct place_mix_type *x = &m->types[ix->other[i]];
        if (type_fits(x, model, cpu_free, gpu_free, gpu_count, card_free))
            q += x->weight;
    }
    return q;
}

double place_waste_state(const struct place_mix *m, struct place_fit_index *ix, uint16_t model,
                         uint64_t cpu_free, const uint32_t *gpu_free, uint16_t gpu_count)
{
    uint64_t total = 0;
    if (!fit_index_ready(ix, m))
        ix = NULL; /* not buildable: check the types one by one */
    if (ix != NULL) {
        total = ix->gpu_weight;
    } else {
        for (size_t t = 0; t < m->count; t++)
            if (m->types[t].gpu_count > 0)
                total += m->types[t].weight;
    }
    if (total == 0)
        return 0;
    double waste = 0, term[PLACE_MAX_GPUS];
    for (uint16_t g = 0; g < gpu_count; g++) {
        term[g] = 0;
        if (gpu_free[g] == 0)
            continue;
        uint16_t same = 0; /* an earlier card with this free share gives the same term */
        while (same < g && gpu_free[same] != gpu_free[g])
            same++;
        if (same < g) {
            term[g] = term[same];
        } else {
            uint64_t q = place_fit_weight(m, ix, model, cpu_free, gpu_free, gpu_count, gpu_free[g]);
            double miss = 1.0 - (double)q / (double)total;
            term[g] = gpu_free[g] * miss * miss * miss;
        }
        waste += term[g];
    }
    return waste;
}

void place_gaps_build(struct place_gaps *g, const struct place_cluster *c,
                      const struct place_mix *m)
{
    memset(g->count, 0, sizeof g->count);
    uint64_t by_share[PLACE_GPU_MILLI + 1] = {0}, total = 0;
    for (size_t t = 0; t < m->count; t++) {
        const struct place_mix_type *x = &m->types[t];
        if (x->gpu_count == 0)
            continue;
        total += x->weight;
        if (x->gpu_milli <= PLACE_GPU_MILLI)
            by_share[x->gpu_milli] += x->weight;
    }
    uint64_t fit = 0;
    for (uint32_t s = 0; s <= PLACE_GPU_MILLI; s++) {
        fit += by_share[s];
        double q = total > 0 ? (double)fit / (double)total : 0;
        g->live[s] = q < PLACE_GAP_LIVE_SHARE ? q / PLACE_GAP_LIVE_SHARE : 1.0;
    }
    for (size_t i = 0; i < c->node_count; i++) {
        const struct place_node *n = &c->nodes[i];
        for (uint16_t k = 0; k < n->gpu_count; k++) {
            const struct place_gpu *gpu = &n->gpus[k];
            if (gpu->healthy && !gpu->exclusive && gpu->milli_used > 0 &&
                gpu->milli_used < PLACE_GPU_MILLI)
                g->count[PLACE_GPU_MILLI - gpu->milli_used]++;
        }
    }
}

void place_model_pressure(const struct place_cluster *c, const struct place_mix *m,
                          double out[PLACE_MAX_MODELS])
{
    memset(out, 0, PLACE_MAX_MODELS * sizeof *out);
    double demand = 0; /* GPUs, weighted */
    bool restricted = false;
    for (size_t t = 0; t < m->count; t++) {
        const struct place_mix_type *x = &m->types[t];
        demand += (double)x->weight * x->gpu_count * x->gpu_milli;
        restricted = restricted || (x->gpu_count > 0 && x->model_mask != UINT64_MAX);
    }
    if (!restricted || demand <= 0)
        return;
    double cap[PLACE_MAX_MODELS] = {0}, total = 0;
    for (size_t i = 0; i < c->node_count; i++) {
        const struct place_node *n = &c->nodes[i];
        for (uint16_t k = 0; k < n->gpu_count; k++)
            if (n->gpus[k].healthy) {
                cap[n->gpus[k].model]++;
                total++;
            }
    }
    for (size_t t = 0; t < m->count; t++) {
        const struct place_mix_type *x = &m->types[t];
        if (x->gpu_count == 0 || x->model_mask == UINT64_MAX)
            continue;
        double allowed = 0;
        for (size_t k = 0; k < c->model_count; k++)
            allowed += (x->model_mask >> k & 1) ? cap[k] : 0;
        if (allowed <= 0)
            continue; /* nothing can run it: it presses on no card */
        double share = (double)x->weight * x->gpu_count * x->gpu_milli / demand;
        for (size_t k = 0; k < c->model_count; k++)
            if (x->model_mask >> k & 1)
                out[k] += share * total / allowed;
    }
}

double place_cpu_pressure(const struct place_cluster *c, const struct place_mix *m)
{
    double cpu = 0, gpu = 0; /* weighted demand: milli-cores, milli-GPUs */
    for (size_t t = 0; t < m->count; t++) {
        const struct place_mix_type *x = &m->types[t];
        cpu += (double)x->weight * (double)x->cpu_milli;
        gpu += (double)x->weight * x->gpu_count * x->gpu_milli;
    }
    double cpu_cap = 0, gpu_cap = 0;
    for (size_t i = 0; i < c->node_count; i++) {
        const struct place_node *n = &c->nodes[i];
        cpu_cap += (double)n->cpu_total;
        for (uint16_t k = 0; k < n->gpu_count; k++)
            gpu_cap += n->gpus[k].healthy ? PLACE_GPU_MILLI : 0;
    }
    if (gpu <= 0 || cpu_cap <= 0 || gpu_cap <= 0)
        return 0;
    return (cpu / cpu_cap) / (gpu / gpu_cap);
}

double place_gaps_delta(const struct place_gaps *g, uint32_t card_free, uint32_t share)
{
    if (share > card_free || card_free > PLACE_GPU_MILLI)
        return 0;
    double d = 0;
    uint32_t left = card_free - share;
    if (card_free < PLACE_GPU_MILLI) /* (N − 1)² − N² */
        d += g->live[card_free] * (1.0 - 2.0 * g->count[card_free]);
    if (left > 0) /* (N + 1)² − N² */
        d += g->live[left] * (2.0 * g->count[left] + 1.0);
    return d;
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
