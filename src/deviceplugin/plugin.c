/* The device plugin daemon on one libevent loop (docs/deviceplugin.md).
 *
 * One gRPC server per advertised resource, each on its own socket in the kubelet
 * directory, registered with kubelet.sock. kubelet restarts are seen through inotify on
 * that directory: kubelet wipes it (our sockets too) and creates kubelet.sock again, so on
 * IN_CREATE of kubelet.sock every server is re-created and re-registered. A registration
 * that fails (kubelet.sock missing or not yet listening) is retried on a timer: quickly at
 * first, since kubelet creates the socket a moment before it accepts, then every
 * register_retry_ms.
 *
 * Health is polled on a timer; a change is streamed to every open ListAndWatch and
 * republished in the node's inventory annotation, which is also rewritten every heartbeat.
 * In vgpu mode a pod watch (spec.nodeName=<node>) keeps this node's pods in memory: their
 * decoded decisions in the pod cache (podcache.h) that Allocate matches against, and the
 * pods themselves for the cleanup of container directories whose pod is gone. Allocate is
 * a deferred gRPC call: on a cache miss it waits for a direct GET of the node's pods (the
 * watch may lag a pod bound a moment ago) while the loop goes on. */
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/auto.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/podcache.h"
#include "deviceplugin/volcano_plugin.h"
#include "grpc/grpc.h"
#include "grpc/kubelet/api.h"
#include "kube/kube.h"

#define MAX_STREAMS      16
#define FAST_RETRY_MS    50
#define FAST_RETRY_COUNT 100
#define LOOKUP_MS        5000

struct dp_plugin;
struct lookup;

struct serving {
    struct dp_plugin *plugin;
    struct dp_resource *resource;
    struct vgrpc_server *server;
    struct vgrpc_client *registration;
    struct vgrpc_stream *streams[MAX_STREAMS];
    size_t stream_count;
    bool registered;
};

struct dp_plugin {
    struct event_base *base;
    const struct dpconfig *cfg;
    struct dp_plugin_options opt;
    struct dp_gpu gpus[DP_MAX_GPUS];
    unsigned gpu_count;
    struct dp_resources res;
    struct serving serving[DP_MAX_RESOURCES];
    char kubelet_socket[PATH_MAX];
    int inotify_fd;
    struct event *inotify_event, *health_timer, *heartbeat_timer, *sweep_timer, *retry_timer;
    struct event *vc_flush_event; /* Volcano mode: the write-back, a turn after the answer */
    bool vc_flush_due;            /* ... made active and not yet run */
    unsigned fast_retries;
    bool restarting; /* flags.restartOnDeviceUnhealthy fired */
    struct kube_watch *pods_watch;
    json_t *pods;                  /* uid -> pod */
    struct dp_podcache *decisions; /* what Allocate matches against */
    json_t *prepared;              /* "<uid>_<container>" -> digest of its .ready. directory */
    struct dp_mps *mps;            /* MPS control daemons; NULL unless mps mode */
    struct lookup *lookups;        /* Allocate calls waiting for a direct pod lookup */
    bool inventory_in_flight;
    bool inventory_dirty; /* changed while a write was in flight: write again */
    /* Dynamic MIG: the instances this plugin made or adopted (by GPU and start), whether
     * the first reconciliation (adopt or destroy what is there) has run, the refusals. */
    bool mig_owned[DP_MAX_GPUS][8];
    bool mig_reconciled;
    bool mig_pending; /* an unused instance had processes: look again at each health poll */
    struct annot_mig_refused mig_refused;
    struct dp_plugin_stats stats;
    /* Volcano mode: what is given out per GPU, and the pod annotations one Allocate call
     * writes back ("<ns>/<name>" -> annotations), sent with its answer. */
    struct vc_ledger *ledger;
    struct vc_waiting vc_waiting; /* pods with a Volcano decision left to allocate */
    json_t *vc_writes;
    bool vc_release_lock;
};

static void publish_inventory(struct dp_plugin *p);
static void mig_reconcile(struct dp_plugin *p);

/* ---- ListAndWatch ------------------------------------------------------------------- */

static int pack_devices(struct dp_plugin *p, const struct dp_resource *r, uint8_t **data,
                        size_t *len)
{
    V1beta1__ListAndWatchResponse resp = V1BETA1__LIST_AND_WATCH_RESPONSE__INIT;
    size_t n = r->device_count;
    V1beta1__Device *devs = xcalloc(n + 1, sizeof(*devs));
    V1beta1__Device **ptrs = xcalloc(n + 1, sizeof(*ptrs));
    V1beta1__TopologyInfo *topo = xcalloc(n + 1, sizeof(*topo));
    V1beta1__NUMANode *numa = xcalloc(n + 1, sizeof(*numa));
    V1beta1__NUMANode **numa_ptrs = xcalloc(n + 1, sizeof(*numa_ptrs));
    for (size_t i = 0; i < n; i++) {
        const struct dp_gpu *g = &p->gpus[r->devices[i].gpu];
        v1beta1__device__init(&devs[i]);
        devs[i].id = (char *)r->devices[i].id;
        bool healthy = g->healthy && dp_mps_ready(p->mps, r->devices[i].gpu);
        devs[i].health = (char *)(healthy ? VGRPC_KUBELET_HEALTHY : VGRPC_KUBELET_UNHEALTHY);
        if (g->numa >= 0) {
            v1beta1__topology_info__init(&topo[i]);
            v1beta1__numanode__init(&numa[i]);
            numa[i].id = g->numa;
            numa_ptrs[i] = &numa[i];
            topo[i].n_nodes = 1;
            topo[i].nodes = &numa_ptrs[i];
            devs[i].topology = &topo[i];
        }
        ptrs[i] = &devs[i];
    }
    resp.n_devices = n;
    resp.devices = ptrs;
    *len = v1beta1__list_and_watch_response__get_packed_size(&resp);
    *data = xmalloc(*len ? *len : 1);
    v1beta1__list_and_watch_response__pack(&resp, *data);
    free(devs);
    free(ptrs);
    free(topo);
    free(numa);
    free(numa_ptrs);
    return 0;
}

static void send_devices(struct serving *s, struct vgrpc_stream *stream)
{
    uint8_t *data;
    size_t len;
    pack_devices(s->plugin, s->resource, &data, &len);
    struct vg_err err = {0};
    if (vgrpc_stream_send(stream, data, len, &err) < 0)
        vg_log(VG_LOG_WARN, "ListAndWatch send failed", "resource=%s err=\"%s\"", s->resource->name,
               err.msg);
    free(data);
}

static void stream_closed(void *arg, struct vgrpc_stream *stream, enum vgrpc_status_code status)
{
    struct serving *s = arg;
    (void)status;
    for (size_t i = 0; i < s->stream_count; i++)
        if (s->streams[i] == stream) {
            s->streams[i] = s->streams[--s->stream_count];
            break;
        }
}

static enum vgrpc_status_code handle_list_and_watch(void *arg, struct vgrpc_stream *stream,
                                                    const uint8_t *req, size_t len,
                                                    char message[VGRPC_STATUS_MESSAGE_MAX])
{
    struct serving *s = arg;
    (void)req;
    (void)len;
    if (s->stream_count == MAX_STREAMS) {
        vg_snprintf(message, VGRPC_STATUS_MESSAGE_MAX, "too many ListAndWatch streams");
        return VGRPC_STATUS_RESOURCE_EXHAUSTED;
    }
    s->streams[s->stream_count++] = stream;
    vgrpc_stream_on_close(stream, stream_closed, s);
    send_devices(s, stream);
    return VGRPC_STATUS_OK;
}

/* ---- unary handlers ----------------------------------------------------------------- */

static enum vgrpc_status_code handle_options(void *arg, const uint8_t *req, size_t len,
                                             struct vgrpc_reply *reply)
{
    (void)arg;
    (void)req;
    (void)len;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.pre_start_required = false;
    o.get_preferred_allocation_available = true;
    reply->len = v1beta1__device_plugin_options__get_packed_size(&o);
    reply->data = xmalloc(reply->len ? reply->len : 1);
    v1beta1__device_plugin_options__pack(&o, reply->data);
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code handle_prestart(void *arg, const uint8_t *req, size_t len,
                                              struct vgrpc_reply *reply)
{
    (void)arg;
    V1beta1__PreStartContainerRequest *r =
        v1beta1__pre_start_container_request__unpack(NULL, len, req);
    if (!r) {
        vg_snprintf(reply->message, sizeof(reply->message), "malformed PreStartContainerRequest");
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    v1beta1__pre_start_container_request__free_unpacked(r, NULL);
    reply->data = NULL;
    reply->len = 0;
    return VGRPC_STATUS_OK;
}

/* p->prepared's key for a container directory: its name, "<uid>_<container>". */
static const char *prepared_key(const char *dir)
{
    return strrchr(dir, '/') + 1; /* dp_container_dir_path puts one there */
}

static bool dir_allocated(void *arg, const char *uid, const char *container)
{
    struct dp_plugin *p = arg;
    char path[1024];
    struct stat st;
    if (dp_container_dir_path(p->cfg->vgpu.region_dir, uid, container, path, sizeof(path), NULL) <
        0)
        return true; /* cannot be given a directory: never pick it */
    return stat(path, &st) == 0;
}

static int check_pods_ready(struct dp_plugin *p, struct vg_err *err)
{
    if (!p->pods_watch)
        return vg_err_set(err, -ENOTCONN,
                          "vgpu mode needs the Kubernetes API to read scheduling decisions "
                          "(no --kubeconfig and no in-cluster credentials)");
    if (!kube_watch_synced(p->pods_watch))
        return vg_err_set(err, -EAGAIN, "this node's pod list is not loaded yet; retry");
    return 0;
}

/* ---- dynamic MIG ------------------------------------------------------------------- */

static void event_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)arg;
    (void)body;
    if (err->code != 0)
        vg_log(VG_LOG_WARN, "cannot post an Event", "status=%ld err=\"%s\"", status, err->msg);
}

