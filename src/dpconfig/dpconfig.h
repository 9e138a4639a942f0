/* The device plugin's configuration: NVIDIA's k8s-device-plugin config file format
 * (`version: v1`, `flags`, `resources`, `sharing.timeSlicing`, `sharing.mps`, `imex`,
 * `health`) read as it is, plus a `vgpu` section of our own, plus the command line and
 * environment. One static table of keys (dpconfig.c) drives decoding, validation,
 * `--help` and docs/config.md, so the four cannot disagree.
 *
 * Precedence is command line > environment > file > built-in default, as in NVIDIA's
 * plugin. Files are YAML 1.2 (JSON is YAML too), at most DPCONFIG_MAX_BYTES; scalars
 * are typed the way NVIDIA's Go loader types them (sigs.k8s.io/yaml), so the
 * ConfigMaps users copy from NVIDIA's docs load unchanged. Every error names the file,
 * the line and the key: "cfg.yaml:3: key 'flags.migStrategy': 'maybe' is not one of
 * none, single, mixed".
 *
 * Ownership: a struct dpconfig owns every string and array it points to; release them
 * with dpconfig_free(). The loaders leave *cfg untouched when they fail. */
#ifndef VGPU_DPCONFIG_DPCONFIG_H
#define VGPU_DPCONFIG_DPCONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

#define DPCONFIG_MAX_BYTES               (1024 * 1024)
/* The most items a list value holds (XIDs, IMEX channels, a resource's devices), in the
 * file, the environment or on the command line; a longer one is refused naming its key. */
#define DPCONFIG_MAX_LIST_ITEMS          4096
/* Kubernetes' limit on a fully-qualified extended resource name, as NVIDIA checks it. */
#define DPCONFIG_RESOURCE_NAME_MAX       63
#define DPCONFIG_RESOURCE_PREFIX         "nvidia.com/"
/* The only flags.plugin.nvidiaCTKPath accepted: vgpu runs no nvidia-ctk. */
#define DPCONFIG_DEFAULT_NVIDIA_CTK_PATH "/usr/bin/nvidia-ctk"

enum dpconfig_mig_strategy { DPCONFIG_MIG_NONE, DPCONFIG_MIG_SINGLE, DPCONFIG_MIG_MIXED };
/* vgpu.migMode: MIG instances made by hand (static) or by the plugin for the pods that
 * the scheduler gave a MIG placement (dynamic; docs/deviceplugin.md). */
enum dpconfig_mig_mode { DPCONFIG_MIG_MODE_STATIC, DPCONFIG_MIG_MODE_DYNAMIC };
enum dpconfig_discovery_strategy {
    DPCONFIG_DISCOVERY_AUTO,
    DPCONFIG_DISCOVERY_NVML,
    DPCONFIG_DISCOVERY_TEGRA
};
enum dpconfig_device_id_strategy { DPCONFIG_DEVICE_ID_UUID, DPCONFIG_DEVICE_ID_INDEX };
enum dpconfig_allocation_policy { DPCONFIG_ALLOC_DISTRIBUTED, DPCONFIG_ALLOC_PACKED };
/* vgpu.schedulerProtocol: whose placement decisions the plugin serves. */
enum dpconfig_scheduler_protocol { DPCONFIG_PROTOCOL_VGPU, DPCONFIG_PROTOCOL_VOLCANO };

/* Volcano's device configuration (ConfigMap volcano-vgpu-device-config, key
 * device-config.yaml, section `nvidia:`), read with --volcano-config FILE in Volcano mode;
 * Volcano's defaults otherwise (docs/volcano.md lists every key and what the plugin does
 * with it). Fixed-size fields: nothing to free. */
#define DPCONFIG_VOLCANO_NAME_MAX 64
struct dpconfig_volcano {
    char count_name[DPCONFIG_VOLCANO_NAME_MAX];  /* resourceCountName */
    char memory_name[DPCONFIG_VOLCANO_NAME_MAX]; /* resourceMemoryName */
    char core_name[DPCONFIG_VOLCANO_NAME_MAX];   /* resourceCoreName */
    char memory_percentage_name[DPCONFIG_VOLCANO_NAME_MAX];
    bool overwrite_env;
    int64_t default_memory, default_cores, default_gpu_num;
    uint64_t device_split_count;
    double device_memory_scaling, device_core_scaling;
    bool disable_core_limit;
    uint64_t gpu_memory_factor; /* MiB per unit of the memory resource, >= 1 */
    bool pass_device_specs;
    bool pass_device_specs_set;
    size_t mig_geometries; /* knownMigGeometries entries (the mig mode is not served) */
};

enum dpconfig_sharing_strategy {
    DPCONFIG_SHARING_NONE,
    DPCONFIG_SHARING_TIME_SLICING,
    DPCONFIG_SHARING_MPS
};

