/* vgpu-scheduler's Prometheus exposition (docs/scheduler.md, "Metrics"): the daemon's own
 * series (decisions, errors, latency, connections) from figures the daemon collects, and
 * the allocation series of its model, per GPU, node, container and cluster, in HAMi's scheduler
 * names and labels (hami_*, and with legacy HAMi's older camel-case names) and vgpu's own (vgpu_*,
 * base units, dcgm-exporter's label names). Written through base/prom.h, so every label
 * is escaped one way and every family appears once. Reads the state only; no I/O. */
#ifndef VGPU_SCHEDULER_METRICS_H
#define VGPU_SCHEDULER_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/prom.h"
#include "scheduler/sched.h"

/* One server's connection guard (connguard_stats' figures). */
struct sched_metrics_server {
    const char *name;
    unsigned connections;
    uint64_t timed_out, evicted, refused, accept_pause;
};

/* One verb's answer times: counts[i] answers within bounds[i] (not cumulative),
 * counts[bucket_count] the rest. */
struct sched_metrics_latency {
    const char *verb;
    const uint64_t *counts;
    uint64_t count;
    double sum; /* seconds */
};

/* What the daemon counts, beside the state's own figures (sched_state_stats). */
struct sched_metrics_daemon {
    uint64_t bad_requests; /* 400 and 413 answers, extender, webhook and dashboard */
    uint64_t api_errors;   /* API calls that failed */
    uint64_t unauthorized;
    /* live resizes answered (resize.h): done, refused, and records written to their pods
     * after a restart */
    uint64_t resizes_done, resizes_refused, resizes_reconciled;
    const double *bounds; /* the latency buckets' upper bounds, seconds */
    size_t bucket_count;
    const struct sched_metrics_latency *latency;
    size_t verb_count;
    const struct sched_metrics_server *servers;
    size_t server_count;
};

/* Writes the daemon's series to p. */
void sched_metrics_daemon(struct vg_prom *p, const struct sched_state *s,
                          const struct sched_metrics_daemon *d);

/* Writes the allocation series to p (errors are p's: vg_prom_done reports them). */
void sched_metrics_allocation(struct vg_prom *p, const struct sched_state *s, bool legacy);

#endif
