/* GPU health of vgpu's DRA driver as device taints (KEP-5055; docs/dra.md "Device
 * taints"): what NVML says about each GPU, turned into the taints its devices carry in
 * the ResourceSlice, so that an unhealthy GPU stays listed (and a claim tolerating the
 * taint can still have it) instead of vanishing.
 *
 *   state     per GPU: lost (NVML cannot read it: GPU_IS_LOST, gone from the bus), the
 *             last critical XID (the device plugin's XID policy decides which are), a
 *             double-bit ECC error,
 *             unmonitored (no XID events for it: health checks off, or registration
 *             failed); each with the time it began, which is the taint's timeAdded;
 *   observe   the pure state machine, one observation per poll: a critical XID stays
 *             until the GPU has been reset, seen as lost and found again (or the plugin
 *             restarts); lost clears when NVML reads the GPU again;
 *   taints    the taints of a state: <driver>/xid=<XID>:NoSchedule,
 *             <driver>/ecc-double-bit:NoSchedule, <driver>/gpu-lost:NoSchedule,
 *             <driver>/unmonitored:None;
 *   monitor   the NVML side (its own event set through src/nvml's loader), polled on the
 *             plugin's loop: never blocks (event waits of 0 ms). */
#ifndef VGPU_DRA_HEALTH_H
#define VGPU_DRA_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "deviceplugin/deviceplugin.h"

#define DRA_TAINT_XID         "xid"
#define DRA_TAINT_LOST        "gpu-lost"
#define DRA_TAINT_UNMONITORED "unmonitored"
#define DRA_TAINT_ECC         "ecc-double-bit"
#define DRA_MAX_TAINTS        4   /* the kinds above; the API allows 16 per device */
#define DRA_TAINT_KEY_MAX     128 /* "<driver>/<name>": driver <= 63 */

struct dra_gpu_health {
    bool lost;
    int64_t lost_since;     /* unix seconds */
    unsigned long long xid; /* the last critical XID; 0: none */
    int64_t xid_since;
    bool ecc; /* a double-bit ECC error was reported */
    int64_t ecc_since;
    bool lost_after_xid; /* lost since that XID or ECC error: found again means it was reset */
    bool unmonitored;
    int64_t unmonitored_since;
};

/* One poll's view of a GPU. */
struct dra_health_obs {
    bool present;           /* NVML read the GPU */
    unsigned long long xid; /* a critical XID reported since the last poll; 0: none */
    bool ecc;               /* a double-bit ECC error reported since the last poll */
    bool monitored;         /* its XID events are watched */
};

/* Applies obs at time now (unix seconds); true when the taints change. */
bool dra_health_observe(struct dra_gpu_health *h, const struct dra_health_obs *obs, int64_t now);

/* A GPU without NoSchedule taints: what Prepare and kubelet's resource health call
 * healthy. */
bool dra_health_ok(const struct dra_gpu_health *h);

struct dra_taint {
    char key[DRA_TAINT_KEY_MAX];
    char value[24];
    const char *effect; /* "None", "NoSchedule" */
    int64_t time_added;
};

/* The taints of h for driver (key prefix) into out[DRA_MAX_TAINTS]; their count. */
unsigned dra_health_taints(const struct dra_gpu_health *h, const char *driver,
                           struct dra_taint *out);

/* One line saying why a GPU is unhealthy ("XID 79", "GPU lost", "") into out[size]. */
void dra_health_message(const struct dra_gpu_health *h, char *out, size_t size);

/* ---- monitor ---------------------------------------------------------------------------- */

struct dra_health_monitor;

/* Opens the NVML library (NULL: the default SONAME) for gpus (borrowed for the monitor's
 * life, found by UUID) and registers each for critical-XID events; policy decides which
 * XIDs are critical and whether health is watched at all (policy->off: every GPU
 * healthy and unmonitored). A GPU whose events cannot be registered is unmonitored. */
int dra_health_monitor_new(const char *library, const struct dp_xid_policy *policy,
                           const struct dp_gpu *gpus, unsigned count,
                           struct dra_health_monitor **out, struct vg_err *err);
void dra_health_monitor_free(struct dra_health_monitor *m);
/* Takes every pending event and reads each GPU once: the observation of GPU i into obs[i]. */
void dra_health_monitor_poll(struct dra_health_monitor *m, struct dra_health_obs *obs);

#endif
