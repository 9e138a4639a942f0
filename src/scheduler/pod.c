/* Pod-JSON decoding (pod.h): what a pod object asks of the scheduler, read once per pod
 * by the watches (state.c), the extender verbs (extender.c) and the webhook (webhook.c).
 * Depends on nothing else in the scheduler. */
#include "scheduler/pod.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "annot/annot.h"
#include "base/parse.h"
#include "base/str.h"
#include "scheduler/sched.h"

/* ---- JSON helpers ------------------------------------------------------------------- */

const char *sched_json_str(json_t *obj, const char *a, const char *b, const char *c)
{
    json_t *v = obj;
    const char *path[3] = {a, b, c};
    for (int i = 0; i < 3 && path[i] != NULL; i++) {
        if (!json_is_object(v))
            return NULL;
        v = json_object_get(v, path[i]);
    }
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int sched_pod_key(json_t *pod, char *buf, size_t size, struct vg_err *err)
{
    const char *name = sched_json_str(pod, "metadata", "name", NULL);
    const char *ns = sched_json_str(pod, "metadata", "namespace", NULL);
    if (name == NULL || name[0] == '\0')
        return vg_err_set(err, -EINVAL, "pod has no metadata.name");
    if (ns == NULL || ns[0] == '\0')
        ns = "default";
    /* What the API server allows, and all a binding can name: a promise for anything else
     * could never be bound and would only hold GPUs until it expires. */
    if (!annot_dns_subdomain(name))
        return vg_err_set(err, -EINVAL,
                          "pod metadata.name '%.64s' is not a DNS subdomain (RFC 1123)", name);
    if (!annot_dns_label(ns))
        return vg_err_set(err, -EINVAL,
                          "pod metadata.namespace '%.64s' is not a DNS label (RFC 1123)", ns);
    if (vg_snprintf(buf, size, "%s/%s", ns, name) < 0)
        return vg_err_set(err, -ENAMETOOLONG, "pod name too long");
    return 0;
}

/* ---- pod requests ------------------------------------------------------------------- */

/* A resource value: a JSON string (a Kubernetes quantity: "1", "4096", "4Gi") or a
 * non-negative integer; -1 if absent. Pod quantities are read here, and only here. */
static int resource_value(json_t *list, const char *name, bool memory, int64_t *out,
                          struct vg_err *err)
{
    *out = -1;
    json_t *v = json_is_object(list) ? json_object_get(list, name) : NULL;
    if (v == NULL)
        return 0;
    uint64_t n;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return vg_err_set(err, -EINVAL, "%s is negative", name);
        n = (uint64_t)json_integer_value(v);
    } else if (json_is_string(v)) {
        /* Kubernetes quantities (docs/protocol.md): memory in MiB, "4Gi" = 4096. */
        int rc = memory ? vg_parse_kube_mib(json_string_value(v), INT32_MAX, &n, err)
                        : vg_parse_kube_count(json_string_value(v), INT32_MAX, &n, err);
        if (rc < 0)
            return vg_err_wrap(err, "%s", name);
    } else {
        return vg_err_set(err, -EINVAL, "%s is neither a string nor a number", name);
    }
    if (n > INT32_MAX)
        return vg_err_set(err, -EINVAL, "%s %llu is out of range", name, (unsigned long long)n);
    *out = (int64_t)n;
    return 0;
}

/* "a, b,c" -> list entries; -EINVAL past PLACE_MAX_LIST or an entry too long. */
static int split_list(const char *text, const char *what, char *list, size_t entry_size,
                      uint8_t *count, struct vg_err *err)
{
    *count = 0;
    const char *p = text;
    while (*p != '\0') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        const char *end = p;
        while (*end != '\0' && *end != ',')
            end++;
        const char *last = end;
        while (last > p && last[-1] == ' ')
            last--;
        size_t n = (size_t)(last - p);
        if (*count >= PLACE_MAX_LIST)
            return vg_err_set(err, -EINVAL, "%s: more than %d entries", what, PLACE_MAX_LIST);
        if (n >= entry_size)
            return vg_err_set(err, -EINVAL, "%s: entry '%.20s...' too long", what, p);
        char *dst = list + (size_t)*count * entry_size;
        memcpy(dst, p, n);
        dst[n] = '\0';
        (*count)++;
        p = end;
    }
    return 0;
}

