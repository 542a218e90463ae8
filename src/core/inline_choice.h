/* SPDX-License-Identifier: Apache-2.0 */
/* Whether a map's consumer should run its cheap items itself (inline)
 * rather than take them from worker threads, by timing both.
 *
 * Handing an item to another core costs cache misses on its header, its
 * buffers and its allocator (hundreds of ns on a virtual machine): more
 * than a cast or a field selection costs to do. Nothing measured on the
 * workers says what an item would cost inline, since their time includes
 * those misses; so the consumer times its own pace, one window with the
 * workers and one without, and keeps the faster way (inline when as
 * fast: it spares a core) until the next comparison. A comparison that
 * starts from inline first warms up a window: the workers wake and refill
 * the ring.
 *
 * The comparison sees whatever else the consumer does between items
 * alike in both windows. One per stage, the consumer's alone. */
#ifndef EF_CORE_INLINE_CHOICE_H
#define EF_CORE_INLINE_CHOICE_H

#include <stdint.h>

/* A window of the comparison: at least this long and this many items. */
#define EF__INLINE_WINDOW_NS 20000000u
#define EF__INLINE_WINDOW_ITEMS 2048u
/* From one comparison to the next: items may grow costlier, or the
 * machine busier, as a run goes on. */
#define EF__INLINE_COMPARE_EVERY_NS 4000000000u

typedef enum {
    EF__INLINE_WARMING,
    EF__INLINE_TIMING_THREADED,
    EF__INLINE_TIMING_INLINE,
    EF__INLINE_SETTLED
} ef__inline_phase;

typedef struct {
    ef__inline_phase phase;
    uint64_t window_t0, window_items, next_compare;
    double threaded_rate; /* items per ns in the threaded window */
} ef__inline_choice;

/* A comparison starting at `now`, threaded; `warm`: the workers have
 * been running, no window need warm them up. */
static inline void ef__inline_choice_init(ef__inline_choice *c, uint64_t now,
                                          int warm)
{
    c->phase = warm ? EF__INLINE_TIMING_THREADED : EF__INLINE_WARMING;
    c->window_t0 = now;
    c->window_items = 0;
    c->next_compare = 0;
    c->threaded_rate = 0;
}

/* The consumer took `items` more items by `now`. Returns the way to run
 * from now on, 1 inline or 0 threaded, or -1 to stay as it is. */
static inline int ef__inline_choice_note(ef__inline_choice *c, uint64_t items,
                                         uint64_t now)
{
    c->window_items += items;
    if (c->phase == EF__INLINE_SETTLED) {
        if (now < c->next_compare)
            return -1;
        ef__inline_choice_init(c, now, 0);
        return 0;
    }
    uint64_t spent = now - c->window_t0;
    if (spent < EF__INLINE_WINDOW_NS ||
        c->window_items < EF__INLINE_WINDOW_ITEMS)
        return -1;
    double rate = (double)c->window_items / (double)spent;
    int way = -1;
    if (c->phase == EF__INLINE_WARMING) {
        c->phase = EF__INLINE_TIMING_THREADED;
    } else if (c->phase == EF__INLINE_TIMING_THREADED) {
        c->threaded_rate = rate;
        c->phase = EF__INLINE_TIMING_INLINE;
        way = 1;
    } else {
        way = rate >= c->threaded_rate;
        c->phase = EF__INLINE_SETTLED;
        c->next_compare = now + EF__INLINE_COMPARE_EVERY_NS;
    }
    c->window_t0 = now;
    c->window_items = 0;
    return way;
}

#endif
