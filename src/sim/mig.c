/* vgpu-sim on MIG-capable nodes: the trace's GPU pods as GPU instances, placed by HAMi
 * v2.10's rule or vgpu's (placement/mig.h), in the same arrival order (sim.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/auto.h"
#include "base/mem.h"
#include "sim/sim.h"

/* Profiles as NVML reports them (docs/placement.md, "MIG placement": sources), limited to
 * the allowlist of HAMi's documentation: 1g, 2g, 3g and 7g. */
static const struct sim_mig_model models[] = {
    {"h100-80gb",
     80000,
     {.slices = 8,
      .profile_count = 4,
      .max_sms = 132,
      .profiles = {{"1g.10gb", 9984, 16, 1, 0x7f},
                   {"2g.20gb", 20096, 32, 2, 0x15},
                   {"3g.40gb", 40448, 60, 4, 0x11},
                   {"7g.80gb", 81152, 132, 8, 0x01}}}},
    {"a100-40gb",
     40000,
     {.slices = 8,
      .profile_count = 4,
      .max_sms = 98,
      .profiles = {{"1g.5gb", 4864, 14, 1, 0x7f},
                   {"2g.10gb", 9856, 28, 2, 0x15},
                   {"3g.20gb", 19968, 42, 4, 0x11},
                   {"7g.40gb", 40192, 98, 8, 0x01}}}},
};

const struct sim_mig_model *sim_mig_model_find(const char *name)
{
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        if (strcmp(models[i].name, name) == 0)
            return &models[i];
    return NULL;
}

/* Memory a pod asks of each of its GPUs. */
static uint64_t pod_mem(const struct sim_mig_model *m, const struct sim_pod *p)
{
    return (m->nominal_mib * p->gpu_milli + 999) / 1000;
}

/* A request mix folded by the profiles that can serve each demand (demands served by the
 * same profiles weigh on place_mig_frag alike): at most one entry per profile subset. */
struct folded {
    struct place_mig_demand d[64];
    unsigned key[64];
    size_t n;
};

static void fold_add(struct folded *f, const struct place_mig_gpu *g, uint64_t mem, uint64_t weight)
{
    unsigned key = 0;
    for (unsigned p = 0; p < g->profile_count; p++)
        if (place_mig_fits(g, p, mem, 0, PLACE_MIG_RULE_VGPU))
            key |= 1u << p;
    for (size_t i = 0; i < f->n; i++)
        if (f->key[i] == key) {
            f->d[i].weight += weight;
            return;
        }
    if (f->n < 64) {
        f->key[f->n] = key;
        f->d[f->n++] = (struct place_mig_demand){mem, 0, weight};
    }
}

struct running {
    uint32_t node;
    uint8_t k;
    uint32_t gpu[PLACE_MAX_GPUS];
    uint8_t mask[PLACE_MAX_GPUS];
};

