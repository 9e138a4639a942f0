/* fakegpu's shared state: the simulated GPUs that every process using the same
 * FAKEGPU_STATE_DIR sees, and the device timeline that runs their work.
 *
 * Ownership and processes. The state lives in one file under FAKEGPU_STATE_DIR, mapped
 * MAP_SHARED by every process and guarded by one process-shared robust mutex. The first
 * process creates and sizes it from FAKEGPU_DEVICES (later processes use what is there).
 * Each process owns one slot (pid + start time + generation); a slot whose process has
 * died (kill(pid, 0) fails, or the pid now belongs to another process) is reclaimed with
 * all its memory, streams and pending work, and a mutex left locked by a dead holder is
 * recovered through EOWNERDEAD. Nothing here ever waits forever on another process.
 *
 * Timeline. There is no device thread: the timeline is advanced lazily to "now" (the
 * monotonic clock, the same in every process) by whichever process takes the lock. Work
 * is a queue of kernels (durations in ns) and markers per stream; streams of one context
 * run concurrently, kernels of one stream in order. When several contexts (one per process
 * and device) have pending work, the device round-robins between them in time slices of
 * FAKEGPU_TIMESLICE_US, preempting at the slice end as the real driver does without MPS.
 * Busy time is recorded per device and per process in 10 ms buckets for NVML.
 *
 * Thread model: every function may be called from any thread; a process-local mutex
 * serialises this process's callers, the shared robust mutex serialises processes.
 *
 * Errors: 0 or a negative errno (-ENOMEM: device memory exhausted, -EINVAL: bad handle
 * or argument, -ENOSPC: a fixed table is full, -EIO: state file unusable). */
#ifndef VGPU_FAKEGPU_STATE_H
#define VGPU_FAKEGPU_STATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define FG_MAX_DEVICES    16
#define FG_MAX_PROCS      128  /* processes attached at once */
#define FG_MAX_STREAMS    128  /* per process, all devices together */
#define FG_STREAM_DEPTH   256  /* queued items per stream before a launch blocks */
#define FG_MAX_EVENTS     1024 /* per process */
#define FG_NAME_MAX       96
#define FG_UTIL_BUCKET_NS 10000000ULL /* 10 ms */
#define FG_UTIL_BUCKETS   200         /* 2 s of history */
#define FG_MAX_MIG        7           /* MIG devices per GPU (7 compute slices at most) */
#define FG_MIG_PROFILE    16          /* "7g.141gb" and the like, with the NUL */
#define FG_XID_RING       32          /* XID events kept per device for waiting processes */

/* One GPU instance, fixed by FAKEGPU_MIG when the state is created or made and destroyed
 * at run time through NVML (fg_mig_create_gi and friends). A slot is in use while its
 * gi_id is not 0 (slot k holds GPU instance id k + 1); it is a MIG device (a handle, a
 * UUID, somewhere CUDA work can run) while it also has its compute instance. */
struct fg_mig_info {
    char profile[FG_MIG_PROFILE]; /* NVIDIA's name, "<g>g.<mem>gb" */
    char uuid[41];                /* "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" */
    unsigned slices;              /* GPU (= compute) instance slices */
    unsigned mem_slices;          /* memory slices (of 8, or 4 on an A30): placement.size */
    unsigned gi_id, ci_id;        /* NVML's GPU and compute instance ids */
    uint64_t memory_bytes;
    int sm_count;
    unsigned profile_id; /* NVML's GPU instance profile id (19 for 1g.10gb, ...) */
    unsigned start;      /* first memory slice: placement.start */
    bool has_ci;         /* its compute instance exists (FAKEGPU_MIG: always) */
    uint64_t created_s;  /* CLOCK_REALTIME seconds when made; 0 for FAKEGPU_MIG's */
};

/* One GPU instance profile of a model, as the driver reports it (the tables in
 * state_mig.c, sources in docs/fakegpu.md). */
struct fg_mig_profile {
    unsigned nvml_profile; /* NVML_GPU_INSTANCE_PROFILE_* (the enum profile info takes) */
    unsigned id;           /* the profile id everything else takes */
    const char *name;      /* "1g.10gb", "1g.10gb+me", ... */
    unsigned slices;       /* compute slices */
    unsigned size;         /* memory slices */
    unsigned memory_mib;
    unsigned sms;
    unsigned starts;    /* bit s: placement start s is allowed */
    unsigned max_count; /* instances of this profile a GPU can hold */
};

