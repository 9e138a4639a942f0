/* Live resize requests (resize.h). Everything runs on the daemon's loop; one request per
 * pod is in flight at a time, and a pod is looked at again once its request is answered,
 * so a request written meanwhile is not lost. */
#include "scheduler/resize.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "kube/kube.h"
#include "scheduler/pod.h"
#include "scheduler/records.h"
#include "scheduler/sched.h"

#define RESIZE_PATCH_TRIES 5 /* conflicts on the pod before the patch gives up (logged) */

struct sched_resizer {
    struct kube_client *client;
    struct sched_state *state;
    struct sched_records *records;
    json_t *inflight; /* pod uid -> true while its request is handled */
    struct sched_resize_stats stats;
};

/* One request in flight. */
struct resize_op {
    struct sched_resizer *r;
    char uid[128], key[512], path[600];
    char rv[64]; /* the pod's resourceVersion as the request was read: step 3's precondition */
    struct annot_resize_status prev; /* the pod's answer before this one (id "" when none) */
    struct annot_resize req;
    char *decision;     /* the new decision text (owned) */
    char *old_decision; /* what it replaces, to put back if recording fails (owned) */
    uint64_t generation, old_generation;
    int64_t raise_mib;
    char note[ANNOT_REASON_MAX];
    unsigned tries;
};

struct sched_resizer *sched_resizer_new(struct kube_client *client, struct sched_state *state,
                                        struct sched_records *records)
{
    struct sched_resizer *r = xcalloc(1, sizeof *r);
    r->client = client;
    r->state = state;
    r->records = records;
    r->inflight = json_object();
    return r;
}

void sched_resizer_free(struct sched_resizer *r)
{
    if (r == NULL)
        return;
    json_decref(r->inflight);
    free(r);
}

void sched_resizer_stats(const struct sched_resizer *r, struct sched_resize_stats *out)
{
    *out = r->stats;
}

/* ---- the pure part ---- */

int sched_resize_decision(const char *current, const struct annot_resize *req, int64_t now,
                          char **out, int64_t *raise_mib, struct vg_err *err)
{
    *out = NULL;
    *raise_mib = 0;
    struct annot_decision d;
    if (annot_decision_decode(current, strlen(current), &d, err) < 0)
        return vg_err_wrap(err, "the pod's decision");
    struct annot_container *c = NULL;
    unsigned with_gpus = 0;
    for (unsigned i = 0; i < d.container_count; i++) {
        if (d.containers[i].gpu_count > 0)
            with_gpus++;
        if (req->container[0] != '\0' ? strcmp(d.containers[i].name, req->container) == 0
                                      : d.containers[i].gpu_count > 0 && c == NULL)
            c = &d.containers[i];
    }
    if (req->container[0] == '\0' && with_gpus > 1)
        return vg_err_set(err, -EINVAL, "%u containers of the pod have GPUs: name one (-c)",
                          with_gpus);
    if (c == NULL || c->gpu_count == 0)
        return vg_err_set(err, -EINVAL, "container %s has no vgpu GPUs in the pod's decision",
                          req->container[0] != '\0' ? req->container : "(any)");
    bool changed = false;
    for (unsigned g = 0; g < c->gpu_count; g++)
        if (c->gpus[g].mig_profile[0] != '\0')
            return vg_err_set(err, -EINVAL,
                              "container %s runs in MIG instance %s: its memory and compute "
                              "are the instance's and do not change while it runs (restart "
                              "the pod with another profile)",
                              c->name, c->gpus[g].mig_profile);
    for (unsigned g = 0; g < c->gpu_count; g++) {
        struct annot_share *sh = &c->gpus[g];
        if (req->cores > 0 && req->cores != sh->cores) {
            /* The container's board slot and its exclusivity were set when it started
             * (docs/libvgpu.md "Live resize"). */
            if (sh->cores == 0 || sh->cores >= 100 || req->cores >= 100)
                return vg_err_set(err, -EINVAL,
                                  "container %s: its compute share is %u%%; only a share "
                                  "between 1 and 99%% changes while it runs, to another such "
                                  "share (restart the pod for %u%%)",
                                  c->name, sh->cores, req->cores);
            sh->cores = req->cores;
            changed = true;
        }
        if (req->memory_mib > 0 && req->memory_mib != sh->memory_mib) {
            /* Summed over the GPUs: the container holds its limit on each of them. */
            *raise_mib += (int64_t)req->memory_mib - (int64_t)sh->memory_mib;
            sh->memory_mib = req->memory_mib;
            changed = true;
        }
    }
    if (!changed)
        return 1;
    d.generation++;
    d.time = now;
    *out = annot_decision_encode(&d, err);
    return *out != NULL ? 0 : err->code;
}

