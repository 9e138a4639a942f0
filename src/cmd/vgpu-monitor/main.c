/* vgpu-monitor: the node-side watchdog (docs/monitor.md). Exits 2 on bad flags, 1 when it
 * cannot start (no NVML, bad API credentials), 0 after a signal or --samples samples.
 * Two flags are main()'s own: --check-config (check the flags, print them, exit) and
 * --idle-without-gpu (no NVML on the node: log it once and wait for a signal, exit 0,
 * instead of exiting 1 — a DaemonSet on a node without a GPU does not crash-loop). */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/flags.h"
#include "base/log.h"
#include "monitor/monitor.h"

/* main()'s own flags; the others are the monitor's (mon_args_parse). */
static bool check_config, idle_without_gpu;
static const struct vg_flag own_flags[] = {
    {.name = "check-config",
     .type = VG_FLAG_BOOL,
     .target = &check_config,
     .doc = "check the flags, print them and exit (0: valid, 2: not)"},
    {.name = "idle-without-gpu",
     .type = VG_FLAG_BOOL,
     .target = &idle_without_gpu,
     .doc = "no NVML on this node: log it and wait for a signal (exit 0) instead of exiting 1"},
};

static void print_settings(const struct mon_args *args)
{
    printf("policy=%s\nregistration-check=%s\nquarantine-after=%u\nquarantine-window-s=%llu\n"
           "quarantine-s=%llu\ninterval-ms=%llu\nregion-dir=%s\nproc-root=%s\n"
           "cgroup-root=%s\nnode-name=%s\nkubeconfig=%s\nmetrics-file=%s\nnvml-library=%s\n"
           "idle-without-gpu=%s\nOK\n",
           args->policy == MON_POLICY_KILL ? "kill" : "warn",
           args->check_registration ? "on" : "off", args->quarantine_after,
           (unsigned long long)args->quarantine_window_s, (unsigned long long)args->quarantine_s,
           (unsigned long long)args->interval_ms, args->region_dir, args->proc_root,
           args->cgroup_root, args->node_name ? args->node_name : "",
           args->kubeconfig ? args->kubeconfig : "(in-cluster)",
           args->metrics_file ? args->metrics_file : "",
           args->nvml_library ? args->nvml_library : "libnvidia-ml.so.1",
           idle_without_gpu ? "true" : "false");
}

/* Blocks until SIGTERM or SIGINT. */
static void wait_for_signal(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sig = 0;
    (void)sigwait(&set, &sig);
}

int main(int argc, char **argv)
{
    struct mon_args args;
    struct vg_err err = {0};
    if (vg_flags_take(own_flags, VG_FLAGS_COUNT(own_flags), &argc, argv, &err) < 0 ||
        mon_args_parse(argc - 1, argv + 1, &args, &err) < 0) {
        fprintf(stderr, "vgpu-monitor: %s\n", err.msg);
        return 2;
    }
    if (args.help) {
        mon_args_usage(stdout);
        vg_flags_help(stdout, NULL, own_flags, VG_FLAGS_COUNT(own_flags));
        return 0;
    }
    if (check_config) {
        print_settings(&args);
        return 0;
    }
    if (mon_daemon_run(&args, &err) < 0) {
        /* Every failure to load or start NVML reads "NVML: ..." (src/monitor/daemon.c),
         * and comes before anything else is started. */
        if (idle_without_gpu && strncmp(err.msg, "NVML:", 5) == 0) {
            vg_log(VG_LOG_WARN,
                   "no NVIDIA driver on this node: nothing to watch, idle until stopped",
                   "reason=\"%s\"", err.msg);
            wait_for_signal();
            return 0;
        }
        fprintf(stderr, "vgpu-monitor: %s\n", err.msg);
        return 1;
    }
    return 0;
}
