/* A container's limits, read from the device plugin's limits file with libvgpu's own
 * parser (src/libvgpu/config.c), so the monitor and libvgpu can never disagree on what a
 * file says. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/str.h"
#include "monitor/monitor.h"

/* "# mig DEV MIG-UUID PROFILE gi GI start START created UNIX": the device plugin's comment
 * lines (libvgpu skips them); a line of any other shape is ignored. */
static void mig_lines(const char *text, size_t len, struct mon_limits *out)
{
    memset(out->mig, 0, sizeof out->mig);
    const char *end = text + len;
    for (const char *p = text; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char line[200];
        unsigned dev, gi, start;
        char uuid[64], profile[16];
        long long created;
        if (n > 6 && n < sizeof line && strncmp(p, "# mig ", 6) == 0) {
            memcpy(line, p, n);
            line[n] = '\0';
            if (sscanf(line, "# mig %u %63s %15s gi %u start %u created %lld", &dev, uuid, profile,
                       &gi, &start, &created) == 6 &&
                dev < VGPU_CONFIG_MAX_DEVICES && strncmp(uuid, "MIG-", 4) == 0) {
                (void)vg_strlcpy(out->mig[dev].uuid, uuid, sizeof out->mig[dev].uuid);
                (void)vg_strlcpy(out->mig[dev].profile, profile, sizeof out->mig[dev].profile);
                out->mig[dev].created = created;
            }
        }
        p += n + 1;
    }
}

int mon_limits_read(const char *region_dir, const char *pod_uid, const char *container,
                    struct mon_limits *out, struct vg_err *err)
{
    char path[MON_PATH_MAX];
    if (strchr(container, '/') || strchr(pod_uid, '/') || !container[0] ||
        strcmp(container, "..") == 0)
        return vg_err_set(err, -EINVAL, "container '%s' cannot name a directory", container);
    /* "limits" in a directory made before etc/ existed (read-only in its container);
     * else etc/limits, which a live resize replaces (docs/deviceplugin.md). A container
     * cannot add either: the device plugin mounts its files, never the directory. */
    char dir[MON_PATH_MAX];
    struct stat st;
    if (vg_snprintf(dir, sizeof dir, "%s/%s_%s", region_dir, pod_uid, container) < 0 ||
        vg_snprintf(path, sizeof path, "%s/limits", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "%s/%s_%s: path too long", region_dir, pod_uid,
                          container);
    if (lstat(path, &st) != 0 && vg_snprintf(path, sizeof path, "%s/etc/limits", dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "%s: path too long", dir);
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    struct vg_err sub = {0};
    int rc = vg_read_file(path, VGPU_LIMITS_FILE_MAX, &text, &len, &sub);
    if (rc < 0)
        return vg_err_set(err, rc, "%s", sub.msg);
    vgpu_config_init(&out->config);
    if (vgpu_config_parse_file(&out->config, text, len, err) < 0)
        return vg_err_wrap(err, "%s", path);
    mig_lines(text, len, out);
    return 0;
}

uint64_t mon_limits_for_gpu(const struct mon_limits *limits, const char *uuid)
{
    const struct vgpu_config *c = &limits->config;
    bool any_uuid = false;
    uint64_t largest = 0;
    bool unlimited = false;
    for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++) {
        uint64_t l = vgpu_config_memory_limit(c, i);
        if (c->device_uuid[i][0]) {
            any_uuid = true;
            if (strcmp(c->device_uuid[i], uuid) == 0)
                return l ? l : UINT64_MAX;
        }
        if (c->memory_limit_given[i] || i == 0) {
            unlimited |= l == 0;
            largest = l > largest ? l : largest;
        }
    }
    if (any_uuid)
        return 0; /* a GPU the container was not given */
    return unlimited || largest == 0 ? UINT64_MAX : largest;
}

uint64_t mon_slack(uint64_t limit)
{
    uint64_t pct = limit / 50;
    return pct > (64ULL << 20) ? pct : 64ULL << 20;
}

/* The ceiling of one index: what libvgpu holds each process to, in the container's own
 * read-only file (the environment may only lower it, which the monitor does not see). */
static unsigned compute_ceiling(const struct vgpu_config *c, unsigned n)
{
    uint32_t share = vgpu_config_sm_limit(c, n);
    enum vgpu_compute_mode mode = vgpu_config_compute_mode(c);
    if (share == 0 || share >= 100 || mode == VGPU_COMPUTE_OFF)
        return 100;
    if (mode == VGPU_COMPUTE_BURST)
        return c->burst_limit > share ? (c->burst_limit < 100 ? c->burst_limit : 100) : share;
    return share;
}

unsigned mon_limits_compute_for_gpu(const struct mon_limits *limits, const char *uuid)
{
    const struct vgpu_config *c = &limits->config;
    bool any_uuid = false;
    unsigned largest = 0;
    for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++) {
        unsigned ceiling = compute_ceiling(c, i);
        if (c->device_uuid[i][0]) {
            any_uuid = true;
            if (strcmp(c->device_uuid[i], uuid) == 0)
                return ceiling;
        }
        if (c->sm_limit_given[i] || i == 0)
            largest = ceiling > largest ? ceiling : largest;
    }
    return any_uuid ? 0 : largest;
}
