/* vgpu-scheduler's daemon (daemon.h): one libevent loop drives the extender's server
 * (evhttp: plain HTTP on loopback, or HTTPS with client authentication), the optional
 * HTTPS webhook server, the Kubernetes API client's node and pod
 * watches (src/kube) and a one-second timer that expires assumptions. Decisions live in
 * the scheduler core (sched.h); this file routes requests, renders metrics and moves
 * bytes. docs/scheduler.md lists every path and metric. */
#include "scheduler/daemon.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "connguard/connguard.h"
#include "kube/kube.h"
#include "scheduler/auth.h"
#include "scheduler/dashboard.h"
#include "scheduler/dra_templates.h"
#include "scheduler/http.h"
#include "scheduler/metrics.h"
#include "scheduler/pod.h"
#include "scheduler/records.h"
#include "scheduler/resize.h"

#define POD_KEY_MAX 512 /* "namespace/name" */

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

/* A /filter for a pod the pod watch has not shown yet: kube-scheduler's own watch may be
 * a moment ahead of ours. It waits, unanswered, until the pod shows up or PARK_WAIT_MS
 * pass; at most PARK_MAX wait at once (beyond, the answer is the retriable error now). */
#define PARK_MAX         64
#define PARK_WAIT_MS     1000
#define PARK_RETRY_EVERY 50 /* ms: filters waiting are tried again at least this often */

struct parked_filter {
    struct evhttp_request *req;
    double t0;
    uint64_t deadline_ms;
    struct parked_filter *next;
};

/* One HTTP(S) server and the guard of its connections (src/connguard): evhttp accepts and
 * frees its connections itself, so the guard learns of each one through the bufferevent
 * made for it, and closes one by shutting its socket down (evhttp then frees it). */
struct guarded {
    struct sched_daemon *d;
    const char *name;
    struct connguard *guard;
    SSL_CTX *ssl; /* TLS server context, or NULL for plain HTTP */
    void (*handle)(struct evhttp_request *req, void *arg);
    struct bufferevent **fresh; /* made for connections accepted this loop turn */
    size_t fresh_count, fresh_size;
    struct event *admit; /* admits the fresh ones once evhttp has set their socket */
};

