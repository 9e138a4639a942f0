/* fakegpu libcuda: streams, events, modules, kernel launches, stream capture and graphs.
 *
 * A kernel is a duration queued on a shared-state stream: `vgpu_spin` lasts its first
 * parameter in ns, anything else FAKEGPU_KERNEL_NS. The default streams are shared-state
 * streams too: each context has one legacy default stream, and each thread gets its own
 * per-thread default stream per context on first use of a _ptsz/_ptds entry point (or of
 * CU_STREAM_PER_THREAD), closed when the thread exits.
 *
 * Capture: while a stream captures, launches and copies on it become graph nodes instead
 * of work; cuGraphLaunch replays the nodes onto a stream. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/str.h"
#include "fakegpu/cuda_internal.h"

/* ---- per-thread default streams ---- */

#define FG_PT_MAX 8
struct fg_pt_entry {
    struct fg_ctx *ctx;
    int sid;
};
static __thread struct fg_pt_entry tls_pt[FG_PT_MAX];
static __thread int tls_pt_count;
static pthread_key_t pt_key;
static pthread_once_t pt_once = PTHREAD_ONCE_INIT;

static void pt_thread_exit(void *arg)
{
    (void)arg;
    for (int i = 0; i < tls_pt_count; i++)
        fg_stream_close(fg_g.st, tls_pt[i].sid);
    tls_pt_count = 0;
}

static void pt_key_init(void)
{
    pthread_key_create(&pt_key, pt_thread_exit);
}

static CUresult pt_stream(struct fg_ctx *ctx, int *sid)
{
    for (int i = 0; i < tls_pt_count; i++)
        if (tls_pt[i].ctx == ctx) {
            *sid = tls_pt[i].sid;
            return CUDA_SUCCESS;
        }
    if (tls_pt_count == FG_PT_MAX) {
        *sid = ctx->default_sid; /* more contexts than slots: share the legacy stream */
        return CUDA_SUCCESS;
    }
    pthread_once(&pt_once, pt_key_init);
    int rc = fg_stream_open(fg_g.st, fg_phys(ctx->dev), sid);
    if (rc != 0)
        return fg_from_errno(rc);
    fg_seq_note(*sid, 0);
    tls_pt[tls_pt_count++] = (struct fg_pt_entry){ctx, *sid};
    pthread_setspecific(pt_key, tls_pt);
    return CUDA_SUCCESS;
}

CUresult fg_stream_resolve(struct fg_ctx *ctx, CUstream h, bool per_thread, int *sid,
                           struct fg_stream **obj)
{
    *obj = NULL;
    if (h == NULL)
        h = per_thread ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
    if (h == CU_STREAM_LEGACY) {
        *sid = ctx->default_sid;
        return CUDA_SUCCESS;
    }
    if (h == CU_STREAM_PER_THREAD)
        return pt_stream(ctx, sid);
    struct fg_stream *s = fg_reg_get((uintptr_t)h, FG_K_STREAM);
    if (!s)
        return CUDA_ERROR_INVALID_HANDLE;
    if (s->ctx->destroyed)
        return s->ctx->primary ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *sid = s->sid;
    *obj = s;
    return CUDA_SUCCESS;
}

/* Current context + stream in one step (takes and drops the lock). */
static CUresult resolve(CUstream h, bool per_thread, struct fg_ctx **ctx, int *sid,
                        struct fg_stream **obj)
{
    CUresult r = fg_current(ctx);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    r = fg_stream_resolve(*ctx, h, per_thread, sid, obj);
    fg_unlock();
    return r;
}

/* ---- streams ---- */

