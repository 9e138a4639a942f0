/* A string-keyed hash map (open addressing, linear probing, tombstones) for the
 * scheduler's node and pod tables. Keys are copied; values are borrowed pointers. */
#ifndef VGPU_SCHEDULER_MAP_H
#define VGPU_SCHEDULER_MAP_H

#include <stddef.h>
#include <stdint.h>

struct sched_map_slot {
    char *key; /* NULL: empty; SCHED_MAP_TOMBSTONE: deleted */
    void *value;
    uint64_t hash; /* of key: probes compare it before the key */
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
/* Lookups in bulk (the filter's 5,000 offered names): the key's hash once, then the
 * slot and the key prefetched some lookups ahead, so cache misses overlap. */
uint64_t sched_map_hash(const char *key, size_t len); /* len = strlen(key) */
void *sched_map_get_hashed(const struct sched_map *m, const char *key, uint64_t hash);
/* The same for a key of len bytes that need not be NUL-terminated. */
void *sched_map_get_hashed_n(const struct sched_map *m, const char *key, size_t len, uint64_t hash);
void sched_map_prefetch_slot(const struct sched_map *m, uint64_t hash);
void sched_map_prefetch_key(const struct sched_map *m, uint64_t hash);
/* Removes; returns the value or NULL. */
void *sched_map_remove(struct sched_map *m, const char *key);
/* Iteration: i from 0; returns the next live slot index >= i, or m->cap at the end. */
size_t sched_map_next(const struct sched_map *m, size_t i);

#endif
