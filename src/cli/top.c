/* vgpu top: this node's GPUs (NVML) and each vgpu container on them (the device plugin's
 * containers directory: each container's read-only limits file and its shared region).
 *
 * Reading tenants' files safely: a container's processes can write its region (mode
 * 0666), so nothing read from it is trusted beyond display. Regions are read as
 * vgpu-monitor reads them, through monitor/region_read.h (the one way to read a region
 * from outside): a descriptor kept open per container (O_NOFOLLOW | O_NONBLOCK), and at
 * each refresh one fstat (a regular file of the right size, still linked; reopened by
 * name once removed or replaced) and one pread of the header and device table into
 * private memory, validated and bounded there. Nothing is mapped, so a tenant truncating
 * its file gives a short read, never a SIGBUS; nothing here takes a lock a tenant could
 * hold. The limits file is the device plugin's, read-only to the tenant, and parsed by
 * libvgpu's own parser. A refresh is a directory scan and two system calls per
 * container. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/mem.h"
#include "base/str.h"
#include "cli/cli.h"
#include "cli/verbs.h"
#include "libvgpu/config.h"
#include "monitor/region_read.h"
#include "nvml/loader.h"
#include "region/region.h"

#define TOP_MAX_GPUS       64
#define TOP_MAX_CONTAINERS 8192
#define DEFAULT_DIR        "/usr/local/vgpu/containers"

/* ---- NVML ------------------------------------------------------------------------ */

struct nvml {
    bool ok;
    char error[VG_ERR_MSG_MAX];
    struct nvml_lib lib;
    unsigned count;
    nvmlDevice_t handles[TOP_MAX_GPUS];
};

struct gpu {
    unsigned index;
    char uuid[VGPU_CONFIG_UUID_MAX];
    char name[96];
    bool ok;
    char error[128];
    unsigned long long mem_total, mem_used;
    unsigned util, procs;
};

static void nvml_open(struct nvml *n, const char *soname, struct gpu *gpus)
{
    static const char *const required[] = {
        "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",     "nvmlDeviceGetMemoryInfo",       NULL};
    struct vg_err err = {0};
    if (nvml_lib_open(&n->lib, soname, required, &err) < 0) {
        (void)vg_strlcpy(n->error, err.msg, sizeof n->error);
        return;
    }
    unsigned c = 0;
    nvmlReturn_t rc = n->lib.get_count(&c);
    if (rc != NVML_SUCCESS) {
        (void)vg_snprintf(n->error, sizeof n->error, "NVML: %s", n->lib.error_string(rc));
        return;
    }
    n->count = c < TOP_MAX_GPUS ? c : TOP_MAX_GPUS;
    for (unsigned i = 0; i < n->count; i++) {
        gpus[i].index = i;
        if (n->lib.by_index(i, &n->handles[i]) != NVML_SUCCESS ||
            n->lib.get_uuid(n->handles[i], gpus[i].uuid, sizeof gpus[i].uuid) != NVML_SUCCESS ||
            n->lib.get_name(n->handles[i], gpus[i].name, sizeof gpus[i].name) != NVML_SUCCESS) {
            n->handles[i] = NULL;
            (void)vg_snprintf(gpus[i].error, sizeof gpus[i].error, "NVML cannot open it");
        }
    }
    n->ok = true;
}

static void nvml_sample(struct nvml *n, struct gpu *gpus)
{
    for (unsigned i = 0; i < n->count; i++) {
        struct gpu *g = &gpus[i];
        g->ok = false;
        if (n->handles[i] == NULL)
            continue;
        nvmlMemory_t mem;
        nvmlReturn_t rc = n->lib.get_memory(n->handles[i], &mem);
        if (rc != NVML_SUCCESS) {
            (void)vg_snprintf(g->error, sizeof g->error, "%s", n->lib.error_string(rc));
            continue;
        }
        g->ok = true;
        g->error[0] = '\0';
        g->mem_total = mem.total;
        g->mem_used = mem.used;
        nvmlUtilization_t u = {0};
        g->util =
            n->lib.get_utilization && n->lib.get_utilization(n->handles[i], &u) == NVML_SUCCESS
                ? u.gpu
                : 0;
        nvmlProcessInfo_t infos[256];
        unsigned cnt = 256;
        g->procs = n->lib.procs_v3 && n->lib.procs_v3(n->handles[i], &cnt, infos) == NVML_SUCCESS
                       ? cnt
                       : 0;
    }
}

