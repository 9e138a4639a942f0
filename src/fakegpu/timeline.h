/* fakegpu's shared-memory layout and the device timeline that runs over it.
 *
 * Everything here lives in the one mapped state file, so it holds no pointers: streams,
 * slots and events refer to each other by index. Kept apart from state.c so that the
 * timeline is a pure function of (layout, now) that tests drive with a fake clock, and
 * so that tests can inspect the layout (and hold the shared lock) directly.
 *
 * Timeline model (state.h's comment, made exact):
 * - A stream's head item starts no earlier than its submit time. Markers complete (their
 *   event gets the current simulated time) as soon as they are the head; a wait item
 *   blocks its stream until the awaited record of the event has completed.
 * - A GPU without MIG is one timeline. A GPU in MIG mode has one per MIG device (the
 *   streams of the processes bound to it, fg_mig_bind) and one for work on the whole GPU:
 *   instances never wait for each other, as real MIG isolates them. "Device" below means
 *   one timeline. (A kernel in an instance is stretched to its SM share by libcuda, at
 *   launch: the timeline only sees durations.)
 * - Each device runs one context (slot) at a time. All of that context's streams on the
 *   device with a startable kernel at their head progress together at full speed.
 * - A context keeps the device until its slice ends or it runs out of startable work;
 *   then the next slot in round-robin order (by slot index, after the current one) with
 *   startable work gets a fresh slice. A context alone on the device keeps it without
 *   slice boundaries until a competitor shows up, whose arrival starts a normal slice.
 * - Busy time (at least one kernel running) is added to the device's and the running
 *   slot's 10 ms buckets. */
#ifndef VGPU_FAKEGPU_TIMELINE_H
#define VGPU_FAKEGPU_TIMELINE_H

#include <pthread.h>
#include <stdint.h>

#include "fakegpu/state.h"

#define FG_STATE_MAGIC   0x3154534755504746ULL /* "FGPUGST1" little-endian */
#define FG_STATE_VERSION 4u                    /* 4: per-MIG-device timelines (mig_rt) */
#define FG_STREAM_POOL   512                   /* streams of all processes together */
#define FG_NO_SLOT       (-1)
#define FG_SLICE_OPEN    UINT64_MAX /* slice of a context alone on its device */

enum fg_item_kind {
    FG_ITEM_KERNEL = 1,
    FG_ITEM_MARKER = 2, /* completes event `event` if `gen` is still its latest record */
    FG_ITEM_WAIT = 3,   /* blocks until event `event`'s record `gen` has completed */
};

struct fg_item {
    uint64_t submit_ns;
    uint64_t remaining_ns; /* kernels: device time still to run */
    uint64_t gen;
    uint32_t kind;
    uint32_t event;
};

struct fg_util {
    uint32_t epoch[FG_UTIL_BUCKETS]; /* bucket number (time / FG_UTIL_BUCKET_NS), mod 2^32 */
    uint32_t busy_ns[FG_UTIL_BUCKETS];
};

struct fg_event_shared {
    uint32_t in_use;
    int32_t stream;    /* stream of the latest record, -1 if none */
    uint64_t rec_gen;  /* generation of the latest record, 0: never recorded */
    uint64_t done_gen; /* generation of the latest completed record */
    uint64_t seq;      /* the latest record's marker sequence number on its stream */
    uint64_t time_ns;  /* simulated completion time of done_gen */
};

struct fg_slot {
    uint32_t in_use;
    int32_t pid;
    uint64_t start_time; /* /proc/<pid>/stat field 22, to tell a reused pid */
    uint64_t gen;
    uint64_t used_bytes[FG_MAX_DEVICES]; /* allocations + context cost */
    uint32_t contexts[FG_MAX_DEVICES];
    uint32_t streams;            /* open streams, all devices */
    uint8_t mig[FG_MAX_DEVICES]; /* MIG device slot + 1 this process runs in (fg_mig_bind);
                                    0: the whole GPU */
    struct fg_util util[FG_MAX_DEVICES];
    struct fg_event_shared events[FG_MAX_EVENTS];
};

