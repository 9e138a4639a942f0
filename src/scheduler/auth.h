/* The extender's client authentication helpers (docs/scheduler.md, "Serving beyond the
 * pod"): the reader of an HTTP Authorization header carrying a bearer token, the loader
 * of the token file, and a comparison whose time does not depend on where the presented
 * token first differs from the expected one. No I/O but the token file. */
#ifndef VGPU_SCHEDULER_AUTH_H
#define VGPU_SCHEDULER_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define SCHED_TOKEN_MAX 4096 /* longest bearer token accepted, in bytes */

/* The token of an Authorization header value "Bearer <token>" (RFC 6750 section 2.1):
 * the scheme in any case, one or more spaces, then a token68 (letters, digits and
 * "-._~+/", then any '=' padding), then nothing but optional trailing spaces or tabs.
 * 0 with *tok pointing into header and *len its length (1..SCHED_TOKEN_MAX); -EINVAL for
 * anything else (NULL, another scheme, an empty or overlong token, a stray byte). */
int sched_auth_bearer(const char *header, const char **tok, size_t *len);

/* Whether the presented token (plen bytes) equals the expected one (elen bytes). Its
 * time depends on elen only, never on the bytes compared. */
bool sched_auth_token_equal(const char *presented, size_t plen, const char *expected, size_t elen);

/* Reads the bearer token from file into buf (size bytes, NUL-terminated): the whole
 * file less trailing whitespace, which must be a token68 as above. A missing or
 * unreadable file, an empty token, one over SCHED_TOKEN_MAX bytes or one with other
 * bytes is -EINVAL naming the file. */
int sched_auth_load_token(const char *file, char *buf, size_t size, size_t *len,
                          struct vg_err *err);

#endif
