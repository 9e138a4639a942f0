/* libvgpu configuration: one key table drives the environment parser, the limits-file
 * parser and the user guide's table (docs/libvgpu.md). See config.h for the rules. */
#define _GNU_SOURCE
#include "libvgpu/config.h"

#include <errno.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "base/auto.h"
#include "base/buf.h"
#include "base/log.h"
#include "base/parse.h"
#include "base/str.h"

const struct vgpu_key vgpu_config_keys[] = {
    {"CUDA_DEVICE_MEMORY_LIMIT", VGPU_KEY_BYTES, true, true, "none",
     "memory limit of every visible GPU (bytes, or k/m/g binary suffix); 0 = none; "
     "_<n> sets it for the n-th visible GPU"},
    {"CUDA_DEVICE_SM_LIMIT", VGPU_KEY_PERCENT, true, true, "none",
     "compute share in percent, 1..100; 0 = none; _<n> for the n-th visible GPU"},
    {"CUDA_DEVICE_MEMORY_SHARED_CACHE", VGPU_KEY_PATH, false, true, VGPU_DEFAULT_REGION_PATH,
     "absolute path of the container's shared region (created if absent)"},
    {"VGPU_CONTEXT_MIB", VGPU_KEY_MIB, false, true, "256",
     "device memory charged per CUDA context (MiB), 0..65536"},
    {"GPU_CORE_UTILIZATION_POLICY", VGPU_KEY_POLICY, false, true, "default",
     "HAMi's policy: default or force (the share is enforced as VGPU_COMPUTE_MODE says), "
     "disable (no compute limit); case-insensitive"},
    {"VGPU_COMPUTE_MODE", VGPU_KEY_MODE, false, true, "hard",
     "hard (never above the share, even alone), burst (may use idle GPU time up to "
     "VGPU_COMPUTE_BURST_LIMIT, handed back within ~100 ms) or disable"},
    {"VGPU_COMPUTE_BURST_LIMIT", VGPU_KEY_BURST, false, true, "100",
     "burst mode's ceiling in percent, 1..100 (below the share: the share)"},
    {"VGPU_COMPUTE_BOARD", VGPU_KEY_DIR, false, true, VGPU_DEFAULT_BOARD_DIR,
     "absolute path of the node-wide directory where the containers sharing a GPU publish "
     "when they have work pending (created if absent)"},
    {"VGPU_DEVICE_UUID", VGPU_KEY_UUID, true, true, "none",
     "_<n> only: NVML UUID (GPU-... or MIG-...) of the GPU the n-th limits are for; written "
     "by the device plugin for vgpu-monitor; ignored in the environment"},
    {"CUDA_DEVICE_TASK_PRIORITY", VGPU_KEY_PRIORITY, false, true, "1",
     "task priority: 0 (high: low-priority containers on the GPU wait while it has work) or "
     "1 (low); from the environment it can only lower the limits file's"},
    {"CUDA_TASK_PRIORITY", VGPU_KEY_PRIORITY, false, false, "1",
     "HAMi-core's name for CUDA_DEVICE_TASK_PRIORITY; environment only, can only lower it"},
    {"VGPU_LIMITS_GENERATION", VGPU_KEY_GENERATION, false, true, "none",
     "the limits' generation, 1..2^63-1, written by the device plugin after a live resize: "
     "the environment's limits no longer lower a file that has one; ignored in the "
     "environment"},
    {"VGPU_LOG_LEVEL", VGPU_KEY_LOGLEVEL, false, false, "silent",
     "error, warn, info or debug; stderr, one line per event, rate-limited"},
    {"VGPU_LIMITS_FILE", VGPU_KEY_PATH, false, false, "unset",
     "another limits file; without " VGPU_LIMITS_PATH " its keys replace every key above in "
     "the environment, with it its limits can only lower those of " VGPU_LIMITS_PATH},
};
const unsigned vgpu_config_key_count = sizeof vgpu_config_keys / sizeof vgpu_config_keys[0];

