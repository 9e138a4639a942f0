/* Device plugin library: resources per mode, device ID parsing, decision matching,
 * Allocate responses against golden files (tests/data/deviceplugin/, regenerate with
 * VGPU_UPDATE_GOLDEN=1 and review the diff), container directories and their cleanup. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/str.h"
#include "region/region.h"
#include "libvgpu/config.h"
#include "deviceplugin/deviceplugin.h"
#include "grpc/kubelet/api.h"
#include "dp_test.h"

static void test_physical_uuid(void **state)
{
    (void)state;
    char uuid[ANNOT_UUID_MAX];
    struct vg_err err = {0};
    assert_int_equal(dp_physical_uuid(UUID_A "-3", uuid, &err), 0);
    assert_string_equal(uuid, UUID_A);
    assert_int_equal(dp_physical_uuid(UUID_A "::12", uuid, &err), 0);
    assert_string_equal(uuid, UUID_A);
    assert_int_equal(dp_physical_uuid(UUID_A, uuid, &err), 0);
    assert_string_equal(uuid, UUID_A);
    assert_int_equal(dp_physical_uuid("::1", uuid, &err), -EINVAL);
}

static void test_resources_vgpu(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\nvgpu:\n  deviceSplitCount: 3\n");
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.mode, ANNOT_MODE_VGPU);
    assert_int_equal(res.count, 1);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu");
    assert_string_equal(res.items[0].endpoint, "nvidia-gpu.sock");
    assert_int_equal(res.items[0].device_count, 6);
    assert_string_equal(res.items[0].devices[0].id, UUID_A "-0");
    assert_string_equal(res.items[0].devices[5].id, UUID_B "-2");
    assert_int_equal(res.items[0].devices[5].gpu, 1);
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

static void test_resources_time_slicing(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    /* Only GPU 1 is shared, renamed; GPU 0 stays plain nvidia.com/gpu. */
    load(&cfg, "version: v1\nsharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
               "      rename: gpu.shared\n      replicas: 2\n      devices: [\"1\"]\n");
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_int_equal(res.mode, ANNOT_MODE_TIME_SLICING);
    assert_int_equal(res.count, 2);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu");
    assert_int_equal(res.items[0].device_count, 1);
    assert_string_equal(res.items[0].devices[0].id, UUID_A);
    assert_string_equal(res.items[1].name, "nvidia.com/gpu.shared");
    assert_string_equal(res.items[1].endpoint, "nvidia-gpu.shared.sock");
    assert_int_equal(res.items[1].device_count, 2);
    assert_string_equal(res.items[1].devices[1].id, UUID_B "::1");

    /* Golden: two replicas of one GPU give it once; passDeviceSpecs adds device nodes. */
    char id0[] = UUID_B "::0", id1[] = UUID_B "::1";
    char *ids[] = {id0, id1};
    struct dp_response resp;
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[1], g, 2, ids, 2, &resp, &err), 0);
    golden("time_slicing_two_replicas", &resp);
    char bad0[] = "GPU-x::0";
    char *bad[] = {bad0};
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[1], g, 2, bad, 1, &resp, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "unknown device ID"));
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

static void test_fail_requests_greater_than_one(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\nflags:\n  plugin:\n    passDeviceSpecs: true\n"
               "    deviceIDStrategy: index\nsharing:\n  timeSlicing:\n"
               "    renameByDefault: true\n    failRequestsGreaterThanOne: true\n"
               "    resources:\n    - name: nvidia.com/gpu\n      replicas: 4\n");
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    assert_string_equal(res.items[0].name, "nvidia.com/gpu.shared");
    char t0[] = UUID_A "::0", t1[] = UUID_B "::0";
    char *two[] = {t0, t1};
    struct dp_response resp;
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, two, 2, &resp, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "maximum request size for shared resources is 1"));
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, two + 1, 1, &resp, &err), 0);
    golden("time_slicing_index_device_specs", &resp);
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

/* One timeSlicing Allocate of GPU 1 with passDeviceSpecs under the extra YAML (flags and
 * imex keys), compared with golden name. */
static void allocate_with(const char *extra, const char *name)
{
    struct dp_gpu g[2];
    two_gpus(g);
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "version: v1\n%ssharing:\n  timeSlicing:\n    resources:\n"
             "    - name: nvidia.com/gpu\n      replicas: 2\n",
             extra);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    char t0[] = UUID_B "::1";
    char *one[] = {t0};
    struct dp_response resp;
    if (dp_allocate_shared(&cfg, &res.items[0], g, 2, one, 1, &resp, &err) != 0)
        fail_msg("%s: %s", name, err.msg);
    golden(name, &resp);
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

/* Device specs name the node under flags.nvidiaDevRoot (else flags.nvidiaDriverRoot) on
 * the host, at /dev inside the container, as NVIDIA's plugin does. */
static void test_dev_root(void **state)
{
    (void)state;
    allocate_with("flags:\n  nvidiaDriverRoot: /run/nvidia/driver\n"
                  "  plugin:\n    passDeviceSpecs: true\n",
                  "dev_root_driver_root");
    /* nvidiaDevRoot wins over the driver root; a trailing slash changes nothing. */
    allocate_with("flags:\n  nvidiaDriverRoot: /run/nvidia/driver\n  nvidiaDevRoot: /host/\n"
                  "  plugin:\n    passDeviceSpecs: true\n",
                  "dev_root_dev_root");
    struct dpconfig cfg;
    dpconfig_defaults(&cfg);
    assert_string_equal(dp_dev_root(&cfg), "/");
    char out[32];
    assert_int_equal(dp_root_path("/", "/dev/nvidia0", out, sizeof(out)), 0);
    assert_string_equal(out, "/dev/nvidia0");
    assert_int_equal(dp_root_path("/a//", "/dev/nvidia0", out, sizeof(out)), 0);
    assert_string_equal(out, "/a/dev/nvidia0");
    assert_int_equal(dp_root_path("/a-very-long-root-directory", "/dev/nvidia0", out, sizeof(out)),
                     -ENAMETOOLONG);
    dpconfig_free(&cfg);
    /* A root too long for a device spec is refused, naming the key. */
    struct dp_gpu g[2];
    two_gpus(g);
    char yaml[512];
    snprintf(yaml, sizeof(yaml),
             "flags:\n  nvidiaDevRoot: /%0100d\n  plugin:\n    passDeviceSpecs: true\n", 0);
    load(&cfg, yaml);
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    char id[] = UUID_A "-0"; /* vgpu mode's device ID */
    char *ids[] = {id};
    struct dp_response resp;
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, ids, 1, &resp, &err),
                     -ENAMETOOLONG);
    assert_non_null(strstr(err.msg, "flags.nvidiaDevRoot"));
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

/* imex.channelIDs: NVIDIA_IMEX_CHANNELS, and the channel's device node with
 * passDeviceSpecs; dp_imex_check drops a missing channel or, with imex.required, fails. */
