/* fakegpu libcuda: the handle table, errors, initialisation, devices and contexts.
 *
 * Contexts follow the real driver: a primary context per device, retained and released
 * by count (the handle stays the same across its lifetimes), and regular contexts that
 * are created current and destroyed once. Each active context costs FAKEGPU_CONTEXT_MIB
 * in the shared state and owns one shared stream, its legacy default stream. A destroyed
 * regular context stays in the table so that later use answers CONTEXT_IS_DESTROYED. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/str.h"
#include "fakegpu/cuda_internal.h"

struct fg_global fg_g = {.lock = PTHREAD_MUTEX_INITIALIZER};

#define FG_CTX_STACK 32
static __thread struct fg_ctx *tls_ctx[FG_CTX_STACK];
static __thread int tls_depth;

void fg_lock(void)
{
    pthread_mutex_lock(&fg_g.lock);
}

void fg_unlock(void)
{
    pthread_mutex_unlock(&fg_g.lock);
}

/* ---- handle table: open addressing on (key, kind), grown at 50 % load ---- */

struct fg_reg_slot {
    uintptr_t key;
    enum fg_kind kind; /* 0: empty; -1 tombstone kept as FG_K_TOMB */
    void *value;
};
#define FG_K_TOMB ((enum fg_kind) - 1)

static struct fg_reg_slot *reg_slots;
static size_t reg_cap, reg_used; /* used counts live entries and tombstones */

static size_t reg_hash(uintptr_t key, enum fg_kind kind)
{
    uint64_t h = (uint64_t)key * 0x9E3779B97F4A7C15ULL ^ (uint64_t)kind * 0xC2B2AE3D27D4EB4FULL;
    return (size_t)(h ^ (h >> 29));
}

