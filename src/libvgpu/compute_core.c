/* The compute limiter's controller core: budget, predictor, control tick and the board.
 * Pure functions of their arguments and the memory they are given (no clock, no CUDA),
 * so the unit tests run them in virtual time. See compute.h and docs/compute.md. */
#define _GNU_SOURCE
#include "libvgpu/compute.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/str.h"

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- budget ---- */

int64_t vgc_cap_ns(int64_t share_ppm)
{
    return max64(VGC_CAP_MIN_NS, VGC_CAP_NS / VGC_PPM * share_ppm);
}

static int64_t kept(const struct vgc_params *p)
{
    return max64(__atomic_load_n(&p->kept_ns, __ATOMIC_RELAXED), 0);
}

int64_t vgc_rate_min(const struct vgc_params *p)
{
    int64_t lo =
        p->mode == VGPU_COMPUTE_BURST ? p->share_ppm : p->share_ppm * VGC_TRIM_MIN_PPM / VGC_PPM;
    return clamp64(lo, 1, VGC_PPM);
}

int64_t vgc_rate_max(const struct vgc_params *p)
{
    int64_t hi =
        p->mode == VGPU_COMPUTE_BURST ? p->burst_ppm : p->share_ppm * VGC_TRIM_MAX_PPM / VGC_PPM;
    return clamp64(hi, vgc_rate_min(p), VGC_PPM);
}

int64_t vgc_cap_for(const struct vgc_params *p)
{
    return vgc_cap_ns(p->mode == VGPU_COMPUTE_BURST ? p->burst_ppm : p->share_ppm) + kept(p);
}

int64_t vgc_credit(struct region_compute *b, const struct vgc_params *p)
{
    return clamp64(atomic_load_explicit(&b->credit_ns, memory_order_relaxed), -VGC_DEBT_MAX_NS,
                   vgc_cap_for(p));
}

int64_t vgc_rate(struct region_compute *b, const struct vgc_params *p)
{
    int64_t r = atomic_load_explicit(&b->rate_ppm, memory_order_relaxed);
    if (r <= 0)
        r = p->share_ppm;
    return clamp64(r, vgc_rate_min(p), vgc_rate_max(p));
}

void vgc_refill(struct region_compute *b, const struct vgc_params *p, int64_t now)
{
    vgc_refill_owed(b, p, now, 0);
}

void vgc_refill_owed(struct region_compute *b, const struct vgc_params *p, int64_t now,
                     int64_t owed_ns)
{
    int64_t last = atomic_load_explicit(&b->refill_at, memory_order_relaxed);
    if (last == 0 || last > now + VGC_SKEW_NS) {
        /* First use: the budget starts empty, at zero. A refill time from the future can
         * only be forged: the budget goes on from now, with nothing added for it. */
        atomic_compare_exchange_strong(&b->refill_at, &last, now);
        return;
    }
    if (now <= last || !atomic_compare_exchange_strong(&b->refill_at, &last, now))
        return; /* another launch refilled up to (about) now */
    /* The ceiling is far below 10 windows' earnings; a forged time long past (or negative)
     * earns no more than that, and the credit stays within the ceiling. */
    int64_t dt = last < now - 10 * VGC_WINDOW_NS ? 10 * VGC_WINDOW_NS : now - last;
    int64_t add = dt * vgc_rate(b, p) / VGC_PPM;
    int64_t cap = vgc_cap_for(p) + max64(owed_ns, 0);
    int64_t c = atomic_load(&b->credit_ns), n;
    do
        n = min64(clamp64(c, -VGC_DEBT_MAX_NS, cap) + add, cap);
    while (!atomic_compare_exchange_weak(&b->credit_ns, &c, n));
}

/* *v += d, saturating at the type's ends (a region field may hold anything). */
static void add_sat(_Atomic int64_t *v, int64_t d)
{
    int64_t c = atomic_load_explicit(v, memory_order_relaxed), n;
    do {
        if (__builtin_add_overflow(c, d, &n))
            n = d > 0 ? INT64_MAX : INT64_MIN;
    } while (!atomic_compare_exchange_weak_explicit(v, &c, n, memory_order_relaxed,
                                                    memory_order_relaxed));
}

void vgc_charge(struct region_compute *b, int64_t cost_ns)
{
    add_sat(&b->credit_ns, -cost_ns);
}

void vgc_settle(struct region_compute *b, int64_t predicted_ns, int64_t actual_ns)
{
    if (predicted_ns != actual_ns)
        add_sat(&b->credit_ns, predicted_ns - actual_ns);
    if (actual_ns > 0)
        add_sat(&b->busy_ns, actual_ns);
}

int64_t vgc_wait_ns(struct region_compute *b, const struct vgc_params *p)
{
    int64_t c = vgc_credit(b, p);
    if (c >= 0)
        return 0;
    int64_t rate = vgc_rate(b, p);
    return (-c * VGC_PPM + rate - 1) / rate;
}

int64_t vgc_keep(struct region_compute *b, const struct vgc_params *p, int64_t waited_ns)
{
    /* In burst mode only the share's earnings are kept: the rest was the idle GPU's, and
     * a container that waited for the turn found it busy (a returning owner). */
    int64_t rate = min64(vgc_rate(b, p), p->share_ppm);
    int64_t cap = vgc_cap_ns(p->mode == VGPU_COMPUTE_BURST ? p->burst_ppm : p->share_ppm);
    int64_t carry = max64(vgc_credit(b, p) - cap, 0);
    int64_t most = VGC_KEEP_MAX_NS / 1000 * rate / 1000;
    return min64(clamp64(waited_ns, 0, VGC_KEEP_MAX_NS) / 1000 * rate / 1000 + carry, most);
}

bool vgc_own_tick(struct region_compute *own, const struct vgc_params *p, int64_t now,
                  int64_t others_ppm)
{
    if (p->mode != VGPU_COMPUTE_BURST)
        return false;
    int64_t at = atomic_load_explicit(&own->tick_at, memory_order_relaxed);
    if (at != 0 && at <= now + VGC_SKEW_NS && now - at < VGC_BURST_TICK_NS)
        return false;
    atomic_store(&own->tick_at, now);
    int64_t rate = clamp64(VGC_PPM - clamp64(others_ppm, 0, VGC_PPM) - VGC_BURST_MARGIN,
                           p->share_ppm, p->burst_ppm);
    atomic_store(&own->rate_ppm, clamp64(rate, 1, VGC_PPM));
    /* As the container's tick: a lower rate also lowers what may be banked (not what is
     * kept), or a borrower would bank the idle GPU's 50 ms while the owner is back. */
    int64_t cap = vgc_cap_ns(rate) + kept(p);
    int64_t c = atomic_load(&own->credit_ns);
    while (c > cap && !atomic_compare_exchange_weak(&own->credit_ns, &c, cap))
        ;
    return true;
}