struct sched_daemon {
    struct event_base *base;
    struct sched_state *state;
    struct kube_client *client;
    struct kube_watch *nodes, *pods;
    struct evhttp *http, *https;
    SSL_CTX *ssl;     /* the webhook's */
    SSL_CTX *ext_ssl; /* the extender's, when it serves TLS */
    struct guarded ext_guard, hook_guard;
    struct event *timer; /* expires assumptions once a second */
    uint16_t port;       /* the extender's, as bound */
    bool need_cert;      /* extender clients must present a certificate the CA signed */
    bool need_token;     /* extender clients must send the bearer token */
    bool debug_state;
    bool need_webhook_cert;          /* webhook clients must present a certificate the CA signed */
    struct sched_records *records;   /* the bound pods' decision records */
    struct sched_resizer *resizer;   /* live resize requests */
    struct sched_dra_templates *dra; /* the DRA mode's templates; NULL without it */
    char token[SCHED_TOKEN_MAX + 1];
    size_t token_len;
    struct parked_filter *parked;
    size_t parked_count;
    struct event *retry; /* tries the parked filters again */
    struct histogram latency[VERB_COUNT];
    uint64_t http_errors[VERB_COUNT]; /* 400 and 413 answers */
    uint64_t api_errors;
    uint64_t unauthorized;
    uint64_t bind_inflight;
    bool hami_legacy;          /* /metrics adds HAMi's older names */
    struct sched_dashboard ui; /* /ui, /ui/state.json, /ui/explain */
    struct vg_buf metrics_buf; /* the /metrics text, kept between scrapes */
    bool metrics_busy;         /* metrics_buf is still being sent */
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

/* The metrics buffer went out: the kept one is free for the next scrape. */
static void metrics_sent_kept(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    ((struct sched_daemon *)arg)->metrics_busy = false;
}

/* ... or a scrape's own buffer, freed. */
static void metrics_sent_own(const void *data, size_t len, void *arg)
{
    (void)data;
    (void)len;
    vg_buf_free(arg);
    free(arg);
}

/* The metrics page: the daemon's series and the model's (metrics.h), megabytes on a large
 * cluster, go out by reference from a buffer kept between scrapes: no copy, and no fresh
 * pages to fault in each time. A scrape that comes while the last one is still being
 * sent uses a buffer of its own. False (logged) when the text could not be written. */
static uint64_t resize_errors(const struct sched_daemon *d)
{
    struct sched_resize_stats st;
    sched_resizer_stats(d->resizer, &st);
    return st.errors;
}

static bool render_metrics(struct sched_daemon *d, struct evbuffer *b)
{
    struct sched_metrics_server servers[2];
    size_t server_count = 0;
    const struct guarded *guarded[] = {&d->ext_guard, &d->hook_guard};
    for (int i = 0; i < 2; i++) {
        if (guarded[i]->guard == NULL)
            continue;
        struct connguard_stats st = {0};
        connguard_stats(guarded[i]->guard, &st);
        servers[server_count++] =
            (struct sched_metrics_server){guarded[i]->name, st.connections, st.timed_out,
                                          st.evicted,       st.refused,     st.accept_pause};
    }
    struct sched_metrics_latency latency[VERB_COUNT];
    for (int v = 0; v < VERB_COUNT; v++)
        latency[v] = (struct sched_metrics_latency){verb_names[v], d->latency[v].counts,
                                                    d->latency[v].count, d->latency[v].sum};
    /* Every 400 and 413 answer, whatever the verb and however the body was wrong. */
    uint64_t bad_requests = d->ui.errors;
    for (int v = 0; v < VERB_COUNT; v++)
        bad_requests += d->http_errors[v];
    struct sched_resize_stats rs;
    sched_resizer_stats(d->resizer, &rs);
    struct sched_metrics_daemon m = {
        .bad_requests = bad_requests,
        .api_errors = d->api_errors + sched_records_errors(d->records) + resize_errors(d) +
                      (d->dra != NULL ? sched_dra_templates_errors(d->dra) : 0),
        .unauthorized = d->unauthorized,
        .resizes_done = rs.done,
        .resizes_refused = rs.refused,
        .resizes_reconciled = rs.reconciled,
        .bounds = hist_bounds,
        .bucket_count = HIST_BUCKETS,
        .latency = latency,
        .verb_count = VERB_COUNT,
        .servers = servers,
        .server_count = server_count,
    };
    bool kept = !d->metrics_busy;
    struct vg_buf *more = kept ? &d->metrics_buf : xcalloc(1, sizeof *more);
    if (kept)
        vg_buf_reset(more);
    else
        vg_buf_init(more, "metrics", (size_t)1 << 30);
    struct vg_err err = {0};
    struct vg_prom p;
    vg_prom_init(&p, more, &err);
    sched_metrics_daemon(&p, d->state, &m);
    sched_metrics_allocation(&p, d->state, d->hami_legacy);
    if (vg_prom_done(&p) < 0) {
        vg_log(VG_LOG_WARN, "metrics endpoint: cannot format the metrics", "error=\"%s\"", err.msg);
        if (!kept) {
            vg_buf_free(more);
            free(more);
        }
        return false;
    }
    if (kept) {
        d->metrics_busy = true;
        evbuffer_add_reference(b, more->data, more->len, metrics_sent_kept, d);
    } else {
        evbuffer_add_reference(b, more->data, more->len, metrics_sent_own, more);
    }
    return true;
}

/* ---- HTTP --------------------------------------------------------------------------- */

static void reply_error(struct sched_daemon *d, enum verb v, struct evhttp_request *req,
                        const struct vg_err *err)
{
    d->http_errors[v]++;
    VG_AUTO_JSON json_t *body = json_pack("{s:s}", "Error", err->msg);
    VG_AUTO_FREE char *text = json_dumps(body, JSON_COMPACT);
    int code = err->code == -EMSGSIZE ? 413 : 400;
    sched_http_reply(req, code, code == 413 ? "Payload Too Large" : "Bad Request",
                     "application/json", text);
}

/* A 200 whose body carries the error: the scheduler retries the pod. */
static void reply_retry(struct evhttp_request *req, const char *error)
{
    VG_AUTO_JSON json_t *body = json_pack("{s:s}", "Error", error != NULL ? error : "");
    VG_AUTO_FREE char *text = json_dumps(body, JSON_COMPACT);
    sched_http_reply(req, 200, "OK", "application/json", text);
}

struct bind_call {
    struct sched_daemon *d;
    struct evhttp_request *req;
    struct sched_bind b;
    double t0;
};

static void bind_reply(struct bind_call *bc, const char *error, enum sched_bind_outcome outcome)
{
    reply_retry(bc->req, error);
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
    if (bc->b.decision != NULL && bc->b.uid[0] != '\0') {
        /* The record a pod author cannot edit, at once: the watch would write it too, but
         * only once it shows the pod bound. */
        char key[POD_KEY_MAX];
        (void)vg_snprintf(key, sizeof key, "%s/%s", bc->b.ns, bc->b.name);
        sched_records_write(bc->d->records, bc->b.uid, key, bc->b.decision);
    }
    bind_reply(bc, NULL, SCHED_BIND_OK);
}

static void handle_bind(struct sched_daemon *d, struct evhttp_request *req, const char *body,
                        size_t len, double t0)
{
    VG_AUTO_FREE struct bind_call *call = xcalloc(1, sizeof *call);
    call->d = d;
    call->req = req;
    call->t0 = t0;
    struct vg_err err = {0};
    int rc = sched_bind_prepare(d->state, body, len, now(), &call->b, &err);
    if (rc == -EBADMSG || rc == -EMSGSIZE) {
        reply_error(d, VERB_BIND, req, &err);
        return;
    }
    if (rc < 0) {
        reply_retry(req, err.msg);
        return;
    }
    /* From here the call belongs to bind_reply, which ends it (now or once bound). */
    struct bind_call *bc = vg_steal_ptr(&call);
    d->bind_inflight++;
    /* One write: spec.nodeName and the decision annotation together, on the pod filter
     * saw (uid and resourceVersion preconditions). */
    VG_AUTO_JSON json_t *annotations = NULL;
    if (bc->b.decision != NULL)
        annotations = json_pack("{s:s}", ANNOT_KEY_DECISION, bc->b.decision);
    const struct kube_binding binding = {.ns = bc->b.ns,
                                         .name = bc->b.name,
                                         .node = bc->b.node,
                                         .uid = bc->b.uid,
                                         .resource_version = bc->b.resource_version,
                                         .annotations = annotations};
    rc = kube_bind_pod_with(d->client, &binding, bound, bc, &err);
    if (rc < 0)
        bind_reply(bc, err.msg, SCHED_BIND_REFUSED);
}

/* The path of req, cut to fit p (longer paths match nothing; "" when the URI does not
 * parse, which matches nothing either). */
static void request_path(struct evhttp_request *req, char *p, size_t size)
{
    struct evhttp_uri *parsed = evhttp_uri_parse(evhttp_request_get_uri(req));
    const char *path = parsed != NULL ? evhttp_uri_get_path(parsed) : NULL;
    p[0] = '\0';
    if (path != NULL)
        (void)vg_strlcpy(p, path, size);
    if (parsed != NULL) /* libevent's free does not take NULL: an unparsable URI crashed */
        evhttp_uri_free(parsed);
}

static bool serve_health(struct sched_daemon *d, struct evhttp_request *req, const char *p)
{
    if (strcmp(p, "/healthz") == 0) {
        sched_http_reply(req, 200, "OK", "text/plain", "ok\n");
        return true;
    }
    if (strcmp(p, "/readyz") == 0) {
        bool ready = kube_watch_synced(d->nodes) && d->pods != NULL && kube_watch_synced(d->pods);
        sched_http_reply(req, ready ? 200 : 503, ready ? "OK" : "Service Unavailable", "text/plain",
                         ready ? "ok\n" : "waiting for the first node and pod lists\n");
        return true;
    }
    return false;
}

/* The TLS session of req's connection, or NULL on a plain one. */
static SSL *request_ssl(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    return bev != NULL ? bufferevent_openssl_get_ssl(bev) : NULL;
}

/* Whether the extender's client proved who it is, as configured: a certificate the CA
 * signed (the handshake refused any other; a client may still have sent none) and the
 * bearer token. Answers 401 itself when not. */
static bool authorized(struct sched_daemon *d, struct evhttp_request *req)
{
    const char *why = NULL;
    if (d->need_cert) {
        SSL *ssl = request_ssl(req);
        if (ssl == NULL || SSL_get0_peer_certificate(ssl) == NULL ||
            SSL_get_verify_result(ssl) != X509_V_OK)
            why = "a client certificate signed by the --client-ca authority is required\n";
    }
    if (why == NULL && d->need_token) {
        const char *header =
            evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
        const char *tok;
        size_t len;
        if (sched_auth_bearer(header, &tok, &len) < 0 ||
            !sched_auth_token_equal(tok, len, d->token, d->token_len))
            why = "a valid \"Authorization: Bearer <token>\" header is required\n";
    }
    if (why == NULL)
        return true;
    d->unauthorized++;
    if (d->need_token)
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
                          "Bearer realm=\"vgpu-scheduler\"");
    sched_http_reply(req, 401, "Unauthorized", "text/plain", why);
    return false;
}

