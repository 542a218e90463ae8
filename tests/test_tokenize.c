/* SPDX-License-Identifier: Apache-2.0 */
/* tokenize: text to token ids. The BPE against a small rank file written
 * here, whose ids are worked out by hand (tiktoken's rules: GPT-2's
 * split, the whole piece when it is a token, else the lowest-ranked pair
 * first); SentencePiece against a model in tests/fixtures/tokenize with
 * the ids python3-sentencepiece gives; the order with threads=2; bad
 * models, bad rank files, bad options and bad samples, each with the
 * message it must give; checkpoints. The whole-corpus comparisons with
 * the reference tokenizers are python/tests/test_tokenize.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "ef_test_util.h"
#include "state_test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/spm_check.h"
#include "tokenizer/tokenizer.h"

/* ---- fixtures ----------------------------------------------------- */

/* Tokens of the rank file beyond the 256 bytes (byte b has rank b). */
static const struct {
    const char *bytes;
    int rank;
} extra_tokens[] = {
    {"he", 256}, {"ll", 257},  {"hell", 258},
    {" w", 259}, {"xyz", 260}, /* reachable only whole: no "xy" nor "yz" */
    {"lo", 261},               /* ranks after "hell": "hello" is hell + o */
};

static void b64(const unsigned char *p, size_t n, char *out)
{
    static const char a[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[k++] = a[v >> 18 & 63];
        out[k++] = a[v >> 12 & 63];
        out[k++] = i + 1 < n ? a[v >> 6 & 63] : '=';
        out[k++] = i + 2 < n ? a[v & 63] : '=';
    }
    out[k] = '\0';
}

/* The rank file's text: the 256 bytes (but `skip_byte`, when >= 0), then
 * extra_tokens, then `tail`. The caller frees it. */
static char *rank_text(int skip_byte, const char *tail)
{
    size_t cap = 16384 + strlen(tail), n = 0;
    char *t = malloc(cap);
    assert_non_null(t);
    char enc[64];
    for (int b = 0; b < 256; b++) {
        if (b == skip_byte)
            continue;
        unsigned char c = (unsigned char)b;
        b64(&c, 1, enc);
        n += (size_t)snprintf(t + n, cap - n, "%s %d\n", enc, b);
    }
    for (size_t i = 0; i < sizeof extra_tokens / sizeof extra_tokens[0]; i++) {
        const char *s = extra_tokens[i].bytes;
        b64((const unsigned char *)s, strlen(s), enc);
        n += (size_t)snprintf(t + n, cap - n, "%s %d\n", enc,
                              extra_tokens[i].rank);
    }
    snprintf(t + n, cap - n, "%s", tail);
    return t;
}

static const char *ranks_path(void)
{
    return tu_at("ranks.tiktoken");
}

static int setup(void **state)
{
    (void)state;
    if (tu_dir_create("ef_tokenize") != 0)
        return -1;
    char *t = rank_text(-1, "");
    tu_write_file(ranks_path(), t, strlen(t));
    free(t);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* The documents: range's index i picks texts[i % ntexts] (a settable
 * table), as the u8 field "text" (or "body" for the index `no_text`)
 * with the index as "i". */
typedef struct {
    const char *const *texts;
    const size_t *lens; /* NULL: strlen */
    size_t ntexts;
    int64_t no_text; /* -1: none */
    int f32_text;    /* the text field is f32 [2] */
} docs;

static int doc_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const docs *d = ef_map_ctx_user(ctx);
    ef_tensor t;
    if (ef_sample_get(in, "index", &t) != EF_OK)
        return ef_map_ctx_fail(ctx, EF_ECALLBACK, "no index");
    int64_t i = *(const int64_t *)t.data;
    size_t k = (size_t)i % d->ntexts;
    int64_t n = d->lens ? (int64_t)d->lens[k] : (int64_t)strlen(d->texts[k]);
    ef_sample *s = ef_sample_new(ef_sample_identity(in));
    if (!s)
        return EF_ENOMEM; /* test_alloc_failures */
    void *dst = NULL;
    int rc;
    if (d->f32_text) {
        int64_t two = 2;
        rc = ef_sample_add_new(s, "text", EF_F32, 1, &two, &dst);
    } else {
        rc = ef_sample_add_new(s, i == d->no_text ? "body" : "text", EF_U8, 1,
                               &n, &dst);
        if (rc == EF_OK && n)
            memcpy(dst, d->texts[k], (size_t)n);
    }
    int64_t *idx = NULL;
    if (rc == EF_OK)
        rc = ef_sample_add_new(s, "i", EF_I64, 0, NULL, (void **)&idx);
    if (rc != EF_OK) {
        ef_sample_free(s);
        return rc;
    }
    *idx = i;
    *out = s;
    return EF_OK;
}

