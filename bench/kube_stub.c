/* kube_stub: a fast, single-threaded stand-in for the Kubernetes API, for vgpu-scheduler's
 * throughput benchmark (bench/scheduler.sh). tests/kube_api_server.py is the faithful
 * test server (failure injection, paging, compaction); it is one Python process and
 * cannot serve thousands of binds a second. This one serves exactly what
 * vgpu-scheduler calls, on libevent:
 *
 *   GET   /api/v1/nodes, /api/v1/pods              the whole list in one page
 *   GET   ...?watch=1&resourceVersion=RV           chunked stream of the events after RV
 *                                                  (410 ERROR event if RV is too old)
 *   GET   /api/v1/namespaces/NS/pods/P
 *   PATCH /api/v1/namespaces/NS/pods/P             JSON merge patch; metadata.resourceVersion
 *                                                  in the patch is a precondition (409)
 *   POST  /api/v1/namespaces/NS/pods/P/binding     as kube-apiserver: the Binding's
 *                                                  metadata.uid / resourceVersion are
 *                                                  preconditions (409), spec.nodeName and
 *                                                  its annotations are set in one write
 *                                                  (409 if already bound)
 *   GET/POST/DELETE /api/v1/namespaces/NS/configmaps[/N]  vgpu-scheduler's decision
 *                                                  records: an empty list, writes taken
 *
 * Nodes carry a vgpu.io/gpus inventory (docs/protocol.md) of G GPUs with 81559 MiB and
 * 10 slots each; pods are pending "default/b-NNNNN" pods asking for one GPU, 10000 MiB
 * and 10 % of its compute, or with --mixed a shape drawn per pod from a small table of
 * sharing and whole-GPU requests (fixed seed). usage:
 *   kube_stub --port-file FILE [--nodes N] [--gpus G] [--pods P] [--mixed] */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "base/mem.h"
#include "base/parse.h"
#include "base/prng.h"
#include "base/str.h"
#include "scheduler/map.h"

#define MAX_EVENTS 1000000

struct event_rec {
    unsigned long long rv;
    int kind; /* 0 nodes, 1 pods */
    char *line;
};

struct watcher {
    struct evhttp_request *req;
    int kind;
    struct watcher *next;
    struct stub *stub;
};

struct stub {
    struct event_base *base;
    unsigned long long rv;
    json_t *items[2];       /* node and pod objects, in creation order */
    struct sched_map index; /* "ns/name" -> pod json_t (borrowed from items[1]) */
    struct event_rec *events;
    size_t nevents;
    struct watcher *watchers;
    unsigned long long patches, binds, conflicts, records;
};

static void reply_json(struct evhttp_request *req, int code, const char *reason, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
    free(text);
}

/* A Status object; message and reason are this file's own literals (nothing to escape),
 * so it is printed, not built as a tree: one goes out per binding. */
static void reply_status(struct evhttp_request *req, int code, const char *reason,
                         const char *message)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b,
                        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},"
                        "\"status\":\"%s\",\"message\":\"%s\",\"reason\":\"%s\",\"code\":%d}",
                        code < 300 ? "Success" : "Failure", message, reason, code);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
}

static void set_rv(struct stub *s, json_t *obj)
{
    char rv[32];
    s->rv++;
    (void)vg_snprintf(rv, sizeof rv, "%llu", s->rv);
    json_object_set_new(json_object_get(obj, "metadata"), "resourceVersion", json_string(rv));
}

static void send_line(struct evhttp_request *req, const char *line)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, line, strlen(line));
    evbuffer_add(b, "\n", 1);
    evhttp_send_reply_chunk(req, b);
    evbuffer_free(b);
}

