/* libvgpu's compute-share limiter (docs/compute.md has the algorithm and its limits).
 *
 * Two halves:
 * - The controller core (compute_core.c): pure functions over the container's budget
 *   (struct region_compute, in the shared region), a cost predictor and the node-wide
 *   board, with the time passed in. Unit tests drive it in virtual time.
 * - The runtime (compute.c): the launch wrappers, timing events around each limited
 *   launch, and one poller thread per process that settles completed launches.
 *
 * Units: times and costs in nanoseconds of CLOCK_MONOTONIC (one clock for the whole
 * host, so processes of different containers compare them directly); rates and shares in
 * parts per million of the GPU's time. */
#ifndef VGPU_LIBVGPU_COMPUTE_H
#define VGPU_LIBVGPU_COMPUTE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "libvgpu/config.h"
#include "region/region.h"

#define VGC_PPM           INT64_C(1000000)
#define VGC_DEPTH_NS      INT64_C(4000000)    /* predicted work in flight per process */
#define VGC_MAX_INFLIGHT  128                 /* launches in flight per process */
#define VGC_CAP_NS        INT64_C(50000000)   /* credit ceiling: 50 ms x share ... */
#define VGC_CAP_MIN_NS    INT64_C(4000000)    /* ... but at least 4 ms */
#define VGC_TICK_NS       INT64_C(100000000)  /* PI trim period */
#define VGC_BURST_TICK_NS INT64_C(20000000)   /* burst-rate period */
#define VGC_WINDOW_NS     INT64_C(1000000000) /* achieved-share averaging window */
#define VGC_TRIM_MIN_PPM  700000              /* refill rate within [0.7, 1.3] x share */
#define VGC_TRIM_MAX_PPM  1300000
#define VGC_BURST_MARGIN  20000           /* burst leaves 2 % of the GPU unclaimed */
#define VGC_DEFAULT_COST  INT64_C(100000) /* prediction for a launch never seen */

/* ---- the budget (one per container per device, in the region) ----
 *
 * Every process of the container can write the region, so no field of its budget decides
 * how much a process gets: each read below is bounded by what the process's own,
 * read-only limits allow (vgc_params), and each process keeps a second bucket of the same
 * shape in its own memory (its own bucket, never in the region), refilled at the rate its
 * limits allow and charged with its own launches only. A launch waits for both; the
 * shared one splits the share between the container's processes, the own one is the
 * authority (docs/compute.md, "Who decides the budget"). */

struct vgc_params {
    int64_t share_ppm; /* the container's share, 1..1e6 */
    int64_t burst_ppm; /* burst ceiling (>= share); = share in hard mode */
    enum vgpu_compute_mode mode;
    /* Credit kept above the ceiling: what this process earned while it waited for its turn
     * on the GPU and has not spent yet (0: none). Written and read with __atomic builtins
     * (the launching threads read it without a lock). */
    int64_t kept_ns;
    /* When this process last waited for its turn (0: never). The PI trim holds the rate
     * at the share for VGC_WINDOW_NS after. Same access as kept_ns. */
    int64_t turn_wait_at;
};

/* At most this long a wait's earnings stay kept above the ceiling (x the share). */
#define VGC_KEEP_MAX_NS INT64_C(250000000)
/* A debt counts as at most this much: a forged one cannot overflow the wait's arithmetic
 * or stall the container for longer than it repays (a kernel of more than 100 s of GPU
 * time is forgiven the rest). */
#define VGC_DEBT_MAX_NS INT64_C(100000000000)

/* The least and the most refill rate the limits allow (ppm): hard mode 0.7 .. 1.3 x the
 * share (the PI trim's range), burst mode the share .. the burst ceiling. */
int64_t vgc_rate_min(const struct vgc_params *p);
int64_t vgc_rate_max(const struct vgc_params *p);
/* The credit ceiling in force: vgc_cap_ns of the share (burst mode: of the burst
 * ceiling), raised by p->kept_ns. */
int64_t vgc_cap_for(const struct vgc_params *p);
/* The credit as the limits allow it to be read: within -VGC_DEBT_MAX_NS .. vgc_cap_for. */
int64_t vgc_credit(struct region_compute *b, const struct vgc_params *p);

/* Credit ceiling for a share: idle time banks at most this much. */
int64_t vgc_cap_ns(int64_t share_ppm);