bool vgc_tick_due(struct region_compute *b, const struct vgc_params *p, int64_t now)
{
    int64_t period = p->mode == VGPU_COMPUTE_BURST ? VGC_BURST_TICK_NS : VGC_TICK_NS;
    int64_t at = atomic_load_explicit(&b->tick_at, memory_order_relaxed);
    return at <= 0 || at > now + VGC_SKEW_NS || now - at >= period;
}

int64_t vgc_gate(struct region_compute *shared, struct region_compute *own,
                 const struct vgc_params *p, int64_t now)
{
    vgc_refill(shared, p, now);
    vgc_refill(own, p, now);
    return max64(vgc_wait_ns(shared, p), vgc_wait_ns(own, p));
}

/* PI gains: rate = share + KP x error + integral, integral += KI x error x dt. */
#define VGC_KP_PERMILLE 200
#define VGC_KI_PER_S    2

/* b - a for two counters read from the region, 0 when it is negative or overflows (a
 * forged counter). */
static int64_t grown(int64_t a, int64_t b)
{
    int64_t d;
    return __builtin_sub_overflow(b, a, &d) || d < 0 ? 0 : d;
}

bool vgc_tick(struct region_compute *b, const struct vgc_params *p, int64_t now, int64_t others_ppm)
{
    if (!vgc_tick_due(b, p, now))
        return false;
    int64_t at = atomic_load_explicit(&b->tick_at, memory_order_relaxed);
    if (!atomic_compare_exchange_strong(&b->tick_at, &at, now))
        return false;
    int64_t busy = atomic_load(&b->busy_ns);
    int64_t waited = atomic_load(&b->waited_ns);
    int64_t busy0 = atomic_exchange(&b->tick_busy, busy);
    int64_t waited0 = atomic_exchange(&b->tick_waited, waited);
    /* First tick, the container slept, or a tick time that cannot be right (from the
     * future, or not a time at all): start a new window. */
    if (at <= 0 || at >= now || now - at > VGC_WINDOW_NS)
        return true;
    int64_t dt = now - at;
    int64_t inst =
        clamp64(min64(grown(busy0, busy), 10 * VGC_WINDOW_NS) * (VGC_PPM / 1000) / (dt / 1000 + 1),
                0, VGC_PPM);
    int64_t ach = clamp64(atomic_load(&b->achieved_ppm), 0, VGC_PPM);
    ach += (inst - ach) * dt / VGC_WINDOW_NS;
    atomic_store(&b->achieved_ppm, ach);

    int64_t rate;
    if (p->mode == VGPU_COMPUTE_BURST) {
        rate = clamp64(VGC_PPM - clamp64(others_ppm, 0, VGC_PPM) - VGC_BURST_MARGIN, p->share_ppm,
                       p->burst_ppm);
    } else {
        int64_t lo = p->share_ppm * VGC_TRIM_MIN_PPM / VGC_PPM - p->share_ppm;
        int64_t hi = p->share_ppm * VGC_TRIM_MAX_PPM / VGC_PPM - p->share_ppm;
        int64_t integral = clamp64(atomic_load(&b->integral_ppm), lo, hi);
        int64_t corr = integral;
        int64_t turn_at = __atomic_load_n(&p->turn_wait_at, __ATOMIC_RELAXED);
        if (turn_at != 0 && now - turn_at < VGC_WINDOW_NS) {
            /* Taking turns: every launch is charged its own GPU time and what was earned
             * while waiting is kept, so there is no lateness to trim; a trim would only
             * follow the noise of a few long launches per window. */
            corr = integral = 0;
            atomic_store(&b->integral_ppm, 0);
        } else if (grown(waited0, waited) > 0) {
            /* The container wanted more than its share in this window: the error is
             * bias to trim. Otherwise it was demand-limited and the loop holds still. */
            int64_t err = p->share_ppm - inst;
            integral = clamp64(integral + err * VGC_KI_PER_S * dt / VGC_WINDOW_NS, lo, hi);
            atomic_store(&b->integral_ppm, integral);
            corr = integral + err * VGC_KP_PERMILLE / 1000;
        }
        rate = p->share_ppm + clamp64(corr, lo, hi);
    }
    atomic_store(&b->rate_ppm, clamp64(rate, 1, VGC_PPM));
    /* A lower rate also lowers what may be banked (not what is kept). */
    int64_t cap =
        vgc_cap_ns(min64(rate, p->mode == VGPU_COMPUTE_BURST ? p->burst_ppm : p->share_ppm)) +
        kept(p);
    int64_t c = atomic_load(&b->credit_ns);
    while (c > cap && !atomic_compare_exchange_weak(&b->credit_ns, &c, cap))
        ;
    return true;
}

/* ---- predictor ---- */

void vgc_pred_init(struct vgc_pred *p)
{
    memset(p, 0, sizeof *p);
}

uint64_t vgc_key(const void *fn, const unsigned dims[6])
{
    uint64_t h = (uint64_t)(uintptr_t)fn * UINT64_C(0x9e3779b97f4a7c15);
    for (int i = 0; i < 6; i++) {
        h ^= dims[i] + UINT64_C(0x632be59bd9b4e019) + (h << 6) + (h >> 2);
        h *= UINT64_C(0xff51afd7ed558ccd);
    }
    return h | 1;
}

#define VGC_PROBE 16

static unsigned home(uint64_t key)
{
    return (unsigned)((key * UINT64_C(0x9e3779b97f4a7c15)) >> 54) % VGC_PRED_SLOTS;
}

static const struct vgc_pred_entry *find(const struct vgc_pred *p, uint64_t key)
{
    unsigned h = home(key);
    for (unsigned i = 0; i < VGC_PROBE; i++) {
        const struct vgc_pred_entry *e = &p->e[(h + i) % VGC_PRED_SLOTS];
        if (e->key == key)
            return e;
        if (e->key == 0)
            return NULL;
    }
    return NULL;
}

