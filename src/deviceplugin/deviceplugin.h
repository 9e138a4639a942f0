/* vgpu-device-plugin's library: everything the daemon does, in pieces tests link directly.
 *
 *   discovery   the node's GPUs through NVML, dlopen'ed by SONAME like a real plugin
 *               (works on fakegpu), or through any struct dp_gpu_source a test supplies;
 *   resources   what is advertised to kubelet per mode: vgpu (split-count virtual devices
 *               `<UUID>-<i>`) or timeSlicing (NVIDIA's replicas `<UUID>::<n>`, renames)
 *               or mps (the same replicas, each GPU served by an MPS control daemon);
 *   mps         those control daemons: started, health-checked, restarted, quit (mps.c);
 *   matching    which container of which pod kubelet is allocating (vgpu mode), from the
 *               scheduler's `vgpu.io/decision` annotation (docs/protocol.md), decoded
 *               once per pod into the pod cache (podcache.h);
 *   allocate    the Allocate response (env, mounts, device specs) as a plain struct that
 *               golden tests print, and the per-container directory with the shared
 *               region and the read-only limits file; their cleanup;
 *   plugin      the daemon on one libevent loop: gRPC servers, registration and
 *               re-registration when kubelet restarts, health polling, the pod watch and
 *               the node inventory annotation with a heartbeat.
 *
 * docs/deviceplugin.md is the design note. Ownership: each x_new has an x_free (NULL is a
 * no-op); structs filled by the pure functions own nothing unless said otherwise. */
#ifndef VGPU_DEVICEPLUGIN_DEVICEPLUGIN_H
#define VGPU_DEVICEPLUGIN_DEVICEPLUGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "annot/annot.h"
#include "base/err.h"
#include "dpconfig/dpconfig.h"
#include "dpconfig/hami.h"
#include "nvml/mig.h"

#define DP_MAX_GPUS      16
#define DP_ID_MAX        64 /* kubelet's device ID limit is 63 characters */
#define DP_MAX_IDS       (DP_MAX_GPUS * 1024)
#define DP_MAX_RESOURCES 8
#define DP_NVML_SONAME   "libnvidia-ml.so.1"
#define DP_MAX_MIGS      7 /* MIG devices per GPU */
#define DP_MIG_PROFILE   32

/* ---- discovery ---------------------------------------------------------------------- */

/* A MIG device (GPU instance + compute instance) of a MIG-enabled GPU. */
struct dp_mig {
    char uuid[ANNOT_UUID_MAX];    /* "MIG-..." */
    char profile[DP_MIG_PROFILE]; /* NVIDIA's name: "1g.10gb", "1c.2g.20gb" (dp_mig_profile) */
    unsigned index;               /* NVML MIG device index on its GPU */
    unsigned gi, ci;              /* GPU and compute instance ids */
    int gi_cap, ci_cap;           /* /dev/nvidia-caps/nvidia-cap<N> guarding them; -1: unknown */
    uint64_t memory_mib;
};

struct dp_gpu {
    char uuid[ANNOT_UUID_MAX];
    char model[ANNOT_MODEL_MAX];
    unsigned index;      /* NVML index */
    unsigned minor;      /* /dev/nvidia<minor> */
    uint64_t memory_mib; /* real memory, before scaling */
    int cc_major, cc_minor;
    char pci_bus_id[32];
    int numa; /* -1 when unknown */
    bool mig_enabled;
    bool healthy;
    unsigned mig_count; /* MIG devices, when mig_enabled */
    struct dp_mig migs[DP_MAX_MIGS];
    /* Dynamic MIG (migdyn.c): served with vgpu.migMode dynamic; then what NVML reports of
     * its profiles and GPU instances, refreshed by dp_migdyn_refresh. */
    bool mig_dynamic;
    unsigned mig_slices;
    size_t mig_profile_count, mig_instance_count;
    struct nvml_mig_profile mig_profiles[NVML_MIG_MAX_PROFILES];
    struct nvml_mig_instance mig_instances[NVML_MIG_MAX_INSTANCES];
    uint32_t mig_allowed; /* bit i: mig_profiles[i] may be given (dp_migdyn_allow) */
};

/* Where GPUs come from: NVML in production, a table in tests. discover fills up to
 * DP_MAX_GPUS; healthy is polled. The mig_* calls (NULL: no dynamic MIG) read a GPU's
 * profiles and instances into it, make a GPU instance of profile p at start with its
 * compute instance (refused while the GPU runs work outside MIG instances), destroy GPU
 * instance gi; errors as src/nvml/mig.h's. */