/* ---- containers -------------------------------------------------------------------- */

struct ctr {
    char dir[CLI_NAME_MAX * 2]; /* the directory's name */
    char region_path[4096];     /* <containers dir>/<dir>/region, "" when too long */
    char uid[CLI_NAME_MAX], container[CLI_NAME_MAX];
    char ns[CLI_NAME_MAX], pod[CLI_NAME_MAX];
    bool limits_ok;
    char limits_error[VG_ERR_MSG_MAX];
    char limits_path[4096]; /* the file read, and its inode: a live resize replaces it */
    ino_t limits_ino;
    struct vgpu_config limits;
    int fd;                            /* the region, open between refreshes; -1 when not */
    char region_error[VG_ERR_MSG_MAX]; /* "" when the region was read */
    bool kept;                         /* scan: carried over to the new list */
    /* this refresh */
    unsigned ndev;
    struct {
        char uuid[REGION_UUID_MAX];
        uint64_t used;
        int64_t achieved_ppm, waited_ns, held_ns;
    } devs[REGION_MAX_DEVICES];
    uint64_t closed, repaired;
    /* Dynamic MIG instances of the container, from its limits file's "# mig" lines. */
    unsigned nmig;
    struct {
        unsigned dev, gi, start;
        char uuid[64], profile[16];
        long long created;
    } mig[4];
};

struct row {
    int gpu; /* index into t->gpus, or -1: a GPU NVML does not list */
    const struct ctr *c;
    unsigned k; /* the index of its limits */
    const char *uuid;
    uint64_t limit, used;
    unsigned share;
    int64_t achieved_ppm, waited_ns, held_ns;
    const char *status;
};

struct top {
    const struct cli_options *opt;
    const char *dir;
    struct nvml nvml;
    struct gpu gpus[TOP_MAX_GPUS];
    struct ctr **ctrs; /* sorted by dir name */
    size_t nctrs;
    char dir_error[VG_ERR_MSG_MAX];
    unsigned errors;           /* containers whose files could not be read, this refresh */
    struct timespec dir_mtime; /* the directory as last scanned */
    bool scanned;
    /* The view's rows, sorted, rebuilt when the set of containers changes. */
    struct row *rows;
    size_t nrows;
    bool rows_dirty;
};

