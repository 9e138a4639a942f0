/* vgpu-dra-plugin's daemon on one libevent loop (docs/dra.md):
 *   - the registration socket <kubelet-dir>/plugins_registry/<driver>-reg.sock, where
 *     kubelet's plugin watcher calls GetInfo and NotifyRegistrationStatus; served again
 *     when it disappears (kubelet wiped the directory), so kubelet finds it again;
 *   - the DRA service on <kubelet-dir>/plugins/<driver>/dra.sock, v1 and v1beta1 paths;
 *   - NodePrepareResources: each claim not yet prepared is read from the API (deferred
 *     reply), prepared (prepare.c) and checkpointed before the answer; one prepared
 *     already is answered from the checkpoint. Every step runs on the loop, so concurrent
 *     calls are serialised and a claim is never prepared twice;
 *   - NodeUnprepareResources: removes what prepare made, from the checkpoint's record. */
#include <errno.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/fs.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "dra/dra.h"
#include "dra/health.h"
#include "dra/mig.h"
#include "dra/proto.h"
#include "dra/slices.h"
#include "grpc/grpc.h"
#include "kube/kube.h"

struct pending;
struct watcher;

struct get_ctx {
    struct pending *p;
    size_t index;
};

struct dra_plugin {
    struct event_base *base;
    struct kube_client *kube;
    char *driver;
    char *node_name, *cdi_dir;
    char reg_path[1024], svc_path[1024], cp_path[1024], mig_path[1024];
    struct dra_mig *mig;             /* borrowed, or NULL */
    struct dra_mig_gpu *migs;        /* per GPU: its partitions when dynamic */
    struct dra_instances *instances; /* made for claims, as <state>/mig.json records them */
    bool partitionable;              /* the API server has partitionable devices */
    uint64_t gi_pause_ms;            /* tests: a pause between the GPU and compute instance */
    struct vgrpc_server *reg, *svc;
    struct event *check;
    uint64_t check_ms;
    struct dra_checkpoint cp;
    struct dra_node node;
    struct dp_gpu *gpus; /* owned copy; health changes here */
    unsigned gpu_count;
    struct dp_gpu_source source;
    struct dra_health_monitor *monitor; /* borrowed, or NULL */
    struct dra_gpu_health *health;      /* per GPU */
    int taints_mode;
    bool taints; /* the slices carry taints */
    bool version_known, version_asked;
    bool version_tried;       /* asked in this resync round: a failure waits for the next */
    struct watcher *watchers; /* kubelet's NodeWatchResources streams */
    int64_t health_time;      /* unix seconds of the last health poll */
    struct event *health_ev, *resync;
    uint64_t health_ms, resync_ms;
    struct dra_publisher *publisher; /* NULL: slices not published */
    bool consumable;
    char *driver_version;
    char node_uid[DRA_UID_MAX]; /* the Node's, for the slices' ownerReference; "" unknown */
    bool node_asked;            /* a GET of the Node is out */
    struct dra_plugin_stats stats;
    struct pending *pending; /* Prepare calls waiting for the API */
    bool dirty;              /* claims prepared since the checkpoint was last saved */
};

struct pending_claim {
    char ns[ANNOT_LABEL_MAX + 1], uid[DRA_UID_MAX], name[ANNOT_NAME_MAX];
    bool waiting;
    bool fresh; /* prepared by this call, maybe not saved yet */
    char error[512];
};

struct pending {
    struct dra_plugin *pl;
    struct pending *next;
    struct vgrpc_call *call; /* NULL once gone */
    bool v1;
    size_t count, outstanding;
    struct pending_claim *claims;
    struct get_ctx *gets; /* one per claim: the API reads' callback arguments */
};

static void pending_destroy(struct pending *p)
{
    free(p->claims);
    free(p->gets);
    free(p);
}

static void pending_unlink(struct pending *p)
{
    for (struct pending **pp = &p->pl->pending; *pp; pp = &(*pp)->next)
        if (*pp == p) {
            *pp = p->next;
            break;
        }
    pending_destroy(p);
}

static int save(struct dra_plugin *pl, struct vg_err *err)
{
    return dra_checkpoint_save(pl->cp_path, &pl->cp, err);
}

/* ---- registration ------------------------------------------------------------------- */

static enum vgrpc_status_code get_info(void *arg, const uint8_t *req, size_t len,
                                       struct vgrpc_reply *reply)
{
    struct dra_plugin *pl = arg;
    (void)req;
    (void)len;
    static char v1[] = "v1.DRAPlugin", v1beta1[] = "v1beta1.DRAPlugin", type[] = DRA_PLUGIN_TYPE;
    static char health[] = DRA_HEALTH_SERVICE;
    /* kubelet takes the first DRA version it serves, and opens the health stream when
     * the health service is listed (kubelets before 1.34 ignore the name). */
    static char *versions[] = {v1, v1beta1, health};
    Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
    info.type = type;
    info.name = pl->driver;
    info.endpoint = pl->svc_path;
    info.n_supported_versions = 3;
    info.supported_versions = versions;
    reply->len = pluginregistration__plugin_info__get_packed_size(&info);
    reply->data = xmalloc(reply->len ? reply->len : 1);
    pluginregistration__plugin_info__pack(&info, reply->data);
    return VGRPC_STATUS_OK;
}