/* The refill rate in force (ppm), within vgc_rate_min .. vgc_rate_max whatever the field
 * holds (0 or less: the share). */
int64_t vgc_rate(struct region_compute *b, const struct vgc_params *p);

/* Adds rate x (now - last refill) to the credit, up to the ceiling (raised by p->kept_ns). */
void vgc_refill(struct region_compute *b, const struct vgc_params *p, int64_t now);
/* The same, the ceiling raised by owed_ns more: time the container waited for its turn on
 * the GPU (vgc_turn_take) was not idle by choice, and what it earned meanwhile is kept. */
void vgc_refill_owed(struct region_compute *b, const struct vgc_params *p, int64_t now,
                     int64_t owed_ns);

/* Charges a predicted cost at launch (debt allowed). Like vgc_settle it saturates instead
 * of wrapping: a forged credit at the type's end must not turn into its opposite. */
void vgc_charge(struct region_compute *b, int64_t cost_ns);

/* Settles a completed launch: gives back predicted - actual and counts actual as busy. */
void vgc_settle(struct region_compute *b, int64_t predicted_ns, int64_t actual_ns);

/* How long a launch must wait for the credit to be back at zero (0: go now). */
int64_t vgc_wait_ns(struct region_compute *b, const struct vgc_params *p);

/* What is kept above the ceiling after this process waited waited_ns for its turn (for
 * p->kept_ns): the share's earnings meanwhile (burst mode too) and what was kept before
 * and not spent, at most VGC_KEEP_MAX_NS x the share. b is the process's own bucket (the
 * container's would let a forged credit keep what was spent). */
int64_t vgc_keep(struct region_compute *b, const struct vgc_params *p, int64_t waited_ns);

/* A process's own bucket has the same shape as the container's, in process memory, and
 * goes through the same functions. Its rate is the share in hard mode (no trim); in burst
 * mode what vgc_own_tick sets from this process's own view of the board. vgc_own_tick
 * sets it, at most every VGC_BURST_TICK_NS, to 1 - others_ppm - VGC_BURST_MARGIN within
 * the share .. the burst ceiling, and cuts its credit to that rate's ceiling, as the
 * container's tick does; nothing in hard mode. True when it did. */
bool vgc_own_tick(struct region_compute *own, const struct vgc_params *p, int64_t now,
                  int64_t others_ppm);
/* True when the container's control tick is due at now (vgc_tick would run it); a tick
 * time from the future (forged) counts as due. */
bool vgc_tick_due(struct region_compute *b, const struct vgc_params *p, int64_t now);
/* Refills both buckets to now; how long a launch must wait until both allow it. */
int64_t vgc_gate(struct region_compute *shared, struct region_compute *own,
                 const struct vgc_params *p, int64_t now);

/* The control tick, at most every VGC_TICK_NS (VGC_BURST_TICK_NS in burst mode), run by
 * whichever process claims it: updates the achieved share, the PI trim (hard mode: frozen
 * while the container did not wait, demand-limited; the rate held at the share within
 * VGC_WINDOW_NS of the caller's last wait for its turn, p->turn_wait_at) and, in burst
 * mode, the rate from the share the other containers used (others_ppm). Returns true
 * when this call ran it. */
bool vgc_tick(struct region_compute *b, const struct vgc_params *p, int64_t now,
              int64_t others_ppm);

/* ---- the cost predictor (per process) ---- */

#define VGC_PRED_SLOTS 1024

#define VGC_LONG_NS     INT64_C(8000000) /* a contended interval this long is split */
#define VGC_PRED_WINDOW 32               /* contended launches per upward step of the estimate */

struct vgc_pred_entry {
    uint64_t key;    /* 0: free */
    int64_t est_ns;  /* the cost estimate */
    int64_t win_min; /* the least contended interval of the current window */
    uint32_t win_n;  /* contended launches longer than the estimate, in a row */
    uint32_t seen;
    int64_t mean_ns; /* the mean of what its launches were charged (1/8 per launch) */
};

struct vgc_pred {
    struct vgc_pred_entry e[VGC_PRED_SLOTS];
    int64_t recent_ns; /* mean of recent launches of any key: the guess for a new key */
};

