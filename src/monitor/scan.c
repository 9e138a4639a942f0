/* The containers vgpu-monitor shows (scan.h). */
#define _GNU_SOURCE
#include "monitor/scan.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "monitor/region_read.h"

#define ENTRY_NAME_MAX (MON_UID_MAX + MON_NAME_MAX)

struct entry {
    char name[ENTRY_NAME_MAX]; /* the directory: <pod uid>_<container> */
    char pod_uid[MON_UID_MAX];
    char container[MON_NAME_MAX];
    char ns[MON_NAME_MAX], pod[MON_NAME_MAX];
    bool named;
    /* from the limits file */
    bool limits_ok;
    unsigned limits_age;
    unsigned ndev;
    char uuid[VGPU_CONFIG_MAX_DEVICES][VGPU_CONFIG_UUID_MAX];
    uint64_t limit[VGPU_CONFIG_MAX_DEVICES];
    unsigned share[VGPU_CONFIG_MAX_DEVICES];
    int priority; /* CUDA_DEVICE_TASK_PRIORITY, -1 when the file names none */
    struct mon_limits_mig mig[VGPU_CONFIG_MAX_DEVICES];
    int state;      /* the last error kind, -1 when fine: logs go out on a change */
    int fd;         /* the region, kept open between scans; -1 when not */
    unsigned reads; /* of the open region: fstat'ed every MON_SCAN_STAT_EVERY reads */
    struct mon_label_cache labels[VGPU_CONFIG_MAX_DEVICES]; /* per row, kept across scans */
    uint64_t violations, kills;
    unsigned seen;
};

struct mon_scan {
    char *dir;
    mon_scan_name_fn names;
    void *names_arg;
    struct entry **entries; /* sorted by name */
    size_t count, cap;
    struct mon_ctr_stats *rows;
    size_t row_count, row_cap;
    unsigned gen;
    size_t fds, fd_max; /* regions kept open, and how many may be */
};

static void labels_drop(struct entry *e)
{
    for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++) {
        free(e->labels[i].text);
        e->labels[i].text = NULL;
    }
}

static void entry_free(struct mon_scan *s, struct entry *e)
{
    labels_drop(e);
    if (e->fd >= 0) {
        close(e->fd);
        s->fds--;
    }
    free(e);
}

int mon_scan_new(const char *region_dir, mon_scan_name_fn names, void *names_arg,
                 struct mon_scan **out, struct vg_err *err)
{
    struct mon_scan *s = vg_calloc(1, sizeof *s);
    if (!s || !(s->dir = strdup(region_dir))) {
        free(s);
        return vg_err_set(err, -ENOMEM, "out of memory");
    }
    s->names = names;
    s->names_arg = names_arg;
    /* Keeping the regions open saves an open and a close per container and scan; half
     * the descriptor limit may go to it, the rest are opened per scan. */
    struct rlimit rl;
    s->fd_max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                    ? (size_t)rl.rlim_cur / 2
                    : 512;
    *out = s;
    return 0;
}

void mon_scan_free(struct mon_scan *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->count; i++)
        entry_free(s, s->entries[i]);
    free(s->entries);
    free(s->rows);
    free(s->dir);
    free(s);
}

static int cmp_entry(const void *a, const void *b)
{
    return strcmp((*(struct entry *const *)a)->name, (*(struct entry *const *)b)->name);
}

static struct entry *find(const struct mon_scan *s, const char *name, size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(s->entries[mid]->name, name);
        if (c == 0)
            return s->entries[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* <36 characters of [0-9a-f-]>_<[a-z0-9.-]{1,253}>; anything else (the device plugin's
 * .new.* and .ready.* staging names included) is not a container. */
static bool container_dir(const char *name)
{
    size_t n = strlen(name);
    if (n < MON_UID_MAX + 1 || n >= ENTRY_NAME_MAX || name[MON_UID_MAX - 1] != '_')
        return false;
    for (size_t i = 0; i < MON_UID_MAX - 1; i++)
        if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f') ||
              name[i] == '-'))
            return false;
    for (size_t i = MON_UID_MAX; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') ||
              name[i] == '-' || name[i] == '.'))
            return false;
    return strcmp(name + MON_UID_MAX, ".") != 0 && strcmp(name + MON_UID_MAX, "..") != 0;
}

static struct entry *add(struct mon_scan *s, const char *name, bool resort)
{
    struct vg_err ignored;
    if (s->count >= MON_SCAN_MAX ||
        vg_array_grow(&s->entries, &s->cap, s->count + 1, sizeof *s->entries, MON_SCAN_MAX,
                      "containers", &ignored) < 0)
        return NULL;
    struct entry *e = vg_calloc(1, sizeof *e);
    if (!e)
        return NULL;
    (void)vg_strlcpy(e->name, name, sizeof e->name);
    memcpy(e->pod_uid, name, MON_UID_MAX - 1);
    (void)vg_strlcpy(e->container, name + MON_UID_MAX, sizeof e->container);
    e->state = -1;
    e->priority = -1;
    e->fd = -1;
    e->seen = s->gen;
    s->entries[s->count++] = e;
    if (resort)
        qsort(s->entries, s->count, sizeof *s->entries, cmp_entry);
    return e;
}

