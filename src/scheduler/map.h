/* A string-keyed hash map (open addressing, linear probing, tombstones) for the
 * scheduler's node and pod tables. Keys are copied; values are borrowed pointers. */
#ifndef VGPU_SCHEDULER_MAP_H
#define VGPU_SCHEDULER_MAP_H

#include <stddef.h>

struct sched_map_slot {
    char *key; /* NULL: empty; SCHED_MAP_TOMBSTONE: deleted */
    void *value;
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

#endif
