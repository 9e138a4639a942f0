/* Replays of the memory attacks of round 2 (docs/security.md, "Memory the driver holds"):
 * a tenant under a 1 GiB limit tries, through one allocation path and call order, to end
 * holding more than its limit. Run under libvgpu (LD_PRELOAD) against fakegpu, linked to
 * fakegpu's libcuda.so.1:
 *   memory_attack CASE
 * prints "held=<MiB> limit=<MiB>", the largest this process held on device 0 in fakegpu's
 * truth (what NVML lists for it, context included) while it attacked, then frees
 * everything and checks that cuMemGetInfo's free memory is back to what it was at the
 * start (no charge left behind, none lost). Exit 0: the limit held and the charges came
 * back; 1: the attack got more than the limit (or a charge was left behind); 2: the
 * harness failed. The attacker ignores refusals and keeps going, as a real one would. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "abi/cuda.h"
#include "abi/cuda_array.h"
#include "fakegpu/state.h"

#define MiB   (UINT64_C(1) << 20)
#define LIMIT (1024 * MiB)
#define ROUND 24 /* attempts per attack */
#define CHUNK (256 * MiB)

static struct fg_state *truth_state;
static uint64_t held_max;
static pid_t partner; /* "ipc": the importing process, counted with this one */

/* What fakegpu says this process holds on device 0 now; the maximum is kept. */
static uint64_t truth(void)
{
    struct fg_proc_usage procs[FG_MAX_PROCS];
    unsigned count = FG_MAX_PROCS;
    uint64_t mine = 0;
    if (fg_procs_on_device(truth_state, 0, 1000000, procs, &count) == 0)
        for (unsigned i = 0; i < count; i++)
            if (procs[i].pid == getpid() || (partner > 0 && procs[i].pid == partner))
                mine += procs[i].used_bytes;
    if (mine > held_max)
        held_max = mine;
    return mine;
}

static void die(const char *what, CUresult r)
{
    fprintf(stderr, "memory_attack: %s: CUDA error %d\n", what, (int)r);
    exit(2);
}

#define MUST(call)                                                                                 \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS)                                                                    \
            die(#call, r_);                                                                        \
    } while (0)

static CUmemAllocationProp vmm_prop(bool shareable)
{
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    if (shareable)
        p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* ---- VMM: every order of release, unmap, retain and import ---- */

struct vmm_slot {
    CUdeviceptr va;
    CUmemGenericAllocationHandle h, h2;
    bool mapped, held, held2;
};
static struct vmm_slot vs[ROUND];

/* Creates, reserves and maps one chunk into slot i; false when refused. */
static bool vmm_make(int i, bool shareable)
{
    CUmemAllocationProp p = vmm_prop(shareable);
    MUST(cuMemAddressReserve(&vs[i].va, CHUNK, 0, 0, 0));
    if (cuMemCreate(&vs[i].h, CHUNK, &p, 0) != CUDA_SUCCESS)
        return false;
    vs[i].held = true;
    vs[i].mapped = cuMemMap(vs[i].va, CHUNK, 0, vs[i].h, 0) == CUDA_SUCCESS;
    return true;
}

static void vmm_cleanup(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (vs[i].mapped)
            (void)cuMemUnmap(vs[i].va, CHUNK);
        if (vs[i].held)
            (void)cuMemRelease(vs[i].h);
        if (vs[i].held2)
            (void)cuMemRelease(vs[i].h2);
        if (vs[i].va != 0)
            (void)cuMemAddressFree(vs[i].va, CHUNK);
    }
    memset(vs, 0, sizeof vs);
}

/* Issue 22, item 2: map, then release the handle; the mapping keeps the memory. */
static void vmm_release_mapped(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (vmm_make(i, false) && cuMemRelease(vs[i].h) == CUDA_SUCCESS)
            vs[i].held = false;
        truth();
    }
}

/* The other order: unmap first, keep the handle (the handle keeps the memory). */
static void vmm_unmap_held(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (vmm_make(i, false) && vs[i].mapped && cuMemUnmap(vs[i].va, CHUNK) == CUDA_SUCCESS)
            vs[i].mapped = false;
        truth();
    }
}

/* A second reference from the mapping (cuMemRetainAllocationHandle), then unmap and
 * release the first: the retained handle keeps the memory. */
