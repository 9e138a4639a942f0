/* Placement core: the cluster model, GPU requests, feasibility and the scoring policies
 * shared by vgpu-scheduler and vgpu-sim.
 *
 * Pure C: no I/O, no clock, no globals. Randomness (the `random` policy) comes in through
 * a caller-owned struct vg_prng, and the task-type mix used by the fragmentation-aware
 * policies is a caller-owned struct place_mix. The caller owns the cluster; the core
 * keeps per-node summaries (free GPU share, fully free GPUs, pod classes, fragmentation)
 * up to date on every allocate and release, so a decision reads summaries instead of
 * rescanning allocations, and a release restores the state bit for bit.
 *
 * Units: CPU in milli-cores, memory in MiB, GPU compute in milli-GPU (1000 = a whole
 * card; HAMi's `nvidia.com/gpucores: 30` is 300), GPU memory in MiB. */
#ifndef VGPU_PLACEMENT_PLACEMENT_H
#define VGPU_PLACEMENT_PLACEMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/prng.h"

#define PLACE_GPU_MILLI   1000 /* compute capacity of one GPU */
#define PLACE_MAX_GPUS    16   /* GPUs on one node */
#define PLACE_MAX_MODELS  64   /* distinct GPU models in one cluster (bitmask width) */
#define PLACE_NAME_MAX    64   /* node names, GPU UUIDs, labels */
#define PLACE_MODEL_MAX   48   /* GPU model names */
#define PLACE_MAX_LABELS  8    /* labels per node, selector terms per request */
#define PLACE_MAX_LIST    8    /* entries in a type or UUID include/exclude list */
#define PLACE_CLASS_COUNT 5    /* pod classes of the GPU Clustering policy */

/* ---- Cluster model ---------------------------------------------------------------- */

struct place_gpu {
    char uuid[PLACE_NAME_MAX];
    uint16_t model;         /* index into place_cluster.models */
    uint8_t numa;           /* NUMA node of the card */
    bool healthy;           /* unhealthy cards take no new tenants */
    uint16_t slots;         /* most tenants at once; 0 = unlimited */
    uint16_t tenants;       /* containers placed on this card */
    uint64_t mem_total_mib; /* 0 = memory not modelled (the openb trace) */
    uint64_t mem_used_mib;
    uint32_t milli_used; /* compute handed out, 0..1000 */
    uint32_t exclusive;  /* tenants holding the card exclusively (0 or 1) */
    uint16_t high;       /* high-priority tenants (nvidia.com/priority 0) */
};

struct place_label {
    char key[PLACE_NAME_MAX];
    char value[PLACE_NAME_MAX];
};

struct place_node {
    char name[PLACE_NAME_MAX];
    uint64_t cpu_total, cpu_used; /* milli-cores */
    uint64_t mem_total, mem_used; /* MiB */
    uint32_t rank;                /* tie-break: on equal scores the lowest rank wins */
    uint16_t gpu_count;
    uint16_t model; /* model of the node's GPUs (first GPU), for fragmentation */
    struct place_gpu gpus[PLACE_MAX_GPUS];
    uint8_t label_count;
    struct place_label labels[PLACE_MAX_LABELS];

    /* Summaries kept by place_allocate/place_release; never written by callers. */
    uint32_t free_milli;                    /* Σ unallocated compute over the GPUs */
    uint16_t free_gpus;                     /* GPUs with no tenant */
    uint32_t class_pods[PLACE_CLASS_COUNT]; /* GPU pods hosted, by class */
    uint64_t frag;                          /* F_n(M) under the cluster's metric mix */
};

struct place_mix;

struct place_cluster {
    struct place_node *nodes; /* owned */
    size_t node_count, node_cap;
    char models[PLACE_MAX_MODELS][PLACE_MODEL_MAX];
    size_t model_count;
    const struct place_mix *metric_mix; /* borrowed; may be NULL (frag stays 0) */
    /* Cluster-wide summaries. */
    uint64_t gpu_count;
    uint64_t milli_total, milli_used;
    uint64_t frag_total; /* Σ node frag, in weight·milli */
};

