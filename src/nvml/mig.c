/* Dynamic MIG through NVML (mig.h). */
#include "nvml/mig.h"

#include <errno.h>
#include <string.h>

#include "base/str.h"

#define GI_PROFILE_ENUMS 10 /* NVML_GPU_INSTANCE_PROFILE_1_SLICE .. 1_SLICE_REV2 */
#define CI_PROFILE_ENUMS 8  /* NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE .. 1_SLICE_REV1 */
#define GIB              (1024ULL * 1024 * 1024)

static int failed(const struct nvml_lib *lib, const char *call, nvmlReturn_t rc, struct vg_err *err)
{
    int code;
    switch (rc) {
    case NVML_ERROR_NOT_SUPPORTED:
        code = -ENOTSUP;
        break;
    case NVML_ERROR_INVALID_ARGUMENT:
        code = -EINVAL;
        break;
    case NVML_ERROR_INSUFFICIENT_RESOURCES:
        code = -ENOSPC;
        break;
    case NVML_ERROR_IN_USE:
        code = -EBUSY;
        break;
    case NVML_ERROR_NOT_FOUND:
        code = -ENOENT;
        break;
    default:
        code = -EIO;
    }
    return vg_err_set(err, code, "NVML: %s: %s", call, nvml_lib_error(lib, rc));
}

static bool has_api(const struct nvml_lib *lib)
{
    return lib->gi_profile_info && lib->gi_placements && lib->gi_create_at && lib->gi_destroy &&
           lib->gi_list && lib->gi_by_id && lib->gi_info && lib->ci_profile_info &&
           lib->ci_create && lib->ci_list && lib->ci_destroy && lib->get_memory;
}

int nvml_mig_profiles(const struct nvml_lib *lib, nvmlDevice_t dev, struct nvml_mig_profile *out,
                      size_t *count, unsigned *slices, struct vg_err *err)
{
    *count = 0;
    *slices = 0;
    if (!has_api(lib))
        return vg_err_set(err, -ENOTSUP, "NVML: the library has no dynamic MIG calls");
    nvmlMemory_t mem;
    nvmlReturn_t rc = lib->get_memory(dev, &mem);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlDeviceGetMemoryInfo", rc, err);
    struct nvml_mig_profile tmp[NVML_MIG_MAX_PROFILES];
    size_t n = 0;
    for (unsigned e = 0; e < GI_PROFILE_ENUMS && n < NVML_MIG_MAX_PROFILES; e++) {
        nvmlGpuInstanceProfileInfo_t info;
        memset(&info, 0, sizeof info);
        rc = lib->gi_profile_info(dev, e, &info);
        if (rc == NVML_ERROR_NOT_SUPPORTED || rc == NVML_ERROR_INVALID_ARGUMENT)
            continue; /* a profile this GPU does not have */
        if (rc != NVML_SUCCESS)
            return failed(lib, "nvmlDeviceGetGpuInstanceProfileInfo", rc, err);
        nvmlGpuInstancePlacement_t pl[8];
        unsigned np = 8;
        rc = lib->gi_placements(dev, info.id, pl, &np);
        if (rc != NVML_SUCCESS)
            return failed(lib, "nvmlDeviceGetGpuInstancePossiblePlacements_v2", rc, err);
        struct nvml_mig_profile *p = &tmp[n];
        memset(p, 0, sizeof *p);
        p->id = info.id;
        p->profile_enum = e;
        p->slices = info.sliceCount;
        p->sms = info.multiprocessorCount;
        p->memory_mib = info.memorySizeMB;
        for (unsigned k = 0; k < np && k < 8; k++) {
            if (pl[k].start >= 8 || pl[k].size == 0 || pl[k].start + pl[k].size > 8)
                continue; /* nothing a GPU of 8 memory slices can hold */
            p->placements |= 1u << pl[k].start;
            p->size = pl[k].size;
            if (pl[k].start + pl[k].size > *slices)
                *slices = pl[k].start + pl[k].size;
        }
        if (p->placements != 0 && p->slices > 0)
            n++;
    }
    /* Names as NVIDIA forms them: <g>g.<mem>gb, mem the memory slices' share of the card
     * in eighths times its memory in whole GiB, rounded; +me for the media-extension one. */
    uint64_t card_gib = (mem.total + GIB - 1) / GIB;
    for (size_t i = 0; i < n; i++) {
        struct nvml_mig_profile *p = &tmp[i];
        uint64_t eighths = *slices ? (8ULL * p->size + *slices - 1) / *slices : 0;
        uint64_t gb = (eighths * card_gib * 2 + 8) / 16;
        bool me = false;
        for (size_t k = 0; k < i; k++)
            me |= tmp[k].slices == p->slices && tmp[k].size == p->size;
        (void)vg_snprintf(p->name, sizeof p->name, "%ug.%llugb%s", p->slices,
                          (unsigned long long)gb, me ? "+me" : "");
        out[(*count)++] = *p;
    }
    return 0;
}

