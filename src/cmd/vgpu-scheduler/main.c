/* vgpu-scheduler: the kube-scheduler extender and admission webhook.
 *
 * One libevent loop drives everything: the extender's HTTP server (evhttp), the optional
 * HTTPS webhook server, the Kubernetes API client (libcurl multi, src/kube) with its node
 * and pod watches, and a one-second timer that expires assumptions. Decisions live in
 * src/scheduler; this file parses flags, wires modules and moves bytes. docs/scheduler.md
 * lists every flag and metric. */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <getopt.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "annot/annot.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "kube/kube.h"
#include "scheduler/sched.h"

/* ---- metrics ------------------------------------------------------------------------ */

#define HIST_BUCKETS 12
static const double hist_bounds[HIST_BUCKETS] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                 0.01,   0.025,   0.05,   0.1,   0.5,    1.0};

struct histogram {
    uint64_t counts[HIST_BUCKETS + 1];
    uint64_t count;
    double sum;
};

static void hist_observe(struct histogram *h, double seconds)
{
    int i = 0;
    while (i < HIST_BUCKETS && seconds > hist_bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += seconds;
}

enum verb { VERB_FILTER, VERB_PRIORITIZE, VERB_BIND, VERB_WEBHOOK, VERB_COUNT };
static const char *const verb_names[VERB_COUNT] = {"filter", "prioritize", "bind", "webhook"};

struct daemon {
    struct event_base *base;
    struct sched_state *state;
    struct kube_client *client;
    struct kube_watch *nodes, *pods;
    struct evhttp *http, *https;
    SSL_CTX *ssl;
    struct histogram latency[VERB_COUNT];
    uint64_t http_errors[VERB_COUNT]; /* 4xx answers */
    uint64_t api_errors;
    uint64_t bind_inflight;
};

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sched_now now(void)
{
    return (struct sched_now){.mono_ms = mono_ms(), .unix_s = (int64_t)time(NULL)};
}

static void render_metrics(struct daemon *d, struct evbuffer *b)
{
    struct sched_stats st;
    sched_state_stats(d->state, &st);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_nodes Nodes known, and nodes with a valid GPU "
                           "inventory.\n# TYPE vgpu_scheduler_nodes gauge\n");
    evbuffer_add_printf(b, "vgpu_scheduler_nodes{inventory=\"any\"} %llu\n",
                        (unsigned long long)st.nodes);
    evbuffer_add_printf(b, "vgpu_scheduler_nodes{inventory=\"valid\"} %llu\n",
                        (unsigned long long)st.nodes_with_inventory);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_pods Pods holding GPU shares, by state.\n"
                           "# TYPE vgpu_scheduler_pods gauge\n");
    evbuffer_add_printf(b, "vgpu_scheduler_pods{state=\"assumed\"} %llu\n",
                        (unsigned long long)st.assumed);
    evbuffer_add_printf(b, "vgpu_scheduler_pods{state=\"bound\"} %llu\n",
                        (unsigned long long)st.bound);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_decisions_total Filter outcomes.\n"
                           "# TYPE vgpu_scheduler_decisions_total counter\n");
    evbuffer_add_printf(b, "vgpu_scheduler_decisions_total{result=\"fit\"} %llu\n",
                        (unsigned long long)st.filter_fits);
    evbuffer_add_printf(b, "vgpu_scheduler_decisions_total{result=\"unschedulable\"} %llu\n",
                        (unsigned long long)st.filter_unschedulable);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_binds_total Bind calls, by result.\n"
                           "# TYPE vgpu_scheduler_binds_total counter\n");
    evbuffer_add_printf(
        b, "vgpu_scheduler_binds_total{result=\"ok\"} %llu\n",
        (unsigned long long)(st.binds > st.bind_failures ? st.binds - st.bind_failures : 0));
    evbuffer_add_printf(b, "vgpu_scheduler_binds_total{result=\"error\"} %llu\n",
                        (unsigned long long)st.bind_failures);
    evbuffer_add_printf(b,
                        "# HELP vgpu_scheduler_assumptions_expired_total Filter promises "
                        "dropped because no bind came.\n# TYPE "
                        "vgpu_scheduler_assumptions_expired_total counter\n"
                        "vgpu_scheduler_assumptions_expired_total %llu\n",
                        (unsigned long long)st.expired);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_errors_total Errors by kind.\n"
                           "# TYPE vgpu_scheduler_errors_total counter\n");
    evbuffer_add_printf(b, "vgpu_scheduler_errors_total{kind=\"bad_request\"} %llu\n",
                        (unsigned long long)st.bad_requests);
    evbuffer_add_printf(b, "vgpu_scheduler_errors_total{kind=\"skipped_node\"} %llu\n",
                        (unsigned long long)st.skipped_nodes);
    evbuffer_add_printf(b, "vgpu_scheduler_errors_total{kind=\"skipped_pod\"} %llu\n",
                        (unsigned long long)st.skipped_pods);
    evbuffer_add_printf(b, "vgpu_scheduler_errors_total{kind=\"conflict\"} %llu\n",
                        (unsigned long long)st.conflicts);
    evbuffer_add_printf(b, "vgpu_scheduler_errors_total{kind=\"api\"} %llu\n",
                        (unsigned long long)d->api_errors);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_request_duration_seconds Time to answer an "
                           "extender or webhook call.\n# TYPE "
                           "vgpu_scheduler_request_duration_seconds histogram\n");
    for (int v = 0; v < VERB_COUNT; v++) {
        const struct histogram *h = &d->latency[v];
        uint64_t cum = 0;
        for (int i = 0; i < HIST_BUCKETS; i++) {
            cum += h->counts[i];
            evbuffer_add_printf(b,
                                "vgpu_scheduler_request_duration_seconds_bucket{verb=\"%s\","
                                "le=\"%g\"} %llu\n",
                                verb_names[v], hist_bounds[i], (unsigned long long)cum);
        }
        evbuffer_add_printf(b,
                            "vgpu_scheduler_request_duration_seconds_bucket{verb=\"%s\",le=\"+"
                            "Inf\"} %llu\n",
                            verb_names[v], (unsigned long long)h->count);
        evbuffer_add_printf(b, "vgpu_scheduler_request_duration_seconds_sum{verb=\"%s\"} %.9f\n",
                            verb_names[v], h->sum);
        evbuffer_add_printf(b, "vgpu_scheduler_request_duration_seconds_count{verb=\"%s\"} %llu\n",
                            verb_names[v], (unsigned long long)h->count);
    }
    const struct place_cluster *c = sched_state_cluster(d->state);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_gpu_memory_used_mib GPU memory handed out.\n"
                           "# TYPE vgpu_scheduler_gpu_memory_used_mib gauge\n");
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++)
            evbuffer_add_printf(b,
                                "vgpu_scheduler_gpu_memory_used_mib{node=\"%s\",uuid=\"%s\"} "
                                "%llu\n",
                                c->nodes[i].name, c->nodes[i].gpus[g].uuid,
                                (unsigned long long)c->nodes[i].gpus[g].mem_used_mib);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_gpu_cores_used_percent GPU compute handed out "
                           "(plus any the inventory withholds).\n# TYPE "
                           "vgpu_scheduler_gpu_cores_used_percent gauge\n");
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++)
            evbuffer_add_printf(b,
                                "vgpu_scheduler_gpu_cores_used_percent{node=\"%s\",uuid=\"%s\"} "
                                "%u\n",
                                c->nodes[i].name, c->nodes[i].gpus[g].uuid,
                                c->nodes[i].gpus[g].milli_used / 10);
    evbuffer_add_printf(b, "# HELP vgpu_scheduler_gpu_tenants Containers placed on each GPU.\n"
                           "# TYPE vgpu_scheduler_gpu_tenants gauge\n");
    for (size_t i = 0; i < c->node_count; i++)
        for (unsigned g = 0; g < c->nodes[i].gpu_count; g++)
            evbuffer_add_printf(b, "vgpu_scheduler_gpu_tenants{node=\"%s\",uuid=\"%s\"} %u\n",
                                c->nodes[i].name, c->nodes[i].gpus[g].uuid,
                                c->nodes[i].gpus[g].tenants);
}

