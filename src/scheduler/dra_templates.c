/* The webhook's DRA templates in the API (dra_templates.h). One admission is a short
 * chain of API calls on the daemon's loop: the namespace, then each template (create; on
 * 409 read it back and compare), then the answer. The sweep is another chain: vgpu's
 * templates, then the pods of each namespace that holds one, then the deletions.
 *
 * The known templates (namespace/name -> when an admission last used one) are what the
 * bounds count: the sweep's list sets them, admissions add to them. An admission that
 * comes before the first list completes counts only what this process made; the bound is
 * a ceiling on what vgpu adds, not a quota on what the namespace may hold. */
#include "scheduler/dra_templates.h"

#include <errno.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "kube/kube.h"
#include "scheduler/map.h"
#include "scheduler/pod.h"
#include "scheduler/sched.h"

/* How long an admission waits for the API before it refuses the pod: well inside the
 * webhook's timeoutSeconds (10 in deploy/), so the refusal carries vgpu's message. */
#define ADMIT_API_TIMEOUT_MS 5000
#define TEMPLATE_PREFIX      "vgpu-"
#define MANAGED_SELECTOR     "app.kubernetes.io%2Fmanaged-by%3Dvgpu-scheduler"
#define ADMIT_MAX_OWNERS     8 /* ownerReferences checked; a pod with more is refused */

struct sweep;

struct known {
    int64_t used_s; /* monotonic seconds of the last admission that used it (or first sight) */
};

struct sched_dra_templates {
    struct event_base *base;
    struct kube_client *client;
    struct sched_dra_template_options opt;
    struct sched_map known; /* "ns/name" -> struct known */
    struct event *sweep_timer;
    struct sweep *sweeping; /* the sweep in flight (freed with t: the client cancels its
                               request without a callback) */
    uint64_t errors;
};

static int64_t mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec;
}

void sched_dra_template_options_default(struct sched_dra_template_options *o)
{
    *o = (struct sched_dra_template_options){.max_per_namespace = SCHED_DRA_MAX_PER_NAMESPACE,
                                             .max_total = SCHED_DRA_MAX_TOTAL,
                                             .sweep_s = SCHED_DRA_SWEEP_S,
                                             .grace_s = SCHED_DRA_GRACE_S};
}

static void known_clear(struct sched_map *m)
{
    for (size_t i = sched_map_next(m, 0); i < m->cap; i = sched_map_next(m, i + 1))
        free(m->slots[i].value);
    sched_map_release(m);
}

static void known_use(struct sched_dra_templates *t, const char *key)
{
    struct known *k = sched_map_get(&t->known, key);
    if (k == NULL) {
        k = xcalloc(1, sizeof *k);
        sched_map_put(&t->known, key, k);
    }
    k->used_s = mono_s();
}

size_t sched_dra_templates_count(const struct sched_dra_templates *t)
{
    return t->known.count;
}

uint64_t sched_dra_templates_errors(const struct sched_dra_templates *t)
{
    return t->errors;
}

/* vgpu's templates known in namespace ns. */
static size_t count_in(const struct sched_dra_templates *t, const char *ns)
{
    size_t n = 0, len = strlen(ns);
    for (size_t i = sched_map_next(&t->known, 0); i < t->known.cap;
         i = sched_map_next(&t->known, i + 1)) {
        const char *key = t->known.slots[i].key;
        if (strncmp(key, ns, len) == 0 && key[len] == '/')
            n++;
    }
    return n;
}

/* ---- one admission ------------------------------------------------------------------- */

struct admit_call {
    struct sched_dra_templates *t;
    sched_dra_done_fn done; /* NULL once answered: a late API answer only frees */
    void *arg;
    json_t *templates;
    json_t *owners; /* the pod's ownerReferences, each checked before anything is created */
    size_t owner_next;
    size_t next; /* templates[next] is being created, or read back after a 409 */
    struct event *timer;
    int pending; /* API calls in flight: the call is freed when answered and none is */
};

static void admit_call_free(struct admit_call *ac)
{
    if (ac->timer != NULL)
        event_free(ac->timer);
    json_decref(ac->templates);
    json_decref(ac->owners);
    free(ac);
}

/* Answers once: NULL to admit, or the refusal. */
static void admit_answer(struct admit_call *ac, const char *refusal)
{
    if (ac->done == NULL)
        return;
    sched_dra_done_fn done = ac->done;
    ac->done = NULL;
    if (ac->timer != NULL)
        evtimer_del(ac->timer);
    done(ac->arg, refusal);
}

