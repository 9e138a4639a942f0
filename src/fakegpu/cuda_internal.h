/* fakegpu's libcuda.so.1: what its source files share.
 *
 * Every handle the library gives out (context, stream, event, module, function, graph,
 * executable graph, memory pool, array, VMM allocation) is a heap object registered in
 * one process-local table, and every handle a caller passes in is looked up there before
 * it is used: a stale or garbage handle gets CUDA_ERROR_INVALID_HANDLE (or the context
 * codes), never a crash. Device memory is host memory (mmap MAP_NORESERVE) charged to the
 * shared state, so copies move real bytes and an 80 GiB card needs no 80 GiB of RAM.
 *
 * Locking: fg_lock() guards the table and every object's fields; it is never held across
 * a call that can block in real time (fg_stream_wait, fg_event_wait, a launch into a full
 * stream). The current context is per thread. */
#ifndef VGPU_FAKEGPU_CUDA_INTERNAL_H
#define VGPU_FAKEGPU_CUDA_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "abi/cuda.h"
#include "fakegpu/state.h"

#define FG_API __attribute__((visibility("default")))

#define FG_DRIVER_VERSION 13000
#define FG_GRANULARITY    (2ULL << 20) /* VMM allocation granularity: 2 MiB */
#define FG_SPIN_NAME      "vgpu_spin"

enum fg_kind {
    FG_K_CTX = 1,
    FG_K_STREAM,
    FG_K_EVENT,
    FG_K_MODULE,
    FG_K_FUNC,
    FG_K_GRAPH,
    FG_K_EXEC,
    FG_K_POOL,
    FG_K_ARRAY,
    FG_K_MIPMAP,
    FG_K_VMM,
    /* address-keyed entries */
    FG_K_DEVMEM,  /* cuMemAlloc*, pitch, managed, async: base -> struct fg_alloc */
    FG_K_HOSTMEM, /* cuMemAllocHost / cuMemHostAlloc / cuMemHostRegister */
    FG_K_RESERVE, /* cuMemAddressReserve range */
    FG_K_MAPPING, /* cuMemMap range */
};

struct fg_ctx {
    int dev;
    bool primary;
    bool destroyed; /* regular: destroyed; primary: not retained (inactive) */
    unsigned flags;
    int default_sid; /* the context's legacy default stream in the shared state */
};

struct fg_graph;

struct fg_stream {
    struct fg_ctx *ctx;
    int sid;
    unsigned flags;
    int priority;
    CUstreamCaptureStatus capture;
    CUstreamCaptureMode capture_mode;
    struct fg_graph *graph; /* being captured into */
    uint64_t capture_id;
};

struct fg_event {
    struct fg_ctx *ctx;
    int eid;
    unsigned flags;
    bool recorded;
};

struct fg_func;
struct fg_module {
    struct fg_func *funcs; /* unloading invalidates them */
};

struct fg_func {
    struct fg_module *mod;
    struct fg_func *next;
    bool spin; /* vgpu_spin: duration is the first parameter */
    char name[64];
};

enum fg_node_type { FG_NODE_KERNEL, FG_NODE_COPY, FG_NODE_SET };

struct fg_node {
    enum fg_node_type type;
    uint64_t ns; /* a kernel's duration as written; stretched when launched (device_ns) */
    void *dst;
    const void *src;
    size_t bytes;
    uint32_t value;
    unsigned elem; /* memset element size: 1, 2 or 4 */
};

#define FG_GRAPH_NODES_MAX (1u << 20) /* most nodes one graph may hold */

struct fg_graph {
    struct fg_node *nodes;
    size_t count, cap;
};

struct fg_exec {
    struct fg_node *nodes;
    size_t count;
};

struct fg_pool {
    int dev;
    bool is_default;
    uint64_t threshold;
    uint64_t used, cached; /* bytes handed out / freed but still held (charged) */
    uint64_t used_high, reserved_high;
    int reuse[3];
    struct fg_pool *next;
};

struct fg_alloc {
    uintptr_t base;
    size_t size;     /* what the caller may touch */
    size_t map_size; /* what was mapped (0: not ours to unmap) */
    uint64_t charged;
    int dev;
    bool managed;
    struct fg_pool *pool; /* async allocations */
    struct fg_vmm *vmm;   /* FG_K_MAPPING */
};

struct fg_array {
    void *data;
    size_t bytes;
    int dev;
};

/* One physical allocation as this process holds it: made by cuMemCreate or imported
 * from another process's shareable handle (each holder is charged its size). */
struct fg_vmm {
    int dev;
    size_t size;
    int fd;
    int refs; /* handle references: create or import, plus retains, not yet released */
    int maps;
    unsigned handle_types; /* CUmemAllocationHandleType bits it may be exported as */
};

/* The client side of MPS (cuda_mps.c): whether this process is an MPS client, its
 * active thread share and its pinned device memory limit per CUDA ordinal. */
#define FG_MPS_SHARE_FULL 100000u /* share unit: thousandths of a percent */
struct fg_mps {
    bool client;
    uint32_t share;                 /* 1..FG_MPS_SHARE_FULL */
    uint64_t limit[FG_MAX_DEVICES]; /* bytes; UINT64_MAX: no limit */
};

