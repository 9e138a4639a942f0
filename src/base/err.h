/* Error convention for all of vgpu (docs/style.md §1).
 *
 * A fallible function returns 0 on success or a negative errno-style code, and fills a
 * caller-owned struct vg_err with that code and a message. vg_err_set() does both in one
 * line: `return vg_err_set(err, -EINVAL, "bad port '%s'", s);`. Callers add context with
 * vg_err_wrap() as the error travels up, and only the top of the call chain logs it.
 * Nothing here allocates, so the same convention works inside libvgpu and fakegpu. */
#ifndef VGPU_BASE_ERR_H
#define VGPU_BASE_ERR_H

#include <stddef.h>

#define VG_ERR_MSG_MAX 256

struct vg_err {
    int code;                 /* negative errno-style code, 0 when clear */
    char msg[VG_ERR_MSG_MAX]; /* human-readable, truncated with "..." if too long */
};

/* Sets code and message; returns code (negative). err may be NULL. A positive code is
 * negated so that callers can pass errno directly. */
int vg_err_set(struct vg_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message with context ("reading config: <old message>"); returns the
 * stored code. */
int vg_err_wrap(struct vg_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void vg_err_clear(struct vg_err *err);

#endif
