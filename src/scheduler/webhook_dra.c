/* The admission webhook's DRA mode (--webhook-dra, docs/dra.md "HAMi pod specs under
 * DRA"): a container that asks for GPUs through HAMi's extended resources gets a
 * ResourceClaim from a ResourceClaimTemplate of vgpu's DRA classes instead.
 *
 * For each such container (init containers too) the patch removes nvidia.com/gpu,
 * gpumem, gpumem-percentage and gpucores from its limits and requests (also where
 * nvidia.com/gpu is 0: the keys ask for nothing, and a DRA node has none to give), adds the claim
 * vgpu-<i> (vgpu-init-<i>) to spec.resourceClaims with resourceClaimTemplateName set to
 * the template of its shape, and names the claim in the container's resources.claims. The
 * templates themselves are returned to the daemon, which creates them in the pod's
 * namespace before it answers (daemon.c). Everything here is pure: no I/O.
 *
 * Selection annotations (nvidia.com/use-gputype, nouse-gputype, use-gpuuuid,
 * nouse-gpuuuid) become CEL selectors of the template's request. Their values come from
 * the pod: each entry is checked against a strict character set before it is put between
 * CEL quotes, so no pod text can end a string literal. */
#include "scheduler/internal.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"

#define DRA_DRIVER       "gpu.vgpu.io"
#define DRA_CLASS_WHOLE  "gpu.vgpu.io"
#define DRA_CLASS_SHARED "shared.gpu.vgpu.io"
#define DRA_ATTR         "device.attributes['" DRA_DRIVER "']"

static const char *const hami_keys[4] = {"nvidia.com/gpu", "nvidia.com/gpumem",
                                         "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"};
static const char *const hami_paths[4] = {"nvidia.com~1gpu", "nvidia.com~1gpumem",
                                          "nvidia.com~1gpumem-percentage", "nvidia.com~1gpucores"};

/* A GPU model name as NVML reports it ("NVIDIA A100-SXM4-80GB", "Tesla V100-PCIE-32GB"):
 * letters, digits, space, '-', '_', '.'. A UUID: letters, digits, '-'. Nothing that can
 * close or escape a CEL string literal. */
static bool selector_value_ok(const char *v, bool uuid)
{
    if (v[0] == '\0')
        return false;
    for (const char *p = v; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (isascii(c) && isalnum(c))
            continue;
        if (c == '-' || (!uuid && (c == ' ' || c == '_' || c == '.')))
            continue;
        return false;
    }
    return true;
}

