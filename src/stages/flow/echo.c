/* SPDX-License-Identifier: Apache-2.0 */
/* echo: data echoing.
 *
 * Fixed factor F: each item from upstream is emitted F times (fractional F:
 * floor(F) times, plus once more with probability frac(F), drawn per item
 * with the keyed RNG). Copies follow one another, or are spread apart by a
 * shuffle buffer (shuffle=N).
 *
 * factor=auto: echo only when the downstream would otherwise wait. The
 * upstream is read through a queue that can be polled (the upstream's own,
 * or a pump this stage starts). On each request a fresh item, when one is
 * ready, always goes first; when none is, an item from the pool of the
 * `pool` most recent fresh items (echo_pool.h) is emitted again, chosen at
 * random among the least-echoed, never more than `max` times in all; when
 * every pooled item is used up, the stage waits for fresh data.
 *
 * policy=NAME (echo_policy.h): which pooled item to echo is drawn by
 * priorities from values the consumer feeds back (ef_pipeline_feedback),
 * such as training losses, instead of among the least-echoed; mix=S
 * keeps a share S of the picks the uniform way. With a fixed factor F,
 * every fresh item then joins the pool and brings F - 1 echoes due, drawn
 * from the pool: the same echoes in all, spread by priority rather than F
 * per item (with mix=1, F per item again).
 *
 * Either way copies share the payload buffers: an echo is a new sample
 * header, never a copy of the data. The headers come from a free list of
 * the stage's own (ef__sample_pool), so steady-state echoing allocates
 * nothing; copies may outlive the stage. Before `batch` this is example
 * echoing, after it batch echoing. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/sample.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"
#include "stages/flow/echo_stage.h"

/* A fixed factor starts reading ahead on a thread of its own once its
 * first READ_AHEAD_AFTER fresh items took READ_AHEAD_NS or more each to
 * pull (take_fixed): a hand-off between threads costs a few microseconds,
 * so an upstream far slower than that gains the overlap, and a cheap one
 * (an in-memory source) keeps the direct pull. */
#define READ_AHEAD_AFTER 16
#define READ_AHEAD_NS 20000

static int echo_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    ef__echo_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->headers = ef__sample_pool_new();
    if (!st->headers)
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    st->factor = ef__opt_factor(o, "factor");
    st->mode = st->factor == 0 ? EF__ECHO_AUTO : EF__ECHO_FIXED;
    st->max = (int)ef__opt_int(o, "max");
    st->shuffle = (size_t)ef__opt_int(o, "shuffle");
    st->pool_cap = (size_t)ef__opt_int(o, "pool");
    const ef__policy_def *policy_def;
    const char *policy = ef__opt_string(o, "policy");
    if (ef__policy_parse(policy, &policy_def) != 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'echo': option 'policy' is '%s', expected "
                           "%s",
                           policy, ef__policy_names());
    if (!policy_def && ef__opt_given(o, "mix"))
        return ef__err_set(err, EF_ESPEC,
                           "stage 'echo': option 'mix' tempers a policy "
                           "toward uniform picks; with policy=uniform every "
                           "pick is uniform (drop it, or set a policy)");
    if (st->mode == EF__ECHO_FIXED && !policy_def &&
        (ef__opt_given(o, "max") || ef__opt_given(o, "pool")))
        return ef__err_set(err, EF_ESPEC,
                           "stage 'echo': options 'max' and 'pool' apply to "
                           "factor=auto only; with factor=%g every item is "
                           "emitted that many times (drop them, use "
                           "factor=auto, or set a policy)",
                           st->factor);
    /* echoes due, spread by priority, need room above the factor */
    if (st->mode == EF__ECHO_FIXED && policy_def && !ef__opt_given(o, "max"))
        st->max = (int)fmax(st->max, 2 * ceil(st->factor));
    if (st->mode == EF__ECHO_AUTO || policy_def) {
        if (policy_def)
            st->policy = ef__policy_new(policy_def, st->pool_cap);
        if (!policy_def || st->policy)
            st->pool = ef__echo_pool_new(st->pool_cap, st->max, st->policy,
                                         ef__opt_float(o, "mix"), st->headers,
                                         &s->ctx->budget);
        if (!st->pool)
            return ef__err_set(err, EF_ENOMEM,
                               "echo: out of memory for a pool of %zu",
                               st->pool_cap);
    }
    if (st->shuffle && ef__shufbuf_init(&st->buf, st->shuffle, &s->ctx->budget,
                                        "echo") != EF_OK)
        return ef__err_set(err, EF_ENOMEM,
                           "echo: out of memory for a shuffle buffer of %zu",
                           st->shuffle);
    return EF_OK;
}

