/* SPDX-License-Identifier: Apache-2.0 */
/* files: a folder, a list or a glob of single files as a source, one
 * sample per file, so that a plain folder of images trains without being
 * packed into shards first.
 *
 * Exactly one of `root` (a torchvision ImageFolder tree: files_walk.c),
 * `list` (a list file of paths or URLs, with or without labels) or `glob`
 * says which files (files_list.h). A sample holds the file's bytes as u8
 * [N] named by its lowercase extension (`jpg`, `png` ...), `label` (i64
 * scalar, when the entries have labels), `__key__` and `__url__`, as the
 * tar source gives them. Its identity is the file's index in the whole
 * list, and its origin that index and the bytes [0, size).
 *
 * Order: the kept files (shard=I/N: those f with f % N == I) in list
 * order, or with shuffle=true in an order shuffled per pass by a
 * generator keyed by (seed, stage, epoch). `readers` threads read ahead:
 * reader r reads the pass's files r, r + R, r + 2R ... into a queue of
 * `queue` samples of its own, and the consumer takes from each reader in
 * turn, so the stream depends on the seed alone while R files (R HTTP
 * requests) are in flight. poll() never blocks, so echo:factor=auto can
 * follow.
 *
 * Memory: a reader charges the budget for a file before it reads it (its
 * size, or for a body of unknown length each step of its growth), and
 * the charge goes with the sample into its queue. It waits for room
 * first, unless the consumer's next file is its own (no wait could end
 * then), so the readers together hold the budget and one file at most. A
 * file over the whole budget, or a body that grows past it, fails.
 *
 * Errors name the file and the reason; under on_error=skip a file that
 * cannot be read is dropped and counted as skipped (its reader hands over
 * an item without a sample, so the turns stay in step).
 *
 * Checkpoints: the state is the pass position of the next sample the
 * consumer takes; what the readers read ahead is read again. fetch()
 * reads a file whole again and checks its size against the origin.
 *
 * Lock rules: each reader is a feed (feed.h) of one thread whose queue
 * has its own lock; nothing else is shared but `stop` (an atomic) and
 * what create() built, which is read-only afterwards. Readers start in
 * open() and reset(), end after their last file, on an error, or when
 * their queue is closed; reset() and destroy() join them. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buffer.h"
#include "core/clock.h"
#include "core/sample.h"
#include "pipeline/feed.h"
#include "io/paths.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/checkpoint.h"
#include "stages/sources/files_list.h"
#include "pipeline/state.h"

typedef struct files_state files_state;

typedef struct {
    files_state *st;
    ef__feed feed;
    size_t next; /* its next index in the pass order */
    /* statistics, written by the reader thread only */
    _Atomic uint64_t bytes, read_ns, retries, files;
} reader;

struct files_state {
    ef__stage *s;
    ef__file_list list;
    ef__paths names; /* a view of the entries' urls, for checkpoints */
    /* every entry's __url__ and __key__ bytes (the list's sealed text,
     * at its entries' offsets), and label, in one buffer each, which
     * samples view: no allocation per sample for them */
    ef_buffer *text, *labels;
    ef__shard part;
    int64_t *kept, *order; /* this part's files, and this pass's order */
    size_t nkept;
    int shuffle, nreaders;
    size_t depth;
    ef__stream_opts sopts;
    int64_t epoch;   /* this pass, as the readers see it */
    atomic_int stop; /* readers stop reading (cancel, or reset) */
    /* `pos` for the readers: a reader waits for room in the budget only
     * while the consumer does not wait for its file (read_all) */
    atomic_size_t turn;
    reader *readers;
    /* consumer side */
    size_t pos;     /* pass index of the next sample to hand out */
    int restored;   /* the next start goes from `pos` */
    reader *failed; /* the one that handed over an error, if any */
};

/* ---- one file --------------------------------------------------------- */

/* What a reader holds of the budget while it reads file k of the pass,
 * and how it waits for room (ef__budget_reserve): only while the
 * consumer does not wait for file k. */
typedef struct {
    files_state *st;
    size_t k;
    uint64_t held; /* bytes charged to the budget */
} holding;

/* Whether the consumer's next file is h's: then h's reader goes on. */
static int is_next(const void *arg)
{
    const holding *h = arg;
    return atomic_load(&h->st->turn) == h->k;
}

/* Charges n more bytes for h's file, waiting for room (h NULL: a fetch,
 * which charges nothing: its caller holds the sample). EF_OK, or
 * EF_ECANCELED when the readers stop. */