static ef_pipeline *with_docs(const char *spec, const void *arg)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "doc", doc_map, (void *)arg),
                     EF_OK);
    tu_parse(p, spec);
    return p;
}

/* "range:n=N | map:fn=doc | tokenize:model=MODEL<opts>" */
static char *spec_of(char *buf, size_t cap, int64_t n, const char *model,
                     const char *opts)
{
    snprintf(buf, cap, "range:n=%lld | map:fn=doc | tokenize:model=%s%s",
             (long long)n, model, opts);
    return buf;
}

/* Checks that the field "tokens" of s holds want[0, n). */
static void expect_ids(const ef_sample *s, const int32_t *want, size_t n,
                       const char *what)
{
    ef_tensor t = tu_field(s, "tokens");
    assert_int_equal(t.dtype, EF_I32);
    assert_int_equal(t.ndim, 1);
    if ((size_t)t.shape[0] != n)
        fail_msg("%s: %lld ids, expected %zu", what, (long long)t.shape[0], n);
    for (size_t j = 0; j < n; j++)
        if (((const int32_t *)t.data)[j] != want[j])
            fail_msg("%s: id %zu is %d, expected %d", what, j,
                     ((const int32_t *)t.data)[j], want[j]);
}

/* ---- BPE ---------------------------------------------------------- */

#ifdef EF_HAVE_PCRE2
static const char *const bpe_texts[] = {
    "hello world",  /* hell + o (lo ranks after hell), " w" o r l d */
    "xyz",          /* a token whole, though no pair of it is */
    "it's  a\n\nb", /* 's apart; two spaces: " " then " a" */
    "\xff\xfe"
    "ab",            /* not UTF-8: the two bytes a piece of their own */
    "",              /* no ids */
    "<|endoftext|>", /* ordinary text */
    "lll",           /* pairs of equal rank: the leftmost merges */
};
static const int32_t want0[] = {258, 111, 259, 111, 114, 108, 100};
static const int32_t want1[] = {260};
static const int32_t want2[] = {105, 116, 39, 115, 32, 32, 97, 10, 10, 98};
static const int32_t want3[] = {255, 254, 97, 98};
static const int32_t want5[] = {60,  124, 101, 110, 100, 111, 102,
                                116, 101, 120, 116, 124, 62};
static const int32_t want6[] = {257, 108};
static const struct {
    const int32_t *v;
    size_t n;
} bpe_want[] = {
    {want0, 7}, {want1, 1},  {want2, 10}, {want3, 4},
    {NULL, 0},  {want5, 13}, {want6, 2},
};

