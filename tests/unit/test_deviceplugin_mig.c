/* Device plugin, MIG and XID parts: profile names as NVIDIA forms them, resources for
 * migStrategy single and mixed (and their refusals), Allocate of MIG devices against
 * golden files (tests/data/deviceplugin/mig_*.golden, regenerate with VGPU_UPDATE_GOLDEN=1
 * and review the diff), and the XID policy (DP_DISABLE_HEALTHCHECKS). */
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
#include "deviceplugin/deviceplugin.h"
#include "dp_test.h"

#define MIG_A0 "MIG-a0a0a0a0-0000-0000-0000-000000000000"
#define MIG_A1 "MIG-a1a1a1a1-0000-0000-0000-000000000000"
#define MIG_A2 "MIG-a2a2a2a2-0000-0000-0000-000000000000"
#define MIG_B0 "MIG-b0b0b0b0-0000-0000-0000-000000000000"

static void add_mig(struct dp_gpu *g, const char *uuid, const char *profile, unsigned gi,
                    uint64_t mib)
{
    struct dp_mig *m = &g->migs[g->mig_count];
    vg_strlcpy(m->uuid, uuid, sizeof(m->uuid));
    vg_strlcpy(m->profile, profile, sizeof(m->profile));
    m->index = g->mig_count;
    m->gi = gi;
    m->memory_mib = mib;
    m->gi_cap = m->ci_cap = -1;
    g->mig_count++;
    g->mig_enabled = true;
}

/* GPU 0: MIG with 1g.10gb, 1g.10gb and 2g.20gb; GPU 1: MIG with 1g.10gb (or not MIG). */
static void two_mig_gpus(struct dp_gpu g[2], bool second_mig, bool same_profiles)
{
    two_gpus(g);
    add_mig(&g[0], MIG_A0, "1g.10gb", 1, 10194);
    add_mig(&g[0], MIG_A1, "1g.10gb", 2, 10194);
    add_mig(&g[0], MIG_A2, same_profiles ? "1g.10gb" : "2g.20gb", 3, same_profiles ? 10194 : 20389);
    if (second_mig)
        add_mig(&g[1], MIG_B0, "1g.10gb", 1, 10194);
}

static const struct dp_resource *find(const struct dp_resources *res, const char *name)
{
    for (size_t i = 0; i < res->count; i++)
        if (strcmp(res->items[i].name, name) == 0)
            return &res->items[i];
    fail_msg("no resource %s", name);
    abort();
}

static void test_profile_names(void **state)
{
    (void)state;
    char name[DP_MIG_PROFILE];
    /* H100 80GB (81559 MiB): eighths of 80 GiB. */
    uint64_t h100 = 81559ULL << 20;
    dp_mig_profile(1, 1, 10194, h100, name, sizeof(name));
    assert_string_equal(name, "1g.10gb");
    dp_mig_profile(1, 1, 20389, h100, name, sizeof(name));
    assert_string_equal(name, "1g.20gb");
    dp_mig_profile(3, 3, 40779, h100, name, sizeof(name));
    assert_string_equal(name, "3g.40gb");
    dp_mig_profile(7, 7, 81559, h100, name, sizeof(name));
    assert_string_equal(name, "7g.80gb");
    /* A compute instance smaller than its GPU instance. */
    dp_mig_profile(3, 1, 40779, h100, name, sizeof(name));
    assert_string_equal(name, "1c.3g.40gb");
    /* A100 40GB: 1g.5gb; H200 141GB: 1g.18gb and 3g.71gb (rounded half up); A30 24GB. */
    dp_mig_profile(1, 1, 5120, 40ULL << 30, name, sizeof(name));
    assert_string_equal(name, "1g.5gb");
    dp_mig_profile(1, 1, 17971, 143771ULL << 20, name, sizeof(name));
    assert_string_equal(name, "1g.18gb");
    dp_mig_profile(3, 3, 71885, 143771ULL << 20, name, sizeof(name));
    assert_string_equal(name, "3g.71gb");
    dp_mig_profile(1, 1, 6144, 24ULL << 30, name, sizeof(name));
    assert_string_equal(name, "1g.6gb");
}

