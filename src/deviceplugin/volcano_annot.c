/* Volcano's annotation strings, the per-GPU ledger and the search for the pod an Allocate
 * is for (volcano.h; the formats in docs/volcano.md).
 *
 * Volcano's Go decoders split on ':' and ',' and ignore what does not parse (a bad number
 * reads as 0, a short entry is skipped or panics). The decoders here refuse instead: a
 * value that does not read back exactly is never half-served. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/parse.h"
#include "base/str.h"
#include "deviceplugin/volcano.h"

/* ---- codec ---------------------------------------------------------------------------- */

/* Appends to out[size] at *used; -ENOSPC (out unchanged past *used) when it does not fit. */
__attribute__((format(printf, 4, 5))) static int appendf(char *out, size_t size, size_t *used,
                                                         const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - *used) {
        out[*used] = '\0';
        return -ENOSPC;
    }
    *used += (size_t)n;
    return 0;
}

static bool id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Copies field [s, e) into out[size] when it is 1..size-1 id characters. */
static int id_field(const char *s, const char *e, char *out, size_t size, const char *what,
                    size_t at, struct vg_err *err)
{
    size_t n = (size_t)(e - s);
    if (n == 0)
        return vg_err_set(err, -EINVAL, "byte %zu: empty %s", at, what);
    if (n >= size)
        return vg_err_set(err, -EINVAL, "byte %zu: %s longer than %zu characters", at, what,
                          size - 1);
    for (size_t i = 0; i < n; i++)
        if (!id_char(s[i]))
            return vg_err_set(err, -EINVAL, "byte %zu: %s has character 0x%02x", at + i, what,
                              (unsigned)(unsigned char)s[i]);
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

static int num_field(const char *s, const char *e, uint64_t min, uint64_t max, uint64_t *out,
                     const char *what, size_t at, struct vg_err *err)
{
    char buf[24];
    size_t n = (size_t)(e - s);
    struct vg_err perr = {0};
    if (n == 0 || n >= sizeof buf)
        return vg_err_set(err, -EINVAL, "byte %zu: %s is not a number in %llu..%llu", at, what,
                          (unsigned long long)min, (unsigned long long)max);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (vg_parse_u64(buf, min, max, out, &perr) < 0)
        return vg_err_set(err, -EINVAL, "byte %zu: %s '%s': %s", at, what, buf, perr.msg);
    return 0;
}

int vc_pod_devices_decode(const char *text, size_t len, struct vc_pod_devices *out,
                          struct vg_err *err)
{
    /* Only what is filled is written: the struct is 47 KiB and an Allocate decodes one. */
    out->count = 0;
    if (text == NULL)
        return vg_err_set(err, -EINVAL, "no value");
    if (len > ANNOT_MAX_BYTES)
        return vg_err_set(err, -EINVAL, "longer than %d bytes", ANNOT_MAX_BYTES);
    if (memchr(text, '\0', len) != NULL)
        return vg_err_set(err, -EINVAL, "contains a NUL byte");
    if (len == 0)
        return 0;
    const char *p = text, *end = text + len;
    for (;;) {
        if (out->count == ANNOT_MAX_CONTAINERS)
            return vg_err_set(err, -EINVAL, "more than %d containers", ANNOT_MAX_CONTAINERS);
        struct vc_segment *seg = &out->segs[out->count++];
        seg->count = 0;
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *se = semi ? semi : end;
        while (p < se) {
            size_t at = (size_t)(p - text);
            const char *colon = memchr(p, ':', (size_t)(se - p));
            if (colon == NULL)
                return vg_err_set(err, -EINVAL,
                                  "byte %zu: device entry without its closing ':' (truncated?)",
                                  at);
            if (seg->count == ANNOT_MAX_GPUS)
                return vg_err_set(err, -EINVAL, "byte %zu: more than %d devices in a container", at,
                                  ANNOT_MAX_GPUS);
            struct vc_device *d = &seg->devs[seg->count];
            const char *f[5];
            size_t nf = 0;
            f[nf++] = p;
            for (const char *q = p; q < colon; q++)
                if (*q == ',') {
                    if (nf == 4)
                        return vg_err_set(err, -EINVAL,
                                          "byte %zu: more than 4 fields "
                                          "(UUID,Type,Memory,Cores)",
                                          at);
                    f[nf++] = q + 1;
                }
            if (nf != 4)
                return vg_err_set(err, -EINVAL,
                                  "byte %zu: %zu field%s, expected 4 (UUID,Type,Memory,Cores)", at,
                                  nf, nf == 1 ? "" : "s");
            uint64_t mem, cores;
            int rc;
            if ((rc = id_field(f[0], f[1] - 1, d->uuid, sizeof d->uuid, "UUID", at, err)) < 0 ||
                (rc = id_field(f[1], f[2] - 1, d->type, sizeof d->type, "type",
                               (size_t)(f[1] - text), err)) < 0 ||
                (rc = num_field(f[2], f[3] - 1, 1, INT32_MAX, &mem, "memory", (size_t)(f[2] - text),
                                err)) < 0 ||
                (rc = num_field(f[3], colon, 0, 100, &cores, "cores", (size_t)(f[3] - text), err)) <
                    0)
                return rc;
            for (unsigned k = 0; k < seg->count; k++)
                if (strcmp(seg->devs[k].uuid, d->uuid) == 0)
                    return vg_err_set(err, -EINVAL, "byte %zu: GPU %s twice in one container", at,
                                      d->uuid);
            d->memory = mem;
            d->cores = (unsigned)cores;
            seg->count++;
            p = colon + 1;
        }
        if (semi == NULL)
            break;
        p = semi + 1;
    }
    return 0;
}

int vc_pod_devices_encode(const struct vc_pod_devices *in, char *out, size_t size,
                          struct vg_err *err)
{
    size_t used = 0;
    if (size == 0)
        return vg_err_set(err, -ENOSPC, "no room");
    out[0] = '\0';
    for (unsigned s = 0; s < in->count; s++) {
        if (s > 0 && appendf(out, size, &used, ";") < 0)
            return vg_err_set(err, -ENOSPC, "devices do not fit in %zu bytes", size);
        for (unsigned i = 0; i < in->segs[s].count; i++) {
            const struct vc_device *d = &in->segs[s].devs[i];
            if (appendf(out, size, &used, "%s,%s,%llu,%u:", d->uuid, d->type,
                        (unsigned long long)d->memory, d->cores) < 0)
                return vg_err_set(err, -ENOSPC, "devices do not fit in %zu bytes", size);
        }
    }
    return 0;
}

static bool field_ok(const char *s, bool spaces)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (*s == ',' || *s == ':' || *s == ';' || (unsigned char)*s < 0x20 ||
            (!spaces && *s == ' '))
            return false;
    return true;
}

