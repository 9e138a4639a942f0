/* Volcano's device configuration, as the device plugin reads it in Volcano mode.
 *
 * Volcano's scheduler and its node plugin both read ConfigMap volcano-vgpu-device-config
 * (key device-config.yaml) with gopkg.in/yaml.v2 into one Go struct (NvidiaConfig in
 * volcano-sh/volcano pkg/scheduler/api/devices/config/vgpu.go). yaml.v2 drops keys it does
 * not know; here every key of `nvidia:` is known by name and an unknown one is refused, so
 * a misspelt setting is never silently without effect. Which keys act on the node and
 * which only inform Volcano's scheduler is in docs/volcano.md. */
#include <errno.h>
#include <libfyaml.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/parse.h"
#include "base/str.h"
#include "dpconfig/dpconfig.h"
#include "dpconfig/internal.h"
#include "yaml/yaml.h"

void dpconfig_volcano_defaults(struct dpconfig_volcano *v)
{
    memset(v, 0, sizeof(*v));
    vg_strlcpy(v->count_name, "volcano.sh/vgpu-number", sizeof(v->count_name));
    vg_strlcpy(v->memory_name, "volcano.sh/vgpu-memory", sizeof(v->memory_name));
    vg_strlcpy(v->core_name, "volcano.sh/vgpu-cores", sizeof(v->core_name));
    vg_strlcpy(v->memory_percentage_name, "volcano.sh/vgpu-memory-percentage",
               sizeof(v->memory_percentage_name));
    v->default_gpu_num = 1;
    v->device_split_count = 10;
    v->device_memory_scaling = 1;
    v->device_core_scaling = 1;
    v->gpu_memory_factor = 1;
}

struct vload {
    const char *name;
    struct vg_err *err;
};

__attribute__((format(printf, 4, 5))) static int vfail(struct vload *ld, struct fy_node *key,
                                                       const char *path, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = dpconfig_key_vfail(ld->name, ld->err, dpconfig_node_line(key), path, -EINVAL, fmt, ap);
    va_end(ap);
    return rc;
}

/* A plain or quoted scalar's text; NULL for a mapping, a sequence or a null. */
static const char *scalar(struct fy_node *v)
{
    if (v == NULL || fy_node_get_type(v) != FYNT_SCALAR)
        return NULL;
    const char *s = fy_node_get_scalar0(v);
    if (s == NULL || (fy_node_get_style(v) == FYNS_PLAIN &&
                      (strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "") == 0)))
        return NULL;
    return s;
}

/* A Kubernetes extended resource name as Volcano's names are: <domain>/<name>, 1..63. */
static bool resource_name(const char *s)
{
    size_t n = strlen(s);
    const char *slash = strchr(s, '/');
    if (n == 0 || n > 63 || slash == NULL || slash == s || slash[1] == '\0' ||
        strchr(slash + 1, '/') != NULL)
        return false;
    for (const char *p = s; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '-' || *p == '_' || *p == '/'))
            return false;
    return true;
}

static int get_name(struct vload *ld, struct fy_node *k, struct fy_node *v, const char *path,
                    char *out, size_t size)
{
    const char *s = scalar(v);
    if (s == NULL)
        return vfail(ld, k, path, "expected a resource name");
    if (!resource_name(s))
        return vfail(ld, k, path, "'%s' is not a resource name (<domain>/<name>, at most 63)", s);
    vg_strlcpy(out, s, size);
    return 0;
}

static int get_bool(struct vload *ld, struct fy_node *k, struct fy_node *v, const char *path,
                    bool *out)
{
    const char *s = scalar(v);
    /* yaml.v2's booleans, plain scalars only. */
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on",   "On",   "ON",   "y",   "Y",   NULL};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off",   "Off",   "OFF",   "n",  "N",  NULL};
    if (s != NULL && fy_node_get_style(v) == FYNS_PLAIN) {
        for (int i = 0; yes[i]; i++)
            if (strcmp(s, yes[i]) == 0)
                return *out = true, 0;
        for (int i = 0; no[i]; i++)
            if (strcmp(s, no[i]) == 0)
                return *out = false, 0;
    }
    return vfail(ld, k, path, "expected true or false");
}

static int get_int(struct vload *ld, struct fy_node *k, struct fy_node *v, const char *path,
                   int64_t min, int64_t max, int64_t *out)
{
    const char *s = scalar(v);
    struct vg_err e = {0};
    if (s == NULL || fy_node_get_style(v) != FYNS_PLAIN)
        return vfail(ld, k, path, "expected an integer");
    if (vg_parse_i64(s, min, max, out, &e) < 0)
        return vfail(ld, k, path, "%s", e.msg);
    return 0;
}

