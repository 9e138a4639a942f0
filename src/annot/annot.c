#include "annot/annot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/auto_json.h"
#include "base/str.h"

static const char *const mode_names[] = {"vgpu", "timeSlicing", "mps", "mig"};

const char *annot_mode_name(enum annot_mode mode)
{
    return (unsigned)mode < 4 ? mode_names[mode] : "unknown";
}

/* ---- decoding helpers: each names the field it refuses ---- */

static json_t *parse(const char *text, size_t len, const char *what, struct vg_err *err)
{
    if (len > ANNOT_MAX_BYTES) {
        vg_err_set(err, -E2BIG, "%s is %zu bytes, more than the %d allowed", what, len,
                   ANNOT_MAX_BYTES);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        vg_err_set(err, -EINVAL, "%s is not JSON: %s at column %d", what, jerr.text, jerr.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        vg_err_set(err, -EINVAL, "%s is not a JSON object", what);
        return NULL;
    }
    json_t *version = json_object_get(root, "version");
    if (!json_is_integer(version)) {
        json_decref(root);
        vg_err_set(err, -EPROTO, "%s.version: missing or not an integer", what);
        return NULL;
    }
    if (json_integer_value(version) != ANNOT_VERSION) {
        vg_err_set(err, -EPROTO, "%s has version %lld, this build reads version %d", what,
                   (long long)json_integer_value(version), ANNOT_VERSION);
        json_decref(root);
        return NULL;
    }
    return root;
}

static int get_uint(json_t *obj, const char *where, const char *key, uint64_t min, uint64_t max,
                    bool required, uint64_t *out, struct vg_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL && !required)
        return 0;
    if (!json_is_integer(v))
        return vg_err_set(err, -EINVAL, "%s.%s: %s", where, key,
                          v == NULL ? "missing" : "not an integer");
    json_int_t i = json_integer_value(v);
    if (i < 0 || (uint64_t)i < min || (uint64_t)i > max)
        return vg_err_set(err, -ERANGE, "%s.%s: %lld is outside %llu..%llu", where, key,
                          (long long)i, (unsigned long long)min, (unsigned long long)max);
    *out = (uint64_t)i;
    return 0;
}

static int get_string(json_t *obj, const char *where, const char *key, char *out, size_t size,
                      bool required, struct vg_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL && !required)
        return 0;
    if (!json_is_string(v))
        return vg_err_set(err, -EINVAL, "%s.%s: %s", where, key,
                          v == NULL ? "missing" : "not a string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 0 || memchr(s, '\0', n) != NULL)
        return vg_err_set(err, -EINVAL, "%s.%s: empty or contains NUL", where, key);
    if (vg_strlcpy(out, s, size) < 0)
        return vg_err_set(err, -E2BIG, "%s.%s: longer than %zu bytes", where, key, size - 1);
    return 0;
}

static int get_array(json_t *obj, const char *where, const char *key, size_t max, json_t **out,
                     struct vg_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_array(v))
        return vg_err_set(err, -EINVAL, "%s.%s: %s", where, key,
                          v == NULL ? "missing" : "not an array");
    if (json_array_size(v) > max)
        return vg_err_set(err, -E2BIG, "%s.%s: %zu entries, at most %zu", where, key,
                          json_array_size(v), max);
    *out = v;
    return 0;
}

bool annot_mig_profile_name(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    return n > 0 && n < ANNOT_MIG_NAME_MAX &&
           strspn(s, "0123456789abcdefghijklmnopqrstuvwxyz.+") == n;
}