/* After an API answer: false (and ac freed) when the admission was answered already. */
static bool admit_live(struct admit_call *ac)
{
    ac->pending--;
    if (ac->done != NULL)
        return true;
    if (ac->pending == 0)
        admit_call_free(ac);
    return false;
}

static void admit_end(struct admit_call *ac, const char *refusal)
{
    admit_answer(ac, refusal);
    if (ac->pending == 0)
        admit_call_free(ac);
}

static void admit_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct admit_call *ac = arg;
    ac->t->errors++;
    vg_log(VG_LOG_WARN, "webhook template timeout", "ms=%d", ADMIT_API_TIMEOUT_MS);
    admit_end(ac, "vgpu: the Kubernetes API did not answer in time while vgpu created the "
                  "pod's ResourceClaimTemplate; try again");
}

static const char *tmpl_ns(json_t *t)
{
    return sched_json_str(t, "metadata", "namespace", NULL);
}

static const char *tmpl_name(json_t *t)
{
    return sched_json_str(t, "metadata", "name", NULL);
}

static void admit_fail(struct admit_call *ac, const char *what, const struct vg_err *err)
{
    json_t *t = json_array_get(ac->templates, ac->next);
    char msg[VG_ERR_MSG_MAX + 256];
    (void)vg_snprintf(msg, sizeof msg, "vgpu: %s ResourceClaimTemplate %s/%s failed: %s", what,
                      tmpl_ns(t), tmpl_name(t), err->msg);
    ac->t->errors++;
    vg_log(VG_LOG_WARN, "webhook template failed", "err=\"%s\"", msg);
    admit_end(ac, msg);
}

static void admit_step(struct admit_call *ac);

/* Template t (templates[next]) is in place: its key counts as in use, and the next one
 * goes. */
static void admit_next(struct admit_call *ac, json_t *t)
{
    char key[512];
    (void)vg_snprintf(key, sizeof key, "%s/%s", tmpl_ns(t), tmpl_name(t));
    known_use(ac->t, key);
    ac->next++;
    admit_step(ac);
}

/* The template read back after a 409: it must ask for what this pod's claim needs. */
static void admit_read(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct admit_call *ac = arg;
    if (!admit_live(ac))
        return;
    if (err->code < 0) {
        admit_fail(ac, "reading the existing", err);
        return;
    }
    json_t *t = json_array_get(ac->templates, ac->next);
    if (!sched_dra_template_same(t, body)) {
        char msg[512];
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: ResourceClaimTemplate %s/%s exists but asks for something else "
                          "than vgpu's template of that name; delete it (vgpu creates it again) "
                          "or rename it",
                          tmpl_ns(t), tmpl_name(t));
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    admit_next(ac, t);
}

static void admit_created(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    (void)body;
    struct admit_call *ac = arg;
    if (!admit_live(ac))
        return;
    json_t *t = json_array_get(ac->templates, ac->next);
    if (err->code == -EEXIST) {
        char path[512];
        struct vg_err gerr = {0};
        if (vg_snprintf(path, sizeof path,
                        "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates/%s",
                        tmpl_ns(t), tmpl_name(t)) < 0 ||
            kube_get(ac->t->client, path, admit_read, ac, &gerr) < 0) {
            admit_fail(ac, "reading the existing", &gerr);
            return;
        }
        ac->pending++;
        return;
    }
    if (err->code < 0) {
        admit_fail(ac, "creating", err);
        return;
    }
    admit_next(ac, t);
}

