/* Cluster state: nodes' inventories and pods' allocations, charged to one placement
 * model.
 *
 * A filter sets one bit per node kube-scheduler offered (and that has a fresh inventory)
 * in a node mask and asks the placement core for a node among those, so the core's own
 * feasibility and scoring run over exactly the offered subset; a per-node memo of the
 * core's verdicts (place_memo) is reused across filters while a node is unchanged.
 *
 * A pod record holds its shares in compact form (GPU indices, compute, memory per GPU);
 * a release rebuilds the request and decision from them, so the model returns bit for
 * bit to its earlier state. Records come from two places: an assumption made by filter
 * (origin "assumed" until its bind is written) and a vgpu.io/decision annotation read
 * from the API (origin "api"). The API wins when they differ. */
#include "scheduler/internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "annot/annot.h"
#include "base/auto_json.h"
#include "base/log.h"
#include "base/mem.h"
#include "base/str.h"

#define BIG_CPU (UINT64_MAX / 4)

enum memo_op { MEMO_FORGET, MEMO_RESET, MEMO_FREE };

static void memo_each(struct sched_state *s, enum memo_op op, size_t node)
{
    for (size_t i = 0; i < SCHED_MEMOS; i++)
        if (op == MEMO_FORGET)
            place_memo_forget(&s->memo[i], node);
        else if (op == MEMO_RESET)
            place_memo_reset(&s->memo[i]);
        else
            place_memo_free(&s->memo[i]);
}

int sched_state_new(const struct sched_options *o, struct sched_state **out, struct vg_err *err)
{
    struct sched_state *s = xcalloc(1, sizeof *s);
    s->opt = *o;
    if (s->opt.assume_ttl_ms == 0)
        s->opt.assume_ttl_ms = 30000;
    if (s->opt.scheduler_name == NULL)
        s->opt.scheduler_name = "vgpu-scheduler";
    s->cluster = place_cluster_new();
    if (s->cluster == NULL) {
        free(s);
        return vg_err_set(err, -ENOMEM, "out of memory");
    }
    sched_map_init(&s->node_index);
    sched_map_init(&s->pods);
    sched_map_init(&s->records);
    place_mix_init(&s->mix_seen);
    place_mix_init(&s->mix_learned);
    place_mix_init(&s->mix_self);
    vg_prng_seed(&s->rng, 1);
    vg_buf_init(&s->scan_text, "decoded node names", SCHED_MAX_BODY_BYTES);
    *out = s;
    return 0;
}

static void pod_free(struct sched_pod *p)
{
    if (p == NULL)
        return;
    free(p->decision);
    free(p->names);
    free(p->shares);
    free(p);
}
VG_DEFINE_AUTO(pod_freep, struct sched_pod, pod_free)

void sched_state_free(struct sched_state *s)
{
    if (s == NULL)
        return;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1))
        pod_free(s->pods.slots[i].value);
    sched_map_release(&s->pods);
    for (size_t i = sched_map_next(&s->records, 0); i < s->records.cap;
         i = sched_map_next(&s->records, i + 1))
        free(s->records.slots[i].value);
    sched_map_release(&s->records);
    sched_pending_release(s);
    sched_verdicts_release(s);
    sched_map_release(&s->node_index);
    for (size_t i = 0; s->nodes != NULL && i < s->cluster->node_count; i++) {
        free(s->nodes[i].mig);
        free(s->nodes[i].held);
    }
    free(s->nodes);
    free(s->live);
    free(s->offered);
    free(s->picked);
    free(s->listed);
    free(s->filter_reqs);
    free(s->mig_ids);
    free(s->mig_why);
    free(s->mig_kinds);
    vg_buf_free(&s->scan_text);
    free(s->scan_offers);
    memo_each(s, MEMO_FREE, 0);
    place_frag_cache_free(&s->frag);
    place_mix_clear(&s->mix_seen);
    place_mix_clear(&s->mix_learned);
    place_mix_clear(&s->mix_self);
    for (size_t i = 0; i < s->type_count; i++)
        free(s->types[i].key);
    free(s->types);
    place_cluster_free(s->cluster);
    free(s);
}

const struct sched_options *sched_state_options(const struct sched_state *s)
{
    return &s->opt;
}

const struct place_cluster *sched_state_cluster(const struct sched_state *s)
{
    return s->cluster;
}

void sched_state_stats(const struct sched_state *s, struct sched_stats *out)
{
    *out = s->stats;
    out->nodes = 0;
    out->nodes_with_inventory = 0;
    for (size_t i = 0; i < s->cluster->node_count; i++) {
        if (!s->nodes[i].present)
            continue;
        out->nodes++;
        if (s->nodes[i].has_inventory)
            out->nodes_with_inventory++;
    }
    out->pods_tracked = s->pods.count;
    out->assumed = 0;
    out->bound = 0;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (p->assumed)
            out->assumed++;
        else if (p->applied)
            out->bound++;
    }
}

/* ---- charging shares ---------------------------------------------------------------- */

static void share_to_place(const struct sched_share *sh, int32_t node, struct place_request *r,
                           struct place_decision *d)
{
    memset(r, 0, sizeof *r);
    memset(d, 0, sizeof *d);
    r->gpu_count = sh->gpu_count;
    r->gpu_milli = sh->milli;
    r->exclusive = sh->exclusive;
    r->high = sh->high;
    d->node = node;
    d->gpu_count = sh->gpu_count;
    memcpy(d->gpus, sh->gpus, sizeof d->gpus);
    d->milli = sh->milli;
    memcpy(d->mem_mib, sh->mem, sizeof d->mem_mib);
    d->exclusive = sh->exclusive;
    d->pod_class = sh->pod_class;
}

/* ---- learned mix ---------------------------------------------------------------------
 *
 * fgd and default score a node by what it leaves for the workload to come, so they need a
 * mix of task types. The scheduler learns it from what it holds: every container share in
 * the model (bound or promised) is one observation of its shape (GPU count and share, and the
 * pod's GPU-type lists, so default weighs the pressure of pods restricted to some models; the
 * model has no CPU, so default's CPU pressure is 0 here). Scoring uses that mix with each type's
 * count rounded to a power of 1.1 and the types in a fixed order, rebuilt only when one of those
 * rounded counts changes: a type's count must grow or shrink by about a tenth first, and other
 * types do not move it, so the F_n and verdict memos live for many decisions; and the mix is a
 * function of the pods alone, so a scheduler rebuilt from the API after a restart scores exactly as
 * before. */

#define MIX_SCALE 1000 /* weight of a type seen once */
#define MIX_STEP  1.1  /* counts are rounded to powers of this */

/* Appends "name," for each entry of a list (entries hold no comma); false when it does not
 * fit. */
static bool key_list(char *buf, size_t size, size_t *len, const char *list, size_t entry,
                     uint8_t count)
{
    for (uint8_t i = 0; i < count; i++) {
        int n = snprintf(buf + *len, size - *len, "%s,", list + i * entry);
        if (n < 0 || (size_t)n >= size - *len)
            return false;
        *len += (size_t)n;
    }
    return true;
}

/* Frees the lists no pod record holds (ids are stable only while held: the mix is ordered
 * by the lists' text, not by id). Returns the first free slot, SCHED_TYPES_MAX when none. */
