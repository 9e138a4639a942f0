/* MPS mode: one MPS control daemon per GPU, managed by the plugin (docs/deviceplugin.md).
 *
 * Each GPU of an mps resource gets its own directories <mpsRoot>/<resource>/<uuid>/{pipe,log}
 * and its own `nvidia-cuda-mps-control -d` started with CUDA_VISIBLE_DEVICES=<uuid>, so a
 * client's limits and a daemon's failure concern one GPU only. The daemon is driven the
 * way its manual describes: commands written to the standard input of
 * `nvidia-cuda-mps-control` run without arguments, with CUDA_MPS_PIPE_DIRECTORY naming the
 * daemon. A GPU goes through
 *
 *   probe      get_default_active_thread_percentage: a daemon left running (the plugin
 *              restarted) answers and is adopted; otherwise
 *   spawn      `-d`, which returns once the daemon runs in the background;
 *   configure  set_default_active_thread_percentage <100/replicas> and
 *              set_default_device_pinned_mem_limit 0 <memory/replicas>M (device 0: the
 *              daemon sees only its GPU);
 *   check      get_default_active_thread_percentage must answer a number;
 *   up         the GPU's replicas are Healthy. The daemon's pid (its pid file in the pipe
 *              directory) is watched through a pidfd, and the query repeats every check
 *              interval;
 *   down       after any failure, or the daemon's exit: replicas Unhealthy, a daemon that
 *              still runs but does not answer is sent SIGTERM, and the GPU is probed
 *              again after a backoff (doubling up to a maximum, reset once up).
 *
 * Everything runs on the plugin's libevent loop: children are watched through pidfds
 * (no SIGCHLD handler to share), their output through non-blocking pipes, every command
 * has a timeout after which it is killed. Only shutdown blocks: `quit` is sent to every
 * daemon and the plugin waits a few seconds for them to exit.
 *
 * The card's compute mode is never changed here (NVIDIA's MPS daemon sets
 * EXCLUSIVE_PROCESS); docs/deviceplugin.md says what an operator may want to do. */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"

extern char **environ;

#define OUTPUT_MAX   4096
#define QUIT_WAIT_MS 5000
#define PCT_DIGITS   3

/* ---- pure helpers ------------------------------------------------------------------- */

int dp_mps_dirs(const struct dpconfig *cfg, const char *resource, const char *uuid, char *pipe,
                char *log, size_t size, struct vg_err *err)
{
    const char *root = cfg->flags.mps_root;
    if (!root || !root[0])
        return vg_err_set(err, -EINVAL, "flags.mpsRoot is not set");
    if (strstr(resource, "..") || strchr(uuid, '/') || strstr(uuid, ".."))
        return vg_err_set(err, -EINVAL, "resource '%s' / GPU '%s' cannot name a directory",
                          resource, uuid);
    if (vg_snprintf(pipe, size, "%s/%s/%s/pipe", root, resource, uuid) < 0 ||
        vg_snprintf(log, size, "%s/%s/%s/log", root, resource, uuid) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "MPS directory under %s too long", root);
    return 0;
}

int dp_mps_parse_percentage(const char *text, size_t len, unsigned *out, struct vg_err *err)
{
    size_t b = 0, e = len;
    while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\n' || text[b] == '\r'))
        b++;
    while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\n' ||
                     text[e - 1] == '\r'))
        e--;
    char num[16];
    size_t n = 0;
    size_t i = b;
    for (; i < e && text[i] >= '0' && text[i] <= '9'; i++) {
        if (n == PCT_DIGITS)
            return vg_err_set(err, -ERANGE, "active thread percentage out of range");
        num[n++] = text[i];
    }
    if (n == 0)
        return vg_err_set(err, -EINVAL, "not an active thread percentage: '%.*s'",
                          (int)(e - b > 64 ? 64 : e - b), text + b);
    num[n] = '\0';
    if (i < e && text[i] == '.') {
        size_t frac = 0;
        for (i++; i < e && text[i] >= '0' && text[i] <= '9'; i++)
            frac++;
        if (frac == 0)
            i = 0; /* "12." */
    }
    if (i != e)
        return vg_err_set(err, -EINVAL, "not an active thread percentage: '%.*s'",
                          (int)(e - b > 64 ? 64 : e - b), text + b);
    uint64_t v;
    int rc = vg_parse_u64(num, 0, 100, &v, err);
    if (rc < 0)
        return rc;
    *out = (unsigned)v;
    return 0;
}

