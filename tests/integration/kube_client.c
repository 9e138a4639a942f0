/* The kube client against the test API server (tests/kube_api_server.py): list + watch
 * delivers every change, bookmarks advance the resourceVersion, 410 relists, dropped
 * watches reconnect without losing events, 500s are retried with backoff, a slow
 * response does not block the loop, binding and patch conflicts reach the caller, and an
 * oversized or malformed watch line gives a clear error and a relist.
 *
 * Usage: test_kube_client PATH/TO/kube_api_server.py. One server serves every test; each
 * test uses its own objects and clears the server's faults when done. */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
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
#include "../lib/vg_skip.h"
#include "base/parse.h"
#include "base/str.h"
#include "kube/kube.h"

static const char *server_script;
static pid_t server_pid;
static char server_url[64];
static char port_file[128];
static struct event_base *base;
static struct kube_client *client;
static struct event *ticker;

static void tick_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    (void)arg;
}

/* Runs the loop until cond(arg) holds or timeout_s passes; returns cond's final value. */
/* ---- synchronous helpers over the async client ---------------------------------- */

struct reply {
    bool done;
    long status;
    json_t *body;
    struct vg_err err;
};

static void reply_cb(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct reply *r = arg;
    r->done = true;
    r->status = status;
    r->body = json_incref(body);
    r->err = *err;
}

static bool reply_done(void *arg)
{
    return ((struct reply *)arg)->done;
}

static void reply_wait(struct reply *r)
{
    assert_true(kts_run_until(base, reply_done, r, 20));
}

static void reply_clear(struct reply *r)
{
    json_decref(r->body);
    memset(r, 0, sizeof *r);
}

static long request_sync(const char *method, const char *path, const char *json_text,
                         struct reply *r)
{
    memset(r, 0, sizeof *r);
    json_t *body = NULL;
    if (json_text != NULL) {
        body = json_loads(json_text, 0, NULL);
        assert_non_null(body);
    }
    struct vg_err err = {0};
    int rc;
    if (strcmp(method, "GET") == 0)
        rc = kube_get(client, path, reply_cb, r, &err);
    else if (strcmp(method, "POST") == 0)
        rc = kube_post(client, path, body, reply_cb, r, &err);
    else
        rc = kube_patch(client, path, "application/merge-patch+json", body, reply_cb, r, &err);
    json_decref(body);
    assert_int_equal(rc, 0);
    reply_wait(r);
    return r->status;
}

static void admin(const char *path, const char *json_text)
{
    struct reply r;
    long status = request_sync("POST", path, json_text, &r);
    if (status != 200)
        fail_msg("admin %s: HTTP %ld %s", path, status, r.err.msg);
    reply_clear(&r);
}

static void create_pod(const char *name)
{
    char body[256];
    vg_snprintf(body, sizeof body, "{\"metadata\":{\"name\":\"%s\",\"labels\":{\"t\":\"x\"}}}",
                name);
    struct reply r;
    long status = request_sync("POST", "/api/v1/namespaces/default/pods", body, &r);
    if (status != 201)
        fail_msg("create %s: HTTP %ld %s", name, status, r.err.msg);
    reply_clear(&r);
}

static json_t *server_stats(void)
{
    struct reply r;
    assert_int_equal(request_sync("GET", "/admin/stats", NULL, &r), 200);
    json_t *stats = json_incref(r.body);
    reply_clear(&r);
    return stats;
}

/* ---- a watch that mirrors the collection ---------------------------------------- */

struct mirror {
    json_t *objects; /* name -> object */
    int resyncs, added, modified, deleted, errors;
    size_t last_resync_size;
    char last_error[VG_ERR_MSG_MAX];
    struct kube_watch *watch;
    bool free_on_event;
};

static const char *object_name(json_t *object)
{
    return json_string_value(json_object_get(json_object_get(object, "metadata"), "name"));
}

static void mirror_resync(void *arg, json_t *items, const char *rv)
{
    struct mirror *m = arg;
    assert_non_null(rv);
    json_object_clear(m->objects);
    size_t i;
    json_t *item;
    json_array_foreach(items, i, item) json_object_set(m->objects, object_name(item), item);
    m->resyncs++;
    m->last_resync_size = json_array_size(items);
}

