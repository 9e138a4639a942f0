/* fakegpu libcuda: device, pool, array, VMM and host memory; memset and memcpy.
 *
 * Device memory is anonymous host memory mapped MAP_NORESERVE (pages appear only when
 * touched), its address used as the CUdeviceptr, so copies in every direction are plain
 * memmove and a whole simulated card fits in address space alone. Every allocation is
 * charged to the shared state first: past the card's capacity the state says -ENOMEM and
 * the caller gets CUDA_ERROR_OUT_OF_MEMORY. The charge is the size asked for (pitch x
 * height for pitched memory, element size x extent for arrays), so "total minus context
 * cost" is exactly what fits.
 *
 * Pools: a block freed with cuMemFreeAsync goes back to its pool and stays charged; at
 * each synchronisation a pool gives back to the device whatever it holds above its
 * release threshold (default 0: everything). VMM: cuMemCreate makes a memfd of the
 * size, cuMemAddressReserve a PROT_NONE range, and cuMemMap maps the memfd into it. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "abi/cuda_array.h"
#include "fakegpu/cuda_internal.h"

static void *map_anon(size_t size, bool low32)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (low32)
        flags |= MAP_32BIT; /* the 32-bit (v1) entry points need addresses below 4 GiB */
    void *p = mmap(NULL, size ? size : 1, PROT_READ | PROT_WRITE, flags, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* ---- device allocations ---- */

/* Charges bytes to the device (the state reclaims dead processes' memory first when the
 * card looks full). An MPS client is held to its pinned device memory limit first: what
 * it has charged on the device plus bytes must fit (-ENOMEM otherwise, as the card being
 * full). */
static int reserve(int dev, uint64_t bytes)
{
    uint64_t *used = &fg_g.mps_used[dev];
    uint64_t limit = fg_g.mps.limit[dev];
    uint64_t cur = __atomic_load_n(used, __ATOMIC_RELAXED);
    do {
        if (limit != UINT64_MAX && (bytes > limit || cur > limit - bytes))
            return -ENOMEM;
    } while (!__atomic_compare_exchange_n(used, &cur, cur + bytes, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    int rc = fg_mem_reserve(fg_g.st, fg_phys(dev), bytes);
    if (rc != 0)
        __atomic_sub_fetch(used, bytes, __ATOMIC_RELAXED);
    return rc;
}

/* Gives a charge made by reserve back. */
static void release(int dev, uint64_t bytes)
{
    if (fg_mem_release(fg_g.st, fg_phys(dev), bytes) == 0)
        __atomic_sub_fetch(&fg_g.mps_used[dev], bytes, __ATOMIC_RELAXED);
}

/* Charges and maps; registers the allocation (takes the lock). */
static CUresult dev_alloc(int dev, size_t size, uint64_t charge, bool managed, struct fg_pool *pool,
                          bool low32, CUdeviceptr *out)
{
    struct fg_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = map_anon(size, low32);
    if (!p) {
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = (uintptr_t)p;
    a->size = size;
    a->map_size = size ? size : 1;
    a->dev = dev;
    a->managed = managed;
    a->pool = pool;
    fg_lock();
    CUresult r = CUDA_SUCCESS;
    if (pool && pool->cached >= charge) {
        pool->cached -= charge; /* reuse what the pool still holds */
    } else {
        r = fg_from_errno(reserve(dev, charge));
    }
    if (r == CUDA_SUCCESS) {
        a->charged = charge;
        if (pool) {
            pool->used += charge;
            if (pool->used > pool->used_high)
                pool->used_high = pool->used;
            if (pool->used + pool->cached > pool->reserved_high)
                pool->reserved_high = pool->used + pool->cached;
        }
        if (!fg_reg_add(a->base, FG_K_DEVMEM, a)) {
            release(dev, charge);
            r = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        munmap(p, a->map_size);
        free(a);
        return r;
    }
    *out = (CUdeviceptr)a->base;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    return dev_alloc(c->dev, bytesize, bytesize, false, NULL, false, dptr);
}

FG_API CUresult cuMemAlloc(CUdeviceptr_v1 *dptr, unsigned int bytesize)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUdeviceptr p;
    r = dev_alloc(c->dev, bytesize, bytesize, false, NULL, true, &p);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr_v1)p;
    return r;
}

FG_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                   size_t Height, unsigned int ElementSizeBytes)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + 511) & ~(size_t)511; /* rows aligned to 512 bytes */
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = dev_alloc(c->dev, pitch * Height, pitch * Height, false, NULL, false, dptr);
    if (r == CUDA_SUCCESS)
        *pPitch = pitch;
    return r;
}

FG_API CUresult cuMemAllocPitch(CUdeviceptr_v1 *dptr, unsigned int *pPitch,
                                unsigned int WidthInBytes, unsigned int Height,
                                unsigned int ElementSizeBytes)
{
    CUdeviceptr p;
    size_t pitch;
    if (!dptr || !pPitch)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemAllocPitch_v2(&p, &pitch, WidthInBytes, Height, ElementSizeBytes);
    if (r != CUDA_SUCCESS)
        return r;
    if (p > UINT32_MAX) {
        cuMemFree_v2(p);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    *dptr = (CUdeviceptr_v1)p;
    *pPitch = (unsigned int)pitch;
    return r;
}

FG_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    return dev_alloc(c->dev, bytesize, bytesize, true, NULL, false, dptr);
}

/* Removes a device allocation and gives its charge back (or to its pool). */
static CUresult dev_free(uintptr_t p, bool async)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (p == 0)
        return CUDA_SUCCESS;
    fg_lock();
    struct fg_alloc *a = fg_reg_get(p, FG_K_DEVMEM);
    if (!a) {
        fg_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fg_reg_del(p, FG_K_DEVMEM);
    if (a->pool) {
        a->pool->used -= a->charged;
        a->pool->cached += a->charged; /* stays charged until the pool releases it */
    } else {
        release(a->dev, a->charged);
    }
    fg_unlock();
    (void)async;
    munmap((void *)a->base, a->map_size);
    free(a);
    return CUDA_SUCCESS;
}

static bool alloc_holds(void *value, const void *arg)
{
    const struct fg_alloc *a = value;
    const uintptr_t *range = arg; /* [p, p + n) */
    return range[0] >= a->base && range[0] - a->base < (a->size ? a->size : 1) &&
           range[1] <= a->size - (range[0] - a->base);
}

static struct fg_alloc *find_alloc(uintptr_t p, size_t n, enum fg_kind kind)
{
    struct fg_alloc *a = fg_reg_get(p, kind);
    if (a && n <= a->size)
        return a;
    uintptr_t range[2] = {p, n};
    return fg_reg_find(kind, alloc_holds, range);
}

bool fg_range_known(uintptr_t p, size_t n)
{
    return find_alloc(p, n, FG_K_DEVMEM) || find_alloc(p, n, FG_K_MAPPING) ||
           find_alloc(p, n, FG_K_HOSTMEM);
}

