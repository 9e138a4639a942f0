/* vgpu-monitor's flags (monitor.h: mon_args_parse), read through the flag table of
 * src/base/flags.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/flags.h"
#include "base/log.h"
#include "monitor/http.h"
#include "monitor/monitor.h"

/* The most arguments vgpu-monitor takes: every flag twice, with its value. */
#define MON_ARGS_MAX 128

/* What the table fills: the arguments being parsed, and the values that need a check or a
 * conversion before they reach them. Parsing runs once, at start, on one thread. */
static struct mon_args parsed;
static uint64_t quarantine_after;

static int parse_policy(const char *value, void *target, struct vg_err *err)
{
    if (strcmp(value, "warn") == 0)
        *(enum mon_policy *)target = MON_POLICY_WARN;
    else if (strcmp(value, "kill") == 0)
        *(enum mon_policy *)target = MON_POLICY_KILL;
    else
        return vg_err_set(err, -EINVAL, "'%s': want warn or kill", value);
    return 0;
}

static int parse_on_off(const char *value, void *target, struct vg_err *err)
{
    if (strcmp(value, "on") != 0 && strcmp(value, "off") != 0)
        return vg_err_set(err, -EINVAL, "'%s': want on or off", value);
    *(bool *)target = strcmp(value, "on") == 0;
    return 0;
}

static int parse_level(const char *value, void *target, struct vg_err *err)
{
    int level = vg_log_level_from_name(value);
    if (level < 0)
        return vg_err_set(err, -EINVAL, "'%s': want error, warn, info or debug", value);
    *(int *)target = level;
    return 0;
}

static int parse_abs_path(const char *value, void *target, struct vg_err *err)
{
    if (value[0] != '/')
        return vg_err_set(err, -EINVAL, "'%s': want an absolute path", value);
    if (strlen(value) > 1024)
        return vg_err_set(err, -EINVAL, "path longer than 1024 bytes");
    *(const char **)target = value;
    return 0;
}

static int parse_listen(const char *value, void *target, struct vg_err *err)
{
    if (strcmp(value, "off") == 0)
        value = NULL;
    else if (mon_http_check_listen(value, err) < 0)
        return err->code;
    *(const char **)target = value;
    return 0;
}

#define FN(n, v, field, f, d, dflt)                                                                \
    {                                                                                              \
        .name = n, .value = v, .type = VG_FLAG_FUNC, .target = &parsed.field, .fn = f, .doc = d,   \
        .def = dflt                                                                                \
    }
#define U64(n, field, lo, hi, d, dflt)                                                             \
    {                                                                                              \
        .name = n, .value = "N", .type = VG_FLAG_U64, .target = &parsed.field, .min = lo,          \
        .max = hi, .doc = d, .def = dflt                                                           \
    }
#define STR(n, v, field, d, dflt)                                                                  \
    {                                                                                              \
        .name = n, .value = v, .type = VG_FLAG_STRING, .target = &parsed.field, .doc = d,          \
        .def = dflt                                                                                \
    }