static void mirror_event(void *arg, enum kube_event_type type, json_t *object)
{
    struct mirror *m = arg;
    const char *name = object_name(object);
    assert_non_null(name);
    if (type == KUBE_EVENT_DELETED) {
        m->deleted++;
        json_object_del(m->objects, name);
    } else {
        if (type == KUBE_EVENT_ADDED)
            m->added++;
        else
            m->modified++;
        json_object_set(m->objects, name, object);
    }
    if (m->free_on_event && m->watch != NULL) {
        kube_watch_free(m->watch);
        m->watch = NULL;
    }
}

static void mirror_error(void *arg, const struct vg_err *err)
{
    struct mirror *m = arg;
    m->errors++;
    vg_snprintf(m->last_error, sizeof m->last_error, "%s", err->msg);
}

static void mirror_start(struct mirror *m, const char *path, const char *label_selector,
                         uint64_t backoff_ms)
{
    memset(m, 0, sizeof *m);
    m->objects = json_object();
    struct kube_watch_options options = {
        .path = path,
        .label_selector = label_selector,
        .list_page_size = 7,
        .timeout_seconds = 30,
        .backoff_initial_ms = backoff_ms,
        .backoff_max_ms = 2000,
        .seed = 1,
    };
    struct kube_watch_callbacks callbacks = {mirror_resync, mirror_event, mirror_error};
    struct vg_err err = {0};
    assert_int_equal(kube_watch_new(client, &options, &callbacks, m, &m->watch, &err), 0);
}

static void mirror_stop(struct mirror *m)
{
    kube_watch_free(m->watch);
    json_decref(m->objects);
    memset(m, 0, sizeof *m);
}

static bool mirror_synced(void *arg)
{
    return ((struct mirror *)arg)->resyncs > 0;
}

static struct kube_watch_stats stats_of(struct mirror *m)
{
    struct kube_watch_stats s;
    kube_watch_get_stats(m->watch, &s);
    return s;
}

struct count_wait {
    struct mirror *m;
    size_t objects;
};

static bool mirror_has(void *arg)
{
    struct count_wait *w = arg;
    return json_object_size(w->m->objects) == w->objects;
}

/* ---- tests ---------------------------------------------------------------------- */

static int reset_faults(void **state)
{
    (void)state;
    admin("/admin/reset", "{}");
    return 0;
}

static void test_list_pages_and_watch_delivers_every_change(void **state)
{
    (void)state;
    struct mirror m;
    mirror_start(&m, "/api/v1/nodes", NULL, 100);
    assert_true(kts_run_until(base, mirror_synced, &m, 20));
    assert_int_equal(m.last_resync_size, 20);     /* --nodes 20 */
    assert_int_equal(stats_of(&m).list_pages, 3); /* pages of 7 */

    /* Changes through the API: annotations on every node, two deleted, one created. */
    for (int i = 0; i < 20; i++) {
        char path[64], patch[128];
        vg_snprintf(path, sizeof path, "/api/v1/nodes/node-%05d", i);
        vg_snprintf(patch, sizeof patch, "{\"metadata\":{\"annotations\":{\"step\":\"%d\"}}}", i);
        struct reply r;
        assert_int_equal(request_sync("PATCH", path, patch, &r), 200);
        reply_clear(&r);
    }
    struct reply r;
    memset(&r, 0, sizeof r);
    assert_int_equal(
        request_sync("POST", "/api/v1/nodes", "{\"metadata\":{\"name\":\"node-new\"}}", &r), 201);
    reply_clear(&r);

    struct count_wait w = {&m, 21};
    assert_true(kts_run_until(base, mirror_has, &w, 20));
    /* Every node carries its last annotation. */
    bool all = false;
    double deadline = kts_now_s() + 10;
    while (!all && kts_now_s() < deadline) {
        all = true;
        for (int i = 0; i < 20 && all; i++) {
            char name[32], want[16];
            vg_snprintf(name, sizeof name, "node-%05d", i);
            vg_snprintf(want, sizeof want, "%d", i);
            json_t *node = json_object_get(m.objects, name);
            const char *got = json_string_value(json_object_get(
                json_object_get(json_object_get(node, "metadata"), "annotations"), "step"));
            all = got != NULL && strcmp(got, want) == 0;
        }
        if (!all)
            event_base_loop(base, EVLOOP_ONCE);
    }
    assert_true(all);
    assert_int_equal(m.modified, 20);
    assert_int_equal(m.added, 1);
    assert_int_equal(m.errors, 0);
    assert_int_equal(stats_of(&m).lists, 1);
    mirror_stop(&m);
}