static void lower_ascii(char *dst, const char *src, size_t size)
{
    size_t i = 0;
    for (; src[i] != '\0' && i + 1 < size; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[i] = '\0';
}

/* One selector (an expression over the list) or none; -EINVAL with msg for a bad entry. */
static int list_selector(json_t *selectors, const char *annotation, bool uuid, bool exclude,
                         const char *list, size_t entry_size, unsigned count, char *msg,
                         size_t size)
{
    if (count == 0)
        return 0;
    /* At most PLACE_MAX_LIST entries of at most PLACE_NAME_MAX bytes each. */
    char expr[PLACE_MAX_LIST * (PLACE_NAME_MAX + 96) + 8];
    size_t n = 0;
    int w = vg_snprintf(expr, sizeof expr, "%s", exclude ? "!(" : "");
    for (unsigned i = 0; i < count && w >= 0; i++) {
        n += (size_t)w;
        const char *v = list + (size_t)i * entry_size;
        if (!selector_value_ok(v, uuid)) {
            (void)vg_snprintf(msg, size, "%s: '%.64s' is not a GPU %s (allowed: letters, digits%s)",
                              annotation, v, uuid ? "UUID" : "model name",
                              uuid ? ", '-'" : ", space, '-', '_', '.'");
            return -EINVAL;
        }
        char value[PLACE_NAME_MAX];
        if (uuid) {
            (void)vg_strlcpy(value, v, sizeof value);
            w = vg_snprintf(expr + n, sizeof expr - n, "%s" DRA_ATTR ".uuid == '%s'",
                            i > 0 ? " || " : "", value);
        } else {
            /* HAMi matches types case-insensitively, as a substring of the model name. */
            lower_ascii(value, v, sizeof value);
            w = vg_snprintf(expr + n, sizeof expr - n,
                            "%s" DRA_ATTR ".productName.lowerAscii().contains('%s')",
                            i > 0 ? " || " : "", value);
        }
    }
    if (w >= 0) {
        n += (size_t)w;
        w = vg_snprintf(expr + n, sizeof expr - n, "%s", exclude ? ")" : "");
    }
    if (w < 0) {
        (void)vg_snprintf(msg, size, "%s: the list is too long", annotation);
        return -EINVAL;
    }
    json_array_append_new(selectors, json_pack("{s:{s:s}}", "cel", "expression", expr));
    return 0;
}

/* The CEL selectors of r's GPU lists, in a fixed order; -EINVAL with msg. */
static int selectors_of(const struct place_request *r, json_t *selectors, char *msg, size_t size)
{
    int rc;
    if ((rc = list_selector(selectors, "nvidia.com/use-gputype", false, false,
                            &r->type_include[0][0], PLACE_MODEL_MAX, r->type_include_count, msg,
                            size)) < 0 ||
        (rc = list_selector(selectors, "nvidia.com/nouse-gputype", false, true,
                            &r->type_exclude[0][0], PLACE_MODEL_MAX, r->type_exclude_count, msg,
                            size)) < 0 ||
        (rc =
             list_selector(selectors, "nvidia.com/use-gpuuuid", true, false, &r->uuid_include[0][0],
                           PLACE_NAME_MAX, r->uuid_include_count, msg, size)) < 0 ||
        (rc = list_selector(selectors, "nvidia.com/nouse-gpuuuid", true, true,
                            &r->uuid_exclude[0][0], PLACE_NAME_MAX, r->uuid_exclude_count, msg,
                            size)) < 0)
        return rc;
    return 0;
}

static uint32_t fnv1a(const char *s, size_t n, uint32_t h)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

/* MiB as the canonical quantity kube-apiserver writes back ("4000Mi", "4Gi", "1Ti"), so
 * a template read back compares equal to the one written. */
static void memory_quantity(uint64_t mib, char *buf, size_t size)
{
    if (mib % (1024u * 1024u) == 0)
        (void)vg_snprintf(buf, size, "%lluTi", (unsigned long long)(mib / (1024u * 1024u)));
    else if (mib % 1024u == 0)
        (void)vg_snprintf(buf, size, "%lluGi", (unsigned long long)(mib / 1024u));
    else
        (void)vg_snprintf(buf, size, "%lluMi", (unsigned long long)mib);
}

/* The template for one container's request r in namespace ns, and its name. */
static json_t *template_for(const struct place_request *r, const char *ns, const char *container,
                            char *name, size_t name_size, char *msg, size_t size)
{
    if (r->gpu_mem_pct != 0 && r->gpu_mem_pct != 100) {
        (void)vg_snprintf(msg, size,
                          "container %s: nvidia.com/gpumem-percentage %u cannot be a DRA claim: "
                          "a claim asks for an amount of memory, not a fraction of a GPU it "
                          "does not know yet; give nvidia.com/gpumem in MiB instead",
                          container, r->gpu_mem_pct);
        return NULL;
    }
    uint64_t mem = r->gpu_mem_mib; /* 0: all of the GPU's memory */
    unsigned cores = r->gpu_milli / 10;
    bool whole = mem == 0 && (cores == 0 || cores == 100);
    VG_AUTO_JSON json_t *selectors = json_array();
    if (selectors_of(r, selectors, msg, size) < 0)
        return NULL;
    json_t *exactly =
        json_pack("{s:s, s:s, s:I}", "deviceClassName", whole ? DRA_CLASS_WHOLE : DRA_CLASS_SHARED,
                  "allocationMode", "ExactCount", "count", (json_int_t)r->gpu_count);
    char mem_part[32] = "", cores_part[16] = "", sel_part[16] = "";
    if (!whole) {
        json_t *caps = json_object();
        if (mem > 0) {
            char q[32];
            memory_quantity(mem, q, sizeof q);
            json_object_set_new(caps, "memory", json_string(q));
            (void)vg_snprintf(mem_part, sizeof mem_part, "-%llumi", (unsigned long long)mem);
        }
        if (cores > 0) {
            char q[16];
            (void)vg_snprintf(q, sizeof q, "%u", cores);
            json_object_set_new(caps, "cores", json_string(q));
            (void)vg_snprintf(cores_part, sizeof cores_part, "-%uc", cores);
        }
        json_object_set_new(exactly, "capacity", json_pack("{s:o}", "requests", caps));
    }
    if (json_array_size(selectors) > 0) {
        uint32_t h = 2166136261u;
        size_t i;
        json_t *sel;
        json_array_foreach(selectors, i, sel)
        {
            const char *e = sched_json_str(sel, "cel", "expression", NULL);
            h = fnv1a(e, strlen(e) + 1, h);
        }
        (void)vg_snprintf(sel_part, sizeof sel_part, "-%08x", h);
        json_object_set(exactly, "selectors", selectors);
    }
    (void)vg_snprintf(name, name_size, "vgpu-%u%s%s%s%s", r->gpu_count, whole ? "-whole" : "",
                      mem_part, cores_part, sel_part);
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}}, s:{s:{s:{s:[{s:s, s:o}]}}}}", "apiVersion",
                     "resource.k8s.io/v1", "kind", "ResourceClaimTemplate", "metadata", "name",
                     name, "namespace", ns, "labels", "app.kubernetes.io/managed-by",
                     "vgpu-scheduler", "spec", "spec", "devices", "requests", "name", "gpu",
                     "exactly", exactly);
}