/* ---- legacy IPC ----
 *
 * A handle names the exporter (pid), the physical device and the allocation (its address
 * and size there). Contents are not shared (each process's device memory is its own host
 * memory): what is modelled is who holds memory. The importer holds the allocation's size
 * from its open until its last close, charged to it (NVML lists it for the importer), as
 * the real driver keeps an exported allocation while an importer has it open. A handle
 * opened again by the importer returns the same address and counts the open. */
#define IPC_MAGIC  0x6670676970636d31ULL /* "fpgipcm1" */
#define IPC_OPENED 64                    /* imports one process holds at once */

struct ipc_handle {
    uint64_t magic;
    int64_t pid;
    int64_t phys;
    uint64_t base, size;
    uint64_t serial; /* the allocation's: an address freed and allocated again is another */
};
_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUipcMemHandle), "IPC handle too large");
_Static_assert(sizeof(struct ipc_handle) <= sizeof(CUmemPoolPtrExportData),
               "pool export too small");

static struct {
    struct ipc_handle from;
    CUdeviceptr at;
    unsigned opens;
} ipc_opened[IPC_OPENED]; /* under fg_lock */

#define IPC_EXPORTED 256 /* allocations one process exports at once */
static struct {
    uintptr_t base;
    uint64_t serial;
} ipc_exported[IPC_EXPORTED]; /* under fg_lock; an entry goes when its allocation is freed */
static uint64_t ipc_serial;

/* The serial of the allocation at base, given at its first export; 0 when the table is
 * full. */
static uint64_t ipc_serial_of(uintptr_t base)
{
    int free_slot = -1;
    for (int i = 0; i < IPC_EXPORTED; i++) {
        if (ipc_exported[i].serial != 0 && ipc_exported[i].base == base)
            return ipc_exported[i].serial;
        if (ipc_exported[i].serial == 0 && free_slot < 0)
            free_slot = i;
    }
    if (free_slot < 0)
        return 0;
    ipc_exported[free_slot].base = base;
    ipc_exported[free_slot].serial = ++ipc_serial;
    return ipc_serial;
}

/* The allocation at base is freed: its serial goes (lock held). */
static void ipc_forget(uintptr_t base)
{
    for (int i = 0; base != 0 && i < IPC_EXPORTED; i++)
        if (ipc_exported[i].serial != 0 && ipc_exported[i].base == base)
            ipc_exported[i].serial = 0;
}

static int ipc_find(CUdeviceptr at)
{
    for (int i = 0; i < IPC_OPENED; i++)
        if (ipc_opened[i].opens != 0 && ipc_opened[i].at == at)
            return i;
    return -1;
}

/* Called locked, unlocks: the handle naming allocation a (NULL: one that cannot be
 * exported) into out, the caller's handle type of size bytes. A cuIpcGetMemHandle handle
 * and a cuMemPoolExportPointer one are alike, so either opener checks the same fields. */
static CUresult ipc_export(const struct fg_alloc *a, void *out, size_t size)
{
    struct ipc_handle h = {.magic = IPC_MAGIC, .pid = getpid()};
    bool ok = a != NULL;
    if (ok) {
        h.phys = fg_phys(a->dev);
        h.base = a->base;
        h.size = a->size;
        h.serial = ipc_serial_of(a->base);
        ok = h.serial != 0;
    }
    fg_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    memset(out, 0, size);
    memcpy(out, &h, sizeof h);
    return CUDA_SUCCESS;
}

FG_API CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pHandle)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_alloc *a = find_alloc((uintptr_t)dptr, 0, FG_K_DEVMEM);
    bool ok = a && !a->managed && !a->pool && ipc_find(a->base) < 0;
    return ipc_export(ok ? a : NULL, pHandle, sizeof *pHandle);
}

FG_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct ipc_handle h;
    memcpy(&h, &handle, sizeof h);
    if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != 0 ||
        h.magic != IPC_MAGIC || h.size == 0 || h.pid <= 0 || h.pid > INT32_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* a process cannot open its own handle */
    if (kill((pid_t)h.pid, 0) != 0 && errno == ESRCH)
        return CUDA_ERROR_INVALID_HANDLE; /* the exporter is gone, and its memory */
    if (h.phys != fg_phys(c->dev))
        return CUDA_ERROR_INVALID_DEVICE;
    fg_lock();
    int free_slot = -1;
    for (int i = 0; i < IPC_OPENED; i++) {
        if (ipc_opened[i].opens != 0 && memcmp(&ipc_opened[i].from, &h, sizeof h) == 0) {
            ipc_opened[i].opens++;
            *pdptr = ipc_opened[i].at;
            fg_unlock();
            return CUDA_SUCCESS;
        }
        if (ipc_opened[i].opens == 0 && free_slot < 0)
            free_slot = i;
    }
    if (free_slot >= 0)
        ipc_opened[free_slot].opens = 1; /* taken; filled below */
    fg_unlock();
    if (free_slot < 0)
        return CUDA_ERROR_OUT_OF_MEMORY; /* the driver: too many peers */
    CUdeviceptr at;
    r = dev_alloc(c->dev, (size_t)h.size, h.size, false, NULL, false, &at);
    fg_lock();
    if (r == CUDA_SUCCESS) {
        ipc_opened[free_slot].from = h;
        ipc_opened[free_slot].at = at;
        *pdptr = at;
    } else {
        ipc_opened[free_slot].opens = 0;
    }
    fg_unlock();
    return r;
}

FG_API CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

FG_API CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    int i = ipc_find(dptr);
    bool last = i >= 0 && --ipc_opened[i].opens == 0;
    fg_unlock();
    if (i < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return last ? dev_free((uintptr_t)dptr, false) : CUDA_SUCCESS;
}

static bool graph_free(uintptr_t p);

/* cuMemFree of an address cuIpcOpenMemHandle returned is refused: it is closed with
 * cuIpcCloseMemHandle. */
static CUresult dev_free_not_ipc(uintptr_t p)
{
    fg_lock();
    bool ipc = p != 0 && ipc_find((CUdeviceptr)p) >= 0;
    if (!ipc)
        ipc_forget(p);
    fg_unlock();
    if (ipc)
        return CUDA_ERROR_INVALID_VALUE;
    return graph_free(p) ? CUDA_SUCCESS : dev_free(p, false);
}

FG_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    return dev_free_not_ipc((uintptr_t)dptr);
}

FG_API CUresult cuMemFree(CUdeviceptr_v1 dptr)
{
    return dev_free_not_ipc((uintptr_t)dptr);
}

FG_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_alloc *a = find_alloc((uintptr_t)dptr, 0, FG_K_DEVMEM);
    if (!a)
        a = find_alloc((uintptr_t)dptr, 0, FG_K_MAPPING);
    if (a) {
        if (pbase)
            *pbase = (CUdeviceptr)a->base;
        if (psize)
            *psize = a->size;
    }
    fg_unlock();
    return a ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

