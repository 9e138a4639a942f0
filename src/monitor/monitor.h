/* vgpu-monitor: the node-side watchdog (docs/monitor.md).
 *
 * Every sample it reads NVML's per-process GPU memory for every GPU of the node, maps
 * each process to its pod and container through its cgroup (/proc/<pid>/cgroup, which
 * the tenant cannot change), compares each container's use of each GPU with the limits
 * the device plugin wrote (the read-only limits file in the containers directory) and
 * acts by policy: warn (log line, Kubernetes Event, counter) or kill (SIGKILL the
 * container's newest process on that GPU until it is back under its limit plus slack).
 * Nothing it judges by can be written by a tenant: not the region, not the environment.
 * It also serves the node's metrics (metrics.h, scan.h, http.h), where the regions are
 * shown as read (region_read.h), bounded and never trusted.
 *
 * Layers, each testable alone:
 *  - cgroup paths (mon_cgroup_parse*): pure, fuzzed;
 *  - limits (mon_limits_*): the device plugin's limits files through libvgpu's parser;
 *  - the judge (struct mon_monitor): one sample in, verdicts and kills out; processes
 *    come from a sampler callback (NVML in the daemon, fixed lists in unit tests);
 *  - the daemon (monitor/daemon.c): NVML, the libevent loop, the pod watch, Events.
 *
 * Errors: 0 or a negative errno with a message in struct vg_err. Not thread-safe. */
#ifndef VGPU_MONITOR_MONITOR_H
#define VGPU_MONITOR_MONITOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "base/err.h"
#include "libvgpu/config.h"

#define MON_UID_MAX          37   /* a pod UID, 36 characters with the NUL */
#define MON_CID_MAX          65   /* a container ID, 64 hex digits with the NUL */
#define MON_NAME_MAX         254  /* a container, pod or namespace name, with the NUL */
#define MON_MAX_GPUS         64   /* GPUs on a node */
#define MON_MAX_PROCS        4096 /* GPU processes on a node in one sample */
#define MON_PATH_MAX         4096 /* a cgroup path */
#define MON_CGROUP_MAX       65536
#define MON_MAPS_BUF         (64 << 10) /* /proc/<pid>/maps is read this much at a time */
#define MON_QUARANTINE_MAX_K 64         /* quarantine_after at most */

/* ---- cgroups --------------------------------------------------------------------- */

/* Who a process belongs to: its pod UID (dashed form) and container ID ("" for a process
 * of the pod's own cgroup, outside every container). */
struct mon_cgroup_id {
    char pod_uid[MON_UID_MAX];
    char container_id[MON_CID_MAX];
};

/* One cgroup path as /proc/<pid>/cgroup shows it. root: "" or "/" to find kubelet's
 * hierarchy anywhere in the path (components before it, `..` of a cgroup namespace
 * included, are skipped), or a path prefix it must start right under. 0 and *out filled;
 * -ENOENT when the path is not inside a pod (no kubepods hierarchy, or a QoS level);
 * -EINVAL naming what is wrong when it is inside one but malformed. docs/monitor.md
 * lists the layouts (cgroup v1 and v2; systemd and cgroupfs drivers; containerd, CRI-O
 * and Docker scopes). Components below the container are ignored: a tenant that nests
 * cgroups inside its own container stays that container. err may be NULL (no message
 * is formatted: the hot path). */
int mon_cgroup_parse_path(const char *path, size_t len, const char *root, struct mon_cgroup_id *out,
                          struct vg_err *err);

/* The text of /proc/<pid>/cgroup (len bytes, at most MON_CGROUP_MAX): the cgroup v2 line
 * (`0::PATH`) when it names a pod, else the v1 memory controller's line, else the first
 * other line that names one. Returns as mon_cgroup_parse_path (-EINVAL also for a
 * malformed file), -ENOENT when no line names a pod. */
int mon_cgroup_parse(const char *text, size_t len, const char *root, struct mon_cgroup_id *out,
                     struct vg_err *err);

/* ---- limits ---------------------------------------------------------------------- */

/* A container's limits as the device plugin wrote them (libvgpu's limits file). */
/* A dynamic MIG instance the device plugin gave one GPU of the container (the limits
 * file's "# mig" comment lines; docs/deviceplugin.md). uuid "" when none. */
