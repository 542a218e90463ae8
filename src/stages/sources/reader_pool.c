/* SPDX-License-Identifier: Apache-2.0 */
/* The reader-pool driver (see reader_pool.h): the pass order, reader
 * threads that read parts through the format, the consumer's turns, the
 * budget's waits, and the readers' places in checkpoints. */
#include "stages/sources/reader_pool.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/state.h"

#define POSITION_MASK (((int64_t)1 << 32) - 1)

/* ---- the memory budget -------------------------------------------- */

static ef__budget *budget_of(const ef__reader_pool *p)
{
    return &p->s->ctx->budget;
}

static int index_of(const ef__pool_reader *r)
{
    return (int)(r - r->pool->readers);
}

/* Whether nothing is ready for the consumer in any reader's queue. */
static int none_ready(const ef__reader_pool *p)
{
    for (int i = 0; i < p->nreaders; i++)
        if (atomic_load(&p->readers[i].feed.q.pending) > 0)
            return 0;
    return 1;
}

/* Whether the consumer waits for the item reader `arg` is reading, so
 * that it may pass the budget (see reader_pool.h). Ordered, `wanted`
 * changes before the consumer takes, so a reader whose queue just
 * emptied does not pass for a take already done. */
static int awaited(const void *arg)
{
    const ef__pool_reader *r = arg;
    ef__reader_pool *p = r->pool;
    int me = index_of(r);
    if (p->ordered)
        return atomic_load(&p->wanted) ==
               r->sent * (uint64_t)p->nreaders + (uint64_t)me;
    int cur = atomic_load(&p->ahead);
    if (cur == me)
        return 1;
    return cur < 0 && none_ready(p) &&
           atomic_compare_exchange_strong(&p->ahead, &cur, me);
}

/* Ordered: the consumer takes its next item from reader i. */
static void await_reader(ef__reader_pool *p, int i)
{
    uint64_t w = p->readers[i].took * (uint64_t)p->nreaders + (uint64_t)i;
    if (atomic_exchange(&p->wanted, w) != w)
        ef__budget_notify(budget_of(p)); /* reader i may go on now */
}

int ef__reader_pool_hold(ef__pool_reader *r, uint64_t n)
{
    if (!r)
        return EF_OK;
    ef__reader_pool *p = r->pool;
    int rc = ef__budget_reserve(budget_of(p), n, awaited, r, &p->stop, NULL);
    if (rc == EF_OK)
        r->held += n;
    return rc;
}

/* Unordered: r gives up its place past the budget, if it has it. */
static void leave_ahead(ef__pool_reader *r)
{
    ef__reader_pool *p = r->pool;
    int me = index_of(r);
    if (!p->ordered && atomic_compare_exchange_strong(&p->ahead, &me, -1))
        ef__budget_notify(budget_of(p)); /* another may take it */
}

void ef__reader_pool_let_go(ef__pool_reader *r)
{
    if (r->held)
        ef__budget_release(budget_of(r->pool), r->held);
    r->held = 0;
    leave_ahead(r);
}

/* ---- handing items over ------------------------------------------- */

/* After a push, unordered: wakes the consumer waiting for any sample. */
static void signal_ready(ef__reader_pool *p)
{
    if (p->ordered)
        return;
    pthread_mutex_lock(&p->mu);
    p->ready_seq++;
    pthread_cond_signal(&p->ready);
    pthread_mutex_unlock(&p->mu);
}

/* Hands an END, an error or an item without a sample to the consumer;
 * EF_ECANCELED (the item freed) when the queue was closed. */
static int push(ef__pool_reader *r, ef__item *item)
{
    if (ef__feed_push(&r->feed, item) != EF_OK)
        return EF_ECANCELED;
    signal_ready(r->pool);
    return EF_OK;
}

int ef__reader_pool_push(ef__pool_reader *r, ef_sample *smp, uint64_t charge)
{
    r->sent++;
    if (!smp) {
        ef__item none = {.status = EF_OK};
        return push(r, &none);
    }
    ef__budget *b = budget_of(r->pool);
    if (charge > r->held)
        ef__budget_hold(b, charge - r->held);
    else
        ef__budget_release(b, r->held - charge);
    r->held = 0;
    ef__item item = {.status = EF_OK, .sample = smp, .charged = charge};
    int rc = ef__feed_push_charged(&r->feed, &item);
    leave_ahead(r); /* after the push: the sample is ready then */
    if (rc != EF_OK)
        return EF_ECANCELED;
    signal_ready(r->pool);
    return EF_OK;
}

