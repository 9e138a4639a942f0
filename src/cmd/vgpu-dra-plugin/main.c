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
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "dpconfig/dpconfig.h"
#include "dra/dra.h"
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

static int failed(int status, const struct vg_err *err)
{
    fprintf(stderr, "vgpu-dra-plugin: %s\n", err->msg);
    return status;
}

struct own_flags {
    const char *kubelet_dir, *cdi_dir, *state_dir, *driver;
    bool consumable;
    bool idle_without_gpu;
};

/* --consumable-capacity, --consumable-capacity=true|false: 1 taken, 0 not this flag. */
static int take_bool(const char *a, const char *name, bool *out, struct vg_err *err)
{
    size_t len = strlen(name);
    if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, name, len) != 0)
        return 0;
    const char *v = a + 2 + len;
    if (*v == '\0') {
        *out = true;
        return 1;
    }
    if (*v != '=')
        return 0;
    if (strcmp(v + 1, "true") == 0)
        *out = true;
    else if (strcmp(v + 1, "false") == 0)
        *out = false;
    else
        return vg_err_set(err, -EINVAL, "--%s takes true or false, not '%s'", name, v + 1);
    return 1;
}

/* Takes this program's flags (`--flag value` or `--flag=value`) out of argv. */
static int take_flags(int *argc, char **argv, struct own_flags *f, struct vg_err *err)
{
    static const char *const names[] = {"kubelet-dir", "cdi-dir", "state-dir", "driver-name"};
    const char **slots[] = {&f->kubelet_dir, &f->cdi_dir, &f->state_dir, &f->driver};
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        int rc = take_bool(argv[i], "consumable-capacity", &f->consumable, err);
        if (rc == 0)
            rc = take_bool(argv[i], "idle-without-gpu", &f->idle_without_gpu, err);
        if (rc < 0)
            return rc;
        bool taken = rc == 1;
        for (size_t k = 0; k < sizeof(names) / sizeof(names[0]) && !taken; k++) {
            size_t len = strlen(names[k]);
            const char *a = argv[i];
            if (strncmp(a, "--", 2) != 0 || strncmp(a + 2, names[k], len) != 0)
                continue;
            if (a[2 + len] == '=') {
                *slots[k] = a + 3 + len;
            } else if (a[2 + len] == '\0') {
                if (i + 1 >= *argc)
                    return vg_err_set(err, -EINVAL, "--%s needs a value", names[k]);
                *slots[k] = argv[++i];
            } else
                continue;
            if ((*slots[k])[0] == '\0')
                return vg_err_set(err, -EINVAL, "--%s is empty", names[k]);
            taken = true;
        }
        if (!taken)
            argv[out++] = argv[i];
    }
    *argc = out;
    return 0;
}

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
     * listed. */
    printf("usage: vgpu-dra-plugin --node-name NAME [--kubeconfig FILE] [--config FILE] "
           "[flags]\n\n"
           "Flags override the environment, which overrides the config file "
           "(docs/config.md).\n\n"
           "  --kubelet-dir DIR                            kubelet's root directory "
           "(plugins_registry/, plugins/); default /var/lib/kubelet\n"
           "  --cdi-dir DIR                                where claims' CDI spec files go; "
           "default /var/run/cdi\n"
           "  --state-dir DIR                              checkpoint.json and claims/ "
           "(the claims' container directories); default /var/lib/vgpu-dra\n"
           "  --driver-name NAME                           the DRA driver name; "
           "default " DRA_DRIVER_DEFAULT "\n"
           "  --consumable-capacity[=BOOL]                 publish GPUs shareable by amount "
           "(needs the DRAConsumableCapacity feature gate); default false: whole GPUs\n"
           "  --idle-without-gpu[=BOOL]                    no NVIDIA driver on this node: log "
           "it once and wait for a signal (exit 0) instead of failing; default false\n"
           "  --check-config                               check the flags, environment and "
           "--config, print the effective configuration and exit (0: valid, 2: not)\n");
    static const char *const not_ours[] = {"kubelet-dir", "region-dir", NULL};
    dp_config_print_flags(stdout, not_ours);
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

