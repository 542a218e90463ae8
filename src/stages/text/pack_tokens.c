/* SPDX-License-Identifier: Apache-2.0 */
/* pack_tokens: language-model training samples from documents of token
 * ids, as nanoGPT cuts its token files. The documents' ids (an i32 [n]
 * field, `field`), each followed by `eos` when one is given, run together
 * into one stream, which is cut into samples of two i32 [block] fields:
 * `inputs`, tokens k to k + block, and `targets`, the same shifted by one
 * (the next token to predict). Consecutive samples step by `block`, so
 * every token of the stream is a target once (but the first).
 *
 * A block needs block + 1 tokens. What is left at the end of a pass (fewer
 * than block + 1 tokens) starts no block: it is dropped, and counted in the
 * stage's stats (tail_tokens). Fields other than `field` are not carried:
 * a block mixes documents. An empty document adds only its eos (or
 * nothing). A document without the field, or with one that is not i32
 * 1-D, is an error naming it (EF_ESHAPE); on_error=skip drops it.
 *
 * Identity: a block is sample `index` of its pass (as batch numbers its
 * batches), and its origin lists the documents whose tokens it holds
 * (members) with, in origin.offset, the tokens of the first one that went
 * into earlier blocks: fetch() makes it again from them. Checkpoints save
 * the block number and that offset for the documents held, which go to
 * the replay list: a restore reads them again by identity and goes on
 * with the same blocks. As a batch lists its examples, a block lists its
 * documents (ef_sample_members). A batch of blocks keeps only the blocks'
 * identities (one level of members, state.h), so a stage after batch that
 * holds batches (batch echoing, a shuffle of batches) cannot be restored:
 * fetch says so (EF_EUNSUPPORTED); echo and shuffle blocks before batch.
 *
 * Cost: a block's tokens are copied once into each output field (two
 * memcpy per document it spans); the only allocations per block are its
 * sample, one buffer for both fields and its member list. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

/* A document held: its token ids (bytes, maybe unaligned: only copied
 * with memcpy) and its length in the stream, the ids and the eos. */
typedef struct {
    ef_sample *doc; /* owned */
    const unsigned char *tok;
    int64_t ntok, len;
} held_doc;

typedef struct {
    int64_t block;
    int has_eos;
    int32_t eos;
    char field[EF_MAX_NAME];
    /* the pass: documents held[first .. first + n), the first `skip`
     * tokens of held[first] already behind the stream's position, `avail`
     * tokens from it on */
    held_doc *held;
    size_t first, n, cap;
    int64_t skip, avail;
    int64_t block_no; /* blocks emitted this pass: the next one's index */
    /* after a restore, until the first document comes back: its skip */
    int64_t pending_skip;
    /* statistics (the pulling thread writes them) */
    _Atomic uint64_t tokens, tail_tokens, empty_docs;
} pack_state;

static int pack_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    pack_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->block = ef__opt_int(o, "block");
    st->has_eos = ef__opt_given(o, "eos");
    st->eos = st->has_eos ? (int32_t)ef__opt_int(o, "eos") : 0;
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= sizeof st->field)
        return ef__err_set(err, EF_ESPEC,
                           "pack_tokens: option 'field' must be 1 to %d "
                           "bytes (got '%s')",
                           EF_MAX_NAME - 1, field);
    strcpy(st->field, field);
    return EF_OK;
}

/* The token ids of `doc` into *h (which borrows them), or EF_ESHAPE
 * naming the document, the field and what it holds. */
static int doc_tokens(const ef__stage *s, const pack_state *st, ef_sample *doc,
                      held_doc *h, ef__err *err)
{
    char where[256], shape[96];
    int f = ef__sample_find(doc, st->field);
    const ef__field *x = f >= 0 ? &doc->fields[f] : NULL;
    if (x && x->dtype == EF_I32 && x->ndim == 1) {
        h->doc = doc;
        h->tok = (const unsigned char *)ef_buffer_data(x->buf) + x->offset;
        h->ntok = x->shape[0];
        h->len = h->ntok + st->has_eos;
        return EF_OK;
    }
    ef__stage_where(s, doc, where, sizeof where);
    if (!x)
        return ef__err_set(err, EF_ESHAPE,
                           "pack_tokens: %s has no field '%s', expected i32 "
                           "token ids [n] there",
                           where, st->field);
    ef__shape_format(shape, sizeof shape, x->ndim, x->shape);
    return ef__err_set(err, EF_ESHAPE,
                       "pack_tokens: field '%s' of %s is %s %s, expected "
                       "i32 token ids [n] (1-D)",
                       st->field, where, ef_dtype_name(x->dtype), shape);
}

