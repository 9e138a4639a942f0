/* The container's shared region: one small file per container that every CUDA process in
 * it maps (libvgpu), that the device plugin creates and the monitor reads. It holds what
 * the container's live processes hold on each device, and counters for the monitor.
 *
 * Every process of the container can write the file, so nothing in it decides how much a
 * process is allowed: the limit and compute share a reservation is checked against are
 * process-private (region_set_limit), which libvgpu takes from its configuration (in a
 * vgpu container, the read-only limits file). The limits the creator wrote in the device
 * table are a record of its configuration, which libvgpu follows only outside a vgpu
 * container, where the environment (as writable) decides anyway. What the file counts is
 * checked, not
 * trusted: a process recounts the container's usage from the live process slots when it
 * attaches and before it accepts a refusal, so a forged counter is repaired (and counted
 * in the device's repaired counter); a count that cannot be right (past 2^63) is treated
 * as a full device; and a process never holds more than its limit whatever the file says.
 *
 * Why it is built this way (docs/protocol.md has the byte layout):
 * - Memory is reserved with one compare-and-swap on the container's per-device counter
 *   before the driver is called, and rolled back if the driver fails: no check-then-act
 *   window between processes, and no scan over process slots on the allocation path.
 * - Each process owns a stable slot (never moved, reused with a new generation) and holds
 *   an OFD lock on the slot's byte for its whole life. The kernel drops that lock when the
 *   process dies, however it dies, so liveness needs no pids: it works across pid
 *   namespaces (the monitor on the host sees the same truth) and survives pid reuse.
 * - A dead process's usage is taken back by a recount: the reclaimer freezes the device
 *   counters (bit 63), waits for live processes' in-flight updates to land, and sets each
 *   counter to the sum of live slots. That is exact even for a process killed between its
 *   counter update and its slot update, which a plain subtraction could not tell apart.
 * - The region lock is an OFD lock on byte 0, also released by the kernel on death, so a
 *   process killed inside it never blocks the others.
 *
 * Thread model: a struct region is shared by the threads of one process; reserve and
 * release are lock-free, the rest serialise on a process-local mutex plus the region lock.
 * Nothing here allocates after region_open, and nothing aborts: this runs inside
 * other people's programs. */
#ifndef VGPU_REGION_REGION_H
#define VGPU_REGION_REGION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define REGION_MAGIC       UINT64_C(0x3130676572757067) /* "gpuregv1", little-endian */
#define REGION_VERSION     2 /* 2: limits are process-private; the counters below */
#define REGION_MAX_DEVICES 16
#define REGION_MAX_PROCS   1024
#define REGION_UUID_MAX    64

/* A process-private memory limit that refuses every reservation: libvgpu's fail-closed
 * state (a limits file it cannot read, a region it cannot trust). */
#define REGION_LIMIT_CLOSED UINT64_MAX

/* What the creator puts in a new region. The limits are a record of the creator's
 * configuration (region_device), never what a reservation is checked against. */
struct region_device_config {
    char uuid[REGION_UUID_MAX]; /* "GPU-..." as NVML reports it */
    uint64_t memory_limit;      /* bytes; 0 = no limit */
    uint32_t sm_limit_percent;  /* 1..100; 0 = no limit */
};

/* The container's counters, for the monitor (they only grow). */
struct region_counters {
    uint64_t closed;   /* allocations refused because enforcement failed closed */
    uint64_t repaired; /* device counters a recount found forged or stale */
    uint64_t refused;  /* reservations refused because they would pass the limit */
};

struct region_config {
    unsigned device_count; /* 1..REGION_MAX_DEVICES */
    struct region_device_config devices[REGION_MAX_DEVICES];
};

/* One process as the monitor sees it. */
struct region_proc_info {
    unsigned slot;
    uint32_t generation;
    int32_t pid; /* in the container's pid namespace */
    uint64_t used[REGION_MAX_DEVICES];
};

/* The container's compute budget on one device (docs/compute.md, docs/protocol.md): 13
 * 64-bit atomics inside the device record, zero in a new region, shared by every process
 * of the container. Times are CLOCK_MONOTONIC nanoseconds (one clock for the whole host).
 * Like the rest of the file it decides nothing: libvgpu bounds every field by the process's
 * own limits as it reads it, and each process's own bucket (compute.h) is the authority. */
