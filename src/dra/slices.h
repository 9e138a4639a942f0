/* ResourceSlices of vgpu's DRA driver (resource.k8s.io/v1): what a node's GPUs look like
 * to kube-scheduler's DynamicResources plugin, and their publication.
 *
 *   build     the node's slices as JSON from the GPU inventory (struct dp_gpu, the device
 *             plugin's NVML discovery): one device per healthy GPU, or per MIG device of a
 *             MIG-enabled GPU; attributes named as NVIDIA's DRA driver names them where
 *             they overlap, capacities `memory` (bytes) and `cores` (percent); with
 *             consumable capacity each GPU allows several allocations, each taking an
 *             amount of memory (256 MiB steps) and cores (1 % steps); without, devices
 *             are allocated whole. The API's limits hold by construction: at most
 *             DRA_SLICE_MAX_DEVICES devices per slice (more make several slices of one
 *             pool), at most 32 attributes and capacities per device, device names DNS
 *             labels.
 *   decode    the slices of this node and driver already in the API server (a list
 *             response), for the publisher: names, resourceVersions, pool generation.
 *   publish   create/update/delete through src/kube until the API server holds exactly
 *             the built slices; the pool generation is bumped whenever their content
 *             changes; a 409 Conflict re-reads and retries.
 *
 * docs/dra.md describes the objects. Ownership: JSON returned through out-parameters is
 * owned by the caller (json_decref). */
#ifndef VGPU_DRA_SLICES_H
#define VGPU_DRA_SLICES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/err.h"
#include "deviceplugin/deviceplugin.h"
#include "dra/health.h"
#include "dra/mig.h"

#define DRA_DRIVER_NAME         "gpu.vgpu.io"
#define DRA_API_PATH            "/apis/resource.k8s.io/v1"
#define DRA_SLICE_MAX_DEVICES   128 /* ResourceSliceMaxDevices */
#define DRA_DEVICE_MAX_ATTRS    32  /* attributes + capacities per device */
#define DRA_ATTR_MAX_VALUE      64  /* string and version attribute values */
#define DRA_DEFAULT_MEMORY_STEP (256ull << 20)
#define DRA_NAME_MAX            254 /* object names: DNS subdomain, 253 + NUL */
#define DRA_DEVICE_NAME_MAX     64  /* DNS label, 63 + NUL */

struct dra_slice_options {
    const char *driver;         /* NULL: DRA_DRIVER_NAME */
    const char *node_name;      /* pool name and spec.nodeName; required */
    const char *node_uid;       /* the Node's uid for an ownerReference, or NULL/"" */
    const char *driver_version; /* NVML's system driver version ("550.54.15"), or NULL */
    bool consumable;            /* consumable capacity (DRAConsumableCapacity) */
    int64_t generation;         /* spec.pool.generation of every slice */
    unsigned max_devices;       /* per slice; 0 = DRA_SLICE_MAX_DEVICES (tests use less) */
    uint64_t memory_step;       /* bytes; 0 = DRA_DEFAULT_MEMORY_STEP */
    /* GPU health (health.h), parallel to gpus, or NULL. With taints (the API server has
     * DRADeviceTaints: Kubernetes 1.36 and later) every GPU is listed and an unhealthy
     * one's devices carry its taints; without, GPUs whose healthy is false are left out,
     * as a server that drops the taints field would otherwise offer them. */
    const struct dra_gpu_health *health;
    bool taints;
    /* MIG on demand (mig.h), parallel to gpus, or NULL. With partitionable (the API server
     * has DRAPartitionableDevices: 1.36 and later) a dynamic GPU is published as a counter
     * set (memory-slice-<i>, multiprocessors, memory) in a slice of its own, the whole GPU
     * consuming all of it and one device per (profile, placement) consuming its part;
     * without, it is published as its MIG devices that exist, as a static one. */
    const struct dra_mig_gpu *migs;
    bool partitionable;
};
/* Counter sets per slice (ResourceSliceMaxCounterSets). */
#define DRA_SLICE_MAX_COUNTER_SETS 8
/* Devices per slice when one of them has taints
 * (ResourceSliceMaxDevicesWithTaintsOrConsumesCounters). */