/* Creates templates[next] (within the bounds), or answers once all exist. */
static void admit_step(struct admit_call *ac)
{
    struct sched_dra_templates *tt = ac->t;
    json_t *t = json_array_get(ac->templates, ac->next);
    if (t == NULL) {
        admit_end(ac, NULL);
        return;
    }
    const char *ns = tmpl_ns(t);
    char key[512];
    (void)vg_snprintf(key, sizeof key, "%s/%s", ns, tmpl_name(t));
    if (sched_map_get(&tt->known, key) == NULL) {
        char msg[512];
        size_t in_ns = count_in(tt, ns);
        if (tt->opt.max_per_namespace > 0 && in_ns >= tt->opt.max_per_namespace) {
            (void)vg_snprintf(msg, sizeof msg,
                              "vgpu: namespace %s holds %zu of vgpu's ResourceClaimTemplates, "
                              "the most --dra-max-templates-per-namespace allows; use a GPU "
                              "shape its pods use already, or ask the operator for a larger "
                              "bound",
                              ns, in_ns);
            tt->errors++;
            admit_end(ac, msg);
            return;
        }
        if (tt->opt.max_total > 0 && tt->known.count >= tt->opt.max_total) {
            (void)vg_snprintf(msg, sizeof msg,
                              "vgpu: the cluster holds %zu of vgpu's ResourceClaimTemplates, "
                              "the most --dra-max-templates allows; try again once unused ones "
                              "are collected",
                              tt->known.count);
            tt->errors++;
            admit_end(ac, msg);
            return;
        }
    }
    char path[256];
    struct vg_err err = {0};
    if (vg_snprintf(path, sizeof path,
                    "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates", ns) < 0) {
        vg_err_set(&err, -ENAMETOOLONG, "namespace too long");
        admit_fail(ac, "creating", &err);
        return;
    }
    if (kube_post(tt->client, path, t, admit_created, ac, &err) < 0) {
        admit_fail(ac, "creating", &err);
        return;
    }
    ac->pending++;
}

/* ---- the pod's owners -------------------------------------------------------------- */

static bool chars_in(const char *s, size_t max, const char *allowed)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n <= max && strspn(s, allowed) == n;
}

#define LOWER_DIGITS "abcdefghijklmnopqrstuvwxyz0123456789"
#define ALNUM        LOWER_DIGITS "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

/* The REST path of one ownerReference in namespace ns: /api/v1/... for the core group,
 * /apis/GROUP/VERSION/... otherwise, the resource being the kind's plural by Kubernetes'
 * rule (lower case; -s, -es after s/x/ch/sh, -ies after a consonant and y). Node is the
 * one cluster-scoped owner a pod has (a static pod's mirror). 0, or -EINVAL with what is
 * wrong in msg: every field is checked before it reaches a path. */
static int owner_path(json_t *o, const char *ns, char *path, size_t size, char *msg, size_t msize)
{
    const char *av = json_string_value(json_object_get(o, "apiVersion"));
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const char *name = json_string_value(json_object_get(o, "name"));
    const char *uid = json_string_value(json_object_get(o, "uid"));
    if (!chars_in(av, 253, LOWER_DIGITS ".-/") || av[0] == '/' ||
        strchr(av, '/') != strrchr(av, '/') || av[strlen(av) - 1] == '/' ||
        strstr(av, "..") != NULL || !chars_in(kind, 63, ALNUM) || kind[0] < 'A' || kind[0] > 'Z' ||
        !chars_in(name, 253, LOWER_DIGITS ".-:") || strstr(name, "..") != NULL ||
        !chars_in(uid, 64, ALNUM "-")) {
        (void)vg_snprintf(msg, msize,
                          "vgpu: the pod's ownerReferences entry %s %s is malformed (apiVersion, "
                          "kind, name and uid are required)",
                          kind ? kind : "(no kind)", name ? name : "(no name)");
        return -EINVAL;
    }
    char plural[80];
    size_t k = strlen(kind);
    for (size_t i = 0; i < k; i++)
        plural[i] = (char)(kind[i] >= 'A' && kind[i] <= 'Z' ? kind[i] - 'A' + 'a' : kind[i]);
    plural[k] = '\0';
    char last = plural[k - 1], before = k > 1 ? plural[k - 2] : '\0';
    if (last == 's' || last == 'x' || (last == 'h' && (before == 'c' || before == 's')))
        (void)vg_strlcpy(plural + k, "es", sizeof plural - k);
    else if (last == 'y' && k > 1 && !strchr("aeiou", before))
        (void)vg_strlcpy(plural + k - 1, "ies", sizeof plural - k + 1);
    else
        (void)vg_strlcpy(plural + k, "s", sizeof plural - k);
    bool core = strchr(av, '/') == NULL;
    bool cluster = core && strcmp(kind, "Node") == 0;
    int rc = cluster ? vg_snprintf(path, size, "/api/v1/%s/%s", plural, name)
                     : vg_snprintf(path, size, "%s%s/namespaces/%s/%s/%s",
                                   core ? "/api/" : "/apis/", av, ns, plural, name);
    if (rc < 0) {
        (void)vg_snprintf(msg, msize, "vgpu: the pod's owner %s %s: name too long", kind, name);
        return -EINVAL;
    }
    return 0;
}

