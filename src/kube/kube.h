/* Kubernetes API client for vgpu's daemons and tools (vgpu-scheduler, vgpu-device-plugin,
 * vgpu-dra-plugin, vgpu-monitor, the vgpu CLI and vgpu-kubectl-lite).
 *
 * Three layers, each usable alone:
 *  - credentials (struct kube_config): a kubeconfig file or in-cluster service-account
 *    files, loaded once at start-up;
 *  - requests (struct kube_client): GET/POST/PUT/PATCH/DELETE on a caller-supplied libevent
 *    event_base through libcurl's multi interface; the loop never blocks; each request
 *    ends in one callback with the HTTP status and the parsed JSON body;
 *  - watches (struct kube_watch): list + watch of one collection, informer-style, with
 *    resourceVersion tracking, bookmarks, relist on 410 and reconnect with backoff.
 *
 * Ownership: every x_new/x_load has an x_free (NULL is a no-op). JSON handed to a
 * callback is borrowed for the duration of the call (json_incref it to keep it).
 * docs/kube.md describes the design and the limits. */
#ifndef VGPU_KUBE_KUBE_H
#define VGPU_KUBE_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

#include "base/buf.h"
#include "base/err.h"

struct event_base;

/* ---- credentials ---------------------------------------------------------------- */

struct kube_config {
    char *server;           /* "https://host:port" or "http://..." without trailing '/' */
    char *token;            /* bearer token, or NULL */
    char *token_file;       /* re-read every minute (projected tokens rotate), or NULL */
    char *ca_file;          /* PEM file, or NULL */
    char *ca_data;          /* PEM bytes (decoded certificate-authority-data), or NULL */
    size_t ca_data_len;     /* */
    char *client_cert_file; /* PEM file, or NULL */
    char *client_cert_data; /* PEM bytes, or NULL */
    size_t client_cert_data_len;
    char *client_key_file; /* PEM file, or NULL */
    char *client_key_data; /* PEM bytes, or NULL */
    size_t client_key_data_len;
    bool insecure_skip_tls_verify;
    char *namespace; /* the context's (or service account's) namespace, or NULL */
    char *source;    /* where this came from, for messages: the file path */
};

/* Ceilings on what the loaders read (docs/style.md §4). */
#define KUBE_KUBECONFIG_MAX_BYTES (1u << 20) /* a kubeconfig file */
#define KUBE_TOKEN_MAX_BYTES      (64u << 10)

/* Loads a kubeconfig file: current-context (or `context` when not NULL) → its cluster
 * (server, certificate-authority[-data], insecure-skip-tls-verify) and user (token,
 * tokenFile, client-certificate[-data], client-key[-data]). Relative file names are
 * relative to the kubeconfig's folder. Errors name the file and the key. The result is
 * owned by the caller (kube_config_free). */
int kube_config_load_file(const char *path, const char *context, struct kube_config **out,
                          struct vg_err *err);

/* The same from text in memory; `source` names it in messages and relative file names are
 * taken relative to `base_dir` (NULL: the current directory). Used by tests and the fuzz
 * target. */
int kube_config_load_text(const char *text, size_t len, const char *source, const char *base_dir,
                          const char *context, struct kube_config **out, struct vg_err *err);

/* In-cluster credentials: KUBERNETES_SERVICE_HOST/PORT and token, ca.crt, namespace under
 * `secrets_dir` (NULL: /var/run/secrets/kubernetes.io/serviceaccount). */
int kube_config_in_cluster(const char *secrets_dir, struct kube_config **out, struct vg_err *err);

void kube_config_free(struct kube_config *config);

/* Decodes standard base64 (padding required, no whitespace except '\n' and '\r'), as
 * kubeconfig *-data fields hold. Output is NUL-terminated and owned by the caller. */
int kube_base64_decode(const char *text, size_t len, char **out, size_t *out_len,
                       struct vg_err *err);

/* ---- requests ------------------------------------------------------------------- */

struct kube_client_options {
    size_t max_body_bytes;   /* response ceiling; 0 = 64 MiB */
    size_t max_line_bytes;   /* watch line ceiling; 0 = 16 MiB */
    long request_timeout_ms; /* non-watch requests; 0 = 60 s */
    long connect_timeout_ms; /* 0 = 10 s */
};

struct kube_client;

/* The client is driven by `base`, which the caller owns and runs. config is copied. */
int kube_client_new(struct event_base *base, const struct kube_config *config,
                    const struct kube_client_options *options, struct kube_client **out,
                    struct vg_err *err);
/* Cancels outstanding requests without calling their callbacks. Free the client's watches
 * first. Must not be called from inside one of this client's callbacks. */
