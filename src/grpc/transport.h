/* One HTTP/2 connection on a libevent bufferevent: the byte pump shared by the gRPC
 * server and client (internal to src/grpc/).
 *
 * Bytes read are handed to nghttp2 at once; whatever nghttp2 wants to send is copied to
 * the bufferevent, at most VGRPC_CONN_OUTPUT_MAX bytes ahead of the socket, so a peer that
 * stops reading cannot make us buffer without bound. nghttp2 must not be re-entered from
 * its own callbacks, so code that queues frames from inside them (or from a timer) calls
 * vgrpc_conn_flush_later(), which sends from a fresh loop turn.
 *
 * When the connection ends (peer EOF or error, malformed input that nghttp2 answers with
 * GOAWAY, or both sides done) the owner's on_dead runs once, outside nghttp2 callbacks;
 * it must clean up its streams and call vgrpc_conn_release(). */
#ifndef VGPU_GRPC_TRANSPORT_H
#define VGPU_GRPC_TRANSPORT_H

#include <stdbool.h>

#include <nghttp2/nghttp2.h>

#include "base/err.h"

#define VGRPC_CONN_OUTPUT_MAX ((size_t)1 << 20)

struct event_base;
struct bufferevent;
struct event;

struct vgrpc_conn {
    struct event_base *base;
    struct bufferevent *bev;
    nghttp2_session *session;
    struct event *flush_ev;
    void (*on_dead)(void *owner);
    void *owner;
    bool dead;
    const char *side; /* "server" or "client", for logs */
};

/* Takes over fd (closed by vgrpc_conn_release, or here on failure). The session must
 * already exist and is freed by vgrpc_conn_release. */
int vgrpc_conn_init(struct vgrpc_conn *c, struct event_base *base, int fd, nghttp2_session *session,
                    void (*on_dead)(void *owner), void *owner, const char *side,
                    struct vg_err *err);
void vgrpc_conn_release(struct vgrpc_conn *c);

/* Sends queued frames from the next loop turn (safe inside nghttp2 callbacks). */
void vgrpc_conn_flush_later(struct vgrpc_conn *c);

/* Ends the connection now from outside nghttp2 callbacks: on_dead runs later. */
void vgrpc_conn_kill(struct vgrpc_conn *c);

/* Copies one header into an nghttp2_nv (no copies made: name and value must outlive the
 * submit call, which copies them). */
nghttp2_nv vgrpc_nv(const char *name, const char *value);

#endif