FG_API CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phStream || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->ctx = c;
    s->flags = flags;
    s->priority = priority > 0 ? 0 : priority < -5 ? -5 : priority; /* clamped, as the driver */
    fg_lock();
    int rc = fg_stream_open(fg_g.st, fg_phys(c->dev), &s->sid);
    r = fg_from_errno(rc);
    if (r == CUDA_SUCCESS)
        fg_seq_note(s->sid, 0);
    if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)s, FG_K_STREAM, s)) {
        fg_stream_close(fg_g.st, s->sid);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        free(s);
        return r;
    }
    *phStream = (CUstream)s;
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    return cuStreamCreateWithPriority(phStream, Flags, 0);
}

static void graph_free(struct fg_graph *g)
{
    if (g) {
        free(g->nodes);
        free(g);
    }
}

FG_API CUresult cuStreamDestroy_v2(CUstream hStream)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_stream *s = fg_reg_get((uintptr_t)hStream, FG_K_STREAM);
    if (!s) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    fg_reg_del((uintptr_t)s, FG_K_STREAM);
    fg_stream_close(fg_g.st, s->sid); /* queued work still completes */
    fg_unlock();
    graph_free(s->graph);
    free(s);
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamDestroy(CUstream hStream)
{
    return cuStreamDestroy_v2(hStream);
}

static CUresult stream_sync(CUstream h, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s && s->capture != CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    r = fg_from_errno(fg_stream_wait(fg_g.st, sid));
    fg_pools_trim_all(c->dev);
    return r;
}

FG_API CUresult cuStreamSynchronize(CUstream hStream)
{
    return stream_sync(hStream, false);
}

FG_API CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    return stream_sync(hStream, true);
}

static CUresult stream_query(CUstream h, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (s && s->capture != CU_STREAM_CAPTURE_STATUS_NONE)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    /* Done when the last item this process queued there is done. */
    bool done = false;
    int rc = fg_stream_done(fg_g.st, sid, fg_seq_last(sid), &done);
    if (rc != 0)
        return fg_from_errno(rc);
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

FG_API CUresult cuStreamQuery(CUstream hStream)
{
    return stream_query(hStream, false);
}

FG_API CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    return stream_query(hStream, true);
}

static CUresult stream_wait_event(CUstream h, CUevent e, unsigned flags, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~1U)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_event *ev = fg_reg_get((uintptr_t)e, FG_K_EVENT);
    int eid = ev ? ev->eid : -1;
    bool recorded = ev && ev->recorded;
    bool capturing = s && s->capture != CU_STREAM_CAPTURE_STATUS_NONE;
    fg_unlock();
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!recorded || capturing)
        return CUDA_SUCCESS; /* never-recorded events are complete; capture joins are no-ops */
    return fg_from_errno(fg_stream_wait_event(fg_g.st, sid, eid));
}

FG_API CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags, false);
}

FG_API CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
    return stream_wait_event(hStream, hEvent, Flags, true);
}

static CUresult stream_get_ctx(CUstream h, CUcontext *pctx, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    if (!pctx)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r == CUDA_SUCCESS)
        *pctx = (CUcontext)(s ? s->ctx : c);
    return r;
}

FG_API CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
    return stream_get_ctx(hStream, pctx, false);
}

FG_API CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
    return stream_get_ctx(hStream, pctx, true);
}

/* ---- events ---- */

FG_API CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (!phEvent || (Flags & ~0x7U))
        return CUDA_ERROR_INVALID_VALUE;
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->ctx = c;
    ev->flags = Flags;
    fg_lock();
    r = fg_from_errno(fg_event_create(fg_g.st, &ev->eid));
    if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)ev, FG_K_EVENT, ev)) {
        fg_event_destroy(fg_g.st, ev->eid);
        r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        free(ev);
        return r;
    }
    *phEvent = (CUevent)ev;
    return CUDA_SUCCESS;
}

static CUresult event_record(CUevent e, CUstream h, unsigned flags, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_event *ev = fg_reg_get((uintptr_t)e, FG_K_EVENT);
    if (!ev) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s && s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        fg_unlock();
        return CUDA_SUCCESS; /* an event node: nothing to time in the simulation */
    }
    int rc = fg_event_record(fg_g.st, ev->eid, sid);
    if (rc == 0)
        ev->recorded = true;
    fg_unlock();
    return fg_from_errno(rc);
}

