/* A claim's files on the node. Each request of the claim (a subrequest counts as its
 * parent: one of them is allocated) is one "container" of the device plugin's vgpu mode:
 * the directory <regionDir>/<claim uid>_<request> with the shared region and the
 * read-only limits file, the compute slots on the board, and the container edits
 * dp_allocate_vgpu gives (env, mounts of the directory, the limits file at libvgpu's
 * fixed path, libvgpu.so and /etc/ld.so.preload, the board) plus the GPUs' device nodes.
 * Those edits become one CDI device `vgpu.io/gpu=<claim uid>_<request>` in the claim's
 * spec file <cdi-dir>/vgpu.io-gpu_<claim uid>.json. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/fs.h"
#include "base/auto_json.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "dra/dra.h"
#include "dra/slices.h"

VG_DEFINE_AUTO(dra_closedirp, DIR, closedir)

int dra_cdi_spec_path(const char *cdi_dir, const char *uid, char *out, size_t size,
                      struct vg_err *err)
{
    if (!annot_pod_uid(uid))
        return vg_err_set(err, -EINVAL, "claim uid is not a Kubernetes uid");
    if (vg_snprintf(out, size, "%s/%s-%s_%s.json", cdi_dir, DRA_CDI_VENDOR, DRA_CDI_CLASS, uid) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "CDI spec path too long");
    return 0;
}

/* The GPU (and MIG device) the slices publish as device: "gpu-<minor>" for a GPU without
 * MIG, "gpu-<minor>-mig-<gi>-<ci>" for a MIG device (slices.c, dra_gpu_device_name). */
static const struct dp_gpu *device_gpu(const struct dra_node *node, const char *device,
                                       const struct dp_mig **mig)
{
    char name[DRA_DEVICE_NAME_MAX];
    *mig = NULL;
    for (unsigned i = 0; i < node->gpu_count; i++) {
        const struct dp_gpu *g = &node->gpus[i];
        if (!g->mig_enabled) {
            dra_gpu_device_name(g, NULL, name);
            if (strcmp(name, device) == 0)
                return g;
            continue;
        }
        for (unsigned m = 0; m < g->mig_count && m < DP_MAX_MIGS; m++) {
            dra_gpu_device_name(g, &g->migs[m], name);
            if (strcmp(name, device) == 0) {
                *mig = &g->migs[m];
                return g;
            }
        }
    }
    return NULL;
}

/* The MIG device (and its GPU) of a share's uuid, or NULL: a share of a whole GPU. */
static const struct dp_mig *uuid_mig(const struct dra_node *node, const char *uuid,
                                     const struct dp_gpu **gpu)
{
    for (unsigned i = 0; i < node->gpu_count; i++)
        for (unsigned m = 0;
             node->gpus[i].mig_enabled && m < node->gpus[i].mig_count && m < DP_MAX_MIGS; m++)
            if (strcmp(node->gpus[i].migs[m].uuid, uuid) == 0) {
                *gpu = &node->gpus[i];
                return &node->gpus[i].migs[m];
            }
    return NULL;
}

static bool is_mig_group(const struct dra_group *g)
{
    return g->container.gpu_count > 0 && strncmp(g->container.gpus[0].uuid, "MIG-", 4) == 0;
}

static const struct dp_gpu *uuid_gpu(const struct dra_node *node, const char *uuid)
{
    for (unsigned i = 0; i < node->gpu_count; i++)
        if (strcmp(node->gpus[i].uuid, uuid) == 0)
            return &node->gpus[i];
    return NULL;
}

static void group_match(const struct dra_prepared *p, const struct dra_group *g, struct dp_match *m)
{
    memset(m, 0, sizeof(*m));
    vg_strlcpy(m->pod_uid, p->uid, sizeof m->pod_uid);
    vg_strlcpy(m->pod_namespace, p->ns, sizeof m->pod_namespace);
    vg_strlcpy(m->pod_name, p->name, sizeof m->pod_name);
    m->container = g->container;
}

/* Whether dp_board_create made a slot for this share (see allocate.c): a compute limit
 * below 100 %, core limits not disabled. */
static bool has_slot(const struct dpconfig *cfg, const struct annot_share *s)
{
    return !cfg->vgpu.disable_core_limit && s->cores > 0 && s->cores < 100;
}

