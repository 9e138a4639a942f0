/* Volcano mode's pieces (src/deviceplugin/volcano.h, src/dpconfig/volcano.c): the annotation
 * strings Volcano writes read exactly or refused with the reason, the node annotation
 * written as Volcano's decodeNodeDevices reads it, the per-GPU ledger that refuses an
 * overcommitting decision, the pending pod found as the protocol finds it with each segment
 * given to the right container, and Volcano's device-config.yaml honoured or refused by
 * key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/volcano.h"
#include "deviceplugin/volcano_plugin.h"

#define UA "GPU-11111111-2222-3333-4444-555555555555"
#define UB "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

static struct vc_pod_devices pd;

static int dec(const char *s, struct vg_err *err)
{
    return vc_pod_devices_decode(s, strlen(s), &pd, err);
}

static void test_pod_devices(void **state)
{
    (void)state;
    struct vg_err err = {0};
    char out[512];
    const char *two = UA ",NVIDIA,1024,25:" UB ",NVIDIA,2048,50:;" UB ",NVIDIA,100,0:";
    assert_int_equal(dec(two, &err), 0);
    assert_int_equal(pd.count, 2);
    assert_int_equal(pd.segs[0].count, 2);
    assert_string_equal(pd.segs[0].devs[1].uuid, UB);
    assert_int_equal(pd.segs[0].devs[1].memory, 2048);
    assert_int_equal(pd.segs[0].devs[0].cores, 25);
    assert_int_equal(pd.segs[1].devs[0].cores, 0);
    assert_int_equal(vc_pod_devices_encode(&pd, out, sizeof out, &err), 0);
    assert_string_equal(out, two);
    /* A consumed segment stays as an empty one, as Volcano's plugin erases it. */
    pd.segs[0].count = 0;
    assert_int_equal(vc_pod_devices_encode(&pd, out, sizeof out, &err), 0);
    assert_string_equal(out, ";" UB ",NVIDIA,100,0:");
    pd.segs[1].count = 0;
    assert_int_equal(vc_pod_devices_encode(&pd, out, sizeof out, &err), 0);
    assert_string_equal(out, ";");
    assert_int_equal(dec(";", &err), 0);
    assert_int_equal(pd.count, 2);
    assert_int_equal(pd.segs[0].count + pd.segs[1].count, 0);
    assert_int_equal(dec("", &err), 0);
    assert_int_equal(pd.count, 0);
    assert_int_equal(vc_pod_devices_encode(&pd, out, 8, &err), 0);
    assert_int_equal(dec(two, &err), 0);
    assert_int_equal(vc_pod_devices_encode(&pd, out, 20, &err), -ENOSPC);

    /* Each malformed string is refused with the reason. */
    static const struct {
        const char *text, *why;
    } bad[] = {
        {UA ",NVIDIA,3000,30", "closing ':'"},
        {UA ",NVIDIA,3000:", "expected 4"},
        {UA ",NVIDIA,3000,30,7:", "more than 4"},
        {UA ",NVIDIA,3000,101:", "cores"},
        {UA ",NVIDIA,0,30:", "memory"},
        {UA ",NVIDIA,-1,30:", "memory"},
        {UA ",NVIDIA,2147483648,30:", "memory"},
        {UA ",NVIDIA,3k,30:", "memory"},
        {",NVIDIA,3000,30:", "empty UUID"},
        {"GPU-1/../x,NVIDIA,3000,30:", "UUID has character"},
        {UA "[0-1],NVIDIA,3000,30:", "UUID has character"},
        {UA ",,3000,30:", "empty type"},
        {UA ",NVIDIA,1,1:" UA ",NVIDIA,1,1:", "twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(dec(bad[i].text, &err), -EINVAL);
        if (strstr(err.msg, bad[i].why) == NULL)
            fail_msg("'%s': '%s' does not say '%s'", bad[i].text, err.msg, bad[i].why);
    }
    /* Bounds: 17 devices in one container, 33 containers. */
    char big[4096] = "";
    size_t used = 0;
    for (int i = 0; i < 17; i++)
        used += (size_t)snprintf(big + used, sizeof big - used, "GPU-%d,NVIDIA,1,1:", i);
    assert_int_equal(dec(big, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "more than 16"));
    char many[64] = "";
    memset(many, ';', 32);
    assert_int_equal(dec(many, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "more than 32"));
    /* A NUL inside the value. */
    assert_int_equal(vc_pod_devices_decode("a\0b", 3, &pd, &err), -EINVAL);
}

