/* Unit tests for src/placement: every feasibility rule at its boundary, each policy's
 * score on small clusters computed by hand, determinism, and exact allocate/release
 * round trips. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/mem.h"
#include "base/str.h"
#include "placement/placement.h"

static struct place_cluster *cluster_of(int nodes, uint16_t gpus, uint64_t cpu, uint64_t mem)
{
    struct place_cluster *c = place_cluster_new();
    assert_non_null(c);
    for (int i = 0; i < nodes; i++) {
        char name[32];
        assert_true(vg_snprintf(name, sizeof name, "node-%d", i) > 0);
        assert_int_equal(place_cluster_add_node(c, name, cpu, mem, gpus, "V100", 16384, NULL), i);
    }
    return c;
}

static struct place_request gpu_request(uint64_t cpu, uint32_t count, uint32_t milli)
{
    struct place_request r = {
        .cpu_milli = cpu, .mem_mib = 1024, .gpu_count = count, .gpu_milli = milli};
    return r;
}

static void resolve(const struct place_cluster *c, struct place_request *r)
{
    struct vg_err err = {0};
    assert_int_equal(place_request_resolve(c, r, &err), 0);
}

/* Decides and allocates; returns the node index, -1 when nothing fits. */
static int place(struct place_cluster *c, struct place_request *r, enum place_policy p,
                 const struct place_context *ctx, struct place_decision *d)
{
    struct vg_err err = {0};
    resolve(c, r);
    int rc = place_decide(c, r, p, ctx, d, &err);
    if (rc == -ENOSPC)
        return -1;
    assert_int_equal(rc, 0);
    assert_int_equal(place_allocate(c, r, d, &err), 0);
    return d->node;
}

static void test_feasibility_cpu_memory_boundaries(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 2, 8000, 4096);
    struct place_request r = gpu_request(8000, 1, 500);
    r.mem_mib = 4096;
    resolve(c, &r);
    assert_true(place_node_feasible(c, 0, &r)); /* exactly the node's capacity */
    r.cpu_milli = 8001;
    assert_false(place_node_feasible(c, 0, &r));
    r.cpu_milli = 8000;
    r.mem_mib = 4097;
    assert_false(place_node_feasible(c, 0, &r));
    r.mem_mib = 1;
    r.gpu_count = 3; /* more GPUs than the node has */
    assert_false(place_node_feasible(c, 0, &r));
    assert_false(place_node_feasible(c, 5, &r)); /* no such node */
    place_cluster_free(c);
}

