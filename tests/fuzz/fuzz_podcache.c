/* Fuzzes the device plugin's decision cache (src/deviceplugin/podcache.c) with watch
 * event sequences: the input is a list of operations on 8 pod slots — put a pod (one of
 * several decisions: usable, two containers, garbled, another node's, none; phases;
 * being deleted; another scheduler's pod, a spec that does not match, a creation time, a
 * uid, name or namespace Kubernetes would not allow), delete it, relist everything, match
 * and "allocate", roll an allocation back. A MODIFIED pod keeps what the API server never
 * changes (schedulerName, the containers' extended resources, creationTimestamp, uid,
 * namespace).
 *
 * Every match is held to a model of the world kept here, independently of the cache:
 * the cache finds a container exactly when the world has one that is safe to hand out
 * (its pod bound here, not finished or being deleted, scheduled by vgpu, with a valid
 * uid, namespace and name; its decision for this node and matching the pod's spec; the
 * container asks for as many GPUs and has no directory yet), and what it hands out is
 * such a container, with the decision's GPUs, its exact GPUs first when kubelet named
 * them. A refusal names the reason of an unusable decision when the world has one. No
 * name that Kubernetes would not allow reaches the directory check (the path). The cache
 * maintained incrementally also agrees with one built from scratch (dp_match_container).
 * Verdict: the last Allocate's (an input with none reports nothing). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deviceplugin/deviceplugin.h"
#include "deviceplugin/podcache.h"
#include "verdict.h"

#define SLOTS 8
#define UUID0 "GPU-11111111-2222-3333-4444-555555555555"
#define UUID1 "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int slot_of(const char *uid)
{
    return uid[0] == 'u' && uid[1] >= '0' && uid[1] < '0' + SLOTS ? uid[1] - '0' : -1;
}

/* How a pod's identity is spoilt (0: not). */
enum spoil {
    SPOIL_NONE,
    SPOIL_NAME_UPPER,
    SPOIL_NAME_PATH,
    SPOIL_NS_PATH,
    SPOIL_NS_LONG,
    SPOIL_UID, /* "u3_b": the '_' that separates uid and container in a directory's name */
    SPOIL_COUNT
};

/* The uid of the pod in a slot: "u<slot>", spoilt or not, so the slot stays known. */
static void uid_of(unsigned slot, enum spoil spoil, char uid[8])
{
    snprintf(uid, 8, spoil == SPOIL_UID ? "u%u_b" : "u%u", slot);
}

struct world {
    json_t *pods[SLOTS];
    uint8_t a[SLOTS], b[SLOTS]; /* what each pod was made of (make_pod) */
    enum spoil spoil[SLOTS];
    bool dirs[SLOTS][2]; /* container "a" / "b" of the pod in each slot has a directory */
};

/* Kubernetes' names, checked here without the annot module the cache uses: an RFC 1123
 * label (namespace, uid, container) and subdomain (pod name). */