#define KEY_LIMITS_FILE (vgpu_config_key_count - 1)

void vgpu_config_init(struct vgpu_config *c)
{
    memset(c, 0, sizeof *c);
    (void)vg_strlcpy(c->region_path, VGPU_DEFAULT_REGION_PATH, sizeof c->region_path);
    c->context_bytes = (uint64_t)VGPU_DEFAULT_CONTEXT_MIB << 20;
    c->log_level = -1;
    c->compute_mode = VGPU_COMPUTE_HARD;
    c->burst_limit = 100;
    c->priority = VGPU_PRIORITY_LOW;
    (void)vg_strlcpy(c->board_dir, VGPU_DEFAULT_BOARD_DIR, sizeof c->board_dir);
}

/* Which key a variable name is, and its device index (-1: the all-devices form). */
static int match_key(const char *name, size_t len, int *index, struct vg_err *err)
{
    for (unsigned k = 0; k < vgpu_config_key_count; k++) {
        const struct vgpu_key *key = &vgpu_config_keys[k];
        size_t kl = strlen(key->name);
        if (len < kl || memcmp(name, key->name, kl) != 0)
            continue;
        if (len == kl) {
            *index = -1;
            return (int)k;
        }
        if (!key->per_device || name[kl] != '_')
            continue;
        char digits[8];
        size_t dl = len - kl - 1;
        if (dl == 0 || dl >= sizeof digits)
            return vg_err_set(err, -EINVAL, "%.*s: device index must be 0..%d", (int)len, name,
                              VGPU_CONFIG_MAX_DEVICES - 1);
        memcpy(digits, name + kl + 1, dl);
        digits[dl] = '\0';
        uint64_t n;
        if (vg_parse_u64(digits, 0, VGPU_CONFIG_MAX_DEVICES - 1, &n, err) != 0 ||
            (dl > 1 && digits[0] == '0'))
            return vg_err_set(err, -EINVAL, "%.*s: device index must be 0..%d", (int)len, name,
                              VGPU_CONFIG_MAX_DEVICES - 1);
        *index = (int)n;
        return (int)k;
    }
    return -ENOENT;
}

