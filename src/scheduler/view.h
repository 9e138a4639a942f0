/* What vgpu-scheduler shows of its model: the dashboard's state JSON (/ui/state.json), and the
 * per-pod filter verdicts that say why a pod is pending or where it went (docs/scheduler.md,
 * "Dashboard"; the Prometheus exposition of the same model is metrics.h's). Reads the state only;
 * no I/O.
 *
 * Fragmentation. A GPU is *partly used* when it holds at least one container and some of
 * its compute is unallocated. Its unallocated compute (1 - allocated, in GPUs) and memory
 * are *stranded*: only a pod that fits beside the containers there can use them, never
 * one that needs a whole card. A node's (or the cluster's) fragmentation ratio is its
 * stranded compute over its unallocated compute (0 when nothing is unallocated). */
#ifndef VGPU_SCHEDULER_VIEW_H
#define VGPU_SCHEDULER_VIEW_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"
#include "scheduler/sched.h"

/* The dashboard's state as JSON text (owned): cluster totals, nodes sorted by name with
 * their GPUs and the containers on each, and the pods waiting for a node with the last
 * filter verdict on each. now_unix stamps it. NULL when out of memory. */
char *sched_view_state(const struct sched_state *s, int64_t now_unix);

/* The last filter verdict on the pod ns/name as JSON text (owned), or NULL when the
 * scheduler holds none (the pod was never filtered, or is gone). */
char *sched_view_verdict(const struct sched_state *s, const char *key);

/* Reads /ui/explain's query ("pod=NAME&namespace=NS", either order, namespace
 * "default" when absent; values percent-decoded) into key as "NS/NAME". -EINVAL with a
 * message for a missing query or pod, another parameter, one given twice, a bad escape,
 * or a value that is not a Kubernetes name (1..253 of a-z, 0-9, '-', '.'). */
#define SCHED_VIEW_QUERY_MAX 2048
int sched_view_explain_key(const char *query, char *key, size_t size, struct vg_err *err);

/* Why pod key ("ns/name") is where it is, as JSON text (owned): its state ("pending",
 * "assumed": promised by a filter, "bound"), node, decision and last filter verdict; NULL
 * when the scheduler knows nothing of it. */
char *sched_view_explain(const struct sched_state *s, const char *key);

#endif
