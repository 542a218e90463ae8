/* SPDX-License-Identifier: Apache-2.0 */
/* tar: WebDataset shards as a source.
 *
 * `urls` lists the shards (paths or http(s) URLs, brace-expanded, see
 * paths.h; gzip-compressed ones are inflated); shard=I/N keeps the shards
 * s with s % N == I. Each pass reads the kept shards in an order shuffled
 * by a generator keyed by (seed, stage, epoch), or in list order with
 * shuffle_shards=false. Members are grouped into samples by key (wds.h); a
 * sample's identity is (shard << 32) + its position in the shard, whatever
 * the order or cycle.
 *
 * `cycle` = C reader threads each read one shard at a time into a queue of
 * their own. ordered=true: reader k reads the pass's shards k, k + C,
 * k + 2C ... and the consumer takes one sample from each reader in turn, so
 * the stream depends on the seed only. ordered=false: a reader that
 * finishes a shard takes the next unread one, and the consumer takes
 * whatever sample is ready first, so one slow shard (a slow server) stalls
 * nothing else. poll() never blocks, so echo:factor=auto can follow.
 *
 * Checkpoints (ordered mode): a sample's origin is its shard and the bytes
 * of its members, and the state saves, for each reader, where the next
 * sample the consumer has not taken starts: the shard's index in the pass
 * order (the order itself comes again from the seed and the epoch), the
 * byte offset (the end of the last sample taken from that reader, or 0)
 * and that sample's position in the shard; then whose turn it is. The
 * readers are not paused: what they read ahead and the consumer has not
 * taken is read again. A restored reader opens its first shard at the
 * offset (a local file seeks, a URL is asked for a Range from there; gzip
 * is inflated from the start, the bytes before dropped), and fetch()
 * reads one sample at its shard and offset the same way, a URL being
 * asked for that sample's bytes alone (a restore may fetch thousands).
 * Unordered mode depends on timing and cannot be saved.
 *
 * Memory: a reader charges the budget for each member before it reads
 * its data (the size its header gives), and hands the charge to its
 * queue with the sample. It waits for room first, unless the consumer
 * waits for its sample (ordered: the consumer's next sample is the
 * reader's next; unordered: no reader has a sample ready, and this one
 * is the one reader let past), so the readers together hold the budget
 * and one sample at most, whatever the cycle. A sample is handed over
 * as soon as the next member's header starts another key, before that
 * member is read. A member, or a sample, larger than the whole budget
 * fails.
 *
 * Errors: a shard that cannot be opened, a corrupt header or checksum, a
 * truncation fail the pipeline with the shard, the URL, the offset and the
 * reason; with on_error=skip the rest of that shard is abandoned (counted
 * with the byte it stopped at and the bytes left unread) and reading goes
 * on with the next. A malformed sample (wds.h) is dropped and counted as
 * skipped.
 *
 * Lock rules: each reader is a feed (feed.h) of one thread, with a queue
 * that has its own lock (core/queue.c); the queues live as long as the
 * stage, closed to stop their readers and reopened for the next pass.
 * `mu` guards ready_seq (bumped after every push in unordered mode, so the
 * consumer can wait for "some queue has an item"). `wanted` and `ahead`
 * are atomics, which a reader waiting for room in the budget reads under
 * the budget's lock; whoever changes them notifies the budget after. No
 * lock is held while another is taken, and none while reading. Threads:
 * the readers, started by open() and reset(), end after handing over
 * their END or an error, or when their queue is closed; reset() and
 * destroy() join them. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "codec/tar.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/feed.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/stream_options.h"
#include "io/paths.h"
#include "codec/wds.h"
#include "stages/sources/checkpoint.h"
#include "pipeline/state.h"

#define POSITION_MASK (((int64_t)1 << EF__WDS_SHARD_SHIFT) - 1)

typedef struct tar_state tar_state;

/* Where a reader's next sample starts: the shard at index k of the pass
 * order, byte `offset` of it, the sample at `position` there. */
typedef struct {
    size_t k;
    uint64_t offset;
    int64_t position;
} cursor;

