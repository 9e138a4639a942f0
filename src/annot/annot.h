/* The annotations vgpu's daemons exchange through the Kubernetes API (docs/protocol.md):
 *
 *   node  vgpu.io/gpus      the GPU inventory the device plugin publishes, with a heartbeat
 *   pod   vgpu.io/decision  which GPUs and what share of each the scheduler gave each
 *                           container, keyed by container name (never by position)
 *
 * Both are versioned JSON. A decoder accepts its own version, ignores fields it does not
 * know (additions do not bump the version), and refuses anything malformed with a message
 * that names the field, so a garbled annotation is skipped with a reason, never half-read.
 * Values are bounded: ANNOT_MAX_BYTES of text, ANNOT_MAX_GPUS GPUs per node or container,
 * ANNOT_MAX_CONTAINERS containers per pod. Encoders return malloc'ed text (sorted keys,
 * compact) that the caller frees. */
#ifndef VGPU_ANNOT_ANNOT_H
#define VGPU_ANNOT_ANNOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define ANNOT_KEY_GPUS       "vgpu.io/gpus"
#define ANNOT_KEY_DECISION   "vgpu.io/decision"
#define ANNOT_VERSION        1
#define ANNOT_MAX_BYTES      (64 * 1024)
#define ANNOT_MAX_GPUS       16
#define ANNOT_MAX_CONTAINERS 32
#define ANNOT_UUID_MAX       64
#define ANNOT_MODEL_MAX      64
#define ANNOT_NAME_MAX       254 /* DNS subdomain: node and container names */
#define ANNOT_LABEL_MAX      63  /* RFC 1123 label ("Names" below) */

/* Dynamic MIG (docs/protocol.md, "MIG placement in the decision"): a GPU served with
 * --mig-mode dynamic lists the profiles it allows and the GPU instances it holds; a
 * decision names the profile and start slice of the instance to make. */
#define ANNOT_KEY_MIG_REFUSED   "vgpu.io/mig-refused"
#define ANNOT_MIG_SLICES_MAX    8  /* memory slices of a GPU (NVML placement unit) */
#define ANNOT_MIG_PROFILES_MAX  12 /* profiles one GPU lists */
#define ANNOT_MIG_INSTANCES_MAX 8  /* GPU instances on one GPU (one per slice at most) */
#define ANNOT_MIG_NAME_MAX      16 /* "1g.10gb+me": 1..15 of [0-9a-z.+] */
#define ANNOT_MIG_POD_MAX       40 /* a pod uid (36 characters) */
#define ANNOT_MIG_REFUSED_MAX   16
#define ANNOT_MIG_REASON_MAX    128

struct annot_mig_profile {
    char name[ANNOT_MIG_NAME_MAX];
    uint16_t id;         /* NVML GPU-instance profile ID */
    uint16_t sms;        /* multiprocessors, >= 1 */
    uint32_t memory_mib; /* >= 1 */
    uint8_t size;        /* memory slices it takes, 1..slices */
    uint8_t placements;  /* bit s: start slice s allowed (s + size <= slices) */
};

struct annot_mig_instance {
    char profile[ANNOT_MIG_NAME_MAX]; /* one made by hand may name a profile not allowed */
    uint8_t start, size;
    char pod[ANNOT_MIG_POD_MAX]; /* the pod uid that owns it; "" when none */
};

struct annot_mig {
    uint8_t slices; /* 0: the GPU has no dynamic MIG field */
    uint8_t profile_count, instance_count;
    struct annot_mig_profile profiles[ANNOT_MIG_PROFILES_MAX];
    struct annot_mig_instance instances[ANNOT_MIG_INSTANCES_MAX];
};

enum annot_mode { ANNOT_MODE_VGPU, ANNOT_MODE_TIME_SLICING, ANNOT_MODE_MPS, ANNOT_MODE_MIG };

