/* See transport.h. */
#include "grpc/transport.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "base/log.h"

static void conn_dead(struct vgrpc_conn *c)
{
    if (c->dead)
        return;
    c->dead = true;
    bufferevent_disable(c->bev, EV_READ | EV_WRITE);
    /* From a fresh turn, so no caller up the stack still holds c. */
    event_active(c->flush_ev, 0, 0);
}

/* Copies nghttp2's pending frames into the output, bounded; detects the end. */
static void conn_pump(struct vgrpc_conn *c)
{
    if (c->dead)
        return;
    struct evbuffer *out = bufferevent_get_output(c->bev);
    while (evbuffer_get_length(out) < VGRPC_CONN_OUTPUT_MAX) {
        const uint8_t *data;
        ssize_t n = nghttp2_session_mem_send(c->session, &data);
        if (n < 0) {
            vg_log(VG_LOG_WARN, "grpc: send failed", "side=%s error=%s", c->side,
                   nghttp2_strerror((int)n));
            conn_dead(c);
            return;
        }
        if (n == 0)
            break;
        if (evbuffer_add(out, data, (size_t)n) != 0) {
            conn_dead(c);
            return;
        }
    }
    if (!nghttp2_session_want_read(c->session) && !nghttp2_session_want_write(c->session) &&
        evbuffer_get_length(out) == 0)
        conn_dead(c);
}

static void conn_read(struct bufferevent *bev, void *arg)
{
    struct vgrpc_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t len;
    while (!c->dead && (len = evbuffer_get_contiguous_space(in)) > 0) {
        const uint8_t *data = evbuffer_pullup(in, (ev_ssize_t)len);
        ssize_t n = nghttp2_session_mem_recv(c->session, data, len);
        if (n < 0) {
            vg_log(VG_LOG_WARN, "grpc: bad input from peer, closing", "side=%s error=%s", c->side,
                   nghttp2_strerror((int)n));
            /* nghttp2 may have queued a GOAWAY; try to get it out before closing. */
            struct evbuffer *out = bufferevent_get_output(c->bev);
            const uint8_t *goaway;
            ssize_t g = nghttp2_session_mem_send(c->session, &goaway);
            if (g > 0)
                evbuffer_add(out, goaway, (size_t)g);
            evbuffer_write(out, bufferevent_getfd(c->bev));
            conn_dead(c);
            return;
        }
        evbuffer_drain(in, len);
    }
    conn_pump(c);
}

static void conn_write(struct bufferevent *bev, void *arg)
{
    (void)bev;
    conn_pump(arg);
}

static void conn_event(struct bufferevent *bev, short what, void *arg)
{
    (void)bev;
    struct vgrpc_conn *c = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        vg_log(VG_LOG_DEBUG, "grpc: peer closed", "side=%s eof=%d", c->side,
               (what & BEV_EVENT_EOF) != 0);
        conn_dead(c);
    }
}

static void conn_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct vgrpc_conn *c = arg;
    if (!c->dead)
        conn_pump(c);
    if (c->dead)
        c->on_dead(c->owner); /* last touch of c: the owner frees it */
}

int vgrpc_conn_init(struct vgrpc_conn *c, struct event_base *base, int fd, nghttp2_session *session,
                    void (*on_dead)(void *owner), void *owner, const char *side, struct vg_err *err)
{
    memset(c, 0, sizeof *c);
    c->base = base;
    c->session = session;
    c->on_dead = on_dead;
    c->owner = owner;
    c->side = side;
    c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->flush_ev = event_new(base, -1, 0, conn_flush_cb, c);
    if (c->bev == NULL || c->flush_ev == NULL) {
        if (c->bev == NULL)
            close(fd);
        vgrpc_conn_release(c);
        return vg_err_set(err, -ENOMEM, "creating connection events");
    }
    bufferevent_setcb(c->bev, conn_read, conn_write, conn_event, c);
    /* Resume sending once the socket has taken most of what was queued. */
    bufferevent_setwatermark(c->bev, EV_WRITE, VGRPC_CONN_OUTPUT_MAX / 4, 0);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    return 0;
}

void vgrpc_conn_release(struct vgrpc_conn *c)
{
    if (c->flush_ev != NULL)
        event_free(c->flush_ev);
    if (c->bev != NULL)
        bufferevent_free(c->bev);
    if (c->session != NULL)
        nghttp2_session_del(c->session);
    c->flush_ev = NULL;
    c->bev = NULL;
    c->session = NULL;
}

void vgrpc_conn_flush_later(struct vgrpc_conn *c)
{
    if (c->flush_ev != NULL)
        event_active(c->flush_ev, 0, 0);
}

void vgrpc_conn_kill(struct vgrpc_conn *c)
{
    conn_dead(c);
}

nghttp2_nv vgrpc_nv(const char *name, const char *value)
{
    nghttp2_nv nv = {
        .name = (uint8_t *)(uintptr_t)name,
        .value = (uint8_t *)(uintptr_t)value,
        .namelen = strlen(name),
        .valuelen = strlen(value),
        .flags = NGHTTP2_NV_FLAG_NONE,
    };
    return nv;
}
