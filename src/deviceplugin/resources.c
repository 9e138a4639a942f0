/* What the plugin advertises to kubelet, per mode (docs/deviceplugin.md):
 *
 *   vgpu         nvidia.com/gpu, deviceSplitCount devices per GPU, IDs `<UUID>-<i>` as
 *                HAMi names them; the scheduler's decision, not the ID, picks the GPU;
 *   timeSlicing  NVIDIA's replicas: each GPU a sharing.timeSlicing resource selects is
 *                advertised `replicas` times as `<UUID>::<n>` under its name (or rename,
 *                `<name>.shared` with renameByDefault); GPUs no entry selects stay plain
 *                nvidia.com/gpu;
 *   mps          the same replicas from sharing.mps, each GPU served by its own MPS
 *                control daemon (mps.c);
 *   MIG          (flags.migStrategy single/mixed, MIG-enabled GPUs) the MIG devices, once
 *                each, IDs their MIG UUIDs: all under nvidia.com/gpu (single, NVIDIA's
 *                rules: every GPU MIG-enabled, every MIG device the same profile) or
 *                under nvidia.com/mig-<profile> (mixed); the GPU itself is not advertised.
 *
 * Kept pure (config + GPU table in, lists out) so tests can check every case directly. */
#include <errno.h>
#include <string.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

int dp_physical_uuid(const char *id, char *uuid, struct vg_err *err)
{
    const char *sep = strstr(id, "::");
    size_t len;
    if (sep) {
        len = (size_t)(sep - id);
    } else {
        const char *dash = strrchr(id, '-');
        /* `GPU-<uuid>-<i>`: a UUID has 4 dashes after "GPU", so a suffix makes 6. */
        size_t dashes = 0;
        for (const char *p = id; *p; p++)
            dashes += *p == '-';
        len = (dash && dashes == 6) ? (size_t)(dash - id) : strlen(id);
    }
    if (len == 0 || len >= ANNOT_UUID_MAX)
        return vg_err_set(err, -EINVAL, "device ID '%s' names no GPU", id);
    memcpy(uuid, id, len);
    uuid[len] = '\0';
    return 0;
}

static struct dp_resource *resource_get(struct dp_resources *res, const char *name,
                                        struct vg_err *err)
{
    for (size_t i = 0; i < res->count; i++)
        if (strcmp(res->items[i].name, name) == 0)
            return &res->items[i];
    if (res->count == DP_MAX_RESOURCES) {
        vg_err_set(err, -E2BIG, "more than %d resources", DP_MAX_RESOURCES);
        return NULL;
    }
    struct dp_resource *r = &res->items[res->count];
    memset(r, 0, sizeof(*r));
    if (vg_strlcpy(r->name, name, sizeof(r->name)) < 0) {
        vg_err_set(err, -ENAMETOOLONG, "resource name '%s' is too long", name);
        return NULL;
    }
    const char *short_name = name;
    if (strncmp(name, DPCONFIG_RESOURCE_PREFIX, strlen(DPCONFIG_RESOURCE_PREFIX)) == 0)
        short_name = name + strlen(DPCONFIG_RESOURCE_PREFIX);
    if (vg_snprintf(r->endpoint, sizeof(r->endpoint), "nvidia-%s.sock", short_name) < 0) {
        vg_err_set(err, -ENAMETOOLONG, "resource name '%s' is too long", name);
        return NULL;
    }
    for (char *p = r->endpoint; *p; p++)
        if (*p == '/')
            *p = '-';
    r->replicas = 1;
    res->count++;
    return r;
}

static int resource_add(struct dp_resource *r, const char *id, unsigned gpu, struct vg_err *err)
{
    return dp_resource_add(r, id, gpu, DP_MAX_IDS, err);
}

