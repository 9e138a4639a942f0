/* gRPC server over nghttp2 (see grpc.h for the contract).
 *
 * A request is checked when its HEADERS end (POST, a known :path, an application/grpc
 * content-type, a well-formed grpc-timeout); DATA goes through a vgrpc_reader that stops
 * at the message ceiling; the handler runs when the request's END_STREAM arrives, with
 * exactly one message. nghttp2's own HTTP checks are off (no_http_messaging) because
 * grpc-go clients that dial a unix socket send the socket path as :authority, which
 * nghttp2 rejects; the checks a gRPC server needs are done here instead.
 *
 * Responses go through one data provider per stream that drains the stream's output
 * buffer and, once the call is finishing and the buffer is empty, submits the trailers
 * (grpc-status, grpc-message). Errors found before any response use a trailers-only
 * response. A response that ends while the client is still sending is followed by
 * RST_STREAM(NO_ERROR), as HTTP/2 §8.1 suggests, so the client stops. */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "connguard/connguard.h"
#include "grpc/grpc.h"
#include "grpc/transport.h"

#define PATH_MAX_LEN       256
#define STREAM_PENDING_MAX ((size_t)16 << 20)
#define STREAM_WINDOW      (1 << 20)
#define CONN_WINDOW        (8 << 20)
/* A connection that goes this long without an open stream is closed; the client dials
 * again when it next calls (kubelet holds ListAndWatch open, so its connection to a device
 * plugin is never idle). */
#define CONN_IDLE_MS       300000

struct method {
    char *path;
    vgrpc_unary_handler unary;
    vgrpc_stream_handler stream;
    vgrpc_deferred_handler deferred;
    void *arg;
    struct method *next;
};

struct server_conn {
    struct vgrpc_conn io;
    int fd;
    bool greeted; /* the client's preface and SETTINGS came */
    struct vgrpc_server *server;
    struct vgrpc_stream *streams;
    struct server_conn *prev, *next;
};

struct vgrpc_stream {
    struct server_conn *conn;
    int32_t id;
    struct vgrpc_stream *prev, *next;

    /* request */
    char path[PATH_MAX_LEN];
    bool path_bad;
    bool post;
    bool content_type_ok;
    char timeout[VGRPC_TIMEOUT_TEXT_MAX + 1];
    bool timeout_bad;
    bool have_timeout;
    const struct method *method;
    struct vgrpc_reader reader;
    uint8_t *request;
    size_t request_len;
    bool request_done;

    /* response */
    bool responded;     /* response HEADERS submitted */
    bool live;          /* handed to a streaming handler */
    bool waiting;       /* handed to a deferred handler, no reply yet */
    bool finishing;     /* trailers go out once out is empty */
    bool trailers_sent; /* final status is on its way */
    bool closed;        /* nghttp2 closed it or the connection died */
    enum vgrpc_status_code status;
    char message[VGRPC_STATUS_MESSAGE_MAX];
    struct evbuffer *out;
    struct event *deadline_ev;
    vgrpc_stream_closed on_closed;
    void *on_closed_arg;
    vgrpc_call_gone on_gone;
    void *on_gone_arg;
};

struct vgrpc_server {
    struct event_base *base;
    struct vgrpc_server_options opt;
    struct method *methods;
    int listen_fd;
    struct event *listen_ev;
    char *socket_path;
    struct server_conn *conns;
    struct connguard *guard; /* head and idle deadlines, caps, per-peer shares */
    unsigned connections;
    unsigned streams;
    unsigned waiting; /* deferred calls without a reply */
    bool shutting_down;
    struct event *grace_ev;
    struct event *done_ev;
    void (*done)(void *arg);
    void *done_arg;
};

static const struct method *find_method(const struct vgrpc_server *s, const char *path)
{
    for (const struct method *m = s->methods; m != NULL; m = m->next)
        if (strcmp(m->path, path) == 0)
            return m;
    return NULL;
}

/* --- response side --- */

