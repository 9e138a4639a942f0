/* A stand-in for nvidia-cuda-mps-control, for the device plugin's MPS tests.
 *
 *   fake_mps_control -d   start the control daemon in the background: it listens on
 *                         $CUDA_MPS_PIPE_DIRECTORY/control (a unix socket), writes its pid
 *                         to nvidia-cuda-mps-control.pid there, and returns once it listens;
 *                         a second -d on the same directory fails, as the real one does;
 *   fake_mps_control      a client: each line of standard input is one command sent to the
 *                         daemon of $CUDA_MPS_PIPE_DIRECTORY, its answer printed; no daemon:
 *                         "Cannot find MPS control daemon process", exit 1.
 *
 * The daemon answers get_default_active_thread_percentage (default 100.0),
 * set_default_active_thread_percentage N, set_default_device_pinned_mem_limit DEV VALUE,
 * get_default_device_pinned_mem_limit DEV and quit (it removes its socket and pid file and
 * exits). Every start and command is appended to $CUDA_MPS_LOG_DIRECTORY/control.log with
 * the daemon's CUDA_VISIBLE_DEVICES, which is what the tests check. While the file named by
 * $FAKE_MPS_MUTE (read by the daemon) exists it answers nothing, like a hung daemon. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static const char *pipe_dir(void)
{
    const char *d = getenv("CUDA_MPS_PIPE_DIRECTORY");
    return d && d[0] ? d : "/tmp/nvidia-mps";
}

static const char *log_dir(void)
{
    const char *d = getenv("CUDA_MPS_LOG_DIRECTORY");
    return d && d[0] ? d : "/var/log/nvidia-mps";
}

static int control_addr(struct sockaddr_un *addr)
{
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path, sizeof(addr->sun_path), "%s/control", pipe_dir());
    if (n < 0 || (size_t)n >= sizeof(addr->sun_path)) {
        fprintf(stderr, "fake_mps_control: pipe directory path too long\n");
        return -1;
    }
    return 0;
}

static int connect_control(void)
{
    struct sockaddr_un addr;
    if (control_addr(&addr) < 0)
        return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void log_line(const char *fmt, ...)
{
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/control.log", log_dir()) >= (int)sizeof(path))
        return;
    FILE *f = fopen(path, "ae");
    if (!f)
        return;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    fprintf(f, "[%d %s] ", (int)getpid(), vis ? vis : "-");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

static void write_all(int fd, const char *s, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, s, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        s += n;
        len -= (size_t)n;
    }
}

static void cleanup(void)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/control", pipe_dir());
    unlink(path);
    snprintf(path, sizeof(path), "%s/nvidia-cuda-mps-control.pid", pipe_dir());
    unlink(path);
}

static void serve(int lfd)
{
    char pct[32] = "100.0";
    char pinned[64] = "";
    const char *mute = getenv("FAKE_MPS_MUTE");
    for (;;) {
        int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR)
                continue;
            exit(1);
        }
        char line[1024];
        size_t len = 0;
        for (;;) {
            ssize_t n = read(c, line + len, sizeof(line) - 1 - len);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            len += (size_t)n;
            if (len == sizeof(line) - 1)
                break;
        }
        line[len] = '\0';
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        log_line("cmd %s", line);
        char reply[160] = "";
        unsigned dev;
        char value[64];
        if (mute && access(mute, F_OK) == 0) {
            log_line("muted");
        } else if (strcmp(line, "get_default_active_thread_percentage") == 0) {
            snprintf(reply, sizeof(reply), "%s\n", pct);
        } else if (strncmp(line, "set_default_active_thread_percentage ", 37) == 0) {
            snprintf(pct, sizeof(pct), "%.8s.0", line + 37);
        } else if (sscanf(line, "set_default_device_pinned_mem_limit %u %63s", &dev, value) == 2) {
            snprintf(pinned, sizeof(pinned), "%.60s", value);
        } else if (sscanf(line, "get_default_device_pinned_mem_limit %u", &dev) == 1) {
            snprintf(reply, sizeof(reply), "%s\n", pinned);
        } else if (strcmp(line, "quit") == 0) {
            close(c);
            cleanup();
            log_line("quit");
            exit(0);
        } else {
            snprintf(reply, sizeof(reply), "Unrecognized command: %.80s\n", line);
        }
        write_all(c, reply, strlen(reply));
        close(c);
    }
}

static int daemonize(void)
{
    int probe = connect_control();
    if (probe >= 0) {
        close(probe);
        fprintf(stderr, "An instance of this daemon is already running\n");
        return 1;
    }
    struct sockaddr_un addr;
    if (control_addr(&addr) < 0)
        return 1;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0) { /* the caller's process: wait until the daemon listens */
        close(ready[1]);
        char b = 0;
        ssize_t n;
        do
            n = read(ready[0], &b, 1);
        while (n < 0 && errno == EINTR);
        return n == 1 && b == 'y' ? 0 : 1;
    }
    close(ready[0]);
    setsid();
    pid = fork();
    if (pid != 0)
        _exit(pid < 0 ? 1 : 0);
    unlink(addr.sun_path); /* a stale socket of a daemon that died */
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 16) < 0) {
        fprintf(stderr, "fake_mps_control: cannot listen on %s: %s\n", addr.sun_path,
                strerror(errno));
        _exit(1);
    }
    char path[4096];
    snprintf(path, sizeof(path), "%s/nvidia-cuda-mps-control.pid", pipe_dir());
    FILE *f = fopen(path, "we");
    if (!f)
        _exit(1);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    log_line("start");
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    signal(SIGPIPE, SIG_IGN);
    write_all(ready[1], "y", 1);
    close(ready[1]);
    serve(lfd);
    return 0;
}

static int client(void)
{
    char line[1024];
    while (fgets(line, sizeof(line), stdin)) {
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len == 0)
            continue;
        int fd = connect_control();
        if (fd < 0) {
            fprintf(stderr, "Cannot find MPS control daemon process\n");
            return 1;
        }
        write_all(fd, line, len);
        write_all(fd, "\n", 1);
        shutdown(fd, SHUT_WR);
        char buf[512];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0)
            fwrite(buf, 1, (size_t)n, stdout);
        close(fd);
    }
    return 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc == 2 && strcmp(argv[1], "-d") == 0)
        return daemonize();
    if (argc == 1)
        return client();
    fprintf(stderr, "usage: fake_mps_control [-d]\n");
    return 2;
}