static bool bookmarked(void *arg)
{
    struct mirror *m = arg;
    return stats_of(m).bookmarks > 0;
}

static void test_bookmarks_advance_resource_version(void **state)
{
    (void)state;
    struct mirror m;
    mirror_start(&m, "/api/v1/nodes", NULL, 100);
    assert_true(kts_run_until(base, mirror_synced, &m, 20));
    uint64_t before = strtoull(kube_watch_resource_version(m.watch), NULL, 10);
    /* Pod changes move the server's version; the node watch only learns of it through a
     * bookmark (--bookmark-interval 0.2). */
    create_pod("bookmark-a");
    create_pod("bookmark-b");
    assert_true(kts_run_until(base, bookmarked, &m, 10));
    json_t *stats = server_stats();
    uint64_t server_rv = (uint64_t)json_integer_value(json_object_get(stats, "rv"));
    json_decref(stats);
    /* Wait for a bookmark carrying the new version. */
    double deadline = kts_now_s() + 10;
    while (strtoull(kube_watch_resource_version(m.watch), NULL, 10) < server_rv &&
           kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    uint64_t after = strtoull(kube_watch_resource_version(m.watch), NULL, 10);
    assert_true(after >= server_rv);
    assert_true(after > before);
    assert_int_equal(m.added + m.modified + m.deleted, 0);
    mirror_stop(&m);
}

static bool relisted(void *arg)
{
    struct mirror *m = arg;
    return m->resyncs >= 2;
}

struct bookmark_wait {
    struct mirror *m;
    uint64_t seen;
};

static bool new_bookmark(void *arg)
{
    struct bookmark_wait *w = arg;
    return stats_of(w->m).bookmarks > w->seen;
}

/* Injected watch faults reach the watches open on the server at that moment; a bookmark
 * arriving from now on proves ours is one of them. */
static void wait_watch_open(struct mirror *m)
{
    assert_true(kts_run_until(base, mirror_synced, m, 20));
    struct bookmark_wait w = {m, stats_of(m).bookmarks};
    assert_true(kts_run_until(base, new_bookmark, &w, 10));
}

static void test_expired_watch_relists(void **state)
{
    (void)state;
    struct mirror m;
    mirror_start(&m, "/api/v1/pods", "t=x", 100);
    wait_watch_open(&m);
    struct count_wait w = {&m, json_object_size(m.objects) + 1};
    create_pod("expire-a");
    assert_true(kts_run_until(base, mirror_has, &w, 10));

    /* An ERROR event with a 410 Status. */
    admin("/admin/inject", "{\"action\":\"expire\"}");
    assert_true(kts_run_until(base, relisted, &m, 10));
    assert_int_equal(m.resyncs, 2);
    assert_non_null(json_object_get(m.objects, "expire-a")); /* resync holds everything */
    assert_int_equal(stats_of(&m).expired, 1);
    assert_int_equal(m.errors, 0);
    mirror_stop(&m);
}

static void test_compacted_version_on_reconnect_relists(void **state)
{
    (void)state;
    struct mirror m;
    /* A long backoff leaves time to change and compact the store while disconnected. */
    mirror_start(&m, "/api/v1/pods", "t=x", 1500);
    wait_watch_open(&m);
    admin("/admin/faults", "{\"watch_410_http\":true}");
    admin("/admin/inject", "{\"action\":\"drop\"}");
    create_pod("compact-a");
    admin("/admin/compact", "{}");
    /* Reconnect from the old version -> HTTP 410 -> relist, which has compact-a. */
    assert_true(kts_run_until(base, relisted, &m, 10));
    assert_non_null(json_object_get(m.objects, "compact-a"));
    struct kube_watch_stats s = stats_of(&m);
    assert_true(s.expired >= 1);
    assert_int_equal(s.lists, 2);
    mirror_stop(&m);
}

static void test_dropped_watch_loses_nothing(void **state)
{
    (void)state;
    struct mirror m;
    mirror_start(&m, "/api/v1/pods", "t=x", 50);
    assert_true(kts_run_until(base, mirror_synced, &m, 20));
    size_t base_count = json_object_size(m.objects);
    /* Every watch is cut after 3 events; 25 pods need several reconnects. */
    admin("/admin/faults", "{\"drop_after_events\":3}");
    for (int i = 0; i < 25; i++) {
        char name[32];
        vg_snprintf(name, sizeof name, "drop-%02d", i);
        create_pod(name);
    }
    struct count_wait w = {&m, base_count + 25};
    assert_true(kts_run_until(base, mirror_has, &w, 30));
    struct kube_watch_stats s = stats_of(&m);
    assert_true(s.watches >= 8);  /* 25 events / 3 per watch */
    assert_int_equal(s.lists, 1); /* reconnects resumed; no relist */
    assert_int_equal(m.added, 25);
    assert_true(m.errors >= 8); /* each drop is reported */
    mirror_stop(&m);
}

static void test_server_errors_retry_with_backoff(void **state)
{
    (void)state;
    admin("/admin/faults", "{\"fail_next\":3,\"fail_status\":500}");
    double start = kts_now_s();
    struct mirror m;
    mirror_start(&m, "/api/v1/nodes", NULL, 200);
    assert_true(kts_run_until(base, mirror_synced, &m, 20));
    double elapsed = kts_now_s() - start;
    /* Three failures: delays of at least 100, 200 and 400 ms (equal jitter). */
    assert_int_equal(m.errors, 3);
    assert_non_null(strstr(m.last_error, "HTTP 500"));
    assert_true(elapsed >= 0.65);
    assert_int_equal(stats_of(&m).lists, 1);
    wait_watch_open(&m);

    /* A watch ERROR event that is not 410: reconnect from the same version, no relist. */
    admin("/admin/inject", "{\"action\":\"error\"}");
    double deadline = kts_now_s() + 10;
    while (stats_of(&m).watches < 2 && kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(stats_of(&m).watches >= 2);
    assert_int_equal(stats_of(&m).lists, 1);
    assert_non_null(strstr(m.last_error, "injected watch error"));
    mirror_stop(&m);
}

static int ticks;

static void count_tick(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    (void)arg;
    ticks++;
}

static void test_slow_response_does_not_block_loop(void **state)
{
    (void)state;
    admin("/admin/faults", "{\"delay_ms\":1500,\"delay_next\":1}");
    struct event *timer = event_new(base, -1, EV_PERSIST, count_tick, NULL);
    struct timeval tv = {0, 50000};
    event_add(timer, &tv);
    ticks = 0;
    double start = kts_now_s();
    struct reply r;
    assert_int_equal(request_sync("GET", "/api/v1/nodes?limit=1", NULL, &r), 200);
    double elapsed = kts_now_s() - start;
    event_free(timer);
    assert_true(elapsed >= 1.4);
    /* 50 ms ticks kept firing while the response was pending (about 30 expected). */
    assert_true(ticks >= 10);
    assert_int_equal(json_array_size(json_object_get(r.body, "items")), 1);
    reply_clear(&r);
}

static void test_bind(void **state)
{
    (void)state;
    create_pod("bind-me");
    struct reply r = {0};
    struct vg_err err = {0};
    assert_int_equal(kube_bind_pod(client, "default", "bind-me", "node-00003", reply_cb, &r, &err),
                     0);
    reply_wait(&r);
    assert_int_equal(r.status, 201);
    assert_int_equal(r.err.code, 0);
    reply_clear(&r);
    assert_int_equal(request_sync("GET", "/api/v1/namespaces/default/pods/bind-me", NULL, &r), 200);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r.body, "spec"), "nodeName")),
        "node-00003");
    reply_clear(&r);
    /* Binding twice is a conflict the caller sees. */
    assert_int_equal(kube_bind_pod(client, "default", "bind-me", "node-00004", reply_cb, &r, &err),
                     0);
    reply_wait(&r);
    assert_int_equal(r.status, 409);
    assert_int_equal(r.err.code, -EEXIST);
    assert_non_null(strstr(r.err.msg, "already assigned"));
    reply_clear(&r);
    assert_int_equal(
        kube_bind_pod(client, "default", "no-such-pod", "node-00004", reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.status, 404);
    assert_int_equal(r.err.code, -ENOENT);
    reply_clear(&r);
    /* Names that would change the path are refused before any request. */
    assert_int_equal(kube_bind_pod(client, "default", "../nodes", "n", reply_cb, &r, &err),
                     -EINVAL);
}

