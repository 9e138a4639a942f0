/* Dynamic MIG through NVML: the GPU instance profiles a MIG-mode GPU offers, the GPU
 * instances it holds, and making or destroying one (a GPU instance at a placement with the
 * one compute instance spanning it): the one NVML MIG layer of the device plugin's
 * `--mig-mode dynamic` (deviceplugin/migdyn.c) and the DRA driver's MIG on demand
 * (dra/mig.c).
 *
 * NVML's rules, as its header documents them and as the drivers of HAMi v2.10 and NVIDIA's
 * DRA driver rely on: profile info is asked by the NVML_GPU_INSTANCE_PROFILE_* enum and
 * answers the profile id every other call takes; a placement is {first memory slice,
 * memory slices}; an occupied or overlapping placement is INSUFFICIENT_RESOURCES; a GPU
 * instance with compute instances or processes, or a compute instance with processes, is
 * IN_USE to destroy. Nothing here retries another placement: a refusal is reported.
 *
 * Errors (vg_err, "NVML: ..." naming the call): -ENOTSUP the library or GPU has no dynamic
 * MIG; -EINVAL a profile or placement the GPU does not have; -ENOSPC the placement is taken
 * (or overlaps); -EBUSY in use; -ENOENT no such instance; -EIO anything else. */
#ifndef VGPU_NVML_MIG_H
#define VGPU_NVML_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml/loader.h"

#define NVML_MIG_MAX_PROFILES  12 /* NVML_GPU_INSTANCE_PROFILE_* enums 0..9, +me kept */
#define NVML_MIG_MAX_INSTANCES 8
#define NVML_MIG_NAME_MAX      16
#define NVML_MIG_UUID_MAX      96

struct nvml_mig_profile {
    char name[NVML_MIG_NAME_MAX]; /* NVIDIA's: "1g.10gb", "1g.10gb+me", ... */
    unsigned id;                  /* the profile id */
    unsigned slices;              /* compute slices */
    unsigned size;                /* memory slices a placement takes */
    unsigned sms;
    uint64_t memory_mib;
    unsigned placements;   /* bit s: start s is a possible placement */
    unsigned profile_enum; /* the NVML_GPU_INSTANCE_PROFILE_* it was asked by */
};

struct nvml_mig_instance {
    unsigned gi;         /* GPU instance id */
    unsigned profile_id; /* its profile's id */
    unsigned start, size;
    bool has_ci;                  /* its compute instance exists: a MIG device */
    char uuid[NVML_MIG_UUID_MAX]; /* the MIG device's "MIG-..." UUID when has_ci */
    unsigned mig_index;           /* nvmlDeviceGetMigDeviceHandleByIndex index, when has_ci */
    unsigned ci;                  /* the compute instance's id, when has_ci */
    uint64_t memory_mib;          /* the MIG device's memory, when has_ci (0: unknown) */
};

/* The profiles of GPU dev (in MIG mode), small to large by enum; *slices the GPU's memory
 * slices (the end of the widest placement). */
int nvml_mig_profiles(const struct nvml_lib *lib, nvmlDevice_t dev, struct nvml_mig_profile *out,
                      size_t *count, unsigned *slices, struct vg_err *err);
/* The GPU instances dev holds now, by start. profiles/n_profiles: from nvml_mig_profiles. */
int nvml_mig_instances(const struct nvml_lib *lib, nvmlDevice_t dev,
                       const struct nvml_mig_profile *profiles, size_t n_profiles,
                       struct nvml_mig_instance *out, size_t *count, struct vg_err *err);
/* Whether lib has every dynamic MIG call this module makes. */
bool nvml_mig_supported(const struct nvml_lib *lib);
/* A GPU instance of profile p at start with one compute instance spanning it. Between the
 * two, hook (when not NULL) is called (tests kill the process there). On a failed compute
 * instance the GPU instance is destroyed again. */
int nvml_mig_create(const struct nvml_lib *lib, nvmlDevice_t dev, const struct nvml_mig_profile *p,
                    unsigned start, void (*hook)(void), struct nvml_mig_instance *out,
                    struct vg_err *err);
/* The two steps of nvml_mig_create apart, for a caller that records each before taking
 * the next (the DRA driver): the GPU instance (its id into *gi), then the compute instance
 * spanning GPU instance gi of a profile of `slices` compute slices, described into out.
 * A failed compute instance leaves the GPU instance to the caller. */
int nvml_mig_create_gi(const struct nvml_lib *lib, nvmlDevice_t dev,
                       const struct nvml_mig_profile *p, unsigned start, unsigned *gi,
                       struct vg_err *err);
int nvml_mig_create_ci(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi, unsigned slices,
                       struct nvml_mig_instance *out, struct vg_err *err);
/* The profile id and first memory slice of GPU instance gi (-ENOENT: no such instance). */
int nvml_mig_placement(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi,
                       unsigned *profile_id, unsigned *start, struct vg_err *err);
/* The GPU instance of profile_id at start: its id into *gi (-ENOENT: none there). */
int nvml_mig_find(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned profile_id, unsigned start,
                  unsigned *gi, struct vg_err *err);
/* Destroys GPU instance gi and its compute instances. */
int nvml_mig_destroy(const struct nvml_lib *lib, nvmlDevice_t dev, unsigned gi, struct vg_err *err);

#endif
