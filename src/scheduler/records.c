/* Decision records in the API (records.h): one immutable ConfigMap per bound pod in
 * vgpu-scheduler's namespace. A ConfigMap because kube-apiserver stores it as written,
 * RBAC can give vgpu-scheduler alone the right to write in its namespace, and one object
 * per pod needs no read-modify-write: a bind adds one, a pod's end deletes one. */
#include "scheduler/records.h"

#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "kube/kube.h"
#include "scheduler/pod.h"

#define RECORD_PREFIX   "vgpu-decision-"
#define RECORD_SELECTOR "vgpu.io%2Frecord%3Ddecision"

struct sched_records {
    struct event_base *base;
    struct kube_client *client;
    struct sched_state *state;
    char ns[ANNOT_LABEL_MAX + 1];
    struct event *retry;
    void (*loaded)(void *arg);
    void *loaded_arg;
    uint64_t errors;
    struct record_call *calls; /* in flight: freed with r (their requests are cancelled
                                  with the client, which calls no callback then) */
    /* Per pod uid, what the newest record says beyond its decision (records.h):
     * {"gen": generation, "id": resize request id, "ns": namespace, "raised": MiB}. */
    json_t *meta;
};

/* One write or delete in flight. */
struct record_call {
    struct sched_records *r;
    struct record_call *prev, *next;
    char uid[128];
    bool write;
    void (*done)(void *arg, const struct vg_err *err); /* a resize record's caller */
    void *done_arg;
    /* A resize's: what r->meta said of the pod before (NULL: nothing) and what the write
     * set, to put it back when the record is not written (the resize is refused, so its
     * raise must not count against the namespace's quota). */
    json_t *meta_before, *meta_set;
};

static struct record_call *call_new(struct sched_records *r, const char *uid, bool write)
{
    struct record_call *c = xcalloc(1, sizeof *c);
    c->r = r;
    c->write = write;
    (void)vg_strlcpy(c->uid, uid, sizeof c->uid);
    c->next = r->calls;
    if (r->calls != NULL)
        r->calls->prev = c;
    r->calls = c;
    return c;
}

static void call_free(struct record_call *c)
{
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        c->r->calls = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    json_decref(c->meta_before);
    json_decref(c->meta_set);
    free(c);
}

/* The record's name for uid at generation gen (0: the bind's record, named after the uid
 * alone; a resize's: "-g<gen>" appended); false when it would not be a valid object name. */
static bool record_name_gen(const char *uid, uint64_t gen, char *name, size_t size)
{
    if (uid == NULL || uid[0] == '\0')
        return false;
    int n = gen == 0
                ? vg_snprintf(name, size, RECORD_PREFIX "%s", uid)
                : vg_snprintf(name, size, RECORD_PREFIX "%s-g%llu", uid, (unsigned long long)gen);
    return n >= 0 && annot_dns_subdomain(name);
}

static bool record_name(const char *uid, char *name, size_t size)
{
    return record_name_gen(uid, 0, name, size);
}

static uint64_t meta_gen(const struct sched_records *r, const char *uid)
{
    json_t *m = json_object_get(r->meta, uid);
    json_int_t g = json_integer_value(json_object_get(m, "gen"));
    return g > 0 ? (uint64_t)g : 0;
}

static void meta_set(struct sched_records *r, const char *uid, uint64_t gen, const char *id,
                     const char *key, int64_t raised)
{
    char ns[ANNOT_LABEL_MAX + 1] = "";
    const char *slash = key != NULL ? strchr(key, '/') : NULL;
    if (slash != NULL && (size_t)(slash - key) < sizeof ns)
        memcpy(ns, key, (size_t)(slash - key)), ns[slash - key] = '\0';
    json_object_set_new(r->meta, uid,
                        json_pack("{s:I, s:s, s:s, s:I}", "gen", (json_int_t)gen, "id",
                                  id != NULL ? id : "", "ns", ns, "raised", (json_int_t)raised));
}

int sched_records_new(struct event_base *base, struct kube_client *client,
                      struct sched_state *state, const char *ns, struct sched_records **out,
                      struct vg_err *err)
{
    if (!annot_dns_label(ns))
        return vg_err_set(err, -EINVAL, "--record-namespace: '%.64s' is not a namespace name",
                          ns != NULL ? ns : "");
    struct sched_records *r = xcalloc(1, sizeof *r);
    r->base = base;
    r->client = client;
    r->state = state;
    (void)vg_strlcpy(r->ns, ns, sizeof r->ns);
    r->meta = json_object();
    *out = r;
    return 0;
}

void sched_records_free(struct sched_records *r)
{
    if (r == NULL)
        return;
    if (r->retry != NULL)
        event_free(r->retry);
    while (r->calls != NULL)
        call_free(r->calls);
    json_decref(r->meta);
    free(r);
}

