/* C server and C client of src/grpc/ in one process on one event loop, over a unix
 * socket in a temporary folder: calls, streams, deadlines, vanishing peers, graceful
 * shutdown, and the errors the API returns for bad use. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <nghttp2/nghttp2.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/parse.h"
#include "base/str.h"
#include "grpc/grpc.h"

struct fixture {
    char dir[64];
    char sock[96];
    struct event_base *base;
    struct vgrpc_server *server;
    struct vgrpc_client *client;
    struct vgrpc_stream *stream; /* the open server stream, if any */
    int closed_calls;
    enum vgrpc_status_code closed_status;
    bool shutdown_done;
    /* client side */
    int done_calls;
    enum vgrpc_status_code status;
    char message[VGRPC_STATUS_MESSAGE_MAX];
    size_t response_len;
    uint8_t response[16];
    int messages;
    int stop_after_messages;
    /* deferred calls */
    struct vgrpc_call *call; /* the waiting call, if any */
    int gone_calls;
    enum vgrpc_status_code gone_status;
};

static enum vgrpc_status_code echo(void *arg, const uint8_t *req, size_t len,
                                   struct vgrpc_reply *reply)
{
    (void)arg;
    if (len == 4 && memcmp(req, "fail", 4) == 0) {
        vg_strlcpy(reply->message, "asked to fail: 100%", sizeof reply->message);
        return VGRPC_STATUS_FAILED_PRECONDITION;
    }
    reply->data = malloc(len ? len : 1);
    memcpy(reply->data, req, len);
    reply->len = len;
    return VGRPC_STATUS_OK;
}

static void stream_closed(void *arg, struct vgrpc_stream *st, enum vgrpc_status_code status)
{
    struct fixture *f = arg;
    assert_ptr_equal(st, f->stream);
    f->stream = NULL;
    f->closed_calls++;
    f->closed_status = status;
}

/* Sends as many messages as the request's first byte says, then finishes when that is
 * non-zero; with 0 it keeps the stream open and silent. */
