/* vgpu-scheduler: the kube-scheduler extender and admission webhook.
 *
 * main() parses flags and the --config file, loads the API credentials and wires the
 * modules: the daemon (src/scheduler/daemon.h) on one libevent loop with the Kubernetes
 * API client (src/kube), until SIGINT or SIGTERM. docs/scheduler.md lists every flag. */
#include <errno.h>
#include <event2/event.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
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

/* ---- main --------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: vgpu-scheduler [--listen ADDR:PORT] [--kubeconfig FILE] [options]\n"
        "  --listen ADDR:PORT         extender address (default 127.0.0.1:8888); any other\n"
        "                             than loopback needs --tls-cert, --tls-key and\n"
        "                             --client-ca or --token-file\n"
        "  --kubeconfig FILE          API credentials (default: in-cluster)\n"
        "  --config FILE              JSON defaults: policy, gpuPolicy, assumeTTLSeconds,\n"
        "                             heartbeatTimeoutSeconds, defaultMemory, defaultCores,\n"
        "                             defaultGPUNum, schedulerName, maxAssumptionsPerNamespace,\n"
        "                             webhookDRA, overwriteEnv, webhookTrustedUsers\n"
        "  --policy NAME              node policy: binpack (default), spread, default (vgpu's),\n"
        "                             fgd, bestfit, ...\n"
        "  --gpu-policy NAME          GPU order inside a node: spread (default), binpack\n"
        "  --assume-ttl SECONDS       a filter promise lasts this long without bind (30)\n"
        "  --heartbeat-timeout SECS   ignore inventories older than this (0: never)\n"
        "  --scheduler-name NAME      schedulerName the webhook sets (vgpu-scheduler)\n"
        "  --max-assumptions-per-namespace N\n"
        "                             filter promises a namespace may hold unbound (256;\n"
        "                             0: no bound)\n"
        "  --webhook-listen ADDR:PORT HTTPS admission webhook address (off by default)\n"
        "  --webhook-dra              the webhook turns HAMi's GPU resources into DRA\n"
        "                             ResourceClaims of vgpu's classes (docs/dra.md)\n"
        "  --tls-cert FILE --tls-key FILE   the server certificate and key (PEM): the\n"
        "                             webhook's, and the extender's with the next two\n"
        "  --client-ca FILE           extender over TLS; clients must present a certificate\n"
        "                             signed by a CA in FILE (PEM)\n"
        "  --token-file FILE          extender over TLS; clients must send\n"
        "                             \"Authorization: Bearer <token>\", the token in FILE\n"
        "  --webhook-client-ca FILE   the webhook answers only clients with a certificate\n"
        "                             signed by a CA in FILE (kube-apiserver's; needed by\n"
        "                             --webhook-dra)\n"
        "  --webhook-trusted-users LIST  users (comma-separated) whose pod UPDATEs may change\n"
        "                             vgpu.io/ annotations (vgpu's service accounts)\n"
        "  --no-overwrite-env         leave NVIDIA_VISIBLE_DEVICES of containers without GPUs\n"
        "                             as the pod says (default: set it to void)\n"
        "  --record-namespace NS      namespace of the decision records (vgpu-system)\n"
        "  --dra-max-templates-per-namespace N  vgpu's templates per namespace (64; 0: none)\n"
        "  --dra-max-templates N      vgpu's templates in the cluster (4096; 0: no bound)\n"
        "  --dra-template-sweep SECS  collect unused templates this often (300; 0: never)\n"
        "  --dra-template-grace SECS  a template used this recently stays (300)\n"
        "  --debug-state              serve /debug/state and /debug/state-bound\n"
        "  --hami-legacy-metrics      /metrics adds HAMi's older names (GPUDeviceMemoryLimit...)\n"
        "  --port-file FILE           write the extender's port here once listening\n"
        "  --log-level LEVEL          error, warn, info (default), debug\n"
        "  --check-config             check the flags and --config, print the effective\n"
        "                             settings and exit (0: valid, 2: not); no side effects\n");
}

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

int main(int argc, char **argv)
{
    const char *listen = "127.0.0.1:8888", *kubeconfig = NULL, *config = NULL, *port_file = NULL;
    const char *webhook_listen = NULL, *tls_cert = NULL, *tls_key = NULL;
    const char *policy = NULL, *gpu_policy = NULL, *ttl = NULL, *heartbeat = NULL;
    const char *scheduler_name = NULL, *client_ca = NULL, *token_file = NULL;
    const char *max_assumed = NULL, *webhook_client_ca = NULL, *trusted_users = NULL;
    const char *record_namespace = getenv("POD_NAMESPACE");
    const char *dra_flags[4] = {NULL, NULL, NULL, NULL};
    bool no_overwrite_env = false;
    bool debug_state = false, check_config = false;
    bool hami_legacy = false, webhook_dra = false;
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"kubeconfig", required_argument, NULL, 'k'},
        {"config", required_argument, NULL, 'c'},
        {"policy", required_argument, NULL, 'p'},
        {"gpu-policy", required_argument, NULL, 'g'},
        {"assume-ttl", required_argument, NULL, 't'},
        {"heartbeat-timeout", required_argument, NULL, 'H'},
        {"scheduler-name", required_argument, NULL, 'n'},
        {"webhook-listen", required_argument, NULL, 'w'},
        {"webhook-dra", no_argument, NULL, 'R'},
        {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'},
        {"port-file", required_argument, NULL, 'P'},
        {"client-ca", required_argument, NULL, 'A'},
        {"token-file", required_argument, NULL, 'T'},
        {"debug-state", no_argument, NULL, 'D'},
        {"hami-legacy-metrics", no_argument, NULL, 'Y'},
        {"max-assumptions-per-namespace", required_argument, NULL, 'M'},
        {"log-level", required_argument, NULL, 'L'},
        {"check-config", no_argument, NULL, 'X'},
        {"webhook-client-ca", required_argument, NULL, 256},
        {"webhook-trusted-users", required_argument, NULL, 257},
        {"no-overwrite-env", no_argument, NULL, 258},
        {"record-namespace", required_argument, NULL, 259},
        {"dra-max-templates-per-namespace", required_argument, NULL, 260},
        {"dra-max-templates", required_argument, NULL, 261},
        {"dra-template-sweep", required_argument, NULL, 262},
        {"dra-template-grace", required_argument, NULL, 263},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            listen = optarg;
            break;
        case 'k':
            kubeconfig = optarg;
            break;
        case 'c':
            config = optarg;
            break;
        case 'p':
            policy = optarg;
            break;
        case 'g':
            gpu_policy = optarg;
            break;
        case 't':
            ttl = optarg;
            break;
        case 'H':
            heartbeat = optarg;
            break;
        case 'n':
            scheduler_name = optarg;
            break;
        case 'w':
            webhook_listen = optarg;
            break;
        case 'R':
            webhook_dra = true;
            break;
        case 'C':
            tls_cert = optarg;
            break;
        case 'K':
            tls_key = optarg;
            break;
        case 'P':
            port_file = optarg;
            break;
        case 'A':
            client_ca = optarg;
            break;
        case 'T':
            token_file = optarg;
            break;
        case 'Y':
            hami_legacy = true;
            break;
        case 'D':
            debug_state = true;
            break;
        case 'M':
            max_assumed = optarg;
            break;
        case 'L': {
            int level = vg_log_level_from_name(optarg);
            if (level < 0) {
                fprintf(stderr, "vgpu-scheduler: --log-level: unknown level '%s'\n", optarg);
                return 2;
            }
            vg_log_max_level = level;
            break;
        }
        case 'X':
            check_config = true;
            break;
        case 256:
            webhook_client_ca = optarg;
            break;
        case 257:
            trusted_users = optarg;
            break;
        case 258:
            no_overwrite_env = true;
            break;
        case 259:
            record_namespace = optarg;
            break;
        case 260:
        case 261:
        case 262:
        case 263:
            dra_flags[opt - 260] = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "vgpu-scheduler: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    struct vg_err err = {0};
    struct sched_options o;
    sched_options_default(&o);
    VG_AUTO_FREE char *name_store = NULL;
    if (config != NULL && sched_options_load_file(config, &o, &name_store, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: %s\n", err.msg);
        return 2;
    }
    if (policy != NULL) {
        int p = place_policy_from_name(policy);
        if (p < 0) {
            fprintf(stderr, "vgpu-scheduler: --policy: unsupported policy '%s'\n", policy);
            return 2;
        }
        o.policy = (enum place_policy)p;
    }
    if (gpu_policy != NULL) {
        if (strcmp(gpu_policy, "binpack") == 0)
            o.gpu_order = PLACE_GPU_BINPACK;
        else if (strcmp(gpu_policy, "spread") == 0)
            o.gpu_order = PLACE_GPU_SPREAD;
        else {
            fprintf(stderr, "vgpu-scheduler: --gpu-policy: '%s' is not binpack or spread\n",
                    gpu_policy);
            return 2;
        }
    }
    uint64_t n;
    if (ttl != NULL) {
        if (vg_parse_u64(ttl, 1, 3600, &n, &err) < 0) {
            fprintf(stderr, "vgpu-scheduler: --assume-ttl: %s\n", err.msg);
            return 2;
        }
        o.assume_ttl_ms = n * 1000u;
    }
    if (heartbeat != NULL) {
        if (vg_parse_u64(heartbeat, 0, 86400 * 365, &n, &err) < 0) {
            fprintf(stderr, "vgpu-scheduler: --heartbeat-timeout: %s\n", err.msg);
            return 2;
        }
        o.heartbeat_timeout_s = (int64_t)n;
    }
    if (scheduler_name != NULL)
        o.scheduler_name = scheduler_name;
    if (webhook_dra)
        o.webhook_dra = true;
    if (max_assumed != NULL) {
        if (vg_parse_u64(max_assumed, 0, 1000000, &n, &err) < 0) {
            fprintf(stderr, "vgpu-scheduler: --max-assumptions-per-namespace: %s\n", err.msg);
            return 2;
        }
        o.max_assumed_per_namespace = (uint32_t)n;
    }
    if (no_overwrite_env)
        o.overwrite_env = false;
    if (trusted_users != NULL && sched_options_trusted_users(&o, trusted_users, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: --webhook-trusted-users: %s\n", err.msg);
        return 2;
    }
    if (record_namespace == NULL || record_namespace[0] == '\0')
        record_namespace = SCHED_RECORD_NAMESPACE_DEFAULT;
    struct sched_dra_template_options dra;
    sched_dra_template_options_default(&dra);
    static const char *const dra_names[4] = {"--dra-max-templates-per-namespace",
                                             "--dra-max-templates", "--dra-template-sweep",
                                             "--dra-template-grace"};
    uint32_t *dra_values[4] = {&dra.max_per_namespace, &dra.max_total, &dra.sweep_s, &dra.grace_s};
    for (int k = 0; k < 4; k++) {
        if (dra_flags[k] == NULL)
            continue;
        if (vg_parse_u64(dra_flags[k], 0, 1000000, &n, &err) < 0) {
            fprintf(stderr, "vgpu-scheduler: %s: %s\n", dra_names[k], err.msg);
            return 2;
        }
        *dra_values[k] = (uint32_t)n;
    }
    if (o.webhook_dra && webhook_client_ca == NULL) {
        fprintf(stderr, "vgpu-scheduler: --webhook-dra creates objects with vgpu-scheduler's "
                        "credentials: it needs --webhook-client-ca, so that only "
                        "kube-apiserver's reviews are acted on\n");
        return 2;
    }
    if ((client_ca != NULL || token_file != NULL) && (tls_cert == NULL || tls_key == NULL)) {
        fprintf(stderr, "vgpu-scheduler: --client-ca and --token-file serve the extender over "
                        "TLS: they need --tls-cert and --tls-key\n");
        return 2;
    }
    if (webhook_listen != NULL && (tls_cert == NULL || tls_key == NULL)) {
        fprintf(stderr, "vgpu-scheduler: --webhook-listen needs --tls-cert and --tls-key\n");
        return 2;
    }

    const struct sched_daemon_options dopt = {.listen = listen,
                                              .port_file = port_file,
                                              .webhook_listen = webhook_listen,
                                              .tls_cert = tls_cert,
                                              .tls_key = tls_key,
                                              .client_ca = client_ca,
                                              .token_file = token_file,
                                              .webhook_client_ca = webhook_client_ca,
                                              .record_namespace = record_namespace,
                                              .dra = &dra,
                                              .debug_state = debug_state,
                                              .hami_legacy_metrics = hami_legacy};
    if (check_config) {
        bool loopback = false, webhook_loopback = false;
        if (check_addr("--listen", listen, &loopback) < 0 ||
            (webhook_listen != NULL &&
             check_addr("--webhook-listen", webhook_listen, &webhook_loopback) < 0))
            return 2;
        if (!loopback && (tls_cert == NULL || (client_ca == NULL && token_file == NULL))) {
            fprintf(stderr,
                    "vgpu-scheduler: --listen %s is not loopback: it needs --tls-cert, "
                    "--tls-key and --client-ca or --token-file\n",
                    listen);
            return 2;
        }
        print_settings(&o, &dopt, kubeconfig);
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    if (serve(kubeconfig, &o, &dopt, &err) < 0) {
        fprintf(stderr, "vgpu-scheduler: %s\n", err.msg);
        return 1;
    }
    return 0;
}