int64_t vgc_predict(const struct vgc_pred *p, uint64_t key, bool *known)
{
    const struct vgc_pred_entry *e = find(p, key);
    *known = e != NULL;
    if (e != NULL)
        return e->est_ns;
    return p->recent_ns > 0 ? p->recent_ns : VGC_DEFAULT_COST;
}

int64_t vgc_predict_mean(const struct vgc_pred *p, uint64_t key)
{
    const struct vgc_pred_entry *e = find(p, key);
    return e != NULL ? e->mean_ns : 0;
}

static struct vgc_pred_entry *find_or_add(struct vgc_pred *p, uint64_t key)
{
    unsigned h = home(key);
    for (unsigned i = 0; i < VGC_PROBE; i++) {
        struct vgc_pred_entry *e = &p->e[(h + i) % VGC_PRED_SLOTS];
        if (e->key == key)
            return e;
        if (e->key == 0) {
            memset(e, 0, sizeof *e);
            e->key = key;
            return e;
        }
    }
    /* Neighbourhood full: the home slot is recycled (the table is a cache). */
    struct vgc_pred_entry *e = &p->e[h];
    memset(e, 0, sizeof *e);
    e->key = key;
    return e;
}

int64_t vgc_observe(struct vgc_pred *p, uint64_t key, int64_t measured_ns, bool alone,
                    int64_t split_ns)
{
    measured_ns = max64(measured_ns, 0);
    struct vgc_pred_entry *e = find_or_add(p, key);
    int64_t actual;
    if (!alone && measured_ns > VGC_LONG_NS && split_ns >= 0) {
        /* Long and contended: always inflated, so the split of the interval is the
         * measurement, and the estimate follows it (an average, not a minimum). */
        actual = min64(split_ns, measured_ns);
        e->est_ns = e->seen++ == 0 ? actual : e->est_ns + (actual - e->est_ns) / 4;
        e->win_n = 0;
    } else if (e->seen++ == 0 || measured_ns <= e->est_ns) {
        /* A shorter interval is always closer to the truth. */
        e->est_ns = measured_ns;
        actual = measured_ns;
    } else if (alone) {
        /* Nobody else ran: the truth, and a kernel that became slower is learned fast. */
        e->est_ns += (measured_ns - e->est_ns) / 2;
        actual = measured_ns;
    } else {
        /* Contended and longer than the estimate: other contexts' slices inflated it, or
         * the kernel became slower. Charge the estimate; let it rise slowly, by at most
         * 1/16 per window of VGC_PRED_WINDOW contended launches that were all longer. */
        actual = e->est_ns;
        e->win_min = e->win_n == 0 ? measured_ns : min64(e->win_min, measured_ns);
        if (++e->win_n >= VGC_PRED_WINDOW) {
            e->est_ns += min64(e->win_min - e->est_ns, e->est_ns / 16 + 1);
            e->win_n = 0;
        }
    }
    if (measured_ns <= e->est_ns)
        e->win_n = 0; /* the window counts only runs of longer intervals */
    e->mean_ns = e->seen == 1 ? actual : e->mean_ns + (actual - e->mean_ns) / 8;
    p->recent_ns = p->recent_ns == 0 ? actual : p->recent_ns + (actual - p->recent_ns) / 8;
    return actual;
}

/* ---- mappings a neighbour can truncate ----
 *
 * The turn file is writable by every limited container on its GPU, and a slot file by its
 * own container: either may truncate it, and a process touching its mapping past the new
 * end would die of SIGBUS. Every such mapping is registered here; libvgpu's SIGBUS handler
 * (vgc_guard_install) puts zero pages in place of a truncated one, which read as a free
 * turn and empty slots, and passes any other SIGBUS on as before. */
#define VGC_GUARDS (REGION_MAX_DEVICES * (VGC_BOARD_SLOTS + 2))
static struct {
    _Atomic uintptr_t start;
    _Atomic size_t len;
} guards[VGC_GUARDS];
static struct sigaction guard_prev;

static void guard_add(void *p, size_t len)
{
    for (int i = 0; i < VGC_GUARDS; i++) {
        uintptr_t free_start = 0;
        if (atomic_compare_exchange_strong(&guards[i].start, &free_start, (uintptr_t)p)) {
            atomic_store(&guards[i].len, len);
            return;
        }
    }
}

static void guard_del(void *p)
{
    for (int i = 0; i < VGC_GUARDS; i++)
        if (atomic_load(&guards[i].start) == (uintptr_t)p) {
            atomic_store(&guards[i].len, 0);
            atomic_store(&guards[i].start, 0);
        }
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    uintptr_t a = (uintptr_t)si->si_addr;
    for (int i = 0; i < VGC_GUARDS; i++) {
        uintptr_t start = atomic_load(&guards[i].start);
        size_t len = atomic_load(&guards[i].len);
        if (start != 0 && a >= start && a - start < len) {
            (void)mmap((void *)start, len, PROT_READ | PROT_WRITE,
                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            return; /* the access is made again, on zeros */
        }
    }
    if ((guard_prev.sa_flags & SA_SIGINFO) != 0 && guard_prev.sa_sigaction != NULL) {
        guard_prev.sa_sigaction(sig, si, uc);
    } else if (guard_prev.sa_handler != SIG_DFL && guard_prev.sa_handler != SIG_IGN) {
        guard_prev.sa_handler(sig);
    } else {
        (void)signal(SIGBUS, SIG_DFL); /* as it would have been without libvgpu */
        (void)raise(SIGBUS);
    }
}

void vgc_guard_install(void)
{
    static _Atomic int done;
    if (atomic_exchange(&done, 1) != 0)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGBUS, &sa, &guard_prev);
}

/* ---- board ---- */

/* Heard from within limit, and not from the future (a forged heartbeat). Monotonic times
 * are far from the int64 range, so now +- a limit cannot overflow. */
static bool fresh(const struct vgc_board_slot *s, int64_t now, int64_t limit)
{
    int64_t hb = atomic_load_explicit(&s->heartbeat, memory_order_relaxed);
    return hb > now - limit && hb < now + VGC_SKEW_NS;
}