struct fg_device_info {
    char name[FG_NAME_MAX];
    char uuid[41]; /* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", stable per index+name */
    uint8_t uuid_bytes[16];
    char pci_bus_id[16]; /* "0000:1B:00.0" (CUDA's form; NVML's 8-digit domain form is
                            built from the numbers below) */
    uint64_t total_bytes;
    int sm_count;
    int cc_major, cc_minor; /* compute capability, derived from the name (H100: 9.0) */
    unsigned pci_domain, pci_bus, pci_device; /* distinct bus per device */
    bool mig_enabled;                         /* named in FAKEGPU_MIG */
    unsigned mig_count;                       /* slots [0, mig_count) may be in use */
    uint32_t mig_serial;                      /* GPU instances ever made at run time */
    struct fg_mig_info mig[FG_MAX_MIG];
};

struct fg_proc_usage {
    pid_t pid;
    uint64_t used_bytes; /* allocations + context overhead on that device */
    uint64_t busy_ns;    /* device time used in the queried window */
    unsigned gi_id;      /* GPU instance it runs in (fg_mig_bind); 0: the whole GPU */
};

struct fg_state;

/* Attaches this process to the state named by the environment (creating it if needed).
 * Idempotent per process: later calls return the same handle. Environment errors (bad
 * FAKEGPU_DEVICES, ...) are returned as -EINVAL with one line on stderr. */
int fg_state_get(struct fg_state **out);

/* Opens a state explicitly, for tests: dir and devices as the environment variables
 * would give them, now_ns a clock override (NULL: CLOCK_MONOTONIC). */
int fg_state_open(struct fg_state **out, const char *dir, const char *devices,
                  uint64_t (*now_ns)(void));
void fg_state_close(struct fg_state *st);

int fg_state_device_count(struct fg_state *st);
/* Copy of device i's fixed description; -EINVAL for a bad index. */
int fg_state_device_info(struct fg_state *st, int dev, struct fg_device_info *out);

/* Contexts: each costs FAKEGPU_CONTEXT_MIB of device memory, charged to this process. */
int fg_ctx_attach(struct fg_state *st, int dev);
int fg_ctx_detach(struct fg_state *st, int dev);

/* Device memory, charged to this process; -ENOMEM past the card's capacity. */
int fg_mem_reserve(struct fg_state *st, int dev, uint64_t bytes);
int fg_mem_release(struct fg_state *st, int dev, uint64_t bytes);
int fg_mem_info(struct fg_state *st, int dev, uint64_t *used, uint64_t *total);

/* Streams: a shared id for an in-order queue on device dev. Closing a stream lets its
 * queued work finish (the slot is reused once it drains). */
int fg_stream_open(struct fg_state *st, int dev, int *stream_id);
int fg_stream_close(struct fg_state *st, int stream_id);

/* Queues a kernel of duration_ns; blocks (in real time) while the stream is full.
 * *seq receives the item's sequence number on that stream. */
int fg_stream_launch(struct fg_state *st, int stream_id, uint64_t duration_ns, uint64_t *seq);
/* True when every item up to seq on the stream has completed. */
int fg_stream_done(struct fg_state *st, int stream_id, uint64_t seq, bool *done);
/* Blocks until the stream's queue is empty. */
int fg_stream_wait(struct fg_state *st, int stream_id);
/* Blocks until all streams of this process on device dev are empty. */
int fg_device_wait(struct fg_state *st, int dev);

/* Events: a per-process slot. Recording queues a marker; when the device reaches it the
 * event completes with that simulated timestamp (ns, same clock as now_ns). An event
 * recorded on an idle stream completes at the time of recording. */
int fg_event_create(struct fg_state *st, int *event_id);
int fg_event_destroy(struct fg_state *st, int event_id);
int fg_event_record(struct fg_state *st, int event_id, int stream_id);
/* -EAGAIN while pending (*time_ns untouched); -EINVAL if never recorded. */
int fg_event_query(struct fg_state *st, int event_id, uint64_t *time_ns);
int fg_event_wait(struct fg_state *st, int event_id);
/* Makes stream_id wait for event_id's completion before running later work. */
int fg_stream_wait_event(struct fg_state *st, int stream_id, int event_id);

/* NVML's views. Utilization: percent of the window (ending now) the device was busy. */
int fg_util_device(struct fg_state *st, int dev, uint64_t window_ns, unsigned *gpu_percent);
/* Processes holding a context on dev: fills up to *count entries, sets *count to the
 * number there are (-ENOSPC if more than given). busy_ns covers the last window_ns. */
int fg_procs_on_device(struct fg_state *st, int dev, uint64_t window_ns, struct fg_proc_usage *out,
                       unsigned *count);

/* Current time on the state's clock. */
uint64_t fg_now_ns(struct fg_state *st);

/* FAKEGPU_KERNEL_NS of this process (duration of kernels other than vgpu_spin), checked
 * when the state was opened. */
uint64_t fg_kernel_ns(struct fg_state *st);