/* A Warning Event on the pod, as kubectl describe shows it. */
static void post_event(struct dp_plugin *p, const struct dp_match *m, const char *reason,
                       const char *message)
{
    if (!p->opt.kube)
        return;
    static unsigned long long seq;
    struct kube_warning w = {.ns = m->pod_namespace,
                             .pod = m->pod_name,
                             .uid = m->pod_uid,
                             .reason = reason,
                             .message = message,
                             .component = "vgpu-device-plugin",
                             .node = p->cfg->cli.node_name};
    struct vg_err err = {0};
    if (kube_post_warning(p->opt.kube, &w, ++seq, event_done, p, &err) < 0)
        vg_log(VG_LOG_WARN, "cannot post an Event", "err=\"%s\"", err.msg);
}

/* The decision's MIG placement is refused: the pod's events, the node's refused list (the
 * scheduler avoids the placement for a while), the log. */
static int mig_refuse(struct dp_plugin *p, const struct dp_match *m, const struct annot_share *s,
                      struct vg_err *err)
{
    char message[512];
    (void)vg_snprintf(message, sizeof message, "MIG %s at memory slice %u on GPU %s refused: %s",
                      s->mig_profile, s->mig_start, s->uuid, err->msg);
    vg_log(VG_LOG_WARN, "MIG placement refused", "pod=%s/%s container=%s err=\"%s\"",
           m->pod_namespace, m->pod_name, m->container.name, message);
    post_event(p, m, "MIGPlacementRefused", message);
    dp_migdyn_refused_add(&p->mig_refused, s->uuid, s->mig_profile, s->mig_start,
                          (int64_t)time(NULL), err->msg);
    publish_inventory(p);
    return vg_err_set(err, err->code ? err->code : -EINVAL, "%s", message);
}

/* Replaces the entries of NVIDIA_VISIBLE_DEVICES that name GPU g (its UUID, or its index
 * with deviceIDStrategy index) by its MIG device. */