/* ---- HTTP --------------------------------------------------------------------------- */

static void reply(struct evhttp_request *req, int code, const char *reason, const char *ctype,
                  const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if (text != NULL)
        evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

static void reply_error(struct daemon *d, enum verb v, struct evhttp_request *req,
                        const struct vg_err *err)
{
    d->http_errors[v]++;
    json_t *body = json_pack("{s:s}", "Error", err->msg);
    char *text = json_dumps(body, JSON_COMPACT);
    int code = err->code == -EMSGSIZE ? 413 : 400;
    reply(req, code, code == 413 ? "Payload Too Large" : "Bad Request", "application/json", text);
    free(text);
    json_decref(body);
}

struct bind_call {
    struct daemon *d;
    struct evhttp_request *req;
    struct sched_bind b;
    double t0;
};

static void bind_reply(struct bind_call *bc, const char *error, enum sched_bind_outcome outcome)
{
    json_t *body = json_pack("{s:s}", "Error", error != NULL ? error : "");
    char *text = json_dumps(body, JSON_COMPACT);
    reply(bc->req, 200, "OK", "application/json", text);
    free(text);
    json_decref(body);
    sched_bind_finish(bc->d->state, &bc->b, outcome, now());
    hist_observe(&bc->d->latency[VERB_BIND], mono_s() - bc->t0);
    bc->d->bind_inflight--;
    sched_bind_release(&bc->b);
    free(bc);
}

/* The answer to the one pods/binding call. A 409 is a precondition that failed (the pod
 * changed or was recreated since filter) or a pod already bound: nothing was written. */
static void bound(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)body;
    struct bind_call *bc = arg;
    if (err->code < 0) {
        char msg[VG_ERR_MSG_MAX + 128];
        enum sched_bind_outcome outcome =
            status == 0 || status >= 500 ? SCHED_BIND_UNKNOWN : SCHED_BIND_REFUSED;
        bc->d->api_errors++;
        if (err->code == -EEXIST)
            (void)vg_snprintf(msg, sizeof msg,
                              "vgpu: binding the pod failed: the pod changed since it was "
                              "filtered, or is bound already (conflict: %s); scheduling will "
                              "be retried",
                              err->msg);
        else
            (void)vg_snprintf(msg, sizeof msg, "vgpu: binding the pod failed: %s", err->msg);
        vg_log(VG_LOG_WARN, "bind failed", "pod=%s/%s status=%ld err=\"%s\"", bc->b.ns, bc->b.name,
               status, err->msg);
        bind_reply(bc, msg, outcome);
        return;
    }
    vg_log(VG_LOG_DEBUG, "bound", "pod=%s/%s node=%s", bc->b.ns, bc->b.name, bc->b.node);
    bind_reply(bc, NULL, SCHED_BIND_OK);
}