void ef__reader_pool_count(ef__pool_reader *r, ef__stream *s,
                           ef__stream_stats *prev)
{
    if (!r)
        return;
    ef__stream_stats now;
    ef__stream_get_stats(s, &now);
    ef__stat_add(&r->bytes, now.raw_bytes - prev->raw_bytes);
    ef__stat_add(&r->retries, now.retries - prev->retries);
    double dt = now.read_s - prev->read_s;
    ef__stat_add(&r->read_ns, ef__s_to_ns(dt));
    *prev = now;
}

void ef__reader_pool_name_part(const ef__reader_pool *p, ef__err *err,
                               int64_t part)
{
    char where[64];
    snprintf(where, sizeof where, "%s: %s %lld", p->name, p->fmt->unit,
             (long long)part);
    ef__err_prefix(err, where);
}

void ef__reader_pool_name_failure(const ef__reader_pool *p, ef__err *err,
                                  int rc, int64_t part)
{
    if (err->msg[0] == '\0' || err->status != rc)
        ef__err_set(err, rc, "%s: %s", p->names.names[part], ef_strerror(rc));
    ef__reader_pool_name_part(p, err, part);
}

int ef__reader_pool_keeps(const ef__reader_pool *p, int64_t part)
{
    return part >= 0 && (size_t)part < p->names.n &&
           part % p->part.n == p->part.i;
}

/* ---- readers ------------------------------------------------------ */

/* The index (in the pass order) of the reader's next part, or nkept. */
static size_t take_part(ef__pool_reader *r)
{
    ef__reader_pool *p = r->pool;
    if (!p->ordered)
        return atomic_fetch_add(&p->next_part, 1);
    size_t k = r->next;
    r->next += (size_t)p->nreaders;
    return k;
}

/* After part `part` failed with rc: the error policy. EF_OK to go on
 * with the next part, otherwise the reader stops (an error was handed
 * over, or the queue is closed). */
static int part_failed(ef__pool_reader *r, int rc, const ef__part_stop *stop,
                       ef__err *err)
{
    ef__reader_pool *p = r->pool;
    if (rc == EF_ECANCELED || atomic_load(&p->stop))
        return EF_ECANCELED;
    if (p->fmt->inflates) {
        if (ef__stage_abandon(p->s, err, p->fmt->unit, stop->at, stop->size))
            return EF_OK; /* the rest of the part is dropped */
    } else if (ef__stage_skip(p->s, err)) {
        /* skipped: an item without a sample keeps the turns */
        return ef__reader_pool_push(r, NULL, 0);
    }
    ef__item item = {.status = rc, .msg = ef__strdup(err->msg)};
    push(r, &item);
    return rc;
}

static void *reader_main(void *arg)
{
    ef__pool_reader *r = arg;
    ef__reader_pool *p = r->pool;
    for (;;) {
        if (atomic_load(&p->stop))
            return NULL;
        size_t k = take_part(r);
        if (k >= p->nkept)
            break;
        uint64_t offset = r->from_offset; /* a restore's, first part only */
        int64_t position = r->from_position;
        r->from_offset = 0;
        r->from_position = 0;
        ef__err err;
        ef__err_clear(&err);
        ef__part_stop stop = {offset, -1};
        int rc = p->fmt->read_part(r, p->order[k], offset, position, &stop,
                                   &err);
        ef__reader_pool_let_go(r); /* a sample cut short, or a file */
        if (rc != EF_OK && part_failed(r, rc, &stop, &err) != EF_OK)
            return NULL;
    }
    ef__item end = {.status = EF_END};
    push(r, &end);
    return NULL;
}

/* ---- starting and stopping readers -------------------------------- */

/* The pass order: the kept parts, shuffled by a generator keyed by the
 * seed, this stage and the epoch when asked. */
