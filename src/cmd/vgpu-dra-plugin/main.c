/* vgpu-dra-plugin: the node side of vgpu's DRA driver (docs/dra.md).
 *
 *   vgpu-dra-plugin --node-name NAME --kubelet-dir DIR --kubeconfig FILE --cdi-dir DIR
 *                   --state-dir DIR [--driver-name NAME] [--check-config]
 *                   [device plugin flags...]
 *
 * Its own flags are --kubelet-dir (kubelet's root, default /var/lib/kubelet), --cdi-dir
 * (default /var/run/cdi), --state-dir (default /var/lib/vgpu-dra) and --driver-name
 * (default gpu.vgpu.io); every other flag, the environment and --config are the device
 * plugin's (dpconfig: --node-name, --kubeconfig, --libvgpu-path, --compute-board-dir,
 * ...), so a claim's container gets what the device plugin's vgpu mode gives. Claim
 * directories go to <state-dir>/claims. Runs on one event loop until SIGTERM/SIGINT. */
#include <dlfcn.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "dpconfig/dpconfig.h"
#include "dra/dra.h"
#include "dra/health.h"
#include "dra/mig.h"
#include "kube/kube.h"

static const char *env_lookup(const char *name, void *user)
{
    (void)user;
    return getenv(name);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    vg_log(VG_LOG_INFO, "stopping", "signal=%d", (int)sig);
    event_base_loopbreak(arg);
}

VG_DEFINE_AUTO(event_base_freep, struct event_base, event_base_free)
VG_DEFINE_AUTO(event_freep, struct event, event_free)
VG_DEFINE_AUTO(nvml_freep, struct dp_nvml, dp_nvml_free)
VG_DEFINE_AUTO(kube_config_freep, struct kube_config, kube_config_free)
VG_DEFINE_AUTO(kube_client_freep, struct kube_client, kube_client_free)
VG_DEFINE_AUTO(dra_plugin_freep, struct dra_plugin, dra_plugin_free)
VG_DEFINE_AUTO(health_freep, struct dra_health_monitor, dra_health_monitor_free)
VG_DEFINE_AUTO(mig_freep, struct dra_mig, dra_mig_close)

static int failed(int status, const struct vg_err *err)
{
    fprintf(stderr, "vgpu-dra-plugin: %s\n", err->msg);
    return status;
}

/* This program's own flags; every other flag is dpconfig's (the device plugin's). */
static struct own_flags {
    const char *kubelet_dir, *cdi_dir, *state_dir, *driver;
    bool consumable, idle_without_gpu, check_config;
    int device_taints; /* DRA_TAINTS_* */
    int mig_mode;      /* 0 static, 1 dynamic */
} own = {.kubelet_dir = "/var/lib/kubelet",
         .cdi_dir = "/var/run/cdi",
         .state_dir = "/var/lib/vgpu-dra",
         .driver = DRA_DRIVER_DEFAULT};

#define DIR_FLAG(n, v, field, d, dflt)                                                             \
    {                                                                                              \
        .name = n, .value = v, .type = VG_FLAG_STRING, .target = &own.field, .doc = d,             \
        .def = dflt, .opts = VG_FLAG_NONEMPTY                                                      \
    }

/* In the order of DRA_TAINTS_AUTO, _ON, _OFF. */
static const char *const taint_choices[] = {"auto", "true", "false", NULL};
static const char *const mig_choices[] = {"static", "dynamic", NULL};

