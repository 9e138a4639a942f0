/* endpoints_filter_cost: /filter in-process with and without the promise rules of the
 * closed endpoints (docs/scheduler.md, "Which pods /filter promises capacity to"): the
 * pending-pod check and the per-namespace bound. NODES nodes x 8 GPUs are offered by
 * name to FILTERS pods of one GPU x 1000 MiB, each pending in the watch and each promise
 * expired before the next filter. Run under callgrind by bench/endpoints_filter_cost.sh,
 * which takes the difference between two FILTERS counts as the cost per filter.
 * With MIG 1 every GPU is an H100 in dynamic MIG mode and the pods ask 9,000, 18,000 and
 * 40,000 MiB in turn and keep their instances (no expiry), so each filter is a MIG
 * decision against the learned mix of the pods held so far.
 * usage: endpoints_filter_cost CHECK(0|1) FILTERS [NODES [MIG(0|1)]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/parse.h"
#include "scheduler/sched.h"

/* HAMi's documented allowlist on an H100 80GB, as a node publishes it, no instances yet. */
#define MIG_FIELD                                                                                  \
    ",\"mig\":{\"slices\":8,\"profiles\":["                                                        \
    "{\"name\":\"1g.10gb\",\"id\":19,\"memoryMiB\":9984,\"sms\":16,\"size\":1,"                    \
    "\"placements\":[0,1,2,3,4,5,6]},"                                                             \
    "{\"name\":\"2g.20gb\",\"id\":14,\"memoryMiB\":20096,\"sms\":32,\"size\":2,"                   \
    "\"placements\":[0,2,4]},"                                                                     \
    "{\"name\":\"3g.40gb\",\"id\":9,\"memoryMiB\":40448,\"sms\":60,\"size\":4,"                    \
    "\"placements\":[0,4]},"                                                                       \
    "{\"name\":\"7g.80gb\",\"id\":0,\"memoryMiB\":81152,\"sms\":132,\"size\":8,"                   \
    "\"placements\":[0]}],\"instances\":[]}"

int main(int argc, char **argv)
{
    uint64_t check, filters, nodes = 1000, mig = 0;
    struct vg_err err = {0};
    if (argc < 3 || vg_parse_u64(argv[1], 0, 1, &check, &err) < 0 ||
        vg_parse_u64(argv[2], 1, 100000, &filters, &err) < 0 ||
        (argc > 3 && vg_parse_u64(argv[3], 1, SCHED_MAX_NODES, &nodes, &err) < 0) ||
        (argc > 4 && vg_parse_u64(argv[4], 0, 1, &mig, &err) < 0)) {
        fprintf(stderr, "usage: endpoints_filter_cost CHECK(0|1) FILTERS [NODES [MIG(0|1)]] %s\n",
                err.msg);
        return 2;
    }
    vg_log_max_level = VG_LOG_ERROR;
    struct sched_options o;
    sched_options_default(&o);
    o.require_pending = check != 0;
    o.max_assumed_per_namespace = check != 0 ? SCHED_MAX_ASSUMED_PER_NAMESPACE : 0;
    o.assume_ttl_ms = mig ? 1000000000 : 1;
    struct sched_state *s = NULL;
    if (sched_state_new(&o, &s, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_t *names = json_array();
    for (uint64_t n = 0; n < nodes; n++) {
        char name[32], inv[8192];
        snprintf(name, sizeof name, "node-%05llu", (unsigned long long)n);
        int k = snprintf(inv, sizeof inv,
                         "{\"version\":1,\"heartbeat\":1,\"mode\":\"vgpu\",\"gpus\":[");
        for (int g = 0; g < 8; g++)
            k += snprintf(inv + k, sizeof inv - (size_t)k,
                          "%s{\"uuid\":\"GPU-%llu-%d\",\"index\":%d,\"model\":\"H100\","
                          "\"memoryMiB\":80000,\"cores\":100,\"slots\":10,\"healthy\":true%s}",
                          g ? "," : "", (unsigned long long)n, g, g, mig ? MIG_FIELD : "");
        snprintf(inv + k, sizeof inv - (size_t)k, "]}");
        json_t *node = json_pack("{s:{s:s, s:{s:s}}}", "metadata", "name", name, "annotations",
                                 "vgpu.io/gpus", inv);
        sched_node_update(s, node);
        json_decref(node);
        json_array_append_new(names, json_string(name));
    }
    uint64_t fits = 0;
    for (uint64_t i = 0; i < filters; i++) {
        char pod[32], uid[32];
        snprintf(pod, sizeof pod, "p-%06llu", (unsigned long long)i);
        snprintf(uid, sizeof uid, "uid-%06llu", (unsigned long long)i);
        json_t *p = json_pack("{s:{s:s, s:s, s:s, s:s}, s:{s:[{s:s, s:{s:{s:s, s:s}}}]}, s:{s:s}}",
                              "metadata", "name", pod, "namespace", "default", "resourceVersion",
                              "7", "uid", uid, "spec", "containers", "name", "main", "resources",
                              "limits", "nvidia.com/gpu", "1", "nvidia.com/gpumem",
                              mig ? (const char *[]){"9000", "18000", "40000"}[i % 3] : "1000",
                              "status", "phase", "Pending");
        sched_pending_update(s, p); /* both ways: the watch feeds it regardless */
        json_t *args = json_pack("{s:O, s:n, s:O}", "Pod", p, "Nodes", "NodeNames", names);
        char *body = json_dumps(args, JSON_COMPACT);
        json_decref(args);
        json_decref(p);
        char *out = NULL;
        int rc = sched_filter(s, body, strlen(body), (struct sched_now){i * 10, 100}, &out, &err);
        fits += rc == 0 && out != NULL && strstr(out, "\"NodeNames\":[\"") != NULL;
        free(out);
        free(body);
        if (!mig)
            sched_expire(s, (struct sched_now){i * 10 + 5, 100});
    }
    json_decref(names);
    sched_state_free(s);
    printf("check=%llu filters=%llu fits=%llu\n", (unsigned long long)check,
           (unsigned long long)filters, (unsigned long long)fits);
    return fits == filters ? 0 : 1;
}