/* Allocates an empty cluster; place_cluster_free(NULL) is a no-op. */
struct place_cluster *place_cluster_new(void);
void place_cluster_free(struct place_cluster *c);

/* Index of a model name, adding it when new; -ENOSPC past PLACE_MAX_MODELS. */
int place_cluster_model(struct place_cluster *c, const char *name, struct vg_err *err);

/* Appends a node with gpu_count identical cards of one model (the common case; edit the
 * returned node's gpus[] for UUIDs, NUMA, memory or mixed models, then call
 * place_cluster_refresh). The node's rank is its index. Returns the node index. */
int place_cluster_add_node(struct place_cluster *c, const char *name, uint64_t cpu_milli,
                           uint64_t mem_mib, uint16_t gpu_count, const char *model,
                           uint64_t gpu_mem_mib, struct vg_err *err);

/* Recomputes every summary from the per-GPU state (after editing nodes by hand or
 * changing the metric mix). */
void place_cluster_refresh(struct place_cluster *c);
void place_cluster_set_metric_mix(struct place_cluster *c, const struct place_mix *mix);

/* ---- Requests --------------------------------------------------------------------- */

/* One container's request. Zero-initialise, fill what applies, then place_request_resolve.
 * gpu_count 0 is a CPU-only request. */
struct place_request {
    uint64_t cpu_milli, mem_mib;
    uint32_t gpu_count;
    uint32_t gpu_milli;   /* compute per GPU, 0..1000 */
    uint64_t gpu_mem_mib; /* memory per GPU in MiB; 0 = none asked */
    uint32_t gpu_mem_pct; /* memory per GPU as % of the card (1..100); 0 = unset */
    bool exclusive;       /* whole cards: no co-tenant before or after */
    bool high;            /* high task priority: counted in place_gpu.high */
    bool avoid_high;      /* cards that already hold a high-priority tenant are not usable
                             (the scheduler's first pass for a high-priority pod) */
    bool numa_bind;       /* all GPUs on one NUMA node */
    bool type_exact;      /* type lists match model names exactly (trace gpu_spec) rather
                             than HAMi's case-insensitive substring */
    uint8_t type_include_count, type_exclude_count, uuid_include_count, uuid_exclude_count;
    char type_include[PLACE_MAX_LIST][PLACE_MODEL_MAX];
    char type_exclude[PLACE_MAX_LIST][PLACE_MODEL_MAX];
    char uuid_include[PLACE_MAX_LIST][PLACE_NAME_MAX];
    char uuid_exclude[PLACE_MAX_LIST][PLACE_NAME_MAX];
    uint8_t selector_count; /* node labels that must all match */
    struct place_label selector[PLACE_MAX_LABELS];

    /* Filled by place_request_resolve. */
    uint64_t model_mask; /* bit m set: model m allowed */
    uint8_t pod_class;   /* GPU Clustering class */
};

/* HAMi's container resources as written in a pod spec; negative = absent. */
struct place_hami_resources {
    int64_t gpu;            /* nvidia.com/gpu */
    int64_t gpumem;         /* nvidia.com/gpumem, MiB */
    int64_t gpumem_percent; /* nvidia.com/gpumem-percentage */
    int64_t gpucores;       /* nvidia.com/gpucores, percent */
};

struct place_hami_defaults {
    int64_t default_memory;  /* defaultMemory (MiB), chart default 0 */
    int64_t default_cores;   /* defaultCores, chart default 0 */
    int64_t default_gpu_num; /* defaultGPUNum, chart default 1 */
};

/* Applies HAMi's webhook and request defaulting (docs/interfaces.md, "HAMi compatibility") to the
 * GPU fields of out: a memory or cores key without nvidia.com/gpu adds defaultGPUNum
 * cards; no memory key means 100 % of the card; nvidia.com/gpu with neither cores nor a
 * partial memory share is an exclusive card; cores above 100 are clamped. -EINVAL with a
 * message for values HAMi rejects (percentage outside 0..100, negative values). */