static void stream_trailer_nv(struct vgrpc_stream *st, nghttp2_nv *nv, size_t *n, char *code,
                              size_t code_size, char *encoded, size_t encoded_size)
{
    vg_snprintf(code, code_size, "%d", (int)st->status);
    nv[(*n)++] = vgrpc_nv("grpc-status", code);
    if (st->message[0] != '\0') {
        if (vgrpc_percent_encode(st->message, strlen(st->message), encoded, encoded_size) < 0)
            vg_strlcpy(encoded, "(message too long)", encoded_size);
        nv[(*n)++] = vgrpc_nv("grpc-message", encoded);
    }
}

static ssize_t stream_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                              size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                              void *user_data)
{
    (void)user_data;
    struct vgrpc_stream *st = source->ptr;
    int n = evbuffer_remove(st->out, buf, length);
    if (n < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (evbuffer_get_length(st->out) == 0) {
        if (st->finishing && !st->trailers_sent) {
            nghttp2_nv nv[2];
            size_t count = 0;
            char code[16], encoded[VGRPC_STATUS_MESSAGE_MAX * 3 + 1];
            stream_trailer_nv(st, nv, &count, code, sizeof code, encoded, sizeof encoded);
            *data_flags |= NGHTTP2_DATA_FLAG_EOF;
            if (nghttp2_submit_trailer(session, stream_id, nv, count) == 0)
                *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
            st->trailers_sent = true;
        } else if (n == 0) {
            return NGHTTP2_ERR_DEFERRED;
        }
    }
    return n;
}

/* Response headers followed by whatever the stream's buffer gets. */
static void stream_respond(struct vgrpc_stream *st)
{
    nghttp2_nv nv[] = {vgrpc_nv(":status", "200"), vgrpc_nv("content-type", "application/grpc")};
    nghttp2_data_provider provider = {.source.ptr = st, .read_callback = stream_read_cb};
    st->responded = true;
    if (nghttp2_submit_response(st->conn->io.session, st->id, nv, 2, &provider) != 0)
        nghttp2_submit_rst_stream(st->conn->io.session, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    vgrpc_conn_flush_later(&st->conn->io);
}

static void stream_cancel_deadline(struct vgrpc_stream *st)
{
    if (st->deadline_ev != NULL) {
        event_free(st->deadline_ev);
        st->deadline_ev = NULL;
    }
}

/* Ends the call with a status: a trailers-only response when nothing was sent yet,
 * else trailers after the queued messages. */
static void stream_end(struct vgrpc_stream *st, int http_status, enum vgrpc_status_code status,
                       const char *message)
{
    if (st->closed || st->finishing || (st->responded && !st->live && st->trailers_sent))
        return;
    stream_cancel_deadline(st);
    st->status = status;
    vg_strlcpy(st->message, message ? message : "", sizeof st->message);
    st->finishing = true;
    if (st->responded) {
        nghttp2_session_resume_data(st->conn->io.session, st->id);
        vgrpc_conn_flush_later(&st->conn->io);
        return;
    }
    char http[8], code[16], encoded[VGRPC_STATUS_MESSAGE_MAX * 3 + 1];
    vg_snprintf(http, sizeof http, "%d", http_status);
    nghttp2_nv nv[4] = {vgrpc_nv(":status", http), vgrpc_nv("content-type", "application/grpc")};
    size_t n = 2;
    stream_trailer_nv(st, nv, &n, code, sizeof code, encoded, sizeof encoded);
    st->responded = true;
    st->trailers_sent = true;
    if (nghttp2_submit_response(st->conn->io.session, st->id, nv, n, NULL) != 0)
        nghttp2_submit_rst_stream(st->conn->io.session, NGHTTP2_FLAG_NONE, st->id,
                                  NGHTTP2_INTERNAL_ERROR);
    vgrpc_conn_flush_later(&st->conn->io);
}

/* A deferred call ended without a reply: tell its owner, once. */
static void call_gone(struct vgrpc_stream *st, enum vgrpc_status_code status)
{
    if (!st->waiting)
        return;
    st->waiting = false;
    st->conn->server->waiting--;
    if (st->on_gone != NULL)
        st->on_gone(st->on_gone_arg, (struct vgrpc_call *)(void *)st, status);
}

/* Queues a complete unary response: the message, then OK trailers. */
static void stream_reply_ok(struct vgrpc_stream *st, const uint8_t *data, size_t len)
{
    uint8_t prefix[VGRPC_PREFIX_LEN];
    vgrpc_frame_prefix(prefix, len);
    evbuffer_add(st->out, prefix, sizeof prefix);
    if (len)
        evbuffer_add(st->out, data, len);
    st->status = VGRPC_STATUS_OK;
    st->finishing = true;
    stream_cancel_deadline(st);
    stream_respond(st);
}

static void stream_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct vgrpc_stream *st = arg;
    stream_end(st, 200, VGRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded");
    call_gone(st, VGRPC_STATUS_DEADLINE_EXCEEDED);
}

/* --- request side --- */

static enum vgrpc_status_code request_sink(void *arg, const uint8_t *data, size_t len)
{
    struct vgrpc_stream *st = arg;
    if (st->reader.messages > 1)
        return VGRPC_STATUS_INTERNAL; /* unary and server-streaming take one message */
    st->request = xmalloc(len ? len : 1);
    if (len)
        memcpy(st->request, data, len);
    st->request_len = len;
    return VGRPC_STATUS_OK;
}

static void stream_headers_done(struct vgrpc_stream *st)
{
    struct vgrpc_server *s = st->conn->server;
    char msg[PATH_MAX_LEN + 64];
    if (!st->post) {
        stream_end(st, 405, VGRPC_STATUS_INTERNAL, "gRPC requires POST");
        return;
    }
    if (!st->content_type_ok) {
        stream_end(st, 415, VGRPC_STATUS_INTERNAL, "content-type must be application/grpc");
        return;
    }
    if (st->path[0] == '\0')
        st->path_bad = true; /* no :path at all */
    st->method = st->path_bad ? NULL : find_method(s, st->path);
    if (st->method == NULL) {
        vg_snprintf(msg, sizeof msg, "unknown method %s", st->path_bad ? "(bad path)" : st->path);
        stream_end(st, 200, VGRPC_STATUS_UNIMPLEMENTED, msg);
        return;
    }
    if (st->timeout_bad) {
        stream_end(st, 200, VGRPC_STATUS_INTERNAL, "malformed grpc-timeout");
        return;
    }
    if (st->have_timeout) {
        uint64_t ms = 0;
        vgrpc_timeout_parse(st->timeout, &ms, NULL);
        struct timeval tv = {.tv_sec = (time_t)(ms / 1000),
                             .tv_usec = (suseconds_t)(ms % 1000) * 1000};
        st->deadline_ev = event_new(s->base, -1, 0, stream_deadline_cb, st);
        if (st->deadline_ev != NULL)
            event_add(st->deadline_ev, &tv);
    }
}

static void stream_dispatch(struct vgrpc_stream *st)
{
    struct vgrpc_server *s = st->conn->server;
    struct vg_err err = {0};
    if (vgrpc_reader_finish(&st->reader, &err) != VGRPC_STATUS_OK) {
        stream_end(st, 200, VGRPC_STATUS_INTERNAL, err.msg);
        return;
    }
    if (st->reader.messages != 1) {
        char msg[96];
        vg_snprintf(msg, sizeof msg, "expected one request message, got %llu", st->reader.messages);
        stream_end(st, 200, VGRPC_STATUS_INTERNAL, msg);
        return;
    }
    const struct method *m = st->method;
    if (m->unary != NULL) {
        struct vgrpc_reply reply = {0};
        enum vgrpc_status_code status = m->unary(m->arg, st->request, st->request_len, &reply);
        if (status == VGRPC_STATUS_OK && reply.len > s->opt.max_message) {
            status = VGRPC_STATUS_RESOURCE_EXHAUSTED;
            vg_snprintf(reply.message, sizeof reply.message,
                        "response of %zu bytes is over the %zu-byte limit", reply.len,
                        s->opt.max_message);
        }
        if (status == VGRPC_STATUS_OK) {
            stream_reply_ok(st, reply.data, reply.len);
        } else {
            stream_end(st, 200, status, reply.message);
        }
        free(reply.data);
        return;
    }
    if (m->deferred != NULL) {
        st->waiting = true;
        s->waiting++;
        m->deferred(m->arg, (struct vgrpc_call *)(void *)st, st->request, st->request_len);
        return;
    }
    char message[VGRPC_STATUS_MESSAGE_MAX] = "";
    st->live = true;
    s->streams++;
    enum vgrpc_status_code status = m->stream(m->arg, st, st->request, st->request_len, message);
    if (st->closed)
        return;
    if (status != VGRPC_STATUS_OK) {
        st->on_closed = NULL;
        evbuffer_drain(st->out, evbuffer_get_length(st->out));
        st->finishing = false;
        stream_end(st, 200, status, message);
        return;
    }
    stream_respond(st);
}

/* --- nghttp2 callbacks --- */

static struct vgrpc_stream *stream_of(nghttp2_session *session, int32_t id)
{
    return nghttp2_session_get_stream_user_data(session, id);
}

static int on_begin_headers(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct server_conn *sc = user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0;
    struct vgrpc_stream *st = xcalloc(1, sizeof *st);
    st->conn = sc;
    st->id = frame->hd.stream_id;
    st->out = evbuffer_new();
    if (st->out == NULL) {
        free(st);
        return NGHTTP2_ERR_CALLBACK_FAILURE;
    }
    vgrpc_reader_init(&st->reader, sc->server->opt.max_message);
    connguard_busy(sc->server->guard, sc->fd);
    st->next = sc->streams;
    if (sc->streams)
        sc->streams->prev = st;
    sc->streams = st;
    nghttp2_session_set_stream_user_data(session, st->id, st);
    return 0;
}

static bool header_is(const uint8_t *name, size_t len, const char *want)
{
    return len == strlen(want) && memcmp(name, want, len) == 0;
}

static int on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user)
{
    (void)flags;
    (void)user;
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST)
        return 0; /* client trailers carry nothing we use */
    struct vgrpc_stream *st = stream_of(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    if (header_is(name, namelen, ":method")) {
        st->post = header_is(value, valuelen, "POST");
    } else if (header_is(name, namelen, ":path")) {
        if (valuelen == 0 || valuelen >= sizeof st->path || value[0] != '/') {
            st->path_bad = true;
        } else {
            memcpy(st->path, value, valuelen);
            st->path[valuelen] = '\0';
            st->path_bad = memchr(value, '\0', valuelen) != NULL;
        }
    } else if (header_is(name, namelen, "content-type")) {
        static const char ct[] = "application/grpc";
        size_t n = sizeof ct - 1;
        st->content_type_ok = valuelen >= n && memcmp(value, ct, n) == 0 &&
                              (valuelen == n || value[n] == '+' || value[n] == ';');
    } else if (header_is(name, namelen, "grpc-timeout")) {
        uint64_t ms;
        st->have_timeout = true;
        if (valuelen >= sizeof st->timeout) {
            st->timeout_bad = true;
        } else {
            memcpy(st->timeout, value, valuelen);
            st->timeout[valuelen] = '\0';
            st->timeout_bad = memchr(value, '\0', valuelen) != NULL ||
                              vgrpc_timeout_parse(st->timeout, &ms, NULL) < 0;
        }
    }
    return 0;
}

static void stream_request_end(struct vgrpc_stream *st)
{
    if (st->request_done)
        return;
    st->request_done = true;
    if (!st->responded && !st->finishing)
        stream_dispatch(st);
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    struct server_conn *sc = user;
    if (!sc->greeted && frame->hd.type == NGHTTP2_SETTINGS &&
        !(frame->hd.flags & NGHTTP2_FLAG_ACK)) {
        /* The preface is in: from now on the connection is held to the idle deadline. */
        sc->greeted = true;
        if (sc->streams == NULL)
            connguard_idle(sc->server->guard, sc->fd);
    }
    struct vgrpc_stream *st = stream_of(session, frame->hd.stream_id);
    if (st == NULL)
        return 0;
    if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
        stream_headers_done(st);
    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        stream_request_end(st);
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    (void)user;
    struct vgrpc_stream *st = stream_of(session, stream_id);
    if (st == NULL || st->responded || st->finishing)
        return 0;
    struct vg_err err = {0};
    enum vgrpc_status_code status =
        vgrpc_reader_feed(&st->reader, data, len, request_sink, st, &err);
    if (status != VGRPC_STATUS_OK) {
        if (status == VGRPC_STATUS_INTERNAL && st->reader.messages > 1)
            vg_strlcpy(err.msg, "expected one request message, got more", sizeof err.msg);
        stream_end(st, 200, status, err.msg);
    }
    return 0;
}

static int on_frame_send(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)user;
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM))
        return 0;
    struct vgrpc_stream *st = stream_of(session, frame->hd.stream_id);
    if (st != NULL && !st->request_done)
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, st->id, NGHTTP2_NO_ERROR);
    return 0;
}

