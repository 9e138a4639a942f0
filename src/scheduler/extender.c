/* The kube-scheduler extender verbs (docs/interfaces.md): ExtenderArgs in,
 * ExtenderFilterResult / HostPriorityList / ExtenderBindingResult out, with the exact
 * PascalCase field names of k8s.io/kube-scheduler/extender/v1.
 *
 * Error classes: a body that is not the expected JSON is -EBADMSG (or -EMSGSIZE past the
 * ceiling), which the daemon answers with HTTP 400/413; a well-formed request the
 * scheduler cannot serve is answered 200 with the result's Error field or FailedNodes,
 * which is how kube-scheduler expects refusals. */
#include "scheduler/internal.h"

#include "scheduler/args.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"

#define MAX_CONTAINERS ANNOT_MAX_CONTAINERS
#define MAX_ATTEMPTS   8 /* nodes tried for a multi-container pod */

json_t *sched_parse_body(const char *body, size_t len, struct vg_err *err)
{
    if (len > SCHED_MAX_BODY_BYTES) {
        vg_err_set(err, -EMSGSIZE, "request body of %zu bytes is over the %u byte limit", len,
                   SCHED_MAX_BODY_BYTES);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        vg_err_set(err, -EBADMSG, "malformed JSON at line %d column %d: %s", jerr.line, jerr.column,
                   jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        vg_err_set(err, -EBADMSG, "request body is not a JSON object");
        return NULL;
    }
    return root;
}

/* Refuses keys other than the listed ones (NULL-terminated). */
static int only_keys(json_t *obj, const char *what, const char *const *allowed, struct vg_err *err)
{
    const char *key;
    json_t *value;
    json_object_foreach(obj, key, value)
    {
        bool ok = false;
        for (size_t i = 0; allowed[i] != NULL && !ok; i++)
            ok = strcmp(key, allowed[i]) == 0;
        if (!ok)
            return vg_err_set(err, -EBADMSG, "%s: unknown field \"%.60s\"", what, key);
    }
    return 0;
}

/* ---- filter ------------------------------------------------------------------------- */

static void mask_set(uint64_t *mask, int32_t idx, bool on)
{
    uint64_t bit = (uint64_t)1 << ((uint32_t)idx % 64);
    if (on)
        mask[(uint32_t)idx / 64] |= bit;
    else
        mask[(uint32_t)idx / 64] &= ~bit;
}

/* Why a node cannot be a candidate at all, or NULL when it can. */
static const char *node_unusable(const struct sched_state *s, int32_t idx, int64_t now_s)
{
    if (idx < 0)
        return "vgpu: node unknown to the scheduler";
    const struct sched_node_live *info = &s->live[idx];
    if (!info->present)
        return "vgpu: node was deleted";
    if (!info->has_inventory)
        return "vgpu: node has no valid vgpu.io/gpus inventory";
    if (s->opt.heartbeat_timeout_s > 0 && now_s - info->heartbeat > s->opt.heartbeat_timeout_s)
        return "vgpu: node's GPU inventory heartbeat is stale (device plugin down?)";
    return NULL;
}

static void share_from_decision(struct sched_share *sh, const struct place_decision *d)
{
    memset(sh, 0, sizeof *sh);
    sh->gpu_count = (uint8_t)d->gpu_count;
    memcpy(sh->gpus, d->gpus, sizeof sh->gpus);
    memcpy(sh->mem, d->mem_mib, sizeof sh->mem);
    sh->milli = d->milli;
    sh->exclusive = d->exclusive;
    sh->pod_class = d->pod_class;
}

static char *encode_decision(const struct sched_state *s, const struct sched_pod *p,
                             const struct sched_container_request *reqs, int64_t now_s)
{
    struct annot_decision *d = xcalloc(1, sizeof *d);
    (void)vg_strlcpy(d->node, p->node_name, sizeof d->node);
    d->time = now_s;
    d->container_count = p->share_count;
    const struct place_node *n = &s->cluster->nodes[p->node];
    for (unsigned c = 0; c < p->share_count; c++) {
        struct annot_container *ac = &d->containers[c];
        const struct sched_share *sh = &p->shares[c];
        (void)vg_strlcpy(ac->name, reqs[c].name, sizeof ac->name);
        ac->gpu_count = sh->gpu_count;
        for (unsigned g = 0; g < sh->gpu_count; g++) {
            (void)vg_strlcpy(ac->gpus[g].uuid, n->gpus[sh->gpus[g]].uuid, sizeof ac->gpus[g].uuid);
            ac->gpus[g].memory_mib = sh->mem[g];
            ac->gpus[g].cores = sh->milli / 10;
        }
        if (sh->mig_size > 0) {
            (void)vg_strlcpy(ac->gpus[0].mig_profile, sh->mig_profile,
                             sizeof ac->gpus[0].mig_profile);
            ac->gpus[0].mig_start = sh->mig_start;
        }
    }
    struct vg_err err = {0};
    char *text = annot_decision_encode(d, &err);
    if (text == NULL)
        vg_log(VG_LOG_ERROR, "cannot encode decision", "pod=%s err=\"%s\"", p->key, err.msg);
    free(d);
    return text;
}

/* The k-th container's name among the filter's requests (one share each, in order). */
static const char *request_name(const void *arg, unsigned k)
{
    return ((const struct sched_container_request *)arg)[k].name;
}

/* Decides and charges every container of the pod among the nodes in s->offered.
 * Returns the record (charged) or NULL when nothing fits. */
static struct sched_pod *decide_pod_once(struct sched_state *s, const char *key,
                                         struct sched_container_request *reqs, int count,
                                         const struct sched_pod_policy *pp, struct vg_err *err);

/* Task priority (docs/scheduler.md, "Priority"): a high-priority pod's containers first
 * try only GPUs that hold no high-priority container yet, so that two high-priority pods
 * share a GPU only when no offered GPU can take the pod otherwise. */
static struct sched_pod *decide_pod(struct sched_state *s, const char *key,
                                    struct sched_container_request *reqs, int count,
                                    const struct sched_pod_policy *pp, struct vg_err *err)
{
    bool any_high = false;
    for (int c = 0; c < count; c++) {
        reqs[c].request.high = reqs[c].priority == 0;
        reqs[c].request.avoid_high = false;
        any_high = any_high || reqs[c].request.high;
    }
    if (!any_high)
        return decide_pod_once(s, key, reqs, count, pp, err);
    size_t words = s->node_info_cap / 64;
    VG_AUTO_FREE uint64_t *offered = xmalloc(words * sizeof *offered);
    memcpy(offered, s->offered, words * sizeof *offered);
    for (int c = 0; c < count; c++)
        reqs[c].request.avoid_high = reqs[c].request.high;
    struct sched_pod *p = decide_pod_once(s, key, reqs, count, pp, err);
    for (int c = 0; c < count; c++)
        reqs[c].request.avoid_high = false;
    if (p != NULL) {
        s->stats.priority_apart++;
        return p;
    }
    memcpy(s->offered, offered, words * sizeof *offered);
    p = decide_pod_once(s, key, reqs, count, pp, err);
    if (p != NULL)
        s->stats.priority_shared++;
    return p;
}

static struct sched_pod *decide_pod_once(struct sched_state *s, const char *key,
                                         struct sched_container_request *reqs, int count,
                                         const struct sched_pod_policy *pp, struct vg_err *err)
{
    /* The first container chooses among the offered nodes (through the memo: pods of
     * one shape mostly meet unchanged nodes); the others must fit on the node it chose. */
    struct place_context ctx = {.rng = &s->rng,
                                .gpu_order = pp->order,
                                .node_mask = s->offered,
                                .memo = s->memo,
                                .memo_count = SCHED_MEMOS};
    struct place_context rest = {.rng = &s->rng, .gpu_order = pp->order, .node_mask = s->picked};
    for (int c = 0; c < count; c++)
        if (place_request_resolve(s->cluster, &reqs[c].request, err) < 0)
            return NULL;
    if (pp->policy == PLACE_POLICY_FGD || pp->policy == PLACE_POLICY_DEFAULT) {
        /* One mix for the whole pod: charging its first container must not change it. */
        ctx.mix = rest.mix = sched_mix(s, &reqs[0].request, &ctx.frag_cache);
        rest.frag_cache = ctx.frag_cache;
        ctx.memo_mix = ctx.mix == &s->mix_learned; /* sched_mix resets the memo on a change */
    }
    struct sched_pod *p = xcalloc(1, sizeof *p);
    (void)vg_strlcpy(p->key, key, sizeof p->key);
    p->shares = xcalloc((size_t)count, sizeof *p->shares);
    p->types = sched_types_id(s, &reqs[0].request); /* the lists are the pod's */
    for (int attempt = 0; attempt < MAX_ATTEMPTS; attempt++) {
        struct place_decision d;
        int rc = place_decide(s->cluster, &reqs[0].request, pp->policy, &ctx, &d, err);
        if (rc < 0)
            break;
        p->node = d.node;
        p->share_count = 0;
        share_from_decision(&p->shares[0], &d);
        p->shares[0].high = reqs[0].request.high;
        if (sched_share_charge(s, d.node, &p->shares[0], p->types, err) < 0)
            break; /* cannot happen: the core said it fits */
        p->share_count = 1;
        mask_set(s->picked, d.node, true);
        bool ok = true;
        for (int c = 1; c < count && ok; c++) {
            struct place_decision dc;
            ok = place_decide(s->cluster, &reqs[c].request, pp->policy, &rest, &dc, err) == 0;
            if (ok) {
                share_from_decision(&p->shares[c], &dc);
                p->shares[c].high = reqs[c].request.high;
                ok = sched_share_charge(s, dc.node, &p->shares[c], p->types, err) == 0;
            }
            if (ok)
                p->share_count++;
        }
        mask_set(s->picked, d.node, false);
        if (ok) {
            p->applied = true;
            (void)vg_strlcpy(p->node_name, s->cluster->nodes[d.node].name, sizeof p->node_name);
            return p;
        }
        /* The pod's other containers do not fit beside the first here: try elsewhere. */
        while (p->share_count-- > 0)
            sched_share_uncharge(s, d.node, &p->shares[p->share_count], p->types);
        mask_set(s->offered, d.node, false); /* not this node again */
    }
    free(p->shares);
    free(p);
    return NULL;
}

static const char *node_name_of(json_t *item)
{
    if (json_is_string(item))
        return json_string_value(item);
    return sched_json_str(item, "metadata", "name", NULL);
}

/* One offered node and what filter says of it (32 bytes: the filter walks 5,000). */
struct offer;
static struct sched_pod *decide_mig(struct sched_state *s, const char *key,
                                    const struct sched_container_request *reqs, int count,
                                    const struct offer *of, size_t n, int64_t now_s,
                                    const char ***why);

enum verdict { V_OMIT = 0, V_PASS, V_FAIL };
struct offer {
    const char *name; /* name_len bytes; NUL-terminated only on the jansson path */
    union {
        uint64_t hash;   /* fast path, until the lookup: of name */
        const char *why; /* after it: V_FAIL's reason */
    };
    uint32_t name_len;
    int32_t idx;  /* model index, -1 for a node the scheduler does not know */
    bool in_text; /* fast path: name is an offset into the scan's text until it settles */
    uint8_t verdict;
};

/* The pod on MIG GPUs of the offers still standing (sched_mig_decide); *why is kept by the
 * state for the reasons, one per offer (NULL: the generic one). */
static struct sched_pod *decide_mig(struct sched_state *s, const char *key,
                                    const struct sched_container_request *reqs, int count,
                                    const struct offer *of, size_t n, int64_t now_s,
                                    const char ***why)
{
    if (n > s->mig_cap) {
        free(s->mig_ids);
        free(s->mig_why);
        s->mig_cap = n;
        s->mig_ids = xcalloc(n, sizeof *s->mig_ids);
        s->mig_why = xcalloc(n, sizeof *s->mig_why);
    }
    for (size_t i = 0; i < n; i++)
        s->mig_ids[i] = of[i].verdict == V_FAIL ? -1 : of[i].idx;
    *why = s->mig_why;
    return sched_mig_decide(s, key, reqs, count, s->mig_ids, n, s->mig_why, now_s);
}

/* The filter decision over the offered nodes, shared by both readers: sets each offer's
 * verdict, charges and records the promise; *error is the result's Error text ("" when
 * none). pod is a validated object and key its "ns/name". 0, or SCHED_FILTER_RETRY for a
 * pod the pod watch does not show waiting (no offer gets a verdict). */
static int filter_decide_offers(struct sched_state *s, json_t *pod, const char *key,
                                struct offer *of, size_t n, struct sched_now now, char *error,
                                size_t error_size)
{
    error[0] = '\0';
    s->stats.filters++;
    if (s->filter_reqs == NULL)
        s->filter_reqs = xcalloc(MAX_CONTAINERS, sizeof *s->filter_reqs);
    struct sched_container_request *reqs = s->filter_reqs; /* filled before use */
    struct vg_err perr = {0};
    int count = sched_pod_requests(&s->opt, pod, reqs, MAX_CONTAINERS, &perr);
    struct sched_pod_policy pp;
    if (count >= 0 && sched_pod_policy_read(&s->opt, pod, &pp, &perr) < 0)
        count = -EINVAL;
    struct sched_pod *old = sched_map_get(&s->pods, key);
    if (count < 0) {
        (void)vg_snprintf(error, error_size, "vgpu: %s", perr.msg);
    } else if (old != NULL && !old->assumed) {
        /* Already decided in the API (a retry after our bind, or someone else's). */
        for (size_t i = 0; i < n; i++) {
            bool same = of[i].name_len == strlen(old->node_name) &&
                        memcmp(of[i].name, old->node_name, of[i].name_len) == 0;
            of[i].verdict = same ? V_PASS : V_FAIL;
            of[i].why = same ? NULL : "vgpu: pod already has GPUs on another node";
        }
    } else if (s->opt.require_pending &&
               !sched_pending_has(s, key, sched_json_str(pod, "metadata", "uid", NULL))) {
        /* Only a pod the API holds gets a promise: anyone else's filter would reserve
         * GPUs for nobody until the TTL. The watch may lag kube-scheduler's by a moment:
         * the error is one kube-scheduler retries, and the daemon asks again first. */
        const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
        (void)vg_snprintf(error, error_size,
                          "vgpu: pod %s (uid %.128s) is not waiting for a node as the API shows "
                          "it (not created, already bound, finished, or not seen by the "
                          "scheduler's pod watch yet); nothing reserved, scheduling will be "
                          "retried",
                          key, uid != NULL ? uid : "none");
        s->stats.unknown_pods++;
        return SCHED_FILTER_RETRY;
    } else {
        uint32_t held = 0;
        if (old == NULL && sched_assume_admit(s, key, &held) < 0) {
            (void)vg_snprintf(error, error_size,
                              "vgpu: namespace of pod %s holds %u outstanding GPU assumptions "
                              "(filtered, not yet bound), the most --max-assumptions-per-"
                              "namespace allows; nothing reserved, scheduling will be retried "
                              "once some are bound or expire",
                              key, held);
            s->stats.namespace_bound++;
            return 0;
        }
        if (old != NULL)
            sched_pod_drop(s, old); /* a new attempt replaces the old promise */
        struct sched_pod *p = NULL;
        size_t nmarked = 0;
        for (size_t i = 0; i < n; i++) {
            const char *why = count == 0 ? NULL : node_unusable(s, of[i].idx, now.unix_s);
            if (why != NULL) {
                of[i].verdict = V_FAIL;
                of[i].why = why;
            } else if (count > 0) {
                mask_set(s->offered, of[i].idx, true);
                nmarked++;
            }
        }
        if (count == 0) {
            /* No GPUs asked: every node passes; the record lets bind go through. */
            p = xcalloc(1, sizeof *p);
            (void)vg_strlcpy(p->key, key, sizeof p->key);
            p->node = -1;
            for (size_t i = 0; i < n; i++)
                of[i].verdict = V_PASS;
        } else {
            p = decide_pod(s, key, reqs, count, &pp, &perr);
            if (nmarked > 0) /* decide_pod may clear bits too: clear the whole set (a few
                                hundred words, not one step per offer) */
                memset(s->offered, 0, s->node_info_cap / 64 * sizeof *s->offered);
            const char **mig_why = NULL;
            if (p == NULL && nmarked > 0)
                p = decide_mig(s, key, reqs, count, of, n, now.unix_s, &mig_why);
            if (p == NULL) {
                for (size_t i = 0; i < n; i++)
                    if (of[i].verdict != V_FAIL) {
                        of[i].verdict = V_FAIL;
                        of[i].why = mig_why != NULL && mig_why[i] != NULL
                                        ? mig_why[i]
                                        : "vgpu: no GPU with enough free memory, compute and "
                                          "slots";
                    }
                s->stats.filter_unschedulable++;
            } else {
                /* The chosen node is a known one: its offers are those with its index. */
                for (size_t i = 0; i < n; i++)
                    if (of[i].idx == p->node)
                        of[i].verdict = V_PASS;
                p->decision = encode_decision(s, p, reqs, now.unix_s);
                p->names = sched_share_names(p->share_count, request_name, reqs);
                s->stats.filter_fits++;
            }
        }
        if (p != NULL) {
            const char *rv = sched_json_str(pod, "metadata", "resourceVersion", NULL);
            if (rv != NULL)
                (void)vg_strlcpy(p->resource_version, rv, sizeof p->resource_version);
            const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
            if (uid == NULL || vg_strlcpy(p->uid, uid, sizeof p->uid) < 0)
                p->uid[0] = '\0'; /* no uid precondition rather than a wrong one */
            p->assumed = true;
            p->expires_ms = now.mono_ms + s->opt.assume_ttl_ms;
            sched_map_put(&s->pods, p->key, p);
            if (old == NULL)
                sched_assume_count(s, p->key);
        }
    }
    return 0;
}

/* filter_decide_offers, then the verdict kept for the pod (view.h): the node chosen, the
 * Error, and the reasons the other offers failed. A pod the API does not hold gets none
 * (anyone who reaches the extender may name one). */
static int filter_decide(struct sched_state *s, json_t *pod, const char *key, struct offer *of,
                         size_t n, struct sched_now now, char *error, size_t error_size)
{
    int rc = filter_decide_offers(s, pod, key, of, n, now, error, error_size);
    if (rc == SCHED_FILTER_RETRY)
        return rc;
    /* Only pods the API holds (waiting, or with a share): a filter naming anything else
     * (a malformed request is refused before the pending check) keeps nothing. */
    if (s->opt.require_pending && sched_map_get(&s->pending, key) == NULL &&
        sched_map_get(&s->pods, key) == NULL)
        return rc;
    struct sched_verdict *v = sched_verdict_begin(s, key, now.unix_s);
    if (v == NULL)
        return rc;
    (void)vg_strlcpy(v->error, error, sizeof v->error);
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p != NULL && p->assumed && p->node >= 0)
        (void)vg_strlcpy(v->node, p->node_name, sizeof v->node);
    v->offered = (uint32_t)n;
    for (size_t i = 0; i < n; i++)
        if (of[i].verdict == V_FAIL)
            sched_verdict_fail(v, of[i].why, of[i].name, of[i].name_len);
    return rc;
}