static int visible_mig(struct dp_plugin *p, const struct dp_gpu *g,
                       const struct nvml_mig_instance *mi, struct dp_response *resp,
                       struct vg_err *err)
{
    char index[16], mig_index[32];
    (void)vg_snprintf(index, sizeof index, "%u", g->index);
    (void)vg_snprintf(mig_index, sizeof mig_index, "%u:%u", g->index, mi->mig_index);
    for (size_t i = 0; i < resp->env_count; i++) {
        struct dp_env *e = &resp->envs[i];
        if (strcmp(e->key, "NVIDIA_VISIBLE_DEVICES") != 0)
            continue;
        char out[sizeof e->value] = "";
        size_t used = 0;
        char *save = NULL;
        for (char *t = strtok_r(e->value, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            const char *v = strcmp(t, g->uuid) == 0 ? mi->uuid
                            : strcmp(t, index) == 0 ? mig_index
                                                    : t;
            int n = vg_snprintf(out + used, sizeof out - used, "%s%s", used ? "," : "", v);
            if (n < 0)
                return vg_err_set(err, -ENOSPC, "NVIDIA_VISIBLE_DEVICES too long");
            used += (size_t)n;
        }
        memcpy(e->value, out, sizeof out);
    }
    (void)p;
    return 0;
}

/* Makes (or finds the pod's own) GPU instance a container's decision names on one GPU,
 * and gives the container that MIG device. */
static int allocate_mig(struct dp_plugin *p, struct dp_match *m, unsigned k,
                        struct dp_response *resp, struct vg_err *err)
{
    const struct annot_share *s = &m->container.gpus[k];
    struct dp_gpu *g = NULL;
    for (unsigned i = 0; i < p->gpu_count && !g; i++)
        if (strcmp(p->gpus[i].uuid, s->uuid) == 0)
            g = &p->gpus[i];
    if (!g)
        return vg_err_set(err, -EINVAL, "the decision names GPU %s, which this node lacks",
                          s->uuid);
    if (!g->mig_dynamic || !p->opt.source.mig_state || !p->opt.source.mig_create) {
        vg_err_set(err, -EINVAL, "GPU %s is not served with dynamic MIG", g->uuid);
        return mig_refuse(p, m, s, err);
    }
    int rc = p->opt.source.mig_state(p->opt.source.arg, g, err);
    if (rc < 0)
        return mig_refuse(p, m, s, err);
    VG_AUTO_FREE struct dp_mig_claim *claims = xcalloc(DP_MIG_MAX_CLAIMS, sizeof(*claims));
    size_t n = dp_migdyn_claims(p->pods, claims);
    int existing;
    const struct nvml_mig_profile *prof;
    rc = dp_migdyn_check(g, s, m->pod_uid, claims, n, &existing, &prof, err);
    if (rc < 0)
        return mig_refuse(p, m, s, err);
    struct nvml_mig_instance made;
    const struct nvml_mig_instance *mi;
    if (existing >= 0) {
        mi = &g->mig_instances[existing];
    } else {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        rc = p->opt.source.mig_create(p->opt.source.arg, g, prof, s->mig_start, &made, err);
        if (rc < 0)
            return mig_refuse(p, m, s, err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        mi = &made;
        p->mig_owned[g - p->gpus][s->mig_start] = true;
        vg_log(VG_LOG_INFO, "GPU instance made",
               "pod=%s/%s gpu=%s profile=%s start=%u mig=%s "
               "ms=%.1f",
               m->pod_namespace, m->pod_name, g->uuid, prof->name, s->mig_start, mi->uuid,
               (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
        (void)p->opt.source.mig_state(p->opt.source.arg, g, err);
        publish_inventory(p);
    }
    struct dp_match_mig *rec = &m->mig[k];
    vg_strlcpy(rec->uuid, mi->uuid, sizeof rec->uuid);
    vg_strlcpy(rec->profile, prof->name, sizeof rec->profile);
    rec->gi = mi->gi;
    rec->start = mi->start;
    rec->created = (int64_t)time(NULL);
    return visible_mig(p, g, mi, resp, err);
}

static int allocate_vgpu_one(struct dp_plugin *p, V1beta1__ContainerAllocateRequest *creq,
                             struct dp_match *match, struct dp_response *resp, char *dir,
                             size_t dir_size, bool *missed, struct vg_err *err)
{
    size_t n = creq->n_devices_ids;
    if (n == 0 || n > ANNOT_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "Allocate for %zu devices (1..%d)", n, ANNOT_MAX_GPUS);
    char uuids[ANNOT_MAX_GPUS][ANNOT_UUID_MAX];
    for (size_t i = 0; i < n; i++) {
        bool known = false;
        const struct dp_resource *r = &p->res.items[0];
        for (size_t k = 0; k < r->device_count && !known; k++)
            known = strcmp(r->devices[k].id, creq->devices_ids[i]) == 0;
        if (!known)
            return vg_err_set(err, -ENOENT, "unknown device ID '%s'", creq->devices_ids[i]);
        int rc = dp_physical_uuid(creq->devices_ids[i], uuids[i], err);
        if (rc < 0)
            return rc;
    }
    int rc = check_pods_ready(p, err);
    if (rc < 0)
        return rc;
    rc = dp_podcache_match(p->decisions, uuids, n, dir_allocated, p, match, err);
    if (rc < 0) {
        *missed = rc == -ENOENT;
        return rc;
    }
    rc = dp_container_dir_path(p->cfg->vgpu.region_dir, match->pod_uid, match->container.name, dir,
                               dir_size, err);
    if (rc < 0)
        return rc;
    rc = dp_allocate_vgpu(p->cfg, p->gpus, p->gpu_count, match, dir, resp, err);
    if (rc < 0)
        return rc;
    for (unsigned k = 0; k < match->container.gpu_count; k++)
        if (match->container.gpus[k].mig_profile[0] &&
            (rc = allocate_mig(p, match, k, resp, err)) < 0)
            return rc;
    const char *key = prepared_key(dir);
    json_t *digest = json_object_get(p->prepared, key);
    bool prepared = digest && (uint64_t)json_integer_value(digest) == dp_match_digest(match);
    for (unsigned k = 0; k < match->container.gpu_count; k++)
        prepared &= !match->mig[k].uuid[0]; /* its limits file names the MIG device */
    json_object_del(p->prepared, key);
    rc = dp_container_create(p->cfg, match, dir, prepared, err);
    if (rc < 0)
        return rc;
    dp_podcache_set_allocated(p->decisions, match->pod_uid, match->container.name, true);
    vg_log(VG_LOG_INFO, "allocated", "pod=%s/%s container=%s gpus=%u dir=%s", match->pod_namespace,
           match->pod_name, match->container.name, match->container.gpu_count, dir);
    return 0;
}

/* Volcano mode: keeps p->vc_waiting to the pods placed here with devices left to allocate,
 * so that an Allocate looks at the oldest of those only, not at every pod of the node. */
static void vc_track(struct dp_plugin *p, json_t *pod)
{
    vc_waiting_put(&p->vc_waiting, pod, p->cfg->cli.node_name);
}

/* Volcano mode: what the pod's annotations become, sent with the Allocate answer. The
 * pod's copy here takes them at once (the watch brings the same a moment later), so that
 * the next Allocate does not see the pod as it was. */
static void vc_write(struct dp_plugin *p, json_t *pod, const char *key, const char *value)
{
    json_t *meta = json_object_get(pod, "metadata");
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    char id[2 * ANNOT_NAME_MAX + 2];
    if (ns == NULL || name == NULL || vg_snprintf(id, sizeof id, "%s/%s", ns, name) < 0)
        return;
    json_t *ann = json_object_get(p->vc_writes, id);
    if (ann == NULL) {
        ann = json_object();
        json_object_set_new(p->vc_writes, id, ann);
    }
    json_object_set_new(ann, key, json_string(value));
    json_t *mine = json_object_get(meta, "annotations");
    if (json_is_object(mine))
        json_object_set_new(mine, key, json_string(value));
    vc_track(p, pod);
}

/* The protocol's failure: bind-phase failed, vgpu-time past every other, the node lock
 * released (Volcano then releases the pod's devices and may place it again). */
static void vc_fail(struct dp_plugin *p, json_t *pod)
{
    if (pod == NULL)
        return;
    vc_write(p, pod, VC_KEY_BIND_PHASE, "failed");
    vc_write(p, pod, VC_KEY_TIME, VC_TIME_DONE);
    p->vc_release_lock = true;
}

/* Volcano mode. Only the count resource does work, as in Volcano's plugin: the memory and
 * cores resources only check their IDs and answer an empty response. */
static int allocate_volcano_one(struct dp_plugin *p, const struct dp_resource *r,
                                V1beta1__ContainerAllocateRequest *creq, struct dp_match *match,
                                unsigned *segment, struct dp_response *resp, char *dir,
                                size_t dir_size, bool *missed, struct vg_err *err)
{
    size_t n = creq->n_devices_ids;
    dp_response_reset(resp);
    if (n == 0)
        return vg_err_set(err, -EINVAL, "%s: Allocate without devices", r->name);
    for (size_t i = 0; i < n; i++)
        if (!dp_volcano_id_known(p->cfg, p->gpus, p->gpu_count, r->volcano, creq->devices_ids[i]))
            return vg_err_set(err, -ENOENT, "%s: unknown device ID '%s'", r->name,
                              creq->devices_ids[i]);
    if (r->volcano != DP_VOLCANO_NUMBER)
        return 0;
    if (n > ANNOT_MAX_GPUS)
        return vg_err_set(err, -EINVAL, "Allocate for %zu devices (1..%d)", n, ANNOT_MAX_GPUS);
    int rc = check_pods_ready(p, err);
    if (rc < 0)
        return rc;
    struct vc_pending pending;
    json_t *twin = NULL;
    rc = vc_find_pending(&p->vc_waiting, p->cfg->cli.node_name, &p->cfg->volcano, p->ledger, n,
                         &pending, &twin, err);
    if (rc == -ENOENT) {
        *missed = true;
        p->vc_release_lock = true;
        return rc;
    }
    if (rc == -EEXIST)
        vc_fail(p, twin);
    struct vc_charge charge;
    if (rc == 0)
        rc = dp_volcano_check(p->cfg, p->gpus, p->gpu_count, p->ledger, &pending, match, &charge,
                              err);
    if (rc == 0)
        rc = dp_container_dir_path(p->cfg->vgpu.region_dir, match->pod_uid, match->container.name,
                                   dir, dir_size, err);
    if (rc == 0)
        rc = dp_allocate_vgpu(p->cfg, p->gpus, p->gpu_count, match, dir, resp, err);
    if (rc == 0) {
        /* The directory filled when the decision arrived, if it was for this very match. */
        const char *key = prepared_key(dir);
        json_t *digest = json_object_get(p->prepared, key);
        bool prepared = digest && (uint64_t)json_integer_value(digest) == dp_match_digest(match);
        json_object_del(p->prepared, key);
        if ((rc = dp_container_create(p->cfg, match, dir, prepared, err)) < 0)
            dir[0] = '\0';
    }
    if (rc == 0 && (rc = vc_ledger_add(p->ledger, &charge, err)) < 0) {
        struct vg_err ignored;
        dp_container_dir_remove(dir, &ignored);
        dir[0] = '\0';
    }
    if (rc < 0) {
        if (dir_size)
            dir[0] = '\0';
        vc_fail(p, pending.pod);
        return rc;
    }
    *segment = pending.segment;
    char *left = xmalloc(ANNOT_MAX_BYTES + 1);
    bool done = false;
    if (dp_volcano_remaining(&pending, p->ledger, left, ANNOT_MAX_BYTES + 1, &done, err) == 0) {
        vc_write(p, pending.pod, VC_KEY_TO_ALLOCATE, left);
        if (done) {
            vc_write(p, pending.pod, VC_KEY_BIND_PHASE, "success");
            vc_write(p, pending.pod, VC_KEY_TIME, VC_TIME_DONE);
            p->vc_release_lock = true;
        }
    }
    free(left);
    vg_log(VG_LOG_INFO, "allocated", "pod=%s/%s container=%s segment=%u gpus=%u dir=%s",
           match->pod_namespace, match->pod_name, match->container.name, pending.segment,
           match->container.gpu_count, dir);
    return 0;
}

/* MPS: only while the GPU's control daemon is up (kubelet may still hold a list from
 * before it went down). */
static int allocate_mps_one(struct dp_plugin *p, const struct dp_resource *r,
                            V1beta1__ContainerAllocateRequest *creq, struct dp_response *resp,
                            struct vg_err *err)
{
    int rc = dp_allocate_mps(p->cfg, r, p->gpus, p->gpu_count, creq->devices_ids,
                             creq->n_devices_ids, resp, err);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < creq->n_devices_ids; i++)
        for (size_t k = 0; k < r->device_count; k++)
            if (strcmp(r->devices[k].id, creq->devices_ids[i]) == 0 &&
                !dp_mps_ready(p->mps, r->devices[k].gpu))
                return vg_err_set(err, -EAGAIN,
                                  "the MPS control daemon of GPU %s is not running; retry",
                                  p->gpus[r->devices[k].gpu].uuid);
    return 0;
}

/* Removes the directories an AllocateRequest made for its first n containers. */
static void allocate_undo(struct dp_plugin *p, char (*dirs)[1024], const struct dp_match *matches,
                          const unsigned *segments, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (dirs[i][0]) {
            struct vg_err ignored;
            dp_container_dir_remove(dirs[i], &ignored);
            dp_podcache_set_allocated(p->decisions, matches[i].pod_uid, matches[i].container.name,
                                      false);
            if (p->ledger) {
                /* Volcano mode: the pod's decision is refused as a whole. */
                vc_ledger_drop_charge(p->ledger, matches[i].pod_uid, segments[i]);
                vc_fail(p, json_object_get(p->pods, matches[i].pod_uid));
            }
        }
}

/* Runs a whole AllocateRequest: 0 and the packed response, or a negative code with err
 * and nothing left behind (directories made for earlier containers of the call go too).
 * *missed: a vgpu container found no decision in the pod cache. */
static int allocate_request(struct serving *s, V1beta1__AllocateRequest *r, uint8_t **data,
                            size_t *len, bool *missed, struct vg_err *err)
{
    struct dp_plugin *p = s->plugin;
    size_t n = r->n_container_requests;
    *missed = false;
    if (n == 0 || n > ANNOT_MAX_CONTAINERS) /* kubelet sends one container per call */
        return vg_err_set(err, -EINVAL, "Allocate for %zu containers (1..%d)", n,
                          ANNOT_MAX_CONTAINERS);
    /* Each path resets its own response (dp_response_reset): zeroing 145 KiB apiece here
     * would cost more than the rest of the call. */
    VG_AUTO_FREE struct dp_response *resps = xmalloc(n * sizeof(*resps));
    VG_AUTO_FREE const struct dp_response **ptrs = xcalloc(n, sizeof(*ptrs));
    VG_AUTO_FREE char(*dirs)[1024] = xcalloc(n, sizeof(*dirs));
    VG_AUTO_FREE struct dp_match *matches = xcalloc(n, sizeof(*matches));
    VG_AUTO_FREE unsigned *segments = xcalloc(n, sizeof(*segments));
    for (size_t i = 0; i < n; i++) {
        V1beta1__ContainerAllocateRequest *c = r->container_requests[i];
        int rc;
        if (s->resource->volcano != DP_VOLCANO_NONE)
            rc = allocate_volcano_one(p, s->resource, c, &matches[i], &segments[i], &resps[i],
                                      dirs[i], sizeof(dirs[i]), missed, err);
        else if (p->res.mode == ANNOT_MODE_VGPU && !s->resource->mig)
            rc = allocate_vgpu_one(p, c, &matches[i], &resps[i], dirs[i], sizeof(dirs[i]), missed,
                                   err);
        else if (s->resource->mps)
            rc = allocate_mps_one(p, s->resource, c, &resps[i], err);
        else
            rc = dp_allocate_shared(p->cfg, s->resource, p->gpus, p->gpu_count, c->devices_ids,
                                    c->n_devices_ids, &resps[i], err);
        if (rc < 0) {
            allocate_undo(p, dirs, matches, segments, i + 1);
            return rc;
        }
        ptrs[i] = &resps[i];
    }
    int rc = dp_response_pack(ptrs, n, data, len, err);
    if (rc < 0)
        allocate_undo(p, dirs, matches, segments, n);
    return rc;
}

/* Answers an Allocate call with what allocate_request gave. */
static void vc_patch_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)arg;
    (void)body;
    if (err->code != 0)
        vg_log(VG_LOG_WARN, "writing Volcano's pod annotations back failed",
               "status=%ld err=\"%s\"", status, err->msg);
}

/* Sends what the Allocate call decided: pod annotations, the node lock's release. */
static void vc_flush(struct dp_plugin *p)
{
    const char *id;
    json_t *ann;
    json_object_foreach(p->vc_writes, id, ann)
    {
        char path[3 * ANNOT_NAME_MAX];
        const char *slash = strchr(id, '/');
        struct vg_err err = {0};
        if (slash == NULL ||
            vg_snprintf(path, sizeof path, "/api/v1/namespaces/%.*s/pods/%s", (int)(slash - id), id,
                        slash + 1) < 0 ||
            kube_patch_annotations(p->opt.kube, path, ann, NULL, vc_patch_done, p, &err) < 0)
            vg_log(VG_LOG_WARN, "cannot write Volcano's pod annotations back", "pod=%s err=\"%s\"",
                   id, err.msg);
    }
    json_object_clear(p->vc_writes);
    if (p->vc_release_lock) {
        char path[ANNOT_NAME_MAX + 32];
        struct vg_err err = {0};
        json_t *lock = json_object();
        json_object_set_new(lock, VC_NODE_LOCK, json_null());
        if (vg_snprintf(path, sizeof path, "/api/v1/nodes/%s", p->cfg->cli.node_name) < 0 ||
            kube_patch_annotations(p->opt.kube, path, lock, NULL, vc_patch_done, p, &err) < 0)
            vg_log(VG_LOG_WARN, "cannot release the node lock", "lock=%s err=\"%s\"", VC_NODE_LOCK,
                   err.msg);
        json_decref(lock);
        p->vc_release_lock = false;
    }
}

static void vc_flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_plugin *p = arg;
    p->vc_flush_due = false;
    if (p->opt.kube)
        vc_flush(p);
    else
        json_object_clear(p->vc_writes);
    p->vc_release_lock = false;
}

