/* Scoring policies and the decision (docs/openb.md; HAMi: docs/interfaces.md).
 *
 * A decision filters every node, picks the GPUs a policy would take on it, scores it as
 * an int64 (keeping each policy's integer truncations, which decide ties), and keeps the
 * highest score; equal scores go to the lowest node rank. The simulator sets ranks to a
 * per-run random permutation, as the FGD artifact's patched kube-scheduler does. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"
#include "placement/internal.h"

#define MAX_SPEC_CPU 128000.0 /* normalisers of the paper's simulator */
#define MAX_SPEC_GPU 8000.0

static const char *const policy_names[PLACE_POLICY_COUNT] = {
    [PLACE_POLICY_RANDOM] = "random",           [PLACE_POLICY_DOTPROD] = "dotprod",
    [PLACE_POLICY_CLUSTERING] = "clustering",   [PLACE_POLICY_PACKING] = "packing",
    [PLACE_POLICY_BESTFIT] = "bestfit",         [PLACE_POLICY_FGD] = "fgd",
    [PLACE_POLICY_BINPACK] = "binpack",         [PLACE_POLICY_SPREAD] = "spread",
    [PLACE_POLICY_DEFAULT] = "default",         [PLACE_POLICY_DRA_FIRSTFIT] = "dra-firstfit",
    [PLACE_POLICY_DRA_DEFAULT] = "dra-default",
};

const char *place_policy_name(enum place_policy p)
{
    return (unsigned)p < PLACE_POLICY_COUNT ? policy_names[p] : "unknown";
}

bool place_policy_sim_only(enum place_policy p)
{
    return p == PLACE_POLICY_DRA_FIRSTFIT || p == PLACE_POLICY_DRA_DEFAULT;
}

int place_sim_policy_from_name(const char *name)
{
    for (int p = 0; p < PLACE_POLICY_COUNT; p++)
        if (strcmp(policy_names[p], name) == 0)
            return p;
    return -1;
}

int place_policy_from_name(const char *name)
{
    int p = place_sim_policy_from_name(name);
    return p >= 0 && place_policy_sim_only((enum place_policy)p) ? -1 : p;
}

static bool is_sharing(const struct place_request *r)
{
    return r->gpu_count == 1 && r->gpu_milli < PLACE_GPU_MILLI;
}

/* HAMi's device score with the request counted (docs/interfaces.md, "Scores"). */
static double hami_gpu_score(const struct place_gpu *g, const struct place_request *r)
{
    double s = (g->milli_used + r->gpu_milli) / (double)PLACE_GPU_MILLI;
    if (g->slots > 0)
        s += (g->tenants + 1.0) / g->slots;
    if (g->mem_total_mib > 0)
        s += (double)(g->mem_used_mib + place_gpu_mem_need(g, r)) / (double)g->mem_total_mib;
    return 10.0 * s;
}

/* Sort key of a usable card under an order; lower comes first. */
static double gpu_key(const struct place_gpu *g, const struct place_request *r,
                      enum place_gpu_order order)
{
    switch (order) {
    case PLACE_GPU_BINPACK:
        return -hami_gpu_score(g, r);
    case PLACE_GPU_SPREAD:
        return hami_gpu_score(g, r);
    case PLACE_GPU_POLICY:
        break;
    }
    return PLACE_GPU_MILLI - g->milli_used; /* best fit: the smallest sufficient share */
}

/* Chooses r->gpu_count usable cards of node n in the given order, keeping them on one
 * NUMA node when one can hold them all (required when numa_bind). Returns false when the
 * node cannot host the request. */
static bool select_gpus(const struct place_node *n, const struct place_request *r,
                        enum place_gpu_order order, uint8_t *out)
{
    uint8_t idx[PLACE_MAX_GPUS];
    double key[PLACE_MAX_GPUS];
    uint16_t count = 0;
    for (uint16_t g = 0; g < n->gpu_count; g++) {
        if (!place_gpu_usable(&n->gpus[g], r))
            continue;
        double k = gpu_key(&n->gpus[g], r, order);
        uint16_t j = count++;
        while (j > 0 && key[j - 1] > k) { /* stable: equal keys keep index order */
            key[j] = key[j - 1];
            idx[j] = idx[j - 1];
            j--;
        }
        key[j] = k;
        idx[j] = (uint8_t)g;
    }
    if (count < r->gpu_count)
        return false;
    if (r->gpu_count > 1 || r->numa_bind) {
        /* The NUMA group that holds enough cards and whose best card comes first. */
        for (uint16_t i = 0; i < count; i++) {
            uint8_t numa = n->gpus[idx[i]].numa;
            uint16_t taken = 0;
            for (uint16_t j = i; j < count && taken < r->gpu_count; j++)
                if (n->gpus[idx[j]].numa == numa)
                    out[taken++] = idx[j];
            if (taken == r->gpu_count)
                return true;
        }
        if (r->numa_bind)
            return false;
    }
    memcpy(out, idx, r->gpu_count);
    return true;
}

