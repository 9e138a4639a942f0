/* ResourceSlices of vgpu's DRA driver: build, decode, publish (slices.h). */
#include "dra/slices.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "base/auto_json.h"
#include "base/mem.h"
#include "base/str.h"
#include "kube/kube.h"

/* ---- names ---------------------------------------------------------------------------- */

static bool dns_label_ok(const char *s, size_t len)
{
    if (len == 0 || len > 63 || !isalnum((unsigned char)s[0]) ||
        !isalnum((unsigned char)s[len - 1]))
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!(islower(c) || isdigit(c) || c == '-'))
            return false;
    }
    return true;
}

static bool dns_subdomain_ok(const char *s, size_t limit)
{
    size_t len = strlen(s);
    if (len == 0 || len > limit)
        return false;
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (!dns_label_ok(p, n))
            return false;
        if (dot == NULL)
            return true;
        p = dot + 1;
    }
}

void dra_gpu_device_name(const struct dp_gpu *gpu, const struct dp_mig *mig, char *name)
{
    if (mig == NULL)
        vg_snprintf(name, DRA_DEVICE_NAME_MAX, "gpu-%u", gpu->minor);
    else
        vg_snprintf(name, DRA_DEVICE_NAME_MAX, "gpu-%u-mig-%u-%u", gpu->minor, mig->gi, mig->ci);
}

/* "<node>-<driver>-<i>"; a node name too long for that is cut and followed by a hash of
 * the whole name, so that two long node names never share slice names. */