FG_API CUresult cuMemGetAddressRange(CUdeviceptr_v1 *pbase, unsigned int *psize,
                                     CUdeviceptr_v1 dptr)
{
    CUdeviceptr base;
    size_t size;
    CUresult r = cuMemGetAddressRange_v2(&base, &size, dptr);
    if (r == CUDA_SUCCESS) {
        if (pbase)
            *pbase = (CUdeviceptr_v1)base;
        if (psize)
            *psize = (unsigned int)size;
    }
    return r;
}

FG_API CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t used, tot;
    r = fg_from_errno(fg_mem_info(fg_g.st, fg_phys(c->dev), &used, &tot));
    if (r == CUDA_SUCCESS) {
        uint64_t avail = used < tot ? tot - used : 0;
        /* An MPS client sees what its pinned memory limit still allows, the card's size
         * as the total. */
        uint64_t limit = fg_g.mps.limit[c->dev];
        if (limit != UINT64_MAX) {
            uint64_t mine = __atomic_load_n(&fg_g.mps_used[c->dev], __ATOMIC_RELAXED);
            uint64_t left = mine < limit ? limit - mine : 0;
            if (left < avail)
                avail = left;
        }
        *free_bytes = (size_t)avail;
        *total = (size_t)tot;
    }
    return r;
}

FG_API CUresult cuMemGetInfo(unsigned int *free_bytes, unsigned int *total)
{
    size_t f, t;
    if (!free_bytes || !total)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemGetInfo_v2(&f, &t);
    if (r == CUDA_SUCCESS) {
        *free_bytes = f > UINT32_MAX ? UINT32_MAX : (unsigned int)f;
        *total = t > UINT32_MAX ? UINT32_MAX : (unsigned int)t;
    }
    return r;
}

/* ---- pools ---- */

static void pool_release(struct fg_pool *p, uint64_t keep)
{
    uint64_t held = p->used + p->cached;
    if (held <= keep || p->cached == 0)
        return;
    uint64_t give = held - keep < p->cached ? held - keep : p->cached;
    release(p->dev, give);
    p->cached -= give;
}

void fg_pools_trim_all(int dev)
{
    if (!fg_g.inited)
        return;
    fg_lock();
    for (struct fg_pool *p = fg_g.pools; p; p = p->next)
        if (dev < 0 || p->dev == dev)
            pool_release(p, p->threshold);
    fg_unlock();
}

static struct fg_pool *pool_new(int dev, bool is_default)
{
    struct fg_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->dev = dev;
    p->is_default = is_default;
    p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
    if (!fg_reg_add((uintptr_t)p, FG_K_POOL, p)) {
        free(p);
        return NULL;
    }
    p->next = fg_g.pools;
    fg_g.pools = p;
    return p;
}

static struct fg_pool *default_pool(int dev)
{
    if (!fg_g.default_pool[dev])
        fg_g.default_pool[dev] = pool_new(dev, true);
    return fg_g.default_pool[dev];
}

/* *pool_out = pick(dev), made under the lock: cuDeviceGetDefaultMemPool and
 * cuDeviceGetMemPool. */
static CUresult get_pool(CUmemoryPool *pool_out, CUdevice dev, struct fg_pool *(*pick)(int))
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool_out)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_pool *p = pick(dev);
    fg_unlock();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool_out = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
    return get_pool(pool_out, dev, default_pool);
}

/* The pool cuMemAllocAsync draws from: the device's current pool (cuDeviceSetMemPool),
 * its default pool until one is set. Lock held. */
static struct fg_pool *current_pool(int dev)
{
    return fg_g.current_pool[dev] ? fg_g.current_pool[dev] : default_pool(dev);
}

FG_API CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
    return get_pool(pool, dev, current_pool);
}

FG_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    if (p && p->dev == dev)
        fg_g.current_pool[dev] = p;
    fg_unlock();
    return p && p->dev == dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FG_API CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool || !poolProps || poolProps->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    r = fg_check_device(poolProps->location.id);
    if (r != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_pool *p = pool_new(poolProps->location.id, false);
    fg_unlock();
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *pool = (CUmemoryPool)p;
    return CUDA_SUCCESS;
}

static bool alloc_in_pool(void *value, const void *arg)
{
    return ((struct fg_alloc *)value)->pool == arg;
}

/* Pools shared between processes. The pool's handle is a memfd named after the physical
 * device; an imported pool is a pool of the importer's own on that device. A pointer's
 * export data is that of legacy IPC (the exporter, the device, the allocation and its
 * serial); the importer gets memory of the allocation's size, charged to it until it frees
 * the address (cuMemFree, cuMemFreeAsync), as the driver keeps the allocation while an
 * importer holds it. The bytes are not shared. */
FG_API CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    int phys = p ? fg_phys(p->dev) : -1;
    fg_unlock();
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    char name[64];
    snprintf(name, sizeof name, "fakegpu-pool-%d", phys);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *(int *)handle_out = fd;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
                                                   CUmemAllocationHandleType handleType,
                                                   unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pool_out || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", (int)(intptr_t)handle);
    ssize_t n = readlink(link, target, sizeof target - 1);
    int phys = -1, dev = -1;
    if (n > 0) {
        target[n] = '\0';
        if (sscanf(target, "/memfd:fakegpu-pool-%d", &phys) != 1)
            phys = -1;
    }
    for (int i = 0; phys >= 0 && i < fg_g.ndev; i++)
        if (fg_g.phys[i] == phys)
            dev = i;
    if (dev < 0)
        return CUDA_ERROR_INVALID_VALUE;
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    return cuMemPoolCreate(pool_out, &props);
}

FG_API CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!shareData_out)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_alloc *a = fg_reg_get((uintptr_t)ptr, FG_K_DEVMEM);
    return ipc_export(a && a->pool ? a : NULL, shareData_out, sizeof *shareData_out);
}

FG_API CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool,
                                       CUmemPoolPtrExportData *shareData)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr_out || !shareData)
        return CUDA_ERROR_INVALID_VALUE;
    struct ipc_handle h;
    memcpy(&h, shareData, sizeof h);
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    int dev = p ? p->dev : -1;
    fg_unlock();
    if (dev < 0 || h.magic != IPC_MAGIC || h.size == 0 || h.pid <= 0 || h.pid > INT32_MAX ||
        h.phys != fg_phys(dev))
        return CUDA_ERROR_INVALID_VALUE;
    if (h.pid == getpid())
        return CUDA_ERROR_INVALID_VALUE;
    if (kill((pid_t)h.pid, 0) != 0 && errno == ESRCH)
        return CUDA_ERROR_INVALID_HANDLE;
    return dev_alloc(dev, (size_t)h.size, h.size, false, NULL, false, ptr_out);
}