/* kube-scheduler's DRA allocator (k8s.io/dynamic-resource-allocation, structured
 * allocator): it walks the node's devices in the order of its ResourceSlices and keeps the
 * first that is not in use (with consumable capacity: that has the requested capacity
 * left) and passes the selectors; for several devices the first combination in that order,
 * and with a matchAttribute constraint (here: one NUMA node, numa_bind) the first whose
 * devices all share the attribute. Without a constraint nothing keeps the cards on one
 * NUMA node. Cards are listed in index order. Returns false when the node cannot host r. */
static bool select_first_fit(const struct place_node *n, const struct place_request *r,
                             uint8_t *out)
{
    for (uint16_t first = 0; first < n->gpu_count; first++) {
        if (!place_gpu_usable(&n->gpus[first], r))
            continue;
        uint16_t taken = 0;
        for (uint16_t g = first; g < n->gpu_count && taken < r->gpu_count; g++)
            if (place_gpu_usable(&n->gpus[g], r) &&
                (!r->numa_bind || n->gpus[g].numa == n->gpus[first].numa))
                out[taken++] = (uint8_t)g;
        if (taken == r->gpu_count)
            return true;
        if (!r->numa_bind)
            return false; /* fewer usable cards after the first than asked for */
    }
    return r->gpu_count == 0;
}

/* kube-scheduler's node score without vgpu's extender, with the default plugins that see
 * the openb cluster: NodeResourcesFit, strategy LeastAllocated (CPU and memory, weight 1
 * each): Σ ⌊(capacity − requested)·100 / capacity⌋ · weight / Σ weight, the request
 * counted; plus NodeResourcesBalancedAllocation: ⌊(1 − std)·100⌋, std of the CPU and
 * memory fractions requested (|f_cpu − f_mem| / 2 for two). Both plugins have weight 1.
 * Neither sees the GPUs: devices allocated through DRA are not node resources. */
static int64_t least_requested(uint64_t requested, uint64_t capacity)
{
    return requested > capacity ? 0 : (int64_t)((capacity - requested) * 100 / capacity);
}

static int64_t score_kube(const struct place_node *n, const struct place_request *r)
{
    int64_t fit = 0, weights = 0;
    double frac[2];
    int fracs = 0;
    const uint64_t cap[2] = {n->cpu_total, n->mem_total};
    const uint64_t req[2] = {n->cpu_used + r->cpu_milli, n->mem_used + r->mem_mib};
    for (int i = 0; i < 2; i++) {
        if (cap[i] == 0)
            continue; /* a resource the node does not have is left out */
        fit += least_requested(req[i], cap[i]);
        weights++;
        double f = (double)req[i] / (double)cap[i];
        frac[fracs++] = f > 1 ? 1 : f;
    }
    if (weights > 0)
        fit /= weights;
    double sd = fracs == 2 ? fabs(frac[0] - frac[1]) / 2 : 0;
    return fit + (int64_t)((1 - sd) * 100);
}

bool place_node_feasible(const struct place_cluster *c, size_t node, const struct place_request *r)
{
    uint8_t gpus[PLACE_MAX_GPUS];
    return node < c->node_count && place_node_resources_fit(&c->nodes[node], r) &&
           select_gpus(&c->nodes[node], r, PLACE_GPU_POLICY, gpus);
}

/* F_n(mix): the node's summary for the metric mix, else the caller's memo when given. */
static uint64_t node_frag(const struct place_cluster *c, const struct place_mix *mix,
                          struct place_frag_cache *fc, const struct place_node *n)
{
    if (mix == c->metric_mix)
        return n->frag;
    return place_frag_cached(fc, (size_t)(n - c->nodes), mix, n);
}

/* F_n' for the node after placing r on the given cards. */
static uint64_t frag_after(const struct place_mix *mix, const struct place_node *n,
                           const struct place_request *r, const uint8_t *gpus)
{
    uint32_t free_milli[PLACE_MAX_GPUS];
    for (uint16_t g = 0; g < n->gpu_count; g++)
        free_milli[g] = PLACE_GPU_MILLI - n->gpus[g].milli_used;
    for (uint32_t i = 0; i < r->gpu_count; i++)
        free_milli[gpus[i]] -= r->gpu_milli;
    return place_frag_state(mix, n->model, n->cpu_total - n->cpu_used - r->cpu_milli, free_milli,
                            n->gpu_count);
}

/* ΔF in GPUs (negative: fragmentation shrinks). */
static double frag_delta(const struct place_mix *mix, uint64_t before, uint64_t after)
{
    if (mix->total_weight == 0)
        return 0;
    return ((double)after - (double)before) / ((double)mix->total_weight * PLACE_GPU_MILLI);
}

