/* Dynamic MIG in the device plugin (docs/deviceplugin.md, "Dynamic MIG"): which GPUs are
 * served that way, who owns each GPU instance, what a decision may ask for, what is left
 * to destroy. Pure functions over struct dp_gpu (filled through the source's mig_state),
 * so tests run them without a GPU; plugin.c does the NVML calls and the API writes.
 *
 * Ownership is the decisions themselves: an instance belongs to the live pod whose
 * decision names its GPU, profile and start. Nothing else is recorded, so a plugin that
 * restarts (or is killed between making a GPU instance and its compute instance) finds
 * the same owners again, and whatever no live pod names is unused. */
#include <errno.h>
#include <string.h>

#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

void dp_migdyn_mark(const struct dpconfig *cfg, struct dp_gpu *gpus, unsigned count)
{
    const struct dpconfig_uint_list *only = &cfg->vgpu.mig_dynamic_gpus;
    for (unsigned i = 0; i < count; i++) {
        bool listed = only->count == 0;
        for (size_t k = 0; k < only->count && !listed; k++)
            listed = only->items[k] == gpus[i].index;
        gpus[i].mig_dynamic =
            cfg->vgpu.mig_mode == DPCONFIG_MIG_MODE_DYNAMIC && gpus[i].mig_enabled && listed;
    }
}

static bool finished(json_t *pod)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

size_t dp_migdyn_claims(json_t *pods, struct dp_mig_claim *out)
{
    size_t n = 0;
    const char *uid;
    json_t *pod;
    json_object_foreach(pods, uid, pod)
    {
        if (finished(pod) || strlen(uid) >= ANNOT_MIG_POD_MAX)
            continue;
        const char *text = json_string_value(json_object_get(
            json_object_get(json_object_get(pod, "metadata"), "annotations"), ANNOT_KEY_DECISION));
        struct annot_decision d;
        struct vg_err err;
        if (!text || annot_decision_decode(text, strlen(text), &d, &err) < 0)
            continue;
        for (unsigned c = 0; c < d.container_count; c++)
            for (unsigned g = 0; g < d.containers[c].gpu_count && n < DP_MIG_MAX_CLAIMS; g++) {
                const struct annot_share *s = &d.containers[c].gpus[g];
                if (!s->mig_profile[0])
                    continue;
                struct dp_mig_claim *cl = &out[n++];
                vg_strlcpy(cl->uuid, s->uuid, sizeof cl->uuid);
                vg_strlcpy(cl->profile, s->mig_profile, sizeof cl->profile);
                cl->start = s->mig_start;
                vg_strlcpy(cl->pod, uid, sizeof cl->pod);
            }
    }
    return n;
}

static const struct nvml_mig_profile *profile_by_id(const struct dp_gpu *g, unsigned id)
{
    for (size_t i = 0; i < g->mig_profile_count; i++)
        if (g->mig_profiles[i].id == id)
            return &g->mig_profiles[i];
    return NULL;
}

/* The allowed profile named name. */
static const struct nvml_mig_profile *profile_by_name(const struct dp_gpu *g, const char *name)
{
    for (size_t i = 0; i < g->mig_profile_count; i++)
        if ((g->mig_allowed & (1u << i)) && strcmp(g->mig_profiles[i].name, name) == 0)
            return &g->mig_profiles[i];
    return NULL;
}

int dp_migdyn_allow(struct dp_gpu *g, const struct hami_mig *hami, struct vg_err *err)
{
    g->mig_allowed = (1u << g->mig_profile_count) - 1;
    if (!hami || !hami->key)
        return 0;
    const struct hami_mig_rule *r = hami_mig_rule_for(hami, g->model);
    if (!r)
        return vg_err_set(err, -EINVAL,
                          "GPU %u (%s): no entry of nvidia.%s names its model; add one, or "
                          "leave it out of vgpu.migDynamicGPUs",
                          g->index, g->model, hami->key);
    g->mig_allowed = 0;
    for (size_t k = 0; k < r->profile_count; k++) {
        size_t i = 0;
        while (i < g->mig_profile_count && strcmp(g->mig_profiles[i].name, r->profiles[k]) != 0)
            i++;
        if (i == g->mig_profile_count) {
            char have[256] = "";
            size_t used = 0;
            for (size_t j = 0; j < g->mig_profile_count; j++) {
                int n = vg_snprintf(have + used, sizeof have - used, "%s%s", j ? ", " : "",
                                    g->mig_profiles[j].name);
                if (n < 0)
                    break;
                used += (size_t)n;
            }
            return vg_err_set(err, -EINVAL,
                              "GPU %u (%s): nvidia.%s names profile '%s', which NVML does not "
                              "report for it (it has %s)",
                              g->index, g->model, hami->key, r->profiles[k], have);
        }
        g->mig_allowed |= 1u << i;
    }
    return 0;
}

/* The claim naming instance mi of g, or NULL. */
static const struct dp_mig_claim *owner(const struct dp_gpu *g, const struct nvml_mig_instance *mi,
                                        const struct dp_mig_claim *claims, size_t n)
{
    const struct nvml_mig_profile *p = profile_by_id(g, mi->profile_id);
    for (size_t i = 0; i < n; i++)
        if (strcmp(claims[i].uuid, g->uuid) == 0 && claims[i].start == mi->start && p &&
            strcmp(claims[i].profile, p->name) == 0)
            return &claims[i];
    return NULL;
}