/* The compute instance profile whose slice count is the GPU instance's: its info. */
static int full_ci(const struct nvml_lib *lib, nvmlGpuInstance_t gi, unsigned slices,
                   nvmlComputeInstanceProfileInfo_t *info, struct vg_err *err)
{
    for (unsigned e = 0; e < CI_PROFILE_ENUMS; e++) {
        memset(info, 0, sizeof *info);
        nvmlReturn_t rc =
            lib->ci_profile_info(gi, e, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, info);
        if (rc == NVML_SUCCESS && info->sliceCount == slices)
            return 0;
        if (rc != NVML_SUCCESS && rc != NVML_ERROR_NOT_SUPPORTED &&
            rc != NVML_ERROR_INVALID_ARGUMENT)
            return failed(lib, "nvmlGpuInstanceGetComputeInstanceProfileInfo", rc, err);
    }
    return vg_err_set(err, -ENOTSUP, "NVML: no compute instance profile spans %u slices", slices);
}

/* The MIG device of GPU instance gi: its UUID and index. */
static void mig_device(const struct nvml_lib *lib, nvmlDevice_t dev, struct nvml_mig_instance *mi)
{
    unsigned max = 0;
    if (!lib->mig_max || !lib->mig_by_index || !lib->gi_id || !lib->get_uuid ||
        lib->mig_max(dev, &max) != NVML_SUCCESS)
        return;
    for (unsigned k = 0; k < max; k++) {
        nvmlDevice_t m;
        unsigned id = 0;
        if (lib->mig_by_index(dev, k, &m) != NVML_SUCCESS || lib->gi_id(m, &id) != NVML_SUCCESS ||
            id != mi->gi)
            continue;
        if (lib->get_uuid(m, mi->uuid, sizeof mi->uuid) == NVML_SUCCESS)
            mi->mig_index = k;
        nvmlMemory_t mem;
        if (lib->get_memory(m, &mem) == NVML_SUCCESS)
            mi->memory_mib = mem.total >> 20;
        if (lib->ci_id)
            (void)lib->ci_id(m, &mi->ci);
        return;
    }
}

/* Fills what gi is. */
static int describe(const struct nvml_lib *lib, nvmlDevice_t dev, nvmlGpuInstance_t gi,
                    unsigned slices, struct nvml_mig_instance *mi, struct vg_err *err)
{
    nvmlGpuInstanceInfo_t info;
    nvmlReturn_t rc = lib->gi_info(gi, &info);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlGpuInstanceGetInfo", rc, err);
    memset(mi, 0, sizeof *mi);
    mi->gi = info.id;
    mi->profile_id = info.profileId;
    mi->start = info.placement.start;
    mi->size = info.placement.size;
    nvmlComputeInstanceProfileInfo_t ci;
    struct vg_err ignored;
    if (full_ci(lib, gi, slices, &ci, &ignored) == 0) {
        nvmlComputeInstance_t cis[8];
        unsigned n = 0;
        mi->has_ci = lib->ci_list(gi, ci.id, cis, &n) == NVML_SUCCESS && n > 0;
    }
    if (mi->has_ci)
        mig_device(lib, dev, mi);
    return 0;
}