void kube_client_free(struct kube_client *client);

/* One completed request. status is the HTTP status (0 when no response arrived). body is
 * the parsed JSON response (a Status object for most errors), borrowed, or NULL. err->code
 * is 0 for a 2xx status with a JSON body; otherwise it says what went wrong: -ECONNREFUSED
 * and friends for transport errors, -EMSGSIZE past the body ceiling, -EBADMSG for a body
 * that is not JSON, and for HTTP errors a code derived from the status (409 -> -EEXIST
 * conflict, 404 -> -ENOENT, 410 -> -ESTALE, 403/401 -> -EACCES, other -EIO) with the
 * Status message. */
typedef void (*kube_response_fn)(void *arg, long status, json_t *body, const struct vg_err *err);

/* path starts with '/' and may carry a query ("/api/v1/nodes?limit=500"). The request
 * starts on the next loop turn, so these may be called from any callback. */
int kube_get(struct kube_client *client, const char *path, kube_response_fn done, void *arg,
             struct vg_err *err);
int kube_post(struct kube_client *client, const char *path, json_t *body, kube_response_fn done,
              void *arg, struct vg_err *err);
/* PUT: replaces the object at path with body (an update). A non-empty
 * metadata.resourceVersion in body is a precondition: 409 (-EEXIST) when the object changed
 * since it was read. */
int kube_put(struct kube_client *client, const char *path, json_t *body, kube_response_fn done,
             void *arg, struct vg_err *err);
/* DELETE of the object at path. */
int kube_delete(struct kube_client *client, const char *path, kube_response_fn done, void *arg,
                struct vg_err *err);
/* content_type: "application/merge-patch+json" or "application/strategic-merge-patch+json". */
int kube_patch(struct kube_client *client, const char *path, const char *content_type,
               json_t *patch, kube_response_fn done, void *arg, struct vg_err *err);

/* POST /api/v1/namespaces/NS/pods/NAME/binding with target {v1, Node, node}. */
int kube_bind_pod(struct kube_client *client, const char *ns, const char *name, const char *node,
                  kube_response_fn done, void *arg, struct vg_err *err);

/* The same Binding with its metadata filled in. The API server sets spec.nodeName and
 * merges the Binding's metadata.annotations into the pod's in one write, and takes a
 * non-empty uid and resourceVersion as preconditions: when the pod was recreated or has
 * changed since it was read, it answers 409 and writes nothing (Kubernetes 1.23 and later
 * for both; the uid precondition was ignored in 1.25 and 1.26). A pod already bound is a
 * 409 too. annotations maps key -> string, borrowed; NULL or empty sends none. */
struct kube_binding {
    const char *ns, *name, *node;
    const char *uid;              /* NULL or "": no uid precondition */
    const char *resource_version; /* NULL or "": no resourceVersion precondition */
    json_t *annotations;
};
int kube_bind_pod_with(struct kube_client *client, const struct kube_binding *binding,
                       kube_response_fn done, void *arg, struct vg_err *err);

/* Merge patch of metadata.annotations on `object_path` ("/api/v1/nodes/n1"). annotations
 * maps key -> string (set) or null (remove); borrowed. With resource_version not NULL the
 * patch carries metadata.resourceVersion, so the server answers 409 when the object
 * changed since it was read: conflicts are detected, never overwritten. */
int kube_patch_annotations(struct kube_client *client, const char *object_path, json_t *annotations,
                           const char *resource_version, kube_response_fn done, void *arg,
                           struct vg_err *err);

/* A Warning Event on a pod, as `kubectl describe pod` shows it. Strings are borrowed;
 * container (optional) adds involvedObject.fieldPath "spec.containers{NAME}"; component
 * ("vgpu-monitor") is the source and reporting component, node the host and reporting
 * instance. */
struct kube_warning {
    const char *ns, *pod, *uid;
    const char *container;
    const char *reason, *message;
    const char *component, *node;
};
/* The Event object, named "<pod, 200 at most>.<component>.<now hex>.<seq hex>" (seq: the
 * caller's counter, which keeps names unique within a second); NULL when it cannot be
 * formed. For tests; kube_post_warning sends it. */
json_t *kube_warning_event(const struct kube_warning *w, time_t now, unsigned long long seq);
/* POSTs kube_warning_event(w, now, seq) to /api/v1/namespaces/NS/events. */
int kube_post_warning(struct kube_client *client, const struct kube_warning *w,
                      unsigned long long seq, kube_response_fn done, void *arg, struct vg_err *err);

/* Number of requests (watches included) not yet completed. */
size_t kube_client_pending(const struct kube_client *client);

