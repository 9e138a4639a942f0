/* vgpu: see what vgpu did with a cluster's GPUs (docs/cli.md).
 *
 *   vgpu top | nodes | gpus | pods | explain POD | sim   [flags]
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
#include "base/log.h"
#include "base/parse.h"
#include "base/str.h"
#include "cli/api.h"
#include "cli/verbs.h"
#include "cmd/vgpu/vgpu.h"

VG_DEFINE_AUTO(cli_api_freep, struct cli_api, cli_api_free)

int vgpu_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

enum {
    V_TOP = 1 << 0,
    V_NODES = 1 << 1,
    V_GPUS = 1 << 2,
    V_PODS = 1 << 3,
    V_EXPLAIN = 1 << 4,
    V_SIM = 1 << 5,
    V_API = V_NODES | V_GPUS | V_PODS | V_EXPLAIN | V_SIM,
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
};

static const struct flag {
    const char *name;
    char short_name;
    bool arg;
    unsigned verbs;
    const char *help;
} flags[] = {
    {"kubeconfig", 0, true, V_API,
     "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"},
    {"context", 0, true, V_API, "the kubeconfig context to use"},
    {"server", 's', true, V_API, "the API server's URL, overriding the kubeconfig's"},
    {"namespace", 'n', true, V_PODS | V_EXPLAIN | V_SIM,
     "namespace (default: the context's, else default)"},
    {"all-namespaces", 'A', false, V_PODS | V_SIM, "every namespace"},
    {"output", 'o', true, V_ALL & ~V_SIM, "wide or json"},
    {"request-timeout", 0, true, V_API, "seconds to wait for the API server (default 30)"},
    {"once", 0, false, V_TOP, "print one snapshot and exit"},
    {"interval", 0, true, V_TOP, "seconds between refreshes (default 1; 0.1 .. 3600)"},
    {"iterations", 0, true, V_TOP, "stop after N refreshes"},
    {"region-dir", 0, true, V_TOP,
     "the device plugin's container directories, its vgpu.regionDir (default "
     "/usr/local/vgpu/containers)"},
    {"containers-dir", 0, true, V_TOP, "alias of --region-dir"},
    {"nvml-library", 0, true, V_TOP, "NVML to load (default libnvidia-ml.so.1)"},
    {"out", 0, true, V_SIM, "where the CSV files go (default vgpu-sim-export)"},
    {"policy", 0, true, V_SIM, "vgpu-sim's --policy (default default,fgd,binpack,spread)"},
    {"seeds", 0, true, V_SIM, "vgpu-sim's --seeds (default 42-44)"},
    {"jobs", 0, true, V_SIM, "vgpu-sim's --jobs"},
    {"report", 0, true, V_SIM, "write vgpu-sim's HTML report here"},
    {"export-only", 0, false, V_SIM, "write the CSV files and stop"},
    {"help", 'h', false, V_ALL, "this help"},
};

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
    fprintf(f, "%s\n\nUsage:\n  %s %s\n\nFlags:\n", v->help, prog, v->synopsis);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
        const struct flag *fl = &flags[i];
        if (!(fl->verbs & v->bit))
            continue;
        char spec[64];
        if (fl->short_name)
            (void)vg_snprintf(spec, sizeof spec, "-%c, --%s%s", fl->short_name, fl->name,
                              fl->arg ? " X" : "");
        else
            (void)vg_snprintf(spec, sizeof spec, "    --%s%s", fl->name, fl->arg ? " X" : "");
        fprintf(f, "  %-24s %s\n", spec, fl->help);
    }
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

static int set_flag(struct vgpu_cmd *c, const struct flag *fl, const char *value,
                    struct vg_err *err)
{
    const char *n = fl->name;
    if (strcmp(n, "kubeconfig") == 0)
        c->kubeconfig = value;
    else if (strcmp(n, "context") == 0)
        c->context = value;
    else if (strcmp(n, "server") == 0)
        c->server = value;
    else if (strcmp(n, "namespace") == 0)
        c->namespace = value;
    else if (strcmp(n, "all-namespaces") == 0)
        c->all_namespaces = true;
    else if (strcmp(n, "output") == 0) {
        enum cli_output output;
        if (cli_output_parse(value, &output, err) < 0)
            return err->code;
        c->output = (enum vgpu_output)output;
    } else if (strcmp(n, "request-timeout") == 0) {
        if (vg_parse_u64(value, 1, 3600, &c->request_timeout_s, err) < 0)
            return vg_err_wrap(err, "--request-timeout");
    } else if (strcmp(n, "once") == 0)
        c->once = true;
    else if (strcmp(n, "interval") == 0) {
        /* seconds with up to three decimals */
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
        c->interval_ms = whole * 1000 + frac;
        if (c->interval_ms < 100 || c->interval_ms > 3600 * 1000)
            return vg_err_set(err, -ERANGE, "--interval '%s': 0.1 to 3600 seconds", value);
    } else if (strcmp(n, "iterations") == 0) {
        if (vg_parse_u64(value, 1, UINT32_MAX, &c->iterations, err) < 0)
            return vg_err_wrap(err, "--iterations");
    } else if (strcmp(n, "region-dir") == 0 || strcmp(n, "containers-dir") == 0)
        c->region_dir = value;
    else if (strcmp(n, "nvml-library") == 0)
        c->nvml_library = value;
    else if (strcmp(n, "out") == 0)
        c->out_dir = value;
    else if (strcmp(n, "policy") == 0)
        c->policy = value;
    else if (strcmp(n, "seeds") == 0)
        c->seeds = value;
    else if (strcmp(n, "jobs") == 0)
        c->jobs = value;
    else if (strcmp(n, "report") == 0)
        c->report = value;
    else if (strcmp(n, "export-only") == 0)
        c->export_only = true;
    return 0;
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
        return vgpu_fail("%s", err.msg);
    struct cli_source src = cli_api_source(api);
    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    struct cli_options o = {
        .output = (enum cli_output)c->output,
        .namespace = c->namespace,
        .all_namespaces = c->all_namespaces,
        .pod = c->nargs > 0 ? c->args[0] : NULL,
        .now_unix = (int64_t)time(NULL),
        .now_mono_ms = (uint64_t)mono.tv_sec * 1000 + (uint64_t)mono.tv_nsec / 1000000,
        .out_dir = c->out_dir,
        .policy = c->policy,
        .seeds = c->seeds,
        .report = c->report,
        .jobs = c->jobs,
        .export_only = c->export_only,
    };
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
    default: {
        VG_AUTO(cli_sim_run_free) struct cli_sim_run run = {0};
        rc = cli_sim_export(&src, &o, stderr, &run, &err);
        cli_api_free(vg_steal_ptr(&api)); /* vgpu-sim takes this process over */
        if (rc == 0 && run.argc > 0)
            rc = cli_sim_exec(&run, &err); /* returns only when it cannot */
    }
    }
    return rc < 0 ? vgpu_fail("%s", err.msg) : 0;
}

