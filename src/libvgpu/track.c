/* Allocation table: see track.h. */
#include "libvgpu/track.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/mem.h"

static __attribute__((noinline, cold)) void lock_contended(struct lv_track *t)
{
    do
        sched_yield();
    while (atomic_flag_test_and_set_explicit(&t->lock, memory_order_acquire));
}

static inline void lock(struct lv_track *t)
{
    if (__builtin_expect(atomic_flag_test_and_set_explicit(&t->lock, memory_order_acquire), 0))
        lock_contended(t);
}

static void unlock(struct lv_track *t)
{
    atomic_flag_clear_explicit(&t->lock, memory_order_release);
}

#define TRACK_MIN_CAPACITY 256
#define TRACK_MIN_BITS     8
_Static_assert(TRACK_MIN_CAPACITY == 1u << TRACK_MIN_BITS, "minimum capacity");

void lv_track_init(struct lv_track *t)
{
    memset(t, 0, sizeof *t);
    atomic_flag_clear(&t->lock);
}

void lv_track_free(struct lv_track *t)
{
    free(t->slots);
    t->slots = NULL;
    t->capacity = 0;
    t->count = 0;
}

/* Fibonacci hashing: the top bits of key x 2^64/phi. The space goes into the low bits,
 * which every aligned key leaves zero; equal keys of two spaces only share a chain. */
static inline size_t slot_of(uint64_t key, uint8_t space, unsigned shift)
{
    return (size_t)(((key ^ space) * UINT64_C(0x9e3779b97f4a7c15)) >> shift);
}

/* Index of (space, key), or SIZE_MAX. */
static inline size_t lookup(const struct lv_track *t, uint8_t space, uint64_t key)
{
    if (t->capacity == 0)
        return SIZE_MAX;
    size_t mask = t->capacity - 1;
    for (size_t i = slot_of(key, space, t->shift);; i = (i + 1) & mask) {
        const struct lv_track_entry *s = &t->slots[i];
        if (s->key == key && s->space == space)
            return i;
        if (s->space == LV_TRACK_FREE)
            return SIZE_MAX;
    }
}

static void place(struct lv_track_entry *slots, size_t capacity, unsigned shift,
                  const struct lv_track_entry *e)
{
    size_t i = slot_of(e->key, e->space, shift);
    while (slots[i].space != LV_TRACK_FREE)
        i = (i + 1) & (capacity - 1);
    slots[i] = *e;
}

static __attribute__((noinline, cold)) int grow(struct lv_track *t)
{
    size_t cap = t->capacity == 0 ? TRACK_MIN_CAPACITY : t->capacity * 2;
    unsigned shift = t->capacity == 0 ? 64 - TRACK_MIN_BITS : t->shift - 1;
    struct lv_track_entry *slots = vg_calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < t->capacity; i++)
        if (t->slots[i].space != LV_TRACK_FREE)
            place(slots, cap, shift, &t->slots[i]);
    free(t->slots);
    t->slots = slots;
    t->capacity = cap;
    t->shift = shift;
    return 0;
}

/* Backward-shift deletion: moves later members of the probe chain into the hole. */
static inline void erase(struct lv_track *t, size_t hole)
{
    size_t mask = t->capacity - 1;
    for (size_t j = (hole + 1) & mask; t->slots[j].space != LV_TRACK_FREE; j = (j + 1) & mask) {
        size_t home = slot_of(t->slots[j].key, t->slots[j].space, t->shift);
        /* j's entry may move to hole if hole lies on its probe path home..j. */
        if (((j - home) & mask) >= ((j - hole) & mask)) {
            t->slots[hole] = t->slots[j];
            hole = j;
        }
    }
    t->slots[hole].space = LV_TRACK_FREE;
    t->count--;
}

