/* Requests to the API server on the daemon's libevent loop, through libcurl's multi
 * interface (the hiperfifo pattern): curl tells us which sockets to watch and when its
 * next timeout is (CURLMOPT_SOCKETFUNCTION / CURLMOPT_TIMERFUNCTION), libevent calls
 * back when a socket is ready or the timer fires, and we hand that to
 * curl_multi_socket_action. Nothing here blocks: a slow API server only delays its own
 * callback.
 *
 * A new request is queued and added to the multi handle from a loop event on the next
 * turn, never from inside a libcurl callback (libcurl refuses re-entrant calls), so
 * callers may start requests from any callback, a watch's event callback included.
 *
 * Every response body has a ceiling (max_body_bytes); past it the transfer is aborted
 * and the callback gets -EMSGSIZE. Watch bodies are streamed to watch.c instead. */
#include "kube/internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"

#define DEFAULT_MAX_BODY     ((size_t)64 << 20)
#define DEFAULT_MAX_LINE     ((size_t)16 << 20)
#define TOKEN_REREAD_SECONDS 60
#define PATH_MAX_BYTES       8192

struct kube_request {
    struct kube_client *client;
    struct kube_request *prev, *next;
    CURL *easy;
    struct curl_slist *headers;
    char *method_path; /* "GET /api/v1/nodes", for messages */
    char *upload;      /* request body, owned */
    bool started;
    char error_buffer[CURL_ERROR_SIZE];
    /* buffered response */
    struct vg_buf body;     /* ceiling: options.max_body_bytes */
    struct vg_err body_err; /* why the body was cut short (its code is 0 when it was not) */
    kube_response_fn done;
    /* streamed response */
    kube_stream_fn stream;
    kube_stream_done_fn stream_done;
    bool stream_aborted;
    void *arg;
};

#define KUBE_IDLE_HANDLES 16

struct kube_client {
    struct event_base *base;
    CURLM *multi;
    struct event *timer;
    struct event *start;
    struct kube_client_options options;
    char *server;
    char *token;
    char *token_file;
    time_t token_read_at;
    char *ca_file, *cert_file, *key_file;
    struct curl_blob ca_blob, cert_blob, key_blob;
    bool insecure;
    struct kube_request *requests; /* all not yet completed */
    size_t pending;
    /* Finished requests' easy handles, reset, for the next requests: a fresh handle
     * costs an allocation of several KB and its setup on every API call. */
    CURL *idle[KUBE_IDLE_HANDLES];
    size_t idle_count;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init(void)
{
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void check_multi_info(struct kube_client *client);

/* ---- libevent <-> libcurl glue ------------------------------------------------ */

static void socket_event_cb(evutil_socket_t fd, short kind, void *arg)
{
    struct kube_client *client = arg;
    int flags =
        ((kind & EV_READ) ? CURL_CSELECT_IN : 0) | ((kind & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int running = 0;
    curl_multi_socket_action(client->multi, fd, flags, &running);
    check_multi_info(client);
    if (running <= 0 && evtimer_pending(client->timer, NULL))
        evtimer_del(client->timer);
}

static void timer_event_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    struct kube_client *client = arg;
    int running = 0;
    curl_multi_socket_action(client->multi, CURL_SOCKET_TIMEOUT, 0, &running);
    check_multi_info(client);
}

static int curl_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
    (void)easy;
    struct kube_client *client = userp;
    struct event *ev = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (ev != NULL) {
            event_free(ev);
            curl_multi_assign(client->multi, fd, NULL);
        }
        return 0;
    }
    short kind = (short)(((what & CURL_POLL_IN) ? EV_READ : 0) |
                         ((what & CURL_POLL_OUT) ? EV_WRITE : 0) | EV_PERSIST);
    if (ev != NULL) {
        event_del(ev);
        event_assign(ev, client->base, fd, kind, socket_event_cb, client);
    } else {
        ev = event_new(client->base, fd, kind, socket_event_cb, client);
        if (ev == NULL)
            return -1;
        curl_multi_assign(client->multi, fd, ev);
    }
    event_add(ev, NULL);
    return 0;
}

static int curl_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct kube_client *client = userp;
    if (timeout_ms < 0) {
        evtimer_del(client->timer);
        return 0;
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    evtimer_add(client->timer, &tv);
    return 0;
}

/* ---- requests ----------------------------------------------------------------- */

static void request_unlink(struct kube_request *request)
{
    struct kube_client *client = request->client;
    if (request->prev != NULL)
        request->prev->next = request->next;
    else
        client->requests = request->next;
    if (request->next != NULL)
        request->next->prev = request->prev;
    request->prev = request->next = NULL;
    client->pending--;
}

static void request_free(struct kube_request *request)
{
    if (request == NULL)
        return;
    if (request->easy != NULL) {
        struct kube_client *client = request->client;
        if (request->started)
            curl_multi_remove_handle(client->multi, request->easy);
        if (client->idle_count < KUBE_IDLE_HANDLES) {
            curl_easy_reset(request->easy); /* options gone; connections stay pooled */
            client->idle[client->idle_count++] = request->easy;
        } else {
            curl_easy_cleanup(request->easy);
        }
    }
    curl_slist_free_all(request->headers);
    free(request->method_path);
    free(request->upload);
    vg_buf_free(&request->body);
    free(request);
}

void kube_request_cancel(struct kube_request *request)
{
    if (request == NULL)
        return;
    request_unlink(request);
    request_free(request);
}

static int error_code_for_status(long status)
{
    switch (status) {
    case 401:
    case 403:
        return -EACCES;
    case 404:
        return -ENOENT;
    case 409:
        return -EEXIST;
    case 410:
        return -ESTALE;
    case 413:
        return -EMSGSIZE;
    case 429:
        return -EAGAIN;
    default:
        return -EIO;
    }
}

static int error_code_for_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
        return -EHOSTUNREACH;
    case CURLE_OPERATION_TIMEDOUT:
        return -ETIMEDOUT;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
        return -EPROTO;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
        return -ECONNRESET;
    default:
        return -EIO;
    }
}

