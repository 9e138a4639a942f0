/* FAKEGPU_MIG: which simulated GPUs are in MIG mode and their instances; dynamic MIG
 * (GPU and compute instances made and destroyed through NVML at run time); and the XID
 * event sequence that fakegpu-ctl xid appends to and NVML's event sets read.
 *
 * Instances live in struct fg_device_info in the shared state, changed only under its
 * lock, so every process agrees on them, their UUIDs and ids. The geometry is NVIDIA's:
 * A30 has 4 compute and 4 memory slices, every other MIG-capable model 7 compute and 8
 * memory slices. For the models with a profile table below (A100 40 GB and 80 GB, H100
 * 80 GB, H200) the profiles, their memory, SMs and allowed placements are the driver's,
 * and an instance must sit at an allowed start without overlapping another, as on the
 * hardware; for the other MIG models (FAKEGPU_MIG only) names are formed from memory as
 * NVIDIA's tools form them (the instance's share in eighths, rounded up, times the card's
 * memory in whole GiB, rounded up, rounded) and only the slice sums are checked. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

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

/* ---- profile tables ---------------------------------------------------------------- */

/* NVML_GPU_INSTANCE_PROFILE_* values (nvml.h). */
enum { P1 = 0x0, P2 = 0x1, P3 = 0x2, P4 = 0x3, P7 = 0x4, P1_REV1 = 0x7, P1_REV2 = 0x9 };

#define S_1G  0x7Fu /* starts 0..6 */
#define S_1G2 0x55u /* 0, 2, 4, 6 */
#define S_2G  0x15u /* 0, 2, 4 */
#define S_3G  0x11u /* 0, 4 */
#define S_ONE 0x01u /* 0 */

/* Profile ids, slices and placements: `nvidia-smi mig -lgip` / `-lgipp` as NVIDIA's MIG
 * user guide prints them; memory and SMs per model (sources in docs/fakegpu.md). */
static const struct fg_mig_profile a100_40[] = {
    {P1, 19, "1g.5gb", 1, 1, 4864, 14, S_1G, 7},
    {P1_REV1, 20, "1g.5gb+me", 1, 1, 4864, 14, S_1G, 1},
    {P1_REV2, 15, "1g.10gb", 1, 2, 9856, 14, S_1G2, 4},
    {P2, 14, "2g.10gb", 2, 2, 9856, 28, S_2G, 3},
    {P3, 9, "3g.20gb", 3, 4, 19968, 42, S_3G, 2},
    {P4, 5, "4g.20gb", 4, 4, 19968, 56, S_ONE, 1},
    {P7, 0, "7g.40gb", 7, 8, 40192, 98, S_ONE, 1},
};
static const struct fg_mig_profile a100_80[] = {
    {P1, 19, "1g.10gb", 1, 1, 9856, 14, S_1G, 7},
    {P1_REV1, 20, "1g.10gb+me", 1, 1, 9856, 14, S_1G, 1},
    {P1_REV2, 15, "1g.20gb", 1, 2, 19968, 14, S_1G2, 4},
    {P2, 14, "2g.20gb", 2, 2, 19968, 28, S_2G, 3},
    {P3, 9, "3g.40gb", 3, 4, 40192, 42, S_3G, 2},
    {P4, 5, "4g.40gb", 4, 4, 40192, 56, S_ONE, 1},
    {P7, 0, "7g.80gb", 7, 8, 80384, 98, S_ONE, 1},
};
static const struct fg_mig_profile h100_80[] = {
    {P1, 19, "1g.10gb", 1, 1, 9984, 16, S_1G, 7},
    {P1_REV1, 20, "1g.10gb+me", 1, 1, 9984, 16, S_1G, 1},
    {P1_REV2, 15, "1g.20gb", 1, 2, 20096, 26, S_1G2, 4},
    {P2, 14, "2g.20gb", 2, 2, 20096, 32, S_2G, 3},
    {P3, 9, "3g.40gb", 3, 4, 40448, 60, S_3G, 2},
    {P4, 5, "4g.40gb", 4, 4, 40448, 64, S_ONE, 1},
    {P7, 0, "7g.80gb", 7, 8, 81152, 132, S_ONE, 1},
};
static const struct fg_mig_profile h200[] = {
    {P1, 19, "1g.18gb", 1, 1, 16384, 16, S_1G, 7},
    {P1_REV1, 20, "1g.18gb+me", 1, 1, 16384, 16, S_1G, 1},
    {P1_REV2, 15, "1g.35gb", 1, 2, 32960, 26, S_1G2, 4},
    {P2, 14, "2g.35gb", 2, 2, 32960, 32, S_2G, 3},
    {P3, 9, "3g.71gb", 3, 4, 66368, 60, S_3G, 2},
    {P4, 5, "4g.71gb", 4, 4, 66368, 64, S_ONE, 1},
    {P7, 0, "7g.141gb", 7, 8, 133184, 132, S_ONE, 1},
};