/* The Binding with annotations and the uid / resourceVersion preconditions: one write
 * of spec.nodeName and the annotations, or a 409 and nothing written. */
static void test_bind_with_preconditions(void **state)
{
    (void)state;
    create_pod("bind-pre");
    struct reply r = {0};
    struct vg_err err = {0};
    assert_int_equal(request_sync("GET", "/api/v1/namespaces/default/pods/bind-pre", NULL, &r),
                     200);
    json_t *meta = json_object_get(r.body, "metadata");
    char uid[128], rv[64];
    assert_true(vg_strlcpy(uid, json_string_value(json_object_get(meta, "uid")), sizeof uid) > 0);
    assert_true(
        vg_strlcpy(rv, json_string_value(json_object_get(meta, "resourceVersion")), sizeof rv) > 0);
    reply_clear(&r);
    json_t *annotations = json_pack("{s:s}", "vgpu.io/decision", "{\"x\":1}");
    struct kube_binding b = {.ns = "default",
                             .name = "bind-pre",
                             .node = "node-00001",
                             .uid = "some-other-uid",
                             .resource_version = rv,
                             .annotations = annotations};
    /* A uid that is not the pod's: refused, nothing written. */
    assert_int_equal(kube_bind_pod_with(client, &b, reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.status, 409);
    assert_int_equal(r.err.code, -EEXIST);
    assert_non_null(strstr(r.err.msg, "Precondition failed: UID"));
    reply_clear(&r);
    /* A stale resourceVersion: refused too. */
    b.uid = uid;
    b.resource_version = "1";
    assert_int_equal(kube_bind_pod_with(client, &b, reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.status, 409);
    assert_non_null(strstr(r.err.msg, "Precondition failed: ResourceVersion"));
    reply_clear(&r);
    assert_int_equal(request_sync("GET", "/api/v1/namespaces/default/pods/bind-pre", NULL, &r),
                     200);
    assert_null(json_object_get(json_object_get(r.body, "spec"), "nodeName"));
    assert_null(json_object_get(json_object_get(json_object_get(r.body, "metadata"), "annotations"),
                                "vgpu.io/decision"));
    reply_clear(&r);
    /* Both right: bound and annotated in one write (one resourceVersion step). */
    b.resource_version = rv;
    assert_int_equal(kube_bind_pod_with(client, &b, reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.status, 201);
    assert_int_equal(r.err.code, 0);
    reply_clear(&r);
    assert_int_equal(request_sync("GET", "/api/v1/namespaces/default/pods/bind-pre", NULL, &r),
                     200);
    meta = json_object_get(r.body, "metadata");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(r.body, "spec"), "nodeName")),
        "node-00001");
    assert_string_equal(json_string_value(json_object_get(json_object_get(meta, "annotations"),
                                                          "vgpu.io/decision")),
                        "{\"x\":1}");
    assert_string_equal(
        json_string_value(json_object_get(meta, "labels") != NULL
                              ? json_object_get(json_object_get(meta, "labels"), "t")
                              : NULL),
        "x");
    uint64_t before = 0, after = 0;
    assert_int_equal(vg_parse_u64(rv, 0, UINT64_MAX, &before, &err), 0);
    assert_int_equal(vg_parse_u64(json_string_value(json_object_get(meta, "resourceVersion")), 0,
                                  UINT64_MAX, &after, &err),
                     0);
    assert_true(after == before + 1);
    reply_clear(&r);
    /* Annotations that are not strings are refused before any request. */
    json_t *bad = json_pack("{s:i}", "k", 1);
    b.annotations = bad;
    assert_int_equal(kube_bind_pod_with(client, &b, reply_cb, &r, &err), -EINVAL);
    json_decref(bad);
    json_decref(annotations);
}

