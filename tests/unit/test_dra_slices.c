/* The DRA driver's ResourceSlices (src/dra/slices.c): devices, attributes, capacities and
 * request policies as the resource.k8s.io/v1 API wants them, the API's limits, the pool
 * decoder and the change test the publisher bumps generations by. */
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
#include "dra/slices.h"

static void fill_gpu(struct dp_gpu *g, unsigned i)
{
    memset(g, 0, sizeof *g);
    vg_snprintf(g->uuid, sizeof g->uuid, "GPU-%08x-1111-2222-3333-444444444444", i);
    vg_strlcpy(g->model, "NVIDIA A100-SXM4-80GB", sizeof g->model);
    g->index = i;
    g->minor = i;
    g->memory_mib = 81920;
    g->cc_major = 8;
    g->cc_minor = 0;
    vg_snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", 0x3b + i);
    g->numa = (int)(i / 4);
    g->healthy = true;
}

static json_t *build(const struct dra_slice_options *o, const struct dp_gpu *gpus, unsigned n)
{
    json_t *out = NULL;
    struct vg_err err = {0};
    int rc = dra_slices_build(o, gpus, n, &out, &err);
    if (rc != 0)
        fail_msg("dra_slices_build: %s", err.msg);
    return out;
}

static json_t *path(json_t *j, const char *dotted)
{
    char buf[256];
    vg_strlcpy(buf, dotted, sizeof buf);
    for (char *part = buf, *next; part != NULL && j != NULL; part = next) {
        next = strchr(part, '|');
        if (next != NULL)
            *next++ = '\0';
        char *end;
        long idx = strtol(part, &end, 10);
        j = (*end == '\0' && json_is_array(j)) ? json_array_get(j, (size_t)idx)
                                               : json_object_get(j, part);
    }
    return j;
}

static const char *str(json_t *j, const char *p)
{
    json_t *v = path(j, p);
    return json_is_string(v) ? json_string_value(v) : "(missing)";
}

static void test_consumable_gpu_device(void **state)
{
    (void)state;
    struct dp_gpu gpus[2];
    fill_gpu(&gpus[0], 0);
    fill_gpu(&gpus[1], 1);
    struct dra_slice_options o = {.node_name = "node-1",
                                  .driver_version = "535.104.05",
                                  .consumable = true,
                                  .generation = 4,
                                  .node_uid = "uid-node-1"};
    json_t *slices = build(&o, gpus, 2);
    assert_int_equal(json_array_size(slices), 1);
    json_t *s = json_array_get(slices, 0);
    assert_string_equal(str(s, "apiVersion"), "resource.k8s.io/v1");
    assert_string_equal(str(s, "kind"), "ResourceSlice");
    assert_string_equal(str(s, "metadata|name"), "node-1-gpu.vgpu.io-0");
    assert_string_equal(str(s, "metadata|ownerReferences|0|kind"), "Node");
    assert_string_equal(str(s, "metadata|ownerReferences|0|uid"), "uid-node-1");
    assert_string_equal(str(s, "spec|driver"), "gpu.vgpu.io");
    assert_string_equal(str(s, "spec|nodeName"), "node-1");
    assert_string_equal(str(s, "spec|pool|name"), "node-1");
    assert_int_equal(json_integer_value(path(s, "spec|pool|generation")), 4);
    assert_int_equal(json_integer_value(path(s, "spec|pool|resourceSliceCount")), 1);

    json_t *d = path(s, "spec|devices|1");
    assert_string_equal(str(d, "name"), "gpu-1");
    assert_true(json_is_true(path(d, "allowMultipleAllocations")));
    assert_string_equal(str(d, "attributes|type|string"), "gpu");
    assert_string_equal(str(d, "attributes|uuid|string"), gpus[1].uuid);
    assert_string_equal(str(d, "attributes|productName|string"), "NVIDIA A100-SXM4-80GB");
    assert_string_equal(str(d, "attributes|architecture|string"), "Ampere");
    assert_string_equal(str(d, "attributes|cudaComputeCapability|version"), "8.0.0");
    /* NVML's "535.104.05" is not semver; the API only takes "535.104.5". */
    assert_string_equal(str(d, "attributes|driverVersion|version"), "535.104.5");
    assert_int_equal(json_integer_value(path(d, "attributes|index|int")), 1);
    assert_int_equal(json_integer_value(path(d, "attributes|minor|int")), 1);
    assert_int_equal(json_integer_value(path(d, "attributes|numaNode|int")), 0);
    assert_string_equal(str(d, "attributes|resource.kubernetes.io/pciBusID|string"),
                        "0000:3c:00.0");
    /* Every attribute has exactly one typed value. */
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)path(d, "attributes"), key, v)
    {
        assert_int_equal(json_object_size(v), 1);
    }
    assert_string_equal(str(d, "capacity|memory|value"), "81920Mi");
    assert_string_equal(str(d, "capacity|memory|requestPolicy|default"), "81920Mi");
    assert_string_equal(str(d, "capacity|memory|requestPolicy|validRange|min"), "256Mi");
    assert_string_equal(str(d, "capacity|memory|requestPolicy|validRange|step"), "256Mi");
    assert_string_equal(str(d, "capacity|memory|requestPolicy|validRange|max"), "81920Mi");
    assert_string_equal(str(d, "capacity|cores|value"), "100");
    assert_string_equal(str(d, "capacity|cores|requestPolicy|default"), "100");
    assert_string_equal(str(d, "capacity|cores|requestPolicy|validRange|min"), "1");
    assert_string_equal(str(d, "capacity|cores|requestPolicy|validRange|step"), "1");
    json_decref(slices);
}

