#include "base/str.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int vg_snprintf(char *buf, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, size, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -EINVAL;
    if ((size_t)n >= size)
        return -ENOSPC;
    return n;
}

int vg_strlcpy(char *dst, const char *src, size_t size)
{
    size_t n = strlen(src);
    if (size == 0)
        return -ENOSPC;
    if (n >= size) {
        memcpy(dst, src, size - 1);
        dst[size - 1] = '\0';
        return -ENOSPC;
    }
    memcpy(dst, src, n + 1);
    return (int)n;
}
