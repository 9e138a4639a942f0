/* Decoded scheduling decisions per pod, kept in match order (podcache.h).
 *
 * Two arrays of entry pointers sorted by (usable first; decision time, pod name, uid for
 * usable ones; arrival for the others): every entry, and the usable entries with a
 * container not known to be allocated ("waiting"), which is all Allocate walks. A pod on
 * a node runs to a few hundred at most, so finding an entry by uid is a scan and an
 * insertion a memmove: both happen on watch events, not in Allocate. The big fixed-size
 * struct annot_decision is used once per decode, as a scratch buffer owned by the
 * cache. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/mem.h"
#include "base/str.h"
#include "deviceplugin/podcache.h"

struct pc_container {
    char *name;
    bool allocated; /* its directory is known to exist */
    unsigned gpu_count;
    struct annot_share *gpus;
    int priority; /* nvidia.com/priority: 0 high, 1 low, -1 not named */
};

struct pc_entry {
    char *uid, *ns, *name;
    char *text;       /* the decision as decoded */
    char *problem;    /* why the decision cannot be used, or NULL */
    uint64_t seq;     /* arrival order */
    int64_t time;     /* decision time */
    unsigned pending; /* containers with GPUs not known to be allocated */
    unsigned container_count;
    struct pc_container *containers;
    bool seen;    /* during dp_podcache_replace */
    bool waiting; /* in the waiting list */
};

/* Entry pointers in entry_cmp order. */
struct pc_list {
    struct pc_entry **v;
    size_t n, cap;
};

struct dp_podcache {
    char *node;
    char *scheduler;           /* the schedulerName whose pods' decisions are used */
    struct pc_entry **entries; /* every entry, in order */
    size_t count, cap;
    struct pc_list waiting; /* usable entries with pending > 0, in order */
    uint64_t seq;
    struct annot_decision *scratch;
    struct dp_podcache_stats stats;
};

struct dp_podcache *dp_podcache_new(const char *node)
{
    struct dp_podcache *c = xcalloc(1, sizeof(*c));
    c->node = xstrdup(node);
    c->scheduler = xstrdup(DP_SCHEDULER_NAME_DEFAULT);
    c->scratch = xmalloc(sizeof(*c->scratch));
    return c;
}

static void entry_free(struct pc_entry *e)
{
    if (!e)
        return;
    for (unsigned i = 0; i < e->container_count; i++) {
        free(e->containers[i].name);
        free(e->containers[i].gpus);
    }
    free(e->containers);
    free(e->uid);
    free(e->ns);
    free(e->name);
    free(e->text);
    free(e->problem);
    free(e);
}

void dp_podcache_free(struct dp_podcache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->count; i++)
        entry_free(c->entries[i]);
    free(c->entries);
    free(c->waiting.v);
    free(c->scratch);
    free(c->node);
    free(c->scheduler);
    free(c);
}

void dp_podcache_set_scheduler(struct dp_podcache *c, const char *name)
{
    free(c->scheduler);
    c->scheduler = xstrdup(name);
}

static int entry_cmp(const struct pc_entry *a, const struct pc_entry *b)
{
    if (!a->problem != !b->problem)
        return a->problem ? 1 : -1;
    if (a->problem)
        return a->seq < b->seq ? -1 : a->seq > b->seq;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    int r = strcmp(a->name, b->name);
    return r ? r : strcmp(a->uid, b->uid);
}