static void ctr_free(struct ctr *c)
{
    if (c == NULL)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static void ctr_load_limits(struct top *t, struct ctr *c)
{
    char path[4096];
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    struct vg_err err = {0};
    vgpu_config_init(&c->limits);
    struct stat st;
    /* "limits" in a directory made before etc/ existed, else etc/limits (the file a live
     * resize replaces; docs/deviceplugin.md), as vgpu-monitor reads them. */
    int rc = vg_snprintf(path, sizeof path, "%s/%s/limits", t->dir, c->dir);
    if (rc >= 0 && lstat(path, &st) != 0)
        rc = vg_snprintf(path, sizeof path, "%s/%s/etc/limits", t->dir, c->dir);
    c->limits_ino = rc >= 0 && stat(path, &st) == 0 ? st.st_ino : 0;
    (void)vg_strlcpy(c->limits_path, rc >= 0 ? path : "", sizeof c->limits_path);
    if (rc < 0 || vg_read_file(path, VGPU_LIMITS_FILE_MAX, &text, &len, &err) < 0 ||
        vgpu_config_parse_file(&c->limits, text, len, &err) < 0) {
        (void)vg_snprintf(c->limits_error, sizeof c->limits_error, "limits: %s", err.msg);
        return;
    }
    /* "# mig DEV MIG-UUID PROFILE gi GI start START created UNIX" (the device plugin's,
     * read-only to the tenant; still bounded, and shown only). */
    c->nmig = 0;
    for (const char *l = text; l && l < text + len && c->nmig < 4;
         l = memchr(l, '\n', (size_t)(text + len - l))) {
        if (*l == '\n')
            l++;
        if ((size_t)(text + len - l) < 6 || memcmp(l, "# mig ", 6) != 0)
            continue;
        char line[256];
        const char *e = memchr(l, '\n', (size_t)(text + len - l));
        size_t n = e ? (size_t)(e - l) : (size_t)(text + len - l);
        if (n >= sizeof line)
            continue;
        memcpy(line, l, n);
        line[n] = '\0';
        __typeof__(c->mig[0]) *m = &c->mig[c->nmig];
        if (sscanf(line, "# mig %u %63s %15s gi %u start %u created %lld", &m->dev, m->uuid,
                   m->profile, &m->gi, &m->start, &m->created) == 6 &&
            strncmp(m->uuid, "MIG-", 4) == 0)
            c->nmig++;
    }
    struct vg_err oerr = {0};
    if (cli_limits_owner_parse(text, len, c->ns, c->pod, c->container, &oerr) < 0) {
        (void)vg_strlcpy(c->ns, "?", sizeof c->ns);
        (void)vg_snprintf(c->pod, sizeof c->pod, "uid:%s", c->uid);
    }
    c->limits_ok = true;
}

/* Reads the region's counters (monitor/region_read.h): fstat and pread of the descriptor
 * kept open, reopened by name when the file was removed or replaced. */
static void ctr_read_region(struct ctr *c)
{
    c->ndev = 0;
    if (!c->region_path[0]) {
        (void)vg_snprintf(c->region_error, sizeof c->region_error, "region path too long");
        return;
    }
    struct mon_region_snapshot snap;
    struct vg_err err = {0};
    int rc = -ESTALE;
    if (c->fd >= 0 &&
        (rc = mon_region_read_fd(c->fd, c->region_path, true, &snap, &err)) == -ESTALE) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->fd < 0) {
        int fd = mon_region_open_at(AT_FDCWD, c->region_path, &err);
        if (fd < 0) {
            if (fd == -ENOENT)
                (void)vg_snprintf(c->region_error, sizeof c->region_error, "no region (%s)",
                                  VG_STRERROR(ENOENT));
            else
                (void)vg_snprintf(c->region_error, sizeof c->region_error, "bad region: %s",
                                  err.msg);
            return;
        }
        c->fd = fd;
        rc = mon_region_read_fd(fd, c->region_path, true, &snap, &err);
    }
    if (rc == -EMSGSIZE && snap.file_size == 0) {
        /* libvgpu sizes the file when the container's first CUDA process starts */
        (void)vg_snprintf(c->region_error, sizeof c->region_error,
                          "no CUDA process has started yet");
        return;
    }
    if (rc < 0) {
        (void)vg_snprintf(c->region_error, sizeof c->region_error, "bad region: %s", err.msg);
        return;
    }
    for (unsigned d = 0; d < snap.device_count; d++) {
        memcpy(c->devs[d].uuid, snap.devices[d].uuid, sizeof c->devs[d].uuid);
        c->devs[d].used = snap.devices[d].used;
        c->devs[d].achieved_ppm = snap.devices[d].achieved_ppm;
        c->devs[d].waited_ns = (int64_t)snap.devices[d].waited_ns;
        c->devs[d].held_ns = (int64_t)snap.devices[d].held_ns;
    }
    c->ndev = snap.device_count;
    c->closed = snap.closed;
    c->repaired = snap.repaired;
    c->region_error[0] = '\0';
}

static int by_dir(const void *a, const void *b)
{
    return strcmp((*(struct ctr *const *)a)->dir, (*(struct ctr *const *)b)->dir);
}

