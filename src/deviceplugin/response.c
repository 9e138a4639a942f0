/* The Allocate response builder every mode shares (NVIDIA's getAllocateResponse): env,
 * mounts, device specs, CDI annotations and devices, as a plain struct (dp_response) so
 * golden tests can print it in one canonical form (dp_response_dump), then packed into
 * kubelet's AllocateResponse (dp_response_pack).
 *
 * Device specs name the node at the same path inside the container and under
 * flags.nvidiaDevRoot (default: flags.nvidiaDriverRoot) on the host, as NVIDIA's plugin
 * does. allocate.c (whole GPUs, vgpu mode), mig.c (MIG devices) and mps.c build on it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/auto.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "grpc/kubelet/api.h"

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

void dp_response_reset(struct dp_response *r)
{
    /* Only the counts: an entry is written whole when it is added, and the arrays are
     * 145 KiB, which a memset per Allocate would touch (and fault in) for nothing. */
    r->env_count = r->mount_count = r->device_count = r->annotation_count = 0;
    r->cdi_device_count = 0;
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

/* root + path without a doubled slash: "/" + "/dev/nvidia0" is "/dev/nvidia0",
 * "/run/nvidia/driver" + "/dev/nvidia0" is "/run/nvidia/driver/dev/nvidia0". */
int dp_root_path(const char *root, const char *path, char *out, size_t size)
{
    size_t len = root ? strlen(root) : 0;
    while (len > 0 && root[len - 1] == '/')
        len--;
    return vg_snprintf(out, size, "%.*s%s", (int)len, len ? root : "", path) < 0 ? -ENAMETOOLONG
                                                                                 : 0;
}

const char *dp_dev_root(const struct dpconfig *cfg)
{
    const char *root = cfg->flags.nvidia_dev_root;
    if (root == NULL || root[0] == '\0')
        root = cfg->flags.nvidia_driver_root;
    return root != NULL && root[0] != '\0' ? root : "/";
}

int dp_response_add_device(const struct dpconfig *cfg, struct dp_response *r, const char *path,
                           struct vg_err *err)
{
    for (size_t i = 0; i < r->device_count; i++)
        if (strcmp(r->devices[i].container_path, path) == 0)
            return 0;
    if (r->device_count == DP_RESPONSE_MAX_DEVICES)
        return vg_err_set(err, -ENOSPC,
                          "more than %d device nodes for one container (too many MIG devices)",
                          DP_RESPONSE_MAX_DEVICES);
    struct dp_device_spec *d = &r->devices[r->device_count];
    if (vg_strlcpy(d->container_path, path, sizeof(d->container_path)) < 0 ||
        dp_root_path(dp_dev_root(cfg), path, d->host_path, sizeof(d->host_path)) < 0)
        return vg_err_set(err, -ENAMETOOLONG,
                          "device node %s under flags.nvidiaDevRoot '%s': path too long", path,
                          dp_dev_root(cfg));
    vg_strlcpy(d->permissions, "rw", sizeof(d->permissions));
    r->device_count++;
    return 0;
}