int place_request_from_hami(const struct place_hami_resources *res,
                            const struct place_hami_defaults *defaults, struct place_request *out,
                            struct vg_err *err);

/* Checks the request's ranges and computes model_mask and pod_class for cluster c.
 * -EINVAL for impossible requests (gpu_milli > 1000, more GPUs than PLACE_MAX_GPUS,
 * a fractional multi-GPU request is allowed). */
int place_request_resolve(const struct place_cluster *c, struct place_request *r,
                          struct vg_err *err);

/* ---- Decisions -------------------------------------------------------------------- */

enum place_policy {
    PLACE_POLICY_RANDOM = 0,
    PLACE_POLICY_DOTPROD,
    PLACE_POLICY_CLUSTERING,
    PLACE_POLICY_PACKING,
    PLACE_POLICY_BESTFIT,
    PLACE_POLICY_FGD,
    PLACE_POLICY_BINPACK, /* HAMi node binpack (request counted) */
    PLACE_POLICY_SPREAD,  /* HAMi node spread (request counted) */
    PLACE_POLICY_DEFAULT, /* vgpu's own policy */
    /* Models of kube-scheduler with Dynamic Resource Allocation (docs/dra.md, "Placement
     * under DRA"), for vgpu-sim only: place_policy_from_name does not know them, so the
     * scheduler cannot be configured with one (place_sim_policy_from_name does). */
    PLACE_POLICY_DRA_FIRSTFIT, /* kube-scheduler alone: the node by NodeResourcesFit
                                  (LeastAllocated) + NodeResourcesBalancedAllocation on CPU
                                  and memory, the GPUs first-fit in device order */
    PLACE_POLICY_DRA_DEFAULT,  /* the node by vgpu's default (the extender's prioritize),
                                  the GPUs inside it first-fit in device order */
    PLACE_POLICY_COUNT,
};

/* How the GPUs inside the chosen node are picked. */
enum place_gpu_order {
    PLACE_GPU_POLICY = 0, /* the policy's own rule */
    PLACE_GPU_BINPACK,    /* HAMi binpack: most used card first */
    PLACE_GPU_SPREAD,     /* HAMi spread: least used card first */
};

const char *place_policy_name(enum place_policy p);
/* -1 for an unknown name and for the simulator-only models (place_policy_sim_only). */
int place_policy_from_name(const char *name);
/* Whether p models another scheduler (kube-scheduler's DRA allocator) rather than being a
 * policy vgpu's scheduler can run. */
bool place_policy_sim_only(enum place_policy p);
/* Every policy, the simulator-only models included; -1 for an unknown name. */
int place_sim_policy_from_name(const char *name);

/* Memoised F_n(M) for a mix other than the cluster's metric mix (a learned one): one
 * entry per node index, holding the node state it was computed for (free CPU and each
 * card's used compute) and reused while that state is unchanged. The caller owns it and
 * calls place_frag_cache_reset whenever it changes the mix or the cluster's nodes.
 * Decisions are identical with and without a cache. */
struct place_frag_entry {
    uint64_t cpu_free;
    uint16_t milli_used[PLACE_MAX_GPUS];
    uint64_t frag;
    bool valid;
};

/* Index of a mix for place_fit_weight: per GPU model, the mix's single-GPU types that
 * model can run, grouped by CPU level (types asking at most that CPU) and sorted by
 * compute share, with cumulative weights, so "weight of the types a card of r milli can
 * take" is two binary searches. Multi-GPU types are checked one by one. Lives in a
 * place_frag_cache, built on first use after place_frag_cache_reset (a model's set on
 * the first question about that model), and rebuilt when asked about another mix (or
 * one whose type count or weight changed). */
struct place_fit_set {
    bool built;
    size_t level_count;
    uint64_t *levels; /* ascending CPU requests */
    size_t *start;    /* level j's entries are start[j] .. start[j + 1] - 1 */
    uint32_t *milli;  /* ascending within a level */
    uint64_t *cum;    /* weight of the level's entries up to and including this one */
};

