/* The device plugin's cache of decoded decisions (src/deviceplugin/podcache.h), fed the
 * way the pod watch feeds it: list, ADDED/MODIFIED, DELETED, relist. What matters to a
 * user: Allocate picks the same container as a fresh decode would (oldest decision first,
 * exact GPUs first), a garbled decision is named, a changed or deleted pod is never
 * matched from stale data, and a decision is decoded once rather than per Allocate. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "deviceplugin/podcache.h"

#define UUID_A "GPU-11111111-2222-3333-4444-555555555555"
#define UUID_B "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

/* A decision with one container `name` on one GPU. */
static char *decision(int64_t time, const char *node, const char *name, const char *uuid,
                      unsigned mib)
{
    char *text = malloc(512);
    snprintf(text, 512,
             "{\"version\":1,\"node\":\"%s\",\"time\":%lld,\"containers\":[{\"name\":\"%s\","
             "\"gpus\":[{\"uuid\":\"%s\",\"memoryMiB\":%u,\"cores\":10}]}]}",
             node, (long long)time, name, uuid, mib);
    return text;
}

/* The spec.containers a pod needs for its decision to be used: each container the
 * decision gives GPUs, asking for that many nvidia.com/gpu (none for garbled text). */
static json_t *spec_containers(const char *text)
{
    json_t *out = json_array();
    json_t *d = text ? json_loads(text, 0, NULL) : NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(d, "containers"), i, c)
    {
        size_t n = json_array_size(json_object_get(c, "gpus"));
        if (n == 0 || !json_is_string(json_object_get(c, "name")))
            continue;
        char count[24];
        snprintf(count, sizeof(count), "%zu", n);
        json_array_append_new(out,
                              json_pack("{s:O,s:{s:{s:s}}}", "name", json_object_get(c, "name"),
                                        "resources", "limits", "nvidia.com/gpu", count));
    }
    json_decref(d);
    return out;
}

static json_t *pod(const char *name, const char *uid, const char *text)
{
    json_t *p = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:o},s:{s:s}}", "metadata", "name", name,
                          "namespace", "default", "uid", uid, "spec", "nodeName", "node-1",
                          "schedulerName", "vgpu-scheduler", "containers", spec_containers(text),
                          "status", "phase", "Pending");
    if (text) {
        json_t *ann = json_object();
        json_object_set_new(ann, ANNOT_KEY_DECISION, json_string(text));
        json_object_set_new(json_object_get(p, "metadata"), "annotations", ann);
    }
    return p;
}

static json_t *pod_d(const char *name, const char *uid, int64_t time, const char *container,
                     const char *uuid, unsigned mib)
{
    char *text = decision(time, "node-1", container, uuid, mib);
    json_t *p = pod(name, uid, text);
    free(text);
    return p;
}

/* Directories that "exist": "uid/container" strings; counts the questions. */
struct disk {
    const char *made[8];
    unsigned asked;
};

static bool on_disk(void *arg, const char *uid, const char *container)
{
    struct disk *d = arg;
    d->asked++;
    char key[300];
    snprintf(key, sizeof(key), "%s/%s", uid, container);
    for (size_t i = 0; i < 8 && d->made[i]; i++)
        if (strcmp(d->made[i], key) == 0)
            return true;
    return false;
}

static void put(struct dp_podcache *c, json_t *p)
{
    dp_podcache_put(c, p);
    json_decref(p);
}

