/* MIG on demand for vgpu's DRA driver (mig.h). */
#include "dra/mig.h"

#include <dlfcn.h>
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
    __typeof__(&nvmlDeviceGetGpuInstanceProfileInfo) profile_info;
    __typeof__(&nvmlDeviceGetGpuInstancePossiblePlacements_v2) placements;
    __typeof__(&nvmlDeviceCreateGpuInstanceWithPlacement) create_gi;
    __typeof__(&nvmlDeviceGetGpuInstanceById) gi_by_id;
    __typeof__(&nvmlDeviceGetGpuInstances) gis;
    __typeof__(&nvmlGpuInstanceGetInfo) gi_info;
    __typeof__(&nvmlGpuInstanceDestroy) destroy_gi;
    __typeof__(&nvmlGpuInstanceGetComputeInstanceProfileInfo) ci_profile;
    __typeof__(&nvmlGpuInstanceCreateComputeInstance) create_ci;
    __typeof__(&nvmlGpuInstanceGetComputeInstances) cis;
    __typeof__(&nvmlComputeInstanceGetInfo_v2) ci_info;
    __typeof__(&nvmlComputeInstanceDestroy) destroy_ci;
};

#define SYM(m, field, name)                                                                        \
    ((m)->field = (__typeof__((m)->field))dlsym((m)->lib.handle, name)) != NULL