/* The request body, contiguous (it stays in req until the reply). */
static const char *request_body(struct evhttp_request *req, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    return *len > 0 ? (const char *)evbuffer_pullup(in, -1) : "";
}

/* Runs /filter on req's body and answers, or, for a pod the pod watch has not shown yet,
 * parks the request until deadline_ms (see PARK_MAX); true when it was parked. */
static bool run_filter(struct sched_daemon *d, struct evhttp_request *req, double t0,
                       uint64_t deadline_ms)
{
    size_t len;
    const char *body = request_body(req, &len);
    struct vg_err err = {0};
    VG_AUTO_FREE char *out = NULL;
    int rc = sched_filter(d->state, body, len, now(), &out, &err);
    if (rc == SCHED_FILTER_RETRY && mono_ms() < deadline_ms && d->parked_count < PARK_MAX) {
        struct parked_filter *pf = xcalloc(1, sizeof *pf);
        pf->req = req;
        pf->t0 = t0;
        pf->deadline_ms = deadline_ms;
        pf->next = d->parked;
        d->parked = pf;
        d->parked_count++;
        struct timeval tv = {0, PARK_RETRY_EVERY * 1000};
        event_add(d->retry, &tv);
        return true;
    }
    if (rc < 0) {
        vg_log(VG_LOG_INFO, "bad request", "verb=filter err=\"%s\"", err.msg);
        reply_error(d, VERB_FILTER, req, &err);
    } else {
        sched_http_reply(req, 200, "OK", "application/json", out);
    }
    hist_observe(&d->latency[VERB_FILTER], mono_s() - t0);
    return false;
}

/* The parked filters, again: the pod watch moved, or PARK_RETRY_EVERY passed. Each is
 * answered once its pod shows up or its wait is over. */
static void retry_parked(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sched_daemon *d = arg;
    struct parked_filter *list = d->parked;
    d->parked = NULL;
    d->parked_count = 0;
    while (list != NULL) {
        struct parked_filter *pf = list;
        list = pf->next;
        (void)run_filter(d, pf->req, pf->t0, pf->deadline_ms); /* may park it anew */
        free(pf);
    }
}