static size_t types_sweep(struct sched_state *s)
{
    bool held[SCHED_TYPES_MAX] = {false};
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (p->types > 0 && p->types <= SCHED_TYPES_MAX)
            held[p->types - 1] = true;
    }
    size_t slot = SCHED_TYPES_MAX;
    for (size_t i = 0; i < s->type_count; i++)
        if (!held[i]) {
            free(s->types[i].key);
            s->types[i].key = NULL;
            slot = slot < i ? slot : i;
        }
    s->types_full = false;
    return slot;
}

uint16_t sched_types_id(struct sched_state *s, const struct place_request *r)
{
    if (r->type_include_count == 0 && r->type_exclude_count == 0)
        return 0;
    /* "~2:1:a,b,c,": matching (= whole names, ~ substrings), the two counts, the entries. */
    char key[PLACE_MAX_LIST * 2 * PLACE_MODEL_MAX + 16];
    int n = snprintf(key, sizeof key, "%c%u:%u:", r->type_exact ? '=' : '~',
                     (unsigned)r->type_include_count, (unsigned)r->type_exclude_count);
    size_t len = n > 0 ? (size_t)n : 0;
    if (n < 0 ||
        !key_list(key, sizeof key, &len, &r->type_include[0][0], PLACE_MODEL_MAX,
                  r->type_include_count) ||
        !key_list(key, sizeof key, &len, &r->type_exclude[0][0], PLACE_MODEL_MAX,
                  r->type_exclude_count))
        return 0;
    size_t slot = s->type_count;
    for (size_t i = 0; i < s->type_count; i++) {
        if (s->types[i].key == NULL)
            slot = slot < i ? slot : i; /* the first free one */
        else if (strcmp(s->types[i].key, key) == 0)
            return (uint16_t)(i + 1);
    }
    if (slot == SCHED_TYPES_MAX)
        slot = types_sweep(s);
    if (slot == SCHED_TYPES_MAX) {
        if (!s->types_full)
            vg_log(VG_LOG_WARN,
                   "too many distinct GPU-type lists held; the rest count as any model", "max=%d",
                   SCHED_TYPES_MAX);
        s->types_full = true;
        return 0;
    }
    if (slot == s->type_count) {
        if (vg_array_grow(&s->types, &s->type_cap, s->type_count + 1, sizeof *s->types,
                          SCHED_TYPES_MAX, "GPU-type lists", NULL) < 0)
            return 0; /* out of memory: counts as unrestricted, as when the table is full */
        s->type_count++;
    }
    struct sched_types *t = &s->types[slot];
    memset(t, 0, sizeof *t);
    t->key = xstrdup(key);
    t->sel.type_include_count = r->type_include_count;
    t->sel.type_exclude_count = r->type_exclude_count;
    t->sel.type_exact = r->type_exact;
    memcpy(t->sel.type_include, r->type_include, sizeof t->sel.type_include);
    memcpy(t->sel.type_exclude, r->type_exclude, sizeof t->sel.type_exclude);
    return (uint16_t)(slot + 1);
}

/* The models a types id allows now (models appear with nodes); all ones for 0. */
static uint64_t types_mask(const struct sched_state *s, uint16_t id)
{
    if (id == 0 || id > s->type_count || s->types[id - 1].key == NULL)
        return UINT64_MAX;
    struct place_request r = s->types[id - 1].sel;
    struct vg_err ignored = {0};
    return place_request_resolve(s->cluster, &r, &ignored) == 0 ? r.model_mask : UINT64_MAX;
}

static const char *types_key(const struct sched_state *s, uint16_t id)
{
    return id == 0 || id > s->type_count || s->types[id - 1].key == NULL ? ""
                                                                         : s->types[id - 1].key;
}

static bool mix_type_same(const struct place_mix_type *a, const struct place_mix_type *b)
{
    return a->gpu_count == b->gpu_count && a->gpu_milli == b->gpu_milli &&
           a->cpu_milli == b->cpu_milli && a->model_mask == b->model_mask;
}

static void mix_count(struct sched_state *s, const struct sched_share *sh, uint16_t types, bool add)
{
    if (sh->gpu_count == 0)
        return;
    /* mix_seen holds the types id where the model mask goes: sched_mix resolves it. */
    struct place_mix_type t = {.gpu_count = sh->gpu_count,
                               .gpu_milli = sh->mig_size > 0 ? sh->mig_milli
                                            : sh->exclusive  ? PLACE_GPU_MILLI
                                                             : sh->milli,
                               .model_mask = types,
                               .weight = 1};
    struct place_mix *m = &s->mix_seen;
    s->mix_dirty = true;
    if (add) {
        if (place_mix_add(m, &t) < 0)
            vg_log(VG_LOG_WARN, "no memory for the learned mix", "types=%zu", m->count);
        return;
    }
    for (size_t i = 0; i < m->count; i++)
        if (mix_type_same(&m->types[i], &t)) {
            m->total_weight--;
            if (--m->types[i].weight == 0)
                m->types[i] = m->types[--m->count];
            return;
        }
}

/* A seen type with its rounded weight and its types key, in the order the mix is built. */
struct mix_entry {
    struct place_mix_type t;
    const char *key;
};

static int mix_order(const void *a, const void *b)
{
    const struct mix_entry *e = a, *f = b;
    const struct place_mix_type *x = &e->t, *y = &f->t;
    if (x->gpu_count != y->gpu_count)
        return x->gpu_count < y->gpu_count ? -1 : 1;
    if (x->gpu_milli != y->gpu_milli)
        return x->gpu_milli < y->gpu_milli ? -1 : 1;
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli < y->cpu_milli ? -1 : 1;
    return strcmp(e->key, f->key);
}

const struct place_mix *sched_mix(struct sched_state *s, const struct place_request *self,
                                  struct place_frag_cache **frag)
{
    if (s->cluster->model_count != s->mix_models) {
        s->mix_models = s->cluster->model_count; /* a model list may match a new model */
        s->mix_dirty = true;
    }
    if (s->mix_dirty) {
        s->mix_dirty = false;
        /* Ordered by shape and by the text of the model lists, not by the mask, whose bits
         * follow the order the models were met in: a scheduler restarted from the API
         * builds the same mix in the same order. */
        const struct place_mix *seen = &s->mix_seen;
        struct mix_entry *e = xcalloc(seen->count > 0 ? seen->count : 1, sizeof *e);
        for (size_t i = 0; i < seen->count; i++) {
            e[i].t = seen->types[i];
            uint16_t id = (uint16_t)seen->types[i].model_mask;
            double step = round(log((double)e[i].t.weight) / log(MIX_STEP));
            e[i].t.weight = (uint64_t)llround(MIX_SCALE * pow(MIX_STEP, step));
            e[i].t.model_mask = types_mask(s, id);
            e[i].key = types_key(s, id);
        }
        if (seen->count > 0)
            qsort(e, seen->count, sizeof *e, mix_order);
        struct place_mix q;
        place_mix_init(&q);
        bool ok = true;
        for (size_t i = 0; i < seen->count && ok; i++)
            ok = place_mix_add(&q, &e[i].t) == 0; /* lists allowing the same models merge */
        free(e);
        bool same = ok && q.count == s->mix_learned.count;
        for (size_t i = 0; same && i < q.count; i++)
            same = mix_type_same(&q.types[i], &s->mix_learned.types[i]) &&
                   q.types[i].weight == s->mix_learned.types[i].weight;
        if (ok && !same) {
            place_mix_clear(&s->mix_learned);
            s->mix_learned = q;
            s->mix_gen++;
            place_frag_cache_reset(&s->frag);
            memo_each(s, MEMO_RESET, 0);
        } else {
            place_mix_clear(&q);
        }
    }
    if (s->mix_learned.count > 0) {
        *frag = s->frag.entries ? &s->frag : NULL;
        return &s->mix_learned;
    }
    place_mix_clear(&s->mix_self);
    (void)place_mix_observe(&s->mix_self, self);
    *frag = NULL;
    return &s->mix_self;
}

