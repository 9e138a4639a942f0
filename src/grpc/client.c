/* gRPC client over nghttp2 (see grpc.h for the contract).
 *
 * One connection per client. A call is an HTTP/2 request whose single message is
 * queued whole behind a data provider; response DATA goes through a vgrpc_reader with the
 * message ceiling. The final status comes from, in order: grpc-status in trailers (or
 * in a trailers-only response), the HTTP status when it is not 200, the RST_STREAM code,
 * or INTERNAL when the stream ended without any of them. A local timer enforces the
 * deadline (RST_STREAM(CANCEL) + DEADLINE_EXCEEDED) so a silent server cannot hold a
 * call forever. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "grpc/grpc.h"
#include "grpc/transport.h"

struct call {
    struct vgrpc_client *client;
    int32_t id;
    struct call *prev, *next;
    struct evbuffer *out;
    struct vgrpc_reader reader;
    struct event *deadline_ev;
    vgrpc_call_done done;
    vgrpc_call_message on_message;
    void *arg;
    bool streaming;
    int http_status;
    bool content_type_ok;
    bool have_status;
    enum vgrpc_status_code status;
    char message[VGRPC_STATUS_MESSAGE_MAX];
    uint8_t *response;
    size_t response_len;
    bool have_response;
    /* A status decided locally (deadline, bad response) wins over what the wire says. */
    bool local_status;
};

struct vgrpc_client {
    struct event_base *base;
    struct vgrpc_conn io;
    bool connected;
    bool goaway;
    char *authority;
    size_t max_message;
    struct call *calls;
};

static void call_unlink(struct call *c)
{
    struct vgrpc_client *cl = c->client;
    if (c->prev)
        c->prev->next = c->next;
    else
        cl->calls = c->next;
    if (c->next)
        c->next->prev = c->prev;
}

/* Runs the completion callback and frees the call. */
static void call_complete(struct call *c, enum vgrpc_status_code status, const char *message)
{
    call_unlink(c);
    if (c->deadline_ev)
        event_free(c->deadline_ev);
    bool ok = status == VGRPC_STATUS_OK;
    c->done(c->arg, status, message ? message : "", ok && !c->streaming ? c->response : NULL,
            ok && !c->streaming ? c->response_len : 0);
    vgrpc_reader_release(&c->reader);
    evbuffer_free(c->out);
    free(c->response);
    free(c);
}

/* Decides the call's status locally and resets the stream; the callback runs when
 * nghttp2 closes the stream (or at once when there is no stream). */
static void call_fail(struct call *c, enum vgrpc_status_code status, const char *message,
                      uint32_t h2_error)
{
    if (c->local_status)
        return;
    c->local_status = true;
    c->status = status;
    vg_strlcpy(c->message, message, sizeof c->message);
    if (c->client->io.session != NULL && c->id > 0) {
        nghttp2_submit_rst_stream(c->client->io.session, NGHTTP2_FLAG_NONE, c->id, h2_error);
        vgrpc_conn_flush_later(&c->client->io);
    }
}

static void call_deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    call_fail(arg, VGRPC_STATUS_DEADLINE_EXCEEDED, "deadline exceeded", NGHTTP2_CANCEL);
}

static ssize_t call_read_cb(nghttp2_session *session, int32_t stream_id, uint8_t *buf,
                            size_t length, uint32_t *data_flags, nghttp2_data_source *source,
                            void *user_data)
{
    (void)session;
    (void)stream_id;
    (void)user_data;
    struct call *c = source->ptr;
    int n = evbuffer_remove(c->out, buf, length);
    if (n < 0)
        return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    if (evbuffer_get_length(c->out) == 0)
        *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    return n;
}

static enum vgrpc_status_code response_sink(void *arg, const uint8_t *data, size_t len)
{
    struct call *c = arg;
    if (c->streaming) {
        if (!c->on_message(c->arg, data, len)) {
            call_fail(c, VGRPC_STATUS_CANCELLED, "cancelled by the caller", NGHTTP2_CANCEL);
            return VGRPC_STATUS_CANCELLED;
        }
        return VGRPC_STATUS_OK;
    }
    if (c->have_response)
        return VGRPC_STATUS_INTERNAL;
    c->have_response = true;
    c->response = xmalloc(len ? len : 1);
    if (len)
        memcpy(c->response, data, len);
    c->response_len = len;
    return VGRPC_STATUS_OK;
}

