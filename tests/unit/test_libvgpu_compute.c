/* The compute limiter's controller core in virtual time (compute_core.c): credit,
 * prediction, settlement, the PI trim, the burst rate and the board's overlap signals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "libvgpu/compute.h"

#define MS INT64_C(1000000)
#define S  INT64_C(1000000000)

static struct vgc_params hard(int pct)
{
    return (struct vgc_params){pct * 10000, pct * 10000, VGPU_COMPUTE_HARD};
}

static void test_credit_and_deadline(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = hard(30);
    vgc_refill(&b, &p, 1 * S); /* first use: starts at zero */
    assert_int_equal(vgc_wait_ns(&b, &p), 0);
    vgc_charge(&b, 1 * MS);
    /* 1 ms of debt at 30 % is repaid in 3.333 ms: one exact deadline. */
    int64_t w = vgc_wait_ns(&b, &p);
    assert_true(w >= 3333333 && w <= 3333334);
    vgc_refill(&b, &p, 1 * S + w);
    assert_int_equal(vgc_wait_ns(&b, &p), 0);
    /* Idle time banks no more than the ceiling. */
    vgc_refill(&b, &p, 100 * S);
    assert_int_equal(atomic_load(&b.credit_ns), vgc_cap_ns(p.share_ppm));
    assert_int_equal(vgc_cap_ns(300000), 30 * MS);
    assert_int_equal(vgc_cap_ns(10000), VGC_CAP_MIN_NS);
}

static void test_settle(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    vgc_charge(&b, 1 * MS);
    vgc_settle(&b, 1 * MS, 3 * MS); /* it really took 3 ms: 2 ms more debt */
    assert_int_equal(atomic_load(&b.credit_ns), -3 * MS);
    assert_int_equal(atomic_load(&b.busy_ns), 3 * MS);
    vgc_settle(&b, 2 * MS, 0); /* a failed launch is refunded whole */
    assert_int_equal(atomic_load(&b.credit_ns), -1 * MS);
}

static void test_predictor(void **state)
{
    (void)state;
    struct vgc_pred *p = calloc(1, sizeof *p);
    vgc_pred_init(p);
    unsigned d1[6] = {1, 1, 1, 32, 1, 1}, d2[6] = {2, 1, 1, 32, 1, 1};
    uint64_t k1 = vgc_key((void *)0x1000, d1), k2 = vgc_key((void *)0x1000, d2);
    assert_int_not_equal(k1, k2);
    bool known = true;
    assert_int_equal(vgc_predict(p, k1, &known), VGC_DEFAULT_COST);
    assert_false(known);
    /* The first settled cost sets the estimate, later ones move it a quarter of the way. */
    vgc_pred_learn(p, k1, 4 * MS);
    assert_int_equal(vgc_predict(p, k1, &known), 4 * MS);
    assert_true(known);
    vgc_pred_learn(p, k1, 0);
    assert_int_equal(vgc_predict(p, k1, &known), 3 * MS);
    /* A kernel whose length varies is predicted about its mean. */
    for (int i = 0; i < 200; i++)
        vgc_pred_learn(p, k1, i % 2 ? 1 * MS : 3 * MS);
    int64_t e = vgc_predict(p, k1, &known);
    assert_true(e > 1 * MS && e < 3 * MS);
    /* A new key is guessed from recent launches. */
    int64_t g = vgc_predict(p, k2, &known);
    assert_false(known);
    assert_true(g > 0 && g <= 4 * MS);
    /* The table is a cache: thousands of keys never fail. */
    for (unsigned i = 0; i < 5000; i++) {
        unsigned d[6] = {i, 1, 1, 1, 1, 1};
        vgc_pred_learn(p, vgc_key((void *)0x2000, d), 10000);
    }
    free(p);
}

/* Settlement by busy period: however another context's time slices fall across the
 * launches of a period (inside one, between two), the launches together are charged the
 * split of the period's whole span, never less than zero each. */