static void test_feasibility_gpu_share_boundary(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 1, 64000, 65536);
    struct place_decision d;
    struct place_request a = gpu_request(1000, 1, 700);
    assert_int_equal(place(c, &a, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    struct place_request b = gpu_request(1000, 1, 300); /* exactly the 300 left */
    resolve(c, &b);
    assert_true(place_node_feasible(c, 0, &b));
    b.gpu_milli = 301;
    assert_false(place_node_feasible(c, 0, &b));
    b.gpu_milli = 1000; /* a whole card needs a free card */
    assert_false(place_node_feasible(c, 0, &b));
    /* A full card takes no zero-compute tenant either (HAMi's Usedcores == Totalcore). */
    struct place_request fill = gpu_request(1000, 1, 300);
    assert_int_equal(place(c, &fill, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    struct place_request zero = gpu_request(1000, 1, 0);
    resolve(c, &zero);
    assert_false(place_node_feasible(c, 0, &zero));
    place_cluster_free(c);
}

static void test_feasibility_gpu_memory_boundary(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 1, 64000, 65536); /* 16384 MiB cards */
    struct place_request r = gpu_request(1000, 1, 100);
    r.gpu_mem_mib = 16384;
    resolve(c, &r);
    assert_true(place_node_feasible(c, 0, &r));
    r.gpu_mem_mib = 16385;
    assert_false(place_node_feasible(c, 0, &r));
    r.gpu_mem_mib = 0;
    r.gpu_mem_pct = 100;
    assert_true(place_node_feasible(c, 0, &r));
    struct place_decision d;
    struct place_request half = gpu_request(1000, 1, 100);
    half.gpu_mem_pct = 50;
    assert_int_equal(place(c, &half, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(d.mem_mib[0], 8192);
    assert_false(place_node_feasible(c, 0, &r)); /* 100 % no longer fits */
    r.gpu_mem_pct = 50;
    assert_true(place_node_feasible(c, 0, &r)); /* exactly the other half */
    r.gpu_mem_pct = 51;
    assert_false(place_node_feasible(c, 0, &r));
    place_cluster_free(c);
}

static void test_feasibility_types_and_uuids(void **state)
{
    (void)state;
    struct place_cluster *c = place_cluster_new();
    assert_int_equal(
        place_cluster_add_node(c, "a", 64000, 65536, 1, "Tesla V100-SXM2-16GB", 0, NULL), 0);
    assert_int_equal(place_cluster_add_node(c, "b", 64000, 65536, 1, "NVIDIA A100", 0, NULL), 1);
    struct place_request r = gpu_request(1000, 1, 100);
    r.type_include_count = 1;
    assert_true(vg_strlcpy(r.type_include[0], "v100", sizeof r.type_include[0]) >=
                0); /* HAMi: case-insensitive substring */
    resolve(c, &r);
    assert_true(place_node_feasible(c, 0, &r));
    assert_false(place_node_feasible(c, 1, &r));
    r.type_exact = true; /* the trace's gpu_spec: exact names */
    resolve(c, &r);
    assert_false(place_node_feasible(c, 0, &r));
    assert_true(vg_strlcpy(r.type_include[0], "NVIDIA A100", sizeof r.type_include[0]) >= 0);
    resolve(c, &r);
    assert_true(place_node_feasible(c, 1, &r));
    struct place_request x = gpu_request(1000, 1, 100);
    x.type_exclude_count = 1;
    assert_true(vg_strlcpy(x.type_exclude[0], "A100", sizeof x.type_exclude[0]) >= 0);
    resolve(c, &x);
    assert_true(place_node_feasible(c, 0, &x));
    assert_false(place_node_feasible(c, 1, &x));
    struct place_request u = gpu_request(1000, 1, 100);
    u.uuid_include_count = 1;
    assert_true(vg_strlcpy(u.uuid_include[0], c->nodes[1].gpus[0].uuid, sizeof u.uuid_include[0]) >=
                0);
    resolve(c, &u);
    assert_false(place_node_feasible(c, 0, &u));
    assert_true(place_node_feasible(c, 1, &u));
    u.uuid_exclude_count = 1;
    assert_true(vg_strlcpy(u.uuid_exclude[0], c->nodes[1].gpus[0].uuid, sizeof u.uuid_exclude[0]) >=
                0);
    assert_false(place_node_feasible(c, 1, &u));
    place_cluster_free(c);
}

static void test_feasibility_health_slots_exclusive(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 1, 64000, 65536);
    struct place_request r = gpu_request(1000, 1, 100);
    resolve(c, &r);
    c->nodes[0].gpus[0].healthy = false;
    assert_false(place_node_feasible(c, 0, &r));
    c->nodes[0].gpus[0].healthy = true;
    c->nodes[0].gpus[0].slots = 2;
    struct place_decision d1, d2;
    struct place_request a = r, b = r;
    assert_int_equal(place(c, &a, PLACE_POLICY_BESTFIT, NULL, &d1), 0);
    assert_true(place_node_feasible(c, 0, &r)); /* one slot left */
    assert_int_equal(place(c, &b, PLACE_POLICY_BESTFIT, NULL, &d2), 0);
    assert_false(place_node_feasible(c, 0, &r)); /* slots exhausted */
    struct vg_err err = {0};
    assert_int_equal(place_release(c, &b, &d2, &err), 0);
    /* An exclusive request needs an unused card ... */
    struct place_request ex = gpu_request(1000, 1, 100);
    ex.exclusive = true;
    resolve(c, &ex);
    assert_false(place_node_feasible(c, 0, &ex));
    assert_int_equal(place_release(c, &a, &d1, &err), 0);
    assert_true(place_node_feasible(c, 0, &ex));
    /* ... and keeps it to itself. */
    struct place_decision de;
    assert_int_equal(place(c, &ex, PLACE_POLICY_BESTFIT, NULL, &de), 0);
    assert_false(place_node_feasible(c, 0, &r));
    place_cluster_free(c);
}

static void test_feasibility_labels(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(2, 1, 64000, 65536);
    c->nodes[1].label_count = 1;
    assert_true(vg_strlcpy(c->nodes[1].labels[0].key, "zone", sizeof c->nodes[1].labels[0].key) >=
                0);
    assert_true(vg_strlcpy(c->nodes[1].labels[0].value, "b", sizeof c->nodes[1].labels[0].value) >=
                0);
    struct place_request r = gpu_request(1000, 1, 100);
    r.selector_count = 1;
    assert_true(vg_strlcpy(r.selector[0].key, "zone", sizeof r.selector[0].key) >= 0);
    assert_true(vg_strlcpy(r.selector[0].value, "b", sizeof r.selector[0].value) >= 0);
    struct place_decision d;
    assert_int_equal(place(c, &r, PLACE_POLICY_BESTFIT, NULL, &d), 1);
    assert_true(vg_strlcpy(r.selector[0].value, "c", sizeof r.selector[0].value) >= 0);
    assert_int_equal(place(c, &r, PLACE_POLICY_BESTFIT, NULL, &d), -1);
    place_cluster_free(c);
}

static void test_numa_preference_and_binding(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 4, 64000, 65536);
    for (int g = 0; g < 4; g++)
        c->nodes[0].gpus[g].numa = (uint8_t)(g / 2);
    struct place_decision d;
    struct place_request one = gpu_request(1000, 1, 1000);
    assert_int_equal(place(c, &one, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(d.gpus[0], 0);
    /* GPUs 1, 2, 3 are free; two on one NUMA node means 2 and 3, not 1 and 2. */
    struct place_request two = gpu_request(1000, 2, 1000);
    assert_int_equal(place(c, &two, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(d.gpus[0], 2);
    assert_int_equal(d.gpus[1], 3);
    struct vg_err err = {0};
    assert_int_equal(place_release(c, &two, &d, &err), 0);
    /* With GPU 2 taken too, only a cross-NUMA pair is left: allowed unless bound. */
    struct place_request other = gpu_request(1000, 1, 1000);
    c->nodes[0].gpus[1].healthy = false; /* steer the single GPU to 2 */
    assert_int_equal(place(c, &other, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(d.gpus[0], 2);
    c->nodes[0].gpus[1].healthy = true;
    struct place_request pair = gpu_request(1000, 2, 1000);
    resolve(c, &pair);
    assert_true(place_node_feasible(c, 0, &pair));
    pair.numa_bind = true;
    assert_false(place_node_feasible(c, 0, &pair));
    place_cluster_free(c);
}

static void test_hami_defaults(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct place_request r;
    /* nvidia.com/gpu: 1 alone: the whole card, exclusively. */
    memset(&r, 0, sizeof r);
    struct place_hami_resources res = {
        .gpu = 1, .gpumem = -1, .gpumem_percent = -1, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_int_equal(r.gpu_count, 1);
    assert_int_equal(r.gpu_mem_pct, 100);
    assert_int_equal(r.gpu_milli, 1000);
    assert_true(r.exclusive);
    /* gpumem without cores: defaultCores (0), shared. */
    res = (struct place_hami_resources){
        .gpu = 2, .gpumem = 4096, .gpumem_percent = -1, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_int_equal(r.gpu_count, 2);
    assert_int_equal(r.gpu_mem_mib, 4096);
    assert_int_equal(r.gpu_milli, 0);
    assert_false(r.exclusive);
    /* gpumem-percentage 100 without cores is exclusive too; 50 is not. */
    res = (struct place_hami_resources){
        .gpu = 1, .gpumem = -1, .gpumem_percent = 100, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_true(r.exclusive);
    res.gpumem_percent = 50;
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_false(r.exclusive);
    assert_int_equal(r.gpu_mem_pct, 50);
    /* Cores alone add defaultGPUNum cards; cores above 100 are clamped. */
    res = (struct place_hami_resources){
        .gpu = -1, .gpumem = -1, .gpumem_percent = -1, .gpucores = 30};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_int_equal(r.gpu_count, 1);
    assert_int_equal(r.gpu_milli, 300);
    assert_int_equal(r.gpu_mem_pct, 100);
    assert_false(r.exclusive);
    res.gpucores = 150;
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_int_equal(r.gpu_milli, 1000);
    /* defaultMemory replaces the whole-card default but not the exclusive rule. */
    struct place_hami_defaults def = {
        .default_memory = 2048, .default_cores = 10, .default_gpu_num = 1};
    res =
        (struct place_hami_resources){.gpu = 1, .gpumem = -1, .gpumem_percent = -1, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, &def, &r, &err), 0);
    assert_int_equal(r.gpu_mem_mib, 2048);
    assert_true(r.exclusive);
    /* Rejections. */
    res.gpumem_percent = 101;
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "gpumem-percentage"));
    res = (struct place_hami_resources){
        .gpu = 17, .gpumem = -1, .gpumem_percent = -1, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), -EINVAL);
    res = (struct place_hami_resources){
        .gpu = -1, .gpumem = 100, .gpumem_percent = -1, .gpucores = -1};
    def.default_gpu_num = 0;
    assert_int_equal(place_request_from_hami(&res, &def, &r, &err), -EINVAL);
    /* No GPU key at all: no GPU request. */
    res = (struct place_hami_resources){
        .gpu = -1, .gpumem = -1, .gpumem_percent = -1, .gpucores = -1};
    assert_int_equal(place_request_from_hami(&res, NULL, &r, &err), 0);
    assert_int_equal(r.gpu_count, 0);
}

static void test_request_resolve_rejects(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 1, 1000, 1000);
    struct vg_err err = {0};
    struct place_request r = gpu_request(0, 1, 1001);
    assert_int_equal(place_request_resolve(c, &r, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "1001"));
    r = gpu_request(0, 17, 1000);
    assert_int_equal(place_request_resolve(c, &r, &err), -EINVAL);
    r = gpu_request(0, 1, 100);
    r.gpu_mem_pct = 101;
    assert_int_equal(place_request_resolve(c, &r, &err), -EINVAL);
    assert_int_equal(place_cluster_add_node(c, "big", 1, 1, 17, "X", 0, &err), -EINVAL);
    assert_int_equal(place_cluster_add_node(c, "nomodel", 1, 1, 1, "", 0, &err), 1);
    place_cluster_free(c);
}

/* Two nodes: node 0 with GPU 0 at 400 milli used, node 1 empty; both 64 cores, 2 GPUs. */
static struct place_cluster *scoring_cluster(void)
{
    struct place_cluster *c = cluster_of(2, 2, 64000, 262144);
    struct place_decision d;
    struct place_request r = gpu_request(8000, 1, 400);
    c->nodes[1].rank = 5; /* node 0 wins ties */
    assert_int_equal(place(c, &r, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    return c;
}

static void test_scores_by_hand(void **state)
{
    (void)state;
    struct place_cluster *c = scoring_cluster();
    struct vg_err err = {0};
    struct place_decision d;
    struct place_request r = gpu_request(8000, 1, 500);
    resolve(c, &r);
    /* DotProd, node 0: C = 56000, L = 1600: dot = 0.4375·0.0625 + 0.2·0.0625 = 0.0398;
     * ⌊100·(1 − 0.0199)⌋ = 98. Node 1: C = 64000, L = 2000: dot = 0.046875 -> 97. */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DOTPROD, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.score, 98);
    /* BestFit, node 0: left = 0.5·48000/128000 + 0.5·1100/8000 = 0.25625 -> 74; it takes
     * the GPU with the smallest sufficient share (GPU 0: 600 free). */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_BESTFIT, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.score, 74);
    assert_int_equal(d.gpus[0], 0);
    /* Packing: a partly used card: 100 − ⌊⌊600·100/1000⌋/10⌋ = 94. */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_PACKING, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.score, 94);
    /* A whole GPU: node 0 uses a free card on a used node: 50 − 1 = 49; node 1 (empty,
     * G = 2) would score max(31, 2) = 31. */
    struct place_request whole = gpu_request(8000, 1, 1000);
    resolve(c, &whole);
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_PACKING, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.score, 49);
    assert_int_equal(d.gpus[0], 1);
    /* Clustering: node 0 hosts only share-gpu pods: 75 + ⌊25·(8000 − 1600)/8000⌋ = 95. For
     * a whole-GPU pod node 0 hosts only another class (20) and node 1 none (25 + 18). */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_CLUSTERING, NULL, &d, &err), 0);
    assert_int_equal(d.score, 95);
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_CLUSTERING, NULL, &d, &err), 0);
    assert_int_equal(d.node, 1);
    assert_int_equal(d.score, 43);
    /* CPU-only pods score 0 everywhere under Clustering: the rank decides. */
    struct place_request cpu = {.cpu_milli = 1000, .mem_mib = 1};
    resolve(c, &cpu);
    c->nodes[0].rank = 9;
    assert_int_equal(place_decide(c, &cpu, PLACE_POLICY_CLUSTERING, NULL, &d, &err), 0);
    assert_int_equal(d.node, 1);
    assert_int_equal(d.score, 0);
    place_cluster_free(c);
}

static void test_hami_binpack_spread(void **state)
{
    (void)state;
    struct place_cluster *c = scoring_cluster();
    struct vg_err err = {0};
    struct place_decision d;
    struct place_request r = gpu_request(1000, 1, 200);
    resolve(c, &r);
    /* binpack: the fuller node (0) and on it the fuller card (GPU 0). */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_BINPACK, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.gpus[0], 0);
    /* Node score, request counted: compute (400 + 200) / 2000 = 0.3; memory
     * (0 + 16384 card... none asked) = 0 -> 10·0.3·1000 = 3000. */
    assert_int_equal(d.score, 3000);
    /* spread: the emptier node. */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_SPREAD, NULL, &d, &err), 0);
    assert_int_equal(d.node, 1);
    /* GPU order can be set separately: binpack nodes, spread cards. */
    struct place_context ctx = {.gpu_order = PLACE_GPU_SPREAD};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_BINPACK, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.gpus[0], 1);
    place_cluster_free(c);
}