/* Copies `count` tokens of the stream that h[0..) make, from token `pos`
 * of h[0] on, into dst. The documents hold them. */
static void gather(const held_doc *h, int64_t pos, int64_t count, int32_t eos,
                   int32_t *dst)
{
    for (; count > 0; h++, pos = 0) {
        if (pos >= h->len) {
            pos -= h->len;
            continue;
        }
        if (pos < h->ntok) {
            int64_t k = h->ntok - pos < count ? h->ntok - pos : count;
            memcpy(dst, h->tok + (size_t)pos * sizeof(int32_t),
                   (size_t)k * sizeof(int32_t));
            dst += k;
            count -= k;
            pos += k;
        }
        if (count > 0 && pos < h->len) { /* the document's eos */
            *dst++ = eos;
            count--;
        }
    }
}

/* How many of h[0..) the block that starts at token `pos` of h[0] spans
 * (its block + 1 tokens, the targets' last one included). */
static size_t spanned(const held_doc *h, int64_t pos, int64_t need)
{
    size_t m = 0;
    for (; need > 0; m++, pos = 0)
        need -= h[m].len - pos;
    return m;
}

/* The block that starts at token `skip` of h[0], with identity `id`:
 * its documents' identities become its members (or `members`, when
 * given, a reference taken). */
static int build(const pack_state *st, const held_doc *h, int64_t skip,
                 ef_sample_id id, ef_buffer *members, ef_sample **out,
                 ef__err *err)
{
    int64_t n = st->block;
    size_t m = spanned(h, skip, n + 1);
    int fill = !members;
    ef_sample *b = ef_sample_new(id);
    ef_buffer *buf = b ? ef_buffer_new((size_t)n * 2 * sizeof(int32_t)) : NULL;
    if (members)
        ef_buffer_retain(members);
    else if (buf)
        members = ef_buffer_new(m * sizeof(ef__ident));
    int rc = members ? EF_OK : EF_ENOMEM;
    if (rc == EF_OK)
        rc = ef_sample_add(b, "inputs", EF_I32, 1, &n, buf, 0);
    if (rc == EF_OK)
        rc = ef_sample_add(b, "targets", EF_I32, 1, &n, buf,
                           (size_t)n * sizeof(int32_t));
    if (rc != EF_OK) {
        ef_buffer_release(buf);
        ef_buffer_release(members);
        ef_sample_free(b);
        return ef__err_set(err, rc, "pack_tokens: block %lld: %s",
                           (long long)id.index, ef_strerror(rc));
    }
    int32_t *dst = ef_buffer_data(buf);
    gather(h, skip, n, st->eos, dst);
    gather(h, skip + 1, n, st->eos, dst + n);
    ef_buffer_release(buf); /* the sample holds it */
    if (fill) {
        ef__ident *d = ef_buffer_data(members);
        for (size_t i = 0; i < m; i++) {
            const ef_sample *p = h[i].doc;
            /* documents that are batches keep only the outer level */
            d[i] = (ef__ident){p->id, p->origin.part, p->origin.offset,
                               p->origin.end, NULL};
        }
    }
    b->origin.members = members;
    b->origin.offset = skip; /* the block: tokens [offset, end) of them */
    b->origin.end = skip + n + 1;
    *out = b;
    return EF_OK;
}

/* Makes room for one more held document. */
static int hold_room(pack_state *st)
{
    if (st->first > 0 && st->first + st->n == st->cap) {
        memmove(st->held, st->held + st->first, st->n * sizeof *st->held);
        st->first = 0;
    }
    if (st->n < st->cap)
        return EF_OK;
    held_doc *h = ef__grow(st->held, &st->cap, 16, sizeof *h);
    if (!h)
        return EF_ENOMEM;
    st->held = h;
    return EF_OK;
}

/* Takes a document pulled from the upstream (owning it): held, dropped
 * when it adds no token, or refused. */
