/* GPU health as device taints (src/dra/health.c): the state machine a poll drives (an XID
 * stays until the GPU is reset, lost clears when NVML reads the GPU again, unmonitored
 * follows the event registration), the taints it gives, and those taints in the
 * ResourceSlices (unhealthy GPUs kept and tainted; left out without taints; the API's
 * 64-device limit for slices with taints). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/str.h"
#include "dra/health.h"
#include "dra/slices.h"

static bool step(struct dra_gpu_health *h, bool present, unsigned long long xid, int64_t now)
{
    struct dra_health_obs obs = {.present = present, .xid = xid, .monitored = true};
    return dra_health_observe(h, &obs, now);
}

static void test_xid_stays_until_reset(void **state)
{
    (void)state;
    struct dra_gpu_health h = {0};
    assert_false(step(&h, true, 0, 100));
    assert_true(dra_health_ok(&h));
    assert_true(step(&h, true, 79, 110));
    assert_false(dra_health_ok(&h));
    assert_int_equal(h.xid_since, 110);
    /* Still answering NVML: the XID stays. */
    assert_false(step(&h, true, 0, 120));
    assert_false(dra_health_ok(&h));
    /* The same XID again keeps its time; another one takes over with its own. */
    assert_false(step(&h, true, 79, 125));
    assert_int_equal(h.xid_since, 110);
    assert_true(step(&h, true, 48, 126));
    assert_int_equal(h.xid, 48);
    assert_int_equal(h.xid_since, 126);
    /* Reset: lost, then found again; both clear. */
    assert_true(step(&h, false, 0, 130));
    assert_true(h.lost);
    assert_true(step(&h, true, 0, 140));
    assert_true(dra_health_ok(&h));
    assert_int_equal(h.xid, 0);
}

static void test_lost_and_back_without_xid(void **state)
{
    (void)state;
    struct dra_gpu_health h = {0};
    assert_true(step(&h, false, 0, 5));
    assert_int_equal(h.lost_since, 5);
    assert_false(step(&h, false, 0, 6));
    assert_int_equal(h.lost_since, 5);
    assert_true(step(&h, true, 0, 7));
    assert_true(dra_health_ok(&h));
    /* An XID reported in the same poll as the loss is cleared by the return. */
    assert_true(step(&h, false, 79, 8));
    assert_true(step(&h, true, 0, 9));
    assert_true(dra_health_ok(&h));
}

static void test_double_bit_ecc_until_reset(void **state)
{
    (void)state;
    struct dra_gpu_health h = {0};
    struct dra_health_obs obs = {.present = true, .ecc = true, .monitored = true};
    assert_true(dra_health_observe(&h, &obs, 50));
    assert_false(dra_health_ok(&h));
    struct dra_taint t[DRA_MAX_TAINTS];
    assert_int_equal(dra_health_taints(&h, "d.io", t), 1);
    assert_string_equal(t[0].key, "d.io/ecc-double-bit");
    assert_string_equal(t[0].effect, "NoSchedule");
    assert_int_equal(t[0].time_added, 50);
    assert_false(step(&h, true, 0, 60));
    assert_false(dra_health_ok(&h));
    assert_true(step(&h, false, 0, 70));
    assert_true(step(&h, true, 0, 80));
    assert_true(dra_health_ok(&h));
    assert_int_equal(dra_health_taints(&h, "d.io", t), 0);
}

static void test_taints(void **state)
{
    (void)state;
    struct dra_gpu_health h = {0};
    struct dra_taint t[DRA_MAX_TAINTS];
    assert_int_equal(dra_health_taints(&h, "gpu.vgpu.io", t), 0);
    struct dra_health_obs obs = {.present = true, .xid = 79, .monitored = false};
    assert_true(dra_health_observe(&h, &obs, 42));
    obs = (struct dra_health_obs){.present = false, .monitored = false};
    assert_true(dra_health_observe(&h, &obs, 43));
    assert_int_equal(dra_health_taints(&h, "gpu.vgpu.io", t), 3);
    assert_string_equal(t[0].key, "gpu.vgpu.io/xid");
    assert_string_equal(t[0].value, "79");
    assert_string_equal(t[0].effect, "NoSchedule");
    assert_int_equal(t[0].time_added, 42);
    assert_string_equal(t[1].key, "gpu.vgpu.io/gpu-lost");
    assert_string_equal(t[1].value, "");
    assert_string_equal(t[1].effect, "NoSchedule");
    assert_int_equal(t[1].time_added, 43);
    assert_string_equal(t[2].key, "gpu.vgpu.io/unmonitored");
    assert_string_equal(t[2].effect, "None");
    char msg[128];
    dra_health_message(&h, msg, sizeof msg);
    assert_non_null(strstr(msg, "XID 79"));
    /* Unmonitored alone is healthy: None does not keep claims away. */
    struct dra_gpu_health u = {0};
    obs = (struct dra_health_obs){.present = true, .monitored = false};
    assert_true(dra_health_observe(&u, &obs, 1));
    assert_true(dra_health_ok(&u));
    obs.monitored = true;
    assert_true(dra_health_observe(&u, &obs, 2));
    assert_int_equal(dra_health_taints(&u, "gpu.vgpu.io", t), 0);
}

