/* The device plugin's configuration, driven by one table of keys.
 *
 * Why a table: decoding, validation, the environment and command-line overrides,
 * `--help` and docs/config.md all read the same rows, so a key cannot be documented
 * with one default and decoded with another.
 *
 * Why our own scalar typing: NVIDIA's plugin loads the file with sigs.k8s.io/yaml
 * (go-yaml v2, then encoding/json), which types a plain `yes` as a boolean and a plain
 * `4` as an integer, keeps a quoted "4" a string (and then refuses it for an integer
 * field), and turns any scalar into text for a string field. libfyaml gives us each
 * scalar's text and style (plain or quoted); resolve_scalar() below reproduces that
 * typing, so a file means the same thing to us as to NVIDIA's plugin.
 *
 * Anchors and aliases are refused rather than expanded: no ConfigMap in the wild needs
 * them, and expanding them is how a 1 MiB file becomes gigabytes. */
#include "dpconfig/dpconfig.h"
#include "dpconfig/internal.h"

#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/mem.h"
#include "base/parse.h"
#include "base/str.h"
#include "yaml/yaml.h"

/* ---- the key table ------------------------------------------------------------------ */

enum key_type {
    T_SECTION,       /* a mapping of further keys */
    T_BOOL,          /* bool */
    T_STRING,        /* char * */
    T_ENUM,          /* int, index into values */
    T_UINT,          /* uint64_t in [min, max] */
    T_FLOAT,         /* double in [fmin, fmax] */
    T_DURATION,      /* uint64_t nanoseconds; Go syntax "60s", "1m30s", or an integer ns */
    T_MIB,           /* uint64_t MiB; an integer (MiB) or a quantity "4GiB" */
    T_ENUM_SET,      /* unsigned bitmask; a string or a list of strings from values */
    T_UINT_LIST,     /* struct dpconfig_uint_list */
    T_XIDS,          /* struct dpconfig_xids: "all" or a list of integers */
    T_RESOURCE_NAME, /* char *, normalised to nvidia.com/<name> */
    T_DEVICES,       /* struct dpconfig_devices: "all", a count, or a list */
    T_LIST,          /* a list of mappings, each decoded with the key's item table */
};

enum {
    K_CLI_ONLY = 1u << 0,      /* command line / environment only, never in the file */
    K_REQUIRED = 1u << 1,      /* must be present in a list item */
    K_EMPTY_DEFAULT = 1u << 2, /* an empty string means the default (version) */
    K_EMPTY_KEEPS = 1u << 3,   /* an empty list leaves the default (NVIDIA's merge) */
    K_LINE = 1u << 4,          /* T_SECTION: store the key's line at offset */
};

struct key {
    const char *path; /* dotted, from the top; relative to the item in item tables */
    enum key_type type;
    size_t offset;
    const char *def; /* default, written as on the command line; NULL: none */
    const char *const *values;
    uint64_t min, max;
    double fmin, fmax;
    const char *env;
    const char *flag;
    unsigned flags;
    const char *doc;
    /* T_LIST */
    const struct key *items;
    size_t item_count;
    size_t count_offset;
    size_t elem_size;
    size_t elem_line_offset;
};

static const char *const mig_values[] = {"none", "single", "mixed", NULL};
static const char *const mig_mode_values[] = {"static", "dynamic", NULL};
static const char *const discovery_values[] = {"auto", "nvml", "tegra", NULL};
static const char *const list_values[] = {"envvar", "volume-mounts", "cdi-annotations", "cdi-cri",
                                          NULL};
static const char *const id_values[] = {"uuid", "index", NULL};
static const char *const policy_values[] = {"distributed", "packed", NULL};
static const char *const event_values[] = {
    "EventTypeXidCriticalError", "EventTypeDoubleBitEccError", "EventTypeSingleBitEccError", NULL};
static const char *const version_values[] = {"v1", NULL};
static const char *const protocol_values[] = {"vgpu", "volcano", NULL};
static const char *const sharing_names[] = {"none", "time-slicing", "mps", NULL};

#define OFF(field)  offsetof(struct dpconfig, field)
#define ROFF(field) offsetof(struct dpconfig_replicated_resource, field)
#define POFF(field) offsetof(struct dpconfig_resource_pattern, field)

static const struct key replicated_items[] = {
    {.path = "name",
     .type = T_RESOURCE_NAME,
     .offset = ROFF(name),
     .flags = K_REQUIRED,
     .doc = "resource to share; `nvidia.com/` is added when missing (at most 63 characters "
            "in all)"},
    {.path = "rename",
     .type = T_RESOURCE_NAME,
     .offset = ROFF(rename),
     .doc = "advertise the replicas under this name instead"},
    {.path = "devices",
     .type = T_DEVICES,
     .offset = ROFF(devices),
     .def = "all",
     .doc = "`all`, a count, or a list of GPU indices, MIG indices (`0:1`) and GPU-/MIG- "
            "UUIDs"},
    {.path = "replicas",
     .type = T_UINT,
     .offset = ROFF(replicas),
     .min = 2,
     .max = 10000,
     .flags = K_REQUIRED,
     .doc = "how many replicas each device is advertised as"},
};

static const struct key pattern_items[] = {
    {.path = "pattern",
     .type = T_STRING,
     .offset = POFF(pattern),
     .flags = K_REQUIRED,
     .doc = "glob over the device's product name (`*` matches anything)"},
    {.path = "name",
     .type = T_RESOURCE_NAME,
     .offset = POFF(name),
     .flags = K_REQUIRED,
     .doc = "resource name for matching devices"},
};

#define ITEMS(table) .items = (table), .item_count = sizeof(table) / sizeof((table)[0])

#define REPLICATED(prefix, field, fail_default, what)                                              \
    {.path = prefix, .type = T_SECTION, .offset = OFF(field.line), .flags = K_LINE, .doc = what},  \
        {.path = prefix ".renameByDefault",                                                        \
         .type = T_BOOL,                                                                           \
         .offset = OFF(field.rename_by_default),                                                   \
         .def = "false",                                                                           \
         .doc = "advertise replicas as `<name>.shared` unless `rename` is given"},                 \
        {.path = prefix ".failRequestsGreaterThanOne",                                             \
         .type = T_BOOL,                                                                           \
         .offset = OFF(field.fail_requests_greater_than_one),                                      \
         .def = fail_default,                                                                      \
         .doc = "refuse a container that asks for more than one replica"},                         \
    {                                                                                              \
        .path = prefix ".resources", .type = T_LIST, .offset = OFF(field.resources.items),         \
        .count_offset = OFF(field.resources.count),                                                \
        .elem_size = sizeof(struct dpconfig_replicated_resource), .elem_line_offset = ROFF(line),  \
        ITEMS(replicated_items), .doc = "resources to replicate"                                   \
    }

#define PATTERNS(prefix, field, what)                                                              \
    {                                                                                              \
        .path = prefix, .type = T_LIST, .offset = OFF(field.items),                                \
        .count_offset = OFF(field.count), .elem_size = sizeof(struct dpconfig_resource_pattern),   \
        .elem_line_offset = POFF(line), ITEMS(pattern_items), .doc = what                          \
    }