/* --- nghttp2 callbacks --- */

static bool parse_small(const char *text, uint64_t *v)
{
    return vg_parse_u64(text, 0, 999, v, NULL) == 0;
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
    if (frame->hd.type != NGHTTP2_HEADERS)
        return 0;
    struct call *c = nghttp2_session_get_stream_user_data(session, frame->hd.stream_id);
    if (c == NULL)
        return 0;
    char text[16];
    if (header_is(name, namelen, ":status")) {
        uint64_t v = 0;
        if (valuelen < sizeof text) {
            memcpy(text, value, valuelen);
            text[valuelen] = '\0';
            if (parse_small(text, &v))
                c->http_status = (int)v;
        }
    } else if (header_is(name, namelen, "content-type")) {
        static const char ct[] = "application/grpc";
        c->content_type_ok = valuelen >= sizeof ct - 1 && memcmp(value, ct, sizeof ct - 1) == 0;
    } else if (header_is(name, namelen, "grpc-status")) {
        uint64_t v = 0;
        if (valuelen < sizeof text) {
            memcpy(text, value, valuelen);
            text[valuelen] = '\0';
        } else {
            text[0] = '\0';
        }
        c->have_status = true;
        /* An unparsable status is the peer's bug: report it as UNKNOWN. */
        c->status =
            parse_small(text, &v) && v <= 16 ? (enum vgrpc_status_code)v : VGRPC_STATUS_UNKNOWN;
    } else if (header_is(name, namelen, "grpc-message")) {
        vgrpc_percent_decode((const char *)value, valuelen, c->message, sizeof c->message);
    }
    return 0;
}

static int on_data_chunk(nghttp2_session *session, uint8_t flags, int32_t stream_id,
                         const uint8_t *data, size_t len, void *user)
{
    (void)flags;
    (void)user;
    struct call *c = nghttp2_session_get_stream_user_data(session, stream_id);
    if (c == NULL || c->local_status)
        return 0;
    struct vg_err err = {0};
    enum vgrpc_status_code status =
        vgrpc_reader_feed(&c->reader, data, len, response_sink, c, &err);
    if (status == VGRPC_STATUS_CANCELLED)
        return 0; /* the caller's choice, already recorded */
    if (status != VGRPC_STATUS_OK) {
        if (status == VGRPC_STATUS_INTERNAL && c->have_response && c->reader.messages > 1)
            vg_strlcpy(err.msg, "more than one response message to a unary call", sizeof err.msg);
        call_fail(c, status, err.msg, NGHTTP2_CANCEL);
    }
    return 0;
}

static int on_stream_close(nghttp2_session *session, int32_t stream_id, uint32_t error_code,
                           void *user)
{
    (void)user;
    struct call *c = nghttp2_session_get_stream_user_data(session, stream_id);
    if (c == NULL)
        return 0;
    nghttp2_session_set_stream_user_data(session, stream_id, NULL);
    struct vg_err err = {0};
    char message[VGRPC_STATUS_MESSAGE_MAX + 64];
    if (c->local_status) {
        call_complete(c, c->status, c->message);
    } else if (c->have_status) {
        if (c->status == VGRPC_STATUS_OK && vgrpc_reader_finish(&c->reader, &err) != 0)
            call_complete(c, VGRPC_STATUS_INTERNAL, err.msg);
        else if (c->status == VGRPC_STATUS_OK && !c->streaming && !c->have_response)
            call_complete(c, VGRPC_STATUS_INTERNAL, "server sent OK without a response message");
        else
            call_complete(c, c->status, c->message);
    } else if (c->http_status != 0 && c->http_status != 200) {
        vg_snprintf(message, sizeof message, "HTTP status %d without grpc-status", c->http_status);
        call_complete(c, vgrpc_status_from_http(c->http_status), message);
    } else if (error_code != NGHTTP2_NO_ERROR) {
        vg_snprintf(message, sizeof message, "stream reset by server (HTTP/2 error %u)",
                    error_code);
        call_complete(c, vgrpc_status_from_rst(error_code), message);
    } else {
        call_complete(c, VGRPC_STATUS_INTERNAL, "stream ended without grpc-status");
    }
    return 0;
}

