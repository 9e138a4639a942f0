/* HAMi's MIG configuration (hami.h). */
#include "dpconfig/hami.h"

#include <errno.h>
#include <jansson.h>
#include <libfyaml.h>
#include <string.h>

#include "base/str.h"
#include "yaml/yaml.h"

/* `<g>g.<mem>gb`, optionally `+me`: g 1..8, mem 1..9999. */
static bool profile_name_ok(const char *s)
{
    size_t i = 0, n = strlen(s);
    if (n == 0 || n >= HAMI_PROFILE_MAX || s[i] < '1' || s[i] > '8')
        return false;
    i++;
    if (s[i++] != 'g' || s[i++] != '.')
        return false;
    size_t digits = 0;
    while (i < n && s[i] >= '0' && s[i] <= '9' && digits < 4) {
        i++;
        digits++;
    }
    if (digits == 0 || s[i - digits] == '0' || i + 2 > n || s[i] != 'g' || s[i + 1] != 'b')
        return false;
    i += 2;
    return i == n || strcmp(s + i, "+me") == 0;
}

int hami_node_mig(const char *text, size_t len, const char *node, bool *mig, struct vg_err *err)
{
    *mig = false;
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return vg_err_set(err, -EINVAL, "line %d: %s", jerr.line, jerr.text);
    int rc = 0;
    json_t *list = json_object_get(root, "nodeconfig");
    if (!json_is_object(root) || (list && !json_is_array(list))) {
        rc = vg_err_set(err, -EINVAL, "'nodeconfig' is not a list");
        goto out;
    }
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *mode = json_object_get(e, "operatingmode");
        if (!json_is_object(e) || !name || (mode && !json_is_string(mode))) {
            rc = vg_err_set(err, -EINVAL,
                            "nodeconfig[%zu]: needs a string 'name' and a string 'operatingmode'",
                            i);
            goto out;
        }
        const char *m = mode ? json_string_value(mode) : "hami-core";
        if (strcmp(m, "mig") != 0 && strcmp(m, "hami-core") != 0 && strcmp(m, "mps") != 0) {
            rc = vg_err_set(err, -EINVAL,
                            "nodeconfig[%zu] (%.64s): operatingmode '%.32s' is not one of "
                            "hami-core, mig, mps",
                            i, name, m);
            goto out;
        }
        if (strcmp(name, node) == 0)
            *mig = strcmp(m, "mig") == 0;
    }
out:
    json_decref(root);
    return rc;
}

/* A scalar's text, NUL-terminated, or NULL when n is not a scalar. */
static const char *scalar(struct fy_node *n)
{
    return n && fy_node_get_type(n) == FYNT_SCALAR ? fy_node_get_scalar0(n) : NULL;
}

static int add_models(struct fy_node *list, struct hami_mig_rule *r, const char *where,
                      struct vg_err *err)
{
    if (!list || fy_node_get_type(list) != FYNT_SEQUENCE)
        return vg_err_set(err, -EINVAL, "%s: 'models' is not a list", where);
    void *iter = NULL;
    struct fy_node *item;
    while ((item = fy_node_sequence_iterate(list, &iter)) != NULL) {
        const char *m = scalar(item);
        if (!m || !m[0] || strlen(m) >= HAMI_MODEL_MAX)
            return vg_err_set(err, -EINVAL, "%s: a model is not a name of 1..%d characters", where,
                              HAMI_MODEL_MAX - 1);
        if (r->model_count == HAMI_MAX_MODELS)
            return vg_err_set(err, -EINVAL, "%s: more than %d models", where, HAMI_MAX_MODELS);
        vg_strlcpy(r->models[r->model_count++], m, HAMI_MODEL_MAX);
    }
    if (r->model_count == 0)
        return vg_err_set(err, -EINVAL, "%s: no models", where);
    return 0;
}

static int add_profile(struct hami_mig_rule *r, const char *name, const char *where,
                       struct vg_err *err)
{
    if (!name || !profile_name_ok(name))
        return vg_err_set(err, -EINVAL, "%s: '%.32s' is not a MIG profile name (<g>g.<mem>gb)",
                          where, name ? name : "(not a string)");
    for (size_t k = 0; k < r->profile_count; k++)
        if (strcmp(r->profiles[k], name) == 0)
            return 0; /* geometries repeat names */
    if (r->profile_count == HAMI_MAX_PROFILES)
        return vg_err_set(err, -EINVAL, "%s: more than %d profiles", where, HAMI_MAX_PROFILES);
    vg_strlcpy(r->profiles[r->profile_count++], name, HAMI_PROFILE_MAX);
    return 0;
}