static void handle_bind(struct daemon *d, struct evhttp_request *req, const char *body, size_t len,
                        double t0)
{
    struct bind_call *bc = xcalloc(1, sizeof *bc);
    bc->d = d;
    bc->req = req;
    bc->t0 = t0;
    struct vg_err err = {0};
    int rc = sched_bind_prepare(d->state, body, len, now(), &bc->b, &err);
    if (rc == -EBADMSG || rc == -EMSGSIZE) {
        reply_error(d, VERB_BIND, req, &err);
        free(bc);
        return;
    }
    if (rc < 0) {
        json_t *out = json_pack("{s:s}", "Error", err.msg);
        char *text = json_dumps(out, JSON_COMPACT);
        reply(req, 200, "OK", "application/json", text);
        free(text);
        json_decref(out);
        free(bc);
        return;
    }
    d->bind_inflight++;
    /* One write: spec.nodeName and the decision annotation together, on the pod filter
     * saw (uid and resourceVersion preconditions). */
    json_t *annotations = NULL;
    if (bc->b.decision != NULL)
        annotations = json_pack("{s:s}", ANNOT_KEY_DECISION, bc->b.decision);
    const struct kube_binding binding = {.ns = bc->b.ns,
                                         .name = bc->b.name,
                                         .node = bc->b.node,
                                         .uid = bc->b.uid,
                                         .resource_version = bc->b.resource_version,
                                         .annotations = annotations};
    rc = kube_bind_pod_with(d->client, &binding, bound, bc, &err);
    json_decref(annotations);
    if (rc < 0)
        bind_reply(bc, err.msg, SCHED_BIND_REFUSED);
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct daemon *d = arg;
    double t0 = mono_s();
    const char *uri = evhttp_request_get_uri(req);
    struct evhttp_uri *parsed = evhttp_uri_parse(uri);
    const char *path = parsed != NULL ? evhttp_uri_get_path(parsed) : NULL;
    char p[64] = "";
    if (path != NULL)
        (void)vg_strlcpy(p, path, sizeof p);
    evhttp_uri_free(parsed);
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (strcmp(p, "/healthz") == 0) {
        reply(req, 200, "OK", "text/plain", "ok\n");
        return;
    }
    if (strcmp(p, "/readyz") == 0) {
        bool ready = kube_watch_synced(d->nodes) && kube_watch_synced(d->pods);
        reply(req, ready ? 200 : 503, ready ? "OK" : "Service Unavailable", "text/plain",
              ready ? "ok\n" : "waiting for the first node and pod lists\n");
        return;
    }
    if (strcmp(p, "/metrics") == 0) {
        struct evbuffer *b = evbuffer_new();
        render_metrics(d, b);
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/plain; version=0.0.4");
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
        return;
    }
    if (strcmp(p, "/debug/state") == 0 || strcmp(p, "/debug/state-bound") == 0) {
        char *text = sched_dump(d->state, strcmp(p, "/debug/state-bound") == 0);
        struct vg_err err = {0};
        int inv = sched_check_invariants(d->state, &err);
        json_t *root = json_loads(text, 0, NULL);
        json_object_set_new(root, "invariants", json_string(inv == 0 ? "ok" : err.msg));
        char *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
        reply(req, 200, "OK", "application/json", out);
        free(out);
        free(text);
        json_decref(root);
        return;
    }
    enum verb v;
    if (strcmp(p, "/filter") == 0)
        v = VERB_FILTER;
    else if (strcmp(p, "/prioritize") == 0)
        v = VERB_PRIORITIZE;
    else if (strcmp(p, "/bind") == 0)
        v = VERB_BIND;
    else if (strcmp(p, "/webhook") == 0 || strcmp(p, "/mutate") == 0)
        v = VERB_WEBHOOK;
    else {
        reply(req, 404, "Not Found", "text/plain", "not found\n");
        return;
    }
    if (method != EVHTTP_REQ_POST) {
        reply(req, 405, "Method Not Allowed", "text/plain", "POST only\n");
        return;
    }
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *body = len > 0 ? (const char *)evbuffer_pullup(in, -1) : "";
    struct vg_err err = {0};
    char *out = NULL;
    int rc = 0;
    switch (v) {
    case VERB_FILTER:
        rc = sched_filter(d->state, body, len, now(), &out, &err);
        break;
    case VERB_PRIORITIZE:
        rc = sched_prioritize(d->state, body, len, &out, &err);
        break;
    case VERB_WEBHOOK:
        rc = sched_admit(d->state, body, len, &out, &err);
        break;
    case VERB_BIND:
    case VERB_COUNT:
        handle_bind(d, req, body, len, t0);
        return;
    }
    if (rc < 0) {
        vg_log(VG_LOG_INFO, "bad request", "verb=%s err=\"%s\"", verb_names[v], err.msg);
        reply_error(d, v, req, &err);
    } else {
        reply(req, 200, "OK", "application/json", out);
    }
    free(out);
    hist_observe(&d->latency[v], mono_s() - t0);
}