FG_API CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    if (!p || p->is_default) {
        fg_unlock();
        return p ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
    }
    pool_release(p, 0);
    /* Blocks still out are charged on their own from now on. */
    struct fg_alloc *a;
    while ((a = fg_reg_find(FG_K_DEVMEM, alloc_in_pool, p)) != NULL)
        a->pool = NULL;
    fg_reg_del((uintptr_t)p, FG_K_POOL);
    if (fg_g.current_pool[p->dev] == p)
        fg_g.current_pool[p->dev] = NULL; /* the default pool is current again */
    for (struct fg_pool **pp = &fg_g.pools; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    fg_unlock();
    free(p);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    if (p)
        pool_release(p, minBytesToKeep);
    fg_unlock();
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult pool_attr(CUmemoryPool pool, CUmemPool_attribute attr, void *value, bool set)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_pool *p = fg_reg_get((uintptr_t)pool, FG_K_POOL);
    if (!p) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    cuuint64_t *u64 = value;
    int *i32 = value;
    switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
        if (set)
            p->reuse[attr - 1] = *i32 != 0;
        else
            *i32 = p->reuse[attr - 1];
        break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        if (set)
            p->threshold = *u64;
        else
            *u64 = p->threshold;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
        if (set)
            r = CUDA_ERROR_INVALID_VALUE;
        else
            *u64 = attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ? p->used : p->used + p->cached;
        break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH: {
        uint64_t *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? &p->used_high : &p->reserved_high;
        if (set && *u64 != 0)
            r = CUDA_ERROR_INVALID_VALUE; /* may only be reset to 0 */
        else if (set)
            *high = attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH ? p->used : p->used + p->cached;
        else
            *u64 = *high;
        break;
    }
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    fg_unlock();
    return r;
}

FG_API CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attr(pool, attr, value, true);
}

FG_API CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    return pool_attr(pool, attr, value, false);
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream h,
                            bool pt)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s;
    int sid;
    fg_lock();
    r = fg_stream_resolve(c, h, pt, &sid, &s);
    struct fg_pool *p = NULL;
    if (r == CUDA_SUCCESS) {
        p = pool ? fg_reg_get((uintptr_t)pool, FG_K_POOL) : current_pool(c->dev);
        if (!p)
            r = pool ? CUDA_ERROR_INVALID_HANDLE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    return dev_alloc(p->dev, bytesize, bytesize, false, p, false, dptr);
}

FG_API CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream, false);
}

FG_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(dptr, bytesize, NULL, hStream, true);
}

FG_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                        CUstream hStream)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, pool, hStream, false);
}

FG_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                             CUstream hStream)
{
    if (!pool)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_async(dptr, bytesize, pool, hStream, true);
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool pt)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_stream *s;
    int sid;
    fg_lock();
    r = fg_stream_resolve(c, h, pt, &sid, &s);
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    ipc_forget((uintptr_t)dptr);
    fg_unlock();
    return graph_free((uintptr_t)dptr) ? CUDA_SUCCESS : dev_free((uintptr_t)dptr, true);
}

FG_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, false);
}

FG_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(dptr, hStream, true);
}

/* ---- graph memory ---- */

/* A memory allocation node's memory comes from the device's graph pool: taken when the
 * node is added (a real driver maps it at the first launch), it lives until the address
 * is freed (cuMemFree, cuMemFreeAsync) and then stays in the graph pool, charged, until
 * cuDeviceGraphMemTrim; the next node is served from what the pool keeps. The node itself
 * does nothing at launch. cuDeviceGetGraphMemAttribute reports the pool's figures. */
#define GRAPH_ALLOCS 1024 /* live graph allocations of one process */
static struct {
    uintptr_t base;
    uint64_t bytes;
    int dev; /* -1: free entry */
} graph_allocs[GRAPH_ALLOCS];
static uint64_t graph_reserved[FG_MAX_DEVICES], graph_used[FG_MAX_DEVICES];
static uint64_t graph_reserved_high[FG_MAX_DEVICES], graph_used_high[FG_MAX_DEVICES];
static bool graph_inited;

static void graph_init_locked(void)
{
    if (graph_inited)
        return;
    for (int i = 0; i < GRAPH_ALLOCS; i++)
        graph_allocs[i].dev = -1;
    graph_inited = true;
}

/* A free of p: when it is a graph allocation, its memory goes back to the graph pool
 * (still charged) and it is unmapped; true when it was one. */
static bool graph_free(uintptr_t p)
{
    fg_lock();
    graph_init_locked();
    int i = 0;
    while (i < GRAPH_ALLOCS && !(graph_allocs[i].dev >= 0 && graph_allocs[i].base == p))
        i++;
    if (i < GRAPH_ALLOCS) {
        graph_used[graph_allocs[i].dev] -= graph_allocs[i].bytes;
        graph_allocs[i].dev = -1;
    }
    fg_unlock();
    if (i == GRAPH_ALLOCS)
        return false;
    (void)dev_free(p, false); /* charged 0: the graph pool holds the charge */
    return true;
}

FG_API CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
                                       const CUgraphNode *dependencies, size_t numDependencies,
                                       CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraphNode || !nodeParams || nodeParams->bytesize == 0 ||
        (numDependencies > 0 && !dependencies) ||
        nodeParams->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        nodeParams->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        fg_check_device(nodeParams->poolProps.location.id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_VALUE;
    int dev = nodeParams->poolProps.location.id;
    uint64_t bytes = nodeParams->bytesize;
    fg_lock();
    graph_init_locked();
    bool known = fg_reg_get((uintptr_t)hGraph, FG_K_GRAPH) != NULL;
    int slot = 0;
    while (slot < GRAPH_ALLOCS && graph_allocs[slot].dev >= 0)
        slot++;
    if (!known || slot == GRAPH_ALLOCS) {
        fg_unlock();
        return known ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    }
    uint64_t cached = graph_reserved[dev] - graph_used[dev];
    uint64_t need = bytes > cached ? bytes - cached : 0;
    if (need > 0 && (r = fg_from_errno(reserve(dev, need))) != CUDA_SUCCESS) {
        fg_unlock();
        return r;
    }
    graph_reserved[dev] += need;
    graph_used[dev] += bytes;
    graph_allocs[slot].dev = dev; /* taken; its address below */
    graph_allocs[slot].base = 0;
    graph_allocs[slot].bytes = bytes;
    if (graph_reserved[dev] > graph_reserved_high[dev])
        graph_reserved_high[dev] = graph_reserved[dev];
    if (graph_used[dev] > graph_used_high[dev])
        graph_used_high[dev] = graph_used[dev];
    fg_unlock();
    CUdeviceptr p;
    r = dev_alloc(dev, bytes, 0, false, NULL, false, &p);
    fg_lock();
    if (r == CUDA_SUCCESS) {
        graph_allocs[slot].base = (uintptr_t)p;
    } else {
        graph_used[dev] -= bytes; /* what was reserved stays in the pool */
        graph_allocs[slot].dev = -1;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    nodeParams->dptr = p;
    *phGraphNode = (CUgraphNode)(uintptr_t)p; /* opaque to the caller */
    return CUDA_SUCCESS;
}

/* Gives back to the device what the graph pool keeps beyond its live allocations. */
FG_API CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (fg_check_device(device) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    fg_lock();
    uint64_t cached = graph_reserved[device] - graph_used[device];
    if (cached > 0)
        release(device, cached);
    graph_reserved[device] = graph_used[device];
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr,
                                             void *value)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (fg_check_device(device) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    if (!value)
        return CUDA_ERROR_INVALID_VALUE;
    cuuint64_t *out = value;
    fg_lock();
    switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
        *out = graph_used[device];
        break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
        *out = graph_used_high[device];
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
        *out = graph_reserved[device];
        break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
        *out = graph_reserved_high[device];
        break;
    default:
        r = CUDA_ERROR_INVALID_VALUE;
    }
    fg_unlock();
    return r;
}

