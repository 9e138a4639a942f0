/* A growable byte buffer with a ceiling, and a bounded whole-file reader.
 *
 * Every buffer that grows with outside input says at creation how large it may become:
 * an append that would take it past that ceiling fails with -E2BIG and a message naming
 * the buffer, instead of growing without bound. Allocation failure is -ENOMEM, never an
 * abort, so these work inside the preloaded libraries as well as in the daemons.
 *
 *     struct vg_buf b;
 *     vg_buf_init(&b, "response body", 1 << 20);
 *     rc = vg_buf_append(&b, data, n, err);      // -E2BIG past 1 MiB
 *     ...
 *     rc = vg_buf_steal(&b, &text, &len, err);   // caller owns text; b is empty again
 *     vg_buf_free(&b);
 *
 * The data is always NUL-terminated once anything has been appended (the NUL is not
 * counted in len or against the ceiling). */
#ifndef VGPU_BASE_BUF_H
#define VGPU_BASE_BUF_H

#include <stddef.h>

#include "base/err.h"

struct vg_buf {
    char *data;       /* NULL until the first append; NUL-terminated after it */
    size_t len;       /* bytes held, at most max */
    size_t cap;       /* bytes allocated (len + 1 at least once data is set) */
    size_t max;       /* the ceiling */
    const char *what; /* names the buffer in error messages (a string literal) */
};

/* An empty buffer that may hold up to max bytes; what names it in errors. Allocates
 * nothing. */
void vg_buf_init(struct vg_buf *b, const char *what, size_t max);

/* Appends n bytes; -E2BIG ("<what>: larger than <max> bytes") when the result would pass
 * the ceiling, -ENOMEM when memory runs out. On failure the buffer is unchanged. */
int vg_buf_append(struct vg_buf *b, const void *data, size_t n, struct vg_err *err);
int vg_buf_append_str(struct vg_buf *b, const char *s, struct vg_err *err);

/* Appends printf output; same errors, buffer unchanged on failure. */
int vg_buf_appendf(struct vg_buf *b, struct vg_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Makes room for extra more bytes (and the NUL) so that appending them does not
 * allocate again: for a producer that knows about how much it will write. Sets data even
 * when extra is 0. -E2BIG when len + extra would pass the ceiling, -ENOMEM; the contents
 * are unchanged either way. */
int vg_buf_reserve(struct vg_buf *b, size_t extra, struct vg_err *err);

/* Empties the buffer and keeps its memory for reuse. */
void vg_buf_reset(struct vg_buf *b);

/* Hands the contents over: *out gets a NUL-terminated string the caller frees (an empty
 * one when nothing was appended), *len (if not NULL) its length; the buffer is left
 * empty, ceiling unchanged. -ENOMEM only when an empty buffer cannot allocate its "". */
int vg_buf_steal(struct vg_buf *b, char **out, size_t *len, struct vg_err *err);

/* Releases the memory; the buffer is empty afterwards and may be used again. */
void vg_buf_free(struct vg_buf *b);

/* Grows an array of elem-sized items so that it holds at least need of them (doubling,
 * at least 16), never past max_items: -E2BIG ("<what>: more than <max> items") or
 * -ENOMEM, with *array and *cap unchanged on failure. Allocates with vg_realloc, so the
 * allocation-failure hook of base/mem.h reaches it. */
int vg_array_grow(void *array, size_t *cap, size_t need, size_t elem, size_t max_items,
                  const char *what, struct vg_err *err);

/* Reads the whole file at path into a NUL-terminated buffer of at most max bytes; *out
 * is the caller's to free, *len (if not NULL) its length. Errors: "<path>: cannot open:
 * <reason>", "<path>: is a directory", "<path>: cannot read: <reason>", "<path>: larger
 * than <max> bytes" (-EFBIG; a file that grows while it is read is caught too). */
int vg_read_file(const char *path, size_t max, char **out, size_t *len, struct vg_err *err);

/* The same from a descriptor the caller opened (with O_NOFOLLOW, say) and still owns;
 * path names it in the errors. */
int vg_read_fd(int fd, const char *path, size_t max, char **out, size_t *len, struct vg_err *err);

#endif