/* Finishes one transfer: builds the outcome, unlinks, calls back, frees. */
static void request_finish(struct kube_request *request, CURLcode result)
{
    struct kube_client *client = request->client;
    long status = 0;
    curl_easy_getinfo(request->easy, CURLINFO_RESPONSE_CODE, &status);
    curl_multi_remove_handle(client->multi, request->easy);
    request->started = false;
    request_unlink(request);

    struct vg_err err = {0};
    if (request->stream_done != NULL) {
        if (result != CURLE_OK && !request->stream_aborted)
            vg_err_set(&err, error_code_for_curl(result), "%s: %s", request->method_path,
                       request->error_buffer[0] ? request->error_buffer
                                                : curl_easy_strerror(result));
        else if (request->stream_aborted)
            vg_err_set(&err, -ECANCELED, "%s: stopped by the reader", request->method_path);
        request->stream_done(request->arg, status, &err);
        request_free(request);
        return;
    }

    json_t *body = NULL;
    if (request->body_err.code == -E2BIG) {
        vg_err_set(&err, -EMSGSIZE, "%s: response larger than %zu bytes", request->method_path,
                   client->options.max_body_bytes);
    } else if (request->body_err.code != 0) {
        err = request->body_err;
        vg_err_wrap(&err, "%s", request->method_path);
    } else if (result != CURLE_OK) {
        vg_err_set(&err, error_code_for_curl(result), "%s: %s", request->method_path,
                   request->error_buffer[0] ? request->error_buffer : curl_easy_strerror(result));
        status = 0;
    } else {
        json_error_t jerr;
        if (request->body.len > 0)
            body = json_loadb(request->body.data, request->body.len, 0, &jerr);
        if (status >= 200 && status < 300) {
            if (body == NULL)
                vg_err_set(&err, -EBADMSG, "%s: HTTP %ld with a body that is not JSON%s%s",
                           request->method_path, status, request->body.len ? ": " : "",
                           request->body.len ? jerr.text : "");
        } else {
            const char *message = json_string_value(json_object_get(body, "message"));
            vg_err_set(&err, error_code_for_status(status), "%s: HTTP %ld: %s",
                       request->method_path, status, message ? message : "(no Status message)");
        }
    }
    request->done(request->arg, status, body, &err);
    json_decref(body);
    request_free(request);
}