/* Scans the containers directory: new containers are loaded, gone ones dropped. */
static void scan(struct top *t)
{
    /* Entries come and go with the directory's mtime; when it has not moved, and did not
     * move in the last second (a change within one timestamp tick of the last scan would
     * not move it), the last scan still holds. */
    struct stat st;
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    if (t->scanned && stat(t->dir, &st) == 0 && st.st_mtim.tv_sec == t->dir_mtime.tv_sec &&
        st.st_mtim.tv_nsec == t->dir_mtime.tv_nsec && wall.tv_sec > st.st_mtim.tv_sec + 1)
        return;
    DIR *d = opendir(t->dir);
    if (d == NULL) {
        (void)vg_snprintf(t->dir_error, sizeof t->dir_error, "cannot read %s: %s", t->dir,
                          VG_STRERROR(errno));
        return;
    }
    t->dir_error[0] = '\0';
    if (fstat(dirfd(d), &st) == 0) {
        t->dir_mtime = st.st_mtim;
        t->scanned = true;
    }
    t->rows_dirty = true;
    size_t cap = t->nctrs + 64, n = 0;
    struct ctr **now = xcalloc(cap, sizeof *now);
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < TOP_MAX_CONTAINERS) {
        char uid[CLI_NAME_MAX], container[CLI_NAME_MAX];
        struct vg_err err = {0};
        if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof now[0]->dir ||
            cli_container_dir_parse(e->d_name, uid, container, &err) < 0)
            continue; /* not a container directory (the plugin's staging, stray files) */
        if (n == cap) {
            cap *= 2;
            now = xrealloc(now, cap * sizeof *now);
        }
        struct ctr key;
        (void)vg_strlcpy(key.dir, e->d_name, sizeof key.dir);
        struct ctr *kp = &key;
        struct ctr **old =
            t->nctrs ? bsearch(&kp, t->ctrs, t->nctrs, sizeof *t->ctrs, by_dir) : NULL;
        if (old != NULL) {
            (*old)->kept = true;
            now[n++] = *old;
            continue;
        }
        struct ctr *c = xcalloc(1, sizeof *c);
        c->fd = -1;
        (void)vg_strlcpy(c->dir, e->d_name, sizeof c->dir);
        (void)vg_strlcpy(c->uid, uid, sizeof c->uid);
        (void)vg_strlcpy(c->container, container, sizeof c->container);
        if (vg_snprintf(c->region_path, sizeof c->region_path, "%s/%s/region", t->dir, c->dir) < 0)
            c->region_path[0] = '\0';
        ctr_load_limits(t, c);
        now[n++] = c;
    }
    closedir(d);
    for (size_t i = 0; i < t->nctrs; i++) {
        if (t->ctrs[i]->kept)
            t->ctrs[i]->kept = false;
        else
            ctr_free(t->ctrs[i]); /* departed */
    }
    free(t->ctrs);
    qsort(now, n, sizeof *now, by_dir);
    t->ctrs = now;
    t->nctrs = n;
}

/* One refresh: NVML, the directory, every region. */
void top_refresh(struct top *t);
void top_refresh(struct top *t)
{
    if (t->nvml.ok)
        nvml_sample(&t->nvml, t->gpus);
    scan(t);
    t->errors = 0;
    for (size_t i = 0; i < t->nctrs; i++) {
        struct ctr *c = t->ctrs[i];
        struct stat st;
        /* A live resize renamed a new limits file in: one stat per container per refresh. */
        if (c->limits_ok && c->limits_path[0] && stat(c->limits_path, &st) == 0 &&
            st.st_ino != c->limits_ino) {
            c->limits_ok = false;
            ctr_load_limits(t, c);
            t->rows_dirty = true;
        }
        if (c->limits_ok)
            ctr_read_region(c);
        if (!c->limits_ok || strncmp(c->region_error, "bad region", 10) == 0)
            t->errors++;
    }
}

/* ---- the view ----------------------------------------------------------------------- */

static int gpu_of(const struct top *t, const char *uuid)
{
    for (unsigned g = 0; g < t->nvml.count; g++)
        if (strcmp(t->gpus[g].uuid, uuid) == 0)
            return (int)g;
    return -1;
}

static int by_gpu(const void *a, const void *b)
{
    const struct row *x = a, *y = b;
    unsigned gx = (unsigned)x->gpu, gy = (unsigned)y->gpu; /* -1 last */
    if (gx != gy)
        return gx < gy ? -1 : 1;
    int c = strcmp(x->c->ns, y->c->ns);
    if (c == 0)
        c = strcmp(x->c->pod, y->c->pod);
    return c ? c : strcmp(x->c->container, y->c->container);
}

/* A row's values from its container, this refresh. */
static void row_fill(struct row *r)
{
    const struct ctr *c = r->c;
    r->used = 0;
    r->achieved_ppm = r->waited_ns = r->held_ns = 0;
    r->status = !c->limits_ok ? c->limits_error : c->region_error[0] ? c->region_error : "";
    for (unsigned d = 0; d < c->ndev; d++)
        if (strcmp(c->devs[d].uuid, r->uuid) == 0) {
            r->used = c->devs[d].used;
            r->achieved_ppm = c->devs[d].achieved_ppm;
            r->waited_ns = c->devs[d].waited_ns;
            r->held_ns = c->devs[d].held_ns;
        }
    if (!r->status[0])
        r->status = r->limit && r->used > r->limit ? "over its limit" : "ok";
}

