/* Live resize in vgpu-scheduler (src/scheduler/resize.c, sched_pod_recharge): the new
 * decision a request makes, the namespace quota check, and the ledger that must hold the
 * new decision beside the other pods or keep the old one. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "annot/annot.h"
#include "scheduler/resize.h"
#include "scheduler/sched.h"

static const char *decision_1 = "{\"version\":1,\"node\":\"n0\",\"time\":5,\"containers\":["
                                "{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":"
                                "4096,\"cores\":30}]},{\"name\":\"side\",\"gpus\":[]}]}";
static const char *decision_2 = "{\"version\":1,\"node\":\"n0\",\"time\":5,\"containers\":["
                                "{\"name\":\"a\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":"
                                "1000,\"cores\":0}]},{\"name\":\"b\",\"gpus\":[{\"uuid\":"
                                "\"GPU-0\",\"memoryMiB\":1000,\"cores\":100}]}]}";

static struct annot_resize req(const char *container, uint64_t mib, unsigned cores)
{
    struct annot_resize r = {.memory_mib = mib, .cores = cores};
    snprintf(r.id, sizeof r.id, "r-1");
    snprintf(r.container, sizeof r.container, "%s", container);
    return r;
}

static void test_decision(void **state)
{
    (void)state;
    char *out = NULL;
    int64_t raise = 0;
    struct vg_err err = {0};
    struct annot_resize r = req("", 8192, 40);
    assert_int_equal(sched_resize_decision(decision_1, &r, 99, &out, &raise, &err), 0);
    struct annot_decision d;
    assert_int_equal(annot_decision_decode(out, strlen(out), &d, &err), 0);
    assert_int_equal(d.generation, 1);
    assert_int_equal(d.time, 99);
    assert_int_equal(d.containers[0].gpus[0].memory_mib, 8192);
    assert_int_equal(d.containers[0].gpus[0].cores, 40);
    assert_int_equal(raise, 4096);
    /* One more: generation 2, and a lowering is a negative raise. */
    char *again = NULL;
    r = req("main", 1024, 0);
    assert_int_equal(sched_resize_decision(out, &r, 100, &again, &raise, &err), 0);
    assert_int_equal(annot_decision_decode(again, strlen(again), &d, &err), 0);
    assert_int_equal(d.generation, 2);
    assert_int_equal(d.containers[0].gpus[0].cores, 40);
    assert_int_equal(raise, -7168);
    free(again);
    free(out);
    /* Nothing to change: 1, no text. */
    r = req("main", 4096, 30);
    assert_int_equal(sched_resize_decision(decision_1, &r, 99, &out, &raise, &err), 1);
    assert_null(out);
    /* A container without GPUs, or not in the pod. */
    r = req("side", 10, 0);
    assert_int_equal(sched_resize_decision(decision_1, &r, 99, &out, &raise, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "side"));
    r = req("ghost", 10, 0);
    assert_int_equal(sched_resize_decision(decision_1, &r, 99, &out, &raise, &err), -EINVAL);
    /* Two containers with GPUs: one must be named. */
    r = req("", 10, 0);
    assert_int_equal(sched_resize_decision(decision_2, &r, 99, &out, &raise, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "name one"));
    /* Compute shares that cannot change live: none (0) or exclusive (100), or to 100. */
    r = req("a", 0, 50);
    assert_int_equal(sched_resize_decision(decision_2, &r, 99, &out, &raise, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "restart the pod"));
    r = req("b", 0, 50);
    assert_int_equal(sched_resize_decision(decision_2, &r, 99, &out, &raise, &err), -EINVAL);
    r = req("main", 0, 100);
    assert_int_equal(sched_resize_decision(decision_1, &r, 99, &out, &raise, &err), -EINVAL);
    assert_null(out);
    /* A MIG instance's memory and compute are the instance's: no resize changes them (the
     * limits file would lose what it says of the instance, a raise would count against
     * the quota for memory the instance does not have). */
    static const char *decision_mig =
        "{\"version\":1,\"node\":\"n0\",\"time\":5,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":4864,\"cores\":0,\"mig\":{\"profile\":"
        "\"1g.5gb\",\"start\":2}}]}]}";
    struct annot_decision md;
    assert_int_equal(annot_decision_decode(decision_mig, strlen(decision_mig), &md, &err), 0);
    r = req("main", 9000, 0);
    raise = 0;
    assert_int_equal(sched_resize_decision(decision_mig, &r, 99, &out, &raise, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "MIG instance 1g.5gb"));
    assert_null(out);
    assert_int_equal(raise, 0);
    r = req("main", 1000, 0);
    assert_int_equal(sched_resize_decision(decision_mig, &r, 99, &out, &raise, &err), -EINVAL);
    assert_null(out);
}

