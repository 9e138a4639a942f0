/* The DRA driver's ResourceSlice publisher against the test API server
 * (tests/kube_api_server.py, which validates slices as kube-apiserver 1.35 does): the
 * built slices are accepted, publishing the same content writes nothing, a health change
 * bumps the pool generation in every slice, a pool that grows past 128 devices is split
 * and shrinks back with the extra slices deleted, a 409 Conflict is re-read and retried,
 * a 500 is retried after a backoff, and other drivers' slices are left alone.
 *
 * Usage: test_dra_slices_publish PATH/TO/kube_api_server.py */
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
#include "base/str.h"
#include "dra/slices.h"
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

struct reply {
    bool done;
    long status;
    json_t *body;
};

static void reply_cb(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)err;
    struct reply *r = arg;
    r->done = true;
    r->status = status;
    r->body = json_incref(body);
}

static bool reply_done(void *arg)
{
    return ((struct reply *)arg)->done;
}

/* A synchronous request; returns the body (owned) and the status in *status. */
static json_t *call(const char *method, const char *path, const char *json_text, long *status)
{
    struct reply r = {0};
    json_t *body = json_text ? json_loads(json_text, 0, NULL) : NULL;
    struct vg_err err = {0};
    int rc;
    if (strcmp(method, "GET") == 0)
        rc = kube_get(client, path, reply_cb, &r, &err);
    else if (strcmp(method, "POST") == 0)
        rc = kube_post(client, path, body, reply_cb, &r, &err);
    else
        rc = kube_put(client, path, body, reply_cb, &r, &err);
    json_decref(body);
    assert_int_equal(rc, 0);
    assert_true(kts_run_until(base, reply_done, &r, 20));
    if (status != NULL)
        *status = r.status;
    return r.body;
}

static void admin(const char *path, const char *json_text)
{
    long status;
    json_decref(call("POST", path, json_text, &status));
    assert_int_equal(status, 200);
}

/* This node's slices of vgpu's driver, as the API server has them. */
static json_t *node_slices(void)
{
    long status;
    json_t *list = call("GET",
                        DRA_API_PATH "/resourceslices?fieldSelector=spec.driver%3Dgpu.vgpu.io,"
                                     "spec.nodeName%3Dnode-1",
                        NULL, &status);
    assert_int_equal(status, 200);
    json_t *items = json_incref(json_object_get(list, "items"));
    json_decref(list);
    return items;
}

/* ---- the publisher ---------------------------------------------------------------- */

static unsigned synced;

static void on_sync(void *arg)
{
    (void)arg;
    synced++;
}

struct wait_sync {
    unsigned want;
};

static bool sync_reached(void *arg)
{
    return synced >= ((struct wait_sync *)arg)->want;
}

static struct dp_gpu gpus[200];

static void fill(unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        struct dp_gpu *g = &gpus[i];
        memset(g, 0, sizeof *g);
        vg_snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-1111-2222-3333-444444444444", i);
        vg_strlcpy(g->model, "NVIDIA H100 80GB HBM3", sizeof g->model);
        g->index = i;
        g->minor = i;
        g->memory_mib = 81559;
        g->cc_major = 9;
        g->numa = 0;
        vg_strlcpy(g->pci_bus_id, "00000000:1B:00.0", sizeof g->pci_bus_id);
        g->healthy = true;
    }
}

static void publish(struct dra_publisher *p, unsigned n, bool consumable)
{
    struct dra_slice_options o = {
        .node_name = "node-1", .driver_version = "550.90.07", .consumable = consumable};
    json_t *slices = NULL;
    struct vg_err err = {0};
    if (dra_slices_build(&o, gpus, n, &slices, &err) != 0)
        fail_msg("build: %s", err.msg);
    struct wait_sync w = {synced + 1};
    if (dra_publisher_set(p, slices, &err) != 0)
        fail_msg("set: %s", err.msg);
    json_decref(slices);
    assert_true(kts_run_until(base, sync_reached, &w, 30));
}

static int64_t generation_of(const json_t *slice)
{
    return json_integer_value(
        json_object_get(json_object_get(json_object_get(slice, "spec"), "pool"), "generation"));
}

static void assert_pool(json_t *items, size_t slices, int64_t generation, size_t devices)
{
    assert_int_equal(json_array_size(items), slices);
    size_t total = 0, i;
    const json_t *s;
    json_array_foreach(items, i, s)
    {
        assert_int_equal(generation_of(s), generation);
        const json_t *pool = json_object_get(json_object_get(s, "spec"), "pool");
        assert_int_equal(json_integer_value(json_object_get(pool, "resourceSliceCount")), slices);
        total += json_array_size(json_object_get(json_object_get(s, "spec"), "devices"));
    }
    assert_int_equal(total, devices);
}

