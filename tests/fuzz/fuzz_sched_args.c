/* Fuzz target for the extender's streaming ExtenderArgs reader (src/scheduler/args.c),
 * checked against jansson both ways: a body the reader accepts (with a Pod jansson reads)
 * is one jansson accepts, with the same NodeNames and the same Pod; a body jansson reads
 * as the reader's shape is one the reader accepts. Input: the body. Verdict: the fast
 * lane's, that is the reader took the body and jansson reads its Pod (a body it declines
 * goes to jansson, whose refusal stands). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "scheduler/args.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
    json_t *names; /* what the reader decoded, as JSON strings */
};

static int collect(void *ctx, const struct sched_args_name *names, size_t count)
{
    struct seen *s = ctx;
    if (count == 0 || count > SCHED_ARGS_BATCH)
        abort();
    for (size_t k = 0; k < count; k++) {
        if (memchr(names[k].name, '\0', names[k].len) != NULL)
            abort(); /* no NULs inside (the name is not NUL-terminated) */
        json_t *str = json_stringn(names[k].name, names[k].len);
        if (str == NULL)
            abort(); /* not UTF-8 */
        json_array_append_new(s->names, str);
    }
    return 0;
}

/* jansson's view: is the body the fast shape? */
static bool fast_shape(json_t *root)
{
    if (!json_is_object(root) || !json_is_object(json_object_get(root, "Pod")) ||
        !json_is_array(json_object_get(root, "NodeNames")))
        return false;
    const char *key;
    json_t *value;
    json_object_foreach(root, key, value)
    {
        if (strcmp(key, "Nodes") == 0 && !json_is_null(value))
            return false;
        if (strcmp(key, "Pod") != 0 && strcmp(key, "Nodes") != 0 && strcmp(key, "NodeNames") != 0)
            return false;
    }
    size_t i;
    json_array_foreach(json_object_get(root, "NodeNames"), i, value)
    {
        if (!json_is_string(value) || json_string_length(value) > SCHED_ARGS_NAME_MAX)
            return false;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    struct seen seen = {json_array()};
    struct sched_args_view v;
    int rc = sched_args_scan(body, size, &v, collect, &seen);
    json_t *root = json_loadb(body, size, JSON_REJECT_DUPLICATES, NULL);
    bool taken = false;
    if (rc == 0) {
        if (v.pod == NULL || v.pod < body || v.pod + v.pod_len > body + size || v.pod[0] != '{' ||
            v.pod[v.pod_len - 1] != '}' || v.name_count != json_array_size(seen.names))
            abort();
        json_t *pod = json_loadb(v.pod, v.pod_len, JSON_REJECT_DUPLICATES, NULL);
        if (pod != NULL) {
            /* The reader's verdict plus jansson's on the Pod is jansson's on the body. */
            if (root == NULL || !fast_shape(root) ||
                !json_equal(json_object_get(root, "NodeNames"), seen.names) ||
                !json_equal(json_object_get(root, "Pod"), pod))
                abort();
            json_decref(pod);
            taken = true;
        } else if (root != NULL) {
            abort();
        }
    } else if (rc != SCHED_ARGS_DECLINE) {
        abort();
    } else if (root != NULL && fast_shape(root) && memchr(body, '\0', size) == NULL) {
        /* Declined although jansson reads the shape: only a Pod nested past the reader's
         * depth may be. (jansson skips a NUL byte that follows a literal or a number;
         * the reader declines any, and jansson then reads the body as before.) */
        char *pod = json_dumps(json_object_get(root, "Pod"), JSON_COMPACT);
        size_t depth = 0, max = 0;
        for (const char *p = pod; p != NULL && *p != '\0'; p++) {
            if (*p == '{' || *p == '[')
                max = ++depth > max ? depth : max;
            else if (*p == '}' || *p == ']')
                depth--;
        }
        free(pod);
        if (max <= SCHED_ARGS_MAX_DEPTH)
            abort();
    }
    json_decref(root);
    json_decref(seen.names);
    vg_fuzz_report(taken);

    /* The writer: whatever the bytes, its output is JSON holding one string. */
    struct sched_jbuf b = {0};
    sched_jbuf_lit(&b, "[");
    sched_jbuf_str(&b, body, size < 4096 ? size : 4096);
    sched_jbuf_lit(&b, "]");
    char *text = sched_jbuf_take(&b);
    json_t *back = json_loads(text, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (!json_is_string(json_array_get(back, 0)))
        abort();
    json_decref(back);
    free(text);
    return 0;
}
