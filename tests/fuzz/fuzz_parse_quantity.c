/* Fuzz target for the number and quantity parsers: no crash, no read past the input,
 * and every accepted quantity is consistent with its parts, for vgpu's byte quantities
 * and for Kubernetes quantities alike. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    size_t len = strlen(s); /* the parsers see the text up to the first NUL */
    struct vg_err err;
    uint64_t bytes, mib, u;
    int64_t i;
    int rc_bytes = vg_parse_bytes(s, &bytes, &err);
    int rc_mib = vg_parse_mib_default(s, &mib, &err);
    /* With an explicit unit both parsers agree. */
    if (rc_bytes == 0 && rc_mib == 0 && len > 0 && (s[len - 1] < '0' || s[len - 1] > '9') &&
        bytes != mib)
        abort();
    if (vg_parse_u64(s, 0, UINT64_MAX, &u, &err) == 0 && (rc_bytes != 0 || bytes != u))
        abort();
    (void)vg_parse_i64(s, INT64_MIN, INT64_MAX, &i, &err);
    /* Kubernetes quantities: a plain whole number is the same count and the same MiB;
     * binary suffixes scale exactly; a refusal always says why. */
    uint64_t kmib, kcount;
    int rc_kmib = vg_parse_kube_mib(s, UINT64_MAX, &kmib, &err);
    vg_fuzz_report(rc_kmib == 0); /* ok-/near- inputs are Kubernetes gpumem values */
    if (rc_kmib < 0 && err.msg[0] == '\0')
        abort();
    int rc_kcount = vg_parse_kube_count(s, UINT64_MAX, &kcount, &err);
    if (rc_kcount < 0 && err.msg[0] == '\0')
        abort();
    if (vg_parse_u64(s, 0, INT64_MAX, &u, &err) == 0 &&
        (rc_kmib != 0 || kmib != u || rc_kcount != 0 || kcount != u))
        abort();
    if (rc_kcount == 0 && len > 2 && s[len - 1] == 'i' && s[len - 2] == 'M' &&
        (rc_kmib != 0 || kmib != (kcount + (1u << 20) - 1) >> 20))
        abort();
    free(s);
    return 0;
}
