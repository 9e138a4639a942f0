/* vgpu-scheduler: the kube-scheduler extender and admission webhook.
 *
 * main() parses flags and the --config file, loads the API credentials and wires the
 * modules: the daemon (src/scheduler/daemon.h) on one libevent loop with the Kubernetes
 * API client (src/kube), until SIGINT or SIGTERM. docs/scheduler.md lists every flag. */
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/flags.h"
#include "base/log.h"
#include "base/parse.h"
#include "kube/kube.h"
#include "scheduler/daemon.h"
#include "scheduler/records.h"
#include "scheduler/sched.h"

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

VG_DEFINE_AUTO(event_base_freep, struct event_base, event_base_free)
VG_DEFINE_AUTO(event_freep, struct event, event_free)
VG_DEFINE_AUTO(kube_config_freep, struct kube_config, kube_config_free)
VG_DEFINE_AUTO(kube_client_freep, struct kube_client, kube_client_free)
VG_DEFINE_AUTO(sched_daemon_freep, struct sched_daemon, sched_daemon_free)

static struct event_base *new_event_base(void)
{
    /* The changelist folds the add / delete / modify that evhttp makes of one socket in
     * one callback (four per request) into at most one epoll_ctl at the next dispatch.
     * Its one hazard, dup()ed descriptors, does not arise: nothing here dups a socket. */
    struct event_config *cfg = event_config_new();
    if (cfg != NULL)
        (void)event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    struct event_base *base = cfg != NULL ? event_base_new_with_config(cfg) : NULL;
    if (base == NULL)
        base = event_base_new();
    if (cfg != NULL)
        event_config_free(cfg);
    return base;
}

/* Loads the API credentials, starts the daemon and runs the loop until SIGINT or SIGTERM;
 * everything is released (in reverse order) on the way out. */