/* ---- watch lines ---------------------------------------------------------------- */

/* Splits a byte stream into '\n'-terminated lines that may arrive split across reads.
 * The buffer never holds more than max_line bytes. */
struct kube_lines {
    struct vg_buf tail; /* the part of a line still waiting for its '\n', at most max_line */
    size_t max_line;
    bool overflow; /* a line passed max_line; the stream is no longer usable */
};

typedef int (*kube_line_fn)(void *arg, const char *line, size_t len);

void kube_lines_init(struct kube_lines *lines, size_t max_line);
void kube_lines_release(struct kube_lines *lines);
/* Calls fn for each complete line (without '\n', '\r' stripped; empty lines skipped). A
 * non-zero return from fn stops and is returned. -EMSGSIZE when a line passes max_line. */
int kube_lines_feed(struct kube_lines *lines, const char *data, size_t len, kube_line_fn fn,
                    void *arg, struct vg_err *err);

enum kube_event_type {
    KUBE_EVENT_ADDED,
    KUBE_EVENT_MODIFIED,
    KUBE_EVENT_DELETED,
    KUBE_EVENT_BOOKMARK,
    KUBE_EVENT_ERROR,
};

const char *kube_event_type_name(enum kube_event_type type);

struct kube_event {
    enum kube_event_type type;
    json_t *object;               /* owned reference: the object, or the Status for ERROR */
    const char *resource_version; /* points into object; NULL for ERROR */
    long error_code;              /* ERROR: Status.code (410 = expired), else 0 */
};

/* Decodes one watch line {"type": ..., "object": {...}}. On success the caller owns
 * event->object (kube_event_release). */
int kube_event_decode(const char *line, size_t len, struct kube_event *event, struct vg_err *err);
void kube_event_release(struct kube_event *event);

/* ---- backoff -------------------------------------------------------------------- */

/* Exponential backoff, capped, with "equal jitter": each delay is uniform in
 * [d/2, d] where d doubles from initial_ms up to max_ms. */
struct kube_backoff {
    uint64_t initial_ms, max_ms, current_ms;
    uint64_t state[4]; /* struct vg_prng, kept opaque here */
};

void kube_backoff_init(struct kube_backoff *backoff, uint64_t initial_ms, uint64_t max_ms,
                       uint64_t seed);
uint64_t kube_backoff_next(struct kube_backoff *backoff);
void kube_backoff_reset(struct kube_backoff *backoff);

/* ---- watches -------------------------------------------------------------------- */

struct kube_watch_options {
    const char *path;            /* collection: "/api/v1/nodes", "/api/v1/pods", ... */
    const char *field_selector;  /* or NULL, e.g. "spec.nodeName=node-1" */
    const char *label_selector;  /* or NULL */
    unsigned list_page_size;     /* limit per list page; 0 = 500 */
    unsigned timeout_seconds;    /* server-side watch timeout; 0 = 300 */
    uint64_t backoff_initial_ms; /* 0 = 200 */
    uint64_t backoff_max_ms;     /* 0 = 30000 */
    uint64_t seed;               /* backoff jitter */
};

struct kube_watch_callbacks {
    /* The whole collection after a (re)list: replace all state. items is a JSON array. */
    void (*resync)(void *arg, json_t *items, const char *resource_version);
    /* ADDED, MODIFIED or DELETED. */
    void (*event)(void *arg, enum kube_event_type type, json_t *object);
    /* A transient failure; the watch recovers by itself. May be NULL. */
    void (*error)(void *arg, const struct vg_err *err);
};

struct kube_watch_stats {
    uint64_t lists; /* completed (re)lists */
    uint64_t list_pages;
    uint64_t watches; /* watch requests started */
    uint64_t events;  /* ADDED/MODIFIED/DELETED delivered */
    uint64_t bookmarks;
    uint64_t expired;  /* 410s seen */
    uint64_t failures; /* errors reported through callbacks.error */
};

struct kube_watch;

/* Starts listing on the next loop turn. callbacks is copied. */
int kube_watch_new(struct kube_client *client, const struct kube_watch_options *options,
                   const struct kube_watch_callbacks *callbacks, void *arg, struct kube_watch **out,
                   struct vg_err *err);
/* May be called from the watch's own callbacks. */
void kube_watch_free(struct kube_watch *watch);

/* The last resourceVersion seen (list, event or bookmark); "" before the first list. */
const char *kube_watch_resource_version(const struct kube_watch *watch);
/* True once the first list has been delivered. */
bool kube_watch_synced(const struct kube_watch *watch);
void kube_watch_get_stats(const struct kube_watch *watch, struct kube_watch_stats *stats);

#endif
