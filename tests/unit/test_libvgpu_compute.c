/* The compute limiter's controller core in virtual time (compute_core.c): credit,
 * prediction, settlement, the PI trim, the burst rate and the board's overlap signals. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "libvgpu/compute.h"

#define MS INT64_C(1000000)
#define S  INT64_C(1000000000)

static struct vgc_params hard(int pct)
{
    return (struct vgc_params){
        .share_ppm = pct * 10000, .burst_ppm = pct * 10000, .mode = VGPU_COMPUTE_HARD};
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
    assert_int_equal(vgc_cap_ns(300000), 15 * MS);
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
    /* First sample, contended: nothing better is known yet, the interval is charged. */
    assert_int_equal(vgc_observe(p, k1, 3 * MS, false, -1), 3 * MS);
    /* A shorter interval is closer to the truth, contended or not. */
    assert_int_equal(vgc_observe(p, k1, 1 * MS, false, -1), 1 * MS);
    assert_int_equal(vgc_predict(p, k1, &known), 1 * MS);
    assert_true(known);
    /* Contended and longer: other contexts' slices are not charged... */
    assert_int_equal(vgc_observe(p, k1, 3 * MS, false, -1), 1 * MS);
    /* ...and a long run of inflated intervals barely moves the estimate. */
    for (int i = 0; i < 3 * VGC_PRED_WINDOW; i++)
        (void)vgc_observe(p, k1, 3 * MS, false, -1);
    int64_t e = vgc_predict(p, k1, &known);
    assert_true(e > 1 * MS && e < 1 * MS * 6 / 5);
    /* A kernel that really became slower is learned: at once from a sample alone... */
    assert_int_equal(vgc_observe(p, k1, 2 * MS, true, -1), 2 * MS);
    e = vgc_predict(p, k1, &known);
    assert_true(e > 1400000 && e <= 2 * MS);
    /* ...and, slowly, from contended ones too. */
    for (int i = 0; i < 40 * VGC_PRED_WINDOW; i++)
        (void)vgc_observe(p, k1, 4 * MS, false, -1);
    assert_int_equal(vgc_predict(p, k1, &known), 4 * MS);
    /* A long contended interval is charged its split of the round robin. */
    unsigned d3[6] = {3, 1, 1, 32, 1, 1};
    uint64_t k3 = vgc_key((void *)0x1000, d3);
    assert_int_equal(vgc_observe(p, k3, 40 * MS, false, 20 * MS), 20 * MS);
    assert_int_equal(vgc_predict(p, k3, &known), 20 * MS);
    assert_int_equal(vgc_observe(p, k3, 40 * MS, false, 60 * MS), 40 * MS); /* <= measured */
    /* A new key is guessed from recent launches. */
    int64_t g = vgc_predict(p, k2, &known);
    assert_false(known);
    assert_true(g > 0 && g <= 40 * MS);
    /* The table is a cache: thousands of keys never fail. */
    for (unsigned i = 0; i < 5000; i++) {
        unsigned d[6] = {i, 1, 1, 1, 1, 1};
        (void)vgc_observe(p, vgc_key((void *)0x2000, d), 10000, true, -1);
    }
    free(p);
}

/* The round-robin split of a long interval from the board's pending times. */
static void test_split(void **state)
{
    (void)state;
    struct vgc_view *a = calloc(2, sizeof *a), *b = a + 1;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        a->pend[i] = b->pend[i] = -1;
        a->bound[i] = b->bound[i] = (int32_t)VGC_PPM;
    }
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
    /* A slot that appeared or was taken over meanwhile counts for nothing. */
    b->pend[9] = 40 * MS;
    a->pend[11] = 50 * MS;
    b->pend[11] = 0;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 10 * MS) < 100000);
    /* A neighbour decided at 30 % (pending throughout, however it forged its pending
     * times) takes at most 30 % of the interval off the charge. */
    for (int i = 0; i < VGC_BOARD_SLOTS; i++)
        a->pend[i] = b->pend[i] = -1;
    a->pend[3] = 0;
    b->pend[3] = INT64_C(1) << 60;
    b->bound[3] = 300000;
    assert_true(llabs(vgc_board_split(a, b, 40 * MS) - 28 * MS) < 100000);
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