int sched_share_charge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                       uint16_t types, struct vg_err *err)
{
    struct place_request r;
    struct place_decision d;
    if (sh->mig_size > 0) { /* its own GPU instance: slices, not a share of the card */
        memo_each(s, MEMO_FORGET, (size_t)node);
        int rc = sched_mig_charge(s, node, sh, err);
        if (rc == 0)
            mix_count(s, sh, types, true); /* a request the cluster sees, as any share */
        return rc;
    }
    share_to_place(sh, node, &r, &d);
    const struct place_node *n = &s->cluster->nodes[node];
    for (unsigned i = 0; i < sh->gpu_count; i++) {
        if (sh->gpus[i] >= n->gpu_count)
            return vg_err_set(err, -EINVAL, "node %s has no GPU %u", n->name, sh->gpus[i]);
        const struct place_gpu *g = &n->gpus[sh->gpus[i]];
        if (g->slots > 0 && g->tenants >= g->slots)
            return vg_err_set(err, -EINVAL, "GPU %s of node %s has all %u slots taken", g->uuid,
                              n->name, g->slots);
    }
    memo_each(s, MEMO_FORGET, (size_t)node);
    int rc = place_allocate(s->cluster, &r, &d, err);
    if (rc == 0)
        mix_count(s, sh, types, true);
    return rc;
}

void sched_share_uncharge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                          uint16_t types)
{
    struct place_request r;
    struct place_decision d;
    struct vg_err err = {0};
    if (sh->mig_size > 0) {
        memo_each(s, MEMO_FORGET, (size_t)node);
        sched_mig_uncharge(s, node, sh);
        mix_count(s, sh, types, false);
        return;
    }
    share_to_place(sh, node, &r, &d);
    memo_each(s, MEMO_FORGET, (size_t)node);
    if (place_release(s->cluster, &r, &d, &err) < 0)
        vg_log(VG_LOG_ERROR, "release failed; model out of step", "node=%s err=\"%s\"",
               s->cluster->nodes[node].name, err.msg);
    else
        mix_count(s, sh, types, false);
}

/* After the health of some of node idx's cards changed: the summaries and memos. */
static void health_changed(struct sched_state *s, int32_t idx)
{
    memo_each(s, MEMO_FORGET, (size_t)idx);
    if (s->batch) {
        s->refresh_needed = true;
        return;
    }
    place_cluster_refresh(s->cluster);
    memo_each(s, MEMO_RESET, 0);
    place_frag_cache_reset(&s->frag);
}

/* A GPU's health as its inventory says, and no bound pod blocking it. */
static bool gpu_healthy(const struct sched_state *s, int32_t idx, unsigned g)
{
    const struct sched_node *info = &s->nodes[idx];
    return info->present && info->has_inventory && g < info->inventory.gpu_count &&
           info->inventory.gpus[g].healthy && info->blocked[g] == 0;
}

bool sched_gpu_blocked(const struct sched_state *s, int32_t idx, unsigned g)
{
    return idx >= 0 && g < PLACE_MAX_GPUS && s->nodes[idx].blocked[g] > 0;
}

/* p's GPUs (block) take no new tenants, or (unblock) again when nobody else blocks them. */
static void pod_block(struct sched_state *s, struct sched_pod *p, bool block)
{
    if (p->blocking == block || p->node < 0)
        return;
    p->blocking = block;
    struct sched_node *info = &s->nodes[p->node];
    struct place_node *n = &s->cluster->nodes[p->node];
    for (unsigned k = 0; k < p->share_count; k++)
        for (unsigned i = 0; i < p->shares[k].gpu_count; i++) {
            unsigned g = p->shares[k].gpus[i];
            if (g >= PLACE_MAX_GPUS)
                continue;
            if (block)
                info->blocked[g]++;
            else if (info->blocked[g] > 0)
                info->blocked[g]--;
            if (g < n->gpu_count)
                n->gpus[g].healthy = gpu_healthy(s, p->node, g);
        }
    health_changed(s, p->node);
}

/* Charges every share of p to its node; all or nothing. */
int sched_pod_apply(struct sched_state *s, struct sched_pod *p, struct vg_err *err)
{
    if (p->applied)
        return 0;
    if (p->node < 0)
        return vg_err_set(err, -ENOENT, "node %s is unknown", p->node_name);
    for (unsigned i = 0; i < p->share_count; i++) {
        int rc = sched_share_charge(s, p->node, &p->shares[i], p->types, err);
        if (rc < 0) {
            while (i-- > 0)
                sched_share_uncharge(s, p->node, &p->shares[i], p->types);
            /* Bound, so its containers may be using these GPUs right now (a decision
             * someone else wrote, or one that no longer fits a changed inventory): nothing
             * more goes there while it runs. */
            if (p->bound && !p->assumed) {
                pod_block(s, p, true);
                vg_log(VG_LOG_WARN, "bound pod's decision does not fit: its GPUs take no new pods",
                       "pod=%s node=%s err=\"%s\"", p->key, p->node_name, err->msg);
            }
            return rc;
        }
    }
    pod_block(s, p, false);
    p->applied = true;
    return 0;
}

void sched_pod_unapply(struct sched_state *s, struct sched_pod *p)
{
    pod_block(s, p, false);
    if (!p->applied)
        return;
    for (unsigned i = p->share_count; i-- > 0;)
        sched_share_uncharge(s, p->node, &p->shares[i], p->types);
    p->applied = false;
}

void sched_pod_drop(struct sched_state *s, struct sched_pod *p)
{
    sched_pod_unapply(s, p);
    sched_map_remove(&s->pods, p->key);
    pod_free(p);
}

/* ---- nodes -------------------------------------------------------------------------- */

void sched_node_sync(struct sched_state *s, int32_t idx)
{
    const struct sched_node *info = &s->nodes[idx];
    s->live[idx] = (struct sched_node_live){
        .heartbeat = info->inventory.heartbeat,
        .present = info->present,
        .has_inventory = info->has_inventory,
    };
}

int32_t sched_node_find(const struct sched_state *s, const char *name)
{
    void *v = sched_map_get(&s->node_index, name);
    return v == NULL ? -1 : (int32_t)((uintptr_t)v - 1);
}

