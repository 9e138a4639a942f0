/* libvgpu's configuration: HAMi's environment variables plus the read-only limits file
 * the device plugin writes and mounts at one fixed path, VGPU_LIMITS_PATH
 * (/etc/vgpu/limits), so that a process cannot raise or remove its own limit by changing
 * its environment.
 *
 * Precedence. When a file exists at VGPU_LIMITS_PATH (a vgpu container), it decides every
 * key it may hold, whatever the environment says; the environment's limits
 * (CUDA_DEVICE_MEMORY_LIMIT*, CUDA_DEVICE_SM_LIMIT*) and those of a file named by
 * VGPU_LIMITS_FILE can only lower a limit, never raise or remove it. If that file exists
 * but cannot be read or parsed, the configuration is closed: every GPU memory allocation
 * is refused. Without a file at VGPU_LIMITS_PATH (outside a vgpu container) the rules are
 * the older ones: VGPU_LIMITS_FILE, when set, replaces every key it may hold, else the
 * environment decides.
 *
 * One table (config.c, vgpu_config_keys) lists every key with its kind, bounds and doc
 * line; the environment parser, the file parser and docs/libvgpu.md follow it. An invalid
 * value is an error with a message naming the key and the value: it is never read as
 * "no limit". The limits file is read whole with vg_read_file (at most
 * VGPU_LIMITS_FILE_MAX bytes, freed before the load returns); nothing else allocates. */
#ifndef VGPU_LIBVGPU_CONFIG_H
#define VGPU_LIBVGPU_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define VGPU_CONFIG_MAX_DEVICES  16    /* CUDA_DEVICE_*_LIMIT_<n>: n in 0..15 */
#define VGPU_CONFIG_PATH_MAX     256   /* CUDA_DEVICE_MEMORY_SHARED_CACHE */
#define VGPU_LIMITS_FILE_MAX     16384 /* bytes in a limits file */
#define VGPU_LIMITS_LINE_MAX     512   /* bytes in one line of it */
#define VGPU_LIMITS_FILE_HEADER  "vgpu-limits 1"
#define VGPU_LIMITS_PATH         "/etc/vgpu/limits" /* where the device plugin mounts it */
/* Beside it, in the same read-only directory: the limits' generation, a 16-byte file
 * (VGPU_GENERATION_MAGIC, then a little-endian 64-bit count) that the device plugin
 * raises, in place, after it has replaced the limits file by rename (a live resize,
 * docs/protocol.md "Limits generation"). */
#define VGPU_LIMITS_DIR          "/etc/vgpu" /* the directory the device plugin mounts there */
#define VGPU_GENERATION_PATH     "/etc/vgpu/generation"
#define VGPU_GENERATION_MAGIC    "vgpugen1"
#define VGPU_GENERATION_SIZE     16
#define VGPU_DEFAULT_REGION_PATH "/tmp/vgpu.region"
#define VGPU_DEFAULT_CONTEXT_MIB 256
#define VGPU_DEFAULT_BOARD_DIR   "/tmp/vgpu-compute"
#define VGPU_CONFIG_UUID_MAX     64 /* VGPU_DEVICE_UUID_<n>, with the NUL */

enum vgpu_key_kind {
    VGPU_KEY_BYTES,      /* "<number>" bytes or with k/m/g (binary); 0 = no limit */
    VGPU_KEY_PERCENT,    /* 0 (no limit) or 1..100 */
    VGPU_KEY_PATH,       /* absolute path, at most VGPU_CONFIG_PATH_MAX - 1 bytes */
    VGPU_KEY_MIB,        /* a number of MiB, 0..65536 */
    VGPU_KEY_LOGLEVEL,   /* error | warn | info | debug */
    VGPU_KEY_POLICY,     /* GPU_CORE_UTILIZATION_POLICY: default | force | disable */
    VGPU_KEY_MODE,       /* VGPU_COMPUTE_MODE: hard | burst | disable */
    VGPU_KEY_BURST,      /* VGPU_COMPUTE_BURST_LIMIT: percent 1..100 */
    VGPU_KEY_DIR,        /* VGPU_COMPUTE_BOARD: absolute directory path */
    VGPU_KEY_UUID,       /* VGPU_DEVICE_UUID_<n>: GPU-... or MIG-..., limits file only */
    VGPU_KEY_GENERATION, /* VGPU_LIMITS_GENERATION: 1..2^63-1, limits file only */
    VGPU_KEY_PRIORITY    /* CUDA_DEVICE_TASK_PRIORITY, CUDA_TASK_PRIORITY: 0 (high) or 1 (low) */
};

/* Task priority (docs/compute.md, "Priority"): HAMi's nvidia.com/priority. */
#define VGPU_PRIORITY_HIGH 0
#define VGPU_PRIORITY_LOW  1