int annot_mig_profile_find(const struct annot_mig *m, const char *name)
{
    for (unsigned i = 0; i < m->profile_count && i < ANNOT_MIG_PROFILES_MAX; i++)
        if (strcmp(m->profiles[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* A string field holding a MIG profile name. */
static int get_profile_name(json_t *obj, const char *where, const char *key, char *out,
                            struct vg_err *err)
{
    int rc = get_string(obj, where, key, out, ANNOT_MIG_NAME_MAX, true, err);
    if (rc != 0)
        return rc;
    if (!annot_mig_profile_name(out))
        return vg_err_set(err, -EINVAL,
                          "%s.%s: '%s' is not a MIG profile name (1..15 of 0-9, a-z, "
                          "'.' and '+')",
                          where, key, out);
    return 0;
}

static int decode_mig_profile(json_t *p, const char *where, unsigned slices,
                              struct annot_mig_profile *out, struct vg_err *err)
{
    if (!json_is_object(p))
        return vg_err_set(err, -EINVAL, "%s: not an object", where);
    uint64_t id = 0, memory = 0, sms = 0, size = 0;
    json_t *starts = NULL;
    int rc;
    if ((rc = get_profile_name(p, where, "name", out->name, err)) ||
        (rc = get_uint(p, where, "id", 0, 1023, true, &id, err)) ||
        (rc = get_uint(p, where, "memoryMiB", 1, UINT64_C(1) << 24, true, &memory, err)) ||
        (rc = get_uint(p, where, "sms", 1, 1024, true, &sms, err)) ||
        (rc = get_uint(p, where, "size", 1, slices, true, &size, err)) ||
        (rc = get_array(p, where, "placements", ANNOT_MIG_SLICES_MAX, &starts, err)))
        return rc;
    out->id = (uint16_t)id;
    out->memory_mib = (uint32_t)memory;
    out->sms = (uint16_t)sms;
    out->size = (uint8_t)size;
    for (size_t k = 0; k < json_array_size(starts); k++) {
        json_t *v = json_array_get(starts, k);
        json_int_t s = json_is_integer(v) ? json_integer_value(v) : -1;
        if (s < 0 || (uint64_t)s + size > slices)
            return vg_err_set(err, -ERANGE,
                              "%s.placements[%zu]: not a start slice in 0..%llu (a profile of %llu "
                              "slices on a GPU of %u)",
                              where, k, (unsigned long long)(slices - size),
                              (unsigned long long)size, slices);
        if (out->placements & (1u << s))
            return vg_err_set(err, -EINVAL, "%s.placements[%zu]: start %lld is listed twice", where,
                              k, (long long)s);
        out->placements = (uint8_t)(out->placements | (1u << s));
    }
    return 0;
}

static int decode_mig_instance(json_t *o, const char *where, unsigned slices,
                               struct annot_mig_instance *out, struct vg_err *err)
{
    if (!json_is_object(o))
        return vg_err_set(err, -EINVAL, "%s: not an object", where);
    uint64_t start = 0, size = 0;
    int rc;
    if ((rc = get_profile_name(o, where, "profile", out->profile, err)) ||
        (rc = get_uint(o, where, "size", 1, slices, true, &size, err)) ||
        (rc = get_uint(o, where, "start", 0, slices - size, true, &start, err)))
        return rc;
    out->start = (uint8_t)start;
    out->size = (uint8_t)size;
    json_t *pod = json_object_get(o, "pod");
    if (pod != NULL) {
        if (!json_is_string(pod))
            return vg_err_set(err, -EINVAL, "%s.pod: not a string", where);
        const char *uid = json_string_value(pod);
        if (json_string_length(pod) > 0 &&
            (json_string_length(pod) >= ANNOT_MIG_POD_MAX || !annot_pod_uid(uid)))
            return vg_err_set(err, -EINVAL,
                              "%s.pod: not a pod uid (an RFC 1123 label of at most "
                              "%d bytes) or empty",
                              where, ANNOT_MIG_POD_MAX - 1);
        (void)vg_strlcpy(out->pod, uid, sizeof out->pod);
    }
    return 0;
}

/* Slices a start and size cover, as a bit mask. */
static unsigned slice_mask(unsigned start, unsigned size)
{
    return ((1u << size) - 1u) << start;
}

static int decode_mig(json_t *m, const char *gwhere, struct annot_mig *out, struct vg_err *err)
{
    char where[48];
    snprintf(where, sizeof where, "%s.mig", gwhere);
    if (!json_is_object(m))
        return vg_err_set(err, -EINVAL, "%s: not an object", where);
    uint64_t slices = 0;
    json_t *profiles = NULL, *instances = NULL;
    int rc;
    if ((rc = get_uint(m, where, "slices", 1, ANNOT_MIG_SLICES_MAX, true, &slices, err)) ||
        (rc = get_array(m, where, "profiles", ANNOT_MIG_PROFILES_MAX, &profiles, err)) ||
        (rc = get_array(m, where, "instances", ANNOT_MIG_INSTANCES_MAX, &instances, err)))
        return rc;
    out->slices = (uint8_t)slices;
    for (size_t k = 0; k < json_array_size(profiles); k++) {
        char pwhere[80];
        snprintf(pwhere, sizeof pwhere, "%s.profiles[%zu]", where, k);
        struct annot_mig_profile *p = &out->profiles[k];
        if ((rc = decode_mig_profile(json_array_get(profiles, k), pwhere, (unsigned)slices, p,
                                     err)) != 0)
            return rc;
        if (annot_mig_profile_find(out, p->name) >= 0)
            return vg_err_set(err, -EINVAL, "%s.name: '%s' is listed twice", pwhere, p->name);
        out->profile_count++;
    }
    unsigned used = 0;
    for (size_t k = 0; k < json_array_size(instances); k++) {
        char iwhere[80];
        snprintf(iwhere, sizeof iwhere, "%s.instances[%zu]", where, k);
        struct annot_mig_instance *in = &out->instances[k];
        if ((rc = decode_mig_instance(json_array_get(instances, k), iwhere, (unsigned)slices, in,
                                      err)) != 0)
            return rc;
        unsigned mask = slice_mask(in->start, in->size);
        if (used & mask)
            return vg_err_set(err, -EINVAL, "%s: slices %u..%u overlap another instance of the GPU",
                              iwhere, in->start, in->start + in->size - 1u);
        used |= mask;
        out->instance_count++;
    }
    return 0;
}

static int decode_gpu(json_t *g, unsigned i, struct annot_gpu *out, struct vg_err *err)
{
    char where[32];
    snprintf(where, sizeof where, "gpus[%u]", i);
    if (!json_is_object(g))
        return vg_err_set(err, -EINVAL, "%s: not an object", where);
    uint64_t index = 0, memory = 0, cores = 100, slots = 1, numa_plus_one = 0;
    int rc;
    if ((rc = get_string(g, where, "uuid", out->uuid, sizeof out->uuid, true, err)) ||
        (rc = get_string(g, where, "model", out->model, sizeof out->model, true, err)) ||
        (rc = get_uint(g, where, "index", 0, 1023, true, &index, err)) ||
        (rc = get_uint(g, where, "memoryMiB", 1, UINT64_C(1) << 40, true, &memory, err)) ||
        (rc = get_uint(g, where, "cores", 1, 100, true, &cores, err)) ||
        (rc = get_uint(g, where, "slots", 1, 1024, true, &slots, err)))
        return rc;
    json_t *numa = json_object_get(g, "numa");
    if (numa != NULL) {
        if (!json_is_integer(numa) || json_integer_value(numa) < -1 ||
            json_integer_value(numa) > 255)
            return vg_err_set(err, -EINVAL, "%s.numa: not an integer in -1..255", where);
        numa_plus_one = (uint64_t)(json_integer_value(numa) + 1);
    }
    json_t *healthy = json_object_get(g, "healthy");
    if (!json_is_boolean(healthy))
        return vg_err_set(err, -EINVAL, "%s.healthy: %s", where,
                          healthy == NULL ? "missing" : "not true or false");
    out->index = (unsigned)index;
    out->memory_mib = memory;
    out->cores = (unsigned)cores;
    out->slots = (unsigned)slots;
    out->numa = (int)numa_plus_one - 1;
    out->healthy = json_is_true(healthy);
    json_t *mig = json_object_get(g, "mig");
    if (mig != NULL)
        return decode_mig(mig, where, &out->mig, err);
    return 0;
}

/* The optional "held" list: each entry a pod uid, a container label, a GPU of the
 * inventory and whole seconds; a (pod, container, GPU) listed once. */
static int decode_held(json_t *root, struct annot_inventory *out, struct vg_err *err)
{
    json_t *list = NULL;
    if (json_object_get(root, "held") == NULL)
        return 0;
    int rc = get_array(root, ANNOT_KEY_GPUS, "held", ANNOT_HELD_MAX, &list, err);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *h = json_array_get(list, i);
        struct annot_held *o = &out->held[i];
        char where[32];
        uint64_t gpu = 0, seconds = 0;
        snprintf(where, sizeof where, "held[%zu]", i);
        if (!json_is_object(h))
            return vg_err_set(err, -EINVAL, "%s: not an object", where);
        if ((rc = get_string(h, where, "pod", o->pod, sizeof o->pod, true, err)) ||
            (rc =
                 get_string(h, where, "container", o->container, sizeof o->container, true, err)) ||
            (rc = get_uint(h, where, "seconds", 0, ANNOT_HELD_SECONDS_MAX, true, &seconds, err)))
            return rc;
        if (out->gpu_count == 0)
            return vg_err_set(err, -EINVAL, "%s.gpu: the inventory lists no GPU", where);
        if ((rc = get_uint(h, where, "gpu", 0, out->gpu_count - 1u, true, &gpu, err)))
            return rc;
        if (!annot_pod_uid(o->pod))
            return vg_err_set(err, -EINVAL, "%s.pod: not a pod uid", where);
        if (!annot_dns_label(o->container))
            return vg_err_set(err, -EINVAL, "%s.container: not an RFC 1123 label", where);
        o->gpu = (uint8_t)gpu;
        o->seconds = (uint32_t)seconds;
        for (size_t j = 0; j < i; j++)
            if (out->held[j].gpu == o->gpu && strcmp(out->held[j].pod, o->pod) == 0 &&
                strcmp(out->held[j].container, o->container) == 0)
                return vg_err_set(err, -EINVAL,
                                  "%s: container %s of pod %s on GPU %u is listed twice", where,
                                  o->container, o->pod, o->gpu);
        out->held_count++;
    }
    return 0;
}

int annot_inventory_decode(const char *text, size_t len, struct annot_inventory *out,
                           struct vg_err *err)
{
    VG_AUTO_JSON json_t *root = parse(text, len, ANNOT_KEY_GPUS, err);
    if (root == NULL)
        return err != NULL ? err->code : -EINVAL;
    memset(out, 0, sizeof *out);
    int rc;
    uint64_t heartbeat = 0;
    char mode[16] = "";
    json_t *gpus = NULL;
    if ((rc = get_uint(root, ANNOT_KEY_GPUS, "heartbeat", 0, INT64_MAX, true, &heartbeat, err)) ||
        (rc = get_string(root, ANNOT_KEY_GPUS, "mode", mode, sizeof mode, true, err)) ||
        (rc = get_array(root, ANNOT_KEY_GPUS, "gpus", ANNOT_MAX_GPUS, &gpus, err)))
        return rc;
    rc = -EINVAL;
    for (unsigned m = 0; m < 4; m++)
        if (strcmp(mode, mode_names[m]) == 0) {
            out->mode = (enum annot_mode)m;
            rc = 0;
        }
    if (rc != 0) {
        return vg_err_set(err, rc, "%s.mode: '%s' is not vgpu, timeSlicing, mps or mig",
                          ANNOT_KEY_GPUS, mode);
    }
    out->heartbeat = (int64_t)heartbeat;
    for (size_t i = 0; i < json_array_size(gpus); i++) {
        rc = decode_gpu(json_array_get(gpus, i), (unsigned)i, &out->gpus[i], err);
        if (rc != 0)
            return rc;
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->gpus[j].uuid, out->gpus[i].uuid) == 0) {
                return vg_err_set(err, -EINVAL, "gpus[%zu].uuid: %s is listed twice", i,
                                  out->gpus[i].uuid);
            }
        out->gpu_count++;
    }
    return decode_held(root, out, err);
}

static int decode_share(json_t *s, const char *where, struct annot_share *out, struct vg_err *err)
{
    if (!json_is_object(s))
        return vg_err_set(err, -EINVAL, "%s: not an object", where);
    uint64_t memory = 0, cores = 0;
    int rc;
    if ((rc = get_string(s, where, "uuid", out->uuid, sizeof out->uuid, true, err)) ||
        (rc = get_uint(s, where, "memoryMiB", 1, UINT64_C(1) << 40, true, &memory, err)) ||
        (rc = get_uint(s, where, "cores", 0, 100, true, &cores, err)))
        return rc;
    out->memory_mib = memory;
    out->cores = (unsigned)cores;
    json_t *mig = json_object_get(s, "mig");
    if (mig != NULL) {
        char mwhere[112];
        uint64_t start = 0;
        snprintf(mwhere, sizeof mwhere, "%s.mig", where);
        if (!json_is_object(mig))
            return vg_err_set(err, -EINVAL, "%s: not an object", mwhere);
        if ((rc = get_profile_name(mig, mwhere, "profile", out->mig_profile, err)) ||
            (rc = get_uint(mig, mwhere, "start", 0, ANNOT_MIG_SLICES_MAX - 1, true, &start, err)))
            return rc;
        out->mig_start = (uint8_t)start;
    }
    return 0;
}

int annot_decision_decode(const char *text, size_t len, struct annot_decision *out,
                          struct vg_err *err)
{
    VG_AUTO_JSON json_t *root = parse(text, len, ANNOT_KEY_DECISION, err);
    if (root == NULL)
        return err != NULL ? err->code : -EINVAL;
    memset(out, 0, sizeof *out);
    int rc;
    uint64_t time = 0;
    json_t *containers = NULL;
    if ((rc = get_string(root, ANNOT_KEY_DECISION, "node", out->node, sizeof out->node, true,
                         err)) ||
        (rc = get_uint(root, ANNOT_KEY_DECISION, "time", 0, INT64_MAX, true, &time, err)) ||
        (rc = get_uint(root, ANNOT_KEY_DECISION, "generation", 0, INT64_MAX, false,
                       &out->generation, err)) ||
        (rc = get_array(root, ANNOT_KEY_DECISION, "containers", ANNOT_MAX_CONTAINERS, &containers,
                        err)))
        return rc;
    if (!annot_dns_subdomain(out->node))
        return vg_err_set(err, -EINVAL, "%s.node: not a DNS subdomain (RFC 1123)",
                          ANNOT_KEY_DECISION);
    out->time = (int64_t)time;
    for (size_t i = 0; i < json_array_size(containers); i++) {
        json_t *c = json_array_get(containers, i);
        struct annot_container *oc = &out->containers[i];
        char where[48];
        snprintf(where, sizeof where, "containers[%zu]", i);
        json_t *gpus = NULL;
        if (!json_is_object(c)) {
            return vg_err_set(err, -EINVAL, "%s: not an object", where);
        }
        if ((rc = get_string(c, where, "name", oc->name, sizeof oc->name, true, err)) ||
            (rc = get_array(c, where, "gpus", ANNOT_MAX_GPUS, &gpus, err)))
            return rc;
        if (!annot_dns_label(oc->name))
            return vg_err_set(err, -EINVAL,
                              "%s.name: not a container name (an RFC 1123 label: 1..63 of "
                              "a-z, 0-9 and '-')",
                              where);
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->containers[j].name, oc->name) == 0) {
                return vg_err_set(err, -EINVAL, "%s.name: '%s' is listed twice", where, oc->name);
            }
        for (size_t k = 0; k < json_array_size(gpus); k++) {
            char gwhere[96];
            snprintf(gwhere, sizeof gwhere, "%s.gpus[%zu]", where, k);
            rc = decode_share(json_array_get(gpus, k), gwhere, &oc->gpus[k], err);
            if (rc != 0)
                return rc;
            oc->gpu_count++;
        }
        out->container_count++;
    }
    return 0;
}

