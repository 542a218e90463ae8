/* SPDX-License-Identifier: Apache-2.0 */
/* range: a synthetic source of N samples, for tests and benchmarks.
 * Field `index` (i64 scalar) and, with bytes=B, field `data` (u8 [B]) whose
 * byte j is (index + j) mod 256. With shard=I/N, only the indices i with
 * i % N == I. */
#include "core/alloc.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

typedef struct {
    int64_t n, bytes;
    ef__shard shard;
    int64_t next; /* next index to emit in this pass */
} range_state;

static int range_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    range_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->n = ef__opt_int(o, "n");
    st->bytes = ef__opt_int(o, "bytes");
    int rc = ef__shard_parse(s, o, &st->shard, err);
    st->next = st->shard.i;
    return rc;
}

/* Sample `index` of pass `epoch`. */
static int make(const range_state *st, int64_t index, int64_t epoch,
                ef_sample **out, ef__err *err)
{
    ef_sample *smp =
        ef_sample_new((ef_sample_id){.index = index, .epoch = epoch});
    int64_t *value = NULL;
    unsigned char *data = NULL;
    int rc =
        smp ? ef_sample_add_new(smp, "index", EF_I64, 0, NULL, (void **)&value)
            : EF_ENOMEM;
    if (rc == EF_OK && st->bytes > 0) {
        int64_t shape[1] = {st->bytes};
        rc = ef_sample_add_new(smp, "data", EF_U8, 1, shape, (void **)&data);
    }
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "range: out of memory at item %lld",
                           (long long)index);
    }
    *value = index;
    for (int64_t j = 0; j < st->bytes; j++)
        data[j] = (unsigned char)((index + j) & 0xff);
    *out = smp;
    return EF_OK;
}

static int range_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    range_state *st = s->state;
    if (st->next >= st->n)
        return EF_END;
    int rc = make(st, st->next, s->epoch, out, err);
    if (rc == EF_OK)
        st->next += st->shard.n;
    return rc;
}

static int range_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    range_state *st = s->state;
    int rc = ef__index_check(s, &st->shard, d->id.index, st->n, err);
    return rc == EF_OK ? make(st, d->id.index, d->id.epoch, out, err) : rc;
}

static int range_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__put_i64(o, ((range_state *)s->state)->next);
    return EF_OK;
}

static int range_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    range_state *st = s->state;
    return ef__cursor_restore(in, &st->shard, st->n, &st->next);
}

static int range_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    range_state *st = s->state;
    st->next = st->shard.i;
    return EF_OK;
}

static int range_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    (void)err;
    const range_state *st = s->state;
    *n = ef__shard_count(&st->shard, st->n);
    return EF_OK;
}

static void range_destroy(ef__stage *s)
{
    ef__free(s->state);
}

static const ef__option_def range_options[] = {
    {"n", EF_OPT_INT, NULL, "number of samples", 0, 9.2e18},
    {"bytes", EF_OPT_INT, "0", "size of the u8 'data' field (0: none)", 0,
     1 << 30},
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_range = {
    .info = {"range", "synthetic source: samples 0..n-1 (fields index, data)",
             EF__OPTIONS(range_options)},
    .is_source = 1,
    .create = range_create,
    .next = range_next,
    .reset = range_reset,
    .destroy = range_destroy,
    .save = range_save,
    .restore = range_restore,
    .fetch = range_fetch,
    .length = range_length,
};
