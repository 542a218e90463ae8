/* echo: data echoing. Each item from upstream is emitted `factor` times
 * (fractional factors: floor(factor) times, plus once more with probability
 * frac(factor), drawn per item with the keyed RNG). Copies share the payload
 * buffers: an echo is a new sample header, never a copy of the data.
 * Before `batch` this is example echoing, after it batch echoing.
 * shuffle=N spreads copies apart through a shuffle buffer of N items. */
#include <math.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stage.h"
#include "stages/shuffle_buffer.h"

typedef struct {
    double factor;
    size_t shuffle;
    ef_sample *held; /* the fresh item whose copies are still due */
    int copies_left; /* copies of `held` still to emit */
    int next_copy;   /* echo_copy number of the next copy */
    ef__shufbuf buf;
    ef__rng rng; /* shuffle draws, keyed per epoch */
    _Atomic uint64_t echoed; /* copies emitted, fresh items not counted */
} echo_state;

static int echo_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    double factor = ef__opt_factor(o, "factor");
    if (factor == 0)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "stage 'echo': option 'factor' = auto is not "
                           "available yet; give a number >= 1");
    echo_state *st = ef__calloc(1, sizeof *st);
    if (!st)
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    st->factor = factor;
    st->shuffle = (size_t)ef__opt_int(o, "shuffle");
    if (st->shuffle && ef__shufbuf_init(&st->buf, st->shuffle) != EF_OK) {
        ef__free(st);
        return ef__err_set(err, EF_ENOMEM,
                           "echo: out of memory for a shuffle buffer of %zu",
                           st->shuffle);
    }
    s->state = st;
    ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, -1, 0, 0);
    return EF_OK;
}

/* How many times to emit `smp` in all (>= 1). */
static int copies_for(const ef__stage *s, const echo_state *st,
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

/* The copies in order: the fresh item, then its echoes. */
static int repeat_next(void *arg, ef_sample **out, ef__err *err)
{
    ef__stage *s = arg;
    echo_state *st = s->state;
    if (st->copies_left == 0) {
        ef_sample *fresh;
        int rc = ef__stage_pull(s, &fresh, err);
        if (rc != EF_OK)
            return rc;
        int n = copies_for(s, st, fresh);
        if (n > 1) {
            /* keep a header of our own for the echoes; the fresh one goes
             * downstream now */
            st->held = ef_sample_clone(fresh);
            if (!st->held) {
                ef_sample_free(fresh);
                return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
            }
            st->copies_left = n - 1;
            st->next_copy = 1;
        }
        *out = fresh;
        return EF_OK;
    }
    ef_sample *copy;
    if (--st->copies_left == 0) {
        copy = st->held; /* the last copy takes the held header itself */
        st->held = NULL;
    } else {
        copy = ef_sample_clone(st->held);
        if (!copy)
            return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    }
    copy->id.echo_copy = st->next_copy++;
    ef__stat_add(&st->echoed, 1);
    *out = copy;
    return EF_OK;
}

static int echo_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    echo_state *st = s->state;
    if (!st->shuffle)
        return repeat_next(s, out, err);
    return ef__shufbuf_next(&st->buf, repeat_next, s, &st->rng, out, err);
}

static int echo_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    echo_state *st = s->state;
    if (st->shuffle)
        ef__shufbuf_reset(&st->buf);
    ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, -1, epoch, 0);
    return ef__stage_reset_upstream(s, epoch, err);
}

static void echo_destroy(ef__stage *s)
{
    echo_state *st = s->state;
    ef_sample_free(st->held);
    if (st->shuffle)
        ef__shufbuf_destroy(&st->buf);
    ef__free(st);
}

static void echo_stats(const ef__stage *s, ef_stage_stats *out)
{
    const echo_state *st = s->state;
    double fresh = (double)out->items_in;
    double echoed = (double)ef__stat_get(&st->echoed);
    ef__stats_extra(out, "factor", st->factor);
    ef__stats_extra(out, "fresh", fresh);
    ef__stats_extra(out, "echoed", echoed);
    ef__stats_extra(out, "effective_factor",
                    fresh > 0 ? (fresh + echoed) / fresh : 0);
}

static const ef__option_def echo_options[] = {
    {"factor", EF_OPT_FACTOR, "2",
     "times each item is emitted (>= 1; fractional: stochastic rounding)", 1,
     1e6},
    {"shuffle", EF_OPT_INT, "0",
     "buffer that spreads copies apart (0: copies consecutive)", 0, 1 << 26},
};

const ef__stage_def ef__stage_echo = {
    .info = {"echo", "data echoing: re-emit each item (zero copy)", 2,
             echo_options},
    .create = echo_create,
    .next = echo_next,
    .reset = echo_reset,
    .destroy = echo_destroy,
    .stats = echo_stats,
};