static void remove_slots(const struct dra_node *node, const char *uid, const struct dra_group *g)
{
    char name[256], turn[1024], slot[1024];
    struct vg_err ignored;
    if (vg_snprintf(name, sizeof name, "%s_%s", uid, g->name) < 0)
        return;
    for (unsigned k = 0; k < g->container.gpu_count; k++) {
        const struct annot_share *s = &g->container.gpus[k];
        if (has_slot(node->cfg, s) &&
            dp_board_paths(node->cfg->vgpu.compute_board_dir, s->uuid, name, s->cores, false, turn,
                           slot, sizeof slot, &ignored) == 0)
            unlink(slot);
    }
}

static json_t *mount_json(const struct dp_mount *m)
{
    return json_pack("{s:s, s:s, s:[s,s,s,s]}", "hostPath", m->host_path, "containerPath",
                     m->container_path, "options", m->read_only ? "ro" : "rw", "nosuid", "nodev",
                     "bind");
}

VG_DEFINE_AUTO(dra_freep, struct dp_response, free)

/* A request of MIG devices gets what the device plugin's MIG mode gives a container
 * (dp_allocate_mig): the MIG devices whole, isolated by the hardware, so no claim
 * directory, limits or libvgpu; plus their device nodes (the control devices, the parent
 * GPU's and the MIG device's two capability devices) whatever passDeviceSpecs says, as
 * a CDI device has no other way to get them. */
static int mig_edits(const struct dra_node *node, const struct dra_group *g,
                     struct dp_response *resp, struct vg_err *err)
{
    struct dp_device devs[ANNOT_MAX_GPUS];
    char *ids[ANNOT_MAX_GPUS];
    struct dp_resource res = {.mig = true, .devices = devs, .replicas = 1};
    vg_strlcpy(res.name, "gpu.vgpu.io/mig", sizeof res.name);
    for (unsigned k = 0; k < g->container.gpu_count; k++) {
        const struct dp_gpu *gpu = NULL;
        const struct dp_mig *mig = uuid_mig(node, g->container.gpus[k].uuid, &gpu);
        if (mig == NULL)
            return vg_err_set(err, -ENOENT, "MIG device %s is not on this node",
                              g->container.gpus[k].uuid);
        vg_strlcpy(devs[k].id, mig->uuid, sizeof devs[k].id);
        devs[k].gpu = (unsigned)(gpu - node->gpus);
        ids[k] = devs[k].id;
    }
    res.device_count = res.device_cap = g->container.gpu_count;
    int rc = dp_allocate_mig(node->cfg, &res, node->gpus, node->gpu_count, ids,
                             g->container.gpu_count, resp, err);
    /* CUDA's own selection too: the runtime's hook reads NVIDIA_VISIBLE_DEVICES, a
     * container given the device nodes by CDI alone is confined by CUDA_VISIBLE_DEVICES
     * (MIG-<uuid> entries, which CUDA takes). */
    char visible[ANNOT_MAX_GPUS * ANNOT_UUID_MAX] = "";
    for (unsigned k = 0; rc == 0 && k < g->container.gpu_count; k++)
        vg_snprintf(visible + strlen(visible), sizeof visible - strlen(visible), "%s%s",
                    k ? "," : "", devs[k].id);
    if (rc == 0)
        rc = dp_response_add_env(resp, "CUDA_VISIBLE_DEVICES", visible, err);
    for (unsigned k = 0; rc == 0 && k < g->container.gpu_count; k++) {
        const struct dp_gpu *gpu = node->gpus + devs[k].gpu;
        const struct dp_mig *mig = uuid_mig(node, devs[k].id, &gpu);
        char path[64];
        rc = dp_response_add_gpu_nodes(node->cfg, resp, gpu->minor, err);
        const int caps[] = {mig->gi_cap, mig->ci_cap};
        for (size_t c = 0; rc == 0 && c < 2; c++) {
            if (caps[c] < 0)
                continue;
            vg_snprintf(path, sizeof path, "/dev/nvidia-caps/nvidia-cap%d", caps[c]);
            rc = dp_response_add_device(node->cfg, resp, path, err);
        }
    }
    return rc;
}