int nvml_mig_instances(const struct nvml_lib *lib, nvmlDevice_t dev,
                       const struct nvml_mig_profile *profiles, size_t n_profiles,
                       struct nvml_mig_instance *out, size_t *count, struct vg_err *err)
{
    *count = 0;
    if (!has_api(lib))
        return vg_err_set(err, -ENOTSUP, "NVML: the library has no dynamic MIG calls");
    for (size_t i = 0; i < n_profiles; i++) {
        nvmlGpuInstance_t gis[NVML_MIG_MAX_INSTANCES];
        unsigned n = 0;
        nvmlReturn_t rc = lib->gi_list(dev, profiles[i].id, gis, &n);
        if (rc != NVML_SUCCESS)
            return failed(lib, "nvmlDeviceGetGpuInstances", rc, err);
        for (unsigned k = 0; k < n && k < NVML_MIG_MAX_INSTANCES; k++) {
            if (*count == NVML_MIG_MAX_INSTANCES)
                return vg_err_set(err, -E2BIG, "NVML: more than %d GPU instances",
                                  NVML_MIG_MAX_INSTANCES);
            int r = describe(lib, dev, gis[k], profiles[i].slices, &out[*count], err);
            if (r < 0)
                return r;
            (*count)++;
        }
    }
    /* By start (insertion sort: a handful). */
    for (size_t i = 1; i < *count; i++)
        for (size_t k = i; k > 0 && out[k - 1].start > out[k].start; k--) {
            struct nvml_mig_instance t = out[k];
            out[k] = out[k - 1];
            out[k - 1] = t;
        }
    return 0;
}

bool nvml_mig_supported(const struct nvml_lib *lib)
{
    return has_api(lib);
}

int nvml_mig_create_gi(const struct nvml_lib *lib, nvmlDevice_t dev,
                       const struct nvml_mig_profile *p, unsigned start, unsigned *gi_id,
                       struct vg_err *err)
{
    if (!has_api(lib))
        return vg_err_set(err, -ENOTSUP, "NVML: the library has no dynamic MIG calls");
    nvmlGpuInstancePlacement_t at = {.start = start, .size = p->size};
    nvmlGpuInstance_t gi;
    nvmlReturn_t rc = lib->gi_create_at(dev, p->id, &at, &gi);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlDeviceCreateGpuInstanceWithPlacement", rc, err);
    nvmlGpuInstanceInfo_t info;
    if ((rc = lib->gi_info(gi, &info)) != NVML_SUCCESS) {
        (void)lib->gi_destroy(gi); /* nothing half made stays */
        return failed(lib, "nvmlGpuInstanceGetInfo", rc, err);
    }
    *gi_id = info.id;
    return 0;
}

/* The handle of GPU instance gi_id. */
static int gi_handle(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi_id,
                     nvmlGpuInstance_t *gi, struct vg_err *err)
{
    if (!has_api(lib))
        return vg_err_set(err, -ENOTSUP, "NVML: the library has no dynamic MIG calls");
    nvmlReturn_t rc = lib->gi_by_id(dev, gi_id, gi);
    return rc == NVML_SUCCESS ? 0 : failed(lib, "nvmlDeviceGetGpuInstanceById", rc, err);
}