/* Credit a process earned while it waited for its turn stays above the ceiling for the
 * whole turn (every launch's refill and the control tick), not only for its first launch:
 * a 10 % container that waited 300 ms and then launches short kernels kept 5 ms of 30. */
static void test_kept_credit(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = hard(10);
    int64_t cap = vgc_cap_ns(100000), t = 10 * S;
    vgc_refill(&b, &p, t);
    p.kept_ns = 30 * MS; /* it waited 300 ms for its turn (of the last second) */
    vgc_refill(&b, &p, t + 1 * S);
    assert_int_equal(atomic_load(&b.credit_ns), cap + 30 * MS);
    /* Its next launches in the turn: each charged, the credit refilled, ticks run. */
    for (int i = 1; i <= 10; i++) {
        vgc_charge(&b, 1 * MS);
        vgc_settle(&b, 1 * MS, 1 * MS);
        vgc_tick(&b, &p, t + 1 * S + i * 100 * MS, 0);
        vgc_refill(&b, &p, t + 1 * S + i * 100 * MS);
    }
    /* 10 ms spent, 1 s x 10 % = 100 ms earned: still at the raised ceiling, none lost. */
    assert_int_equal(atomic_load(&b.credit_ns), cap + 30 * MS);
    atomic_store(&b.credit_ns, cap + 20 * MS);
    vgc_refill(&b, &p, t + 3 * S);
    assert_int_equal(atomic_load(&b.credit_ns), cap + 30 * MS);
    /* Nothing kept (idle by choice, or the credit ran out): the usual ceiling. */
    p.kept_ns = 0;
    vgc_refill(&b, &p, t + 4 * S);
    assert_int_equal(atomic_load(&b.credit_ns), cap);
}

/* Taking turns, the PI trim holds the rate at the share: every launch is then charged its
 * own GPU time, and a few long launches per tick would only make it follow noise (a 10 %
 * tenant with 20 ms kernels swung between 0.7 and 1.3 x its share). A second after the
 * last wait for a turn, it trims again. */
static void test_pi_off_in_turns(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = hard(10);
    int64_t t = 10 * S;
    assert_true(vgc_tick(&b, &p, t, 0));
    for (int i = 1; i <= 10; i++) {
        p.turn_wait_at = t + i * 100 * MS - 10 * MS;
        atomic_fetch_add(&b.busy_ns, (i % 2) * 20 * MS); /* one 20 ms kernel per 200 ms */
        atomic_fetch_add(&b.waited_ns, 1 * MS);
        assert_true(vgc_tick(&b, &p, t + i * 100 * MS, 0));
        assert_int_equal(vgc_rate(&b, &p), 100000);
    }
    assert_int_equal(atomic_load(&b.integral_ppm), 0);
    /* No turn waited for since: short of the share while waiting on the credit, it trims. */
    for (int i = 11; i <= 30; i++) {
        atomic_fetch_add(&b.busy_ns, 8 * MS);
        atomic_fetch_add(&b.waited_ns, 1 * MS);
        assert_true(vgc_tick(&b, &p, t + i * 100 * MS, 0));
    }
    assert_true(vgc_rate(&b, &p) > 100000);
}

