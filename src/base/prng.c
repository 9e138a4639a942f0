#include "base/prng.h"

uint64_t vg_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void vg_prng_seed(struct vg_prng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = vg_splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t vg_prng_next(struct vg_prng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t vg_prng_below(struct vg_prng *rng, uint64_t bound)
{
    if (bound == 0)
        return 0;
    /* Lemire's multiply-and-reject: exact, and rejects rarely. */
    unsigned __int128 m = (unsigned __int128)vg_prng_next(rng) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = (0 - bound) % bound;
        while (low < threshold) {
            m = (unsigned __int128)vg_prng_next(rng) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double vg_prng_unit(struct vg_prng *rng)
{
    return (double)(vg_prng_next(rng) >> 11) * 0x1.0p-53;
}