static void fill_gpu(struct dp_gpu *g, unsigned i)
{
    memset(g, 0, sizeof *g);
    vg_snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-1111-2222-3333-444444444444", i);
    vg_strlcpy(g->model, "NVIDIA A100-SXM4-80GB", sizeof g->model);
    g->index = i;
    g->minor = i;
    g->memory_mib = 81920;
    g->cc_major = 8;
    g->healthy = true;
}

static json_t *build(const struct dra_slice_options *o, const struct dp_gpu *gpus, unsigned n)
{
    json_t *out = NULL;
    struct vg_err err = {0};
    if (dra_slices_build(o, gpus, n, &out, &err) != 0)
        fail_msg("dra_slices_build: %s", err.msg);
    return out;
}

static json_t *devices_of(json_t *slices, size_t i)
{
    return json_object_get(json_object_get(json_array_get(slices, i), "spec"), "devices");
}

static void test_slices_keep_tainted_gpus(void **state)
{
    (void)state;
    struct dp_gpu gpus[2];
    struct dra_gpu_health health[2] = {{0}, {0}};
    fill_gpu(&gpus[0], 0);
    fill_gpu(&gpus[1], 1);
    assert_true(step(&health[1], true, 79, 1764374400)); /* 2025-11-29T00:00:00Z */
    gpus[1].healthy = dra_health_ok(&health[1]);
    struct dra_slice_options o = {.node_name = "n", .health = health, .taints = true};
    json_t *slices = build(&o, gpus, 2);
    json_t *devs = devices_of(slices, 0);
    assert_int_equal(json_array_size(devs), 2);
    assert_null(json_object_get(json_array_get(devs, 0), "taints"));
    json_t *t = json_array_get(json_object_get(json_array_get(devs, 1), "taints"), 0);
    assert_string_equal(json_string_value(json_object_get(t, "key")), "gpu.vgpu.io/xid");
    assert_string_equal(json_string_value(json_object_get(t, "value")), "79");
    assert_string_equal(json_string_value(json_object_get(t, "effect")), "NoSchedule");
    assert_string_equal(json_string_value(json_object_get(t, "timeAdded")), "2025-11-29T00:00:00Z");
    json_decref(slices);
    /* A server without device taints: the unhealthy GPU is left out instead. */
    o.taints = false;
    slices = build(&o, gpus, 2);
    devs = devices_of(slices, 0);
    assert_int_equal(json_array_size(devs), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(devs, 0), "name")),
                        "gpu-0");
    json_decref(slices);
}

static void test_tainted_slices_hold_64_devices(void **state)
{
    (void)state;
    /* 16 GPUs of 7 MIG devices: 112 devices, one slice untainted, two with a taint. */
    static struct dp_gpu gpus[DP_MAX_GPUS];
    static struct dra_gpu_health health[DP_MAX_GPUS];
    for (unsigned i = 0; i < DP_MAX_GPUS; i++) {
        fill_gpu(&gpus[i], i);
        gpus[i].mig_enabled = true;
        gpus[i].mig_count = DP_MAX_MIGS;
        for (unsigned m = 0; m < DP_MAX_MIGS; m++) {
            struct dp_mig *mig = &gpus[i].migs[m];
            vg_snprintf(mig->uuid, sizeof mig->uuid, "MIG-%08x-%u", i, m);
            vg_strlcpy(mig->profile, "1g.10gb", sizeof mig->profile);
            mig->gi = m + 1;
            mig->memory_mib = 9856;
        }
        memset(&health[i], 0, sizeof health[i]);
    }
    struct dra_slice_options o = {.node_name = "n", .health = health, .taints = true};
    json_t *slices = build(&o, gpus, DP_MAX_GPUS);
    assert_int_equal(json_array_size(slices), 1);
    assert_int_equal(json_array_size(devices_of(slices, 0)), DP_MAX_GPUS * DP_MAX_MIGS);
    json_decref(slices);
    struct dra_health_obs obs = {.present = false, .monitored = true};
    dra_health_observe(&health[3], &obs, 1);
    slices = build(&o, gpus, DP_MAX_GPUS);
    assert_int_equal(json_array_size(slices), 2);
    size_t total = 0, tainted = 0;
    for (size_t i = 0; i < json_array_size(slices); i++) {
        json_t *devs = devices_of(slices, i);
        assert_true(json_array_size(devs) <= DRA_SLICE_MAX_TAINTED);
        total += json_array_size(devs);
        for (size_t k = 0; k < json_array_size(devs); k++)
            tainted += json_object_get(json_array_get(devs, k), "taints") != NULL;
    }
    assert_int_equal(total, DP_MAX_GPUS * DP_MAX_MIGS);
    assert_int_equal(tainted, DP_MAX_MIGS); /* every MIG device of the lost GPU */
    json_decref(slices);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_xid_stays_until_reset),
        cmocka_unit_test(test_lost_and_back_without_xid),
        cmocka_unit_test(test_double_bit_ecc_until_reset),
        cmocka_unit_test(test_taints),
        cmocka_unit_test(test_slices_keep_tainted_gpus),
        cmocka_unit_test(test_tainted_slices_hold_64_devices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
