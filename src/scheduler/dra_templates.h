/* The webhook's DRA mode in the API: the ResourceClaimTemplates its claims name
 * (webhook_dra.c builds them), created with vgpu-scheduler's credentials before the pod
 * is admitted, bounded, and collected when no pod uses them (docs/scheduler.md,
 * "Admission webhook"; docs/security.md, "Decisions, environment and the DRA webhook").
 *
 * Before it creates anything for a review it checks that the pod's namespace exists and
 * is not being deleted, and that every owner the pod names exists there with its uid. A template
 * vgpu does not hold yet is created only while the namespace holds fewer than max_per_namespace of
 * vgpu's templates and the cluster fewer than max_total; past either, the pod is refused with a
 * message naming the flag. Every sweep_s seconds it lists vgpu's templates (label
 * app.kubernetes.io/managed-by: vgpu-scheduler), the pods of each namespace holding one, and
 * deletes the templates that no pod names and that no admission used for grace_s seconds.
 *
 * Ownership: new/free; the client is borrowed and outlives it. The done callback of
 * ensure is called exactly once, at most ADMIT_API_TIMEOUT_MS after the call. */
#ifndef VGPU_SCHEDULER_DRA_TEMPLATES_H
#define VGPU_SCHEDULER_DRA_TEMPLATES_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"

struct event_base;
struct kube_client;
struct sched_dra_templates;

struct sched_dra_template_options {
    uint32_t max_per_namespace; /* vgpu's templates one namespace may hold; 0: no bound */
    uint32_t max_total;         /* ... the whole cluster; 0: no bound */
    uint32_t sweep_s;           /* seconds between sweeps; 0: no sweep */
    uint32_t grace_s;           /* a template used this recently is never swept */
};

#define SCHED_DRA_MAX_PER_NAMESPACE 64
#define SCHED_DRA_MAX_TOTAL         4096
#define SCHED_DRA_SWEEP_S           300
#define SCHED_DRA_GRACE_S           300

void sched_dra_template_options_default(struct sched_dra_template_options *o);

int sched_dra_templates_new(struct event_base *base, struct kube_client *client,
                            const struct sched_dra_template_options *o,
                            struct sched_dra_templates **out, struct vg_err *err);
void sched_dra_templates_free(struct sched_dra_templates *t);

/* done(arg, NULL) once every template of the array exists as vgpu would write it (all in
 * one namespace, the review's); done(arg, message) with the reason to refuse the pod.
 * owners (borrowed; NULL: none) is the pod's metadata.ownerReferences: each must exist in
 * the namespace (a Node: in the cluster) with the uid named, read through the API before
 * anything is created; at most 8. A review for a pod whose owner is made up (a review not
 * from kube-apiserver, or a pod the garbage collector would delete) creates nothing. */
typedef void (*sched_dra_done_fn)(void *arg, const char *refusal);
void sched_dra_templates_ensure(struct sched_dra_templates *t, json_t *templates, json_t *owners,
                                sched_dra_done_fn done, void *arg);

/* Templates vgpu holds as far as it knows, and API calls that failed. */
size_t sched_dra_templates_count(const struct sched_dra_templates *t);
uint64_t sched_dra_templates_errors(const struct sched_dra_templates *t);

#endif