static int hold_more(holding *h, uint64_t n)
{
    if (!h)
        return EF_OK;
    int rc = ef__budget_reserve(&h->st->s->ctx->budget, n, is_next, h,
                                &h->st->stop, NULL);
    if (rc == EF_OK)
        h->held += n;
    return rc;
}

/* Reads all of stream s into *out: one allocation when the size is
 * known (a local file), a growing one otherwise (HTTP), which grows to
 * the budget at most. What it allocates is charged to h's holding
 * first, so that the readers together hold no more than the budget (but
 * for the file the consumer waits for), and on failure is still held
 * there for the caller to give back. */
static int read_all(const files_state *st, ef__stream *s, holding *h,
                    ef_buffer **out, ef__err *err)
{
    const ef__budget *budget = &st->s->ctx->budget;
    int64_t size = ef__stream_size(s);
    *out = NULL;
    if (size >= 0) {
        if (!ef__budget_fits(budget, (uint64_t)size))
            return ef__budget_check(budget, (uint64_t)size, ef__stream_name(s),
                                    err);
        int rc = hold_more(h, (uint64_t)size);
        if (rc != EF_OK)
            return rc;
        ef_buffer *b = ef_buffer_new((size_t)size);
        if (!b)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                               ef__stream_name(s));
        rc = size ? ef__stream_read_full(s, ef_buffer_data(b), (size_t)size,
                                         "the file", err)
                  : EF_OK;
        char more;
        size_t got = 0;
        if (rc == EF_END)
            rc = ef__err_set(err, EF_EFORMAT, "%s: empty, expected %lld bytes",
                             ef__stream_name(s), (long long)size);
        if (rc == EF_OK)
            rc = ef__stream_read(s, &more, 1, &got, err);
        if (rc == EF_OK && got)
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: longer than the %lld bytes it had when "
                             "opened (it changed while read)",
                             ef__stream_name(s), (long long)size);
        if (rc != EF_OK) {
            ef_buffer_release(b);
            return rc;
        }
        *out = b;
        return EF_OK;
    }
    unsigned char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            /* double, up to the budget: a body that fills that is over
             * it, however long it goes on */
            size_t c = cap ? cap * 2 : (size_t)64 << 10;
            if (budget->limit && c > budget->limit)
                c = (size_t)budget->limit;
            int rc = c > cap ? hold_more(h, c - cap)
                             : ef__budget_check(budget, (uint64_t)cap + 1,
                                                ef__stream_name(s), err);
            unsigned char *more = rc == EF_OK ? ef__realloc(data, c) : NULL;
            if (!more) {
                if (rc == EF_OK)
                    rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                                     ef__stream_name(s));
                ef__free(data); /* realloc failing keeps it: freed here */
                return rc;
            }
            data = more;
            cap = c;
        }
        size_t got;
        int rc = ef__stream_read(s, data + n, cap - n, &got, err);
        if (rc != EF_OK) {
            ef__free(data);
            return rc;
        }
        if (!got)
            break;
        n += got;
    }
    *out = ef__buffer_adopt(data, n, ef__free, data);
    if (!*out) {
        ef__free(data);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                           ef__stream_name(s));
    }
    return EF_OK;
}

/* The sample of file f for pass `epoch`, its bytes `b` (taken). */
static int build(const files_state *st, int64_t f, int64_t epoch, ef_buffer *b,
                 ef_sample **out, ef__err *err)
{
    const ef__file_entry *e = &st->list.v[f];
    const char *url = ef__file_url(&st->list, (size_t)f);
    ef_sample_id id = {.index = f, .epoch = epoch};
    ef_sample *smp = ef_sample_new(id);
    int64_t n = (int64_t)ef_buffer_size(b);
    int rc = smp ? ef__sample_add_variable(
                       smp, ef__file_field(&st->list, (size_t)f), EF_U8, n, b, 0)
                 : EF_ENOMEM;
    ef_buffer_release(b);
    if (rc == EF_OK && st->list.labelled)
        rc = ef_sample_add(smp, "label", EF_I64, 0, NULL, st->labels,
                           (size_t)f * sizeof(int64_t));
    int64_t kn = (int64_t)strlen(ef__file_key(&st->list, (size_t)f));
    int64_t un = (int64_t)strlen(url);
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "__key__", EF_U8, kn, st->text,
                                     e->key);
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "__url__", EF_U8, un, st->text,
                                     e->url);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "files: %s: cannot build a sample: %s", url,
                           ef_strerror(rc));
    }
    smp->origin = (ef__origin){f, 0, n, NULL};
    *out = smp;
    return EF_OK;
}