static const struct vg_flag own_flags[] = {
    DIR_FLAG("kubelet-dir", "DIR", kubelet_dir,
             "kubelet's root directory (plugins_registry/, plugins/)", "/var/lib/kubelet"),
    DIR_FLAG("cdi-dir", "DIR", cdi_dir, "where claims' CDI spec files go", "/var/run/cdi"),
    DIR_FLAG("state-dir", "DIR", state_dir,
             "checkpoint.json and claims/ (the claims' container directories)",
             "/var/lib/vgpu-dra"),
    DIR_FLAG("driver-name", "NAME", driver, "the DRA driver name", DRA_DRIVER_DEFAULT),
    {.name = "consumable-capacity",
     .type = VG_FLAG_BOOL,
     .target = &own.consumable,
     .doc = "publish GPUs shareable by amount (needs the DRAConsumableCapacity feature gate); "
            "false: whole GPUs",
     .def = "false"},
    {.name = "device-taints",
     .value = "auto|true|false",
     .type = VG_FLAG_ENUM,
     .target = &own.device_taints,
     .choices = taint_choices,
     .doc = "an unhealthy GPU stays in the ResourceSlice with taints (DRADeviceTaints; auto: "
            "when the API server is Kubernetes 1.36 or later); false: it is left out",
     .def = "auto"},
    {.name = "mig-mode",
     .value = "static|dynamic",
     .type = VG_FLAG_ENUM,
     .target = &own.mig_mode,
     .choices = mig_choices,
     .doc = "GPUs in MIG mode: static, their instances as they are; dynamic, partitions made "
            "for the claims that get them (Kubernetes 1.36 partitionable devices; static "
            "before 1.36)",
     .def = "static"},
    {.name = "idle-without-gpu",
     .type = VG_FLAG_BOOL,
     .target = &own.idle_without_gpu,
     .doc = "no NVIDIA driver on this node: log it once and wait for a signal (exit 0) instead "
            "of failing",
     .def = "false"},
    {.name = "check-config",
     .type = VG_FLAG_BOOL,
     .target = &own.check_config,
     .doc = "check the flags, environment and --config, print the effective configuration and "
            "exit (0: valid, 2: not)"},
};

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

/* NVML's system driver version ("550.54.15"), from the library dp_nvml_open loaded; ""
 * when it has none. */
static void driver_version_of(const char *library, char *out, size_t size)
{
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        return;
    int (*get)(char *, unsigned) =
        (int (*)(char *, unsigned))dlsym(h, "nvmlSystemGetDriverVersion");
    if (get == NULL || get(out, (unsigned)size) != 0)
        out[0] = '\0';
    out[size - 1] = '\0';
    dlclose(h);
}

static void help(void)
{
    /* One usage: this program's own flags, then the device plugin's settings that decide
     * what a claim's container gets. Its --kubelet-dir (kubelet's root) replaces the
     * device plugin's (the device-plugin socket directory), and claims' directories are
     * <state-dir>/claims, so the device plugin's --kubelet-dir and --region-dir are not
     * listed; nor its dynamic MIG settings (this program's own --mig-mode is taken first). */
    vg_flags_help(stdout,
                  "usage: vgpu-dra-plugin --node-name NAME [--kubeconfig FILE] [--config FILE] "
                  "[flags]\n\nFlags override the environment, which overrides the config file "
                  "(docs/config.md).\n",
                  own_flags, VG_FLAGS_COUNT(own_flags));
    static const char *const not_ours[] = {
        "kubelet-dir",      "region-dir",         "mig-mode", "mig-dynamic-gpus",
        "hami-node-config", "hami-device-config", NULL};
    dpconfig_print_flags(stdout, not_ours);
}

/* The flags (own, then dpconfig's), the environment and --config: 0, 1 when --help was
 * printed, or a negative code with err set. Claims' directories are <state-dir>/claims. */
