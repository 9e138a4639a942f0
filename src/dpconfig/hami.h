/* HAMi's MIG configuration, read as HAMi writes it, for vgpu-device-plugin's dynamic MIG
 * (docs/deviceplugin.md, "HAMi's configuration"):
 *
 *   - the device plugin's node configuration (ConfigMap hami-device-plugin, key
 *     config.json): {"nodeconfig": [{"name": NODE, "operatingmode": "hami-core"|"mig"|
 *     "mps", ...}]}: `mig` on this node's entry serves its MIG GPUs dynamically;
 *   - the scheduler's device configuration (device-config.yaml) under `nvidia:`: HAMi
 *     v2.10's `migProfileAllowlist: [{models: [...], profiles: [...]}]` or v2.9's
 *     `knownMigGeometries: [{models: [...], allowedGeometries: [[{name, core, memory,
 *     count}, ...], ...]}]`: the profiles a GPU whose model contains one of `models` may
 *     be given (HAMi's rule: substring match, first entry wins). With both, the allowlist
 *     counts. Other keys are HAMi's own and ignored.
 *
 * Strict: a value of the wrong type, an empty model, a profile name that is not
 * `<g>g.<mem>gb[+me]`, more entries than the bounds below, or an unknown operating mode is
 * an error naming the entry. */
#ifndef VGPU_DPCONFIG_HAMI_H
#define VGPU_DPCONFIG_HAMI_H

#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"

#define HAMI_MAX_RULES    32
#define HAMI_MAX_MODELS   16
#define HAMI_MAX_PROFILES 16
#define HAMI_MODEL_MAX    64
#define HAMI_PROFILE_MAX  16
#define HAMI_MAX_BYTES    (1024 * 1024)

struct hami_mig_rule {
    size_t model_count, profile_count;
    char models[HAMI_MAX_MODELS][HAMI_MODEL_MAX];
    char profiles[HAMI_MAX_PROFILES][HAMI_PROFILE_MAX];
};

struct hami_mig {
    const char *key; /* "migProfileAllowlist", "knownMigGeometries", or NULL: neither */
    size_t rule_count;
    struct hami_mig_rule rules[HAMI_MAX_RULES];
};

/* config.json's operating mode for node: *mig true for "mig"; false for any other known
 * mode or when the node has no entry. */
int hami_node_mig(const char *text, size_t len, const char *node, bool *mig, struct vg_err *err);
/* device-config.yaml's MIG profile lists into *out. */
int hami_mig_parse(const char *text, size_t len, struct hami_mig *out, struct vg_err *err);
/* The rule for a GPU model (first whose model is a substring of it), or NULL. */
const struct hami_mig_rule *hami_mig_rule_for(const struct hami_mig *m, const char *model);

#endif
