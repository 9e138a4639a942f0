/* MIG and XID pieces of the device plugin (docs/deviceplugin.md "MIG" and "Health"):
 *
 *   profile names  formed from NVML's attributes as NVIDIA's plugin forms them, so the
 *                  resource names (nvidia.com/mig-1g.10gb) match a real node's;
 *   Allocate       of MIG devices: their MIG UUIDs are what the container sees (the
 *                  response is assembled by response.c);
 *   split          which GPUs vgpu mode may split (not MIG GPUs advertised as MIG);
 *   XID policy     which events and XIDs make a GPU unhealthy (the health section,
 *                  DP_DISABLE_HEALTHCHECKS). */
#include <errno.h>
#include <string.h>

#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

#define GIB (1024ULL * 1024 * 1024)
#define MIB (1024ULL * 1024)

void dp_mig_profile(unsigned gi_slices, unsigned ci_slices, uint64_t mig_memory_mib,
                    uint64_t gpu_memory_bytes, char *out, size_t size)
{
    uint64_t gpu_gib = (gpu_memory_bytes + GIB - 1) / GIB;
    uint64_t eighths = 0;
    if (gpu_memory_bytes > 0)
        eighths = (mig_memory_mib * MIB * 8 + gpu_memory_bytes - 1) / gpu_memory_bytes;
    uint64_t gb = (eighths * gpu_gib * 2 + 8) / 16; /* eighths/8 * GiB, rounded */
    if (ci_slices == gi_slices)
        (void)vg_snprintf(out, size, "%ug.%llugb", gi_slices, (unsigned long long)gb);
    else
        (void)vg_snprintf(out, size, "%uc.%ug.%llugb", ci_slices, gi_slices,
                          (unsigned long long)gb);
}

bool dp_gpu_split(const struct dpconfig *cfg, const struct dp_gpu *gpu)
{
    return gpu->mig_dynamic || !(gpu->mig_enabled && cfg->flags.mig_strategy != DPCONFIG_MIG_NONE);
}

/* ---- Allocate ------------------------------------------------------------------------ */

int dp_allocate_mig(const struct dpconfig *cfg, const struct dp_resource *resource,
                    const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                    size_t id_count, struct dp_response *out, struct vg_err *err)
{
    dp_response_reset(out);
    if (id_count == 0)
        return vg_err_set(err, -EINVAL, "%s: Allocate without devices", resource->name);
    char visible[1024] = "";
    size_t used = 0;
    const char *seen[DP_MAX_GPUS * DP_MAX_MIGS];
    size_t n = 0;
    for (size_t i = 0; i < id_count; i++) {
        const struct dp_device *found = NULL;
        for (size_t k = 0; k < resource->device_count && !found; k++)
            if (strcmp(resource->devices[k].id, ids[i]) == 0)
                found = &resource->devices[k];
        const struct dp_gpu *g = found && found->gpu < gpu_count ? &gpus[found->gpu] : NULL;
        const struct dp_mig *m = NULL;
        for (unsigned k = 0; g && k < g->mig_count && !m; k++)
            if (strcmp(g->migs[k].uuid, ids[i]) == 0)
                m = &g->migs[k];
        if (!m)
            return vg_err_set(err, -ENOENT, "%s: unknown device ID '%s'", resource->name, ids[i]);
        bool dup = false;
        for (size_t k = 0; k < n; k++)
            dup |= seen[k] == m->uuid;
        if (dup)
            continue;
        if (n == sizeof(seen) / sizeof(seen[0]))
            return vg_err_set(err, -E2BIG, "%s: too many devices", resource->name);
        seen[n++] = m->uuid;
        char id[ANNOT_UUID_MAX];
        if (cfg->flags.plugin.device_id_strategy == DPCONFIG_DEVICE_ID_INDEX)
            vg_snprintf(id, sizeof(id), "%u:%u", g->index, m->index);
        else
            vg_strlcpy(id, m->uuid, sizeof(id));
        int rc = dp_response_list_id(cfg, out, visible, sizeof(visible), &used, id, err);
        if (rc < 0)
            return rc;
        if (cfg->flags.plugin.pass_device_specs) {
            char path[64];
            if ((rc = dp_response_add_gpu_nodes(cfg, out, g->minor, err)) < 0)
                return rc;
            const int caps[] = {m->gi_cap, m->ci_cap};
            for (size_t c = 0; c < 2; c++) {
                if (caps[c] < 0)
                    continue;
                vg_snprintf(path, sizeof(path), "/dev/nvidia-caps/nvidia-cap%d", caps[c]);
                if ((rc = dp_response_add_device(cfg, out, path, err)) < 0)
                    return rc;
            }
        }
    }
    return dp_response_add_visible(cfg, visible, out, err);
}

/* ---- MIG capability minors ---------------------------------------------------------- */