static void make_order(ef__reader_pool *p, int64_t epoch)
{
    for (size_t k = 0; k < p->nkept; k++)
        p->order[k] = p->part.i + (int64_t)k * p->part.n;
    if (p->shuffle)
        ef__shard_shuffle(p->s, epoch, p->order, p->nkept);
}

/* Wakes every reader and joins them all, before a new pass changes what
 * they read. Never called concurrently with itself. */
static void stop_readers(ef__reader_pool *p)
{
    ef__reader_pool_cancel(p->s);
    for (int i = 0; i < p->nreaders; i++)
        ef__feed_stop(&p->readers[i].feed);
}

/* Starts pass `epoch`: from the start, or after a restore from the
 * cursors it set (each reader's `at`, and `rr`). */
static int start_readers(ef__reader_pool *p, int64_t epoch, ef__err *err)
{
    p->epoch = epoch;
    make_order(p, epoch);
    atomic_store(&p->next_part, 0);
    atomic_store(&p->stop, 0);
    if (!p->restored)
        p->rr = 0;
    p->alive = p->nreaders;
    p->failed = NULL;
    /* no reader has sent or held anything yet, nor is let past */
    atomic_store(&p->wanted, (uint64_t)p->rr);
    atomic_store(&p->ahead, -1);
    for (int i = 0; i < p->nreaders; i++) {
        ef__pool_reader *r = &p->readers[i];
        if (!p->restored)
            r->at = (ef__pool_cursor){(size_t)i, 0, 0};
        r->sent = r->held = r->took = 0;
        r->next = r->at.k;
        r->from_offset = r->at.offset;
        r->from_position = r->at.position;
        int rc = ef__feed_rewind(&r->feed, err); /* drops a pass cut short */
        if (rc == EF_OK)
            rc = ef__feed_start(&r->feed, err);
        if (rc != EF_OK)
            return rc;
    }
    p->restored = 0;
    return EF_OK;
}

/* ---- creating ------------------------------------------------------ */

/* Once the parts are listed: this process's parts and the readers. */
static int make_readers(ef__reader_pool *p, ef__err *err)
{
    size_t n = p->names.n;
    const char *unit = p->fmt->unit;
    if ((size_t)p->part.i >= n)
        return ef__err_set(err, EF_ESPEC,
                           "%s: part %lld of shard=%lld/%lld gets no %s: %s "
                           "%zu %s",
                           p->name, (long long)p->part.i, (long long)p->part.i,
                           (long long)p->part.n, unit, p->fmt->count_words, n,
                           n == 1 ? unit : p->fmt->units);
    p->sopts.cancelled = &p->stop;
    p->nkept = (size_t)ef__shard_count(&p->part, (int64_t)n);
    if ((size_t)p->nreaders > p->nkept) /* the rest would have nothing */
        p->nreaders = (int)p->nkept;
    p->order = ef__malloc(p->nkept * sizeof *p->order);
    p->readers = ef__calloc((size_t)p->nreaders, sizeof *p->readers);
    if (!p->order || !p->readers ||
        (p->fmt->inflates && ef__comp_seen_init(&p->comp, n) != EF_OK))
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory for %zu %s",
                           p->name, n, p->fmt->units);
    int rc = EF_OK;
    for (int i = 0; i < p->nreaders && rc == EF_OK; i++) {
        ef__pool_reader *r = &p->readers[i];
        r->pool = p;
        r->at = (ef__pool_cursor){(size_t)i, 0, 0}; /* a save before open */
        rc = ef__feed_init(&r->feed, p->s, p->depth, 1, reader_main, r, err);
    }
    return rc;
}

int ef__reader_pool_create(ef__stage *s, const ef__opts *o,
                           const ef__reader_format *fmt, size_t size,
                           ef__err *err)
{
    assert(size >= sizeof(ef__reader_pool));
    ef__reader_pool *p = ef__stage_new_state(s, size, err);
    if (!p)
        return EF_ENOMEM;
    p->fmt = fmt;
    p->s = s;
    p->name = s->def->info.name;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->ready, NULL);
    p->ordered = fmt->ordered_opt ? ef__opt_bool(o, fmt->ordered_opt) : 1;
    p->shuffle = ef__opt_bool(o, fmt->shuffle_opt);
    p->nreaders = (int)ef__opt_int(o, fmt->readers_opt);
    p->depth = (size_t)ef__opt_int(o, "queue");
    ef__stream_opts_init(&p->sopts);
    int rc = ef__shard_parse(s, o, &p->part, err);
    if (rc == EF_OK)
        rc = fmt->list(p, o, err);
    return rc == EF_OK ? make_readers(p, err) : rc;
}