/* After the answer: Volcano mode's write-back goes out (kubelet does not wait for it). The
 * answer is written on the connection's next loop turn; the write-back is made active after
 * it, so the answer leaves first and its latency does not carry the PATCH requests. */
static void allocate_written(struct dp_plugin *p)
{
    if (p->vc_flush_event && !p->vc_flush_due) {
        p->vc_flush_due = true;
        event_active(p->vc_flush_event, 0, 0);
    }
}

static void allocate_reply(struct serving *s, struct vgrpc_call *call, int rc, uint8_t *data,
                           size_t len, const struct vg_err *err)
{
    struct dp_plugin *p = s->plugin;
    if (rc == 0) {
        p->stats.allocations++;
        vgrpc_call_reply(call, VGRPC_STATUS_OK, data, len, NULL);
        free(data);
        allocate_written(p);
        return;
    }
    p->stats.allocate_errors++;
    vg_log(VG_LOG_WARN, "Allocate refused", "resource=%s err=\"%s\"", s->resource->name, err->msg);
    enum vgrpc_status_code status = rc == -EINVAL || rc == -ENOENT
                                        ? VGRPC_STATUS_INVALID_ARGUMENT
                                        : VGRPC_STATUS_FAILED_PRECONDITION;
    if (rc == -ENOENT && p->res.mode == ANNOT_MODE_VGPU && !s->resource->mig)
        status = VGRPC_STATUS_FAILED_PRECONDITION;
    if (rc == -ENOSPC || rc == -EEXIST)
        status = VGRPC_STATUS_FAILED_PRECONDITION;
    vgrpc_call_reply(call, status, NULL, 0, err->msg);
    allocate_written(p);
}

/* A pod bound a moment before kubelet's Allocate may not have come through the watch
 * yet. On a miss the Allocate call waits (a deferred gRPC call, the loop keeps running)
 * while the node's pods are read directly; pods the watch has not delivered, or delivered
 * without a decision, go into the cache, and the request runs again. The answer comes
 * from whichever ends first: the GET, or LOOKUP_MS (a second try on what the watch
 * brought meanwhile). The kube client must not run callbacks after dp_plugin_free (it is
 * freed right after the plugin, as for the inventory patch). */
struct lookup {
    struct serving *serving;
    struct vgrpc_call *call; /* NULL once answered or gone */
    V1beta1__AllocateRequest *request;
    struct event *timer;
    struct lookup *prev, *next;
};

static void lookup_answer(struct lookup *lk)
{
    if (!lk->call)
        return;
    uint8_t *data = NULL;
    size_t len = 0;
    bool missed;
    struct vg_err err = {0};
    int rc = allocate_request(lk->serving, lk->request, &data, &len, &missed, &err);
    struct vgrpc_call *call = lk->call;
    lk->call = NULL;
    allocate_reply(lk->serving, call, rc, data, len, &err);
}

static void lookup_free(struct lookup *lk)
{
    struct dp_plugin *p = lk->serving->plugin;
    if (lk->prev)
        lk->prev->next = lk->next;
    else
        p->lookups = lk->next;
    if (lk->next)
        lk->next->prev = lk->prev;
    if (lk->timer)
        event_free(lk->timer);
    if (lk->call) /* the plugin is going: the server ends the call */
        vgrpc_call_on_gone(lk->call, NULL, NULL);
    v1beta1__allocate_request__free_unpacked(lk->request, NULL);
    free(lk);
}

static bool has_decision(json_t *pod)
{
    json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    return json_is_string(json_object_get(ann, ANNOT_KEY_DECISION)) ||
           json_is_string(json_object_get(ann, VC_KEY_TO_ALLOCATE));
}

static void lookup_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct lookup *lk = arg;
    struct dp_plugin *p = lk->serving->plugin;
    p->stats.lookups++;
    if (err->code == 0) {
        size_t i;
        json_t *pod;
        json_array_foreach(json_object_get(body, "items"), i, pod)
        {
            const char *uid =
                json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
            json_t *known = uid ? json_object_get(p->pods, uid) : NULL;
            if (!uid || (known && has_decision(known)) || !has_decision(pod))
                continue;
            json_object_set(p->pods, uid, pod);
            dp_podcache_put(p->decisions, pod);
            if (p->ledger) {
                vc_ledger_put_pod(p->ledger, pod, p->cfg->cli.node_name,
                                  p->cfg->volcano.gpu_memory_factor);
                vc_track(p, pod);
            }
        }
    } else {
        vg_log(VG_LOG_WARN, "looking up this node's pods failed", "status=%ld err=\"%s\"", status,
               err->msg);
    }
    lookup_answer(lk);
    lookup_free(lk);
}

static void lookup_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lookup_answer(arg); /* the GET's answer still feeds the cache when it comes */
}

static void lookup_call_gone(void *arg, struct vgrpc_call *call, enum vgrpc_status_code status)
{
    struct lookup *lk = arg;
    (void)call;
    vg_log(VG_LOG_INFO, "kubelet gave up on an Allocate call", "status=%d", (int)status);
    lk->call = NULL;
}

static int lookup_start(struct serving *s, struct vgrpc_call *call, V1beta1__AllocateRequest *r)
{
    struct dp_plugin *p = s->plugin;
    char path[ANNOT_NAME_MAX + 64];
    struct vg_err err = {0};
    if (vg_snprintf(path, sizeof(path), "/api/v1/pods?fieldSelector=spec.nodeName%%3D%s",
                    p->cfg->cli.node_name) < 0)
        return -ENAMETOOLONG;
    struct lookup *lk = xcalloc(1, sizeof(*lk));
    lk->serving = s;
    lk->call = call;
    lk->request = r;
    if (kube_get(p->opt.kube, path, lookup_done, lk, &err) < 0) {
        vg_log(VG_LOG_WARN, "cannot look up this node's pods", "err=\"%s\"", err.msg);
        free(lk);
        return err.code ? err.code : -EIO;
    }
    lk->next = p->lookups;
    if (p->lookups)
        p->lookups->prev = lk;
    p->lookups = lk;
    vgrpc_call_on_gone(call, lookup_call_gone, lk);
    lk->timer = evtimer_new(p->base, lookup_timeout, lk);
    struct timeval tv = {LOOKUP_MS / 1000, (LOOKUP_MS % 1000) * 1000};
    evtimer_add(lk->timer, &tv);
    return 0;
}

static void handle_allocate(void *arg, struct vgrpc_call *call, const uint8_t *req, size_t len)
{
    struct serving *s = arg;
    struct dp_plugin *p = s->plugin;
    V1beta1__AllocateRequest *r = v1beta1__allocate_request__unpack(NULL, len, req);
    if (!r) {
        vgrpc_call_reply(call, VGRPC_STATUS_INVALID_ARGUMENT, NULL, 0, "malformed AllocateRequest");
        return;
    }
    uint8_t *data = NULL;
    size_t dlen = 0;
    bool missed;
    struct vg_err err = {0};
    if (p->vc_flush_due) /* a call of the same loop turn: its write-back first */
        vc_flush_cb(-1, 0, p);
    int rc = allocate_request(s, r, &data, &dlen, &missed, &err);
    if (rc < 0 && missed && p->opt.kube && lookup_start(s, call, r) == 0) {
        if (p->vc_writes)
            json_object_clear(p->vc_writes);
        p->vc_release_lock = false;
        vg_log(VG_LOG_INFO, "no decision in the pod cache; looking this node's pods up",
               "err=\"%s\"", err.msg);
        return; /* the lookup owns r now */
    }
    allocate_reply(s, call, rc, data, dlen, &err);
    v1beta1__allocate_request__free_unpacked(r, NULL);
}

/* MPS: a container's replicas must share one GPU (one control daemon each): the GPU with
 * the most available replicas, when it has enough. */
static void prefer_one_gpu(struct dp_plugin *p, const struct dp_resource *r,
                           V1beta1__ContainerPreferredAllocationRequest *c, size_t want,
                           bool *taken, char **picked, size_t *n)
{
    unsigned *gpu_of = xcalloc(c->n_available_deviceids + 1, sizeof(*gpu_of));
    size_t count[DP_MAX_GPUS] = {0};
    for (size_t k = 0; k < c->n_available_deviceids; k++) {
        gpu_of[k] = UINT_MAX;
        for (size_t d = 0; d < r->device_count; d++)
            if (strcmp(r->devices[d].id, c->available_deviceids[k]) == 0 &&
                r->devices[d].gpu < p->gpu_count) {
                gpu_of[k] = r->devices[d].gpu;
                count[gpu_of[k]]++;
            }
    }
    unsigned best = 0;
    for (unsigned g = 1; g < p->gpu_count; g++)
        if (count[g] > count[best])
            best = g;
    for (size_t k = 0; count[best] >= want && k < c->n_available_deviceids && *n < want; k++)
        if (gpu_of[k] == best && !taken[k]) {
            taken[k] = true;
            picked[(*n)++] = c->available_deviceids[k];
        }
    free(gpu_of);
}

/* Preferred allocation: in vgpu mode the GPUs the scheduler decided for the next
 * container asking for this many; replicas (timeSlicing, mps) by
 * sharedDevicesAllocationPolicy; otherwise (or without a decision) devices on one NUMA
 * node first. */