/* Health injection (fakegpu-ctl health): a lost device is one that has fallen off the
 * bus; NVML queries on it return NVML_ERROR_GPU_IS_LOST until it is set back. Shared by
 * every process on the state; -EINVAL for a bad index. */
int fg_device_set_lost(struct fg_state *st, int dev, bool lost);
bool fg_device_lost(struct fg_state *st, int dev);

/* XID events (fakegpu-ctl xid): a per-device sequence in the shared state that waiting
 * processes compare against. fg_xid_inject appends one event (code 1..9999); fg_xid_next
 * reads the first event after *seen: 0 and *seen advanced with *code set, or -EAGAIN when
 * there is none yet. Events older than the last FG_XID_RING are dropped (the reader skips
 * to the oldest kept). fg_xid_seq is the device's latest sequence (what a new reader
 * starts from). Lock-free; -EINVAL for a bad index. */
int fg_xid_inject(struct fg_state *st, int dev, unsigned code);
int fg_xid_next(struct fg_state *st, int dev, uint64_t *seen, unsigned *code);
uint64_t fg_xid_seq(struct fg_state *st, int dev);

struct vg_err;
/* MIG: how many compute and memory slices a device's model has (0 and 0 when the model
 * has no MIG: only A100, A800, A30, H100, H800, H200, B200 and GB200 have), and the
 * profile name NVIDIA forms for an instance of mem_slices memory slices on a device of
 * total_bytes (into name[FG_MIG_PROFILE]). */
void fg_mig_geometry(const char *model, unsigned *slices, unsigned *mem_slices);
void fg_mig_profile_name(unsigned slices, unsigned mem_slices, unsigned total_mem_slices,
                         uint64_t total_bytes, char *name);
/* Parses a FAKEGPU_MIG value (`GPU:[PROFILE[,PROFILE...]][;GPU:...]`) onto devs[0..count),
 * which fg_parse_devices filled: marks the named GPUs MIG-enabled and fills their
 * instances ("0:" is MIG mode with none). NULL or "" leaves every GPU without MIG.
 * -EINVAL naming the bad part for an unknown GPU or profile, a GPU named twice, a model
 * without MIG, or instances that do not fit the GPU (at the placements the model allows,
 * for a model with a profile table). */
int fg_parse_mig(const char *spec, struct fg_device_info *devs, int count, struct vg_err *err);

/* The GPU instance profiles of d's model (NULL and 0 for a model fakegpu has no table
 * for: only A100 40/80 GB, H100 80 GB and H200 have one). */
const struct fg_mig_profile *fg_mig_profiles(const struct fg_device_info *d, size_t *count);
const struct fg_mig_profile *fg_mig_profile_by_id(const struct fg_device_info *d, unsigned id);

/* Dynamic MIG, on the shared state (every process sees the result at once). Errors:
 * -ENOTSUP the GPU is not in MIG mode or its model has no table; -EINVAL a bad device,
 * profile id, start or slot; -ENOSPC no room (the placement overlaps an instance, the
 * profile's count is reached, or no placement is free: NVML's INSUFFICIENT_RESOURCES);
 * -EBUSY in use (a compute instance or a process is in it: NVML's IN_USE); -ENOENT no such
 * instance. fg_mig_create_gi places at start, or at the first free allowed start when
 * start < 0, and gives the slot. */
int fg_mig_create_gi(struct fg_state *st, int dev, unsigned profile_id, int start, int *slot);
int fg_mig_destroy_gi(struct fg_state *st, int dev, int slot);
int fg_mig_create_ci(struct fg_state *st, int dev, int slot);
int fg_mig_destroy_ci(struct fg_state *st, int dev, int slot);
/* Processes with a context in GPU instance slot of dev (0 when none). */
int fg_mig_procs(struct fg_state *st, int dev, int slot, unsigned *count);
/* The slot of the MIG device whose UUID is uuid on dev, or -ENOENT. */
int fg_mig_find(const struct fg_device_info *d, const char *uuid);

/* Runs this process's later contexts on dev inside MIG device slot (-1: the whole GPU):
 * memory is then capped at the instance's, shared with the instance's other processes.
 * -ENOENT when the slot is not a MIG device. Called by libcuda for a MIG-... entry of
 * CUDA_VISIBLE_DEVICES before its first context there. */
int fg_mig_bind(struct fg_state *st, int dev, int slot);

/* Parses a FAKEGPU_DEVICES value into out[0..max) (name, memory, SMs, and the derived
 * UUID, PCI id and compute capability); *count receives the number of devices. -EINVAL
 * with the bad part named in err for any malformed value. */
int fg_parse_devices(const char *spec, struct fg_device_info *out, int max, int *count,
                     struct vg_err *err);

#endif