static int64_t fgd_score(double delta)
{
    return (int64_t)floor(100.0 / (1.0 + exp(delta)));
}

/* FGD: the GPU choice is part of the score for sharing pods; each distinct free share is
 * tried once (cards with equal free shares give equal results; the lowest index wins). */
static int64_t score_fgd(const struct place_cluster *c, const struct place_mix *mix,
                         struct place_frag_cache *fc, const struct place_node *n,
                         const struct place_request *r, bool real_valued, uint8_t *gpus)
{
    uint64_t before = node_frag(c, mix, fc, n);
    if (!is_sharing(r)) {
        double delta = frag_delta(mix, before, frag_after(mix, n, r, gpus));
        return real_valued ? (int64_t)llround(-delta * 1e6) : fgd_score(delta);
    }
    int64_t best = INT64_MIN;
    uint32_t tried[PLACE_MAX_GPUS];
    uint16_t tried_count = 0;
    for (uint16_t g = 0; g < n->gpu_count; g++) {
        if (!place_gpu_usable(&n->gpus[g], r))
            continue;
        uint32_t free_milli = PLACE_GPU_MILLI - n->gpus[g].milli_used;
        bool seen = false;
        for (uint16_t i = 0; i < tried_count && !seen; i++)
            seen = tried[i] == free_milli;
        if (seen)
            continue;
        tried[tried_count++] = free_milli;
        uint8_t one = (uint8_t)g;
        double delta = frag_delta(mix, before, frag_after(mix, n, r, &one));
        int64_t s = real_valued ? (int64_t)llround(-delta * 1e6) : fgd_score(delta);
        if (s > best) {
            best = s;
            gpus[0] = (uint8_t)g;
        }
    }
    return best;
}

static int64_t score_packing(const struct place_node *n, const struct place_request *r,
                             const uint8_t *gpus)
{
    if (r->gpu_count == 0)
        return 0;
    if (n->free_gpus == n->gpu_count) {
        int64_t g = n->gpu_count;
        return 33 - g > g ? 33 - g : g;
    }
    int64_t free_used = 0, partial = 0;
    for (uint32_t i = 0; i < r->gpu_count; i++) {
        const struct place_gpu *g = &n->gpus[gpus[i]];
        if (g->tenants == 0)
            free_used++;
        else
            partial += (PLACE_GPU_MILLI - g->milli_used) * 100 / PLACE_GPU_MILLI;
    }
    if (free_used > 0)
        return 50 - free_used > 33 ? 50 - free_used : 33;
    int64_t s = 100 - partial / 10;
    return s > 50 ? s : 50;
}

static int64_t score_clustering(const struct place_node *n, const struct place_request *r)
{
    if (r->gpu_count == 0)
        return 0;
    int64_t b = 25 * ((int64_t)MAX_SPEC_GPU - (int64_t)n->free_milli) / (int64_t)MAX_SPEC_GPU;
    uint32_t hosted = 0;
    for (int k = 0; k < PLACE_CLASS_COUNT; k++)
        hosted += n->class_pods[k];
    uint32_t same = n->class_pods[r->pod_class];
    if (hosted == 0)
        return 25 + b;
    if (same == hosted)
        return 75 + b;
    if (same > 0)
        return 50 + b;
    return b;
}

static int64_t score_hami_node(const struct place_node *n, const struct place_request *r,
                               bool binpack)
{
    /* 10·(Σ slots used / Σ slots + Σ compute used / Σ compute + Σ memory used / Σ memory),
     * with this request counted. Scaled by 1000 and truncated. */
    double slots = 0, slots_used = r->gpu_count, mem = 0, mem_used = 0;
    double compute = (double)n->gpu_count * PLACE_GPU_MILLI;
    double compute_used = (double)r->gpu_count * r->gpu_milli;
    for (uint16_t g = 0; g < n->gpu_count; g++) {
        const struct place_gpu *gpu = &n->gpus[g];
        slots += gpu->slots;
        slots_used += gpu->tenants;
        compute_used += gpu->milli_used;
        mem += (double)gpu->mem_total_mib;
        mem_used += (double)gpu->mem_used_mib;
    }
    if (r->gpu_count > 0 && n->gpu_count > 0)
        mem_used += (double)r->gpu_count * (double)place_gpu_mem_need(&n->gpus[0], r);
    double s = 0;
    if (slots > 0)
        s += slots_used / slots;
    if (compute > 0)
        s += compute_used / compute;
    if (mem > 0)
        s += mem_used / mem;
    int64_t v = (int64_t)floor(10000.0 * s);
    return binpack ? v : -v;
}

/* Expected stranded share (place_waste_state) of node n after placing r on the given
 * cards, or as it is when gpus is NULL. */
