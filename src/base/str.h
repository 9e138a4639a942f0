/* String helpers where truncation is an error, never a silent cut (docs/style.md §4). */
#ifndef VGPU_BASE_STR_H
#define VGPU_BASE_STR_H

#include <stddef.h>

/* snprintf that returns the length written, or -ENOSPC when the result did not fit
 * (buf then holds a truncated, NUL-terminated string) and -EINVAL on a format error. */
int vg_snprintf(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Copies src into dst[size]; -ENOSPC (and a truncated copy) when it does not fit. */
int vg_strlcpy(char *dst, const char *src, size_t size);

#endif