static void test_period(void **state)
{
    (void)state;
    struct vgc_board *b = calloc(1, sizeof *b);
    struct vgc_view *v = calloc(3, sizeof *v);
    struct vgc_period *per = calloc(1, sizeof *per);
    int64_t t = 100 * S;
    int a = vgc_board_claim(b, 11, 1, t), c = vgc_board_claim(b, 22, 2, t);
    /* Alone: every launch is charged its own interval. */
    vgc_board_view(b, a, t, &v[0]);
    vgc_period_start(per, 1, t, &v[0]);
    vgc_board_view(b, a, t + 3 * MS, &v[1]);
    assert_int_equal(vgc_period_charge(per, &v[1], 1 * MS), 1 * MS);
    assert_int_equal(vgc_period_charge(per, &v[1], 3 * MS), 2 * MS);
    /* A neighbour pending throughout a 16 ms period of four 2 ms launches (a round robin
     * of 2 ms slices): launches 1 and 3 ran straight, 2 and 4 waited out its slices. */
    vgc_board_set_pending(b, c, true, t);
    vgc_board_view(b, a, t, &v[0]);
    vgc_period_start(per, 2, t, &v[0]);
    int64_t ends[4] = {2 * MS, 6 * MS, 8 * MS, 16 * MS}, sum = 0;
    for (int i = 0; i < 4; i++) {
        vgc_board_view(b, a, t + ends[i], &v[2]);
        int64_t ch = vgc_period_charge(per, &v[2], ends[i]);
        assert_true(ch >= 0);
        sum += ch;
    }
    /* half of 16 ms, whatever each launch was charged (the split rounds to 0.1 %) */
    assert_true(llabs(sum - 8 * MS) < 20000);
    /* A neighbour's time found afterwards not to have been pending comes off: the next
     * charge of the period makes up for it. */
    vgc_board_unpend(b, c, 8 * MS);
    vgc_board_view(b, a, t + 18 * MS, &v[2]);
    /* 18 ms with the neighbour pending 10 of them: 13 ms in all, 5 ms more. */
    assert_true(llabs(vgc_period_charge(per, &v[2], 18 * MS) + sum - 13 * MS) < 20000);
    free(per);
    free(v);
    free(b);
}

/* A container in debt waits for the credit to be back at zero and, while another context
 * has work pending, on up to a run (3/4 of the ceiling): it then runs a period that long. */
static void test_run(void **state)
{
    (void)state;
    struct region_compute rc;
    memset(&rc, 0, sizeof rc);
    struct vgc_params p = hard(30);
    assert_int_equal(vgc_run_ns(&rc, &p), vgc_cap_ns(300000) * 3 / 4);
    assert_int_equal(vgc_cap_ns(300000), 30 * MS);
    vgc_refill(&rc, &p, 1 * S);
    vgc_charge(&rc, 3 * MS);
    /* 3 ms of debt and a 22.5 ms run at 30 %: 85 ms. */
    int64_t w = vgc_run_wait_ns(&rc, &p);
    assert_true(w >= 85 * MS && w <= 85 * MS + 1);
    vgc_refill(&rc, &p, 1 * S + w);
    assert_int_equal(vgc_run_wait_ns(&rc, &p), 0);
    assert_true(atomic_load(&rc.credit_ns) <= vgc_cap_ns(300000)); /* a run fits the ceiling */
    /* The board tells whether another context has work pending, and counts going idle. */
    struct vgc_board *b = calloc(1, sizeof *b);
    int64_t t = 100 * S;
    int a = vgc_board_claim(b, 11, 1, t), c = vgc_board_claim(b, 22, 2, t);
    assert_false(vgc_board_others_pending(b, a, t));
    vgc_board_set_pending(b, a, true, t);
    assert_false(vgc_board_others_pending(b, a, t)); /* its own work does not count */
    vgc_board_set_pending(b, c, true, t);
    assert_true(vgc_board_others_pending(b, a, t));
    uint32_t seq = atomic_load(&b->idle_seq);
    vgc_board_set_pending(b, c, false, t + 1);
    assert_false(vgc_board_others_pending(b, a, t + 1));
    assert_int_equal(atomic_load(&b->idle_seq), seq + 1);
    free(b);
}

