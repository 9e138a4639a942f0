/* The judge: one sample of the node's GPU processes → each container's use of each GPU
 * against its limits → reports and, under the kill policy, SIGKILLs (monitor.h).
 *
 * A sample's processes are grouped by (GPU, pod, container). A process's container is
 * named through the resolve callback (the pod watch: container ID → name); when some
 * process of a pod on a GPU cannot be named, the pod's processes on that GPU are judged
 * together against the sum of its containers' limits there. Limits are cached per group
 * and re-read after MON_LIMITS_TTL samples (the device plugin writes them once, before
 * the container starts). Violations are episodes: one "over" report when a group passes
 * its limit plus slack, one "under" when it is back, so a log line or Event is not
 * repeated every sample.
 *
 * Independently of the memory, each process of a limited container must be registered
 * with libvgpu in that container's region (check_registration): verified from outside at
 * first sight and every MON_VERIFY_TTL samples after (registered()); one that is not is a
 * violation in the sample NVML lists it, whatever it holds. Violations are counted per
 * container (quarantine_*): a container that keeps violating is quarantined as a whole. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/proc.h"
#include "base/str.h"
#include "monitor/monitor.h"
#include "monitor/region_read.h"

#define MON_LIMITS_TTL        20 /* samples a cached limit is trusted */
#define MON_KEY_MAX           (MON_UID_MAX + MON_NAME_MAX + 8)
#define MON_TABLE_MAX         (4 * MON_MAX_PROCS)
#define MON_VERIFY_TTL        10 /* samples a process's registration is trusted before a recheck */
#define MON_SLOT_SIZE         272
#define MON_REGION_CANDIDATES 16 /* regions of one pod a process may be registered in */
#define MON_QUAR_IDS          8  /* container IDs a quarantine remembers (restarts) */
#define MON_SWEEP_PASSES      4  /* passes over /proc per sweep (forks during one) */
#define MON_UTIL_BUCKETS      32 /* a group's utilization over the compute window */

/* A process of the sample with who it belongs to. */
struct item {
    struct mon_proc proc;
    struct mon_cgroup_id id;
    char name[MON_NAME_MAX]; /* "" unknown */
    uint64_t start;          /* start time (clock ticks since boot), read only for kills */
    bool killed;             /* in this sample */
};

/* A process's registration, by pid and start time (a reused pid is another process). */
struct reg {
    pid_t pid;
    uint64_t start;
    uint64_t checked_at, seen_at; /* samples */
    bool ok;
    bool reported; /* its "unregistered" report went out */
};

/* A container's violations and quarantine (key: pod UID | name, "" the whole pod). */
struct quar {
    char key[MON_KEY_MAX];
    char pod_uid[MON_UID_MAX];
    char name[MON_NAME_MAX];
    char ids[MON_QUAR_IDS][MON_CID_MAX]; /* its container IDs seen (a restart makes one) */
    unsigned id_count;
    uint64_t times[MON_QUARANTINE_MAX_K]; /* ms of the last violations, a ring */
    unsigned next;
    uint64_t until_ms; /* quarantined until; 0: not */
    bool sweep;        /* kill its processes at the end of this sample */
};

/* Per (GPU, pod, container) state kept across samples. */
struct entry {
    uint64_t hash;
    char key[MON_KEY_MAX];
    uint64_t limit; /* bytes; UINT64_MAX: none */
    bool limited;   /* a limits file was found */
    /* A live resize lowered the limit from this (bytes; 0: not lowered, or the container
     * is below the new limit since): lowering frees nothing, so what the container held
     * under the old limit stays allowed until its use falls below the new one. */
    uint64_t lowered_from;
    uint64_t loaded_at, seen_at;
    bool over;        /* in a violation episode */
    bool kill_failed; /* a kill failed in this episode (logged once) */
    /* Compute (judge_compute): the ceiling in percent (100: none), and the group's summed
     * utilization per sample in buckets of compute_window_ms / MON_UTIL_BUCKETS. */
    unsigned ceiling;
    /* A live resize lowered the ceiling from this (0: not lowered, or the group's mean was
     * within the new one since): the utilization NVML reports lags the change, so the old
     * ceiling holds until the mean is within the new one, as lowered_from does for memory. */
    unsigned ceiling_from;
    bool compute_over;
    uint64_t first_ms; /* when the group was first seen (a window must have passed) */
    struct {
        uint64_t start_ms, sum;
        unsigned count;
    } util[MON_UTIL_BUCKETS];
    unsigned util_next;
};

struct mon_monitor {
    struct mon_options opt;
    char (*uuids)[VGPU_CONFIG_UUID_MAX];
    unsigned gpu_count;
    struct mon_counters counters;
    struct item *items; /* MON_MAX_PROCS */
    struct entry *entries;
    size_t entry_count, entry_cap;
    struct reg *regs;
    size_t reg_count, reg_cap;
    struct quar *quars;
    size_t quar_count, quar_cap;
    char cgroup_text[MON_CGROUP_MAX + 1];
    char *maps;           /* MON_MAPS_BUF, for registered() */
    unsigned char *slots; /* the region's process table, for registered() */
};

