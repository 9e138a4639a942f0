/* vgpu-scheduler's core: the cluster state rebuilt from the Kubernetes API, and the
 * kube-scheduler extender verbs (filter, prioritize, bind) decided through the placement
 * core (src/placement). No I/O and no clock: the daemon (daemon.h) feeds
 * informer objects and extender bodies in, passes the time, and writes what comes out.
 *
 * Promises. Filter picks the node and the GPUs at once and *assumes* them: the capacity
 * is charged in the model before the answer leaves, so kube-scheduler may filter any
 * number of pods before binding one and no two pods are promised the same share. Filter
 * answers with the chosen node only. An assumption expires (sched_expire) when no bind
 * arrives within the TTL. Bind writes the decision annotation on the pod with the pod's
 * resourceVersion as a precondition, then binds; the decision annotations of pods are the
 * only durable state, so a restarted scheduler rebuilt from the API alone holds the same
 * allocations (docs/scheduler.md).
 *
 * Ownership: sched_state_new/sched_state_free; JSON objects passed in are borrowed;
 * returned text is malloc'ed and owned by the caller. */
#ifndef VGPU_SCHEDULER_SCHED_H
#define VGPU_SCHEDULER_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "placement/placement.h"

#define SCHED_MAX_BODY_BYTES (16u << 20) /* extender request body ceiling */
#define SCHED_MAX_NODES      20000       /* nodes the model holds */

struct sched_options {
    enum place_policy policy;       /* node policy: binpack (default) or spread */
    enum place_gpu_order gpu_order; /* GPU order inside the node: spread (default) */
    uint64_t assume_ttl_ms;         /* assumed allocations expire after this; 0 = 30 s */
    int64_t heartbeat_timeout_s;    /* inventory older than this is ignored; 0 = never */
    struct place_hami_defaults defaults;
    const char *scheduler_name; /* "vgpu-scheduler" */
    /* /filter assumes only for pods the pod watch shows waiting for a node, with the
     * request's uid (sched_pending_update); others get a fits-nothing answer whose Error
     * says why, and SCHED_FILTER_RETRY. The daemon turns it on (it runs the watch); off
     * by default for callers that feed the state without one. */
    bool require_pending;
    /* Outstanding assumptions a namespace may hold (filter's promises not yet bound or
     * expired); a filter that would add one more fits nothing, with an Error naming the
     * bound. 0: no bound. Default SCHED_MAX_ASSUMED_PER_NAMESPACE. */
    uint32_t max_assumed_per_namespace;
    /* The webhook's DRA mode (--webhook-dra, config webhookDRA): HAMi's GPU resources
     * become ResourceClaims of vgpu's DRA classes (docs/dra.md). Off by default. */
    bool webhook_dra;
    /* The webhook gives containers that ask for no GPU NVIDIA_VISIBLE_DEVICES=void, so
     * that NVIDIA's container runtime mounts them none whatever their environment says
     * (HAMi's overwriteEnv; --overwrite-env, config overwriteEnv). On by default. */
    bool overwrite_env;
    /* Users (AdmissionReview request.userInfo.username), comma-separated, whose UPDATEs
     * may change or remove vgpu's own vgpu.io/ annotations: vgpu's service accounts
     * (--webhook-trusted-users, config webhookTrustedUsers). */
    char webhook_trusted_users[1024];
};

#define SCHED_TRUSTED_USERS_DEFAULT                                                                \
    "system:serviceaccount:vgpu-system:vgpu-scheduler,"                                            \
    "system:serviceaccount:vgpu-system:vgpu-device-plugin"

#define SCHED_MAX_ASSUMED_PER_NAMESPACE 256

void sched_options_default(struct sched_options *o);
/* Sets webhook_trusted_users from a comma-separated list; -EINVAL for one too long or
 * holding whitespace or control characters. */
int sched_options_trusted_users(struct sched_options *o, const char *list, struct vg_err *err);
/* Settings from a JSON file ({"policy": "binpack", ...}; docs/scheduler.md lists the
 * keys) over o. A file that is not a JSON object, an unknown key, a value of the wrong
 * type or out of range is -EINVAL naming the file and the key. schedulerName is copied
 * to *name_store, which o points to; the caller frees it. */
int sched_options_load_file(const char *file, struct sched_options *o, char **name_store,
                            struct vg_err *err);