static void test_order_and_exact_gpus(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    put(c, pod_d("late", "u2", 20, "a", UUID_A, 100));
    put(c, pod_d("early", "u1", 10, "b", UUID_B, 200));
    put(c, pod_d("same-time-b", "u4", 15, "m", UUID_B, 1));
    put(c, pod_d("same-time-a", "u3", 15, "m", UUID_B, 2));
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "early");
    assert_string_equal(m.pod_uid, "u1");
    assert_string_equal(m.pod_namespace, "default");
    assert_string_equal(m.container.name, "b");
    assert_int_equal(m.container.gpus[0].memory_mib, 200);
    char uuids[1][ANNOT_UUID_MAX] = {UUID_A};
    assert_int_equal(dp_podcache_match(c, uuids, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "late");
    /* Allocated: the next in order, ties broken by pod name. */
    dp_podcache_set_allocated(c, "u1", "b", true);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "same-time-a");
    /* Undone (Allocate rolled back): first again. */
    dp_podcache_set_allocated(c, "u1", "b", false);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "early");
    dp_podcache_set_allocated(c, "nobody", "b", true); /* ignored */
    dp_podcache_set_allocated(c, "u1", "nothing", true);
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.pods, 4);
    assert_int_equal(st.waiting, 4);
    assert_int_equal(st.decodes, 4);
    dp_podcache_free(c);
}

/* The cache has a ceiling: a pod past DP_PODCACHE_MAX_PODS is not kept (with a warning),
 * the ones already kept still match. */
static void test_ceiling(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    char name[32], uid[32];
    for (unsigned i = 0; i <= DP_PODCACHE_MAX_PODS; i++) {
        snprintf(name, sizeof(name), "p%u", i);
        snprintf(uid, sizeof(uid), "u%u", i);
        put(c, pod_d(name, uid, (int64_t)i + 1, "main", UUID_A, 1));
    }
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.pods, DP_PODCACHE_MAX_PODS);
    assert_int_equal(st.waiting, DP_PODCACHE_MAX_PODS);
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "p0");
    /* Room again once a pod leaves. */
    dp_podcache_remove(c, "u0");
    put(c, pod_d("again", "again", 0, "main", UUID_A, 1));
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "again");
    dp_podcache_free(c);
}

static void test_allocated_asked_once(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    put(c, pod_d("p1", "u1", 1, "main", UUID_A, 1));
    put(c, pod_d("p2", "u2", 2, "main", UUID_A, 1));
    put(c, pod_d("p3", "u3", 3, "main", UUID_A, 1));
    /* Directories of p1 and p2 exist already (a plugin restart, say). */
    struct disk d = {{"u1/main", "u2/main", NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "p3");
    unsigned first = d.asked;
    assert_int_equal(first, 3);
    /* Known now: the next Allocate asks only about p3. */
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "p3");
    assert_int_equal(d.asked - first, 1);
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.waiting, 1);
    /* A status update does not decode again nor forget. */
    json_t *p = pod_d("p1", "u1", 1, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "status"), "phase", json_string("Running"));
    put(c, p);
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.decodes, 3);
    assert_int_equal(st.waiting, 1);
    dp_podcache_free(c);
}

static void test_modified_and_deleted(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    put(c, pod_d("p1", "u1", 1, "main", UUID_A, 100));
    dp_podcache_set_allocated(c, "u1", "main", true);
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    /* The scheduler rewrote the decision: new containers, nothing known about them. */
    put(c, pod_d("p1", "u1", 5, "side", UUID_B, 300));
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.container.name, "side");
    assert_int_equal(m.container.gpus[0].memory_mib, 300);
    /* The decision removed from the pod: gone. */
    put(c, pod("p1", "u1", NULL));
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    /* Back, then the pod finishes, then back, then it is being deleted, then deleted. */
    put(c, pod_d("p1", "u1", 5, "side", UUID_B, 300));
    json_t *p = pod_d("p1", "u1", 5, "side", UUID_B, 300);
    json_object_set_new(json_object_get(p, "status"), "phase", json_string("Succeeded"));
    put(c, p);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    put(c, pod_d("p1", "u1", 5, "side", UUID_B, 300));
    p = pod_d("p1", "u1", 5, "side", UUID_B, 300);
    json_object_set_new(json_object_get(p, "metadata"), "deletionTimestamp",
                        json_string("2026-01-01T00:00:00Z"));
    put(c, p);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    put(c, pod_d("p1", "u1", 5, "side", UUID_B, 300));
    dp_podcache_remove(c, "u1");
    dp_podcache_remove(c, "u1"); /* twice, or unknown: nothing */
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    /* Another node's pod, and pods without uid, are not kept. */
    p = pod_d("elsewhere", "u9", 1, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "spec"), "nodeName", json_string("node-2"));
    put(c, p);
    p = pod_d("nouid", "u8", 1, "main", UUID_A, 1);
    json_object_del(json_object_get(p, "metadata"), "uid");
    put(c, p);
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.pods, 0);
    dp_podcache_free(c);
}