struct dp_gpu_source {
    int (*discover)(void *arg, struct dp_gpu *gpus, unsigned *count, struct vg_err *err);
    bool (*healthy)(void *arg, const struct dp_gpu *gpu);
    int (*mig_state)(void *arg, struct dp_gpu *gpu, struct vg_err *err);
    int (*mig_create)(void *arg, const struct dp_gpu *gpu, const struct nvml_mig_profile *p,
                      unsigned start, struct nvml_mig_instance *out, struct vg_err *err);
    int (*mig_destroy)(void *arg, const struct dp_gpu *gpu, unsigned gi, struct vg_err *err);
    void *arg;
};

struct dp_nvml;
/* The NVML library to open: libnvidia-ml.so.1 in the usual library directories under
 * flags.plugin.containerDriverRoot (usr/lib64, usr/lib/<arch>-linux-gnu, lib64,
 * lib/<arch>-linux-gnu, usr/lib, lib) when there, else DP_NVML_SONAME for the dynamic
 * linker's search; into path[size]. */
/* The host directories vgpu mode writes into, made with their parents (mode 0755):
 * vgpu.regionDir and vgpu.computeBoardDir. At start, so that a plugin that starts never
 * fails an Allocate for a missing directory; again before each container's directory. */
int dp_vgpu_dirs(const struct dpconfig *cfg, struct vg_err *err);

/* A vgpu container's /etc/ld.so.preload comes from the host file
 * cfg->vgpu.ld_so_preload_path: make it if nobody did, naming libvgpu at the path it is
 * mounted at. Failing to is a warning: the containers then fail to start, loudly. */
void dp_ensure_preload_file(const struct dpconfig *cfg);

void dp_nvml_library(const struct dpconfig *cfg, char *path, size_t size);
/* dlopens soname (NULL: DP_NVML_SONAME) and calls nvmlInit_v2. Errors say which step. */
int dp_nvml_open(const char *soname, struct dp_nvml **out, struct vg_err *err);
void dp_nvml_free(struct dp_nvml *nvml);
/* A source backed by nvml (borrowed). Discovery lists MIG devices of MIG-enabled GPUs and
 * registers every GPU for XID events; health then also drains those events (without
 * waiting) and keeps a GPU that had a critical XID Unhealthy until the plugin restarts. */
struct dp_gpu_source dp_nvml_source(struct dp_nvml *nvml);
/* Tests: pause ms between making a GPU instance and its compute instance (0: none). */
void dp_nvml_set_mig_pause(uint64_t ms);

/* What marks a GPU unhealthy, as NVIDIA's plugin reads its `health` section and
 * DP_DISABLE_HEALTHCHECKS:
 *   off       health.disabled: no health checks at all, devices stay Healthy;
 *   events    health.eventTypes (DP_EVENT_*): the NVML events watched. An XID event counts
 *             by the lists below, a double-bit ECC error marks its GPU unhealthy, a
 *             single-bit one (corrected) is logged;
 *   ignored   health.ignoredXIDs (default: NVIDIA's application errors 13, 31, 43, 45, 68,
 *             109) plus the XIDs DP_DISABLE_HEALTHCHECKS lists: never critical;
 *   critical  health.criticalXIDs: every other XID (critical_all) or only these;
 *   disabled  DP_DISABLE_HEALTHCHECKS=all or xids: XID events not watched (the lost-GPU
 *             check stays). */
#define DP_XID_MAX_IGNORED 64
struct dp_xid_policy {
    bool off;
    bool disabled;
    unsigned events;
    unsigned long long ignored[DP_XID_MAX_IGNORED];
    size_t ignored_count;
    bool critical_all;
    unsigned long long critical[DP_XID_MAX_IGNORED];
    size_t critical_count;
};
/* The defaults (every event, NVIDIA's ignored XIDs, every other XID critical) plus a
 * DP_DISABLE_HEALTHCHECKS value (NULL or "": nothing more). -EINVAL for a malformed one,
 * naming the bad entry. */
int dp_xid_policy_parse(const char *value, struct dp_xid_policy *out, struct vg_err *err);
/* cfg's health section, then DP_DISABLE_HEALTHCHECKS (env_value, may be NULL) on top. */
int dp_xid_policy_from_config(const struct dpconfig *cfg, const char *env_value,
                              struct dp_xid_policy *out, struct vg_err *err);
bool dp_xid_critical(const struct dp_xid_policy *policy, unsigned long long xid);
/* Replaces the policy nvml's health uses (default: dp_xid_policy_parse(NULL)); call
 * before discovery, which registers for the policy's events. */
void dp_nvml_set_xid_policy(struct dp_nvml *nvml, const struct dp_xid_policy *policy);

