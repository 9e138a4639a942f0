/* Fuzz target for fakegpu's MPS client variables (cuda_mps.c), over three visible
 * devices: the input is CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, a newline, then
 * CUDA_MPS_PINNED_DEVICE_MEM_LIMIT. No crash, no read past the input; a refusal names
 * one of the variables; an accepted value gives a share in (0, 100 %], non-zero limits,
 * and kernel durations that only grow, by at most 100000 times. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
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
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    char *limits = strchr(s, '\n');
    if (limits != NULL)
        *limits++ = '\0';
    struct fg_mps m;
    struct vg_err err = {0};
    int rc = fg_mps_parse("/tmp/mps", s, limits, devs, 3, &m, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (rc != -EINVAL || strncmp(err.msg, "CUDA_MPS_", 9) != 0)
            abort();
    } else {
        if (!m.client || m.share == 0 || m.share > FG_MPS_SHARE_FULL)
            abort();
        for (int i = 0; i < FG_MAX_DEVICES; i++)
            if (m.limit[i] == 0 || (i >= 3 && m.limit[i] != UINT64_MAX))
                abort();
        static const uint64_t ns[] = {0, 1, 10000, 20000000, UINT64_MAX / 3, UINT64_MAX};
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            uint64_t t = fg_mps_kernel_ns(&m, ns[i]);
            if (t < ns[i] ||
                (ns[i] <= UINT64_MAX / FG_MPS_SHARE_FULL && t > ns[i] * FG_MPS_SHARE_FULL))
                abort();
            if (m.share == FG_MPS_SHARE_FULL && t != ns[i])
                abort();
            /* The stretch is exact: ceil(ns * num / den), saturated; the MPS share, and
             * MIG SM shares (an H100's 1g.10gb and 3g.40gb, an A100's 1g.5gb). */
            static const uint64_t frac[][2] = {{132, 16}, {132, 60}, {108, 14}, {16, 132}};
            for (size_t k = 0; k <= sizeof frac / sizeof frac[0]; k++) {
                uint64_t num = k == 0 ? FG_MPS_SHARE_FULL : frac[k - 1][0];
                uint64_t den = k == 0 ? m.share : frac[k - 1][1];
                unsigned __int128 want =
                    num <= den ? ns[i] : ((unsigned __int128)ns[i] * num + den - 1) / den;
                if (want > UINT64_MAX)
                    want = UINT64_MAX;
                if (fg_stretch_ns(ns[i], num, den) != (uint64_t)want)
                    abort();
            }
        }
    }
    /* Not a client: nothing is read, everything is unlimited. */
    if (fg_mps_parse(NULL, s, limits, devs, 3, &m, &err) != 0 || m.client ||
        m.share != FG_MPS_SHARE_FULL || m.limit[0] != UINT64_MAX)
        abort();
    free(s);
    return 0;
}
