/* Dynamic MIG in the scheduler (docs/scheduler.md, "MIG on demand"): a GPU whose inventory
 * carries `mig` takes no card shares (state.c fills it in the placement core); a pod the
 * card shares cannot place gets, per container, a GPU instance chosen by vgpu's MIG rule
 * (placement/mig.h) on the offered nodes, recorded in its decision. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/auto.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"
#include "placement/mig.h"
#include "scheduler/internal.h"

#define MIG_REFUSAL_S 600 /* a refused placement is not tried again for 10 minutes */
#define MIG_DEMANDS   64  /* demands a kind's mapped mix keeps (one per profile subset) */
#define MIG_KINDS     4   /* kinds of MIG GPU whose mapped mix and table are kept */

/* One kind of MIG GPU (its profiles, model and place_mig_card_mib) with the learned
 * mix mapped onto its profiles (place_mig_mix_map) and place_mig_frag under that mix for
 * every occupancy: built once per learned mix (mix_gen), read by every decision after. */
struct sched_mig_kind {
    bool valid;
    uint64_t mix_gen;
    uint16_t model;
    uint64_t card_mib;
    struct place_mig_gpu gpu; /* profiles only: no slices used or refused */
    size_t n;
    struct place_mig_demand mix[MIG_DEMANDS];
    double table[PLACE_MIG_STATES];
};

bool sched_mig_gpu(const struct sched_state *s, int32_t idx, unsigned g)
{
    const struct sched_node *info = &s->nodes[idx];
    return info->has_inventory && info->mig != NULL && g < info->inventory.gpu_count &&
           info->mig[g].slices > 0;
}

int sched_mig_charge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                     struct vg_err *err)
{
    unsigned g = sh->gpus[0];
    if (sh->gpu_count != 1 || g >= PLACE_MAX_GPUS || !sched_mig_gpu(s, node, g))
        return vg_err_set(err, -EINVAL, "node %s: GPU %u is not in dynamic MIG mode",
                          s->cluster->nodes[node].name, g);
    uint8_t m = place_mig_mask(sh->mig_start, sh->mig_size);
    if (s->nodes[node].mig_held[g] & m)
        return vg_err_set(err, -EINVAL,
                          "node %s: MIG instance %s at slice %u overlaps another pod's",
                          s->cluster->nodes[node].name, sh->mig_profile, sh->mig_start);
    s->nodes[node].mig_held[g] |= m;
    return 0;
}

void sched_mig_uncharge(struct sched_state *s, int32_t node, const struct sched_share *sh)
{
    unsigned g = sh->gpus[0];
    if (g < PLACE_MAX_GPUS)
        s->nodes[node].mig_held[g] &= (uint8_t)~place_mig_mask(sh->mig_start, sh->mig_size);
}

void sched_mig_refused_update(struct sched_state *s, int32_t idx, const char *text)
{
    struct sched_node *info = &s->nodes[idx];
    info->refused_count = 0;
    if (text == NULL)
        return;
    VG_AUTO_FREE struct annot_mig_refused *r = xmalloc(sizeof *r);
    struct vg_err err = {0};
    if (annot_mig_refused_decode(text, strlen(text), r, &err) < 0) {
        vg_log(VG_LOG_WARN, "node MIG refusals skipped", "node=%s reason=\"%s\"",
               s->cluster->nodes[idx].name, err.msg);
        return;
    }
    const struct place_node *n = &s->cluster->nodes[idx];
    for (unsigned i = 0; i < r->count; i++)
        for (unsigned g = 0; g < n->gpu_count; g++)
            if (strcmp(n->gpus[g].uuid, r->refused[i].uuid) == 0) {
                struct sched_mig_refusal *o = &info->refused[info->refused_count++];
                o->gpu = (uint8_t)g;
                o->start = r->refused[i].start;
                o->time = r->refused[i].time;
                (void)vg_strlcpy(o->profile, r->refused[i].profile, sizeof o->profile);
            }
}

/* The memory of a GPU's largest profile: what "the whole card" is in MIG mode. */
static uint64_t mig_largest(const struct annot_mig *m)
{
    uint64_t largest = 0;
    for (unsigned p = 0; p < m->profile_count; p++)
        largest = m->profiles[p].memory_mib > largest ? m->profiles[p].memory_mib : largest;
    return largest;
}