/* The driver's MIG capability table (DP_MIG_MINORS_PATH): lines `<name> <minor>`, names
 * `gpu<gpu minor>/gi<id>/access`, `gpu<gpu minor>/gi<id>/ci<id>/access`, `config`,
 * `monitor`. Finds the minor of gpu/gi's access capability (ci < 0) or of gpu/gi/ci's:
 * 0 with *minor set, -ENOENT when the table has no such line, -EINVAL for a malformed
 * table (naming the line). */
#define DP_MIG_MINORS_PATH      "/proc/driver/nvidia-caps/mig-minors"
/* The driver's table lists every possible GPU, GPU instance and compute instance (about
 * 100 KiB for 32 GPUs); discovery reads it whole, up to this size. */
#define DP_MIG_MINORS_MAX_BYTES (1024 * 1024)
int dp_mig_cap_minor(const char *table, unsigned gpu_minor, unsigned gi, int ci, unsigned *minor,
                     struct vg_err *err);
/* Replaces the table's path discovery reads (tests). */
void dp_nvml_set_mig_minors_path(struct dp_nvml *nvml, const char *path);

/* NVIDIA's MIG profile name from NVML's attributes of a MIG device: `<g>g.<mem>gb`, or
 * `<c>c.<g>g.<mem>gb` when its compute instance is smaller than its GPU instance; mem is
 * the device's share of the GPU (in eighths, rounded up) times the GPU's memory in whole
 * GiB (rounded up), rounded to an integer. */
void dp_mig_profile(unsigned gi_slices, unsigned ci_slices, uint64_t mig_memory_mib,
                    uint64_t gpu_memory_bytes, char *out, size_t size);

/* ---- dynamic MIG (migdyn.c) ------------------------------------------------------------ */

/* A GPU instance a live pod's decision names (its owner). */
struct dp_mig_claim {
    char uuid[ANNOT_UUID_MAX];
    char profile[ANNOT_MIG_NAME_MAX];
    unsigned start;
    char pod[ANNOT_MIG_POD_MAX];
};
#define DP_MIG_MAX_CLAIMS (DP_MAX_GPUS * NVML_MIG_MAX_INSTANCES * 2)

/* Marks the GPUs served with dynamic MIG: vgpu.migMode dynamic, MIG mode on, and listed
 * in vgpu.migDynamicGPUs when that is not empty. */
void dp_migdyn_mark(const struct dpconfig *cfg, struct dp_gpu *gpus, unsigned count);
/* The profiles GPU g may give: all that NVML reports, or with HAMi's lists (hami not
 * NULL and hami->key set) those of the rule for g's model. -EINVAL naming the GPU and the
 * list when no rule matches its model or the rule names a profile NVML does not report
 * for it. */
int dp_migdyn_allow(struct dp_gpu *g, const struct hami_mig *hami, struct vg_err *err);
/* The claims of the decisions of pods (uid -> pod JSON) that are not finished, into
 * out[DP_MIG_MAX_CLAIMS]; how many. Garbled decisions claim nothing. */
size_t dp_migdyn_claims(json_t *pods, struct dp_mig_claim *out);
/* The inventory's `mig` object of a dynamic GPU, instances named by their owners. */
void dp_migdyn_annot(const struct dp_gpu *g, const struct dp_mig_claim *claims, size_t n_claims,
                     struct annot_mig *out);
/* Checks share (of pod uid pod) against GPU g: its profile is one g offers, its start one
 * of the profile's placements, and it overlaps no instance that another pod owns or that
 * nobody owns. 0 with *existing set to the index of the pod's own instance there (-1:
 * none, make one) and *profile to the profile, or -EINVAL with the reason in err. */
int dp_migdyn_check(const struct dp_gpu *g, const struct annot_share *share, const char *pod,
                    const struct dp_mig_claim *claims, size_t n_claims, int *existing,
                    const struct nvml_mig_profile **profile, struct vg_err *err);
/* The instances of g to destroy now: GPU instances without their compute instance, and
 * those no claim names that are owned[] (slot by start; all when owned is NULL). Their
 * indices into g->mig_instances, into out; how many. */
size_t dp_migdyn_unused(const struct dp_gpu *g, const struct dp_mig_claim *claims, size_t n_claims,
                        const bool *owned, size_t *out);
/* Appends a refusal to the node's list (the last ANNOT_MIG_REFUSED_MAX kept). */
void dp_migdyn_refused_add(struct annot_mig_refused *list, const char *uuid, const char *profile,
                           unsigned start, int64_t now, const char *reason);

/* ---- resources ---------------------------------------------------------------------- */

struct dp_device {
    char id[DP_ID_MAX];
    unsigned gpu; /* index into the plugin's GPU table */
};