static int32_t node_add(struct sched_state *s, const char *name, struct vg_err *err)
{
    if (s->cluster->node_count >= SCHED_MAX_NODES)
        return vg_err_set(err, -ENOSPC, "more than %d nodes", SCHED_MAX_NODES);
    int idx = place_cluster_add_node(s->cluster, name, BIG_CPU, BIG_CPU, 0, NULL, 0, err);
    if (idx < 0)
        return idx;
    /* Not vg_array_grow: two arrays and three bitmaps grow together, always by a
     * multiple of 64 nodes; SCHED_MAX_NODES above is the ceiling. */
    if ((size_t)idx >= s->node_info_cap) {
        size_t cap = s->node_info_cap ? s->node_info_cap * 2 : 64; /* a multiple of 64 */
        s->nodes = xrealloc(s->nodes, cap * sizeof *s->nodes);
        memset(s->nodes + s->node_info_cap, 0, (cap - s->node_info_cap) * sizeof *s->nodes);
        s->live = xrealloc(s->live, cap * sizeof *s->live);
        memset(s->live + s->node_info_cap, 0, (cap - s->node_info_cap) * sizeof *s->live);
        free(s->offered);
        free(s->picked);
        free(s->listed);
        s->offered = xcalloc(cap / 64, sizeof *s->offered);
        s->picked = xcalloc(cap / 64, sizeof *s->picked);
        s->listed = xcalloc(cap / 64, sizeof *s->listed);
        memo_each(s, MEMO_FREE, 0);
        for (size_t i = 0; i < SCHED_MEMOS; i++)
            if (place_memo_init(&s->memo[i], cap) < 0) /* decisions still work, only slower */
                vg_log(VG_LOG_WARN, "no memory for the placement memo", "nodes=%zu", cap);
        place_frag_cache_free(&s->frag);
        if (place_frag_cache_init(&s->frag, cap) < 0) /* fgd and default: slower */
            vg_log(VG_LOG_WARN, "no memory for the fragmentation memo", "nodes=%zu", cap);
        s->node_info_cap = cap;
    }
    memset(&s->nodes[idx], 0, sizeof s->nodes[idx]);
    memo_each(s, MEMO_FORGET, (size_t)idx);
    sched_map_put(&s->node_index, name, (void *)(uintptr_t)(idx + 1));
    return idx;
}

/* Keeps inv as info's inventory: the GPUs, and their MIG fields apart when any has them. */
static void inventory_keep(struct sched_node *info, const struct annot_inventory *inv)
{
    struct sched_inventory *k = &info->inventory;
    memset(k, 0, sizeof *k);
    k->heartbeat = inv->heartbeat;
    k->mode = inv->mode;
    k->gpu_count = inv->gpu_count;
    bool mig = false;
    for (unsigned g = 0; g < inv->gpu_count && g < ANNOT_MAX_GPUS; g++) {
        const struct annot_gpu *a = &inv->gpus[g];
        struct sched_gpu_info *o = &k->gpus[g];
        memcpy(o->uuid, a->uuid, sizeof o->uuid);
        memcpy(o->model, a->model, sizeof o->model);
        o->index = a->index;
        o->memory_mib = a->memory_mib;
        o->cores = a->cores;
        o->slots = a->slots;
        o->numa = a->numa;
        o->healthy = a->healthy;
        mig |= a->mig.slices > 0;
    }
    if (!mig) {
        free(info->mig);
        info->mig = NULL;
        return;
    }
    if (info->mig == NULL)
        info->mig = xmalloc(ANNOT_MAX_GPUS * sizeof *info->mig);
    memset(info->mig, 0, ANNOT_MAX_GPUS * sizeof *info->mig);
    for (unsigned g = 0; g < inv->gpu_count && g < ANNOT_MAX_GPUS; g++)
        info->mig[g] = inv->gpus[g].mig;
}

/* Sets node idx's GPUs from an inventory (or none), zeroes their use, and charges back
 * every applied pod on it. */
static void node_rebuild(struct sched_state *s, int32_t idx, const struct annot_inventory *inv)
{
    struct place_node *n = &s->cluster->nodes[idx];
    struct sched_node *info = &s->nodes[idx];
    memo_each(s, MEMO_FORGET, (size_t)idx);
    /* Take the node's pods off, so the rebuilt GPUs start empty. */
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (p->node == idx)
            sched_pod_unapply(s, p);
    }
    n->gpu_count = 0;
    memset(n->gpus, 0, sizeof n->gpus);
    info->has_inventory = false;
    if (inv != NULL) {
        struct vg_err err = {0};
        bool ok = true;
        for (unsigned g = 0; g < inv->gpu_count && ok; g++) {
            const struct annot_gpu *a = &inv->gpus[g];
            int model = place_cluster_model(s->cluster, a->model, &err);
            if (model < 0) {
                vg_log(VG_LOG_WARN, "node skipped", "node=%s reason=\"%s\"", n->name, err.msg);
                ok = false;
                break;
            }
            struct place_gpu *pg = &n->gpus[g];
            (void)vg_strlcpy(pg->uuid, a->uuid, sizeof pg->uuid);
            pg->model = (uint16_t)model;
            pg->numa = a->numa < 0 ? 0 : (uint8_t)a->numa;
            pg->healthy = a->healthy && info->blocked[g] == 0;
            pg->slots = (uint16_t)(a->slots > 65535 ? 65535 : a->slots);
            pg->mem_total_mib = a->memory_mib;
            /* A card that offers less than 100 % of its compute starts with the rest
             * taken. */
            pg->milli_used = (100u - a->cores) * 10u;
            if (a->mig.slices > 0) {
                /* Dynamic MIG: the card takes GPU instances (mig.c), never a share. */
                pg->milli_used = PLACE_GPU_MILLI;
                pg->mem_used_mib = pg->mem_total_mib;
            }
        }
        if (ok) {
            n->gpu_count = (uint16_t)inv->gpu_count;
            n->model = inv->gpu_count > 0 ? n->gpus[0].model : 0;
            info->has_inventory = true;
            inventory_keep(info, inv);
        } else {
            n->gpu_count = 0;
            s->stats.skipped_nodes++;
        }
    }
    if (!s->batch) {
        place_cluster_refresh(s->cluster);
        memo_each(s, MEMO_RESET, 0);
        place_frag_cache_reset(&s->frag);
    } else {
        s->refresh_needed = true;
    }
    if (s->batch)
        return; /* the resync re-applies every pod at its end */
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (p->node != idx || p->applied)
            continue;
        struct vg_err err = {0};
        if (sched_pod_apply(s, p, &err) < 0) {
            vg_log(VG_LOG_WARN, "pod allocation no longer fits its node", "pod=%s err=\"%s\"",
                   p->key, err.msg);
            s->stats.conflicts++;
        }
    }
}

/* Keeps the inventory's held list (display only; dropped with an inventory that is gone
 * or unreadable). Allocated only for nodes whose inventory has one. */
static void held_keep(struct sched_node *info, const struct annot_inventory *inv)
{
    unsigned n = inv != NULL ? inv->held_count : 0;
    if (n == 0) {
        free(info->held);
        info->held = NULL;
        info->held_count = 0;
        return;
    }
    if (info->held == NULL)
        info->held = xmalloc(ANNOT_HELD_MAX * sizeof *info->held);
    memcpy(info->held, inv->held, n * sizeof *info->held);
    info->held_count = n;
}

