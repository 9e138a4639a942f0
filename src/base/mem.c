#include "base/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
