/* The scheduler library's shared internals; not part of its API. */
#ifndef VGPU_SCHEDULER_INTERNAL_H
#define VGPU_SCHEDULER_INTERNAL_H

#include "annot/annot.h"
#include "base/buf.h"
#include "base/prng.h"
#include "scheduler/map.h"
#include "scheduler/pod.h"
#include "scheduler/sched.h"

#define SCHED_KEY_MAX   512 /* "namespace/name" */
#define SCHED_MEMOS     8
#define SCHED_TYPES_MAX 256 /* distinct GPU-type lists the learned mix keeps apart */

/* One container's share, compact: what place_release needs and nothing more. */
struct sched_share {
    uint8_t gpu_count;
    uint8_t gpus[PLACE_MAX_GPUS];
    uint8_t pod_class;
    bool exclusive;
    bool high; /* nvidia.com/priority 0: counted in each of its GPUs' place_gpu.high */
    uint32_t milli;
    uint64_t mem[PLACE_MAX_GPUS];
    /* Dynamic MIG (mig.c): one GPU, an instance of this profile at mig_start, taking
     * mig_size slices; mig_size 0 for a share of a card. */
    uint8_t mig_start, mig_size;
    /* The share of the card the learned mix counts the instance as (place_mig_share_milli
     * of its memory): fixed when the share is made, so taking it out of the mix finds it. */
    uint16_t mig_milli;
    char mig_profile[ANNOT_MIG_NAME_MAX];
};

struct sched_pod {
    char key[SCHED_KEY_MAX];
    char node_name[ANNOT_NAME_MAX];
    char resource_version[64];
    char uid[128]; /* metadata.uid as filter or the watch saw it; "" when unknown */
    int32_t node;  /* model index, -1 while the node is unknown */
    bool applied;  /* charged to the model */
    bool assumed;  /* filter's promise, not yet written to the API */
    bool binding;  /* bind in flight: does not expire */
    bool written;  /* our binding wrote it; the watch may not have shown it yet */
    bool bound;    /* the API shows spec.nodeName (or our binding succeeded) */
    bool seen;     /* resync mark */
    bool blocking; /* bound, does not fit: its GPUs take no new tenants until it goes */
    uint64_t expires_ms;
    char *decision; /* vgpu.io/decision text (owned), NULL for a pod without GPUs */
    char *names;    /* the containers' names, one per share, each NUL-terminated, one
                       after the other (owned; NULL when unknown): for metrics and the
                       dashboard, which would otherwise decode every decision */
    unsigned share_count;
    struct sched_share *shares;
    uint16_t types; /* its GPU-type lists (sched_types_id); 0: any model */
};

/* A distinct pair of GPU-type lists (nvidia.com/use-gputype, nouse-gputype) some held pod
 * carries: the learned mix keeps the pods restricted to some models apart. */
struct sched_types {
    char *key; /* canonical text of the lists: orders the mix the same after a restart */
    struct place_request sel; /* the lists alone, resolved against the models known now */
};

/* A node's inventory as the scheduler keeps it: the GPUs without their MIG fields (kept
 * apart, for the few nodes in dynamic MIG mode: 5,000 nodes would otherwise hold 13 KB of
 * them each). */
struct sched_gpu_info {
    char uuid[ANNOT_UUID_MAX];
    unsigned index;
    char model[ANNOT_MODEL_MAX];
    uint64_t memory_mib;
    unsigned cores, slots;
    int numa;
    bool healthy;
};

struct sched_inventory {
    int64_t heartbeat;
    enum annot_mode mode;
    unsigned gpu_count;
    struct sched_gpu_info gpus[ANNOT_MAX_GPUS];
};

