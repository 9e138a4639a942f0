/* Fuzz target for vgpu-scheduler's decoders: the extender's ExtenderArgs and
 * ExtenderBindingArgs, the AdmissionReview, and pod objects from the watch (with their
 * vgpu.io/decision and selection annotations). The first byte picks the entry point, the
 * rest is the body; the state (three nodes of two GPUs) lives across inputs.
 *
 * Verdict: a request is accepted when it is served: filter with no Error, prioritize,
 * bind, and an admission that is allowed (pod objects report none). Whatever arrives:
 * - an accepted request gets well-formed JSON of its verb's shape, naming only the nodes
 *   it was asked about; a node filter chooses is one whose promise bind finds there,
 *   with a decision for that node naming only that node's GPUs;
 * - a refused one says what is wrong, naming the part of the request (the error of a
 *   400, the filter's Error, the admission's status message);
 * - no GPU ever holds more memory, compute or tenants than it has (checked here from the
 *   placement model, and by sched_check_invariants). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "base/log.h"
#include "scheduler/internal.h"
#include "scheduler/sched.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sched_state *state;
static struct annot_decision decision; /* large: not on the stack */

static void setup(void)
{
    vg_log_max_level = -1; /* skipped inputs log; keep the replay quiet */
    struct sched_options o;
    sched_options_default(&o);
    struct vg_err err = {0};
    if (sched_state_new(&o, &state, &err) < 0)
        abort();
    for (int n = 0; n < 3; n++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "{\"metadata\":{\"name\":\"node-%d\",\"annotations\":{\"vgpu.io/gpus\":"
                 "\"{\\\"version\\\":1,\\\"heartbeat\\\":1,\\\"mode\\\":\\\"vgpu\\\","
                 "\\\"gpus\\\":[{\\\"uuid\\\":\\\"GPU-%d-0\\\",\\\"index\\\":0,\\\"model\\\":"
                 "\\\"NVIDIA H100\\\",\\\"memoryMiB\\\":16000,\\\"cores\\\":100,\\\"slots\\\":4,"
                 "\\\"healthy\\\":true},{\\\"uuid\\\":\\\"GPU-%d-1\\\",\\\"index\\\":1,"
                 "\\\"model\\\":\\\"NVIDIA H100\\\",\\\"memoryMiB\\\":16000,\\\"cores\\\":100,"
                 "\\\"slots\\\":4,\\\"healthy\\\":true}]}\"}}}",
                 n, n, n);
        json_t *node = json_loads(text, 0, NULL);
        if (node == NULL)
            abort();
        sched_node_update(state, node);
        json_decref(node);
    }
}

static void fail(const char *what, const char *text)
{
    fprintf(stderr, "%s: %s\n", what, text != NULL ? text : "(none)");
    abort();
}

/* No GPU of the model holds more than it has. */
static void check_capacity(void)
{
    const struct place_cluster *c = sched_state_cluster(state);
    for (size_t n = 0; n < c->node_count; n++)
        for (unsigned g = 0; g < c->nodes[n].gpu_count; g++) {
            const struct place_gpu *gpu = &c->nodes[n].gpus[g];
            if ((gpu->slots != 0 && gpu->tenants > gpu->slots) ||
                (gpu->mem_total_mib != 0 && gpu->mem_used_mib > gpu->mem_total_mib) ||
                gpu->milli_used > 1000 || gpu->exclusive > 1)
                fail("a GPU holds more than it has", gpu->uuid);
        }
}

static const struct place_node *model_node(const char *name)
{
    const struct place_cluster *c = sched_state_cluster(state);
    for (size_t n = 0; n < c->node_count; n++)
        if (strcmp(c->nodes[n].name, name) == 0)
            return &c->nodes[n];
    return NULL;
}

/* The node names a request asks about: ExtenderArgs' NodeNames, or Nodes.items. */
static bool asked(json_t *args, const char *name)
{
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(args, "NodeNames"), i, item)
    {
        if (json_is_string(item) && strcmp(json_string_value(item), name) == 0)
            return true;
    }
    json_array_foreach(json_object_get(json_object_get(args, "Nodes"), "items"), i, item)
    {
        json_t *n = json_object_get(json_object_get(item, "metadata"), "name");
        if (json_is_string(n) && strcmp(json_string_value(n), name) == 0)
            return true;
    }
    return false;
}

/* A refusal names what is wrong: the object or field of the request, a container, an
 * annotation or resource, the pod, or where the JSON breaks. */