json_t *dra_cdi_spec(const struct dra_node *node, const struct dra_prepared *p, struct vg_err *err)
{
    VG_AUTO_JSON json_t *devices = json_array();
    VG_AUTO(dra_freep) struct dp_response *resp = xcalloc(1, sizeof(*resp));
    for (unsigned i = 0; i < p->group_count; i++) {
        const struct dra_group *g = &p->groups[i];
        if (is_mig_group(g)) {
            if (mig_edits(node, g, resp, err) < 0)
                return NULL;
        } else {
            struct dp_match m;
            group_match(p, g, &m);
            char dir[1024];
            if (dp_container_dir_path(node->cfg->vgpu.region_dir, p->uid, g->name, dir, sizeof dir,
                                      err) < 0 ||
                dp_allocate_vgpu(node->cfg, node->gpus, node->gpu_count, &m, dir, resp, err) < 0)
                return NULL;
        }
        for (unsigned k = 0; k < g->container.gpu_count && !is_mig_group(g); k++) {
            const struct dp_gpu *gpu = uuid_gpu(node, g->container.gpus[k].uuid);
            if (gpu == NULL) {
                vg_err_set(err, -ENOENT, "GPU %s is not on this node", g->container.gpus[k].uuid);
                return NULL;
            }
            if (dp_response_add_gpu_nodes(node->cfg, resp, gpu->minor, err) < 0)
                return NULL;
        }
        json_t *env = json_array(), *nodes = json_array(), *mounts = json_array();
        char text[sizeof(resp->envs[0].key) + sizeof(resp->envs[0].value) + 2];
        for (size_t e = 0; e < resp->env_count; e++) {
            vg_snprintf(text, sizeof text, "%s=%s", resp->envs[e].key, resp->envs[e].value);
            json_array_append_new(env, json_string(text));
        }
        for (size_t d = 0; d < resp->device_count; d++)
            json_array_append_new(
                nodes, json_pack("{s:s, s:s, s:s}", "path", resp->devices[d].container_path,
                                 "hostPath", resp->devices[d].host_path, "permissions", "rw"));
        for (size_t k = 0; k < resp->mount_count; k++)
            json_array_append_new(mounts, mount_json(&resp->mounts[k]));
        char name[256];
        vg_snprintf(name, sizeof name, "%s_%s", p->uid, g->name);
        json_array_append_new(devices,
                              json_pack("{s:s, s:{s:o, s:o, s:o}}", "name", name, "containerEdits",
                                        "env", env, "deviceNodes", nodes, "mounts", mounts));
    }
    json_t *spec = json_pack("{s:s, s:s, s:O}", "cdiVersion", DRA_CDI_VERSION, "kind", DRA_CDI_KIND,
                             "devices", devices);
    if (spec == NULL)
        vg_err_set(err, -ENOMEM, "building the CDI spec");
    return spec;
}

/* Fills out's groups and devices from claim. */
static int plan(const struct dra_node *node, const struct dra_claim *claim,
                struct dra_prepared *out, struct vg_err *err)
{
    for (unsigned i = 0; i < claim->count; i++) {
        const struct dra_result *r = &claim->results[i];
        if (strcmp(r->pool, node->node_name) != 0)
            return vg_err_set(err, -ENOENT, "request %s: device %s of pool %s is not on node %s",
                              r->request, r->device, r->pool, node->node_name);
        const struct dp_mig *mig;
        const struct dp_gpu *gpu = device_gpu(node, r->device, &mig);
        if (gpu == NULL)
            return vg_err_set(err, -ENOENT, "request %s: this node has no device %s", r->request,
                              r->device);
        char group[ANNOT_LABEL_MAX + 1];
        size_t glen = strcspn(r->request, "/");
        if (glen >= sizeof group)
            return vg_err_set(err, -EINVAL, "request %s: name too long", r->request);
        memcpy(group, r->request, glen);
        group[glen] = '\0';
        struct dra_group *g = NULL;
        for (unsigned k = 0; k < out->group_count && !g; k++)
            if (strcmp(out->groups[k].name, group) == 0)
                g = &out->groups[k];
        if (g == NULL) {
            g = &out->groups[out->group_count++];
            memset(g, 0, sizeof(*g));
            vg_strlcpy(g->name, group, sizeof g->name);
            vg_strlcpy(g->container.name, group, sizeof g->container.name);
        }
        const char *uuid = mig ? mig->uuid : gpu->uuid;
        uint64_t memory_mib = mig ? mig->memory_mib : gpu->memory_mib;
        for (unsigned k = 0; k < g->container.gpu_count; k++)
            if (strcmp(g->container.gpus[k].uuid, uuid) == 0)
                return vg_err_set(err, -EINVAL, "request %s: device %s allocated twice", r->request,
                                  r->device);
        if (g->container.gpu_count > 0 && is_mig_group(g) != (mig != NULL))
            return vg_err_set(err, -EINVAL, "request %s: MIG devices and whole GPUs in one request",
                              r->request);
        if (g->container.gpu_count == ANNOT_MAX_GPUS)
            return vg_err_set(err, -E2BIG, "request %s: more than %d GPUs", r->request,
                              ANNOT_MAX_GPUS);
        struct annot_share *s = &g->container.gpus[g->container.gpu_count++];
        vg_strlcpy(s->uuid, uuid, sizeof s->uuid);
        s->memory_mib = r->has_memory ? r->memory_mib : memory_mib;
        if (s->memory_mib == 0 || s->memory_mib > memory_mib)
            return vg_err_set(err, -EINVAL,
                              "request %s: device %s: %llu MiB consumed of a %s with %llu MiB",
                              r->request, r->device, (unsigned long long)s->memory_mib,
                              mig ? "MIG device" : "GPU", (unsigned long long)memory_mib);
        /* 0 or no cores consumed: no compute limit (never the device plugin's default). */
        s->cores = r->has_cores && r->cores > 0 ? r->cores : 100;
        if (mig) { /* allocated whole: the hardware isolates it */
            s->memory_mib = mig->memory_mib;
            s->cores = 100;
        }
        struct dra_device *d = &out->devices[out->device_count++];
        vg_strlcpy(d->request, r->request, sizeof d->request);
        vg_strlcpy(d->pool, r->pool, sizeof d->pool);
        vg_strlcpy(d->device, r->device, sizeof d->device);
        vg_strlcpy(d->share_id, r->share_id, sizeof d->share_id);
        vg_snprintf(d->cdi_id, sizeof d->cdi_id, "%s=%s_%s", DRA_CDI_KIND, claim->uid, group);
    }
    return 0;
}