int vgpu_config_apply(struct vgpu_config *c, const char *name, size_t name_len, const char *value,
                      bool from_file, struct vg_err *err)
{
    int index = -1;
    int k = match_key(name, name_len, &index, err);
    if (k == -ENOENT)
        return 1;
    if (k < 0)
        return k;
    const struct vgpu_key *key = &vgpu_config_keys[k];
    if (from_file && !key->in_file)
        return vg_err_set(err, -EINVAL, "%s is not allowed in a limits file", key->name);
    struct vg_err sub = {0};
    switch (key->kind) {
    case VGPU_KEY_BYTES: {
        uint64_t bytes;
        if (vg_parse_bytes(value, &bytes, &sub) != 0)
            return vg_err_set(err, -EINVAL, "%.*s=\"%s\": %s", (int)name_len, name, value, sub.msg);
        c->memory_limit_set = c->memory_limit_set || bytes != 0;
        if (index < 0) {
            c->memory_limit_all = bytes;
        } else {
            c->memory_limit[index] = bytes;
            c->memory_limit_given[index] = true;
        }
        return 0;
    }
    case VGPU_KEY_PERCENT: {
        uint64_t pct;
        if (vg_parse_u64(value, 0, 100, &pct, &sub) != 0)
            return vg_err_set(err, -EINVAL, "%.*s=\"%s\": want a percentage 0..100 (%s)",
                              (int)name_len, name, value, sub.msg);
        if (index < 0) {
            c->sm_limit_all = (uint32_t)pct;
        } else {
            c->sm_limit[index] = (uint32_t)pct;
            c->sm_limit_given[index] = true;
        }
        return 0;
    }
    case VGPU_KEY_PATH:
        if (value[0] != '/')
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want an absolute path", key->name, value);
        if ((unsigned)k == KEY_LIMITS_FILE)
            return 0; /* read by vgpu_config_load */
        if (vg_strlcpy(c->region_path, value, sizeof c->region_path) < 0)
            return vg_err_set(err, -EINVAL, "%s: path longer than %d bytes", key->name,
                              VGPU_CONFIG_PATH_MAX - 1);
        c->region_path_given = true;
        return 0;
    case VGPU_KEY_MIB: {
        uint64_t mib;
        if (vg_parse_u64(value, 0, 65536, &mib, &sub) != 0)
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want MiB 0..65536 (%s)", key->name, value,
                              sub.msg);
        c->context_bytes = mib << 20;
        return 0;
    }
    case VGPU_KEY_LOGLEVEL: {
        int level = vg_log_level_from_name(value);
        if (level < 0)
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want error, warn, info or debug", key->name,
                              value);
        c->log_level = level;
        return 0;
    }
    case VGPU_KEY_POLICY:
        if (strcasecmp(value, "default") == 0 || strcasecmp(value, "force") == 0) {
            c->policy_disable = false;
            return 0;
        }
        if (strcasecmp(value, "disable") == 0) {
            c->policy_disable = true;
            return 0;
        }
        return vg_err_set(err, -EINVAL, "%s=\"%s\": want default, force or disable", key->name,
                          value);
    case VGPU_KEY_MODE:
        if (strcmp(value, "hard") == 0)
            c->compute_mode = VGPU_COMPUTE_HARD;
        else if (strcmp(value, "burst") == 0)
            c->compute_mode = VGPU_COMPUTE_BURST;
        else if (strcmp(value, "disable") == 0)
            c->compute_mode = VGPU_COMPUTE_OFF;
        else
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want hard, burst or disable", key->name,
                              value);
        return 0;
    case VGPU_KEY_BURST: {
        uint64_t pct;
        if (vg_parse_u64(value, 1, 100, &pct, &sub) != 0)
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want a percentage 1..100 (%s)", key->name,
                              value, sub.msg);
        c->burst_limit = (uint32_t)pct;
        return 0;
    }
    case VGPU_KEY_DIR:
        if (value[0] != '/')
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want an absolute path", key->name, value);
        if (vg_strlcpy(c->board_dir, value, sizeof c->board_dir) < 0 ||
            strlen(value) > VGPU_CONFIG_PATH_MAX - 32)
            return vg_err_set(err, -EINVAL, "%s: path longer than %d bytes", key->name,
                              VGPU_CONFIG_PATH_MAX - 32);
        return 0;
    case VGPU_KEY_GENERATION: {
        uint64_t gen;
        if (vg_parse_u64(value, 1, INT64_MAX, &gen, &sub) != 0)
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want a generation 1..%lld (%s)", key->name,
                              value, (long long)INT64_MAX, sub.msg);
        if (from_file)
            c->generation = gen;
        return 0;
    }
    case VGPU_KEY_UUID: {
        size_t len = strlen(value), ok = 4;
        while (ok < len && (value[ok] == '-' || (value[ok] >= '0' && value[ok] <= '9') ||
                            (value[ok] >= 'a' && value[ok] <= 'f')))
            ok++;
        if (index < 0 || len <= 4 || len >= VGPU_CONFIG_UUID_MAX || ok != len ||
            (strncmp(value, "GPU-", 4) != 0 && strncmp(value, "MIG-", 4) != 0))
            return vg_err_set(err, -EINVAL,
                              "%.*s=\"%s\": want _<n> and a UUID as NVML prints it (GPU-... or "
                              "MIG-..., lower-case hex, at most %d bytes)",
                              (int)name_len, name, value, VGPU_CONFIG_UUID_MAX - 1);
        if (from_file)
            (void)vg_strlcpy(c->device_uuid[index], value, sizeof c->device_uuid[index]);
        return 0;
    }
    case VGPU_KEY_PRIORITY:
        /* Exactly "0" or "1": anything else (2, -1, "high", " 0") is refused, never read
         * as a default that could rank a tenant above its neighbours. */
        if ((value[0] != '0' && value[0] != '1') || value[1] != '\0')
            return vg_err_set(err, -EINVAL, "%s=\"%s\": want 0 (high) or 1 (low)", key->name,
                              value);
        /* Of the two names the lower priority (the larger number) wins. */
        if (!c->priority_given || value[0] - '0' > c->priority)
            c->priority = value[0] - '0';
        c->priority_given = true;
        return 0;
    }
    return vg_err_set(err, -EINVAL, "%s: unhandled key kind", key->name);
}

