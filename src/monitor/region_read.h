/* Reading a container's shared region from outside the container: a bounded, lock-free
 * snapshot for vgpu-monitor's metrics and for tools that show what containers hold
 * (docs/monitor.md, "Reading regions").
 *
 * The region is written by every process of the container (docs/protocol.md), so the
 * reader trusts nothing in it and can be blocked by nothing in it:
 *  - it takes no lock (the region's own locks are for its writers) and never maps the
 *    file: one pread of the header and device table into private memory. A tenant that
 *    truncates or rewrites its file mid-read gives a short read or odd numbers, never a
 *    SIGBUS or a wait;
 *  - it opens with O_NOFOLLOW | O_NONBLOCK and reads only a regular file of the exact
 *    size, so a symlink, FIFO or device placed there is refused, not followed or waited on;
 *  - every value is bounded: counters under recount (bit 63) are masked, negative times
 *    read as 0, the achieved share is clamped to 0..1.
 * What the numbers say is what the container's processes report; nothing here is used to
 * judge or limit anyone (the watchdog reads NVML and the read-only limits file). */
#ifndef VGPU_MONITOR_REGION_READ_H
#define VGPU_MONITOR_REGION_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "region/region.h"

/* The bytes read: the header and the whole device table (docs/protocol.md). */
#define MON_REGION_HEAD      (64 + REGION_MAX_DEVICES * 192)
#define MON_REGION_FILE_SIZE (MON_REGION_HEAD + REGION_MAX_PROCS * 272)

struct mon_region_device {
    char uuid[REGION_UUID_MAX]; /* as the region names it (NUL-terminated) */
    uint64_t used;              /* bytes held by the container's live processes */
    uint64_t busy_ns;           /* settled GPU time, only grows */
    uint64_t waited_ns;         /* time launches spent throttled, only grows */
    uint32_t achieved_ppm;      /* achieved compute share, 0..1,000,000 */
    uint64_t closed_launches;   /* launches charged their wall time (fail-closed) */
    uint64_t held_ns;           /* time launches waited behind high priority, only grows */
};

struct mon_region_snapshot {
    uint64_t file_size;    /* mon_region_read_fd with check: the size fstat saw, set on
                            * failure too (0: an empty file, no process has sized it) */
    unsigned device_count; /* 1..REGION_MAX_DEVICES */
    uint64_t closed;       /* allocations refused because enforcement failed closed */
    uint64_t repaired;     /* device counters a recount found wrong */
    uint64_t refused;      /* allocations refused for passing the limit */
    struct mon_region_device devices[REGION_MAX_DEVICES];
};

/* Parses the first len bytes of a region whose file is file_size bytes long. 0 and *out
 * filled; -EMSGSIZE when the file or the bytes are not a whole region (truncated,
 * grown); -EPROTO when the content is not a version-2 region (magic, version, device
 * count, process count, an unterminated UUID). err names what is wrong. Pure: the fuzz
 * target's entry point. */
int mon_region_parse(const void *buf, size_t len, uint64_t file_size,
                     struct mon_region_snapshot *out, struct vg_err *err);

/* Reads the region at path (relative to dirfd, or AT_FDCWD) into *out: one open, fstat
 * and pread. Returns as mon_region_parse, plus -ENOENT when there is no file (a container
 * that has gone, or not started) and another negative errno when it cannot be read (a
 * symlink: -ELOOP; a FIFO, device or directory: -EINVAL). Never blocks on the file. */
int mon_region_read_at(int dirfd, const char *path, struct mon_region_snapshot *out,
                       struct vg_err *err);

/* The two halves of mon_region_read_at, for a reader that keeps the file open between
 * snapshots (vgpu-monitor keeps one descriptor per container): open (a descriptor, or a
 * negative errno as above), then read any number of times. check: fstat the file first
 * (a regular file of the right size, still linked: -ESTALE once removed or replaced,
 * reopen it by name); without, one pread (a file cut short of its head still reads as
 * -EMSGSIZE), for the reads between two checks of a file known good. */
int mon_region_open_at(int dirfd, const char *path, struct vg_err *err);
int mon_region_read_fd(int fd, const char *path, bool check, struct mon_region_snapshot *out,
                       struct vg_err *err);

#endif
