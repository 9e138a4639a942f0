/* MIG profile and placement choice (mig.h; docs/placement.md, "MIG placement"). */
#include "placement/mig.h"

#include "placement/placement.h"

#include <errno.h>
#include <string.h>

int place_mig_gpu_check(const struct place_mig_gpu *g, struct vg_err *err)
{
    if (g->slices == 0 || g->slices > PLACE_MIG_SLICES_MAX)
        return vg_err_set(err, -EINVAL, "MIG GPU has %u memory slices, not 1..%d", g->slices,
                          PLACE_MIG_SLICES_MAX);
    if (g->profile_count > PLACE_MIG_PROFILES_MAX)
        return vg_err_set(err, -EINVAL, "MIG GPU lists %u profiles, at most %d", g->profile_count,
                          PLACE_MIG_PROFILES_MAX);
    uint8_t all = place_mig_mask(0, g->slices);
    if (g->used & (uint8_t)~all)
        return vg_err_set(err, -EINVAL, "MIG GPU marks slices past its %u as used", g->slices);
    for (unsigned p = 0; p < g->profile_count; p++) {
        const struct place_mig_profile *pr = &g->profiles[p];
        if (memchr(pr->name, '\0', sizeof pr->name) == NULL || pr->name[0] == '\0')
            return vg_err_set(err, -EINVAL, "MIG profile %u has no name", p);
        if (pr->size == 0 || pr->size > g->slices)
            return vg_err_set(err, -EINVAL, "MIG profile %s takes %u slices of a GPU of %u",
                              pr->name, pr->size, g->slices);
        for (unsigned s = 0; s < PLACE_MIG_SLICES_MAX; s++)
            if ((pr->placements & (1u << s)) && s + pr->size > g->slices)
                return vg_err_set(err, -EINVAL,
                                  "MIG profile %s: start %u runs past the GPU's %u slices",
                                  pr->name, s, g->slices);
    }
    return 0;
}

static unsigned share_of(const struct place_mig_gpu *g, const struct place_mig_profile *p)
{
    unsigned max = g->max_sms;
    if (max == 0)
        for (unsigned i = 0; i < g->profile_count; i++)
            if (g->profiles[i].sms > max)
                max = g->profiles[i].sms;
    return max == 0 ? 0 : (p->sms * 100u + max - 1u) / max; /* HAMi's ceil(SM·100/maxSM) */
}

bool place_mig_fits(const struct place_mig_gpu *g, unsigned p, uint64_t mem_mib, uint32_t cores,
                    enum place_mig_rule rule)
{
    const struct place_mig_profile *pr = &g->profiles[p];
    if (pr->mem_mib < mem_mib)
        return false;
    return rule == PLACE_MIG_RULE_HAMI || cores == 0 || share_of(g, pr) >= cores;
}

/* The fewest slices a profile serving (mem, cores) takes; 0 when none serves it. */
static unsigned min_fit_size(const struct place_mig_gpu *g, uint64_t mem, uint32_t cores)
{
    unsigned min_size = 0;
    for (unsigned p = 0; p < g->profile_count; p++)
        if (place_mig_fits(g, p, mem, cores, PLACE_MIG_RULE_VGPU) &&
            (min_size == 0 || g->profiles[p].size < min_size))
            min_size = g->profiles[p].size;
    return min_size;
}

/* The slices that free placements of the smallest profiles serving (mem, cores) cover
 * under `used`. Only the smallest: a request takes one of those (a larger one would waste
 * slices), so slices only a larger profile reaches are lost to it. */
static uint8_t usable(const struct place_mig_gpu *g, uint8_t used, uint64_t mem, uint32_t cores)
{
    uint8_t cover = 0;
    unsigned size = min_fit_size(g, mem, cores);
    for (unsigned p = 0; p < g->profile_count; p++) {
        const struct place_mig_profile *pr = &g->profiles[p];
        if (pr->size != size || !place_mig_fits(g, p, mem, cores, PLACE_MIG_RULE_VGPU))
            continue;
        for (unsigned s = 0; s + pr->size <= g->slices; s++) {
            uint8_t m = place_mig_mask(s, pr->size);
            if ((pr->placements & (1u << s)) && (m & used) == 0)
                cover |= m;
        }
    }
    return cover;
}

double place_mig_frag(const struct place_mig_gpu *g, uint8_t used,
                      const struct place_mig_demand *mix, size_t count)
{
    uint8_t free_mask = (uint8_t)(place_mig_mask(0, g->slices) & ~used);
    unsigned free_n = (unsigned)__builtin_popcount(free_mask);
    double sum = 0, total = 0;
    for (size_t i = 0; i < count; i++) {
        if (mix[i].weight == 0)
            continue;
        uint8_t cover = usable(g, used, mix[i].mem_mib, mix[i].cores);
        unsigned lost = free_n - (unsigned)__builtin_popcount(cover & free_mask);
        sum += (double)mix[i].weight * lost;
        total += (double)mix[i].weight;
    }
    return total > 0 ? sum / total : 0;
}

