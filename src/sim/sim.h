/* vgpu-sim's engine: loading a cluster and a pod list (the openb CSV schema, see
 * docs/placement.md), replaying the FGD paper's fill-up procedure
 * (docs/openb.md) through the placement core, and writing the results.
 *
 * I/O and threads live here, never in src/placement. Each run owns a private copy of
 * the cluster, so runs for different seeds and policies execute in parallel and still
 * give byte-identical results for a given seed. */
#ifndef VGPU_SIM_SIM_H
#define VGPU_SIM_SIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"
#include "placement/mig.h"
#include "placement/placement.h"

#define SIM_LINE_MAX     4096                 /* longest accepted CSV line, bytes */
#define SIM_FILE_MAX     (256u * 1024 * 1024) /* largest accepted CSV file */
#define SIM_ARRIVALS_MAX ((size_t)1 << 26)    /* most pod arrivals one run replays */
#define SIM_CURVE_POINTS 131                  /* arrival 0..130 % */
#define SIM_TUNE_PCT     130                  /* fill-up target, % of GPU capacity */

struct sim_pod {
    char name[PLACE_NAME_MAX];
    uint64_t cpu_milli, mem_mib;
    uint32_t gpu_count, gpu_milli;
    uint64_t model_mask; /* resolved gpu_spec; all ones when empty */
    bool has_spec;
    uint8_t pod_class;
};

struct sim_trace {
    struct place_cluster *cluster; /* owned; nodes in name order */
    struct sim_pod *pods;          /* owned; sorted by name */
    size_t pod_count;
    struct place_mix typical; /* FGD's typical task set from the whole pod list (oracle) */
    char workload[PLACE_NAME_MAX];
};

/* Parsers over a buffer (the fuzz targets call these); filename is used in messages
 * ("file:line: ..."). Nodes are appended to c. */
int sim_parse_nodes(const char *text, size_t len, const char *filename, struct place_cluster *c,
                    struct vg_err *err);
int sim_parse_pods(const char *text, size_t len, const char *filename,
                   const struct place_cluster *c, struct sim_pod **pods, size_t *count,
                   struct vg_err *err);

/* Loads both files, sorts by name, and builds the typical mix. */
int sim_trace_load(struct sim_trace *t, const char *nodes_path, const char *pods_path,
                   struct vg_err *err);
void sim_trace_free(struct sim_trace *t);

/* Builds FGD's typical task set (types covering 95 % of pods, §3 step 2). */
int sim_build_typical(const struct sim_pod *pods, size_t count, struct place_mix *mix);

/* Which task-type mix the fragmentation-aware policies use. */
enum sim_mix_source {
    SIM_MIX_ORACLE = 0, /* the whole trace's typical set, known in advance (the paper's FGD) */
    SIM_MIX_LEARNED,    /* learned online from the pods that arrived so far */
};

/* Pod shapes of the rejected-pods breakdown. */
enum sim_shape {
    SIM_SHAPE_CPU = 0, /* no GPU */
    SIM_SHAPE_SHARE,   /* one GPU, fractional share */
    SIM_SHAPE_GPU1,    /* one whole GPU */
    SIM_SHAPE_GPU2,    /* 2 whole GPUs */
    SIM_SHAPE_GPU4,    /* 3-4 whole GPUs */
    SIM_SHAPE_GPU8,    /* 5 or more GPUs */
    SIM_SHAPE_COUNT,
};
const char *sim_shape_name(enum sim_shape s);
enum sim_shape sim_pod_shape(const struct sim_pod *p);

struct sim_run_result {
    enum place_policy policy;
    uint64_t seed;
    double alloc_pct[SIM_CURVE_POINTS];     /* allocated GPU share vs arrival */
    double frag_pct[SIM_CURVE_POINTS];      /* F(M) as % of cluster GPUs */
    double frag_rate_pct[SIM_CURVE_POINTS]; /* F(M) / unallocated */
    double unallocated_pct_100;
    double alloc_pct_130;
    uint64_t pods, failed_pods;
    /* Pods rejected up to 100 % arrival (x <= 100), by shape: count and GPU request in
     * milli-GPU. Their request is what "unallocated at 100 %" is made of. */
    uint64_t failed_100[SIM_SHAPE_COUNT];
    uint64_t failed_100_milli[SIM_SHAPE_COUNT];
    double seconds; /* wall time of this run (filled by the runner, not part of identity) */
    uint64_t decision_ns_p99;
    /* With sim_options.high_pct: sharing pods drawn high-priority, and how many of those
     * placed had to share a GPU with another high-priority pod (no GPU could take them
     * otherwise; docs/scheduler.md, "Priority"). */
    uint64_t high_pods, high_shared;
};

