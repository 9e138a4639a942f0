/* The fill-up replay of docs/openb.md ("The paper's procedure"), one run per (policy, seed).
 *
 * Randomness, in the order it is drawn from one xoshiro256** stream seeded with the run's
 * seed (base/prng.h): the Fisher-Yates shuffle of the name-sorted pods, the tuning draws
 * (clones appended, or pods removed), the Fisher-Yates permutation that ranks the
 * name-sorted nodes for tie-breaks, then the random policy's own draws. The paper's
 * simulator draws the same things from Go's math/rand, so runs are statistically but not
 * placement-identical to it. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/mem.h"
#include "sim/sim.h"

static uint64_t pod_request_milli(const struct sim_pod *p)
{
    return (uint64_t)p->gpu_count * p->gpu_milli;
}

static const char *const shape_names[SIM_SHAPE_COUNT] = {
    [SIM_SHAPE_CPU] = "cpu",   [SIM_SHAPE_SHARE] = "share", [SIM_SHAPE_GPU1] = "gpu1",
    [SIM_SHAPE_GPU2] = "gpu2", [SIM_SHAPE_GPU4] = "gpu4",   [SIM_SHAPE_GPU8] = "gpu8",
};

const char *sim_shape_name(enum sim_shape s)
{
    return (unsigned)s < SIM_SHAPE_COUNT ? shape_names[s] : "unknown";
}

enum sim_shape sim_pod_shape(const struct sim_pod *p)
{
    if (p->gpu_count == 0)
        return SIM_SHAPE_CPU;
    if (p->gpu_count == 1)
        return p->gpu_milli < PLACE_GPU_MILLI ? SIM_SHAPE_SHARE : SIM_SHAPE_GPU1;
    if (p->gpu_count == 2)
        return SIM_SHAPE_GPU2;
    return p->gpu_count <= 4 ? SIM_SHAPE_GPU4 : SIM_SHAPE_GPU8;
}

static struct place_cluster *clone_cluster(const struct place_cluster *src)
{
    struct place_cluster *c = xmalloc(sizeof *c);
    *c = *src;
    c->nodes = xmalloc(src->node_count * sizeof *c->nodes);
    memcpy(c->nodes, src->nodes, src->node_count * sizeof *c->nodes);
    c->node_cap = src->node_count;
    return c;
}

VG_DEFINE_AUTO(cluster_cleanup, struct place_cluster, place_cluster_free)

static void fill_request(struct place_request *r, const struct sim_pod *p)
{
    memset(r, 0, sizeof *r);
    r->cpu_milli = p->cpu_milli;
    r->mem_mib = p->mem_mib;
    r->gpu_count = p->gpu_count;
    r->gpu_milli = p->gpu_milli;
    r->model_mask = p->model_mask;
    r->pod_class = p->pod_class;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The learned mix (every shape seen so far, not cut to a typical set: cutting to 95 %
 * cost 0.2 points on openb) is refreshed at arrivals 1, 2, 4, ..., 256 and every 256 after. */
static bool refresh_due(size_t arrivals)
{
    return arrivals % 256 == 0 || (arrivals < 256 && (arrivals & (arrivals - 1)) == 0);
}

