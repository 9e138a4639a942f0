/* Informer-style list + watch of one collection.
 *
 *   list (pages of list_page_size, following metadata.continue)
 *     -> resync callback with every item and the list's resourceVersion
 *     -> watch from that resourceVersion with allowWatchBookmarks=true
 *          ADDED/MODIFIED/DELETED -> event callback, resourceVersion advances
 *          BOOKMARK               -> resourceVersion advances, nothing delivered
 *          ERROR 410 / HTTP 410   -> relist at once (the version was compacted)
 *          server closed cleanly  -> watch again at once from the last version
 *          dropped, 5xx, ERROR    -> watch again from the last version after backoff
 *          line past the ceiling,
 *          malformed line         -> error callback, relist after backoff
 *
 * Watching again from the last delivered resourceVersion is what makes a dropped
 * connection lose nothing: the server replays every change after that version, or says
 * 410 and we relist. Bookmarks keep that version fresh on quiet collections, so a
 * reconnect rarely needs a relist. Backoff doubles up to backoff_max_ms, jittered by a
 * seeded generator, and resets once a list completes or an event arrives.
 *
 * Callbacks may free the watch: the free is deferred until the callback returns
 * (`dispatching`), and a watch freed from inside its stream aborts the transfer first. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "kube/internal.h"

#define RV_MAX 128

enum watch_next {
    NEXT_NONE,
    NEXT_LIST,        /* relist now */
    NEXT_LIST_LATER,  /* relist after backoff */
    NEXT_WATCH,       /* watch again now */
    NEXT_WATCH_LATER, /* watch again after backoff */
};

struct kube_watch {
    struct kube_client *client;
    char *path, *field_selector, *label_selector;
    unsigned page_size, timeout_seconds;
    struct kube_watch_callbacks callbacks;
    void *arg;

    struct kube_request *request; /* current list page or watch, or NULL */
    struct event *timer;          /* start, backoff waits */
    enum watch_next next;         /* what the timer does */
    struct kube_backoff backoff;
    json_t *items; /* pages gathered so far */
    char rv[RV_MAX];
    bool synced;

    struct kube_lines lines;
    long stream_status;
    enum watch_next after_stream; /* decided while reading the stream */

    int dispatching;
    bool free_requested;
    struct kube_watch_stats stats;
};

static void watch_destroy(struct kube_watch *watch)
{
    kube_request_cancel(watch->request);
    if (watch->timer != NULL)
        event_free(watch->timer);
    json_decref(watch->items);
    kube_lines_release(&watch->lines);
    free(watch->path);
    free(watch->field_selector);
    free(watch->label_selector);
    free(watch);
}

void kube_watch_free(struct kube_watch *watch)
{
    if (watch == NULL)
        return;
    if (watch->dispatching > 0) {
        watch->free_requested = true;
        return;
    }
    watch_destroy(watch);
}

/* Calls back into the user; returns true when the user freed the watch meanwhile and the
 * caller must stop touching it (it is destroyed here unless inside the stream). */
#define DISPATCH(watch, call)                                                                      \
    do {                                                                                           \
        (watch)->dispatching++;                                                                    \
        call;                                                                                      \
        (watch)->dispatching--;                                                                    \
    } while (0)

static void report(struct kube_watch *watch, const struct vg_err *err)
{
    watch->stats.failures++;
    vg_log(VG_LOG_DEBUG, "kube watch: transient failure", "path=%s error=\"%s\"", watch->path,
           err->msg);
    if (watch->callbacks.error != NULL)
        DISPATCH(watch, watch->callbacks.error(watch->arg, err));
}

/* Appends "&key=value" with the value percent-encoded. */
static void append_query(char *buf, size_t size, size_t *len, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    int n = vg_snprintf(buf + *len, size - *len, "%c%s=", strchr(buf, '?') ? '&' : '?', key);
    if (n < 0)
        return;
    *len += (size_t)n;
    for (const unsigned char *p = (const unsigned char *)value; *p && *len + 4 < size; p++) {
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' || *p == '.' || *p == '~';
        if (plain) {
            buf[(*len)++] = (char)*p;
        } else {
            buf[(*len)++] = '%';
            buf[(*len)++] = hex[*p >> 4];
            buf[(*len)++] = hex[*p & 15];
        }
    }
    buf[*len] = '\0';
}