static bool reg_grow(void)
{
    size_t cap = reg_cap ? reg_cap * 2 : 256;
    struct fg_reg_slot *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return false;
    size_t used = 0;
    for (size_t i = 0; i < reg_cap; i++) {
        struct fg_reg_slot *s = &reg_slots[i];
        if (s->kind == 0 || s->kind == FG_K_TOMB)
            continue;
        size_t j = reg_hash(s->key, s->kind) & (cap - 1);
        while (slots[j].kind != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
        used++;
    }
    free(reg_slots);
    reg_slots = slots;
    reg_cap = cap;
    reg_used = used;
    return true;
}

bool fg_reg_add(uintptr_t key, enum fg_kind kind, void *value)
{
    if ((reg_used + 1) * 2 > reg_cap && !reg_grow())
        return false;
    size_t j = reg_hash(key, kind) & (reg_cap - 1);
    while (reg_slots[j].kind != 0 && reg_slots[j].kind != FG_K_TOMB)
        j = (j + 1) & (reg_cap - 1);
    if (reg_slots[j].kind == 0)
        reg_used++;
    reg_slots[j] = (struct fg_reg_slot){key, kind, value};
    return true;
}

static struct fg_reg_slot *reg_lookup(uintptr_t key, enum fg_kind kind)
{
    if (!reg_cap)
        return NULL;
    size_t j = reg_hash(key, kind) & (reg_cap - 1);
    while (reg_slots[j].kind != 0) {
        if (reg_slots[j].key == key && reg_slots[j].kind == kind)
            return &reg_slots[j];
        j = (j + 1) & (reg_cap - 1);
    }
    return NULL;
}

void *fg_reg_get(uintptr_t key, enum fg_kind kind)
{
    struct fg_reg_slot *s = reg_lookup(key, kind);
    return s ? s->value : NULL;
}

void fg_reg_del(uintptr_t key, enum fg_kind kind)
{
    struct fg_reg_slot *s = reg_lookup(key, kind);
    if (s) {
        s->kind = FG_K_TOMB;
        s->value = NULL;
    }
}

void *fg_reg_find(enum fg_kind kind, bool (*fn)(void *value, const void *arg), const void *arg)
{
    for (size_t i = 0; i < reg_cap; i++)
        if (reg_slots[i].kind == kind && fn(reg_slots[i].value, arg))
            return reg_slots[i].value;
    return NULL;
}

/* ---- last queued item per shared stream (for cuStreamQuery) ---- */

#define FG_SEQ_SLOTS 1024
static uint64_t fg_last_seq[FG_SEQ_SLOTS];

void fg_seq_note(int sid, uint64_t seq)
{
    if (sid >= 0 && sid < FG_SEQ_SLOTS)
        __atomic_store_n(&fg_last_seq[sid], seq, __ATOMIC_RELAXED);
}

uint64_t fg_seq_last(int sid)
{
    return sid >= 0 && sid < FG_SEQ_SLOTS ? __atomic_load_n(&fg_last_seq[sid], __ATOMIC_RELAXED)
                                          : UINT64_MAX;
}

/* ---- errors ---- */

CUresult fg_from_errno(int rc)
{
    switch (rc) {
    case 0:
        return CUDA_SUCCESS;
    case -ENOMEM:
    case -ENOSPC:
        return CUDA_ERROR_OUT_OF_MEMORY;
    case -EINVAL:
        return CUDA_ERROR_INVALID_VALUE;
    case -EAGAIN:
        return CUDA_ERROR_NOT_READY;
    default:
        return CUDA_ERROR_OPERATING_SYSTEM;
    }
}

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} fg_errors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {CUDA_ERROR_PROFILER_DISABLED, "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY", "stub library"},
    {CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER",
     "call requires newer driver"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE", "device unavailable"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {CUDA_ERROR_DEVICE_NOT_LICENSED, "CUDA_ERROR_DEVICE_NOT_LICENSED", "device not licensed"},
    {CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
     "context already current"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"},
    {CUDA_ERROR_UNMAP_FAILED, "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"},
    {CUDA_ERROR_ARRAY_IS_MAPPED, "CUDA_ERROR_ARRAY_IS_MAPPED", "array is mapped"},
    {CUDA_ERROR_ALREADY_MAPPED, "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"},
    {CUDA_ERROR_NO_BINARY_FOR_GPU, "CUDA_ERROR_NO_BINARY_FOR_GPU",
     "no kernel image is available for execution on the device"},
    {CUDA_ERROR_ALREADY_ACQUIRED, "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"},
    {CUDA_ERROR_NOT_MAPPED, "CUDA_ERROR_NOT_MAPPED", "resource not mapped"},
    {CUDA_ERROR_UNSUPPORTED_LIMIT, "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported"},
    {CUDA_ERROR_CONTEXT_ALREADY_IN_USE, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE",
     "exclusive-thread device already in use by a different thread"},
    {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED",
     "peer access is not supported between these two devices"},
    {CUDA_ERROR_INVALID_PTX, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
    {CUDA_ERROR_INVALID_SOURCE, "CUDA_ERROR_INVALID_SOURCE", "device kernel image is invalid"},
    {CUDA_ERROR_FILE_NOT_FOUND, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND",
     "shared object symbol not found"},
    {CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED",
     "shared object initialization failed"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
     "the operation cannot be performed "
     "in the present state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
     "too many resources requested for launch"},
    {CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out"},
    {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED",
     "peer access is already enabled"},
    {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED",
     "peer access has not been enabled"},
    {CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
     "cannot set while device is active in this process"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {CUDA_ERROR_ASSERT, "CUDA_ERROR_ASSERT", "device-side assert triggered"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "part or all of the requested memory range is already mapped"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "pointer does not correspond to a registered memory region"},
    {CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE",
     "too many blocks in cooperative launch"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {CUDA_ERROR_SYSTEM_NOT_READY, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
     "operation not permitted when stream is capturing"},
    {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
     "operation failed due to a previous error during capture"},
    {CUDA_ERROR_STREAM_CAPTURE_MERGE, "CUDA_ERROR_STREAM_CAPTURE_MERGE",
     "operation would result in a merge of separate capture sequences"},
    {CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED",
     "capture was not ended in the same stream as it began"},
    {CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
     "capturing stream has unjoined work"},
    {CUDA_ERROR_STREAM_CAPTURE_ISOLATION, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
     "dependency created on uncaptured work in another stream"},
    {CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {CUDA_ERROR_CAPTURED_EVENT, "CUDA_ERROR_CAPTURED_EVENT",
     "operation not permitted on an event last recorded in a capturing stream"},
    {CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD",
     "attempt to terminate a thread-local capture sequence from another thread"},
    {CUDA_ERROR_TIMEOUT, "CUDA_ERROR_TIMEOUT", "wait operation timed out"},
    {CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE",
     "the graph update was not performed because it included changes which violated "
     "constraints specific to instantiated graph update"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

FG_API CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof fg_errors / sizeof fg_errors[0]; i++)
        if (fg_errors[i].code == error) {
            *pStr = fg_errors[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

FG_API CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof fg_errors / sizeof fg_errors[0]; i++)
        if (fg_errors[i].code == error) {
            *pStr = fg_errors[i].name;
            return CUDA_SUCCESS;
        }
    *pStr = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

/* ---- initialisation ---- */

/* Ordinal i names a MIG device: it shows the instance's memory, SMs and name, and this
 * process's work on the GPU is accounted inside the instance (fg_mig_bind). */
static CUresult mig_ordinal(struct fg_state *st, int i)
{
    struct fg_device_info *d = &fg_g.info[i];
    const struct fg_mig_info *mi = &d->mig[fg_g.mig[i]];
    char name[FG_NAME_MAX];
    (void)vg_snprintf(name, sizeof name, "%s MIG %s", d->name, mi->profile);
    memcpy(d->name, name, sizeof name);
    d->total_bytes = mi->memory_bytes;
    d->sm_count = mi->sm_count;
    return fg_mig_bind(st, fg_g.phys[i], fg_g.mig[i]) == 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

FG_API CUresult cuInit(unsigned int Flags)
{
    if (Flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    CUresult res = CUDA_SUCCESS;
    if (!fg_g.inited) {
        struct fg_state *st = NULL;
        int rc = fg_state_get(&st);
        if (rc != 0) {
            res = rc == -EINVAL ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NO_DEVICE;
        } else {
            int n = fg_state_device_count(st);
            if (n <= 0 || n > FG_MAX_DEVICES)
                res = CUDA_ERROR_NO_DEVICE;
            struct fg_device_info all[FG_MAX_DEVICES];
            for (int i = 0; i < n && res == CUDA_SUCCESS; i++)
                if (fg_state_device_info(st, i, &all[i]) != 0)
                    res = CUDA_ERROR_NO_DEVICE;
            /* As the driver: read once, at initialisation; no visible device fails it. */
            int visible = 0;
            if (res == CUDA_SUCCESS) {
                visible =
                    fg_visible_parse(getenv("CUDA_VISIBLE_DEVICES"), all, n, fg_g.phys, fg_g.mig);
                if (visible == 0)
                    res = CUDA_ERROR_NO_DEVICE;
            }
            for (int i = 0; i < visible && res == CUDA_SUCCESS; i++) {
                fg_g.info[i] = all[fg_g.phys[i]];
                fg_g.gpu_sms[i] = all[fg_g.phys[i]].sm_count;
                if (fg_g.mig[i] >= 0)
                    res = mig_ordinal(st, i);
            }
            /* MPS client settings, over the visible devices (cuda_mps.c). */
            struct fg_mps mps;
            if (res == CUDA_SUCCESS) {
                struct vg_err err = {0};
                if (fg_mps_parse(getenv("CUDA_MPS_PIPE_DIRECTORY"),
                                 getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                                 getenv("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), fg_g.info, visible,
                                 &mps, &err) != 0) {
                    fprintf(stderr, "fakegpu: %s\n", err.msg);
                    res = CUDA_ERROR_INVALID_VALUE;
                }
            }
            if (res == CUDA_SUCCESS) {
                fg_g.mps = mps;
                fg_g.st = st;
                fg_g.ndev = visible;
                fg_g.kernel_ns = fg_kernel_ns(st);
                fg_g.inited = true;
            }
        }
    }
    fg_unlock();
    return res;
}

CUresult fg_check_init(void)
{
    /* inited only goes false -> true, under the lock; a racing reader at worst takes the
     * lock path in cuInit's caller. */
    return __atomic_load_n(&fg_g.inited, __ATOMIC_ACQUIRE) ? CUDA_SUCCESS
                                                           : CUDA_ERROR_NOT_INITIALIZED;
}

CUresult fg_check_device(CUdevice dev)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    return dev >= 0 && dev < fg_g.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

FG_API CUresult cuDriverGetVersion(int *driverVersion)
{
    if (!driverVersion)
        return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = FG_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

/* ---- devices ---- */

FG_API CUresult cuDeviceGetCount(int *count)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!count)
        return CUDA_ERROR_INVALID_VALUE;
    *count = fg_g.ndev;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= fg_g.ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!name || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    /* The driver truncates silently to len - 1 characters. */
    size_t n = strnlen(fg_g.info[dev].name, sizeof fg_g.info[dev].name);
    if (n > (size_t)len - 1)
        n = (size_t)len - 1;
    memcpy(name, fg_g.info[dev].name, n);
    name[n] = '\0';
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!uuid)
        return CUDA_ERROR_INVALID_VALUE;
    memcpy(uuid->bytes, fg_g.info[dev].uuid_bytes, sizeof uuid->bytes);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid(uuid, dev);
}

FG_API CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    *bytes = (size_t)fg_g.info[dev].total_bytes;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceTotalMem(unsigned int *bytes, CUdevice dev)
{
    size_t total = 0;
    if (!bytes)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuDeviceTotalMem_v2(&total, dev);
    if (r == CUDA_SUCCESS)
        *bytes = total > UINT32_MAX ? UINT32_MAX : (unsigned int)total;
    return r;
}

static int device_attribute(const struct fg_device_info *d, CUdevice_attribute a)
{
    switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
        return 1024;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
        return 64;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
        return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
        return 65535;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
        return 49152;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
        return 2147483647;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
        return 65536;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
        return 1980000;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
        return 512;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
        return d->sm_count;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        return (int)d->pci_bus;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
        return (int)d->pci_device;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
        return (int)d->pci_domain;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
        return 2619000;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
        return 5120;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
        return 50331648;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
        return 2048;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
        return 3;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
        return d->cc_major;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
        return d->cc_minor;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
        return 233472;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
        return 232448;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
        return 32;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
        return CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
        return 1;
    default:
        return 0; /* integrated, compute mode (default), ... */
    }
}

FG_API CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    *pi = device_attribute(&fg_g.info[dev], attrib);
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pciBusId || len <= 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t n = strnlen(fg_g.info[dev].pci_bus_id, sizeof fg_g.info[dev].pci_bus_id);
    if (n > (size_t)len - 1)
        n = (size_t)len - 1;
    memcpy(pciBusId, fg_g.info[dev].pci_bus_id, n);
    pciBusId[n] = '\0';
    return CUDA_SUCCESS;
}

FG_API CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!dev || !pciBusId)
        return CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < fg_g.ndev; i++) {
        /* Accept the 4- and 8-digit domain forms, case-insensitively. */
        const char *ours = fg_g.info[i].pci_bus_id;
        const char *theirs = pciBusId;
        while (*theirs == '0' && strlen(theirs) > strlen(ours))
            theirs++;
        if (strcasecmp(ours, theirs) == 0) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ---- contexts ---- */

static struct fg_ctx *tls_top(void)
{
    return tls_depth > 0 ? tls_ctx[tls_depth - 1] : NULL;
}

CUresult fg_current(struct fg_ctx **out)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_ctx *c = tls_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    fg_lock();
    if (c->destroyed)
        r = c->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    fg_unlock();
    if (r == CUDA_SUCCESS)
        *out = c;
    return r;
}

/* Charges the context and opens its default stream (under the lock). */
static CUresult ctx_activate(struct fg_ctx *c)
{
    int rc = fg_ctx_attach(fg_g.st, fg_phys(c->dev));
    if (rc != 0)
        return fg_from_errno(rc);
    rc = fg_stream_open(fg_g.st, fg_phys(c->dev), &c->default_sid);
    if (rc != 0) {
        fg_ctx_detach(fg_g.st, fg_phys(c->dev));
        return fg_from_errno(rc);
    }
    fg_seq_note(c->default_sid, 0);
    c->destroyed = false;
    return CUDA_SUCCESS;
}

static void ctx_deactivate(struct fg_ctx *c)
{
    fg_stream_close(fg_g.st, c->default_sid);
    fg_ctx_detach(fg_g.st, fg_phys(c->dev));
    c->default_sid = -1;
    c->destroyed = true;
}

/* Validates a context handle given as an argument (under the lock). */
static CUresult ctx_check(struct fg_ctx *c)
{
    if (!fg_reg_get((uintptr_t)c, FG_K_CTX))
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c->destroyed)
        return c->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_ctx *c = fg_g.primary[dev];
    if (!c) {
        c = calloc(1, sizeof *c);
        if (!c || !fg_reg_add((uintptr_t)c, FG_K_CTX, c)) {
            free(c);
            fg_unlock();
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        c->dev = dev;
        c->primary = true;
        c->destroyed = true;
        c->default_sid = -1;
        fg_g.primary[dev] = c;
    }
    if (fg_g.primary_refs[dev] == 0) {
        c->flags = fg_g.primary_flags[dev];
        r = ctx_activate(c);
    }
    if (r == CUDA_SUCCESS) {
        fg_g.primary_refs[dev]++;
        *pctx = (CUcontext)c;
    }
    fg_unlock();
    return r;
}

FG_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    if (fg_g.primary_refs[dev] == 0) {
        r = CUDA_ERROR_INVALID_CONTEXT;
    } else if (--fg_g.primary_refs[dev] == 0) {
        ctx_deactivate(fg_g.primary[dev]);
    }
    fg_unlock();
    return r;
}

FG_API CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    return cuDevicePrimaryCtxRelease_v2(dev);
}

FG_API CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~0x1fU)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    fg_g.primary_flags[dev] = flags;
    if (fg_g.primary[dev])
        fg_g.primary[dev]->flags = flags;
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
    return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

FG_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags || !active)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    *flags = fg_g.primary_flags[dev];
    *active = fg_g.primary_refs[dev] > 0;
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    if (fg_g.primary_refs[dev] > 0) {
        fg_g.primary_refs[dev] = 0;
        ctx_deactivate(fg_g.primary[dev]);
    }
    fg_g.primary_flags[dev] = 0;
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return cuDevicePrimaryCtxReset_v2(dev);
}