struct mon_limits_mig {
    char uuid[64];
    char profile[16];
    int64_t created; /* Unix seconds */
};

struct mon_limits {
    struct vgpu_config config;
    struct mon_limits_mig mig[VGPU_CONFIG_MAX_DEVICES];
};

/* Reads DIR/<pod_uid>_<container>/limits. -ENOENT when there is none (a container vgpu
 * did not allocate), other errors with the file named. */
int mon_limits_read(const char *region_dir, const char *pod_uid, const char *container,
                    struct mon_limits *out, struct vg_err *err);

/* The memory limit (bytes) of the GPU with this NVML UUID: the limit of the index whose
 * VGPU_DEVICE_UUID_<n> names it; 0 when the container was not given that GPU (any use is
 * over); UINT64_MAX when no limit applies. A file without UUIDs (written by a device
 * plugin older than this monitor) gives the largest of its limits. */
uint64_t mon_limits_for_gpu(const struct mon_limits *limits, const char *uuid);

/* The most of the GPU with this NVML UUID, in percent, the container may use over time:
 * its compute share (CUDA_DEVICE_SM_LIMIT[_<n>]), or in burst mode its burst limit; 100
 * when its compute is not limited there (no share, mode disable); 0 when it was not given
 * that GPU. Matched by VGPU_DEVICE_UUID_<n> as mon_limits_for_gpu; without UUIDs, the
 * largest of its ceilings. */
unsigned mon_limits_compute_for_gpu(const struct mon_limits *limits, const char *uuid);

/* Driver overhead allowed over a limit before it is a violation: max(64 MiB, 2 %). */
uint64_t mon_slack(uint64_t limit);

/* ---- the judge ------------------------------------------------------------------- */

enum mon_policy { MON_POLICY_WARN = 0, MON_POLICY_KILL = 1 };

/* One GPU process of a sample. */
struct mon_proc {
    pid_t pid;
    unsigned gpu;  /* index into the GPU list */
    uint64_t used; /* bytes NVML reports */
    /* Percent of the GPU's SM time the process used over the last second
     * (nvmlDeviceGetProcessUtilization; 0 when NVML reports none for it). */
    unsigned util;
};

/* A container's name from its ID (the pod watch): 0 and name filled, -ENOENT unknown. */
typedef int (*mon_resolve_fn)(void *arg, const char *pod_uid, const char *container_id,
                              char name[MON_NAME_MAX]);

/* What the judge reports:
 *  - "over": a group passes its limit plus slack (an episode starts); "under": it is back;
 *  - "unregistered": a process of a limited container on a GPU that is not registered
 *    with libvgpu (first sight; once per process); why says which check failed;
 *  - "kill": a process killed; why is "limit", "unregistered" or "quarantine";
 *  - "quarantine": the container passed quarantine_after violations within the window:
 *    it is quarantined until the period ends ("release"); under kill its processes are
 *    killed then and whenever one of them is seen on a GPU again;
 *  - "compute_over": a group's GPU utilization (the sum of its processes', NVML's),
 *    averaged over compute_window_ms, passes its compute ceiling plus compute_margin
 *    (util, ceiling, margin); "compute_under": back at or under the ceiling plus margin.
 * container is "" when the pod was judged as a whole (its containers' names unknown);
 * gpu_uuid is "" for "quarantine" and "release". */
struct mon_report {
    const char *kind;
    const char *gpu_uuid;
    const char *pod_uid;
    const char *container;
    uint64_t used, limit, slack;
    pid_t pid;                      /* "kill", "unregistered": the process */
    uint64_t freed;                 /* "kill", "unregistered": its memory */
    const char *why;                /* "kill", "unregistered": see above; NULL otherwise */
    unsigned violations;            /* "quarantine": violations counted in the window */
    uint64_t until_ms;              /* "quarantine": the period, in ms */
    unsigned util, ceiling, margin; /* "compute_over", "compute_under": percent */
};
typedef void (*mon_report_fn)(void *arg, const struct mon_report *report);