typedef struct {
    tar_state *st;
    ef__feed feed; /* finished: END or an error was taken */
    size_t next;   /* ordered: the reader's next index in the pass order */
    /* where its first shard starts (a restore), set before the thread
     * starts and read by it once */
    uint64_t from_offset;
    int64_t from_position;
    /* consumer side (ordered): the next sample not taken from it */
    cursor at;
    /* reader thread only: samples handed over this pass, and the bytes
     * charged to the budget for the one being read */
    uint64_t sent, held;
    /* statistics, written by the reader thread only */
    _Atomic uint64_t bytes, read_ns, retries, shards;
} reader;

struct tar_state {
    ef__stage *s;
    ef__paths urls;
    ef__shard part;
    int64_t *kept; /* the shard numbers this part reads */
    size_t nkept;
    int64_t *order; /* this pass's order of `kept` */
    int64_t epoch;  /* this pass, as the readers see it */
    int ordered, shuffle, nreaders;
    size_t depth;
    ef__stream_opts sopts;
    ef__comp_seen gz;          /* each shard's compression, once read */
    int restored;              /* the next start goes from the cursors */
    atomic_int stop;           /* readers stop reading (cancel, or reset) */
    _Atomic size_t next_shard; /* unordered: next index in the order */
    /* ordered: the sample the consumer takes next, as (samples taken from
     * its reader) * nreaders + the reader's index (see awaited) */
    _Atomic uint64_t wanted;
    /* unordered: the reader let past the budget while no sample is
     * ready, or -1 */
    atomic_int ahead;
    reader *readers;
    /* consumer side */
    int rr;         /* the reader to take from next */
    int alive;      /* readers that have not ended */
    reader *failed; /* the one that handed over an error, if any */
    /* see the lock rules above */
    pthread_mutex_t mu;
    pthread_cond_t ready;
    uint64_t ready_seq;
};

/* ---- readers ------------------------------------------------------ */

static void update_stats(reader *r, ef__stream *s, ef__stream_stats *prev)
{
    ef__stream_stats now;
    ef__stream_get_stats(s, &now);
    ef__stat_add(&r->bytes, now.raw_bytes - prev->raw_bytes);
    ef__stat_add(&r->retries, now.retries - prev->retries);
    double dt = now.read_s - prev->read_s;
    ef__stat_add(&r->read_ns, ef__s_to_ns(dt));
    *prev = now;
}

/* ---- the memory budget -------------------------------------------- */

static ef__budget *budget_of(const tar_state *st)
{
    return &st->s->ctx->budget;
}

/* Whether nothing is ready for the consumer in any reader's queue. */
static int none_ready(const tar_state *st)
{
    for (int i = 0; i < st->nreaders; i++)
        if (atomic_load(&st->readers[i].feed.q.pending) > 0)
            return 0;
    return 1;
}

/* Whether the consumer waits for the sample reader `arg` is reading, so
 * that it may pass the budget (ef__budget_reserve): ordered, that sample
 * is the one the consumer takes next (`wanted`; it changes before the
 * consumer takes, so a reader whose queue just emptied does not pass for
 * a take already done); unordered, no sample is ready anywhere and the
 * reader is `ahead`, a place it takes when free. */
static int awaited(const void *arg)
{
    const reader *r = arg;
    tar_state *st = r->st;
    int me = (int)(r - st->readers);
    if (st->ordered)
        return atomic_load(&st->wanted) ==
               r->sent * (uint64_t)st->nreaders + (uint64_t)me;
    int cur = atomic_load(&st->ahead);
    if (cur == me)
        return 1;
    return cur < 0 && none_ready(st) &&
           atomic_compare_exchange_strong(&st->ahead, &cur, me);
}

/* Ordered: the consumer takes its next sample from reader i. */
static void await_reader(tar_state *st, int i)
{
    uint64_t w =
        st->readers[i].feed.taken * (uint64_t)st->nreaders + (uint64_t)i;
    if (atomic_exchange(&st->wanted, w) != w)
        ef__budget_notify(budget_of(st)); /* reader i may go on now */
}

/* Charges the budget for member m of the sample r reads (see awaited),
 * before its data is read. A member, or the sample it adds to, that
 * cannot fit the budget at all fails, naming them. EF_ECANCELED when the
 * readers stop. */
