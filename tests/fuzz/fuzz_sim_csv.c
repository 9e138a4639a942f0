/* Fuzz target for vgpu-sim's CSV parsers: the input is parsed as a node list and as a
 * pod list against a small fixed cluster. No crash, no read past the input, and an
 * accepted pod list holds only requests the placement core accepts. */
#include <stdint.h>
#include <stdlib.h>

#include "sim/sim.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vg_err err;
    struct place_cluster *nodes = place_cluster_new();
    if (nodes == NULL)
        return 0;
    /* Accepted as a node list or as a pod list. */
    bool accepted = sim_parse_nodes((const char *)data, size, "fuzz", nodes, &err) == 0;
    place_cluster_free(nodes);

    struct place_cluster *c = place_cluster_new();
    if (c == NULL)
        return 0;
    (void)place_cluster_add_node(c, "n", 96000, 393216, 8, "G2", 0, &err);
    struct sim_pod *pods = NULL;
    size_t count = 0;
    if (sim_parse_pods((const char *)data, size, "fuzz", c, &pods, &count, &err) == 0) {
        accepted = true;
        for (size_t i = 0; i < count; i++)
            if (pods[i].gpu_milli > PLACE_GPU_MILLI || pods[i].gpu_count > PLACE_MAX_GPUS ||
                (pods[i].gpu_count == 0) != (pods[i].gpu_milli == 0))
                abort();
        free(pods);
    }
    vg_fuzz_report(accepted);
    place_cluster_free(c);
    return 0;
}