/* ---- arrays ---- */

/* Bytes of a w x h x d array of `channels` elements of format f; 0 when invalid. */
static size_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels)
{
    size_t elem = (size_t)cu_array_format_bytes(f);
    if (!elem || w == 0 || (channels != 1 && channels != 2 && channels != 4))
        return 0;
    size_t n = elem * channels;
    size_t dims[3] = {w, h ? h : 1, d ? d : 1};
    for (int i = 0; i < 3; i++) {
        if (dims[i] > SIZE_MAX / n)
            return 0;
        n *= dims[i];
    }
    return n;
}

/*
 * Whether the driver accepts an array of these dimensions: the limits compute
 * capability 8.x and 9.x cards report (CUDA C Programming Guide, "Features and Technical
 * Specifications"). A real driver refuses a 2D mipmapped array taller than 32768 with
 * CUDA_ERROR_INVALID_VALUE however much memory is free.
 */
static bool array_dims_ok(size_t w, size_t h, size_t d, bool mipmapped)
{
    if (d)
        return w <= 16384 && h <= 16384 && d <= 16384;
    if (h)
        return mipmapped ? w <= 32768 && h <= 32768 : w <= 131072 && h <= 65536;
    return w <= (mipmapped ? 32768 : 131072);
}

static CUresult array_new(size_t bytes, enum fg_kind kind, void **out)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!out || bytes == 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_array *a = calloc(1, sizeof *a);
    void *data = map_anon(bytes, false);
    if (!a || !data) {
        free(a);
        if (data)
            munmap(data, bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->data = data;
    a->bytes = bytes;
    a->dev = c->dev;
    fg_lock();
    r = fg_from_errno(reserve(c->dev, bytes));
    if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)a, kind, a)) {
        release(c->dev, bytes);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        munmap(data, bytes);
        free(a);
        return r;
    }
    *out = a;
    return CUDA_SUCCESS;
}

static CUresult array_free(uintptr_t h, enum fg_kind kind)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_array *a = fg_reg_get(h, kind);
    if (a) {
        fg_reg_del(h, kind);
        release(a->dev, a->bytes);
    }
    fg_unlock();
    if (!a)
        return CUDA_ERROR_INVALID_HANDLE;
    munmap(a->data, a->bytes);
    free(a);
    return CUDA_SUCCESS;
}

FG_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *d)
{
    if (!pHandle || !d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!array_dims_ok(d->Width, d->Height, 0, false))
        return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = array_bytes(d->Width, d->Height, 1, d->Format, d->NumChannels);
    return array_new(bytes, FG_K_ARRAY, (void **)pHandle);
}

FG_API CUresult cuArrayCreate(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR_v1 *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY_DESCRIPTOR d2 = {d->Width, d->Height, d->Format, d->NumChannels};
    return cuArrayCreate_v2(pHandle, &d2);
}

FG_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    if (!pHandle || !d)
        return CUDA_ERROR_INVALID_VALUE;
    if (!array_dims_ok(d->Width, d->Height, d->Depth, false))
        return CUDA_ERROR_INVALID_VALUE;
    size_t bytes = array_bytes(d->Width, d->Height, d->Depth, d->Format, d->NumChannels);
    return array_new(bytes, FG_K_ARRAY, (void **)pHandle);
}

FG_API CUresult cuArray3DCreate(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR_v1 *d)
{
    if (!d)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d2 = {d->Width,  d->Height,      d->Depth,
                                  d->Format, d->NumChannels, d->Flags};
    return cuArray3DCreate_v2(pHandle, &d2);
}

FG_API CUresult cuArrayDestroy(CUarray hArray)
{
    return array_free((uintptr_t)hArray, FG_K_ARRAY);
}

FG_API CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *d,
                                       unsigned int levels)
{
    if (!pHandle || !d || levels == 0 || !array_dims_ok(d->Width, d->Height, d->Depth, true))
        return CUDA_ERROR_INVALID_VALUE;
    size_t total = 0, w = d->Width, h = d->Height, z = d->Depth;
    for (unsigned i = 0; i < levels; i++) {
        size_t b = array_bytes(w, h, z, d->Format, d->NumChannels);
        if (b == 0 || total + b < total)
            return CUDA_ERROR_INVALID_VALUE;
        total += b;
        w = w > 1 ? w / 2 : 1;
        h = h > 1 ? h / 2 : h;
        z = z > 1 ? z / 2 : z;
    }
    return array_new(total, FG_K_MIPMAP, (void **)pHandle);
}

FG_API CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
    return array_free((uintptr_t)hMipmappedArray, FG_K_MIPMAP);
}

/* ---- virtual memory management ---- */

static CUresult check_prop(const CUmemAllocationProp *prop)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
        prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (fg_check_device(prop->location.id) != CUDA_SUCCESS)
        return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!granularity || (unsigned)option > CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    r = check_prop(prop);
    if (r == CUDA_SUCCESS)
        *granularity = (size_t)FG_GRANULARITY;
    return r;
}

/* A new handle v (its fd open) charged to its device and registered, then given out in
 * *handle; on failure v is closed and freed. cuMemCreate and
 * cuMemImportFromShareableHandle. */
static CUresult vmm_charge(struct fg_vmm *v, CUmemGenericAllocationHandle *handle)
{
    fg_lock();
    CUresult r = fg_from_errno(reserve(v->dev, v->size));
    if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)v, FG_K_VMM, v)) {
        release(v->dev, v->size);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        close(v->fd);
        free(v);
        return r;
    }
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || size == 0 || size % FG_GRANULARITY != 0 || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    r = check_prop(prop);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_vmm *v = calloc(1, sizeof *v);
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->dev = prop->location.id;
    v->size = size;
    v->refs = 1;
    v->handle_types = (unsigned)prop->requestedHandleTypes;
    /* The name carries the physical device, for the process that imports it. */
    char name[32];
    snprintf(name, sizeof name, "fakegpu-vmm-%d", fg_phys(v->dev));
    v->fd = memfd_create(name, MFD_CLOEXEC);
    if (v->fd < 0 || ftruncate(v->fd, (off_t)size) != 0) {
        if (v->fd >= 0)
            close(v->fd);
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return vmm_charge(v, handle);
}

/* Frees the memory once released and unmapped everywhere (under the lock). */
static void vmm_maybe_free(struct fg_vmm *v)
{
    if (v->refs > 0 || v->maps > 0)
        return;
    release(v->dev, v->size);
    close(v->fd);
    free(v);
}