static void test_quota(void **state)
{
    (void)state;
    struct vg_err err = {0};
    json_t *q = json_loads("{\"items\":[{\"metadata\":{\"name\":\"gpu\"},\"spec\":{\"hard\":{"
                           "\"requests.nvidia.com/gpumem\":\"10Gi\",\"cpu\":\"4\"}},\"status\":{"
                           "\"used\":{\"requests.nvidia.com/gpumem\":\"8k\"}}}]}",
                           0, NULL);
    assert_non_null(q);
    /* 8000 used (8k, as Kubernetes writes 8000) of 10240: 2240 more fit, earlier raises
     * count. */
    assert_int_equal(sched_resize_quota_check(q, 0, 2240, &err), 0);
    assert_int_equal(sched_resize_quota_check(q, 0, 2241, &err), -EDQUOT);
    assert_non_null(strstr(err.msg, "namespace quota gpu"));
    assert_non_null(strstr(err.msg, "10241 MiB"));
    assert_int_equal(sched_resize_quota_check(q, 2000, 241, &err), -EDQUOT);
    assert_int_equal(sched_resize_quota_check(q, -1000, 3000, &err), 0);
    /* Lowering is never refused, even over the quota. */
    assert_int_equal(sched_resize_quota_check(q, 9000, -1, &err), 0);
    json_decref(q);
    /* No quota on gpumem, or none at all. */
    q = json_loads("{\"items\":[{\"metadata\":{\"name\":\"c\"},\"spec\":{\"hard\":{\"cpu\":"
                   "\"1\"}}}]}",
                   0, NULL);
    assert_int_equal(sched_resize_quota_check(q, 0, 1 << 20, &err), 0);
    json_decref(q);
    q = json_loads("{\"items\":[]}", 0, NULL);
    assert_int_equal(sched_resize_quota_check(q, 0, 1 << 20, &err), 0);
    json_decref(q);
    /* A quota that cannot be read refuses (nothing is assumed). */
    q = json_loads("{\"items\":[{\"metadata\":{\"name\":\"odd\"},\"spec\":{\"hard\":{"
                   "\"nvidia.com/gpumem\":\"lots\"}}}]}",
                   0, NULL);
    assert_int_equal(sched_resize_quota_check(q, 0, 1, &err), -EDQUOT);
    assert_non_null(strstr(err.msg, "unreadable"));
    json_decref(q);
}

/* A container with two GPUs holds its limit on each: a resize's quota charge is the sum
 * of both GPUs' changes, never the last GPU's alone. */
