/* Allocate responses, per-container directories and the inventory value.
 *
 * A response is built as a plain struct first (dp_response) so golden tests can print it
 * in one canonical form, then packed into kubelet's AllocateResponse. In vgpu mode the
 * container gets a directory of its own under vgpu.regionDir, mounted at the same path
 * inside the container (so the paths in env and in the limits file are true on both
 * sides), holding:
 *   region  the shared region (src/region), limits per GPU UUID, mode 0666;
 *   limits  the libvgpu limits file (docs/protocol.md), 0444 and also mounted read-only
 *           on its own, so a process in the container cannot raise its own limit.
 * The directory's existence is also the record that the container was allocated
 * (match.c), and its name `<pod uid>_<container>` is what cleanup keys on. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/mem.h"
#include "base/log.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "grpc/kubelet/api.h"
#include "region/region.h"

static int add_env(struct dp_response *r, const char *key, const char *value, struct vg_err *err)
{
    for (size_t i = 0; i < r->env_count; i++)
        if (strcmp(r->envs[i].key, key) == 0)
            return vg_strlcpy(r->envs[i].value, value, sizeof(r->envs[i].value)) < 0
                       ? vg_err_set(err, -ENOSPC, "env %s too long", key)
                       : 0;
    if (r->env_count == DP_RESPONSE_MAX_ENVS)
        return vg_err_set(err, -ENOSPC, "too many environment variables");
    struct dp_env *e = &r->envs[r->env_count];
    if (vg_strlcpy(e->key, key, sizeof(e->key)) < 0 ||
        vg_strlcpy(e->value, value, sizeof(e->value)) < 0)
        return vg_err_set(err, -ENOSPC, "env %s too long", key);
    r->env_count++;
    return 0;
}

static int add_mount(struct dp_response *r, const char *container_path, const char *host_path,
                     bool read_only, struct vg_err *err)
{
    if (r->mount_count == DP_RESPONSE_MAX_MOUNTS)
        return vg_err_set(err, -ENOSPC, "too many mounts");
    struct dp_mount *m = &r->mounts[r->mount_count];
    if (vg_strlcpy(m->container_path, container_path, sizeof(m->container_path)) < 0 ||
        vg_strlcpy(m->host_path, host_path, sizeof(m->host_path)) < 0)
        return vg_err_set(err, -ENOSPC, "mount path too long: %s", host_path);
    m->read_only = read_only;
    r->mount_count++;
    return 0;
}

int dp_response_add_env(struct dp_response *r, const char *key, const char *value,
                        struct vg_err *err)
{
    return add_env(r, key, value, err);
}

int dp_response_add_mount(struct dp_response *r, const char *container_path, const char *host_path,
                          bool read_only, struct vg_err *err)
{
    return add_mount(r, container_path, host_path, read_only, err);
}

static void add_device_spec(struct dp_response *r, const char *path)
{
    if (r->device_count == DP_RESPONSE_MAX_DEVICES)
        return;
    for (size_t i = 0; i < r->device_count; i++)
        if (strcmp(r->devices[i].container_path, path) == 0)
            return;
    struct dp_device_spec *d = &r->devices[r->device_count++];
    vg_strlcpy(d->container_path, path, sizeof(d->container_path));
    vg_strlcpy(d->host_path, path, sizeof(d->host_path));
    vg_strlcpy(d->permissions, "rw", sizeof(d->permissions));
}

/* CDI: one annotation `<cdiAnnotationPrefix>vgpu-device-plugin_<hash>` naming every
 * device (cdi-annotations), and/or the CRI's CDI device list (cdi-cri). The key must be
 * unique among the container's annotations, also across resources: it is derived from
 * the device list (FNV-1a), which keeps responses reproducible. */