static const struct key keys[] = {
    {.path = "version",
     .type = T_ENUM,
     .offset = OFF(version),
     .def = "v1",
     .values = version_values,
     .flags = K_EMPTY_DEFAULT,
     .doc = "format version; only `v1` (an empty or missing version means `v1`)"},

    {.path = "flags", .type = T_SECTION, .doc = "settings shared with NVIDIA's plugin"},
    {.path = "flags.migStrategy",
     .type = T_ENUM,
     .offset = OFF(flags.mig_strategy),
     .def = "none",
     .values = mig_values,
     .env = "MIG_STRATEGY",
     .flag = "mig-strategy",
     .doc = "how MIG devices are advertised: whole GPUs only, one MIG type as "
            "`nvidia.com/gpu`, or each profile as `nvidia.com/mig-<profile>`"},
    {.path = "flags.failOnInitError",
     .type = T_BOOL,
     .offset = OFF(flags.fail_on_init_error),
     .def = "true",
     .env = "FAIL_ON_INIT_ERROR",
     .flag = "fail-on-init-error",
     .doc = "exit on an initialisation error instead of waiting forever"},
    {.path = "flags.restartOnDeviceUnhealthy",
     .type = T_BOOL,
     .offset = OFF(flags.restart_on_device_unhealthy),
     .def = "false",
     .env = "RESTART_ON_DEVICE_UNHEALTHY",
     .flag = "restart-on-device-unhealthy",
     .doc = "restart the plugin (rediscover GPUs, serve and register again) when a device "
            "turns unhealthy"},
    {.path = "flags.mpsRoot",
     .type = T_STRING,
     .offset = OFF(flags.mps_root),
     .def = "/run/nvidia/mps",
     .env = "MPS_ROOT",
     .flag = "mps-root",
     .doc = "host directory of the MPS control daemons' pipes and logs (needed by "
            "`sharing.mps`)"},
    {.path = "flags.nvidiaDriverRoot",
     .type = T_STRING,
     .offset = OFF(flags.nvidia_driver_root),
     .def = "/",
     .env = "NVIDIA_DRIVER_ROOT",
     .flag = "nvidia-driver-root",
     .doc = "root of the driver installation on the host (`/` or `/run/nvidia/driver`); "
            "device nodes are under it unless `nvidiaDevRoot` is set"},
    {.path = "flags.nvidiaDevRoot",
     .type = T_STRING,
     .offset = OFF(flags.nvidia_dev_root),
     .env = "NVIDIA_DEV_ROOT",
     .flag = "nvidia-dev-root",
     .doc = "host root of the `/dev/nvidia*` nodes: Allocate's device specs name "
            "`<root>/dev/nvidia<N>` on the host; unset: `nvidiaDriverRoot`"},
    {.path = "flags.gdsEnabled",
     .type = T_BOOL,
     .offset = OFF(flags.gds_enabled),
     .def = "false",
     .env = "GDS_ENABLED",
     .flag = "gds-enabled",
     .doc = "start containers with `NVIDIA_GDS=enabled`"},
    {.path = "flags.mofedEnabled",
     .type = T_BOOL,
     .offset = OFF(flags.mofed_enabled),
     .def = "false",
     .env = "MOFED_ENABLED",
     .flag = "mofed-enabled",
     .doc = "start containers with `NVIDIA_MOFED=enabled`"},
    {.path = "flags.gdrcopyEnabled",
     .type = T_BOOL,
     .offset = OFF(flags.gdrcopy_enabled),
     .def = "false",
     .env = "GDRCOPY_ENABLED",
     .flag = "gdrcopy-enabled",
     .doc = "start containers with `NVIDIA_GDRCOPY=enabled`"},
    {.path = "flags.useNodeFeatureAPI",
     .type = T_BOOL,
     .offset = OFF(flags.use_node_feature_api),
     .def = "false",
     .doc = "a setting of gpu-feature-discovery, which reads the same file; the plugin "
            "labels nothing (a start-up warning names it when set)"},
    {.path = "flags.deviceDiscoveryStrategy",
     .type = T_ENUM,
     .offset = OFF(flags.device_discovery_strategy),
     .def = "auto",
     .values = discovery_values,
     .env = "DEVICE_DISCOVERY_STRATEGY",
     .flag = "device-discovery-strategy",
     .doc = "how devices are found: `auto` and `nvml` both use NVML; `tegra` is refused "
            "(no Tegra discovery)"},

    {.path = "flags.plugin", .type = T_SECTION, .doc = "settings of the device plugin proper"},
    {.path = "flags.plugin.passDeviceSpecs",
     .type = T_BOOL,
     .offset = OFF(flags.plugin.pass_device_specs),
     .def = "false",
     .env = "PASS_DEVICE_SPECS",
     .flag = "pass-device-specs",
     .doc = "return the `/dev/nvidia*` device specs in Allocate"},
    {.path = "flags.plugin.deviceListStrategy",
     .type = T_ENUM_SET,
     .offset = OFF(flags.plugin.device_list_strategy),
     .def = "envvar",
     .values = list_values,
     .env = "DEVICE_LIST_STRATEGY",
     .flag = "device-list-strategy",
     .doc = "how the device list reaches the container runtime; a string or a list "
            "(comma-separated on the command line)"},
    {.path = "flags.plugin.deviceIDStrategy",
     .type = T_ENUM,
     .offset = OFF(flags.plugin.device_id_strategy),
     .def = "uuid",
     .values = id_values,
     .env = "DEVICE_ID_STRATEGY",
     .flag = "device-id-strategy",
     .doc = "name devices by UUID or by index"},
    {.path = "flags.plugin.cdiAnnotationPrefix",
     .type = T_STRING,
     .offset = OFF(flags.plugin.cdi_annotation_prefix),
     .def = "cdi.k8s.io/",
     .env = "CDI_ANNOTATION_PREFIX",
     .flag = "cdi-annotation-prefix",
     .doc = "prefix of CDI annotation keys"},
    {.path = "flags.plugin.nvidiaCTKPath",
     .type = T_STRING,
     .offset = OFF(flags.plugin.nvidia_ctk_path),
     .def = DPCONFIG_DEFAULT_NVIDIA_CTK_PATH,
     .env = "NVIDIA_CTK_PATH",
     .flag = "nvidia-ctk-path",
     .doc = "nvidia-ctk named in generated CDI specifications; vgpu generates none, so "
            "any other value is refused"},
    {.path = "flags.plugin.containerDriverRoot",
     .type = T_STRING,
     .offset = OFF(flags.plugin.container_driver_root),
     .def = "/driver-root",
     .env = "CONTAINER_DRIVER_ROOT",
     .flag = "container-driver-root",
     .doc = "where the driver root is mounted in the plugin's container: NVML is loaded "
            "from its library directories when found there, IMEX channels are looked up "
            "under its `dev`"},
    {.path = "flags.plugin.sharedDevicesAllocationPolicy",
     .type = T_ENUM,
     .offset = OFF(flags.plugin.shared_devices_allocation_policy),
     .def = "distributed",
     .values = policy_values,
     .env = "SHARED_DEVICES_ALLOCATION_POLICY",
     .flag = "shared-devices-allocation-policy",
     .doc = "preferred allocation of replicas (timeSlicing, mps): from the least used GPU "
            "(`distributed`) or the most used (`packed`)"},

    {.path = "flags.gfd",
     .type = T_SECTION,
     .doc = "settings of gpu-feature-discovery, which reads the same file: loaded so shared "
            "files load, not acted on (a start-up warning names those set)"},
    {.path = "flags.gfd.oneshot",
     .type = T_BOOL,
     .offset = OFF(flags.gfd.oneshot),
     .def = "false",
     .doc = "label once and exit"},
    {.path = "flags.gfd.noTimestamp",
     .type = T_BOOL,
     .offset = OFF(flags.gfd.no_timestamp),
     .def = "false",
     .doc = "leave the timestamp label out"},
    {.path = "flags.gfd.sleepInterval",
     .type = T_DURATION,
     .offset = OFF(flags.gfd.sleep_interval_ns),
     .def = "60s",
     .max = UINT64_MAX,
     .doc = "time between labelling passes (Go duration: `60s`, `1m30s`)"},
    {.path = "flags.gfd.outputFile",
     .type = T_STRING,
     .offset = OFF(flags.gfd.output_file),
     .def = "/etc/kubernetes/node-feature-discovery/features.d/gfd",
     .doc = "where labels are written"},
    {.path = "flags.gfd.machineTypeFile",
     .type = T_STRING,
     .offset = OFF(flags.gfd.machine_type_file),
     .def = "/sys/class/dmi/id/product_name",
     .doc = "where the machine type is read"},

    {.path = "resources",
     .type = T_SECTION,
     .doc = "resource names by product-name pattern (NVIDIA's plugin ignores these too)"},
    PATTERNS("resources.gpus", resources.gpus, "names for full GPUs"),
    PATTERNS("resources.mig", resources.mig, "names for MIG devices"),

    {.path = "sharing", .type = T_SECTION, .doc = "advertising each GPU several times"},
    REPLICATED("sharing.timeSlicing", sharing.time_slicing, "false",
               "replicas share the GPU by time slicing (no isolation)"),
    REPLICATED("sharing.mps", sharing.mps, "true",
               "replicas share the GPU through an MPS control daemon"),

    {.path = "imex",
     .type = T_SECTION,
     .offset = OFF(imex.line),
     .flags = K_LINE,
     .doc = "IMEX channels for fabric-attached GPUs"},
    {.path = "imex.channelIDs",
     .type = T_UINT_LIST,
     .offset = OFF(imex.channel_ids),
     .max = UINT32_MAX,
     .env = "IMEX_CHANNEL_IDS",
     .flag = "imex-channel-ids",
     .doc = "channels given to containers: `[]` or `[0]` (env `NVIDIA_IMEX_CHANNELS`, "
            "device nodes with `passDeviceSpecs`); a channel missing at start is left out"},
    {.path = "imex.required",
     .type = T_BOOL,
     .offset = OFF(imex.required),
     .def = "false",
     .env = "IMEX_REQUIRED",
     .flag = "imex-required",
     .doc = "refuse to start when a requested channel's device node does not exist"},

    {.path = "health",
     .type = T_SECTION,
     .offset = OFF(health.line),
     .flags = K_LINE,
     .doc = "device health checks"},
    {.path = "health.disabled",
     .type = T_BOOL,
     .offset = OFF(health.disabled),
     .def = "false",
     .doc = "turn health checks off: devices stay Healthy"},
    {.path = "health.eventTypes",
     .type = T_ENUM_SET,
     .offset = OFF(health.event_types),
     .def = "EventTypeXidCriticalError,EventTypeDoubleBitEccError,EventTypeSingleBitEccError",
     .values = event_values,
     .doc = "NVML events watched: XIDs (by the lists below), double-bit ECC errors (mark "
            "the device unhealthy), single-bit ECC errors (logged)"},
    {.path = "health.ignoredXIDs",
     .type = T_UINT_LIST,
     .offset = OFF(health.ignored_xids),
     .def = "13,31,43,45,68,109",
     .max = UINT64_MAX,
     .flags = K_EMPTY_KEEPS,
     .doc = "XIDs that never mark a device unhealthy; a list replaces the default, as in "
            "NVIDIA's plugin (an empty list keeps it); `DP_DISABLE_HEALTHCHECKS` adds to it"},
    {.path = "health.criticalXIDs",
     .type = T_XIDS,
     .offset = OFF(health.critical_xids),
     .def = "all",
     .max = UINT64_MAX,
     .doc = "XIDs that mark a device unhealthy: `all` (every XID not ignored) or a list"},

    {.path = "vgpu", .type = T_SECTION, .doc = "vgpu's own settings (HAMi-compatible sharing)"},
    {.path = "vgpu.deviceSplitCount",
     .type = T_UINT,
     .offset = OFF(vgpu.device_split_count),
     .def = "10",
     .min = 1,
     .max = 1024,
     .env = "DEVICE_SPLIT_COUNT",
     .flag = "device-split-count",
     .doc = "how many containers may share one GPU"},
    {.path = "vgpu.deviceMemoryScaling",
     .type = T_FLOAT,
     .offset = OFF(vgpu.device_memory_scaling),
     .def = "1",
     .fmin = 0.01,
     .fmax = 100,
     .env = "DEVICE_MEMORY_SCALING",
     .flag = "device-memory-scaling",
     .doc = "memory advertised per GPU as a multiple of the real memory (above 1: "
            "oversubscription)"},
    {.path = "vgpu.deviceCoreScaling",
     .type = T_FLOAT,
     .offset = OFF(vgpu.device_core_scaling),
     .def = "1",
     .fmin = 0.01,
     .fmax = 100,
     .env = "DEVICE_CORE_SCALING",
     .flag = "device-cores-scaling",
     .doc = "compute advertised per GPU as a multiple of 100 %"},
    {.path = "vgpu.defaultCores",
     .type = T_UINT,
     .offset = OFF(vgpu.default_cores),
     .def = "0",
     .min = 0,
     .max = 100,
     .env = "DEFAULT_CORES",
     .flag = "default-cores",
     .doc = "compute share (percent) for a container that asks for none; 0: no limit"},
    {.path = "vgpu.defaultMemory",
     .type = T_MIB,
     .offset = OFF(vgpu.default_memory_mib),
     .def = "0",
     .max = UINT64_MAX,
     .env = "DEFAULT_MEMORY",
     .flag = "default-memory",
     .doc = "refused unless 0: the scheduler gives each container its memory (its "
            "`defaultMemory`), the plugin never sees a container without one"},
    {.path = "vgpu.disableCoreLimit",
     .type = T_BOOL,
     .offset = OFF(vgpu.disable_core_limit),
     .def = "false",
     .env = "DISABLE_CORE_LIMIT",
     .flag = "disable-core-limit",
     .doc = "never limit compute, only memory"},
    {.path = "vgpu.libvgpuPath",
     .type = T_STRING,
     .offset = OFF(vgpu.libvgpu_path),
     .def = "/usr/local/vgpu/libvgpu.so",
     .env = "VGPU_LIBVGPU_PATH",
     .flag = "libvgpu-path",
     .doc = "host path of libvgpu.so, mounted into containers"},
    {.path = "vgpu.ldSoPreloadPath",
     .type = T_STRING,
     .offset = OFF(vgpu.ld_so_preload_path),
     .def = "/usr/local/vgpu/ld.so.preload",
     .env = "VGPU_LD_SO_PRELOAD_PATH",
     .flag = "ld-so-preload-path",
     .doc = "host file mounted as the container's `/etc/ld.so.preload`"},
    {.path = "vgpu.regionDir",
     .type = T_STRING,
     .offset = OFF(vgpu.region_dir),
     .def = "/usr/local/vgpu/containers",
     .env = "VGPU_REGION_DIR",
     .flag = "region-dir",
     .doc = "host directory holding one directory per container (limits file, shared region); "
            "vgpu-monitor and `vgpu top` read it under the same flag name"},
    {.path = "vgpu.computeBoardDir",
     .type = T_STRING,
     .offset = OFF(vgpu.compute_board_dir),
     .def = "/usr/local/vgpu/compute-board",
     .env = "VGPU_COMPUTE_BOARD_DIR",
     .flag = "compute-board-dir",
     .doc = "host directory shared by every container on the node, where libvgpu's compute "
            "limiters see each other (mounted read-only at the same path, "
            "`VGPU_COMPUTE_BOARD`, with the container's own slot files and its GPUs' turn "
            "files writable over it; docs/compute.md)"},
    {.path = "vgpu.schedulerName",
     .type = T_STRING,
     .offset = OFF(vgpu.scheduler_name),
     .def = "vgpu-scheduler",
     .env = "VGPU_SCHEDULER_NAME",
     .flag = "scheduler-name",
     .doc = "vgpu-scheduler's `--scheduler-name`: Allocate uses the `vgpu.io/decision` of pods "
            "whose `spec.schedulerName` is this, and of no other pod"},
    {.path = "vgpu.recordNamespace",
     .type = T_STRING,
     .offset = OFF(vgpu.record_namespace),
     .def = "vgpu-system",
     .env = "VGPU_RECORD_NAMESPACE",
     .flag = "record-namespace",
     .doc = "vgpu-scheduler's `--record-namespace`: a live resize is applied only when the "
            "scheduler's record of it there (vgpu-decision-<uid>-g<generation>) holds the "
            "pod's decision"},
    {.path = "vgpu.mpsControlPath",
     .type = T_STRING,
     .offset = OFF(vgpu.mps_control_path),
     .def = "nvidia-cuda-mps-control",
     .env = "VGPU_MPS_CONTROL_PATH",
     .flag = "mps-control-path",
     .doc = "the MPS control program the plugin runs for `sharing.mps` (one daemon per GPU); "
            "a name without `/` is looked up in PATH"},
    {.path = "vgpu.schedulerProtocol",
     .type = T_ENUM,
     .offset = OFF(vgpu.scheduler_protocol),
     .def = "vgpu",
     .values = protocol_values,
     .env = "VGPU_SCHEDULER_PROTOCOL",
     .flag = "scheduler-protocol",
     .doc = "whose placement decisions Allocate serves: `vgpu` (vgpu-scheduler's "
            "`vgpu.io/decision`) or `volcano` (Volcano's vGPU protocol: resources "
            "`volcano.sh/vgpu-number`, `-memory`, `-cores`, annotations `volcano.sh/*`; "
            "docs/volcano.md)"},
    {.path = "vgpu.migMode",
     .type = T_ENUM,
     .offset = OFF(vgpu.mig_mode),
     .def = "static",
     .values = mig_mode_values,
     .env = "VGPU_MIG_MODE",
     .flag = "mig-mode",
     .doc = "MIG-mode GPUs in vgpu mode: `static` serves the instances an administrator made "
            "(`flags.migStrategy`); `dynamic` makes a GPU instance for each container the "
            "scheduler gave a MIG placement, and destroys it when the pod is gone "
            "(docs/deviceplugin.md)"},
    {.path = "vgpu.migDynamicGPUs",
     .type = T_UINT_LIST,
     .offset = OFF(vgpu.mig_dynamic_gpus),
     .max = 15,
     .env = "VGPU_MIG_DYNAMIC_GPUS",
     .flag = "mig-dynamic-gpus",
     .doc = "with `migMode: dynamic`, the NVML indices of the GPUs served that way (the "
            "others stay static); `[]`: every GPU in MIG mode"},
    {.path = "vgpu.hamiNodeConfig",
     .type = T_STRING,
     .offset = OFF(vgpu.hami_node_config),
     .env = "VGPU_HAMI_NODE_CONFIG",
     .flag = "hami-node-config",
     .doc = "HAMi's device-plugin `config.json` (ConfigMap `hami-device-plugin`): "
            "`operatingmode: mig` on this node's `nodeconfig` entry turns `migMode` dynamic"},
    {.path = "vgpu.hamiDeviceConfig",
     .type = T_STRING,
     .offset = OFF(vgpu.hami_device_config),
     .env = "VGPU_HAMI_DEVICE_CONFIG",
     .flag = "hami-device-config",
     .doc = "HAMi's `device-config.yaml`: `nvidia.migProfileAllowlist` (v2.10) or "
            "`nvidia.knownMigGeometries` (v2.9 and older) limit the profiles a dynamic MIG "
            "GPU offers, by model"},

    {.path = "nodeName",
     .type = T_STRING,
     .offset = OFF(cli.node_name),
     .env = "NODE_NAME",
     .flag = "node-name",
     .flags = K_CLI_ONLY,
     .doc = "this node's name in Kubernetes"},
    {.path = "kubeletDir",
     .type = T_STRING,
     .offset = OFF(cli.kubelet_dir),
     .def = "/var/lib/kubelet/device-plugins",
     .flag = "kubelet-dir",
     .flags = K_CLI_ONLY,
     .doc = "the kubelet's device-plugin directory (kubelet.sock and our sockets)"},
    {.path = "kubeconfig",
     .type = T_STRING,
     .offset = OFF(cli.kubeconfig),
     .flag = "kubeconfig",
     .flags = K_CLI_ONLY,
     .doc = "kubeconfig file; unset: in-cluster credentials"},
    {.path = "config",
     .type = T_STRING,
     .offset = OFF(cli.config_file),
     .env = "CONFIG_FILE",
     .flag = "config",
     .flags = K_CLI_ONLY,
     .doc = "this configuration file"},
    {.path = "volcanoConfig",
     .type = T_STRING,
     .offset = OFF(cli.volcano_config),
     .env = "VOLCANO_CONFIG",
     .flag = "volcano-config",
     .flags = K_CLI_ONLY,
     .doc = "Volcano's device-config.yaml (ConfigMap `volcano-vgpu-device-config`), read in "
            "Volcano mode; unset: Volcano's defaults"},
};

