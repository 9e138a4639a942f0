/* The mutating admission webhook (admission.k8s.io/v1 AdmissionReview).
 *
 * For a pod that asks for vgpu resources: refuse what no node can ever serve (memory
 * above the largest GPU in the cluster, cores over 100, a GPU type no node has), apply
 * the defaults (nvidia.com/gpu: defaultGPUNum where only memory or cores were given) and
 * point spec.schedulerName at vgpu-scheduler. Pods without vgpu resources, and pods
 * already given to another scheduler, pass unchanged. The patch is a JSON Patch.
 *
 * With --webhook-dra (sched_options.webhook_dra) a pod whose containers ask for GPUs through
 * HAMi's resources gets ResourceClaims of vgpu's DRA classes instead (webhook_dra.c), and
 * the ResourceClaimTemplates they name are handed to the daemon to create.
 *
 * Before any of that, for every pod (CREATE and UPDATE, GPU or not): vgpu's own vgpu.io/
 * annotations (the decision) are written only through pods/binding, so a pod that carries
 * one on CREATE, or adds, changes or removes one on UPDATE (unless the UPDATE is by one of
 * the trusted users), is refused (docs/security.md). Volcano's decision (volcano_reserved:
 * volcano.sh/vgpu-node, -time, -ids-new, devices-to-allocate, bind-phase, bind-time) is
 * held to the same rule, since vgpu's device plugin in Volcano mode reads it; Volcano's
 * scheduler and the device plugin, which write it, are trusted users in that mode.
 *
 * On CREATE, containers get only the GPUs they were given: one that asks for no GPU gets
 * NVIDIA_VISIBLE_DEVICES=void (overwrite_env), and a GPU container that sets the
 * variables naming its devices itself is refused. */
#include "scheduler/internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"