static enum vgrpc_status_code notify(void *arg, const uint8_t *req, size_t len,
                                     struct vgrpc_reply *reply)
{
    struct dra_plugin *pl = arg;
    Pluginregistration__RegistrationStatus *st =
        pluginregistration__registration_status__unpack(NULL, len, req);
    if (st == NULL) {
        vg_strlcpy(reply->message, "malformed RegistrationStatus", sizeof reply->message);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    if (st->plugin_registered) {
        pl->stats.registrations++;
        vg_log(VG_LOG_INFO, "registered with kubelet", "driver=%s endpoint=%s", pl->driver,
               pl->svc_path);
    } else
        vg_log(VG_LOG_ERROR, "kubelet refused the registration", "driver=%s error=\"%s\"",
               pl->driver, st->error ? st->error : "");
    pluginregistration__registration_status__free_unpacked(st, NULL);
    reply->data = NULL;
    reply->len = 0;
    return VGRPC_STATUS_OK;
}

static int serve_registration(struct dra_plugin *pl, struct vg_err *err)
{
    vgrpc_server_free(pl->reg);
    pl->reg = vgrpc_server_new(pl->base, NULL, err);
    if (pl->reg == NULL ||
        vgrpc_server_add_unary(pl->reg, DRA_REG_GET_INFO, get_info, pl, err) < 0 ||
        vgrpc_server_add_unary(pl->reg, DRA_REG_NOTIFY, notify, pl, err) < 0 ||
        vgrpc_server_listen(pl->reg, pl->reg_path, err) < 0)
        return vg_err_wrap(err, "registration socket %s", pl->reg_path);
    return 0;
}

static void on_check(evutil_socket_t fd, short what, void *arg)
{
    struct dra_plugin *pl = arg;
    (void)fd;
    (void)what;
    struct stat st;
    if (lstat(pl->reg_path, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        struct vg_err err = {0};
        vg_log(VG_LOG_INFO, "registration socket gone; serving it again", "path=%s", pl->reg_path);
        if (serve_registration(pl, &err) < 0)
            vg_log(VG_LOG_ERROR, "cannot serve the registration socket", "err=\"%s\"", err.msg);
    }
    struct timeval tv = {.tv_sec = (time_t)(pl->check_ms / 1000),
                         .tv_usec = (suseconds_t)(pl->check_ms % 1000 * 1000)};
    event_add(pl->check, &tv);
}

/* ---- prepare -------------------------------------------------------------------------- */

typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Claim PbClaim;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__Device PbDevice;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourceResponse PbPrepResult;
typedef K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse__ClaimsEntry PbPrepEntry;

/* Checks one claim of a request; its fields into c. */
static int claim_ref(const PbClaim *in, size_t i, struct pending_claim *c, struct vg_err *err)
{
    if (in == NULL || in->uid == NULL || !annot_pod_uid(in->uid) || in->namespace_ == NULL ||
        !annot_dns_label(in->namespace_) || in->name == NULL || !annot_dns_subdomain(in->name))
        return vg_err_set(err, -EINVAL,
                          "claims[%zu]: namespace, uid and name must be a Kubernetes namespace, "
                          "uid and name",
                          i);
    vg_strlcpy(c->ns, in->namespace_, sizeof c->ns);
    vg_strlcpy(c->uid, in->uid, sizeof c->uid);
    vg_strlcpy(c->name, in->name, sizeof c->name);
    return 0;
}

/* The checkpoint is saved once per call, before any answer built from it: a claim
 * answered as prepared is on disk. When the save fails, this call's new claims are undone
 * and answered with the error. */
static void save_fresh(struct pending *p)
{
    struct dra_plugin *pl = p->pl;
    struct vg_err err = {0};
    if (!pl->dirty)
        return;
    if (save(pl, &err) == 0) {
        pl->dirty = false;
        return;
    }
    for (size_t i = 0; i < p->count; i++) {
        struct pending_claim *c = &p->claims[i];
        struct dra_prepared *found = dra_checkpoint_find(&pl->cp, c->uid);
        if (!c->fresh || found == NULL)
            continue;
        struct vg_err ignored;
        dra_unprepare(&pl->node, c->uid, found, &ignored);
        dra_checkpoint_remove(&pl->cp, c->uid);
        pl->stats.prepared--;
        pl->stats.errors++;
        vg_strlcpy(c->error, err.msg, sizeof c->error);
    }
}

static void finish_prepare(struct pending *p)
{
    struct dra_plugin *pl = p->pl;
    save_fresh(p);
    if (p->call == NULL) {
        pending_unlink(p);
        return;
    }
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesResponse msg =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_PREPARE_RESOURCES_RESPONSE__INIT;
    PbPrepEntry *entries = xcalloc(p->count + 1, sizeof(*entries));
    PbPrepEntry **entryp = xcalloc(p->count + 1, sizeof(*entryp));
    PbPrepResult *results = xcalloc(p->count + 1, sizeof(*results));
    size_t dev_total = p->count * DRA_MAX_RESULTS + 1;
    PbDevice *devs = xcalloc(dev_total, sizeof(*devs));
    PbDevice **devp = xcalloc(dev_total, sizeof(*devp));
    char **reqs = xcalloc(dev_total, sizeof(*reqs));
    char **cdis = xcalloc(dev_total, sizeof(*cdis));
    size_t nd = 0, n = 0;
    for (size_t i = 0; i < p->count; i++) {
        struct pending_claim *c = &p->claims[i];
        bool dup = false;
        for (size_t k = 0; k < i; k++)
            dup |= strcmp(p->claims[k].uid, c->uid) == 0;
        if (dup)
            continue;
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__claims_entry__init(
            &entries[n]);
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resource_response__init(&results[n]);
        entries[n].key = c->uid;
        entries[n].value = &results[n];
        entryp[n] = &entries[n];
        const struct dra_prepared *pr = c->error[0] ? NULL : dra_checkpoint_find(&pl->cp, c->uid);
        if (pr == NULL) {
            if (c->error[0] == '\0')
                vg_strlcpy(c->error, "claim was unprepared meanwhile", sizeof c->error);
            results[n].error = c->error;
        } else {
            results[n].devices = &devp[nd];
            for (unsigned d = 0; d < pr->device_count; d++, nd++) {
                const struct dra_device *dv = &pr->devices[d];
                k8s__io__kubelet__pkg__apis__dra__v1__device__init(&devs[nd]);
                reqs[nd] = (char *)dv->request;
                cdis[nd] = (char *)dv->cdi_id;
                devs[nd].n_request_names = 1;
                devs[nd].request_names = &reqs[nd];
                devs[nd].pool_name = (char *)dv->pool;
                devs[nd].device_name = (char *)dv->device;
                devs[nd].n_cdi_device_ids = 1;
                devs[nd].cdi_device_ids = &cdis[nd];
                if (p->v1 && dv->share_id[0])
                    devs[nd].share_id = (char *)dv->share_id;
                devp[nd] = &devs[nd];
                results[n].n_devices++;
            }
        }
        n++;
    }
    msg.n_claims = n;
    msg.claims = entryp;
    size_t len =
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__get_packed_size(
            &msg);
    uint8_t *data = xmalloc(len ? len : 1);
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_response__pack(&msg, data);
    vgrpc_call_reply(p->call, VGRPC_STATUS_OK, data, len, NULL);
    free(data);
    free(entries);
    free(entryp);
    free(results);
    free(devs);
    free(devp);
    free(reqs);
    free(cdis);
    pending_unlink(p);
}

/* ---- MIG instances for claims (mig.h) -------------------------------------------------------- */

static int save_instances(struct dra_plugin *pl, struct vg_err *err)
{
    return dra_instances_save(pl->mig_path, pl->instances, err);
}

static void drop_record(struct dra_plugin *pl, unsigned i)
{
    struct dra_instances *in = pl->instances;
    memmove(&in->items[i], &in->items[i + 1], (in->count - i - 1) * sizeof in->items[0]);
    in->count--;
}

/* The MIG device of uuid leaves the node's inventory (prepare no longer finds it). */
static void forget_mig(struct dra_plugin *pl, const char *uuid)
{
    for (unsigned g = 0; g < pl->gpu_count; g++) {
        struct dp_gpu *gpu = &pl->gpus[g];
        for (unsigned m = 0; m < gpu->mig_count && m < DP_MAX_MIGS; m++)
            if (uuid[0] != '\0' && strcmp(gpu->migs[m].uuid, uuid) == 0) {
                memmove(&gpu->migs[m], &gpu->migs[m + 1],
                        (gpu->mig_count - m - 1) * sizeof gpu->migs[0]);
                gpu->mig_count--;
                return;
            }
    }
}

/* Destroys every instance made for claim uid (all of them when uid is NULL and keep says
 * which to spare): its record goes once NVML has destroyed it or found it gone. The first
 * error is returned (an instance with processes is -EBUSY: kubelet calls again). */
static int destroy_instances(struct dra_plugin *pl, const char *uid,
                             bool (*keep)(struct dra_plugin *, const struct dra_instance *),
                             struct vg_err *err)
{
    int first = 0;
    bool changed = false;
    for (unsigned i = 0; pl->instances != NULL && i < pl->instances->count;) {
        struct dra_instance *t = &pl->instances->items[i];
        if ((uid != NULL && strcmp(t->claim, uid) != 0) || (keep != NULL && keep(pl, t))) {
            i++;
            continue;
        }
        struct vg_err e = {0};
        if (dra_mig_destroy(pl->mig, t, &e) < 0) {
            vg_log(VG_LOG_WARN, "cannot destroy a claim's MIG instance",
                   "claim=%s device=%s err=\"%s\"", t->claim, t->device, e.msg);
            if (first == 0)
                first = vg_err_set(err, e.code, "MIG instance of %s: %s", t->device, e.msg);
            i++;
            continue;
        }
        vg_log(VG_LOG_INFO, "MIG instance destroyed", "claim=%s device=%s gi=%d ci=%d", t->claim,
               t->device, t->gi, t->ci);
        pl->stats.instances_destroyed++;
        forget_mig(pl, t->uuid);
        drop_record(pl, i);
        changed = true;
    }
    if (changed) {
        struct vg_err e = {0};
        if (save_instances(pl, &e) < 0 && first == 0)
            first = vg_err_set(err, e.code, "%s", e.msg);
    }
    return first;
}

/* Makes the instance of each result naming a partition, and points the result at the MIG
 * device made (gpu-<minor>-mig-<gi>-<ci>, which prepare then serves like a static one).
 * Each step is recorded before it is taken, so a plugin killed in between destroys what
 * it made at its next start. An instance the claim already has (an earlier attempt) is
 * reused. */
static int make_instances(struct dra_plugin *pl, struct dra_claim *claim, struct vg_err *err)
{
    for (unsigned i = 0; i < claim->count; i++) {
        struct dra_result *r = &claim->results[i];
        unsigned g;
        const struct dra_partition *part =
            pl->mig ? dra_partition_find(pl->gpus, pl->migs, pl->gpu_count, r->device, &g) : NULL;
        if (part == NULL || strcmp(r->pool, pl->node_name) != 0)
            continue;
        struct dp_gpu *gpu = &pl->gpus[g];
        struct dra_instance *t = NULL;
        for (unsigned k = 0; k < pl->instances->count && t == NULL; k++)
            if (strcmp(pl->instances->items[k].claim, claim->uid) == 0 &&
                strcmp(pl->instances->items[k].device, r->device) == 0)
                t = &pl->instances->items[k];
        if (t != NULL && (t->ci < 0 || t->uuid[0] == '\0')) { /* half made: start over */
            if (destroy_instances(pl, claim->uid, NULL, err) < 0)
                return err->code;
            t = NULL;
        }
        if (t == NULL) {
            if (pl->instances->count == DRA_MIG_MAX_INSTANCES)
                return vg_err_set(err, -E2BIG, "more than %d MIG instances", DRA_MIG_MAX_INSTANCES);
            if (gpu->mig_count >= DP_MAX_MIGS)
                return vg_err_set(err, -E2BIG, "GPU %s has %d MIG devices already", gpu->uuid,
                                  DP_MAX_MIGS);
            t = &pl->instances->items[pl->instances->count++];
            memset(t, 0, sizeof *t);
            vg_strlcpy(t->claim, claim->uid, sizeof t->claim);
            vg_strlcpy(t->device, r->device, sizeof t->device);
            vg_strlcpy(t->gpu_uuid, gpu->uuid, sizeof t->gpu_uuid);
            t->profile_id = part->profile_id;
            t->start = part->start;
            t->size = part->size;
            t->gi = t->ci = -1;
            if (save_instances(pl, err) < 0 || dra_mig_create_gi(pl->mig, t, err) < 0 ||
                save_instances(pl, err) < 0)
                goto undo;
            if (pl->gi_pause_ms > 0) { /* tests: the window between the two instances */
                struct timespec ts = {(time_t)(pl->gi_pause_ms / 1000),
                                      (long)(pl->gi_pause_ms % 1000) * 1000000L};
                nanosleep(&ts, NULL);
            }
            struct dp_mig mig;
            if (dra_mig_create_ci(pl->mig, t, part->compute_slices, gpu->minor, gpu->memory_mib,
                                  &mig, err) < 0 ||
                save_instances(pl, err) < 0)
                goto undo;
            gpu->migs[gpu->mig_count++] = mig;
            pl->stats.instances_made++;
            vg_log(VG_LOG_INFO, "MIG instance made", "claim=%s device=%s gi=%d ci=%d uuid=%s",
                   claim->uid, r->device, t->gi, t->ci, t->uuid);
        }
        for (unsigned m = 0; m < gpu->mig_count; m++)
            if (strcmp(gpu->migs[m].uuid, t->uuid) == 0)
                dra_gpu_device_name(gpu, &gpu->migs[m], r->device);
    }
    return 0;
undo:;
    struct vg_err ignored;
    destroy_instances(pl, claim->uid, NULL, &ignored);
    return vg_err_wrap(err, "claim %s/%s", claim->ns, claim->name);
}

static bool claim_prepared(struct dra_plugin *pl, const struct dra_instance *t)
{
    return dra_checkpoint_find(&pl->cp, t->claim) != NULL;
}

/* At start: instances of claims the checkpoint does not hold (a prepare cut short, an
 * unprepare that did not finish) are destroyed; those of prepared claims are kept, and
 * every other MIG device of a dynamic GPU leaves the inventory until a claim makes it. */
static int restore_instances(struct dra_plugin *pl, struct vg_err *err)
{
    if (dra_instances_load(pl->mig_path, pl->instances, err) < 0)
        return err->code;
    struct vg_err e = {0};
    unsigned before = pl->instances->count;
    if (destroy_instances(pl, NULL, claim_prepared, &e) < 0)
        vg_log(VG_LOG_WARN, "cannot destroy MIG instances of claims not prepared", "err=\"%s\"",
               e.msg);
    if (before != pl->instances->count)
        vg_log(VG_LOG_INFO,
               "destroyed MIG instances of claims never prepared (a prepare cut short)", "count=%u",
               before - pl->instances->count);
    for (unsigned g = 0; g < pl->gpu_count; g++) {
        struct dp_gpu *gpu = &pl->gpus[g];
        if (!pl->migs[g].dynamic)
            continue;
        unsigned kept = 0;
        for (unsigned m = 0; m < gpu->mig_count && m < DP_MAX_MIGS; m++) {
            bool ours = false;
            for (unsigned k = 0; k < pl->instances->count; k++)
                ours |= strcmp(pl->instances->items[k].uuid, gpu->migs[m].uuid) == 0;
            if (ours)
                gpu->migs[kept++] = gpu->migs[m];
        }
        gpu->mig_count = kept;
    }
    return 0;
}

/* Prepares claim c from the API's object (on the loop, after the GET). */
static void prepare_one(struct dra_plugin *pl, struct pending_claim *c, json_t *body)
{
    struct vg_err err = {0};
    struct dra_claim claim;
    struct dra_prepared prepared;
    if (dra_checkpoint_find(&pl->cp, c->uid))
        return; /* a concurrent call prepared it meanwhile (saved before its answer) */
    if (dra_claim_decode(body, pl->driver, &claim, &err) < 0)
        goto failed;
    if (strcmp(claim.uid, c->uid) != 0) {
        vg_err_set(&err, -ESTALE, "claim %s/%s has uid %s, not %s (deleted and made again)", c->ns,
                   c->name, claim.uid, c->uid);
        goto failed;
    }
    char allocated[DRA_MAX_RESULTS][ANNOT_LABEL_MAX + 1];
    for (unsigned i = 0; i < claim.count; i++)
        vg_strlcpy(allocated[i], claim.results[i].device, sizeof allocated[i]);
    if (pl->mig != NULL && make_instances(pl, &claim, &err) < 0)
        goto failed;
    if (dra_prepare(&pl->node, &claim, &prepared, &err) < 0) {
        struct vg_err ignored;
        if (pl->mig != NULL)
            destroy_instances(pl, claim.uid, NULL, &ignored);
        goto failed;
    }
    /* kubelet knows the devices by their allocated names (a partition's, not the MIG
     * device made for it); plan() keeps the results' order. */
    for (unsigned i = 0; i < prepared.device_count && i < claim.count; i++)
        vg_strlcpy(prepared.devices[i].device, allocated[i], sizeof prepared.devices[i].device);
    dra_checkpoint_put(&pl->cp, &prepared);
    pl->dirty = true;
    c->fresh = true;
    pl->stats.prepared++;
    vg_log(VG_LOG_INFO, "claim prepared", "claim=%s/%s uid=%s devices=%u", c->ns, c->name, c->uid,
           prepared.device_count);
    return;
failed:
    pl->stats.errors++;
    vg_strlcpy(c->error, err.msg, sizeof c->error);
    vg_log(VG_LOG_WARN, "claim not prepared", "claim=%s/%s err=\"%s\"", c->ns, c->name, err.msg);
}

static void on_claim(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct get_ctx *g = arg;
    struct pending *p = g->p;
    struct pending_claim *c = &p->claims[g->index];
    (void)status;
    c->waiting = false;
    p->outstanding--;
    if (p->call != NULL) {
        if (err->code != 0)
            vg_snprintf(c->error, sizeof c->error, "reading claim %s/%s: %s", c->ns, c->name,
                        err->msg);
        else
            prepare_one(p->pl, c, body);
    }
    if (p->outstanding == 0)
        finish_prepare(p);
}

static void on_gone(void *arg, struct vgrpc_call *call, enum vgrpc_status_code status)
{
    struct pending *p = arg;
    (void)call;
    (void)status;
    p->call = NULL;
    if (p->outstanding == 0)
        pending_unlink(p);
}

static void prepare(void *arg, struct vgrpc_call *call, const uint8_t *req, size_t len, bool v1)
{
    struct dra_plugin *pl = arg;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodePrepareResourcesRequest *msg =
        k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__unpack(NULL, len,
                                                                                     req);
    if (msg == NULL) {
        vgrpc_call_reply(call, VGRPC_STATUS_INVALID_ARGUMENT, NULL, 0,
                         "malformed NodePrepareResourcesRequest");
        return;
    }
    struct pending *p = xcalloc(1, sizeof(*p));
    p->pl = pl;
    p->call = call;
    p->v1 = v1;
    p->count = msg->n_claims;
    p->claims = xcalloc(p->count + 1, sizeof(*p->claims));
    p->gets = xcalloc(p->count + 1, sizeof(*p->gets));
    struct vg_err err = {0};
    for (size_t i = 0; i < msg->n_claims; i++)
        if (claim_ref(msg->claims[i], i, &p->claims[i], &err) < 0) {
            k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked(
                msg, NULL);
            pending_destroy(p);
            vgrpc_call_reply(call, VGRPC_STATUS_INVALID_ARGUMENT, NULL, 0, err.msg);
            return;
        }
    k8s__io__kubelet__pkg__apis__dra__v1__node_prepare_resources_request__free_unpacked(msg, NULL);
    p->next = pl->pending;
    pl->pending = p;
    vgrpc_call_on_gone(call, on_gone, p);
    for (size_t i = 0; i < p->count; i++) {
        struct pending_claim *c = &p->claims[i];
        if (dra_checkpoint_find(&pl->cp, c->uid))
            continue;
        char path[1024];
        vg_snprintf(path, sizeof path, "/apis/resource.k8s.io/v1/namespaces/%s/resourceclaims/%s",
                    c->ns, c->name);
        struct get_ctx *g = &p->gets[i];
        g->p = p;
        g->index = i;
        if (kube_get(pl->kube, path, on_claim, g, &err) < 0) {
            vg_snprintf(c->error, sizeof c->error, "reading claim %s/%s: %s", c->ns, c->name,
                        err.msg);
            continue;
        }
        c->waiting = true;
        p->outstanding++;
    }
    if (p->outstanding == 0)
        finish_prepare(p);
}

static void prepare_v1(void *arg, struct vgrpc_call *call, const uint8_t *req, size_t len)
{
    prepare(arg, call, req, len, true);
}

static void prepare_v1beta1(void *arg, struct vgrpc_call *call, const uint8_t *req, size_t len)
{
    prepare(arg, call, req, len, false);
}

/* ---- unprepare ------------------------------------------------------------------------- */

static enum vgrpc_status_code unprepare(void *arg, const uint8_t *req, size_t len,
                                        struct vgrpc_reply *reply)
{
    struct dra_plugin *pl = arg;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesRequest *msg =
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__unpack(NULL, len,
                                                                                       req);
    if (msg == NULL) {
        vg_strlcpy(reply->message, "malformed NodeUnprepareResourcesRequest",
                   sizeof reply->message);
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    size_t count = msg->n_claims;
    struct pending_claim *claims = xcalloc(count + 1, sizeof(*claims));
    struct vg_err err = {0};
    for (size_t i = 0; i < count; i++)
        if (claim_ref(msg->claims[i], i, &claims[i], &err) < 0) {
            k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked(
                msg, NULL);
            free(claims);
            vg_strlcpy(reply->message, err.msg, sizeof reply->message);
            return VGRPC_STATUS_INVALID_ARGUMENT;
        }
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_request__free_unpacked(msg,
                                                                                          NULL);
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse out =
        K8S__IO__KUBELET__PKG__APIS__DRA__V1__NODE_UNPREPARE_RESOURCES_RESPONSE__INIT;
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry *entries =
        xcalloc(count + 1, sizeof(*entries));
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourcesResponse__ClaimsEntry **entryp =
        xcalloc(count + 1, sizeof(*entryp));
    K8s__Io__Kubelet__Pkg__Apis__Dra__V1__NodeUnprepareResourceResponse *results =
        xcalloc(count + 1, sizeof(*results));
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        struct pending_claim *c = &claims[i];
        bool dup = false;
        for (size_t k = 0; k < i; k++)
            dup |= strcmp(claims[k].uid, c->uid) == 0;
        if (dup)
            continue;
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__claims_entry__init(
            &entries[n]);
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resource_response__init(&results[n]);
        entries[n].key = c->uid;
        entries[n].value = &results[n];
        entryp[n] = &entries[n];
        struct dra_prepared *found = dra_checkpoint_find(&pl->cp, c->uid), *copy = NULL;
        if (found) {
            copy = xcalloc(1, sizeof(*copy));
            dra_prepared_copy(copy, found);
        }
        vg_err_clear(&err);
        if (dra_unprepare(&pl->node, c->uid, copy, &err) == 0 && pl->mig != NULL)
            destroy_instances(pl, c->uid, NULL, &err); /* after the files: nothing names it */
        if (err.code == 0 && copy) {
            dra_checkpoint_remove(&pl->cp, c->uid);
            if (save(pl, &err) < 0) {
                dra_checkpoint_put(&pl->cp, copy);
            } else {
                pl->dirty = false;
                pl->stats.unprepared++;
                vg_log(VG_LOG_INFO, "claim unprepared", "claim=%s/%s uid=%s", c->ns, c->name,
                       c->uid);
            }
        }
        free(copy);
        if (err.code != 0) {
            pl->stats.errors++;
            vg_strlcpy(c->error, err.msg, sizeof c->error);
            results[n].error = c->error;
        }
        n++;
    }
    out.n_claims = n;
    out.claims = entryp;
    reply->len =
        k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__get_packed_size(
            &out);
    reply->data = xmalloc(reply->len ? reply->len : 1);
    k8s__io__kubelet__pkg__apis__dra__v1__node_unprepare_resources_response__pack(&out,
                                                                                  reply->data);
    free(entries);
    free(entryp);
    free(results);
    free(claims);
    return VGRPC_STATUS_OK;
}

/* ---- resource health (KEP-4680) ---------------------------------------------------------- */

/* One kubelet stream of NodeWatchResources. */
struct watcher {
    struct dra_plugin *pl;
    struct vgrpc_stream *stream;
    struct watcher *next;
};

/* A GPU's health as kubelet's enum: unhealthy with a NoSchedule taint, unknown when its
 * XIDs are not watched (health checks off), else healthy. */
static V1alpha1__HealthStatus health_status(const struct dra_gpu_health *h)
{
    if (!dra_health_ok(h))
        return V1ALPHA1__HEALTH_STATUS__UNHEALTHY;
    return h->unmonitored ? V1ALPHA1__HEALTH_STATUS__UNKNOWN : V1ALPHA1__HEALTH_STATUS__HEALTHY;
}

/* The names the slices publish for GPU g into names[] (at most room): the GPU, or its
 * MIG devices, or (dynamic MIG on a server with partitionable devices) the GPU and every
 * partition. Their count. */
static unsigned device_names(const struct dra_plugin *pl, unsigned g,
                             char (*names)[DRA_DEVICE_NAME_MAX], size_t room)
{
    const struct dp_gpu *gpu = &pl->gpus[g];
    unsigned n = 0;
    if (pl->partitionable && pl->migs[g].dynamic) {
        if (room > 0)
            dra_gpu_device_name(gpu, NULL, names[n++]);
        for (unsigned k = 0; k < pl->migs[g].count && n < room; k++)
            dra_partition_name(gpu, &pl->migs[g].parts[k], names[n++]);
        return n;
    }
    if (!gpu->mig_enabled) {
        if (room > 0)
            dra_gpu_device_name(gpu, NULL, names[n++]);
        return n;
    }
    for (unsigned m = 0; m < gpu->mig_count && m < DP_MAX_MIGS && n < room; m++)
        dra_gpu_device_name(gpu, &gpu->migs[m], names[n++]);
    return n;
}

/* Every device of the node's pool (the names the slices publish) with its GPU's health;
 * packed into *data (malloc'ed). */
static size_t health_message(struct dra_plugin *pl, uint8_t **data)
{
    size_t max = (size_t)pl->gpu_count * (DRA_MIG_MAX_PARTS + DP_MAX_MIGS + 1) + 1, n = 0;
    V1alpha1__DeviceHealth *devs = xcalloc(max, sizeof *devs);
    V1alpha1__DeviceHealth **ptrs = xcalloc(max, sizeof *ptrs);
    V1alpha1__DeviceIdentifier *ids = xcalloc(max, sizeof *ids);
    char(*names)[DRA_DEVICE_NAME_MAX] = xcalloc(max, sizeof *names);
    for (unsigned g = 0; g < pl->gpu_count; g++) {
        unsigned count = device_names(pl, g, names + n, max - n);
        for (unsigned m = 0; m < count; m++, n++) {
            v1alpha1__device_identifier__init(&ids[n]);
            ids[n].pool_name = pl->node_name;
            ids[n].device_name = names[n];
            v1alpha1__device_health__init(&devs[n]);
            devs[n].device = &ids[n];
            devs[n].health = health_status(&pl->health[g]);
            devs[n].last_updated_time = pl->health_time;
            ptrs[n] = &devs[n];
        }
    }
    V1alpha1__NodeWatchResourcesResponse resp = V1ALPHA1__NODE_WATCH_RESOURCES_RESPONSE__INIT;
    resp.n_devices = n;
    resp.devices = ptrs;
    size_t len = v1alpha1__node_watch_resources_response__get_packed_size(&resp);
    *data = xmalloc(len ? len : 1);
    v1alpha1__node_watch_resources_response__pack(&resp, *data);
    free(names);
    free(ids);
    free(ptrs);
    free(devs);
    return len;
}

static void watcher_send(struct watcher *w, const uint8_t *data, size_t len)
{
    struct vg_err err = {0};
    if (vgrpc_stream_send(w->stream, data, len, &err) < 0) {
        vg_log(VG_LOG_WARN, "health stream: cannot send, ending it", "err=\"%s\"", err.msg);
        vgrpc_stream_finish(w->stream, VGRPC_STATUS_UNAVAILABLE, "cannot send");
        return;
    }
    w->pl->stats.health_sends++;
}

/* The full list to every stream: after each health poll, so kubelet's timeout (a device
 * not reported again for a while is Unknown) never runs out while the plugin runs. */
static void send_health(struct dra_plugin *pl)
{
    if (pl->watchers == NULL)
        return;
    uint8_t *data = NULL;
    size_t len = health_message(pl, &data);
    for (struct watcher *w = pl->watchers, *next; w != NULL; w = next) {
        next = w->next; /* a failed send may close (and free) w */
        watcher_send(w, data, len);
    }
    free(data);
}

static void watch_closed(void *arg, struct vgrpc_stream *stream, enum vgrpc_status_code status)
{
    struct watcher *w = arg;
    (void)stream;
    for (struct watcher **pp = &w->pl->watchers; *pp; pp = &(*pp)->next)
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    w->pl->stats.health_streams--;
    vg_log(VG_LOG_INFO, "kubelet's health stream closed", "status=%d", (int)status);
    free(w);
}

static enum vgrpc_status_code watch_resources(void *arg, struct vgrpc_stream *stream,
                                              const uint8_t *req, size_t len,
                                              char message[VGRPC_STATUS_MESSAGE_MAX])
{
    struct dra_plugin *pl = arg;
    V1alpha1__NodeWatchResourcesRequest *r =
        v1alpha1__node_watch_resources_request__unpack(NULL, len, req);
    if (r == NULL) {
        vg_snprintf(message, VGRPC_STATUS_MESSAGE_MAX, "NodeWatchResourcesRequest: malformed");
        return VGRPC_STATUS_INVALID_ARGUMENT;
    }
    v1alpha1__node_watch_resources_request__free_unpacked(r, NULL);
    struct watcher *w = xcalloc(1, sizeof *w);
    w->pl = pl;
    w->stream = stream;
    w->next = pl->watchers;
    pl->watchers = w;
    pl->stats.health_streams++;
    vgrpc_stream_on_close(stream, watch_closed, w);
    vg_log(VG_LOG_INFO, "kubelet watches device health", "streams=%llu",
           (unsigned long long)pl->stats.health_streams);
    uint8_t *data = NULL;
    size_t n = health_message(pl, &data);
    watcher_send(w, data, n);
    free(data);
    return VGRPC_STATUS_OK;
}

/* ---- ResourceSlices --------------------------------------------------------------------- */

static void published(void *arg)
{
    struct dra_plugin *pl = arg;
    int64_t gen = dra_publisher_generation(pl->publisher);
    pl->stats.slice_syncs++;
    if (gen != pl->stats.slice_generation)
        vg_log(VG_LOG_INFO, "ResourceSlices published", "node=%s generation=%lld", pl->node_name,
               (long long)gen);
    pl->stats.slice_generation = gen;
}

/* Builds the node's slices from the GPUs as they are now and hands them to the
 * publisher, which writes only what changed. */
static void publish(struct dra_plugin *pl)
{
    if (pl->publisher == NULL)
        return;
    struct vg_err err = {0};
    struct dra_slice_options so = {.driver = pl->driver,
                                   .node_name = pl->node_name,
                                   .node_uid = pl->node_uid,
                                   .driver_version = pl->driver_version,
                                   .consumable = pl->consumable,
                                   .health = pl->health,
                                   .taints = pl->taints,
                                   .migs = pl->migs,
                                   .partitionable = pl->partitionable};
    json_t *slices = NULL;
    if (dra_slices_build(&so, pl->gpus, pl->gpu_count, &slices, &err) < 0 ||
        dra_publisher_set(pl->publisher, slices, &err) < 0)
        vg_log(VG_LOG_ERROR, "cannot publish ResourceSlices", "err=\"%s\"", err.msg);
    json_decref(slices);
}

/* The health monitor's view: taints that change republish. */
static void poll_monitor(struct dra_plugin *pl)
{
    struct dra_health_obs obs[DP_MAX_GPUS];
    dra_health_monitor_poll(pl->monitor, obs);
    int64_t now = (int64_t)time(NULL);
    pl->health_time = now;
    bool changed = false;
    for (unsigned i = 0; i < pl->gpu_count && i < DP_MAX_GPUS; i++) {
        struct dp_gpu *g = &pl->gpus[i];
        if (!dra_health_observe(&pl->health[i], &obs[i], now))
            continue;
        changed = true;
        bool h = dra_health_ok(&pl->health[i]);
        if (h != g->healthy)
            pl->stats.health_changes++;
        g->healthy = h;
        char why[128];
        dra_health_message(&pl->health[i], why, sizeof why);
        vg_log(h ? VG_LOG_INFO : VG_LOG_WARN,
               h ? "GPU healthy: its taints cleared" : "GPU unhealthy: its devices tainted",
               "gpu=%s index=%u taints=%s why=\"%s\"", g->uuid, g->index,
               pl->taints ? "published" : "unsupported (left out of the slices)", why);
    }
    if (changed)
        publish(pl);
    send_health(pl);
}

void dra_plugin_poll_health(struct dra_plugin *pl)
{
    if (pl->monitor != NULL) {
        poll_monitor(pl);
        return;
    }
    if (pl->source.healthy == NULL)
        return;
    bool changed = false;
    for (unsigned i = 0; i < pl->gpu_count; i++) {
        struct dp_gpu *g = &pl->gpus[i];
        bool h = pl->source.healthy(pl->source.arg, g);
        if (h == g->healthy)
            continue;
        g->healthy = h;
        changed = true;
        pl->stats.health_changes++;
        vg_log(h ? VG_LOG_INFO : VG_LOG_WARN,
               h ? "GPU healthy again: published" : "GPU unhealthy: taken out of the slices",
               "gpu=%s index=%u", g->uuid, g->index);
    }
    if (changed)
        publish(pl);
}

/* The Node's uid, so the slices are deleted with the Node (an ownerReference). Without
 * it (no permission to read Nodes, the API server down) the slices are published without
 * one, and the next resync asks again. */
static void on_node(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct dra_plugin *pl = arg;
    (void)status;
    pl->node_asked = false;
    const char *uid = json_string_value(json_object_get(json_object_get(body, "metadata"), "uid"));
    if (err->code != 0 || uid == NULL || !annot_pod_uid(uid)) {
        vg_log(VG_LOG_WARN, "cannot read the Node: slices published without an ownerReference",
               "node=%s err=\"%s\"", pl->node_name, err->code ? err->msg : "no metadata.uid");
    } else
        vg_strlcpy(pl->node_uid, uid, sizeof pl->node_uid);
    publish(pl);
}

int dra_version_has_taints(const json_t *version, bool *taints, struct vg_err *err)
{
    const char *major = json_string_value(json_object_get(version, "major"));
    const char *minor = json_string_value(json_object_get(version, "minor"));
    unsigned long ma = 0, mi = 0;
    char *end;
    if (major == NULL || minor == NULL || major[0] < '0' || major[0] > '9' || minor[0] < '0' ||
        minor[0] > '9')
        return vg_err_set(err, -EINVAL, "/version: no major and minor");
    ma = strtoul(major, &end, 10);
    if (*end != '\0' && strcmp(end, "+") != 0)
        return vg_err_set(err, -EINVAL, "/version: major '%.16s' is not a number", major);
    mi = strtoul(minor, &end, 10);
    if (*end != '\0' && strcmp(end, "+") != 0)
        return vg_err_set(err, -EINVAL, "/version: minor '%.16s' is not a number", minor);
    *taints = ma > 1 || (ma == 1 && mi >= 36);
    return 0;
}

static void sync_slices(struct dra_plugin *pl);

/* The API server's version decides whether the slices carry taints (DRA_TAINTS_AUTO).
 * Unknown (no answer yet, an error): no taints, unhealthy GPUs left out, which is right
 * on every version; the next resync asks again. */
static void on_version(void *arg, long status, json_t *body, const struct vg_err *err)
{
    struct dra_plugin *pl = arg;
    (void)status;
    pl->version_asked = false;
    struct vg_err verr = {0};
    bool taints = false;
    if (err->code != 0 || dra_version_has_taints(body, &taints, &verr) < 0) {
        vg_log(VG_LOG_WARN,
               "cannot read the API server's version: unhealthy GPUs left out of "
               "the slices until it is known",
               "err=\"%s\"", err->code ? err->msg : verr.msg);
    } else {
        pl->version_known = true;
        if (pl->taints_mode == DRA_TAINTS_AUTO)
            pl->taints = taints;
        pl->partitionable = taints && pl->mig != NULL; /* the same release, 1.36 */
        vg_log(VG_LOG_INFO,
               taints ? "API server has device taints: unhealthy GPUs published tainted"
                      : "API server without device taints: unhealthy GPUs left out",
               "major=%s minor=%s", json_string_value(json_object_get(body, "major")),
               json_string_value(json_object_get(body, "minor")));
        if (pl->mig != NULL)
            vg_log(VG_LOG_INFO,
                   pl->partitionable ? "MIG GPUs published as partitions (counters)"
                                     : "API server without partitionable devices: MIG GPUs "
                                       "published as their instances",
                   "partitionable=%s", pl->partitionable ? "true" : "false");
    }
    sync_slices(pl);
}

/* Publishes, first asking for the server's version and the Node's uid when they are not
 * known yet. */
static void sync_slices(struct dra_plugin *pl)
{
    if (pl->version_asked)
        return;
    if (!pl->version_known && !pl->version_tried &&
        ((pl->taints_mode == DRA_TAINTS_AUTO && pl->monitor != NULL) || pl->mig != NULL)) {
        struct vg_err err = {0};
        pl->version_tried = true;
        if (kube_get(pl->kube, "/version", on_version, pl, &err) == 0) {
            pl->version_asked = true;
            return;
        }
    }
    if (pl->node_uid[0] != '\0' || pl->node_asked) {
        if (!pl->node_asked)
            publish(pl);
        return;
    }
    char path[DRA_NAME_MAX + 32];
    struct vg_err err = {0};
    vg_snprintf(path, sizeof path, "/api/v1/nodes/%s", pl->node_name);
    if (kube_get(pl->kube, path, on_node, pl, &err) == 0)
        pl->node_asked = true;
    else
        publish(pl);
}

/* Every resync_ms the slices are handed to the publisher again: it lists the API
 * server's and writes only what differs, so one deleted or changed by someone else
 * comes back. */
static void on_resync(evutil_socket_t fd, short what, void *arg)
{
    struct dra_plugin *pl = arg;
    (void)fd;
    (void)what;
    pl->version_tried = false;
    sync_slices(pl);
    struct timeval tv = {.tv_sec = (time_t)(pl->resync_ms / 1000),
                         .tv_usec = (suseconds_t)(pl->resync_ms % 1000 * 1000)};
    event_add(pl->resync, &tv);
}

static void on_health(evutil_socket_t fd, short what, void *arg)
{
    struct dra_plugin *pl = arg;
    (void)fd;
    (void)what;
    dra_plugin_poll_health(pl);
    struct timeval tv = {.tv_sec = (time_t)(pl->health_ms / 1000),
                         .tv_usec = (suseconds_t)(pl->health_ms % 1000 * 1000)};
    event_add(pl->health_ev, &tv);
}

/* ---- life cycle ------------------------------------------------------------------------- */

/* The partitions of every GPU in MIG mode, when MIG is served on demand. */
static int discover_partitions(struct dra_plugin *pl, struct vg_err *err)
{
    for (unsigned g = 0; pl->mig != NULL && g < pl->gpu_count; g++) {
        if (!pl->gpus[g].mig_enabled)
            continue;
        if (dra_mig_discover(pl->mig, &pl->gpus[g], &pl->migs[g], err) < 0)
            return vg_err_wrap(err, "MIG partitions of GPU %u", pl->gpus[g].index);
        vg_log(VG_LOG_INFO, "MIG GPU served on demand", "gpu=%s partitions=%u slices=%u",
               pl->gpus[g].uuid, pl->migs[g].count, pl->migs[g].memory_slices);
    }
    return 0;
}

/* The checkpoint of an earlier run: claims of an earlier boot are gone with their
 * containers, their files are removed. */
static int restore(struct dra_plugin *pl, const char *boot_id_path, struct vg_err *err)
{
    char boot[64];
    if (dra_boot_id(boot_id_path, boot, sizeof boot, err) < 0 ||
        dra_checkpoint_load(pl->cp_path, &pl->cp, err) < 0)
        return err->code;
    if (pl->cp.boot_id[0] != '\0' && strcmp(pl->cp.boot_id, boot) != 0) {
        vg_log(VG_LOG_INFO, "checkpoint from an earlier boot: its claims are released",
               "claims=%zu", pl->cp.count);
        for (size_t i = 0; i < pl->cp.count; i++) {
            struct vg_err ignored;
            dra_unprepare(&pl->node, pl->cp.claims[i]->uid, pl->cp.claims[i], &ignored);
        }
        dra_checkpoint_release(&pl->cp);
    }
    vg_strlcpy(pl->cp.boot_id, boot, sizeof pl->cp.boot_id);
    unsigned removed;
    struct vg_err sweep = {0};
    /* A leftover that cannot be removed is logged: it names no claim the plugin serves. */
    if (dra_sweep_orphans(&pl->node, &pl->cp, &removed, &sweep) < 0)
        vg_log(VG_LOG_WARN, "cannot remove files of claims not in the checkpoint", "err=\"%s\"",
               sweep.msg);
    if (removed)
        vg_log(VG_LOG_INFO, "removed files of claims never checkpointed (a prepare cut short)",
               "count=%u", removed);
    return save(pl, err);
}

int dra_plugin_new(struct event_base *base, const struct dra_plugin_options *o,
                   struct dra_plugin **out, struct vg_err *err)
{
    *out = NULL;
    const char *driver = o->driver ? o->driver : DRA_DRIVER_DEFAULT;
    if (!annot_dns_subdomain(driver) || strlen(driver) > 63)
        return vg_err_set(err, -EINVAL,
                          "driver name '%s' is not a DNS subdomain of at most 63 "
                          "characters",
                          driver);
    if (o->kube == NULL || o->node_name == NULL || o->kubelet_dir == NULL || o->cdi_dir == NULL ||
        o->state_dir == NULL || o->cfg == NULL)
        return vg_err_set(err, -EINVAL, "dra plugin: missing option");
    if (!annot_dns_subdomain(o->node_name))
        return vg_err_set(err, -EINVAL, "node name is not a Kubernetes name");
    struct dra_plugin *pl = xcalloc(1, sizeof(*pl));
    pl->base = base;
    pl->kube = o->kube;
    pl->driver = xstrdup(driver);
    pl->node_name = xstrdup(o->node_name);
    pl->cdi_dir = xstrdup(o->cdi_dir);
    pl->check_ms = o->socket_check_ms ? o->socket_check_ms : 5000;
    pl->gpu_count = o->gpu_count;
    pl->gpus = xcalloc(o->gpu_count + 1, sizeof(*pl->gpus));
    if (o->gpu_count)
        memcpy(pl->gpus, o->gpus, o->gpu_count * sizeof(*pl->gpus));
    pl->source = o->source;
    pl->monitor = o->health;
    pl->health = xcalloc(o->gpu_count + 1, sizeof(*pl->health));
    pl->taints_mode = o->device_taints;
    pl->mig = o->mig;
    pl->gi_pause_ms = o->mig_gi_pause_ms;
    pl->migs = xcalloc(o->gpu_count + 1, sizeof(*pl->migs));
    pl->instances = xcalloc(1, sizeof(*pl->instances));
    pl->taints = o->device_taints == DRA_TAINTS_ON;
    pl->health_time = (int64_t)time(NULL);
    pl->health_ms = o->health_interval_ms ? o->health_interval_ms : 5000;
    pl->resync_ms = o->resync_ms ? o->resync_ms : 600000;
    pl->consumable = o->consumable;
    pl->driver_version = o->driver_version ? xstrdup(o->driver_version) : NULL;
    pl->node = (struct dra_node){.cfg = o->cfg,
                                 .gpus = pl->gpus,
                                 .gpu_count = pl->gpu_count,
                                 .node_name = pl->node_name,
                                 .cdi_dir = pl->cdi_dir};
    char reg_dir[1024], svc_dir[1024];
    if (vg_snprintf(reg_dir, sizeof reg_dir, "%s/plugins_registry", o->kubelet_dir) < 0 ||
        vg_snprintf(svc_dir, sizeof svc_dir, "%s/plugins/%s", o->kubelet_dir, driver) < 0 ||
        vg_snprintf(pl->reg_path, sizeof pl->reg_path, "%s/%s-reg.sock", reg_dir, driver) < 0 ||
        vg_snprintf(pl->svc_path, sizeof pl->svc_path, "%s/dra.sock", svc_dir) < 0 ||
        vg_snprintf(pl->cp_path, sizeof pl->cp_path, "%s/checkpoint.json", o->state_dir) < 0 ||
        vg_snprintf(pl->mig_path, sizeof pl->mig_path, "%s/mig.json", o->state_dir) < 0) {
        dra_plugin_free(pl);
        return vg_err_set(err, -ENAMETOOLONG, "kubelet or state directory path too long");
    }
    /* Every directory a claim needs is made here, with its parents, so that a start
     * that succeeds never fails claims for a missing directory later. Only the plugin
     * writes the board's directories (containers get it read-only, their own slot and
     * the turn files mounted over it), so one left world-writable is closed. */
    if (vg_mkdir_parents(reg_dir, 0755, err) < 0 || vg_mkdir_parents(svc_dir, 0755, err) < 0 ||
        vg_mkdir_parents(o->state_dir, 0755, err) < 0 ||
        vg_mkdir_parents(o->cdi_dir, 0755, err) < 0 || dp_vgpu_dirs(o->cfg, err) < 0 ||
        restore(pl, o->boot_id_path, err) < 0 || discover_partitions(pl, err) < 0 ||
        (pl->mig != NULL && restore_instances(pl, err) < 0)) {
        dra_plugin_free(pl);
        return err->code;
    }
    dp_ensure_preload_file(o->cfg); /* every claim's CDI spec mounts it */
    /* The DRA service first: kubelet calls it as soon as registration succeeds. */
    pl->svc = vgrpc_server_new(base, NULL, err);
    if (pl->svc == NULL ||
        vgrpc_server_add_deferred(pl->svc, DRA_V1_SERVICE "NodePrepareResources", prepare_v1, pl,
                                  err) < 0 ||
        vgrpc_server_add_deferred(pl->svc, DRA_V1BETA1_SERVICE "NodePrepareResources",
                                  prepare_v1beta1, pl, err) < 0 ||
        vgrpc_server_add_unary(pl->svc, DRA_V1_SERVICE "NodeUnprepareResources", unprepare, pl,
                               err) < 0 ||
        vgrpc_server_add_unary(pl->svc, DRA_V1BETA1_SERVICE "NodeUnprepareResources", unprepare, pl,
                               err) < 0 ||
        vgrpc_server_add_stream(pl->svc, DRA_HEALTH_WATCH, watch_resources, pl, err) < 0 ||
        vgrpc_server_listen(pl->svc, pl->svc_path, err) < 0 || serve_registration(pl, err) < 0) {
        dra_plugin_free(pl);
        return err->code;
    }
    pl->check = event_new(base, -1, 0, on_check, pl);
    struct timeval tv = {.tv_sec = (time_t)(pl->check_ms / 1000),
                         .tv_usec = (suseconds_t)(pl->check_ms % 1000 * 1000)};
    event_add(pl->check, &tv);
    if (pl->monitor != NULL)
        poll_monitor(pl); /* the first state (unmonitored GPUs) is in the first slices */
    if (o->publish) {
        if (dra_publisher_new(base, pl->kube, driver, pl->node_name, published, pl, &pl->publisher,
                              err) < 0) {
            dra_plugin_free(pl);
            return err->code;
        }
        sync_slices(pl);
        pl->resync = event_new(base, -1, 0, on_resync, pl);
        struct timeval rtv = {.tv_sec = (time_t)(pl->resync_ms / 1000),
                              .tv_usec = (suseconds_t)(pl->resync_ms % 1000 * 1000)};
        event_add(pl->resync, &rtv);
    }
    if (pl->source.healthy || pl->monitor) {
        pl->health_ev = event_new(base, -1, 0, on_health, pl);
        struct timeval htv = {.tv_sec = (time_t)(pl->health_ms / 1000),
                              .tv_usec = (suseconds_t)(pl->health_ms % 1000 * 1000)};
        event_add(pl->health_ev, &htv);
    }
    vg_log(VG_LOG_INFO, "DRA plugin serving", "driver=%s registration=%s service=%s claims=%zu",
           driver, pl->reg_path, pl->svc_path, pl->cp.count);
    *out = pl;
    return 0;
}

void dra_plugin_free(struct dra_plugin *pl)
{
    if (pl == NULL)
        return;
    if (pl->check)
        event_free(pl->check);
    vgrpc_server_free(pl->reg);
    vgrpc_server_free(pl->svc); /* deferred calls' gone callbacks run here */
    while (pl->pending) {
        struct pending *p = pl->pending;
        pl->pending = p->next;
        pending_destroy(p);
    }
    if (pl->health_ev)
        event_free(pl->health_ev);
    free(pl->health);
    if (pl->resync)
        event_free(pl->resync);
    dra_publisher_destroy(pl->publisher);
    free(pl->gpus);
    free(pl->migs);
    free(pl->instances);
    free(pl->driver_version);
    dra_checkpoint_release(&pl->cp);
    free(pl->driver);
    free(pl->node_name);
    free(pl->cdi_dir);
    free(pl);
}

void dra_plugin_get_stats(const struct dra_plugin *pl, struct dra_plugin_stats *stats)
{
    *stats = pl->stats;
    stats->taints = pl->taints;
    stats->partitionable = pl->partitionable;
}
