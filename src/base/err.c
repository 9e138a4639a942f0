/* strerror_r is POSIX; ask for it when the compiler runs in strict ISO mode. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif

#include "base/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Marks a message that did not fit, so a cut message is never mistaken for a whole one. */
static void mark_truncated(char *msg, int written)
{
    if (written >= VG_ERR_MSG_MAX)
        memcpy(msg + VG_ERR_MSG_MAX - 4, "...", 4);
}

/* err->msg = "<fmt>: <tail>", marked when cut. */
__attribute__((format(printf, 2, 0))) static void format_then(struct vg_err *err, const char *fmt,
                                                              va_list ap, const char *tail)
{
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof err->msg) {
        int m = snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", tail);
        n += m < 0 ? 0 : m;
    }
    mark_truncated(err->msg, n);
}

int vg_err_set(struct vg_err *err, int code, const char *fmt, ...)
{
    if (code > 0)
        code = -code;
    if (err == NULL)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        err->msg[0] = '\0';
    mark_truncated(err->msg, n);
    return code;
}

int vg_err_wrap(struct vg_err *err, const char *fmt, ...)
{
    /* `return vg_err_wrap(err, ...)` passes a failure upward: without an err to read the
     * code from, it must still never read as success. */
    if (err == NULL)
        return -EIO;
    char old[VG_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    format_then(err, fmt, ap, old);
    va_end(ap);
    return err->code;
}

void vg_err_clear(struct vg_err *err)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}

/* strerror_r comes in two variants: XSI returns an int and fills buf, GNU returns a char *
 * that may or may not point into buf. _Generic picks the right reading from the type the
 * C library declares, whatever feature macros are in force. */
static const char *strerror_xsi(int rc, const char *buf)
{
    return rc == 0 ? buf : NULL;
}

static const char *strerror_gnu(const char *rc, const char *buf)
{
    (void)buf;
    return rc;
}

const char *vg_strerror(int errnum, char *buf, size_t size)
{
    if (errnum < 0)
        errnum = -errnum;
    if (buf == NULL || size == 0)
        return "unknown error";
    buf[0] = '\0';
    const char *s = _Generic(strerror_r(errnum, buf, size), int
                             : strerror_xsi, default
                             : strerror_gnu)(strerror_r(errnum, buf, size), buf);
    if (s == NULL || s[0] == '\0') {
        if (snprintf(buf, size, "error %d", errnum) < 0)
            buf[0] = '\0';
        s = buf;
    }
    return s;
}

int vg_err_errno(struct vg_err *err, int errnum, const char *fmt, ...)
{
    if (errnum < 0)
        errnum = -errnum;
    if (errnum == 0)
        errnum = EIO; /* a failure must never read as success */
    if (err == NULL)
        return -errnum;
    err->code = -errnum;
    char text[VG_STRERROR_MAX];
    const char *reason = vg_strerror(errnum, text, sizeof text);
    va_list ap;
    va_start(ap, fmt);
    format_then(err, fmt, ap, reason);
    va_end(ap);
    return -errnum;
}