/* One geometry: a list of {name, core, memory, count}. */
static int add_geometry(struct fy_node *g, struct hami_mig_rule *r, const char *where,
                        struct vg_err *err)
{
    if (fy_node_get_type(g) != FYNT_SEQUENCE)
        return vg_err_set(err, -EINVAL, "%s: a geometry is not a list", where);
    void *iter = NULL;
    struct fy_node *slot;
    while ((slot = fy_node_sequence_iterate(g, &iter)) != NULL) {
        if (fy_node_get_type(slot) != FYNT_MAPPING)
            return vg_err_set(err, -EINVAL, "%s: a geometry entry is not {name, count, ...}",
                              where);
        int rc =
            add_profile(r, scalar(fy_node_mapping_lookup_by_string(slot, "name", 4)), where, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int hami_mig_parse(const char *text, size_t len, struct hami_mig *out, struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > HAMI_MAX_BYTES)
        return vg_err_set(err, -EFBIG, "larger than %d bytes", HAMI_MAX_BYTES);
    VG_AUTO_YAML_DOC struct fy_document *doc = NULL;
    int rc = vgpu_yaml_load(text, len, false, &doc, err);
    if (rc < 0)
        return rc;
    struct fy_node *root = fy_document_root(doc);
    if (!root)
        return 0;
    if (fy_node_get_type(root) != FYNT_MAPPING)
        return vg_err_set(err, -EINVAL, "not a mapping");
    struct fy_node *nv = fy_node_mapping_lookup_by_string(root, "nvidia", 6);
    if (!nv)
        return 0;
    if (fy_node_get_type(nv) != FYNT_MAPPING)
        return vg_err_set(err, -EINVAL, "'nvidia' is not a mapping");
    const char *key = "migProfileAllowlist";
    struct fy_node *list = fy_node_mapping_lookup_by_string(nv, key, strlen(key));
    if (!list) {
        key = "knownMigGeometries";
        list = fy_node_mapping_lookup_by_string(nv, key, strlen(key));
    }
    if (!list)
        return 0;
    if (fy_node_get_type(list) != FYNT_SEQUENCE)
        return vg_err_set(err, -EINVAL, "nvidia.%s is not a list", key);
    out->key = key;
    bool allowlist = key[0] == 'm';
    void *iter = NULL;
    struct fy_node *e;
    while ((e = fy_node_sequence_iterate(list, &iter)) != NULL) {
        char where[64];
        (void)vg_snprintf(where, sizeof where, "nvidia.%s[%zu]", key, out->rule_count);
        if (out->rule_count == HAMI_MAX_RULES)
            return vg_err_set(err, -EINVAL, "nvidia.%s: more than %d entries", key, HAMI_MAX_RULES);
        if (fy_node_get_type(e) != FYNT_MAPPING)
            return vg_err_set(err, -EINVAL, "%s is not a mapping", where);
        struct hami_mig_rule *r = &out->rules[out->rule_count];
        if ((rc = add_models(fy_node_mapping_lookup_by_string(e, "models", 6), r, where, err)) < 0)
            return rc;
        const char *field = allowlist ? "profiles" : "allowedGeometries";
        struct fy_node *items = fy_node_mapping_lookup_by_string(e, field, strlen(field));
        if (!items || fy_node_get_type(items) != FYNT_SEQUENCE)
            return vg_err_set(err, -EINVAL, "%s: '%s' is not a list", where, field);
        void *it = NULL;
        struct fy_node *item;
        while ((item = fy_node_sequence_iterate(items, &it)) != NULL) {
            rc = allowlist ? add_profile(r, scalar(item), where, err)
                           : add_geometry(item, r, where, err);
            if (rc < 0)
                return rc;
        }
        if (r->profile_count == 0)
            return vg_err_set(err, -EINVAL, "%s: no profiles", where);
        out->rule_count++;
    }
    return 0;
}

const struct hami_mig_rule *hami_mig_rule_for(const struct hami_mig *m, const char *model)
{
    for (size_t i = 0; i < m->rule_count; i++)
        for (size_t k = 0; k < m->rules[i].model_count; k++)
            if (strstr(model, m->rules[i].models[k]) != NULL)
                return &m->rules[i];
    return NULL;
}
