/* Fuzz target for cli_quantity_milli (src/cli), the Kubernetes quantities `vgpu sim`
 * exports: no crash, a refusal always says why, and an accepted plain integer is that
 * many thousand milli-units. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "cli/cli.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    struct vg_err err = {0};
    uint64_t milli = 0, u = 0;
    int rc = cli_quantity_milli(s, &milli, &err);
    vg_fuzz_report(rc == 0);
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    struct vg_err err2 = {0};
    if (vg_parse_u64(s, 0, UINT64_MAX / 1000, &u, &err2) == 0 && (rc != 0 || milli != u * 1000))
        abort();
    free(s);
    return 0;
}