static void test_relist(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    put(c, pod_d("p1", "u1", 1, "main", UUID_A, 1));
    put(c, pod_d("p2", "u2", 2, "main", UUID_A, 1));
    put(c, pod_d("gone", "u0", 0, "main", UUID_A, 1));
    dp_podcache_set_allocated(c, "u1", "main", true);
    /* The relist misses "gone" (deleted while the watch was down), keeps p1 and p2 as
     * they were, and brings p3. */
    json_t *items = json_array();
    json_array_append_new(items, pod_d("p2", "u2", 2, "main", UUID_A, 1));
    json_array_append_new(items, pod_d("p1", "u1", 1, "main", UUID_A, 1));
    json_array_append_new(items, pod_d("p3", "u3", 3, "main", UUID_A, 1));
    json_array_append_new(items, pod("plain", "u5", NULL));
    dp_podcache_replace(c, items);
    json_decref(items);
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.pods, 3);
    assert_int_equal(st.decodes, 4); /* p1 and p2 not decoded again */
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "p2"); /* p1 still known allocated, "gone" gone */
    /* An empty relist empties the cache. */
    items = json_array();
    dp_podcache_replace(c, items);
    json_decref(items);
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.pods, 0);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), -ENOENT);
    dp_podcache_free(c);
}

static void test_unusable_named(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    put(c, pod("garbled", "u3", "{\"version\":1,\"containers\":7}"));
    char *other = decision(1, "node-2", "main", UUID_A, 1);
    put(c, pod("misplaced", "u4", other));
    free(other);
    put(c, pod_d("good", "u1", 10, "main", UUID_A, 1));
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    /* Usable decisions still match. */
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "good");
    /* Nothing asks for two: the message names the first unusable decision. */
    assert_int_equal(dp_podcache_match(c, NULL, 2, on_disk, &d, &m, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "asking for 2 GPU(s)"));
    assert_non_null(strstr(err.msg, "pod garbled has a garbled vgpu.io/decision"));
    dp_podcache_remove(c, "u3");
    assert_int_equal(dp_podcache_match(c, NULL, 2, on_disk, &d, &m, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "pod misplaced has a decision for node 'node-2'"));
    /* Repaired by the scheduler: usable. */
    put(c, pod_d("misplaced", "u4", 20, "main", UUID_B, 1));
    dp_podcache_set_allocated(c, "u1", "main", true);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "misplaced");
    struct dp_podcache_stats st;
    dp_podcache_get_stats(c, &st);
    assert_int_equal(st.unusable, 0);
    dp_podcache_free(c);
}

/* The message of a match for count GPUs that finds nothing. */
static const char *no_match(struct dp_podcache *c, size_t count)
{
    static struct vg_err err;
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    memset(&err, 0, sizeof(err));
    assert_int_equal(dp_podcache_match(c, NULL, count, on_disk, &d, &m, &err), -ENOENT);
    return err.msg;
}

/* A pod author writes a decision: it is used only on a pod of vgpu's scheduler whose spec
 * asks for exactly what it gives, and its time never puts it before older pods. */