static void test_node_register(void **state)
{
    (void)state;
    struct vc_node_device d[2] = {
        {UA, 10, 40960, "NVIDIA-NVIDIA A100-SXM4-40GB", true, "hami-core"},
        {UB, 10, 40960, "NVIDIA-NVIDIA A100-SXM4-40GB", false, "hami-core"},
    };
    char out[1024];
    struct vg_err err = {0};
    assert_int_equal(vc_node_register_encode(d, 2, out, sizeof out, &err), 0);
    assert_string_equal(out, UA ",10,40960,NVIDIA-NVIDIA A100-SXM4-40GB,true,hami-core:" UB
                                ",10,40960,NVIDIA-NVIDIA A100-SXM4-40GB,false,hami-core:");
    /* Volcano's decodeNodeDevices: split on ':', every entry with ',' needs 6 fields. */
    size_t entries = 0;
    for (char *save = NULL, *tok = strtok_r(out, ":", &save); tok;
         tok = strtok_r(NULL, ":", &save)) {
        int commas = 0;
        for (char *c = tok; *c; c++)
            commas += *c == ',';
        assert_int_equal(commas, 5);
        entries++;
    }
    assert_int_equal(entries, 2);
    assert_int_equal(vc_node_register_encode(d, 2, out, sizeof out, &err), 0);
    struct vc_node_device back[4];
    unsigned n;
    assert_int_equal(vc_node_register_decode(out, strlen(out), back, 4, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_false(back[1].healthy);
    assert_string_equal(back[0].type, d[0].type);
    /* A model name with ':' or ',' would break the node for Volcano: refused. */
    snprintf(d[0].type, sizeof d[0].type, "NVIDIA-X,Y");
    assert_int_equal(vc_node_register_encode(d, 1, out, sizeof out, &err), -EINVAL);
    assert_int_equal(vc_node_register_decode("a,1,2,T,true:", 13, back, 4, &n, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "expected 6"));
    assert_int_equal(vc_parse_time("1795636859"), 1795636859);
    assert_int_equal(vc_parse_time(VC_TIME_DONE), -1);
    assert_int_equal(vc_parse_time("12a"), -1);
    assert_int_equal(vc_parse_time(NULL), -1);
}

static uint64_t cap40g(void *arg, const char *uuid)
{
    (void)arg;
    (void)uuid;
    return 40960;
}

static struct vc_ledger ledger;

static void charge(struct vc_charge *c, const char *uid, unsigned seg, const char *uuid,
                   uint64_t mib, unsigned cores)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->pod_uid, sizeof c->pod_uid, "%s", uid);
    c->segment = seg;
    c->gpu_count = 1;
    snprintf(c->gpus[0].uuid, sizeof c->gpus[0].uuid, "%s", uuid);
    c->gpus[0].memory_mib = mib;
    c->gpus[0].cores = cores;
}

