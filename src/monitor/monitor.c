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
 * repeated every sample. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "monitor/monitor.h"

#define MON_LIMITS_TTL 20 /* samples a cached limit is trusted */
#define MON_KEY_MAX    (MON_UID_MAX + MON_NAME_MAX + 8)
#define MON_TABLE_MAX  (4 * MON_MAX_PROCS)

/* A process of the sample with who it belongs to. */
struct item {
    struct mon_proc proc;
    struct mon_cgroup_id id;
    char name[MON_NAME_MAX]; /* "" unknown */
    uint64_t start;          /* start time (clock ticks since boot), read only for kills */
};

/* Per (GPU, pod, container) state kept across samples. */
struct entry {
    uint64_t hash;
    char key[MON_KEY_MAX];
    uint64_t limit; /* bytes; UINT64_MAX: none */
    bool limited;   /* a limits file was found */
    uint64_t loaded_at, seen_at;
    bool over;        /* in a violation episode */
    bool kill_failed; /* a kill failed in this episode (logged once) */
};

struct mon_monitor {
    struct mon_options opt;
    char (*uuids)[VGPU_CONFIG_UUID_MAX];
    unsigned gpu_count;
    struct mon_counters counters;
    struct item *items; /* MON_MAX_PROCS */
    struct entry *entries;
    size_t entry_count, entry_cap;
    char cgroup_text[MON_CGROUP_MAX + 1];
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
    if (!m->opt.containers_dir)
        m->opt.containers_dir = "/usr/local/vgpu/containers";
    if (!m->opt.proc_root)
        m->opt.proc_root = "/proc";
    if (!m->opt.cgroup_root)
        m->opt.cgroup_root = "";
    m->uuids = vg_calloc(gpu_count ? gpu_count : 1, sizeof *m->uuids);
    m->items = vg_calloc(MON_MAX_PROCS, sizeof *m->items);
    if (!m->uuids || !m->items) {
        free(m->uuids);
        free(m->items);
        return vg_err_set(err, -ENOMEM, "monitor: out of memory");
    }
    for (unsigned i = 0; i < gpu_count; i++)
        if (vg_strlcpy(m->uuids[i], gpu_uuids[i], sizeof m->uuids[i]) < 0) {
            free(m->uuids);
            free(m->items);
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

/* Reads <proc_root>/<pid>/<file> into buf[size] (NUL-terminated); its length or -errno. */
static ssize_t read_proc(const struct mon_monitor *m, pid_t pid, const char *file, char *buf,
                         size_t size)
{
    char path[MON_PATH_MAX];
    size_t pl = 0;
    if (pid <= 0 || !append(path, sizeof path, &pl, m->opt.proc_root, 0) ||
        !append(path, sizeof path, &pl, "/", 0) ||
        !append(path, sizeof path, &pl, NULL, (uint64_t)pid) ||
        !append(path, sizeof path, &pl, "/", 0) || !append(path, sizeof path, &pl, file, 0))
        return pid <= 0 ? -ESRCH : -ENAMETOOLONG;
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = 0;
    while (len < size - 1) {
        ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -errno;
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

/* Field 22 of /proc/<pid>/stat (after the command, which may hold anything but ends at
 * the last ')'). */
static uint64_t proc_start(struct mon_monitor *m, pid_t pid)
{
    char buf[1024];
    if (read_proc(m, pid, "stat", buf, sizeof buf) < 0)
        return 0;
    char *p = strrchr(buf, ')');
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p)
        return 0;
    char *end = strchr(p + 1, ' ');
    if (end)
        *end = '\0';
    uint64_t v;
    struct vg_err ignored;
    return vg_parse_u64(p + 1, 0, UINT64_MAX, &v, &ignored) == 0 ? v : 0;
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

/* The limit of one container on one GPU; false when it has no limits file. */
static bool container_limit(struct mon_monitor *m, const char *pod, const char *name, unsigned gpu,
                            uint64_t *limit)
{
    struct mon_limits lim;
    struct vg_err err = {0};
    int rc = mon_limits_read(m->opt.containers_dir, pod, name, &lim, &err);
    if (rc == -ENOENT)
        return false;
    if (rc < 0) {
        /* The plugin's file is unreadable: judge against nothing rather than guess. */
        vg_log(VG_LOG_WARN, "limits file unusable; container not judged", "pod=%s container=%s %s",
               pod, name, err.msg);
        return false;
    }
    *limit = mon_limits_for_gpu(&lim, m->uuids[gpu]);
    return true;
}

VG_DEFINE_AUTO(closedirp, DIR, closedir)

/* The sum of a pod's containers' limits on one GPU (its directories "<uid>_*"). */
static bool pod_limit(struct mon_monitor *m, const char *pod, unsigned gpu, uint64_t *limit)
{
    VG_AUTO(closedirp) DIR *d = opendir(m->opt.containers_dir);
    if (!d)
        return false;
    size_t pl = strlen(pod);
    bool any = false;
    uint64_t sum = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, pod, pl) != 0 || de->d_name[pl] != '_')
            continue;
        uint64_t l;
        if (!container_limit(m, pod, de->d_name + pl + 1, gpu, &l))
            continue;
        any = true;
        sum = (l == UINT64_MAX || sum > UINT64_MAX - l) ? UINT64_MAX : sum + l;
    }
    *limit = sum;
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
        e->limited = name[0] ? container_limit(m, pod, name, gpu, &e->limit)
                             : pod_limit(m, pod, gpu, &e->limit);
        e->loaded_at = sample;
    }
    if (!e->limited) {
        m->counters.unlimited += n;
        return;
    }
    uint64_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += items[i].proc.used;
    uint64_t limit = e->limit;
    if (limit == UINT64_MAX)
        return;
    uint64_t slack = mon_slack(limit);
    uint64_t allowed = limit > UINT64_MAX - slack ? UINT64_MAX : limit + slack;
    if (used <= allowed) {
        if (e->over)
            report(m, "under", gpu, pod, name, used, limit, 0, 0);
        e->over = false;
        e->kill_failed = false;
        return;
    }
    if (!e->over) {
        e->over = true;
        m->counters.violations++;
        report(m, "over", gpu, pod, name, used, limit, 0, 0);
    }
    if (m->opt.policy != MON_POLICY_KILL)
        return;
    struct item *order[MON_MAX_PROCS];
    for (size_t i = 0; i < n; i++) {
        items[i].start = proc_start(m, items[i].proc.pid);
        order[i] = &items[i];
    }
    qsort(order, n, sizeof order[0], cmp_newest);
    for (size_t i = 0; i < n && used > allowed; i++) {
        struct vg_err err = {0};
        int rc = kill_checked(m, order[i], &err);
        if (rc == -ESRCH || rc == -ENOENT) {
            /* Gone since the sample (or its pid now someone else's): it holds nothing
             * of this container's any more. */
            used -= order[i]->proc.used;
            continue;
        }
        if (rc < 0) {
            m->counters.kill_failures++;
            if (!e->kill_failed)
                vg_log(VG_LOG_WARN, "cannot kill; retried every sample, logged once",
                       "pod_uid=%s container=%s %s", pod, name, err.msg);
            e->kill_failed = true;
            continue;
        }
        m->counters.kills++;
        used -= order[i]->proc.used;
        report(m, "kill", gpu, pod, name, used, limit, order[i]->proc.pid, order[i]->proc.used);
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
    /* Forget groups that had no process this sample (their episode is over). */
    size_t keep = 0;
    for (size_t i = 0; i < m->entry_count; i++)
        if (m->entries[i].seen_at == m->counters.samples)
            m->entries[keep++] = m->entries[i];
    m->entry_count = keep;
    return 0;
}

int mon_format_metrics(const struct mon_counters *c, const char *policy, char *buf, size_t size)
{
    return vg_snprintf(
        buf, size,
        "# HELP vgpu_monitor_samples_total Samples of NVML's per-process GPU memory taken.\n"
        "# TYPE vgpu_monitor_samples_total counter\n"
        "vgpu_monitor_samples_total %llu\n"
        "# HELP vgpu_monitor_violations_total Episodes of a container over its GPU memory "
        "limit plus slack.\n"
        "# TYPE vgpu_monitor_violations_total counter\n"
        "vgpu_monitor_violations_total{policy=\"%s\"} %llu\n"
        "# HELP vgpu_monitor_kills_total Processes killed for a container over its limit.\n"
        "# TYPE vgpu_monitor_kills_total counter\n"
        "vgpu_monitor_kills_total %llu\n"
        "# HELP vgpu_monitor_kill_failures_total Kills that failed.\n"
        "# TYPE vgpu_monitor_kill_failures_total counter\n"
        "vgpu_monitor_kill_failures_total %llu\n"
        "# HELP vgpu_monitor_processes GPU processes in the last sample.\n"
        "# TYPE vgpu_monitor_processes gauge\n"
        "vgpu_monitor_processes %llu\n"
        "# HELP vgpu_monitor_unattributed_processes GPU processes outside every pod in the "
        "last sample.\n"
        "# TYPE vgpu_monitor_unattributed_processes gauge\n"
        "vgpu_monitor_unattributed_processes %llu\n"
        "# HELP vgpu_monitor_unlimited_processes Pod GPU processes without a limits file in "
        "the last sample.\n"
        "# TYPE vgpu_monitor_unlimited_processes gauge\n"
        "vgpu_monitor_unlimited_processes %llu\n",
        (unsigned long long)c->samples, policy, (unsigned long long)c->violations,
        (unsigned long long)c->kills, (unsigned long long)c->kill_failures,
        (unsigned long long)c->processes, (unsigned long long)c->unattributed,
        (unsigned long long)c->unlimited);
}