/* ---- the consumer --------------------------------------------------- */

int ef__reader_pool_open(ef__stage *s, ef__err *err)
{
    return start_readers(s->state, s->epoch, err); /* 0 unless restored */
}

/* Ordered: reader r's next item starts after the one just taken. */
static void advance_cursor(ef__reader_pool *p, ef__pool_reader *r,
                           const ef_sample *smp)
{
    if (p->fmt->one_per_part) {
        r->at.k += (size_t)p->nreaders;
        return;
    }
    const ef__origin *o = &smp->origin;
    while (r->at.k < p->nkept && p->order[r->at.k] != o->part)
        r->at.k += (size_t)p->nreaders; /* the reader's next parts */
    assert(r->at.k < p->nkept);
    r->at.offset = (uint64_t)o->end;
    r->at.position = (smp->id.index & POSITION_MASK) + 1;
}

/* Takes from reader r, which has not ended: a sample (or an item
 * without one), EF_AGAIN, its END (the caller goes on with the others),
 * or an error or a stop that ends the stage. */
static int take_from(ef__reader_pool *p, ef__pool_reader *r, ef_sample **out,
                     int block, ef__err *err)
{
    int rc = ef__feed_take(&r->feed, out, block, err);
    if (rc == EF_OK)
        r->took++;
    if (rc == EF_OK && p->ordered && (*out || p->fmt->one_per_part))
        advance_cursor(p, r, *out);
    if (r->feed.finished) { /* it handed its END or an error over */
        p->alive--;
        if (rc < 0)
            p->failed = r;
    }
    return rc;
}

/* Round robin: one item from each reader in turn; an item without a
 * sample (a part skipped) is a turn, and the next is taken. */
static int take_ordered(ef__reader_pool *p, ef_sample **out, int block,
                        ef__err *err)
{
    while (p->alive > 0) {
        ef__pool_reader *r = &p->readers[p->rr];
        if (r->feed.finished) {
            p->rr = (p->rr + 1) % p->nreaders;
            continue;
        }
        await_reader(p, p->rr);
        int rc = take_from(p, r, out, block, err);
        if (rc == EF_AGAIN)
            return EF_AGAIN;
        p->rr = (p->rr + 1) % p->nreaders;
        if (rc == EF_OK && !*out)
            continue;
        if (rc != EF_END)
            return rc;
    }
    return EF_END;
}

/* Whichever reader has a sample, starting after the last one served. */
static int take_any(ef__reader_pool *p, ef_sample **out, int block,
                    ef__err *err)
{
    while (p->alive > 0) {
        pthread_mutex_lock(&p->mu);
        uint64_t seen = p->ready_seq;
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->nreaders && p->alive > 0; i++) {
            int k = (p->rr + i) % p->nreaders;
            ef__pool_reader *r = &p->readers[k];
            if (r->feed.finished)
                continue;
            int rc = take_from(p, r, out, 0, err);
            if (rc == EF_AGAIN || rc == EF_END)
                continue;
            if (rc == EF_OK)
                p->rr = (k + 1) % p->nreaders;
            return rc;
        }
        if (p->alive == 0)
            break;
        if (!block)
            return EF_AGAIN;
        /* every push bumps ready_seq after the item is in its queue, so
         * a push made since `seen` was read ends this wait */
        ef__ctx *ctx = p->s->ctx;
        pthread_mutex_lock(&p->mu);
        while (p->ready_seq == seen && !ef__ctx_is_cancelled(ctx))
            pthread_cond_wait(&p->ready, &p->mu);
        pthread_mutex_unlock(&p->mu);
        if (ef__ctx_is_cancelled(ctx))
            return ef__stage_stopped(p->s, err);
    }
    return EF_END;
}

static int take(ef__stage *s, ef_sample **out, int block, ef__err *err)
{
    ef__reader_pool *p = s->state;
    *out = NULL;
    if (p->failed)
        return ef__feed_final(&p->failed->feed, err);
    return p->ordered ? take_ordered(p, out, block, err)
                      : take_any(p, out, block, err);
}