static bool has_hami_key(json_t *resources)
{
    for (int k = 0; k < 4; k++)
        if (json_object_get(json_object_get(resources, "limits"), hami_keys[k]) != NULL ||
            json_object_get(json_object_get(resources, "requests"), hami_keys[k]) != NULL)
            return true;
    return false;
}

/* A Kubernetes namespace name: a DNS label. */
static bool dns_label(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '-'))
            return false;
    return true;
}

static bool claim_name_taken(json_t *claims, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(claims, i, c)
    {
        const char *n = sched_json_str(c, "name", NULL, NULL);
        if (n != NULL && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

/* Converts the containers of one list ("containers" or "initContainers"). */
static int convert_list(const struct sched_options *o, json_t *pod, const char *list,
                        const char *ns, json_t *patch, json_t *templates, bool *claims_made,
                        char *msg, size_t size)
{
    json_t *spec = json_object_get(pod, "spec");
    json_t *containers = json_object_get(spec, list);
    if (!json_is_array(containers) || json_array_size(containers) == 0)
        return 0;
    /* sched_pod_requests reads spec.containers: give it this list under that name. */
    VG_AUTO_JSON json_t *view = json_pack("{s:{s:O}}", "spec", "containers", containers);
    json_t *meta = json_object_get(pod, "metadata");
    if (json_is_object(meta))
        json_object_set(view, "metadata", meta);
    VG_AUTO_FREE struct sched_container_request *reqs = xcalloc(ANNOT_MAX_CONTAINERS, sizeof *reqs);
    struct vg_err perr = {0};
    int count = sched_pod_requests(o, view, reqs, ANNOT_MAX_CONTAINERS, &perr);
    if (count < 0) {
        (void)vg_snprintf(msg, size, "%s", perr.msg);
        return -EINVAL;
    }
    json_t *claims = json_object_get(spec, "resourceClaims");
    bool is_init = strcmp(list, "initContainers") == 0;
    int converted = 0;
    size_t i;
    json_t *c;
    json_array_foreach(containers, i, c)
    {
        json_t *resources = json_object_get(c, "resources");
        if (!has_hami_key(resources))
            continue;
        /* Its request, when it asks for a GPU; none for nvidia.com/gpu: 0, whose HAMi keys
         * are removed all the same (a DRA node has no such resources to give). */
        const char *cname = sched_json_str(c, "name", NULL, NULL);
        const struct sched_container_request *req = NULL;
        for (int k = 0; k < count && req == NULL; k++)
            if (cname != NULL && strcmp(cname, reqs[k].name) == 0)
                req = &reqs[k];
        char base[64];
        (void)vg_snprintf(base, sizeof base, "/spec/%s/%zu/resources", list, i);
        char path[160];
        char tname[128];
        char claim[64];
        VG_AUTO_JSON json_t *tmpl = NULL;
        if (req != NULL) {
            tmpl = template_for(&req->request, ns, req->name, tname, sizeof tname, msg, size);
            if (tmpl == NULL)
                return -EINVAL;
            (void)vg_snprintf(claim, sizeof claim, "vgpu-%s%zu", is_init ? "init-" : "", i);
            if (claim_name_taken(claims, claim)) {
                (void)vg_snprintf(msg, size,
                                  "the pod already has a resource claim named %s, the name the "
                                  "DRA mode gives the claim of container %s; rename it",
                                  claim, req->name);
                return -EINVAL;
            }
        }
        for (int key = 0; key < 4; key++) {
            static const char *const sections[2] = {"limits", "requests"};
            for (int sct = 0; sct < 2; sct++) {
                if (json_object_get(json_object_get(resources, sections[sct]), hami_keys[key]) ==
                    NULL)
                    continue;
                (void)vg_snprintf(path, sizeof path, "%s/%s/%s", base, sections[sct],
                                  hami_paths[key]);
                json_array_append_new(patch, json_pack("{s:s, s:s}", "op", "remove", "path", path));
            }
        }
        if (req == NULL)
            continue;
        if (json_is_array(json_object_get(resources, "claims"))) {
            (void)vg_snprintf(path, sizeof path, "%s/claims/-", base);
            json_array_append_new(patch, json_pack("{s:s, s:s, s:{s:s}}", "op", "add", "path", path,
                                                   "value", "name", claim));
        } else {
            (void)vg_snprintf(path, sizeof path, "%s/claims", base);
            json_array_append_new(patch, json_pack("{s:s, s:s, s:[{s:s}]}", "op", "add", "path",
                                                   path, "value", "name", claim));
        }
        json_t *entry = json_pack("{s:s, s:s}", "name", claim, "resourceClaimTemplateName", tname);
        if (json_is_array(claims) || *claims_made) {
            json_array_append_new(patch, json_pack("{s:s, s:s, s:o}", "op", "add", "path",
                                                   "/spec/resourceClaims/-", "value", entry));
        } else {
            json_array_append_new(patch, json_pack("{s:s, s:s, s:[o]}", "op", "add", "path",
                                                   "/spec/resourceClaims", "value", entry));
            *claims_made = true;
        }
        bool dup = false;
        size_t t;
        json_t *have;
        json_array_foreach(templates, t, have)
        {
            dup = dup || strcmp(sched_json_str(have, "metadata", "name", NULL), tname) == 0;
        }
        if (!dup)
            json_array_append(templates, tmpl);
        converted++;
    }
    return converted;
}

int sched_admit_dra_convert(const struct sched_options *o, json_t *pod, const char *ns,
                            json_t *patch, json_t *templates, char *msg, size_t size)
{
    if (ns == NULL || ns[0] == '\0')
        ns = "default";
    if (!dns_label(ns)) {
        (void)vg_snprintf(msg, size, "namespace '%.64s' is not a DNS label", ns);
        return -EINVAL;
    }
    bool claims_made = false;
    int a = convert_list(o, pod, "initContainers", ns, patch, templates, &claims_made, msg, size);
    if (a < 0)
        return a;
    int b = convert_list(o, pod, "containers", ns, patch, templates, &claims_made, msg, size);
    if (b < 0)
        return b;
    return a + b;
}

bool sched_admit_dra_wanted(json_t *pod)
{
    static const char *const lists[2] = {"containers", "initContainers"};
    for (int l = 0; l < 2; l++) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(json_object_get(pod, "spec"), lists[l]), i, c)
        {
            if (has_hami_key(json_object_get(c, "resources")))
                return true;
        }
    }
    return false;
}

bool sched_dra_template_same(json_t *want, json_t *have)
{
    json_t *a = json_object_get(want, "spec"), *b = json_object_get(have, "spec");
    return a != NULL && b != NULL && json_equal(a, b);
}