int vgpu_config_parse_file(struct vgpu_config *c, const char *text, size_t len, struct vg_err *err)
{
    if (len > VGPU_LIMITS_FILE_MAX)
        return vg_err_set(err, -EFBIG, "limits file larger than %d bytes", VGPU_LIMITS_FILE_MAX);
    bool header = false;
    bool seen[sizeof vgpu_config_keys / sizeof vgpu_config_keys[0]][VGPU_CONFIG_MAX_DEVICES + 1];
    memset(seen, 0, sizeof seen);
    size_t pos = 0;
    unsigned lineno = 0;
    while (pos < len) {
        lineno++;
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t ll = nl != NULL ? (size_t)(nl - line) : len - pos;
        pos += ll + (nl != NULL ? 1 : 0);
        if (ll >= VGPU_LIMITS_LINE_MAX)
            return vg_err_set(err, -EINVAL, "limits file line %u: longer than %d bytes", lineno,
                              VGPU_LIMITS_LINE_MAX - 1);
        char buf[VGPU_LIMITS_LINE_MAX];
        memcpy(buf, line, ll);
        buf[ll] = '\0';
        if (ll > 0 && buf[ll - 1] == '\r')
            buf[--ll] = '\0';
        if (memchr(buf, '\0', ll) != NULL)
            return vg_err_set(err, -EINVAL, "limits file line %u: NUL byte", lineno);
        if (ll == 0 || buf[0] == '#')
            continue;
        if (!header) {
            if (strcmp(buf, VGPU_LIMITS_FILE_HEADER) != 0)
                return vg_err_set(err, -EPROTO,
                                  "limits file line %u: expected \"%s\" (format version 1)", lineno,
                                  VGPU_LIMITS_FILE_HEADER);
            header = true;
            continue;
        }
        char *eq = strchr(buf, '=');
        if (eq == NULL || eq == buf)
            return vg_err_set(err, -EINVAL, "limits file line %u: expected KEY=VALUE", lineno);
        size_t nl_len = (size_t)(eq - buf);
        int index = -1;
        struct vg_err sub = {0};
        int k = match_key(buf, nl_len, &index, &sub);
        if (k == -ENOENT)
            return vg_err_set(err, -EINVAL, "limits file line %u: unknown key \"%.*s\"", lineno,
                              (int)nl_len, buf);
        if (k < 0)
            return vg_err_set(err, k, "limits file line %u: %s", lineno, sub.msg);
        bool *was = &seen[k][index + 1];
        if (*was)
            return vg_err_set(err, -EINVAL, "limits file line %u: \"%.*s\" given twice", lineno,
                              (int)nl_len, buf);
        *was = true;
        int rc = vgpu_config_apply(c, buf, nl_len, eq + 1, true, &sub);
        if (rc < 0)
            return vg_err_set(err, rc, "limits file line %u: %s", lineno, sub.msg);
    }
    if (!header)
        return vg_err_set(err, -EPROTO, "limits file: missing \"%s\" header",
                          VGPU_LIMITS_FILE_HEADER);
    c->from_file = true;
    return 0;
}