static void test_bpe_ids(void **state)
{
    (void)state;
    const size_t n = sizeof bpe_texts / sizeof bpe_texts[0];
    const docs d = {bpe_texts, NULL, n, -1, 0};
    char spec[1024];
    ef_pipeline *p = with_docs(
        spec_of(spec, sizeof spec, (int64_t)n, ranks_path(), ",kind=tiktoken"),
        &d);
    for (size_t i = 0; i < n; i++) {
        ef_sample *s = tu_next(p);
        expect_ids(s, bpe_want[i].v, bpe_want[i].n, bpe_texts[i]);
        /* the text is gone, the other field stays */
        assert_int_equal(ef_sample_field_count(s), 2);
        assert_int_equal(tu_i64(s, "i"), (int64_t)i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "tokenize");
    assert_int_equal((int64_t)tu_extra(&st, "tokens"), 7 + 1 + 10 + 4 + 13 + 2);
    ef_pipeline_destroy(p);
}

/* text=keep and out=: the text stays, the ids come last under their name;
 * kind=auto finds the rank file. */
static void test_keep_text(void **state)
{
    (void)state;
    const docs d = {bpe_texts, NULL, 1, -1, 0};
    char spec[1024];
    ef_pipeline *p = with_docs(
        spec_of(spec, sizeof spec, 1, ranks_path(), ",text=keep,out=ids"), &d);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_field_count(s), 3);
    ef_tensor t = tu_field(s, "text");
    assert_int_equal(t.shape[0], 11);
    assert_memory_equal(t.data, "hello world", 11);
    t = tu_field(s, "ids");
    assert_int_equal(t.shape[0], 7);
    assert_memory_equal(t.data, want0, sizeof want0);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* Any bytes at all: random ones encode, and the ids' bytes put back
 * together are the text (no byte lost to the split). */
static void test_bpe_any_bytes(void **state)
{
    (void)state;
    ef__err err;
    ef__err_clear(&err);
    char *t = rank_text(-1, "");
    ef__bpe_ranks *r;
    assert_int_equal(ef__bpe_ranks_parse(t, strlen(t), "t", &r, &err), EF_OK);
    free(t);
    assert_int_equal(ef__bpe_ranks_count(r), 256 + 6);
    ef__bpe *b;
    assert_int_equal(ef__bpe_new(r, &b, &err), EF_OK);
    uint32_t seed = 7;
    unsigned char text[300], back[300 * 4];
    for (int round = 0; round < 300; round++) {
        size_t n = tu_xorshift(&seed) % sizeof text;
        /* every other round from bytes likely in text */
        static const char texty[] = "hel o'\xc3\xa9\n";
        for (size_t i = 0; i < n; i++) {
            uint32_t v = tu_xorshift(&seed);
            text[i] = round % 2 ? (unsigned char)v
                                : (unsigned char)texty[v % (sizeof texty - 1)];
        }
        ef__ids ids = {0};
        assert_int_equal(ef__bpe_encode(b, NULL, text, n, &ids, &err), EF_OK);
        /* the text as one piece: the heap merges as the scan does */
        ef__ids scan = {0}, heap = {0};
        if (n) {
            assert_int_equal(ef__bpe_merge_how(r, text, n, &scan, 0), EF_OK);
            assert_int_equal(ef__bpe_merge_how(r, text, n, &heap, 1), EF_OK);
            assert_true(TU_ARRAY_EQUAL(&scan, &heap));
        }
        free(scan.v);
        free(heap.v);
        size_t k = 0;
        for (size_t j = 0; j < ids.n; j++) {
            int32_t id = ids.v[j];
            assert_true(id >= 0 && id <= 261);
            if (id < 256) {
                back[k++] = (unsigned char)id;
                continue;
            }
            const char *tok = extra_tokens[0].bytes;
            for (size_t e = 0; e < 6; e++)
                if (extra_tokens[e].rank == id)
                    tok = extra_tokens[e].bytes;
            memcpy(back + k, tok, strlen(tok));
            k += strlen(tok);
        }
        assert_int_equal(k, n);
        assert_memory_equal(back, text, n);
        free(ids.v);
    }
    ef__bpe_free(b);
}

/* threads=2 keeps the order: document i, its decimal digits, is one
 * piece of single bytes. */
static const char *const digits[] = {"0", "1", "2", "3", "4",
                                     "5", "6", "7", "8", "9"};

/* In order and the same ids whatever the threads and runs: a worker
 * hands a run's documents to the tokenizer together. */
static void test_threads_keep_order(void **state)
{
    (void)state;
    static const char *const opts[] = {",threads=2", ",threads=2,run=7",
                                       ",threads=1,run=1", ",threads=3,run=64"};
    const docs d = {digits, NULL, 10, -1, 0};
    char spec[1024];
    for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
        ef_pipeline *p = with_docs(
            spec_of(spec, sizeof spec, 2000, ranks_path(), opts[k]), &d);
        for (int64_t i = 0; i < 2000; i++) {
            ef_sample *s = tu_next(p);
            assert_int_equal(ef_sample_identity(s).index, i);
            int32_t want = '0' + (int32_t)(i % 10);
            expect_ids(s, &want, 1, opts[k]);
            ef_sample_free(s);
        }
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

/* Saved mid-run and restored: the same blocks (tokenize before
 * pack_tokens, the documents read again through it). */
static void test_resume(void **state)
{
    (void)state;
    const size_t n = sizeof bpe_texts / sizeof bpe_texts[0];
    const docs d = {bpe_texts, NULL, n, -1, 0};
    char spec[1024], restore[1024];
    snprintf(spec, sizeof spec,
             "range:n=60 | map:fn=doc | tokenize:model=%s,threads=2 | "
             "pack_tokens:block=4,eos=0",
             ranks_path());
    snprintf(restore, sizeof restore,
             "range:n=60 | map:fn=doc | tokenize:model=%s,threads=auto | "
             "pack_tokens:block=4,eos=0",
             ranks_path());
    static const size_t cuts[] = {0, 1, 5, 17, 40, 70};
    size_t total = tu_check_resume(with_docs, &d, spec, restore, cuts,
                                   sizeof cuts / sizeof cuts[0], 1000);
    assert_true(total > 70);
}
#endif

/* ---- SentencePiece ------------------------------------------------ */

#ifdef EF_HAVE_SENTENCEPIECE
/* verbs_bpe.model: spm_train on 2,000 WordNet verb glosses, bpe, 400
 * pieces, identity normalisation, byte fallback; ids from
 * python3-sentencepiece's encode() of the same model. */
#define SPM_MODEL EF_TOKENIZE_FIXTURES "/verbs_bpe.model"

static const char *const spm_texts[] = {
    "move or go",
    "h\xc3\xa9llo w\xc3\xb6rld \xe6\x97\xa5\xe6\x9c\xac",
    "",
    "  two  spaces",
    "\xff\xfe ok", /* not UTF-8: each bad byte U+FFFD */
};
static const int32_t spm0[] = {274, 345, 297, 273, 309, 345};
static const int32_t spm1[] = {296, 198, 172, 352, 328, 275, 198, 185, 347,
                               352, 353, 342, 233, 154, 168, 233, 159, 175};
static const int32_t spm3[] = {259, 364, 345, 266, 358, 346, 355, 289};
static const int32_t spm4[] = {342, 242, 194, 192, 242, 194, 192, 263, 366};
static const struct {
    const int32_t *v;
    size_t n;
} spm_want[] = {{spm0, 6}, {spm1, 18}, {NULL, 0}, {spm3, 8}, {spm4, 9}};

static void test_sentencepiece_ids(void **state)
{
    (void)state;
    const size_t n = sizeof spm_texts / sizeof spm_texts[0];
    const docs d = {spm_texts, NULL, n, -1, 0};
    const char *kinds[] = {"", ",kind=sentencepiece"};
    for (int k = 0; k < 2; k++) {
        char spec[1024];
        ef_pipeline *p = with_docs(
            spec_of(spec, sizeof spec, 3 * (int64_t)n, SPM_MODEL, kinds[k]),
            &d);
        for (size_t i = 0; i < 3 * n; i++) {
            ef_sample *s = tu_next(p);
            expect_ids(s, spm_want[i % n].v, spm_want[i % n].n,
                       spm_texts[i % n]);
            ef_sample_free(s);
        }
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

static void expect_parse_error(const char *spec, int status, ...);

static void expect_parse_error_auto(const char *path)
{
    char spec[1024];
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s", path);
    expect_parse_error(spec, EF_EFORMAT, path, "not a SentencePiece model",
                       "or a tiktoken rank file", NULL);
}

/* A file that is not a model, and a rank file read as one. */
static void test_sentencepiece_bad_model(void **state)
{
    (void)state;
    const char *bad = tu_at("bad.model");
    static const unsigned char junk[] = {0x0a, 0xff, 0x03, 'a', 'b',
                                         0x12, 0x00, 0x99, 0x01};
    tu_write_file(bad, junk, sizeof junk);
    const char *models[] = {bad, ranks_path()};
    for (int k = 0; k < 2; k++) {
        char spec[1024];
        snprintf(spec, sizeof spec,
                 "range:n=1 | tokenize:model=%s,kind=sentencepiece", models[k]);
        ef_pipeline *p = NULL;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        assert_int_equal(ef_pipeline_parse(p, spec), EF_EFORMAT);
        const char *msg = ef_pipeline_error(p);
        if (!strstr(msg, models[k]) || !strstr(msg, "SentencePiece model") ||
            !strstr(msg, "option 'model'"))
            fail_msg("message \"%s\"", msg);
        ef_pipeline_destroy(p);
    }
    /* kind=auto: either kind may have been meant */
    expect_parse_error_auto(bad);
    /* a truncated model */
    FILE *f = fopen(SPM_MODEL, "rb");
    assert_non_null(f);
    unsigned char head[1000];
    assert_int_equal(fread(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    tu_write_file(bad, head, sizeof head);
    char spec[1024];
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s", bad);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, spec), EF_EFORMAT);
    assert_non_null(strstr(ef_pipeline_error(p), bad));
    ef_pipeline_destroy(p);
}
#endif

/* ---- errors ------------------------------------------------------- */

/* Parsing `spec` fails with `status` and a message holding each of the
 * NULL-terminated strings after it. */
static void expect_parse_error(const char *spec, int status, ...)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    int rc = ef_pipeline_parse(p, spec);
    if (rc != status)
        fail_msg("%s: %s, expected %s: %s", spec, ef_status_name(rc),
                 ef_status_name(status), ef_pipeline_error(p));
    va_list ap;
    va_start(ap, status);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(ef_pipeline_error(p), w))
            fail_msg("%s: message \"%s\" lacks \"%s\"", spec,
                     ef_pipeline_error(p), w);
    va_end(ap);
    ef_pipeline_destroy(p);
}

/* ---- SentencePiece normalizers ---------------------------------- */

/* verbs_rules.model: fixtures/tokenize/make_rules_model.py, as
 * verbs_bpe.model but normalized by five rules (U+FF21 -> A, U+FF22 -> B,
 * U+FB01 -> fi, U+212B -> U+00C5, U+2460 -> 1), so that its
 * normalizer_spec holds a precompiled_charsmap: a uint32 trie size, a
 * darts-clone double array of 256 units, then 12 bytes of NUL-ended
 * strings. The ids are python3-sentencepiece's. */
#define RULES_MODEL EF_TOKENIZE_FIXTURES "/verbs_rules.model"

static const int32_t rules_ids[] = {342, 381, 393, 280, 261, 343,
                                    342, 198, 136, 342, 394};

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> 8 * i);
}

static uint64_t pb_varint(const unsigned char *p, size_t n, size_t *at)
{
    uint64_t v = 0;
    for (int shift = 0; *at < n; shift += 7) {
        v |= (uint64_t)(p[*at] & 0x7F) << shift;
        if (!(p[(*at)++] & 0x80))
            return v;
    }
    fail_msg("a varint cut short at byte %zu", *at);
    return 0;
}

/* The offset and length of the first length-delimited field `number`
 * in the protobuf message p[from, to). */
static size_t pb_find(const unsigned char *p, size_t from, size_t to,
                      unsigned number, size_t *len)
{
    for (size_t at = from; at < to;) {
        uint64_t key = pb_varint(p, to, &at);
        switch (key & 7) {
        case 0:
            pb_varint(p, to, &at);
            break;
        case 1:
            at += 8;
            break;
        case 5:
            at += 4;
            break;
        case 2:
            *len = (size_t)pb_varint(p, to, &at);
            if (key >> 3 == number)
                return at;
            at += *len;
            break;
        default:
            fail_msg("wire type %u at byte %zu", (unsigned)(key & 7), at);
        }
    }
    fail_msg("no field %u", number);
    return 0;
}

/* The darts-clone unit that byte c leads to from `state`, checked, and
 * the state that unit leads to. */
static size_t trie_child(const unsigned char *units, size_t state,
                         unsigned char c)
{
    size_t child = state ^ c;
    assert_int_equal(get32(units + 4 * child) & 0x800000FF, c);
    return child;
}

static size_t trie_state(const unsigned char *units, size_t unit)
{
    uint32_t u = get32(units + 4 * unit);
    return unit ^ (size_t)((u >> 10) << ((u & 0x200) >> 6));
}

/* An offset with bit 31 clear (bit 31 would make the unit a value unit,
 * which no byte reaches): 0x1FFFFF units away. */
#define FAR_OFFSET 0x7FFFFC00u

/* The ways test_corrupt_charsmap damages the charsmap `cm` of `len`
 * bytes, whose trie starts at cm + 4, and what the error must say. */
static void damage_size(unsigned char *cm, size_t len)
{
    put32(cm, (uint32_t)len - 2); /* passes the library's own check */
}

static void damage_root(unsigned char *cm, size_t len)
{
    (void)len;
    put32(cm + 4, FAR_OFFSET);
}

static void damage_child(unsigned char *cm, size_t len)
{
    (void)len;
    unsigned char *units = cm + 4;
    size_t c = trie_child(units, trie_state(units, 0), 0xEF);
    put32(units + 4 * c, (get32(units + 4 * c) & 0x1FF) | FAR_OFFSET);
}

/* The value of the match for U+FF21 (EF BC A1) past the strings. */
static void damage_value(unsigned char *cm, size_t len)
{
    (void)len;
    unsigned char *units = cm + 4;
    size_t s = trie_state(units, 0), c = 0;
    static const unsigned char key[] = {0xEF, 0xBC, 0xA1};
    for (int i = 0; i < 3; i++) {
        c = trie_child(units, s, key[i]);
        s = trie_state(units, c);
    }
    assert_true(get32(units + 4 * c) >> 8 & 1); /* it has a leaf */
    put32(units + 4 * s, 0x80000000u | 5000);
}

static void damage_nuls(unsigned char *cm, size_t len)
{
    for (size_t i = 4 + get32(cm); i < len; i++)
        if (cm[i] == '\0')
            cm[i] = 'x';
}

static const struct {
    void (*damage)(unsigned char *cm, size_t len);
    const char *why;
} charsmap_damages[] = {
    {damage_size, "a trie of 1038 bytes, but 1036 bytes follow its size"},
    {damage_root, "its trie's root leads to units 2096896 to 2097151, past "
                  "the trie's 256 units"},
    {damage_child, "leads to units 2096896 to 2097151, past the trie's 256 "
                   "units"},
    {damage_value, "maps to byte 5000 of the normalized strings, which have "
                   "12 bytes and end before it"},
    {damage_nuls, "of the normalized strings, which have 12 bytes and no "
                  "NUL from there to their end"},
};

/* A model whose charsmap is damaged each way is refused when the spec is
 * parsed, with EF_EFORMAT naming the file, the charsmap and what is
 * wrong, before libsentencepiece, which would crash encoding with it,
 * gets it; ef__spm_model_check says the same in a build without the
 * library. The intact model passes, and encodes as the library does. */
static void test_corrupt_charsmap(void **state)
{
    (void)state;
    FILE *f = fopen(RULES_MODEL, "rb");
    assert_non_null(f);
    unsigned char model[16384];
    size_t n = fread(model, 1, sizeof model, f);
    fclose(f);
    assert_true(n > 0 && n < sizeof model);
    size_t spec_len, cm_len;
    size_t spec = pb_find(model, 0, n, 3, &spec_len);
    size_t cm = pb_find(model, spec, spec + spec_len, 2, &cm_len);
    assert_int_equal(cm_len, 4 + 1024 + 12);
    char why[256];
    assert_int_equal(ef__spm_model_check(model, n, why, sizeof why), EF_OK);
    const char *path = tu_at("damaged.model");
    for (size_t k = 0; k < sizeof charsmap_damages / sizeof *charsmap_damages;
         k++) {
        unsigned char bad[sizeof model];
        memcpy(bad, model, n);
        charsmap_damages[k].damage(bad + cm, cm_len);
        why[0] = '\0';
        assert_int_equal(ef__spm_model_check(bad, n, why, sizeof why),
                         EF_EFORMAT);
        if (!strstr(why, charsmap_damages[k].why) ||
            !strstr(why, "normalizer_spec.precompiled_charsmap"))
            fail_msg("damage %zu: \"%s\"", k, why);
#ifdef EF_HAVE_SENTENCEPIECE
        tu_write_file(path, bad, n);
        char spec_text[1024];
        snprintf(spec_text, sizeof spec_text, "range:n=1 | tokenize:model=%s",
                 path);
        expect_parse_error(spec_text, EF_EFORMAT, path,
                           "normalizer_spec.precompiled_charsmap",
                           charsmap_damages[k].why, NULL);
#endif
    }
#ifdef EF_HAVE_SENTENCEPIECE
    /* the intact model normalizes by its rules, as python's does */
    static const char *const text[] = {
        "\xef\xbc\xa1\xef\xbc\xa2 \xef\xac\x81ne \xe2\x84\xab \xe2\x91\xa0",
        "AB fine \xc3\x85 1"};
    const docs d = {text, NULL, 2, -1, 0};
    char spec_text[1024];
    ef_pipeline *p =
        with_docs(spec_of(spec_text, sizeof spec_text, 2, RULES_MODEL, ""), &d);
    for (int i = 0; i < 2; i++) {
        ef_sample *s = tu_next(p);
        expect_ids(s, rules_ids, sizeof rules_ids / sizeof *rules_ids, text[i]);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
#else
    (void)path, (void)rules_ids;
#endif
}

static void test_bad_options(void **state)
{
    (void)state;
    char spec[1024];
    expect_parse_error("range:n=1 | tokenize", EF_ESPEC,
                       "option 'model' is required", NULL);
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s,kind=wordpiece",
             ranks_path());
    expect_parse_error(spec, EF_ESPEC, "'kind'", "wordpiece", "tiktoken", NULL);
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s,text=maybe",
             ranks_path());
    expect_parse_error(spec, EF_ESPEC, "option 'text' must be drop or keep",
                       NULL);
    snprintf(spec, sizeof spec,
             "range:n=1 | tokenize:model=%s,text=keep,field=t,out=t",
             ranks_path());
    expect_parse_error(spec, EF_ESPEC, "'out' must differ", NULL);
    /* a model that is not there: the path and why */
    const char *missing = tu_at("no-such.model");
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s", missing);
    expect_parse_error(spec, EF_EIO, missing, "cannot open", "No such file",
                       NULL);
}

/* A model path that names a FIFO (whose open would wait for a writer for
 * good) or a directory is EF_EIO naming it, and a file larger than the
 * limit (sparse here) EF_EFORMAT naming the limit, before a byte is
 * read. The alarm turns a hang into a failure. */
static void test_model_files_refused(void **state)
{
    (void)state;
    alarm(60);
    const char *fifo = tu_at("fifo.model");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *huge = tu_at("huge.model");
    FILE *f = fopen(huge, "wb");
    assert_non_null(f);
    assert_int_equal(ftruncate(fileno(f), (off_t)EF__TOK_MAX_MODEL + 1), 0);
    assert_int_equal(fclose(f), 0);
    const char *kinds[] = {"", ",kind=tiktoken", ",kind=sentencepiece"};
    for (int k = 0; k < 3; k++) {
        char spec[1024];
        snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s%s", fifo,
                 kinds[k]);
        expect_parse_error(spec, EF_EIO, fifo, "not a regular file", NULL);
        snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s%s", tu_dir(),
                 kinds[k]);
        expect_parse_error(spec, EF_EIO, tu_dir(), "not a regular file", NULL);
        snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s%s", huge,
                 kinds[k]);
        expect_parse_error(spec, EF_EFORMAT, huge,
                           "larger than 1024 MiB, the most a model file may "
                           "have",
                           NULL);
    }
    unlink(fifo);
    unlink(huge);
    alarm(0);
}