static bool same_gpus(const struct annot_inventory *a, const struct sched_node *info)
{
    const struct sched_inventory *b = &info->inventory;
    if (a->gpu_count != b->gpu_count || a->mode != b->mode)
        return false;
    for (unsigned i = 0; i < a->gpu_count; i++) {
        const struct annot_gpu *x = &a->gpus[i];
        const struct sched_gpu_info *y = &b->gpus[i];
        static const struct annot_mig none;
        const struct annot_mig *ym = info->mig != NULL ? &info->mig[i] : &none;
        if (strcmp(x->uuid, y->uuid) != 0 || x->index != y->index ||
            strcmp(x->model, y->model) != 0 || x->memory_mib != y->memory_mib ||
            x->cores != y->cores || x->slots != y->slots || x->numa != y->numa ||
            x->healthy != y->healthy || memcmp(&x->mig, ym, sizeof x->mig) != 0)
            return false;
    }
    return true;
}

static struct sched_pod *pod_from_decision(struct sched_state *s, const char *key, const char *text,
                                           const struct annot_decision *d, uint16_t types,
                                           struct vg_err *err);

/* A record read while its node was unknown: map its GPUs now. false (logged) when they
 * are not on the node. */
static bool resolve_waiting(struct sched_state *s, struct sched_pod *p)
{
    VG_AUTO_FREE struct annot_decision *d = xmalloc(sizeof *d);
    struct vg_err err = {0};
    VG_AUTO(pod_freep) struct sched_pod *fresh = NULL;
    if (annot_decision_decode(p->decision, strlen(p->decision), d, &err) == 0)
        fresh = pod_from_decision(s, p->key, p->decision, d, p->types, &err);
    if (fresh == NULL || fresh->node < 0) {
        vg_log(VG_LOG_WARN, "pod decision skipped", "pod=%s reason=\"%s\"", p->key, err.msg);
        return false;
    }
    /* The same decision, the same shares in the same order: their priorities stand. */
    for (unsigned k = 0; k < fresh->share_count && k < p->share_count; k++)
        fresh->shares[k].high = p->shares[k].high;
    free(p->shares);
    p->shares = vg_steal_ptr(&fresh->shares);
    p->share_count = fresh->share_count;
    p->node = fresh->node;
    return true;
}

/* Pods whose node was unknown when their decision was read. */
static void apply_waiting(struct sched_state *s, int32_t idx, const char *name)
{
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (p->node >= 0 || strcmp(p->node_name, name) != 0)
            continue;
        (void)idx;
        if (p->decision == NULL || !resolve_waiting(s, p))
            continue;
        if (!s->batch) {
            struct vg_err err = {0};
            if (sched_pod_apply(s, p, &err) < 0)
                vg_log(VG_LOG_WARN, "pod allocation does not fit", "pod=%s err=\"%s\"", p->key,
                       err.msg);
        }
    }
    s->waiting_pods = 0;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (p->node < 0)
            s->waiting_pods++;
    }
}

void sched_node_update(struct sched_state *s, json_t *node)
{
    const char *name = sched_json_str(node, "metadata", "name", NULL);
    if (name == NULL || name[0] == '\0') {
        vg_log(VG_LOG_WARN, "node skipped", "reason=\"no metadata.name\"");
        s->stats.skipped_nodes++;
        return;
    }
    struct vg_err err = {0};
    int32_t idx = sched_node_find(s, name);
    bool added = false;
    if (idx < 0) {
        idx = node_add(s, name, &err);
        if (idx < 0) {
            vg_log(VG_LOG_WARN, "node skipped", "node=%.80s reason=\"%s\"", name, err.msg);
            s->stats.skipped_nodes++;
            return;
        }
        added = true;
    }
    struct sched_node *info = &s->nodes[idx];
    bool returned = !added && !info->present; /* node_gone marked its cards unhealthy */
    info->present = true;
    info->seen = true;
    const char *text = sched_json_str(node, "metadata", "annotations", ANNOT_KEY_GPUS);
    struct annot_inventory inv;
    bool have = false;
    if (text != NULL) {
        if (annot_inventory_decode(text, strlen(text), &inv, &err) == 0) {
            have = true;
        } else {
            vg_log(VG_LOG_WARN, "node inventory skipped", "node=%s reason=\"%s\"", name, err.msg);
            s->stats.skipped_nodes++;
        }
    }
    held_keep(info, have ? &inv : NULL);
    if (have && info->has_inventory && !returned && same_gpus(&inv, info)) {
        info->inventory.heartbeat = inv.heartbeat; /* a heartbeat alone changes nothing */
    } else if (have || info->has_inventory || added) {
        node_rebuild(s, idx, have ? &inv : NULL);
    }
    sched_mig_refused_update(
        s, idx, sched_json_str(node, "metadata", "annotations", ANNOT_KEY_MIG_REFUSED));
    sched_node_sync(s, idx);
    if (added && s->waiting_pods > 0)
        apply_waiting(s, idx, name);
}

/* A node the API no longer lists. The slot stays (indices are stable) with its pods'
 * charges (Kubernetes deletes those pods; they leave through the pod watch), and it takes
 * no new pods. Its cards count as unhealthy meanwhile, so that they weigh in no
 * cluster-wide figure (gaps, model pressure) that a scheduler started now would not see;
 * the inventory is applied again when the node comes back. */
static void node_gone(struct sched_state *s, int32_t idx, bool refresh)
{
    s->nodes[idx].present = false;
    struct place_node *n = &s->cluster->nodes[idx];
    for (uint16_t g = 0; g < n->gpu_count; g++)
        n->gpus[g].healthy = false;
    if (refresh) {
        place_cluster_refresh(s->cluster);
        memo_each(s, MEMO_RESET, 0);
        place_frag_cache_reset(&s->frag);
    }
    sched_node_sync(s, idx);
}

void sched_node_delete(struct sched_state *s, json_t *node)
{
    const char *name = sched_json_str(node, "metadata", "name", NULL);
    int32_t idx = name != NULL ? sched_node_find(s, name) : -1;
    if (idx >= 0 && s->nodes[idx].present)
        node_gone(s, idx, true);
}

void sched_nodes_resync(struct sched_state *s, json_t *items)
{
    for (size_t i = 0; i < s->cluster->node_count; i++)
        s->nodes[i].seen = false;
    s->batch = true;
    size_t k;
    json_t *node;
    json_array_foreach(items, k, node) sched_node_update(s, node);
    s->batch = false;
    for (size_t i = 0; i < s->cluster->node_count; i++)
        if (!s->nodes[i].seen && s->nodes[i].present)
            node_gone(s, (int32_t)i, false); /* sched_reapply_all refreshes once */
    sched_reapply_all(s);
}

/* After a batch: refresh the summaries once and charge every record that is not. */
void sched_reapply_all(struct sched_state *s)
{
    place_cluster_refresh(s->cluster);
    memo_each(s, MEMO_RESET, 0);
    place_frag_cache_reset(&s->frag);
    s->refresh_needed = false;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (p->applied)
            continue;
        if (p->node < 0 &&
            (p->decision == NULL || sched_node_find(s, p->node_name) < 0 || !resolve_waiting(s, p)))
            continue;
        struct vg_err err = {0};
        if (sched_pod_apply(s, p, &err) < 0) {
            vg_log(VG_LOG_WARN, "pod allocation does not fit", "pod=%s err=\"%s\"", p->key,
                   err.msg);
            s->stats.conflicts++;
        }
    }
    s->waiting_pods = 0;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (p->node < 0)
            s->waiting_pods++;
    }
}

