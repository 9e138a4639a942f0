#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Marks a message that did not fit, so a cut message is never mistaken for a whole one. */
static void mark_truncated(char *msg, int written)
{
    if (written >= VG_ERR_MSG_MAX)
        memcpy(msg + VG_ERR_MSG_MAX - 4, "...", 4);
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
    if (err == NULL)
        return 0;
    char old[VG_ERR_MSG_MAX];
    memcpy(old, err->msg, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof err->msg) {
        int m = snprintf(err->msg + n, sizeof err->msg - (size_t)n, ": %s", old);
        n += m < 0 ? 0 : m;
    }
    mark_truncated(err->msg, n);
    return err->code;
}

void vg_err_clear(struct vg_err *err)
{
    if (err == NULL)
        return;
    err->code = 0;
    err->msg[0] = '\0';
}