int dp_mig_cap_minor(const char *table, unsigned gpu_minor, unsigned gi, int ci, unsigned *minor,
                     struct vg_err *err)
{
    char want[64];
    if (ci < 0)
        vg_snprintf(want, sizeof(want), "gpu%u/gi%u/access", gpu_minor, gi);
    else
        vg_snprintf(want, sizeof(want), "gpu%u/gi%u/ci%d/access", gpu_minor, gi, ci);
    bool found = false;
    unsigned lineno = 0;
    for (const char *p = table; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        lineno++;
        if (len > 0) {
            const char *sp = memchr(p, ' ', len);
            char number[16];
            size_t name_len = sp ? (size_t)(sp - p) : 0;
            size_t num_len = sp ? len - name_len - 1 : 0;
            uint64_t v;
            struct vg_err sub;
            if (!sp || name_len == 0 || num_len == 0 || num_len >= sizeof(number))
                return vg_err_set(err, -EINVAL, "%s: line %u is not '<name> <minor>'",
                                  DP_MIG_MINORS_PATH, lineno);
            memcpy(number, sp + 1, num_len);
            number[num_len] = '\0';
            if (vg_parse_u64(number, 0, 1u << 20, &v, &sub) < 0)
                return vg_err_set(err, -EINVAL, "%s: line %u: minor '%s': %s", DP_MIG_MINORS_PATH,
                                  lineno, number, sub.msg);
            if (!found && name_len == strlen(want) && memcmp(p, want, name_len) == 0) {
                *minor = (unsigned)v;
                found = true;
            }
        }
        if (!nl)
            break;
        p = nl + 1;
    }
    return found ? 0 : -ENOENT;
}

/* ---- XID policy ---------------------------------------------------------------------- */

/* Application errors (a program's fault, not the GPU's): NVIDIA's plugin ignores them. */
static const unsigned default_ignored[] = {13, 31, 43, 45, 68, 109};

int dp_xid_policy_parse(const char *value, struct dp_xid_policy *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    out->events =
        DPCONFIG_EVENT_XID_CRITICAL | DPCONFIG_EVENT_DOUBLE_BIT_ECC | DPCONFIG_EVENT_SINGLE_BIT_ECC;
    out->critical_all = true;
    for (size_t i = 0; i < sizeof(default_ignored) / sizeof(default_ignored[0]); i++)
        out->ignored[out->ignored_count++] = default_ignored[i];
    if (!value || !value[0])
        return 0;
    if (strcmp(value, "all") == 0 || strcmp(value, "xids") == 0) {
        out->disabled = true;
        return 0;
    }
    const char *p = value;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        char entry[16];
        uint64_t xid;
        struct vg_err sub;
        if (len == 0 || len >= sizeof(entry))
            return vg_err_set(err, -EINVAL,
                              "DP_DISABLE_HEALTHCHECKS: '%.*s' is not an XID (want all, xids, or "
                              "XIDs like 48,79)",
                              (int)(len > 32 ? 32 : len), p);
        memcpy(entry, p, len);
        entry[len] = '\0';
        if (vg_parse_u64(entry, 1, 65535, &xid, &sub) < 0)
            return vg_err_set(err, -EINVAL, "DP_DISABLE_HEALTHCHECKS: XID '%s': %s", entry,
                              sub.msg);
        if (out->ignored_count == DP_XID_MAX_IGNORED)
            return vg_err_set(err, -EINVAL, "DP_DISABLE_HEALTHCHECKS: more than %d XIDs",
                              DP_XID_MAX_IGNORED - 6);
        out->ignored[out->ignored_count++] = xid;
        if (!comma)
            break;
        p = comma + 1;
    }
    return 0;
}

int dp_xid_policy_from_config(const struct dpconfig *cfg, const char *env_value,
                              struct dp_xid_policy *out, struct vg_err *err)
{
    struct dp_xid_policy env;
    int rc = dp_xid_policy_parse(env_value, &env, err);
    if (rc < 0)
        return rc;
    const size_t defaults = sizeof(default_ignored) / sizeof(default_ignored[0]);
    const struct dpconfig_uint_list *ig = &cfg->health.ignored_xids;
    const struct dpconfig_xids *cr = &cfg->health.critical_xids;
    if (ig->count + (env.ignored_count - defaults) > DP_XID_MAX_IGNORED)
        return vg_err_set(err, -EINVAL,
                          "health.ignoredXIDs and DP_DISABLE_HEALTHCHECKS: more than %d XIDs",
                          DP_XID_MAX_IGNORED);
    if (!cr->all && cr->list.count > DP_XID_MAX_IGNORED)
        return vg_err_set(err, -EINVAL, "health.criticalXIDs: more than %d XIDs",
                          DP_XID_MAX_IGNORED);
    memset(out, 0, sizeof(*out));
    out->off = cfg->health.disabled;
    out->disabled = env.disabled;
    out->events = cfg->health.event_types;
    for (size_t i = 0; i < ig->count; i++)
        out->ignored[out->ignored_count++] = ig->items[i];
    for (size_t i = defaults; i < env.ignored_count; i++)
        out->ignored[out->ignored_count++] = env.ignored[i];
    out->critical_all = cr->all;
    for (size_t i = 0; !cr->all && i < cr->list.count; i++)
        out->critical[out->critical_count++] = cr->list.items[i];
    return 0;
}

bool dp_xid_critical(const struct dp_xid_policy *policy, unsigned long long xid)
{
    if (policy->off || policy->disabled || !(policy->events & DPCONFIG_EVENT_XID_CRITICAL))
        return false;
    for (size_t i = 0; i < policy->ignored_count; i++)
        if (policy->ignored[i] == xid)
            return false;
    if (policy->critical_all)
        return true;
    for (size_t i = 0; i < policy->critical_count; i++)
        if (policy->critical[i] == xid)
            return true;
    return false;
}