static void check_multi_info(struct kube_client *client)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(client->multi, &left)) != NULL) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        struct kube_request *request = NULL;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&request);
        CURLcode result = msg->data.result;
        if (request != NULL)
            request_finish(request, result);
    }
}

static void start_event_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    struct kube_client *client = arg;
    for (struct kube_request *r = client->requests; r != NULL; r = r->next) {
        if (r->started)
            continue;
        CURLMcode mrc = curl_multi_add_handle(client->multi, r->easy);
        if (mrc != CURLM_OK) {
            vg_log(VG_LOG_ERROR, "kube: cannot start request", "request=\"%s\" error=\"%s\"",
                   r->method_path, curl_multi_strerror(mrc));
            continue;
        }
        r->started = true;
    }
}

static size_t buffered_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct kube_request *request = userp;
    size_t n = size * nmemb;
    if (vg_buf_append(&request->body, data, n, &request->body_err) < 0)
        return 0; /* aborts the transfer; request_finish reports body_err */
    return n;
}

static size_t stream_write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
    struct kube_request *request = userp;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(request->easy, CURLINFO_RESPONSE_CODE, &status);
    if (request->stream(request->arg, status, data, n) != 0) {
        request->stream_aborted = true;
        return 0;
    }
    return n;
}

static void refresh_token(struct kube_client *client)
{
    if (client->token_file == NULL)
        return;
    time_t now = time(NULL);
    if (client->token != NULL && now - client->token_read_at < TOKEN_REREAD_SECONDS)
        return;
    /* Room past the ceiling for the trailing newline (and a few blanks) files often end in. */
    VG_AUTO_FREE char *buf = NULL;
    size_t n = 0;
    struct vg_err err;
    if (vg_read_file(client->token_file, KUBE_TOKEN_MAX_BYTES + 16, &buf, &n, &err) < 0) {
        vg_log(VG_LOG_WARN, "kube: cannot read token file", "path=%s error=\"%s\"",
               client->token_file, err.msg);
        return;
    }
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        n--;
    if (n == 0 || n > KUBE_TOKEN_MAX_BYTES || memchr(buf, '\n', n) != NULL) {
        vg_log(VG_LOG_WARN, "kube: token file is empty, too large or has several lines", "path=%s",
               client->token_file);
        return;
    }
    buf[n] = '\0';
    free(client->token);
    client->token = vg_steal_ptr(&buf);
    client->token_read_at = now;
}

static bool path_is_valid(const char *path)
{
    if (path == NULL || path[0] != '/' || strlen(path) > PATH_MAX_BYTES)
        return false;
    for (const char *p = path; *p; p++)
        if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f || *p == '#')
            return false;
    return true;
}