#define KEY_COUNT (sizeof keys / sizeof keys[0])

/* ---- small helpers ------------------------------------------------------------------ */

#define AT(base, off, type) ((type *)(void *)((char *)(base) + (off)))

static void *list_items(void *base, const struct key *k)
{
    void *items;
    memcpy(&items, (char *)base + k->offset, sizeof items);
    return items;
}

static void set_list_items(void *base, const struct key *k, void *items)
{
    memcpy((char *)base + k->offset, &items, sizeof items);
}

static size_t value_list(const char *const *values, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; values[i] != NULL; i++) {
        int n = vg_snprintf(buf + used, size - used, "%s%s", i ? ", " : "", values[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return used;
}

static int enum_index(const char *const *values, const char *s)
{
    for (int i = 0; values[i] != NULL; i++)
        if (strcmp(values[i], s) == 0)
            return i;
    return -1;
}

/* A "why" buffer for value errors; the caller adds where. */
struct why {
    char msg[VG_ERR_MSG_MAX];
};

__attribute__((format(printf, 2, 3))) static int why_set(struct why *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(why->msg, sizeof why->msg, fmt, ap);
    va_end(ap);
    if (n < 0)
        why->msg[0] = '\0';
    return -EINVAL;
}

/* Quotes a value for a message, shortened so the message keeps its key and place. */
static const char *shown(const char *s, char *buf, size_t size)
{
    size_t len = strlen(s);
    if (len + 1 <= size)
        return s;
    memcpy(buf, s, size - 4);
    memcpy(buf + size - 4, "...", 4);
    return buf;
}

/* Checked strtod: the whole string, finite, no range error. */
static int parse_double(const char *s, double *out)
{
    if (s[0] == '\0' || s[0] == ' ' || s[0] == '\t')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno != 0 || !isfinite(v))
        return -EINVAL;
    *out = v;
    return 0;
}

/* Go's time.ParseDuration for non-negative values: one or more <number><unit>, where
 * number may have a fraction and unit is ns, us, µs, ms, s, m or h; "0" alone too. */
static int parse_duration(const char *s, uint64_t *out)
{
    static const struct {
        const char *unit;
        uint64_t ns;
    } units[] = {{"ns", 1},
                 {"us", 1000},
                 {"\xc2\xb5s", 1000},
                 {"ms", 1000000},
                 {"s", 1000000000ull},
                 {"m", 60000000000ull},
                 {"h", 3600000000000ull}};
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    if (*s == '+')
        s++;
    if (*s == '\0')
        return -EINVAL;
    double total = 0;
    while (*s != '\0') {
        const char *start = s;
        double whole = 0, frac = 0, scale = 1;
        bool digits = false;
        while (*s >= '0' && *s <= '9') {
            whole = whole * 10 + (*s++ - '0');
            digits = true;
        }
        if (*s == '.') {
            s++;
            while (*s >= '0' && *s <= '9') {
                scale /= 10;
                frac += (*s++ - '0') * scale;
                digits = true;
            }
        }
        if (!digits || s == start)
            return -EINVAL;
        size_t best = 0;
        uint64_t mult = 0;
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
            size_t n = strlen(units[i].unit);
            if (strncmp(s, units[i].unit, n) == 0 && n > best) {
                best = n;
                mult = units[i].ns;
            }
        }
        if (best == 0)
            return -EINVAL;
        s += best;
        total += (whole + frac) * (double)mult;
    }
    if (total >= 18446744073709551615.0)
        return -ERANGE;
    *out = (uint64_t)total;
    return 0;
}

/* ---- values from text (defaults, environment, command line, YAML scalars) ----------- */

static bool text_bool(const char *s, bool *out)
{
    /* strconv.ParseBool, which NVIDIA's flags use for the environment and flags. */
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True", NULL};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False", NULL};
    if (enum_index(yes, s) >= 0)
        *out = true;
    else if (enum_index(no, s) >= 0)
        *out = false;
    else
        return false;
    return true;
}

static int set_enum_member(const struct key *k, const char *s, unsigned *set, struct why *why)
{
    char list[200], b[64];
    int i = enum_index(k->values, s);
    if (i < 0) {
        value_list(k->values, list, sizeof list);
        return why_set(why, "'%s' is not one of %s", shown(s, b, sizeof b), list);
    }
    *set |= 1u << i;
    return 0;
}

static void uint_list_clear(struct dpconfig_uint_list *l)
{
    free(l->items);
    l->items = NULL;
    l->count = 0;
}

/* -E2BIG past DPCONFIG_MAX_LIST_ITEMS ("list: more than N items"), -ENOMEM. */
static int uint_list_push(struct dpconfig_uint_list *l, uint64_t v, struct vg_err *err)
{
    int rc = vg_array_grow(&l->items, &l->cap, l->count + 1, sizeof l->items[0],
                           DPCONFIG_MAX_LIST_ITEMS, "list", err);
    if (rc < 0)
        return rc;
    l->items[l->count++] = v;
    return 0;
}

#define AUTO_UINT_LIST __attribute__((cleanup(uint_list_clear)))
_Static_assert(DPCONFIG_MAX_LIST_ITEMS == 4096, "docs/config.md (dp_config_doc) says 4096");

static int text_uint(const struct key *k, const char *s, uint64_t *out, struct why *why)
{
    struct vg_err e = {0};
    char b[64];
    if (vg_parse_u64(s, k->min, k->max ? k->max : UINT64_MAX, out, &e) < 0) {
        if (k->max != 0 && k->max != UINT64_MAX)
            return why_set(why, "'%s' is not a whole number from %llu to %llu",
                           shown(s, b, sizeof b), (unsigned long long)k->min,
                           (unsigned long long)k->max);
        return why_set(why, "'%s' is not a whole number", shown(s, b, sizeof b));
    }
    return 0;
}

/* Comma-separated lists on the command line and in defaults; "" is the empty list. */
static int text_uint_list(const struct key *k, const char *s, struct dpconfig_uint_list *out,
                          struct why *why)
{
    AUTO_UINT_LIST struct dpconfig_uint_list l = {0};
    while (*s != '\0') {
        const char *comma = strchr(s, ',');
        size_t n = comma ? (size_t)(comma - s) : strlen(s);
        char item[32];
        uint64_t v;
        if (n >= sizeof item)
            return why_set(why, "list item too long");
        memcpy(item, s, n);
        item[n] = '\0';
        if (text_uint(k, item, &v, why) < 0)
            return -EINVAL;
        struct vg_err e;
        if (uint_list_push(&l, v, &e) < 0)
            return why_set(why, "%s", e.msg);
        s += n + (comma ? 1 : 0);
    }
    uint_list_clear(out);
    *out = l;
    memset(&l, 0, sizeof l);
    return 0;
}

static void devices_clear(struct dpconfig_devices *d)
{
    for (size_t i = 0; i < d->list_count; i++)
        free(d->list[i]);
    free(d->list);
    memset(d, 0, sizeof *d);
}

#define AUTO_DEVICES __attribute__((cleanup(devices_clear)))

static void free_fields(const struct key *table, size_t n, void *base);

/* Parses text into the key's field. Used for defaults, the environment and the command
 * line, and for YAML scalars once their YAML type has been checked. */
