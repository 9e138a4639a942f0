/* The scheduler daemon (src/scheduler/daemon.h) in one process: the daemon, its kube
 * client and this test's HTTP client share one libevent loop, against the test API server
 * (tests/kube_api_server.py, which takes pods/binding as kube-apiserver does: uid and
 * resourceVersion preconditions, nodeName and annotations in one write).
 *
 * The bind flow: a filtered pod's bind posts one binding that sets the promised node and
 * the decision annotation naming the GPU and share; a bind without a live promise, or to
 * another node, writes nothing; a 409 drops the promise, a 500 keeps it. The metrics: the
 * text is well-formed Prometheus exposition, and follows what the watches and the verbs
 * change. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "../lib/kube_test_server.h"
#include "annot/annot.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "kube/kube.h"
#include "scheduler/daemon.h"

#define GPU_MIB 16000 /* each test node has one GPU of this much memory, four slots */

static pid_t server_pid;
static char server_url[64];
static char port_file[128];
static struct event_base *base;
static struct event *ticker;
static struct kube_client *api;    /* the test's own requests to the API server */
static struct kube_client *client; /* the daemon's */
static struct sched_daemon *sd;
static int pod_seq;
static char created[16][64]; /* this test's pods: finished at teardown */
static size_t created_count;

static void tick_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    (void)arg;
}

/* Runs the loop until cond(arg) holds or timeout_s passes; returns cond's final value. */
/* ---- the test's requests to the API server --------------------------------------- */

struct api_reply {
    bool done;
    long status;
    json_t *body;
};

static void api_cb(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)err;
    struct api_reply *r = arg;
    r->done = true;
    r->status = status;
    r->body = json_incref(body);
}

static bool api_done(void *arg)
{
    return ((struct api_reply *)arg)->done;
}

/* Returns the response body (owned) of a request that must answer `want`. */
static json_t *api_call(const char *method, const char *path, const char *json_text, long want)
{
    struct api_reply r = {0};
    json_t *body = json_text != NULL ? json_loads(json_text, 0, NULL) : NULL;
    if (json_text != NULL)
        assert_non_null(body);
    struct vg_err err = {0};
    int rc;
    if (strcmp(method, "GET") == 0)
        rc = kube_get(api, path, api_cb, &r, &err);
    else if (strcmp(method, "POST") == 0)
        rc = kube_post(api, path, body, api_cb, &r, &err);
    else
        rc = kube_patch(api, path, "application/merge-patch+json", body, api_cb, &r, &err);
    json_decref(body);
    assert_int_equal(rc, 0);
    assert_true(kts_run_until(base, api_done, &r, 20));
    if (r.status != want)
        fail_msg("%s %s: HTTP %ld, wanted %ld", method, path, r.status, want);
    return r.body;
}

static void admin(const char *what, const char *json_text)
{
    char path[64];
    (void)vg_snprintf(path, sizeof path, "/admin/%s", what);
    json_decref(api_call("POST", path, json_text != NULL ? json_text : "{}", 200));
}

static long api_bindings(void)
{
    json_t *stats = api_call("GET", "/admin/stats", NULL, 200);
    long n = (long)json_integer_value(json_object_get(stats, "bindings"));
    json_decref(stats);
    return n;
}

static json_t *get_pod(const char *name)
{
    char path[256];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s", name);
    return api_call("GET", path, NULL, 200);
}

/* A node object with one GPU in its vgpu.io/gpus inventory (docs/protocol.md). */
static char *node_text(const char *name)
{
    char inventory[512];
    (void)vg_snprintf(inventory, sizeof inventory,
                      "{\"version\":1,\"heartbeat\":%lld,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":"
                      "\"GPU-%s-0\",\"index\":0,\"model\":\"NVIDIA H100 80GB HBM3\","
                      "\"memoryMiB\":%d,\"cores\":100,\"slots\":4,\"numa\":0,\"healthy\":true}]}",
                      (long long)time(NULL), name, GPU_MIB);
    json_t *node = json_pack("{s:{s:s,s:{s:s}}}", "metadata", "name", name, "annotations",
                             ANNOT_KEY_GPUS, inventory);
    char *text = json_dumps(node, JSON_COMPACT);
    json_decref(node);
    return text;
}