static void test_patch_with_stale_version_conflicts(void **state)
{
    (void)state;
    struct reply r;
    assert_int_equal(request_sync("GET", "/api/v1/nodes/node-00005", NULL, &r), 200);
    char rv[64];
    vg_snprintf(
        rv, sizeof rv, "%s",
        json_string_value(json_object_get(json_object_get(r.body, "metadata"), "resourceVersion")));
    reply_clear(&r);

    json_t *annotations = json_pack("{s:s}", "hami.io/mutex.lock", "2024-01-01T00:00:00Z,ns,p");
    struct vg_err err = {0};
    memset(&r, 0, sizeof r);
    assert_int_equal(kube_patch_annotations(client, "/api/v1/nodes/node-00005", annotations, rv,
                                            reply_cb, &r, &err),
                     0);
    reply_wait(&r);
    assert_int_equal(r.status, 200);
    const char *new_rv =
        json_string_value(json_object_get(json_object_get(r.body, "metadata"), "resourceVersion"));
    assert_string_not_equal(new_rv, rv);
    reply_clear(&r);

    /* The same precondition again: the node changed since rv was read. */
    assert_int_equal(kube_patch_annotations(client, "/api/v1/nodes/node-00005", annotations, rv,
                                            reply_cb, &r, &err),
                     0);
    reply_wait(&r);
    assert_int_equal(r.status, 409);
    assert_int_equal(r.err.code, -EEXIST);
    assert_non_null(strstr(r.err.msg, "the object has been modified"));
    reply_clear(&r);

    /* Removing the annotation (null) without a precondition. */
    json_object_set_new(annotations, "hami.io/mutex.lock", json_null());
    assert_int_equal(kube_patch_annotations(client, "/api/v1/nodes/node-00005", annotations, NULL,
                                            reply_cb, &r, &err),
                     0);
    reply_wait(&r);
    assert_int_equal(r.status, 200);
    assert_null(json_object_get(json_object_get(json_object_get(r.body, "metadata"), "annotations"),
                                "hami.io/mutex.lock"));
    reply_clear(&r);
    /* Non-string annotation values are refused locally. */
    json_object_set_new(annotations, "x", json_integer(1));
    assert_int_equal(kube_patch_annotations(client, "/api/v1/nodes/node-00005", annotations, NULL,
                                            reply_cb, &r, &err),
                     -EINVAL);
    json_decref(annotations);
}