int dra_mig_open(const char *library, struct dra_mig **out, struct vg_err *err)
{
    struct dra_mig *m = xcalloc(1, sizeof *m);
    static const char *const required[] = {"nvmlDeviceGetHandleByUUID", NULL};
    if (nvml_lib_open(&m->lib, library, required, err) < 0) {
        free(m);
        return err->code;
    }
    if (!(SYM(m, profile_info, "nvmlDeviceGetGpuInstanceProfileInfo") &&
          SYM(m, placements, "nvmlDeviceGetGpuInstancePossiblePlacements_v2") &&
          SYM(m, create_gi, "nvmlDeviceCreateGpuInstanceWithPlacement") &&
          SYM(m, gi_by_id, "nvmlDeviceGetGpuInstanceById") &&
          SYM(m, gis, "nvmlDeviceGetGpuInstances") && SYM(m, gi_info, "nvmlGpuInstanceGetInfo") &&
          SYM(m, destroy_gi, "nvmlGpuInstanceDestroy") &&
          SYM(m, ci_profile, "nvmlGpuInstanceGetComputeInstanceProfileInfo") &&
          SYM(m, create_ci, "nvmlGpuInstanceCreateComputeInstance") &&
          SYM(m, cis, "nvmlGpuInstanceGetComputeInstances") &&
          SYM(m, ci_info, "nvmlComputeInstanceGetInfo_v2") &&
          SYM(m, destroy_ci, "nvmlComputeInstanceDestroy")) ||
        !m->lib.mig_max || !m->lib.mig_by_index || !m->lib.gi_id || !m->lib.get_uuid) {
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

static int nvml_failed(struct dra_mig *m, nvmlReturn_t rc, const char *what, struct vg_err *err)
{
    int code = rc == NVML_ERROR_INSUFFICIENT_RESOURCES || rc == NVML_ERROR_IN_USE ? -EBUSY
               : rc == NVML_ERROR_NOT_FOUND                                       ? -ENOENT
                                                                                  : -EIO;
    return vg_err_set(err, code, "NVML: %s: %s", what, nvml_lib_error(&m->lib, rc));
}

static int device(struct dra_mig *m, const char *uuid, nvmlDevice_t *dev, struct vg_err *err)
{
    nvmlReturn_t rc = m->lib.by_uuid(uuid, dev);
    return rc == NVML_SUCCESS ? 0 : nvml_failed(m, rc, "nvmlDeviceGetHandleByUUID", err);
}

int dra_mig_discover(struct dra_mig *m, const struct dp_gpu *gpu, struct dra_mig_gpu *out,
                     struct vg_err *err)
{
    /* Every GPU instance profile enum NVML has; a model answers for those it supports. */
    static const unsigned enums[] = {0x0, 0x7, 0x9, 0x1, 0x8, 0x2, 0x3, 0x6, 0x4, 0x5};
    memset(out, 0, sizeof *out);
    nvmlDevice_t dev;
    if (device(m, gpu->uuid, &dev, err) < 0)
        return err->code;
    for (size_t e = 0; e < sizeof enums / sizeof enums[0]; e++) {
        nvmlGpuInstanceProfileInfo_t info;
        memset(&info, 0, sizeof info);
        if (m->profile_info(dev, enums[e], &info) != NVML_SUCCESS)
            continue;
        nvmlGpuInstancePlacement_t pl[DRA_MIG_MAX_SLICES];
        unsigned n = DRA_MIG_MAX_SLICES;
        nvmlReturn_t rc = m->placements(dev, info.id, pl, &n);
        if (rc != NVML_SUCCESS)
            return nvml_failed(m, rc, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", err);
        for (unsigned k = 0; k < n; k++) {
            if (pl[k].size == 0 || pl[k].start + pl[k].size > DRA_MIG_MAX_SLICES)
                return vg_err_set(err, -EINVAL, "NVML: profile %u: placement %u+%u past %d slices",
                                  info.id, pl[k].start, pl[k].size, DRA_MIG_MAX_SLICES);
            if (out->count == DRA_MIG_MAX_PARTS)
                return vg_err_set(err, -E2BIG, "GPU %s: more than %d partitions", gpu->uuid,
                                  DRA_MIG_MAX_PARTS);
            struct dra_partition *p = &out->parts[out->count++];
            p->profile_id = info.id;
            p->start = pl[k].start;
            p->size = pl[k].size;
            p->compute_slices = info.sliceCount;
            p->sms = info.multiprocessorCount;
            p->memory_mib = info.memorySizeMB;
            dp_mig_profile(info.sliceCount, info.sliceCount, info.memorySizeMB,
                           gpu->memory_mib << 20, p->profile, sizeof p->profile);
            if (enums[e] == 0x7) /* the media-extension variant of the 1-slice profile */
                vg_snprintf(p->profile + strlen(p->profile), sizeof p->profile - strlen(p->profile),
                            "+me");
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
    nvmlGpuInstancePlacement_t pl = {.start = inst->start, .size = inst->size};
    nvmlGpuInstance_t gi;
    nvmlReturn_t rc = m->create_gi(dev, inst->profile_id, &pl, &gi);
    if (rc != NVML_SUCCESS)
        return nvml_failed(m, rc, "nvmlDeviceCreateGpuInstanceWithPlacement", err);
    nvmlGpuInstanceInfo_t info;
    if ((rc = m->gi_info(gi, &info)) != NVML_SUCCESS) {
        m->destroy_gi(gi);
        return nvml_failed(m, rc, "nvmlGpuInstanceGetInfo", err);
    }
    inst->gi = (int)info.id;
    return 0;
}

int dra_mig_create_ci(struct dra_mig *m, struct dra_instance *inst, unsigned gpu_minor,
                      uint64_t gpu_memory_mib, struct dp_mig *mig, struct vg_err *err)
{
    nvmlDevice_t dev;
    nvmlGpuInstance_t gi;
    nvmlReturn_t rc;
    if (device(m, inst->gpu_uuid, &dev, err) < 0)
        return err->code;
    if ((rc = m->gi_by_id(dev, (unsigned)inst->gi, &gi)) != NVML_SUCCESS)
        return nvml_failed(m, rc, "nvmlDeviceGetGpuInstanceById", err);
    /* One compute instance spanning the GPU instance: the largest CI profile it takes. */
    static const unsigned ci_enums[] = {0x5, 0x4, 0x6, 0x3, 0x2, 0x1, 0x0};
    nvmlComputeInstanceProfileInfo_t info;
    rc = NVML_ERROR_NOT_SUPPORTED;
    for (size_t e = 0; e < sizeof ci_enums / sizeof ci_enums[0]; e++) {
        memset(&info, 0, sizeof info);
        if (m->ci_profile(gi, ci_enums[e], NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) ==
                NVML_SUCCESS &&
            info.sliceCount > 0) {
            nvmlComputeInstance_t ci;
            rc = m->create_ci(gi, info.id, &ci);
            if (rc == NVML_SUCCESS) {
                nvmlComputeInstanceInfo_t ciinfo;
                if ((rc = m->ci_info(ci, &ciinfo)) == NVML_SUCCESS)
                    inst->ci = (int)ciinfo.id;
            }
            break;
        }
    }
    if (rc != NVML_SUCCESS)
        return nvml_failed(m, rc, "nvmlGpuInstanceCreateComputeInstance", err);
    /* The MIG device of that GPU instance: its UUID and memory. */
    unsigned max = 0;
    if (m->lib.mig_max(dev, &max) != NVML_SUCCESS)
        max = 8;
    for (unsigned i = 0; i < max; i++) {
        nvmlDevice_t md;
        unsigned id = 0;
        if (m->lib.mig_by_index(dev, i, &md) != NVML_SUCCESS ||
            m->lib.gi_id(md, &id) != NVML_SUCCESS || id != (unsigned)inst->gi)
            continue;
        if ((rc = m->lib.get_uuid(md, inst->uuid, sizeof inst->uuid)) != NVML_SUCCESS)
            return nvml_failed(m, rc, "nvmlDeviceGetUUID (MIG)", err);
        nvmlMemory_t mem;
        memset(mig, 0, sizeof *mig);
        vg_strlcpy(mig->uuid, inst->uuid, sizeof mig->uuid);
        mig->index = i;
        mig->gi = (unsigned)inst->gi;
        mig->ci = (unsigned)inst->ci;
        mig->memory_mib = m->lib.get_memory(md, &mem) == NVML_SUCCESS ? mem.total >> 20 : 0;
        dp_mig_profile(info.sliceCount, info.sliceCount, mig->memory_mib, gpu_memory_mib << 20,
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
    return vg_err_set(err, -ENOENT, "NVML: no MIG device for GPU instance %d", inst->gi);
}

/* The GPU instance at inst's placement (a plugin killed before it recorded the id). */
static nvmlReturn_t gi_at_placement(struct dra_mig *m, nvmlDevice_t dev,
                                    const struct dra_instance *inst, nvmlGpuInstance_t *out)
{
    nvmlGpuInstance_t list[DRA_MIG_MAX_SLICES];
    unsigned n = DRA_MIG_MAX_SLICES;
    nvmlReturn_t rc = m->gis(dev, inst->profile_id, list, &n);
    if (rc != NVML_SUCCESS)
        return rc;
    for (unsigned i = 0; i < n; i++) {
        nvmlGpuInstanceInfo_t info;
        if (m->gi_info(list[i], &info) == NVML_SUCCESS && info.placement.start == inst->start) {
            *out = list[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

int dra_mig_destroy(struct dra_mig *m, const struct dra_instance *inst, struct vg_err *err)
{
    nvmlDevice_t dev;
    nvmlGpuInstance_t gi;
    if (device(m, inst->gpu_uuid, &dev, err) < 0)
        return err->code;
    nvmlReturn_t rc = inst->gi >= 0 ? m->gi_by_id(dev, (unsigned)inst->gi, &gi)
                                    : gi_at_placement(m, dev, inst, &gi);
    if (rc == NVML_ERROR_NOT_FOUND || rc == NVML_ERROR_INVALID_ARGUMENT)
        return 0; /* gone already */
    if (rc != NVML_SUCCESS)
        return nvml_failed(m, rc, "finding the GPU instance", err);
    nvmlGpuInstanceInfo_t info;
    if (m->gi_info(gi, &info) == NVML_SUCCESS &&
        (info.profileId != inst->profile_id || info.placement.start != inst->start))
        return 0; /* that id is another instance now: ours is gone */
    static const unsigned ci_enums[] = {0x0, 0x1, 0x2, 0x3, 0x4, 0x5, 0x6, 0x7};
    for (size_t e = 0; e < sizeof ci_enums / sizeof ci_enums[0]; e++) {
        nvmlComputeInstanceProfileInfo_t cp;
        if (m->ci_profile(gi, ci_enums[e], NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &cp) !=
            NVML_SUCCESS)
            continue;
        nvmlComputeInstance_t cis[8];
        unsigned n = 8;
        if (m->cis(gi, cp.id, cis, &n) != NVML_SUCCESS)
            continue;
        for (unsigned i = 0; i < n; i++)
            if ((rc = m->destroy_ci(cis[i])) != NVML_SUCCESS)
                return nvml_failed(m, rc, "nvmlComputeInstanceDestroy", err);
    }
    if ((rc = m->destroy_gi(gi)) != NVML_SUCCESS)
        return nvml_failed(m, rc, "nvmlGpuInstanceDestroy", err);
    return 0;
}