/* ---- pods --------------------------------------------------------------------------- */

/* The name of the k-th container with GPUs in decision arg (pod_from_decision keeps one
 * share per such container, in order). */
static const char *decision_container_name(const void *arg, unsigned k)
{
    const struct annot_decision *d = arg;
    for (unsigned c = 0; c < d->container_count; c++)
        if (d->containers[c].gpu_count > 0 && k-- == 0)
            return d->containers[c].name;
    return NULL;
}

char *sched_share_names(unsigned n, const char *(*name)(const void *arg, unsigned k),
                        const void *arg)
{
    size_t len = 0;
    for (unsigned k = 0; k < n; k++) {
        const char *s = name(arg, k);
        len += (s != NULL ? strlen(s) : 0) + 1;
    }
    char *out = xmalloc(len + 1);
    size_t at = 0;
    for (unsigned k = 0; k < n; k++) {
        const char *s = name(arg, k);
        size_t l = s != NULL ? strlen(s) : 0;
        memcpy(out + at, s != NULL ? s : "", l);
        out[at + l] = '\0';
        at += l + 1;
    }
    out[at] = '\0';
    return out;
}

/* A record from a decision annotation; NULL (err set) when it names GPUs the node lacks. */
static struct sched_pod *pod_from_decision(struct sched_state *s, const char *key, const char *text,
                                           const struct annot_decision *d, uint16_t types,
                                           struct vg_err *err)
{
    struct sched_pod *p = xcalloc(1, sizeof *p);
    (void)vg_strlcpy(p->key, key, sizeof p->key);
    (void)vg_strlcpy(p->node_name, d->node, sizeof p->node_name);
    p->node = sched_node_find(s, d->node);
    p->decision = xstrdup(text);
    p->types = types;
    p->shares = xcalloc(d->container_count > 0 ? d->container_count : 1, sizeof *p->shares);
    const struct place_node *n = p->node >= 0 ? &s->cluster->nodes[p->node] : NULL;
    for (unsigned c = 0; c < d->container_count; c++) {
        const struct annot_container *ac = &d->containers[c];
        if (ac->gpu_count == 0)
            continue;
        struct sched_share *sh = &p->shares[p->share_count];
        sh->gpu_count = (uint8_t)ac->gpu_count;
        unsigned cores = ac->gpus[0].cores;
        sh->milli = cores * 10u;
        sh->exclusive = cores == 100;
        for (unsigned g = 0; g < ac->gpu_count; g++) {
            if (ac->gpus[g].cores != cores) {
                vg_err_set(err, -EINVAL, "container %s: GPUs with different compute shares",
                           ac->name);
                pod_free(p);
                return NULL;
            }
            sh->mem[g] = ac->gpus[g].memory_mib;
            if (n == NULL)
                continue; /* resolved when the node appears */
            int found = -1;
            for (unsigned i = 0; i < n->gpu_count; i++)
                if (strcmp(n->gpus[i].uuid, ac->gpus[g].uuid) == 0)
                    found = (int)i;
            if (found < 0) {
                vg_err_set(err, -ENOENT, "container %s: GPU %s is not on node %s", ac->name,
                           ac->gpus[g].uuid, d->node);
                pod_free(p);
                return NULL;
            }
            sh->gpus[g] = (uint8_t)found;
        }
        if (ac->gpus[0].mig_profile[0] != '\0') {
            (void)vg_strlcpy(sh->mig_profile, ac->gpus[0].mig_profile, sizeof sh->mig_profile);
            sh->mig_start = ac->gpus[0].mig_start;
            if (n != NULL && sched_mig_resolve(s, p->node, sh, err) < 0) {
                pod_free(p);
                return NULL;
            }
        }
        struct place_request r = {.gpu_count = sh->gpu_count, .gpu_milli = sh->milli};
        struct vg_err ignored = {0};
        if (place_request_resolve(s->cluster, &r, &ignored) == 0)
            sh->pod_class = r.pod_class;
        p->share_count++;
    }
    p->names = sched_share_names(p->share_count, decision_container_name, d);
    return p;
}

/* The types id of a watched pod's GPU-type lists. Malformed lists (filter refuses such a
 * pod, but another scheduler may have placed it) count as none. */
/* Each share's task priority from the pod's spec (its container's nvidia.com/priority;
 * a value the webhook would refuse counts as low): high-priority shares are counted on
 * their GPUs, which the next high-priority pod avoids when it can. */
static void pod_priorities(struct sched_pod *p, json_t *pod)
{
    json_t *containers = json_object_get(json_object_get(pod, "spec"), "containers");
    const char *name = p->names;
    for (unsigned k = 0; k < p->share_count && name != NULL; k++, name += strlen(name) + 1) {
        size_t i;
        json_t *c;
        json_array_foreach(containers, i, c)
        {
            const char *n = sched_json_str(c, "name", NULL, NULL);
            int prio;
            struct vg_err ignored = {0};
            if (n != NULL && strcmp(n, name) == 0 &&
                sched_container_priority(c, n, &prio, &ignored) == 0)
                p->shares[k].high = prio == 0;
        }
    }
}

static uint16_t pod_types(struct sched_state *s, json_t *pod)
{
    struct place_request r;
    memset(&r, 0, sizeof r);
    struct vg_err ignored = {0};
    if (sched_pod_selection(pod, &r, &ignored) < 0)
        return 0;
    return sched_types_id(s, &r);
}

/* An event about another instance of the pod's name: a pod deleted and created again
 * under the same name, whose old events arrive after filter saw the new one. */
static bool other_instance(const struct sched_pod *p, json_t *pod)
{
    const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
    return p->assumed && uid != NULL && uid[0] != '\0' && p->uid[0] != '\0' &&
           strcmp(uid, p->uid) != 0;
}

