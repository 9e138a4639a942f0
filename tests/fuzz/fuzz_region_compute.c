/* Fuzz target for the compute budget in the region (docs/security.md, "Compute budget and
 * the region's fields"): whatever any process of the container writes into the budget,
 * whenever it writes it, the GPU time the limiter lets one process start over any window
 * stays within what its read-only limits allow.
 *
 * It runs the limiter's budget code (compute_core.c) in virtual time, as compute.c runs
 * it: one greedy process (always a launch ready, at most two in flight, the GPU its own),
 * the container's tick, its own bucket's tick, the gate over both buckets, the charge at
 * launch, the settlement at the launch's end, and now and then a wait for its turn that
 * keeps credit (vgc_keep). Every 200 us of virtual time the input rewrites fields of the
 * budget with extremes (0, -1, 1, INT64_MIN, INT64_MAX, times around now, a big budget,
 * raw bytes). Checked: every read stays within the limits (vgc_rate, vgc_credit); a wait
 * is never negative; and the launches started in every window of 1 s hold at most
 * rate x 1 s + the credit ceiling + the most that can be kept + one launch, where rate is
 * the share (hard mode), or in burst mode 1 - others - VGC_BURST_MARGIN within the share ..
 * the burst ceiling (others: what the board shows of the other containers).
 *
 * Input: byte 0 the share (1 + b % 99 percent), byte 1 bit 0 burst mode, byte 2 the burst
 * ceiling above the share, byte 3 the kernel's length (1 + b, x 100 us), byte 4 the other
 * containers' use for burst mode (b x 4000 ppm); the rest, read in a loop, the forgeries:
 * per write one byte choosing the field (13: every field; 14: a wait for the turn of the
 * next byte's milliseconds; 15: nothing) and one choosing the value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libvgpu/compute.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define STEP_NS    INT64_C(50000)      /* the simulation's step */
#define FORGE_NS   INT64_C(200000)     /* the forger's period */
#define RUN_NS     INT64_C(3000000000) /* virtual time per input */
#define WIN_NS     INT64_C(1000000000)
#define MAX_LAUNCH (RUN_NS / 100000 + 8)

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_region_compute: %s\n", what);
        abort();
    }
}

struct input {
    const uint8_t *p;
    size_t n, at;
};

static uint8_t next(struct input *in)
{
    if (in->n == 0)
        return 0;
    uint8_t b = in->p[in->at];
    in->at = (in->at + 1) % in->n;
    return b;
}

static int64_t value(struct input *in, int64_t now)
{
    switch (next(in) % 12) {
    case 0:
        return 0;
    case 1:
        return -1;
    case 2:
        return 1;
    case 3:
        return INT64_MAX;
    case 4:
        return INT64_MIN;
    case 5:
        return now;
    case 6:
        return now + WIN_NS;
    case 7:
        return now - WIN_NS;
    case 8:
        return now - 100 * WIN_NS;
    case 9:
        return 10 * WIN_NS; /* a big budget: 10 s of credit */
    case 10:
        return VGC_PPM;
    default: {
        uint64_t v = 0;
        for (int i = 0; i < 8; i++)
            v = v << 8 | next(in);
        return (int64_t)v;
    }
    }
}

static _Atomic int64_t *field(struct region_compute *b, unsigned k)
{
    _Atomic int64_t *f[13] = {&b->credit_ns,    &b->refill_at,    &b->busy_ns,   &b->waited_ns,
                              &b->rate_ppm,     &b->tick_at,      &b->tick_busy, &b->tick_waited,
                              &b->integral_ppm, &b->achieved_ppm, &b->closed_n,  &b->closed_why,
                              &b->held_ns};
    return f[k];
}

