/* SPDX-License-Identifier: Apache-2.0 */
/* prefetch: runs the upstream on a thread of its own, up to `depth` items
 * ahead of the consumer.
 *
 * depth=auto: the queue starts at AUTO_START items. When the consumer
 * finds it empty, and it had been full since the depth last changed, the
 * depth doubles, up to the smaller of AUTO_MAX and what a quarter of the
 * memory budget holds at the bytes per item handed out so far. The "had
 * been full" is tf.data's prefetch autotuner's rule too: an upstream
 * slower on average than the consumer leaves a queue of any depth empty,
 * and deepening it would only hold memory; a queue that fills and then
 * runs dry is absorbing bursts, and a deeper one absorbs longer ones.
 * The consumer's thread does all of it; the queue is allocated at
 * AUTO_MAX items (a few dozen bytes each) and only its limit moves. */
#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/feed.h"
#include "pipeline/stage.h"

#define AUTO_START 2
#define AUTO_MAX 1024
#define AUTO_BUDGET_SHARE 4 /* at most 1/4 of the budget */

typedef struct {
    ef__feed feed;
    int is_auto;
    /* depth=auto, the consumer's thread's */
    size_t depth;          /* the queue's limit now */
    int was_full;          /* seen full since the depth last changed */
    uint64_t bytes, items; /* payload handed out, for the budget bound */
} prefetch;

static int prefetch_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    prefetch *pf = ef__calloc(1, sizeof *pf);
    if (!pf)
        return ef__err_set(err, EF_ENOMEM, "prefetch: out of memory");
    size_t depth = (size_t)ef__opt_int(o, "depth");
    pf->is_auto = depth == 0;
    int rc = ef__feed_init(&pf->feed, s, pf->is_auto ? AUTO_MAX : depth, 1,
                           ef__feed_pump, &pf->feed, err);
    if (rc != EF_OK) {
        ef__free(pf);
        return rc;
    }
    if (pf->is_auto) {
        depth = AUTO_START;
        ef__queue_set_limit(&pf->feed.q, depth);
    }
    pf->depth = depth;
    atomic_store(&s->depth_now, (int)depth);
    s->state = pf;
    return EF_OK;
}

/* depth=auto, the consumer found the queue empty: the next depth. */
static void grow(ef__stage *s, prefetch *pf)
{
    uint64_t bound = AUTO_MAX, budget = s->ctx->budget.limit;
    if (budget && pf->items && pf->bytes) {
        uint64_t per_item = pf->bytes / pf->items;
        uint64_t fits = budget / AUTO_BUDGET_SHARE / (per_item ? per_item : 1);
        bound = fits < 1 ? 1 : fits < bound ? fits : bound;
    }
    /* may also shrink a depth the bound has fallen under (items grew) */
    size_t want = 2 * pf->depth < bound ? 2 * pf->depth : (size_t)bound;
    if (want == pf->depth)
        return;
    pf->depth = want;
    pf->was_full = 0;
    ef__queue_set_limit(&pf->feed.q, want);
    atomic_store(&s->depth_now, (int)want);
}

/* depth=auto: a take from the queue (block = 0 first) that watches its
 * fill. */
static int auto_take(ef__stage *s, prefetch *pf, ef_sample **out, int block,
                     ef__err *err)
{
    int rc = ef__feed_take(&pf->feed, out, 0, err);
    if (rc == EF_AGAIN) {
        if (pf->was_full)
            grow(s, pf);
        if (block)
            rc = ef__feed_take(&pf->feed, out, 1, err);
    } else if (rc == EF_OK && ef__feed_ready(&pf->feed) + 1 >= pf->depth) {
        pf->was_full = 1; /* it held `depth` items before this take */
    }
    if (rc == EF_OK && *out) {
        pf->bytes += ef__sample_bytes(*out);
        pf->items++;
    }
    return rc;
}

static int prefetch_open(ef__stage *s, ef__err *err)
{
    return ef__feed_start(&((prefetch *)s->state)->feed, err);
}

static int prefetch_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    prefetch *pf = s->state;
    return pf->is_auto ? auto_take(s, pf, out, 1, err)
                       : ef__feed_take(&pf->feed, out, 1, err);
}

static int prefetch_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    prefetch *pf = s->state;
    return pf->is_auto ? auto_take(s, pf, out, 0, err)
                       : ef__feed_take(&pf->feed, out, 0, err);
}

static int prefetch_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    return ef__feed_restart(&((prefetch *)s->state)->feed, epoch, err);
}

static void prefetch_cancel(ef__stage *s)
{
    ef__feed_cancel(&((prefetch *)s->state)->feed);
}

static void prefetch_destroy(ef__stage *s)
{
    prefetch *pf = s->state;
    ef__feed_destroy(&pf->feed);
    ef__free(pf);
}

static void prefetch_pause(ef__stage *s)
{
    ef__feed_pause(&((prefetch *)s->state)->feed);
}

static void prefetch_resume(ef__stage *s)
{
    ef__feed_resume(&((prefetch *)s->state)->feed);
}

/* The queue's items are the stage's replay list; no record of its own
 * (the depth is a speed setting). */
static int prefetch_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    return ef__feed_save(&((prefetch *)s->state)->feed, o, err);
}

static void prefetch_stats(const ef__stage *s, ef_stage_stats *out)
{
    prefetch *pf = s->state;
    ef__stats_extra(out, "queued", (double)ef__queue_count(&pf->feed.q));
}

static const ef__option_def prefetch_options[] = {
    EF__OPT(
        "depth", EF_OPT_INT_AUTO, "2",
        "items buffered ahead of the consumer, or auto: from 2, doubling when "
        "the consumer finds the queue empty, within 1/4 of the memory budget",
        1, 1 << 20, EF__SPEED_ONLY),
};

const ef__stage_def ef__stage_prefetch = {
    .info = {"prefetch", "run the upstream on its own thread, depth ahead",
             EF__OPTIONS(prefetch_options)},
    .create = prefetch_create,
    .open = prefetch_open,
    .next = prefetch_next,
    .poll = prefetch_poll,
    .reset = prefetch_reset,
    .cancel = prefetch_cancel,
    .destroy = prefetch_destroy,
    .stats = prefetch_stats,
    .pause = prefetch_pause,
    .resume = prefetch_resume,
    .save = prefetch_save,
};
