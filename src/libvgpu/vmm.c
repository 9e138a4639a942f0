/* Virtual memory management: the physical allocation is charged for as long as the
 * driver holds it. The driver frees a cuMemCreate allocation only when every reference
 * to its handle is released (cuMemRelease; one per create, retain and import) AND every
 * mapping of it is unmapped (cuMemUnmap), in either order: a released handle whose
 * mapping lives keeps the memory. So libvgpu keeps one object per physical allocation
 * (LV_TRACK_VMM_OBJ, keyed by an id of its own, never by the driver's handle value, which
 * the driver may hand out again once released) holding the charge, a count of handle
 * references and a count of mappings; handles (LV_TRACK_VMM) and mappings (LV_TRACK_VMM_MAP)
 * name their object. The charge goes back when both counts reach zero.
 *
 * Who pays for shared memory. An allocation exported with cuMemExportToShareableHandle
 * stays charged to the exporter's container until the exporter has released and
 * unmapped it. A process that imports it (cuMemImportFromShareableHandle) holds the
 * memory as well, as long as its imported handle or a mapping lives, so it is charged
 * its size too, from the import until then (the driver does not report that size: it is
 * found by mapping, see imported_size). Memory shared between two processes is therefore
 * counted in both (twice when both are in one container): the
 * safe side, since either may keep it alive alone. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>

#include "libvgpu/vgpu.h"

#define REAL lv_g.real

static _Atomic uint64_t next_obj = 1;

/* A change to an object's counts; the object goes when nothing holds it any more. */
struct obj_change {
    int refs;
    int maps;
    uint64_t bytes;
};

static bool obj_apply(struct lv_track_entry *e, void *arg)
{
    const struct obj_change *c = arg;
    if (c->refs < 0)
        e->refs = e->refs > 0 ? e->refs - 1 : 0;
    else
        e->refs += (uint32_t)c->refs;
    if (c->maps < 0)
        e->maps = e->maps > 0 ? e->maps - 1 : 0;
    else
        e->maps += (uint32_t)c->maps;
    e->bytes += c->bytes;
    return e->refs == 0 && e->maps == 0;
}

/* Applies a change to object id; gives its charge back when it is gone. false: no such
 * object. */
static bool obj_change(uint64_t id, int refs, int maps, uint64_t bytes)
{
    struct obj_change c = {refs, maps, bytes};
    struct lv_track_entry e;
    if (!lv_track_modify(&lv_g.track, LV_TRACK_VMM_OBJ, id, obj_apply, &c, &e))
        return false;
    if (e.refs == 0 && e.maps == 0)
        lv_uncharge(e.dev, e.bytes);
    return true;
}

/* A handle entry: its own reference count (a retain may return a handle value already
 * known); removed at its last release. */
static bool handle_unref(struct lv_track_entry *e, void *arg)
{
    const uint64_t *obj = arg;
    if (e->obj != *obj)
        return false; /* the value was handed out again meanwhile: not ours to drop */
    e->refs = e->refs > 0 ? e->refs - 1 : 0;
    return e->refs == 0;
}

static bool handle_ref(struct lv_track_entry *e, void *arg)
{
    const uint64_t *obj = arg;
    if (e->obj == *obj)
        e->refs++;
    return false;
}

/* An entry that a new one replaced: its release or unmap was never seen. */
static void replaced(const struct lv_track_entry *old)
{
    if (old->space == LV_TRACK_VMM)
        for (uint32_t i = 0; i < old->refs; i++)
            (void)obj_change(old->obj, -1, 0, 0);
    else if (old->space == LV_TRACK_VMM_MAP)
        (void)obj_change(old->obj, 0, -1, 0);
}

static int insert(const struct lv_track_entry *e)
{
    struct lv_track_entry old;
    int rc = lv_track_insert(&lv_g.track, e, &old);
    if (rc == 1)
        replaced(&old);
    return rc < 0 ? rc : 0;
}

