/* The containers vgpu-monitor shows (docs/monitor.md, "Metrics"): every container
 * directory the device plugin made (<region-dir>/<pod uid>_<container>/), its
 * read-only limits file (cached, read again every MON_SCAN_LIMITS_EVERY scans) and a
 * snapshot of its region (region_read.h) at each scan. A directory that is gone is
 * forgotten at the next scan (its series disappear); one that cannot be read is logged
 * when its state changes and counted (vgpu_monitor_errors_total) at every scan, never
 * fatal. Not thread-safe. */
#ifndef VGPU_MONITOR_SCAN_H
#define VGPU_MONITOR_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "monitor/metrics.h"

#define MON_SCAN_LIMITS_EVERY 20
/* An open region is checked (fstat: a regular file of the right size, not replaced) at
 * its first read and every this many after; in between a read is one pread, and a file
 * cut short of its head is still seen at once. */
#define MON_SCAN_STAT_EVERY   8
#define MON_SCAN_MAX          65536 /* container directories */

struct mon_scan;

/* names: called once per pod UID until it answers 0 with the pod's namespace and name
 * (NULL: namespace and pod stay ""). */
typedef int (*mon_scan_name_fn)(void *arg, const char *pod_uid, char ns[MON_NAME_MAX],
                                char pod[MON_NAME_MAX]);

int mon_scan_new(const char *region_dir, mon_scan_name_fn names, void *names_arg,
                 struct mon_scan **out, struct vg_err *err);
void mon_scan_free(struct mon_scan *s);

/* Scans the directory: rows (one per container and GPU of gpu_uuids[gpu_count]) replace
 * the last scan's; errors[kind] counts what failed. -errno only when the directory itself
 * cannot be listed (counted as region_unreadable; the last rows are dropped). */
int mon_scan_run(struct mon_scan *s, const char *const *gpu_uuids, unsigned gpu_count,
                 uint64_t errors[MON_ERR_KINDS], struct vg_err *err);

/* The rows of the last scan (valid until the next mon_scan_run or mon_scan_free). */
const struct mon_ctr_stats *mon_scan_rows(const struct mon_scan *s, size_t *count);

/* Counts a watchdog action ("over" or "kill") against a container (by pod UID and
 * name); shown from the next scan while the container's directory exists. */
void mon_scan_note(struct mon_scan *s, const char *pod_uid, const char *container,
                   const char *kind);

#endif