/* A new pending pod with one container asking for one GPU with mem MiB and cores %;
 * returns the object as the API holds it (uid, resourceVersion), owned. */
static json_t *create_pod(char *name, size_t size, int mem, int cores)
{
    (void)vg_snprintf(name, size, "p-%d-%d", (int)getpid(), ++pod_seq);
    assert_true(created_count < 16);
    (void)vg_strlcpy(created[created_count++], name, sizeof created[0]);
    char mem_text[32], cores_text[32];
    (void)vg_snprintf(mem_text, sizeof mem_text, "%d", mem);
    (void)vg_snprintf(cores_text, sizeof cores_text, "%d", cores);
    json_t *pod = json_pack(
        "{s:{s:s,s:s},s:{s:s,s:[{s:s,s:s,s:{s:{s:s,s:s,s:s}}}]},s:{s:s}}", "metadata", "name", name,
        "namespace", "default", "spec", "schedulerName", "vgpu-scheduler", "containers", "name",
        "main", "image", "cuda", "resources", "limits", "nvidia.com/gpu", "1", "nvidia.com/gpumem",
        mem_text, "nvidia.com/gpucores", cores_text, "status", "phase", "Pending");
    char *text = json_dumps(pod, JSON_COMPACT);
    json_decref(pod);
    json_t *object = api_call("POST", "/api/v1/namespaces/default/pods", text, 201);
    free(text);
    return object;
}

/* ---- the test's requests to the daemon ------------------------------------------- */

struct http_reply {
    bool done;
    int code;
    char *body;
    char content_type[64];
};

static void http_cb(struct evhttp_request *req, void *arg)
{
    struct http_reply *r = arg;
    r->done = true;
    if (req == NULL)
        return;
    r->code = evhttp_request_get_response_code(req);
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    r->body = xmalloc(len + 1);
    evbuffer_remove(in, r->body, len);
    r->body[len] = '\0';
    const char *ct = evhttp_find_header(evhttp_request_get_input_headers(req), "Content-Type");
    (void)vg_strlcpy(r->content_type, ct != NULL ? ct : "", sizeof r->content_type);
}

static bool http_done(void *arg)
{
    return ((struct http_reply *)arg)->done;
}

/* One request to the daemon; returns the body (owned) and the status in *code. */
static char *daemon_call(enum evhttp_cmd_type method, const char *path, const char *body, int *code,
                         char *content_type, size_t ct_size)
{
    struct evhttp_connection *conn =
        evhttp_connection_base_new(base, NULL, "127.0.0.1", sched_daemon_port(sd));
    assert_non_null(conn);
    struct http_reply r = {0};
    struct evhttp_request *req = evhttp_request_new(http_cb, &r);
    assert_non_null(req);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Host", "127.0.0.1");
    if (body != NULL) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
                          "application/json");
        evbuffer_add(evhttp_request_get_output_buffer(req), body, strlen(body));
    }
    assert_int_equal(evhttp_make_request(conn, req, method, path), 0);
    assert_true(kts_run_until(base, http_done, &r, 20));
    evhttp_connection_free(conn);
    assert_non_null(r.body);
    *code = r.code;
    if (content_type != NULL)
        (void)vg_strlcpy(content_type, r.content_type, ct_size);
    return r.body;
}

/* POST path with a JSON body that must answer 200 with JSON; the parsed answer, owned. */
static json_t *daemon_post(const char *path, json_t *body)
{
    char *text = json_dumps(body, JSON_COMPACT);
    int code = 0;
    char *out = daemon_call(EVHTTP_REQ_POST, path, text, &code, NULL, 0);
    free(text);
    if (code != 200)
        fail_msg("POST %s: HTTP %d %s", path, code, out);
    json_t *answer = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(answer);
    return answer;
}

/* kube-scheduler's filter over both nodes; the node chosen, or "" when none fits. */
static void filter(json_t *pod, char *node, size_t size)
{
    json_t *args =
        json_pack("{s:O,s:n,s:[s,s]}", "Pod", pod, "Nodes", "NodeNames", "node-a", "node-b");
    json_t *result = daemon_post("/filter", args);
    json_decref(args);
    json_t *names = json_object_get(result, "NodeNames");
    node[0] = '\0';
    if (json_array_size(names) > 0) {
        assert_int_equal(json_array_size(names), 1);
        (void)vg_strlcpy(node, json_string_value(json_array_get(names, 0)), size);
    }
    json_decref(result);
}