/* First position whose entry sorts after e. */
static size_t upper_bound(struct pc_entry *const *v, size_t n, const struct pc_entry *e)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (entry_cmp(v[mid], e) <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The waiting list never holds more than the cache does, and insert() grows it with the
 * cache, so inserting into it needs no allocation. */
static void list_insert(struct pc_list *l, struct pc_entry *e)
{
    size_t at = upper_bound(l->v, l->n, e);
    memmove(&l->v[at + 1], &l->v[at], (l->n - at) * sizeof(l->v[0]));
    l->v[at] = e;
    l->n++;
}

static void list_remove(struct pc_list *l, const struct pc_entry *e)
{
    size_t at = upper_bound(l->v, l->n, e); /* keys are unique: e sits just before */
    if (at == 0 || l->v[at - 1] != e)
        return;
    memmove(&l->v[at - 1], &l->v[at], (l->n - at) * sizeof(l->v[0]));
    l->n--;
}

/* Puts e in, or takes it out of, the waiting list as its state says. */
static void reindex(struct dp_podcache *c, struct pc_entry *e)
{
    bool want = !e->problem && e->pending > 0;
    if (want == e->waiting)
        return;
    if (want)
        list_insert(&c->waiting, e);
    else
        list_remove(&c->waiting, e);
    e->waiting = want;
}

static size_t find(const struct dp_podcache *c, const char *uid)
{
    for (size_t i = 0; i < c->count; i++)
        if (strcmp(c->entries[i]->uid, uid) == 0)
            return i;
    return SIZE_MAX;
}

static struct pc_entry *take(struct dp_podcache *c, size_t i)
{
    struct pc_entry *e = c->entries[i];
    if (e->waiting)
        list_remove(&c->waiting, e);
    memmove(&c->entries[i], &c->entries[i + 1], (c->count - i - 1) * sizeof(c->entries[0]));
    c->count--;
    return e;
}

/* Takes e in; -E2BIG past DP_PODCACHE_MAX_PODS, -ENOMEM, e not taken then. */
static int insert(struct dp_podcache *c, struct pc_entry *e, struct vg_err *err)
{
    int rc;
    if ((rc = vg_array_grow(&c->entries, &c->cap, c->count + 1, sizeof(c->entries[0]),
                            DP_PODCACHE_MAX_PODS, "pod cache", err)) < 0 ||
        (rc = vg_array_grow(&c->waiting.v, &c->waiting.cap, c->count + 1, sizeof(c->waiting.v[0]),
                            DP_PODCACHE_MAX_PODS, "pod cache", err)) < 0)
        return rc;
    size_t lo = upper_bound(c->entries, c->count, e);
    memmove(&c->entries[lo + 1], &c->entries[lo], (c->count - lo) * sizeof(c->entries[0]));
    c->entries[lo] = e;
    c->count++;
    reindex(c, e);
    return 0;
}

static const char *str_at(json_t *obj, const char *a, const char *b)
{
    json_t *x = json_object_get(obj, a);
    x = b ? json_object_get(x, b) : x;
    return json_is_string(x) ? json_string_value(x) : NULL;
}

/* The decision text of a pod that qualifies, else NULL. */
static const char *qualifying_decision(const struct dp_podcache *c, json_t *pod)
{
    const char *bound = str_at(pod, "spec", "nodeName");
    const char *phase = str_at(pod, "status", "phase");
    json_t *meta = json_object_get(pod, "metadata");
    if (!bound || strcmp(bound, c->node) != 0 || json_object_get(meta, "deletionTimestamp"))
        return NULL;
    if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
        return NULL;
    return str_at(json_object_get(meta, "annotations"), ANNOT_KEY_DECISION, NULL);
}

/* A resource of a container: limits first, requests as the fallback (as the scheduler
 * reads it, docs/scheduler.md); 0 absent, 1 read into *out, -1 malformed. */
static int container_resource(json_t *container, const char *key, bool memory, uint64_t *out)
{
    json_t *res = json_object_get(container, "resources");
    json_t *v = json_object_get(json_object_get(res, "limits"), key);
    if (v == NULL)
        v = json_object_get(json_object_get(res, "requests"), key);
    if (v == NULL)
        return 0;
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = (uint64_t)json_integer_value(v);
        return 1;
    }
    if (!json_is_string(v))
        return -1;
    int rc = memory ? vg_parse_kube_mib(json_string_value(v), INT32_MAX, out, NULL)
                    : vg_parse_kube_count(json_string_value(v), INT32_MAX, out, NULL);
    return rc < 0 ? -1 : 1;
}

/* The container's nvidia.com/priority (limits first, requests as the fallback): -1 when
 * it names none, 0 (high) or 1 (low); -2 for anything else (2, -1, "high"): the webhook
 * refuses those, and a pod that got past it has no usable decision. */
static int container_priority(json_t *container)
{
    json_t *res = json_object_get(container, "resources");
    json_t *v = json_object_get(json_object_get(res, "limits"), "nvidia.com/priority");
    if (v == NULL)
        v = json_object_get(json_object_get(res, "requests"), "nvidia.com/priority");
    if (v == NULL)
        return -1;
    if (json_is_integer(v))
        return json_integer_value(v) == 0 || json_integer_value(v) == 1 ? (int)json_integer_value(v)
                                                                        : -2;
    const char *t = json_is_string(v) ? json_string_value(v) : "";
    return (t[0] == '0' || t[0] == '1') && t[1] == '\0' ? t[0] - '0' : -2;
}

static json_t *spec_container(json_t *pod, const char *name)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    json_t *found = NULL, *c;
    size_t i;
    json_array_foreach(containers, i, c)
    {
        const char *n = str_at(c, "name", NULL);
        if (n && strcmp(n, name) == 0)
            found = c;
    }
    return found;
}

