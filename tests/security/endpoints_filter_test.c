/* /filter's promises without a network (src/scheduler/pending.c, extender.c): with
 * require_pending, only pods the pod watch shows waiting (same namespace, name and uid)
 * are promised capacity, through both of the filter's readers; the per-namespace bound
 * holds, is recounted when promises end by bind, expiry or deletion, and never refuses
 * for a stale count. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "scheduler/sched.h"

#define NODES 4

static struct sched_state *new_state(uint32_t per_namespace)
{
    struct sched_options o;
    sched_options_default(&o);
    o.assume_ttl_ms = 1000;
    o.require_pending = true;
    o.max_assumed_per_namespace = per_namespace;
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    for (int n = 0; n < NODES; n++) {
        char inv[512], name[32];
        snprintf(name, sizeof name, "n%d", n);
        snprintf(inv, sizeof inv,
                 "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-%d\","
                 "\"index\":0,\"model\":\"H100\",\"memoryMiB\":16000,\"cores\":100,\"slots\":"
                 "10,\"healthy\":true}]}",
                 n);
        json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name, "annotations",
                                 "vgpu.io/gpus", inv);
        sched_node_update(s, node);
        json_decref(node);
    }
    return s;
}

static json_t *pod_object(const char *ns, const char *name, const char *uid)
{
    return json_pack("{s:{s:s, s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}, s:{s:s}}",
                     "metadata", "name", name, "namespace", ns, "resourceVersion", "7", "uid", uid,
                     "spec", "containers", "name", "main", "resources", "limits", "nvidia.com/gpu",
                     "1", "nvidia.com/gpumem", "1000", "status", "phase", "Pending");
}

/* The pod watch shows it (ADDED / MODIFIED). */
static void watch(struct sched_state *s, const char *ns, const char *name, const char *uid)
{
    json_t *pod = pod_object(ns, name, uid);
    sched_pending_update(s, pod);
    json_decref(pod);
}

/* /filter for the pod over every node; the nodes that fit (0 or 1) and the Error. With
 * tree, through the jansson reader (Nodes.items), else the streaming one (NodeNames). */