static enum vgrpc_status_code counter(void *arg, struct vgrpc_stream *st, const uint8_t *req,
                                      size_t len, char message[VGRPC_STATUS_MESSAGE_MAX])
{
    struct fixture *f = arg;
    if (len != 1) {
        vg_strlcpy(message, "want one byte", VGRPC_STATUS_MESSAGE_MAX);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    f->stream = st;
    vgrpc_stream_on_close(st, stream_closed, f);
    for (uint8_t i = 0; i < req[0]; i++)
        assert_int_equal(vgrpc_stream_send(st, &i, 1, NULL), 0);
    if (req[0] > 0)
        vgrpc_stream_finish(st, VGRPC_STATUS_OK, NULL);
    return VGRPC_STATUS_OK;
}

static void call_gone(void *arg, struct vgrpc_call *call, enum vgrpc_status_code status)
{
    struct fixture *f = arg;
    assert_ptr_equal(call, f->call);
    f->call = NULL;
    f->gone_calls++;
    f->gone_status = status;
}

/* Deferred: "now" is answered inside the handler, "no" refused inside it; anything else
 * waits in f->call for the test to answer (or for the call to go). */
static void later(void *arg, struct vgrpc_call *call, const uint8_t *req, size_t len)
{
    struct fixture *f = arg;
    if (len == 3 && memcmp(req, "now", 3) == 0) {
        vgrpc_call_reply(call, VGRPC_STATUS_OK, req, len, NULL);
        return;
    }
    if (len == 2 && memcmp(req, "no", 2) == 0) {
        vgrpc_call_reply(call, VGRPC_STATUS_NOT_FOUND, NULL, 0, "not here");
        return;
    }
    f->call = call;
    vgrpc_call_on_gone(call, call_gone, f);
}

static void call_done(void *arg, enum vgrpc_status_code status, const char *message,
                      const uint8_t *response, size_t len)
{
    struct fixture *f = arg;
    f->done_calls++;
    f->status = status;
    vg_strlcpy(f->message, message, sizeof f->message);
    f->response_len = len;
    if (response != NULL && len <= sizeof f->response)
        memcpy(f->response, response, len);
}

static bool call_message(void *arg, const uint8_t *msg, size_t len)
{
    struct fixture *f = arg;
    assert_int_equal(len, 1);
    assert_int_equal(msg[0], f->messages);
    f->messages++;
    return f->stop_after_messages == 0 || f->messages < f->stop_after_messages;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof *f);
    vg_strlcpy(f->dir, "/tmp/vgpu-grpc-XXXXXX", sizeof f->dir);
    assert_non_null(mkdtemp(f->dir));
    vg_snprintf(f->sock, sizeof f->sock, "%s/plugin.sock", f->dir);
    f->base = event_base_new();
    struct vg_err err = {0};
    struct vgrpc_server_options opt = {.shutdown_grace_ms = 1000};
    f->server = vgrpc_server_new(f->base, &opt, &err);
    assert_non_null(f->server);
    assert_int_equal(vgrpc_server_add_unary(f->server, "/t.T/Echo", echo, f, &err), 0);
    assert_int_equal(vgrpc_server_add_stream(f->server, "/t.T/Count", counter, f, &err), 0);
    assert_int_equal(vgrpc_server_add_deferred(f->server, "/t.T/Later", later, f, &err), 0);
    assert_int_equal(vgrpc_server_listen(f->server, f->sock, &err), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    vgrpc_client_free(f->client);
    vgrpc_server_free(f->server);
    event_base_free(f->base);
    rmdir(f->dir);
    free(f);
    return 0;
}

static void client_connect(struct fixture *f, const char *authority)
{
    struct vg_err err = {0};
    struct vgrpc_client_options opt = {.authority = authority};
    f->client = vgrpc_client_new(f->base, f->sock, &opt, &err);
    assert_non_null(f->client);
}

/* Runs the loop until cond(f) holds; fails after 5 s. */
static void run_until(struct fixture *f, bool (*cond)(const struct fixture *f))
{
    for (int i = 0; i < 500 && !cond(f); i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
    }
    assert_true(cond(f));
}

static bool one_done(const struct fixture *f)
{
    return f->done_calls >= 1;
}

static bool stream_open(const struct fixture *f)
{
    return f->stream != NULL;
}

static bool stream_closed_once(const struct fixture *f)
{
    return f->closed_calls >= 1;
}

static void test_unary_ok_error_unknown_without_authority(void **state)
{
    struct fixture *f = *state;
    struct vg_err err = {0};
    client_connect(f, NULL); /* no :authority at all, as some grpc-go clients */
    assert_int_equal(vgrpc_client_unary(f->client, "/t.T/Echo", (const uint8_t *)"hi", 2, 5000,
                                        call_done, f, &err),
                     0);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
    assert_int_equal(f->response_len, 2);
    assert_memory_equal(f->response, "hi", 2);

    f->done_calls = 0;
    vgrpc_client_unary(f->client, "/t.T/Echo", (const uint8_t *)"fail", 4, 0, call_done, f, &err);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_FAILED_PRECONDITION);
    assert_string_equal(f->message, "asked to fail: 100%");

    f->done_calls = 0;
    vgrpc_client_unary(f->client, "/t.T/Nope", NULL, 0, 0, call_done, f, &err);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_UNIMPLEMENTED);
    assert_string_equal(f->message, "unknown method /t.T/Nope");

    f->done_calls = 0; /* zero-length request and response */
    vgrpc_client_unary(f->client, "/t.T/Echo", NULL, 0, 0, call_done, f, &err);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
    assert_int_equal(f->response_len, 0);
    assert_int_equal(vgrpc_server_connections(f->server), 1);
}

static void test_stream_messages_then_ok(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    uint8_t n = 3;
    assert_int_equal(
        vgrpc_client_stream(f->client, "/t.T/Count", &n, 1, 0, call_message, call_done, f, NULL),
        0);
    run_until(f, one_done);
    assert_int_equal(f->messages, 3);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
    run_until(f, stream_closed_once);
    assert_int_equal(f->closed_status, VGRPC_STATUS_OK);
    assert_int_equal(vgrpc_server_streams(f->server), 0);

    /* A handler's refusal arrives as the call's status. */
    f->done_calls = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", NULL, 0, 0, call_message, call_done, f, NULL);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_INVALID_ARGUMENT);
    assert_string_equal(f->message, "want one byte");
}