int vc_node_register_encode(const struct vc_node_device *devs, unsigned n, char *out, size_t size,
                            struct vg_err *err)
{
    size_t used = 0;
    if (size == 0)
        return vg_err_set(err, -ENOSPC, "no room");
    out[0] = '\0';
    for (unsigned i = 0; i < n; i++) {
        const struct vc_node_device *d = &devs[i];
        if (!field_ok(d->uuid, false) || !field_ok(d->type, true) || !field_ok(d->mode, false))
            return vg_err_set(err, -EINVAL,
                              "GPU %u: a UUID, type or mode with ',', ':' or ';' cannot be "
                              "published",
                              i);
        if (appendf(out, size, &used, "%s,%llu,%llu,%s,%s,%s:", d->uuid,
                    (unsigned long long)d->count, (unsigned long long)d->memory, d->type,
                    d->healthy ? "true" : "false", d->mode) < 0)
            return vg_err_set(err, -ENOSPC, "the GPU list does not fit in %zu bytes", size);
    }
    return 0;
}

static int copy_field(const char *s, const char *e, char *out, size_t size, bool spaces,
                      const char *what, size_t at, struct vg_err *err)
{
    size_t n = (size_t)(e - s);
    if (n == 0 || n >= size)
        return vg_err_set(err, -EINVAL, "byte %zu: %s empty or longer than %zu", at, what,
                          size - 1);
    memcpy(out, s, n);
    out[n] = '\0';
    if (!field_ok(out, spaces))
        return vg_err_set(err, -EINVAL, "byte %zu: %s has a character it cannot hold", at, what);
    return 0;
}