static const char *annotation(json_t *pod, const char *key)
{
    return sched_json_str(pod, "metadata", "annotations", key);
}

/* The list in the pod's annotation key, when it has one, into list / *count. */
static int annotation_list(json_t *pod, const char *key, char *list, size_t entry_size,
                           uint8_t *count, struct vg_err *err)
{
    const char *v = annotation(pod, key);
    return v != NULL ? split_list(v, key, list, entry_size, count, err) : 0;
}

int sched_pod_selection(json_t *pod, struct place_request *r, struct vg_err *err)
{
    int rc;
    if ((rc = annotation_list(pod, "nvidia.com/use-gputype", &r->type_include[0][0],
                              PLACE_MODEL_MAX, &r->type_include_count, err)) < 0 ||
        (rc = annotation_list(pod, "nvidia.com/nouse-gputype", &r->type_exclude[0][0],
                              PLACE_MODEL_MAX, &r->type_exclude_count, err)) < 0 ||
        (rc = annotation_list(pod, "nvidia.com/use-gpuuuid", &r->uuid_include[0][0], PLACE_NAME_MAX,
                              &r->uuid_include_count, err)) < 0 ||
        (rc = annotation_list(pod, "nvidia.com/nouse-gpuuuid", &r->uuid_exclude[0][0],
                              PLACE_NAME_MAX, &r->uuid_exclude_count, err)) < 0)
        return rc;
    const char *v = annotation(pod, "nvidia.com/numa-bind");
    if (v == NULL)
        return 0;
    if (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0)
        r->numa_bind = true;
    else if (strcasecmp(v, "false") == 0 || strcmp(v, "0") == 0)
        r->numa_bind = false;
    else
        return vg_err_set(err, -EINVAL, "nvidia.com/numa-bind: '%.20s' is not true or false", v);
    return 0;
}

/* A short value that can be echoed in a message as it is (letters, digits, '+-.'). */
static bool echoable(const char *t)
{
    size_t n = 0;
    for (; t[n] != '\0'; n++)
        if (!isalnum((unsigned char)t[n]) && t[n] != '-' && t[n] != '+' && t[n] != '.')
            return false;
    return n < 16;
}

int sched_container_priority(json_t *container, const char *name, int *prio, struct vg_err *err)
{
    *prio = -1;
    json_t *res = json_object_get(container, "resources");
    json_t *v = json_object_get(json_object_get(res, "limits"), "nvidia.com/priority");
    if (v == NULL)
        v = json_object_get(json_object_get(res, "requests"), "nvidia.com/priority");
    if (v == NULL)
        return 0;
    if (json_is_integer(v) && (json_integer_value(v) == 0 || json_integer_value(v) == 1)) {
        *prio = (int)json_integer_value(v);
        return 0;
    }
    const char *t = json_is_string(v) ? json_string_value(v) : NULL;
    if (t != NULL && (t[0] == '0' || t[0] == '1') && t[1] == '\0') {
        *prio = t[0] - '0';
        return 0;
    }
    char shown[24];
    if (json_is_integer(v))
        vg_snprintf(shown, sizeof shown, "%lld", (long long)json_integer_value(v));
    else if (t != NULL && echoable(t))
        vg_snprintf(shown, sizeof shown, "'%s'", t);
    else
        vg_snprintf(shown, sizeof shown, "a value");
    return vg_err_set(err, -EINVAL,
                      "container %s: nvidia.com/priority %s is not 0 (high) or 1 (low, the "
                      "default)",
                      name, shown);
}