struct sched_node {
    bool present, seen, has_inventory;
    struct sched_inventory inventory;
    struct annot_mig *mig; /* ANNOT_MAX_GPUS of them (owned), NULL while no GPU of the node
                              is in dynamic MIG mode */
    /* The inventory's "held" list as last read (owned, NULL when it had none): how long
     * each container was held behind high priority. Written from tenants' regions: shown
     * on the dashboard, never used to decide. */
    struct annot_held *held;
    unsigned held_count;
    /* Per GPU: bound pods whose decision does not fit beside what the GPU holds (written
     * by someone other than this scheduler). Such a GPU takes no new tenants while any
     * holds it: the scheduler cannot tell how much of it they really use. */
    uint16_t blocked[PLACE_MAX_GPUS];
    /* Dynamic MIG: per GPU, the slices the model's MIG shares hold, and the placements the
     * node refused lately (vgpu.io/mig-refused). */
    uint8_t mig_held[PLACE_MAX_GPUS];
    uint8_t refused_count;
    struct sched_mig_refusal {
        uint8_t gpu;
        uint8_t start;
        char profile[ANNOT_MIG_NAME_MAX];
        int64_t time;
    } refused[ANNOT_MIG_REFUSED_MAX];
};

/* What filter reads of each offered node, packed: struct sched_node holds the whole
 * inventory (kilobytes), and 5,000 offers would each touch a different page. */
struct sched_node_live {
    int64_t heartbeat;
    bool present, has_inventory;
};

struct offer; /* extender.c's */

/* The last filter verdict on a pod (kept by pending.c, shown by view.c): why it is pending, or
 * where it went. The reasons are the filter's FailedNodes texts (string literals), counted, with
 * the first few nodes that gave each. Kept until the pod is deleted. */
#define SCHED_VERDICT_REASONS  8
#define SCHED_VERDICT_EXAMPLES 3
#define SCHED_VERDICTS_MAX     65536
struct sched_verdict_reason {
    const char *why;
    uint32_t count;
    char nodes[SCHED_VERDICT_EXAMPLES][64];
};
struct sched_verdict {
    int64_t time;                    /* Unix seconds */
    char node[64];                   /* the node chosen; "" when none */
    char error[VG_ERR_MSG_MAX + 64]; /* the result's Error; "" when none */
    uint32_t offered, failed, other_reasons;
    unsigned reason_count;
    struct sched_verdict_reason reasons[SCHED_VERDICT_REASONS];
};

struct sched_state {
    struct sched_options opt;
    struct place_cluster *cluster;
    struct sched_node *nodes;     /* parallel to cluster->nodes */
    struct sched_node_live *live; /* parallel too; sched_node_sync keeps it equal */
    size_t node_info_cap;
    /* Filter's node sets for the placement core, node_info_cap bits each (all clear
     * between filters): the nodes offered, and the node picked for a pod's first
     * container (its other containers must go there too). */
    uint64_t *offered, *picked;
    uint64_t *listed; /* the fast filter's "written to FailedNodes" marks, clear between */
    /* Per-node verdicts, reused while a node is unchanged: one memo per request shape, for
     * the last SCHED_MEMOS shapes (pods of a few shapes arrive interleaved). */
    struct place_memo memo[SCHED_MEMOS];
    /* The fgd and default policies' workload mix, learned from the shares the model holds
     * (state.c, "learned mix"), and their memo of F_n per node under it. */
    struct place_mix mix_seen, mix_learned, mix_self;
    struct place_frag_cache frag;
    bool mix_dirty;
    uint64_t mix_gen;                 /* bumped whenever mix_learned changes (the MIG kinds' key) */
    struct sched_mig_kind *mig_kinds; /* mig.c: the learned mix per kind of MIG GPU */
    size_t mix_models;         /* model count the learned mix's model lists were resolved for */
    struct sched_types *types; /* id - 1; at most SCHED_TYPES_MAX */
    size_t type_count, type_cap;
    bool types_full; /* logged once */
    /* The filter's scratch, kept between calls: container requests, and the fast
     * reader's decoded names and offers (extender.c). */
    struct sched_container_request *filter_reqs;
    struct vg_buf scan_text;   /* at most SCHED_MAX_BODY_BYTES: names come from the body */
    struct offer *scan_offers; /* extender.c's, at most one per byte of the body */
    size_t scan_offers_cap;
    int32_t *mig_ids; /* the MIG chooser's offers and reasons (extender.c), mig_cap each */
    const char **mig_why;
    size_t mig_cap;
    struct sched_map node_index; /* name -> index + 1 */
    struct sched_map pods;       /* "ns/name" -> struct sched_pod */
    struct sched_map records;    /* pod uid -> its recorded decision text (owned) */
    struct sched_map pending;    /* "ns/name" -> its uid (owned): pods waiting for a node */
    struct sched_map ns_assumed; /* namespace -> outstanding assumptions, an upper bound */
    struct sched_map verdicts;   /* "ns/name" -> struct sched_verdict (pending.c) */
    struct vg_prng rng;
    bool batch, refresh_needed;
    size_t waiting_pods;
    struct sched_stats stats;
};

