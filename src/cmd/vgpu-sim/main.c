/* vgpu-sim: replays a pod list on a cluster through the placement core (user
 * guide and JSON output in docs/placement.md). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/flags.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "sim/sim.h"

#define MAX_SEEDS 1000

/* The command line: flags, and what they fill. */
static struct cli {
    const char *nodes, *pods, *report, *dir, *policy, *seeds, *mig;
    bool json, help;
    uint64_t jobs, nodes_to_score, high_pct;
    struct sim_options options;
} cli = {.policy = "default",
         .seeds = "42-51",
         .options = {.fgd_mix = SIM_MIX_ORACLE, .default_mix = SIM_MIX_LEARNED}};

static int parse_mix(const char *s, void *target, struct vg_err *err);

static const struct vg_flag flags[] = {
    {.name = "nodes",
     .value = "NODES.csv",
     .type = VG_FLAG_STRING,
     .target = &cli.nodes,
     .doc = "the cluster's nodes (required)"},
    {.name = "pods",
     .value = "PODS.csv",
     .type = VG_FLAG_STRING,
     .target = &cli.pods,
     .doc = "the pods, in arrival order (required)"},
    {.name = "policy",
     .value = "LIST",
     .type = VG_FLAG_STRING,
     .target = &cli.policy,
     .doc = "random,dotprod,clustering,packing,bestfit,fgd,default,binpack,spread, or 'all' "
            "(the paper's six + default); dra-firstfit, dra-default: kube-scheduler's DRA "
            "allocator (first-fit cards) without / with vgpu's node choice",
     .def = "default"},
    {.name = "seeds",
     .value = "SPEC",
     .type = VG_FLAG_STRING,
     .target = &cli.seeds,
     .doc = "N, A-B or A,B,C",
     .def = "42-51"},
    {.name = "jobs",
     .value = "N",
     .type = VG_FLAG_U64,
     .target = &cli.jobs,
     .min = 1,
     .max = 64,
     .doc = "parallel runs",
     .def = "online CPUs"},
    {.name = "json",
     .type = VG_FLAG_BOOL,
     .target = &cli.json,
     .doc = "one JSON object per policy on stdout"},
    {.name = "report",
     .value = "FILE",
     .type = VG_FLAG_STRING,
     .target = &cli.report,
     .doc = "write a self-contained HTML report"},
    {.name = "fgd-mix",
     .value = "M",
     .type = VG_FLAG_FUNC,
     .target = &cli.options.fgd_mix,
     .fn = parse_mix,
     .doc = "oracle (the paper's) or learned",
     .def = "oracle"},
    {.name = "default-mix",
     .value = "M",
     .type = VG_FLAG_FUNC,
     .target = &cli.options.default_mix,
     .fn = parse_mix,
     .doc = "learned or oracle",
     .def = "learned"},
    {.name = "latency",
     .type = VG_FLAG_BOOL,
     .target = &cli.options.time_decisions,
     .doc = "also report each policy's p99 decision latency"},
    {.name = "nodes-to-score",
     .value = "PCT",
     .type = VG_FLAG_U64,
     .target = &cli.nodes_to_score,
     .max = 100,
     .doc = "dra-firstfit, dra-default: kube-scheduler's percentageOfNodesToScore, 1-100; 0: "
            "adaptive",
     .def = "0"},
    {.name = "priority-high",
     .value = "PCT",
     .type = VG_FLAG_U64,
     .target = &cli.high_pct,
     .max = 100,
     .doc = "this percentage of the sharing pods is high-priority (nvidia.com/priority 0), "
            "placed apart from each other when a GPU can take them; 0: no priorities",
     .def = "0"},
    {.name = "data-dir",
     .value = "DIR",
     .type = VG_FLAG_STRING,
     .target = &cli.dir,
     .doc = "look up relative --nodes/--pods here when not found",
     .def = "$VGPU_OPENB_DIR"},
    {.name = "mig",
     .value = "MODEL",
     .type = VG_FLAG_STRING,
     .target = &cli.mig,
     .doc = "every GPU a MIG-capable MODEL (h100-80gb, a100-40gb) in dynamic MIG mode: the "
            "pods as GPU instances, placed by HAMi v2.10's rule and by vgpu's in the same "
            "arrival order (--policy is not used)"},
    {.name = "help", .type = VG_FLAG_HELP, .target = &cli.help, .doc = "print this text"},
};

static void usage(FILE *f)
{
    vg_flags_help(f, "usage: vgpu-sim --nodes NODES.csv --pods PODS.csv [options]", flags,
                  VG_FLAGS_COUNT(flags));
}