static int cdi_response(const struct dp_config *cfg, char ids[][ANNOT_UUID_MAX], size_t n,
                        struct dp_response *out, struct vg_err *err)
{
    unsigned list = cfg->flags.plugin.device_list_strategy;
    uint64_t hash = 14695981039346656037ull;
    char value[sizeof(out->annotations[0].value)] = "";
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        for (const char *c = ids[i]; *c; c++)
            hash = (hash ^ (uint8_t)*c) * 1099511628211ull;
        hash = (hash ^ ',') * 1099511628211ull;
        int w = vg_snprintf(value + used, sizeof(value) - used, "%s%s=%s", i ? "," : "",
                            DP_CDI_KIND, ids[i]);
        if (w < 0)
            return vg_err_set(err, -ENOSPC, "CDI annotation too long");
        used += (size_t)w;
        if ((list & DP_LIST_CDI_CRI) && out->cdi_device_count < DP_MAX_GPUS)
            vg_snprintf(out->cdi_devices[out->cdi_device_count++].name,
                        sizeof(out->cdi_devices[0].name), "%s=%s", DP_CDI_KIND, ids[i]);
    }
    if (!(list & DP_LIST_CDI_ANNOTATIONS))
        return 0;
    if (out->annotation_count == DP_RESPONSE_MAX_ANNOTATIONS)
        return vg_err_set(err, -ENOSPC, "too many annotations");
    struct dp_annotation *a = &out->annotations[out->annotation_count];
    if (vg_snprintf(a->key, sizeof(a->key), "%svgpu-device-plugin_%016llx",
                    cfg->flags.plugin.cdi_annotation_prefix, (unsigned long long)hash) < 0)
        return vg_err_set(err, -ENOSPC, "CDI annotation prefix too long");
    vg_strlcpy(a->value, value, sizeof(a->value));
    out->annotation_count++;
    return 0;
}

/* What every mode returns for a set of GPUs (NVIDIA's getAllocateResponse): the visible
 * devices by deviceListStrategy (every strategy of the list, combined) and
 * deviceIDStrategy, device specs when passDeviceSpecs (not with CDI strategies only: the
 * CDI specification carries the device nodes). gpu_list holds GPU table indices,
 * de-duplicated, in order. */
static int base_response(const struct dp_config *cfg, const struct dp_gpu *gpus,
                         const unsigned *gpu_list, size_t n, struct dp_response *out,
                         struct vg_err *err)
{
    char visible[1024] = "";
    size_t used = 0;
    char ids[DP_MAX_GPUS][ANNOT_UUID_MAX];
    unsigned list = cfg->flags.plugin.device_list_strategy;
    bool legacy = list & (DP_LIST_ENVVAR | DP_LIST_VOLUME_MOUNTS);
    for (size_t i = 0; i < n && i < DP_MAX_GPUS; i++) {
        const struct dp_gpu *g = &gpus[gpu_list[i]];
        char *id = ids[i];
        if (cfg->flags.plugin.device_id_strategy == DP_DEVICE_ID_INDEX)
            vg_snprintf(id, ANNOT_UUID_MAX, "%u", g->index);
        else
            vg_strlcpy(id, g->uuid, ANNOT_UUID_MAX);
        int w = vg_snprintf(visible + used, sizeof(visible) - used, "%s%s", i ? "," : "", id);
        if (w < 0)
            return vg_err_set(err, -ENOSPC, "NVIDIA_VISIBLE_DEVICES too long");
        used += (size_t)w;
        if (cfg->flags.plugin.device_list_strategy & DP_LIST_VOLUME_MOUNTS) {
            char path[256];
            vg_snprintf(path, sizeof(path), "/var/run/nvidia-container-devices/%s", id);
            int rc = add_mount(out, path, "/dev/null", false, err);
            if (rc < 0)
                return rc;
        }
        if (cfg->flags.plugin.pass_device_specs && legacy) {
            char path[64];
            vg_snprintf(path, sizeof(path), "/dev/nvidia%u", g->minor);
            add_device_spec(out, "/dev/nvidiactl");
            add_device_spec(out, "/dev/nvidia-uvm");
            add_device_spec(out, "/dev/nvidia-uvm-tools");
            add_device_spec(out, path);
        }
    }
    int rc = cdi_response(cfg, ids, n < DP_MAX_GPUS ? n : DP_MAX_GPUS, out, err);
    return rc < 0 ? rc : dp_response_add_visible(cfg, visible, out, err);
}