int vc_node_register_decode(const char *text, size_t len, struct vc_node_device *devs, unsigned max,
                            unsigned *n, struct vg_err *err)
{
    *n = 0;
    if (len > ANNOT_MAX_BYTES || memchr(text, '\0', len) != NULL)
        return vg_err_set(err, -EINVAL, "too long or contains a NUL byte");
    const char *p = text, *end = text + len;
    while (p < end) {
        size_t at = (size_t)(p - text);
        const char *colon = memchr(p, ':', (size_t)(end - p));
        if (colon == NULL)
            return vg_err_set(err, -EINVAL, "byte %zu: entry without its closing ':'", at);
        if (*n == max)
            return vg_err_set(err, -EINVAL, "more than %u GPUs", max);
        const char *f[7];
        size_t nf = 0;
        f[nf++] = p;
        for (const char *q = p; q < colon; q++)
            if (*q == ',') {
                if (nf == 6)
                    return vg_err_set(err, -EINVAL, "byte %zu: more than 6 fields", at);
                f[nf++] = q + 1;
            }
        if (nf != 6)
            return vg_err_set(err, -EINVAL, "byte %zu: %zu fields, expected 6", at, nf);
        f[6] = colon + 1;
        struct vc_node_device *d = &devs[*n];
        memset(d, 0, sizeof(*d));
        int rc;
        char health[8];
        if ((rc = copy_field(f[0], f[1] - 1, d->uuid, sizeof d->uuid, false, "UUID", at, err)) <
                0 ||
            (rc = num_field(f[1], f[2] - 1, 0, INT32_MAX, &d->count, "count", at, err)) < 0 ||
            (rc = num_field(f[2], f[3] - 1, 0, INT32_MAX, &d->memory, "memory", at, err)) < 0 ||
            (rc = copy_field(f[3], f[4] - 1, d->type, sizeof d->type, true, "type", at, err)) < 0 ||
            (rc = copy_field(f[4], f[5] - 1, health, sizeof health, false, "health", at, err)) <
                0 ||
            (rc = copy_field(f[5], colon, d->mode, sizeof d->mode, false, "mode", at, err)) < 0)
            return rc;
        if (strcmp(health, "true") != 0 && strcmp(health, "false") != 0)
            return vg_err_set(err, -EINVAL, "byte %zu: health '%s' is not true or false", at,
                              health);
        d->healthy = strcmp(health, "true") == 0;
        (*n)++;
        p = colon + 1;
    }
    return 0;
}

int64_t vc_parse_time(const char *s)
{
    /* On every pod of every Allocate: a plain digit walk, no message formatting. */
    if (s == NULL || *s == '\0' || strlen(s) > 18)
        return -1;
    int64_t v = 0;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
    }
    return v;
}

/* ---- ledger ----------------------------------------------------------------------------- */

void vc_ledger_used(const struct vc_ledger *l, const char *uuid, uint64_t *memory_mib,
                    unsigned *cores)
{
    *memory_mib = 0;
    *cores = 0;
    for (size_t i = 0; i < l->count; i++)
        for (unsigned g = 0; g < l->items[i].gpu_count; g++)
            if (strcmp(l->items[i].gpus[g].uuid, uuid) == 0) {
                *memory_mib += l->items[i].gpus[g].memory_mib;
                *cores += l->items[i].gpus[g].cores;
            }
}

bool vc_ledger_has(const struct vc_ledger *l, const char *pod_uid, unsigned segment)
{
    for (size_t i = 0; i < l->count; i++)
        if (l->items[i].segment == segment && strcmp(l->items[i].pod_uid, pod_uid) == 0)
            return true;
    return false;
}

int vc_ledger_check(const struct vc_ledger *l, const struct vc_charge *c,
                    uint64_t (*capacity_mib)(void *arg, const char *uuid), void *arg,
                    struct vg_err *err)
{
    for (unsigned g = 0; g < c->gpu_count; g++) {
        uint64_t mem, cap = capacity_mib(arg, c->gpus[g].uuid);
        unsigned cores;
        vc_ledger_used(l, c->gpus[g].uuid, &mem, &cores);
        uint64_t left = mem < cap ? cap - mem : 0;
        if (c->gpus[g].memory_mib > left)
            return vg_err_set(err, -ENOSPC,
                              "GPU %s: %llu MiB asked, %llu MiB left of %llu (already promised "
                              "to other containers)",
                              c->gpus[g].uuid, (unsigned long long)c->gpus[g].memory_mib,
                              (unsigned long long)left, (unsigned long long)cap);
        if (cores + c->gpus[g].cores > 100)
            return vg_err_set(err, -ENOSPC,
                              "GPU %s: %u %% of compute asked, %u %% left (already promised to "
                              "other containers)",
                              c->gpus[g].uuid, c->gpus[g].cores, 100 - (cores > 100 ? 100 : cores));
    }
    return 0;
}

