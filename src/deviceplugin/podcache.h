/* The device plugin's cache of scheduling decisions (vgpu mode), fed by the pod watch.
 *
 * Allocate must find the container kubelet is allocating among this node's pods
 * (match.c's rule, docs/protocol.md "Allocate matching"). Decoding every pod's
 * `vgpu.io/decision` on every call made Allocate grow with the pods on the node, so the
 * cache decodes a decision once, when the pod is listed or its watch event arrives, and
 * keeps only what matching needs: pod identity, decision time and, per container, its
 * name, whether it is known to be allocated, and its GPU shares. Entries are kept in
 * match order (oldest decision first, then pod name); Allocate walks only the pods with a
 * container not yet known to be allocated.
 *
 * "Known to be allocated" caches the existence of the container directory: a container
 * is asked about (the dp_allocated_fn) until the answer is yes, then remembered;
 * dp_podcache_set_allocated() records what Allocate itself made or removed. A changed
 * decision forgets what was known about the pod.
 *
 * Pods that are not bound to the node, are finished (Succeeded/Failed) or being deleted,
 * or carry no decision are not kept. A decision that cannot be used is kept as the reason
 * only, so a failed match can name it: garbled, for another node, on a pod whose uid,
 * namespace or name Kubernetes would not allow or whose schedulerName is not vgpu's, or
 * naming a container the pod's spec lacks or whose GPU requests differ (count, and memory
 * and cores where the container sets them). A decision's time counts as no earlier than
 * its pod's creationTimestamp. Not thread-safe; everything runs on the daemon's loop. */
#ifndef VGPU_DEVICEPLUGIN_PODCACHE_H
#define VGPU_DEVICEPLUGIN_PODCACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "deviceplugin/deviceplugin.h"

struct dp_podcache;

/* vgpu-scheduler's default --scheduler-name (docs/scheduler.md). */
#define DP_SCHEDULER_NAME_DEFAULT "vgpu-scheduler"

/* The most pods the cache keeps (a node runs a few hundred at most, kubelet's default is
 * 110; during a relist the cache holds old and new entries at once); one more is not kept,
 * with a warning. */
#define DP_PODCACHE_MAX_PODS 8192

/* A cache for the pods of node (copied). Aborts on out-of-memory like xmalloc. It uses
 * the decisions of pods whose spec.schedulerName is DP_SCHEDULER_NAME_DEFAULT, or the name
 * given to dp_podcache_set_scheduler (copied); other pods' are unusable. */
struct dp_podcache *dp_podcache_new(const char *node);
void dp_podcache_set_scheduler(struct dp_podcache *cache, const char *name);
void dp_podcache_free(struct dp_podcache *cache);

/* A pod from a list or an ADDED/MODIFIED watch event (borrowed). A pod that no longer
 * qualifies (finished, being deleted, decision removed) leaves the cache. */
void dp_podcache_put(struct dp_podcache *cache, json_t *pod);
/* A DELETED watch event. Unknown uids are ignored. */
void dp_podcache_remove(struct dp_podcache *cache, const char *uid);
/* A relist: afterwards the cache holds exactly the qualifying pods of items (a JSON
 * array). Pods whose decision did not change keep what was known about them. */
void dp_podcache_replace(struct dp_podcache *cache, json_t *items);

/* dp_match_container's rule over the cached pods: exact GPUs (uuids, may be NULL) first,
 * then the first container asking for count GPUs, oldest decision first. allocated is
 * asked only about containers not yet known to be allocated. -ENOENT with kubelet's
 * message (naming the first unusable decision seen) when nothing matches. */
int dp_podcache_match(struct dp_podcache *cache, char (*uuids)[ANNOT_UUID_MAX], size_t count,
                      dp_allocated_fn allocated, void *allocated_arg, struct dp_match *out,
                      struct vg_err *err);

/* Records that a container's directory was made (true) or removed again (false).
 * Unknown pods or containers are ignored. */
void dp_podcache_set_allocated(struct dp_podcache *cache, const char *uid, const char *container,
                               bool allocated);

/* Calls fn with the match of every container with GPUs not known to be allocated, of the
 * usable pod uid (or of every usable pod when uid is NULL), in match order. fn must not
 * change the cache. */
typedef void (*dp_podcache_fn)(void *arg, const struct dp_match *match);
void dp_podcache_foreach_waiting(struct dp_podcache *cache, const char *uid, dp_podcache_fn fn,
                                 void *arg);

struct dp_podcache_stats {
    size_t pods;      /* pods kept (usable or not) */
    size_t waiting;   /* usable pods with a container not known to be allocated */
    size_t unusable;  /* pods kept only as the reason their decision cannot be used */
    uint64_t decodes; /* decisions decoded since creation */
};
void dp_podcache_get_stats(const struct dp_podcache *cache, struct dp_podcache_stats *stats);

#endif