int32_t sched_node_find(const struct sched_state *s, const char *name);
/* Copies node idx's present / has_inventory / heartbeat into s->live[idx]. */
void sched_node_sync(struct sched_state *s, int32_t idx);
/* A share of a pod whose GPU-type lists are `types`, on node. */
int sched_share_charge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                       uint16_t types, struct vg_err *err);
void sched_share_uncharge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                          uint16_t types);
/* Charges every share of p, all or nothing. A bound pod (not our promise) that does not
 * fit blocks the GPUs it names instead (sched_node.blocked) and still returns the error. */
int sched_pod_apply(struct sched_state *s, struct sched_pod *p, struct vg_err *err);
/* Whether GPU g of node idx is blocked by a bound pod that does not fit. */
bool sched_gpu_blocked(const struct sched_state *s, int32_t idx, unsigned g);
void sched_pod_unapply(struct sched_state *s, struct sched_pod *p);
void sched_pod_drop(struct sched_state *s, struct sched_pod *p);
void sched_reapply_all(struct sched_state *s);
/* The mix fgd and default keep room for: mix_learned, refreshed if the shares changed it,
 * or, while the model holds no share, a mix of self alone. *frag is the F_n memo to use
 * with it (NULL with the latter). */
const struct place_mix *sched_mix(struct sched_state *s, const struct place_request *self,
                                  struct place_frag_cache **frag);
/* The id of r's GPU-type lists, interned on first sight; 0 when it has none (or when
 * SCHED_TYPES_MAX distinct lists are held already: such pods count as unrestricted). */
uint16_t sched_types_id(struct sched_state *s, const struct place_request *r);
/* Dynamic MIG (mig.c). Whether GPU g of node idx is served in dynamic MIG mode. */
bool sched_mig_gpu(const struct sched_state *s, int32_t idx, unsigned g);
/* Charges / returns a MIG share's slices (sh->mig_size > 0). -EINVAL when they overlap
 * another share's. */
int sched_mig_charge(struct sched_state *s, int32_t node, const struct sched_share *sh,
                     struct vg_err *err);
void sched_mig_uncharge(struct sched_state *s, int32_t node, const struct sched_share *sh);
/* Reads node idx's vgpu.io/mig-refused (text may be NULL: none). */
void sched_mig_refused_update(struct sched_state *s, int32_t idx, const char *text);
/* Fills a MIG share's size from the node's inventory: -EINVAL when the GPU lists no such
 * profile. */
int sched_mig_resolve(const struct sched_state *s, int32_t idx, struct sched_share *sh,
                      struct vg_err *err);
/* For a pod the card shares could not place: its containers on MIG GPUs of the offered
 * nodes (ids[0..n), -1 for none; those without a MIG GPU are set to -1), each an instance
 * chosen by vgpu's rule. The record (charged), or NULL with why[i] set for each offered
 * node with a MIG GPU (a string literal; NULL for the others). */
struct sched_pod *sched_mig_decide(struct sched_state *s, const char *key,
                                   const struct sched_container_request *reqs, int count,
                                   int32_t *ids, size_t n, const char **why, int64_t now_s);

/* Whether the pod watch shows key, with this uid, waiting for a node. */
bool sched_pending_has(const struct sched_state *s, const char *key, const char *uid);
/* Before filter assumes for key: 0, or -EDQUOT when its namespace holds
 * max_assumed_per_namespace outstanding assumptions already (*held: how many). */
