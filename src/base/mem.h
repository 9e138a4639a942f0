/* Memory helpers for daemons and tools (docs/style.md §2).
 *
 * Daemons treat out-of-memory as fatal: xmalloc and friends print one line and abort, so
 * callers never carry an unreachable error path. libvgpu and fakegpu must not use these:
 * they run inside other people's programs and degrade instead of aborting (vg_malloc
 * and friends below).
 *
 * Scope cleanup (VG_AUTO_FREE, VG_AUTO_CLOSE, VG_AUTO_FILE, vg_steal_ptr) lives in
 * base/auto.h, which this header includes. */
#ifndef VGPU_BASE_MEM_H
#define VGPU_BASE_MEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/auto.h"

void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
/* vg_array_grow (base/buf.h) for daemon code that cannot fail: *array holds at least need
 * items of elem bytes afterwards (doubling, at least 16); out of memory, or a size past
 * SIZE_MAX, aborts as xmalloc does. */
void xarray_grow(void *array, size_t *cap, size_t need, size_t elem);

/* Fallible allocation, for code that reports -ENOMEM instead of aborting (libvgpu's
 * allocation table, the region, placement). Every allocation there goes through these,
 * so a test can make the n-th one fail and check that each error path cleans up and
 * leaves consistent state (as curl's "torture" tests do). Off, the cost is one load and
 * one predicted branch in front of the libc call. Free with free(). */
extern _Atomic unsigned long vg_mem_fail_countdown_;
bool vg_mem_fail_tick_(void);

static inline bool vg_mem_fail_now_(void)
{
    return __builtin_expect(
               atomic_load_explicit(&vg_mem_fail_countdown_, memory_order_relaxed) != 0, 0) &&
           vg_mem_fail_tick_();
}

static inline void *vg_malloc(size_t size)
{
    return vg_mem_fail_now_() ? NULL : malloc(size);
}

static inline void *vg_calloc(size_t count, size_t size)
{
    return vg_mem_fail_now_() ? NULL : calloc(count, size);
}

/* On failure the old block is left as it was, as with realloc. */
static inline void *vg_realloc(void *ptr, size_t size)
{
    return vg_mem_fail_now_() ? NULL : realloc(ptr, size);
}

/* Tests only: the n-th fallible allocation from now fails (n = 0: none); one failure,
 * later allocations succeed again. Not meant for threads allocating at the same time. */
void vg_mem_fail_nth(unsigned long n);
/* Whether the failure armed by vg_mem_fail_nth has happened (and disarms it). */
bool vg_mem_fail_fired(void);

#endif