static char *base64(const char *in, size_t len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = xmalloc((len + 2) / 3 * 4 + 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < len)
            v |= (uint32_t)(unsigned char)in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < len ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? tab[v & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

static bool contains_ci(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0)
            return true;
    return false;
}

/* Checks a request against every GPU the cluster has; NULL when some GPU could take it. */
static int impossible(const struct sched_state *s, const struct sched_container_request *cr,
                      char *msg, size_t size)
{
    const struct place_request *r = &cr->request;
    uint64_t biggest = 0;
    bool any = false, type_found = r->type_include_count == 0;
    for (size_t i = 0; i < s->cluster->node_count; i++) {
        const struct sched_node *info = &s->nodes[i];
        if (!info->present || !info->has_inventory)
            continue;
        for (unsigned g = 0; g < info->inventory.gpu_count; g++) {
            const struct sched_gpu_info *gpu = &info->inventory.gpus[g];
            any = true;
            if (gpu->memory_mib > biggest)
                biggest = gpu->memory_mib;
            for (unsigned t = 0; t < r->type_include_count && !type_found; t++)
                type_found = contains_ci(gpu->model, r->type_include[t]);
        }
    }
    if (!any)
        return 0; /* an empty cluster proves nothing */
    if (r->gpu_mem_mib > biggest)
        return vg_snprintf(msg, size,
                           "container %s asks for %llu MiB of GPU memory (nvidia.com/gpumem), "
                           "more than the largest GPU in the cluster has (%llu MiB)",
                           cr->name, (unsigned long long)r->gpu_mem_mib,
                           (unsigned long long)biggest) < 0
                   ? -EINVAL
                   : 1;
    if (!type_found)
        return vg_snprintf(msg, size,
                           "no GPU in the cluster matches nvidia.com/use-gputype '%s'%s; "
                           "check the type name",
                           r->type_include[0],
                           r->type_include_count > 1 ? " (or the others)" : "") < 0
                   ? -EINVAL
                   : 1;
    return 0;
}

static json_t *review(const char *uid, bool allowed, const char *message, json_t *patch)
{
    json_t *resp = json_pack("{s:s, s:b}", "uid", uid, "allowed", allowed);
    if (message != NULL)
        json_object_set_new(
            resp, "status",
            json_pack("{s:s, s:i}", "message", message, "code", allowed ? 200 : 400));
    if (patch != NULL && json_array_size(patch) > 0) {
        VG_AUTO_FREE char *text = json_dumps(patch, JSON_COMPACT);
        VG_AUTO_FREE char *b64 = base64(text, strlen(text));
        json_object_set_new(resp, "patchType", json_string("JSONPatch"));
        json_object_set_new(resp, "patch", json_string(b64));
    }
    json_decref(patch);
    return json_pack("{s:s, s:s, s:o}", "apiVersion", "admission.k8s.io/v1", "kind",
                     "AdmissionReview", "response", resp);
}

/* Whether key is part of Volcano's vGPU decision (docs/volcano.md): every volcano.sh/vgpu-
 * key but the four Volcano documents for a pod's author, and the three the decision
 * writes beside them. A pod author who could set them at create (and name spec.nodeName to
 * skip the scheduler) would choose the GPU and the share vgpu's device plugin gives. */
static bool volcano_reserved(const char *key)
{
    static const char *const author_keys[] = {
        "volcano.sh/vgpu-mode", "volcano.sh/vgpu-podgroup-policy", "volcano.sh/vgpu-use-gpuuuid",
        "volcano.sh/vgpu-nouse-gpuuuid"};
    static const char *const decision_keys[] = {"volcano.sh/devices-to-allocate",
                                                "volcano.sh/bind-phase", "volcano.sh/bind-time"};
    for (size_t i = 0; i < sizeof decision_keys / sizeof *decision_keys; i++)
        if (strcmp(key, decision_keys[i]) == 0)
            return true;
    if (strncmp(key, "volcano.sh/vgpu-", strlen("volcano.sh/vgpu-")) != 0)
        return false;
    for (size_t i = 0; i < sizeof author_keys / sizeof *author_keys; i++)
        if (strcmp(key, author_keys[i]) == 0)
            return false;
    return true;
}

/* Whether a pod's author may not write key: vgpu's reserved vgpu.io/ keys, Volcano's. */
static bool reserved_key(const char *key)
{
    return annot_key_reserved(key) || volcano_reserved(key);
}

/* The first vgpu.io/ annotation of pod that vgpu reserves (annot_key_reserved) and that
 * old (the object before an UPDATE, NULL on CREATE) does not carry with the same value;
 * NULL when none. vgpu writes those only through pods/binding, which no pod webhook sees,
 * so one arriving here was written by someone else. *removed: the key is old's and pod
 * no longer carries it (a removal is a change too: vgpu-scheduler charges a bound pod
 * from its own record, but the device plugin and the tools read the annotation). */
static const char *foreign_annotation(json_t *pod, json_t *old, bool *removed)
{
    json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    json_t *old_ann = json_object_get(json_object_get(old, "metadata"), "annotations");
    const char *key;
    json_t *v;
    *removed = false;
    json_object_foreach(ann, key, v)
    {
        if (!reserved_key(key))
            continue;
        json_t *was = json_object_get(old_ann, key);
        if (old == NULL || was == NULL || !json_equal(was, v))
            return key;
    }
    json_object_foreach(old_ann, key, v)
    {
        if (reserved_key(key) && json_object_get(ann, key) == NULL) {
            *removed = true;
            return key;
        }
    }
    return NULL;
}

/* Whether the review's request.userInfo.username is one of the trusted users (vgpu's own
 * service accounts). Only kube-apiserver's reviews carry a true userInfo; a made-up review
 * can claim anyone, but its answer changes nothing outside it (an UPDATE is applied only
 * by the API server that asked). */
static bool trusted_user(const struct sched_state *s, json_t *request)
{
    const char *user = sched_json_str(request, "userInfo", "username", NULL);
    if (user == NULL || user[0] == '\0')
        return false;
    size_t n = strlen(user);
    for (const char *p = s->opt.webhook_trusted_users; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len == n && strncmp(p, user, n) == 0)
            return true;
        p += len + (end != NULL ? 1 : 0);
    }
    return false;
}

/* ---- containers get only the GPUs they were given ------------------------------------ */

/* Variables NVIDIA's container runtime reads to choose the GPUs (and the MIG management
 * capabilities) it gives a container: on a GPU container the device plugin sets them. */
static const char *const device_env[] = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES",
                                         "NVIDIA_MIG_MONITOR_DEVICES"};