static void test_client_cancel_and_vanish_free_the_server_stream(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    uint8_t silent = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 0, call_message, call_done, f, NULL);
    run_until(f, stream_open);
    assert_int_equal(vgrpc_server_streams(f->server), 1);
    /* Later messages reach the client; the client stops after the second. */
    f->stop_after_messages = 2;
    for (uint8_t i = 0; i < 2; i++)
        assert_int_equal(vgrpc_stream_send(f->stream, &i, 1, NULL), 0);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_CANCELLED);
    run_until(f, stream_closed_once);
    assert_int_equal(f->closed_status, VGRPC_STATUS_CANCELLED);
    assert_int_equal(vgrpc_server_streams(f->server), 0);

    /* Now the client process "vanishes": its connection just closes. */
    f->closed_calls = 0;
    f->done_calls = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 0, call_message, call_done, f, NULL);
    run_until(f, stream_open);
    vgrpc_client_free(f->client);
    f->client = NULL;
    assert_int_equal(f->done_calls, 1); /* completed inside free */
    assert_int_equal(f->status, VGRPC_STATUS_CANCELLED);
    run_until(f, stream_closed_once);
    assert_int_equal(f->closed_status, VGRPC_STATUS_CANCELLED);
    assert_int_equal(vgrpc_server_streams(f->server), 0);
}

static void test_deadline_ends_silent_stream(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    uint8_t silent = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 150, call_message, call_done, f, NULL);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_DEADLINE_EXCEEDED);
    run_until(f, stream_closed_once);
    /* Whichever timer ran first: the server's sends DEADLINE_EXCEEDED, the client's
     * resets the stream. */
    assert_true(f->closed_status == VGRPC_STATUS_DEADLINE_EXCEEDED ||
                f->closed_status == VGRPC_STATUS_CANCELLED);
}

static bool shutdown_complete(const struct fixture *f)
{
    return f->shutdown_done && f->done_calls >= 1;
}

static void on_shutdown(void *arg)
{
    ((struct fixture *)arg)->shutdown_done = true;
}

static void test_graceful_shutdown(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    uint8_t silent = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 0, call_message, call_done, f, NULL);
    run_until(f, stream_open);
    vgrpc_server_shutdown(f->server, on_shutdown, f);
    assert_int_equal(access(f->sock, F_OK), -1); /* no new connections */
    run_until(f, shutdown_complete);
    assert_int_equal(f->status, VGRPC_STATUS_UNAVAILABLE);
    assert_string_equal(f->message, "server shutting down");
    assert_int_equal(f->closed_status, VGRPC_STATUS_UNAVAILABLE);
    assert_int_equal(vgrpc_server_connections(f->server), 0);
    assert_false(vgrpc_client_usable(f->client));
    assert_int_equal(vgrpc_client_unary(f->client, "/t.T/Echo", NULL, 0, 0, call_done, f, NULL),
                     -ENOTCONN);
}

static void test_server_freed_under_a_call(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    uint8_t silent = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 0, call_message, call_done, f, NULL);
    run_until(f, stream_open);
    vgrpc_server_free(f->server);
    f->server = NULL;
    assert_int_equal(f->closed_calls, 1);
    assert_int_equal(f->closed_status, VGRPC_STATUS_UNAVAILABLE);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_UNAVAILABLE);
}

static void test_stream_send_errors(void **state)
{
    struct fixture *f = *state;
    struct vg_err err = {0};
    client_connect(f, "localhost");
    uint8_t silent = 0;
    vgrpc_client_stream(f->client, "/t.T/Count", &silent, 1, 0, call_message, call_done, f, NULL);
    run_until(f, stream_open);
    uint8_t *big = calloc(1, VGRPC_MESSAGE_MAX + 1);
    assert_int_equal(vgrpc_stream_send(f->stream, big, VGRPC_MESSAGE_MAX + 1, &err), -EMSGSIZE);
    assert_non_null(strstr(err.msg, "4194305"));
    struct vgrpc_stream *st = f->stream;
    vgrpc_stream_finish(st, VGRPC_STATUS_ABORTED, "done here");
    assert_int_equal(vgrpc_stream_send(st, big, 1, &err), -EPIPE);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_ABORTED);
    assert_string_equal(f->message, "done here");
    free(big);
    /* The client refuses to send over the ceiling. */
    big = calloc(1, VGRPC_MESSAGE_MAX + 1);
    assert_int_equal(vgrpc_client_unary(f->client, "/t.T/Echo", big, VGRPC_MESSAGE_MAX + 1, 0,
                                        call_done, f, &err),
                     -EMSGSIZE);
    free(big);
}