/* Rank file `tail` (after the good lines, 262 of them) must fail to load
 * with a message naming `line` and holding `why`. */
static void expect_bad_ranks(int skip_byte, const char *tail, const char *why)
{
    char *t = rank_text(skip_byte, tail);
    const char *path = tu_at("bad.tiktoken");
    tu_write_file(path, t, strlen(t));
    free(t);
    char spec[1024];
    snprintf(spec, sizeof spec, "range:n=1 | tokenize:model=%s,kind=tiktoken",
             path);
    expect_parse_error(spec, EF_EFORMAT, path, why, NULL);
}

static void test_bad_rank_files(void **state)
{
    (void)state;
    expect_bad_ranks(-1, "YWJj\n", "line 263: no space before the rank");
    expect_bad_ranks(-1, "YWJj 300\nYWJk x1\n",
                     "line 264: a rank that is not a decimal number");
    expect_bad_ranks(-1, "YWJj \n", "line 263: no rank after the space");
    expect_bad_ranks(-1, "YW*j 300\n", "line 263: a token that is not base64");
    expect_bad_ranks(-1, "YWJ 300\n", "line 263: a token that is not base64");
    expect_bad_ranks(-1, " 300\n", "line 263: an empty token");
    expect_bad_ranks(-1, "YWJj 2147483647\n", "line 263: a rank of 2^31");
    expect_bad_ranks(-1, "YWJj 12345678901\n", "line 263: a rank too long");
    /* "he" again (line 257) */
    expect_bad_ranks(-1, "aGU= 300\n",
                     "line 263: a token that line 257 has already");
    expect_bad_ranks(-1, "YWJj 7\n",
                     "line 263: rank 7, which line 8 has already");
    expect_bad_ranks('A', "", "the byte 0x41 has no rank");
    /* empty lines and CRLF are fine (as tiktoken's loader reads them) */
    char *t = rank_text(-1, "\r\n\nYWJj 300\r\n");
    ef__err err;
    ef__err_clear(&err);
    ef__bpe_ranks *r;
    assert_int_equal(ef__bpe_ranks_parse(t, strlen(t), "t", &r, &err), EF_OK);
    assert_int_equal(ef__bpe_rank(r, "abc", 3), 300);
    assert_int_equal(ef__bpe_rank(r, "abd", 3), -1);
    ef__bpe_ranks_free(r);
    free(t);
}