static int claim_in(struct vgc_board_slot *slots, int n, uint64_t owner, uint64_t container,
                    int64_t now)
{
    for (int i = 0; i < n; i++) {
        struct vgc_board_slot *s = &slots[i];
        uint64_t cur = atomic_load(&s->owner);
        if (cur != 0 && fresh(s, now, VGC_RECLAIM_NS))
            continue;
        if (!atomic_compare_exchange_strong(&s->owner, &cur, owner))
            continue;
        atomic_store(&s->heartbeat, now);
        atomic_store(&s->container, container);
        atomic_store(&s->share_ppm, 0);
        atomic_store(&s->claim_ppm, 0);
        atomic_store(&s->pending, 0);
        atomic_store(&s->pend_ns, 0);
        atomic_fetch_add(&s->flips, 1);
        return i;
    }
    return -1;
}

int vgc_board_claim(struct vgc_board *b, uint64_t owner, uint64_t container, int64_t now)
{
    return claim_in(b->slots, VGC_BOARD_SLOTS, owner, container, now);
}

void vgc_board_release(struct vgc_board *b, int slot, uint64_t owner)
{
    if (slot < 0 || slot >= VGC_BOARD_SLOTS)
        return;
    struct vgc_board_slot *s = &b->slots[slot];
    atomic_store(&s->pending, 0);
    atomic_store(&s->share_ppm, 0);
    atomic_store(&s->claim_ppm, 0);
    atomic_fetch_add(&s->flips, 1);
    atomic_compare_exchange_strong(&s->owner, &owner, 0);
}

static void slot_set_pending(struct vgc_board_slot *s, bool pending, int64_t now)
{
    atomic_store(&s->heartbeat, now);
    bool was = atomic_load(&s->pending) != 0;
    if (pending && !was) {
        atomic_store(&s->pend_since, now);
    } else if (!pending && was) {
        int64_t since = atomic_load(&s->pend_since);
        if (now > since)
            atomic_fetch_add(&s->pend_ns, now - since);
    }
    atomic_store(&s->pending, pending ? 1u : 0u);
    atomic_fetch_add(&s->flips, 1);
}

void vgc_board_set_pending(struct vgc_board *b, int slot, bool pending, int64_t now)
{
    slot_set_pending(&b->slots[slot], pending, now);
}

int64_t vgc_board_pend(const struct vgc_board_slot *s, int64_t now)
{
    int64_t total = atomic_load(&s->pend_ns), since = atomic_load(&s->pend_since);
    if (total < 0 || total > now + VGC_SKEW_NS)
        return 0;
    if (atomic_load(&s->pending) != 0 && since >= 0 && now > since)
        total += now - since;
    return total;
}

bool vgc_slot_read(const struct vgc_board_slot *s, int64_t now, int64_t bound_ppm,
                   struct vgc_slot_seen *out)
{
    if (atomic_load_explicit(&s->owner, memory_order_acquire) == 0 || !fresh(s, now, VGC_STALE_NS))
        return false;
    uint32_t pending = atomic_load(&s->pending);
    int64_t pend = atomic_load(&s->pend_ns), since = atomic_load(&s->pend_since);
    /* Pending time accrues from when the slot was claimed: never negative, never more
     * than the clock has counted. */
    if (pending > 1 || pend < 0 || pend > now + VGC_SKEW_NS || since < 0 ||
        since > now + VGC_SKEW_NS)
        return false;
    if (pending != 0 && now > since)
        pend += now - since;
    bound_ppm = clamp64(bound_ppm, 0, VGC_PPM);
    out->container = atomic_load(&s->container);
    out->flips = atomic_load(&s->flips);
    out->pend = pend;
    out->pending = pending != 0;
    out->share_ppm = clamp64(atomic_load(&s->share_ppm), 0, bound_ppm);
    out->claim_ppm = clamp64((int64_t)atomic_load(&s->claim_ppm), 0, bound_ppm);
    return true;
}

int64_t vgc_board_split(const struct vgc_view *before, const struct vgc_view *after,
                        int64_t measured_ns)
{
    if (measured_ns <= 0)
        return 0;
    /* dist[x]: probability (x 1e6) that x other contexts are pending. */
    int64_t dist[VGC_BOARD_SLOTS + 1] = {VGC_PPM};
    unsigned n = 0;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        if (before->pend[i] < 0 || after->pend[i] < 0)
            continue;
        int64_t d = after->pend[i] - before->pend[i];
        if (d <= 0)
            continue;
        int64_t f = min64(d, measured_ns) * (VGC_PPM / 1000) / (measured_ns / 1000 + 1);
        /* In a round robin an entry pending a fraction f of the interval ran f/2 of it: a
         * neighbour counts for at most its own share of the GPU. */
        f = clamp64(f, 0, min64(VGC_PPM, 2 * (int64_t)after->bound[i]));
        n++;
        for (unsigned x = n; x > 0; x--)
            dist[x] = (dist[x] * (VGC_PPM - f) + dist[x - 1] * f) / VGC_PPM;
        dist[0] = dist[0] * (VGC_PPM - f) / VGC_PPM;
    }
    int64_t frac = 0; /* E[1 / (1 + X)], ppm */
    for (unsigned x = 0; x <= n; x++)
        frac += dist[x] / (int64_t)(1 + x);
    return measured_ns / 1000 * frac / (VGC_PPM / 1000);
}

static void slot_heartbeat(struct vgc_board_slot *s, int64_t share_ppm, int64_t claim_ppm,
                           int64_t now)
{
    atomic_store(&s->share_ppm, share_ppm);
    atomic_store(&s->claim_ppm, (uint32_t)clamp64(claim_ppm, 0, VGC_PPM));
    atomic_store(&s->heartbeat, now);
}

void vgc_board_heartbeat(struct vgc_board *b, int slot, int64_t share_ppm, int64_t claim_ppm,
                         int64_t now)
{
    slot_heartbeat(&b->slots[slot], share_ppm, claim_ppm, now);
}

static void view_clear(struct vgc_view *v)
{
    v->others_pending = false;
    v->others_pending_n = 0;
    v->others_flips = 0;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        v->pend[i] = -1;
        v->bound[i] = 0;
    }
}