int main(int argc, char **argv)
{
    struct vgpu_cmd c = {.prog = "vgpu", .interval_ms = 1000, .request_timeout_s = 30};
    /* The libraries' log lines (a skipped inventory, a retried request) would garble the
     * output: what matters reaches the user as the verb's own words. */
    vg_log_max_level = getenv("VGPU_LOG_DEBUG") ? VG_LOG_DEBUG : -1;
    const char *base = strrchr(argv[0], '/');
    base = base != NULL ? base + 1 : argv[0];
    if (strcmp(base, "kubectl-vgpu") == 0)
        c.prog = "kubectl vgpu";

    /* First pass: the verb (the first word that is not a flag or a flag's value). */
    const struct flag *pending = NULL;
    const struct verb *v = NULL;
    bool help = false;
    struct {
        const struct flag *flag;
        const char *value;
    } seen[64];
    size_t nseen = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (pending != NULL) {
            seen[nseen - 1].value = a;
            pending = NULL;
            continue;
        }
        if (a[0] == '-' && a[1] != '\0') {
            const struct flag *fl = NULL;
            const char *value = NULL;
            if (a[1] == '-') {
                const char *eq = strchr(a + 2, '=');
                size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
                for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
                    if (strlen(flags[k].name) == len && strncmp(flags[k].name, a + 2, len) == 0)
                        fl = &flags[k];
                if (fl != NULL && eq != NULL) {
                    if (!fl->arg)
                        return bad_usage(c.prog, v ? v->name : NULL, "flag --%s takes no value",
                                         fl->name);
                    value = eq + 1;
                }
            } else if (a[2] == '\0' || a[1] == 'n' || a[1] == 'o' || a[1] == 's') {
                for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
                    if (flags[k].short_name == a[1])
                        fl = &flags[k];
                if (fl != NULL && a[2] != '\0')
                    value = a[2] == '=' ? a + 3 : a + 2;
            }
            if (fl == NULL)
                return bad_usage(c.prog, v ? v->name : NULL, "unknown flag: %s", a);
            if (nseen == sizeof seen / sizeof seen[0])
                return bad_usage(c.prog, NULL, "too many flags");
            seen[nseen].flag = fl;
            seen[nseen++].value = value;
            if (strcmp(fl->name, "help") == 0)
                help = true;
            else if (fl->arg && value == NULL)
                pending = fl;
            continue;
        }
        if (v == NULL) {
            for (size_t k = 0; k < sizeof verbs / sizeof verbs[0]; k++)
                if (strcmp(verbs[k].name, a) == 0)
                    v = &verbs[k];
            if (v == NULL)
                return bad_usage(c.prog, NULL, "unknown command \"%s\"", a);
            c.verb = v->name;
        } else if (c.nargs < v->args) {
            c.args[c.nargs++] = a;
        } else {
            return bad_usage(c.prog, v->name, "unexpected argument \"%s\"", a);
        }
    }
    if (help) {
        usage(stdout, c.prog, v);
        return 0;
    }
    if (pending != NULL)
        return bad_usage(c.prog, v ? v->name : NULL, "flag needs an argument: --%s", pending->name);
    if (v == NULL) {
        usage(stderr, c.prog, NULL);
        return 1;
    }
    for (size_t i = 0; i < nseen; i++) {
        const struct flag *fl = seen[i].flag;
        if (!(fl->verbs & v->bit))
            return bad_usage(c.prog, v->name, "unknown flag: --%s", fl->name);
        struct vg_err err = {0};
        if (set_flag(&c, fl, seen[i].value, &err) < 0)
            return bad_usage(c.prog, v->name, "%s", err.msg);
    }
    if (c.nargs < v->args)
        return bad_usage(c.prog, v->name, "%s", "missing the pod's name");
    return v->bit == V_TOP ? vgpu_top(&c) : run_cluster_verb(&c, v->bit);
}
