/* How programs reach libvgpu's wrappers, besides linking: cuGetProcAddress and dlsym.
 *
 * cuGetProcAddress(_v2): the real driver is asked first, with the caller's symbol,
 * cudaVersion and flags, so the driver alone decides which ABI variant (cuMemAlloc or
 * cuMemAlloc_v2, legacy or per-thread stream) the caller gets. libvgpu then looks the
 * returned pointer up among the real entry points it intercepts and, only on an exact
 * match, hands out its wrapper of that same exported name. A wrapper of another ABI can
 * therefore never be handed out, and everything not intercepted goes back untouched.
 *
 * dlsym: a program that does dlopen("libcuda.so.1") + dlsym(handle, "cuMemAlloc_v2")
 * bypasses LD_PRELOAD (a handle lookup searches that library only). libvgpu therefore
 * defines dlsym (at glibc's symbol versions, so it interposes on both the current and the
 * old binding) and answers with its wrapper only when the handle is the real libcuda.so.1
 * or libnvidia-ml.so.1 and the name is an intercepted one; every other call is a tail
 * call into glibc's dlsym, so RTLD_NEXT still resolves relative to the real caller. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include "libvgpu/vgpu.h"

struct hook {
    const char *name;
    void *wrapper;
    void *const *real; /* where lv_g.real keeps the real entry point */
};

#define LV_HOOK_ENTRY(fn) {#fn, (void *)fn, (void *const *)&lv_g.real.fn},
static const struct hook cuda_hooks[] = {LV_CUDA_HOOKS(LV_HOOK_ENTRY)};
static const struct hook nvml_hooks[] = {LV_NVML_HOOKS(LV_HOOK_ENTRY)};
#define N_CUDA (sizeof cuda_hooks / sizeof cuda_hooks[0])
#define N_NVML (sizeof nvml_hooks / sizeof nvml_hooks[0])

void *lv_cuda_wrapper(const char *name)
{
    for (size_t i = 0; i < N_CUDA; i++)
        if (strcmp(cuda_hooks[i].name, name) == 0)
            return cuda_hooks[i].wrapper;
    return NULL;
}

void *lv_nvml_wrapper(const char *name)
{
    for (size_t i = 0; i < N_NVML; i++)
        if (strcmp(nvml_hooks[i].name, name) == 0)
            return nvml_hooks[i].wrapper;
    return NULL;
}

/* The wrapper whose real function is exactly fn, or fn itself. */
static void *swap_for_wrapper(void *fn)
{
    if (fn == NULL)
        return fn;
    for (size_t i = 0; i < N_CUDA; i++)
        if (*cuda_hooks[i].real == fn)
            return cuda_hooks[i].wrapper;
    /* A driver may hand out an alias of an exported entry point; the dynamic symbol
     * that starts exactly there names its ABI. */
    Dl_info info;
    if (dladdr(fn, &info) != 0 && info.dli_saddr == fn && info.dli_sname != NULL &&
        lv_g.cuda_handle != NULL && info.dli_fbase != NULL) {
        void *w = lv_cuda_wrapper(info.dli_sname);
        if (w != NULL && w != fn)
            return w;
    }
    return fn;
}

LV_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!lv_load_real())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = lv_g.real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = swap_for_wrapper(*pfn);
    return r;
}

LV_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    if (!lv_load_real())
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = lv_g.real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn != NULL)
        *pfn = swap_for_wrapper(*pfn);
    return r;
}

/* ---- dlsym ---- */

typedef void *(*dlsym_fn)(void *, const char *);
static _Atomic(dlsym_fn) real_dlsym;

static dlsym_fn resolve_real_dlsym(void)
{
    static const char *const versions[] = {"GLIBC_2.34", "GLIBC_2.2.5", "GLIBC_2.17"};
    dlsym_fn fn = NULL;
    for (size_t i = 0; fn == NULL && i < sizeof versions / sizeof versions[0]; i++)
        fn = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", versions[i]);
    atomic_store(&real_dlsym, fn);
    return fn;
}

void *lv_real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (fn == NULL && (fn = resolve_real_dlsym()) == NULL)
        return NULL;
    return fn(handle, name);
}

static _Atomic(void *) cuda_lib, nvml_lib;

/* Is handle the already-loaded library soname? (RTLD_NOLOAD never loads anything.) */
static bool handle_is(void *handle, const char *soname, _Atomic(void *) *cache)
{
    void *h = atomic_load_explicit(cache, memory_order_relaxed);
    if (h == NULL) {
        h = dlopen(soname, RTLD_NOLOAD | RTLD_LAZY);
        if (h == NULL)
            return false;
        atomic_store(cache, h); /* keeps the reference: the library stays mapped */
    }
    return handle == h;
}

static void *hooked(void *handle, const char *name)
{
    if (name == NULL || handle == RTLD_NEXT || handle == RTLD_DEFAULT)
        return NULL;
    if (name[0] == 'c' && name[1] == 'u') {
        void *w = lv_cuda_wrapper(name);
        if (w != NULL && handle_is(handle, "libcuda.so.1", &cuda_lib) && lv_load_real())
            return w;
    } else if (name[0] == 'n' && strncmp(name, "nvml", 4) == 0) {
        void *w = lv_nvml_wrapper(name);
        if (w != NULL && handle_is(handle, "libnvidia-ml.so.1", &nvml_lib) && lv_load_real())
            return w;
    }
    return NULL;
}

LV_EXPORT void *lv_dlsym_current(void *handle, const char *name);
LV_EXPORT void *lv_dlsym_old(void *handle, const char *name);

/* Both definitions end in a tail call to glibc's dlsym (this file is built with -O2 and
 * sibling calls on, see CMakeLists.txt): glibc reads its caller's address to resolve
 * RTLD_NEXT, and that caller must stay the program, not libvgpu. */
LV_EXPORT void *lv_dlsym_current(void *handle, const char *name)
{
    void *w = hooked(handle, name);
    if (w != NULL)
        return w;
    dlsym_fn fn = atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (LV_UNLIKELY(fn == NULL))
        fn = resolve_real_dlsym();
    return fn(handle, name);
}

LV_EXPORT void *lv_dlsym_old(void *handle, const char *name)
{
    void *w = hooked(handle, name);
    if (w != NULL)
        return w;
    dlsym_fn fn = atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (LV_UNLIKELY(fn == NULL))
        fn = resolve_real_dlsym();
    return fn(handle, name);
}

#if defined(__x86_64__)
__asm__(".symver lv_dlsym_current, dlsym@@GLIBC_2.34");
__asm__(".symver lv_dlsym_old, dlsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver lv_dlsym_current, dlsym@@GLIBC_2.34");
__asm__(".symver lv_dlsym_old, dlsym@GLIBC_2.17");
#endif