/* Reads file f whole into a sample; errors name it. `r` (may be NULL)
 * counts the reading; `h` (may be NULL) is charged what it holds (see
 * read_all), which the caller gives back or hands on, failure or not. */
static int read_file(const files_state *st, int64_t f, int64_t epoch,
                     const atomic_int *cancelled, reader *r, holding *h,
                     ef_sample **out, ef__err *err)
{
    ef__stream_opts o = st->sopts;
    o.cancelled = cancelled;
    ef__stream *s = NULL;
    ef_buffer *b = NULL;
    *out = NULL;
    int rc = ef__stream_open(&s, ef__file_url(&st->list, (size_t)f), &o, err);
    if (rc == EF_OK)
        rc = read_all(st, s, h, &b, err);
    if (s && r) {
        ef__stream_stats ss;
        ef__stream_get_stats(s, &ss);
        ef__stat_add(&r->bytes, ss.raw_bytes);
        ef__stat_add(&r->read_ns, ef__s_to_ns(ss.read_s));
        ef__stat_add(&r->retries, ss.retries);
        ef__stat_add(&r->files, 1);
    }
    ef__stream_close(s);
    if (rc == EF_OK)
        return build(st, f, epoch, b, out, err);
    if (err->msg[0] == '\0' || err->status != rc)
        ef__err_set(err, rc, "%s: %s", ef__file_url(&st->list, (size_t)f),
                    ef_strerror(rc));
    char where[48];
    snprintf(where, sizeof where, "files: file %lld", (long long)f);
    ef__err_prefix(err, where);
    return rc;
}

/* ---- readers ----------------------------------------------------------- */

static void *reader_main(void *arg)
{
    reader *r = arg;
    files_state *st = r->st;
    for (size_t k = r->next; k < st->nkept; k += (size_t)st->nreaders) {
        if (atomic_load(&st->stop))
            return NULL;
        ef__err err;
        ef__err_clear(&err);
        ef_sample *smp;
        holding h = {st, k, 0};
        int rc = read_file(st, st->order[k], st->epoch, &st->stop, r, &h,
                           &smp, &err);
        ef__item item = {.status = EF_OK, .sample = smp};
        if (rc == EF_OK) { /* the queue takes the charge over */
            item.charged = h.held;
            if (ef__feed_push_charged(&r->feed, &item) != EF_OK)
                return NULL;
            continue;
        }
        ef__budget_release(&st->s->ctx->budget, h.held);
        if (rc == EF_ECANCELED || atomic_load(&st->stop))
            return NULL;
        if (!ef__stage_skip(st->s, &err)) {
            item = (ef__item){.status = rc, .msg = ef__strdup(err.msg)};
            ef__feed_push(&r->feed, &item);
            return NULL;
        }
        /* skipped: an item without a sample keeps the turns */
        if (ef__feed_push(&r->feed, &item) != EF_OK)
            return NULL;
    }
    return NULL;
}

/* The pass order: the kept files, shuffled by a generator keyed by the
 * seed, this stage and the epoch when asked. */
static void make_order(files_state *st, int64_t epoch)
{
    memcpy(st->order, st->kept, st->nkept * sizeof *st->order);
    if (st->shuffle)
        ef__shard_shuffle(st->s, epoch, st->order, st->nkept);
}

static void stop_readers(files_state *st)
{
    atomic_store(&st->stop, 1);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_cancel(&st->readers[i].feed);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_stop(&st->readers[i].feed);
}

/* Starts pass `epoch` from its start, or after a restore from `pos`:
 * reader i's first file is the first index >= pos that is i modulo R. */
