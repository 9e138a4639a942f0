/* The compute limiter's runtime: launch wrappers, timing events and the poller thread.
 *
 * A limited launch (docs/compute.md):
 *  1. passes through untouched while its stream is capturing (nothing is charged, slept
 *     or recorded, so a capture is never broken);
 *  2. waits while this process already has two launches and about one time slice of
 *     predicted work in flight on the device (VGC_DEPTH_NS), so throttling acts within
 *     a slice or two;
 *  3. sleeps once, to the exact moment both the container's shared credit and this
 *     process's own (compute.h, "the budget") are back at zero;
 *  4. waits until this process holds its GPU's turn (compute.h, "turns"), so that no other
 *     limited process has work queued while it runs;
 *  5. charges its predicted cost and is bracketed by two timing events.
 * The poller thread waits for each launch's end event, measures start-to-end device time,
 * decides from the board whether another context had work pending meanwhile, and settles
 * the true cost against the prediction.
 *
 * With no compute limit in force, the wrappers cost one relaxed load of vgc_active. */
#define _GNU_SOURCE
#include "libvgpu/compute.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/str.h"
#include "libvgpu/vgpu.h"

#define REAL lv_g.real

#ifdef VGC_TRACE
/* Debug builds (-DVGC_TRACE): VGC_TRACE=PREFIX writes one line per settled launch to
 * PREFIX.<pid>: the prediction, the measured interval, alone or not, what was charged. */
#include <stdio.h>
#include <stdlib.h>
static FILE *trace_f;
#define TRACE(...) (trace_f != NULL ? (void)fprintf(trace_f, __VA_ARGS__) : (void)0)
#else
#define TRACE(...) ((void)0)
#endif

_Atomic int vgc_active;

#define VGC_RING       (VGC_MAX_INFLIGHT * 2)
#define VGC_RESERVE    (VGC_MAX_INFLIGHT * 2) /* timing events reserved per context */
#define VGC_CTXS       8                      /* contexts with a reserve per process */
#define VGC_SHARE_WIN  INT64_C(20000000)      /* the board's share figure: 20 ms windows */
#define VGC_IDLE_CHECK INT64_C(50000000)      /* poller heartbeat while idle */

struct cdev {
    bool on;
    struct region_compute *b; /* the container's budget, in the region: read bounded */
    /* This process's own bucket, which no other process can write: the authority on how
     * much it may launch (compute.h, "the budget"). */
    struct region_compute own;
    struct vgc_params p;
    struct vgc_board *board; /* NULL: no node-wide board (every interval counts as alone) */
    struct vgc_bd bd;        /* the board's slots as this process sees them (board: bd.shared) */
    uint64_t container;
    /* Under rt.lock: */
    int slot;
    int64_t inflight_ns;
    unsigned inflight_n;
    int64_t win_start, win_busy;
    bool win_wanted;         /* a launch waited on the credit or the depth bound in this window */
    bool turn;               /* this process holds the board's turn */
    bool turn_closing;       /* ... and queues nothing more until its queue drained */
    int64_t turn_end;        /* when it gives the turn up if others wait */
    int64_t turn_ext;        /* when it last took or extended the turn */
    int64_t yield_until;     /* after giving it up so, others go first until then */
    int64_t turns_off_until; /* the turn was held past VGC_TURN_WAIT_MAX_NS: none till then */
    unsigned turns_off_n;    /* how often (each time twice as long) */
    int64_t stall_ns;        /* waited on holders past VGC_TURN_GRACE_NS, summed over waits */
    int64_t stall_at;        /* ... last added to then */
    bool throttled;          /* a launch sleeps on the credit */
    int prio;                /* VGPU_PRIORITY_HIGH or _LOW (docs/compute.md, "Priority") */
    bool high_near;          /* low: a high-priority container is on the GPU */
    int64_t queue_end;       /* when its queued work should be done, by the predictions */
    int64_t drained_at;      /* holding the turn, the queue drained then (0: it did not) */
    int64_t prio_drain_at;   /* high: when its queue last drained (0: never) */
    unsigned prio_gaps;      /* high: drains in a row followed by VGC_PRIO_GAP_NS or more */
};

struct mark {
    CUevent start, end;
    CUcontext ctx;
    int dev;
    int64_t pred;
    int64_t depth; /* what it counts against VGC_DEPTH_NS */
    uint64_t key;
    bool alone;
    struct vgc_view before; /* the board at the launch */
};

/* The timing events of one context, created all at once at its first limited launch and
 * reused: a tenant that exhausts the driver's events afterwards cannot starve the
 * limiter, and one that did so before gets its launches charged their wall time. */
struct ctx_events {
    CUcontext ctx;    /* NULL: free entry */
    unsigned made;    /* how many were created (0: none could be: fail closed) */
    unsigned n;       /* free ones in ev[] */
    int64_t tried_at; /* when it was made; with none made it is tried again 1 s later */
    CUevent ev[VGC_RESERVE];
};

/* Why a launch was charged its wall time (region_compute.closed_why bits). */
enum vgc_closed {
    VGC_CLOSED_EVENTS = 1,  /* no timing events */
    VGC_CLOSED_SLOT = 2,    /* no board slot */
    VGC_CLOSED_BOARD = 4,   /* no board */
    VGC_CLOSED_POLLER = 8,  /* no poller thread */
    VGC_CLOSED_RECORD = 16, /* an event record failed */
    VGC_CLOSED_TURN = 32    /* the turn was held too long: turns suspended */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work; /* poller: a launch was queued */
    pthread_cond_t room; /* launchers: work in flight completed */
    struct mark ring[VGC_RING];
    unsigned head, count;
    bool poller_running;
    struct ctx_events evs[VGC_CTXS];
    uint64_t owner;
    struct vgc_pred pred;
    struct cdev dev[REGION_MAX_DEVICES];
} rt = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {.tv_sec = (time_t)(t / 1000000000), .tv_nsec = (long)(t % 1000000000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ---- setup ---- */

static void init_conds(void)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&rt.work, &a);
    pthread_cond_init(&rt.room, &a);
    pthread_condattr_destroy(&a);
}