/* Why the decision's container dc does not belong to pod (into why), or NULL: the pod's
 * spec must have a container of that name whose GPU requests are the decision's: as many
 * GPUs (nvidia.com/gpu), and where the container sets them, the same memory per GPU
 * (nvidia.com/gpumem) and compute share (nvidia.com/gpucores). A GPU given as a dynamic
 * MIG instance has its profile's memory, at least the request, and no compute share (the
 * instance's SMs are its own). */
static const char *container_mismatch(json_t *pod, const struct annot_container *dc, char *why,
                                      size_t size)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    json_t *found = NULL, *c;
    size_t i;
    json_array_foreach(containers, i, c)
    {
        const char *name = str_at(c, "name", NULL);
        if (name && strcmp(name, dc->name) == 0)
            found = c;
    }
    if (!found) {
        vg_snprintf(why, size, "no container %s in its spec", dc->name);
        return why;
    }
    if (container_priority(found) == -2) {
        vg_snprintf(why, size, "container %s: nvidia.com/priority is not 0 (high) or 1 (low)",
                    dc->name);
        return why;
    }
    uint64_t count = 0, mib = 0, cores = 0;
    int has_count = container_resource(found, "nvidia.com/gpu", false, &count);
    int has_mib = container_resource(found, "nvidia.com/gpumem", true, &mib);
    int has_cores = container_resource(found, "nvidia.com/gpucores", false, &cores);
    if (has_count <= 0 || count != dc->gpu_count) {
        vg_snprintf(why, size, "container %s: nvidia.com/gpu %s, decided %u", dc->name,
                    has_count < 0    ? "malformed"
                    : has_count == 0 ? "absent"
                                     : "differs",
                    dc->gpu_count);
        return why;
    }
    for (unsigned g = 0; g < dc->gpu_count; g++) {
        bool mig = dc->gpus[g].mig_profile[0] != '\0';
        if (mig && has_mib >= 0 && has_cores >= 0 && dc->gpus[g].cores == 0 &&
            (has_mib == 0 || mib == 0 || dc->gpus[g].memory_mib >= mib))
            continue;
        if (mig) {
            vg_snprintf(why, size,
                        "container %s: the MIG instance decided (%llu MiB) is smaller than its "
                        "nvidia.com/gpumem, or has a compute share",
                        dc->name, (unsigned long long)dc->gpus[g].memory_mib);
            return why;
        }
        if (has_mib < 0 || (has_mib > 0 && mib > 0 && dc->gpus[g].memory_mib != mib)) {
            vg_snprintf(why, size, "container %s: nvidia.com/gpumem differs, decided %llu MiB",
                        dc->name, (unsigned long long)dc->gpus[g].memory_mib);
            return why;
        }
        if (has_cores < 0 ||
            (has_cores > 0 && dc->gpus[g].cores != (cores > 100 ? 100 : (unsigned)cores))) {
            vg_snprintf(why, size, "container %s: nvidia.com/gpucores differs, decided %u",
                        dc->name, dc->gpus[g].cores);
            return why;
        }
    }
    return NULL;
}