static void test_mixed(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_mig_gpus(g, false, false);
    struct dpconfig cfg;
    struct dp_resources res;
    struct vg_err err = {0};
    /* timeSlicing mode (NVIDIA's plain advertising): GPU 1 whole, GPU 0's MIG devices. */
    load(&cfg, "version: v1\nflags:\n  migStrategy: mixed\nsharing:\n  timeSlicing:\n"
               "    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.count, 3);
    const struct dp_resource *gpu = find(&res, "nvidia.com/gpu");
    assert_false(gpu->mig);
    assert_int_equal(gpu->device_count, 2); /* GPU 1, two replicas */
    assert_string_equal(gpu->devices[0].id, UUID_B "::0");
    const struct dp_resource *small = find(&res, "nvidia.com/mig-1g.10gb");
    assert_true(small->mig);
    assert_string_equal(small->endpoint, "nvidia-mig-1g.10gb.sock");
    assert_int_equal(small->device_count, 2);
    assert_string_equal(small->devices[0].id, MIG_A0);
    assert_string_equal(small->devices[1].id, MIG_A1);
    assert_int_equal(small->devices[1].gpu, 0);
    const struct dp_resource *big = find(&res, "nvidia.com/mig-2g.20gb");
    assert_int_equal(big->device_count, 1);
    assert_string_equal(big->endpoint, "nvidia-mig-2g.20gb.sock");

    /* Allocate: MIG UUIDs, each once. */
    char a0[] = MIG_A0, a1[] = MIG_A1;
    char *ids[] = {a1, a0, a1};
    struct dp_response resp;
    assert_int_equal(dp_allocate_shared(&cfg, small, g, 2, ids, 3, &resp, &err), 0);
    golden("mig_mixed_two", &resp);
    char b[] = MIG_B0, gpu_id[] = UUID_A;
    char *bad[] = {b};
    assert_int_equal(dp_allocate_shared(&cfg, small, g, 2, bad, 1, &resp, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "unknown device ID"));
    bad[0] = gpu_id;
    assert_int_equal(dp_allocate_shared(&cfg, small, g, 2, bad, 1, &resp, &err), -ENOENT);
    dp_resources_release(&res);
    dpconfig_free(&cfg);

    /* vgpu mode: the MIG GPU is not split and stays out of nvidia.com/gpu. */
    load(&cfg, "version: v1\nflags:\n  migStrategy: mixed\nvgpu:\n  deviceSplitCount: 4\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.mode, ANNOT_MODE_VGPU);
    gpu = find(&res, "nvidia.com/gpu");
    assert_int_equal(gpu->device_count, 4);
    assert_string_equal(gpu->devices[0].id, UUID_B "-0");
    assert_int_equal(find(&res, "nvidia.com/mig-1g.10gb")->device_count, 2);
    assert_false(dp_gpu_split(&cfg, &g[0]));
    assert_true(dp_gpu_split(&cfg, &g[1]));
    dp_resources_release(&res);
    dpconfig_free(&cfg);

    /* migStrategy none: MIG GPUs are advertised whole, as before. */
    load(&cfg, "version: v1\nvgpu:\n  deviceSplitCount: 2\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.count, 1);
    assert_int_equal(res.items[0].device_count, 4);
    assert_true(dp_gpu_split(&cfg, &g[0]));
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

static void test_single(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_mig_gpus(g, true, true);
    struct dpconfig cfg;
    struct dp_resources res;
    struct vg_err err = {0};
    const char *ts = "version: v1\nflags:\n  migStrategy: single\n  plugin:\n"
                     "    passDeviceSpecs: true\n    deviceIDStrategy: index\n"
                     "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
                     "      replicas: 2\n";
    load(&cfg, ts);
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.count, 1);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu");
    assert_string_equal(res.items[0].endpoint, "nvidia-gpu.sock");
    assert_true(res.items[0].mig);
    assert_int_equal(res.items[0].device_count, 4);
    assert_string_equal(res.items[0].devices[3].id, MIG_B0);
    assert_int_equal(res.items[0].devices[3].gpu, 1);
    /* Index form `<gpu>:<mig>`, device specs of both parents and the capability devices
     * where they are known. */
    g[0].migs[2].gi_cap = 39;
    g[0].migs[2].ci_cap = 40;
    char a2[] = MIG_A2, b0[] = MIG_B0;
    char *ids[] = {a2, b0};
    struct dp_response resp;
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, ids, 2, &resp, &err), 0);
    golden("mig_single_index_device_specs", &resp);
    dp_resources_release(&res);

    /* NVIDIA's refusals: differing profiles, a GPU without MIG, a MIG GPU without devices. */
    two_mig_gpus(g, true, false);
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "more than one MIG device type"));
    assert_non_null(strstr(err.msg, "mixed"));
    two_mig_gpus(g, false, true);
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "same migEnabled value"));
    assert_non_null(strstr(err.msg, UUID_B));
    two_mig_gpus(g, true, true);
    g[1].mig_count = 0;
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no MIG devices"));
    /* Without any MIG-enabled GPU, single is none. */
    g[0].mig_enabled = g[1].mig_enabled = false;
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_false(res.items[0].mig);
    assert_int_equal(res.items[0].device_count, 4); /* two GPUs, two replicas each */
    dp_resources_release(&res);
    dpconfig_free(&cfg);

    /* MPS on MIG devices is refused, as NVIDIA's validation does. */
    load(&cfg, "version: v1\nflags:\n  migStrategy: single\nsharing:\n  mps:\n    resources:\n"
               "    - name: nvidia.com/gpu\n      replicas: 2\n");
    two_mig_gpus(g, true, true);
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -ENOTSUP);
    assert_non_null(strstr(err.msg, "MPS on MIG devices"));
    dpconfig_free(&cfg);

    /* vgpu mode owns nvidia.com/gpu: single is refused with a way out. */
    two_mig_gpus(g, true, true);
    load(&cfg, "version: v1\nflags:\n  migStrategy: single\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), -ENOTSUP);
    assert_non_null(strstr(err.msg, "migStrategy mixed"));
    dpconfig_free(&cfg);
}