static int configure(int argc, char **argv, struct dpconfig *cfg, struct vg_err *err)
{
    if (vg_flags_take(own_flags, VG_FLAGS_COUNT(own_flags), &argc, argv, err) < 0)
        return err->code;
    int rc = dpconfig_from_args(argc - 1, argv + 1, env_lookup, NULL, cfg, err);
    if (rc == 1)
        help();
    if (rc != 0)
        return rc;
    if (cfg->cli.node_name == NULL || cfg->cli.node_name[0] == '\0')
        return vg_err_set(err, -EINVAL, "--node-name (or NODE_NAME) is required");
    char claims[1024];
    if (vg_snprintf(claims, sizeof claims, "%s/claims", own.state_dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "--state-dir too long");
    free(cfg->vgpu.region_dir);
    cfg->vgpu.region_dir = xstrdup(claims);
    return 0;
}

static int print_check_config(const struct dpconfig *cfg)
{
    printf("kubelet-dir = %s\ncdi-dir = %s\nstate-dir = %s\ndriver-name = %s\n"
           "consumable-capacity = %s\ndevice-taints = %s\nmig-mode = %s\n"
           "idle-without-gpu = %s\n",
           own.kubelet_dir, own.cdi_dir, own.state_dir, own.driver,
           own.consumable ? "true" : "false", taint_choices[own.device_taints],
           mig_choices[own.mig_mode], own.idle_without_gpu ? "true" : "false");
    dpconfig_dump(cfg, stdout);
    printf("OK\n");
    return 0;
}

/* An interval in milliseconds from the environment, when set. */
static int env_ms(const char *name, uint64_t max, uint64_t *out, struct vg_err *err)
{
    const char *v = getenv(name);
    if (v != NULL && vg_parse_u64(v, 10, max, out, err) < 0)
        return vg_err_wrap(err, "%s", name);
    return 0;
}

/* What makes a GPU unhealthy (the device plugin's health section and
 * DP_DISABLE_HEALTHCHECKS) and the loop's intervals (the environment's test knobs). */
static int read_knobs(const struct dpconfig *cfg, struct dp_xid_policy *xids,
                      struct dra_plugin_options *opt, struct vg_err *err)
{
    if (dp_xid_policy_from_config(cfg, getenv("DP_DISABLE_HEALTHCHECKS"), xids, err) < 0 ||
        env_ms("VGPU_DRA_HEALTH_INTERVAL_MS", 3600000, &opt->health_interval_ms, err) < 0 ||
        env_ms("VGPU_DRA_RESYNC_MS", 86400000, &opt->resync_ms, err) < 0 ||
        env_ms("VGPU_DRA_SOCKET_CHECK_MS", 3600000, &opt->socket_check_ms, err) < 0 ||
        env_ms("VGPU_DRA_TEST_GI_PAUSE_MS", 600000, &opt->mig_gi_pause_ms, err) < 0)
        return err->code;
    return 0;
}

/* Opens NVML and finds the GPUs: 0, or -1 with *status the exit status: 0 when there is
 * no driver and --idle-without-gpu said to wait (the signal came), else 1 or 2 with err. */
static int open_gpus(const struct dpconfig *cfg, const struct dp_xid_policy *xids,
                     struct dp_nvml **nvml, struct dra_plugin_options *opt, char *version,
                     size_t version_size, int *status, struct vg_err *err)
{
    static struct dp_gpu gpus[DP_MAX_GPUS];
    char library[1024];
    dp_nvml_library(cfg, library, sizeof(library));
    if (dp_nvml_open(library, nvml, err) < 0) {
        *status = 1;
        if (!own.idle_without_gpu)
            return -1;
        /* A DaemonSet on every node: a node without GPUs is no failure to restart. */
        vg_log(VG_LOG_INFO, "no NVIDIA driver on this node: nothing to publish, idle until stopped",
               "reason=\"%s\"", err->msg);
        wait_for_signal();
        *status = 0;
        return -1;
    }
    /* Every claim's CDI spec mounts libvgpu: without it no claim's container could
     * start, so the plugin refuses to start rather than accept claims it must fail. */
    if (access(cfg->vgpu.libvgpu_path, R_OK) != 0) {
        vg_err_errno(err, errno, "--libvgpu-path %s (vgpu.libvgpuPath)", cfg->vgpu.libvgpu_path);
        *status = 2;
        return -1;
    }
    dp_nvml_set_xid_policy(*nvml, xids);
    if (getenv("VGPU_DP_MIG_MINORS"))
        dp_nvml_set_mig_minors_path(*nvml, getenv("VGPU_DP_MIG_MINORS"));
    driver_version_of(library, version, version_size);
    opt->driver_version = version[0] ? version : NULL;
    opt->source = dp_nvml_source(*nvml);
    opt->gpus = gpus;
    *status = 1;
    if (opt->source.discover(opt->source.arg, gpus, &opt->gpu_count, err) < 0)
        return -1;
    /* Health with its reasons (XID, lost, unmonitored) for the taints. */
    if (dra_health_monitor_new(library, xids, gpus, opt->gpu_count, &opt->health, err) < 0)
        return -1;
    if (own.mig_mode == 1 && dra_mig_open(library, &opt->mig, err) < 0) {
        *status = 2;
        return -1;
    }
    return 0;
}

/* The API client: --kubeconfig, else in-cluster credentials. */
static int connect_kube(struct event_base *base, const struct dpconfig *cfg,
                        struct kube_config **kcfg, struct kube_client **kube, struct vg_err *err)
{
    int rc;
    if (cfg->cli.kubeconfig)
        rc = kube_config_load_file(cfg->cli.kubeconfig, NULL, kcfg, err);
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_in_cluster(NULL, kcfg, err);
    else
        rc = vg_err_set(err, -EINVAL,
                        "no --kubeconfig and not in a cluster: claims cannot "
                        "be read");
    if (rc < 0 || kube_client_new(base, *kcfg, NULL, kube, err) < 0)
        return err->code;
    return 0;
}

int main(int argc, char **argv)
{
    struct vg_err err = {0};
    __attribute__((cleanup(dpconfig_free))) struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    int rc = configure(argc, argv, &cfg, &err);
    if (rc != 0)
        return rc == 1 ? 0 : failed(2, &err);
    if (own.check_config)
        return print_check_config(&cfg);

    signal(SIGPIPE, SIG_IGN);
    VG_AUTO(event_base_freep) struct event_base *base = event_base_new();
    VG_AUTO(nvml_freep) struct dp_nvml *nvml = NULL;
    struct dra_plugin_options opt = {.cfg = &cfg,
                                     .driver = own.driver,
                                     .node_name = cfg.cli.node_name,
                                     .kubelet_dir = own.kubelet_dir,
                                     .cdi_dir = own.cdi_dir,
                                     .state_dir = own.state_dir,
                                     .boot_id_path = getenv("VGPU_DRA_BOOT_ID_FILE"),
                                     .publish = true,
                                     .consumable = own.consumable,
                                     .device_taints = own.device_taints};
    struct dp_xid_policy xids;
    if (read_knobs(&cfg, &xids, &opt, &err) < 0)
        return failed(2, &err);
    char driver_version[96] = "";
    int status = 0;
    int gpus_rc =
        open_gpus(&cfg, &xids, &nvml, &opt, driver_version, sizeof driver_version, &status, &err);
    VG_AUTO(health_freep) struct dra_health_monitor *health = opt.health;
    VG_AUTO(mig_freep) struct dra_mig *mig = opt.mig;
    if (gpus_rc < 0)
        return status == 0 ? 0 : failed(status, &err);

    VG_AUTO(kube_config_freep) struct kube_config *kcfg = NULL;
    VG_AUTO(kube_client_freep) struct kube_client *kube = NULL;
    if (connect_kube(base, &cfg, &kcfg, &kube, &err) < 0)
        return failed(1, &err);
    opt.kube = kube;
    VG_AUTO(dra_plugin_freep) struct dra_plugin *plugin = NULL;
    if (dra_plugin_new(base, &opt, &plugin, &err) < 0)
        return failed(1, &err);
    VG_AUTO(event_freep) struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    VG_AUTO(event_freep) struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_base_dispatch(base);
    /* The client first: it cancels the plugin's requests, whose callbacks point into the
     * plugin. */
    kube_client_free(vg_steal_ptr(&kube));
    dra_plugin_free(vg_steal_ptr(&plugin));
    return 0;
}