static int filter(struct sched_state *s, const char *ns, const char *name, const char *uid,
                  bool tree, uint64_t t, char *error, size_t size)
{
    json_t *names = json_array();
    for (int n = 0; n < NODES; n++) {
        char node[32];
        snprintf(node, sizeof node, "n%d", n);
        json_array_append_new(names, tree ? json_pack("{s:{s:s}}", "metadata", "name", node)
                                          : json_string(node));
    }
    json_t *args = tree ? json_pack("{s:o, s:{s:o}, s:n}", "Pod", pod_object(ns, name, uid),
                                    "Nodes", "items", names, "NodeNames")
                        : json_pack("{s:o, s:n, s:o}", "Pod", pod_object(ns, name, uid), "Nodes",
                                    "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    char *out = NULL;
    struct vg_err err = {0};
    int rc = sched_filter(s, body, strlen(body), (struct sched_now){t, 100}, &out, &err);
    assert_true(rc == 0 || rc == SCHED_FILTER_RETRY);
    json_t *res = json_loads(out, 0, NULL);
    assert_non_null(res);
    const char *e = json_string_value(json_object_get(res, "Error"));
    snprintf(error, size, "%s", e != NULL ? e : "");
    json_t *list = tree ? json_object_get(json_object_get(res, "Nodes"), "items")
                        : json_object_get(res, "NodeNames");
    int fits = (int)json_array_size(list);
    assert_true(fits <= 1);
    assert_int_equal(rc == SCHED_FILTER_RETRY, strstr(error, "not waiting for a node") != NULL);
    json_decref(res);
    free(out);
    free(body);
    return fits;
}

static uint64_t assumed(const struct sched_state *s)
{
    struct sched_stats st;
    sched_state_stats(s, &st);
    return st.assumed;
}

static void test_only_pending_pods_are_promised(void **state)
{
    (void)state;
    struct sched_state *s = new_state(0);
    char error[512];
    for (int tree = 0; tree < 2; tree++) {
        /* Never seen; then seen with another uid; then in another namespace. */
        assert_int_equal(filter(s, "default", "ghost", "u-1", tree, 0, error, sizeof error), 0);
        assert_non_null(strstr(error, "pod default/ghost (uid u-1) is not waiting"));
        assert_non_null(strstr(error, "nothing reserved"));
        watch(s, "default", "real", "u-real");
        assert_int_equal(filter(s, "default", "real", "u-old", tree, 0, error, sizeof error), 0);
        assert_int_equal(filter(s, "other", "real", "u-real", tree, 0, error, sizeof error), 0);
        assert_int_equal(assumed(s), 0);
        assert_int_equal(filter(s, "default", "real", "u-real", tree, 0, error, sizeof error), 1);
        assert_string_equal(error, "");
        assert_int_equal(assumed(s), 1);
        /* Bound (the watch shows a node): no longer pending. */
        json_t *pod = pod_object("default", "real", "u-real");
        json_object_set_new(json_object_get(pod, "spec"), "nodeName", json_string("n0"));
        sched_pending_update(s, pod);
        json_decref(pod);
        assert_int_equal(sched_pending_count(s), 0);
        sched_expire(s, (struct sched_now){5000, 100});
        assert_int_equal(assumed(s), 0);
    }
    /* Deleted, finished, relisted. */
    watch(s, "default", "a", "u-a");
    watch(s, "default", "b", "u-b");
    assert_int_equal(sched_pending_count(s), 2);
    json_t *a = pod_object("default", "a", "u-a");
    sched_pending_delete(s, a);
    json_decref(a);
    json_t *b = pod_object("default", "b", "u-b");
    json_object_set_new(json_object_get(b, "status"), "phase", json_string("Succeeded"));
    sched_pending_update(s, b);
    json_decref(b);
    assert_int_equal(sched_pending_count(s), 0);
    json_t *items = json_pack("[o, o]", pod_object("x", "c", "u-c"), pod_object("x", "d", "u-d"));
    sched_pending_resync(s, items);
    json_decref(items);
    assert_int_equal(sched_pending_count(s), 2);
    assert_int_equal(filter(s, "x", "c", "u-c", false, 0, error, sizeof error), 1);
    sched_state_free(s);
}

static void test_namespace_bound(void **state)
{
    (void)state;
    struct sched_state *s = new_state(2);
    char error[512], name[32];
    for (int i = 0; i < 6; i++) {
        snprintf(name, sizeof name, "p%d", i);
        watch(s, "team", name, name);
        watch(s, "else", name, name);
    }
    assert_int_equal(filter(s, "team", "p0", "p0", false, 0, error, sizeof error), 1);
    assert_int_equal(filter(s, "team", "p1", "p1", true, 0, error, sizeof error), 1);
    assert_int_equal(filter(s, "team", "p2", "p2", false, 0, error, sizeof error), 0);
    assert_non_null(strstr(error, "namespace of pod team/p2 holds 2 outstanding"));
    assert_int_equal(filter(s, "team", "p2", "p2", true, 0, error, sizeof error), 0);
    /* A repeated filter replaces its own promise; another namespace is not affected. */
    assert_int_equal(filter(s, "team", "p1", "p1", false, 0, error, sizeof error), 1);
    assert_int_equal(filter(s, "else", "p0", "p0", false, 0, error, sizeof error), 1);
    assert_int_equal(assumed(s), 3);
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.namespace_bound, 2);
    /* The promises expire: the count is stale until the bound is reached, then recounted. */
    sched_expire(s, (struct sched_now){5000, 100});
    assert_int_equal(assumed(s), 0);
    assert_int_equal(filter(s, "team", "p2", "p2", false, 5000, error, sizeof error), 1);
    assert_int_equal(filter(s, "team", "p3", "p3", false, 5000, error, sizeof error), 1);
    assert_int_equal(filter(s, "team", "p4", "p4", false, 5000, error, sizeof error), 0);
    /* Once those expire too, room again. */
    sched_expire(s, (struct sched_now){10000, 100});
    assert_int_equal(filter(s, "team", "p4", "p4", false, 10000, error, sizeof error), 1);
    sched_state_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_only_pending_pods_are_promised),
        cmocka_unit_test(test_namespace_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
