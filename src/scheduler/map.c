#include "scheduler/map.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

static char tombstone;
#define TOMB (&tombstone)

/* Eight bytes at a time (node names are hashed 5,000 at a time on every filter), each
 * word folded in with a multiply and a shift; the tail bytes likewise. */
static uint64_t hash_n(const char *s, size_t n)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * k), w = 0;
    if (n >= 8) {
        const char *last = s + n - 8;
        for (; s < last; s += 8) {
            memcpy(&w, s, 8);
            h = (h ^ w) * k;
            h ^= h >> 29;
        }
        memcpy(&w, last, 8); /* the last eight bytes, overlapping the previous word */
    } else {
        for (size_t i = 0; i < n; i++)
            w |= (uint64_t)(unsigned char)s[i] << (8 * i);
    }
    h = (h ^ w) * k;
    h ^= h >> 32;
    h *= k;
    h ^= h >> 29;
    return h;
}

static uint64_t hash(const char *s)
{
    return hash_n(s, strlen(s));
}

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

static size_t find_hashed(const struct sched_map *m, const char *key, uint64_t h)
{
    if (m->cap == 0)
        return SIZE_MAX;
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        const char *k = m->slots[i].key;
        if (k == NULL)
            return SIZE_MAX;
        if (m->slots[i].hash == h && k != TOMB && strcmp(k, key) == 0)
            return i;
        i = (i + 1) & (m->cap - 1);
    }
}

static size_t find(const struct sched_map *m, const char *key)
{
    return find_hashed(m, key, hash(key));
}

uint64_t sched_map_hash(const char *key, size_t len)
{
    return hash_n(key, len);
}

void *sched_map_get_hashed(const struct sched_map *m, const char *key, uint64_t h)
{
    size_t i = find_hashed(m, key, h);
    return i == SIZE_MAX ? NULL : m->slots[i].value;
}

void *sched_map_get_hashed_n(const struct sched_map *m, const char *key, size_t len, uint64_t h)
{
    if (m->cap == 0)
        return NULL;
    size_t i = (size_t)h & (m->cap - 1);
    for (;;) {
        const char *k = m->slots[i].key;
        if (k == NULL)
            return NULL;
        if (m->slots[i].hash == h && k != TOMB && strncmp(k, key, len) == 0 && k[len] == '\0')
            return m->slots[i].value;
        i = (i + 1) & (m->cap - 1);
    }
}

void sched_map_prefetch_slot(const struct sched_map *m, uint64_t h)
{
    if (m->cap > 0)
        __builtin_prefetch(&m->slots[h & (m->cap - 1)]);
}

void sched_map_prefetch_key(const struct sched_map *m, uint64_t h)
{
    if (m->cap == 0)
        return;
    const char *k = m->slots[h & (m->cap - 1)].key;
    if (k != NULL && k != TOMB)
        __builtin_prefetch(k);
}

void *sched_map_get(const struct sched_map *m, const char *key)
{
    size_t i = find(m, key);
    return i == SIZE_MAX ? NULL : m->slots[i].value;
}

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
    uint64_t h = hash(key);
    i = (size_t)h & (m->cap - 1);
    while (m->slots[i].key != NULL && m->slots[i].key != TOMB)
        i = (i + 1) & (m->cap - 1);
    if (m->slots[i].key == NULL)
        m->used++;
    m->slots[i].key = xstrdup(key);
    m->slots[i].value = value;
    m->slots[i].hash = h;
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
    m->count--;
    return value;
}

size_t sched_map_next(const struct sched_map *m, size_t i)
{
    while (i < m->cap && (m->slots[i].key == NULL || m->slots[i].key == TOMB))
        i++;
    return i;
}