FG_API CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, 0, false);
}

FG_API CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
    return event_record(hEvent, hStream, 0, true);
}

FG_API CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, false);
}

FG_API CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
    return event_record(hEvent, hStream, flags, true);
}

/* Looks an event up; *eid is -1 when it was never recorded. */
static CUresult event_lookup(CUevent e, int *eid, unsigned *flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_event *ev = fg_reg_get((uintptr_t)e, FG_K_EVENT);
    if (ev) {
        *eid = ev->recorded ? ev->eid : -1;
        if (flags)
            *flags = ev->flags;
    }
    fg_unlock();
    return ev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

FG_API CUresult cuEventQuery(CUevent hEvent)
{
    int eid;
    CUresult r = event_lookup(hEvent, &eid, NULL);
    if (r != CUDA_SUCCESS || eid < 0)
        return r;
    uint64_t t;
    int rc = fg_event_query(fg_g.st, eid, &t);
    return rc == -EAGAIN ? CUDA_ERROR_NOT_READY : fg_from_errno(rc);
}

FG_API CUresult cuEventSynchronize(CUevent hEvent)
{
    int eid;
    CUresult r = event_lookup(hEvent, &eid, NULL);
    if (r != CUDA_SUCCESS || eid < 0)
        return r;
    r = fg_from_errno(fg_event_wait(fg_g.st, eid));
    fg_pools_trim_all(-1);
    return r;
}

FG_API CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    int e0, e1;
    unsigned f0 = 0, f1 = 0;
    if (!pMilliseconds)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = event_lookup(hStart, &e0, &f0);
    if (r == CUDA_SUCCESS)
        r = event_lookup(hEnd, &e1, &f1);
    if (r != CUDA_SUCCESS)
        return r;
    if (e0 < 0 || e1 < 0 || ((f0 | f1) & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_HANDLE;
    uint64_t t0, t1;
    int rc = fg_event_query(fg_g.st, e0, &t0);
    if (rc == 0)
        rc = fg_event_query(fg_g.st, e1, &t1);
    if (rc == -EAGAIN)
        return CUDA_ERROR_NOT_READY;
    if (rc != 0)
        return fg_from_errno(rc);
    double ms = ((double)t1 - (double)t0) / 1e6;
    *pMilliseconds = (float)ms;
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
    return cuEventElapsedTime_v2(pMilliseconds, hStart, hEnd);
}

FG_API CUresult cuEventDestroy_v2(CUevent hEvent)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_event *ev = fg_reg_get((uintptr_t)hEvent, FG_K_EVENT);
    if (ev) {
        fg_reg_del((uintptr_t)ev, FG_K_EVENT);
        fg_event_destroy(fg_g.st, ev->eid);
    }
    fg_unlock();
    if (!ev)
        return CUDA_ERROR_INVALID_HANDLE;
    free(ev);
    return CUDA_SUCCESS;
}

FG_API CUresult cuEventDestroy(CUevent hEvent)
{
    return cuEventDestroy_v2(hEvent);
}

/* ---- modules and functions ---- */

static CUresult module_new(CUmodule *module)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    struct fg_module *m = calloc(1, sizeof *m);
    if (!m)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    bool ok = fg_reg_add((uintptr_t)m, FG_K_MODULE, m);
    fg_unlock();
    if (!ok) {
        free(m);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *module = (CUmodule)m;
    return CUDA_SUCCESS;
}

FG_API CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !fname)
        return CUDA_ERROR_INVALID_VALUE;
    int fd = open(fname, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return CUDA_ERROR_FILE_NOT_FOUND;
    close(fd);
    return module_new(module);
}

FG_API CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!module || !image)
        return CUDA_ERROR_INVALID_VALUE;
    return module_new(module);
}