int sched_resize_quota_check(json_t *quotas, int64_t raised_before, int64_t raise_mib,
                             struct vg_err *err)
{
    /* Kubernetes counts an extended resource in a quota as requests.<name> (and the other
     * two spellings are accepted the same way). */
    static const char *const keys[] = {"requests.nvidia.com/gpumem", "nvidia.com/gpumem",
                                       "limits.nvidia.com/gpumem"};
    if (raise_mib <= 0)
        return 0; /* lowering keeps every quota true */
    size_t i;
    json_t *q;
    json_array_foreach(json_object_get(quotas, "items"), i, q)
    {
        const char *name = sched_json_str(q, "metadata", "name", NULL);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
            const char *hard = sched_json_str(q, "spec", "hard", keys[k]);
            const char *used = sched_json_str(q, "status", "used", keys[k]);
            uint64_t hard_mib, used_mib = 0;
            struct vg_err sub = {0};
            if (hard == NULL)
                continue;
            if (vg_parse_kube_mib(hard, ANNOT_RESIZE_MAX_MIB * 1024, &hard_mib, &sub) < 0 ||
                (used != NULL &&
                 vg_parse_kube_mib(used, ANNOT_RESIZE_MAX_MIB * 1024, &used_mib, &sub) < 0))
                return vg_err_set(err, -EDQUOT, "namespace quota %s: %s unreadable (%s)",
                                  name != NULL ? name : "?", keys[k], sub.msg);
            int64_t after = (int64_t)used_mib + raised_before + raise_mib;
            if (after > (int64_t)hard_mib)
                return vg_err_set(err, -EDQUOT,
                                  "namespace quota %s: %s would be %lld MiB, more than its %llu "
                                  "(%llu asked by the pods' specs, %lld more by resizes)",
                                  name != NULL ? name : "?", keys[k], (long long)after,
                                  (unsigned long long)hard_mib, (unsigned long long)used_mib,
                                  (long long)(raised_before + raise_mib));
        }
    }
    return 0;
}

/* ---- in the daemon ---- */

static void op_free(struct resize_op *op)
{
    if (op == NULL)
        return;
    json_object_del(op->r->inflight, op->uid);
    free(op->decision);
    free(op->old_decision);
    free(op);
}

static void look_again_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    if (err->code == 0 && json_is_object(body))
        sched_resizer_pod(arg, body);
}

/* Reads the pod again once its request is answered: a request written meanwhile (its
 * watch event arrived while this one was in flight) is handled now. */
static void look_again(struct sched_resizer *r, const char *path)
{
    struct vg_err err = {0};
    (void)kube_get(r->client, path, look_again_done, r, &err);
}

static void status_written(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    (void)body;
    struct resize_op *op = arg;
    if (err->code < 0) {
        op->r->stats.errors++;
        vg_log(VG_LOG_WARN, "resize status not written", "pod=%s err=\"%s\"", op->key, err->msg);
    }
    char path[600];
    (void)vg_strlcpy(path, op->path, sizeof path);
    struct sched_resizer *r = op->r;
    op_free(op);
    look_again(r, path);
}

/* st follows op->prev: the answer before it, and those before that, go to st.earlier. */
static void chain(const struct resize_op *op, struct annot_resize_status *st)
{
    const struct annot_resize_status *p = &op->prev;
    st->earlier_count = 0;
    if (p->id[0] == '\0' || strcmp(p->id, st->id) == 0)
        return;
    (void)vg_snprintf(st->earlier[st->earlier_count++], sizeof st->earlier[0], "%s %s %llu", p->id,
                      p->state == ANNOT_RESIZE_DONE ? "done" : "refused",
                      (unsigned long long)p->generation);
    for (unsigned i = 0; i < p->earlier_count && st->earlier_count < ANNOT_RESIZE_EARLIER; i++)
        memcpy(st->earlier[st->earlier_count++], p->earlier[i], sizeof st->earlier[0]);
}

/* The pod's current answer into op->prev (none when absent or unreadable). */
static void read_prev(struct resize_op *op, json_t *pod)
{
    const char *text = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE_STATUS);
    struct vg_err sub = {0};
    if (text == NULL || annot_resize_status_decode(text, strlen(text), &op->prev, &sub) < 0)
        memset(&op->prev, 0, sizeof op->prev);
}