static int read_limits_file(struct vgpu_config *c, const char *what, const char *path,
                            struct vg_err *err)
{
    struct vg_err sub = {0};
    VG_AUTO_FREE char *text = NULL;
    size_t len = 0;
    int rc = vg_read_file(path, VGPU_LIMITS_FILE_MAX, &text, &len, &sub);
    if (rc < 0)
        return vg_err_set(err, rc, "%s %s", what, sub.msg);
    if (vgpu_config_parse_file(c, text, len, err) < 0)
        return vg_err_wrap(err, "%s %s", what, path);
    return 0;
}

/* Applies every configuration variable of envp to c; keep_file: skip the keys a limits
 * file may hold (c came from one). */
static int apply_env(struct vgpu_config *c, char *const *envp, bool keep_file, struct vg_err *err)
{
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        const char *eq = strchr(*e, '=');
        if (eq == NULL)
            continue;
        size_t nl = (size_t)(eq - *e);
        int index;
        struct vg_err sub = {0};
        int k = match_key(*e, nl, &index, &sub);
        if (k == -ENOENT)
            continue;
        /* The file replaces every key it may hold, whether or not it sets it. */
        if (k >= 0 && keep_file && vgpu_config_keys[k].in_file)
            continue;
        int rc = k < 0 ? vg_err_set(err, k, "%s", sub.msg)
                       : vgpu_config_apply(c, *e, nl, eq + 1, false, err);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const char *env_value(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    const char *v = NULL;
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            v = *e + n + 1;
    return v;
}

/* The lower of two limits where 0 is "none". */
static uint64_t lower(uint64_t a, uint64_t b)
{
    if (a == 0)
        return b;
    if (b == 0)
        return a;
    return a < b ? a : b;
}

/* The fixed file's limits: a device of the container is named by its position, which the
 * process's CUDA_VISIBLE_DEVICES can reorder. So that reordering cannot move a larger
 * limit onto another device, every device takes the smallest limit the file gives when
 * they differ. */
static void flatten(struct vgpu_config *c)
{
    uint64_t mem = c->memory_limit_all;
    uint32_t sm = c->sm_limit_all;
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++) {
        if (c->memory_limit_given[n])
            mem = lower(mem, c->memory_limit[n]);
        if (c->sm_limit_given[n])
            sm = (uint32_t)lower(sm, c->sm_limit[n]);
    }
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++) {
        c->memory_limit[n] = mem;
        c->memory_limit_given[n] = true;
        c->sm_limit[n] = sm;
        c->sm_limit_given[n] = true;
    }
    c->memory_limit_all = mem;
    c->sm_limit_all = sm;
}

/* A priority can only be lowered (0 high -> 1 low), never raised. */
static void lower_priority(struct vgpu_config *c, const struct vgpu_config *other)
{
    if (other->priority_given) {
        if (other->priority > c->priority)
            c->priority = other->priority;
        c->priority_given = true;
    }
}

/* Lowers c's limits to other's where other's are lower. */
static void lower_limits(struct vgpu_config *c, const struct vgpu_config *other)
{
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++) {
        c->memory_limit[n] =
            lower(vgpu_config_memory_limit(c, n), vgpu_config_memory_limit(other, n));
        c->memory_limit_given[n] = true;
        c->sm_limit[n] =
            (uint32_t)lower(vgpu_config_sm_limit(c, n), vgpu_config_sm_limit(other, n));
        c->sm_limit_given[n] = true;
    }
    c->memory_limit_all = lower(c->memory_limit_all, other->memory_limit_all);
    c->sm_limit_all = (uint32_t)lower(c->sm_limit_all, other->sm_limit_all);
    lower_priority(c, other);
    c->memory_limit_set = false;
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++)
        c->memory_limit_set |= c->memory_limit[n] != 0;
    c->memory_limit_set |= c->memory_limit_all != 0;
}

/* Outside a vgpu container: VGPU_LIMITS_FILE replaces what it may hold, else the
 * environment decides. */