static void test_burst_rate(void **state)
{
    (void)state;
    struct region_compute b;
    memset(&b, 0, sizeof b);
    struct vgc_params p = {.share_ppm = 300000, .burst_ppm = 1000000, .mode = VGPU_COMPUTE_BURST};
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

/* Turns: one holder at a time; a turn its holder stopped extending (killed) expires; what
 * a container earned while it waited for its turn is kept above the credit ceiling. */
static void test_turn(void **state)
{
    (void)state;
    struct vgc_board *b = calloc(1, sizeof *b);
    int64_t t = 100 * S;
    assert_true(vgc_turn_take(b, 11, t, t + VGC_TURN_GRACE_NS));
    assert_false(vgc_turn_take(b, 22, t + 1, t + 1 + VGC_TURN_GRACE_NS));
    assert_true(vgc_turn_take(b, 11, t + 2, t + 2 + VGC_TURN_GRACE_NS)); /* its own */
    atomic_store(&b->turn_waiters, 1);
    assert_false(vgc_turn_release(b, 22)); /* not 22's to give */
    uint32_t seq = atomic_load(&b->turn_seq);
    assert_true(vgc_turn_release(b, 11)); /* someone waits: wake them */
    assert_int_equal(atomic_load(&b->turn_seq), seq + 1);
    assert_true(vgc_turn_take(b, 22, t + 3, t + 3 + VGC_TURN_GRACE_NS));
    /* 22 dies holding it: held until the grace after its last extension, then free. */
    vgc_turn_extend(b, 22, t + 10 * MS + VGC_TURN_GRACE_NS);
    assert_false(vgc_turn_take(b, 11, t + 10 * MS + VGC_TURN_GRACE_NS - 1, 0));
    assert_true(vgc_turn_take(b, 11, t + 10 * MS + VGC_TURN_GRACE_NS, t + S));
    vgc_turn_extend(b, 22, t + 10 * S); /* the old holder cannot extend it back */
    assert_int_equal(atomic_load(&b->turn_until), t + S);
    /* A forged expiry far in the future counts as expired (a holder extends its turn
     * at most the grace ahead). */
    atomic_store(&b->turn, 99);
    atomic_store(&b->turn_until, INT64_MAX);
    assert_true(vgc_turn_take(b, 11, t + 2 * S, t + 2 * S + VGC_TURN_GRACE_NS));
    free(b);

    struct region_compute rc = {0};
    struct vgc_params p = {.share_ppm = 100000, .burst_ppm = 100000, .mode = VGPU_COMPUTE_HARD};
    vgc_refill(&rc, &p, 1 * S);
    vgc_refill_owed(&rc, &p, 2 * S, 30 * MS); /* 100 ms earned, 30 ms of it while waiting */
    assert_int_equal(atomic_load(&rc.credit_ns), vgc_cap_ns(100000) + 30 * MS);
    vgc_refill(&rc, &p, 3 * S);
    assert_int_equal(atomic_load(&rc.credit_ns), vgc_cap_ns(100000));
}

/* Every field of the container's budget forged (docs/security.md, "Compute budget and the
 * region's fields"): every read stays within the limits, nothing overflows, and the
 * process's own bucket holds a greedy tenant to its share whatever the region says. */
static void test_forged_budget(void **state)
{
    (void)state;
    const int64_t t = 1000 * S;
    struct vgc_params p = hard(30);
    struct region_compute b = {0};
    atomic_store(&b.rate_ppm, INT64_MAX);
    assert_int_equal(vgc_rate(&b, &p), 390000); /* the trim's top: 1.3 x the share */
    atomic_store(&b.rate_ppm, 1);
    assert_int_equal(vgc_rate(&b, &p), 210000); /* ... and its bottom */
    atomic_store(&b.rate_ppm, -1);
    assert_int_equal(vgc_rate(&b, &p), 300000);
    struct vgc_params burst = {
        .share_ppm = 300000, .burst_ppm = 600000, .mode = VGPU_COMPUTE_BURST};
    atomic_store(&b.rate_ppm, INT64_MAX);
    assert_int_equal(vgc_rate(&b, &burst), 600000);

    atomic_store(&b.credit_ns, INT64_MAX);
    assert_int_equal(vgc_credit(&b, &p), vgc_cap_ns(300000));
    assert_int_equal(vgc_wait_ns(&b, &p), 0);
    vgc_settle(&b, 2 * MS, 1 * MS); /* saturates: no wrap to a debt */
    assert_int_equal(atomic_load(&b.credit_ns), INT64_MAX);
    atomic_store(&b.credit_ns, INT64_MIN);
    vgc_charge(&b, 1 * MS); /* saturates: no wrap to a credit */
    assert_int_equal(atomic_load(&b.credit_ns), INT64_MIN);
    assert_int_equal(vgc_credit(&b, &p), -VGC_DEBT_MAX_NS);
    assert_true(vgc_wait_ns(&b, &p) > 0 && vgc_wait_ns(&b, &p) < INT64_MAX / 4);

    /* A refill time from the future adds nothing and starts again from now; one long
     * past (or negative) adds at most the ceiling. */
    atomic_store(&b.credit_ns, 0);
    atomic_store(&b.refill_at, INT64_MAX);
    vgc_refill(&b, &p, t);
    assert_int_equal(atomic_load(&b.credit_ns), 0);
    assert_int_equal(atomic_load(&b.refill_at), t);
    atomic_store(&b.refill_at, -1);
    vgc_refill(&b, &p, t);
    assert_int_equal(atomic_load(&b.credit_ns), vgc_cap_ns(300000));

    /* A tick time from the future, or counters that cannot be right: the tick runs and
     * starts a new window; the rate it sets stays within the trim's range. */
    atomic_store(&b.tick_at, INT64_MAX);
    assert_true(vgc_tick_due(&b, &p, t));
    assert_true(vgc_tick(&b, &p, t, 0));
    atomic_store(&b.busy_ns, INT64_MIN);
    atomic_store(&b.waited_ns, INT64_MAX);
    atomic_store(&b.tick_waited, INT64_MIN);
    atomic_store(&b.integral_ppm, INT64_MAX);
    atomic_store(&b.achieved_ppm, INT64_MIN);
    assert_true(vgc_tick(&b, &p, t + 100 * MS, 0));
    assert_true(vgc_rate(&b, &p) >= 210000 && vgc_rate(&b, &p) <= 390000);
    assert_true(atomic_load(&b.achieved_ppm) >= 0);

    /* A greedy tenant whose container budget is forged to a big one before every launch:
     * its own bucket admits 30 % of 10 s, the ceiling and one launch at most, and at
     * least 30 % of the time less one ceiling (it is not refused either). */
    struct region_compute own = {0};
    int64_t admitted = 0;
    for (int64_t now = t; now < t + 10 * S; now += 100000) {
        atomic_store(&b.credit_ns, 10 * S);
        atomic_store(&b.refill_at, now - 1000);
        atomic_store(&b.rate_ppm, VGC_PPM);
        if (vgc_gate(&b, &own, &p, now) == 0) {
            vgc_charge(&b, 1 * MS);
            vgc_charge(&own, 1 * MS);
            admitted += 1 * MS;
        }
    }
    assert_true(admitted <= 3 * S + vgc_cap_ns(300000) + 1 * MS);
    assert_true(admitted >= 3 * S - vgc_cap_ns(300000));
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

/* dir (a mkdtemp template): a new board directory as the device plugin makes it, GPU-1's
 * slot files named in files (the magic set, a slot file's size). */
static void board_dir_make(char *dir, const char *const *files, int n)
{
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/GPU-1", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/GPU-1/%s", dir, files[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        uint64_t magic = VGC_SLOT_MAGIC;
        fwrite(&magic, sizeof magic, 1, f);
        assert_int_equal(ftruncate(fileno(f), sizeof(struct vgc_slot_file)), 0);
        fclose(f);
    }
}

/* Removes what board_dir_make made and the GPU's board file. */
static void board_dir_remove(const char *dir, const char *const *files, int n)
{
    char path[256];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/GPU-1/%s", dir, files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/GPU-1", dir);
    rmdir(path);
    snprintf(path, sizeof path, "%s/GPU-1.board", dir);
    unlink(path);
    rmdir(dir);
}

/* A live resize's share on the board (the plugin's <name>.share link): a neighbour's bound
 * follows the link at the next scan; each state a plugin killed while replacing it can
 * leave (no link, a link under its temporary name, the link) gives exactly one share, and
 * a link that is not 1..100 leaves the slot file's. */
static void test_board_share_link(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgc-share-XXXXXX";
    const char *files[] = {"pod-a_main.30.slot", "pod-h_main.10.slot"};
    char link[256], tmp[256];
    board_dir_make(dir, files, 2);
    snprintf(link, sizeof link, "%s/GPU-1/pod-h_main.share", dir);
    snprintf(tmp, sizeof tmp, "%s/GPU-1/pod-h_main.share.tmp", dir);
    struct vg_err err = {0};
    struct vgc_bd *a = calloc(2, sizeof *a), *h = a + 1;
    assert_int_equal(vgc_bd_open(a, dir, "GPU-1", "pod-a_main", &err), 0);
    assert_int_equal(vgc_bd_open(h, dir, "GPU-1", "pod-h_main", &err), 0);
    int64_t t = 10 * S;
    int sh = vgc_bd_claim(h, 22, 2, t);
    assert_true(sh >= 0);
    vgc_bd_heartbeat(h, sh, VGC_PPM, VGC_PPM, t); /* it claims the whole GPU */
    assert_int_equal(vgc_bd_others_share(a, 0, t), 100000);
    /* Killed after making the link under its temporary name: the old share. */
    assert_int_equal(symlink("40", tmp), 0);
    vgc_bd_scan(a, t);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 100000);
    /* Renamed: the new one, the same neighbour (its file's mapping kept). */
    const void *map = a->p[0].map != NULL ? a->p[0].map : a->p[1].map;
    assert_int_equal(rename(tmp, link), 0);
    vgc_bd_scan(a, t);
    assert_int_equal(a->n, 2);
    assert_ptr_equal(a->p[0].map != NULL ? a->p[0].map : a->p[1].map, map);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 400000);
    /* Down again (a second resize): the bound follows it. */
    assert_int_equal(symlink("5", tmp), 0);
    assert_int_equal(rename(tmp, link), 0);
    vgc_bd_scan(a, t);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 50000);
    /* Targets that are no share leave the slot file's name in force. */
    const char *bad[] = {"0", "101", "040", "4x", "", "-5", "../../x", "1000"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        unlink(link);
        if (bad[i][0] != '\0')
            assert_int_equal(symlink(bad[i], link), 0);
        vgc_bd_scan(a, t);
        assert_int_equal(vgc_bd_others_share(a, 0, t), 100000);
    }
    /* A plain file by that name is no link: ignored too. */
    unlink(link);
    FILE *f = fopen(link, "w");
    assert_non_null(f);
    fputs("90", f);
    fclose(f);
    vgc_bd_scan(a, t);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 100000);
    unlink(link);
    int64_t ppm = 0;
    assert_int_equal(vgc_share_link_parse("100", &ppm), 0);
    assert_int_equal(ppm, VGC_PPM);
    assert_int_equal(vgc_share_link_parse("1", &ppm), 0);
    assert_int_equal(ppm, 10000);
    assert_int_equal(vgc_share_link_parse("00", &ppm), -EINVAL);
    assert_int_equal(ppm, 10000);
    board_dir_remove(dir, files, 2);
    free(a);
}

