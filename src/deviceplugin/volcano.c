/* Volcano mode of the device plugin (docs/volcano.md): the three resources Volcano's
 * scheduler counts, the node annotations it reads, and the decision checks of Allocate.
 * The container itself is vgpu's (dp_allocate_vgpu, dp_container_create): only where the
 * decision comes from differs from vgpu mode. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/volcano.h"
#include "deviceplugin/volcano_plugin.h"

bool dp_volcano_mode(const struct dpconfig *cfg)
{
    return cfg->vgpu.scheduler_protocol == DPCONFIG_PROTOCOL_VOLCANO;
}

uint64_t dp_volcano_units(const struct dpconfig *cfg, const struct dp_gpu *g)
{
    double units = (double)g->memory_mib * cfg->volcano.device_memory_scaling /
                   (double)cfg->volcano.gpu_memory_factor;
    return units < 0 ? 0 : (uint64_t)units;
}

uint64_t dp_volcano_capacity_mib(const struct dpconfig *cfg, const struct dp_gpu *g)
{
    return dp_volcano_units(cfg, g) * cfg->volcano.gpu_memory_factor;
}

static int add_id(struct dp_resource *r, const char *id, unsigned gpu, struct vg_err *err)
{
    return dp_resource_add(r, id, gpu, DP_VOLCANO_MAX_IDS, err);
}

static int resource(struct dp_resources *out, const char *name, enum dp_volcano_kind kind,
                    const char *endpoint, struct vg_err *err)
{
    struct dp_resource *r = &out->items[out->count++];
    memset(r, 0, sizeof(*r));
    r->volcano = kind;
    r->replicas = 1;
    if (vg_strlcpy(r->name, name, sizeof(r->name)) < 0 ||
        vg_strlcpy(r->endpoint, endpoint, sizeof(r->endpoint)) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "resource name '%s' is too long", name);
    return 0;
}

int dp_volcano_resources(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                         struct dp_resources *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    out->mode = ANNOT_MODE_VGPU;
    const struct dpconfig_volcano *v = &cfg->volcano;
    for (unsigned i = 0; i < n; i++)
        if (gpus[i].mig_enabled)
            return vg_err_set(err, -ENOTSUP,
                              "GPU %s has MIG enabled: Volcano's `mig` mode (dynamic MIG, IDs "
                              "UUID[<group>-<pos>]) is not served by vgpu's plugin; disable MIG "
                              "on the GPU, or keep volcano-vgpu-device-plugin on this node "
                              "(docs/volcano.md)",
                              gpus[i].uuid);
    int rc;
    if ((rc = resource(out, v->count_name, DP_VOLCANO_NUMBER, "vgpu-volcano-number.sock", err)) <
            0 ||
        (rc = resource(out, v->memory_name, DP_VOLCANO_MEMORY, "vgpu-volcano-memory.sock", err)) <
            0 ||
        (rc = resource(out, v->core_name, DP_VOLCANO_CORES, "vgpu-volcano-cores.sock", err)) < 0)
        return rc;
    char id[DP_ID_MAX * 2];
    size_t bytes = 0;
    unsigned cores = (unsigned)(100.0 * v->device_core_scaling);
    for (unsigned i = 0; i < n && rc == 0; i++) {
        uint64_t units = dp_volcano_units(cfg, &gpus[i]);
        if (units == 0 || cores == 0)
            return vg_err_set(err, -EINVAL,
                              "GPU %s: %llu MiB give no %s with gpuMemoryFactor %llu, or "
                              "deviceCoreScaling gives no cores: Volcano ignores such a node",
                              gpus[i].uuid, (unsigned long long)gpus[i].memory_mib, v->memory_name,
                              (unsigned long long)v->gpu_memory_factor);
        for (uint64_t k = 0; k < cfg->vgpu.device_split_count && rc == 0; k++) {
            vg_snprintf(id, sizeof id, "%s-%llu", gpus[i].uuid, (unsigned long long)k);
            rc = add_id(&out->items[0], id, i, err);
        }
        for (uint64_t k = 0; k < units && rc == 0; k++) {
            vg_snprintf(id, sizeof id, "%s-memory-%llu", gpus[i].uuid, (unsigned long long)k);
            bytes += strlen(id) + 24; /* the ID, health, NUMA node and protobuf framing */
            rc = add_id(&out->items[1], id, i, err);
        }
        for (unsigned k = 0; k < cores && rc == 0; k++) {
            vg_snprintf(id, sizeof id, "%s-core-%u", gpus[i].uuid, k);
            rc = add_id(&out->items[2], id, i, err);
        }
    }
    /* kubelet reads a ListAndWatch answer of at most 4 MiB (gRPC's default). */
    if (rc == 0 && bytes > DP_VOLCANO_MAX_LIST_BYTES)
        rc = vg_err_set(
            err, -E2BIG,
            "%s: %zu device IDs (one per %llu MiB) would not fit in kubelet's 4 MiB "
            "device list; raise nvidia.gpuMemoryFactor in Volcano's device config "
            "to at least %llu",
            v->memory_name, out->items[1].device_count, (unsigned long long)v->gpu_memory_factor,
            (unsigned long long)(v->gpu_memory_factor * bytes / DP_VOLCANO_MAX_LIST_BYTES + 1));
    if (rc < 0)
        dp_resources_release(out);
    return rc;
}