/* Volcano mode's resources (volcano_plugin.h); NONE in every other mode. */
enum dp_volcano_kind { DP_VOLCANO_NONE, DP_VOLCANO_NUMBER, DP_VOLCANO_MEMORY, DP_VOLCANO_CORES };

struct dp_resource {
    char name[DPCONFIG_RESOURCE_NAME_MAX + 1]; /* "nvidia.com/gpu", "nvidia.com/gpu.shared" */
    char endpoint[96];                         /* socket file name in the kubelet directory */
    unsigned replicas;                         /* per GPU; 1: not replicated */
    bool mig;                                  /* devices are MIG devices, IDs their MIG UUIDs */
    bool fail_requests_greater_than_one;
    bool mps; /* replicas served by MPS control daemons (mps.c) */
    enum dp_volcano_kind volcano;
    struct dp_device *devices; /* owned */
    size_t device_count;
    size_t device_cap; /* allocated, at most DP_MAX_IDS */
};

struct dp_resources {
    enum annot_mode mode;
    struct dp_resource items[DP_MAX_RESOURCES];
    size_t count;
};

/* Builds what each resource advertises. vgpu mode: one resource nvidia.com/gpu with
 * deviceSplitCount devices per GPU. timeSlicing: every GPU selected by a
 * sharing.timeSlicing resource is advertised `replicas` times under its name (or rename),
 * the others under nvidia.com/gpu once. mps: the same from sharing.mps, resources marked
 * mps. MIG-enabled GPUs with flags.migStrategy single or mixed are not advertised whole:
 * their MIG devices are, once each, under nvidia.com/gpu (single: every GPU MIG-enabled,
 * every MIG device the same profile, timeSlicing mode only) or nvidia.com/mig-<profile>
 * (mixed, timeSlicing or vgpu mode); MPS on MIG devices is refused. */
int dp_resources_build(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                       struct dp_resources *out, struct vg_err *err);
void dp_resources_release(struct dp_resources *res);
/* Preferred allocation of replicas (resources with replicas > 1) by
 * flags.plugin.sharedDevicesAllocationPolicy: each pick is a replica of the GPU with the
 * fewest replicas in use (distributed: containers spread over the GPUs) or the most
 * (packed: a GPU fills up before the next is used), counting those already picked; ties
 * go to the lower GPU index. available are kubelet's candidates (taken marks those not to
 * pick, and is updated); the indices picked, at most want, go to picked. Returns how many. */
size_t dp_prefer_replicas(const struct dp_resource *r, enum dpconfig_allocation_policy policy,
                          char *const *available, size_t n_available, bool *taken, size_t want,
                          size_t *picked);
/* Appends device id (of GPU table index gpu) to r, which holds at most max. */
int dp_resource_add(struct dp_resource *r, const char *id, unsigned gpu, size_t max,
                    struct vg_err *err);
/* The GPU UUID a device ID stands for (strips `-<i>` or `::<n>`), into uuid[ANNOT_UUID_MAX]. */
int dp_physical_uuid(const char *id, char *uuid, struct vg_err *err);

/* ---- matching (vgpu mode) ---------------------------------------------------------- */

/* The MIG device dynamic MIG gave one GPU of a container (uuid "" when none). */
struct dp_match_mig {
    char uuid[NVML_MIG_UUID_MAX];
    char profile[ANNOT_MIG_NAME_MAX];
    unsigned gi, start;
    int64_t created; /* Unix seconds the instance was made (or adopted) */
};

struct dp_match {
    char pod_uid[128];
    char pod_namespace[ANNOT_NAME_MAX];
    char pod_name[ANNOT_NAME_MAX];
    struct annot_container container;
    /* The container's nvidia.com/priority from the pod's spec (priority_given): 0 high,
     * 1 low. Not given (a zeroed match): no priority key in its limits file. */
    bool priority_given;
    int priority;
    struct dp_match_mig mig[ANNOT_MAX_GPUS]; /* filled by Allocate; written to the limits
                                                file as "# mig ..." lines for vgpu top */
};

/* Tells whether a container has been allocated already (its directory exists). */
typedef bool (*dp_allocated_fn)(void *arg, const char *pod_uid, const char *container);

/* Finds the container kubelet is allocating: among pods bound to node that carry a
 * decision for node and are not finished, oldest decision first, the first container
 * not yet allocated whose GPUs are exactly uuids (when kubelet followed our preferred
 * allocation), else the first one, in decision order, asking for count GPUs. uuids may be
 * NULL (count only). -ENOENT with a message kubelet shows when nothing matches, naming any
 * garbled decision seen. */
int dp_match_container(json_t *pods, const char *node, char (*uuids)[ANNOT_UUID_MAX], size_t count,
                       dp_allocated_fn allocated, void *allocated_arg, struct dp_match *out,
                       struct vg_err *err);