/* The device plugin's board: a slot file per container; a hostile neighbour's file is
 * bounded by its decided share, nonsense in it counts as absent. */
static void test_board_plugin(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgc-board-XXXXXX";
    const char *files[] = {"pod-a_main.30.slot", "pod-h_main.10.slot", "junk.slot"};
    char path[256];
    board_dir_make(dir, files, 3);
    struct vg_err err = {0};
    struct vgc_bd *a = calloc(2, sizeof *a), *h = a + 1;
    assert_int_equal(vgc_bd_open(a, dir, "GPU-1", "pod-a_main", &err), 0);
    assert_int_equal(vgc_bd_open(h, dir, "GPU-1", "pod-h_main", &err), 0);
    assert_true(a->plugin && a->own != NULL && h->own != NULL && a->own != h->own);
    assert_int_equal(a->n, 2); /* junk.slot is no slot file */
    int64_t t = 10 * S;
    int sa = vgc_bd_claim(a, 11, 1, t), sh = vgc_bd_claim(h, 22, 2, t);
    assert_true(sa >= 0 && sh >= 0);
    /* The hostile container claims the whole GPU and work pending since boot. */
    vgc_bd_heartbeat(h, sh, VGC_PPM, VGC_PPM, t);
    vgc_bd_set_pending(h, sh, true, 0);
    atomic_store(&h->own->procs[sh].heartbeat, t);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 100000); /* its decided 10 % */
    struct vgc_view v0, v1;
    vgc_bd_view(a, sa, t, &v0);
    assert_true(v0.others_pending);
    vgc_bd_view(a, sa, t + 40 * MS, &v1);
    /* A 40 ms interval "shared" with it is charged at least 90 % of it. */
    assert_true(vgc_board_split(&v0, &v1, 40 * MS) >= 36 * MS - 100000);
    /* Every process slot of its file filled: still 10 %. */
    for (int i = 0; i < VGC_CTR_PROCS; i++) {
        atomic_store(&h->own->procs[i].owner, 100 + (uint64_t)i);
        vgc_bd_heartbeat(h, i, VGC_PPM, VGC_PPM, t);
    }
    assert_int_equal(vgc_bd_others_share(a, 0, t), 100000);
    /* Nonsense counts as absent: a heartbeat from the future, a negative pending time, a
     * pending flag that is neither 0 nor 1. */
    struct vgc_slot_seen seen;
    struct vgc_board_slot *hs = &h->own->procs[sh];
    atomic_store(&hs->heartbeat, t + 3600 * S);
    assert_false(vgc_slot_read(hs, t, 100000, &seen));
    atomic_store(&hs->heartbeat, t);
    atomic_store(&hs->pend_ns, -1);
    assert_false(vgc_slot_read(hs, t, 100000, &seen));
    atomic_store(&hs->pend_ns, 0);
    atomic_store(&hs->pending, 7);
    assert_false(vgc_slot_read(hs, t, 100000, &seen));
    atomic_store(&hs->pending, 1);
    assert_true(vgc_slot_read(hs, t, 100000, &seen));
    assert_int_equal(seen.share_ppm, 100000);
    /* A container gone from the directory is dropped at the next scan. */
    snprintf(path, sizeof path, "%s/GPU-1/pod-h_main.10.slot", dir);
    unlink(path);
    vgc_bd_scan(a, t + VGC_SCAN_NS);
    assert_int_equal(vgc_bd_others_share(a, 0, t), 0);
    board_dir_remove(dir, files, 3);
    free(a);
}