static struct kube_request *request_new(struct kube_client *client, const char *method,
                                        const char *path, json_t *body, const char *content_type,
                                        long timeout_ms, struct vg_err *err)
{
    if (!path_is_valid(path)) {
        vg_err_set(err, -EINVAL, "%s: invalid request path '%.200s'", method,
                   path ? path : "(null)");
        return NULL;
    }
    struct kube_request *request = xcalloc(1, sizeof *request);
    request->client = client;
    vg_buf_init(&request->body, "response body", client->options.max_body_bytes);
    size_t n = strlen(method) + strlen(path) + 2;
    request->method_path = xmalloc(n);
    vg_snprintf(request->method_path, n, "%s %s", method, path);
    CURL *easy = client->idle_count > 0 ? client->idle[--client->idle_count] : curl_easy_init();
    if (easy == NULL) {
        request_free(request);
        vg_err_set(err, -ENOMEM, "%s %s: curl_easy_init failed", method, path);
        return NULL;
    }
    request->easy = easy;

    n = strlen(client->server) + strlen(path) + 1;
    VG_AUTO_FREE char *url = xmalloc(n);
    vg_snprintf(url, n, "%s%s", client->server, path);
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, request);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, request->error_buffer);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, client->options.connect_timeout_ms);
    if (timeout_ms > 0)
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(easy, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(easy, CURLOPT_USERAGENT, "vgpu/0.1");
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, request);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, buffered_write_cb);
    if (client->ca_file != NULL)
        curl_easy_setopt(easy, CURLOPT_CAINFO, client->ca_file);
    if (client->ca_blob.data != NULL)
        curl_easy_setopt(easy, CURLOPT_CAINFO_BLOB, &client->ca_blob);
    if (client->cert_file != NULL) {
        curl_easy_setopt(easy, CURLOPT_SSLCERT, client->cert_file);
        curl_easy_setopt(easy, CURLOPT_SSLKEY, client->key_file);
    }
    if (client->cert_blob.data != NULL) {
        curl_easy_setopt(easy, CURLOPT_SSLCERT_BLOB, &client->cert_blob);
        curl_easy_setopt(easy, CURLOPT_SSLKEY_BLOB, &client->key_blob);
    }
    if (client->insecure) {
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(easy, CURLOPT_SSL_VERIFYHOST, 0L);
    }

    request->headers = curl_slist_append(request->headers, "Accept: application/json");
    request->headers = curl_slist_append(request->headers, "Expect:");
    refresh_token(client);
    if (client->token != NULL) {
        size_t hn = strlen(client->token) + 32;
        VG_AUTO_FREE char *auth = xmalloc(hn);
        vg_snprintf(auth, hn, "Authorization: Bearer %s", client->token);
        request->headers = curl_slist_append(request->headers, auth);
    }
    if (body != NULL) {
        request->upload = json_dumps(body, JSON_COMPACT);
        if (request->upload == NULL) {
            request_free(request);
            vg_err_set(err, -EINVAL, "%s %s: body cannot be encoded as JSON", method, path);
            return NULL;
        }
        size_t cn = strlen(content_type) + 16;
        VG_AUTO_FREE char *ct = xmalloc(cn);
        vg_snprintf(ct, cn, "Content-Type: %s", content_type);
        request->headers = curl_slist_append(request->headers, ct);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, request->upload);
        curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(request->upload));
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
        curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, request->headers);

    /* Queue it; start_event_cb adds it to the multi handle on the next loop turn. */
    request->next = client->requests;
    if (client->requests != NULL)
        client->requests->prev = request;
    client->requests = request;
    client->pending++;
    event_active(client->start, EV_TIMEOUT, 0);
    return request;
}

static int simple_request(struct kube_client *client, const char *method, const char *path,
                          json_t *body, const char *content_type, kube_response_fn done, void *arg,
                          struct vg_err *err)
{
    struct kube_request *request = request_new(client, method, path, body, content_type,
                                               client->options.request_timeout_ms, err);
    if (request == NULL)
        return err ? err->code : -EINVAL;
    request->done = done;
    request->arg = arg;
    return 0;
}

struct kube_request *kube_get_request(struct kube_client *client, const char *path,
                                      kube_response_fn done, void *arg, struct vg_err *err)
{
    struct kube_request *request =
        request_new(client, "GET", path, NULL, NULL, client->options.request_timeout_ms, err);
    if (request != NULL) {
        request->done = done;
        request->arg = arg;
    }
    return request;
}

struct kube_request *kube_stream_get(struct kube_client *client, const char *path, long timeout_ms,
                                     kube_stream_fn data, kube_stream_done_fn done, void *arg,
                                     struct vg_err *err)
{
    struct kube_request *request = request_new(client, "GET", path, NULL, NULL, timeout_ms, err);
    if (request == NULL)
        return NULL;
    request->stream = data;
    request->stream_done = done;
    request->arg = arg;
    curl_easy_setopt(request->easy, CURLOPT_WRITEFUNCTION, stream_write_cb);
    return request;
}

int kube_get(struct kube_client *client, const char *path, kube_response_fn done, void *arg,
             struct vg_err *err)
{
    return simple_request(client, "GET", path, NULL, NULL, done, arg, err);
}

int kube_post(struct kube_client *client, const char *path, json_t *body, kube_response_fn done,
              void *arg, struct vg_err *err)
{
    return simple_request(client, "POST", path, body, "application/json", done, arg, err);
}

int kube_put(struct kube_client *client, const char *path, json_t *body, kube_response_fn done,
             void *arg, struct vg_err *err)
{
    return simple_request(client, "PUT", path, body, "application/json", done, arg, err);
}