static void test_fragmentation_measure(void **state)
{
    (void)state;
    struct place_mix m;
    place_mix_init(&m);
    /* Types: a 500-milli sharing pod (weight 3), a whole GPU (1), a CPU-only pod (1),
     * a 2-GPU pod limited to model 1 (1). */
    struct place_mix_type share = {
        .cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 500, .model_mask = UINT64_MAX, .weight = 3};
    struct place_mix_type whole = {.cpu_milli = 1000,
                                   .gpu_count = 1,
                                   .gpu_milli = 1000,
                                   .model_mask = UINT64_MAX,
                                   .weight = 1};
    struct place_mix_type cpu = {.cpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 1};
    struct place_mix_type pair = {
        .cpu_milli = 1000, .gpu_count = 2, .gpu_milli = 1000, .model_mask = 2, .weight = 1};
    assert_int_equal(place_mix_add(&m, &share), 0);
    assert_int_equal(place_mix_add(&m, &whole), 0);
    assert_int_equal(place_mix_add(&m, &cpu), 0);
    assert_int_equal(place_mix_add(&m, &pair), 0);
    assert_int_equal(place_mix_add(&m, &share), 0); /* same type: weight adds up */
    assert_int_equal(m.count, 4);
    assert_int_equal(m.total_weight, 9);
    /* Node of model 0, free shares 300 and 1000, plenty of CPU:
     * share (w6): fits, 300 is a fragment -> 300; whole (w1): fits, 300 -> 300;
     * cpu (w1): all 1300; pair (w1): wrong model -> 1300. Σ = 1800+300+1300+1300. */
    uint32_t free_milli[2] = {300, 1000};
    assert_int_equal(place_frag_state(&m, 0, 64000, free_milli, 2), 1800 + 300 + 1300 + 1300);
    /* Without CPU no type fits: everything is a fragment for every type. */
    assert_int_equal(place_frag_state(&m, 0, 999, free_milli, 2), 9 * 1300);
    /* Model 1 with two free cards: the pair fits too; nothing is a fragment except for
     * the CPU-only type. */
    uint32_t empty[2] = {1000, 1000};
    assert_int_equal(place_frag_state(&m, 1, 64000, empty, 2), 2000);
    /* Typical set: sorted by weight; 95 % of 9 needs all but... 6+1+1 = 8 < 8.55. */
    place_mix_keep_typical(&m, 95);
    assert_int_equal(m.count, 4);
    assert_int_equal(m.types[0].weight, 6);
    place_mix_keep_typical(&m, 60);
    assert_int_equal(m.count, 1);
    assert_int_equal(m.total_weight, 6);
    place_mix_clear(&m);
}

static void test_fgd_picks_gpu_by_fragmentation(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 2, 64000, 262144);
    struct place_mix m;
    place_mix_init(&m);
    struct place_mix_type share = {
        .gpu_count = 1, .gpu_milli = 500, .model_mask = UINT64_MAX, .weight = 1};
    assert_int_equal(place_mix_add(&m, &share), 0);
    place_cluster_set_metric_mix(c, &m);
    struct place_decision d;
    struct place_request first = gpu_request(0, 1, 300); /* GPU 0: 700 free */
    assert_int_equal(place(c, &first, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    /* A 500 pod: on GPU 0 it leaves 200 (a fragment: ΔF = 0.2 GPU, score
     * ⌊100·σ(−0.2)⌋ = 45); on GPU 1 it leaves 700 and 500, both usable (ΔF = 0, 50).
     * BestFit takes GPU 0, FGD GPU 1. */
    struct place_request r = gpu_request(0, 1, 500);
    struct vg_err err = {0};
    resolve(c, &r);
    struct place_context ctx = {.mix = &m};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_FGD, &ctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 1);
    assert_int_equal(d.score, 50);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_BESTFIT, NULL, &d, &err), 0);
    assert_int_equal(d.gpus[0], 0);
    /* The cluster's fragmentation summary follows allocations. */
    assert_int_equal(c->frag_total, 0);
    struct place_request tiny = gpu_request(0, 1, 600); /* GPU 0 -> 100 free */
    assert_int_equal(place(c, &tiny, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(c->frag_total, 100);
    /* Missing mix is an error, not a crash. */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_FGD, NULL, &d, &err), -EINVAL);
    place_cluster_free(c);
    place_mix_clear(&m);
}

static void test_random_is_deterministic_per_seed(void **state)
{
    (void)state;
    int picks[2][64];
    for (int run = 0; run < 2; run++) {
        struct place_cluster *c = cluster_of(8, 2, 64000, 262144);
        struct vg_prng rng;
        vg_prng_seed(&rng, 42);
        struct place_context ctx = {.rng = &rng};
        for (int i = 0; i < 16; i++) {
            struct place_request r = gpu_request(1000, 1, 250);
            struct place_decision d;
            picks[run][i] = place(c, &r, PLACE_POLICY_RANDOM, &ctx, &d);
            assert_true(picks[run][i] >= 0);
        }
        place_cluster_free(c);
    }
    assert_memory_equal(picks[0], picks[1], 16 * sizeof(int));
    /* It does spread: 16 picks over 8 nodes are not all the same node. */
    int distinct = 0;
    for (int i = 1; i < 16; i++)
        distinct += picks[0][i] != picks[0][0];
    assert_true(distinct > 0);
    struct place_cluster *c = cluster_of(1, 1, 1000, 1000);
    struct place_request r = gpu_request(0, 1, 100);
    struct place_decision d;
    struct vg_err err = {0};
    resolve(c, &r);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_RANDOM, NULL, &d, &err), -EINVAL);
    place_cluster_free(c);
}

static void test_ties_go_to_lowest_rank(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(3, 8, 96000, 393216);
    c->nodes[0].rank = 2;
    c->nodes[1].rank = 0;
    c->nodes[2].rank = 1;
    struct place_request r = gpu_request(1000, 1, 1000);
    struct place_decision d;
    assert_int_equal(place(c, &r, PLACE_POLICY_PACKING, NULL, &d), 1);
    place_cluster_free(c);
}

static void test_allocate_release_round_trip(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(4, 4, 32000, 131072);
    struct place_mix m;
    place_mix_init(&m);
    struct place_mix_type t = {
        .cpu_milli = 4000, .gpu_count = 1, .gpu_milli = 300, .model_mask = UINT64_MAX, .weight = 2};
    assert_int_equal(place_mix_add(&m, &t), 0);
    place_cluster_set_metric_mix(c, &m);
    size_t bytes = c->node_count * sizeof *c->nodes;
    struct place_node *before = malloc(bytes);
    assert_non_null(before);
    memcpy(before, c->nodes, bytes);
    struct place_cluster summary = *c;
    struct place_request reqs[12];
    struct place_decision ds[12];
    struct place_context ctx = {.mix = &m};
    for (int i = 0; i < 12; i++) {
        reqs[i] = gpu_request(2000 + 500 * (uint64_t)i, (uint32_t)(i % 3 == 0 ? 2 : 1),
                              i % 3 == 0 ? 1000 : 150 + 70 * (uint32_t)i);
        reqs[i].gpu_mem_mib = 1000;
        assert_true(place(c, &reqs[i], PLACE_POLICY_FGD, &ctx, &ds[i]) >= 0);
    }
    assert_true(c->milli_used > 0);
    struct vg_err err = {0};
    /* Release in a different order than allocation. */
    for (int i = 0; i < 12; i += 2)
        assert_int_equal(place_release(c, &reqs[i], &ds[i], &err), 0);
    for (int i = 11; i > 0; i -= 2)
        assert_int_equal(place_release(c, &reqs[i], &ds[i], &err), 0);
    assert_memory_equal(before, c->nodes, bytes);
    assert_int_equal(c->milli_used, summary.milli_used);
    assert_int_equal(c->frag_total, summary.frag_total);
    /* Releasing what is not allocated is refused and changes nothing. */
    assert_int_equal(place_release(c, &reqs[0], &ds[0], &err), -EINVAL);
    assert_memory_equal(before, c->nodes, bytes);
    struct place_decision bogus = ds[1];
    bogus.node = 99;
    assert_int_equal(place_allocate(c, &reqs[1], &bogus, &err), -EINVAL);
    free(before);
    place_cluster_free(c);
    place_mix_clear(&m);
}

/* The F_n memo for a mix that is not the cluster's metric mix: hand-computed values,
 * reuse while the node is unchanged, recomputation after a change or a reset, and
 * decisions identical to those made without it. */
