/* MIG on demand for vgpu's DRA driver (mig.h). */
#include "dra/mig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/auto_json.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/mem.h"
#include "annot/annot.h"
#include "base/str.h"
#include "nvml/loader.h"
#include "nvml/mig.h"

/* ---- names ------------------------------------------------------------------------------ */

void dra_partition_name(const struct dp_gpu *gpu, const struct dra_partition *p, char *name)
{
    vg_snprintf(name, 64, "gpu-%u-mig-p%u-s%u", gpu->minor, p->profile_id, p->start);
}

const struct dra_partition *dra_partition_find(const struct dp_gpu *gpus,
                                               const struct dra_mig_gpu *migs, unsigned count,
                                               const char *device, unsigned *gpu_index)
{
    unsigned minor, id, start;
    int end = 0;
    if (migs == NULL || sscanf(device, "gpu-%u-mig-p%u-s%u%n", &minor, &id, &start, &end) != 3 ||
        device[end] != '\0')
        return NULL;
    for (unsigned g = 0; g < count; g++) {
        if (gpus[g].minor != minor || !migs[g].dynamic)
            continue;
        for (unsigned k = 0; k < migs[g].count; k++) {
            char name[64];
            dra_partition_name(&gpus[g], &migs[g].parts[k], name);
            if (strcmp(name, device) == 0) { /* also refuses "s01" and the like */
                *gpu_index = g;
                return &migs[g].parts[k];
            }
        }
    }
    return NULL;
}

/* ---- the record -------------------------------------------------------------------------- */

char *dra_instances_encode(const struct dra_instances *in)
{
    json_t *items = json_array();
    for (unsigned i = 0; i < in->count; i++) {
        const struct dra_instance *t = &in->items[i];
        json_array_append_new(items, json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:s}",
                                               "claim", t->claim, "device", t->device, "gpu",
                                               t->gpu_uuid, "profileId", (json_int_t)t->profile_id,
                                               "start", (json_int_t)t->start, "size",
                                               (json_int_t)t->size, "gi", (json_int_t)t->gi, "ci",
                                               (json_int_t)t->ci, "uuid", t->uuid));
    }
    VG_AUTO_JSON json_t *doc = json_pack("{s:i, s:o}", "version", 1, "instances", items);
    return json_dumps(doc, JSON_COMPACT);
}

static int str_field(const json_t *o, const char *key, char *out, size_t size, unsigned i,
                     struct vg_err *err)
{
    const char *v = json_string_value(json_object_get(o, key));
    if (v == NULL || strlen(v) >= size)
        return vg_err_set(err, -EINVAL, "MIG instances: item %u: %s missing or too long", i, key);
    vg_strlcpy(out, v, size);
    return 0;
}

static int int_field(const json_t *o, const char *key, long long min, long long max, long long *out,
                     unsigned i, struct vg_err *err)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return vg_err_set(err, -EINVAL, "MIG instances: item %u: %s not an integer in %lld..%lld",
                          i, key, min, max);
    *out = json_integer_value(v);
    return 0;
}

int dra_instances_decode(const char *text, size_t len, struct dra_instances *out,
                         struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    VG_AUTO_JSON json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (doc == NULL)
        return vg_err_set(err, -EINVAL, "MIG instances: not JSON: %s", jerr.text);
    const json_t *items = json_object_get(doc, "instances");
    if (json_integer_value(json_object_get(doc, "version")) != 1 || !json_is_array(items))
        return vg_err_set(err, -EINVAL, "MIG instances: not version 1 with an instances array");
    if (json_array_size(items) > DRA_MIG_MAX_INSTANCES)
        return vg_err_set(err, -E2BIG, "MIG instances: more than %d", DRA_MIG_MAX_INSTANCES);
    for (unsigned i = 0; i < json_array_size(items); i++) {
        const json_t *o = json_array_get(items, i);
        struct dra_instance *t = &out->items[i];
        long long id, start, size, gi, ci;
        if (str_field(o, "claim", t->claim, sizeof t->claim, i, err) < 0 ||
            str_field(o, "device", t->device, sizeof t->device, i, err) < 0 ||
            str_field(o, "gpu", t->gpu_uuid, sizeof t->gpu_uuid, i, err) < 0 ||
            str_field(o, "uuid", t->uuid, sizeof t->uuid, i, err) < 0 ||
            int_field(o, "profileId", 0, 255, &id, i, err) < 0 ||
            int_field(o, "start", 0, DRA_MIG_MAX_SLICES - 1, &start, i, err) < 0 ||
            int_field(o, "size", 1, DRA_MIG_MAX_SLICES, &size, i, err) < 0 ||
            int_field(o, "gi", -1, 1 << 16, &gi, i, err) < 0 ||
            int_field(o, "ci", -1, 1 << 16, &ci, i, err) < 0)
            return err->code;
        if (!annot_pod_uid(t->claim) || !annot_dns_label(t->device) ||
            strncmp(t->gpu_uuid, "GPU-", 4) != 0 ||
            (t->uuid[0] != '\0' && strncmp(t->uuid, "MIG-", 4) != 0))
            return vg_err_set(err, -EINVAL,
                              "MIG instances: item %u: claim, device, gpu or uuid malformed", i);
        if (start + size > DRA_MIG_MAX_SLICES || (ci >= 0 && gi < 0))
            return vg_err_set(err, -EINVAL, "MIG instances: item %u: placement or ids inconsistent",
                              i);
        t->profile_id = (unsigned)id;
        t->start = (unsigned)start;
        t->size = (unsigned)size;
        t->gi = (int)gi;
        t->ci = (int)ci;
        out->count++;
    }
    return 0;
}