FG_API CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions,
                                   CUjit_option *options, void **optionValues)
{
    if (numOptions > 0 && (!options || !optionValues))
        return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadData(module, image);
}

FG_API CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
    return cuModuleLoadData(module, fatCubin);
}

FG_API CUresult cuModuleUnload(CUmodule hmod)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_module *m = fg_reg_get((uintptr_t)hmod, FG_K_MODULE);
    if (m) {
        fg_reg_del((uintptr_t)m, FG_K_MODULE);
        for (struct fg_func *f = m->funcs, *next; f; f = next) {
            next = f->next;
            fg_reg_del((uintptr_t)f, FG_K_FUNC);
            free(f);
        }
    }
    fg_unlock();
    if (!m)
        return CUDA_ERROR_INVALID_HANDLE;
    free(m);
    return CUDA_SUCCESS;
}

FG_API CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!hfunc || !name)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    struct fg_module *m = fg_reg_get((uintptr_t)hmod, FG_K_MODULE);
    if (!m) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    for (struct fg_func *f = m->funcs; f; f = f->next)
        if (strncmp(f->name, name, sizeof f->name) == 0) {
            *hfunc = (CUfunction)f;
            fg_unlock();
            return CUDA_SUCCESS;
        }
    struct fg_func *f = calloc(1, sizeof *f);
    if (!f || !fg_reg_add((uintptr_t)f, FG_K_FUNC, f)) {
        fg_unlock();
        free(f);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    (void)vg_strlcpy(f->name, name, sizeof f->name); /* long names are kept truncated */
    f->spin = strcmp(name, FG_SPIN_NAME) == 0;
    f->mod = m;
    f->next = m->funcs;
    m->funcs = f;
    *hfunc = (CUfunction)f;
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!pi)
        return CUDA_ERROR_INVALID_VALUE;
    fg_lock();
    bool ok = fg_reg_get((uintptr_t)hfunc, FG_K_FUNC) != NULL;
    fg_unlock();
    if (!ok)
        return CUDA_ERROR_INVALID_HANDLE;
    switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        *pi = 1024;
        break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
        *pi = 16;
        break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
        *pi = 80;
        break;
    default:
        *pi = 0;
    }
    return CUDA_SUCCESS;
}

/* ---- launches ---- */

/* The kernel's duration as written: vgpu_spin's first parameter, from kernelParams or
 * from the packed `extra` buffer. */
static uint64_t kernel_ns(const struct fg_func *f, void **params, void **extra)
{
    if (!f->spin)
        return fg_g.kernel_ns;
    unsigned long long ns = 0;
    if (params && params[0]) {
        memcpy(&ns, params[0], sizeof ns);
    } else if (extra) {
        const void *buf = NULL;
        size_t size = 0;
        for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END && i < 16; i += 2) {
            if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = extra[i + 1];
            else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
                memcpy(&size, extra[i + 1], sizeof size);
            else
                break;
        }
        if (buf && size >= sizeof ns)
            memcpy(&ns, buf, sizeof ns);
    }
    return ns;
}

/* A kernel's device time on ordinal ord. Every kernel is taken to fill its device, so on
 * a share of the SMs it takes proportionally longer: an MPS client's active thread share,
 * and a MIG device's share of its GPU's SMs (both, for a client inside an instance).
 * Applied when work is queued (graphs: at launch, on the launching stream's device). */
static uint64_t device_ns(int ord, uint64_t ns)
{
    ns = fg_mps_kernel_ns(&fg_g.mps, ns);
    if (ord >= 0 && ord < fg_g.ndev && fg_g.mig[ord] >= 0 && fg_g.info[ord].sm_count > 0)
        ns = fg_stretch_ns(ns, (uint64_t)fg_g.gpu_sms[ord], (uint64_t)fg_g.info[ord].sm_count);
    return ns;
}

