/* Fuzz target for the ResourceSlice list decoder of the DRA driver's publisher
 * (dra_pool_decode): the input is a list response body. No crash, no leak; an accepted
 * list gives NUL-terminated names and resourceVersions and non-negative generations, the
 * largest being max_generation. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/slices.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t jerr;
    json_t *list = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &jerr);
    if (list == NULL) {
        vg_fuzz_report(false);
        return 0;
    }
    struct dra_pool pool;
    struct vg_err err = {0};
    int rc = dra_pool_decode(list, "gpu.vgpu.io", "node-1", &pool, &err);
    if (rc == 0) {
        if (pool.count > DRA_MAX_SLICES)
            abort();
        int64_t max = -1;
        for (size_t i = 0; i < pool.count; i++) {
            const struct dra_pool_slice *s = &pool.slices[i];
            if (memchr(s->name, '\0', sizeof s->name) == NULL || s->name[0] == '\0' ||
                memchr(s->resource_version, '\0', sizeof s->resource_version) == NULL ||
                s->generation < 0)
                abort();
            if (s->generation > max)
                max = s->generation;
        }
        if (max != pool.max_generation)
            abort();
    } else if (err.code >= 0 || err.msg[0] == '\0') {
        abort();
    }
    vg_fuzz_report(rc == 0 && pool.count > 0);
    json_decref(list);
    return 0;
}
