/* vgpu-monitor's metrics endpoint (http.h). */
#define _GNU_SOURCE
#include "monitor/http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "connguard/connguard.h"

/* ---- the request parser ---------------------------------------------------------- */

static bool tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* The end of the head (the index just past the blank line), or 0 when not there yet. */
static size_t head_end(const char *buf, size_t len)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] != '\n')
            continue;
        if (buf[i + 1] == '\n')
            return i + 2;
        if (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

/* One line of the head: [p, eol) without its line ending. */
static const char *line_end(const char *p, const char *end)
{
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    return nl ? nl : end;
}

int mon_http_parse(const char *buf, size_t len, struct mon_http_request *out)
{
    memset(out, 0, sizeof *out);
    size_t n = head_end(buf, len > MON_HTTP_HEAD_MAX ? MON_HTTP_HEAD_MAX : len);
    if (n == 0) {
        /* Not complete: answer garbage at once rather than at the timeout (a NUL, or a
         * method that is not a token). */
        size_t scan = len > MON_HTTP_HEAD_MAX ? MON_HTTP_HEAD_MAX : len;
        if (memchr(buf, '\0', scan) != NULL)
            return -400;
        for (size_t i = 0; i < scan && buf[i] != ' '; i++)
            if (!tchar((unsigned char)buf[i]))
                return -400;
        return len >= MON_HTTP_HEAD_MAX ? -431 : -EAGAIN;
    }
    const char *p = buf, *end = buf + n;
    /* Request line: METHOD SP TARGET SP HTTP/1.x */
    const char *eol = line_end(p, end);
    const char *le = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
    const char *sp1 = p;
    while (sp1 < le && tchar((unsigned char)*sp1))
        sp1++;
    if (sp1 == p || sp1 >= le || *sp1 != ' ')
        return -400;
    const char *target = sp1 + 1, *sp2 = target;
    while (sp2 < le && (unsigned char)*sp2 > 0x20 && (unsigned char)*sp2 < 0x7f)
        sp2++;
    if (sp2 == target || sp2 >= le || *sp2 != ' ' || *target != '/')
        return -400;
    const char *version = sp2 + 1;
    size_t vlen = (size_t)(le - version);
    if (vlen != 8 || memcmp(version, "HTTP/1.", 7) != 0)
        return vlen >= 5 && memcmp(version, "HTTP/", 5) == 0 ? -505 : -400;
    if (version[7] != '0' && version[7] != '1')
        return -505;
    /* Header lines: NAME ":" VALUE, no control bytes but tab. A body is refused, after the
     * method: another method is 405 whether or not it carries one. */
    bool body = false;
    for (p = eol + 1; p < end;) {
        eol = line_end(p, end);
        le = eol > p && eol[-1] == '\r' ? eol - 1 : eol;
        if (le == p)
            break; /* the blank line */
        const char *colon = p;
        while (colon < le && tchar((unsigned char)*colon))
            colon++;
        if (colon == p || colon >= le || *colon != ':')
            return -400;
        for (const char *q = colon + 1; q < le; q++)
            if (((unsigned char)*q < 0x20 && *q != '\t') || *q == 0x7f)
                return -400;
        size_t nlen = (size_t)(colon - p);
        const char *v = colon + 1;
        while (v < le && (*v == ' ' || *v == '\t'))
            v++;
        if (nlen == 17 && strncasecmp(p, "Transfer-Encoding", 17) == 0)
            body = true;
        if (nlen == 14 && strncasecmp(p, "Content-Length", 14) == 0 &&
            !(le - v >= 1 && *v == '0' && (le - v == 1 || v[1] == ' ' || v[1] == '\t')))
            body = true;
        p = eol + 1;
    }
    size_t mlen = (size_t)(sp1 - buf);
    bool get = mlen == 3 && memcmp(buf, "GET", 3) == 0;
    bool head = mlen == 4 && memcmp(buf, "HEAD", 4) == 0;
    if (!get && !head)
        return -405;
    if (body)
        return -400;
    size_t plen = (size_t)(sp2 - target);
    const char *q = memchr(target, '?', plen);
    if (q)
        plen = (size_t)(q - target);
    if (plen == 8 && memcmp(target, "/metrics", 8) == 0)
        out->route = MON_HTTP_METRICS;
    else if (plen == 8 && memcmp(target, "/healthz", 8) == 0)
        out->route = MON_HTTP_HEALTHZ;
    else
        return -404;
    out->head = head;
    return 0;
}

/* ---- the server ------------------------------------------------------------------ */

struct conn {
    struct mon_http *server;
    struct bufferevent *bev;
    struct event *deadline; /* the connection's whole life is bounded, not each read */
    struct conn *prev, *next;
    evutil_socket_t fd;
    bool answered;
    bool linger; /* refused: once the answer is out, read what the client still sends */
    bool lingering;
};

struct mon_http {
    struct event_base *base;
    struct evconnlistener *listener;
    struct mon_http_handler handler;
    unsigned timeout_ms;
    unsigned port;
    unsigned count;
    struct conn *conns;
    struct connguard *guard; /* caps, per-peer shares, accept back-off */
};

static void conn_free(struct conn *c)
{
    struct mon_http *h = c->server;
    if (c->prev)
        c->prev->next = c->next;
    else
        h->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    h->count--;
    connguard_release(h->guard, c->fd);
    if (c->deadline)
        event_free(c->deadline);
    bufferevent_free(c->bev);
    free(c);
}

static void count_error(struct mon_http *h, const char *kind)
{
    if (h->handler.error)
        h->handler.error(h->handler.arg, kind);
}

static const char *reason(int status)
{
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 431:
        return "Request Header Fields Too Large";
    case 505:
        return "HTTP Version Not Supported";
    default:
        return "Internal Server Error";
    }
}