/* ---- allocate ------------------------------------------------------------------------ */

#define DP_RESPONSE_MAX_ENVS        48
#define DP_RESPONSE_MAX_MOUNTS      48
/* control devices, every GPU, and two capability devices per MIG device */
#define DP_RESPONSE_MAX_DEVICES     (DP_MAX_GPUS + 4 + 2 * DP_MAX_GPUS * DP_MAX_MIGS)
#define DP_RESPONSE_MAX_ANNOTATIONS 4
/* The CDI kind of whole GPUs, as NVIDIA's plugin and `nvidia-ctk cdi generate` name them. */
#define DP_CDI_KIND                 "k8s.device-plugin.nvidia.com/gpu"

struct dp_env {
    char key[64];
    char value[1024];
};
struct dp_mount {
    char container_path[512];
    char host_path[512];
    bool read_only;
};
struct dp_device_spec {
    char container_path[64];
    char host_path[64];
    char permissions[4];
};

/* Container annotation for the runtime (cdi-annotations). */
struct dp_annotation {
    char key[256];
    char value[2048];
};
/* Fully qualified CDI device name for the CRI (cdi-cri). */
struct dp_cdi_device {
    char name[128];
};

struct dp_response {
    struct dp_env envs[DP_RESPONSE_MAX_ENVS];
    size_t env_count;
    struct dp_mount mounts[DP_RESPONSE_MAX_MOUNTS];
    size_t mount_count;
    struct dp_device_spec devices[DP_RESPONSE_MAX_DEVICES];
    size_t device_count;
    struct dp_annotation annotations[DP_RESPONSE_MAX_ANNOTATIONS];
    size_t annotation_count;
    struct dp_cdi_device cdi_devices[DP_MAX_GPUS];
    size_t cdi_device_count;
};

/* Empties r (its counts; entries are written whole when added). */
void dp_response_reset(struct dp_response *r);

/* timeSlicing (or plain) Allocate: NVIDIA's semantics, no enforcement. ids are kubelet's
 * device IDs of resource. */
int dp_allocate_shared(const struct dpconfig *cfg, const struct dp_resource *resource,
                       const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                       size_t id_count, struct dp_response *out, struct vg_err *err);

/* Allocate of MIG devices (resource->mig): NVIDIA_VISIBLE_DEVICES with the MIG UUIDs (or
 * `<gpu>:<mig>` with deviceIDStrategy index), volume mounts with the volume-mounts
 * strategy, the control devices, the parent GPU's /dev/nvidia<minor> and the MIG
 * device's two capability devices (when known) with passDeviceSpecs. dp_allocate_shared
 * hands MIG resources here. */
int dp_allocate_mig(const struct dpconfig *cfg, const struct dp_resource *resource,
                    const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                    size_t id_count, struct dp_response *out, struct vg_err *err);
/* Whether vgpu mode splits this GPU: not a MIG-enabled GPU whose MIG devices are
 * advertised (migStrategy single/mixed); those stay out of nvidia.com/gpu and of the
 * inventory the scheduler places on. A dynamic MIG GPU is split (its containers get the
 * instances made for them). */
bool dp_gpu_split(const struct dpconfig *cfg, const struct dp_gpu *gpu);

/* vgpu Allocate for a matched container: the response for the container directory
 * container_dir (see dp_container_dir_create). */
int dp_allocate_vgpu(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned gpu_count,
                     const struct dp_match *match, const char *container_dir,
                     struct dp_response *out, struct vg_err *err);

/* ---- the response builder (response.c) -------------------------------------------- */

/* Where IMEX channel device nodes live (NVIDIA's driver creates channel<N> there). */
#define DP_IMEX_CHANNEL_DIR "/dev/nvidia-caps-imex-channels"

/* root + path into out[size] without a doubled slash ("/" + "/dev/x" is "/dev/x");
 * -ENAMETOOLONG when it does not fit. */
int dp_root_path(const char *root, const char *path, char *out, size_t size);
/* The host's root of the device nodes: flags.nvidiaDevRoot, else flags.nvidiaDriverRoot. */
const char *dp_dev_root(const struct dpconfig *cfg);

/* Where the plugin itself finds the node's device nodes: flags.plugin.containerDriverRoot
 * when it has a `dev` directory (the driver root mounted into the plugin's container),
 * else "/". */
const char *dp_container_dev_root(const struct dpconfig *cfg);
/* imex.channelIDs against the node, at start (NVIDIA's rule): a channel whose device node
 * (DP_IMEX_CHANNEL_DIR/channel<N> under dp_container_dev_root) does not exist fails the
 * start with imex.required, else it is dropped from cfg with a warning (containers then
 * get no IMEX channel). */