void vgc_setup(const struct vgpu_config *c, struct region *r, const char *region_path)
{
    enum vgpu_compute_mode mode = vgpu_config_compute_mode(c);
    if (mode == VGPU_COMPUTE_OFF)
        return;
    struct stat st;
    uint64_t container = 1;
    if (stat(region_path, &st) == 0)
        container = ((uint64_t)st.st_dev << 40 ^ (uint64_t)st.st_ino << 1) | 1;
    init_conds();
#ifdef VGC_TRACE
    if (getenv("VGC_TRACE") != NULL) {
        char tp[256];
        if (snprintf(tp, sizeof tp, "%s.%d", getenv("VGC_TRACE"), (int)getpid()) < (int)sizeof tp)
            trace_f = fopen(tp, "w");
    }
#endif
    vgc_pred_init(&rt.pred);
    rt.owner = ((uint64_t)(uint32_t)getpid() << 32 ^ (uint64_t)now_ns()) | 1;
    bool any = false;
    for (unsigned d = 0; d < region_device_count(r) && d < REGION_MAX_DEVICES; d++) {
        const struct region_device_config *dc = region_device(r, d);
        uint32_t pct = region_share(r, d); /* the configuration's, never the file's */
        struct cdev *cd = &rt.dev[d];
        cd->slot = -1;
        /* A container that names a priority takes part in it with or without a share:
         * it publishes its work on the board (high) or holds its launches (low). */
        if ((pct == 0 || pct >= 100) && !c->priority_given)
            continue;
        if (pct == 0 || pct > 100)
            pct = 100;
        cd->prio = c->priority;
        cd->b = region_compute(r, d);
        cd->p.mode = mode;
        cd->p.share_ppm = (int64_t)pct * 10000;
        cd->p.burst_ppm = mode == VGPU_COMPUTE_BURST && c->burst_limit > pct
                              ? (int64_t)c->burst_limit * 10000
                              : cd->p.share_ppm;
        cd->container = container;
        struct vg_err err = {0};
        /* The device plugin names this container's slot file (docs/compute.md). */
        cd->board =
            vgc_bd_open(&cd->bd, c->board_dir, dc->uuid, getenv("VGPU_COMPUTE_SLOT"), &err) == 0
                ? cd->bd.shared
                : NULL;
        if (cd->board != NULL)
            vgc_guard_install();
        if (cd->board == NULL)
            vg_log(VG_LOG_WARN,
                   "compute board unavailable; overlap with other containers "
                   "is not split",
                   "error=\"%s\"", err.msg);
        cd->on = true;
        any = true;
        if (c->priority_given && (cd->board == NULL || !cd->bd.plugin))
            vg_log(VG_LOG_WARN,
                   "task priority needs the device plugin's compute board; not enforced",
                   "uuid=%s priority=%d", dc->uuid, cd->prio);
        vg_log(VG_LOG_INFO, "compute share enforced",
               "uuid=%s share=%u%% mode=%s burst=%u%% priority=%d", dc->uuid, pct,
               mode == VGPU_COMPUTE_BURST ? "burst" : "hard", (unsigned)(cd->p.burst_ppm / 10000),
               cd->prio);
    }
    if (any)
        atomic_store_explicit(&vgc_active, 1, memory_order_release);
}

