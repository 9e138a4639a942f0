/* FAKEGPU_MIG: which simulated GPUs are in MIG mode and their instances; and the XID
 * event sequence that fakegpu-ctl xid appends to and NVML's event sets read.
 *
 * MIG layout is fixed with the devices by the process that creates the state (it lives in
 * struct fg_device_info), so every process agrees on the instances, their UUIDs and ids.
 * The geometry is NVIDIA's: A30 has 4 compute and 4 memory slices, every other MIG-capable
 * model 7 compute and 8 memory slices; an instance takes `<g>` compute slices and the
 * memory slices its profile names (1g.10gb one eighth, 1g.20gb two eighths, ...). Profile
 * names are formed from memory as NVIDIA's tools form them: the instance's fraction of the
 * card (in eighths, rounded up) times the card's memory in whole GiB (rounded up),
 * rounded. The check that instances fit is the slice sums; the placement rules of real
 * hardware (which start slices each profile may use) are not simulated. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/err.h"
#include "base/parse.h"
#include "base/str.h"
#include "fakegpu/state.h"
#include "fakegpu/timeline.h"

#define GIB (1024ULL * 1024 * 1024)
#define MIB (1024ULL * 1024)

struct mig_model {
    const char *needle;
    unsigned slices, mem_slices;
};

/* First match wins (A30 before anything containing it; no other model contains "A30"). */
static const struct mig_model mig_models[] = {
    {"GB200", 7, 8}, {"B200", 7, 8}, {"H100", 7, 8}, {"H200", 7, 8},
    {"H800", 7, 8},  {"A100", 7, 8}, {"A800", 7, 8}, {"A30", 4, 4},
};

void fg_mig_geometry(const char *model, unsigned *slices, unsigned *mem_slices)
{
    *slices = 0;
    *mem_slices = 0;
    for (size_t i = 0; i < sizeof mig_models / sizeof mig_models[0]; i++) {
        if (strstr(model, mig_models[i].needle) != NULL) {
            *slices = mig_models[i].slices;
            *mem_slices = mig_models[i].mem_slices;
            return;
        }
    }
}

void fg_mig_profile_name(unsigned slices, unsigned mem_slices, unsigned total_mem_slices,
                         uint64_t total_bytes, char *name)
{
    uint64_t card_gib = (total_bytes + GIB - 1) / GIB;
    uint64_t eighths = (8ULL * mem_slices + total_mem_slices - 1) / total_mem_slices;
    uint64_t gb = (eighths * card_gib * 2 + 8) / 16;
    (void)vg_snprintf(name, FG_MIG_PROFILE, "%ug.%llugb", slices, (unsigned long long)gb);
}

struct mig_shape {
    unsigned slices, mem_slices;
};

/* NVIDIA's GPU instance profiles (without the +me media-extension variants): on 7/8-slice
 * GPUs 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb (an 80 GB card's names); on
 * the A30 1g.6gb, 2g.12gb, 4g.24gb. */
static const struct mig_shape shapes_full[] = {{1, 1}, {1, 2}, {2, 2}, {3, 4}, {4, 4}, {7, 8}};
static const struct mig_shape shapes_a30[] = {{1, 1}, {2, 2}, {4, 4}};

static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void mig_uuid(const struct fg_device_info *gpu, unsigned gi, char *out, size_t size)
{
    uint64_t a = fnv1a(0xcbf29ce484222325ULL, gpu->uuid_bytes, sizeof gpu->uuid_bytes);
    a = fnv1a(a, &gi, sizeof gi);
    uint64_t b = fnv1a(a ^ 0x9e3779b97f4a7c15ULL, "fakegpu-mig", 11);
    uint8_t u[16];
    for (int i = 0; i < 8; i++) {
        u[i] = (uint8_t)(a >> (56 - 8 * i));
        u[8 + i] = (uint8_t)(b >> (56 - 8 * i));
    }
    (void)vg_snprintf(out, size,
                      "MIG-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                      u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
                      u[12], u[13], u[14], u[15]);
}

/* Adds one instance named by [s, s+n) to GPU d. */
static int add_instance(struct fg_device_info *d, int index, const char *s, size_t n,
                        unsigned slices, unsigned mem_slices, unsigned *used, unsigned *mem_used,
                        struct vg_err *err)
{
    if (n == 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %d has an empty profile (stray ',')",
                          index);
    if (d->mig_count == FG_MAX_MIG)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %d: more than %d instances", index,
                          FG_MAX_MIG);
    const struct mig_shape *shapes = slices == 4 ? shapes_a30 : shapes_full;
    size_t shape_count = slices == 4 ? sizeof shapes_a30 / sizeof shapes_a30[0]
                                     : sizeof shapes_full / sizeof shapes_full[0];
    for (size_t k = 0; k < shape_count; k++) {
        unsigned g = shapes[k].slices, m = shapes[k].mem_slices;
        char name[FG_MIG_PROFILE];
        fg_mig_profile_name(g, m, mem_slices, d->total_bytes, name);
        if (strlen(name) != n || memcmp(name, s, n) != 0)
            continue;
        if (*used + g > slices || *mem_used + m > mem_slices)
            return vg_err_set(err, -EINVAL,
                              "FAKEGPU_MIG: GPU %d: instance '%s' does not fit (%u of %u "
                              "compute and %u of %u memory slices already taken)",
                              index, name, *used, slices, *mem_used, mem_slices);
        *used += g;
        *mem_used += m;
        struct fg_mig_info *mi = &d->mig[d->mig_count++];
        memset(mi, 0, sizeof *mi);
        memcpy(mi->profile, name, n + 1);
        mi->slices = g;
        mi->mem_slices = m;
        mi->gi_id = d->mig_count; /* 1, 2, ... in FAKEGPU_MIG order */
        mi->ci_id = 0;            /* the one compute instance spanning the GPU instance */
        mi->memory_bytes = d->total_bytes / mem_slices * m / MIB * MIB;
        mi->sm_count = d->sm_count * (int)g / (int)slices;
        if (mi->sm_count < 1)
            mi->sm_count = 1;
        if (mi->memory_bytes == 0)
            mi->memory_bytes = MIB;
        mig_uuid(d, mi->gi_id, mi->uuid, sizeof mi->uuid);
        return 0;
    }
    return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %d (%s) has no MIG profile '%.*s'", index,
                      d->name, (int)(n > 32 ? 32 : n), s);
}

