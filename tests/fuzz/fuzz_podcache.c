/* Fuzzes the device plugin's decision cache (src/deviceplugin/podcache.c) with watch
 * event sequences: the input is a list of operations on 8 pod slots — put a pod (one of
 * several decisions: usable, two containers, garbled, another node's, none; phases;
 * being deleted; another scheduler's pod, a spec that does not match, a creation time), delete it,
 * relist everything, match and "allocate", roll an allocation back. After every match the cache
 * maintained incrementally must agree with a cache built from scratch over the same pods and
 * directories (dp_match_container): same result, same pod, same container. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/podcache.h"

#define SLOTS 8
#define UUID0 "GPU-11111111-2222-3333-4444-555555555555"
#define UUID1 "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct world {
    json_t *pods[SLOTS];
    bool dirs[SLOTS][2]; /* container "a" / "b" of the pod in each slot has a directory */
};

static int slot_of(const char *uid)
{
    return uid[0] == 'u' && uid[1] >= '0' && uid[1] < '0' + SLOTS ? uid[1] - '0' : -1;
}

static bool on_disk(void *arg, const char *uid, const char *container)
{
    const struct world *w = arg;
    int s = slot_of(uid);
    return s >= 0 && (container[0] == 'a' || container[0] == 'b') && w->dirs[s][container[0] - 'a'];
}

static const char *decision(unsigned variant, unsigned time)
{
    static char text[512];
    switch (variant % 6) {
    case 0:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"a\","
                 "\"gpus\":[{\"uuid\":\"" UUID0 "\",\"memoryMiB\":1,\"cores\":1}]}]}",
                 time);
        return text;
    case 1:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"a\","
                 "\"gpus\":[{\"uuid\":\"" UUID1 "\",\"memoryMiB\":2,\"cores\":0}]},{\"name\":"
                 "\"b\",\"gpus\":[{\"uuid\":\"" UUID0 "\",\"memoryMiB\":3,\"cores\":0},{\"uuid\":"
                 "\"" UUID1 "\",\"memoryMiB\":4,\"cores\":0}]}]}",
                 time);
        return text;
    case 2:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"b\","
                 "\"gpus\":[]},{\"name\":\"a\",\"gpus\":[{\"uuid\":\"" UUID1
                 "\",\"memoryMiB\":5,\"cores\":0}]}]}",
                 time);
        return text;
    case 3:
        return "{\"version\":1,\"containers\":7}";
    case 4:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"other\",\"time\":%u,\"containers\":[]}", time);
        return text;
    default:
        return NULL;
    }
}

