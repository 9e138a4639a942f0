/* Fuzz target for the MIG capability table reader (dp_mig_cap_minor): no crash, no read
 * past the input, a refusal always names the table and the line, a lookup that succeeds
 * returns a minor within the accepted range. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "deviceplugin/deviceplugin.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    bool malformed = false; /* a lookup found the table malformed (not just a miss) */
    static const int cases[][3] = {{0, 1, -1}, {0, 1, 0}, {1, 2, 0}, {10, 13, -1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        unsigned minor = 0;
        struct vg_err err = {0};
        int rc = dp_mig_cap_minor(s, (unsigned)cases[i][0], (unsigned)cases[i][1], cases[i][2],
                                  &minor, &err);
        if (rc == -EINVAL && strstr(err.msg, "mig-minors: line ") == NULL)
            abort();
        if (rc == 0 && minor > (1u << 20))
            abort();
        if (rc != 0 && rc != -EINVAL && rc != -ENOENT)
            abort();
        if (rc == -EINVAL)
            malformed = true;
    }
    vg_fuzz_report(!malformed);
    free(s);
    return 0;
}