/* ---- watches ------------------------------------------------------------------------ */

static void nodes_resync(void *arg, json_t *items, const char *rv)
{
    struct daemon *d = arg;
    double t0 = mono_s();
    sched_nodes_resync(d->state, items);
    vg_log(VG_LOG_INFO, "nodes listed", "count=%zu rv=%s seconds=%.3f", json_array_size(items), rv,
           mono_s() - t0);
}

static void nodes_event(void *arg, enum kube_event_type type, json_t *obj)
{
    struct daemon *d = arg;
    if (type == KUBE_EVENT_DELETED)
        sched_node_delete(d->state, obj);
    else
        sched_node_update(d->state, obj);
}

static void pods_resync(void *arg, json_t *items, const char *rv)
{
    struct daemon *d = arg;
    double t0 = mono_s();
    sched_pods_resync(d->state, items);
    vg_log(VG_LOG_INFO, "pods listed", "count=%zu rv=%s seconds=%.3f", json_array_size(items), rv,
           mono_s() - t0);
}

static void pods_event(void *arg, enum kube_event_type type, json_t *obj)
{
    struct daemon *d = arg;
    if (type == KUBE_EVENT_DELETED)
        sched_pod_delete(d->state, obj);
    else
        sched_pod_update(d->state, obj);
}