/* kube-scheduler's bind; the ExtenderBindingResult's Error ("" on success), owned. */
static char *bind_pod(json_t *pod, const char *node)
{
    json_t *meta = json_object_get(pod, "metadata");
    json_t *args = json_pack("{s:O,s:O,s:O,s:s}", "PodName", json_object_get(meta, "name"),
                             "PodNamespace", json_object_get(meta, "namespace"), "PodUID",
                             json_object_get(meta, "uid"), "Node", node);
    json_t *result = daemon_post("/bind", args);
    json_decref(args);
    const char *error = json_string_value(json_object_get(result, "Error"));
    assert_non_null(error);
    char *copy = xstrdup(error);
    json_decref(result);
    return copy;
}

static char *metrics(void)
{
    int code = 0;
    char ctype[64];
    char *text = daemon_call(EVHTTP_REQ_GET, "/metrics", NULL, &code, ctype, sizeof ctype);
    assert_int_equal(code, 200);
    assert_string_equal(ctype, "text/plain; version=0.0.4");
    return text;
}

/* The value of one series ("name{labels}" exactly as written); fails when absent. */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *line = text; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (end == NULL)
            end = line + strlen(line);
        if ((size_t)(end - line) > n && strncmp(line, series, n) == 0 && line[n] == ' ')
            return strtod(line + n + 1, NULL);
        line = *end == '\n' ? end + 1 : end;
    }
    fail_msg("metric %s is missing", series);
    return -1;
}

static double metric_now(const char *series)
{
    char *text = metrics();
    double v = metric(text, series);
    free(text);
    return v;
}

/* Memory the daemon holds charged on node's GPU, promises included (bound_only false). */
static long used_mib(const char *node, bool bound_only)
{
    int code = 0;
    char *text = daemon_call(EVHTTP_REQ_GET, bound_only ? "/debug/state-bound" : "/debug/state",
                             NULL, &code, NULL, 0);
    assert_int_equal(code, 200);
    json_t *state = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(state);
    assert_string_equal(json_string_value(json_object_get(state, "invariants")), "ok");
    json_t *gpus = json_object_get(json_object_get(state, "nodes"), node);
    long mib = (long)json_integer_value(json_object_get(json_array_get(gpus, 0), "memUsedMiB"));
    json_decref(state);
    return mib;
}

/* ---- waiting for the watches ------------------------------------------------------ */

struct want_stats {
    uint64_t nodes, assumed, bound;
};

static bool stats_match(void *arg)
{
    const struct want_stats *w = arg;
    struct sched_stats st;
    sched_state_stats(sched_daemon_state(sd), &st);
    return st.nodes_with_inventory == w->nodes && st.assumed == w->assumed && st.bound == w->bound;
}

static void wait_stats(uint64_t nodes, uint64_t assumed, uint64_t bound)
{
    struct want_stats w = {nodes, assumed, bound};
    if (!kts_run_until(base, stats_match, &w, 20)) {
        struct sched_stats st;
        sched_state_stats(sched_daemon_state(sd), &st);
        fail_msg("the watches did not converge: nodes %llu assumed %llu bound %llu",
                 (unsigned long long)st.nodes_with_inventory, (unsigned long long)st.assumed,
                 (unsigned long long)st.bound);
    }
}

/* ---- fixtures --------------------------------------------------------------------- */

static int spawn_server(void)
{
    (void)vg_snprintf(port_file, sizeof port_file, "/tmp/vgpu-sched-daemon-port-%d", (int)getpid());
    const char *args[] = {"--bookmark-interval", "0.2", NULL};
    return kts_server_start("python3", KUBE_API_SERVER, port_file, args, &server_pid);
}

