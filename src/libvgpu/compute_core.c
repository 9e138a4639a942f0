/* The compute limiter's controller core: budget, predictor, control tick and the board.
 * Pure functions of their arguments and the memory they are given (no clock, no CUDA),
 * so the unit tests run them in virtual time. See compute.h and docs/compute.md. */
#define _GNU_SOURCE
#include "libvgpu/compute.h"

#include <errno.h>
#include <fcntl.h>
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

int64_t vgc_rate(struct region_compute *b, const struct vgc_params *p)
{
    int64_t r = atomic_load_explicit(&b->rate_ppm, memory_order_relaxed);
    if (r <= 0)
        r = p->share_ppm;
    return clamp64(r, 1, VGC_PPM);
}

void vgc_refill(struct region_compute *b, const struct vgc_params *p, int64_t now)
{
    vgc_refill_owed(b, p, now, 0);
}

void vgc_refill_owed(struct region_compute *b, const struct vgc_params *p, int64_t now,
                     int64_t owed_ns)
{
    int64_t last = atomic_load_explicit(&b->refill_at, memory_order_relaxed);
    if (last == 0) {
        /* First use: the budget starts empty, at zero. */
        atomic_compare_exchange_strong(&b->refill_at, &last, now);
        return;
    }
    if (now <= last || !atomic_compare_exchange_strong(&b->refill_at, &last, now))
        return; /* another launch refilled up to (about) now */
    int64_t dt = min64(now - last, 10 * VGC_WINDOW_NS); /* the ceiling is far below */
    int64_t add = dt * vgc_rate(b, p) / VGC_PPM;
    int64_t c = atomic_fetch_add(&b->credit_ns, add) + add;
    int64_t cap = vgc_cap_ns(p->mode == VGPU_COMPUTE_BURST ? p->burst_ppm : p->share_ppm) +
                  kept(p) + max64(owed_ns, 0);
    while (c > cap && !atomic_compare_exchange_weak(&b->credit_ns, &c, cap))
        ;
}

void vgc_settle(struct region_compute *b, int64_t predicted_ns, int64_t actual_ns)
{
    if (predicted_ns != actual_ns)
        atomic_fetch_add_explicit(&b->credit_ns, predicted_ns - actual_ns, memory_order_relaxed);
    if (actual_ns > 0)
        atomic_fetch_add_explicit(&b->busy_ns, actual_ns, memory_order_relaxed);
}

int64_t vgc_wait_ns(struct region_compute *b, const struct vgc_params *p)
{
    int64_t c = atomic_load_explicit(&b->credit_ns, memory_order_relaxed);
    if (c >= 0)
        return 0;
    int64_t rate = vgc_rate(b, p);
    return (-c * VGC_PPM + rate - 1) / rate;
}

/* PI gains: rate = share + KP x error + integral, integral += KI x error x dt. */
#define VGC_KP_PERMILLE 200
#define VGC_KI_PER_S    2