static void test_frag_cache(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(3, 2, 8000, 262144);
    struct place_mix m;
    place_mix_init(&m);
    /* One type: a 500-milli sharing pod needing 2 cores (weight 2). */
    struct place_mix_type share = {
        .cpu_milli = 2000, .gpu_count = 1, .gpu_milli = 500, .model_mask = UINT64_MAX, .weight = 2};
    assert_int_equal(place_mix_add(&m, &share), 0);
    struct place_frag_cache fc;
    assert_int_equal(place_frag_cache_init(&fc, c->node_count), 0);
    /* Empty node: the type fits and every card is usable: F = 0, a miss then a hit. */
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 0);
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 0);
    assert_int_equal(fc.misses, 1);
    assert_int_equal(fc.hits, 1);
    /* 700 milli and 1 core on node 0, GPU 0: 300 left there is a fragment (w 2 -> 600). */
    struct place_decision d;
    struct place_request r = gpu_request(1000, 1, 700);
    assert_int_equal(place(c, &r, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 2 * 300);
    assert_int_equal(fc.misses, 2);
    /* 1.5 cores left: the type no longer fits, all 1300 free milli are fragments. */
    struct place_request cpu = {.cpu_milli = 5500, .mem_mib = 1};
    assert_int_equal(place(c, &cpu, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 2 * 1300);
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 2 * 1300);
    assert_int_equal(fc.misses, 3);
    assert_int_equal(fc.hits, 2);
    /* A reset forgets everything; out-of-range indices and a NULL cache compute directly. */
    place_frag_cache_reset(&fc);
    assert_int_equal(place_frag_cached(&fc, 0, &m, &c->nodes[0]), 2 * 1300);
    assert_int_equal(fc.misses, 4);
    assert_int_equal(place_frag_cached(&fc, 99, &m, &c->nodes[0]), 2 * 1300);
    assert_int_equal(place_frag_cached(NULL, 0, &m, &c->nodes[0]), 2 * 1300);
    assert_int_equal(fc.misses, 4);
    place_frag_cache_free(&fc);
    place_cluster_free(c);

    /* Same pod sequence on two copies, FGD and default with the mix not installed as
     * the metric mix: with and without the memo, identical decisions. */
    struct place_cluster *a = cluster_of(6, 4, 32000, 262144);
    struct place_cluster *b = cluster_of(6, 4, 32000, 262144);
    assert_int_equal(place_frag_cache_init(&fc, a->node_count), 0);
    struct place_context with = {.mix = &m, .frag_cache = &fc}, without = {.mix = &m};
    for (int i = 0; i < 60; i++) {
        enum place_policy p = i % 2 ? PLACE_POLICY_FGD : PLACE_POLICY_DEFAULT;
        struct place_request ra = gpu_request(1000 + 700 * (uint64_t)(i % 4), i % 7 == 0 ? 2 : 1,
                                              i % 7 == 0 ? 1000 : 100 + 90 * (uint32_t)(i % 9));
        struct place_request rb = ra;
        struct place_decision da, db;
        assert_int_equal(place(a, &ra, p, &with, &da), place(b, &rb, p, &without, &db));
        assert_int_equal(da.score, db.score);
        assert_memory_equal(da.gpus, db.gpus, da.gpu_count);
    }
    assert_true(fc.hits > 0);
    place_frag_cache_free(&fc);
    place_frag_cache_free(&fc); /* freeing twice is safe */
    place_cluster_free(a);
    place_cluster_free(b);
    place_mix_clear(&m);
}

/* Model pressure by hand, and the decisions it turns. Cluster: 6 G2 cards on node 0, 2 T4
 * cards on node 1 (8 in all). Mix: whole GPUs on any model (w4), 500 shares on any (w4)
 * and restricted to T4 (w8), whole GPUs restricted to a model the cluster lacks (w2).
 * Demand 4000 + 2000 + 4000 + 2000 = 12000: the T4 type carries 1/3 of it on 2/8 of the
 * cards, pressure 4/3 on T4; the absent model's type presses on nothing. */