/* Unlinks and frees a stream, telling its owner first. */
static void stream_close(struct vgrpc_stream *st, enum vgrpc_status_code status)
{
    struct server_conn *sc = st->conn;
    st->closed = true;
    stream_cancel_deadline(st);
    call_gone(st, status);
    if (st->live) {
        sc->server->streams--; /* already gone from the count inside the callback */
        if (st->on_closed != NULL)
            st->on_closed(st->on_closed_arg, st, status);
    }
    if (st->prev)
        st->prev->next = st->next;
    else
        sc->streams = st->next;
    if (st->next)
        st->next->prev = st->prev;
    if (sc->streams == NULL && sc->greeted)
        connguard_idle(sc->server->guard, sc->fd);
    vgrpc_reader_release(&st->reader);
    evbuffer_free(st->out);
    free(st->request);
    free(st);
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    (void)user;
    struct vgrpc_stream *st = stream_of(session, stream_id);
    if (st == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    enum vgrpc_status_code status = st->trailers_sent ? st->status : VGRPC_STATUS_CANCELLED;
    if (!st->trailers_sent)
        vg_log(VG_LOG_DEBUG, "grpc: stream reset by peer", "path=%s h2_error=%u", st->path,
               error_code);
    stream_close(st, status);
    return 0;
}

/* --- connections --- */

static void server_check_done(struct vgrpc_server *s)
{
    if (s->shutting_down && s->connections == 0 && s->done_ev != NULL)
        event_active(s->done_ev, 0, 0);
}

static void conn_free(struct server_conn *sc, enum vgrpc_status_code status)
{
    struct vgrpc_server *s = sc->server;
    while (sc->streams != NULL) {
        if (sc->io.session != NULL)
            nghttp2_session_set_stream_user_data(sc->io.session, sc->streams->id, NULL);
        stream_close(sc->streams, status);
    }
    connguard_release(s->guard, sc->fd);
    vgrpc_conn_release(&sc->io);
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        s->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    s->connections--;
    free(sc);
    server_check_done(s);
}

static void conn_dead_cb(void *owner)
{
    conn_free(owner, VGRPC_STATUS_CANCELLED);
}

static nghttp2_session *server_session_new(struct server_conn *sc, struct vg_err *err)
{
    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    nghttp2_session *session = NULL;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        return NULL;
    if (nghttp2_option_new(&opt) != 0) {
        nghttp2_session_callbacks_del(cb);
        return NULL;
    }
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_option_set_no_http_messaging(opt, 1);
    int rv = nghttp2_session_server_new2(&session, cb, sc, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rv != 0) {
        vg_err_set(err, -ENOMEM, "nghttp2 server session: %s", nghttp2_strerror(rv));
        return NULL;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, sc->server->opt.max_streams},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
        {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, 16384},
    };
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 3);
    nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
    return session;
}

