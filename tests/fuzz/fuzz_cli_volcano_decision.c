/* Fuzz target for `vgpu pods`' reader of Volcano's decision (cli_volcano_decision,
 * src/cli/cluster.c): the input is the pod's volcano.sh/vgpu-ids-new, on a pod whose
 * containers are Volcano's gpu-pod12 example (a GPU container, one without, another GPU
 * container). No crash, no read past the input. Oracle: an accepted decision names at most
 * the two GPU containers, in order, and never the one without GPUs; every device has a
 * non-empty UUID and cores within 0..100; the count of devices is the count of ':' in the
 * input (every device ends in one). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cluster.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    json_t *pod =
        json_pack("{s:{s:{s:s}}, s:{s:s, s:[{s:s, s:{s:{s:s, s:s}}}, {s:s}, {s:s, s:{s:{s:s}}}]}}",
                  "metadata", "annotations", "volcano.sh/vgpu-ids-new", "", "spec", "nodeName",
                  "node-1", "containers", "name", "a", "resources", "limits",
                  "volcano.sh/vgpu-number", "2", "volcano.sh/vgpu-memory", "2000", "name", "none",
                  "name", "b", "resources", "limits", "volcano.sh/vgpu-number", "2");
    /* An input with a NUL in it is a shorter string, as the API's JSON could not carry one;
     * one that is not UTF-8 never reaches the reader (the API's JSON cannot carry it). */
    json_t *value = json_string(text);
    struct annot_decision *d = malloc(sizeof *d);
    if (value == NULL || d == NULL ||
        json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                            "volcano.sh/vgpu-ids-new", value) < 0) {
        free(d);
        json_decref(pod);
        free(text);
        return 0;
    }
    bool ok = cli_volcano_decision(pod, d);
    vg_fuzz_report(ok);
    if (ok) {
        static const char *const names[] = {"a", "b"};
        unsigned devices = 0;
        if (d->container_count == 0 || d->container_count > 2 || strcmp(d->node, "node-1") != 0)
            abort();
        for (unsigned c = 0; c < d->container_count; c++) {
            if (strcmp(d->containers[c].name, names[c]) != 0)
                abort();
            for (unsigned g = 0; g < d->containers[c].gpu_count; g++) {
                const struct annot_share *s = &d->containers[c].gpus[g];
                if (s->uuid[0] == '\0' || s->cores > 100)
                    abort();
                devices++;
            }
        }
        unsigned colons = 0;
        for (const char *p = text; *p; p++)
            colons += *p == ':';
        if (devices != colons)
            abort();
    }
    free(d);
    json_decref(pod);
    free(text);
    return 0;
}