FG_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_vmm *v = fg_reg_get((uintptr_t)handle, FG_K_VMM);
    if (v && --v->refs == 0) {
        fg_reg_del((uintptr_t)v, FG_K_VMM);
        vmm_maybe_free(v);
    }
    fg_unlock();
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FG_API CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_alloc *m = find_alloc((uintptr_t)addr, 1, FG_K_MAPPING);
    struct fg_vmm *v = m ? m->vmm : NULL;
    if (v && v->refs == 0 && !fg_reg_add((uintptr_t)v, FG_K_VMM, v))
        v = NULL; /* released but still mapped: the handle becomes valid again */
    if (v)
        v->refs++;
    fg_unlock();
    if (!v)
        return m ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)v;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                       CUmemGenericAllocationHandle handle)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!prop)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_vmm *v = fg_reg_get((uintptr_t)handle, FG_K_VMM);
    if (v) {
        memset(prop, 0, sizeof *prop);
        prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop->location.id = v->dev;
        prop->requestedHandleTypes = (CUmemAllocationHandleType)v->handle_types;
    }
    fg_unlock();
    return v ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Shareable handles: POSIX file descriptors only (a dup of the allocation's memfd). */
FG_API CUresult cuMemExportToShareableHandle(void *shareableHandle,
                                             CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType handleType,
                                             unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!shareableHandle || flags != 0 || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_vmm *v = fg_reg_get((uintptr_t)handle, FG_K_VMM);
    int fd = -1;
    if (v && (v->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        fd = fcntl(v->fd, F_DUPFD_CLOEXEC, 0);
    fg_unlock();
    if (!v)
        return CUDA_ERROR_INVALID_VALUE;
    if (fd < 0)
        return (v->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   ? CUDA_ERROR_OUT_OF_MEMORY
                   : CUDA_ERROR_NOT_PERMITTED;
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

/* The CUDA ordinal of the physical device named in an exported memfd's name, or -1. */
static int vmm_fd_device(int fd)
{
    char link[64], target[128];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0)
        return -1;
    target[n] = '\0';
    int phys;
    if (sscanf(target, "/memfd:fakegpu-vmm-%d", &phys) != 1)
        return -1;
    for (int i = 0; i < fg_g.ndev; i++)
        if (fg_g.phys[i] == phys)
            return i;
    return -1;
}

/* The importing process holds the memory as long as its handle or a mapping lives, and
 * is charged its size for that long (NVML lists it for each process that holds it). */
FG_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                               CUmemAllocationHandleType shHandleType)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    int src = (int)(intptr_t)osHandle;
    struct stat sb;
    int dev = vmm_fd_device(src);
    if (dev < 0 || fstat(src, &sb) != 0 || sb.st_size <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_vmm *v = calloc(1, sizeof *v);
    if (!v)
        return CUDA_ERROR_OUT_OF_MEMORY;
    v->dev = dev;
    v->size = (size_t)sb.st_size;
    v->refs = 1;
    v->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    v->fd = fcntl(src, F_DUPFD_CLOEXEC, 0);
    if (v->fd < 0) {
        free(v);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return vmm_charge(v, handle);
}

FG_API CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                    CUdeviceptr addr, unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!ptr || size == 0 || size % FG_GRANULARITY != 0 || flags != 0 ||
        (alignment & (alignment - 1)) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t align = alignment > FG_GRANULARITY ? alignment : (size_t)FG_GRANULARITY;
    if (size > SIZE_MAX - align)
        return CUDA_ERROR_OUT_OF_MEMORY;
    /* Over-reserve, then trim to an aligned window; addr is only a hint. */
    (void)addr;
    void *raw =
        mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t start = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
    if (start > (uintptr_t)raw)
        munmap(raw, start - (uintptr_t)raw);
    uintptr_t end = (uintptr_t)raw + size + align;
    if (end > start + size)
        munmap((void *)(start + size), end - (start + size));
    struct fg_alloc *a = calloc(1, sizeof *a);
    if (!a) {
        munmap((void *)start, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->base = start;
    a->size = size;
    a->map_size = size;
    fg_lock();
    bool ok = fg_reg_add(start, FG_K_RESERVE, a);
    fg_unlock();
    if (!ok) {
        munmap((void *)start, size);
        free(a);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *ptr = (CUdeviceptr)start;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_alloc *a = fg_reg_get((uintptr_t)ptr, FG_K_RESERVE);
    if (!a || a->size != size) {
        fg_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fg_reg_del((uintptr_t)ptr, FG_K_RESERVE);
    fg_unlock();
    munmap((void *)a->base, a->size);
    free(a);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (size == 0 || flags != 0 || size % FG_GRANULARITY || offset % FG_GRANULARITY ||
        ptr % FG_GRANULARITY)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_alloc *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    struct fg_vmm *v = fg_reg_get((uintptr_t)handle, FG_K_VMM);
    if (!v)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (offset > v->size || size > v->size - offset || !find_alloc(ptr, size, FG_K_RESERVE))
        r = CUDA_ERROR_INVALID_VALUE;
    else if (find_alloc(ptr, 1, FG_K_MAPPING) || find_alloc(ptr + size - 1, 1, FG_K_MAPPING))
        r = CUDA_ERROR_ALREADY_MAPPED;
    if (r == CUDA_SUCCESS) {
        void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
                       v->fd, (off_t)offset);
        if (p == MAP_FAILED) {
            r = CUDA_ERROR_OUT_OF_MEMORY;
        } else {
            m->base = (uintptr_t)ptr;
            m->size = size;
            m->dev = v->dev;
            m->vmm = v;
            if (!fg_reg_add(m->base, FG_K_MAPPING, m)) {
                mmap(p, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
                     -1, 0);
                r = CUDA_ERROR_OUT_OF_MEMORY;
            } else {
                v->maps++;
            }
        }
    }
    fg_unlock();
    if (r != CUDA_SUCCESS)
        free(m);
    return r;
}

FG_API CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_alloc *m = fg_reg_get((uintptr_t)ptr, FG_K_MAPPING);
    if (!m || m->size != size) {
        fg_unlock();
        return CUDA_ERROR_INVALID_VALUE;
    }
    fg_reg_del(m->base, FG_K_MAPPING);
    /* Put the reservation's PROT_NONE placeholder back. */
    mmap((void *)m->base, m->size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    m->vmm->maps--;
    vmm_maybe_free(m->vmm);
    fg_unlock();
    free(m);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!desc || count == 0 || size == 0)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            fg_check_device(desc[i].location.id) != CUDA_SUCCESS)
            return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    }
    fg_lock();
    bool mapped = find_alloc((uintptr_t)ptr, size, FG_K_MAPPING) != NULL;
    fg_unlock();
    return mapped ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- host memory ---- */

static CUresult host_add(void *p, size_t size, size_t map_size)
{
    struct fg_alloc *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    a->base = (uintptr_t)p;
    a->size = size;
    a->map_size = map_size;
    a->dev = -1;
    fg_lock();
    CUresult r = CUDA_SUCCESS;
    if (find_alloc(a->base, size, FG_K_HOSTMEM))
        r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    else if (!fg_reg_add(a->base, FG_K_HOSTMEM, a))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    fg_unlock();
    if (r != CUDA_SUCCESS)
        free(a);
    return r;
}

FG_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pp || bytesize == 0 || (Flags & ~0x7U))
        return CUDA_ERROR_INVALID_VALUE;
    void *p = map_anon(bytesize, false);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    r = host_add(p, bytesize, bytesize);
    if (r != CUDA_SUCCESS) {
        munmap(p, bytesize);
        return r;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

FG_API CUresult cuMemAllocHost(void **pp, unsigned int bytesize)
{
    return cuMemHostAlloc(pp, bytesize, 0);
}

FG_API CUresult cuMemFreeHost(void *p)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_alloc *a = fg_reg_get((uintptr_t)p, FG_K_HOSTMEM);
    if (a && a->map_size == 0)
        a = NULL; /* registered memory is the caller's, not ours to free */
    if (a)
        fg_reg_del((uintptr_t)p, FG_K_HOSTMEM);
    fg_unlock();
    if (!a)
        return CUDA_ERROR_INVALID_VALUE;
    munmap(p, a->map_size);
    free(a);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!p || bytesize == 0 || (Flags & ~0xfU))
        return CUDA_ERROR_INVALID_VALUE;
    return host_add(p, bytesize, 0);
}

FG_API CUresult cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
    return cuMemHostRegister_v2(p, bytesize, Flags);
}

FG_API CUresult cuMemHostUnregister(void *p)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_alloc *a = fg_reg_get((uintptr_t)p, FG_K_HOSTMEM);
    if (a && a->map_size != 0)
        a = NULL;
    if (a)
        fg_reg_del((uintptr_t)p, FG_K_HOSTMEM);
    fg_unlock();
    if (!a)
        return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    free(a);
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pdptr || Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    bool known = find_alloc((uintptr_t)p, 1, FG_K_HOSTMEM) != NULL;
    fg_unlock();
    if (!known)
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

FG_API CUresult cuMemHostGetDevicePointer(CUdeviceptr_v1 *pdptr, void *p, unsigned int Flags)
{
    CUdeviceptr d;
    if (!pdptr)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuMemHostGetDevicePointer_v2(&d, p, Flags);
    if (r == CUDA_SUCCESS && d > UINT32_MAX)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (r == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr_v1)d;
    return r;
}

/* ---- memset and memcpy ---- */

enum fg_sync { FG_SYNC, FG_ASYNC };

/* Checks context, stream and the device range; for a synchronous call waits for the
 * default stream first, as the legacy stream orders it after earlier work. When the
 * stream is capturing, *graph is where the node goes. */
static CUresult copy_prepare(CUstream h, bool pt, enum fg_sync sync, uintptr_t dev_a,
                             uintptr_t dev_b, size_t n, struct fg_graph **graph)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_stream *s;
    int sid;
    fg_lock();
    r = fg_stream_resolve(c, h, pt, &sid, &s);
    if (r == CUDA_SUCCESS &&
        ((dev_a && !fg_range_known(dev_a, n)) || (dev_b && !fg_range_known(dev_b, n))))
        r = CUDA_ERROR_INVALID_VALUE;
    *graph =
        r == CUDA_SUCCESS && s && s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE ? s->graph : NULL;
    fg_unlock();
    if (r == CUDA_SUCCESS && sync == FG_SYNC && !*graph)
        r = fg_from_errno(fg_stream_wait(fg_g.st, sid));
    return r;
}