void vgc_set_share(unsigned d, uint32_t percent, uint32_t burst_limit)
{
    if (d >= REGION_MAX_DEVICES)
        return;
    struct cdev *cd = &rt.dev[d];
    pthread_mutex_lock(&rt.lock);
    if (cd->on) {
        int64_t share = percent == 0 || percent >= 100 ? VGC_PPM : (int64_t)percent * 10000;
        int64_t burst = cd->p.mode == VGPU_COMPUTE_BURST && (int64_t)burst_limit * 10000 > share
                            ? (int64_t)burst_limit * 10000
                            : share;
        /* Launching threads read the parameters without the lock: one atomic store each. */
        __atomic_store_n(&cd->p.share_ppm, share, __ATOMIC_RELAXED);
        __atomic_store_n(&cd->p.burst_ppm, burst, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&rt.lock);
}

void vgc_after_fork(void)
{
    /* Only the forking thread survives: no poller, nothing in flight here. */
    pthread_mutex_init(&rt.lock, NULL);
    init_conds();
    rt.head = rt.count = 0;
    rt.poller_running = false;
    memset(rt.evs, 0, sizeof rt.evs); /* the parent's events are not the child's */
    rt.owner = ((uint64_t)(uint32_t)getpid() << 32 ^ (uint64_t)now_ns()) | 1;
    for (int d = 0; d < REGION_MAX_DEVICES; d++) {
        rt.dev[d].slot = -1;
        rt.dev[d].inflight_n = 0;
        rt.dev[d].inflight_ns = 0;
        rt.dev[d].turn = rt.dev[d].turn_closing = false; /* the parent's turn */
        rt.dev[d].p.kept_ns = rt.dev[d].p.turn_wait_at = 0;
        rt.dev[d].stall_ns = rt.dev[d].stall_at = 0;
        /* The child's own bucket starts empty, as any new process's. */
        memset(&rt.dev[d].own, 0, sizeof rt.dev[d].own);
    }
}

/* ---- the turn ---- */

#define VGC_YIELD_NS           INT64_C(2000000)  /* after a full turn, others go first this long */
#define VGC_LINGER_NS          INT64_C(200000)   /* a drained queue keeps the turn this long */
#define VGC_NEXT_WAIT_NS       INT64_C(200000)   /* a free turn waits this long for the next one */
#define VGC_TURN_DEPTH_NS      INT64_C(10000000) /* work in flight while holding the turn */
#define VGC_TURN_WAIT_MAX_NS   INT64_C(1000000000)  /* no honest holder keeps others this long */
#define VGC_TURN_WAIT_TOTAL_NS INT64_C(5000000000)  /* ... nor all holders together this long */
#define VGC_TURN_OFF_NS        INT64_C(10000000000) /* ... after which turns are off this long */
#define VGC_TURN_OFF_MAX_NS    INT64_C(300000000000)
#define VGC_TURN_IDLE_NS       INT64_C(2000000) /* a holder idle this long (10 lingers) lost it */

static void turn_wake(struct cdev *d)
{
    syscall(SYS_futex, &d->board->turn_seq, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static void turn_sleep(struct cdev *d, uint32_t seq, int64_t ns)
{
    struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000), .tv_nsec = (long)(ns % 1000000000)};
    syscall(SYS_futex, &d->board->turn_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
}

static void turn_release_locked(struct cdev *d)
{
    d->drained_at = 0;
    if (!d->turn)
        return;
    d->turn = d->turn_closing = false;
    bool wake = vgc_turn_release(d->board, rt.owner);
    vgc_bd_turn_mark(&d->bd, d->slot, false); /* after: the word no longer names it */
    if (!wake && d->bd.plugin && atomic_load(&d->board->turn_waiters) != 0) {
        /* The word was rewritten under it: waiters found it by its own file's bit, and
         * learn that it let go the same way. */
        atomic_fetch_add(&d->board->turn_seq, 1);
        wake = true;
    }
    if (wake)
        turn_wake(d);
    pthread_cond_broadcast(&rt.room);
}

/* What the container earned while this process waited `waited` ns for its turn is kept
 * above the credit ceiling (the wait was not idleness by choice), together with what it
 * kept before and has not spent, until the process goes idle or its credit runs out; and
 * the PI trim holds still meanwhile (compute.h, vgc_params). */
static void keep_locked(struct cdev *d, int64_t waited)
{
    int64_t t = now_ns();
    __atomic_store_n(&d->p.kept_ns, vgc_keep(&d->own, &d->p, waited), __ATOMIC_RELAXED);
    __atomic_store_n(&d->p.turn_wait_at, t, __ATOMIC_RELAXED);
    vgc_refill(d->b, &d->p, t);
    vgc_refill(&d->own, &d->p, t);
}

/* When this process's credit was last at zero, for the turn's order: from its own bucket,
 * which no other process can write (the container's would let a forged refill time or
 * credit put it first, or last). */
static int64_t behind_key(struct cdev *d)
{
    return atomic_load(&d->own.refill_at) -
           vgc_credit(&d->own, &d->p) / 1000 * VGC_PPM / vgc_rate(&d->own, &d->p) * 1000;
}

static void unkeep(struct cdev *d)
{
    __atomic_store_n(&d->p.kept_ns, 0, __ATOMIC_RELAXED);
}

/* This process's queue on d drained: it is no longer pending, and gives the turn back. */
static void drained_locked(struct cdev *d, int64_t t)
{
    if (d->board == NULL || d->slot < 0)
        return;
    vgc_bd_set_pending(&d->bd, d->slot, false, t);
    bool high = d->prio == VGPU_PRIORITY_HIGH && d->bd.plugin;
    /* A high process whose last VGC_PRIO_GAPS drains were each followed by a pause of
     * VGC_PRIO_GAP_NS or more (requests that end in a synchronize) expects no launch now:
     * it keeps no turn, and its low-priority neighbours go at once. */
    bool done = high && d->prio_gaps >= VGC_PRIO_GAPS;
    if (done) {
        unkeep(d); /* idle by choice, as after a linger */
        turn_release_locked(d);
    }
    if (high) {
        d->prio_drain_at = t;
        /* Low-priority neighbours held on the turn's futex wait VGC_PRIO_IDLE_NS more
         * (none when it is done). */
        vgc_bd_note_idle(&d->bd, done ? t - VGC_PRIO_IDLE_NS : t);
        atomic_fetch_add(&d->board->turn_seq, 1);
        turn_wake(d);
    }
    if (done)
        return;
    if (d->turn && !d->turn_closing && !d->throttled) {
        /* The launcher may be about to launch again: the turn is kept a moment. */
        d->drained_at = t;
        return;
    }
    turn_release_locked(d);
}

static void closed_note(struct cdev *d, enum vgc_closed why);

/* Other processes held the turn past VGC_TURN_GRACE_NS at a stretch while this one waited,
 * VGC_TURN_WAIT_MAX_NS in all (what each stretch lasted beyond VGC_TURN_GRACE_NS, summed over
 * waits until none came for VGC_TURN_OFF_NS: a forger that lets its turn lapse now and then
 * does not start the count afresh), or holders together held it past VGC_TURN_WAIT_TOTAL_NS
 * in one wait: no honest holder does (it gives the turn up VGC_TURN_NS after others wait,
 * once its queue of at most VGC_TURN_DEPTH_NS drained), so the turn word cannot be trusted. This
 * process takes no turns for VGC_TURN_OFF_NS, twice as long each time after (up to
 * VGC_TURN_OFF_MAX_NS): a tenant that forges the turn delays the others by at most
 * VGC_TURN_WAIT_MAX_NS per such period, and meanwhile they run as without a board's turns. */
static void turns_off_locked(struct cdev *d, int64_t t)
{
    int64_t off = VGC_TURN_OFF_NS << (d->turns_off_n < 5 ? d->turns_off_n : 5);
    d->turns_off_n++;
    d->turns_off_until = t + (off < VGC_TURN_OFF_MAX_NS ? off : VGC_TURN_OFF_MAX_NS);
    atomic_fetch_sub(&d->b->closed_n, 1); /* no launch charged its wall time for this */
    closed_note(d, VGC_CLOSED_TURN);
}

/* What a waiter makes of the turn's holder (docs/compute.md, "Who writes the board"). */
struct turn_judge {
    int blame;            /* the peer whose turn keeps this process waiting (-1: none) */
    uint64_t blame_id;    /* ... its file's identity (a scan may move the peers) */
    int64_t left;         /* ... how much longer its allowance lets it */
    int64_t at;           /* the wait was charged up to then */
    uint64_t idle_holder; /* a holder seen with no work in flight ... */
    uint64_t idle_flips;  /* ... and no change to its slot since ... */
    int64_t idle_since;   /* ... then */
};

/* Charges the wait since the last look to the container whose turn caused it. */
static void turn_charge_locked(struct cdev *d, struct turn_judge *j, int64_t t)
{
    if (j->blame >= 0 && (unsigned)j->blame < d->bd.n) {
        struct vgc_peer *p = &d->bd.p[j->blame];
        if (p->slots != NULL && p->id == j->blame_id)
            (void)vgc_allow_charge(&p->turn, p->bound_ppm, t, t - j->at);
    }
    j->at = t;
    j->blame = -1;
}

/* Whether this waiter disregards peer i's process *id as holder (held) or next: idle (a
 * holder seen with no work in flight and no change to its slot for VGC_TURN_IDLE_NS), or
 * its container past its allowance. Otherwise j->blame names the container charged. */
static bool turn_peer_disregard_locked(struct cdev *d, int i, uint64_t id, bool held,
                                       const struct vgc_slot_seen *s, int64_t t,
                                       struct turn_judge *j)
{
    if (held) {
        if (s->pending) {
            j->idle_holder = 0;
        } else if (j->idle_holder != id || j->idle_flips != s->flips) {
            j->idle_holder = id;
            j->idle_flips = s->flips;
            j->idle_since = t;
        } else if (t - j->idle_since > VGC_TURN_IDLE_NS) {
            TRACE("disregard t=%lld id=%llx: idle\n", (long long)t, (unsigned long long)id);
            return true; /* holds the turn with nothing on the GPU */
        }
    }
    struct vgc_peer *p = &d->bd.p[i];
    if (p->map == NULL)
        return false; /* a process of this container: its share is this one's */
    int64_t left = vgc_allow_charge(&p->turn, p->bound_ppm, t, 0);
    if (left <= 0) {
        TRACE("disregard t=%lld id=%llx held=%d: past its allowance\n", (long long)t,
              (unsigned long long)id, (int)held);
        return true;
    }
    j->blame = i;
    j->blame_id = p->id;
    j->left = left;
    return false;
}

/* The word names *id as the turn's holder (held) or as the next one (!held): true when
 * this waiter disregards it (treats the turn as expired, or the name as nobody's). With
 * the device plugin's board, a turn counts only when the holder's own slot file confirms
 * it (a neighbour's id, a made-up or a dead one is nobody's); a word that names nobody
 * while another process's own file says it holds the turn, with work in flight (the word
 * was rewritten under it), counts as that process's turn, and *id becomes its id. The
 * holder counts while it is not disregarded (turn_peer_disregard_locked). */
static bool turn_disregard_locked(struct cdev *d, uint64_t *id, bool held, int64_t t,
                                  struct turn_judge *j)
{
    if (!d->bd.plugin || *id == 0 || *id == rt.owner)
        return false;
    struct vgc_slot_seen s;
    int i = vgc_bd_turn_confirm(&d->bd, *id, held, t, &s);
    /* High priority never waits for a low-priority process's turn: it runs beside what
     * that one has queued (at most VGC_PRIO_LOW_DEPTH_NS), which queues nothing more. */
    bool high = d->prio == VGPU_PRIORITY_HIGH;
    if (i >= 0 && high && !vgc_bd_id_high(&d->bd, (unsigned)i, *id))
        return true;
    if (i >= 0)
        return turn_peer_disregard_locked(d, i, *id, held, &s, t, j);
    if (held) {
        /* Every process that says it holds the turn is a candidate: a forger that sets its
         * own bits must not hide an honest holder once it is past its allowance. */
        uint64_t found;
        for (i = vgc_bd_turn_find(&d->bd, rt.owner, 0, t, &found, &s); i >= 0;
             i = vgc_bd_turn_find(&d->bd, rt.owner, (unsigned)i + 1, t, &found, &s))
            if (s.pending && !(high && !vgc_bd_id_high(&d->bd, (unsigned)i, found)) &&
                !turn_peer_disregard_locked(d, i, found, false, &s, t, j)) {
                *id = found;
                return false;
            }
    }
    TRACE("disregard t=%lld id=%llx held=%d: nobody's\n", (long long)t, (unsigned long long)*id,
          (int)held);
    return true;
}

/* Waits (rt.lock held, released meanwhile) until this process holds d's turn; the time
 * it waited for another process to give it back. */
static int64_t turn_enter_locked(struct cdev *d)
{
    if (d->board == NULL || now_ns() < d->turns_off_until)
        return 0;
    int64_t t0 = 0;
    struct vgc_board *b = d->board;
    bool counted = false, expired = false;
    int64_t free_seen = 0, seen_since = 0, last = now_ns();
    uint64_t seen_holder = 0;
    struct turn_judge j = {.blame = -1};
    for (;;) {
        int64_t t = now_ns();
        if (counted)
            turn_charge_locked(d, &j, t);
        uint64_t holder = atomic_load(&b->turn);
        if (d->turn && holder != rt.owner) {
            if (t - d->turn_ext > VGC_TURN_GRACE_NS) {
                /* Its turn lapsed (not extended for the grace) and another took it: it
                 * queues nothing more until it holds the turn again. */
                d->turn = d->turn_closing = false;
                vgc_bd_turn_mark(&d->bd, d->slot, false);
            } else if (vgc_turn_seize(b, rt.owner, holder, t + VGC_TURN_GRACE_NS)) {
                /* Rewritten under a live holder: no honest process takes a turn that has
                 * not lapsed (one that disregards it runs beside it instead), so the word
                 * gets its id back and its own file still says it holds the turn. */
                holder = rt.owner;
                d->turn_ext = t;
            }
        }
        j.blame = -1;
        uint64_t real = holder; /* who holds it as this process judges */
        bool ignore = turn_disregard_locked(d, &real, true, t, &j);
        /* A holder that never lets go (about 1 s in all, or any holders 5 s): bounded. */
        if (real != seen_holder) {
            seen_holder = real;
            seen_since = t;
        }
        if (t - d->stall_at > VGC_TURN_OFF_NS)
            d->stall_ns = 0;
        int64_t over = seen_since + VGC_TURN_GRACE_NS;
        if (counted && real != 0 && real != rt.owner && !ignore && t > over) {
            d->stall_ns += t - (last > over ? last : over);
            d->stall_at = t;
        }
        last = t;
        if (counted && (d->stall_ns > VGC_TURN_WAIT_MAX_NS - VGC_TURN_GRACE_NS ||
                        t - t0 > VGC_TURN_WAIT_TOTAL_NS)) {
            /* A wait that ends here was no neighbour's fair turn: nothing is owed for it
             * (keeping it would lift this container above its share afterwards). */
            turns_off_locked(d, t);
            atomic_fetch_sub(&b->turn_waiters, 1);
            return 0;
        }
        if (d->turn) {
            if (!d->turn_closing) {
                if (t < d->turn_end)
                    break;
                if (atomic_load(&b->turn_waiters) == 0) {
                    d->turn_end = t + VGC_TURN_NS;
                    break;
                }
                /* Others wait: queue nothing more; the poller gives the turn back once
                 * the queue drained. */
                d->turn_closing = true;
                d->yield_until = t + VGC_YIELD_NS;
            }
            pthread_cond_wait(&rt.room, &rt.lock);
            continue;
        }
        uint32_t seq = atomic_load(&b->turn_seq);
        bool yield = t < d->yield_until && atomic_load(&b->turn_waiters) > (counted ? 1u : 0u);
        /* The waiter furthest behind its share (whose credit was at zero longest ago) is
         * next; another takes a free turn only when that one did not for a while. */
        int64_t key = behind_key(d);
        uint64_t nx = atomic_load(&b->turn_next);
        bool free_now = ignore || holder == 0;
        struct turn_judge jn = j;
        if (nx != 0 && turn_disregard_locked(d, &nx, false, t, &jn))
            nx = 0; /* named by nobody's process, or one past its allowance */
        else if (free_now && jn.blame >= 0)
            j = jn; /* a free turn kept for the one named next: charged to it */
        /* After a full turn, it does not name itself until the others went. */
        if (!yield && (nx == 0 || nx == rt.owner || key < atomic_load(&b->turn_next_key))) {
            atomic_store(&b->turn_next_key, key);
            atomic_store(&b->turn_next, rt.owner);
            nx = rt.owner;
        }
        if (!free_now || nx == rt.owner)
            free_seen = 0;
        else if (free_seen == 0)
            free_seen = t;
        bool mine = nx == rt.owner || (free_seen != 0 && t - free_seen > VGC_NEXT_WAIT_NS);
        /* The own file names this process before the word does (a reader confirms the
         * word by it). */
        bool got = false;
        int64_t held_until = atomic_load(&b->turn_until);
        bool lapsed =
            !free_now && real == holder && !(t < held_until && held_until - t <= VGC_TURN_GRACE_NS);
        /* A word naming this process (its own lapsed turn, or written by another) is its. */
        if ((free_now && mine) || lapsed || holder == rt.owner) {
            vgc_bd_turn_mark(&d->bd, d->slot, true);
            got = ignore ? vgc_turn_seize(b, rt.owner, holder, t + VGC_TURN_GRACE_NS)
                         : vgc_turn_take(b, rt.owner, t, t + VGC_TURN_GRACE_NS);
            if (!got)
                vgc_bd_turn_mark(&d->bd, d->slot, false);
        }
        if (got) {
            /* Taken from a holder that let it lapse or was disregarded: no neighbour's
             * fair turn, nothing owed. */
            expired = !free_now || ignore;
            d->turn = true;
            d->turn_closing = false;
            d->turn_end = t + VGC_TURN_NS;
            d->turn_ext = t;
            atomic_store(&b->turn_next, 0); /* also a stale one (a waiter that died) */
            if (atomic_load(&b->turn_waiters) > (counted ? 1u : 0u)) {
                /* The others name the next one among themselves. */
                atomic_fetch_add(&b->turn_seq, 1);
                turn_wake(d);
            }
            break;
        }
        if (!counted) {
            atomic_fetch_add(&b->turn_waiters, 1);
            counted = true;
            t0 = t;
            j.at = t;
        }
        d->win_wanted = true;
        int64_t until = atomic_load(&b->turn_until);
        if (free_seen != 0)
            until = free_seen + VGC_NEXT_WAIT_NS + 1;
        int64_t left = until - t;
        if (j.blame >= 0 && left > j.left)
            left = j.left; /* look again when its allowance runs out */
        if (j.idle_holder != 0 && left > VGC_TURN_IDLE_NS / 2)
            left = VGC_TURN_IDLE_NS / 2;
        left = left < 50000 ? 50000 : left > 10000000 ? 10000000 : left;
        pthread_mutex_unlock(&rt.lock);
        turn_sleep(d, seq, left);
        pthread_mutex_lock(&rt.lock);
    }
    if (!counted)
        return 0;
    atomic_fetch_sub(&b->turn_waiters, 1);
    TRACE("turn t=%lld waited=%lld credit=%lld\n", (long long)now_ns(), (long long)(now_ns() - t0),
          (long long)atomic_load(&d->b->credit_ns));
    /* Owed is a wait for neighbours' fair turns, not for one that was let lapse (a dead or
     * forging holder). */
    return expired ? 0 : now_ns() - t0;
}

/* ---- priority ---- */

/* Whether a high-priority container on d's GPU is active now; sets d->high_near. */
static bool high_active_locked(struct cdev *d, int64_t t, int64_t *until)
{
    bool present = false;
    *until = 0;
    if (d->prio != VGPU_PRIORITY_LOW || d->board == NULL || !d->bd.plugin)
        return false;
    bool active = vgc_bd_high_active(&d->bd, t, &present, until);
    d->high_near = present;
    return active;
}

/* A low-priority launch waits (rt.lock held, released meanwhile) while a high-priority
 * container on its GPU is active: it gives its turn back (high never waits for it) and
 * looks again when the high one's work should be done by its predictions and its idle
 * interval has passed, when a high process drains its queue (it wakes the turn's futex),
 * or after VGC_PRIO_POLL_NS. The time held is counted in the region (held_ns, for the
 * monitor). */
static void prio_hold_locked(struct cdev *d)
{
    int64_t t0 = now_ns(), t = t0, until;
    for (;;) {
        uint32_t seq = atomic_load(&d->board->turn_seq); /* before the look: no lost wake */
        if (!high_active_locked(d, t, &until))
            break;
        if (d->turn)
            turn_release_locked(d);
        pthread_mutex_unlock(&rt.lock);
        /* Until the predicted end (a drain wakes it sooner), else a drain or the poll. */
        int64_t left = until != 0 ? until - t : VGC_PRIO_POLL_NS;
        turn_sleep(d, seq, left > 1000 ? left : 1000);
        pthread_mutex_lock(&rt.lock);
        t = now_ns();
        if (t - d->bd.scanned_at >= VGC_SCAN_NS)
            vgc_bd_scan(&d->bd, t); /* a high container that went away */
    }
    if (t > t0)
        atomic_fetch_add_explicit(&d->b->held_ns, t - t0, memory_order_relaxed);
}

/* At exit the poller may not have settled the last launches (their work is done: the
 * process synchronised, or it is going away), so the board still says this process has
 * work pending: its low-priority neighbours would wait until its slot goes stale (1 s)
 * and turn waiters until its turn lapses. It says it has none, without the lock (the
 * poller may hold it when exit runs). */
__attribute__((destructor)) static void vgc_exit(void)
{
    if (atomic_load_explicit(&vgc_active, memory_order_relaxed) == 0)
        return;
    int64_t t = now_ns();
    for (int i = 0; i < REGION_MAX_DEVICES; i++) {
        struct cdev *d = &rt.dev[i];
        if (!d->on || d->board == NULL || d->slot < 0)
            continue;
        vgc_bd_set_pending(&d->bd, d->slot, false, t);
        if (d->prio == VGPU_PRIORITY_HIGH && d->bd.plugin)
            vgc_bd_note_idle(&d->bd, t - VGC_PRIO_IDLE_NS);
        bool waiters = vgc_turn_release(d->board, rt.owner);
        vgc_bd_turn_mark(&d->bd, d->slot, false);
        vgc_bd_release(&d->bd, d->slot, rt.owner); /* gone from the GPU: nobody waits on it */
        atomic_fetch_add(&d->board->turn_seq, 1);
        if (waiters || d->prio == VGPU_PRIORITY_HIGH)
            turn_wake(d);
    }
}

/* ---- events ---- */

/* ctx's reserve (ctx current), made at its first use; NULL when no entry is left. */
static struct ctx_events *events_locked(CUcontext ctx)
{
    struct ctx_events *free_e = NULL;
    for (int i = 0; i < VGC_CTXS; i++) {
        if (rt.evs[i].ctx == ctx) {
            if (rt.evs[i].made > 0 || now_ns() - rt.evs[i].tried_at < VGC_WINDOW_NS)
                return &rt.evs[i];
            free_e = &rt.evs[i];
            break;
        }
        if (rt.evs[i].ctx == NULL && free_e == NULL)
            free_e = &rt.evs[i];
    }
    if (free_e == NULL)
        return NULL;
    free_e->ctx = ctx;
    free_e->tried_at = now_ns();
    free_e->made = free_e->n = 0;
    while (free_e->made < VGC_RESERVE &&
           REAL.cuEventCreate(&free_e->ev[free_e->made], 0) == CUDA_SUCCESS)
        free_e->made++;
    free_e->n = free_e->made;
    return free_e;
}

static void event_put_locked(CUevent ev, CUcontext ctx)
{
    if (ev == NULL)
        return;
    for (int i = 0; i < VGC_CTXS; i++)
        if (rt.evs[i].ctx == ctx && rt.evs[i].n < rt.evs[i].made) {
            rt.evs[i].ev[rt.evs[i].n++] = ev;
            return;
        }
    (void)REAL.cuEventDestroy_v2(ev);
}

/* An event of ctx's reserve failed (its context may be gone): the reserve shrinks. */
static void event_lost_locked(CUevent ev, CUcontext ctx)
{
    (void)REAL.cuEventDestroy_v2(ev);
    for (int i = 0; i < VGC_CTXS; i++)
        if (rt.evs[i].ctx == ctx && rt.evs[i].made > 0)
            rt.evs[i].made--;
}

/* The limiter could not do its job for a launch: the launch is charged its wall time
 * (vgc_end), counted in the region for the monitor, and said once on stderr. */
static void closed_note(struct cdev *d, enum vgc_closed why)
{
    static _Atomic int said;
    atomic_fetch_add_explicit(&d->b->closed_n, 1, memory_order_relaxed);
    if ((atomic_fetch_or(&d->b->closed_why, (int64_t)why) & (int64_t)why) != 0)
        return;
    if ((atomic_fetch_or(&said, (int)why) & (int)why) != 0)
        return;
    static const char *const text[] = {
        "no timing events", "no board slot",          "no board",
        "no poller thread", "an event record failed", "the GPU's turn was held too long"};
    unsigned k = 0;
    while ((1u << k) != (unsigned)why)
        k++;
    char line[200];
    int n =
        vg_snprintf(line, sizeof line, "vgpu: compute limiter: %s; %s\n", text[k],
                    why == VGC_CLOSED_TURN ? "this process takes no turns for a while"
                                           : "launches are serialised and charged their wall time");
    if (n > 0)
        (void)!write(2, line, (size_t)n);
}

/* ---- poller ---- */

static void share_sample_locked(struct cdev *d, int64_t now, int64_t busy)
{
    d->win_busy += busy;
    if (d->win_start == 0)
        d->win_start = now;
    if (now - d->win_start < VGC_SHARE_WIN)
        return;
    int64_t share = d->win_busy * (VGC_PPM / 1000) / ((now - d->win_start) / 1000 + 1);
    if (d->board != NULL && d->slot >= 0)
        vgc_bd_heartbeat(&d->bd, d->slot, share, d->win_wanted ? d->p.share_ppm : 0, now);
    d->win_start = now;
    d->win_busy = 0;
    d->win_wanted = false;
}

static void settle_locked(const struct mark *m, CUresult r, float ms, int64_t t)
{
    struct cdev *d = &rt.dev[m->dev];
    bool alone = m->alone;
    int64_t measured = (int64_t)((double)ms * 1e6), split = -1;
    if (d->board != NULL && d->slot >= 0) {
        static struct vgc_view after; /* under rt.lock */
        vgc_bd_view(&d->bd, d->slot, t, &after);
        alone = alone && after.others_flips == m->before.others_flips;
        if (!alone && measured > VGC_LONG_NS)
            split = vgc_board_split(&m->before, &after, measured);
    }
    int64_t actual = m->pred;
    if (r == CUDA_SUCCESS)
        actual = vgc_observe(&rt.pred, m->key, measured, alone, split);
    vgc_settle(d->b, m->pred, actual);
    vgc_settle(&d->own, m->pred, actual);
    TRACE("t=%lld r=%d pred=%lld meas=%lld alone=%d split=%lld act=%lld credit=%lld\n",
          (long long)t, (int)r, (long long)m->pred, (long long)measured, (int)alone,
          (long long)split, (long long)actual, (long long)atomic_load(&d->b->credit_ns));
    d->inflight_n--;
    d->inflight_ns -= m->depth;
    if (d->inflight_n == 0)
        drained_locked(d, t);
    else if (d->turn) {
        vgc_turn_extend(d->board, rt.owner, t + VGC_TURN_GRACE_NS);
        d->turn_ext = t;
    }
    share_sample_locked(d, t, actual);
}

static void *poller(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    sigdelset(&all, SIGBUS); /* a truncated board mapping: vgc_guard_install's handler */
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    /* The poller's wake-up after a launch ends starts a turn's hand-over: no timer slack
     * on its sleeps (the default 50 us would leave the GPU idle that much longer). */
    (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    /* Never break another thread's global-mode capture. */
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    (void)REAL.cuThreadExchangeStreamCaptureMode(&mode);
    pthread_mutex_lock(&rt.lock);
    for (;;) {
        while (rt.count == 0) {
            int64_t t = now_ns() + VGC_IDLE_CHECK;
            for (int d = 0; d < REGION_MAX_DEVICES; d++) {
                struct cdev *cd = &rt.dev[d];
                if (cd->drained_at == 0)
                    continue;
                if (cd->inflight_n > 0) {
                    cd->drained_at = 0;
                } else if (now_ns() >= cd->drained_at + VGC_LINGER_NS) {
                    unkeep(cd); /* nothing more to launch: idle by choice */
                    turn_release_locked(cd);
                } else if (cd->drained_at + VGC_LINGER_NS < t) {
                    t = cd->drained_at + VGC_LINGER_NS;
                }
            }
            struct timespec ts = {.tv_sec = (time_t)(t / 1000000000),
                                  .tv_nsec = (long)(t % 1000000000)};
            if (pthread_cond_timedwait(&rt.work, &rt.lock, &ts) == ETIMEDOUT)
                for (int d = 0; d < REGION_MAX_DEVICES; d++)
                    if (rt.dev[d].on)
                        share_sample_locked(&rt.dev[d], now_ns(), 0);
        }
        struct mark *m = &rt.ring[rt.head]; /* stays put until head moves on */
        CUevent start = m->start, end = m->end;
        pthread_mutex_unlock(&rt.lock);
        CUresult r = REAL.cuEventSynchronize(end);
        float ms = 0;
        if (r == CUDA_SUCCESS)
            r = REAL.cuEventElapsedTime(&ms, start, end);
        int64_t t = now_ns();
        pthread_mutex_lock(&rt.lock);
        settle_locked(m, r, ms, t);
        CUcontext ctx = m->ctx;
        rt.head = (rt.head + 1) % VGC_RING;
        rt.count--;
        pthread_cond_broadcast(&rt.room);
        if (r == CUDA_SUCCESS) {
            event_put_locked(start, ctx);
            event_put_locked(end, ctx);
        } else {
            /* Their context may be gone: not reused. */
            event_lost_locked(start, ctx);
            event_lost_locked(end, ctx);
        }
    }
    return NULL;
}

/* ---- launches ---- */

struct vgc_launch {
    int dev;
    int64_t pred, depth;
    uint64_t key;
    CUcontext ctx;
    CUevent start, end;
    bool alone;
    bool closed; /* not timed by events: charged its wall time from t0 (fail-closed) */
    int64_t t0;
    struct vgc_view before;
};

/* Sleeps until both the container's credit and this process's own allow a launch; true
 * if it had to. */
static bool throttle(struct cdev *d)
{
    int64_t t0 = now_ns(), t = t0;
    for (;;) {
        bool due = vgc_tick_due(d->b, &d->p, t);
        if (d->p.mode == VGPU_COMPUTE_BURST &&
            (due || t - atomic_load(&d->own.tick_at) >= VGC_BURST_TICK_NS)) {
            int64_t others = 0;
            if (d->board != NULL) {
                pthread_mutex_lock(&rt.lock); /* the scan changes the neighbours */
                others = vgc_bd_others_share(&d->bd, d->container, t);
                pthread_mutex_unlock(&rt.lock);
            }
            (void)vgc_own_tick(&d->own, &d->p, t, others);
            if (due)
                vgc_tick(d->b, &d->p, t, others);
        } else if (due) {
            vgc_tick(d->b, &d->p, t, 0);
        }
        int64_t w = vgc_gate(d->b, &d->own, &d->p, t);
        if (w == 0)
            break;
        unkeep(d); /* what was kept is spent */
        pthread_mutex_lock(&rt.lock);
        d->throttled = true;
        if (d->turn && d->inflight_n == 0)
            turn_release_locked(d);
        pthread_mutex_unlock(&rt.lock);
        TRACE("throttle t=%lld w=%lld rate=%lld\n", (long long)t, (long long)w,
              (long long)vgc_rate(d->b, &d->p));
        sleep_until(t + w);
        t = now_ns();
    }
    if (t > t0)
        atomic_fetch_add_explicit(&d->b->waited_ns, t - t0, memory_order_relaxed);
    return t > t0;
}

static CUresult record(CUevent ev, CUstream s, bool ptsz)
{
    return ptsz ? REAL.cuEventRecord_ptsz(ev, s) : REAL.cuEventRecord(ev, s);
}

/* Gates a launch; false: forward it untouched (not limited, or capturing). A launch the
 * limiter cannot time (no events, no board slot, no board, no poller) is still gated, and
 * then charged its wall time, serialised (L->closed): never forwarded unthrottled. */
static bool vgc_begin(struct vgc_launch *L, CUstream s, bool ptsz, uint64_t key)
{
    CUcontext ctx;
    int regdev;
    if (lv_current(&ctx, &regdev, NULL) != CUDA_SUCCESS || regdev < 0 ||
        regdev >= REGION_MAX_DEVICES || !rt.dev[regdev].on)
        return false;
    lv_limits_check(); /* a resized share applies from this launch on */
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult cr = ptsz ? REAL.cuStreamIsCapturing_ptsz(s, &cs) : REAL.cuStreamIsCapturing(s, &cs);
    if (cr != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    struct cdev *d = &rt.dev[regdev];

    pthread_mutex_lock(&rt.lock);
    if (!rt.poller_running) {
        pthread_t th;
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        rt.poller_running = pthread_create(&th, &a, poller, NULL) == 0;
        pthread_attr_destroy(&a);
    }
    if (d->board != NULL && d->bd.plugin && now_ns() - d->bd.scanned_at >= VGC_SCAN_NS)
        vgc_bd_scan(&d->bd, now_ns()); /* containers come and go */
    if (d->board != NULL && d->slot < 0) {
        d->slot = vgc_bd_claim(&d->bd, rt.owner, d->container, now_ns());
        /* Its environment may have lowered a high container's priority for it. */
        if (d->slot >= 0)
            vgc_bd_mark_low(&d->bd, d->slot, d->prio == VGPU_PRIORITY_LOW);
    }
    int64_t prio_until;
    (void)high_active_locked(d, now_ns(), &prio_until); /* d->high_near */
    bool known;
    int64_t pred = vgc_predict(&rt.pred, key, &known);
    /* A launch of unknown cost counts as a whole time slice until it is measured: a long
     * kernel never seen before must not be queued many deep on a guess. */
    int64_t depth = known ? pred : VGC_DEPTH_NS;
    if (known && vgc_predict_mean(&rt.pred, key) > depth)
        depth = vgc_predict_mean(&rt.pred, key); /* kernels whose length varies */
    /* Two launches may always be in flight: with one, a process whose launch fills the
     * depth by itself (a graph, a kernel of a slice or more) runs dry while its poller
     * settles it, and every launch it makes then arrives behind a neighbour's slice, so
     * none of its intervals is ever clean. */
    /* Beside a high-priority container a low one keeps at most VGC_PRIO_LOW_DEPTH_NS of
     * work queued (at least one launch): that is what a high burst may find ahead of it.
     * What is left of the queue is counted from the predictions (queue_end), so the next
     * launch goes when the queue is that short, without waiting for the poller to settle
     * the one before (a wake-up that would leave the GPU idle). */
    if (d->prio == VGPU_PRIORITY_LOW && d->high_near) {
        for (;;) {
            int64_t t = now_ns(), left = d->queue_end > t ? d->queue_end - t : 0;
            if (d->inflight_n == 0 ||
                (left + depth <= VGC_PRIO_LOW_DEPTH_NS && rt.count < VGC_MAX_INFLIGHT))
                break;
            d->win_wanted = true;
            int64_t w =
                t + (left + depth > VGC_PRIO_LOW_DEPTH_NS ? left + depth - VGC_PRIO_LOW_DEPTH_NS
                                                          : VGC_PRIO_POLL_NS);
            struct timespec ts = {.tv_sec = (time_t)(w / 1000000000),
                                  .tv_nsec = (long)(w % 1000000000)};
            (void)pthread_cond_timedwait(&rt.room, &rt.lock, &ts);
        }
    }
    while (d->inflight_n > 1 &&
           (d->inflight_ns + depth > (d->turn ? VGC_TURN_DEPTH_NS : VGC_DEPTH_NS) ||
            rt.count >= VGC_MAX_INFLIGHT)) {
        d->win_wanted = true;
        pthread_cond_wait(&rt.room, &rt.lock);
    }
    enum vgc_closed closed = !rt.poller_running ? VGC_CLOSED_POLLER
                             : d->board == NULL ? VGC_CLOSED_BOARD
                             : d->slot < 0      ? VGC_CLOSED_SLOT
                                                : 0;
    CUevent e0 = NULL, e1 = NULL;
    if (closed == 0) {
        /* The reserve's events come back as launches settle: wait for them. */
        struct ctx_events *ce = events_locked(ctx);
        while (ce != NULL && ce->n < 2 && ce->made >= 2)
            pthread_cond_wait(&rt.room, &rt.lock);
        if (ce == NULL || ce->n < 2) {
            closed = VGC_CLOSED_EVENTS;
        } else {
            e1 = ce->ev[--ce->n];
            e0 = ce->ev[--ce->n];
        }
    }
    pthread_mutex_unlock(&rt.lock);

    bool waited = throttle(d);

    pthread_mutex_lock(&rt.lock);
    d->throttled = false;
    int64_t owed = 0;
    for (;;) {
        if (d->prio == VGPU_PRIORITY_LOW)
            prio_hold_locked(d);
        owed = turn_enter_locked(d);
        /* A high-priority container that became active while this one waited for its
         * turn goes first. */
        if (d->prio != VGPU_PRIORITY_LOW || !high_active_locked(d, now_ns(), &prio_until))
            break;
        if (d->turn && d->inflight_n == 0)
            turn_release_locked(d);
    }
    if (owed > 0)
        keep_locked(d, owed);
    vgc_charge(d->b, pred);
    vgc_charge(&d->own, pred);
    d->win_wanted = d->win_wanted || waited;
    int64_t t = now_ns();
    if (d->inflight_n == 0 && d->prio_drain_at != 0) {
        /* How long after its last drain this high process launched again. */
        if (t - d->prio_drain_at < VGC_PRIO_GAP_NS)
            d->prio_gaps = 0;
        else if (d->prio_gaps < VGC_PRIO_GAPS)
            d->prio_gaps++;
    }
    if (d->inflight_n++ == 0 && d->board != NULL && d->slot >= 0)
        vgc_bd_set_pending(&d->bd, d->slot, true, t);
    d->inflight_ns += depth;
    d->queue_end = (d->queue_end > t && d->inflight_n > 1 ? d->queue_end : t) + depth;
    if (d->prio == VGPU_PRIORITY_HIGH && d->board != NULL)
        vgc_bd_note_busy(&d->bd, d->queue_end); /* low ones go when it should be done */
    struct vgc_view *v = &L->before;
    if (d->board != NULL && d->slot >= 0) {
        vgc_bd_view(&d->bd, d->slot, t, v);
    } else {
        memset(v, 0, sizeof *v);
    }
    pthread_mutex_unlock(&rt.lock);

    L->dev = regdev;
    L->pred = pred;
    L->depth = depth;
    L->key = key;
    L->ctx = ctx;
    L->start = e0;
    L->end = e1;
    L->alone = !v->others_pending;
    L->closed = closed != 0;
    L->t0 = now_ns();
    if (closed == 0 && record(e0, s, ptsz) != CUDA_SUCCESS) {
        pthread_mutex_lock(&rt.lock);
        event_lost_locked(e0, ctx);
        event_put_locked(e1, ctx);
        pthread_mutex_unlock(&rt.lock);
        closed = VGC_CLOSED_RECORD;
        L->closed = true;
    }
    if (closed != 0)
        closed_note(d, closed);
    return true;
}

/* A launch the limiter could not time: it waits for the context's work to finish and is
 * charged the wall time from its gate to then, which covers its own GPU time and more. */
static CUresult end_closed(struct vgc_launch *L, CUresult r)
{
    struct cdev *d = &rt.dev[L->dev];
    int64_t actual = 0;
    if (r == CUDA_SUCCESS) {
        (void)REAL.cuCtxSynchronize();
        actual = now_ns() - L->t0;
    }
    int64_t t = now_ns();
    pthread_mutex_lock(&rt.lock);
    vgc_settle(d->b, L->pred, actual);
    vgc_settle(&d->own, L->pred, actual);
    d->inflight_ns -= L->depth;
    if (--d->inflight_n == 0) {
        drained_locked(d, t);
        if (d->slot < 0 || !rt.poller_running)
            turn_release_locked(d); /* no poller or slot to give it back later */
        pthread_cond_signal(&rt.work);
    }
    share_sample_locked(d, t, actual);
    pthread_cond_broadcast(&rt.room);
    pthread_mutex_unlock(&rt.lock);
    return r;
}

static CUresult vgc_end(struct vgc_launch *L, CUstream s, bool ptsz, CUresult r)
{
    struct cdev *d = &rt.dev[L->dev];
    if (!L->closed && r == CUDA_SUCCESS && record(L->end, s, ptsz) != CUDA_SUCCESS) {
        pthread_mutex_lock(&rt.lock);
        event_put_locked(L->start, L->ctx);
        event_lost_locked(L->end, L->ctx);
        pthread_mutex_unlock(&rt.lock);
        L->closed = true;
        closed_note(d, VGC_CLOSED_RECORD);
    }
    if (L->closed)
        return end_closed(L, r);
    bool tracked = r == CUDA_SUCCESS;
    pthread_mutex_lock(&rt.lock);
    if (tracked) {
        struct mark *m = &rt.ring[(rt.head + rt.count) % VGC_RING];
        m->start = L->start;
        m->end = L->end;
        m->ctx = L->ctx;
        m->dev = L->dev;
        m->pred = L->pred;
        m->depth = L->depth;
        m->key = L->key;
        m->alone = L->alone;
        m->before = L->before;
        rt.count++;
        pthread_cond_signal(&rt.work);
    } else {
        /* Failed launch: nothing ran, nothing is owed. */
        vgc_settle(d->b, L->pred, 0);
        vgc_settle(&d->own, L->pred, 0);
        d->inflight_ns -= L->depth;
        if (--d->inflight_n == 0)
            drained_locked(d, now_ns());
        event_put_locked(L->start, L->ctx);
        event_put_locked(L->end, L->ctx);
        pthread_cond_broadcast(&rt.room);
    }
    pthread_mutex_unlock(&rt.lock);
    return r;
}

/* ---- the wrappers ---- */

#define VGC_FAST(name, ...)                                                                        \
    do {                                                                                           \
        if (LV_LIKELY(atomic_load_explicit(&vgc_active, memory_order_relaxed) == 0)) {             \
            __typeof__(REAL.name) fn_ = REAL.name;                                                 \
            if (LV_LIKELY(fn_ != NULL))                                                            \
                return fn_(__VA_ARGS__);                                                           \
        }                                                                                          \
        return slow_##name(__VA_ARGS__);                                                           \
    } while (0)

/* The limited paths (and the first call, before the driver is loaded) stay out of line,
 * so that the wrappers' fast path is a load, two tests and a jump, saving no registers. */
#define VGC_SLOW __attribute__((noinline))

/* In the slow path with no limit armed: the driver's entry points were not loaded yet.
 * Each wrapper's slow path has the wrapper's own signature, so reaching it is one jump. */
static void load_if_off(void)
{
    if (atomic_load_explicit(&vgc_active, memory_order_relaxed) == 0)
        (void)lv_load_real();
}

static CUresult launch_grid(bool ptsz, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s,
                            void **params, void **extra)
{
    load_if_off();
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    struct vgc_launch L;
    bool on = vgc_begin(&L, s, ptsz, vgc_key(f, dims));
    CUresult r = ptsz ? REAL.cuLaunchKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params, extra)
                      : REAL.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
    return on ? vgc_end(&L, s, ptsz, r) : r;
}

VGC_SLOW static CUresult slow_cuLaunchKernel(CUfunction f, unsigned int gridDimX,
                                             unsigned int gridDimY, unsigned int gridDimZ,
                                             unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes,
                                             CUstream hStream, void **kernelParams, void **extra)
{
    return launch_grid(false, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra);
}

LV_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                  unsigned int gridDimZ, unsigned int blockDimX,
                                  unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream,
                                  void **kernelParams, void **extra)
{
    VGC_FAST(cuLaunchKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
             sharedMemBytes, hStream, kernelParams, extra);
}

VGC_SLOW static CUresult slow_cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                  unsigned int gridDimY, unsigned int gridDimZ,
                                                  unsigned int blockDimX, unsigned int blockDimY,
                                                  unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void **kernelParams, void **extra)
{
    return launch_grid(true, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams, extra);
}

LV_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX,
                                       unsigned int blockDimY, unsigned int blockDimZ,
                                       unsigned int sharedMemBytes, CUstream hStream,
                                       void **kernelParams, void **extra)
{
    VGC_FAST(cuLaunchKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
             sharedMemBytes, hStream, kernelParams, extra);
}