static void test_ledger(void **state)
{
    (void)state;
    struct vg_err err = {0};
    struct vc_charge c;
    memset(&ledger, 0, sizeof ledger);
    charge(&c, "u1", 0, UA, 30000, 60);
    assert_int_equal(vc_ledger_check(&ledger, &c, cap40g, NULL, &err), 0);
    assert_int_equal(vc_ledger_add(&ledger, &c, &err), 0);
    /* Memory past what is left. */
    charge(&c, "u2", 0, UA, 10961, 10);
    assert_int_equal(vc_ledger_check(&ledger, &c, cap40g, NULL, &err), -ENOSPC);
    assert_non_null(strstr(err.msg, "10961 MiB asked, 10960 MiB left"));
    /* Cores past 100. */
    charge(&c, "u2", 0, UA, 10960, 41);
    assert_int_equal(vc_ledger_check(&ledger, &c, cap40g, NULL, &err), -ENOSPC);
    assert_non_null(strstr(err.msg, "41 % of compute asked, 40 % left"));
    /* Exactly what is left fits; another GPU is untouched. */
    charge(&c, "u2", 0, UA, 10960, 40);
    assert_int_equal(vc_ledger_check(&ledger, &c, cap40g, NULL, &err), 0);
    charge(&c, "u2", 0, UB, 40960, 100);
    assert_int_equal(vc_ledger_check(&ledger, &c, cap40g, NULL, &err), 0);
    uint64_t mem;
    unsigned cores;
    vc_ledger_used(&ledger, UA, &mem, &cores);
    assert_int_equal(mem, 30000);
    assert_int_equal(cores, 60);

    /* Rebuilt from a pod: segment 0 consumed (allocated), segment 1 still to allocate. */
    json_t *pod = json_pack(
        "{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s}},s:{s:s}}", "metadata", "uid", "u3", "name", "p3",
        "namespace", "ns", "annotations", VC_KEY_NODE, "node-1", VC_KEY_TIME, "100", VC_KEY_IDS,
        UB ",NVIDIA,1000,20:;" UB ",NVIDIA,500,5:", VC_KEY_TO_ALLOCATE,
        ";" UB ",NVIDIA,500,5:", VC_KEY_BIND_PHASE, "allocating", "status", "phase", "Pending");
    vc_ledger_put_pod(&ledger, pod, "node-1", 2);
    vc_ledger_used(&ledger, UB, &mem, &cores);
    assert_int_equal(mem, 2000); /* gpuMemoryFactor 2 */
    assert_int_equal(cores, 20);
    assert_true(vc_ledger_has(&ledger, "u3", 0));
    assert_false(vc_ledger_has(&ledger, "u3", 1));
    /* Once bind-phase is success, everything is held; failed: nothing. */
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        VC_KEY_BIND_PHASE, json_string("success"));
    vc_ledger_put_pod(&ledger, pod, "node-1", 1);
    vc_ledger_used(&ledger, UB, &mem, &cores);
    assert_int_equal(mem, 1500);
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        VC_KEY_BIND_PHASE, json_string("failed"));
    vc_ledger_put_pod(&ledger, pod, "node-1", 1);
    vc_ledger_used(&ledger, UB, &mem, &cores);
    assert_int_equal(mem, 0);
    /* A local charge survives a stale view of its pod, and goes when the pod finishes. */
    charge(&c, "u3", 1, UB, 500, 5);
    c.local = true;
    assert_int_equal(vc_ledger_add(&ledger, &c, &err), 0);
    json_object_set_new(json_object_get(json_object_get(pod, "metadata"), "annotations"),
                        VC_KEY_BIND_PHASE, json_string("allocating"));
    vc_ledger_put_pod(&ledger, pod, "node-1", 1);
    vc_ledger_used(&ledger, UB, &mem, &cores);
    assert_int_equal(mem, 1500);
    json_object_set_new(json_object_get(pod, "status"), "phase", json_string("Succeeded"));
    vc_ledger_put_pod(&ledger, pod, "node-1", 1);
    vc_ledger_used(&ledger, UB, &mem, &cores);
    assert_int_equal(mem, 0);
    json_decref(pod);
}