static void accept_resume(void *arg)
{
    struct vgrpc_server *s = arg;
    if (s->listen_ev != NULL)
        event_add(s->listen_ev, NULL);
}

static void on_accept(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct vgrpc_server *s = arg;
    int cfd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0) {
        /* Out of descriptors: the socket stays readable, so accepting again at once would
         * spin; pause instead. Anything else (EAGAIN, a peer that left) concerns one try. */
        if (connguard_accept_failed(s->guard, errno, accept_resume, s))
            event_del(s->listen_ev);
        return;
    }
    if (s->shutting_down) {
        vg_log(VG_LOG_WARN, "grpc: refusing connection while shutting down", "connections=%u",
               s->connections);
        close(cfd);
        return;
    }
    /* At the cap, or the peer at its share: the oldest connection that never sent its
     * preface or sits idle makes room; when all are busy, this one is refused. */
    if (connguard_admit(s->guard, cfd) < 0) {
        vg_log(VG_LOG_DEBUG, "grpc: refusing connection", "connections=%u", s->connections);
        close(cfd);
        return;
    }
    struct server_conn *sc = xcalloc(1, sizeof *sc);
    sc->server = s;
    sc->fd = cfd;
    struct vg_err err = {0};
    nghttp2_session *session = server_session_new(sc, &err);
    if (session == NULL ||
        vgrpc_conn_init(&sc->io, s->base, cfd, session, conn_dead_cb, sc, "server", &err) < 0) {
        vg_log(VG_LOG_WARN, "grpc: connection setup failed", "error=\"%s\"", err.msg);
        connguard_release(s->guard, cfd);
        if (session == NULL)
            close(cfd);
        free(sc);
        return;
    }
    sc->next = s->conns;
    if (s->conns)
        s->conns->prev = sc;
    s->conns = sc;
    s->connections++;
    vgrpc_conn_flush_later(&sc->io); /* our SETTINGS */
}