struct mig_table {
    const char *needle;
    uint64_t min_gib, max_gib; /* card memory, whole GiB rounded up, inclusive */
    const struct fg_mig_profile *profiles;
    size_t count;
};

#define TABLE(needle, lo, hi, t)                                                                   \
    {                                                                                              \
        needle, lo, hi, t, sizeof t / sizeof t[0]                                                  \
    }
static const struct mig_table mig_tables[] = {
    TABLE("A100", 1, 48, a100_40),
    TABLE("A100", 49, 96, a100_80),
    TABLE("H100", 1, 88, h100_80), /* not the 94 GB NVL, whose names differ */
    TABLE("H200", 120, 160, h200),
};

const struct fg_mig_profile *fg_mig_profiles(const struct fg_device_info *d, size_t *count)
{
    uint64_t gib = (d->total_bytes + GIB - 1) / GIB;
    for (size_t i = 0; i < sizeof mig_tables / sizeof mig_tables[0]; i++) {
        const struct mig_table *t = &mig_tables[i];
        if (strstr(d->name, t->needle) != NULL && gib >= t->min_gib && gib <= t->max_gib) {
            *count = t->count;
            return t->profiles;
        }
    }
    *count = 0;
    return NULL;
}

const struct fg_mig_profile *fg_mig_profile_by_id(const struct fg_device_info *d, unsigned id)
{
    size_t n;
    const struct fg_mig_profile *p = fg_mig_profiles(d, &n);
    for (size_t i = 0; i < n; i++)
        if (p[i].id == id)
            return &p[i];
    return NULL;
}

/* Memory slices the instances of d occupy (bit s: slice s). */
static unsigned occupied(const struct fg_device_info *d)
{
    unsigned bits = 0;
    for (unsigned k = 0; k < d->mig_count && k < FG_MAX_MIG; k++) {
        const struct fg_mig_info *mi = &d->mig[k];
        if (mi->gi_id != 0)
            bits |= ((1u << mi->mem_slices) - 1) << mi->start;
    }
    return bits;
}

/* The first start p allows that is free in d at or after from, or -1. */
static int free_start(const struct fg_device_info *d, const struct fg_mig_profile *p, int want)
{
    unsigned busy = occupied(d), mask = (1u << p->size) - 1;
    for (unsigned s = 0; s < 8; s++) {
        if (!(p->starts & (1u << s)) || (want >= 0 && (unsigned)want != s))
            continue;
        if (s + p->size <= 8 && (busy & (mask << s)) == 0)
            return (int)s;
    }
    return -1;
}

static unsigned count_profile(const struct fg_device_info *d, unsigned id)
{
    unsigned n = 0;
    for (unsigned k = 0; k < d->mig_count && k < FG_MAX_MIG; k++)
        n += d->mig[k].gi_id != 0 && d->mig[k].profile_id == id;
    return n;
}

/* Fills slot k of d with profile p at start (gi id k + 1). serial tells instances made
 * at the same slot apart (their UUIDs differ, as a recreated instance's does). */
static void fill_instance(struct fg_device_info *d, unsigned k, const struct fg_mig_profile *p,
                          unsigned start, uint64_t serial)
{
    struct fg_mig_info *mi = &d->mig[k];
    memset(mi, 0, sizeof *mi);
    (void)vg_snprintf(mi->profile, sizeof mi->profile, "%s", p->name);
    mi->slices = p->slices;
    mi->mem_slices = p->size;
    mi->gi_id = k + 1;
    mi->ci_id = 0; /* the one compute instance spanning the GPU instance */
    mi->memory_bytes = (uint64_t)p->memory_mib * MIB;
    mi->sm_count = (int)p->sms;
    mi->profile_id = p->id;
    mi->start = start;
    mig_uuid(d, mi->gi_id + (unsigned)(serial << 8), mi->uuid, sizeof mi->uuid);
    if (d->mig_count < k + 1)
        d->mig_count = k + 1;
}