void vgc_pred_init(struct vgc_pred *p);
/* Key of a kernel launch (function and shape) or a graph exec. Never 0. */
uint64_t vgc_key(const void *fn, const unsigned dims[6]);
/* Predicted cost of one launch of key; *known: key was measured before (otherwise the
 * prediction is a guess from recent launches). */
int64_t vgc_predict(const struct vgc_pred *p, uint64_t key, bool *known);
/* The mean cost of key's launches (0: never measured): what a launch is expected to add to
 * the work in flight, where the estimate above is about the fastest run. */
int64_t vgc_predict_mean(const struct vgc_pred *p, uint64_t key);

/* What a completed launch really cost. measured: its start-to-end time from the
 * limiter's events. alone: no other context had work pending meanwhile, so measured is
 * this context's GPU time and is charged as it is. Otherwise measured may also cover
 * other contexts' time slices. Contention only ever lengthens an interval, so the key's
 * cost estimate tracks the least interval seen: a shorter one replaces it at once, an
 * alone one moves it halfway up, and contended ones can raise it only slowly (by at most
 * 1/16 after VGC_PRED_WINDOW of them in a row, none shorter, so a genuinely slower kernel
 * is learned but a run of inflated intervals barely moves it). A contended launch is
 * charged the estimate (never more than measured). A contended launch longer than
 * VGC_LONG_NS is always inflated by other contexts' slices, so there split_ns (>= 0, from
 * vgc_board_split) is charged instead and the estimate follows it. Updates the predictor. */
int64_t vgc_observe(struct vgc_pred *p, uint64_t key, int64_t measured_ns, bool alone,
                    int64_t split_ns);

/* ---- the board: one small file per GPU for the whole node ---- */

#define VGC_BOARD_MAGIC UINT64_C(0x3264726f62636776) /* "vgcbord2" */
#define VGC_BOARD_SLOTS 64
#define VGC_STALE_NS    INT64_C(1000000000) /* a slot not heard from for 1 s is ignored */
#define VGC_RECLAIM_NS  INT64_C(5000000000) /* ... and taken over after 5 s */

struct vgc_board_slot {
    _Atomic uint64_t owner;     /* 0: free */
    _Atomic uint64_t container; /* the container's region file identity */
    _Atomic int64_t heartbeat;  /* last time the owner wrote */
    _Atomic uint64_t flips;     /* pending changes so far */
    _Atomic uint32_t pending;   /* the owner has work queued on the GPU */
    _Atomic uint32_t claim_ppm; /* its container's share while the owner wants more */
    _Atomic int64_t share_ppm;  /* the owner's recent share of the GPU */
    _Atomic int64_t pend_ns;    /* time pending so far, up to the last clear */
    _Atomic int64_t pend_since; /* when pending was last set */
};

struct vgc_board {
    _Atomic uint64_t magic;
    /* The turn (vgc_turn_*): the owner id holding it (0: free), when it expires unless
     * extended, a futex word bumped at each release, and how many processes wait. */
    _Atomic uint64_t turn;
    _Atomic int64_t turn_until;
    _Atomic uint32_t turn_seq;
    _Atomic uint32_t turn_waiters;
    /* The waiter the turn goes to next (0: any) and its key: the time its credit was
     * last at zero, so the one furthest behind its share goes first. */
    _Atomic uint64_t turn_next;
    _Atomic int64_t turn_next_key;
    uint64_t spare[2];
    struct vgc_board_slot slots[VGC_BOARD_SLOTS];
};

_Static_assert(sizeof(struct vgc_board_slot) == 64, "board slot layout");

/* What the other slots look like now (with the device plugin's board: the other
 * containers, each entry one container's processes together). */
struct vgc_view {
    bool others_pending;
    unsigned others_pending_n; /* how many other contexts have work pending */
    uint64_t others_flips;
    int64_t pend[VGC_BOARD_SLOTS];  /* each entry's pending time so far (-1: none) */
    int32_t bound[VGC_BOARD_SLOTS]; /* the most of the GPU each entry may take (ppm) */
};

