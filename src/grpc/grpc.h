/* vgpu's own small gRPC: HTTP/2 (nghttp2) over unix sockets, driven by the caller's
 * libevent loop. It covers what the kubelet device-plugin API needs and nothing more:
 * unary and server-streaming calls, status and message in trailers, grpc-timeout
 * deadlines, a 4 MiB message ceiling both ways, and graceful shutdown. docs/grpc.md says
 * why this exists instead of the gRPC C core, and lists its limits.
 *
 * Threads: none. Every callback runs on the event_base given at creation, and no
 * function here may be called from another thread.
 *
 * Server. grpc_server_new() + grpc_server_add_*() register handlers by full method path
 * ("/v1beta1.DevicePlugin/Allocate"); grpc_server_listen() binds a unix socket. A unary
 * handler runs synchronously with the request bytes and fills a struct grpc_reply. A
 * streaming handler gets a struct grpc_stream: it may keep it, send messages on it at any
 * later time (grpc_stream_send) and end it (grpc_stream_finish); the stream's close
 * callback runs exactly once when the stream is over for any reason (finished, peer
 * reset or vanished, deadline, server freed) and the pointer is dead after it returns.
 * A deferred unary handler gets a struct grpc_call and answers it when it can
 * (grpc_call_reply), at once or from a later callback; if the call ends first (peer reset
 * or vanished, deadline, shutdown, server freed) its gone callback says so once.
 *
 * Client. grpc_client_new() connects to a unix socket; grpc_client_unary() and
 * grpc_client_stream() start calls whose completion callback runs exactly once with
 * the final status. A call's deadline is enforced locally and sent as grpc-timeout.
 *
 * The layer knows nothing of protobuf: requests and responses are serialized bytes.
 * Kubelet's messages live in src/grpc/kubelet/ (generated with protoc-c). */
#ifndef VGPU_GRPC_GRPC_H
#define VGPU_GRPC_GRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "grpc/wire.h"

struct event_base;
struct grpc_server;
struct grpc_stream;
struct grpc_client;
struct grpc_call;

/* What a unary handler hands back. data is malloc'ed by the handler and owned by the
 * server from then on; message is sent percent-encoded in grpc-message. */
struct grpc_reply {
    uint8_t *data;
    size_t len;
    char message[GRPC_STATUS_MESSAGE_MAX];
};

/* Unary handler: returns the call's status; on GRPC_STATUS_OK reply->data/len is the
 * response (len 0 is a valid empty message). */
typedef enum grpc_status_code (*grpc_unary_handler)(void *arg, const uint8_t *request,
                                                    size_t request_len, struct grpc_reply *reply);

/* Streaming handler: returns GRPC_STATUS_OK to keep the stream (and must then call
 * grpc_stream_on_close before returning); any other status ends it at once with
 * message (may be NULL) and the handler must not keep the pointer. */
typedef enum grpc_status_code (*grpc_stream_handler)(void *arg, struct grpc_stream *stream,
                                                     const uint8_t *request, size_t request_len,
                                                     char message[GRPC_STATUS_MESSAGE_MAX]);

/* Why a stream closed: status is what was sent (or CANCELLED when the peer reset or
 * vanished, DEADLINE_EXCEEDED, UNAVAILABLE at shutdown). */
typedef void (*grpc_stream_closed)(void *arg, struct grpc_stream *stream,
                                   enum grpc_status_code status);

struct grpc_server_options {
    size_t max_message;         /* 0: GRPC_MESSAGE_MAX */
    unsigned max_connections;   /* 0: 64 */
    unsigned max_streams;       /* per connection, 0: 100 */
    unsigned shutdown_grace_ms; /* how long shutdown waits for peers, 0: 5000 */
};

/* NULL options: defaults. Returns NULL with err set on failure. Owned by the caller. */
struct grpc_server *grpc_server_new(struct event_base *base,
                                    const struct grpc_server_options *options, struct vg_err *err);
/* Frees everything now: open streams' close callbacks run with UNAVAILABLE,
 * connections are dropped, the socket file is removed. NULL is a no-op. */
void grpc_server_free(struct grpc_server *server);

int grpc_server_add_unary(struct grpc_server *server, const char *path, grpc_unary_handler handler,
                          void *arg, struct vg_err *err);
int grpc_server_add_stream(struct grpc_server *server, const char *path,
                           grpc_stream_handler handler, void *arg, struct vg_err *err);

/* Deferred unary calls: the handler gets the call and the request (valid during the
 * handler only) and must, sooner or later, either reply with grpc_call_reply (inside the
 * handler or from any later callback on the loop) or see the call go: when the peer
 * resets it or vanishes, its deadline passes, the server shuts down or is freed before
 * the reply, the gone callback set with grpc_call_on_gone runs once with the status the
 * peer got (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE). The call pointer is dead after
 * grpc_call_reply or after the gone callback returns; the gone callback does not run
 * after a reply. */
