/* How programs reach libvgpu's wrappers, besides linking: cuGetProcAddress, dlsym and
 * dlvsym.
 *
 * cuGetProcAddress(_v2): the real driver is asked first, with the caller's symbol,
 * cudaVersion and flags, so the driver alone decides which ABI variant (cuMemAlloc or
 * cuMemAlloc_v2, legacy or per-thread stream) the caller gets. libvgpu then looks the
 * returned pointer up among the real entry points it intercepts and, only on an exact
 * match, hands out its wrapper of that same exported name. A wrapper of another ABI can
 * therefore never be handed out, and everything not intercepted goes back untouched.
 *
 * dlsym and dlvsym: a symbol lookup must never hand out the driver's own entry point of a
 * function libvgpu wraps, however it is asked: on a handle (libcuda.so.1 by name, a copy
 * loaded by path, a dlmopen namespace's), RTLD_DEFAULT, or RTLD_NEXT from any object
 * (the program, a library it links, a dlopened one), at any version string. RTLD_NEXT is
 * the subtle one: glibc resolves it after the caller's own object, so from a library that
 * comes after libvgpu in the search order it finds libcuda, not libvgpu. libvgpu defines
 * both functions (at glibc's symbol versions, so it interposes on the current and the old
 * binding) and splits the names in two:
 *   - a name libvgpu wraps (vgpu.h's hook lists), and the lookup functions themselves
 *     (dlsym, dlvsym: otherwise glibc's own dlsym, found through a lookup, would find the
 *     driver): glibc answers the lookup from libvgpu's place (for RTLD_NEXT: the objects
 *     after libvgpu; failing that, libvgpu itself when the caller comes before it, and
 *     for RTLD_NEXT and RTLD_DEFAULT the caller's own object and its dependencies, the
 *     caller found from its return address), and any definition found outside libvgpu
 *     is replaced by libvgpu's function of that name. Not found stays not
 * found (NULL, glibc's dlerror), so a program probing for an entry point the driver lacks still
 * learns that.
 *   - every other name: a tail call into glibc, so that glibc reads the real caller's
 *     return address and RTLD_NEXT resolves relative to the real caller.
 * libvgpu's own lookups of the driver (core.c) call glibc's functions directly, found in
 * glibc's dynamic symbol table (below), never through these definitions: no recursion.
 *
 * Outside what a lookup can answer: code running in another link-map namespace
 * (dlmopen) binds to that namespace's copy of the driver without asking libvgpu, and a
 * program that reads a driver's symbol table itself or calls its ioctls skips every
 * interposition. docs/security.md, "Symbols however they are found", says what guards
 * those (the watchdog). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "libvgpu/vgpu.h"

/* String comparisons of this file: a sanitizer runtime loaded ahead of libc intercepts
 * strcmp, and its own start-up calls dlsym (RTLD_NEXT) before that interceptor works. */
static bool same_str(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b)
        a++, b++;
    return *a == *b;
}

static bool has_prefix(const char *s, const char *prefix)
{
    while (*prefix != '\0' && *s == *prefix)
        s++, prefix++;
    return *prefix == '\0';
}

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
        if (same_str(cuda_hooks[i].name, name))
            return cuda_hooks[i].wrapper;
    return NULL;
}

