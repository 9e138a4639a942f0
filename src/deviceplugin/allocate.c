/* Allocate of whole GPUs (timeSlicing and vgpu modes), per-container directories and the
 * inventory value. The response itself is assembled by response.c. In vgpu mode the
 * container gets a directory of its own under vgpu.regionDir, whose files are mounted at
 * the same paths inside the container (so the paths in env and in the limits file are true
 * on both sides; the directory itself is not, so a container cannot add files to it that
 * the host would read), holding:
 *   region  the shared region (src/region), limits per GPU UUID, mode 0666;
 *   etc/    mounted read-only over itself and at /etc/vgpu, so a process in the container
 *           cannot raise its own limit, holding
 *     limits      the libvgpu limits file (docs/protocol.md), 0444;
 *     generation  the limits' generation (VGPU_GENERATION_PATH), 0444.
 * A directory, not the file, is mounted so that a live resize can replace the limits file
 * by rename and every process sees the new one (a bind-mounted file would keep showing
 * the inode it was mounted with); the generation, raised in place after the rename, tells
 * libvgpu to read it again (dp_container_limits_update). Readers on the host take
 * etc/limits, or the limits file of a directory made before etc/ existed.
 * The directory's existence is also the record that the container was allocated
 * (match.c), and its name `<pod uid>_<container>` is what cleanup keys on.
 *
 * The compute board (vgpu.computeBoardDir, docs/compute.md) is mounted read-only; over it,
 * writable, the turn file of each GPU the container has a share of (<uuid>.board, which
 * every limited container on that GPU writes) and the container's own slot file
 * (<uuid>/<pod uid>_<container>.<percent>.slot): a container writes its own slots and
 * nothing of its neighbours'. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/fs.h"
#include "base/log.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "libvgpu/compute.h"
#include "libvgpu/config.h" /* VGPU_LIMITS_PATH */
#include "region/region.h"

VG_DEFINE_AUTO(closedirp, DIR, closedir)

int dp_allocate_shared(const struct dpconfig *cfg, const struct dp_resource *resource,
                       const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                       size_t id_count, struct dp_response *out, struct vg_err *err)
{
    if (resource->mig)
        return dp_allocate_mig(cfg, resource, gpus, gpu_count, ids, id_count, out, err);
    dp_response_reset(out);
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
    return dp_response_for_gpus(cfg, gpus, list, n, out, err);
}

static unsigned effective_cores(const struct dpconfig *cfg, unsigned cores)
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