size_t place_mig_mix_map(const struct place_mig_gpu *g, uint64_t card_mib, unsigned model,
                         const struct place_mix *mix, struct place_mig_demand *out, size_t cap)
{
    unsigned keys[PLACE_MIG_STATES]; /* per demand written, the subset of profiles serving it */
    size_t n = 0;
    if (cap > PLACE_MIG_STATES)
        cap = PLACE_MIG_STATES;
    for (size_t i = 0; mix != NULL && i < mix->count; i++) {
        const struct place_mix_type *t = &mix->types[i];
        if (t->gpu_count == 0 || t->weight == 0 || (model < 64 && !(t->model_mask >> model & 1)))
            continue;
        uint64_t mem = (card_mib * t->gpu_milli + PLACE_GPU_MILLI - 1) / PLACE_GPU_MILLI;
        unsigned key = 0;
        for (unsigned p = 0; p < g->profile_count && p < PLACE_MIG_PROFILES_MAX; p++)
            if (place_mig_fits(g, p, mem, 0, PLACE_MIG_RULE_VGPU))
                key |= 1u << p;
        if (key == 0)
            continue; /* no instance serves it: no placement is better for it */
        size_t j = 0;
        while (j < n && keys[j] != key)
            j++;
        if (j < n) {
            out[j].weight += t->weight;
            if (mem > out[j].mem_mib)
                out[j].mem_mib = mem; /* the same profiles serve either */
        } else if (n < cap) {
            keys[n] = key;
            out[n++] = (struct place_mig_demand){mem, 0, t->weight};
        }
    }
    return n;
}

uint64_t place_mig_card_mib(const struct place_mig_gpu *g)
{
    uint64_t per_slice = 0;
    for (unsigned p = 0; p < g->profile_count && p < PLACE_MIG_PROFILES_MAX; p++) {
        const struct place_mig_profile *pr = &g->profiles[p];
        uint64_t m = pr->size > 0 ? pr->mem_mib / pr->size : 0;
        if (m > 0 && (per_slice == 0 || m < per_slice))
            per_slice = m;
    }
    return per_slice * g->slices;
}

uint32_t place_mig_share_milli(uint64_t mem_mib, uint64_t card_mib)
{
    if (card_mib == 0 || mem_mib >= card_mib)
        return PLACE_GPU_MILLI;
    /* floor: mapped back, ceil(card · milli / 1000) <= mem_mib */
    return (uint32_t)(mem_mib * PLACE_GPU_MILLI / card_mib);
}

void place_mig_frag_table(const struct place_mig_gpu *g, const struct place_mig_demand *mix,
                          size_t count, double table[PLACE_MIG_STATES])
{
    for (unsigned u = 0; u < PLACE_MIG_STATES; u++)
        table[u] = (u & (uint8_t)~place_mig_mask(0, g->slices))
                       ? 0
                       : place_mig_frag(g, (uint8_t)u, mix, count);
}

static double frag_at(const struct place_mig_gpu *g, uint8_t used,
                      const struct place_mig_demand *mix, size_t count, const double *table)
{
    return table != NULL ? table[used] : place_mig_frag(g, used, mix, count);
}

/* HAMi v2.10's selectMigCandidate: 1g and 3g profiles fill from the top. */
static bool hami_from_top(const char *name)
{
    return (name[0] == '1' || name[0] == '3') && name[1] == 'g';
}

static int choose_hami(const struct place_mig_gpu *g, uint64_t mem, struct place_mig_choice *out)
{
    bool done[PLACE_MIG_PROFILES_MAX] = {false};
    bool any_fit = false, any_refused = false;
    for (unsigned round = 0; round < g->profile_count; round++) {
        int best = -1; /* next profile in (memory, size) order, first listed on a tie */
        for (unsigned p = 0; p < g->profile_count; p++) {
            const struct place_mig_profile *pr = &g->profiles[p];
            if (done[p])
                continue;
            if (best < 0 || pr->mem_mib < g->profiles[best].mem_mib ||
                (pr->mem_mib == g->profiles[best].mem_mib && pr->size < g->profiles[best].size))
                best = (int)p;
        }
        done[best] = true;
        const struct place_mig_profile *pr = &g->profiles[best];
        if (!place_mig_fits(g, (unsigned)best, mem, 0, PLACE_MIG_RULE_HAMI))
            continue;
        any_fit = true;
        bool top = hami_from_top(pr->name);
        for (unsigned k = 0; k < g->slices; k++) {
            unsigned s = top ? g->slices - 1u - k : k;
            if (!(pr->placements & (1u << s)) || s + pr->size > g->slices ||
                (place_mig_mask(s, pr->size) & g->used))
                continue;
            if (g->refused[best] & (1u << s)) {
                any_refused = true;
                continue;
            }
            out->profile = best;
            out->start = (uint8_t)s;
            out->size = pr->size;
            out->score = 0;
            out->why = PLACE_MIG_OK;
            return 0;
        }
    }
    out->why = !any_fit      ? PLACE_MIG_NO_PROFILE
               : any_refused ? PLACE_MIG_REFUSED
                             : PLACE_MIG_OCCUPIED;
    return -ENOSPC;
}