int ef__reader_pool_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 1, err);
}

int ef__reader_pool_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 0, err);
}

int ef__reader_pool_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    ef__reader_pool *p = s->state;
    stop_readers(p); /* they may be mid-pass: take, say, stopped early */
    return start_readers(p, epoch, err);
}

void ef__reader_pool_cancel(ef__stage *s)
{
    ef__reader_pool *p = s->state;
    atomic_store(&p->stop, 1);
    for (int i = 0; i < p->nreaders; i++)
        ef__feed_cancel(&p->readers[i].feed);
    /* the pipeline's flag, which take_any() waits on, is set already */
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->mu);
}

void ef__reader_pool_destroy(ef__stage *s)
{
    ef__reader_pool *p = s->state;
    if (p->readers) {
        stop_readers(p);
        for (int i = 0; i < p->nreaders; i++)
            ef__feed_destroy(&p->readers[i].feed);
    }
    if (p->fmt && p->fmt->destroy)
        p->fmt->destroy(p);
    ef__comp_seen_free(&p->comp);
    ef__free(p->order);
    ef__free(p->readers);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->ready);
    ef__free(p);
}

void ef__reader_pool_stats(const ef__stage *s, ef_stage_stats *out)
{
    const ef__reader_pool *p = s->state;
    uint64_t parts = 0, bytes = 0, ns = 0, retries = 0;
    for (int i = 0; i < p->nreaders; i++) {
        const ef__pool_reader *r = &p->readers[i];
        parts += ef__stat_get(&r->parts);
        bytes += ef__stat_get(&r->bytes);
        ns += ef__stat_get(&r->read_ns);
        retries += ef__stat_get(&r->retries);
    }
    ef__stats_extra(out, p->fmt->units, (double)parts);
    ef__stats_extra(out, "bytes", (double)bytes);
    /* summed over the readers' time inside reads, so per reader */
    ef__stats_extra(out, "MB/s",
                    ns ? (double)bytes / 1e6 / ef__ns_to_s(ns) : 0);
    ef__stats_extra(out, "retries", (double)retries);
}

/* ---- checkpoints -------------------------------------------------- */

/* The position in the pass of the next item to hand out, for a format
 * whose parts each give one: the least of the readers' next parts (a
 * reader whose END was taken has none). */
static uint64_t pass_position(const ef__reader_pool *p)
{
    size_t pos = p->nkept;
    for (int i = 0; i < p->nreaders; i++) {
        const ef__pool_reader *r = &p->readers[i];
        if (!r->feed.finished && r->at.k < pos)
            pos = r->at.k;
    }
    return pos;
}

/* The record: the part list and part, the parts' compression (where
 * they may be compressed), then the place: the pass position, or (count
 * of readers) each reader's cursor, then whose turn it is. A reader
 * whose END was taken is saved as done: index nkept. */
int ef__reader_pool_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    ef__reader_pool *p = s->state;
    if (!p->ordered)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s with %s=false takes whichever %s's sample is "
                           "ready first, an order that depends on timing: "
                           "its position cannot be saved (use %s=true)",
                           p->name, p->fmt->ordered_opt, p->fmt->unit,
                           p->fmt->ordered_opt);
    ef__files_save(&p->names, o);
    ef__part_save(&p->part, o);
    if (p->fmt->inflates)
        ef__comp_seen_save(&p->comp, o);
    if (p->fmt->one_per_part) {
        ef__put_u64(o, pass_position(p));
        return EF_OK;
    }
    ef__put_u64(o, (uint64_t)p->nreaders);
    for (int i = 0; i < p->nreaders; i++) {
        const ef__pool_reader *r = &p->readers[i];
        int done = r->feed.finished;
        ef__put_u64(o, done ? p->nkept : r->at.k);
        ef__put_u64(o, done ? 0 : r->at.offset);
        ef__put_i64(o, done ? 0 : r->at.position);
    }
    ef__put_u64(o, (uint64_t)p->rr);
    return EF_OK;
}

/* One reader's cursor: a part of its own in the pass order (k % R == i,
 * or nkept: done), an offset, and a position that is 0 exactly when the
 * offset is (a sample ends past its part's first byte). */
