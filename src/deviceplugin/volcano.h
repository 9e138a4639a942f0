/* Volcano's vGPU protocol on the node (vgpu.schedulerProtocol volcano; docs/volcano.md).
 *
 *   codec   the text formats Volcano writes and reads (volcano_annot.c): the node's
 *           `volcano.sh/node-vgpu-register` and a pod's `volcano.sh/vgpu-ids-new` /
 *           `volcano.sh/devices-to-allocate`, decoded strictly (a value Volcano's own
 *           lenient Go decoders would half-read is refused here with the reason);
 *   ledger  what the plugin has given out on each GPU, rebuilt from the node's pods, so
 *           that no decision, whoever wrote it, takes more than a card has;
 *   pending which pod and which container an Allocate is for, as Volcano's plugin finds it
 *           (this node, the device count kubelet asked for, the oldest `vgpu-time`), but
 *           with each segment given to the right GPU-requesting container. */
#ifndef VGPU_DEVICEPLUGIN_VOLCANO_H
#define VGPU_DEVICEPLUGIN_VOLCANO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "annot/annot.h"
#include "base/err.h"
#include "dpconfig/dpconfig.h"

#define VC_KEY_REGISTER    "volcano.sh/node-vgpu-register"
#define VC_KEY_HANDSHAKE   "volcano.sh/node-vgpu-handshake"
#define VC_KEY_NODE        "volcano.sh/vgpu-node"
#define VC_KEY_TIME        "volcano.sh/vgpu-time"
#define VC_KEY_BIND_TIME   "volcano.sh/bind-time"
#define VC_KEY_IDS         "volcano.sh/vgpu-ids-new"
#define VC_KEY_TO_ALLOCATE "volcano.sh/devices-to-allocate"
#define VC_KEY_BIND_PHASE  "volcano.sh/bind-phase"
#define VC_NODE_LOCK       "hamivgpu" /* node annotation of deviceshare.NodeLockEnable */
#define VC_TIME_DONE       "18446744073709551615" /* vgpu-time once allocated or failed */
#define VC_TYPE_NVIDIA     "NVIDIA"
#define VC_MODE_HAMI_CORE  "hami-core"
#define VC_TYPE_MAX        16
#define VC_NODE_TYPE_MAX   (ANNOT_MODEL_MAX + 8) /* "NVIDIA-" + the NVML name */

/* ---- codec ------------------------------------------------------------------------- */

/* One device of a decision: `UUID,Type,Memory,Cores:` (memory in units of the config's
 * gpuMemoryFactor MiB, cores in percent). */
struct vc_device {
    char uuid[ANNOT_UUID_MAX];
    char type[VC_TYPE_MAX];
    uint64_t memory;
    unsigned cores;
};
/* The devices of one GPU-requesting container; count 0: none left (consumed). */
struct vc_segment {
    unsigned count;
    struct vc_device devs[ANNOT_MAX_GPUS];
};
struct vc_pod_devices {
    unsigned count; /* segments, containers joined by `;` */
    struct vc_segment segs[ANNOT_MAX_CONTAINERS];
};

/* Decodes a pod's `vgpu-ids-new` or `devices-to-allocate`: segments joined by ';', each
 * zero or more `UUID,Type,Memory,Cores:` entries (every entry ends with ':'). Refused, with
 * the position and the reason: a missing ':' (a truncated string), a field count other
 * than 4, an empty or over-long UUID or Type, characters outside [A-Za-z0-9-_], a memory
 * that is not a decimal in 1..2^31-1 or cores not a decimal in 0..100, more than
 * ANNOT_MAX_GPUS devices or ANNOT_MAX_CONTAINERS segments, more than ANNOT_MAX_BYTES.
 * "" is zero segments. Only the segments and devices counted are written. */
int vc_pod_devices_decode(const char *text, size_t len, struct vc_pod_devices *out,
                          struct vg_err *err);
/* The canonical text (what Volcano's encodePodDevices writes) into out[size]; -ENOSPC when
 * it does not fit. */
int vc_pod_devices_encode(const struct vc_pod_devices *in, char *out, size_t size,
                          struct vg_err *err);

/* One GPU of the node annotation: `UUID,Count,Memory,Type,Health,Mode:`. */
struct vc_node_device {
    char uuid[ANNOT_UUID_MAX];
    uint64_t count;  /* deviceSplitCount */
    uint64_t memory; /* in gpuMemoryFactor units */
    char type[VC_NODE_TYPE_MAX];
    bool healthy;
    char mode[VC_TYPE_MAX]; /* "hami-core" */
};
/* Encodes as Volcano's decodeNodeDevices reads it: six comma-separated fields per GPU,
 * every entry ending with ':'. Refuses a field that would break the format (',' or ':' in
 * a UUID, Type or Mode). */
int vc_node_register_encode(const struct vc_node_device *devs, unsigned n, char *out, size_t size,
                            struct vg_err *err);