static void test_default_memory_stays_on_the_step_grid(void **state)
{
    (void)state;
    struct dp_gpu gpu;
    fill_gpu(&gpu, 0);
    gpu.memory_mib = 81559; /* not a multiple of 256 MiB */
    struct dra_slice_options o = {.node_name = "n", .consumable = true};
    json_t *slices = build(&o, &gpu, 1);
    json_t *mem = path(slices, "0|spec|devices|0|capacity|memory");
    assert_string_equal(str(mem, "value"), "81559Mi");
    assert_string_equal(str(mem, "requestPolicy|validRange|max"), "81559Mi");
    /* 256 MiB + 317 steps of 256 MiB = 81408 MiB, the largest grid value within 81559. */
    assert_string_equal(str(mem, "requestPolicy|default"), "81408Mi");
    json_decref(slices);
}

static void test_whole_device_mode(void **state)
{
    (void)state;
    struct dp_gpu gpu;
    fill_gpu(&gpu, 0);
    gpu.numa = -1;
    gpu.pci_bus_id[0] = '\0';
    struct dra_slice_options o = {.node_name = "n"};
    json_t *slices = build(&o, &gpu, 1);
    json_t *d = path(slices, "0|spec|devices|0");
    assert_null(path(d, "allowMultipleAllocations"));
    assert_null(path(d, "capacity|memory|requestPolicy"));
    assert_null(path(d, "capacity|cores|requestPolicy"));
    assert_string_equal(str(d, "capacity|memory|value"), "81920Mi");
    assert_null(path(d, "attributes|numaNode"));
    assert_null(path(d, "attributes|driverVersion"));
    assert_null(path(d, "attributes|resource.kubernetes.io/pciBusID"));
    assert_null(path(slices, "0|metadata|ownerReferences"));
    json_decref(slices);
}

