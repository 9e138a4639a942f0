/* The pods waiting for a node, as the pod watch shows them, the per-namespace bound on
 * filter's outstanding assumptions (sched.h, "pending pods"), and filter's last verdict on
 * each of them (the dashboard's and `vgpu explain`'s "why").
 *
 * /filter promises capacity for a pod until bind or the assumption TTL. Without these
 * two checks anyone who can reach the extender could reserve every GPU with filters for
 * pods that do not exist, and a namespace could hold any number of promises at once. */
#include "scheduler/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"

/* A pod filter may still be asked about: not bound to a node, not finished. */
static bool waiting(json_t *pod)
{
    if (sched_json_str(pod, "spec", "nodeName", NULL) != NULL)
        return false;
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    return phase == NULL || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0);
}

static void forget(struct sched_state *s, const char *key)
{
    free(sched_map_remove(&s->pending, key));
}

void sched_pending_update(struct sched_state *s, json_t *pod)
{
    char key[SCHED_KEY_MAX];
    struct vg_err err = {0};
    if (sched_pod_key(pod, key, sizeof key, &err) < 0)
        return; /* sched_pod_update logs and counts it */
    if (!waiting(pod)) {
        forget(s, key);
        return;
    }
    const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
    free(sched_map_put(&s->pending, key, xstrdup(uid != NULL ? uid : "")));
}

void sched_pending_delete(struct sched_state *s, json_t *pod)
{
    char key[SCHED_KEY_MAX];
    struct vg_err err = {0};
    if (sched_pod_key(pod, key, sizeof key, &err) == 0) {
        forget(s, key);
        sched_verdict_drop(s, key);
    }
}

void sched_pending_resync(struct sched_state *s, json_t *items)
{
    sched_pending_release(s);
    size_t i;
    json_t *pod;
    json_array_foreach(items, i, pod) sched_pending_update(s, pod);
    sched_verdicts_prune(s);
}

void sched_pending_release(struct sched_state *s)
{
    for (size_t i = sched_map_next(&s->pending, 0); i < s->pending.cap;
         i = sched_map_next(&s->pending, i + 1))
        free(s->pending.slots[i].value);
    sched_map_release(&s->pending);
    sched_map_release(&s->ns_assumed);
}

size_t sched_pending_count(const struct sched_state *s)
{
    return s->pending.count;
}

bool sched_pending_has(const struct sched_state *s, const char *key, const char *uid)
{
    const char *known = sched_map_get(&s->pending, key);
    return known != NULL && strcmp(known, uid != NULL ? uid : "") == 0;
}

/* ---- assumptions per namespace ----------------------------------------------------------
 * ns_assumed holds, per namespace, an upper bound of its outstanding assumptions: one
 * more for each assumption filter makes, none less when one ends (bind, expiry, the
 * watch: many paths). Only at the bound is it recounted exactly, over every pod held, so
 * the common filter pays one lookup and a refusal is never a stale count's. */

/* key's namespace (the part before '/') into ns (SCHED_KEY_MAX bytes); its length. */
static size_t ns_of(const char *key, char *ns)
{
    const char *slash = strchr(key, '/');
    size_t len = slash != NULL ? (size_t)(slash - key) : strlen(key);
    if (len >= SCHED_KEY_MAX)
        len = SCHED_KEY_MAX - 1; /* keys are shorter: sched_pod_key wrote them */
    memcpy(ns, key, len);
    ns[len] = '\0';
    return len;
}

static uint32_t recount(const struct sched_state *s, const char *ns, size_t len)
{
    uint32_t n = 0;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (p->assumed && strncmp(p->key, ns, len) == 0 && p->key[len] == '/')
            n++;
    }
    return n;
}

int sched_assume_admit(struct sched_state *s, const char *key, uint32_t *held)
{
    *held = 0;
    uint32_t limit = s->opt.max_assumed_per_namespace;
    if (limit == 0)
        return 0;
    char ns[SCHED_KEY_MAX];
    size_t len = ns_of(key, ns);
    uint32_t n = (uint32_t)(uintptr_t)sched_map_get(&s->ns_assumed, ns);
    if (n >= limit) {
        n = recount(s, ns, len);
        if (n == 0)
            sched_map_remove(&s->ns_assumed, ns);
        else
            sched_map_put(&s->ns_assumed, ns, (void *)(uintptr_t)n);
    }
    *held = n;
    return n >= limit ? -EDQUOT : 0;
}

void sched_assume_count(struct sched_state *s, const char *key)
{
    if (s->opt.max_assumed_per_namespace == 0)
        return;
    char ns[SCHED_KEY_MAX];
    (void)ns_of(key, ns);
    uint32_t n = (uint32_t)(uintptr_t)sched_map_get(&s->ns_assumed, ns);
    sched_map_put(&s->ns_assumed, ns, (void *)(uintptr_t)(n + 1));
}

/* ---- filter verdicts: why each pending pod was refused where (view.c reads them)
 * ----------------------------------------------------------------- */

struct sched_verdict *sched_verdict_begin(struct sched_state *s, const char *key, int64_t now_s)
{
    struct sched_verdict *v = sched_map_get(&s->verdicts, key);
    if (v == NULL) {
        if (s->verdicts.count >= SCHED_VERDICTS_MAX)
            return NULL;
        v = xcalloc(1, sizeof *v);
        sched_map_put(&s->verdicts, key, v);
    }
    memset(v, 0, sizeof *v);
    v->time = now_s;
    return v;
}

void sched_verdict_fail(struct sched_verdict *v, const char *why, const char *node, size_t len)
{
    v->failed++;
    unsigned r = 0;
    while (r < v->reason_count && v->reasons[r].why != why)
        r++;
    if (r == v->reason_count) {
        if (r == SCHED_VERDICT_REASONS) {
            v->other_reasons++;
            return;
        }
        v->reasons[r].why = why;
        v->reason_count++;
    }
    struct sched_verdict_reason *re = &v->reasons[r];
    if (re->count < SCHED_VERDICT_EXAMPLES) {
        size_t n = len < sizeof re->nodes[0] - 1 ? len : sizeof re->nodes[0] - 1;
        memcpy(re->nodes[re->count], node, n);
        re->nodes[re->count][n] = '\0';
    }
    re->count++;
}

void sched_verdict_drop(struct sched_state *s, const char *key)
{
    free(sched_map_remove(&s->verdicts, key));
}

void sched_verdicts_prune(struct sched_state *s)
{
    size_t n = 0;
    VG_AUTO_FREE char(*gone)[SCHED_KEY_MAX] = xcalloc(s->verdicts.count + 1, sizeof *gone);
    for (size_t i = sched_map_next(&s->verdicts, 0); i < s->verdicts.cap;
         i = sched_map_next(&s->verdicts, i + 1)) {
        const char *key = s->verdicts.slots[i].key;
        if (sched_map_get(&s->pending, key) == NULL && sched_map_get(&s->pods, key) == NULL)
            (void)vg_strlcpy(gone[n++], key, sizeof gone[0]);
    }
    for (size_t k = 0; k < n; k++)
        sched_verdict_drop(s, gone[k]);
}

void sched_verdicts_release(struct sched_state *s)
{
    for (size_t i = sched_map_next(&s->verdicts, 0); i < s->verdicts.cap;
         i = sched_map_next(&s->verdicts, i + 1))
        free(s->verdicts.slots[i].value);
    sched_map_release(&s->verdicts);
}