/* Whether a quantity is zero ("0", "0.0", "0Mi", ...): asking for none of a resource. */
static bool quantity_zero(json_t *v)
{
    const char *q = json_string_value(v);
    if (json_is_integer(v))
        return json_integer_value(v) == 0;
    if (q == NULL || *q != '0')
        return false;
    while (*q == '0' || *q == '.')
        q++;
    for (; *q != '\0'; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
            return false;
    return true;
}

/* Whether container c asks for a GPU: a nvidia.com/ or Volcano's volcano.sh/vgpu- resource
 * other than zero in its limits or requests, or a DRA claim (resources.claims), whose
 * driver's CDI spec decides its devices. */
static bool container_wants_gpu(json_t *c)
{
    json_t *res = json_object_get(c, "resources");
    static const char *const parts[] = {"limits", "requests"};
    for (int k = 0; k < 2; k++) {
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(res, parts[k]), key, v)
        {
            if ((strncmp(key, "nvidia.com/", strlen("nvidia.com/")) == 0 ||
                 strncmp(key, "volcano.sh/vgpu-", strlen("volcano.sh/vgpu-")) == 0) &&
                !quantity_zero(v))
                return true;
        }
    }
    return json_array_size(json_object_get(res, "claims")) > 0;
}

/* Appends to ops what containers' env needs under the rules above, or returns -EPERM with
 * msg for a GPU container that sets a device_env variable itself (kubelet puts a
 * container's own env after the device plugin's, and the runtime takes the last: the
 * author's value would replace the GPUs the device plugin gave). where: "containers" or
 * "initContainers". */
static int env_rules(const struct sched_state *s, json_t *pod, const char *where, json_t *ops,
                     char *msg, size_t size)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), where);
    size_t i;
    json_t *c;
    json_array_foreach(containers, i, c)
    {
        json_t *env = json_object_get(c, "env");
        const char *cname = sched_json_str(c, "name", NULL, NULL);
        if (container_wants_gpu(c)) {
            size_t j;
            json_t *e;
            json_array_foreach(env, j, e)
            {
                const char *name = sched_json_str(e, "name", NULL, NULL);
                for (size_t k = 0; name != NULL && k < sizeof device_env / sizeof *device_env; k++)
                    if (strcmp(name, device_env[k]) == 0) {
                        (void)vg_snprintf(msg, size,
                                          "vgpu: container %.63s asks for a GPU and sets %s in "
                                          "its env: the GPUs a container sees are the device "
                                          "plugin's to set; remove the variable",
                                          cname != NULL ? cname : "?", name);
                        return -EPERM;
                    }
            }
            continue;
        }
        if (!s->opt.overwrite_env)
            continue;
        char path[128];
        json_t *value = json_pack("{s:s, s:s}", "name", "NVIDIA_VISIBLE_DEVICES", "value", "void");
        bool found = false;
        size_t j;
        json_t *e;
        json_array_foreach(env, j, e)
        {
            const char *name = sched_json_str(e, "name", NULL, NULL);
            if (name == NULL || strcmp(name, "NVIDIA_VISIBLE_DEVICES") != 0)
                continue;
            /* Every entry of that name (valueFrom included) becomes the plain value. */
            (void)vg_snprintf(path, sizeof path, "/spec/%s/%zu/env/%zu", where, i, j);
            json_array_append_new(
                ops, json_pack("{s:s, s:s, s:O}", "op", "replace", "path", path, "value", value));
            found = true;
        }
        if (!found && json_is_array(env)) {
            /* An env entry wins over envFrom's keys of the same name. */
            (void)vg_snprintf(path, sizeof path, "/spec/%s/%zu/env/-", where, i);
            json_array_append_new(
                ops, json_pack("{s:s, s:s, s:O}", "op", "add", "path", path, "value", value));
        } else if (!found) {
            (void)vg_snprintf(path, sizeof path, "/spec/%s/%zu/env", where, i);
            json_array_append_new(
                ops, json_pack("{s:s, s:s, s:[O]}", "op", "add", "path", path, "value", value));
        }
        json_decref(value);
    }
    return 0;
}

/* patch (NULL: none yet) with env_ops appended; NULL when both are empty. */
static json_t *with_env(json_t *patch, json_t *env_ops)
{
    if (json_array_size(env_ops) == 0)
        return patch;
    if (patch == NULL)
        patch = json_array();
    json_array_extend(patch, env_ops);
    return patch;
}

char *sched_admit_refusal(const char *uid, const char *message)
{
    VG_AUTO_JSON json_t *refused = review(uid, false, message, NULL);
    return json_dumps(refused, JSON_COMPACT);
}

/* The DRA mode's answer for a pod with HAMi resources; *templates gets the templates to
 * create (none on a dry run). */
