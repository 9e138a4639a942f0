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
};

/* One write or delete in flight. */
struct record_call {
    struct sched_records *r;
    struct record_call *prev, *next;
    char uid[128];
    bool write;
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
    free(c);
}

/* The record's name for uid; false when it would not be a valid object name. */
static bool record_name(const char *uid, char *name, size_t size)
{
    return uid != NULL && uid[0] != '\0' && vg_snprintf(name, size, RECORD_PREFIX "%s", uid) >= 0 &&
           annot_dns_subdomain(name);
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
        char want[256];
        /* Only the record named after the uid it holds: its name is what the API keeps
         * unique, so no two records can speak for one pod. */
        if (decision == NULL || name == NULL || !record_name(uid, want, sizeof want) ||
            strcmp(want, name) != 0) {
            vg_log(VG_LOG_WARN, "decision record skipped", "name=%.100s",
                   name != NULL ? name : "?");
            continue;
        }
        sched_record_put(r->state, uid, decision);
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

void sched_records_delete(struct sched_records *r, const char *uid)
{
    char name[256], path[512];
    if (!record_name(uid, name, sizeof name))
        return;
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps/%s", r->ns, name);
    struct record_call *c = call_new(r, uid, false);
    struct vg_err err = {0};
    if (kube_delete(r->client, path, call_done, c, &err) < 0)
        call_done(c, 0, NULL, &err);
}