static void record(struct stub *s, int kind, const char *type, json_t *obj)
{
    json_t *ev = json_pack("{s:s, s:O}", "type", type, "object", obj);
    char *line = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    if (s->nevents == MAX_EVENTS) {
        fprintf(stderr, "kube_stub: event log full\n");
        exit(1);
    }
    s->events[s->nevents++] = (struct event_rec){s->rv, kind, line};
    for (struct watcher *w = s->watchers; w != NULL; w = w->next)
        if (w->kind == kind)
            send_line(w->req, line);
}

static json_t *make_node(unsigned i, unsigned gpus)
{
    char name[32];
    (void)vg_snprintf(name, sizeof name, "node-%05u", i);
    json_t *list = json_array();
    for (unsigned g = 0; g < gpus; g++) {
        char uuid[64];
        (void)vg_snprintf(uuid, sizeof uuid, "GPU-%s-%u", name, g);
        json_array_append_new(
            list, json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:i, s:b}", "uuid", uuid, "index",
                            (int)g, "model", "NVIDIA H100 80GB HBM3", "memoryMiB", 81559, "cores",
                            100, "slots", 10, "numa", (int)(g / 4), "healthy", 1));
    }
    json_t *inv = json_pack("{s:i, s:I, s:s, s:o}", "version", 1, "heartbeat",
                            (json_int_t)time(NULL), "mode", "vgpu", "gpus", list);
    char *text = json_dumps(inv, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(inv);
    json_t *node = json_pack("{s:{s:s, s:{s:s}, s:{s:s}}}", "metadata", "name", name, "labels",
                             "kubernetes.io/hostname", name, "annotations", "vgpu.io/gpus", text);
    free(text);
    return node;
}

/* --mixed: GPU count, memory MiB and cores per shape, drawn with these weights. */
static const struct shape {
    const char *gpus, *mem, *cores;
    unsigned weight;
} shapes[] = {{"1", "10000", "10", 30}, {"1", "20000", "25", 20},  {"1", "40000", "50", 15},
              {"1", "8000", "5", 15},   {"1", "81559", "100", 12}, {"2", "81559", "100", 8}};

static json_t *make_pod(unsigned i, bool mixed)
{
    char name[32];
    char uid[40];
    (void)vg_snprintf(name, sizeof name, "b-%05u", i);
    (void)vg_snprintf(uid, sizeof uid, "uid-b-%05u", i);
    const struct shape *sh = &shapes[0];
    if (mixed) {
        uint64_t state = i;
        uint64_t x = vg_splitmix64(&state); /* one draw per pod, fixed by its number */
        unsigned total = 0, pick = (unsigned)(x % 100);
        for (sh = shapes; pick >= total + sh->weight; sh++)
            total += sh->weight;
    }
    return json_pack("{s:{s:s, s:s, s:s, s:{}}, s:{s:s, s:[{s:s, s:s, s:{s:{s:s, s:s, s:s}}}]}, "
                     "s:{s:s}}",
                     "metadata", "name", name, "namespace", "default", "uid", uid, "annotations",
                     "spec", "schedulerName", "vgpu-scheduler", "containers", "name", "main",
                     "image", "cuda", "resources", "limits", "nvidia.com/gpu", sh->gpus,
                     "nvidia.com/gpumem", sh->mem, "nvidia.com/gpucores", sh->cores, "status",
                     "phase", "Pending");
}

/* RFC 7386 merge patch of patch into target (both objects). */
static void merge_patch(json_t *target, json_t *patch)
{
    const char *key;
    json_t *value;
    json_object_foreach(patch, key, value)
    {
        json_t *cur = json_object_get(target, key);
        if (json_is_null(value))
            json_object_del(target, key);
        else if (json_is_object(value) && json_is_object(cur))
            merge_patch(cur, value);
        else if (json_is_object(value)) {
            json_t *fresh = json_object();
            merge_patch(fresh, value);
            json_object_set_new(target, key, fresh);
        } else
            json_object_set(target, key, value);
    }
}