static int echo_open(ef__stage *s, ef__err *err)
{
    ef__echo_state *st = s->state;
    /* keyed at open: the seed may be set after the stage was added */
    if (!st->restored)
        ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, -1, 0, 0);
    /* t_up is measured where the upstream's work is timed: by the thread
     * of an asynchronous upstream, or by our own pulls (ours or our
     * pump's) */
    int async_up = s->up->def->poll != NULL && s->up->up != NULL;
    st->up_ns = async_up ? &s->up->wait_up_ns : &s->wait_up_ns;
    st->up_items = async_up ? &s->up->items_in : &s->items_in;
    ef__rates_init(&st->rates, st->up_ns, st->up_items, s->pulled_ns,
                   s->consumer_wait, &s->items_out);
    if (st->shuffle) {
        char label[96];
        snprintf(label, sizeof label, "stage %d echo:shuffle=%zu", s->index,
                 st->shuffle);
        ef__shufbuf_watch(&st->buf, s, label,
                          "use a smaller shuffle=, or a faster upstream");
    }
    if (st->mode == EF__ECHO_AUTO && !s->up->def->poll)
        return ef__echo_start_pump(s, st, err);
    return EF_OK;
}

/* ---- fixed factor --------------------------------------------------- */

static int take_fixed(ef__stage *s, ef__echo_state *st, ef_sample **out,
                      ef__err *err);

/* How many times to emit `smp` in all (>= 1). */
static int copies_for(const ef__stage *s, const ef__echo_state *st,
                      const ef_sample *smp)
{
    double whole = floor(st->factor);
    int n = (int)whole;
    double frac = st->factor - whole;
    if (frac > 0) {
        ef__rng r;
        ef__stage_rng(s, &r, ef_sample_identity(smp));
        n += ef__rng_uniform(&r) < frac;
    }
    return n;
}

/* Numbers `copy` as echo number k > 0 of its item. A batch's `fresh`
 * counts its examples that were fresh when it was built; its echoes bring
 * none, so that the sum of `fresh` over a pass counts the fresh examples
 * once whatever the echo placement (docs/python.md). */
void ef__echo_mark_copy(ef_sample *copy, int k)
{
    assert(k > 0);
    copy->id.echo_copy = k;
    copy->id.fresh = 0;
}

/* The copies in order: the fresh item, then its echoes. */
static int fixed_next(void *arg, ef_sample **out, ef__err *err)
{
    ef__stage *s = arg;
    ef__echo_state *st = s->state;
    if (st->copies_left == 0) {
        ef_sample *fresh;
        int rc = take_fixed(s, st, &fresh, err);
        if (rc != EF_OK)
            return rc;
        int n = copies_for(s, st, fresh);
        if (n > 1) {
            /* keep a header of our own for the echoes; the fresh one goes
             * downstream now */
            st->held = ef__sample_pool_copy(st->headers, fresh);
            if (!st->held) {
                ef_sample_free(fresh);
                return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
            }
            /* the references of the n - 1 echoes (the last takes the held
             * header), in one atomic add per buffer */
            ef__sample_refs_add(st->held, (unsigned)(n - 1));
            st->copies_left = n - 1;
            st->next_copy = 1;
        }
        ef__stat_add(&st->fresh, 1);
        *out = fresh;
        return EF_OK;
    }
    ef_sample *copy;
    if (--st->copies_left == 0) {
        copy = st->held; /* the last copy takes the held header itself */
        st->held = NULL;
    } else {
        copy = ef__sample_pool_copy(st->headers, st->held);
        if (!copy) {
            st->copies_left++; /* still owed, its reference still held */
            return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
        }
    }
    ef__echo_mark_copy(copy, st->next_copy++);
    ef__stat_add(&st->echoed, 1);
    *out = copy;
    return EF_OK;
}

/* ---- automatic ------------------------------------------------------ */

static int take_fresh(ef__stage *s, ef__echo_state *st, int block,
                      ef_sample **out, ef__err *err)
{
    if (st->pump)
        return ef__echo_pump_take(s, st, block, out, err);
    return block ? ef__stage_pull(s, out, err) : ef__stage_poll(s, out, err);
}

/* A fresh item for a fixed factor. Without anything threaded before the
 * stage, the downstream would wait out each fresh item's whole upstream
 * work, echoes or not; so once the upstream proved slow (READ_AHEAD_NS)
 * the stage reads it ahead, as factor=auto always does. The order of
 * items is the same either way: the pump reads them in order. */