/* The round-robin split of a long interval from the board's pending times. */
static void test_split(void **state)
{
    (void)state;
    struct vgc_view *a = calloc(2, sizeof *a), *b = a + 1;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++)
        a->pend[i] = b->pend[i] = -1;
    /* Nobody else pending: all of it. */
    assert_int_equal(vgc_board_split(a, b, 40 * MS), 40 * MS);
    /* One other context pending throughout: half. */
    a->pend[3] = 100 * MS;
    b->pend[3] = 140 * MS;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 20 * MS) < 100000);
    /* Pending half the time: 3/4. */
    b->pend[3] = 120 * MS;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 30 * MS) < 100000);
    /* Three others pending throughout: a quarter. */
    b->pend[3] = 140 * MS;
    a->pend[5] = a->pend[7] = 0;
    b->pend[5] = b->pend[7] = 40 * MS;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 10 * MS) < 100000);
    /* A slot taken over meanwhile (its total went down) counts for nothing... */
    a->pend[11] = 50 * MS;
    b->pend[11] = 0;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 10 * MS) < 100000);
    /* ...one that appeared counts from its claim, where its total started at zero. */
    b->pend[9] = 40 * MS;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 8 * MS) < 100000);
    free(a);
}

static void test_pi_trim(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = hard(30);
    int64_t t = 10 * S;
    assert_true(vgc_tick(&b, &p, t, 0));
    assert_false(vgc_tick(&b, &p, t + 50 * MS, 0)); /* not due yet */
    /* The container waited (wanted more) but achieved only 27 %: the rate goes up. */
    for (int i = 1; i <= 20; i++) {
        atomic_fetch_add(&b.busy_ns, 27 * MS);
        atomic_fetch_add(&b.waited_ns, 1 * MS);
        assert_true(vgc_tick(&b, &p, t + i * 100 * MS, 0));
    }
    int64_t r = vgc_rate(&b, &p);
    assert_true(r > 300000);
    assert_true(r <= 390000); /* never above 1.3 x the share */
    /* Demand-limited (never waited): the loop holds still. */
    int64_t integral = atomic_load(&b.integral_ppm);
    for (int i = 21; i <= 30; i++) {
        atomic_fetch_add(&b.busy_ns, 5 * MS);
        assert_true(vgc_tick(&b, &p, t + i * 100 * MS, 0));
    }
    assert_int_equal(atomic_load(&b.integral_ppm), integral);
}

static void test_burst_rate(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = {300000, 1000000, VGPU_COMPUTE_BURST};
    assert_true(vgc_tick(&b, &p, 1 * S, 0));
    assert_true(vgc_tick(&b, &p, 1 * S + VGC_BURST_TICK_NS, 0));
    assert_int_equal(vgc_rate(&b, &p), 1000000 - VGC_BURST_MARGIN); /* alone: the idle GPU */
    assert_true(vgc_tick(&b, &p, 1 * S + 2 * VGC_BURST_TICK_NS, 500000));
    assert_int_equal(vgc_rate(&b, &p), 500000 - VGC_BURST_MARGIN); /* an owner came back */
    assert_true(vgc_tick(&b, &p, 1 * S + 3 * VGC_BURST_TICK_NS, 900000));
    assert_int_equal(vgc_rate(&b, &p), 300000); /* never below the share */
    /* The lower rate also lowers what was banked. */
    atomic_store(&b.credit_ns, 100 * MS);
    assert_true(vgc_tick(&b, &p, 1 * S + 4 * VGC_BURST_TICK_NS, 900000));
    assert_int_equal(atomic_load(&b.credit_ns), vgc_cap_ns(300000));
}