FG_API CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    CUresult r = fg_check_device(dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx || (flags & ~0x1fU))
        return CUDA_ERROR_INVALID_VALUE;
    if (tls_depth >= FG_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    struct fg_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return CUDA_ERROR_OUT_OF_MEMORY;
    c->dev = dev;
    c->flags = flags;
    fg_lock();
    r = ctx_activate(c);
    if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)c, FG_K_CTX, c)) {
        ctx_deactivate(c);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        free(c);
        return r;
    }
    tls_ctx[tls_depth++] = c; /* created current: pushed on this thread's stack */
    *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
    return cuCtxCreate_v2(pctx, flags, dev);
}

FG_API CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
                               unsigned int flags, CUdevice dev)
{
    if (numParams < 0 || (numParams > 0 && !paramsArray))
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxCreate_v2(pctx, flags, dev);
}

FG_API CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams,
                               unsigned int flags, CUdevice dev)
{
    if (ctxCreateParams && ctxCreateParams->numExecAffinityParams < 0)
        return CUDA_ERROR_INVALID_VALUE;
    return cuCtxCreate_v2(pctx, flags, dev);
}

FG_API CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_ctx *c = (struct fg_ctx *)ctx;
    fg_lock();
    r = ctx_check(c);
    if (r == CUDA_SUCCESS && c->primary)
        r = CUDA_ERROR_INVALID_CONTEXT; /* primary contexts are released, not destroyed */
    if (r == CUDA_SUCCESS)
        ctx_deactivate(c);
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    /* Drop it from this thread's stack; other threads see it destroyed. */
    int w = 0;
    for (int i = 0; i < tls_depth; i++)
        if (tls_ctx[i] != c)
            tls_ctx[w++] = tls_ctx[i];
    tls_depth = w;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxDestroy(CUcontext ctx)
{
    return cuCtxDestroy_v2(ctx);
}

