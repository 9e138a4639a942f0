/* The device plugin's configuration: NVIDIA's k8s-device-plugin config file format
 * (`version: v1`, `flags`, `resources`, `sharing.timeSlicing`, `sharing.mps`, `imex`,
 * `health`) read as it is, plus a `vgpu` section of our own, plus the command line and
 * environment. One static table of keys (dpconfig.c) drives decoding, validation,
 * `--help` and docs/config.md, so the four cannot disagree.
 *
 * Precedence is command line > environment > file > built-in default, as in NVIDIA's
 * plugin. Files are YAML 1.2 (JSON is YAML too), at most DP_CONFIG_MAX_BYTES; scalars
 * are typed the way NVIDIA's Go loader types them (sigs.k8s.io/yaml), so the
 * ConfigMaps users copy from NVIDIA's docs load unchanged. Every error names the file,
 * the line and the key: "cfg.yaml:3: key 'flags.migStrategy': 'maybe' is not one of
 * none, single, mixed".
 *
 * Ownership: a struct dp_config owns every string and array it points to; release them
 * with dp_config_free(). The loaders leave *cfg untouched when they fail. */
#ifndef VGPU_DPCONFIG_DPCONFIG_H
#define VGPU_DPCONFIG_DPCONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/err.h"

#define DP_CONFIG_MAX_BYTES        (1024 * 1024)
/* The most items a list value holds (XIDs, IMEX channels, a resource's devices), in the
 * file, the environment or on the command line; a longer one is refused naming its key. */
#define DP_CONFIG_MAX_LIST_ITEMS   4096
/* Kubernetes' limit on a fully-qualified extended resource name, as NVIDIA checks it. */
#define DP_RESOURCE_NAME_MAX       63
#define DP_RESOURCE_PREFIX         "nvidia.com/"
/* The only flags.plugin.nvidiaCTKPath accepted: vgpu runs no nvidia-ctk. */
#define DP_DEFAULT_NVIDIA_CTK_PATH "/usr/bin/nvidia-ctk"

enum dp_mig_strategy { DP_MIG_NONE, DP_MIG_SINGLE, DP_MIG_MIXED };
enum dp_discovery_strategy { DP_DISCOVERY_AUTO, DP_DISCOVERY_NVML, DP_DISCOVERY_TEGRA };
enum dp_device_id_strategy { DP_DEVICE_ID_UUID, DP_DEVICE_ID_INDEX };
enum dp_allocation_policy { DP_ALLOC_DISTRIBUTED, DP_ALLOC_PACKED };
enum dp_sharing_strategy { DP_SHARING_NONE, DP_SHARING_TIME_SLICING, DP_SHARING_MPS };

/* flags.plugin.deviceListStrategy is a set (a string or a list in the file). */
enum {
    DP_LIST_ENVVAR = 1u << 0,
    DP_LIST_VOLUME_MOUNTS = 1u << 1,
    DP_LIST_CDI_ANNOTATIONS = 1u << 2,
    DP_LIST_CDI_CRI = 1u << 3,
};

/* health.eventTypes is a set too. */
enum {
    DP_EVENT_XID_CRITICAL = 1u << 0,
    DP_EVENT_DOUBLE_BIT_ECC = 1u << 1,
    DP_EVENT_SINGLE_BIT_ECC = 1u << 2,
};

struct dp_uint_list {
    uint64_t *items;
    size_t count;
    size_t cap; /* allocated, at most DP_CONFIG_MAX_LIST_ITEMS */
};

/* sharing.*.resources[].devices: "all", a count, or a list of GPU indices ("0"), MIG
 * indices ("0:1") and GPU-/MIG- UUIDs, kept as text. */
enum dp_devices_kind { DP_DEVICES_ALL, DP_DEVICES_COUNT, DP_DEVICES_LIST };
struct dp_devices {
    enum dp_devices_kind kind;
    uint64_t count;
    char **list;
    size_t list_count;
    size_t list_cap; /* allocated, at most DP_CONFIG_MAX_LIST_ITEMS */
};

/* health.criticalXIDs: "all" or a list of XIDs. */
struct dp_xids {
    bool all;
    struct dp_uint_list list;
};

struct dp_replicated_resource {
    char *name;   /* normalised: always starts with "nvidia.com/" */
    char *rename; /* normalised; NULL when none (renameByDefault fills "<name>.shared") */
    struct dp_devices devices;
    uint64_t replicas; /* >= 2 */
    int line;          /* line of the item in the file, 0 when not from a file */
};

struct dp_replicated {
    bool rename_by_default;
    bool fail_requests_greater_than_one; /* mps: default true; timeSlicing: default false */
    struct {
        struct dp_replicated_resource *items;
        size_t count;
    } resources;
    int line; /* line of the section's key, 0 when absent */
};