/* place_mig_card_mib of the GPU the inventory describes. */
static uint64_t mig_card_mib(const struct annot_mig *m)
{
    struct place_mig_gpu v = {.slices = m->slices, .profile_count = m->profile_count};
    for (unsigned p = 0; p < m->profile_count && p < PLACE_MIG_PROFILES_MAX; p++) {
        v.profiles[p].mem_mib = m->profiles[p].memory_mib;
        v.profiles[p].size = m->profiles[p].size;
    }
    return place_mig_card_mib(&v);
}

int sched_mig_resolve(const struct sched_state *s, int32_t idx, struct sched_share *sh,
                      struct vg_err *err)
{
    if (sh->gpu_count != 1 || !sched_mig_gpu(s, idx, sh->gpus[0]))
        return vg_err_set(err, -EINVAL, "MIG profile %s named for a GPU not in dynamic MIG mode",
                          sh->mig_profile);
    const struct annot_mig *m = &s->nodes[idx].mig[sh->gpus[0]];
    int p = annot_mig_profile_find(m, sh->mig_profile);
    unsigned size = 0;
    if (p >= 0)
        size = m->profiles[p].size;
    for (unsigned i = 0; i < m->instance_count && size == 0; i++)
        if (strcmp(m->instances[i].profile, sh->mig_profile) == 0 &&
            m->instances[i].start == sh->mig_start)
            size = m->instances[i].size; /* a profile no longer allowed, still in use */
    if (size == 0 || sh->mig_start + size > m->slices)
        return vg_err_set(err, -EINVAL, "MIG profile %s at slice %u is not one the GPU lists",
                          sh->mig_profile, sh->mig_start);
    sh->mig_size = (uint8_t)size;
    sh->mig_milli = (uint16_t)place_mig_share_milli(sh->mem[0], mig_card_mib(m));
    return 0;
}

/* GPU g of node idx as the chooser sees it now: the profiles it allows, the slices its
 * instances and the model's promises take, and the refusals of the last 10 minutes. */
static void mig_view(const struct sched_state *s, int32_t idx, unsigned g, int64_t now_s,
                     struct place_mig_gpu *out)
{
    const struct sched_node *info = &s->nodes[idx];
    const struct annot_mig *a = &info->mig[g];
    memset(out, 0, sizeof *out);
    out->slices = a->slices;
    out->profile_count = a->profile_count;
    for (unsigned p = 0; p < a->profile_count; p++) {
        const struct annot_mig_profile *ap = &a->profiles[p];
        struct place_mig_profile *pp = &out->profiles[p];
        (void)vg_strlcpy(pp->name, ap->name, sizeof pp->name);
        pp->mem_mib = ap->memory_mib;
        pp->sms = ap->sms;
        pp->size = ap->size;
        pp->placements = ap->placements;
        if (ap->size == a->slices && ap->sms > out->max_sms)
            out->max_sms = ap->sms; /* the whole-GPU profile's SMs; else the largest listed */
    }
    for (unsigned i = 0; i < a->instance_count; i++)
        out->used |= place_mig_mask(a->instances[i].start, a->instances[i].size);
    out->used |= info->mig_held[g];
    for (unsigned i = 0; i < info->refused_count; i++) {
        const struct sched_mig_refusal *r = &info->refused[i];
        int p = annot_mig_profile_find(a, r->profile);
        if (r->gpu == g && p >= 0 && r->start < PLACE_MIG_SLICES_MAX &&
            now_s - r->time < MIG_REFUSAL_S)
            out->refused[p] |= (uint8_t)(1u << r->start);
    }
}

/* The memory a container asks of one GPU whose largest profile has mem_total MiB (HAMi's
 * defaulting: no amount means the whole card; in MIG mode the whole card is its largest
 * instance, whose memory is a little below the card's). */
static uint64_t mig_mem_need(const struct place_request *r, uint64_t mem_total)
{
    if (r->gpu_mem_mib > 0)
        return r->gpu_mem_mib;
    unsigned pct = r->gpu_mem_pct > 0 ? r->gpu_mem_pct : 100;
    return (mem_total * pct + 99) / 100;
}

static bool mig_same_kind(const struct place_mig_gpu *a, const struct place_mig_gpu *b)
{
    if (a->slices != b->slices || a->profile_count != b->profile_count || a->max_sms != b->max_sms)
        return false;
    for (unsigned p = 0; p < a->profile_count; p++) {
        const struct place_mig_profile *x = &a->profiles[p], *y = &b->profiles[p];
        if (strcmp(x->name, y->name) != 0 || x->mem_mib != y->mem_mib || x->sms != y->sms ||
            x->size != y->size || x->placements != y->placements)
            return false;
    }
    return true;
}