/* A sample without the text field, or with one that is not u8 [n], or
 * that has the ids' name already: EF_ESHAPE naming the stage, the sample
 * and the field; on_error=skip drops it. */
static void test_bad_samples(void **state)
{
    (void)state;
    const docs no_text = {digits, NULL, 10, 3, 0};
    char spec[1024];
    /* alone, and inside a run handed to the tokenizer at once */
    static const char *const opts[] = {",threads=2,run=1", ",threads=2,run=8"};
    for (size_t k = 0; k < 2; k++) {
        spec_of(spec, sizeof spec, 10, ranks_path(), opts[k]);
        ef_pipeline *p = with_docs(spec, &no_text);
        for (int i = 0; i < 3; i++) {
            ef_sample *s = tu_next(p);
            int32_t want = '0' + i;
            expect_ids(s, &want, 1, opts[k]);
            ef_sample_free(s);
        }
        ef_sample *s = NULL;
        assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
        const char *msg = ef_pipeline_error(p);
        if (!strstr(msg, "tokenize") || !strstr(msg, "no field 'text'") ||
            !strstr(msg, "item 3"))
            fail_msg("%s: message \"%s\"", opts[k], msg);
        ef_pipeline_destroy(p);

        p = with_docs(spec, &no_text);
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
        assert_int_equal(tu_drain(p), 9);
        ef_pipeline_destroy(p);
    }
    spec_of(spec, sizeof spec, 10, ranks_path(), ",threads=2");
    ef_pipeline *p;
    ef_sample *s = NULL;

    const docs f32 = {digits, NULL, 10, -1, 1};
    p = with_docs(spec, &f32);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "field 'text' is f32 [2]"));
    ef_pipeline_destroy(p);

    const docs plain = {digits, NULL, 10, -1, 0};
    spec_of(spec, sizeof spec, 10, ranks_path(), ",out=i");
    p = with_docs(spec, &plain);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "a field 'i' already"));
    ef_pipeline_destroy(p);
}

