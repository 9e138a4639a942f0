/* Fuzz target for the DRA plugin's MIG instance record (<state>/mig.json, src/dra/mig.c):
 * the input is the file as a crash, a full disk or someone with write access to the state
 * directory could leave it. No crash, no leak; an accepted record names only claim uids,
 * DNS-label devices, GPU- and MIG- UUIDs and placements inside 8 slices (they reach NVML
 * calls), and encodes back to text that decodes and encodes to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "dra/mig.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct dra_instances in, again;
    struct vg_err err = {0};
    int rc = dra_instances_decode((const char *)data, size, &in, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (rc > 0 || err.msg[0] == '\0')
            abort();
        return 0;
    }
    for (unsigned i = 0; i < in.count; i++) {
        const struct dra_instance *t = &in.items[i];
        if (!annot_pod_uid(t->claim) || !annot_dns_label(t->device) ||
            t->start + t->size > DRA_MIG_MAX_SLICES || t->size == 0 ||
            strncmp(t->gpu_uuid, "GPU-", 4) != 0)
            abort();
    }
    char *text = dra_instances_encode(&in);
    if (text == NULL || dra_instances_decode(text, strlen(text), &again, &err) != 0 ||
        again.count != in.count)
        abort();
    char *text2 = dra_instances_encode(&again);
    if (text2 == NULL || strcmp(text, text2) != 0)
        abort();
    free(text2);
    free(text);
    return 0;
}
