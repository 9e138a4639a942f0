/* Fuzz target for cli_sched_message_parse (src/cli): kube-scheduler's FailedScheduling
 * messages as `vgpu explain` reads them from events. No crash, no read past the input;
 * an accepted message has between 1 and CLI_REASONS_MAX non-empty reasons. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy = malloc(size ? size : 1); /* exactly size bytes: ASan sees an overread */
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    struct cli_sched_message *m = malloc(sizeof *m);
    struct vg_err err = {0};
    int rc = m ? cli_sched_message_parse(copy, size, m, &err) : -1;
    vg_fuzz_report(rc == 0);
    if (rc == 0) {
        if (m->count == 0 || m->count > CLI_REASONS_MAX || m->available > m->total)
            abort();
        for (size_t i = 0; i < m->count; i++)
            if (m->reasons[i].text[0] == '\0' ||
                strlen(m->reasons[i].text) >= sizeof m->reasons[i].text)
                abort();
    } else if (m != NULL && err.msg[0] == '\0') {
        abort();
    }
    free(m);
    free(copy);
    return 0;
}