static int take(ef__stage *s, pack_state *st, ef_sample *doc, ef__err *err)
{
    held_doc h;
    int rc = doc_tokens(s, st, doc, &h, err);
    if (rc == EF_OK && h.len > 0 && st->n == 0 && st->pending_skip > 0 &&
        st->pending_skip >= h.len)
        rc = ef__err_set(err, EF_EFORMAT,
                         "pack_tokens: the state says %lld tokens of item "
                         "%lld (epoch %lld) went into blocks already, but it "
                         "makes %lld now: the data changed since the state "
                         "was saved",
                         (long long)st->pending_skip, (long long)doc->id.index,
                         (long long)doc->id.epoch, (long long)h.len);
    if (rc == EF_OK && h.len > 0)
        rc = hold_room(st) == EF_OK
                 ? EF_OK
                 : ef__err_set(err, EF_ENOMEM, "pack_tokens: out of memory");
    if (rc != EF_OK || h.len == 0) {
        ef_sample_free(doc);
        if (rc == EF_OK)
            ef__stat_add(&st->empty_docs, 1);
        return rc == EF_ESHAPE && ef__stage_skip(s, err) ? EF_OK : rc;
    }
    if (st->n == 0) { /* the first after a restore starts part way */
        st->skip = st->pending_skip;
        st->avail = -st->skip;
        st->pending_skip = 0;
    }
    st->held[st->first + st->n++] = h;
    st->avail += h.len;
    ef__stat_add(&st->tokens, (uint64_t)h.len);
    return EF_OK;
}

/* Frees what the pass holds. */
static void drop_held(pack_state *st)
{
    for (size_t i = 0; i < st->n; i++)
        ef_sample_free(st->held[st->first + i].doc);
    st->first = st->n = 0;
    st->skip = st->avail = 0;
}

static int pack_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    pack_state *st = s->state;
    while (st->avail < st->block + 1) {
        ef_sample *doc;
        int rc = ef__stage_pull(s, &doc, err);
        if (rc == EF_END && st->n > 0)
            ef__stat_add(&st->tail_tokens, (uint64_t)st->avail);
        if (rc == EF_END)
            drop_held(st);
        if (rc == EF_OK)
            rc = take(s, st, doc, err);
        if (rc != EF_OK)
            return rc;
    }
    ef_sample_id id = {.index = st->block_no, .epoch = s->epoch};
    int rc = build(st, st->held + st->first, st->skip, id, NULL, out, err);
    if (rc != EF_OK)
        return rc;
    st->block_no++;
    st->skip += st->block;
    st->avail -= st->block;
    while (st->skip >= st->held[st->first].len) { /* avail > 0: one stays */
        st->skip -= st->held[st->first].len;
        ef_sample_free(st->held[st->first].doc);
        st->first++;
        st->n--;
    }
    return EF_OK;
}

static int pack_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    pack_state *st = s->state;
    drop_held(st);
    st->block_no = 0;
    st->pending_skip = 0;
    return ef__stage_reset_upstream(s, epoch, err);
}

/* The record: the block number and the tokens of the first document held
 * already in blocks; the documents held go to the replay list. */
static int pack_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    pack_state *st = s->state;
    ef__put_i64(o, st->block_no);
    ef__put_i64(o, st->n > 0 ? st->skip : st->pending_skip);
    for (size_t i = 0; i < st->n; i++)
        ef__state_replay(o, st->held[st->first + i].doc);
    return EF_OK;
}

static int pack_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    pack_state *st = s->state;
    int64_t block_no, skip;
    ef__get_i64(in, "the block number", &block_no);
    int rc =
        ef__get_i64(in, "the tokens of the first document in blocks", &skip);
    if (rc != EF_OK)
        return rc;
    if (block_no < 0 || skip < 0)
        return ef__state_bad(in,
                             "block %lld, %lld tokens in blocks: expected 0 "
                             "or more",
                             (long long)block_no, (long long)skip);
    st->block_no = block_no;
    st->pending_skip = skip;
    return EF_OK;
}