static int take_fixed(ef__stage *s, ef__echo_state *st, ef_sample **out,
                      ef__err *err)
{
    if (!st->pump_considered && !s->up->def->poll) {
        uint64_t n = ef__stat_get(&s->items_in);
        if (n >= READ_AHEAD_AFTER) {
            st->pump_considered = 1;
            int rc = ef__stat_get(&s->wait_up_ns) >= READ_AHEAD_NS * n
                         ? ef__echo_start_pump(s, st, err)
                         : EF_OK;
            if (rc != EF_OK)
                return rc;
        }
    }
    return take_fresh(s, st, 1, out, err);
}

/* A new header for pooled item smp's latest use, its uses-th. */
static int emit_copy(ef__echo_state *st, const ef_sample *smp, int uses,
                     ef_sample **out, ef__err *err)
{
    ef_sample *copy = ef__sample_pool_clone(st->headers, smp);
    if (!copy)
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    ef__echo_mark_copy(copy, uses - 1);
    ef__stat_add(&st->echoed, 1);
    *out = copy;
    return EF_OK;
}

/* Pools the fresh item and hands it on. */
static int emit_fresh(ef__echo_state *st, ef_sample *fresh, ef_sample **out,
                      ef__err *err)
{
    int rc;
    if (st->max > 1 &&
        (rc = ef__echo_pool_add(st->pool, fresh, err)) != EF_OK) {
        ef_sample_free(fresh);
        return rc;
    }
    ef__stat_add(&st->fresh, 1);
    *out = fresh;
    return EF_OK;
}

/* The copy spreading buffer is filling: in a pass's first call it asks
 * for `shuffle` items at once, and later for one per item emitted. The
 * downstream waits for the whole fill whatever the stage does, so
 * echoing then would only fill the buffer with copies (up to max - 1 per
 * fresh item) ahead of a downstream that is not asking yet. */
static int spreader_filling(const ef__echo_state *st)
{
    return st->shuffle && st->passing == 0;
}

static int auto_next(void *arg, ef_sample **out, ef__err *err)
{
    ef__stage *s = arg;
    ef__echo_state *st = s->state;
    ef_sample *fresh;
    int rc = take_fresh(s, st, spreader_filling(st), &fresh, err);
    if (rc == EF_AGAIN) {
        const ef_sample *smp;
        int uses;
        rc = ef__echo_pool_pick(st->pool, s, &smp, &uses);
        if (rc == EF_ENOMEM)
            return ef__err_set(err, rc, "echo: out of memory");
        if (rc == EF_OK)
            return emit_copy(st, smp, uses, out, err);
        rc = take_fresh(s, st, 1, &fresh, err); /* nothing left: wait */
    }
    if (rc != EF_OK)
        return rc;
    return emit_fresh(st, fresh, out, err);
}

/* ---- fixed factor with a policy ------------------------------------- */

/* Each fresh item adds factor - 1 echoes due (`owed`); while one is due,
 * it is drawn from the pool before anything fresh is pulled. */
static int echoes_due_next(void *arg, ef_sample **out, ef__err *err)
{
    ef__stage *s = arg;
    ef__echo_state *st = s->state;
    if (st->owed >= 1) {
        const ef_sample *smp;
        int uses;
        int rc = ef__echo_pool_pick(st->pool, s, &smp, &uses);
        if (rc == EF_ENOMEM)
            return ef__err_set(err, rc, "echo: out of memory");
        if (rc == EF_OK) {
            st->owed -= 1;
            return emit_copy(st, smp, uses, out, err);
        }
        /* every pooled item is used up: the echoes due lapse, which the
         * effective factor in the statistics shows */
        st->owed = 0;
    }
    /* read directly, without take_fixed's read-ahead: the trainer's
     * kill-and-resume test of policy=rank (resume_test.sh) ended with
     * other samples about one run in eight with it, a cause not found yet */
    ef_sample *fresh;
    int rc = ef__stage_pull(s, &fresh, err);
    if (rc == EF_OK && (rc = emit_fresh(st, fresh, out, err)) == EF_OK)
        st->owed += st->factor - 1;
    return rc;
}

/* ---- the stage ------------------------------------------------------ */

/* A fixed factor above the measured R makes echo the bottleneck: the
 * upstream idles while each item is repeated more than the trainer needs.
 * Warned once per stage, when a reading has just filled R's window (the
 * CLI's report notes the same at the end of a run). */
