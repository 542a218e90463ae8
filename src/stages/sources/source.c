/* SPDX-License-Identifier: Apache-2.0 */
/* source: a C callback as the first stage (ef_pipeline_add_source). The
 * callback may report EF_AGAIN when polled, which makes this a source that
 * automatic echoing can poll without a thread in between. Its one option,
 * length=N, is the caller's word on the samples per pass (a Python
 * iterable's len()), for ef_pipeline_length only: the callback's EF_END
 * still ends the pass. */
#include "pipeline/stage.h"

static int callback_error(ef__stage *s, int rc, ef__err *err)
{
    if (rc > 0)
        return ef__err_set(err, EF_ECALLBACK,
                           "source: the callback returned %d, not a sample, "
                           "the end or an error",
                           rc);
    return ef__err_set(err, rc,
                       "source: the callback failed in epoch %lld "
                       "after %llu items: %s",
                       (long long)s->epoch,
                       (unsigned long long)ef__stat_get(&s->items_out),
                       ef_strerror(rc));
}

static int call(ef__stage *s, int block, ef_sample **out, ef__err *err)
{
    ef_source_fn fn = (ef_source_fn)s->user_fn;
    *out = NULL;
    int rc = fn(s->user_data, s->epoch, block, out);
    if (rc == EF_OK && !*out)
        return ef__err_set(err, EF_ECALLBACK,
                           "source: the callback returned success but no "
                           "sample");
    if (rc != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
    }
    if (rc == EF_OK || rc == EF_END || (rc == EF_AGAIN && !block))
        return rc;
    return callback_error(s, rc, err);
}

static int source_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    (void)o;
    (void)err;
    s->state = s; /* nothing to keep: the callback holds its own state,
                     and length= stays in s->opts */
    return EF_OK;
}

static int source_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return call(s, 1, out, err);
}

static int source_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return call(s, 0, out, err);
}

static int source_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)s;
    (void)epoch;
    (void)err;
    return EF_OK; /* the epoch, already in s->epoch, reaches the callback */
}

/* A callback has no cursor the pipeline could keep or set. */
static int source_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)s;
    (void)o;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "a C callback source (ef_pipeline_add_source) "
                       "cannot be repositioned: its position cannot be "
                       "saved");
}

static int source_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    if (!ef__opt_given(&s->opts, "length"))
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "source: the callback's number of samples is not "
                           "known (no length= option)");
    *n = ef__opt_int(&s->opts, "length");
    return EF_OK;
}

static const ef__option_def source_options[] = {
    EF__OPT("length", EF_OPT_INT, "",
            "samples the callback gives per pass, when known (none: unknown)",
            0, 9.2e18),
};

const ef__stage_def ef__stage_source = {
    .info = {"source", "a C callback (ef_pipeline_add_source)",
             EF__OPTIONS(source_options)},
    .is_source = 1,
    .create = source_create,
    .next = source_next,
    .poll = source_poll,
    .reset = source_reset,
    .save = source_save,
    .length = source_length,
};