static void admit_owner_next(struct admit_call *ac);

/* One owner read back: it must exist with the uid the pod names. */
static void admit_owner(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct admit_call *ac = arg;
    if (!admit_live(ac))
        return;
    json_t *o = json_array_get(ac->owners, ac->owner_next);
    const char *ns = tmpl_ns(json_array_get(ac->templates, 0));
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const char *name = json_string_value(json_object_get(o, "name"));
    const char *uid = json_string_value(json_object_get(o, "uid"));
    char msg[VG_ERR_MSG_MAX + 512];
    if (status == 404) {
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: the pod's owner %s %s does not exist in namespace %s; vgpu "
                          "creates ResourceClaimTemplates only for pods whose owners exist",
                          kind, name, ns);
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    if (err->code < 0) {
        (void)vg_snprintf(msg, sizeof msg, "vgpu: reading the pod's owner %s %s failed: %s", kind,
                          name, err->msg);
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    const char *have = sched_json_str(body, "metadata", "uid", NULL);
    if (have == NULL || strcmp(have, uid) != 0) {
        (void)vg_snprintf(
            msg, sizeof msg,
            "vgpu: the pod names owner %s %s with uid %s, but that owner's uid is "
            "%s; vgpu creates ResourceClaimTemplates only for pods whose owners exist",
            kind, name, uid, have ? have : "(none)");
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    ac->owner_next++;
    admit_owner_next(ac);
}

/* The next owner to read, or the templates once every owner was found. */
static void admit_owner_next(struct admit_call *ac)
{
    json_t *o = json_array_get(ac->owners, ac->owner_next);
    if (o == NULL) {
        admit_step(ac);
        return;
    }
    const char *ns = tmpl_ns(json_array_get(ac->templates, 0));
    char path[1024], msg[512];
    struct vg_err err = {0};
    if (owner_path(o, ns, path, sizeof path, msg, sizeof msg) < 0) {
        admit_end(ac, msg);
        return;
    }
    if (kube_get(ac->t->client, path, admit_owner, ac, &err) < 0) {
        (void)vg_snprintf(msg, sizeof msg, "vgpu: reading the pod's owner failed: %s", err.msg);
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    ac->pending++;
}

/* The namespace the templates go to: it must exist and not be going away, or the
 * review was not about a pod kube-apiserver will create. */
static void admit_namespace(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct admit_call *ac = arg;
    if (!admit_live(ac))
        return;
    const char *ns = tmpl_ns(json_array_get(ac->templates, 0));
    char msg[VG_ERR_MSG_MAX + 256];
    if (status == 404) {
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: namespace %s does not exist; vgpu creates ResourceClaimTemplates "
                          "only for pods of existing namespaces",
                          ns);
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    if (err->code < 0) {
        (void)vg_snprintf(msg, sizeof msg, "vgpu: reading namespace %s failed: %s", ns, err->msg);
        ac->t->errors++;
        admit_end(ac, msg);
        return;
    }
    const char *phase = sched_json_str(body, "status", "phase", NULL);
    if (sched_json_str(body, "metadata", "deletionTimestamp", NULL) != NULL ||
        (phase != NULL && strcmp(phase, "Terminating") == 0)) {
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: namespace %s is being deleted; no ResourceClaimTemplate is "
                          "created in it",
                          ns);
        admit_end(ac, msg);
        return;
    }
    admit_owner_next(ac);
}

void sched_dra_templates_ensure(struct sched_dra_templates *t, json_t *templates, json_t *owners,
                                sched_dra_done_fn done, void *arg)
{
    struct admit_call *ac = xcalloc(1, sizeof *ac);
    ac->t = t;
    ac->done = done;
    ac->arg = arg;
    ac->templates = json_incref(templates);
    ac->owners = json_is_array(owners) ? json_incref(owners) : json_array();
    if (owners != NULL && !json_is_array(owners)) {
        admit_end(ac, "vgpu: the pod's metadata.ownerReferences is not a list");
        return;
    }
    if (json_array_size(ac->owners) > ADMIT_MAX_OWNERS) {
        char msg[256];
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: the pod names %zu owners; vgpu checks at most %d before it "
                          "creates ResourceClaimTemplates",
                          json_array_size(ac->owners), ADMIT_MAX_OWNERS);
        admit_end(ac, msg);
        return;
    }
    const char *ns = tmpl_ns(json_array_get(templates, 0));
    size_t i;
    json_t *tm;
    json_array_foreach(templates, i, tm)
    {
        const char *other = tmpl_ns(tm);
        if (ns == NULL || other == NULL || strcmp(ns, other) != 0) {
            admit_end(ac, "vgpu: the pod's templates name more than one namespace");
            return;
        }
    }
    ac->timer = evtimer_new(t->base, admit_timeout, ac);
    struct timeval tv = {ADMIT_API_TIMEOUT_MS / 1000, (ADMIT_API_TIMEOUT_MS % 1000) * 1000};
    if (ac->timer != NULL)
        evtimer_add(ac->timer, &tv);
    char path[256];
    struct vg_err err = {0};
    if (vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s", ns) < 0 ||
        kube_get(t->client, path, admit_namespace, ac, &err) < 0) {
        char msg[VG_ERR_MSG_MAX + 64];
        (void)vg_snprintf(msg, sizeof msg, "vgpu: reading namespace failed: %s", err.msg);
        t->errors++;
        admit_end(ac, msg);
        return;
    }
    ac->pending++;
}

/* ---- the sweep ------------------------------------------------------------------------ */

struct sweep {
    struct sched_dra_templates *t;
    json_t *items;      /* vgpu's templates as listed */
    json_t *namespaces; /* the namespaces holding them, each once */
    size_t next;        /* namespaces[next]'s pods are being listed */
};

static void sweep_end(struct sweep *sw)
{
    sw->t->sweeping = NULL;
    json_decref(sw->items);
    json_decref(sw->namespaces);
    free(sw);
}

static void deleted(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)body;
    struct sched_dra_templates *t = arg;
    if (err->code < 0 && status != 404) {
        t->errors++;
        vg_log(VG_LOG_WARN, "deleting an unused ResourceClaimTemplate failed", "err=\"%s\"",
               err->msg);
    }
}

