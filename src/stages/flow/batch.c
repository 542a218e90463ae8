/* SPDX-License-Identifier: Apache-2.0 */
/* batch: stacks `size` samples into one whose fields have a leading batch
 * dimension. Every sample of a batch must have the same fields and
 * dtypes; a mismatch is an error naming the sample and the field. A field
 * whose examples differ only in their first dimension (a __key__, a
 * caption, an encoded image, a variable-length list) is ragged with
 * ragged=list, the default, and so is one that a source marked
 * variable-length (ef_sample_set_variable: its texts and encoded files),
 * whatever its lengths in a batch: the examples lie one after another, [total,
 * ...], with their lengths beside (ef_sample_ragged_lengths); with
 * ragged=error it is refused as any other mismatch.
 *
 * A field whose parts already lie one after another in one buffer that
 * nothing else holds (an image stage right before writes them into the
 * batch's slab: pipeline/slabs.h) becomes a view of that buffer; any
 * other field is copied. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

typedef struct {
    const ef__budget *budget; /* the pipeline's */
    int64_t size;
    int drop_remainder;
    ef_sample **parts; /* the samples of the batch being built */
    int64_t batch_no;  /* batches emitted this epoch: the batch's index */
    int ragged_ok;     /* ragged=list */
    /* fields stacked as a view of their parts' buffer, or by copying
     * (stats: what zero copy saved) */
    _Atomic uint64_t viewed, copied;
} batch_state;

static int batch_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    batch_state *st = ef__calloc(1, sizeof *st);
    int64_t size = ef__opt_int(o, "size");
    if (st)
        st->parts = ef__calloc((size_t)size, sizeof *st->parts);
    if (!st || !st->parts) {
        ef__free(st);
        return ef__err_set(err, EF_ENOMEM, "batch: out of memory for size %lld",
                           (long long)size);
    }
    st->budget = &s->ctx->budget;
    st->size = size;
    st->drop_remainder = ef__opt_bool(o, "drop_remainder");
    s->state = st; /* freed by batch_destroy on failure */
    return ef__opt_choice(o, "batch", "ragged", "list", "error",
                          &st->ragged_ok, err);
}

/* Whether x and y differ in their first dimension only. */
static int ragged_pair(const ef__field *x, const ef__field *y)
{
    return x->ndim >= 1 && y->ndim == x->ndim &&
           memcmp(y->shape + 1, x->shape + 1,
                  sizeof(int64_t) * (size_t)(x->ndim - 1)) == 0;
}

/* Checks `other` against the first part, marking in ragged[f] the
 * fields that differ in their first dimension where that is allowed. */
static int check_like(const batch_state *st, const ef_sample *first,
                      const ef_sample *other, int64_t pos, char *ragged,
                      ef__err *err)
{
    char a[96], b[96];
    if (other->nfields != first->nfields)
        return ef__err_set(err, EF_ESHAPE,
                           "batch: sample %lld of the batch (index %lld) has "
                           "%d fields, the first had %d",
                           (long long)pos, (long long)other->id.index,
                           other->nfields, first->nfields);
    for (int f = 0; f < first->nfields; f++) {
        const ef__field *x = &first->fields[f];
        int j = ef__sample_find(other, x->name);
        const ef__field *y = j >= 0 ? &other->fields[j] : NULL;
        if (y && y->dtype == x->dtype && y->ndim == x->ndim &&
            memcmp(y->shape, x->shape, sizeof(int64_t) * (size_t)x->ndim) == 0)
            continue;
        if (y && y->dtype == x->dtype && st->ragged_ok && ragged_pair(x, y)) {
            ragged[f] = 1;
            continue;
        }
        if (!y)
            return ef__err_set(err, EF_ESHAPE,
                               "batch: sample %lld of the batch (index %lld) "
                               "has no field '%s'",
                               (long long)pos, (long long)other->id.index,
                               x->name);
        ef__shape_format(a, sizeof a, x->ndim, x->shape);
        ef__shape_format(b, sizeof b, y->ndim, y->shape);
        return ef__err_set(err, EF_ESHAPE,
                           "batch: field '%s' of sample %lld of the batch "
                           "(index %lld) is %s %s, expected %s %s as in the "
                           "first%s",
                           x->name, (long long)pos, (long long)other->id.index,
                           ef_dtype_name(y->dtype), b, ef_dtype_name(x->dtype),
                           a,
                           !st->ragged_ok && y->dtype == x->dtype &&
                                   ragged_pair(x, y)
                               ? " (ragged=list would batch it as a list)"
                               : "");
    }
    return EF_OK;
}

