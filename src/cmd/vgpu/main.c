/* vgpu: see what vgpu did with a cluster's GPUs (docs/cli.md).
 *
 *   vgpu top | nodes | gpus | pods | explain POD | sim | resize POD   [flags]
 *
 * Installed as `kubectl-vgpu` (a link to this binary) it is the kubectl plugin
 * `kubectl vgpu`, and names itself so in its messages. kubectl's conventions: flags before
 * or after the verb, `-n`, `-A`, `-o wide|json`, `--kubeconfig`, `--context`, `--server`,
 * `--help` on every verb; exit 0 on success, 1 on any error (a message on stderr starting
 * with "error: "). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/auto.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/str.h"
#include "cli/api.h"
#include "cli/verbs.h"

/* The command line: kubectl's flags, the verb's, and what the verb is given. */
struct vgpu_cmd {
    const char *prog;    /* "vgpu", or "kubectl vgpu" when run as the plugin */
    const char *args[4]; /* positional arguments after the verb */
    size_t nargs;
    const char *kubeconfig, *context, *server;
    uint64_t request_timeout_s;
    struct cli_options o;
};

VG_DEFINE_AUTO(cli_api_freep, struct cli_api, cli_api_free)

/* "error: ..." on stderr; returns the exit status 1. */
static int fail(const char *msg)
{
    fprintf(stderr, "error: %s\n", msg);
    return 1;
}

enum {
    V_TOP = 1 << 0,
    V_NODES = 1 << 1,
    V_GPUS = 1 << 2,
    V_PODS = 1 << 3,
    V_EXPLAIN = 1 << 4,
    V_SIM = 1 << 5,
    V_RESIZE = 1 << 6,
    V_API = V_NODES | V_GPUS | V_PODS | V_EXPLAIN | V_SIM | V_RESIZE,
    V_ALL = V_API | V_TOP,
};

static const struct verb {
    const char *name;
    unsigned bit;
    size_t args; /* positional arguments it takes */
    const char *summary, *synopsis, *help;
} verbs[] = {
    {"top", V_TOP, 0, "this node's GPUs and the containers on them, live",
     "top [--once] [--interval SECONDS] [-o wide|json]",
     "Live per-GPU, per-container view of this node: each GPU's memory and utilization\n"
     "(NVML), and each vgpu container on it with its memory used against its limit and its\n"
     "compute share against what it achieves (the containers' regions and limits files).\n"
     "Keys: q quits. --once prints one snapshot and exits (for scripts)."},
    {"nodes", V_NODES, 0, "GPU allocation per node", "nodes [-o wide|json]",
     "GPU allocation per node, from the nodes' vgpu.io/gpus inventories and the bound\n"
     "pods' vgpu.io/decision annotations: GPUs, memory and compute allocated, free GPUs,\n"
     "and (wide) the memory and compute stranded on partly used GPUs."},
    {"gpus", V_GPUS, 0, "GPU allocation per GPU", "gpus [-o wide|json]",
     "GPU allocation per GPU of every node: memory, compute and tenants against capacity."},
    {"pods", V_PODS, 0, "pods with GPUs, and what vgpu gave them",
     "pods [-n NS | -A] [-o wide|json]",
     "Pods that ask for GPUs, with the node, GPUs, memory and compute vgpu gave them\n"
     "(their vgpu.io/decision), or <pending>."},
    {"explain", V_EXPLAIN, 1, "why a pod runs where it runs, or why it is pending",
     "explain POD [-n NS] [-o json]",
     "Why POD runs where it runs (its decision, in words), or why it is pending: each\n"
     "node's reason from vgpu-scheduler's filter, run on the cluster as the API shows it\n"
     "now, and kube-scheduler's last FailedScheduling event."},
    {"sim", V_SIM, 0, "this cluster under vgpu-sim's placement policies",
     "sim [--out DIR] [--policy LIST] [--seeds SPEC] [--report FILE.html] [--export-only]",
     "Capacity planning on this cluster: exports its GPU nodes and its pods into\n"
     "vgpu-sim's CSV files (DIR/nodes.csv, DIR/pods.csv; default DIR: vgpu-sim-export) and\n"
     "runs vgpu-sim's placement policies on them (docs/placement.md), with its HTML report\n"
     "when --report is given."},
    {"resize", V_RESIZE, 1, "change a running container's GPU memory or compute share",
     "resize POD [-n NS] [-c CONTAINER] [--gpumem QUANTITY] [--gpucores PERCENT]",
     "Changes the memory limit (per GPU) and compute share of a running container of POD\n"
     "without a restart: vgpu-scheduler checks the GPU has room and the namespace's quotas\n"
     "hold, records the new limits, and the node applies them in every process of the\n"
     "container. Exits 0 once they are recorded, 1 with the reason when refused (nothing\n"
     "changed). A lower memory limit frees nothing: new allocations are refused until the\n"
     "container uses less. QUANTITY as nvidia.com/gpumem takes it (8192, 8Gi)."},
};