static int on_frame_recv(nghttp2_session *session, const nghttp2_frame *frame, void *user)
{
    (void)session;
    struct vgrpc_client *cl = user;
    if (frame->hd.type == NGHTTP2_GOAWAY)
        cl->goaway = true;
    return 0;
}

static void client_dead_cb(void *owner)
{
    struct vgrpc_client *cl = owner;
    cl->connected = false;
    /* Complete the calls first: nghttp2_session_del does not report stream closes. */
    while (cl->calls != NULL) {
        struct call *c = cl->calls;
        if (c->id > 0)
            nghttp2_session_set_stream_user_data(cl->io.session, c->id, NULL);
        call_complete(c, c->local_status ? c->status : VGRPC_STATUS_UNAVAILABLE,
                      c->local_status ? c->message : "connection to the server lost");
    }
    vgrpc_conn_release(&cl->io);
}

/* --- public API --- */

struct vgrpc_client *vgrpc_client_new(struct event_base *base, const char *socket_path,
                                      const struct vgrpc_client_options *options,
                                      struct vg_err *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (vg_strlcpy(sa.sun_path, socket_path, sizeof sa.sun_path) < 0) {
        vg_err_set(err, -ENAMETOOLONG, "socket path '%s' longer than %zu bytes", socket_path,
                   sizeof sa.sun_path - 1);
        return NULL;
    }
    VG_AUTO_CLOSE int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        vg_err_errno(err, errno, "socket");
        return NULL;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        vg_err_errno(err, errno, "connecting to %s", socket_path);
        return NULL;
    }
    struct vgrpc_client *cl = xcalloc(1, sizeof *cl);
    cl->base = base;
    const char *authority = options ? options->authority : "localhost";
    if (authority != NULL)
        cl->authority = xstrdup(authority[0] ? authority : "localhost");
    cl->max_message = options && options->max_message ? options->max_message : VGRPC_MESSAGE_MAX;

    nghttp2_session_callbacks *cb;
    nghttp2_option *opt;
    nghttp2_session *session = NULL;
    if (nghttp2_session_callbacks_new(&cb) != 0)
        abort();
    if (nghttp2_option_new(&opt) != 0)
        abort();
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_option_set_no_http_messaging(opt, 1);
    int rv = nghttp2_session_client_new2(&session, cb, cl, opt);
    nghttp2_session_callbacks_del(cb);
    nghttp2_option_del(opt);
    if (rv != 0) {
        free(cl->authority);
        free(cl);
        vg_err_set(err, -ENOMEM, "nghttp2 client session: %s", nghttp2_strerror(rv));
        return NULL;
    }
    nghttp2_settings_entry settings[] = {
        {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
        {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20},
    };
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, settings, 2);
    nghttp2_session_set_local_window_size(session, NGHTTP2_FLAG_NONE, 0, 8 << 20);
    /* vgrpc_conn_init owns the socket from here, on failure too. */
    if (vgrpc_conn_init(&cl->io, base, vg_steal_fd(&fd), session, client_dead_cb, cl, "client",
                        err) < 0) {
        free(cl->authority);
        free(cl);
        return NULL;
    }
    cl->connected = true;
    vgrpc_conn_flush_later(&cl->io);
    return cl;
}

void vgrpc_client_free(struct vgrpc_client *cl)
{
    if (cl == NULL)
        return;
    while (cl->calls != NULL) {
        struct call *c = cl->calls;
        if (c->id > 0 && cl->io.session != NULL)
            nghttp2_session_set_stream_user_data(cl->io.session, c->id, NULL);
        call_complete(c, VGRPC_STATUS_CANCELLED, "client closed");
    }
    vgrpc_conn_release(&cl->io);
    free(cl->authority);
    free(cl);
}