static void test_imex(void **state)
{
    (void)state;
    allocate_with("imex:\n  channelIDs: [0]\n", "imex_envvar");
    allocate_with("flags:\n  nvidiaDevRoot: /host\n  plugin:\n    passDeviceSpecs: true\n"
                  "imex:\n  channelIDs: [0]\n",
                  "imex_device_specs");

    char tmp[] = "/tmp/dp-imex.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char yaml[512], path[512];
    struct dpconfig cfg;
    struct vg_err err = {0};
    /* No <root>/dev: the plugin looks under /, which has no IMEX channel here. */
    snprintf(yaml, sizeof(yaml),
             "flags:\n  plugin:\n    containerDriverRoot: %s\nimex:\n  channelIDs: [0]\n"
             "  required: true\n",
             tmp);
    load(&cfg, yaml);
    assert_string_equal(dp_container_dev_root(&cfg), "/");
    struct stat st;
    if (stat("/dev/nvidia-caps-imex-channels/channel0", &st) != 0) {
        assert_int_equal(dp_imex_check(&cfg, &err), -ENOENT);
        assert_non_null(strstr(err.msg, "imex.channelIDs: IMEX channel 0: "
                                        "/dev/nvidia-caps-imex-channels/channel0 does not exist "
                                        "(imex.required is true)"));
    }
    /* With <root>/dev, the channel is looked up there. */
    snprintf(path, sizeof(path), "%s/dev", tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    assert_string_equal(dp_container_dev_root(&cfg), tmp);
    assert_int_equal(dp_imex_check(&cfg, &err), -ENOENT);
    assert_non_null(strstr(err.msg, tmp));
    dpconfig_free(&cfg);
    /* Not required: dropped, so Allocate passes no channel. */
    snprintf(yaml, sizeof(yaml),
             "flags:\n  plugin:\n    containerDriverRoot: %s\nimex:\n  channelIDs: [0]\n", tmp);
    load(&cfg, yaml);
    assert_int_equal(dp_imex_check(&cfg, &err), 0);
    assert_int_equal(cfg.imex.channel_ids.count, 0);
    dpconfig_free(&cfg);
    /* Present: kept. */
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps-imex-channels", tmp);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps-imex-channels/channel0", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(yaml, sizeof(yaml),
             "flags:\n  plugin:\n    containerDriverRoot: %s\nimex:\n  channelIDs: [0]\n"
             "  required: true\n",
             tmp);
    load(&cfg, yaml);
    assert_int_equal(dp_imex_check(&cfg, &err), 0);
    assert_int_equal(cfg.imex.channel_ids.count, 1);
    dpconfig_free(&cfg);
    unlink(path);
    snprintf(path, sizeof(path), "%s/dev/nvidia-caps-imex-channels", tmp);
    rmdir(path);
    snprintf(path, sizeof(path), "%s/dev", tmp);
    rmdir(path);
    rmdir(tmp);
}

/* flags.plugin.containerDriverRoot: NVML is loaded from the driver root mounted into the
 * plugin's container when it holds libnvidia-ml.so.1, else by SONAME. */
static void test_nvml_library(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-driver-root.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char yaml[512], path[512], dir[512];
    snprintf(yaml, sizeof(yaml), "flags:\n  plugin:\n    containerDriverRoot: %s/\n", tmp);
    struct dpconfig cfg;
    load(&cfg, yaml);
    dp_nvml_library(&cfg, path, sizeof(path));
    assert_string_equal(path, DP_NVML_SONAME);
    snprintf(dir, sizeof(dir), "%s/usr", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(dir, sizeof(dir), "%s/usr/lib64", tmp);
    assert_int_equal(mkdir(dir, 0755), 0);
    char lib[600];
    snprintf(lib, sizeof(lib), "%s/" DP_NVML_SONAME, dir);
    FILE *f = fopen(lib, "w");
    assert_non_null(f);
    fclose(f);
    dp_nvml_library(&cfg, path, sizeof(path));
    assert_string_equal(path, lib);
    dpconfig_free(&cfg);
    unlink(lib);
    rmdir(dir);
    snprintf(dir, sizeof(dir), "%s/usr", tmp);
    rmdir(dir);
    rmdir(tmp);
}

/* flags.plugin.sharedDevicesAllocationPolicy: GPU A has two of its four replicas in use,
 * GPU B none. distributed picks from the less used GPU, packed fills the more used one. */
static void test_allocation_policy(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    load(&cfg, "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n"
               "      replicas: 4\n");
    assert_int_equal(cfg.flags.plugin.shared_devices_allocation_policy, DPCONFIG_ALLOC_DISTRIBUTED);
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    const struct dp_resource *r = &res.items[0];
    /* Candidates: A::2, A::3, then B::0..3 (kubelet's order is arbitrary). */
    char a2[] = UUID_A "::2", a3[] = UUID_A "::3", b0[] = UUID_B "::0", b1[] = UUID_B "::1",
         b2[] = UUID_B "::2", b3[] = UUID_B "::3";
    char *avail[] = {a2, a3, b0, b1, b2, b3};
    bool taken[6] = {false};
    size_t picked[6];
    assert_int_equal(dp_prefer_replicas(r, DPCONFIG_ALLOC_DISTRIBUTED, avail, 6, taken, 2, picked),
                     2);
    assert_string_equal(avail[picked[0]], b0);
    assert_string_equal(avail[picked[1]], b1);
    /* Three from four free on B and two on A: B, B, then A (B 2 used, A 2 used: tie to A). */
    memset(taken, 0, sizeof(taken));
    assert_int_equal(dp_prefer_replicas(r, DPCONFIG_ALLOC_DISTRIBUTED, avail, 6, taken, 3, picked),
                     3);
    assert_string_equal(avail[picked[2]], a2);
    memset(taken, 0, sizeof(taken));
    assert_int_equal(dp_prefer_replicas(r, DPCONFIG_ALLOC_PACKED, avail, 6, taken, 3, picked), 3);
    assert_string_equal(avail[picked[0]], a2);
    assert_string_equal(avail[picked[1]], a3);
    assert_string_equal(avail[picked[2]], b0);
    /* Taken candidates are skipped; no more than there are. */
    memset(taken, 0, sizeof(taken));
    taken[0] = true;
    assert_int_equal(dp_prefer_replicas(r, DPCONFIG_ALLOC_PACKED, avail, 6, taken, 8, picked), 5);
    assert_string_equal(avail[picked[0]], a3);
    dp_resources_release(&res);
    dpconfig_free(&cfg);
}

/* flags.plugin.deviceListStrategy, alone and combined, in timeSlicing and vgpu mode:
 * goldens list_<name>_{time_slicing,vgpu}. */
static const struct {
    const char *name, *flags;
} lists[] = {
    {"envvar", ""},
    {"volume_mounts", "    deviceListStrategy: volume-mounts\n"},
    {"cdi_annotations", "    deviceListStrategy: cdi-annotations\n"},
    {"cdi_cri", "    deviceListStrategy: cdi-cri\n    passDeviceSpecs: true\n"},
    {"all_index",
     "    deviceListStrategy:\n    - envvar\n    - volume-mounts\n    - cdi-annotations\n"
     "    - cdi-cri\n    deviceIDStrategy: index\n    passDeviceSpecs: true\n"
     "    cdiAnnotationPrefix: cdi.example.com/\n"},
};

static void two_gpu_match(struct dp_match *m)
{
    memset(m, 0, sizeof(*m));
    vg_strlcpy(m->pod_uid, "uid-1", sizeof(m->pod_uid));
    vg_strlcpy(m->pod_namespace, "default", sizeof(m->pod_namespace));
    vg_strlcpy(m->pod_name, "train-0", sizeof(m->pod_name));
    vg_strlcpy(m->container.name, "main", sizeof(m->container.name));
    m->container.gpu_count = 2;
    vg_strlcpy(m->container.gpus[0].uuid, UUID_B, sizeof(m->container.gpus[0].uuid));
    m->container.gpus[0].memory_mib = 4096;
    m->container.gpus[0].cores = 30;
    vg_strlcpy(m->container.gpus[1].uuid, UUID_A, sizeof(m->container.gpus[1].uuid));
    m->container.gpus[1].memory_mib = 2048;
    m->container.gpus[1].cores = 50;
}

static void test_device_list_strategies(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    char t0[] = UUID_A "::0", t1[] = UUID_B "::1";
    char *two[] = {t0, t1};
    struct vg_err err = {0};
    for (size_t i = 0; i < sizeof(lists) / sizeof(lists[0]); i++) {
        char yaml[1024], name[128];
        struct dpconfig cfg;
        struct dp_resources res;
        struct dp_response resp;
        snprintf(yaml, sizeof(yaml),
                 "version: v1\nflags:\n  plugin:\n%ssharing:\n  timeSlicing:\n    resources:\n"
                 "    - name: nvidia.com/gpu\n      replicas: 2\n",
                 lists[i].flags);
        load(&cfg, yaml);
        assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
        assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, two, 2, &resp, &err), 0);
        snprintf(name, sizeof(name), "list_%s_time_slicing", lists[i].name);
        golden(name, &resp);
        dp_resources_release(&res);
        dpconfig_free(&cfg);

        snprintf(
            yaml, sizeof(yaml),
            "version: v1\nflags:\n  plugin:\n%svgpu:\n  libvgpuPath: /usr/local/vgpu/libvgpu.so\n"
            "  ldSoPreloadPath: /usr/local/vgpu/ld.so.preload\n"
            "  computeBoardDir: /var/lib/vgpu/board\n",
            lists[i].flags);
        load(&cfg, yaml);
        struct dp_match m;
        two_gpu_match(&m);
        assert_int_equal(
            dp_allocate_vgpu(&cfg, g, 2, &m, "/var/lib/vgpu/containers/uid-1_main", &resp, &err),
            0);
        snprintf(name, sizeof(name), "list_%s_vgpu", lists[i].name);
        golden(name, &resp);
        dpconfig_free(&cfg);
    }
}

