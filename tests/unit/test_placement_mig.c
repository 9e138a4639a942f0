/* Unit tests for the MIG placement choice (src/placement/mig.c): HAMi v2.10's rule as
 * modelled, vgpu's rule keeping room for the request mix, and the refusals of a placement
 * that cannot be made (unknown profile, outside the GPU, overlapping, refused lately). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "placement/mig.h"
#include "placement/placement.h"

/* An H100 80GB with the allowlist of HAMi's documentation: 1g.10gb, 2g.20gb, 3g.40gb,
 * 7g.80gb (memory and SMs as NVML reports them, docs/placement.md). */
static void h100(struct place_mig_gpu *g)
{
    memset(g, 0, sizeof *g);
    g->slices = 8;
    g->max_sms = 132;
    const struct place_mig_profile p[] = {
        {"1g.10gb", 9984, 16, 1, 0x7f},   /* starts 0..6 */
        {"2g.20gb", 20096, 32, 2, 0x15},  /* 0, 2, 4 */
        {"3g.40gb", 40448, 60, 4, 0x11},  /* 0, 4 */
        {"7g.80gb", 81152, 132, 8, 0x01}, /* 0 */
    };
    memcpy(g->profiles, p, sizeof p);
    g->profile_count = 4;
}

static int profile_of(const struct place_mig_gpu *g, const char *name)
{
    for (unsigned i = 0; i < g->profile_count; i++)
        if (strcmp(g->profiles[i].name, name) == 0)
            return (int)i;
    return -1;
}

static void test_check_gpu(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct vg_err err = {0};
    h100(&g);
    assert_int_equal(place_mig_gpu_check(&g, &err), 0);
    g.slices = 9;
    assert_int_equal(place_mig_gpu_check(&g, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "slices"));
    h100(&g);
    g.profiles[2].placements = 0x30; /* 3g.40gb at start 5 would end at slice 8 */
    assert_int_equal(place_mig_gpu_check(&g, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "3g.40gb"));
    h100(&g);
    g.slices = 4;
    assert_int_equal(place_mig_gpu_check(&g, &err), -EINVAL); /* 7g takes 8 of 4 */
}

static void test_hami_rule(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct place_mig_choice c;
    h100(&g);
    /* 9,000 MiB: the smallest profile, 1g, from the highest start. */
    assert_int_equal(place_mig_choose(&g, 9000, 0, PLACE_MIG_RULE_HAMI, NULL, 0, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "1g.10gb"));
    assert_int_equal(c.start, 6);
    /* 18,000 MiB: 2g from the lowest start. */
    assert_int_equal(place_mig_choose(&g, 18000, 0, PLACE_MIG_RULE_HAMI, NULL, 0, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "2g.20gb"));
    assert_int_equal(c.start, 0);
    /* Compute is not looked at: 9,000 MiB with 90 % of the SMs still gets a 1g. */
    assert_int_equal(place_mig_choose(&g, 9000, 90, PLACE_MIG_RULE_HAMI, NULL, 0, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "1g.10gb"));
    /* With 2g's starts taken it moves on to 3g at its highest free start. */
    g.used = place_mig_mask(0, 6);
    assert_int_equal(place_mig_choose(&g, 18000, 0, PLACE_MIG_RULE_HAMI, NULL, 0, NULL, &c),
                     -ENOSPC);
    assert_int_equal(c.why, PLACE_MIG_OCCUPIED);
    g.used = place_mig_mask(0, 2);
    assert_int_equal(place_mig_choose(&g, 18000, 0, PLACE_MIG_RULE_HAMI, NULL, 0, NULL, &c), 0);
    assert_int_equal(c.start, 2);
}