/* The pod watch moved: parked filters are worth trying now. */
static void pods_moved(struct sched_daemon *d)
{
    if (d->parked != NULL)
        event_active(d->retry, EV_TIMEOUT, 0);
}

static void serve_debug(struct sched_daemon *d, struct evhttp_request *req, bool bound_only)
{
    VG_AUTO_FREE char *text = sched_dump(d->state, bound_only);
    struct vg_err err = {0};
    int inv = sched_check_invariants(d->state, &err);
    VG_AUTO_JSON json_t *root = json_loads(text, 0, NULL);
    json_object_set_new(root, "invariants", json_string(inv == 0 ? "ok" : err.msg));
    VG_AUTO_FREE char *out = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
    sched_http_reply(req, 200, "OK", "application/json", out);
}

/* The extender's address: the verbs, health, metrics and, when turned on, the state
 * dump; never the webhook. */
static void handle_extender(struct evhttp_request *req, void *arg)
{
    struct sched_daemon *d = arg;
    double t0 = mono_s();
    char p[64];
    request_path(req, p, sizeof p);
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    if (serve_health(d, req, p))
        return;
    if (!authorized(d, req))
        return;
    if (strcmp(p, "/metrics") == 0) {
        struct evbuffer *b = evbuffer_new();
        if (!render_metrics(d, b)) { /* a failed scrape, not an empty one (as the monitor) */
            evbuffer_free(b);
            sched_http_reply(req, 500, "Internal Server Error", "text/plain",
                             "500 Internal Server Error\n");
            return;
        }
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "text/plain; version=0.0.4");
        evhttp_send_reply(req, 200, "OK", b);
        evbuffer_free(b);
        return;
    }
    if (strncmp(p, "/ui", 3) == 0 && (p[3] == '\0' || p[3] == '/')) {
        sched_dashboard_serve(&d->ui, req, p, method);
        return;
    }
    if (d->debug_state &&
        (strcmp(p, "/debug/state") == 0 || strcmp(p, "/debug/state-bound") == 0)) {
        serve_debug(d, req, strcmp(p, "/debug/state-bound") == 0);
        return;
    }
    enum verb v;
    if (strcmp(p, "/filter") == 0)
        v = VERB_FILTER;
    else if (strcmp(p, "/prioritize") == 0)
        v = VERB_PRIORITIZE;
    else if (strcmp(p, "/bind") == 0)
        v = VERB_BIND;
    else {
        sched_http_reply(req, 404, "Not Found", "text/plain", "not found\n");
        return;
    }
    if (method != EVHTTP_REQ_POST) {
        sched_http_reply(req, 405, "Method Not Allowed", "text/plain", "POST only\n");
        return;
    }
    if (v == VERB_FILTER) {
        (void)run_filter(d, req, t0, mono_ms() + PARK_WAIT_MS);
        return;
    }
    size_t len;
    const char *body = request_body(req, &len);
    if (v == VERB_BIND) {
        handle_bind(d, req, body, len, t0);
        return;
    }
    struct vg_err err = {0};
    VG_AUTO_FREE char *out = NULL;
    if (sched_prioritize(d->state, body, len, &out, &err) < 0) {
        vg_log(VG_LOG_INFO, "bad request", "verb=%s err=\"%s\"", verb_names[v], err.msg);
        reply_error(d, v, req, &err);
    } else {
        sched_http_reply(req, 200, "OK", "application/json", out);
    }
    hist_observe(&d->latency[v], mono_s() - t0);
}

/* ---- the webhook's DRA mode: creating the templates its claims name ---------------- */

/* A review waiting for its templates (dra_templates.c answers it once). */
struct admit_wait {
    struct sched_daemon *d;
    struct evhttp_request *req;
    char *out; /* the answer to send once every template exists */
    char *uid;
    double t0;
};

static void admit_done(void *arg, const char *refusal)
{
    struct admit_wait *w = arg;
    if (refusal != NULL) {
        VG_AUTO_FREE char *refused = sched_admit_refusal(w->uid, refusal);
        sched_http_reply(w->req, 200, "OK", "application/json", refused);
    } else {
        sched_http_reply(w->req, 200, "OK", "application/json", w->out);
    }
    hist_observe(&w->d->latency[VERB_WEBHOOK], mono_s() - w->t0);
    free(w->out);
    free(w->uid);
    free(w);
}

/* Takes out and templates: creates the templates, then answers. */
static void admit_with_templates(struct sched_daemon *d, struct evhttp_request *req, char *out,
                                 json_t *templates, const char *body, size_t len, double t0)
{
    struct admit_wait *w = xcalloc(1, sizeof *w);
    w->d = d;
    w->req = req;
    w->out = out;
    w->t0 = t0;
    VG_AUTO_JSON json_t *answer = json_loads(out, 0, NULL);
    const char *uid = sched_json_str(answer, "response", "uid", NULL);
    w->uid = xstrdup(uid != NULL ? uid : "");
    /* The pod's owners, checked before anything is created (sched_admit_with parsed the
     * same body and accepted it). */
    VG_AUTO_JSON json_t *review = json_loadb(body, len, 0, NULL);
    json_t *owners = json_object_get(
        json_object_get(json_object_get(json_object_get(review, "request"), "object"), "metadata"),
        "ownerReferences");
    sched_dra_templates_ensure(d->dra, templates, owners, admit_done, w);
    json_decref(templates);
}