static int by_minor(const void *a, const void *b)
{
    const struct dp_gpu *x = *(const struct dp_gpu *const *)a,
                        *y = *(const struct dp_gpu *const *)b;
    return x->minor < y->minor ? -1 : x->minor > y->minor;
}

char *dp_volcano_register_value(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                                struct vg_err *err)
{
    const struct dp_gpu *order[DP_MAX_GPUS];
    struct vc_node_device devs[DP_MAX_GPUS];
    for (unsigned i = 0; i < n && i < DP_MAX_GPUS; i++)
        order[i] = &gpus[i];
    /* Volcano numbers a card by its position; HEAD's plugin lists them by minor number. */
    qsort(order, n, sizeof(order[0]), by_minor);
    for (unsigned i = 0; i < n; i++) {
        struct vc_node_device *d = &devs[i];
        memset(d, 0, sizeof(*d));
        vg_strlcpy(d->uuid, order[i]->uuid, sizeof d->uuid);
        d->count = cfg->vgpu.device_split_count;
        d->memory = dp_volcano_units(cfg, order[i]);
        vg_snprintf(d->type, sizeof d->type, "%s-%s", VC_TYPE_NVIDIA, order[i]->model);
        d->healthy = order[i]->healthy;
        vg_strlcpy(d->mode, VC_MODE_HAMI_CORE, sizeof d->mode);
    }
    size_t size = (size_t)n * 256 + 1;
    char *out = malloc(size);
    if (out == NULL) {
        vg_err_set(err, -ENOMEM, "out of memory");
        return NULL;
    }
    if (vc_node_register_encode(devs, n, out, size, err) < 0) {
        free(out);
        return NULL;
    }
    return out;
}

void dp_volcano_handshake_value(int64_t now, char *out, size_t size)
{
    time_t t = (time_t)now;
    struct tm tm;
    char when[64] = "";
    if (gmtime_r(&t, &tm) != NULL)
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S +0000 UTC", &tm);
    vg_snprintf(out, size, "Reported %s", when);
}

static const struct dp_gpu *gpu_by_uuid(const struct dp_gpu *gpus, unsigned n, const char *uuid)
{
    for (unsigned i = 0; i < n; i++)
        if (strcmp(gpus[i].uuid, uuid) == 0)
            return &gpus[i];
    return NULL;
}

struct cap_arg {
    const struct dpconfig *cfg;
    const struct dp_gpu *gpus;
    unsigned n;
};