int dp_allocate_vgpu(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                     const struct dp_match *match, const char *container_dir,
                     struct dp_response *out, struct vg_err *err)
{
    dp_response_reset(out);
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
    int rc = dp_response_for_gpus(cfg, gpus, list, c->gpu_count, out, err);
    if (rc < 0)
        return rc;
    char key[64], value[1024];
    for (unsigned i = 0; i < c->gpu_count; i++) {
        vg_snprintf(key, sizeof(key), "CUDA_DEVICE_MEMORY_LIMIT_%u", i);
        vg_snprintf(value, sizeof(value), "%llum", (unsigned long long)c->gpus[i].memory_mib);
        if ((rc = dp_response_add_env(out, key, value, err)) < 0)
            return rc;
    }
    unsigned first = c->gpu_count ? effective_cores(cfg, c->gpus[0].cores) : 0;
    if (first) {
        vg_snprintf(value, sizeof(value), "%u", first);
        if ((rc = dp_response_add_env(out, "CUDA_DEVICE_SM_LIMIT", value, err)) < 0)
            return rc;
    }
    for (unsigned i = 1; i < c->gpu_count; i++) {
        unsigned cores = effective_cores(cfg, c->gpus[i].cores);
        if (cores == first)
            continue;
        vg_snprintf(key, sizeof(key), "CUDA_DEVICE_SM_LIMIT_%u", i);
        vg_snprintf(value, sizeof(value), "%u", cores ? cores : 100);
        if ((rc = dp_response_add_env(out, key, value, err)) < 0)
            return rc;
    }
    char region[1024], etc[1024], limits[1024];
    if (vg_snprintf(region, sizeof(region), "%s/region", container_dir) < 0 ||
        vg_snprintf(etc, sizeof(etc), "%s/" DP_LIMITS_DIR, container_dir) < 0 ||
        vg_snprintf(limits, sizeof(limits), "%s/limits", etc) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "container directory path too long");
    const char *libvgpu = cfg->vgpu.libvgpu_path, *board = cfg->vgpu.compute_board_dir;
    /* The compute limiters of all containers on the node see each other on one board
     * (docs/compute.md): all of it read-only, its own slot and the turn writable. */
    if ((rc = dp_response_add_env(out, "CUDA_DEVICE_MEMORY_SHARED_CACHE", region, err)) < 0 ||
        (rc = dp_response_add_mount(out, region, region, false, err)) < 0 ||
        (rc = dp_response_add_env(out, "VGPU_LIMITS_FILE", limits, err)) < 0 ||
        (rc = dp_response_add_mount(out, etc, etc, true, err)) < 0 ||
        (rc = dp_response_add_mount(out, VGPU_LIMITS_DIR, etc, true, err)) < 0)
        return rc;
    if (cfg->vgpu.device_memory_scaling > 1.0 &&
        (rc = dp_response_add_env(out, "CUDA_OVERSUBSCRIBE", "true", err)) < 0)
        return rc;
    if ((rc = dp_response_add_mount(out, libvgpu, libvgpu, true, err)) < 0 ||
        (rc = dp_response_add_mount(out, "/etc/ld.so.preload", cfg->vgpu.ld_so_preload_path, true,
                                    err)) < 0 ||
        (rc = dp_response_add_env(out, "VGPU_COMPUTE_BOARD", board, err)) < 0 ||
        (rc = dp_response_add_mount(out, board, board, true, err)) < 0)
        return rc;
    const char *name = strrchr(container_dir, '/');
    name = name != NULL ? name + 1 : container_dir;
    bool slots = false;
    for (unsigned i = 0; i < c->gpu_count; i++) {
        unsigned cores = dp_board_cores(cfg, match, i);
        char turn[1024], slot[1024];
        if (cores == 0)
            continue;
        if ((rc = dp_board_paths(board, c->gpus[i].uuid, name, cores,
                                 match->priority_given && match->priority == 0, turn, slot,
                                 sizeof turn, err)) < 0 ||
            (rc = dp_response_add_mount(out, turn, turn, false, err)) < 0 ||
            (rc = dp_response_add_mount(out, slot, slot, false, err)) < 0)
            return rc;
        slots = true;
    }
    if (slots && (rc = dp_response_add_env(out, "VGPU_COMPUTE_SLOT", name, err)) < 0)
        return rc;
    return 0;
}

unsigned dp_board_cores(const struct dpconfig *cfg, const struct dp_match *match, unsigned gpu)
{
    unsigned cores = effective_cores(cfg, match->container.gpus[gpu].cores);
    if (cores == 0 && match->priority_given)
        cores = 100; /* priority without a share: on the board all the same */
    return cores;
}

int dp_board_paths(const char *board, const char *uuid, const char *name, unsigned cores, bool high,
                   char *turn, char *slot, size_t size, struct vg_err *err)
{
    if (!uuid[0] || strchr(uuid, '/') || strcmp(uuid, "..") == 0 || uuid[0] == '.')
        return vg_err_set(err, -EINVAL, "GPU UUID '%s' cannot name a board file", uuid);
    if (vg_snprintf(turn, size, "%s/%s.board", board, uuid) < 0 ||
        vg_snprintf(slot, size, "%s/%s/%s.%u%s.slot", board, uuid, name, cores,
                    high ? ".high" : "") < 0)
        return vg_err_set(err, -ENAMETOOLONG, "board path too long");
    return 0;
}

/* path, created with size bytes and the 64-bit magic at offset 0, mode 0666 (containers
 * of any uid write it through their writable mount). An existing one is kept when keep. */
static int board_file(const char *path, size_t size, uint64_t magic, bool keep, struct vg_err *err)
{
    VG_AUTO_CLOSE int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0)
        return vg_err_errno(err, errno, "creating %s", path);
    struct stat st;
    if (fstat(fd, &st) != 0)
        return vg_err_errno(err, errno, "creating %s", path);
    if (keep && st.st_size == (off_t)size)
        return 0;
    if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)size) != 0 ||
        pwrite(fd, &magic, sizeof magic, 0) != (ssize_t)sizeof magic || fchmod(fd, 0666) != 0)
        return vg_err_errno(err, errno, "creating %s", path);
    return 0;
}