struct dp_resource_pattern {
    char *pattern;
    char *name; /* normalised like resource names */
    int line;
};

struct dp_config {
    char *version; /* always "v1" once loaded */
    struct {
        enum dp_mig_strategy mig_strategy;
        bool fail_on_init_error;
        bool restart_on_device_unhealthy;
        char *mps_root;
        char *nvidia_driver_root;
        char *nvidia_dev_root; /* NULL: same as nvidia_driver_root */
        bool gds_enabled;
        bool mofed_enabled;
        bool gdrcopy_enabled;
        bool use_node_feature_api;
        enum dp_discovery_strategy device_discovery_strategy;
        struct {
            bool pass_device_specs;
            unsigned device_list_strategy; /* DP_LIST_* */
            enum dp_device_id_strategy device_id_strategy;
            char *cdi_annotation_prefix;
            char *nvidia_ctk_path;
            char *container_driver_root;
            enum dp_allocation_policy shared_devices_allocation_policy;
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
            struct dp_resource_pattern *items;
            size_t count;
        } gpus, mig;
    } resources;
    struct {
        struct dp_replicated time_slicing;
        struct dp_replicated mps;
    } sharing;
    struct {
        struct dp_uint_list channel_ids; /* [] or [0] */
        bool required;
        int line; /* line of the section's key, 0 when absent */
    } imex;
    struct {
        bool disabled;
        unsigned event_types; /* DP_EVENT_* */
        struct dp_uint_list ignored_xids;
        struct dp_xids critical_xids;
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
        char *scheduler_name; /* the schedulerName whose pods' decisions are used */
        char *mps_control_path;
    } vgpu;
    /* Command line only (never in the file). */
    struct {
        char *node_name;
        char *kubelet_dir;
        char *kubeconfig; /* NULL: in-cluster credentials */
        char *config_file;
    } cli;
    /* Derived by validation. */
    enum dp_sharing_strategy sharing_strategy;
    char *source; /* the file name errors were reported against, NULL if none */
};

/* Fills cfg with the built-in defaults (owned strings). */
void dp_config_defaults(struct dp_config *cfg);

/* Releases everything cfg owns and zeroes it; NULL is a no-op. */
void dp_config_free(struct dp_config *cfg);

/* Decodes a config file's text on top of the defaults, then validates. name is used in
 * errors. On failure *cfg is left as it was. */
int dp_config_load_buffer(const char *name, const char *text, size_t len, struct dp_config *cfg,
                          struct vg_err *err);

/* Reads at most DP_CONFIG_MAX_BYTES from path, then as dp_config_load_buffer(). */
int dp_config_load_file(const char *path, struct dp_config *cfg, struct vg_err *err);

/* Environment lookup, injectable for tests (getenv in production). */
typedef const char *(*dp_getenv_fn)(const char *name, void *user);

/* Applies environment values, then command-line arguments (argv[0] is not skipped:
 * pass argv + 1), over whatever cfg holds, then validates again. Arguments are
 * `--flag=value` or `--flag value`; a boolean flag alone means true. Returns 1 when
 * --help was given (nothing else is done), 0 on success. */
int dp_config_apply_overrides(struct dp_config *cfg, int argc, char *const argv[],
                              dp_getenv_fn getenv_fn, void *getenv_user, struct vg_err *err);

/* The whole start-up sequence of vgpu-device-plugin: defaults, the config file named by
 * --config or $CONFIG_FILE (if any), then environment and command line. Returns 1 for
 * --help, 0 on success. */
int dp_config_from_args(int argc, char *const argv[], dp_getenv_fn getenv_fn, void *getenv_user,
                        struct dp_config *cfg, struct vg_err *err);

/* Checks cross-key rules and fills the derived fields (sharing strategy, renames). */
int dp_config_validate(struct dp_config *cfg, struct vg_err *err);

/* One "key = value" line per setting, in table order, lists expanded: the canonical
 * form the golden tests compare. */
void dp_config_dump(const struct dp_config *cfg, FILE *out);

/* `--help` text and docs/config.md, both from the key table. */
void dp_config_print_help(FILE *out, const char *program);
/* The option lines of --help alone, leaving out the flags named in skip (NULL-terminated,
 * without "--"; NULL: none): for a program that takes some of them itself. */
void dp_config_print_flags(FILE *out, const char *const *skip);
void dp_config_print_doc(FILE *out);

/* Settings that belong to other programs reading the same file and that the device
 * plugin does not act on, set away from their defaults: flags.useNodeFeatureAPI and
 * flags.gfd.* (gpu-feature-discovery's), resources.gpus/mig (NVIDIA's plugin ignores them
 * too). Their keys, comma-separated, into out[size]; returns how many. */
size_t dp_config_foreign_settings(const struct dp_config *cfg, char *out, size_t size);

const char *dp_sharing_strategy_name(enum dp_sharing_strategy s);

#endif
