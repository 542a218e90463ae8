/* SPDX-License-Identifier: Apache-2.0 */
/* tar: WebDataset shards as a source, a format of the reader-pool kit
 * (reader_pool.h: the order, threads, turns, error policy, checkpoints).
 *
 * `urls` lists the shards (paths or http(s) URLs, brace-expanded, see
 * paths.h; gzip-compressed ones are inflated), read in an order shuffled
 * per pass unless shuffle_shards=false, by `cycle` readers: ordered=true
 * takes a sample from each in turn (the stream depends on the seed only),
 * ordered=false whichever is ready first, so one slow shard (a slow
 * server) stalls nothing else. Members are grouped into samples by key
 * (wds.h); a sample's identity is (shard << 32) + its position in the
 * shard, whatever the order or cycle, and its origin its shard and the
 * bytes of its members.
 *
 * Checkpoints (ordered mode) save where each reader's next sample starts.
 * A restored reader opens its first shard at that offset (a local file
 * seeks, a URL is asked for a Range from there; gzip is inflated from the
 * start, the bytes before dropped), and fetch() reads one sample at its
 * shard and offset the same way, a URL being asked for that sample's
 * bytes alone (a restore may fetch thousands).
 *
 * Memory: a reader charges the budget for each member before it reads
 * its data (the size its header gives). A sample is handed over as soon
 * as the next member's header starts another key, before that member is
 * read, so a reader holds one sample at a time. A member, or a sample,
 * larger than the whole budget fails.
 *
 * Errors: a shard that cannot be opened, a corrupt header or checksum, a
 * truncation fail the pipeline with the shard, the URL, the offset and the
 * reason; with on_error=skip the rest of that shard is abandoned and
 * reading goes on with the next. A malformed sample (wds.h) is dropped
 * and counted as skipped. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "codec/tar.h"
#include "codec/wds.h"
#include "core/alloc.h"
#include "core/sample.h"
#include "io/stream.h"
#include "stages/sources/reader_pool.h"
#include "stages/sources/stream_options.h"
#include "pipeline/state.h"

#define POSITION_MASK (((int64_t)1 << EF__WDS_SHARD_SHIFT) - 1)

/* ---- reading a shard ------------------------------------------------ */

/* EF_ENOMEM naming member m, or the sample of g it adds to when `held`
 * bytes of that are held, where the two cannot fit the budget at all:
 * refused before its buffer is allocated. */
static int member_fits(const ef__budget *b, ef__stream *s, const ef__wds *g,
                       uint64_t held, const ef__tar_member *m, ef__err *err)
{
    uint64_t total = held + m->size;
    if (ef__budget_fits(b, total))
        return EF_OK;
    char what[EF__ERR_MAX / 2];
    if (held)
        snprintf(what, sizeof what,
                 "%s: sample '%.100s' at offset %llu, with its member "
                 "'%.100s'",
                 ef__stream_name(s), g->key, (unsigned long long)g->key_offset,
                 m->name);
    else
        snprintf(what, sizeof what, "%s: member '%.100s' at offset %llu",
                 ef__stream_name(s), m->name, (unsigned long long)m->offset);
    return ef__budget_check(b, total, what, err);
}

/* Charges the budget for member m of the sample r reads, before its data
 * is read. EF_ECANCELED when the readers stop. */
static int hold_member(ef__pool_reader *r, const ef__wds *g, ef__stream *s,
                       const ef__tar_member *m, ef__err *err)
{
    int rc = member_fits(&r->pool->s->ctx->budget, s, g, r->held, m, err);
    return rc == EF_OK ? ef__reader_pool_hold(r, m->size) : rc;
}

/* Hands over the sample g was grouping, if it was good, charged what a
 * queue charges (its members and its __key__ and __url__). */
static int hand_over(ef__pool_reader *r, ef__wds *g)
{
    ef_sample *done;
    ef__wds_finish(g, &done);
    if (done)
        return ef__reader_pool_push(r, done, ef__sample_bytes(done));
    ef__reader_pool_let_go(r);
    return EF_OK;
}

/* A malformed sample under on_error=skip: counted with its message and
 * dropped (1). Otherwise 0, and `err` is left as it was, for read_shard to
 * name the shard. */
static int skip_sample(const ef__reader_pool *p, int64_t shard,
                       const ef__err *err)
{
    ef__err named = *err;
    ef__reader_pool_name_part(p, &named, shard);
    return ef__stage_skip(p->s, &named);
}

/* Reads the members of an opened shard and groups them into samples
 * through `g`, handing each over; EF_END when the shard was read to its
 * end. */