int dp_response_add_visible(const struct dp_config *cfg, const char *visible,
                            struct dp_response *out, struct vg_err *err)
{
    int rc = 0;
    if (cfg->flags.plugin.device_list_strategy & DP_LIST_ENVVAR)
        rc = add_env(out, "NVIDIA_VISIBLE_DEVICES", visible, err);
    else if (cfg->flags.plugin.device_list_strategy & DP_LIST_VOLUME_MOUNTS)
        rc = add_env(out, "NVIDIA_VISIBLE_DEVICES", "/var/run/nvidia-container-devices", err);
    if (rc == 0 && cfg->flags.gds_enabled)
        rc = add_env(out, "NVIDIA_GDS", "enabled", err);
    if (rc == 0 && cfg->flags.mofed_enabled)
        rc = add_env(out, "NVIDIA_MOFED", "enabled", err);
    if (rc == 0 && cfg->flags.gdrcopy_enabled)
        rc = add_env(out, "NVIDIA_GDRCOPY", "enabled", err);
    return rc;
}

int dp_allocate_shared(const struct dp_config *cfg, const struct dp_resource *resource,
                       const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                       size_t id_count, struct dp_response *out, struct vg_err *err)
{
    if (resource->mig)
        return dp_allocate_mig(cfg, resource, gpus, gpu_count, ids, id_count, out, err);
    memset(out, 0, sizeof(*out));
    if (id_count == 0)
        return vg_err_set(err, -EINVAL, "%s: Allocate without devices", resource->name);
    if (resource->fail_requests_greater_than_one && resource->replicas > 1 && id_count > 1)
        return vg_err_set(err, -EINVAL,
                          "request for '%s': %zu devices requested; maximum request size for "
                          "shared resources is 1",
                          resource->name, id_count);
    unsigned list[DP_MAX_GPUS];
    size_t n = 0;
    for (size_t i = 0; i < id_count; i++) {
        const struct dp_device *found = NULL;
        for (size_t k = 0; k < resource->device_count && !found; k++)
            if (strcmp(resource->devices[k].id, ids[i]) == 0)
                found = &resource->devices[k];
        if (!found || found->gpu >= gpu_count)
            return vg_err_set(err, -ENOENT, "%s: unknown device ID '%s'", resource->name, ids[i]);
        bool dup = false;
        for (size_t k = 0; k < n; k++)
            dup |= list[k] == found->gpu;
        if (!dup)
            list[n++] = found->gpu;
    }
    return base_response(cfg, gpus, list, n, out, err);
}

static unsigned effective_cores(const struct dp_config *cfg, unsigned cores)
{
    if (cfg->vgpu.disable_core_limit)
        return 0;
    if (cores == 0)
        cores = (unsigned)cfg->vgpu.default_cores;
    return cores >= 100 ? 0 : cores;
}

static int find_gpu(const struct dp_gpu *gpus, unsigned gpu_count, const char *uuid)
{
    for (unsigned i = 0; i < gpu_count; i++)
        if (strcmp(gpus[i].uuid, uuid) == 0)
            return (int)i;
    return -1;
}