int dp_board_create(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                    struct vg_err *err)
{
    const char *board = cfg->vgpu.compute_board_dir;
    const char *name = strrchr(dir, '/');
    name = name != NULL ? name + 1 : dir;
    const struct annot_container *c = &match->container;
    for (unsigned i = 0; i < c->gpu_count; i++) {
        unsigned cores = dp_board_cores(cfg, match, i);
        char turn[1024], slot[1024], gpu_dir[1024];
        if (cores == 0)
            continue;
        int rc = dp_board_paths(board, c->gpus[i].uuid, name, cores,
                                match->priority_given && match->priority == 0, turn, slot,
                                sizeof turn, err);
        if (rc < 0)
            return rc;
        if (vg_snprintf(gpu_dir, sizeof gpu_dir, "%s/%s", board, c->gpus[i].uuid) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "board path too long");
        int made = mkdir(gpu_dir, 0755);
        if (made != 0 && errno == ENOENT && /* the board removed under us */
            (rc = vg_mkdir_parents(cfg->vgpu.compute_board_dir, 0755, err)) == 0)
            made = mkdir(gpu_dir, 0755);
        if (rc < 0)
            return rc;
        if (made != 0 && errno != EEXIST)
            return vg_err_errno(err, errno, "creating %s", gpu_dir);
        if ((rc = board_file(turn, sizeof(struct vgc_board), VGC_BOARD_MAGIC, true, err)) < 0 ||
            (rc = board_file(slot, sizeof(struct vgc_slot_file), VGC_SLOT_MAGIC, false, err)) < 0)
            return rc;
        /* A new slot's name says its share: a share link of an earlier run of the same
         * container (a resize) must not override it. */
        char link[1024];
        if (vg_snprintf(link, sizeof link, "%s/%s" VGC_SHARE_SUFFIX, gpu_dir, name) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "board path too long");
        if (unlink(link) != 0 && errno != ENOENT)
            return vg_err_errno(err, errno, "removing %s", link);
    }
    return 0;
}

int dp_board_share_set(const char *board, const char *uuid, const char *name, unsigned cores,
                       struct vg_err *err)
{
    char link[1024], tmp[1024], target[8];
    if (!uuid[0] || strchr(uuid, '/') || strcmp(uuid, "..") == 0 || uuid[0] == '.')
        return vg_err_set(err, -EINVAL, "GPU UUID '%s' cannot name a board file", uuid);
    if (cores < 1 || cores > 100)
        return vg_err_set(err, -EINVAL, "share %u%% is not 1..100", cores);
    if (vg_snprintf(link, sizeof link, "%s/%s/%s" VGC_SHARE_SUFFIX, board, uuid, name) < 0 ||
        vg_snprintf(tmp, sizeof tmp, "%s.tmp", link) < 0 ||
        vg_snprintf(target, sizeof target, "%u", cores) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "board path too long");
    /* The link is made whole under a name no reader takes (a plugin killed before the
     * rename leaves it; the next resize or the pod's sweep removes it), then renamed over
     * the old one: a reader sees the old share or the new one, never none or both. The
     * slot file keeps its name: it is a mount point in the container, which a rename on
     * the host would unmount there. */
    if (unlink(tmp) != 0 && errno != ENOENT)
        return vg_err_errno(err, errno, "removing %s", tmp);
    if (symlink(target, tmp) != 0)
        return vg_err_errno(err, errno, "creating %s", tmp);
    if (rename(tmp, link) != 0) {
        int e = errno;
        (void)unlink(tmp);
        return vg_err_errno(err, e, "renaming %s to %s", tmp, link);
    }
    return 0;
}

/* The container's share on each of its GPUs' boards after a resize (dp_board_share_set);
 * a GPU whose board directory is not there (no container on it takes part) is skipped. */