/* The webhook's HTTPS address: the admission review and health, nothing else. */
static void handle_webhook(struct evhttp_request *req, void *arg)
{
    struct sched_daemon *d = arg;
    double t0 = mono_s();
    char p[64];
    request_path(req, p, sizeof p);
    if (serve_health(d, req, p))
        return;
    if (strcmp(p, "/webhook") != 0 && strcmp(p, "/mutate") != 0) {
        sched_http_reply(req, 404, "Not Found", "text/plain", "not found\n");
        return;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
        sched_http_reply(req, 405, "Method Not Allowed", "text/plain", "POST only\n");
        return;
    }
    if (d->need_webhook_cert) {
        /* Only kube-apiserver, with the client certificate its AdmissionConfiguration
         * names, may have reviews acted on (the DRA mode writes with vgpu's credentials). */
        SSL *ssl = request_ssl(req);
        if (ssl == NULL || SSL_get0_peer_certificate(ssl) == NULL ||
            SSL_get_verify_result(ssl) != X509_V_OK) {
            d->unauthorized++;
            sched_http_reply(req, 401, "Unauthorized", "text/plain",
                             "a client certificate signed by the --webhook-client-ca authority is "
                             "required\n");
            return;
        }
    }
    size_t len;
    const char *body = request_body(req, &len);
    struct vg_err err = {0};
    VG_AUTO_FREE char *out = NULL;
    json_t *templates = NULL;
    if (sched_admit_with(d->state, body, len, &out, &templates, &err) < 0) {
        vg_log(VG_LOG_INFO, "bad request", "verb=webhook err=\"%s\"", err.msg);
        reply_error(d, VERB_WEBHOOK, req, &err);
    } else if (templates != NULL) {
        admit_with_templates(d, req, vg_steal_ptr(&out), templates, body, len, t0);
        return;
    } else {
        sched_http_reply(req, 200, "OK", "application/json", out);
    }
    hist_observe(&d->latency[VERB_WEBHOOK], mono_s() - t0);
}

/* ---- watches ------------------------------------------------------------------------ */

static void nodes_resync(void *arg, json_t *items, const char *rv)
{
    struct sched_daemon *d = arg;
    double t0 = mono_s();
    sched_nodes_resync(d->state, items);
    vg_log(VG_LOG_INFO, "nodes listed", "count=%zu rv=%s seconds=%.3f", json_array_size(items), rv,
           mono_s() - t0);
}

static void nodes_event(void *arg, enum kube_event_type type, json_t *obj)
{
    struct sched_daemon *d = arg;
    if (type == KUBE_EVENT_DELETED)
        sched_node_delete(d->state, obj);
    else
        sched_node_update(d->state, obj);
}

/* A pod the watch showed: its record is written when it holds GPUs without one, and
 * deleted once it finished. */
static void pod_record(struct sched_daemon *d, json_t *pod)
{
    const char *uid = NULL;
    const char *decision = sched_record_wanted(d->state, pod, &uid);
    if (decision != NULL) {
        char key[POD_KEY_MAX];
        if (sched_pod_key(pod, key, sizeof key, &(struct vg_err){0}) == 0)
            sched_records_write(d->records, uid, key, decision);
        return;
    }
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    if (phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0) &&
        sched_record_drop(d->state, uid))
        sched_records_delete(d->records, uid);
}

static void record_gone(void *arg, const char *uid)
{
    sched_records_delete(arg, uid);
}

static void pods_resync(void *arg, json_t *items, const char *rv)
{
    struct sched_daemon *d = arg;
    double t0 = mono_s();
    sched_pods_resync(d->state, items);
    sched_pending_resync(d->state, items);
    sched_records_prune(d->state, items, record_gone, d->records);
    size_t i;
    json_t *pod;
    json_array_foreach(items, i, pod)
    {
        pod_record(d, pod);
        sched_resizer_pod(d->resizer, pod);
    }
    pods_moved(d);
    vg_log(VG_LOG_INFO, "pods listed", "count=%zu rv=%s seconds=%.3f", json_array_size(items), rv,
           mono_s() - t0);
}

static void pods_event(void *arg, enum kube_event_type type, json_t *obj)
{
    struct sched_daemon *d = arg;
    if (type == KUBE_EVENT_DELETED) {
        sched_pod_delete(d->state, obj);
        sched_pending_delete(d->state, obj);
        const char *uid = sched_json_str(obj, "metadata", "uid", NULL);
        if (sched_record_drop(d->state, uid))
            sched_records_delete(d->records, uid);
    } else {
        sched_pod_update(d->state, obj);
        sched_pending_update(d->state, obj);
        pod_record(d, obj);
        sched_resizer_pod(d->resizer, obj);
    }
    pods_moved(d);
}

static void watch_error(void *arg, const struct vg_err *err)
{
    struct sched_daemon *d = arg;
    d->api_errors++;
    vg_log(VG_LOG_WARN, "watch interrupted; retrying", "err=\"%s\"", err->msg);
}

static void tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sched_daemon *d = arg;
    sched_expire(d->state, now());
}

/* ---- TLS ---------------------------------------------------------------------------- */

