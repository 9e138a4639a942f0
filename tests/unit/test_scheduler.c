/* src/scheduler without a network: nodes and pods fed as informer objects, extender
 * bodies fed as strings, time passed in. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/log.h"
#include "scheduler/internal.h"
#include "scheduler/metrics.h"
#include "scheduler/sched.h"
#include "scheduler/view.h"

static char *xstrdup_test(const char *s)
{
    char *d = strdup(s);
    assert_non_null(d);
    return d;
}

static struct sched_state *new_state(int nodes, unsigned mem, unsigned slots)
{
    struct sched_options o;
    sched_options_default(&o);
    o.assume_ttl_ms = 1000;
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    for (int n = 0; n < nodes; n++) {
        char inv[512], name[32];
        snprintf(name, sizeof name, "n%d", n);
        snprintf(inv, sizeof inv,
                 "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-%d\","
                 "\"index\":0,\"model\":\"H100\",\"memoryMiB\":%u,\"cores\":100,\"slots\":%u,"
                 "\"healthy\":true}]}",
                 n, mem, slots);
        json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name, "annotations",
                                 "vgpu.io/gpus", inv);
        sched_node_update(s, node);
        json_decref(node);
    }
    return s;
}

static char *filter_body(const char *pod, const char *mem, int nodes)
{
    json_t *names = json_array();
    for (int n = 0; n < nodes; n++) {
        char name[32];
        snprintf(name, sizeof name, "n%d", n);
        json_array_append_new(names, json_string(name));
    }
    json_t *args =
        json_pack("{s:{s:{s:s, s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}}, s:o}", "Pod",
                  "metadata", "name", pod, "namespace", "default", "resourceVersion", "7", "uid",
                  "uid-7", "spec", "containers", "name", "main", "resources", "limits",
                  "nvidia.com/gpu", "1", "nvidia.com/gpumem", mem, "NodeNames", names);
    char *text = json_dumps(args, JSON_COMPACT);
    json_decref(args);
    return text;
}

static json_t *filter(struct sched_state *s, const char *pod, const char *mem, int nodes,
                      uint64_t t)
{
    char *body = filter_body(pod, mem, nodes);
    char *out = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, strlen(body), (struct sched_now){t, 100}, &out, &err),
                     0);
    json_t *res = json_loads(out, 0, NULL);
    assert_non_null(res);
    free(out);
    free(body);
    return res;
}

static void test_no_double_promise(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(2, 10000, 8);
    int fits = 0;
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%d", i);
        json_t *r = filter(s, name, "4000", 2, 0);
        fits += json_array_size(json_object_get(r, "NodeNames")) == 1;
        json_decref(r);
        struct vg_err err = {0};
        assert_int_equal(sched_check_invariants(s, &err), 0);
    }
    assert_int_equal(fits, 4); /* 2 per GPU by memory */
    /* Refiltering the same pod replaces its promise instead of adding one. */
    json_t *r = filter(s, "p0", "4000", 2, 0);
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 1);
    json_decref(r);
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.assumed, 4); /* pods that did not fit hold no promise */
    sched_state_free(s);
}

static void test_expiry_and_bind(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 8);
    json_t *r = filter(s, "a", "6000", 1, 0);
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 1);
    json_decref(r);
    r = filter(s, "b", "6000", 1, 0);
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 0);
    json_decref(r);
    assert_int_equal(sched_expire(s, (struct sched_now){999, 100}), 0);
    assert_int_equal(sched_expire(s, (struct sched_now){1000, 100}), 1);
    r = filter(s, "b", "6000", 1, 1000);
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 1);
    json_decref(r);
    struct sched_bind b;
    struct vg_err err = {0};
    const char *wrong = "{\"PodName\":\"b\",\"PodNamespace\":\"default\",\"PodUID\":\"\","
                        "\"Node\":\"elsewhere\"}";
    assert_int_equal(
        sched_bind_prepare(s, wrong, strlen(wrong), (struct sched_now){1000, 100}, &b, &err),
        -EINVAL);
    assert_non_null(strstr(err.msg, "promised node n0"));
    const char *ok = "{\"PodName\":\"b\",\"PodNamespace\":\"default\",\"PodUID\":\"\","
                     "\"Node\":\"n0\"}";
    assert_int_equal(sched_bind_prepare(s, ok, strlen(ok), (struct sched_now){1000, 100}, &b, &err),
                     0);
    assert_string_equal(b.resource_version, "7");
    assert_non_null(strstr(b.decision, "\"memoryMiB\":6000"));
    /* A bind in flight never expires; a finished one is no longer an assumption. */
    assert_int_equal(sched_expire(s, (struct sched_now){99999, 100}), 0);
    assert_string_equal(b.uid, "uid-7"); /* filter's, as ExtenderBindingArgs has none */
    sched_bind_finish(s, &b, SCHED_BIND_OK, (struct sched_now){1000, 100});
    sched_bind_release(&b);
    assert_int_equal(sched_expire(s, (struct sched_now){99999, 100}), 0);
    char *dump = sched_dump(s, true);
    assert_non_null(strstr(dump, "\"memUsedMiB\":6000"));
    free(dump);
    sched_state_free(s);
}

/* Events about an earlier pod of the same name (deleted and created again, its events
 * late) leave the new pod's promise alone; events about the pod itself end it. */
static void test_old_instance_events(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 8);
    json_t *r = filter(s, "a", "6000", 1, 0); /* uid-7 */
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 1);
    json_decref(r);
    struct sched_stats st;
    json_t *old = json_pack("{s:{s:s, s:s, s:s}, s:{s:s}}", "metadata", "name", "a", "namespace",
                            "default", "uid", "uid-6", "status", "phase", "Failed");
    sched_pod_update(s, old);
    sched_pod_delete(s, old);
    json_decref(old);
    sched_state_stats(s, &st);
    assert_int_equal(st.assumed, 1);
    r = filter(s, "b", "6000", 1, 0); /* the promise still holds the memory */
    assert_int_equal(json_array_size(json_object_get(r, "NodeNames")), 0);
    json_decref(r);
    json_t *self = json_pack("{s:{s:s, s:s, s:s}}", "metadata", "name", "a", "namespace", "default",
                             "uid", "uid-7");
    sched_pod_delete(s, self);
    json_decref(self);
    sched_state_stats(s, &st);
    assert_int_equal(st.assumed, 0);
    sched_state_free(s);
}