/* Claims a free or abandoned slot; its index, or -1 when all are live. */
int vgc_board_claim(struct vgc_board *b, uint64_t owner, uint64_t container, int64_t now);
void vgc_board_release(struct vgc_board *b, int slot, uint64_t owner);
/* Marks the slot pending or not (counts a flip, refreshes the heartbeat). */
void vgc_board_set_pending(struct vgc_board *b, int slot, bool pending, int64_t now);
/* Publishes the owner's recent share and its claim: its container's share when it wanted
 * more than it got in the last window (work waiting on the credit or the depth bound),
 * else 0. */
void vgc_board_heartbeat(struct vgc_board *b, int slot, int64_t share_ppm, int64_t claim_ppm,
                         int64_t now);
void vgc_board_view(const struct vgc_board *b, int slot, int64_t now, struct vgc_view *v);
/* A slot's total pending time up to now. */
int64_t vgc_board_pend(const struct vgc_board_slot *s, int64_t now);
/* The GPU time of a launch of this slot that took measured_ns while the board went from
 * view `before` to view `after` (taken at the launch and at its settlement): in a round
 * robin, time in which the other contexts j were pending a fraction f_j of it is shared,
 * and this context gets measured x E[1 / (1 + X)], X the number of others pending, each
 * independently with probability f_j. Exact for one other context; for kernels longer
 * than a few time slices (a short one is charged by vgc_observe's estimate instead). */
int64_t vgc_board_split(const struct vgc_view *before, const struct vgc_view *after,
                        int64_t measured_ns);
/* What the other containers take or claim (ppm): per container, the larger of its
 * processes' recent shares summed and its claim. A returning owner's claim shows at once,
 * whatever a borrower leaves it. */
int64_t vgc_board_others_share(const struct vgc_board *b, uint64_t container, int64_t now);

/* ---- turns: one limited process at a time queues work on the GPU ----
 *
 * Without MPS the driver time-slices the contexts that have work pending, so an event
 * interval of a launch made beside a busy neighbour also covers the neighbour's slices.
 * Limited processes therefore take exclusive turns through the board: a process queues
 * work only while it holds the turn and gives it back when its queue drains (its credit
 * ran out, it had nothing more to launch, or it held the turn VGC_TURN_NS while others
 * waited and stopped queuing). Every interval is then the launch's own GPU time. A turn
 * held by a dead process expires VGC_TURN_GRACE_NS after its holder last extended it. */
#define VGC_TURN_NS       INT64_C(40000000)  /* a turn while others wait */
#define VGC_TURN_GRACE_NS INT64_C(200000000) /* a holder not heard from this long lost it */

/* Takes the turn for owner when it is free, expired, or owner's already; extends it to
 * until. True when owner holds it. */
bool vgc_turn_take(struct vgc_board *b, uint64_t owner, int64_t now, int64_t until);
/* Extends owner's turn to until (no-op when owner does not hold it). */
void vgc_turn_extend(struct vgc_board *b, uint64_t owner, int64_t until);
/* Takes the turn from holder `seen` whatever its expiry (a waiter disregards it: not
 * confirmed, idle, or past its container's allowance). True when owner now holds it. */
bool vgc_turn_seize(struct vgc_board *b, uint64_t owner, uint64_t seen, int64_t until);
/* Gives owner's turn back (no-op when owner does not hold it); true when it did and
 * processes are waiting (the caller wakes them on turn_seq). */
bool vgc_turn_release(struct vgc_board *b, uint64_t owner);

/* Opens (creating if needed) dir/<uuid>.board; NULL on failure (err set). */
struct vgc_board *vgc_board_open(const char *dir, const char *uuid, struct vg_err *err);

/* ---- the device plugin's board: a slot file per container ----
 *
 * In Kubernetes the device plugin makes <board>/<uuid>/ and in it one file per container
 * that has a share of that GPU, <name>.<percent>.slot (<name> the container's
 * <pod uid>_<container>, <percent> its share as the plugin decided it). It mounts the
 * board read-only into every container, and over it, writable, the container's own slot
 * file and the GPU's turn file (<uuid>.board, whose slots then go unused). A container
 * can write its own process slots and the turn, nothing else. Readers trust neither:
 * every slot is validated as it is read (vgc_slot_read: nonsense counts as absent), a
 * container's share and claim are bounded by its decided share (from the name, which only
 * the plugin can write), and a turn is bounded in time by its waiters (compute.c). Without
 * <board>/<uuid>/ (no device plugin) the slots are the turn file's own, self-organised
 * as before: every process trusts every other. */