static int group_setup(void **state)
{
    (void)state;
    vg_log_max_level = VG_LOG_ERROR;
    int port = spawn_server();
    if (port <= 0) {
        fprintf(stderr, "test API server did not start (python3 %s)\n", KUBE_API_SERVER);
        return -1;
    }
    (void)vg_snprintf(server_url, sizeof server_url, "http://127.0.0.1:%d", port);
    base = event_base_new();
    ticker = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 10000};
    event_add(ticker, &tv);
    struct kube_config config = {.server = server_url};
    struct vg_err err = {0};
    if (kube_client_new(base, &config, NULL, &api, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    const char *const nodes[] = {"node-a", "node-b"};
    for (size_t i = 0; i < 2; i++) {
        char *text = node_text(nodes[i]);
        json_decref(api_call("POST", "/api/v1/nodes", text, 201));
        free(text);
    }
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    kube_client_free(api);
    event_free(ticker);
    event_base_free(base);
    kts_server_stop(server_pid, port_file);
    return 0;
}

/* A fresh daemon per test (its counters start at zero), synced with the API. */
static int daemon_setup(void **state)
{
    (void)state;
    struct kube_config config = {.server = server_url};
    struct vg_err err = {0};
    struct sched_options o;
    sched_options_default(&o);
    const struct sched_daemon_options dopt = {.listen = "127.0.0.1:0", .debug_state = true};
    if (kube_client_new(base, &config, NULL, &client, &err) < 0 ||
        sched_daemon_new(base, client, &o, &dopt, &sd, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    assert_true(sched_daemon_port(sd) > 0);
    return 0;
}

static int daemon_teardown(void **state)
{
    (void)state;
    sched_daemon_free(sd);
    sd = NULL;
    kube_client_free(client);
    client = NULL;
    admin("reset", NULL);
    /* The next test's daemon starts from an empty model: this one's pods are finished. */
    for (size_t i = 0; i < created_count; i++) {
        char path[256];
        (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s", created[i]);
        json_decref(api_call("PATCH", path, "{\"status\":{\"phase\":\"Succeeded\"}}", 200));
    }
    created_count = 0;
    return 0;
}

/* Waits for the first lists, then for every pod bound earlier to be charged. */
static void wait_ready(void)
{
    int code = 0;
    double deadline = kts_now_s() + 20;
    do {
        free(daemon_call(EVHTTP_REQ_GET, "/readyz", NULL, &code, NULL, 0));
        if (code != 200) {
            struct timeval tv = {0, 20000};
            event_base_loopexit(base, &tv);
            event_base_dispatch(base);
        }
    } while (code != 200 && kts_now_s() < deadline);
    assert_int_equal(code, 200);
}

/* ---- the bind flow ---------------------------------------------------------------- */

static void test_bind_posts_node_and_decision(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, 4000, 30);
    long before = api_bindings();
    filter(pod, node, sizeof node);
    assert_true(strcmp(node, "node-a") == 0 || strcmp(node, "node-b") == 0);
    char *error = bind_pod(pod, node);
    assert_string_equal(error, "");
    free(error);
    assert_int_equal(api_bindings(), before + 1);

    /* The API holds what the daemon posted: the node, and the decision naming that node's
     * GPU with the pod's share. */
    json_t *written = get_pod(name);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(written, "spec"), "nodeName")), node);
    const char *text = json_string_value(json_object_get(
        json_object_get(json_object_get(written, "metadata"), "annotations"), ANNOT_KEY_DECISION));
    assert_non_null(text);
    struct annot_decision d;
    struct vg_err err = {0};
    assert_int_equal(annot_decision_decode(text, strlen(text), &d, &err), 0);
    assert_string_equal(d.node, node);
    assert_int_equal(d.container_count, 1);
    assert_string_equal(d.containers[0].name, "main");
    assert_int_equal(d.containers[0].gpu_count, 1);
    char uuid[80];
    (void)vg_snprintf(uuid, sizeof uuid, "GPU-%s-0", node);
    assert_string_equal(d.containers[0].gpus[0].uuid, uuid);
    assert_int_equal(d.containers[0].gpus[0].memory_mib, 4000);
    assert_int_equal(d.containers[0].gpus[0].cores, 30);
    json_decref(written);

    /* The share is the pod's now, no longer a promise, and stays once the watch shows the
     * write. */
    assert_int_equal(used_mib(node, true), 4000);
    wait_stats(2, 0, 1);
    assert_int_equal(used_mib(node, true), 4000);
    json_decref(pod);
}