static void watch_factor(ef__stage *s, ef__echo_state *st)
{
    ef__rates *r = &st->rates;
    if (st->factor_warned || st->mode != EF__ECHO_FIXED || st->factor <= 1 ||
        r->countdown != r->every || r->nsnaps < EF__RATE_SNAPSHOTS)
        return;
    ef__rate_estimate e;
    ef__rates_estimate(r, &e);
    if (e.r <= 0 || e.r / st->factor >= 0.9)
        return;
    st->factor_warned = 1;
    ef__warn(s->ctx,
             "stage %d echo:factor=%g is the bottleneck: the factor exceeds "
             "the measured R = %.2f, so the upstream idles %.0f%% of the "
             "time and items are repeated more than the trainer needs: use "
             "a factor of about %.1f, or factor=auto",
             s->index, st->factor, e.r, 100 * (1 - e.r / st->factor),
             e.r < 1 ? 1.0 : e.r);
}

static int echo_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    ef__echo_state *st = s->state;
    ef__producer produce = st->mode == EF__ECHO_AUTO ? auto_next
                           : st->policy              ? echoes_due_next
                                                     : fixed_next;
    /* R's window starts after a pass's first item: the start-up before it
     * (the upstream's own shuffle buffer filling inside its first next,
     * then ours) costs its time once, and would read as a slow upstream
     * for a whole window. Started at the call after, once the downstream
     * has counted the first call's time. */
    if (st->passing == 1)
        ef__rates_restart(&st->rates);
    int rc = st->shuffle
                 ? ef__shufbuf_next(&st->buf, produce, s, &st->rng, out, err)
                 : produce(s, out, err);
    if (st->passing < 2 && (st->passing || rc == EF_OK))
        st->passing++;
    ef__rates_tick(&st->rates, rc != EF_OK);
    watch_factor(s, st);
    return rc;
}

/* Drops the held item and the copies still due of it. */
static void drop_held(ef__echo_state *st)
{
    if (st->held && st->copies_left > 1) /* references owed to copies */
        ef__sample_refs_drop(st->held, (unsigned)(st->copies_left - 1));
    ef_sample_free(st->held);
    st->held = NULL;
    st->copies_left = 0;
}

static int echo_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    ef__echo_state *st = s->state;
    drop_held(st); /* a pass that ended mid-copies: they belong to it */
    if (st->shuffle)
        ef__shufbuf_reset(&st->buf);
    ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, -1, epoch, 0);
    if (st->pool)
        ef__echo_pool_clear(st->pool);
    st->owed = 0;
    st->ran_ahead = 0;
    st->passing = 0;
    if (st->pump)
        return ef__feed_restart(st->pump, epoch, err);
    return ef__stage_reset_upstream(s, epoch, err);
}

static void echo_cancel(ef__stage *s)
{
    ef__echo_state *st = s->state;
    ef__feed *f = atomic_load(&st->pump);
    if (f)
        ef__feed_cancel(f);
}

static void echo_destroy(ef__stage *s)
{
    ef__echo_state *st = s->state;
    if (!st)
        return;
    if (st->pump) {
        ef__feed_destroy(st->pump);
        ef__free(st->pump);
    }
    if (st->up_ns)
        ef__rates_destroy(&st->rates);
    drop_held(st);
    ef__echo_pool_free(st->pool); /* before the policy it borrows */
    ef__policy_free(st->policy);
    if (st->buf.items)
        ef__shufbuf_destroy(&st->buf);
    /* last: the samples above went back to it; copies still out keep it */
    ef__sample_pool_release(st->headers);
    ef__free(st);
}

static void echo_stats(const ef__stage *s, ef_stage_stats *out)
{
    ef__echo_state *st = s->state;
    double fresh = (double)ef__stat_get(&st->fresh);
    double echoed = (double)ef__stat_get(&st->echoed);
    double factor = fresh > 0 ? (fresh + echoed) / fresh : 0;
    ef__stats_extra(out, "auto", st->mode == EF__ECHO_AUTO);
    ef__stats_extra(out, st->mode == EF__ECHO_AUTO ? "max" : "factor",
                    st->mode == EF__ECHO_AUTO ? st->max : st->factor);
    ef__stats_extra(out, "fresh", fresh);
    ef__stats_extra(out, "echoed", echoed);
    ef__stats_extra(out, "effective_factor", factor);
    /* whether the stage reads its upstream ahead on a thread of its own */
    ef__stats_extra(out, "reads_ahead", st->pump != NULL);
    ef__stats_extra(out, "fresh_fraction",
                    fresh + echoed > 0 ? fresh / (fresh + echoed) : 0);
    if (st->policy) {
        ef__stats_extra(out, "feedback_matched",
                        (double)ef__stat_get(&st->fed));
        ef__stats_extra(out, "feedback_stale",
                        (double)ef__stat_get(&st->stale));
    }
    if (!st->up_ns)
        return; /* not opened yet */
    ef__rate_estimate e;
    ef__rates_estimate(&st->rates, &e);
    ef__stats_extra(out, "r_estimate", e.r);
    ef__stats_extra(out, "upstream_rate", e.upstream_rate);
    ef__stats_extra(out, "downstream_rate", e.downstream_rate);
    /* fresh items the downstream asks for, against what the upstream could
     * give: below 1, the upstream idles and the echo stage is the
     * bottleneck (a fixed factor above R) */
    ef__stats_extra(out, "upstream_busy",
                    e.r > 0 && factor > 0 ? fmin(1.0, e.r / factor) : 0);
    ef__stats_extra(out, "downstream_wait_s",
                    ef__ns_to_s(ef__stat_get(s->pulled_ns)));
}