void *lv_nvml_wrapper(const char *name)
{
    for (size_t i = 0; i < N_NVML; i++)
        if (same_str(nvml_hooks[i].name, name))
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

/* ---- glibc's own lookup functions ---- */

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
static _Atomic(void *) real_dlsym;  /* a dlsym_fn */
static _Atomic(void *) real_dlvsym; /* a dlvsym_fn */

static uint32_t gnu_hash(const char *s)
{
    uint32_t h = 5381;
    for (; *s != '\0'; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

/* A dynamic-section address: glibc relocates these in place on most architectures, not
 * on those whose dynamic section is read-only; a value below the load base is unrelocated. */
static uintptr_t dyn_addr(const struct link_map *map, ElfW(Addr) ptr)
{
    return ptr < map->l_addr ? map->l_addr + ptr : ptr;
}

static void self_marker(void)
{
}

/* Is map the object whose DT_SONAME is soname? */
static bool soname_is(const struct link_map *map, const char *soname)
{
    const char *strtab = NULL;
    ElfW(Xword) name = 0;
    bool has_name = false;
    if (map->l_ld == NULL)
        return false;
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_STRTAB)
            strtab = (const char *)dyn_addr(map, d->d_un.d_ptr);
        else if (d->d_tag == DT_SONAME) {
            name = d->d_un.d_val;
            has_name = true;
        }
    }
    return strtab != NULL && has_name && same_str(strtab + name, soname);
}

/* libc's link map, found by walking the loaded objects from libvgpu's own: no function
 * that a sanitizer runtime intercepts is called (its dlsym(RTLD_NEXT) calls during its own
 * start-up come here before its interceptors work). */
static const struct link_map *libc_map(void)
{
    Dl_info info;
    struct link_map *map = NULL;
    if (dladdr1((void *)self_marker, &info, (void **)&map, RTLD_DL_LINKMAP) == 0 || map == NULL)
        return NULL;
    while (map->l_prev != NULL)
        map = map->l_prev;
    for (; map != NULL; map = map->l_next)
        if (soname_is(map, "libc.so.6"))
            return map;
    return NULL;
}

/* The function name as glibc (libc.so.6) defines it, read from libc's dynamic symbol table
 * (GNU hash). libvgpu defines dlsym and dlvsym itself, and in ELF a library's references
 * to a name it exports bind to its own definition, so neither glibc function can be found
 * by a lookup; both versions of each are the same code. NULL when the table cannot be
 * read. */
static void *glibc_function(const char *name)
{
    const struct link_map *map = libc_map();
    if (map == NULL || map->l_ld == NULL)
        return NULL;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    const uint32_t *hash = NULL;
    for (const ElfW(Dyn) *d = map->l_ld; d->d_tag != DT_NULL; d++) {
        if (d->d_tag == DT_SYMTAB)
            symtab = (const ElfW(Sym) *)dyn_addr(map, d->d_un.d_ptr);
        else if (d->d_tag == DT_STRTAB)
            strtab = (const char *)dyn_addr(map, d->d_un.d_ptr);
        else if (d->d_tag == DT_GNU_HASH)
            hash = (const uint32_t *)dyn_addr(map, d->d_un.d_ptr);
    }
    if (symtab == NULL || strtab == NULL || hash == NULL || hash[0] == 0)
        return NULL;
    uint32_t nbuckets = hash[0], symoffset = hash[1], bloom_words = hash[2];
    const uint32_t *buckets = (const uint32_t *)((const ElfW(Addr) *)(hash + 4) + bloom_words);
    const uint32_t *chain = buckets + nbuckets;
    uint32_t h = gnu_hash(name);
    for (uint32_t i = buckets[h % nbuckets]; i != 0 && i >= symoffset; i++) {
        uint32_t link = chain[i - symoffset];
        const ElfW(Sym) *sym = &symtab[i];
        if ((link | 1) == (h | 1) && sym->st_shndx != SHN_UNDEF &&
            ELF64_ST_TYPE(sym->st_info) == STT_FUNC && same_str(strtab + sym->st_name, name))
            return (void *)(map->l_addr + sym->st_value);
        if ((link & 1) != 0)
            break; /* end of this hash's chain */
    }
    return NULL;
}

static void say_no_lookup(void)
{
    static const char line[] = "vgpu: glibc's dlsym/dlvsym not found; symbol lookups fail\n";
    static _Atomic bool said;
    if (!atomic_exchange(&said, true))
        (void)!write(2, line, sizeof line - 1);
}

/* glibc's function name (glibc_function), looked up on first use and kept in *slot. */
static void *glibc_kept(_Atomic(void *) *slot, const char *name)
{
    void *fn = atomic_load_explicit(slot, memory_order_relaxed);
    if (LV_UNLIKELY(fn == NULL)) {
        fn = glibc_function(name);
        if (fn == NULL)
            say_no_lookup();
        atomic_store(slot, fn);
    }
    return fn;
}

static dlsym_fn glibc_dlsym(void)
{
    return (dlsym_fn)glibc_kept(&real_dlsym, "dlsym");
}

static dlvsym_fn glibc_dlvsym(void)
{
    return (dlvsym_fn)glibc_kept(&real_dlvsym, "dlvsym");
}

void *lv_real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = glibc_dlsym();
    return fn != NULL ? fn(handle, name) : NULL;
}