int vc_ledger_add(struct vc_ledger *l, const struct vc_charge *c, struct vg_err *err)
{
    if (vc_ledger_has(l, c->pod_uid, c->segment))
        return 0;
    if (l->count == VC_LEDGER_MAX)
        return vg_err_set(err, -ENOSPC, "more than %d containers with GPUs on this node",
                          VC_LEDGER_MAX);
    l->items[l->count++] = *c;
    return 0;
}

void vc_ledger_drop_charge(struct vc_ledger *l, const char *pod_uid, unsigned segment)
{
    size_t k = 0;
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->items[i].pod_uid, pod_uid) != 0 || l->items[i].segment != segment)
            l->items[k++] = l->items[i];
    l->count = k;
}

void vc_ledger_drop_pod(struct vc_ledger *l, const char *pod_uid, bool all)
{
    size_t k = 0;
    for (size_t i = 0; i < l->count; i++)
        if (strcmp(l->items[i].pod_uid, pod_uid) != 0 || (!all && l->items[i].local))
            l->items[k++] = l->items[i];
    l->count = k;
}

static const char *ann(json_t *pod, const char *key)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(pod, "metadata"), "annotations"), key));
}

static const char *meta(json_t *pod, const char *key)
{
    return json_string_value(json_object_get(json_object_get(pod, "metadata"), key));
}

static bool finished(json_t *pod)
{
    const char *phase = json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
    return phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0);
}

void vc_ledger_put_pod(struct vc_ledger *l, json_t *pod, const char *node, uint64_t factor)
{
    const char *uid = meta(pod, "uid");
    if (uid == NULL)
        return;
    vc_ledger_drop_pod(l, uid, finished(pod));
    const char *where = ann(pod, VC_KEY_NODE), *ids = ann(pod, VC_KEY_IDS);
    const char *phase = ann(pod, VC_KEY_BIND_PHASE), *left = ann(pod, VC_KEY_TO_ALLOCATE);
    if (finished(pod) || where == NULL || strcmp(where, node) != 0 || ids == NULL ||
        (phase != NULL && strcmp(phase, "failed") == 0))
        return;
    struct vc_pod_devices *all = malloc(2 * sizeof(*all));
    if (all == NULL)
        return;
    struct vc_pod_devices *remain = &all[1];
    bool success = phase != NULL && strcmp(phase, "success") == 0;
    if (vc_pod_devices_decode(ids, strlen(ids), all, NULL) < 0 ||
        (!success &&
         (left == NULL || vc_pod_devices_decode(left, strlen(left), remain, NULL) < 0))) {
        free(all);
        return;
    }
    for (unsigned s = 0; s < all->count; s++) {
        if (all->segs[s].count == 0 || (!success && s < remain->count && remain->segs[s].count))
            continue;
        struct vc_charge c = {.segment = s, .gpu_count = all->segs[s].count};
        vg_strlcpy(c.pod_uid, uid, sizeof c.pod_uid);
        for (unsigned g = 0; g < c.gpu_count; g++) {
            vg_strlcpy(c.gpus[g].uuid, all->segs[s].devs[g].uuid, sizeof c.gpus[g].uuid);
            c.gpus[g].memory_mib = all->segs[s].devs[g].memory * factor;
            c.gpus[g].cores = all->segs[s].devs[g].cores;
        }
        (void)vc_ledger_add(l, &c, NULL);
    }
    free(all);
}

/* ---- pending pods ---------------------------------------------------------------------- */

static bool limits_has(json_t *container, const char *name)
{
    json_t *res = json_object_get(container, "resources");
    return json_object_get(json_object_get(res, "limits"), name) != NULL ||
           json_object_get(json_object_get(res, "requests"), name) != NULL;
}