static bool socket_id(int fd, struct stat *sb)
{
    return fd >= 0 && fstat(fd, sb) == 0;
}

/* The connections accepted in the last loop turn, now that evhttp has given each its
 * socket: admitted, or shut down (the newcomer when every connection is busy; else the
 * guard has evicted another). Each bufferevent was held by a reference, so one that
 * evhttp has freed meanwhile is still safe to look at; its socket closes with our
 * reference, and it is skipped. */
static void admit_fresh(evutil_socket_t unused, short what, void *arg)
{
    (void)unused;
    (void)what;
    struct guarded *gd = arg;
    for (size_t i = 0; i < gd->fresh_count; i++) {
        struct bufferevent *bev = gd->fresh[i];
        int fd = (int)bufferevent_getfd(bev);
        struct stat before, after;
        bool known = socket_id(fd, &before);
        (void)bufferevent_decref(bev);
        if (!known || !socket_id(fd, &after) || before.st_ino != after.st_ino ||
            before.st_dev != after.st_dev)
            continue;
        if (connguard_admit(gd->guard, fd) < 0)
            (void)shutdown(fd, SHUT_RDWR);
    }
    gd->fresh_count = 0;
}

/* evhttp's bufferevent callback: the connection's bufferevent, plain or TLS, noted for
 * admission. Extender connections read up to 256 KiB per read: a /filter offering 5,000
 * nodes is about 100 KB, which libevent's default 16 KiB reads take in seven loop turns
 * and seven buffer chains that the handler then copies into one. */
static struct bufferevent *guarded_bev(struct event_base *base, void *arg)
{
    struct guarded *gd = arg;
    struct bufferevent *bev;
    if (gd->ssl != NULL) {
        SSL *ssl = SSL_new(gd->ssl);
        if (ssl == NULL)
            return NULL;
        bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                             BEV_OPT_CLOSE_ON_FREE);
    } else {
        bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    }
    if (bev == NULL)
        return NULL;
    if (gd == &gd->d->ext_guard)
        (void)bufferevent_set_max_single_read(bev, 256 * 1024);
    xarray_grow(&gd->fresh, &gd->fresh_size, gd->fresh_count + 1, sizeof *gd->fresh);
    bufferevent_incref(bev);
    gd->fresh[gd->fresh_count++] = bev;
    event_active(gd->admit, 0, 0);
    return bev;
}

static int request_fd(struct evhttp_request *req)
{
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon != NULL ? evhttp_connection_get_bufferevent(evcon) : NULL;
    return bev != NULL ? (int)bufferevent_getfd(bev) : -1;
}

/* The answer is out: the connection waits for its next request, under the idle deadline. */
static void guarded_done(struct evhttp_request *req, void *arg)
{
    struct guarded *gd = arg;
    int fd = request_fd(req);
    if (fd >= 0)
        connguard_idle(gd->guard, fd);
}

/* A complete request: its connection is busy (neither timed out nor evicted) until the
 * answer is out. */
static void guarded_request(struct evhttp_request *req, void *arg)
{
    struct guarded *gd = arg;
    int fd = request_fd(req);
    if (fd >= 0) {
        connguard_busy(gd->guard, fd);
        evhttp_request_set_on_complete_cb(req, guarded_done, gd);
    }
    gd->handle(req, gd->d);
}

static int guarded_init(struct sched_daemon *d, struct guarded *gd, const char *name, SSL_CTX *ssl,
                        unsigned listeners, struct vg_err *err)
{
    gd->d = d;
    gd->name = name;
    gd->ssl = ssl;
    struct connguard_options go = {.name = name, .listeners = listeners};
    gd->guard = connguard_new(d->base, &go, err);
    if (gd->guard == NULL)
        return err->code;
    gd->admit = event_new(d->base, -1, 0, admit_fresh, gd);
    if (gd->admit == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create the %s admission event", name);
    return 0;
}

static void guarded_free(struct guarded *gd)
{
    if (gd->admit != NULL) {
        event_free(gd->admit);
        for (size_t i = 0; i < gd->fresh_count; i++)
            (void)bufferevent_decref(gd->fresh[i]);
    }
    free(gd->fresh);
    connguard_free(gd->guard);
}

/* A server context with the certificate chain and key; with ca, clients are asked for a
 * certificate, and one that the CA did not sign fails the handshake (one that sends none
 * is refused per request: health probes carry none). */
static SSL_CTX *server_ctx(const char *cert, const char *key, const char *ca, const char *what,
                           struct vg_err *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(ctx, cert) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1) {
        SSL_CTX_free(ctx);
        vg_err_set(err, -EINVAL, "cannot load the %s certificate %s or key %s", what, cert, key);
        return NULL;
    }
    if (ca != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ca);
        if (names == NULL || SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            SSL_CTX_free(ctx);
            vg_err_set(err, -EINVAL, "cannot load the client CA certificates from %s", ca);
            return NULL;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    }
    return ctx;
}

static int split_addr(const char *text, char *host, size_t size, uint16_t *port, struct vg_err *err)
{
    const char *colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= size)
        return vg_err_set(err, -EINVAL, "'%s' is not ADDR:PORT", text);
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') { /* "[::1]:8888" */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    if (host[0] == '\0')
        (void)vg_strlcpy(host, "0.0.0.0", size);
    uint64_t p;
    if (vg_parse_u64(colon + 1, 0, 65535, &p, err) < 0)
        return vg_err_wrap(err, "port of '%s'", text);
    *port = (uint16_t)p;
    return 0;
}

