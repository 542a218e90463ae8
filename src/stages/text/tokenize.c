/* SPDX-License-Identifier: Apache-2.0 */
/* tokenize: text to token ids, for language models (before pack_tokens).
 * The field `field` (UTF-8 text, u8 [n]) of each sample is encoded with
 * the tokenizer in `model` into the i32 [m] field `out`, which takes the
 * text's place (text=drop) or follows the other fields (text=keep).
 * Other fields pass through, sharing their payload.
 *
 * The model is a SentencePiece model or a tiktoken rank file (byte-level
 * BPE split as GPT-2 does, tiktoken's encode_ordinary: special tokens are
 * ordinary text); kind=auto tells them apart by the first line (see
 * src/tokenizer/). It is loaded once, when the stage is created, and
 * shared by the worker threads: a parallel, ordered map, so checkpoints
 * and the output order are those of any ordered map. A worker hands a
 * run's documents to the tokenizer together, with its working memory
 * kept, and the run's ids go into one buffer that the outputs view.
 *
 * Memory: the working memory counts against the pipeline's memory budget
 * while it is held (charged without waiting, as a worker cannot wait for
 * the consumer): the ids of the documents being encoded, at most one id
 * per byte of text, and what the tokenizer takes beyond them (a long
 * piece's merge, SentencePiece's lattice). A document whose working
 * memory alone passes the budget fails, naming its sizes. Bytes that
 * are not UTF-8 are encoded too (SentencePiece as it does; the BPE as pieces of
 * their own), never an error. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/budget.h"
#include "core/buffer.h"
#include "core/sample.h"
#include "pipeline/map.h"
#include "pipeline/stage.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ef__tokenizer *tok; /* owned; immutable once loaded */
    ef__budget *budget; /* the pipeline's: working memory counts there */
    char field[EF_MAX_NAME], out[EF_MAX_NAME];
    int keep; /* text=keep */
    /* statistics (several writers: the workers) */
    _Atomic uint64_t tokens, bytes;
} tok_params;

/* A worker's working memory (ef__map_kernel): the tokenizer's, and the
 * ids of the run it was last handed, document after document, which the
 * outputs view in one buffer: no allocation and no copy per document. */
typedef struct {
    ef__tok_scratch *tok;
    size_t *at;         /* document i's ids: [at[i], at[i + 1]) */
    size_t cap;         /* room in at */
    size_t ndocs;       /* documents of the run encoded; 0: none */
    ef_buffer *run_ids; /* their ids, i32; the outputs' */
} tok_scratch;

/* Ids as a buffer of their own, without a copy; ids is emptied. NULL when
 * out of memory (ids unchanged). */
static ef_buffer *ids_buffer(ef__ids *ids)
{
    ef_buffer *b =
        ef__buffer_adopt(ids->v, ids->n * sizeof *ids->v, ef__free, ids->v);
    if (b)
        *ids = (ef__ids){0};
    return b;
}

/* The output: `in`'s fields, the n ids at `offset` in `ids` (a new
 * reference taken) in place of field f or after the rest. */
static int output(const ef_sample *in, const tok_params *p, int f,
                  ef_buffer *ids, size_t offset, int64_t n, ef_sample **out)
{
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    for (int i = 0; i <= in->nfields && rc == EF_OK; i++) {
        if (i == (p->keep ? in->nfields : f))
            rc = ef__sample_add_variable(o, p->out, EF_I32, n, ids, offset);
        if (i < in->nfields && i != (p->keep ? -1 : f) && rc == EF_OK) {
            rc = ef__sample_add_field(o, &in->fields[i]);
        }
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return rc;
    }
    *out = o;
    return EF_OK;
}

/* The index of `in`'s text field into *f: EF_OK, or EF_ESHAPE saying why
 * in err. */
static int find_text(const ef_sample *in, const tok_params *p, int *f,
                     ef__err *err)
{
    *f = ef__sample_find(in, p->field);
    if (*f < 0)
        return ef__err_set(err, EF_ESHAPE,
                           "no field '%s'; expected UTF-8 text there as u8 "
                           "[n] (option field)",
                           p->field);
    const ef__field *x = &in->fields[*f];
    if (x->dtype != EF_U8 || x->ndim != 1) {
        char shape[96];
        ef__shape_format(shape, sizeof shape, x->ndim, x->shape);
        return ef__err_set(err, EF_ESHAPE,
                           "field '%s' is %s %s; expected UTF-8 text as u8 "
                           "[n]",
                           p->field, ef_dtype_name(x->dtype), shape);
    }
    int o = ef__sample_find(in, p->out);
    if (o >= 0 && (o != *f || p->keep))
        return ef__err_set(err, EF_ESHAPE,
                           "the sample has a field '%s' already, the name of "
                           "the token ids (option out)",
                           p->out);
    return EF_OK;
}

static const unsigned char *text_of(const ef__field *x)
{
    return (const unsigned char *)ef_buffer_data(x->buf) + x->offset;
}

/* Working memory taken (bytes > 0) or given back (bytes < 0): charged to
 * the budget, unless it alone passes it (ef__tok_charge). */