static void test_default_model_pressure(void **state)
{
    (void)state;
    struct place_cluster *c = place_cluster_new();
    assert_non_null(c);
    assert_int_equal(place_cluster_add_node(c, "g", 96000, 393216, 6, "G2", 0, NULL), 0);
    assert_int_equal(place_cluster_add_node(c, "t", 96000, 393216, 2, "T4", 0, NULL), 1);
    struct vg_err err = {0};
    int t4 = place_cluster_model(c, "T4", &err), g2 = place_cluster_model(c, "G2", &err);
    int absent = place_cluster_model(c, "A10", &err);
    assert_true(t4 >= 0 && g2 >= 0 && absent >= 0);
    struct place_mix m;
    place_mix_init(&m);
    struct place_mix_type types[] = {
        {.gpu_count = 1, .gpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 4},
        {.gpu_count = 1, .gpu_milli = 500, .model_mask = UINT64_MAX, .weight = 4},
        {.gpu_count = 1, .gpu_milli = 500, .model_mask = 1ULL << t4, .weight = 8},
        {.gpu_count = 1, .gpu_milli = 1000, .model_mask = 1ULL << absent, .weight = 2},
    };
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(place_mix_add(&m, &types[i]), 0);
    double p[PLACE_MAX_MODELS];
    place_model_pressure(c, &m, p);
    assert_true(fabs(p[t4] - 4.0 / 3.0) < 1e-12);
    assert_true(p[g2] == 0.0 && p[absent] == 0.0);

    /* The same shapes with no model lists: no pressure anywhere. */
    struct place_mix any;
    place_mix_init(&any);
    for (size_t i = 0; i < 4; i++) {
        struct place_mix_type x = types[i];
        x.model_mask = UINT64_MAX;
        assert_int_equal(place_mix_add(&any, &x), 0);
    }
    place_model_pressure(c, &any, p);
    assert_true(p[t4] == 0.0 && p[g2] == 0.0);

    /* Without model lists a whole-GPU pod and a 500 share go to the small T4 node (BestFit's
     * leftover); with the T4 pods' pressure both leave its cards to them, and a T4 pod
     * still gets one. The share's cost on T4 is (4/3 − 0.5)·500 ≈ 417 milli, 41 points,
     * against 21 points of stranded share its 500 remainder costs on a G2 card (only the
     * any-model 500s, 4 of 18 GPU weight, fit it there; 12 of 18 on T4). */
    struct place_decision d;
    struct place_context ctx = {.mix = &any};
    struct place_request whole = gpu_request(1000, 1, 1000), half = gpu_request(1000, 1, 500);
    resolve(c, &whole);
    resolve(c, &half);
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 1);
    assert_int_equal(place_decide(c, &half, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 1);
    ctx.mix = &m;
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(place_decide(c, &half, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 0);
    struct place_request t4_half = gpu_request(1000, 1, 500);
    t4_half.model_mask = 1ULL << t4;
    t4_half.type_include_count = 1;
    (void)vg_strlcpy(t4_half.type_include[0], "T4", sizeof t4_half.type_include[0]);
    resolve(c, &t4_half);
    assert_int_equal(place_decide(c, &t4_half, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 1);
    place_mix_clear(&any);
    place_mix_clear(&m);
    place_cluster_free(c);
}

static void test_default_cpu_scarce(void **state)
{
    (void)state;
    /* 72 cores and 2 GPUs in all. A mix asking 2 cores per whole GPU uses CPU at
     * (2000/72000) / (1000/2000) = 0.056 of its GPU rate; one asking 2 cores per 20 milli at
     * (2000/72000) / (20/2000) = 2.78: the nodes run out of CPU first. */
    struct place_cluster *c = place_cluster_new();
    assert_non_null(c);
    assert_int_equal(place_cluster_add_node(c, "big", 64000, 262144, 1, "T4", 0, NULL), 0);
    assert_int_equal(place_cluster_add_node(c, "small", 8000, 262144, 1, "T4", 0, NULL), 1);
    struct place_mix gpu_bound, cpu_bound;
    place_mix_init(&gpu_bound);
    place_mix_init(&cpu_bound);
    struct place_mix_type whole = {.cpu_milli = 2000,
                                   .gpu_count = 1,
                                   .gpu_milli = 1000,
                                   .model_mask = UINT64_MAX,
                                   .weight = 1};
    struct place_mix_type sliver = whole;
    sliver.gpu_milli = 20;
    assert_int_equal(place_mix_add(&gpu_bound, &whole), 0);
    assert_int_equal(place_mix_add(&cpu_bound, &sliver), 0);
    assert_true(fabs(place_cpu_pressure(c, &gpu_bound) - 1.0 / 18.0) < 1e-12);
    assert_true(fabs(place_cpu_pressure(c, &cpu_bound) - 25.0 / 9.0) < 1e-12);
    struct place_mix none;
    place_mix_init(&none); /* no GPU demand: no pressure */
    assert_true(place_cpu_pressure(c, &none) == 0.0);

    /* A CPU-only pod of 4 cores leaves every type fitting on both nodes (equal FGD
     * scores). While GPUs run out first, BestFit sends it to the small node and keeps the
     * big one's CPU for GPU pods; once CPU runs out first, the ranking decides instead. */
    struct place_request cpu_only = gpu_request(4000, 0, 0);
    resolve(c, &cpu_only);
    struct place_decision d;
    struct vg_err err = {0};
    struct place_context ctx = {.mix = &gpu_bound};
    assert_int_equal(place_decide(c, &cpu_only, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 1);
    ctx.mix = &cpu_bound;
    assert_int_equal(place_decide(c, &cpu_only, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 0);
    place_mix_clear(&gpu_bound);
    place_mix_clear(&cpu_bound);
    place_cluster_free(c);
}

static void test_default_gaps_by_hand(void **state)
{
    (void)state;
    /* Mix: shares 100 (w2), 300 (w98), 500 (w100), whole GPU (w200), CPU-only (w50, never
     * counts): 400 of GPU weight. live[g] = min(1, q(g) / 1 %): 0 below 100; 2/400 = 0.5 %
     * of the weight fits 100..299 (live 0.5); from 300 on at least 25 % (live 1). */
    struct place_mix m;
    place_mix_init(&m);
    struct place_mix_type types[] = {
        {.gpu_count = 1, .gpu_milli = 100, .model_mask = UINT64_MAX, .weight = 2},
        {.gpu_count = 1, .gpu_milli = 300, .model_mask = UINT64_MAX, .weight = 98},
        {.gpu_count = 1, .gpu_milli = 500, .model_mask = UINT64_MAX, .weight = 100},
        {.gpu_count = 1, .gpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 200},
        {.cpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 50},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_int_equal(place_mix_add(&m, &types[i]), 0);
    /* Cards with 500, 500, 300 and 1000 free, and an unhealthy one with 500 free, which
     * takes no pods and so is no gap. */
    struct place_cluster *c = cluster_of(1, 5, 64000, 262144);
    uint32_t used[5] = {500, 500, 700, 0, 500};
    for (int g = 0; g < 5; g++) {
        c->nodes[0].gpus[g].milli_used = used[g];
        c->nodes[0].gpus[g].tenants = used[g] > 0;
    }
    c->nodes[0].gpus[4].healthy = false;
    place_cluster_refresh(c);
    struct place_gaps gaps;
    place_gaps_build(&gaps, c, &m);
    assert_int_equal(gaps.count[500], 2);
    assert_int_equal(gaps.count[300], 1);
    assert_int_equal(gaps.count[1000], 0);
    assert_true(gaps.live[99] == 0.0);
    assert_true(fabs(gaps.live[100] - 0.5) < 1e-12 && fabs(gaps.live[299] - 0.5) < 1e-12);
    assert_true(gaps.live[300] == 1.0 && gaps.live[999] == 1.0);
    /* A 300 pod on a 500 card: (2−1)² − 2² for the 500s, + 0.5·((0+1)² − 0²) for the
     * new 200: −2.5. On an unused card: a new 700 gap, +1. Closing the 300 card: −1. */
    assert_true(fabs(place_gaps_delta(&gaps, 500, 300) + 2.5) < 1e-12);
    assert_true(fabs(place_gaps_delta(&gaps, 1000, 300) - 1.0) < 1e-12);
    assert_true(fabs(place_gaps_delta(&gaps, 300, 300) + 1.0) < 1e-12);
    assert_true(fabs(place_gaps_delta(&gaps, 500, 500) + 3.0) < 1e-12);
    assert_true(place_gaps_delta(&gaps, 300, 500) == 0.0);   /* does not fit */
    assert_true(place_gaps_delta(&gaps, 1000, 1000) == 0.0); /* a whole card: no gap */
    place_cluster_free(c);
    place_mix_clear(&m);

    /* A decision the balance turns. Mix: 300 share and whole GPU, w1 each (live from 300
     * on). Node 0: cards with 400 and 350 free; node 1: two with 400 free (three 400 gaps,
     * one 350). A 300 pod arrives.
     *   stranded share, node 0: before 400/8 + 350/8 = 93.75; card 0 (-> 100, which no
     *   type fits) after 100 + 43.75, growth 50, ⌊−5⌋; card 1 (-> 50) after 50 + 50,
     *   growth 6.25, ⌊−0.625⌋ = −1. Alone it would take card 1 (best fit).
     *   balance: card 0 closes a 400 gap, (3−1)² − 3² = −5, the 100 left is dead: score
     *   ⌊−2·−5⌋ = +10, total 5; card 1 closes the only 350 gap, −1: +2, total 1.
     *   node 1: the same 5 as node 0's card 0; node 0 wins on BestFit's leftover
     *   (450 milli against 500): ⌊100·(1 − 0.5·64000/128000 − 0.5·450/8000)⌋ = 72.
     * The pod fills one of the three 400 gaps instead of the one 350 gap, so the next 300
     * pods still find both kinds. */
    place_mix_init(&m);
    struct place_mix_type two[] = {
        {.gpu_count = 1, .gpu_milli = 300, .model_mask = UINT64_MAX, .weight = 1},
        {.gpu_count = 1, .gpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 1},
    };
    for (size_t i = 0; i < sizeof two / sizeof two[0]; i++)
        assert_int_equal(place_mix_add(&m, &two[i]), 0);
    c = cluster_of(2, 2, 64000, 262144);
    c->nodes[0].gpus[0].milli_used = 600;
    c->nodes[0].gpus[1].milli_used = 650;
    c->nodes[1].gpus[0].milli_used = 600;
    c->nodes[1].gpus[1].milli_used = 600;
    for (int n = 0; n < 2; n++)
        for (int g = 0; g < 2; g++)
            c->nodes[n].gpus[g].tenants = 1;
    c->nodes[0].rank = 1; /* node 1 would win a full tie */
    c->nodes[1].rank = 0;
    place_cluster_refresh(c);
    struct place_request r = gpu_request(0, 1, 300);
    resolve(c, &r);
    struct place_context ctx = {.mix = &m};
    struct place_decision d;
    struct vg_err err = {0};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.gpus[0], 0);
    assert_int_equal(d.score, 5 * 1000 + 500 + 72);
    place_cluster_free(c);
    place_mix_clear(&m);
}

static void test_default_waste_by_hand(void **state)
{
    (void)state;
    struct place_mix m;
    place_mix_init(&m);
    /* GPU types of weight 8 in all: a 500-milli share (1 core, w3), a 200-milli share
     * needing 4 cores (w1), a whole GPU (w2), a 2-GPU pod (w1), a 300-milli share only
     * for model 1 (w1); plus a CPU-only type (w2), which never counts. */
    struct place_mix_type types[] = {
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 500,
         .model_mask = UINT64_MAX,
         .weight = 3},
        {.cpu_milli = 4000,
         .gpu_count = 1,
         .gpu_milli = 200,
         .model_mask = UINT64_MAX,
         .weight = 1},
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 2},
        {.cpu_milli = 1000,
         .gpu_count = 2,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 1},
        {.cpu_milli = 1000, .gpu_count = 1, .gpu_milli = 300, .model_mask = 2, .weight = 1},
        {.cpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 2},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_int_equal(place_mix_add(&m, &types[i]), 0);
    struct place_frag_cache fc;
    assert_int_equal(place_frag_cache_init(&fc, 1), 0);
    /* Model 0, 2 cores free, cards with 500, 1000 and 200 milli free. Card 500: only the
     * 500 share fits (the 200 share lacks CPU, the model-1 share the model): q = 3, term
     * 500·(5/8)³ = 122.0703125. Card 1000: 500 share and whole GPU (one free card is too
     * few for the pair): q = 5, 1000·(3/8)³ = 52.734375. Card 200: nothing, all 200. */
    uint32_t free_milli[3] = {500, 1000, 200};
    for (int pass = 0; pass < 2; pass++) { /* without, then with the index */
        struct place_fit_index *ix = pass ? &fc.fit : NULL;
        assert_int_equal(place_fit_weight(&m, ix, 0, 2000, free_milli, 3, 500), 3);
        assert_int_equal(place_fit_weight(&m, ix, 0, 2000, free_milli, 3, 1000), 5);
        assert_int_equal(place_fit_weight(&m, ix, 0, 2000, free_milli, 3, 200), 0);
        assert_int_equal(place_fit_weight(&m, ix, 1, 2000, free_milli, 3, 500), 4);
        assert_true(fabs(place_waste_state(&m, ix, 0, 2000, free_milli, 3) - 374.8046875) < 1e-9);
        /* 4 cores: the 200 share fits everywhere: 500·(4/8)³ + 1000·(2/8)³ + 200·(7/8)³. */
        assert_true(fabs(place_waste_state(&m, ix, 0, 4000, free_milli, 3) - 212.109375) < 1e-9);
        /* Two free cards admit the pair: card 1000 then holds w 6 of 8. */
        uint32_t two[2] = {1000, 1000};
        assert_int_equal(place_fit_weight(&m, ix, 0, 2000, two, 2, 1000), 6);
        /* Less CPU than any type: every free share is stranded. */
        assert_true(fabs(place_waste_state(&m, ix, 0, 999, free_milli, 3) - 1700.0) < 1e-9);
    }
    assert_true(fc.fit.valid);
    /* After a reset the index follows the changed mix. */
    struct place_mix_type tiny = {
        .cpu_milli = 0, .gpu_count = 1, .gpu_milli = 100, .model_mask = UINT64_MAX, .weight = 8};
    assert_int_equal(place_mix_add(&m, &tiny), 0);
    place_frag_cache_reset(&fc);
    assert_int_equal(place_fit_weight(&m, &fc.fit, 0, 2000, free_milli, 3, 200), 8);
    /* A mix without GPU types strands nothing. */
    struct place_mix none;
    place_mix_init(&none);
    assert_true(place_waste_state(&none, NULL, 0, 2000, free_milli, 3) == 0.0);
    place_frag_cache_free(&fc);
    place_mix_clear(&m);

    /* A decision. Mix: 470 (w2), 320 (w2), whole GPU (w4). One node, cards with 530
     * (a 470 pod), 680 (a 320 pod) and 1000 free; a 320 pod arrives.
     *   before: 530·(4/8)³ + 680·(4/8)³ + 0 = 66.25 + 85 = 151.25
     *   card 0 (-> 210, no type fits): 210 + 85 = 295, growth 143.75, ⌊−14.375⌋ = −15
     *   card 1 (-> 360, q = 2): 66.25 + 360·(6/8)³ = 218.125, growth 66.875 -> −7
     *   card 2 (-> 680): 66.25 + 85 + 85 = 236.25, growth 85 -> −9
     * Default takes card 1 (360 left, which a later 320 still fits); FGD scores cards 0
     * and 1 alike (ΔF = −0.055 and −0.07 GPU, both ⌊100·σ⌋ = 51) and takes card 0,
     * leaving 210 that no type can use.
     * Default's score: −7·1000 + 500 (node in use) + BestFit ⌊100·(1 − 0.25 −
     * 0.5·1890/8000)⌋ = 63. */
    place_mix_init(&m);
    struct place_mix_type pair_mix[] = {
        {.gpu_count = 1, .gpu_milli = 470, .model_mask = UINT64_MAX, .weight = 2},
        {.gpu_count = 1, .gpu_milli = 320, .model_mask = UINT64_MAX, .weight = 2},
        {.gpu_count = 1, .gpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 4},
    };
    for (size_t i = 0; i < sizeof pair_mix / sizeof pair_mix[0]; i++)
        assert_int_equal(place_mix_add(&m, &pair_mix[i]), 0);
    struct place_cluster *c = cluster_of(1, 3, 64000, 262144);
    c->nodes[0].gpus[0].milli_used = 470;
    c->nodes[0].gpus[0].tenants = 1;
    c->nodes[0].gpus[1].milli_used = 320;
    c->nodes[0].gpus[1].tenants = 1;
    place_cluster_refresh(c);
    struct place_request r = gpu_request(0, 1, 320);
    resolve(c, &r);
    struct place_context ctx = {.mix = &m};
    struct place_decision d;
    struct vg_err err = {0};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 1);
    assert_int_equal(d.score, -7000 + 500 + 63);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_FGD, &ctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 0);
    assert_int_equal(d.score, 51);
    /* Whole-GPU pods keep FGD's score under default: the free card goes, F stays
     * 4·530 + 4·680 (ΔF = 0, ⌊100·σ(0)⌋ = 50); the stranded share does not change
     * (w = 0, stored as 2000); node in use; BestFit ⌊100·(1 − 0.25 − 0.5·1210/8000)⌋
     * = 67. */
    struct place_request whole = gpu_request(0, 1, 1000);
    resolve(c, &whole);
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 2);
    assert_int_equal(d.score, 50 * 100000000LL + 2000 * 10000 + 1000 + 67);
    /* waste_mix replaces the mix for sharing pods only. Against whole GPUs alone no
     * remainder is usable (waste = free): before 530 + 680 = 1210; cards 0 and 1 both
     * leave 890 (gain 320, score 32), card 2 leaves 1890: the tie goes to card 0. */
    struct place_mix whole_only;
    place_mix_init(&whole_only);
    assert_int_equal(place_mix_add(&whole_only, &pair_mix[2]), 0);
    struct place_frag_cache pfc;
    assert_int_equal(place_frag_cache_init(&pfc, c->node_count), 0);
    struct place_context wctx = {.mix = &m, .waste_mix = &whole_only, .frag_cache = &pfc};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DEFAULT, &wctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 0);
    assert_int_equal(d.score, 32 * 1000 + 500 + 63);
    assert_int_equal(place_decide(c, &whole, PLACE_POLICY_DEFAULT, &wctx, &d, &err), 0);
    assert_int_equal(d.score, 50 * 100000000LL + 2000 * 10000 + 1000 + 67);
    /* The cache's index follows the mix it is asked about, without a reset. */
    wctx.waste_mix = NULL;
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DEFAULT, &wctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 1);
    assert_int_equal(d.score, -7000 + 500 + 63);
    place_frag_cache_free(&pfc);
    place_mix_clear(&whole_only);
    place_cluster_free(c);
    place_mix_clear(&m);

    /* A whole GPU that takes the CPU the node's half-used card needs. Mix: whole GPU and
     * 500 share, 1 core each, w 4 each. Node: 2.5 cores, card 0 with 500 free, card 1
     * free; the pod asks 2 cores.
     *   FGD: before 4·500 (whole GPUs cannot use card 0); after no type fits the 0.5
     *   cores left: 8·500. ΔF = 2000/8000 = 0.25 GPU, ⌊100·σ(−0.25)⌋ = 43.
     *   stranded share: before 500·(4/8)³ = 62.5, after 500: w = ⌊−437.5/10⌋ = −44.
     *   BestFit ⌊100·(1 − 0.5·500/128000 − 0.5·500/8000)⌋ = 96. */
    place_mix_init(&m);
    struct place_mix_type cpu_mix[] = {
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 4},
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 500,
         .model_mask = UINT64_MAX,
         .weight = 4},
    };
    for (size_t i = 0; i < sizeof cpu_mix / sizeof cpu_mix[0]; i++)
        assert_int_equal(place_mix_add(&m, &cpu_mix[i]), 0);
    c = cluster_of(1, 2, 2500, 262144);
    c->nodes[0].gpus[0].milli_used = 500;
    c->nodes[0].gpus[0].tenants = 1;
    place_cluster_refresh(c);
    struct place_request hungry = gpu_request(2000, 1, 1000);
    resolve(c, &hungry);
    ctx.mix = &m;
    assert_int_equal(place_decide(c, &hungry, PLACE_POLICY_DEFAULT, &ctx, &d, &err), 0);
    assert_int_equal(d.gpus[0], 1);
    assert_int_equal(d.score, 43 * 100000000LL + (2000 - 44) * 10000 + 1000 + 96);
    place_cluster_free(c);
    place_mix_clear(&m);
}