static int parse_text(const struct key *k, const char *s, void *base, struct why *why)
{
    char b[64], list[200];
    switch (k->type) {
    case T_BOOL:
        if (!text_bool(s, AT(base, k->offset, bool)))
            return why_set(why, "'%s' is not a boolean (true or false)", shown(s, b, sizeof b));
        return 0;
    case T_STRING:
    case T_RESOURCE_NAME: {
        char **field = AT(base, k->offset, char *);
        free(*field);
        *field = xstrdup(s);
        return 0;
    }
    case T_ENUM: {
        int i = enum_index(k->values, s);
        if (i < 0 && s[0] == '\0' && (k->flags & K_EMPTY_DEFAULT))
            i = enum_index(k->values, k->def);
        if (i < 0) {
            value_list(k->values, list, sizeof list);
            return why_set(why, "'%s' is not one of %s", shown(s, b, sizeof b), list);
        }
        if (k->offset == OFF(version)) {
            char **field = AT(base, k->offset, char *);
            free(*field);
            *field = xstrdup(k->values[i]);
        } else {
            *AT(base, k->offset, int) = i;
        }
        return 0;
    }
    case T_UINT:
        return text_uint(k, s, AT(base, k->offset, uint64_t), why);
    case T_FLOAT: {
        double v;
        if (parse_double(s, &v) < 0 || v < k->fmin || v > k->fmax)
            return why_set(why, "'%s' is not a number from %g to %g", shown(s, b, sizeof b),
                           k->fmin, k->fmax);
        *AT(base, k->offset, double) = v;
        return 0;
    }
    case T_DURATION:
        if (parse_duration(s, AT(base, k->offset, uint64_t)) < 0)
            return why_set(why, "'%s' is not a duration such as 60s or 1m30s",
                           shown(s, b, sizeof b));
        return 0;
    case T_MIB: {
        /* vg_parse_mib_default reads a bare number as MiB and answers in bytes. */
        struct vg_err e = {0};
        uint64_t bytes;
        if (vg_parse_mib_default(s, &bytes, &e) < 0 || bytes % (1024 * 1024) != 0)
            return why_set(why, "'%s' is not a whole number of MiB or a quantity such as 4GiB",
                           shown(s, b, sizeof b));
        *AT(base, k->offset, uint64_t) = bytes / (1024 * 1024);
        return 0;
    }
    case T_ENUM_SET: {
        unsigned set = 0;
        const char *p = s;
        while (*p != '\0') {
            const char *comma = strchr(p, ',');
            size_t n = comma ? (size_t)(comma - p) : strlen(p);
            char item[64];
            if (n >= sizeof item)
                return why_set(why, "list item too long");
            memcpy(item, p, n);
            item[n] = '\0';
            if (set_enum_member(k, item, &set, why) < 0)
                return -EINVAL;
            p += n + (comma ? 1 : 0);
        }
        if (set == 0) {
            value_list(k->values, list, sizeof list);
            return why_set(why, "needs at least one of %s", list);
        }
        *AT(base, k->offset, unsigned) = set;
        return 0;
    }
    case T_UINT_LIST:
        return text_uint_list(k, s, AT(base, k->offset, struct dpconfig_uint_list), why);
    case T_XIDS: {
        struct dpconfig_xids *x = AT(base, k->offset, struct dpconfig_xids);
        if (strcasecmp(s, "all") == 0) {
            uint_list_clear(&x->list);
            x->all = true;
            return 0;
        }
        if (text_uint_list(k, s, &x->list, why) < 0)
            return -EINVAL;
        x->all = false;
        return 0;
    }
    case T_DEVICES: {
        struct dpconfig_devices *d = AT(base, k->offset, struct dpconfig_devices);
        if (strcmp(s, "all") != 0)
            return why_set(why, "devices set as '%s' but the only valid string is 'all'",
                           shown(s, b, sizeof b));
        devices_clear(d);
        d->kind = DPCONFIG_DEVICES_ALL;
        return 0;
    }
    case T_SECTION:
    case T_LIST:
        break;
    }
    return why_set(why, "cannot be given as text");
}

/* ---- defaults and freeing ----------------------------------------------------------- */

static void apply_defaults(const struct key *table, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        const struct key *k = &table[i];
        if (k->def == NULL)
            continue;
        struct why why;
        if (parse_text(k, k->def, base, &why) < 0)
            abort(); /* a bad default is a bug in the table; the unit tests catch it */
    }
}

static void free_fields(const struct key *table, size_t n, void *base)
{
    for (size_t i = 0; i < n; i++) {
        const struct key *k = &table[i];
        switch (k->type) {
        case T_STRING:
        case T_RESOURCE_NAME:
            free(*AT(base, k->offset, char *));
            *AT(base, k->offset, char *) = NULL;
            break;
        case T_ENUM:
            if (k->offset == OFF(version)) {
                free(*AT(base, k->offset, char *));
                *AT(base, k->offset, char *) = NULL;
            }
            break;
        case T_UINT_LIST:
            uint_list_clear(AT(base, k->offset, struct dpconfig_uint_list));
            break;
        case T_XIDS:
            uint_list_clear(&AT(base, k->offset, struct dpconfig_xids)->list);
            break;
        case T_DEVICES:
            devices_clear(AT(base, k->offset, struct dpconfig_devices));
            break;
        case T_LIST: {
            char *items = list_items(base, k);
            size_t count = *AT(base, k->count_offset, size_t);
            for (size_t j = 0; j < count; j++)
                free_fields(k->items, k->item_count, items + j * k->elem_size);
            free(items);
            set_list_items(base, k, NULL);
            *AT(base, k->count_offset, size_t) = 0;
            break;
        }
        default:
            break;
        }
    }
}

void dpconfig_defaults(struct dpconfig *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    apply_defaults(keys, KEY_COUNT, cfg);
}

void dpconfig_free(struct dpconfig *cfg)
{
    if (cfg == NULL)
        return;
    free_fields(keys, KEY_COUNT, cfg);
    free(cfg->source);
    memset(cfg, 0, sizeof *cfg);
}

/* ---- YAML decoding ------------------------------------------------------------------ */

struct loader {
    const char *name;
    struct vg_err *err;
};

int dpconfig_key_vfail(const char *name, struct vg_err *err, int line, const char *path, int code,
                       const char *fmt, va_list ap)
{
    char msg[VG_ERR_MSG_MAX];
    if (vsnprintf(msg, sizeof msg, fmt, ap) < 0)
        msg[0] = '\0';
    if (line > 0)
        return vg_err_set(err, code, "%s:%d: key '%s': %s", name, line, path, msg);
    return vg_err_set(err, code, "%s: key '%s': %s", name, path, msg);
}

__attribute__((format(printf, 5, 6))) static int fail(struct loader *ld, int line, const char *path,
                                                      int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = dpconfig_key_vfail(ld->name, ld->err, line, path, code, fmt, ap);
    va_end(ap);
    return rc;
}

int dpconfig_node_line(struct fy_node *n)
{
    if (n == NULL)
        return 0;
    struct fy_token *t = fy_node_get_scalar_token(n);
    if (t == NULL)
        return 0;
    const struct fy_mark *m = fy_token_start_mark(t);
    return m != NULL ? m->line + 1 : 0;
}

/* The line a node starts on: its own for scalars, its first key or item for collections
 * (libfyaml 0.7 exposes marks on tokens only), or fallback. */
static int start_line(struct fy_node *n, int fallback)
{
    if (n == NULL)
        return fallback;
    if (fy_node_get_type(n) == FYNT_SCALAR) {
        int l = dpconfig_node_line(n);
        return l > 0 ? l : fallback;
    }
    void *iter = NULL;
    if (fy_node_get_type(n) == FYNT_MAPPING) {
        struct fy_node_pair *p = fy_node_mapping_iterate(n, &iter);
        return p != NULL ? start_line(fy_node_pair_key(p), fallback) : fallback;
    }
    struct fy_node *item = fy_node_sequence_iterate(n, &iter);
    return item != NULL ? start_line(item, fallback) : fallback;
}

enum ykind { Y_NULL, Y_BOOL, Y_INT, Y_FLOAT, Y_STRING };

struct scalar {
    enum ykind kind;
    const char *text; /* NUL-terminated, owned by the document */
    bool boolean;
    bool quoted;
};

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s != '\0'; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

static bool looks_float(const char *s)
{
    if (*s == '+' || *s == '-')
        s++;
    static const char *const special[] = {".inf", ".Inf", ".INF", ".nan", ".NaN", ".NAN", NULL};
    if (enum_index(special, s) >= 0)
        return true;
    bool digits = false, dot = false;
    while ((*s >= '0' && *s <= '9') || *s == '.') {
        if (*s == '.') {
            if (dot)
                return false;
            dot = true;
        } else {
            digits = true;
        }
        s++;
    }
    if (!digits)
        return false;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-')
            s++;
        if (!all_digits(s))
            return false;
        return true;
    }
    return *s == '\0' && dot;
}

/* go-yaml v2's resolution of a plain scalar, which is what NVIDIA's loader sees. */
static int resolve_scalar(struct loader *ld, struct fy_node *n, const char *path, int line,
                          struct scalar *out)
{
    static const char *const yes[] = {"y",    "Y",    "yes", "Yes", "YES", "true",
                                      "True", "TRUE", "on",  "On",  "ON",  NULL};
    static const char *const no[] = {"n",     "N",     "no",  "No",  "NO",  "false",
                                     "False", "FALSE", "off", "Off", "OFF", NULL};
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    memset(out, 0, sizeof *out);
    if (n == NULL) {
        out->kind = Y_NULL;
        out->text = "";
        return 0;
    }
    enum fy_node_style style = fy_node_get_style(n);
    if (style == FYNS_ALIAS)
        return fail(ld, line, path, -EINVAL, "anchors and aliases are not supported");
    size_t len = 0;
    const char *raw = fy_node_get_scalar(n, &len);
    const char *text = fy_node_get_scalar0(n);
    if (raw == NULL || text == NULL)
        return fail(ld, line, path, -ENOMEM, "cannot read the value");
    if (strlen(text) != len)
        return fail(ld, line, path, -EINVAL, "the value contains a NUL character");
    out->text = text;
    if (style != FYNS_PLAIN) {
        out->kind = Y_STRING;
        out->quoted = style == FYNS_SINGLE_QUOTED || style == FYNS_DOUBLE_QUOTED;
        return 0;
    }
    if (enum_index(nulls, text) >= 0) {
        out->kind = Y_NULL;
    } else if (enum_index(yes, text) >= 0) {
        out->kind = Y_BOOL;
        out->boolean = true;
    } else if (enum_index(no, text) >= 0) {
        out->kind = Y_BOOL;
        out->boolean = false;
    } else if (all_digits(text[0] == '-' || text[0] == '+' ? text + 1 : text)) {
        out->kind = Y_INT;
    } else if (looks_float(text)) {
        out->kind = Y_FLOAT;
    } else {
        out->kind = Y_STRING;
    }
    return 0;
}

static const char *kind_name(const struct scalar *s)
{
    switch (s->kind) {
    case Y_NULL:
        return "null";
    case Y_BOOL:
        return "a boolean";
    case Y_INT:
        return "an integer";
    case Y_FLOAT:
        return "a number";
    case Y_STRING:
        return s->quoted ? "a quoted string" : "a string";
    }
    return "?";
}

static const char *node_kind(struct fy_node *n)
{
    switch (fy_node_get_type(n)) {
    case FYNT_MAPPING:
        return "a mapping";
    case FYNT_SEQUENCE:
        return "a list";
    default:
        return "a scalar";
    }
}

static int wrong_type(struct loader *ld, int line, const char *path, const char *want,
                      const struct scalar *s)
{
    char b[64];
    return fail(ld, line, path, -EINVAL, "expected %s, got %s '%s'", want, kind_name(s),
                shown(s->text, b, sizeof b));
}

static int why_fail(struct loader *ld, int line, const char *path, const struct why *why)
{
    return fail(ld, line, path, -EINVAL, "%s", why->msg);
}