static void test_vgpu_rule_keeps_large_profiles(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct place_mig_choice c;
    h100(&g);
    /* The cluster asks small and half-GPU instances alike. */
    const struct place_mig_demand mix[] = {{9000, 0, 1}, {40000, 0, 1}};
    /* A 1g beside an existing one at slice 0 goes next to it, not where HAMi's rule puts
     * it (slice 6, which would close the 3g at 4 too). */
    g.used = place_mig_mask(0, 1);
    assert_int_equal(place_mig_choose(&g, 9000, 0, PLACE_MIG_RULE_VGPU, mix, 2, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "1g.10gb"));
    assert_true(c.start >= 1 && c.start <= 3);
    struct place_mig_choice h;
    assert_int_equal(place_mig_choose(&g, 9000, 0, PLACE_MIG_RULE_HAMI, mix, 2, NULL, &h), 0);
    assert_int_equal(h.start, 6);
    /* And its choice leaves a 3g.40gb placeable where HAMi's does not. */
    struct place_mig_gpu after = g, hami = g;
    after.used |= place_mig_mask(c.start, 1);
    hami.used |= place_mig_mask(h.start, 1);
    assert_true(place_mig_frag(&g, after.used, mix, 2) < place_mig_frag(&g, hami.used, mix, 2));
    assert_int_equal(place_mig_choose(&after, 40000, 0, PLACE_MIG_RULE_VGPU, mix, 2, NULL, &c), 0);
    assert_int_equal(c.start, 4);
    assert_int_equal(place_mig_choose(&hami, 40000, 0, PLACE_MIG_RULE_VGPU, mix, 2, NULL, &c),
                     -ENOSPC);
}

static void test_vgpu_rule_3g_leaves_room_for_2g(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct place_mig_choice c;
    h100(&g);
    const struct place_mig_demand mix[] = {{18000, 0, 1}, {40000, 0, 1}};
    assert_int_equal(place_mig_choose(&g, 40000, 0, PLACE_MIG_RULE_VGPU, mix, 2, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "3g.40gb"));
    assert_int_equal(c.start, 4);
    /* The slices left take two 2g.20gb; had it gone to 0, only one. */
    g.used = place_mig_mask(4, 4);
    assert_true(place_mig_frag(&g, g.used, mix, 2) <
                place_mig_frag(&g, place_mig_mask(0, 4), mix, 2));
}

/* default's learned mix of card shares, mapped onto the H100's profiles: shares the same
 * profiles serve fold into one demand, types for another model and types no profile serves
 * are left out, and the rule places by the mapped mix as by a mix of memory. */