/* Entry i of v from the n process slots at s (skip: the reader's own, or -1). */
static void view_entry(struct vgc_view *v, unsigned i, const struct vgc_board_slot *s, unsigned n,
                       int skip, int64_t bound, int64_t now)
{
    bool any = false, pending = false;
    int64_t pend = 0;
    for (unsigned k = 0; k < n; k++) {
        struct vgc_slot_seen ss;
        if ((int)k == skip || !vgc_slot_read(&s[k], now, bound, &ss))
            continue;
        any = true;
        pend += ss.pend;
        v->others_flips += ss.flips;
        pending = pending || ss.pending;
    }
    if (!any)
        return;
    v->pend[i] = pend;
    v->bound[i] = (int32_t)clamp64(bound, 0, VGC_PPM);
    if (pending) {
        v->others_pending = true;
        v->others_pending_n++;
    }
}

void vgc_board_view(const struct vgc_board *b, int slot, int64_t now, struct vgc_view *v)
{
    v->others_pending = false;
    v->others_pending_n = 0;
    v->others_flips = 0;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        v->pend[i] = -1;
        v->bound[i] = 0;
        /* Free slots (most of them) cost one load. */
        if (i != slot && atomic_load_explicit(&b->slots[i].owner, memory_order_relaxed) != 0)
            view_entry(v, (unsigned)i, &b->slots[i], 1, -1, VGC_PPM, now);
    }
}

/* What containers take or claim, for vgc_board_others_share. */
struct share_sum {
    unsigned n;
    uint64_t ids[VGC_BOARD_SLOTS];
    int64_t used[VGC_BOARD_SLOTS], claim[VGC_BOARD_SLOTS], bound[VGC_BOARD_SLOTS];
};

static void share_add(struct share_sum *sum, uint64_t id, const struct vgc_slot_seen *ss,
                      int64_t bound)
{
    unsigned k = 0;
    while (k < sum->n && sum->ids[k] != id)
        k++;
    if (k == sum->n) {
        if (sum->n == VGC_BOARD_SLOTS)
            return;
        sum->ids[k] = id;
        sum->used[k] = sum->claim[k] = 0;
        sum->bound[k] = clamp64(bound, 0, VGC_PPM);
        sum->n++;
    }
    sum->used[k] = min64(sum->used[k] + ss->share_ppm, sum->bound[k]);
    sum->claim[k] = max64(sum->claim[k], ss->claim_ppm);
}

static int64_t share_total(const struct share_sum *sum)
{
    int64_t total = 0;
    for (unsigned k = 0; k < sum->n; k++)
        total += max64(sum->used[k], sum->claim[k]);
    return min64(total, VGC_PPM);
}

int64_t vgc_board_others_share(const struct vgc_board *b, uint64_t container, int64_t now)
{
    struct share_sum sum = {0};
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        struct vgc_slot_seen ss;
        if (vgc_slot_read(&b->slots[i], now, VGC_PPM, &ss) && ss.container != container)
            share_add(&sum, ss.container, &ss, VGC_PPM);
    }
    return share_total(&sum);
}

/* ---- the device plugin's board: slot files ---- */

int vgc_slot_name_parse(const char *fname, char *name, size_t name_size, int64_t *share_ppm,
                        struct vg_err *err)
{
    return vgc_slot_name_parse_prio(fname, name, name_size, share_ppm, NULL, err);
}

int vgc_slot_name_parse_prio(const char *fname, char *name, size_t name_size, int64_t *share_ppm,
                             bool *high, struct vg_err *err)
{
    size_t len = strlen(fname);
    static const char suffix[] = ".slot", hi[] = ".high";
    if (len <= sizeof suffix - 1 || strcmp(fname + len - (sizeof suffix - 1), suffix) != 0)
        return vg_err_set(err, -EINVAL, "slot file \"%s\": not <name>.<percent>.slot", fname);
    len -= sizeof suffix - 1;
    bool is_high =
        len > sizeof hi - 1 && memcmp(fname + len - (sizeof hi - 1), hi, sizeof hi - 1) == 0;
    if (is_high)
        len -= sizeof hi - 1;
    size_t dot = len;
    while (dot > 0 && fname[dot - 1] != '.')
        dot--;
    if (dot < 2)
        return vg_err_set(err, -EINVAL, "slot file \"%s\": not <name>.<percent>.slot", fname);
    size_t nlen = dot - 1, plen = len - dot;
    if (nlen >= name_size || nlen >= VGC_NAME_MAX)
        return vg_err_set(err, -EINVAL, "slot file \"%s\": name longer than %d bytes", fname,
                          VGC_NAME_MAX - 1);
    for (size_t i = 0; i < nlen; i++) {
        char c = fname[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return vg_err_set(err, -EINVAL, "slot file \"%s\": bad character in the name", fname);
    }
    int64_t pct = 0;
    if (plen == 0 || plen > 3 || fname[dot] == '0')
        return vg_err_set(err, -EINVAL, "slot file \"%s\": share must be 1..100", fname);
    for (size_t i = dot; i < len; i++) {
        if (fname[i] < '0' || fname[i] > '9')
            return vg_err_set(err, -EINVAL, "slot file \"%s\": share must be 1..100", fname);
        pct = pct * 10 + (fname[i] - '0');
    }
    if (pct < 1 || pct > 100)
        return vg_err_set(err, -EINVAL, "slot file \"%s\": share must be 1..100", fname);
    memcpy(name, fname, nlen);
    name[nlen] = '\0';
    *share_ppm = pct * 10000;
    if (high != NULL)
        *high = is_high;
    return 0;
}

static uint64_t file_id(const struct stat *st)
{
    return ((uint64_t)st->st_dev << 40 ^ (uint64_t)st->st_ino << 1) | 1; /* never 0 */
}

/* Maps dir/fname (writable: the container's own); NULL when it is not a slot file. */
static struct vgc_slot_file *slot_map(const char *dir, const char *fname, bool writable,
                                      uint64_t *id)
{
    char path[sizeof((struct vgc_bd *)0)->dir + VGC_NAME_MAX + 16];
    if (vg_snprintf(path, sizeof path, "%s/%s", dir, fname) < 0)
        return NULL;
    int fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return NULL;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size == (off_t)sizeof(struct vgc_slot_file))
        m = mmap(NULL, sizeof(struct vgc_slot_file), writable ? PROT_READ | PROT_WRITE : PROT_READ,
                 MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return NULL;
    guard_add(m, sizeof(struct vgc_slot_file));
    *id = file_id(&st);
    return m;
}

int vgc_share_link_parse(const char *target, int64_t *share_ppm)
{
    int64_t pct = 0;
    size_t len = strlen(target);
    if (len == 0 || len > 3 || target[0] == '0')
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        if (target[i] < '0' || target[i] > '9')
            return -EINVAL;
        pct = pct * 10 + (target[i] - '0');
    }
    if (pct < 1 || pct > 100)
        return -EINVAL;
    *share_ppm = pct * 10000;
    return 0;
}