struct sched_stats {
    uint64_t nodes, nodes_with_inventory, pods_tracked, assumed, bound;
    uint64_t filters, filter_fits, filter_unschedulable, binds, bind_failures, expired;
    uint64_t bad_requests, skipped_nodes, skipped_pods, conflicts;
    uint64_t unknown_pods;       /* filters refused: the pod is not pending in the API */
    uint64_t namespace_bound;    /* filters refused: max_assumed_per_namespace reached */
    uint64_t annotation_changes; /* bound pods whose decision annotation was removed or
                                    changed: their charge stayed */
    uint64_t priority_apart;     /* high-priority pods placed on GPUs with no other one */
    uint64_t priority_shared;    /* ... that had to share a GPU with another one */
};

struct sched_state;

int sched_state_new(const struct sched_options *o, struct sched_state **out, struct vg_err *err);
void sched_state_free(struct sched_state *s);
const struct sched_options *sched_state_options(const struct sched_state *s);
void sched_state_stats(const struct sched_state *s, struct sched_stats *out);
/* The placement model (read-only): for metrics and the invariant check. */
const struct place_cluster *sched_state_cluster(const struct sched_state *s);

/* ---- informers ------------------------------------------------------------------ */

/* A node object (ADDED/MODIFIED); its vgpu.io/gpus inventory replaces the model's. A
 * node without the annotation, or with a garbled one, keeps no GPUs (logged). */
void sched_node_update(struct sched_state *s, json_t *node);
void sched_node_delete(struct sched_state *s, json_t *node);
/* A pod object; its vgpu.io/decision annotation (when bound and not finished) is charged
 * to the model; a bound pod's decision that does not fit blocks its GPUs instead. The
 * annotation on a pod that is not bound was not written by vgpu-scheduler (which writes it
 * only with the binding) and is ignored. */
void sched_pod_update(struct sched_state *s, json_t *pod);
void sched_pod_delete(struct sched_state *s, json_t *pod);
/* A live resize (resize.h): charges the bound pod key with decision text in place of its
 * current decision, through the same ledger filter uses; all or nothing. -ENOENT when the
 * pod holds no charged decision, the placement's error (naming the GPU) when the new one
 * does not fit beside the others; the old charge stands then. */
int sched_pod_recharge(struct sched_state *s, const char *key, const char *text,
                       struct vg_err *err);
/* After a relist: objects not in items are deleted, the rest updated. */
void sched_nodes_resync(struct sched_state *s, json_t *items);
void sched_pods_resync(struct sched_state *s, json_t *items);

/* ---- decision records ----------------------------------------------------------------
 * A bound pod's decision annotation is its author's to edit (past the webhook), so the
 * scheduler keeps its own record of each bound pod's decision where a pod author cannot
 * write: a ConfigMap per pod in vgpu-scheduler's namespace (daemon.c, docs/scheduler.md
 * "State, and restarts"), loaded here by pod uid before the first pod list. A bound pod
 * with a record is charged from it, whatever its annotation says; one without keeps what
 * it was first charged until it is gone (sched_pod_update). */
const char *sched_record_get(const struct sched_state *s, const char *uid);
void sched_record_put(struct sched_state *s, const char *uid, const char *decision);
/* true when uid had a record. */
bool sched_record_drop(struct sched_state *s, const char *uid);
size_t sched_record_count(const struct sched_state *s);
/* The decision to record for a pod object the watch showed (borrowed from the state):
 * the pod is bound, not finished, charged by the scheduler and has no record yet; NULL
 * otherwise. *uid is the pod's uid. */
const char *sched_record_wanted(struct sched_state *s, json_t *pod, const char **uid);
/* After a full pod list: drops every record whose pod is not among items still holding
 * its GPUs (bound, not finished), calling gone(arg, uid) first for each. */
void sched_records_prune(struct sched_state *s, json_t *items,
                         void (*gone)(void *arg, const char *uid), void *arg);

/* ---- pending pods ------------------------------------------------------------------
 * The pods waiting for a node (no spec.nodeName, not finished), keyed by namespace/name
 * with their uid, fed by the same pod watch as above: with require_pending, /filter
 * promises capacity only to them. */
void sched_pending_update(struct sched_state *s, json_t *pod);
void sched_pending_delete(struct sched_state *s, json_t *pod);
void sched_pending_resync(struct sched_state *s, json_t *items);
size_t sched_pending_count(const struct sched_state *s);

/* ---- extender verbs --------------------------------------------------------------- */

/* The time, passed by the caller: Unix milliseconds. */
struct sched_now {
    uint64_t mono_ms; /* monotonic: assumption TTLs */
    int64_t unix_s;   /* wall clock: heartbeats and the decision's time */
};

