/* Fuzz target for region validation: any bytes found in a region file are either
 * refused with a message or describe a region that is safe to use. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "region/region.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* Aligned copy, as a mapping would be. */
    void *buf = aligned_alloc(64, (size + 63) / 64 * 64 + 64);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);
    struct vg_err err = {0};
    int rc = region_validate(buf, size, &err);
    if (rc != 0 && err.msg[0] == '\0')
        abort(); /* every refusal says why */
    free(buf);
    return 0;
}
