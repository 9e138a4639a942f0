/* vgpu-dra-plugin's library: the node side of vgpu's Dynamic Resource Allocation driver.
 *
 *   claim       a resource.k8s.io/v1 ResourceClaim's allocation results for this driver
 *               (request, pool, device, shareID, consumedCapacity), decoded and checked;
 *   checkpoint  the prepared claims, a JSON file under the state directory with the node's
 *               boot ID, written atomically after every change;
 *   prepare     a claim's files: per request a directory made by the device plugin's vgpu
 *               mode (shared region, read-only limits file, compute slots; deviceplugin.h)
 *               and one CDI spec file naming one CDI device per request; and their
 *               removal;
 *   plugin      the daemon on one libevent loop: the registration socket kubelet's plugin
 *               watcher finds, the DRA service (v1 and v1beta1) and the API lookups.
 *
 * docs/dra.md is the design note. Threads: none; every call runs on the loop. */
#ifndef VGPU_DRA_DRA_H
#define VGPU_DRA_DRA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "annot/annot.h"
#include "base/err.h"
#include "deviceplugin/deviceplugin.h"

#define DRA_DRIVER_DEFAULT "gpu.vgpu.io"
/* CDI kind of the devices vgpu's plugin prepares: vendor vgpu.io, class gpu. */
#define DRA_CDI_VENDOR     "vgpu.io"
#define DRA_CDI_CLASS      "gpu"
#define DRA_CDI_KIND       DRA_CDI_VENDOR "/" DRA_CDI_CLASS
/* The oldest CDI version with every field the specs use (deviceNodes[].hostPath). */
#define DRA_CDI_VERSION    "0.5.0"
/* A device of the node's ResourceSlice: "gpu-<NVML index>". */
#define DRA_DEVICE_PREFIX  "gpu-"

#define DRA_MAX_RESULTS          32  /* devices of one claim for this driver */
#define DRA_REQUEST_MAX          128 /* "<request>" or "<request>/<subrequest>", DNS labels */
#define DRA_UID_MAX              64
#define DRA_SHARE_MAX            64
#define DRA_CDI_ID_MAX           256
/* Ceilings on what is read (docs/style.md §4). */
#define DRA_CLAIM_MAX_BYTES      (4u << 20)
#define DRA_CHECKPOINT_MAX_BYTES (16u << 20)
#define DRA_BOOT_ID_PATH         "/proc/sys/kernel/random/boot_id"

/* ---- claim --------------------------------------------------------------------------- */

struct dra_result {
    char request[DRA_REQUEST_MAX];
    char pool[ANNOT_NAME_MAX];
    char device[ANNOT_LABEL_MAX + 1];
    char share_id[DRA_SHARE_MAX]; /* "" when the device is not shared */
    bool has_memory, has_cores;   /* consumedCapacity named memory / cores */
    uint64_t memory_mib;          /* consumedCapacity memory, rounded up to MiB */
    unsigned cores;               /* consumedCapacity cores, percent 0..100 */
};

struct dra_claim {
    char uid[DRA_UID_MAX];
    char ns[ANNOT_LABEL_MAX + 1];
    char name[ANNOT_NAME_MAX];
    unsigned count; /* results for this driver */
    struct dra_result results[DRA_MAX_RESULTS];
};

/* Decodes a ResourceClaim object: metadata (uid, namespace, name) and the results of
 * status.allocation.devices.results[] whose driver is `driver` (others are skipped).
 * -EINVAL naming the field for anything malformed; -ENODATA when the claim is not
 * allocated. consumedCapacity memory is a Kubernetes quantity of bytes ("10Gi",
 * "10737418240"), cores a whole percentage 0..100. */
int dra_claim_decode(json_t *claim, const char *driver, struct dra_claim *out, struct vg_err *err);
/* The same from JSON text (fuzz target, tests). */
int dra_claim_decode_text(const char *text, size_t len, const char *driver, struct dra_claim *out,
                          struct vg_err *err);
/* A quantity of bytes as MiB, rounded up: plain integers and the suffixes k M G T P E
 * (powers of 1000) and Ki Mi Gi Ti Pi Ei (powers of 1024). */
int dra_parse_bytes_mib(const char *s, uint64_t *mib, struct vg_err *err);

/* ---- checkpoint ------------------------------------------------------------------------ */

/* One request of a prepared claim: its directory and CDI device. */
struct dra_group {
    char name[ANNOT_LABEL_MAX + 1];   /* the request (its parent for a subrequest) */
    struct annot_container container; /* name = the group name, the GPUs and their shares */
};