/* ---- encoding ---- */

/* json_object_set_new that remembers a failure, so building stays a flat list. */
static void put(json_t *obj, const char *key, json_t *value, bool *ok)
{
    if (value == NULL || json_object_set_new(obj, key, value) != 0)
        *ok = false;
}

static char *finish(json_t *root, bool ok, struct vg_err *err)
{
    char *text = ok ? json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(root);
    if (text == NULL)
        vg_err_set(err, -EINVAL,
                   "cannot encode the annotation (a string is not UTF-8, or "
                   "out of memory)");
    else if (strlen(text) > ANNOT_MAX_BYTES) {
        vg_err_set(err, -E2BIG, "annotation would be %zu bytes, more than %d", strlen(text),
                   ANNOT_MAX_BYTES);
        free(text);
        text = NULL;
    }
    return text;
}

static json_t *encode_mig(const struct annot_mig *m)
{
    bool ok = true;
    json_t *o = json_object(), *profiles = json_array(), *instances = json_array();
    put(o, "slices", json_integer(m->slices), &ok);
    for (unsigned k = 0; k < m->profile_count && k < ANNOT_MIG_PROFILES_MAX && ok; k++) {
        const struct annot_mig_profile *p = &m->profiles[k];
        json_t *po = json_object(), *starts = json_array();
        put(po, "name", json_string(p->name), &ok);
        put(po, "id", json_integer(p->id), &ok);
        put(po, "memoryMiB", json_integer(p->memory_mib), &ok);
        put(po, "sms", json_integer(p->sms), &ok);
        put(po, "size", json_integer(p->size), &ok);
        for (unsigned s = 0; s < ANNOT_MIG_SLICES_MAX && starts != NULL; s++)
            if ((p->placements & (1u << s)) && json_array_append_new(starts, json_integer(s)) != 0)
                ok = false;
        put(po, "placements", starts, &ok);
        if (po == NULL || json_array_append_new(profiles, po) != 0)
            ok = false;
    }
    for (unsigned k = 0; k < m->instance_count && k < ANNOT_MIG_INSTANCES_MAX && ok; k++) {
        const struct annot_mig_instance *in = &m->instances[k];
        json_t *io = json_object();
        put(io, "profile", json_string(in->profile), &ok);
        put(io, "start", json_integer(in->start), &ok);
        put(io, "size", json_integer(in->size), &ok);
        put(io, "pod", json_string(in->pod), &ok);
        if (io == NULL || json_array_append_new(instances, io) != 0)
            ok = false;
    }
    put(o, "profiles", profiles, &ok);
    put(o, "instances", instances, &ok);
    if (!ok || o == NULL) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *annot_inventory_encode(const struct annot_inventory *in, struct vg_err *err)
{
    if (in->gpu_count > ANNOT_MAX_GPUS || (unsigned)in->mode > ANNOT_MODE_MIG) {
        vg_err_set(err, -EINVAL, "inventory has %u GPUs or an unknown mode", in->gpu_count);
        return NULL;
    }
    if (in->held_count > ANNOT_HELD_MAX) {
        vg_err_set(err, -EINVAL, "inventory has %u held entries, at most %d", in->held_count,
                   ANNOT_HELD_MAX);
        return NULL;
    }
    /* What the decoder would refuse is never written: it would cost the node its
     * inventory. */
    for (unsigned i = 0; i < in->held_count; i++) {
        const struct annot_held *h = &in->held[i];
        if (!annot_pod_uid(h->pod) || !annot_dns_label(h->container) || h->gpu >= in->gpu_count ||
            h->seconds > ANNOT_HELD_SECONDS_MAX) {
            vg_err_set(err, -EINVAL, "inventory held[%u]: not a pod uid, container, GPU and time",
                       i);
            return NULL;
        }
        for (unsigned j = 0; j < i; j++)
            if (in->held[j].gpu == h->gpu && strcmp(in->held[j].pod, h->pod) == 0 &&
                strcmp(in->held[j].container, h->container) == 0) {
                vg_err_set(err, -EINVAL, "inventory held[%u]: listed twice", i);
                return NULL;
            }
    }
    bool ok = true;
    json_t *root = json_object(), *gpus = json_array();
    put(root, "version", json_integer(ANNOT_VERSION), &ok);
    put(root, "heartbeat", json_integer(in->heartbeat), &ok);
    put(root, "mode", json_string(annot_mode_name(in->mode)), &ok);
    for (unsigned i = 0; i < in->gpu_count && ok; i++) {
        const struct annot_gpu *g = &in->gpus[i];
        json_t *o = json_object();
        put(o, "uuid", json_string(g->uuid), &ok);
        put(o, "index", json_integer(g->index), &ok);
        put(o, "model", json_string(g->model), &ok);
        put(o, "memoryMiB", json_integer((json_int_t)g->memory_mib), &ok);
        put(o, "cores", json_integer(g->cores), &ok);
        put(o, "slots", json_integer(g->slots), &ok);
        put(o, "numa", json_integer(g->numa), &ok);
        put(o, "healthy", json_boolean(g->healthy), &ok);
        if (g->mig.slices > 0)
            put(o, "mig", encode_mig(&g->mig), &ok);
        if (o == NULL || json_array_append_new(gpus, o) != 0)
            ok = false;
    }
    put(root, "gpus", gpus, &ok);
    if (in->held_count > 0) {
        json_t *held = json_array();
        for (unsigned i = 0; i < in->held_count && i < ANNOT_HELD_MAX && ok; i++) {
            const struct annot_held *h = &in->held[i];
            json_t *o = json_object();
            put(o, "pod", json_string(h->pod), &ok);
            put(o, "container", json_string(h->container), &ok);
            put(o, "gpu", json_integer(h->gpu), &ok);
            put(o, "seconds", json_integer((json_int_t)h->seconds), &ok);
            if (o == NULL || json_array_append_new(held, o) != 0)
                ok = false;
        }
        put(root, "held", held, &ok);
    }
    return finish(root, ok && root != NULL, err);
}

char *annot_decision_encode(const struct annot_decision *in, struct vg_err *err)
{
    if (in->container_count > ANNOT_MAX_CONTAINERS) {
        vg_err_set(err, -EINVAL, "decision has %u containers", in->container_count);
        return NULL;
    }
    bool ok = true;
    json_t *root = json_object(), *containers = json_array();
    put(root, "version", json_integer(ANNOT_VERSION), &ok);
    put(root, "node", json_string(in->node), &ok);
    put(root, "time", json_integer(in->time), &ok);
    if (in->generation > 0) /* absent until a resize: older readers see what they knew */
        put(root, "generation", json_integer((json_int_t)in->generation), &ok);
    for (unsigned i = 0; i < in->container_count && ok; i++) {
        const struct annot_container *c = &in->containers[i];
        json_t *o = json_object(), *gpus = json_array();
        put(o, "name", json_string(c->name), &ok);
        for (unsigned k = 0; k < c->gpu_count && k < ANNOT_MAX_GPUS && ok; k++) {
            json_t *s = json_object();
            put(s, "uuid", json_string(c->gpus[k].uuid), &ok);
            put(s, "memoryMiB", json_integer((json_int_t)c->gpus[k].memory_mib), &ok);
            put(s, "cores", json_integer(c->gpus[k].cores), &ok);
            if (c->gpus[k].mig_profile[0] != '\0') {
                json_t *m = json_object();
                put(m, "profile", json_string(c->gpus[k].mig_profile), &ok);
                put(m, "start", json_integer(c->gpus[k].mig_start), &ok);
                put(s, "mig", m, &ok);
            }
            if (s == NULL || json_array_append_new(gpus, s) != 0)
                ok = false;
        }
        put(o, "gpus", gpus, &ok);
        if (o == NULL || json_array_append_new(containers, o) != 0)
            ok = false;
    }
    put(root, "containers", containers, &ok);
    return finish(root, ok && root != NULL, err);
}

/* ---- vgpu.io/mig-refused ---- */

int annot_mig_refused_decode(const char *text, size_t len, struct annot_mig_refused *out,
                             struct vg_err *err)
{
    VG_AUTO_JSON json_t *root = parse(text, len, ANNOT_KEY_MIG_REFUSED, err);
    if (root == NULL)
        return err != NULL ? err->code : -EINVAL;
    memset(out, 0, sizeof *out);
    json_t *list = NULL;
    int rc = get_array(root, ANNOT_KEY_MIG_REFUSED, "refused", ANNOT_MIG_REFUSED_MAX, &list, err);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *r = json_array_get(list, i);
        struct annot_mig_refusal *o = &out->refused[i];
        char where[48];
        uint64_t start = 0, time = 0;
        snprintf(where, sizeof where, "refused[%zu]", i);
        if (!json_is_object(r))
            return vg_err_set(err, -EINVAL, "%s: not an object", where);
        if ((rc = get_string(r, where, "uuid", o->uuid, sizeof o->uuid, true, err)) ||
            (rc = get_profile_name(r, where, "profile", o->profile, err)) ||
            (rc = get_uint(r, where, "start", 0, ANNOT_MIG_SLICES_MAX - 1, true, &start, err)) ||
            (rc = get_uint(r, where, "time", 0, INT64_MAX, true, &time, err)) ||
            (rc = get_string(r, where, "reason", o->reason, sizeof o->reason, false, err)))
            return rc;
        o->start = (uint8_t)start;
        o->time = (int64_t)time;
        out->count++;
    }
    return 0;
}

