/* Fuzz target for libvgpu's limits file: any bytes are either refused with a message or
 * give a configuration whose every value is within its documented bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "libvgpu/config.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vgpu_config c;
    struct vg_err err = {0};
    vgpu_config_init(&c);
    int rc = vgpu_config_parse_file(&c, (const char *)data, size, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (err.msg[0] == '\0')
            abort(); /* every refusal says why */
        return 0;
    }
    if (!c.from_file || size > VGPU_LIMITS_FILE_MAX || c.region_path[0] != '/' ||
        memchr(c.region_path, '\0', sizeof c.region_path) == NULL ||
        c.context_bytes > (UINT64_C(65536) << 20))
        abort();
    for (unsigned i = 0; i < VGPU_CONFIG_MAX_DEVICES; i++)
        if (vgpu_config_sm_limit(&c, i) > 100)
            abort();
    return 0;
}