/* Counts a refused request; returns rc. */
static int bad_request(struct sched_state *s, int rc)
{
    s->stats.bad_requests++;
    return rc;
}

/* The filter's ExtenderArgs: the pod, its key, and the node list (NodeNames when
 * *cache, else Nodes.items), every node named. */

/* The pod's key could not be made: a malformed ExtenderArgs, with the reason. (Wrapped,
 * never formatted into err from err->msg itself.) */
static int args_error(struct vg_err *err)
{
    vg_err_wrap(err, "ExtenderArgs");
    err->code = -EBADMSG;
    return -EBADMSG;
}
static int filter_args(json_t *args, json_t **pod, json_t **list, bool *cache, char *key,
                       size_t key_size, struct vg_err *err)
{
    static const char *const keys[] = {"Pod", "Nodes", "NodeNames", NULL};
    int rc = only_keys(args, "ExtenderArgs", keys, err);
    if (rc < 0)
        return rc;
    *pod = json_object_get(args, "Pod");
    json_t *names = json_object_get(args, "NodeNames");
    json_t *items = json_object_get(json_object_get(args, "Nodes"), "items");
    *cache = json_is_array(names);
    if (!json_is_object(*pod))
        return vg_err_set(err, -EBADMSG, "ExtenderArgs: Pod is missing or not an object");
    if (!*cache && !json_is_array(items))
        return vg_err_set(err, -EBADMSG,
                          "ExtenderArgs: neither NodeNames nor Nodes.items is a list");
    *list = *cache ? names : items;
    size_t i;
    json_t *item;
    json_array_foreach(*list, i, item)
    {
        if (node_name_of(item) == NULL)
            return vg_err_set(err, -EBADMSG, "ExtenderArgs: node %zu has no name", i);
    }
    if (sched_pod_key(*pod, key, key_size, err) < 0)
        return args_error(err);
    return 0;
}