/* POST /filter: body is ExtenderArgs. On success *out is ExtenderFilterResult JSON (a
 * request the scheduler cannot serve is still a 200 with Error or FailedNodes set).
 * -EINVAL / -EMSGSIZE for a body that is not ExtenderArgs (HTTP 400). */
#define SCHED_FILTER_RETRY                                                                         \
    2 /* require_pending and the pod is not (yet) pending: *out fits                               \
         nothing; worth asking again once the pod watch moves */
int sched_filter(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                 char **out, struct vg_err *err);
/* POST /prioritize: HostPriorityList JSON; the node filter chose scores 10. */
int sched_prioritize(struct sched_state *s, const char *body, size_t len, char **out,
                     struct vg_err *err);

/* POST /bind, first half: checks ExtenderBindingArgs against the pod's assumption and
 * hands back what to write: ONE pods/binding whose metadata carries the decision
 * annotation and, as preconditions, the pod's uid and its resourceVersion as filter saw
 * it. The API sets spec.nodeName and the annotation in one write, or neither. */
struct sched_bind {
    char ns[254], name[254], node[254];
    char uid[128];             /* precondition: ExtenderBindingArgs.PodUID, else filter's */
    char resource_version[64]; /* precondition: the pod's as filter (or the watch) saw it */
    char *decision;            /* vgpu.io/decision text, owned (sched_bind_release); NULL
                                  for a pod without GPUs */
};
int sched_bind_prepare(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                       struct sched_bind *out, struct vg_err *err);
/* How the binding went. */
enum sched_bind_outcome {
    SCHED_BIND_OK,      /* 2xx: the pod is bound and carries the decision */
    SCHED_BIND_REFUSED, /* the API answered and wrote nothing (409 conflict or already
                           bound, 404, other 4xx) */
    SCHED_BIND_UNKNOWN, /* no answer (timeout, connection lost) or a 5xx: the write may
                           or may not have happened */
};
/* Second half. OK: the share is the pod's, no longer a promise. REFUSED: the promise is
 * dropped; kube-scheduler retries the pod from filter. UNKNOWN: the promise stays charged
 * and expires --assume-ttl after now unless the watch shows the pod bound with it first
 * (then it is the pod's); kube-scheduler's retry replaces it. Only a live promise of this
 * scheduler is ever bound, and only while it is still charged on GPUs that take tenants:
 * a decision someone else wrote into the API (an unbound pod's annotation) is ignored,
 * and the binding replaces it. */
void sched_bind_finish(struct sched_state *s, const struct sched_bind *b,
                       enum sched_bind_outcome outcome, struct sched_now now);
void sched_bind_release(struct sched_bind *b);

/* Drops assumptions past their TTL; returns how many. */
size_t sched_expire(struct sched_state *s, struct sched_now now);

/* 0 when no GPU holds more memory, compute or tenants than it has; else -ERANGE naming
 * the first GPU over. */
int sched_check_invariants(const struct sched_state *s, struct vg_err *err);

/* Per-GPU usage as JSON, sorted by node and GPU: {"nodes":{"n":[{"uuid","memUsedMiB",
 * "coresUsed","tenants","highPriorityTenants"}...]}}; bound_only leaves assumptions out.
 * Owned text. */
char *sched_dump(const struct sched_state *s, bool bound_only);

/* ---- admission webhook -------------------------------------------------------------- */

/* POST /webhook: AdmissionReview (admission.k8s.io/v1) in, AdmissionReview out. Pods that
 * ask for vgpu resources get spec.schedulerName; impossible requests are denied with a
 * message. -EINVAL for a body that is not an AdmissionReview (HTTP 400). */
int sched_admit(struct sched_state *s, const char *body, size_t len, char **out,
                struct vg_err *err);
/* sched_admit that also hands out, under webhook_dra, the ResourceClaimTemplates the
 * answer's claims name (*templates: a JSON array, owned by the caller; NULL when there is
 * nothing to create, e.g. on a dry run). The caller creates them before it sends *out, or
 * sends sched_admit_refusal instead when it cannot. */
int sched_admit_with(struct sched_state *s, const char *body, size_t len, char **out,
                     json_t **templates, struct vg_err *err);
/* An AdmissionReview refusing the request uid with message (owned text). */
char *sched_admit_refusal(const char *uid, const char *message);
/* Whether the ResourceClaimTemplate have (read from the API) asks for what want asks:
 * their spec fields are equal. */
bool sched_dra_template_same(json_t *want, json_t *have);

#endif