static void test_forged_decisions(void **state)
{
    (void)state;
    struct dp_podcache *c = dp_podcache_new("node-1");
    struct disk d = {{NULL}, 0};
    struct dp_match m;
    struct vg_err err = {0};
    const char *msg;
    /* No GPU asked, decision time 0: not used, so the victim's container gets its own. */
    json_t *p = pod_d("thief", "u1", 0, "main", UUID_A, 1);
    json_object_del(json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
                    "resources");
    put(c, p);
    put(c, pod_d("victim", "u2", 100, "main", UUID_A, 4096));
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "victim");
    assert_int_equal(m.container.gpus[0].memory_mib, 4096);
    dp_podcache_set_allocated(c, "u2", "main", true);
    assert_non_null(strstr(no_match(c, 1), "container main: nvidia.com/gpu absent"));
    /* A container the spec lacks. */
    p = pod_d("ghost", "u3", 0, "main", UUID_A, 1);
    json_object_set_new(
        json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0), "name",
        json_string("other"));
    dp_podcache_remove(c, "u1");
    put(c, p);
    assert_non_null(strstr(no_match(c, 1), "no container main in its spec"));
    dp_podcache_remove(c, "u3");
    /* Another scheduler's pod, or none named. */
    p = pod_d("foreign", "u4", 0, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "spec"), "schedulerName",
                        json_string("default-scheduler"));
    put(c, p);
    assert_non_null(strstr(no_match(c, 1), "is not scheduled by vgpu-scheduler (schedulerName "
                                           "default-scheduler)"));
    dp_podcache_remove(c, "u4");
    /* Memory and cores, where the container sets them, must be the decision's. */
    p = pod_d("greedy", "u5", 0, "main", UUID_A, 8000);
    json_t *limits = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
            "resources"),
        "limits");
    json_object_set_new(limits, "nvidia.com/gpumem", json_string("1Gi"));
    put(c, p);
    assert_non_null(strstr(no_match(c, 1), "nvidia.com/gpumem differs, decided 8000 MiB"));
    p = pod_d("greedy", "u5", 0, "main", UUID_A, 1024);
    limits = json_object_get(
        json_object_get(
            json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
            "resources"),
        "limits");
    json_object_set_new(limits, "nvidia.com/gpumem", json_string("1Gi"));
    json_object_set_new(limits, "nvidia.com/gpucores", json_string("50"));
    json_incref(p);
    put(c, p);
    msg = no_match(c, 1);
    if (!strstr(msg, "nvidia.com/gpucores differs, decided 10"))
        fail_msg("%s", msg);
    /* A container's GPU requests never change in Kubernetes: asking for what was decided
     * is another pod, which the cache reads afresh. */
    dp_podcache_remove(c, "u5");
    json_object_set_new(limits, "nvidia.com/gpucores", json_string("10"));
    put(c, p);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "greedy"); /* 1Gi = 1024 MiB, 10 % as decided */
    dp_podcache_remove(c, "u5");
    /* Names that could reach a path or a log line: never used, never echoed. */
    put(c, pod_d("bad-uid", "u_6", 0, "main", UUID_A, 1));
    msg = no_match(c, 1);
    assert_non_null(strstr(msg, "invalid uid, namespace or name"));
    dp_podcache_remove(c, "u_6");
    p = pod_d("bad-ns", "u7", 0, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "metadata"), "namespace", json_string("a\nb"));
    put(c, p);
    msg = no_match(c, 1);
    assert_non_null(strstr(msg, "invalid uid, namespace or name"));
    assert_null(strchr(msg, '\n'));
    dp_podcache_remove(c, "u7");
    /* A decision's time is never before its pod's creation: a pod created after the
     * victim's decision cannot jump ahead of it by writing time 0. */
    p = pod_d("late", "u8", 0, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "metadata"), "creationTimestamp",
                        json_string("2026-11-25T20:01:00Z"));
    put(c, p);
    put(c, pod_d("first", "u9", 1795636859, "main", UUID_B, 2)); /* 20:00:59 that day */
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "first");
    dp_podcache_set_allocated(c, "u9", "main", true);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "late");
    dp_podcache_free(c);
    /* The scheduler's name is configurable. */
    c = dp_podcache_new("node-1");
    dp_podcache_set_scheduler(c, "gpu-sched");
    put(c, pod_d("p", "u1", 0, "main", UUID_A, 1));
    assert_non_null(strstr(no_match(c, 1), "is not scheduled by gpu-sched"));
    p = pod_d("q", "u2", 0, "main", UUID_A, 1);
    json_object_set_new(json_object_get(p, "spec"), "schedulerName", json_string("gpu-sched"));
    put(c, p);
    assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), 0);
    assert_string_equal(m.pod_name, "q");
    dp_podcache_free(c);
}