static uint64_t cap_of(void *arg, const char *uuid)
{
    const struct cap_arg *a = arg;
    const struct dp_gpu *g = gpu_by_uuid(a->gpus, a->n, uuid);
    return g ? dp_volcano_capacity_mib(a->cfg, g) : 0;
}

int dp_volcano_check(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                     const struct vc_ledger *ledger, const struct vc_pending *pending,
                     struct dp_match *match, struct vc_charge *charge, struct vg_err *err)
{
    const struct vc_segment *seg = &pending->remain.segs[pending->segment];
    const char *ns = pending->pod_namespace, *name = pending->pod_name;
    memset(match, 0, sizeof(*match));
    memset(charge, 0, sizeof(*charge));
    vg_strlcpy(match->pod_uid, pending->pod_uid, sizeof match->pod_uid);
    vg_strlcpy(match->pod_namespace, ns, sizeof match->pod_namespace);
    vg_strlcpy(match->pod_name, name, sizeof match->pod_name);
    vg_strlcpy(match->container.name, pending->container, sizeof match->container.name);
    vg_strlcpy(charge->pod_uid, pending->pod_uid, sizeof charge->pod_uid);
    charge->segment = pending->segment;
    charge->local = true;
    uint64_t factor = cfg->volcano.gpu_memory_factor;
    for (unsigned i = 0; i < seg->count; i++) {
        const struct vc_device *d = &seg->devs[i];
        const struct dp_gpu *g = gpu_by_uuid(gpus, n, d->uuid);
        if (strcmp(d->type, VC_TYPE_NVIDIA) != 0)
            return vg_err_set(err, -EINVAL,
                              "pod %s/%s container %s: device %s has type '%s', not '%s'", ns, name,
                              pending->container, d->uuid, d->type, VC_TYPE_NVIDIA);
        if (g == NULL)
            return vg_err_set(err, -EINVAL,
                              "pod %s/%s container %s: the decision names GPU %s, which this node "
                              "does not have",
                              ns, name, pending->container, d->uuid);
        uint64_t cap = dp_volcano_capacity_mib(cfg, g);
        if (d->memory > cap / factor)
            return vg_err_set(err, -EINVAL,
                              "pod %s/%s container %s: %llu MiB asked on GPU %s, which has %llu "
                              "MiB",
                              ns, name, pending->container,
                              (unsigned long long)(d->memory * factor), d->uuid,
                              (unsigned long long)cap);
        match->container.gpus[i].memory_mib = d->memory * factor;
        match->container.gpus[i].cores = d->cores;
        vg_strlcpy(match->container.gpus[i].uuid, d->uuid, sizeof match->container.gpus[i].uuid);
        charge->gpus[i].memory_mib = d->memory * factor;
        charge->gpus[i].cores = d->cores;
        vg_strlcpy(charge->gpus[i].uuid, d->uuid, sizeof charge->gpus[i].uuid);
    }
    match->container.gpu_count = seg->count;
    charge->gpu_count = seg->count;
    struct cap_arg a = {cfg, gpus, n};
    int rc = vc_ledger_check(ledger, charge, cap_of, &a, err);
    if (rc < 0)
        return vg_err_wrap(err, "pod %s/%s container %s", ns, name, pending->container);
    return 0;
}

int dp_volcano_remaining(struct vc_pending *pending, const struct vc_ledger *ledger, char *out,
                         size_t size, bool *done, struct vg_err *err)
{
    struct vc_pod_devices *left = &pending->remain;
    *done = true;
    for (unsigned s = 0; s < left->count; s++) {
        if (vc_ledger_has(ledger, pending->pod_uid, s))
            left->segs[s].count = 0;
        for (unsigned i = 0; i < left->segs[s].count; i++)
            if (strcmp(left->segs[s].devs[i].type, VC_TYPE_NVIDIA) == 0)
                *done = false;
    }
    return vc_pod_devices_encode(left, out, size, err);
}