void mon_scan_note(struct mon_scan *s, const char *pod_uid, const char *container, const char *kind)
{
    char name[ENTRY_NAME_MAX];
    if (!container[0] || vg_snprintf(name, sizeof name, "%s_%s", pod_uid, container) < 0 ||
        !container_dir(name))
        return;
    struct entry *e = find(s, name, s->count);
    if (!e)
        e = add(s, name, true);
    if (!e)
        return;
    if (strcmp(kind, "over") == 0)
        e->violations++;
    else if (strcmp(kind, "kill") == 0)
        e->kills++;
}

static void set_state(struct entry *e, int kind, const char *msg, uint64_t *errors)
{
    if (kind >= 0)
        errors[kind]++;
    if (kind == e->state)
        return;
    if (kind >= 0)
        vg_log(VG_LOG_WARN, "cannot read a container's state", "container=%s kind=%s error=\"%s\"",
               e->name, mon_error_kind_names[kind], msg);
    else
        vg_log(VG_LOG_INFO, "a container's state reads again", "container=%s", e->name);
    e->state = kind;
}

static void read_limits(struct mon_scan *s, struct entry *e, uint64_t *errors)
{
    if (e->limits_ok && ++e->limits_age < MON_SCAN_LIMITS_EVERY)
        return;
    e->limits_age = 0;
    struct mon_limits l;
    struct vg_err err = {0};
    int rc = mon_limits_read(s->dir, e->pod_uid, e->container, &l, &err);
    if (rc < 0) {
        e->limits_ok = false;
        e->priority = -1;
        if (rc != -ENOENT) /* no limits (yet, or any more): not a container to show */
            set_state(e, MON_ERR_LIMITS, err.msg, errors);
        return;
    }
    const struct vgpu_config *c = &l.config;
    labels_drop(e); /* the GPUs may have changed */
    e->ndev = 0;
    for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++) {
        (void)vg_strlcpy(e->uuid[i], c->device_uuid[i], sizeof e->uuid[i]);
        e->limit[i] = c->memory_limit_given[i] ? c->memory_limit[i] : c->memory_limit_all;
        e->share[i] = c->sm_limit_given[i] ? c->sm_limit[i] : c->sm_limit_all;
        if (c->device_uuid[i][0] || c->memory_limit_given[i])
            e->ndev = i + 1;
    }
    e->priority = c->priority_given ? c->priority : -1;
    memcpy(e->mig, l.mig, sizeof e->mig);
    e->limits_ok = true;
}

static int gpu_of(const char *uuid, const char *const *uuids, unsigned n)
{
    if (!uuid[0])
        return -1;
    for (unsigned g = 0; g < n; g++)
        if (strcmp(uuids[g], uuid) == 0)
            return (int)g;
    return -1;
}

static int region_kind(int rc)
{
    switch (rc) {
    case -ENOENT:
        return MON_ERR_REGION_MISSING;
    case -EMSGSIZE:
        return MON_ERR_REGION_TRUNCATED;
    case -EPROTO:
        return MON_ERR_REGION_CORRUPT;
    default:
        return MON_ERR_REGION_UNREADABLE;
    }
}

static int push_row(struct mon_scan *s, const struct mon_ctr_stats *row)
{
    struct vg_err ignored;
    if (vg_array_grow(&s->rows, &s->row_cap, s->row_count + 1, sizeof *s->rows,
                      MON_SCAN_MAX * VGPU_CONFIG_MAX_DEVICES, "rows", &ignored) < 0)
        return -ENOMEM;
    s->rows[s->row_count++] = *row;
    return 0;
}