/* ---- names whose lookups libvgpu answers ---- */

LV_EXPORT void *lv_dlsym_current(void *handle, const char *name);
LV_EXPORT void *lv_dlsym_old(void *handle, const char *name);
LV_EXPORT void *lv_dlvsym_current(void *handle, const char *name, const char *version);
LV_EXPORT void *lv_dlvsym_old(void *handle, const char *name, const char *version);

/* libvgpu's function for a looked-up name, or NULL for a name glibc answers alone. The
 * GLIBC_PRIVATE aliases of older glibc take the same arguments as the public functions. */
static void *ours_for(const char *name)
{
    if (LV_UNLIKELY(name == NULL))
        return NULL;
    switch (name[0]) {
    case 'c':
        return name[1] == 'u' ? lv_cuda_wrapper(name) : NULL;
    case 'n':
        return has_prefix(name, "nvml") ? lv_nvml_wrapper(name) : NULL;
    case 'd':
        if (same_str(name, "dlsym"))
            return (void *)lv_dlsym_current;
        return same_str(name, "dlvsym") ? (void *)lv_dlvsym_current : NULL;
    case '_':
        if (same_str(name, "__libc_dlsym"))
            return (void *)lv_dlsym_current;
        return same_str(name, "__libc_dlvsym") ? (void *)lv_dlvsym_current : NULL;
    default:
        return NULL;
    }
}

/* Is addr inside libvgpu? */
static bool in_self(void *addr)
{
    static _Atomic(void *) self_base;
    Dl_info info;
    void *base = atomic_load_explicit(&self_base, memory_order_relaxed);
    if (base == NULL) {
        if (dladdr((void *)self_marker, &info) == 0)
            return false;
        base = info.dli_fbase;
        atomic_store(&self_base, base);
    }
    return dladdr(addr, &info) != 0 && info.dli_fbase == base;
}

static void *glibc_lookup(void *handle, const char *name, const char *version)
{
    if (version != NULL) {
        dlvsym_fn fn = glibc_dlvsym();
        return fn != NULL ? fn(handle, name, version) : NULL;
    }
    dlsym_fn fn = glibc_dlsym();
    return fn != NULL ? fn(handle, name) : NULL;
}

/* RTLD_NEXT and RTLD_DEFAULT from a library dlopened with its own dependencies (say,
 * libcuda.so.1 loaded RTLD_LOCAL) can see definitions that libvgpu's place in the global
 * scope does not: the caller's object and what it depends on. */
static void *lookup_from_caller(void *caller, const char *name, const char *version)
{
    Dl_info info;
    if (caller == NULL || dladdr(caller, &info) == 0 || info.dli_fname == NULL ||
        info.dli_fname[0] == '\0' || in_self(caller))
        return NULL;
    void *h = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    if (h == NULL)
        return NULL;
    void *r = glibc_lookup(h, name, version);
    dlclose(h);
    return r;
}

static bool segment_holds(const struct dl_phdr_info *info, const void *addr)
{
    for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && (uintptr_t)addr >= start &&
            (uintptr_t)addr - start < ph->p_memsz)
            return true;
    }
    return false;
}

struct load_order {
    const void *caller, *self;
    int caller_at, self_at, index;
};

static int note_order(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    struct load_order *o = data;
    if (o->caller_at < 0 && segment_holds(info, o->caller))
        o->caller_at = o->index;
    if (o->self_at < 0 && segment_holds(info, o->self))
        o->self_at = o->index;
    o->index++;
    return o->caller_at >= 0 && o->self_at >= 0; /* both found: stop */
}