static void test_mig_devices_replace_their_gpu(void **state)
{
    (void)state;
    struct dp_gpu gpus[2];
    fill_gpu(&gpus[0], 0);
    fill_gpu(&gpus[1], 1);
    gpus[1].mig_enabled = true;
    gpus[1].mig_count = 2;
    for (unsigned m = 0; m < 2; m++) {
        struct dp_mig *mig = &gpus[1].migs[m];
        vg_snprintf(mig->uuid, sizeof mig->uuid, "MIG-aaaaaaaa-bbbb-cccc-dddd-00000000000%u", m);
        vg_strlcpy(mig->profile, "3g.40gb", sizeof mig->profile);
        mig->gi = 1 + m;
        mig->ci = 0;
        mig->memory_mib = 40192;
    }
    struct dra_slice_options o = {.node_name = "n", .consumable = true};
    json_t *slices = build(&o, gpus, 2);
    json_t *devs = path(slices, "0|spec|devices");
    assert_int_equal(json_array_size(devs), 3);
    assert_string_equal(str(devs, "0|name"), "gpu-0");
    json_t *mig = json_array_get(devs, 2);
    assert_string_equal(str(mig, "name"), "gpu-1-mig-2-0");
    assert_string_equal(str(mig, "attributes|type|string"), "mig");
    assert_string_equal(str(mig, "attributes|uuid|string"), gpus[1].migs[1].uuid);
    assert_string_equal(str(mig, "attributes|parentUUID|string"), gpus[1].uuid);
    assert_string_equal(str(mig, "attributes|profile|string"), "3g.40gb");
    assert_string_equal(str(mig, "capacity|memory|value"), "40192Mi");
    /* MIG devices are allocated whole. */
    assert_null(path(mig, "allowMultipleAllocations"));
    assert_null(path(mig, "capacity|memory|requestPolicy"));
    json_decref(slices);
}

static void test_unhealthy_gpus_are_left_out(void **state)
{
    (void)state;
    struct dp_gpu gpus[3];
    for (unsigned i = 0; i < 3; i++)
        fill_gpu(&gpus[i], i);
    gpus[1].healthy = false;
    struct dra_slice_options o = {.node_name = "n"};
    json_t *slices = build(&o, gpus, 3);
    json_t *devs = path(slices, "0|spec|devices");
    assert_int_equal(json_array_size(devs), 2);
    assert_string_equal(str(devs, "0|name"), "gpu-0");
    assert_string_equal(str(devs, "1|name"), "gpu-2");
    json_decref(slices);
    /* No healthy GPU: one slice that says the pool is empty. */
    for (unsigned i = 0; i < 3; i++)
        gpus[i].healthy = false;
    slices = build(&o, gpus, 3);
    assert_int_equal(json_array_size(slices), 1);
    assert_int_equal(json_array_size(path(slices, "0|spec|devices")), 0);
    json_decref(slices);
}

static bool dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static void test_api_limits_split_slices(void **state)
{
    (void)state;
    enum { N = 300 };
    static struct dp_gpu gpus[N];
    for (unsigned i = 0; i < N; i++)
        fill_gpu(&gpus[i], i);
    struct dra_slice_options o = {
        .node_name = "n", .consumable = true, .generation = 2, .driver_version = "550.54.15"};
    json_t *slices = build(&o, gpus, N);
    assert_int_equal(json_array_size(slices), 3);
    size_t sizes[3] = {128, 128, 44}, total = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *s = json_array_get(slices, i);
        char want[64];
        vg_snprintf(want, sizeof want, "n-gpu.vgpu.io-%zu", i);
        assert_string_equal(str(s, "metadata|name"), want);
        assert_int_equal(json_integer_value(path(s, "spec|pool|resourceSliceCount")), 3);
        assert_int_equal(json_integer_value(path(s, "spec|pool|generation")), 2);
        json_t *devs = path(s, "spec|devices");
        assert_int_equal(json_array_size(devs), sizes[i]);
        size_t k;
        json_t *d;
        json_array_foreach(devs, k, d)
        {
            assert_true(dns_label(str(d, "name")));
            assert_true(json_object_size(path(d, "attributes")) +
                            json_object_size(path(d, "capacity")) <=
                        DRA_DEVICE_MAX_ATTRS);
            total++;
        }
    }
    assert_int_equal(total, N);
    json_decref(slices);
    /* A smaller cap (as a test or a taint-carrying slice needs) is honoured. */
    o.max_devices = 64;
    slices = build(&o, gpus, 130);
    assert_int_equal(json_array_size(slices), 3);
    json_decref(slices);
}