/* A pod placed on node-1 by Volcano; containers: "name:gpu" asks for GPUs, "name" not. */
static json_t *vpod(const char *uid, const char *time, const char *left, const char *containers)
{
    json_t *cs = json_array();
    char buf[256];
    snprintf(buf, sizeof buf, "%s", containers);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(tok, ':');
        if (colon)
            *colon = '\0';
        json_t *c = json_pack("{s:s}", "name", tok);
        if (colon)
            json_object_set_new(c, "resources",
                                json_pack("{s:{s:s}}", "limits", "volcano.sh/vgpu-number", "1"));
        json_array_append_new(cs, c);
    }
    return json_pack("{s:{s:s,s:s,s:s,s:{s:s,s:s,s:s,s:s}},s:{s:o},s:{s:s}}", "metadata", "uid",
                     uid, "name", uid, "namespace", "ns", "annotations", VC_KEY_NODE, "node-1",
                     VC_KEY_TIME, time, VC_KEY_TO_ALLOCATE, left, VC_KEY_BIND_PHASE, "allocating",
                     "spec", "containers", cs, "status", "phase", "Pending");
}

/* The waiting list the plugin keeps, from a uid -> pod map. */
static struct vc_waiting waiting;
static const struct vc_waiting *waiting_of(json_t *pods)
{
    vc_waiting_clear(&waiting);
    const char *uid;
    json_t *pod;
    json_object_foreach(pods, uid, pod) vc_waiting_put(&waiting, pod, "node-1");
    return &waiting;
}

static void test_find_pending(void **state)
{
    (void)state;
    struct dpconfig_volcano v;
    dpconfig_volcano_defaults(&v);
    memset(&ledger, 0, sizeof ledger);
    struct vg_err err = {0};
    struct vc_pending p;
    json_t *twin;
    const char *uid;
    json_t *pod;
    json_t *pods = json_object();
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     -ENOENT);
    assert_non_null(strstr(err.msg, "no pod placed on node node-1"));
    /* A non-GPU container first: segment 0 is the second container's. */
    json_object_set_new(pods, "u1", vpod("u1", "200", UA ",NVIDIA,1000,10:", "sidecar,main:gpu"));
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     0);
    assert_string_equal(p.container, "main");
    assert_int_equal(p.segment, 0);
    /* The oldest vgpu-time wins; a different device count does not match. */
    json_object_set_new(pods, "u2",
                        vpod("u2", "100", UA ",NVIDIA,1,1:;" UB ",NVIDIA,1,1:", "a:gpu,b,c:gpu"));
    json_object_set_new(pods, "u3", vpod("u3", "50", UA ",NVIDIA,1,1:" UB ",NVIDIA,1,1:", "x:gpu"));
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     0);
    assert_string_equal(p.pod_uid, "u2");
    assert_string_equal(p.container, "a");
    /* Two GPU containers: once the first segment is charged, the next is the third container. */
    struct vc_charge c;
    charge(&c, "u2", 0, UA, 1, 1);
    assert_int_equal(vc_ledger_add(&ledger, &c, &err), 0);
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     0);
    assert_string_equal(p.pod_uid, "u2");
    assert_string_equal(p.container, "c");
    assert_int_equal(p.segment, 1);
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 2, &p, &twin, &err),
                     0);
    assert_string_equal(p.pod_uid, "u3");
    /* Another node's pod, a finished pod, one already done: never pending. */
    json_object_del(pods, "u2");
    json_object_del(pods, "u3");
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-2", &v, &ledger, 1, &p, &twin, &err),
                     -ENOENT);
    /* Same vgpu-time: refused, naming both. */
    json_object_set_new(pods, "u4", vpod("u4", "200", UB ",NVIDIA,1000,10:", "main:gpu"));
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     -EEXIST);
    assert_non_null(twin);
    assert_non_null(strstr(err.msg, "same volcano.sh/vgpu-time 200"));
    json_object_del(pods, "u4");
    /* Malformed devices-to-allocate, and no well-formed pod: that pod, named. */
    json_object_del(pods, "u1");
    json_object_set_new(pods, "u5", vpod("u5", "300", UA ",NVIDIA,1000", "main:gpu"));
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     -EINVAL);
    assert_string_equal(p.pod_uid, "u5");
    assert_non_null(strstr(err.msg, "truncated"));
    /* A segment with no container asking for GPUs. */
    json_object_set_new(pods, "u6", vpod("u6", "10", UA ",NVIDIA,1000,1:", "main"));
    assert_int_equal(vc_find_pending(waiting_of(pods), "node-1", &v, &ledger, 1, &p, &twin, &err),
                     -EINVAL);
    assert_string_equal(p.pod_uid, "u6");
    assert_non_null(strstr(err.msg, "only 0 containers ask"));
    /* The list keeps the oldest first, and drops a pod once it is allocated. */
    vc_waiting_clear(&waiting);
    json_object_foreach(pods, uid, pod) vc_waiting_put(&waiting, pod, "node-1");
    assert_int_equal(waiting.count, 2);
    assert_string_equal(waiting.items[0].uid, "u6");
    json_object_set_new(
        json_object_get(json_object_get(json_object_get(pods, "u6"), "metadata"), "annotations"),
        VC_KEY_BIND_PHASE, json_string("success"));
    vc_waiting_put(&waiting, json_object_get(pods, "u6"), "node-1");
    assert_int_equal(waiting.count, 1);
    assert_string_equal(waiting.items[0].uid, "u5");
    vc_waiting_free(&waiting);
    json_decref(pods);
}