struct dra_device {
    char request[DRA_REQUEST_MAX];
    char pool[ANNOT_NAME_MAX];
    char device[ANNOT_LABEL_MAX + 1];
    char share_id[DRA_SHARE_MAX];
    char cdi_id[DRA_CDI_ID_MAX];
};

struct dra_prepared {
    char uid[DRA_UID_MAX];
    char ns[ANNOT_LABEL_MAX + 1];
    char name[ANNOT_NAME_MAX];
    unsigned group_count;
    struct dra_group groups[DRA_MAX_RESULTS];
    unsigned device_count;
    struct dra_device devices[DRA_MAX_RESULTS];
};

struct dra_checkpoint {
    char boot_id[64];
    size_t count, cap;
    struct dra_prepared **claims; /* owned, each on its own */
    char **texts; /* owned, parallel to claims: each claim's JSON once encoded, or NULL */
};

void dra_checkpoint_release(struct dra_checkpoint *cp);
/* Copies the used part of src (names, the groups and devices counted) into dst. */
void dra_prepared_copy(struct dra_prepared *dst, const struct dra_prepared *src);
struct dra_prepared *dra_checkpoint_find(struct dra_checkpoint *cp, const char *uid);
/* Adds (or replaces) a claim. */
void dra_checkpoint_put(struct dra_checkpoint *cp, const struct dra_prepared *p);
void dra_checkpoint_remove(struct dra_checkpoint *cp, const char *uid);
/* Decodes checkpoint text; -EINVAL naming what is wrong. */
int dra_checkpoint_decode(const char *text, size_t len, struct dra_checkpoint *out,
                          struct vg_err *err);
/* The JSON text (malloc'ed, NUL-terminated). Each claim is encoded once and its text
 * kept (cp is const for its claims, not for that cache): a save costs a copy per claim,
 * not an encoding. */
char *dra_checkpoint_encode(const struct dra_checkpoint *cp);
/* Reads path (a missing file is an empty checkpoint, boot_id ""). */
int dra_checkpoint_load(const char *path, struct dra_checkpoint *out, struct vg_err *err);
/* Writes path atomically (path.tmp, fsync, rename). */
int dra_checkpoint_save(const char *path, const struct dra_checkpoint *cp, struct vg_err *err);
/* The node's boot ID from path (NULL: DRA_BOOT_ID_PATH), into out[size]. */
int dra_boot_id(const char *path, char *out, size_t size, struct vg_err *err);

/* ---- prepare ---------------------------------------------------------------------------- */

struct dra_node {
    const struct dpconfig *cfg; /* vgpu.regionDir is where the claim directories go */
    const struct dp_gpu *gpus;
    unsigned gpu_count;
    const char *node_name; /* the pool of the node's devices */
    const char *cdi_dir;
};

/* Prepares claim on node: groups its results by request, maps each device (pool = node
 * name, name gpu-<index>) to a GPU and its share (consumedCapacity, else the whole GPU),
 * makes each group's directory (dp_container_create: region, limits, compute slots) and
 * the claim's CDI spec file, and fills out (uid, namespace, name, groups, devices with
 * their CDI IDs). Files of an earlier half-made attempt for the claim are replaced. On
 * failure nothing is left behind. */
int dra_prepare(const struct dra_node *node, const struct dra_claim *claim,
                struct dra_prepared *out, struct vg_err *err);
/* Removes what dra_prepare made for claim uid: its CDI spec file, its compute slots and
 * its directories <regionDir>/<uid>_<request> as p records them (p NULL when the
 * checkpoint has no record: the CDI spec file and every <uid>_* directory, found by a
 * scan). Nothing there is not an error. */
int dra_unprepare(const struct dra_node *node, const char *uid, const struct dra_prepared *p,
                  struct vg_err *err);
/* Removes what a plugin that died between making a claim's files and checkpointing it
 * left: claim directories (and dp's staging directories) and CDI spec files (and their
 * .tmp) of claims cp does not hold, and those claims' slot files on the compute board.
 * *removed counts the directories and files. One that cannot be removed does not stop
 * the others; the first such error is returned. Run at start, before any prepare. */
int dra_sweep_orphans(const struct dra_node *node, const struct dra_checkpoint *cp,
                      unsigned *removed, struct vg_err *err);
/* <cdi_dir>/vgpu.io-gpu_<uid>.json into out[size]. */
int dra_cdi_spec_path(const char *cdi_dir, const char *uid, char *out, size_t size,
                      struct vg_err *err);
/* The CDI spec for p (JSON object, owned by the caller). */
json_t *dra_cdi_spec(const struct dra_node *node, const struct dra_prepared *p, struct vg_err *err);

/* ---- the daemon --------------------------------------------------------------------------- */