static void test_long_node_names_give_valid_distinct_slice_names(void **state)
{
    (void)state;
    /* 251 characters: three 63-character labels and one of 59 (labels may not be longer). */
    char a[252], b[252];
    for (size_t i = 0; i < 251; i++)
        a[i] = (char)(i % 64 == 63 ? '.' : 'a');
    a[251] = '\0';
    memcpy(b, a, sizeof b);
    b[250] = 'b';
    struct dp_gpu gpu;
    fill_gpu(&gpu, 0);
    struct dra_slice_options o = {.node_name = a};
    json_t *sa = build(&o, &gpu, 1);
    o.node_name = b;
    json_t *sb = build(&o, &gpu, 1);
    const char *na = str(sa, "0|metadata|name"), *nb = str(sb, "0|metadata|name");
    assert_true(strlen(na) <= 253);
    assert_true(strlen(nb) <= 253);
    assert_string_not_equal(na, nb);
    assert_string_equal(str(sa, "0|spec|pool|name"), a); /* the pool keeps the full name */
    json_decref(sa);
    json_decref(sb);
}

static void test_bad_options(void **state)
{
    (void)state;
    struct dp_gpu gpu;
    fill_gpu(&gpu, 0);
    json_t *out = NULL;
    struct vg_err err = {0};
    struct dra_slice_options o = {.node_name = "Node_1"};
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "node name 'Node_1'"));
    o.node_name = NULL;
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), -EINVAL);
    o.node_name = "n";
    o.driver = "GPU.example.com";
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "driver name"));
    o.driver = NULL;
    o.generation = -1;
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), -EINVAL);
    o.generation = 0;
    o.max_devices = 129;
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "at most 128"));
    assert_null(out);
    /* A driver version NVML gives that is no version is left out, not fatal. */
    o.max_devices = 0;
    o.driver_version = "r550_00";
    assert_int_equal(dra_slices_build(&o, &gpu, 1, &out, &err), 0);
    assert_null(path(out, "0|spec|devices|0|attributes|driverVersion"));
    json_decref(out);
}

static void test_semver(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } ok[] = {{"550.54.15", "550.54.15"},
              {"535.104.05", "535.104.5"},
              {"12.4", "12.4.0"},
              {"7", "7.0.0"},
              {"0.0.0", "0.0.0"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char out[64];
        struct vg_err err = {0};
        assert_int_equal(dra_semver(ok[i].in, out, sizeof out, &err), 0);
        assert_string_equal(out, ok[i].out);
    }
    static const char *bad[] = {"",   "a.b", "1.2.3.4",    "1..2", "1.2-rc1",
                                ".1", "1.",  "1234567890", NULL};
    for (size_t i = 0; bad[i] != NULL; i++) {
        char out[64];
        struct vg_err err = {0};
        assert_int_equal(dra_semver(bad[i], out, sizeof out, &err), -EINVAL);
        assert_true(err.msg[0] != '\0');
    }
    assert_string_equal(dra_architecture(9, 0), "Hopper");
    assert_string_equal(dra_architecture(8, 9), "Ada Lovelace");
    assert_string_equal(dra_architecture(7, 5), "Turing");
    assert_null(dra_architecture(0, 0));
}