static void test_bind_without_a_fit_writes_nothing(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, GPU_MIB + 1, 10);
    long before = api_bindings();
    filter(pod, node, sizeof node);
    assert_string_equal(node, ""); /* no GPU has the memory */
    char *error = bind_pod(pod, "node-a");
    assert_non_null(strstr(error, "no live filter decision"));
    free(error);
    assert_int_equal(api_bindings(), before);
    json_t *written = get_pod(name);
    assert_null(json_object_get(json_object_get(written, "spec"), "nodeName"));
    json_decref(written);
    assert_int_equal(used_mib("node-a", false), 0);
    assert_int_equal(used_mib("node-b", false), 0);
    json_decref(pod);
}

static void test_bind_to_another_node_is_refused(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, 2000, 10);
    long before = api_bindings();
    filter(pod, node, sizeof node);
    const char *other = strcmp(node, "node-a") == 0 ? "node-b" : "node-a";
    char *error = bind_pod(pod, other);
    assert_non_null(strstr(error, "was promised node"));
    free(error);
    assert_int_equal(api_bindings(), before);
    /* The promise stands: the bind to the promised node goes through. */
    assert_int_equal(used_mib(node, false), 2000);
    error = bind_pod(pod, node);
    assert_string_equal(error, "");
    free(error);
    assert_int_equal(api_bindings(), before + 1);
    json_decref(pod);
}

static void inject_binding_fault(const char *name, int status)
{
    char faults[256];
    (void)vg_snprintf(faults, sizeof faults,
                      "{\"fail_next\":1,\"fail_status\":%d,\"match\":\"POST "
                      "/api/v1/namespaces/default/pods/%s/binding\"}",
                      status, name);
    admin("faults", faults);
}

static void test_bind_conflict_drops_the_promise(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, 3000, 10);
    filter(pod, node, sizeof node);
    assert_int_equal(used_mib(node, false), 3000);
    inject_binding_fault(name, 409);
    char *error = bind_pod(pod, node);
    assert_non_null(strstr(error, "binding the pod failed"));
    assert_non_null(strstr(error, "conflict"));
    free(error);
    json_t *written = get_pod(name);
    assert_null(json_object_get(json_object_get(written, "spec"), "nodeName"));
    json_decref(written);
    assert_int_equal(used_mib(node, false), 0); /* refused: the share is free again */
    char *text = metrics();
    assert_true(metric(text, "vgpu_scheduler_binds_total{result=\"error\"}") == 1);
    assert_true(metric(text, "vgpu_scheduler_binds_total{result=\"ok\"}") == 0);
    assert_true(metric(text, "vgpu_scheduler_errors_total{kind=\"api\"}") == 1);
    free(text);
    json_decref(pod);
}

static void test_bind_unknown_outcome_keeps_the_promise(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, 3000, 10);
    filter(pod, node, sizeof node);
    inject_binding_fault(name, 500);
    char *error = bind_pod(pod, node);
    assert_non_null(strstr(error, "binding the pod failed"));
    free(error);
    /* A 500 may have written: the share stays charged as a promise, not as bound. */
    assert_int_equal(used_mib(node, false), 3000);
    assert_int_equal(used_mib(node, true), 0);
    json_decref(pod);
}

static void test_bad_requests(void **state)
{
    (void)state;
    wait_ready();
    int code = 0;
    /* A 400 says what is wrong, in the Error field. */
    char *body = daemon_call(EVHTTP_REQ_POST, "/bind", "{\"PodName\":", &code, NULL, 0);
    assert_int_equal(code, 400);
    assert_non_null(strstr(body, "\"Error\":\"malformed JSON"));
    free(body);
    body = daemon_call(EVHTTP_REQ_POST, "/bind", "{\"PodName\":\"x\"}", &code, NULL, 0);
    assert_int_equal(code, 400);
    assert_non_null(strstr(body, "PodName and Node are required"));
    free(body);
    /* The webhook is served on its own TLS address only. */
    free(daemon_call(EVHTTP_REQ_POST, "/webhook", "[]", &code, NULL, 0));
    assert_int_equal(code, 404);
    free(daemon_call(EVHTTP_REQ_GET, "/bind", NULL, &code, NULL, 0));
    assert_int_equal(code, 405);
    free(daemon_call(EVHTTP_REQ_GET, "/nowhere", NULL, &code, NULL, 0));
    assert_int_equal(code, 404);
    /* Every 400, whatever the verb and however the body was wrong. */
    assert_true(metric_now("vgpu_scheduler_errors_total{kind=\"bad_request\"}") == 2);
}

