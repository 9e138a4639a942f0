/* The test API server as a child process; see kube_test_server.h. */
#include "kube_test_server.h"

#include <event2/event.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double kts_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

bool kts_run_until(struct event_base *base, bool (*cond)(void *), void *arg, double timeout_s)
{
    double deadline = kts_now_s() + timeout_s;
    while (!cond(arg) && kts_now_s() < deadline)
        event_base_loop(base, EVLOOP_ONCE);
    return cond(arg);
}

int kts_server_start(const char *python, const char *script, const char *port_file,
                     const char *const *args, pid_t *pid)
{
    unlink(port_file);
    *pid = fork();
    if (*pid < 0)
        return -1;
    if (*pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2);
        const char *argv[24] = {python, script, "--port", "0", "--port-file", port_file};
        int n = 6;
        for (int i = 0; args != NULL && args[i] != NULL && n < 22; i++)
            argv[n++] = args[i];
        argv[n] = NULL;
        execvp(python, (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    double deadline = kts_now_s() + 20;
    int port = 0;
    while (port <= 0 && kts_now_s() < deadline) {
        FILE *f = fopen(port_file, "r");
        if (f != NULL) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port <= 0)
            usleep(20000);
    }
    return port > 0 ? port : -1;
}

void kts_server_stop(pid_t pid, const char *port_file)
{
    if (pid > 0) {
        kill(pid, SIGTERM);
        waitpid(pid, NULL, 0);
    }
    unlink(port_file);
}