FG_API CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_ctx *c = (struct fg_ctx *)ctx;
    fg_lock();
    r = ctx_check(c);
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    if (tls_depth >= FG_CTX_STACK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    tls_ctx[tls_depth++] = c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxPushCurrent(CUcontext ctx)
{
    return cuCtxPushCurrent_v2(ctx);
}

FG_API CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (tls_depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    struct fg_ctx *c = tls_ctx[--tls_depth];
    if (pctx)
        *pctx = (CUcontext)c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxPopCurrent(CUcontext *pctx)
{
    return cuCtxPopCurrent_v2(pctx);
}

FG_API CUresult cuCtxSetCurrent(CUcontext ctx)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_ctx *c = (struct fg_ctx *)ctx;
    if (!c) {
        if (tls_depth > 0)
            tls_depth--;
        return CUDA_SUCCESS;
    }
    fg_lock();
    r = ctx_check(c);
    fg_unlock();
    if (r != CUDA_SUCCESS)
        return r;
    if (tls_depth == 0)
        tls_depth = 1;
    tls_ctx[tls_depth - 1] = c;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetCurrent(CUcontext *pctx)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    *pctx = (CUcontext)tls_top();
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetDevice(CUdevice *device)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!device)
        return CUDA_ERROR_INVALID_VALUE;
    *device = c->dev;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetFlags(unsigned int *flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!flags)
        return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!version)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_ctx *c = ctx ? (struct fg_ctx *)ctx : tls_top();
    if (!c)
        return CUDA_ERROR_INVALID_CONTEXT;
    fg_lock();
    r = ctx_check(c);
    fg_unlock();
    if (r == CUDA_SUCCESS)
        *version = 3020;
    return r;
}

FG_API CUresult cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (leastPriority)
        *leastPriority = 0;
    if (greatestPriority)
        *greatestPriority = -5;
    return CUDA_SUCCESS;
}

FG_API CUresult cuCtxSynchronize(void)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    r = fg_from_errno(fg_device_wait(fg_g.st, fg_phys(c->dev)));
    fg_pools_trim_all(c->dev);
    return r;
}