int sim_arrival_order(const struct sim_trace *t, struct vg_prng *rng, size_t **out, size_t *out_len,
                      struct vg_err *err)
{
    struct vg_prng *r = rng;
    /* Shuffle the name-sorted pods. */
    size_t n = t->pod_count, len = n, cap = 0;
    VG_AUTO_FREE size_t *order = NULL;
    int rc = vg_array_grow(&order, &cap, n + n / 2 + 16, sizeof *order, SIM_ARRIVALS_MAX,
                           "arrivals", err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)vg_prng_below(r, i);
        size_t tmp = order[i - 1];
        order[i - 1] = order[j];
        order[j] = tmp;
    }
    /* Tune the total GPU request to 130 % of capacity. */
    uint64_t total = 0, target = t->cluster->milli_total * SIM_TUNE_PCT / 100;
    bool any_gpu = false;
    for (size_t i = 0; i < n; i++) {
        total += pod_request_milli(&t->pods[i]);
        any_gpu |= t->pods[i].gpu_milli > 0;
    }
    if (total < target) {
        /* Only pods that ask for a GPU move the total: without one, the fill-up never ends. */
        if (!any_gpu)
            return vg_err_set(err, -EINVAL,
                              "no pod in the trace requests a GPU: cannot fill the cluster to "
                              "%u %% of its GPU capacity",
                              SIM_TUNE_PCT);
        for (;;) {
            size_t i = (size_t)vg_prng_below(r, n);
            /* The paper's check adds the per-GPU share, not the whole request. */
            if (total + t->pods[i].gpu_milli > target)
                break;
            rc = vg_array_grow(&order, &cap, len + 1, sizeof *order, SIM_ARRIVALS_MAX, "arrivals",
                               err);
            if (rc < 0)
                return rc;
            order[len++] = i;
            total += pod_request_milli(&t->pods[i]);
        }
    } else {
        while (total > target && len > 0) {
            size_t j = (size_t)vg_prng_below(r, len);
            total -= pod_request_milli(&t->pods[order[j]]);
            memmove(&order[j], &order[j + 1], (len - j - 1) * sizeof *order);
            len--;
        }
    }
    *out = vg_steal_ptr(&order);
    *out_len = len;
    return 0;
}