/* flags.plugin.deviceListStrategy is a set (a string or a list in the file). */
enum {
    DPCONFIG_LIST_ENVVAR = 1u << 0,
    DPCONFIG_LIST_VOLUME_MOUNTS = 1u << 1,
    DPCONFIG_LIST_CDI_ANNOTATIONS = 1u << 2,
    DPCONFIG_LIST_CDI_CRI = 1u << 3,
};

/* health.eventTypes is a set too. */
enum {
    DPCONFIG_EVENT_XID_CRITICAL = 1u << 0,
    DPCONFIG_EVENT_DOUBLE_BIT_ECC = 1u << 1,
    DPCONFIG_EVENT_SINGLE_BIT_ECC = 1u << 2,
};

struct dpconfig_uint_list {
    uint64_t *items;
    size_t count;
    size_t cap; /* allocated, at most DPCONFIG_MAX_LIST_ITEMS */
};

/* sharing.*.resources[].devices: "all", a count, or a list of GPU indices ("0"), MIG
 * indices ("0:1") and GPU-/MIG- UUIDs, kept as text. */
enum dpconfig_devices_kind { DPCONFIG_DEVICES_ALL, DPCONFIG_DEVICES_COUNT, DPCONFIG_DEVICES_LIST };
struct dpconfig_devices {
    enum dpconfig_devices_kind kind;
    uint64_t count;
    char **list;
    size_t list_count;
    size_t list_cap; /* allocated, at most DPCONFIG_MAX_LIST_ITEMS */
};

/* health.criticalXIDs: "all" or a list of XIDs. */
struct dpconfig_xids {
    bool all;
    struct dpconfig_uint_list list;
};

struct dpconfig_replicated_resource {
    char *name;   /* normalised: always starts with "nvidia.com/" */
    char *rename; /* normalised; NULL when none (renameByDefault fills "<name>.shared") */
    struct dpconfig_devices devices;
    uint64_t replicas; /* >= 2 */
    int line;          /* line of the item in the file, 0 when not from a file */
};

struct dpconfig_replicated {
    bool rename_by_default;
    bool fail_requests_greater_than_one; /* mps: default true; timeSlicing: default false */
    struct {
        struct dpconfig_replicated_resource *items;
        size_t count;
    } resources;
    int line; /* line of the section's key, 0 when absent */
};

struct dpconfig_resource_pattern {
    char *pattern;
    char *name; /* normalised like resource names */
    int line;
};

struct dpconfig {
    char *version; /* always "v1" once loaded */
    struct {
        enum dpconfig_mig_strategy mig_strategy;
        bool fail_on_init_error;
        bool restart_on_device_unhealthy;
        char *mps_root;
        char *nvidia_driver_root;
        char *nvidia_dev_root; /* NULL: same as nvidia_driver_root */
        bool gds_enabled;
        bool mofed_enabled;
        bool gdrcopy_enabled;
        bool use_node_feature_api;
        enum dpconfig_discovery_strategy device_discovery_strategy;
        struct {
            bool pass_device_specs;
            unsigned device_list_strategy; /* DP_LIST_* */
            enum dpconfig_device_id_strategy device_id_strategy;
            char *cdi_annotation_prefix;
            char *nvidia_ctk_path;
            char *container_driver_root;
            enum dpconfig_allocation_policy shared_devices_allocation_policy;
        } plugin;
        struct {
            bool oneshot;
            bool no_timestamp;
            uint64_t sleep_interval_ns;
            char *output_file;
            char *machine_type_file;
        } gfd;
    } flags;
    struct {
        struct {
            struct dpconfig_resource_pattern *items;
            size_t count;
        } gpus, mig;
    } resources;
    struct {
        struct dpconfig_replicated time_slicing;
        struct dpconfig_replicated mps;
    } sharing;
    struct {
        struct dpconfig_uint_list channel_ids; /* [] or [0] */
        bool required;
        int line; /* line of the section's key, 0 when absent */
    } imex;
    struct {
        bool disabled;
        unsigned event_types; /* DP_EVENT_* */
        struct dpconfig_uint_list ignored_xids;
        struct dpconfig_xids critical_xids;
        int line;
    } health;
    struct {
        uint64_t device_split_count;
        double device_memory_scaling;
        double device_core_scaling;
        uint64_t default_cores;      /* percent, 0: no compute limit */
        uint64_t default_memory_mib; /* 0: the whole card */
        bool disable_core_limit;
        char *libvgpu_path;
        char *ld_so_preload_path;
        char *region_dir;
        char *compute_board_dir;
        char *scheduler_name;   /* the schedulerName whose pods' decisions are used */
        char *record_namespace; /* where vgpu-scheduler keeps its decision records */
        char *mps_control_path;
        enum dpconfig_mig_mode mig_mode;
        struct dpconfig_uint_list mig_dynamic_gpus; /* NVML indices; empty: every MIG GPU */
        char *hami_node_config;                     /* HAMi's config.json; NULL: none */
        char *hami_device_config;                   /* HAMi's device-config.yaml; NULL: none */
        int scheduler_protocol;                     /* enum dpconfig_scheduler_protocol */
    } vgpu;
    /* Volcano mode (vgpu.schedulerProtocol volcano): its device configuration. */
    struct dpconfig_volcano volcano;
    /* Command line only (never in the file). */
    struct {
        char *node_name;
        char *kubelet_dir;
        char *kubeconfig; /* NULL: in-cluster credentials */
        char *config_file;
        char *volcano_config; /* --volcano-config: Volcano's device-config.yaml */
    } cli;
    /* Derived by validation. */
    enum dpconfig_sharing_strategy sharing_strategy;
    char *source; /* the file name errors were reported against, NULL if none */
};

