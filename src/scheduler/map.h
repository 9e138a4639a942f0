/* A string-keyed hash map (open addressing, linear probing, tombstones) for the
 * scheduler's node and pod tables. Keys are copied; values are borrowed pointers.
 *
 * The filter looks up every offered node name (5,000 per call on a 5,000-node cluster),
 * so the hash and the bulk lookup are inline: each slot keeps its key's hash and length,
 * a probe compares those before the key, and the key is compared a word at a time. */
#ifndef VGPU_SCHEDULER_MAP_H
#define VGPU_SCHEDULER_MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct sched_map_slot {
    char *key; /* NULL: empty; a private marker: deleted */
    void *value;
    uint64_t hash; /* of key: probes compare it before the key */
    size_t len;    /* strlen(key); SIZE_MAX for a deleted slot, which no probe matches */
};

struct sched_map {
    struct sched_map_slot *slots;
    size_t cap, count, used; /* used counts tombstones too */
};

void sched_map_init(struct sched_map *m);
void sched_map_release(struct sched_map *m);
void *sched_map_get(const struct sched_map *m, const char *key);
/* Sets or replaces; returns the previous value or NULL. */
void *sched_map_put(struct sched_map *m, const char *key, void *value);
/* Removes; returns the value or NULL. */
void *sched_map_remove(struct sched_map *m, const char *key);
/* Iteration: i from 0; returns the next live slot index >= i, or m->cap at the end. */
size_t sched_map_next(const struct sched_map *m, size_t i);

/* ---- lookups in bulk (the filter's offered names) ------------------------------------
 * The key's hash once, then the slot and the key prefetched some lookups ahead, so cache
 * misses overlap. */

/* The hash of len bytes at key (need not be NUL-terminated): eight bytes at a time,
 * each word folded in with a multiply and a shift; shorter tails as one word. */
static inline uint64_t sched_map_hash(const char *key, size_t len)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t h = 0x243F6A8885A308D3ull ^ (len * k), w = 0;
    if (len >= 8) {
        const char *last = key + len - 8;
        for (const char *p = key; p < last; p += 8) {
            memcpy(&w, p, 8);
            h = (h ^ w) * k;
            h ^= h >> 29;
        }
        memcpy(&w, last, 8); /* the last eight bytes, overlapping the previous word */
    } else if (len >= 4) {
        uint32_t a, b;
        memcpy(&a, key, 4);
        memcpy(&b, key + len - 4, 4);
        w = (uint64_t)a << 32 | b;
    } else if (len > 0) {
        w = (uint64_t)(unsigned char)key[0] | (uint64_t)(unsigned char)key[len / 2] << 8 |
            (uint64_t)(unsigned char)key[len - 1] << 16;
    }
    h = (h ^ w) * k;
    h ^= h >> 32;
    h *= k;
    h ^= h >> 29;
    return h;
}

/* a and b hold n bytes each. */
static inline bool sched_map_key_equal(const char *a, const char *b, size_t n)
{
    if (n < 8)
        return memcmp(a, b, n) == 0;
    uint64_t x, y;
    for (size_t i = 0; i + 8 < n; i += 8) {
        memcpy(&x, a + i, 8);
        memcpy(&y, b + i, 8);
        if (x != y)
            return false;
    }
    memcpy(&x, a + n - 8, 8);
    memcpy(&y, b + n - 8, 8);
    return x == y;
}

/* The value for the len bytes at key (not necessarily NUL-terminated) whose
 * sched_map_hash is hash, or NULL. */
static inline void *sched_map_get_hashed_n(const struct sched_map *m, const char *key, size_t len,
                                           uint64_t hash)
{
    if (m->cap == 0)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)hash & mask;; i = (i + 1) & mask) {
        const struct sched_map_slot *sl = &m->slots[i];
        if (sl->key == NULL)
            return NULL;
        if (sl->hash == hash && sl->len == len && sched_map_key_equal(sl->key, key, len))
            return sl->value;
    }
}

static inline void sched_map_prefetch_slot(const struct sched_map *m, uint64_t hash)
{
    if (m->cap > 0)
        __builtin_prefetch(&m->slots[hash & (m->cap - 1)]);
}

/* The slot must be in cache by now (prefetched some lookups earlier). */
static inline void sched_map_prefetch_key(const struct sched_map *m, uint64_t hash)
{
    if (m->cap == 0)
        return;
    const struct sched_map_slot *sl = &m->slots[hash & (m->cap - 1)];
    if (sl->len != SIZE_MAX && sl->key != NULL)
        __builtin_prefetch(sl->key);
}

#endif