/* --- public API --- */

struct vgrpc_server *vgrpc_server_new(struct event_base *base,
                                      const struct vgrpc_server_options *options,
                                      struct vg_err *err)
{
    if (base == NULL) {
        vg_err_set(err, -EINVAL, "grpc server needs an event base");
        return NULL;
    }
    struct vgrpc_server *s = xcalloc(1, sizeof *s);
    s->base = base;
    if (options != NULL)
        s->opt = *options;
    if (s->opt.max_message == 0)
        s->opt.max_message = VGRPC_MESSAGE_MAX;
    if (s->opt.max_connections == 0)
        s->opt.max_connections = 64;
    if (s->opt.max_streams == 0)
        s->opt.max_streams = 100;
    if (s->opt.shutdown_grace_ms == 0)
        s->opt.shutdown_grace_ms = 5000;
    s->listen_fd = -1;
    /* A process may serve several sockets (a device plugin, one per resource): each takes a
     * share of the descriptors, at most max_connections. */
    struct connguard_options go = {
        .name = "grpc", .listeners = 4, .ceiling = s->opt.max_connections, .idle_ms = CONN_IDLE_MS};
    s->guard = connguard_new(base, &go, err);
    if (s->guard == NULL) {
        free(s);
        return NULL;
    }
    return s;
}