static void watcher_closed(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    struct watcher *w = arg;
    struct stub *s = w->stub;
    for (struct watcher **p = &s->watchers; *p != NULL; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    free(w);
}

static void list_or_watch(struct stub *s, struct evhttp_request *req, int kind,
                          const struct evkeyvalq *q)
{
    const char *watch = evhttp_find_header(q, "watch");
    char rv[32];
    (void)vg_snprintf(rv, sizeof rv, "%llu", s->rv);
    if (watch == NULL || strcmp(watch, "0") == 0 || strcmp(watch, "false") == 0) {
        json_t *list = json_pack("{s:s, s:s, s:{s:s}, s:O}", "kind",
                                 kind == 0 ? "NodeList" : "PodList", "apiVersion", "v1", "metadata",
                                 "resourceVersion", rv, "items", s->items[kind]);
        reply_json(req, 200, "OK", list);
        json_decref(list);
        return;
    }
    const char *from_text = evhttp_find_header(q, "resourceVersion");
    uint64_t from = 0;
    struct vg_err err = {0};
    if (from_text != NULL && from_text[0] != '\0' &&
        vg_parse_u64(from_text, 10, UINT64_MAX, &from, &err) < 0) {
        reply_status(req, 400, "BadRequest", "invalid resourceVersion");
        return;
    }
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply_start(req, 200, "OK");
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == kind && s->events[i].rv > from)
            send_line(req, s->events[i].line);
    struct watcher *w = xcalloc(1, sizeof *w);
    *w = (struct watcher){req, kind, s->watchers, s};
    s->watchers = w;
    evhttp_connection_set_closecb(evhttp_request_get_connection(req), watcher_closed, w);
}

static json_t *read_body(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *data = (const char *)evbuffer_pullup(in, (ssize_t)len);
    return json_loadb(data != NULL ? data : "", len, 0, NULL);
}

/* POST pods/P/binding, with kube-apiserver's checks in its order: name, target, the uid
 * and resourceVersion preconditions, already bound; then one write of spec.nodeName and
 * the Binding's annotations. */
static void bind_pod(struct stub *s, struct evhttp_request *req, json_t *pod, const char *name,
                     json_t *body)
{
    json_t *meta = json_object_get(body, "metadata");
    json_t *pmeta = json_object_get(pod, "metadata");
    const char *bname = json_string_value(json_object_get(meta, "name"));
    const char *node = json_string_value(json_object_get(json_object_get(body, "target"), "name"));
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    const char *rv = json_string_value(json_object_get(meta, "resourceVersion"));
    const char *have_uid = json_string_value(json_object_get(pmeta, "uid"));
    const char *have_rv = json_string_value(json_object_get(pmeta, "resourceVersion"));
    json_t *annotations = json_object_get(meta, "annotations");
    json_t *spec = json_object_get(pod, "spec");
    if (!json_is_object(body) || (bname != NULL && strcmp(bname, name) != 0)) {
        reply_status(req, 400, "BadRequest", "name in URL does not match name in Binding object");
    } else if (node == NULL || node[0] == '\0') {
        reply_status(req, 422, "Invalid", "target.name: Required value");
    } else if (annotations != NULL && !json_is_object(annotations)) {
        reply_status(req, 400, "BadRequest", "metadata.annotations must be an object");
    } else if ((uid != NULL && uid[0] != '\0' && (have_uid == NULL || strcmp(uid, have_uid))) ||
               (rv != NULL && rv[0] != '\0' && (have_rv == NULL || strcmp(rv, have_rv)))) {
        s->conflicts++;
        reply_status(req, 409, "Conflict", "Precondition failed");
    } else if (json_object_get(spec, "nodeName") != NULL) {
        s->conflicts++;
        reply_status(req, 409, "Conflict", "pod is already assigned to a node");
    } else {
        json_object_set_new(spec, "nodeName", json_string(node));
        if (annotations != NULL) {
            json_t *have = json_object_get(pmeta, "annotations");
            if (!json_is_object(have)) {
                have = json_object();
                json_object_set_new(pmeta, "annotations", have);
            }
            json_object_update(have, annotations);
        }
        set_rv(s, pod);
        s->binds++;
        record(s, 1, "MODIFIED", pod);
        reply_status(req, 201, "Created", "");
    }
}