/* Answers the request with a refusal: nothing changed. */
static void refuse(struct resize_op *op, const char *reason)
{
    struct annot_resize_status st = {.state = ANNOT_RESIZE_REFUSED, .time = (int64_t)time(NULL)};
    (void)vg_strlcpy(st.id, op->req.id, sizeof st.id);
    if (vg_strlcpy(st.reason, reason, sizeof st.reason) < 0)
        st.reason[sizeof st.reason - 1] = '\0';
    chain(op, &st);
    op->r->stats.refused++;
    vg_log(VG_LOG_INFO, "resize refused", "pod=%s id=%s reason=\"%s\"", op->key, op->req.id,
           reason);
    struct vg_err err = {0};
    VG_AUTO_FREE char *text = annot_resize_status_encode(&st, &err);
    VG_AUTO_JSON json_t *ann = json_pack("{s:s}", ANNOT_KEY_RESIZE_STATUS, text ? text : "");
    if (text == NULL ||
        kube_patch_annotations(op->r->client, op->path, ann, NULL, status_written, op, &err) < 0)
        status_written(op, 0, NULL, &err);
}

static void pod_patched(void *arg, long status, json_t *body, const struct vg_err *err);

/* Step 3: the decision and the answer in one patch, conditional on rv. */
static void patch_pod(struct resize_op *op, const char *rv, bool answer)
{
    struct annot_resize_status st = {
        .state = ANNOT_RESIZE_DONE, .generation = op->generation, .time = (int64_t)time(NULL)};
    (void)vg_strlcpy(st.id, op->req.id, sizeof st.id);
    (void)vg_strlcpy(st.reason, op->note, sizeof st.reason);
    chain(op, &st);
    struct vg_err err = {0};
    VG_AUTO_FREE char *text = annot_resize_status_encode(&st, &err);
    VG_AUTO_JSON json_t *ann = json_pack("{s:s}", ANNOT_KEY_DECISION, op->decision);
    if (answer && text != NULL)
        json_object_set_new(ann, ANNOT_KEY_RESIZE_STATUS, json_string(text));
    op->tries++;
    if (kube_patch_annotations(op->r->client, op->path, ann, rv, pod_patched, op, &err) < 0)
        pod_patched(op, 0, NULL, &err);
}

static void reread_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct resize_op *op = arg;
    if (err->code < 0 || !json_is_object(body)) {
        op->r->stats.errors++;
        vg_log(VG_LOG_WARN, "resize: pod not read again; its record is written at the next event",
               "pod=%s err=\"%s\"", op->key, err->msg);
        op_free(op);
        return;
    }
    const char *req = sched_json_str(body, "metadata", "annotations", ANNOT_KEY_RESIZE);
    struct annot_resize now;
    struct vg_err sub = {0};
    bool ours = req != NULL && annot_resize_decode(req, strlen(req), &now, &sub) == 0 &&
                strcmp(now.id, op->req.id) == 0;
    read_prev(op, body);
    patch_pod(op, sched_json_str(body, "metadata", "resourceVersion", NULL), ours);
}

static void pod_patched(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)body;
    struct resize_op *op = arg;
    if (status == 409 && op->tries < RESIZE_PATCH_TRIES) {
        /* The pod changed since it was read (a label, a status, a new request): read it
         * and write again; the decision is written whatever the request says now. */
        struct vg_err gerr = {0};
        if (kube_get(op->r->client, op->path, reread_done, op, &gerr) < 0)
            reread_done(op, 0, NULL, &gerr);
        return;
    }
    if (err->code < 0) {
        /* The record stands (step 2): the reconcile writes the decision at the pod's
         * next event or the next relist. */
        op->r->stats.errors++;
        vg_log(VG_LOG_WARN, "resize recorded; the pod's decision is written later",
               "pod=%s status=%ld err=\"%s\"", op->key, status, err->msg);
        op_free(op);
        return;
    }
    op->r->stats.done++;
    vg_log(VG_LOG_INFO, "resize done", "pod=%s id=%s generation=%llu", op->key, op->req.id,
           (unsigned long long)op->generation);
    if (op->old_decision != NULL) /* a new record was written: the one before it goes */
        sched_records_delete_generation(op->r->records, op->uid, op->old_generation);
    char path[600];
    (void)vg_strlcpy(path, op->path, sizeof path);
    struct sched_resizer *r = op->r;
    op_free(op);
    look_again(r, path);
}