/* ---- Allocate ----------------------------------------------------------------------- */

int dp_allocate_mps(const struct dpconfig *cfg, const struct dp_resource *resource,
                    const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                    size_t id_count, struct dp_response *out, struct vg_err *err)
{
    int rc = dp_allocate_shared(cfg, resource, gpus, gpu_count, ids, id_count, out, err);
    if (rc < 0 || !resource->mps)
        return rc;
    unsigned gpu = UINT_MAX;
    for (size_t i = 0; i < id_count; i++)
        for (size_t k = 0; k < resource->device_count; k++) {
            if (strcmp(resource->devices[k].id, ids[i]) != 0)
                continue;
            if (gpu != UINT_MAX && resource->devices[k].gpu != gpu)
                return vg_err_set(err, -EINVAL,
                                  "request for '%s': replicas of GPUs %s and %s; with MPS a "
                                  "container's replicas must all be on one GPU (one control "
                                  "daemon per GPU)",
                                  resource->name, gpus[gpu].uuid,
                                  gpus[resource->devices[k].gpu].uuid);
            gpu = resource->devices[k].gpu;
        }
    const struct dp_gpu *g = &gpus[gpu];
    char pipe[PATH_MAX], log[PATH_MAX], shm[PATH_MAX], cpipe[PATH_MAX], clog[PATH_MAX];
    rc = dp_mps_dirs(cfg, resource->name, g->uuid, pipe, log, sizeof(pipe), err);
    if (rc < 0)
        return rc;
    if (vg_snprintf(shm, sizeof(shm), "%s/shm", cfg->flags.mps_root) < 0 ||
        vg_snprintf(cpipe, sizeof(cpipe), DP_MPS_CONTAINER_ROOT "/%s/pipe", resource->name) < 0 ||
        vg_snprintf(clog, sizeof(clog), DP_MPS_CONTAINER_ROOT "/%s/log", resource->name) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "MPS path too long");
    unsigned replicas = resource->replicas ? resource->replicas : 1;
    unsigned long long n = id_count;
    char value[64];
    vg_snprintf(value, sizeof(value), "%llu",
                n * (100 / replicas) > 100 ? 100 : n * (100 / replicas));
    unsigned long long mib = n * (g->memory_mib / replicas);
    if (mib > g->memory_mib)
        mib = g->memory_mib;
    char pinned[64];
    vg_snprintf(pinned, sizeof(pinned), "0=%lluM", mib);
    if ((rc = dp_response_add_env(out, "CUDA_MPS_PIPE_DIRECTORY", cpipe, err)) < 0 ||
        (rc = dp_response_add_env(out, "CUDA_MPS_LOG_DIRECTORY", clog, err)) < 0 ||
        (rc = dp_response_add_env(out, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", value, err)) < 0 ||
        (rc = dp_response_add_env(out, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", pinned, err)) < 0 ||
        (rc = dp_response_add_mount(out, cpipe, pipe, false, err)) < 0 ||
        (rc = dp_response_add_mount(out, clog, log, true, err)) < 0 ||
        (rc = dp_response_add_mount(out, "/dev/shm", shm, false, err)) < 0)
        return rc;
    return 0;
}

/* ---- child processes ---------------------------------------------------------------- */

struct run;
typedef void (*run_done_fn)(struct run *run, int status, bool timed_out);

/* One `nvidia-cuda-mps-control` invocation in flight. */
struct run {
    pid_t pid;
    int pidfd, out_fd;
    struct event *exit_ev, *out_ev, *timeout_ev;
    char output[OUTPUT_MAX];
    size_t output_len;
    run_done_fn done;
    void *arg;
};

static void run_drain(struct run *r)
{
    while (r->out_fd >= 0) {
        char buf[512];
        ssize_t n = read(r->out_fd, buf, sizeof(buf));
        if (n > 0) {
            size_t room = sizeof(r->output) - 1 - r->output_len;
            size_t take = (size_t)n < room ? (size_t)n : room;
            memcpy(r->output + r->output_len, buf, take);
            r->output_len += take;
            r->output[r->output_len] = '\0';
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0) { /* EOF: nothing more will come */
            if (r->out_ev)
                event_del(r->out_ev);
            close(r->out_fd);
            r->out_fd = -1;
        }
        return;
    }
}

static void run_free(struct run *r)
{
    if (!r)
        return;
    if (r->exit_ev)
        event_free(r->exit_ev);
    if (r->out_ev)
        event_free(r->out_ev);
    if (r->timeout_ev)
        event_free(r->timeout_ev);
    if (r->pidfd >= 0)
        close(r->pidfd);
    if (r->out_fd >= 0)
        close(r->out_fd);
    free(r);
}

/* Kills and reaps a run still in flight (nothing is reported). */
static void run_cancel(struct run *r)
{
    if (!r)
        return;
    if (r->pid > 0) {
        kill(r->pid, SIGKILL);
        while (waitpid(r->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    run_free(r);
}

static void run_finish(struct run *r, bool timed_out)
{
    int status = -1;
    if (timed_out)
        kill(r->pid, SIGKILL);
    pid_t w;
    do
        w = waitpid(r->pid, &status, timed_out ? 0 : WNOHANG);
    while (w < 0 && errno == EINTR);
    if (w == 0)
        return; /* not yet: the pidfd said readable for another reason */
    r->pid = -1;
    run_drain(r);
    r->done(r, status, timed_out);
}

static void run_exit_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_finish(arg, false);
}

static void run_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_finish(arg, true);
}

static void run_out_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_drain(arg);
}

/* environ without the keys we set, then ours ("KEY=value"). */
static char **child_env(char *const *ours, size_t n)
{
    size_t count = 0;
    while (environ && environ[count])
        count++;
    char **env = xcalloc(count + n + 1, sizeof(*env));
    size_t k = 0;
    for (size_t i = 0; i < count; i++) {
        bool replaced = false;
        for (size_t j = 0; j < n && !replaced; j++) {
            size_t klen = (size_t)(strchr(ours[j], '=') - ours[j]) + 1;
            replaced = strncmp(environ[i], ours[j], klen) == 0;
        }
        if (!replaced)
            env[k++] = environ[i];
    }
    for (size_t j = 0; j < n; j++)
        env[k++] = ours[j];
    return env;
}

/* Starts `path [arg]` with env additions and input on its standard input; stdout and
 * stderr are collected. */
static int run_start(const char *path, const char *arg, char *const *env_add, size_t env_count,
                     const char *input, int sink, pid_t *pid_out, int *pidfd_out, int *out_fd_out,
                     struct vg_err *err)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) < 0)
        return vg_err_errno(err, errno, "pipe");
    VG_AUTO_CLOSE int in_r = in[0], in_w = in[1];
    if (pipe2(out, O_CLOEXEC) < 0)
        return vg_err_errno(err, errno, "pipe");
    VG_AUTO_CLOSE int out_r = out[0], out_w = out[1];
    /* The commands are a few short lines: written before the fork they sit in the pipe's
     * buffer (never blocking), and no SIGPIPE can come from a child that exits early. */
    if (input) {
        ssize_t w = write(in_w, input, strlen(input));
        (void)w;
    }
    VG_AUTO_FREE char **env = child_env(env_add, env_count);
    char *argv[3] = {(char *)path, (char *)arg, NULL};
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int o = sink >= 0 ? sink : out_w;
        if (dup2(in_r, 0) < 0 || dup2(o, 1) < 0 || dup2(o, 2) < 0)
            _exit(127);
        close_range(3, ~0u, 0);
        execvpe(path, argv, env);
        static const char msg[] = "cannot execute the MPS control program\n";
        ssize_t ignored = write(2, msg, sizeof(msg) - 1);
        (void)ignored;
        _exit(127);
    }
    if (pid < 0)
        return vg_err_errno(err, errno, "fork");
    int pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
        return vg_err_errno(err, e, "pidfd_open");
    }
    fcntl(out_r, F_SETFL, fcntl(out_r, F_GETFL) | O_NONBLOCK);
    *pid_out = pid;
    *pidfd_out = pidfd;
    *out_fd_out = vg_steal_fd(&out_r);
    return 0;
}