void dp_migdyn_annot(const struct dp_gpu *g, const struct dp_mig_claim *claims, size_t n_claims,
                     struct annot_mig *out)
{
    memset(out, 0, sizeof *out);
    out->slices = (uint8_t)g->mig_slices;
    for (size_t i = 0; i < g->mig_profile_count && out->profile_count < ANNOT_MIG_PROFILES_MAX;
         i++) {
        const struct nvml_mig_profile *p = &g->mig_profiles[i];
        if (!(g->mig_allowed & (1u << i)) || !annot_mig_profile_name(p->name) || p->size == 0 ||
            p->size > g->mig_slices)
            continue;
        struct annot_mig_profile *a = &out->profiles[out->profile_count++];
        vg_strlcpy(a->name, p->name, sizeof a->name);
        a->id = (uint16_t)p->id;
        a->sms = (uint16_t)(p->sms ? p->sms : 1);
        a->memory_mib = (uint32_t)(p->memory_mib ? p->memory_mib : 1);
        a->size = (uint8_t)p->size;
        a->placements = (uint8_t)p->placements;
    }
    for (size_t i = 0; i < g->mig_instance_count && out->instance_count < ANNOT_MIG_INSTANCES_MAX;
         i++) {
        const struct nvml_mig_instance *mi = &g->mig_instances[i];
        const struct nvml_mig_profile *p = profile_by_id(g, mi->profile_id);
        struct annot_mig_instance *a = &out->instances[out->instance_count++];
        vg_strlcpy(a->profile, p ? p->name : "unknown", sizeof a->profile);
        a->start = (uint8_t)mi->start;
        a->size = (uint8_t)mi->size;
        const struct dp_mig_claim *c = owner(g, mi, claims, n_claims);
        vg_strlcpy(a->pod, c ? c->pod : "", sizeof a->pod);
    }
}

int dp_migdyn_check(const struct dp_gpu *g, const struct annot_share *share, const char *pod,
                    const struct dp_mig_claim *claims, size_t n_claims, int *existing,
                    const struct nvml_mig_profile **profile, struct vg_err *err)
{
    *existing = -1;
    if (!g->mig_dynamic)
        return vg_err_set(err, -EINVAL, "GPU %s is not served with dynamic MIG", g->uuid);
    const struct nvml_mig_profile *p = profile_by_name(g, share->mig_profile);
    if (!p)
        return vg_err_set(err, -EINVAL, "GPU %s offers no MIG profile '%s'", g->uuid,
                          share->mig_profile);
    unsigned start = share->mig_start;
    if (start >= 8 || !(p->placements & (1u << start)))
        return vg_err_set(err, -EINVAL, "profile %s cannot start at memory slice %u on GPU %s",
                          p->name, start, g->uuid);
    for (size_t i = 0; i < g->mig_instance_count; i++) {
        const struct nvml_mig_instance *mi = &g->mig_instances[i];
        if (mi->start + mi->size <= start || start + p->size <= mi->start)
            continue;
        const struct dp_mig_claim *c = owner(g, mi, claims, n_claims);
        if (c && strcmp(c->pod, pod) == 0 && mi->start == start && mi->profile_id == p->id &&
            mi->has_ci && *existing < 0) {
            *existing = (int)i; /* the pod's own, made by an earlier Allocate */
            continue;
        }
        return vg_err_set(err, -EINVAL,
                          "%s at memory slice %u on GPU %s overlaps the GPU instance at slice "
                          "%u, which %s%s",
                          p->name, start, g->uuid, mi->start, c ? "belongs to pod " : "no pod owns",
                          c ? c->pod : "");
    }
    *profile = p;
    return 0;
}

size_t dp_migdyn_unused(const struct dp_gpu *g, const struct dp_mig_claim *claims, size_t n_claims,
                        const bool *owned, size_t *out)
{
    size_t n = 0;
    for (size_t i = 0; i < g->mig_instance_count; i++) {
        const struct nvml_mig_instance *mi = &g->mig_instances[i];
        bool mine = owned == NULL || (mi->start < 8 && owned[mi->start]);
        if (!mi->has_ci || (mine && !owner(g, mi, claims, n_claims)))
            out[n++] = i;
    }
    return n;
}

void dp_migdyn_refused_add(struct annot_mig_refused *list, const char *uuid, const char *profile,
                           unsigned start, int64_t now, const char *reason)
{
    if (list->count == ANNOT_MIG_REFUSED_MAX) {
        memmove(&list->refused[0], &list->refused[1],
                sizeof list->refused[0] * (ANNOT_MIG_REFUSED_MAX - 1));
        list->count--;
    }
    struct annot_mig_refusal *r = &list->refused[list->count++];
    memset(r, 0, sizeof *r);
    vg_strlcpy(r->uuid, uuid, sizeof r->uuid);
    vg_strlcpy(r->profile, annot_mig_profile_name(profile) ? profile : "unknown",
               sizeof r->profile);
    r->start = (uint8_t)(start < 8 ? start : 7);
    r->time = now;
    vg_strlcpy(r->reason, reason, sizeof r->reason);
}