/* ---- metrics ---------------------------------------------------------------------- */

/* Prometheus text exposition 0.0.4: every sample belongs to a family announced by one
 * HELP and one TYPE line before it; names and labels are well-formed; values are
 * numbers; no series twice; histogram buckets rise with le, end at +Inf, and +Inf equals
 * _count. */
static bool name_char(char c, bool first)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (!first && c >= '0' && c <= '9');
}

static void check_exposition(const char *text)
{
    char family[128] = "", type[32] = "", help_of[128] = "";
    /* The per-GPU and per-container series carry five or six labels each. */
    static char seen[4096][512];
    size_t seen_count = 0;
    char hist_series[512] = "";
    double last_bucket = -1, last_le = -1;
    bool inf = false;
    size_t samples = 0;
    char *copy = xstrdup(text);
    assert_true(strlen(copy) > 0 && copy[strlen(copy) - 1] == '\n');
    for (char *line = copy, *next; *line != '\0'; line = next) {
        char *nl = strchr(line, '\n');
        *nl = '\0';
        next = nl + 1;
        assert_true(line[0] != '\0');
        if (strncmp(line, "# HELP ", 7) == 0) {
            char *sp = strchr(line + 7, ' ');
            assert_non_null(sp);
            assert_true(sp[1] != '\0');
            *sp = '\0';
            (void)vg_strlcpy(help_of, line + 7, sizeof help_of);
            continue;
        }
        if (strncmp(line, "# TYPE ", 7) == 0) {
            char *sp = strchr(line + 7, ' ');
            assert_non_null(sp);
            *sp = '\0';
            assert_string_equal(line + 7, help_of); /* HELP first, then TYPE */
            (void)vg_strlcpy(family, line + 7, sizeof family);
            (void)vg_strlcpy(type, sp + 1, sizeof type);
            assert_true(strcmp(type, "gauge") == 0 || strcmp(type, "counter") == 0 ||
                        strcmp(type, "histogram") == 0);
            continue;
        }
        assert_true(line[0] != '#');
        /* name{labels} value */
        char *p = line;
        assert_true(name_char(*p, true));
        while (name_char(*p, false))
            p++;
        size_t name_len = (size_t)(p - line);
        char name[128];
        assert_true(name_len < sizeof name);
        memcpy(name, line, name_len);
        name[name_len] = '\0';
        assert_true(family[0] != '\0');
        if (strcmp(type, "histogram") == 0) {
            size_t f = strlen(family);
            assert_true(strncmp(name, family, f) == 0);
            assert_true(strcmp(name + f, "_bucket") == 0 || strcmp(name + f, "_sum") == 0 ||
                        strcmp(name + f, "_count") == 0);
        } else {
            assert_string_equal(name, family);
        }
        char le[32] = "";
        char others[512] = "";
        if (*p == '{') {
            p++;
            while (*p != '}') {
                char *eq = strchr(p, '=');
                assert_non_null(eq);
                assert_true(eq > p && name_char(*p, true));
                for (char *q = p; q < eq; q++)
                    assert_true(name_char(*q, false));
                assert_int_equal(eq[1], '"');
                char *close = strchr(eq + 2, '"');
                assert_non_null(close);
                if (eq - p == 2 && strncmp(p, "le", 2) == 0)
                    (void)vg_snprintf(le, sizeof le, "%.*s", (int)(close - eq - 2), eq + 2);
                else {
                    size_t used = strlen(others);
                    (void)vg_snprintf(others + used, sizeof others - used, "%.*s,",
                                      (int)(close + 1 - p), p);
                }
                p = close + 1;
                assert_true(*p == ',' || *p == '}');
                if (*p == ',')
                    p++;
            }
            p++;
        }
        assert_int_equal(*p, ' ');
        char *end = NULL;
        double value = strtod(p + 1, &end);
        assert_true(end != p + 1 && *end == '\0');
        assert_true(value >= 0);
        /* No series twice. */
        char series[512];
        size_t series_len = (size_t)(p - line);
        assert_true(series_len < sizeof series);
        memcpy(series, line, series_len);
        series[series_len] = '\0';
        for (size_t i = 0; i < seen_count; i++)
            assert_string_not_equal(seen[i], series);
        assert_true(seen_count < 4096);
        (void)vg_strlcpy(seen[seen_count++], series, sizeof seen[0]);
        samples++;
        /* Histograms: cumulative buckets per label set, +Inf last and equal to _count. */
        if (strcmp(type, "histogram") == 0) {
            char key[512];
            (void)vg_snprintf(key, sizeof key, "%s", others);
            if (strstr(name, "_bucket") != NULL) {
                assert_true(le[0] != '\0');
                if (strcmp(hist_series, key) != 0) {
                    (void)vg_strlcpy(hist_series, key, sizeof hist_series);
                    last_bucket = -1;
                    last_le = -1;
                    inf = false;
                }
                assert_false(inf); /* +Inf is the last bucket */
                double bound = strcmp(le, "+Inf") == 0 ? (double)INFINITY : strtod(le, NULL);
                inf = strcmp(le, "+Inf") == 0;
                assert_true(bound > last_le);
                assert_true(value >= last_bucket);
                last_le = bound;
                last_bucket = value;
            } else if (strstr(name, "_count") != NULL) {
                assert_string_equal(hist_series, key);
                assert_true(inf);
                assert_true(value == last_bucket); /* _count equals the +Inf bucket */
            }
        }
    }
    assert_true(samples > 20);
    free(copy);
}

