/* vgpu-scheduler's options: their defaults and the --config file (docs/scheduler.md). */
#include "scheduler/sched.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"

void sched_options_default(struct sched_options *o)
{
    memset(o, 0, sizeof *o);
    o->policy = PLACE_POLICY_BINPACK;
    o->gpu_order = PLACE_GPU_SPREAD;
    o->assume_ttl_ms = 30000;
    o->heartbeat_timeout_s = 0;
    o->defaults.default_memory = 0;
    o->defaults.default_cores = 0;
    o->defaults.default_gpu_num = 1;
    o->scheduler_name = "vgpu-scheduler";
    o->require_pending = false;
    o->max_assumed_per_namespace = SCHED_MAX_ASSUMED_PER_NAMESPACE;
    o->overwrite_env = true;
    (void)vg_strlcpy(o->webhook_trusted_users, SCHED_TRUSTED_USERS_DEFAULT,
                     sizeof o->webhook_trusted_users);
}

int sched_options_trusted_users(struct sched_options *o, const char *list, struct vg_err *err)
{
    /* Usernames hold no comma or whitespace (service accounts are
     * system:serviceaccount:NS:NAME); an empty list trusts nobody. */
    for (const char *c = list; *c != '\0'; c++)
        if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
            return vg_err_set(err, -EINVAL,
                              "trusted users: '%.64s' holds a space or a control character; "
                              "give usernames separated by commas",
                              list);
    if (vg_strlcpy(o->webhook_trusted_users, list, sizeof o->webhook_trusted_users) < 0)
        return vg_err_set(err, -EINVAL, "trusted users: longer than %zu bytes",
                          sizeof o->webhook_trusted_users - 1);
    return 0;
}

int sched_options_load_file(const char *file, struct sched_options *o, char **name_store,
                            struct vg_err *err)
{
    json_error_t jerr;
    VG_AUTO_JSON json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL)
        return vg_err_set(err, -EINVAL, "%s:%d: %s", file, jerr.line, jerr.text);
    if (!json_is_object(root))
        return vg_err_set(err, -EINVAL, "%s: not a JSON object of settings", file);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (strcmp(key, "policy") == 0 && json_is_string(v)) {
            int p = place_policy_from_name(json_string_value(v));
            if (p < 0)
                return vg_err_set(err, -EINVAL, "%s: policy: unsupported '%s'", file,
                                  json_string_value(v));
            o->policy = (enum place_policy)p;
        } else if (strcmp(key, "gpuPolicy") == 0 && json_is_string(v)) {
            if (strcmp(json_string_value(v), "binpack") == 0)
                o->gpu_order = PLACE_GPU_BINPACK;
            else if (strcmp(json_string_value(v), "spread") == 0)
                o->gpu_order = PLACE_GPU_SPREAD;
            else
                return vg_err_set(err, -EINVAL, "%s: gpuPolicy: not binpack or spread", file);
        } else if (strcmp(key, "assumeTTLSeconds") == 0 && json_is_integer(v) &&
                   json_integer_value(v) > 0 && json_integer_value(v) <= 3600) {
            o->assume_ttl_ms = (uint64_t)json_integer_value(v) * 1000u;
        } else if (strcmp(key, "heartbeatTimeoutSeconds") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0) {
            o->heartbeat_timeout_s = json_integer_value(v);
        } else if (strcmp(key, "defaultMemory") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0) {
            o->defaults.default_memory = json_integer_value(v);
        } else if (strcmp(key, "defaultCores") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= 100) {
            o->defaults.default_cores = json_integer_value(v);
        } else if (strcmp(key, "defaultGPUNum") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= PLACE_MAX_GPUS) {
            o->defaults.default_gpu_num = json_integer_value(v);
        } else if (strcmp(key, "maxAssumptionsPerNamespace") == 0 && json_is_integer(v) &&
                   json_integer_value(v) >= 0 && json_integer_value(v) <= 1000000) {
            o->max_assumed_per_namespace = (uint32_t)json_integer_value(v);
        } else if (strcmp(key, "webhookDRA") == 0 && json_is_boolean(v)) {
            o->webhook_dra = json_is_true(v);
        } else if (strcmp(key, "overwriteEnv") == 0 && json_is_boolean(v)) {
            o->overwrite_env = json_is_true(v);
        } else if (strcmp(key, "webhookTrustedUsers") == 0 && json_is_string(v)) {
            if (sched_options_trusted_users(o, json_string_value(v), err) < 0)
                return vg_err_wrap(err, "%s: webhookTrustedUsers", file);
        } else if (strcmp(key, "schedulerName") == 0 && json_is_string(v)) {
            *name_store = xstrdup(json_string_value(v));
            o->scheduler_name = *name_store;
        } else {
            return vg_err_set(err, -EINVAL, "%s: unknown key or bad value for \"%s\"", file, key);
        }
    }
    return 0;
}