int dp_imex_check(struct dpconfig *cfg, struct vg_err *err);

/* What every mode returns for GPUs gpu_list[0..n) (GPU table indices, de-duplicated, in
 * order), as NVIDIA's getAllocateResponse: the visible devices by deviceListStrategy
 * (every strategy of the list, combined) and deviceIDStrategy, device specs when
 * passDeviceSpecs (not with CDI strategies only: the CDI specification carries the device
 * nodes), IMEX channels. */
int dp_response_for_gpus(const struct dpconfig *cfg, const struct dp_gpu *gpus,
                         const unsigned *gpu_list, size_t n, struct dp_response *out,
                         struct vg_err *err);

/* One device spec: path inside the container, dp_dev_root + path on the host, "rw"; a
 * path already there is not added twice. -ENOSPC when full. */
int dp_response_add_device(const struct dpconfig *cfg, struct dp_response *r, const char *path,
                           struct vg_err *err);
/* The control devices (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) and
 * /dev/nvidia<minor>. */
int dp_response_add_gpu_nodes(const struct dpconfig *cfg, struct dp_response *r, unsigned minor,
                              struct vg_err *err);

/* Adds (or replaces) one env; appends one mount. -ENOSPC when full or too long. */
int dp_response_add_env(struct dp_response *r, const char *key, const char *value,
                        struct vg_err *err);
int dp_response_add_mount(struct dp_response *r, const char *container_path, const char *host_path,
                          bool read_only, struct vg_err *err);

/* Lists one device ID for the container: appends it to visible (size bytes, *used of them
 * used; comma-separated) and, with the volume-mounts list strategy, mounts /dev/null at
 * /var/run/nvidia-container-devices/<id> as NVIDIA's plugin does. */
int dp_response_list_id(const struct dpconfig *cfg, struct dp_response *r, char *visible,
                        size_t size, size_t *used, const char *id, struct vg_err *err);

/* NVIDIA_VISIBLE_DEVICES for the device list strategy (the ids, or the volume-mounts
 * directory), the GDS, MOFED and GDRCOPY switches of flags, and the IMEX channels of
 * imex.channelIDs (NVIDIA_IMEX_CHANNELS, their device nodes with passDeviceSpecs). */
int dp_response_add_visible(const struct dpconfig *cfg, const char *visible,
                            struct dp_response *out, struct vg_err *err);

/* Canonical text form, sorted envs: what golden tests compare. */
void dp_response_dump(const struct dp_response *resp, FILE *out);
/* Serialises one or more container responses as an AllocateResponse (malloc'ed). */
int dp_response_pack(const struct dp_response *const *resps, size_t count, uint8_t **data,
                     size_t *len, struct vg_err *err);

/* <region_dir>/<pod uid>_<container>, into path[size]; -EINVAL unless the uid is a pod uid
 * and the container an RFC 1123 label (annot_pod_uid, annot_dns_label). */
int dp_container_dir_path(const char *region_dir, const char *pod_uid, const char *container,
                          char *path, size_t size, struct vg_err *err);
/* The container directory's read-only subdirectory mounted at /etc/vgpu (limits file and
 * its generation; allocate.c). */
#define DP_LIMITS_DIR "etc"
/* Applies a new decision of an allocated container (a live resize): rewrites dir's
 * limits file for match at generation (by rename; untouched when the text is the same)
 * and then raises its generation to it, so that every process of the container reads it
 * again; the container's share on its GPUs' compute boards is set in between
 * (dp_board_share_set). The decision must name the GPUs the container has. 1 when something
 * changed, 0 when the container already had it (or a later generation). */
int dp_container_limits_update(const struct dpconfig *cfg, const struct dp_match *match,
                               const char *dir, uint64_t generation, struct vg_err *err);
/* Where dp_container_dir_create fills a directory before renaming it into place. */
#define DP_STAGE_PREFIX ".new."
/* Where dp_container_dir_prepare keeps a directory filled ahead of Allocate. */
#define DP_READY_PREFIX ".ready."
/* Creates the container directory (0755) with the shared region ("region", 0666) and the
 * limits file ("limits", 0444) for match, so that it appears complete or not at all:
 * renames the directory dp_container_dir_prepare made when prepared is true (and it is
 * there), otherwise fills <region_dir>/.new.<name> and renames that. Fails if dir exists.
 * On failure nothing is left behind. */
int dp_container_dir_create(const struct dpconfig *cfg, const struct dp_match *match,
                            const char *dir, bool prepared, struct vg_err *err);
/* dp_container_dir_create, then the container's files on the compute board
 * (dp_board_create); nothing is left behind on failure. */