struct fg_stream_shared {
    uint32_t in_use;
    uint32_t closing; /* freed once drained */
    int32_t owner;    /* slot index */
    int32_t dev;
    uint64_t owner_gen;
    uint64_t submitted; /* items ever queued; item n (1-based) sits at (n-1) % depth */
    uint64_t completed; /* items ever finished */
    struct fg_item ring[FG_STREAM_DEPTH];
};

struct fg_device_runtime {
    uint64_t t;      /* the timeline has been computed up to here */
    int32_t current; /* slot running, FG_NO_SLOT when idle */
    uint32_t pad;
    uint64_t slice_end; /* FG_SLICE_OPEN while the current slot has no competitor */
    struct fg_util util;
};

struct fg_xid_entry {
    uint64_t seq; /* the event's number (1-based); written last */
    uint32_t code;
    uint32_t pad;
};

/* One device's XID events (fg_xid_inject), lock-free: writers reserve a number with an
 * atomic add and publish the entry by its seq. */
struct fg_xid_log {
    uint64_t next; /* events ever appended */
    struct fg_xid_entry ring[FG_XID_RING];
};

struct fg_shared {
    uint64_t magic;
    uint32_t version;
    uint32_t device_count;
    uint64_t size;
    pthread_mutex_t lock; /* process-shared, robust */
    uint64_t gen_counter;
    uint64_t last_reap_ns;
    uint64_t timeslice_ns;
    uint32_t stream_high; /* streams[0..stream_high) may be in use */
    uint32_t lost;        /* bit d: device d has fallen off the bus (fg_device_set_lost);
                             accessed atomically, without the lock */
    struct fg_device_info info[FG_MAX_DEVICES];
    struct fg_device_runtime dev[FG_MAX_DEVICES];
    struct fg_xid_log xid[FG_MAX_DEVICES];
    struct fg_slot slots[FG_MAX_PROCS];
    struct fg_stream_shared streams[FG_STREAM_POOL];
    /* The timeline of MIG device slot k of a GPU in MIG mode (dev[] is then the whole
     * GPU's); util is kept but NVML reports none on a GPU in MIG mode (docs/fakegpu.md). */
    struct fg_device_runtime mig_rt[FG_MAX_DEVICES][FG_MAX_MIG];
};

/* Computes every device's timeline up to now_ns (no-op for times already computed). */
void fg_timeline_advance(struct fg_shared *sh, uint64_t now_ns);

/* The runtime of timeline dom of dev: 0 the whole GPU, k MIG device slot k - 1. */
struct fg_device_runtime *fg_timeline_runtime(struct fg_shared *sh, int dev, int dom);

/* Adds busy time [from, to) to u's buckets. */
void fg_util_add(struct fg_util *u, uint64_t from, uint64_t to);
/* Busy ns in u from the first bucket starting at or after now_ns - window_ns up to
 * now_ns; *span_ns receives the length of time that covers. */
uint64_t fg_util_sum(const struct fg_util *u, uint64_t now_ns, uint64_t window_ns,
                     uint64_t *span_ns);

/* Kernel work still queued on a stream (ns), a lower bound on its remaining time. */
uint64_t fg_stream_pending_ns(const struct fg_stream_shared *s);

/* The shared lock (both locks: see state.c), for state_mig.c: 0 or -EIO; and a reap of
 * dead processes with it held. */
int fg_state_lock(struct fg_state *st);
void fg_state_unlock(struct fg_state *st);
void fg_state_reap_locked(struct fg_state *st);
/* This process's slot, claimed if needed (lock held): the index or a negative errno. */
int fg_state_claim_locked(struct fg_state *st);

/* For tests: the mapping behind a handle, and its slot (FG_NO_SLOT before the first
 * context/memory/stream/event call). */
struct fg_shared *fg_state_shared(struct fg_state *st);
int fg_state_slot(struct fg_state *st);

#endif