static void echo_feedback(ef__stage *s, const ef_sample_id *ids,
                          const double *values, size_t n)
{
    ef__echo_state *st = s->state;
    if (!st->policy)
        return;
    size_t matched = ef__policy_feedback(st->policy, ids, values, n);
    ef__stat_add(&st->fed, matched);
    ef__stat_add(&st->stale, n - matched);
}

static const char *echo_listens(const ef__stage *s)
{
    const ef__echo_state *st = s->state;
    return st->policy ? ef__opt_string(&s->opts, "policy") : NULL;
}

/* A whole factor F: F per item, however shuffled. Anything else
 * decides the copies item by item as it runs. */
static int echo_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    const ef__echo_state *st = s->state;
    if (up == EF__LENGTH_ENDLESS) {
        *n = up;
        return EF_OK;
    }
    if (st->mode == EF__ECHO_AUTO)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "echo: factor=auto decides the number of copies "
                           "at run time");
    if (st->policy)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "echo: policy=%s draws the echoes from a pool as "
                           "it runs, and those due lapse when every pooled "
                           "item is used up",
                           ef__opt_string(&s->opts, "policy"));
    if (st->factor != floor(st->factor))
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "echo: factor=%g rounds each item's copies at "
                           "random (%g per item on average)",
                           st->factor, st->factor);
    int64_t f = (int64_t)st->factor;
    if (up > INT64_MAX / f)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "echo: %lld items echoed %lld times are more "
                           "than 2^63 - 1",
                           (long long)up, (long long)f);
    *n = up * f;
    return EF_OK;
}

static const ef__option_def echo_options[] = {
    EF__OPT("factor", EF_OPT_FACTOR, "2",
            "times each item is emitted (>= 1; fractional: stochastic "
            "rounding), or auto: echo only when the downstream would wait",
            1, 1e6),
    EF__OPT("shuffle", EF_OPT_INT, "0",
            "buffer that spreads copies apart (0: copies consecutive)", 0,
            1 << 26),
    EF__OPT("max", EF_OPT_INT, "8",
            "auto or a policy: most times one item is emitted in all (a fixed "
            "factor with a policy: at least twice the factor)",
            1, 65536),
    EF__OPT("pool", EF_OPT_INT, "64",
            "auto or a policy: recent fresh items kept for echoing (auto: and "
            "read ahead)",
            1, 1 << 20),
    EF__OPT(
        "policy", EF_OPT_STRING, "uniform",
        "which pooled items to echo: " EF__POLICY_NAMES " (uniform: among the "
        "least echoed; the others weigh values fed back with "
        "ef_pipeline_feedback, docs/echoing.md)",
        0, 0),
    EF__OPT(
        "mix", EF_OPT_FLOAT, "0",
        "with a policy: the share of echoes picked as uniform does (among the "
        "least echoed) instead",
        0, 1),
};

const ef__stage_def ef__stage_echo = {
    .info = {"echo",
             "data echoing: re-emit items, fixed factor or auto (zero "
             "copy)",
             EF__OPTIONS(echo_options)},
    .create = echo_create,
    .open = echo_open,
    .next = echo_next,
    .reset = echo_reset,
    .cancel = echo_cancel,
    .destroy = echo_destroy,
    .stats = echo_stats,
    .pause = ef__echo_pause,
    .resume = ef__echo_resume,
    .save = ef__echo_save,
    .restore = ef__echo_restore,
    .fetch = ef__echo_fetch,
    .feedback = echo_feedback,
    .listens = echo_listens,
    .length = echo_length,
};