static bool label_ok(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static bool subdomain_ok(const char *s)
{
    char part[254];
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    for (const char *p = s;;) {
        size_t len = strcspn(p, ".");
        memcpy(part, p, len);
        part[len] = '\0';
        if (!label_ok(part, 63))
            return false;
        if (p[len] == '\0')
            return true;
        p += len + 1;
    }
}

/* The decisions of make_pod's variants 0..2 (the usable ones): per container, its name
 * and GPUs. */
struct model_container {
    char name;
    unsigned count;
    const char *uuids[2];
};
static const struct model_container model_decisions[3][2] = {
    {{'a', 1, {UUID0, NULL}}, {0, 0, {NULL, NULL}}},
    {{'a', 1, {UUID1, NULL}}, {'b', 2, {UUID0, UUID1}}},
    {{'b', 0, {NULL, NULL}}, {'a', 1, {UUID1, NULL}}},
};

/* Why the cache must keep the pod in slot s only as a reason (a phrase its refusal
 * quotes), NULL when its decision is usable; *kept says whether the cache keeps it at
 * all (bound here, running, not being deleted, with a decision). */
static const char *model_reason(const struct world *w, unsigned s, bool *kept)
{
    static const char *const phases[] = {"Pending", "Running", "Succeeded", "Failed"};
    uint8_t a = w->a[s], b = w->b[s];
    const char *phase = phases[(b >> 3) % 4];
    *kept = w->pods[s] != NULL && !(b & 0x80) && (b & 0x60) != 0x60 && a % 6 != 5 &&
            strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0;
    if (!*kept)
        return NULL;
    if (w->spoil[s] != SPOIL_NONE)
        return "invalid uid, namespace or name";
    if (a & 0x20)
        return "is not scheduled by vgpu-scheduler";
    if (a % 6 == 3)
        return "has a garbled";
    if (a % 6 == 4)
        return "has a decision for node 'other'";
    if (a % 6 == 1 && (a & 0x40))
        return "decision does not match spec: container b";
    return NULL;
}

/* The usable container of slot s named c, NULL if none. */
static const struct model_container *model_container(const struct world *w, unsigned s, char c)
{
    bool kept;
    if (model_reason(w, s, &kept) != NULL || !kept)
        return NULL;
    for (unsigned k = 0; k < 2; k++)
        if (model_decisions[w->a[s] % 6][k].name == c)
            return &model_decisions[w->a[s] % 6][k];
    return NULL;
}

/* Whether container mc of slot s may be handed out for count GPUs (exactly uuids when
 * exact). */
static bool model_available(const struct world *w, unsigned s, const struct model_container *mc,
                            size_t count, char (*uuids)[ANNOT_UUID_MAX], bool exact)
{
    if (mc == NULL || mc->count == 0 || mc->count != count || w->dirs[s][mc->name - 'a'])
        return false;
    if (!exact)
        return true;
    if (uuids == NULL)
        return false;
    bool used[2] = {false, false};
    for (size_t i = 0; i < count; i++) {
        bool found = false;
        for (unsigned k = 0; k < mc->count && !found; k++)
            if (!used[k] && strcmp(mc->uuids[k], uuids[i]) == 0)
                used[k] = found = true;
        if (!found)
            return false;
    }
    return true;
}

static bool model_any(const struct world *w, size_t count, char (*uuids)[ANNOT_UUID_MAX],
                      bool exact)
{
    for (unsigned s = 0; s < SLOTS; s++)
        for (char c = 'a'; c <= 'b'; c++)
            if (model_available(w, s, model_container(w, s, c), count, uuids, exact))
                return true;
    return false;
}

/* Holds one Allocate's answer to the model; aborts with a note when they disagree. */
static void check_match(const struct world *w, int rc, const struct dp_match *got, const char *msg,
                        size_t count, char (*uuids)[ANNOT_UUID_MAX])
{
    bool expect = model_any(w, count, uuids, false);
    if ((rc == 0) != expect) {
        fprintf(stderr, "Allocate of %zu GPU(s): the cache %s, the world offers %s (%s)\n", count,
                rc == 0 ? "found a container" : "found none", expect ? "one" : "none", msg);
        abort();
    }
    if (rc == 0) {
        int s = slot_of(got->pod_uid);
        const struct model_container *mc =
            s >= 0 ? model_container(w, (unsigned)s, got->container.name[0]) : NULL;
        char uid[8];
        snprintf(uid, sizeof uid, "u%d", s);
        if (mc == NULL || strcmp(got->pod_uid, uid) != 0 || got->container.name[1] != '\0' ||
            !model_available(w, (unsigned)s, mc, count, NULL, false) ||
            got->container.gpu_count != mc->count) {
            fprintf(stderr, "Allocate handed out %s/%s, which the world does not offer\n",
                    got->pod_uid, got->container.name);
            abort();
        }
        for (unsigned g = 0; g < mc->count; g++)
            if (strcmp(got->container.gpus[g].uuid, mc->uuids[g]) != 0)
                abort(); /* the decision's GPUs, in its order */
        if (!label_ok(got->pod_uid, 63) || !label_ok(got->pod_namespace, 63) ||
            !subdomain_ok(got->pod_name) || !label_ok(got->container.name, 63))
            abort(); /* only names Kubernetes allows leave the cache */
        if (model_any(w, count, uuids, true) &&
            !model_available(w, (unsigned)s, mc, count, uuids, true)) {
            fprintf(stderr, "kubelet's GPUs are some container's, but %s/%s was handed out\n",
                    got->pod_uid, got->container.name);
            abort();
        }
        return;
    }
    /* The refusal: kubelet's message, and the reason of an unusable decision when the
     * world holds one. */
    char asking[64];
    snprintf(asking, sizeof asking, "asking for %zu GPU(s)", count);
    if (strstr(msg, "no scheduling decision") == NULL || strstr(msg, asking) == NULL)
        abort();
    bool any_reason = false, named = false;
    for (unsigned s = 0; s < SLOTS; s++) {
        bool kept;
        const char *why = model_reason(w, s, &kept);
        if (why != NULL) {
            any_reason = true;
            named = named || strstr(msg, why) != NULL;
        }
    }
    if (any_reason != named || (!any_reason && strstr(msg, "?; ") != NULL)) {
        fprintf(stderr, "a refusal that does not name the unusable decision: %s\n", msg);
        abort();
    }
}

/* The directory check: the names it is asked about become a path. */
static bool on_disk(void *arg, const char *uid, const char *container)
{
    const struct world *w = arg;
    if (!label_ok(uid, 63) || !label_ok(container, 63)) {
        fprintf(stderr, "a name Kubernetes would not allow reached a path: %s_%s\n", uid,
                container);
        abort();
    }
    int s = slot_of(uid);
    return s >= 0 && (container[0] == 'a' || container[0] == 'b') && w->dirs[s][container[0] - 'a'];
}

static const char *decision(unsigned variant, unsigned time)
{
    static char text[512];
    switch (variant % 6) {
    case 0:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"a\","
                 "\"gpus\":[{\"uuid\":\"" UUID0 "\",\"memoryMiB\":1,\"cores\":1}]}]}",
                 time);
        return text;
    case 1:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"a\","
                 "\"gpus\":[{\"uuid\":\"" UUID1 "\",\"memoryMiB\":2,\"cores\":0}]},{\"name\":"
                 "\"b\",\"gpus\":[{\"uuid\":\"" UUID0 "\",\"memoryMiB\":3,\"cores\":0},{\"uuid\":"
                 "\"" UUID1 "\",\"memoryMiB\":4,\"cores\":0}]}]}",
                 time);
        return text;
    case 2:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"n\",\"time\":%u,\"containers\":[{\"name\":\"b\","
                 "\"gpus\":[]},{\"name\":\"a\",\"gpus\":[{\"uuid\":\"" UUID1
                 "\",\"memoryMiB\":5,\"cores\":0}]}]}",
                 time);
        return text;
    case 3:
        return "{\"version\":1,\"containers\":7}";
    case 4:
        snprintf(text, sizeof(text),
                 "{\"version\":1,\"node\":\"other\",\"time\":%u,\"containers\":[]}", time);
        return text;
    default:
        return NULL;
    }
}