int dra_prepare(const struct dra_node *node, const struct dra_claim *claim,
                struct dra_prepared *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    vg_strlcpy(out->uid, claim->uid, sizeof out->uid);
    vg_strlcpy(out->ns, claim->ns, sizeof out->ns);
    vg_strlcpy(out->name, claim->name, sizeof out->name);
    int rc = plan(node, claim, out, err);
    if (rc < 0)
        return vg_err_wrap(err, "claim %s/%s", claim->ns, claim->name);
    struct vg_err ignored;
    /* Whatever a crashed attempt left for this claim goes first. */
    dra_unprepare(node, claim->uid, out, &ignored);
    for (unsigned i = 0; i < out->group_count; i++) {
        struct dp_match m;
        char dir[1024];
        if (is_mig_group(&out->groups[i]))
            continue; /* nothing on disk but the CDI spec */
        group_match(out, &out->groups[i], &m);
        if ((rc = dp_container_dir_path(node->cfg->vgpu.region_dir, out->uid, out->groups[i].name,
                                        dir, sizeof dir, err)) < 0 ||
            (rc = dp_container_create(node->cfg, &m, dir, false, err)) < 0)
            goto undo;
    }
    if (out->group_count > 0) {
        char path[1024];
        VG_AUTO_JSON json_t *spec = dra_cdi_spec(node, out, err);
        if (spec == NULL) {
            rc = err->code ? err->code : -ENOMEM;
            goto undo;
        }
        VG_AUTO_FREE char *text = json_dumps(spec, JSON_COMPACT);
        if (mkdir(node->cdi_dir, 0755) != 0 && errno != EEXIST) {
            rc = vg_err_errno(err, errno, "creating %s", node->cdi_dir);
            goto undo;
        }
        if ((rc = dra_cdi_spec_path(node->cdi_dir, out->uid, path, sizeof path, err)) < 0 ||
            /* Through path.tmp (a name the CDI cache does not read), so a runtime never
             * reads half a spec. Not synced: only a power loss loses unsynced data, and
             * after one the node's boot ID has changed, so the plugin's start releases
             * every claim of the checkpoint anyway (the checkpoint itself is synced). */
            (rc = vg_write_file_atomic(path, text, strlen(text), 0644, 0, err)) < 0)
            goto undo;
    }
    return 0;
undo:
    dra_unprepare(node, claim->uid, out, &ignored);
    return vg_err_wrap(err, "claim %s/%s", claim->ns, claim->name);
}