static void watch_error(void *arg, const struct vg_err *err)
{
    struct daemon *d = arg;
    d->api_errors++;
    vg_log(VG_LOG_WARN, "watch interrupted; retrying", "err=\"%s\"", err->msg);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    sched_expire(d->state, now());
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopbreak(arg);
}

/* ---- TLS for the webhook ------------------------------------------------------------- */

static struct bufferevent *tls_bev(struct event_base *base, void *arg)
{
    SSL_CTX *ctx = arg;
    return bufferevent_openssl_socket_new(base, -1, SSL_new(ctx), BUFFEREVENT_SSL_ACCEPTING,
                                          BEV_OPT_CLOSE_ON_FREE);
}

/* Plain extender connections read up to 256 KiB per read: a /filter offering 5,000 nodes
 * is about 100 KB, which libevent's default 16 KiB reads take in seven loop turns and
 * seven buffer chains that the handler then copies into one. */
static struct bufferevent *plain_bev(struct event_base *base, void *arg)
{
    (void)arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (bev != NULL)
        (void)bufferevent_set_max_single_read(bev, 256 * 1024);
    return bev;
}

static int split_addr(const char *text, char *host, size_t size, uint16_t *port, struct vg_err *err)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= size)
        return vg_err_set(err, -EINVAL, "'%s' is not ADDR:PORT", text);
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    if (host[0] == '\0')
        (void)vg_strlcpy(host, "0.0.0.0", size);
    uint64_t p;
    if (vg_parse_u64(colon + 1, 0, 65535, &p, err) < 0)
        return vg_err_wrap(err, "port of '%s'", text);
    *port = (uint16_t)p;
    return 0;
}

static int listen_on(struct evhttp *http, const char *addr, const char *port_file,
                     struct vg_err *err)
{
    char host[256];
    uint16_t port = 0;
    if (split_addr(addr, host, sizeof host, &port, err) < 0)
        return err->code;
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, host, port);
    if (sock == NULL)
        return vg_err_set(err, -EADDRINUSE, "cannot listen on %s", addr);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0 &&
        ss.ss_family == AF_INET)
        port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    vg_log(VG_LOG_INFO, "listening", "addr=%s port=%u", host, port);
    if (port_file != NULL) {
        FILE *f = fopen(port_file, "w");
        if (f == NULL)
            return vg_err_set(err, -errno, "cannot write %s", port_file);
        fprintf(f, "%u\n", port);
        fclose(f);
    }
    return 0;
}

