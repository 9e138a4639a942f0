/* Fuzz target for the FAKEGPU_DEVICES parser: no crash, no read past the input, and every
 * accepted device list is well formed (names within bounds and free of separators, SMs in
 * range, memory at least 1 MiB, UUIDs and PCI ids formatted and distinct). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "fakegpu/state.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    struct fg_device_info devs[FG_MAX_DEVICES];
    struct vg_err err = {0};
    int count = -1;
    int rc = fg_parse_devices(s, devs, FG_MAX_DEVICES, &count, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (err.msg[0] == '\0' || strncmp(err.msg, "FAKEGPU_DEVICES", 15) != 0)
            abort(); /* every refusal names the variable */
    } else {
        if (count < 1 || count > FG_MAX_DEVICES)
            abort();
        for (int i = 0; i < count; i++) {
            size_t n = strnlen(devs[i].name, FG_NAME_MAX);
            if (n == 0 || n >= FG_NAME_MAX || strpbrk(devs[i].name, ":,") != NULL)
                abort();
            if (devs[i].sm_count < 1 || devs[i].sm_count > 1024)
                abort();
            if (devs[i].total_bytes < (1u << 20))
                abort();
            if (strlen(devs[i].uuid) != 40 || strncmp(devs[i].uuid, "GPU-", 4) != 0)
                abort();
            for (int j = 0; j < i; j++) {
                if (strcmp(devs[i].pci_bus_id, devs[j].pci_bus_id) == 0)
                    abort();
            }
        }
    }
    free(s);
    return 0;
}