/* Step 2 done (or not). */
static void recorded(void *arg, const struct vg_err *err)
{
    struct resize_op *op = arg;
    if (err->code < 0) {
        struct vg_err undo = {0};
        if (sched_pod_recharge(op->r->state, op->key, op->old_decision, &undo) < 0)
            vg_log(VG_LOG_ERROR, "resize not recorded, and the old charge does not fit back",
                   "pod=%s err=\"%s\"", op->key, undo.msg);
        sched_record_put(op->r->state, op->uid, op->old_decision);
        char reason[ANNOT_REASON_MAX];
        (void)vg_snprintf(reason, sizeof reason, "the new decision could not be recorded: %s",
                          err->msg);
        refuse(op, reason);
        return;
    }
    patch_pod(op, op->rv[0] != '\0' ? op->rv : NULL, true);
}

/* Step 1, once the namespace's quotas are read. */
static void quotas_read(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct resize_op *op = arg;
    struct sched_resizer *r = op->r;
    if (err->code < 0) {
        char reason[ANNOT_REASON_MAX];
        (void)vg_snprintf(reason, sizeof reason, "the namespace's quotas could not be read: %s",
                          err->msg);
        refuse(op, reason);
        return;
    }
    const char *current = sched_record_get(r->state, op->uid);
    struct vg_err sub = {0};
    if (current == NULL) {
        refuse(op, "vgpu-scheduler holds no decision for this pod: it is not vgpu's, or not "
                   "scheduled by vgpu yet");
        return;
    }
    struct annot_decision cur;
    if (annot_decision_decode(current, strlen(current), &cur, &sub) < 0) {
        refuse(op, sub.msg);
        return;
    }
    int rc = sched_resize_decision(current, &op->req, (int64_t)time(NULL), &op->decision,
                                   &op->raise_mib, &sub);
    if (rc < 0) {
        refuse(op, sub.msg);
        return;
    }
    if (rc == 1) {
        op->decision = xstrdup(current);
        op->generation = cur.generation;
        (void)vg_strlcpy(op->note, "unchanged: the container already has these limits",
                         sizeof op->note);
        patch_pod(op, op->rv[0] != '\0' ? op->rv : NULL, true);
        return;
    }
    const char *slash = strchr(op->key, '/');
    char ns[ANNOT_LABEL_MAX + 1] = "";
    if (slash != NULL && (size_t)(slash - op->key) < sizeof ns) {
        memcpy(ns, op->key, (size_t)(slash - op->key));
        ns[slash - op->key] = '\0';
    }
    if (sched_resize_quota_check(body, sched_records_raised_in(r->records, ns), op->raise_mib,
                                 &sub) < 0) {
        refuse(op, sub.msg);
        return;
    }
    op->old_decision = xstrdup(current);
    op->old_generation = cur.generation;
    op->generation = cur.generation + 1;
    if (sched_pod_recharge(r->state, op->key, op->decision, &sub) < 0) {
        char reason[ANNOT_REASON_MAX];
        (void)vg_snprintf(reason, sizeof reason, "no room on the GPU: %s", sub.msg);
        refuse(op, reason);
        return;
    }
    /* The state's record is the new decision from here on: the pod's events, which still
     * show the old one until step 3, do not take the charge back. */
    sched_record_put(r->state, op->uid, op->decision);
    if (op->raise_mib < 0)
        (void)vg_snprintf(op->note, sizeof op->note,
                          "memory lowered by %lld MiB: nothing is freed; new allocations are "
                          "refused until the container uses less than the new limit",
                          (long long)-op->raise_mib);
    sched_records_write_resize(
        r->records, op->uid, op->key, op->decision, op->generation, op->req.id,
        sched_records_raised(r->records, op->uid) + op->raise_mib, recorded, op);
}

/* A record ahead of the pod's decision (a scheduler killed between steps 2 and 3):
 * writes it to the pod, answering the request it was for when the pod still asks it. */
