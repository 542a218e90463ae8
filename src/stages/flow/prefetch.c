/* prefetch: runs the upstream on a thread of its own, up to `depth` items
 * ahead of the consumer. */
#include "core/alloc.h"
#include "feed.h"
#include "stage.h"

static int prefetch_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    ef__feed *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "prefetch: out of memory");
    int rc = ef__feed_init(p, s, (size_t)ef__opt_int(o, "depth"), 1,
                           ef__feed_pump, p, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    s->state = p;
    return EF_OK;
}

static int prefetch_open(ef__stage *s, ef__err *err)
{
    return ef__feed_start(s->state, err);
}

static int prefetch_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return ef__feed_take(s->state, out, 1, err);
}

static int prefetch_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return ef__feed_take(s->state, out, 0, err);
}

static int prefetch_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    return ef__feed_restart(s->state, epoch, err);
}

static void prefetch_cancel(ef__stage *s)
{
    ef__feed_cancel(s->state);
}

static void prefetch_destroy(ef__stage *s)
{
    ef__feed_destroy(s->state);
    ef__free(s->state);
}

static void prefetch_stats(const ef__stage *s, ef_stage_stats *out)
{
    ef__feed *p = s->state;
    ef__stats_extra(out, "queued", (double)ef__queue_count(&p->q));
}

static const ef__option_def prefetch_options[] = {
    {"depth", EF_OPT_INT, "2", "items buffered ahead of the consumer", 1,
     1 << 20},
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
};