/* Whether field x (of parts[0]) and the same field of parts[1..n) are
 * consecutive views of one buffer that only they hold: then the batch
 * can be a view of it. Held by anyone else (a source's whole file, an
 * echo, a slab's table while slots remain), a view would share bytes the
 * batch's consumer may write into, as PyTorch users may through DLPack,
 * so those are copied. The parts' dtypes and shapes are checked alike. */
static int consecutive(ef_sample *const *parts, int64_t n, const ef__field *x)
{
    for (int64_t i = 1; i < n; i++) {
        const ef__field *y =
            &parts[i]->fields[ef__sample_find(parts[i], x->name)];
        if (y->buf != x->buf || y->offset != x->offset + (size_t)i * x->nbytes)
            return 0;
    }
    /* the parts hold n references; anyone else would be one more, and
     * could take no new one without holding one already */
    return ef_buffer_refcount(x->buf) == (unsigned)n;
}

/* Adds field x of the batch of n parts: a view, or a copy. */
static int stack_field(batch_state *st, ef_sample *const *parts, ef_sample *b,
                       int64_t n, const ef__field *x, ef__err *err)
{
    int64_t shape[EF_MAX_DIMS];
    if (x->ndim == EF_MAX_DIMS)
        return ef__err_set(err, EF_ESHAPE,
                           "batch: field '%s' already has %d dimensions, "
                           "the most a tensor can have",
                           x->name, EF_MAX_DIMS);
    shape[0] = n;
    memcpy(shape + 1, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    if (consecutive(parts, n, x)) {
        ef__stat_add(&st->viewed, 1);
        int rc = ef_sample_add(b, x->name, x->dtype, x->ndim + 1, shape, x->buf,
                               x->offset);
        return rc == EF_OK ? EF_OK
                           : ef__err_set(err, rc, "batch: field '%s': %s",
                                         x->name, ef_strerror(rc));
    }
    ef__stat_add(&st->copied, 1);
    unsigned char *dst;
    int rc = ef_sample_add_new(b, x->name, x->dtype, x->ndim + 1, shape,
                               (void **)&dst);
    if (rc != EF_OK)
        return ef__err_set(err, rc, "batch: out of memory");
    for (int64_t i = 0; i < n; i++) {
        const ef__field *y =
            &parts[i]->fields[ef__sample_find(parts[i], x->name)];
        memcpy(dst + (size_t)i * x->nbytes,
               (const unsigned char *)ef_buffer_data(y->buf) + y->offset,
               x->nbytes);
    }
    return EF_OK;
}

/* Adds ragged field x of the batch: the parts' values one after another,
 * and their lengths. */
static int stack_ragged(batch_state *st, ef_sample *const *parts,
                        ef_sample *b, int64_t n, const ef__field *x,
                        ef__err *err)
{
    int64_t shape[EF_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[0] = 0;
    for (int64_t i = 0; i < n; i++)
        shape[0] += parts[i]->fields[ef__sample_find(parts[i], x->name)]
                        .shape[0];
    ef_buffer *lengths = ef_buffer_new((size_t)n * sizeof(int64_t));
    unsigned char *dst = NULL;
    int rc = lengths ? ef_sample_add_new(b, x->name, x->dtype, x->ndim, shape,
                                         (void **)&dst)
                     : EF_ENOMEM;
    if (rc != EF_OK) {
        ef_buffer_release(lengths);
        return ef__err_set(err, rc, "batch: out of memory");
    }
    ef__stat_add(&st->copied, 1);
    int64_t *len = ef_buffer_data(lengths);
    for (int64_t i = 0; i < n; i++) {
        const ef__field *y =
            &parts[i]->fields[ef__sample_find(parts[i], x->name)];
        len[i] = y->shape[0];
        memcpy(dst, (const unsigned char *)ef_buffer_data(y->buf) + y->offset,
               y->nbytes);
        dst += y->nbytes;
    }
    ef__sample_set_lengths(b, b->nfields - 1, lengths);
    ef_buffer_release(lengths);
    /* the examples' texts stay texts, one per example */
    b->fields[b->nfields - 1].variable = x->variable;
    return EF_OK;
}

/* The identities of the parts, for the batch's origin: a batch is read
 * again part by part. */
static ef_buffer *members_of(ef_sample *const *parts, int64_t n)
{
    ef_buffer *m = ef_buffer_new((size_t)n * sizeof(ef__ident));
    if (!m)
        return NULL;
    ef__ident *d = ef_buffer_data(m);
    for (int64_t i = 0; i < n; i++) {
        const ef_sample *p = parts[i];
        /* a batch of batches keeps only the outer level */
        d[i] = (ef__ident){p->id, p->origin.part, p->origin.offset,
                           p->origin.end, NULL};
    }
    return m;
}

/* Refuses a part with a field that is already ragged (a batch, or a
 * map's list of texts): its values lie one after another, so stacking
 * them would join them, and their lengths have no place in the batch. */
static int check_not_ragged(const ef_sample *part, int64_t pos, ef__err *err)
{
    for (int f = 0; f < part->nfields; f++) {
        const ef__field *x = &part->fields[f];
        if (!x->lengths)
            continue;
        return ef__err_set(
            err, EF_ESHAPE,
            "batch: field '%s' of sample %lld of the batch (index %lld) is "
            "already ragged (a list of %zu values), which batch cannot "
            "stack: batch once, or give each example one value (one text, "
            "or one padded array) instead of a list",
            x->name, (long long)pos, (long long)part->id.index,
            ef_buffer_size(x->lengths) / sizeof(int64_t));
    }
    return EF_OK;
}

/* Builds the batch of identity `id` from parts[0..n). */
static int stack(batch_state *st, ef_sample *const *parts, int64_t n,
                 ef_sample_id id, ef_sample **out, ef__err *err)
{
    const ef_sample *first = parts[0];
    char ragged[EF_MAX_FIELDS] = {0}; /* field f of the first is ragged */
    for (int f = 0; f < first->nfields; f++)
        ragged[f] = st->ragged_ok && first->fields[f].variable;
    for (int64_t i = 0; i < n; i++) {
        int rc = check_not_ragged(parts[i], i, err);
        if (rc != EF_OK)
            return rc;
    }
    for (int64_t i = 1; i < n; i++) {
        int rc = check_like(st, first, parts[i], i, ragged, err);
        if (rc != EF_OK)
            return rc;
    }
    /* the batch's size is known before a byte is copied: one larger than
     * the whole budget fails before it is built (budget.h) */
    uint64_t bytes = 0;
    for (int64_t i = 0; i < n; i++)
        for (int f = 0; f < parts[i]->nfields; f++)
            bytes += parts[i]->fields[f].nbytes;
    if (!ef__budget_fits(st->budget, bytes)) {
        char what[64];
        snprintf(what, sizeof what, "batch: sample %lld", (long long)id.index);
        return ef__budget_check(st->budget, bytes, what, err);
    }
    id.fresh = 0;
    for (int64_t i = 0; i < n; i++)
        id.fresh += parts[i]->id.echo_copy == 0;
    ef_sample *b = ef_sample_new(id);
    if (!b || !(b->origin.members = members_of(parts, n))) {
        ef_sample_free(b);
        return ef__err_set(err, EF_ENOMEM, "batch: out of memory");
    }
    for (int f = 0; f < first->nfields; f++) {
        int rc = ragged[f]
                     ? stack_ragged(st, parts, b, n, &first->fields[f], err)
                     : stack_field(st, parts, b, n, &first->fields[f], err);
        if (rc != EF_OK) {
            ef_sample_free(b);
            return rc;
        }
    }
    *out = b;
    return EF_OK;
}

static int batch_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    batch_state *st = s->state;
    int64_t n = 0;
    int rc = EF_OK;
    while (n < st->size) {
        rc = ef__stage_pull(s, &st->parts[n], err);
        if (rc != EF_OK)
            break;
        n++;
    }
    if (rc == EF_OK || (rc == EF_END && n > 0 && !st->drop_remainder)) {
        rc = stack(st, st->parts, n,
                   (ef_sample_id){.index = st->batch_no, .epoch = s->epoch},
                   out, err);
        st->batch_no += rc == EF_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        ef_sample_free(st->parts[i]);
        st->parts[i] = NULL;
    }
    return rc;
}

/* An image stage right before may write its outputs into the batch's
 * slots (pipeline/slabs.h). */
static void batch_link(ef__stage *s)
{
    if (s->up->def->feeds_batch)
        s->up->def->feeds_batch(s->up, ((batch_state *)s->state)->size);
}

static int batch_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    ((batch_state *)s->state)->batch_no = 0;
    return ef__stage_reset_upstream(s, epoch, err);
}