static void build_path(struct kube_watch *watch, char *buf, size_t size, bool watching,
                       const char *continue_token)
{
    size_t len = 0;
    int n = vg_snprintf(buf, size, "%s", watch->path);
    len = n > 0 ? (size_t)n : 0;
    char num[32];
    if (watching) {
        append_query(buf, size, &len, "watch", "1");
        append_query(buf, size, &len, "resourceVersion", watch->rv);
        append_query(buf, size, &len, "allowWatchBookmarks", "true");
        vg_snprintf(num, sizeof num, "%u", watch->timeout_seconds);
        append_query(buf, size, &len, "timeoutSeconds", num);
    } else {
        vg_snprintf(num, sizeof num, "%u", watch->page_size);
        append_query(buf, size, &len, "limit", num);
        if (continue_token != NULL)
            append_query(buf, size, &len, "continue", continue_token);
    }
    if (watch->field_selector != NULL)
        append_query(buf, size, &len, "fieldSelector", watch->field_selector);
    if (watch->label_selector != NULL)
        append_query(buf, size, &len, "labelSelector", watch->label_selector);
}

static void schedule(struct kube_watch *watch, enum watch_next next)
{
    uint64_t delay_ms = 0;
    if (next == NEXT_LIST_LATER || next == NEXT_WATCH_LATER)
        delay_ms = kube_backoff_next(&watch->backoff);
    watch->next = next;
    struct timeval tv = {.tv_sec = (time_t)(delay_ms / 1000),
                         .tv_usec = (suseconds_t)(delay_ms % 1000) * 1000};
    evtimer_add(watch->timer, &tv);
}

static void list_page(struct kube_watch *watch, const char *continue_token);
static void start_watch(struct kube_watch *watch);

static bool set_rv(struct kube_watch *watch, const char *rv)
{
    if (rv == NULL || rv[0] == '\0' || strlen(rv) >= RV_MAX)
        return false;
    memcpy(watch->rv, rv, strlen(rv) + 1);
    return true;
}

/* A list that failed: report it and list again later, unless the watch is being freed. */
static void list_failed(struct kube_watch *watch, const struct vg_err *err)
{
    report(watch, err);
    if (!watch->free_requested)
        schedule(watch, NEXT_LIST_LATER);
}

/* Frees a watch whose owner asked for it once no callback is running any more. */
static void destroy_if_released(struct kube_watch *watch)
{
    if (watch->free_requested && watch->dispatching == 0)
        watch_destroy(watch);
}

static void list_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct kube_watch *watch = arg;
    watch->request = NULL;
    if (err->code != 0) {
        if (status == 410) {
            /* The continue token expired between pages: start the list over. */
            watch->stats.expired++;
            schedule(watch, NEXT_LIST);
            return;
        }
        list_failed(watch, err);
        destroy_if_released(watch);
        return;
    }
    json_t *items = json_object_get(body, "items");
    json_t *metadata = json_object_get(body, "metadata");
    if (!json_is_array(items) && !json_is_null(items) && items != NULL) {
        struct vg_err e;
        vg_err_set(&e, -EBADMSG, "list %s: \"items\" is not an array", watch->path);
        list_failed(watch, &e);
        destroy_if_released(watch);
        return;
    }
    watch->stats.list_pages++;
    if (items != NULL)
        json_array_extend(watch->items, items);
    const char *next = json_string_value(json_object_get(metadata, "continue"));
    if (next != NULL && next[0] != '\0') {
        list_page(watch, next);
        return;
    }
    const char *rv = json_string_value(json_object_get(metadata, "resourceVersion"));
    if (!set_rv(watch, rv)) {
        struct vg_err e;
        vg_err_set(&e, -EBADMSG, "list %s: missing or oversized metadata.resourceVersion",
                   watch->path);
        list_failed(watch, &e);
        destroy_if_released(watch);
        return;
    }
    watch->stats.lists++;
    watch->synced = true;
    kube_backoff_reset(&watch->backoff);
    json_t *all = watch->items;
    watch->items = json_array();
    DISPATCH(watch, watch->callbacks.resync(watch->arg, all, watch->rv));
    json_decref(all);
    if (!watch->free_requested)
        start_watch(watch);
    destroy_if_released(watch);
}