#define VGC_SLOT_MAGIC UINT64_C(0x31746f6c73636776) /* "vgcslot1" */
#define VGC_CTR_PROCS  16                           /* process slots per container */
#define VGC_NAME_MAX   160                          /* a container's name, with its NUL */
#define VGC_SKEW_NS    INT64_C(10000000)  /* a time this far ahead of the reader's is forged */
#define VGC_SCAN_NS    INT64_C(200000000) /* the board's directory is read this often */

struct vgc_slot_file {
    _Atomic uint64_t magic;
    /* Bit k: the process of procs[k] holds (or is taking) the GPU's turn. Set before the
     * turn word names it, cleared after the word no longer does: a turn counts only when
     * its holder's own file confirms it (vgc_bd_turn_confirm). */
    _Atomic uint64_t turn_held;
    /* Priority (docs/compute.md, "Priority"). The file's name says the container's
     * priority as the plugin decided it (".high"); low_mask bit k: the process of procs[k]
     * runs at low priority all the same (its environment lowered it), which only lowers.
     * idle_at: when a high-priority process of the container last drained its queue (a
     * time in the future counts as absent); busy_until: when the work its high processes
     * queued should be done, by their predictions (the latest; 0: none yet). */
    _Atomic uint64_t low_mask;
    _Atomic int64_t idle_at;
    _Atomic int64_t busy_until;
    uint64_t spare[3];
    struct vgc_board_slot procs[VGC_CTR_PROCS];
};

/* Parses a slot file's name "<name>.<percent>.slot" or "<name>.<percent>.high.slot": the
 * container's name (letters, digits, '-', '_'; at most VGC_NAME_MAX - 1 bytes), its
 * decided share (1..100 %, no leading zero) in ppm and, when high is not NULL, whether
 * the plugin gave it high priority (".high"). 0, or -EINVAL with err set. */
int vgc_slot_name_parse_prio(const char *fname, char *name, size_t name_size, int64_t *share_ppm,
                             bool *high, struct vg_err *err);
int vgc_slot_name_parse(const char *fname, char *name, size_t name_size, int64_t *share_ppm,
                        struct vg_err *err);

/* One process slot as a reader may use it. */
struct vgc_slot_seen {
    uint64_t container;
    uint64_t flips;
    int64_t pend;      /* its pending time so far */
    int64_t share_ppm; /* within 0..bound */
    int64_t claim_ppm; /* within 0..bound */
    bool pending;
};
/* Reads slot s at now for a container that may take at most bound_ppm: false when it is
 * free, not heard from for VGC_STALE_NS, or holds nonsense (a heartbeat or a pending start
 * in the future, a negative pending time, a pending flag other than 0 or 1), which counts
 * as absent; otherwise its figures, clamped to 0..bound_ppm. */
bool vgc_slot_read(const struct vgc_board_slot *s, int64_t now, int64_t bound_ppm,
                   struct vgc_slot_seen *out);

/* ---- the turn's allowance: what one container's turns may keep a waiter waiting ----
 *
 * The turn word is writable by every limited container on the GPU, so nothing in it can
 * be trusted. A waiter counts a turn only when the holder's own slot file confirms it
 * (vgc_bd_turn_confirm; nobody else can write that file), and charges the time it waits
 * on a confirmed holder to the holder's container, against a token bucket refilled at
 * the container's decided share plus slack (VGC_ALLOW_SLACK_PPM and a quarter of the
 * share, for hand-overs and a holder's queue draining) and holding at most
 * VGC_ALLOW_BURST_NS plus VGC_ALLOW_BURST_SHARE_NS x the share (a turn of kept credit).
 * A container past it has its turns counted as expired until the bucket refills: over
 * any window T its turns keep a waiter at most rate x T + burst, whatever it writes. */
#define VGC_ALLOW_SLACK_PPM      10000
#define VGC_ALLOW_BURST_NS       INT64_C(50000000)
#define VGC_ALLOW_BURST_SHARE_NS INT64_C(200000000)

struct vgc_allow {
    int64_t tokens; /* ns of waiting still allowed */
    int64_t at;     /* refilled up to then (0: never used: a full bucket) */
};