struct sim_options {
    enum sim_mix_source fgd_mix;     /* for fgd (paper: oracle) */
    enum sim_mix_source default_mix; /* for default (production-fair: learned) */
    bool time_decisions;             /* measure each decision's latency */
    /* dra-firstfit and dra-default: kube-scheduler's percentageOfNodesToScore (0, the
     * default: its adaptive value; 100: every node is scored). */
    uint32_t nodes_to_score_pct;
    /* Task priority: this percentage of the sharing pods (a fraction of one GPU) is
     * high-priority and placed as vgpu-scheduler places it: first on GPUs holding no other
     * high-priority pod, else anywhere (0: no priorities, the runs as before). */
    uint32_t high_pct;
    /* Called after each run sim_run_many completes (done of total), from the worker that
     * ran it, one call at a time (under the pool's lock); NULL: none. */
    void (*progress)(void *arg, size_t done, size_t total, const struct sim_run_result *run);
    void *progress_arg;
};

/* A run's arrivals (indices into t->pods, *len of them, malloc'ed): the name-sorted pods
 * shuffled with rng, then pods cloned or dropped at random until their GPU request is
 * SIM_TUNE_PCT % of the cluster's GPUs (docs/openb.md). rng goes on from there. */
int sim_arrival_order(const struct sim_trace *t, struct vg_prng *rng, size_t **order, size_t *len,
                      struct vg_err *err);

/* One run: shuffle, tune to 130 %, rank nodes, place every pod in order. */
int sim_run(const struct sim_trace *t, enum place_policy policy, uint64_t seed,
            const struct sim_options *opt, struct sim_run_result *out, struct vg_err *err);

/* Runs every (policy, seed) pair on `jobs` threads; results[p * seed_count + s]. */
int sim_run_many(const struct sim_trace *t, const enum place_policy *policies, size_t policy_count,
                 const uint64_t *seeds, size_t seed_count, unsigned jobs,
                 const struct sim_options *opt, struct sim_run_result *results, struct vg_err *err);

struct sim_stats {
    double mean, sd, min, max;
};
void sim_stats(const double *values, size_t n, struct sim_stats *out);

/* Writes one JSON object (one line) for one policy's runs. seconds < 0 omits it. */
int sim_write_json(FILE *f, const struct sim_trace *t, const struct sim_run_result *runs,
                   size_t run_count, double seconds);
/* Self-contained HTML page with SVG curves and the table at 100 % arrival. */
int sim_write_html(const char *path, const struct sim_trace *t,
                   const struct sim_run_result *results, size_t policy_count, size_t seed_count,
                   struct vg_err *err);

/* ---- MIG on demand (mig.c; docs/placement.md, "MIG placement") ----
 *
 * Every GPU of the cluster a MIG-capable card of one model, in dynamic MIG mode; each GPU
 * pod of the trace asks for instances: a share of d milli-GPU asks d/1000 of the model's
 * nominal memory on one GPU, a whole-GPU pod its nominal memory on each of its GPUs (all on
 * one node). CPU and host memory are not modelled. Pods arrive as in sim_run (same seed,
 * same order); each is placed by one rule or left pending. */
struct sim_mig_model {
    const char *name;     /* "h100-80gb" */
    uint64_t nominal_mib; /* what a whole-GPU request asks (80 GB: 80,000 MiB) */
    struct place_mig_gpu gpu;
};

/* The model named name (h100-80gb, a100-40gb), NULL when unknown. */
const struct sim_mig_model *sim_mig_model_find(const char *name);

/* The rules compared: HAMi v2.10's selectMigCandidate on each GPU, with its chart's default
 * policies (nodes binpack, GPUs spread) or with GPUs binpack; and vgpu's. */
enum sim_mig_rule { SIM_MIG_HAMI_SPREAD = 0, SIM_MIG_HAMI_BINPACK, SIM_MIG_VGPU, SIM_MIG_RULES };
const char *sim_mig_rule_name(enum sim_mig_rule r);

struct sim_mig_result {
    enum sim_mig_rule rule;
    uint64_t seed;
    uint64_t gpu_pods, unplaced;        /* GPU pods arrived (to 130 %), and left pending */
    uint64_t unplaced_100;              /* pods left pending up to 100 % arrival */
    double unusable_slices_100;         /* at 100 %: Σ over GPUs of place_mig_frag under the
                                           trace's request mix */
    double unusable_pct_100;            /* the same, % of all slices */
    double free_pct_100, alloc_pct_100; /* free slices, slices in instances, % */
    /* Churn at full load: after 100 % arrival each arrival follows one departure of a
     * running pod drawn at random. The pods arrived then, those left pending, and the
     * unusable slices (as above, % of all) averaged over those arrivals. */
    uint64_t churn_pods, churn_unplaced;
    double churn_unusable_pct;
    double seconds;
};

int sim_mig_run(const struct sim_trace *t, const struct sim_mig_model *m, enum sim_mig_rule rule,
                uint64_t seed, struct sim_mig_result *out, struct vg_err *err);

#endif