bool dp_volcano_id_known(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                         enum dp_volcano_kind kind, const char *id)
{
    for (unsigned i = 0; i < n; i++) {
        size_t ul = strlen(gpus[i].uuid);
        if (strncmp(id, gpus[i].uuid, ul) != 0)
            continue;
        const char *rest = id + ul;
        const char *tag = kind == DP_VOLCANO_MEMORY  ? "-memory-"
                          : kind == DP_VOLCANO_CORES ? "-core-"
                                                     : "-";
        uint64_t max = kind == DP_VOLCANO_MEMORY ? dp_volcano_units(cfg, &gpus[i])
                       : kind == DP_VOLCANO_CORES
                           ? (uint64_t)(100.0 * cfg->volcano.device_core_scaling)
                           : cfg->vgpu.device_split_count;
        uint64_t k;
        if (strncmp(rest, tag, strlen(tag)) != 0 || max == 0 ||
            vg_parse_u64(rest + strlen(tag), 0, max - 1, &k, NULL) < 0)
            continue;
        /* Only the canonical spelling: no leading zeros. */
        const char *num = rest + strlen(tag);
        if (num[0] == '0' && num[1] != '\0')
            continue;
        return true;
    }
    return false;
}

void dp_volcano_foreach_waiting(const struct dpconfig *cfg, const struct dp_gpu *gpus, unsigned n,
                                json_t *pod, void (*fn)(void *arg, const struct dp_match *m),
                                void *arg)
{
    json_t *meta = json_object_get(pod, "metadata"), *ann = json_object_get(meta, "annotations");
    const char *where = json_string_value(json_object_get(ann, VC_KEY_NODE));
    const char *left = json_string_value(json_object_get(ann, VC_KEY_TO_ALLOCATE));
    const char *phase = json_string_value(json_object_get(ann, VC_KEY_BIND_PHASE));
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    if (where == NULL || strcmp(where, cfg->cli.node_name) != 0 || left == NULL ||
        left[0] == '\0' || (phase != NULL && strcmp(phase, "allocating") != 0) ||
        !annot_pod_uid(uid) || !annot_dns_label(ns) || !annot_dns_subdomain(name))
        return;
    struct vc_pod_devices *pd = malloc(sizeof(*pd));
    struct dp_match *m = malloc(sizeof(*m));
    char(*names)[ANNOT_NAME_MAX] = malloc(ANNOT_MAX_CONTAINERS * ANNOT_NAME_MAX);
    int count;
    if (pd == NULL || m == NULL || names == NULL ||
        vc_pod_devices_decode(left, strlen(left), pd, NULL) < 0 ||
        (count = vc_gpu_containers(pod, &cfg->volcano, names, NULL)) < 0)
        goto out;
    for (unsigned s = 0; s < pd->count && (int)s < count; s++) {
        const struct vc_segment *seg = &pd->segs[s];
        bool ok = seg->count > 0;
        memset(m, 0, sizeof(*m));
        vg_strlcpy(m->pod_uid, uid, sizeof m->pod_uid);
        vg_strlcpy(m->pod_namespace, ns, sizeof m->pod_namespace);
        vg_strlcpy(m->pod_name, name, sizeof m->pod_name);
        vg_strlcpy(m->container.name, names[s], sizeof m->container.name);
        for (unsigned i = 0; i < seg->count && ok; i++) {
            const struct dp_gpu *g = gpu_by_uuid(gpus, n, seg->devs[i].uuid);
            ok = g != NULL && strcmp(seg->devs[i].type, VC_TYPE_NVIDIA) == 0 &&
                 seg->devs[i].memory <= dp_volcano_units(cfg, g);
            vg_strlcpy(m->container.gpus[i].uuid, seg->devs[i].uuid,
                       sizeof m->container.gpus[i].uuid);
            m->container.gpus[i].memory_mib = seg->devs[i].memory * cfg->volcano.gpu_memory_factor;
            m->container.gpus[i].cores = seg->devs[i].cores;
        }
        m->container.gpu_count = seg->count;
        if (ok)
            fn(arg, m);
    }
out:
    free(pd);
    free(m);
    free(names);
}