static void test_quota_two_gpus(void **state)
{
    (void)state;
    static const char *two =
        "{\"version\":1,\"node\":\"n0\",\"time\":5,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":4096,\"cores\":30},{\"uuid\":\"GPU-1\","
        "\"memoryMiB\":4096,\"cores\":30}]}]}";
    static const char *uneven =
        "{\"version\":1,\"node\":\"n0\",\"time\":5,\"containers\":[{\"name\":\"main\","
        "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":2048,\"cores\":30},{\"uuid\":\"GPU-1\","
        "\"memoryMiB\":6144,\"cores\":30}]}]}";
    /* 10240 MiB hard, 8000 used: 2240 MiB of room. */
    json_t *q = json_loads("{\"items\":[{\"metadata\":{\"name\":\"gpu\"},\"spec\":{\"hard\":{"
                           "\"requests.nvidia.com/gpumem\":\"10Gi\"}},\"status\":{\"used\":{"
                           "\"requests.nvidia.com/gpumem\":\"8000Mi\"}}}]}",
                           0, NULL);
    assert_non_null(q);
    struct vg_err err = {0};
    char *out = NULL;
    int64_t raise = 0;
    /* 4096 -> 6000 on each: 1904 MiB on one GPU would fit, 3808 on the two does not. */
    struct annot_resize r = req("main", 6000, 0);
    assert_int_equal(sched_resize_decision(two, &r, 9, &out, &raise, &err), 0);
    assert_int_equal(raise, 2 * 1904);
    assert_int_equal(sched_resize_quota_check(q, 0, raise, &err), -EDQUOT);
    assert_non_null(strstr(err.msg, "11808 MiB"));
    free(out);
    /* 4096 -> 5000 on each: 1808 MiB in all fits. */
    r = req("main", 5000, 0);
    assert_int_equal(sched_resize_decision(two, &r, 9, &out, &raise, &err), 0);
    assert_int_equal(raise, 2 * 904);
    assert_int_equal(sched_resize_quota_check(q, 0, raise, &err), 0);
    free(out);
    /* Uneven limits, both directions: 2048 and 6144 -> 6144 raises 4096 in all (the last
     * GPU alone changes nothing), refused; -> 4096 raises one GPU as much as it lowers
     * the other, 0; -> 1024 lowers both, never refused. */
    r = req("main", 6144, 0);
    assert_int_equal(sched_resize_decision(uneven, &r, 9, &out, &raise, &err), 0);
    assert_int_equal(raise, 4096);
    assert_int_equal(sched_resize_quota_check(q, 0, raise, &err), -EDQUOT);
    free(out);
    r = req("main", 4096, 0);
    assert_int_equal(sched_resize_decision(uneven, &r, 9, &out, &raise, &err), 0);
    assert_int_equal(raise, 0);
    assert_int_equal(sched_resize_quota_check(q, 0, raise, &err), 0);
    free(out);
    r = req("main", 1024, 0);
    assert_int_equal(sched_resize_decision(uneven, &r, 9, &out, &raise, &err), 0);
    assert_int_equal(raise, -(1024 + 5120));
    assert_int_equal(sched_resize_quota_check(q, 0, raise, &err), 0);
    free(out);
    json_decref(q);
}

static struct sched_state *one_gpu(void)
{
    struct sched_options o;
    sched_options_default(&o);
    struct sched_state *s = NULL;
    struct vg_err err = {0};
    assert_int_equal(sched_state_new(&o, &s, &err), 0);
    json_t *node =
        json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", "n0", "annotations", "vgpu.io/gpus",
                  "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[{\"uuid\":\"GPU-0\","
                  "\"index\":0,\"model\":\"H100\",\"memoryMiB\":16000,\"cores\":100,\"slots\":4,"
                  "\"healthy\":true}]}");
    sched_node_update(s, node);
    json_decref(node);
    return s;
}

static void bound(struct sched_state *s, const char *name, unsigned mib, unsigned cores)
{
    char dec[512];
    snprintf(dec, sizeof dec,
             "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":\"main\","
             "\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":%u,\"cores\":%u}]}]}",
             mib, cores);
    json_t *pod =
        json_pack("{s:{s:s, s:s, s:s, s:{s:s}}, s:{s:s}, s:{s:s}}", "metadata", "name", name,
                  "namespace", "default", "uid", name, "annotations", "vgpu.io/decision", dec,
                  "spec", "nodeName", "n0", "status", "phase", "Running");
    sched_pod_update(s, pod);
    json_decref(pod);
}

static uint64_t used_mib(const struct sched_state *s)
{
    char *dump = sched_dump(s, true);
    json_t *j = json_loads(dump, 0, NULL);
    free(dump);
    uint64_t used = (uint64_t)json_integer_value(json_object_get(
        json_array_get(json_object_get(json_object_get(j, "nodes"), "n0"), 0), "memUsedMiB"));
    json_decref(j);
    return used;
}

