/* Fuzz target for what `vgpu top` reads from the device plugin's containers directory
 * (src/cli): the owner line of a limits file and a directory's name. No crash, no read past
 * the input; accepted names are Kubernetes names (no '/', no control characters). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_name(const char *s)
{
    if (s[0] == '\0' || strlen(s) >= CLI_NAME_MAX)
        abort();
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == '/' || *p == ' ')
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    char ns[CLI_NAME_MAX], pod[CLI_NAME_MAX], container[CLI_NAME_MAX];
    struct vg_err err = {0};
    int rc = cli_limits_owner_parse(copy, size, ns, pod, container, &err);
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        check_name(ns);
        check_name(pod);
        check_name(container);
    }
    /* the same bytes as a directory name */
    char *name = malloc(size + 1);
    if (name != NULL) {
        memcpy(name, data, size);
        name[size] = '\0';
        char uid[CLI_NAME_MAX], ctr[CLI_NAME_MAX];
        if (cli_container_dir_parse(name, uid, ctr, &err) == 0) {
            check_name(uid);
            check_name(ctr);
        }
        free(name);
    }
    free(copy);
    return 0;
}