struct event_base;
struct kube_client;
struct dra_plugin;

enum { DRA_TAINTS_AUTO = 0, DRA_TAINTS_ON = 1, DRA_TAINTS_OFF = 2 };
struct dra_health_monitor;
struct dra_mig;

struct dra_plugin_options {
    const struct dpconfig *cfg; /* borrowed */
    const struct dp_gpu *gpus;  /* borrowed */
    unsigned gpu_count;
    struct kube_client *kube; /* borrowed; required */
    const char *driver;       /* NULL: DRA_DRIVER_DEFAULT */
    const char *node_name;
    const char *kubelet_dir; /* registration: <dir>/plugins_registry/<driver>-reg.sock,
                                service: <dir>/plugins/<driver>/dra.sock */
    const char *cdi_dir;
    const char *state_dir;    /* checkpoint.json */
    const char *boot_id_path; /* NULL: DRA_BOOT_ID_PATH */
    uint64_t socket_check_ms; /* 0: 5000; a registration socket removed is served again */
    /* ResourceSlices (slices.h): with publish, the node's pool is published through kube
     * at start and again whenever a GPU's health changes. */
    bool publish;
    bool consumable;             /* consumable capacity: GPUs shared by amount */
    const char *driver_version;  /* NVML's system driver version, or NULL */
    struct dp_gpu_source source; /* healthy() polled; NULL healthy: never polled */
    /* Health as device taints (health.h): polled instead of source.healthy when set
     * (borrowed). */
    struct dra_health_monitor *health;
    /* Taints in the slices: DRA_TAINTS_AUTO (the API server's /version says 1.36 or
     * later, where DRADeviceTaints is on by default), _ON, _OFF (unhealthy GPUs left
     * out, as before 1.36). */
    int device_taints;
    /* MIG on demand (mig.h; borrowed, NULL: MIG GPUs served statically): every GPU in
     * MIG mode is published as partitions when the API server is 1.36 or later, and an
     * allocated partition's instance is made in NodePrepareResources. */
    struct dra_mig *mig;
    uint64_t mig_gi_pause_ms;    /* tests: a pause after the GPU instance is made */
    uint64_t health_interval_ms; /* 0: 5000 */
    uint64_t resync_ms;          /* 0: 600000; the slices compared with the API server's */
};

struct dra_plugin_stats {
    uint64_t registrations; /* NotifyRegistrationStatus with plugin_registered */
    uint64_t prepared, unprepared, errors;
    uint64_t health_changes;  /* GPUs that turned unhealthy or healthy again */
    uint64_t slice_syncs;     /* completed ResourceSlice publications */
    int64_t slice_generation; /* the pool generation last published */
    bool taints;              /* the slices carry device taints */
    uint64_t health_streams;  /* NodeWatchResources streams open now */
    uint64_t health_sends;    /* device health lists sent on them */
    bool partitionable;       /* dynamic MIG GPUs published as partitions */
    uint64_t instances_made, instances_destroyed;
};

/* "1.36" style server versions: true when (major, minor) is at least 1.36, where
 * DRADeviceTaints is beta and on by default. -EINVAL for a /version body that says no
 * version (major and minor, digits with an optional "+" as providers add). */
int dra_version_has_taints(const json_t *version, bool *taints, struct vg_err *err);

int dra_plugin_new(struct event_base *base, const struct dra_plugin_options *options,
                   struct dra_plugin **out, struct vg_err *err);
/* Frees the plugin at once, including calls waiting for the API. Requests it has out
 * through the kube client point into it: free the client before the loop runs again
 * (kube_client_free cancels them without calling back). */
void dra_plugin_free(struct dra_plugin *plugin);
/* Polls the GPUs' health now; a change republishes the slices (tests, benchmarks). */
void dra_plugin_poll_health(struct dra_plugin *plugin);
void dra_plugin_get_stats(const struct dra_plugin *plugin, struct dra_plugin_stats *stats);

/* gRPC paths. */
#define DRA_REG_GET_INFO    "/pluginregistration.Registration/GetInfo"
#define DRA_REG_NOTIFY      "/pluginregistration.Registration/NotifyRegistrationStatus"
#define DRA_V1_SERVICE      "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
#define DRA_V1BETA1_SERVICE "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/"
#define DRA_PLUGIN_TYPE     "DRAPlugin"
/* KEP-4680's health service: listed in the registration's supported services, so kubelet
 * opens the stream. */
#define DRA_HEALTH_SERVICE  "v1alpha1.DRAResourceHealth"
#define DRA_HEALTH_WATCH    "/" DRA_HEALTH_SERVICE "/NodeWatchResources"

#endif