static CUresult launch(CUfunction fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                       unsigned by, unsigned bz, CUstream h, void **params, void **extra, bool pt)
{
    struct fg_ctx *c;
    CUresult r = fg_current(&c);
    if (r != CUDA_SUCCESS)
        return r;
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (uint64_t)bx * by * bz > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_stream *s;
    int sid;
    fg_lock();
    struct fg_func *f = fg_reg_get((uintptr_t)fn, FG_K_FUNC);
    if (!f) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    r = fg_stream_resolve(c, h, pt, &sid, &s);
    if (r != CUDA_SUCCESS) {
        fg_unlock();
        return r;
    }
    uint64_t ns = kernel_ns(f, params, extra);
    if (s && s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        struct fg_node node = {.type = FG_NODE_KERNEL, .ns = ns};
        r = fg_graph_add(s->graph, &node);
        fg_unlock();
        return r;
    }
    ns = device_ns(s ? s->ctx->dev : c->dev, ns);
    fg_unlock();
    uint64_t seq;
    int rc = fg_stream_launch(fg_g.st, sid, ns, &seq);
    if (rc == 0)
        fg_seq_note(sid, seq);
    return fg_from_errno(rc);
}

FG_API CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                               unsigned int gridDimZ, unsigned int blockDimX,
                               unsigned int blockDimY, unsigned int blockDimZ,
                               unsigned int sharedMemBytes, CUstream hStream, void **kernelParams,
                               void **extra)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, extra, false);
}

FG_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                    unsigned int gridDimZ, unsigned int blockDimX,
                                    unsigned int blockDimY, unsigned int blockDimZ,
                                    unsigned int sharedMemBytes, CUstream hStream,
                                    void **kernelParams, void **extra)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, extra, true);
}

static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params, void **extra,
                          bool pt)
{
    if (!config || (config->numAttrs > 0 && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->hStream, params, extra, pt);
}

FG_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
                                 void **extra)
{
    return launch_ex(config, f, kernelParams, extra, false);
}

FG_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                      void **kernelParams, void **extra)
{
    return launch_ex(config, f, kernelParams, extra, true);
}

FG_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                          unsigned int gridDimY, unsigned int gridDimZ,
                                          unsigned int blockDimX, unsigned int blockDimY,
                                          unsigned int blockDimZ, unsigned int sharedMemBytes,
                                          CUstream hStream, void **kernelParams)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, NULL, false);
}

FG_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                               unsigned int gridDimY, unsigned int gridDimZ,
                                               unsigned int blockDimX, unsigned int blockDimY,
                                               unsigned int blockDimZ, unsigned int sharedMemBytes,
                                               CUstream hStream, void **kernelParams)
{
    (void)sharedMemBytes;
    return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, hStream,
                  kernelParams, NULL, true);
}

/* ---- capture ---- */

static uint64_t capture_ids;

CUresult fg_graph_add(struct fg_graph *g, const struct fg_node *node)
{
    /* A graph past FG_GRAPH_NODES_MAX is refused as the driver refuses one it cannot hold. */
    if (vg_array_grow(&g->nodes, &g->cap, g->count + 1, sizeof *g->nodes, FG_GRAPH_NODES_MAX,
                      "graph nodes", NULL) < 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes[g->count++] = *node;
    return CUDA_SUCCESS;
}

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    if (!s)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* default streams cannot capture */
    struct fg_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    if (s->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else {
        s->capture = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        s->capture_mode = mode;
        s->graph = g;
        s->capture_id = ++capture_ids;
        g = NULL;
    }
    fg_unlock();
    free(g);
    return r;
}

FG_API CUresult cuStreamBeginCapture(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}

FG_API CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
    return begin_capture(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}

FG_API CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, false);
}

FG_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(hStream, mode, true);
}