static int restore_cursor(ef__reader_pool *p, int i, ef__state_in *in,
                          ef__pool_cursor *c)
{
    uint64_t k, offset;
    int64_t position;
    ef__get_u64(in, "a reader's shard", &k);
    ef__get_u64(in, "a reader's offset", &offset);
    int rc = ef__get_i64(in, "a reader's sample", &position);
    if (rc != EF_OK)
        return rc;
    if (k != p->nkept &&
        (k >= p->nkept || k % (uint64_t)p->nreaders != (uint64_t)i))
        return ef__state_bad(in,
                             "reader %d at %s %llu of the pass order, "
                             "expected one of %d, %d + %d ... below %zu (or "
                             "%zu: done)",
                             i, p->fmt->unit, (unsigned long long)k, i, i,
                             p->nreaders, p->nkept, p->nkept);
    if (position < 0 || position > POSITION_MASK ||
        (position == 0) != (offset == 0) || offset > (uint64_t)INT64_MAX)
        return ef__state_bad(in,
                             "reader %d at sample %lld, byte %llu: expected "
                             "both 0 (a %s's start) or both positive",
                             i, (long long)position,
                             (unsigned long long)offset, p->fmt->unit);
    *c = (ef__pool_cursor){(size_t)k, offset, position};
    return EF_OK;
}

/* The readers' cursors and turn: each reader's own part from pass
 * position `pos` on. */
static void place_at(ef__reader_pool *p, size_t pos)
{
    size_t nr = (size_t)p->nreaders;
    size_t base = pos - pos % nr;
    for (size_t i = 0; i < nr; i++) {
        size_t k = base + i < pos ? base + nr + i : base + i;
        p->readers[i].at = (ef__pool_cursor){k, 0, 0};
    }
    p->rr = (int)(pos % nr);
}

/* Each reader's cursor, then whose turn it is. */
static int restore_cursors(ef__reader_pool *p, ef__state_in *in)
{
    uint64_t nreaders, rr;
    int rc = ef__get_u64(in, "the number of readers", &nreaders);
    if (rc != EF_OK)
        return rc;
    if (nreaders != (uint64_t)p->nreaders)
        return ef__state_bad(in, "%llu readers, expected %d",
                             (unsigned long long)nreaders, p->nreaders);
    for (int i = 0; i < p->nreaders && rc == EF_OK; i++)
        rc = restore_cursor(p, i, in, &p->readers[i].at);
    if (rc == EF_OK)
        rc = ef__get_count(in, "the reader whose turn it is",
                           (uint64_t)p->nreaders - 1, &rr);
    if (rc == EF_OK)
        p->rr = (int)rr;
    return rc;
}

int ef__reader_pool_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    ef__reader_pool *p = s->state;
    if (!p->ordered) /* its state never saves: another pipeline's */
        return ef__state_bad(in,
                             "%s with %s=false has no position to restore "
                             "(use %s=true)",
                             p->name, p->fmt->ordered_opt,
                             p->fmt->ordered_opt);
    int rc = ef__files_restore(&p->names, p->fmt->unit, in);
    if (rc == EF_OK)
        rc = ef__part_restore(&p->part, in);
    if (rc == EF_OK && p->fmt->inflates)
        rc = ef__comp_seen_restore(&p->comp, in);
    if (rc == EF_OK && p->fmt->one_per_part) {
        uint64_t pos;
        rc = ef__get_count(in, "the position in the pass", p->nkept, &pos);
        if (rc == EF_OK)
            place_at(p, (size_t)pos);
    } else if (rc == EF_OK) {
        rc = restore_cursors(p, in);
    }
    if (rc != EF_OK)
        return rc;
    p->restored = 1;
    return EF_OK;
}

int ef__reader_pool_length(ef__stage *s, int64_t up, int64_t *n,
                           ef__err *err)
{
    (void)up;
    (void)err;
    const ef__reader_pool *p = s->state;
    *n = (int64_t)p->nkept;
    return EF_OK;
}

/* The file or URL of a sample's origin.part (its index in the list). */
const char *ef__reader_pool_part_name(const ef__stage *s, int64_t part)
{
    const ef__reader_pool *p = s->state;
    return ef__paths_at(&p->names, part);
}
