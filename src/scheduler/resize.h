/* Live resize in vgpu-scheduler (docs/scheduler.md "Live resize"; the wire format in
 * docs/protocol.md "Live resize").
 *
 * A pod's vgpu.io/resize annotation asks for new limits for one of its containers; anyone
 * the API server lets patch the pod may write it (the webhook leaves that one key open).
 * The scheduler answers each request once, in vgpu.io/resize-status, with the request's
 * id: done (with the decision's new generation) or refused (with the reason; nothing
 * changed). A request is done in this order, each step durable before the next:
 *   1. the new decision is charged through the ledger filter uses (sched_pod_recharge),
 *      and the namespace's ResourceQuotas on nvidia.com/gpumem are checked, or refused;
 *   2. it is recorded: an immutable ConfigMap vgpu-decision-<uid>-g<generation>
 *      (records.h), which decides after a restart;
 *   3. the pod's vgpu.io/decision and vgpu.io/resize-status are written in one patch with
 *      the pod's resourceVersion as a precondition (a conflict reads the pod again);
 *   4. the older record is deleted.
 * A scheduler killed after 2 finds on restart a record newer than the pod's decision and
 * writes the decision then (the reconcile in sched_resizer_pod), so the node, which reads
 * only the pod's decision, sees the old limits or the new ones, never a part.
 *
 * Ownership: sched_resizer_new/sched_resizer_free; everything passed in is borrowed and
 * outlives it; free it before the client, as records.h says. */
#ifndef VGPU_SCHEDULER_RESIZE_H
#define VGPU_SCHEDULER_RESIZE_H

#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

struct event_base;
struct kube_client;
struct sched_state;
struct sched_records;
struct sched_resizer;

struct sched_resize_stats {
    uint64_t done, refused, reconciled, errors;
};

struct sched_resizer *sched_resizer_new(struct kube_client *client, struct sched_state *state,
                                        struct sched_records *records);
void sched_resizer_free(struct sched_resizer *r);
/* A pod the watch or a relist showed, after the state took it in: its request, when one
 * waits for an answer, is handled; a record newer than its decision is written to it. */
void sched_resizer_pod(struct sched_resizer *r, json_t *pod);
void sched_resizer_stats(const struct sched_resizer *r, struct sched_resize_stats *out);

/* The pure part, for the tests: the decision resized as req asks (the container named,
 * or the pod's one container with GPUs), one generation up, at time now. Its text (owned)
 * in *out; *raise_mib: the container's memory after minus before, summed over all its
 * GPUs (negative: lowered), as the quota check counts it. -EINVAL naming what is wrong (no
 * such container, a compute share that cannot change live); 1 when it would change
 * nothing (*out NULL). */
struct annot_resize;
int sched_resize_decision(const char *current, const struct annot_resize *req, int64_t now,
                          char **out, int64_t *raise_mib, struct vg_err *err);
/* Whether the namespace's ResourceQuotas (a ResourceQuotaList body) stay true when its
 * pods' nvidia.com/gpumem grows by raised_mib beyond what they asked at bind (their
 * earlier resizes, raised_before, included): 0, or -EDQUOT naming the quota. */
int sched_resize_quota_check(json_t *quotas, int64_t raised_before, int64_t raise_mib,
                             struct vg_err *err);

#endif