static bool reconcile(struct sched_resizer *r, json_t *pod, const char *uid, const char *path,
                      const char *key)
{
    const char *recorded_text = sched_record_get(r->state, uid);
    const char *shown = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_DECISION);
    struct annot_decision rec, have;
    struct vg_err sub = {0};
    if (recorded_text == NULL || (shown != NULL && strcmp(shown, recorded_text) == 0))
        return false; /* the common case, without decoding: the pod shows its record */
    if (annot_decision_decode(recorded_text, strlen(recorded_text), &rec, &sub) < 0 ||
        rec.generation == 0)
        return false;
    if (shown != NULL && annot_decision_decode(shown, strlen(shown), &have, &sub) == 0 &&
        have.generation >= rec.generation)
        return false;
    struct resize_op *op = xcalloc(1, sizeof *op);
    op->r = r;
    (void)vg_strlcpy(op->uid, uid, sizeof op->uid);
    (void)vg_strlcpy(op->key, key, sizeof op->key);
    (void)vg_strlcpy(op->path, path, sizeof op->path);
    op->decision = xstrdup(recorded_text);
    op->generation = rec.generation;
    read_prev(op, pod);
    const char *id = sched_records_resize_id(r->records, uid);
    const char *req = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE);
    bool answer = id != NULL && req != NULL &&
                  annot_resize_decode(req, strlen(req), &op->req, &sub) == 0 &&
                  strcmp(op->req.id, id) == 0;
    if (!answer && id != NULL)
        (void)vg_strlcpy(op->req.id, id, sizeof op->req.id);
    json_object_set_new(r->inflight, uid, json_true());
    r->stats.reconciled++;
    vg_log(VG_LOG_INFO, "resize recorded before a restart; writing it to the pod",
           "pod=%s generation=%llu", key, (unsigned long long)rec.generation);
    /* No old_decision: nothing is deleted after the patch (an older record went at the
     * load). */
    patch_pod(op, sched_json_str(pod, "metadata", "resourceVersion", NULL), answer);
    return true;
}

void sched_resizer_pod(struct sched_resizer *r, json_t *pod)
{
    const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
    const char *ns = sched_json_str(pod, "metadata", "namespace", NULL);
    const char *name = sched_json_str(pod, "metadata", "name", NULL);
    const char *req = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE);
    const char *rec = uid != NULL ? sched_record_get(r->state, uid) : NULL;
    if (uid == NULL || ns == NULL || name == NULL || (req == NULL && rec == NULL) ||
        json_object_get(r->inflight, uid) != NULL || !annot_dns_label(ns) ||
        !annot_dns_subdomain(name))
        return;
    char key[512], path[600];
    (void)vg_snprintf(key, sizeof key, "%s/%s", ns, name);
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    const char *node = sched_json_str(pod, "spec", "nodeName", NULL);
    if (node != NULL && rec != NULL && reconcile(r, pod, uid, path, key))
        return;
    if (req == NULL)
        return;
    struct annot_resize_status st;
    const char *st_text = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE_STATUS);
    struct annot_resize q;
    struct vg_err sub = {0}, st_err = {0};
    int qrc = annot_resize_decode(req, strlen(req), &q, &sub);
    memset(&st, 0, sizeof st);
    if (st_text != NULL &&
        annot_resize_status_decode(st_text, strlen(st_text), &st, &st_err) == 0 && qrc == 0 &&
        strcmp(st.id, q.id) == 0)
        return; /* answered */
    struct resize_op *op = xcalloc(1, sizeof *op);
    op->r = r;
    (void)vg_strlcpy(op->uid, uid, sizeof op->uid);
    (void)vg_strlcpy(op->key, key, sizeof op->key);
    (void)vg_strlcpy(op->path, path, sizeof op->path);
    const char *rv = sched_json_str(pod, "metadata", "resourceVersion", NULL);
    (void)vg_strlcpy(op->rv, rv != NULL ? rv : "", sizeof op->rv);
    read_prev(op, pod);
    json_object_set_new(r->inflight, uid, json_true());
    if (qrc < 0) {
        /* Answered when its id can be read (the reason is the decoder's); else there is
         * nothing to answer to: logged, left alone. */
        VG_AUTO_JSON json_t *raw = json_loadb(req, strlen(req), 0, NULL);
        const char *id = json_string_value(json_object_get(raw, "id"));
        if (id != NULL && annot_dns_label(id) && strcmp(st.id, id) != 0) {
            (void)vg_strlcpy(op->req.id, id, sizeof op->req.id);
            refuse(op, sub.msg);
            return;
        }
        vg_log(VG_LOG_WARN, "resize request unreadable", "pod=%s err=\"%s\"", key, sub.msg);
        op_free(op);
        return;
    }
    op->req = q;
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    if (node == NULL || phase == NULL || strcmp(phase, "Running") != 0) {
        char reason[ANNOT_REASON_MAX];
        (void)vg_snprintf(reason, sizeof reason,
                          "the pod is %s: only a running pod's limits change live (a pod that "
                          "has not started takes its spec's)",
                          node == NULL    ? "not scheduled yet"
                          : phase != NULL ? phase
                                          : "in no phase");
        refuse(op, reason);
        return;
    }
    char qpath[600];
    (void)vg_snprintf(qpath, sizeof qpath, "/api/v1/namespaces/%s/resourcequotas", ns);
    struct vg_err err = {0};
    if (kube_get(r->client, qpath, quotas_read, op, &err) < 0)
        quotas_read(op, 0, NULL, &err);
}