uint64_t sched_records_errors(const struct sched_records *r)
{
    return r->errors;
}

static void list_start(struct sched_records *r);

static void list_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    list_start(arg);
}

static void list_again(struct sched_records *r)
{
    r->errors++;
    if (r->retry == NULL)
        r->retry = evtimer_new(r->base, list_retry, r);
    struct timeval second = {1, 0};
    if (r->retry != NULL)
        evtimer_add(r->retry, &second);
}

static void listed(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct sched_records *r = arg;
    if (err->code < 0) {
        vg_log(VG_LOG_WARN, "listing decision records failed; retrying", "namespace=%s err=\"%s\"",
               r->ns, err->msg);
        list_again(r);
        return;
    }
    size_t i, n = 0;
    json_t *cm;
    json_array_foreach(json_object_get(body, "items"), i, cm)
    {
        const char *uid = sched_json_str(cm, "data", "uid", NULL);
        const char *decision = sched_json_str(cm, "data", "decision", NULL);
        const char *name = sched_json_str(cm, "metadata", "name", NULL);
        const char *gen_text = sched_json_str(cm, "data", "generation", NULL);
        uint64_t gen = 0;
        struct annot_decision d;
        struct vg_err sub = {0};
        char want[256];
        /* Only the record named after the uid and the generation it holds (the decision's
         * own): its name is what the API keeps unique, so no two records can speak for one
         * pod's generation, and the newest generation speaks for the pod. */
        if (decision == NULL || name == NULL ||
            (gen_text != NULL && vg_parse_u64(gen_text, 1, INT64_MAX, &gen, &sub) < 0) ||
            annot_decision_decode(decision, strlen(decision), &d, &sub) < 0 ||
            d.generation != gen || !record_name_gen(uid, gen, want, sizeof want) ||
            strcmp(want, name) != 0) {
            vg_log(VG_LOG_WARN, "decision record skipped", "name=%.100s",
                   name != NULL ? name : "?");
            continue;
        }
        if (sched_record_get(r->state, uid) != NULL && meta_gen(r, uid) > gen) {
            sched_records_delete_generation(r, uid, gen); /* left by a restart */
            continue;
        }
        if (sched_record_get(r->state, uid) != NULL && meta_gen(r, uid) < gen)
            sched_records_delete_generation(r, uid, meta_gen(r, uid));
        sched_record_put(r->state, uid, decision);
        const char *raised = sched_json_str(cm, "data", "raisedMiB", NULL);
        meta_set(r, uid, gen, sched_json_str(cm, "data", "resize", NULL),
                 sched_json_str(cm, "data", "pod", NULL),
                 raised != NULL ? strtoll(raised, NULL, 10) : 0);
        n++;
    }
    vg_log(VG_LOG_INFO, "decision records loaded", "namespace=%s count=%zu", r->ns, n);
    if (r->loaded != NULL) {
        void (*loaded)(void *) = r->loaded;
        r->loaded = NULL;
        loaded(r->loaded_arg);
    }
}

static void list_start(struct sched_records *r)
{
    char path[256];
    struct vg_err err = {0};
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps?labelSelector=%s", r->ns,
                      RECORD_SELECTOR);
    if (kube_get(r->client, path, listed, r, &err) < 0) {
        vg_log(VG_LOG_WARN, "listing decision records failed; retrying", "err=\"%s\"", err.msg);
        list_again(r);
    }
}

void sched_records_load(struct sched_records *r, void (*loaded)(void *arg), void *arg)
{
    r->loaded = loaded;
    r->loaded_arg = arg;
    list_start(r);
}

static void call_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)body;
    struct record_call *c = arg;
    if (c->done != NULL) {
        /* A resize's record: its caller decides what a failure means. One that exists
         * already was written by this scheduler before a restart (its name holds the uid
         * and the generation; the caller checks the request). */
        struct vg_err ok = {0};
        bool written = err->code == 0 || err->code == -EEXIST;
        if (!written && json_object_get(c->r->meta, c->uid) == c->meta_set) {
            if (c->meta_before != NULL)
                json_object_set(c->r->meta, c->uid, c->meta_before);
            else
                json_object_del(c->r->meta, c->uid);
        }
        c->done(c->done_arg, written ? &ok : err);
        if (!written)
            c->r->errors++;
        call_free(c);
        return;
    }
    /* A record that exists already is this pod's (its name holds the uid); one already
     * deleted is what a delete wants. */
    bool fine =
        err->code == 0 || (c->write && err->code == -EEXIST) || (!c->write && status == 404);
    if (!fine) {
        c->r->errors++;
        vg_log(VG_LOG_WARN,
               c->write ? "writing a decision record failed" : "deleting a decision record failed",
               "uid=%s status=%ld err=\"%s\"", c->uid, status, err->msg);
        if (c->write)
            (void)sched_record_drop(c->r->state, c->uid); /* the pod's next event tries again */
    }
    call_free(c);
}