static int charge_work(void *arg, int64_t bytes, ef__err *err)
{
    ef__budget *b = arg;
    if (bytes < 0) {
        ef__budget_release(b, (uint64_t)-bytes);
        return EF_OK;
    }
    if (!ef__budget_fits(b, (uint64_t)bytes))
        return ef__budget_check(b, (uint64_t)bytes, "its working memory", err);
    ef__budget_hold(b, (uint64_t)bytes);
    return EF_OK;
}

/* Charges the ids of a text of n bytes (one per byte at most) to the
 * budget, refusing a text whose ids alone pass it. */
static int charge_ids(const tok_params *p, size_t n, ef__err *err)
{
    int rc = charge_work(p->budget, (int64_t)(n * sizeof(int32_t)), err);
    if (rc != EF_OK) {
        char what[96];
        snprintf(what, sizeof what, "the ids of a text of %zu bytes", n);
        ef__err_prefix(err, what);
    }
    return rc;
}

static void *scratch_new(void *user)
{
    tok_params *p = user;
    tok_scratch *sc = ef__calloc(1, sizeof *sc);
    if (sc && !(sc->tok = ef__tokenizer_scratch_new(p->tok))) {
        ef__free(sc);
        sc = NULL;
    }
    if (sc)
        ef__tokenizer_scratch_charge(sc->tok, charge_work, p->budget);
    return sc;
}

static void scratch_free(void *user, void *scratch)
{
    (void)user;
    tok_scratch *sc = scratch;
    ef__tokenizer_scratch_free(sc->tok);
    ef_buffer_release(sc->run_ids);
    ef__free(sc->at);
    ef__free(sc);
}

/* A run's documents handed to the tokenizer together, their ids into one
 * buffer. Anything amiss (a sample without its text, a failed encode, no
 * memory) leaves the run to tokenize_fn item by item, which says what. */
static void run_begin(void *user, void *scratch, const ef__item *items,
                      size_t n)
{
    const tok_params *p = user;
    tok_scratch *sc = scratch;
    ef_buffer_release(sc->run_ids);
    sc->run_ids = NULL;
    sc->ndocs = 0;
    if (n + 1 > sc->cap) {
        size_t *at = ef__realloc(sc->at, (n + 1) * sizeof *at);
        if (!at)
            return;
        sc->at = at;
        sc->cap = n + 1;
    }
    ef__ids ids = {0};
    ef__err err;
    size_t i = 0, text = 0; /* bytes of text whose ids are charged */
    for (; i < n; i++) {
        int f;
        if (find_text(items[i].sample, p, &f, &err) != EF_OK)
            break;
        const ef__field *x = &items[i].sample->fields[f];
        sc->at[i] = ids.n;
        if (charge_ids(p, (size_t)x->shape[0], &err) != EF_OK)
            break;
        text += (size_t)x->shape[0];
        if (ef__tokenizer_encode(p->tok, sc->tok, text_of(x),
                                 (size_t)x->shape[0], &ids, &err) != EF_OK)
            break;
    }
    /* the outputs hold the ids from here on, and the queues after the
     * map count them */
    charge_work(p->budget, -(int64_t)(text * sizeof(int32_t)), NULL);
    sc->at[i] = ids.n;
    if (i == n && (ids.v || ef__ids_reserve(&ids, 1) == EF_OK) &&
        (sc->run_ids = ids_buffer(&ids)) != NULL)
        sc->ndocs = n;
    ef__free(ids.v);
}

static int tokenize_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    tok_params *p = ef_map_ctx_user(ctx);
    ef__err err;
    ef__err_clear(&err);
    int f;
    int rc = find_text(in, p, &f, &err);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    const ef__field *x = &in->fields[f];
    tok_scratch *sc = ef__map_ctx_scratch(ctx);
    size_t i = ef__map_ctx_index(ctx);
    ef_buffer *ids_buf;
    size_t first, count;
    if (sc && i < sc->ndocs) { /* encoded with its run */
        ids_buf = ef_buffer_retain(sc->run_ids);
        first = sc->at[i];
        count = sc->at[i + 1] - first;
    } else { /* alone: a restore's fetch, or a run gone wrong */
        ef__ids ids = {0};
        size_t n = (size_t)x->shape[0];
        rc = charge_ids(p, n, &err);
        if (rc == EF_OK) {
            rc = ef__tokenizer_encode(p->tok, sc ? sc->tok : NULL,
                                      text_of(x), n, &ids, &err);
            charge_work(p->budget, -(int64_t)(n * sizeof(int32_t)), NULL);
        }
        if (rc == EF_OK && !ids.v)
            rc = ef__ids_reserve(&ids, 1);
        ids_buf = rc == EF_OK ? ids_buffer(&ids) : NULL;
        ef__free(ids.v);
        if (rc != EF_OK)
            return ef_map_ctx_fail(ctx, rc, "field '%s': %s", p->field,
                                   rc == EF_ENOMEM && !err.msg[0]
                                       ? "out of memory"
                                       : err.msg);
        if (!ids_buf)
            return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
        first = 0;
        count = ef_buffer_size(ids_buf) / sizeof(int32_t);
    }
    rc =
        output(in, p, f, ids_buf, first * sizeof(int32_t), (int64_t)count, out);
    ef_buffer_release(ids_buf); /* the output holds its own */
    if (rc != EF_OK)            /* out of memory, or EF_MAX_FIELDS fields */
        return ef_map_ctx_fail(ctx, rc, "cannot add the field '%s': %s", p->out,
                               ef_strerror(rc));
    atomic_fetch_add_explicit(&p->tokens, count, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->bytes, (uint64_t)x->shape[0],
                              memory_order_relaxed);
    return EF_OK;
}

