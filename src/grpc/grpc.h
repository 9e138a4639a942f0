/* vgpu's own small gRPC: HTTP/2 (nghttp2) over unix sockets, driven by the caller's
 * libevent loop. It covers what the kubelet device-plugin API needs and nothing more:
 * unary and server-streaming calls, status and message in trailers, grpc-timeout
 * deadlines, a 4 MiB message ceiling both ways, and graceful shutdown. docs/grpc.md says
 * why this exists instead of the gRPC C core, and lists its limits.
 *
 * Threads: none. Every callback runs on the event_base given at creation, and no
 * function here may be called from another thread.
 *
 * Server. vgrpc_server_new() + vgrpc_server_add_*() register handlers by full method path
 * ("/v1beta1.DevicePlugin/Allocate"); vgrpc_server_listen() binds a unix socket. A unary
 * handler runs synchronously with the request bytes and fills a struct vgrpc_reply. A
 * streaming handler gets a struct vgrpc_stream: it may keep it, send messages on it at any
 * later time (vgrpc_stream_send) and end it (vgrpc_stream_finish); the stream's close
 * callback runs exactly once when the stream is over for any reason (finished, peer
 * reset or vanished, deadline, server freed) and the pointer is dead after it returns.
 * A deferred unary handler gets a struct vgrpc_call and answers it when it can
 * (vgrpc_call_reply), at once or from a later callback; if the call ends first (peer reset
 * or vanished, deadline, shutdown, server freed) its gone callback says so once.
 *
 * Client. vgrpc_client_new() connects to a unix socket; vgrpc_client_unary() and
 * vgrpc_client_stream() start calls whose completion callback runs exactly once with
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
struct vgrpc_server;
struct vgrpc_stream;
struct vgrpc_client;
struct vgrpc_call;

/* What a unary handler hands back. data is malloc'ed by the handler and owned by the
 * server from then on; message is sent percent-encoded in grpc-message. */
struct vgrpc_reply {
    uint8_t *data;
    size_t len;
    char message[VGRPC_STATUS_MESSAGE_MAX];
};

/* Unary handler: returns the call's status; on VGRPC_STATUS_OK reply->data/len is the
 * response (len 0 is a valid empty message). */
typedef enum vgrpc_status_code (*vgrpc_unary_handler)(void *arg, const uint8_t *request,
                                                      size_t request_len,
                                                      struct vgrpc_reply *reply);

/* Streaming handler: returns VGRPC_STATUS_OK to keep the stream (and must then call
 * vgrpc_stream_on_close before returning); any other status ends it at once with
 * message (may be NULL) and the handler must not keep the pointer. */
typedef enum vgrpc_status_code (*vgrpc_stream_handler)(void *arg, struct vgrpc_stream *stream,
                                                       const uint8_t *request, size_t request_len,
                                                       char message[VGRPC_STATUS_MESSAGE_MAX]);

/* Why a stream closed: status is what was sent (or CANCELLED when the peer reset or
 * vanished, DEADLINE_EXCEEDED, UNAVAILABLE at shutdown). */
typedef void (*vgrpc_stream_closed)(void *arg, struct vgrpc_stream *stream,
                                    enum vgrpc_status_code status);

struct vgrpc_server_options {
    size_t max_message;         /* 0: VGRPC_MESSAGE_MAX */
    unsigned max_connections;   /* 0: 64 */
    unsigned max_streams;       /* per connection, 0: 100 */
    unsigned shutdown_grace_ms; /* how long shutdown waits for peers, 0: 5000 */
};

/* NULL options: defaults. Returns NULL with err set on failure. Owned by the caller. */
struct vgrpc_server *vgrpc_server_new(struct event_base *base,
                                      const struct vgrpc_server_options *options,
                                      struct vg_err *err);
/* Frees everything now: open streams' close callbacks run with UNAVAILABLE,
 * connections are dropped, the socket file is removed. NULL is a no-op. */
void vgrpc_server_free(struct vgrpc_server *server);

int vgrpc_server_add_unary(struct vgrpc_server *server, const char *path,
                           vgrpc_unary_handler handler, void *arg, struct vg_err *err);
int vgrpc_server_add_stream(struct vgrpc_server *server, const char *path,
                            vgrpc_stream_handler handler, void *arg, struct vg_err *err);

/* Deferred unary calls: the handler gets the call and the request (valid during the
 * handler only) and must, sooner or later, either reply with vgrpc_call_reply (inside the
 * handler or from any later callback on the loop) or see the call go: when the peer
 * resets it or vanishes, its deadline passes, the server shuts down or is freed before
 * the reply, the gone callback set with vgrpc_call_on_gone runs once with the status the
 * peer got (CANCELLED, DEADLINE_EXCEEDED, UNAVAILABLE). The call pointer is dead after
 * vgrpc_call_reply or after the gone callback returns; the gone callback does not run
 * after a reply. */