/* The rows: one per container and GPU it was given; sorted again only when the set of
 * containers changed. */
static size_t rows_update(struct top *t)
{
    if (t->rows_dirty) {
        size_t cap = t->nctrs * 2 + 1, n = 0;
        struct row *rows = xcalloc(cap, sizeof *rows);
        for (size_t i = 0; i < t->nctrs; i++) {
            const struct ctr *c = t->ctrs[i];
            for (unsigned k = 0; k < VGPU_CONFIG_MAX_DEVICES; k++) {
                const char *uuid = c->limits.device_uuid[k];
                if (c->limits_ok && !uuid[0])
                    continue;
                if (!c->limits_ok && k > 0)
                    break;
                if (n == cap) {
                    cap *= 2;
                    rows = xrealloc(rows, cap * sizeof *rows);
                }
                struct row *r = &rows[n++];
                r->c = c;
                r->k = k;
                r->uuid = c->limits_ok ? uuid : "";
                r->gpu = c->limits_ok ? gpu_of(t, uuid) : -1;
                r->limit = c->limits_ok ? vgpu_config_memory_limit(&c->limits, k) : 0;
                r->share = c->limits_ok ? vgpu_config_sm_limit(&c->limits, k) : 0;
            }
        }
        qsort(rows, n, sizeof *rows, by_gpu);
        free(t->rows);
        t->rows = rows;
        t->nrows = n;
        t->rows_dirty = false;
    }
    for (size_t i = 0; i < t->nrows; i++)
        row_fill(&t->rows[i]);
    return t->nrows;
}

/* The dynamic MIG instances the containers were given: one row each, with its pod and
 * how long ago it was made. Nothing when there are none. */
static void print_mig(struct top *t, FILE *f, size_t width)
{
    struct cli_table m;
    cli_table_init(&m, 7);
    cli_table_add_tabbed(&m, "GPU\tMIG DEVICE\tPROFILE\tNAMESPACE\tPOD\tCONTAINER\tMADE");
    long long now = (long long)time(NULL);
    size_t n = 0;
    for (size_t i = 0; i < t->nctrs; i++) {
        const struct ctr *c = t->ctrs[i];
        for (unsigned k = 0; k < c->nmig; k++) {
            char gpu[24] = "?", made[48];
            const char *uuid =
                c->mig[k].dev < VGPU_CONFIG_MAX_DEVICES ? c->limits.device_uuid[c->mig[k].dev] : "";
            for (unsigned g = 0; g < t->nvml.count; g++)
                if (strcmp(t->gpus[g].uuid, uuid) == 0)
                    (void)vg_snprintf(gpu, sizeof gpu, "%u", t->gpus[g].index);
            long long age = now - c->mig[k].created;
            if (age < 0)
                age = 0;
            if (age < 120)
                (void)vg_snprintf(made, sizeof made, "%llds ago", age);
            else if (age < 7200)
                (void)vg_snprintf(made, sizeof made, "%lldm ago", age / 60);
            else
                (void)vg_snprintf(made, sizeof made, "%lldh ago", age / 3600);
            const char *cells[7] = {gpu,
                                    c->mig[k].uuid,
                                    c->mig[k].profile,
                                    c->ns[0] ? c->ns : "?",
                                    c->pod[0] ? c->pod : c->uid,
                                    c->container,
                                    made};
            cli_table_add(&m, cells);
            n++;
        }
    }
    if (n > 0) {
        fputc('\n', f);
        cli_table_print(&m, f, width);
    }
    cli_table_free(&m);
}