/* Priority on the plugin's board: a container is high only when its file's name says so;
 * it is active while a high process has work pending or drained less than
 * VGC_PRIO_IDLE_NS ago; a low file that says anything, a future idle time, or a process
 * marked low hold nobody. */
static void test_priority_board(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgc-board-XXXXXX";
    const char *files[] = {"pod-l_main.100.slot", "pod-h_main.100.high.slot", "pod-f_main.30.slot"};
    board_dir_make(dir, files, 3);
    struct vg_err err = {0};
    struct vgc_bd *l = calloc(3, sizeof *l), *h = l + 1, *f = l + 2;
    assert_int_equal(vgc_bd_open(l, dir, "GPU-1", "pod-l_main", &err), 0);
    assert_int_equal(vgc_bd_open(h, dir, "GPU-1", "pod-h_main", &err), 0);
    assert_int_equal(vgc_bd_open(f, dir, "GPU-1", "pod-f_main", &err), 0);
    int64_t t = 10 * S, until;
    bool present;
    /* Nobody on the GPU yet: a high file without a live process holds nobody. */
    assert_false(vgc_bd_high_active(l, t, &present, &until));
    assert_false(present);
    int sl = vgc_bd_claim(l, 11, 1, t), sh = vgc_bd_claim(h, 22, 2, t),
        sf = vgc_bd_claim(f, 33, 3, t);
    assert_true(sl >= 0 && sh >= 0 && sf >= 0);
    /* The forger's low-named file: work pending, just drained, no low bits: nothing. */
    vgc_bd_set_pending(f, sf, true, t);
    vgc_bd_note_idle(f, t);
    atomic_store(&f->own->low_mask, 0);
    assert_false(vgc_bd_high_active(l, t, &present, &until));
    /* The high one, idle since long ago: present, not active. */
    vgc_bd_set_pending(h, sh, false, t);
    atomic_store(&h->own->idle_at, 0);
    assert_false(vgc_bd_high_active(l, t, &present, &until));
    assert_true(present);
    /* Work pending: active, no end known. */
    vgc_bd_set_pending(h, sh, true, t);
    assert_true(vgc_bd_high_active(l, t, &present, &until));
    assert_int_equal(until, 0);
    /* Its work predicted done at t + 3 ms: active until then and the idle interval, then
     * not, though its poller has not said so yet; a prediction far off is no end known. */
    vgc_bd_note_busy(h, t + 3 * MS);
    assert_true(vgc_bd_high_active(l, t, &present, &until));
    assert_int_equal(until, t + 3 * MS + VGC_PRIO_IDLE_NS);
    assert_false(vgc_bd_high_active(l, t + 3 * MS + VGC_PRIO_IDLE_NS, &present, &until));
    vgc_bd_note_busy(h, t - 5 * MS); /* an earlier end does not replace a later one */
    assert_true(vgc_bd_high_active(l, t + 3 * MS, &present, &until));
    atomic_store(&h->own->busy_until, t + 3600 * S);
    assert_true(vgc_bd_high_active(l, t, &present, &until));
    assert_int_equal(until, 0);
    atomic_store(&h->own->busy_until, 0);
    /* It drained at t: active until t + VGC_PRIO_IDLE_NS, then not. */
    vgc_bd_set_pending(h, sh, false, t);
    vgc_bd_note_idle(h, t);
    assert_true(vgc_bd_high_active(l, t + 1000, &present, &until));
    assert_int_equal(until, t + VGC_PRIO_IDLE_NS);
    assert_false(vgc_bd_high_active(l, t + VGC_PRIO_IDLE_NS, &present, &until));
    /* A drain time from the future is forged: absent, never a hold without end. */
    atomic_store(&h->own->idle_at, t + 3600 * S);
    assert_false(vgc_bd_high_active(l, t, &present, &until));
    /* Its process lowered by its environment: no longer high, pending or not. */
    vgc_bd_set_pending(h, sh, true, t);
    vgc_bd_mark_low(h, sh, true);
    for (unsigned i = 0; i < l->n; i++)
        assert_false(vgc_bd_id_high(l, i, 22));
    assert_false(vgc_bd_high_active(l, t, &present, &until));
    vgc_bd_mark_low(h, sh, false);
    assert_true(vgc_bd_high_active(l, t, &present, &until));
    /* The high container does not hold itself, and sees the others as low. */
    assert_false(vgc_bd_high_active(h, t, &present, &until));
    bool any_high = false;
    for (unsigned i = 0; i < l->n; i++)
        any_high |=
            vgc_bd_id_high(l, i, 22) && !vgc_bd_id_high(l, i, 11) && !vgc_bd_id_high(l, i, 33);
    assert_true(any_high);
    /* Stale (not heard from for VGC_STALE_NS): gone. */
    assert_false(vgc_bd_high_active(l, t + VGC_STALE_NS + 1, &present, &until));
    board_dir_remove(dir, files, 3);
    free(l);
}