int dp_allocate_vgpu(const struct dp_config *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                     const struct dp_match *match, const char *container_dir,
                     struct dp_response *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    const struct annot_container *c = &match->container;
    unsigned list[DP_MAX_GPUS];
    for (unsigned i = 0; i < c->gpu_count; i++) {
        int g = find_gpu(gpus, gpu_count, c->gpus[i].uuid);
        if (g < 0)
            return vg_err_set(err, -ENOENT,
                              "pod %s/%s container %s: the decision names GPU %s, which this node "
                              "does not have",
                              match->pod_namespace, match->pod_name, c->name, c->gpus[i].uuid);
        list[i] = (unsigned)g;
    }
    int rc = base_response(cfg, gpus, list, c->gpu_count, out, err);
    char key[64], value[1024];
    for (unsigned i = 0; i < c->gpu_count && rc == 0; i++) {
        vg_snprintf(key, sizeof(key), "CUDA_DEVICE_MEMORY_LIMIT_%u", i);
        vg_snprintf(value, sizeof(value), "%llum", (unsigned long long)c->gpus[i].memory_mib);
        rc = add_env(out, key, value, err);
    }
    unsigned first = c->gpu_count ? effective_cores(cfg, c->gpus[0].cores) : 0;
    if (rc == 0 && first) {
        vg_snprintf(value, sizeof(value), "%u", first);
        rc = add_env(out, "CUDA_DEVICE_SM_LIMIT", value, err);
    }
    for (unsigned i = 1; i < c->gpu_count && rc == 0; i++) {
        unsigned cores = effective_cores(cfg, c->gpus[i].cores);
        if (cores == first)
            continue;
        vg_snprintf(key, sizeof(key), "CUDA_DEVICE_SM_LIMIT_%u", i);
        vg_snprintf(value, sizeof(value), "%u", cores ? cores : 100);
        rc = add_env(out, key, value, err);
    }
    char path[1024];
    if (rc == 0 && vg_snprintf(path, sizeof(path), "%s/region", container_dir) < 0)
        rc = vg_err_set(err, -ENAMETOOLONG, "container directory path too long");
    if (rc == 0)
        rc = add_env(out, "CUDA_DEVICE_MEMORY_SHARED_CACHE", path, err);
    if (rc == 0)
        rc = add_mount(out, container_dir, container_dir, false, err);
    if (rc == 0 && vg_snprintf(path, sizeof(path), "%s/limits", container_dir) < 0)
        rc = vg_err_set(err, -ENAMETOOLONG, "container directory path too long");
    if (rc == 0)
        rc = add_env(out, "VGPU_LIMITS_FILE", path, err);
    if (rc == 0)
        rc = add_mount(out, path, path, true, err);
    if (rc == 0 && cfg->vgpu.device_memory_scaling > 1.0)
        rc = add_env(out, "CUDA_OVERSUBSCRIBE", "true", err);
    if (rc == 0)
        rc = add_mount(out, cfg->vgpu.libvgpu_path, cfg->vgpu.libvgpu_path, true, err);
    if (rc == 0)
        rc = add_mount(out, "/etc/ld.so.preload", cfg->vgpu.ld_so_preload_path, true, err);
    /* The compute limiters of all containers on the node publish their pending work on
     * one shared board (docs/compute.md), so each container sees its neighbours. */
    if (rc == 0)
        rc = add_env(out, "VGPU_COMPUTE_BOARD", cfg->vgpu.compute_board_dir, err);
    if (rc == 0)
        rc = add_mount(out, cfg->vgpu.compute_board_dir, cfg->vgpu.compute_board_dir, false, err);
    return rc;
}

static int env_cmp(const void *a, const void *b)
{
    return strcmp(((const struct dp_env *)a)->key, ((const struct dp_env *)b)->key);
}

void dp_response_dump(const struct dp_response *resp, FILE *out)
{
    struct dp_env sorted[DP_RESPONSE_MAX_ENVS];
    memcpy(sorted, resp->envs, resp->env_count * sizeof(sorted[0]));
    qsort(sorted, resp->env_count, sizeof(sorted[0]), env_cmp);
    for (size_t i = 0; i < resp->env_count; i++)
        fprintf(out, "env %s=%s\n", sorted[i].key, sorted[i].value);
    for (size_t i = 0; i < resp->mount_count; i++)
        fprintf(out, "mount %s <- %s %s\n", resp->mounts[i].container_path,
                resp->mounts[i].host_path, resp->mounts[i].read_only ? "ro" : "rw");
    for (size_t i = 0; i < resp->device_count; i++)
        fprintf(out, "device %s <- %s %s\n", resp->devices[i].container_path,
                resp->devices[i].host_path, resp->devices[i].permissions);
    for (size_t i = 0; i < resp->annotation_count; i++)
        fprintf(out, "annotation %s=%s\n", resp->annotations[i].key, resp->annotations[i].value);
    for (size_t i = 0; i < resp->cdi_device_count; i++)
        fprintf(out, "cdi %s\n", resp->cdi_devices[i].name);
}