#define SHARED                                                                                     \
    "sharing:\n  timeSlicing:\n    resources:\n    - name: nvidia.com/gpu\n      replicas: 2\n"

/* What kubelet receives: annotations and CDI devices survive packing, per container. */
static void test_pack_cdi(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\nflags:\n  plugin:\n    deviceListStrategy:\n    - cdi-annotations\n"
               "    - cdi-cri\n" SHARED);
    struct dp_resources res;
    struct vg_err err = {0};
    assert_int_equal(dp_resources_build(&cfg, g, 2, &res, &err), 0);
    char a[] = UUID_A "::0", b[] = UUID_B "::1";
    char *one[] = {a}, *other[] = {b};
    struct dp_response r[2];
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, one, 1, &r[0], &err), 0);
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, other, 1, &r[1], &err), 0);
    /* CDI only: no NVIDIA_VISIBLE_DEVICES for the runtime to act on twice. */
    assert_int_equal(r[0].env_count, 0);
    const struct dp_response *ptrs[2] = {&r[0], &r[1]};
    uint8_t *data = NULL;
    size_t len = 0;
    assert_int_equal(dp_response_pack(ptrs, 2, &data, &len, &err), 0);
    V1beta1__AllocateResponse *msg = v1beta1__allocate_response__unpack(NULL, len, data);
    assert_non_null(msg);
    assert_int_equal(msg->n_container_responses, 2);
    for (size_t i = 0; i < 2; i++) {
        V1beta1__ContainerAllocateResponse *c = msg->container_responses[i];
        assert_int_equal(c->n_annotations, 1);
        assert_int_equal(c->n_cdi_devices, 1);
        const char *key = "cdi.k8s.io/vgpu-device-plugin_";
        assert_int_equal(strncmp(c->annotations[0]->key, key, strlen(key)), 0);
        assert_int_equal(strlen(c->annotations[0]->key), strlen(key) + 16);
        char want[128];
        snprintf(want, sizeof(want), DP_CDI_KIND "=%s", i ? UUID_B : UUID_A);
        assert_string_equal(c->annotations[0]->value, want);
        assert_string_equal(c->cdi_devices[0]->name, want);
    }
    /* Different devices, different keys (a container may hold two resources). */
    assert_string_not_equal(msg->container_responses[0]->annotations[0]->key,
                            msg->container_responses[1]->annotations[0]->key);
    v1beta1__allocate_response__free_unpacked(msg, NULL);
    free(data);
    dpconfig_free(&cfg);
    /* A prefix that cannot make a key is refused with a message, not cut. */
    char yaml[600], prefix[300];
    memset(prefix, 'p', sizeof(prefix) - 2);
    prefix[sizeof(prefix) - 2] = '/';
    prefix[sizeof(prefix) - 1] = '\0';
    snprintf(yaml, sizeof(yaml),
             "version: v1\nflags:\n  plugin:\n    deviceListStrategy: cdi-annotations\n"
             "    cdiAnnotationPrefix: %s\n" SHARED,
             prefix);
    load(&cfg, yaml);
    assert_int_equal(dp_allocate_shared(&cfg, &res.items[0], g, 2, one, 1, &r[0], &err), -ENOSPC);
    assert_non_null(strstr(err.msg, "CDI annotation prefix too long"));
    dpconfig_free(&cfg);
    dp_resources_release(&res);
}

/* The spec.containers a pod needs for its decision to be used: each container the
 * decision gives GPUs, asking for that many nvidia.com/gpu (none for garbled text). */
static json_t *spec_containers(const char *text)
{
    json_t *out = json_array();
    json_t *d = text ? json_loads(text, 0, NULL) : NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(d, "containers"), i, c)
    {
        size_t n = json_array_size(json_object_get(c, "gpus"));
        if (n == 0 || !json_is_string(json_object_get(c, "name")))
            continue;
        char count[24];
        snprintf(count, sizeof(count), "%zu", n);
        json_array_append_new(out,
                              json_pack("{s:O,s:{s:{s:s}}}", "name", json_object_get(c, "name"),
                                        "resources", "limits", "nvidia.com/gpu", count));
    }
    json_decref(d);
    return out;
}

static json_t *pod(const char *name, const char *uid, const char *decision)
{
    json_t *p = json_pack("{s:{s:s,s:s,s:s},s:{s:s,s:s,s:o},s:{s:s}}", "metadata", "name", name,
                          "namespace", "default", "uid", uid, "spec", "nodeName", "node-1",
                          "schedulerName", "vgpu-scheduler", "containers",
                          spec_containers(decision), "status", "phase", "Pending");
    json_t *ann = json_object();
    json_object_set_new(ann, ANNOT_KEY_DECISION, json_string(decision));
    json_object_set_new(json_object_get(p, "metadata"), "annotations", ann);
    return p;
}

static bool none_allocated(void *arg, const char *uid, const char *c)
{
    (void)arg;
    (void)uid;
    return strcmp(c, "done") == 0;
}

static void test_match(void **state)
{
    (void)state;
    json_t *pods = json_array();
    json_array_append_new(
        pods, pod("late", "u2",
                  "{\"version\":1,\"node\":\"node-1\",\"time\":20,\"containers\":[{\"name\":\"a\","
                  "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memoryMiB\":100,\"cores\":10}]}]}"));
    json_array_append_new(
        pods,
        pod("early", "u1",
            "{\"version\":1,\"node\":\"node-1\",\"time\":10,\"containers\":[{\"name\":\"done\","
            "\"gpus\":[{\"uuid\":\"" UUID_A "\",\"memoryMiB\":1,\"cores\":0}]},{\"name\":\"b\","
            "\"gpus\":[{\"uuid\":\"" UUID_B "\",\"memoryMiB\":200,\"cores\":0}]}]}"));
    json_array_append_new(pods, pod("garbled", "u3", "{\"version\":1,\"containers\":7}"));
    struct dp_match m;
    struct vg_err err = {0};
    /* Count only: the oldest decision's first container not yet allocated. */
    assert_int_equal(dp_match_container(pods, "node-1", NULL, 1, none_allocated, NULL, &m, &err),
                     0);
    assert_string_equal(m.pod_name, "early");
    assert_string_equal(m.container.name, "b");
    /* Exact GPUs win over age. */
    char uuids[1][ANNOT_UUID_MAX] = {UUID_A};
    assert_int_equal(dp_match_container(pods, "node-1", uuids, 1, none_allocated, NULL, &m, &err),
                     0);
    assert_string_equal(m.pod_name, "late");
    assert_int_equal(m.container.gpus[0].memory_mib, 100);
    /* Nothing asks for two: the message names the garbled pod. */
    assert_int_equal(dp_match_container(pods, "node-1", NULL, 2, none_allocated, NULL, &m, &err),
                     -ENOENT);
    assert_non_null(strstr(err.msg, "garbled"));
    /* Another node's pods are not ours. */
    assert_int_equal(dp_match_container(pods, "node-2", NULL, 1, none_allocated, NULL, &m, &err),
                     -ENOENT);
    json_decref(pods);
}

/* Pod default/train-0 (uid-1), container "main", with no GPUs yet. */
static void train_match(struct dp_match *m)
{
    memset(m, 0, sizeof(*m));
    vg_strlcpy(m->pod_uid, "uid-1", sizeof(m->pod_uid));
    vg_strlcpy(m->pod_namespace, "default", sizeof(m->pod_namespace));
    vg_strlcpy(m->pod_name, "train-0", sizeof(m->pod_name));
    vg_strlcpy(m->container.name, "main", sizeof(m->container.name));
}