static void prefer(struct dp_plugin *p, const struct dp_resource *r,
                   V1beta1__ContainerPreferredAllocationRequest *c, char ***out, size_t *out_n)
{
    size_t want = c->allocation_size > 0 ? (size_t)c->allocation_size : 0;
    char **picked = xcalloc(want + 1, sizeof(*picked));
    size_t n = 0;
    bool *taken = xcalloc(c->n_available_deviceids + 1, sizeof(*taken));
    if (r->volcano == DP_VOLCANO_MEMORY || r->volcano == DP_VOLCANO_CORES) {
        /* Units of memory or compute (up to one ID per MiB): any will do, and the NUMA
         * search below is quadratic in the list. */
        for (size_t i = 0; i < c->n_must_include_deviceids && n < want; i++)
            picked[n++] = c->must_include_deviceids[i];
        for (size_t k = 0; k < c->n_available_deviceids && n < want; k++) {
            bool dup = false;
            for (size_t i = 0; i < c->n_must_include_deviceids && !dup; i++)
                dup = strcmp(c->must_include_deviceids[i], c->available_deviceids[k]) == 0;
            if (!dup)
                picked[n++] = c->available_deviceids[k];
        }
        free(taken);
        *out = picked;
        *out_n = n;
        return;
    }
    for (size_t i = 0; i < c->n_must_include_deviceids && n < want; i++) {
        picked[n++] = c->must_include_deviceids[i];
        for (size_t k = 0; k < c->n_available_deviceids; k++)
            if (strcmp(c->available_deviceids[k], c->must_include_deviceids[i]) == 0)
                taken[k] = true;
    }
    struct vg_err err = {0};
    struct dp_match match;
    if (p->res.mode == ANNOT_MODE_VGPU && !r->mig && r->volcano == DP_VOLCANO_NONE && n == 0 &&
        check_pods_ready(p, &err) == 0) {
        int rc = dp_podcache_match(p->decisions, NULL, want, dir_allocated, p, &match, &err);
        for (unsigned g = 0; rc == 0 && g < match.container.gpu_count && n < want; g++)
            for (size_t k = 0; k < c->n_available_deviceids; k++) {
                char uuid[ANNOT_UUID_MAX];
                if (taken[k] || dp_physical_uuid(c->available_deviceids[k], uuid, &err) < 0 ||
                    strcmp(uuid, match.container.gpus[g].uuid) != 0)
                    continue;
                taken[k] = true;
                picked[n++] = c->available_deviceids[k];
                break;
            }
    }
    if (r->mps && n == 0 && want > 1)
        prefer_one_gpu(p, r, c, want, taken, picked, &n);
    if (r->replicas > 1 && !r->mig && n < want) {
        /* Replicas: by flags.plugin.sharedDevicesAllocationPolicy. */
        size_t *idx = xcalloc(want - n + 1, sizeof(*idx));
        size_t got = dp_prefer_replicas(r, p->cfg->flags.plugin.shared_devices_allocation_policy,
                                        c->available_deviceids, c->n_available_deviceids, taken,
                                        want - n, idx);
        for (size_t i = 0; i < got; i++)
            picked[n++] = c->available_deviceids[idx[i]];
        free(idx);
    }
    /* NUMA: the node with the most available devices first. */
    int best_numa = -1;
    size_t best_count = 0;
    for (size_t k = 0; k < c->n_available_deviceids; k++) {
        int numa = -1;
        for (size_t d = 0; d < r->device_count; d++)
            if (strcmp(r->devices[d].id, c->available_deviceids[k]) == 0)
                numa = p->gpus[r->devices[d].gpu].numa;
        size_t count = 0;
        for (size_t j = 0; j < c->n_available_deviceids; j++)
            for (size_t d = 0; d < r->device_count; d++)
                if (strcmp(r->devices[d].id, c->available_deviceids[j]) == 0 &&
                    p->gpus[r->devices[d].gpu].numa == numa)
                    count++;
        if (count > best_count) {
            best_count = count;
            best_numa = numa;
        }
    }
    for (int pass = 0; pass < 2; pass++)
        for (size_t k = 0; k < c->n_available_deviceids && n < want; k++) {
            if (taken[k])
                continue;
            int numa = -2;
            for (size_t d = 0; d < r->device_count; d++)
                if (strcmp(r->devices[d].id, c->available_deviceids[k]) == 0)
                    numa = p->gpus[r->devices[d].gpu].numa;
            if (pass == 0 && numa != best_numa)
                continue;
            taken[k] = true;
            picked[n++] = c->available_deviceids[k];
        }
    free(taken);
    *out = picked;
    *out_n = n;
}

static enum vgrpc_status_code handle_preferred(void *arg, const uint8_t *req, size_t len,
                                               struct vgrpc_reply *reply)
{
    struct serving *s = arg;
    V1beta1__PreferredAllocationRequest *r =
        v1beta1__preferred_allocation_request__unpack(NULL, len, req);
    if (!r) {
        vg_snprintf(reply->message, sizeof(reply->message), "malformed PreferredAllocationRequest");
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    size_t n = r->n_container_requests;
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    V1beta1__ContainerPreferredAllocationResponse *crs = xcalloc(n + 1, sizeof(*crs));
    V1beta1__ContainerPreferredAllocationResponse **crp = xcalloc(n + 1, sizeof(*crp));
    for (size_t i = 0; i < n; i++) {
        v1beta1__container_preferred_allocation_response__init(&crs[i]);
        prefer(s->plugin, s->resource, r->container_requests[i], &crs[i].deviceids,
               &crs[i].n_deviceids);
        crp[i] = &crs[i];
    }
    resp.n_container_responses = n;
    resp.container_responses = crp;
    reply->len = v1beta1__preferred_allocation_response__get_packed_size(&resp);
    reply->data = xmalloc(reply->len ? reply->len : 1);
    v1beta1__preferred_allocation_response__pack(&resp, reply->data);
    for (size_t i = 0; i < n; i++)
        free(crs[i].deviceids);
    free(crs);
    free(crp);
    v1beta1__preferred_allocation_request__free_unpacked(r, NULL);
    return VGRPC_STATUS_OK;
}

/* ---- serving and registration --------------------------------------------------------- */

static void schedule_retry(struct dp_plugin *p)
{
    if (evtimer_pending(p->retry_timer, NULL))
        return;
    uint64_t ms = p->fast_retries < FAST_RETRY_COUNT ? FAST_RETRY_MS : p->opt.register_retry_ms;
    p->fast_retries++;
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(p->retry_timer, &tv);
}

static void register_done(void *arg, enum vgrpc_status_code status, const char *message,
                          const uint8_t *response, size_t response_len)
{
    struct serving *s = arg;
    (void)response;
    (void)response_len;
    if (status == VGRPC_STATUS_OK) {
        s->registered = true;
        s->plugin->stats.registrations++;
        vg_log(VG_LOG_INFO, "registered with kubelet", "resource=%s endpoint=%s", s->resource->name,
               s->resource->endpoint);
        return;
    }
    vg_log(VG_LOG_WARN, "kubelet refused registration", "resource=%s status=%d message=\"%s\"",
           s->resource->name, (int)status, message);
    schedule_retry(s->plugin);
}

static int serve_one(struct serving *s, struct vg_err *err)
{
    struct dp_plugin *p = s->plugin;
    vgrpc_server_free(s->server);
    s->stream_count = 0;
    s->registered = false;
    s->server = vgrpc_server_new(p->base, NULL, err);
    if (!s->server)
        return err->code;
    struct vgrpc_server *srv = s->server;
    int rc;
    if ((rc = vgrpc_server_add_unary(srv, VGRPC_KUBELET_GET_OPTIONS, handle_options, s, err)) < 0 ||
        (rc = vgrpc_server_add_stream(srv, VGRPC_KUBELET_LIST_AND_WATCH, handle_list_and_watch, s,
                                      err)) < 0 ||
        (rc = vgrpc_server_add_unary(srv, VGRPC_KUBELET_PREFERRED_ALLOC, handle_preferred, s,
                                     err)) < 0 ||
        (rc = vgrpc_server_add_deferred(srv, VGRPC_KUBELET_ALLOCATE, handle_allocate, s, err)) <
            0 ||
        (rc = vgrpc_server_add_unary(srv, VGRPC_KUBELET_PRESTART, handle_prestart, s, err)) < 0)
        return rc;
    char path[PATH_MAX];
    if (vg_snprintf(path, sizeof(path), "%s/%s", p->cfg->cli.kubelet_dir, s->resource->endpoint) <
        0)
        return vg_err_set(err, -ENAMETOOLONG, "socket path too long");
    return vgrpc_server_listen(srv, path, err);
}

static void register_one(struct serving *s)
{
    struct dp_plugin *p = s->plugin;
    vgrpc_client_free(s->registration);
    struct vg_err err = {0};
    s->registration = vgrpc_client_new(p->base, p->kubelet_socket, NULL, &err);
    if (!s->registration) {
        vg_log(VG_LOG_WARN, "kubelet socket unavailable; will retry", "socket=%s err=\"%s\"",
               p->kubelet_socket, err.msg);
        schedule_retry(p);
        return;
    }
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    o.get_preferred_allocation_available = true;
    V1beta1__RegisterRequest rr = V1BETA1__REGISTER_REQUEST__INIT;
    rr.version = (char *)VGRPC_KUBELET_API_VERSION;
    rr.endpoint = s->resource->endpoint;
    rr.resource_name = s->resource->name;
    rr.options = &o;
    uint8_t buf[512];
    size_t len = v1beta1__register_request__get_packed_size(&rr);
    if (len > sizeof(buf))
        return;
    v1beta1__register_request__pack(&rr, buf);
    if (vgrpc_client_unary(s->registration, VGRPC_KUBELET_REGISTER, buf, len, 5000, register_done,
                           s, &err) < 0) {
        vg_log(VG_LOG_WARN, "Register call failed; will retry", "err=\"%s\"", err.msg);
        schedule_retry(p);
    }
}

static void register_all(struct dp_plugin *p)
{
    for (size_t i = 0; i < p->res.count; i++)
        if (!p->serving[i].registered)
            register_one(&p->serving[i]);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    register_all(arg);
}

/* kubelet restarted: it wiped the directory, our sockets included. */
static void restart_all(struct dp_plugin *p)
{
    vg_log(VG_LOG_INFO, "kubelet.sock created: serving and registering again", "dir=%s",
           p->cfg->cli.kubelet_dir);
    p->fast_retries = 0;
    evtimer_del(p->retry_timer);
    for (size_t i = 0; i < p->res.count; i++) {
        struct vg_err err = {0};
        if (serve_one(&p->serving[i], &err) < 0)
            vg_log(VG_LOG_ERROR, "cannot serve", "resource=%s err=\"%s\"", p->res.items[i].name,
                   err.msg);
    }
    register_all(p);
}

static void inotify_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    struct dp_plugin *p = arg;
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    bool restart = false;
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            break;
        for (char *q = buf; q < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)(void *)q;
            if (ev->len && strcmp(ev->name, "kubelet.sock") == 0 && (ev->mask & IN_CREATE))
                restart = true;
            q += sizeof(*ev) + ev->len;
        }
    }
    if (restart)
        restart_all(p);
}