int sched_assume_admit(struct sched_state *s, const char *key, uint32_t *held);
/* After filter assumed for key. */
void sched_assume_count(struct sched_state *s, const char *key);
void sched_pending_release(struct sched_state *s);
/* The verdict record for key, emptied, stamped with now_s; NULL when SCHED_VERDICTS_MAX
 * pods hold one already. */
struct sched_verdict *sched_verdict_begin(struct sched_state *s, const char *key, int64_t now_s);
/* One offered node that failed, and why (a string literal). */
void sched_verdict_fail(struct sched_verdict *v, const char *why, const char *node, size_t len);
/* Drops key's verdict (the pod is gone); sched_verdicts_prune drops those of pods neither
 * waiting nor held; sched_verdicts_release all. */
void sched_verdict_drop(struct sched_state *s, const char *key);
void sched_verdicts_prune(struct sched_state *s);
void sched_verdicts_release(struct sched_state *s);
/* The share names of p's containers as sched_pod.names keeps them: n names, each
 * at most ANNOT_NAME_MAX bytes, from name(arg, k). */
char *sched_share_names(unsigned n, const char *(*name)(const void *arg, unsigned k),
                        const void *arg);
/* Parses a JSON request body with the ceiling and duplicate-key refusal. */
json_t *sched_parse_body(const char *body, size_t len, struct vg_err *err);
/* sched_filter with jansson only: what sched_filter falls back to for every body the
 * streaming reader declines (args.h); the differential test compares the two. */
int sched_filter_tree(struct sched_state *s, const char *body, size_t len, struct sched_now now,
                      char **out, struct vg_err *err);

/* The webhook's DRA mode (webhook_dra.c). Whether a container or init container of pod
 * names one of HAMi's resources in its limits or requests. */
bool sched_admit_dra_wanted(json_t *pod);
/* Appends to patch the JSON Patch operations that turn the HAMi resources of pod's
 * containers into claims, and to templates the ResourceClaimTemplates (in namespace ns,
 * "default" when NULL) they name, once each. The count of containers converted, or
 * -EINVAL with msg for a pod it refuses. */
int sched_admit_dra_convert(const struct sched_options *o, json_t *pod, const char *ns,
                            json_t *patch, json_t *templates, char *msg, size_t size);

/* ---- the model as view.c and metrics.c read it ------------------------------------- */

#define SCHED_MIB 1048576ull

/* One GPU as the views show it. */
struct sched_gpu_view {
    uint64_t mem_total, mem_used; /* bytes */
    double compute_used;          /* 0..1 */
    double stranded_compute;      /* 0..1 */
    uint64_t stranded_mem;        /* bytes */
    bool blocked;
};
void sched_gpu_view(const struct sched_state *s, size_t i, unsigned g, struct sched_gpu_view *out);

/* A node's (or, summed, the cluster's) GPUs. */
struct sched_totals {
    uint64_t gpus, mem_total, mem_used, stranded_mem, containers;
    double compute_total, compute_used, stranded;
};
void sched_node_totals(const struct sched_state *s, size_t i, struct sched_totals *t);
/* Adds t into all, field by field (the cluster's totals over its nodes). */
void sched_totals_add(struct sched_totals *all, const struct sched_totals *t);
/* Stranded compute over unallocated compute, 0 when nothing is free. */
double sched_frag_ratio(const struct sched_totals *t);

/* One container's share of one GPU, as the model holds it. */
struct sched_share_ref {
    const struct sched_pod *p;
    unsigned k;       /* the container's place among the pod's GPU containers */
    const char *name; /* its name ("" when unknown) */
    unsigned g;       /* the GPU's index on node p->node */
    uint64_t mem_mib;
    unsigned cores; /* percent; 0: no compute limit */
    bool high;      /* nvidia.com/priority 0 */
};
/* Visits every container share the model holds (charged pods on known nodes), from the
 * pod records: no decision is decoded. */
typedef void (*sched_share_fn)(void *arg, const struct sched_share_ref *r);
void sched_each_share(const struct sched_state *s, sched_share_fn fn, void *arg);

#endif