/* The jansson reader: every shape ExtenderArgs may take (NodeNames, or Nodes.items when
 * nodeCacheCapable is false), and the one whose verdict stands for malformed bodies. */
int sched_filter_tree(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                      char **out, struct vg_err *err)
{
    *out = NULL;
    VG_AUTO_JSON json_t *args = sched_parse_body(body, len, err);
    if (args == NULL)
        return err->code;
    json_t *pod = NULL, *list = NULL;
    bool cache = false;
    char key[SCHED_KEY_MAX];
    int rc = filter_args(args, &pod, &list, &cache, key, sizeof key, err);
    if (rc < 0)
        return bad_request(s, rc);
    size_t i;
    json_t *item;
    size_t n = json_array_size(list);
    struct offer *of = xcalloc(n + 1, sizeof *of);
    json_array_foreach(list, i, item)
    {
        of[i].name = node_name_of(item);
        of[i].name_len = (uint32_t)strlen(of[i].name); /* under the body ceiling */
        of[i].idx = sched_node_find(s, of[i].name);
    }
    char error[VG_ERR_MSG_MAX + 64];
    int decided = filter_decide(s, pod, key, of, n, now, error, sizeof error);

    VG_AUTO_JSON json_t *result = json_object();
    json_t *failed = json_object();
    json_t *passed = json_array();
    json_array_foreach(list, i, item)
    {
        if (of[i].verdict == V_PASS)
            json_array_append(passed, item);
        else if (of[i].verdict == V_FAIL)
            json_object_set_new(failed, of[i].name, json_string(of[i].why));
    }
    free(of);
    if (cache) {
        json_object_set_new(result, "NodeNames", passed);
        json_object_set_new(result, "Nodes", json_null());
    } else {
        json_t *nl =
            json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "NodeList", "items", passed);
        json_object_set_new(result, "Nodes", nl);
        json_object_set_new(result, "NodeNames", json_null());
    }
    json_object_set_new(result, "FailedNodes", failed);
    json_object_set_new(result, "FailedAndUnresolvableNodes", json_object());
    json_object_set_new(result, "Error", json_string(error));
    *out = json_dumps(result, JSON_COMPACT);
    return decided;
}