static void sweep_next(struct sweep *sw);

/* The pods of namespaces[next]: vgpu's templates there that none names, and that no
 * admission used within the grace period, go. */
static void sweep_pods(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct sweep *sw = arg;
    struct sched_dra_templates *t = sw->t;
    const char *ns = json_string_value(json_array_get(sw->namespaces, sw->next));
    if (err->code < 0) {
        t->errors++;
        vg_log(VG_LOG_WARN, "sweep: listing pods failed; the namespace's templates stay",
               "namespace=%s err=\"%s\"", ns, err->msg);
        sw->next++;
        sweep_next(sw);
        return;
    }
    struct sched_map used;
    sched_map_init(&used);
    size_t i, j;
    json_t *pod, *claim;
    json_array_foreach(json_object_get(body, "items"), i, pod)
    {
        json_array_foreach(json_object_get(json_object_get(pod, "spec"), "resourceClaims"), j,
                           claim)
        {
            const char *name = sched_json_str(claim, "resourceClaimTemplateName", NULL, NULL);
            if (name != NULL)
                sched_map_put(&used, name, pod);
        }
    }
    int64_t now = mono_s();
    json_t *tm;
    json_array_foreach(sw->items, i, tm)
    {
        const char *name = tmpl_name(tm);
        if (strcmp(tmpl_ns(tm), ns) != 0 || sched_map_get(&used, name) != NULL)
            continue;
        char key[512], path[768];
        (void)vg_snprintf(key, sizeof key, "%s/%s", ns, name);
        struct known *k = sched_map_get(&t->known, key);
        if (k != NULL && now - k->used_s < (int64_t)t->opt.grace_s)
            continue;
        struct vg_err derr = {0};
        if (vg_snprintf(path, sizeof path,
                        "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaimtemplates/%s", ns,
                        name) < 0 ||
            kube_delete(t->client, path, deleted, t, &derr) < 0) {
            t->errors++;
            continue;
        }
        vg_log(VG_LOG_INFO, "sweep: deleting an unused ResourceClaimTemplate", "template=%s", key);
        free(sched_map_remove(&t->known, key));
    }
    sched_map_release(&used);
    sw->next++;
    sweep_next(sw);
}

static void sweep_next(struct sweep *sw)
{
    const char *ns = json_string_value(json_array_get(sw->namespaces, sw->next));
    if (ns == NULL) {
        sweep_end(sw);
        return;
    }
    char path[256];
    struct vg_err err = {0};
    if (vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods", ns) < 0 ||
        kube_get(sw->t->client, path, sweep_pods, sw, &err) < 0) {
        sw->t->errors++;
        sw->next++;
        sweep_next(sw);
    }
}