static int batch_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__put_i64(o, ((batch_state *)s->state)->batch_no);
    return EF_OK;
}

static int batch_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    batch_state *st = s->state;
    int rc = ef__get_i64(in, "the batch number", &st->batch_no);
    if (rc == EF_OK && st->batch_no < 0)
        return ef__state_bad(in, "batch number %lld, expected 0 or more",
                             (long long)st->batch_no);
    return rc;
}

/* A batch made again from its members, fetched one by one. */
static int batch_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    batch_state *st = s->state;
    size_t n;
    const ef__ident *m = ef__ident_members(d, &n);
    if (n == 0 || n > (size_t)st->size)
        return ef__err_set(err, EF_EFORMAT,
                           "batch: the state names batch %lld of %zu "
                           "samples, expected 1 to %lld",
                           (long long)d->id.index, n, (long long)st->size);
    ef_sample **parts = ef__calloc(n, sizeof *parts);
    if (!parts)
        return ef__err_set(err, EF_ENOMEM, "batch: out of memory");
    int rc = EF_OK;
    size_t got = 0;
    for (; got < n && rc == EF_OK; got++)
        rc = ef__stage_fetch(s->up, &m[got], &parts[got], err);
    for (size_t i = 0; i < got && rc == EF_OK; i++)
        if (!parts[i])
            rc = ef__err_set(err, EF_EFORMAT,
                             "batch: sample %lld of batch %lld could not be "
                             "read again",
                             (long long)m[i].id.index, (long long)d->id.index);
    if (rc == EF_OK)
        rc = stack(st, parts, (int64_t)n, d->id, out, err);
    for (size_t i = 0; i < got; i++)
        ef_sample_free(parts[i]);
    ef__free(parts);
    return rc;
}