/* The bucket's refill rate (ppm of wall time) and size for a container of share bound. */
int64_t vgc_allow_rate(int64_t bound_ppm);
int64_t vgc_allow_burst(int64_t bound_ppm);
/* Refills a to now, charges waited_ns; the ns of waiting left (<= 0: past it). */
int64_t vgc_allow_charge(struct vgc_allow *a, int64_t bound_ppm, int64_t now, int64_t waited_ns);

/* A neighbour container's slot file as one reader maps it (read-only). */
struct vgc_peer {
    const struct vgc_board_slot *slots;
    unsigned nslots;
    int64_t bound_ppm;     /* its decided share */
    uint64_t id;           /* the file's identity (device, inode) */
    void *map;             /* to unmap (NULL: the reader's own file, mapped writable) */
    bool seen;             /* in the directory at the last scan */
    bool high;             /* the plugin gave it high priority (its file's name) */
    struct vgc_allow turn; /* what its turns may still keep this reader waiting */
};

/* The board as one process sees it. */
struct vgc_bd {
    struct vgc_board *shared;  /* <uuid>.board: the turn (and, without the plugin, slots) */
    bool plugin;               /* <board>/<uuid>/ exists: per-container slot files */
    struct vgc_slot_file *own; /* plugin: this container's file (NULL: not found) */
    uint64_t own_id;
    int64_t scanned_at;
    unsigned n;
    struct vgc_peer p[VGC_BOARD_SLOTS];
    char dir[VGPU_CONFIG_PATH_MAX + REGION_UUID_MAX + 8];
    char name[VGC_NAME_MAX];
};

/* Opens dir's board for GPU uuid into bd: the turn file (vgc_board_open) and, with the
 * device plugin's layout, this container's slot file (name: its <pod uid>_<container>,
 * NULL or not found: no slot) and its neighbours'. 0, or negative with err set. */
int vgc_bd_open(struct vgc_bd *bd, const char *dir, const char *uuid, const char *name,
                struct vg_err *err);
/* A live resize's share on the board: the device plugin's symbolic link
 * <board>/<uuid>/<name>.share, whose target is the container's share in percent ("50"),
 * replaced by rename; it overrides the share of <name>'s slot file name. */
#define VGC_SHARE_SUFFIX ".share"
/* A share link's target: 1..100 (no sign, no leading zero) into *share_ppm; 0, or
 * -EINVAL (*share_ppm untouched). */
int vgc_share_link_parse(const char *target, int64_t *share_ppm);
/* Plugin layout: reads the directory again when it was last read VGC_SCAN_NS ago or more
 * (containers come and go); maps new neighbours, unmaps gone ones, and takes each
 * neighbour's share (its name, or its share link) and priority again. */
void vgc_bd_scan(struct vgc_bd *bd, int64_t now);
/* The slot functions above, over bd: slots are indices into this container's file with
 * the plugin, into the shared file without. */
int vgc_bd_claim(struct vgc_bd *bd, uint64_t owner, uint64_t container, int64_t now);
void vgc_bd_set_pending(struct vgc_bd *bd, int slot, bool pending, int64_t now);
/* Gives process slot `slot` back (its owner going away): free, nothing pending. */
void vgc_bd_release(struct vgc_bd *bd, int slot, uint64_t owner);
void vgc_bd_heartbeat(struct vgc_bd *bd, int slot, int64_t share_ppm, int64_t claim_ppm,
                      int64_t now);
void vgc_bd_view(const struct vgc_bd *bd, int slot, int64_t now, struct vgc_view *v);
/* Without the plugin as vgc_board_others_share; with it, over the other containers'
 * files, each bounded by its decided share (container is then unused). */
int64_t vgc_bd_others_share(const struct vgc_bd *bd, uint64_t container, int64_t now);

/* The peer (index into bd->p) whose file confirms that process `id` holds the turn: a
 * fresh, valid process slot owned by id whose turn_held bit is set (held false: the bit
 * is not needed, for the waiter named next); -1 when none does (a forged or a dead id).
 * *seen: that slot (its pending flag, flips). Plugin layout only. */
int vgc_bd_turn_confirm(const struct vgc_bd *bd, uint64_t id, bool held, int64_t now,
                        struct vgc_slot_seen *seen);
/* A process other than self whose own file says it holds the turn (a live, valid process
 * slot with its turn_held bit set), whatever the word says, in the peers from index `from`
 * on: its peer index and, in *id, its id; -1 when there is none. For a word that names
 * nobody (rewritten under its holder), the holder is found this way. */
