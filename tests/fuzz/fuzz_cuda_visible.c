/* Fuzz target for fakegpu's CUDA_VISIBLE_DEVICES parser: any value yields a list of
 * distinct physical devices in range, never more than there are. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fakegpu/cuda_internal.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct fg_device_info devs[3];
    static const char *const uuids[] = {"GPU-0a1b2c3d-0000-4000-8000-000000000001",
                                        "GPU-0a1b2c3d-0000-4000-8000-000000000002",
                                        "GPU-9f8e7d6c-0000-4000-8000-000000000003"};
    for (int i = 0; i < 3; i++)
        memcpy(devs[i].uuid, uuids[i], strlen(uuids[i]) + 1);
    char *spec = malloc(size + 1);
    if (spec == NULL)
        return 0;
    memcpy(spec, data, size);
    spec[size] = '\0';
    int phys[FG_MAX_DEVICES], mig[FG_MAX_DEVICES];
    int n = fg_visible_parse(spec, devs, 3, phys, mig);
    if (n < 0 || n > 3)
        abort();
    int entries = spec[0] != '\0';
    for (const char *c = spec; *c != '\0'; c++)
        entries += *c == ',';
    vg_fuzz_report(n == entries); /* every entry named a device */
    for (int i = 0; i < n; i++) {
        if (phys[i] < 0 || phys[i] >= 3 || mig[i] != -1) /* these GPUs have no MIG */
            abort();
        for (int j = 0; j < i; j++)
            if (phys[i] == phys[j])
                abort();
    }
    free(spec);
    return 0;
}