static void list_page(struct kube_watch *watch, const char *continue_token)
{
    char path[8192];
    build_path(watch, path, sizeof path, false, continue_token);
    struct vg_err err = {0};
    watch->request = kube_get_request(watch->client, path, list_done, watch, &err);
    if (watch->request == NULL) {
        report(watch, &err);
        schedule(watch, NEXT_LIST_LATER);
    }
}

static int on_line(void *arg, const char *line, size_t len)
{
    struct kube_watch *watch = arg;
    struct kube_event event;
    struct vg_err err = {0};
    if (kube_event_decode(line, len, &event, &err) < 0) {
        vg_err_wrap(&err, "watch %s", watch->path);
        report(watch, &err);
        watch->after_stream = NEXT_LIST_LATER;
        return 1;
    }
    int stop = 0;
    switch (event.type) {
    case KUBE_EVENT_ADDED:
    case KUBE_EVENT_MODIFIED:
    case KUBE_EVENT_DELETED:
        if (!set_rv(watch, event.resource_version)) {
            vg_err_set(&err, -EBADMSG, "watch %s: resourceVersion longer than %d bytes",
                       watch->path, RV_MAX - 1);
            report(watch, &err);
            watch->after_stream = NEXT_LIST_LATER;
            stop = 1;
            break;
        }
        watch->stats.events++;
        kube_backoff_reset(&watch->backoff);
        DISPATCH(watch, watch->callbacks.event(watch->arg, event.type, event.object));
        break;
    case KUBE_EVENT_BOOKMARK:
        if (set_rv(watch, event.resource_version))
            watch->stats.bookmarks++;
        break;
    case KUBE_EVENT_ERROR:
        if (event.error_code == 410) {
            watch->stats.expired++;
            watch->after_stream = NEXT_LIST;
        } else {
            const char *message = json_string_value(json_object_get(event.object, "message"));
            vg_err_set(&err, -EIO, "watch %s: ERROR event %ld: %s", watch->path, event.error_code,
                       message ? message : "(no message)");
            report(watch, &err);
            watch->after_stream = NEXT_WATCH_LATER;
        }
        stop = 1;
        break;
    }
    kube_event_release(&event);
    if (watch->free_requested)
        return 1;
    return stop;
}

static int stream_data(void *arg, long status, const char *data, size_t len)
{
    struct kube_watch *watch = arg;
    watch->stream_status = status;
    if (status != 200)
        return 0; /* an error Status body: the status code says enough */
    struct vg_err err = {0};
    int rc = kube_lines_feed(&watch->lines, data, len, on_line, watch, &err);
    if (rc == -EMSGSIZE) {
        vg_err_wrap(&err, "watch %s", watch->path);
        report(watch, &err);
        watch->after_stream = NEXT_LIST_LATER;
        return 1;
    }
    return rc != 0 || watch->free_requested;
}

static void stream_done(void *arg, long status, const struct vg_err *err)
{
    struct kube_watch *watch = arg;
    watch->request = NULL;
    if (watch->free_requested) {
        watch_destroy(watch);
        return;
    }
    enum watch_next next = watch->after_stream;
    if (next == NEXT_NONE) {
        if (status == 410) {
            watch->stats.expired++;
            next = NEXT_LIST;
        } else if (err->code != 0 || (status != 200 && status != 0) || status == 0) {
            struct vg_err e;
            if (err->code != 0)
                e = *err;
            else
                vg_err_set(&e, -EIO, "watch %s: HTTP %ld", watch->path, status);
            report(watch, &e);
            next = NEXT_WATCH_LATER;
        } else {
            next = NEXT_WATCH; /* the server ended the watch (timeoutSeconds) */
        }
    }
    if (watch->free_requested) {
        watch_destroy(watch);
        return;
    }
    schedule(watch, next);
}