static void print_text(struct top *t, FILE *f, size_t width, size_t height)
{
    char host[256] = "?", when[64] = "";
    (void)gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm) != NULL)
        (void)strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    size_t nrows = rows_update(t);
    const struct row *rows = t->rows;
    size_t lines = 0;
    bool wide = t->opt->output == CLI_OUTPUT_WIDE;
    fprintf(f, "vgpu top   node %s   %u GPUs   %zu containers   %s%s\n", host, t->nvml.count,
            t->nctrs, when, height ? "   (q quits)" : "");
    lines++;
    if (!t->nvml.ok)
        fprintf(f, "%s\n", t->nvml.error), lines++;
    if (t->dir_error[0])
        fprintf(f, "%s\n", t->dir_error), lines++;
    struct cli_table g;
    cli_table_init(&g, wide ? 7 : 6);
    cli_table_add_tabbed(&g, wide ? "GPU\tNAME\tMEMORY\tUTIL\tPROCS\tCONTAINERS\tUUID"
                                  : "GPU\tNAME\tMEMORY\tUTIL\tPROCS\tCONTAINERS");
    for (unsigned i = 0; i < t->nvml.count; i++) {
        const struct gpu *gp = &t->gpus[i];
        unsigned tenants = 0;
        for (size_t r = 0; r < nrows; r++)
            tenants += rows[r].gpu == (int)i;
        char mu[32], mt[32], line[CLI_CELL_MAX * 4];
        cli_format_bytes(gp->mem_used, mu, sizeof mu);
        cli_format_bytes(gp->mem_total, mt, sizeof mt);
        if (gp->ok)
            (void)vg_snprintf(line, sizeof line, "%u\t%s\t%s/%s\t%u%%\t%u\t%u\t%s", gp->index,
                              gp->name, mu, mt, gp->util, gp->procs, tenants, gp->uuid);
        else
            (void)vg_snprintf(line, sizeof line, "%u\t%s\t%s\t-\t-\t%u\t%s", gp->index, gp->name,
                              gp->error, tenants, gp->uuid);
        cli_table_add_tabbed(&g, line);
    }
    cli_table_print(&g, f, width);
    lines += g.rows;
    cli_table_free(&g);
    fputc('\n', f);
    lines++;
    struct cli_table c;
    cli_table_init(&c, wide ? 13 : 11);
    cli_table_add_tabbed(&c,
                         wide ? "GPU\tNAMESPACE\tPOD\tCONTAINER\tMEMORY\tUSE\tCOMPUTE\tACHIEVED\t"
                                "THROTTLED\tPRIO\tHELD\tSTATUS\tDIRECTORY"
                              : "GPU\tNAMESPACE\tPOD\tCONTAINER\tMEMORY\tUSE\tCOMPUTE\tACHIEVED\t"
                                "THROTTLED\tPRIO\tHELD");
    size_t shown = 0;
    cli_table_reserve(&c, nrows);
    for (size_t i = 0; i < nrows; i++) {
        const struct row *r = &rows[i];
        if (height && lines + 1 + shown + 1 >= height)
            break;
        /* Formatted by hand: this runs for every container at every refresh. */
        char gpu[24], mem[64], use[24], share[24], ach[24], thr[24], held[CLI_CELL_MAX], *p;
        if (r->gpu >= 0)
            *cli_put_u64(gpu, t->gpus[r->gpu].index) = '\0';
        else
            memcpy(gpu, "?", 2);
        cli_format_bytes(r->used, mem, 32);
        p = mem + strlen(mem);
        *p++ = '/';
        if (r->limit) {
            cli_format_bytes(r->limit, p, 31);
            p = cli_put_u64(use, r->used / (r->limit / 100 ? r->limit / 100 : 1));
            memcpy(p, "%", 2);
        } else {
            memcpy(p, "-", 2);
            memcpy(use, "-", 2);
        }
        if (r->share)
            memcpy(cli_put_u64(share, r->share), "%", 2);
        else
            memcpy(share, "-", 2);
        int64_t a = r->achieved_ppm > 0 ? r->achieved_ppm : 0;
        int64_t w = r->waited_ns > 0 ? r->waited_ns : 0;
        memcpy(cli_put_u64(ach, (uint64_t)(a + 5000) / 10000), "%", 2);
        /* The limits file's priority ("-": its pod named none) and the time held. */
        const char *prio = !r->c->limits_ok || !r->c->limits.priority_given ? "-"
                           : r->c->limits.priority == VGPU_PRIORITY_HIGH    ? "high"
                                                                            : "low";
        memcpy(cli_put_tenths(thr, (uint64_t)(w / 100000000)), "s", 2);
        p = cli_put_tenths(held, (uint64_t)((r->held_ns > 0 ? r->held_ns : 0) / 100000000));
        *p++ = 's';
        *p = '\0';
        bool ok = strcmp(r->status, "ok") == 0;
        if (!ok && !wide)
            (void)vg_snprintf(p, sizeof held - (size_t)(p - held), "   %s", r->status);
        const char *cells[13] = {gpu,
                                 r->c->ns[0] ? r->c->ns : "?",
                                 r->c->pod[0] ? r->c->pod : r->c->uid,
                                 r->c->container,
                                 mem,
                                 use,
                                 share,
                                 ach,
                                 thr,
                                 prio,
                                 held,
                                 r->status,
                                 r->c->dir};
        cli_table_add(&c, cells);
        shown++;
    }
    cli_table_print(&c, f, width);
    if (shown < nrows)
        fprintf(f, "... %zu more (a larger terminal, or vgpu top --once)\n", nrows - shown);
    cli_table_free(&c);
    print_mig(t, f, width);
}