int dp_resource_add(struct dp_resource *r, const char *id, unsigned gpu, size_t max,
                    struct vg_err *err)
{
    if (r->device_count >= max)
        return vg_err_set(err, -E2BIG, "resource %s: more than %zu devices", r->name, max);
    if (strlen(id) >= DP_ID_MAX)
        return vg_err_set(err, -ENAMETOOLONG, "device ID '%s' is longer than %d characters", id,
                          DP_ID_MAX - 1);
    int rc = vg_array_grow(&r->devices, &r->device_cap, r->device_count + 1, sizeof(*r->devices),
                           max, "device IDs", err);
    if (rc < 0)
        return rc;
    struct dp_device *d = &r->devices[r->device_count++];
    vg_strlcpy(d->id, id, sizeof(d->id));
    d->gpu = gpu;
    return 0;
}

/* Does a timeSlicing entry select GPU g (position i among gpu_count)? */
static int entry_selects(const struct dpconfig_replicated_resource *item, const struct dp_gpu *g,
                         unsigned i, bool *selected, struct vg_err *err)
{
    *selected = false;
    switch (item->devices.kind) {
    case DPCONFIG_DEVICES_ALL:
        *selected = true;
        return 0;
    case DPCONFIG_DEVICES_COUNT:
        *selected = i < item->devices.count;
        return 0;
    case DPCONFIG_DEVICES_LIST:
        for (size_t k = 0; k < item->devices.list_count; k++) {
            const char *want = item->devices.list[k];
            if (strchr(want, ':') || strncmp(want, "MIG-", 4) == 0)
                return vg_err_set(err, -ENOTSUP,
                                  "resource %s: MIG device '%s' in sharing.timeSlicing is not "
                                  "supported yet",
                                  item->name, want);
            uint64_t index;
            struct vg_err ignored;
            if (vg_parse_u64(want, 0, 1023, &index, &ignored) == 0) {
                if (index == g->index)
                    *selected = true;
            } else if (strcmp(want, g->uuid) == 0) {
                *selected = true;
            }
        }
        return 0;
    }
    return 0;
}

/* timeSlicing and mps advertise the same replicas; mps marks its resources and refuses
 * MIG-enabled GPUs (MPS on MIG devices is not supported, as in NVIDIA's plugin). */
