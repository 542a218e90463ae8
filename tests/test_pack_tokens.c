/* SPDX-License-Identifier: Apache-2.0 */
/* pack_tokens: documents' token ids cut into blocks of inputs and
 * next-token targets, checked against a stream built here; eos, the
 * dropped tail, errors, on_error=skip, and checkpoints (a run saved after
 * k blocks and restored goes on with the uninterrupted run's blocks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "state_test_util.h"

/* Document i of the test corpus: (i * 7) % 11 tokens (documents 0, 11,
 * 22 ... are empty), token j being i * 100 + j. */
static int64_t doc_len(int64_t i)
{
    return (i * 7) % 11;
}

static int doc_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    ef_tensor t;
    if (ef_sample_get(in, "index", &t) != EF_OK)
        return ef_map_ctx_fail(ctx, EF_ECALLBACK, "no index");
    int64_t i = *(const int64_t *)t.data, n = doc_len(i);
    int64_t *bad = ef_map_ctx_user(ctx);
    ef_sample *s = ef_sample_new(ef_sample_identity(in));
    int32_t *tok = NULL;
    int rc;
    if (bad && i % *bad == 1) { /* a document of f32, not token ids */
        int64_t shape[2] = {1, 2};
        rc = ef_sample_add_new(s, "tokens", EF_F32, 2, shape, NULL);
    } else {
        rc = ef_sample_add_new(s, "tokens", EF_I32, 1, &n, (void **)&tok);
        for (int64_t j = 0; rc == EF_OK && j < n; j++)
            tok[j] = (int32_t)(i * 100 + j);
    }
    /* another field, which blocks do not carry */
    if (rc == EF_OK)
        rc = ef_sample_add_new(s, "other", EF_U8, 0, NULL, NULL);
    if (rc != EF_OK) {
        ef_sample_free(s);
        return rc;
    }
    *out = s;
    return EF_OK;
}

/* The pipeline of `spec` with "doc" bound (arg: the bad documents'
 * modulus, or NULL). */
static ef_pipeline *with_docs(const char *spec, const void *arg)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 5), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "doc", doc_map, (void *)arg),
                     EF_OK);
    tu_parse(p, spec);
    return p;
}

/* The stream of documents [0, ndocs) (but those i with i % bad == 1 when
 * bad > 0), eos after each when eos >= 0; its length. */
static size_t stream_of(int64_t ndocs, int64_t eos, int64_t bad, int32_t *out,
                        size_t cap)
{
    size_t n = 0;
    for (int64_t i = 0; i < ndocs; i++) {
        if (bad > 0 && i % bad == 1)
            continue;
        for (int64_t j = 0; j < doc_len(i); j++) {
            assert_true(n < cap);
            out[n++] = (int32_t)(i * 100 + j);
        }
        if (eos >= 0) {
            assert_true(n < cap);
            out[n++] = (int32_t)eos;
        }
    }
    return n;
}

static double stage_extra(ef_pipeline *p, int stage, const char *key)
{
    ef_stage_stats st;
    double v = -1;
    assert_int_equal(ef_pipeline_stage_stats(p, stage, &st), EF_OK);
    if (!ef_stage_stats_extra(&st, key, &v))
        fail_msg("stage %d has no figure '%s'", stage, key);
    return v;
}

/* Pulls the blocks of `spec` (pack_tokens:block=N its stage 2) and checks
 * them against the stream, for `passes` passes; returns the blocks of a
 * pass. */
static int64_t expect_blocks(const char *spec, int64_t ndocs, int64_t block,
                             int64_t eos, int64_t bad, int passes)
{
    static int32_t stream[1 << 16];
    size_t len = stream_of(ndocs, eos, bad, stream, sizeof stream / 4);
    int64_t per_pass = len > 0 ? (int64_t)(len - 1) / block : 0;
    ef_pipeline *p = with_docs(spec, bad > 0 ? &bad : NULL);
    if (bad > 0)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    for (int pass = 0; pass < passes; pass++)
        for (int64_t k = 0; k < per_pass; k++) {
            ef_sample *s = tu_next(p);
            ef_sample_id id = ef_sample_identity(s);
            assert_int_equal(id.index, k);
            assert_int_equal(id.epoch, pass);
            assert_int_equal(ef_sample_field_count(s), 2);
            ef_tensor in, tg;
            assert_int_equal(ef_sample_get(s, "inputs", &in), EF_OK);
            assert_int_equal(ef_sample_get(s, "targets", &tg), EF_OK);
            assert_int_equal(in.dtype, EF_I32);
            assert_int_equal(tg.dtype, EF_I32);
            assert_int_equal(in.ndim, 1);
            assert_int_equal(in.shape[0], block);
            assert_int_equal(tg.shape[0], block);
            const int32_t *a = in.data, *b = tg.data;
            for (int64_t j = 0; j < block; j++) {
                if (a[j] != stream[k * block + j] ||
                    b[j] != stream[k * block + j + 1])
                    fail_msg("%s: block %lld token %lld: %d/%d, expected "
                             "%d/%d",
                             spec, (long long)k, (long long)j, a[j], b[j],
                             stream[k * block + j], stream[k * block + j + 1]);
            }
            ef_sample_free(s);
        }
    tu_expect_end(p);
    /* the tail: what started no block, each pass */
    assert_int_equal((int64_t)stage_extra(p, 2, "tail_tokens"),
                     ((int64_t)len - per_pass * block) * passes);
    assert_int_equal((int64_t)stage_extra(p, 2, "tokens"),
                     (int64_t)len * passes);
    if (bad > 0) {
        char why[512];
        assert_int_equal(ef_pipeline_skipped(p, why, sizeof why),
                         (ndocs + bad - 2) / bad * passes);
        assert_non_null(strstr(why, "pack_tokens: field 'tokens'"));
        assert_non_null(strstr(why, "f32 [1,2]"));
    }
    ef_pipeline_destroy(p);
    return per_pass;
}