static json_t *admit_dra(struct sched_state *s, json_t *request, json_t *pod, const char *uid,
                         json_t *env_ops, json_t **templates)
{
    char msg[512], full[600];
    const char *sched_name = sched_json_str(pod, "spec", "schedulerName", NULL);
    if (sched_name != NULL && strcmp(sched_name, "default-scheduler") != 0 &&
        strcmp(sched_name, s->opt.scheduler_name) != 0)
        return review(uid, true, NULL, with_env(NULL, env_ops)); /* another scheduler's pod */
    if (sched_json_str(pod, "spec", "nodeName", NULL) != NULL)
        return review(uid, false,
                      "vgpu: the pod asks for GPU shares but already names spec.nodeName; "
                      "remove nodeName so that the scheduler can allocate its claims",
                      NULL);
    VG_AUTO_FREE struct sched_container_request *reqs = xcalloc(ANNOT_MAX_CONTAINERS, sizeof *reqs);
    struct vg_err perr = {0};
    int count = sched_pod_requests(&s->opt, pod, reqs, ANNOT_MAX_CONTAINERS, &perr);
    if (count < 0) {
        (void)vg_snprintf(full, sizeof full, "vgpu: %s", perr.msg);
        return review(uid, false, full, NULL);
    }
    for (int c = 0; c < count; c++)
        if (impossible(s, &reqs[c], msg, sizeof msg) != 0) {
            (void)vg_snprintf(full, sizeof full, "vgpu: %s", msg);
            return review(uid, false, full, NULL);
        }
    const char *ns = sched_json_str(request, "namespace", NULL, NULL);
    if (ns == NULL)
        ns = sched_json_str(pod, "metadata", "namespace", NULL);
    json_t *patch = json_array();
    VG_AUTO_JSON json_t *tmpls = json_array();
    if (sched_admit_dra_convert(&s->opt, pod, ns, patch, tmpls, msg, sizeof msg) < 0) {
        json_decref(patch);
        (void)vg_snprintf(full, sizeof full, "vgpu: %s", msg);
        return review(uid, false, full, NULL);
    }
    if (!json_is_true(json_object_get(request, "dryRun")) && json_array_size(tmpls) > 0)
        *templates = json_incref(tmpls);
    return review(uid, true, NULL, with_env(patch, env_ops));
}

int sched_admit(struct sched_state *s, const char *body, size_t len, char **out, struct vg_err *err)
{
    json_t *templates = NULL;
    int rc = sched_admit_with(s, body, len, out, &templates, err);
    json_decref(templates);
    return rc;
}

