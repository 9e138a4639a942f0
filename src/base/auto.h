/* Scope-exit cleanup for every module, the preloaded libraries included (libc only).
 *
 * A local declared with one of these is released when it goes out of scope, on every
 * return path, so a function acquires what it needs at the top and returns early on
 * failure without a goto or a chain of `if (rc == 0)`:
 *
 *     VG_AUTO_CLOSE int fd = open(path, O_RDONLY | O_CLOEXEC);
 *     if (fd < 0)
 *         return vg_err_errno(err, errno, "%s: cannot open", path);
 *     VG_AUTO_FREE char *text = NULL;
 *     ...
 *     *out = vg_steal_ptr(&text);   // hand over: the caller owns it, nothing is freed
 *     return 0;
 *
 * Hand-over always goes through vg_steal_ptr / vg_steal_fd ("assign the out-parameter,
 * null the local"), so a handed-over object is never also released. VG_AUTO_JSON lives in
 * base/auto_json.h (it needs jansson, which the preloaded libraries do not link). */
#ifndef VGPU_BASE_AUTO_H
#define VGPU_BASE_AUTO_H

#include <stdio.h>

/* free(*pptr); pptr points to any pointer. */
void vg_freep(void *pptr);
/* close(*fd) when it is >= 0, keeping errno. */
void vg_closep(int *fd);
/* fclose(*f) when it is not NULL, keeping errno. */
void vg_fclosep(FILE **f);

#define VG_AUTO_FREE  __attribute__((cleanup(vg_freep)))
#define VG_AUTO_CLOSE __attribute__((cleanup(vg_closep)))
#define VG_AUTO_FILE  __attribute__((cleanup(vg_fclosep)))

/* Cleanup for a module's own types: VG_DEFINE_AUTO(kube_config_freep, struct kube_config,
 * kube_config_free) defines a static helper that calls kube_config_free(*p) when *p is not
 * NULL; declare locals with `VG_AUTO(kube_config_freep) struct kube_config *c = ...;`. */
#define VG_DEFINE_AUTO(name, type, free_fn)                                                        \
    static inline void name(type **p)                                                              \
    {                                                                                              \
        if (*p != NULL)                                                                            \
            free_fn(*p);                                                                           \
        *p = NULL;                                                                                 \
    }
#define VG_AUTO(name) __attribute__((cleanup(name)))

/* Returns *pp and sets *pp to NULL, so the cleanup of the local releases nothing. */
#define vg_steal_ptr(pp)                                                                           \
    __extension__({                                                                                \
        __typeof__(*(pp)) vg_stolen_ = *(pp);                                                      \
        *(pp) = NULL;                                                                              \
        vg_stolen_;                                                                                \
    })

/* Returns *fd and sets it to -1. */
static inline int vg_steal_fd(int *fd)
{
    int v = *fd;
    *fd = -1;
    return v;
}

#endif