typedef void (*vgrpc_deferred_handler)(void *arg, struct vgrpc_call *call, const uint8_t *request,
                                       size_t request_len);
typedef void (*vgrpc_call_gone)(void *arg, struct vgrpc_call *call, enum vgrpc_status_code status);
int vgrpc_server_add_deferred(struct vgrpc_server *server, const char *path,
                              vgrpc_deferred_handler handler, void *arg, struct vg_err *err);
void vgrpc_call_on_gone(struct vgrpc_call *call, vgrpc_call_gone gone, void *arg);
/* Completes the call: with VGRPC_STATUS_OK, data/len (copied; len 0 is an empty message)
 * is the response, over the message ceiling it becomes RESOURCE_EXHAUSTED; any other
 * status is sent with message (may be NULL). */
void vgrpc_call_reply(struct vgrpc_call *call, enum vgrpc_status_code status, const uint8_t *data,
                      size_t len, const char *message);
/* Calls waiting for a deferred reply (tests and metrics). */
unsigned vgrpc_server_deferred_calls(const struct vgrpc_server *server);

/* Binds and listens on a unix socket. A stale socket file at path is replaced; any
 * other kind of file is an error. */
int vgrpc_server_listen(struct vgrpc_server *server, const char *socket_path, struct vg_err *err);

/* Graceful shutdown: stops accepting, sends GOAWAY, ends open streams with UNAVAILABLE
 * ("server shutting down"), lets in-flight frames drain, then closes connections (at the
 * latest after shutdown_grace_ms). done (may be NULL) runs once when no connection is
 * left; the server must still be freed with vgrpc_server_free. */
void vgrpc_server_shutdown(struct vgrpc_server *server, void (*done)(void *arg), void *arg);

/* Number of open connections / open streaming calls (for tests and metrics). */
unsigned vgrpc_server_connections(const struct vgrpc_server *server);
unsigned vgrpc_server_streams(const struct vgrpc_server *server);

/* Sends one message on a stream. -EPIPE once the stream is finished or closed,
 * -EMSGSIZE past the message ceiling, -ENOBUFS when more than 16 MiB wait to be sent
 * (the peer is not reading). */
int vgrpc_stream_send(struct vgrpc_stream *stream, const uint8_t *data, size_t len,
                      struct vg_err *err);
/* Ends a stream with a status (message may be NULL). Later calls are no-ops. The close
 * callback still runs, once the trailers are out. */
void vgrpc_stream_finish(struct vgrpc_stream *stream, enum vgrpc_status_code status,
                         const char *message);
void vgrpc_stream_on_close(struct vgrpc_stream *stream, vgrpc_stream_closed closed, void *arg);
/* The full method path the stream was opened with. */
const char *vgrpc_stream_path(const struct vgrpc_stream *stream);

/* Client side. */
struct vgrpc_client_options {
    /* :authority to send; NULL sends none, "" means "localhost". kubelet's plugin client
     * uses "localhost"; old grpc-go clients send the socket path. */
    const char *authority;
    size_t max_message; /* 0: VGRPC_MESSAGE_MAX */
};

/* Completion: runs exactly once per call. message is decoded grpc-message ("" when
 * none); response is the unary reply (NULL for streams and errors). All pointers are
 * valid only during the call. */
typedef void (*vgrpc_call_done)(void *arg, enum vgrpc_status_code status, const char *message,
                                const uint8_t *response, size_t response_len);
/* Per streamed message. Return false to cancel the call (done then runs with
 * CANCELLED). */
typedef bool (*vgrpc_call_message)(void *arg, const uint8_t *message, size_t len);

/* Connects (a unix-socket connect completes or fails at once). NULL options: defaults
 * with authority "localhost". Owned by the caller. */
struct vgrpc_client *vgrpc_client_new(struct event_base *base, const char *socket_path,
                                      const struct vgrpc_client_options *options,
                                      struct vg_err *err);
/* Cancels outstanding calls (their done callbacks run with CANCELLED before this
 * returns) and closes the connection. NULL is a no-op. */
void vgrpc_client_free(struct vgrpc_client *client);
/* False once the connection is gone or the server sent GOAWAY: new calls fail. */
bool vgrpc_client_usable(const struct vgrpc_client *client);

/* Starts a unary call. timeout_ms 0 means no deadline. On a synchronous failure returns
 * a negative code and done is NOT called. */
int vgrpc_client_unary(struct vgrpc_client *client, const char *path, const uint8_t *request,
                       size_t request_len, uint64_t timeout_ms, vgrpc_call_done done, void *arg,
                       struct vg_err *err);
/* Starts a server-streaming call: on_message for each message, then done once. */
int vgrpc_client_stream(struct vgrpc_client *client, const char *path, const uint8_t *request,
                        size_t request_len, uint64_t timeout_ms, vgrpc_call_message on_message,
                        vgrpc_call_done done, void *arg, struct vg_err *err);

#endif