/* Whether a bound socket's address is a loopback one (127.0.0.0/8, ::1, or ::ffff:127.x). */
static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/* Listens on addr; *bound is the port, *loopback whether nothing beyond this host can
 * connect (from the address actually bound, not its spelling). */
static int listen_on(struct evhttp *http, struct guarded *gd, const char *addr, uint16_t *bound,
                     bool *loopback, struct vg_err *err)
{
    *loopback = false;
    char host[256];
    uint16_t port = 0;
    if (split_addr(addr, host, sizeof host, &port, err) < 0)
        return err->code;
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, host, port);
    if (sock == NULL)
        return vg_err_set(err, -EADDRINUSE, "cannot listen on %s", addr);
    /* Out of descriptors, accept pauses instead of spinning on a readable socket. */
    connguard_watch_listener(gd->guard, evhttp_bound_socket_get_listener(sock));
    /* Accepted connections inherit TCP_NODELAY (Linux). Over TLS an answer leaves as
     * several records, one write each: without it Nagle holds the last one until the
     * client's delayed ACK, 40 ms later, on every request of a kept-alive connection. */
    int one = 1;
    (void)setsockopt(evhttp_bound_socket_get_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET)
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        else if (ss.ss_family == AF_INET6)
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        *loopback = is_loopback(&ss);
    }
    vg_log(VG_LOG_INFO, "listening", "addr=%s port=%u", host, port);
    *bound = port;
    return 0;
}

/* port into path, when given: written once every listener is bound, so a port file means
 * the daemon serves on all its ports (with port 0 there is nothing to race for). */
static int write_port_file(const char *path, uint16_t port, struct vg_err *err)
{
    if (path == NULL)
        return 0;
    VG_AUTO_FILE FILE *f = fopen(path, "w");
    if (f == NULL || fprintf(f, "%u\n", port) < 0 || fflush(f) != 0)
        return vg_err_errno(err, errno, "cannot write %s", path);
    return 0;
}

/* ---- the daemon --------------------------------------------------------------------- */

static void records_loaded(void *arg)
{
    struct sched_daemon *d = arg;
    struct kube_watch_callbacks pcb = {pods_resync, pods_event, watch_error};
    struct kube_watch_options popt = {.path = "/api/v1/pods", .seed = 2};
    struct vg_err err = {0};
    if (kube_watch_new(d->client, &popt, &pcb, d, &d->pods, &err) < 0)
        vg_log(VG_LOG_ERROR, "cannot watch pods", "err=\"%s\"", err.msg);
}

VG_DEFINE_AUTO(daemon_freep, struct sched_daemon, sched_daemon_free)

int sched_daemon_new(struct event_base *base, struct kube_client *client,
                     const struct sched_options *sched, const struct sched_daemon_options *o,
                     struct sched_daemon **out, struct vg_err *err)
{
    *out = NULL;
    if (o->listen == NULL)
        return vg_err_set(err, -EINVAL, "no address to listen on");
    bool tls = o->tls_cert != NULL && o->tls_key != NULL;
    if (o->webhook_listen != NULL && !tls)
        return vg_err_set(err, -EINVAL, "the webhook server needs a certificate and a key");
    bool ext_tls = o->client_ca != NULL || o->token_file != NULL;
    if (ext_tls && !tls)
        return vg_err_set(err, -EINVAL,
                          "--client-ca and --token-file serve the extender over TLS: they need "
                          "--tls-cert and --tls-key");
    VG_AUTO(daemon_freep) struct sched_daemon *d = xcalloc(1, sizeof *d);
    d->base = base;
    d->client = client;
    d->debug_state = o->debug_state;
    d->hami_legacy = o->hami_legacy_metrics;
    vg_buf_init(&d->metrics_buf, "metrics", (size_t)1 << 30);
    if (o->token_file != NULL) {
        if (sched_auth_load_token(o->token_file, d->token, sizeof d->token, &d->token_len, err) < 0)
            return err->code;
        d->need_token = true;
    }
    struct sched_options so = *sched;
    so.require_pending = true; /* the daemon runs the pod watch that feeds it */
    if (sched_state_new(&so, &d->state, err) < 0)
        return err->code;
    sched_dashboard_init(&d->ui, d->state);
    struct kube_watch_callbacks ncb = {nodes_resync, nodes_event, watch_error};
    struct kube_watch_options nopt = {.path = "/api/v1/nodes", .seed = 1};
    if (kube_watch_new(client, &nopt, &ncb, d, &d->nodes, err) < 0)
        return err->code;
    if (sched_records_new(base, client, d->state,
                          o->record_namespace != NULL ? o->record_namespace
                                                      : SCHED_RECORD_NAMESPACE_DEFAULT,
                          &d->records, err) < 0)
        return err->code;
    d->resizer = sched_resizer_new(client, d->state, d->records);
    if (sched->webhook_dra) {
        if (o->webhook_client_ca == NULL)
            return vg_err_set(err, -EPERM,
                              "--webhook-dra creates objects with vgpu-scheduler's credentials: "
                              "it needs --webhook-client-ca, so that only kube-apiserver's "
                              "reviews are acted on (docs/scheduler.md, \"Admission webhook\")");
        struct sched_dra_template_options dto;
        sched_dra_template_options_default(&dto);
        if (o->dra != NULL)
            dto = *o->dra;
        if (sched_dra_templates_new(base, client, &dto, &d->dra, err) < 0)
            return err->code;
    }