static int read_members(ef__pool_reader *r, ef__tar *t, ef__stream *s,
                        ef__wds *g, ef__err *err)
{
    ef__reader_pool *p = r->pool;
    ef__stream_stats prev = {0, 0, 0};
    int rc;
    for (;;) {
        ef__tar_member m;
        rc = ef__tar_next(t, &m, err);
        ef__reader_pool_count(r, s, &prev);
        ef__comp_seen_note(&p->comp, (size_t)g->shard, s);
        if (rc != EF_OK)
            break;
        /* a new key: the sample before it is whole, and goes before this
         * member is read, so that the reader holds one sample at a time */
        if (!ef__wds_continues(g, m.name) && (rc = hand_over(r, g)) != EF_OK)
            break;
        if ((rc = hold_member(r, g, s, &m, err)) != EF_OK)
            break;
        ef_buffer *b; /* the budget holds its size: allocated at once */
        rc = ef__tar_read_whole(t, &b, err);
        ef__reader_pool_count(r, s, &prev);
        if (rc != EF_OK)
            break;
        ef_sample *done;
        ef__err gerr;
        ef__err_clear(&gerr);
        int grc = ef__wds_add(g, m.name, b, m.offset, ef__stream_offset(s),
                              &done, &gerr);
        ef_buffer_release(b);
        assert(!done); /* handed over before the member was read */
        if (!g->cur)
            ef__reader_pool_let_go(r); /* a malformed sample: dropped, and its charge */
        if (grc != EF_OK && !skip_sample(p, g->shard, &gerr)) {
            *err = gerr;
            rc = grc;
            break;
        }
    }
    if (rc == EF_END && hand_over(r, g) != EF_OK)
        rc = EF_ECANCELED;
    ef__reader_pool_let_go(r); /* a sample cut short by an error or a stop */
    return rc;
}

/* Opens shard `shard` at byte `offset`, where the sample at `position`
 * starts, for pass `epoch`, up to byte `end` (0: the shard's end): a tar
 * reader and a grouper (which the caller frees, *have_g says whether it
 * was made) over the stream in *s (the caller closes it, also after a
 * failure). */
static int open_shard(ef__reader_pool *p, int64_t shard, uint64_t offset,
                      uint64_t end, int64_t position, int64_t epoch,
                      const atomic_int *cancelled, ef__stream **s, ef__tar **t,
                      ef__wds *g, int *have_g, ef__err *err)
{
    const char *url = p->names.names[shard];
    ef__stream_opts o = p->sopts;
    o.cancelled = cancelled;
    if (offset > 0 || end > 0)
        ef__comp_seen_opts(&p->comp, (size_t)shard, &o);
    *have_g = 0;
    int rc = ef__stream_open_range(s, url, &o, offset, end, err);
    if (rc == EF_OK)
        rc = ef__tar_open(t, *s, err);
    if (rc == EF_OK)
        *have_g = (rc = ef__wds_init(g, url, shard, epoch, err)) == EF_OK;
    if (*have_g)
        g->position = position;
    return rc;
}

/* Reads one shard from byte `offset` on, where the sample at `position`
 * starts (0 and 0: all of it): the format's read_part. */
static int read_shard(ef__pool_reader *r, int64_t shard, uint64_t offset,
                      int64_t position, ef__part_stop *stop, ef__err *err)
{
    ef__reader_pool *p = r->pool;
    ef__stream *s = NULL;
    ef__tar *t = NULL;
    ef__wds g;
    int have_g = 0;
    int rc = open_shard(p, shard, offset, 0, position, p->epoch, &p->stop, &s,
                        &t, &g, &have_g, err);
    if (rc == EF_OK)
        rc = read_members(r, t, s, &g, err);
    if (have_g)
        ef__wds_free(&g); /* a sample cut short by an error goes too */
    if (s)
        *stop = (ef__part_stop){ef__stream_raw_offset(s), ef__stream_size(s)};
    ef__tar_close(t);
    ef__stream_close(s);
    ef__stat_add(&r->parts, 1);
    if (rc == EF_END)
        return EF_OK;
    if (rc != EF_ECANCELED && !atomic_load(&p->stop))
        ef__reader_pool_name_failure(p, err, rc, shard);
    return rc;
}

/* ---- fetch -------------------------------------------------------- */

/* Reads the members of the sample that starts at d->offset, up to
 * d->end, into *out (NULL when they make no good sample). */
static int fetch_members(ef__reader_pool *p, const ef__ident *d, ef__stream *s,
                         ef__tar *t, ef__wds *g, ef_sample **out, ef__err *err)
{
    *out = NULL;
    ef__budget *budget = &p->s->ctx->budget;
    int rc = EF_OK;
    while (rc == EF_OK && ef__stream_offset(s) < (uint64_t)d->end) {
        ef__tar_member m;
        if ((rc = ef__tar_next(t, &m, err)) != EF_OK)
            break;
        if ((rc = member_fits(budget, s, g, 0, &m, err)) != EF_OK)
            return rc;
        ef_buffer *b = NULL;
        rc = ef__tar_read(t, &b, err);
        ef_sample *done = NULL;
        if (rc == EF_OK)
            rc = ef__wds_add(g, m.name, b, m.offset, ef__stream_offset(s),
                             &done, err);
        ef_buffer_release(b);
        if (done) { /* a second sample began before d->end: no match */
            ef_sample_free(done);
            return EF_OK;
        }
    }
    ef__comp_seen_note(&p->comp, (size_t)g->shard, s);
    if (rc == EF_OK || rc == EF_END)
        ef__wds_finish(g, out);
    return rc == EF_END ? EF_OK : rc;
}