/* One scalar into one key; sequences only for the list-valued types. */
static int decode_scalar_key(struct loader *ld, const struct key *k, struct fy_node *v,
                             const char *path, int line, void *base)
{
    struct scalar s;
    struct why why;
    int rc = resolve_scalar(ld, v, path, line, &s);
    if (rc < 0)
        return rc;
    if (s.kind == Y_NULL)
        return 0; /* as in Go: null leaves the field as it was */
    bool ok;
    switch (k->type) {
    case T_BOOL:
        if (s.kind != Y_BOOL)
            return wrong_type(ld, line, path, "a boolean (true or false)", &s);
        *AT(base, k->offset, bool) = s.boolean;
        return 0;
    case T_UINT:
        if (s.kind != Y_INT)
            return wrong_type(ld, line, path, "an integer", &s);
        break;
    case T_FLOAT:
        if (s.kind != Y_INT && s.kind != Y_FLOAT)
            return wrong_type(ld, line, path, "a number", &s);
        break;
    case T_DURATION:
        if (s.kind == Y_INT) {
            uint64_t ns;
            struct vg_err e = {0};
            if (vg_parse_u64(s.text, 0, UINT64_MAX, &ns, &e) < 0)
                return fail(ld, line, path, -EINVAL, "'%s' is not a duration", s.text);
            *AT(base, k->offset, uint64_t) = ns;
            return 0;
        }
        if (s.kind != Y_STRING)
            return wrong_type(ld, line, path, "a duration such as 60s", &s);
        break;
    case T_MIB:
        ok = s.kind == Y_INT || s.kind == Y_STRING;
        if (!ok)
            return wrong_type(ld, line, path, "MiB or a quantity such as 4GiB", &s);
        break;
    case T_STRING:
    case T_ENUM:
    case T_ENUM_SET:
    case T_XIDS:
    case T_RESOURCE_NAME:
        /* sigs.k8s.io/yaml turns any scalar into text for a string field. */
        if (k->type == T_XIDS && strcasecmp(s.text, "all") != 0)
            return fail(ld, line, path, -EINVAL, "expected 'all' or a list of XIDs, got '%s'",
                        s.text);
        break;
    case T_UINT_LIST:
        return wrong_type(ld, line, path, "a list of integers", &s);
    case T_DEVICES: {
        struct dpconfig_devices *d = AT(base, k->offset, struct dpconfig_devices);
        if (s.kind == Y_INT) {
            uint64_t count;
            struct vg_err e = {0};
            if (vg_parse_u64(s.text, 1, 1024, &count, &e) < 0)
                return fail(ld, line, path, -EINVAL,
                            "devices set as '%s' but a count of devices must be from 1 to 1024",
                            s.text);
            devices_clear(d);
            d->kind = DPCONFIG_DEVICES_COUNT;
            d->count = count;
            return 0;
        }
        if (s.kind != Y_STRING)
            return wrong_type(ld, line, path, "'all', a count or a list of devices", &s);
        break;
    }
    case T_SECTION:
    case T_LIST:
        return fail(ld, line, path, -EINVAL, "expected %s, got %s '%s'",
                    k->type == T_LIST ? "a list" : "a mapping", kind_name(&s), s.text);
    }
    if (parse_text(k, s.text, base, &why) < 0)
        return why_fail(ld, line, path, &why);
    return 0;
}

static bool is_uuid(const char *s)
{
    /* 8-4-4-4-12 hex digits, or 32 hex digits. */
    size_t len = strlen(s);
    if (len == 36) {
        for (size_t i = 0; i < len; i++) {
            bool dash = i == 8 || i == 13 || i == 18 || i == 23;
            if (dash ? s[i] != '-'
                     : !((s[i] >= '0' && s[i] <= '9') ||
                         ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f')))
                return false;
        }
        return true;
    }
    if (len != 32)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || ((s[i] | 0x20) >= 'a' && (s[i] | 0x20) <= 'f')))
            return false;
    return true;
}

static bool is_mig_index(const char *s)
{
    const char *colon = strchr(s, ':');
    if (colon == NULL || colon == s || strchr(colon + 1, ':') != NULL)
        return false;
    for (const char *p = s; p < colon; p++)
        if (*p < '0' || *p > '9')
            return false;
    return all_digits(colon + 1);
}

static bool is_device_ref(const char *s)
{
    if (all_digits(s) || is_mig_index(s))
        return true;
    if (strncmp(s, "GPU-", 4) == 0)
        return is_uuid(s + 4);
    if (strncmp(s, "MIG-", 4) != 0)
        return false;
    s += 4;
    if (is_uuid(s))
        return true;
    /* MIG-GPU-<uuid>/<gi>/<ci> */
    if (strncmp(s, "GPU-", 4) != 0 || strlen(s) < 4 + 36 + 4)
        return false;
    char uuid[37];
    memcpy(uuid, s + 4, 36);
    uuid[36] = '\0';
    if (!is_uuid(uuid) || s[40] != '/')
        return false;
    const char *rest = s + 41;
    const char *slash = strchr(rest, '/');
    if (slash == NULL || slash == rest)
        return false;
    for (const char *p = rest; p < slash; p++)
        if (*p < '0' || *p > '9')
            return false;
    return all_digits(slash + 1);
}

static int decode_sequence_key(struct loader *ld, const struct key *k, struct fy_node *v,
                               const char *path, int line, void *base)
{
    char item_path[160];
    void *iter = NULL;
    struct fy_node *item;
    size_t index = 0;
    AUTO_UINT_LIST struct dpconfig_uint_list uints = {0};
    AUTO_DEVICES struct dpconfig_devices devices = {.kind = DPCONFIG_DEVICES_LIST};
    unsigned set = 0;
    int rc;
    if (k->type != T_ENUM_SET && k->type != T_UINT_LIST && k->type != T_XIDS &&
        k->type != T_DEVICES)
        return fail(ld, line, path, -EINVAL, "expected %s, got a list",
                    k->type == T_SECTION ? "a mapping" : "a single value");
    while ((item = fy_node_sequence_iterate(v, &iter)) != NULL) {
        vg_snprintf(item_path, sizeof item_path, "%s[%zu]", path, index++);
        int item_line = start_line(item, line);
        struct scalar s;
        struct why why;
        struct vg_err e;
        if (fy_node_get_type(item) != FYNT_SCALAR)
            return fail(ld, item_line, item_path, -EINVAL, "expected a single value, got %s",
                        node_kind(item));
        if ((rc = resolve_scalar(ld, item, item_path, item_line, &s)) < 0)
            return rc;
        if (k->type == T_ENUM_SET) {
            if (s.kind == Y_NULL || s.kind == Y_BOOL)
                return wrong_type(ld, item_line, item_path, "a string", &s);
            if (set_enum_member(k, s.text, &set, &why) < 0)
                return why_fail(ld, item_line, item_path, &why);
        } else if (k->type == T_DEVICES) {
            bool ok = (s.kind == Y_INT && all_digits(s.text)) ||
                      (s.kind != Y_NULL && s.kind != Y_BOOL && is_device_ref(s.text));
            if (!ok)
                return fail(ld, item_line, item_path, -EINVAL,
                            "'%s' is not a GPU index, MIG index (0:1) or GPU-/MIG- UUID", s.text);
            if ((rc = vg_array_grow(&devices.list, &devices.list_cap, devices.list_count + 1,
                                    sizeof(char *), DPCONFIG_MAX_LIST_ITEMS, "list", &e)) < 0)
                return fail(ld, item_line, path, rc, "%s", e.msg);
            devices.list[devices.list_count++] = xstrdup(s.text);
        } else {
            uint64_t u;
            if (s.kind != Y_INT)
                return wrong_type(ld, item_line, item_path, "an integer", &s);
            if (text_uint(k, s.text, &u, &why) < 0)
                return why_fail(ld, item_line, item_path, &why);
            if ((rc = uint_list_push(&uints, u, &e)) < 0)
                return fail(ld, item_line, path, rc, "%s", e.msg);
        }
    }
    char list[200];
    switch (k->type) {
    case T_ENUM_SET:
        if (set == 0) {
            value_list(k->values, list, sizeof list);
            return fail(ld, line, path, -EINVAL, "needs at least one of %s", list);
        }
        *AT(base, k->offset, unsigned) = set;
        break;
    case T_DEVICES:
        if (devices.list_count == 0)
            return fail(ld, line, path, -EINVAL, "an empty list of devices shares nothing");
        devices_clear(AT(base, k->offset, struct dpconfig_devices));
        *AT(base, k->offset, struct dpconfig_devices) = devices;
        memset(&devices, 0, sizeof devices);
        break;
    case T_XIDS: {
        struct dpconfig_xids *x = AT(base, k->offset, struct dpconfig_xids);
        uint_list_clear(&x->list);
        x->all = false;
        x->list = uints;
        memset(&uints, 0, sizeof uints);
        break;
    }
    default:
        if (uints.count == 0 && (k->flags & K_EMPTY_KEEPS))
            break;
        uint_list_clear(AT(base, k->offset, struct dpconfig_uint_list));
        *AT(base, k->offset, struct dpconfig_uint_list) = uints;
        memset(&uints, 0, sizeof uints);
        break;
    }
    return 0;
}

static int decode_mapping(struct loader *ld, struct fy_node *map, const struct key *table, size_t n,
                          const char *prefix, const char *shown_prefix, void *base,
                          unsigned *seen_required);

static int decode_list(struct loader *ld, const struct key *k, struct fy_node *v, const char *path,
                       int line, void *base)
{
    if (fy_node_get_type(v) != FYNT_SEQUENCE)
        return fail(ld, line, path, -EINVAL, "expected a list, got %s", node_kind(v));
    int total = fy_node_sequence_item_count(v);
    if (total < 0)
        return fail(ld, line, path, -EINVAL, "cannot read the list");
    /* Decode into a fresh array; the old one is replaced only when all items are good. */
    size_t count = (size_t)total;
    char *items = xcalloc(count ? count : 1, k->elem_size);
    void *iter = NULL;
    struct fy_node *item;
    size_t done = 0;
    int rc = 0;
    char item_path[160];
    while ((item = fy_node_sequence_iterate(v, &iter)) != NULL && done < count) {
        void *elem = items + done * k->elem_size;
        vg_snprintf(item_path, sizeof item_path, "%s[%zu]", path, done);
        int item_line = start_line(item, line);
        apply_defaults(k->items, k->item_count, elem);
        *AT(elem, k->elem_line_offset, int) = item_line;
        done++;
        if (fy_node_get_type(item) != FYNT_MAPPING) {
            rc = fail(ld, item_line, item_path, -EINVAL, "expected a mapping, got %s",
                      node_kind(item));
            break;
        }
        unsigned seen = 0;
        rc = decode_mapping(ld, item, k->items, k->item_count, "", item_path, elem, &seen);
        if (rc < 0)
            break;
        for (size_t j = 0; j < k->item_count; j++) {
            if ((k->items[j].flags & K_REQUIRED) && !(seen & (1u << j))) {
                rc = fail(ld, item_line, item_path, -EINVAL, "'%s' is required", k->items[j].path);
                break;
            }
        }
        if (rc < 0)
            break;
    }
    if (rc < 0) {
        for (size_t j = 0; j < done; j++)
            free_fields(k->items, k->item_count, items + j * k->elem_size);
        free(items);
        return rc;
    }
    /* Replace the previous list. */
    char *old = list_items(base, k);
    size_t old_count = *AT(base, k->count_offset, size_t);
    for (size_t j = 0; j < old_count; j++)
        free_fields(k->items, k->item_count, old + j * k->elem_size);
    free(old);
    if (done == 0) {
        free(items);
        items = NULL;
    }
    set_list_items(base, k, items);
    *AT(base, k->count_offset, size_t) = done;
    return 0;
}

static const struct key *find_key(const struct key *table, size_t n, const char *path, bool fold)
{
    for (size_t i = 0; i < n; i++) {
        if (table[i].flags & K_CLI_ONLY)
            continue;
        if (fold ? strcasecmp(table[i].path, path) == 0 : strcmp(table[i].path, path) == 0)
            return &table[i];
    }
    return NULL;
}