char *annot_mig_refused_encode(const struct annot_mig_refused *in, struct vg_err *err)
{
    if (in->count > ANNOT_MIG_REFUSED_MAX) {
        vg_err_set(err, -EINVAL, "%u refusals, at most %d", in->count, ANNOT_MIG_REFUSED_MAX);
        return NULL;
    }
    bool ok = true;
    json_t *root = json_object(), *list = json_array();
    put(root, "version", json_integer(ANNOT_VERSION), &ok);
    for (unsigned i = 0; i < in->count && ok; i++) {
        const struct annot_mig_refusal *r = &in->refused[i];
        json_t *o = json_object();
        put(o, "uuid", json_string(r->uuid), &ok);
        put(o, "profile", json_string(r->profile), &ok);
        put(o, "start", json_integer(r->start), &ok);
        put(o, "time", json_integer(r->time), &ok);
        if (r->reason[0] != '\0')
            put(o, "reason", json_string(r->reason), &ok);
        if (o == NULL || json_array_append_new(list, o) != 0)
            ok = false;
    }
    put(root, "refused", list, &ok);
    return finish(root, ok && root != NULL, err);
}

/* ---- live resize ---- */

int annot_resize_decode(const char *text, size_t len, struct annot_resize *out, struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > ANNOT_RESIZE_MAX_BYTES)
        return vg_err_set(err, -E2BIG, "%s is %zu bytes, more than the %d allowed",
                          ANNOT_KEY_RESIZE, len, ANNOT_RESIZE_MAX_BYTES);
    VG_AUTO_JSON json_t *root = parse(text, len, ANNOT_KEY_RESIZE, err);
    if (root == NULL)
        return err != NULL ? err->code : -EINVAL;
    uint64_t mib = 0, cores = 0;
    int rc;
    if ((rc = get_string(root, ANNOT_KEY_RESIZE, "id", out->id, sizeof out->id, true, err)) ||
        (rc = get_string(root, ANNOT_KEY_RESIZE, "container", out->container, sizeof out->container,
                         false, err)) ||
        (rc = get_uint(root, ANNOT_KEY_RESIZE, "memoryMiB", 1, ANNOT_RESIZE_MAX_MIB, false, &mib,
                       err)) ||
        (rc = get_uint(root, ANNOT_KEY_RESIZE, "cores", 1, 100, false, &cores, err)))
        return rc;
    if (!annot_dns_label(out->id))
        return vg_err_set(err, -EINVAL, "%s.id: not an RFC 1123 label (1..63 of a-z, 0-9, '-')",
                          ANNOT_KEY_RESIZE);
    if (out->container[0] != '\0' && !annot_dns_label(out->container))
        return vg_err_set(err, -EINVAL, "%s.container: not a container name", ANNOT_KEY_RESIZE);
    if (mib == 0 && cores == 0)
        return vg_err_set(err, -EINVAL, "%s: neither memoryMiB nor cores: nothing to change",
                          ANNOT_KEY_RESIZE);
    out->memory_mib = mib;
    out->cores = (unsigned)cores;
    return 0;
}