/* ---- main --------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: vgpu-scheduler [--listen ADDR:PORT] [--kubeconfig FILE] [options]\n"
        "  --listen ADDR:PORT         extender HTTP address (default 0.0.0.0:8888)\n"
        "  --kubeconfig FILE          API credentials (default: in-cluster)\n"
        "  --config FILE              JSON defaults: policy, gpuPolicy, assumeTTLSeconds,\n"
        "                             heartbeatTimeoutSeconds, defaultMemory, defaultCores,\n"
        "                             defaultGPUNum, schedulerName\n"
        "  --policy NAME              node policy: binpack (default), spread, default (vgpu's),\n"
        "                             fgd, bestfit, ...\n"
        "  --gpu-policy NAME          GPU order inside a node: spread (default), binpack\n"
        "  --assume-ttl SECONDS       a filter promise lasts this long without bind (30)\n"
        "  --heartbeat-timeout SECS   ignore inventories older than this (0: never)\n"
        "  --scheduler-name NAME      schedulerName the webhook sets (vgpu-scheduler)\n"
        "  --webhook-listen ADDR:PORT HTTPS admission webhook address (off by default)\n"
        "  --tls-cert FILE --tls-key FILE   the webhook's certificate and key (PEM)\n"
        "  --port-file FILE           write the extender's port here once listening\n"
        "  --log-level LEVEL          error, warn, info (default), debug\n");
}

static int load_config(const char *file, struct sched_options *o, char **name_store,
                       struct vg_err *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return vg_err_set(err, -EINVAL, "%s:%d: %s", file, jerr.line, jerr.text);
    int rc = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "policy") == 0 && json_is_string(v)) {
            int p = place_policy_from_name(json_string_value(v));
            if (p < 0)
                rc = vg_err_set(err, -EINVAL, "%s: policy: unsupported '%s'", file,
                                json_string_value(v));
            else
                o->policy = (enum place_policy)p;
        } else if (strcmp(key, "gpuPolicy") == 0 && json_is_string(v)) {
            if (strcmp(json_string_value(v), "binpack") == 0)
                o->gpu_order = PLACE_GPU_BINPACK;
            else if (strcmp(json_string_value(v), "spread") == 0)
                o->gpu_order = PLACE_GPU_SPREAD;
            else
                rc = vg_err_set(err, -EINVAL, "%s: gpuPolicy: not binpack or spread", file);
        } else if (strcmp(key, "assumeTTLSeconds") == 0 && json_is_integer(v) &&
                   json_integer_value(v) > 0 && json_integer_value(v) <= 3600) {
            o->assume_ttl_ms = (uint64_t)json_integer_value(v) * 1000u;
        } else if (strcmp(key, "heartbeatTimeoutSeconds") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0) {
            o->heartbeat_timeout_s = json_integer_value(v);
        } else if (strcmp(key, "defaultMemory") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0) {
            o->defaults.default_memory = json_integer_value(v);
        } else if (strcmp(key, "defaultCores") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= 100) {
            o->defaults.default_cores = json_integer_value(v);
        } else if (strcmp(key, "defaultGPUNum") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= PLACE_MAX_GPUS) {
            o->defaults.default_gpu_num = json_integer_value(v);
        } else if (strcmp(key, "schedulerName") == 0 && json_is_string(v)) {
            *name_store = xstrdup(json_string_value(v));
            o->scheduler_name = *name_store;
        } else {
            rc = vg_err_set(err, -EINVAL, "%s: unknown key or bad value for \"%s\"", file, key);
        }
        if (rc < 0)
            break;
    }
    json_decref(root);
    return rc;
}

int main(int argc, char **argv)
{
    const char *listen = "0.0.0.0:8888", *kubeconfig = NULL, *config = NULL, *port_file = NULL;
    const char *webhook_listen = NULL, *tls_cert = NULL, *tls_key = NULL;
    const char *policy = NULL, *gpu_policy = NULL, *ttl = NULL, *heartbeat = NULL;
    const char *scheduler_name = NULL;
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
        {"tls-cert", required_argument, NULL, 'C'},
        {"tls-key", required_argument, NULL, 'K'},
        {"port-file", required_argument, NULL, 'P'},
        {"log-level", required_argument, NULL, 'L'},
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
        case 'C':
            tls_cert = optarg;
            break;
        case 'K':
            tls_key = optarg;
            break;
        case 'P':
            port_file = optarg;
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
    char *name_store = NULL;
    if (config != NULL && load_config(config, &o, &name_store, &err) < 0) {
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
    if (webhook_listen != NULL && (tls_cert == NULL || tls_key == NULL)) {
        fprintf(stderr, "vgpu-scheduler: --webhook-listen needs --tls-cert and --tls-key\n");
        return 2;
    }

    signal(SIGPIPE, SIG_IGN);
    struct daemon d;
    memset(&d, 0, sizeof d);
    int status = 1;
    struct kube_config *kc = NULL;
    struct event *timer = NULL, *sigint = NULL, *sigterm = NULL;
    /* The changelist folds the add / delete / modify that evhttp makes of one socket in
     * one callback (four per request) into at most one epoll_ctl at the next dispatch.
     * Its one hazard, dup()ed descriptors, does not arise: nothing here dups a socket. */
    struct event_config *cfg = event_config_new();
    if (cfg != NULL)
        (void)event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    d.base = cfg != NULL ? event_base_new_with_config(cfg) : NULL;
    if (d.base == NULL)
        d.base = event_base_new();
    if (cfg != NULL)
        event_config_free(cfg);
    if (sched_state_new(&o, &d.state, &err) < 0)
        goto out;
    int rc = kubeconfig != NULL ? kube_config_load_file(kubeconfig, NULL, &kc, &err)
                                : kube_config_in_cluster(NULL, &kc, &err);
    if (rc < 0)
        goto out;
    if (kube_client_new(d.base, kc, NULL, &d.client, &err) < 0)
        goto out;
    struct kube_watch_callbacks ncb = {nodes_resync, nodes_event, watch_error};
    struct kube_watch_callbacks pcb = {pods_resync, pods_event, watch_error};
    struct kube_watch_options nopt = {.path = "/api/v1/nodes", .seed = 1};
    struct kube_watch_options popt = {.path = "/api/v1/pods", .seed = 2};
    if (kube_watch_new(d.client, &nopt, &ncb, &d, &d.nodes, &err) < 0 ||
        kube_watch_new(d.client, &popt, &pcb, &d, &d.pods, &err) < 0)
        goto out;
    d.http = evhttp_new(d.base);
    evhttp_set_max_body_size(d.http, SCHED_MAX_BODY_BYTES);
    evhttp_set_allowed_methods(d.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    evhttp_set_bevcb(d.http, plain_bev, NULL);
    evhttp_set_gencb(d.http, handle, &d);
    if (listen_on(d.http, listen, port_file, &err) < 0)
        goto out;
    if (webhook_listen != NULL) {
        d.ssl = SSL_CTX_new(TLS_server_method());
        if (d.ssl == NULL || SSL_CTX_use_certificate_chain_file(d.ssl, tls_cert) != 1 ||
            SSL_CTX_use_PrivateKey_file(d.ssl, tls_key, SSL_FILETYPE_PEM) != 1) {
            vg_err_set(&err, -EINVAL, "cannot load the webhook certificate %s or key %s", tls_cert,
                       tls_key);
            goto out;
        }
        d.https = evhttp_new(d.base);
        evhttp_set_max_body_size(d.https, SCHED_MAX_BODY_BYTES);
        evhttp_set_bevcb(d.https, tls_bev, d.ssl);
        evhttp_set_gencb(d.https, handle, &d);
        if (listen_on(d.https, webhook_listen, NULL, &err) < 0)
            goto out;
    }
    timer = event_new(d.base, -1, EV_PERSIST, tick, &d);
    struct timeval second = {1, 0};
    event_add(timer, &second);
    sigint = evsignal_new(d.base, SIGINT, on_signal, d.base);
    sigterm = evsignal_new(d.base, SIGTERM, on_signal, d.base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    event_base_dispatch(d.base);
    status = 0;
out:
    if (status != 0)
        fprintf(stderr, "vgpu-scheduler: %s\n", err.msg);
    if (timer != NULL)
        event_free(timer);
    if (sigint != NULL)
        event_free(sigint);
    if (sigterm != NULL)
        event_free(sigterm);
    if (d.http != NULL)
        evhttp_free(d.http);
    if (d.https != NULL)
        evhttp_free(d.https);
    if (d.ssl != NULL)
        SSL_CTX_free(d.ssl);
    kube_watch_free(d.nodes);
    kube_watch_free(d.pods);
    kube_client_free(d.client);
    kube_config_free(kc);
    sched_state_free(d.state);
    event_base_free(d.base);
    free(name_store);
    return status;
}
