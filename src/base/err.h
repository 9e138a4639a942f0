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
 * stored code, so `return vg_err_wrap(err, "reading %s", path);` passes the error up
 * (-EIO when err is NULL: a wrapped failure never reads as success). */
int vg_err_wrap(struct vg_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void vg_err_clear(struct vg_err *err);

/* For a failed system call: sets code -|errnum| and the message "<fmt>: <strerror text>",
 * e.g. `return vg_err_errno(err, errno, "cannot open %s", path);` gives "cannot open
 * /x: No such file or directory". errnum may be positive or negative; it is read before
 * anything else can change errno. Thread-safe (strerror_r), allocates nothing. */
int vg_err_errno(struct vg_err *err, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The text for errnum (positive or negative) in buf; returns a pointer to it (or to a
 * static string). Thread-safe, allocates nothing; for log fields use VG_STRERROR(e),
 * which brings its own buffer for the rest of the enclosing block. */
const char *vg_strerror(int errnum, char *buf, size_t size);
#define VG_STRERROR_MAX 128
#define VG_STRERROR(e)  vg_strerror((e), (char[VG_STRERROR_MAX]){0}, VG_STRERROR_MAX)

#endif
