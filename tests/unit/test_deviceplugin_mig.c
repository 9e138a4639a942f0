/* Device plugin, MIG and XID parts: profile names as NVIDIA forms them, resources for
 * migStrategy single and mixed (and their refusals), Allocate of MIG devices against
 * golden files (tests/data/deviceplugin/mig_*.golden, regenerate with VGPU_UPDATE_GOLDEN=1
 * and review the diff), the XID policy (DP_DISABLE_HEALTHCHECKS), and dynamic MIG
 * (migdyn.c: placement checks, ownership, what to destroy, the inventory object, HAMi's
 * allowlist, the refused list). */
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

/* ---- dynamic MIG (migdyn.c) ---------------------------------------------------------- */

#define POD_A "0a0a0a0a-0000-4000-8000-00000000000a"
#define POD_B "0b0b0b0b-0000-4000-8000-00000000000b"

/* An H100 80GB in dynamic MIG mode as NVML reports it: 1g.10gb (19), 1g.20gb (15),
 * 3g.40gb (9), 7g.80gb (0); instances per `inst` ("start:id,..."), all with their CI. */
static void dyn_gpu(struct dp_gpu *g, const unsigned (*inst)[2], size_t n)
{
    memset(g, 0, sizeof(*g));
    vg_strlcpy(g->uuid, "GPU-11111111-0000-0000-0000-000000000000", sizeof(g->uuid));
    vg_strlcpy(g->model, "NVIDIA H100 80GB HBM3", sizeof(g->model));
    g->mig_enabled = g->mig_dynamic = true;
    g->mig_slices = 8;
    static const struct nvml_mig_profile profs[] = {{"1g.10gb", 19, 1, 1, 16, 9984, 0x7F, 0x0},
                                                    {"1g.20gb", 15, 1, 2, 26, 20096, 0x55, 0x9},
                                                    {"3g.40gb", 9, 3, 4, 60, 40448, 0x11, 0x2},
                                                    {"7g.80gb", 0, 7, 8, 132, 81152, 0x01, 0x4}};
    memcpy(g->mig_profiles, profs, sizeof(profs));
    g->mig_profile_count = 4;
    g->mig_allowed = 0xF;
    for (size_t i = 0; i < n; i++) {
        struct nvml_mig_instance *mi = &g->mig_instances[g->mig_instance_count++];
        mi->start = inst[i][0];
        mi->profile_id = inst[i][1];
        for (size_t k = 0; k < 4; k++)
            if (profs[k].id == inst[i][1])
                mi->size = profs[k].size;
        mi->gi = (unsigned)i + 1;
        mi->has_ci = true;
        (void)vg_snprintf(mi->uuid, sizeof(mi->uuid), "MIG-%08zx-0000-0000-0000-000000000000", i);
    }
}

static struct dp_mig_claim claim(const struct dp_gpu *g, const char *profile, unsigned start,
                                 const char *pod)
{
    struct dp_mig_claim c;
    memset(&c, 0, sizeof(c));
    vg_strlcpy(c.uuid, g->uuid, sizeof(c.uuid));
    vg_strlcpy(c.profile, profile, sizeof(c.profile));
    c.start = start;
    vg_strlcpy(c.pod, pod, sizeof(c.pod));
    return c;
}

static struct annot_share share(const struct dp_gpu *g, const char *profile, unsigned start)
{
    struct annot_share s;
    memset(&s, 0, sizeof(s));
    vg_strlcpy(s.uuid, g->uuid, sizeof(s.uuid));
    vg_strlcpy(s.mig_profile, profile, sizeof(s.mig_profile));
    s.mig_start = (uint8_t)start;
    return s;
}