/* ---- health, inventory, cleanup -------------------------------------------------------- */

static void inventory_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct dp_plugin *p = arg;
    (void)body;
    p->inventory_in_flight = false;
    if (err->code == 0)
        p->stats.inventory_writes++;
    else
        vg_log(VG_LOG_WARN, "publishing the GPU inventory failed", "status=%ld err=\"%s\"", status,
               err->msg);
    if (p->inventory_dirty)
        publish_inventory(p);
}

/* The node's annotations for the scheduler: vgpu-scheduler's inventory, or in Volcano mode
 * the GPUs as Volcano's scheduler reads them and the handshake of Volcano v1.15.0 and
 * older. Written at start, on every health change and every heartbeat. */
static json_t *inventory_annotations(struct dp_plugin *p, struct vg_err *err)
{
    json_t *ann = json_object();
    if (p->ledger) {
        char *text = dp_volcano_register_value(p->cfg, p->gpus, p->gpu_count, err);
        char hs[96];
        dp_volcano_handshake_value((int64_t)time(NULL), hs, sizeof hs);
        json_object_set_new(ann, VC_KEY_REGISTER, text ? json_string(text) : json_null());
        json_object_set_new(ann, VC_KEY_HANDSHAKE, json_string(hs));
        free(text);
        return text ? ann : (json_decref(ann), NULL);
    }
    VG_AUTO_FREE struct annot_inventory *inv = xcalloc(1, sizeof(*inv));
    /* MIG GPUs advertised as MIG devices are not the scheduler's to split. */
    VG_AUTO_FREE struct dp_gpu *split = xcalloc(DP_MAX_GPUS, sizeof(*split));
    unsigned n = 0;
    for (unsigned i = 0; i < p->gpu_count; i++)
        if (dp_gpu_split(p->cfg, &p->gpus[i]))
            split[n++] = p->gpus[i];
    dp_inventory(p->cfg, p->res.mode, split, n, (int64_t)time(NULL), inv);
    /* Dynamic MIG GPUs: their profiles and instances, named by their owners. */
    VG_AUTO_FREE struct dp_mig_claim *claims = xcalloc(DP_MIG_MAX_CLAIMS, sizeof(*claims));
    size_t n_claims = dp_migdyn_claims(p->pods, claims);
    for (unsigned i = 0; i < n && i < inv->gpu_count; i++)
        if (split[i].mig_dynamic)
            dp_migdyn_annot(&split[i], claims, n_claims, &inv->gpus[i].mig);
    /* Shown on the dashboard beside each container's priority (never used to decide). */
    if (p->res.mode == ANNOT_MODE_VGPU)
        dp_held_collect(p->cfg->vgpu.region_dir, inv);
    char *text = annot_inventory_encode(inv, err);
    if (!text) {
        json_decref(ann);
        return NULL;
    }
    json_object_set_new(ann, ANNOT_KEY_GPUS, json_string(text));
    free(text);
    return ann;
}

static void publish_inventory(struct dp_plugin *p)
{
    if (!p->opt.kube)
        return;
    if (p->inventory_in_flight) {
        p->inventory_dirty = true;
        return;
    }
    p->inventory_dirty = false;
    struct vg_err err = {0};
    json_t *ann = inventory_annotations(p, &err);
    if (!ann) {
        vg_log(VG_LOG_ERROR, "cannot encode the inventory", "err=\"%s\"", err.msg);
        return;
    }
    if (p->mig_refused.count > 0) {
        char *refused = annot_mig_refused_encode(&p->mig_refused, &err);
        if (refused)
            json_object_set_new(ann, ANNOT_KEY_MIG_REFUSED, json_string(refused));
        else
            vg_log(VG_LOG_ERROR, "cannot encode the refused MIG placements", "err=\"%s\"", err.msg);
        free(refused);
    }
    char path[512];
    if (vg_snprintf(path, sizeof(path), "/api/v1/nodes/%s", p->cfg->cli.node_name) >= 0 &&
        kube_patch_annotations(p->opt.kube, path, ann, NULL, inventory_done, p, &err) == 0)
        p->inventory_in_flight = true;
    else
        vg_log(VG_LOG_WARN, "cannot publish the inventory", "err=\"%s\"", err.msg);
    json_decref(ann);
}

/* Every open ListAndWatch gets the list again. */
static void broadcast(struct dp_plugin *p)
{
    for (size_t r = 0; r < p->res.count; r++) {
        struct serving *s = &p->serving[r];
        for (size_t k = 0; k < s->stream_count; k++)
            send_devices(s, s->streams[k]);
    }
}

static void mps_changed(void *arg)
{
    struct dp_plugin *p = arg;
    p->stats.health_changes++;
    broadcast(p);
}

void dp_plugin_poll_health(struct dp_plugin *p)
{
    if (p->mig_pending)
        mig_reconcile(p); /* its processes may have ended */
    bool changed = false;
    for (unsigned i = 0; i < p->gpu_count; i++) {
        bool h = p->opt.source.healthy(p->opt.source.arg, &p->gpus[i]);
        if (h != p->gpus[i].healthy) {
            p->gpus[i].healthy = h;
            changed = true;
            p->stats.health_changes++;
            vg_log(h ? VG_LOG_INFO : VG_LOG_WARN, h ? "GPU healthy again" : "GPU unhealthy",
                   "uuid=%s", p->gpus[i].uuid);
        }
    }
    if (!changed)
        return;
    broadcast(p);
    publish_inventory(p);
    bool unhealthy = false;
    for (unsigned i = 0; i < p->gpu_count; i++)
        unhealthy |= !p->gpus[i].healthy;
    if (unhealthy && p->cfg->flags.restart_on_device_unhealthy && p->opt.restart &&
        !p->restarting) {
        vg_log(VG_LOG_WARN,
               "a device turned unhealthy: restarting the plugin "
               "(flags.restartOnDeviceUnhealthy)",
               "node=%s", p->cfg->cli.node_name);
        p->restarting = true;
        p->opt.restart(p->opt.restart_arg);
    }
}

static void health_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dp_plugin_poll_health(arg);
}

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    publish_inventory(arg);
}

/* Fills a container's directory ahead of its Allocate (under .ready., see allocate.c), so
 * that Allocate only renames it: the file system's work happens when the pod's decision
 * arrives, not while kubelet waits. */
static void prepare_one(void *arg, const struct dp_match *m)
{
    struct dp_plugin *p = arg;
    char dir[1024];
    struct stat st;
    if (dp_container_dir_path(p->cfg->vgpu.region_dir, m->pod_uid, m->container.name, dir,
                              sizeof(dir), NULL) < 0)
        return;
    const char *key = prepared_key(dir);
    uint64_t digest = dp_match_digest(m);
    json_t *known = json_object_get(p->prepared, key);
    if ((known && (uint64_t)json_integer_value(known) == digest) || lstat(dir, &st) == 0)
        return;
    struct vg_err err = {0};
    if (dp_container_dir_prepare(p->cfg, m, dir, &err) < 0) {
        json_object_del(p->prepared, key);
        vg_log(VG_LOG_WARN, "cannot prepare a container directory; Allocate will make it",
               "err=\"%s\"", err.msg);
        return;
    }
    json_object_set_new(p->prepared, key, json_integer((json_int_t)digest));
}

/* Destroys the GPU instances of dynamic GPUs that no live pod's decision names: at the
 * first run (the pod list just loaded) every such one, later those this plugin made or
 * adopted (one an administrator makes meanwhile is left alone), and always a GPU instance
 * without its compute instance (a plugin killed half-way). One with processes stays
 * (NVML refuses; it is tried again next time). Adopts those a live pod names. */
static void mig_reconcile(struct dp_plugin *p)
{
    if (!p->opt.source.mig_state || !p->opt.source.mig_destroy || !p->pods_watch ||
        !kube_watch_synced(p->pods_watch))
        return;
    VG_AUTO_FREE struct dp_mig_claim *claims = xcalloc(DP_MIG_MAX_CLAIMS, sizeof(*claims));
    size_t n_claims = dp_migdyn_claims(p->pods, claims);
    bool changed = false;
    p->mig_pending = false;
    for (unsigned i = 0; i < p->gpu_count; i++) {
        struct dp_gpu *g = &p->gpus[i];
        struct vg_err err = {0};
        if (!g->mig_dynamic)
            continue;
        if (p->opt.source.mig_state(p->opt.source.arg, g, &err) < 0) {
            vg_log(VG_LOG_WARN, "cannot read a GPU's MIG instances", "gpu=%s err=\"%s\"", g->uuid,
                   err.msg);
            continue;
        }
        size_t unused[NVML_MIG_MAX_INSTANCES];
        size_t n = dp_migdyn_unused(g, claims, n_claims, p->mig_reconciled ? p->mig_owned[i] : NULL,
                                    unused);
        for (size_t k = 0; k < n; k++) {
            const struct nvml_mig_instance *mi = &g->mig_instances[unused[k]];
            int rc = p->opt.source.mig_destroy(p->opt.source.arg, g, mi->gi, &err);
            if (rc == 0) {
                vg_log(VG_LOG_INFO, "GPU instance destroyed: no live pod uses it",
                       "gpu=%s gi=%u start=%u size=%u", g->uuid, mi->gi, mi->start, mi->size);
                if (mi->start < 8)
                    p->mig_owned[i][mi->start] = false;
                changed = true;
            } else {
                p->mig_pending = true;
                vg_log(rc == -EBUSY ? VG_LOG_INFO : VG_LOG_WARN,
                       "GPU instance not destroyed (tried again later)", "gpu=%s gi=%u err=\"%s\"",
                       g->uuid, mi->gi, err.msg);
            }
        }
        if (n > 0)
            (void)p->opt.source.mig_state(p->opt.source.arg, g, &err);
        /* What live pods still name is theirs: adopted. */
        for (size_t k = 0; k < g->mig_instance_count; k++)
            if (g->mig_instances[k].start < 8)
                for (size_t c = 0; c < n_claims; c++)
                    if (strcmp(claims[c].uuid, g->uuid) == 0 &&
                        claims[c].start == g->mig_instances[k].start)
                        p->mig_owned[i][g->mig_instances[k].start] = true;
    }
    p->mig_reconciled = true;
    if (changed)
        publish_inventory(p);
}