/* ---- allocation failures ------------------------------------------ */

/* One run of `spec` with the n-th allocation failing: 1 when it completed
 * with `want` samples, 0 when it failed with ENOMEM (anything else fails
 * the test; leaks show in the sanitizer builds). */
static int alloc_run(const char *spec, const docs *d, long n, long want)
{
    ef_pipeline *p = NULL;
    ef__alloc_fail_after(n);
    int rc = ef_pipeline_create(&p);
    if (rc == EF_OK)
        rc = ef_pipeline_bind_map(p, "doc", doc_map, (void *)d);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(p, spec);
    long items = 0;
    while (rc == EF_OK) {
        ef_sample *s = NULL;
        rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_sample_free(s);
            items++;
        }
    }
    ef__alloc_fail_after(0);
    const char *msg = p ? ef_pipeline_error(p) : "";
    if (rc != EF_END && rc != EF_ENOMEM)
        fail_msg("%s: n=%ld: %s (%s), expected ENOMEM", spec, n,
                 ef_status_name(rc), msg);
    if (rc == EF_END && items != want)
        fail_msg("%s: n=%ld: %ld samples, expected %ld", spec, n, items, want);
    ef_pipeline_destroy(p);
    return rc == EF_END;
}

/* Every allocation failing in turn, from loading the rank file to the
 * last document (one long enough for the heap's merge): ENOMEM each
 * time, nothing leaked, until the run gets through. */