static int parse_seeds(const char *spec, uint64_t *seeds, size_t *count, struct vg_err *err)
{
    char buf[1024];
    if (vg_strlcpy(buf, spec, sizeof buf) < 0)
        return vg_err_set(err, -E2BIG, "--seeds too long");
    *count = 0;
    for (char *p = buf; p != NULL;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        char *dash = strchr(p, '-');
        uint64_t a, b;
        if (dash != NULL)
            *dash = '\0';
        if (vg_parse_u64(p, 0, UINT64_MAX, &a, err) < 0)
            return vg_err_wrap(err, "--seeds");
        b = a;
        if (dash != NULL && vg_parse_u64(dash + 1, 0, UINT64_MAX, &b, err) < 0)
            return vg_err_wrap(err, "--seeds");
        if (b < a || b - a >= MAX_SEEDS)
            return vg_err_set(err, -EINVAL, "--seeds: bad range %llu-%llu", (unsigned long long)a,
                              (unsigned long long)b);
        for (uint64_t s = a;; s++) {
            if (*count == MAX_SEEDS)
                return vg_err_set(err, -E2BIG, "--seeds: more than %d seeds", MAX_SEEDS);
            seeds[(*count)++] = s;
            if (s == b)
                break;
        }
        p = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

static int parse_policies(const char *spec, enum place_policy *out, size_t *count,
                          struct vg_err *err)
{
    *count = 0;
    if (strcmp(spec, "all") == 0) {
        static const enum place_policy all[] = {PLACE_POLICY_RANDOM,     PLACE_POLICY_DOTPROD,
                                                PLACE_POLICY_CLUSTERING, PLACE_POLICY_PACKING,
                                                PLACE_POLICY_BESTFIT,    PLACE_POLICY_FGD,
                                                PLACE_POLICY_DEFAULT};
        memcpy(out, all, sizeof all);
        *count = sizeof all / sizeof all[0];
        return 0;
    }
    char buf[256];
    if (vg_strlcpy(buf, spec, sizeof buf) < 0)
        return vg_err_set(err, -E2BIG, "--policy too long");
    for (char *p = buf; p != NULL;) {
        char *comma = strchr(p, ',');
        if (comma != NULL)
            *comma = '\0';
        int id = place_sim_policy_from_name(p);
        if (id < 0)
            return vg_err_set(err, -EINVAL, "unknown policy '%s' (see --help)", p);
        if (*count == PLACE_POLICY_COUNT)
            return vg_err_set(err, -E2BIG, "--policy: too many policies");
        out[(*count)++] = (enum place_policy)id;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

static int parse_mix(const char *s, void *target, struct vg_err *err)
{
    enum sim_mix_source *out = target;
    if (strcmp(s, "oracle") == 0)
        *out = SIM_MIX_ORACLE;
    else if (strcmp(s, "learned") == 0)
        *out = SIM_MIX_LEARNED;
    else
        return vg_err_set(err, -EINVAL, "mix '%s': expected oracle or learned", s);
    return 0;
}

/* A path as given, or under the data directory when it does not exist as given. */
static const char *resolve(const char *path, const char *dir, char *buf, size_t size)
{
    if (dir == NULL || path[0] == '/' || access(path, F_OK) == 0)
        return path;
    if (vg_snprintf(buf, size, "%s/%s", dir, path) < 0)
        return path;
    return access(buf, F_OK) == 0 ? buf : path;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Progress on a terminal (stderr, only when it is one): runs done, the last one, the time
 * so far and an estimate of what is left; at most ten lines a second, each over the last. */
struct progress {
    double start, last;
    bool shown;
};

static void on_progress(void *arg, size_t done, size_t total, const struct sim_run_result *run)
{
    struct progress *p = arg;
    double now = now_s();
    if (done < total && now - p->last < 0.1)
        return;
    p->last = now;
    p->shown = true;
    double elapsed = now - p->start;
    double left = done ? elapsed * (double)(total - done) / (double)done : 0;
    fprintf(stderr,
            "\r\033[Kvgpu-sim: %zu/%zu runs (%3.0f %%), last %s seed %llu, %.1f s, ~%.0f s left",
            done, total, 100.0 * (double)done / (double)total, place_policy_name(run->policy),
            (unsigned long long)run->seed, elapsed, left);
    fflush(stderr);
}

/* The flags: 0, 1 when --help was printed, or the exit status 2 with the message printed. */
static int parse_flags(int argc, char **argv)
{
    struct vg_err err = {0};
    size_t npos;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    cli.jobs = cpus > 0 ? (uint64_t)cpus : 1;
    cli.dir = getenv("VGPU_OPENB_DIR");
    int rc = vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc, argv, NULL, 0, &npos, &err);
    if (rc == 1) {
        usage(stdout);
        return 1;
    }
    if (rc < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        return 2;
    }
    if (cli.nodes == NULL || cli.pods == NULL) {
        fprintf(stderr, "vgpu-sim: --nodes and --pods are required\n");
        usage(stderr);
        return 2;
    }
    cli.options.nodes_to_score_pct = (uint32_t)cli.nodes_to_score;
    cli.options.high_pct = (uint32_t)cli.high_pct;
    return 0;
}

/* One line per policy (or one JSON object): the seeds' statistics. */
static void print_results(const struct sim_trace *trace, const struct sim_run_result *results,
                          const enum place_policy *policies, size_t policy_count, size_t seed_count,
                          double elapsed)
{
    for (size_t p = 0; p < policy_count; p++) {
        const struct sim_run_result *runs = &results[p * seed_count];
        double busy = 0;
        for (size_t s = 0; s < seed_count; s++)
            busy += runs[s].seconds;
        if (cli.json) {
            /* Each policy's share of the wall time, in proportion to its CPU time. */
            double total_busy = 0;
            for (size_t i = 0; i < policy_count * seed_count; i++)
                total_busy += results[i].seconds;
            sim_write_json(stdout, trace, runs, seed_count,
                           total_busy > 0 ? elapsed * busy / total_busy : elapsed);
            continue;
        }
        double v[MAX_SEEDS];
        struct sim_stats u, a;
        for (size_t s = 0; s < seed_count; s++)
            v[s] = runs[s].unallocated_pct_100;
        sim_stats(v, seed_count, &u);
        for (size_t s = 0; s < seed_count; s++)
            v[s] = runs[s].alloc_pct_130;
        sim_stats(v, seed_count, &a);
        printf("%-10s unallocated@100%% %6.2f %% (sd %.2f, %.2f-%.2f)  alloc@130%% %6.2f %%  "
               "run %.2f s",
               place_policy_name(policies[p]), u.mean, u.sd, u.min, u.max, a.mean,
               busy / (double)seed_count);
        if (cli.options.time_decisions) {
            uint64_t worst = 0;
            for (size_t s = 0; s < seed_count; s++)
                worst = runs[s].decision_ns_p99 > worst ? runs[s].decision_ns_p99 : worst;
            printf("  p99 decision %.3f ms", (double)worst / 1e6);
        }
        putchar('\n');
    }
    if (!cli.json)
        printf("workload %s: %zu policies x %zu seeds in %.2f s on %llu threads\n", trace->workload,
               policy_count, seed_count, elapsed, (unsigned long long)cli.jobs);
}

/* --mig: both rules on every seed; one line (or JSON object) per rule. */
static int run_mig(const struct sim_trace *trace, const struct sim_mig_model *m,
                   const uint64_t *seeds, size_t seed_count)
{
    static struct sim_mig_result r[SIM_MIG_RULES][MAX_SEEDS];
    for (int k = 0; k < SIM_MIG_RULES; k++)
        for (size_t s = 0; s < seed_count; s++) {
            struct vg_err err = {0};
            if (sim_mig_run(trace, m, (enum sim_mig_rule)k, seeds[s], &r[k][s], &err) < 0) {
                fprintf(stderr, "vgpu-sim: %s\n", err.msg);
                return 1;
            }
        }
    for (int k = 0; k < SIM_MIG_RULES; k++) {
        const char *name = sim_mig_rule_name((enum sim_mig_rule)k);
        double v[MAX_SEEDS], secs = 0;
        struct sim_stats unusable, unplaced, unplaced_all, alloc, churn_unplaced, churn_unusable;
        for (size_t s = 0; s < seed_count; s++)
            v[s] = (double)r[k][s].churn_unplaced;
        sim_stats(v, seed_count, &churn_unplaced);
        for (size_t s = 0; s < seed_count; s++)
            v[s] = r[k][s].churn_unusable_pct;
        sim_stats(v, seed_count, &churn_unusable);
        for (size_t s = 0; s < seed_count; s++)
            v[s] = r[k][s].unusable_pct_100;
        sim_stats(v, seed_count, &unusable);
        for (size_t s = 0; s < seed_count; s++)
            v[s] = (double)r[k][s].unplaced_100;
        sim_stats(v, seed_count, &unplaced);
        for (size_t s = 0; s < seed_count; s++)
            v[s] = (double)r[k][s].unplaced;
        sim_stats(v, seed_count, &unplaced_all);
        for (size_t s = 0; s < seed_count; s++) {
            v[s] = r[k][s].alloc_pct_100;
            secs += r[k][s].seconds;
        }
        sim_stats(v, seed_count, &alloc);
        if (cli.json)
            printf("{\"mig\":\"%s\",\"rule\":\"%s\",\"workload\":\"%s\",\"seeds\":%zu,"
                   "\"unusable_slice_pct_at_arrival_100\":{\"mean\":%.4f,\"sd\":%.4f,"
                   "\"min\":%.4f,\"max\":%.4f},\"unplaced_pods_at_arrival_100\":{\"mean\":%.2f,"
                   "\"sd\":%.2f,\"min\":%.0f,\"max\":%.0f},\"unplaced_pods_at_arrival_130\":{"
                   "\"mean\":%.2f},\"allocated_slice_pct_at_arrival_100\":{\"mean\":%.4f},"
                   "\"churn_unplaced_pods\":{\"mean\":%.2f,\"sd\":%.2f},"
                   "\"churn_unusable_slice_pct\":{\"mean\":%.4f,\"sd\":%.4f},\"churn_pods\":%llu,"
                   "\"gpu_pods\":%llu,\"seconds\":%.3f}\n",
                   m->name, name, trace->workload, seed_count, unusable.mean, unusable.sd,
                   unusable.min, unusable.max, unplaced.mean, unplaced.sd, unplaced.min,
                   unplaced.max, unplaced_all.mean, alloc.mean, churn_unplaced.mean,
                   churn_unplaced.sd, churn_unusable.mean, churn_unusable.sd,
                   (unsigned long long)r[k][0].churn_pods, (unsigned long long)r[k][0].gpu_pods,
                   secs);
        else
            printf("%-12s %s fill-up@100%%: unusable slices %6.3f %%, unplaced %6.1f; churn: "
                   "unusable slices %6.3f %% (sd %.3f), unplaced %7.1f (sd %.1f) of %llu; "
                   "run %.2f s\n",
                   name, m->name, unusable.mean, unplaced.mean, churn_unusable.mean,
                   churn_unusable.sd, churn_unplaced.mean, churn_unplaced.sd,
                   (unsigned long long)r[k][0].churn_pods, secs / (double)seed_count);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = parse_flags(argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : rc;
    struct vg_err err = {0};
    enum place_policy policies[PLACE_POLICY_COUNT];
    size_t policy_count = 0, seed_count = 0;
    static uint64_t seeds[MAX_SEEDS];
    if (parse_policies(cli.policy, policies, &policy_count, &err) < 0 ||
        parse_seeds(cli.seeds, seeds, &seed_count, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        return 2;
    }
    char nodes_buf[4096], pods_buf[4096];
    const char *nodes = resolve(cli.nodes, cli.dir, nodes_buf, sizeof nodes_buf);
    const char *pods = resolve(cli.pods, cli.dir, pods_buf, sizeof pods_buf);
    struct sim_trace trace;
    if (sim_trace_load(&trace, nodes, pods, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        return 1;
    }
    if (cli.mig != NULL) {
        const struct sim_mig_model *m = sim_mig_model_find(cli.mig);
        if (m == NULL) {
            fprintf(stderr, "vgpu-sim: --mig: unknown model '%s' (h100-80gb, a100-40gb)\n",
                    cli.mig);
            sim_trace_free(&trace);
            return 2;
        }
        rc = run_mig(&trace, m, seeds, seed_count);
        sim_trace_free(&trace);
        return rc;
    }
    struct sim_run_result *results = xcalloc(policy_count * seed_count, sizeof *results);
    double t0 = now_s();
    struct progress progress = {.start = t0};
    if (isatty(STDERR_FILENO)) {
        cli.options.progress = on_progress;
        cli.options.progress_arg = &progress;
    }
    rc = sim_run_many(&trace, policies, policy_count, seeds, seed_count, (unsigned)cli.jobs,
                      &cli.options, results, &err);
    double elapsed = now_s() - t0;
    if (progress.shown)
        fputs("\r\033[K", stderr); /* the table takes its place */
    if (rc < 0)
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
    else
        print_results(&trace, results, policies, policy_count, seed_count, elapsed);
    if (rc == 0 && cli.report != NULL &&
        sim_write_html(cli.report, &trace, results, policy_count, seed_count, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        rc = -1;
    }
    free(results);
    sim_trace_free(&trace);
    return rc < 0 ? 1 : rc;
}
