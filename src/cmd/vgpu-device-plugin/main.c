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

#include "base/auto.h"
#include "base/buf.h"
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

VG_DEFINE_AUTO(event_base_freep, struct event_base, event_base_free)
VG_DEFINE_AUTO(event_freep, struct event, event_free)
VG_DEFINE_AUTO(nvml_freep, struct dp_nvml, dp_nvml_free)
VG_DEFINE_AUTO(kube_config_freep, struct kube_config, kube_config_free)
VG_DEFINE_AUTO(kube_client_freep, struct kube_client, kube_client_free)
VG_DEFINE_AUTO(plugin_freep, struct dp_plugin, dp_plugin_free)

/* Prints err and returns status. */
static int failed(int status, const struct vg_err *err)
{
    fprintf(stderr, "vgpu-device-plugin: %s\n", err->msg);
    return status;
}

/* --check-config anywhere among the arguments: removed from argv (argc updated). */
static bool take_check_config(int *argc, char **argv)
{
    bool found = false;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--check-config") == 0)
            found = true;
        else
            argv[out++] = argv[i];
    }
    *argc = out;
    return found;
}

/* vgpu.hamiNodeConfig (this node's operatingmode mig turns migMode dynamic) and
 * vgpu.hamiDeviceConfig (the MIG profile lists). Errors name the file. */
static int read_hami(struct dpconfig *cfg, struct hami_mig *hami, struct vg_err *err)
{
    memset(hami, 0, sizeof *hami);
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    const char *path = cfg->vgpu.hami_node_config;
    if (path) {
        bool mig = false;
        if (vg_read_file(path, HAMI_MAX_BYTES, &text, &len, err) < 0 ||
            hami_node_mig(text, len, cfg->cli.node_name ? cfg->cli.node_name : "", &mig, err) < 0)
            return vg_err_wrap(err, "vgpu.hamiNodeConfig %s", path);
        if (mig) {
            cfg->vgpu.mig_mode = DPCONFIG_MIG_MODE_DYNAMIC;
            vg_log(VG_LOG_INFO, "HAMi's node configuration: operatingmode mig, dynamic MIG",
                   "file=%s", path);
        }
        free(text);
        text = NULL;
    }
    path = cfg->vgpu.hami_device_config;
    if (path && (vg_read_file(path, HAMI_MAX_BYTES, &text, &len, err) < 0 ||
                 hami_mig_parse(text, len, hami, err) < 0))
        return vg_err_wrap(err, "vgpu.hamiDeviceConfig %s", path);
    return 0;
}

/* Runs the plugin until a signal stops it or a restart is requested: 0, or 2 for a bad
 * configuration, 1 when the plugin cannot start. Everything is released on return.
 * With --check-config: the configuration is checked and printed, nothing else done. */
static int run(int argc, char **argv)
{
    __attribute__((cleanup(dpconfig_free))) struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    struct vg_err err = {0};
    bool check_config = take_check_config(&argc, argv);
    int rc = dpconfig_from_args(argc - 1, argv + 1, env_lookup, NULL, &cfg, &err);
    if (rc == 1) {
        dpconfig_print_help(stdout, "vgpu-device-plugin");
        printf("  --check-config  check the flags, environment and --config, print the "
               "effective configuration and exit (0: valid, 2: not); no side effects\n");
        return 0;
    }
    if (rc < 0)
        return failed(2, &err);
    struct dp_plugin_options opt = {0};
    /* Tests and benchmarks poll health faster than the 5 s default. */
    const char *interval = getenv("VGPU_DP_HEALTH_INTERVAL_MS");
    if (interval && vg_parse_u64(interval, 10, 3600000, &opt.health_interval_ms, &err) < 0) {
        vg_err_wrap(&err, "VGPU_DP_HEALTH_INTERVAL_MS");
        return failed(2, &err);
    }
    /* Tests kill the plugin between a GPU instance and its compute instance. */
    const char *pause = getenv("VGPU_DP_MIG_CREATE_PAUSE_MS");
    uint64_t pause_ms = 0;
    if (pause && vg_parse_u64(pause, 0, 60000, &pause_ms, &err) < 0) {
        vg_err_wrap(&err, "VGPU_DP_MIG_CREATE_PAUSE_MS");
        return failed(2, &err);
    }
    dp_nvml_set_mig_pause(pause_ms);
    /* HAMi's configuration, read as HAMi writes it. */
    static struct hami_mig hami;
    if (read_hami(&cfg, &hami, &err) < 0)
        return failed(2, &err);
    /* What makes a GPU unhealthy: the health section, then DP_DISABLE_HEALTHCHECKS, as
     * NVIDIA's plugin reads them. */
    struct dp_xid_policy xids;
    if (dp_xid_policy_from_config(&cfg, getenv("DP_DISABLE_HEALTHCHECKS"), &xids, &err) < 0)
        return failed(2, &err);
    /* IMEX channels that do not exist: an error with imex.required, else left out. */
    if (dp_imex_check(&cfg, &err) < 0)
        return failed(2, &err);
    if (check_config) {
        dpconfig_dump(&cfg, stdout);
        printf("OK\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    VG_AUTO(event_base_freep) struct event_base *base = event_base_new();
    VG_AUTO(nvml_freep) struct dp_nvml *nvml = NULL;
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

    VG_AUTO(kube_config_freep) struct kube_config *kcfg = NULL;
    VG_AUTO(kube_client_freep) struct kube_client *kube = NULL;
    if (cfg.cli.kubeconfig)
        rc = kube_config_load_file(cfg.cli.kubeconfig, NULL, &kcfg, &err);
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_in_cluster(NULL, &kcfg, &err);
    else
        vg_log(VG_LOG_WARN,
               "no --kubeconfig and not in a cluster: no inventory annotation, "
               "and vgpu-mode Allocate will fail",
               "node=%s", cfg.cli.node_name ? cfg.cli.node_name : "");
    if (rc < 0 || (kcfg && kube_client_new(base, kcfg, NULL, &kube, &err) < 0))
        return failed(1, &err);
    opt.kube = kube;

    opt.restart = request_restart;
    opt.restart_arg = base;
    opt.hami_mig = &hami;
    VG_AUTO(plugin_freep) struct dp_plugin *plugin = NULL;
    if (dp_plugin_new(base, &cfg, &opt, &plugin, &err) < 0)
        return failed(1, &err);
    VG_AUTO(event_freep) struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    VG_AUTO(event_freep) struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_base_dispatch(base);
    return 0;
}

int main(int argc, char **argv)
{
    int rc = run(argc, argv);
    if (rc != 0 || !restart_requested)
        return rc;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[n > 0 ? n : 0] = '\0';
    execv(n > 0 ? self : "/proc/self/exe", argv);
    fprintf(stderr, "vgpu-device-plugin: restarting: %s\n", VG_STRERROR(errno));
    return 1;
}
