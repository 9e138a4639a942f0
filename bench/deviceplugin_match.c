/* Matching cost per Allocate (bench/deviceplugin.sh, under callgrind): PODS pods on the
 * node, each with a one-container decision, all allocated but the newest, then ROUNDS
 * matches for the newest.
 *   cache   dp_podcache_match over a cache filled once (what the daemon does);
 *   decode  dp_match_container over the pod list (every decision decoded each time,
 *           what every Allocate did before the cache);
 *   volcano Volcano mode: PODS pods waiting with Volcano's annotations (a gang just
 *           placed), each round finds the oldest (vc_find_pending) and checks its
 *           decision against the node and the ledger (dp_volcano_check); the pods in the
 *           order the watch brings them (placement order, oldest first);
 *   volcano-worst  the same, newest first: every pod is a better candidate than the last.
 * usage: deviceplugin_match cache|decode|volcano|volcano-worst PODS ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/podcache.h"
#include "deviceplugin/volcano_plugin.h"

#define UUID1 "GPU-11111111-2222-3333-4444-555555555555"

/* Volcano mode: the oldest of PODS waiting pods, ROUNDS times. */
static int volcano(uint64_t pods, uint64_t rounds, bool worst)
{
    static struct vc_waiting waiting;
    for (uint64_t i = 0; i < pods; i++) {
        char uid[32], name[32], t[32];
        snprintf(uid, sizeof(uid), "uid-%llu", (unsigned long long)i);
        snprintf(name, sizeof(name), "pod-%llu", (unsigned long long)i);
        snprintf(t, sizeof(t), "%llu",
                 (unsigned long long)(worst ? 1800000000 - i : 1800000000 + i));
        json_t *pod = json_pack(
            "{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s}},s:{s:s,s:[{s:s,s:{s:{s:s}}}]},"
            "s:{s:s}}",
            "metadata", "name", name, "namespace", "default", "uid", uid, "annotations",
            "volcano.sh/vgpu-node", "node-1", "volcano.sh/vgpu-time", t, "volcano.sh/vgpu-ids-new",
            UUID1 ",NVIDIA,1024,10:", "volcano.sh/devices-to-allocate",
            UUID1 ",NVIDIA,1024,10:", "volcano.sh/bind-phase", "allocating", "spec", "nodeName",
            "node-1", "containers", "name", "main", "resources", "limits", "volcano.sh/vgpu-number",
            "1", "status", "phase", "Pending");
        vc_waiting_put(&waiting, pod, "node-1");
        json_decref(pod);
    }
    struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    dpconfig_volcano_defaults(&cfg.volcano);
    struct dp_gpu gpu = {
        .uuid = UUID1, .model = "NVIDIA H100", .memory_mib = 81920, .healthy = true};
    static struct vc_ledger ledger;
    static struct vc_pending pending;
    struct dp_match m;
    struct vc_charge c;
    struct vg_err err = {0};
    json_t *twin;
    char oldest[32];
    snprintf(oldest, sizeof(oldest), "uid-%llu", (unsigned long long)(worst ? pods - 1 : 0));
    int failures = 0;
    for (uint64_t r = 0; r < rounds; r++)
        failures += vc_find_pending(&waiting, "node-1", &cfg.volcano, &ledger, 1, &pending, &twin,
                                    &err) != 0 ||
                    strcmp(pending.pod_uid, oldest) != 0 ||
                    dp_volcano_check(&cfg, &gpu, 1, &ledger, &pending, &m, &c, &err) != 0;
    dpconfig_free(&cfg);
    vc_waiting_free(&waiting);
    if (failures)
        fprintf(stderr, "deviceplugin_match: %d wrong matches (%s)\n", failures, err.msg);
    return failures ? 1 : 0;
}

static char newest[32];

/* Everything but the newest pod's container is allocated. */
static bool allocated(void *arg, const char *uid, const char *container)
{
    (void)arg;
    (void)container;
    return strcmp(uid, newest) != 0;
}

int main(int argc, char **argv)
{
    uint64_t pods = 0, rounds = 0;
    if (argc != 4 ||
        (strcmp(argv[1], "cache") != 0 && strcmp(argv[1], "decode") != 0 &&
         strcmp(argv[1], "volcano") != 0 && strcmp(argv[1], "volcano-worst") != 0) ||
        vg_parse_u64(argv[2], 1, 100000, &pods, NULL) < 0 ||
        vg_parse_u64(argv[3], 0, 1000000, &rounds, NULL) < 0) {
        fprintf(stderr,
                "usage: deviceplugin_match cache|decode|volcano|volcano-worst PODS ROUNDS\n");
        return 2;
    }
    if (argv[1][0] == 'v')
        return volcano(pods, rounds, strchr(argv[1], '-') != NULL);
    json_t *list = json_array();
    for (uint64_t i = 0; i < pods; i++) {
        char uid[32], name[32], text[512];
        snprintf(uid, sizeof(uid), "uid-%llu", (unsigned long long)i);
        snprintf(name, sizeof(name), "pod-%llu", (unsigned long long)i);
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"node-1\",\"time\":%llu,\"containers\":[{\"name\":"
                 "\"main\",\"gpus\":[{\"uuid\":\"GPU-11111111-2222-3333-4444-555555555555\","
                 "\"memoryMiB\":1024,\"cores\":10}]}]}",
                 (unsigned long long)(1700000000 + i));
        /* A pod of vgpu-scheduler's whose spec asks for what its decision gives. */
        json_array_append_new(
            list, json_pack("{s:{s:s,s:s,s:s,s:{s:s}},s:{s:s,s:s,s:[{s:s,s:{s:{s:s,s:s,s:s}}}]},"
                            "s:{s:s}}",
                            "metadata", "name", name, "namespace", "default", "uid", uid,
                            "annotations", ANNOT_KEY_DECISION, text, "spec", "nodeName", "node-1",
                            "schedulerName", "vgpu-scheduler", "containers", "name", "main",
                            "resources", "limits", "nvidia.com/gpu", "1", "nvidia.com/gpumem",
                            "1Gi", "nvidia.com/gpucores", "10", "status", "phase", "Pending"));
    }
    snprintf(newest, sizeof(newest), "uid-%llu", (unsigned long long)(pods - 1));
    struct dp_podcache *cache = dp_podcache_new("node-1");
    dp_podcache_replace(cache, list);
    struct dp_match m;
    struct vg_err err = {0};
    char uuids[1][ANNOT_UUID_MAX] = {"GPU-11111111-2222-3333-4444-555555555555"};
    int failures = 0;
    for (uint64_t r = 0; r < rounds; r++) {
        int rc = argv[1][0] == 'c'
                     ? dp_podcache_match(cache, uuids, 1, allocated, NULL, &m, &err)
                     : dp_match_container(list, "node-1", uuids, 1, allocated, NULL, &m, &err);
        failures += rc != 0 || strcmp(m.pod_uid, newest) != 0;
    }
    dp_podcache_free(cache);
    json_decref(list);
    if (failures) {
        fprintf(stderr, "deviceplugin_match: %d wrong matches (%s)\n", failures, err.msg);
        return 1;
    }
    return 0;
}