static void sweep(struct dp_plugin *p)
{
    if (!p->pods_watch || !kube_watch_synced(p->pods_watch))
        return;
    size_t n = json_object_size(p->pods);
    const char **live = xcalloc(n + 1, sizeof(*live));
    size_t k = 0;
    const char *uid;
    json_t *pod;
    json_object_foreach(p->pods, uid, pod)
    {
        const char *phase =
            json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        if (!phase || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0))
            live[k++] = uid;
    }
    struct vg_err err = {0};
    int removed = dp_container_dirs_sweep(p->cfg->vgpu.region_dir, live, &err);
    (void)dp_board_sweep(p->cfg->vgpu.compute_board_dir, live);
    const char *key;
    json_t *v, *tmp;
    json_object_foreach_safe(p->prepared, tmp, key, v)
    {
        bool alive = false;
        for (size_t i = 0; i < k && !alive; i++)
            alive = strncmp(key, live[i], strlen(live[i])) == 0 && key[strlen(live[i])] == '_';
        if (!alive)
            json_object_del(p->prepared, key);
    }
    free(live);
    mig_reconcile(p);
    if (removed > 0) {
        p->stats.swept_dirs += (uint64_t)removed;
        vg_log(VG_LOG_INFO, "removed directories of containers that are gone", "count=%d", removed);
    } else if (removed < 0) {
        vg_log(VG_LOG_WARN, "cleanup failed", "err=\"%s\"", err.msg);
    }
}

static void sweep_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sweep(arg);
}

/* A live resize reaching the node (docs/deviceplugin.md, "Live resize"): the decision of
 * a pod bound here with a generation above 0 names containers whose directories exist;
 * each gets the decision's limits at its generation. Allocate matching does not apply (a
 * resized decision no longer equals the pod spec's requests), so the decision is applied
 * only when vgpu-scheduler's own record of that generation, in its namespace where a pod
 * author cannot write, holds the same text: an annotation rewritten past the webhook
 * changes nothing. A decision of generation 0 is Allocate's alone. */
struct resize_check {
    struct dp_plugin *p;
    char uid[128], ns[ANNOT_LABEL_MAX + 1], name[ANNOT_SUBDOMAIN_MAX + 1];
    char *text; /* the pod's decision (owned) */
};

static void apply_checked(struct dp_plugin *p, const struct resize_check *rc)
{
    struct annot_decision d;
    struct vg_err err = {0};
    if (annot_decision_decode(rc->text, strlen(rc->text), &d, &err) < 0)
        return;
    for (unsigned i = 0; i < d.container_count; i++) {
        char dir[1024];
        struct stat st;
        if (d.containers[i].gpu_count == 0 ||
            dp_container_dir_path(p->cfg->vgpu.region_dir, rc->uid, d.containers[i].name, dir,
                                  sizeof dir, NULL) < 0 ||
            stat(dir, &st) != 0)
            continue; /* not allocated (yet): Allocate writes the limits then */
        struct dp_match m = {.container = d.containers[i]};
        (void)vg_strlcpy(m.pod_uid, rc->uid, sizeof m.pod_uid);
        (void)vg_strlcpy(m.pod_namespace, rc->ns, sizeof m.pod_namespace);
        (void)vg_strlcpy(m.pod_name, rc->name, sizeof m.pod_name);
        int n = dp_container_limits_update(p->cfg, &m, dir, d.generation, &err);
        if (n < 0) {
            p->stats.resize_errors++;
            vg_log(VG_LOG_WARN, "new limits not applied", "pod=%s/%s container=%s err=\"%s\"",
                   rc->ns, rc->name, d.containers[i].name, err.msg);
        } else if (n > 0) {
            p->stats.resizes++;
            vg_log(VG_LOG_INFO, "limits changed", "pod=%s/%s container=%s generation=%llu", rc->ns,
                   rc->name, d.containers[i].name, (unsigned long long)d.generation);
        }
    }
}

static void record_read(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct resize_check *rc = arg;
    const char *recorded =
        json_string_value(json_object_get(json_object_get(body, "data"), "decision"));
    const char *uid = json_string_value(json_object_get(json_object_get(body, "data"), "uid"));
    if (err->code == 0 && recorded != NULL && uid != NULL && strcmp(recorded, rc->text) == 0 &&
        strcmp(uid, rc->uid) == 0) {
        apply_checked(rc->p, rc);
    } else {
        rc->p->stats.resize_errors++;
        vg_log(VG_LOG_WARN, "new limits not applied: vgpu-scheduler's record does not hold them",
               "pod=%s/%s err=\"%s\"", rc->ns, rc->name, err->code < 0 ? err->msg : "differs");
    }
    free(rc->text);
    free(rc);
}

static void apply_decision(struct dp_plugin *p, json_t *pod)
{
    if (p->res.mode != ANNOT_MODE_VGPU || p->opt.kube == NULL)
        return;
    json_t *meta = json_object_get(pod, "metadata");
    const char *uid = json_string_value(json_object_get(meta, "uid"));
    const char *ns = json_string_value(json_object_get(meta, "namespace"));
    const char *name = json_string_value(json_object_get(meta, "name"));
    const char *node = json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
    const char *text = json_string_value(
        json_object_get(json_object_get(meta, "annotations"), ANNOT_KEY_DECISION));
    struct annot_decision d;
    struct vg_err err = {0};
    if (uid == NULL || ns == NULL || name == NULL || node == NULL || text == NULL ||
        strcmp(node, p->cfg->cli.node_name) != 0 || !annot_pod_uid(uid) || !annot_dns_label(ns) ||
        !annot_dns_subdomain(name) || annot_decision_decode(text, strlen(text), &d, &err) < 0 ||
        strcmp(d.node, p->cfg->cli.node_name) != 0 || d.generation == 0)
        return;
    const char *rns =
        p->cfg->vgpu.record_namespace != NULL ? p->cfg->vgpu.record_namespace : "vgpu-system";
    char path[512];
    if (!annot_dns_label(rns) ||
        vg_snprintf(path, sizeof path, "/api/v1/namespaces/%s/configmaps/vgpu-decision-%s-g%llu",
                    rns, uid, (unsigned long long)d.generation) < 0)
        return;
    struct resize_check *rc = xcalloc(1, sizeof *rc);
    rc->p = p;
    (void)vg_strlcpy(rc->uid, uid, sizeof rc->uid);
    (void)vg_strlcpy(rc->ns, ns, sizeof rc->ns);
    (void)vg_strlcpy(rc->name, name, sizeof rc->name);
    rc->text = xstrdup(text);
    if (kube_get(p->opt.kube, path, record_read, rc, &err) < 0)
        record_read(rc, 0, NULL, &err);
}

static void pods_resync(void *arg, json_t *items, const char *rv)
{
    struct dp_plugin *p = arg;
    (void)rv;
    json_object_clear(p->pods);
    size_t i;
    json_t *pod;
    json_array_foreach(items, i, pod)
    {
        const char *uid =
            json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        if (uid)
            json_object_set(p->pods, uid, pod);
    }
    dp_podcache_replace(p->decisions, items);
    if (p->ledger) {
        /* Rebuilt from the node's pods; charges made here stay while their pod lives. */
        struct vc_ledger *l = p->ledger;
        size_t k = 0;
        for (size_t j = 0; j < l->count; j++)
            if (l->items[j].local && json_object_get(p->pods, l->items[j].pod_uid))
                l->items[k++] = l->items[j];
        l->count = k;
        vc_waiting_clear(&p->vc_waiting);
        json_array_foreach(items, i, pod)
        {
            vc_ledger_put_pod(l, pod, p->cfg->cli.node_name, p->cfg->volcano.gpu_memory_factor);
            vc_track(p, pod);
        }
    }
    sweep(p);
    json_array_foreach(items, i, pod) apply_decision(p, pod);
    dp_podcache_foreach_waiting(p->decisions, NULL, prepare_one, p);
    if (p->ledger)
        json_array_foreach(items, i, pod)
            dp_volcano_foreach_waiting(p->cfg, p->gpus, p->gpu_count, pod, prepare_one, p);
}

static void pods_event(void *arg, enum kube_event_type type, json_t *pod)
{
    struct dp_plugin *p = arg;
    const char *uid = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
    if (!uid)
        return;
    if (type == KUBE_EVENT_DELETED) {
        json_object_del(p->pods, uid);
        dp_podcache_remove(p->decisions, uid);
        if (p->ledger) {
            vc_ledger_drop_pod(p->ledger, uid, true);
            vc_waiting_drop(&p->vc_waiting, uid);
        }
        sweep(p);
    } else {
        json_object_set(p->pods, uid, pod);
        dp_podcache_put(p->decisions, pod);
        if (p->ledger) {
            vc_ledger_put_pod(p->ledger, pod, p->cfg->cli.node_name,
                              p->cfg->volcano.gpu_memory_factor);
            vc_track(p, pod);
        }
        apply_decision(p, pod);
        dp_podcache_foreach_waiting(p->decisions, uid, prepare_one, p);
        if (p->ledger)
            dp_volcano_foreach_waiting(p->cfg, p->gpus, p->gpu_count, pod, prepare_one, p);
        const char *phase =
            json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0))
            mig_reconcile(p); /* a finished pod's instances go at once */
    }
}

