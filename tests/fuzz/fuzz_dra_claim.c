/* Fuzz target for the DRA plugin's claim decoder: the input is a ResourceClaim's JSON as
 * the API server would send it. No crash, no leak, and every accepted claim is
 * self-consistent: names that reach paths are Kubernetes names, shares in range. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dra/dra.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct dra_claim claim;
    struct vg_err err = {0};
    int rc = dra_claim_decode_text((const char *)data, size, DRA_DRIVER_DEFAULT, &claim, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (rc > 0 || err.msg[0] == '\0')
            abort();
        return 0;
    }
    if (!annot_pod_uid(claim.uid) || !annot_dns_label(claim.ns) || claim.count > DRA_MAX_RESULTS)
        abort();
    for (unsigned i = 0; i < claim.count; i++) {
        const struct dra_result *r = &claim.results[i];
        if (!annot_dns_label(r->device) || strstr(r->request, "..") || r->cores > 100 ||
            (r->share_id[0] && !annot_pod_uid(r->share_id)))
            abort();
    }
    return 0;
}