struct choice_memo {
    bool done;
    int rc;
    struct place_mig_choice c;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The choice for a GPU whose slices `used` hold, through the pod's memo. */
static const struct choice_memo *choose(struct choice_memo *memo, const struct sim_mig_model *m,
                                        uint8_t used, uint64_t mem, enum place_mig_rule rule,
                                        const struct folded *mix, const double *table)
{
    struct choice_memo *e = &memo[used];
    if (!e->done) {
        struct place_mig_gpu g = m->gpu;
        g.used = used;
        e->rc = place_mig_choose(&g, mem, 0, rule, mix->d, mix->n, table, &e->c);
        e->done = true;
    }
    return e;
}

const char *sim_mig_rule_name(enum sim_mig_rule r)
{
    return r == SIM_MIG_VGPU ? "vgpu" : r == SIM_MIG_HAMI_SPREAD ? "hami" : "hami-binpack";
}

int sim_mig_run(const struct sim_trace *t, const struct sim_mig_model *m, enum sim_mig_rule rule,
                uint64_t seed, struct sim_mig_result *out, struct vg_err *err)
{
    enum place_mig_rule prule = rule == SIM_MIG_VGPU ? PLACE_MIG_RULE_VGPU : PLACE_MIG_RULE_HAMI;
    double t0 = now_s();
    memset(out, 0, sizeof *out);
    out->rule = rule;
    out->seed = seed;
    struct vg_prng rng;
    vg_prng_seed(&rng, seed);
    VG_AUTO_FREE size_t *order = NULL;
    size_t len = 0;
    int rc = sim_arrival_order(t, &rng, &order, &len, err);
    if (rc < 0)
        return rc;
    const struct place_cluster *c = t->cluster;
    size_t nodes = c->node_count;
    VG_AUTO_FREE uint32_t *rank = xmalloc((nodes + 1) * sizeof *rank);
    VG_AUTO_FREE size_t *first = xmalloc((nodes + 1) * sizeof *first);
    size_t gpus = 0;
    for (size_t i = 0; i < nodes; i++) {
        rank[i] = (uint32_t)i;
        first[i] = gpus;
        gpus += c->nodes[i].gpu_count;
    }
    first[nodes] = gpus;
    for (size_t i = nodes; i > 1; i--) { /* a random node ranking breaks ties, as sim_run's */
        size_t j = (size_t)vg_prng_below(&rng, i);
        uint32_t tmp = rank[i - 1];
        rank[i - 1] = rank[j];
        rank[j] = tmp;
    }
    if (gpus == 0)
        return vg_err_set(err, -EINVAL, "the cluster has no GPUs");
    VG_AUTO_FREE uint8_t *used = xcalloc(gpus, 1);
    VG_AUTO_FREE unsigned *node_used = xcalloc(nodes + 1, sizeof *node_used);
    /* The metric: place_mig_frag under the whole trace's GPU requests (the same for both
     * rules); the rule's own mix: vgpu's, default's learned mix (the shapes of the pods
     * arrived so far) mapped onto the profiles. */
    struct folded metric = {0}, learned = {0};
    VG_AUTO(place_mix_clear) struct place_mix seen;
    place_mix_init(&seen);
    for (size_t i = 0; i < t->pod_count; i++)
        if (t->pods[i].gpu_count > 0)
            fold_add(&metric, &m->gpu, pod_mem(m, &t->pods[i]), 1);
    VG_AUTO_FREE double *metric_table = xmalloc(2 * PLACE_MIG_STATES * sizeof *metric_table);
    double *table = metric_table + PLACE_MIG_STATES;
    place_mig_frag_table(&m->gpu, metric.d, metric.n, metric_table);
    struct choice_memo memo[PLACE_MIG_STATES];
    uint64_t capacity = (uint64_t)gpus * m->gpu.slices, arrived = 0;
    bool snapped = false;
    /* The running pods, for the churn phase's departures, and the metric kept current. */
    VG_AUTO_FREE struct running *run = xcalloc(len + 1, sizeof *run);
    size_t running = 0;
    double frag_now = metric_table[0] * (double)gpus, churn_frag = 0;
    for (size_t a = 0; a < len; a++) {
        const struct sim_pod *p = &t->pods[order[a]];
        if (rule == SIM_MIG_VGPU) { /* every pod is a shape seen, as default learns them */
            struct place_mix_type type = {.cpu_milli = p->cpu_milli,
                                          .gpu_count = p->gpu_count,
                                          .gpu_milli = p->gpu_count > 0 ? p->gpu_milli : 0,
                                          .model_mask = UINT64_MAX,
                                          .weight = 1};
            if (place_mix_add(&seen, &type) < 0)
                return vg_err_set(err, -ENOMEM, "out of memory");
        }
        if (p->gpu_count == 0)
            continue;
        out->gpu_pods++;
        if (snapped && running > 0) { /* full load: one pod leaves before the next comes */
            size_t v = (size_t)vg_prng_below(&rng, running);
            for (unsigned j = 0; j < run[v].k; j++) {
                uint32_t g = run[v].gpu[j];
                frag_now -= metric_table[used[g]];
                used[g] &= (uint8_t)~run[v].mask[j];
                frag_now += metric_table[used[g]];
                node_used[run[v].node] -= (unsigned)__builtin_popcount(run[v].mask[j]);
            }
            run[v] = run[--running];
        }
        uint64_t mem = pod_mem(m, p);
        if (rule == SIM_MIG_VGPU) {
            /* The learned mix as it stands (this pod included), mapped onto the profiles:
             * the table is cheap to rebuild, so at every GPU arrival, where the policies
             * of sim_run rebuild theirs on a schedule. */
            learned.n = place_mig_mix_map(&m->gpu, m->nominal_mib, 64, &seen, learned.d,
                                          sizeof learned.d / sizeof learned.d[0]);
            if (learned.n == 0)
                fold_add(&learned, &m->gpu, mem, 1);
            place_mig_frag_table(&m->gpu, learned.d, learned.n, table);
        }
        memset(memo, 0, sizeof memo);
        int32_t best = -1;
        double best_score = 0;
        size_t best_gpus[PLACE_MAX_GPUS];
        for (size_t i = 0; i < nodes; i++) {
            const struct place_node *n = &c->nodes[i];
            if (n->gpu_count < p->gpu_count)
                continue;
            size_t pick[PLACE_MAX_GPUS];
            double pick_score[PLACE_MAX_GPUS];
            unsigned k = 0;
            for (unsigned g = 0; g < n->gpu_count; g++) {
                const struct choice_memo *e =
                    choose(memo, m, used[first[i] + g], mem, prule, &learned, table);
                if (e->rc != 0)
                    continue;
                /* The gpu_count lowest keys, the lowest index on a tie. vgpu: the score,
                 * then the fuller GPU; HAMi's GPU policies: spread takes the least used
                 * GPU, binpack the most used. */
                int bits = __builtin_popcount(used[first[i] + g]);
                double sc = rule == SIM_MIG_VGPU          ? e->c.score
                            : rule == SIM_MIG_HAMI_SPREAD ? (double)bits
                                                          : -(double)bits;
                unsigned at = k < p->gpu_count ? k++ : p->gpu_count;
                while (at > 0 && (sc < pick_score[at - 1] - 1e-9 ||
                                  (rule == SIM_MIG_VGPU && sc < pick_score[at - 1] + 1e-9 &&
                                   bits > __builtin_popcount(used[pick[at - 1]])))) {
                    if (at < p->gpu_count) {
                        pick[at] = pick[at - 1];
                        pick_score[at] = pick_score[at - 1];
                    }
                    at--;
                }
                if (at < p->gpu_count) {
                    pick[at] = first[i] + g;
                    pick_score[at] = sc;
                }
            }
            if (k < p->gpu_count)
                continue;
            double score = 0;
            if (rule == SIM_MIG_VGPU)
                for (unsigned j = 0; j < k; j++)
                    score += pick_score[j];
            else /* HAMi's binpack: the node with the larger share of its slices in use */
                score = -(double)node_used[i] / (double)(n->gpu_count * m->gpu.slices);
            bool better = best < 0 || score < best_score - 1e-9;
            if (!better && score < best_score + 1e-9) {
                /* vgpu: the fuller node; both: then the lower rank */
                double fi = (double)node_used[i] / (double)n->gpu_count,
                       fb = (double)node_used[best] / (double)c->nodes[best].gpu_count;
                if (rule == SIM_MIG_VGPU && fi != fb)
                    better = fi > fb;
                else
                    better = rank[i] < rank[best];
            }
            if (better) {
                best = (int32_t)i;
                best_score = score;
                memcpy(best_gpus, pick, sizeof pick[0] * k);
            }
        }
        /* Arrival counts slices: those of the smallest profile that serves the request. */
        unsigned need = 0;
        for (unsigned q = 0; q < m->gpu.profile_count; q++)
            if (place_mig_fits(&m->gpu, q, mem, 0, PLACE_MIG_RULE_VGPU) &&
                (need == 0 || m->gpu.profiles[q].size < need))
                need = m->gpu.profiles[q].size;
        arrived += (uint64_t)p->gpu_count * (need > 0 ? need : m->gpu.slices);
        if (best < 0) {
            out->unplaced++;
            if (!snapped)
                out->unplaced_100++;
            else
                out->churn_unplaced++;
        } else {
            struct running *r = &run[running++];
            r->node = (uint32_t)best;
            r->k = (uint8_t)p->gpu_count;
            for (unsigned j = 0; j < p->gpu_count; j++) {
                const struct choice_memo *e =
                    choose(memo, m, used[best_gpus[j]], mem, prule, &learned, table);
                uint8_t mask = place_mig_mask(e->c.start, e->c.size);
                frag_now -= metric_table[used[best_gpus[j]]];
                used[best_gpus[j]] |= mask;
                frag_now += metric_table[used[best_gpus[j]]];
                node_used[best] += e->c.size;
                r->gpu[j] = (uint32_t)best_gpus[j];
                r->mask[j] = mask;
            }
        }
        if (snapped) {
            out->churn_pods++;
            churn_frag += frag_now;
        }
        if (!snapped && arrived >= capacity) {
            snapped = true;
            double frag = 0;
            uint64_t free_slices = 0;
            for (size_t g = 0; g < gpus; g++) {
                frag += metric_table[used[g]];
                free_slices += (uint64_t)(m->gpu.slices - __builtin_popcount(used[g]));
            }
            double all = (double)gpus * m->gpu.slices;
            out->unusable_slices_100 = frag;
            out->unusable_pct_100 = 100.0 * frag / all;
            out->free_pct_100 = 100.0 * (double)free_slices / all;
            out->alloc_pct_100 = 100.0 - out->free_pct_100;
        }
    }
    if (out->churn_pods > 0)
        out->churn_unusable_pct =
            100.0 * churn_frag / (double)out->churn_pods / ((double)gpus * m->gpu.slices);
    out->seconds = now_s() - t0;
    return 0;
}
