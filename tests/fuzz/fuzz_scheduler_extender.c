/* Fuzz target for vgpu-scheduler's decoders: the extender's ExtenderArgs and
 * ExtenderBindingArgs, the AdmissionReview, and pod objects from the watch (with their
 * vgpu.io/decision and selection annotations). The first byte picks the entry point, the
 * rest is the body. Whatever arrives: no crash, every refusal has a message, and no GPU
 * ever holds more than it has. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "scheduler/sched.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct sched_state *state;

static void setup(void)
{
    vg_log_max_level = -1; /* skipped inputs log; keep the replay quiet */
    struct sched_options o;
    sched_options_default(&o);
    struct vg_err err = {0};
    if (sched_state_new(&o, &state, &err) < 0)
        abort();
    for (int n = 0; n < 3; n++) {
        char text[2048];
        snprintf(text, sizeof text,
                 "{\"metadata\":{\"name\":\"node-%d\",\"annotations\":{\"vgpu.io/gpus\":"
                 "\"{\\\"version\\\":1,\\\"heartbeat\\\":1,\\\"mode\\\":\\\"vgpu\\\","
                 "\\\"gpus\\\":[{\\\"uuid\\\":\\\"GPU-%d-0\\\",\\\"index\\\":0,\\\"model\\\":"
                 "\\\"NVIDIA H100\\\",\\\"memoryMiB\\\":16000,\\\"cores\\\":100,\\\"slots\\\":4,"
                 "\\\"healthy\\\":true},{\\\"uuid\\\":\\\"GPU-%d-1\\\",\\\"index\\\":1,"
                 "\\\"model\\\":\\\"NVIDIA H100\\\",\\\"memoryMiB\\\":16000,\\\"cores\\\":100,"
                 "\\\"slots\\\":4,\\\"healthy\\\":true}]}\"}}}",
                 n, n, n);
        json_t *node = json_loads(text, 0, NULL);
        if (node == NULL)
            abort();
        sched_node_update(state, node);
        json_decref(node);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (state == NULL)
        setup();
    if (size == 0)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    struct sched_now now = {.mono_ms = 1000, .unix_s = 10};
    struct vg_err err = {0};
    char *out = NULL;
    int rc = 0;
    switch (data[0] % 5) {
    case 0:
        rc = sched_filter(state, body, len, now, &out, &err);
        break;
    case 1:
        rc = sched_prioritize(state, body, len, &out, &err);
        break;
    case 2: {
        struct sched_bind b;
        rc = sched_bind_prepare(state, body, len, now, &b, &err);
        if (rc == 0) {
            sched_bind_finish(state, &b, (enum sched_bind_outcome)((data[0] >> 5) % 3), now);
            sched_bind_release(&b);
        }
        break;
    }
    case 3:
        rc = sched_admit(state, body, len, &out, &err);
        break;
    case 4: {
        json_t *pod = json_loadb(body, len, 0, NULL);
        if (pod != NULL) {
            if (data[0] & 0x80)
                sched_pod_delete(state, pod);
            else
                sched_pod_update(state, pod);
            json_decref(pod);
        }
        break;
    }
    }
    if (rc < 0 && err.msg[0] == '\0')
        abort();
    if (rc == 0 && (data[0] % 5 == 0 || data[0] % 5 == 1 || data[0] % 5 == 3) && out == NULL)
        abort();
    free(out);
    if (sched_check_invariants(state, &err) < 0)
        abort();
    /* Expire everything now and then so that state does not only grow. */
    if ((data[0] & 0x40) != 0)
        sched_expire(state, (struct sched_now){.mono_ms = UINT64_MAX / 2, .unix_s = 10});
    return 0;
}