/* The kind of the GPU v (model, place_mig_card_mib card_mib) under the learned mix:
 * found, or built in the least recently built slot. NULL when the learned mix has no type
 * this kind serves (the caller scores against the pod itself then). */
static const struct sched_mig_kind *mig_kind(struct sched_state *s, const struct place_mig_gpu *v,
                                             uint16_t model, uint64_t card_mib)
{
    if (s->mig_kinds == NULL)
        s->mig_kinds = xcalloc(MIG_KINDS, sizeof *s->mig_kinds);
    size_t slot = MIG_KINDS;
    for (size_t i = 0; i < MIG_KINDS && slot == MIG_KINDS; i++) {
        const struct sched_mig_kind *k = &s->mig_kinds[i];
        if (k->valid && k->model == model && k->card_mib == card_mib && mig_same_kind(&k->gpu, v))
            slot = i;
    }
    if (slot < MIG_KINDS && s->mig_kinds[slot].mix_gen == s->mix_gen)
        return s->mig_kinds[slot].n > 0 ? &s->mig_kinds[slot] : NULL;
    if (slot == MIG_KINDS) { /* a new kind: a free slot, else the one built longest ago */
        slot = 0;
        for (size_t i = 0; i < MIG_KINDS; i++) {
            const struct sched_mig_kind *k = &s->mig_kinds[i], *o = &s->mig_kinds[slot];
            if (!k->valid || (o->valid && k->mix_gen < o->mix_gen)) {
                slot = i;
                if (!k->valid)
                    break;
            }
        }
    }
    struct sched_mig_kind *k = &s->mig_kinds[slot];
    k->valid = true;
    k->mix_gen = s->mix_gen;
    k->model = model;
    k->card_mib = card_mib;
    k->gpu = *v;
    k->gpu.used = 0;
    memset(k->gpu.refused, 0, sizeof k->gpu.refused);
    k->n = place_mig_mix_map(&k->gpu, card_mib, model, &s->mix_learned, k->mix, MIG_DEMANDS);
    if (k->n > 0)
        place_mig_frag_table(&k->gpu, k->mix, k->n, k->table);
    return k->n > 0 ? k : NULL;
}

/* The best instance for one container request on node idx, skipping the GPUs in `taken`
 * (bits): scored against the learned mix mapped onto each GPU's profiles (mig_kind), or
 * against the request itself while the mix holds nothing the GPU serves. -1 when none,
 * with *why the most telling reason. */
static int mig_best_gpu(struct sched_state *s, int32_t idx, const struct place_request *r,
                        uint32_t taken, const uint8_t *extra, int64_t now_s,
                        struct place_mig_choice *best, enum place_mig_why *why)
{
    const struct place_node *n = &s->cluster->nodes[idx];
    int best_g = -1, best_used = 0;
    for (unsigned g = 0; g < n->gpu_count; g++) {
        if (!sched_mig_gpu(s, idx, g) || (taken & (1u << g)) ||
            !s->nodes[idx].inventory.gpus[g].healthy || sched_gpu_blocked(s, idx, g))
            continue;
        struct place_mig_gpu v;
        mig_view(s, idx, g, now_s, &v);
        v.used |= extra[g];
        struct place_mig_choice c;
        uint64_t largest = mig_largest(&s->nodes[idx].mig[g]);
        uint64_t mem = mig_mem_need(r, largest);
        uint32_t cores = r->gpu_milli / 10;
        const struct sched_mig_kind *k = mig_kind(s, &v, n->gpus[g].model, place_mig_card_mib(&v));
        struct place_mig_demand self = {mem, cores, 1};
        int rc =
            k != NULL
                ? place_mig_choose(&v, mem, cores, PLACE_MIG_RULE_VGPU, k->mix, k->n, k->table, &c)
                : place_mig_choose(&v, mem, cores, PLACE_MIG_RULE_VGPU, &self, 1, NULL, &c);
        if (rc < 0) {
            if (c.why > *why) /* occupied or refused say more than "no profile" */
                *why = c.why;
            continue;
        }
        /* On a tie the GPU already partitioned most: an empty one stays whole. */
        int used = __builtin_popcount(v.used);
        if (best_g < 0 || c.score < best->score - 1e-9 ||
            (c.score < best->score + 1e-9 && used > best_used)) {
            *best = c;
            best_g = (int)g;
            best_used = used;
        }
    }
    return best_g;
}

