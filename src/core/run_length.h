/* SPDX-License-Identifier: Apache-2.0 */
/* How many items a thread takes and hands over at once (a run), from what
 * the items it moved before cost.
 *
 * Items cross threads in runs (map workers, pumps): one lock and at most
 * one wake-up per run instead of per item. A run should hold some tens of
 * microseconds of work: a hand-off that wakes a thread costs two futex
 * calls, 10 to 30 us each on a virtual machine, and a run should pay for
 * them many times over. But no more: a long run delays its first item and
 * holds its items' memory until the whole run is handed over. So items
 * slower than the target go one by one, as they would without runs, and
 * cheap ones go up to `max_items` at a time, within `max_bytes` of output
 * per run. A new
 * run is at most twice the last one plus one, so a thread starts with
 * single items and finds the length within a few runs.
 *
 * One estimator per thread; nothing here is shared. Run lengths change
 * only how items are grouped, never which items come out or in which
 * order. */
#ifndef EF_CORE_RUN_LENGTH_H
#define EF_CORE_RUN_LENGTH_H

#include <stddef.h>
#include <stdint.h>

/* The most items in one run. */
#define EF__RUN_MAX 1024
/* The work a run aims at; also the pull that counts as stalled, after
 * which a thread hands over what it holds. */
#define EF__RUN_TARGET_NS 100000

typedef struct {
    double ns_per_item;    /* smoothed; 0 before the first run */
    double bytes_per_item; /* of output, smoothed */
    size_t last;           /* the last run's length */
    size_t max_items;      /* 1 to EF__RUN_MAX */
    size_t max_bytes;      /* output a run may hold; 0: no bound */
} ef__run_length;

/* A fresh estimator for runs of at most max_items (clamped to 1 to
 * EF__RUN_MAX) and max_bytes (0: no bound). */
static inline void ef__run_length_init(ef__run_length *r, size_t max_items,
                                       size_t max_bytes)
{
    r->ns_per_item = r->bytes_per_item = 0;
    r->last = 0;
    r->max_items = max_items < 1             ? 1
                   : max_items > EF__RUN_MAX ? EF__RUN_MAX
                                             : max_items;
    r->max_bytes = max_bytes;
}

/* The length of the next run: 1 to max_items. */
static inline size_t ef__run_length_next(const ef__run_length *r)
{
    double n = (double)r->max_items;
    if (r->ns_per_item > 0)
        n = EF__RUN_TARGET_NS / r->ns_per_item;
    if (r->max_bytes && r->bytes_per_item > 0 &&
        n > (double)r->max_bytes / r->bytes_per_item)
        n = (double)r->max_bytes / r->bytes_per_item;
    if (n > (double)(2 * r->last + 1))
        n = (double)(2 * r->last + 1);
    if (n > (double)r->max_items)
        n = (double)r->max_items;
    return n < 1 ? 1 : (size_t)n;
}

/* The most items of the sizes seen so far that fit the bytes bound (the
 * items bound when there is none): for a run length chosen elsewhere. */
static inline size_t ef__run_length_fit(const ef__run_length *r)
{
    if (!r->max_bytes || r->bytes_per_item <= 0)
        return r->max_items;
    double n = (double)r->max_bytes / r->bytes_per_item;
    return n < 1 ? 1 : n > (double)r->max_items ? r->max_items : (size_t)n;
}

/* Records a run of n items that took ns and made `bytes` of output. */
static inline void ef__run_length_note(ef__run_length *r, size_t n, uint64_t ns,
                                       uint64_t bytes)
{
    if (n == 0)
        return;
    double per = (double)ns / (double)n, size = (double)bytes / (double)n;
    /* the first run sets the estimate; later ones move it a quarter of
     * the way, so one stalled pull does not send a thread back to single
     * items for long */
    if (r->ns_per_item == 0) {
        r->ns_per_item = per > 0 ? per : 1;
        r->bytes_per_item = size;
    } else {
        r->ns_per_item += (per - r->ns_per_item) / 4;
        r->bytes_per_item += (size - r->bytes_per_item) / 4;
    }
    r->last = n;
}

#endif
