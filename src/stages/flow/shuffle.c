/* SPDX-License-Identifier: Apache-2.0 */
/* shuffle: a seeded shuffle buffer; a new order every epoch. */
#include <stdio.h>

#include "core/alloc.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"
#include "stages/flow/shuffle_buffer.h"

typedef struct {
    ef__shufbuf buf;
    ef__rng rng; /* keyed by (seed, stage, epoch): one stream per pass */
    int restored; /* the generator came from a state: open leaves it */
} shuffle_state;

static void start_epoch(ef__stage *s)
{
    shuffle_state *st = s->state;
    ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, 0, s->epoch, 0);
}

static int shuffle_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    shuffle_state *st = ef__calloc(1, sizeof *st);
    if (!st || ef__shufbuf_init(&st->buf, (size_t)ef__opt_int(o, "buffer"),
                                 &s->ctx->budget, "shuffle")) {
        ef__free(st);
        return ef__err_set(err, EF_ENOMEM,
                           "shuffle: out of memory for a buffer of %lld",
                           (long long)ef__opt_int(o, "buffer"));
    }
    s->state = st;
    return EF_OK;
}

/* Keyed at open: the seed may be set after the stage was added. */
static int shuffle_open(ef__stage *s, ef__err *err)
{
    (void)err;
    shuffle_state *st = s->state;
    if (!st->restored)
        start_epoch(s);
    char label[96];
    snprintf(label, sizeof label, "stage %d shuffle:buffer=%zu", s->index,
             st->buf.cap);
    ef__shufbuf_watch(&st->buf, s, label,
                      "use a smaller buffer, or place echo before it");
    return EF_OK;
}

static int pull(void *arg, ef_sample **out, ef__err *err)
{
    return ef__stage_pull(arg, out, err);
}

static int shuffle_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    shuffle_state *st = s->state;
    return ef__shufbuf_next(&st->buf, pull, s, &st->rng, out, err);
}

static int shuffle_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    shuffle_state *st = s->state;
    (void)epoch;
    ef__shufbuf_reset(&st->buf);
    start_epoch(s);
    return ef__stage_reset_upstream(s, epoch, err);
}

static int shuffle_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    shuffle_state *st = s->state;
    ef__put_u64(o, st->rng.counter);
    ef__shufbuf_save(&st->buf, o);
    return EF_OK;
}

static int shuffle_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    shuffle_state *st = s->state;
    start_epoch(s);
    st->restored = 1;
    int rc = ef__get_u64(in, "the generator's counter", &st->rng.counter);
    return rc == EF_OK ? ef__shufbuf_restore(&st->buf, in, s->up, err)
                       : rc;
}

static void shuffle_destroy(ef__stage *s)
{
    shuffle_state *st = s->state;
    ef__shufbuf_destroy(&st->buf);
    ef__free(st);
}

static const ef__option_def shuffle_options[] = {
    EF__OPT("buffer", EF_OPT_INT, NULL, "items held in the shuffle buffer", 1,
            1 << 26),
};

const ef__stage_def ef__stage_shuffle = {
    .info = {"shuffle", "seeded shuffle through a buffer; new order each epoch",
             EF__OPTIONS(shuffle_options)},
    .create = shuffle_create,
    .open = shuffle_open,
    .next = shuffle_next,
    .reset = shuffle_reset,
    .destroy = shuffle_destroy,
    .save = shuffle_save,
    .restore = shuffle_restore,
};