static int hold_member(reader *r, const ef__wds *g, ef__stream *s,
                       const ef__tar_member *m, ef__err *err)
{
    ef__budget *b = budget_of(r->st);
    uint64_t total = r->held + m->size;
    if (!ef__budget_fits(b, total)) {
        /* refused before its buffer is allocated */
        char what[EF__ERR_MAX / 2];
        if (r->held)
            snprintf(what, sizeof what,
                     "%s: sample '%.100s' at offset %llu, with its member "
                     "'%.100s'",
                     ef__stream_name(s), g->key,
                     (unsigned long long)g->key_offset, m->name);
        else
            snprintf(what, sizeof what, "%s: member '%.100s' at offset %llu",
                     ef__stream_name(s), m->name,
                     (unsigned long long)m->offset);
        return ef__budget_check(b, total, what, err);
    }
    int rc = ef__budget_reserve(b, m->size, awaited, r, &r->st->stop, NULL);
    if (rc == EF_OK)
        r->held += m->size;
    return rc;
}

/* Unordered: r gives up its place past the budget, if it has it. */
static void leave_ahead(reader *r)
{
    tar_state *st = r->st;
    int me = (int)(r - st->readers);
    if (!st->ordered && atomic_compare_exchange_strong(&st->ahead, &me, -1))
        ef__budget_notify(budget_of(st)); /* another may take it */
}

/* Gives back what r holds for a sample it does not hand over (dropped as
 * malformed, cut short, or the readers stopped). */
static void let_go(reader *r)
{
    if (r->held)
        ef__budget_release(budget_of(r->st), r->held);
    r->held = 0;
    leave_ahead(r);
}

/* ---- readers ------------------------------------------------------ */

/* After a push, unordered: wakes the consumer waiting for any sample. */
static void signal_ready(tar_state *st)
{
    if (st->ordered)
        return;
    pthread_mutex_lock(&st->mu);
    st->ready_seq++;
    pthread_cond_signal(&st->ready);
    pthread_mutex_unlock(&st->mu);
}

/* Hands an END or an error to the consumer; EF_ECANCELED (the item
 * freed) when the queue was closed. */
static int push(reader *r, ef__item *item)
{
    if (ef__feed_push(&r->feed, item) != EF_OK)
        return EF_ECANCELED;
    signal_ready(r->st);
    return EF_OK;
}

/* Hands a sample to the consumer with the charge r holds for it, made
 * what a queue charges (its members and its __key__ and __url__). */
static int push_sample(reader *r, ef_sample *smp)
{
    ef__budget *b = budget_of(r->st);
    uint64_t bytes = ef__sample_bytes(smp);
    if (bytes > r->held)
        ef__budget_hold(b, bytes - r->held);
    else
        ef__budget_release(b, r->held - bytes);
    r->held = 0;
    r->sent++;
    ef__item item = {.status = EF_OK, .sample = smp, .charged = bytes};
    int rc = ef__feed_push_charged(&r->feed, &item);
    leave_ahead(r); /* after the push: the sample is ready then */
    if (rc != EF_OK)
        return EF_ECANCELED;
    signal_ready(r->st);
    return EF_OK;
}

/* Hands over the sample g was grouping, if it was good. */
static int hand_over(reader *r, ef__wds *g)
{
    ef_sample *done;
    ef__wds_finish(g, &done);
    if (done)
        return push_sample(r, done);
    let_go(r);
    return EF_OK;
}

/* Adds "tar: shard N" to a message about that shard. Called once per
 * message, where the message leaves the reader (read_shard, or
 * skip_sample for a dropped sample), so the context never repeats. */
static void name_shard(ef__err *err, int64_t shard)
{
    char where[48];
    snprintf(where, sizeof where, "tar: shard %lld", (long long)shard);
    ef__err_prefix(err, where);
}

/* A malformed sample under on_error=skip: counted with its message and
 * dropped (1). Otherwise 0, and `err` is left as it was, for read_shard to
 * name the shard. */
static int skip_sample(tar_state *st, int64_t shard, const ef__err *err)
{
    ef__err named = *err;
    name_shard(&named, shard);
    return ef__stage_skip(st->s, &named);
}