static void start_watch(struct kube_watch *watch)
{
    char path[8192];
    build_path(watch, path, sizeof path, true, NULL);
    kube_lines_release(&watch->lines);
    kube_lines_init(&watch->lines, kube_client_max_line(watch->client));
    watch->after_stream = NEXT_NONE;
    watch->stream_status = 0;
    struct vg_err err = {0};
    long timeout_ms = ((long)watch->timeout_seconds + 30) * 1000;
    watch->request =
        kube_stream_get(watch->client, path, timeout_ms, stream_data, stream_done, watch, &err);
    if (watch->request == NULL) {
        report(watch, &err);
        schedule(watch, NEXT_WATCH_LATER);
        return;
    }
    watch->stats.watches++;
}

static void timer_cb(evutil_socket_t fd, short kind, void *arg)
{
    (void)fd;
    (void)kind;
    struct kube_watch *watch = arg;
    enum watch_next next = watch->next;
    watch->next = NEXT_NONE;
    switch (next) {
    case NEXT_LIST:
    case NEXT_LIST_LATER:
        json_decref(watch->items);
        watch->items = json_array();
        list_page(watch, NULL);
        break;
    case NEXT_WATCH:
    case NEXT_WATCH_LATER:
        if (watch->synced)
            start_watch(watch);
        else
            list_page(watch, NULL);
        break;
    case NEXT_NONE:
        break;
    }
    destroy_if_released(watch);
}

int kube_watch_new(struct kube_client *client, const struct kube_watch_options *options,
                   const struct kube_watch_callbacks *callbacks, void *arg, struct kube_watch **out,
                   struct vg_err *err)
{
    if (options == NULL || options->path == NULL || options->path[0] != '/' ||
        strchr(options->path, '?') != NULL || strlen(options->path) > 1024)
        return vg_err_set(err, -EINVAL, "watch: path must be a collection path like /api/v1/pods");
    if (callbacks == NULL || callbacks->resync == NULL || callbacks->event == NULL)
        return vg_err_set(err, -EINVAL, "watch %s: resync and event callbacks are required",
                          options->path);
    if ((options->field_selector && strlen(options->field_selector) > 1024) ||
        (options->label_selector && strlen(options->label_selector) > 1024))
        return vg_err_set(err, -EINVAL, "watch %s: selector longer than 1024 bytes", options->path);
    struct kube_watch *watch = xcalloc(1, sizeof *watch);
    watch->client = client;
    watch->path = xstrdup(options->path);
    watch->field_selector = options->field_selector ? xstrdup(options->field_selector) : NULL;
    watch->label_selector = options->label_selector ? xstrdup(options->label_selector) : NULL;
    watch->page_size = options->list_page_size ? options->list_page_size : 500;
    watch->timeout_seconds = options->timeout_seconds ? options->timeout_seconds : 300;
    watch->callbacks = *callbacks;
    watch->arg = arg;
    kube_backoff_init(&watch->backoff,
                      options->backoff_initial_ms ? options->backoff_initial_ms : 200,
                      options->backoff_max_ms ? options->backoff_max_ms : 30000, options->seed);
    watch->items = json_array();
    kube_lines_init(&watch->lines, kube_client_max_line(client));
    watch->timer = evtimer_new(kube_client_base(client), timer_cb, watch);
    if (watch->timer == NULL) {
        watch_destroy(watch);
        return vg_err_set(err, -ENOMEM, "watch %s: cannot create a timer", options->path);
    }
    schedule(watch, NEXT_LIST);
    *out = watch;
    return 0;
}

const char *kube_watch_resource_version(const struct kube_watch *watch)
{
    return watch->rv;
}

bool kube_watch_synced(const struct kube_watch *watch)
{
    return watch->synced;
}

void kube_watch_get_stats(const struct kube_watch *watch, struct kube_watch_stats *stats)
{
    *stats = watch->stats;
}