/* The region's budget must be writable memory of its own type; the simulation's copy. */
static struct region_compute shared, own;
static int64_t starts[MAX_LAUNCH], costs[MAX_LAUNCH];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    struct vgc_params p = {0};
    p.share_ppm = (1 + data[0] % 99) * 10000;
    p.mode = (data[1] & 1) != 0 ? VGPU_COMPUTE_BURST : VGPU_COMPUTE_HARD;
    p.burst_ppm = p.share_ppm;
    if (p.mode == VGPU_COMPUTE_BURST)
        p.burst_ppm += (data[2] % (101 - p.share_ppm / 10000)) * 10000;
    const int64_t cost = (1 + data[3]) * INT64_C(100000);
    const int64_t others = data[4] * INT64_C(4000);
    struct input in = {data + 5, size - 5, 0};
    vg_fuzz_report(true);

    memset(&shared, 0, sizeof shared);
    memset(&own, 0, sizeof own);
    const int64_t t0 = INT64_C(1000000000000); /* a monotonic clock some 17 min after boot */
    /* Burst mode: what the process's own view of the board allows (others is constant). */
    int64_t rate = p.share_ppm;
    if (p.mode == VGPU_COMPUTE_BURST) {
        rate = VGC_PPM - others - VGC_BURST_MARGIN;
        rate = rate < p.share_ppm ? p.share_ppm : rate > p.burst_ppm ? p.burst_ppm : rate;
    }
    unsigned n = 0;          /* launches started */
    int64_t end[2] = {0, 0}; /* in flight: when each ends (0: free) */
    int64_t gpu_free = t0;   /* the GPU runs this process's launches one after another */
    int64_t t = t0, next_forge = t0;
    while (t < t0 + RUN_NS) {
        /* Settlements of launches that ended. */
        for (int k = 0; k < 2; k++)
            if (end[k] != 0 && end[k] <= t) {
                vgc_settle(&shared, cost, cost);
                vgc_settle(&own, cost, cost);
                end[k] = 0;
            }
        if (t >= next_forge) {
            next_forge += FORGE_NS;
            uint8_t op = next(&in) % 16;
            if (op < 13) {
                atomic_store(field(&shared, op), value(&in, t));
            } else if (op == 13) {
                int64_t v = value(&in, t);
                for (unsigned k = 0; k < 13; k++)
                    atomic_store(field(&shared, k), v);
            } else if (op == 14 && end[0] == 0 && end[1] == 0) {
                /* A wait for the turn: time passes, nothing launches, credit is kept. */
                int64_t w = next(&in) * INT64_C(1000000);
                t += w;
                next_forge = t;
                __atomic_store_n(&p.kept_ns, vgc_keep(&own, &p, w), __ATOMIC_RELAXED);
                __atomic_store_n(&p.turn_wait_at, t, __ATOMIC_RELAXED);
                vgc_refill(&shared, &p, t);
                vgc_refill(&own, &p, t);
                check(p.kept_ns >= 0 && p.kept_ns <= VGC_KEEP_MAX_NS / 1000 * p.share_ppm / 1000,
                      "kept more than the share's earnings allow");
            }
        }
        /* The launcher: as compute.c's throttle and vgc_begin. */
        while ((end[0] == 0 || end[1] == 0) && n < MAX_LAUNCH) {
            bool due = vgc_tick_due(&shared, &p, t);
            (void)vgc_own_tick(&own, &p, t, others);
            if (due)
                (void)vgc_tick(&shared, &p, t, others);
            int64_t r = vgc_rate(&shared, &p), c = vgc_credit(&shared, &p);
            check(r >= vgc_rate_min(&p) && r <= vgc_rate_max(&p), "a rate outside the limits");
            check(r >= 1 && r <= VGC_PPM, "a rate outside the GPU");
            check(c >= -VGC_DEBT_MAX_NS && c <= vgc_cap_for(&p), "a credit outside the limits");
            int64_t w = vgc_gate(&shared, &own, &p, t);
            check(w >= 0, "a negative wait");
            if (w > 0) {
                __atomic_store_n(&p.kept_ns, 0, __ATOMIC_RELAXED); /* spent */
                break;
            }
            vgc_charge(&shared, cost);
            vgc_charge(&own, cost);
            int k = end[0] == 0 ? 0 : 1;
            gpu_free = (gpu_free > t ? gpu_free : t) + cost;
            end[k] = gpu_free;
            starts[n] = t;
            costs[n] = cost;
            n++;
        }
        t += STEP_NS;
    }
    /* Every window of 1 s that starts at a launch. */
    const int64_t most = WIN_NS / 1000 * rate / 1000 + vgc_cap_ns(p.burst_ppm) +
                         VGC_KEEP_MAX_NS / 1000 * p.share_ppm / 1000 + cost;
    int64_t sum = 0;
    for (unsigned i = 0, j = 0; i < n; i++) {
        while (j < n && starts[j] < starts[i] + WIN_NS)
            sum += costs[j++];
        if (sum > most) {
            fprintf(stderr,
                    "share %lld ppm (%s, rate %lld): %lld ns started in 1 s from %lld, most %lld\n",
                    (long long)p.share_ppm, p.mode == VGPU_COMPUTE_BURST ? "burst" : "hard",
                    (long long)rate, (long long)sum, (long long)(starts[i] - t0), (long long)most);
            check(0, "more GPU time started in a window than the limits allow");
        }
        sum -= costs[i];
    }
    return 0;
}
