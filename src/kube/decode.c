/* Watch stream decoding and reconnect backoff: the pure parts of the watcher, kept apart
 * from the network code so unit tests and the fuzz target reach them directly.
 *
 * A watch response is a chunked HTTP body of JSON objects, one per line. Chunk and read
 * boundaries fall anywhere, so kube_lines keeps the tail of the last read until its '\n'
 * arrives, and never more than max_line bytes of it: one runaway line cannot take the
 * daemon's memory. */
#include "kube/kube.h"

#include <errno.h>
#include <string.h>

#include "base/auto_json.h"
#include "base/mem.h"
#include "base/prng.h"

void kube_lines_init(struct kube_lines *lines, size_t max_line)
{
    memset(lines, 0, sizeof *lines);
    vg_buf_init(&lines->tail, "watch line", max_line);
    lines->max_line = max_line;
}

void kube_lines_release(struct kube_lines *lines)
{
    vg_buf_free(&lines->tail);
}

static int emit(const char *line, size_t len, kube_line_fn fn, void *arg)
{
    if (len > 0 && line[len - 1] == '\r')
        len--;
    if (len == 0)
        return 0;
    return fn(arg, line, len);
}

int kube_lines_feed(struct kube_lines *lines, const char *data, size_t len, kube_line_fn fn,
                    void *arg, struct vg_err *err)
{
    if (lines->overflow)
        return vg_err_set(err, -EMSGSIZE, "watch line longer than %zu bytes", lines->max_line);
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        size_t take = nl ? (size_t)(nl - data) : len;
        if (lines->tail.len + take > lines->max_line) {
            lines->overflow = true;
            vg_buf_reset(&lines->tail);
            return vg_err_set(err, -EMSGSIZE, "watch line longer than %zu bytes", lines->max_line);
        }
        if (nl != NULL && lines->tail.len == 0) {
            /* The common case: a whole line inside this read, no copy. */
            int rc = emit(data, take, fn, arg);
            if (rc != 0)
                return rc;
        } else {
            int rc = vg_buf_append(&lines->tail, data, take, err);
            if (rc < 0)
                return rc;
            if (nl != NULL) {
                rc = emit(lines->tail.data, lines->tail.len, fn, arg);
                vg_buf_reset(&lines->tail);
                if (rc != 0)
                    return rc;
            }
        }
        if (nl == NULL)
            break;
        data += take + 1;
        len -= take + 1;
    }
    return 0;
}

const char *kube_event_type_name(enum kube_event_type type)
{
    switch (type) {
    case KUBE_EVENT_ADDED:
        return "ADDED";
    case KUBE_EVENT_MODIFIED:
        return "MODIFIED";
    case KUBE_EVENT_DELETED:
        return "DELETED";
    case KUBE_EVENT_BOOKMARK:
        return "BOOKMARK";
    case KUBE_EVENT_ERROR:
        return "ERROR";
    }
    return "?";
}

void kube_event_release(struct kube_event *event)
{
    json_decref(event->object);
    event->object = NULL;
    event->resource_version = NULL;
}

int kube_event_decode(const char *line, size_t len, struct kube_event *event, struct vg_err *err)
{
    memset(event, 0, sizeof *event);
    json_error_t jerr;
    VG_AUTO_JSON json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return vg_err_set(err, -EBADMSG, "watch event is not JSON: %s at column %d", jerr.text,
                          jerr.column);
    json_t *type = json_object_get(root, "type");
    json_t *object = json_object_get(root, "object");
    if (!json_is_object(root) || !json_is_string(type))
        return vg_err_set(err, -EBADMSG, "watch event has no \"type\" string");
    if (!json_is_object(object))
        return vg_err_set(err, -EBADMSG, "watch event has no \"object\" object");
    static const struct {
        const char *name;
        enum kube_event_type type;
    } types[] = {
        {"ADDED", KUBE_EVENT_ADDED},     {"MODIFIED", KUBE_EVENT_MODIFIED},
        {"DELETED", KUBE_EVENT_DELETED}, {"BOOKMARK", KUBE_EVENT_BOOKMARK},
        {"ERROR", KUBE_EVENT_ERROR},
    };
    const char *name = json_string_value(type);
    size_t i;
    for (i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(name, types[i].name) == 0)
            break;
    if (i == sizeof types / sizeof types[0])
        return vg_err_set(err, -EBADMSG, "watch event has unknown type \"%.40s\"", name);
    event->type = types[i].type;
    if (event->type == KUBE_EVENT_ERROR) {
        /* The object is a metav1.Status; 410 means the resourceVersion was compacted. */
        json_t *code = json_object_get(object, "code");
        event->error_code = json_is_integer(code) ? (long)json_integer_value(code) : 0;
    } else {
        json_t *rv = json_object_get(json_object_get(object, "metadata"), "resourceVersion");
        if (!json_is_string(rv) || json_string_length(rv) == 0)
            return vg_err_set(err, -EBADMSG, "%s event object has no metadata.resourceVersion",
                              name);
        event->resource_version = json_string_value(rv);
    }
    event->object = json_incref(object);
    return 0;
}

void kube_backoff_init(struct kube_backoff *backoff, uint64_t initial_ms, uint64_t max_ms,
                       uint64_t seed)
{
    _Static_assert(sizeof backoff->state == sizeof(struct vg_prng), "prng state size");
    backoff->initial_ms = initial_ms ? initial_ms : 1;
    backoff->max_ms = max_ms < backoff->initial_ms ? backoff->initial_ms : max_ms;
    backoff->current_ms = backoff->initial_ms;
    struct vg_prng rng;
    vg_prng_seed(&rng, seed);
    memcpy(backoff->state, rng.s, sizeof rng.s);
}

uint64_t kube_backoff_next(struct kube_backoff *backoff)
{
    struct vg_prng rng;
    memcpy(rng.s, backoff->state, sizeof rng.s);
    uint64_t d = backoff->current_ms;
    uint64_t delay = d - d / 2 + vg_prng_below(&rng, d / 2 + 1);
    memcpy(backoff->state, rng.s, sizeof rng.s);
    backoff->current_ms = d > backoff->max_ms / 2 ? backoff->max_ms : d * 2;
    return delay;
}

void kube_backoff_reset(struct kube_backoff *backoff)
{
    backoff->current_ms = backoff->initial_ms;
}