int kube_delete(struct kube_client *client, const char *path, kube_response_fn done, void *arg,
                struct vg_err *err)
{
    return simple_request(client, "DELETE", path, NULL, NULL, done, arg, err);
}

int kube_patch(struct kube_client *client, const char *path, const char *content_type,
               json_t *patch, kube_response_fn done, void *arg, struct vg_err *err)
{
    if (content_type == NULL ||
        (strcmp(content_type, "application/merge-patch+json") != 0 &&
         strcmp(content_type, "application/strategic-merge-patch+json") != 0 &&
         strcmp(content_type, "application/json-patch+json") != 0))
        return vg_err_set(err, -EINVAL, "PATCH %s: unsupported content type '%s'", path,
                          content_type ? content_type : "(null)");
    if (patch == NULL)
        return vg_err_set(err, -EINVAL, "PATCH %s: no patch", path);
    return simple_request(client, "PATCH", path, patch, content_type, done, arg, err);
}

/* Kubernetes object names are DNS subdomains or labels: this also keeps them from
 * smuggling '/' or '?' into a path. */
static bool name_is_valid(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static int check_annotations(const char *what, json_t *annotations, bool allow_null,
                             struct vg_err *err)
{
    if (!json_is_object(annotations))
        return vg_err_set(err, -EINVAL, "%s: annotations must be a JSON object", what);
    const char *key;
    json_t *value;
    json_object_foreach(annotations, key, value)
    {
        if (!json_is_string(value) && !(allow_null && json_is_null(value)))
            return vg_err_set(err, -EINVAL, "%s: annotation '%s' must be a string%s", what, key,
                              allow_null ? " or null" : "");
    }
    return 0;
}

int kube_bind_pod_with(struct kube_client *client, const struct kube_binding *b,
                       kube_response_fn done, void *arg, struct vg_err *err)
{
    if (!name_is_valid(b->ns) || !name_is_valid(b->name) || !name_is_valid(b->node))
        return vg_err_set(err, -EINVAL,
                          "bind: invalid namespace, pod or node name ('%.64s', "
                          "'%.64s', '%.64s')",
                          b->ns ? b->ns : "", b->name ? b->name : "", b->node ? b->node : "");
    if (b->annotations != NULL && check_annotations("bind", b->annotations, false, err) < 0)
        return err->code;
    char path[640];
    vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s/binding", b->ns, b->name);
    json_t *metadata = json_pack("{s:s, s:s}", "name", b->name, "namespace", b->ns);
    if (b->uid != NULL && b->uid[0] != '\0')
        json_object_set_new(metadata, "uid", json_string(b->uid));
    if (b->resource_version != NULL && b->resource_version[0] != '\0')
        json_object_set_new(metadata, "resourceVersion", json_string(b->resource_version));
    if (b->annotations != NULL && json_object_size(b->annotations) > 0)
        json_object_set(metadata, "annotations", b->annotations);
    json_t *binding = json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:s}}", "apiVersion", "v1", "kind",
                                "Binding", "metadata", metadata, "target", "apiVersion", "v1",
                                "kind", "Node", "name", b->node);
    int rc = simple_request(client, "POST", path, binding, "application/json", done, arg, err);
    json_decref(binding);
    return rc;
}

int kube_bind_pod(struct kube_client *client, const char *ns, const char *name, const char *node,
                  kube_response_fn done, void *arg, struct vg_err *err)
{
    const struct kube_binding b = {.ns = ns, .name = name, .node = node};
    return kube_bind_pod_with(client, &b, done, arg, err);
}

int kube_patch_annotations(struct kube_client *client, const char *object_path, json_t *annotations,
                           const char *resource_version, kube_response_fn done, void *arg,
                           struct vg_err *err)
{
    char what[320];
    (void)vg_snprintf(what, sizeof what, "PATCH %s", object_path ? object_path : "");
    if (check_annotations(what, annotations, true, err) < 0)
        return err->code;
    json_t *metadata = json_pack("{s:O}", "annotations", annotations);
    if (resource_version != NULL)
        json_object_set_new(metadata, "resourceVersion", json_string(resource_version));
    json_t *patch = json_pack("{s:o}", "metadata", metadata);
    int rc = kube_patch(client, object_path, "application/merge-patch+json", patch, done, arg, err);
    json_decref(patch);
    return rc;
}