int main(int argc, char **argv)
{
    struct own_flags own = {.kubelet_dir = "/var/lib/kubelet",
                            .cdi_dir = "/var/run/cdi",
                            .state_dir = "/var/lib/vgpu-dra",
                            .driver = DRA_DRIVER_DEFAULT};
    struct vg_err err = {0};
    bool check_config = take_check_config(&argc, argv);
    if (take_flags(&argc, argv, &own, &err) < 0)
        return failed(2, &err);
    __attribute__((cleanup(dp_config_free))) struct dp_config cfg;
    dp_config_defaults(&cfg);
    int rc = dp_config_from_args(argc - 1, argv + 1, env_lookup, NULL, &cfg, &err);
    if (rc == 1) {
        help();
        return 0;
    }
    if (rc < 0)
        return failed(2, &err);
    if (cfg.cli.node_name == NULL || cfg.cli.node_name[0] == '\0') {
        vg_err_set(&err, -EINVAL, "--node-name (or NODE_NAME) is required");
        return failed(2, &err);
    }
    char claims[1024];
    if (vg_snprintf(claims, sizeof claims, "%s/claims", own.state_dir) < 0) {
        vg_err_set(&err, -ENAMETOOLONG, "--state-dir too long");
        return failed(2, &err);
    }
    free(cfg.vgpu.region_dir);
    cfg.vgpu.region_dir = xstrdup(claims);
    if (check_config) {
        printf("kubelet-dir = %s\ncdi-dir = %s\nstate-dir = %s\ndriver-name = %s\n"
               "consumable-capacity = %s\nidle-without-gpu = %s\n",
               own.kubelet_dir, own.cdi_dir, own.state_dir, own.driver,
               own.consumable ? "true" : "false", own.idle_without_gpu ? "true" : "false");
        dp_config_dump(&cfg, stdout);
        printf("OK\n");
        return 0;
    }

    signal(SIGPIPE, SIG_IGN);
    VG_AUTO(event_base_freep) struct event_base *base = event_base_new();
    VG_AUTO(nvml_freep) struct dp_nvml *nvml = NULL;
    char library[1024];
    dp_nvml_library(&cfg, library, sizeof(library));
    /* What makes a GPU unhealthy: the device plugin's health section and
     * DP_DISABLE_HEALTHCHECKS. */
    struct dp_xid_policy xids;
    if (dp_xid_policy_from_config(&cfg, getenv("DP_DISABLE_HEALTHCHECKS"), &xids, &err) < 0)
        return failed(2, &err);
    uint64_t health_ms = 0, resync_ms = 0;
    const char *interval = getenv("VGPU_DRA_HEALTH_INTERVAL_MS");
    if (interval && vg_parse_u64(interval, 10, 3600000, &health_ms, &err) < 0) {
        vg_err_wrap(&err, "VGPU_DRA_HEALTH_INTERVAL_MS");
        return failed(2, &err);
    }
    const char *resync = getenv("VGPU_DRA_RESYNC_MS");
    if (resync && vg_parse_u64(resync, 10, 86400000, &resync_ms, &err) < 0) {
        vg_err_wrap(&err, "VGPU_DRA_RESYNC_MS");
        return failed(2, &err);
    }
    if (dp_nvml_open(library, &nvml, &err) < 0) {
        if (!own.idle_without_gpu)
            return failed(1, &err);
        /* A DaemonSet on every node: a node without GPUs is no failure to restart. */
        vg_log(VG_LOG_INFO, "no NVIDIA driver on this node: nothing to publish, idle until stopped",
               "reason=\"%s\"", err.msg);
        wait_for_signal();
        return 0;
    }
    /* Every claim's CDI spec mounts libvgpu: without it no claim's container could
     * start, so the plugin refuses to start rather than accept claims it must fail. */
    if (access(cfg.vgpu.libvgpu_path, R_OK) != 0) {
        vg_err_errno(&err, errno, "--libvgpu-path %s (vgpu.libvgpuPath)", cfg.vgpu.libvgpu_path);
        return failed(2, &err);
    }
    dp_nvml_set_xid_policy(nvml, &xids);
    if (getenv("VGPU_DP_MIG_MINORS"))
        dp_nvml_set_mig_minors_path(nvml, getenv("VGPU_DP_MIG_MINORS"));
    char driver_version[96] = "";
    driver_version_of(library, driver_version, sizeof driver_version);
    struct dp_gpu_source source = dp_nvml_source(nvml);
    static struct dp_gpu gpus[DP_MAX_GPUS];
    unsigned gpu_count = 0;
    if (source.discover(source.arg, gpus, &gpu_count, &err) < 0)
        return failed(1, &err);

    VG_AUTO(kube_config_freep) struct kube_config *kcfg = NULL;
    VG_AUTO(kube_client_freep) struct kube_client *kube = NULL;
    if (cfg.cli.kubeconfig)
        rc = kube_config_load_file(cfg.cli.kubeconfig, NULL, &kcfg, &err);
    else if (getenv("KUBERNETES_SERVICE_HOST"))
        rc = kube_config_in_cluster(NULL, &kcfg, &err);
    else
        rc = vg_err_set(&err, -EINVAL,
                        "no --kubeconfig and not in a cluster: claims cannot "
                        "be read");
    if (rc < 0 || kube_client_new(base, kcfg, NULL, &kube, &err) < 0)
        return failed(1, &err);

    struct dra_plugin_options opt = {.cfg = &cfg,
                                     .gpus = gpus,
                                     .gpu_count = gpu_count,
                                     .kube = kube,
                                     .driver = own.driver,
                                     .node_name = cfg.cli.node_name,
                                     .kubelet_dir = own.kubelet_dir,
                                     .cdi_dir = own.cdi_dir,
                                     .state_dir = own.state_dir,
                                     .boot_id_path = getenv("VGPU_DRA_BOOT_ID_FILE"),
                                     .publish = true,
                                     .consumable = own.consumable,
                                     .driver_version = driver_version[0] ? driver_version : NULL,
                                     .source = source,
                                     .health_interval_ms = health_ms,
                                     .resync_ms = resync_ms};
    const char *check = getenv("VGPU_DRA_SOCKET_CHECK_MS");
    if (check && vg_parse_u64(check, 10, 3600000, &opt.socket_check_ms, &err) < 0) {
        vg_err_wrap(&err, "VGPU_DRA_SOCKET_CHECK_MS");
        return failed(2, &err);
    }
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