/* ---- the manager -------------------------------------------------------------------- */

enum gstate { G_OFF, G_PROBE, G_SPAWN, G_CONFIGURE, G_CHECK, G_UP, G_DOWN, G_QUIT };

struct daemon {
    struct dp_mps *mps;
    unsigned gpu;
    bool managed;
    enum gstate state;
    bool ready;
    char uuid[ANNOT_UUID_MAX];
    char pipe[PATH_MAX], log[PATH_MAX];
    char start_out[PATH_MAX + 32]; /* `-d`'s output: <log>/vgpu-start.out */
    char env_pipe[PATH_MAX + 32], env_log[PATH_MAX + 32], env_visible[ANNOT_UUID_MAX + 32];
    unsigned replicas;
    uint64_t memory_mib;
    struct run *run;
    struct event *timer; /* backoff, and the periodic check */
    uint64_t backoff_ms;
    pid_t daemon_pid;
    int daemon_pidfd;
    struct event *daemon_ev;
};

struct dp_mps {
    struct event_base *base;
    const struct dpconfig *cfg;
    struct dp_mps_options opt;
    struct daemon daemons[DP_MAX_GPUS];
    struct dp_mps_stats stats;
};

static void step(struct daemon *d, enum gstate next);

static void add_ms(struct event *ev, uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    event_add(ev, &tv);
}