int lv_track_insert(struct lv_track *t, const struct lv_track_entry *e,
                    struct lv_track_entry *replaced)
{
    lock(t);
    if ((t->count + 1) * 2 > t->capacity && grow(t) != 0) {
        unlock(t);
        return -ENOMEM;
    }
    /* One probe: the entry with this key, or the first free slot of its chain. */
    size_t mask = t->capacity - 1;
    size_t i = slot_of(e->key, e->space, t->shift);
    while (t->slots[i].space != LV_TRACK_FREE &&
           (t->slots[i].key != e->key || t->slots[i].space != e->space))
        i = (i + 1) & mask;
    int rc = 0;
    if (t->slots[i].space != LV_TRACK_FREE) {
        if (replaced != NULL)
            *replaced = t->slots[i];
        rc = 1;
    } else {
        t->count++;
    }
    t->slots[i] = *e;
    unlock(t);
    return rc;
}

bool lv_track_remove(struct lv_track *t, enum lv_track_space space, uint64_t key,
                     struct lv_track_entry *out)
{
    lock(t);
    size_t i = lookup(t, (uint8_t)space, key);
    if (i != SIZE_MAX) {
        if (out != NULL)
            *out = t->slots[i];
        erase(t, i);
    }
    unlock(t);
    return i != SIZE_MAX;
}

bool lv_track_find(struct lv_track *t, enum lv_track_space space, uint64_t key,
                   struct lv_track_entry *out)
{
    lock(t);
    size_t i = lookup(t, (uint8_t)space, key);
    if (i != SIZE_MAX && out != NULL)
        *out = t->slots[i];
    unlock(t);
    return i != SIZE_MAX;
}

bool lv_track_modify(struct lv_track *t, enum lv_track_space space, uint64_t key,
                     bool (*fn)(struct lv_track_entry *e, void *arg), void *arg,
                     struct lv_track_entry *out)
{
    lock(t);
    size_t i = lookup(t, (uint8_t)space, key);
    if (i != SIZE_MAX) {
        bool drop = fn(&t->slots[i], arg);
        if (out != NULL)
            *out = t->slots[i];
        if (drop)
            erase(t, i);
    }
    unlock(t);
    return i != SIZE_MAX;
}

bool lv_track_find_in_range(struct lv_track *t, enum lv_track_space space, uint64_t lo, uint64_t hi,
                            bool take, struct lv_track_entry *out)
{
    bool found = false;
    lock(t);
    for (size_t i = 0; i < t->capacity && !found; i++) {
        struct lv_track_entry *s = &t->slots[i];
        if (s->space != (uint8_t)space || s->key < lo || s->key >= hi)
            continue;
        found = true;
        if (out != NULL)
            *out = *s;
        if (take)
            erase(t, i);
    }
    unlock(t);
    return found;
}

bool lv_track_find_holding(struct lv_track *t, enum lv_track_space space, uint64_t addr,
                           struct lv_track_entry *out)
{
    bool found = false;
    lock(t);
    for (size_t i = 0; i < t->capacity && !found; i++) {
        const struct lv_track_entry *s = &t->slots[i];
        if (s->space == (uint8_t)space && s->key <= addr && addr - s->key < s->bytes) {
            found = true;
            if (out != NULL)
                *out = *s;
        }
    }
    unlock(t);
    return found;
}

size_t lv_track_remove_context(struct lv_track *t, uintptr_t ctx,
                               void (*fn)(const struct lv_track_entry *e, void *arg), void *arg)
{
    size_t n = 0;
    lock(t);
    for (size_t i = 0; i < t->capacity;) {
        struct lv_track_entry *s = &t->slots[i];
        if (s->space != LV_TRACK_FREE && s->ctx == ctx) {
            struct lv_track_entry copy = *s;
            erase(t, i);
            if (fn != NULL)
                fn(&copy, arg);
            n++;
            continue; /* slot i now holds a shifted entry (or is free) */
        }
        i++;
    }
    unlock(t);
    return n;
}

void lv_track_reset_after_fork(struct lv_track *t)
{
    atomic_flag_clear(&t->lock);
    if (t->slots != NULL)
        memset(t->slots, 0, t->capacity * sizeof *t->slots);
    t->count = 0;
}