/* Adds one instance named by [s, s+n) to GPU d, from its model's table: at the first free
 * start the profile allows. */
static int add_table_instance(struct fg_device_info *d, int index, const char *s, size_t n,
                              struct vg_err *err)
{
    size_t count;
    const struct fg_mig_profile *table = fg_mig_profiles(d, &count);
    for (size_t i = 0; i < count; i++) {
        const struct fg_mig_profile *p = &table[i];
        if (strlen(p->name) != n || memcmp(p->name, s, n) != 0)
            continue;
        int start = free_start(d, p, -1);
        if (start < 0 || count_profile(d, p->id) >= p->max_count)
            return vg_err_set(err, -EINVAL,
                              "FAKEGPU_MIG: GPU %d: instance '%s' does not fit (no allowed "
                              "placement is free after the instances before it)",
                              index, p->name);
        fill_instance(d, d->mig_count, p, (unsigned)start, 0);
        d->mig[d->mig_count - 1].has_ci = true;
        return 0;
    }
    return vg_err_set(err, -EINVAL, "FAKEGPU_MIG: GPU %d (%s) has no MIG profile '%.*s'", index,
                      d->name, (int)(n > 32 ? 32 : n), s);
}

/* Adds one instance named by [s, s+n) to GPU d (a model without a table). */
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
    size_t table_count;
    if (fg_mig_profiles(d, &table_count) != NULL)
        return add_table_instance(d, index, s, n, err);
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
        mi->gi_id = d->mig_count;  /* 1, 2, ... in FAKEGPU_MIG order */
        mi->start = *mem_used - m; /* packed in order: no placement rules here */
        mi->has_ci = true;
        mi->ci_id = 0; /* the one compute instance spanning the GPU instance */
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
    if (p == end)
        return 0; /* "GPU:": MIG mode without instances, for dynamic MIG */
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

/* ---- dynamic MIG (shared lock held inside each call) --------------------------------- */

/* Device dev's record for a MIG call: -EINVAL for a bad index, -ENOTSUP unless in MIG mode
 * with a profile table. */
static int mig_device(struct fg_shared *sh, int dev, struct fg_device_info **out)
{
    if (dev < 0 || (uint32_t)dev >= sh->device_count)
        return -EINVAL;
    struct fg_device_info *d = &sh->info[dev];
    size_t n;
    if (!d->mig_enabled || fg_mig_profiles(d, &n) == NULL)
        return -ENOTSUP;
    *out = d;
    return 0;
}

static bool slot_ok(const struct fg_device_info *d, int slot)
{
    return slot >= 0 && slot < FG_MAX_MIG && d->mig[slot].gi_id != 0;
}

/* Live processes in MIG slot of dev (lock held, dead ones reaped first). */
static unsigned procs_in(struct fg_state *st, int dev, int slot)
{
    struct fg_shared *sh = fg_state_shared(st);
    fg_state_reap_locked(st);
    unsigned n = 0;
    for (int i = 0; i < FG_MAX_PROCS; i++) {
        const struct fg_slot *s = &sh->slots[i];
        n += s->in_use && s->mig[dev] == (unsigned)slot + 1 &&
             (s->contexts[dev] > 0 || s->used_bytes[dev] > 0);
    }
    return n;
}

