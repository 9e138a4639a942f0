/* Fuzz target for /ui/explain's query reader (sched_view_explain_key, src/scheduler/view.c).
 * Input: the query string. Checked: an accepted query gives "NS/NAME" with both parts
 * Kubernetes names (1..253 of a-z, 0-9, '-', '.'); writing that key back as a query
 * ("namespace=NS&pod=NAME", and the reverse order) reads as the same key; a refusal
 * always carries a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/view.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 253)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-' ||
              s[i] == '.'))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 2 * SCHED_VIEW_QUERY_MAX)
        return 0;
    char *query = malloc(size + 1);
    if (query == NULL)
        return 0;
    memcpy(query, data, size);
    query[size] = '\0';
    char key[600];
    struct vg_err err = {0};
    int rc = sched_view_explain_key(query, key, sizeof key, &err);
    vg_fuzz_report(rc == 0);
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    if (rc == 0) {
        const char *slash = strchr(key, '/');
        if (slash == NULL || !name_ok(key, (size_t)(slash - key)) ||
            !name_ok(slash + 1, strlen(slash + 1)))
            abort();
        char again[600], back[600];
        for (int order = 0; order < 2; order++) {
            if (order == 0)
                snprintf(back, sizeof back, "namespace=%.*s&pod=%s", (int)(slash - key), key,
                         slash + 1);
            else
                snprintf(back, sizeof back, "pod=%s&namespace=%.*s", slash + 1, (int)(slash - key),
                         key);
            struct vg_err e2 = {0};
            if (sched_view_explain_key(back, again, sizeof again, &e2) != 0 ||
                strcmp(again, key) != 0)
                abort();
        }
    }
    free(query);
    return 0;
}