static const struct vg_flag flags[] = {
    FN("policy", "warn|kill", policy, parse_policy,
       "what a violation gets: a container over its GPU memory limit, a process not "
       "registered with libvgpu",
       "kill"),
    FN("registration-check", "on|off", check_registration, parse_on_off,
       "every GPU process of a limited container must be registered with libvgpu", "on"),
    {.name = "quarantine-after",
     .value = "N",
     .type = VG_FLAG_U64,
     .target = &quarantine_after,
     .max = MON_QUARANTINE_MAX_K,
     .doc = "violations within the window that quarantine a container, 0 never",
     .def = "3"},
    U64("quarantine-window-s", quarantine_window_s, 1, 86400, "the window", "60"),
    U64("quarantine-s", quarantine_s, 1, 7 * 86400, "how long a quarantine lasts", "600"),
    FN("compute-check", "on|off", check_compute, parse_on_off,
       "a container's GPU utilization (NVML's, its processes summed) over the window may "
       "pass its compute share (burst mode: its burst limit) by at most the margin",
       "on"),
    U64("compute-window-s", compute_window_s, 1, 600, "the window of the compute check", "3"),
    U64("compute-margin", compute_margin, 1, 100,
        "points of the GPU a container may use over its share before it is a violation", "10"),
    U64("interval-ms", interval_ms, 10, 10000, "sampling interval, 10..10000", "100"),
    FN("region-dir", "DIR", region_dir, parse_abs_path,
       "the device plugin's container directories, its vgpu.regionDir",
       "/usr/local/vgpu/containers"),
    {.name = "containers-dir", .alias_of = "region-dir"},
    FN("proc-root", "DIR", proc_root, parse_abs_path, "where processes are read", "/proc"),
    FN("cgroup-root", "PATH", cgroup_root, parse_abs_path,
       "cgroup path kubelet's hierarchy lies under", "anywhere"),
    STR("node-name", "NAME", node_name, "this node; pods watched and Events sent", "$NODE_NAME"),
    STR("kubeconfig", "FILE", kubeconfig, "API credentials",
        "in-cluster when KUBERNETES_SERVICE_HOST is set, else no API"),
    STR("metrics-file", "FILE", metrics_file,
        "Prometheus text of the counters, rewritten each sample", NULL),
    FN("listen", "ADDR:PORT|off", listen, parse_listen,
       "serve GET /metrics and /healthz there (docs/monitor.md)", ":9394, every address"),
    STR("nvml-library", "PATH", nvml_library, "NVML to load", "libnvidia-ml.so.1"),
    U64("samples", samples, 1, UINT32_MAX, "stop after N samples", "run until a signal"),
    FN("log-level", "LEVEL", log_level, parse_level, "error, warn, info or debug", "info"),
    {.name = "help", .type = VG_FLAG_HELP, .target = &parsed.help, .doc = "print this text"},
};

void mon_args_usage(FILE *f)
{
    vg_flags_help(f, "usage: vgpu-monitor [flags]", flags, VG_FLAGS_COUNT(flags));
}

int mon_args_parse(int argc, char **argv, struct mon_args *a, struct vg_err *err)
{
    memset(&parsed, 0, sizeof parsed);
    parsed.policy = MON_POLICY_KILL;
    parsed.check_registration = true;
    parsed.check_compute = true;
    parsed.compute_window_s = 3;
    parsed.compute_margin = 10;
    quarantine_after = 3;
    parsed.quarantine_window_s = 60;
    parsed.quarantine_s = 600;
    parsed.interval_ms = 100;
    parsed.region_dir = "/usr/local/vgpu/containers";
    parsed.proc_root = "/proc";
    parsed.cgroup_root = "";
    parsed.node_name = getenv("NODE_NAME");
    parsed.log_level = VG_LOG_INFO;
    parsed.listen = ":9394";
    /* The flag parser reads argv[1..]: argv here starts at the first flag. */
    static char program[] = "vgpu-monitor";
    char *av[MON_ARGS_MAX + 1] = {program};
    if (argc < 0 || argc > MON_ARGS_MAX)
        return vg_err_set(err, -E2BIG, "more than %d arguments", MON_ARGS_MAX);
    for (int i = 0; i < argc; i++)
        av[i + 1] = argv[i];
    size_t npos;
    int rc = vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc + 1, av, NULL, 0, &npos, err);
    if (rc < 0)
        return rc;
    parsed.quarantine_after = (unsigned)quarantine_after;
    if (parsed.node_name && (!parsed.node_name[0] || strlen(parsed.node_name) >= MON_NAME_MAX ||
                             strpbrk(parsed.node_name, "/\n\r\t ")))
        return vg_err_set(err, -EINVAL, "--node-name '%s': not a node name", parsed.node_name);
    *a = parsed;
    return 0;
}
