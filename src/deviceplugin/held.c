/* The time each container was held behind high priority, for the node's inventory
 * (deviceplugin.h, dp_held_collect; docs/protocol.md "held").
 *
 * The figure comes from the container's region, which its own processes write: it is read
 * as vgpu-monitor reads it (monitor/region_read.h: no lock, no mapping, one pread of a
 * regular file, every value bounded), clamped, and only ever shown. The names come from
 * the directory names this plugin made, checked again before they are written. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>

#include "base/auto.h"
#include "base/mem.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "monitor/region_read.h"

VG_DEFINE_AUTO(closedirp, DIR, closedir)

/* The most container directories looked at per write: the plugin makes one per allocated
 * container, so a node never has more; the bound keeps one heartbeat's work finite. */
#define HELD_SCAN_MAX    4096
/* Entries weighed for the ANNOT_HELD_MAX written (the most-held first). */
#define HELD_ENTRIES_MAX 2048

static int by_held(const void *a, const void *b)
{
    const struct annot_held *x = a, *y = b;
    if (x->seconds != y->seconds)
        return x->seconds > y->seconds ? -1 : 1;
    int c = strcmp(x->pod, y->pod);
    if (c == 0)
        c = strcmp(x->container, y->container);
    return c != 0 ? c : (int)x->gpu - (int)y->gpu;
}

/* Splits "<uid>_<container>" into its checked halves; false for any other name. */
static bool split_name(const char *name, struct annot_held *h)
{
    const char *us = strchr(name, '_');
    if (us == NULL || us == name || (size_t)(us - name) > ANNOT_LABEL_MAX)
        return false;
    memcpy(h->pod, name, (size_t)(us - name));
    h->pod[us - name] = '\0';
    if (vg_strlcpy(h->container, us + 1, sizeof h->container) < 0)
        return false;
    return annot_pod_uid(h->pod) && annot_dns_label(h->container);
}

/* The entries of one container directory (dfd/name) into list[*n..max). */
static void collect_one(int dfd, const char *name, const struct annot_inventory *inv,
                        struct annot_held *list, size_t *n, size_t max)
{
    struct annot_held base = {0};
    if (!split_name(name, &base))
        return;
    int cfd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (cfd < 0)
        return;
    struct mon_region_snapshot snap;
    struct vg_err err = {0};
    int rc = mon_region_read_at(cfd, "region", &snap, &err);
    close(cfd);
    if (rc < 0)
        return; /* no CUDA process yet, or gone: nothing to show */
    bool seen[ANNOT_MAX_GPUS] = {false};
    for (unsigned d = 0; d < snap.device_count && *n < max; d++)
        for (unsigned g = 0; g < inv->gpu_count; g++) {
            /* A GPU once per container, whatever the region's table repeats. */
            if (seen[g] || strcmp(snap.devices[d].uuid, inv->gpus[g].uuid) != 0)
                continue;
            seen[g] = true;
            uint64_t s = snap.devices[d].held_ns / 1000000000u;
            list[*n] = base;
            list[*n].gpu = (uint8_t)g;
            list[*n].seconds = (uint32_t)(s > ANNOT_HELD_SECONDS_MAX ? ANNOT_HELD_SECONDS_MAX : s);
            (*n)++;
        }
}

void dp_held_collect(const char *region_dir, struct annot_inventory *inv)
{
    inv->held_count = 0;
    if (region_dir == NULL || region_dir[0] == '\0' || inv->gpu_count == 0)
        return;
    int dfd = open(region_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return;
    VG_AUTO(closedirp) DIR *dir = fdopendir(dfd);
    if (dir == NULL) {
        close(dfd);
        return;
    }
    size_t max = HELD_ENTRIES_MAX, n = 0;
    VG_AUTO_FREE struct annot_held *list = xcalloc(max, sizeof *list);
    struct dirent *de;
    for (unsigned scanned = 0; (de = readdir(dir)) != NULL && scanned < HELD_SCAN_MAX && n < max;) {
        if (de->d_name[0] == '.') /* staged and prepared directories have no process */
            continue;
        scanned++;
        collect_one(dfd, de->d_name, inv, list, &n, max);
    }
    if (n > 1)
        qsort(list, n, sizeof *list, by_held);
    inv->held_count = (unsigned)(n < ANNOT_HELD_MAX ? n : ANNOT_HELD_MAX);
    memcpy(inv->held, list, inv->held_count * sizeof *list);
}