static void set_ready(struct daemon *d, bool ready)
{
    if (d->ready == ready)
        return;
    d->ready = ready;
    if (d->mps->opt.changed)
        d->mps->opt.changed(d->mps->opt.arg);
}

static void unwatch_pid(struct daemon *d)
{
    if (d->daemon_ev) {
        event_free(d->daemon_ev);
        d->daemon_ev = NULL;
    }
    if (d->daemon_pidfd >= 0) {
        close(d->daemon_pidfd);
        d->daemon_pidfd = -1;
    }
    d->daemon_pid = 0;
}

/* Failure of any step: replicas Unhealthy, a daemon that runs but does not answer is
 * stopped, the GPU is probed again after the backoff. */
static void fail(struct daemon *d, const char *what, const char *detail)
{
    struct dp_mps *m = d->mps;
    m->stats.failures++;
    vg_log(VG_LOG_WARN, "MPS control daemon failed; restarting after backoff",
           "uuid=%s step=%s backoff_ms=%llu detail=\"%s\"", d->uuid, what,
           (unsigned long long)d->backoff_ms, detail);
    if (d->daemon_pidfd >= 0 && d->daemon_pid > 0)
        pidfd_send_signal(d->daemon_pidfd, SIGTERM, NULL, 0);
    unwatch_pid(d);
    set_ready(d, false);
    d->state = G_DOWN;
    add_ms(d->timer, d->backoff_ms);
    d->backoff_ms *= 2;
    if (d->backoff_ms > m->opt.backoff_max_ms)
        d->backoff_ms = m->opt.backoff_max_ms;
}

static void daemon_exit_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    if (d->state != G_CONFIGURE && d->state != G_CHECK && d->state != G_UP)
        return;
    char detail[64];
    vg_snprintf(detail, sizeof(detail), "pid %d exited", (int)d->daemon_pid);
    d->daemon_pid = 0; /* nothing left to signal */
    run_cancel(d->run);
    d->run = NULL;
    fail(d, "running", detail);
}

/* Is pid running the control program? A stale pid file may name a pid reused by another
 * process, which must never be signalled: its name (comm, 15 characters) must match. */
static bool is_control(const struct daemon *d, pid_t pid)
{
    char path[64], comm[32];
    vg_snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, comm, sizeof(comm) - 1);
    if (n <= 0)
        return false;
    comm[n] = '\0';
    char *nl = strchr(comm, '\n');
    if (nl)
        *nl = '\0';
    const char *prog = d->mps->cfg->vgpu.mps_control_path;
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    return strncmp(comm, base, 15) == 0 && strlen(comm) == (strlen(base) < 15 ? strlen(base) : 15);
}

/* The daemon's pid from its pid file, watched through a pidfd. Without a pid file the
 * periodic query is the only check. */
