#include "scheduler/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

static char tombstone;
#define TOMB (&tombstone)

void sched_map_init(struct sched_map *m)
{
    memset(m, 0, sizeof *m);
}

void sched_map_release(struct sched_map *m)
{
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i].key != NULL && m->slots[i].key != TOMB)
            free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static size_t find(const struct sched_map *m, const char *key)
{
    if (m->cap == 0)
        return SIZE_MAX;
    size_t len = strlen(key);
    uint64_t h = sched_map_hash(key, len);
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
        const struct sched_map_slot *sl = &m->slots[i];
        if (sl->key == NULL)
            return SIZE_MAX;
        if (sl->hash == h && sl->len == len && sched_map_key_equal(sl->key, key, len))
            return i;
    }
}

void *sched_map_get(const struct sched_map *m, const char *key)
{
    size_t i = find(m, key);
    return i == SIZE_MAX ? NULL : m->slots[i].value;
}

/* A rehash into a fresh power-of-two table, not an append: the map holds what the
 * state holds (nodes up to SCHED_MAX_NODES, pods the API lists). */
static void grow(struct sched_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    if (m->count * 4 < m->cap)
        cap = m->cap; /* mostly tombstones: rehash in place size */
    struct sched_map_slot *old = m->slots;
    size_t old_cap = m->cap;
    m->slots = xcalloc(cap, sizeof *m->slots);
    m->cap = cap;
    m->count = m->used = 0;
    for (size_t i = 0; i < old_cap; i++) {
        if (old[i].key == NULL || old[i].key == TOMB)
            continue;
        size_t j = (size_t)old[i].hash & (cap - 1);
        while (m->slots[j].key != NULL)
            j = (j + 1) & (cap - 1);
        m->slots[j] = old[i];
        m->count++;
        m->used++;
    }
    free(old);
}

void *sched_map_put(struct sched_map *m, const char *key, void *value)
{
    size_t i = find(m, key);
    if (i != SIZE_MAX) {
        void *prev = m->slots[i].value;
        m->slots[i].value = value;
        return prev;
    }
    if ((m->used + 1) * 2 >= m->cap) /* at most half full: short probe runs */
        grow(m);
    size_t len = strlen(key);
    uint64_t h = sched_map_hash(key, len);
    i = (size_t)h & (m->cap - 1);
    while (m->slots[i].key != NULL && m->slots[i].key != TOMB)
        i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == NULL)
        m->used++;
    m->slots[i].key = xstrdup(key);
    m->slots[i].value = value;
    m->slots[i].hash = h;
    m->slots[i].len = len;
    m->count++;
    return NULL;
}

void *sched_map_remove(struct sched_map *m, const char *key)
{
    size_t i = find(m, key);
    if (i == SIZE_MAX)
        return NULL;
    void *value = m->slots[i].value;
    free(m->slots[i].key);
    m->slots[i].key = TOMB;
    m->slots[i].value = NULL;
    m->slots[i].hash = 0;
    m->slots[i].len = SIZE_MAX;
    m->count--;
    return value;
}

size_t sched_map_next(const struct sched_map *m, size_t i)
{
    while (i < m->cap && (m->slots[i].key == NULL || m->slots[i].key == TOMB))
        i++;
    return i;
}