typedef void (*grpc_deferred_handler)(void *arg, struct grpc_call *call, const uint8_t *request,
                                      size_t request_len);
typedef void (*grpc_call_gone)(void *arg, struct grpc_call *call, enum grpc_status_code status);
int grpc_server_add_deferred(struct grpc_server *server, const char *path,
                             grpc_deferred_handler handler, void *arg, struct vg_err *err);
void grpc_call_on_gone(struct grpc_call *call, grpc_call_gone gone, void *arg);
/* Completes the call: with GRPC_STATUS_OK, data/len (copied; len 0 is an empty message)
 * is the response, over the message ceiling it becomes RESOURCE_EXHAUSTED; any other
 * status is sent with message (may be NULL). */
void grpc_call_reply(struct grpc_call *call, enum grpc_status_code status, const uint8_t *data,
                     size_t len, const char *message);
/* Calls waiting for a deferred reply (tests and metrics). */
unsigned grpc_server_deferred_calls(const struct grpc_server *server);

/* Binds and listens on a unix socket. A stale socket file at path is replaced; any
 * other kind of file is an error. */
int grpc_server_listen(struct grpc_server *server, const char *socket_path, struct vg_err *err);

/* Graceful shutdown: stops accepting, sends GOAWAY, ends open streams with UNAVAILABLE
 * ("server shutting down"), lets in-flight frames drain, then closes connections (at the
 * latest after shutdown_grace_ms). done (may be NULL) runs once when no connection is
 * left; the server must still be freed with grpc_server_free. */
void grpc_server_shutdown(struct grpc_server *server, void (*done)(void *arg), void *arg);

/* Number of open connections / open streaming calls (for tests and metrics). */
unsigned grpc_server_connections(const struct grpc_server *server);
unsigned grpc_server_streams(const struct grpc_server *server);

/* Sends one message on a stream. -EPIPE once the stream is finished or closed,
 * -EMSGSIZE past the message ceiling, -ENOBUFS when more than 16 MiB wait to be sent
 * (the peer is not reading). */
int grpc_stream_send(struct grpc_stream *stream, const uint8_t *data, size_t len,
                     struct vg_err *err);
/* Ends a stream with a status (message may be NULL). Later calls are no-ops. The close
 * callback still runs, once the trailers are out. */
void grpc_stream_finish(struct grpc_stream *stream, enum grpc_status_code status,
                        const char *message);
void grpc_stream_on_close(struct grpc_stream *stream, grpc_stream_closed closed, void *arg);
/* The full method path the stream was opened with. */
const char *grpc_stream_path(const struct grpc_stream *stream);

/* Client side. */
struct grpc_client_options {
    /* :authority to send; NULL sends none, "" means "localhost". kubelet's plugin client
     * uses "localhost"; old grpc-go clients send the socket path. */
    const char *authority;
    size_t max_message; /* 0: GRPC_MESSAGE_MAX */
};

/* Completion: runs exactly once per call. message is decoded grpc-message ("" when
 * none); response is the unary reply (NULL for streams and errors). All pointers are
 * valid only during the call. */
typedef void (*grpc_call_done)(void *arg, enum grpc_status_code status, const char *message,
                               const uint8_t *response, size_t response_len);
/* Per streamed message. Return false to cancel the call (done then runs with
 * CANCELLED). */
typedef bool (*grpc_call_message)(void *arg, const uint8_t *message, size_t len);

/* Connects (a unix-socket connect completes or fails at once). NULL options: defaults
 * with authority "localhost". Owned by the caller. */
struct grpc_client *grpc_client_new(struct event_base *base, const char *socket_path,
                                    const struct grpc_client_options *options, struct vg_err *err);
/* Cancels outstanding calls (their done callbacks run with CANCELLED before this
 * returns) and closes the connection. NULL is a no-op. */
void grpc_client_free(struct grpc_client *client);
/* False once the connection is gone or the server sent GOAWAY: new calls fail. */
bool grpc_client_usable(const struct grpc_client *client);

/* Starts a unary call. timeout_ms 0 means no deadline. On a synchronous failure returns
 * a negative code and done is NOT called. */
int grpc_client_unary(struct grpc_client *client, const char *path, const uint8_t *request,
                      size_t request_len, uint64_t timeout_ms, grpc_call_done done, void *arg,
                      struct vg_err *err);
/* Starts a server-streaming call: on_message for each message, then done once. */
int grpc_client_stream(struct grpc_client *client, const char *path, const uint8_t *request,
                       size_t request_len, uint64_t timeout_ms, grpc_call_message on_message,
                       grpc_call_done done, void *arg, struct vg_err *err);

#endif
