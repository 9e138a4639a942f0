/* The device timeline: a pure function of the shared layout and a time (see timeline.h
 * for the model). It is computed lazily by whichever process holds the lock, so each
 * step below jumps straight to the next moment something changes (a kernel ends, a
 * slice ends, work arrives) instead of ticking. */
#include "fakegpu/timeline.h"

#include <stdbool.h>

void fg_util_add(struct fg_util *u, uint64_t from, uint64_t to)
{
    while (from < to) {
        uint64_t bucket = from / FG_UTIL_BUCKET_NS;
        uint64_t end = (bucket + 1) * FG_UTIL_BUCKET_NS;
        if (end > to)
            end = to;
        unsigned idx = (unsigned)(bucket % FG_UTIL_BUCKETS);
        if (u->epoch[idx] != (uint32_t)bucket) {
            u->epoch[idx] = (uint32_t)bucket;
            u->busy_ns[idx] = 0;
        }
        u->busy_ns[idx] += (uint32_t)(end - from);
        from = end;
    }
}

uint64_t fg_util_sum(const struct fg_util *u, uint64_t now_ns, uint64_t window_ns,
                     uint64_t *span_ns)
{
    uint64_t history = (uint64_t)(FG_UTIL_BUCKETS - 1) * FG_UTIL_BUCKET_NS;
    if (window_ns > history)
        window_ns = history;
    if (window_ns < FG_UTIL_BUCKET_NS)
        window_ns = FG_UTIL_BUCKET_NS;
    uint64_t last = now_ns / FG_UTIL_BUCKET_NS;
    uint64_t start = now_ns >= window_ns ? now_ns - window_ns : 0;
    uint64_t first = (start + FG_UTIL_BUCKET_NS - 1) / FG_UTIL_BUCKET_NS;
    uint64_t busy = 0;
    for (uint64_t b = first; b <= last; b++) {
        unsigned idx = (unsigned)(b % FG_UTIL_BUCKETS);
        if (u->epoch[idx] == (uint32_t)b)
            busy += u->busy_ns[idx];
    }
    *span_ns = now_ns - first * FG_UTIL_BUCKET_NS;
    return busy;
}

uint64_t fg_stream_pending_ns(const struct fg_stream_shared *s)
{
    uint64_t sum = 0;
    for (uint64_t n = s->completed; n < s->submitted; n++) {
        const struct fg_item *it = &s->ring[n % FG_STREAM_DEPTH];
        if (it->kind == FG_ITEM_KERNEL)
            sum = it->remaining_ns > UINT64_MAX - sum ? UINT64_MAX : sum + it->remaining_ns;
    }
    return sum;
}

static struct fg_item *head(struct fg_stream_shared *s)
{
    if (s->completed == s->submitted)
        return NULL;
    return &s->ring[s->completed % FG_STREAM_DEPTH];
}

/* The timeline a stream runs on: 0 for the whole GPU, k for MIG device slot k - 1 (the
 * instance its process is bound to on that device, fg_mig_bind). */
static int stream_domain(const struct fg_shared *sh, const struct fg_stream_shared *s)
{
    if ((unsigned)s->owner >= FG_MAX_PROCS || (unsigned)s->dev >= FG_MAX_DEVICES)
        return 0; /* never trust an index from the file blindly */
    unsigned m = sh->slots[s->owner].mig[s->dev];
    return m <= FG_MAX_MIG ? (int)m : 0;
}

/* One timeline: a device and, on a GPU in MIG mode, a domain (FG_ALL_DOMAINS on a GPU
 * without MIG, where every stream of the device shares the one timeline). */
#define FG_ALL_DOMAINS (-1)
struct line {
    int dev, dom;
};

static bool on_line(const struct fg_shared *sh, const struct fg_stream_shared *s, struct line l)
{
    return s->in_use && s->dev == l.dev &&
           (l.dom == FG_ALL_DOMAINS || stream_domain(sh, s) == l.dom);
}

/* Completes markers, satisfied waits and finished kernels at the head of every stream
 * of the timeline, at time t; true if anything completed. */
static bool settle_pass(struct fg_shared *sh, struct line l, uint64_t t)
{
    bool changed = false;
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        struct fg_stream_shared *s = &sh->streams[i];
        if (!on_line(sh, s, l))
            continue;
        struct fg_item *it;
        while ((it = head(s)) != NULL && it->submit_ns <= t) {
            struct fg_event_shared *ev = NULL;
            if (it->kind != FG_ITEM_KERNEL) {
                if ((unsigned)s->owner >= FG_MAX_PROCS || it->event >= FG_MAX_EVENTS) {
                    s->completed++; /* never trust an index from the file blindly */
                    changed = true;
                    continue;
                }
                ev = &sh->slots[s->owner].events[it->event];
            }
            if (it->kind == FG_ITEM_KERNEL) {
                if (it->remaining_ns > 0)
                    break;
            } else if (it->kind == FG_ITEM_MARKER) {
                if (ev->in_use && ev->rec_gen == it->gen) {
                    ev->done_gen = it->gen;
                    ev->time_ns = t;
                }
            } else if (ev->in_use && ev->done_gen < it->gen) {
                break; /* wait item: the awaited record has not completed */
            }
            s->completed++;
            changed = true;
        }
        if (s->closing && s->completed == s->submitted) {
            s->in_use = 0;
            s->closing = 0;
        }
    }
    return changed;
}

/* A marker on one stream can release a wait on another: settle until nothing moves. */
static void settle_heads(struct fg_shared *sh, struct line l, uint64_t t)
{
    while (settle_pass(sh, l, t)) {
    }
}