static void test_metrics_are_well_formed(void **state)
{
    (void)state;
    wait_ready();
    char name[64], node[64];
    json_t *pod = create_pod(name, sizeof name, 1000, 10);
    filter(pod, node, sizeof node);
    char *error = bind_pod(pod, node);
    assert_string_equal(error, "");
    free(error);
    char *text = metrics();
    check_exposition(text);
    /* One HELP per family. */
    assert_non_null(strstr(text, "# TYPE vgpu_scheduler_request_duration_seconds histogram\n"));
    assert_non_null(
        strstr(text, "vgpu_scheduler_request_duration_seconds_bucket{verb=\"bind\",le=\"+Inf\"}"));
    free(text);
    json_decref(pod);
}

static void test_metrics_follow_the_state(void **state)
{
    (void)state;
    wait_ready();
    char *text = metrics();
    assert_true(metric(text, "vgpu_scheduler_nodes{inventory=\"any\"}") == 2);
    assert_true(metric(text, "vgpu_scheduler_nodes{inventory=\"valid\"}") == 2);
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"assumed\"}") == 0);
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"bound\"}") == 0);
    assert_true(metric(text, "vgpu_scheduler_decisions_total{result=\"fit\"}") == 0);
    assert_true(metric(text, "vgpu_scheduler_request_duration_seconds_count{verb=\"filter\"}") ==
                0);
    assert_true(metric(text, "vgpu_scheduler_gpu_memory_used_mib{node=\"node-a\",uuid=\"GPU-node-"
                             "a-0\"}") == 0);
    free(text);

    /* Filtered: a promise, charged to the GPU chosen. */
    char name[64], node[64], mem_series[160], cores_series[160], tenants_series[160];
    json_t *pod = create_pod(name, sizeof name, 5000, 40);
    filter(pod, node, sizeof node);
    assert_true(node[0] != '\0');
    (void)vg_snprintf(mem_series, sizeof mem_series,
                      "vgpu_scheduler_gpu_memory_used_mib{node=\"%s\",uuid=\"GPU-%s-0\"}", node,
                      node);
    (void)vg_snprintf(cores_series, sizeof cores_series,
                      "vgpu_scheduler_gpu_cores_used_percent{node=\"%s\",uuid=\"GPU-%s-0\"}", node,
                      node);
    (void)vg_snprintf(tenants_series, sizeof tenants_series,
                      "vgpu_scheduler_gpu_tenants{node=\"%s\",uuid=\"GPU-%s-0\"}", node, node);
    text = metrics();
    assert_true(metric(text, "vgpu_scheduler_decisions_total{result=\"fit\"}") == 1);
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"assumed\"}") == 1);
    assert_true(metric(text, "vgpu_scheduler_request_duration_seconds_count{verb=\"filter\"}") ==
                1);
    assert_true(metric(text, mem_series) == 5000);
    assert_true(metric(text, cores_series) == 40);
    assert_true(metric(text, tenants_series) == 1);
    free(text);

    /* Bound: the promise becomes the pod's. */
    char *error = bind_pod(pod, node);
    assert_string_equal(error, "");
    free(error);
    wait_stats(2, 0, 1);
    text = metrics();
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"assumed\"}") == 0);
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"bound\"}") == 1);
    assert_true(metric(text, "vgpu_scheduler_binds_total{result=\"ok\"}") == 1);
    assert_true(metric(text, "vgpu_scheduler_request_duration_seconds_count{verb=\"bind\"}") == 1);
    assert_true(metric(text, mem_series) == 5000);
    free(text);

    /* The pod finishes (the watch shows it Succeeded): its share is released. */
    char path[256];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/default/pods/%s", name);
    json_decref(api_call("PATCH", path, "{\"status\":{\"phase\":\"Succeeded\"}}", 200));
    wait_stats(2, 0, 0);
    text = metrics();
    assert_true(metric(text, "vgpu_scheduler_pods{state=\"bound\"}") == 0);
    assert_true(metric(text, mem_series) == 0);
    assert_true(metric(text, cores_series) == 0);
    assert_true(metric(text, tenants_series) == 0);
    free(text);

    /* A node loses its inventory: still known, no longer valid; and gets it back. */
    json_decref(api_call("PATCH", "/api/v1/nodes/node-b",
                         "{\"metadata\":{\"annotations\":{\"vgpu.io/gpus\":null}}}", 200));
    wait_stats(1, 0, 0);
    text = metrics();
    assert_true(metric(text, "vgpu_scheduler_nodes{inventory=\"any\"}") == 2);
    assert_true(metric(text, "vgpu_scheduler_nodes{inventory=\"valid\"}") == 1);
    free(text);
    char *node_b = node_text("node-b");
    json_decref(api_call("PATCH", "/api/v1/nodes/node-b", node_b, 200));
    free(node_b);
    wait_stats(2, 0, 0);
    json_decref(pod);
}