#define DRA_SLICE_MAX_TAINTED      64

/* The node's slices: a JSON array of ResourceSlice objects (apiVersion, kind,
 * metadata.name "<node>-<driver>-<i>", spec), at least one (an empty pool still says it
 * has no devices). Unhealthy GPUs are tainted or left out (options.taints). Errors: -EINVAL for
 * options or inventory the API would refuse (a missing or invalid node name, a driver name that is
 * not a DNS subdomain), with the reason. */
int dra_slices_build(const struct dra_slice_options *options, const struct dp_gpu *gpus,
                     unsigned gpu_count, json_t **out, struct vg_err *err);

/* The device name of a GPU ("gpu-<minor>") or of a MIG device
 * ("gpu-<minor>-mig-<gi>-<ci>") into name[DRA_DEVICE_NAME_MAX]. */
void dra_gpu_device_name(const struct dp_gpu *gpu, const struct dp_mig *mig, char *name);

/* A version as a semantic version 2.0.0 (attributes of type version): up to three
 * numeric components, leading zeros dropped, missing ones 0 ("535.104.05" -> "535.104.5",
 * "12.4" -> "12.4.0"). -EINVAL for anything else. */
int dra_semver(const char *text, char *out, size_t size, struct vg_err *err);

/* NVIDIA's architecture name for a CUDA compute capability ("Ampere" for 8.0), or NULL. */
const char *dra_architecture(int cc_major, int cc_minor);

/* ---- decode ------------------------------------------------------------------------- */

#define DRA_MAX_SLICES 64

struct dra_pool_slice {
    char name[DRA_NAME_MAX];
    char resource_version[32];
    int64_t generation;
};

struct dra_pool {
    struct dra_pool_slice slices[DRA_MAX_SLICES];
    size_t count;
    int64_t max_generation; /* the highest spec.pool.generation seen; -1 when none */
};

/* The slices of (driver, node) in a ResourceSliceList body (other drivers' and nodes'
 * items are skipped). -EBADMSG for a body that is not a list of objects or an item of
 * ours without a name, resourceVersion or generation; -E2BIG past DRA_MAX_SLICES. */
int dra_pool_decode(const json_t *list, const char *driver, const char *node, struct dra_pool *pool,
                    struct vg_err *err);

/* True when the two slice arrays differ in anything but spec.pool.generation and
 * metadata the API server owns (resourceVersion, uid, generation, creationTimestamp...). */
bool dra_slices_differ(const json_t *a, const json_t *b);

/* ---- publish ------------------------------------------------------------------------ */

struct kube_client;
struct event_base;
struct dra_publisher;

struct dra_publisher_stats {
    uint64_t syncs;     /* completed syncs (the API server matched the wanted slices) */
    uint64_t writes;    /* creates, updates and deletes sent */
    uint64_t conflicts; /* 409s answered, each followed by a re-read */
    uint64_t failures;  /* other errors, each retried after a backoff */
};

/* A publisher of one node's slices through client (borrowed). driver NULL: the default.
 * done (may be NULL) is called after each completed sync. */
int dra_publisher_new(struct event_base *base, struct kube_client *client, const char *driver,
                      const char *node, void (*done)(void *arg), void *arg,
                      struct dra_publisher **out, struct vg_err *err);
void dra_publisher_free(struct dra_publisher *publisher);
/* Frees the publisher at once, even with a request out: for a client that is freed
 * before the loop runs again (kube_client_free cancels without calling back), where
 * dra_publisher_free would leave it to a callback that never comes. */
void dra_publisher_destroy(struct dra_publisher *publisher);

/* Publishes slices (an array from dra_slices_build; a reference is taken). The
 * generation in them is replaced: the pool's highest generation in the API server when
 * the content is unchanged, one more when it changed. A call while a sync runs is taken
 * up when that sync ends. */
int dra_publisher_set(struct dra_publisher *publisher, json_t *slices, struct vg_err *err);

void dra_publisher_get_stats(const struct dra_publisher *publisher,
                             struct dra_publisher_stats *stats);
/* The pool generation last written (0 before the first sync). */
int64_t dra_publisher_generation(const struct dra_publisher *publisher);

#endif