int dp_response_pack(const struct dp_response *const *resps, size_t count, uint8_t **data,
                     size_t *len, struct vg_err *err)
{
    V1beta1__AllocateResponse msg = V1BETA1__ALLOCATE_RESPONSE__INIT;
    V1beta1__ContainerAllocateResponse *crs = xcalloc(count ? count : 1, sizeof(*crs));
    V1beta1__ContainerAllocateResponse **crp = xcalloc(count ? count : 1, sizeof(*crp));
    size_t envs = 0, mounts = 0, devs = 0, anns = 0, cdis = 0;
    for (size_t i = 0; i < count; i++) {
        envs += resps[i]->env_count;
        mounts += resps[i]->mount_count;
        devs += resps[i]->device_count;
        anns += resps[i]->annotation_count;
        cdis += resps[i]->cdi_device_count;
    }
    V1beta1__ContainerAllocateResponse__AnnotationsEntry *av = xcalloc(anns + 1, sizeof(*av));
    V1beta1__ContainerAllocateResponse__AnnotationsEntry **avp = xcalloc(anns + 1, sizeof(*avp));
    V1beta1__CDIDevice *cv = xcalloc(cdis + 1, sizeof(*cv));
    V1beta1__CDIDevice **cvp = xcalloc(cdis + 1, sizeof(*cvp));
    size_t a = 0, c = 0;
    V1beta1__ContainerAllocateResponse__EnvsEntry *ev = xcalloc(envs + 1, sizeof(*ev));
    V1beta1__ContainerAllocateResponse__EnvsEntry **evp = xcalloc(envs + 1, sizeof(*evp));
    V1beta1__Mount *mv = xcalloc(mounts + 1, sizeof(*mv));
    V1beta1__Mount **mvp = xcalloc(mounts + 1, sizeof(*mvp));
    V1beta1__DeviceSpec *dv = xcalloc(devs + 1, sizeof(*dv));
    V1beta1__DeviceSpec **dvp = xcalloc(devs + 1, sizeof(*dvp));
    size_t e = 0, m = 0, d = 0;
    for (size_t i = 0; i < count; i++) {
        const struct dp_response *r = resps[i];
        v1beta1__container_allocate_response__init(&crs[i]);
        crp[i] = &crs[i];
        crs[i].envs = &evp[e];
        crs[i].mounts = &mvp[m];
        crs[i].devices = &dvp[d];
        for (size_t k = 0; k < r->env_count; k++, e++) {
            v1beta1__container_allocate_response__envs_entry__init(&ev[e]);
            ev[e].key = (char *)r->envs[k].key;
            ev[e].value = (char *)r->envs[k].value;
            evp[e] = &ev[e];
        }
        for (size_t k = 0; k < r->mount_count; k++, m++) {
            v1beta1__mount__init(&mv[m]);
            mv[m].container_path = (char *)r->mounts[k].container_path;
            mv[m].host_path = (char *)r->mounts[k].host_path;
            mv[m].read_only = r->mounts[k].read_only;
            mvp[m] = &mv[m];
        }
        for (size_t k = 0; k < r->device_count; k++, d++) {
            v1beta1__device_spec__init(&dv[d]);
            dv[d].container_path = (char *)r->devices[k].container_path;
            dv[d].host_path = (char *)r->devices[k].host_path;
            dv[d].permissions = (char *)r->devices[k].permissions;
            dvp[d] = &dv[d];
        }
        crs[i].annotations = &avp[a];
        crs[i].cdi_devices = &cvp[c];
        for (size_t k = 0; k < r->annotation_count; k++, a++) {
            v1beta1__container_allocate_response__annotations_entry__init(&av[a]);
            av[a].key = (char *)r->annotations[k].key;
            av[a].value = (char *)r->annotations[k].value;
            avp[a] = &av[a];
        }
        for (size_t k = 0; k < r->cdi_device_count; k++, c++) {
            v1beta1__cdidevice__init(&cv[c]);
            cv[c].name = (char *)r->cdi_devices[k].name;
            cvp[c] = &cv[c];
        }
        crs[i].n_envs = r->env_count;
        crs[i].n_mounts = r->mount_count;
        crs[i].n_devices = r->device_count;
        crs[i].n_annotations = r->annotation_count;
        crs[i].n_cdi_devices = r->cdi_device_count;
    }
    msg.n_container_responses = count;
    msg.container_responses = crp;
    *len = v1beta1__allocate_response__get_packed_size(&msg);
    *data = xmalloc(*len ? *len : 1);
    v1beta1__allocate_response__pack(&msg, *data);
    free(crs);
    free(crp);
    free(ev);
    free(evp);
    free(mv);
    free(mvp);
    free(dv);
    free(dvp);
    free(av);
    free(avp);
    free(cv);
    free(cvp);
    (void)err;
    return 0;
}

int dp_container_dir_path(const char *region_dir, const char *pod_uid, const char *container,
                          char *path, size_t size, struct vg_err *err)
{
    if (!pod_uid[0] || strchr(pod_uid, '/') || strchr(pod_uid, '_') || strchr(container, '/') ||
        strcmp(pod_uid, "..") == 0 || !container[0])
        return vg_err_set(err, -EINVAL, "pod uid '%s' / container '%s' cannot name a directory",
                          pod_uid, container);
    if (vg_snprintf(path, size, "%s/%s_%s", region_dir, pod_uid, container) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "container directory path too long");
    return 0;
}