static struct pc_entry *entry_new(struct dp_podcache *c, const char *uid, json_t *pod,
                                  const char *text)
{
    const char *ns = str_at(pod, "metadata", "namespace");
    const char *name = str_at(pod, "metadata", "name");
    struct pc_entry *e = xcalloc(1, sizeof(*e));
    e->uid = xstrdup(uid);
    e->ns = xstrdup(ns ? ns : "");
    e->name = xstrdup(name ? name : "");
    e->text = xstrdup(text);
    e->seq = c->seq++;
    struct annot_decision *d = c->scratch;
    struct vg_err derr = {0};
    char problem[400], why[200];
    /* Every name of the pod reaches a directory name, the environment, the limits file or
     * a log line: none is used, or echoed, unless it is what Kubernetes allows. */
    if (!annot_pod_uid(uid) || !annot_dns_label(e->ns) || !annot_dns_subdomain(e->name)) {
        e->problem = xstrdup("; a pod with an invalid uid, namespace or name has a decision");
        return e;
    }
    const char *sched = str_at(pod, "spec", "schedulerName");
    if (!sched || strcmp(sched, c->scheduler) != 0) {
        vg_snprintf(problem, sizeof(problem),
                    "; pod %s/%s is not scheduled by %s (schedulerName %s)", e->ns, e->name,
                    c->scheduler,
                    !sched                       ? "unset"
                    : annot_dns_subdomain(sched) ? sched
                                                 : "invalid");
        e->problem = xstrdup(problem);
        return e;
    }
    c->stats.decodes++;
    if (annot_decision_decode(text, strlen(text), d, &derr) < 0) {
        vg_snprintf(problem, sizeof(problem), "; pod %s has a garbled %s: %s", e->name,
                    ANNOT_KEY_DECISION, derr.msg);
        e->problem = xstrdup(problem);
        return e;
    }
    if (strcmp(d->node, c->node) != 0) {
        vg_snprintf(problem, sizeof(problem), "; pod %s has a decision for node '%s'", e->name,
                    d->node);
        e->problem = xstrdup(problem);
        return e;
    }
    for (unsigned i = 0; i < d->container_count; i++)
        if (d->containers[i].gpu_count > 0 &&
            container_mismatch(pod, &d->containers[i], why, sizeof(why)) != NULL) {
            vg_snprintf(problem, sizeof(problem), "; pod %s/%s: decision does not match spec: %s",
                        e->ns, e->name, why);
            e->problem = xstrdup(problem);
            return e;
        }
    /* The decision's time orders matching, and the pod's author could have written it: a
     * decision is never older than its pod (creationTimestamp, set by the API server). */
    int64_t created = annot_kube_time(str_at(pod, "metadata", "creationTimestamp"));
    e->time = d->time > created ? d->time : created;
    e->container_count = d->container_count;
    e->containers = xcalloc(d->container_count ? d->container_count : 1, sizeof(*e->containers));
    for (unsigned i = 0; i < d->container_count; i++) {
        const struct annot_container *src = &d->containers[i];
        struct pc_container *dst = &e->containers[i];
        dst->name = xstrdup(src->name);
        dst->gpu_count = src->gpu_count;
        dst->gpus = xcalloc(src->gpu_count ? src->gpu_count : 1, sizeof(*dst->gpus));
        memcpy(dst->gpus, src->gpus, src->gpu_count * sizeof(*dst->gpus));
        json_t *sc = spec_container(pod, src->name);
        dst->priority = sc != NULL ? container_priority(sc) : -1;
        if (src->gpu_count)
            e->pending++;
    }
    return e;
}

void dp_podcache_put(struct dp_podcache *c, json_t *pod)
{
    const char *uid = str_at(pod, "metadata", "uid");
    if (!uid)
        return;
    const char *text = qualifying_decision(c, pod);
    size_t i = find(c, uid);
    if (i != SIZE_MAX) {
        struct pc_entry *old = c->entries[i];
        const char *ns = str_at(pod, "metadata", "namespace");
        const char *name = str_at(pod, "metadata", "name");
        if (text && strcmp(old->text, text) == 0 && strcmp(old->ns, ns ? ns : "") == 0 &&
            strcmp(old->name, name ? name : "") == 0) {
            old->seen = true; /* status updates and the like: nothing to decode */
            return;
        }
        entry_free(take(c, i));
    }
    if (!text)
        return;
    struct pc_entry *e = entry_new(c, uid, pod, text);
    e->seen = true;
    struct vg_err err;
    if (insert(c, e, &err) < 0) {
        vg_log(VG_LOG_WARN, "pod not cached: Allocate cannot match its containers",
               "pod=%s/%s err=\"%s\"", e->ns, e->name, err.msg);
        entry_free(e);
    }
}

void dp_podcache_remove(struct dp_podcache *c, const char *uid)
{
    size_t i = find(c, uid);
    if (i != SIZE_MAX)
        entry_free(take(c, i));
}

void dp_podcache_replace(struct dp_podcache *c, json_t *items)
{
    for (size_t i = 0; i < c->count; i++)
        c->entries[i]->seen = false;
    size_t i;
    json_t *pod;
    json_array_foreach(items, i, pod) dp_podcache_put(c, pod);
    size_t kept = 0;
    for (size_t k = 0; k < c->count; k++) {
        struct pc_entry *e = c->entries[k];
        if (e->seen) {
            c->entries[kept++] = e;
        } else {
            if (e->waiting)
                list_remove(&c->waiting, e);
            entry_free(e);
        }
    }
    c->count = kept;
}

void dp_podcache_set_allocated(struct dp_podcache *c, const char *uid, const char *container,
                               bool allocated)
{
    size_t i = find(c, uid);
    if (i == SIZE_MAX)
        return;
    struct pc_entry *e = c->entries[i];
    for (unsigned k = 0; k < e->container_count; k++) {
        struct pc_container *pc = &e->containers[k];
        if (strcmp(pc->name, container) != 0 || pc->gpu_count == 0 || pc->allocated == allocated)
            continue;
        pc->allocated = allocated;
        if (allocated)
            e->pending--;
        else
            e->pending++;
    }
    reindex(c, e);
}