/* The turn word is anyone's to write: a turn counts only when its holder's own slot file
 * confirms it, and what a container's turns keep a waiter waiting is bounded by its
 * decided share over any window. */
static void test_turn_confirm_and_allowance(void **state)
{
    (void)state;
    char dir[] = "/tmp/vgc-board-XXXXXX";
    const char *files[] = {"pod-a_main.30.slot", "pod-h_main.10.slot"};
    board_dir_make(dir, files, 2);
    struct vg_err err = {0};
    struct vgc_bd *a = calloc(2, sizeof *a), *h = a + 1;
    assert_int_equal(vgc_bd_open(a, dir, "GPU-1", "pod-a_main", &err), 0);
    assert_int_equal(vgc_bd_open(h, dir, "GPU-1", "pod-h_main", &err), 0);
    int64_t t = 10 * S;
    int sa = vgc_bd_claim(a, 11, 1, t), sh = vgc_bd_claim(h, 22, 2, t);
    assert_true(sa >= 0 && sh >= 0);
    struct vgc_slot_seen seen;
    /* A made-up id, and a live process that does not say it holds the turn: nobody's. */
    assert_int_equal(vgc_bd_turn_confirm(a, 999, true, t, &seen), -1);
    assert_int_equal(vgc_bd_turn_confirm(a, 22, true, t, &seen), -1);
    /* Named next, a live process counts without its bit. */
    int ph = vgc_bd_turn_confirm(a, 22, false, t, &seen);
    assert_true(ph >= 0);
    assert_int_equal(a->p[ph].bound_ppm, 100000);
    /* Its own file says it holds: confirmed, as the neighbour's peer entry. */
    vgc_bd_turn_mark(h, sh, true);
    assert_int_equal(vgc_bd_turn_confirm(a, 22, true, t, &seen), ph);
    /* A word that names nobody: the holder is found by its bit (never the finder itself). */
    uint64_t fid = 0;
    assert_int_equal(vgc_bd_turn_find(a, 11, 0, t, &fid, &seen), ph);
    assert_int_equal(fid, 22);
    assert_int_equal(vgc_bd_turn_find(a, 11, (unsigned)ph + 1, t, &fid, &seen), -1);
    assert_int_equal(vgc_bd_turn_find(a, 22, 0, t, &fid, &seen), -1);
    /* ... but the bit does not confirm another id in another slot, nor a dead process. */
    assert_int_equal(vgc_bd_turn_confirm(a, 11, true, t, &seen), -1);
    assert_int_equal(vgc_bd_turn_confirm(a, 22, true, t + VGC_STALE_NS + 1, &seen), -1);
    vgc_bd_turn_mark(h, sh, false);
    assert_int_equal(vgc_bd_turn_confirm(a, 22, true, t, &seen), -1);
    /* A slot claimed again starts without the dead owner's bit. */
    vgc_bd_turn_mark(h, sh, true);
    atomic_store(&h->own->procs[sh].heartbeat, t - VGC_RECLAIM_NS - 1);
    assert_int_equal(vgc_bd_claim(h, 33, 2, t), sh);
    assert_int_equal(atomic_load(&h->own->turn_held) >> sh & 1, 0);

    /* The allowance: a full bucket at first, refilled at the share plus slack. */
    struct vgc_allow al = {0};
    int64_t bound = 100000, burst = vgc_allow_burst(bound), rate = vgc_allow_rate(bound);
    assert_int_equal(burst, VGC_ALLOW_BURST_NS + VGC_ALLOW_BURST_SHARE_NS / 10);
    assert_int_equal(rate, 100000 + 25000 + VGC_ALLOW_SLACK_PPM);
    assert_int_equal(vgc_allow_charge(&al, bound, t, 0), burst);
    assert_true(vgc_allow_charge(&al, bound, t, burst) <= 0); /* spent at once */
    /* Over any window, at most rate x window + burst of waiting is allowed: a waiter
     * charged 1 ms at a time whenever allowed, for 20 s. */
    int64_t waited = 0;
    al = (struct vgc_allow){0};
    for (int64_t u = t; u < t + 20 * S; u += MS)
        if (vgc_allow_charge(&al, bound, u, 0) > 0) {
            (void)vgc_allow_charge(&al, bound, u, MS);
            waited += MS;
        }
    assert_true(waited <= 20 * S / 1000 * rate / 1000 + burst + MS);
    assert_true(waited >= 20 * S / 1000 * rate / 1000 - 2 * MS);
    /* A bucket never sinks below one window: a container past it earns it back. */
    al = (struct vgc_allow){0};
    assert_int_equal(vgc_allow_charge(&al, bound, t, 100 * S), -VGC_WINDOW_NS);
    /* Written nonsense in the share cannot widen it: the bound comes from the file name. */
    assert_int_equal(vgc_allow_rate(INT64_MAX), VGC_PPM);
    assert_int_equal(vgc_allow_rate(-5), VGC_ALLOW_SLACK_PPM);

    /* Seizing a disregarded turn: only from the holder seen. */
    struct vgc_board *b = calloc(1, sizeof *b);
    atomic_store(&b->turn, 0xbad);
    atomic_store(&b->turn_until, t + VGC_TURN_GRACE_NS / 2);
    assert_false(vgc_turn_take(b, 11, t, t + VGC_TURN_GRACE_NS)); /* looks honest */
    assert_false(vgc_turn_seize(b, 11, 0xbae, t + VGC_TURN_GRACE_NS));
    assert_true(vgc_turn_seize(b, 11, 0xbad, t + VGC_TURN_GRACE_NS));
    assert_int_equal(atomic_load(&b->turn), 11);
    assert_int_equal(atomic_load(&b->turn_until), t + VGC_TURN_GRACE_NS);
    free(b);

    board_dir_remove(dir, files, 2);
    free(a);
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
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_pi_trim),
        cmocka_unit_test(test_kept_credit),
        cmocka_unit_test(test_pi_off_in_turns),
        cmocka_unit_test(test_burst_rate),
        cmocka_unit_test(test_board),
        cmocka_unit_test(test_turn),
        cmocka_unit_test(test_turn_confirm_and_allowance),
        cmocka_unit_test(test_forged_budget),
        cmocka_unit_test(test_board_file),
        cmocka_unit_test(test_board_plugin),
        cmocka_unit_test(test_board_share_link),
        cmocka_unit_test(test_priority_board),
        cmocka_unit_test(test_virtual_tenant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
