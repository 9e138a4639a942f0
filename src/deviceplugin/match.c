/* Which container is kubelet allocating? (vgpu mode; docs/protocol.md "Allocate matching")
 *
 * kubelet's Allocate carries only device IDs, one container per call, in pod order. The
 * scheduler's decision names containers. The rule: consider pods bound to this node that
 * carry a decision for this node and are neither finished nor being deleted, oldest
 * decision first (kubelet admits pods in the order they were bound); in each, skip
 * containers already allocated (their directory exists, which also survives a plugin
 * restart); take the first container whose GPUs are exactly the GPUs kubelet chose (true
 * whenever kubelet followed our GetPreferredAllocation), else the first one, in decision
 * order, asking for as many GPUs as kubelet allocates. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

struct candidate {
    json_t *pod;
    struct annot_decision decision;
};

static const char *str_at(json_t *obj, const char *a, const char *b)
{
    json_t *x = json_object_get(obj, a);
    x = b ? json_object_get(x, b) : x;
    return json_is_string(x) ? json_string_value(x) : NULL;
}

/* Sorts pointers: a decision is tens of KiB, too big to move around. */
static int candidate_cmp(const void *pa, const void *pb)
{
    const struct candidate *a = *(const struct candidate *const *)pa,
                           *b = *(const struct candidate *const *)pb;
    if (a->decision.time != b->decision.time)
        return a->decision.time < b->decision.time ? -1 : 1;
    const char *na = str_at(a->pod, "metadata", "name"), *nb = str_at(b->pod, "metadata", "name");
    return strcmp(na ? na : "", nb ? nb : "");
}

static bool same_gpus(const struct annot_container *c, char (*uuids)[ANNOT_UUID_MAX], size_t count)
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

static int fill(struct candidate *cand, unsigned k, struct dp_match *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    const char *uid = str_at(cand->pod, "metadata", "uid");
    const char *ns = str_at(cand->pod, "metadata", "namespace");
    const char *name = str_at(cand->pod, "metadata", "name");
    if (vg_strlcpy(out->pod_uid, uid, sizeof(out->pod_uid)) < 0 ||
        vg_strlcpy(out->pod_namespace, ns ? ns : "", sizeof(out->pod_namespace)) < 0 ||
        vg_strlcpy(out->pod_name, name ? name : "", sizeof(out->pod_name)) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "pod identity too long");
    out->container = cand->decision.containers[k];
    return 0;
}

int dp_match_container(json_t *pods, const char *node, char (*uuids)[ANNOT_UUID_MAX], size_t count,
                       dp_allocated_fn allocated, void *allocated_arg, struct dp_match *out,
                       struct vg_err *err)
{
    size_t n = json_array_size(pods);
    struct candidate *cands = calloc(n ? n : 1, sizeof(*cands));
    if (!cands)
        return vg_err_set(err, -ENOMEM, "out of memory");
    size_t cand_count = 0;
    char garbled[200] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *pod = json_array_get(pods, i);
        const char *bound = str_at(pod, "spec", "nodeName");
        const char *phase = str_at(pod, "status", "phase");
        const char *uid = str_at(pod, "metadata", "uid");
        json_t *meta = json_object_get(pod, "metadata");
        if (!bound || strcmp(bound, node) != 0 || !uid ||
            json_object_get(meta, "deletionTimestamp"))
            continue;
        if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
            continue;
        const char *text = str_at(json_object_get(meta, "annotations"), ANNOT_KEY_DECISION, NULL);
        if (!text)
            continue;
        struct vg_err derr = {0};
        struct candidate *c = &cands[cand_count];
        const char *name = str_at(pod, "metadata", "name");
        if (annot_decision_decode(text, strlen(text), &c->decision, &derr) < 0) {
            if (!garbled[0])
                vg_snprintf(garbled, sizeof(garbled), "; pod %s has a garbled %s: %s",
                            name ? name : uid, ANNOT_KEY_DECISION, derr.msg);
            continue;
        }
        if (strcmp(c->decision.node, node) != 0) {
            if (!garbled[0])
                vg_snprintf(garbled, sizeof(garbled), "; pod %s has a decision for node '%s'",
                            name ? name : uid, c->decision.node);
            continue;
        }
        c->pod = pod;
        cand_count++;
    }
    struct candidate **order = calloc(cand_count ? cand_count : 1, sizeof(*order));
    if (!order) {
        free(cands);
        return vg_err_set(err, -ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < cand_count; i++)
        order[i] = &cands[i];
    qsort(order, cand_count, sizeof(*order), candidate_cmp);
    int rc = -ENOENT;
    for (int pass = 0; pass < 2 && rc == -ENOENT; pass++)
        for (size_t i = 0; i < cand_count && rc == -ENOENT; i++) {
            struct candidate *cand = order[i];
            const char *uid = str_at(cand->pod, "metadata", "uid");
            for (unsigned k = 0; k < cand->decision.container_count; k++) {
                const struct annot_container *c = &cand->decision.containers[k];
                if (c->gpu_count == 0 || allocated(allocated_arg, uid, c->name))
                    continue;
                bool ok = pass == 0 ? same_gpus(c, uuids, count) : c->gpu_count == count;
                if (ok) {
                    rc = fill(cand, k, out, err);
                    break;
                }
            }
        }
    free(order);
    free(cands);
    if (rc == -ENOENT)
        return vg_err_set(err, -ENOENT,
                          "vgpu: no scheduling decision (%s) on node %s for a container asking "
                          "for %zu GPU(s); was the pod scheduled by vgpu-scheduler?%s",
                          ANNOT_KEY_DECISION, node, count, garbled);
    return rc;
}