/* The share the device plugin set for container name after a live resize: its
 * <name>.share link in the directory of dfd (docs/compute.md "A resized share"); *bound is
 * kept when there is none or it is not 1..100. Only the plugin writes the directory. */
static void share_link_read(int dfd, const char *name, int64_t *bound)
{
    char link[VGC_NAME_MAX + 8], target[8];
    if (dfd < 0 || vg_snprintf(link, sizeof link, "%s" VGC_SHARE_SUFFIX, name) < 0)
        return;
    ssize_t n = readlinkat(dfd, link, target, sizeof target - 1);
    if (n <= 0)
        return;
    target[n] = '\0';
    (void)vgc_share_link_parse(target, bound);
}

/* One read of the board's directory: maps new neighbours, marks the known ones seen and
 * takes their share and priority from their names again (a resize changes the share). */
static bool scan_once(struct vgc_bd *bd)
{
    DIR *d = opendir(bd->dir);
    if (d == NULL)
        return false;
    for (unsigned i = 0; i < bd->n; i++)
        bd->p[i].seen = false;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char name[VGC_NAME_MAX];
        int64_t bound;
        bool high = false;
        struct vg_err ignored;
        if (e->d_name[0] == '.' ||
            vgc_slot_name_parse_prio(e->d_name, name, sizeof name, &bound, &high, &ignored) != 0)
            continue;
        share_link_read(dirfd(d), name, &bound);
        bool own = bd->own == NULL && bd->name[0] != '\0' && strcmp(name, bd->name) == 0;
        uint64_t id = 0;
        struct vgc_slot_file *f = slot_map(bd->dir, e->d_name, own, &id);
        if (f == NULL)
            continue;
        if (own) {
            if (atomic_load(&f->magic) != VGC_SLOT_MAGIC) {
                guard_del(f);
                munmap(f, sizeof *f);
                continue;
            }
            bd->own = f;
            bd->own_id = id;
        }
        unsigned k = 0, hole = bd->n;
        while (k < bd->n && (bd->p[k].slots == NULL || bd->p[k].id != id)) {
            if (bd->p[k].slots == NULL && hole == bd->n)
                hole = k;
            k++;
        }
        if (k < bd->n || (hole == bd->n && bd->n == VGC_BOARD_SLOTS)) {
            if (k < bd->n) {
                bd->p[k].seen = true;
                bd->p[k].bound_ppm = bound;
                bd->p[k].high = high;
            }
            if (!own) {
                guard_del(f);
                munmap(f, sizeof *f);
            }
            continue;
        }
        if (hole == bd->n)
            bd->n++;
        struct vgc_peer *p = &bd->p[hole];
        p->slots = f->procs;
        p->nslots = VGC_CTR_PROCS;
        p->bound_ppm = bound;
        p->high = high;
        p->id = id;
        p->map = id == bd->own_id ? NULL : f;
        p->seen = true;
        if (id == bd->own_id && !own) {
            guard_del(f);
            munmap(f, sizeof *f); /* the own file: its writable mapping serves */
        }
        if (id == bd->own_id)
            p->slots = bd->own->procs;
    }
    closedir(d);
    return true;
}

void vgc_bd_scan(struct vgc_bd *bd, int64_t now)
{
    if (!bd->plugin)
        return;
    bd->scanned_at = now;
    if (!scan_once(bd))
        return; /* nothing is dropped when the directory cannot be read */
    for (unsigned i = 0; i < bd->n; i++) {
        struct vgc_peer *p = &bd->p[i];
        if (p->slots == NULL || p->seen)
            continue;
        if (p->map != NULL) {
            guard_del(p->map);
            munmap(p->map, sizeof(struct vgc_slot_file));
        }
        memset(p, 0, sizeof *p);
    }
}