int dp_response_add_gpu_nodes(const struct dpconfig *cfg, struct dp_response *r, unsigned minor,
                              struct vg_err *err)
{
    char path[64];
    vg_snprintf(path, sizeof(path), "/dev/nvidia%u", minor);
    const char *const nodes[] = {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                                 path};
    for (size_t i = 0; i < sizeof(nodes) / sizeof(nodes[0]); i++) {
        int rc = dp_response_add_device(cfg, r, nodes[i], err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* CDI: one annotation `<cdiAnnotationPrefix>vgpu-device-plugin_<hash>` naming every
 * device (cdi-annotations), and/or the CRI's CDI device list (cdi-cri). The key must be
 * unique among the container's annotations, also across resources: it is derived from
 * the device list (FNV-1a), which keeps responses reproducible. */
static int cdi_response(const struct dpconfig *cfg, char ids[][ANNOT_UUID_MAX], size_t n,
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
        if ((list & DPCONFIG_LIST_CDI_CRI) && out->cdi_device_count < DP_MAX_GPUS)
            vg_snprintf(out->cdi_devices[out->cdi_device_count++].name,
                        sizeof(out->cdi_devices[0].name), "%s=%s", DP_CDI_KIND, ids[i]);
    }
    if (!(list & DPCONFIG_LIST_CDI_ANNOTATIONS))
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

int dp_response_list_id(const struct dpconfig *cfg, struct dp_response *r, char *visible,
                        size_t size, size_t *used, const char *id, struct vg_err *err)
{
    int w = vg_snprintf(visible + *used, size - *used, "%s%s", *used ? "," : "", id);
    if (w < 0)
        return vg_err_set(err, -ENOSPC, "NVIDIA_VISIBLE_DEVICES too long");
    *used += (size_t)w;
    if (!(cfg->flags.plugin.device_list_strategy & DPCONFIG_LIST_VOLUME_MOUNTS))
        return 0;
    char path[256];
    if (vg_snprintf(path, sizeof(path), "/var/run/nvidia-container-devices/%s", id) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "device ID '%s' too long", id);
    return add_mount(r, path, "/dev/null", false, err);
}

/* What every mode returns for a set of GPUs (NVIDIA's getAllocateResponse): the visible
 * devices by deviceListStrategy (every strategy of the list, combined) and
 * deviceIDStrategy, device specs when passDeviceSpecs (not with CDI strategies only: the
 * CDI specification carries the device nodes). gpu_list holds GPU table indices,
 * de-duplicated, in order. */
int dp_response_for_gpus(const struct dpconfig *cfg, const struct dp_gpu *gpus,
                         const unsigned *gpu_list, size_t n, struct dp_response *out,
                         struct vg_err *err)
{
    char visible[1024] = "";
    size_t used = 0;
    char ids[DP_MAX_GPUS][ANNOT_UUID_MAX];
    unsigned list = cfg->flags.plugin.device_list_strategy;
    bool legacy = list & (DPCONFIG_LIST_ENVVAR | DPCONFIG_LIST_VOLUME_MOUNTS);
    for (size_t i = 0; i < n && i < DP_MAX_GPUS; i++) {
        const struct dp_gpu *g = &gpus[gpu_list[i]];
        char *id = ids[i];
        if (cfg->flags.plugin.device_id_strategy == DPCONFIG_DEVICE_ID_INDEX)
            vg_snprintf(id, ANNOT_UUID_MAX, "%u", g->index);
        else
            vg_strlcpy(id, g->uuid, ANNOT_UUID_MAX);
        int rc = dp_response_list_id(cfg, out, visible, sizeof(visible), &used, id, err);
        if (rc == 0 && cfg->flags.plugin.pass_device_specs && legacy)
            rc = dp_response_add_gpu_nodes(cfg, out, g->minor, err);
        if (rc < 0)
            return rc;
    }
    int rc = cdi_response(cfg, ids, n < DP_MAX_GPUS ? n : DP_MAX_GPUS, out, err);
    if (rc < 0)
        return rc;
    return dp_response_add_visible(cfg, visible, out, err);
}

const char *dp_container_dev_root(const struct dpconfig *cfg)
{
    const char *root = cfg->flags.plugin.container_driver_root;
    char dev[1024];
    struct stat st;
    if (root != NULL && root[0] != '\0' && dp_root_path(root, "/dev", dev, sizeof(dev)) == 0 &&
        stat(dev, &st) == 0 && S_ISDIR(st.st_mode))
        return root;
    return "/";
}

int dp_imex_check(struct dpconfig *cfg, struct vg_err *err)
{
    struct dpconfig_uint_list *ids = &cfg->imex.channel_ids;
    const char *root = dp_container_dev_root(cfg);
    for (size_t i = 0; i < ids->count; i++) {
        char node[64], path[1024];
        struct stat st;
        vg_snprintf(node, sizeof(node), DP_IMEX_CHANNEL_DIR "/channel%llu",
                    (unsigned long long)ids->items[i]);
        if (dp_root_path(root, node, path, sizeof(path)) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "imex.channelIDs: path too long");
        if (stat(path, &st) == 0)
            continue;
        if (cfg->imex.required)
            return vg_err_set(err, -ENOENT,
                              "imex.channelIDs: IMEX channel %llu: %s does not exist "
                              "(imex.required is true)",
                              (unsigned long long)ids->items[i], path);
        vg_log(VG_LOG_WARN, "IMEX channel missing: containers get no IMEX channel",
               "channel=%llu path=%s", (unsigned long long)ids->items[i], path);
        ids->count = 0; /* [] or [0]: nothing left to pass */
        return 0;
    }
    return 0;
}

/* IMEX channels (imex.channelIDs, already checked by dp_imex_check): NVIDIA's
 * NVIDIA_IMEX_CHANNELS for the container toolkit, and with passDeviceSpecs the channel
 * device nodes themselves. */
static int add_imex(const struct dpconfig *cfg, struct dp_response *out, struct vg_err *err)
{
    const struct dpconfig_uint_list *ids = &cfg->imex.channel_ids;
    if (ids->count == 0)
        return 0;
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < ids->count; i++) {
        int w = vg_snprintf(list + used, sizeof(list) - used, "%s%llu", i ? "," : "",
                            (unsigned long long)ids->items[i]);
        if (w < 0)
            return vg_err_set(err, -ENOSPC, "NVIDIA_IMEX_CHANNELS too long");
        used += (size_t)w;
        if (cfg->flags.plugin.pass_device_specs) {
            char path[64];
            vg_snprintf(path, sizeof(path), DP_IMEX_CHANNEL_DIR "/channel%llu",
                        (unsigned long long)ids->items[i]);
            int rc = dp_response_add_device(cfg, out, path, err);
            if (rc < 0)
                return rc;
        }
    }
    return add_env(out, "NVIDIA_IMEX_CHANNELS", list, err);
}

int dp_response_add_visible(const struct dpconfig *cfg, const char *visible,
                            struct dp_response *out, struct vg_err *err)
{
    unsigned list = cfg->flags.plugin.device_list_strategy;
    const char *devices = (list & DPCONFIG_LIST_ENVVAR) ? visible
                          : (list & DPCONFIG_LIST_VOLUME_MOUNTS)
                              ? "/var/run/nvidia-container-devices"
                              : NULL;
    int rc = 0;
    if ((devices && (rc = add_env(out, "NVIDIA_VISIBLE_DEVICES", devices, err)) < 0) ||
        (cfg->flags.gds_enabled && (rc = add_env(out, "NVIDIA_GDS", "enabled", err)) < 0) ||
        (cfg->flags.mofed_enabled && (rc = add_env(out, "NVIDIA_MOFED", "enabled", err)) < 0) ||
        (cfg->flags.gdrcopy_enabled && (rc = add_env(out, "NVIDIA_GDRCOPY", "enabled", err)) < 0))
        return rc;
    return add_imex(cfg, out, err);
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
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse *crs = xcalloc(count ? count : 1, sizeof(*crs));
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse **crp =
        xcalloc(count ? count : 1, sizeof(*crp));
    size_t envs = 0, mounts = 0, devs = 0, anns = 0, cdis = 0;
    for (size_t i = 0; i < count; i++) {
        envs += resps[i]->env_count;
        mounts += resps[i]->mount_count;
        devs += resps[i]->device_count;
        anns += resps[i]->annotation_count;
        cdis += resps[i]->cdi_device_count;
    }
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse__AnnotationsEntry *av =
        xcalloc(anns + 1, sizeof(*av));
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse__AnnotationsEntry **avp =
        xcalloc(anns + 1, sizeof(*avp));
    VG_AUTO_FREE V1beta1__CDIDevice *cv = xcalloc(cdis + 1, sizeof(*cv));
    VG_AUTO_FREE V1beta1__CDIDevice **cvp = xcalloc(cdis + 1, sizeof(*cvp));
    size_t a = 0, c = 0;
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse__EnvsEntry *ev = xcalloc(envs + 1, sizeof(*ev));
    VG_AUTO_FREE V1beta1__ContainerAllocateResponse__EnvsEntry **evp =
        xcalloc(envs + 1, sizeof(*evp));
    VG_AUTO_FREE V1beta1__Mount *mv = xcalloc(mounts + 1, sizeof(*mv));
    VG_AUTO_FREE V1beta1__Mount **mvp = xcalloc(mounts + 1, sizeof(*mvp));
    VG_AUTO_FREE V1beta1__DeviceSpec *dv = xcalloc(devs + 1, sizeof(*dv));
    VG_AUTO_FREE V1beta1__DeviceSpec **dvp = xcalloc(devs + 1, sizeof(*dvp));
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
    (void)err;
    return 0;
}