struct place_fit_index {
    bool valid;
    const struct place_mix *mix; /* what it was built from: address, count, weight */
    size_t mix_count;
    uint64_t mix_weight;
    uint64_t gpu_weight;        /* Σ weight of the mix's GPU types */
    struct place_fit_set *sets; /* PLACE_MAX_MODELS of them */
    size_t other_count;
    size_t *other; /* mix indices of the multi-GPU types */
};

struct place_frag_cache {
    struct place_frag_entry *entries;
    size_t count;
    uint64_t hits, misses; /* statistics, for tests and tuning */
    struct place_fit_index fit;
};

/* -ENOMEM; place_frag_cache_free on a zeroed or initialised cache is safe. */
int place_frag_cache_init(struct place_frag_cache *fc, size_t node_count);
void place_frag_cache_reset(struct place_frag_cache *fc);
void place_frag_cache_free(struct place_frag_cache *fc);

/* default's verdict on a sharing pod, the part that depends on the node alone: for each
 * distinct free share among the node's usable cards (in card order), the first such card
 * and its stranded-share points. The whole cluster's gap balance is added per decision. */
struct place_share_points {
    uint8_t count;
    uint8_t gpu[PLACE_MAX_GPUS];
    uint16_t free[PLACE_MAX_GPUS]; /* milli */
    int32_t points[PLACE_MAX_GPUS];
};

/* Memo of per-node verdicts (feasible, score, GPUs) for one request, policy and GPU order.
 * Under every policy but random, fgd and default (and under fgd and default too while
 * their mix is fixed: place_context.memo_mix; for a sharing pod default keeps the node's
 * part, place_share_points, and adds the cluster's gaps each decision), a node's verdict
 * depends only on the node and the request, so a decision over nodes unchanged since the last
 * decision for an equal request reuses them. The caller keeps it true: place_memo_forget(node)
 * after anything that changes a node (place_allocate, place_release, editing it by hand), and
 * place_memo_reset after place_cluster_refresh or any change to many nodes. A request,
 * policy or order different from every memo's clears the least recently used one. Decisions are
 * identical with and without a memo. The caller owns it. */
struct place_memo_entry {
    bool valid, feasible;
    uint8_t gpus[PLACE_MAX_GPUS];
    int64_t score; /* default, sharing pods: without the cards' part (shares[] below) */
};

struct place_memo {
    struct place_memo_entry *entries;  /* one per node index below count */
    struct place_share_points *shares; /* likewise; allocated when default's sharing pods
                                          first use the memo */
    size_t count;
    bool keyed;    /* request, policy and order below are set */
    uint64_t used; /* when last chosen, among the memos of a context (least recent goes) */
    struct place_request request;
    int policy, order;
    uint64_t hits, misses; /* statistics, for tests and tuning */
};

/* -ENOMEM; nodes at index count and above are decided without the memo.
 * place_memo_free on a zeroed or initialised memo is safe. */
int place_memo_init(struct place_memo *m, size_t node_count);
void place_memo_reset(struct place_memo *m);
void place_memo_forget(struct place_memo *m, size_t node);
void place_memo_free(struct place_memo *m);

struct place_context {
    struct vg_prng *rng;         /* required by PLACE_POLICY_RANDOM */
    const struct place_mix *mix; /* required by FGD and DEFAULT: the task types to keep
                                    room for */
    enum place_gpu_order gpu_order;
    struct place_frag_cache *frag_cache; /* optional: memo of F_n(mix) per node */
    /* Optional: only nodes whose bit is set take part (bit i % 64 of node_mask[i / 64],
     * node_count bits); NULL = every node. Random samples among the masked nodes in index
     * order, exactly as if the others were infeasible. */
    const uint64_t *node_mask;
    /* Optional: per-node verdicts kept between decisions; memo_count > 1 memos, one per
     * request shape (the least recently used one is re-keyed for a new shape), so pods of
     * several shapes in turn keep theirs. */
    struct place_memo *memo;
    size_t memo_count; /* 0 or 1: one memo */
    /* Optional: the mix DEFAULT scores sharing pods against; NULL = mix. The simulator
     * passes a learned mix that keeps each pod's model restriction (gpu_spec) here,
     * while mix, for FGD's score, ignores it (keeping it there did worse). */
    const struct place_mix *waste_mix;
    /* fgd and default use memo too when set: the caller promises to place_memo_reset it
     * whenever mix or waste_mix changes. */
    bool memo_mix;
    /* Optional, for the DRA models (dra-firstfit, dra-default) only: kube-scheduler's
     * percentageOfNodesToScore. NULL: every feasible node is scored. */
    struct place_k8s_sample *k8s_sample;
};

