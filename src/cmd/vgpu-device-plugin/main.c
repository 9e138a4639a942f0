/* vgpu-device-plugin: kubelet device plugin (docs/deviceplugin.md).
 * Parses the configuration (file, environment, command line), opens NVML and the
 * Kubernetes API client, then runs the plugin on one event loop until SIGTERM/SIGINT. */
#include <errno.h>
#include <limits.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/parse.h"
#include "deviceplugin/deviceplugin.h"
#include "kube/kube.h"

static const char *env_lookup(const char *name, void *user)
{
    (void)user;
    return getenv(name);
}

/* flags.restartOnDeviceUnhealthy: the loop stops, everything is released, and the
 * program executes itself again with the same arguments (GPUs rediscovered, marks of
 * earlier XIDs gone, sockets served and registered anew). */
static bool restart_requested;

static void request_restart(void *arg)
{
    restart_requested = true;
    event_base_loopbreak(arg);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    vg_log(VG_LOG_INFO, "stopping", "signal=%d", (int)sig);
    event_base_loopbreak(arg);
}

/* Fails like a GPU-less node when NVML cannot be opened; failOnInitError decides later. */
static int no_gpus(void *arg, struct dp_gpu *gpus, unsigned *count, struct vg_err *err)
{
    (void)gpus;
    (void)count;
    const struct vg_err *why = arg;
    return vg_err_set(err, why->code, "%s", why->msg);
}

static bool never_healthy(void *arg, const struct dp_gpu *gpu)
{
    (void)arg;
    (void)gpu;
    return false;
}

int main(int argc, char **argv)
{
    struct dp_config cfg;
    dp_config_defaults(&cfg);
    struct vg_err err = {0};
    int rc = dp_config_from_args(argc - 1, argv + 1, env_lookup, NULL, &cfg, &err);
    if (rc == 1) {
        dp_config_print_help(stdout, "vgpu-device-plugin");
        dp_config_free(&cfg);
        return 0;
    }
    if (rc < 0) {
        fprintf(stderr, "vgpu-device-plugin: %s\n", err.msg);
        dp_config_free(&cfg);
        return 2;
    }
    struct dp_plugin_options opt = {0};
    /* Tests and benchmarks poll health faster than the 5 s default. */
    const char *interval = getenv("VGPU_DP_HEALTH_INTERVAL_MS");
    if (interval && vg_parse_u64(interval, 10, 3600000, &opt.health_interval_ms, &err) < 0) {
        fprintf(stderr, "vgpu-device-plugin: VGPU_DP_HEALTH_INTERVAL_MS: %s\n", err.msg);
        dp_config_free(&cfg);
        return 2;
    }
    /* What makes a GPU unhealthy: the health section, then DP_DISABLE_HEALTHCHECKS, as
     * NVIDIA's plugin reads them. */
    struct dp_xid_policy xids;
    if (dp_xid_policy_from_config(&cfg, getenv("DP_DISABLE_HEALTHCHECKS"), &xids, &err) < 0) {
        fprintf(stderr, "vgpu-device-plugin: %s\n", err.msg);
        dp_config_free(&cfg);
        return 2;
    }
    /* IMEX channels that do not exist: an error with imex.required, else left out. */
    if (dp_imex_check(&cfg, &err) < 0) {
        fprintf(stderr, "vgpu-device-plugin: %s\n", err.msg);
        dp_config_free(&cfg);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct event_base *base = event_base_new();
    struct dp_nvml *nvml = NULL;
    struct vg_err nvml_err = {0};
    char library[1024]; /* under flags.plugin.containerDriverRoot when it holds NVML */
    dp_nvml_library(&cfg, library, sizeof(library));
    if (dp_nvml_open(library, &nvml, &nvml_err) == 0) {
        dp_nvml_set_xid_policy(nvml, &xids);
        /* Tests point the MIG capability table elsewhere. */
        if (getenv("VGPU_DP_MIG_MINORS"))
            dp_nvml_set_mig_minors_path(nvml, getenv("VGPU_DP_MIG_MINORS"));
        opt.source = dp_nvml_source(nvml);
    } else
        opt.source =
            (struct dp_gpu_source){.discover = no_gpus, .healthy = never_healthy, .arg = &nvml_err};

    struct kube_config *kcfg = NULL;
    struct kube_client *kube = NULL;
    if (cfg.cli.kubeconfig)
        rc = kube_config_load_file(cfg.cli.kubeconfig, NULL, &kcfg, &err);
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_in_cluster(NULL, &kcfg, &err);
    else
        vg_log(VG_LOG_WARN,
               "no --kubeconfig and not in a cluster: no inventory annotation, "
               "and vgpu-mode Allocate will fail",
               "node=%s", cfg.cli.node_name ? cfg.cli.node_name : "");
    if (rc == 0 && kcfg)
        rc = kube_client_new(base, kcfg, NULL, &kube, &err);
    opt.kube = kube;

    opt.restart = request_restart;
    opt.restart_arg = base;
    struct dp_plugin *plugin = NULL;
    if (rc == 0)
        rc = dp_plugin_new(base, &cfg, &opt, &plugin, &err);
    if (rc < 0) {
        fprintf(stderr, "vgpu-device-plugin: %s\n", err.msg);
    } else {
        struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
        struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
        event_add(sigterm, NULL);
        event_add(sigint, NULL);
        event_base_dispatch(base);
        event_free(sigterm);
        event_free(sigint);
    }
    dp_plugin_free(plugin);
    kube_client_free(kube);
    kube_config_free(kcfg);
    dp_nvml_free(nvml);
    event_base_free(base);
    dp_config_free(&cfg);
    if (rc == 0 && restart_requested) {
        char self[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[n > 0 ? n : 0] = '\0';
        execv(n > 0 ? self : "/proc/self/exe", argv);
        fprintf(stderr, "vgpu-device-plugin: restarting: %s\n", strerror(errno));
        return 1;
    }
    return rc < 0 ? 1 : 0;
}
