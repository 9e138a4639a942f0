/* Fuzz target for the reading of an MPS control daemon's answer to
 * get_default_active_thread_percentage: any bytes either give a value from 0 to 100 or
 * are refused with a message. */
#include <stdint.h>
#include <stdlib.h>

#include "deviceplugin/deviceplugin.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    unsigned v = 0;
    struct vg_err err = {0};
    int rc = dp_mps_parse_percentage((const char *)data, size, &v, &err);
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        if (v > 100)
            abort();
    } else if (err.msg[0] == '\0') {
        abort();
    }
    return 0;
}
