/* SPDX-License-Identifier: Apache-2.0 */
/* repeat: passes over the upstream `count` times (forever without a count).
 * Each pass resets the upstream with a new epoch number, so sources stamp
 * it into samples and shuffles draw a new order. */
#include "core/alloc.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

typedef struct {
    int64_t count; /* 0: forever */
    int64_t items_this_pass;
} repeat_state;

static int repeat_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    repeat_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->count = ef__opt_int(o, "count");
    return EF_OK;
}

static int repeat_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    repeat_state *st = s->state;
    for (;;) {
        int rc = ef__stage_pull(s, out, err);
        if (rc != EF_END) {
            st->items_this_pass += rc == EF_OK;
            return rc;
        }
        int64_t next_epoch = s->epoch + 1;
        /* an empty pass would make "forever" spin: end instead */
        if (st->items_this_pass == 0 || (st->count && next_epoch >= st->count))
            return EF_END;
        st->items_this_pass = 0;
        s->epoch = next_epoch;
        rc = ef__stage_reset_upstream(s, next_epoch, err);
        if (rc != EF_OK)
            return rc;
    }
}

static int repeat_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    /* a repeat inside a repeat: restart our own count of passes */
    (void)epoch;
    ((repeat_state *)s->state)->items_this_pass = 0;
    s->epoch = 0;
    return ef__stage_reset_upstream(s, 0, err);
}

static int repeat_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__put_i64(o, ((repeat_state *)s->state)->items_this_pass);
    return EF_OK;
}

static int repeat_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    repeat_state *st = s->state;
    int rc = ef__get_i64(in, "items this pass", &st->items_this_pass);
    if (rc == EF_OK && (st->items_this_pass < 0 ||
                        (st->count && s->epoch >= st->count)))
        return ef__state_bad(in, "pass %lld with %lld items, expected one "
                                 "of %lld passes",
                             (long long)s->epoch,
                             (long long)st->items_this_pass,
                             (long long)st->count);
    return rc;
}

/* count passes of the upstream's; without a count, none ends but an
 * empty one (see repeat_next). */
static int repeat_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    int64_t count = ((const repeat_state *)s->state)->count;
    if (up == 0 || up == EF__LENGTH_ENDLESS) {
        *n = up;
    } else if (!count) {
        *n = EF__LENGTH_ENDLESS;
        ef__err_set(err, EF_EUNSUPPORTED,
                    "repeat: never ends (no count: give one, or end the "
                    "pipeline with take)");
    } else if (up > INT64_MAX / count) {
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "repeat: %lld passes of %lld items are more than "
                           "2^63 - 1",
                           (long long)count, (long long)up);
    } else {
        *n = up * count;
    }
    return EF_OK;
}

static void repeat_destroy(ef__stage *s)
{
    ef__free(s->state);
}

static const ef__option_def repeat_options[] = {
    EF__OPT("count", EF_OPT_INT, "", "passes over the data (none: forever)", 1,
            9.2e18),
};

const ef__stage_def ef__stage_repeat = {
    .info = {"repeat", "pass over the upstream count times, or forever",
             EF__OPTIONS(repeat_options)},
    .create = repeat_create,
    .next = repeat_next,
    .reset = repeat_reset,
    .destroy = repeat_destroy,
    .save = repeat_save,
    .restore = repeat_restore,
    .length = repeat_length,
};