static void vmm_retain(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (vmm_make(i, false) && vs[i].mapped &&
            cuMemRetainAllocationHandle(&vs[i].h2, (void *)(uintptr_t)(vs[i].va + MiB)) ==
                CUDA_SUCCESS) {
            vs[i].held2 = true;
            if (cuMemUnmap(vs[i].va, CHUNK) == CUDA_SUCCESS)
                vs[i].mapped = false;
            if (cuMemRelease(vs[i].h) == CUDA_SUCCESS)
                vs[i].held = false;
        }
        truth();
    }
}

/* Export to a file descriptor, import it back (as a second process would), map the
 * imported handle and release both handles: the imported mapping keeps the memory. */
static void vmm_import(void)
{
    CUmemAllocationProp p = vmm_prop(true);
    for (int i = 0; i < ROUND; i++) {
        MUST(cuMemAddressReserve(&vs[i].va, CHUNK, 0, 0, 0));
        if (cuMemCreate(&vs[i].h, CHUNK, &p, 0) == CUDA_SUCCESS) {
            int fd = -1;
            MUST(cuMemExportToShareableHandle(&fd, vs[i].h,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            MUST(cuMemRelease(vs[i].h)); /* the exporter lets go */
            CUresult r = cuMemImportFromShareableHandle(&vs[i].h2, (void *)(intptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            close(fd);
            if (r == CUDA_SUCCESS) {
                vs[i].mapped = cuMemMap(vs[i].va, CHUNK, 0, vs[i].h2, 0) == CUDA_SUCCESS;
                if (vs[i].mapped)
                    MUST(cuMemRelease(vs[i].h2));
                else
                    vs[i].held2 = true;
            }
        }
        truth();
    }
}

/* The importer keeps its imported handle without mapping it: the handle alone keeps the
 * memory once the exporter let go. */
static void vmm_import_unmapped(void)
{
    CUmemAllocationProp p = vmm_prop(true);
    for (int i = 0; i < ROUND; i++) {
        if (cuMemCreate(&vs[i].h, CHUNK, &p, 0) == CUDA_SUCCESS) {
            int fd = -1;
            MUST(cuMemExportToShareableHandle(&fd, vs[i].h,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
            MUST(cuMemRelease(vs[i].h));
            vs[i].held2 = cuMemImportFromShareableHandle(
                              &vs[i].h2, (void *)(intptr_t)fd,
                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS;
            close(fd);
        }
        truth();
    }
}

/* ---- pools ---- */

static CUmemoryPool new_pool(void)
{
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    CUmemoryPool pool;
    MUST(cuMemPoolCreate(&pool, &props));
    return pool;
}

#define NPOOLS 65
static CUmemoryPool pools[NPOOLS];
static CUdeviceptr blocks[NPOOLS + ROUND];

static void pools_cleanup(void)
{
    for (int i = 0; i < NPOOLS + ROUND; i++)
        if (blocks[i] != 0)
            (void)cuMemFreeAsync(blocks[i], NULL);
    MUST(cuCtxSynchronize());
    for (int i = 0; i < NPOOLS; i++)
        if (pools[i] != NULL)
            (void)cuMemPoolDestroy(pools[i]);
    memset(blocks, 0, sizeof blocks);
    memset(pools, 0, sizeof pools);
}

/* Issue 22, item 3: 64 pools fill libvgpu's pool table, the 65th allocates freely. */
static void pool_table(void)
{
    for (int i = 0; i < NPOOLS; i++)
        pools[i] = new_pool();
    for (int i = 0; i < NPOOLS - 1; i++)
        (void)cuMemAllocFromPoolAsync(&blocks[i], 2 * MiB, pools[i], NULL);
    for (int i = 0; i < ROUND; i++) {
        (void)cuMemAllocFromPoolAsync(&blocks[NPOOLS + i], CHUNK, pools[NPOOLS - 1], NULL);
        truth();
    }
}

/* Issue 22, item 4: a pool keeps 384 MiB cached, then allocates 768 MiB that its cache
 * cannot serve in one piece. */
static void pool_cache(void)
{
    pools[0] = new_pool();
    cuuint64_t keep = UINT64_MAX;
    MUST(cuMemPoolSetAttribute(pools[0], CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    if (cuMemAllocFromPoolAsync(&blocks[0], 384 * MiB, pools[0], NULL) == CUDA_SUCCESS) {
        MUST(cuMemFreeAsync(blocks[0], NULL));
        blocks[0] = 0;
    }
    MUST(cuCtxSynchronize());
    truth();
    (void)cuMemAllocFromPoolAsync(&blocks[1], 768 * MiB, pools[0], NULL);
    truth();
    /* The cache trimmed to less than was charged, then the pool grows again. */
    (void)cuMemPoolTrimTo(pools[0], 128 * MiB);
    (void)cuMemAllocFromPoolAsync(&blocks[2], 384 * MiB, pools[0], NULL);
    truth();
}

/* cuMemAllocAsync from the device's current pool, made another than the default. */
static void pool_current(void)
{
    pools[0] = new_pool();
    MUST(cuDeviceSetMemPool(0, pools[0]));
    for (int i = 0; i < ROUND; i++) {
        (void)cuMemAllocAsync(&blocks[i], CHUNK, NULL);
        truth();
    }
}

/* cuMemAllocAsync on the default pool: allocate; free and allocate again through a
 * cache kept at the maximum threshold; allocate larger than the cache. */
static void async_default(void)
{
    CUmemoryPool def;
    MUST(cuDeviceGetDefaultMemPool(&def, 0));
    cuuint64_t keep = UINT64_MAX;
    MUST(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    for (int i = 0; i < ROUND; i++) {
        (void)cuMemAllocAsync(&blocks[i], CHUNK / 2, NULL);
        if (i % 3 == 2 && blocks[i] != 0) {
            MUST(cuMemFreeAsync(blocks[i], NULL));
            blocks[i] = 0;
            MUST(cuCtxSynchronize());
            (void)cuMemAllocAsync(&blocks[i], CHUNK, NULL);
        }
        truth();
    }
    keep = 0;
    MUST(cuMemPoolSetAttribute(def, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
}

/* ---- managed memory, arrays, mipmapped arrays ---- */

static CUdeviceptr ptrs[ROUND];
static CUarray arrays[ROUND];
static CUmipmappedArray mips[ROUND];

static void managed(void)
{
    for (int i = 0; i < ROUND; i++) {
        (void)cuMemAllocManaged(&ptrs[i], CHUNK, i % 2 ? CU_MEM_ATTACH_GLOBAL : CU_MEM_ATTACH_HOST);
        truth();
    }
}

static void arrays_2d3d(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (i % 2) {
            CUDA_ARRAY_DESCRIPTOR d = {8192, 8192, CU_AD_FORMAT_FLOAT, 1}; /* 256 MiB */
            (void)cuArrayCreate_v2(&arrays[i], &d);
        } else {
            CUDA_ARRAY3D_DESCRIPTOR d = {1024, 1024, 64, CU_AD_FORMAT_FLOAT, 1, 0};
            (void)cuArray3DCreate_v2(&arrays[i], &d);
        }
        truth();
    }
}

static void mipmaps(void)
{
    for (int i = 0; i < ROUND; i++) {
        CUDA_ARRAY3D_DESCRIPTOR d = {8192, 8192, 0, CU_AD_FORMAT_UNSIGNED_INT8, 4, 0};
        (void)cuMipmappedArrayCreate(&mips[i], &d, 1 + (unsigned)(i % 4));
        truth();
    }
}

static void plain_cleanup(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (ptrs[i] != 0)
            (void)cuMemFree_v2(ptrs[i]);
        if (arrays[i] != NULL)
            (void)cuArrayDestroy(arrays[i]);
        if (mips[i] != NULL)
            (void)cuMipmappedArrayDestroy(mips[i]);
    }
}

/* ---- graphs: memory allocation nodes, and cuMemAllocAsync captured into a graph ---- */

static CUgraph graph;
static CUstream stream;

static void graph_nodes(void)
{
    MUST(cuGraphCreate(&graph, 0));
    for (int i = 0; i < ROUND; i++) {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = 0;
        p.bytesize = CHUNK;
        CUgraphNode node;
        if (cuGraphAddMemAllocNode(&node, graph, NULL, 0, &p) == CUDA_SUCCESS)
            ptrs[i] = p.dptr;
        truth();
    }
}

static void graph_capture(void)
{
    MUST(cuStreamCreate(&stream, 0));
    MUST(cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    for (int i = 0; i < ROUND; i++) {
        (void)cuMemAllocAsync(&blocks[i], CHUNK, stream);
        truth();
    }
    MUST(cuStreamEndCapture(stream, &graph));
    truth();
}

/* Graph memory kept in the device's graph pool after its addresses were freed: three
 * 256 MiB allocation nodes, freed with cuMemFree (the pool keeps them for the graph's
 * next launch), then plain allocations; then cuDeviceGraphMemTrim and plain allocations
 * again (what the trim gave back may be allocated). */
static void graph_pool(void)
{
    MUST(cuGraphCreate(&graph, 0));
    for (int i = 0; i < 3; i++) {
        CUDA_MEM_ALLOC_NODE_PARAMS p;
        memset(&p, 0, sizeof p);
        p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        p.poolProps.location.id = 0;
        p.bytesize = CHUNK;
        CUgraphNode node;
        if (cuGraphAddMemAllocNode(&node, graph, NULL, 0, &p) == CUDA_SUCCESS)
            ptrs[i] = p.dptr;
        truth();
    }
    for (int i = 0; i < 3; i++)
        if (ptrs[i] != 0 && cuMemFree_v2(ptrs[i]) == CUDA_SUCCESS)
            ptrs[i] = 0;
    truth();
    for (int i = 3; i < 13; i++) {
        (void)cuMemAlloc_v2(&ptrs[i], CHUNK);
        truth();
    }
    MUST(cuDeviceGraphMemTrim(0));
    int got = 0;
    for (int i = 13; i < ROUND; i++) {
        got += cuMemAlloc_v2(&ptrs[i], CHUNK) == CUDA_SUCCESS;
        truth();
    }
    if (got < 3) /* the trim gave the pool's 768 MiB back: they fit again */
        die("after the trim, fewer than three chunks could be allocated", CUDA_ERROR_OUT_OF_MEMORY);
}

static void graph_cleanup(void)
{
    for (int i = 0; i < ROUND; i++) {
        if (ptrs[i] != 0)
            (void)cuMemFree_v2(ptrs[i]);
        if (blocks[i] != 0)
            (void)cuMemFreeAsync(blocks[i], NULL);
    }
    MUST(cuCtxSynchronize());
    if (graph != NULL)
        (void)cuGraphDestroy(graph);
    if (stream != NULL)
        (void)cuStreamDestroy_v2(stream);
    /* What the captured allocations left cached in the default pool goes back. */
    CUmemoryPool def;
    MUST(cuDeviceGetDefaultMemPool(&def, 0));
    (void)cuMemPoolTrimTo(def, 0);
    /* ... and what the graph pool kept. */
    MUST(cuDeviceGraphMemTrim(0));
}

/* ---- legacy IPC between two processes of one container ---- */

static int to_importer[2], from_importer[2];
static bool pool_mode; /* "pool_import": pool allocations through a shared pool */
static CUmemoryPool shared_pool;

/* The first message in pool mode: where the exporter's pool handle is. */
struct pool_where {
    int32_t pid, fd;
};

/* The importer, a second process of the container (forked before CUDA starts): starts
 * CUDA when told (after the exporter measured its free memory) and says so, opens every
 * handle it is sent and keeps it open, answering 1 (opened) or 0 (refused); an all-zero
 * handle ends it, closing everything and releasing its context, so that everything it
 * was charged comes back before it exits. */
static int importer(void)
{
    CUdevice dev;
    CUcontext ctx;
    char go = 0;
    if (read(to_importer[0], &go, 1) != 1)
        return 2;
    MUST(cuInit(0));
    MUST(cuDeviceGet(&dev, 0));
    MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
    MUST(cuCtxSetCurrent(ctx));
    if (write(from_importer[1], &go, 1) != 1)
        return 2;
    CUdeviceptr opened[ROUND];
    int n = 0;
    CUipcMemHandle h, zero;
    memset(&zero, 0, sizeof zero);
    CUmemoryPool imported = NULL;
    if (pool_mode) {
        struct pool_where w;
        char path[64];
        if (read(to_importer[0], &h, sizeof h) != (ssize_t)sizeof h)
            return 2;
        memcpy(&w, &h, sizeof w);
        snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)w.pid, (int)w.fd);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 2;
        MUST(cuMemPoolImportFromShareableHandle(&imported, (void *)(intptr_t)fd,
                                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        close(fd);
    }
    while (read(to_importer[0], &h, sizeof h) == (ssize_t)sizeof h &&
           memcmp(&h, &zero, sizeof h) != 0) {
        CUdeviceptr p = 0;
        CUmemPoolPtrExportData d;
        memcpy(&d, &h, sizeof d);
        /* as programs built with the toolkit's cuda.h call it, and by the old name */
        CUresult r = pool_mode ? cuMemPoolImportPointer(&p, imported, &d)
                     : n % 2   ? cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
                               : cuIpcOpenMemHandle_v2(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
        char ok = r == CUDA_SUCCESS && n < ROUND;
        if (ok)
            opened[n++] = p;
        if (write(from_importer[1], &ok, 1) != 1)
            return 2;
    }
    for (int i = 0; i < n; i++)
        MUST(pool_mode ? cuMemFree_v2(opened[i]) : cuIpcCloseMemHandle(opened[i]));
    if (imported != NULL)
        MUST(cuMemPoolDestroy(imported));
    MUST(cuDevicePrimaryCtxRelease_v2(dev));
    return 0;
}

/* The exporter allocates, hands the importer its handle, waits until it is open, and
 * frees its own: the importer's open keeps the memory, so each round would add a chunk
 * the container holds beyond what its counters show. */
static void ipc_relay(void)
{
    char go = 1;
    if (write(to_importer[1], &go, 1) != 1 || read(from_importer[0], &go, 1) != 1)
        die("starting the importer", CUDA_ERROR_UNKNOWN);
    for (int i = 0; i < ROUND; i++) {
        CUdeviceptr p = 0;
        if (cuMemAlloc_v2(&p, CHUNK) == CUDA_SUCCESS) {
            CUipcMemHandle h;
            MUST(cuIpcGetMemHandle(&h, p));
            char ok = 0;
            if (write(to_importer[1], &h, sizeof h) != (ssize_t)sizeof h ||
                read(from_importer[0], &ok, 1) != 1)
                die("talking to the importer", CUDA_ERROR_UNKNOWN);
            truth();
            MUST(cuMemFree_v2(p)); /* the exporter lets go; the importer holds on */
        }
        truth();
    }
}

/* The same through a shared pool: the exporter's pool is exported by a file descriptor,
 * each allocation from it by cuMemPoolExportPointer and imported with
 * cuMemPoolImportPointer, then freed by the exporter (the pool releases it at the next
 * synchronisation). */
static void pool_import(void)
{
    char go = 1;
    if (write(to_importer[1], &go, 1) != 1 || read(from_importer[0], &go, 1) != 1)
        die("starting the importer", CUDA_ERROR_UNKNOWN);
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = 0;
    MUST(cuMemPoolCreate(&shared_pool, &props));
    int fd = -1;
    MUST(cuMemPoolExportToShareableHandle(&fd, shared_pool,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CUipcMemHandle msg;
    memset(&msg, 0, sizeof msg);
    struct pool_where w = {(int32_t)getpid(), fd};
    memcpy(&msg, &w, sizeof w);
    if (write(to_importer[1], &msg, sizeof msg) != (ssize_t)sizeof msg)
        die("talking to the importer", CUDA_ERROR_UNKNOWN);
    for (int i = 0; i < ROUND; i++) {
        CUdeviceptr p = 0;
        if (cuMemAllocFromPoolAsync(&p, CHUNK, shared_pool, NULL) == CUDA_SUCCESS) {
            MUST(cuCtxSynchronize());
            CUmemPoolPtrExportData d;
            MUST(cuMemPoolExportPointer(&d, p));
            memset(&msg, 0, sizeof msg);
            memcpy(&msg, &d, sizeof d);
            char ok = 0;
            if (write(to_importer[1], &msg, sizeof msg) != (ssize_t)sizeof msg ||
                read(from_importer[0], &ok, 1) != 1)
                die("talking to the importer", CUDA_ERROR_UNKNOWN);
            truth();
            MUST(cuMemFreeAsync(p, NULL)); /* the exporter lets go; the importer holds on */
            MUST(cuCtxSynchronize());
        }
        truth();
    }
    close(fd);
}

static void ipc_cleanup(void)
{
    CUipcMemHandle zero;
    memset(&zero, 0, sizeof zero);
    if (write(to_importer[1], &zero, sizeof zero) != (ssize_t)sizeof zero)
        die("ending the importer", CUDA_ERROR_UNKNOWN);
    int status = 0;
    if (waitpid(partner, &status, 0) != partner || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("the importer failed", CUDA_ERROR_UNKNOWN);
    partner = 0;
    if (shared_pool != NULL)
        MUST(cuMemPoolDestroy(shared_pool));
}

static const struct {
    const char *name;
    void (*attack)(void);
    void (*cleanup)(void);
    /* Least the tenant must have held at some point, in MiB: the limit less one chunk, so
     * a libvgpu that refused the path outright (or everything) fails the replay too. The
     * pool table's 64 small pools and one context reach 384. */
    uint64_t reach_mib;
} cases[] = {
    {"vmm_release_mapped", vmm_release_mapped, vmm_cleanup, (LIMIT - CHUNK) / MiB},
    {"vmm_unmap_held", vmm_unmap_held, vmm_cleanup, (LIMIT - CHUNK) / MiB},
    {"vmm_retain", vmm_retain, vmm_cleanup, (LIMIT - CHUNK) / MiB},
    {"vmm_import", vmm_import, vmm_cleanup, (LIMIT - CHUNK) / MiB},
    {"vmm_import_unmapped", vmm_import_unmapped, vmm_cleanup, (LIMIT - CHUNK) / MiB},
    {"pool_table", pool_table, pools_cleanup, 384},
    {"pool_cache", pool_cache, pools_cleanup, (LIMIT - CHUNK) / MiB},
    {"pool_current", pool_current, pools_cleanup, (LIMIT - CHUNK) / MiB},
    {"async_default", async_default, pools_cleanup, (LIMIT - CHUNK) / MiB},
    {"managed", managed, plain_cleanup, (LIMIT - CHUNK) / MiB},
    {"arrays", arrays_2d3d, plain_cleanup, (LIMIT - CHUNK) / MiB},
    {"mipmaps", mipmaps, plain_cleanup, (LIMIT - CHUNK) / MiB},
    {"graph_nodes", graph_nodes, graph_cleanup, (LIMIT - CHUNK) / MiB},
    {"graph_capture", graph_capture, graph_cleanup, (LIMIT - CHUNK) / MiB},
    {"graph_pool", graph_pool, graph_cleanup, (LIMIT - CHUNK) / MiB},
    {"ipc", ipc_relay, ipc_cleanup, (LIMIT - CHUNK) / MiB},
    {"pool_import", pool_import, ipc_cleanup, (LIMIT - CHUNK) / MiB},
};

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: memory_attack CASE\n");
        return 2;
    }
    size_t n = sizeof cases / sizeof cases[0], k = 0;
    while (k < n && strcmp(cases[k].name, argv[1]) != 0)
        k++;
    if (k == n) {
        fprintf(stderr, "memory_attack: unknown case %s\n", argv[1]);
        return 2;
    }
    if (fg_state_get(&truth_state) != 0) {
        fprintf(stderr, "memory_attack: no fakegpu state (FAKEGPU_STATE_DIR)\n");
        return 2;
    }
    pool_mode = strcmp(argv[1], "pool_import") == 0;
    if (strcmp(argv[1], "ipc") == 0 || pool_mode) {
        if (pipe(to_importer) != 0 || pipe(from_importer) != 0)
            return 2;
        partner = fork();
        if (partner < 0)
            return 2;
        if (partner == 0)
            _exit(importer());
    }
    CUdevice dev;
    CUcontext ctx;
    MUST(cuInit(0));
    MUST(cuDeviceGet(&dev, 0));
    MUST(cuDevicePrimaryCtxRetain(&ctx, dev));
    MUST(cuCtxSetCurrent(ctx));
    size_t free_before, free_after, total;
    MUST(cuMemGetInfo_v2(&free_before, &total));

    cases[k].attack();
    truth();
    cases[k].cleanup();
    MUST(cuCtxSynchronize());
    MUST(cuMemGetInfo_v2(&free_after, &total));

    printf("held=%" PRIu64 " limit=%" PRIu64 " free_before=%zu free_after=%zu\n", held_max / MiB,
           LIMIT / MiB, free_before / MiB, free_after / MiB);
    int rc = 0;
    if (held_max > LIMIT) {
        fprintf(stderr, "memory_attack: %s held %" PRIu64 " MiB under a %" PRIu64 " MiB limit\n",
                cases[k].name, held_max / MiB, LIMIT / MiB);
        rc = 1;
    }
    if (held_max / MiB < cases[k].reach_mib) {
        fprintf(stderr,
                "memory_attack: %s held at most %" PRIu64 " MiB, less than the %" PRIu64
                " MiB its limit allows: the path was refused, not charged\n",
                cases[k].name, held_max / MiB, cases[k].reach_mib);
        rc = 1;
    }
    if (free_after != free_before) {
        fprintf(stderr, "memory_attack: %s: free memory %zu MiB after cleanup, %zu before\n",
                cases[k].name, free_after / MiB, free_before / MiB);
        rc = 1;
    }
    return rc;
}