/* The command being read: the flags' targets. */
static struct vgpu_cmd cmd = {.prog = "vgpu", .o.interval_ms = 1000, .request_timeout_s = 30};
static const char *interval_text; /* seconds with up to three decimals, read after parsing */
static bool help;

static int parse_output(const char *value, void *target, struct vg_err *err)
{
    enum cli_output output;
    if (cli_output_parse(value, &output, err) < 0)
        return err->code;
    *(enum cli_output *)target = output;
    return 0;
}

/* One entry per flag of flags[]: the verbs that take it. */
static const unsigned flag_verbs[] = {
    V_API,          V_API,
    V_API,          V_PODS | V_EXPLAIN | V_SIM | V_RESIZE,
    V_PODS | V_SIM, V_ALL & ~V_SIM & ~V_RESIZE,
    V_API,          V_TOP,
    V_TOP,          V_TOP,
    V_TOP,          V_TOP,
    V_TOP,          V_SIM,
    V_SIM,          V_SIM,
    V_SIM,          V_SIM,
    V_SIM,          V_ALL,
    V_RESIZE,       V_RESIZE,
    V_RESIZE,
};
static bool given[sizeof flag_verbs / sizeof flag_verbs[0]];

#define STR(n, s, v, field, k, d)                                                                  \
    {                                                                                              \
        .name = n, .short_name = s, .value = v, .type = VG_FLAG_STRING, .target = &cmd.field,      \
        .given = &given[k], .doc = d                                                               \
    }
#define BOOL(n, s, t, k, d)                                                                        \
    {                                                                                              \
        .name = n, .short_name = s, .type = VG_FLAG_BOOL, .target = t, .given = &given[k],         \
        .doc = d                                                                                   \
    }

static const struct vg_flag flags[] = {
    STR("kubeconfig", 0, "FILE", kubeconfig, 0,
        "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"),
    STR("context", 0, "NAME", context, 1, "the kubeconfig context to use"),
    STR("server", 's', "URL", server, 2, "the API server's URL, overriding the kubeconfig's"),
    STR("namespace", 'n', "NS", o.namespace, 3, "namespace (default: the context's, else default)"),
    BOOL("all-namespaces", 'A', &cmd.o.all_namespaces, 4, "every namespace"),
    {.name = "output",
     .short_name = 'o',
     .value = "wide|json",
     .type = VG_FLAG_FUNC,
     .target = &cmd.o.output,
     .fn = parse_output,
     .given = &given[5],
     .doc = "wide or json"},
    {.name = "request-timeout",
     .value = "SECONDS",
     .type = VG_FLAG_U64,
     .target = &cmd.request_timeout_s,
     .min = 1,
     .max = 3600,
     .given = &given[6],
     .doc = "seconds to wait for the API server (default 30)"},
    BOOL("once", 0, &cmd.o.once, 7, "print one snapshot and exit"),
    {.name = "interval",
     .value = "SECONDS",
     .type = VG_FLAG_STRING,
     .target = &interval_text,
     .given = &given[8],
     .doc = "seconds between refreshes (default 1; 0.1 .. 3600)"},
    {.name = "iterations",
     .value = "N",
     .type = VG_FLAG_U64,
     .target = &cmd.o.iterations,
     .min = 1,
     .max = UINT32_MAX,
     .given = &given[9],
     .doc = "stop after N refreshes"},
    STR("region-dir", 0, "DIR", o.region_dir, 10,
        "the device plugin's container directories, its vgpu.regionDir (default "
        "/usr/local/vgpu/containers)"),
    {.name = "containers-dir", .alias_of = "region-dir", .given = &given[11]},
    STR("nvml-library", 0, "PATH", o.nvml_library, 12, "NVML to load (default libnvidia-ml.so.1)"),
    STR("out", 0, "DIR", o.out_dir, 13, "where the CSV files go (default vgpu-sim-export)"),
    STR("policy", 0, "LIST", o.policy, 14,
        "vgpu-sim's --policy (default default,fgd,binpack,spread)"),
    STR("seeds", 0, "SPEC", o.seeds, 15, "vgpu-sim's --seeds (default 42-44)"),
    STR("jobs", 0, "N", o.jobs, 16, "vgpu-sim's --jobs"),
    STR("report", 0, "FILE", o.report, 17, "write vgpu-sim's HTML report here"),
    BOOL("export-only", 0, &cmd.o.export_only, 18, "write the CSV files and stop"),
    BOOL("help", 'h', &help, 19, "this help"),
    STR("container", 'c', "CONTAINER", o.container, 20,
        "the container to resize (default: the pod's one container with GPUs)"),
    STR("gpumem", 0, "QUANTITY", o.gpumem, 21,
        "new memory limit per GPU, as nvidia.com/gpumem takes it (8192 = 8192 MiB, 8Gi)"),
    STR("gpucores", 0, "PERCENT", o.gpucores, 22, "new compute share, percent of a GPU (1..100)"),
};
_Static_assert(sizeof flags / sizeof flags[0] == sizeof flag_verbs / sizeof flag_verbs[0],
               "one flag_verbs entry per flag");