static double waste_after(const struct place_mix *mix, struct place_fit_index *ix,
                          const struct place_node *n, const struct place_request *r,
                          const uint8_t *gpus)
{
    uint32_t free_milli[PLACE_MAX_GPUS];
    for (uint16_t g = 0; g < n->gpu_count; g++)
        free_milli[g] = PLACE_GPU_MILLI - n->gpus[g].milli_used;
    uint64_t cpu_free = n->cpu_total - n->cpu_used;
    if (gpus != NULL) {
        for (uint32_t i = 0; i < r->gpu_count; i++)
            free_milli[gpus[i]] -= r->gpu_milli;
        cpu_free -= r->cpu_milli;
    }
    return place_waste_state(mix, ix, n->model, cpu_free, free_milli, n->gpu_count);
}

#define WASTE_STEP            10.0 /* milli-GPU of expected stranded share per score point */
#define GAP_WEIGHT            2.0  /* score points per unit of place_gaps_delta */
/* Model pressure (place_model_pressure): a sharing pod pays its share times the pressure
 * above SHARE_PRESSURE_FREE as stranded share; a whole-GPU pod pays WHOLE_PRESSURE_POINTS
 * of FGD's score per card and unit of pressure (about the score's slope per GPU of ΔF). */
#define SHARE_PRESSURE_FREE   0.5
#define WHOLE_PRESSURE_POINTS 25.0

/* What default weighs beyond the node itself, taken once per decision. */
struct default_view {
    const struct place_gaps *gaps; /* sharing pods only; else NULL */
    double pressure[PLACE_MAX_MODELS];
    bool cpu_scarce; /* the mix runs out of CPU before GPU: CPU-only pods skip BestFit */
};

/* A sharing pod under the default policy: the card (each distinct free share tried once)
 * and node that grow the expected stranded share the least, in steps of WASTE_STEP, less
 * GAP_WEIGHT times the change of the cluster's gap balance (place_gaps_delta). The
 * stranded share judges one card against the next few pods; the balance judges it against
 * every other card competing for the same pods: a 320 pod does not top a 470 card up to a
 * 210 remainder while 530 gaps are scarce and 210 ones common. The first part depends on
 * the node alone and is what a memo keeps (waste_points); the balance is added per
 * decision (best_share), through a table of its points by free share. */
static void waste_points(const struct place_mix *mix, struct place_frag_cache *fc,
                         const struct default_view *v, const struct place_node *n,
                         const struct place_request *r, struct place_share_points *out)
{
    struct place_fit_index *ix = fc != NULL ? &fc->fit : NULL;
    double before = waste_after(mix, ix, n, r, NULL);
    out->count = 0;
    for (uint16_t g = 0; g < n->gpu_count; g++) {
        if (!place_gpu_usable(&n->gpus[g], r))
            continue;
        uint16_t free_milli = (uint16_t)(PLACE_GPU_MILLI - n->gpus[g].milli_used);
        bool seen = false;
        for (uint8_t i = 0; i < out->count && !seen; i++)
            seen = out->free[i] == free_milli;
        if (seen)
            continue;
        uint8_t one = (uint8_t)g;
        double press = v->pressure[n->gpus[g].model] - SHARE_PRESSURE_FREE;
        double cost = press > 0 ? press * r->gpu_milli : 0;
        double points = floor((before - waste_after(mix, ix, n, r, &one) - cost) / WASTE_STEP);
        out->gpu[out->count] = one;
        out->free[out->count] = free_milli;
        out->points[out->count++] = (int32_t)fmax(fmin(points, INT32_MAX), INT32_MIN);
    }
}

/* The gap balance's whole points by a card's free share, filled on first use in a
 * decision (one pod's share, the cluster's gaps as they are). */
struct gap_points {
    const struct place_gaps *gaps;
    uint32_t share;
    bool known[PLACE_GPU_MILLI + 1];
    int32_t points[PLACE_GPU_MILLI + 1];
};

static int64_t best_share(const struct place_share_points *sp, struct gap_points *gp, uint8_t *gpu)
{
    int64_t best = INT64_MIN;
    for (uint8_t i = 0; i < sp->count; i++) {
        uint16_t f = sp->free[i];
        if (!gp->known[f]) { /* whole points, as the stranded share's */
            gp->points[f] = (int32_t)floor(-GAP_WEIGHT * place_gaps_delta(gp->gaps, f, gp->share));
            gp->known[f] = true;
        }
        int64_t s = (int64_t)sp->points[i] + gp->points[f];
        if (s > best) {
            best = s;
            *gpu = sp->gpu[i];
        }
    }
    return best;
}