static json_t *json_of(struct top *t)
{
    size_t nrows = rows_update(t);
    const struct row *rows = t->rows;
    json_t *gpus = json_array();
    for (int i = -1; i < (int)t->nvml.count; i++) {
        json_t *cs = json_array();
        for (size_t k = 0; k < nrows; k++) {
            const struct row *r = &rows[k];
            if (r->gpu != i)
                continue;
            json_array_append_new(
                cs,
                json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:i, s:f, s:f, s:f, s:o, s:s}",
                          "namespace", r->c->ns, "pod", r->c->pod, "podUID", r->c->uid, "container",
                          r->c->container, "uuid", r->uuid, "memoryUsedBytes", (json_int_t)r->used,
                          "memoryLimitBytes", (json_int_t)r->limit, "computeLimitPercent",
                          (int)r->share, "computeAchievedRatio", (double)r->achieved_ppm / 1e6,
                          "throttledSeconds", (double)r->waited_ns / 1e9, "heldSeconds",
                          (double)r->held_ns / 1e9, "priority",
                          r->c->limits_ok && r->c->limits.priority_given
                              ? json_integer(r->c->limits.priority)
                              : json_null(),
                          "status", r->status));
        }
        if (i < 0) {
            if (json_array_size(cs))
                json_array_append_new(gpus, json_pack("{s:n, s:s, s:o}", "index", "error",
                                                      "not listed by NVML", "containers", cs));
            else
                json_decref(cs);
            continue;
        }
        const struct gpu *g = &t->gpus[i];
        json_t *jg =
            json_pack("{s:i, s:s, s:s, s:I, s:I, s:f, s:i, s:o}", "index", (int)g->index, "uuid",
                      g->uuid, "name", g->name, "memoryTotalBytes", (json_int_t)g->mem_total,
                      "memoryUsedBytes", (json_int_t)g->mem_used, "utilization",
                      (double)g->util / 100.0, "processes", (int)g->procs, "containers", cs);
        if (!g->ok)
            json_object_set_new(jg, "error", json_string(g->error));
        json_array_append_new(gpus, jg);
    }
    char host[256] = "?";
    (void)gethostname(host, sizeof host - 1);
    json_t *doc =
        json_pack("{s:s, s:o, s:i}", "node", host, "gpus", gpus, "errors", (int)t->errors);
    if (!t->nvml.ok)
        json_object_set_new(doc, "nvmlError", json_string(t->nvml.error));
    return doc;
}

/* ---- the terminal ------------------------------------------------------------------- */

static struct termios saved_tio;
static bool tio_saved;
static volatile sig_atomic_t stop;

static void restore_terminal(void)
{
    if (tio_saved) {
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &saved_tio);
        tio_saved = false;
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
    }
}

static void on_stop(int sig)
{
    (void)sig;
    stop = 1;
}