static void usage(FILE *f, const char *prog, const struct verb *v)
{
    if (v == NULL) {
        fprintf(f,
                "%s: see what vgpu did with the cluster's GPUs (docs/cli.md).\n\n"
                "Usage:\n  %s VERB [flags]\n\nVerbs:\n",
                prog, prog);
        for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
            fprintf(f, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
        fprintf(f,
                "\nUse \"%s VERB --help\" for a verb's flags. Exit status: 0, or 1 on any "
                "error.\n",
                prog);
        return;
    }
    /* The verb's own flags, in the table's order. */
    struct vg_flag mine[sizeof flags / sizeof flags[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flag_verbs[i] & v->bit)
            mine[n++] = flags[i];
    char head[1024];
    (void)vg_snprintf(head, sizeof head, "%s\n\nUsage:\n  %s %s\n\nFlags:", v->help, prog,
                      v->synopsis);
    vg_flags_help(f, head, mine, n);
}

static int bad_usage(const char *prog, const char *verb, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_usage(const char *prog, const char *verb, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (verb != NULL)
        fprintf(stderr, "\nSee '%s %s --help' for usage.\n", prog, verb);
    else
        fprintf(stderr, "\nSee '%s --help' for usage.\n", prog);
    return 1;
}

/* --interval: seconds with up to three decimals, 0.1 to 3600. */
static int parse_interval(const char *value, uint64_t *ms, struct vg_err *err)
{
    char buf[32];
    const char *dot = strchr(value, '.');
    uint64_t whole = 0, frac = 0;
    size_t fl_len = dot ? strlen(dot + 1) : 0;
    if (strlen(value) >= sizeof buf || fl_len > 3 || (dot && fl_len == 0))
        return vg_err_set(err, -EINVAL, "--interval '%s': seconds, e.g. 1 or 0.5", value);
    memcpy(buf, value, strlen(value) + 1);
    if (dot)
        buf[dot - value] = '\0';
    if ((buf[0] && vg_parse_u64(buf, 0, 3600, &whole, err) < 0) ||
        (dot && vg_parse_u64(dot + 1, 0, 999, &frac, err) < 0) || (!buf[0] && !dot))
        return vg_err_set(err, -EINVAL, "--interval '%s': seconds, e.g. 1 or 0.5", value);
    for (size_t i = fl_len; i < 3; i++)
        frac *= 10;
    *ms = whole * 1000 + frac;
    if (*ms < 100 || *ms > 3600 * 1000)
        return vg_err_set(err, -ERANGE, "--interval '%s': 0.1 to 3600 seconds", value);
    return 0;
}

static const struct verb *find_verb(const char *name)
{
    for (size_t k = 0; k < sizeof verbs / sizeof verbs[0]; k++)
        if (strcmp(verbs[k].name, name) == 0)
            return &verbs[k];
    return NULL;
}

/* A verb of src/cli over the API server: its error on stderr, and the exit status. */
static int run_cluster_verb(const struct vgpu_cmd *c, unsigned verb)
{
    struct cli_api_options api_options = {.kubeconfig = c->kubeconfig,
                                          .context = c->context,
                                          .server = c->server,
                                          .request_timeout_s = c->request_timeout_s};
    struct vg_err err = {0};
    VG_AUTO(cli_api_freep) struct cli_api *api = NULL;
    if (cli_api_open(&api_options, &api, &err) < 0)
        return fail(err.msg);
    struct cli_source src = cli_api_source(api);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    struct cli_options o = c->o;
    o.pod = c->nargs > 0 ? c->args[0] : NULL;
    o.now_unix = (int64_t)time(NULL);
    o.now_mono_ms = (uint64_t)mono.tv_sec * 1000 + (uint64_t)mono.tv_nsec / 1000000;
    o.wait_ms = c->request_timeout_s * 1000;
    int rc;
    switch (verb) {
    case V_NODES:
        rc = cli_nodes(&src, &o, stdout, stderr, &err);
        break;
    case V_GPUS:
        rc = cli_gpus(&src, &o, stdout, stderr, &err);
        break;
    case V_PODS:
        rc = cli_pods(&src, &o, stdout, stderr, &err);
        break;
    case V_EXPLAIN:
        rc = cli_explain(&src, &o, stdout, stderr, &err);
        break;
    case V_RESIZE:
        rc = cli_resize(&src, &o, stdout, stderr, &err);
        break;
    default: {
        VG_AUTO(cli_sim_run_free) struct cli_sim_run run = {0};
        rc = cli_sim_export(&src, &o, stderr, &run, &err);
        cli_api_free(vg_steal_ptr(&api)); /* vgpu-sim takes this process over */
        if (rc == 0 && run.argc > 0)
            rc = cli_sim_exec(&run, &err); /* returns only when it cannot */
    }
    }
    return rc < 0 ? fail(err.msg) : 0;
}

/* The command line against the table, then against the verb: 0 with *verb set (NULL with
 * --help and no verb), or the exit status 1 with the message printed. */
static int read_command(int argc, char **argv, const struct verb **verb)
{
    const char *pos[2 + sizeof cmd.args / sizeof cmd.args[0]];
    size_t npos = 0;
    struct vg_err err = {0};
    int rc = vg_flags_parse_kubectl(flags, sizeof flags / sizeof flags[0], argc, argv, pos,
                                    sizeof pos / sizeof pos[0], &npos, &err);
    const struct verb *v = npos > 0 ? find_verb(pos[0]) : NULL;
    if (npos > 0 && v == NULL)
        return bad_usage(cmd.prog, NULL, "unknown command \"%s\"", pos[0]);
    if (rc < 0)
        return bad_usage(cmd.prog, v ? v->name : NULL, "%s", err.msg);
    *verb = v;
    if (help || v == NULL)
        return 0;
    if (npos - 1 > v->args)
        return bad_usage(cmd.prog, v->name, "unexpected argument \"%s\"", pos[v->args + 1]);
    for (size_t i = 1; i < npos; i++)
        cmd.args[cmd.nargs++] = pos[i];
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (given[i] && !(flag_verbs[i] & v->bit))
            return bad_usage(cmd.prog, v->name, "unknown flag: --%s", flags[i].name);
    if (interval_text != NULL && parse_interval(interval_text, &cmd.o.interval_ms, &err) < 0)
        return bad_usage(cmd.prog, v->name, "%s", err.msg);
    if (cmd.nargs < v->args)
        return bad_usage(cmd.prog, v->name, "%s", "missing the pod's name");
    return 0;
}

int main(int argc, char **argv)
{
    /* The libraries' log lines (a skipped inventory, a retried request) would garble the
     * output: what matters reaches the user as the verb's own words. */
    vg_log_max_level = getenv("VGPU_LOG_DEBUG") ? VG_LOG_DEBUG : -1;
    const char *base = strrchr(argv[0], '/');
    base = base != NULL ? base + 1 : argv[0];
    if (strcmp(base, "kubectl-vgpu") == 0)
        cmd.prog = "kubectl vgpu";
    const struct verb *v = NULL;
    if (read_command(argc, argv, &v) != 0)
        return 1;
    if (help) {
        usage(stdout, cmd.prog, v);
        return 0;
    }
    if (v == NULL) {
        usage(stderr, cmd.prog, NULL);
        return 1;
    }
    if (v->bit != V_TOP)
        return run_cluster_verb(&cmd, v->bit);
    struct vg_err err = {0};
    return cli_top(&cmd.o, &err) < 0 ? fail(err.msg) : 0;
}
