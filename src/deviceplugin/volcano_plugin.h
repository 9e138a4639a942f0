/* The device plugin's Volcano mode (volcano.c): resources, node annotations and the
 * checks of a Volcano decision before vgpu's container is made for it (docs/volcano.md). */
#ifndef VGPU_DEVICEPLUGIN_VOLCANO_PLUGIN_H
#define VGPU_DEVICEPLUGIN_VOLCANO_PLUGIN_H

#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/volcano.h"

/* The most device IDs of one Volcano resource (memory: one per gpuMemoryFactor MiB). */
#define DP_VOLCANO_MAX_IDS        (1024 * 1024)
/* kubelet's gRPC client reads messages of at most 4 MiB. */
#define DP_VOLCANO_MAX_LIST_BYTES (4u * 1024 * 1024)

/* vgpu.schedulerProtocol is volcano. */
bool dp_volcano_mode(const struct dpconfig *cfg);
/* Memory published for a GPU, in gpuMemoryFactor units: memory × deviceMemoryScaling /
 * gpuMemoryFactor, rounded down; and the same in MiB (what the ledger hands out). */
uint64_t dp_volcano_units(const struct dpconfig *cfg, const struct dp_gpu *g);
uint64_t dp_volcano_capacity_mib(const struct dpconfig *cfg, const struct dp_gpu *g);

/* The three resources, named by cfg->volcano: the count (deviceSplitCount IDs
 * `<UUID>-<i>` per GPU), memory (`<UUID>-memory-<i>`, one per unit) and cores
 * (`<UUID>-core-<i>`, 100 × deviceCoreScaling per GPU). Refused: a MIG-enabled GPU (Volcano's
 * mig mode is not served), a GPU that would publish no memory or cores, a memory list over
 * kubelet's 4 MiB message limit (naming the gpuMemoryFactor that fits). */
int dp_volcano_resources(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                         struct dp_resources *out, struct vg_err *err);

/* Whether id is one of the IDs dp_volcano_resources advertises for kind, without searching
 * the list (the memory resource has one ID per MiB). */
bool dp_volcano_id_known(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                         enum dp_volcano_kind kind, const char *id);

/* `volcano.sh/node-vgpu-register` for the GPUs (sorted by minor number), malloc'ed. */
char *dp_volcano_register_value(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                                struct vg_err *err);
/* `volcano.sh/node-vgpu-handshake`: "Reported <time>" (Volcano v1.15.0 and older). */
void dp_volcano_handshake_value(int64_t now, char *out, size_t size);

/* Checks the pending segment against the node and the ledger: every device of type NVIDIA,
 * a GPU of this node, memory within the card, and room on each card next to what the ledger
 * holds. Fills the match dp_allocate_vgpu takes (memory in MiB) and the charge to add once
 * the container is made. -EINVAL (a decision this node cannot serve) or -ENOSPC (the card is
 * already promised), naming the pod, the container and the reason. */
int dp_volcano_check(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                     const struct vc_ledger *ledger, const struct vc_pending *pending,
                     struct dp_match *match, struct vc_charge *charge, struct vg_err *err);
/* For each segment still to allocate of a pod placed here whose devices this node can
 * serve (the checks of dp_volcano_check but the ledger's), the match Allocate will make:
 * the plugin fills the container's directory ahead, as in vgpu mode, and Allocate renames
 * it when the match is the same. */
void dp_volcano_foreach_waiting(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                                json_t *pod, void (*fn)(void *arg, const struct dp_match *m),
                                void *arg);
/* devices-to-allocate once the pod's segments the ledger holds are consumed (emptied, as
 * Volcano's plugin leaves them), into out[size]; *done when no NVIDIA device is left.
 * pending->remain is emptied in place the same way (no 50 KiB copy per Allocate). */
int dp_volcano_remaining(struct vc_pending *pending, const struct vc_ledger *ledger, char *out,
                         size_t size, bool *done, struct vg_err *err);

#endif
