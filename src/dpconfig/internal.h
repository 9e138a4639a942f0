/* What dpconfig.c's loader shares with volcano.c's (not part of dpconfig.h's API). */
#ifndef VGPU_DPCONFIG_INTERNAL_H
#define VGPU_DPCONFIG_INTERNAL_H

#include <libfyaml.h>
#include <stdarg.h>

#include "base/err.h"

/* The 1-based line of a key's scalar, 0 when unknown. */
int dpconfig_node_line(struct fy_node *n);
/* Sets err to "<name>:<line>: key '<path>': <message>" (no ":<line>" when line is 0) with
 * code, and returns code. */
int dpconfig_key_vfail(const char *name, struct vg_err *err, int line, const char *path, int code,
                       const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));

#endif