static void slice_name(const char *node, const char *driver, size_t i, char *out)
{
    char suffix[96];
    vg_snprintf(suffix, sizeof suffix, "-%s-%zu", driver, i);
    size_t room = DRA_NAME_MAX - 1 - strlen(suffix);
    if (strlen(node) <= room) {
        vg_snprintf(out, DRA_NAME_MAX, "%s%s", node, suffix);
        return;
    }
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (const char *p = node; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    size_t keep = room - 17;
    while (keep > 0 && !isalnum((unsigned char)node[keep - 1]))
        keep--;
    vg_snprintf(out, DRA_NAME_MAX, "%.*s-%016" PRIx64 "%s", (int)keep, node, h, suffix);
}

/* ---- attribute values ----------------------------------------------------------------- */

int dra_semver(const char *text, char *out, size_t size, struct vg_err *err)
{
    unsigned long long part[3] = {0, 0, 0};
    const char *p = text ? text : "";
    int n = 0;
    while (n < 3) {
        if (!isdigit((unsigned char)*p))
            return vg_err_set(err, -EINVAL, "version '%.64s' is not numeric", text ? text : "");
        unsigned long long v = 0;
        size_t digits = 0;
        while (isdigit((unsigned char)*p)) {
            if (++digits > 9)
                return vg_err_set(err, -EINVAL, "version '%.64s': component too large", text);
            v = v * 10 + (unsigned long long)(*p++ - '0');
        }
        part[n++] = v;
        if (*p == '\0')
            break;
        if (*p != '.')
            return vg_err_set(err, -EINVAL, "version '%.64s' is not numeric", text);
        p++;
    }
    if (*p != '\0')
        return vg_err_set(err, -EINVAL, "version '%.64s' has more than three components", text);
    if (vg_snprintf(out, size, "%llu.%llu.%llu", part[0], part[1], part[2]) < 0)
        return vg_err_set(err, -ENOSPC, "version '%.64s' does not fit", text);
    return 0;
}

const char *dra_architecture(int major, int minor)
{
    switch (major) {
    case 3:
        return "Kepler";
    case 5:
        return "Maxwell";
    case 6:
        return "Pascal";
    case 7:
        return minor >= 5 ? "Turing" : "Volta";
    case 8:
        return minor == 9 ? "Ada Lovelace" : "Ampere";
    case 9:
        return "Hopper";
    case 10:
    case 12:
        return "Blackwell";
    default:
        return NULL;
    }
}

/* NVML's "00000000:3B:00.0" as resource.kubernetes.io/pciBusID wants it:
 * "0000:3b:00.0" (4-digit domain, lowercase). false when it does not parse. */
static bool pci_bus_id(const char *in, char *out, size_t size)
{
    const char *colon = strchr(in, ':');
    if (colon == NULL || colon - in < 4 || strlen(colon) != 8)
        return false;
    for (const char *p = colon - 4; *p; p++)
        if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
            return false;
    if (colon[3] != ':' || colon[6] != '.')
        return false;
    char buf[16];
    vg_snprintf(buf, sizeof buf, "%.4s%s", colon - 4, colon);
    for (char *p = buf; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return vg_strlcpy(out, buf, size) >= 0;
}

static int set_attr(json_t *attrs, const char *name, const char *type, json_t *value)
{
    json_t *typed = json_object();
    json_object_set_new(typed, type, value);
    return json_object_set_new(attrs, name, typed);
}

static void set_string(json_t *attrs, const char *name, const char *value)
{
    char cut[DRA_ATTR_MAX_VALUE + 1];
    vg_strlcpy(cut, value, sizeof cut); /* the API's limit: longer is cut, not refused */
    set_attr(attrs, name, "string", json_string(cut));
}

static json_t *quantity_mib(uint64_t mib)
{
    char text[32];
    vg_snprintf(text, sizeof text, "%" PRIu64 "Mi", mib);
    return json_string(text);
}

static json_t *quantity_bytes(uint64_t bytes)
{
    char text[32];
    if (bytes % (1ull << 20) == 0)
        vg_snprintf(text, sizeof text, "%" PRIu64 "Mi", bytes >> 20);
    else
        vg_snprintf(text, sizeof text, "%" PRIu64, bytes);
    return json_string(text);
}

static json_t *quantity_int(uint64_t v)
{
    char text[32];
    vg_snprintf(text, sizeof text, "%" PRIu64, v);
    return json_string(text);
}

/* Attributes shared by a GPU and its MIG devices. */
static void common_attrs(json_t *attrs, const struct dp_gpu *gpu, const char *driver_version)
{
    set_string(attrs, "productName", gpu->model);
    const char *arch = dra_architecture(gpu->cc_major, gpu->cc_minor);
    if (arch != NULL)
        set_string(attrs, "architecture", arch);
    if (gpu->cc_major > 0) {
        char cc[32];
        vg_snprintf(cc, sizeof cc, "%d.%d.0", gpu->cc_major, gpu->cc_minor);
        set_attr(attrs, "cudaComputeCapability", "version", json_string(cc));
    }
    if (driver_version != NULL && driver_version[0] != '\0')
        set_attr(attrs, "driverVersion", "version", json_string(driver_version));
    set_attr(attrs, "index", "int", json_integer((json_int_t)gpu->index));
    set_attr(attrs, "minor", "int", json_integer((json_int_t)gpu->minor));
    if (gpu->numa >= 0)
        set_attr(attrs, "numaNode", "int", json_integer(gpu->numa));
    char bus[32];
    if (pci_bus_id(gpu->pci_bus_id, bus, sizeof bus))
        set_string(attrs, "resource.kubernetes.io/pciBusID", bus);
}

static json_t *gpu_device(const struct dra_slice_options *o, const struct dp_gpu *gpu,
                          const char *driver_version)
{
    char name[DRA_DEVICE_NAME_MAX];
    dra_gpu_device_name(gpu, NULL, name);
    json_t *attrs = json_object();
    set_string(attrs, "type", "gpu");
    set_string(attrs, "uuid", gpu->uuid);
    common_attrs(attrs, gpu, driver_version);

    uint64_t total = gpu->memory_mib << 20;
    json_t *memory = json_pack("{s:o}", "value", quantity_mib(gpu->memory_mib));
    json_t *cores = json_pack("{s:o}", "value", quantity_int(100));
    json_t *dev = json_pack("{s:s, s:o}", "name", name, "attributes", attrs);
    if (o->consumable) {
        /* A claim that names no amount gets the whole device; one that does gets it
         * rounded up to the step. The default is kept on the step grid. */
        uint64_t step = o->memory_step ? o->memory_step : DRA_DEFAULT_MEMORY_STEP;
        uint64_t dflt = total >= step ? step + ((total - step) / step) * step : total;
        json_object_set_new(memory, "requestPolicy",
                            json_pack("{s:o, s:{s:o, s:o, s:o}}", "default", quantity_bytes(dflt),
                                      "validRange", "min", quantity_bytes(step), "max",
                                      quantity_bytes(total), "step", quantity_bytes(step)));
        json_object_set_new(cores, "requestPolicy",
                            json_pack("{s:o, s:{s:o, s:o, s:o}}", "default", quantity_int(100),
                                      "validRange", "min", quantity_int(1), "max",
                                      quantity_int(100), "step", quantity_int(1)));
        json_object_set_new(dev, "allowMultipleAllocations", json_true());
    }
    json_object_set_new(dev, "capacity", json_pack("{s:o, s:o}", "memory", memory, "cores", cores));
    return dev;
}

static json_t *mig_device(const struct dp_gpu *gpu, const struct dp_mig *mig,
                          const char *driver_version)
{
    char name[DRA_DEVICE_NAME_MAX];
    dra_gpu_device_name(gpu, mig, name);
    json_t *attrs = json_object();
    set_string(attrs, "type", "mig");
    set_string(attrs, "uuid", mig->uuid);
    set_string(attrs, "parentUUID", gpu->uuid);
    set_string(attrs, "profile", mig->profile);
    common_attrs(attrs, gpu, driver_version);
    return json_pack("{s:s, s:o, s:{s:{s:o}, s:{s:o}}}", "name", name, "attributes", attrs,
                     "capacity", "memory", "value", quantity_mib(mig->memory_mib), "cores", "value",
                     quantity_int(100));
}

/* ---- partitionable devices (KEP-4815) --------------------------------------------------- */

static void counter_set_name(const struct dp_gpu *gpu, char *out, size_t size)
{
    vg_snprintf(out, size, "gpu-%u-counters", gpu->minor);
}

/* {memory-slice-<i>: 1 for start..start+size-1, multiprocessors, memory}. */
static json_t *counters(unsigned start, unsigned size, unsigned sms, uint64_t memory_mib)
{
    json_t *c = json_object();
    for (unsigned i = start; i < start + size; i++) {
        char name[32];
        vg_snprintf(name, sizeof name, "memory-slice-%u", i);
        json_object_set_new(c, name, json_pack("{s:s}", "value", "1"));
    }
    json_object_set_new(c, "multiprocessors", json_pack("{s:o}", "value", quantity_int(sms)));
    json_object_set_new(c, "memory", json_pack("{s:o}", "value", quantity_mib(memory_mib)));
    return c;
}

static json_t *consumes(const struct dp_gpu *gpu, json_t *counter_map)
{
    char set[64];
    counter_set_name(gpu, set, sizeof set);
    return json_pack("[{s:s, s:o}]", "counterSet", set, "counters", counter_map);
}

static json_t *partition_device(const struct dp_gpu *gpu, const struct dra_partition *p,
                                const char *driver_version)
{
    char name[DRA_DEVICE_NAME_MAX];
    dra_partition_name(gpu, p, name);
    json_t *attrs = json_object();
    set_string(attrs, "type", "mig");
    set_string(attrs, "parentUUID", gpu->uuid);
    set_string(attrs, "profile", p->profile);
    set_attr(attrs, "profileID", "int", json_integer((json_int_t)p->profile_id));
    set_attr(attrs, "placementStart", "int", json_integer((json_int_t)p->start));
    set_attr(attrs, "placementSize", "int", json_integer((json_int_t)p->size));
    common_attrs(attrs, gpu, driver_version);
    return json_pack("{s:s, s:o, s:{s:{s:o}, s:{s:o}, s:{s:o}}, s:o}", "name", name, "attributes",
                     attrs, "capacity", "memory", "value", quantity_mib(p->memory_mib),
                     "multiprocessors", "value", quantity_int(p->sms), "cores", "value",
                     quantity_int(100), "consumesCounters",
                     consumes(gpu, counters(p->start, p->size, p->sms, p->memory_mib)));
}

/* A dynamic GPU: its counter set into sets, the whole GPU and its partitions into
 * devices. */
static void partitioned_gpu(const struct dra_slice_options *o, const struct dp_gpu *gpu,
                            const struct dra_mig_gpu *mig, const char *driver_version,
                            json_t *devices, json_t *sets)
{
    char set[64];
    counter_set_name(gpu, set, sizeof set);
    json_array_append_new(sets,
                          json_pack("{s:s, s:o}", "name", set, "counters",
                                    counters(0, mig->memory_slices, mig->sms, mig->memory_mib)));
    struct dra_slice_options whole = *o;
    whole.consumable = false; /* a GPU shared by amount cannot also be cut in partitions */
    json_t *dev = gpu_device(&whole, gpu, driver_version);
    json_object_set_new(dev, "consumesCounters",
                        consumes(gpu, counters(0, mig->memory_slices, mig->sms, mig->memory_mib)));
    json_array_append_new(devices, dev);
    for (unsigned k = 0; k < mig->count; k++)
        json_array_append_new(devices, partition_device(gpu, &mig->parts[k], driver_version));
}

/* The taints of a GPU's devices (KEP-5055): key, value, effect and timeAdded (RFC 3339),
 * kept from when the condition began so that republishing does not change them. */
static json_t *taints_json(const char *driver, const struct dra_gpu_health *h)
{
    struct dra_taint t[DRA_MAX_TAINTS];
    unsigned n = dra_health_taints(h, driver, t);
    if (n == 0)
        return NULL;
    json_t *arr = json_array();
    for (unsigned i = 0; i < n; i++) {
        char when[32];
        time_t secs = (time_t)t[i].time_added;
        struct tm tm;
        gmtime_r(&secs, &tm);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        json_t *o =
            json_pack("{s:s, s:s, s:s}", "key", t[i].key, "effect", t[i].effect, "timeAdded", when);
        if (t[i].value[0] != '\0')
            json_object_set_new(o, "value", json_string(t[i].value));
        json_array_append_new(arr, o);
    }
    return arr;
}

int dra_slices_build(const struct dra_slice_options *o, const struct dp_gpu *gpus,
                     unsigned gpu_count, json_t **out, struct vg_err *err)
{
    const char *driver = o->driver ? o->driver : DRA_DRIVER_NAME;
    if (!dns_subdomain_ok(driver, 63))
        return vg_err_set(err, -EINVAL,
                          "driver name '%.80s' is not a lowercase DNS subdomain of at most 63 "
                          "characters",
                          driver);
    if (o->node_name == NULL || !dns_subdomain_ok(o->node_name, 253))
        return vg_err_set(err, -EINVAL, "node name '%.80s' is not a lowercase DNS subdomain",
                          o->node_name ? o->node_name : "");
    if (o->generation < 0)
        return vg_err_set(err, -EINVAL, "pool generation %" PRId64 " is negative", o->generation);
    unsigned per_slice = o->max_devices ? o->max_devices : DRA_SLICE_MAX_DEVICES;
    if (per_slice > DRA_SLICE_MAX_DEVICES)
        return vg_err_set(err, -EINVAL, "%u devices per slice: the API allows at most %d",
                          per_slice, DRA_SLICE_MAX_DEVICES);
    char version[DRA_ATTR_MAX_VALUE + 1] = "";
    if (o->driver_version != NULL && o->driver_version[0] != '\0' &&
        dra_semver(o->driver_version, version, sizeof version, NULL) != 0)
        version[0] = '\0'; /* not a version the API takes: left out, not a failure */

    VG_AUTO_JSON json_t *devices = json_array();
    VG_AUTO_JSON json_t *sets = json_array();
    bool tainted = false, counted = false;
    for (unsigned g = 0; g < gpu_count; g++) {
        const struct dp_gpu *gpu = &gpus[g];
        bool taints = o->taints && o->health != NULL;
        if (!taints && !gpu->healthy)
            continue;
        VG_AUTO_JSON json_t *t = taints ? taints_json(driver, &o->health[g]) : NULL;
        size_t first = json_array_size(devices);
        bool partitioned = o->partitionable && o->migs != NULL && o->migs[g].dynamic;
        if (partitioned) {
            partitioned_gpu(o, gpu, &o->migs[g], version, devices, sets);
            counted = true;
        } else if (!gpu->mig_enabled)
            json_array_append_new(devices, gpu_device(o, gpu, version));
        for (unsigned m = 0;
             !partitioned && gpu->mig_enabled && m < gpu->mig_count && m < DP_MAX_MIGS; m++)
            json_array_append_new(devices, mig_device(gpu, &gpu->migs[m], version));
        for (size_t k = first; t != NULL && k < json_array_size(devices); k++)
            json_object_set_new(json_array_get(devices, k), "taints", json_deep_copy(t));
        tainted |= t != NULL && json_array_size(devices) > first;
    }
    if ((tainted || counted) && per_slice > DRA_SLICE_MAX_TAINTED)
        per_slice = DRA_SLICE_MAX_TAINTED;

    size_t n = json_array_size(devices), nsets = json_array_size(sets);
    size_t device_slices = n == 0 && nsets == 0 ? 1 : (n + per_slice - 1) / per_slice;
    size_t count =
        device_slices + (nsets + DRA_SLICE_MAX_COUNTER_SETS - 1) / DRA_SLICE_MAX_COUNTER_SETS;
    if (count > DRA_MAX_SLICES)
        return vg_err_set(err, -E2BIG, "%zu devices need %zu slices, more than %d", n, count,
                          DRA_MAX_SLICES);
    json_t *slices = json_array();
    for (size_t i = 0; i < count; i++) {
        char name[DRA_NAME_MAX];
        slice_name(o->node_name, driver, i, name);
        json_t *chunk = json_array();
        const char *field = i < device_slices ? "devices" : "sharedCounters";
        if (i < device_slices)
            for (size_t k = i * per_slice; k < n && k < (i + 1) * per_slice; k++)
                json_array_append(chunk, json_array_get(devices, k));
        else /* counter sets: a slice of their own (never with devices) */
            for (size_t k = (i - device_slices) * DRA_SLICE_MAX_COUNTER_SETS;
                 k < nsets && k < (i - device_slices + 1) * DRA_SLICE_MAX_COUNTER_SETS; k++)
                json_array_append(chunk, json_array_get(sets, k));
        json_t *meta = json_pack("{s:s}", "name", name);
        if (o->node_uid != NULL && o->node_uid[0] != '\0')
            json_object_set_new(meta, "ownerReferences",
                                json_pack("[{s:s, s:s, s:s, s:s, s:b}]", "apiVersion", "v1", "kind",
                                          "Node", "name", o->node_name, "uid", o->node_uid,
                                          "controller", 1));
        json_array_append_new(
            slices, json_pack("{s:s, s:s, s:o, s:{s:s, s:s, s:{s:s, s:I, s:I}, s:o}}", "apiVersion",
                              "resource.k8s.io/v1", "kind", "ResourceSlice", "metadata", meta,
                              "spec", "driver", driver, "nodeName", o->node_name, "pool", "name",
                              o->node_name, "generation", (json_int_t)o->generation,
                              "resourceSliceCount", (json_int_t)count, field, chunk));
    }
    *out = slices;
    return 0;
}

/* ---- decode ----------------------------------------------------------------------------- */

static const char *str_at(const json_t *obj, const char *a, const char *b)
{
    const json_t *v = json_object_get(obj, a);
    if (b != NULL)
        v = json_object_get(v, b);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int dra_pool_decode(const json_t *list, const char *driver, const char *node, struct dra_pool *pool,
                    struct vg_err *err)
{
    memset(pool, 0, sizeof *pool);
    pool->max_generation = -1;
    const json_t *items = json_object_get(list, "items");
    if (!json_is_object(list) || !(json_is_array(items) || json_is_null(items) || !items))
        return vg_err_set(err, -EBADMSG, "ResourceSlice list: not an object with an items array");
    size_t i;
    const json_t *item;
    json_array_foreach(items, i, item)
    {
        if (!json_is_object(item))
            return vg_err_set(err, -EBADMSG, "ResourceSlice list: item %zu is not an object", i);
        const json_t *spec = json_object_get(item, "spec");
        const char *d = str_at(spec, "driver", NULL), *n = str_at(spec, "nodeName", NULL);
        if (d == NULL || n == NULL || strcmp(d, driver) != 0 || strcmp(n, node) != 0)
            continue;
        const char *name = str_at(item, "metadata", "name");
        const char *rv = str_at(item, "metadata", "resourceVersion");
        const json_t *gen = json_object_get(json_object_get(spec, "pool"), "generation");
        if (name == NULL || name[0] == '\0' || strlen(name) >= DRA_NAME_MAX)
            return vg_err_set(err, -EBADMSG, "ResourceSlice list: item %zu has no valid name", i);
        if (rv == NULL || rv[0] == '\0' || strlen(rv) >= sizeof pool->slices[0].resource_version)
            return vg_err_set(err, -EBADMSG, "ResourceSlice %.80s: no valid resourceVersion", name);
        if (!json_is_integer(gen) || json_integer_value(gen) < 0)
            return vg_err_set(err, -EBADMSG,
                              "ResourceSlice %.80s: spec.pool.generation is not "
                              "a non-negative integer",
                              name);
        if (pool->count == DRA_MAX_SLICES)
            return vg_err_set(err, -E2BIG, "more than %d ResourceSlices for node %.80s",
                              DRA_MAX_SLICES, node);
        struct dra_pool_slice *s = &pool->slices[pool->count++];
        vg_strlcpy(s->name, name, sizeof s->name);
        vg_strlcpy(s->resource_version, rv, sizeof s->resource_version);
        s->generation = (int64_t)json_integer_value(gen);
        if (s->generation > pool->max_generation)
            pool->max_generation = s->generation;
    }
    return 0;
}

/* name + spec without pool.generation: what a slice says, for comparisons. */
static json_t *content(const json_t *slice)
{
    json_t *spec = json_deep_copy(json_object_get(slice, "spec"));
    json_object_del(json_object_get(spec, "pool"), "generation");
    return json_pack("{s:O?, s:o?}", "name",
                     json_object_get(json_object_get(slice, "metadata"), "name"), "spec", spec);
}

static bool slice_differs(const json_t *a, const json_t *b)
{
    VG_AUTO_JSON json_t *ca = content(a);
    VG_AUTO_JSON json_t *cb = content(b);
    return !json_equal(ca, cb);
}

bool dra_slices_differ(const json_t *a, const json_t *b)
{
    if (json_array_size(a) != json_array_size(b))
        return true;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (slice_differs(json_array_get(a, i), json_array_get(b, i)))
            return true;
    return false;
}

/* ---- publish ---------------------------------------------------------------------------- */

enum step { IDLE, LISTING, WRITING };

struct dra_publisher {
    struct kube_client *client;
    struct event *retry;
    char driver[64];
    char node[DRA_NAME_MAX];
    void (*done)(void *arg);
    void *arg;
    json_t *want;    /* the slices to publish */
    json_t *pending; /* set while a sync runs */
    json_t *writes;  /* [{method, path, body}] of the sync under way */
    size_t next_write;
    enum step step;
    bool in_flight; /* a request is out: its callback frees a freed publisher */
    bool freed;
    int64_t generation;
    struct kube_backoff backoff;
    struct dra_publisher_stats stats;
};

static void start_sync(struct dra_publisher *p);

static void publisher_destroy(struct dra_publisher *p)
{
    if (p->retry != NULL)
        event_free(p->retry);
    json_decref(p->want);
    json_decref(p->pending);
    json_decref(p->writes);
    free(p);
}

static void fail(struct dra_publisher *p, bool conflict)
{
    json_decref(p->writes);
    p->writes = NULL;
    p->step = IDLE;
    if (conflict) {
        p->stats.conflicts++;
        start_sync(p); /* re-read at once: the newer version is there to be read */
        return;
    }
    p->stats.failures++;
    uint64_t ms = kube_backoff_next(&p->backoff);
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(p->retry, &tv);
}

static void write_next(struct dra_publisher *p);

static void write_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    (void)body;
    struct dra_publisher *p = arg;
    p->in_flight = false;
    if (p->freed) {
        publisher_destroy(p);
        return;
    }
    const json_t *w = json_array_get(p->writes, p->next_write);
    bool del = strcmp(json_string_value(json_object_get(w, "method")), "DELETE") == 0;
    if (err->code != 0 && !(del && err->code == -ENOENT)) {
        fail(p, err->code == -EEXIST);
        return;
    }
    p->next_write++;
    write_next(p);
}

static void write_next(struct dra_publisher *p)
{
    if (p->next_write >= json_array_size(p->writes)) {
        json_decref(p->writes);
        p->writes = NULL;
        p->step = IDLE;
        p->stats.syncs++;
        kube_backoff_reset(&p->backoff);
        if (p->done != NULL)
            p->done(p->arg);
        if (p->pending != NULL)
            start_sync(p);
        return;
    }
    const json_t *w = json_array_get(p->writes, p->next_write);
    const char *method = json_string_value(json_object_get(w, "method"));
    const char *path = json_string_value(json_object_get(w, "path"));
    json_t *body = json_object_get(w, "body");
    struct vg_err err = {0};
    int rc;
    p->stats.writes++;
    if (strcmp(method, "POST") == 0)
        rc = kube_post(p->client, path, body, write_done, p, &err);
    else if (strcmp(method, "PUT") == 0)
        rc = kube_put(p->client, path, body, write_done, p, &err);
    else
        rc = kube_delete(p->client, path, write_done, p, &err);
    if (rc != 0) {
        fail(p, false);
        return;
    }
    p->in_flight = true;
}

static const struct dra_pool_slice *find_slice(const struct dra_pool *pool, const char *name)
{
    for (size_t i = 0; i < pool->count; i++)
        if (strcmp(pool->slices[i].name, name) == 0)
            return &pool->slices[i];
    return NULL;
}

static const json_t *find_item(const json_t *list, const char *name)
{
    size_t i;
    const json_t *item;
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        const char *n = str_at(item, "metadata", "name");
        if (n != NULL && strcmp(n, name) == 0)
            return item;
    }
    return NULL;
}

static void list_done(void *arg, long status, json_t *body, const struct vg_err *err)
{
    (void)status;
    struct dra_publisher *p = arg;
    p->in_flight = false;
    if (p->freed) {
        publisher_destroy(p);
        return;
    }
    struct dra_pool pool;
    if (err->code != 0 || dra_pool_decode(body, p->driver, p->node, &pool, NULL) != 0) {
        fail(p, false);
        return;
    }
    /* Changed when a wanted slice is missing or says something else, when one of ours is
     * not wanted any more, or when the slices disagree on the generation. */
    bool changed = false;
    size_t i;
    const json_t *slice;
    json_array_foreach(p->want, i, slice)
    {
        const char *name = str_at(slice, "metadata", "name");
        const json_t *have = find_item(body, name);
        const struct dra_pool_slice *ours = find_slice(&pool, name);
        if (have == NULL || ours == NULL || slice_differs(slice, have) ||
            ours->generation != pool.max_generation)
            changed = true;
    }
    if (pool.count != json_array_size(p->want))
        changed = true;
    int64_t generation = pool.max_generation < 0 ? 0 : pool.max_generation;
    if (changed)
        generation++;
    p->generation = generation;
    json_decref(p->writes);
    p->writes = json_array();
    json_array_foreach(p->want, i, slice)
    {
        const char *name = str_at(slice, "metadata", "name");
        const struct dra_pool_slice *have = find_slice(&pool, name);
        json_t *body_out = json_deep_copy(slice);
        json_object_set_new(json_object_get(json_object_get(body_out, "spec"), "pool"),
                            "generation", json_integer((json_int_t)generation));
        char path[DRA_NAME_MAX + 64];
        if (have == NULL) {
            vg_snprintf(path, sizeof path, DRA_API_PATH "/resourceslices");
            json_array_append_new(p->writes, json_pack("{s:s, s:s, s:o}", "method", "POST", "path",
                                                       path, "body", body_out));
        } else if (changed) {
            vg_snprintf(path, sizeof path, DRA_API_PATH "/resourceslices/%s", name);
            json_object_set_new(json_object_get(body_out, "metadata"), "resourceVersion",
                                json_string(have->resource_version));
            json_array_append_new(p->writes, json_pack("{s:s, s:s, s:o}", "method", "PUT", "path",
                                                       path, "body", body_out));
        } else {
            json_decref(body_out);
        }
    }
    for (size_t k = 0; k < pool.count; k++) {
        bool wanted = false;
        json_array_foreach(p->want, i, slice)
        {
            if (strcmp(str_at(slice, "metadata", "name"), pool.slices[k].name) == 0)
                wanted = true;
        }
        if (!wanted) {
            char path[DRA_NAME_MAX + 64];
            vg_snprintf(path, sizeof path, DRA_API_PATH "/resourceslices/%s", pool.slices[k].name);
            json_array_append_new(p->writes,
                                  json_pack("{s:s, s:s}", "method", "DELETE", "path", path));
        }
    }
    p->step = WRITING;
    p->next_write = 0;
    write_next(p);
}

static void start_sync(struct dra_publisher *p)
{
    if (p->step != IDLE)
        return;
    if (p->pending != NULL) {
        json_decref(p->want);
        p->want = p->pending;
        p->pending = NULL;
    }
    if (p->want == NULL)
        return;
    char path[DRA_NAME_MAX + 160];
    vg_snprintf(path, sizeof path,
                DRA_API_PATH "/resourceslices?fieldSelector=spec.nodeName%%3D%s,spec.driver%%3D%s",
                p->node, p->driver);
    struct vg_err err = {0};
    if (kube_get(p->client, path, list_done, p, &err) != 0) {
        fail(p, false);
        return;
    }
    p->in_flight = true;
    p->step = LISTING;
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    start_sync(arg);
}

int dra_publisher_new(struct event_base *base, struct kube_client *client, const char *driver,
                      const char *node, void (*done)(void *arg), void *arg,
                      struct dra_publisher **out, struct vg_err *err)
{
    driver = driver ? driver : DRA_DRIVER_NAME;
    if (!dns_subdomain_ok(driver, 63) || node == NULL || !dns_subdomain_ok(node, 253))
        return vg_err_set(err, -EINVAL, "publisher: invalid driver '%.80s' or node '%.80s'", driver,
                          node ? node : "");
    struct dra_publisher *p = xcalloc(1, sizeof *p);
    p->client = client;
    vg_strlcpy(p->driver, driver, sizeof p->driver);
    vg_strlcpy(p->node, node, sizeof p->node);
    p->done = done;
    p->arg = arg;
    p->retry = evtimer_new(base, retry_cb, p);
    kube_backoff_init(&p->backoff, 200, 30000, (uint64_t)(uintptr_t)p);
    *out = p;
    return 0;
}

void dra_publisher_free(struct dra_publisher *p)
{
    if (p == NULL)
        return;
    if (p->in_flight) {
        p->freed = true; /* the request's callback frees it */
        evtimer_del(p->retry);
        return;
    }
    publisher_destroy(p);
}

void dra_publisher_destroy(struct dra_publisher *p)
{
    if (p != NULL)
        publisher_destroy(p);
}

int dra_publisher_set(struct dra_publisher *p, json_t *slices, struct vg_err *err)
{
    if (!json_is_array(slices) || json_array_size(slices) == 0)
        return vg_err_set(err, -EINVAL, "publisher: slices must be a non-empty array");
    size_t i;
    const json_t *slice;
    json_array_foreach(slices, i, slice)
    {
        if (str_at(slice, "metadata", "name") == NULL ||
            !json_is_object(json_object_get(json_object_get(slice, "spec"), "pool")))
            return vg_err_set(err, -EINVAL, "publisher: slice %zu has no name or pool", i);
    }
    json_decref(p->pending);
    p->pending = json_incref(slices);
    if (p->step == IDLE && !evtimer_pending(p->retry, NULL))
        start_sync(p);
    return 0;
}

void dra_publisher_get_stats(const struct dra_publisher *p, struct dra_publisher_stats *stats)
{
    *stats = p->stats;
}

int64_t dra_publisher_generation(const struct dra_publisher *p)
{
    return p->generation;
}