void sched_records_write(struct sched_records *r, const char *uid, const char *key,
                         const char *decision)
{
    char name[256];
    if (!record_name(uid, name, sizeof name) || decision == NULL) {
        vg_log(VG_LOG_WARN, "no decision record for a pod whose uid is not a name", "pod=%s", key);
        return;
    }
    sched_record_put(r->state, uid, decision);
    meta_set(r, uid, 0, NULL, key, 0);
    VG_AUTO_JSON json_t *cm =
        json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:b, s:{s:s, s:s, s:s}}", "apiVersion",
                  "v1", "kind", "ConfigMap", "metadata", "name", name, "namespace", r->ns, "labels",
                  "app.kubernetes.io/managed-by", "vgpu-scheduler", "vgpu.io/record", "decision",
                  "immutable", 1, "data", "pod", key, "uid", uid, "decision", decision);
    char path[256];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", r->ns);
    struct record_call *c = call_new(r, uid, true);
    struct vg_err err = {0};
    if (kube_post(r->client, path, cm, call_done, c, &err) < 0)
        call_done(c, 0, NULL, &err);
}

void sched_records_delete_generation(struct sched_records *r, const char *uid, uint64_t gen)
{
    char name[256], path[512];
    if (!record_name_gen(uid, gen, name, sizeof name))
        return;
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps/%s", r->ns, name);
    struct record_call *c = call_new(r, uid, false);
    struct vg_err err = {0};
    if (kube_delete(r->client, path, call_done, c, &err) < 0)
        call_done(c, 0, NULL, &err);
}

void sched_records_delete(struct sched_records *r, const char *uid)
{
    uint64_t gen = meta_gen(r, uid);
    sched_records_delete_generation(r, uid, 0);
    if (gen > 0)
        sched_records_delete_generation(r, uid, gen);
    if (uid != NULL)
        json_object_del(r->meta, uid);
}

void sched_records_write_resize(struct sched_records *r, const char *uid, const char *key,
                                const char *decision, uint64_t gen, const char *request,
                                int64_t raised, void (*done)(void *arg, const struct vg_err *err),
                                void *arg)
{
    char name[256], path[256], gen_text[32], raised_text[32];
    struct vg_err err = {0};
    if (gen == 0 || !record_name_gen(uid, gen, name, sizeof name)) {
        vg_err_set(&err, -EINVAL, "pod %s: no record name for generation %llu", key,
                   (unsigned long long)gen);
        done(arg, &err);
        return;
    }
    (void)vg_snprintf(gen_text, sizeof gen_text, "%llu", (unsigned long long)gen);
    (void)vg_snprintf(raised_text, sizeof raised_text, "%lld", (long long)raised);
    VG_AUTO_JSON json_t *cm = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}}, s:b, s:{s:s, s:s, s:s, s:s, s:s, s:s}}",
        "apiVersion", "v1", "kind", "ConfigMap", "metadata", "name", name, "namespace", r->ns,
        "labels", "app.kubernetes.io/managed-by", "vgpu-scheduler", "vgpu.io/record", "decision",
        "immutable", 1, "data", "pod", key, "uid", uid, "decision", decision, "generation",
        gen_text, "resize", request, "raisedMiB", raised_text);
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps", r->ns);
    json_t *before = json_incref(json_object_get(r->meta, uid));
    meta_set(r, uid, gen, request, key, raised);
    struct record_call *c = call_new(r, uid, true);
    c->done = done;
    c->done_arg = arg;
    c->meta_before = before;
    c->meta_set = json_incref(json_object_get(r->meta, uid));
    if (kube_post(r->client, path, cm, call_done, c, &err) < 0)
        call_done(c, 0, NULL, &err);
}

const char *sched_records_resize_id(const struct sched_records *r, const char *uid)
{
    const char *id = json_string_value(json_object_get(json_object_get(r->meta, uid), "id"));
    return id != NULL && id[0] != '\0' ? id : NULL;
}

int64_t sched_records_raised(const struct sched_records *r, const char *uid)
{
    return (int64_t)json_integer_value(json_object_get(json_object_get(r->meta, uid), "raised"));
}

int64_t sched_records_raised_in(const struct sched_records *r, const char *ns)
{
    int64_t sum = 0;
    const char *uid;
    json_t *m;
    json_object_foreach(r->meta, uid, m)
    {
        const char *mns = json_string_value(json_object_get(m, "ns"));
        if (mns != NULL && strcmp(mns, ns) == 0)
            sum += (int64_t)json_integer_value(json_object_get(m, "raised"));
    }
    return sum;
}