int sim_run(const struct sim_trace *t, enum place_policy policy, uint64_t seed,
            const struct sim_options *opt, struct sim_run_result *out, struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    out->policy = policy;
    out->seed = seed;
    struct vg_prng rng;
    vg_prng_seed(&rng, seed);

    /* Arrival order: shuffle the name-sorted pods, tuned to 130 %. */
    VG_AUTO_FREE size_t *order = NULL;
    size_t len = 0;
    int rc = sim_arrival_order(t, &rng, &order, &len, err);
    if (rc < 0)
        return rc;
    /* A fixed random node ranking breaks ties for the whole run. */
    VG_AUTO(cluster_cleanup) struct place_cluster *c = clone_cluster(t->cluster);
    size_t nodes = c->node_count;
    {
        VG_AUTO_FREE uint32_t *perm = xmalloc(nodes * sizeof *perm);
        for (size_t i = 0; i < nodes; i++)
            perm[i] = (uint32_t)i;
        for (size_t i = nodes; i > 1; i--) {
            size_t j = (size_t)vg_prng_below(&rng, i);
            uint32_t tmp = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = tmp;
        }
        for (size_t i = 0; i < nodes; i++)
            c->nodes[i].rank = perm[i];
    }

    enum sim_mix_source source = SIM_MIX_ORACLE;
    if (policy == PLACE_POLICY_FGD)
        source = opt->fgd_mix;
    else if (policy == PLACE_POLICY_DEFAULT || policy == PLACE_POLICY_DRA_DEFAULT)
        source = opt->default_mix;
    VG_AUTO(place_mix_clear) struct place_mix seen;
    place_mix_init(&seen);
    VG_AUTO(place_mix_clear) struct place_mix learned;
    place_mix_init(&learned);
    VG_AUTO(place_frag_cache_free) struct place_frag_cache cache = {0};
    if (place_frag_cache_init(&cache, c->node_count) < 0)
        return vg_err_set(err, -ENOMEM, "out of memory");
    /* One kube-scheduler per run: its filter pass resumes where the previous one stopped. */
    struct place_k8s_sample sample = {.percentage = opt->nodes_to_score_pct};
    struct place_context ctx = {.rng = &rng,
                                .mix = source == SIM_MIX_ORACLE ? &t->typical : &learned,
                                .frag_cache = &cache,
                                .k8s_sample = &sample};

    double sum_alloc[SIM_CURVE_POINTS] = {0}, sum_frag[SIM_CURVE_POINTS] = {0},
           sum_rate[SIM_CURVE_POINTS] = {0};
    uint32_t events[SIM_CURVE_POINTS] = {0};
    VG_AUTO_FREE uint64_t *lat = opt->time_decisions ? xmalloc(len * sizeof *lat) : NULL;
    uint64_t arrived = 0, milli_total = c->milli_total;
    /* Priorities are drawn from a stream of their own: the runs without them are
     * unchanged, and the same seed marks the same pods whatever the policy. */
    struct vg_prng prio_rng;
    vg_prng_seed(&prio_rng, seed ^ UINT64_C(0x9e3779b97f4a7c15));
    double weight = (double)t->typical.total_weight;
    for (size_t k = 0; k < len; k++) {
        const struct sim_pod *p = &t->pods[order[k]];
        struct place_request r;
        fill_request(&r, p);
        arrived += pod_request_milli(p);
        if (source == SIM_MIX_LEARNED) {
            /* A type keeps the pod's gpu_spec: a pod that needs a T4 does not count as
             * one that could use a G2's remainder, and default's model pressure comes
             * from these lists. */
            struct place_mix_type type = {.cpu_milli = r.cpu_milli,
                                          .gpu_count = r.gpu_count,
                                          .gpu_milli = r.gpu_count > 0 ? r.gpu_milli : 0,
                                          .model_mask = p->model_mask,
                                          .weight = 1};
            if (place_mix_add(&seen, &type) < 0)
                return vg_err_set(err, -ENOMEM, "out of memory");
            if (refresh_due(k + 1)) {
                place_mix_clear(&learned);
                for (size_t i = 0; i < seen.count; i++)
                    (void)place_mix_add(&learned, &seen.types[i]);
                /* A learned mix refreshes in place: the memo of F_n and the fit index
                 * must not outlive it. */
                place_frag_cache_reset(&cache);
            }
        }
        struct place_decision d;
        uint64_t t0 = lat != NULL ? now_ns() : 0;
        r.high = opt->high_pct > 0 && r.gpu_count > 0 && r.gpu_milli < PLACE_GPU_MILLI &&
                 vg_prng_below(&prio_rng, 100) < opt->high_pct;
        r.avoid_high = r.high;
        rc = place_decide(c, &r, policy, &ctx, &d, err);
        if (r.high && rc == -ENOSPC) {
            r.avoid_high = false; /* no GPU without one can take it: beside one */
            rc = place_decide(c, &r, policy, &ctx, &d, err);
            out->high_shared += rc == 0 ? 1u : 0u;
        }
        out->high_pods += r.high && rc == 0 ? 1u : 0u;
        if (lat != NULL)
            lat[k] = now_ns() - t0;
        if (rc == 0) /* -ENOSPC from either step is a rejected pod, counted below */
            rc = place_allocate(c, &r, &d, err);
        uint64_t x = (arrived * 200 + milli_total) / (2 * milli_total);
        if (rc == -ENOSPC) {
            out->failed_pods++;
            if (x <= 100) {
                enum sim_shape shape = sim_pod_shape(p);
                out->failed_100[shape]++;
                out->failed_100_milli[shape] += pod_request_milli(p);
            }
            rc = 0;
        }
        if (rc < 0)
            return rc;
        if (x < SIM_CURVE_POINTS) {
            double idle = (double)(milli_total - c->milli_used);
            double frag_milli = weight > 0 ? (double)c->frag_total / weight : 0;
            sum_alloc[x] += 100.0 * (double)c->milli_used / (double)milli_total;
            sum_frag[x] += 100.0 * frag_milli / (double)milli_total;
            sum_rate[x] += idle > 0 ? 100.0 * frag_milli / idle : 0;
            events[x]++;
        }
    }
    out->pods = len;
    if (lat != NULL && len > 0) {
        qsort(lat, len, sizeof *lat, cmp_u64);
        out->decision_ns_p99 = lat[(len * 99) / 100 < len ? (len * 99) / 100 : len - 1];
    }
    /* Discretise as the paper's merge script does: the mean over the events at x, else
     * over x-1..x+1, else (beyond the last arrival) the previous point. */
    for (int x = 0; x < SIM_CURVE_POINTS; x++) {
        double a = 0, f = 0, q = 0;
        uint32_t m = 0;
        for (int y = events[x] > 0 ? x : x - 1; y <= (events[x] > 0 ? x : x + 1); y++) {
            if (y < 0 || y >= SIM_CURVE_POINTS)
                continue;
            a += sum_alloc[y];
            f += sum_frag[y];
            q += sum_rate[y];
            m += events[y];
        }
        if (m > 0) {
            out->alloc_pct[x] = a / m;
            out->frag_pct[x] = f / m;
            out->frag_rate_pct[x] = q / m;
        } else if (x > 0) {
            out->alloc_pct[x] = out->alloc_pct[x - 1];
            out->frag_pct[x] = out->frag_pct[x - 1];
            out->frag_rate_pct[x] = out->frag_rate_pct[x - 1];
        }
    }
    out->unallocated_pct_100 = 100.0 - out->alloc_pct[100];
    out->alloc_pct_130 = out->alloc_pct[130];
    return 0;
}