/* ---- filter, fast lane (args.h) ------------------------------------------------------- */

struct scan_ctx {
    const struct sched_state *s;
    const char *body, *body_end; /* names found here are used in place */
    struct vg_buf *text;         /* the decoded names, NUL-separated */
    struct offer **of;
    size_t n, *cap;
    struct vg_err *err;
};

/* At most one offer per byte of the body (the fast lane reads bodies up to the limit). */
#define SCAN_OFFERS_MAX SCHED_MAX_BODY_BYTES

static int scan_names(void *arg, const struct sched_args_name *names, size_t count)
{
    struct scan_ctx *c = arg;
    int rc = vg_array_grow(c->of, c->cap, c->n + count, sizeof **c->of, SCAN_OFFERS_MAX,
                           "node names", c->err);
    if (rc < 0)
        return rc;
    for (size_t k = 0; k < count; k++) {
        const char *name = names[k].name;
        size_t len = names[k].len;
        struct offer *o = &(*c->of)[c->n++];
        *o = (struct offer){
            .name = name, .hash = sched_map_hash(name, len), .name_len = (uint32_t)len};
        if (name >= c->body && name < c->body_end)
            continue; /* in the request body, which outlives the filter */
        size_t at = c->text->len;
        if ((rc = vg_buf_append(c->text, name, len, c->err)) < 0 ||
            (rc = vg_buf_append(c->text, "", 1, c->err)) < 0) /* the NUL that ends it */
            return rc;
        o->name = (const char *)(uintptr_t)at; /* an offset until the text settles */
        o->in_text = true;
    }
    return 0;
}