int dra_instances_load(const char *path, struct dra_instances *out, struct vg_err *err)
{
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    int rc = vg_read_file(path, 1u << 20, &text, &len, err);
    if (rc == -ENOENT) {
        vg_err_clear(err);
        return 0;
    }
    if (rc < 0)
        return rc;
    rc = dra_instances_decode(text, len, out, err);
    free(text);
    if (rc < 0)
        return vg_err_wrap(err, "%s", path);
    return 0;
}

int dra_instances_save(const char *path, const struct dra_instances *in, struct vg_err *err)
{
    char *text = dra_instances_encode(in);
    /* Atomic, not synced: a killed plugin's writes are in the page cache for its next
     * start, and a power loss takes every MIG instance with it (they do not outlive the
     * driver), so there is nothing a synced record would find. Swapped, not renamed: no
     * inode freed per write (base/fs.h). */
    int rc = vg_write_file_atomic(path, text, strlen(text), 0644, VG_WRITE_SWAP, err);
    free(text);
    return rc;
}

/* ---- NVML --------------------------------------------------------------------------------- */

struct dra_mig {
    struct nvml_lib lib;
};

int dra_mig_open(const char *library, struct dra_mig **out, struct vg_err *err)
{
    struct dra_mig *m = xcalloc(1, sizeof *m);
    static const char *const required[] = {"nvmlDeviceGetHandleByUUID", NULL};
    if (nvml_lib_open(&m->lib, library, required, err) < 0) {
        free(m);
        return err->code;
    }
    if (!nvml_mig_supported(&m->lib) || !m->lib.mig_max || !m->lib.mig_by_index || !m->lib.gi_id ||
        !m->lib.ci_id || !m->lib.get_uuid) {
        nvml_lib_close(&m->lib);
        free(m);
        return vg_err_set(err, -ENOTSUP,
                          "NVML: the library has no dynamic MIG calls (driver too old for "
                          "--mig-mode=dynamic)");
    }
    *out = m;
    return 0;
}

void dra_mig_close(struct dra_mig *m)
{
    if (m == NULL)
        return;
    nvml_lib_close(&m->lib);
    free(m);
}

static int device(struct dra_mig *m, const char *uuid, nvmlDevice_t *dev, struct vg_err *err)
{
    nvmlReturn_t rc = m->lib.by_uuid(uuid, dev);
    if (rc == NVML_SUCCESS)
        return 0;
    return vg_err_set(err, rc == NVML_ERROR_NOT_FOUND ? -ENOENT : -EIO,
                      "NVML: nvmlDeviceGetHandleByUUID: %s", nvml_lib_error(&m->lib, rc));
}

int dra_mig_discover(struct dra_mig *m, const struct dp_gpu *gpu, struct dra_mig_gpu *out,
                     struct vg_err *err)
{
    /* The profiles by size (each media-extension variant after its plain one), so that a
     * ResourceSlice lists the small partitions first. */
    static const unsigned enums[] = {0x0, 0x7, 0x9, 0x1, 0x8, 0x2, 0x3, 0x6, 0x4, 0x5};
    memset(out, 0, sizeof *out);
    nvmlDevice_t dev;
    struct nvml_mig_profile profiles[NVML_MIG_MAX_PROFILES];
    size_t n = 0;
    unsigned slices = 0;
    if (device(m, gpu->uuid, &dev, err) < 0 ||
        nvml_mig_profiles(&m->lib, dev, profiles, &n, &slices, err) < 0)
        return err->code;
    for (size_t e = 0; e < sizeof enums / sizeof enums[0]; e++)
        for (size_t i = 0; i < n; i++) {
            const struct nvml_mig_profile *pr = &profiles[i];
            if (pr->profile_enum != enums[e])
                continue;
            for (unsigned start = 0; start < DRA_MIG_MAX_SLICES; start++) {
                if (!(pr->placements & (1u << start)))
                    continue;
                if (out->count == DRA_MIG_MAX_PARTS)
                    return vg_err_set(err, -E2BIG, "GPU %s: more than %d partitions", gpu->uuid,
                                      DRA_MIG_MAX_PARTS);
                struct dra_partition *p = &out->parts[out->count++];
                p->profile_id = pr->id;
                p->start = start;
                p->size = pr->size;
                p->compute_slices = pr->slices;
                p->sms = pr->sms;
                p->memory_mib = pr->memory_mib;
                dp_mig_profile(pr->slices, pr->slices, pr->memory_mib, gpu->memory_mib << 20,
                               p->profile, sizeof p->profile);
                if (strstr(pr->name, "+me") != NULL) /* a media-extension variant */
                    vg_snprintf(p->profile + strlen(p->profile),
                                sizeof p->profile - strlen(p->profile), "+me");
                if (p->start + p->size > out->memory_slices)
                    out->memory_slices = p->start + p->size;
                if (p->sms > out->sms)
                    out->sms = p->sms;
                if (p->memory_mib > out->memory_mib)
                    out->memory_mib = p->memory_mib;
            }
        }
    if (out->count == 0)
        return vg_err_set(err, -ENOTSUP, "GPU %s: NVML offers no GPU instance profile", gpu->uuid);
    out->dynamic = true;
    return 0;
}

