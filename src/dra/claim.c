/* A ResourceClaim's allocation for this driver (resource.k8s.io/v1): metadata and
 * status.allocation.devices.results[]. Everything that later names a path, a CDI device or
 * an environment value is checked here against Kubernetes' own name rules. */
#include <errno.h>
#include <string.h>

#include "base/auto_json.h"
#include "base/parse.h"
#include "base/str.h"
#include "dra/dra.h"

static const char *str_field(json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

int dra_parse_bytes_mib(const char *s, uint64_t *mib, struct vg_err *err)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"Ki", 1ull << 10},      {"Mi", 1ull << 20},         {"Gi", 1ull << 30},
        {"Ti", 1ull << 40},      {"Pi", 1ull << 50},         {"Ei", 1ull << 60},
        {"k", 1000ull},          {"M", 1000000ull},          {"G", 1000000000ull},
        {"T", 1000000000000ull}, {"P", 1000000000000000ull}, {"E", 1000000000000000000ull},
    };
    size_t len = strlen(s), digits = 0;
    while (digits < len && s[digits] >= '0' && s[digits] <= '9')
        digits++;
    if (digits == 0 || digits > 20)
        return vg_err_set(err, -EINVAL, "'%.32s' is not a whole quantity of bytes", s);
    uint64_t mult = 1;
    if (digits < len) {
        bool found = false;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && !found; i++)
            if (strcmp(s + digits, units[i].suffix) == 0) {
                mult = units[i].mult;
                found = true;
            }
        if (!found)
            return vg_err_set(err, -EINVAL, "'%.32s' is not a whole quantity of bytes", s);
    }
    char num[24];
    memcpy(num, s, digits);
    num[digits] = '\0';
    uint64_t n;
    if (vg_parse_u64(num, 0, UINT64_MAX, &n, err) < 0)
        return vg_err_wrap(err, "quantity '%.32s'", s);
    if (n != 0 && mult > UINT64_MAX / n)
        return vg_err_set(err, -ERANGE, "quantity '%.32s' is too large", s);
    uint64_t bytes = n * mult;
    *mib = bytes / (1ull << 20) + (bytes % (1ull << 20) != 0 ? 1u : 0u);
    return 0;
}

/* A "<label>" or "<label>/<label>" request name. */
static bool request_name(const char *s)
{
    char part[DRA_REQUEST_MAX];
    if (vg_strlcpy(part, s, sizeof(part)) < 0)
        return false;
    char *slash = strchr(part, '/');
    if (slash) {
        *slash = '\0';
        if (!annot_dns_label(slash + 1))
            return false;
    }
    return annot_dns_label(part);
}

/* A pool name: DNS subdomains separated by '/'. */
static bool pool_name(const char *s)
{
    char copy[ANNOT_NAME_MAX];
    if (vg_strlcpy(copy, s, sizeof(copy)) < 0)
        return false;
    char *part = copy;
    for (;;) {
        char *slash = strchr(part, '/');
        if (slash)
            *slash = '\0';
        if (!annot_dns_subdomain(part))
            return false;
        if (!slash)
            return true;
        part = slash + 1;
    }
}

static int decode_capacity(json_t *cap, struct dra_result *r, unsigned index, struct vg_err *err)
{
    if (cap == NULL || json_is_null(cap))
        return 0;
    if (!json_is_object(cap))
        return vg_err_set(err, -EINVAL, "results[%u].consumedCapacity is not an object", index);
    const char *key;
    json_t *value;
    json_object_foreach(cap, key, value)
    {
        const char *q = json_string_value(value);
        if (q == NULL)
            return vg_err_set(err, -EINVAL, "results[%u].consumedCapacity.%.64s is not a string",
                              index, key);
        if (strcmp(key, "memory") == 0) {
            if (dra_parse_bytes_mib(q, &r->memory_mib, err) < 0)
                return vg_err_wrap(err, "results[%u].consumedCapacity.memory", index);
            r->has_memory = true;
        } else if (strcmp(key, "cores") == 0) {
            uint64_t cores;
            if (vg_parse_u64(q, 0, 100, &cores, err) < 0)
                return vg_err_wrap(err, "results[%u].consumedCapacity.cores (a percentage)", index);
            r->cores = (unsigned)cores;
            r->has_cores = true;
        }
        /* other capacities are not vgpu's to enforce */
    }
    return 0;
}

/* status.allocation.devices.config[] ({source, requests, opaque: {driver, parameters}}):
 * vgpu takes no opaque parameters (a share comes from consumedCapacity), so one for this
 * driver is refused rather than silently ignored; others' are skipped. */
