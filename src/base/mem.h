/* Memory helpers for daemons and tools (docs/style.md §2).
 *
 * Daemons treat out-of-memory as fatal: xmalloc and friends print one line and abort, so
 * callers never carry an unreachable error path. libvgpu and fakegpu must not use these:
 * they run inside other people's programs and degrade instead of aborting.
 *
 * Scope cleanup: `VG_AUTOFREE char *s = xstrdup(x);` frees s when it goes out of scope;
 * hand ownership over with `*out = s; s = NULL;`. */
#ifndef VGPU_BASE_MEM_H
#define VGPU_BASE_MEM_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);

void vg_freep(void *pptr);
void vg_closep(int *fd);

#define VG_AUTOFREE  __attribute__((cleanup(vg_freep)))
#define VG_AUTOCLOSE __attribute__((cleanup(vg_closep)))

#endif