static void test_no_fit_and_policy_names(void **state)
{
    (void)state;
    struct place_cluster *c = cluster_of(1, 1, 1000, 1000);
    struct place_request r = gpu_request(1000, 1, 1000);
    r.mem_mib = 1000;
    struct place_decision d;
    assert_int_equal(place(c, &r, PLACE_POLICY_BESTFIT, NULL, &d), 0);
    struct place_request again = r;
    assert_int_equal(place(c, &again, PLACE_POLICY_BESTFIT, NULL, &d), -1);
    assert_int_equal(d.node, -1);
    for (int p = 0; p < PLACE_POLICY_COUNT; p++) {
        const char *name = place_policy_name((enum place_policy)p);
        assert_int_equal(place_sim_policy_from_name(name), p);
        /* The models of kube-scheduler's DRA allocator are not policies the scheduler
         * can be configured with. */
        bool sim_only = p == PLACE_POLICY_DRA_FIRSTFIT || p == PLACE_POLICY_DRA_DEFAULT;
        assert_int_equal(place_policy_sim_only((enum place_policy)p), sim_only);
        assert_int_equal(place_policy_from_name(name), sim_only ? -1 : p);
    }
    assert_string_equal(place_policy_name(PLACE_POLICY_DRA_FIRSTFIT), "dra-firstfit");
    assert_string_equal(place_policy_name(PLACE_POLICY_DRA_DEFAULT), "dra-default");
    assert_int_equal(place_policy_from_name("nope"), -1);
    assert_int_equal(place_sim_policy_from_name("nope"), -1);
    place_cluster_free(c);
}

/* kube-scheduler's DRA allocator takes the first card in device order that has the share
 * left, where vgpu's policies take the fullest card that fits: on a node with an empty
 * card 0 and card 1 at 700 milli, a 300-milli pod goes to card 0 and the node can no
 * longer take a whole GPU (700 and 0 milli left), while best fit fills card 1 and keeps
 * card 0 whole. */
static void test_dra_firstfit_card_order(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        enum place_policy p = round == 0 ? PLACE_POLICY_DRA_FIRSTFIT : PLACE_POLICY_BESTFIT;
        struct place_cluster *c = cluster_of(1, 2, 16000, 65536);
        c->nodes[0].gpus[1].milli_used = 700;
        c->nodes[0].gpus[1].tenants = 1;
        place_cluster_refresh(c);
        struct place_request share = gpu_request(1000, 1, 300);
        struct place_decision d;
        assert_int_equal(place(c, &share, p, NULL, &d), 0);
        assert_int_equal(d.gpus[0], round == 0 ? 0 : 1);
        struct place_request whole = gpu_request(1000, 1, 1000);
        assert_int_equal(place(c, &whole, p, NULL, &d), round == 0 ? -1 : 0);
        if (round == 1)
            assert_int_equal(d.gpus[0], 0);
        /* The first card with enough left, not the first card: a 750-milli pod skips
         * card 0 (700 left under first-fit) for nothing and fails; a 600 one takes card
         * 0 under first-fit. */
        struct place_request big = gpu_request(1000, 1, 750);
        assert_int_equal(place(c, &big, p, NULL, &d), -1);
        if (round == 0) {
            struct place_request six = gpu_request(1000, 1, 600);
            assert_int_equal(place(c, &six, p, NULL, &d), 0);
            assert_int_equal(d.gpus[0], 0);
            assert_int_equal(c->nodes[0].gpus[0].milli_used, 900);
        }
        place_cluster_free(c);
    }
}

/* The node comes from kube-scheduler's default scores, which do not see the GPUs:
 * LeastAllocated on CPU and memory plus BalancedAllocation, the request counted. Two
 * equal nodes: the first 500-milli pod goes to node 0 (tie, lowest rank), the second to
 * node 1, less allocated by CPU and memory (score by hand: ⌊7000·100/8000⌋ = 87 for CPU,
 * ⌊7168·100/8192⌋ = 87 for memory, fit 87; fractions 0.125 and 0.125, balance 100), so
 * the two half cards stay on two nodes where best fit pairs them on one card. */
static void test_dra_firstfit_node_score(void **state)
{
    (void)state;
    for (int round = 0; round < 2; round++) {
        enum place_policy p = round == 0 ? PLACE_POLICY_DRA_FIRSTFIT : PLACE_POLICY_BESTFIT;
        struct place_cluster *c = cluster_of(2, 2, 8000, 8192);
        struct place_request r = gpu_request(1000, 1, 500);
        struct place_decision d;
        assert_int_equal(place(c, &r, p, NULL, &d), 0);
        assert_int_equal(d.gpus[0], 0);
        struct place_request again = gpu_request(1000, 1, 500);
        int node = place(c, &again, p, NULL, &d);
        assert_int_equal(node, round == 0 ? 1 : 0);
        assert_int_equal(d.gpus[0], 0);
        if (round == 0)
            assert_int_equal(d.score, 87 + 100);
        place_cluster_free(c);
    }
    /* Unbalanced: node 0 has half its CPU taken (fit ⌊(40 + 90) / 2⌋ = 65, fractions 0.6
     * and 0.1, balance 75: 140) against an empty node 1 (90 + 100 = 190). */
    struct place_cluster *c = cluster_of(2, 1, 10000, 10000);
    c->nodes[0].cpu_used = 5000;
    place_cluster_refresh(c);
    struct place_request r = gpu_request(1000, 1, 100);
    r.mem_mib = 1000;
    resolve(c, &r);
    struct place_decision d;
    struct vg_err err = {0};
    c->nodes[1].cpu_used = 5000; /* both busy: each scores 140, node 0 wins the tie */
    place_cluster_refresh(c);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, NULL, &d, &err), 0);
    assert_int_equal(d.node, 0);
    assert_int_equal(d.score, 140);
    c->nodes[1].cpu_used = 0;
    place_cluster_refresh(c);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, NULL, &d, &err), 0);
    assert_int_equal(d.node, 1);
    assert_int_equal(d.score, 190);
    place_cluster_free(c);
}

