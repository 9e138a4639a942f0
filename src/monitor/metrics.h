/* vgpu-monitor's Prometheus exposition (docs/monitor.md, "Metrics"): per GPU, per
 * container on each GPU, and the monitor's own counters, in HAMi's names where HAMi
 * exports the same quantity (hami_*, with HAMi's labels) and vgpu's own (vgpu_*, with
 * dcgm-exporter's label names: Hostname, gpu, UUID, modelName, namespace, pod, container).
 * Pure: the daemon collects, this formats. */
#ifndef VGPU_MONITOR_METRICS_H
#define VGPU_MONITOR_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/prom.h"
#include "monitor/monitor.h"

/* Errors the monitor logs and counts (vgpu_monitor_errors_total{kind}). */
enum mon_error_kind {
    MON_ERR_REGION_MISSING,    /* a container directory without its region */
    MON_ERR_REGION_TRUNCATED,  /* a region of the wrong size */
    MON_ERR_REGION_CORRUPT,    /* not a version-2 region */
    MON_ERR_REGION_UNREADABLE, /* a symlink, FIFO, directory, or an I/O error */
    MON_ERR_LIMITS,            /* a limits file that cannot be read or parsed */
    MON_ERR_NVML,              /* an NVML call failed (the GPU is then shown unhealthy) */
    MON_ERR_HTTP_BAD_REQUEST,
    MON_ERR_HTTP_NOT_FOUND,
    MON_ERR_HTTP_METHOD,
    MON_ERR_HTTP_TOO_LARGE,
    MON_ERR_HTTP_TIMEOUT,
    MON_ERR_HTTP_OVERLOAD,
    MON_ERR_KINDS
};
extern const char *const mon_error_kind_names[MON_ERR_KINDS];
/* The kind with this name, or -1. */
int mon_error_kind_from_name(const char *name);

#define MON_MODEL_MAX 96

struct mon_gpu_stats {
    unsigned index;
    char uuid[VGPU_CONFIG_UUID_MAX];
    char model[MON_MODEL_MAX];
    bool healthy;     /* NVML answered for it this scrape */
    bool have_memory; /* memory_total/used valid */
    bool have_util;
    uint64_t memory_total, memory_used;
    unsigned util_percent;
    unsigned memory_util_percent; /* NVML's memory-controller utilization (with have_util) */
    uint64_t allocated;           /* sum of the memory limits of the containers given it */
    unsigned containers;          /* containers given it (a limits file naming it) */
    unsigned last_xid;            /* 0: none seen */
    uint64_t xids;                /* XID events seen */
};

/* A row's label sets, kept by the caller between scrapes (they change only with the
 * names): text holds the HAMi, vgpu-row and vgpu-container sets one after the other.
 * mon_metrics_format fills an empty one; the owner frees text (and empties it when a
 * name changes). */
struct mon_label_cache {
    char *text;
    size_t hami_len, row_len, ctr_len;
};

/* One container on one GPU. */
struct mon_ctr_stats {
    struct mon_label_cache *labels;             /* may be NULL */
    const char *pod_uid, *ns, *pod, *container; /* ns, pod "" when not known */
    unsigned gpu;                               /* index into the GPU list */
    unsigned vdevice;                           /* its index in the container's limits */
    bool first;             /* the container's first row: per-container series go here */
    uint64_t memory_limit;  /* bytes, 0: none */
    unsigned share_percent; /* compute share, 0: none */
    bool region;            /* the region was read: the values below are valid */
    uint64_t used, busy_ns, waited_ns;
    uint64_t held_ns; /* launches held behind a high-priority container */
    int priority;     /* task priority from its limits file: 0 high, 1 low; -1 none named */
    uint32_t achieved_ppm;
    uint64_t refused, closed;         /* per container */
    uint64_t violations, kills;       /* the watchdog's actions on the container */
    const struct mon_limits_mig *mig; /* the dynamic MIG instance of this GPU; NULL: none */
};

struct mon_exposition {
    const char *hostname;
    const struct mon_gpu_stats *gpus;
    unsigned gpu_count;
    const struct mon_ctr_stats *ctrs;
    size_t ctr_count;
    const struct mon_counters *counters;
    const char *policy;
    uint64_t events_sent, events_failed;
    const uint64_t *errors; /* [MON_ERR_KINDS] */
};

/* The monitor's own series (its counters and the Events it posted): what the /metrics
 * page and the metrics file (--metrics-file) share. */
void mon_metrics_own(struct vg_prom *p, const struct mon_counters *c, const char *policy,
                     uint64_t events_sent, uint64_t events_failed);

/* Appends the exposition to out. -E2BIG (out's ceiling) or -ENOMEM. */
int mon_metrics_format(const struct mon_exposition *x, struct vg_buf *out, struct vg_err *err);

#endif