struct pool {
    const struct sim_trace *t;
    const enum place_policy *policies;
    const uint64_t *seeds;
    size_t seed_count, total, next, done;
    const struct sim_options *opt;
    struct sim_run_result *results;
    pthread_mutex_t lock;
    int rc;
    struct vg_err err;
};

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        size_t job = p->next < p->total && p->rc == 0 ? p->next++ : SIZE_MAX;
        pthread_mutex_unlock(&p->lock);
        if (job == SIZE_MAX)
            return NULL;
        struct vg_err err = {0};
        uint64_t t0 = now_ns();
        int rc = sim_run(p->t, p->policies[job / p->seed_count], p->seeds[job % p->seed_count],
                         p->opt, &p->results[job], &err);
        p->results[job].seconds = (double)(now_ns() - t0) / 1e9;
        if (rc == 0 && p->opt != NULL && p->opt->progress != NULL) {
            pthread_mutex_lock(&p->lock);
            p->done++;
            p->opt->progress(p->opt->progress_arg, p->done, p->total, &p->results[job]);
            pthread_mutex_unlock(&p->lock);
        }
        if (rc < 0) {
            pthread_mutex_lock(&p->lock);
            if (p->rc == 0) {
                p->rc = rc;
                p->err = err;
            }
            pthread_mutex_unlock(&p->lock);
        }
    }
}

int sim_run_many(const struct sim_trace *t, const enum place_policy *policies, size_t policy_count,
                 const uint64_t *seeds, size_t seed_count, unsigned jobs,
                 const struct sim_options *opt, struct sim_run_result *results, struct vg_err *err)
{
    struct pool p = {.t = t,
                     .policies = policies,
                     .seeds = seeds,
                     .seed_count = seed_count,
                     .total = policy_count * seed_count,
                     .opt = opt,
                     .results = results};
    pthread_mutex_init(&p.lock, NULL);
    if (jobs == 0)
        jobs = 1;
    if (jobs > 64)
        jobs = 64;
    pthread_t threads[64];
    unsigned started = 0;
    for (; started < jobs - 1; started++)
        if (pthread_create(&threads[started], NULL, worker, &p) != 0)
            break;
    worker(&p); /* the calling thread works too */
    for (unsigned i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    pthread_mutex_destroy(&p.lock);
    if (p.rc < 0) {
        if (err != NULL)
            *err = p.err;
        return p.rc;
    }
    return 0;
}