/* Several cards: the first ones in device order, with no NUMA preference (vgpu keeps them
 * on one NUMA node when it can); with numa_bind (a matchAttribute constraint) the first
 * combination whose cards share the NUMA node. */
static void test_dra_firstfit_multi_gpu(void **state)
{
    (void)state;
    for (int bind = 0; bind < 2; bind++) {
        struct place_cluster *c = cluster_of(1, 4, 64000, 65536);
        for (int g = 0; g < 4; g++)
            c->nodes[0].gpus[g].numa = (uint8_t)(g / 2);
        c->nodes[0].gpus[0].milli_used = 500;
        c->nodes[0].gpus[0].tenants = 1;
        place_cluster_refresh(c);
        struct place_request r = gpu_request(1000, 2, 1000);
        r.numa_bind = bind == 1;
        struct place_decision d;
        struct vg_err err = {0};
        resolve(c, &r);
        assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, NULL, &d, &err), 0);
        assert_int_equal(d.gpu_count, 2);
        assert_int_equal(d.gpus[0], bind ? 2 : 1);
        assert_int_equal(d.gpus[1], bind ? 3 : 2);
        /* vgpu's own GPU choice keeps the pair on NUMA node 1 either way. */
        assert_int_equal(place_decide(c, &r, PLACE_POLICY_BESTFIT, NULL, &d, &err), 0);
        assert_int_equal(d.gpus[0], 2);
        assert_int_equal(d.gpus[1], 3);
        /* Three cards bound to one NUMA node: none has three free. */
        r.gpu_count = 3;
        assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, NULL, &d, &err),
                         bind ? -ENOSPC : 0);
        if (!bind) {
            assert_int_equal(d.gpus[0], 1);
            assert_int_equal(d.gpus[2], 3);
        }
        place_cluster_free(c);
    }
}

/* dra-default: the node vgpu's default picks (the extender's prioritize), the cards
 * first-fit inside it, whatever card default would have taken. */
static void test_dra_default_node_then_first_fit(void **state)
{
    (void)state;
    struct place_mix m;
    place_mix_init(&m);
    struct place_mix_type types[] = {
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 300,
         .model_mask = UINT64_MAX,
         .weight = 3},
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 2},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_int_equal(place_mix_add(&m, &types[i]), 0);
    struct place_cluster *c = cluster_of(3, 2, 16000, 65536);
    c->nodes[2].gpus[1].milli_used = 700; /* node 2: card 1 has exactly 300 left */
    c->nodes[2].gpus[1].tenants = 1;
    place_cluster_refresh(c);
    struct place_context ctx = {.mix = &m};
    struct place_request r = gpu_request(1000, 1, 300);
    resolve(c, &r);
    struct place_decision def, dra;
    struct vg_err err = {0};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DEFAULT, &ctx, &def, &err), 0);
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_DEFAULT, &ctx, &dra, &err), 0);
    assert_int_equal(def.node, 2); /* default closes the 300-milli gap */
    assert_int_equal(def.gpus[0], 1);
    assert_int_equal(dra.node, def.node);
    assert_int_equal(dra.gpus[0], 0); /* the allocator takes the first card */
    assert_int_equal(dra.milli, 300);
    assert_int_equal(place_allocate(c, &r, &dra, &err), 0);
    assert_int_equal(c->nodes[2].gpus[0].milli_used, 300);
    /* Like default, it needs a mix. */
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_DEFAULT, NULL, &dra, &err), -EINVAL);
    place_cluster_free(c);
    place_mix_clear(&m);
}

/* kube-scheduler scores only the first numFeasibleNodesToFind feasible nodes from where its
 * previous filter pass stopped. 250 nodes: 50 − 250/125 = 48 %, 120 nodes. Nodes 0-9 have
 * no CPU left, node 200 is empty, the rest half used: the first pass walks nodes 0-129 and
 * never sees node 200, the second walks 130-249 and takes it, the third starts at 0 again. */
static void test_dra_k8s_sample(void **state)
{
    (void)state;
    assert_int_equal(place_k8s_nodes_to_find(50, 0), 50);
    assert_int_equal(place_k8s_nodes_to_find(99, 0), 99);
    assert_int_equal(place_k8s_nodes_to_find(100, 0), 100); /* 50 % of 100, at least 100 */
    assert_int_equal(place_k8s_nodes_to_find(250, 0), 120);
    assert_int_equal(place_k8s_nodes_to_find(1213, 0), 497);  /* the openb GPU nodes: 41 % */
    assert_int_equal(place_k8s_nodes_to_find(5000, 0), 500);  /* 10 % */
    assert_int_equal(place_k8s_nodes_to_find(10000, 0), 500); /* at least 5 % */
    assert_int_equal(place_k8s_nodes_to_find(1000, 20), 200);
    assert_int_equal(place_k8s_nodes_to_find(1000, 5), 100);
    assert_int_equal(place_k8s_nodes_to_find(1000, 100), 1000);

    struct place_cluster *c = cluster_of(250, 1, 8000, 8192);
    for (int i = 0; i < 250; i++)
        c->nodes[i].cpu_used = i < 10 ? 8000 : i == 200 ? 0 : 4000;
    place_cluster_refresh(c);
    struct place_request r = gpu_request(1000, 1, 500);
    resolve(c, &r);
    struct place_decision d;
    struct vg_err err = {0};
    struct place_context all = {0};
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, &all, &d, &err), 0);
    assert_int_equal(d.node, 200);
    struct place_k8s_sample ks = {0};
    struct place_context ctx = {.k8s_sample = &ks};
    const int expect_node[] = {10, 200, 10};
    const size_t expect_next[] = {130, 0, 130};
    for (int pass = 0; pass < 3; pass++) {
        assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, &ctx, &d, &err), 0);
        assert_int_equal(d.node, expect_node[pass]);
        assert_int_equal(ks.next, expect_next[pass]);
    }
    /* percentageOfNodesToScore 100: every node, as without the sample. */
    struct place_k8s_sample every = {.percentage = 100};
    ctx.k8s_sample = &every;
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_DRA_FIRSTFIT, &ctx, &d, &err), 0);
    assert_int_equal(d.node, 200);
    assert_int_equal(every.next, 0); /* walked all 250 */
    /* Other policies ignore it. */
    ks.next = 0;
    ctx.k8s_sample = &ks;
    assert_int_equal(place_decide(c, &r, PLACE_POLICY_BESTFIT, &ctx, &d, &err), 0);
    assert_int_equal(ks.next, 0);
    place_cluster_free(c);
}

/* A node mask restricts the decision to its nodes, and a memo of per-node verdicts gives
 * the same decisions as deciding from scratch, across allocations, releases and changes
 * of request shape. */
