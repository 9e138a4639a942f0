/* Memory helpers for daemons and tools (STYLE.md §2).
 *
 * Daemons treat out-of-memory as fatal: xmalloc and friends print one line and abort, so
 * callers never carry an unreachable error path. libvgpu and fakegpu must not use these:
 * they run inside other people's programs and degrade instead of aborting.
 *
 * Scope cleanup (VG_AUTO_FREE, VG_AUTO_CLOSE, VG_AUTO_FILE, vg_steal_ptr) lives in
 * base/auto.h, which this header includes. */
#ifndef VGPU_BASE_MEM_H
#define VGPU_BASE_MEM_H

#include <stddef.h>

#include "base/auto.h"

void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);

/* The older spellings, kept until their last users move to base/auto.h's names. */
#define VG_AUTOFREE  VG_AUTO_FREE
#define VG_AUTOCLOSE VG_AUTO_CLOSE

#endif