/* Reads the members of an opened shard and groups them into samples
 * through `g`, handing each over; EF_END when the shard was read to its
 * end. */
static int read_members(reader *r, ef__tar *t, ef__stream *s, ef__wds *g,
                        ef__err *err)
{
    tar_state *st = r->st;
    ef__stream_stats prev = {0, 0, 0};
    int rc;
    for (;;) {
        ef__tar_member m;
        rc = ef__tar_next(t, &m, err);
        update_stats(r, s, &prev);
        ef__comp_seen_note(&st->gz, (size_t)g->shard, s);
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
        update_stats(r, s, &prev);
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
            let_go(r); /* a malformed sample: dropped, and its charge */
        if (grc != EF_OK && !skip_sample(st, g->shard, &gerr)) {
            *err = gerr;
            rc = grc;
            break;
        }
    }
    if (rc == EF_END && hand_over(r, g) != EF_OK)
        rc = EF_ECANCELED;
    let_go(r); /* a sample cut short by an error or a stop */
    return rc;
}

/* Opens shard `shard` at byte `offset`, where the sample at `position`
 * starts, for pass `epoch`, up to byte `end` (0: the shard's end): a tar
 * reader and a grouper (which the caller frees, *have_g says whether it
 * was made) over the stream in *s (the caller closes it, also after a
 * failure). */