static void bound_pod(struct sched_state *s, const char *name, const char *node, int gpu,
                      unsigned mib, unsigned cores)
{
    char dec[512];
    snprintf(dec, sizeof dec,
             "{\"version\":1,\"node\":\"%s\",\"time\":1,\"containers\":[{\"name\":\"m\","
             "\"gpus\":[{\"uuid\":\"GPU-%d\",\"memoryMiB\":%u,\"cores\":%u}]}]}",
             node, gpu, mib, cores);
    json_t *pod =
        json_pack("{s:{s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", name, "namespace",
                  "default", "annotations", "vgpu.io/decision", dec, "spec", "nodeName", node);
    sched_pod_update(s, pod);
    json_decref(pod);
}

static char *bind_body(const char *pod, const char *uid, const char *node)
{
    static char buf[256];
    snprintf(buf, sizeof buf,
             "{\"PodName\":\"%s\",\"PodNamespace\":\"default\",\"PodUID\":\"%s\",\"Node\":\"%s\"}",
             pod, uid, node);
    return buf;
}

static const char *node_or_dash(json_t *r)
{
    const char *node = json_string_value(json_array_get(json_object_get(r, "NodeNames"), 0));
    return node ? node : "-";
}

static void test_decision_rebuild_and_overcommit(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 2);
    bound_pod(s, "d0", "n0", 0, 7000, 20);
    bound_pod(s, "d1", "n0", 0, 7000, 20);
    /* The second does not fit beside the first (14000 > 10000): it is not charged. */
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.bound, 1);
    assert_int_equal(st.conflicts, 1);
    struct vg_err err = {0};
    assert_int_equal(sched_check_invariants(s, &err), 0);
    /* But d1 is bound and may be using the GPU: nothing more goes there, however small,
     * until it leaves. */
    json_t *r = filter(s, "small", "100", 1, 0);
    assert_string_equal(node_or_dash(r), "-");
    json_decref(r);
    json_t *gone = json_pack("{s:{s:s, s:s}}", "metadata", "name", "d1", "namespace", "default");
    sched_pod_delete(s, gone);
    json_decref(gone);
    r = filter(s, "small", "100", 1, 0);
    assert_string_equal(node_or_dash(r), "n0");
    json_decref(r);
    /* A promise made before such a pod arrived is not bound onto the blocked GPU. */
    bound_pod(s, "d2", "n0", 0, 9000, 20);
    const char *body = bind_body("small", "", "n0");
    struct sched_bind b;
    assert_int_equal(
        sched_bind_prepare(s, body, strlen(body), (struct sched_now){0, 100}, &b, &err), -ESTALE);
    assert_non_null(strstr(err.msg, "over-commits"));
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

/* A bound pod "p" (uid u1) on n0 whose annotation says dec (NULL: none). */
static void bound_pod_text(struct sched_state *s, const char *dec)
{
    json_t *pod =
        json_pack("{s:{s:s, s:s, s:s, s:{}}, s:{s:s}}", "metadata", "name", "p", "namespace",
                  "default", "uid", "u1", "annotations", "spec", "nodeName", "n0");
    if (dec != NULL)
        json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            "vgpu.io/decision", json_string(dec));
    sched_pod_update(s, pod);
    json_decref(pod);
}

static const char *const whole =
    "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":\"m\","
    "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":10000,\"cores\":100}]}]}";
static const char *const tiny =
    "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":\"m\","
    "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":1,\"cores\":1}]}]}";

static void gone_uid(void *arg, const char *uid)
{
    assert_string_equal(uid, "u1");
    (*(int *)arg)++;
}

/* A pod author removes or rewrites the decision of their bound pod (past the webhook): the
 * GPU stays charged until the pod is gone, and after a restart the scheduler's record,
 * not the annotation, says what the pod holds. */
static void test_decision_annotation_edits(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 4);
    bound_pod_text(s, whole);
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.bound, 1);
    bound_pod_text(s, NULL); /* removed */
    bound_pod_text(s, tiny); /* rewritten smaller */
    sched_state_stats(s, &st);
    assert_int_equal(st.bound, 1);
    assert_int_equal(st.annotation_changes, 2);
    json_t *r = filter(s, "small", "100", 1, 0);
    assert_string_equal(node_or_dash(r), "-");
    json_decref(r);
    /* The record to write is the decision first charged. */
    json_t *pod = json_pack("{s:{s:s, s:s, s:s}, s:{s:s}}", "metadata", "name", "p", "namespace",
                            "default", "uid", "u1", "spec", "nodeName", "n0");
    const char *uid = NULL;
    assert_string_equal(sched_record_wanted(s, pod, &uid), whole);
    assert_string_equal(uid, "u1");
    sched_state_free(s);

    /* After a restart: the record is loaded before the pods; the annotation, stripped or
     * rewritten, is not what is charged. */
    s = new_state(1, 10000, 4);
    sched_record_put(s, "u1", whole);
    assert_null(sched_record_wanted(s, pod, &uid));
    bound_pod_text(s, tiny);
    r = filter(s, "small", "100", 1, 0);
    assert_string_equal(node_or_dash(r), "-");
    json_decref(r);
    sched_state_free(s);
    s = new_state(1, 10000, 4);
    sched_record_put(s, "u1", whole);
    bound_pod_text(s, NULL);
    sched_state_stats(s, &st);
    assert_int_equal(st.bound, 1);
    /* A record whose pod a full list no longer shows holding GPUs goes; others stay. */
    int gone = 0;
    json_t *items = json_array();
    sched_records_prune(s, items, gone_uid, &gone);
    json_decref(items);
    assert_int_equal(gone, 1);
    assert_int_equal(sched_record_count(s), 0);
    sched_record_put(s, "u1", whole);
    sched_record_put(s, "u2", tiny);
    items = json_pack("[O]", pod);
    sched_records_prune(s, items, NULL, NULL);
    json_decref(items);
    assert_int_equal(sched_record_count(s), 1);
    assert_string_equal(sched_record_get(s, "u1"), whole);
    /* The pod's delete frees the GPU. */
    sched_pod_delete(s, pod);
    r = filter(s, "small", "100", 1, 0);
    assert_string_equal(node_or_dash(r), "n0");
    json_decref(r);
    json_decref(pod);
    sched_state_free(s);
}

/* The node filter picks for a 1-GPU pod of 500 MiB and 30 cores under policy (NULL: the
 * state's default), over nodes n0 and n1. */