int sched_pod_requests(const struct sched_options *o, json_t *pod,
                       struct sched_container_request *out, size_t max, struct vg_err *err)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    if (!json_is_array(containers))
        return vg_err_set(err, -EINVAL, "pod has no spec.containers");
    size_t count = 0, i;
    json_t *c;
    json_array_foreach(containers, i, c)
    {
        const char *name = sched_json_str(c, "name", NULL, NULL);
        if (name == NULL || name[0] == '\0')
            return vg_err_set(err, -EINVAL, "container %zu has no name", i);
        json_t *resources = json_object_get(c, "resources");
        json_t *limits = json_object_get(resources, "limits");
        json_t *requests = json_object_get(resources, "requests");
        struct place_hami_resources res;
        const char *keys[4] = {"nvidia.com/gpu", "nvidia.com/gpumem",
                               "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"};
        int64_t *vals[4] = {&res.gpu, &res.gpumem, &res.gpumem_percent, &res.gpucores};
        for (int k = 0; k < 4; k++) {
            /* Limits first, requests as HAMi's fallback. */
            int rc = resource_value(limits, keys[k], k == 1, vals[k], err);
            if (rc == 0 && *vals[k] < 0)
                rc = resource_value(requests, keys[k], k == 1, vals[k], err);
            if (rc < 0)
                return vg_err_wrap(err, "container %s", name);
        }
        if (res.gpucores > 100)
            return vg_err_set(err, -EINVAL,
                              "container %s: nvidia.com/gpucores %lld is over 100 (percent of "
                              "one GPU)",
                              name, (long long)res.gpucores);
        int prio;
        if (sched_container_priority(c, name, &prio, err) < 0)
            return -EINVAL;
        struct place_request r;
        memset(&r, 0, sizeof r);
        if (place_request_from_hami(&res, &o->defaults, &r, err) < 0)
            return vg_err_wrap(err, "container %s", name);
        if (r.gpu_count == 0)
            continue;
        if (count >= max)
            return vg_err_set(err, -EINVAL, "more than %zu containers ask for GPUs", max);
        /* The name goes into the decision, which the node refuses unless it is a label
         * given once. */
        if (!annot_dns_label(name))
            return vg_err_set(err, -EINVAL,
                              "container %zu: name '%.64s' is not a DNS label (RFC 1123)", i, name);
        for (size_t k = 0; k < count; k++)
            if (strcmp(out[k].name, name) == 0)
                return vg_err_set(err, -EINVAL, "container %s: the name is given twice", name);
        if (sched_pod_selection(pod, &r, err) < 0)
            return -EINVAL;
        if (vg_strlcpy(out[count].name, name, sizeof out[count].name) < 0)
            return vg_err_set(err, -EINVAL, "container name too long");
        out[count].request = r;
        out[count].priority = prio < 0 ? 1 : prio;
        out[count].priority_given = prio >= 0;
        count++;
    }
    return (int)count;
}

/* ---- policy annotations ------------------------------------------------------------- */

int sched_pod_policy_read(const struct sched_options *o, json_t *pod, struct sched_pod_policy *pp,
                          struct vg_err *err)
{
    pp->policy = o->policy;
    pp->order = o->gpu_order;
    const char *v = sched_json_str(pod, "metadata", "annotations", "hami.io/node-scheduler-policy");
    if (v != NULL) {
        if (strcmp(v, "binpack") == 0)
            pp->policy = PLACE_POLICY_BINPACK;
        else if (strcmp(v, "spread") == 0)
            pp->policy = PLACE_POLICY_SPREAD;
        else
            return vg_err_set(err, -EINVAL,
                              "hami.io/node-scheduler-policy: '%.30s' is not binpack or spread", v);
    }
    v = sched_json_str(pod, "metadata", "annotations", "vgpu.io/policy");
    if (v != NULL) {
        int p = place_policy_from_name(v);
        if (p < 0)
            return vg_err_set(err, -EINVAL,
                              "vgpu.io/policy: '%.30s' is not one of default, fgd, random, "
                              "dotprod, clustering, packing, bestfit, binpack, spread",
                              v);
        pp->policy = (enum place_policy)p;
    }
    v = sched_json_str(pod, "metadata", "annotations", "hami.io/gpu-scheduler-policy");
    if (v != NULL) {
        /* The first of a chain ("binpack,numa") picks the order; the rest are HAMi's
         * topology refinements, which the core does not model. */
        if (strncmp(v, "binpack", 7) == 0 && (v[7] == '\0' || v[7] == ','))
            pp->order = PLACE_GPU_BINPACK;
        else if (strncmp(v, "spread", 6) == 0 && (v[6] == '\0' || v[6] == ','))
            pp->order = PLACE_GPU_SPREAD;
        else if (strcmp(v, "topology-aware") != 0 && strcmp(v, "mutex") != 0 &&
                 strcmp(v, "numa") != 0)
            return vg_err_set(err, -EINVAL,
                              "hami.io/gpu-scheduler-policy: '%.30s' is not binpack or spread", v);
    }
    return 0;
}
