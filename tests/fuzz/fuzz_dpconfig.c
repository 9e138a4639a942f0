/* Fuzz target for the device plugin's config loader: any input either loads (and then
 * dumps and validates again without complaint) or is refused with a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dpconfig/dpconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dp_config cfg;
    struct vg_err err = {0};
    dp_config_defaults(&cfg);
    if (dp_config_load_buffer("fuzz.yaml", (const char *)data, size, &cfg, &err) == 0) {
        FILE *null = fopen("/dev/null", "w");
        if (null != NULL) {
            dp_config_dump(&cfg, null);
            fclose(null);
        }
        if (dp_config_validate(&cfg, &err) != 0)
            abort(); /* a loaded config stays valid */
    } else if (err.msg[0] == '\0') {
        abort(); /* a refusal always says why */
    }
    dp_config_free(&cfg);
    return 0;
}