int fg_mig_create_gi(struct fg_state *st, int dev, unsigned profile_id, int start, int *slot)
{
    if (start >= 8 || slot == NULL)
        return -EINVAL;
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    struct fg_device_info *d = NULL;
    rc = mig_device(fg_state_shared(st), dev, &d);
    const struct fg_mig_profile *p = rc == 0 ? fg_mig_profile_by_id(d, profile_id) : NULL;
    if (rc == 0 && p == NULL)
        rc = -EINVAL;
    else if (rc == 0 && start >= 0 && !(p->starts & (1u << start)))
        rc = -EINVAL; /* not a placement the profile has */
    int at = -1, k = -1;
    if (rc == 0) {
        at = free_start(d, p, start);
        for (int i = 0; i < FG_MAX_MIG && k < 0; i++)
            if (d->mig[i].gi_id == 0)
                k = i;
        if (at < 0 || k < 0 || count_profile(d, p->id) >= p->max_count)
            rc = -ENOSPC;
    }
    if (rc == 0) {
        d->mig_serial++;
        fill_instance(d, (unsigned)k, p, (unsigned)at, d->mig_serial);
        d->mig[k].has_ci = false;
        d->mig[k].created_s = (uint64_t)time(NULL);
        /* A new instance starts with an idle timeline and no busy history. */
        struct fg_device_runtime *rt = fg_timeline_runtime(fg_state_shared(st), dev, k + 1);
        memset(&rt->util, 0, sizeof rt->util);
        rt->current = FG_NO_SLOT;
        *slot = k;
    }
    fg_state_unlock(st);
    return rc;
}

int fg_mig_destroy_gi(struct fg_state *st, int dev, int slot)
{
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    struct fg_device_info *d = NULL;
    rc = mig_device(fg_state_shared(st), dev, &d);
    if (rc == 0 && !slot_ok(d, slot))
        rc = -ENOENT;
    if (rc == 0 && (d->mig[slot].has_ci || procs_in(st, dev, slot) > 0))
        rc = -EBUSY;
    if (rc == 0) {
        memset(&d->mig[slot], 0, sizeof d->mig[slot]);
        while (d->mig_count > 0 && d->mig[d->mig_count - 1].gi_id == 0)
            d->mig_count--;
    }
    fg_state_unlock(st);
    return rc;
}

int fg_mig_create_ci(struct fg_state *st, int dev, int slot)
{
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    struct fg_device_info *d = NULL;
    rc = mig_device(fg_state_shared(st), dev, &d);
    if (rc == 0 && !slot_ok(d, slot))
        rc = -ENOENT;
    if (rc == 0 && d->mig[slot].has_ci)
        rc = -ENOSPC; /* the one compute instance spanning it exists */
    if (rc == 0)
        d->mig[slot].has_ci = true;
    fg_state_unlock(st);
    return rc;
}

int fg_mig_destroy_ci(struct fg_state *st, int dev, int slot)
{
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    struct fg_device_info *d = NULL;
    rc = mig_device(fg_state_shared(st), dev, &d);
    if (rc == 0 && (!slot_ok(d, slot) || !d->mig[slot].has_ci))
        rc = -ENOENT;
    if (rc == 0 && procs_in(st, dev, slot) > 0)
        rc = -EBUSY;
    if (rc == 0)
        d->mig[slot].has_ci = false;
    fg_state_unlock(st);
    return rc;
}

int fg_mig_procs(struct fg_state *st, int dev, int slot, unsigned *count)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count || slot < 0 || slot >= FG_MAX_MIG)
        return -EINVAL;
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    *count = procs_in(st, dev, slot);
    fg_state_unlock(st);
    return 0;
}

int fg_mig_find(const struct fg_device_info *d, const char *uuid)
{
    for (unsigned k = 0; d->mig_enabled && k < d->mig_count && k < FG_MAX_MIG; k++) {
        const struct fg_mig_info *mi = &d->mig[k];
        if (mi->gi_id != 0 && mi->has_ci && strcmp(mi->uuid, uuid) == 0)
            return (int)k;
    }
    return -ENOENT;
}

int fg_mig_bind(struct fg_state *st, int dev, int slot)
{
    struct fg_shared *sh = fg_state_shared(st);
    if (dev < 0 || (uint32_t)dev >= sh->device_count || slot < -1 || slot >= FG_MAX_MIG)
        return -EINVAL;
    int rc = fg_state_lock(st);
    if (rc != 0)
        return rc;
    const struct fg_device_info *d = &sh->info[dev];
    if (slot >= 0 && (d->mig[slot].gi_id == 0 || !d->mig[slot].has_ci)) {
        fg_state_unlock(st);
        return -ENOENT;
    }
    int own = fg_state_claim_locked(st);
    if (own >= 0)
        sh->slots[own].mig[dev] = (uint8_t)(slot + 1);
    fg_state_unlock(st);
    return own < 0 ? own : 0;
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