static void batch_destroy(ef__stage *s)
{
    batch_state *st = s->state;
    ef__free(st->parts);
    ef__free(st);
}

static void batch_stats(const ef__stage *s, ef_stage_stats *out)
{
    const batch_state *st = s->state;
    ef__stats_extra(out, "fields_viewed", (double)ef__stat_get(&st->viewed));
    ef__stats_extra(out, "fields_copied", (double)ef__stat_get(&st->copied));
}

/* One batch per size items, the last one short unless dropped. */
static int batch_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)err;
    const batch_state *st = s->state;
    if (up == EF__LENGTH_ENDLESS)
        *n = up;
    else
        *n = up / st->size + (!st->drop_remainder && up % st->size != 0);
    return EF_OK;
}

static const ef__option_def batch_options[] = {
    EF__OPT("size", EF_OPT_INT, NULL, "samples per batch", 1, 1 << 24),
    EF__OPT("drop_remainder", EF_OPT_BOOL, "false",
            "drop a last batch smaller than size", 0, 0),
    EF__OPT("ragged", EF_OPT_STRING, "list",
            "fields whose examples differ in their first dimension: list (one "
            "after another, with their lengths) or error",
            0, 0),
};

const ef__stage_def ef__stage_batch = {
    .info = {"batch", "stack samples into a batch (leading dimension)",
             EF__OPTIONS(batch_options)},
    .create = batch_create,
    .link = batch_link,
    .next = batch_next,
    .reset = batch_reset,
    .destroy = batch_destroy,
    .stats = batch_stats,
    .save = batch_save,
    .restore = batch_restore,
    .fetch = batch_fetch,
    .length = batch_length,
};