static CUresult launch_ex(bool ptsz, const CUlaunchConfig *config, CUfunction f, void **params,
                          void **extra)
{
    load_if_off();
    if (config == NULL)
        return ptsz ? REAL.cuLaunchKernelEx_ptsz(config, f, params, extra)
                    : REAL.cuLaunchKernelEx(config, f, params, extra);
    unsigned dims[6] = {config->gridDimX,  config->gridDimY,  config->gridDimZ,
                        config->blockDimX, config->blockDimY, config->blockDimZ};
    struct vgc_launch L;
    bool on = vgc_begin(&L, config->hStream, ptsz, vgc_key(f, dims));
    CUresult r = ptsz ? REAL.cuLaunchKernelEx_ptsz(config, f, params, extra)
                      : REAL.cuLaunchKernelEx(config, f, params, extra);
    return on ? vgc_end(&L, config->hStream, ptsz, r) : r;
}

VGC_SLOW static CUresult slow_cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
                                               void **kernelParams, void **extra)
{
    return launch_ex(false, config, f, kernelParams, extra);
}

LV_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                    void **extra)
{
    VGC_FAST(cuLaunchKernelEx, config, f, kernelParams, extra);
}

VGC_SLOW static CUresult slow_cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                                    void **kernelParams, void **extra)
{
    return launch_ex(true, config, f, kernelParams, extra);
}

