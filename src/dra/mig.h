/* MIG on demand for vgpu's DRA driver (KEP-4815 partitionable devices; docs/dra.md
 * "Partitionable devices"):
 *
 *   layout     per GPU in MIG mode served dynamically, the partitions NVML offers: every
 *              (GPU instance profile, placement) with the profile's memory, SMs and
 *              slices, read through nvmlDeviceGetGpuInstanceProfileInfo and
 *              nvmlDeviceGetGpuInstancePossiblePlacements_v2 (never from a table);
 *   names      a partition's device name, "gpu-<minor>-mig-p<profile id>-s<start>", and
 *              the way back from a name;
 *   instances  the GPU and compute instances made for claims: created at the allocated
 *              placement in NodePrepareResources and destroyed in
 *              NodeUnprepareResources, each step recorded first in <state>/mig.json
 *              (written atomically) so that a plugin killed between the GPU instance and
 *              the compute instance finds and destroys what it made at its next start. */
#ifndef VGPU_DRA_MIG_H
#define VGPU_DRA_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "deviceplugin/deviceplugin.h"

#define DRA_MIG_MAX_PARTS     40 /* per GPU: 25 on an H100 (7+7+4+3+2+1+1) */
#define DRA_MIG_MAX_SLICES    8  /* memory slices of a GPU */
#define DRA_MIG_MAX_INSTANCES 128

struct dra_partition {
    unsigned profile_id;     /* NVML's GPU instance profile id (info.id) */
    unsigned start, size;    /* memory slices */
    unsigned compute_slices; /* info.sliceCount */
    unsigned sms;            /* info.multiprocessorCount */
    uint64_t memory_mib;     /* info.memorySizeMB */
    char profile[DP_MIG_PROFILE];
};

struct dra_mig_gpu {
    bool dynamic;           /* published as partitions */
    unsigned memory_slices; /* the highest start + size: 8 */
    unsigned sms;           /* the largest profile's */
    uint64_t memory_mib;    /* the largest profile's */
    unsigned count;
    struct dra_partition parts[DRA_MIG_MAX_PARTS];
};

/* "gpu-<minor>-mig-p<id>-s<start>" into name[64]. */
void dra_partition_name(const struct dp_gpu *gpu, const struct dra_partition *p, char *name);
/* The partition a device name names, with its GPU's index in gpus; NULL when none. */
const struct dra_partition *dra_partition_find(const struct dp_gpu *gpus,
                                               const struct dra_mig_gpu *migs, unsigned count,
                                               const char *device, unsigned *gpu_index);

/* One instance made for a claim. gi/ci are -1 until made. */
struct dra_instance {
    char claim[64];
    char device[64]; /* the partition's device name */
    char gpu_uuid[ANNOT_UUID_MAX];
    unsigned profile_id, start, size;
    int gi, ci;
    char uuid[ANNOT_UUID_MAX]; /* the MIG device's, once the compute instance exists */
};

struct dra_instances {
    unsigned count;
    struct dra_instance items[DRA_MIG_MAX_INSTANCES];
};

int dra_instances_load(const char *path, struct dra_instances *out, struct vg_err *err);
int dra_instances_save(const char *path, const struct dra_instances *in, struct vg_err *err);
/* The JSON text and its decoder (-EINVAL naming what is wrong), for tests and fuzzing. */
char *dra_instances_encode(const struct dra_instances *in);
int dra_instances_decode(const char *text, size_t len, struct dra_instances *out,
                         struct vg_err *err);

/* ---- NVML: through nvml/mig.h, the one NVML MIG layer (the device plugin's too) ---------- */

struct dra_mig;

/* Opens the NVML library (NULL: the default SONAME) with the dynamic MIG calls. */
int dra_mig_open(const char *library, struct dra_mig **out, struct vg_err *err);
void dra_mig_close(struct dra_mig *m);
/* The partitions of gpu (MIG enabled) into out. */
int dra_mig_discover(struct dra_mig *m, const struct dp_gpu *gpu, struct dra_mig_gpu *out,
                     struct vg_err *err);
/* Creates the GPU instance of inst (profile at start) and sets inst->gi. NVML's
 * INSUFFICIENT_RESOURCES (the placement taken) is -EBUSY. */
int dra_mig_create_gi(struct dra_mig *m, struct dra_instance *inst, struct vg_err *err);
/* Creates the compute instance spanning inst's GPU instance (of compute_slices, its
 * partition's), sets inst->ci and the MIG
 * device's uuid, and fills mig (uuid, gi, ci, memory, profile; caps from gpu_minor's MIG
 * capability table when readable, else -1). */
int dra_mig_create_ci(struct dra_mig *m, struct dra_instance *inst, unsigned compute_slices,
                      unsigned gpu_minor, uint64_t gpu_memory_mib, struct dp_mig *mig,
                      struct vg_err *err);
/* Destroys inst's compute instances and GPU instance (found by id, or by placement when
 * gi is -1). Gone already is success; processes inside are -EBUSY (NVML_ERROR_IN_USE). */
int dra_mig_destroy(struct dra_mig *m, const struct dra_instance *inst, struct vg_err *err);

#endif