int vc_gpu_containers(json_t *pod, const struct dpconfig_volcano *v, char (*names)[ANNOT_NAME_MAX],
                      struct vg_err *err)
{
    json_t *cs = json_object_get(json_object_get(pod, "spec"), "containers");
    if (!json_is_array(cs) || json_array_size(cs) == 0)
        return vg_err_set(err, -EINVAL, "the pod has no containers");
    int n = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cs, i, c)
    {
        if (!limits_has(c, v->count_name) && !limits_has(c, v->memory_name))
            continue;
        const char *name = json_string_value(json_object_get(c, "name"));
        if (!annot_dns_label(name))
            return vg_err_set(err, -EINVAL, "container %zu: name is not an RFC 1123 label", i);
        if (n == ANNOT_MAX_CONTAINERS)
            return vg_err_set(err, -EINVAL, "more than %d containers with GPUs",
                              ANNOT_MAX_CONTAINERS);
        vg_strlcpy(names[n++], name, ANNOT_NAME_MAX);
    }
    return n;
}

static void fill_identity(json_t *pod, struct vc_pending *out)
{
    out->pod = pod;
    vg_strlcpy(out->pod_uid, meta(pod, "uid") ? meta(pod, "uid") : "", sizeof out->pod_uid);
    vg_strlcpy(out->pod_namespace, meta(pod, "namespace") ? meta(pod, "namespace") : "",
               sizeof out->pod_namespace);
    vg_strlcpy(out->pod_name, meta(pod, "name") ? meta(pod, "name") : "", sizeof out->pod_name);
    out->time = vc_parse_time(ann(pod, VC_KEY_TIME));
}

/* The next segment of devices-to-allocate without decoding it: the first one with an
 * entry (a ':'-ended entry, or trailing text, which the full decode then refuses) that the
 * ledger does not hold. Counts its entries into *count; false when none is left. */
static bool next_segment(const char *s, const char *uid, const struct vc_ledger *ledger,
                         unsigned *seg, unsigned *count)
{
    for (unsigned i = 0;; i++) {
        unsigned n = 0;
        const char *p = s;
        for (; *p && *p != ';'; p++)
            n += *p == ':';
        if (p > s && p[-1] != ':')
            n++;
        if (n > 0 && !vc_ledger_has(ledger, uid, i)) {
            *seg = i;
            *count = n;
            return true;
        }
        if (*p == '\0')
            return false;
        s = p + 1;
    }
}

static int64_t waiting_time(json_t *pod, const char *node)
{
    json_t *a = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const char *where = json_string_value(json_object_get(a, VC_KEY_NODE));
    const char *left = json_string_value(json_object_get(a, VC_KEY_TO_ALLOCATE));
    const char *phase = json_string_value(json_object_get(a, VC_KEY_BIND_PHASE));
    if (where == NULL || left == NULL || left[0] == '\0' || strcmp(where, node) != 0 ||
        (phase != NULL && strcmp(phase, "allocating") != 0))
        return -1;
    return vc_parse_time(json_string_value(json_object_get(a, VC_KEY_TIME)));
}

void vc_waiting_drop(struct vc_waiting *w, const char *uid)
{
    for (size_t i = 0; i < w->count; i++)
        if (strcmp(w->items[i].uid, uid) == 0) {
            json_decref(w->items[i].pod);
            memmove(&w->items[i], &w->items[i + 1], (w->count - i - 1) * sizeof(w->items[0]));
            w->count--;
            return;
        }
}

void vc_waiting_put(struct vc_waiting *w, json_t *pod, const char *node)
{
    const char *uid = meta(pod, "uid");
    if (uid == NULL || strlen(uid) >= sizeof(w->items[0].uid))
        return;
    vc_waiting_drop(w, uid);
    int64_t t = waiting_time(pod, node);
    if (t < 0)
        return;
    if (w->count == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        struct vc_wait *items = realloc(w->items, cap * sizeof(*items));
        if (items == NULL)
            return;
        w->items = items;
        w->cap = cap;
    }
    size_t at = w->count;
    while (at > 0 && w->items[at - 1].time > t)
        at--;
    memmove(&w->items[at + 1], &w->items[at], (w->count - at) * sizeof(w->items[0]));
    w->items[at].pod = json_incref(pod);
    w->items[at].time = t;
    vg_strlcpy(w->items[at].uid, uid, sizeof w->items[at].uid);
    w->count++;
}