bool vgc_tick(struct region_compute *b, const struct vgc_params *p, int64_t now, int64_t others_ppm)
{
    int64_t period = p->mode == VGPU_COMPUTE_BURST ? VGC_BURST_TICK_NS : VGC_TICK_NS;
    int64_t at = atomic_load_explicit(&b->tick_at, memory_order_relaxed);
    if (at != 0 && now - at < period)
        return false;
    if (!atomic_compare_exchange_strong(&b->tick_at, &at, now))
        return false;
    int64_t busy = atomic_load(&b->busy_ns);
    int64_t waited = atomic_load(&b->waited_ns);
    int64_t busy0 = atomic_exchange(&b->tick_busy, busy);
    int64_t waited0 = atomic_exchange(&b->tick_waited, waited);
    if (at == 0 || now - at > VGC_WINDOW_NS)
        return true; /* first tick, or the container slept: start a new window */
    int64_t dt = now - at;
    int64_t inst = clamp64((busy - busy0) * (VGC_PPM / 1000) / (dt / 1000 + 1), 0, VGC_PPM);
    int64_t ach = atomic_load(&b->achieved_ppm);
    ach += (inst - ach) * dt / VGC_WINDOW_NS;
    atomic_store(&b->achieved_ppm, ach);

    int64_t rate;
    if (p->mode == VGPU_COMPUTE_BURST) {
        rate = clamp64(VGC_PPM - others_ppm - VGC_BURST_MARGIN, p->share_ppm, p->burst_ppm);
    } else {
        int64_t lo = p->share_ppm * VGC_TRIM_MIN_PPM / VGC_PPM - p->share_ppm;
        int64_t hi = p->share_ppm * VGC_TRIM_MAX_PPM / VGC_PPM - p->share_ppm;
        int64_t integral = atomic_load(&b->integral_ppm);
        int64_t corr = integral;
        int64_t turn_at = __atomic_load_n(&p->turn_wait_at, __ATOMIC_RELAXED);
        if (turn_at != 0 && now - turn_at < VGC_WINDOW_NS) {
            /* Taking turns: every launch is charged its own GPU time and what was earned
             * while waiting is kept, so there is no lateness to trim; a trim would only
             * follow the noise of a few long launches per window. */
            corr = integral = 0;
            atomic_store(&b->integral_ppm, 0);
        } else if (waited - waited0 > 0) {
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

/* ---- board ---- */

static bool fresh(const struct vgc_board_slot *s, int64_t now, int64_t limit)
{
    return now - atomic_load_explicit(&s->heartbeat, memory_order_relaxed) < limit;
}

int vgc_board_claim(struct vgc_board *b, uint64_t owner, uint64_t container, int64_t now)
{
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        struct vgc_board_slot *s = &b->slots[i];
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

void vgc_board_set_pending(struct vgc_board *b, int slot, bool pending, int64_t now)
{
    struct vgc_board_slot *s = &b->slots[slot];
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

int64_t vgc_board_pend(const struct vgc_board_slot *s, int64_t now)
{
    int64_t total = atomic_load(&s->pend_ns);
    if (atomic_load(&s->pending) != 0)
        total += max64(now - atomic_load(&s->pend_since), 0);
    return total;
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
        int64_t d = after->pend[i] - before->pend[i];
        if (d <= 0 || before->pend[i] < 0)
            continue;
        int64_t f = min64(d, measured_ns) * (VGC_PPM / 1000) / (measured_ns / 1000 + 1);
        f = clamp64(f, 0, VGC_PPM);
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

void vgc_board_heartbeat(struct vgc_board *b, int slot, int64_t share_ppm, int64_t claim_ppm,
                         int64_t now)
{
    struct vgc_board_slot *s = &b->slots[slot];
    atomic_store(&s->share_ppm, share_ppm);
    atomic_store(&s->claim_ppm, (uint32_t)clamp64(claim_ppm, 0, VGC_PPM));
    atomic_store(&s->heartbeat, now);
}

void vgc_board_view(const struct vgc_board *b, int slot, int64_t now, struct vgc_view *v)
{
    v->others_pending = false;
    v->others_pending_n = 0;
    v->others_flips = 0;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        v->pend[i] = -1;
        if (i == slot)
            continue;
        const struct vgc_board_slot *s = &b->slots[i];
        if (atomic_load_explicit(&s->owner, memory_order_acquire) == 0 ||
            !fresh(s, now, VGC_STALE_NS))
            continue;
        v->pend[i] = vgc_board_pend(s, now);
        v->others_flips += atomic_load(&s->flips);
        if (atomic_load(&s->pending) != 0) {
            v->others_pending = true;
            v->others_pending_n++;
        }
    }
}

int64_t vgc_board_others_share(const struct vgc_board *b, uint64_t container, int64_t now)
{
    uint64_t ids[VGC_BOARD_SLOTS];
    int64_t used[VGC_BOARD_SLOTS], claim[VGC_BOARD_SLOTS];
    unsigned n = 0;
    for (int i = 0; i < VGC_BOARD_SLOTS; i++) {
        const struct vgc_board_slot *s = &b->slots[i];
        uint64_t id = atomic_load(&s->container);
        if (atomic_load(&s->owner) == 0 || !fresh(s, now, VGC_STALE_NS) || id == container)
            continue;
        unsigned k = 0;
        while (k < n && ids[k] != id)
            k++;
        if (k == n) {
            ids[n] = id;
            used[n] = claim[n] = 0;
            n++;
        }
        used[k] += clamp64(atomic_load(&s->share_ppm), 0, VGC_PPM);
        claim[k] = max64(claim[k], (int64_t)atomic_load(&s->claim_ppm));
    }
    int64_t sum = 0;
    for (unsigned k = 0; k < n; k++)
        sum += max64(used[k], claim[k]);
    return min64(sum, VGC_PPM);
}

bool vgc_turn_take(struct vgc_board *b, uint64_t owner, int64_t now, int64_t until)
{
    uint64_t cur = atomic_load(&b->turn);
    if (cur != owner) {
        if (cur != 0 && now < atomic_load(&b->turn_until))
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
    struct vgc_board *b = m;
    uint64_t magic = 0;
    if (!atomic_compare_exchange_strong(&b->magic, &magic, VGC_BOARD_MAGIC) &&
        magic != VGC_BOARD_MAGIC) {
        munmap(m, sizeof(struct vgc_board));
        return vg_err_set(err, -EPROTO, "board %s: bad magic", path), NULL;
    }
    return b;
}