int dp_container_create(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                        bool prepared, struct vg_err *err);
/* The compute board's files for the container of directory dir (docs/compute.md): for each
 * GPU it has a share of (or every GPU when its pod names a priority), <board>/<uuid>/ (0755), the
 * GPU's turn file <board>/<uuid>.board (kept when there) and the container's slot file
 * <board>/<uuid>/<name>.<percent>.slot (made new), both 0666: the container writes them through its
 * writable mounts only. */
int dp_board_create(const struct dpconfig *cfg, const struct dp_match *match, const char *dir,
                    struct vg_err *err);
/* The turn file and the slot file of container name on GPU uuid, each into size bytes;
 * high: its slot file says high priority (<name>.<percent>.high.slot). */
int dp_board_paths(const char *board, const char *uuid, const char *name, unsigned cores, bool high,
                   char *turn, char *slot, size_t size, struct vg_err *err);
/* The share a container's slot file names on a GPU (cores, 100 when it has none but a
 * priority), 0 when it takes no part in the compute board there. */
unsigned dp_board_cores(const struct dpconfig *cfg, const struct dp_match *match, unsigned gpu);
/* Sets the share of container name on GPU uuid's board after a live resize: the link
 * <board>/<uuid>/<name>.share -> "<cores>" (1..100; libvgpu's vgc_share_link_parse),
 * replaced atomically by rename (docs/compute.md "A resized share"). */
int dp_board_share_set(const char *board, const char *uuid, const char *name, unsigned cores,
                       struct vg_err *err);
/* Removes the slot files of pods not in live_uids (NULL-terminated); how many. */
int dp_board_sweep(const char *board, const char *const *live_uids);
/* Fills <region_dir>/.ready.<name> (staged, then renamed) for match ahead of its Allocate
 * (replacing one made for an earlier decision), its text naming dir. The caller remembers for which
 * match (dp_match_digest) and passes prepared to dp_container_dir_create only for that one. */
int dp_container_dir_prepare(const struct dpconfig *cfg, const struct dp_match *match,
                             const char *dir, struct vg_err *err);
/* A digest of everything a container directory is made from. */
uint64_t dp_match_digest(const struct dp_match *match);
/* Removes every `<uid>_<name>` and `.ready.<uid>_<name>` directory under region_dir whose
 * uid is not in live_uids (NULL-terminated), and every `.new.*` one a killed plugin left
 * half made (the plugin never sweeps during an Allocate). Returns how many were removed, or a
 * negative code. */
int dp_container_dirs_sweep(const char *region_dir, const char *const *live_uids,
                            struct vg_err *err);
/* Removes one container directory and its files. */
int dp_container_dir_remove(const char *dir, struct vg_err *err);

/* ---- inventory ---------------------------------------------------------------------- */

/* The node annotation's value for these GPUs (after memory and core scaling). */
void dp_inventory(const struct dpconfig *cfg, enum annot_mode mode, const struct dp_gpu *gpus,
                  unsigned gpu_count, int64_t now, struct annot_inventory *out);
/* Fills out->held (held.c): the time each container directory under region_dir
 * (`<pod uid>_<container>`) was held behind high priority on each of out's GPUs, read
 * from its region as vgpu-monitor reads it, in whole seconds clamped to
 * ANNOT_HELD_SECONDS_MAX; the ANNOT_HELD_MAX most-held. None when the directory cannot be
 * read. Display only: the region is the tenant's to write. */
void dp_held_collect(const char *region_dir, struct annot_inventory *out);

/* ---- MPS (mps.c) --------------------------------------------------------------------- */

/* Where a GPU's control daemon keeps its pipes and log, on the host:
 * <flags.mpsRoot>/<resource>/<uuid>/{pipe,log}; into pipe[size] and log[size]. */
int dp_mps_dirs(const struct dpconfig *cfg, const char *resource, const char *uuid, char *pipe,
                char *log, size_t size, struct vg_err *err);
#define DP_MPS_CONTAINER_ROOT "/mps"
#define DP_MPS_PID_FILE       "nvidia-cuda-mps-control.pid"

/* The answer to get_default_active_thread_percentage ("25", "33.0\n"): a number from 0
 * to 100, integer part into *out. */
int dp_mps_parse_percentage(const char *text, size_t len, unsigned *out, struct vg_err *err);

/* MPS Allocate: the timeSlicing response for ids, plus what a client of the GPU's control
 * daemon needs: CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY (the GPU's directories as
 * mounted under /mps/<resource>/), CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = n * 100 / replicas
 * and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = `0=<n * memory / replicas>M` for n replicas of the
 * GPU, mounts of the pipe directory (rw), the log directory (ro) and <mpsRoot>/shm as
 * /dev/shm. Replicas of two GPUs in one request are refused (a client talks to one
 * daemon). */