/* vgpu's default, on the caller's mix (the simulator passes a mix learned from the pods
 * seen so far, not the oracle). A sharing pod goes where the expected stranded share
 * (place_waste_state) grows the least: unlike FGD's ΔF, a remainder that later pods of
 * the mix can fill counts as nearly free, so a card is not topped up to a remainder no
 * pod fits (470 + 320 leaves 210, which only the rare pods under 210 milli can use),
 * and the cluster's balance of partly used cards by free share (place_gaps_delta, the
 * Sum-of-Squares rule of online bin packing) counts too: a pod fills a gap that many
 * cards share rather than the last of a kind, and opens a new card rather than add to a
 * common remainder. Every other pod is scored by FGD's integer score; for whole GPUs, equal FGD
 * scores go to the smaller growth of the expected stranded share. Then nodes already in use come
 * before empty ones, then BestFit's leftover decides, except for CPU-only pods when the mix runs
 * out of CPU before GPU (place_cpu_pressure ≥ 1): packing them tightly then takes the last cores
 * of nodes whose cards stay free, and the fixed ranking, which piles them onto the same nodes,
 * strands fewer (cpu300: 13.9 % against 14.3 %; below 1, as on every other openb workload, BestFit
 * wins: cpu235 5.2 % against 5.9 %). Finer FGD scores
 * (real-valued ΔF) did worse on openb (5.8 % against 4.75 %): the coarse score leaves
 * ties, and sending them to the same nodes consolidates. Tried variants and results are
 * in docs/placement.md. */
static int64_t score_default(const struct place_cluster *c, const struct place_mix *mix,
                             const struct place_mix *wmix, struct place_frag_cache *fc,
                             const struct default_view *v, const struct place_node *n,
                             const struct place_request *r, uint8_t *gpus,
                             struct place_share_points *sp)
{
    const struct place_mix *wm = wmix != NULL ? wmix : mix;
    double left =
        0.5 * (double)(n->cpu_total - n->cpu_used - r->cpu_milli) / MAX_SPEC_CPU +
        0.5 * ((double)n->free_milli - (double)r->gpu_count * r->gpu_milli) / MAX_SPEC_GPU;
    int64_t bf = (int64_t)floor(100.0 * (1.0 - left));
    bf = bf < 0 ? 0 : bf > 100 ? 100 : bf;
    int64_t used = n->free_gpus < n->gpu_count ? 1 : 0;
    if (is_sharing(r)) { /* the cards' part, best_share(sp) * 1000, is the caller's */
        waste_points(wm, fc, v, n, r, sp);
        return used * 500 + bf;
    }
    int64_t f = score_fgd(c, mix, fc, n, r, false, gpus);
    double press = 0;
    for (uint32_t i = 0; i < r->gpu_count; i++)
        press += v->pressure[n->gpus[gpus[i]].model];
    f -= (int64_t)floor(WHOLE_PRESSURE_POINTS * press);
    if (r->gpu_count == 0)
        return f * 1000 + used * 500 + (v->cpu_scarce ? 0 : bf);
    /* Whole GPUs: among equal FGD scores the smaller growth of the expected stranded share
     * (through the CPU the pod takes from the node's other cards). Its steps lie within
     * ±1600 (16 cards of 1000 milli), so each term has its own decimal digits. */
    struct place_fit_index *ix = fc != NULL ? &fc->fit : NULL;
    int64_t w = (int64_t)floor((waste_after(wm, ix, n, r, NULL) - waste_after(wm, ix, n, r, gpus)) /
                               WASTE_STEP);
    return f * 100000000 + (w + 2000) * 10000 + used * 1000 + bf;
}

int place_memo_init(struct place_memo *m, size_t node_count)
{
    memset(m, 0, sizeof *m);
    m->entries = vg_calloc(node_count > 0 ? node_count : 1, sizeof *m->entries);
    if (m->entries == NULL)
        return -ENOMEM;
    m->count = node_count;
    return 0;
}

void place_memo_reset(struct place_memo *m)
{
    if (m->entries != NULL)
        memset(m->entries, 0, m->count * sizeof *m->entries);
    m->keyed = false;
}

void place_memo_forget(struct place_memo *m, size_t node)
{
    if (m != NULL && node < m->count)
        m->entries[node].valid = false;
}

void place_memo_free(struct place_memo *m)
{
    free(m->entries);
    free(m->shares);
    memset(m, 0, sizeof *m);
}

static bool labels_equal(const struct place_label *a, const struct place_label *b, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(a[i].key, b[i].key) != 0 || strcmp(a[i].value, b[i].value) != 0)
            return false;
    return true;
}

static bool names_equal(const char *a, const char *b, size_t size, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (strcmp(a + i * size, b + i * size) != 0)
            return false;
    return true;
}

/* Whether two resolved requests ask for the same thing (field by field: padding and the
 * bytes after a string's end do not count). */