/* A block made again from its documents, fetched one by one. */
static int pack_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                      ef__err *err)
{
    pack_state *st = s->state;
    size_t n;
    const ef__ident *m = ef__ident_members(d, &n);
    if (n == 0) /* batch.c keeps one level of members */
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "pack_tokens: block %lld is named without its "
                           "documents, as a batch of blocks names it: a "
                           "stage after batch that holds batches (echo, "
                           "shuffle) cannot read them again; echo or "
                           "shuffle the blocks before batch",
                           (long long)d->id.index);
    if (n > (size_t)st->block + 1 || d->offset < 0)
        return ef__err_set(err, EF_EFORMAT,
                           "pack_tokens: the state names block %lld of %zu "
                           "documents from token %lld on, expected 1 to "
                           "%lld documents",
                           (long long)d->id.index, n, (long long)d->offset,
                           (long long)st->block + 1);
    held_doc *h = ef__calloc(n, sizeof *h);
    if (!h)
        return ef__err_set(err, EF_ENOMEM, "pack_tokens: out of memory");
    int rc = EF_OK;
    int64_t total = -d->offset;
    for (size_t i = 0; i < n && rc == EF_OK; i++) {
        ef_sample *doc;
        rc = ef__stage_fetch(s->up, &m[i], &doc, err);
        if (rc == EF_OK && !doc)
            rc = ef__err_set(err, EF_EFORMAT,
                             "pack_tokens: item %lld of block %lld could not "
                             "be read again",
                             (long long)m[i].id.index, (long long)d->id.index);
        if (rc == EF_OK && (rc = doc_tokens(s, st, doc, &h[i], err)) != EF_OK)
            ef_sample_free(doc);
        total += rc == EF_OK ? h[i].len : 0;
    }
    if (rc == EF_OK &&
        (total < st->block + 1 || total - h[n - 1].len >= st->block + 1))
        rc = ef__err_set(err, EF_EFORMAT,
                         "pack_tokens: block %lld: its %zu documents make "
                         "%lld tokens from token %lld of the first on, "
                         "expected a block of %lld spanning all of them: the "
                         "data changed since the state was saved",
                         (long long)d->id.index, n, (long long)total,
                         (long long)d->offset, (long long)st->block + 1);
    if (rc == EF_OK)
        rc = build(st, h, d->offset, d->id, d->members, out, err);
    for (size_t i = 0; i < n; i++)
        ef_sample_free(h[i].doc);
    ef__free(h);
    return rc;
}

static void pack_destroy(ef__stage *s)
{
    pack_state *st = s->state;
    if (!st)
        return;
    drop_held(st);
    ef__free(st->held);
    ef__free(st);
}

static void pack_stats(const ef__stage *s, ef_stage_stats *out)
{
    const pack_state *st = s->state;
    /* tokens: the stream's, eos included */
    ef__stats_extra(out, "tokens", (double)ef__stat_get(&st->tokens));
    ef__stats_extra(out, "tail_tokens", (double)ef__stat_get(&st->tail_tokens));
    ef__stats_extra(out, "empty_docs", (double)ef__stat_get(&st->empty_docs));
}

/* The blocks depend on the documents' lengths, known only once read. */
static int pack_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)s;
    if (up == 0 || up == EF__LENGTH_ENDLESS) {
        *n = up;
        return EF_OK;
    }
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "pack_tokens: the number of blocks depends on the "
                       "documents' token counts, not known before reading "
                       "them");
}

static const ef__option_def pack_options[] = {
    EF__OPT("block", EF_OPT_INT, NULL,
            "tokens per sample: inputs and targets are i32 [block]", 1,
            1 << 26),
    EF__OPT("eos", EF_OPT_INT, "",
            "token id appended after each document (none: nothing)", 0,
            2147483647),
    EF__OPT("field", EF_OPT_STRING, "tokens",
            "the documents' i32 [n] field of token ids", 0, 0),
};

const ef__stage_def ef__stage_pack_tokens = {
    .info = {"pack_tokens",
             "documents' token ids as one stream cut into blocks: inputs "
             "and next-token targets, i32 [block] (the tail is dropped)",
             EF__OPTIONS(pack_options)},
    .create = pack_create,
    .next = pack_next,
    .reset = pack_reset,
    .destroy = pack_destroy,
    .stats = pack_stats,
    .save = pack_save,
    .restore = pack_restore,
    .fetch = pack_fetch,
    .length = pack_length,
};