static CUresult end_capture(CUstream h, CUgraph *phGraph, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    if (!phGraph)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    if (!s)
        return CUDA_ERROR_ILLEGAL_STATE;
    fg_lock();
    struct fg_graph *g = s->graph;
    if (s->capture == CU_STREAM_CAPTURE_STATUS_NONE) {
        r = CUDA_ERROR_ILLEGAL_STATE;
    } else if (!fg_reg_add((uintptr_t)g, FG_K_GRAPH, g)) {
        r = CUDA_ERROR_OUT_OF_MEMORY;
    } else {
        s->capture = CU_STREAM_CAPTURE_STATUS_NONE;
        s->graph = NULL;
        *phGraph = (CUgraph)g;
    }
    fg_unlock();
    return r;
}

FG_API CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, false);
}

FG_API CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(hStream, phGraph, true);
}

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *status, cuuint64_t *id,
                             CUgraph *graph, const CUgraphNode **deps, size_t *ndeps, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    if (!status)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    *status = s ? s->capture : CU_STREAM_CAPTURE_STATUS_NONE;
    bool active = *status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id && active)
        *id = s->capture_id;
    if (graph)
        *graph = active ? (CUgraph)s->graph : NULL;
    if (deps)
        *deps = NULL;
    if (ndeps)
        *ndeps = 0;
    fg_unlock();
    return CUDA_SUCCESS;
}

FG_API CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, false);
}

FG_API CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
    return capture_info(hStream, captureStatus, NULL, NULL, NULL, NULL, true);
}

FG_API CUresult cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
                                       cuuint64_t *id_out)
{
    return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, false);
}

FG_API CUresult cuStreamGetCaptureInfo_ptsz(CUstream hStream,
                                            CUstreamCaptureStatus *captureStatus_out,
                                            cuuint64_t *id_out)
{
    return capture_info(hStream, captureStatus_out, id_out, NULL, NULL, NULL, true);
}

FG_API CUresult cuStreamGetCaptureInfo_v2(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out, false);
}

FG_API CUresult cuStreamGetCaptureInfo_v2_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               size_t *numDependencies_out)
{
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out, true);
}

FG_API CUresult cuStreamGetCaptureInfo_v3(CUstream hStream,
                                          CUstreamCaptureStatus *captureStatus_out,
                                          cuuint64_t *id_out, CUgraph *graph_out,
                                          const CUgraphNode **dependencies_out,
                                          const CUgraphEdgeData **edgeData_out,
                                          size_t *numDependencies_out)
{
    if (edgeData_out)
        *edgeData_out = NULL;
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out, false);
}

FG_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream hStream,
                                               CUstreamCaptureStatus *captureStatus_out,
                                               cuuint64_t *id_out, CUgraph *graph_out,
                                               const CUgraphNode **dependencies_out,
                                               const CUgraphEdgeData **edgeData_out,
                                               size_t *numDependencies_out)
{
    if (edgeData_out)
        *edgeData_out = NULL;
    return capture_info(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                        numDependencies_out, true);
}

static __thread CUstreamCaptureMode tls_capture_mode;

FG_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = tls_capture_mode;
    tls_capture_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}

/* ---- graphs ---- */

FG_API CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraph || flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    bool ok = fg_reg_add((uintptr_t)g, FG_K_GRAPH, g);
    fg_unlock();
    if (!ok) {
        free(g);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *phGraph = (CUgraph)g;
    return CUDA_SUCCESS;
}

FG_API CUresult cuGraphDestroy(CUgraph hGraph)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_graph *g = fg_reg_get((uintptr_t)hGraph, FG_K_GRAPH);
    if (g)
        fg_reg_del((uintptr_t)g, FG_K_GRAPH);
    fg_unlock();
    if (!g)
        return CUDA_ERROR_INVALID_HANDLE;
    graph_free(g);
    return CUDA_SUCCESS;
}