struct annot_gpu {
    char uuid[ANNOT_UUID_MAX];
    unsigned index; /* NVML index on the node */
    char model[ANNOT_MODEL_MAX];
    uint64_t memory_mib; /* what may be handed out (after memory scaling) */
    unsigned cores;      /* compute capacity in percent of one GPU, 1..100 */
    unsigned slots;      /* most tenants at once, >= 1 */
    int numa;            /* NUMA node, -1 when unknown */
    bool healthy;
    struct annot_mig mig; /* mig.slices 0: not in dynamic MIG mode */
};

/* The time a container's launches were held behind high-priority containers on one GPU
 * (docs/compute.md "Priority"), as the node's device plugin read it from the container's
 * region at the write (optional "held"). The region is the tenant's to write: the figure
 * is shown (the dashboard), never used to decide anything. */
#define ANNOT_HELD_MAX         64                        /* entries, the most-held first */
#define ANNOT_HELD_SECONDS_MAX ((UINT64_C(1) << 31) - 1) /* larger values are clamped */
struct annot_held {
    char pod[ANNOT_LABEL_MAX + 1];       /* the pod's uid */
    char container[ANNOT_LABEL_MAX + 1]; /* an RFC 1123 label */
    uint8_t gpu;                         /* index in the inventory's gpus */
    uint32_t seconds;                    /* 0..ANNOT_HELD_SECONDS_MAX */
};

struct annot_inventory {
    int64_t heartbeat; /* Unix seconds when the device plugin last wrote it */
    enum annot_mode mode;
    unsigned gpu_count;
    struct annot_gpu gpus[ANNOT_MAX_GPUS];
    unsigned held_count; /* 0 when absent (an older device plugin, or nothing to show) */
    struct annot_held held[ANNOT_HELD_MAX];
};

struct annot_share {
    char uuid[ANNOT_UUID_MAX];
    uint64_t memory_mib;
    unsigned cores; /* percent, 0..100 (0: no compute limit) */
    /* Dynamic MIG: the GPU instance to make; mig_profile "" when none. */
    char mig_profile[ANNOT_MIG_NAME_MAX];
    uint8_t mig_start;
};

struct annot_container {
    char name[ANNOT_NAME_MAX];
    unsigned gpu_count;
    struct annot_share gpus[ANNOT_MAX_GPUS];
};

struct annot_decision {
    char node[ANNOT_NAME_MAX];
    int64_t time; /* Unix seconds of the decision */
    /* Live resizes applied (optional "generation", 0 when absent): raised by one with each
     * resize vgpu-scheduler records; the node writes it into the limits file. */
    uint64_t generation;
    unsigned container_count;
    struct annot_container containers[ANNOT_MAX_CONTAINERS];
};

int annot_inventory_decode(const char *text, size_t len, struct annot_inventory *out,
                           struct vg_err *err);
/* NULL on a value that cannot be encoded (err says why) or out of memory. */
char *annot_inventory_encode(const struct annot_inventory *in, struct vg_err *err);

int annot_decision_decode(const char *text, size_t len, struct annot_decision *out,
                          struct vg_err *err);
char *annot_decision_encode(const struct annot_decision *in, struct vg_err *err);

/* The node annotation vgpu.io/mig-refused: the placements the device plugin refused
 * lately (the last ANNOT_MIG_REFUSED_MAX), which the scheduler avoids for a while. */
struct annot_mig_refusal {
    char uuid[ANNOT_UUID_MAX];
    char profile[ANNOT_MIG_NAME_MAX];
    uint8_t start;
    int64_t time; /* Unix seconds */
    char reason[ANNOT_MIG_REASON_MAX];
};

struct annot_mig_refused {
    unsigned count;
    struct annot_mig_refusal refused[ANNOT_MIG_REFUSED_MAX];
};

int annot_mig_refused_decode(const char *text, size_t len, struct annot_mig_refused *out,
                             struct vg_err *err);
char *annot_mig_refused_encode(const struct annot_mig_refused *in, struct vg_err *err);
/* Whether s is a MIG profile name as the annotations carry it: 1..15 of [0-9a-z.+]. */
bool annot_mig_profile_name(const char *s);
/* Index of the profile named name in m, -1 when m lists none such. */
int annot_mig_profile_find(const struct annot_mig *m, const char *name);