static void handle(struct evhttp_request *req, void *arg)
{
    struct stub *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = evhttp_uri_get_path(uri);
    struct evkeyvalq q;
    const char *query = evhttp_uri_get_query(uri);
    evhttp_parse_query_str(query != NULL ? query : "", &q);
    enum evhttp_cmd_type method = evhttp_request_get_command(req);
    char ns[128], name[128], sub[32];
    int n = 0;
    if (path == NULL) {
        reply_status(req, 400, "BadRequest", "no path");
    } else if (method == EVHTTP_REQ_GET && strcmp(path, "/api/v1/nodes") == 0) {
        list_or_watch(s, req, 0, &q);
    } else if (method == EVHTTP_REQ_GET && strcmp(path, "/api/v1/pods") == 0) {
        list_or_watch(s, req, 1, &q);
    } else if ((n = sscanf(path, "/api/v1/namespaces/%127[^/]/pods/%127[^/]/%31s", ns, name,
                           sub)) >= 2) {
        char key[300];
        (void)vg_snprintf(key, sizeof key, "%s/%s", ns, name);
        json_t *pod = sched_map_get(&s->index, key);
        json_t *body = NULL;
        if (pod == NULL) {
            reply_status(req, 404, "NotFound", "pod not found");
        } else if (n == 2 && method == EVHTTP_REQ_GET) {
            reply_json(req, 200, "OK", pod);
        } else if (n == 2 && method == EVHTTP_REQ_PATCH) {
            body = read_body(req);
            const char *want = json_string_value(
                json_object_get(json_object_get(body, "metadata"), "resourceVersion"));
            const char *have = json_string_value(
                json_object_get(json_object_get(pod, "metadata"), "resourceVersion"));
            if (!json_is_object(body)) {
                reply_status(req, 400, "BadRequest", "patch is not a JSON object");
            } else if (want != NULL && (have == NULL || strcmp(want, have) != 0)) {
                s->conflicts++;
                reply_status(req, 409, "Conflict", "the object has been modified");
            } else {
                json_object_del(json_object_get(body, "metadata"), "resourceVersion");
                merge_patch(pod, body);
                set_rv(s, pod);
                s->patches++;
                record(s, 1, "MODIFIED", pod);
                reply_json(req, 200, "OK", pod);
            }
        } else if (n == 3 && strcmp(sub, "binding") == 0 && method == EVHTTP_REQ_POST) {
            body = read_body(req);
            bind_pod(s, req, pod, name, body);
        } else {
            reply_status(req, 405, "MethodNotAllowed", "not served by kube_stub");
        }
        json_decref(body);
    } else if (sscanf(path, "/api/v1/namespaces/%127[^/]/configmaps%31s", ns, sub) >= 1) {
        /* vgpu-scheduler's decision records: none at start, each write taken (counted), as
         * kube-apiserver would; the stub keeps no copy. */
        if (method == EVHTTP_REQ_GET) {
            json_t *list = json_pack("{s:s, s:s, s:{}, s:[]}", "kind", "ConfigMapList",
                                     "apiVersion", "v1", "metadata", "items");
            reply_json(req, 200, "OK", list);
            json_decref(list);
        } else if (method == EVHTTP_REQ_POST || method == EVHTTP_REQ_DELETE) {
            json_t *body = method == EVHTTP_REQ_POST ? read_body(req) : json_object();
            s->records++;
            reply_json(req, method == EVHTTP_REQ_POST ? 201 : 200, "OK", body);
            json_decref(body);
        } else {
            reply_status(req, 405, "MethodNotAllowed", "not served by kube_stub");
        }
    } else {
        reply_status(req, 404, "NotFound", "not served by kube_stub");
    }
    evhttp_clear_headers(&q);
}