LV_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                         void **kernelParams, void **extra)
{
    VGC_FAST(cuLaunchKernelEx_ptsz, config, f, kernelParams, extra);
}

static CUresult launch_coop(bool ptsz, CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                            unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s,
                            void **params)
{
    load_if_off();
    unsigned dims[6] = {gx, gy, gz, bx, by, bz};
    struct vgc_launch L;
    bool on = vgc_begin(&L, s, ptsz, vgc_key(f, dims));
    CUresult r =
        ptsz ? REAL.cuLaunchCooperativeKernel_ptsz(f, gx, gy, gz, bx, by, bz, shm, s, params)
             : REAL.cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shm, s, params);
    return on ? vgc_end(&L, s, ptsz, r) : r;
}

VGC_SLOW static CUresult
slow_cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    return launch_coop(false, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams);
}

LV_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                             unsigned int gridDimY, unsigned int gridDimZ,
                                             unsigned int blockDimX, unsigned int blockDimY,
                                             unsigned int blockDimZ, unsigned int sharedMemBytes,
                                             CUstream hStream, void **kernelParams)
{
    VGC_FAST(cuLaunchCooperativeKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
             blockDimZ, sharedMemBytes, hStream, kernelParams);
}

VGC_SLOW static CUresult slow_cuLaunchCooperativeKernel_ptsz(
    CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
    unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
    unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
    return launch_coop(true, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                       sharedMemBytes, hStream, kernelParams);
}