static void params_free(tok_params *p)
{
    if (p)
        ef__tokenizer_free(p->tok);
    ef__free(p);
}

/* Options field, out, kind and text into p. */
static int parse_options(const ef__opts *o, tok_params *p, ef__tok_kind *kind,
                         ef__err *err)
{
    const char *names[2] = {"field", "out"};
    char *dst[2] = {p->field, p->out};
    for (int i = 0; i < 2; i++) {
        const char *v = ef__opt_string(o, names[i]);
        if (!v[0] || strlen(v) >= EF_MAX_NAME)
            return ef__err_set(err, EF_ESPEC,
                               "stage 'tokenize': option '%s' must be a "
                               "field name of 1 to %d bytes, got '%s'",
                               names[i], EF_MAX_NAME - 1, v);
        strcpy(dst[i], v);
    }
    int drop;
    int rc = ef__opt_choice(o, "tokenize", "text", "drop", "keep", &drop, err);
    if (rc != EF_OK)
        return rc;
    p->keep = !drop;
    if (p->keep && !strcmp(p->field, p->out))
        return ef__err_set(err, EF_ESPEC,
                           "stage 'tokenize': with text=keep, option 'out' "
                           "must differ from 'field' (both '%s')",
                           p->out);
    const char *k = ef__opt_string(o, "kind");
    *kind = !strcmp(k, "auto")            ? EF__TOK_AUTO
            : !strcmp(k, "sentencepiece") ? EF__TOK_SENTENCEPIECE
            : !strcmp(k, "tiktoken")      ? EF__TOK_TIKTOKEN
                                          : (ef__tok_kind)-1;
    if ((int)*kind < 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'tokenize': option 'kind' must be auto, "
                           "sentencepiece or tiktoken, got '%s'",
                           k);
    if (!ef__opt_string(o, "model")[0])
        return ef__err_set(err, EF_ESPEC,
                           "stage 'tokenize': option 'model' is required: "
                           "the path of a SentencePiece model or a tiktoken "
                           "rank file");
    return EF_OK;
}

static int tokenize_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tok_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "tokenize: out of memory");
    ef__tok_kind kind = EF__TOK_AUTO;
    int rc = parse_options(o, p, &kind, err);
    if (rc == EF_OK) {
        rc = ef__tokenizer_load(ef__opt_string(o, "model"), kind, &p->tok, err);
        if (rc != EF_OK)
            ef__err_prefix(err, "stage 'tokenize': option 'model'");
    }
    p->budget = &s->ctx->budget;
    if (rc == EF_OK)
        rc = ef__map_setup(s, tokenize_fn, p, (int)ef__opt_int(o, "threads"), 1,
                           err);
    if (rc != EF_OK) {
        params_free(p);
        return rc;
    }
    static const ef__map_kernel kernel = {scratch_new, scratch_free, run_begin};
    ef__map_set_kernel(s, &kernel);
    return EF_OK;
}

static void tokenize_destroy(ef__stage *s)
{
    tok_params *p = ef__map_user(s);
    ef__map_destroy(s);
    params_free(p);
}

static void tokenize_stats(const ef__stage *s, ef_stage_stats *out)
{
    tok_params *p = ef__map_user(s);
    ef__stats_extra(out, "tokens", (double)ef__stat_get(&p->tokens));
    ef__stats_extra(out, "text_bytes", (double)ef__stat_get(&p->bytes));
}

static const ef__option_def tokenize_options[] = {
    EF__OPT("model", EF_OPT_STRING, "",
            "the tokenizer: a SentencePiece model or a tiktoken rank file "
            "(required)",
            0, 0),
    EF__OPT("kind", EF_OPT_STRING, "auto",
            "auto (from the file), sentencepiece or tiktoken (byte-level BPE, "
            "GPT-2's split)",
            0, 0),
    EF__OPT("field", EF_OPT_STRING, "text", "the UTF-8 text, u8 [n]", 0, 0),
    EF__OPT("out", EF_OPT_STRING, "tokens", "the token ids, i32 [m]", 0, 0),
    EF__OPT("text", EF_OPT_STRING, "drop",
            "drop: the ids take the text's place; keep: the text stays", 0, 0),
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_tokenize = {
    .info = {"tokenize",
             "UTF-8 text to i32 token ids with a SentencePiece model or a "
             "tiktoken rank file",
             EF__OPTIONS(tokenize_options)},
    .create = tokenize_create,
    .destroy = tokenize_destroy,
    .stats = tokenize_stats,
    EF__MAP_STAGE_OPS,
};