static void test_blocks_exact(void **state)
{
    (void)state;
    /* 100 documents, 495 tokens, eos after each: 595 */
    assert_int_equal(expect_blocks("range:n=100 | map:fn=doc | "
                                   "pack_tokens:block=8,eos=7",
                                   100, 8, 7, 0, 1),
                     74);
    assert_int_equal(expect_blocks("range:n=100 | map:fn=doc | "
                                   "pack_tokens:block=8",
                                   100, 8, -1, 0, 1),
                     61);
    /* a block exactly as long as the stream less one: one block, no tail
     * but its last target */
    assert_int_equal(expect_blocks("range:n=3 | map:fn=doc | "
                                   "pack_tokens:block=12,eos=0",
                                   3, 12, 0, 0, 1),
                     1);
    /* block 1: every token is an input once and a target once */
    expect_blocks("range:n=20 | map:fn=doc | pack_tokens:1", 20, 1, -1, 0, 1);
    /* two passes, the same blocks with epoch 1 */
    expect_blocks("range:n=40 | map:fn=doc | pack_tokens:block=16,eos=9 | "
                  "repeat:count=2",
                  40, 16, 9, 0, 2);
}

static void test_eos_and_empty_documents(void **state)
{
    (void)state;
    /* documents 0 and 11 are empty: with eos, they add it alone */
    ef_pipeline *p =
        with_docs("range:n=12 | map:fn=doc | pack_tokens:block=3,eos=5", NULL);
    ef_sample *s = tu_next(p);
    ef_tensor in, tg;
    assert_int_equal(ef_sample_get(s, "inputs", &in), EF_OK);
    assert_int_equal(ef_sample_get(s, "targets", &tg), EF_OK);
    /* doc 0: [5]; doc 1: 100..106 then 5 */
    const int32_t *a = in.data, *b = tg.data;
    assert_int_equal(a[0], 5);
    assert_int_equal(a[1], 100);
    assert_int_equal(a[2], 101);
    assert_int_equal(b[0], 100);
    assert_int_equal(b[2], 102);
    assert_int_equal(ef_sample_members(s, NULL, 0), 2);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    /* without eos an empty document is nothing at all: counted */
    p = with_docs("range:n=23 | map:fn=doc | pack_tokens:block=4", NULL);
    tu_drain(p);
    assert_int_equal((int64_t)stage_extra(p, 2, "empty_docs"), 3);
    ef_pipeline_destroy(p);
}

static void test_tail_only(void **state)
{
    (void)state;
    /* fewer tokens than block + 1: no block, all of them the tail */
    ef_pipeline *p =
        with_docs("range:n=3 | map:fn=doc | pack_tokens:block=25", NULL);
    tu_expect_end(p);
    assert_int_equal((int64_t)stage_extra(p, 2, "tail_tokens"), 7 + 3);
    ef_pipeline_destroy(p);
    /* no documents at all */
    p = with_docs("range:n=0 | map:fn=doc | pack_tokens:block=2", NULL);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* Wrong dtype, rank or no field: an error naming the stage, the field and
 * what was found; on_error=skip drops those documents. */
static void test_errors(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=5 | pack_tokens:block=2", 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "pack_tokens"));
    assert_non_null(strstr(ef_pipeline_error(p), "has no field 'tokens'"));
    assert_non_null(strstr(ef_pipeline_error(p), "item 0"));
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=5 | pack_tokens:block=2,field=index", 0);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(
        strstr(ef_pipeline_error(p), "pack_tokens: field 'index' of item 0"));
    assert_non_null(strstr(ef_pipeline_error(p), "is i64 []"));
    assert_non_null(strstr(ef_pipeline_error(p), "expected i32"));
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=5,bytes=4 | pack_tokens:block=2,field=data", 0);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "is u8 [4]"));
    ef_pipeline_destroy(p);
    /* option checks */
    const char *bad[] = {
        "pack_tokens", "pack_tokens:block=0", "pack_tokens:block=4,eos=-1",
        "pack_tokens:block=4,field=", "pack_tokens:block=4,size=3"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        tu_parse(p, "range:n=3");
        int rc = ef_pipeline_parse(p, bad[i]);
        if (rc != EF_ESPEC)
            fail_msg("%s: %s, expected ESPEC", bad[i], ef_status_name(rc));
        assert_non_null(strstr(ef_pipeline_error(p), "pack_tokens"));
        ef_pipeline_destroy(p);
    }
    /* skip: every 4th document (1, 5, 9 ...) is f32: dropped, counted */
    expect_blocks("range:n=60 | map:fn=doc | pack_tokens:block=5,eos=1", 60, 5,
                  1, 4, 1);
}