int mon_new(const struct mon_options *options, const char *const *gpu_uuids, unsigned gpu_count,
            struct mon_monitor **out, struct vg_err *err)
{
    if (gpu_count > MON_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "%u GPUs: at most %d", gpu_count, MON_MAX_GPUS);
    VG_AUTO_FREE struct mon_monitor *m = vg_calloc(1, sizeof *m);
    if (!m)
        return vg_err_set(err, -ENOMEM, "monitor: out of memory");
    m->opt = *options;
    if (!m->opt.region_dir)
        m->opt.region_dir = "/usr/local/vgpu/containers";
    if (!m->opt.proc_root)
        m->opt.proc_root = "/proc";
    if (!m->opt.cgroup_root)
        m->opt.cgroup_root = "";
    if (m->opt.quarantine_after > MON_QUARANTINE_MAX_K)
        return vg_err_set(err, -EINVAL, "quarantine after %u violations: at most %d",
                          m->opt.quarantine_after, MON_QUARANTINE_MAX_K);
    m->uuids = vg_calloc(gpu_count ? gpu_count : 1, sizeof *m->uuids);
    m->items = vg_calloc(MON_MAX_PROCS, sizeof *m->items);
    if (m->opt.check_registration) {
        m->maps = vg_calloc(1, MON_MAPS_BUF);
        m->slots = vg_calloc(REGION_MAX_PROCS, MON_SLOT_SIZE);
    }
    if (!m->uuids || !m->items || (m->opt.check_registration && (!m->maps || !m->slots))) {
        free(m->uuids);
        free(m->items);
        free(m->maps);
        free(m->slots);
        return vg_err_set(err, -ENOMEM, "monitor: out of memory");
    }
    for (unsigned i = 0; i < gpu_count; i++)
        if (vg_strlcpy(m->uuids[i], gpu_uuids[i], sizeof m->uuids[i]) < 0) {
            free(m->uuids);
            free(m->items);
            free(m->maps);
            free(m->slots);
            return vg_err_set(err, -EINVAL, "GPU UUID '%s' too long", gpu_uuids[i]);
        }
    m->gpu_count = gpu_count;
    *out = vg_steal_ptr(&m);
    return 0;
}

void mon_free(struct mon_monitor *mon)
{
    if (!mon)
        return;
    free(mon->uuids);
    free(mon->items);
    free(mon->entries);
    free(mon->regs);
    free(mon->quars);
    free(mon->maps);
    free(mon->slots);
    free(mon);
}

void mon_get_counters(const struct mon_monitor *mon, struct mon_counters *out)
{
    *out = mon->counters;
}

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static struct entry *entry_get(struct mon_monitor *m, const char *key)
{
    uint64_t h = fnv(key);
    for (size_t i = 0; i < m->entry_count; i++)
        if (m->entries[i].hash == h && strcmp(m->entries[i].key, key) == 0)
            return &m->entries[i];
    if (m->entry_count == m->entry_cap) {
        struct vg_err ignored;
        if (vg_array_grow(&m->entries, &m->entry_cap, m->entry_count + 1, sizeof *m->entries,
                          MON_TABLE_MAX, "monitor groups", &ignored) < 0)
            return NULL;
    }
    struct entry *e = &m->entries[m->entry_count++];
    memset(e, 0, sizeof *e);
    e->hash = h;
    (void)vg_strlcpy(e->key, key, sizeof e->key);
    return e;
}

/* Appends s (or the decimal v when s is NULL) at *len in buf[size]; false when it does
 * not fit. The hot path builds its paths and keys with this rather than snprintf. */
static bool append(char *buf, size_t size, size_t *len, const char *s, uint64_t v)
{
    char digits[24];
    if (!s) {
        size_t i = sizeof digits;
        digits[--i] = '\0';
        do
            digits[--i] = (char)('0' + v % 10);
        while ((v /= 10) != 0);
        s = digits + i;
    }
    size_t n = strlen(s);
    if (*len + n >= size)
        return false;
    memcpy(buf + *len, s, n + 1);
    *len += n;
    return true;
}