static void on_signal(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    event_base_loopexit(arg, NULL);
}

int main(int argc, char **argv)
{
    const char *port_file = NULL;
    uint64_t nodes = 5000, gpus = 8, pods = 2000;
    bool mixed = false;
    struct vg_err err = {0};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;
        if (strcmp(argv[i], "--mixed") == 0) {
            mixed = true;
            continue;
        }
        if (v == NULL)
            rc = -1;
        else if (strcmp(argv[i], "--port-file") == 0)
            port_file = v;
        else if (strcmp(argv[i], "--nodes") == 0)
            rc = vg_parse_u64(v, 1, 20000, &nodes, &err);
        else if (strcmp(argv[i], "--gpus") == 0)
            rc = vg_parse_u64(v, 1, 16, &gpus, &err);
        else if (strcmp(argv[i], "--pods") == 0)
            rc = vg_parse_u64(v, 0, 100000, &pods, &err);
        else
            rc = -1;
        if (rc < 0) {
            fprintf(stderr,
                    "usage: kube_stub --port-file FILE [--nodes N] [--gpus G] [--pods P]"
                    " [--mixed] %s\n",
                    err.msg);
            return 2;
        }
        i++;
    }
    signal(SIGPIPE, SIG_IGN);
    struct stub s = {0};
    s.base = event_base_new();
    s.events = xcalloc(MAX_EVENTS, sizeof *s.events);
    s.items[0] = json_array();
    s.items[1] = json_array();
    sched_map_init(&s.index);
    for (unsigned i = 0; i < nodes; i++) {
        json_t *node = make_node(i, (unsigned)gpus);
        set_rv(&s, node);
        json_array_append_new(s.items[0], node);
    }
    for (unsigned i = 0; i < pods; i++) {
        json_t *pod = make_pod(i, mixed);
        set_rv(&s, pod);
        json_array_append_new(s.items[1], pod);
        char key[64];
        (void)vg_snprintf(
            key, sizeof key, "default/%s",
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "name")));
        sched_map_put(&s.index, key, pod);
    }
    struct evhttp *http = evhttp_new(s.base);
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PATCH);
    evhttp_set_gencb(http, handle, &s);
    struct evhttp_bound_socket *sock = evhttp_bind_socket_with_handle(http, "127.0.0.1", 0);
    if (sock == NULL) {
        fprintf(stderr, "kube_stub: cannot listen\n");
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evhttp_bound_socket_get_fd(sock), (struct sockaddr *)&ss, &sl) < 0)
        return 1;
    unsigned port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    if (port_file != NULL) {
        char tmp[4096];
        (void)vg_snprintf(tmp, sizeof tmp, "%s.tmp", port_file);
        FILE *f = fopen(tmp, "w");
        if (f == NULL || fprintf(f, "%u\n", port) < 0 || fclose(f) != 0 ||
            rename(tmp, port_file) != 0) {
            fprintf(stderr, "kube_stub: cannot write %s\n", port_file);
            return 1;
        }
    } else {
        printf("%u\n", port);
        fflush(stdout);
    }
    struct event *sigterm = evsignal_new(s.base, SIGTERM, on_signal, s.base);
    struct event *sigint = evsignal_new(s.base, SIGINT, on_signal, s.base);
    event_add(sigterm, NULL);
    event_add(sigint, NULL);
    event_base_dispatch(s.base);
    fprintf(stderr, "kube_stub: %llu patches, %llu bindings, %llu conflicts, %llu record writes\n",
            s.patches, s.binds, s.conflicts, s.records);
    event_free(sigterm);
    event_free(sigint);
    evhttp_free(http);
    for (size_t i = 0; i < s.nevents; i++)
        free(s.events[i].line);
    free(s.events);
    sched_map_release(&s.index);
    json_decref(s.items[0]);
    json_decref(s.items[1]);
    event_base_free(s.base);
    return 0;
}