static void test_vgpu_allocate_and_dirs(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    char tmp[] = "/tmp/dp-unit.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "version: v1\nvgpu:\n  regionDir: %s/containers\n  libvgpuPath: "
             "/usr/local/vgpu/libvgpu.so\n"
             "  ldSoPreloadPath: /usr/local/vgpu/ld.so.preload\n"
             "  computeBoardDir: /tmp/vgpu-unit-compute-board\n",
             tmp);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 2;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_B, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 4096;
    m.container.gpus[0].cores = 30;
    vg_strlcpy(m.container.gpus[1].uuid, UUID_A, sizeof(m.container.gpus[1].uuid));
    m.container.gpus[1].memory_mib = 2048;
    m.container.gpus[1].cores = 50;
    struct dp_response resp;
    struct vg_err err = {0};
    /* Fixed directory name so the golden file does not depend on the temp path. */
    assert_int_equal(
        dp_allocate_vgpu(&cfg, g, 2, &m, "/var/lib/vgpu/containers/uid-1_main", &resp, &err), 0);
    golden("vgpu_two_gpus", &resp);

    char dir[1024];
    assert_int_equal(dp_container_dir_path(cfg.vgpu.region_dir, m.pod_uid, m.container.name, dir,
                                           sizeof(dir), &err),
                     0);
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    char path[1100];
    struct stat st;
    /* The compute board: the GPU's turn file and the container's own slot file. */
    snprintf(path, sizeof(path), "%s/%s/uid-1_main.30.slot", cfg.vgpu.compute_board_dir, UUID_B);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666);
    assert_int_equal(dp_board_sweep(cfg.vgpu.compute_board_dir, (const char *[]){"uid-1", NULL}),
                     0);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0444);
    snprintf(path, sizeof(path), "%s/region", dir);
    assert_int_equal(stat(path, &st), 0);
    /* Twice is an error, and the first directory stays intact. */
    assert_true(dp_container_dir_create(&cfg, &m, dir, false, &err) < 0);
    assert_int_equal(stat(path, &st), 0);
    /* A decision naming a GPU the node lacks fails with a message and leaves nothing. */
    vg_strlcpy(m.container.gpus[0].uuid, "GPU-missing", sizeof(m.container.gpus[0].uuid));
    assert_int_equal(dp_allocate_vgpu(&cfg, g, 2, &m, dir, &resp, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "GPU-missing"));
    /* Sweep: the live pod's directory stays, a dead one goes. */
    const char *live[] = {"uid-1", NULL};
    char dead[1100];
    snprintf(dead, sizeof(dead), "%s/uid-2_other", cfg.vgpu.region_dir);
    assert_int_equal(mkdir(dead, 0755), 0);
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, live, &err), 1);
    assert_int_equal(stat(dead, &st), -1);
    assert_int_equal(stat(dir, &st), 0);
    const char *nobody[] = {NULL};
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, nobody, &err), 1);
    assert_int_equal(stat(dir, &st), -1);
    rmdir(cfg.vgpu.region_dir);
    /* The compute board's directories are the plugin's alone. */
    assert_int_equal(stat(cfg.vgpu.compute_board_dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0755);
    assert_int_equal(dp_board_sweep(cfg.vgpu.compute_board_dir, nobody), 2);
    assert_int_equal(stat(path, &st), -1);
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s.board", cfg.vgpu.compute_board_dir,
                 i ? UUID_A : UUID_B);
        unlink(path);
        snprintf(path, sizeof(path), "%s/%s", cfg.vgpu.compute_board_dir, i ? UUID_A : UUID_B);
        rmdir(path);
    }
    rmdir(cfg.vgpu.compute_board_dir);
    rmdir(tmp);
    dpconfig_free(&cfg);
}

/* Entries of dir (dot entries aside), sorted by name, joined by spaces into out. */
/* A config whose container and compute board directories lie under tmp. */
static void load_dirs(struct dpconfig *cfg, const char *tmp)
{
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "version: v1\nvgpu:\n  regionDir: %s/containers\n  computeBoardDir: %s/board\n", tmp,
             tmp);
    load(cfg, yaml);
}

static void list_dir(const char *dir, char *out, size_t size)
{
    char names[64][256];
    unsigned n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL && n < 64)
        if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0)
            vg_strlcpy(names[n++], ent->d_name, sizeof(names[0]));
    closedir(d);
    qsort(names, n, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
    size_t used = 0;
    out[0] = '\0';
    for (unsigned i = 0; i < n; i++)
        used += (size_t)snprintf(out + used, size - used, "%s%s", i ? " " : "", names[i]);
}

static size_t read_file(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    ssize_t n = read(fd, buf, size);
    close(fd);
    assert_true(n >= 0);
    return (size_t)n;
}

/* The generation in dir/etc/generation (the 8 bytes after the magic). */
static uint64_t generation_of(const char *dir)
{
    char path[1100], buf[VGPU_GENERATION_SIZE];
    snprintf(path, sizeof(path), "%s/etc/generation", dir);
    assert_int_equal(read_file(path, buf, sizeof(buf)), VGPU_GENERATION_SIZE);
    assert_memory_equal(buf, VGPU_GENERATION_MAGIC, 8);
    uint64_t gen;
    memcpy(&gen, buf + 8, sizeof gen);
    return gen;
}

/* A directory of the layout before etc/ was mounted whole and writable in its container:
 * the tenant can make etc/ there, as a symlink to any host directory or as a directory of
 * its own. A resize of it is refused without reading, writing or renaming anything
 * through it, and removing the directory unlinks the tenant's etc/ itself, never what it
 * points at. */
static void test_container_old_dir_tenant_etc(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-oldetc.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "version: v1\nvgpu:\n  regionDir: %s/containers\n"
             "  computeBoardDir: %s/board\n",
             tmp, tmp);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_A, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 3000;
    /* A host directory the plugin can write, holding files of the names it touches. */
    char victim[1024], vpath[1100], dir[1024], path[1100];
    snprintf(victim, sizeof(victim), "%s/victim", tmp);
    assert_int_equal(mkdir(victim, 0755), 0);
    static const char *const names[] = {"limits", "limits.tmp", "generation"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(vpath, sizeof(vpath), "%s/%s", victim, names[i]);
        FILE *f = fopen(vpath, "w");
        assert_non_null(f);
        if (i == 0)
            fprintf(f, "vgpu-limits 1\nVGPU_DEVICE_UUID_0=%s\n", UUID_A);
        else if (i == 2)
            fwrite(VGPU_GENERATION_MAGIC "\0\0\0\0\0\0\0\0", 1, VGPU_GENERATION_SIZE, f);
        fclose(f);
    }
    /* The old layout: limits (and region) in the directory itself. */
    assert_int_equal(mkdir(cfg.vgpu.region_dir, 0755), 0);
    snprintf(dir, sizeof(dir), "%s/uid-7_main", cfg.vgpu.region_dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    const char *const old[] = {"limits", "region"};
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, old[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        if (i == 0)
            fprintf(f, "vgpu-limits 1\nVGPU_DEVICE_UUID_0=%s\n", UUID_A);
        fclose(f);
    }
    /* The tenant's etc/, a symlink to the host directory. */
    snprintf(path, sizeof(path), "%s/etc", dir);
    assert_int_equal(symlink(victim, path), 0);
    struct vg_err err = {0};
    m.container.gpus[0].memory_mib = 9000;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "not resizable"));
    snprintf(vpath, sizeof(vpath), "%s/limits", victim);
    static char text[4096];
    size_t n = read_file(vpath, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_null(strstr(text, "9000"));
    char gen[VGPU_GENERATION_SIZE], zero[8] = {0};
    snprintf(vpath, sizeof(vpath), "%s/generation", victim);
    assert_int_equal(read_file(vpath, gen, sizeof(gen)), VGPU_GENERATION_SIZE);
    assert_memory_equal(gen + 8, zero, sizeof zero);
    /* Removal: the symlink goes, the host's files stay. */
    assert_int_equal(dp_container_dir_remove(dir, &err), 0);
    struct stat st;
    assert_int_equal(lstat(dir, &st), -1);
    for (size_t i = 0; i < 3; i++) {
        snprintf(vpath, sizeof(vpath), "%s/%s", victim, names[i]);
        assert_int_equal(lstat(vpath, &st), 0);
    }
    /* A directory of its own there: a resize is refused all the same. */
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/limits", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "vgpu-limits 1\nVGPU_DEVICE_UUID_0=%s\n", UUID_A);
    fclose(f);
    snprintf(path, sizeof(path), "%s/etc", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "vgpu-limits 1\nVGPU_DEVICE_UUID_0=%s\nCUDA_DEVICE_TASK_PRIORITY=0\n", UUID_A);
    fclose(f);
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), -ENOENT);
    assert_int_equal(dp_container_dir_remove(dir, &err), 0);
    assert_int_equal(lstat(dir, &st), -1);
    for (size_t i = 0; i < 3; i++) {
        snprintf(vpath, sizeof(vpath), "%s/%s", victim, names[i]);
        assert_int_equal(unlink(vpath), 0);
    }
    assert_int_equal(rmdir(victim), 0);
    assert_int_equal(rmdir(cfg.vgpu.region_dir), 0);
    dpconfig_free(&cfg);
    assert_int_equal(rmdir(tmp), 0);
}