static int build_replicated(const struct dpconfig *cfg, bool mps, const struct dp_gpu *gpus,
                            unsigned gpu_count, struct dp_resources *out, struct vg_err *err)
{
    const struct dpconfig_replicated *ts = mps ? &cfg->sharing.mps : &cfg->sharing.time_slicing;
    for (unsigned i = 0; i < gpu_count; i++) {
        if (!dp_gpu_split(cfg, &gpus[i]))
            continue; /* advertised as MIG devices */
        const struct dpconfig_replicated_resource *entry = NULL;
        for (size_t k = 0; k < ts->resources.count && !entry; k++) {
            bool selected;
            int rc = entry_selects(&ts->resources.items[k], &gpus[i], i, &selected, err);
            if (rc < 0)
                return rc;
            if (selected)
                entry = &ts->resources.items[k];
        }
        char id[DP_ID_MAX * 2];
        if (!entry) {
            struct dp_resource *r = resource_get(out, DPCONFIG_RESOURCE_PREFIX "gpu", err);
            if (!r)
                return err->code;
            int rc = resource_add(r, gpus[i].uuid, i, err);
            if (rc < 0)
                return rc;
            continue;
        }
        const char *name = entry->rename ? entry->rename : entry->name;
        if (mps && gpus[i].mig_enabled)
            return vg_err_set(err, -ENOTSUP,
                              "resource %s: GPU %u (%s) has MIG enabled: MPS sharing is not "
                              "supported on MIG devices",
                              name, gpus[i].index, gpus[i].uuid);
        if (entry->replicas > 1024)
            return vg_err_set(err, -ERANGE, "resource %s: %llu replicas is more than 1024", name,
                              (unsigned long long)entry->replicas);
        struct dp_resource *r = resource_get(out, name, err);
        if (!r)
            return err->code;
        r->replicas = (unsigned)entry->replicas;
        r->fail_requests_greater_than_one = ts->fail_requests_greater_than_one;
        r->mps = mps;
        for (uint64_t n = 0; n < entry->replicas; n++) {
            if (vg_snprintf(id, sizeof(id), "%s::%llu", gpus[i].uuid, (unsigned long long)n) < 0)
                return vg_err_set(err, -ENAMETOOLONG, "device ID too long");
            int rc = resource_add(r, id, i, err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* migStrategy single: NVIDIA's checks, with its messages where it has one. */
static int check_single(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                        struct vg_err *err)
{
    const char *profile = NULL;
    for (unsigned i = 0; i < gpu_count; i++) {
        const struct dp_gpu *g = &gpus[i];
        if (!g->mig_enabled)
            return vg_err_set(err, -EINVAL,
                              "flags.migStrategy single: all devices on the node must be "
                              "configured with the same migEnabled value (GPU %u %s has MIG "
                              "disabled)",
                              g->index, g->uuid);
        if (g->mig_count == 0)
            return vg_err_set(err, -EINVAL,
                              "flags.migStrategy single: GPU %u (%s) has MIG enabled but no MIG "
                              "devices",
                              g->index, g->uuid);
        for (unsigned k = 0; k < g->mig_count; k++) {
            if (!profile)
                profile = g->migs[k].profile;
            else if (strcmp(profile, g->migs[k].profile) != 0)
                return vg_err_set(err, -EINVAL,
                                  "flags.migStrategy single: more than one MIG device type "
                                  "present on node (%s and %s on GPU %u); use migStrategy mixed",
                                  profile, g->migs[k].profile, g->index);
        }
    }
    if (cfg->sharing_strategy == DPCONFIG_SHARING_NONE)
        return vg_err_set(err, -ENOTSUP,
                          "flags.migStrategy single: in vgpu mode nvidia.com/gpu is vgpu's split "
                          "resource; use migStrategy mixed (nvidia.com/mig-<profile>) or a "
                          "sharing.timeSlicing section");
    return 0;
}

static int build_mig(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                     struct dp_resources *out, struct vg_err *err)
{
    for (unsigned i = 0; i < gpu_count; i++) {
        if (dp_gpu_split(cfg, &gpus[i]))
            continue;
        for (unsigned k = 0; k < gpus[i].mig_count; k++) {
            char name[DPCONFIG_RESOURCE_NAME_MAX + 8];
            if (cfg->flags.mig_strategy == DPCONFIG_MIG_SINGLE)
                vg_strlcpy(name, DPCONFIG_RESOURCE_PREFIX "gpu", sizeof(name));
            else if (vg_snprintf(name, sizeof(name), DPCONFIG_RESOURCE_PREFIX "mig-%s",
                                 gpus[i].migs[k].profile) < 0)
                return vg_err_set(err, -ENAMETOOLONG, "MIG profile '%s' too long",
                                  gpus[i].migs[k].profile);
            struct dp_resource *r = resource_get(out, name, err);
            if (!r)
                return err->code;
            r->mig = true;
            int rc = resource_add(r, gpus[i].migs[k].uuid, i, err);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* vgpu mode: deviceSplitCount devices per GPU under nvidia.com/gpu. */
static int build_vgpu(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                      struct dp_resources *out, struct vg_err *err)
{
    struct dp_resource *r = resource_get(out, DPCONFIG_RESOURCE_PREFIX "gpu", err);
    if (!r)
        return err->code;
    r->replicas = (unsigned)cfg->vgpu.device_split_count;
    char id[DP_ID_MAX * 2];
    for (unsigned i = 0; i < gpu_count; i++)
        for (unsigned n = 0; n < r->replicas && dp_gpu_split(cfg, &gpus[i]); n++) {
            if (vg_snprintf(id, sizeof(id), "%s-%u", gpus[i].uuid, n) < 0)
                return vg_err_set(err, -ENAMETOOLONG, "device ID too long");
            int rc = resource_add(r, id, i, err);
            if (rc < 0)
                return rc;
        }
    return 0;
}

int dp_resources_build(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                       struct dp_resources *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    bool any_mig = false;
    for (unsigned i = 0; i < gpu_count; i++)
        any_mig |= gpus[i].mig_enabled;
    /* NVIDIA's validation refuses MPS on MIG devices (mps with mixed already fails in
     * dpconfig); single on a node without MIG-enabled GPUs is none. */
    if (any_mig && cfg->flags.mig_strategy != DPCONFIG_MIG_NONE &&
        cfg->sharing_strategy == DPCONFIG_SHARING_MPS)
        return vg_err_set(err, -ENOTSUP,
                          "sharing.mps: MPS on MIG devices is not supported; use "
                          "flags.migStrategy none or disable MIG");
    if (any_mig && cfg->flags.mig_strategy == DPCONFIG_MIG_SINGLE) {
        int rc = check_single(cfg, gpus, gpu_count, err);
        if (rc < 0)
            return rc;
    }
    int rc = 0;
    switch (cfg->sharing_strategy) {
    case DPCONFIG_SHARING_MPS:
        out->mode = ANNOT_MODE_MPS;
        rc = build_replicated(cfg, true, gpus, gpu_count, out, err);
        break;
    case DPCONFIG_SHARING_TIME_SLICING:
        out->mode = ANNOT_MODE_TIME_SLICING;
        rc = build_replicated(cfg, false, gpus, gpu_count, out, err);
        break;
    case DPCONFIG_SHARING_NONE:
        out->mode = ANNOT_MODE_VGPU;
        rc = build_vgpu(cfg, gpus, gpu_count, out, err);
        break;
    }
    if (rc == 0 && any_mig)
        rc = build_mig(cfg, gpus, gpu_count, out, err);
    if (rc < 0)
        dp_resources_release(out);
    return rc;
}

void dp_resources_release(struct dp_resources *res)
{
    for (size_t i = 0; i < res->count; i++) {
        free(res->items[i].devices);
        res->items[i].devices = NULL;
        res->items[i].device_count = 0;
        res->items[i].device_cap = 0;
    }
    res->count = 0;
}

/* The GPU table index of device id in r, or -1. */
static int gpu_of(const struct dp_resource *r, const char *id)
{
    for (size_t d = 0; d < r->device_count; d++)
        if (strcmp(r->devices[d].id, id) == 0)
            return (int)r->devices[d].gpu;
    return -1;
}

size_t dp_prefer_replicas(const struct dp_resource *r, enum dpconfig_allocation_policy policy,
                          char *const *available, size_t n_available, bool *taken, size_t want,
                          size_t *picked)
{
    /* used[g]: replicas of GPU g already allocated (advertised, not available). */
    size_t used[DP_MAX_GPUS] = {0}, free_left[DP_MAX_GPUS] = {0};
    for (size_t d = 0; d < r->device_count; d++)
        if (r->devices[d].gpu < DP_MAX_GPUS)
            used[r->devices[d].gpu]++;
    for (size_t k = 0; k < n_available; k++) {
        int g = gpu_of(r, available[k]);
        if (g < 0)
            continue;
        if (used[g] > 0)
            used[g]--;
        if (!taken[k])
            free_left[g]++;
    }
    size_t n = 0;
    while (n < want) {
        int best = -1;
        for (unsigned g = 0; g < DP_MAX_GPUS; g++) {
            if (free_left[g] == 0)
                continue;
            if (best < 0 ||
                (policy == DPCONFIG_ALLOC_PACKED ? used[g] > used[best] : used[g] < used[best]))
                best = (int)g;
        }
        if (best < 0)
            break;
        for (size_t k = 0; k < n_available; k++)
            if (!taken[k] && gpu_of(r, available[k]) == best) {
                taken[k] = true;
                picked[n++] = k;
                break;
            }
        used[best]++;
        free_left[best]--;
    }
    return n;
}