static void check_refusal(const char *msg)
{
    static const char *const names[] = {
        "ExtenderArgs",
        "ExtenderBindingArgs",
        "AdmissionReview",
        "request body",
        "JSON",
        "container ",
        "nvidia.com/",
        "vgpu.io/",
        "hami.io/",
        "pod ",
        "Pod",
        "node",
        "annotation",
        "namespace",
        "resource",
    };
    if (msg == NULL || msg[0] == '\0')
        fail("a refusal without a message", msg);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strstr(msg, names[i]) != NULL)
            return;
    fail("a refusal that names nothing of the request", msg);
}

/* Bind finds the promise filter made for the pod on node: a decision for that node
 * naming its GPUs only, or none for a pod without GPUs (a pod the API shows bound holds
 * its node already). The bind is then left unknown, which keeps a GPU promise as it was
 * (until the TTL); the record of a pod without GPUs goes, as after any bind. Returns
 * whether there is a decision. */
static bool check_promise(json_t *args, const char *node)
{
    json_t *meta = json_object_get(json_object_get(args, "Pod"), "metadata");
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    /* A pod the API already shows with GPUs is answered with its node: nothing to bind. */
    char key[SCHED_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s", ns != NULL && ns[0] != '\0' ? ns : "default",
             name != NULL ? name : "");
    const struct sched_pod *known = sched_map_get(&state->pods, key);
    if (known != NULL && !known->assumed) {
        if (strcmp(known->node_name, node) != 0)
            fail("filter passed another node than the one the pod holds GPUs on", node);
        return true;
    }
    json_t *bind =
        json_pack("{s:s?, s:s?, s:s}", "PodName", name, "PodNamespace", ns, "Node", node);
    char *body = json_dumps(bind, JSON_COMPACT);
    json_decref(bind);
    struct sched_bind b;
    struct vg_err err = {0};
    struct sched_now now = {.mono_ms = 1000, .unix_s = 10};
    if (body == NULL || sched_bind_prepare(state, body, strlen(body), now, &b, &err) != 0)
        fail("filter chose a node that bind does not find promised", err.msg);
    free(body);
    const struct place_node *n = model_node(node);
    if (b.decision != NULL) {
        if (annot_decision_decode(b.decision, strlen(b.decision), &decision, &err) < 0 ||
            strcmp(decision.node, node) != 0 || n == NULL)
            fail("the promised decision is not one for the chosen node", b.decision);
        for (unsigned k = 0; k < decision.container_count; k++)
            for (unsigned g = 0; g < decision.containers[k].gpu_count; g++) {
                const struct annot_share *share = &decision.containers[k].gpus[g];
                bool found = false;
                for (unsigned i = 0; i < n->gpu_count && !found; i++)
                    found = strcmp(n->gpus[i].uuid, share->uuid) == 0 &&
                            share->memory_mib <= n->gpus[i].mem_total_mib && share->cores <= 100;
                if (!found)
                    fail("the promised decision names a share the node cannot hold", b.decision);
            }
    }
    bool placed = b.decision != NULL;
    sched_bind_finish(state, &b, SCHED_BIND_UNKNOWN, now);
    sched_bind_release(&b);
    return placed;
}

/* ExtenderFilterResult: the nodes answered are among those asked about; FailedNodes give
 * a reason per node; the pod's promise is on the node chosen, and only a pod without GPUs
 * passes more than one node. Returns the Error, "" when none. */
static const char *check_filter(json_t *args, json_t *res)
{
    json_t *names = json_object_get(res, "NodeNames");
    json_t *items = json_object_get(json_object_get(res, "Nodes"), "items");
    json_t *failed = json_object_get(res, "FailedNodes");
    json_t *error = json_object_get(res, "Error");
    if (!json_is_object(res) || !json_is_object(failed) || !json_is_string(error) ||
        (!json_is_array(names) && !json_is_array(items)))
        fail("a filter answer of another shape", "");
    const char *key;
    json_t *value;
    json_object_foreach(failed, key, value)
    {
        if (!asked(args, key) || !json_is_string(value) || json_string_length(value) == 0)
            fail("FailedNodes names a node not asked about, or without a reason", key);
    }
    size_t i, chosen = 0;
    bool placed = false;
    const char *first = NULL;
    json_t *item;
    json_array_foreach(json_is_array(names) ? names : items, i, item)
    {
        json_t *n = json_is_string(item)
                        ? item
                        : json_object_get(json_object_get(item, "metadata"), "name");
        if (!json_is_string(n) || !asked(args, json_string_value(n)) ||
            json_object_get(failed, json_string_value(n)) != NULL)
            fail("filter passed a node not asked about, or failed it too", json_string_value(n));
        chosen++;
        if (first == NULL && model_node(json_string_value(n)) != NULL) {
            /* GPUs are placed on a node the model knows: a pod without GPUs passes every
             * node, known or not. */
            first = json_string_value(n);
            placed = check_promise(args, first);
        } else if (placed && strcmp(first, json_string_value(n)) != 0) {
            /* (a node asked about twice is answered twice) */
            fail("filter placed GPUs and passed another node than the chosen one",
                 json_string_value(n));
        }
    }
    if (chosen > 0 && json_string_length(error) != 0)
        fail("filter chose a node and reported an error", json_string_value(error));
    return json_string_value(error);
}