int dra_mig_create_gi(struct dra_mig *m, struct dra_instance *inst, struct vg_err *err)
{
    nvmlDevice_t dev;
    if (device(m, inst->gpu_uuid, &dev, err) < 0)
        return err->code;
    const struct nvml_mig_profile p = {.id = inst->profile_id, .size = inst->size};
    unsigned gi;
    int rc = nvml_mig_create_gi(&m->lib, dev, &p, inst->start, &gi, err);
    if (rc == -ENOSPC) /* the placement is taken: kubelet may try again */
        return err->code = -EBUSY;
    if (rc < 0)
        return rc;
    inst->gi = (int)gi;
    return 0;
}

int dra_mig_create_ci(struct dra_mig *m, struct dra_instance *inst, unsigned compute_slices,
                      unsigned gpu_minor, uint64_t gpu_memory_mib, struct dp_mig *mig,
                      struct vg_err *err)
{
    nvmlDevice_t dev;
    struct nvml_mig_instance mi;
    if (device(m, inst->gpu_uuid, &dev, err) < 0 ||
        nvml_mig_create_ci(&m->lib, dev, (unsigned)inst->gi, compute_slices, &mi, err) < 0)
        return err->code;
    inst->ci = (int)mi.ci;
    if (!mi.has_ci || mi.uuid[0] == '\0')
        return vg_err_set(err, -ENOENT, "NVML: no MIG device for GPU instance %d", inst->gi);
    vg_strlcpy(inst->uuid, mi.uuid, sizeof inst->uuid);
    memset(mig, 0, sizeof *mig);
    vg_strlcpy(mig->uuid, inst->uuid, sizeof mig->uuid);
    mig->index = mi.mig_index;
    mig->gi = (unsigned)inst->gi;
    mig->ci = mi.ci;
    mig->memory_mib = mi.memory_mib;
    dp_mig_profile(compute_slices, compute_slices, mig->memory_mib, gpu_memory_mib << 20,
                   mig->profile, sizeof mig->profile);
    unsigned minor;
    char *table = NULL;
    const char *path =
        getenv("VGPU_DP_MIG_MINORS") ? getenv("VGPU_DP_MIG_MINORS") : DP_MIG_MINORS_PATH;
    mig->gi_cap = mig->ci_cap = -1;
    if (vg_read_file(path, DP_MIG_MINORS_MAX_BYTES, &table, NULL, NULL) == 0) {
        if (dp_mig_cap_minor(table, gpu_minor, mig->gi, -1, &minor, NULL) == 0)
            mig->gi_cap = (int)minor;
        if (dp_mig_cap_minor(table, gpu_minor, mig->gi, (int)mig->ci, &minor, NULL) == 0)
            mig->ci_cap = (int)minor;
        free(table);
    }
    return 0;
}

int dra_mig_destroy(struct dra_mig *m, const struct dra_instance *inst, struct vg_err *err)
{
    nvmlDevice_t dev;
    if (device(m, inst->gpu_uuid, &dev, err) < 0)
        return err->code;
    unsigned gi, profile_id, start;
    int rc;
    if (inst->gi >= 0) {
        gi = (unsigned)inst->gi;
        rc = nvml_mig_placement(&m->lib, dev, gi, &profile_id, &start, err);
        if (rc == 0 && (profile_id != inst->profile_id || start != inst->start))
            rc = -ENOENT; /* that id is another instance now: ours is gone */
    } else {              /* a plugin killed before it recorded the id */
        rc = nvml_mig_find(&m->lib, dev, inst->profile_id, inst->start, &gi, err);
    }
    if (rc == -ENOENT) {
        vg_err_clear(err);
        return 0; /* gone already */
    }
    if (rc < 0)
        return rc;
    return nvml_mig_destroy(&m->lib, dev, gi, err);
}