/* vgpu's templates as the API holds them: the known set becomes exactly these (those
 * seen for the first time count as used now, so a restart never sweeps at once). */
static void sweep_listed(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct sweep *sw = arg;
    struct sched_dra_templates *t = sw->t;
    if (err->code < 0) {
        t->errors++;
        vg_log(VG_LOG_WARN, "sweep: listing ResourceClaimTemplates failed", "err=\"%s\"", err->msg);
        sweep_end(sw);
        return;
    }
    struct sched_map fresh;
    sched_map_init(&fresh);
    sw->items = json_array();
    sw->namespaces = json_array();
    VG_AUTO_JSON json_t *seen_ns = json_object();
    int64_t now = mono_s();
    size_t i;
    json_t *tm;
    json_array_foreach(json_object_get(body, "items"), i, tm)
    {
        const char *ns = tmpl_ns(tm), *name = tmpl_name(tm);
        char key[512];
        if (ns == NULL || name == NULL ||
            strncmp(name, TEMPLATE_PREFIX, strlen(TEMPLATE_PREFIX)) != 0 ||
            vg_snprintf(key, sizeof key, "%s/%s", ns, name) < 0)
            continue;
        struct known *k = xcalloc(1, sizeof *k);
        const struct known *old = sched_map_get(&t->known, key);
        k->used_s = old != NULL ? old->used_s : now;
        free(sched_map_put(&fresh, key, k));
        json_array_append(sw->items, tm);
        if (json_object_get(seen_ns, ns) == NULL) {
            json_object_set_new(seen_ns, ns, json_true());
            json_array_append_new(sw->namespaces, json_string(ns));
        }
    }
    /* Templates an admission made since the list was asked for stay known. */
    for (size_t s = sched_map_next(&t->known, 0); s < t->known.cap;
         s = sched_map_next(&t->known, s + 1)) {
        const struct known *old = t->known.slots[s].value;
        if (sched_map_get(&fresh, t->known.slots[s].key) == NULL && now - old->used_s < 60) {
            struct known *k = xcalloc(1, sizeof *k);
            *k = *old;
            sched_map_put(&fresh, t->known.slots[s].key, k);
        }
    }
    known_clear(&t->known);
    t->known = fresh;
    if (t->opt.sweep_s == 0) { /* no sweep: the list only taught the bounds */
        sweep_end(sw);
        return;
    }
    sweep_next(sw);
}

static void sweep_start(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct sched_dra_templates *t = arg;
    if (t->sweeping != NULL)
        return;
    struct sweep *sw = xcalloc(1, sizeof *sw);
    sw->t = t;
    t->sweeping = sw;
    struct vg_err err = {0};
    if (kube_get(t->client,
                 "/apis/resource.k8s.io/v1/resourceclaimtemplates?labelSelector=" MANAGED_SELECTOR,
                 sweep_listed, sw, &err) < 0) {
        t->errors++;
        sweep_end(sw);
    }
}

int sched_dra_templates_new(struct event_base *base, struct kube_client *client,
                            const struct sched_dra_template_options *o,
                            struct sched_dra_templates **out, struct vg_err *err)
{
    struct sched_dra_templates *t = xcalloc(1, sizeof *t);
    t->base = base;
    t->client = client;
    t->opt = *o;
    sched_map_init(&t->known);
    /* The first sweep at once: it learns what the bounds count. */
    t->sweep_timer = event_new(base, -1, o->sweep_s > 0 ? EV_PERSIST : 0, sweep_start, t);
    struct timeval every = {o->sweep_s, 0};
    if (t->sweep_timer == NULL || (o->sweep_s > 0 && event_add(t->sweep_timer, &every) < 0)) {
        sched_dra_templates_free(t);
        return vg_err_set(err, -ENOMEM, "cannot start the template sweep");
    }
    event_active(t->sweep_timer, EV_TIMEOUT, 0);
    *out = t;
    return 0;
}

void sched_dra_templates_free(struct sched_dra_templates *t)
{
    if (t == NULL)
        return;
    if (t->sweep_timer != NULL)
        event_free(t->sweep_timer);
    if (t->sweeping != NULL)
        sweep_end(t->sweeping);
    known_clear(&t->known);
    free(t);
}