/* A live resize on the node: the limits file is replaced by rename (a new inode, so a
 * reader holding the old one sees the old text whole), carries the generation, and the
 * generation file is raised after it; the same decision again changes nothing; an older
 * generation never replaces a newer one; a decision moving the container to another GPU,
 * or a directory made before etc/ existed, is refused with a message and changes nothing. */
static void test_container_limits_update(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-resize.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    struct dpconfig cfg;
    load_dirs(&cfg, tmp);
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_A, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 3000;
    m.container.gpus[0].cores = 25;
    char dir[1024], path[1100];
    snprintf(dir, sizeof(dir), "%s/uid-1_main", cfg.vgpu.region_dir);
    struct vg_err err = {0};
    assert_int_equal(dp_container_dir_create(&cfg, &m, dir, false, &err), 0);
    assert_int_equal(generation_of(dir), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    /* Generation 0 again, same limits: nothing to do. */
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 0, &err), 0);
    m.container.gpus[0].memory_mib = 5000;
    m.container.gpus[0].cores = 40;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), 1);
    assert_int_equal(stat(path, &after), 0);
    assert_true(after.st_ino != before.st_ino);
    assert_int_equal(after.st_mode & 0777, 0444);
    assert_int_equal(generation_of(dir), 1);
    static char text[1 << 14];
    size_t n = read_file(path, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_non_null(strstr(text, "VGPU_LIMITS_GENERATION=1\n"));
    assert_non_null(strstr(text, "CUDA_DEVICE_MEMORY_LIMIT_0=5000m\n"));
    assert_non_null(strstr(text, "CUDA_DEVICE_SM_LIMIT_0=40\n"));
    /* libvgpu's reading of it: the new limits, and the environment no longer lowers them. */
    char limit_env[] = "CUDA_DEVICE_MEMORY_LIMIT_0=3000m";
    char *envp[] = {limit_env, NULL};
    struct vgpu_config vc;
    assert_int_equal(vgpu_config_load_at(&vc, envp, path, &err), 0);
    assert_int_equal(vgpu_config_memory_limit(&vc, 0), 5000ull << 20);
    assert_int_equal(vgpu_config_sm_limit(&vc, 0), 40);
    assert_int_equal(vc.generation, 1);
    /* The same again: nothing; an older generation: nothing either. */
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), 0);
    m.container.gpus[0].memory_mib = 1000;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 0, &err), 0);
    assert_int_equal(stat(path, &before), 0);
    assert_int_equal(before.st_ino, after.st_ino);
    /* Killed between the rename and the generation: the next run raises the generation
     * although the text is already the new one. */
    char gpath[1100];
    snprintf(gpath, sizeof(gpath), "%s/etc/generation", dir);
    char gen0[VGPU_GENERATION_SIZE] = VGPU_GENERATION_MAGIC;
    assert_int_equal(chmod(gpath, 0644), 0);
    FILE *f = fopen(gpath, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(gen0, 1, sizeof gen0, f), sizeof gen0);
    fclose(f);
    m.container.gpus[0].memory_mib = 5000;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), 1);
    assert_int_equal(generation_of(dir), 1);
    /* Another GPU: refused, nothing changed. */
    vg_strlcpy(m.container.gpus[0].uuid, UUID_B, sizeof(m.container.gpus[0].uuid));
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 2, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "not applied"));
    assert_int_equal(generation_of(dir), 1);
    /* A directory of the layout before etc/: not resizable, said so. */
    char old[1024];
    snprintf(old, sizeof(old), "%s/uid-9_main", cfg.vgpu.region_dir);
    assert_int_equal(mkdir(old, 0755), 0);
    assert_int_equal(dp_container_limits_update(&cfg, &m, old, 2, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "not resizable"));
    assert_int_equal(rmdir(old), 0);
    assert_int_equal(dp_container_dir_remove(dir, &err), 0);
    assert_int_equal(rmdir(cfg.vgpu.region_dir), 0);
    assert_int_equal(rmdir(cfg.vgpu.compute_board_dir), 0);
    dpconfig_free(&cfg);
    assert_int_equal(rmdir(tmp), 0);
}

/* A live resize's compute share on the board: the slot file keeps its name and inode (a
 * mount point in the container), the share link says the new share; a plugin killed with
 * the link under its temporary name leaves the old share, and the next pass completes it;
 * a new slot of the container drops the link, and the pod's sweep removes both. */
static void test_board_share_resize(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-share.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char yaml[1024];
    snprintf(yaml, sizeof(yaml),
             "version: v1\nvgpu:\n  regionDir: %s/containers\n  computeBoardDir: %s/board\n", tmp,
             tmp);
    struct dpconfig cfg;
    load(&cfg, yaml);
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_B, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 1024;
    m.container.gpus[0].cores = 30;
    struct vg_err err = {0};
    char dir[1024], gpu[1100], path[1200], names[512], target[16];
    assert_int_equal(dp_container_dir_path(cfg.vgpu.region_dir, m.pod_uid, m.container.name, dir,
                                           sizeof(dir), &err),
                     0);
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    snprintf(gpu, sizeof(gpu), "%s/%s", cfg.vgpu.compute_board_dir, UUID_B);
    snprintf(path, sizeof(path), "%s/uid-1_main.30.slot", gpu);
    struct stat before, after;
    assert_int_equal(stat(path, &before), 0);
    m.container.gpus[0].cores = 50;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), 1);
    list_dir(gpu, names, sizeof names);
    assert_string_equal(names, "uid-1_main.30.slot uid-1_main.share");
    assert_int_equal(stat(path, &after), 0);
    assert_int_equal(after.st_ino, before.st_ino);
    snprintf(path, sizeof(path), "%s/uid-1_main.share", gpu);
    ssize_t n = readlink(path, target, sizeof target - 1);
    assert_int_equal(n, 2);
    target[n] = '\0';
    assert_string_equal(target, "50");
    /* Killed after the temporary link: the link still says 50; the next pass (the same
     * generation again) sets 70 and leaves no temporary name. */
    snprintf(path, sizeof(path), "%s/uid-1_main.share.tmp", gpu);
    assert_int_equal(symlink("70", path), 0);
    list_dir(gpu, names, sizeof names);
    assert_string_equal(names, "uid-1_main.30.slot uid-1_main.share uid-1_main.share.tmp");
    m.container.gpus[0].cores = 70;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 2, &err), 1);
    list_dir(gpu, names, sizeof names);
    assert_string_equal(names, "uid-1_main.30.slot uid-1_main.share");
    snprintf(path, sizeof(path), "%s/uid-1_main.share", gpu);
    n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    assert_string_equal(target, "70");
    /* Unlimited after a resize: 100 %, the whole GPU, on the board. */
    m.container.gpus[0].cores = 0;
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 3, &err), 1);
    n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    assert_string_equal(target, "100");
    /* Bad shares and names are refused with a message. */
    assert_int_equal(dp_board_share_set(cfg.vgpu.compute_board_dir, UUID_B, "x", 0, &err), -EINVAL);
    assert_non_null(strstr(err.msg, "1..100"));
    assert_int_equal(dp_board_share_set(cfg.vgpu.compute_board_dir, "..", "x", 5, &err), -EINVAL);
    /* The container made again (a restart with its recorded decision): its slot's name
     * says the share, no link overrides it. */
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, (const char *[]){NULL}, &err), 1);
    m.container.gpus[0].cores = 40;
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    list_dir(gpu, names, sizeof names);
    assert_string_equal(names, "uid-1_main.30.slot uid-1_main.40.slot");
    /* Its decision applied as a resize (generation 1): the link says the slot's share. */
    assert_int_equal(dp_container_limits_update(&cfg, &m, dir, 1, &err), 1);
    n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    assert_string_equal(target, "40");
    snprintf(path, sizeof(path), "%s/uid-1_main.share.tmp", gpu);
    assert_int_equal(symlink("9", path), 0); /* as a plugin killed in a later resize */
    assert_int_equal(dp_board_sweep(cfg.vgpu.compute_board_dir, (const char *[]){NULL}), 4);
    list_dir(gpu, names, sizeof names);
    assert_string_equal(names, "");
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, (const char *[]){NULL}, &err), 1);
    rmdir(cfg.vgpu.region_dir);
    snprintf(path, sizeof(path), "%s/%s.board", cfg.vgpu.compute_board_dir, UUID_B);
    unlink(path);
    rmdir(gpu);
    rmdir(cfg.vgpu.compute_board_dir);
    rmdir(tmp);
    dpconfig_free(&cfg);
}

