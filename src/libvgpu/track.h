/* What this process holds on its GPUs: an open-addressing hash table from (kind of
 * handle, handle) to (device, bytes charged, owning context, pool). Every allocation
 * wrapper inserts after the driver succeeds and every free removes before releasing the
 * charge, so a free of a pointer the table does not know (allocated before libvgpu was
 * loaded, or garbage) is forwarded to the driver untouched and releases nothing.
 *
 * Linear probing with backward-shift deletion (no tombstones), so a long-running process
 * that allocates and frees millions of times keeps short probe chains. The table grows by
 * doubling at 50 % load; growth failure is reported and the caller undoes the allocation.
 * The hash is one multiplication (Fibonacci hashing: the product's top bits), which
 * spreads keys that differ only in their middle bits, as aligned device addresses do.
 * One spinlock per table: the critical sections are a few dozen instructions, and a
 * pthread mutex would double the cost of an allocation; a waiter yields the CPU. */
#ifndef VGPU_LIBVGPU_TRACK_H
#define VGPU_LIBVGPU_TRACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lv_track_space {
    LV_TRACK_FREE = 0, /* empty slot */
    LV_TRACK_DEVPTR,   /* cuMemAlloc*, pitch, managed, async: device address */
    LV_TRACK_VMM,      /* a VMM handle (cuMemCreate, import, retain): names its object */
    LV_TRACK_ARRAY,    /* CUarray */
    LV_TRACK_MIPMAP,   /* CUmipmappedArray */
    LV_TRACK_CONTEXT,  /* a context's own overhead, keyed by CUcontext */
    LV_TRACK_VMM_OBJ,  /* a VMM physical allocation, keyed by libvgpu's own id: the charge */
    LV_TRACK_VMM_MAP,  /* a cuMemMap mapping, keyed by its virtual address */
    LV_TRACK_IPC,      /* cuIpcOpenMemHandle: the imported address, refs: opens not closed */
};

struct lv_track_entry {
    uint64_t key;
    uint8_t space;    /* enum lv_track_space */
    uint8_t async;    /* allocated from a memory pool (stream-ordered) */
    uint16_t dev;     /* region device index */
    uint32_t refs;    /* LV_TRACK_VMM, LV_TRACK_VMM_OBJ: handle references not yet released;
                         LV_TRACK_IPC: opens not yet closed */
    uint64_t bytes;   /* charged to the region (LV_TRACK_VMM_MAP: the size mapped, not charged) */
    uintptr_t ctx;    /* context it belongs to (0: not tied to one) */
    uintptr_t pool;   /* memory pool for stream-ordered allocations */
    uint32_t maps;    /* LV_TRACK_VMM_OBJ: mappings not yet unmapped */
    uint8_t imported; /* LV_TRACK_VMM_OBJ: from another process's shareable handle */
    uint8_t graph;    /* LV_TRACK_DEVPTR: a graph's allocation (node or captured) */
    uint64_t obj;     /* LV_TRACK_VMM, LV_TRACK_VMM_MAP: the LV_TRACK_VMM_OBJ key */
};

struct lv_track {
    atomic_flag lock;
    unsigned shift; /* 64 - log2(capacity): the hash keeps the product's top bits */
    struct lv_track_entry *slots;
    size_t capacity; /* power of two, or 0 before the first insert */
    size_t count;
};

void lv_track_init(struct lv_track *t);
void lv_track_free(struct lv_track *t);

/* Inserts e. If an entry with the same key was there (its free was never seen, e.g. the
 * driver freed it with its context), it is replaced and copied to *replaced and 1 is
 * returned; 0 otherwise; -ENOMEM when the table cannot grow. */
int lv_track_insert(struct lv_track *t, const struct lv_track_entry *e,
                    struct lv_track_entry *replaced);
/* Removes (space, key) and copies it to *out; false if absent. */
bool lv_track_remove(struct lv_track *t, enum lv_track_space space, uint64_t key,
                     struct lv_track_entry *out);
bool lv_track_find(struct lv_track *t, enum lv_track_space space, uint64_t key,
                   struct lv_track_entry *out);

/* Under the lock: finds (space, key) and lets fn change it in place; when fn returns true
 * the entry is removed. *out gets the entry as fn left it. false if absent (fn not run). */
bool lv_track_modify(struct lv_track *t, enum lv_track_space space, uint64_t key,
                     bool (*fn)(struct lv_track_entry *e, void *arg), void *arg,
                     struct lv_track_entry *out);
/* The entry of space whose key lies in [lo, hi): removed when take, copied to *out.
 * A scan of the whole table (for rare calls: unmapping a range, a lookup by address). */
bool lv_track_find_in_range(struct lv_track *t, enum lv_track_space space, uint64_t lo, uint64_t hi,
                            bool take, struct lv_track_entry *out);

/* The entry of space with key <= addr < key + bytes (a scan, as above). */
bool lv_track_find_holding(struct lv_track *t, enum lv_track_space space, uint64_t addr,
                           struct lv_track_entry *out);

/* Removes every entry of context ctx, calling fn for each (with the lock held: fn must not
 * call back into the table). Returns how many were removed. */
size_t lv_track_remove_context(struct lv_track *t, uintptr_t ctx,
                               void (*fn)(const struct lv_track_entry *e, void *arg), void *arg);

/* In a forked child: the parent's allocations are not the child's. Empties the table
 * (keeping its memory) and releases the lock (a parent thread may have held it). */
void lv_track_reset_after_fork(struct lv_track *t);

#endif