static void reply(struct conn *c, int status, const char *ctype, const char *body, size_t len,
                  bool head)
{
    struct evbuffer *o = bufferevent_get_output(c->bev);
    evbuffer_add_printf(o,
                        "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                        "Connection: close\r\n%s\r\n",
                        status, reason(status), ctype, len,
                        status == 405 ? "Allow: GET, HEAD\r\n" : "");
    if (!head && len > 0)
        evbuffer_add(o, body, len);
    c->answered = true;
    c->linger = status != 200;
    connguard_busy(c->server->guard, c->fd);
    bufferevent_disable(c->bev, EV_READ);
}

/* A refused request may leave bytes unread (the rest of an oversized head, a body): closing
 * then would reset the connection and could destroy the answer before the client reads it.
 * So the answer is followed by our end of the stream, and what still comes is read and
 * dropped until the client closes, for at most MON_HTTP_LINGER_MS. */
#define MON_HTTP_LINGER_MS 2000

static void start_linger(struct conn *c)
{
    c->lingering = true;
    (void)shutdown(c->fd, SHUT_WR);
    evbuffer_drain(bufferevent_get_input(c->bev),
                   evbuffer_get_length(bufferevent_get_input(c->bev)));
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    struct timeval tv = {MON_HTTP_LINGER_MS / 1000, (MON_HTTP_LINGER_MS % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, &tv, NULL);
    if (c->deadline)
        evtimer_add(c->deadline, &tv);
    bufferevent_enable(c->bev, EV_READ);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    struct conn *c = arg;
    if (!c->answered || c->lingering || evbuffer_get_length(bufferevent_get_output(c->bev)) != 0)
        return;
    if (c->linger)
        start_linger(c);
    else
        conn_free(c);
}

static void free_text(const void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    free((void *)(uintptr_t)data);
}

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    struct mon_http *h = c->server;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (c->lingering) {
        evbuffer_drain(in, evbuffer_get_length(in));
        return;
    }
    if (c->answered)
        return;
    size_t len = evbuffer_get_length(in);
    size_t take = len > MON_HTTP_HEAD_MAX ? MON_HTTP_HEAD_MAX : len;
    const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)take);
    struct mon_http_request req;
    int rc = mon_http_parse(data, take, &req);
    if (rc == -EAGAIN)
        return;
    if (rc < 0) {
        int status = -rc;
        const char *kind = status == 404   ? "http_not_found"
                           : status == 405 ? "http_method"
                           : status == 431 ? "http_too_large"
                                           : "http_bad_request";
        count_error(h, kind);
        vg_log(VG_LOG_DEBUG, "metrics endpoint: request refused", "status=%d", status);
        char body[64];
        int n = vg_snprintf(body, sizeof body, "%d %s\n", status, reason(status));
        reply(c, status, "text/plain; charset=utf-8", body, n > 0 ? (size_t)n : 0, false);
        return;
    }
    if (req.route == MON_HTTP_HEALTHZ) {
        reply(c, 200, "text/plain; charset=utf-8", "ok\n", 3, req.head);
        return;
    }
    struct vg_buf text;
    vg_buf_init(&text, "metrics", 64u << 20);
    struct vg_err err = {0};
    if (h->handler.metrics(h->handler.arg, &text, &err) < 0) {
        vg_log(VG_LOG_WARN, "metrics endpoint: cannot format the metrics", "error=\"%s\"", err.msg);
        reply(c, 500, "text/plain; charset=utf-8", "500 Internal Server Error\n", 26, false);
    } else {
        /* The text (about 2.4 KB per container and GPU) is handed to the socket's buffer
         * as it is, not copied: freed once sent. */
        char *body = NULL;
        size_t blen = 0;
        struct vg_err serr = {0};
        if (req.head || vg_buf_steal(&text, &body, &blen, &serr) < 0 || blen == 0) {
            reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", "", text.len, true);
            free(body);
        } else {
            reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", "", blen, true);
            if (evbuffer_add_reference(bufferevent_get_output(c->bev), body, blen, free_text,
                                       NULL) != 0)
                free(body);
        }
    }
    vg_buf_free(&text);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct conn *c = arg;
    if ((what & BEV_EVENT_TIMEOUT) && !c->lingering) {
        count_error(c->server, "http_timeout");
        vg_log(VG_LOG_DEBUG, "metrics endpoint: connection timed out", "answered=%d",
               (int)c->answered);
    }
    conn_free(c);
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct conn *c = arg;
    if (!c->lingering) {
        count_error(c->server, "http_timeout");
        vg_log(VG_LOG_DEBUG, "metrics endpoint: connection past its deadline", "answered=%d",
               (int)c->answered);
    }
    conn_free(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    struct mon_http *h = arg;
    /* The guard counts what it refuses or evicts (guard_closed). */
    if (connguard_admit(h->guard, fd) < 0) {
        evutil_closesocket(fd);
        return;
    }
    struct conn *c = vg_calloc(1, sizeof *c);
    struct bufferevent *bev = c ? bufferevent_socket_new(h->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
    if (!bev) {
        free(c);
        connguard_release(h->guard, fd);
        evutil_closesocket(fd);
        return;
    }
    c->server = h;
    c->bev = bev;
    c->fd = fd;
    c->next = h->conns;
    if (h->conns)
        h->conns->prev = c;
    h->conns = c;
    h->count++;
    struct timeval tv = {.tv_sec = h->timeout_ms / 1000,
                         .tv_usec = (suseconds_t)(h->timeout_ms % 1000) * 1000};
    bufferevent_set_timeouts(bev, &tv, &tv);
    c->deadline = evtimer_new(h->base, on_deadline, c);
    if (c->deadline)
        evtimer_add(c->deadline, &tv);
    bufferevent_setwatermark(bev, EV_READ, 0, MON_HTTP_HEAD_MAX + 1);
    bufferevent_setcb(bev, on_read, on_write, on_event, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* listen → host (NULL: every address) and port. */
static int split_listen(const char *listen, char *host, size_t hsize, uint64_t *port,
                        struct vg_err *err)
{
    const char *colon = listen ? strrchr(listen, ':') : NULL;
    if (!colon)
        return vg_err_set(err, -EINVAL, "--listen '%s': want ADDR:PORT or :PORT",
                          listen ? listen : "");
    struct vg_err sub = {0};
    if (vg_parse_u64(colon + 1, 0, 65535, port, &sub) < 0)
        return vg_err_set(err, -EINVAL, "--listen '%s': port: %s", listen, sub.msg);
    const char *h = listen;
    size_t hlen = (size_t)(colon - listen);
    if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    } else if (memchr(h, ':', hlen) != NULL || memchr(h, '[', hlen) || memchr(h, ']', hlen)) {
        return vg_err_set(err, -EINVAL, "--listen '%s': put an IPv6 address in brackets", listen);
    }
    if (hlen >= hsize)
        return vg_err_set(err, -EINVAL, "--listen '%s': address too long", listen);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return 0;
}

static int resolve_listen(const char *listen, struct addrinfo **res, struct vg_err *err)
{
    char host[64];
    uint64_t port;
    int rc = split_listen(listen, host, sizeof host, &port, err);
    if (rc < 0)
        return rc;
    char service[8];
    (void)vg_snprintf(service, sizeof service, "%u", (unsigned)port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV};
    int gai = getaddrinfo(host[0] ? host : "0.0.0.0", service, &hints, res);
    if (gai != 0)
        return vg_err_set(err, -EINVAL, "--listen '%s': '%s' is not an IP address", listen, host);
    return 0;
}

int mon_http_check_listen(const char *listen, struct vg_err *err)
{
    struct addrinfo *res = NULL;
    int rc = resolve_listen(listen, &res, err);
    if (res)
        freeaddrinfo(res);
    return rc;
}

static void guard_closed(void *arg, enum connguard_why why)
{
    count_error(arg, why == CONNGUARD_TIMED_OUT ? "http_timeout" : "http_overload");
}

int mon_http_new(struct event_base *base, const char *listen, unsigned timeout_ms,
                 const struct mon_http_handler *handler, struct mon_http **out, struct vg_err *err)
{
    *out = NULL;
    struct addrinfo *res = NULL;
    int rc = resolve_listen(listen, &res, err);
    if (rc < 0)
        return rc;
    struct mon_http *h = vg_calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(res);
        return vg_err_set(err, -ENOMEM, "out of memory");
    }
    h->base = base;
    h->handler = *handler;
    h->timeout_ms = timeout_ms;
    /* The connection's own deadline (timeout_ms from accept) comes first; the guard's head
     * deadline is the backstop. */
    struct connguard_options go = {.name = "metrics",
                                   .ceiling = MON_HTTP_CONNS,
                                   .max_per_peer = MON_HTTP_CONNS_PER_PEER,
                                   .head_ms = timeout_ms + 1000,
                                   .idle_ms = timeout_ms + 1000,
                                   .closed = guard_closed,
                                   .closed_arg = h};
    h->guard = connguard_new(base, &go, err);
    if (h->guard == NULL) {
        freeaddrinfo(res);
        free(h);
        return err->code;
    }
    h->listener = evconnlistener_new_bind(
        base, on_accept, h, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 64,
        res->ai_addr, (int)res->ai_addrlen);
    int e = errno;
    freeaddrinfo(res);
    if (!h->listener) {
        connguard_free(h->guard);
        free(h);
        return vg_err_errno(err, e ? e : EADDRINUSE, "--listen %s: cannot listen", listen);
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(evconnlistener_get_fd(h->listener), (struct sockaddr *)&ss, &sl) == 0)
        h->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    connguard_watch_listener(h->guard, h->listener);
    *out = h;
    return 0;
}

unsigned mon_http_port(const struct mon_http *h)
{
    return h->port;
}

void mon_http_free(struct mon_http *h)
{
    if (!h)
        return;
    while (h->conns)
        conn_free(h->conns);
    evconnlistener_free(h->listener);
    connguard_free(h->guard);
    free(h);
}
