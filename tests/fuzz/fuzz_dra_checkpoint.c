/* Fuzz target for the DRA plugin's checkpoint reader: the input is checkpoint.json as a
 * crash, a full disk or an attacker with write access to the state directory could leave
 * it. No crash, no leak; an accepted checkpoint names only claim uids and request labels
 * (they reach paths) and encodes back to text that decodes and encodes to the same text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/dra.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dra_checkpoint cp;
    struct vg_err err = {0};
    int rc = dra_checkpoint_decode((const char *)data, size, &cp, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (rc > 0 || err.msg[0] == '\0' || cp.claims != NULL)
            abort();
        return 0;
    }
    for (size_t i = 0; i < cp.count; i++) {
        const struct dra_prepared *p = cp.claims[i];
        if (!annot_pod_uid(p->uid))
            abort();
        for (unsigned g = 0; g < p->group_count; g++)
            if (!annot_dns_label(p->groups[g].name))
                abort();
    }
    char *text = dra_checkpoint_encode(&cp);
    if (text == NULL)
        abort();
    struct dra_checkpoint again;
    if (dra_checkpoint_decode(text, strlen(text), &again, &err) != 0 || again.count != cp.count)
        abort();
    char *text2 = dra_checkpoint_encode(&again);
    if (text2 == NULL || strcmp(text, text2) != 0)
        abort();
    free(text2);
    dra_checkpoint_release(&again);
    dra_checkpoint_release(&cp);
    free(text);
    return 0;
}
