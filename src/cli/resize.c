/* vgpu resize (verbs.h): writes a vgpu.io/resize request on the pod and waits for
 * vgpu-scheduler's answer in vgpu.io/resize-status (docs/protocol.md "Live resize").
 *
 * Everything the command can tell before asking is checked first, so a request that
 * cannot succeed changes nothing: the flags' values (the quantities nvidia.com/gpumem and
 * nvidia.com/gpucores take), the pod (it exists, vgpu decided it, it runs), the container,
 * and no other request still waiting for its answer. The request is written with the
 * pod's resourceVersion as a precondition, so two requests racing cannot both be written;
 * the loser exits non-zero having changed nothing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/parse.h"
#include "base/prng.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/cluster.h"

#define RESIZE_POLL_NS 50000000L /* between reads of the pod while waiting */

/* The flags as a request: --gpumem read as nvidia.com/gpumem is (docs/protocol.md
 * "Kubernetes quantities"), --gpucores as a count 1..100. */
static int request_from_flags(const struct cli_options *opt, struct annot_resize *req,
                              struct vg_err *err)
{
    memset(req, 0, sizeof *req);
    struct vg_err sub = {0};
    if (opt->gpumem == NULL && opt->gpucores == NULL)
        return vg_err_set(err, -EINVAL, "nothing to change: give --gpumem and/or --gpucores");
    if (opt->gpumem != NULL) {
        if (vg_parse_kube_mib(opt->gpumem, ANNOT_RESIZE_MAX_MIB, &req->memory_mib, &sub) < 0)
            return vg_err_set(err, -EINVAL, "--gpumem '%s': %s", opt->gpumem, sub.msg);
        if (req->memory_mib == 0)
            return vg_err_set(err, -EINVAL, "--gpumem '%s': a memory limit of at least 1 MiB",
                              opt->gpumem);
    }
    if (opt->gpucores != NULL) {
        uint64_t pct = 0;
        if (vg_parse_kube_count(opt->gpucores, 100, &pct, &sub) < 0 || pct == 0)
            return vg_err_set(err, -EINVAL, "--gpucores '%s': a percentage 1..100%s%s",
                              opt->gpucores, sub.msg[0] ? ": " : "", sub.msg);
        req->cores = (unsigned)pct;
    }
    if (opt->container != NULL) {
        if (!annot_dns_label(opt->container))
            return vg_err_set(err, -EINVAL, "-c '%.64s': not a container name", opt->container);
        (void)vg_strlcpy(req->container, opt->container, sizeof req->container);
    }
    /* An id no other request shares: the time, this process, and chance. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct vg_prng rng;
    vg_prng_seed(&rng, (uint64_t)now.tv_nsec ^ ((uint64_t)getpid() << 32));
    uint64_t r = vg_prng_next(&rng);
    (void)vg_snprintf(req->id, sizeof req->id, "r-%lld-%08llx", (long long)time(NULL),
                      (unsigned long long)(r & 0xffffffffu));
    return 0;
}

/* The container the request names in the pod's decision (or its one with GPUs). */
static const struct annot_container *find_container(const struct annot_decision *d,
                                                    const char *name, struct vg_err *err)
{
    const struct annot_container *found = NULL;
    unsigned with = 0;
    for (unsigned i = 0; i < d->container_count; i++) {
        if (d->containers[i].gpu_count > 0)
            with++;
        if (name[0] != '\0' ? strcmp(d->containers[i].name, name) == 0
                            : d->containers[i].gpu_count > 0 && found == NULL)
            found = &d->containers[i];
    }
    if (name[0] == '\0' && with > 1) {
        vg_err_set(err, -EINVAL, "%u containers have GPUs: name one with -c", with);
        return NULL;
    }
    if (found == NULL || found->gpu_count == 0)
        vg_err_set(err, -EINVAL, "container %s has no vgpu GPUs", name[0] ? name : "(any)");
    return found != NULL && found->gpu_count > 0 ? found : NULL;
}

static void sleep_poll(void)
{
    struct timespec t = {0, RESIZE_POLL_NS};
    nanosleep(&t, NULL);
}

static uint64_t mono_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

int cli_resize(const struct cli_source *src, const struct cli_options *opt, FILE *out, FILE *diag,
               struct vg_err *err)
{
    (void)diag;
    const char *ns = cli_namespace(src, opt);
    if (opt->pod == NULL || !annot_dns_subdomain(opt->pod) || !annot_dns_label(ns))
        return vg_err_set(err, -EINVAL, "resize needs a pod name (POD, with -n NAMESPACE)");
    if (src->patch == NULL)
        return vg_err_set(err, -EINVAL, "this source cannot write");
    struct annot_resize req;
    int rc = request_from_flags(opt, &req, err);
    if (rc < 0)
        return rc;
    char path[600];
    (void)vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, opt->pod);
    VG_AUTO_JSON json_t *pod = NULL;
    if ((rc = src->get(src->ctx, path, &pod, err)) < 0)
        return rc == -ENOENT ? vg_err_set(err, -ENOENT, "pod %s/%s not found", ns, opt->pod) : rc;
    struct annot_decision d;
    if (!cli_pod_decision(pod, &d))
        return vg_err_set(err, -EINVAL,
                          "pod %s/%s is not vgpu's: it holds no vgpu decision (not scheduled "
                          "by vgpu-scheduler, or not yet)",
                          ns, opt->pod);
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    if (phase == NULL || strcmp(phase, "Running") != 0)
        return vg_err_set(err, -EINVAL,
                          "pod %s/%s is %s: only a running pod's limits change live; nothing "
                          "changed",
                          ns, opt->pod, phase != NULL ? phase : "in no phase");
    const struct annot_container *c = find_container(&d, req.container, err);
    if (c == NULL)
        return vg_err_wrap(err, "pod %s/%s", ns, opt->pod);
    const char *waiting = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE);
    const char *answered = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE_STATUS);
    struct annot_resize prev;
    struct annot_resize_status st;
    struct vg_err sub = {0};
    if (waiting != NULL && annot_resize_decode(waiting, strlen(waiting), &prev, &sub) == 0 &&
        (answered == NULL ||
         annot_resize_status_decode(answered, strlen(answered), &st, &sub) < 0 ||
         strcmp(st.id, prev.id) != 0))
        return vg_err_set(err, -EBUSY,
                          "pod %s/%s: another resize (request %s) is waiting for vgpu-scheduler's "
                          "answer; nothing changed, try again",
                          ns, opt->pod, prev.id);
    uint64_t old_mib = c->gpus[0].memory_mib;
    unsigned old_cores = c->gpus[0].cores;
    VG_AUTO_FREE char *text = annot_resize_encode(&req, err);
    if (text == NULL)
        return err->code;
    const char *rv = sched_json_str(pod, "metadata", "resourceVersion", NULL);
    VG_AUTO_JSON json_t *patch =
        json_pack("{s:{s:{s:s}}}", "metadata", "annotations", ANNOT_KEY_RESIZE, text);
    if (rv != NULL)
        json_object_set_new(json_object_get(patch, "metadata"), "resourceVersion", json_string(rv));
    if ((rc = src->patch(src->ctx, path, patch, err)) < 0) {
        if (rc == -EEXIST)
            return vg_err_set(err, -EBUSY,
                              "pod %s/%s changed while the request was written (another resize "
                              "or edit raced it); nothing changed, try again",
                              ns, opt->pod);
        return rc == -ENOENT ? vg_err_set(err, -ENOENT, "pod %s/%s is gone", ns, opt->pod) : rc;
    }
    uint64_t deadline = mono_ms() + (opt->wait_ms > 0 ? opt->wait_ms : 30000);
    for (;;) {
        json_decref(pod);
        pod = NULL;
        if ((rc = src->get(src->ctx, path, &pod, err)) < 0)
            return rc == -ENOENT ? vg_err_set(err, -ENOENT, "pod %s/%s went away before an answer",
                                              ns, opt->pod)
                                 : rc;
        waiting = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE);
        answered = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_RESIZE_STATUS);
        /* Its answer, or one earlier than the newest: another request may have been
         * written and answered between two reads. */
        enum annot_resize_state state;
        uint64_t gen;
        if (answered != NULL &&
            annot_resize_status_decode(answered, strlen(answered), &st, &sub) == 0 &&
            annot_resize_status_find(&st, req.id, &state, &gen) == 1) {
            if (strcmp(st.id, req.id) != 0) { /* an earlier answer: its words are gone */
                st.state = state;
                st.generation = gen;
                (void)vg_snprintf(st.reason, sizeof st.reason, "%s",
                                  state == ANNOT_RESIZE_DONE
                                      ? ""
                                      : "(its reason was replaced by a later request's answer)");
            }
            break;
        }
        if (waiting == NULL || annot_resize_decode(waiting, strlen(waiting), &prev, &sub) < 0 ||
            strcmp(prev.id, req.id) != 0)
            return vg_err_set(err, -EBUSY,
                              "pod %s/%s: request %s was replaced by another before an answer", ns,
                              opt->pod, req.id);
        if (mono_ms() > deadline)
            return vg_err_set(err, -ETIMEDOUT,
                              "pod %s/%s: no answer from vgpu-scheduler to request %s yet (is it "
                              "running?); the request stays and may still be applied",
                              ns, opt->pod, req.id);
        sleep_poll();
    }
    if (st.state == ANNOT_RESIZE_REFUSED)
        return vg_err_set(err, -EPERM, "resize of pod %s/%s refused: %s; nothing changed", ns,
                          opt->pod, st.reason[0] ? st.reason : "(no reason given)");
    fprintf(out, "pod %s/%s container %s:", ns, opt->pod, c->name);
    if (req.memory_mib > 0)
        fprintf(out, " memory %llu MiB -> %llu MiB", (unsigned long long)old_mib,
                (unsigned long long)req.memory_mib);
    if (req.cores > 0)
        fprintf(out, "%s compute %u%% -> %u%%", req.memory_mib > 0 ? "," : "", old_cores,
                req.cores);
    fprintf(out, " (recorded, generation %llu)\n", (unsigned long long)st.generation);
    if (st.reason[0] != '\0')
        fprintf(out, "note: %s\n", st.reason);
    return 0;
}
