/* Which container is kubelet allocating? (vgpu mode; docs/protocol.md "Allocate matching")
 *
 * kubelet's Allocate carries only device IDs, one container per call, in pod order. The
 * scheduler's decision names containers. The rule: consider pods bound to this node that
 * carry a decision for this node and are neither finished nor being deleted, oldest
 * decision first (kubelet admits pods in the order they were bound); in each, skip
 * containers already allocated (their directory exists, which also survives a plugin
 * restart); take the first container whose GPUs are exactly the GPUs kubelet chose (true
 * whenever kubelet followed our GetPreferredAllocation), else the first one, in decision
 * order, asking for as many GPUs as kubelet allocates.
 *
 * The rule itself lives in podcache.c, which the daemon keeps up to date from its pod
 * watch; this entry point applies it to a list of pods in one go. */
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/podcache.h"

int dp_match_container(json_t *pods, const char *node, char (*uuids)[ANNOT_UUID_MAX], size_t count,
                       dp_allocated_fn allocated, void *allocated_arg, struct dp_match *out,
                       struct vg_err *err)
{
    struct dp_podcache *cache = dp_podcache_new(node);
    dp_podcache_replace(cache, pods);
    int rc = dp_podcache_match(cache, uuids, count, allocated, allocated_arg, out, err);
    dp_podcache_free(cache);
    return rc;
}