/* One frame: a refresh and its rendering (what bench/top.sh measures). */
void top_frame(struct top *t, bool live, uint64_t n);
void top_frame(struct top *t, bool live, uint64_t n)
{
    top_refresh(t);
    if (t->dir_error[0] && !live)
        return;
    if (live) {
        struct winsize ws = {0};
        (void)ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
        fputs("\033[H\033[2J", stdout);
        print_text(t, stdout, ws.ws_col ? ws.ws_col : 80, ws.ws_row ? ws.ws_row : 24);
        fflush(stdout);
    } else if (t->opt->output == CLI_OUTPUT_JSON) {
        json_t *doc = json_of(t);
        json_dumpf(doc, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
        json_decref(doc);
    } else {
        if (n > 0)
            fputc('\n', stdout);
        print_text(t, stdout, 0, 0);
    }
    fflush(stdout);
}

static void report_errors(const struct top *t)
{
    unsigned shown = 0;
    for (size_t i = 0; i < t->nctrs; i++) {
        const struct ctr *c = t->ctrs[i];
        const char *why = !c->limits_ok                                     ? c->limits_error
                          : strncmp(c->region_error, "bad region", 10) == 0 ? c->region_error
                                                                            : NULL;
        if (why != NULL && shown++ < 10)
            fprintf(stderr, "error: container %s: %s\n", c->dir, why);
    }
    if (shown > 10)
        fprintf(stderr, "error: and %u more containers that cannot be read\n", shown - 10);
}

int cli_top(const struct cli_options *opt, struct vg_err *err)
{
    struct top *t = xcalloc(1, sizeof *t);
    t->opt = opt;
    t->dir = opt->region_dir ? opt->region_dir : DEFAULT_DIR;
    nvml_open(&t->nvml, opt->nvml_library ? opt->nvml_library : NVML_LIB_SONAME, t->gpus);
    bool live = !opt->once && opt->output != CLI_OUTPUT_JSON && isatty(STDIN_FILENO) &&
                isatty(STDOUT_FILENO);
    uint64_t iterations = opt->iterations ? opt->iterations : (live ? 0 : 1);
    const char *timing = getenv("VGPU_TOP_TIMING"); /* bench/top.sh: CPU ns per refresh */
    FILE *tf = timing ? fopen(timing, "w") : NULL;
    if (live) {
        struct termios tio;
        if (tcgetattr(STDIN_FILENO, &saved_tio) == 0) {
            tio_saved = true;
            tio = saved_tio;
            tio.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
            tio.c_cc[VMIN] = 0;
            tio.c_cc[VTIME] = 0;
            (void)tcsetattr(STDIN_FILENO, TCSANOW, &tio);
        }
        atexit(restore_terminal);
        struct sigaction st = {.sa_handler = on_stop};
        sigemptyset(&st.sa_mask);
        sigaction(SIGINT, &st, NULL);
        sigaction(SIGTERM, &st, NULL);
        fputs("\033[?1049h\033[?25l", stdout);
    }
    int status = 0;
    for (uint64_t n = 0; !stop && (iterations == 0 || n < iterations); n++) {
        struct timespec a, b;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
        top_frame(t, live, n);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
        if (tf)
            fprintf(tf, "%lld\n",
                    (long long)((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec)));
        if (t->dir_error[0] && !live) {
            status = vg_err_set(err, -ENOENT, "%s", t->dir_error);
            break;
        }
        if (live) {
            struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            int64_t end_ms =
                (int64_t)until.tv_sec * 1000 + until.tv_nsec / 1000000 + (int64_t)opt->interval_ms;
            while (!stop) {
                struct timespec nowts;
                clock_gettime(CLOCK_MONOTONIC, &nowts);
                int64_t left = end_ms - ((int64_t)nowts.tv_sec * 1000 + nowts.tv_nsec / 1000000);
                if (left <= 0)
                    break;
                if (poll(&p, 1, (int)left) > 0) {
                    char ch = 0;
                    ssize_t got = read(STDIN_FILENO, &ch, 1);
                    if (got == 1 && (ch == 'q' || ch == 'Q'))
                        stop = 1;
                    else if (got == 0)
                        p.fd = -1; /* stdin closed: keep refreshing on the timer */
                    else if (got == 1)
                        break; /* any other key: refresh now */
                }
            }
        }
        if (!live && iterations > 1 && n + 1 < iterations)
            usleep((useconds_t)(opt->interval_ms * 1000));
    }
    if (tf)
        fclose(tf);
    restore_terminal();
    if (status == 0 && !live && (t->errors || !t->nvml.ok)) {
        report_errors(t);
        status = !t->nvml.ok ? vg_err_set(err, -EIO, "%s", t->nvml.error)
                             : vg_err_set(err, -EIO, "%u of %zu containers could not be read",
                                          t->errors, t->nctrs);
    }
    for (size_t i = 0; i < t->nctrs; i++)
        ctr_free(t->ctrs[i]);
    free(t->ctrs);
    free(t->rows);
    free(t);
    return status;
}