static const char *pick_cores(struct sched_state *s, const char *name, const char *policy,
                              const char *cores)
{
    json_t *ann = policy ? json_pack("{s:s}", "vgpu.io/policy", policy) : json_object();
    json_t *args = json_pack(
        "{s:{s:{s:s, s:s, s:s, s:o}, s:{s:[{s:s, s:{s:{s:s, s:s, s:s}}}]}}, s:[s, s]}", "Pod",
        "metadata", "name", name, "namespace", "default", "uid", name, "annotations", ann, "spec",
        "containers", "name", "main", "resources", "limits", "nvidia.com/gpu", "1",
        "nvidia.com/gpumem", "500", "nvidia.com/gpucores", cores, "NodeNames", "n0", "n1");
    char *body = json_dumps(args, JSON_COMPACT), *out = NULL;
    json_decref(args);
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, strlen(body), (struct sched_now){0, 100}, &out, &err),
                     0);
    free(body);
    json_t *r = json_loads(out, 0, NULL);
    free(out);
    static char node[16];
    const char *n = json_string_value(json_array_get(json_object_get(r, "NodeNames"), 0));
    snprintf(node, sizeof node, "%s", n ? n : "-");
    json_decref(r);
    return node;
}

static const char *pick(struct sched_state *s, const char *name, const char *policy)
{
    return pick_cores(s, name, policy, "30");
}

/* fgd and default learn the mix from the shares the scheduler holds. n0's GPU has little compute
 * but most memory taken (100 of 1000 milli, 9,000 of 10,000 MiB), n1's the reverse (600 milli,
 * 1,000 MiB). binpack counts memory and (the scheduler's default policy) puts a 300-milli pod on
 * n0; against the held shapes (100 and 600 milli) n1 is the one where it strands nothing (400 free
 * that no 600 fits becomes 100 that a 100 fits), so fgd and default take n1. */
static void test_learned_mix_policies(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(2, 10000, 8);
    /* Nothing held yet: the pod's own shape is the mix, and it is placed. */
    assert_string_not_equal(pick(s, "e0", "default"), "-");
    assert_string_not_equal(pick(s, "e1", "fgd"), "-");
    sched_state_free(s);

    const char *policies[] = {"fgd", "default", NULL}, *want[] = {"n1", "n1", "n0"};
    for (int i = 0; i < 3; i++) {
        s = new_state(2, 10000, 8);
        bound_pod(s, "a", "n0", 0, 9000, 10);
        bound_pod(s, "b", "n1", 1, 1000, 60);
        assert_string_equal(pick(s, "p", policies[i]), want[i]);
        if (i < 2)
            sched_state_free(s);
    }
    /* A policy the core does not have is still refused with its name. */
    json_t *args = json_pack("{s:{s:{s:s, s:s, s:{s:s}}, s:{s:[{s:s}]}}, s:[s]}", "Pod", "metadata",
                             "name", "x", "namespace", "default", "annotations", "vgpu.io/policy",
                             "tetris", "spec", "containers", "name", "main", "NodeNames", "n0");
    char *body = json_dumps(args, JSON_COMPACT), *out = NULL;
    json_decref(args);
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, strlen(body), (struct sched_now){0, 100}, &out, &err),
                     0);
    assert_non_null(strstr(out, "tetris"));
    free(out);
    free(body);
    struct vg_err ierr = {0};
    assert_int_equal(sched_check_invariants(s, &ierr), 0);
    sched_state_free(s);
}

static void model_node(struct sched_state *s, const char *name, int gpu, const char *model)
{
    char inv[512];
    snprintf(inv, sizeof inv,
             "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-%d\","
             "\"index\":0,\"model\":\"%s\",\"memoryMiB\":10000,\"cores\":100,\"slots\":8,"
             "\"healthy\":true}]}",
             gpu, model);
    json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name, "annotations",
                             "vgpu.io/gpus", inv);
    sched_node_update(s, node);
    json_decref(node);
}

/* A pod bound to n0's GPU 0 with 3,000 MiB and 30 cores, and GPU-type lists. */
static void typed_pod(struct sched_state *s, const char *name, const char *key, const char *types)
{
    const char *dec = "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":"
                      "\"m\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":3000,\"cores\":30}]}]}";
    json_t *ann = json_pack("{s:s}", "vgpu.io/decision", dec);
    if (key != NULL)
        json_object_set_new(ann, key, json_string(types));
    json_t *pod = json_pack("{s:{s:s, s:s, s:o}, s:{s:s}}", "metadata", "name", name, "namespace",
                            "default", "annotations", ann, "spec", "nodeName", "n0");
    sched_pod_update(s, pod);
    json_decref(pod);
}

/* The learned mix keeps the pods' GPU-type lists, so default leaves the cards of a model to
 * the pods that need it. n0 holds a T4, n1 an H100; a 300-milli pod is held on the T4. Held
 * by a pod that runs anywhere, a new 300-milli pod joins it on n0 (it fills the 700 gap
 * rather than open a second); held by a pod restricted to T4 (the T4's pressure is 2: that
 * type is all the demand, T4 half the cards), the new pod keeps off the T4. */