char *annot_resize_encode(const struct annot_resize *in, struct vg_err *err)
{
    bool ok = true;
    json_t *root = json_object();
    put(root, "version", json_integer(ANNOT_VERSION), &ok);
    put(root, "id", json_string(in->id), &ok);
    if (in->container[0] != '\0')
        put(root, "container", json_string(in->container), &ok);
    if (in->memory_mib > 0)
        put(root, "memoryMiB", json_integer((json_int_t)in->memory_mib), &ok);
    if (in->cores > 0)
        put(root, "cores", json_integer(in->cores), &ok);
    return finish(root, ok && root != NULL, err);
}

int annot_resize_status_decode(const char *text, size_t len, struct annot_resize_status *out,
                               struct vg_err *err)
{
    memset(out, 0, sizeof *out);
    if (len > ANNOT_RESIZE_MAX_BYTES)
        return vg_err_set(err, -E2BIG, "%s is %zu bytes, more than the %d allowed",
                          ANNOT_KEY_RESIZE_STATUS, len, ANNOT_RESIZE_MAX_BYTES);
    VG_AUTO_JSON json_t *root = parse(text, len, ANNOT_KEY_RESIZE_STATUS, err);
    if (root == NULL)
        return err != NULL ? err->code : -EINVAL;
    char state[16];
    uint64_t gen = 0, time = 0;
    int rc;
    if ((rc =
             get_string(root, ANNOT_KEY_RESIZE_STATUS, "id", out->id, sizeof out->id, true, err)) ||
        (rc = get_string(root, ANNOT_KEY_RESIZE_STATUS, "state", state, sizeof state, true, err)) ||
        (rc = get_string(root, ANNOT_KEY_RESIZE_STATUS, "reason", out->reason, sizeof out->reason,
                         false, err)) ||
        (rc = get_uint(root, ANNOT_KEY_RESIZE_STATUS, "generation", 0, INT64_MAX, false, &gen,
                       err)) ||
        (rc = get_uint(root, ANNOT_KEY_RESIZE_STATUS, "time", 0, INT64_MAX, false, &time, err)))
        return rc;
    json_t *earlier = NULL;
    if (json_object_get(root, "earlier") != NULL &&
        (rc = get_array(root, ANNOT_KEY_RESIZE_STATUS, "earlier", ANNOT_RESIZE_EARLIER, &earlier,
                        err)))
        return rc;
    for (size_t i = 0; i < json_array_size(earlier); i++) {
        json_t *e = json_array_get(earlier, i);
        const char *t = json_string_value(e);
        unsigned long long g;
        char eid[ANNOT_LABEL_MAX + 1], est[16];
        int used = 0;
        if (t == NULL || json_string_length(e) >= ANNOT_RESIZE_EARLIER_LEN ||
            sscanf(t, "%63s %15s %llu%n", eid, est, &g, &used) != 3 || (size_t)used != strlen(t) ||
            strspn(strrchr(t, ' ') + 1, "0123456789") != strlen(strrchr(t, ' ') + 1) ||
            !annot_dns_label(eid) || (strcmp(est, "done") != 0 && strcmp(est, "refused") != 0))
            return vg_err_set(err, -EINVAL,
                              "%s.earlier[%zu]: want \"<id> done|refused <generation>\"",
                              ANNOT_KEY_RESIZE_STATUS, i);
        (void)vg_snprintf(out->earlier[i], sizeof out->earlier[i], "%s %s %llu", eid, est, g);
        out->earlier_count++;
    }
    if (strcmp(state, "done") == 0)
        out->state = ANNOT_RESIZE_DONE;
    else if (strcmp(state, "refused") == 0)
        out->state = ANNOT_RESIZE_REFUSED;
    else
        return vg_err_set(err, -EINVAL, "%s.state: want done or refused", ANNOT_KEY_RESIZE_STATUS);
    if (!annot_dns_label(out->id))
        return vg_err_set(err, -EINVAL, "%s.id: not an RFC 1123 label", ANNOT_KEY_RESIZE_STATUS);
    out->generation = gen;
    out->time = (int64_t)time;
    return 0;
}