int vgc_bd_turn_find(const struct vgc_bd *bd, uint64_t self, unsigned from, int64_t now,
                     uint64_t *id, struct vgc_slot_seen *seen);
/* Sets or clears this process's turn_held bit (slot: its index in its own file). */
void vgc_bd_turn_mark(struct vgc_bd *bd, int slot, bool held);

/* ---- priority: low-priority launches wait while a high-priority container works ----
 *
 * A container's priority for its neighbours is its slot file's name (only the plugin
 * writes names); a process can mark itself low in its own file (low_mask), never high.
 * A high-priority container is active while one of its high processes has work pending
 * (a valid, fresh slot) and its predicted end (busy_until) is not VGC_PRIO_IDLE_NS past,
 * or it drained less than VGC_PRIO_IDLE_NS ago (idle_at); low-priority
 * processes on the GPU hold their launches meanwhile, and keep at most
 * VGC_PRIO_LOW_DEPTH_NS of predicted work queued (at least one launch) while any
 * high-priority container is on the GPU, so that a high burst waits at most for that. */
#define VGC_PRIO_IDLE_NS      INT64_C(250000)   /* high idle this long: low goes again */
#define VGC_PRIO_LOW_DEPTH_NS INT64_C(800000)   /* low's queue beside a high container */
#define VGC_PRIO_POLL_NS      INT64_C(20000000) /* a held launch looks again at least this often */
/* A high process whose last VGC_PRIO_GAPS drains were each followed by VGC_PRIO_GAP_NS or
 * more before its next launch is idle as soon as its queue drains (no interval). */
#define VGC_PRIO_GAP_NS       INT64_C(1000000) /* a pause after a drain that ends a request */
#define VGC_PRIO_GAPS         4u               /* ... this many in a row */

/* Whether the process `slot` of peer i runs at high priority (its file's name says high,
 * and its low_mask bit is clear). */
bool vgc_bd_proc_high(const struct vgc_bd *bd, unsigned i, unsigned slot);
/* Whether process id (owner) of peer i runs at high priority; false when not found. */
bool vgc_bd_id_high(const struct vgc_bd *bd, unsigned i, uint64_t id);
/* Any high-priority container other than the reader's own on the GPU (*present), and
 * whether one is active at now; *until: when the active ones stop counting as active,
 * by their predictions and drain times (0: not known within VGC_PRIO_POLL_NS, or none is
 * active). Plugin layout only (false otherwise). */
bool vgc_bd_high_active(const struct vgc_bd *bd, int64_t now, bool *present, int64_t *until);
/* Sets (low) or clears this process's low_mask bit: set when it runs at low priority in a
 * file named high, cleared for any other new owner of the slot. */
void vgc_bd_mark_low(struct vgc_bd *bd, int slot, bool low);
/* A high process of this container drained its queue at now. */
void vgc_bd_note_idle(struct vgc_bd *bd, int64_t now);
/* A high process of this container queued work predicted to be done at until (kept when
 * an earlier one is later). */
void vgc_bd_note_busy(struct vgc_bd *bd, int64_t until);

/* Installs libvgpu's SIGBUS handler (once): a board mapping that a neighbour truncated
 * is replaced by zero pages (a free turn, empty slots) instead of killing the process;
 * any other SIGBUS goes to the handler before it, or kills the process as before. */
void vgc_guard_install(void);

/* ---- the runtime (compute.c) ---- */

/* Non-zero when some launch of this process may be limited: the one load the launch
 * wrappers make before forwarding. */
extern _Atomic int vgc_active;

/* Called by setup once the region is open: arms the limiter for limited devices. */
void vgc_setup(const struct vgpu_config *c, struct region *r, const char *region_path);
/* In a forked child: the parent's poller and in-flight work are not the child's. */
void vgc_after_fork(void);
/* A live resize's new share of region device d (percent; 0 or 100: the whole GPU) with
 * the burst limit (percent). Only a device limited since setup changes: its board slot
 * is the one the device plugin mounted then; a device set up without a share keeps none
 * until the container restarts. */
void vgc_set_share(unsigned d, uint32_t percent, uint32_t burst_limit);

#endif