static uint64_t high_tenants(const struct sched_state *s)
{
    char *dump = sched_dump(s, true);
    json_t *j = json_loads(dump, 0, NULL);
    free(dump);
    uint64_t high = (uint64_t)json_integer_value(
        json_object_get(json_array_get(json_object_get(json_object_get(j, "nodes"), "n0"), 0),
                        "highPriorityTenants"));
    json_decref(j);
    return high;
}

/* A high-priority pod (nvidia.com/priority 0) resized stays counted as high on its GPU:
 * the next high-priority pod still avoids the card. */
static void test_recharge_keeps_priority(void **state)
{
    (void)state;
    struct sched_state *s = one_gpu();
    const char *dec = "{\"version\":1,\"node\":\"n0\",\"time\":1,\"containers\":[{\"name\":"
                      "\"main\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":4096,\"cores\":30}]}]}";
    json_t *pod =
        json_pack("{s:{s:s, s:s, s:s, s:{s:s}}, s:{s:s, s:[{s:s, s:{s:{s:s}}}]}, s:{s:s}}",
                  "metadata", "name", "hi", "namespace", "default", "uid", "hi", "annotations",
                  "vgpu.io/decision", dec, "spec", "nodeName", "n0", "containers", "name", "main",
                  "resources", "limits", "nvidia.com/priority", "0", "status", "phase", "Running");
    sched_pod_update(s, pod);
    json_decref(pod);
    assert_int_equal(high_tenants(s), 1);
    struct vg_err err = {0};
    const char *grow = "{\"version\":1,\"node\":\"n0\",\"time\":2,\"generation\":1,\"containers\":"
                       "[{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":7000,"
                       "\"cores\":30}]}]}";
    assert_int_equal(sched_pod_recharge(s, "default/hi", grow, &err), 0);
    assert_int_equal(used_mib(s), 7000);
    assert_int_equal(high_tenants(s), 1);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    sched_state_free(s);
}

static void test_recharge(void **state)
{
    (void)state;
    struct sched_state *s = one_gpu();
    bound(s, "a", 4096, 30);
    bound(s, "b", 8000, 30);
    assert_int_equal(used_mib(s), 12096);
    struct vg_err err = {0};
    /* 7000 + 8000 fits in 16000: charged in place of 4096. */
    const char *grow = "{\"version\":1,\"node\":\"n0\",\"time\":2,\"generation\":1,\"containers\":"
                       "[{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-0\",\"memoryMiB\":7000,"
                       "\"cores\":30}]}]}";
    assert_int_equal(sched_pod_recharge(s, "default/a", grow, &err), 0);
    assert_int_equal(used_mib(s), 15000);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    /* 9000 + 8000 does not: refused with the placement's reason, the 7000 stays. */
    const char *too_big = "{\"version\":1,\"node\":\"n0\",\"time\":3,\"generation\":2,"
                          "\"containers\":[{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-0\","
                          "\"memoryMiB\":9000,\"cores\":30}]}]}";
    assert_true(sched_pod_recharge(s, "default/a", too_big, &err) < 0);
    assert_true(err.msg[0] != '\0');
    assert_int_equal(used_mib(s), 15000);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    /* Compute too: 30 + 80 is more than the GPU. */
    const char *cores = "{\"version\":1,\"node\":\"n0\",\"time\":3,\"generation\":2,"
                        "\"containers\":[{\"name\":\"main\",\"gpus\":[{\"uuid\":\"GPU-0\","
                        "\"memoryMiB\":7000,\"cores\":80}]}]}";
    assert_true(sched_pod_recharge(s, "default/a", cores, &err) < 0);
    assert_int_equal(sched_check_invariants(s, &err), 0);
    /* A pod the ledger holds nothing for. */
    assert_int_equal(sched_pod_recharge(s, "default/ghost", grow, &err), -ENOENT);
    sched_state_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decision),
        cmocka_unit_test(test_quota),
        cmocka_unit_test(test_quota_two_gpus),
        cmocka_unit_test(test_recharge),
        cmocka_unit_test(test_recharge_keeps_priority),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