/* Opens <proc_root>/<pid>/<file>: a descriptor or -errno. */
static int open_proc(const struct mon_monitor *m, pid_t pid, const char *file)
{
    char path[MON_PATH_MAX];
    size_t pl = 0;
    if (pid <= 0 || !append(path, sizeof path, &pl, m->opt.proc_root, 0) ||
        !append(path, sizeof path, &pl, "/", 0) ||
        !append(path, sizeof path, &pl, NULL, (uint64_t)pid) ||
        !append(path, sizeof path, &pl, "/", 0) || !append(path, sizeof path, &pl, file, 0))
        return pid <= 0 ? -ESRCH : -ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* Reads up to size - 1 bytes from fd into buf at *len; the bytes read (0 at the end) or
 * -errno. */
static ssize_t read_some(int fd, char *buf, size_t size)
{
    for (;;) {
        ssize_t n = read(fd, buf, size);
        if (n < 0 && errno == EINTR)
            continue;
        return n < 0 ? -errno : n;
    }
}

/* Reads <proc_root>/<pid>/<file> into buf[size] (NUL-terminated); its length or -errno. */
static ssize_t read_proc(const struct mon_monitor *m, pid_t pid, const char *file, char *buf,
                         size_t size)
{
    VG_AUTO_CLOSE int fd = open_proc(m, pid, file);
    if (fd < 0)
        return fd;
    size_t len = 0;
    while (len < size - 1) {
        ssize_t n = read_some(fd, buf + len, size - 1 - len);
        if (n < 0)
            return n;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return (ssize_t)len;
}

static int proc_identity(struct mon_monitor *m, pid_t pid, struct mon_cgroup_id *id,
                         struct vg_err *err)
{
    ssize_t n = read_proc(m, pid, "cgroup", m->cgroup_text, sizeof m->cgroup_text);
    if (n < 0)
        return vg_err_errno(err, (int)-n, "pid %d: cannot read its cgroup", (int)pid);
    return mon_cgroup_parse(m->cgroup_text, (size_t)n, m->opt.cgroup_root, id, err);
}

/* Field 22 of /proc/<pid>/stat, the start time; 0 when it cannot be read. */
static uint64_t proc_start(struct mon_monitor *m, pid_t pid)
{
    uint64_t v;
    return vg_proc_start_time(m->opt.proc_root, pid, &v, NULL) == 0 ? v : 0;
}

/* Whether the process has exited (a zombie, or gone). */
static bool proc_exited(struct mon_monitor *m, pid_t pid)
{
    struct vg_proc_stat st;
    return vg_proc_stat_read(m->opt.proc_root, pid, &st, NULL) != 0 ||
           vg_proc_state_exited(st.state);
}

static int cmp_items(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->proc.gpu != y->proc.gpu)
        return x->proc.gpu < y->proc.gpu ? -1 : 1;
    int c = strcmp(x->id.pod_uid, y->id.pod_uid);
    return c ? c : strcmp(x->name, y->name);
}

/* Newest first: latest start time, then highest pid. */
static int cmp_newest(const void *a, const void *b)
{
    const struct item *x = *(const struct item *const *)a, *y = *(const struct item *const *)b;
    if (x->start != y->start)
        return x->start > y->start ? -1 : 1;
    return x->proc.pid > y->proc.pid ? -1 : x->proc.pid < y->proc.pid;
}

/* The memory limit and compute ceiling of one container on one GPU; false when it has no
 * limits file. */
static bool container_limit(struct mon_monitor *m, const char *pod, const char *name, unsigned gpu,
                            uint64_t *limit, unsigned *ceiling)
{
    struct mon_limits lim;
    struct vg_err err = {0};
    int rc = mon_limits_read(m->opt.region_dir, pod, name, &lim, &err);
    if (rc == -ENOENT)
        return false;
    if (rc < 0) {
        /* The plugin's file is unreadable: judge against nothing rather than guess. */
        vg_log(VG_LOG_WARN, "limits file unusable; container not judged", "pod=%s container=%s %s",
               pod, name, err.msg);
        return false;
    }
    *limit = mon_limits_for_gpu(&lim, m->uuids[gpu]);
    *ceiling = mon_limits_compute_for_gpu(&lim, m->uuids[gpu]);
    return true;
}

VG_DEFINE_AUTO(closedirp, DIR, closedir)

/* The sum of a pod's containers' limits and ceilings on one GPU (its directories
 * "<uid>_*"); the ceilings' sum at most 100. */
static bool pod_limit(struct mon_monitor *m, const char *pod, unsigned gpu, uint64_t *limit,
                      unsigned *ceiling)
{
    VG_AUTO(closedirp) DIR *d = opendir(m->opt.region_dir);
    if (!d)
        return false;
    size_t pl = strlen(pod);
    bool any = false;
    uint64_t sum = 0;
    unsigned csum = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, pod, pl) != 0 || de->d_name[pl] != '_')
            continue;
        uint64_t l;
        unsigned c;
        if (!container_limit(m, pod, de->d_name + pl + 1, gpu, &l, &c))
            continue;
        any = true;
        sum = (l == UINT64_MAX || sum > UINT64_MAX - l) ? UINT64_MAX : sum + l;
        csum = csum + c > 100 ? 100 : csum + c;
    }
    *limit = sum;
    *ceiling = csum;
    return any;
}

static void report(struct mon_monitor *m, const char *kind, unsigned gpu, const char *pod,
                   const char *name, uint64_t used, uint64_t limit, pid_t pid, uint64_t freed)
{
    if (!m->opt.report)
        return;
    struct mon_report r = {.kind = kind,
                           .gpu_uuid = m->uuids[gpu],
                           .pod_uid = pod,
                           .container = name,
                           .used = used,
                           .limit = limit,
                           .slack = mon_slack(limit),
                           .pid = pid,
                           .freed = freed};
    m->opt.report(m->opt.report_arg, &r);
}

static uint64_t now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* ---- registration: is a GPU process the one libvgpu registered? ------------------ */

/* A region file a process of the group may be registered in. */
struct candidate {
    dev_t dev;
    ino_t ino;
    char path[MON_PATH_MAX];
};

/* The regions of the group's container (name) or, when it is not known, of every
 * container of the pod: <region-dir>/<pod>_<name>/region, stat'ed. */