struct region_compute {
    _Atomic int64_t credit_ns;    /* GPU time the container may still start; < 0: debt */
    _Atomic int64_t refill_at;    /* time the credit was refilled up to; 0: never */
    _Atomic int64_t busy_ns;      /* settled GPU time of the container, only grows */
    _Atomic int64_t waited_ns;    /* time launches spent throttled, only grows */
    _Atomic int64_t rate_ppm;     /* refill rate (share x trim, or burst rate); 0: the share */
    _Atomic int64_t tick_at;      /* time of the last control tick (claimed by CAS) */
    _Atomic int64_t tick_busy;    /* busy_ns at that tick */
    _Atomic int64_t tick_waited;  /* waited_ns at that tick */
    _Atomic int64_t integral_ppm; /* PI trim integrator (ppm of the share) */
    _Atomic int64_t achieved_ppm; /* achieved share, ~1 s moving average */
    /* Launches the limiter could not time or place on the board and charged their wall
     * time instead (fail-closed), and which reasons it met (bits of enum vgc_closed). */
    _Atomic int64_t closed_n;
    _Atomic int64_t closed_why;
    /* Time launches spent held behind a high-priority container (docs/compute.md,
     * "Priority"), only grows. */
    _Atomic int64_t held_ns;
};

struct region;

/* Creates the region file at path if it does not exist (atomically: a complete file
 * appears under that name or none does). Returns 0 when created, 1 when a region was
 * already there (it is validated by region_open, not overwritten). */
int region_create(const char *path, const struct region_config *config, struct vg_err *err);

/* Makes the empty file open on fd a new region (0666, sized, the magic written last), for
 * callers that publish the file themselves (the device plugin renames the container's
 * whole directory into place). -EEXIST if the file already holds a region. */
int region_init_fd(int fd, const struct region_config *config, struct vg_err *err);

/* Maps an existing region after checking magic, version and size: a file of another
 * version or size is refused with a clear message, never trusted. Every device starts
 * with no limit and no share (region_set_limit sets them). */
int region_open(const char *path, struct region **out, struct vg_err *err);
void region_close(struct region *r);

/* The region's device table. */
unsigned region_device_count(const struct region *r);
const struct region_device_config *region_device(const struct region *r, unsigned dev);
/* Index of the device with this UUID, or -ENOENT. */
int region_find_device(const struct region *r, const char *uuid);

/* Claims a slot for the calling process (idempotent; a forked child must call
 * region_after_fork first). Reclaims dead slots when the table is full, then recounts
 * (region_recount) so that a counter forged before this process started is repaired. */
int region_attach(struct region *r, struct vg_err *err);
/* Drops the calling process's slot and everything it holds (clean exit). */
void region_detach(struct region *r);
/* In a forked child: forget the parent's slot and lock (the child attaches anew). */
void region_after_fork(struct region *r);

/* This process's limit on dev (bytes; 0: none; REGION_LIMIT_CLOSED: refuse everything)
 * and compute share (percent; 0: none). Process-private: never read from or written to
 * the file. Set before attaching, and again at any time by a live resize: a lower limit
 * frees nothing, it refuses reservations until the container's usage is below it. */
void region_set_limit(struct region *r, unsigned dev, uint64_t limit, uint32_t share_percent);
/* The share region_set_limit gave dev (0 for a bad device). */
uint32_t region_share(const struct region *r, unsigned dev);

/* Reserves bytes on dev against this process's limit: 0, or -ENOMEM when the container's
 * usage (or this process's own) would pass the limit (after reclaiming dead processes and
 * recounting once), -EINVAL for a bad device or a process that is not attached. */
int region_reserve(struct region *r, unsigned dev, uint64_t bytes);
/* Returns bytes reserved earlier by this process. */
void region_release(struct region *r, unsigned dev, uint64_t bytes);

/* The compute budget of dev (NULL for a bad device). */
struct region_compute *region_compute(struct region *r, unsigned dev);

/* Container usage and this process's limit of dev (limit 0: none). */
int region_usage(const struct region *r, unsigned dev, uint64_t *used, uint64_t *limit);

/* The container's counters. */
void region_counters(const struct region *r, struct region_counters *out);
/* Counts one allocation refused because enforcement failed closed. */
void region_note_closed(struct region *r);

/* Recounts every device's usage from the live process slots, whatever the counters say;
 * *repaired = devices whose counter was wrong (each also counted in its repaired
 * counter). *insane = devices whose slots add up past 2^63 - 1: their counter is left at
 * that, so every reservation on them is refused. -EAGAIN as region_reclaim. */
int region_recount(struct region *r, unsigned *repaired, unsigned *insane);

/* Takes back what dead processes held; *count = slots reclaimed. Cheap when nobody died:
 * one lock probe per live slot. -EAGAIN if a live process was stopped in the middle of an
 * update for too long (nothing is changed then; try again later). */
int region_reclaim(struct region *r, unsigned *count);

/* Checks a region image (magic, version, size, tables) before anything trusts it; used by
 * region_open and the fuzz target. -EPROTO with the reason. */
int region_validate(const void *buf, size_t len, struct vg_err *err);

/* Live processes (up to max); returns how many there are. */
int region_list_procs(struct region *r, struct region_proc_info *out, unsigned max);

#endif