static void server_stop_listening(struct vgrpc_server *s)
{
    if (s->listen_ev != NULL)
        event_free(s->listen_ev);
    s->listen_ev = NULL;
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    s->listen_fd = -1;
    if (s->socket_path != NULL)
        unlink(s->socket_path);
    free(s->socket_path);
    s->socket_path = NULL;
}

void vgrpc_server_free(struct vgrpc_server *s)
{
    if (s == NULL)
        return;
    server_stop_listening(s);
    s->done_ev = NULL; /* no done callback from inside free */
    while (s->conns != NULL)
        conn_free(s->conns, VGRPC_STATUS_UNAVAILABLE);
    if (s->grace_ev)
        event_free(s->grace_ev);
    connguard_free(s->guard);
    struct method *m = s->methods;
    while (m != NULL) {
        struct method *next = m->next;
        free(m->path);
        free(m);
        m = next;
    }
    free(s);
}

static int server_add(struct vgrpc_server *s, const char *path, vgrpc_unary_handler unary,
                      vgrpc_stream_handler stream, vgrpc_deferred_handler deferred, void *arg,
                      struct vg_err *err)
{
    if (path == NULL || path[0] != '/' || strlen(path) >= PATH_MAX_LEN)
        return vg_err_set(err, -EINVAL, "method path must start with '/' and be under %d bytes",
                          PATH_MAX_LEN);
    if (find_method(s, path) != NULL)
        return vg_err_set(err, -EEXIST, "method %s registered twice", path);
    struct method *m = xcalloc(1, sizeof *m);
    m->path = xstrdup(path);
    m->unary = unary;
    m->stream = stream;
    m->deferred = deferred;
    m->arg = arg;
    m->next = s->methods;
    s->methods = m;
    return 0;
}