size_t kube_client_pending(const struct kube_client *client)
{
    return client->pending;
}

struct event_base *kube_client_base(struct kube_client *client)
{
    return client->base;
}

size_t kube_client_max_line(const struct kube_client *client)
{
    return client->options.max_line_bytes;
}

/* ---- lifetime ----------------------------------------------------------------- */

static void set_blob(struct curl_blob *blob, const char *data, size_t len)
{
    if (data == NULL)
        return;
    blob->data = xmalloc(len);
    memcpy(blob->data, data, len);
    blob->len = len;
    blob->flags = CURL_BLOB_COPY;
}

static void free_blob(struct curl_blob *blob)
{
    if (blob->data != NULL)
        explicit_bzero(blob->data, blob->len);
    free(blob->data);
    blob->data = NULL;
}

static char *dup_or_null(const char *s)
{
    return s ? xstrdup(s) : NULL;
}

int kube_client_new(struct event_base *base, const struct kube_config *config,
                    const struct kube_client_options *options, struct kube_client **out,
                    struct vg_err *err)
{
    if (base == NULL || config == NULL || config->server == NULL)
        return vg_err_set(err, -EINVAL, "kube client: no event base or no server");
    pthread_once(&curl_once, curl_init);
    if (curl_init_result != CURLE_OK)
        return vg_err_set(err, -EIO, "kube client: curl_global_init: %s",
                          curl_easy_strerror(curl_init_result));
    struct kube_client *client = xcalloc(1, sizeof *client);
    client->base = base;
    if (options != NULL)
        client->options = *options;
    if (client->options.max_body_bytes == 0)
        client->options.max_body_bytes = DEFAULT_MAX_BODY;
    if (client->options.max_line_bytes == 0)
        client->options.max_line_bytes = DEFAULT_MAX_LINE;
    if (client->options.request_timeout_ms <= 0)
        client->options.request_timeout_ms = 60000;
    if (client->options.connect_timeout_ms <= 0)
        client->options.connect_timeout_ms = 10000;
    client->server = xstrdup(config->server);
    client->token = dup_or_null(config->token);
    client->token_file = dup_or_null(config->token_file);
    if (client->token != NULL)
        client->token_read_at = time(NULL);
    client->ca_file = dup_or_null(config->ca_file);
    client->cert_file = dup_or_null(config->client_cert_file);
    client->key_file = dup_or_null(config->client_key_file);
    set_blob(&client->ca_blob, config->ca_data, config->ca_data_len);
    set_blob(&client->cert_blob, config->client_cert_data, config->client_cert_data_len);
    set_blob(&client->key_blob, config->client_key_data, config->client_key_data_len);
    client->insecure = config->insecure_skip_tls_verify;

    client->multi = curl_multi_init();
    client->timer = evtimer_new(base, timer_event_cb, client);
    client->start = event_new(base, -1, 0, start_event_cb, client);
    if (client->multi == NULL || client->timer == NULL || client->start == NULL) {
        kube_client_free(client);
        return vg_err_set(err, -ENOMEM, "kube client: cannot create curl multi handle or events");
    }
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
    curl_multi_setopt(client->multi, CURLMOPT_SOCKETDATA, client);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
    curl_multi_setopt(client->multi, CURLMOPT_TIMERDATA, client);
    *out = client;
    return 0;
}

void kube_client_free(struct kube_client *client)
{
    if (client == NULL)
        return;
    while (client->requests != NULL)
        kube_request_cancel(client->requests);
    while (client->idle_count > 0)
        curl_easy_cleanup(client->idle[--client->idle_count]);
    if (client->multi != NULL)
        curl_multi_cleanup(client->multi);
    if (client->timer != NULL)
        event_free(client->timer);
    if (client->start != NULL)
        event_free(client->start);
    free(client->server);
    if (client->token != NULL)
        explicit_bzero(client->token, strlen(client->token));
    free(client->token);
    free(client->token_file);
    free(client->ca_file);
    free(client->cert_file);
    free(client->key_file);
    free_blob(&client->ca_blob);
    free_blob(&client->cert_blob);
    free_blob(&client->key_blob);
    free(client);
}