void sched_pod_update(struct sched_state *s, json_t *pod)
{
    char key[SCHED_KEY_MAX];
    struct vg_err err = {0};
    if (sched_pod_key(pod, key, sizeof key, &err) < 0) {
        vg_log(VG_LOG_WARN, "pod skipped", "reason=\"%s\"", err.msg);
        s->stats.skipped_pods++;
        return;
    }
    struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p != NULL && other_instance(p, pod))
        return;
    if (p != NULL)
        p->seen = true;
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    if (phase != NULL && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) {
        if (p != NULL)
            sched_pod_drop(s, p); /* finished pods hold nothing */
        return;
    }
    const char *rv = sched_json_str(pod, "metadata", "resourceVersion", NULL);
    const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
    const char *text = sched_json_str(pod, "metadata", "annotations", ANNOT_KEY_DECISION);
    bool has_node = sched_json_str(pod, "spec", "nodeName", NULL) != NULL;
    const char *recorded = has_node ? sched_record_get(s, uid) : NULL;
    if (recorded != NULL) {
        /* The scheduler's own record of the bound pod's decision, which its author cannot
         * write: it decides, whatever the annotation says now. */
        if (text == NULL || strcmp(text, recorded) != 0)
            s->stats.annotation_changes++;
        text = recorded;
    } else if (p != NULL && p->bound && !p->assumed && p->decision != NULL && has_node &&
               (uid == NULL || p->uid[0] == '\0' || strcmp(uid, p->uid) == 0) &&
               (text == NULL || strcmp(text, p->decision) != 0)) {
        /* A bound pod keeps what it was charged until it is gone: the annotation is its
         * author's to edit (past the webhook), the GPUs its containers hold are not. */
        vg_log(VG_LOG_WARN, "bound pod's decision annotation removed or changed; its charge stays",
               "pod=%s", key);
        s->stats.annotation_changes++;
        if (rv != NULL)
            (void)vg_strlcpy(p->resource_version, rv, sizeof p->resource_version);
        return;
    }
    if (text != NULL && !has_node) {
        /* vgpu-scheduler writes its decision only in the pod's binding, together with
         * spec.nodeName: a decision on a pod that is not bound was written by someone
         * else. The pod is undecided; filter decides for it, and the binding replaces the
         * annotation. */
        vg_log(VG_LOG_WARN,
               "pod decision ignored: the pod is not bound, so vgpu-scheduler "
               "did not write it",
               "pod=%s", key);
        s->stats.skipped_pods++;
        text = NULL;
    }
    if (text == NULL) {
        /* Our own assumption (or one whose write is in flight) stays until bind or
         * expiry; an API record whose annotation was removed goes. */
        /* An assumption keeps the resourceVersion filter saw: a pod changed since then
         * fails the bind's precondition and is filtered again. */
        if (p != NULL && !p->assumed && !p->written)
            sched_pod_drop(s, p);
        return;
    }
    if (p != NULL && p->decision != NULL && strcmp(p->decision, text) == 0) {
        if (rv != NULL)
            (void)vg_strlcpy(p->resource_version, rv, sizeof p->resource_version);
        if (uid != NULL && vg_strlcpy(p->uid, uid, sizeof p->uid) < 0)
            p->uid[0] = '\0';
        p->bound = p->bound || has_node;
        if (p->assumed && sched_json_str(pod, "spec", "nodeName", NULL) != NULL)
            p->assumed = false; /* our bind, seen through the watch */
        if (!p->assumed)
            p->written = false; /* the API holds it now */
        return;
    }
    struct annot_decision d;
    if (annot_decision_decode(text, strlen(text), &d, &err) < 0) {
        vg_log(VG_LOG_WARN, "pod decision skipped", "pod=%s reason=\"%s\"", key, err.msg);
        s->stats.skipped_pods++;
        if (p != NULL && !p->assumed)
            sched_pod_drop(s, p);
        return;
    }
    struct sched_pod *np = pod_from_decision(s, key, text, &d, pod_types(s, pod), &err);
    if (np == NULL) {
        vg_log(VG_LOG_WARN, "pod decision skipped", "pod=%s reason=\"%s\"", key, err.msg);
        s->stats.skipped_pods++;
        return;
    }
    pod_priorities(np, pod);
    if (p != NULL) {
        if (p->assumed)
            s->stats.conflicts++; /* someone else decided for this pod: theirs stands */
        sched_pod_drop(s, p);
    }
    np->seen = true;
    np->bound = has_node;
    if (rv != NULL)
        (void)vg_strlcpy(np->resource_version, rv, sizeof np->resource_version);
    if (uid != NULL && vg_strlcpy(np->uid, uid, sizeof np->uid) < 0)
        np->uid[0] = '\0';
    sched_map_put(&s->pods, np->key, np);
    if (np->node < 0) {
        s->waiting_pods++;
        return;
    }
    if (s->batch)
        return;
    if (sched_pod_apply(s, np, &err) < 0) {
        vg_log(VG_LOG_WARN, "pod allocation does not fit; not charged", "pod=%s err=\"%s\"", key,
               err.msg);
        s->stats.conflicts++;
    }
}

int sched_pod_recharge(struct sched_state *s, const char *key, const char *text, struct vg_err *err)
{
    struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p == NULL || !p->applied || p->decision == NULL || !p->bound || p->assumed)
        return vg_err_set(err, -ENOENT, "pod %s holds no GPUs that vgpu-scheduler charged", key);
    struct annot_decision d;
    if (annot_decision_decode(text, strlen(text), &d, err) < 0)
        return err->code;
    struct sched_pod *np = pod_from_decision(s, key, text, &d, p->types, err);
    if (np == NULL)
        return err->code;
    /* A resize changes amounts only: the same shares in the same order, whose priorities
     * (from the pod's spec, not the decision) stand. */
    for (unsigned k = 0; k < np->share_count && k < p->share_count; k++)
        np->shares[k].high = p->shares[k].high;
    /* The same ledger filter charges: the pod's own charge goes, the new one must fit
     * beside everything else, or the old one comes back. np is not bound yet, so a trial
     * that does not fit blocks nothing. */
    sched_pod_unapply(s, p);
    int rc = sched_pod_apply(s, np, err);
    if (rc < 0) {
        pod_free(np);
        struct vg_err again = {0};
        if (sched_pod_apply(s, p, &again) < 0)
            vg_log(VG_LOG_ERROR, "pod's own charge does not fit back; model out of step",
                   "pod=%s err=\"%s\"", key, again.msg);
        return rc;
    }
    np->bound = true;
    np->seen = p->seen;
    (void)vg_strlcpy(np->uid, p->uid, sizeof np->uid);
    (void)vg_strlcpy(np->resource_version, p->resource_version, sizeof np->resource_version);
    pod_free(sched_map_put(&s->pods, np->key, np));
    return 0;
}

void sched_pod_delete(struct sched_state *s, json_t *pod)
{
    char key[SCHED_KEY_MAX];
    struct vg_err err = {0};
    if (sched_pod_key(pod, key, sizeof key, &err) < 0)
        return;
    struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p != NULL && !other_instance(p, pod))
        sched_pod_drop(s, p);
}

void sched_pods_resync(struct sched_state *s, json_t *items)
{
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1))
        ((struct sched_pod *)s->pods.slots[i].value)->seen = false;
    s->batch = true;
    size_t k;
    json_t *pod;
    json_array_foreach(items, k, pod) sched_pod_update(s, pod);
    s->batch = false;
    /* Records the list no longer holds: gone while the watch was down. Assumptions stay
     * until bind or expiry. */
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (!p->seen && !p->assumed)
            sched_pod_drop(s, p);
    }
    sched_reapply_all(s);
}

/* ---- decision records ------------------------------------------------------------------
 *
 * Keyed by the pod's uid, which names one pod instance for its whole life: a pod deleted
 * and created again under its name has another, so a record never outlives its pod's
 * charge or passes to a newcomer. */

#define RECORDS_MAX 1000000 /* records held; past this a new one is not kept (logged) */

const char *sched_record_get(const struct sched_state *s, const char *uid)
{
    return uid != NULL && uid[0] != '\0' ? sched_map_get(&s->records, uid) : NULL;
}