static int open_shard(tar_state *st, int64_t shard, uint64_t offset,
                      uint64_t end, int64_t position, int64_t epoch,
                      const atomic_int *cancelled, ef__stream **s, ef__tar **t,
                      ef__wds *g, int *have_g, ef__err *err)
{
    const char *url = st->urls.names[shard];
    ef__stream_opts o = st->sopts;
    o.cancelled = cancelled;
    if (offset > 0 || end > 0)
        ef__comp_seen_opts(&st->gz, (size_t)shard, &o);
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
 * starts (0 and 0: all of it). EF_OK to go on with the next shard,
 * otherwise the reader stops (an error was handed over, or the queue is
 * closed). */
static int read_shard(reader *r, int64_t shard, uint64_t offset,
                      int64_t position)
{
    tar_state *st = r->st;
    const char *url = st->urls.names[shard];
    ef__err err;
    ef__err_clear(&err);
    ef__stream *s = NULL;
    ef__tar *t = NULL;
    ef__wds g;
    int have_g = 0;
    int rc = open_shard(st, shard, offset, 0, position, st->epoch, &st->stop,
                        &s, &t, &g, &have_g, &err);
    if (rc == EF_OK)
        rc = read_members(r, t, s, &g, &err);
    if (have_g)
        ef__wds_free(&g); /* a sample cut short by an error goes too */
    uint64_t at = s ? ef__stream_raw_offset(s) : offset;
    int64_t size = s ? ef__stream_size(s) : -1;
    ef__tar_close(t);
    ef__stream_close(s);
    ef__stat_add(&r->shards, 1);
    if (rc == EF_END)
        return EF_OK;
    if (rc == EF_ECANCELED || atomic_load(&st->stop))
        return EF_ECANCELED;
    if (err.msg[0] == '\0' || err.status != rc)
        ef__err_set(&err, rc, "%s: %s", url, ef_strerror(rc));
    name_shard(&err, shard);
    if (ef__stage_abandon(st->s, &err, "shard", at, size))
        return EF_OK; /* the rest of the shard is dropped */
    ef__item item = {.status = rc, .msg = ef__strdup(err.msg)};
    push(r, &item);
    return rc;
}

/* The index (in the pass order) of the reader's next shard, or nkept. */
static size_t take_shard(reader *r)
{
    tar_state *st = r->st;
    if (!st->ordered)
        return atomic_fetch_add(&st->next_shard, 1);
    size_t k = r->next;
    r->next += (size_t)st->nreaders;
    return k;
}

static void *reader_main(void *arg)
{
    reader *r = arg;
    tar_state *st = r->st;
    for (;;) {
        if (atomic_load(&st->stop))
            return NULL;
        size_t k = take_shard(r);
        if (k >= st->nkept)
            break;
        uint64_t offset = r->from_offset; /* a restore's, first shard only */
        int64_t position = r->from_position;
        r->from_offset = 0;
        r->from_position = 0;
        if (read_shard(r, st->order[k], offset, position) != EF_OK)
            return NULL;
    }
    ef__item end = {.status = EF_END};
    push(r, &end);
    return NULL;
}

/* ---- starting and stopping readers -------------------------------- */

/* The pass order: the kept shards, shuffled by a generator keyed by the
 * seed, this stage and the epoch. */
static void make_order(tar_state *st, int64_t epoch)
{
    memcpy(st->order, st->kept, st->nkept * sizeof *st->order);
    if (st->shuffle)
        ef__shard_shuffle(st->s, epoch, st->order, st->nkept);
}

/* Wakes every reader and joins them all, before a new pass changes what
 * they read. Never called concurrently with itself. */
static void stop_readers(tar_state *st)
{
    atomic_store(&st->stop, 1);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_cancel(&st->readers[i].feed);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_stop(&st->readers[i].feed);
}

/* Starts pass `epoch`: from the start, or after a restore from the
 * cursors it set (each reader's `at`, and `rr`). */
static int start_readers(tar_state *st, int64_t epoch, ef__err *err)
{
    st->epoch = epoch;
    make_order(st, epoch);
    atomic_store(&st->next_shard, 0);
    atomic_store(&st->stop, 0);
    if (!st->restored)
        st->rr = 0;
    st->alive = st->nreaders;
    st->failed = NULL;
    /* no reader has sent or held anything yet, nor is let past */
    atomic_store(&st->wanted, (uint64_t)st->rr);
    atomic_store(&st->ahead, -1);
    for (int i = 0; i < st->nreaders; i++) {
        reader *r = &st->readers[i];
        if (!st->restored)
            r->at = (cursor){(size_t)i, 0, 0};
        r->sent = r->held = 0;
        r->next = r->at.k;
        r->from_offset = r->at.offset;
        r->from_position = r->at.position;
        int rc = ef__feed_rewind(&r->feed, err); /* drops a pass cut short */
        if (rc == EF_OK)
            rc = ef__feed_start(&r->feed, err);
        if (rc != EF_OK)
            return rc;
    }
    st->restored = 0;
    return EF_OK;
}

/* ---- the stage ---------------------------------------------------- */

static int tar_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tar_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->s = s;
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->ready, NULL);
    st->ordered = ef__opt_bool(o, "ordered");
    st->shuffle = ef__opt_bool(o, "shuffle_shards");
    st->depth = (size_t)ef__opt_int(o, "queue");
    ef__stream_opts_from(o, &st->sopts);
    st->sopts.cancelled = &st->stop;
    ef__shard part;
    int rc = ef__shard_parse(s, o, &part, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "urls"), "tar: option 'urls'",
                              &st->urls, err);
    if (rc != EF_OK)
        return rc;
    st->part = part;
    size_t n = st->urls.n;
    if ((size_t)part.i >= n)
        return ef__err_set(err, EF_ESPEC,
                           "tar: part %lld of shard=%lld/%lld gets no shard: "
                           "'urls' lists %zu shard%s",
                           (long long)part.i, (long long)part.i,
                           (long long)part.n, n, n == 1 ? "" : "s");
    st->nkept = (n - (size_t)part.i + (size_t)part.n - 1) / (size_t)part.n;
    st->kept = ef__malloc(st->nkept * sizeof *st->kept);
    st->order = ef__malloc(st->nkept * sizeof *st->order);
    int64_t cycle = ef__opt_int(o, "cycle");
    st->nreaders = (int)((size_t)cycle < st->nkept ? (size_t)cycle : st->nkept);
    st->readers = ef__calloc((size_t)st->nreaders, sizeof *st->readers);
    if (!st->kept || !st->order || !st->readers ||
        ef__comp_seen_init(&st->gz, n) != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "tar: out of memory for %zu shards",
                           n);
    for (size_t k = 0; k < st->nkept; k++)
        st->kept[k] = part.i + (int64_t)k * part.n;
    for (int i = 0; i < st->nreaders && rc == EF_OK; i++) {
        reader *r = &st->readers[i];
        r->st = st;
        r->at = (cursor){(size_t)i, 0, 0}; /* for a save before open */
        rc = ef__feed_init(&r->feed, s, st->depth, 1, reader_main, r, err);
    }
    return rc;
}