struct mon_options {
    enum mon_policy policy;
    const char *region_dir;  /* default /usr/local/vgpu/containers */
    const char *proc_root;   /* default /proc */
    const char *cgroup_root; /* default "" (anywhere) */
    mon_resolve_fn resolve;  /* may be NULL: every pod judged as a whole */
    void *resolve_arg;
    mon_report_fn report; /* may be NULL */
    void *report_arg;
    /* First sight (docs/monitor.md, "Registration"): every GPU process of a limited
     * container must be registered with libvgpu in that container's region, verified
     * from outside (/proc/<pid>/maps, status; the region's slots); one that is not is a
     * violation the sample it is listed, whatever it holds. Off: only the memory check. */
    bool check_registration;
    /* Container-level action: quarantine_after violations (episodes over the limit and
     * unregistered processes) within quarantine_window_ms quarantine the container for
     * quarantine_ms. 0: never. */
    unsigned quarantine_after;
    uint64_t quarantine_window_ms, quarantine_ms;
    /* The container's compute as a whole (docs/compute.md, "The container's total"): the
     * sum of its processes' NVML utilization on a GPU, averaged over compute_window_ms,
     * may pass its ceiling (mon_limits_compute_for_gpu) by at most compute_margin points.
     * Past that, under kill the container is quarantined at once (its processes killed;
     * with quarantine_after 0, its processes on that GPU); under warn it is one violation.
     * Nothing a tenant writes enters: NVML's figures, the cgroup, the read-only limits. */
    bool check_compute;
    uint64_t compute_window_ms; /* 1000 .. 600000 */
    unsigned compute_margin;    /* points, 1 .. 100 */
};

struct mon_counters {
    uint64_t samples;
    uint64_t processes;    /* GPU processes in the last sample */
    uint64_t unattributed; /* last sample: processes outside pods, or of unreadable cgroups */
    uint64_t unlimited;    /* last sample: pod processes with no limits file */
    uint64_t violations;   /* episodes started */
    uint64_t kills;
    uint64_t kill_failures;
    uint64_t unregistered;       /* processes seen on a GPU not registered with libvgpu */
    uint64_t quarantines;        /* containers quarantined */
    uint64_t quarantined;        /* containers in quarantine now */
    uint64_t compute_violations; /* episodes of a container over its compute ceiling */
};

struct mon_monitor;

/* gpu_uuids[gpu_count] are copied. */
int mon_new(const struct mon_options *options, const char *const *gpu_uuids, unsigned gpu_count,
            struct mon_monitor **out, struct vg_err *err);
void mon_free(struct mon_monitor *mon);

/* Judges one sample: procs[count] (the whole node's GPU processes). Reports and, under
 * kill, kills. Returns 0, or a negative errno when the sample itself is unusable. */
int mon_judge(struct mon_monitor *mon, const struct mon_proc *procs, size_t count,
              struct vg_err *err);

void mon_get_counters(const struct mon_monitor *mon, struct mon_counters *out);

/* The counters' Prometheus text is written by mon_metrics_own (metrics.h). */

/* ---- the daemon ------------------------------------------------------------------ */

struct mon_args {
    enum mon_policy policy;
    uint64_t interval_ms;
    uint64_t samples; /* 0: run until a signal */
    const char *region_dir, *proc_root, *cgroup_root;
    const char *node_name, *kubeconfig, *metrics_file, *nvml_library;
    const char *listen; /* the metrics endpoint, "ADDR:PORT"; NULL: off (--listen off) */
    int log_level;
    bool check_registration; /* --registration-check on|off */
    unsigned quarantine_after;
    uint64_t quarantine_window_s, quarantine_s;
    bool check_compute; /* --compute-check on|off */
    uint64_t compute_window_s, compute_margin;
    bool help;
};

/* Parses argv[0..argc) (without the program name). Bad input: -EINVAL naming the flag. */
int mon_args_parse(int argc, char **argv, struct mon_args *out, struct vg_err *err);
void mon_args_usage(FILE *f);

/* Runs the daemon until SIGTERM/SIGINT or args->samples samples: 0, 1 when it cannot
 * start (NVML, the API client), with the reason in err. */
int mon_daemon_run(const struct mon_args *args, struct vg_err *err);

#endif