static bool call_waiting(const struct fixture *f)
{
    return f->call != NULL;
}

static bool call_gone_once(const struct fixture *f)
{
    return f->gone_calls >= 1;
}

static void later_call(struct fixture *f, const char *req, uint64_t timeout_ms)
{
    f->done_calls = 0;
    assert_int_equal(vgrpc_client_unary(f->client, "/t.T/Later", (const uint8_t *)req, strlen(req),
                                        timeout_ms, call_done, f, NULL),
                     0);
}

static void test_deferred_replies(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    later_call(f, "now", 5000);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
    assert_int_equal(f->response_len, 3);
    assert_memory_equal(f->response, "now", 3);
    later_call(f, "no", 5000);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_NOT_FOUND);
    assert_string_equal(f->message, "not here");

    /* Two calls wait at once; the second is answered first, each gets its own reply. */
    later_call(f, "first", 5000);
    run_until(f, call_waiting);
    struct vgrpc_call *first = f->call;
    f->call = NULL;
    later_call(f, "second", 5000);
    run_until(f, call_waiting);
    assert_int_equal(vgrpc_server_deferred_calls(f->server), 2);
    vgrpc_call_reply(f->call, VGRPC_STATUS_OK, (const uint8_t *)"two", 3, NULL);
    f->call = NULL;
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
    assert_memory_equal(f->response, "two", 3);
    f->done_calls = 0;
    vgrpc_call_reply(first, VGRPC_STATUS_FAILED_PRECONDITION, NULL, 0, "later: 100%");
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_FAILED_PRECONDITION);
    assert_string_equal(f->message, "later: 100%");
    assert_int_equal(vgrpc_server_deferred_calls(f->server), 0);
    assert_int_equal(f->gone_calls, 0); /* answered calls never "go" */

    /* An answer over the ceiling becomes RESOURCE_EXHAUSTED. */
    later_call(f, "big", 5000);
    run_until(f, call_waiting);
    uint8_t *big = calloc(1, VGRPC_MESSAGE_MAX + 1);
    vgrpc_call_reply(f->call, VGRPC_STATUS_OK, big, VGRPC_MESSAGE_MAX + 1, NULL);
    f->call = NULL;
    free(big);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_RESOURCE_EXHAUSTED);
    /* The connection still serves. */
    later_call(f, "now", 5000);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_OK);
}

static void test_deferred_calls_that_go(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    /* Deadline: the client sees DEADLINE_EXCEEDED, the handler hears the call went. */
    later_call(f, "slow", 150);
    run_until(f, call_waiting);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_DEADLINE_EXCEEDED);
    run_until(f, call_gone_once);
    assert_true(f->gone_status == VGRPC_STATUS_DEADLINE_EXCEEDED ||
                f->gone_status == VGRPC_STATUS_CANCELLED);
    assert_int_equal(vgrpc_server_deferred_calls(f->server), 0);

    /* The peer vanishes while the call waits. */
    f->gone_calls = 0;
    later_call(f, "slow", 0);
    run_until(f, call_waiting);
    vgrpc_client_free(f->client);
    f->client = NULL;
    assert_int_equal(f->status, VGRPC_STATUS_CANCELLED);
    run_until(f, call_gone_once);
    assert_int_equal(f->gone_status, VGRPC_STATUS_CANCELLED);
    assert_int_equal(vgrpc_server_deferred_calls(f->server), 0);

    /* Graceful shutdown ends a waiting call with UNAVAILABLE. */
    client_connect(f, "localhost");
    f->gone_calls = 0;
    later_call(f, "slow", 0);
    run_until(f, call_waiting);
    vgrpc_server_shutdown(f->server, on_shutdown, f);
    assert_int_equal(f->gone_calls, 1);
    assert_int_equal(f->gone_status, VGRPC_STATUS_UNAVAILABLE);
    run_until(f, shutdown_complete);
    assert_int_equal(f->status, VGRPC_STATUS_UNAVAILABLE);
}

static void test_deferred_call_under_a_freed_server(void **state)
{
    struct fixture *f = *state;
    client_connect(f, "localhost");
    later_call(f, "slow", 0);
    run_until(f, call_waiting);
    vgrpc_server_free(f->server);
    f->server = NULL;
    assert_int_equal(f->gone_calls, 1);
    assert_int_equal(f->gone_status, VGRPC_STATUS_UNAVAILABLE);
    run_until(f, one_done);
    assert_int_equal(f->status, VGRPC_STATUS_UNAVAILABLE);
}