static void test_publish_lifecycle(void **state)
{
    (void)state;
    /* Another driver's slice on the same node stays untouched throughout. */
    long status;
    json_decref(call("POST", DRA_API_PATH "/resourceslices",
                     "{\"metadata\":{\"name\":\"nvidia\"},\"spec\":{\"driver\":\"gpu.nvidia.com\","
                     "\"nodeName\":\"node-1\",\"pool\":{\"name\":\"node-1\",\"generation\":5,"
                     "\"resourceSliceCount\":1},\"devices\":[]}}",
                     &status));
    assert_int_equal(status, 201);

    struct dra_publisher *p = NULL;
    struct vg_err err = {0};
    assert_int_equal(dra_publisher_new(base, client, NULL, "node-1", on_sync, NULL, &p, &err), 0);
    fill(200);

    /* First publication: created at generation 1 (the server validated every device). */
    publish(p, 4, true);
    json_t *items = node_slices();
    assert_pool(items, 1, 1, 4);
    const json_t *dev = json_array_get(
        json_object_get(json_object_get(json_array_get(items, 0), "spec"), "devices"), 0);
    assert_true(json_is_true(json_object_get(dev, "allowMultipleAllocations")));
    json_decref(items);
    struct dra_publisher_stats st;
    dra_publisher_get_stats(p, &st);
    assert_int_equal(st.writes, 1);

    /* The same content again: nothing written, the generation stays. */
    publish(p, 4, true);
    dra_publisher_get_stats(p, &st);
    assert_int_equal(st.writes, 1);
    items = node_slices();
    assert_pool(items, 1, 1, 4);
    json_decref(items);

    /* A GPU turns unhealthy: it leaves the pool, generation 2. The time from the new
     * inventory to the API server holding it is printed (docs/benchmarks.md). */
    gpus[2].healthy = false;
    double t0 = kts_now_s();
    publish(p, 4, true);
    printf("publication after a health change: %.2f ms (list + 1 update)\n",
           (kts_now_s() - t0) * 1e3);
    items = node_slices();
    assert_pool(items, 1, 2, 3);
    json_decref(items);
    assert_int_equal(dra_publisher_generation(p), 2);
    gpus[2].healthy = true;

    /* 200 devices: two slices (128 + 72), generation 3 in both. */
    publish(p, 200, true);
    items = node_slices();
    assert_pool(items, 2, 3, 200);
    json_decref(items);

    /* Back to 4 whole devices: the second slice is deleted, generation 4. */
    publish(p, 4, false);
    items = node_slices();
    assert_pool(items, 1, 4, 4);
    dev = json_array_get(
        json_object_get(json_object_get(json_array_get(items, 0), "spec"), "devices"), 0);
    assert_null(json_object_get(dev, "allowMultipleAllocations"));
    json_decref(items);

    /* A 409 on the update: re-read and retried, then it lands. */
    admin("/admin/faults", "{\"fail_next\":1,\"fail_status\":409,"
                           "\"match\":\"PUT /apis/resource.k8s.io/v1/resourceslices\"}");
    publish(p, 3, false);
    dra_publisher_get_stats(p, &st);
    assert_int_equal(st.conflicts, 1);
    items = node_slices();
    assert_pool(items, 1, 5, 3);
    json_decref(items);

    /* A 500 on the list: retried after a backoff. */
    admin("/admin/faults", "{\"fail_next\":2,\"fail_status\":500,"
                           "\"match\":\"GET /apis/resource.k8s.io/v1/resourceslices\"}");
    publish(p, 2, false);
    dra_publisher_get_stats(p, &st);
    assert_true(st.failures >= 2);
    items = node_slices();
    assert_pool(items, 1, 6, 2);
    json_decref(items);
    admin("/admin/reset", "{}");

    /* A restarted publisher continues from the generation in the API server. */
    dra_publisher_free(p);
    p = NULL;
    assert_int_equal(dra_publisher_new(base, client, NULL, "node-1", on_sync, NULL, &p, &err), 0);
    publish(p, 2, false);
    dra_publisher_get_stats(p, &st);
    assert_int_equal(st.writes, 0);
    publish(p, 5, false);
    items = node_slices();
    assert_pool(items, 1, 7, 5);
    json_decref(items);
    dra_publisher_free(p);

    json_t *other = call("GET", DRA_API_PATH "/resourceslices/nvidia", NULL, &status);
    assert_int_equal(status, 200);
    assert_int_equal(generation_of(other), 5);
    json_decref(other);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    struct dra_publisher *p = NULL;
    struct vg_err err = {0};
    assert_int_equal(dra_publisher_new(base, client, NULL, "Node_1", NULL, NULL, &p, &err),
                     -EINVAL);
    assert_int_equal(dra_publisher_new(base, client, NULL, "node-2", NULL, NULL, &p, &err), 0);
    json_t *empty = json_array();
    assert_int_equal(dra_publisher_set(p, empty, &err), -EINVAL);
    json_array_append_new(empty, json_pack("{s:{}}", "metadata"));
    assert_int_equal(dra_publisher_set(p, empty, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no name or pool"));
    json_decref(empty);
    dra_publisher_free(p);
}

/* ---- server process ------------------------------------------------------------- */

static int start_server(void **state)
{
    (void)state;
    vg_snprintf(port_file, sizeof port_file, "/tmp/vgpu-dra-port-%d", (int)getpid());
    int port = kts_server_start("/usr/bin/python3", server_script, port_file, NULL, &server_pid);
    if (port <= 0)
        fail_msg("test API server did not start (%s)", server_script);
    vg_snprintf(server_url, sizeof server_url, "http://127.0.0.1:%d", port);
    base = event_base_new();
    assert_non_null(base);
    ticker = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 10000};
    event_add(ticker, &tv);
    struct kube_config config = {.server = server_url};
    struct vg_err err = {0};
    assert_int_equal(kube_client_new(base, &config, NULL, &client, &err), 0);
    return 0;
}

static bool idle(void *arg)
{
    (void)arg;
    return kube_client_pending(client) == 0;
}

static int stop_server(void **state)
{
    (void)state;
    kts_run_until(base, idle, NULL, 10);
    kube_client_free(client);
    event_free(ticker);
    event_base_free(base);
    kts_server_stop(server_pid, port_file);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/kube_api_server.py\n", argv[0]);
        return 2;
    }
    server_script = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_publish_lifecycle),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
