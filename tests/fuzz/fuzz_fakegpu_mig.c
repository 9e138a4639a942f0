/* Fuzz target for the FAKEGPU_MIG parser, over four GPUs (H100 80GB, A100 40GB, A30, T4):
 * no crash, no read past the input, every refusal names the variable, and every accepted
 * layout fits its GPU (instances within the model's compute and memory slices, on models
 * with a profile table at allowed, non-overlapping placements, UUIDs formatted and
 * distinct, only MIG-capable models in MIG mode; "GPU:" alone is MIG mode without any). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "fakegpu/state.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char devices[] = "NVIDIA H100 80GB HBM3:81559MiB:132,NVIDIA A100-SXM4-40GB:"
                                  "40GiB:108,NVIDIA A30:24GiB:56,Tesla T4:16GiB:40";
    struct fg_device_info devs[4];
    struct vg_err err = {0};
    int count = 0;
    if (fg_parse_devices(devices, devs, 4, &count, &err) != 0 || count != 4)
        abort();
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    int rc = fg_parse_mig(s, devs, count, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (strncmp(err.msg, "FAKEGPU_MIG", 11) != 0)
            abort();
    } else {
        for (int i = 0; i < count; i++) {
            unsigned slices, mem_slices, used = 0, mem_used = 0;
            fg_mig_geometry(devs[i].name, &slices, &mem_slices);
            if (devs[i].mig_enabled && slices == 0)
                abort();
            if (!devs[i].mig_enabled && devs[i].mig_count != 0)
                abort();
            if (devs[i].mig_count > FG_MAX_MIG)
                abort();
            unsigned busy = 0;
            for (unsigned m = 0; m < devs[i].mig_count; m++) {
                const struct fg_mig_info *mi = &devs[i].mig[m];
                unsigned bits = ((1u << mi->mem_slices) - 1) << mi->start;
                if (mi->gi_id != m + 1 || !mi->has_ci || (busy & bits) != 0 ||
                    mi->start + mi->mem_slices > mem_slices)
                    abort();
                busy |= bits;
                const struct fg_mig_profile *p = fg_mig_profile_by_id(&devs[i], mi->profile_id);
                if (p != NULL && (!(p->starts & (1u << mi->start)) || p->size != mi->mem_slices ||
                                  strcmp(p->name, mi->profile) != 0))
                    abort();
                used += mi->slices;
                mem_used += mi->mem_slices;
                if (strlen(mi->uuid) != 40 || strncmp(mi->uuid, "MIG-", 4) != 0)
                    abort();
                if (mi->memory_bytes == 0 || mi->memory_bytes > devs[i].total_bytes)
                    abort();
                for (unsigned k = 0; k < m; k++)
                    if (strcmp(devs[i].mig[k].uuid, mi->uuid) == 0)
                        abort();
            }
            if (used > slices || mem_used > mem_slices)
                abort();
        }
    }
    free(s);
    return 0;
}