bool vgrpc_client_usable(const struct vgrpc_client *cl)
{
    return cl->connected && !cl->goaway && !cl->io.dead;
}

static int client_call(struct vgrpc_client *cl, const char *path, const uint8_t *request,
                       size_t request_len, uint64_t timeout_ms, bool streaming,
                       vgrpc_call_message on_message, vgrpc_call_done done, void *arg,
                       struct vg_err *err)
{
    if (done == NULL || (streaming && on_message == NULL))
        return vg_err_set(err, -EINVAL, "call to %s needs its callbacks", path);
    if (path == NULL || path[0] != '/')
        return vg_err_set(err, -EINVAL, "method path must start with '/'");
    if (!vgrpc_client_usable(cl))
        return vg_err_set(err, -ENOTCONN, "connection to the server is gone");
    if (request_len > cl->max_message)
        return vg_err_set(err, -EMSGSIZE, "request of %zu bytes is over the %zu-byte limit",
                          request_len, cl->max_message);
    struct call *c = xcalloc(1, sizeof *c);
    c->client = cl;
    c->done = done;
    c->on_message = on_message;
    c->arg = arg;
    c->streaming = streaming;
    c->out = evbuffer_new();
    if (c->out == NULL)
        abort();
    vgrpc_reader_init(&c->reader, cl->max_message);
    uint8_t prefix[VGRPC_PREFIX_LEN];
    vgrpc_frame_prefix(prefix, request_len);
    evbuffer_add(c->out, prefix, sizeof prefix);
    if (request_len)
        evbuffer_add(c->out, request, request_len);

    char timeout[VGRPC_TIMEOUT_TEXT_MAX + 1];
    nghttp2_nv nv[8];
    size_t n = 0;
    nv[n++] = vgrpc_nv(":method", "POST");
    nv[n++] = vgrpc_nv(":scheme", "http");
    nv[n++] = vgrpc_nv(":path", path);
    if (cl->authority != NULL)
        nv[n++] = vgrpc_nv(":authority", cl->authority);
    nv[n++] = vgrpc_nv("content-type", "application/grpc");
    nv[n++] = vgrpc_nv("te", "trailers");
    nv[n++] = vgrpc_nv("user-agent", "vgpu-grpc/0.1");
    if (timeout_ms > 0) {
        vgrpc_timeout_format(timeout_ms, timeout);
        nv[n++] = vgrpc_nv("grpc-timeout", timeout);
    }
    nghttp2_data_provider provider = {.source.ptr = c, .read_callback = call_read_cb};
    int32_t id = nghttp2_submit_request(cl->io.session, NULL, nv, n, &provider, c);
    if (id < 0) {
        vgrpc_reader_release(&c->reader);
        evbuffer_free(c->out);
        free(c);
        return vg_err_set(err, -EIO, "starting call %s: %s", path, nghttp2_strerror(id));
    }
    c->id = id;
    c->next = cl->calls;
    if (cl->calls)
        cl->calls->prev = c;
    cl->calls = c;
    if (timeout_ms > 0) {
        struct timeval tv = {.tv_sec = (time_t)(timeout_ms / 1000),
                             .tv_usec = (suseconds_t)(timeout_ms % 1000) * 1000};
        c->deadline_ev = event_new(cl->base, -1, 0, call_deadline_cb, c);
        if (c->deadline_ev)
            event_add(c->deadline_ev, &tv);
    }
    vgrpc_conn_flush_later(&cl->io);
    return 0;
}

int vgrpc_client_unary(struct vgrpc_client *cl, const char *path, const uint8_t *request,
                       size_t request_len, uint64_t timeout_ms, vgrpc_call_done done, void *arg,
                       struct vg_err *err)
{
    return client_call(cl, path, request, request_len, timeout_ms, false, NULL, done, arg, err);
}

int vgrpc_client_stream(struct vgrpc_client *cl, const char *path, const uint8_t *request,
                        size_t request_len, uint64_t timeout_ms, vgrpc_call_message on_message,
                        vgrpc_call_done done, void *arg, struct vg_err *err)
{
    return client_call(cl, path, request, request_len, timeout_ms, true, on_message, done, arg,
                       err);
}