static void test_oversized_and_malformed_lines_relist(void **state)
{
    (void)state;
    /* A second client with a 64 KiB line ceiling on the same loop. */
    struct kube_config config = {.server = server_url};
    struct kube_client_options options = {.max_line_bytes = 64 << 10};
    struct kube_client *small = NULL;
    struct vg_err err = {0};
    assert_int_equal(kube_client_new(base, &config, &options, &small, &err), 0);
    struct kube_client *saved = client;
    client = small;
    struct mirror m;
    mirror_start(&m, "/api/v1/pods", "t=x", 50);
    client = saved;
    wait_watch_open(&m);

    admin("/admin/inject", "{\"action\":\"oversized\",\"bytes\":200000}");
    assert_true(kts_run_until(base, relisted, &m, 10));
    assert_non_null(strstr(m.last_error, "watch line longer than 65536 bytes"));
    assert_int_equal(m.errors, 1);

    wait_watch_open(&m);
    admin("/admin/inject", "{\"action\":\"malformed\"}");
    double deadline = kts_now_s() + 10;
    while (m.resyncs < 3 && kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(m.resyncs, 3);
    assert_non_null(strstr(m.last_error, "not JSON"));
    assert_int_equal(m.errors, 2);
    mirror_stop(&m);
    kube_client_free(small);
}

static void test_body_ceiling_and_transport_errors(void **state)
{
    (void)state;
    struct kube_config config = {.server = server_url};
    struct kube_client_options options = {.max_body_bytes = 4096};
    struct kube_client *small = NULL;
    struct vg_err err = {0};
    assert_int_equal(kube_client_new(base, &config, &options, &small, &err), 0);
    struct reply r = {0};
    assert_int_equal(kube_get(small, "/api/v1/nodes", reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.err.code, -EMSGSIZE);
    assert_non_null(strstr(r.err.msg, "larger than 4096 bytes"));
    reply_clear(&r);
    /* Bad paths are refused before any request. */
    assert_int_equal(kube_get(small, "api/v1/nodes", reply_cb, &r, &err), -EINVAL);
    assert_int_equal(kube_get(small, "/api/v1/nodes x", reply_cb, &r, &err), -EINVAL);
    kube_client_free(small);

    /* Nothing listens on port 1. */
    char closed_url[] = "http://127.0.0.1:1";
    struct kube_config closed = {.server = closed_url};
    assert_int_equal(kube_client_new(base, &closed, NULL, &small, &err), 0);
    assert_int_equal(kube_get(small, "/api/v1/nodes", reply_cb, &r, &err), 0);
    reply_wait(&r);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.err.code, -ECONNREFUSED);
    reply_clear(&r);
    /* Freeing a client with requests in flight calls nothing and leaks nothing. */
    assert_int_equal(kube_get(small, "/api/v1/nodes", reply_cb, &r, &err), 0);
    kube_client_free(small);
    assert_false(r.done);
}

static void test_watch_freed_from_its_callback(void **state)
{
    (void)state;
    struct mirror m;
    mirror_start(&m, "/api/v1/pods", "t=x", 50);
    assert_true(kts_run_until(base, mirror_synced, &m, 20));
    m.free_on_event = true;
    create_pod("free-me-a");
    create_pod("free-me-b");
    double deadline = kts_now_s() + 5;
    while (m.watch != NULL && kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    assert_null(m.watch);
    /* Let the aborted stream finish; no further events reach the mirror. */
    deadline = kts_now_s() + 0.5;
    while (kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(m.added, 1);
    json_decref(m.objects);
}

static int spawn_server(pid_t *pid, const char *pfile, const char *const *extra);

/* TLS with a private CA and client certificates, from kubeconfig data fields (in-memory
 * blobs) and from files. Certificates come from the openssl command. */
static void test_tls_with_client_certificates(void **state)
{
    (void)state;
    if (system("command -v openssl >/dev/null 2>&1") != 0)
        vg_test_skip("the openssl command (Debian package openssl)");
    char dir[128];
    vg_snprintf(dir, sizeof dir, "/tmp/vgpu-kube-tls-%d", (int)getpid());
    char cmd[2048];
    vg_snprintf(cmd, sizeof cmd,
                "set -e; rm -rf %s; mkdir -p %s; cd %s; "
                "for n in server client; do openssl req -x509 -newkey ec -pkeyopt "
                "ec_paramgen_curve:prime256v1 -nodes -keyout $n.key -out $n.crt -days 2 "
                "-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 2>/dev/null; done; "
                "for n in server.crt client.crt client.key; do openssl base64 -A -in $n > $n.b64; "
                "done",
                dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    char cert[192], key[192], client_ca[192], pfile[192];
    vg_snprintf(cert, sizeof cert, "%s/server.crt", dir);
    vg_snprintf(key, sizeof key, "%s/server.key", dir);
    vg_snprintf(client_ca, sizeof client_ca, "%s/client.crt", dir);
    vg_snprintf(pfile, sizeof pfile, "%s/port", dir);
    const char *extra[] = {"--tls-cert",      cert,      "--tls-key", key,
                           "--tls-client-ca", client_ca, NULL};
    pid_t pid;
    int port = spawn_server(&pid, pfile, extra);

    /* Reads a base64 file written above. */
    char b64[3][4096];
    const char *names[] = {"server.crt", "client.crt", "client.key"};
    for (int i = 0; i < 3; i++) {
        char path[256];
        vg_snprintf(path, sizeof path, "%s/%s.b64", dir, names[i]);
        FILE *f = fopen(path, "r");
        assert_non_null(f);
        size_t n = fread(b64[i], 1, sizeof b64[i] - 1, f);
        fclose(f);
        b64[i][n] = '\0';
    }
    static const struct {
        const char *user; /* the users[u].user mapping; NULL: certificate and key as data */
        bool with_ca;
        int want; /* 0: HTTP 200; -1: any transport error; else that error */
    } cases[] = {
        {NULL, true, 0},
        {"{client-certificate: client.crt, client-key: client.key}", true, 0},
        {"{token: only-a-token}", true, -1}, /* the server requires a client certificate */
        {NULL, false, -EPROTO},              /* the server's CA is unknown */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char user[8192], text[16384];
        if (cases[c].user == NULL)
            vg_snprintf(user, sizeof user, "{client-certificate-data: %s, client-key-data: %s}",
                        b64[1], b64[2]);
        else
            vg_snprintf(user, sizeof user, "%s", cases[c].user);
        vg_snprintf(text, sizeof text,
                    "current-context: c\n"
                    "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
                    "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:%d'%s%s}}]\n"
                    "users: [{name: u, user: %s}]\n",
                    port, cases[c].with_ca ? ", certificate-authority-data: " : "",
                    cases[c].with_ca ? b64[0] : "", user);
        struct kube_config *config = NULL;
        struct vg_err err = {0};
        assert_int_equal(kube_config_load_text(text, strlen(text), "tls", dir, NULL, &config, &err),
                         0);
        struct kube_client *tls = NULL;
        assert_int_equal(kube_client_new(base, config, NULL, &tls, &err), 0);
        kube_config_free(config);
        struct reply r = {0};
        assert_int_equal(kube_get(tls, "/api/v1/nodes?limit=2", reply_cb, &r, &err), 0);
        reply_wait(&r);
        if (cases[c].want == 0) {
            if (r.status != 200)
                fail_msg("case %zu: %ld %s", c, r.status, r.err.msg);
            assert_int_equal(json_array_size(json_object_get(r.body, "items")), 2);
        } else {
            assert_int_equal(r.status, 0);
            if (cases[c].want != -1)
                assert_int_equal(r.err.code, cases[c].want);
            else
                assert_true(r.err.code < 0);
        }
        reply_clear(&r);
        kube_client_free(tls);
    }
    kts_server_stop(pid, pfile);
    vg_snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

/* ---- server process ------------------------------------------------------------- */

/* Starts the test server with extra arguments (NULL-terminated list, at most 8); returns
 * its port. */
static int spawn_server(pid_t *pid, const char *pfile, const char *const *extra)
{
    const char *args[16] = {"--nodes", "20", "--gpus-per-node", "2", "--bookmark-interval", "0.2"};
    for (int i = 0, n = 6; extra != NULL && extra[i] != NULL && n < 15; i++)
        args[n++] = extra[i];
    int port = kts_server_start("python3", server_script, pfile, args, pid);
    if (port <= 0)
        fail_msg("test API server did not start (python3 %s)", server_script);
    return port;
}

static int start_server(void **state)
{
    (void)state;
    vg_snprintf(port_file, sizeof port_file, "/tmp/vgpu-kube-port-%d", (int)getpid());
    int port = spawn_server(&server_pid, port_file, NULL);
    vg_snprintf(server_url, sizeof server_url, "http://127.0.0.1:%d", port);

    base = event_base_new();
    assert_non_null(base);
    ticker = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 10000};
    event_add(ticker, &tv);
    static char token[] = "test-token";
    struct kube_config config = {.server = server_url, .token = token};
    struct vg_err err = {0};
    assert_int_equal(kube_client_new(base, &config, NULL, &client, &err), 0);
    return 0;
}

static int stop_server(void **state)
{
    (void)state;
    kube_client_free(client);
    event_free(ticker);
    event_base_free(base);
    kts_server_stop(server_pid, port_file);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s kube_api_server.py\n", argv[0]);
        return 2;
    }
    server_script = argv[1];
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_list_pages_and_watch_delivers_every_change, reset_faults),
        cmocka_unit_test_teardown(test_bookmarks_advance_resource_version, reset_faults),
        cmocka_unit_test_teardown(test_expired_watch_relists, reset_faults),
        cmocka_unit_test_teardown(test_compacted_version_on_reconnect_relists, reset_faults),
        cmocka_unit_test_teardown(test_dropped_watch_loses_nothing, reset_faults),
        cmocka_unit_test_teardown(test_server_errors_retry_with_backoff, reset_faults),
        cmocka_unit_test_teardown(test_slow_response_does_not_block_loop, reset_faults),
        cmocka_unit_test_teardown(test_bind, reset_faults),
        cmocka_unit_test_teardown(test_bind_with_preconditions, reset_faults),
        cmocka_unit_test_teardown(test_patch_with_stale_version_conflicts, reset_faults),
        cmocka_unit_test_teardown(test_oversized_and_malformed_lines_relist, reset_faults),
        cmocka_unit_test_teardown(test_body_ceiling_and_transport_errors, reset_faults),
        cmocka_unit_test_teardown(test_watch_freed_from_its_callback, reset_faults),
        cmocka_unit_test_teardown(test_tls_with_client_certificates, reset_faults),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