/* ---- start-up errors -------------------------------------------------------------- */

static void expect_refused(const struct sched_daemon_options *o, int code, const char *msg)
{
    struct sched_options so;
    sched_options_default(&so);
    struct sched_daemon *d = (struct sched_daemon *)(uintptr_t)1; /* must be reset to NULL */
    struct vg_err err = {0};
    assert_int_equal(sched_daemon_new(base, client, &so, o, &d, &err), code);
    assert_null(d);
    if (strstr(err.msg, msg) == NULL)
        fail_msg("'%s' does not say '%s'", err.msg, msg);
}

static void test_new_refuses_bad_options(void **state)
{
    (void)state;
    expect_refused(&(struct sched_daemon_options){.listen = NULL}, -EINVAL,
                   "no address to listen on");
    expect_refused(&(struct sched_daemon_options){.listen = "8888"}, -EINVAL,
                   "'8888' is not ADDR:PORT");
    expect_refused(&(struct sched_daemon_options){.listen = "127.0.0.1:65536"}, -ERANGE,
                   "port of '127.0.0.1:65536'");
    char taken[64];
    (void)vg_snprintf(taken, sizeof taken, "127.0.0.1:%u", (unsigned)sched_daemon_port(sd));
    expect_refused(&(struct sched_daemon_options){.listen = taken}, -EADDRINUSE,
                   "cannot listen on 127.0.0.1:");
    expect_refused(
        &(struct sched_daemon_options){.listen = "127.0.0.1:0", .webhook_listen = "127.0.0.1:0"},
        -EINVAL, "needs a certificate and a key");
    expect_refused(&(struct sched_daemon_options){.listen = "127.0.0.1:0",
                                                  .webhook_listen = "127.0.0.1:0",
                                                  .tls_cert = "/nonexistent/tls.crt",
                                                  .tls_key = "/nonexistent/tls.key"},
                   -EINVAL, "cannot load the webhook certificate /nonexistent/tls.crt");
    /* The running daemon is unaffected. */
    wait_ready();
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bind_posts_node_and_decision, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_bind_without_a_fit_writes_nothing, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_bind_to_another_node_is_refused, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_bind_conflict_drops_the_promise, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_bind_unknown_outcome_keeps_the_promise, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests, daemon_setup, daemon_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_are_well_formed, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_follow_the_state, daemon_setup,
                                        daemon_teardown),
        cmocka_unit_test_setup_teardown(test_new_refuses_bad_options, daemon_setup,
                                        daemon_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
