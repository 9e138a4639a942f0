/* fakegpu libcuda: CUDA_VISIBLE_DEVICES, read once by cuInit as the real driver does.
 *
 * The value is a comma-separated list; CUDA ordinal n is the n-th entry. An entry is a
 * physical index (what NVML and nvidia-smi number the device) or a UUID as NVML prints it
 * ("GPU-..."), whole or any prefix that names exactly one device. The rules follow the
 * driver, as documented in the CUDA programming guide and as PyTorch's driver-free device
 * count reproduces them:
 *   - an index is read like strtoul: leading blanks skipped, the leading digits taken,
 *     anything after them ignored ("1gpu" is 1);
 *   - the list ends at the first entry that names no device (out of range, not a number
 *     or UUID, a UUID prefix that matches none or several devices, an empty entry):
 *     "0,2,-1,1" is devices 0 and 2;
 *   - a device named twice makes the whole list empty ("0,0" and "0,1,0" show nothing);
 *   - an empty list (the value is empty, or its first entry is invalid) means no device,
 *     and cuInit answers CUDA_ERROR_NO_DEVICE;
 *   - a MIG device is named by its UUID ("MIG-...", whole or a unique prefix); as with the
 *     driver, a process sees one MIG device at most: the list ends at a second one.
 * Everything inside libcuda works on ordinals; fg_phys() turns one into the physical
 * index only where the shared state is called, so memory, contexts, streams and NVML's
 * view all land on the physical device. NVML itself ignores the variable. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fakegpu/cuda_internal.h"

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* The physical device entry [s, s + n) names, or -1; *mig the MIG device slot it names on
 * it (-1: the whole GPU). */
static int visible_entry(const char *s, size_t n, const struct fg_device_info *devs, int count,
                         int *mig)
{
    *mig = -1;
    while (n > 0 && is_blank(*s)) {
        s++;
        n--;
    }
    while (n > 0 && is_blank(s[n - 1]))
        n--;
    if (n == 0)
        return -1;
    if (*s >= '0' && *s <= '9') {
        uint64_t v = 0;
        for (size_t i = 0; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            v = v * 10 + (uint64_t)(s[i] - '0');
            if (v >= (uint64_t)count)
                return -1; /* also stops the value from overflowing */
        }
        return (int)v;
    }
    int found = -1;
    if (n >= 4 && memcmp(s, "MIG-", 4) == 0) {
        for (int d = 0; d < count; d++) {
            for (unsigned k = 0; devs[d].mig_enabled && k < devs[d].mig_count && k < FG_MAX_MIG;
                 k++) {
                const struct fg_mig_info *mi = &devs[d].mig[k];
                if (mi->gi_id == 0 || !mi->has_ci || n > strlen(mi->uuid) ||
                    memcmp(mi->uuid, s, n) != 0)
                    continue;
                if (found >= 0)
                    return -1; /* ambiguous prefix */
                found = d;
                *mig = (int)k;
            }
        }
        return found;
    }
    if (n < 4 || memcmp(s, "GPU-", 4) != 0)
        return -1;
    for (int d = 0; d < count; d++) {
        if (n <= strlen(devs[d].uuid) && memcmp(devs[d].uuid, s, n) == 0) {
            if (found >= 0)
                return -1; /* ambiguous prefix */
            found = d;
        }
    }
    return found;
}

int fg_visible_parse(const char *spec, const struct fg_device_info *devs, int count, int *phys,
                     int *mig)
{
    if (spec == NULL) {
        for (int d = 0; d < count; d++) {
            phys[d] = d;
            mig[d] = -1;
        }
        return count;
    }
    int n = 0;
    bool had_mig = false;
    const char *p = spec;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int m;
        int d = visible_entry(p, len, devs, count, &m);
        if (d < 0 || (m >= 0 && had_mig))
            break;
        had_mig |= m >= 0;
        mig[n] = m;
        for (int i = 0; i < n; i++)
            if (phys[i] == d)
                return 0; /* a device named twice hides every device */
        phys[n++] = d;    /* distinct devices: never more than count */
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return n;
}
