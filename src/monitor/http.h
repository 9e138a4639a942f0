/* vgpu-monitor's metrics endpoint: a deliberately small HTTP/1.x server that answers
 * GET /metrics and GET /healthz and nothing else (docs/monitor.md, "Metrics endpoint").
 *
 * One request per connection (the answer carries Connection: close), the whole exchange
 * within the timeout from accept; a request head over MON_HTTP_HEAD_MAX bytes, a body, any method
 * but GET (and HEAD) and any other path are refused with a status and a counted error, and the
 * connection closed without a reset (what the client still sends is read and dropped). At most
 * MON_HTTP_CONNS connections at once (fewer when RLIMIT_NOFILE is low), at most
 * MON_HTTP_CONNS_PER_PEER from one address: a newcomer past either evicts the oldest connection
 * still sending its request (src/connguard). Nothing a client sends reaches anything but the
 * request-line parser below (fuzzed). */
#ifndef VGPU_MONITOR_HTTP_H
#define VGPU_MONITOR_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

#define MON_HTTP_HEAD_MAX       8192 /* request line and headers */
#define MON_HTTP_CONNS          64   /* connections at once, at most */
#define MON_HTTP_CONNS_PER_PEER 16   /* from one address */
#define MON_HTTP_PATH_MAX       256

enum mon_http_route { MON_HTTP_METRICS = 1, MON_HTTP_HEALTHZ = 2 };

struct mon_http_request {
    enum mon_http_route route;
    bool head; /* HEAD: the status and headers only */
};

/* Parses a request head in buf[len] (bytes received so far). 0: complete, *out set.
 * -EAGAIN: not complete yet (no blank line) and under MON_HTTP_HEAD_MAX. Otherwise the
 * HTTP status to answer, negated: -400 malformed (request line, a header line, a NUL or
 * control byte, a body announced), -405 a method other than GET/HEAD, -404 any other
 * path, -431 a head over MON_HTTP_HEAD_MAX, -505 a version other than HTTP/1.0 or 1.1. */
int mon_http_parse(const char *buf, size_t len, struct mon_http_request *out);

struct event_base;
struct mon_http;

/* What the server needs from its owner: the metrics text, and where errors are counted
 * (kind: "http_bad_request", "http_not_found", "http_method", "http_too_large",
 * "http_timeout", "http_overload"). */
struct mon_http_handler {
    int (*metrics)(void *arg, struct vg_buf *out, struct vg_err *err);
    void (*error)(void *arg, const char *kind);
    void *arg;
};

/* Listens on listen ("ADDR:PORT", ":PORT" for every address, "[V6]:PORT"; port 0 picks
 * one). timeout_ms bounds a connection's whole life. -EINVAL naming a bad address, or
 * the bind error. */
int mon_http_new(struct event_base *base, const char *listen, unsigned timeout_ms,
                 const struct mon_http_handler *handler, struct mon_http **out, struct vg_err *err);
void mon_http_free(struct mon_http *h);
/* The port bound. */
unsigned mon_http_port(const struct mon_http *h);

/* Checks a --listen value without binding: 0 or -EINVAL naming what is wrong. */
int mon_http_check_listen(const char *listen, struct vg_err *err);

#endif