static int get_float(struct vload *ld, struct fy_node *k, struct fy_node *v, const char *path,
                     double min, double max, double *out)
{
    const char *s = scalar(v);
    if (s == NULL || fy_node_get_style(v) != FYNS_PLAIN)
        return vfail(ld, k, path, "expected a number");
    char *end = NULL;
    errno = 0;
    double d = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(d) || d < min || d > max)
        return vfail(ld, k, path, "'%s' is not a number in [%g, %g]", s, min, max);
    *out = d;
    return 0;
}

static int nvidia_key(struct vload *ld, struct fy_node *k, struct fy_node *v,
                      struct dpconfig_volcano *o)
{
    const char *key = scalar(k);
    char path[96];
    vg_snprintf(path, sizeof path, "nvidia.%s", key ? key : "?");
    int64_t i;
    int rc;
    if (key == NULL)
        return vfail(ld, k, "nvidia", "a key must be a plain string");
    if (strcmp(key, "resourceCountName") == 0)
        return get_name(ld, k, v, path, o->count_name, sizeof o->count_name);
    if (strcmp(key, "resourceMemoryName") == 0)
        return get_name(ld, k, v, path, o->memory_name, sizeof o->memory_name);
    if (strcmp(key, "resourceCoreName") == 0)
        return get_name(ld, k, v, path, o->core_name, sizeof o->core_name);
    if (strcmp(key, "resourceMemoryPercentageName") == 0)
        return get_name(ld, k, v, path, o->memory_percentage_name,
                        sizeof o->memory_percentage_name);
    if (strcmp(key, "resourcePriorityName") == 0)
        return vfail(ld, k, path,
                     "HAMi-core's task priority has no equivalent under libvgpu; remove the key "
                     "(docs/volcano.md)");
    if (strcmp(key, "overwriteEnv") == 0)
        return get_bool(ld, k, v, path, &o->overwrite_env);
    if (strcmp(key, "defaultMemory") == 0) {
        if ((rc = get_int(ld, k, v, path, 0, INT32_MAX, &i)) < 0)
            return rc;
        if (i != 0)
            return vfail(ld, k, path,
                         "%lld: the plugin gives a container the memory of Volcano's decision "
                         "only; set 0 (Volcano's default)",
                         (long long)i);
        o->default_memory = i;
        return 0;
    }
    if (strcmp(key, "defaultCores") == 0)
        return get_int(ld, k, v, path, 0, 100, &o->default_cores);
    if (strcmp(key, "defaultGPUNum") == 0)
        return get_int(ld, k, v, path, 0, INT32_MAX, &o->default_gpu_num);
    if (strcmp(key, "deviceSplitCount") == 0) {
        if ((rc = get_int(ld, k, v, path, 1, 1024, &i)) < 0)
            return rc;
        o->device_split_count = (uint64_t)i;
        return 0;
    }
    if (strcmp(key, "deviceMemoryScaling") == 0)
        return get_float(ld, k, v, path, 0.01, 100, &o->device_memory_scaling);
    if (strcmp(key, "deviceCoreScaling") == 0)
        return get_float(ld, k, v, path, 0.01, 100, &o->device_core_scaling);
    if (strcmp(key, "disableCoreLimit") == 0)
        return get_bool(ld, k, v, path, &o->disable_core_limit);
    if (strcmp(key, "gpuMemoryFactor") == 0) {
        /* Volcano's built-in default leaves it 0, which its plugin reads as 1. */
        if ((rc = get_int(ld, k, v, path, 0, 1 << 20, &i)) < 0)
            return rc;
        o->gpu_memory_factor = i == 0 ? 1 : (uint64_t)i;
        return 0;
    }
    if (strcmp(key, "passDeviceSpecs") == 0) {
        o->pass_device_specs_set = true;
        return get_bool(ld, k, v, path, &o->pass_device_specs);
    }
    if (strcmp(key, "knownMigGeometries") == 0) {
        if (v != NULL && fy_node_get_type(v) == FYNT_SEQUENCE) {
            o->mig_geometries = (size_t)fy_node_sequence_item_count(v);
            return 0;
        }
        if (scalar(v) == NULL && (v == NULL || fy_node_get_type(v) == FYNT_SCALAR))
            return 0;
        return vfail(ld, k, path, "expected a list");
    }
    return vfail(ld, k, path,
                 "unknown key: not one of Volcano's `nvidia:` settings (docs/volcano.md)");
}

