/* The test API server (tests/kube_api_server.py) as a child of a C test, and the loop
 * helper the tests drive vgpu's asynchronous clients with. Built into each test that
 * uses it (tests/lib/kube_test_server.c). */
#ifndef VGPU_TESTS_KUBE_TEST_SERVER_H
#define VGPU_TESTS_KUBE_TEST_SERVER_H

#include <stdbool.h>
#include <sys/types.h>

struct event_base;

double kts_now_s(void);

/* Runs base's loop until cond(arg) holds or timeout_s passes; returns cond's final value.
 * The loop needs an event that wakes it (a persistent timer) to notice the timeout. */
bool kts_run_until(struct event_base *base, bool (*cond)(void *), void *arg, double timeout_s);

/* Starts `python script --port 0 --port-file port_file [args...]` (args NULL-terminated,
 * at most 16; its stderr to /dev/null) and waits up to 20 s for the port it writes.
 * Returns the port, or -1 when it did not start (*pid is set either way: stop it). */
int kts_server_start(const char *python, const char *script, const char *port_file,
                     const char *const *args, pid_t *pid);

/* Stops a server kts_server_start started (pid <= 0: none) and removes its port file. */
void kts_server_stop(pid_t pid, const char *port_file);

#endif