static int start_readers(files_state *st, int64_t epoch, ef__err *err)
{
    st->epoch = epoch;
    make_order(st, epoch);
    atomic_store(&st->stop, 0);
    if (!st->restored)
        st->pos = 0;
    st->restored = 0;
    atomic_store(&st->turn, st->pos);
    st->failed = NULL;
    size_t nr = (size_t)st->nreaders;
    for (int i = 0; i < st->nreaders; i++) {
        reader *r = &st->readers[i];
        size_t base = st->pos - st->pos % nr;
        r->next = base + (size_t)i < st->pos ? base + nr + (size_t)i
                                             : base + (size_t)i;
        int rc = ef__feed_rewind(&r->feed, err);
        if (rc == EF_OK)
            rc = ef__feed_start(&r->feed, err);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}

/* ---- the stage ----------------------------------------------------------- */

/* Exactly one of root, list, glob builds the entries. */
static int make_list(files_state *st, const ef__opts *o, ef__err *err)
{
    const char *root = ef__opt_string(o, "root");
    const char *list = ef__opt_string(o, "list");
    const char *glob = ef__opt_string(o, "glob");
    int given = !!root[0] + !!list[0] + !!glob[0];
    if (given != 1)
        return ef__err_set(err, EF_ESPEC,
                           "files: expected exactly one of the options "
                           "'root' (an ImageFolder directory), 'list' (a "
                           "list file) or 'glob' (a pattern), got %d",
                           given);
    if (!root[0] &&
        (ef__opt_given(o, "extensions") || ef__opt_given(o, "allow_empty")))
        return ef__err_set(err, EF_ESPEC,
                           "files: options 'extensions' and 'allow_empty' "
                           "apply to 'root' only");
    if (glob[0] && ef__opt_given(o, "max_entries"))
        return ef__err_set(err, EF_ESPEC,
                           "files: option 'max_entries' applies to 'root' "
                           "and 'list' only");
    if (list[0])
        return ef__files_from_list(list, ef__opt_int(o, "max_entries"),
                                   &st->list, err);
    if (glob[0])
        return ef__files_from_glob(glob, &st->list, err);
    ef__file_exts exts;
    int rc = ef__file_exts_parse(ef__opt_string(o, "extensions"),
                                 "files: option 'extensions'", &exts, err);
    if (rc != EF_OK)
        return rc;
    return ef__files_from_folder(root, &exts, ef__opt_bool(o, "allow_empty"),
                                 ef__opt_int(o, "max_entries"), &st->list, err);
}

/* The shared buffers of url and key bytes and labels, and the names. */
static int make_buffers(files_state *st, ef__err *err)
{
    size_t n = st->list.n;
    st->text = ef__file_list_seal(&st->list);
    st->labels = ef_buffer_new(n * sizeof(int64_t));
    st->names.names = ef__malloc(n * sizeof *st->names.names);
    if (!st->text || !st->labels || !st->names.names)
        return ef__err_set(err, EF_ENOMEM, "files: out of memory");
    st->names.n = n;
    int64_t *lab = ef_buffer_data(st->labels);
    for (size_t i = 0; i < n; i++) {
        lab[i] = st->list.v[i].label;
        st->names.names[i] = st->list.text + st->list.v[i].url;
    }
    return EF_OK;
}

static int files_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    files_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->s = s;
    st->shuffle = ef__opt_bool(o, "shuffle");
    st->nreaders = (int)ef__opt_int(o, "readers");
    st->depth = (size_t)ef__opt_int(o, "queue");
    /* not ef__stream_opts_from: no max_inflate, as nothing is inflated
     * (a file.gz is its bytes) */
    ef__stream_opts_init(&st->sopts);
    st->sopts.tries = (int)ef__opt_int(o, "tries");
    st->sopts.timeout_s = ef__opt_float(o, "timeout");
    st->sopts.compression = 0;
    /* a FIFO listed or found in the tree would block its reader for good,
     * and close() with it */
    st->sopts.regular_only = 1;
    st->sopts.cancelled = &st->stop;
    int rc = ef__shard_parse(s, o, &st->part, err);
    if (rc == EF_OK)
        rc = make_list(st, o, err);
    if (rc == EF_OK)
        rc = make_buffers(st, err);
    if (rc != EF_OK)
        return rc;
    size_t n = st->list.n;
    if ((size_t)st->part.i >= n)
        return ef__err_set(err, EF_ESPEC,
                           "files: part %lld of shard=%lld/%lld gets no "
                           "file: there are %zu file%s",
                           (long long)st->part.i, (long long)st->part.i,
                           (long long)st->part.n, n, n == 1 ? "" : "s");
    st->nkept = (size_t)ef__shard_count(&st->part, (int64_t)n);
    if ((size_t)st->nreaders > st->nkept) /* the rest would have nothing */
        st->nreaders = (int)st->nkept;
    st->kept = ef__malloc(st->nkept * sizeof *st->kept);
    st->order = ef__malloc(st->nkept * sizeof *st->order);
    st->readers = ef__calloc((size_t)st->nreaders, sizeof *st->readers);
    if (!st->kept || !st->order || !st->readers)
        return ef__err_set(err, EF_ENOMEM, "files: out of memory");
    for (size_t k = 0; k < st->nkept; k++)
        st->kept[k] = st->part.i + (int64_t)k * st->part.n;
    for (int i = 0; i < st->nreaders && rc == EF_OK; i++) {
        reader *r = &st->readers[i];
        r->st = st;
        rc = ef__feed_init(&r->feed, s, st->depth, 1, reader_main, r, err);
    }
    return rc;
}

