#include "base/buf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/mem.h"

#define BUF_MIN_CAP   64
#define ARRAY_MIN_CAP 16

void vg_buf_init(struct vg_buf *b, const char *what, size_t max)
{
    b->data = NULL;
    b->len = b->cap = 0;
    b->max = max < SIZE_MAX - 1 ? max : SIZE_MAX - 2; /* room for the NUL, always */
    b->what = what != NULL ? what : "buffer";
}

static int too_big(const struct vg_buf *b, struct vg_err *err)
{
    return vg_err_set(err, -E2BIG, "%s: larger than %zu bytes", b->what, b->max);
}

int vg_buf_reserve(struct vg_buf *b, size_t extra, struct vg_err *err)
{
    if (extra > b->max - b->len)
        return too_big(b, err);
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : BUF_MIN_CAP;
    while (cap < need)
        cap = cap > (b->max + 1) / 2 ? b->max + 1 : cap * 2;
    char *p = realloc(b->data, cap);
    if (p == NULL)
        return vg_err_set(err, -ENOMEM, "%s: out of memory growing to %zu bytes", b->what, cap);
    b->data = p;
    b->cap = cap;
    b->data[b->len] = '\0';
    return 0;
}

int vg_buf_append(struct vg_buf *b, const void *data, size_t n, struct vg_err *err)
{
    int rc = vg_buf_reserve(b, n, err);
    if (rc < 0)
        return rc;
    if (n > 0)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int vg_buf_append_str(struct vg_buf *b, const char *s, struct vg_err *err)
{
    return vg_buf_append(b, s, strlen(s), err);
}

int vg_buf_appendf(struct vg_buf *b, struct vg_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return vg_err_set(err, -EINVAL, "%s: bad format", b->what);
    int rc = vg_buf_reserve(b, (size_t)n, err);
    if (rc < 0)
        return rc;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void vg_buf_reset(struct vg_buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

int vg_buf_steal(struct vg_buf *b, char **out, size_t *len, struct vg_err *err)
{
    if (b->data == NULL) {
        int rc = vg_buf_reserve(b, 0, err);
        if (rc < 0)
            return rc;
    }
    *out = b->data;
    if (len != NULL)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return 0;
}

void vg_buf_free(struct vg_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int vg_array_grow(void *array, size_t *cap, size_t need, size_t elem, size_t max_items,
                  const char *what, struct vg_err *err)
{
    if (need <= *cap)
        return 0;
    if (elem == 0 || max_items > SIZE_MAX / elem)
        max_items = elem == 0 ? need : SIZE_MAX / elem;
    if (need > max_items)
        return vg_err_set(err, -E2BIG, "%s: more than %zu items", what, max_items);
    size_t n = *cap ? *cap : ARRAY_MIN_CAP;
    while (n < need)
        n = n > max_items / 2 ? max_items : n * 2;
    if (n > max_items)
        n = max_items;
    void **p = array;
    /* vg_realloc: the modules that test their allocation failures (placement) reach
     * this path too. */
    void *grown = vg_realloc(*p, n * (elem ? elem : 1));
    if (grown == NULL)
        return vg_err_set(err, -ENOMEM, "%s: out of memory growing to %zu items", what, n);
    *p = grown;
    *cap = n;
    return 0;
}

int vg_read_fd(int fd, const char *path, size_t max, char **out, size_t *len, struct vg_err *err)
{
    struct stat st;
    if (fstat(fd, &st) < 0)
        return vg_err_errno(err, errno, "%s: cannot stat", path);
    if (S_ISDIR(st.st_mode))
        return vg_err_set(err, -EISDIR, "%s: is a directory", path);
    if (S_ISREG(st.st_mode) && (uintmax_t)st.st_size > max)
        return vg_err_set(err, -EFBIG, "%s: larger than %zu bytes", path, max);
    struct vg_buf b;
    vg_buf_init(&b, path, max);
    /* One allocation for a regular file that keeps its size; the loop reads to EOF, so a
     * file that grows, or has no size (/proc, a pipe), is still caught at the ceiling. */
    int rc = S_ISREG(st.st_mode) ? vg_buf_reserve(&b, (size_t)st.st_size, err) : 0;
    while (rc == 0) {
        char chunk[16384];
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = vg_err_errno(err, errno, "%s: cannot read", path);
            break;
        }
        if (n == 0)
            break;
        rc = vg_buf_append(&b, chunk, (size_t)n, err);
        if (rc == -E2BIG)
            rc = vg_err_set(err, -EFBIG, "%s: larger than %zu bytes", path, max);
    }
    if (rc == 0)
        rc = vg_buf_steal(&b, out, len, err);
    vg_buf_free(&b);
    return rc;
}

int vg_read_file(const char *path, size_t max, char **out, size_t *len, struct vg_err *err)
{
    VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vg_err_errno(err, errno, "%s: cannot open", path);
    return vg_read_fd(fd, path, max, out, len, err);
}