static int choose_vgpu(const struct place_mig_gpu *g, uint64_t mem, uint32_t cores,
                       const struct place_mig_demand *mix, size_t count, const double *table,
                       struct place_mig_choice *out)
{
    unsigned min_size = min_fit_size(g, mem, cores);
    if (min_size == 0) {
        out->why = PLACE_MIG_NO_PROFILE;
        return -ENOSPC;
    }
    double before = frag_at(g, g->used, mix, count, table);
    bool any_refused = false;
    for (unsigned p = 0; p < g->profile_count; p++) {
        const struct place_mig_profile *pr = &g->profiles[p];
        if (!place_mig_fits(g, p, mem, cores, PLACE_MIG_RULE_VGPU))
            continue;
        for (unsigned s = 0; s + pr->size <= g->slices; s++) {
            uint8_t m = place_mig_mask(s, pr->size);
            if (!(pr->placements & (1u << s)) || (m & g->used))
                continue;
            if (g->refused[p] & (1u << s)) {
                any_refused = true;
                continue;
            }
            /* The change of expected unusable slices, plus the slices taken beyond what the
             * smallest fitting profile would: those are lost to every other request. */
            double score = frag_at(g, (uint8_t)(g->used | m), mix, count, table) - before +
                           (double)(pr->size - min_size);
            if (out->profile < 0 || score < out->score - 1e-9 ||
                (score < out->score + 1e-9 && s < out->start)) {
                out->profile = (int)p;
                out->start = (uint8_t)s;
                out->size = pr->size;
                out->score = score;
            }
        }
    }
    if (out->profile >= 0) {
        out->why = PLACE_MIG_OK;
        return 0;
    }
    out->why = any_refused ? PLACE_MIG_REFUSED : PLACE_MIG_OCCUPIED;
    return -ENOSPC;
}

int place_mig_choose(const struct place_mig_gpu *g, uint64_t mem_mib, uint32_t cores,
                     enum place_mig_rule rule, const struct place_mig_demand *mix, size_t count,
                     const double *table, struct place_mig_choice *out)
{
    memset(out, 0, sizeof *out);
    out->profile = -1;
    if (g->slices == 0 || g->slices > PLACE_MIG_SLICES_MAX ||
        g->profile_count > PLACE_MIG_PROFILES_MAX) {
        out->why = PLACE_MIG_NO_PROFILE;
        return -ENOSPC;
    }
    if (rule == PLACE_MIG_RULE_HAMI)
        return choose_hami(g, mem_mib, out);
    return choose_vgpu(g, mem_mib, cores, mix, count, table, out);
}

int place_mig_check(const struct place_mig_gpu *g, const char *profile, unsigned start,
                    struct vg_err *err)
{
    int p = -1;
    for (unsigned i = 0; i < g->profile_count && i < PLACE_MIG_PROFILES_MAX; i++)
        if (strcmp(g->profiles[i].name, profile) == 0)
            p = (int)i;
    if (p < 0)
        return vg_err_set(err, -EINVAL, "MIG profile '%s' is not one the GPU allows", profile);
    const struct place_mig_profile *pr = &g->profiles[p];
    if (start >= PLACE_MIG_SLICES_MAX || start + pr->size > g->slices)
        return vg_err_set(err, -EINVAL,
                          "MIG placement %s at slice %u is outside the GPU's %u slices", profile,
                          start, g->slices);
    if (!(pr->placements & (1u << start)))
        return vg_err_set(err, -EINVAL, "MIG profile %s cannot start at slice %u", profile, start);
    if (place_mig_mask(start, pr->size) & g->used)
        return vg_err_set(err, -EINVAL, "MIG placement %s at slice %u overlaps an instance",
                          profile, start);
    if (g->refused[p] & (1u << start))
        return vg_err_set(err, -EINVAL,
                          "MIG placement %s at slice %u was refused by the node lately", profile,
                          start);
    return 0;
}

const char *place_mig_why_text(enum place_mig_why why)
{
    switch (why) {
    case PLACE_MIG_OK:
        return "fits";
    case PLACE_MIG_NO_PROFILE:
        return "vgpu: no MIG profile the GPUs allow has the memory and compute asked";
    case PLACE_MIG_OCCUPIED:
        return "vgpu: every MIG placement that fits overlaps an existing instance";
    case PLACE_MIG_REFUSED:
        return "vgpu: the free MIG placements were refused by the node lately "
               "(vgpu.io/mig-refused)";
    }
    return "vgpu: no MIG placement";
}
