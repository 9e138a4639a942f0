/* The attacker's library for security.attacks.dispatch: a shared library between the
 * program and libcuda (linked by the program, or dlopened) that finds the driver's entry
 * points itself, each WAY one way a library can look a symbol up:
 *   next       dlsym(RTLD_NEXT, name): from here, the next definition is libcuda's
 *   vnext      dlvsym(RTLD_NEXT, name, DISPATCH_VERSION)
 *   default    dlsym(RTLD_DEFAULT, name)
 *   vdefault   dlvsym(RTLD_DEFAULT, name, DISPATCH_VERSION): libvgpu's definitions carry
 *              their own version, so a lookup at another one skips them
 *   vhandle    dlvsym(dlopen("libcuda.so.1"), name, DISPATCH_VERSION)
 *   indirect   glibc's dlsym itself, found with dlsym(dlopen("libc.so.6"), "dlsym"), then
 *              called from here with RTLD_NEXT
 *   vindirect  glibc's dlsym found with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5") (the
 *              old binding), then called from here with RTLD_NEXT
 *   path       dlsym on a copy of the driver opened by path (DISPATCH_COPY_DIR/libcuda.so.1
 *              and libnvidia-ml.so.1)
 *   dlmopen    dlsym on the driver opened in a new link-map namespace
 * DISPATCH_VERSION (default DISPATCH_DRIVER_1): glibc's dlvsym finds only definitions
 * under that version, so the dlvsym ways run against a driver that versions its entry
 * points (dispatch.cmake builds one from fakegpu). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch_attack.h"

typedef void *lookup_fn(void *, const char *);

void dispatch_marker(void)
{
}

void *dispatch_next_marker(int versioned)
{
    return versioned ? dlvsym(RTLD_NEXT, "dispatch_marker", "DISPATCH_ANY")
                     : dlsym(RTLD_NEXT, "dispatch_marker");
}

static const char *version(void)
{
    const char *v = getenv("DISPATCH_VERSION");
    return v != NULL ? v : "DISPATCH_DRIVER_1";
}

/* The driver library (libcuda, or libnvidia-ml for NVML names) as WAY opens it. */
static void *driver(const char *way, int nvml)
{
    const char *soname = nvml ? "libnvidia-ml.so.1" : "libcuda.so.1";
    if (strcmp(way, "path") == 0) {
        const char *dir = getenv("DISPATCH_COPY_DIR");
        char path[PATH_MAX];
        if (dir == NULL || snprintf(path, sizeof path, "%s/%s", dir, soname) >= (int)sizeof path)
            return NULL;
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (strcmp(way, "dlmopen") == 0) {
        static Lmid_t ns = LM_ID_NEWLM;
        void *h = dlmopen(ns, soname, RTLD_NOW | RTLD_LOCAL);
        if (h != NULL && ns == LM_ID_NEWLM)
            (void)dlinfo(h, RTLD_DI_LMID, &ns);
        return h;
    }
    return dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
}

static void *find(const char *way, const char *name, int nvml)
{
    if (strcmp(way, "next") == 0)
        return dlsym(RTLD_NEXT, name);
    if (strcmp(way, "vnext") == 0)
        return dlvsym(RTLD_NEXT, name, version());
    if (strcmp(way, "default") == 0)
        return dlsym(RTLD_DEFAULT, name);
    if (strcmp(way, "vdefault") == 0)
        return dlvsym(RTLD_DEFAULT, name, version());
    if (strcmp(way, "vhandle") == 0) {
        void *h = driver(way, nvml);
        return h != NULL ? dlvsym(h, name, version()) : NULL;
    }
    if (strcmp(way, "indirect") == 0) {
        void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
        lookup_fn *real = libc != NULL ? (lookup_fn *)dlsym(libc, "dlsym") : NULL;
        return real != NULL ? real(RTLD_NEXT, name) : NULL;
    }
    if (strcmp(way, "vindirect") == 0) {
        lookup_fn *real = (lookup_fn *)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        return real != NULL ? real(RTLD_NEXT, name) : NULL;
    }
    if (strcmp(way, "path") == 0 || strcmp(way, "dlmopen") == 0) {
        void *h = driver(way, nvml);
        return h != NULL ? dlsym(h, name) : NULL;
    }
    return NULL;
}

int dispatch_resolve(const char *way, struct dispatch_api *api)
{
    int missing = 0;
#define DISPATCH_FIND(fn, nvml)                                                                    \
    api->fn = (__typeof__(api->fn))find(way, #fn, nvml);                                           \
    if (api->fn == NULL) {                                                                         \
        fprintf(stderr, "dispatch_lib: %s not found by %s: %s\n", #fn, way, dlerror());            \
        missing++;                                                                                 \
    }
#define DISPATCH_FIND_CUDA(fn) DISPATCH_FIND(fn, 0)
#define DISPATCH_FIND_NVML(fn) DISPATCH_FIND(fn, 1)
    DISPATCH_API(DISPATCH_FIND_CUDA)
    DISPATCH_NVML_API(DISPATCH_FIND_NVML)
    return missing == 0 ? 0 : -1;
}