static int vload(const char *text, struct dpconfig_volcano *v, struct vg_err *err)
{
    dpconfig_volcano_defaults(v);
    return dpconfig_volcano_load_buffer("dc.yaml", text, strlen(text), v, err);
}

static void test_volcano_config(void **state)
{
    (void)state;
    struct dpconfig_volcano v;
    struct vg_err err = {0};
    /* Volcano's shipped file. */
    const char *shipped = "nvidia:\n"
                          "  resourceCountName: volcano.sh/vgpu-number\n"
                          "  resourceMemoryName: volcano.sh/vgpu-memory\n"
                          "  resourceMemoryPercentageName: volcano.sh/vgpu-memory-percentage\n"
                          "  resourceCoreName: volcano.sh/vgpu-cores\n"
                          "  overwriteEnv: false\n"
                          "  defaultMemory: 0\n"
                          "  defaultCores: 0\n"
                          "  defaultGPUNum: 1\n"
                          "  deviceSplitCount: 4\n"
                          "  deviceMemoryScaling: 1\n"
                          "  deviceCoreScaling: 1\n"
                          "  gpuMemoryFactor: 2\n"
                          "  knownMigGeometries:\n"
                          "  - models: [ \"A30\" ]\n"
                          "    allowedGeometries:\n"
                          "      - - name: 1g.6gb\n"
                          "          memory: 6144\n"
                          "          count: 4\n"
                          "vnpus: []\n";
    if (vload(shipped, &v, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(v.device_split_count, 4);
    assert_int_equal(v.gpu_memory_factor, 2);
    assert_int_equal(v.mig_geometries, 1);
    assert_string_equal(v.core_name, "volcano.sh/vgpu-cores");
    /* Defaults are Volcano's. */
    assert_int_equal(vload("", &v, &err), 0);
    assert_int_equal(v.device_split_count, 10);
    assert_int_equal(v.gpu_memory_factor, 1);
    assert_string_equal(v.count_name, "volcano.sh/vgpu-number");
    assert_int_equal(vload("nvidia:\n  gpuMemoryFactor: 0\n", &v, &err), 0);
    assert_int_equal(v.gpu_memory_factor, 1);
    /* Refused by name. */
    static const struct {
        const char *text, *why;
    } bad[] = {
        {"nvidia:\n  deviceSplitCnt: 4\n", "nvidia.deviceSplitCnt': unknown key"},
        {"nvidia:\n  resourcePriorityName: volcano.sh/vgpu-priority\n",
         "'nvidia.resourcePriorityName': HAMi-core's task priority"},
        {"nvidia:\n  defaultMemory: 1000\n", "'nvidia.defaultMemory': 1000"},
        {"nvidia:\n  deviceMemoryScaling: 0\n", "'nvidia.deviceMemoryScaling'"},
        {"nvidia:\n  deviceSplitCount: \"4\"\n", "expected an integer"},
        {"nvidia:\n  defaultCores: 101\n", "'nvidia.defaultCores'"},
        {"nvidia:\n  disableCoreLimit: maybe\n", "expected true or false"},
        {"nvidia:\n  resourceCoreName: cores\n", "not a resource name"},
        {"amd:\n  x: 1\n", "dc.yaml:1: key 'amd': unknown section"},
        {"nvidia: [1]\n", "expected a mapping"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&err, 0, sizeof err);
        assert_int_equal(vload(bad[i].text, &v, &err), -EINVAL);
        if (strstr(err.msg, bad[i].why) == NULL)
            fail_msg("'%s': '%s' does not say '%s'", bad[i].text, err.msg, bad[i].why);
    }
}

static void test_resources(void **state)
{
    (void)state;
    struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    cfg.vgpu.scheduler_protocol = DPCONFIG_PROTOCOL_VOLCANO;
    dpconfig_volcano_defaults(&cfg.volcano);
    cfg.volcano.device_split_count = 3;
    cfg.volcano.gpu_memory_factor = 256;
    dpconfig_volcano_apply(&cfg);
    struct dp_gpu g[2];
    memset(g, 0, sizeof g);
    snprintf(g[0].uuid, sizeof g[0].uuid, "%s", UB);
    snprintf(g[0].model, sizeof g[0].model, "NVIDIA A100-SXM4-40GB");
    g[0].minor = 3;
    g[0].memory_mib = 40960;
    g[0].healthy = true;
    g[1] = g[0];
    snprintf(g[1].uuid, sizeof g[1].uuid, "%s", UA);
    g[1].minor = 1;
    g[1].healthy = false;
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_volcano_resources(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.count, 3);
    assert_string_equal(res.items[0].name, "volcano.sh/vgpu-number");
    assert_int_equal(res.items[0].device_count, 6);
    assert_int_equal(res.items[1].device_count, 2 * 160);
    assert_int_equal(res.items[2].device_count, 200);
    assert_string_equal(res.items[1].devices[159].id, UB "-memory-159");
    assert_true(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_MEMORY, UA "-memory-159"));
    assert_false(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_MEMORY, UA "-memory-160"));
    assert_false(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_MEMORY, UA "-memory-07"));
    assert_true(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_CORES, UA "-core-99"));
    assert_true(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_NUMBER, UA "-2"));
    assert_false(dp_volcano_id_known(&cfg, g, 2, DP_VOLCANO_NUMBER, UA "-3"));
    dp_resources_release(&res);
    /* The node annotation: by minor number, memory in gpuMemoryFactor units. */
    char *v = dp_volcano_register_value(&cfg, g, 2, &err);
    assert_non_null(v);
    assert_string_equal(v, UA ",3,160,NVIDIA-NVIDIA A100-SXM4-40GB,false,hami-core:" UB
                              ",3,160,NVIDIA-NVIDIA A100-SXM4-40GB,true,hami-core:");
    free(v);
    char hs[96];
    dp_volcano_handshake_value(1795636859, hs, sizeof hs);
    assert_string_equal(hs, "Reported 2026-11-25 20:00:59 +0000 UTC");
    /* A memory list kubelet could not read: refused, naming the factor that fits. */
    cfg.volcano.gpu_memory_factor = 1;
    g[0].memory_mib = g[1].memory_mib = 81920;
    assert_int_equal(dp_volcano_resources(&cfg, g, 2, &res, &err), -E2BIG);
    assert_non_null(strstr(err.msg, "raise nvidia.gpuMemoryFactor"));
    /* Volcano's mig mode is not served: refused at start. */
    cfg.volcano.gpu_memory_factor = 256;
    g[1].mig_enabled = true;
    assert_int_equal(dp_volcano_resources(&cfg, g, 2, &res, &err), -ENOTSUP);
    assert_non_null(strstr(err.msg, "Volcano's `mig` mode"));
    dpconfig_free(&cfg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_devices),    cmocka_unit_test(test_node_register),
        cmocka_unit_test(test_ledger),         cmocka_unit_test(test_find_pending),
        cmocka_unit_test(test_volcano_config), cmocka_unit_test(test_resources),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