/* A plugin killed with SIGKILL at any point of setting a share (a child setting 30 and 70
 * in turn, killed after a random 0..3 ms, 300 times): the board holds one link, saying 30
 * or 70, every time; what the child left under the temporary name is no link a reader
 * takes, and the next set goes on over it. */
static void test_board_share_kill(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-share-kill.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    char gpu[1100], link[1200], target[16];
    snprintf(gpu, sizeof gpu, "%s/%s", tmp, UUID_B);
    assert_int_equal(mkdir(gpu, 0755), 0);
    snprintf(link, sizeof link, "%s/uid-1_main.share", gpu);
    struct vg_err err = {0};
    assert_int_equal(dp_board_share_set(tmp, UUID_B, "uid-1_main", 30, &err), 0);
    srand(7);
    unsigned seen[2] = {0, 0};
    for (int round = 0; round < 300; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            struct vg_err e = {0};
            for (unsigned k = 0;; k++)
                if (dp_board_share_set(tmp, UUID_B, "uid-1_main", k % 2 ? 70 : 30, &e) < 0)
                    _exit(1);
        }
        struct timespec ts = {0, (long)(rand() % 3000) * 1000};
        nanosleep(&ts, NULL);
        assert_int_equal(kill(pid, SIGKILL), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status)); /* it never failed on its own */
        ssize_t n = readlink(link, target, sizeof target - 1);
        assert_int_equal(n, 2);
        target[n] = '\0';
        assert_true(strcmp(target, "30") == 0 || strcmp(target, "70") == 0);
        seen[target[0] == '7']++;
        DIR *d = opendir(gpu);
        assert_non_null(d);
        struct dirent *e;
        unsigned links = 0;
        while ((e = readdir(d)) != NULL)
            links += strcmp(e->d_name, "uid-1_main.share") == 0;
        closedir(d);
        assert_int_equal(links, 1);
    }
    assert_true(seen[0] > 0 && seen[1] > 0); /* killed at different steps */
    char names[512], path[1300];
    list_dir(gpu, names, sizeof names);
    assert_true(strcmp(names, "uid-1_main.share") == 0 ||
                strcmp(names, "uid-1_main.share uid-1_main.share.tmp") == 0);
    assert_int_equal(dp_board_sweep(tmp, (const char *[]){NULL}) >= 1, 1);
    snprintf(path, sizeof path, "%s/uid-1_main.share.tmp", gpu);
    unlink(path);
    assert_int_equal(rmdir(gpu), 0);
    assert_int_equal(rmdir(tmp), 0);
}

/* nvidia.com/priority: the limits file carries it, the slot file's name says high, and a
 * container with a priority but no share is on the board all the same (at 100 %). */
static void test_vgpu_priority(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    char tmp[] = "/tmp/dp-unit.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    struct dpconfig cfg;
    load_dirs(&cfg, tmp);
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_B, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 1024;
    m.priority_given = true;
    m.priority = 0;
    struct vg_err err = {0};
    char dir[1024], path[1200], text[4096];
    assert_int_equal(dp_container_dir_path(cfg.vgpu.region_dir, m.pod_uid, m.container.name, dir,
                                           sizeof(dir), &err),
                     0);
    struct dp_response resp;
    assert_int_equal(dp_allocate_vgpu(&cfg, g, 2, &m, dir, &resp, &err), 0);
    bool slot_env = false;
    for (size_t i = 0; i < resp.env_count; i++)
        slot_env |= strcmp(resp.envs[i].key, "VGPU_COMPUTE_SLOT") == 0;
    assert_true(slot_env);
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s/uid-1_main.100.high.slot", cfg.vgpu.compute_board_dir,
             UUID_B);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    size_t n = read_file(path, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_non_null(strstr(text, "\nCUDA_DEVICE_TASK_PRIORITY=0\n"));
    /* A live resize (whose decision does not carry the priority) keeps it. */
    struct dp_match resized = m;
    resized.priority_given = false;
    resized.priority = 1;
    resized.container.gpus[0].memory_mib = 2048;
    assert_int_equal(dp_container_limits_update(&cfg, &resized, dir, 1, &err), 1);
    n = read_file(path, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_non_null(strstr(text, "CUDA_DEVICE_MEMORY_LIMIT_0=2048m"));
    assert_non_null(strstr(text, "\nCUDA_DEVICE_TASK_PRIORITY=0\n"));
    /* Low, with a share: the share's name, no ".high". */
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, (const char *[]){NULL}, &err), 1);
    m.priority = 1;
    m.container.gpus[0].cores = 30;
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    snprintf(path, sizeof(path), "%s/%s/uid-1_main.30.slot", cfg.vgpu.compute_board_dir, UUID_B);
    assert_int_equal(stat(path, &st), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    n = read_file(path, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_non_null(strstr(text, "\nCUDA_DEVICE_TASK_PRIORITY=1\n"));
    /* Not named: no key, and without a share no slot file. */
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, (const char *[]){NULL}, &err), 1);
    assert_int_equal(dp_board_sweep(cfg.vgpu.compute_board_dir, (const char *[]){NULL}), 2);
    m.priority_given = false;
    m.container.gpus[0].cores = 0;
    assert_int_equal(dp_container_create(&cfg, &m, dir, false, &err), 0);
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    n = read_file(path, text, sizeof(text) - 1);
    text[n] = '\0';
    assert_null(strstr(text, "PRIORITY"));
    char names[512];
    snprintf(path, sizeof(path), "%s/%s", cfg.vgpu.compute_board_dir, UUID_B);
    list_dir(path, names, sizeof names);
    assert_string_equal(names, "");
    assert_int_equal(dp_container_dirs_sweep(cfg.vgpu.region_dir, (const char *[]){NULL}, &err), 1);
    rmdir(cfg.vgpu.region_dir);
    snprintf(path, sizeof(path), "%s/%s.board", cfg.vgpu.compute_board_dir, UUID_B);
    unlink(path);
    snprintf(path, sizeof(path), "%s/%s", cfg.vgpu.compute_board_dir, UUID_B);
    rmdir(path);
    rmdir(cfg.vgpu.compute_board_dir);
    rmdir(tmp);
    dpconfig_free(&cfg);
}

/* A container directory is filled under a staging name and renamed into place: its
 * region is the one libvgpu would create, its limits file names the final directory, and
 * neither a failure nor a plugin killed mid-way leaves anything behind for long. */