static void test_setup_errors(void **state)
{
    struct fixture *f = *state;
    struct vg_err err = {0};
    assert_int_equal(vgrpc_server_add_unary(f->server, "/t.T/Echo", echo, f, &err), -EEXIST);
    assert_int_equal(vgrpc_server_add_unary(f->server, "noslash", echo, f, &err), -EINVAL);
    assert_int_equal(vgrpc_server_add_unary(f->server, "/t.T/X", NULL, f, &err), -EINVAL);
    assert_int_equal(vgrpc_server_add_deferred(f->server, "/t.T/Y", NULL, f, &err), -EINVAL);
    assert_int_equal(vgrpc_server_add_deferred(f->server, "/t.T/Echo", later, f, &err), -EEXIST);
    assert_int_equal(vgrpc_server_listen(f->server, f->sock, &err), -EALREADY);

    struct vgrpc_server *s2 = vgrpc_server_new(f->base, NULL, &err);
    char path[200];
    memset(path, 'a', sizeof path - 1);
    path[sizeof path - 1] = '\0';
    assert_int_equal(vgrpc_server_listen(s2, path, &err), -ENAMETOOLONG);
    char file[128];
    vg_snprintf(file, sizeof file, "%s/regular", f->dir);
    int fd = open(file, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(vgrpc_server_listen(s2, file, &err), -EEXIST);
    assert_non_null(strstr(err.msg, "not a socket"));
    unlink(file);
    vgrpc_server_free(s2);

    char missing[128];
    vg_snprintf(missing, sizeof missing, "%s/missing.sock", f->dir);
    assert_null(vgrpc_client_new(f->base, missing, NULL, &err));
    assert_int_equal(err.code, -ENOENT);
    assert_non_null(strstr(err.msg, "missing.sock"));
    assert_null(vgrpc_server_new(NULL, NULL, &err));
}

/* --- a raw HTTP/2 client (nghttp2 directly) for requests our own client never sends --- */

struct raw {
    int fd;
    nghttp2_session *session;
    int http_status;
    int vgrpc_status; /* -1 until seen */
    bool closed;
};

static int raw_on_header(nghttp2_session *session, const nghttp2_frame *frame, const uint8_t *name,
                         size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                         void *user)
{
    (void)session;
    (void)frame;
    (void)flags;
    struct raw *r = user;
    char v[16] = "";
    uint64_t number = 0;
    if (valuelen < sizeof v)
        memcpy(v, value, valuelen);
    bool parsed = vg_parse_u64(v, 0, 999, &number, NULL) == 0;
    if (namelen == 7 && memcmp(name, ":status", 7) == 0)
        r->http_status = parsed ? (int)number : -2;
    if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
        r->vgrpc_status = parsed ? (int)number : -2;
    return 0;
}

static int raw_on_close(nghttp2_session *session, int32_t id, uint32_t code, void *user)
{
    (void)session;
    (void)id;
    (void)code;
    ((struct raw *)user)->closed = true;
    return 0;
}

static ssize_t raw_body(nghttp2_session *session, int32_t id, uint8_t *buf, size_t length,
                        uint32_t *flags, nghttp2_data_source *source, void *user)
{
    (void)session;
    (void)id;
    (void)user;
    const uint8_t *body = source->ptr;
    size_t n = body[0]; /* first byte: length of what follows */
    assert_true(n <= length);
    memcpy(buf, body + 1, n);
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    return (ssize_t)n;
}

/* Sends one request with the given headers and body (body[0] = length, NULL = none) and
 * runs the loop until the stream closes. */
static void raw_request(struct fixture *f, struct raw *r, const nghttp2_nv *nv, size_t n,
                        const uint8_t *body)
{
    nghttp2_session_callbacks *cb;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_header_callback(cb, raw_on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, raw_on_close);
    memset(r, 0, sizeof *r);
    r->vgrpc_status = -1;
    nghttp2_session_client_new(&r->session, cb, r);
    nghttp2_session_callbacks_del(cb);
    r->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    vg_strlcpy(sa.sun_path, f->sock, sizeof sa.sun_path);
    assert_int_equal(connect(r->fd, (struct sockaddr *)&sa, sizeof sa), 0);
    nghttp2_submit_settings(r->session, NGHTTP2_FLAG_NONE, NULL, 0);
    nghttp2_data_provider provider = {.source.ptr = (void *)(uintptr_t)body,
                                      .read_callback = raw_body};
    assert_true(nghttp2_submit_request(r->session, NULL, nv, n, body ? &provider : NULL, NULL) > 0);
    for (int i = 0; i < 500 && !r->closed; i++) {
        const uint8_t *out;
        ssize_t len;
        while ((len = nghttp2_session_mem_send(r->session, &out)) > 0)
            assert_int_equal(write(r->fd, out, (size_t)len), len);
        struct timeval tv = {0, 10000};
        event_base_loopexit(f->base, &tv);
        event_base_dispatch(f->base);
        uint8_t in[4096];
        ssize_t got;
        while ((got = read(r->fd, in, sizeof in)) > 0)
            assert_true(nghttp2_session_mem_recv(r->session, in, (size_t)got) >= 0);
    }
    assert_true(r->closed);
    nghttp2_session_del(r->session);
    close(r->fd);
}

#define NV(n, v)                                                                                   \
    {                                                                                              \
        (uint8_t *)(uintptr_t)(n), (uint8_t *)(uintptr_t)(v), sizeof(n) - 1, sizeof(v) - 1,        \
            NGHTTP2_NV_FLAG_NONE                                                                   \
    }

static void test_bad_requests_get_clear_statuses(void **state)
{
    struct fixture *f = *state;
    struct raw r;
    const uint8_t one_msg[] = {6, 0, 0, 0, 0, 1, 'x'};

    const nghttp2_nv get[] = {NV(":method", "GET"), NV(":scheme", "http"), NV(":path", "/t.T/Echo"),
                              NV("content-type", "application/grpc")};
    raw_request(f, &r, get, 4, NULL);
    assert_int_equal(r.http_status, 405);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_INTERNAL);

    const nghttp2_nv json[] = {NV(":method", "POST"), NV(":scheme", "http"),
                               NV(":path", "/t.T/Echo"), NV("content-type", "application/json")};
    raw_request(f, &r, json, 4, one_msg);
    assert_int_equal(r.http_status, 415);

    const nghttp2_nv no_path[] = {NV(":method", "POST"), NV(":scheme", "http"),
                                  NV("content-type", "application/grpc")};
    raw_request(f, &r, no_path, 3, one_msg);
    assert_int_equal(r.http_status, 200);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_UNIMPLEMENTED);

    const nghttp2_nv bad_timeout[] = {
        NV(":method", "POST"), NV(":scheme", "http"), NV(":path", "/t.T/Echo"),
        NV("content-type", "application/grpc+proto"), NV("grpc-timeout", "soon")};
    raw_request(f, &r, bad_timeout, 5, one_msg);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_INTERNAL);

    const nghttp2_nv ok[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":path", "/t.T/Echo"),
                             NV("content-type", "application/grpc"), NV("grpc-timeout", "5S")};
    raw_request(f, &r, ok, 5, one_msg); /* the control: this one works */
    assert_int_equal(r.http_status, 200);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_OK);

    raw_request(f, &r, ok, 4, NULL); /* no request message */
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_INTERNAL);
    const uint8_t two[] = {12, 0, 0, 0, 0, 1, 'x', 0, 0, 0, 0, 1, 'y'};
    raw_request(f, &r, ok, 4, two);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_INTERNAL);
    const uint8_t compressed[] = {6, 1, 0, 0, 0, 1, 'x'};
    raw_request(f, &r, ok, 4, compressed);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_UNIMPLEMENTED);
    const uint8_t cut[] = {4, 0, 0, 0, 9};
    raw_request(f, &r, ok, 4, cut);
    assert_int_equal(r.vgrpc_status, VGRPC_STATUS_INTERNAL);
    assert_int_equal(vgrpc_server_streams(f->server), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unary_ok_error_unknown_without_authority, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_stream_messages_then_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_cancel_and_vanish_free_the_server_stream, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_deadline_ends_silent_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_graceful_shutdown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_freed_under_a_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stream_send_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_replies, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_calls_that_go, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deferred_call_under_a_freed_server, setup, teardown),
        cmocka_unit_test_setup_teardown(test_setup_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_requests_get_clear_statuses, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