static void test_node_mask_and_memo(void **state)
{
    (void)state;
    static const enum place_policy policies[] = {
        PLACE_POLICY_DOTPROD, PLACE_POLICY_CLUSTERING, PLACE_POLICY_PACKING, PLACE_POLICY_BESTFIT,
        PLACE_POLICY_BINPACK, PLACE_POLICY_SPREAD,     PLACE_POLICY_FGD,     PLACE_POLICY_DEFAULT};
    /* fgd and default use the memo under a fixed mix (memo_mix). */
    struct place_mix mix;
    place_mix_init(&mix);
    const struct place_mix_type types[] = {{.cpu_milli = 1000,
                                            .gpu_count = 1,
                                            .gpu_milli = 250,
                                            .model_mask = UINT64_MAX,
                                            .weight = 5},
                                           {.cpu_milli = 1000,
                                            .gpu_count = 1,
                                            .gpu_milli = 1000,
                                            .model_mask = UINT64_MAX,
                                            .weight = 3},
                                           {.cpu_milli = 1000,
                                            .gpu_count = 2,
                                            .gpu_milli = 1000,
                                            .model_mask = UINT64_MAX,
                                            .weight = 2}};
    for (size_t t = 0; t < 3; t++)
        assert_int_equal(place_mix_add(&mix, &types[t]), 0);
    for (size_t pi = 0; pi < sizeof policies / sizeof policies[0]; pi++) {
        struct place_cluster *a = cluster_of(70, 4, 64000, 262144);
        struct place_cluster *b = cluster_of(70, 4, 64000, 262144);
        uint64_t mask[2] = {0, 0};
        for (size_t i = 0; i < 70; i++)
            if (i % 3 != 1)
                mask[i / 64] |= (uint64_t)1 << (i % 64);
        /* Odd policies: one memo, shapes in runs; even ones: three memos, shapes
         * interleaved (each shape keeps its own). */
        struct place_memo memos[3];
        size_t memo_count = pi % 2 ? 1 : 3;
        for (size_t m = 0; m < 3; m++)
            assert_int_equal(place_memo_init(&memos[m], 70), 0);
        struct place_context with = {.gpu_order = PLACE_GPU_SPREAD,
                                     .node_mask = mask,
                                     .memo = memos,
                                     .memo_count = memo_count,
                                     .mix = &mix,
                                     .memo_mix = true};
        struct place_context without = {
            .gpu_order = PLACE_GPU_SPREAD, .node_mask = mask, .mix = &mix};
        struct place_request reqs[60];
        struct place_decision da[60], db[60];
        struct vg_err err = {0};
        for (int k = 0; k < 60; k++) {
            /* Runs of one shape (memo hits), then another (memo cleared); or in turn. */
            int shape = memo_count == 1 ? (k / 5) % 3 : k % 3;
            reqs[k] = gpu_request(1000, shape == 2 ? 2 : 1, shape == 0 ? 250 : 1000);
            resolve(a, &reqs[k]);
            int ra = place_decide(a, &reqs[k], policies[pi], &with, &da[k], &err);
            int rb = place_decide(b, &reqs[k], policies[pi], &without, &db[k], &err);
            assert_int_equal(ra, rb);
            if (ra < 0)
                continue;
            assert_memory_equal(&da[k], &db[k], sizeof da[k]);
            assert_true(da[k].node % 3 != 1); /* masked out */
            assert_int_equal(place_allocate(a, &reqs[k], &da[k], &err), 0);
            for (size_t m = 0; m < 3; m++)
                place_memo_forget(&memos[m], (size_t)da[k].node);
            assert_int_equal(place_allocate(b, &reqs[k], &db[k], &err), 0);
            if (k % 7 == 6) { /* give one back */
                int j = k - 3;
                if (da[j].node >= 0 && place_release(a, &reqs[j], &da[j], &err) == 0) {
                    for (size_t m = 0; m < 3; m++)
                        place_memo_forget(&memos[m], (size_t)da[j].node);
                    assert_int_equal(place_release(b, &reqs[j], &db[j], &err), 0);
                    da[j].node = db[j].node = -1;
                }
            }
        }
        uint64_t hits = 0, misses = 0;
        for (size_t m = 0; m < 3; m++) {
            hits += memos[m].hits;
            misses += memos[m].misses;
        }
        assert_true(hits > misses);
        /* An empty mask: nothing fits. */
        uint64_t none[2] = {0, 0};
        struct place_context empty = {.node_mask = none, .memo = memos, .mix = &mix};
        struct place_decision d;
        assert_int_equal(place_decide(a, &reqs[0], policies[pi], &empty, &d, &err), -ENOSPC);
        for (size_t m = 0; m < 3; m++)
            place_memo_free(&memos[m]);
        place_memo_free(&memos[0]); /* safe twice */
        place_cluster_free(a);
        place_cluster_free(b);
    }
    place_mix_clear(&mix);
}

/* ---- allocation failures ---- */

#define TORTURE_PODS 40

struct torture_trace {
    int rc[TORTURE_PODS];
    struct place_decision d[TORTURE_PODS];
};

/* A whole scheduling run from nothing: cluster (70 nodes, so the node table grows), mix,
 * FGD's cache, a memo, then pods of three shapes under fgd and default. 0 with the
 * verdicts in *t, or the -ENOMEM an out-of-memory step reported (everything freed). */
static int torture_run(struct torture_trace *t)
{
    memset(t, 0, sizeof *t);
    struct vg_err err = {0};
    struct place_cluster *c = place_cluster_new();
    if (c == NULL)
        return -ENOMEM;
    struct place_mix mix;
    place_mix_init(&mix);
    struct place_frag_cache fc = {0};
    struct place_memo memo = {0};
    int rc = 0;
    for (int i = 0; i < 70 && rc == 0; i++) {
        char name[32];
        assert_true(vg_snprintf(name, sizeof name, "node-%d", i) > 0);
        rc = place_cluster_add_node(c, name, 64000, 262144, 4, i % 3 ? "V100" : "T4", 16384, &err);
        if (rc >= 0) {
            assert_int_equal(rc, i);
            rc = 0;
        } else {
            assert_int_equal(rc, -ENOMEM);
            assert_non_null(strstr(err.msg, "out of memory"));
            assert_int_equal(c->node_count, (size_t)i); /* the nodes before it are intact */
        }
    }
    const struct place_mix_type types[] = {
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 250,
         .model_mask = UINT64_MAX,
         .weight = 5},
        {.cpu_milli = 4000, .gpu_count = 1, .gpu_milli = 600, .model_mask = 1, .weight = 2},
        {.cpu_milli = 1000,
         .gpu_count = 1,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 3},
        {.cpu_milli = 1000,
         .gpu_count = 2,
         .gpu_milli = 1000,
         .model_mask = UINT64_MAX,
         .weight = 2},
    };
    for (size_t k = 0; k < sizeof types / sizeof types[0] && rc == 0; k++)
        rc = place_mix_add(&mix, &types[k]);
    if (rc == 0)
        rc = place_frag_cache_init(&fc, c->node_count);
    if (rc == 0)
        rc = place_memo_init(&memo, c->node_count);
    if (rc == 0) {
        struct place_context ctx = {
            .mix = &mix, .frag_cache = &fc, .memo = &memo, .memo_count = 1, .memo_mix = true};
        for (int k = 0; k < TORTURE_PODS; k++) {
            int shape = k % 3;
            struct place_request r = gpu_request(1000 + 500 * (uint64_t)(k % 4), shape == 2 ? 2 : 1,
                                                 shape == 0 ? 250 + 50 * (uint32_t)(k % 5) : 1000);
            resolve(c, &r);
            enum place_policy p = k % 2 ? PLACE_POLICY_FGD : PLACE_POLICY_DEFAULT;
            t->rc[k] = place_decide(c, &r, p, &ctx, &t->d[k], &err);
            if (t->rc[k] == 0) {
                assert_int_equal(place_allocate(c, &r, &t->d[k], &err), 0);
                place_memo_forget(&memo, (size_t)t->d[k].node);
                place_frag_cache_reset(&fc);
            }
        }
    }
    place_memo_free(&memo);
    place_frag_cache_free(&fc);
    place_mix_clear(&mix);
    place_cluster_free(c);
    return rc;
}

/* The n-th allocation fails, for n = 1, 2, ... until a run allocates without failing.
 * Each failure is either reported as -ENOMEM by the step that needed the memory, or
 * absorbed (FGD's index, the memo's share table) without changing a single verdict. */
static void test_allocation_failures(void **state)
{
    (void)state;
    static struct torture_trace ref, got;
    assert_int_equal(torture_run(&ref), 0);
    int placed = 0;
    for (int k = 0; k < TORTURE_PODS; k++)
        placed += ref.rc[k] == 0;
    assert_int_equal(placed, TORTURE_PODS);
    unsigned reported = 0, absorbed = 0;
    for (unsigned long n = 1;; n++) {
        vg_mem_fail_nth(n);
        int rc = torture_run(&got);
        bool fired = vg_mem_fail_fired();
        if (rc == 0) {
            for (int k = 0; k < TORTURE_PODS; k++) {
                assert_int_equal(got.rc[k], ref.rc[k]);
                assert_memory_equal(&got.d[k], &ref.d[k], sizeof got.d[k]);
            }
        } else {
            assert_int_equal(rc, -ENOMEM);
            assert_true(fired);
        }
        if (!fired)
            break;
        if (rc == 0)
            absorbed++;
        else
            reported++;
    }
    /* cluster, two node-table sizes, mix, cache, memo; index and shares on the way. */
    print_message("%u failures reported, %u absorbed\n", reported, absorbed);
    assert_true(reported >= 6);
    assert_true(absorbed >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_feasibility_cpu_memory_boundaries),
        cmocka_unit_test(test_feasibility_gpu_share_boundary),
        cmocka_unit_test(test_feasibility_gpu_memory_boundary),
        cmocka_unit_test(test_feasibility_types_and_uuids),
        cmocka_unit_test(test_feasibility_health_slots_exclusive),
        cmocka_unit_test(test_feasibility_labels),
        cmocka_unit_test(test_numa_preference_and_binding),
        cmocka_unit_test(test_hami_defaults),
        cmocka_unit_test(test_request_resolve_rejects),
        cmocka_unit_test(test_scores_by_hand),
        cmocka_unit_test(test_hami_binpack_spread),
        cmocka_unit_test(test_fragmentation_measure),
        cmocka_unit_test(test_fgd_picks_gpu_by_fragmentation),
        cmocka_unit_test(test_random_is_deterministic_per_seed),
        cmocka_unit_test(test_ties_go_to_lowest_rank),
        cmocka_unit_test(test_allocate_release_round_trip),
        cmocka_unit_test(test_frag_cache),
        cmocka_unit_test(test_default_waste_by_hand),
        cmocka_unit_test(test_default_gaps_by_hand),
        cmocka_unit_test(test_default_model_pressure),
        cmocka_unit_test(test_default_cpu_scarce),
        cmocka_unit_test(test_no_fit_and_policy_names),
        cmocka_unit_test(test_dra_firstfit_card_order),
        cmocka_unit_test(test_dra_firstfit_node_score),
        cmocka_unit_test(test_dra_firstfit_multi_gpu),
        cmocka_unit_test(test_dra_default_node_then_first_fit),
        cmocka_unit_test(test_dra_k8s_sample),
        cmocka_unit_test(test_node_mask_and_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