int sched_admit_with(struct sched_state *s, const char *body, size_t len, char **out,
                     json_t **templates, struct vg_err *err)
{
    *out = NULL;
    *templates = NULL;
    VG_AUTO_JSON json_t *root = sched_parse_body(body, len, err);
    if (root == NULL)
        return err->code;
    json_t *request = json_object_get(root, "request");
    const char *uid = sched_json_str(request, "uid", NULL, NULL);
    json_t *pod = json_object_get(request, "object");
    const char *op = sched_json_str(request, "operation", NULL, NULL);
    bool update = op != NULL && strcmp(op, "UPDATE") == 0;
    if (uid != NULL && op != NULL && !update && strcmp(op, "CREATE") != 0) {
        VG_AUTO_JSON json_t *allowed = review(uid, true, NULL, NULL);
        *out = json_dumps(allowed, JSON_COMPACT);
        return 0; /* DELETE, CONNECT: nothing to check */
    }
    if (uid == NULL || !json_is_object(pod))
        return vg_err_set(err, -EBADMSG,
                          "AdmissionReview: request.uid and request.object are "
                          "required");
    json_t *old = update ? json_object_get(request, "oldObject") : NULL;
    if (update && !json_is_object(old))
        return vg_err_set(err, -EBADMSG, "AdmissionReview: an UPDATE needs request.oldObject");
    bool removed = false;
    const char *foreign = foreign_annotation(pod, old, &removed);
    if (foreign != NULL && update && trusted_user(s, request))
        foreign = NULL; /* vgpu's own service accounts */
    if (foreign != NULL) {
        char msg[512];
        bool volcano = volcano_reserved(foreign);
        (void)vg_snprintf(msg, sizeof msg,
                          "vgpu: annotation %.100s is %s; a pod may not %s it (%s)", foreign,
                          volcano ? "part of Volcano's vGPU decision: only Volcano's scheduler "
                                    "and the device plugin write it"
                                  : "vgpu's own: only vgpu-scheduler writes it, through the "
                                    "pod's binding",
                          removed  ? "remove"
                          : update ? "add or change"
                                   : "carry",
                          removed ? "put it back as it was" : "remove it");
        VG_AUTO_JSON json_t *refused = review(uid, false, msg, NULL);
        *out = json_dumps(refused, JSON_COMPACT);
        return 0;
    }
    if (update) {
        /* spec.schedulerName and the containers' resources are immutable after create:
         * nothing to default on an update. */
        VG_AUTO_JSON json_t *allowed = review(uid, true, NULL, NULL);
        *out = json_dumps(allowed, JSON_COMPACT);
        return 0;
    }
    /* CREATE: a container's env is immutable afterwards. */
    VG_AUTO_JSON json_t *env_ops = json_array();
    char env_msg[512];
    if (env_rules(s, pod, "containers", env_ops, env_msg, sizeof env_msg) < 0 ||
        env_rules(s, pod, "initContainers", env_ops, env_msg, sizeof env_msg) < 0) {
        VG_AUTO_JSON json_t *refused = review(uid, false, env_msg, NULL);
        *out = json_dumps(refused, JSON_COMPACT);
        return 0;
    }
    if (s->opt.webhook_dra && sched_admit_dra_wanted(pod)) {
        VG_AUTO_JSON json_t *answer = admit_dra(s, request, pod, uid, env_ops, templates);
        *out = json_dumps(answer, JSON_COMPACT);
        return 0;
    }
    VG_AUTO_JSON json_t *answer = NULL;
    VG_AUTO_FREE struct sched_container_request *reqs = xcalloc(ANNOT_MAX_CONTAINERS, sizeof *reqs);
    struct vg_err perr = {0};
    char msg[512];
    int count = sched_pod_requests(&s->opt, pod, reqs, ANNOT_MAX_CONTAINERS, &perr);
    const char *sched_name = sched_json_str(pod, "spec", "schedulerName", NULL);
    if (count < 0) {
        (void)vg_snprintf(msg, sizeof msg, "vgpu: %s", perr.msg);
        answer = review(uid, false, msg, NULL);
    } else if (count == 0 || (sched_name != NULL && strcmp(sched_name, "default-scheduler") != 0 &&
                              strcmp(sched_name, s->opt.scheduler_name) != 0)) {
        answer = review(uid, true, NULL, with_env(NULL, env_ops));
    } else if (sched_json_str(pod, "spec", "nodeName", NULL) != NULL) {
        answer = review(uid, false,
                        "vgpu: the pod asks for GPU shares but already names spec.nodeName; "
                        "remove nodeName so that vgpu-scheduler can pick the GPUs",
                        NULL);
    } else {
        int bad = 0;
        for (int c = 0; c < count && bad == 0; c++)
            bad = impossible(s, &reqs[c], msg, sizeof msg);
        if (bad != 0) {
            char full[600];
            (void)vg_snprintf(full, sizeof full, "vgpu: %s", msg);
            answer = review(uid, false, full, NULL);
        } else {
            json_t *patch = json_array();
            json_array_append_new(patch,
                                  json_pack("{s:s, s:s, s:s}", "op", "add", "path",
                                            "/spec/schedulerName", "value", s->opt.scheduler_name));
            /* Default rule 1: memory or cores without nvidia.com/gpu get defaultGPUNum. */
            json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
            size_t i;
            json_t *c;
            json_array_foreach(containers, i, c)
            {
                json_t *limits = json_object_get(json_object_get(c, "resources"), "limits");
                if (!json_is_object(limits) || json_object_get(limits, "nvidia.com/gpu") != NULL)
                    continue;
                if (json_object_get(limits, "nvidia.com/gpumem") == NULL &&
                    json_object_get(limits, "nvidia.com/gpumem-percentage") == NULL &&
                    json_object_get(limits, "nvidia.com/gpucores") == NULL)
                    continue;
                char path[128];
                char value[32];
                (void)vg_snprintf(path, sizeof path,
                                  "/spec/containers/%zu/resources/limits/nvidia.com~1gpu", i);
                (void)vg_snprintf(value, sizeof value, "%lld",
                                  (long long)s->opt.defaults.default_gpu_num);
                json_array_append_new(
                    patch, json_pack("{s:s, s:s, s:s}", "op", "add", "path", path, "value", value));
            }
            answer = review(uid, true, NULL, with_env(patch, env_ops));
        }
    }
    *out = json_dumps(answer, JSON_COMPACT);
    return 0;
}