int vgc_bd_open(struct vgc_bd *bd, const char *dir, const char *uuid, const char *name,
                struct vg_err *err)
{
    memset(bd, 0, sizeof *bd);
    bd->shared = vgc_board_open(dir, uuid, err);
    if (bd->shared == NULL)
        return err->code < 0 ? err->code : -EIO;
    if (vg_snprintf(bd->dir, sizeof bd->dir, "%s/%s", dir, uuid) < 0)
        return 0;
    struct stat st;
    if (lstat(bd->dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return 0; /* no device plugin: the shared file's slots */
    bd->plugin = true;
    if (name != NULL && strlen(name) < sizeof bd->name)
        (void)vg_strlcpy(bd->name, name, sizeof bd->name);
    vgc_bd_scan(bd, 0);
    return 0;
}

static struct vgc_board_slot *bd_slot(struct vgc_bd *bd, int slot)
{
    return bd->plugin ? &bd->own->procs[slot] : &bd->shared->slots[slot];
}

int vgc_bd_claim(struct vgc_bd *bd, uint64_t owner, uint64_t container, int64_t now)
{
    if (!bd->plugin)
        return vgc_board_claim(bd->shared, owner, container, now);
    int slot =
        bd->own != NULL ? claim_in(bd->own->procs, VGC_CTR_PROCS, owner, container, now) : -1;
    vgc_bd_turn_mark(bd, slot, false); /* a dead process's bit is not the new owner's */
    return slot;
}

void vgc_bd_set_pending(struct vgc_bd *bd, int slot, bool pending, int64_t now)
{
    slot_set_pending(bd_slot(bd, slot), pending, now);
}

void vgc_bd_release(struct vgc_bd *bd, int slot, uint64_t owner)
{
    if (!bd->plugin) {
        vgc_board_release(bd->shared, slot, owner);
        return;
    }
    if (bd->own == NULL || slot < 0 || slot >= VGC_CTR_PROCS)
        return;
    struct vgc_board_slot *s = &bd->own->procs[slot];
    atomic_store(&s->pending, 0);
    atomic_fetch_add(&s->flips, 1);
    atomic_compare_exchange_strong(&s->owner, &owner, 0);
}

void vgc_bd_heartbeat(struct vgc_bd *bd, int slot, int64_t share_ppm, int64_t claim_ppm,
                      int64_t now)
{
    slot_heartbeat(bd_slot(bd, slot), share_ppm, claim_ppm, now);
}

void vgc_bd_view(const struct vgc_bd *bd, int slot, int64_t now, struct vgc_view *v)
{
    if (!bd->plugin) {
        vgc_board_view(bd->shared, slot, now, v);
        return;
    }
    view_clear(v);
    for (unsigned i = 0; i < bd->n; i++) {
        const struct vgc_peer *p = &bd->p[i];
        if (p->slots != NULL)
            view_entry(v, i, p->slots, p->nslots, p->map == NULL ? slot : -1, p->bound_ppm, now);
    }
}

int64_t vgc_bd_others_share(const struct vgc_bd *bd, uint64_t container, int64_t now)
{
    if (!bd->plugin)
        return vgc_board_others_share(bd->shared, container, now);
    struct share_sum sum = {0};
    for (unsigned i = 0; i < bd->n; i++) {
        const struct vgc_peer *p = &bd->p[i];
        if (p->slots == NULL || p->map == NULL)
            continue; /* a free entry, or this container's own file */
        for (unsigned k = 0; k < p->nslots; k++) {
            struct vgc_slot_seen ss;
            if (vgc_slot_read(&p->slots[k], now, p->bound_ppm, &ss))
                share_add(&sum, p->id, &ss, p->bound_ppm);
        }
    }
    return share_total(&sum);
}

/* ---- the turn's allowance ---- */

int64_t vgc_allow_rate(int64_t bound_ppm)
{
    bound_ppm = clamp64(bound_ppm, 0, VGC_PPM);
    return min64(VGC_PPM, bound_ppm + bound_ppm / 4 + VGC_ALLOW_SLACK_PPM);
}

int64_t vgc_allow_burst(int64_t bound_ppm)
{
    return VGC_ALLOW_BURST_NS +
           VGC_ALLOW_BURST_SHARE_NS / 1000 * clamp64(bound_ppm, 0, VGC_PPM) / (VGC_PPM / 1000);
}

int64_t vgc_allow_charge(struct vgc_allow *a, int64_t bound_ppm, int64_t now, int64_t waited_ns)
{
    int64_t burst = vgc_allow_burst(bound_ppm);
    if (a->at == 0) {
        a->tokens = burst;
        a->at = now;
    } else if (now > a->at) {
        /* Capped before the product: an idle peer's bucket is simply full. */
        int64_t dt = min64(now - a->at, 10 * VGC_WINDOW_NS);
        a->tokens = min64(burst, a->tokens + dt / 1000 * vgc_allow_rate(bound_ppm) / 1000);
        a->at = now;
    }
    /* Never further below zero than one window: a container past its allowance earns it
     * back within a bounded time, whatever one long wait charged. */
    a->tokens = max64(a->tokens - max64(waited_ns, 0), -VGC_WINDOW_NS);
    return a->tokens;
}

static const struct vgc_slot_file *peer_file(const struct vgc_peer *p)
{
    return (const struct vgc_slot_file *)(const void *)((const char *)p->slots -
                                                        offsetof(struct vgc_slot_file, procs));
}

int vgc_bd_turn_confirm(const struct vgc_bd *bd, uint64_t id, bool held, int64_t now,
                        struct vgc_slot_seen *seen)
{
    if (!bd->plugin || id == 0)
        return -1;
    for (unsigned i = 0; i < bd->n; i++) {
        const struct vgc_peer *p = &bd->p[i];
        if (p->slots == NULL)
            continue;
        uint64_t bits = held ? atomic_load(&peer_file(p)->turn_held) : ~UINT64_C(0);
        for (unsigned k = 0; k < p->nslots && k < 64; k++)
            if ((bits >> k & 1) != 0 && atomic_load(&p->slots[k].owner) == id &&
                vgc_slot_read(&p->slots[k], now, p->bound_ppm, seen))
                return (int)i;
    }
    return -1;
}

int vgc_bd_turn_find(const struct vgc_bd *bd, uint64_t self, unsigned from, int64_t now,
                     uint64_t *id, struct vgc_slot_seen *seen)
{
    if (!bd->plugin)
        return -1;
    for (unsigned i = from; i < bd->n; i++) {
        const struct vgc_peer *p = &bd->p[i];
        if (p->slots == NULL)
            continue;
        uint64_t bits = atomic_load(&peer_file(p)->turn_held);
        for (unsigned k = 0; k < p->nslots && k < 64 && bits != 0; k++) {
            uint64_t o = atomic_load(&p->slots[k].owner);
            if ((bits >> k & 1) != 0 && o != 0 && o != self &&
                vgc_slot_read(&p->slots[k], now, p->bound_ppm, seen)) {
                *id = o;
                return (int)i;
            }
        }
    }
    return -1;
}

void vgc_bd_turn_mark(struct vgc_bd *bd, int slot, bool held)
{
    if (!bd->plugin || bd->own == NULL || slot < 0 || slot >= VGC_CTR_PROCS)
        return;
    uint64_t bit = UINT64_C(1) << slot;
    if (held)
        atomic_fetch_or(&bd->own->turn_held, bit);
    else
        atomic_fetch_and(&bd->own->turn_held, ~bit);
}

/* ---- priority ---- */

bool vgc_bd_proc_high(const struct vgc_bd *bd, unsigned i, unsigned slot)
{
    if (!bd->plugin || i >= bd->n || bd->p[i].slots == NULL || !bd->p[i].high || slot >= 64)
        return false;
    return (atomic_load(&peer_file(&bd->p[i])->low_mask) >> slot & 1) == 0;
}

bool vgc_bd_id_high(const struct vgc_bd *bd, unsigned i, uint64_t id)
{
    if (!bd->plugin || i >= bd->n || bd->p[i].slots == NULL || id == 0)
        return false;
    for (unsigned k = 0; k < bd->p[i].nslots; k++)
        if (atomic_load(&bd->p[i].slots[k].owner) == id)
            return vgc_bd_proc_high(bd, i, k);
    return false;
}

bool vgc_bd_high_active(const struct vgc_bd *bd, int64_t now, bool *present, int64_t *until)
{
    *present = false;
    *until = 0;
    if (!bd->plugin)
        return false;
    bool active = false, open = false; /* open: an active one whose end is not known */
    int64_t end = 0;
    for (unsigned i = 0; i < bd->n; i++) {
        const struct vgc_peer *p = &bd->p[i];
        if (p->slots == NULL || p->map == NULL || !p->high)
            continue; /* free, the reader's own container, or low */
        bool live = false, pending = false;
        for (unsigned k = 0; k < p->nslots; k++) {
            struct vgc_slot_seen ss;
            if (!vgc_bd_proc_high(bd, i, k) || !vgc_slot_read(&p->slots[k], now, 0, &ss))
                continue;
            live = true;
            pending = pending || ss.pending;
        }
        if (!live)
            continue; /* no process of it on the GPU */
        *present = true;
        const struct vgc_slot_file *f = peer_file(p);
        if (pending) {
            /* The work it queued should be done by its predicted end: its poller may be
             * late to say so (a wake-up that would leave the GPU idle). A time in the past
             * only makes it look idle sooner, its own loss; a far one is no more than the
             * pending flag already says. */
            int64_t busy = atomic_load(&f->busy_until);
            if (busy > 0 && busy <= now - VGC_PRIO_IDLE_NS)
                continue;
            active = true;
            if (busy > 0 && busy + VGC_PRIO_IDLE_NS - now <= VGC_PRIO_POLL_NS)
                end = max64(end, busy + VGC_PRIO_IDLE_NS);
            else
                open = true;
            continue;
        }
        /* Drained a moment ago: the next launch of a burst is likely on its way. A time
         * from the future is forged and counts as absent. */
        int64_t idle = atomic_load(&f->idle_at);
        if (idle <= now && now - idle < VGC_PRIO_IDLE_NS) {
            active = true;
            end = max64(end, idle + VGC_PRIO_IDLE_NS);
        }
    }
    *until = active && !open ? end : 0;
    return active;
}

void vgc_bd_mark_low(struct vgc_bd *bd, int slot, bool low)
{
    if (!bd->plugin || bd->own == NULL || slot < 0 || slot >= VGC_CTR_PROCS)
        return;
    if (low)
        atomic_fetch_or(&bd->own->low_mask, UINT64_C(1) << slot);
    else
        atomic_fetch_and(&bd->own->low_mask, ~(UINT64_C(1) << slot));
}

void vgc_bd_note_idle(struct vgc_bd *bd, int64_t now)
{
    if (bd->plugin && bd->own != NULL)
        atomic_store(&bd->own->idle_at, now);
}

void vgc_bd_note_busy(struct vgc_bd *bd, int64_t until)
{
    if (!bd->plugin || bd->own == NULL)
        return;
    int64_t cur = atomic_load(&bd->own->busy_until);
    while (cur < until && !atomic_compare_exchange_weak(&bd->own->busy_until, &cur, until))
        ;
}

bool vgc_turn_take(struct vgc_board *b, uint64_t owner, int64_t now, int64_t until)
{
    uint64_t cur = atomic_load(&b->turn);
    if (cur != owner) {
        /* A holder extends its turn at most VGC_TURN_GRACE_NS ahead: a later expiry is
         * forged and counts as expired. */
        int64_t held = atomic_load(&b->turn_until);
        if (cur != 0 && now < held && held - now <= VGC_TURN_GRACE_NS)
            return false;
        if (!atomic_compare_exchange_strong(&b->turn, &cur, owner))
            return false;
    }
    atomic_store(&b->turn_until, until);
    return true;
}

void vgc_turn_extend(struct vgc_board *b, uint64_t owner, int64_t until)
{
    if (atomic_load(&b->turn) == owner)
        atomic_store(&b->turn_until, until);
}

bool vgc_turn_seize(struct vgc_board *b, uint64_t owner, uint64_t seen, int64_t until)
{
    if (!atomic_compare_exchange_strong(&b->turn, &seen, owner))
        return seen == owner;
    atomic_store(&b->turn_until, until);
    return true;
}

bool vgc_turn_release(struct vgc_board *b, uint64_t owner)
{
    uint64_t cur = owner;
    if (!atomic_compare_exchange_strong(&b->turn, &cur, 0))
        return false;
    atomic_fetch_add(&b->turn_seq, 1);
    return atomic_load(&b->turn_waiters) != 0;
}

struct vgc_board *vgc_board_open(const char *dir, const char *uuid, struct vg_err *err)
{
    if (mkdir(dir, 01777) == 0)
        (void)chmod(dir, 01777); /* shared by every container's uid; umask aside */
    else if (errno != EEXIST)
        return vg_err_errno(err, errno, "board directory %s", dir), NULL;
    char path[VGPU_CONFIG_PATH_MAX + REGION_UUID_MAX + 16];
    if (vg_snprintf(path, sizeof path, "%s/%s.board", dir, uuid) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "board path too long"), NULL;
    for (const char *c = uuid; *c != '\0'; c++)
        if (*c == '/')
            return vg_err_set(err, -EINVAL, "bad GPU UUID \"%s\"", uuid), NULL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return vg_err_errno(err, errno, "board %s", path), NULL;
    (void)fchmod(fd, 0666);
    struct stat st;
    if (fstat(fd, &st) != 0 || (st.st_size != 0 && st.st_size != (off_t)sizeof(struct vgc_board))) {
        close(fd);
        return vg_err_set(err, -EPROTO, "board %s: not a board file of this version", path), NULL;
    }
    if (st.st_size == 0 && ftruncate(fd, (off_t)sizeof(struct vgc_board)) != 0) {
        int e = errno;
        close(fd);
        return vg_err_errno(err, e, "board %s", path), NULL;
    }
    void *m = mmap(NULL, sizeof(struct vgc_board), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return vg_err_errno(err, errno, "board %s: mmap", path), NULL;
    guard_add(m, sizeof(struct vgc_board));
    struct vgc_board *b = m;
    uint64_t magic = 0;
    if (!atomic_compare_exchange_strong(&b->magic, &magic, VGC_BOARD_MAGIC) &&
        magic != VGC_BOARD_MAGIC) {
        guard_del(m);
        munmap(m, sizeof(struct vgc_board));
        return vg_err_set(err, -EPROTO, "board %s: bad magic", path), NULL;
    }
    return b;
}