struct vg_err;
/* Reads CUDA_MPS_PIPE_DIRECTORY, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE and
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (each NULL when unset) for the n visible devices
 * (visible[i]: ordinal i's description). -EINVAL with err naming the variable for a
 * malformed value; the rules are in cuda_mps.c. */
int fg_mps_parse(const char *pipe, const char *share, const char *limits,
                 const struct fg_device_info *visible, int n, struct fg_mps *out,
                 struct vg_err *err);
/* A kernel's device time for a process with this share (ns * 100 / percentage, rounded
 * up, saturating). */
uint64_t fg_mps_kernel_ns(const struct fg_mps *m, uint64_t ns);
/* ns * num / den, rounded up and saturating, for num > den (ns unchanged otherwise): a
 * kernel's device time on a share num/den of the SMs it would fill (num and den below
 * 2^32). The MPS share above and a MIG device's share of its GPU's SMs both use it. */
uint64_t fg_stretch_ns(uint64_t ns, uint64_t num, uint64_t den);

struct fg_global {
    pthread_mutex_t lock;
    bool inited;
    struct fg_state *st;
    int ndev;                 /* visible devices (CUDA ordinals) */
    int phys[FG_MAX_DEVICES]; /* ordinal -> physical index in the state */
    int mig[FG_MAX_DEVICES];  /* ordinal -> MIG device slot on it (-1: the whole GPU) */
    struct fg_device_info info[FG_MAX_DEVICES]; /* by ordinal: the physical device's */
    int gpu_sms[FG_MAX_DEVICES];                /* by ordinal: the whole GPU's SMs (info[] has a MIG
                                                   device's own) */
    struct fg_ctx *primary[FG_MAX_DEVICES];
    unsigned primary_refs[FG_MAX_DEVICES];
    unsigned primary_flags[FG_MAX_DEVICES];
    struct fg_pool *default_pool[FG_MAX_DEVICES];
    struct fg_pool *current_pool[FG_MAX_DEVICES]; /* cuDeviceSetMemPool; NULL: default */
    struct fg_pool *pools;
    uint64_t kernel_ns;
    struct fg_mps mps;
    uint64_t mps_used[FG_MAX_DEVICES]; /* device memory charged per ordinal (atomic) */
};

extern struct fg_global fg_g;

/* CUDA_VISIBLE_DEVICES (spec; NULL when unset) over the count physical devices devs:
 * fills phys[0..n) with the physical index of each CUDA ordinal, mig[0..n) with the MIG
 * device slot it names (-1: the whole GPU), and returns n (0: no device visible). phys
 * and mig have room for count entries. Rules in cuda_visible.c. */
int fg_visible_parse(const char *spec, const struct fg_device_info *devs, int count, int *phys,
                     int *mig);

/* The physical device behind a CUDA ordinal, for calls into the shared state (-1 for an
 * ordinal that is not visible, which the state refuses). Everything else in libcuda
 * works on ordinals. */
static inline int fg_phys(int ordinal)
{
    return ordinal >= 0 && ordinal < fg_g.ndev ? fg_g.phys[ordinal] : -1;
}

void fg_lock(void);
void fg_unlock(void);

/* The handle table: (key, kind) -> value. fg_reg_add returns false when out of memory. */
bool fg_reg_add(uintptr_t key, enum fg_kind kind, void *value);
void *fg_reg_get(uintptr_t key, enum fg_kind kind);
void fg_reg_del(uintptr_t key, enum fg_kind kind);
/* Calls fn for every entry of kind until it returns true; returns that entry's value. */
void *fg_reg_find(enum fg_kind kind, bool (*fn)(void *value, const void *arg), const void *arg);

/* The sequence number of the last item this process queued on shared stream sid
 * (reset to 0 when the stream is opened). */
void fg_seq_note(int sid, uint64_t seq);
uint64_t fg_seq_last(int sid);

/* Negative errno from the state -> driver code. */
CUresult fg_from_errno(int rc);

/* The calling thread's current context, checked: NOT_INITIALIZED, INVALID_CONTEXT,
 * CONTEXT_IS_DESTROYED. Call without the lock. */
CUresult fg_current(struct fg_ctx **out);
CUresult fg_check_init(void);
CUresult fg_check_device(CUdevice dev);

/* Resolves a stream argument for a call on the current context (under the lock).
 * per_thread: the _ptsz/_ptds entry point (NULL means the per-thread default stream).
 * *obj is NULL for the default streams. */
CUresult fg_stream_resolve(struct fg_ctx *ctx, CUstream h, bool per_thread, int *sid,
                           struct fg_stream **obj);

/* Releases cached pool memory above each pool's threshold (at synchronisation). */
void fg_pools_trim_all(int dev);

/* Appends a node to a graph being captured (under the lock). */
CUresult fg_graph_add(struct fg_graph *g, const struct fg_node *node);

/* Device memory lookups (under the lock): the allocation or mapping that holds
 * [p, p + n), or NULL. */
bool fg_range_known(uintptr_t p, size_t n);

#endif