static bool request_equal(const struct place_request *a, const struct place_request *b)
{
    return a->cpu_milli == b->cpu_milli && a->mem_mib == b->mem_mib &&
           a->gpu_count == b->gpu_count && a->gpu_milli == b->gpu_milli &&
           a->gpu_mem_mib == b->gpu_mem_mib && a->gpu_mem_pct == b->gpu_mem_pct &&
           a->exclusive == b->exclusive && a->numa_bind == b->numa_bind && a->high == b->high &&
           a->avoid_high == b->avoid_high && a->type_exact == b->type_exact &&
           a->model_mask == b->model_mask && a->pod_class == b->pod_class &&
           a->type_include_count == b->type_include_count &&
           a->type_exclude_count == b->type_exclude_count &&
           a->uuid_include_count == b->uuid_include_count &&
           a->uuid_exclude_count == b->uuid_exclude_count &&
           a->selector_count == b->selector_count &&
           names_equal(&a->type_include[0][0], &b->type_include[0][0], PLACE_MODEL_MAX,
                       a->type_include_count) &&
           names_equal(&a->type_exclude[0][0], &b->type_exclude[0][0], PLACE_MODEL_MAX,
                       a->type_exclude_count) &&
           names_equal(&a->uuid_include[0][0], &b->uuid_include[0][0], PLACE_NAME_MAX,
                       a->uuid_include_count) &&
           names_equal(&a->uuid_exclude[0][0], &b->uuid_exclude[0][0], PLACE_NAME_MAX,
                       a->uuid_exclude_count) &&
           labels_equal(a->selector, b->selector, a->selector_count);
}

/* The memo to use for this decision, keyed (and cleared when the key changes); NULL
 * when the policy's verdicts depend on more than the node. */
static struct place_memo *memo_for(const struct place_context *ctx, const struct place_request *r,
                                   enum place_policy policy, enum place_gpu_order order)
{
    bool mix_policy = policy == PLACE_POLICY_FGD || policy == PLACE_POLICY_DEFAULT;
    if (ctx == NULL || ctx->memo == NULL || policy == PLACE_POLICY_RANDOM ||
        (mix_policy && !ctx->memo_mix))
        return NULL;
    /* The memo keyed to this decision, else the least recently used one, re-keyed. */
    struct place_memo *m = NULL, *lru = NULL;
    uint64_t newest = 0;
    for (size_t i = 0; i < (ctx->memo_count ? ctx->memo_count : 1); i++) {
        struct place_memo *x = &ctx->memo[i];
        if (x->entries == NULL)
            continue;
        newest = x->used > newest ? x->used : newest;
        if (x->keyed && x->policy == (int)policy && x->order == (int)order &&
            request_equal(&x->request, r))
            m = x;
        if (lru == NULL || x->used < lru->used)
            lru = x;
    }
    if (m == NULL && lru != NULL) {
        m = lru;
        place_memo_reset(m);
        m->request = *r;
        m->policy = (int)policy;
        m->order = (int)order;
        m->keyed = true;
    }
    if (m != NULL)
        m->used = newest + 1;
    return m;
}

/* A node's verdict under a deterministic policy: false when it cannot host r; else its
 * score in *score and its GPUs in gpus. */
static bool node_verdict(const struct place_cluster *c, const struct place_node *n,
                         const struct place_request *r, enum place_policy policy,
                         const struct place_context *ctx, const struct default_view *view,
                         enum place_gpu_order order, uint8_t *gpus, int64_t *score,
                         struct place_share_points *sp)
{
    if (!place_node_resources_fit(n, r))
        return false;
    if (policy == PLACE_POLICY_DRA_FIRSTFIT ? !select_first_fit(n, r, gpus)
                                            : !select_gpus(n, r, order, gpus))
        return false;
    int64_t s = 0;
    switch (policy) {
    case PLACE_POLICY_DOTPROD: {
        double dot =
            (double)(n->cpu_total - n->cpu_used) / MAX_SPEC_CPU *
                ((double)r->cpu_milli / MAX_SPEC_CPU) +
            n->free_milli / MAX_SPEC_GPU * ((double)r->gpu_count * r->gpu_milli / MAX_SPEC_GPU);
        s = (int64_t)floor(100.0 * (1.0 - dot / 2.0));
        break;
    }
    case PLACE_POLICY_CLUSTERING:
        s = score_clustering(n, r);
        break;
    case PLACE_POLICY_PACKING:
        s = score_packing(n, r, gpus);
        break;
    case PLACE_POLICY_BESTFIT: {
        double left =
            0.5 * (double)(n->cpu_total - n->cpu_used - r->cpu_milli) / MAX_SPEC_CPU +
            0.5 * ((double)n->free_milli - (double)r->gpu_count * r->gpu_milli) / MAX_SPEC_GPU;
        s = (int64_t)floor(100.0 * (1.0 - left));
        break;
    }
    case PLACE_POLICY_FGD:
        s = score_fgd(c, ctx->mix, ctx->frag_cache, n, r, false, gpus);
        break;
    case PLACE_POLICY_DEFAULT:
        s = score_default(c, ctx->mix, ctx->waste_mix, ctx->frag_cache, view, n, r, gpus, sp);
        break;
    case PLACE_POLICY_BINPACK:
    case PLACE_POLICY_SPREAD:
        s = score_hami_node(n, r, policy == PLACE_POLICY_BINPACK);
        break;
    case PLACE_POLICY_DRA_FIRSTFIT:
        s = score_kube(n, r);
        break;
    case PLACE_POLICY_RANDOM:
    case PLACE_POLICY_DRA_DEFAULT: /* decided as default, then first-fit (place_decide) */
    case PLACE_POLICY_COUNT:
        break;
    }
    *score = s;
    return true;
}

