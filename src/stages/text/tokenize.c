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
 * and the output order are those of any ordered map. Bytes that are not
 * UTF-8 are encoded too (SentencePiece as it does; the BPE as pieces of
 * their own), never an error. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stage.h"
#include "stages/flow/map.h"
#include "tokenizer/tokenizer.h"

typedef struct {
    ef__tokenizer *tok; /* owned; immutable once loaded */
    char field[EF_MAX_NAME], out[EF_MAX_NAME];
    int keep; /* text=keep */
    /* statistics (several writers: the workers) */
    _Atomic uint64_t tokens, bytes;
} tok_params;

/* The output: `in`'s fields, the ids (ids[0, n)) in place of field f or
 * after the rest. */
static int output(const ef_sample *in, const tok_params *p, int f,
                  const ef__ids *ids, ef_sample **out)
{
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    int64_t n = (int64_t)ids->n;
    for (int i = 0; i <= in->nfields && rc == EF_OK; i++) {
        if (i == (p->keep ? in->nfields : f)) {
            void *dst;
            rc = ef_sample_add_new(o, p->out, EF_I32, 1, &n, &dst);
            if (rc == EF_OK && n)
                memcpy(dst, ids->v, ids->n * sizeof *ids->v);
        }
        if (i < in->nfields && i != (p->keep ? -1 : f) && rc == EF_OK) {
            const ef__field *g = &in->fields[i];
            rc = ef_sample_add(o, g->name, g->dtype, g->ndim, g->shape, g->buf,
                               g->offset);
        }
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return rc;
    }
    *out = o;
    return EF_OK;
}

static int tokenize_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    tok_params *p = ef_map_ctx_user(ctx);
    int f = ef__sample_find(in, p->field);
    if (f < 0)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "no field '%s'; expected UTF-8 text there as "
                               "u8 [n] (option field)",
                               p->field);
    const ef__field *x = &in->fields[f];
    if (x->dtype != EF_U8 || x->ndim != 1) {
        char shape[96];
        ef__shape_format(shape, sizeof shape, x->ndim, x->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "field '%s' is %s %s; expected UTF-8 text as "
                               "u8 [n]",
                               p->field, ef_dtype_name(x->dtype), shape);
    }
    int o = ef__sample_find(in, p->out);
    if (o >= 0 && (o != f || p->keep))
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "the sample has a field '%s' already, the "
                               "name of the token ids (option out)",
                               p->out);
    const unsigned char *text =
        (const unsigned char *)ef_buffer_data(x->buf) + x->offset;
    ef__ids ids = {0};
    ef__err err;
    ef__err_clear(&err);
    int rc =
        ef__tokenizer_encode(p->tok, text, (size_t)x->shape[0], &ids, &err);
    if (rc != EF_OK) {
        ef_map_ctx_fail(ctx, rc, "field '%s': %s", p->field, err.msg);
    } else {
        rc = output(in, p, f, &ids, out);
        if (rc != EF_OK) /* out of memory, or EF_MAX_FIELDS fields */
            ef_map_ctx_fail(ctx, rc, "cannot add the field '%s': %s", p->out,
                            ef_strerror(rc));
    }
    if (rc == EF_OK) {
        atomic_fetch_add_explicit(&p->tokens, ids.n, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->bytes, (uint64_t)x->shape[0],
                                  memory_order_relaxed);
    }
    ef__free(ids.v);
    return rc;
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
    if (rc == EF_OK)
        rc = ef__map_setup(s, tokenize_fn, p, (int)ef__opt_int(o, "threads"), 1,
                           err);
    if (rc != EF_OK)
        params_free(p);
    return rc;
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
    {"model", EF_OPT_STRING, "",
     "the tokenizer: a SentencePiece model or a tiktoken rank file "
     "(required)",
     0, 0},
    {"kind", EF_OPT_STRING, "auto",
     "auto (from the file), sentencepiece or tiktoken (byte-level BPE, "
     "GPT-2's split)",
     0, 0},
    {"field", EF_OPT_STRING, "text", "the UTF-8 text, u8 [n]", 0, 0},
    {"out", EF_OPT_STRING, "tokens", "the token ids, i32 [m]", 0, 0},
    {"text", EF_OPT_STRING, "drop",
     "drop: the ids take the text's place; keep: the text stays", 0, 0},
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_tokenize = {
    .info = {"tokenize",
             "UTF-8 text to i32 token ids with a SentencePiece model or a "
             "tiktoken rank file",
             EF__OPTIONS(tokenize_options)},
    .create = tokenize_create,
    .open = ef__map_open,
    .next = ef__map_next,
    .reset = ef__map_reset,
    .cancel = ef__map_cancel,
    .destroy = tokenize_destroy,
    .stats = tokenize_stats,
    .pause = ef__map_pause,
    .resume = ef__map_resume,
    .save = ef__map_save,
    .fetch = ef__map_fetch,
};