static int tar_open(ef__stage *s, ef__err *err)
{
    return start_readers(s->state, s->epoch, err); /* 0 unless restored */
}

/* Takes from reader r, which has not ended: a sample, EF_AGAIN, its END
 * (the caller goes on with the others), or an error or a stop that ends
 * the stage. */
static int take_from(tar_state *st, reader *r, ef_sample **out, int block,
                     ef__err *err)
{
    int rc = ef__feed_take(&r->feed, out, block, err);
    if (rc == EF_OK && *out && st->ordered) { /* its next starts after it */
        const ef__origin *o = &(*out)->origin;
        while (r->at.k < st->nkept && st->order[r->at.k] != o->part)
            r->at.k += (size_t)st->nreaders; /* the reader's next shards */
        assert(r->at.k < st->nkept);
        r->at.offset = (uint64_t)o->end;
        r->at.position = ((*out)->id.index & POSITION_MASK) + 1;
    }
    if (r->feed.finished) { /* it handed its END or an error over */
        st->alive--;
        if (rc < 0)
            st->failed = r;
    }
    return rc;
}

/* Round robin: one sample from each reader in turn. */
static int take_ordered(tar_state *st, ef_sample **out, int block, ef__err *err)
{
    while (st->alive > 0) {
        reader *r = &st->readers[st->rr];
        if (r->feed.finished) {
            st->rr = (st->rr + 1) % st->nreaders;
            continue;
        }
        await_reader(st, st->rr);
        int rc = take_from(st, r, out, block, err);
        if (rc == EF_AGAIN)
            return EF_AGAIN;
        st->rr = (st->rr + 1) % st->nreaders;
        if (rc != EF_END)
            return rc;
    }
    return EF_END;
}

/* Whichever reader has a sample, starting after the last one served. */
static int take_any(tar_state *st, ef_sample **out, int block, ef__err *err)
{
    while (st->alive > 0) {
        pthread_mutex_lock(&st->mu);
        uint64_t seen = st->ready_seq;
        pthread_mutex_unlock(&st->mu);
        for (int i = 0; i < st->nreaders && st->alive > 0; i++) {
            int k = (st->rr + i) % st->nreaders;
            reader *r = &st->readers[k];
            if (r->feed.finished)
                continue;
            int rc = take_from(st, r, out, 0, err);
            if (rc == EF_AGAIN || rc == EF_END)
                continue;
            if (rc == EF_OK)
                st->rr = (k + 1) % st->nreaders;
            return rc;
        }
        if (st->alive == 0)
            break;
        if (!block)
            return EF_AGAIN;
        /* every push bumps ready_seq after the item is in its queue, so
         * a push made since `seen` was read ends this wait */
        ef__ctx *ctx = st->s->ctx;
        pthread_mutex_lock(&st->mu);
        while (st->ready_seq == seen && !ef__ctx_is_cancelled(ctx))
            pthread_cond_wait(&st->ready, &st->mu);
        pthread_mutex_unlock(&st->mu);
        if (ef__ctx_is_cancelled(ctx))
            return ef__stage_stopped(st->s, err);
    }
    return EF_END;
}

static int take(ef__stage *s, ef_sample **out, int block, ef__err *err)
{
    tar_state *st = s->state;
    *out = NULL;
    if (st->failed)
        return ef__feed_final(&st->failed->feed, err);
    return st->ordered ? take_ordered(st, out, block, err)
                       : take_any(st, out, block, err);
}

static int tar_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 1, err);
}

static int tar_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 0, err);
}

static int tar_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    tar_state *st = s->state;
    stop_readers(st); /* they may be mid-pass: take, say, stopped early */
    return start_readers(st, epoch, err);
}

static void tar_cancel(ef__stage *s)
{
    tar_state *st = s->state;
    atomic_store(&st->stop, 1);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_cancel(&st->readers[i].feed);
    /* the pipeline's flag, which take_any() waits on, is set already */
    pthread_mutex_lock(&st->mu);
    pthread_cond_broadcast(&st->ready);
    pthread_mutex_unlock(&st->mu);
}

