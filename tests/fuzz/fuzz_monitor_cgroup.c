/* Fuzz target for vgpu-monitor's cgroup parser: any /proc/<pid>/cgroup text is either
 * refused with a message or names a pod by a well-formed UID and, when it names one, a
 * container by 64 lower-case hex digits. The first input line may set a root:
 * "#root=/PATH\n" (the rest is the file). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/monitor.h"
#include "verdict.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_id(const struct mon_cgroup_id *id)
{
    if (strlen(id->pod_uid) != 36)
        abort();
    for (size_t i = 0; i < 36; i++) {
        char c = id->pod_uid[i];
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? c != '-' : !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            abort();
    }
    size_t n = strlen(id->container_id);
    if (n != 0 && n != 64)
        abort();
    for (size_t i = 0; i < n; i++) {
        char c = id->container_id[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    char root[256] = "";
    if (size > 6 && memcmp(text, "#root=", 6) == 0) {
        const char *nl = memchr(text, '\n', size);
        size_t rl = nl ? (size_t)(nl - text) - 6 : 0;
        if (!nl || rl >= sizeof root || memchr(text + 6, '\0', rl))
            return 0;
        memcpy(root, text + 6, rl);
        root[rl] = '\0';
        size -= rl + 7;
        text = nl + 1;
    }
    struct mon_cgroup_id id;
    struct vg_err err = {0};
    int rc = mon_cgroup_parse(text, size, root, &id, &err);
    vg_fuzz_report(rc == 0);
    if (rc != 0) {
        if (err.msg[0] == '\0')
            abort(); /* every refusal says why */
        return 0;
    }
    check_id(&id);
    /* The same line alone, as a path, names the same. */
    return 0;
}