void sched_record_put(struct sched_state *s, const char *uid, const char *decision)
{
    if (uid == NULL || uid[0] == '\0' || decision == NULL)
        return;
    if (s->records.count >= RECORDS_MAX && sched_map_get(&s->records, uid) == NULL) {
        vg_log(VG_LOG_WARN, "too many decision records; this one is not kept", "uid=%.64s", uid);
        return;
    }
    free(sched_map_put(&s->records, uid, xstrdup(decision)));
}

bool sched_record_drop(struct sched_state *s, const char *uid)
{
    if (uid == NULL)
        return false;
    char *old = sched_map_remove(&s->records, uid);
    free(old);
    return old != NULL;
}

size_t sched_record_count(const struct sched_state *s)
{
    return s->records.count;
}

/* Whether the API shows pod bound to a node and not finished: it holds its GPUs. */
static bool pod_holds(json_t *pod)
{
    const char *phase = sched_json_str(pod, "status", "phase", NULL);
    return sched_json_str(pod, "spec", "nodeName", NULL) != NULL &&
           (phase == NULL || (strcmp(phase, "Succeeded") != 0 && strcmp(phase, "Failed") != 0));
}

const char *sched_record_wanted(struct sched_state *s, json_t *pod, const char **uid_out)
{
    const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
    char key[SCHED_KEY_MAX];
    struct vg_err err = {0};
    *uid_out = uid;
    if (uid == NULL || uid[0] == '\0' || !pod_holds(pod) || sched_record_get(s, uid) != NULL ||
        sched_pod_key(pod, key, sizeof key, &err) < 0)
        return NULL;
    const struct sched_pod *p = sched_map_get(&s->pods, key);
    if (p == NULL || p->assumed || p->decision == NULL || !p->bound ||
        (p->uid[0] != '\0' && strcmp(p->uid, uid) != 0))
        return NULL;
    return p->decision;
}

void sched_records_prune(struct sched_state *s, json_t *items,
                         void (*gone)(void *arg, const char *uid), void *arg)
{
    struct sched_map live;
    sched_map_init(&live);
    size_t k;
    json_t *pod;
    json_array_foreach(items, k, pod)
    {
        const char *uid = sched_json_str(pod, "metadata", "uid", NULL);
        if (uid != NULL && uid[0] != '\0' && pod_holds(pod))
            sched_map_put(&live, uid, pod);
    }
    for (size_t i = sched_map_next(&s->records, 0); i < s->records.cap;
         i = sched_map_next(&s->records, i + 1)) {
        const char *uid = s->records.slots[i].key;
        if (sched_map_get(&live, uid) != NULL)
            continue;
        if (gone != NULL)
            gone(arg, uid);
        free(sched_map_remove(&s->records, uid)); /* removal leaves a tombstone: safe here */
    }
    sched_map_release(&live);
}

/* ---- expiry, invariants, dump -------------------------------------------------------- */

size_t sched_expire(struct sched_state *s, struct sched_now now)
{
    size_t n = 0;
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        struct sched_pod *p = s->pods.slots[i].value;
        if (p->assumed && !p->binding && now.mono_ms >= p->expires_ms) {
            vg_log(VG_LOG_INFO, "assumption expired", "pod=%s node=%s", p->key, p->node_name);
            sched_pod_drop(s, p);
            n++;
        }
    }
    s->stats.expired += n;
    return n;
}

int sched_check_invariants(const struct sched_state *s, struct vg_err *err)
{
    const struct place_cluster *c = s->cluster;
    for (size_t i = 0; i < c->node_count; i++) {
        const struct place_node *n = &c->nodes[i];
        for (unsigned g = 0; g < n->gpu_count; g++) {
            const struct place_gpu *gpu = &n->gpus[g];
            if (gpu->milli_used > PLACE_GPU_MILLI)
                return vg_err_set(err, -ERANGE, "node %s GPU %s: compute %u/1000", n->name,
                                  gpu->uuid, gpu->milli_used);
            if (gpu->mem_total_mib > 0 && gpu->mem_used_mib > gpu->mem_total_mib)
                return vg_err_set(err, -ERANGE, "node %s GPU %s: memory %llu/%llu MiB", n->name,
                                  gpu->uuid, (unsigned long long)gpu->mem_used_mib,
                                  (unsigned long long)gpu->mem_total_mib);
            if (gpu->slots > 0 && gpu->tenants > gpu->slots)
                return vg_err_set(err, -ERANGE, "node %s GPU %s: %u tenants, %u slots", n->name,
                                  gpu->uuid, gpu->tenants, gpu->slots);
            if (gpu->exclusive && gpu->tenants > 1)
                return vg_err_set(err, -ERANGE, "node %s GPU %s: exclusive with %u tenants",
                                  n->name, gpu->uuid, gpu->tenants);
        }
    }
    return 0;
}

struct usage {
    uint64_t mem;
    uint32_t milli, tenants, high;
};

struct named {
    const char *name;
    size_t index;
};

static int cmp_node_name(const void *a, const void *b)
{
    return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

char *sched_dump(const struct sched_state *s, bool bound_only)
{
    const struct place_cluster *c = s->cluster;
    VG_AUTO_FREE struct usage *use = xcalloc(c->node_count * PLACE_MAX_GPUS + 1, sizeof *use);
    for (size_t i = sched_map_next(&s->pods, 0); i < s->pods.cap;
         i = sched_map_next(&s->pods, i + 1)) {
        const struct sched_pod *p = s->pods.slots[i].value;
        if (!p->applied || (bound_only && p->assumed))
            continue;
        for (unsigned k = 0; k < p->share_count; k++) {
            const struct sched_share *sh = &p->shares[k];
            for (unsigned g = 0; g < sh->gpu_count; g++) {
                struct usage *u = &use[(size_t)p->node * PLACE_MAX_GPUS + sh->gpus[g]];
                u->mem += sh->mem[g];
                u->milli += sh->milli;
                u->tenants++;
                u->high += sh->high ? 1u : 0u;
            }
        }
    }
    VG_AUTO_FREE struct named *order = xcalloc(c->node_count + 1, sizeof *order);
    for (size_t i = 0; i < c->node_count; i++)
        order[i] = (struct named){c->nodes[i].name, i};
    qsort(order, c->node_count, sizeof *order, cmp_node_name);
    json_t *nodes = json_object();
    for (size_t k = 0; k < c->node_count; k++) {
        size_t i = order[k].index;
        const struct place_node *n = &c->nodes[i];
        if (!s->nodes[i].present || n->gpu_count == 0)
            continue;
        json_t *gpus = json_array();
        for (unsigned g = 0; g < n->gpu_count; g++) {
            const struct usage *u = &use[i * PLACE_MAX_GPUS + g];
            json_array_append_new(
                gpus, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "uuid", n->gpus[g].uuid,
                                "memUsedMiB", (json_int_t)u->mem, "memTotalMiB",
                                (json_int_t)n->gpus[g].mem_total_mib, "coresUsed",
                                (json_int_t)(u->milli / 10), "tenants", (json_int_t)u->tenants,
                                "highPriorityTenants", (json_int_t)u->high, "slots",
                                (json_int_t)n->gpus[g].slots));
        }
        json_object_set_new(nodes, n->name, gpus);
    }
    VG_AUTO_JSON json_t *root = json_pack("{s:o}", "nodes", nodes);
    return json_dumps(root, JSON_SORT_KEYS | JSON_COMPACT);
}
