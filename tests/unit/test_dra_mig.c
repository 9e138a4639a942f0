/* MIG on demand in the DRA driver: a partition's device name and the way back (near
 * misses refused), the instance record's round trip, and the slices of dynamic GPUs under
 * the 1.36 API's limits: counter sets in slices of their own (8 per slice), devices that
 * consume counters 64 per slice, the whole GPU consuming every counter. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/str.h"
#include "dra/mig.h"
#include "dra/slices.h"

/* An H100-like layout: 1g x7, 2g x3, 3g x2, 7g x1 (13 partitions). */
static void fill(struct dp_gpu *g, struct dra_mig_gpu *m, unsigned i)
{
    memset(g, 0, sizeof *g);
    vg_snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-1111-2222-3333-444444444444", i);
    vg_strlcpy(g->model, "NVIDIA H100 80GB HBM3", sizeof g->model);
    g->index = g->minor = i;
    g->memory_mib = 81559;
    g->cc_major = 9;
    g->healthy = g->mig_enabled = true;
    memset(m, 0, sizeof *m);
    static const struct {
        unsigned id, size, sms, step, count;
        uint64_t mib;
    } profiles[] = {{19, 1, 16, 1, 7, 9984},
                    {14, 2, 32, 2, 3, 20096},
                    {9, 4, 60, 4, 2, 40448},
                    {0, 8, 132, 8, 1, 81152}};
    for (size_t p = 0; p < 4; p++)
        for (unsigned k = 0; k < profiles[p].count; k++) {
            struct dra_partition *part = &m->parts[m->count++];
            part->profile_id = profiles[p].id;
            part->start = k * profiles[p].step;
            part->size = profiles[p].size;
            part->sms = profiles[p].sms;
            part->memory_mib = profiles[p].mib;
            vg_snprintf(part->profile, sizeof part->profile, "%ug", profiles[p].size);
        }
    m->dynamic = true;
    m->memory_slices = 8;
    m->sms = 132;
    m->memory_mib = 81152;
}