int dp_allocate_mps(const struct dpconfig *cfg, const struct dp_resource *resource,
                    const struct dp_gpu *gpus, unsigned gpu_count, char *const *ids,
                    size_t id_count, struct dp_response *out, struct vg_err *err);

struct event_base;
struct dp_mps;
struct dp_mps_options {
    uint64_t check_interval_ms;  /* 0: 5000; health query of a running daemon */
    uint64_t backoff_min_ms;     /* 0: 1000; first restart delay, doubled per failure */
    uint64_t backoff_max_ms;     /* 0: 60000 */
    uint64_t command_timeout_ms; /* 0: 10000; a control command running longer is killed */
    void (*changed)(void *arg);  /* a GPU's daemon came up or went down */
    void *arg;
};
struct dp_mps_stats {
    uint64_t starts;   /* `-d` runs that succeeded */
    uint64_t adopted;  /* daemons found running and taken over */
    uint64_t failures; /* daemons found dead or failing (each leads to a restart) */
};

/* Starts managing one control daemon per GPU of every mps resource of res (GPU table
 * gpus, borrowed like cfg and res): adopts a daemon already answering in the GPU's pipe
 * directory, or starts `<vgpu.mpsControlPath> -d` with CUDA_VISIBLE_DEVICES=<uuid>, then
 * sends the per-GPU defaults, checks it answers, watches its pid and queries it every
 * check interval; a daemon that dies or stops answering is restarted with backoff. All
 * asynchronous on base. *out is NULL (and 0 returned) when no resource is mps. */
int dp_mps_new(struct event_base *base, const struct dpconfig *cfg, const struct dp_gpu *gpus,
               unsigned gpu_count, const struct dp_resources *res,
               const struct dp_mps_options *options, struct dp_mps **out, struct vg_err *err);
/* True when GPU gpu (table index) needs no daemon or its daemon is up. NULL: true. */
bool dp_mps_ready(const struct dp_mps *mps, unsigned gpu);
void dp_mps_get_stats(const struct dp_mps *mps, struct dp_mps_stats *stats);
/* Sends `quit` to every daemon and waits (a few seconds at most) for them to exit;
 * blocking, meant for shutdown. NULL is a no-op. */
void dp_mps_free(struct dp_mps *mps);

/* ---- the daemon ------------------------------------------------------------------------ */

struct kube_client;
struct dp_plugin;

struct dp_plugin_options {
    struct dp_gpu_source source;
    struct kube_client *kube;    /* borrowed; NULL: no pod watch, no inventory */
    uint64_t health_interval_ms; /* 0: 5000 */
    uint64_t heartbeat_ms;       /* 0: 30000 */
    uint64_t sweep_interval_ms;  /* 0: 60000 */
    uint64_t register_retry_ms;  /* 0: 5000 */
    uint64_t mps_backoff_ms;     /* 0: 1000; first delay before an MPS daemon is restarted */
    /* flags.restartOnDeviceUnhealthy: called (once) when a GPU turns unhealthy; the caller
     * restarts the plugin. NULL: the flag is refused by dp_plugin_new. */
    void (*restart)(void *arg);
    void *restart_arg;
    const struct hami_mig *hami_mig; /* HAMi's MIG profile lists; NULL: none (borrowed) */
};

/* Discovers GPUs (honouring flags.failOnInitError: a failure then is an error, otherwise
 * the plugin serves no devices), builds resources, listens on every resource's socket in
 * cfg->cli.kubelet_dir and registers. A missing kubelet.sock is logged and retried; the
 * plugin re-registers whenever kubelet.sock is created again. cfg is borrowed. */
int dp_plugin_new(struct event_base *base, const struct dpconfig *cfg,
                  const struct dp_plugin_options *options, struct dp_plugin **out,
                  struct vg_err *err);
void dp_plugin_free(struct dp_plugin *plugin);

struct dp_plugin_stats {
    uint64_t registrations; /* successful Register calls */
    uint64_t allocations;   /* successful Allocate calls */
    uint64_t allocate_errors;
    uint64_t health_changes;
    uint64_t inventory_writes;
    uint64_t swept_dirs;
    uint64_t lookups; /* direct pod lookups after a pod cache miss */
    uint64_t resizes; /* containers whose limits a new decision changed (live resize) */
    uint64_t resize_errors;
};
void dp_plugin_get_stats(const struct dp_plugin *plugin, struct dp_plugin_stats *stats);
/* Polls health now (tests, benchmarks). */
void dp_plugin_poll_health(struct dp_plugin *plugin);

#endif