static int files_open(ef__stage *s, ef__err *err)
{
    return start_readers(s->state, s->epoch, err);
}

static int take(ef__stage *s, ef_sample **out, int block, ef__err *err)
{
    files_state *st = s->state;
    *out = NULL;
    if (st->failed)
        return ef__feed_final(&st->failed->feed, err);
    while (st->pos < st->nkept) {
        reader *r = &st->readers[st->pos % (size_t)st->nreaders];
        int rc = ef__feed_take(&r->feed, out, block, err);
        if (rc == EF_AGAIN)
            return rc;
        if (rc != EF_OK) {
            if (rc != EF_ECANCELED)
                st->failed = r;
            return rc;
        }
        st->pos++;
        /* a reader waiting for room may be the next one's */
        atomic_store(&st->turn, st->pos);
        ef__budget_notify(&s->ctx->budget);
        if (*out)
            return EF_OK;
        /* a file skipped under on_error=skip: go on with the next */
    }
    return EF_END;
}

static int files_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 1, err);
}

static int files_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take(s, out, 0, err);
}

static int files_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    files_state *st = s->state;
    stop_readers(st);
    return start_readers(st, epoch, err);
}

static void files_cancel(ef__stage *s)
{
    files_state *st = s->state;
    atomic_store(&st->stop, 1);
    for (int i = 0; i < st->nreaders; i++)
        ef__feed_cancel(&st->readers[i].feed);
}

/* ---- checkpoints ------------------------------------------------------- */

/* The record: the file list and part, then the pass position of the
 * next sample to hand out. */
static int files_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    files_state *st = s->state;
    ef__files_save(&st->names, o);
    ef__part_save(&st->part, o);
    ef__put_u64(o, st->pos);
    return EF_OK;
}

static int files_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    files_state *st = s->state;
    uint64_t pos;
    int rc = ef__files_restore(&st->names, "file", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&st->part, in);
    if (rc == EF_OK)
        rc = ef__get_count(in, "the position in the pass", st->nkept, &pos);
    if (rc != EF_OK)
        return rc;
    st->pos = (size_t)pos;
    st->restored = 1;
    return EF_OK;
}

/* File d->part read again whole, on a stream of its own: any thread, any
 * time. Another size than the origin's means the file changed. */
static int files_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    files_state *st = s->state;
    *out = NULL;
    int64_t f = d->part;
    if (f < 0 || (size_t)f >= st->list.n || f % st->part.n != st->part.i ||
        d->id.index != f || d->offset != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "files: the state names file %lld (sample %lld, "
                           "bytes %lld-%lld): expected a file of part %lld "
                           "of %lld of the %zu files, from byte 0",
                           (long long)f, (long long)d->id.index,
                           (long long)d->offset, (long long)d->end,
                           (long long)st->part.i, (long long)st->part.n,
                           st->list.n);
    ef_sample *smp;
    int rc = read_file(st, f, d->id.epoch, &s->ctx->cancelled, NULL, NULL,
                       &smp, err);
    if (rc != EF_OK) {
        ef__fetch_failed(err, rc, "file");
        return rc;
    }
    if (smp->origin.end != d->end) {
        long long got = (long long)smp->origin.end;
        ef_sample_free(smp);
        return ef__err_set(err, EF_EFORMAT,
                           "files: file %lld: %s has %lld bytes, the state "
                           "says %lld: the file changed since the state was "
                           "saved",
                           (long long)f, ef__file_url(&st->list, (size_t)f),
                           got, (long long)d->end);
    }
    *out = smp;
    return EF_OK;
}