/* The offers' node indices: 5,000 hash lookups, each a likely cache miss or two, so the
 * slot is fetched 16 lookups ahead and its key 8 ahead. Each offer's hash gives way to
 * its index. */
static void lookup_offers(const struct sched_state *s, struct offer *of, size_t n)
{
    const struct sched_map *m = &s->node_index;
    for (size_t i = 0; i < n && i < 16; i++)
        sched_map_prefetch_slot(m, of[i].hash);
    for (size_t i = 0; i < n; i++) {
        if (i + 16 < n)
            sched_map_prefetch_slot(m, of[i + 16].hash);
        if (i + 8 < n)
            sched_map_prefetch_key(m, of[i + 8].hash);
        void *v = sched_map_get_hashed_n(m, of[i].name, of[i].name_len, of[i].hash);
        of[i].idx = v == NULL ? -1 : (int32_t)((uintptr_t)v - 1);
        of[i].why = NULL;
    }
}

/* ExtenderFilterResult for NodeNames, written directly, in one pass over the offers:
 * passing names go to the answer, failed ones to a second buffer appended after them.
 * FailedNodes holds each name once (the first offer of it; every offer of one name has
 * the same verdict). */
static char *write_filter_result(struct sched_state *s, const struct offer *of, size_t n,
                                 const char *error)
{
    struct sched_jbuf b = {0}, failed = {0};
    sched_jbuf_lit(&b, "{\"NodeNames\":[");
    bool first = true, first_failed = true, any_known_failed = false;
    struct sched_map unknown; /* names of unknown nodes already written */
    sched_map_init(&unknown);
    for (size_t i = 0; i < n; i++) {
        if (of[i].verdict == V_PASS) {
            if (!first)
                sched_jbuf_raw(&b, ",", 1);
            first = false;
            sched_jbuf_str(&b, of[i].name, of[i].name_len);
            continue;
        }
        if (of[i].verdict != V_FAIL)
            continue;
        if (of[i].idx >= 0) {
            uint64_t bit = (uint64_t)1 << ((uint32_t)of[i].idx % 64);
            uint64_t *word = &s->listed[(uint32_t)of[i].idx / 64];
            if (*word & bit)
                continue;
            *word |= bit;
            any_known_failed = true;
        } else {
            char key[SCHED_ARGS_NAME_MAX + 1]; /* the fast path's names are no longer */
            (void)vg_snprintf(key, sizeof key, "%.*s", (int)of[i].name_len, of[i].name);
            if (sched_map_get(&unknown, key) != NULL)
                continue;
            sched_map_put(&unknown, key, (void *)1);
        }
        if (!first_failed)
            sched_jbuf_raw(&failed, ",", 1);
        first_failed = false;
        sched_jbuf_str(&failed, of[i].name, of[i].name_len);
        sched_jbuf_raw(&failed, ":", 1);
        sched_jbuf_str(&failed, of[i].why, strlen(of[i].why));
    }
    sched_map_release(&unknown);
    if (any_known_failed)
        memset(s->listed, 0, s->node_info_cap / 64 * sizeof *s->listed);
    sched_jbuf_lit(&b, "],\"Nodes\":null,\"FailedNodes\":{");
    if (failed.len > 0)
        sched_jbuf_raw(&b, failed.p, failed.len);
    free(failed.p);
    sched_jbuf_lit(&b, "},\"FailedAndUnresolvableNodes\":{},\"Error\":");
    sched_jbuf_str(&b, error, strlen(error));
    sched_jbuf_raw(&b, "}", 1);
    return sched_jbuf_take(&b);
}