FG_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
                                            unsigned long long flags)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    if (!phGraphExec || (flags & ~0xfULL))
        return CUDA_ERROR_INVALID_VALUE;
    struct fg_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    fg_lock();
    struct fg_graph *g = fg_reg_get((uintptr_t)hGraph, FG_K_GRAPH);
    if (!g) {
        r = CUDA_ERROR_INVALID_HANDLE;
    } else {
        x->count = g->count;
        x->nodes = g->count ? malloc(g->count * sizeof *x->nodes) : NULL;
        if (g->count && !x->nodes)
            r = CUDA_ERROR_OUT_OF_MEMORY;
        else if (g->count)
            memcpy(x->nodes, g->nodes, g->count * sizeof *x->nodes);
        if (r == CUDA_SUCCESS && !fg_reg_add((uintptr_t)x, FG_K_EXEC, x))
            r = CUDA_ERROR_OUT_OF_MEMORY;
    }
    fg_unlock();
    if (r != CUDA_SUCCESS) {
        free(x->nodes);
        free(x);
        return r;
    }
    *phGraphExec = (CUgraphExec)x;
    return CUDA_SUCCESS;
}

FG_API CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph,
                                   CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    if (logBuffer && bufferSize > 0)
        logBuffer[0] = '\0';
    if (phErrorNode)
        *phErrorNode = NULL;
    return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

FG_API CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph,
                                      CUgraphNode *phErrorNode, char *logBuffer, size_t bufferSize)
{
    return cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

static void node_run_copy(const struct fg_node *n)
{
    if (n->type == FG_NODE_COPY) {
        memmove(n->dst, n->src, n->bytes);
        return;
    }
    unsigned char *d = n->dst;
    for (size_t i = 0; i < n->bytes / n->elem; i++)
        memcpy(d + i * n->elem, &n->value, n->elem); /* little-endian: low bytes first */
}

static CUresult graph_launch(CUgraphExec hExec, CUstream h, bool pt)
{
    struct fg_ctx *c;
    struct fg_stream *s;
    int sid;
    CUresult r = resolve(h, pt, &c, &sid, &s);
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_exec *x = fg_reg_get((uintptr_t)hExec, FG_K_EXEC);
    if (!x) {
        fg_unlock();
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (s && s->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
        for (size_t i = 0; i < x->count && r == CUDA_SUCCESS; i++)
            r = fg_graph_add(s->graph, &x->nodes[i]);
        fg_unlock();
        return r;
    }
    /* Kernels are queued in order; copies and sets happen as they are reached. Nodes are
     * copied out so the lock is not held across a launch into a full stream. */
    int ord = s ? s->ctx->dev : c->dev;
    size_t count = x->count;
    struct fg_node *nodes = count ? malloc(count * sizeof *nodes) : NULL;
    if (count && !nodes) {
        fg_unlock();
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (count)
        memcpy(nodes, x->nodes, count * sizeof *nodes);
    fg_unlock();
    for (size_t i = 0; i < count && r == CUDA_SUCCESS; i++) {
        if (nodes[i].type == FG_NODE_KERNEL) {
            uint64_t seq;
            int rc = fg_stream_launch(fg_g.st, sid, device_ns(ord, nodes[i].ns), &seq);
            if (rc == 0)
                fg_seq_note(sid, seq);
            r = fg_from_errno(rc);
        } else {
            node_run_copy(&nodes[i]);
        }
    }
    free(nodes);
    return r;
}

FG_API CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, false);
}

FG_API CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
    return graph_launch(hGraphExec, hStream, true);
}

FG_API CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
    CUresult r = fg_check_init();
    if (r != CUDA_SUCCESS)
        return r;
    fg_lock();
    struct fg_exec *x = fg_reg_get((uintptr_t)hGraphExec, FG_K_EXEC);
    if (x)
        fg_reg_del((uintptr_t)x, FG_K_EXEC);
    fg_unlock();
    if (!x)
        return CUDA_ERROR_INVALID_HANDLE;
    free(x->nodes);
    free(x);
    return CUDA_SUCCESS;
}