/* kube-scheduler filters nodes from where its previous cycle stopped, in node order, and
 * stops once it has found numFeasibleNodesToFind feasible ones: every node below 100
 * nodes, else n · p / 100 but at least 100, p = percentage, or when 0 (the default)
 * 50 − n / 125 but at least 5. Only those are scored (by the plugins and extenders). The
 * caller keeps one per simulated scheduler, zeroed at start. */
struct place_k8s_sample {
    uint32_t percentage; /* percentageOfNodesToScore: 0 = adaptive, 100 = every node */
    size_t next;         /* nextStartNodeIndex */
};

/* numFeasibleNodesToFind for a cluster of `nodes` nodes. */
size_t place_k8s_nodes_to_find(size_t nodes, uint32_t percentage);

struct place_decision {
    int32_t node; /* -1: nothing fits */
    uint16_t gpu_count;
    uint8_t gpus[PLACE_MAX_GPUS];
    uint32_t milli;                   /* compute charged on each GPU */
    uint64_t mem_mib[PLACE_MAX_GPUS]; /* memory charged on each GPU */
    bool exclusive;
    uint8_t pod_class;
    int64_t score; /* the winning node's score (policy units) */
};

/* Whether the node can host the request at all, and if so the GPUs the policy-neutral
 * "best fit" rule would take. Exposed for tests and for the extender's filter. */
bool place_node_feasible(const struct place_cluster *c, size_t node, const struct place_request *r);

/* Picks the node and the GPUs. 0 and a decision, -ENOSPC (decision.node = -1) when no
 * node fits, -EINVAL for a missing context field. Never modifies the cluster. */
int place_decide(const struct place_cluster *c, const struct place_request *r,
                 enum place_policy policy, const struct place_context *ctx,
                 struct place_decision *out, struct vg_err *err);

/* Charges / returns the decision's resources and updates the summaries. -EINVAL when the
 * decision does not fit the current state (allocate) or was not allocated (release). */
int place_allocate(struct place_cluster *c, const struct place_request *r,
                   const struct place_decision *d, struct vg_err *err);
int place_release(struct place_cluster *c, const struct place_request *r,
                  const struct place_decision *d, struct vg_err *err);

/* ---- Task-type mix and fragmentation (FGD, docs/openb.md) ----------------------------- */

struct place_mix_type {
    uint64_t cpu_milli;
    uint32_t gpu_count;
    uint32_t gpu_milli;  /* per GPU; 1000 for whole GPUs */
    uint64_t model_mask; /* allowed models; all ones = any */
    uint64_t weight;     /* popularity (a count); p_m = weight / total_weight */
};

/* Distinct request types a mix holds at most (FGD's index is quadratic in them). */
#define PLACE_MIX_TYPES_MAX 65536

struct place_mix {
    struct place_mix_type *types; /* owned */
    size_t count, cap;
    uint64_t total_weight;
};

void place_mix_init(struct place_mix *m);
void place_mix_clear(struct place_mix *m);
/* Adds weight to the type with these fields, creating it when new. -ENOMEM, or -E2BIG
 * for a type past PLACE_MIX_TYPES_MAX distinct ones. */
