/* vgpu-scheduler's dashboard over HTTP (docs/scheduler.md, "Dashboard"): the page
 * compiled into the daemon (/ui), the model's state (/ui/state.json) and a pod's last
 * filter verdict (/ui/explain), read from view.h. Every answer carries headers that keep
 * the page to its own script (its SHA-256 in the Content-Security-Policy) and its own
 * origin. Read-only: GET and HEAD. Runs on the daemon's loop thread. */
#ifndef VGPU_SCHEDULER_DASHBOARD_H
#define VGPU_SCHEDULER_DASHBOARD_H

#include <event2/http.h>
#include <stdint.h>

#include "scheduler/sched.h"

struct sched_dashboard {
    const struct sched_state *state;
    char csp[256];   /* the page's Content-Security-Policy: its one script, by hash */
    uint64_t errors; /* 4xx answers on /ui paths (counted as bad requests in /metrics) */
};

/* Ready to serve state's dashboard; hashes the page's script for the policy. */
void sched_dashboard_init(struct sched_dashboard *ui, const struct sched_state *state);

/* Answers a request for path, a /ui path. */
void sched_dashboard_serve(struct sched_dashboard *ui, struct evhttp_request *req, const char *path,
                           enum evhttp_cmd_type method);

#endif