static void test_learned_mix_model_lists(void **unused)
{
    (void)unused;
    struct {
        const char *key, *types, *want;
        bool pod_first, h100_first;
    } cases[] = {
        {NULL, NULL, "n0", false, false},
        {"nvidia.com/use-gputype", "T4", "n1", false, false},
        {"nvidia.com/use-gputype", "t4, A10", "n1", false, true},
        {"nvidia.com/nouse-gputype", "H100", "n1", false, false},
        /* Read before any node: the list is resolved once the models are known. */
        {"nvidia.com/use-gputype", "T4", "n1", true, true},
        {"nvidia.com/use-gputype", "H100", "n0", false, false},
        /* Malformed lists (nine entries; filter refuses such a pod, another scheduler may
         * have placed it): the pod is held and counts as running anywhere. */
        {"nvidia.com/use-gputype", "T4,T4,T4,T4,T4,T4,T4,T4,T4", "n0", false, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct sched_options o;
        sched_options_default(&o);
        struct sched_state *s = NULL;
        struct vg_err err = {0};
        assert_int_equal(sched_state_new(&o, &s, &err), 0);
        if (cases[i].pod_first)
            typed_pod(s, "held", cases[i].key, cases[i].types);
        if (cases[i].h100_first)
            model_node(s, "n1", 1, "H100");
        model_node(s, "n0", 0, "T4");
        if (!cases[i].h100_first)
            model_node(s, "n1", 1, "H100");
        if (!cases[i].pod_first)
            typed_pod(s, "held", cases[i].key, cases[i].types);
        struct sched_stats st;
        sched_state_stats(s, &st);
        assert_int_equal(st.bound, 1);
        const char *got = pick(s, "p", "default");
        if (strcmp(got, cases[i].want) != 0)
            fail_msg("case %zu: %s, want %s", i, got, cases[i].want);
        assert_int_equal(sched_check_invariants(s, &err), 0);
        sched_state_free(s);
    }
}

/* A node the API no longer lists weighs in nothing a scheduler started now would not
 * see: with n2 (a T4) deleted, default decides as a state that never had it. Held: one
 * T4-only pod and one that runs anywhere, both 300 milli on n0 (T4); n1 is an H100. */
static void test_deleted_node_out_of_pressure(void **unused)
{
    (void)unused;
    struct sched_state *st[2];
    for (int k = 0; k < 2; k++) {
        struct sched_options o;
        sched_options_default(&o);
        struct vg_err err = {0};
        assert_int_equal(sched_state_new(&o, &st[k], &err), 0);
        model_node(st[k], "n0", 0, "T4");
        model_node(st[k], "n1", 1, "H100");
        if (k == 0)
            model_node(st[k], "n2", 2, "T4");
        typed_pod(st[k], "held", "nvidia.com/use-gputype", "T4");
        typed_pod(st[k], "any", NULL, NULL);
    }
    json_t *gone = json_pack("{s:{s:s}}", "metadata", "name", "n2");
    sched_node_delete(st[0], gone);
    json_decref(gone);
    static const char *cores[] = {"5", "10", "20", "30", "40", "50", "60"};
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%s", pick_cores(st[0], "p", "default", cores[i]));
        snprintf(b, sizeof b, "%s", pick_cores(st[1], "p", "default", cores[i]));
        if (strcmp(a, b) != 0)
            fail_msg("%s cores: %s after the delete, %s without the node", cores[i], a, b);
    }
    for (int k = 0; k < 2; k++)
        sched_state_free(st[k]);
}

/* GPU-type lists are told apart by their text: a dash in a name is not an exclude list,
 * the same lists meet the same id. Lists no pod holds are freed when the table fills; past
 * SCHED_TYPES_MAX lists held at once, a pod counts as unrestricted (0). */
static void test_types_ids(void **unused)
{
    (void)unused;
    struct sched_options o;
    sched_options_default(&o);
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    struct place_request none, dash, pair;
    memset(&none, 0, sizeof none);
    dash = pair = none;
    dash.type_include_count = 1;
    (void)snprintf(dash.type_include[0], sizeof dash.type_include[0], "a-b");
    pair.type_include_count = pair.type_exclude_count = 1;
    (void)snprintf(pair.type_include[0], sizeof pair.type_include[0], "a");
    (void)snprintf(pair.type_exclude[0], sizeof pair.type_exclude[0], "b");
    assert_int_equal(sched_types_id(s, &none), 0);
    uint16_t d = sched_types_id(s, &dash), p = sched_types_id(s, &pair);
    assert_true(d != 0 && p != 0 && d != p);
    assert_int_equal(sched_types_id(s, &dash), d);
    pair.type_exact = true; /* whole names are another selection */
    assert_true(sched_types_id(s, &pair) != p);
    /* Nothing holds them: the table never runs out. */
    for (int i = 0; i <= 2 * SCHED_TYPES_MAX; i++) {
        (void)snprintf(dash.type_include[0], sizeof dash.type_include[0], "m%d", i);
        assert_true(sched_types_id(s, &dash) != 0);
    }
    /* SCHED_TYPES_MAX pods (read before their node: records all the same) hold as many. */
    for (int i = 0; i < SCHED_TYPES_MAX; i++) {
        char name[16], list[16];
        snprintf(name, sizeof name, "h%d", i);
        snprintf(list, sizeof list, "held%d", i);
        typed_pod(s, name, "nvidia.com/use-gputype", list);
    }
    (void)snprintf(dash.type_include[0], sizeof dash.type_include[0], "one-more");
    assert_int_equal(sched_types_id(s, &dash), 0);
    (void)snprintf(dash.type_include[0], sizeof dash.type_include[0], "held7");
    assert_true(sched_types_id(s, &dash) != 0); /* a held list keeps its id */
    sched_state_free(s);
}

static const char *filtered_node(json_t *r)
{
    const char *node = json_string_value(json_array_get(json_object_get(r, "NodeNames"), 0));
    assert_non_null(node);
    return node;
}

static uint64_t assumed_count(struct sched_state *s)
{
    struct sched_stats st;
    sched_state_stats(s, &st);
    return st.assumed;
}

/* The one pods/binding call and its outcomes: refused (409, 404) drops the promise;
 * unknown (5xx, timeout) keeps it charged until the watch shows the pod bound or the TTL
 * passes; a recreated pod (uid) is refused before any write. */