/* A dynamic MIG share gives the profile's memory, at least the pod's nvidia.com/gpumem,
 * and no compute share, whatever nvidia.com/gpucores asks: such a decision is used; one
 * smaller than the request, or with a share, is not. */
static void test_mig_shares(void **state)
{
    (void)state;
    static const char *const texts[] = {
        "{\"version\":1,\"node\":\"node-1\",\"time\":1,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memoryMiB\":9984,\"cores\":0,"
        "\"mig\":{\"profile\":\"1g.10gb\",\"start\":0}}]}]}",
        "{\"version\":1,\"node\":\"node-1\",\"time\":1,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memoryMiB\":8000,\"cores\":0,"
        "\"mig\":{\"profile\":\"1g.10gb\",\"start\":0}}]}]}",
        "{\"version\":1,\"node\":\"node-1\",\"time\":1,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memoryMiB\":9984,\"cores\":30,"
        "\"mig\":{\"profile\":\"1g.10gb\",\"start\":0}}]}]}"};
    static const bool used[] = {true, false, false};
    for (size_t i = 0; i < 3; i++) {
        struct dp_podcache *c = dp_podcache_new("node-1");
        json_t *p = pod("mig", "u1", texts[i]);
        json_t *limits = json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
                "resources"),
            "limits");
        json_object_set_new(limits, "nvidia.com/gpumem", json_string("9000"));
        json_object_set_new(limits, "nvidia.com/gpucores", json_string("30"));
        put(c, p);
        struct disk d = {{NULL}, 0};
        struct dp_match m;
        struct vg_err err = {0};
        int rc = dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err);
        if (used[i]) {
            assert_int_equal(rc, 0);
            assert_string_equal(m.container.gpus[0].mig_profile, "1g.10gb");
        } else {
            assert_int_equal(rc, -ENOENT);
            assert_non_null(strstr(err.msg, "the MIG instance decided"));
        }
        dp_podcache_free(c);
    }
}

/* nvidia.com/priority from the pod's spec reaches the match (the limits file and the slot
 * file's name); a value other than 0 or 1 makes the decision unusable, with the reason. */
static void test_priority(void **state)
{
    (void)state;
    static const struct {
        const char *value; /* NULL: not named */
        int rc, given, prio;
    } cases[] = {{NULL, 0, 0, 1},      {"0", 0, 1, 0},        {"1", 0, 1, 1},
                 {"2", -ENOENT, 0, 0}, {"-1", -ENOENT, 0, 0}, {"high", -ENOENT, 0, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct dp_podcache *c = dp_podcache_new("node-1");
        json_t *p = pod_d("p", "u1", 10, "main", UUID_A, 100);
        json_t *limits = json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(p, "spec"), "containers"), 0),
                "resources"),
            "limits");
        if (cases[i].value != NULL)
            json_object_set_new(limits, "nvidia.com/priority", json_string(cases[i].value));
        put(c, p);
        struct disk d = {{NULL}, 0};
        struct dp_match m;
        struct vg_err err = {0};
        assert_int_equal(dp_podcache_match(c, NULL, 1, on_disk, &d, &m, &err), cases[i].rc);
        if (cases[i].rc == 0) {
            assert_int_equal(m.priority_given, cases[i].given);
            assert_int_equal(m.priority, cases[i].prio);
        } else {
            assert_non_null(strstr(err.msg, "nvidia.com/priority is not 0 (high) or 1 (low)"));
        }
        dp_podcache_free(c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_exact_gpus),
        cmocka_unit_test(test_priority),
        cmocka_unit_test(test_allocated_asked_once),
        cmocka_unit_test(test_modified_and_deleted),
        cmocka_unit_test(test_relist),
        cmocka_unit_test(test_unusable_named),
        cmocka_unit_test(test_ceiling),
        cmocka_unit_test(test_forged_decisions),
        cmocka_unit_test(test_mig_shares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