static void test_learned_mix_mapped(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    h100(&g);
    uint64_t card = place_mig_card_mib(&g);
    assert_int_equal(card, 8 * 9984); /* the 1g's memory per slice, times 8 */
    struct place_mix mix;
    place_mix_init(&mix);
    const struct place_mix_type types[] = {
        {.gpu_count = 1, .gpu_milli = 100, .model_mask = UINT64_MAX, .weight = 3}, /* 1g */
        {.gpu_count = 1, .gpu_milli = 125, .model_mask = UINT64_MAX, .weight = 2}, /* 1g */
        {.gpu_count = 1, .gpu_milli = 250, .model_mask = UINT64_MAX, .weight = 5}, /* 2g */
        {.gpu_count = 1, .gpu_milli = 500, .model_mask = 0x2, .weight = 7},        /* 3g, model 1 */
        {.gpu_count = 2, .gpu_milli = 1000, .model_mask = UINT64_MAX, .weight = 1}, /* 7g */
        {.gpu_count = 0, .cpu_milli = 4000, .model_mask = UINT64_MAX, .weight = 9}, /* no GPU */
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        assert_int_equal(place_mix_add(&mix, &types[i]), 0);
    struct place_mig_demand d[8];
    size_t n = place_mig_mix_map(&g, card, 0, &mix, d, 8); /* model 0: not the 3g type's */
    assert_int_equal(n, 3);
    assert_int_equal(d[0].weight, 5); /* 100 and 125 milli: both a 1g */
    assert_true(d[0].mem_mib <= 9984 && d[0].mem_mib > 0);
    assert_int_equal(d[1].weight, 5);
    assert_true(d[1].mem_mib > 9984 && d[1].mem_mib <= 20096);
    assert_int_equal(d[2].weight, 1);
    assert_true(d[2].mem_mib > 40448);
    n = place_mig_mix_map(&g, card, 1, &mix, d, 8); /* model 1: the 3g type counts */
    assert_int_equal(n, 4);
    assert_int_equal(d[2].weight, 7);
    n = place_mig_mix_map(&g, card, 64, &mix, d, 2); /* every model; room for two */
    assert_int_equal(n, 2);
    /* A share past the card's memory: no profile serves it, nothing counts. */
    struct place_mix big;
    place_mix_init(&big);
    const struct place_mix_type huge = {
        .gpu_count = 1, .gpu_milli = 1000, .weight = 1, .model_mask = UINT64_MAX};
    assert_int_equal(place_mix_add(&big, &huge), 0);
    assert_int_equal(place_mig_mix_map(&g, 2 * card, 0, &big, d, 8), 0);
    place_mix_clear(&big);
    /* The 2g demand steers a 3g to start 4, as a mix of 18,000 MiB requests does. */
    n = place_mig_mix_map(&g, card, 0, &mix, d, 8);
    struct place_mig_choice c;
    assert_int_equal(place_mig_choose(&g, 40000, 0, PLACE_MIG_RULE_VGPU, d, n, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "3g.40gb"));
    assert_int_equal(c.start, 4);
    place_mix_clear(&mix);
}

/* An instance counted in the learned mix as the share of the card its memory is maps back
 * to a demand its own profile serves, and no smaller one. */
static void test_instance_share_round_trip(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    h100(&g);
    uint64_t card = place_mig_card_mib(&g);
    for (unsigned p = 0; p < g.profile_count; p++) {
        struct place_mix mix;
        place_mix_init(&mix);
        struct place_mix_type t = {.gpu_count = 1,
                                   .gpu_milli = place_mig_share_milli(g.profiles[p].mem_mib, card),
                                   .model_mask = UINT64_MAX,
                                   .weight = 1};
        assert_int_equal(place_mix_add(&mix, &t), 0);
        struct place_mig_demand d[4];
        assert_int_equal(place_mig_mix_map(&g, card, 0, &mix, d, 4), 1);
        assert_true(place_mig_fits(&g, p, d[0].mem_mib, 0, PLACE_MIG_RULE_VGPU));
        for (unsigned q = 0; q < g.profile_count; q++)
            if (g.profiles[q].size < g.profiles[p].size)
                assert_false(place_mig_fits(&g, q, d[0].mem_mib, 0, PLACE_MIG_RULE_VGPU));
        place_mix_clear(&mix);
    }
    assert_int_equal(place_mig_share_milli(90000, card), 1000);
    assert_int_equal(place_mig_share_milli(1, 0), 1000);
}

static void test_vgpu_rule_compute(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct place_mig_choice c;
    h100(&g);
    const struct place_mig_demand mix[] = {{9000, 0, 1}};
    /* 9,000 MiB with 40 % of the SMs: 1g (13 %) and 2g (25 %) are too small; 3g (46 %). */
    assert_int_equal(place_mig_choose(&g, 9000, 40, PLACE_MIG_RULE_VGPU, mix, 1, NULL, &c), 0);
    assert_int_equal(c.profile, profile_of(&g, "3g.40gb"));
    /* Nothing has 90,000 MiB. */
    assert_int_equal(place_mig_choose(&g, 90000, 0, PLACE_MIG_RULE_VGPU, mix, 1, NULL, &c),
                     -ENOSPC);
    assert_int_equal(c.why, PLACE_MIG_NO_PROFILE);
    assert_int_equal(c.profile, -1);
    assert_non_null(strstr(place_mig_why_text(c.why), "memory"));
}

static void test_table_matches(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    h100(&g);
    const struct place_mig_demand mix[] = {{9000, 0, 5}, {18000, 0, 2}, {80000, 0, 1}};
    double table[PLACE_MIG_STATES];
    place_mig_frag_table(&g, mix, 3, table);
    for (unsigned u = 0; u < PLACE_MIG_STATES; u++)
        assert_true(table[u] == place_mig_frag(&g, (uint8_t)u, mix, 3));
    /* A full GPU has nothing free to lose. An empty one loses, to the 9,000 MiB requests
     * (whose smallest profile, 1g, has no start at slice 7), slice 7; to the 18,000 MiB ones
     * (2g starts 0, 2, 4) slices 6 and 7; nothing to the whole-GPU ones. */
    assert_true(table[0xff] == 0);
    assert_true(table[0] > (5.0 * 1 + 2.0 * 2) / 8 - 1e-9 &&
                table[0] < (5.0 * 1 + 2.0 * 2) / 8 + 1e-9);
    /* Slice 7 alone free: no 1g or 2g start covers it, so every demand loses it. */
    assert_true(table[0x7f] == 1.0);
    /* The choice through the table is the choice without it. */
    for (unsigned u = 0; u < PLACE_MIG_STATES; u += 7) {
        struct place_mig_choice a, b;
        g.used = (uint8_t)u;
        int ra = place_mig_choose(&g, 9000, 0, PLACE_MIG_RULE_VGPU, mix, 3, table, &a);
        int rb = place_mig_choose(&g, 9000, 0, PLACE_MIG_RULE_VGPU, mix, 3, NULL, &b);
        assert_int_equal(ra, rb);
        assert_int_equal(a.profile, b.profile);
        assert_int_equal(a.start, b.start);
    }
}

static void test_never_overlaps(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    h100(&g);
    const struct place_mig_demand mix[] = {{9000, 0, 3}, {18000, 0, 1}, {40000, 0, 1}};
    for (int rule = 0; rule < 2; rule++)
        for (unsigned u = 0; u < PLACE_MIG_STATES; u++) {
            const uint64_t asks[] = {1, 9000, 18000, 40000, 80000};
            for (unsigned a = 0; a < 5; a++) {
                struct place_mig_choice c;
                g.used = (uint8_t)u;
                if (place_mig_choose(&g, asks[a], 0, (enum place_mig_rule)rule, mix, 3, NULL, &c) !=
                    0)
                    continue;
                const struct place_mig_profile *p = &g.profiles[c.profile];
                assert_int_equal(place_mig_mask(c.start, c.size) & g.used, 0);
                assert_true(p->placements & (1u << c.start));
                assert_true(p->mem_mib >= asks[a]);
                struct vg_err err = {0};
                assert_int_equal(place_mig_check(&g, p->name, c.start, &err), 0);
            }
        }
}

static void test_check_refuses_bad_placements(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct vg_err err = {0};
    h100(&g);
    assert_int_equal(place_mig_check(&g, "3g.40gb", 4, &err), 0);
    assert_int_equal(place_mig_check(&g, "5g.50gb", 0, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not one the GPU allows"));
    assert_int_equal(place_mig_check(&g, "1g.10gb", 8, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "outside"));
    assert_int_equal(place_mig_check(&g, "3g.40gb", 6, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "outside"));
    assert_int_equal(place_mig_check(&g, "3g.40gb", 2, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "cannot start"));
    g.used = place_mig_mask(5, 1);
    assert_int_equal(place_mig_check(&g, "3g.40gb", 4, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "overlaps"));
    g.used = 0;
    g.refused[profile_of(&g, "3g.40gb")] = 1u << 4;
    assert_int_equal(place_mig_check(&g, "3g.40gb", 4, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "refused"));
}

static void test_refused_placement_avoided(void **state)
{
    (void)state;
    struct place_mig_gpu g;
    struct place_mig_choice c;
    h100(&g);
    const struct place_mig_demand mix[] = {{40000, 0, 1}};
    int p3 = profile_of(&g, "3g.40gb");
    g.refused[p3] = 1u << 0;
    for (int rule = 0; rule < 2; rule++) {
        assert_int_equal(
            place_mig_choose(&g, 40000, 0, (enum place_mig_rule)rule, mix, 1, NULL, &c), 0);
        assert_false(c.profile == p3 && c.start == 0);
    }
    /* Both 3g starts refused, the 7g's slices partly taken: nothing, and the reason says
     * the node refused them. */
    g.refused[p3] = (1u << 0) | (1u << 4);
    g.used = 0;
    g.refused[profile_of(&g, "7g.80gb")] = 1u;
    assert_int_equal(place_mig_choose(&g, 40000, 0, PLACE_MIG_RULE_VGPU, mix, 1, NULL, &c),
                     -ENOSPC);
    assert_int_equal(c.why, PLACE_MIG_REFUSED);
    assert_non_null(strstr(place_mig_why_text(c.why), "mig-refused"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_gpu),
        cmocka_unit_test(test_hami_rule),
        cmocka_unit_test(test_vgpu_rule_keeps_large_profiles),
        cmocka_unit_test(test_vgpu_rule_3g_leaves_room_for_2g),
        cmocka_unit_test(test_learned_mix_mapped),
        cmocka_unit_test(test_instance_share_round_trip),
        cmocka_unit_test(test_vgpu_rule_compute),
        cmocka_unit_test(test_table_matches),
        cmocka_unit_test(test_never_overlaps),
        cmocka_unit_test(test_check_refuses_bad_placements),
        cmocka_unit_test(test_refused_placement_avoided),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