static void watch_pid(struct daemon *d)
{
    unwatch_pid(d);
    char path[PATH_MAX + 40], text[32];
    if (vg_snprintf(path, sizeof(path), "%s/%s", d->pipe, DP_MPS_PID_FILE) < 0)
        return;
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof(text) - 1);
    if (n <= 0)
        return;
    text[n] = '\0';
    char *nl = strchr(text, '\n');
    if (nl)
        *nl = '\0';
    uint64_t pid;
    struct vg_err ignored;
    if (vg_parse_u64(text, 2, INT_MAX, &pid, &ignored) < 0 || !is_control(d, (pid_t)pid))
        return;
    int pfd = pidfd_open((pid_t)pid, 0);
    if (pfd < 0)
        return;
    d->daemon_pid = (pid_t)pid;
    d->daemon_pidfd = pfd;
    d->daemon_ev = event_new(d->mps->base, pfd, EV_READ, daemon_exit_cb, d);
    event_add(d->daemon_ev, NULL);
}

static void command_done(struct run *r, int status, bool timed_out)
{
    struct daemon *d = r->arg;
    struct dp_mps *m = d->mps;
    d->run = NULL;
    if (d->state == G_SPAWN) {
        int fd = open(d->start_out, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        ssize_t n = fd >= 0 ? read(fd, r->output, sizeof(r->output) - 1) : -1;
        r->output_len = n > 0 ? (size_t)n : 0;
        r->output[r->output_len] = '\0';
        if (fd >= 0)
            close(fd);
    }
    bool ok = !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    char detail[256];
    if (timed_out)
        vg_snprintf(detail, sizeof(detail), "no answer in %llu ms",
                    (unsigned long long)m->opt.command_timeout_ms);
    else if (WIFSIGNALED(status))
        vg_snprintf(detail, sizeof(detail), "killed by signal %d: %.200s", WTERMSIG(status),
                    r->output);
    else
        vg_snprintf(detail, sizeof(detail), "exit %d: %.200s", WEXITSTATUS(status), r->output);
    for (char *p = detail; *p; p++)
        if (*p == '\n' || *p == '"')
            *p = ' ';
    unsigned pct = 0;
    struct vg_err perr = {0};
    bool answered = ok && dp_mps_parse_percentage(r->output, r->output_len, &pct, &perr) == 0;
    enum gstate state = d->state;
    run_free(r);
    switch (state) {
    case G_PROBE:
        if (answered) {
            m->stats.adopted++;
            vg_log(VG_LOG_INFO, "MPS control daemon already running: adopted", "uuid=%s pipe=%s",
                   d->uuid, d->pipe);
            step(d, G_CONFIGURE);
        } else {
            step(d, G_SPAWN);
        }
        return;
    case G_SPAWN:
        if (!ok) {
            fail(d, "start", detail);
            return;
        }
        m->stats.starts++;
        step(d, G_CONFIGURE);
        return;
    case G_CONFIGURE:
        if (!ok) {
            fail(d, "configure", detail);
            return;
        }
        step(d, G_CHECK);
        return;
    case G_CHECK:
        if (!answered) {
            fail(d, "check", perr.code ? perr.msg : detail);
            return;
        }
        if (!d->ready)
            vg_log(VG_LOG_INFO, "MPS control daemon up", "uuid=%s pipe=%s pid=%d pct=%u", d->uuid,
                   d->pipe, (int)d->daemon_pid, pct);
        d->backoff_ms = m->opt.backoff_min_ms;
        d->state = G_UP;
        set_ready(d, true);
        add_ms(d->timer, m->opt.check_interval_ms);
        return;
    default:
        return;
    }
}

static void command(struct daemon *d, const char *arg, const char *input, int sink)
{
    struct dp_mps *m = d->mps;
    char *env[] = {d->env_pipe, d->env_log, d->env_visible};
    struct run *r = xcalloc(1, sizeof(*r));
    r->pidfd = r->out_fd = -1;
    r->done = command_done;
    r->arg = d;
    struct vg_err err = {0};
    if (run_start(m->cfg->vgpu.mps_control_path, arg, env, 3, input, sink, &r->pid, &r->pidfd,
                  &r->out_fd, &err) < 0) {
        run_free(r);
        fail(d, "spawn", err.msg);
        return;
    }
    r->exit_ev = event_new(m->base, r->pidfd, EV_READ | EV_PERSIST, run_exit_cb, r);
    r->out_ev = event_new(m->base, r->out_fd, EV_READ | EV_PERSIST, run_out_cb, r);
    r->timeout_ev = evtimer_new(m->base, run_timeout_cb, r);
    event_add(r->exit_ev, NULL);
    event_add(r->out_ev, NULL);
    add_ms(r->timeout_ev, m->opt.command_timeout_ms);
    d->run = r;
}

static int make_dirs(const char *path, struct vg_err *err)
{
    char buf[PATH_MAX];
    if (vg_strlcpy(buf, path, sizeof(buf)) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return vg_err_errno(err, errno, "mkdir %s", buf);
        *p = c;
        if (c == '\0')
            return 0;
    }
}

static void step(struct daemon *d, enum gstate next)
{
    char input[256];
    d->state = next;
    switch (next) {
    case G_PROBE:
    case G_CHECK:
        command(d, NULL, "get_default_active_thread_percentage\n", -1);
        return;
    case G_SPAWN: {
        struct vg_err err = {0};
        if (make_dirs(d->pipe, &err) < 0 || make_dirs(d->log, &err) < 0) {
            fail(d, "directories", err.msg);
            return;
        }
        /* The daemon keeps the stdout and stderr `-d` had: a file, not a pipe of ours
         * that would be closed under it. Read back when `-d` fails. */
        int sink = open(d->start_out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (sink < 0) {
            fail(d, "start", VG_STRERROR(errno));
            return;
        }
        command(d, "-d", NULL, sink);
        close(sink);
        return;
    }
    case G_CONFIGURE:
        watch_pid(d);
        vg_snprintf(input, sizeof(input),
                    "set_default_active_thread_percentage %u\n"
                    "set_default_device_pinned_mem_limit 0 %lluM\n",
                    100 / d->replicas, (unsigned long long)(d->memory_mib / d->replicas));
        command(d, NULL, input, -1);
        return;
    default:
        return;
    }
}

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct daemon *d = arg;
    if (d->run)
        return;
    if (d->state == G_DOWN)
        step(d, G_PROBE);
    else if (d->state == G_UP)
        step(d, G_CHECK);
}

VG_DEFINE_AUTO(mps_freep, struct dp_mps, dp_mps_free)

int dp_mps_new(struct event_base *base, const struct dpconfig *cfg, const struct dp_gpu *gpus,
               unsigned gpu_count, const struct dp_resources *res,
               const struct dp_mps_options *options, struct dp_mps **out, struct vg_err *err)
{
    *out = NULL;
    bool any = false;
    for (size_t i = 0; i < res->count; i++)
        any |= res->items[i].mps;
    if (!any)
        return 0;
    VG_AUTO(mps_freep) struct dp_mps *m = xcalloc(1, sizeof(*m));
    m->base = base;
    m->cfg = cfg;
    m->opt = *options;
    if (!m->opt.check_interval_ms)
        m->opt.check_interval_ms = 5000;
    if (!m->opt.backoff_min_ms)
        m->opt.backoff_min_ms = 1000;
    if (!m->opt.backoff_max_ms)
        m->opt.backoff_max_ms = 60000;
    if (m->opt.backoff_max_ms < m->opt.backoff_min_ms)
        m->opt.backoff_max_ms = m->opt.backoff_min_ms;
    if (!m->opt.command_timeout_ms)
        m->opt.command_timeout_ms = 10000;
    for (unsigned g = 0; g < DP_MAX_GPUS; g++) {
        m->daemons[g].daemon_pidfd = -1;
        m->daemons[g].mps = m;
        m->daemons[g].gpu = g;
    }
    for (size_t i = 0; i < res->count; i++) {
        const struct dp_resource *r = &res->items[i];
        if (!r->mps)
            continue;
        for (size_t k = 0; k < r->device_count; k++) {
            unsigned g = r->devices[k].gpu;
            struct daemon *d = &m->daemons[g];
            if (g >= gpu_count || d->managed)
                continue;
            d->managed = true;
            d->replicas = r->replicas ? r->replicas : 1;
            d->memory_mib = gpus[g].memory_mib;
            d->backoff_ms = m->opt.backoff_min_ms;
            d->timer = evtimer_new(base, timer_cb, d);
            vg_strlcpy(d->uuid, gpus[g].uuid, sizeof(d->uuid));
            int rc = dp_mps_dirs(cfg, r->name, d->uuid, d->pipe, d->log, sizeof(d->pipe), err);
            if (rc < 0)
                return rc;
            if (vg_snprintf(d->env_pipe, sizeof(d->env_pipe), "CUDA_MPS_PIPE_DIRECTORY=%s",
                            d->pipe) < 0 ||
                vg_snprintf(d->env_log, sizeof(d->env_log), "CUDA_MPS_LOG_DIRECTORY=%s", d->log) <
                    0 ||
                vg_snprintf(d->env_visible, sizeof(d->env_visible), "CUDA_VISIBLE_DEVICES=%s",
                            d->uuid) < 0 ||
                vg_snprintf(d->start_out, sizeof(d->start_out), "%s/vgpu-start.out", d->log) < 0)
                return vg_err_set(err, -ENAMETOOLONG, "MPS directory too long");
        }
    }
    char shm[PATH_MAX];
    if (vg_snprintf(shm, sizeof(shm), "%s/shm", cfg->flags.mps_root) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "flags.mpsRoot too long");
    int rc = make_dirs(shm, err);
    if (rc < 0)
        return rc;
    for (unsigned g = 0; g < DP_MAX_GPUS; g++)
        if (m->daemons[g].managed)
            step(&m->daemons[g], G_PROBE);
    *out = vg_steal_ptr(&m);
    return 0;
}

bool dp_mps_ready(const struct dp_mps *m, unsigned gpu)
{
    if (!m || gpu >= DP_MAX_GPUS || !m->daemons[gpu].managed)
        return true;
    return m->daemons[gpu].ready;
}

void dp_mps_get_stats(const struct dp_mps *m, struct dp_mps_stats *stats)
{
    if (m)
        *stats = m->stats;
    else
        memset(stats, 0, sizeof(*stats));
}

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for fd to become readable until deadline (monotonic ms). */
static bool wait_readable(int fd, uint64_t deadline)
{
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline)
            return false;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int n = poll(&p, 1, (int)(deadline - now));
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

/* `quit` to one daemon, then wait for it to exit. */
static void quit_one(struct daemon *d, uint64_t deadline)
{
    if (d->daemon_pid == 0)
        watch_pid(d);
    pid_t pid;
    int pidfd, out_fd;
    char *env[] = {d->env_pipe, d->env_log, d->env_visible};
    struct vg_err err = {0};
    if (run_start(d->mps->cfg->vgpu.mps_control_path, NULL, env, 3, "quit\n", -1, &pid, &pidfd,
                  &out_fd, &err) < 0) {
        vg_log(VG_LOG_WARN, "cannot quit MPS control daemon", "uuid=%s err=\"%s\"", d->uuid,
               err.msg);
        return;
    }
    if (!wait_readable(pidfd, deadline))
        kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    close(pidfd);
    close(out_fd);
    if (d->daemon_pidfd >= 0) {
        if (wait_readable(d->daemon_pidfd, deadline))
            vg_log(VG_LOG_INFO, "MPS control daemon stopped", "uuid=%s pid=%d", d->uuid,
                   (int)d->daemon_pid);
        else
            vg_log(VG_LOG_WARN, "MPS control daemon still running after quit", "uuid=%s pid=%d",
                   d->uuid, (int)d->daemon_pid);
    }
}

void dp_mps_free(struct dp_mps *m)
{
    if (!m)
        return;
    uint64_t deadline = now_ms() + QUIT_WAIT_MS;
    for (unsigned g = 0; g < DP_MAX_GPUS; g++) {
        struct daemon *d = &m->daemons[g];
        run_cancel(d->run);
        d->run = NULL;
        if (d->managed && d->state != G_OFF && d->pipe[0])
            quit_one(d, deadline);
        unwatch_pid(d);
        if (d->timer)
            event_free(d->timer);
    }
    free(m);
}