int nvml_mig_create_ci(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi_id,
                       unsigned slices, struct nvml_mig_instance *out, struct vg_err *err)
{
    nvmlGpuInstance_t gi;
    int r = gi_handle(lib, dev, gi_id, &gi, err);
    if (r < 0)
        return r;
    nvmlComputeInstanceProfileInfo_t ci_info;
    nvmlComputeInstance_t ci;
    if ((r = full_ci(lib, gi, slices, &ci_info, err)) < 0)
        return r;
    nvmlReturn_t rc = lib->ci_create(gi, ci_info.id, &ci);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlGpuInstanceCreateComputeInstance", rc, err);
    return describe(lib, dev, gi, slices, out, err);
}

int nvml_mig_create(const struct nvml_lib *lib, nvmlDevice_t dev, const struct nvml_mig_profile *p,
                    unsigned start, void (*hook)(void), struct nvml_mig_instance *out,
                    struct vg_err *err)
{
    unsigned gi;
    int r = nvml_mig_create_gi(lib, dev, p, start, &gi, err);
    if (r < 0)
        return r;
    if (hook)
        hook();
    r = nvml_mig_create_ci(lib, dev, gi, p->slices, out, err);
    if (r < 0) {
        struct vg_err ignored;
        (void)nvml_mig_destroy(lib, dev, gi, &ignored); /* nothing half made stays */
    }
    return r;
}

int nvml_mig_placement(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi_id,
                       unsigned *profile_id, unsigned *start, struct vg_err *err)
{
    nvmlGpuInstance_t gi;
    nvmlGpuInstanceInfo_t info;
    int r = gi_handle(lib, dev, gi_id, &gi, err);
    if (r == -EINVAL) /* an id NVML never gave: none */
        err->code = r = -ENOENT;
    if (r < 0)
        return r;
    nvmlReturn_t rc = lib->gi_info(gi, &info);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlGpuInstanceGetInfo", rc, err);
    *profile_id = info.profileId;
    *start = info.placement.start;
    return 0;
}

int nvml_mig_find(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned profile_id, unsigned start,
                  unsigned *gi_id, struct vg_err *err)
{
    if (!has_api(lib))
        return vg_err_set(err, -ENOTSUP, "NVML: the library has no dynamic MIG calls");
    nvmlGpuInstance_t gis[NVML_MIG_MAX_INSTANCES];
    unsigned n = NVML_MIG_MAX_INSTANCES;
    nvmlReturn_t rc = lib->gi_list(dev, profile_id, gis, &n);
    if (rc != NVML_SUCCESS)
        return failed(lib, "nvmlDeviceGetGpuInstances", rc, err);
    for (unsigned k = 0; k < n && k < NVML_MIG_MAX_INSTANCES; k++) {
        nvmlGpuInstanceInfo_t info;
        if (lib->gi_info(gis[k], &info) == NVML_SUCCESS && info.placement.start == start) {
            *gi_id = info.id;
            return 0;
        }
    }
    return vg_err_set(err, -ENOENT, "NVML: no GPU instance of profile %u at slice %u", profile_id,
                      start);
}

int nvml_mig_destroy(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi_id,
                     struct vg_err *err)
{
    nvmlGpuInstance_t gi;
    int r = gi_handle(lib, dev, gi_id, &gi, err);
    if (r < 0)
        return r;
    nvmlReturn_t rc;
    for (unsigned e = 0; e < CI_PROFILE_ENUMS; e++) {
        nvmlComputeInstanceProfileInfo_t info;
        if (lib->ci_profile_info(gi, e, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, &info) !=
            NVML_SUCCESS)
            continue;
        nvmlComputeInstance_t cis[8];
        unsigned n = 0;
        if (lib->ci_list(gi, info.id, cis, &n) != NVML_SUCCESS)
            continue;
        for (unsigned k = 0; k < n && k < 8; k++) {
            rc = lib->ci_destroy(cis[k]);
            if (rc != NVML_SUCCESS)
                return failed(lib, "nvmlComputeInstanceDestroy", rc, err);
        }
    }
    rc = lib->gi_destroy(gi);
    return rc == NVML_SUCCESS ? 0 : failed(lib, "nvmlGpuInstanceDestroy", rc, err);
}