static json_t *make_pod(unsigned slot, uint8_t a, uint8_t b, enum spoil spoil)
{
    static const char *const phases[] = {"Pending", "Running", "Succeeded", "Failed"};
    char uid[8], name[8];
    uid_of(slot, spoil, uid);
    snprintf(name, sizeof(name), "p%u", (unsigned)(b % 3)); /* names collide on purpose */
    /* The spec the decisions are checked against: containers a (1 GPU) and b (2), or,
     * with bit 0x40 of a, a b whose count matches no decision; bit 0x20 another scheduler;
     * bit 0x80 a creationTimestamp that moves the decision's time. */
    json_t *pod = json_pack(
        "{s:{s:s,s:s,s:s,s:{}},s:{s:s,s:s,s:[{s:s,s:{s:{s:s}}},{s:s,s:{s:{s:s}}}]},s:{s:s}}",
        "metadata", "name", name, "namespace", "ns", "uid", uid, "annotations", "spec", "nodeName",
        (b & 0x80) ? "elsewhere" : "n", "schedulerName",
        (a & 0x20) ? "default-scheduler" : "vgpu-scheduler", "containers", "name", "a", "resources",
        "limits", "nvidia.com/gpu", "1", "name", "b", "resources", "limits", "nvidia.com/gpu",
        (a & 0x40) ? "3" : "2", "status", "phase", phases[(b >> 3) % 4]);
    const char *text = decision(a, (a >> 3) % 4);
    json_t *meta = json_object_get(pod, "metadata");
    if (text)
        json_object_set_new(json_object_get(meta, "annotations"), ANNOT_KEY_DECISION,
                            json_string(text));
    if (a & 0x80)
        json_object_set_new(meta, "creationTimestamp", json_string("1970-01-01T00:00:02Z"));
    if ((b & 0x60) == 0x60)
        json_object_set_new(meta, "deletionTimestamp", json_string("2026-01-01T00:00:00Z"));
    static const char long_label[] =
        "n0123456789012345678901234567890123456789012345678901234567890123"; /* 64 */
    switch (spoil) {
    case SPOIL_NAME_UPPER:
        json_object_set_new(meta, "name", json_string("P0"));
        break;
    case SPOIL_NAME_PATH:
        json_object_set_new(meta, "name", json_string("../p0"));
        break;
    case SPOIL_NS_PATH:
        json_object_set_new(meta, "namespace", json_string("ns/.."));
        break;
    case SPOIL_NS_LONG:
        json_object_set_new(meta, "namespace", json_string(long_label));
        break;
    case SPOIL_UID:
    case SPOIL_NONE:
    case SPOIL_COUNT:
        break;
    }
    return pod;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct world w;
    memset(&w, 0, sizeof(w));
    struct dp_podcache *cache = dp_podcache_new("n");
    for (size_t at = 0; at + 3 <= size; at += 3) {
        uint8_t op = data[at], x = data[at + 1], y = data[at + 2];
        unsigned slot = op % SLOTS;
        switch ((op >> 3) % 6) {
        case 0:
        case 1: /* ADDED (from 0xf0 on with a name or namespace spoilt) / MODIFIED */
            if (w.pods[slot] != NULL) {
                /* The API server keeps a pod's schedulerName, its containers' extended
                 * resources, its creationTimestamp and namespace as they were made. */
                x = (uint8_t)((w.a[slot] & 0xe0) | (x & 0x1f));
                json_decref(w.pods[slot]);
            } else {
                w.spoil[slot] = op >= 0xf0
                                    ? (enum spoil)(SPOIL_NAME_UPPER + (x ^ y) % (SPOIL_COUNT - 1))
                                    : SPOIL_NONE;
            }
            w.a[slot] = x;
            w.b[slot] = y;
            w.pods[slot] = make_pod(slot, x, y, w.spoil[slot]);
            dp_podcache_put(cache, w.pods[slot]);
            break;
        case 2: { /* DELETED: its directories are swept */
            char uid[8];
            uid_of(slot, w.spoil[slot], uid);
            json_decref(w.pods[slot]);
            w.pods[slot] = NULL;
            w.spoil[slot] = SPOIL_NONE;
            w.dirs[slot][0] = w.dirs[slot][1] = false;
            dp_podcache_remove(cache, uid);
            break;
        }
        case 3: { /* relist */
            json_t *items = json_array();
            for (unsigned s = 0; s < SLOTS; s++)
                if (w.pods[s])
                    json_array_append(items, w.pods[s]);
            dp_podcache_replace(cache, items);
            json_decref(items);
            break;
        }
        case 4: { /* Allocate: match, compare, make the directory */
            size_t count = x % 2 + 1;
            char uuids[2][ANNOT_UUID_MAX] = {UUID0, UUID1};
            char(*want)[ANNOT_UUID_MAX] = (y & 1) ? NULL : (y & 2) ? &uuids[1] : uuids;
            if (want == &uuids[1])
                count = 1;
            struct dp_match got, fresh;
            struct vg_err e1 = {0}, e2 = {0};
            int rc = dp_podcache_match(cache, want, count, on_disk, &w, &got, &e1);
            json_t *items = json_array();
            for (unsigned s = 0; s < SLOTS; s++)
                if (w.pods[s])
                    json_array_append(items, w.pods[s]);
            int rc2 = dp_match_container(items, "n", want, count, on_disk, &w, &fresh, &e2);
            json_decref(items);
            check_match(&w, rc, &got, e1.msg, count, want);
            vg_fuzz_report(rc == 0);
            if (rc != rc2)
                abort();
            if (rc == 0) {
                if (strcmp(got.pod_uid, fresh.pod_uid) != 0 ||
                    strcmp(got.container.name, fresh.container.name) != 0 ||
                    got.container.gpu_count != fresh.container.gpu_count ||
                    memcmp(got.container.gpus, fresh.container.gpus,
                           got.container.gpu_count * sizeof(got.container.gpus[0])) != 0)
                    abort();
                int s = slot_of(got.pod_uid);
                if (s < 0 || got.container.gpu_count != count)
                    abort();
                w.dirs[s][got.container.name[0] - 'a'] = true;
                dp_podcache_set_allocated(cache, got.pod_uid, got.container.name, true);
            } else if (strncmp(e1.msg, e2.msg, 40) != 0) {
                abort();
            }
            break;
        }
        default: { /* Allocate rolled back */
            char uid[8];
            uid_of(slot, w.spoil[slot], uid);
            w.dirs[slot][x & 1] = false;
            dp_podcache_set_allocated(cache, uid, (x & 1) ? "b" : "a", false);
            break;
        }
        }
    }
    dp_podcache_free(cache);
    for (unsigned s = 0; s < SLOTS; s++)
        json_decref(w.pods[s]);
    return 0;
}