int dra_unprepare(const struct dra_node *node, const char *uid, const struct dra_prepared *p,
                  struct vg_err *err)
{
    char path[1024];
    int rc = dra_cdi_spec_path(node->cdi_dir, uid, path, sizeof path, err);
    if (rc < 0)
        return rc;
    if (unlink(path) != 0 && errno != ENOENT)
        return vg_err_errno(err, errno, "removing %s", path);
    const char *region = node->cfg->vgpu.region_dir;
    if (p) {
        /* The record names every directory: no scan. */
        for (unsigned i = 0; i < p->group_count; i++) {
            remove_slots(node, uid, &p->groups[i]);
            if ((rc = dp_container_dir_path(region, uid, p->groups[i].name, path, sizeof path,
                                            err)) < 0 ||
                (rc = dp_container_dir_remove(path, err)) < 0)
                return rc;
        }
        return 0;
    }
    VG_AUTO(dra_closedirp) DIR *d = opendir(region);
    if (d == NULL)
        return errno == ENOENT ? 0 : vg_err_errno(err, errno, "opening %s", region);
    size_t ulen = strlen(uid);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, uid, ulen) != 0 || ent->d_name[ulen] != '_' ||
            !annot_dns_label(ent->d_name + ulen + 1))
            continue;
        if (vg_snprintf(path, sizeof path, "%s/%s", region, ent->d_name) < 0)
            continue;
        if ((rc = dp_container_dir_remove(path, err)) < 0)
            return rc;
    }
    return 0;
}

/* The claim uid a name of ours begins with (after prefix): "<uid>_<request>" or
 * "<uid>.json"-like names; into uid[DRA_UID_MAX]. */
static bool name_uid(const char *name, const char *prefix, char end, char *uid)
{
    size_t plen = strlen(prefix);
    if (strncmp(name, prefix, plen) != 0)
        return false;
    name += plen;
    const char *e = strchr(name, end);
    if (e == NULL || (size_t)(e - name) >= DRA_UID_MAX)
        return false;
    memcpy(uid, name, (size_t)(e - name));
    uid[e - name] = '\0';
    return annot_pod_uid(uid);
}

static bool known(const struct dra_checkpoint *cp, const char *uid)
{
    for (size_t i = 0; i < cp->count; i++)
        if (strcmp(cp->claims[i]->uid, uid) == 0)
            return true;
    return false;
}

/* Removes the slot files of claim uid on every GPU of the board. */
static void remove_uid_slots(const char *board, const char *uid)
{
    VG_AUTO(dra_closedirp) DIR *d = opendir(board);
    struct dirent *gpu;
    size_t ulen = strlen(uid);
    while (d && (gpu = readdir(d)) != NULL) {
        char dir[1024], path[1400];
        if (gpu->d_name[0] == '.' || vg_snprintf(dir, sizeof dir, "%s/%s", board, gpu->d_name) < 0)
            continue;
        VG_AUTO(dra_closedirp) DIR *g = opendir(dir);
        struct dirent *ent;
        while (g && (ent = readdir(g)) != NULL)
            if (strncmp(ent->d_name, uid, ulen) == 0 && ent->d_name[ulen] == '_' &&
                vg_snprintf(path, sizeof path, "%s/%s", dir, ent->d_name) >= 0)
                unlink(path);
    }
}

int dra_sweep_orphans(const struct dra_node *node, const struct dra_checkpoint *cp,
                      unsigned *removed, struct vg_err *err)
{
    *removed = 0;
    int rc = 0;
    char uid[DRA_UID_MAX], path[1400];
    const char *region = node->cfg->vgpu.region_dir;
    VG_AUTO(dra_closedirp) DIR *d = opendir(region);
    struct dirent *ent;
    while (d && (ent = readdir(d)) != NULL) {
        if (!name_uid(ent->d_name, ent->d_name[0] == '.' ? DP_STAGE_PREFIX : "", '_', uid) ||
            known(cp, uid) || vg_snprintf(path, sizeof path, "%s/%s", region, ent->d_name) < 0)
            continue;
        struct vg_err e = {0};
        if (dp_container_dir_remove(path, &e) < 0) {
            if (rc == 0)
                rc = vg_err_set(err, e.code, "%s", e.msg);
            continue; /* the others still go */
        }
        remove_uid_slots(node->cfg->vgpu.compute_board_dir, uid);
        (*removed)++;
    }
    VG_AUTO(dra_closedirp) DIR *c = opendir(node->cdi_dir);
    char prefix[64];
    vg_snprintf(prefix, sizeof prefix, "%s-%s_", DRA_CDI_VENDOR, DRA_CDI_CLASS);
    while (c && (ent = readdir(c)) != NULL) {
        if (!name_uid(ent->d_name, prefix, '.', uid) || known(cp, uid) ||
            vg_snprintf(path, sizeof path, "%s/%s", node->cdi_dir, ent->d_name) < 0)
            continue;
        if (unlink(path) != 0 && errno != ENOENT) {
            if (rc == 0)
                rc = vg_err_errno(err, errno, "removing %s", path);
            continue;
        }
        remove_uid_slots(node->cfg->vgpu.compute_board_dir, uid);
        (*removed)++;
    }
    return rc;
}