static CUresult do_copy(void *dst, const void *src, size_t n, struct fg_graph *g)
{
    if (g) {
        struct fg_node node = {.type = FG_NODE_COPY, .dst = dst, .src = src, .bytes = n};
        fg_lock();
        CUresult r = fg_graph_add(g, &node);
        fg_unlock();
        return r;
    }
    if (n)
        memmove(dst, src, n);
    return CUDA_SUCCESS;
}

static CUresult memset_any(uintptr_t dst, uint32_t value, unsigned elem, size_t count, CUstream h,
                           bool pt, enum fg_sync sync)
{
    struct fg_graph *g;
    if (count > SIZE_MAX / elem)
        return CUDA_ERROR_INVALID_VALUE;
    if (dst % elem)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = copy_prepare(h, pt, sync, dst, 0, count * elem, &g);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_node node = {.type = FG_NODE_SET,
                           .dst = (void *)dst,
                           .bytes = count * elem,
                           .value = value,
                           .elem = elem};
    if (g) {
        fg_lock();
        r = fg_graph_add(g, &node);
        fg_unlock();
        return r;
    }
    if (elem == 1) {
        memset((void *)dst, (int)(value & 0xff), count);
    } else {
        unsigned char *d = (unsigned char *)dst;
        for (size_t i = 0; i < count; i++)
            memcpy(d + i * elem, &value, elem);
    }
    return CUDA_SUCCESS;
}

#define FG_NULL_STREAM ((CUstream)0)