static void test_bind_outcomes(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(2, 10000, 8);
    struct sched_bind b;
    struct vg_err err = {0};
    struct sched_now t = {0, 100};
    char node[32];

    /* Refused: nothing was written, the promise goes at once. */
    json_t *r = filter(s, "a", "6000", 2, 0);
    snprintf(node, sizeof node, "%s", filtered_node(r));
    json_decref(r);
    const char *body = bind_body("a", "uid-7", node);
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), 0);
    assert_string_equal(b.uid, "uid-7");
    assert_string_equal(b.resource_version, "7");
    assert_non_null(b.decision);
    sched_bind_finish(s, &b, SCHED_BIND_REFUSED, t);
    sched_bind_release(&b);
    assert_int_equal(assumed_count(s), 0);
    char *dump = sched_dump(s, false);
    assert_null(strstr(dump, "\"memUsedMiB\":6000"));
    free(dump);

    /* Unknown: still charged (a second 6000 MiB pod does not fit on that GPU), and it
     * expires a TTL after the failed bind, not after the filter. */
    r = filter(s, "a", "6000", 2, 0);
    snprintf(node, sizeof node, "%s", filtered_node(r));
    json_decref(r);
    body = bind_body("a", "", node);
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), 0);
    sched_bind_finish(s, &b, SCHED_BIND_UNKNOWN, (struct sched_now){900, 100});
    sched_bind_release(&b);
    assert_int_equal(assumed_count(s), 1);
    assert_int_equal(sched_expire(s, (struct sched_now){1500, 100}), 0);
    assert_int_equal(sched_expire(s, (struct sched_now){1900, 100}), 1);
    assert_int_equal(assumed_count(s), 0);

    /* Unknown, then the watch shows the binding did happen: the share is the pod's. */
    r = filter(s, "a", "6000", 2, 2000);
    snprintf(node, sizeof node, "%s", filtered_node(r));
    json_decref(r);
    body = bind_body("a", "", node);
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), 0);
    char *decision = xstrdup_test(b.decision);
    sched_bind_finish(s, &b, SCHED_BIND_UNKNOWN, (struct sched_now){2000, 100});
    sched_bind_release(&b);
    json_t *pod = json_pack("{s:{s:s, s:s, s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", "a",
                            "namespace", "default", "uid", "uid-7", "resourceVersion", "9",
                            "annotations", "vgpu.io/decision", decision, "spec", "nodeName", node);
    sched_pod_update(s, pod);
    json_decref(pod);
    assert_int_equal(assumed_count(s), 0);
    assert_int_equal(sched_expire(s, (struct sched_now){999999, 100}), 0);
    dump = sched_dump(s, true);
    assert_non_null(strstr(dump, "\"memUsedMiB\":6000"));
    free(dump);
    free(decision);

    /* The pod was deleted and recreated under the same name between filter and bind. */
    r = filter(s, "c", "3000", 2, 3000);
    snprintf(node, sizeof node, "%s", filtered_node(r));
    json_decref(r);
    body = bind_body("c", "uid-other", node);
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), -ESTALE);
    assert_non_null(strstr(err.msg, "recreated"));
    assert_int_equal(assumed_count(s), 0);

    /* A decision someone else put on an unbound pod: vgpu-scheduler writes its own only
     * with the binding, so this one is ignored. It is not charged, and no bind writes it:
     * the pod is undecided until filter decides for it. */
    const char *dec = "{\"version\":1,\"node\":\"n1\",\"time\":1,\"containers\":[{\"name\":\"m\","
                      "\"gpus\":[{\"uuid\":\"GPU-1\",\"memoryMiB\":2000,\"cores\":10}]}]}";
    pod = json_pack("{s:{s:s, s:s, s:s, s:s, s:{s:s}}}", "metadata", "name", "d", "namespace",
                    "default", "uid", "uid-d", "resourceVersion", "11", "annotations",
                    "vgpu.io/decision", dec);
    sched_pod_update(s, pod);
    json_decref(pod);
    dump = sched_dump(s, false);
    assert_null(strstr(dump, "\"memUsedMiB\":2000"));
    free(dump);
    body = bind_body("d", "", "n1");
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "no live filter decision"));
    /* Filter decides for it; the binding carries the scheduler's decision, not theirs. */
    r = filter(s, "d", "1000", 2, 4000);
    snprintf(node, sizeof node, "%s", filtered_node(r));
    json_decref(r);
    body = bind_body("d", "", node);
    assert_int_equal(sched_bind_prepare(s, body, strlen(body), t, &b, &err), 0);
    assert_non_null(strstr(b.decision, "\"memoryMiB\":1000"));
    assert_null(strstr(b.decision, "\"memoryMiB\":2000"));
    sched_bind_finish(s, &b, SCHED_BIND_OK, t);
    sched_bind_release(&b);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

static void test_bad_bodies(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 2);
    const char *bodies[] = {"",
                            "{",
                            "[]",
                            "{\"Pod\":{},\"NodeNames\":[],\"X\":1}",
                            "{\"Pod\":1,\"NodeNames\":[]}",
                            "{\"Pod\":{\"metadata\":{}},"
                            "\"NodeNames\":[]}",
                            "{\"Pod\":{\"metadata\":{\"name\":\"a\"}},\"NodeNames\":[1]}",
                            "{\"a\":1,\"a\":2}"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        char *out = NULL;
        struct vg_err err = {0};
        assert_int_equal(
            sched_filter(s, bodies[i], strlen(bodies[i]), (struct sched_now){0, 0}, &out, &err),
            -EBADMSG);
        assert_true(err.msg[0] != '\0');
        assert_null(out);
    }
    sched_state_free(s);
}

/* The exposition through the one writer: a GPU model with a quote, a backslash and a
 * newline comes out escaped in every label that carries it, every family's HELP and TYPE
 * appear once, and every sample line belongs to the family above it. */
static void test_metrics_escaped_and_once(void **unused)
{
    (void)unused;
    struct sched_options o;
    sched_options_default(&o);
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    const char *inv = "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":"
                      "\"GPU-0\",\"index\":0,\"model\":\"H100 \\\"SXM\\\" \\\\x\\nB\","
                      "\"memoryMiB\":1000,\"cores\":100,\"slots\":4,\"healthy\":true}]}";
    json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n0", "annotations",
                             "vgpu.io/gpus", inv);
    sched_node_update(s, node);
    json_decref(node);
    struct vg_buf b;
    vg_buf_init(&b, "metrics", 1 << 20);
    struct vg_prom p;
    vg_prom_init(&p, &b, &err);
    const uint64_t counts[3] = {1, 0, 2};
    const struct sched_metrics_latency lat = {"filter", counts, 3, 0.25};
    const double bounds[2] = {0.001, 0.5};
    const struct sched_metrics_server server = {"extender", 2, 1, 0, 3, 0};
    const struct sched_metrics_daemon d = {.bounds = bounds,
                                           .bucket_count = 2,
                                           .latency = &lat,
                                           .verb_count = 1,
                                           .servers = &server,
                                           .server_count = 1};
    sched_metrics_daemon(&p, s, &d);
    sched_metrics_allocation(&p, s, true);
    assert_int_equal(vg_prom_done(&p), 0);
    const char *want = "model_name=\"H100 \\\"SXM\\\" \\\\x\\nB\"";
    assert_non_null(strstr(b.data, want));
    assert_non_null(strstr(b.data, "device_type=\"H100 \\\"SXM\\\" \\\\x\\nB\",zone=\"vGPU\""));
    assert_non_null(strstr(b.data, "vgpu_scheduler_request_duration_seconds_bucket{verb=\"filter\","
                                   "le=\"0.5\"} 1\n"));
    assert_non_null(strstr(b.data, "vgpu_scheduler_request_duration_seconds_bucket{verb=\"filter\","
                                   "le=\"+Inf\"} 3\n"));
    assert_non_null(strstr(b.data, "vgpu_scheduler_request_duration_seconds_sum{verb=\"filter\"} "
                                   "0.25\n"));
    assert_non_null(strstr(b.data, "vgpu_scheduler_connections_closed_total{server=\"extender\","
                                   "reason=\"refused\"} 3\n"));
    /* Line by line: a TYPE names a family not seen before; a sample is of the family. */
    char family[128] = "";
    char seen[8192] = " ";
    size_t families = 0;
    for (char *line = b.data; *line != '\0';) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        *end = '\0';
        if (strncmp(line, "# TYPE ", 7) == 0) {
            assert_int_equal(sscanf(line + 7, "%127s", family), 1);
            char key[132];
            snprintf(key, sizeof key, " %s ", family);
            if (strstr(seen, key) != NULL)
                fail_msg("family %s written twice", family);
            size_t used = strlen(seen);
            int n = snprintf(seen + used, sizeof seen - used, "%s ", family);
            assert_true(n > 0 && (size_t)n < sizeof seen - used);
            families++;
        } else if (line[0] != '#') {
            size_t n = strlen(family);
            if (n == 0 || strncmp(line, family, n) != 0 ||
                (line[n] != '{' && line[n] != ' ' && line[n] != '_'))
                fail_msg("sample '%s' outside family %s", line, family);
        }
        line = end + 1;
    }
    assert_true(families > 40);
    vg_buf_free(&b);
    sched_state_free(s);
}