/* 0 with *out; SCHED_ARGS_DECLINE when the body is for sched_filter_tree. The decoded
 * names and the offers stay in s for the next filter. */
static int filter_fast(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                       char **out, struct vg_err *err)
{
    vg_buf_reset(&s->scan_text);
    struct scan_ctx c = {.s = s,
                         .body = body,
                         .body_end = body + len,
                         .text = &s->scan_text,
                         .of = &s->scan_offers,
                         .cap = &s->scan_offers_cap,
                         .err = err};
    struct sched_args_view v;
    int rc = sched_args_scan(body, len, &v, scan_names, &c);
    if (rc != 0)
        return rc;
    VG_AUTO_JSON json_t *pod = json_loadb(v.pod, v.pod_len, JSON_REJECT_DUPLICATES, NULL);
    if (pod == NULL)
        return SCHED_ARGS_DECLINE; /* jansson words the error */
    char key[SCHED_KEY_MAX];
    if (sched_pod_key(pod, key, sizeof key, err) < 0)
        return bad_request(s, args_error(err));
    struct offer *of = *c.of;
    for (size_t i = 0; i < c.n && c.text->len > 0; i++) /* names that were decoded */
        if (of[i].in_text)
            of[i].name = c.text->data + (uintptr_t)of[i].name;
    lookup_offers(s, of, c.n);
    char error[VG_ERR_MSG_MAX + 64];
    int decided = filter_decide(s, pod, key, of, c.n, now, error, sizeof error);
    *out = write_filter_result(s, of, c.n, error);
    return decided;
}