static void test_alloc_failures(void **state)
{
    (void)state;
    static char long_text[600];
    memset(long_text, 'l', sizeof long_text - 1);
    const char *texts[] = {bpe_texts[0], bpe_texts[2], bpe_texts[3], long_text};
    const docs d = {texts, NULL, 4, -1, 0};
    char spec[1024];
    spec_of(spec, sizeof spec, 8, ranks_path(), "");
    int in_a_row = 0;
    long failures = 0;
    for (long n = 1; n <= 5000 && in_a_row < 8; n++) {
        if (alloc_run(spec, &d, n, 8)) {
            in_a_row++;
        } else {
            in_a_row = 0;
            failures++;
        }
    }
    assert_true(in_a_row >= 8); /* reached the end of the allocations */
    assert_true(failures >= 20);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#ifdef EF_HAVE_PCRE2
        cmocka_unit_test(test_bpe_ids),
        cmocka_unit_test(test_keep_text),
        cmocka_unit_test(test_bpe_any_bytes),
        cmocka_unit_test(test_threads_keep_order),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_alloc_failures),
#endif
#ifdef EF_HAVE_SENTENCEPIECE
        cmocka_unit_test(test_sentencepiece_ids),
        cmocka_unit_test(test_sentencepiece_bad_model),
#endif
        cmocka_unit_test(test_corrupt_charsmap),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_model_files_refused),
        cmocka_unit_test(test_bad_rank_files),
#ifdef EF_HAVE_PCRE2
        cmocka_unit_test(test_bad_samples),
#endif
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
