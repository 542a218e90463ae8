/* SPDX-License-Identifier: Apache-2.0 */
/* The kit of indexed sources (indexed.h): cursor, shard, range,
 * checkpoints, fetch and length, written once. */
#include "stages/sources/indexed.h"

#include "pipeline/state.h"

int ef__indexed_init(ef__stage *s, const ef__opts *o,
                     const ef__indexed_ops *ops, ef__err *err)
{
    ef__indexed *ix = s->state;
    ix->ops = ops;
    int rc = ef__shard_parse(s, o, &ix->shard, err);
    ix->next = ix->shard.i;
    return rc;
}

/* first= and count= against the input's `records`: the range read, or
 * an error naming the options and the record count. Without the
 * options, every record. */
static int set_range(const ef__stage *s, int64_t records, int64_t *first_out,
                     int64_t *count_out, ef__err *err)
{
    const ef__indexed *ix = s->state;
    const char *name = s->def->info.name;
    const char *input =
        ix->ops->ranged ? ef__opt_string(&s->opts, ix->ops->ranged) : "";
    int64_t first = ix->ops->ranged ? ef__opt_int(&s->opts, "first") : 0;
    int has_count = ix->ops->ranged && ef__opt_given(&s->opts, "count");
    int64_t count = has_count ? ef__opt_int(&s->opts, "count") : 0;
    if (first > records || (!has_count && first == records && first > 0))
        return ef__err_set(err, EF_ESPEC,
                           "%s: first=%lld is past the end of %s, which "
                           "holds %lld records",
                           name, (long long)first, input, (long long)records);
    if (has_count && count > records - first)
        return ef__err_set(err, EF_ESPEC,
                           "%s: first=%lld,count=%lld runs past the end of "
                           "%s, which holds %lld records",
                           name, (long long)first, (long long)count, input,
                           (long long)records);
    *first_out = first;
    *count_out = has_count ? count : records - first;
    return EF_OK;
}

/* At open, or at a fetch, restore or length that comes first. */
int ef__indexed_ready(ef__stage *s, ef__err *err)
{
    ef__indexed *ix = s->state;
    if (ix->ready)
        return EF_OK;
    if (!ix->loaded) {
        int rc = ix->ops->load(s, &ix->records, err);
        if (rc != EF_OK)
            return rc;
        ix->loaded = 1;
    }
    int rc = set_range(s, ix->records, &ix->first, &ix->count, err);
    ix->ready = rc == EF_OK;
    return rc;
}

int ef__indexed_open(ef__stage *s, ef__err *err)
{
    return ef__indexed_ready(s, err);
}

/* Record i for next(): through make_next where the source has one. */
static int make_next(ef__stage *s, int64_t i, ef_sample **out, ef__err *err)
{
    const ef__indexed_ops *ops = ((const ef__indexed *)s->state)->ops;
    return ops->make_next ? ops->make_next(s, i, s->epoch, out, err)
                          : ops->make(s, i, s->epoch, out, err);
}

int ef__indexed_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    ef__indexed *ix = s->state;
    int rc = ef__indexed_ready(s, err);
    while (rc == EF_OK && ix->next < ix->count) {
        int64_t i = ix->first + ix->next;
        if (ix->ops->check && ix->ops->check(s, i, err) != EF_OK) {
            ef__err_clear(err); /* skipped and counted when read */
            ix->next += ix->shard.n;
            continue;
        }
        rc = make_next(s, i, out, err);
        if (rc != EF_OK && !ef__stage_skip(s, err))
            return rc;
        ix->next += ix->shard.n;
        if (rc == EF_OK)
            return EF_OK;
        rc = EF_OK; /* a bad record under on_error=skip: dropped, counted */
    }
    return rc == EF_OK ? EF_END : rc;
}

int ef__indexed_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    ef__indexed *ix = s->state;
    ix->next = ix->shard.i;
    return EF_OK;
}

/* The record: what identifies the input, where the source says, then
 * the cursor. */
int ef__indexed_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    const ef__indexed *ix = s->state;
    if (ix->ops->save)
        ix->ops->save(s, o);
    ef__put_i64(o, ix->next);
    return EF_OK;
}

/* The record count is known once the input is read: checked then. */
int ef__indexed_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    ef__indexed *ix = s->state;
    int rc = ix->ops->restore ? ix->ops->restore(s, in, err) : EF_OK;
    if (rc == EF_OK)
        rc = ef__indexed_ready(s, err);
    return rc == EF_OK
               ? ef__cursor_restore(in, &ix->shard, ix->count, &ix->next)
               : rc;
}

int ef__indexed_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                      ef__err *err)
{
    const ef__indexed *ix = s->state;
    int64_t i = d->id.index;
    int rc = ef__indexed_ready(s, err);
    /* in terms of the range where the source takes one; else the part's
     * check below says it */
    if (rc == EF_OK && ix->ops->ranged &&
        (i < ix->first || i - ix->first >= ix->count))
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: the state names record %lld, outside the "
                         "records [%lld, %lld) this source reads",
                         s->def->info.name, (long long)i, (long long)ix->first,
                         (long long)(ix->first + ix->count));
    if (rc == EF_OK)
        rc = ef__index_check(s, &ix->shard, i - ix->first, ix->count, err);
    if (rc == EF_OK && ix->ops->check)
        rc = ix->ops->check(s, i, err);
    if (rc == EF_OK && ix->ops->check_origin)
        rc = ix->ops->check_origin(s, d, err);
    return rc == EF_OK ? ix->ops->make(s, i, d->id.epoch, out, err) : rc;
}

/* The range's records in this part. Before open, from peek() where the
 * source has one: the input is read at open. */
int ef__indexed_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    const ef__indexed *ix = s->state;
    int64_t records, first, count = ix->count;
    int rc = EF_OK;
    if (!ix->ready && !ix->loaded && ix->ops->peek) {
        rc = ix->ops->peek(s, &records, err);
        if (rc == EF_OK)
            rc = set_range(s, records, &first, &count, err);
    } else {
        rc = ef__indexed_ready(s, err);
        count = ix->count;
    }
    if (rc == EF_OK)
        *n = ef__shard_count(&ix->shard, count);
    return rc;
}

void ef__indexed_stats(const ef__stage *s, ef_stage_stats *out)
{
    const ef__indexed *ix = s->state;
    /* the records this source reads: the range's */
    ef__stats_extra(out, "records", ix->ready ? (double)ix->count : 0);
    if (ix->ops->stats)
        ix->ops->stats(s, out);
}

const char *ef__indexed_part_name(const ef__stage *s, int64_t part)
{
    const ef__indexed *ix = s->state;
    return ix->ops->part_name ? ix->ops->part_name(s, part) : NULL;
}
