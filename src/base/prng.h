/* Seeded pseudo-random numbers: xoshiro256** seeded through splitmix64.
 *
 * Randomness in vgpu is always an argument (a struct vg_prng the caller owns), never a
 * hidden global, so the simulator and tests replay exactly for a given seed. The
 * generators are the public-domain algorithms by Blackman and Vigna; the sequences are
 * part of vgpu's contract (docs/ refer to them), so do not change them. */
#ifndef VGPU_BASE_PRNG_H
#define VGPU_BASE_PRNG_H

#include <stdint.h>

struct vg_prng {
    uint64_t s[4];
};

/* splitmix64: advances *state and returns the next output. */
uint64_t vg_splitmix64(uint64_t *state);

/* Fills the xoshiro state from four successive splitmix64 outputs of seed. */
void vg_prng_seed(struct vg_prng *rng, uint64_t seed);

/* Next 64 uniformly distributed bits. */
uint64_t vg_prng_next(struct vg_prng *rng);

/* Uniform in [0, bound) without modulo bias; bound 0 returns 0. */
uint64_t vg_prng_below(struct vg_prng *rng, uint64_t bound);

/* Uniform double in [0, 1) with 53 random bits. */
double vg_prng_unit(struct vg_prng *rng);

#endif
