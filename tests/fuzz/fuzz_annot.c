/* Fuzz target for the annotation decoders: garbled annotations are refused with a
 * message, and whatever is accepted encodes and decodes back to the same thing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct annot_inventory inv, inv2;
    static struct annot_decision dec, dec2;
    struct vg_err err = {0};
    bool accepted = false;
    if (annot_inventory_decode((const char *)data, size, &inv, &err) == 0) {
        accepted = true;
        char *text = annot_inventory_encode(&inv, &err);
        if (text != NULL) {
            if (annot_inventory_decode(text, strlen(text), &inv2, &err) != 0 ||
                memcmp(&inv, &inv2, sizeof inv) != 0)
                abort();
            free(text);
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    err.msg[0] = '\0';
    if (annot_decision_decode((const char *)data, size, &dec, &err) == 0) {
        accepted = true;
        char *text = annot_decision_encode(&dec, &err);
        if (text != NULL) {
            if (annot_decision_decode(text, strlen(text), &dec2, &err) != 0 ||
                memcmp(&dec, &dec2, sizeof dec) != 0)
                abort();
            free(text);
        }
    } else if (err.msg[0] == '\0') {
        abort();
    }
    vg_fuzz_report(accepted); /* as a node inventory or as a pod decision */
    return 0;
}