LV_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                  unsigned int gridDimY, unsigned int gridDimZ,
                                                  unsigned int blockDimX, unsigned int blockDimY,
                                                  unsigned int blockDimZ,
                                                  unsigned int sharedMemBytes, CUstream hStream,
                                                  void **kernelParams)
{
    VGC_FAST(cuLaunchCooperativeKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
             blockDimZ, sharedMemBytes, hStream, kernelParams);
}

/* A graph exec's cost is learned per exec, like a kernel's per (function, shape). */
static CUresult launch_graph(bool ptsz, CUgraphExec g, CUstream s)
{
    load_if_off();
    static const unsigned graph_dims[6] = {~0u, ~0u, ~0u, 0, 0, 0};
    struct vgc_launch L;
    bool on = vgc_begin(&L, s, ptsz, vgc_key(g, graph_dims));
    CUresult r = ptsz ? REAL.cuGraphLaunch_ptsz(g, s) : REAL.cuGraphLaunch(g, s);
    return on ? vgc_end(&L, s, ptsz, r) : r;
}

VGC_SLOW static CUresult slow_cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return launch_graph(false, hGraphExec, hStream);
}

static CUresult graph_launch(CUgraphExec hGraphExec, CUstream hStream)
{
    VGC_FAST(cuGraphLaunch, hGraphExec, hStream);
}

/* A launch maps what the graph allocates into the device's graph pool: re-read it. */
LV_EXPORT CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult r = graph_launch(hGraphExec, hStream);
    if (LV_UNLIKELY(atomic_load_explicit(&lv_g.graph_mem, memory_order_relaxed)))
        lv_graph_resync_all();
    return r;
}

VGC_SLOW static CUresult slow_cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return launch_graph(true, hGraphExec, hStream);
}

static CUresult graph_launch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    VGC_FAST(cuGraphLaunch_ptsz, hGraphExec, hStream);
}

LV_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    CUresult r = graph_launch_ptsz(hGraphExec, hStream);
    if (LV_UNLIKELY(atomic_load_explicit(&lv_g.graph_mem, memory_order_relaxed)))
        lv_graph_resync_all();
    return r;
}