/* Fills cfg with the built-in defaults (owned strings). */
void dpconfig_defaults(struct dpconfig *cfg);

/* Releases everything cfg owns and zeroes it; NULL is a no-op. */
void dpconfig_free(struct dpconfig *cfg);

/* Decodes a config file's text on top of the defaults, then validates. name is used in
 * errors. On failure *cfg is left as it was. */
int dpconfig_load_buffer(const char *name, const char *text, size_t len, struct dpconfig *cfg,
                         struct vg_err *err);

/* Reads at most DPCONFIG_MAX_BYTES from path, then as dpconfig_load_buffer(). */
int dpconfig_load_file(const char *path, struct dpconfig *cfg, struct vg_err *err);

/* Environment lookup, injectable for tests (getenv in production). */
typedef const char *(*dpconfig_getenv_fn)(const char *name, void *user);

/* Applies environment values, then command-line arguments (argv[0] is not skipped:
 * pass argv + 1), over whatever cfg holds, then validates again. Arguments are
 * `--flag=value` or `--flag value`; a boolean flag alone means true. Returns 1 when
 * --help was given (nothing else is done), 0 on success. */
int dpconfig_apply_overrides(struct dpconfig *cfg, int argc, char *const argv[],
                             dpconfig_getenv_fn getenv_fn, void *getenv_user, struct vg_err *err);

/* The whole start-up sequence of vgpu-device-plugin: defaults, the config file named by
 * --config or $CONFIG_FILE (if any), then environment and command line. Returns 1 for
 * --help, 0 on success. */
int dpconfig_from_args(int argc, char *const argv[], dpconfig_getenv_fn getenv_fn,
                       void *getenv_user, struct dpconfig *cfg, struct vg_err *err);

/* Checks cross-key rules and fills the derived fields (sharing strategy, renames). */
int dpconfig_validate(struct dpconfig *cfg, struct vg_err *err);

/* One "key = value" line per setting, in table order, lists expanded: the canonical
 * form the golden tests compare. */
void dpconfig_dump(const struct dpconfig *cfg, FILE *out);

/* `--help` text and docs/config.md, both from the key table. */
void dpconfig_print_help(FILE *out, const char *program);
/* The option lines of --help alone, leaving out the flags named in skip (NULL-terminated,
 * without "--"; NULL: none): for a program that takes some of them itself. */
void dpconfig_print_flags(FILE *out, const char *const *skip);
void dpconfig_print_doc(FILE *out);

/* Settings that belong to other programs reading the same file and that the device
 * plugin does not act on, set away from their defaults: flags.useNodeFeatureAPI and
 * flags.gfd.* (gpu-feature-discovery's), resources.gpus/mig (NVIDIA's plugin ignores them
 * too). Their keys, comma-separated, into out[size]; returns how many. */
size_t dpconfig_foreign_settings(const struct dpconfig *cfg, char *out, size_t size);

/* Volcano's defaults (GetDefaultDevicesConfig in volcano-sh/volcano). */
void dpconfig_volcano_defaults(struct dpconfig_volcano *v);
/* Decodes Volcano's device-config.yaml (at most DPCONFIG_MAX_BYTES) on top of the defaults:
 * every key of `nvidia:` is known by name (an unknown one is refused, naming it), typed as
 * Volcano's Go struct types it, range-checked. name is used in errors. *out is left as it
 * was on failure. */
int dpconfig_volcano_load_buffer(const char *name, const char *text, size_t len,
                                 struct dpconfig_volcano *out, struct vg_err *err);
int dpconfig_volcano_load_file(const char *path, struct dpconfig_volcano *out, struct vg_err *err);
/* In Volcano mode, the Volcano file's node-side settings replace their vgpu.* equivalents
 * (deviceSplitCount, deviceMemoryScaling, deviceCoreScaling, disableCoreLimit, defaultCores,
 * passDeviceSpecs), since Volcano's scheduler reads the same file. */
void dpconfig_volcano_apply(struct dpconfig *cfg);
void dpconfig_volcano_dump(const struct dpconfig_volcano *v, FILE *out);

const char *dpconfig_sharing_strategy_name(enum dpconfig_sharing_strategy s);

#endif