/* Records a new object with one handle reference; false (nothing recorded) if the table
 * cannot grow. */
static bool record_handle(CUmemGenericAllocationHandle handle, int rd, uint64_t bytes)
{
    uint64_t id = atomic_fetch_add(&next_obj, 1);
    struct lv_track_entry obj = {
        .key = id, .space = LV_TRACK_VMM_OBJ, .dev = (uint16_t)rd, .refs = 1, .bytes = bytes};
    struct lv_track_entry h = {
        .key = handle, .space = LV_TRACK_VMM, .dev = (uint16_t)rd, .refs = 1, .obj = id};
    if (insert(&obj) != 0)
        return false;
    if (insert(&h) != 0) {
        (void)lv_track_remove(&lv_g.track, LV_TRACK_VMM_OBJ, id, NULL);
        return false;
    }
    return true;
}

LV_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemCreate(handle, size, prop, flags));
    int rd = -1;
    if (handle != NULL && prop != NULL && size != 0 &&
        prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        rd = lv_regdev_of_cudevice(prop->location.id);
    if (rd < 0)
        return REAL.cuMemCreate(handle, size, prop, flags);
    CUresult r = lv_charge(rd, size);
    if (r != CUDA_SUCCESS)
        return r;
    r = REAL.cuMemCreate(handle, size, prop, flags);
    if (r != CUDA_SUCCESS) {
        lv_uncharge(rd, size);
        return r;
    }
    /* Not tied to a context: it lives until released and unmapped. */
    if (!record_handle(*handle, rd, size)) {
        REAL.cuMemRelease(*handle);
        lv_uncharge(rd, size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

/* The size of an imported allocation, which the driver does not report: the largest
 * multiple of the allocation granularity it lets be mapped from offset 0 (a mapping of
 * more than the allocation is refused), found by bisection inside one address
 * reservation as large as the device. 0 when it cannot be told. */
static uint64_t imported_size(CUmemGenericAllocationHandle h, const CUmemAllocationProp *prop)
{
    size_t gran = 0, total = 0;
    if (REAL.cuMemGetAllocationGranularity(&gran, prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        gran == 0 || REAL.cuDeviceTotalMem_v2(&total, prop->location.id) != CUDA_SUCCESS ||
        total < gran)
        return 0;
    uint64_t hi = total / gran, lo = 0; /* invariant: lo maps (0: nothing yet), hi + 1 not */
    CUdeviceptr va;
    if (REAL.cuMemAddressReserve(&va, (size_t)(hi * gran), 0, 0, 0) != CUDA_SUCCESS)
        return 0;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo + 1) / 2;
        if (REAL.cuMemMap(va, (size_t)(mid * gran), 0, h, 0) == CUDA_SUCCESS) {
            (void)REAL.cuMemUnmap(va, (size_t)(mid * gran));
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    (void)REAL.cuMemAddressFree(va, (size_t)(total / gran * gran));
    return lo * gran;
}

LV_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle,
                                                  void *osHandle,
                                                  CUmemAllocationHandleType shHandleType)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemImportFromShareableHandle(handle, osHandle, shHandleType));
    CUresult r = REAL.cuMemImportFromShareableHandle(handle, osHandle, shHandleType);
    if (r != CUDA_SUCCESS || handle == NULL)
        return r;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    int rd = -1;
    if (REAL.cuMemGetAllocationPropertiesFromHandle(&prop, *handle) == CUDA_SUCCESS &&
        prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
        rd = lv_regdev_of_cudevice(prop.location.id);
    if (rd < 0)
        return r; /* not on a device this container is limited on */
    /* The importer holds the memory as long as its handle or a mapping lives: charged its
     * size from now on. One it cannot size or afford is refused. */
    uint64_t size = imported_size(*handle, &prop);
    CUresult c = size != 0 ? lv_charge(rd, size) : CUDA_ERROR_OUT_OF_MEMORY;
    if (c == CUDA_SUCCESS && !record_handle(*handle, rd, size)) {
        lv_uncharge(rd, size);
        c = CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (c != CUDA_SUCCESS) {
        (void)REAL.cuMemRelease(*handle);
        return c;
    }
    return r;
}

LV_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemRelease(handle));
    struct lv_track_entry h;
    if (!lv_track_find(&lv_g.track, LV_TRACK_VMM, handle, &h))
        return REAL.cuMemRelease(handle);
    CUresult r = REAL.cuMemRelease(handle);
    if (r != CUDA_SUCCESS)
        return r;
    uint64_t id = h.obj;
    struct lv_track_entry now;
    if (lv_track_modify(&lv_g.track, LV_TRACK_VMM, handle, handle_unref, &id, &now) &&
        now.obj == id)
        (void)obj_change(id, -1, 0, 0);
    return r;
}

LV_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemRetainAllocationHandle(handle, addr));
    CUresult r = REAL.cuMemRetainAllocationHandle(handle, addr);
    if (r != CUDA_SUCCESS || handle == NULL)
        return r;
    /* The mapping addr lies in names the object: one more reference to it. */
    struct lv_track_entry m;
    uint64_t a = (uint64_t)(uintptr_t)addr;
    if (!lv_track_find(&lv_g.track, LV_TRACK_VMM_MAP, a, &m) &&
        !lv_track_find_holding(&lv_g.track, LV_TRACK_VMM_MAP, a, &m))
        return r; /* not a mapping of ours */
    if (!obj_change(m.obj, 1, 0, 0))
        return r;
    uint64_t id = m.obj;
    struct lv_track_entry now;
    if (lv_track_modify(&lv_g.track, LV_TRACK_VMM, *handle, handle_ref, &id, &now) && now.obj == id)
        return r;
    struct lv_track_entry h = {
        .key = *handle, .space = LV_TRACK_VMM, .dev = m.dev, .refs = 1, .obj = id};
    if (insert(&h) != 0) {
        (void)REAL.cuMemRelease(*handle);
        (void)obj_change(id, -1, 0, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

LV_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemMap(ptr, size, offset, handle, flags));
    struct lv_track_entry h, obj;
    if (!lv_track_find(&lv_g.track, LV_TRACK_VMM, handle, &h) ||
        !lv_track_find(&lv_g.track, LV_TRACK_VMM_OBJ, h.obj, &obj))
        return REAL.cuMemMap(ptr, size, offset, handle, flags);
    CUresult r = REAL.cuMemMap(ptr, size, offset, handle, flags);
    if (r != CUDA_SUCCESS)
        return r;
    struct lv_track_entry m = {
        .key = ptr, .space = LV_TRACK_VMM_MAP, .dev = obj.dev, .bytes = size, .obj = obj.key};
    if (!obj_change(obj.key, 0, 1, 0) || insert(&m) != 0) {
        /* Released meanwhile, or no room to record it: the mapping is undone. */
        (void)REAL.cuMemUnmap(ptr, size);
        (void)obj_change(obj.key, 0, -1, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    return r;
}

LV_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    LV_ENFORCING_OR_FORWARD(REAL.cuMemUnmap(ptr, size));
    struct lv_track_entry m;
    bool had = lv_track_remove(&lv_g.track, LV_TRACK_VMM_MAP, ptr, &m);
    CUresult r = REAL.cuMemUnmap(ptr, size);
    if (r != CUDA_SUCCESS) {
        if (had)
            (void)insert(&m);
        return r;
    }
    if (had)
        (void)obj_change(m.obj, 0, -1, 0);
    /* A range that covered further mappings unmapped them too. */
    if (!had || m.bytes < size) {
        uint64_t lo = (uint64_t)ptr, hi = lo + size < lo ? UINT64_MAX : lo + size;
        while (lv_track_find_in_range(&lv_g.track, LV_TRACK_VMM_MAP, lo, hi, true, &m))
            (void)obj_change(m.obj, 0, -1, 0);
    }
    return r;
}