static void test_container_dir_staging(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-stage.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    struct dpconfig cfg;
    load_dirs(&cfg, tmp);
    const char *rd = cfg.vgpu.region_dir;
    struct dp_match m;
    train_match(&m);
    m.container.gpu_count = 1;
    vg_strlcpy(m.container.gpus[0].uuid, UUID_A, sizeof(m.container.gpus[0].uuid));
    m.container.gpus[0].memory_mib = 3000;
    m.container.gpus[0].cores = 25;
    char dir[1024], path[1200], path2[1300], listing[4096];
    snprintf(dir, sizeof(dir), "%s/uid-1_main", rd);
    struct vg_err err = {0};
    assert_int_equal(dp_container_dir_create(&cfg, &m, dir, false, &err), 0);
    list_dir(rd, listing, sizeof(listing));
    assert_string_equal(listing, "uid-1_main");
    list_dir(dir, listing, sizeof(listing));
    assert_string_equal(listing, "etc region");
    snprintf(path, sizeof(path), "%s/etc", dir);
    list_dir(path, listing, sizeof(listing));
    assert_string_equal(listing, "generation limits");

    static char a[1 << 19], b[1 << 19];
    snprintf(path, sizeof(path), "%s/etc/limits", dir);
    size_t na = read_file(path, a, sizeof(a) - 1);
    a[na] = '\0';
    assert_non_null(strstr(a, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"));
    snprintf(path2, sizeof(path2), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n", dir);
    assert_non_null(strstr(a, path2));
    /* What libvgpu reads from it: the limits, and the board the plugin mounts. Once the
     * file is given libvgpu ignores the environment's keys, so the board must be here. */
    snprintf(path2, sizeof(path2), "VGPU_LIMITS_FILE=%s", path);
    char board_env[] = "VGPU_COMPUTE_BOARD=/elsewhere";
    char *envp[] = {path2, board_env, NULL};
    struct vgpu_config vc;
    assert_int_equal(vgpu_config_load(&vc, envp, &err), 0);
    assert_int_equal(vgpu_config_memory_limit(&vc, 0), 3000ull << 20);
    assert_string_equal(vc.board_dir, cfg.vgpu.compute_board_dir);
    /* The same file at the fixed path, as the plugin mounts it: the same configuration. */
    assert_int_equal(vgpu_config_load_at(&vc, envp + 1, path, &err), 0);
    assert_true(vc.in_container && !vc.closed);
    assert_int_equal(vgpu_config_memory_limit(&vc, 0), 3000ull << 20);
    assert_string_equal(vc.board_dir, cfg.vgpu.compute_board_dir);
    /* Which GPU the limit is for, for vgpu-monitor. */
    assert_string_equal(vc.device_uuid[0], UUID_A);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0444);
    /* Byte for byte the region region_create makes for the same limits, and 0666. */
    snprintf(path, sizeof(path), "%s/region", dir);
    snprintf(path2, sizeof(path2), "%s/reference", tmp);
    struct region_config rc_cfg;
    memset(&rc_cfg, 0, sizeof(rc_cfg));
    rc_cfg.device_count = 1;
    vg_strlcpy(rc_cfg.devices[0].uuid, UUID_A, sizeof(rc_cfg.devices[0].uuid));
    rc_cfg.devices[0].memory_limit = 3000ull << 20;
    rc_cfg.devices[0].sm_limit_percent = 25;
    assert_int_equal(region_create(path2, &rc_cfg, &err), 0);
    na = read_file(path, a, sizeof(a));
    size_t nb = read_file(path2, b, sizeof(b));
    assert_true(na > 4096);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    assert_int_equal(unlink(path2), 0);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0666);
    struct region *r = NULL;
    assert_int_equal(region_open(path, &r, &err), 0);
    assert_int_equal(region_device(r, 0)->memory_limit, 3000ull << 20);
    region_close(r);
    /* A file that is not empty is never made a region. */
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(region_init_fd(fd, &rc_cfg, &err), -EEXIST);
    close(fd);

    /* Failures leave no stage: the directory exists; its parent does not. */
    assert_int_equal(dp_container_dir_create(&cfg, &m, dir, false, &err), -EEXIST);
    vg_strlcpy(m.pod_uid, "uid-3", sizeof(m.pod_uid));
    snprintf(path, sizeof(path), "%s/missing/uid-3_main", rd);
    assert_int_equal(dp_container_dir_create(&cfg, &m, path, false, &err), -ENOENT);
    assert_non_null(strstr(err.msg, "renaming"));
    list_dir(rd, listing, sizeof(listing));
    assert_string_equal(listing, "uid-1_main");
    /* A stage left by a plugin killed mid-Allocate goes with the next sweep; a live
     * pod's directory stays. */
    snprintf(path, sizeof(path), "%s/" DP_STAGE_PREFIX "uid-1_side", rd);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path2, sizeof(path2), "%s/region", path);
    fd = open(path2, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    close(fd);
    const char *live[] = {"uid-1", NULL};
    assert_int_equal(dp_container_dirs_sweep(rd, live, &err), 1);
    list_dir(rd, listing, sizeof(listing));
    assert_string_equal(listing, "uid-1_main");
    const char *nobody[] = {NULL};

    /* Prepared ahead: Allocate only renames the .ready. directory (same inode), whose
     * text already names the final directory; a second prepare replaces the first. */
    vg_strlcpy(m.pod_uid, "uid-4", sizeof(m.pod_uid));
    char dir4[1024], ready[1200];
    snprintf(dir4, sizeof(dir4), "%s/uid-4_main", rd);
    snprintf(ready, sizeof(ready), "%s/" DP_READY_PREFIX "uid-4_main", rd);
    uint64_t d1 = dp_match_digest(&m);
    assert_int_equal(dp_container_dir_prepare(&cfg, &m, dir4, &err), 0);
    m.container.gpus[0].memory_mib = 4000;
    assert_true(dp_match_digest(&m) != d1);
    assert_int_equal(dp_container_dir_prepare(&cfg, &m, dir4, &err), 0);
    struct stat before;
    assert_int_equal(stat(ready, &before), 0);
    list_dir(rd, listing, sizeof(listing));
    assert_string_equal(listing, ".ready.uid-4_main uid-1_main");
    assert_int_equal(dp_container_dir_create(&cfg, &m, dir4, true, &err), 0);
    assert_int_equal(stat(dir4, &st), 0);
    assert_int_equal(st.st_ino, before.st_ino);
    snprintf(path, sizeof(path), "%s/etc/limits", dir4);
    na = read_file(path, a, sizeof(a) - 1);
    a[na] = '\0';
    assert_non_null(strstr(a, "CUDA_DEVICE_MEMORY_LIMIT_0=4000m\n"));
    snprintf(path2, sizeof(path2), "CUDA_DEVICE_MEMORY_SHARED_CACHE=%s/region\n", dir4);
    assert_non_null(strstr(a, path2));
    /* Said to be prepared but gone: made the ordinary way. */
    vg_strlcpy(m.pod_uid, "uid-5", sizeof(m.pod_uid));
    snprintf(path, sizeof(path), "%s/uid-5_main", rd);
    assert_int_equal(dp_container_dir_create(&cfg, &m, path, true, &err), 0);
    list_dir(path, listing, sizeof(listing));
    assert_string_equal(listing, "etc region");
    /* The sweep keeps a live pod's prepared directory and removes a dead one's. */
    vg_strlcpy(m.pod_uid, "uid-6", sizeof(m.pod_uid));
    snprintf(path, sizeof(path), "%s/uid-6_main", rd);
    assert_int_equal(dp_container_dir_prepare(&cfg, &m, path, &err), 0);
    vg_strlcpy(m.pod_uid, "uid-7", sizeof(m.pod_uid));
    snprintf(path, sizeof(path), "%s/uid-7_main", rd);
    assert_int_equal(dp_container_dir_prepare(&cfg, &m, path, &err), 0);
    const char *some[] = {"uid-1", "uid-4", "uid-5", "uid-6", NULL};
    assert_int_equal(dp_container_dirs_sweep(rd, some, &err), 1);
    list_dir(rd, listing, sizeof(listing));
    assert_string_equal(listing, ".ready.uid-6_main uid-1_main uid-4_main uid-5_main");
    assert_int_equal(dp_container_dirs_sweep(rd, nobody, &err), 4);

    /* A region directory that is a file: the reason, and nothing made. */
    assert_int_equal(rmdir(rd), 0);
    fd = open(rd, O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(dp_container_dir_create(&cfg, &m, dir, false, &err), -ENOTDIR);
    assert_non_null(strstr(err.msg, "containers"));
    assert_int_equal(unlink(rd), 0);
    rmdir(cfg.vgpu.compute_board_dir);
    assert_int_equal(rmdir(tmp), 0);
    dpconfig_free(&cfg);
}

static void test_inventory(void **state)
{
    (void)state;
    struct dp_gpu g[2];
    two_gpus(g);
    g[1].healthy = false;
    struct dpconfig cfg;
    load(&cfg, "version: v1\nvgpu:\n  deviceSplitCount: 5\n  deviceMemoryScaling: 0.5\n");
    struct annot_inventory inv;
    dp_inventory(&cfg, ANNOT_MODE_VGPU, g, 2, 1700000000, &inv);
    assert_int_equal(inv.gpu_count, 2);
    assert_int_equal(inv.gpus[0].memory_mib, 81559 / 2);
    assert_int_equal(inv.gpus[0].slots, 5);
    assert_int_equal(inv.gpus[1].numa, 1);
    assert_false(inv.gpus[1].healthy);
    struct vg_err err = {0};
    char *text = annot_inventory_encode(&inv, &err);
    assert_non_null(text);
    struct annot_inventory back;
    assert_int_equal(annot_inventory_decode(text, strlen(text), &back, &err), 0);
    assert_int_equal(back.heartbeat, 1700000000);
    free(text);
    dpconfig_free(&cfg);
}

/* A region under tmp for container dir name, its devices' held times in ns (UUIDs from
 * uuids), or none when name is NULL. */
static void held_region(const char *tmp, const char *name, const char *const *uuids,
                        const int64_t *held, unsigned n)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmp, name);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof path, "%s/region", dir);
    struct region_config config = {.device_count = n};
    for (unsigned d = 0; d < n; d++)
        vg_strlcpy(config.devices[d].uuid, uuids[d], sizeof config.devices[d].uuid);
    struct vg_err err = {0};
    struct region *r = NULL;
    assert_int_equal(region_create(path, &config, &err), 0);
    assert_int_equal(region_open(path, &r, &err), 0);
    for (unsigned d = 0; d < n; d++)
        atomic_store(&region_compute(r, d)->held_ns, held[d]);
    region_close(r);
}