static void test_length(void **state)
{
    (void)state;
    ef_pipeline *p =
        with_docs("range:n=10 | map:fn=doc | pack_tokens:block=4", NULL);
    int64_t n = 0;
    assert_int_equal(ef_pipeline_length(p, &n), EF_EUNSUPPORTED);
    assert_non_null(strstr(ef_pipeline_error(p), "pack_tokens"));
    ef_pipeline_destroy(p);
}

static void check_resume(const char *spec, size_t max)
{
    static const size_t cuts[] = {0, 1, 2, 3, 7, 20, 33, 50, 51};
    tu_check_resume(with_docs, NULL, spec, spec, cuts,
                    sizeof cuts / sizeof cuts[0], max);
}

/* Saved after k blocks and restored: the rest of the run, identity and
 * bytes. The documents held (the first part way) are read again by
 * identity through the map and the source. */
static void test_resume(void **state)
{
    (void)state;
    check_resume("range:n=120 | map:fn=doc | pack_tokens:block=9,eos=2", 200);
    check_resume("range:n=120 | map:fn=doc | pack_tokens:block=3", 400);
    /* blocks longer than documents, over two passes */
    check_resume("range:n=60 | map:fn=doc | pack_tokens:block=40,eos=2 | "
                 "repeat:count=3",
                 200);
    /* blocks held downstream are made again from their documents (fetch) */
    check_resume("range:n=150 | shuffle:buffer=20 | map:fn=doc | "
                 "pack_tokens:block=6,eos=1 | shuffle:buffer=10",
                 400);
    check_resume("range:n=100 | map:fn=doc | pack_tokens:block=5 | "
                 "echo:factor=2,shuffle=7 | batch:size=3",
                 400);
    check_resume("range:n=100 | map:fn=doc,threads=3 | "
                 "pack_tokens:block=11,eos=4 | prefetch:depth=3",
                 400);
}

/* Batches of blocks held after batch (batch echoing) name their blocks
 * without the blocks' documents: a restore says so. */
static void test_batch_echo_unsupported(void **state)
{
    (void)state;
    const char *spec = "range:n=100 | map:fn=doc | pack_tokens:block=5 | "
                       "batch:size=3 | echo:factor=2";
    ef_pipeline *p = with_docs(spec, NULL);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    size_t size;
    void *st = tu_save(p, &size);
    ef_pipeline_destroy(p);
    p = with_docs(spec, NULL);
    ef_pipeline_restore_state(p, st, size);
    int rc = ef_pipeline_next(p, &s);
    assert_int_equal(rc, EF_EUNSUPPORTED);
    assert_non_null(strstr(ef_pipeline_error(p), "before batch"));
    ef_pipeline_destroy(p);
    free(st);
}

/* A block's members are the documents whose tokens it holds. */
static void test_members(void **state)
{
    (void)state;
    ef_pipeline *p =
        with_docs("range:n=10 | map:fn=doc | pack_tokens:block=10", NULL);
    /* stream: doc1 7 tokens, doc2 3, doc3 10, doc4 6 ... */
    ef_sample *s = tu_next(p);
    ef_sample_id ids[8];
    /* 11 tokens: all of docs 1 and 2, and doc 3's first */
    assert_int_equal(ef_sample_members(s, ids, 8), 3);
    assert_int_equal(ids[0].index, 1);
    assert_int_equal(ids[2].index, 3);
    ef_sample_free(s);
    s = tu_next(p);
    assert_int_equal(ef_sample_members(s, ids, 8), 2); /* docs 3 and 4 */
    assert_int_equal(ids[0].index, 3);
    assert_int_equal(ids[1].index, 4);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_exact),
        cmocka_unit_test(test_eos_and_empty_documents),
        cmocka_unit_test(test_tail_only),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_length),
        cmocka_unit_test(test_members),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_batch_echo_unsupported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