static int decode_mapping(struct loader *ld, struct fy_node *map, const struct key *table, size_t n,
                          const char *prefix, const char *shown_prefix, void *base,
                          unsigned *seen_required)
{
    void *iter = NULL;
    struct fy_node_pair *pair;
    /* Lines where each key of this mapping was first seen, to refuse a second one. */
    int first_line[KEY_COUNT] = {0};
    bool seen[KEY_COUNT] = {false};
    while ((pair = fy_node_mapping_iterate(map, &iter)) != NULL) {
        struct fy_node *kn = fy_node_pair_key(pair);
        struct fy_node *v = fy_node_pair_value(pair);
        int line = start_line(kn, start_line(v, 0));
        char lookup[160], path[200], b[64];
        if (kn == NULL || fy_node_get_type(kn) != FYNT_SCALAR ||
            fy_node_get_style(kn) == FYNS_ALIAS)
            return fail(ld, line, shown_prefix[0] ? shown_prefix : "(top level)", -EINVAL,
                        "keys must be plain strings");
        size_t klen = 0;
        const char *kraw = fy_node_get_scalar(kn, &klen);
        const char *key = fy_node_get_scalar0(kn);
        if (kraw == NULL || key == NULL)
            return fail(ld, line, shown_prefix, -ENOMEM, "cannot read a key");
        /* An empty key (": x") may have no token, hence no line: name the mapping. */
        if (klen == 0)
            return fail(ld, line, shown_prefix[0] ? shown_prefix : "(top level)", -EINVAL,
                        "a key is empty");
        int r1 = vg_snprintf(lookup, sizeof lookup, "%s%s%s", prefix, prefix[0] ? "." : "", key);
        int r2 =
            vg_snprintf(path, sizeof path, "%s%s%s", shown_prefix, shown_prefix[0] ? "." : "", key);
        if (r1 < 0 || r2 < 0 || strlen(key) != klen)
            return fail(ld, line, shown(path, b, sizeof b), -EINVAL, "unknown key");
        const struct key *k =
            strpbrk(key, ".[]") == NULL ? find_key(table, n, lookup, false) : NULL;
        if (k == NULL) {
            const struct key *near =
                strpbrk(key, ".[]") == NULL ? find_key(table, n, lookup, true) : NULL;
            if (near != NULL) {
                const char *dot = strrchr(near->path, '.');
                return fail(ld, line, path, -EINVAL, "unknown key (did you mean '%s'?)",
                            dot ? dot + 1 : near->path);
            }
            return fail(ld, line, path, -EINVAL, "unknown key");
        }
        size_t index = (size_t)(k - table);
        if (seen[index])
            return fail(ld, line, path, -EINVAL, "given twice (first on line %d)",
                        first_line[index]);
        seen[index] = true;
        first_line[index] = line;
        /* A null value leaves the default, so it does not give a required key. */
        struct scalar vs = {.kind = Y_STRING};
        if (v == NULL)
            vs.kind = Y_NULL;
        else if (fy_node_get_type(v) == FYNT_SCALAR && resolve_scalar(ld, v, path, line, &vs) < 0)
            return ld->err != NULL ? ld->err->code : -EINVAL;
        if (seen_required != NULL && vs.kind != Y_NULL)
            *seen_required |= 1u << index;
        int rc;
        if (v != NULL && fy_node_get_style(v) == FYNS_ALIAS)
            return fail(ld, line, path, -EINVAL, "anchors and aliases are not supported");
        enum fy_node_type vt = v != NULL ? fy_node_get_type(v) : FYNT_SCALAR;
        if (k->type == T_SECTION) {
            if (k->flags & K_LINE)
                *AT(base, k->offset, int) = line;
            if (vt == FYNT_MAPPING)
                rc = decode_mapping(ld, v, table, n, lookup, path, base, NULL);
            else if (vt == FYNT_SEQUENCE && fy_node_sequence_item_count(v) == 0)
                rc = 0; /* `resources: []` is in files users copy; it says nothing */
            else if (vt == FYNT_SCALAR) {
                struct scalar s;
                rc = resolve_scalar(ld, v, path, line, &s);
                if (rc == 0 && s.kind != Y_NULL)
                    rc = fail(ld, line, path, -EINVAL, "expected a mapping, got %s '%s'",
                              kind_name(&s), shown(s.text, b, sizeof b));
            } else
                rc = fail(ld, line, path, -EINVAL, "expected a mapping, got %s", node_kind(v));
        } else if (k->type == T_LIST) {
            if (vt == FYNT_SCALAR) {
                struct scalar s;
                rc = resolve_scalar(ld, v, path, line, &s);
                if (rc == 0 && s.kind != Y_NULL)
                    rc = fail(ld, line, path, -EINVAL, "expected a list, got %s '%s'",
                              kind_name(&s), shown(s.text, b, sizeof b));
            } else
                rc = decode_list(ld, k, v, path, line, base);
        } else if (vt == FYNT_SEQUENCE) {
            rc = decode_sequence_key(ld, k, v, path, line, base);
        } else if (vt == FYNT_MAPPING) {
            rc = fail(ld, line, path, -EINVAL, "expected a single value, got a mapping");
        } else {
            rc = decode_scalar_key(ld, k, v, path, line, base);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static bool blank_document(const char *text, size_t len)
{
    bool comment = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '\n')
            comment = false;
        else if (c == '#')
            comment = true;
        else if (!comment && c != ' ' && c != '\t' && c != '\r')
            return false;
    }
    return true;
}

/* Moves src's contents into dst (freeing dst's first). */
/* A struct dpconfig released (dpconfig_free) at scope exit. */
#define AUTO_CONFIG __attribute__((cleanup(dpconfig_free)))

static void move_config(struct dpconfig *dst, struct dpconfig *src)
{
    dpconfig_free(dst);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

int dpconfig_load_buffer(const char *name, const char *text, size_t len, struct dpconfig *cfg,
                         struct vg_err *err)
{
    if (name == NULL)
        name = "(config)";
    if (len > DPCONFIG_MAX_BYTES)
        return vg_err_set(err, -EFBIG, "%s: larger than %d bytes", name, DPCONFIG_MAX_BYTES);
    const char *nul = len > 0 ? memchr(text, '\0', len) : NULL;
    if (nul != NULL) {
        int line = 1;
        for (const char *p = text; p < nul; p++)
            line += *p == '\n';
        return vg_err_set(err, -EINVAL, "%s:%d: contains a NUL byte", name, line);
    }

    AUTO_CONFIG struct dpconfig work;
    dpconfig_defaults(&work);
    work.source = xstrdup(name);
    int rc;
    if (len == 0 || blank_document(text, len)) {
        /* As NVIDIA's loader: an empty file is all defaults. */
        if ((rc = dpconfig_validate(&work, err)) < 0)
            return rc;
        move_config(cfg, &work);
        return 0;
    }

    VG_AUTO_YAML_DOC struct fy_document *doc = NULL;
    struct vg_err yerr = {0};
    /* Duplicate keys are allowed here and refused by decode_mapping(), whose message names
     * the key. */
    int yrc = vgpu_yaml_load(text, len, true, &doc, &yerr);
    if (yrc != 0) {
        if (yerr.msg[0] == '\0')
            return vg_err_set(err, yrc, "%s: not valid YAML", name);
        return vg_err_set(err, yrc, "%s:%s", name, yerr.msg);
    }
    struct loader ld = {.name = name, .err = err};
    struct fy_node *root = fy_document_root(doc);
    if (root != NULL && fy_node_get_type(root) != FYNT_MAPPING) {
        struct scalar s;
        int line = start_line(root, 1);
        if (fy_node_get_type(root) != FYNT_SCALAR || resolve_scalar(&ld, root, "", line, &s) != 0 ||
            s.kind != Y_NULL)
            return vg_err_set(err, -EINVAL, "%s:%d: the top level must be a mapping of keys", name,
                              line);
    } else if (root != NULL &&
               (rc = decode_mapping(&ld, root, keys, KEY_COUNT, "", "", &work, NULL)) < 0) {
        return rc;
    }
    if ((rc = dpconfig_validate(&work, err)) < 0)
        return rc;
    move_config(cfg, &work);
    return 0;
}

int dpconfig_load_file(const char *path, struct dpconfig *cfg, struct vg_err *err)
{
    VG_AUTO_FREE char *buf = NULL;
    size_t len = 0;
    int rc = vg_read_file(path, DPCONFIG_MAX_BYTES, &buf, &len, err);
    if (rc < 0)
        return rc;
    return dpconfig_load_buffer(path, buf, len, cfg, err);
}

/* ---- validation --------------------------------------------------------------------- */

static int where_fail(const struct dpconfig *cfg, struct vg_err *err, int line, const char *path,
                      const char *msg)
{
    const char *src = cfg->source != NULL ? cfg->source : "configuration";
    if (line > 0)
        return vg_err_set(err, -EINVAL, "%s:%d: key '%s': %s", src, line, path, msg);
    return vg_err_set(err, -EINVAL, "%s: key '%s': %s", src, path, msg);
}

static bool dns_label_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* NVIDIA's NewResourceName: add the prefix, at most 63 characters, and the part after
 * the slash a DNS-1123 subdomain. */
static int normalise_name(char **name, struct why *why)
{
    char b[64];
    const char *in = *name;
    size_t plen = strlen(DPCONFIG_RESOURCE_PREFIX);
    char *full;
    if (strncmp(in, DPCONFIG_RESOURCE_PREFIX, plen) == 0) {
        full = xstrdup(in);
    } else {
        size_t len = plen + strlen(in) + 1;
        full = xmalloc(len);
        vg_snprintf(full, len, "%s%s", DPCONFIG_RESOURCE_PREFIX, in);
    }
    if (strlen(full) > DPCONFIG_RESOURCE_NAME_MAX) {
        why_set(why, "fully-qualified resource name '%s' is longer than %d characters",
                shown(full, b, sizeof b), DPCONFIG_RESOURCE_NAME_MAX);
        free(full);
        return -EINVAL;
    }
    const char *p = full + plen;
    bool ok = *p != '\0';
    for (const char *label = p; ok && *label != '\0';) {
        const char *end = strchr(label, '.');
        size_t n = end ? (size_t)(end - label) : strlen(label);
        ok = n > 0 && dns_label_char(label[0]) && dns_label_char(label[n - 1]);
        for (size_t i = 0; ok && i < n; i++)
            ok = dns_label_char(label[i]) || label[i] == '-';
        label += n + (end ? 1 : 0);
        if (end != NULL && *label == '\0')
            ok = false;
    }
    if (!ok) {
        why_set(why, "'%s' is not a valid resource name (lower-case letters, digits, '-' and '.')",
                shown(full, b, sizeof b));
        free(full);
        return -EINVAL;
    }
    free(*name);
    *name = full;
    return 0;
}

static int validate_replicated(struct dpconfig *cfg, struct dpconfig_replicated *r,
                               const char *path, struct vg_err *err)
{
    char item[200];
    struct why why;
    for (size_t i = 0; i < r->resources.count; i++) {
        struct dpconfig_replicated_resource *res = &r->resources.items[i];
        vg_snprintf(item, sizeof item, "%s.resources[%zu].name", path, i);
        if (normalise_name(&res->name, &why) < 0)
            return where_fail(cfg, err, res->line, item, why.msg);
        vg_snprintf(item, sizeof item, "%s.resources[%zu].rename", path, i);
        if (res->rename != NULL && res->rename[0] == '\0') {
            free(res->rename);
            res->rename = NULL;
        }
        if (res->rename == NULL && r->rename_by_default) {
            size_t len = strlen(res->name) + sizeof ".shared";
            res->rename = xmalloc(len);
            vg_snprintf(res->rename, len, "%s.shared", res->name);
        }
        if (res->rename != NULL && normalise_name(&res->rename, &why) < 0)
            return where_fail(cfg, err, res->line, item, why.msg);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(r->resources.items[j].name, res->name) == 0) {
                char msg[VG_ERR_MSG_MAX];
                vg_snprintf(item, sizeof item, "%s.resources[%zu].name", path, i);
                vg_snprintf(msg, sizeof msg, "'%s' is listed twice (also item %zu)", res->name, j);
                return where_fail(cfg, err, res->line, item, msg);
            }
        }
    }
    return 0;
}

static bool replicated(const struct dpconfig_replicated *r)
{
    for (size_t i = 0; i < r->resources.count; i++)
        if (r->resources.items[i].replicas > 1)
            return true;
    return false;
}