static int board_shares_set(const struct dpconfig *cfg, const struct dp_match *match,
                            const char *dir, struct vg_err *err)
{
    const char *board = cfg->vgpu.compute_board_dir;
    const char *name = strrchr(dir, '/');
    name = name != NULL ? name + 1 : dir;
    for (unsigned i = 0; i < match->container.gpu_count; i++) {
        const char *uuid = match->container.gpus[i].uuid;
        char gpu_dir[1024];
        struct stat st;
        if (vg_snprintf(gpu_dir, sizeof gpu_dir, "%s/%s", board, uuid) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "board path too long");
        if (lstat(gpu_dir, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        unsigned cores = dp_board_cores(cfg, match, i);
        int rc = dp_board_share_set(board, uuid, name, cores == 0 ? 100 : cores, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int dp_board_sweep(const char *board, const char *const *live_uids)
{
    VG_AUTO(closedirp) DIR *d = opendir(board);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *gpu;
    while ((gpu = readdir(d)) != NULL) {
        char gpu_dir[1024];
        if (gpu->d_name[0] == '.' ||
            vg_snprintf(gpu_dir, sizeof gpu_dir, "%s/%s", board, gpu->d_name) < 0)
            continue;
        VG_AUTO(closedirp) DIR *g = opendir(gpu_dir);
        struct dirent *ent;
        while (g && (ent = readdir(g)) != NULL) {
            const char *us = strchr(ent->d_name, '_');
            if (ent->d_name[0] == '.' || !us)
                continue;
            size_t uid_len = (size_t)(us - ent->d_name);
            bool live = false;
            for (size_t i = 0; live_uids[i] && !live; i++)
                live = strlen(live_uids[i]) == uid_len &&
                       strncmp(live_uids[i], ent->d_name, uid_len) == 0;
            char path[2048];
            if (!live && vg_snprintf(path, sizeof path, "%s/%s", gpu_dir, ent->d_name) >= 0 &&
                unlink(path) == 0)
                removed++;
        }
    }
    return removed;
}

int dp_container_dir_path(const char *region_dir, const char *pod_uid, const char *container,
                          char *path, size_t size, struct vg_err *err)
{
    /* RFC 1123 names (annot.h): no '/', '_', "..", whitespace or control characters
     * reach the path, and the '_' between them splits the name back unambiguously. The
     * names are not echoed: they may hold anything. */
    if (!annot_pod_uid(pod_uid) || !annot_dns_label(container))
        return vg_err_set(err, -EINVAL,
                          "a pod uid or container name that is not a valid Kubernetes name "
                          "cannot name a container directory");
    if (vg_snprintf(path, size, "%s/%s_%s", region_dir, pod_uid, container) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "container directory path too long");
    return 0;
}

/* Removes dir/etc and the files the plugin puts there. In a directory of the layout before
 * etc/ the whole directory was writable in its container, so etc may be the tenant's: a
 * symlink (to any directory of the host) is unlinked itself, never followed, and the
 * files are unlinked relative to the directory opened without following. */
static int etc_remove(const char *dir, struct vg_err *err)
{
    static const char *const files[] = {"limits", "limits.tmp", "generation"};
    char path[1024];
    if (vg_snprintf(path, sizeof(path), "%s/" DP_LIMITS_DIR, dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        if ((errno == ELOOP || errno == ENOTDIR) && unlink(path) == 0)
            return 0; /* not the plugin's directory: gone, nothing through it */
        return vg_err_errno(err, errno, "removing %s", path);
    }
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
        if (unlinkat(fd, files[i], 0) != 0 && errno != ENOENT)
            return vg_err_errno(err, errno, "removing %s/%s", path, files[i]);
    if (rmdir(path) != 0 && errno != ENOENT)
        return vg_err_errno(err, errno, "removing %s", path);
    return 0;
}

int dp_container_dir_remove(const char *dir, struct vg_err *err)
{
    /* "limits" and "limits.tmp" in dir itself: directories made before etc/ existed. */
    static const char *const files[] = {"region", "limits", "limits.tmp"};
    char path[1024];
    int rc = etc_remove(dir, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (vg_snprintf(path, sizeof(path), "%s/%s", dir, files[i]) < 0)
            return vg_err_set(err, -ENAMETOOLONG, "path too long");
        if (unlink(path) != 0 && errno != ENOENT)
            return vg_err_errno(err, errno, "removing %s", path);
    }
    if (rmdir(dir) != 0 && errno != ENOENT)
        return vg_err_errno(err, errno, "removing %s", dir);
    return 0;
}

/* The limits file's text for match (naming the directory it will have, dir) into
 * text[size]; its length, or -ENOSPC. */
static int limits_text(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                       uint64_t generation, char *text, size_t size, struct vg_err *err)
{
    const struct annot_container *c = &match->container;
    size_t used = 0;
    int w = vg_snprintf(text, size,
                        "# written by vgpu-device-plugin for pod %s/%s, container %s\n"
                        "vgpu-limits 1\n",
                        match->pod_namespace, match->pod_name, c->name);
    used = w > 0 ? (size_t)w : 0;
    /* Only once resized: a file without it reads as before everywhere (older libvgpu
     * refuses a key it does not know). */
    if (w >= 0 && generation > 0) {
        w = vg_snprintf(text + used, size - used, "VGPU_LIMITS_GENERATION=%llu\n",
                        (unsigned long long)generation);
        used += w > 0 ? (size_t)w : 0;
    }
    for (unsigned i = 0; i < c->gpu_count && w >= 0; i++) {
        /* The UUID tells vgpu-monitor which GPU the limit is for (docs/monitor.md). */
        w = vg_snprintf(text + used, size - used,
                        "CUDA_DEVICE_MEMORY_LIMIT_%u=%llum\nVGPU_DEVICE_UUID_%u=%s\n", i,
                        (unsigned long long)c->gpus[i].memory_mib, i, c->gpus[i].uuid);
        used += w > 0 ? (size_t)w : 0;
        unsigned cores = effective_cores(cfg, c->gpus[i].cores);
        if (cores && w >= 0) {
            w = vg_snprintf(text + used, size - used, "CUDA_DEVICE_SM_LIMIT_%u=%u\n", i, cores);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    /* The priority its pod named (docs/compute.md, "Priority"): read-only, so the
     * environment can only lower it. */
    if (w >= 0 && match->priority_given) {
        w = vg_snprintf(text + used, size - used, "CUDA_DEVICE_TASK_PRIORITY=%d\n",
                        match->priority);
        used += w > 0 ? (size_t)w : 0;
    }
    /* Dynamic MIG: what vgpu top shows of each instance (a comment to libvgpu). */
    for (unsigned i = 0; i < c->gpu_count && w >= 0; i++) {
        const struct dp_match_mig *m = &match->mig[i];
        if (!m->uuid[0])
            continue;
        w = vg_snprintf(text + used, size - used, "# mig %u %s %s gi %u start %u created %lld\n", i,
                        m->uuid, m->profile, m->gi, m->start, (long long)m->created);
        used += w > 0 ? (size_t)w : 0;
    }
    /* The board too: libvgpu takes no key the file may hold from the environment once
     * the file is given, so VGPU_COMPUTE_BOARD in the environment alone would leave each
     * container on a private default board, blind to its neighbours. */
    if (w >= 0)
        w = vg_snprintf(text + used, size - used,
                        "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\nVGPU_COMPUTE_BOARD=%s\n", dir,
                        cfg->vgpu.compute_board_dir);
    if (w < 0)
        return vg_err_set(err, -ENOSPC, "limits file too long");
    return (int)(used + (size_t)w);
}

/* Writes len bytes of text to path (made or emptied), read-only, synced. */
static int write_file(const char *path, const char *text, size_t len, int flags, struct vg_err *err)
{
    VG_AUTO_CLOSE int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW | flags, 0600);
    if (fd < 0)
        return vg_err_errno(err, errno, "opening %s", path);
    ssize_t n = write(fd, text, len);
    if (n < 0)
        return vg_err_errno(err, errno, "writing %s", path);
    if ((size_t)n != len)
        return vg_err_set(err, -EIO, "writing %s: %zd of %zu bytes written", path, n, len);
    if (fchmod(fd, 0444) != 0)
        return vg_err_errno(err, errno, "writing %s: making it read-only", path);
    if (flags != 0 && fsync(fd) != 0)
        return vg_err_errno(err, errno, "writing %s", path);
    if (close(vg_steal_fd(&fd)) != 0)
        return vg_err_errno(err, errno, "writing %s", path);
    return 0;
}

/* Writes the limits file into stage/etc/limits and its generation (0) beside it; its text
 * names the directory it will have, dir. */
static int write_limits(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                        const char *stage, struct vg_err *err)
{
    char path[1024], text[8192];
    int len = limits_text(cfg, match, dir, 0, text, sizeof text, err);
    if (len < 0)
        return len;
    if (vg_snprintf(path, sizeof(path), "%s/" DP_LIMITS_DIR "/limits", stage) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    int rc = write_file(path, text, (size_t)len, 0, err);
    if (rc < 0)
        return rc;
    char gen[VGPU_GENERATION_SIZE] = VGPU_GENERATION_MAGIC; /* then generation 0 */
    if (vg_snprintf(path, sizeof(path), "%s/" DP_LIMITS_DIR "/generation", stage) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    return write_file(path, gen, sizeof gen, O_CREAT | O_EXCL, err);
}

/* Raises dir's limits generation to gen (never lowers it): in place, through a shared
 * mapping, one atomic store that every process's read-only mapping sees. 1 when raised. */
static int generation_raise(const char *dir, uint64_t gen, struct vg_err *err)
{
    char path[1024];
    if (vg_snprintf(path, sizeof(path), "%s/" DP_LIMITS_DIR "/generation", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    VG_AUTO_CLOSE int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (fd < 0)
        return vg_err_errno(err, errno, "opening %s", path);
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != VGPU_GENERATION_SIZE)
        return vg_err_set(err, -EPROTO, "%s: not a generation file", path);
    char *map = mmap(NULL, VGPU_GENERATION_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED)
        return vg_err_errno(err, errno, "mapping %s", path);
    int rc = 0;
    if (memcmp(map, VGPU_GENERATION_MAGIC, 8) != 0) {
        rc = vg_err_set(err, -EPROTO, "%s: not a generation file", path);
    } else {
        _Atomic uint64_t *word = (_Atomic uint64_t *)(void *)(map + 8);
        uint64_t old = atomic_load(word);
        while (old < gen && !atomic_compare_exchange_weak(word, &old, gen))
            ;
        rc = old < gen ? 1 : 0;
    }
    munmap(map, VGPU_GENERATION_SIZE);
    return rc;
}

int dp_container_limits_update(const struct dpconfig *cfg, const struct dp_match *match,
                               const char *dir, uint64_t generation, struct vg_err *err)
{
    char path[1024], tmp[1024], text[8192];
    struct stat st;
    if (vg_snprintf(path, sizeof(path), "%s/limits", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    /* A directory made before etc/ existed was mounted whole, writable, in its container:
     * an etc/ there is the tenant's (a symlink to a host directory, a limits file of its
     * own), so nothing is read or written through it. */
    if (lstat(path, &st) == 0)
        return vg_err_set(err, -ENOENT,
                          "%s: no limits directory (made before live resize); not resizable", dir);
    if (vg_snprintf(path, sizeof(path), "%s/" DP_LIMITS_DIR "/limits", dir) < 0 ||
        vg_snprintf(tmp, sizeof(tmp), "%s/" DP_LIMITS_DIR "/limits.tmp", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    /* What the container holds now: the same GPUs (a resize never moves a container), and
     * nothing to do when the text is already this. */
    VG_AUTO_FREE char *have = NULL;
    size_t have_len = 0;
    struct vgpu_config now;
    vgpu_config_init(&now);
    int rc = vg_read_file(path, VGPU_LIMITS_FILE_MAX, &have, &have_len, err);
    if (rc < 0)
        return rc == -ENOENT ? vg_err_set(err, -ENOENT,
                                          "%s: no limits directory (made before "
                                          "live resize); not resizable",
                                          dir)
                             : rc;
    if (vgpu_config_parse_file(&now, have, have_len, err) < 0)
        return vg_err_wrap(err, "%s", path);
    for (unsigned i = 0; i < match->container.gpu_count; i++)
        if (strcmp(now.device_uuid[i], match->container.gpus[i].uuid) != 0)
            return vg_err_set(err, -EINVAL,
                              "%s: the decision names GPU %s where the container "
                              "has %s; not applied",
                              dir, match->container.gpus[i].uuid, now.device_uuid[i]);
    if (now.generation > generation)
        return 0; /* a later resize is applied already */
    /* The priority Allocate wrote stands (a resize changes memory and compute only; the
     * decision does not carry it). */
    struct dp_match m = *match;
    m.priority_given = now.priority_given;
    m.priority = now.priority;
    int len = limits_text(cfg, &m, dir, generation, text, sizeof text, err);
    if (len < 0)
        return len;
    bool same = have_len == (size_t)len && memcmp(have, text, have_len) == 0;
    if (!same) {
        /* Complete and durable under its own name first: a reader, or a plugin killed at
         * any point, sees the old file or the new one whole. */
        if ((rc = write_file(tmp, text, (size_t)len, O_CREAT, err)) < 0)
            return rc;
        if (rename(tmp, path) != 0)
            return vg_err_errno(err, errno, "renaming %s to %s", tmp, path);
    }
    /* The neighbours' view of the share (the board) before the generation tells the
     * container: a plugin killed in between applies both again at its next pass. */
    if ((rc = board_shares_set(cfg, &m, dir, err)) < 0)
        return rc;
    /* After the rename, and also when the file was already renamed by a plugin killed
     * before this step: the generation never runs behind the file. */
    rc = generation_raise(dir, generation, err);
    if (rc < 0)
        return rc;
    return !same || rc > 0;
}

static int write_region(const struct dpconfig *cfg, const struct annot_container *c,
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
    VG_AUTO_CLOSE int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return vg_err_errno(err, errno, "opening %s", path);
    if (region_init_fd(fd, &rc_cfg, err) < 0)
        return vg_err_wrap(err, "%s", path);
    return 0;
}

/* Removes a directory dp_container_dir_remove can remove, for a scope guard:
 * `VG_AUTO(undo_dirp) const char *undo = dir;` removes dir on every return until the
 * function sets undo = NULL on success. */
static void undo_dir(const char *dir)
{
    struct vg_err ignored;
    dp_container_dir_remove(dir, &ignored);
}
VG_DEFINE_AUTO(undo_dirp, const char, undo_dir)

/* An empty file dir/name. */
static int create_empty(const char *dir, const char *name, struct vg_err *err)
{
    char path[1024];
    if (vg_snprintf(path, sizeof(path), "%s/%s", dir, name) < 0)
        return vg_err_errno(err, ENAMETOOLONG, "creating %s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || close(fd) != 0)
        return vg_err_errno(err, errno, "creating %s", path);
    return 0;
}

/* dir with an empty "region" and "etc/limits" file. Nothing is left behind on failure. */
static int stage_make(const char *dir, struct vg_err *err)
{
    if (mkdir(dir, 0755) != 0)
        return vg_err_errno(err, errno, "creating %s", dir);
    VG_AUTO(undo_dirp) const char *undo = dir;
    int rc;
    char etc[1024];
    if (vg_snprintf(etc, sizeof(etc), "%s/" DP_LIMITS_DIR, dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    if (mkdir(etc, 0755) != 0)
        return vg_err_errno(err, errno, "creating %s", etc);
    if ((rc = create_empty(dir, "region", err)) < 0 ||
        (rc = create_empty(dir, DP_LIMITS_DIR "/limits", err)) < 0)
        return rc;
    undo = NULL;
    return 0;
}

/* Makes and fills stage for match (its text naming dir); nothing left on failure. */
static int stage_fill(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                      const char *stage, struct vg_err *err)
{
    int rc = stage_make(stage, err);
    if (rc < 0)
        return rc;
    VG_AUTO(undo_dirp) const char *undo = stage;
    if ((rc = write_region(cfg, &match->container, stage, err)) < 0 ||
        (rc = write_limits(cfg, match, dir, stage, err)) < 0)
        return rc;
    undo = NULL;
    return 0;
}

/* <region_dir>/<prefix><basename of dir>, into stage[size]. */
static int stage_path(const struct dpconfig *cfg, const char *prefix, const char *dir, char *stage,
                      size_t size, struct vg_err *err)
{
    const char *base = strrchr(dir, '/');
    if (vg_snprintf(stage, size, "%s/%s%s", cfg->vgpu.region_dir, prefix, base ? base + 1 : dir) <
        0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long");
    return 0;
}

int dp_vgpu_dirs(const struct dpconfig *cfg, struct vg_err *err)
{
    /* Only the plugin writes the board's directories (containers see it read-only, with
     * their own slot and the turn files mounted writable over it); one left world-writable
     * by an older version is closed. */
    int rc = vg_mkdir_parents(cfg->vgpu.region_dir, 0755, err);
    if (rc < 0)
        return vg_err_wrap(err, "vgpu.regionDir (--region-dir)");
    rc = vg_mkdir_parents(cfg->vgpu.compute_board_dir, 0755, err);
    if (rc < 0)
        return vg_err_wrap(err, "vgpu.computeBoardDir (--compute-board-dir)");
    return 0;
}

/* The checks every container directory needs. Its parents were made at start
 * (dp_vgpu_dirs); build makes them again only if they have gone, so an Allocate spends no
 * system calls on them. */
static int dir_begin(const struct dp_match *match, struct vg_err *err)
{
    const struct annot_container *c = &match->container;
    if (c->gpu_count == 0 || c->gpu_count > REGION_MAX_DEVICES)
        return vg_err_set(err, -EINVAL, "container %s: %u GPUs", c->name, c->gpu_count);
    return 0;
}

/* Fills <region_dir>/.new.<name> for match (its text naming dir) and renames it to target,
 * so target appears complete or not at all; nothing is left behind on failure. */
static int build(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                 const char *target, struct vg_err *err)
{
    char stage[1024];
    int rc;
    if ((rc = stage_path(cfg, DP_STAGE_PREFIX, dir, stage, sizeof(stage), err)) < 0)
        return rc;
    if ((rc = stage_fill(cfg, match, dir, stage, err)) == -ENOENT &&
        (rc = dp_vgpu_dirs(cfg, err)) == 0) /* the region directory removed under us */
        rc = stage_fill(cfg, match, dir, stage, err);
    if (rc < 0)
        return rc;
    VG_AUTO(undo_dirp) const char *undo = stage;
    if (rename(stage, target) != 0)
        return vg_err_errno(err, errno, "renaming %s to %s", stage, target);
    undo = NULL;
    return 0;
}

int dp_container_dir_prepare(const struct dpconfig *cfg, const struct dp_match *match,
                             const char *dir, struct vg_err *err)
{
    char ready[1024];
    if (dir_begin(match, err) < 0 ||
        stage_path(cfg, DP_READY_PREFIX, dir, ready, sizeof(ready), err) < 0)
        return vg_err_wrap(err, "preparing container directory %s", dir);
    undo_dir(ready); /* one made for an earlier decision */
    if (build(cfg, match, dir, ready, err) < 0)
        return vg_err_wrap(err, "preparing container directory %s", dir);
    return 0;
}

int dp_container_dir_create(const struct dpconfig *cfg, const struct dp_match *match,
                            const char *dir, bool prepared, struct vg_err *err)
{
    int rc = dir_begin(match, err);
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
               "dir=%s err=\"%s\"", ready, VG_STRERROR(errno));
        undo_dir(ready);
    }
    if (build(cfg, match, dir, dir, err) < 0)
        return vg_err_wrap(err, "container directory %s", dir);
    return 0;
}

int dp_container_create(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                        bool prepared, struct vg_err *err)
{
    int rc = dp_container_dir_create(cfg, match, dir, prepared, err);
    if (rc < 0)
        return rc;
    if ((rc = dp_board_create(cfg, match, dir, err)) < 0) {
        struct vg_err ignored;
        vg_err_wrap(err, "compute board of %s", dir);
        dp_container_dir_remove(dir, &ignored);
        return rc;
    }
    return 0;
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
    /* The limits file holds the priority too. */
    h = (h ^ (m->priority_given ? 2u + (unsigned)m->priority : 0u)) * 0x100000001b3ull;
    return h;
}

int dp_container_dirs_sweep(const char *region_dir, const char *const *live_uids,
                            struct vg_err *err)
{
    VG_AUTO(closedirp) DIR *d = opendir(region_dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return vg_err_errno(err, errno, "opening %s", region_dir);
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
    return removed;
}

void dp_inventory(const struct dpconfig *cfg, enum annot_mode mode, const struct dp_gpu *gpus,
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