static void files_destroy(ef__stage *s)
{
    files_state *st = s->state;
    if (st->readers) {
        stop_readers(st);
        for (int i = 0; i < st->nreaders; i++)
            ef__feed_destroy(&st->readers[i].feed);
    }
    ef_buffer_release(st->text);
    ef_buffer_release(st->labels);
    ef__free(st->names.names); /* a view: the entries own the urls */
    ef__file_list_free(&st->list);
    ef__free(st->kept);
    ef__free(st->order);
    ef__free(st->readers);
    ef__free(st);
}

static void files_stats(const ef__stage *s, ef_stage_stats *out)
{
    const files_state *st = s->state;
    uint64_t files = 0, bytes = 0, ns = 0, retries = 0;
    for (int i = 0; i < st->nreaders; i++) {
        const reader *r = &st->readers[i];
        files += ef__stat_get(&r->files);
        bytes += ef__stat_get(&r->bytes);
        ns += ef__stat_get(&r->read_ns);
        retries += ef__stat_get(&r->retries);
    }
    ef__stats_extra(out, "files", (double)files);
    ef__stats_extra(out, "bytes", (double)bytes);
    /* summed over the readers' time inside reads, so per reader */
    ef__stats_extra(out, "MB/s",
                    ns ? (double)bytes / 1e6 / ef__ns_to_s(ns) : 0);
    ef__stats_extra(out, "retries", (double)retries);
}

/* The number of files is known once they are listed. */
static int files_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    (void)err;
    const files_state *st = s->state;
    *n = (int64_t)st->nkept;
    return EF_OK;
}

static const ef__option_def files_options[] = {
    EF__OPT(
        "root", EF_OPT_STRING, "",
        "ImageFolder directory: ROOT/CLASS/.../FILE, label = class index in "
        "sorted order (torchvision's order)",
        0, 0),
    EF__OPT("list", EF_OPT_STRING, "",
            "list file: lines 'path', 'path label' or 'path,label'; paths or "
            "http(s) URLs, relative to the list's directory; '#' comments",
            0, 0),
    EF__OPT("glob", EF_OPT_STRING, "",
            "glob(3) pattern, matches in byte order, no labels", 0, 0),
    EF__OPT("extensions", EF_OPT_STRING, EF__FILES_IMG_EXTENSIONS,
            "root: extensions kept, case-insensitive", 0, 0),
    EF__OPT("allow_empty", EF_OPT_BOOL, "false",
            "root: a class folder without a file is no error", 0, 0),
    /* a guard: a walk that ends lists the same files whatever it is */
    EF__OPT("max_entries", EF_OPT_INT, "20000000",
            "root: files and folders walked at most (links can reach a folder "
            "by many paths); list: entries read at most",
            1, 1e12, EF__SPEED_ONLY),
    EF__OPT("shuffle", EF_OPT_BOOL, "false",
            "read the files in a seeded order, new each epoch", 0, 0),
    EF__OPT("readers", EF_OPT_INT, "8",
            "threads reading files ahead (HTTP requests in flight)", 1, 256,
            EF__SPEED_ONLY),
    EF__OPT("queue", EF_OPT_INT, "4", "files read ahead per reader", 1,
            1 << 16, EF__SPEED_ONLY),
    EF__OPT("tries", EF_OPT_INT, "5", "HTTP attempts per file before giving up",
            1, 100, EF__SPEED_ONLY),
    EF__OPT(
        "timeout", EF_OPT_FLOAT, "30",
        "HTTP: seconds an attempt may go without a byte, wait for its headers, "
        "or get under 1 KiB/s of body",
        0.001, 86400, EF__SPEED_ONLY),
    EF__SHARD_OPTION,
};

/* A sample's file: its origin.part is the file's index in the list. */
static const char *files_part_name(const ef__stage *s, int64_t part)
{
    const files_state *st = s->state;
    return part >= 0 && (size_t)part < st->names.n ? st->names.names[part]
                                                   : NULL;
}

const ef__stage_def ef__stage_files = {
    .info = {"files",
             "single files (an ImageFolder tree, a list, a glob): bytes as "
             "a field named by the extension, label, __key__, __url__",
             EF__OPTIONS(files_options)},
    .is_source = 1,
    .create = files_create,
    .open = files_open,
    .next = files_next,
    .poll = files_poll,
    .reset = files_reset,
    .cancel = files_cancel,
    .destroy = files_destroy,
    .stats = files_stats,
    .save = files_save,
    .restore = files_restore,
    .fetch = files_fetch,
    .length = files_length,
    .part_name = files_part_name,
};