static void pods_error(void *arg, const struct vg_err *err)
{
    (void)arg;
    vg_log(VG_LOG_WARN, "pod watch", "err=\"%s\"", err->msg);
}

/* ---- life cycle ----------------------------------------------------------------------- */

static struct event *timer(struct dp_plugin *p, uint64_t ms, event_callback_fn cb)
{
    struct event *ev = event_new(p->base, -1, ms ? EV_PERSIST : 0, cb, p);
    if (ms) {
        struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
        event_add(ev, &tv);
    }
    return ev;
}

void dp_ensure_preload_file(const struct dpconfig *cfg)
{
    struct stat st;
    if (stat(cfg->vgpu.ld_so_preload_path, &st) == 0)
        return;
    VG_AUTO_FILE FILE *f = fopen(cfg->vgpu.ld_so_preload_path, "we");
    if (!f) {
        vg_log(VG_LOG_WARN, "cannot create ld.so.preload for containers", "path=%s err=\"%s\"",
               cfg->vgpu.ld_so_preload_path, VG_STRERROR(errno));
        return;
    }
    fprintf(f, "%s\n", cfg->vgpu.libvgpu_path);
}

/* The GPUs of the node; a failure is the plugin's only with flags.failOnInitError. */
static int discover(struct dp_plugin *p, struct vg_err *err)
{
    struct vg_err derr = {0};
    int rc = p->opt.source.discover(p->opt.source.arg, p->gpus, &p->gpu_count, &derr);
    if (rc >= 0) {
        dp_migdyn_mark(p->cfg, p->gpus, p->gpu_count);
        for (unsigned i = 0; i < p->gpu_count; i++) {
            struct dp_gpu *g = &p->gpus[i];
            if (!g->mig_dynamic)
                continue;
            rc = p->opt.source.mig_state ? p->opt.source.mig_state(p->opt.source.arg, g, &derr)
                                         : vg_err_set(&derr, -ENOTSUP, "no dynamic MIG");
            if (rc == 0)
                rc = dp_migdyn_allow(g, p->opt.hami_mig, &derr);
            if (rc < 0)
                return vg_err_set(err, rc, "GPU %u (%s): vgpu.migMode dynamic: %s", g->index,
                                  g->uuid, derr.msg);
            vg_log(VG_LOG_INFO, "GPU served with dynamic MIG", "gpu=%s profiles=%zu instances=%zu",
                   g->uuid, g->mig_profile_count, g->mig_instance_count);
        }
        return 0;
    }
    if (p->cfg->flags.fail_on_init_error)
        return vg_err_set(err, rc, "%s (flags.failOnInitError is true)", derr.msg);
    vg_log(VG_LOG_WARN, "GPU discovery failed; serving no GPUs (flags.failOnInitError is false)",
           "err=\"%s\"", derr.msg);
    p->gpu_count = 0;
    return 0;
}

VG_DEFINE_AUTO(plugin_freep, struct dp_plugin, dp_plugin_free)

int dp_plugin_new(struct event_base *base, const struct dpconfig *cfg,
                  const struct dp_plugin_options *options, struct dp_plugin **out,
                  struct vg_err *err)
{
    if (!cfg->cli.node_name || !cfg->cli.node_name[0])
        return vg_err_set(err, -EINVAL, "no node name: pass --node-name or set NODE_NAME");
    if (cfg->flags.restart_on_device_unhealthy && !options->restart)
        return vg_err_set(err, -EINVAL,
                          "flags.restartOnDeviceUnhealthy: this program cannot restart the "
                          "plugin");
    VG_AUTO(plugin_freep) struct dp_plugin *p = xcalloc(1, sizeof(*p));
    p->base = base;
    p->cfg = cfg;
    p->opt = *options;
    p->inotify_fd = -1;
    if (!p->opt.health_interval_ms)
        p->opt.health_interval_ms = 5000;
    if (!p->opt.heartbeat_ms)
        p->opt.heartbeat_ms = 30000;
    if (!p->opt.sweep_interval_ms)
        p->opt.sweep_interval_ms = 60000;
    if (!p->opt.register_retry_ms)
        p->opt.register_retry_ms = 5000;
    p->pods = json_object();
    p->decisions = dp_podcache_new(cfg->cli.node_name);
    if (cfg->vgpu.scheduler_name != NULL)
        dp_podcache_set_scheduler(p->decisions, cfg->vgpu.scheduler_name);
    p->prepared = json_object();
    if (vg_snprintf(p->kubelet_socket, sizeof(p->kubelet_socket), "%s/kubelet.sock",
                    cfg->cli.kubelet_dir) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "kubelet directory path too long");
    int rc;
    if ((rc = discover(p, err)) < 0)
        return rc;
    if (dp_volcano_mode(cfg)) {
        p->ledger = xcalloc(1, sizeof(*p->ledger));
        p->vc_writes = json_object();
        p->vc_flush_event = event_new(base, -1, 0, vc_flush_cb, p);
        rc = dp_volcano_resources(cfg, p->gpus, p->gpu_count, &p->res, err);
    } else {
        rc = dp_resources_build(cfg, p->gpus, p->gpu_count, &p->res, err);
    }
    if (rc < 0)
        return rc;
    if (p->res.mode == ANNOT_MODE_VGPU && (rc = dp_vgpu_dirs(cfg, err)) < 0)
        return rc;
    p->inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (p->inotify_fd < 0 || inotify_add_watch(p->inotify_fd, cfg->cli.kubelet_dir, IN_CREATE) < 0)
        return vg_err_errno(err, errno, "watching kubelet directory %s", cfg->cli.kubelet_dir);
    struct dp_mps_options mo = {.check_interval_ms = p->opt.health_interval_ms,
                                .backoff_min_ms = p->opt.mps_backoff_ms,
                                .changed = mps_changed,
                                .arg = p};
    if ((rc = dp_mps_new(base, cfg, p->gpus, p->gpu_count, &p->res, &mo, &p->mps, err)) < 0)
        return rc;
    for (size_t i = 0; i < p->res.count; i++) {
        p->serving[i].plugin = p;
        p->serving[i].resource = &p->res.items[i];
        if ((rc = serve_one(&p->serving[i], err)) < 0)
            return rc;
    }
    p->inotify_event = event_new(base, p->inotify_fd, EV_READ | EV_PERSIST, inotify_cb, p);
    event_add(p->inotify_event, NULL);
    p->retry_timer = timer(p, 0, retry_cb);
    p->health_timer = timer(p, p->opt.health_interval_ms, health_cb);
    p->sweep_timer = timer(p, p->opt.sweep_interval_ms, sweep_cb);
    if (p->opt.kube) {
        p->heartbeat_timer = timer(p, p->opt.heartbeat_ms, heartbeat_cb);
        publish_inventory(p);
        if (p->res.mode == ANNOT_MODE_VGPU) {
            char selector[ANNOT_NAME_MAX + 32];
            vg_snprintf(selector, sizeof(selector), "spec.nodeName=%s", cfg->cli.node_name);
            struct kube_watch_options wo = {
                .path = "/api/v1/pods", .field_selector = selector, .seed = (uint64_t)getpid()};
            struct kube_watch_callbacks cb = {
                .resync = pods_resync, .event = pods_event, .error = pods_error};
            if ((rc = kube_watch_new(p->opt.kube, &wo, &cb, p, &p->pods_watch, err)) < 0)
                return rc;
        }
    }
    if (p->res.mode == ANNOT_MODE_VGPU)
        dp_ensure_preload_file(cfg);
    if (cfg->resources.gpus.count || cfg->resources.mig.count)
        vg_log(VG_LOG_WARN,
               "resources.gpus and resources.mig are read but not applied (as NVIDIA's plugin "
               "does): resources keep their standard names",
               "gpus=%zu mig=%zu", cfg->resources.gpus.count, cfg->resources.mig.count);
    char foreign[512];
    if (dpconfig_foreign_settings(cfg, foreign, sizeof(foreign)) > 0)
        vg_log(VG_LOG_WARN,
               "settings the device plugin does not act on: gpu-feature-discovery's (which "
               "reads the same file), resources (NVIDIA's plugin ignores them too)",
               "keys=%s", foreign);
    vg_log(VG_LOG_INFO, "device plugin started",
           "node=%s mode=%s protocol=%s gpus=%u resources=%zu", cfg->cli.node_name,
           annot_mode_name(p->res.mode), dp_volcano_mode(cfg) ? "volcano" : "vgpu", p->gpu_count,
           p->res.count);
    register_all(p);
    *out = vg_steal_ptr(&p);
    return 0;
}

void dp_plugin_free(struct dp_plugin *p)
{
    if (!p)
        return;
    kube_watch_free(p->pods_watch);
    while (p->lookups)
        lookup_free(p->lookups);
    dp_mps_free(p->mps);
    for (size_t i = 0; i < DP_MAX_RESOURCES; i++) {
        vgrpc_client_free(p->serving[i].registration);
        vgrpc_server_free(p->serving[i].server);
    }
    struct event *evs[] = {p->inotify_event, p->health_timer, p->heartbeat_timer,
                           p->sweep_timer,   p->retry_timer,  p->vc_flush_event};
    for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
        if (evs[i])
            event_free(evs[i]);
    if (p->inotify_fd >= 0)
        close(p->inotify_fd);
    dp_resources_release(&p->res);
    json_decref(p->pods);
    json_decref(p->prepared);
    json_decref(p->vc_writes);
    vc_waiting_free(&p->vc_waiting);
    free(p->ledger);
    dp_podcache_free(p->decisions);
    free(p);
}

void dp_plugin_get_stats(const struct dp_plugin *p, struct dp_plugin_stats *stats)
{
    *stats = p->stats;
}