char *annot_resize_status_encode(const struct annot_resize_status *in, struct vg_err *err)
{
    bool ok = true;
    json_t *root = json_object();
    put(root, "version", json_integer(ANNOT_VERSION), &ok);
    put(root, "id", json_string(in->id), &ok);
    put(root, "state", json_string(in->state == ANNOT_RESIZE_DONE ? "done" : "refused"), &ok);
    if (in->reason[0] != '\0')
        put(root, "reason", json_string(in->reason), &ok);
    put(root, "generation", json_integer((json_int_t)in->generation), &ok);
    put(root, "time", json_integer(in->time), &ok);
    if (in->earlier_count > 0) {
        json_t *a = json_array();
        for (unsigned i = 0; i < in->earlier_count && i < ANNOT_RESIZE_EARLIER; i++)
            if (json_array_append_new(a, json_string(in->earlier[i])) != 0)
                ok = false;
        put(root, "earlier", a, &ok);
    }
    return finish(root, ok && root != NULL, err);
}

int annot_resize_status_find(const struct annot_resize_status *st, const char *id,
                             enum annot_resize_state *state, uint64_t *generation)
{
    if (strcmp(st->id, id) == 0) {
        *state = st->state;
        *generation = st->generation;
        return 1;
    }
    size_t n = strlen(id);
    for (unsigned i = 0; i < st->earlier_count && i < ANNOT_RESIZE_EARLIER; i++) {
        const char *e = st->earlier[i];
        if (strncmp(e, id, n) != 0 || e[n] != ' ')
            continue;
        *state = strncmp(e + n + 1, "done ", 5) == 0 ? ANNOT_RESIZE_DONE : ANNOT_RESIZE_REFUSED;
        *generation = strtoull(strrchr(e, ' ') + 1, NULL, 10);
        return 1;
    }
    return 0;
}