static json_t *make_pod(unsigned slot, uint8_t a, uint8_t b)
{
    static const char *const phases[] = {"Pending", "Running", "Succeeded", "Failed"};
    char uid[8], name[8];
    snprintf(uid, sizeof(uid), "u%u", slot);
    snprintf(name, sizeof(name), "p%u", (unsigned)(b % 3)); /* names collide on purpose */
    /* The spec the decisions are checked against: containers a (1 GPU) and b (2), or,
     * with bit 0x40 of a, a b whose count matches no decision; bit 0x20 another scheduler;
     * bit 0x80 a creationTimestamp that moves the decision's time. */
    json_t *pod = json_pack(
        "{s:{s:s,s:s,s:s,s:{}},s:{s:s,s:s,s:[{s:s,s:{s:{s:s}}},{s:s,s:{s:{s:s}}}]},s:{s:s}}",
        "metadata", "name", name, "namespace", "ns", "uid", uid, "annotations", "spec", "nodeName",
        (b & 0x80) ? "elsewhere" : "n", "schedulerName",
        (a & 0x20) ? "default-scheduler" : "vgpu-scheduler", "containers", "name", "a", "resources",
        "limits", "nvidia.com/gpu", "1", "name", "b", "resources", "limits", "nvidia.com/gpu",
        (a & 0x40) ? "3" : "2", "status", "phase", phases[(b >> 3) % 4]);
    const char *text = decision(a, (a >> 3) % 4);
    json_t *meta = json_object_get(pod, "metadata");
    if (text)
        json_object_set_new(json_object_get(meta, "annotations"), ANNOT_KEY_DECISION,
                            json_string(text));
    if (a & 0x80)
        json_object_set_new(meta, "creationTimestamp", json_string("1970-01-01T00:00:02Z"));
    if ((b & 0x60) == 0x60)
        json_object_set_new(meta, "deletionTimestamp", json_string("2026-01-01T00:00:00Z"));
    return pod;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct world w;
    memset(&w, 0, sizeof(w));
    struct dp_podcache *cache = dp_podcache_new("n");
    for (size_t at = 0; at + 3 <= size; at += 3) {
        uint8_t op = data[at], x = data[at + 1], y = data[at + 2];
        unsigned slot = op % SLOTS;
        switch ((op >> 3) % 6) {
        case 0:
        case 1: /* ADDED / MODIFIED */
            json_decref(w.pods[slot]);
            w.pods[slot] = make_pod(slot, x, y);
            dp_podcache_put(cache, w.pods[slot]);
            break;
        case 2: { /* DELETED: its directories are swept */
            char uid[8];
            snprintf(uid, sizeof(uid), "u%u", slot);
            json_decref(w.pods[slot]);
            w.pods[slot] = NULL;
            w.dirs[slot][0] = w.dirs[slot][1] = false;
            dp_podcache_remove(cache, uid);
            break;
        }
        case 3: { /* relist */
            json_t *items = json_array();
            for (unsigned s = 0; s < SLOTS; s++)
                if (w.pods[s])
                    json_array_append(items, w.pods[s]);
            dp_podcache_replace(cache, items);
            json_decref(items);
            break;
        }
        case 4: { /* Allocate: match, compare, make the directory */
            size_t count = x % 2 + 1;
            char uuids[2][ANNOT_UUID_MAX] = {UUID0, UUID1};
            char(*want)[ANNOT_UUID_MAX] = (y & 1) ? NULL : (y & 2) ? &uuids[1] : uuids;
            if (want == &uuids[1])
                count = 1;
            struct dp_match got, fresh;
            struct vg_err e1 = {0}, e2 = {0};
            int rc = dp_podcache_match(cache, want, count, on_disk, &w, &got, &e1);
            json_t *items = json_array();
            for (unsigned s = 0; s < SLOTS; s++)
                if (w.pods[s])
                    json_array_append(items, w.pods[s]);
            int rc2 = dp_match_container(items, "n", want, count, on_disk, &w, &fresh, &e2);
            json_decref(items);
            if (rc != rc2)
                abort();
            if (rc == 0) {
                if (strcmp(got.pod_uid, fresh.pod_uid) != 0 ||
                    strcmp(got.container.name, fresh.container.name) != 0 ||
                    got.container.gpu_count != fresh.container.gpu_count ||
                    memcmp(got.container.gpus, fresh.container.gpus,
                           got.container.gpu_count * sizeof(got.container.gpus[0])) != 0)
                    abort();
                int s = slot_of(got.pod_uid);
                if (s < 0 || got.container.gpu_count != count)
                    abort();
                w.dirs[s][got.container.name[0] - 'a'] = true;
                dp_podcache_set_allocated(cache, got.pod_uid, got.container.name, true);
            } else if (strncmp(e1.msg, e2.msg, 40) != 0) {
                abort();
            }
            break;
        }
        default: { /* Allocate rolled back */
            char uid[8];
            snprintf(uid, sizeof(uid), "u%u", slot);
            w.dirs[slot][x & 1] = false;
            dp_podcache_set_allocated(cache, uid, (x & 1) ? "b" : "a", false);
            break;
        }
        }
    }
    dp_podcache_free(cache);
    for (unsigned s = 0; s < SLOTS; s++)
        json_decref(w.pods[s]);
    return 0;
}