/* ---- checkpoints -------------------------------------------------- */

/* The record: the shard list and part, the shards' compression, then
 * (count of readers) each reader's cursor, then whose turn it is. A
 * reader whose END was taken is saved as done: index nkept. */
static int tar_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    tar_state *st = s->state;
    if (!st->ordered)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "tar with ordered=false takes whichever shard's "
                           "sample is ready first, an order that depends on "
                           "timing: its position cannot be saved (use "
                           "ordered=true)");
    ef__files_save(&st->urls, o);
    ef__part_save(&st->part, o);
    ef__comp_seen_save(&st->gz, o);
    ef__put_u64(o, (uint64_t)st->nreaders);
    for (int i = 0; i < st->nreaders; i++) {
        const reader *r = &st->readers[i];
        int done = r->feed.finished;
        ef__put_u64(o, done ? st->nkept : r->at.k);
        ef__put_u64(o, done ? 0 : r->at.offset);
        ef__put_i64(o, done ? 0 : r->at.position);
    }
    ef__put_u64(o, (uint64_t)st->rr);
    return EF_OK;
}

/* One reader's cursor: a shard of its own in the pass order (k % C == i,
 * or nkept: done), an offset, and a position that is 0 exactly when the
 * offset is (a sample ends past its shard's first byte). */
static int restore_cursor(tar_state *st, int i, ef__state_in *in, cursor *c)
{
    uint64_t k, offset;
    int64_t position;
    ef__get_u64(in, "a reader's shard", &k);
    ef__get_u64(in, "a reader's offset", &offset);
    int rc = ef__get_i64(in, "a reader's sample", &position);
    if (rc != EF_OK)
        return rc;
    if (k != st->nkept &&
        (k >= st->nkept || k % (uint64_t)st->nreaders != (uint64_t)i))
        return ef__state_bad(in,
                             "reader %d at shard %llu of the pass order, "
                             "expected one of %d, %d + %d ... below %zu (or "
                             "%zu: done)",
                             i, (unsigned long long)k, i, i, st->nreaders,
                             st->nkept, st->nkept);
    if (position < 0 || position > POSITION_MASK ||
        (position == 0) != (offset == 0) || offset > (uint64_t)INT64_MAX)
        return ef__state_bad(in,
                             "reader %d at sample %lld, byte %llu: expected "
                             "both 0 (a shard's start) or both positive",
                             i, (long long)position,
                             (unsigned long long)offset);
    *c = (cursor){(size_t)k, offset, position};
    return EF_OK;
}

static int tar_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    tar_state *st = s->state;
    if (!st->ordered) /* its state never saves: another pipeline's */
        return ef__state_bad(in, "tar with ordered=false has no position "
                                 "to restore (use ordered=true)");
    uint64_t nreaders, rr;
    int rc = ef__files_restore(&st->urls, "shard", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&st->part, in);
    if (rc == EF_OK)
        rc = ef__comp_seen_restore(&st->gz, in);
    if (rc == EF_OK)
        rc = ef__get_u64(in, "the number of readers", &nreaders);
    if (rc != EF_OK)
        return rc;
    if (nreaders != (uint64_t)st->nreaders)
        return ef__state_bad(in, "%llu readers, expected %d",
                             (unsigned long long)nreaders, st->nreaders);
    for (int i = 0; i < st->nreaders && rc == EF_OK; i++)
        rc = restore_cursor(st, i, in, &st->readers[i].at);
    if (rc == EF_OK)
        rc = ef__get_count(in, "the reader whose turn it is",
                           (uint64_t)st->nreaders - 1, &rr);
    if (rc != EF_OK)
        return rc;
    st->rr = (int)rr;
    st->restored = 1;
    return EF_OK;
}

/* Whether `shard` is one this part reads. */
static int kept(const tar_state *st, int64_t shard)
{
    return shard >= 0 && (size_t)shard < st->urls.n &&
           shard % st->part.n == st->part.i;
}

/* Reads the members of the sample that starts at d->offset, up to
 * d->end, into *out (NULL when they make no good sample). */