/* ---- dynamic MIG ---- */

/* Node m0: one H100 in dynamic MIG mode with HAMi's documented allowlist, and the
 * instances given (JSON array text). */
static void mig_node(struct sched_state *s, const char *instances, const char *refused)
{
    char inv[2048];
    snprintf(inv, sizeof inv,
             "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-m\","
             "\"index\":0,\"model\":\"H100\",\"memoryMiB\":81559,\"cores\":100,\"slots\":7,"
             "\"healthy\":true,\"mig\":{\"slices\":8,\"profiles\":["
             "{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":9984,\"sms\":16,\"size\":1,"
             "\"placements\":[0,1,2,3,4,5,6]},"
             "{\"name\":\"2g.20gb\",\"id\":14,\"memoryMiB\":20096,\"sms\":32,\"size\":2,"
             "\"placements\":[0,2,4]},"
             "{\"name\":\"3g.40gb\",\"id\":9,\"memoryMiB\":40448,\"sms\":60,\"size\":4,"
             "\"placements\":[0,4]},"
             "{\"name\":\"7g.80gb\",\"id\":0,\"memoryMiB\":81152,\"sms\":132,\"size\":8,"
             "\"placements\":[0]}],\"instances\":%s}}]}",
             instances);
    json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "m0", "annotations",
                             "vgpu.io/gpus", inv);
    if (refused != NULL)
        json_object_set_new(json_object_get(json_object_get(node, "metadata"), "annotations"),
                            "vgpu.io/mig-refused", json_string(refused));
    sched_node_update(s, node);
    json_decref(node);
}

static json_t *mig_filter(struct sched_state *s, const char *pod, const char *mem, int64_t t)
{
    json_t *args =
        json_pack("{s:{s:{s:s, s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}}, s:[s]}", "Pod",
                  "metadata", "name", pod, "namespace", "default", "resourceVersion", "7", "uid",
                  "uid-7", "spec", "containers", "name", "main", "resources", "limits",
                  "nvidia.com/gpu", "1", "nvidia.com/gpumem", mem ? mem : "-", "NodeNames", "m0");
    if (mem == NULL) /* no amount: the whole GPU */
        json_object_del(
            json_object_get(
                json_object_get(
                    json_array_get(
                        json_object_get(json_object_get(json_object_get(args, "Pod"), "spec"),
                                        "containers"),
                        0),
                    "resources"),
                "limits"),
            "nvidia.com/gpumem");
    char *body = json_dumps(args, JSON_COMPACT), *out = NULL;
    json_decref(args);
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, strlen(body), (struct sched_now){100, t}, &out, &err),
                     0);
    json_t *res = json_loads(out, 0, NULL);
    assert_non_null(res);
    free(out);
    free(body);
    return res;
}

/* The decision's MIG placement for pod, as "profile@start" ("-" when none). */
static const char *mig_of(struct sched_state *s, const char *pod)
{
    static char buf[64];
    char key[64];
    snprintf(key, sizeof key, "default/%s", pod);
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p == NULL || p->decision == NULL)
        return "-";
    struct annot_decision d;
    struct vg_err err = {0};
    assert_int_equal(annot_decision_decode(p->decision, strlen(p->decision), &d, &err), 0);
    const struct annot_share *g = &d.containers[0].gpus[0];
    if (g->mig_profile[0] == '\0')
        return "-";
    snprintf(buf, sizeof buf, "%s@%u/%llu/%u", g->mig_profile, g->mig_start,
             (unsigned long long)g->memory_mib, g->cores);
    return buf;
}

static void test_mig_decisions(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(0, 0, 0);
    mig_node(s, "[]", NULL);
    /* 9,000 and 18,000 MiB get a 1g and a 2g instance with the profile's memory. */
    json_t *r = mig_filter(s, "a", "9000", 0);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_string_equal(mig_of(s, "a"), "1g.10gb@0/9984/0");
    r = mig_filter(s, "b", "18000", 0);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    /* Not over the 1g: beside it, keeping the 3g at 4 whole. */
    const char *b = mig_of(s, "b");
    assert_true(strncmp(b, "2g.20gb@", 8) == 0);
    assert_true(b[8] == '2');
    /* A 40,000 MiB pod still finds the 3g at 4; a second one has no room left. */
    r = mig_filter(s, "c", "40000", 0);
    json_decref(r);
    assert_string_equal(mig_of(s, "c"), "3g.40gb@4/40448/0");
    r = mig_filter(s, "d", "40000", 0);
    assert_string_equal(node_or_dash(r), "-");
    const char *why = json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "m0"));
    assert_non_null(why);
    assert_non_null(strstr(why, "overlaps an existing instance"));
    json_decref(r);
    /* More memory than any profile: pending, with that reason. */
    r = mig_filter(s, "e", "90000", 0);
    why = json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "m0"));
    assert_non_null(strstr(why, "no MIG profile"));
    json_decref(r);
    struct vg_err err = {0};
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

/* The MIG rule keeps room for the learned mix default keeps: card shares held on other
 * nodes count (a quarter of a card asks what a 2g.20gb holds), and MIG instances count in
 * that mix as the share of the card their profile is. */