/* HostPriorityList: one score per node asked about, 0 to 10. */
static void check_prioritize(json_t *args, json_t *res)
{
    size_t i;
    json_t *item;
    if (!json_is_array(res))
        fail("a prioritize answer of another shape", "");
    json_array_foreach(res, i, item)
    {
        json_t *host = json_object_get(item, "Host"), *score = json_object_get(item, "Score");
        if (!json_is_string(host) || !asked(args, json_string_value(host)) ||
            !json_is_integer(score) || json_integer_value(score) < 0 ||
            json_integer_value(score) > 10)
            fail("a priority for a node not asked about, or out of 0..10", "");
    }
}

/* AdmissionReview: the response answers the request's uid; a denial says why. Returns
 * whether it is allowed. */
static bool check_admit(json_t *review, json_t *res)
{
    json_t *resp = json_object_get(res, "response");
    json_t *uid = json_object_get(json_object_get(review, "request"), "uid");
    json_t *allowed = json_object_get(resp, "allowed");
    if (!json_is_object(resp) || !json_is_boolean(allowed) ||
        !json_equal(json_object_get(resp, "uid"), uid))
        fail("an AdmissionReview answer of another shape, or for another request", "");
    if (!json_is_true(allowed))
        check_refusal(
            json_string_value(json_object_get(json_object_get(resp, "status"), "message")));
    return json_is_true(allowed);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (state == NULL)
        setup();
    if (size == 0)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct sched_now now = {.mono_ms = 1000, .unix_s = 10};
    struct vg_err err = {0};
    char *out = NULL;
    int rc = 0;
    unsigned verb = data[0] % 5;
    switch (verb) {
    case 0:
        rc = sched_filter(state, body, len, now, &out, &err);
        break;
    case 1:
        rc = sched_prioritize(state, body, len, &out, &err);
        break;
    case 2: {
        struct sched_bind b;
        rc = sched_bind_prepare(state, body, len, now, &b, &err);
        if (rc == 0) {
            if (b.ns[0] == '\0' || b.name[0] == '\0' || b.node[0] == '\0')
                fail("bind prepared a binding without a pod or node", b.name);
            if (b.decision != NULL &&
                (annot_decision_decode(b.decision, strlen(b.decision), &decision, &err) < 0 ||
                 strcmp(decision.node, b.node) != 0))
                fail("bind writes a decision for another node", b.decision);
            sched_bind_finish(state, &b, (enum sched_bind_outcome)((data[0] >> 5) % 3), now);
            sched_bind_release(&b);
        }
        break;
    }
    case 3:
        rc = sched_admit(state, body, len, &out, &err);
        break;
    case 4: {
        json_t *pod = json_loadb(body, len, 0, NULL);
        if (pod != NULL) {
            if (data[0] & 0x80)
                sched_pod_delete(state, pod);
            else
                sched_pod_update(state, pod);
            json_decref(pod);
        }
        break;
    }
    }
    if (rc < 0) {
        check_refusal(err.msg);
        vg_fuzz_report(false);
    } else if (verb == 2) {
        vg_fuzz_report(true);
    } else if (verb != 4) {
        json_t *args = json_loadb(body, len, 0, NULL);
        json_t *res = out != NULL ? json_loads(out, JSON_REJECT_DUPLICATES, NULL) : NULL;
        if (args == NULL || res == NULL)
            fail("a request served without a JSON answer", out);
        bool accepted = true;
        if (verb == 0) {
            const char *error = check_filter(args, res);
            accepted = error[0] == '\0';
            if (!accepted)
                check_refusal(error);
        } else if (verb == 1) {
            check_prioritize(args, res);
        } else {
            accepted = check_admit(args, res);
        }
        vg_fuzz_report(accepted);
        json_decref(res);
        json_decref(args);
    }
    free(out);
    check_capacity();
    if (sched_check_invariants(state, &err) < 0)
        fail("sched_check_invariants", err.msg);
    /* Expire everything now and then so that state does not only grow. */
    if ((data[0] & 0x40) != 0)
        sched_expire(state, (struct sched_now){.mono_ms = UINT64_MAX / 2, .unix_s = 10});
    return 0;
}