static void test_pool_decode(void **state)
{
    (void)state;
    const char *text =
        "{\"kind\":\"ResourceSliceList\",\"items\":["
        "{\"metadata\":{\"name\":\"n-gpu.vgpu.io-0\",\"resourceVersion\":\"17\"},"
        " \"spec\":{\"driver\":\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":3}}},"
        "{\"metadata\":{\"name\":\"other\",\"resourceVersion\":\"18\"},"
        " \"spec\":{\"driver\":\"gpu.nvidia.com\",\"nodeName\":\"n\",\"pool\":{\"generation\":9}}},"
        "{\"metadata\":{\"name\":\"n-gpu.vgpu.io-1\",\"resourceVersion\":\"19\"},"
        " \"spec\":{\"driver\":\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":4}}}]}";
    json_t *list = json_loads(text, 0, NULL);
    assert_non_null(list);
    struct dra_pool pool;
    struct vg_err err = {0};
    assert_int_equal(dra_pool_decode(list, "gpu.vgpu.io", "n", &pool, &err), 0);
    assert_int_equal(pool.count, 2);
    assert_string_equal(pool.slices[1].name, "n-gpu.vgpu.io-1");
    assert_string_equal(pool.slices[1].resource_version, "19");
    assert_int_equal(pool.max_generation, 4);
    assert_int_equal(dra_pool_decode(list, "gpu.vgpu.io", "m", &pool, &err), 0);
    assert_int_equal(pool.count, 0);
    assert_int_equal(pool.max_generation, -1);
    json_decref(list);

    static const char *bad[] = {
        "[]",
        "{\"items\":{}}",
        "{\"items\":[1]}",
        "{\"items\":[{\"metadata\":{\"resourceVersion\":\"1\"},\"spec\":{\"driver\":"
        "\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":1}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"x\"},\"spec\":{\"driver\":"
        "\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":1}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"1\"},\"spec\":{\"driver\":"
        "\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":\"1\"}}}]}",
        "{\"items\":[{\"metadata\":{\"name\":\"x\",\"resourceVersion\":\"1\"},\"spec\":{\"driver\":"
        "\"gpu.vgpu.io\",\"nodeName\":\"n\",\"pool\":{\"generation\":-1}}}]}",
        NULL};
    for (size_t i = 0; bad[i] != NULL; i++) {
        list = json_loads(bad[i], 0, NULL);
        assert_non_null(list);
        memset(&err, 0, sizeof err);
        assert_int_equal(dra_pool_decode(list, "gpu.vgpu.io", "n", &pool, &err), -EBADMSG);
        assert_true(err.msg[0] != '\0');
        json_decref(list);
    }
}

static void test_differ_ignores_generation_only(void **state)
{
    (void)state;
    struct dp_gpu gpus[2];
    fill_gpu(&gpus[0], 0);
    fill_gpu(&gpus[1], 1);
    struct dra_slice_options o = {.node_name = "n", .consumable = true, .generation = 1};
    json_t *a = build(&o, gpus, 2);
    o.generation = 7;
    json_t *b = build(&o, gpus, 2);
    assert_false(dra_slices_differ(a, b));
    json_object_set_new(json_object_get(json_array_get(b, 0), "metadata"), "resourceVersion",
                        json_string("99"));
    assert_false(dra_slices_differ(a, b));
    gpus[1].healthy = false;
    json_t *c = build(&o, gpus, 2);
    assert_true(dra_slices_differ(a, c));
    o.consumable = false;
    gpus[1].healthy = true;
    json_t *d = build(&o, gpus, 2);
    assert_true(dra_slices_differ(a, d));
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_consumable_gpu_device),
        cmocka_unit_test(test_default_memory_stays_on_the_step_grid),
        cmocka_unit_test(test_whole_device_mode),
        cmocka_unit_test(test_mig_devices_replace_their_gpu),
        cmocka_unit_test(test_unhealthy_gpus_are_left_out),
        cmocka_unit_test(test_api_limits_split_slices),
        cmocka_unit_test(test_long_node_names_give_valid_distinct_slice_names),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_semver),
        cmocka_unit_test(test_pool_decode),
        cmocka_unit_test(test_differ_ignores_generation_only),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