static void rows_of(struct mon_scan *s, struct entry *e, int dfd, const char *const *uuids,
                    unsigned ngpu, uint64_t *errors)
{
    char path[ENTRY_NAME_MAX + 8];
    size_t nl = strlen(e->name);
    memcpy(path, e->name, nl);
    memcpy(path + nl, "/region", 8);
    struct mon_region_snapshot snap;
    struct vg_err err = {0};
    int rc = -ESTALE;
    for (int attempt = 0; attempt < 2 && rc == -ESTALE; attempt++) {
        if (e->fd < 0) {
            int fd = mon_region_open_at(dfd, path, &err);
            if (fd < 0) {
                rc = fd;
                memset(&snap, 0, sizeof snap);
                break;
            }
            if (s->fds >= s->fd_max) { /* no room to keep it: read and close */
                rc = mon_region_read_fd(fd, path, true, &snap, &err);
                close(fd);
                break;
            }
            e->fd = fd;
            e->reads = 0;
            s->fds++;
        }
        rc = mon_region_read_fd(e->fd, path, e->reads++ % MON_SCAN_STAT_EVERY == 0, &snap, &err);
        if (rc < 0) { /* removed, replaced or bad: open it afresh next time */
            close(e->fd);
            e->fd = -1;
            s->fds--;
        }
    }
    if (rc < 0)
        set_state(e, region_kind(rc), err.msg, errors);
    else
        set_state(e, -1, "", errors);
    if (!e->named && s->names && s->names(s->names_arg, e->pod_uid, e->ns, e->pod) == 0) {
        e->named = true;
        labels_drop(e); /* built without the names */
    }
    bool first = true;
    /* The limits file says which GPUs the container was given (VGPU_DEVICE_UUID_<n>); a
     * file without UUIDs (an older device plugin) leaves it to the region's table. */
    bool by_limits = false;
    for (unsigned i = 0; i < e->ndev; i++)
        by_limits |= e->uuid[i][0] != '\0';
    unsigned n = by_limits ? e->ndev : rc == 0 ? snap.device_count : 0;
    for (unsigned i = 0; i < n; i++) {
        const char *uuid = by_limits ? e->uuid[i] : snap.devices[i].uuid;
        int g = gpu_of(uuid, uuids, ngpu);
        if (g < 0)
            continue;
        /* Label sets are kept only for GPUs the read-only limits file names (a region's
         * table is the tenant's to rewrite). */
        struct mon_ctr_stats row = {.labels = by_limits ? &e->labels[i] : NULL,
                                    .pod_uid = e->pod_uid,
                                    .ns = e->ns,
                                    .pod = e->pod,
                                    .container = e->container,
                                    .gpu = (unsigned)g,
                                    .vdevice = i,
                                    .first = first,
                                    .memory_limit = by_limits ? e->limit[i] : 0,
                                    .share_percent = by_limits ? e->share[i] : 0,
                                    .priority = e->priority,
                                    .violations = e->violations,
                                    .kills = e->kills,
                                    .mig = by_limits && e->mig[i].uuid[0] ? &e->mig[i] : NULL};
        if (!by_limits && i < VGPU_CONFIG_MAX_DEVICES) {
            row.memory_limit = e->limit[0];
            row.share_percent = e->share[0];
        }
        if (rc == 0) {
            const struct mon_region_device *d = NULL;
            for (unsigned k = 0; k < snap.device_count && !d; k++)
                if (strcmp(snap.devices[k].uuid, uuid) == 0)
                    d = &snap.devices[k];
            if (d) {
                row.region = true;
                row.used = d->used;
                row.busy_ns = d->busy_ns;
                row.waited_ns = d->waited_ns;
                row.held_ns = d->held_ns;
                row.achieved_ppm = d->achieved_ppm;
                row.refused = snap.refused;
                row.closed = snap.closed;
            }
        }
        if (push_row(s, &row) < 0)
            return;
        first = false;
    }
}

int mon_scan_run(struct mon_scan *s, const char *const *uuids, unsigned ngpu,
                 uint64_t errors[MON_ERR_KINDS], struct vg_err *err)
{
    s->row_count = 0;
    s->gen++;
    int dfd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *dir = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!dir) {
        int e = errno;
        if (dfd >= 0)
            close(dfd);
        errors[MON_ERR_REGION_UNREADABLE]++;
        return vg_err_errno(err, e, "containers directory %s", s->dir);
    }
    size_t old = s->count;
    bool added = false;
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.' || !container_dir(de->d_name))
            continue;
        struct entry *e = find(s, de->d_name, old);
        if (!e) {
            /* new since the last scan (appended after the sorted part; found by name
             * in the sorted part only, which is all a directory listing needs) */
            e = add(s, de->d_name, false);
            added = true;
        }
        if (e)
            e->seen = s->gen;
    }
    /* Forget what is gone (its series disappear), then sort in the new ones. */
    size_t keep = 0;
    for (size_t i = 0; i < s->count; i++) {
        if (s->entries[i]->seen != s->gen) {
            entry_free(s, s->entries[i]);
            continue;
        }
        s->entries[keep++] = s->entries[i];
    }
    s->count = keep;
    if (added)
        qsort(s->entries, s->count, sizeof *s->entries, cmp_entry);
    for (size_t i = 0; i < s->count; i++) {
        struct entry *e = s->entries[i];
        read_limits(s, e, errors);
        if (e->limits_ok)
            rows_of(s, e, dirfd(dir), uuids, ngpu, errors);
    }
    closedir(dir);
    return 0;
}

const struct mon_ctr_stats *mon_scan_rows(const struct mon_scan *s, size_t *count)
{
    *count = s->row_count;
    return s->rows;
}