static int parse_gpu(const char *s, size_t n, struct fg_device_info *devs, int count,
                     struct vg_err *err)
{
    const char *colon = memchr(s, ':', n);
    if (colon == NULL)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: '%.*s' is not GPU:PROFILE,...",
                          (int)(n > 64 ? 64 : n), s);
    char idx[16];
    size_t idx_len = (size_t)(colon - s);
    if (idx_len == 0 || idx_len >= sizeof idx)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: '%.*s' does not start with a GPU index",
                          (int)(n > 64 ? 64 : n), s);
    memcpy(idx, s, idx_len);
    idx[idx_len] = '\0';
    uint64_t index;
    struct vg_err sub;
    if (vg_parse_u64(idx, 0, (uint64_t)count - 1, &index, &sub) != 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU '%s': %s (there are %d GPUs)", idx,
                          sub.msg, count);
    struct fg_device_info *d = &devs[index];
    if (d->mig_enabled)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %llu is named twice",
                          (unsigned long long)index);
    unsigned slices, mem_slices;
    fg_mig_geometry(d->name, &slices, &mem_slices);
    if (slices == 0)
        return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %llu (%s) has no MIG",
                          (unsigned long long)index, d->name);
    d->mig_enabled = true;
    d->mig_count = 0;
    unsigned used = 0, mem_used = 0;
    const char *p = colon + 1, *end = s + n;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        size_t len = comma ? (size_t)(comma - p) : (size_t)(end - p);
        int rc = add_instance(d, (int)index, p, len, slices, mem_slices, &used, &mem_used, err);
        if (rc != 0)
            return rc;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    return 0;
}

int fg_parse_mig(const char *spec, struct fg_device_info *devs, int count, struct vg_err *err)
{
    for (int i = 0; i < count; i++) {
        devs[i].mig_enabled = false;
        devs[i].mig_count = 0;
    }
    if (spec == NULL || spec[0] == '\0')
        return 0;
    const char *p = spec;
    for (;;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        if (len == 0)
            return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: empty GPU entry (stray ';')");
        int rc = parse_gpu(p, len, devs, count, err);
        if (rc != 0)
            return rc;
        if (semi == NULL)
            break;
        p = semi + 1;
    }
    return 0;
}

/* ---- XID events ------------------------------------------------------------------- */

int fg_xid_inject(struct fg_state *st, int dev, unsigned code)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count || code == 0 || code > 9999)
        return -EINVAL;
    struct fg_xid_log *log = &sh->xid[dev];
    uint64_t n = __atomic_add_fetch(&log->next, 1, __ATOMIC_ACQ_REL);
    struct fg_xid_entry *e = &log->ring[(n - 1) % FG_XID_RING];
    __atomic_store_n(&e->code, code, __ATOMIC_RELAXED);
    __atomic_store_n(&e->seq, n, __ATOMIC_RELEASE); /* published: readers check seq */
    return 0;
}

uint64_t fg_xid_seq(struct fg_state *st, int dev)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count)
        return 0;
    return __atomic_load_n(&sh->xid[dev].next, __ATOMIC_ACQUIRE);
}

int fg_xid_next(struct fg_state *st, int dev, uint64_t *seen, unsigned *code)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count)
        return -EINVAL;
    struct fg_xid_log *log = &sh->xid[dev];
    for (;;) {
        uint64_t next = __atomic_load_n(&log->next, __ATOMIC_ACQUIRE);
        if (next <= *seen)
            return -EAGAIN;
        if (next - *seen > FG_XID_RING)
            *seen = next - FG_XID_RING; /* overrun: the oldest still kept */
        uint64_t want = *seen + 1;
        struct fg_xid_entry *e = &log->ring[(want - 1) % FG_XID_RING];
        uint64_t seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
        if (seq < want)
            return -EAGAIN; /* reserved, not yet written */
        unsigned c = __atomic_load_n(&e->code, __ATOMIC_RELAXED);
        if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != want || seq != want)
            continue; /* overwritten meanwhile: look again from the new oldest */
        *seen = want;
        *code = c;
        return 0;
    }
}