/* The strict inverse (tests, the fuzz oracle): exactly six fields per entry. */
int vc_node_register_decode(const char *text, size_t len, struct vc_node_device *devs, unsigned max,
                            unsigned *n, struct vg_err *err);

/* `vgpu-time`: Unix seconds in decimal; -1 when absent or malformed (never the oldest). */
int64_t vc_parse_time(const char *s);

/* ---- ledger -------------------------------------------------------------------------- */

/* What is given out on each GPU: one entry per allocated container segment. */
#define VC_LEDGER_MAX 1024
struct vc_charge {
    char pod_uid[128];
    unsigned segment;
    bool local; /* charged by this process; kept until the pod is gone */
    unsigned gpu_count;
    struct {
        char uuid[ANNOT_UUID_MAX];
        uint64_t memory_mib;
        unsigned cores;
    } gpus[ANNOT_MAX_GPUS];
};
struct vc_ledger {
    size_t count;
    struct vc_charge items[VC_LEDGER_MAX];
};

/* Memory (MiB) and cores (percent) given out on GPU uuid. */
void vc_ledger_used(const struct vc_ledger *l, const char *uuid, uint64_t *memory_mib,
                    unsigned *cores);
bool vc_ledger_has(const struct vc_ledger *l, const char *pod_uid, unsigned segment);
/* Checks that c fits next to what is given out (memory within capacity_mib, cores within
 * 100 on every GPU): 0, or -ENOSPC naming the GPU, what is left and what was asked. */
int vc_ledger_check(const struct vc_ledger *l, const struct vc_charge *c,
                    uint64_t (*capacity_mib)(void *arg, const char *uuid), void *arg,
                    struct vg_err *err);
int vc_ledger_add(struct vc_ledger *l, const struct vc_charge *c, struct vg_err *err);
/* Drops one charge (an Allocate undone). */
void vc_ledger_drop_charge(struct vc_ledger *l, const char *pod_uid, unsigned segment);
/* Drops every charge of the pod (local ones only when all is true). */
void vc_ledger_drop_pod(struct vc_ledger *l, const char *pod_uid, bool all);
/* The charges a pod's annotations say it holds on node, replacing those known of it (local
 * charges stay): a pod that is not finished, placed on node, whose bind-phase is not
 * `failed`, holds each segment of `vgpu-ids-new` that is no longer in
 * `devices-to-allocate` (all of them once bind-phase is `success`). factor: MiB per unit. */
void vc_ledger_put_pod(struct vc_ledger *l, json_t *pod, const char *node, uint64_t factor);

/* ---- pending pods --------------------------------------------------------------------- */

/* The containers of a pod that request the count or memory resource, in spec order: the
 * i-th gets segment i. Into names (ANNOT_MAX_CONTAINERS); how many, or -EINVAL for a pod
 * without containers or a container name that is not an RFC 1123 label. */
int vc_gpu_containers(json_t *pod, const struct dpconfig_volcano *v, char (*names)[ANNOT_NAME_MAX],
                      struct vg_err *err);

/* What an Allocate of count devices is for. */
struct vc_pending {
    json_t *pod; /* borrowed */
    char pod_uid[128];
    char pod_namespace[ANNOT_NAME_MAX];
    char pod_name[ANNOT_NAME_MAX];
    char container[ANNOT_NAME_MAX];
    unsigned segment;             /* index in devices-to-allocate */
    struct vc_pod_devices remain; /* devices-to-allocate as decoded */
    int64_t time;
};
/* The pods placed on this node with devices left to allocate, oldest vgpu-time first (a
 * tie keeps arrival order), so that an Allocate looks at the oldest ones only. Holds a
 * reference to each pod. */
struct vc_wait {
    json_t *pod;
    int64_t time;
    char uid[128];
};
struct vc_waiting {
    size_t count, cap;
    struct vc_wait *items;
};
/* Adds, moves or removes the pod (by uid) as its annotations say: kept when `vgpu-node`
 * is node, `devices-to-allocate` is not empty, `bind-phase` is absent or `allocating` and
 * `vgpu-time` reads; removed otherwise. */
void vc_waiting_put(struct vc_waiting *w, json_t *pod, const char *node);
void vc_waiting_drop(struct vc_waiting *w, const char *uid);
void vc_waiting_clear(struct vc_waiting *w);
void vc_waiting_free(struct vc_waiting *w);

/* Among the waiting pods not finished (checked again here), the one with the oldest
 * vgpu-time whose next segment (the first non-empty one not in the ledger) has count
 * devices. 0 and *out; -ENOENT when there is none; -EINVAL with the pod in *out when that
 * pod's annotations are malformed or its segment has no container; -EEXIST when two pods
 * share the oldest time (out names the first, *twin the other), since the plugin cannot
 * know which of them kubelet is allocating. */
int vc_find_pending(const struct vc_waiting *w, const char *node, const struct dpconfig_volcano *v,
                    const struct vc_ledger *ledger, size_t count, struct vc_pending *out,
                    json_t **twin, struct vg_err *err);

#endif