int dpconfig_volcano_load_buffer(const char *name, const char *text, size_t len,
                                 struct dpconfig_volcano *out, struct vg_err *err)
{
    struct vload ld = {name ? name : "(volcano config)", err};
    if (len > DPCONFIG_MAX_BYTES)
        return vg_err_set(err, -EFBIG, "%s: larger than %d bytes", ld.name, DPCONFIG_MAX_BYTES);
    struct dpconfig_volcano work;
    dpconfig_volcano_defaults(&work);
    if (len == 0) {
        *out = work; /* an empty file: Volcano's defaults */
        return 0;
    }
    VG_AUTO_YAML_DOC struct fy_document *doc = NULL;
    struct vg_err yerr = {0};
    if (vgpu_yaml_load(text, len, false, &doc, &yerr) < 0)
        return vg_err_set(err, -EINVAL, "%s:%s", ld.name, yerr.msg);
    struct fy_node *root = fy_document_root(doc);
    if (root == NULL || (fy_node_get_type(root) == FYNT_SCALAR && scalar(root) == NULL)) {
        *out = work;
        return 0;
    }
    if (fy_node_get_type(root) != FYNT_MAPPING)
        return vg_err_set(err, -EINVAL, "%s: expected a mapping with an `nvidia:` section",
                          ld.name);
    void *it = NULL;
    struct fy_node_pair *pair;
    while ((pair = fy_node_mapping_iterate(root, &it)) != NULL) {
        struct fy_node *k = fy_node_pair_key(pair), *v = fy_node_pair_value(pair);
        const char *key = scalar(k);
        if (key != NULL && strcmp(key, "nvidia") == 0) {
            if (scalar(v) == NULL && (v == NULL || fy_node_get_type(v) == FYNT_SCALAR))
                continue;
            if (fy_node_get_type(v) != FYNT_MAPPING)
                return vfail(&ld, k, "nvidia", "expected a mapping");
            void *jt = NULL;
            struct fy_node_pair *q;
            while ((q = fy_node_mapping_iterate(v, &jt)) != NULL) {
                int rc = nvidia_key(&ld, fy_node_pair_key(q), fy_node_pair_value(q), &work);
                if (rc < 0)
                    return rc;
            }
        } else if (key == NULL || strcmp(key, "vnpus") != 0) {
            /* vnpus: Ascend devices, another plugin's section of the same file. */
            return vfail(&ld, k, key ? key : "?",
                         "unknown section: Volcano's file has `nvidia:` (and `vnpus:`, "
                         "Ascend's)");
        }
    }
    *out = work;
    return 0;
}

int dpconfig_volcano_load_file(const char *path, struct dpconfig_volcano *out, struct vg_err *err)
{
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    int rc = vg_read_file(path, DPCONFIG_MAX_BYTES, &text, &len, err);
    if (rc < 0)
        return rc;
    return dpconfig_volcano_load_buffer(path, text, len, out, err);
}

void dpconfig_volcano_apply(struct dpconfig *cfg)
{
    const struct dpconfig_volcano *v = &cfg->volcano;
    cfg->vgpu.device_split_count = v->device_split_count;
    cfg->vgpu.device_memory_scaling = v->device_memory_scaling;
    cfg->vgpu.device_core_scaling = v->device_core_scaling;
    cfg->vgpu.disable_core_limit = v->disable_core_limit;
    cfg->vgpu.default_cores = (uint64_t)v->default_cores;
    if (v->pass_device_specs_set)
        cfg->flags.plugin.pass_device_specs = v->pass_device_specs;
}

void dpconfig_volcano_dump(const struct dpconfig_volcano *v, FILE *out)
{
    fprintf(out, "volcano.resourceCountName = %s\n", v->count_name);
    fprintf(out, "volcano.resourceMemoryName = %s\n", v->memory_name);
    fprintf(out, "volcano.resourceCoreName = %s\n", v->core_name);
    fprintf(out, "volcano.resourceMemoryPercentageName = %s\n", v->memory_percentage_name);
    fprintf(out, "volcano.overwriteEnv = %s\n", v->overwrite_env ? "true" : "false");
    fprintf(out, "volcano.defaultMemory = %lld\n", (long long)v->default_memory);
    fprintf(out, "volcano.defaultCores = %lld\n", (long long)v->default_cores);
    fprintf(out, "volcano.defaultGPUNum = %lld\n", (long long)v->default_gpu_num);
    fprintf(out, "volcano.deviceSplitCount = %llu\n", (unsigned long long)v->device_split_count);
    fprintf(out, "volcano.deviceMemoryScaling = %g\n", v->device_memory_scaling);
    fprintf(out, "volcano.deviceCoreScaling = %g\n", v->device_core_scaling);
    fprintf(out, "volcano.disableCoreLimit = %s\n", v->disable_core_limit ? "true" : "false");
    fprintf(out, "volcano.gpuMemoryFactor = %llu\n", (unsigned long long)v->gpu_memory_factor);
    fprintf(out, "volcano.passDeviceSpecs = %s\n",
            v->pass_device_specs_set ? (v->pass_device_specs ? "true" : "false") : "unset");
    fprintf(out, "volcano.knownMigGeometries = %zu entries\n", v->mig_geometries);
}