static int load_legacy(struct vgpu_config *c, char *const *envp, struct vg_err *err)
{
    const char *limits_file = env_value(envp, "VGPU_LIMITS_FILE");
    if (limits_file != NULL) {
        if (limits_file[0] != '/')
            return vg_err_set(err, -EINVAL, "VGPU_LIMITS_FILE=\"%s\": want an absolute path",
                              limits_file);
        int rc = read_limits_file(c, "VGPU_LIMITS_FILE", limits_file, err);
        if (rc < 0)
            return rc;
    }
    return apply_env(c, envp, c->from_file, err);
}

int vgpu_config_load_at(struct vgpu_config *c, char *const *envp, const char *fixed_path,
                        struct vg_err *err)
{
    vgpu_config_init(c);
    struct stat st;
    if (lstat(fixed_path, &st) != 0 && (errno == ENOENT || errno == ENOTDIR))
        return load_legacy(c, envp, err);
    c->in_container = true;
    struct vg_err why = {0};
    if (read_limits_file(c, "limits file", fixed_path, &why) < 0) {
        /* Closed: the environment still names the region (to count the refusals there)
         * and the log level, but no limit of it is trusted. */
        vgpu_config_init(c);
        c->in_container = true;
        c->closed = true;
        (void)vg_strlcpy(c->closed_why, why.msg, sizeof c->closed_why);
        int rc = apply_env(c, envp, false, err);
        c->in_container = true;
        c->closed = true;
        return rc;
    }
    flatten(c);
    /* The environment: every key the file may not hold (the log level), and limits that
     * only lower the file's. An invalid value is refused as outside a container. */
    struct vgpu_config env;
    vgpu_config_init(&env);
    int rc = apply_env(&env, envp, false, err);
    if (rc < 0)
        return rc;
    c->log_level = env.log_level;
    /* A resized container's file decides alone: the environment was fixed when the
     * container started, and every process must read the same limits from the same file,
     * whenever it started (docs/libvgpu.md, "Live resize"). */
    lower_priority(c, &env); /* a process may always run at low priority */
    if (c->generation > 0)
        return 0;
    lower_limits(c, &env);
    const char *other = env_value(envp, "VGPU_LIMITS_FILE");
    if (other != NULL) {
        if (other[0] != '/')
            return vg_err_set(err, -EINVAL, "VGPU_LIMITS_FILE=\"%s\": want an absolute path",
                              other);
        struct vgpu_config f;
        vgpu_config_init(&f);
        if ((rc = read_limits_file(&f, "VGPU_LIMITS_FILE", other, err)) < 0)
            return rc;
        lower_limits(c, &f);
    }
    return 0;
}

int vgpu_config_load(struct vgpu_config *c, char *const *envp, struct vg_err *err)
{
    return vgpu_config_load_at(c, envp, VGPU_LIMITS_PATH, err);
}

uint64_t vgpu_config_memory_limit(const struct vgpu_config *c, unsigned n)
{
    if (n < VGPU_CONFIG_MAX_DEVICES && c->memory_limit_given[n])
        return c->memory_limit[n];
    return c->memory_limit_all;
}

uint32_t vgpu_config_sm_limit(const struct vgpu_config *c, unsigned n)
{
    if (n < VGPU_CONFIG_MAX_DEVICES && c->sm_limit_given[n])
        return c->sm_limit[n];
    return c->sm_limit_all;
}

enum vgpu_compute_mode vgpu_config_compute_mode(const struct vgpu_config *c)
{
    return c->policy_disable ? VGPU_COMPUTE_OFF : c->compute_mode;
}

bool vgpu_config_compute_limited(const struct vgpu_config *c)
{
    if (vgpu_config_compute_mode(c) == VGPU_COMPUTE_OFF)
        return false;
    for (unsigned n = 0; n < VGPU_CONFIG_MAX_DEVICES; n++) {
        uint32_t s = vgpu_config_sm_limit(c, n);
        if (s != 0 && s < 100)
            return true;
    }
    return false;
}