static int serve(const char *kubeconfig, const struct sched_options *o,
                 const struct sched_daemon_options *dopt, struct vg_err *err)
{
    VG_AUTO(event_base_freep) struct event_base *base = new_event_base();
    if (base == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create the event loop");
    VG_AUTO(kube_config_freep) struct kube_config *kc = NULL;
    int rc = kubeconfig != NULL ? kube_config_load_file(kubeconfig, NULL, &kc, err)
                                : kube_config_in_cluster(NULL, &kc, err);
    if (rc < 0)
        return rc;
    VG_AUTO(kube_client_freep) struct kube_client *client = NULL;
    if (kube_client_new(base, kc, NULL, &client, err) < 0)
        return err->code;
    VG_AUTO(sched_daemon_freep) struct sched_daemon *server = NULL;
    if (sched_daemon_new(base, client, o, dopt, &server, err) < 0)
        return err->code;
    VG_AUTO(event_freep) struct event *sigint = evsignal_new(base, SIGINT, on_signal, base);
    VG_AUTO(event_freep) struct event *sigterm = evsignal_new(base, SIGTERM, on_signal, base);
    if (sigint == NULL || sigterm == NULL)
        return vg_err_set(err, -ENOMEM, "cannot watch for signals");
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    event_base_dispatch(base);
    return 0;
}

/* ---- flags ------------------------------------------------------------------------- */

/* The command line as given; what was not given stays NULL, -1 or false. */
static struct cli {
    const char *listen, *kubeconfig, *config, *port_file, *webhook_listen, *tls_cert, *tls_key;
    const char *webhook_port_file;
    const char *scheduler_name, *client_ca, *token_file, *webhook_client_ca, *trusted_users;
    const char *record_namespace;
    int policy, gpu_policy;
    uint64_t ttl, heartbeat, max_assumed, dra[4];
    bool ttl_given, heartbeat_given, max_assumed_given, dra_given[4];
    bool no_overwrite_env, debug_state, check_config, hami_legacy, webhook_dra, help;
} cli = {.listen = "127.0.0.1:8888", .policy = -1, .gpu_policy = -1};

static int parse_policy(const char *value, void *target, struct vg_err *err)
{
    int p = place_policy_from_name(value);
    if (p < 0)
        return vg_err_set(err, -EINVAL, "unsupported policy '%s'", value);
    *(int *)target = p;
    return 0;
}

static int parse_log_level(const char *value, void *target, struct vg_err *err)
{
    int level = vg_log_level_from_name(value);
    if (level < 0)
        return vg_err_set(err, -EINVAL, "unknown level '%s'", value);
    *(int *)target = level;
    return 0;
}

static const char *const gpu_policies[] = {"binpack", "spread", NULL};

#define U64(n, v, field, lo, hi, d, dflt)                                                          \
    {                                                                                              \
        .name = n, .value = v, .type = VG_FLAG_U64, .target = &cli.field, .min = lo, .max = hi,    \
        .given = &cli.field##_given, .doc = d, .def = dflt                                         \
    }
#define DRA(n, k, d, dflt)                                                                         \
    {                                                                                              \
        .name = n, .value = "N", .type = VG_FLAG_U64, .target = &cli.dra[k], .max = 1000000,       \
        .given = &cli.dra_given[k], .doc = d, .def = dflt                                          \
    }
#define STR(n, v, field, d, dflt)                                                                  \
    {                                                                                              \
        .name = n, .value = v, .type = VG_FLAG_STRING, .target = &cli.field, .doc = d, .def = dflt \
    }
#define BOOL(n, field, d)                                                                          \
    {                                                                                              \
        .name = n, .type = VG_FLAG_BOOL, .target = &cli.field, .doc = d                            \
    }

static const struct vg_flag flags[] = {
    STR("listen", "ADDR:PORT", listen,
        "extender address; any other than loopback needs --tls-cert, --tls-key and "
        "--client-ca or --token-file",
        "127.0.0.1:8888"),
    STR("kubeconfig", "FILE", kubeconfig, "API credentials", "in-cluster"),
    STR("config", "FILE", config,
        "JSON defaults: policy, gpuPolicy, assumeTTLSeconds, heartbeatTimeoutSeconds, "
        "defaultMemory, defaultCores, defaultGPUNum, schedulerName, maxAssumptionsPerNamespace, "
        "webhookDRA, overwriteEnv, webhookTrustedUsers",
        NULL),
    {.name = "policy",
     .value = "NAME",
     .type = VG_FLAG_FUNC,
     .target = &cli.policy,
     .fn = parse_policy,
     .doc = "node policy: binpack, spread, default (vgpu's), fgd, bestfit, ...",
     .def = "binpack"},
    {.name = "gpu-policy",
     .value = "NAME",
     .type = VG_FLAG_ENUM,
     .target = &cli.gpu_policy,
     .choices = gpu_policies,
     .doc = "GPU order inside a node: spread or binpack",
     .def = "spread"},
    U64("assume-ttl", "SECONDS", ttl, 1, 3600, "a filter promise lasts this long without bind",
        "30"),
    U64("heartbeat-timeout", "SECS", heartbeat, 0, 86400 * 365,
        "ignore inventories older than this (0: never)", "0"),
    STR("scheduler-name", "NAME", scheduler_name, "schedulerName the webhook sets",
        "vgpu-scheduler"),
    U64("max-assumptions-per-namespace", "N", max_assumed, 0, 1000000,
        "filter promises a namespace may hold unbound (0: no bound)", "256"),
    STR("webhook-listen", "ADDR:PORT", webhook_listen, "HTTPS admission webhook address", "off"),
    BOOL("webhook-dra", webhook_dra,
         "the webhook turns HAMi's GPU resources into DRA ResourceClaims of vgpu's classes "
         "(docs/dra.md)"),
    STR("tls-cert", "FILE", tls_cert,
        "the server certificate (PEM), with --tls-key: the webhook's, and the extender's with "
        "--client-ca or --token-file",
        NULL),
    STR("tls-key", "FILE", tls_key, "the server certificate's key (PEM)", NULL),
    STR("client-ca", "FILE", client_ca,
        "extender over TLS; clients must present a certificate signed by a CA in FILE (PEM)", NULL),
    STR("token-file", "FILE", token_file,
        "extender over TLS; clients must send \"Authorization: Bearer <token>\", the token in "
        "FILE",
        NULL),
    STR("webhook-client-ca", "FILE", webhook_client_ca,
        "the webhook answers only clients with a certificate signed by a CA in FILE "
        "(kube-apiserver's; needed by --webhook-dra)",
        NULL),
    STR("webhook-trusted-users", "LIST", trusted_users,
        "users (comma-separated) whose pod UPDATEs may change vgpu.io/ annotations (vgpu's "
        "service accounts)",
        NULL),
    BOOL("no-overwrite-env", no_overwrite_env,
         "leave NVIDIA_VISIBLE_DEVICES of containers without GPUs as the pod says (default: set "
         "it to void)"),
    STR("record-namespace", "NS", record_namespace, "namespace of the decision records",
        "$POD_NAMESPACE, else vgpu-system"),
    DRA("dra-max-templates-per-namespace", 0, "vgpu's templates per namespace (0: none)", "64"),
    DRA("dra-max-templates", 1, "vgpu's templates in the cluster (0: no bound)", "4096"),
    DRA("dra-template-sweep", 2, "collect unused templates this often, seconds (0: never)", "300"),
    DRA("dra-template-grace", 3, "a template used this recently (seconds) stays", "300"),
    BOOL("debug-state", debug_state, "serve /debug/state and /debug/state-bound"),
    BOOL("hami-legacy-metrics", hami_legacy,
         "/metrics adds HAMi's older names (GPUDeviceMemoryLimit...)"),
    STR("port-file", "FILE", port_file,
        "write the extender's port here once every listener is bound", NULL),
    STR("webhook-port-file", "FILE", webhook_port_file,
        "write the webhook's port here once every listener is bound", NULL),
    {.name = "log-level",
     .value = "LEVEL",
     .type = VG_FLAG_FUNC,
     .target = &vg_log_max_level,
     .fn = parse_log_level,
     .doc = "error, warn, info or debug",
     .def = "info"},
    BOOL("check-config", check_config,
         "check the flags and --config, print the effective settings and exit (0: valid, 2: "
         "not); no side effects"),
    {.name = "help", .type = VG_FLAG_HELP, .target = &cli.help, .doc = "print this text"},
};

/* ADDR:PORT as the daemon reads it ("[::1]:8888", ":9443"): 0, or -1 with a message. */
static int check_addr(const char *flag, const char *text, bool *loopback)
{
    const char *colon = strrchr(text, ':');
    struct vg_err err = {0};
    uint64_t port;
    if (colon == NULL || vg_parse_u64(colon + 1, 0, 65535, &port, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: %s: '%s' is not ADDR:PORT\n", flag, text);
        return -1;
    }
    size_t hl = (size_t)(colon - text);
    *loopback = (hl >= 4 && strncmp(text, "127.", 4) == 0) ||
                (hl == 9 && strncmp(text, "localhost", 9) == 0) ||
                (hl == 5 && strncmp(text, "[::1]", 5) == 0);
    return 0;
}

/* --check-config: the settings the daemon would start with, one per line. */
static void print_settings(const struct sched_options *o, const struct sched_daemon_options *d,
                           const char *kubeconfig)
{
    printf("listen=%s\nwebhook-listen=%s\nkubeconfig=%s\npolicy=%s\ngpu-policy=%s\n"
           "assume-ttl=%llu\nheartbeat-timeout=%lld\nscheduler-name=%s\n"
           "max-assumptions-per-namespace=%u\ntls-cert=%s\ntls-key=%s\nclient-ca=%s\n"
           "token-file=%s\ndebug-state=%s\nwebhook-dra=%s\nwebhook-client-ca=%s\n"
           "webhook-trusted-users=%s\noverwrite-env=%s\nrecord-namespace=%s\n"
           "dra-max-templates-per-namespace=%u\ndra-max-templates=%u\n"
           "dra-template-sweep=%u\ndra-template-grace=%u\nOK\n",
           d->listen, d->webhook_listen ? d->webhook_listen : "",
           kubeconfig ? kubeconfig : "(in-cluster)", place_policy_name(o->policy),
           o->gpu_order == PLACE_GPU_BINPACK ? "binpack" : "spread",
           (unsigned long long)(o->assume_ttl_ms / 1000u), (long long)o->heartbeat_timeout_s,
           o->scheduler_name, o->max_assumed_per_namespace, d->tls_cert ? d->tls_cert : "",
           d->tls_key ? d->tls_key : "", d->client_ca ? d->client_ca : "",
           d->token_file ? d->token_file : "", d->debug_state ? "true" : "false",
           o->webhook_dra ? "true" : "false", d->webhook_client_ca ? d->webhook_client_ca : "",
           o->webhook_trusted_users, o->overwrite_env ? "true" : "false", d->record_namespace,
           d->dra->max_per_namespace, d->dra->max_total, d->dra->sweep_s, d->dra->grace_s);
}

/* The options the daemon runs with: --config's, then the flags over them. */
static int build_options(struct sched_options *o, char **name_store,
                         struct sched_dra_template_options *dra, struct vg_err *err)
{
    sched_options_default(o);
    if (cli.config != NULL && sched_options_load_file(cli.config, o, name_store, err) < 0)
        return err->code;
    if (cli.policy >= 0)
        o->policy = (enum place_policy)cli.policy;
    if (cli.gpu_policy >= 0)
        o->gpu_order = cli.gpu_policy == 0 ? PLACE_GPU_BINPACK : PLACE_GPU_SPREAD;
    if (cli.ttl_given)
        o->assume_ttl_ms = cli.ttl * 1000u;
    if (cli.heartbeat_given)
        o->heartbeat_timeout_s = (int64_t)cli.heartbeat;
    if (cli.scheduler_name != NULL)
        o->scheduler_name = cli.scheduler_name;
    if (cli.webhook_dra)
        o->webhook_dra = true;
    if (cli.max_assumed_given)
        o->max_assumed_per_namespace = (uint32_t)cli.max_assumed;
    if (cli.no_overwrite_env)
        o->overwrite_env = false;
    if (cli.trusted_users != NULL && sched_options_trusted_users(o, cli.trusted_users, err) < 0)
        return vg_err_wrap(err, "--webhook-trusted-users");
    if (cli.record_namespace == NULL || cli.record_namespace[0] == '\0')
        cli.record_namespace = SCHED_RECORD_NAMESPACE_DEFAULT;
    sched_dra_template_options_default(dra);
    uint32_t *dra_values[4] = {&dra->max_per_namespace, &dra->max_total, &dra->sweep_s,
                               &dra->grace_s};
    for (int k = 0; k < 4; k++)
        if (cli.dra_given[k])
            *dra_values[k] = (uint32_t)cli.dra[k];
    return 0;
}

/* Flags that only make sense together; the message names what is missing. */
static int check_combinations(const struct sched_options *o, struct vg_err *err)
{
    if (o->webhook_dra && cli.webhook_client_ca == NULL)
        return vg_err_set(err, -EINVAL,
                          "--webhook-dra creates objects with vgpu-scheduler's credentials: it "
                          "needs --webhook-client-ca, so that only kube-apiserver's reviews are "
                          "acted on");
    if ((cli.client_ca != NULL || cli.token_file != NULL) &&
        (cli.tls_cert == NULL || cli.tls_key == NULL))
        return vg_err_set(err, -EINVAL,
                          "--client-ca and --token-file serve the extender over TLS: they need "
                          "--tls-cert and --tls-key");
    if (cli.webhook_listen != NULL && (cli.tls_cert == NULL || cli.tls_key == NULL))
        return vg_err_set(err, -EINVAL, "--webhook-listen needs --tls-cert and --tls-key");
    if (cli.webhook_port_file != NULL && cli.webhook_listen == NULL)
        return vg_err_set(err, -EINVAL, "--webhook-port-file needs --webhook-listen");
    return 0;
}

/* --check-config: what serve() would refuse at start, then the settings; the exit code. */
static int check_config(const struct sched_options *o, const struct sched_daemon_options *dopt)
{
    bool loopback = false, webhook_loopback = false;
    if (check_addr("--listen", cli.listen, &loopback) < 0 ||
        (cli.webhook_listen != NULL &&
         check_addr("--webhook-listen", cli.webhook_listen, &webhook_loopback) < 0))
        return 2;
    if (!loopback && (cli.tls_cert == NULL || (cli.client_ca == NULL && cli.token_file == NULL))) {
        fprintf(stderr,
                "vgpu-scheduler: --listen %s is not loopback: it needs --tls-cert, "
                "--tls-key and --client-ca or --token-file\n",
                cli.listen);
        return 2;
    }
    print_settings(o, dopt, cli.kubeconfig);
    return 0;
}

int main(int argc, char **argv)
{
    struct vg_err err = {0};
    size_t npos;
    cli.record_namespace = getenv("POD_NAMESPACE");
    int rc = vg_flags_parse(flags, VG_FLAGS_COUNT(flags), argc, argv, NULL, 0, &npos, &err);
    if (rc == 1) {
        vg_flags_help(stdout,
                      "usage: vgpu-scheduler [--listen ADDR:PORT] [--kubeconfig FILE] [options]",
                      flags, VG_FLAGS_COUNT(flags));
        return 0;
    }
    struct sched_options o;
    struct sched_dra_template_options dra;
    VG_AUTO_FREE char *name_store = NULL;
    if (rc < 0 || build_options(&o, &name_store, &dra, &err) < 0 ||
        check_combinations(&o, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: %s\n", err.msg);
        return 2;
    }
    const struct sched_daemon_options dopt = {.listen = cli.listen,
                                              .port_file = cli.port_file,
                                              .webhook_port_file = cli.webhook_port_file,
                                              .webhook_listen = cli.webhook_listen,
                                              .tls_cert = cli.tls_cert,
                                              .tls_key = cli.tls_key,
                                              .client_ca = cli.client_ca,
                                              .token_file = cli.token_file,
                                              .webhook_client_ca = cli.webhook_client_ca,
                                              .record_namespace = cli.record_namespace,
                                              .dra = &dra,
                                              .debug_state = cli.debug_state,
                                              .hami_legacy_metrics = cli.hami_legacy};
    if (cli.check_config)
        return check_config(&o, &dopt);
    signal(SIGPIPE, SIG_IGN);
    if (serve(cli.kubeconfig, &o, &dopt, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: %s\n", err.msg);
        return 1;
    }
    return 0;
}
