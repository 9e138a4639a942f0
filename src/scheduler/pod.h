/* Pod-JSON decoding: what a Kubernetes pod object asks of vgpu-scheduler. The GPU
 * requests of its containers (HAMi's resource names and defaulting), its selection
 * annotations (GPU types, UUIDs, NUMA) and its policy annotations, read from the object
 * alone: no scheduler state, so the state (state.c), the extender verbs (extender.c) and
 * the webhook (webhook.c) all depend on this and it on none of them.
 *
 * Ownership: JSON is borrowed; strings returned point into it. */
#ifndef VGPU_SCHEDULER_POD_H
#define VGPU_SCHEDULER_POD_H

#include <stddef.h>

#include <jansson.h>

#include "base/err.h"
#include "placement/placement.h"

struct sched_options;

/* obj.a.b.c when it is a string (b, c may be NULL for a shorter path), else NULL. */
const char *sched_json_str(json_t *obj, const char *a, const char *b, const char *c);

/* "namespace/name" (namespace "default" when unset); -EINVAL without a name,
 * -ENAMETOOLONG past size. */
int sched_pod_key(json_t *pod, char *buf, size_t size, struct vg_err *err);

/* Pod requests: the GPU requests of a pod's containers, HAMi semantics. */
struct sched_container_request {
    char name[254];
    struct place_request request;
    /* nvidia.com/priority (docs/compute.md, "Priority"): 0 high, 1 low (the default). */
    int priority;
    bool priority_given;
};

/* A container's nvidia.com/priority (limits first, requests as HAMi's fallback): 0 with
 * *prio -1 when it names none, 0 or 1 when it does; -EINVAL with a message for anything
 * else (2, -1, "high"). */
int sched_container_priority(json_t *container, const char *name, int *prio, struct vg_err *err);
/* Fills up to max containers (init containers are not given GPUs). Returns the count
 * with GPUs, or -EINVAL with a message for a request nobody can serve. */
int sched_pod_requests(const struct sched_options *o, json_t *pod,
                       struct sched_container_request *out, size_t max, struct vg_err *err);

/* The pod's GPU-type, UUID and NUMA annotations into r; -EINVAL (err) when malformed. */
int sched_pod_selection(json_t *pod, struct place_request *r, struct vg_err *err);

/* The node policy and GPU order for a pod: o's, overridden by its
 * hami.io/node-scheduler-policy, vgpu.io/policy and hami.io/gpu-scheduler-policy
 * annotations; -EINVAL (err) for a value none of them knows. */
struct sched_pod_policy {
    enum place_policy policy;
    enum place_gpu_order order;
};
int sched_pod_policy_read(const struct sched_options *o, json_t *pod, struct sched_pod_policy *pp,
                          struct vg_err *err);

#endif
