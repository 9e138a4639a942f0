#include "base/mem.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"

static void *check(void *p, size_t size)
{
    if (p == NULL && size != 0) {
        fprintf(stderr, "fatal: out of memory allocating %zu bytes\n", size);
        abort();
    }
    return p;
}

void *xmalloc(size_t size)
{
    return check(malloc(size ? size : 1), size ? size : 1);
}

void *xcalloc(size_t count, size_t size)
{
    return check(calloc(count ? count : 1, size ? size : 1), 1);
}

void *xrealloc(void *ptr, size_t size)
{
    return check(realloc(ptr, size ? size : 1), size ? size : 1);
}

char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

void xarray_grow(void *array, size_t *cap, size_t need, size_t elem)
{
    struct vg_err err;
    if (vg_array_grow(array, cap, need, elem, SIZE_MAX, "array", &err) < 0) {
        fprintf(stderr, "fatal: %s\n", err.msg);
        abort();
    }
}

_Atomic unsigned long vg_mem_fail_countdown_;
static _Atomic bool fail_fired;

bool vg_mem_fail_tick_(void)
{
    unsigned long left = atomic_load_explicit(&vg_mem_fail_countdown_, memory_order_relaxed);
    while (left != 0) {
        if (atomic_compare_exchange_weak(&vg_mem_fail_countdown_, &left, left - 1)) {
            if (left != 1)
                return false;
            atomic_store(&fail_fired, true);
            return true;
        }
    }
    return false;
}

void vg_mem_fail_nth(unsigned long n)
{
    atomic_store(&fail_fired, false);
    atomic_store(&vg_mem_fail_countdown_, n);
}

bool vg_mem_fail_fired(void)
{
    atomic_store(&vg_mem_fail_countdown_, 0);
    return atomic_exchange(&fail_fired, false);
}

void vg_freep(void *pptr)
{
    void **p = pptr;
    free(*p);
    *p = NULL;
}

void vg_closep(int *fd)
{
    if (*fd >= 0) {
        int saved = errno;
        close(*fd);
        errno = saved;
    }
    *fd = -1;
}

void vg_fclosep(FILE **f)
{
    if (*f != NULL) {
        int saved = errno;
        fclose(*f);
        errno = saved;
    }
    *f = NULL;
}