static void test_names(void **state)
{
    (void)state;
    struct dp_gpu gpus[2];
    struct dra_mig_gpu migs[2];
    fill(&gpus[0], &migs[0], 0);
    fill(&gpus[1], &migs[1], 3);
    char name[64];
    dra_partition_name(&gpus[1], &migs[1].parts[11], name);
    assert_string_equal(name, "gpu-3-mig-p9-s4");
    unsigned g = 99;
    const struct dra_partition *p = dra_partition_find(gpus, migs, 2, name, &g);
    assert_non_null(p);
    assert_int_equal(g, 1);
    assert_int_equal(p->start, 4);
    static const char *const bad[] = {"gpu-3-mig-p9-s04", "gpu-3-mig-p9-s4x", "gpu-3-mig-p9-s5",
                                      "gpu-2-mig-p9-s4",  "gpu-3-mig-9-4",    "gpu-3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_null(dra_partition_find(gpus, migs, 2, bad[i], &g));
    migs[1].dynamic = false; /* a static MIG GPU has no partitions */
    assert_null(dra_partition_find(gpus, migs, 2, name, &g));
}

static void test_record_round_trip(void **state)
{
    (void)state;
    static struct dra_instances in, out;
    memset(&in, 0, sizeof in);
    struct dra_instance *t = &in.items[in.count++];
    vg_strlcpy(t->claim, "11111111-1111-4111-8111-111111111111", sizeof t->claim);
    vg_strlcpy(t->device, "gpu-0-mig-p9-s4", sizeof t->device);
    vg_strlcpy(t->gpu_uuid, "GPU-00000000-1111-2222-3333-444444444444", sizeof t->gpu_uuid);
    t->profile_id = 9;
    t->start = 4;
    t->size = 4;
    t->gi = 2;
    t->ci = -1;
    char *text = dra_instances_encode(&in);
    struct vg_err err = {0};
    assert_int_equal(dra_instances_decode(text, strlen(text), &out, &err), 0);
    assert_int_equal(out.count, 1);
    assert_int_equal(out.items[0].gi, 2);
    assert_int_equal(out.items[0].ci, -1);
    assert_string_equal(out.items[0].device, "gpu-0-mig-p9-s4");
    free(text);
    const char *bad = "{\"version\":1,\"instances\":[{}]}";
    assert_int_equal(dra_instances_decode(bad, strlen(bad), &out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "claim"));
}

static json_t *slices_of(struct dp_gpu *gpus, struct dra_mig_gpu *migs, unsigned n, bool part)
{
    struct dra_slice_options o = {.node_name = "n", .migs = migs, .partitionable = part};
    json_t *out = NULL;
    struct vg_err err = {0};
    if (dra_slices_build(&o, gpus, n, &out, &err) != 0)
        fail_msg("dra_slices_build: %s", err.msg);
    return out;
}

static void test_partitionable_slices(void **state)
{
    (void)state;
    static struct dp_gpu gpus[10];
    static struct dra_mig_gpu migs[10];
    for (unsigned i = 0; i < 10; i++)
        fill(&gpus[i], &migs[i], i);
    /* 10 GPUs: 140 devices (whole + 13 each) in 3 slices of <= 64, 10 counter sets in 2
     * slices of <= 8. */
    json_t *sl = slices_of(gpus, migs, 10, true);
    size_t devices = 0, sets = 0, device_slices = 0, set_slices = 0;
    for (size_t i = 0; i < json_array_size(sl); i++) {
        json_t *spec = json_object_get(json_array_get(sl, i), "spec");
        json_t *d = json_object_get(spec, "devices"), *c = json_object_get(spec, "sharedCounters");
        assert_true(d == NULL || c == NULL);
        assert_int_equal(json_integer_value(
                             json_object_get(json_object_get(spec, "pool"), "resourceSliceCount")),
                         json_array_size(sl));
        if (d) {
            assert_true(json_array_size(d) <= 64);
            devices += json_array_size(d);
            device_slices++;
        }
        if (c) {
            assert_true(json_array_size(c) <= DRA_SLICE_MAX_COUNTER_SETS);
            sets += json_array_size(c);
            set_slices++;
        }
    }
    assert_int_equal(devices, 140);
    assert_int_equal(sets, 10);
    assert_int_equal(device_slices, 3);
    assert_int_equal(set_slices, 2);
    /* The first slice: gpu-0 consumes all 10 counters; gpu-0-mig-p19-s3 one slice. */
    json_t *d0 = json_object_get(json_object_get(json_array_get(sl, 0), "spec"), "devices");
    json_t *whole = json_array_get(d0, 0);
    assert_string_equal(json_string_value(json_object_get(whole, "name")), "gpu-0");
    json_t *wc =
        json_object_get(json_array_get(json_object_get(whole, "consumesCounters"), 0), "counters");
    assert_int_equal(json_object_size(wc), 10);
    json_t *p = json_array_get(d0, 4);
    assert_string_equal(json_string_value(json_object_get(p, "name")), "gpu-0-mig-p19-s3");
    json_t *pc =
        json_object_get(json_array_get(json_object_get(p, "consumesCounters"), 0), "counters");
    assert_non_null(json_object_get(pc, "memory-slice-3"));
    assert_null(json_object_get(pc, "memory-slice-4"));
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(pc, "multiprocessors"), "value")), "16");
    json_decref(sl);
    /* Without partitionable devices: the MIG GPU with no instances publishes nothing. */
    sl = slices_of(gpus, migs, 1, false);
    assert_int_equal(json_array_size(sl), 1);
    assert_int_equal(
        json_array_size(json_object_get(json_object_get(json_array_get(sl, 0), "spec"), "devices")),
        0);
    json_decref(sl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_record_round_trip),
        cmocka_unit_test(test_partitionable_slices),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
