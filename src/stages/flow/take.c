/* SPDX-License-Identifier: Apache-2.0 */
/* take: the first `count` items, then the end (the upstream is not pulled
 * further). */
#include "core/alloc.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

typedef struct {
    int64_t count, taken;
} take_state;

static int take_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    take_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->count = ef__opt_int(o, "count");
    return EF_OK;
}

static int take_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    take_state *st = s->state;
    if (st->taken >= st->count)
        return EF_END;
    int rc = ef__stage_pull(s, out, err);
    st->taken += rc == EF_OK;
    return rc;
}

static int take_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    ((take_state *)s->state)->taken = 0;
    return ef__stage_reset_upstream(s, epoch, err);
}

static int take_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__put_i64(o, ((take_state *)s->state)->taken);
    return EF_OK;
}

static int take_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    take_state *st = s->state;
    int rc = ef__get_i64(in, "items taken", &st->taken);
    if (rc == EF_OK && (st->taken < 0 || st->taken > st->count))
        return ef__state_bad(in, "%lld items taken, expected 0 to %lld",
                             (long long)st->taken, (long long)st->count);
    return rc;
}

/* The first count items: fewer when the upstream has fewer. */
static int take_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)err;
    int64_t count = ((const take_state *)s->state)->count;
    *n = up == EF__LENGTH_ENDLESS || up > count ? count : up;
    return EF_OK;
}

static void take_destroy(ef__stage *s)
{
    ef__free(s->state);
}

static const ef__option_def take_options[] = {
    EF__OPT("count", EF_OPT_INT, NULL, "items to pass", 0, 9.2e18),
};

const ef__stage_def ef__stage_take = {
    .info = {"take", "the first count items",
             EF__OPTIONS(take_options)},
    .create = take_create,
    .next = take_next,
    .reset = take_reset,
    .destroy = take_destroy,
    .save = take_save,
    .restore = take_restore,
    .length = take_length,
};