static void test_mig_learned_mix(void **unused)
{
    (void)unused;
    /* The pod alone in the mix: nothing to keep room for, the lowest start. */
    struct sched_state *s = new_state(0, 0, 0);
    mig_node(s, "[]", NULL);
    json_t *r = mig_filter(s, "c", "40000", 0);
    json_decref(r);
    assert_string_equal(mig_of(s, "c"), "3g.40gb@0/40448/0");
    sched_state_free(s);
    /* Quarter-card shares held on n0, a card without MIG: the 3g goes to 4, so slices 0-3
     * take two 2g.20gb. */
    s = new_state(1, 81559, 8);
    bound_pod(s, "a0", "n0", 0, 20000, 25);
    bound_pod(s, "a1", "n0", 0, 20000, 25);
    mig_node(s, "[]", NULL);
    r = mig_filter(s, "c", "40000", 0);
    json_decref(r);
    assert_string_equal(mig_of(s, "c"), "3g.40gb@4/40448/0");
    struct vg_err err = {0};
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
    /* A 2g instance counts as a quarter card; its pod gone, it counts no more. */
    s = new_state(0, 0, 0);
    mig_node(s, "[]", NULL);
    r = mig_filter(s, "b", "18000", 0);
    json_decref(r);
    assert_string_equal(mig_of(s, "b"), "2g.20gb@0/20096/0");
    assert_int_equal(s->mix_seen.count, 1);
    assert_int_equal(s->mix_seen.types[0].gpu_milli, 251); /* 20,096 of 8 x 9,984 MiB */
    r = mig_filter(s, "c", "40000", 0);
    json_decref(r);
    assert_string_equal(mig_of(s, "c"), "3g.40gb@4/40448/0");
    assert_int_equal(s->mix_seen.total_weight, 2);
    json_t *gone = json_pack("{s:{s:s, s:s}}", "metadata", "name", "b", "namespace", "default");
    sched_pod_delete(s, gone);
    json_decref(gone);
    assert_int_equal(s->mix_seen.total_weight, 1);
    assert_int_equal(s->mix_seen.types[0].gpu_milli, 506);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

/* A container asking two GPUs with an amount of memory, on nodes whose GPUs are all in
 * dynamic MIG mode: not placed (one instance per container), with that reason in the
 * node's FailedNodes entry, which `vgpu explain` shows; nothing is promised. */
static void test_mig_two_gpus_refused(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(0, 0, 0);
    mig_node(s, "[]", NULL);
    json_t *args =
        json_pack("{s:{s:{s:s, s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}}, s:[s]}", "Pod",
                  "metadata", "name", "two", "namespace", "default", "resourceVersion", "7", "uid",
                  "uid-2", "spec", "containers", "name", "main", "resources", "limits",
                  "nvidia.com/gpu", "2", "nvidia.com/gpumem", "9000", "NodeNames", "m0");
    char *body = json_dumps(args, JSON_COMPACT), *out = NULL;
    json_decref(args);
    struct vg_err err = {0};
    assert_int_equal(sched_filter(s, body, strlen(body), (struct sched_now){100, 0}, &out, &err),
                     0);
    json_t *r = json_loads(out, 0, NULL);
    assert_non_null(r);
    assert_string_equal(node_or_dash(r), "-");
    const char *why = json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "m0"));
    assert_non_null(why);
    assert_non_null(strstr(why, "more than one GPU"));
    assert_non_null(strstr(why, "one per container"));
    assert_string_equal(mig_of(s, "two"), "-");
    json_decref(r);
    free(out);
    free(body);
    /* The same pod asking one GPU is placed. */
    r = mig_filter(s, "one", "9000", 0);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

static void test_mig_instances_and_refusals(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(0, 0, 0);
    /* An instance made by hand at 4..7, and the 3g at 0 refused a minute ago. */
    mig_node(s, "[{\"profile\":\"3g.40gb\",\"start\":4,\"size\":4,\"pod\":\"\"}]",
             "{\"version\":1,\"refused\":[{\"uuid\":\"GPU-m\",\"profile\":\"3g.40gb\","
             "\"start\":0,\"time\":1000,\"reason\":\"NVML: Insufficient Resources\"}]}");
    json_t *r = mig_filter(s, "a", "30000", 1060);
    assert_string_equal(node_or_dash(r), "-");
    const char *why = json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "m0"));
    assert_non_null(strstr(why, "mig-refused"));
    json_decref(r);
    /* Ten minutes after the refusal it is tried again. */
    r = mig_filter(s, "a", "30000", 1000 + 601);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_string_equal(mig_of(s, "a"), "3g.40gb@0/40448/0");
    json_t *gone = json_pack("{s:{s:s, s:s}}", "metadata", "name", "a", "namespace", "default");
    sched_pod_delete(s, gone);
    json_decref(gone);
    /* A bound pod's decision read back holds its slices: nothing overlaps it. */
    json_t *pod = json_pack(
        "{s:{s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", "bound", "namespace", "default",
        "annotations", "vgpu.io/decision",
        "{\"version\":1,\"node\":\"m0\",\"time\":1,\"containers\":[{\"name\":\"m\",\"gpus\":[{"
        "\"uuid\":\"GPU-m\",\"memoryMiB\":9984,\"cores\":0,\"mig\":{\"profile\":\"1g.10gb\","
        "\"start\":0}}]}]}",
        "spec", "nodeName", "m0");
    sched_pod_update(s, pod);
    json_decref(pod);
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.conflicts, 0);
    r = mig_filter(s, "c", "30000", 1700);
    assert_string_equal(node_or_dash(r), "-");
    why = json_string_value(json_object_get(json_object_get(r, "FailedNodes"), "m0"));
    assert_non_null(strstr(why, "overlaps"));
    json_decref(r);
    r = mig_filter(s, "b", "9000", 1700);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_string_equal(mig_of(s, "b"), "1g.10gb@1/9984/0");
    struct vg_err err = {0};
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

/* A bound pod's decision naming a MIG profile or start the GPU does not list, or MIG on a
 * GPU not in dynamic MIG mode, is skipped with a reason: it holds no slices. */