/* Whether slot has a kernel it can run at t on the timeline. */
static bool slot_runnable(struct fg_shared *sh, struct line l, int slot, uint64_t t)
{
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        struct fg_stream_shared *s = &sh->streams[i];
        if (!on_line(sh, s, l) || s->owner != slot)
            continue;
        struct fg_item *it = head(s);
        if (it != NULL && it->kind == FG_ITEM_KERNEL && it->submit_ns <= t)
            return true;
    }
    return false;
}

/* The next slot after `after` (round-robin, `after` itself last) with runnable work. */
static int next_runnable(struct fg_shared *sh, struct line l, int after, uint64_t t)
{
    for (int k = 1; k <= FG_MAX_PROCS; k++) {
        int slot = (after + k + FG_MAX_PROCS) % FG_MAX_PROCS;
        if (sh->slots[slot].in_use && slot_runnable(sh, l, slot, t))
            return slot;
    }
    return FG_NO_SLOT;
}

/* Whether another slot than `slot` has runnable work on the timeline at t. */
static bool has_competitor(struct fg_shared *sh, struct line l, int slot, uint64_t t)
{
    for (int k = 0; k < FG_MAX_PROCS; k++) {
        if (k != slot && sh->slots[k].in_use && slot_runnable(sh, l, k, t))
            return true;
    }
    return false;
}

/* Earliest submit time after t of a head item on the timeline (UINT64_MAX if none). */
static uint64_t next_arrival(struct fg_shared *sh, struct line l, uint64_t t)
{
    uint64_t next = UINT64_MAX;
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        struct fg_stream_shared *s = &sh->streams[i];
        if (!on_line(sh, s, l))
            continue;
        struct fg_item *it = head(s);
        if (it != NULL && it->submit_ns > t && it->submit_ns < next)
            next = it->submit_ns;
    }
    return next;
}

static void advance_line(struct fg_shared *sh, struct line l, struct fg_device_runtime *d,
                         uint64_t now)
{
    uint64_t t = d->t;
    if (now <= t)
        return;
    for (;;) {
        settle_heads(sh, l, t);
        if (t >= now)
            break;
        int cur = d->current;
        bool keep = cur != FG_NO_SLOT && sh->slots[cur].in_use && t < d->slice_end &&
                    slot_runnable(sh, l, cur, t);
        if (keep && d->slice_end == FG_SLICE_OPEN && has_competitor(sh, l, cur, t))
            d->slice_end = t + sh->timeslice_ns;
        if (!keep) {
            int next = next_runnable(sh, l, cur, t);
            d->current = next;
            if (next != FG_NO_SLOT)
                d->slice_end =
                    has_competitor(sh, l, next, t) ? t + sh->timeslice_ns : FG_SLICE_OPEN;
        }
        uint64_t end = now;
        uint64_t arrival = next_arrival(sh, l, t);
        if (arrival < end)
            end = arrival;
        if (d->current == FG_NO_SLOT) {
            t = end; /* idle until something arrives */
            continue;
        }
        if (d->slice_end < end)
            end = d->slice_end;
        cur = d->current;
        for (uint32_t i = 0; i < sh->stream_high; i++) {
            struct fg_stream_shared *s = &sh->streams[i];
            if (!on_line(sh, s, l) || s->owner != cur)
                continue;
            struct fg_item *it = head(s);
            /* Compared as a difference: a huge duration must not wrap around. */
            if (it != NULL && it->kind == FG_ITEM_KERNEL && it->submit_ns <= t &&
                it->remaining_ns < end - t)
                end = t + it->remaining_ns;
        }
        bool ran = false;
        for (uint32_t i = 0; i < sh->stream_high; i++) {
            struct fg_stream_shared *s = &sh->streams[i];
            if (!on_line(sh, s, l) || s->owner != cur)
                continue;
            struct fg_item *it = head(s);
            if (it != NULL && it->kind == FG_ITEM_KERNEL && it->submit_ns <= t) {
                it->remaining_ns -= end - t;
                ran = true;
            }
        }
        if (ran) {
            fg_util_add(&d->util, t, end);
            fg_util_add(&sh->slots[cur].util[l.dev], t, end);
        }
        t = end;
    }
    d->t = t;
}

struct fg_device_runtime *fg_timeline_runtime(struct fg_shared *sh, int dev, int dom)
{
    return dom == 0 ? &sh->dev[dev] : &sh->mig_rt[dev][dom - 1];
}

/* A GPU in MIG mode runs each instance on its own timeline (real MIG isolates them), and
 * work on the whole GPU on another; a timeline without streams just idles forward, so
 * that scanning it costs nothing. */
static void advance_mig(struct fg_shared *sh, int dev, uint64_t now)
{
    bool busy[FG_MAX_MIG + 1] = {false};
    for (uint32_t i = 0; i < sh->stream_high; i++) {
        const struct fg_stream_shared *s = &sh->streams[i];
        if (s->in_use && s->dev == dev)
            busy[stream_domain(sh, s)] = true;
    }
    for (int dom = 0; dom <= FG_MAX_MIG; dom++) {
        struct fg_device_runtime *rt = fg_timeline_runtime(sh, dev, dom);
        if (busy[dom]) {
            advance_line(sh, (struct line){dev, dom}, rt, now);
        } else {
            rt->current = FG_NO_SLOT;
            if (rt->t < now)
                rt->t = now;
        }
    }
}

void fg_timeline_advance(struct fg_shared *sh, uint64_t now_ns)
{
    for (uint32_t dev = 0; dev < sh->device_count && dev < FG_MAX_DEVICES; dev++) {
        if (sh->info[dev].mig_enabled)
            advance_mig(sh, (int)dev, now_ns);
        else
            advance_line(sh, (struct line){(int)dev, FG_ALL_DOMAINS}, &sh->dev[dev], now_ns);
    }
}