int vgrpc_server_add_unary(struct vgrpc_server *s, const char *path, vgrpc_unary_handler handler,
                           void *arg, struct vg_err *err)
{
    if (handler == NULL)
        return vg_err_set(err, -EINVAL, "no handler for %s", path ? path : "(null)");
    return server_add(s, path, handler, NULL, NULL, arg, err);
}

int vgrpc_server_add_stream(struct vgrpc_server *s, const char *path, vgrpc_stream_handler handler,
                            void *arg, struct vg_err *err)
{
    if (handler == NULL)
        return vg_err_set(err, -EINVAL, "no handler for %s", path ? path : "(null)");
    return server_add(s, path, NULL, handler, NULL, arg, err);
}

int vgrpc_server_add_deferred(struct vgrpc_server *s, const char *path,
                              vgrpc_deferred_handler handler, void *arg, struct vg_err *err)
{
    if (handler == NULL)
        return vg_err_set(err, -EINVAL, "no handler for %s", path ? path : "(null)");
    return server_add(s, path, NULL, NULL, handler, arg, err);
}

int vgrpc_server_listen(struct vgrpc_server *s, const char *socket_path, struct vg_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (s->listen_fd >= 0)
        return vg_err_set(err, -EALREADY, "grpc server already listening on %s", s->socket_path);
    if (vg_strlcpy(sa.sun_path, socket_path, sizeof sa.sun_path) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "socket path '%s' longer than %zu bytes", socket_path,
                          sizeof sa.sun_path - 1);
    struct stat sb;
    if (lstat(socket_path, &sb) == 0) {
        if (!S_ISSOCK(sb.st_mode))
            return vg_err_set(err, -EEXIST, "%s exists and is not a socket", socket_path);
        if (unlink(socket_path) != 0)
            return vg_err_errno(err, errno, "removing stale socket %s", socket_path);
    }
    VG_AUTO_CLOSE int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return vg_err_errno(err, errno, "socket");
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0)
        return vg_err_errno(err, errno, "listening on %s", socket_path);
    s->listen_ev = event_new(s->base, fd, EV_READ | EV_PERSIST, on_accept, s);
    if (s->listen_ev == NULL || event_add(s->listen_ev, NULL) != 0) {
        unlink(socket_path);
        return vg_err_set(err, -ENOMEM, "listening on %s: no event", socket_path);
    }
    s->listen_fd = vg_steal_fd(&fd);
    s->socket_path = xstrdup(socket_path);
    return 0;
}

static void grace_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct vgrpc_server *s = arg;
    for (struct server_conn *sc = s->conns; sc != NULL; sc = sc->next)
        vgrpc_conn_kill(&sc->io);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct vgrpc_server *s = arg;
    event_free(s->done_ev);
    s->done_ev = NULL;
    if (s->grace_ev) {
        event_free(s->grace_ev);
        s->grace_ev = NULL;
    }
    if (s->done)
        s->done(s->done_arg);
}

void vgrpc_server_shutdown(struct vgrpc_server *s, void (*done)(void *arg), void *arg)
{
    if (s->shutting_down)
        return;
    s->shutting_down = true;
    s->done = done;
    s->done_arg = arg;
    server_stop_listening(s);
    s->done_ev = event_new(s->base, -1, 0, done_cb, s);
    s->grace_ev = event_new(s->base, -1, 0, grace_cb, s);
    struct timeval tv = {.tv_sec = s->opt.shutdown_grace_ms / 1000,
                         .tv_usec = (suseconds_t)(s->opt.shutdown_grace_ms % 1000) * 1000};
    if (s->grace_ev)
        event_add(s->grace_ev, &tv);
    for (struct server_conn *sc = s->conns; sc != NULL; sc = sc->next) {
        nghttp2_submit_goaway(sc->io.session, NGHTTP2_FLAG_NONE,
                              nghttp2_session_get_last_proc_stream_id(sc->io.session),
                              NGHTTP2_NO_ERROR, NULL, 0);
        for (struct vgrpc_stream *st = sc->streams; st != NULL; st = st->next)
            if (st->live || st->waiting) {
                stream_end(st, 200, VGRPC_STATUS_UNAVAILABLE, "server shutting down");
                call_gone(st, VGRPC_STATUS_UNAVAILABLE);
            }
        vgrpc_conn_flush_later(&sc->io);
    }
    server_check_done(s);
}