int sched_filter(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                 char **out, struct vg_err *err)
{
    *out = NULL;
    if (len <= SCHED_MAX_BODY_BYTES) {
        int rc = filter_fast(s, body, len, now, out, err);
        if (rc != SCHED_ARGS_DECLINE)
            return rc;
    }
    return sched_filter_tree(s, body, len, now, out, err);
}

int sched_prioritize(struct sched_state *s, const char *body, size_t len, char **out,
                     struct vg_err *err)
{
    *out = NULL;
    VG_AUTO_JSON json_t *args = sched_parse_body(body, len, err);
    if (args == NULL)
        return err->code;
    static const char *const keys[] = {"Pod", "Nodes", "NodeNames", NULL};
    int rc = only_keys(args, "ExtenderArgs", keys, err);
    if (rc < 0)
        return bad_request(s, rc);
    json_t *pod = json_object_get(args, "Pod");
    json_t *names = json_object_get(args, "NodeNames");
    json_t *list =
        json_is_array(names) ? names : json_object_get(json_object_get(args, "Nodes"), "items");
    if (!json_is_array(list))
        return bad_request(
            s,
            vg_err_set(err, -EBADMSG, "ExtenderArgs: neither NodeNames nor Nodes.items is a list"));
    char key[SCHED_KEY_MAX];
    if (sched_pod_key(pod, key, sizeof key, err) < 0)
        return bad_request(s, args_error(err));
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    VG_AUTO_JSON json_t *result = json_array();
    size_t i;
    json_t *item;
    json_array_foreach(list, i, item)
    {
        const char *name = node_name_of(item);
        if (name == NULL)
            continue;
        int score = p != NULL && p->node >= 0 && strcmp(p->node_name, name) == 0 ? 10 : 0;
        json_array_append_new(result, json_pack("{s:s, s:i}", "Host", name, "Score", score));
    }
    *out = json_dumps(result, JSON_COMPACT);
    return 0;
}

/* ---- bind --------------------------------------------------------------------------- */