/* The inventory's held list from the container directories: by pod uid, container and
 * inventory GPU, most-held first, clamped, and only what a directory this plugin would
 * make holds (other names, prepared directories, GPUs not in the inventory, a region that
 * is a symlink: nothing). The region is the tenant's: a table naming a GPU twice gives
 * one entry. */
static void test_held_collect(void **state)
{
    (void)state;
    char tmp[] = "/tmp/dp-held.XXXXXX";
    assert_non_null(mkdtemp(tmp));
    struct dp_gpu g[2];
    two_gpus(g);
    struct dpconfig cfg;
    load(&cfg, "version: v1\n");
    static struct annot_inventory inv;
    dp_inventory(&cfg, ANNOT_MODE_VGPU, g, 2, 1700000000, &inv);
    static const char uid1[] = "0b9d2c7e-5f7a-4a63-9c2b-8e2f5d1c3a4b";
    static const char uid2[] = "1c8e3d6f-6a7b-4b74-8d3c-9f3e6e2d4b5c";
    const char *both[] = {UUID_A, UUID_B}, *twice[] = {UUID_B, UUID_B};
    const char *other[] = {"GPU-99999999-0000-0000-0000-000000000000", UUID_A};
    char name[200];
    snprintf(name, sizeof name, "%s_infer", uid1);
    held_region(tmp, name, both, (const int64_t[]){2500000000, 0}, 2);
    snprintf(name, sizeof name, "%s_batch", uid2);
    held_region(tmp, name, twice, (const int64_t[]){INT64_MAX, 5000000000}, 2);
    snprintf(name, sizeof name, "%s_side", uid2);
    held_region(tmp, name, other, (const int64_t[]){9000000000, 1999999999}, 2);
    held_region(tmp, "no-underscore", both, (const int64_t[]){7000000000, 0}, 2);
    snprintf(name, sizeof name, "%s_Bad", uid1);
    held_region(tmp, name, both, (const int64_t[]){7000000000, 0}, 2);
    snprintf(name, sizeof name, ".ready.%s_later", uid1);
    held_region(tmp, name, both, (const int64_t[]){7000000000, 0}, 2);
    /* A region replaced by a symlink to another container's is not followed. */
    char path[600], target[600];
    snprintf(path, sizeof path, "%s/%s_link", tmp, uid1);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(target, sizeof target, "%s/%s_infer/region", tmp, uid1);
    snprintf(path, sizeof path, "%s/%s_link/region", tmp, uid1);
    assert_int_equal(symlink(target, path), 0);

    dp_held_collect(tmp, &inv);
    assert_int_equal(inv.held_count, 4);
    /* batch on GPU 1: INT64_MAX ns clamped; its table's second GPU-B entry ignored. */
    assert_string_equal(inv.held[0].pod, uid2);
    assert_string_equal(inv.held[0].container, "batch");
    assert_int_equal(inv.held[0].gpu, 1);
    assert_int_equal(inv.held[0].seconds, ANNOT_HELD_SECONDS_MAX);
    assert_string_equal(inv.held[1].container, "infer");
    assert_int_equal(inv.held[1].gpu, 0);
    assert_int_equal(inv.held[1].seconds, 2);
    assert_string_equal(inv.held[2].container, "side");
    assert_int_equal(inv.held[2].gpu, 0);
    assert_int_equal(inv.held[2].seconds, 1);
    assert_string_equal(inv.held[3].container, "infer");
    assert_int_equal(inv.held[3].gpu, 1);
    assert_int_equal(inv.held[3].seconds, 0);
    /* What the scheduler decodes. */
    struct vg_err err = {0};
    char *text = annot_inventory_encode(&inv, &err);
    assert_non_null(text);
    static struct annot_inventory back;
    assert_int_equal(annot_inventory_decode(text, strlen(text), &back, &err), 0);
    assert_int_equal(back.held_count, 4);
    free(text);
    /* No directory, or no GPU: nothing, and nothing left over from before. */
    dp_held_collect("/nonexistent/vgpu-held", &inv);
    assert_int_equal(inv.held_count, 0);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
    dpconfig_free(&cfg);
}

/* A container directory is named only from Kubernetes-valid names: nothing else reaches
 * the path, and the message does not echo what was refused. */
static void test_container_dir_names(void **state)
{
    (void)state;
    char path[256];
    struct vg_err err = {0};
    assert_int_equal(dp_container_dir_path("/r", "0b9d2c7e-5f7a-4a63-9c2b-8e2f5d1c3a4b", "main",
                                           path, sizeof(path), &err),
                     0);
    assert_string_equal(path, "/r/0b9d2c7e-5f7a-4a63-9c2b-8e2f5d1c3a4b_main");
    static const char *const bad[][2] = {
        {"u1", "main\nx"}, {"u1", "a/b"},   {"u1", ".."},    {"u1", "../x"},  {"u1", ""},
        {"u1", "Main"},    {"u_1", "main"}, {"..", "main"},  {"a/b", "main"}, {"", "main"},
        {"u1", "a b"},     {"u1\n", "m"},   {"u1", "m\x7f"}, {"u1", "é"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(&err, 0, sizeof(err));
        if (dp_container_dir_path("/r", bad[i][0], bad[i][1], path, sizeof(path), &err) != -EINVAL)
            fail_msg("accepted uid '%s' container '%s'", bad[i][0], bad[i][1]);
        assert_null(strchr(err.msg, '\n'));
        assert_non_null(strstr(err.msg, "not a valid Kubernetes name"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_physical_uuid),
        cmocka_unit_test(test_resources_vgpu),
        cmocka_unit_test(test_resources_time_slicing),
        cmocka_unit_test(test_fail_requests_greater_than_one),
        cmocka_unit_test(test_device_list_strategies),
        cmocka_unit_test(test_pack_cdi),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_vgpu_allocate_and_dirs),
        cmocka_unit_test(test_board_share_resize),
        cmocka_unit_test(test_board_share_kill),
        cmocka_unit_test(test_vgpu_priority),
        cmocka_unit_test(test_container_dir_staging),
        cmocka_unit_test(test_container_limits_update),
        cmocka_unit_test(test_container_old_dir_tenant_etc),
        cmocka_unit_test(test_inventory),
        cmocka_unit_test(test_held_collect),
        cmocka_unit_test(test_dev_root),
        cmocka_unit_test(test_imex),
        cmocka_unit_test(test_nvml_library),
        cmocka_unit_test(test_allocation_policy),
        cmocka_unit_test(test_container_dir_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