/* How the compute share is enforced (docs/compute.md). */
enum vgpu_compute_mode {
    VGPU_COMPUTE_HARD = 0,  /* never above the share, even alone on the GPU */
    VGPU_COMPUTE_BURST = 1, /* may use idle GPU time up to the burst limit */
    VGPU_COMPUTE_OFF = 2    /* not limited */
};

struct vgpu_key {
    const char *name;
    enum vgpu_key_kind kind;
    bool per_device; /* also NAME_<n>, n = CUDA device index 0..15 */
    bool in_file;    /* allowed in the limits file */
    const char *default_text;
    const char *doc;
};

extern const struct vgpu_key vgpu_config_keys[];
extern const unsigned vgpu_config_key_count;

struct vgpu_config {
    bool memory_limit_set;     /* any memory limit configured */
    uint64_t memory_limit_all; /* CUDA_DEVICE_MEMORY_LIMIT (0: none) */
    uint64_t memory_limit[VGPU_CONFIG_MAX_DEVICES];
    bool memory_limit_given[VGPU_CONFIG_MAX_DEVICES];
    uint32_t sm_limit_all; /* percent, 0 none */
    uint32_t sm_limit[VGPU_CONFIG_MAX_DEVICES];
    bool sm_limit_given[VGPU_CONFIG_MAX_DEVICES];
    bool region_path_given;
    char region_path[VGPU_CONFIG_PATH_MAX];
    uint64_t context_bytes;               /* VGPU_CONTEXT_MIB in bytes */
    int log_level;                        /* -1: silent */
    enum vgpu_compute_mode compute_mode;  /* VGPU_COMPUTE_MODE, default hard */
    bool policy_disable;                  /* GPU_CORE_UTILIZATION_POLICY=disable */
    uint32_t burst_limit;                 /* VGPU_COMPUTE_BURST_LIMIT percent, default 100 */
    char board_dir[VGPU_CONFIG_PATH_MAX]; /* VGPU_COMPUTE_BOARD */
    bool from_file;                       /* limits came from a limits file */
    bool in_container;                    /* a file exists at VGPU_LIMITS_PATH */
    bool closed;                          /* ... but it cannot be used: refuse allocations */
    char closed_why[VG_ERR_MSG_MAX];      /* why, for the one line on stderr */
    /* VGPU_DEVICE_UUID_<n> from the limits file: which GPU the n-th limit is for ("" when
     * not given). libvgpu does not need it; vgpu-monitor matches NVML's processes with it. */
    char device_uuid[VGPU_CONFIG_MAX_DEVICES][VGPU_CONFIG_UUID_MAX];
    /* Task priority, VGPU_PRIORITY_HIGH or _LOW (the default). In a vgpu container the
     * limits file decides it and the environment can only lower it (0 -> 1). */
    int priority;
    bool priority_given; /* some source named a priority: the limiter takes part in it */
    /* VGPU_LIMITS_GENERATION from the limits file (0: none, never resized). A file with
     * one is not lowered by the environment (the limits a live resize set hold for every
     * process alike). */
    uint64_t generation;
};

/* Defaults: no limits, default region path, silent. */
void vgpu_config_init(struct vgpu_config *c);

/* Applies one NAME=VALUE pair (name may carry a _<n> suffix). from_file: the pair came
 * from the limits file (keys not allowed there are refused). Unknown names starting with
 * a configuration prefix are refused; other names return 1 (not ours, ignored). */
int vgpu_config_apply(struct vgpu_config *c, const char *name, size_t name_len, const char *value,
                      bool from_file, struct vg_err *err);

/* Parses the text of a limits file (len bytes, need not be NUL-terminated). */
int vgpu_config_parse_file(struct vgpu_config *c, const char *text, size_t len, struct vg_err *err);

/* The whole configuration from an environ-style array and the file at VGPU_LIMITS_PATH,
 * by the precedence above. An invalid environment value is an error; an unusable file at
 * the fixed path is not (c->closed, with c->closed_why). */
int vgpu_config_load(struct vgpu_config *c, char *const *envp, struct vg_err *err);
/* The same with the fixed path given (tests). */
int vgpu_config_load_at(struct vgpu_config *c, char *const *envp, const char *fixed_path,
                        struct vg_err *err);

/* The memory limit (bytes, 0: none) and compute limit (percent, 0: none) of the n-th
 * visible CUDA device. */
uint64_t vgpu_config_memory_limit(const struct vgpu_config *c, unsigned n);
uint32_t vgpu_config_sm_limit(const struct vgpu_config *c, unsigned n);

/* The enforcement mode after GPU_CORE_UTILIZATION_POLICY (disable wins). */
enum vgpu_compute_mode vgpu_config_compute_mode(const struct vgpu_config *c);

/* True when some device has a compute share below 100 % that is enforced. */
bool vgpu_config_compute_limited(const struct vgpu_config *c);

#endif