static int fetch_members(tar_state *st, const ef__ident *d, ef__stream *s,
                         ef__tar *t, ef__wds *g, ef_sample **out, ef__err *err)
{
    *out = NULL;
    ef__budget *budget = &st->s->ctx->budget;
    int rc = EF_OK;
    while (rc == EF_OK && ef__stream_offset(s) < (uint64_t)d->end) {
        ef__tar_member m;
        if ((rc = ef__tar_next(t, &m, err)) != EF_OK)
            break;
        if (!ef__budget_fits(budget, m.size)) {
            char what[EF__ERR_MAX / 2];
            snprintf(what, sizeof what, "%s: member '%.100s' at offset %llu",
                     ef__stream_name(s), m.name, (unsigned long long)m.offset);
            return ef__budget_check(budget, m.size, what, err);
        }
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
    ef__comp_seen_note(&st->gz, (size_t)g->shard, s);
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
    tar_state *st = s->state;
    *out = NULL;
    if (!kept(st, d->part))
        return ef__err_set(err, EF_EFORMAT,
                           "tar: the state names a sample of shard %lld, "
                           "which part %lld of %lld of the %zu shards does "
                           "not read",
                           (long long)d->part, (long long)st->part.i,
                           (long long)st->part.n, st->urls.n);
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
    int rc = open_shard(st, d->part, (uint64_t)d->offset, (uint64_t)d->end,
                        d->id.index & POSITION_MASK, d->id.epoch,
                        &s->ctx->cancelled, &stream, &t, &g, &have_g, err);
    ef_sample *smp = NULL;
    if (rc == EF_OK)
        rc = fetch_members(st, d, stream, t, &g, &smp, err);
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
                         st->urls.names[d->part], (long long)d->id.index,
                         (long long)d->offset, (long long)d->end,
                         (unsigned long long)end);
    }
    if (rc != EF_OK) {
        ef_sample_free(smp);
        name_shard(err, d->part);
        return rc;
    }
    *out = smp;
    return EF_OK;
}

static void tar_destroy(ef__stage *s)
{
    tar_state *st = s->state;
    if (st->readers) {
        stop_readers(st);
        for (int i = 0; i < st->nreaders; i++)
            ef__feed_destroy(&st->readers[i].feed);
    }
    ef__paths_free(&st->urls);
    ef__comp_seen_free(&st->gz);
    ef__free(st->kept);
    ef__free(st->order);
    ef__free(st->readers);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->ready);
    ef__free(st);
}

static void tar_stats(const ef__stage *s, ef_stage_stats *out)
{
    const tar_state *st = s->state;
    uint64_t shards = 0, bytes = 0, ns = 0, retries = 0;
    for (int i = 0; i < st->nreaders; i++) {
        const reader *r = &st->readers[i];
        shards += ef__stat_get(&r->shards);
        bytes += ef__stat_get(&r->bytes);
        ns += ef__stat_get(&r->read_ns);
        retries += ef__stat_get(&r->retries);
    }
    ef__stats_extra(out, "shards", (double)shards);
    ef__stats_extra(out, "bytes", (double)bytes);
    ef__stats_extra(out, "MB/s",
                    ns ? (double)bytes / 1e6 / ef__ns_to_s(ns) : 0);
    ef__stats_extra(out, "retries", (double)retries);
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

/* The file or URL of a sample's origin.part (its index in the list). */
static const char *tar_part_name(const ef__stage *s, int64_t part)
{
    const tar_state *st = s->state;
    return part >= 0 && (size_t)part < st->urls.n ? st->urls.names[part]
                                                  : NULL;
}

const ef__stage_def ef__stage_tar = {
    .info = {"tar",
             "WebDataset tar shards (fields by member extension, __key__, "
             "__url__)",
             EF__OPTIONS(tar_options)},
    .is_source = 1,
    .create = tar_create,
    .open = tar_open,
    .next = tar_next,
    .poll = tar_poll,
    .reset = tar_reset,
    .cancel = tar_cancel,
    .destroy = tar_destroy,
    .stats = tar_stats,
    .save = tar_save,
    .restore = tar_restore,
    .fetch = tar_fetch,
    .length = tar_length,
    .part_name = tar_part_name,
    .index_in_part = 1,
};