int place_mix_add(struct place_mix *m, const struct place_mix_type *t);
/* Adds one observation of a resolved request (a learned mix from pods seen so far). */
int place_mix_observe(struct place_mix *m, const struct place_request *r);
/* Keeps the most popular types covering at least pct % of the weight, ordered as FGD's
 * GetTypicalPods does (count desc, then cpu, gpu_milli, gpu_count desc). */
void place_mix_keep_typical(struct place_mix *m, unsigned pct);

/* F_n(M) of a node in a hypothetical state: cpu_free milli-cores and per-GPU free milli.
 * Result in weight·milli (divide by total_weight·1000 for GPUs). */
uint64_t place_frag_state(const struct place_mix *m, uint16_t model, uint64_t cpu_free,
                          const uint32_t *gpu_free, uint16_t gpu_count);
uint64_t place_frag_node(const struct place_mix *m, const struct place_node *n);

/* Weight of the mix's GPU types that could still use a card with card_free milli free on
 * a node in the given state (model, free CPU, every card's free share): the type fits on
 * the card, asks no more CPU than is free, allows the model, and for several GPUs the node
 * has that many cards with the share free. ix (may be NULL) speeds it up; same result. */
uint64_t place_fit_weight(const struct place_mix *m, struct place_fit_index *ix, uint16_t model,
                          uint64_t cpu_free, const uint32_t *gpu_free, uint16_t gpu_count,
                          uint32_t card_free);

/* The share of a node state that is expected to stay stranded (vgpu's default policy):
 * Σ over cards of free·(1 − q)^3, q = place_fit_weight / weight of the mix's GPU types,
 * i.e. the card's free share times the chance that none of the next three pods drawn
 * from the mix could use it. In milli-GPU; 0 for a mix without GPU types. */
double place_waste_state(const struct place_mix *m, struct place_fit_index *ix, uint16_t model,
                         uint64_t cpu_free, const uint32_t *gpu_free, uint16_t gpu_count);
/* How partly used cards are spread over free shares, for vgpu's default policy (the
 * Sum-of-Squares rule of online bin packing, weighted by how usable each share is):
 * count[g] is the number of healthy, shared cards in the cluster with g milli free
 * (0 < g < 1000); live[g] = min(1, q(g) / PLACE_GAP_LIVE_SHARE), where q(g) is the weight
 * of the mix's GPU types whose share is at most g over the weight of all its GPU types.
 * A share that almost no pod fits (live near 0) counts as closed, not as a gap to fill. */
#define PLACE_GAP_LIVE_SHARE 0.01

struct place_gaps {
    uint32_t count[PLACE_GPU_MILLI + 1];
    double live[PLACE_GPU_MILLI + 1];
};

void place_gaps_build(struct place_gaps *g, const struct place_cluster *c,
                      const struct place_mix *m);
/* Change of Σ_g live[g]·count[g]² when a pod of `share` milli goes to a card with
 * card_free milli free (1000 = an unused card): negative when it closes or fills a common
 * gap, positive when it adds to one. */
double place_gaps_delta(const struct place_gaps *g, uint32_t card_free, uint32_t share);

/* How hard the pods restricted to some models press on each model's cards: for every
 * type of the mix with a model list, its share of the mix's GPU demand over its models'
 * share of the cluster's healthy GPUs, summed into each of those models. A model's
 * pressure of 1 means the restricted pods alone would fill it at the mix's proportions;
 * with no model lists in the mix every pressure is 0. */
void place_model_pressure(const struct place_cluster *c, const struct place_mix *m,
                          double out[PLACE_MAX_MODELS]);

/* Which resource the mix runs out of first: the mix's CPU demand over the cluster's CPU,
 * divided by its GPU demand over the cluster's healthy GPUs. Above 1 the pods' CPU fills
 * the nodes before their GPU requests fill the cards; 0 when the mix asks for no GPU. */
double place_cpu_pressure(const struct place_cluster *c, const struct place_mix *m);

/* place_frag_node through the memo (entry `index`); fc may be NULL. */
uint64_t place_frag_cached(struct place_frag_cache *fc, size_t index, const struct place_mix *m,
                           const struct place_node *n);

#endif