    d->retry = event_new(base, -1, 0, retry_parked, d);
    if (d->retry == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create the filter retry event");
    d->http = evhttp_new(base);
    if (d->http == NULL)
        return vg_err_set(err, -ENOMEM, "cannot create the HTTP server");
    evhttp_set_max_body_size(d->http, SCHED_MAX_BODY_BYTES);
    evhttp_set_allowed_methods(d->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD);
    if (ext_tls) {
        d->ext_ssl = server_ctx(o->tls_cert, o->tls_key, o->client_ca, "extender", err);
        if (d->ext_ssl == NULL)
            return err->code;
        d->need_cert = o->client_ca != NULL;
    }
    /* Each listener's connections are capped from RLIMIT_NOFILE, a share each. */
    unsigned listeners = o->webhook_listen != NULL ? 2 : 1;
    if (guarded_init(d, &d->ext_guard, "extender", d->ext_ssl, listeners, err) < 0)
        return err->code;
    d->ext_guard.handle = handle_extender;
    evhttp_set_bevcb(d->http, guarded_bev, &d->ext_guard);
    evhttp_set_gencb(d->http, guarded_request, &d->ext_guard);
    bool loopback = false;
    if (listen_on(d->http, &d->ext_guard, o->listen, &d->port, &loopback, err) < 0)
        return err->code;
    if (!loopback && !ext_tls)
        return vg_err_set(err, -EPERM,
                          "refusing to serve the extender on %.64s (not loopback) without TLS "
                          "and client authentication: listen on 127.0.0.1 (the default), or "
                          "give --tls-cert and --tls-key with --client-ca or --token-file",
                          o->listen);
    uint16_t webhook_port = 0;
    if (o->webhook_listen != NULL) {
        d->ssl = server_ctx(o->tls_cert, o->tls_key, o->webhook_client_ca, "webhook", err);
        if (d->ssl == NULL)
            return err->code;
        d->need_webhook_cert = o->webhook_client_ca != NULL;
        d->https = evhttp_new(base);
        if (d->https == NULL)
            return vg_err_set(err, -ENOMEM, "cannot create the HTTPS server");
        evhttp_set_max_body_size(d->https, SCHED_MAX_BODY_BYTES);
        if (guarded_init(d, &d->hook_guard, "webhook", d->ssl, listeners, err) < 0)
            return err->code;
        d->hook_guard.handle = handle_webhook;
        evhttp_set_bevcb(d->https, guarded_bev, &d->hook_guard);
        evhttp_set_gencb(d->https, guarded_request, &d->hook_guard);
        bool webhook_loopback;
        if (listen_on(d->https, &d->hook_guard, o->webhook_listen, &webhook_port, &webhook_loopback,
                      err) < 0)
            return err->code;
    }
    if (write_port_file(o->port_file, d->port, err) < 0 ||
        write_port_file(o->webhook_port_file, webhook_port, err) < 0)
        return err->code;
    d->timer = event_new(base, -1, EV_PERSIST, tick, d);
    struct timeval second = {1, 0};
    if (d->timer == NULL || event_add(d->timer, &second) < 0)
        return vg_err_set(err, -ENOMEM, "cannot start the expiry timer");
    /* The pods are listed once the records are in: a bound pod is charged from its
     * record, never from its annotation alone when it has one. Last: nothing above may
     * fail with this request in flight. */
    sched_records_load(d->records, records_loaded, d);
    *out = vg_steal_ptr(&d);
    return 0;
}

void sched_daemon_free(struct sched_daemon *d)
{
    if (d == NULL)
        return;
    if (d->timer != NULL)
        event_free(d->timer);
    if (d->retry != NULL)
        event_free(d->retry);
    /* Filters still parked: evhttp_free below ends their connections and requests. */
    while (d->parked != NULL) {
        struct parked_filter *pf = d->parked;
        d->parked = pf->next;
        free(pf);
    }
    if (d->http != NULL)
        evhttp_free(d->http);
    if (d->https != NULL)
        evhttp_free(d->https);
    guarded_free(&d->ext_guard);
    guarded_free(&d->hook_guard);
    vg_buf_free(&d->metrics_buf); /* after the servers: a reply may still refer to it */
    if (d->ssl != NULL)
        SSL_CTX_free(d->ssl);
    if (d->ext_ssl != NULL)
        SSL_CTX_free(d->ext_ssl);
    OPENSSL_cleanse(d->token, sizeof d->token);
    kube_watch_free(d->nodes);
    kube_watch_free(d->pods);
    sched_resizer_free(d->resizer);
    sched_records_free(d->records);
    sched_dra_templates_free(d->dra);
    sched_state_free(d->state);
    free(d);
}

uint16_t sched_daemon_port(const struct sched_daemon *d)
{
    return d->port;
}

const struct sched_state *sched_daemon_state(const struct sched_daemon *d)
{
    return d->state;
}