int dp_container_dir_remove(const char *dir, struct vg_err *err)
{
    static const char *const files[] = {"region", "limits", "limits.tmp"};
    char path[1024];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (vg_snprintf(path, sizeof(path), "%s/%s", dir, files[i]) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "path too long");
        if (unlink(path) != 0 && errno != ENOENT)
            return vg_err_set(err, -errno, "removing %s: %s", path, strerror(errno));
    }
    if (rmdir(dir) != 0 && errno != ENOENT)
        return vg_err_set(err, -errno, "removing %s: %s", dir, strerror(errno));
    return 0;
}

/* Writes the limits file into stage/limits (made empty by dp_stage_make); its text names
 * the directory it will have, dir. */
static int write_limits(const struct dp_config *cfg, const struct dp_match *match, const char *dir,
                        const char *stage, struct vg_err *err)
{
    char path[1024], text[8192];
    if (vg_snprintf(path, sizeof(path), "%s/limits", stage) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    const struct annot_container *c = &match->container;
    size_t used = 0;
    int w = vg_snprintf(text, sizeof(text),
                        "# written by vgpu-device-plugin for pod %s/%s, container %s\n"
                        "vgpu-limits 1\n",
                        match->pod_namespace, match->pod_name, c->name);
    if (w < 0)
        return vg_err_set(err, -ENOSPC, "limits file too long");
    used = (size_t)w;
    for (unsigned i = 0; i < c->gpu_count && w >= 0; i++) {
        w = vg_snprintf(text + used, sizeof(text) - used, "CUDA_DEVICE_MEMORY_LIMIT_%u=%llum\n", i,
                        (unsigned long long)c->gpus[i].memory_mib);
        used += w > 0 ? (size_t)w : 0;
        unsigned cores = effective_cores(cfg, c->gpus[i].cores);
        if (cores && w >= 0) {
            w = vg_snprintf(text + used, sizeof(text) - used, "CUDA_DEVICE_SM_LIMIT_%u=%u\n", i,
                            cores);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    if (w >= 0)
        w = vg_snprintf(text + used, sizeof(text) - used,
                        "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n", dir);
    if (w < 0)
        return vg_err_set(err, -ENOSPC, "limits file too long");
    used += (size_t)w;
    int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
    if (fd < 0)
        return vg_err_set(err, -errno, "opening %s: %s", path, strerror(errno));
    ssize_t n = write(fd, text, used);
    int saved = n < 0 ? errno : EIO;
    if (n != (ssize_t)used || fchmod(fd, 0444) != 0) {
        saved = n == (ssize_t)used ? errno : saved;
        close(fd);
        return vg_err_set(err, -saved, "writing %s: %s", path, strerror(saved));
    }
    if (close(fd) != 0)
        return vg_err_set(err, -errno, "writing %s: %s", path, strerror(errno));
    return 0;
}

static int write_region(const struct dp_config *cfg, const struct annot_container *c,
                        const char *stage, struct vg_err *err)
{
    struct region_config rc_cfg;
    memset(&rc_cfg, 0, sizeof(rc_cfg));
    rc_cfg.device_count = c->gpu_count;
    for (unsigned i = 0; i < c->gpu_count; i++) {
        vg_strlcpy(rc_cfg.devices[i].uuid, c->gpus[i].uuid, sizeof(rc_cfg.devices[i].uuid));
        rc_cfg.devices[i].memory_limit = c->gpus[i].memory_mib << 20;
        rc_cfg.devices[i].sm_limit_percent = effective_cores(cfg, c->gpus[i].cores);
    }
    char path[1024];
    if (vg_snprintf(path, sizeof(path), "%s/region", stage) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return vg_err_set(err, -errno, "opening %s: %s", path, strerror(errno));
    int rc = region_init_fd(fd, &rc_cfg, err);
    close(fd);
    return rc < 0 ? vg_err_wrap(err, "%s", path) : 0;
}

/* dir with an empty "region" and "limits" file. Nothing is left behind on failure. */
static int stage_make(const char *dir, struct vg_err *err)
{
    if (mkdir(dir, 0755) != 0)
        return vg_err_set(err, -errno, "creating %s: %s", dir, strerror(errno));
    static const char *const files[] = {"region", "limits"};
    char path[1024];
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        int fd = vg_snprintf(path, sizeof(path), "%s/%s", dir, files[i]) < 0
                     ? (errno = ENAMETOOLONG, -1)
                     : open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || close(fd) != 0) {
            int rc = vg_err_set(err, -errno, "creating %s/%s: %s", dir, files[i], strerror(errno));
            struct vg_err ignored;
            dp_container_dir_remove(dir, &ignored);
            return rc;
        }
    }
    return 0;
}

/* Makes and fills stage for match (its text naming dir); nothing left on failure. */
static int stage_fill(const struct dp_config *cfg, const struct dp_match *match, const char *dir,
                      const char *stage, struct vg_err *err)
{
    int rc = stage_make(stage, err);
    if (rc < 0)
        return rc;
    rc = write_region(cfg, &match->container, stage, err);
    if (rc >= 0)
        rc = write_limits(cfg, match, dir, stage, err);
    if (rc < 0) {
        struct vg_err ignored;
        dp_container_dir_remove(stage, &ignored);
    }
    return rc;
}

/* <region_dir>/<prefix><basename of dir>, into stage[size]. */
static int stage_path(const struct dp_config *cfg, const char *prefix, const char *dir, char *stage,
                      size_t size, struct vg_err *err)
{
    const char *base = strrchr(dir, '/');
    if (vg_snprintf(stage, size, "%s/%s%s", cfg->vgpu.region_dir, prefix, base ? base + 1 : dir) <
        0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    return 0;
}

static int make_parents(const struct dp_config *cfg, struct vg_err *err)
{
    if (mkdir(cfg->vgpu.region_dir, 0755) != 0 && errno != EEXIST)
        return vg_err_set(err, -errno, "creating %s: %s", cfg->vgpu.region_dir, strerror(errno));
    /* Sticky and world-writable like /tmp: containers of any user create their board
     * files there, and none can remove another's. */
    if (mkdir(cfg->vgpu.compute_board_dir, 01777) == 0)
        chmod(cfg->vgpu.compute_board_dir, 01777);
    else if (errno != EEXIST)
        return vg_err_set(err, -errno, "creating %s: %s", cfg->vgpu.compute_board_dir,
                          strerror(errno));
    return 0;
}

/* The checks and parent directories every container directory needs. */
static int dir_begin(const struct dp_config *cfg, const struct dp_match *match, struct vg_err *err)
{
    const struct annot_container *c = &match->container;
    if (c->gpu_count == 0 || c->gpu_count > REGION_MAX_DEVICES)
        return vg_err_set(err, -EINVAL, "container %s: %u GPUs", c->name, c->gpu_count);
    return make_parents(cfg, err);
}

/* Fills <region_dir>/.new.<name> for match (its text naming dir) and renames it to target,
 * so target appears complete or not at all; nothing is left behind on failure. */
static int build(const struct dp_config *cfg, const struct dp_match *match, const char *dir,
                 const char *target, struct vg_err *err)
{
    char stage[1024];
    int rc = stage_path(cfg, DP_STAGE_PREFIX, dir, stage, sizeof(stage), err);
    if (rc == 0)
        rc = stage_fill(cfg, match, dir, stage, err);
    if (rc == 0 && rename(stage, target) != 0) {
        rc = vg_err_set(err, -errno, "renaming %s to %s: %s", stage, target, strerror(errno));
        struct vg_err ignored;
        dp_container_dir_remove(stage, &ignored);
    }
    return rc;
}

int dp_container_dir_prepare(const struct dp_config *cfg, const struct dp_match *match,
                             const char *dir, struct vg_err *err)
{
    char ready[1024];
    int rc = dir_begin(cfg, match, err);
    if (rc == 0)
        rc = stage_path(cfg, DP_READY_PREFIX, dir, ready, sizeof(ready), err);
    if (rc == 0) {
        struct vg_err ignored;
        dp_container_dir_remove(ready, &ignored); /* one made for an earlier decision */
        rc = build(cfg, match, dir, ready, err);
    }
    return rc < 0 ? vg_err_wrap(err, "preparing container directory %s", dir) : 0;
}

int dp_container_dir_create(const struct dp_config *cfg, const struct dp_match *match,
                            const char *dir, bool prepared, struct vg_err *err)
{
    int rc = dir_begin(cfg, match, err);
    if (rc < 0)
        return rc;
    struct stat st;
    if (lstat(dir, &st) == 0)
        return vg_err_set(err, -EEXIST, "%s already exists", dir);
    char ready[1024];
    if (prepared && stage_path(cfg, DP_READY_PREFIX, dir, ready, sizeof(ready), err) == 0) {
        if (rename(ready, dir) == 0)
            return 0;
        vg_log(VG_LOG_WARN, "prepared container directory unusable; making it again",
               "dir=%s err=\"%s\"", ready, strerror(errno));
        struct vg_err ignored;
        dp_container_dir_remove(ready, &ignored);
    }
    rc = build(cfg, match, dir, dir, err);
    return rc < 0 ? vg_err_wrap(err, "container directory %s", dir) : 0;
}

uint64_t dp_match_digest(const struct dp_match *m)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    const char *fields[] = {m->pod_uid, m->pod_namespace, m->pod_name, m->container.name};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        for (const char *q = fields[i];; q++) {
            h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
            if (!*q)
                break;
        }
    for (unsigned i = 0; i < m->container.gpu_count; i++) {
        const struct annot_share *g = &m->container.gpus[i];
        for (const char *q = g->uuid; *q; q++)
            h = (h ^ (unsigned char)*q) * 0x100000001b3ull;
        uint64_t v[2] = {g->memory_mib, g->cores};
        for (size_t k = 0; k < 2; k++)
            h = (h ^ v[k]) * 0x100000001b3ull;
    }
    return h;
}

int dp_container_dirs_sweep(const char *region_dir, const char *const *live_uids,
                            struct vg_err *err)
{
    DIR *d = opendir(region_dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return vg_err_set(err, -errno, "opening %s: %s", region_dir, strerror(errno));
    }
    int removed = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        const char *name = ent->d_name;
        bool stale_stage = strncmp(name, DP_STAGE_PREFIX, strlen(DP_STAGE_PREFIX)) == 0;
        if (strncmp(name, DP_READY_PREFIX, strlen(DP_READY_PREFIX)) == 0)
            name += strlen(DP_READY_PREFIX); /* prepared: kept while its pod lives */
        const char *us = strchr(name, '_');
        if (!stale_stage && (name[0] == '.' || !us || us == name))
            continue;
        size_t uid_len = stale_stage ? 0 : (size_t)(us - name);
        bool live = false;
        for (size_t i = 0; !stale_stage && live_uids[i] && !live; i++)
            live = strlen(live_uids[i]) == uid_len && strncmp(live_uids[i], name, uid_len) == 0;
        if (live)
            continue;
        char path[1024];
        if (vg_snprintf(path, sizeof(path), "%s/%s", region_dir, ent->d_name) < 0)
            continue;
        struct vg_err rerr = {0};
        if (dp_container_dir_remove(path, &rerr) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

void dp_inventory(const struct dp_config *cfg, enum annot_mode mode, const struct dp_gpu *gpus,
                  unsigned gpu_count, int64_t now, struct annot_inventory *out)
{
    memset(out, 0, sizeof(*out));
    out->heartbeat = now;
    out->mode = mode;
    out->gpu_count = gpu_count > ANNOT_MAX_GPUS ? ANNOT_MAX_GPUS : gpu_count;
    for (unsigned i = 0; i < out->gpu_count; i++) {
        struct annot_gpu *a = &out->gpus[i];
        vg_strlcpy(a->uuid, gpus[i].uuid, sizeof(a->uuid));
        vg_strlcpy(a->model, gpus[i].model, sizeof(a->model));
        a->index = gpus[i].index;
        double mem = (double)gpus[i].memory_mib * cfg->vgpu.device_memory_scaling;
        a->memory_mib = mem < 1 ? 1 : (uint64_t)mem;
        double cores = 100.0 * cfg->vgpu.device_core_scaling;
        a->cores = cores > 100 ? 100 : cores < 1 ? 1 : (unsigned)cores;
        a->slots = (unsigned)cfg->vgpu.device_split_count;
        a->numa = gpus[i].numa;
        a->healthy = gpus[i].healthy;
    }
}