static void test_volume_mounts(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_mig_gpus(g, false, false);
    struct dpconfig cfg;
    struct dp_resources res;
    struct vg_err err = {0};
    load(&cfg, "version: v1\nflags:\n  migStrategy: mixed\n  plugin:\n"
               "    deviceListStrategy: volume-mounts\nsharing:\n  timeSlicing:\n"
               "    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n");
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    char a2[] = MIG_A2;
    char *ids[] = {a2};
    struct dp_response resp;
    assert_int_equal(
        dp_allocate_shared(&cfg, find(&res, "nvidia.com/mig-2g.20gb"), g, 2, ids, 1, &resp, &err),
        0);
    golden("mig_mixed_volume_mounts", &resp);
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

static void test_cap_minors(void **state)
{
    (void)state;
    const char *table = "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
                        "gpu1/gi1/access 147\ngpu1/gi1/ci0/access 148\ngpu10/gi13/access 1200\n";
    unsigned minor = 0;
    struct vg_err err = {0};
    assert_int_equal(dp_mig_cap_minor(table, 0, 1, -1, &minor, &err), 0);
    assert_int_equal(minor, 12);
    assert_int_equal(dp_mig_cap_minor(table, 0, 1, 0, &minor, &err), 0);
    assert_int_equal(minor, 13);
    assert_int_equal(dp_mig_cap_minor(table, 1, 1, 0, &minor, &err), 0);
    assert_int_equal(minor, 148);
    assert_int_equal(dp_mig_cap_minor(table, 10, 13, -1, &minor, &err), 0);
    assert_int_equal(minor, 1200);
    /* gpu1 is not a prefix match of gpu10; missing lines are -ENOENT. */
    assert_int_equal(dp_mig_cap_minor(table, 1, 13, -1, &minor, &err), -ENOENT);
    assert_int_equal(dp_mig_cap_minor(table, 0, 2, -1, &minor, &err), -ENOENT);
    assert_int_equal(dp_mig_cap_minor("", 0, 1, -1, &minor, &err), -ENOENT);
    static const char *bad[] = {"gpu0/gi1/access\n", "gpu0/gi1/access x\n", "gpu0/gi1/access -1\n",
                                " 12\n", "gpu0/gi1/access 12 13\n"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.msg[0] = '\0';
        assert_int_equal(dp_mig_cap_minor(bad[i], 0, 1, -1, &minor, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "mig-minors: line 1"));
    }
}

static void test_xid_policy(void **state)
{
    (void)state;
    struct dp_xid_policy p;
    struct vg_err err = {0};
    assert_int_equal(dp_xid_policy_parse(NULL, &p, &err), 0);
    assert_false(p.disabled);
    /* NVIDIA's application XIDs are ignored, hardware ones are critical. */
    static const unsigned app[] = {13, 31, 43, 45, 68, 109};
    for (size_t i = 0; i < sizeof(app) / sizeof(app[0]); i++)
        assert_false(dp_xid_critical(&p, app[i]));
    assert_true(dp_xid_critical(&p, 48));
    assert_true(dp_xid_critical(&p, 79));
    assert_int_equal(dp_xid_policy_parse("48, 94", &p, &err), 0);
    assert_false(dp_xid_critical(&p, 48));
    assert_false(dp_xid_critical(&p, 94));
    assert_false(dp_xid_critical(&p, 13));
    assert_true(dp_xid_critical(&p, 79));
    assert_int_equal(dp_xid_policy_parse("xids", &p, &err), 0);
    assert_false(dp_xid_critical(&p, 79));
    assert_int_equal(dp_xid_policy_parse("all", &p, &err), 0);
    assert_true(p.disabled);
    static const char *bad[] = {
        "48,", ",48", "48,,79", "abc", "0", "70000", "-1", "48;79", "12345678901234567890"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.msg[0] = '\0';
        assert_int_equal(dp_xid_policy_parse(bad[i], &p, &err), -EINVAL);
        assert_non_null(strstr(err.msg, "DP_DISABLE_HEALTHCHECKS"));
    }
}

/* The health section of the config file, as NVIDIA's plugin reads it, and
 * DP_DISABLE_HEALTHCHECKS on top of it. */
static struct dp_xid_policy policy_of(const char *yaml, const char *env)
{
    struct dpconfig cfg;
    struct dp_xid_policy p;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    if (dpconfig_load_buffer("h.yaml", yaml, strlen(yaml), &cfg, &err) < 0 ||
        dp_xid_policy_from_config(&cfg, env, &p, &err) < 0)
        fail_msg("%s", err.msg);
    dpconfig_free(&cfg);
    return p;
}

static void test_health_config(void **state)
{
    (void)state;
    /* Defaults: the same as no file at all. */
    struct dp_xid_policy p = policy_of("version: v1\n", NULL);
    assert_false(p.off);
    assert_false(dp_xid_critical(&p, 13));
    assert_true(dp_xid_critical(&p, 48));
    assert_true(dp_xid_critical(&p, 79));
    /* ignoredXIDs replaces NVIDIA's list: 48 ignored, 13 now counts, 79 still critical. */
    p = policy_of("health:\n  ignoredXIDs: [48]\n", NULL);
    assert_false(dp_xid_critical(&p, 48));
    assert_true(dp_xid_critical(&p, 13));
    assert_true(dp_xid_critical(&p, 79));
    /* DP_DISABLE_HEALTHCHECKS adds to the file's list. */
    p = policy_of("health:\n  ignoredXIDs: [48]\n", "79");
    assert_false(dp_xid_critical(&p, 48));
    assert_false(dp_xid_critical(&p, 79));
    assert_true(dp_xid_critical(&p, 94));
    /* criticalXIDs: only those listed count. */
    p = policy_of("health:\n  criticalXIDs: [79, 94]\n", NULL);
    assert_true(dp_xid_critical(&p, 79));
    assert_true(dp_xid_critical(&p, 94));
    assert_false(dp_xid_critical(&p, 48));
    assert_false(dp_xid_critical(&p, 13)); /* ignored wins */
    /* eventTypes without XIDs: no XID counts. */
    p = policy_of("health:\n  eventTypes: [EventTypeDoubleBitEccError]\n", NULL);
    assert_false(dp_xid_critical(&p, 79));
    assert_int_equal(p.events, DPCONFIG_EVENT_DOUBLE_BIT_ECC);
    /* disabled: no checks at all. */
    p = policy_of("health:\n  disabled: true\n", NULL);
    assert_true(p.off);
    assert_false(dp_xid_critical(&p, 79));
    /* A bad variable is still refused with the file's policy. */
    struct dpconfig cfg;
    struct vg_err err = {0};
    dpconfig_defaults(&cfg);
    assert_int_equal(dp_xid_policy_from_config(&cfg, "48;79", &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "DP_DISABLE_HEALTHCHECKS"));
    dpconfig_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_names), cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_single),        cmocka_unit_test(test_volume_mounts),
        cmocka_unit_test(test_xid_policy),    cmocka_unit_test(test_cap_minors),
        cmocka_unit_test(test_health_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