static bool same_gpus(const struct pc_container *c, char (*uuids)[ANNOT_UUID_MAX], size_t count)
{
    if (!uuids || c->gpu_count != count)
        return false;
    bool used[ANNOT_MAX_GPUS] = {false};
    for (size_t i = 0; i < count; i++) {
        bool found = false;
        for (unsigned k = 0; k < c->gpu_count && !found; k++)
            if (!used[k] && strcmp(c->gpus[k].uuid, uuids[i]) == 0)
                used[k] = found = true;
        if (!found)
            return false;
    }
    return true;
}

static int fill(const struct pc_entry *e, const struct pc_container *pc, struct dp_match *out,
                struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    if (vg_strlcpy(out->pod_uid, e->uid, sizeof(out->pod_uid)) < 0 ||
        vg_strlcpy(out->pod_namespace, e->ns, sizeof(out->pod_namespace)) < 0 ||
        vg_strlcpy(out->pod_name, e->name, sizeof(out->pod_name)) < 0 ||
        vg_strlcpy(out->container.name, pc->name, sizeof(out->container.name)) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "pod identity too long");
    out->container.gpu_count = pc->gpu_count;
    memcpy(out->container.gpus, pc->gpus, pc->gpu_count * sizeof(pc->gpus[0]));
    out->priority_given = pc->priority >= 0;
    out->priority = pc->priority >= 0 ? pc->priority : 1;
    return 0;
}

/* Drops the entries found fully allocated during a match from the waiting list. */
static void compact_waiting(struct dp_podcache *c)
{
    size_t kept = 0;
    for (size_t i = 0; i < c->waiting.n; i++) {
        struct pc_entry *e = c->waiting.v[i];
        if (e->pending)
            c->waiting.v[kept++] = e;
        else
            e->waiting = false;
    }
    c->waiting.n = kept;
}

int dp_podcache_match(struct dp_podcache *c, char (*uuids)[ANNOT_UUID_MAX], size_t count,
                      dp_allocated_fn allocated, void *allocated_arg, struct dp_match *out,
                      struct vg_err *err)
{
    for (int pass = uuids ? 0 : 1; pass < 2; pass++)
        for (size_t i = 0; i < c->waiting.n; i++) {
            struct pc_entry *e = c->waiting.v[i];
            for (unsigned k = 0; k < e->container_count && e->pending; k++) {
                struct pc_container *pc = &e->containers[k];
                if (pc->gpu_count == 0 || pc->allocated)
                    continue;
                if (allocated(allocated_arg, e->uid, pc->name)) {
                    pc->allocated = true;
                    e->pending--;
                    continue;
                }
                if (pass == 0 ? same_gpus(pc, uuids, count) : pc->gpu_count == count) {
                    int rc = fill(e, pc, out, err);
                    compact_waiting(c);
                    return rc;
                }
            }
        }
    compact_waiting(c);
    const char *problem = "";
    for (size_t i = 0; i < c->count && !problem[0]; i++)
        if (c->entries[i]->problem)
            problem = c->entries[i]->problem;
    return vg_err_set(err, -ENOENT,
                      "vgpu: no scheduling decision (%s) on node %s for a container asking "
                      "for %zu GPU(s); was the pod scheduled by vgpu-scheduler?%s",
                      ANNOT_KEY_DECISION, c->node, count, problem);
}

void dp_podcache_foreach_waiting(struct dp_podcache *c, const char *uid, dp_podcache_fn fn,
                                 void *arg)
{
    for (size_t i = 0; i < c->waiting.n; i++) {
        const struct pc_entry *e = c->waiting.v[i];
        if (uid && strcmp(e->uid, uid) != 0)
            continue;
        for (unsigned k = 0; k < e->container_count; k++) {
            struct dp_match m;
            const struct pc_container *pc = &e->containers[k];
            if (pc->gpu_count && !pc->allocated && fill(e, pc, &m, NULL) == 0)
                fn(arg, &m);
        }
    }
}

void dp_podcache_get_stats(const struct dp_podcache *c, struct dp_podcache_stats *stats)
{
    *stats = c->stats;
    stats->pods = c->count;
    stats->waiting = c->waiting.n;
    stats->unusable = 0;
    for (size_t i = 0; i < c->count; i++)
        if (c->entries[i]->problem)
            stats->unusable++;
}