size_t place_k8s_nodes_to_find(size_t nodes, uint32_t percentage)
{
    if (nodes < 100 || percentage >= 100)
        return nodes;
    size_t p = percentage;
    if (p == 0) {
        p = nodes / 125 < 45 ? 50 - nodes / 125 : 5;
    }
    size_t want = nodes * p / 100;
    return want < 100 ? 100 : want;
}

/* kube-scheduler's filter pass under percentageOfNodesToScore: from where the previous
 * pass stopped, the nodes (of the caller's mask, if any) where the DRA allocator finds
 * cards, until enough are found; then the policy decides among those alone. */
static int decide_sampled(const struct place_cluster *c, const struct place_request *r,
                          enum place_policy policy, const struct place_context *ctx,
                          struct place_decision *out, struct vg_err *err)
{
    struct place_k8s_sample *ks = ctx->k8s_sample;
    size_t n = c->node_count, words = (n + 63) / 64;
    uint64_t *mask = vg_calloc(words > 0 ? words : 1, sizeof *mask);
    if (mask == NULL)
        return vg_err_set(err, -ENOMEM, "out of memory");
    size_t want = place_k8s_nodes_to_find(n, ks->percentage), found = 0, walked = 0;
    uint8_t gpus[PLACE_MAX_GPUS];
    for (; walked < n && found < want; walked++) {
        size_t i = (ks->next + walked) % n;
        if (ctx->node_mask != NULL && !(ctx->node_mask[i / 64] >> (i % 64) & 1))
            continue;
        if (place_node_resources_fit(&c->nodes[i], r) && select_first_fit(&c->nodes[i], r, gpus)) {
            mask[i / 64] |= UINT64_C(1) << (i % 64);
            found++;
        }
    }
    ks->next = n > 0 ? (ks->next + walked) % n : 0;
    struct place_context sub = *ctx;
    sub.node_mask = mask;
    sub.k8s_sample = NULL;
    int rc = place_decide(c, r, policy, &sub, out, err);
    free(mask);
    return rc;
}