static void test_migdyn_check(void **state)
{
    (void)state;
    struct dp_gpu g;
    static const unsigned inst[][2] = {{0, 19}, {4, 9}}; /* A's 1g.10gb at 0, a 3g.40gb at 4 */
    dyn_gpu(&g, inst, 2);
    struct dp_mig_claim claims[] = {claim(&g, "1g.10gb", 0, POD_A)};
    struct vg_err err = {0};
    int existing = 7;
    const struct nvml_mig_profile *p = NULL;
    struct annot_share s = share(&g, "1g.10gb", 1); /* free: made anew */
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), 0);
    assert_int_equal(existing, -1);
    assert_string_equal(p->name, "1g.10gb");
    s = share(&g, "1g.10gb", 0); /* A's own: used again */
    assert_int_equal(dp_migdyn_check(&g, &s, POD_A, claims, 1, &existing, &p, &err), 0);
    assert_int_equal(existing, 0);
    /* B naming A's placement, an overlap with A's, the nobody's 3g.40gb, a start the
     * profile lacks, an unknown profile, a profile left out of the allowed ones. */
    s = share(&g, "1g.10gb", 0);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "belongs to pod " POD_A));
    s = share(&g, "1g.20gb", 0);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    s = share(&g, "1g.20gb", 4);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no pod owns"));
    s = share(&g, "1g.20gb", 3);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "cannot start at memory slice 3"));
    s = share(&g, "2g.20gb", 2);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "offers no MIG profile '2g.20gb'"));
    g.mig_allowed = 0x1; /* 1g.10gb only */
    s = share(&g, "1g.20gb", 2);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
    g.mig_dynamic = false;
    s = share(&g, "1g.10gb", 1);
    assert_int_equal(dp_migdyn_check(&g, &s, POD_B, claims, 1, &existing, &p, &err), -EINVAL);
}

static void test_migdyn_unused_and_annot(void **state)
{
    (void)state;
    struct dp_gpu g;
    static const unsigned inst[][2] = {{0, 19}, {2, 15}, {4, 9}};
    dyn_gpu(&g, inst, 3);
    g.mig_instances[1].has_ci = false; /* half made */
    struct dp_mig_claim claims[] = {claim(&g, "1g.10gb", 0, POD_A)};
    size_t out[8];
    /* First run: everything no pod names, and the half-made one. */
    assert_int_equal(dp_migdyn_unused(&g, claims, 1, NULL, out), 2);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 2);
    /* Later: only its own (the 3g.40gb at 4 is not), and half-made ones always. */
    bool owned[8] = {false};
    owned[0] = true;
    assert_int_equal(dp_migdyn_unused(&g, claims, 1, owned, out), 1);
    assert_int_equal(out[0], 1);
    owned[4] = true;
    assert_int_equal(dp_migdyn_unused(&g, claims, 1, owned, out), 2);

    struct annot_mig m;
    g.mig_allowed = 0xD; /* 1g.20gb left out */
    dp_migdyn_annot(&g, claims, 1, &m);
    assert_int_equal(m.slices, 8);
    assert_int_equal(m.profile_count, 3);
    assert_string_equal(m.profiles[1].name, "3g.40gb");
    assert_int_equal(m.profiles[1].placements, 0x11);
    assert_int_equal(m.instance_count, 3);
    assert_string_equal(m.instances[0].pod, POD_A);
    assert_string_equal(m.instances[1].profile, "1g.20gb"); /* named even if not offered */
    assert_string_equal(m.instances[2].pod, "");
    struct vg_err err = {0};
    char *text = NULL;
    struct annot_inventory inv;
    memset(&inv, 0, sizeof(inv));
    inv.gpu_count = 1;
    vg_strlcpy(inv.gpus[0].uuid, g.uuid, sizeof(inv.gpus[0].uuid));
    vg_strlcpy(inv.gpus[0].model, g.model, sizeof(inv.gpus[0].model));
    inv.gpus[0].memory_mib = 81559;
    inv.gpus[0].cores = 100;
    inv.gpus[0].slots = 4;
    inv.gpus[0].numa = -1;
    inv.gpus[0].healthy = true;
    inv.gpus[0].mig = m;
    inv.mode = ANNOT_MODE_VGPU;
    inv.heartbeat = 1;
    text = annot_inventory_encode(&inv, &err);
    assert_non_null(text); /* what the plugin publishes decodes as the contract says */
    free(text);
}