/* Sample d read again: the members from its offset to its end. Another
 * sample there, or none, means the shard is not the one the state was
 * saved from. Uses its own stream: any thread, any time. */
static int tar_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                     ef__err *err)
{
    ef__reader_pool *p = s->state;
    *out = NULL;
    if (!ef__reader_pool_keeps(p, d->part))
        return ef__err_set(err, EF_EFORMAT,
                           "tar: the state names a sample of shard %lld, "
                           "which part %lld of %lld of the %zu shards does "
                           "not read",
                           (long long)d->part, (long long)p->part.i,
                           (long long)p->part.n, p->names.n);
    if ((d->id.index >> EF__WDS_SHARD_SHIFT) != d->part || d->end <= d->offset)
        return ef__err_set(err, EF_EFORMAT,
                           "tar: the state names sample %lld at bytes "
                           "%lld-%lld of shard %lld: expected an index of "
                           "that shard and a non-empty range",
                           (long long)d->id.index, (long long)d->offset,
                           (long long)d->end, (long long)d->part);
    ef__stream *stream = NULL;
    ef__tar *t = NULL;
    ef__wds g;
    int have_g = 0;
    int rc = open_shard(p, d->part, (uint64_t)d->offset, (uint64_t)d->end,
                        d->id.index & POSITION_MASK, d->id.epoch,
                        &s->ctx->cancelled, &stream, &t, &g, &have_g, err);
    ef_sample *smp = NULL;
    if (rc == EF_OK)
        rc = fetch_members(p, d, stream, t, &g, &smp, err);
    if (rc != EF_OK)
        ef__fetch_failed(err, rc, "shard");
    uint64_t end = stream ? ef__stream_offset(stream) : 0;
    if (have_g)
        ef__wds_free(&g);
    ef__tar_close(t);
    ef__stream_close(stream);
    if (rc == EF_OK &&
        (!smp || smp->id.index != d->id.index || smp->origin.end != d->end)) {
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: no sample %lld at bytes %lld-%lld as the state "
                         "says (read up to byte %llu): the shard changed "
                         "since the state was saved",
                         p->names.names[d->part], (long long)d->id.index,
                         (long long)d->offset, (long long)d->end,
                         (unsigned long long)end);
    }
    if (rc != EF_OK) {
        ef_sample_free(smp);
        ef__reader_pool_name_part(p, err, d->part);
        return rc;
    }
    *out = smp;
    return EF_OK;
}

static int list_shards(ef__reader_pool *p, const ef__opts *o, ef__err *err)
{
    ef__stream_opts_from(o, &p->sopts);
    return ef__paths_expand(ef__opt_string(o, "urls"), "tar: option 'urls'",
                            &p->names, err);
}

static void tar_destroy(ef__reader_pool *p)
{
    ef__paths_free(&p->names);
}

static const ef__reader_format tar_format = {
    .unit = "shard",
    .units = "shards",
    .shuffle_opt = "shuffle_shards",
    .readers_opt = "cycle",
    .ordered_opt = "ordered",
    .count_words = "'urls' lists",
    .inflates = 1,
    .list = list_shards,
    .read_part = read_shard,
    .destroy = tar_destroy,
};

/* The pool's state is all: its names are the shards' URLs. */
static int tar_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return ef__reader_pool_create(s, o, &tar_format, sizeof(ef__reader_pool),
                                  err);
}

static const ef__option_def tar_options[] = {
    EF__OPT("urls", EF_OPT_STRING, NULL,
            "shard paths or http(s) URLs, space-separated, with {a,b} and "
            "{000..099} expansion",
            0, 0),
    EF__OPT("shuffle_shards", EF_OPT_BOOL, "true",
            "read the shards in a seeded order, new each epoch", 0, 0),
    EF__OPT("cycle", EF_OPT_INT, "1", "shards read at once, one thread each", 1,
            256),
    EF__OPT(
        "ordered", EF_OPT_BOOL, "true",
        "take samples round robin (deterministic); false: whichever is ready",
        0, 0),
    EF__OPT("queue", EF_OPT_INT, "16", "samples buffered per reader thread", 1,
            1 << 16, EF__SPEED_ONLY),
    EF__STREAM_OPTIONS,
    EF__SHARD_OPTION,
};

/* A tar has no index: samples are counted by reading every header. */
static int tar_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)s;
    (void)up;
    (void)n;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "tar: the number of samples in the shards is not "
                       "known before reading them (a tar has no index)");
}

const ef__stage_def ef__stage_tar = {
    .info = {"tar",
             "WebDataset tar shards (fields by member extension, __key__, "
             "__url__)",
             EF__OPTIONS(tar_options)},
    .create = tar_create,
    EF__READER_POOL_STAGE,
    .fetch = tar_fetch,
    .length = tar_length,
    .index_in_part = 1,
};