static int decode_config(json_t *config, const char *driver, struct vg_err *err)
{
    if (config == NULL || json_is_null(config))
        return 0;
    if (!json_is_array(config))
        return vg_err_set(err, -EINVAL, "status.allocation.devices.config is not a list");
    size_t i;
    json_t *item;
    json_array_foreach(config, i, item)
    {
        if (!json_is_object(item))
            return vg_err_set(err, -EINVAL, "config[%zu] is not an object", i);
        json_t *opaque = json_object_get(item, "opaque");
        if (opaque == NULL || json_is_null(opaque))
            continue; /* no opaque parameters: nothing of any driver's */
        const char *drv = json_is_object(opaque) ? str_field(opaque, "driver") : NULL;
        if (drv == NULL)
            return vg_err_set(err, -EINVAL, "config[%zu].opaque.driver missing", i);
        if (strcmp(drv, driver) == 0)
            return vg_err_set(err, -EINVAL,
                              "config[%zu]: opaque parameters for %s are not supported (a share "
                              "is set by the request's capacity)",
                              i, driver);
    }
    return 0;
}

int dra_claim_decode(json_t *claim, const char *driver, struct dra_claim *out, struct vg_err *err)
{
    memset(out, 0, sizeof(*out));
    json_t *meta = json_object_get(claim, "metadata");
    const char *uid = str_field(meta, "uid"), *ns = str_field(meta, "namespace"),
               *name = str_field(meta, "name");
    if (!uid || !annot_pod_uid(uid) || vg_strlcpy(out->uid, uid, sizeof(out->uid)) < 0)
        return vg_err_set(err, -EINVAL, "claim: metadata.uid missing or malformed");
    if (!ns || !annot_dns_label(ns) || vg_strlcpy(out->ns, ns, sizeof(out->ns)) < 0)
        return vg_err_set(err, -EINVAL, "claim: metadata.namespace missing or malformed");
    if (!name || !annot_dns_subdomain(name) || vg_strlcpy(out->name, name, sizeof(out->name)) < 0)
        return vg_err_set(err, -EINVAL, "claim: metadata.name missing or malformed");
    json_t *alloc = json_object_get(json_object_get(claim, "status"), "allocation");
    if (alloc == NULL || json_is_null(alloc))
        return vg_err_set(err, -ENODATA, "claim %s/%s is not allocated", ns, name);
    json_t *results = json_object_get(json_object_get(alloc, "devices"), "results");
    if (results == NULL || json_is_null(results))
        return 0;
    if (!json_is_array(results))
        return vg_err_set(err, -EINVAL, "status.allocation.devices.results is not a list");
    size_t i;
    json_t *item;
    json_array_foreach(results, i, item)
    {
        unsigned idx = (unsigned)i;
        if (!json_is_object(item))
            return vg_err_set(err, -EINVAL, "results[%u] is not an object", idx);
        const char *drv = str_field(item, "driver");
        if (drv == NULL)
            return vg_err_set(err, -EINVAL, "results[%u].driver missing", idx);
        if (strcmp(drv, driver) != 0)
            continue;
        if (out->count == DRA_MAX_RESULTS)
            return vg_err_set(err, -E2BIG, "more than %d devices of driver %s in one claim",
                              DRA_MAX_RESULTS, driver);
        struct dra_result *r = &out->results[out->count];
        const char *request = str_field(item, "request"), *pool = str_field(item, "pool"),
                   *device = str_field(item, "device"), *share = str_field(item, "shareID");
        if (!request || !request_name(request) ||
            vg_strlcpy(r->request, request, sizeof(r->request)) < 0)
            return vg_err_set(err, -EINVAL, "results[%u].request missing or malformed", idx);
        if (!pool || !pool_name(pool) || vg_strlcpy(r->pool, pool, sizeof(r->pool)) < 0)
            return vg_err_set(err, -EINVAL, "results[%u].pool missing or malformed", idx);
        if (!device || !annot_dns_label(device) ||
            vg_strlcpy(r->device, device, sizeof(r->device)) < 0)
            return vg_err_set(err, -EINVAL, "results[%u].device missing or malformed", idx);
        if (share &&
            (!annot_pod_uid(share) || vg_strlcpy(r->share_id, share, sizeof(r->share_id)) < 0))
            return vg_err_set(err, -EINVAL, "results[%u].shareID malformed", idx);
        if (decode_capacity(json_object_get(item, "consumedCapacity"), r, idx, err) < 0)
            return err->code;
        out->count++;
    }
    return decode_config(json_object_get(json_object_get(alloc, "devices"), "config"), driver, err);
}

int dra_claim_decode_text(const char *text, size_t len, const char *driver, struct dra_claim *out,
                          struct vg_err *err)
{
    if (len > DRA_CLAIM_MAX_BYTES)
        return vg_err_set(err, -EMSGSIZE, "claim larger than %u bytes", DRA_CLAIM_MAX_BYTES);
    json_error_t jerr;
    VG_AUTO_JSON json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return vg_err_set(err, -EINVAL, "claim is not JSON: %s", jerr.text);
    if (!json_is_object(root))
        return vg_err_set(err, -EINVAL, "claim is not a JSON object");
    return dra_claim_decode(root, driver, out, err);
}