static void test_migdyn_claims_and_allow(void **state)
{
    (void)state;
    json_t *pods = json_pack(
        "{s:{s:{s:{s:s}}, s:{s:s}}, s:{s:{s:{s:s}}, s:{s:s}}}", POD_A, "metadata", "annotations",
        "vgpu.io/decision",
        "{\"version\":1,\"node\":\"n\",\"time\":1,\"containers\":[{\"name\":\"c\",\"gpus\":[{"
        "\"uuid\":\"GPU-11111111-0000-0000-0000-000000000000\",\"memoryMiB\":9984,\"cores\":0,"
        "\"mig\":{\"profile\":\"1g.10gb\",\"start\":6}}]}]}",
        "status", "phase", "Running", POD_B, "metadata", "annotations", "vgpu.io/decision",
        "{\"version\":1,\"node\":\"n\",\"time\":1,\"containers\":[{\"name\":\"c\",\"gpus\":[{"
        "\"uuid\":\"GPU-11111111-0000-0000-0000-000000000000\",\"memoryMiB\":9984,\"cores\":0,"
        "\"mig\":{\"profile\":\"1g.10gb\",\"start\":5}}]}]}",
        "status", "phase", "Succeeded");
    assert_non_null(pods);
    struct dp_mig_claim *claims = calloc(DP_MIG_MAX_CLAIMS, sizeof(*claims));
    assert_int_equal(dp_migdyn_claims(pods, claims), 1); /* a finished pod claims nothing */
    assert_string_equal(claims[0].pod, POD_A);
    assert_int_equal(claims[0].start, 6);
    free(claims);
    json_decref(pods);

    struct dp_gpu g;
    dyn_gpu(&g, NULL, 0);
    struct hami_mig hami;
    struct vg_err err = {0};
    static const char yaml[] = "nvidia:\n  migProfileAllowlist:\n  - models: [H100 80GB]\n"
                               "    profiles: [1g.10gb, 3g.40gb]\n";
    assert_int_equal(hami_mig_parse(yaml, strlen(yaml), &hami, &err), 0);
    assert_int_equal(dp_migdyn_allow(&g, &hami, &err), 0);
    assert_int_equal(g.mig_allowed, 0x5);
    assert_int_equal(dp_migdyn_allow(&g, NULL, &err), 0);
    assert_int_equal(g.mig_allowed, 0xF);
    vg_strlcpy(hami.rules[0].profiles[1], "1g.5gb", sizeof(hami.rules[0].profiles[1]));
    assert_int_equal(dp_migdyn_allow(&g, &hami, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "names profile '1g.5gb'"));
    vg_strlcpy(hami.rules[0].models[0], "A100", sizeof(hami.rules[0].models[0]));
    assert_int_equal(dp_migdyn_allow(&g, &hami, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "no entry"));

    struct annot_mig_refused list;
    memset(&list, 0, sizeof(list));
    for (unsigned i = 0; i < ANNOT_MIG_REFUSED_MAX + 3; i++)
        dp_migdyn_refused_add(&list, g.uuid, i % 2 ? "1g.10gb" : "not a name!", i % 8, i, "r");
    assert_int_equal(list.count, ANNOT_MIG_REFUSED_MAX);
    assert_int_equal(list.refused[0].time, 3);               /* the oldest dropped */
    assert_string_equal(list.refused[1].profile, "unknown"); /* time 4 */
    char *text = annot_mig_refused_encode(&list, &err);
    assert_non_null(text);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_profile_names),
        cmocka_unit_test(test_mixed),
        cmocka_unit_test(test_single),
        cmocka_unit_test(test_volume_mounts),
        cmocka_unit_test(test_xid_policy),
        cmocka_unit_test(test_cap_minors),
        cmocka_unit_test(test_health_config),
        cmocka_unit_test(test_migdyn_check),
        cmocka_unit_test(test_migdyn_unused_and_annot),
        cmocka_unit_test(test_migdyn_claims_and_allow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