void vc_waiting_clear(struct vc_waiting *w)
{
    for (size_t i = 0; i < w->count; i++)
        json_decref(w->items[i].pod);
    w->count = 0;
}

void vc_waiting_free(struct vc_waiting *w)
{
    vc_waiting_clear(w);
    free(w->items);
    w->items = NULL;
    w->cap = 0;
}

int vc_find_pending(const struct vc_waiting *w, const char *node, const struct dpconfig_volcano *v,
                    const struct vc_ledger *ledger, size_t count, struct vc_pending *out,
                    json_t **twin, struct vg_err *err)
{
    json_t *best = NULL, *tie = NULL;
    int64_t best_time = -1;
    unsigned best_seg = 0;
    *twin = NULL;
    /* Oldest first: the walk ends at the first pod that fits, or at the last of its time. */
    for (size_t i = 0; i < w->count && (best == NULL || w->items[i].time == best_time); i++) {
        json_t *pod = w->items[i].pod;
        const char *left = ann(pod, VC_KEY_TO_ALLOCATE), *uid = w->items[i].uid;
        unsigned seg, n;
        /* The annotations are read again (the entry may be older than a change), and the
         * names reach an API path and a directory: Kubernetes' own rules or not at all. */
        if (waiting_time(pod, node) != w->items[i].time || finished(pod) || !annot_pod_uid(uid) ||
            !annot_dns_label(meta(pod, "namespace")) || !annot_dns_subdomain(meta(pod, "name")) ||
            strlen(left) > ANNOT_MAX_BYTES || !next_segment(left, uid, ledger, &seg, &n) ||
            n != count)
            continue;
        if (best == NULL) {
            best = pod;
            best_time = w->items[i].time;
            best_seg = seg;
        } else {
            tie = pod;
            break;
        }
    }
    /* out->remain (large) is filled by the decode below, the rest here. */
    out->pod = NULL;
    out->pod_uid[0] = out->pod_namespace[0] = out->pod_name[0] = out->container[0] = '\0';
    out->segment = 0;
    out->time = -1;
    out->remain.count = 0;
    if (best == NULL)
        return vg_err_set(err, -ENOENT,
                          "no pod placed on node %s by Volcano waits for %zu GPU%s "
                          "(annotations %s, %s)",
                          node, count, count == 1 ? "" : "s", VC_KEY_NODE, VC_KEY_TO_ALLOCATE);
    fill_identity(best, out);
    const char *left = ann(best, VC_KEY_TO_ALLOCATE);
    struct vg_err derr = {0};
    if (vc_pod_devices_decode(left, strlen(left), &out->remain, &derr) < 0)
        return vg_err_set(err, -EINVAL, "pod %s/%s: %s: %s", out->pod_namespace, out->pod_name,
                          VC_KEY_TO_ALLOCATE, derr.msg);
    out->segment = best_seg;
    if (tie != NULL) {
        *twin = tie;
        return vg_err_set(err, -EEXIST,
                          "pods %s/%s and %s/%s wait for %zu GPU%s with the same %s %lld: "
                          "cannot tell which one kubelet is allocating",
                          out->pod_namespace, out->pod_name, meta(tie, "namespace"),
                          meta(tie, "name"), count, count == 1 ? "" : "s", VC_KEY_TIME,
                          (long long)best_time);
    }
    char names[ANNOT_MAX_CONTAINERS][ANNOT_NAME_MAX];
    int n = vc_gpu_containers(best, v, names, err);
    if (n < 0)
        return n;
    /* Segment i belongs to the i-th container asking for GPUs, never to spec.containers[i]. */
    if ((int)best_seg >= n)
        return vg_err_set(err, -EINVAL,
                          "pod %s/%s: the decision has a segment %u but only %d container%s "
                          "ask%s for GPUs",
                          out->pod_namespace, out->pod_name, best_seg, n, n == 1 ? "" : "s",
                          n == 1 ? "s" : "");
    vg_strlcpy(out->container, names[best_seg], sizeof out->container);
    return 0;
}