static size_t candidates(struct mon_monitor *m, const char *pod, const char *name,
                         struct candidate *out)
{
    size_t n = 0;
    char path[MON_PATH_MAX];
    struct stat st;
    if (name[0]) {
        if (vg_snprintf(path, sizeof path, "%s/%s_%s/region", m->opt.region_dir, pod, name) < 0 ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            return 0;
        out[0].dev = st.st_dev;
        out[0].ino = st.st_ino;
        (void)vg_strlcpy(out[0].path, path, sizeof out[0].path);
        return 1;
    }
    VG_AUTO(closedirp) DIR *d = opendir(m->opt.region_dir);
    if (!d)
        return 0;
    size_t pl = strlen(pod);
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < MON_REGION_CANDIDATES) {
        if (strncmp(de->d_name, pod, pl) != 0 || de->d_name[pl] != '_')
            continue;
        if (vg_snprintf(path, sizeof path, "%s/%s/region", m->opt.region_dir, de->d_name) < 0 ||
            lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        out[n].dev = st.st_dev;
        out[n].ino = st.st_ino;
        (void)vg_strlcpy(out[n].path, path, sizeof out[n].path);
        n++;
    }
    return n;
}

/* The process's pid in its own (innermost) pid namespace: the last NSpid of its status,
 * which is what libvgpu wrote in its slot. */
static int ns_pid(struct mon_monitor *m, pid_t pid, int32_t *out)
{
    char buf[4096];
    ssize_t n = read_proc(m, pid, "status", buf, sizeof buf);
    if (n < 0)
        return (int)n;
    const char *line = strstr(buf, "\nNSpid:");
    if (!line) { /* kernels before 4.1: no namespaces to translate */
        *out = (int32_t)pid;
        return 0;
    }
    line += 7;
    const char *end = strchr(line, '\n');
    long last = -1;
    while (*line && (!end || line < end)) {
        char *next;
        long v = strtol(line, &next, 10);
        if (next == line)
            break;
        last = v;
        line = next;
    }
    if (last <= 0 || last > INT32_MAX)
        return -EPROTO;
    *out = (int32_t)last;
    return 0;
}

/* Whether slot table of the region at c (mapped by the process) holds a live slot with
 * this pid. The file is opened without following links or waiting and must still be the
 * file the process maps (same device and inode) and a whole region. */
static bool slot_of(struct mon_monitor *m, const struct candidate *c, int32_t pid)
{
    VG_AUTO_CLOSE int fd = open(c->path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_dev != c->dev ||
        st.st_ino != c->ino || st.st_size != (off_t)MON_REGION_FILE_SIZE)
        return false;
    size_t want = (size_t)REGION_MAX_PROCS * MON_SLOT_SIZE;
    ssize_t got = pread(fd, m->slots, want, MON_REGION_HEAD);
    if (got != (ssize_t)want)
        return false;
    for (size_t i = 0; i < REGION_MAX_PROCS; i++) {
        const unsigned char *slot = m->slots + i * MON_SLOT_SIZE;
        uint32_t state;
        int32_t spid;
        memcpy(&state, slot, sizeof state);
        memcpy(&spid, slot + 8, sizeof spid);
        if (state == 1 && spid == pid)
            return true;
    }
    return false;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Whether the process is registered with libvgpu in one of the group's regions, verified
 * from outside: it maps libvgpu (a file named libvgpu.so*), maps the driver (libcuda.so*)
 * at most once (a second load is dlmopen or a copy by path: allocations libvgpu does not
 * see), maps one of the regions (device and inode of the file in the containers
 * directory), and that region has a live slot with the process's own pid. *why names the
 * first check that failed. A process whose files cannot be read fails (fails closed); one
 * that is gone returns -ESRCH. */
static int registered(struct mon_monitor *m, pid_t pid, const char *pod, const char *name,
                      const char **why)
{
    struct candidate cands[MON_REGION_CANDIDATES];
    size_t nc = candidates(m, pod, name, cands);
    int32_t nspid = 0;
    int rc = ns_pid(m, pid, &nspid);
    if (rc == -ENOENT || rc == -ESRCH)
        return -ESRCH;
    if (rc < 0) {
        *why = "status unreadable";
        return 0;
    }
    /* The whole file, a buffer at a time (a process with a huge map cannot push a
     * mapping out of sight). */
    VG_AUTO_CLOSE int fd = open_proc(m, pid, "maps");
    if (fd == -ENOENT || fd == -ESRCH)
        return -ESRCH;
    if (fd < 0) {
        *why = "maps unreadable";
        return 0;
    }
    bool libvgpu = false;
    unsigned cuda_loads = 0;
    const struct candidate *mapped = NULL;
    size_t have = 0;
    for (;;) {
        ssize_t n = read_some(fd, m->maps + have, MON_MAPS_BUF - 1 - have);
        if (n == -ESRCH || n == -ENOENT)
            return -ESRCH;
        if (n < 0) {
            *why = "maps unreadable";
            return 0;
        }
        have += (size_t)n;
        m->maps[have] = '\0';
        char *line = m->maps;
        for (char *nl; (nl = strchr(line, '\n')) != NULL || (n == 0 && *line); line = nl + 1) {
            if (!nl)
                nl = line + strlen(line); /* the last line, without its newline */
            *nl = '\0';
            unsigned long long off = 0, ino = 0;
            unsigned maj = 0, mnr = 0;
            int at = 0;
            if (sscanf(line, "%*s %*s %llx %x:%x %llu %n", &off, &maj, &mnr, &ino, &at) == 4 &&
                at > 0) {
                const char *b = base_name(line + at);
                if (strncmp(b, "libvgpu.so", 10) == 0)
                    libvgpu = true;
                if (strncmp(b, "libcuda.so", 10) == 0 && off == 0)
                    cuda_loads++;
                for (size_t i = 0; i < nc && !mapped && ino != 0; i++)
                    if (cands[i].ino == (ino_t)ino && major(cands[i].dev) == maj &&
                        minor(cands[i].dev) == mnr)
                        mapped = &cands[i];
            }
            if (nl == m->maps + have)
                break;
        }
        if (n == 0)
            break;
        size_t used = (size_t)(line - m->maps);
        if (used > have)
            used = have;
        if (used == 0 && have == MON_MAPS_BUF - 1) {
            *why = "maps unreadable"; /* a line longer than any the kernel writes */
            return 0;
        }
        memmove(m->maps, m->maps + used, have - used);
        have -= used;
    }
    if (!libvgpu)
        *why = "libvgpu not loaded";
    else if (cuda_loads > 1)
        *why = "the driver loaded twice";
    else if (!mapped)
        *why = "the container's region not mapped";
    else if (!slot_of(m, mapped, nspid))
        *why = "no slot in the container's region";
    else
        return 1;
    return 0;
}

static struct reg *reg_get(struct mon_monitor *m, pid_t pid, uint64_t start)
{
    for (size_t i = 0; i < m->reg_count; i++)
        if (m->regs[i].pid == pid && m->regs[i].start == start)
            return &m->regs[i];
    struct vg_err ignored;
    if (vg_array_grow(&m->regs, &m->reg_cap, m->reg_count + 1, sizeof *m->regs, MON_TABLE_MAX,
                      "registrations", &ignored) < 0)
        return NULL;
    struct reg *r = &m->regs[m->reg_count++];
    memset(r, 0, sizeof *r);
    r->pid = pid;
    r->start = start;
    return r;
}

/* ---- containers: violations and quarantine ---------------------------------------- */

static struct quar *quar_get(struct mon_monitor *m, const char *pod, const char *name, bool add)
{
    char key[MON_KEY_MAX];
    if (vg_snprintf(key, sizeof key, "%s|%s", pod, name) < 0)
        return NULL;
    for (size_t i = 0; i < m->quar_count; i++)
        if (strcmp(m->quars[i].key, key) == 0)
            return &m->quars[i];
    struct vg_err ignored;
    if (!add || vg_array_grow(&m->quars, &m->quar_cap, m->quar_count + 1, sizeof *m->quars,
                              MON_TABLE_MAX, "quarantines", &ignored) < 0)
        return NULL;
    struct quar *q = &m->quars[m->quar_count++];
    memset(q, 0, sizeof *q);
    (void)vg_strlcpy(q->key, key, sizeof q->key);
    (void)vg_strlcpy(q->pod_uid, pod, sizeof q->pod_uid);
    (void)vg_strlcpy(q->name, name, sizeof q->name);
    return q;
}

static void quar_add_id(struct quar *q, const char *id)
{
    if (!id[0])
        return;
    for (unsigned i = 0; i < q->id_count; i++)
        if (strcmp(q->ids[i], id) == 0)
            return;
    unsigned at = q->id_count < MON_QUAR_IDS ? q->id_count++ : MON_QUAR_IDS - 1;
    (void)vg_strlcpy(q->ids[at], id, sizeof q->ids[at]);
}

static void report_container(struct mon_monitor *m, const char *kind, const struct quar *q,
                             unsigned violations, uint64_t until)
{
    if (!m->opt.report)
        return;
    struct mon_report r = {.kind = kind,
                           .gpu_uuid = "",
                           .pod_uid = q->pod_uid,
                           .container = q->name,
                           .violations = violations,
                           .until_ms = until};
    m->opt.report(m->opt.report_arg, &r);
}

static void quarantine(struct mon_monitor *m, struct quar *q, unsigned violations, uint64_t now)
{
    q->until_ms = now + (m->opt.quarantine_ms ? m->opt.quarantine_ms : 1);
    q->sweep = true;
    m->counters.quarantines++;
    report_container(m, "quarantine", q, violations, m->opt.quarantine_ms);
}

/* One violation of the container of it: counted in its window; the quarantine_after-th
 * within the window quarantines the container. */
static void note_violation(struct mon_monitor *m, const struct item *it, const char *name)
{
    unsigned k = m->opt.quarantine_after;
    if (k == 0)
        return;
    struct quar *q = quar_get(m, it->id.pod_uid, name, true);
    if (!q)
        return;
    quar_add_id(q, it->id.container_id);
    uint64_t now = now_ms();
    q->times[q->next++ % k] = now;
    if (q->until_ms != 0)
        return;
    unsigned recent = 0;
    for (unsigned i = 0; i < k && i < q->next; i++)
        if (now - q->times[i] <= m->opt.quarantine_window_ms)
            recent++;
    if (recent < k)
        return;
    quarantine(m, q, recent, now);
}

/* SIGKILL, but only to the process that is still the one judged: through a pidfd (a
 * reused pid cannot be hit) whose cgroup is checked again after it was opened. */
static int kill_checked(struct mon_monitor *m, const struct item *it, struct vg_err *err)
{
    VG_AUTO_CLOSE int pidfd = (int)syscall(SYS_pidfd_open, it->proc.pid, 0);
    if (pidfd < 0 && errno != ENOSYS)
        return vg_err_errno(err, errno, "pid %d", (int)it->proc.pid);
    struct mon_cgroup_id now;
    if (proc_identity(m, it->proc.pid, &now, err) < 0)
        return err->code;
    if (strcmp(now.pod_uid, it->id.pod_uid) != 0 ||
        strcmp(now.container_id, it->id.container_id) != 0)
        return vg_err_set(err, -ESRCH, "pid %d is no longer the process judged", (int)it->proc.pid);
    int rc = pidfd >= 0 ? (int)syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0)
                        : kill(it->proc.pid, SIGKILL);
    if (rc != 0)
        return vg_err_errno(err, errno, "pid %d: SIGKILL", (int)it->proc.pid);
    return 0;
}

/* Kills every process of a quarantined container, GPU or not (the parent of a relay uses
 * none): the processes under proc_root whose cgroup names the pod and one of the
 * container's IDs (any container of the pod when it is judged whole). Passes until one
 * finds nothing, so a child forked during a pass is found by the next. */
static void sweep(struct mon_monitor *m, struct quar *q)
{
    pid_t self = getpid();
    for (int pass = 0; pass < MON_SWEEP_PASSES; pass++) {
        VG_AUTO(closedirp) DIR *d = opendir(m->opt.proc_root);
        if (!d)
            return;
        unsigned killed = 0;
        struct dirent *de;
        while ((de = readdir(d)) != NULL) {
            uint64_t v;
            struct vg_err ignored;
            if (de->d_name[0] < '1' || de->d_name[0] > '9' ||
                vg_parse_u64(de->d_name, 1, INT32_MAX, &v, &ignored) < 0 || (pid_t)v == self)
                continue;
            struct item it;
            memset(&it, 0, sizeof it);
            it.proc.pid = (pid_t)v;
            if (proc_identity(m, it.proc.pid, &it.id, NULL) < 0 ||
                strcmp(it.id.pod_uid, q->pod_uid) != 0 || proc_exited(m, it.proc.pid))
                continue;
            bool ours = q->name[0] == '\0';
            for (unsigned i = 0; i < q->id_count && !ours; i++)
                ours = strcmp(q->ids[i], it.id.container_id) == 0;
            if (!ours)
                continue;
            struct vg_err err = {0};
            int rc = kill_checked(m, &it, &err);
            if (rc == -ESRCH || rc == -ENOENT)
                continue;
            if (rc < 0) {
                m->counters.kill_failures++;
                continue;
            }
            m->counters.kills++;
            killed++;
            if (m->opt.report) {
                struct mon_report r = {.kind = "kill",
                                       .gpu_uuid = "",
                                       .pod_uid = q->pod_uid,
                                       .container = q->name,
                                       .pid = it.proc.pid,
                                       .why = "quarantine"};
                m->opt.report(m->opt.report_arg, &r);
            }
        }
        if (killed == 0)
            return;
    }
}

/* Kills one item for why ("limit", "unregistered", "quarantine"); its memory leaves used.
 * 1: killed now; 0: killed before or gone; -1: the kill failed. */
static int kill_item(struct mon_monitor *m, struct entry *e, struct item *it, const char *name,
                     uint64_t *used, uint64_t limit, const char *why)
{
    if (it->killed)
        return 0;
    struct vg_err err = {0};
    int rc = kill_checked(m, it, &err);
    if (rc == -ESRCH || rc == -ENOENT) {
        /* Gone since the sample (or its pid now someone else's): it holds nothing of
         * this container's any more. */
        it->killed = true;
        *used -= it->proc.used < *used ? it->proc.used : *used;
        return 0;
    }
    if (rc < 0) {
        m->counters.kill_failures++;
        if (!e->kill_failed)
            vg_log(VG_LOG_WARN, "cannot kill; retried every sample, logged once",
                   "pod_uid=%s container=%s %s", it->id.pod_uid, name, err.msg);
        e->kill_failed = true;
        return -1;
    }
    it->killed = true;
    m->counters.kills++;
    *used -= it->proc.used < *used ? it->proc.used : *used;
    if (m->opt.report) {
        struct mon_report r = {.kind = "kill",
                               .gpu_uuid = m->uuids[it->proc.gpu],
                               .pod_uid = it->id.pod_uid,
                               .container = name,
                               .used = *used,
                               .limit = limit,
                               .slack = mon_slack(limit),
                               .pid = it->proc.pid,
                               .freed = it->proc.used,
                               .why = why};
        m->opt.report(m->opt.report_arg, &r);
    }
    return 1;
}

/* The group's compute as a whole: the sum of its processes' utilization this sample goes
 * into the window's buckets; once the group has been seen for a whole window, a mean over
 * the window above the ceiling plus the margin starts an episode. Under kill the container
 * is quarantined at once: libvgpu holds each honest process to the share, so a container
 * that stays over it has forged the budget its processes share (docs/security.md,
 * "Cooperating processes"). Under warn it is a violation like the others. */
static void judge_compute(struct mon_monitor *m, struct entry *e, struct item *items, size_t n,
                          const char *name, uint64_t *used)
{
    if (!m->opt.check_compute || e->ceiling >= 100)
        return;
    uint64_t window = m->opt.compute_window_ms ? m->opt.compute_window_ms : 3000;
    uint64_t width = window / MON_UTIL_BUCKETS ? window / MON_UTIL_BUCKETS : 1;
    unsigned sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += items[i].proc.util < 100 ? items[i].proc.util : 100;
    if (sum > 100)
        sum = 100; /* one GPU: NVML's samples of processes side by side can overlap */
    uint64_t now = now_ms();
    if (e->first_ms == 0)
        e->first_ms = now;
    unsigned cur = e->util_next % MON_UTIL_BUCKETS;
    if (e->util[cur].count == 0 || now - e->util[cur].start_ms >= width) {
        if (e->util[cur].count != 0)
            cur = ++e->util_next % MON_UTIL_BUCKETS;
        e->util[cur].start_ms = now;
        e->util[cur].sum = 0;
        e->util[cur].count = 0;
    }
    e->util[cur].sum += sum;
    e->util[cur].count++;
    if (now - e->first_ms + width < window)
        return; /* not a whole window yet */
    uint64_t total = 0, count = 0;
    for (unsigned b = 0; b < MON_UTIL_BUCKETS; b++)
        if (e->util[b].count != 0 && now - e->util[b].start_ms < window) {
            total += e->util[b].sum;
            count += e->util[b].count;
        }
    unsigned mean = count ? (unsigned)((total + count / 2) / count) : 0;
    unsigned margin = m->opt.compute_margin ? m->opt.compute_margin : 10;
    unsigned ceiling = e->ceiling;
    if (e->ceiling_from > ceiling) {
        if (mean <= ceiling + margin)
            e->ceiling_from = 0; /* within the lowered ceiling: it holds from now on */
        else
            ceiling = e->ceiling_from;
    }
    unsigned gpu = items[0].proc.gpu;
    struct mon_report r = {.gpu_uuid = m->uuids[gpu],
                           .pod_uid = items[0].id.pod_uid,
                           .container = name,
                           .util = mean,
                           .ceiling = ceiling,
                           .margin = margin};
    if (mean <= ceiling + margin) {
        if (e->compute_over && m->opt.report) {
            r.kind = "compute_under";
            m->opt.report(m->opt.report_arg, &r);
        }
        e->compute_over = false;
        return;
    }
    if (e->compute_over)
        return;
    e->compute_over = true;
    m->counters.compute_violations++;
    if (m->opt.report) {
        r.kind = "compute_over";
        m->opt.report(m->opt.report_arg, &r);
    }
    if (m->opt.policy != MON_POLICY_KILL) {
        note_violation(m, &items[0], name);
        return;
    }
    struct quar *q = m->opt.quarantine_after ? quar_get(m, r.pod_uid, name, true) : NULL;
    if (q) {
        for (size_t i = 0; i < n; i++)
            quar_add_id(q, items[i].id.container_id);
        if (q->until_ms == 0)
            quarantine(m, q, 1, now);
        return; /* the quarantine below kills them */
    }
    for (size_t i = 0; i < n; i++)
        (void)kill_item(m, e, &items[i], name, used, e->limit, "compute");
}

/* One group: items[0..n) on one GPU, one pod, one container (name "" = the whole pod). */
static void judge_group(struct mon_monitor *m, struct item *items, size_t n, const char *name)
{
    unsigned gpu = items[0].proc.gpu;
    const char *pod = items[0].id.pod_uid;
    char key[MON_KEY_MAX];
    size_t kl = 0;
    if (!append(key, sizeof key, &kl, NULL, gpu) || !append(key, sizeof key, &kl, "|", 0) ||
        !append(key, sizeof key, &kl, pod, 0) || !append(key, sizeof key, &kl, "|", 0) ||
        !append(key, sizeof key, &kl, name, 0))
        return;
    struct entry *e = entry_get(m, key);
    if (!e)
        return;
    uint64_t sample = m->counters.samples;
    e->seen_at = sample;
    if (e->loaded_at == 0 || sample - e->loaded_at >= MON_LIMITS_TTL) {
        uint64_t before = e->limit;
        unsigned ceiling_before = e->ceiling;
        bool had = e->limited;
        e->limited = name[0] ? container_limit(m, pod, name, gpu, &e->limit, &e->ceiling)
                             : pod_limit(m, pod, gpu, &e->limit, &e->ceiling);
        if (had && e->limited && e->limit < before && before > e->lowered_from)
            e->lowered_from = before;
        if (had && e->limited && e->ceiling < ceiling_before && ceiling_before > e->ceiling_from)
            e->ceiling_from = ceiling_before;
        e->loaded_at = sample;
    }
    if (!e->limited) {
        m->counters.unlimited += n;
        return;
    }
    bool kill = m->opt.policy == MON_POLICY_KILL;
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++) {
        used += items[i].proc.used;
        if (kill || m->opt.check_registration)
            items[i].start = proc_start(m, items[i].proc.pid);
    }
    uint64_t limit = e->limit;
    if (e->lowered_from > limit) {
        if (used <= limit)
            e->lowered_from = 0; /* below the lowered limit: it holds from now on */
        else
            limit = e->lowered_from;
    }
    /* 1. Memory: the container's use against its limit plus slack. */
    uint64_t slack = mon_slack(limit);
    uint64_t allowed = limit > UINT64_MAX - slack ? UINT64_MAX : limit + slack;
    if (used <= allowed) {
        if (e->over)
            report(m, "under", gpu, pod, name, used, limit, 0, 0);
        e->over = false;
        e->kill_failed = false;
    } else {
        if (!e->over) {
            e->over = true;
            m->counters.violations++;
            report(m, "over", gpu, pod, name, used, limit, 0, 0);
            if (!kill) /* under kill, each kill is the violation counted */
                note_violation(m, &items[0], name);
        }
        if (kill) {
            struct item *order[MON_MAX_PROCS];
            for (size_t i = 0; i < n; i++)
                order[i] = &items[i];
            qsort(order, n, sizeof order[0], cmp_newest);
            /* A relay of processes each killed keeps the episode open: each kill counts
             * towards the container's quarantine. */
            for (size_t i = 0; i < n && used > allowed; i++)
                if (kill_item(m, e, order[i], name, &used, limit, "limit") == 1)
                    note_violation(m, order[i], name);
        }
    }
    /* 1b. Compute: the container's utilization over the window against its ceiling. */
    judge_compute(m, e, items, n, name, &used);
    /* 2. Registration: every process must be libvgpu's, whatever it holds. */
    for (size_t i = 0; m->opt.check_registration && i < n; i++) {
        struct item *it = &items[i];
        if (it->killed)
            continue; /* killed for its memory: one violation, not two */
        struct reg *r = reg_get(m, it->proc.pid, it->start);
        if (!r)
            continue;
        r->seen_at = sample;
        if (r->checked_at == 0 || (r->ok && sample - r->checked_at >= MON_VERIFY_TTL)) {
            const char *why = "";
            int rc = registered(m, it->proc.pid, pod, name, &why);
            if (rc == -ESRCH)
                continue; /* gone since the sample */
            r->checked_at = sample;
            r->ok = rc == 1;
            if (!r->ok && !r->reported) {
                r->reported = true;
                m->counters.unregistered++;
                if (m->opt.report) {
                    struct mon_report rep = {.kind = "unregistered",
                                             .gpu_uuid = m->uuids[gpu],
                                             .pod_uid = pod,
                                             .container = name,
                                             .used = used,
                                             .limit = limit,
                                             .slack = slack,
                                             .pid = it->proc.pid,
                                             .freed = it->proc.used,
                                             .why = why};
                    m->opt.report(m->opt.report_arg, &rep);
                }
                note_violation(m, it, name);
            }
        }
        if (!r->ok && kill)
            (void)kill_item(m, e, it, name, &used, limit, "unregistered");
    }
    /* 3. A quarantined container: under kill, anything of it on a GPU goes at once, and
     * the rest of the container with it (at the end of the sample). */
    struct quar *q = m->quar_count ? quar_get(m, pod, name, false) : NULL;
    if (q && q->until_ms != 0) {
        for (size_t i = 0; i < n; i++)
            quar_add_id(q, items[i].id.container_id);
        if (kill) {
            q->sweep = true;
            for (size_t i = 0; i < n; i++)
                (void)kill_item(m, e, &items[i], name, &used, limit, "quarantine");
        }
    }
}