int place_decide(const struct place_cluster *c, const struct place_request *r,
                 enum place_policy policy, const struct place_context *ctx,
                 struct place_decision *out, struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    out->node = -1;
    if ((unsigned)policy >= PLACE_POLICY_COUNT)
        return vg_err_set(err, -EINVAL, "unknown policy %d", (int)policy);
    if (policy == PLACE_POLICY_RANDOM && (ctx == NULL || ctx->rng == NULL))
        return vg_err_set(err, -EINVAL, "policy random needs a random generator");
    if ((policy == PLACE_POLICY_FGD || policy == PLACE_POLICY_DEFAULT ||
         policy == PLACE_POLICY_DRA_DEFAULT) &&
        (ctx == NULL || ctx->mix == NULL))
        return vg_err_set(err, -EINVAL, "policy %s needs a task-type mix",
                          place_policy_name(policy));
    if ((policy == PLACE_POLICY_DRA_FIRSTFIT || policy == PLACE_POLICY_DRA_DEFAULT) &&
        ctx != NULL && ctx->k8s_sample != NULL)
        return decide_sampled(c, r, policy, ctx, out, err);
    if (policy == PLACE_POLICY_DRA_DEFAULT) {
        /* The extender's prioritize picks the node (its weight dominating the other
         * plugins' scores); kube-scheduler's DRA allocator then takes the first cards in
         * device order, whatever card default had in mind. */
        int rc = place_decide(c, r, PLACE_POLICY_DEFAULT, ctx, out, err);
        if (rc < 0 || r->gpu_count == 0)
            return rc;
        const struct place_node *n = &c->nodes[out->node];
        if (!select_first_fit(n, r, out->gpus)) /* default's own cards are usable */
            return vg_err_set(err, -EINVAL, "node %s: no first-fit cards", n->name);
        for (uint16_t i = 0; i < out->gpu_count; i++)
            out->mem_mib[i] = place_gpu_mem_need(&n->gpus[out->gpus[i]], r);
        return 0;
    }
    enum place_gpu_order order = ctx != NULL ? ctx->gpu_order : PLACE_GPU_POLICY;
    if (order == PLACE_GPU_POLICY && policy == PLACE_POLICY_BINPACK)
        order = PLACE_GPU_BINPACK;
    if (order == PLACE_GPU_POLICY && policy == PLACE_POLICY_SPREAD)
        order = PLACE_GPU_SPREAD;
    const uint64_t *mask = ctx != NULL ? ctx->node_mask : NULL;
    struct place_memo *memo = memo_for(ctx, r, policy, order);
    /* default weighs the pressure on each model and, for sharing pods, the gap balance of
     * the whole cluster: taken once per decision (one pass over the cards each). */
    struct place_gaps gap_store;
    struct gap_points gap_points;
    struct default_view view = {0};
    if (policy == PLACE_POLICY_DEFAULT) {
        const struct place_mix *wm = ctx->waste_mix != NULL ? ctx->waste_mix : ctx->mix;
        place_model_pressure(c, wm, view.pressure);
        view.cpu_scarce = place_cpu_pressure(c, wm) >= 1.0;
        if (is_sharing(r)) {
            place_gaps_build(&gap_store, c, wm);
            view.gaps = &gap_store;
            gap_points.gaps = &gap_store;
            gap_points.share = r->gpu_milli;
            memset(gap_points.known, 0, sizeof gap_points.known);
        }
    }

    if (memo != NULL && view.gaps != NULL && memo->shares == NULL) {
        memo->shares = vg_calloc(memo->count, sizeof *memo->shares);
        if (memo->shares == NULL)
            memo = NULL; /* decided without it: the same verdicts, only slower */
    }

    int64_t best = INT64_MIN;
    uint32_t best_rank = UINT32_MAX;
    uint64_t feasible = 0;
    uint8_t gpus[PLACE_MAX_GPUS], card = 0;
    struct place_share_points shares = {0};
    for (size_t i = 0; i < c->node_count; i++) {
        if (mask != NULL) {
            uint64_t word = mask[i / 64] >> (i % 64);
            if (word == 0) {
                i |= 63; /* the rest of this word is empty */
                continue;
            }
            if (!(word & 1))
                continue;
        }
        const struct place_node *n = &c->nodes[i];
        int64_t s = 0;
        const uint8_t *picked = gpus;
        struct place_share_points *sp = &shares;
        if (policy == PLACE_POLICY_RANDOM) {
            if (!place_node_resources_fit(n, r) || !select_gpus(n, r, order, gpus))
                continue;
            /* Uniform over feasible nodes, one pass (reservoir of size one). */
            feasible++;
            if (vg_prng_below(ctx->rng, feasible) != 0)
                continue;
            if (is_sharing(r)) {
                uint64_t seen = 0;
                for (uint16_t g = 0; g < n->gpu_count; g++)
                    if (place_gpu_usable(&n->gpus[g], r) && vg_prng_below(ctx->rng, ++seen) == 0)
                        gpus[0] = (uint8_t)g;
            }
            s = 100;
            best = INT64_MIN; /* the newest sample always replaces */
        } else if (memo != NULL && i < memo->count) {
            struct place_memo_entry *e = &memo->entries[i];
            if (view.gaps != NULL)
                sp = &memo->shares[i]; /* the node's part, kept with its verdict */
            if (e->valid) {
                memo->hits++;
            } else {
                memo->misses++;
                e->valid = true;
                e->feasible =
                    node_verdict(c, n, r, policy, ctx, &view, order, e->gpus, &e->score, sp);
            }
            if (!e->feasible)
                continue;
            s = e->score;
            picked = e->gpus; /* copied only if this node becomes the best */
        } else if (!node_verdict(c, n, r, policy, ctx, &view, order, gpus, &s, &shares)) {
            continue;
        }
        if (view.gaps != NULL) { /* default, sharing pod: the cards' part */
            s += best_share(sp, &gap_points, &card) * 1000;
            picked = &card;
        }
        if (s > best || (s == best && n->rank < best_rank)) {
            best = s;
            best_rank = n->rank;
            out->node = (int32_t)i;
            memcpy(out->gpus, picked, r->gpu_count);
        }
    }
    if (out->node < 0)
        return -ENOSPC;
    const struct place_node *n = &c->nodes[out->node];
    out->score = best;
    out->gpu_count = (uint16_t)r->gpu_count;
    out->milli = r->gpu_milli;
    out->exclusive = r->exclusive;
    out->pod_class = r->pod_class;
    for (uint16_t i = 0; i < out->gpu_count; i++)
        out->mem_mib[i] = place_gpu_mem_need(&n->gpus[out->gpus[i]], r);
    return 0;
}
