/* Between client.c and watch.c: streaming requests and cancellation. */
#ifndef VGPU_KUBE_INTERNAL_H
#define VGPU_KUBE_INTERNAL_H

#include "kube/kube.h"

struct kube_request;

/* Called from libcurl's write callback with each piece of a streamed body; status is the
 * HTTP status of the response. Non-zero aborts the transfer. Must not cancel its own
 * request or free the client. */
typedef int (*kube_stream_fn)(void *arg, long status, const char *data, size_t len);
/* End of a streamed request: err->code 0 when the server closed the stream cleanly. */
typedef void (*kube_stream_done_fn)(void *arg, long status, const struct vg_err *err);

/* A GET whose body is handed over as it arrives instead of being buffered. timeout_ms 0:
 * no overall timeout. */
struct kube_request *kube_stream_get(struct kube_client *client, const char *path, long timeout_ms,
                                     kube_stream_fn data, kube_stream_done_fn done, void *arg,
                                     struct vg_err *err);

/* A buffered GET like kube_get that returns its handle, so it can be cancelled. */
struct kube_request *kube_get_request(struct kube_client *client, const char *path,
                                      kube_response_fn done, void *arg, struct vg_err *err);

/* Stops a request without calling its callback. Not from inside that request's own
 * stream callback. */
void kube_request_cancel(struct kube_request *request);

struct event_base *kube_client_base(struct kube_client *client);
size_t kube_client_max_line(const struct kube_client *client);

#endif