static void test_board(void **state)
{
    (void)state;
    struct vgc_board *b = calloc(1, sizeof *b);
    struct vgc_view *v = calloc(4, sizeof *v);
    int64_t t = 100 * S;
    int a = vgc_board_claim(b, 11, 1, t), c = vgc_board_claim(b, 22, 2, t);
    assert_true(a >= 0 && c >= 0 && a != c);
    vgc_board_view(b, a, t, &v[0]);
    assert_false(v[0].others_pending);
    vgc_board_set_pending(b, c, true, t + 1);
    vgc_board_view(b, a, t + 2, &v[1]);
    assert_true(v[1].others_pending);
    assert_int_not_equal(v[1].others_flips, v[0].others_flips);
    assert_int_equal(v[1].pend[c], 1);  /* pending for 1 ns so far */
    assert_int_equal(v[1].pend[a], -1); /* its own slot is not reported */
    vgc_board_set_pending(b, c, false, t + 3);
    vgc_board_view(b, a, t + 4, &v[2]);
    assert_false(v[2].others_pending);
    assert_int_not_equal(v[2].others_flips, v[1].others_flips); /* the interval was shared */
    assert_int_equal(v[2].pend[c], 2);
    /* Shares of other containers only, and only while fresh. */
    vgc_board_heartbeat(b, c, 400000, 0, t + 5);
    vgc_board_heartbeat(b, a, 300000, 0, t + 5);
    assert_int_equal(vgc_board_others_share(b, 1, t + 6), 400000);
    assert_int_equal(vgc_board_others_share(b, 2, t + 6), 300000);
    /* An owner that wants more than it gets claims its whole share. */
    vgc_board_heartbeat(b, c, 300000, 500000, t + 5);
    assert_int_equal(vgc_board_others_share(b, 1, t + 6), 500000);
    /* Processes of one container: their shares add up, the claim counts once. */
    int c2 = vgc_board_claim(b, 33, 2, t + 5);
    vgc_board_heartbeat(b, c2, 300000, 500000, t + 5);
    assert_int_equal(vgc_board_others_share(b, 1, t + 6), 600000);
    vgc_board_release(b, c2, 33);
    vgc_board_set_pending(b, c, true, t + 7);
    vgc_board_view(b, a, t + 7 + VGC_STALE_NS, &v[3]);
    assert_false(v[3].others_pending); /* dead owner */
    /* An abandoned slot is taken over; a live one never is. */
    for (int i = 0; i < VGC_BOARD_SLOTS - 2; i++)
        assert_true(vgc_board_claim(b, (uint64_t)(100 + i), 3, t + 8) >= 0);
    assert_int_equal(vgc_board_claim(b, 999, 3, t + 9), -1);
    assert_true(vgc_board_claim(b, 999, 3, t + 7 + VGC_RECLAIM_NS) >= 0);
    free(v);
    free(b);
}

static void test_board_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgc-board-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct vg_err err = {0};
    struct vgc_board *b1 = vgc_board_open(dir, "GPU-1234", &err);
    struct vgc_board *b2 = vgc_board_open(dir, "GPU-1234", &err);
    assert_non_null(b1);
    assert_non_null(b2);
    int s = vgc_board_claim(b1, 5, 1, 1 * S);
    assert_int_equal(atomic_load(&b2->slots[s].owner), 5); /* one shared file */
    assert_null(vgc_board_open(dir, "GPU-../x", &err));
    char path[128];
    snprintf(path, sizeof path, "%s/GPU-1234.board", dir);
    unlink(path);
    rmdir(dir);
}

/* A saturating tenant in virtual time: launches 1 ms kernels whenever the credit allows,
 * each settled at completion. Over 10 s it gets its share within 0.2 points. */
static void test_virtual_tenant(void **state)
{
    (void)state;
    int shares[] = {10, 30, 50, 90};
    for (unsigned k = 0; k < sizeof shares / sizeof shares[0]; k++) {
        struct region_compute b;
        memset(&b, 0, sizeof b);
        struct vgc_params p = hard(shares[k]);
        int64_t t = 1 * S, end = 11 * S, busy = 0, gpu_free = t;
        vgc_refill(&b, &p, t);
        while (t < end) {
            vgc_tick(&b, &p, t, 0);
            vgc_refill(&b, &p, t);
            int64_t w = vgc_wait_ns(&b, &p);
            if (w > 0) {
                atomic_fetch_add(&b.waited_ns, w);
                t += w;
                continue;
            }
            vgc_charge(&b, 1 * MS);
            int64_t start = t > gpu_free ? t : gpu_free;
            gpu_free = start + 1 * MS;
            vgc_settle(&b, 1 * MS, 1 * MS);
            busy += 1 * MS;
            t += 20000; /* launch overhead */
        }
        double got = 100.0 * (double)busy / (double)(end - 1 * S);
        assert_true(got > shares[k] - 0.2 && got < shares[k] + 0.2);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credit_and_deadline),
        cmocka_unit_test(test_settle),
        cmocka_unit_test(test_predictor),
        cmocka_unit_test(test_period),
        cmocka_unit_test(test_run),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_pi_trim),
        cmocka_unit_test(test_burst_rate),
        cmocka_unit_test(test_board),
        cmocka_unit_test(test_board_file),
        cmocka_unit_test(test_virtual_tenant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
