/* The extender's fast lane: a strict, bounded streaming reader of ExtenderArgs in the
 * nodeCacheCapable shape, and a direct writer for the JSON the verbs answer.
 *
 * kube-scheduler offers every node by name on each /filter (about 100 KB for 5,000
 * nodes). Building a jansson tree of it costs one allocation per name; the reader
 * instead walks the body once, hands each NodeNames string to a callback (in place when
 * it has no escapes, else decoded into a small buffer; the filter looks them up in the node
 * map), and returns the Pod value as a slice for jansson (a pod is a few KB).
 *
 * The reader is a filter, not a second source of truth: it accepts only the shape
 *     {"Pod": {...}, "NodeNames": ["...", ...], "Nodes": null}
 * (keys in any order, "Nodes" optional, each key once, string escapes and UTF-8 checked
 * exactly as jansson checks them) and answers SCHED_ARGS_DECLINE for anything else:
 * malformed JSON, duplicate or unknown keys, Nodes mode, a name over
 * SCHED_ARGS_NAME_MAX bytes, a Pod nested deeper than SCHED_ARGS_MAX_DEPTH. The caller
 * then parses the body with jansson, whose verdict and error message stand. So a body
 * the reader accepts is one jansson accepts with the same content (the fuzz target
 * fuzz_sched_args checks this both ways), and every refusal reads as before. */
#ifndef VGPU_SCHEDULER_ARGS_H
#define VGPU_SCHEDULER_ARGS_H

#include <stdbool.h>
#include <stddef.h>

#define SCHED_ARGS_DECLINE   1    /* not the fast shape (or malformed): use jansson */
#define SCHED_ARGS_NAME_MAX  1024 /* longest NodeNames entry the reader decodes */
#define SCHED_ARGS_MAX_DEPTH 256  /* deepest nesting inside Pod the reader passes on */

struct sched_args_view {
    const char *pod; /* the Pod value: starts with '{', ends with its '}' */
    size_t pod_len;
    size_t name_count;
};

#define SCHED_ARGS_BATCH 64 /* names handed over per call */

/* A NodeNames entry: len bytes of decoded UTF-8 without NULs, NOT NUL-terminated. name
 * points into body when the string needed no decoding (then it lives as long as body),
 * else into a scratch buffer valid only during the call. */
struct sched_args_name {
    const char *name;
    size_t len;
};

/* Called with the NodeNames entries in order, up to SCHED_ARGS_BATCH at a time (a name
 * that needed decoding comes alone), so that the caller's per-name work is one tight
 * loop, not a call per name. A nonzero return stops the scan and is returned. */
typedef int (*sched_args_name_fn)(void *ctx, const struct sched_args_name *names, size_t count);

/* 0 with *v filled; SCHED_ARGS_DECLINE; or what fn returned. Reads at most len bytes,
 * uses a fixed amount of stack, allocates nothing. */
int sched_args_scan(const char *body, size_t len, struct sched_args_view *v, sched_args_name_fn fn,
                    void *ctx);

/* A growing output buffer (xrealloc: no failure path). */
struct sched_jbuf {
    char *p;
    size_t len, cap;
};
void sched_jbuf_raw(struct sched_jbuf *b, const char *s, size_t n);
void sched_jbuf_lit(struct sched_jbuf *b, const char *s); /* raw NUL-terminated text */
/* s as a JSON string, quoted: '"', '\\' and control characters escaped, valid UTF-8
 * copied, each byte of an invalid UTF-8 sequence written as U+FFFD. */
void sched_jbuf_str(struct sched_jbuf *b, const char *s, size_t n);
/* Hands the NUL-terminated text over (the buffer is left empty). */
char *sched_jbuf_take(struct sched_jbuf *b);

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one (overlong
 * forms, surrogates and code points past U+10FFFF are not). s[0] >= 0x80. */
size_t sched_utf8_len(const unsigned char *s, size_t avail);

#endif