static void test_mig_bad_decisions(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 2);
    mig_node(s, "[]", NULL);
    const char *bad[] = {
        "{\"uuid\":\"GPU-m\",\"memoryMiB\":40448,\"cores\":0,\"mig\":{\"profile\":\"4g.40gb\","
        "\"start\":0}}",
        "{\"uuid\":\"GPU-m\",\"memoryMiB\":40448,\"cores\":0,\"mig\":{\"profile\":\"3g.40gb\","
        "\"start\":6}}",
        "{\"uuid\":\"GPU-0\",\"memoryMiB\":1000,\"cores\":0,\"mig\":{\"profile\":\"1g.10gb\","
        "\"start\":0}}",
    };
    const char *node[] = {"m0", "m0", "n0"};
    for (int i = 0; i < 3; i++) {
        char dec[512], name[16];
        snprintf(dec, sizeof dec,
                 "{\"version\":1,\"node\":\"%s\",\"time\":1,\"containers\":[{\"name\":\"m\","
                 "\"gpus\":[%s]}]}",
                 node[i], bad[i]);
        snprintf(name, sizeof name, "forged%d", i);
        json_t *pod = json_pack("{s:{s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", name,
                                "namespace", "default", "annotations", "vgpu.io/decision", dec,
                                "spec", "nodeName", node[i]);
        sched_pod_update(s, pod);
        json_decref(pod);
        struct sched_stats st;
        sched_state_stats(s, &st);
        assert_int_equal(st.skipped_pods, (uint64_t)i + 1);
    }
    /* The whole GPU is still free: a 7g.80gb at 0. */
    json_t *r = mig_filter(s, "big", "80000", 0);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_string_equal(mig_of(s, "big"), "7g.80gb@0/81152/0");
    /* A pod asking a whole GPU without an amount (HAMi: all of its memory) gets the largest
     * instance, whose memory is below the card's 81,559 MiB. */
    json_t *gone = json_pack("{s:{s:s, s:s}}", "metadata", "name", "big", "namespace", "default");
    sched_pod_delete(s, gone);
    json_decref(gone);
    r = mig_filter(s, "whole", NULL, 0);
    assert_string_equal(node_or_dash(r), "m0");
    json_decref(r);
    assert_string_equal(mig_of(s, "whole"), "7g.80gb@0/81152/0");
    sched_state_free(s);
}

/* The dashboard's state carries the held time the node's inventory reports for each
 * container (display only), by pod uid, container and GPU; a heartbeat without it, or a
 * node whose inventory says nothing of a container, shows none. */
static void pod_uid_on(struct sched_state *s, const char *name, const char *uid, unsigned mib)
{
    char dec[512];
    snprintf(dec, sizeof dec,
             "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":\"m\","
             "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":%u,\"cores\":20}]}]}",
             mib);
    json_t *pod = json_pack("{s:{s:s, s:s, s:s, s:{s:s}}, s:{s:s}}", "metadata", "name", name,
                            "namespace", "default", "uid", uid, "annotations", "vgpu.io/decision",
                            dec, "spec", "nodeName", "n0");
    sched_pod_update(s, pod);
    json_decref(pod);
}

static void node_inventory(struct sched_state *s, const char *held)
{
    char inv[1024];
    snprintf(inv, sizeof inv,
             "{\"version\":1,\"heartbeat\":%d,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-0\","
             "\"index\":0,\"model\":\"H100\",\"memoryMiB\":10000,\"cores\":100,\"slots\":4,"
             "\"healthy\":true}]%s%s}",
             held != NULL ? 2 : 3, held != NULL ? ",\"held\":" : "", held != NULL ? held : "");
    json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n0", "annotations",
                             "vgpu.io/gpus", inv);
    sched_node_update(s, node);
    json_decref(node);
}

/* The tenant of pod name on n0's GPU 0 in the state JSON (a new reference). */
static json_t *state_tenant(struct sched_state *s, const char *name)
{
    char *text = sched_view_state(s, 5);
    assert_non_null(text);
    json_t *st = json_loads(text, 0, NULL);
    free(text);
    assert_non_null(st);
    json_t *tenants = json_object_get(
        json_array_get(json_object_get(json_array_get(json_object_get(st, "nodes"), 0), "gpus"), 0),
        "tenants");
    json_t *found = NULL;
    size_t i;
    json_t *t;
    json_array_foreach(tenants, i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "pod")), name) == 0)
            found = json_incref(t);
    }
    json_decref(st);
    assert_non_null(found);
    return found;
}

static void test_held_in_state(void **unused)
{
    (void)unused;
    struct sched_state *s = new_state(1, 10000, 4);
    pod_uid_on(s, "low", "u-low", 2000);
    pod_uid_on(s, "other", "u-other", 2000);
    node_inventory(s, "[{\"pod\":\"u-low\",\"container\":\"m\",\"gpu\":0,\"seconds\":42},"
                      "{\"pod\":\"u-gone\",\"container\":\"m\",\"gpu\":0,\"seconds\":7}]");
    json_t *t = state_tenant(s, "low");
    assert_int_equal(json_integer_value(json_object_get(t, "heldSeconds")), 42);
    json_decref(t);
    t = state_tenant(s, "other");
    assert_null(json_object_get(t, "heldSeconds"));
    json_decref(t);
    /* A later write's figure replaces it; a write without the list (an older device
     * plugin) leaves none. Neither changes what the GPU holds. */
    node_inventory(s, "[{\"pod\":\"u-low\",\"container\":\"m\",\"gpu\":0,\"seconds\":50}]");
    t = state_tenant(s, "low");
    assert_int_equal(json_integer_value(json_object_get(t, "heldSeconds")), 50);
    json_decref(t);
    node_inventory(s, NULL);
    t = state_tenant(s, "low");
    assert_null(json_object_get(t, "heldSeconds"));
    json_decref(t);
    struct sched_stats st;
    sched_state_stats(s, &st);
    assert_int_equal(st.bound, 2);
    struct vg_err err = {0};
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

int main(void)
{
    vg_log_max_level = VG_LOG_ERROR;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mig_decisions),
        cmocka_unit_test(test_mig_learned_mix),
        cmocka_unit_test(test_mig_two_gpus_refused),
        cmocka_unit_test(test_mig_instances_and_refusals),
        cmocka_unit_test(test_mig_bad_decisions),
        cmocka_unit_test(test_no_double_promise),
        cmocka_unit_test(test_expiry_and_bind),
        cmocka_unit_test(test_old_instance_events),
        cmocka_unit_test(test_decision_rebuild_and_overcommit),
        cmocka_unit_test(test_decision_annotation_edits),
        cmocka_unit_test(test_learned_mix_policies),
        cmocka_unit_test(test_learned_mix_model_lists),
        cmocka_unit_test(test_types_ids),
        cmocka_unit_test(test_metrics_escaped_and_once),
        cmocka_unit_test(test_deleted_node_out_of_pressure),
        cmocka_unit_test(test_bind_outcomes),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_held_in_state),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