int dpconfig_validate(struct dpconfig *cfg, struct vg_err *err)
{
    struct why why;
    int rc;
    if ((rc = validate_replicated(cfg, &cfg->sharing.time_slicing, "sharing.timeSlicing", err)) <
            0 ||
        (rc = validate_replicated(cfg, &cfg->sharing.mps, "sharing.mps", err)) < 0)
        return rc;
    for (int g = 0; g < 2; g++) {
        struct dpconfig_resource_pattern *items =
            g == 0 ? cfg->resources.gpus.items : cfg->resources.mig.items;
        size_t count = g == 0 ? cfg->resources.gpus.count : cfg->resources.mig.count;
        for (size_t i = 0; i < count; i++) {
            char item[80];
            vg_snprintf(item, sizeof item, "resources.%s[%zu].name", g == 0 ? "gpus" : "mig", i);
            if (normalise_name(&items[i].name, &why) < 0)
                return where_fail(cfg, err, items[i].line, item, why.msg);
        }
    }
    bool mps = replicated(&cfg->sharing.mps);
    if (mps && cfg->flags.mig_strategy == DPCONFIG_MIG_MIXED)
        return where_fail(cfg, err, cfg->sharing.mps.line, "sharing.mps",
                          "MPS sharing cannot be combined with flags.migStrategy 'mixed'");
    if (mps && (cfg->flags.mps_root == NULL || cfg->flags.mps_root[0] == '\0'))
        return where_fail(cfg, err, cfg->sharing.mps.line, "flags.mpsRoot",
                          "must be set when sharing.mps is used");
    if (mps && (cfg->vgpu.mps_control_path == NULL || cfg->vgpu.mps_control_path[0] == '\0'))
        return where_fail(cfg, err, cfg->sharing.mps.line, "vgpu.mpsControlPath",
                          "must be set when sharing.mps is used");
    for (size_t i = 0; mps && i < cfg->sharing.mps.resources.count; i++) {
        const struct dpconfig_replicated_resource *res = &cfg->sharing.mps.resources.items[i];
        for (size_t k = 0; k < res->devices.list_count; k++) {
            const char *dev = res->devices.list[k];
            if (strchr(dev, ':') == NULL && strncmp(dev, "MIG-", 4) != 0)
                continue;
            char item[80], msg[VG_ERR_MSG_MAX];
            vg_snprintf(item, sizeof item, "sharing.mps.resources[%zu].devices", i);
            vg_snprintf(msg, sizeof msg,
                        "'%.100s' is a MIG device: MPS sharing is not supported on MIG devices",
                        dev);
            return where_fail(cfg, err, res->line, item, msg);
        }
    }
    const struct dpconfig_uint_list *ch = &cfg->imex.channel_ids;
    if (ch->count > 1 || (ch->count == 1 && ch->items[0] != 0))
        return where_fail(cfg, err, cfg->imex.line, "imex.channelIDs", "must be [] or [0]");
    if (ch->count > 0 && !(cfg->flags.plugin.device_list_strategy &
                           (DPCONFIG_LIST_ENVVAR | DPCONFIG_LIST_VOLUME_MOUNTS)))
        return where_fail(cfg, err, cfg->imex.line, "imex.channelIDs",
                          "IMEX channels reach containers through NVIDIA_IMEX_CHANNELS and device "
                          "specs, which a CDI-only flags.plugin.deviceListStrategy does not "
                          "pass (vgpu writes no CDI specification); add envvar to the list");
    /* Keys vgpu cannot act on: refused unless they hold the value that changes nothing. */
    if (cfg->flags.device_discovery_strategy == DPCONFIG_DISCOVERY_TEGRA)
        return where_fail(cfg, err, 0, "flags.deviceDiscoveryStrategy",
                          "'tegra' is not supported: vgpu finds GPUs through NVML only "
                          "(use auto or nvml)");
    if (cfg->flags.plugin.nvidia_ctk_path == NULL ||
        strcmp(cfg->flags.plugin.nvidia_ctk_path, DPCONFIG_DEFAULT_NVIDIA_CTK_PATH) != 0)
        return where_fail(cfg, err, 0, "flags.plugin.nvidiaCTKPath",
                          "vgpu generates no CDI specification, so nothing would run "
                          "nvidia-ctk; remove the setting (generate the specification with "
                          "`nvidia-ctk cdi generate`)");
    if (cfg->vgpu.default_memory_mib != 0)
        return where_fail(cfg, err, 0, "vgpu.defaultMemory",
                          "the scheduler gives every container its memory (set defaultMemory "
                          "in vgpu-scheduler's configuration); the device plugin never sees a "
                          "container without one");
    if (!cfg->health.critical_xids.all) {
        const struct dpconfig_uint_list *c = &cfg->health.critical_xids.list;
        const struct dpconfig_uint_list *ig = &cfg->health.ignored_xids;
        for (size_t i = 0; i < c->count; i++)
            for (size_t j = 0; j < ig->count; j++)
                if (c->items[i] == ig->items[j]) {
                    char msg[120];
                    vg_snprintf(msg, sizeof msg,
                                "XID %llu is in both health.ignoredXIDs and health.criticalXIDs",
                                (unsigned long long)c->items[i]);
                    return where_fail(cfg, err, cfg->health.line, "health.criticalXIDs", msg);
                }
    }
    if (mps)
        cfg->sharing_strategy = DPCONFIG_SHARING_MPS;
    else if (replicated(&cfg->sharing.time_slicing))
        cfg->sharing_strategy = DPCONFIG_SHARING_TIME_SLICING;
    else
        cfg->sharing_strategy = DPCONFIG_SHARING_NONE;
    return 0;
}

size_t dpconfig_foreign_settings(const struct dpconfig *cfg, char *out, size_t size)
{
    struct dpconfig def;
    dpconfig_defaults(&def);
    const struct {
        const char *key;
        bool differs;
    } foreign[] = {
        {"flags.useNodeFeatureAPI",
         cfg->flags.use_node_feature_api != def.flags.use_node_feature_api},
        {"flags.gfd.oneshot", cfg->flags.gfd.oneshot != def.flags.gfd.oneshot},
        {"flags.gfd.noTimestamp", cfg->flags.gfd.no_timestamp != def.flags.gfd.no_timestamp},
        {"flags.gfd.sleepInterval",
         cfg->flags.gfd.sleep_interval_ns != def.flags.gfd.sleep_interval_ns},
        {"flags.gfd.outputFile",
         strcmp(cfg->flags.gfd.output_file, def.flags.gfd.output_file) != 0},
        {"flags.gfd.machineTypeFile",
         strcmp(cfg->flags.gfd.machine_type_file, def.flags.gfd.machine_type_file) != 0},
        {"resources.gpus", cfg->resources.gpus.count > 0},
        {"resources.mig", cfg->resources.mig.count > 0},
    };
    size_t n = 0, used = 0;
    if (size > 0)
        out[0] = '\0';
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        if (!foreign[i].differs)
            continue;
        int w = used < size
                    ? vg_snprintf(out + used, size - used, "%s%s", n ? "," : "", foreign[i].key)
                    : -1;
        if (w > 0)
            used += (size_t)w;
        n++;
    }
    dpconfig_free(&def);
    return n;
}

const char *dpconfig_sharing_strategy_name(enum dpconfig_sharing_strategy s)
{
    return (unsigned)s < 3 ? sharing_names[s] : "?";
}

/* ---- environment and command line --------------------------------------------------- */

static const struct key *find_flag(const char *name, size_t len)
{
    for (size_t i = 0; i < KEY_COUNT; i++)
        if (keys[i].flag != NULL && strlen(keys[i].flag) == len &&
            strncmp(keys[i].flag, name, len) == 0)
            return &keys[i];
    return NULL;
}

int dpconfig_apply_overrides(struct dpconfig *cfg, int argc, char *const argv[],
                             dpconfig_getenv_fn getenv_fn, void *getenv_user, struct vg_err *err)
{
    struct why why;
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
    if (getenv_fn != NULL) {
        for (size_t i = 0; i < KEY_COUNT; i++) {
            const struct key *k = &keys[i];
            if (k->env == NULL)
                continue;
            const char *v = getenv_fn(k->env, getenv_user);
            if (v == NULL || v[0] == '\0')
                continue;
            if (strlen(v) > 4096)
                return vg_err_set(err, -EINVAL, "environment %s: key '%s': longer than 4096 bytes",
                                  k->env, k->path);
            if (parse_text(k, v, cfg, &why) < 0)
                return vg_err_set(err, -EINVAL, "environment %s: key '%s': %s", k->env, k->path,
                                  why.msg);
        }
    }
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
            return vg_err_set(err, -EINVAL, "unexpected argument '%s' (see --help)", arg);
        const char *name = arg + 2;
        const char *eq = strchr(name, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        const struct key *k = find_flag(name, nlen);
        if (k == NULL)
            return vg_err_set(err, -EINVAL, "unknown option '--%.*s' (see --help)", (int)nlen,
                              name);
        const char *value;
        if (eq != NULL)
            value = eq + 1;
        else if (k->type == T_BOOL)
            value = "true";
        else if (i + 1 < argc)
            value = argv[++i];
        else
            return vg_err_set(err, -EINVAL, "option '--%s' needs a value", k->flag);
        if (strlen(value) > 4096)
            return vg_err_set(err, -EINVAL, "option '--%s': longer than 4096 bytes", k->flag);
        if (parse_text(k, value, cfg, &why) < 0)
            return vg_err_set(err, -EINVAL, "option '--%s': key '%s': %s", k->flag, k->path,
                              why.msg);
    }
    return dpconfig_validate(cfg, err);
}

int dpconfig_from_args(int argc, char *const argv[], dpconfig_getenv_fn getenv_fn,
                       void *getenv_user, struct dpconfig *cfg, struct vg_err *err)
{
    const char *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
        if (strncmp(argv[i], "--config=", 9) == 0)
            path = argv[i] + 9;
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            path = argv[i + 1];
    }
    if (path == NULL && getenv_fn != NULL) {
        path = getenv_fn("CONFIG_FILE", getenv_user);
        if (path != NULL && path[0] == '\0')
            path = NULL;
    }
    AUTO_CONFIG struct dpconfig work;
    dpconfig_defaults(&work);
    int rc;
    if (path != NULL && (rc = dpconfig_load_file(path, &work, err)) < 0)
        return rc;
    if ((rc = dpconfig_apply_overrides(&work, argc, argv, getenv_fn, getenv_user, err)) < 0)
        return rc;
    dpconfig_volcano_defaults(&work.volcano);
    if (work.cli.volcano_config != NULL && work.cli.volcano_config[0] != '\0') {
        if (work.vgpu.scheduler_protocol != DPCONFIG_PROTOCOL_VOLCANO)
            return vg_err_set(err, -EINVAL,
                              "--volcano-config %s: needs --scheduler-protocol volcano "
                              "(vgpu.schedulerProtocol)",
                              work.cli.volcano_config);
        if ((rc = dpconfig_volcano_load_file(work.cli.volcano_config, &work.volcano, err)) < 0)
            return rc;
    }
    if (work.vgpu.scheduler_protocol == DPCONFIG_PROTOCOL_VOLCANO) {
        if (work.sharing_strategy != DPCONFIG_SHARING_NONE)
            return vg_err_set(err, -EINVAL,
                              "vgpu.schedulerProtocol volcano: sharing.%s cannot be combined "
                              "with Volcano's vGPU protocol (it splits GPUs itself)",
                              work.sharing_strategy == DPCONFIG_SHARING_MPS ? "mps"
                                                                            : "timeSlicing");
        dpconfig_volcano_apply(&work);
    }
    move_config(cfg, &work);
    return 0;
}

/* ---- dump, help, docs --------------------------------------------------------------- */

static void print_set(FILE *out, const char *const *values, unsigned set)
{
    fputc('[', out);
    bool first = true;
    for (int i = 0; values[i] != NULL; i++) {
        if (set & (1u << i)) {
            fprintf(out, "%s%s", first ? "" : ", ", values[i]);
            first = false;
        }
    }
    fputc(']', out);
}

/* A string between double quotes, with YAML's (and JSON's) escapes for the quote, the
 * backslash and control characters, so that a value holding a line break still takes
 * one line of the dump and reads back as it was. */