int mon_judge(struct mon_monitor *m, const struct mon_proc *procs, size_t count, struct vg_err *err)
{
    if (count > MON_MAX_PROCS)
        return vg_err_set(err, -E2BIG, "%zu GPU processes: at most %d", count, MON_MAX_PROCS);
    m->counters.samples++;
    m->counters.processes = count;
    m->counters.unattributed = 0;
    m->counters.unlimited = 0;
    /* Quarantines whose period is over; containers without a violation in the window
     * are forgotten. */
    uint64_t now = now_ms();
    size_t keepq = 0;
    m->counters.quarantined = 0;
    for (size_t i = 0; i < m->quar_count; i++) {
        struct quar *q = &m->quars[i];
        if (q->until_ms != 0 && now >= q->until_ms) {
            q->until_ms = 0;
            q->next = 0;
            report_container(m, "release", q, 0, 0);
        }
        bool recent = false;
        for (unsigned k = 0; k < m->opt.quarantine_after && k < q->next; k++)
            recent |= now - q->times[k] <= m->opt.quarantine_window_ms;
        if (q->until_ms == 0 && !recent)
            continue;
        m->counters.quarantined += q->until_ms != 0;
        m->quars[keepq++] = *q;
    }
    m->quar_count = keepq;
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (procs[i].gpu >= m->gpu_count)
            return vg_err_set(err, -EINVAL, "process %d on GPU %u of %u", (int)procs[i].pid,
                              procs[i].gpu, m->gpu_count);
        struct item *it = &m->items[n];
        struct vg_err sub = {0};
        int rc = proc_identity(m, procs[i].pid, &it->id, &sub);
        if (rc < 0) {
            /* Gone since NVML listed it, outside every pod, or a cgroup we cannot read. */
            if (rc != -ENOENT)
                vg_log(VG_LOG_DEBUG, "process not attributed", "pid=%d %s", (int)procs[i].pid,
                       sub.msg);
            m->counters.unattributed++;
            continue;
        }
        it->proc = procs[i];
        it->name[0] = '\0';
        it->killed = false;
        it->start = 0;
        if (it->id.container_id[0] && m->opt.resolve &&
            m->opt.resolve(m->opt.resolve_arg, it->id.pod_uid, it->id.container_id, it->name) != 0)
            it->name[0] = '\0';
        n++;
    }
    qsort(m->items, n, sizeof m->items[0], cmp_items);
    /* Runs of one (GPU, pod): per container when every process is named, else whole. */
    for (size_t i = 0; i < n;) {
        size_t j = i;
        bool named = true;
        while (j < n && m->items[j].proc.gpu == m->items[i].proc.gpu &&
               strcmp(m->items[j].id.pod_uid, m->items[i].id.pod_uid) == 0) {
            named &= m->items[j].name[0] != '\0';
            j++;
        }
        if (!named) {
            judge_group(m, &m->items[i], j - i, "");
        } else {
            for (size_t k = i; k < j;) {
                size_t l = k;
                while (l < j && strcmp(m->items[l].name, m->items[k].name) == 0)
                    l++;
                judge_group(m, &m->items[k], l - k, m->items[k].name);
                k = l;
            }
        }
        i = j;
    }
    /* Quarantined containers seen this sample: the rest of their processes. */
    for (size_t i = 0; i < m->quar_count; i++)
        if (m->quars[i].sweep) {
            m->quars[i].sweep = false;
            if (m->opt.policy == MON_POLICY_KILL)
                sweep(m, &m->quars[i]);
        }
    /* Forget processes not listed this sample. */
    size_t keepr = 0;
    for (size_t i = 0; i < m->reg_count; i++)
        if (m->regs[i].seen_at == m->counters.samples)
            m->regs[keepr++] = m->regs[i];
    m->reg_count = keepr;
    /* Forget groups that had no process this sample (their episode is over). */
    size_t keep = 0;
    for (size_t i = 0; i < m->entry_count; i++)
        if (m->entries[i].seen_at == m->counters.samples)
            m->entries[keep++] = m->entries[i];
    m->entry_count = keep;
    return 0;
}