FG_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char uc, size_t N)
{
    return memset_any((uintptr_t)d, uc, 1, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char uc, size_t N)
{
    return memset_any((uintptr_t)d, uc, 1, N, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemsetD8(CUdeviceptr_v1 d, unsigned char uc, unsigned int N)
{
    return memset_any((uintptr_t)d, uc, 1, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD16_v2(CUdeviceptr d, unsigned short us, size_t N)
{
    return memset_any((uintptr_t)d, us, 2, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short us, size_t N)
{
    return memset_any((uintptr_t)d, us, 2, N, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemsetD16(CUdeviceptr_v1 d, unsigned short us, unsigned int N)
{
    return memset_any((uintptr_t)d, us, 2, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int ui, size_t N)
{
    return memset_any((uintptr_t)d, ui, 4, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int ui, size_t N)
{
    return memset_any((uintptr_t)d, ui, 4, N, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemsetD32(CUdeviceptr_v1 d, unsigned int ui, unsigned int N)
{
    return memset_any((uintptr_t)d, ui, 4, N, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char uc, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, uc, 1, N, h, false, FG_ASYNC);
}
FG_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char uc, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, uc, 1, N, h, true, FG_ASYNC);
}
FG_API CUresult cuMemsetD16Async(CUdeviceptr d, unsigned short us, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, us, 2, N, h, false, FG_ASYNC);
}
FG_API CUresult cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short us, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, us, 2, N, h, true, FG_ASYNC);
}
FG_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int ui, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, ui, 4, N, h, false, FG_ASYNC);
}
FG_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int ui, size_t N, CUstream h)
{
    return memset_any((uintptr_t)d, ui, 4, N, h, true, FG_ASYNC);
}

/* One copy: dev_dst/dev_src are the device sides to validate (0: host side). */
static CUresult copy1(uintptr_t dst, uintptr_t src, size_t n, bool dev_dst, bool dev_src,
                      CUstream h, bool pt, enum fg_sync sync)
{
    struct fg_graph *g;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = copy_prepare(h, pt, sync, dev_dst ? dst : 0, dev_src ? src : 0, n, &g);
    if (r != CUDA_SUCCESS)
        return r;
    return do_copy((void *)dst, (const void *)src, n, g);
}

#define HTOD(d, s, n, h, pt, sy) copy1((uintptr_t)(d), (uintptr_t)(s), n, true, false, h, pt, sy)
#define DTOH(d, s, n, h, pt, sy) copy1((uintptr_t)(d), (uintptr_t)(s), n, false, true, h, pt, sy)
#define DTOD(d, s, n, h, pt, sy) copy1((uintptr_t)(d), (uintptr_t)(s), n, true, true, h, pt, sy)
#define ANY(d, s, n, h, pt, sy)  copy1((uintptr_t)(d), (uintptr_t)(s), n, false, false, h, pt, sy)

FG_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
    return HTOD(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n)
{
    return HTOD(d, s, n, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpyHtoD(CUdeviceptr_v1 d, const void *s, unsigned int n)
{
    return HTOD(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
    return DTOH(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n)
{
    return DTOH(d, s, n, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoH(void *d, CUdeviceptr_v1 s, unsigned int n)
{
    return DTOH(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return DTOD(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return DTOD(d, s, n, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpyDtoD(CUdeviceptr_v1 d, CUdeviceptr_v1 s, unsigned int n)
{
    return DTOD(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream h)
{
    return HTOD(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream h)
{
    return HTOD(d, s, n, h, true, FG_ASYNC);
}
FG_API CUresult cuMemcpyHtoDAsync(CUdeviceptr_v1 d, const void *s, unsigned int n, CUstream h)
{
    return HTOD(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream h)
{
    return DTOH(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream h)
{
    return DTOH(d, s, n, h, true, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr_v1 s, unsigned int n, CUstream h)
{
    return DTOH(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return DTOD(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return DTOD(d, s, n, h, true, FG_ASYNC);
}
FG_API CUresult cuMemcpyDtoDAsync(CUdeviceptr_v1 d, CUdeviceptr_v1 s, unsigned int n, CUstream h)
{
    return DTOD(d, s, n, h, false, FG_ASYNC);
}
/* Unified addressing: either side may be host or device memory. */
FG_API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return ANY(d, s, n, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)
{
    return ANY(d, s, n, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return ANY(d, s, n, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)
{
    return ANY(d, s, n, h, true, FG_ASYNC);
}

/* 2D: one side's start address from its memory type (under the lock for arrays). */
static CUresult side_addr(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray arr,
                          uintptr_t *out)
{
    switch (type) {
    case CU_MEMORYTYPE_HOST:
        *out = (uintptr_t)host;
        return host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED:
        *out = (uintptr_t)dev;
        return dev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_ARRAY: {
        fg_lock();
        struct fg_array *a = fg_reg_get((uintptr_t)arr, FG_K_ARRAY);
        *out = a ? (uintptr_t)a->data : 0;
        fg_unlock();
        return a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
    }
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream h, bool pt, enum fg_sync sync)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t src, dst;
    CUresult r = side_addr(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, &src);
    if (r == CUDA_SUCCESS)
        r = side_addr(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, &dst);
    if (r != CUDA_SUCCESS)
        return r;
    size_t spitch = p->srcMemoryType == CU_MEMORYTYPE_ARRAY ? p->WidthInBytes : p->srcPitch;
    size_t dpitch = p->dstMemoryType == CU_MEMORYTYPE_ARRAY ? p->WidthInBytes : p->dstPitch;
    if (p->Height == 0 || p->WidthInBytes == 0)
        return CUDA_SUCCESS;
    if ((p->Height > 1 && (spitch < p->WidthInBytes || dpitch < p->WidthInBytes)))
        return CUDA_ERROR_INVALID_VALUE;
    src += p->srcXInBytes + p->srcY * spitch;
    dst += p->dstXInBytes + p->dstY * dpitch;
    bool dev_src = p->srcMemoryType == CU_MEMORYTYPE_DEVICE;
    bool dev_dst = p->dstMemoryType == CU_MEMORYTYPE_DEVICE;
    size_t span_s = (p->Height - 1) * spitch + p->WidthInBytes;
    size_t span_d = (p->Height - 1) * dpitch + p->WidthInBytes;
    struct fg_graph *g;
    r = copy_prepare(h, pt, sync, dev_dst ? dst : 0, 0, span_d, &g);
    if (r == CUDA_SUCCESS && dev_src) {
        fg_lock();
        if (!fg_range_known(src, span_s))
            r = CUDA_ERROR_INVALID_VALUE;
        fg_unlock();
    }
    for (size_t row = 0; row < p->Height && r == CUDA_SUCCESS; row++)
        r = do_copy((void *)(dst + row * dpitch), (const void *)(src + row * spitch),
                    p->WidthInBytes, g);
    return r;
}

static CUDA_MEMCPY2D copy2d_from_v1(const CUDA_MEMCPY2D_v1 *p)
{
    CUDA_MEMCPY2D q = {
        .srcXInBytes = p->srcXInBytes,
        .srcY = p->srcY,
        .srcMemoryType = p->srcMemoryType,
        .srcHost = p->srcHost,
        .srcDevice = p->srcDevice,
        .srcArray = p->srcArray,
        .srcPitch = p->srcPitch,
        .dstXInBytes = p->dstXInBytes,
        .dstY = p->dstY,
        .dstMemoryType = p->dstMemoryType,
        .dstHost = p->dstHost,
        .dstDevice = p->dstDevice,
        .dstArray = p->dstArray,
        .dstPitch = p->dstPitch,
        .WidthInBytes = p->WidthInBytes,
        .Height = p->Height,
    };
    return q;
}

FG_API CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p)
{
    return copy2d(p, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *p)
{
    return copy2d(p, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p)
{
    return copy2d(p, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *p)
{
    return copy2d(p, FG_NULL_STREAM, true, FG_SYNC);
}
FG_API CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream h)
{
    return copy2d(p, h, false, FG_ASYNC);
}
FG_API CUresult cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *p, CUstream h)
{
    return copy2d(p, h, true, FG_ASYNC);
}
FG_API CUresult cuMemcpy2D(const CUDA_MEMCPY2D_v1 *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY2D q = copy2d_from_v1(p);
    return copy2d(&q, FG_NULL_STREAM, false, FG_SYNC);
}
FG_API CUresult cuMemcpy2DUnaligned(const CUDA_MEMCPY2D_v1 *p)
{
    return cuMemcpy2D(p);
}
FG_API CUresult cuMemcpy2DAsync(const CUDA_MEMCPY2D_v1 *p, CUstream h)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_MEMCPY2D q = copy2d_from_v1(p);
    return copy2d(&q, h, false, FG_ASYNC);
}
