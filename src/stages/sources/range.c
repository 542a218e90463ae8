/* SPDX-License-Identifier: Apache-2.0 */
/* range: a synthetic source of N samples, for tests and benchmarks.
 * Field `index` (i64 scalar) and, with bytes=B, field `data` (u8 [B]) whose
 * byte j is (index + j) mod 256. With shard=I/N, only the indices i with
 * i % N == I. An indexed source (indexed.h). */
#include "core/alloc.h"
#include "pipeline/stage.h"
#include "stages/sources/indexed.h"

typedef struct {
    ef__indexed ix; /* first: the kit's */
    int64_t n, bytes;
} range_state;

/* Nothing to read: the count is the option's. */
static int load(ef__stage *s, int64_t *records, ef__err *err)
{
    (void)err;
    *records = ((const range_state *)s->state)->n;
    return EF_OK;
}

/* Sample `index` of pass `epoch`. */
static int make(const ef__stage *s, int64_t index, int64_t epoch,
                ef_sample **out, ef__err *err)
{
    const range_state *st = s->state;
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

static const ef__indexed_ops range_ops = {.load = load, .make = make};

static int range_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    range_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->n = ef__opt_int(o, "n");
    st->bytes = ef__opt_int(o, "bytes");
    return ef__indexed_init(s, o, &range_ops, err);
}

static void range_destroy(ef__stage *s)
{
    ef__free(s->state);
}

static const ef__option_def range_options[] = {
    EF__OPT("n", EF_OPT_INT, NULL, "number of samples", 0, 9.2e18),
    EF__OPT("bytes", EF_OPT_INT, "0", "size of the u8 'data' field (0: none)",
            0, 1 << 30),
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_range = {
    .info = {"range", "synthetic source: samples 0..n-1 (fields index, data)",
             EF__OPTIONS(range_options)},
    EF__INDEXED_STAGE_OPS,
    .create = range_create,
    .destroy = range_destroy,
};
