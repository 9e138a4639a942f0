/* MIG on demand: which profile, and at which start slice, a pod's GPU instance is made
 * (docs/placement.md, "MIG placement").
 *
 * A GPU in dynamic MIG mode is a row of memory slices (8 on A100 and H100). A profile
 * takes `size` consecutive slices starting at one of the starts NVML allows for it; GPU
 * instances never overlap. Two rules choose the instance for a request of memory (and
 * compute):
 *
 *   PLACE_MIG_RULE_HAMI  HAMi v2.10's selectMigCandidate, modelled: the profiles in
 *                        (memory, size) order, the first whose memory covers the request
 *                        and that has a free placement; 1g and 3g profiles take their
 *                        highest free start, the others their lowest. Compute is not
 *                        looked at.
 *   PLACE_MIG_RULE_VGPU  vgpu's: every profile whose memory and SM share cover the request,
 *                        at every free start, scored by the change of the GPU's expected
 *                        unusable slices under the request mix (place_mig_frag) plus the
 *                        slices taken beyond the smallest profile that fits; the lowest
 *                        score wins, then the lowest start.
 *
 * Pure C: no I/O, no allocation. */
#ifndef VGPU_PLACEMENT_MIG_H
#define VGPU_PLACEMENT_MIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct place_mix;

#define PLACE_MIG_SLICES_MAX   8
#define PLACE_MIG_PROFILES_MAX 12
#define PLACE_MIG_NAME_MAX     16
#define PLACE_MIG_STATES       256 /* slice occupancy masks of a GPU of at most 8 slices */

struct place_mig_profile {
    char name[PLACE_MIG_NAME_MAX];
    uint32_t mem_mib;
    uint16_t sms;
    uint8_t size;       /* memory slices */
    uint8_t placements; /* bit s: start s allowed */
};

struct place_mig_gpu {
    uint8_t slices; /* 1..PLACE_MIG_SLICES_MAX */
    uint8_t profile_count;
    uint16_t max_sms; /* the whole GPU's multiprocessors (for the SM share); 0: the largest
                         profile's */
    struct place_mig_profile profiles[PLACE_MIG_PROFILES_MAX];
    uint8_t used; /* bit s: slice s belongs to an instance (existing or promised) */
    uint8_t refused[PLACE_MIG_PROFILES_MAX]; /* per profile, bit s: start s refused lately */
};

/* One kind of request the cluster sees, with its popularity. */
struct place_mig_demand {
    uint64_t mem_mib;
    uint32_t cores; /* percent of the GPU's SMs, 0 = any */
    uint64_t weight;
};

enum place_mig_rule { PLACE_MIG_RULE_HAMI = 0, PLACE_MIG_RULE_VGPU };

/* Why no placement was found. */
enum place_mig_why {
    PLACE_MIG_OK = 0,
    PLACE_MIG_NO_PROFILE, /* no allowed profile has the memory (and compute) asked */
    PLACE_MIG_OCCUPIED,   /* every placement of a fitting profile overlaps an instance */
    PLACE_MIG_REFUSED,    /* the free ones were refused by the node lately */
};

struct place_mig_choice {
    int profile; /* index into profiles[]; -1 when none */
    uint8_t start, size;
    double score; /* PLACE_MIG_RULE_VGPU: lower is better; 0 under HAMi's rule */
    enum place_mig_why why;
};

/* -EINVAL with the reason when g cannot describe a GPU: slices outside 1..8, no profile
 * names, a profile of size 0 or larger than the GPU, a start past the end, an overlap of
 * `used` beyond the GPU's slices. */
int place_mig_gpu_check(const struct place_mig_gpu *g, struct vg_err *err);

/* Bit mask of the slices start .. start + size - 1. */
static inline uint8_t place_mig_mask(unsigned start, unsigned size)
{
    return (uint8_t)(((1u << size) - 1u) << start);
}

/* Whether profile p can serve a request (HAMi's rule: memory only). */
bool place_mig_fits(const struct place_mig_gpu *g, unsigned p, uint64_t mem_mib, uint32_t cores,
                    enum place_mig_rule rule);

/* Expected slices of the occupancy `used` that stay unusable for the next request drawn
 * from the mix: for each demand, the free slices no free placement of a profile that can
 * serve it covers (all free slices when none), weighted by popularity. 0 for an empty mix. */
double place_mig_frag(const struct place_mig_gpu *g, uint8_t used,
                      const struct place_mig_demand *mix, size_t count);
/* A learned mix of card shares (placement.h's place_mix, the one fgd and default keep) as
 * MIG demands on g: a type asking gpu_milli of a card asks that share of card_mib (the
 * card's memory; the largest profile's when MIG is on) on each of its GPUs, rounded up, and
 * the smallest profile whose memory holds it serves it. Types whose model_mask leaves out
 * `model` (a bit index; >= 64: every type counts) and types no profile serves are left
 * out; demands served by the same profiles weigh alike in place_mig_frag, so they are
 * folded into one (at most one per subset of g's profiles). Writes at most cap demands to
 * out and returns their count, 0 when no type counts. */
size_t place_mig_mix_map(const struct place_mig_gpu *g, uint64_t card_mib, unsigned model,
                         const struct place_mix *mix, struct place_mig_demand *out, size_t cap);
/* The memory a whole card's share stands for on g when its learned types are mapped in the
 * scheduler: its slices at the memory per slice of its leanest profile (79,872 MiB on an
 * H100 80GB), so that a share of s/8 asks what s slices hold: a quarter of the card a
 * 2g, a half a 3g. 0 when g lists no profile. */
uint64_t place_mig_card_mib(const struct place_mig_gpu *g);
/* The share of a card (milli) a learned type records for an instance of mem_mib on a GPU
 * whose largest profile has card_mib: the largest share that place_mig_mix_map maps back
 * to a demand that instance's profile still serves. */
uint32_t place_mig_share_milli(uint64_t mem_mib, uint64_t card_mib);

/* place_mig_frag for every occupancy, so a chooser over many GPUs of one kind reads it. */
void place_mig_frag_table(const struct place_mig_gpu *g, const struct place_mig_demand *mix,
                          size_t count, double table[PLACE_MIG_STATES]);

/* Picks the profile and start for one request on g (its used and refused slices
 * honoured). table: place_mig_frag_table of g's kind under the mix, or NULL to compute
 * it as needed. 0 with out filled, or -ENOSPC with out->profile -1 and out->why. */
int place_mig_choose(const struct place_mig_gpu *g, uint64_t mem_mib, uint32_t cores,
                     enum place_mig_rule rule, const struct place_mig_demand *mix, size_t count,
                     const double *table, struct place_mig_choice *out);

/* Whether an instance of the profile named `profile` at `start` may be made on g now:
 * 0, or -EINVAL naming the reason (unknown profile, a start it does not allow or
 * outside the GPU, an overlap with an instance, a placement refused lately). */
int place_mig_check(const struct place_mig_gpu *g, const char *profile, unsigned start,
                    struct vg_err *err);

const char *place_mig_why_text(enum place_mig_why why);

#endif