struct sched_pod *sched_mig_decide(struct sched_state *s, const char *key,
                                   const struct sched_container_request *reqs, int count,
                                   int32_t *ids, size_t n, const char **why, int64_t now_s)
{
    int32_t best_node = -1;
    double best_score = 0;
    struct sched_share best_shares[ANNOT_MAX_CONTAINERS];
    int first_gpu = -1;
    for (int c = 0; c < count && first_gpu < 0; c++)
        if (reqs[c].request.gpu_count > 0)
            first_gpu = c;
    if (first_gpu < 0)
        return NULL;
    /* Only offers with a MIG GPU take part; without any, nothing else is done (not even
     * bringing the learned mix up to date). */
    size_t with_mig = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t idx = ids[i];
        bool has_mig = false;
        for (unsigned g = 0; idx >= 0 && g < s->cluster->nodes[idx].gpu_count && !has_mig; g++)
            has_mig = sched_mig_gpu(s, idx, g);
        why[i] = NULL;
        if (!has_mig)
            ids[i] = -1;
        else
            with_mig++;
    }
    if (with_mig == 0)
        return NULL;
    struct place_frag_cache *unused_frag;
    (void)sched_mix(s, &reqs[first_gpu].request, &unused_frag); /* mix_learned brought up to date */
    for (size_t i = 0; i < n; i++) {
        int32_t idx = ids[i];
        if (idx < 0)
            continue;
        struct sched_share shares[ANNOT_MAX_CONTAINERS];
        uint8_t extra[PLACE_MAX_GPUS] = {0};
        uint32_t taken = 0;
        double total = 0;
        enum place_mig_why w = PLACE_MIG_NO_PROFILE;
        bool ok = true;
        memset(shares, 0, sizeof shares);
        for (int c = 0; c < count && ok; c++) {
            const struct place_request *r = &reqs[c].request;
            if (r->gpu_count == 0)
                continue;
            if (r->gpu_count > 1) {
                why[i] = "vgpu: a container asks for more than one GPU; MIG instances are made "
                         "one per container";
                ok = false;
                break;
            }
            struct place_mig_choice ch = {.profile = -1};
            int g = mig_best_gpu(s, idx, r, taken, extra, now_s, &ch, &w);
            if (g < 0) {
                why[i] = place_mig_why_text(w);
                ok = false;
                break;
            }
            const struct annot_mig_profile *ap = &s->nodes[idx].mig[g].profiles[ch.profile];
            struct sched_share *sh = &shares[c];
            sh->gpu_count = 1;
            sh->gpus[0] = (uint8_t)g;
            sh->mem[0] = ap->memory_mib;
            sh->milli = 0;
            sh->mig_start = ch.start;
            sh->mig_size = ch.size;
            sh->mig_milli = (uint16_t)place_mig_share_milli(ap->memory_mib,
                                                            mig_card_mib(&s->nodes[idx].mig[g]));
            (void)vg_strlcpy(sh->mig_profile, ap->name, sizeof sh->mig_profile);
            extra[g] |= place_mig_mask(ch.start, ch.size);
            taken |= 1u << g; /* one instance per GPU for a pod: its containers apart */
            total += ch.score;
        }
        if (ok && (best_node < 0 || total < best_score - 1e-9)) {
            best_node = idx;
            best_score = total;
            memcpy(best_shares, shares, sizeof shares);
        }
    }
    if (best_node < 0)
        return NULL;
    struct sched_pod *p = xcalloc(1, sizeof *p);
    (void)vg_strlcpy(p->key, key, sizeof p->key);
    p->node = best_node;
    p->shares = xcalloc((size_t)count, sizeof *p->shares);
    for (int c = 0; c < count; c++) { /* one share per container, as decide_pod keeps them */
        p->shares[p->share_count] = best_shares[c];
        struct vg_err err = {0};
        if (best_shares[c].gpu_count > 0 &&
            sched_share_charge(s, best_node, &p->shares[p->share_count], 0, &err) < 0) {
            vg_log(VG_LOG_ERROR, "MIG charge failed; model out of step", "pod=%s err=\"%s\"", key,
                   err.msg);
            while (p->share_count-- > 0)
                sched_share_uncharge(s, best_node, &p->shares[p->share_count], 0);
            free(p->shares);
            free(p);
            return NULL;
        }
        p->share_count++;
    }
    p->applied = true;
    (void)vg_strlcpy(p->node_name, s->cluster->nodes[best_node].name, sizeof p->node_name);
    return p;
}