/* ---- Names ----
 *
 * Every name from the API that reaches a path, an environment variable, a log line or a
 * file is checked with these first (names.c; Kubernetes' RFC 1123 rules): a label is
 * 1..63 of [a-z0-9-], a letter or digit at both ends (container names, namespaces); a
 * subdomain is 1..253 bytes of labels joined by single dots (pod and node names); a pod
 * uid is a label (every UUID Kubernetes assigns is one). NULL is never valid. */
#define ANNOT_SUBDOMAIN_MAX 253
bool annot_dns_label(const char *s);
bool annot_dns_subdomain(const char *s);
bool annot_pod_uid(const char *s);
/* Unix seconds of a time as Kubernetes writes metav1.Time, RFC 3339 in UTC to the second
 * ("2026-11-25T20:01:00Z", e.g. metadata.creationTimestamp); -1 for NULL or any other
 * form (an offset, fractions, lower-case letters, a field out of range). */
int64_t annot_kube_time(const char *s);

/* The annotation keys under vgpu.io/ that a pod's author may set (the policy the
 * scheduler reads); every other vgpu.io/ key on a pod is vgpu's own. */
#define ANNOT_PREFIX "vgpu.io/"
bool annot_key_reserved(const char *key);

/* "vgpu", "timeSlicing", "mps", "mig". */
const char *annot_mode_name(enum annot_mode mode);

/* ---- Live resize (docs/protocol.md "Live resize") ----
 * vgpu.io/resize: a request to change a running container's limits, which anyone the
 * API server lets patch the pod may write (the CLI's `vgpu resize`, automation);
 * vgpu.io/resize-status: vgpu-scheduler's answer to the request with that id. */
#define ANNOT_KEY_RESIZE         "vgpu.io/resize"
#define ANNOT_KEY_RESIZE_STATUS  "vgpu.io/resize-status"
#define ANNOT_RESIZE_MAX_BYTES   4096
#define ANNOT_RESIZE_MAX_MIB     ((UINT64_C(1) << 31) - 1) /* as pod quantities */
#define ANNOT_REASON_MAX         512
#define ANNOT_RESIZE_EARLIER     4 /* earlier answers a status keeps */
#define ANNOT_RESIZE_EARLIER_LEN 96

struct annot_resize {
    char id[ANNOT_LABEL_MAX + 1];        /* an RFC 1123 label naming this request */
    char container[ANNOT_LABEL_MAX + 1]; /* "": the pod's one container with GPUs */
    uint64_t memory_mib;                 /* new memory per GPU; 0: unchanged */
    unsigned cores;                      /* new compute share, percent; 0: unchanged */
};
int annot_resize_decode(const char *text, size_t len, struct annot_resize *out, struct vg_err *err);
char *annot_resize_encode(const struct annot_resize *in, struct vg_err *err);

enum annot_resize_state { ANNOT_RESIZE_DONE, ANNOT_RESIZE_REFUSED };
struct annot_resize_status {
    char id[ANNOT_LABEL_MAX + 1]; /* the request answered */
    enum annot_resize_state state;
    uint64_t generation;           /* the decision's generation after it (done) */
    char reason[ANNOT_REASON_MAX]; /* why it was refused; a note when done ("" none) */
    int64_t time;                  /* Unix seconds of the answer */
    /* The answers before this one, newest first, "<id> done|refused <generation>": a
     * client whose request was answered and then followed by another still finds it. */
    unsigned earlier_count;
    char earlier[ANNOT_RESIZE_EARLIER][ANNOT_RESIZE_EARLIER_LEN];
};
/* The answer to request id in st (the current one or an earlier one): 1 and *state,
 * *generation when found, 0 when not. */
int annot_resize_status_find(const struct annot_resize_status *st, const char *id,
                             enum annot_resize_state *state, uint64_t *generation);
int annot_resize_status_decode(const char *text, size_t len, struct annot_resize_status *out,
                               struct vg_err *err);
char *annot_resize_status_encode(const struct annot_resize_status *in, struct vg_err *err);

#endif