unsigned vgrpc_server_connections(const struct vgrpc_server *s)
{
    return s->connections;
}

unsigned vgrpc_server_streams(const struct vgrpc_server *s)
{
    return s->streams;
}

int vgrpc_stream_send(struct vgrpc_stream *st, const uint8_t *data, size_t len, struct vg_err *err)
{
    if (st->closed || st->finishing)
        return vg_err_set(err, -EPIPE, "stream %s is finished", st->path);
    if (len > st->conn->server->opt.max_message)
        return vg_err_set(err, -EMSGSIZE, "message of %zu bytes is over the %zu-byte limit", len,
                          st->conn->server->opt.max_message);
    if (evbuffer_get_length(st->out) + len > STREAM_PENDING_MAX)
        return vg_err_set(err, -ENOBUFS, "peer is not reading stream %s", st->path);
    uint8_t prefix[VGRPC_PREFIX_LEN];
    vgrpc_frame_prefix(prefix, len);
    if (evbuffer_add(st->out, prefix, sizeof prefix) != 0 ||
        (len && evbuffer_add(st->out, data, len) != 0))
        return vg_err_set(err, -ENOMEM, "queueing a message");
    if (st->responded) {
        nghttp2_session_resume_data(st->conn->io.session, st->id);
        vgrpc_conn_flush_later(&st->conn->io);
    }
    return 0;
}

void vgrpc_stream_finish(struct vgrpc_stream *st, enum vgrpc_status_code status,
                         const char *message)
{
    if (st->closed || st->finishing)
        return;
    if (!st->responded) { /* inside the handler: trailers follow the headers */
        st->status = status;
        vg_strlcpy(st->message, message ? message : "", sizeof st->message);
        st->finishing = true;
        stream_cancel_deadline(st);
        return;
    }
    stream_end(st, 200, status, message);
}

void vgrpc_stream_on_close(struct vgrpc_stream *st, vgrpc_stream_closed closed, void *arg)
{
    st->on_closed = closed;
    st->on_closed_arg = arg;
}

const char *vgrpc_stream_path(const struct vgrpc_stream *st)
{
    return st->path;
}

void vgrpc_call_on_gone(struct vgrpc_call *call, vgrpc_call_gone gone, void *arg)
{
    struct vgrpc_stream *st = (struct vgrpc_stream *)(void *)call;
    st->on_gone = gone;
    st->on_gone_arg = arg;
}

void vgrpc_call_reply(struct vgrpc_call *call, enum vgrpc_status_code status, const uint8_t *data,
                      size_t len, const char *message)
{
    struct vgrpc_stream *st = (struct vgrpc_stream *)(void *)call;
    if (!st->waiting)
        return;
    st->waiting = false;
    st->conn->server->waiting--;
    size_t max = st->conn->server->opt.max_message;
    if (status == VGRPC_STATUS_OK && len > max) {
        char msg[VGRPC_STATUS_MESSAGE_MAX];
        vg_snprintf(msg, sizeof msg, "response of %zu bytes is over the %zu-byte limit", len, max);
        stream_end(st, 200, VGRPC_STATUS_RESOURCE_EXHAUSTED, msg);
    } else if (status == VGRPC_STATUS_OK) {
        stream_reply_ok(st, data, len);
    } else {
        stream_end(st, 200, status, message);
    }
}

unsigned vgrpc_server_deferred_calls(const struct vgrpc_server *s)
{
    return s->waiting;
}