static void print_quoted(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (*p == '\t')
            fputs("\\t", out);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void print_uints(FILE *out, const struct dpconfig_uint_list *l)
{
    fputc('[', out);
    for (size_t i = 0; i < l->count; i++)
        fprintf(out, "%s%llu", i ? ", " : "", (unsigned long long)l->items[i]);
    fputc(']', out);
}

static void dump_fields(FILE *out, const struct key *table, size_t n, const void *cbase,
                        const char *prefix)
{
    void *base = (void *)(uintptr_t)cbase;
    for (size_t i = 0; i < n; i++) {
        const struct key *k = &table[i];
        if (k->type == T_SECTION)
            continue;
        if (k->type == T_LIST) {
            char *items = list_items(base, k);
            size_t count = *AT(base, k->count_offset, size_t);
            fprintf(out, "%s%s.count = %zu\n", prefix, k->path, count);
            for (size_t j = 0; j < count; j++) {
                char p[200];
                vg_snprintf(p, sizeof p, "%s%s[%zu].", prefix, k->path, j);
                dump_fields(out, k->items, k->item_count, items + j * k->elem_size, p);
            }
            continue;
        }
        fprintf(out, "%s%s = ", prefix, k->path);
        switch (k->type) {
        case T_BOOL:
            fputs(*AT(base, k->offset, bool) ? "true" : "false", out);
            break;
        case T_STRING:
        case T_RESOURCE_NAME: {
            const char *s = *AT(base, k->offset, char *);
            if (s == NULL)
                fputs("null", out);
            else
                print_quoted(out, s);
            break;
        }
        case T_ENUM:
            if (k->offset == OFF(version) && table == keys)
                fprintf(out, "%s", *AT(base, k->offset, char *));
            else
                fputs(k->values[*AT(base, k->offset, int)], out);
            break;
        case T_UINT:
        case T_MIB:
            fprintf(out, "%llu", (unsigned long long)*AT(base, k->offset, uint64_t));
            break;
        case T_DURATION:
            fprintf(out, "%lluns", (unsigned long long)*AT(base, k->offset, uint64_t));
            break;
        case T_FLOAT: {
            /* The shortest text that reads back as the same number (1.5, 1.23456789), so
             * the dump says exactly what the plugin uses. */
            double v = *AT(base, k->offset, double);
            char text[40];
            for (int digits = 6; digits <= 17; digits++) {
                vg_snprintf(text, sizeof text, "%.*g", digits, v);
                if (strtod(text, NULL) == v)
                    break;
            }
            fputs(text, out);
            break;
        }
        case T_ENUM_SET:
            print_set(out, k->values, *AT(base, k->offset, unsigned));
            break;
        case T_UINT_LIST:
            print_uints(out, AT(base, k->offset, struct dpconfig_uint_list));
            break;
        case T_XIDS: {
            const struct dpconfig_xids *x = AT(base, k->offset, struct dpconfig_xids);
            if (x->all)
                fputs("all", out);
            else
                print_uints(out, &x->list);
            break;
        }
        case T_DEVICES: {
            const struct dpconfig_devices *d = AT(base, k->offset, struct dpconfig_devices);
            if (d->kind == DPCONFIG_DEVICES_ALL)
                fputs("all", out);
            else if (d->kind == DPCONFIG_DEVICES_COUNT)
                fprintf(out, "%llu", (unsigned long long)d->count);
            else {
                fputc('[', out);
                for (size_t j = 0; j < d->list_count; j++) {
                    fputs(j ? ", " : "", out);
                    print_quoted(out, d->list[j]);
                }
                fputc(']', out);
            }
            break;
        }
        default:
            break;
        }
        fputc('\n', out);
    }
}

void dpconfig_dump(const struct dpconfig *cfg, FILE *out)
{
    dump_fields(out, keys, KEY_COUNT, cfg, "");
    fprintf(out, "sharingStrategy = %s\n", dpconfig_sharing_strategy_name(cfg->sharing_strategy));
    if (cfg->vgpu.scheduler_protocol == DPCONFIG_PROTOCOL_VOLCANO)
        dpconfig_volcano_dump(&cfg->volcano, out);
}

static const char *type_name(const struct key *k)
{
    switch (k->type) {
    case T_SECTION:
        return "section";
    case T_BOOL:
        return "bool";
    case T_STRING:
        return "string";
    case T_ENUM:
        return "enum";
    case T_UINT:
        return "integer";
    case T_FLOAT:
        return "number";
    case T_DURATION:
        return "duration";
    case T_MIB:
        return "MiB or quantity";
    case T_ENUM_SET:
        return "string or list";
    case T_UINT_LIST:
        return "list of integers";
    case T_XIDS:
        return "`all` or list";
    case T_RESOURCE_NAME:
        return "resource name";
    case T_DEVICES:
        return "`all`, count or list";
    case T_LIST:
        return "list of mappings";
    }
    return "?";
}

static void print_allowed(FILE *out, const struct key *k)
{
    char list[200];
    if (k->values != NULL) {
        value_list(k->values, list, sizeof list);
        fprintf(out, "one of %s", list);
    } else if (k->type == T_UINT && k->max != 0) {
        fprintf(out, "%llu to %llu", (unsigned long long)k->min, (unsigned long long)k->max);
    } else if (k->type == T_FLOAT) {
        fprintf(out, "%g to %g", k->fmin, k->fmax);
    }
}

static bool skipped(const char *flag, const char *const *skip)
{
    for (; skip != NULL && *skip != NULL; skip++)
        if (strcmp(flag, *skip) == 0)
            return true;
    return false;
}

void dpconfig_print_help(FILE *out, const char *program)
{
    fprintf(out, "usage: %s [--config FILE] [options]\n\n", program);
    fputs("Options override the environment, which overrides the config file "
          "(docs/config.md).\n\n",
          out);
    dpconfig_print_flags(out, NULL);
}

void dpconfig_print_flags(FILE *out, const char *const *skip)
{
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const struct key *k = &keys[i];
        if (k->flag == NULL || skipped(k->flag, skip))
            continue;
        char left[64];
        vg_snprintf(left, sizeof left, "--%s%s", k->flag, k->type == T_BOOL ? "[=BOOL]" : " VALUE");
        fprintf(out, "  %-44s %s", left, k->doc);
        fputs("\n  ", out);
        fprintf(out, "%-44s [", "");
        if (k->values != NULL || k->type == T_UINT || k->type == T_FLOAT) {
            print_allowed(out, k);
            fputs("; ", out);
        }
        fprintf(out, "default: %s", k->def != NULL ? k->def : "none");
        if (k->env != NULL)
            fprintf(out, "; env %s", k->env);
        if (!(k->flags & K_CLI_ONLY))
            fprintf(out, "; file %s", k->path);
        fputs("]\n", out);
    }
    fputs("  --help                                       this text\n", out);
}

static void doc_row(FILE *out, const struct key *k, const char *path)
{
    fprintf(out, "| `%s` | %s | %s%s%s | ", path, type_name(k), k->def ? "`" : "",
            k->def                                        ? k->def
            : (k->flags & K_REQUIRED)                     ? "required"
            : (k->type == T_SECTION || k->type == T_LIST) ? ""
                                                          : "unset",
            k->def ? "`" : "");
    print_allowed(out, k);
    fprintf(out, " | %s%s%s | %s%s%s | %s |\n", k->env ? "`" : "", k->env ? k->env : "",
            k->env ? "`" : "", k->flag ? "`--" : "", k->flag ? k->flag : "", k->flag ? "`" : "",
            k->doc);
}

void dpconfig_print_doc(FILE *out)
{
    fputs("# vgpu-device-plugin configuration\n\n"
          "<!-- Generated by build/tests/dpconfig_doc (src/cmd/dpconfig-doc) from the key table in "
          "src/dpconfig/dpconfig.c; edit the table, then run it. A test fails when this "
          "file and the table disagree. -->\n\n"
          "`vgpu-device-plugin --config FILE` reads the NVIDIA device plugin's configuration "
          "file (`version: v1`) as it is, plus a `vgpu` section of vgpu's own. The file is "
          "YAML 1.2 or JSON, at most 1 MiB, a list value at most 4096 items. Command-line "
          "options override environment "
          "variables, which override the file, which overrides the defaults below.\n\n"
          "Scalars are typed as NVIDIA's loader types them: a plain `true`, `yes` or `on` is "
          "a boolean, a plain `4` an integer, a quoted `\"4\"` a string (and refused where an "
          "integer is expected). `null` or an empty value leaves the default. Unknown keys, "
          "wrong types, values out of range, duplicate keys, anchors and aliases are errors "
          "that name the file, the line and the key:\n\n"
          "```\nconfig.yaml:3: key 'flags.migStrategy': 'maybe' is not one of none, single, "
          "mixed\n```\n\n"
          "## Rules across keys\n\n"
          "- `name` and `rename` get the prefix `nvidia.com/` when they lack it; the full "
          "name is at most 63 characters and the part after the slash a DNS subdomain.\n"
          "- `replicas` is required and at least 2; a name may appear once per section.\n"
          "- `renameByDefault: true` advertises `<name>.shared` for items without "
          "`rename`.\n"
          "- The sharing strategy is `mps` when any `sharing.mps` resource has replicas, "
          "else `time-slicing` when any `sharing.timeSlicing` resource has, else `none` "
          "(vgpu's own sharing, by `vgpu.deviceSplitCount`).\n"
          "- MPS cannot be combined with `flags.migStrategy: mixed` and needs "
          "`flags.mpsRoot`.\n"
          "- `imex.channelIDs` is `[]` or `[0]`, and needs `envvar` or `volume-mounts` among "
          "the device list strategies (vgpu writes no CDI specification to carry it); an XID "
          "may not be both ignored and critical.\n"
          "- Keys vgpu cannot act on are refused at start, naming the key and why, unless they "
          "hold the value that changes nothing: `flags.deviceDiscoveryStrategy: tegra`, "
          "`flags.plugin.nvidiaCTKPath` other than `/usr/bin/nvidia-ctk`, "
          "`vgpu.defaultMemory` other than 0. Settings of other programs that read the same "
          "file (`flags.gfd`, `flags.useNodeFeatureAPI`) and `resources` (ignored by "
          "NVIDIA's plugin too) load, and a warning at start names them.\n\n"
          "## Keys\n\n"
          "| key | type | default | allowed | env | flag | meaning |\n"
          "| --- | --- | --- | --- | --- | --- | --- |\n",
          out);
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const struct key *k = &keys[i];
        if (k->flags & K_CLI_ONLY)
            continue;
        doc_row(out, k, k->path);
        if (k->type == T_LIST) {
            for (size_t j = 0; j < k->item_count; j++) {
                char path[160];
                vg_snprintf(path, sizeof path, "%s[].%s", k->path, k->items[j].path);
                doc_row(out, &k->items[j], path);
            }
        }
    }
    fputs("\n## Command line only\n\n"
          "| flag | type | default | env | meaning |\n"
          "| --- | --- | --- | --- | --- |\n",
          out);
    for (size_t i = 0; i < KEY_COUNT; i++) {
        const struct key *k = &keys[i];
        if (!(k->flags & K_CLI_ONLY))
            continue;
        fprintf(out, "| `--%s` | %s | %s%s%s | %s%s%s | %s |\n", k->flag, type_name(k),
                k->def ? "`" : "", k->def ? k->def : "unset", k->def ? "`" : "", k->env ? "`" : "",
                k->env ? k->env : "", k->env ? "`" : "", k->doc);
    }
    fputs("\n## Examples\n\n"
          "Time slicing, four replicas per GPU (NVIDIA's GPU operator example):\n\n"
          "```yaml\nversion: v1\nflags:\n  migStrategy: none\nsharing:\n  timeSlicing:\n"
          "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n```\n\n"
          "vgpu's own sharing, ten containers per GPU with memory oversubscription:\n\n"
          "```yaml\nversion: v1\nvgpu:\n  deviceSplitCount: 10\n  deviceMemoryScaling: 1.5\n"
          "  defaultCores: 20\n```\n",
          out);
}
