/* vgpu-sim: replays a pod list on a cluster through the placement core (user
 * guide and JSON output in docs/placement.md). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "sim/sim.h"

#define MAX_SEEDS 1000

static void usage(FILE *f)
{
    fputs("usage: vgpu-sim --nodes NODES.csv --pods PODS.csv [options]\n"
          "  --policy LIST     random,dotprod,clustering,packing,bestfit,fgd,default,\n"
          "                    binpack,spread, or 'all' (the paper's six + default);\n"
          "                    dra-firstfit, dra-default: kube-scheduler's DRA\n"
          "                    allocator (first-fit cards) without / with vgpu's\n"
          "                    node choice; default: default\n"
          "  --seeds SPEC      N, A-B or A,B,C (default 42-51)\n"
          "  --jobs N          parallel runs (default: online CPUs)\n"
          "  --json            one JSON object per policy on stdout\n"
          "  --report FILE     write a self-contained HTML report\n"
          "  --fgd-mix M       oracle (paper, default) or learned\n"
          "  --default-mix M   learned (default) or oracle\n"
          "  --latency         also report each policy's p99 decision latency\n"
          "  --nodes-to-score PCT  dra-firstfit, dra-default: kube-scheduler's\n"
          "                    percentageOfNodesToScore, 1-100; 0 (default): adaptive\n"
          "  --data-dir DIR    look up relative --nodes/--pods here when not found\n"
          "                    (default: $VGPU_OPENB_DIR)\n",
          f);
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

static int parse_mix(const char *s, enum sim_mix_source *out, struct vg_err *err)
{
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"nodes", required_argument, NULL, 'n'},
                                         {"pods", required_argument, NULL, 'p'},
                                         {"policy", required_argument, NULL, 'P'},
                                         {"seeds", required_argument, NULL, 's'},
                                         {"jobs", required_argument, NULL, 'j'},
                                         {"json", no_argument, NULL, 'J'},
                                         {"report", required_argument, NULL, 'r'},
                                         {"fgd-mix", required_argument, NULL, 'F'},
                                         {"default-mix", required_argument, NULL, 'D'},
                                         {"latency", no_argument, NULL, 'L'},
                                         {"nodes-to-score", required_argument, NULL, 'N'},
                                         {"data-dir", required_argument, NULL, 'd'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *nodes = NULL, *pods = NULL, *report = NULL, *dir = getenv("VGPU_OPENB_DIR");
    const char *policy_spec = "default", *seed_spec = "42-51";
    bool json = false;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t jobs = cpus > 0 ? (uint64_t)cpus : 1;
    struct sim_options options = {.fgd_mix = SIM_MIX_ORACLE, .default_mix = SIM_MIX_LEARNED};
    struct vg_err err = {0};
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            nodes = optarg;
            break;
        case 'p':
            pods = optarg;
            break;
        case 'P':
            policy_spec = optarg;
            break;
        case 's':
            seed_spec = optarg;
            break;
        case 'j':
            if (vg_parse_u64(optarg, 1, 64, &jobs, &err) < 0) {
                fprintf(stderr, "vgpu-sim: --jobs: %s\n", err.msg);
                return 2;
            }
            break;
        case 'J':
            json = true;
            break;
        case 'r':
            report = optarg;
            break;
        case 'F':
        case 'D':
            if (parse_mix(optarg, c == 'F' ? &options.fgd_mix : &options.default_mix, &err) < 0) {
                fprintf(stderr, "vgpu-sim: %s\n", err.msg);
                return 2;
            }
            break;
        case 'L':
            options.time_decisions = true;
            break;
        case 'N': {
            uint64_t pct;
            if (vg_parse_u64(optarg, 0, 100, &pct, &err) < 0) {
                fprintf(stderr, "vgpu-sim: --nodes-to-score: %s\n", err.msg);
                return 2;
            }
            options.nodes_to_score_pct = (uint32_t)pct;
            break;
        }
        case 'd':
            dir = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc || nodes == NULL || pods == NULL) {
        fprintf(stderr, "vgpu-sim: %s\n",
                optind < argc ? "unexpected argument" : "--nodes and --pods are required");
        usage(stderr);
        return 2;
    }
    enum place_policy policies[PLACE_POLICY_COUNT];
    size_t policy_count = 0, seed_count = 0;
    static uint64_t seeds[MAX_SEEDS];
    if (parse_policies(policy_spec, policies, &policy_count, &err) < 0 ||
        parse_seeds(seed_spec, seeds, &seed_count, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        return 2;
    }
    char nodes_buf[4096], pods_buf[4096];
    nodes = resolve(nodes, dir, nodes_buf, sizeof nodes_buf);
    pods = resolve(pods, dir, pods_buf, sizeof pods_buf);
    struct sim_trace trace;
    if (sim_trace_load(&trace, nodes, pods, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        return 1;
    }
    struct sim_run_result *results = xcalloc(policy_count * seed_count, sizeof *results);
    double t0 = now_s();
    struct progress progress = {.start = t0};
    if (isatty(STDERR_FILENO)) {
        options.progress = on_progress;
        options.progress_arg = &progress;
    }
    int rc = sim_run_many(&trace, policies, policy_count, seeds, seed_count, (unsigned)jobs,
                          &options, results, &err);
    double elapsed = now_s() - t0;
    if (progress.shown)
        fputs("\r\033[K", stderr); /* the table takes its place */
    if (rc < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        free(results);
        sim_trace_free(&trace);
        return 1;
    }
    for (size_t p = 0; p < policy_count; p++) {
        const struct sim_run_result *runs = &results[p * seed_count];
        double busy = 0;
        for (size_t s = 0; s < seed_count; s++)
            busy += runs[s].seconds;
        if (json) {
            /* Each policy's share of the wall time, in proportion to its CPU time. */
            double total_busy = 0;
            for (size_t i = 0; i < policy_count * seed_count; i++)
                total_busy += results[i].seconds;
            sim_write_json(stdout, &trace, runs, seed_count,
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
        if (options.time_decisions) {
            uint64_t worst = 0;
            for (size_t s = 0; s < seed_count; s++)
                worst = runs[s].decision_ns_p99 > worst ? runs[s].decision_ns_p99 : worst;
            printf("  p99 decision %.3f ms", (double)worst / 1e6);
        }
        putchar('\n');
    }
    if (!json)
        printf("workload %s: %zu policies x %zu seeds in %.2f s on %llu threads\n", trace.workload,
               policy_count, seed_count, elapsed, (unsigned long long)jobs);
    if (report != NULL &&
        sim_write_html(report, &trace, results, policy_count, seed_count, &err) < 0) {
        fprintf(stderr, "vgpu-sim: %s\n", err.msg);
        rc = 1;
    }
    free(results);
    sim_trace_free(&trace);
    return rc < 0 ? 1 : rc;
}