int sched_bind_prepare(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                       struct sched_bind *out, struct vg_err *err)
{
    (void)now;
    memset(out, 0, sizeof *out);
    VG_AUTO_JSON json_t *args = sched_parse_body(body, len, err);
    if (args == NULL)
        return err->code;
    static const char *const keys[] = {"PodName", "PodNamespace", "PodUID", "Node", NULL};
    int rc = only_keys(args, "ExtenderBindingArgs", keys, err);
    if (rc < 0)
        return bad_request(s, rc);
    const char *name = sched_json_str(args, "PodName", NULL, NULL);
    const char *ns = sched_json_str(args, "PodNamespace", NULL, NULL);
    const char *node = sched_json_str(args, "Node", NULL, NULL);
    const char *uid = sched_json_str(args, "PodUID", NULL, NULL);
    if (name == NULL || name[0] == '\0' || node == NULL || node[0] == '\0')
        return bad_request(
            s, vg_err_set(err, -EBADMSG, "ExtenderBindingArgs: PodName and Node are required"));
    if (ns == NULL || ns[0] == '\0')
        ns = "default";
    if (vg_strlcpy(out->ns, ns, sizeof out->ns) < 0 ||
        vg_strlcpy(out->name, name, sizeof out->name) < 0 ||
        vg_strlcpy(out->node, node, sizeof out->node) < 0 ||
        (uid != NULL && vg_strlcpy(out->uid, uid, sizeof out->uid) < 0))
        return bad_request(s, vg_err_set(err, -EBADMSG, "ExtenderBindingArgs: a name is too long"));
    s->stats.binds++;
    char key[SCHED_KEY_MAX];
    (void)vg_snprintf(key, sizeof key, "%s/%s", out->ns, out->name);
    struct sched_pod *p = sched_map_get(&s->pods, key);
    /* Only our own live promise is bound: a decision in the API that the scheduler did not
     * make (an unbound pod's annotation) never reaches a binding. */
    if (p == NULL || !p->assumed) {
        s->stats.bind_failures++;
        return vg_err_set(err, -ENOENT,
                          "vgpu: no live filter decision for pod %s (it expired or was never "
                          "filtered); scheduling will be retried",
                          key);
    }
    if (p->binding) {
        s->stats.bind_failures++;
        return vg_err_set(err, -EBUSY, "vgpu: a bind for pod %s is already in flight", key);
    }
    if (p->node >= 0 && strcmp(p->node_name, out->node) != 0) {
        s->stats.bind_failures++;
        return vg_err_set(err, -EINVAL, "vgpu: pod %s was promised node %s, not %s", key,
                          p->node_name, out->node);
    }
    if (out->uid[0] != '\0' && p->uid[0] != '\0' && strcmp(out->uid, p->uid) != 0) {
        /* The pod filter saw is gone and another of the same name took its place. */
        s->stats.bind_failures++;
        rc = vg_err_set(err, -ESTALE,
                        "vgpu: pod %s was recreated since it was filtered (uid %s, now %s); "
                        "scheduling will be retried",
                        key, p->uid, out->uid);
        if (p->assumed)
            sched_pod_drop(s, p);
        return rc;
    }
    /* The promise must still be charged, on GPUs that take tenants: a changed inventory
     * may have pushed it out, and a bound pod whose decision over-commits a GPU blocks it
     * (state.c). */
    const char *unfit = NULL;
    if (p->node >= 0 && !p->applied)
        unfit = "no longer fits its node (the node's GPUs changed)";
    for (unsigned k = 0; k < p->share_count && unfit == NULL && p->node >= 0; k++)
        for (unsigned g = 0; g < p->shares[k].gpu_count && unfit == NULL; g++)
            if (sched_gpu_blocked(s, p->node, p->shares[k].gpus[g]))
                unfit = "names a GPU that a pod bound since over-commits";
    if (unfit != NULL) {
        s->stats.bind_failures++;
        rc = vg_err_set(err, -ESTALE,
                        "vgpu: the share promised to pod %s on node %s %s; nothing was bound, "
                        "scheduling will be retried",
                        key, p->node_name, unfit);
        sched_pod_drop(s, p);
        return rc;
    }
    if (out->uid[0] == '\0')
        (void)vg_strlcpy(out->uid, p->uid, sizeof out->uid);
    p->binding = true;
    (void)vg_strlcpy(out->resource_version, p->resource_version, sizeof out->resource_version);
    out->decision = p->decision != NULL ? xstrdup(p->decision) : NULL;
    return 0;
}

void sched_bind_finish(struct sched_state *s, const struct sched_bind *b,
                       enum sched_bind_outcome outcome, struct sched_now now)
{
    char key[SCHED_KEY_MAX];
    (void)vg_snprintf(key, sizeof key, "%s/%s", b->ns, b->name);
    struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p == NULL || !p->binding)
        return;
    p->binding = false;
    if (outcome != SCHED_BIND_OK) {
        s->stats.bind_failures++;
        if (!p->assumed)
            return; /* the watch already showed ours bound */
        if (outcome == SCHED_BIND_UNKNOWN && p->node >= 0) {
            /* Perhaps written: keep the share until the watch tells, or the TTL. */
            p->expires_ms = now.mono_ms + s->opt.assume_ttl_ms;
            return;
        }
        sched_pod_drop(s, p);
        return;
    }
    if (p->node < 0) {
        sched_pod_drop(s, p); /* a pod without GPUs: nothing to remember */
        return;
    }
    p->assumed = false;
    p->written = true;
    p->bound = true;
}

void sched_bind_release(struct sched_bind *b)
{
    free(b->decision);
    b->decision = NULL;
}