/* Does the caller's object come before libvgpu (the program, a library preloaded ahead of
 * it)? Then glibc's RTLD_NEXT from it reaches libvgpu's own definition, also before any
 * driver is loaded. dl_iterate_phdr walks the objects in load order under glibc's lock. */
static bool precedes_self(const void *caller)
{
    struct load_order o = {caller, (const void *)self_marker, -1, -1, 0};
    if (caller == NULL)
        return false;
    (void)dl_iterate_phdr(note_order, &o);
    return o.caller_at >= 0 && o.self_at >= 0 && o.caller_at < o.self_at;
}

/* The answer to a lookup of a name libvgpu answers (ours: libvgpu's function of it). */
__attribute__((noinline)) static void *lookup_ours(void *handle, const char *name,
                                                   const char *version, void *ours, void *caller)
{
    void *r = glibc_lookup(handle, name, version);
    if (r == NULL && (handle == RTLD_NEXT || handle == RTLD_DEFAULT)) {
        if (handle == RTLD_NEXT && precedes_self(caller))
            r = glibc_lookup(RTLD_DEFAULT, name, version); /* libvgpu's, at that version */
        if (r == NULL)
            r = lookup_from_caller(caller, name, version);
        if (r != NULL)
            (void)dlerror(); /* the first lookup's failure is not this call's outcome */
        else
            (void)glibc_lookup(handle, name, version); /* its message for dlerror */
    }
    if (r == NULL || in_self(r))
        return r;
    return ours;
}

/* All four definitions end, for names glibc answers alone, in a tail call to glibc (this
 * file is built with -O2 and sibling calls on, see CMakeLists.txt): glibc reads its
 * caller's address to resolve RTLD_NEXT, and that caller must stay the program. */
LV_EXPORT void *lv_dlsym_current(void *handle, const char *name)
{
    void *ours = ours_for(name);
    if (LV_UNLIKELY(ours != NULL))
        return lookup_ours(handle, name, NULL, ours, __builtin_return_address(0));
    dlsym_fn fn = (dlsym_fn)atomic_load_explicit(&real_dlsym, memory_order_relaxed);
    if (LV_UNLIKELY(fn == NULL) && (fn = glibc_dlsym()) == NULL)
        return NULL;
    return fn(handle, name);
}

/* The older versions are the same code under a second name (glibc's versions of each
 * function are the same code too). */
LV_EXPORT void *lv_dlsym_old(void *handle, const char *name)
    __attribute__((alias("lv_dlsym_current")));

LV_EXPORT void *lv_dlvsym_current(void *handle, const char *name, const char *version)
{
    void *ours = ours_for(name);
    if (LV_UNLIKELY(ours != NULL))
        return lookup_ours(handle, name, version, ours, __builtin_return_address(0));
    dlvsym_fn fn = (dlvsym_fn)atomic_load_explicit(&real_dlvsym, memory_order_relaxed);
    if (LV_UNLIKELY(fn == NULL) && (fn = glibc_dlvsym()) == NULL)
        return NULL;
    return fn(handle, name, version);
}

LV_EXPORT void *lv_dlvsym_old(void *handle, const char *name, const char *version)
    __attribute__((alias("lv_dlvsym_current")));

#if defined(__x86_64__)
__asm__(".symver lv_dlsym_current, dlsym@@GLIBC_2.34");
__asm__(".symver lv_dlsym_old, dlsym@GLIBC_2.2.5");
__asm__(".symver lv_dlvsym_current, dlvsym@@GLIBC_2.34");
__asm__(".symver lv_dlvsym_old, dlvsym@GLIBC_2.2.5");
#elif defined(__aarch64__)
__asm__(".symver lv_dlsym_current, dlsym@@GLIBC_2.34");
__asm__(".symver lv_dlsym_old, dlsym@GLIBC_2.17");
__asm__(".symver lv_dlvsym_current, dlvsym@@GLIBC_2.34");
__asm__(".symver lv_dlvsym_old, dlvsym@GLIBC_2.17");
#endif
