/* SPDX-License-Identifier: Apache-2.0 */
/* Fields that are not tensors of one shape: ragged batches (keys,
 * captions, variable-length lists), select and drop, and samples with
 * many fields. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "codec/tar_write.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("test_fields");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* A WebDataset shard: keys of different lengths ("k", "kk", ...), each
 * with a caption of its own length, a one-byte class and eight more
 * members (ten fields with __key__ and __url__, past the 8 a sample held
 * inline). */
static void write_shard(const char *path, int samples)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    ef__err err;
    for (int i = 0; i < samples; i++) {
        char key[32], name[64], text[64];
        memset(key, 'k', (size_t)i + 1);
        key[i + 1] = '\0';
        snprintf(name, sizeof name, "%s.txt", key);
        snprintf(text, sizeof text, "caption %d%s", i, i % 2 ? " long" : "");
        assert_int_equal(
            ef__tar_write_member(f, name, text, strlen(text), &err), EF_OK);
        snprintf(name, sizeof name, "%s.cls", key);
        char cls = (char)('0' + i % 10);
        assert_int_equal(ef__tar_write_member(f, name, &cls, 1, &err), EF_OK);
        for (int m = 0; m < 8; m++) {
            snprintf(name, sizeof name, "%s.extra_member_number_%d", key, m);
            assert_int_equal(ef__tar_write_member(f, name, "x", 1, &err),
                             EF_OK);
        }
    }
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
}

static void expect_text(const ef_sample *b, const char *field, int64_t k,
                        const char *want)
{
    ef_tensor t = tu_field(b, field);
    int64_t len[16];
    int64_t n = ef_sample_ragged_lengths(b, field, len, 16);
    assert_true(k < n);
    int64_t start = 0;
    for (int64_t i = 0; i < k; i++)
        start += len[i];
    assert_int_equal(len[k], (int64_t)strlen(want));
    assert_memory_equal((const char *)t.data + start, want, strlen(want));
}

static void test_webdataset_keys_of_different_lengths_batch(void **state)
{
    (void)state;
    write_shard(tu_at("wds.tar"), 5);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | batch:3", tu_at("wds.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *b = tu_next(p);
    assert_int_equal(ef_sample_field_count(b), 12);
    /* ragged: one after another, [1 + 2 + 3], with their lengths */
    ef_tensor k = tu_field(b, "__key__");
    assert_int_equal(k.ndim, 1);
    assert_int_equal(k.shape[0], 6);
    int64_t len[4] = {0};
    assert_int_equal(ef_sample_ragged_lengths(b, "__key__", len, 4), 3);
    assert_int_equal(len[0], 1);
    assert_int_equal(len[1], 2);
    assert_int_equal(len[2], 3);
    assert_memory_equal(k.data, "kkkkkk", 6);
    expect_text(b, "txt", 0, "caption 0");
    expect_text(b, "txt", 1, "caption 1 long");
    expect_text(b, "txt", 2, "caption 2");
    /* a member of one length throughout is a list all the same: a
     * consumer that reads a list of bytes must get one every time */
    ef_tensor c = tu_field(b, "cls");
    assert_int_equal(c.ndim, 1);
    assert_int_equal(c.shape[0], 3);
    assert_int_equal(ef_sample_ragged_lengths(b, "cls", len, 4), 3);
    assert_int_equal(len[0] + len[1] + len[2], 3);
    assert_memory_equal(c.data, "012", 3);
    assert_int_equal(ef_sample_ragged_lengths(b, "nope", NULL, 0), 0);
    /* a clone (an echo) keeps the lengths */
    ef_sample *copy = ef_sample_clone(b);
    ef_sample_free(b);
    assert_int_equal(ef_sample_ragged_lengths(copy, "__key__", len, 4), 3);
    assert_int_equal(len[2], 3);
    ef_sample_free(copy);
    b = tu_next(p); /* the short last batch */
    assert_int_equal(ef_sample_ragged_lengths(b, "__key__", len, 4), 2);
    assert_int_equal(len[0], 4);
    assert_int_equal(len[1], 5);
    ef_sample_free(b);
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* ragged=error refuses, saying how to accept it */
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | batch:3,ragged=error",
             tu_at("wds.tar"));
    p = tu_pipeline(spec, 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, "field '__key__' of sample 1 of the batch (index 1) is "
                     "u8 [2], expected u8 [1] as in the first (ragged=list "
                     "would batch it as a list)"))
        fail_msg("%s", msg);
    ef_pipeline_destroy(p);
    ef_pipeline *bad = NULL;
    assert_int_equal(ef_pipeline_create(&bad), EF_OK);
    assert_int_equal(ef_pipeline_parse(bad, "range:n=4 | batch:2,ragged=pad"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(bad),
                           "stage 'batch': option 'ragged' must be list or "
                           "error, got 'pad'"));
    ef_pipeline_destroy(bad);
}

/* Variable-length lists of any dtype: rows of [n, 2] i32. A field that
 * differs in more than its first dimension is still refused. */
typedef struct {
    int64_t next, n;
    int bad_at; /* this item's field is [2, 3], not [n, 2]; -1: none */
} rows_source;

static int rows_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    rows_source *r = user;
    if (r->next == r->n)
        return EF_END;
    int64_t i = r->next++;
    ef_sample *s = ef_sample_new((ef_sample_id){.index = i, .epoch = epoch});
    int64_t shape[2] = {i, 2};
    if (i == r->bad_at)
        shape[0] = 2, shape[1] = 3;
    int32_t *v;
    if (!s || ef_sample_add_new(s, "rows", EF_I32, 2, shape, (void **)&v))
        return EF_ENOMEM;
    for (int64_t j = 0; j < shape[0] * shape[1]; j++)
        v[j] = (int32_t)(i * 100 + j);
    *out = s;
    return EF_OK;
}

static void test_variable_length_rows(void **state)
{
    (void)state;
    rows_source r = {.n = 4, .bad_at = -1};
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, rows_fn, &r, NULL), EF_OK);
    tu_parse(p, "batch:4");
    ef_sample *b = tu_next(p);
    ef_tensor t = tu_field(b, "rows");
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 0 + 1 + 2 + 3);
    assert_int_equal(t.shape[1], 2);
    const int32_t *v = t.data;
    assert_int_equal(v[0], 100);  /* item 1, row 0 */
    assert_int_equal(v[2], 200);  /* item 2, row 0 */
    assert_int_equal(v[11], 305); /* item 3, row 2, column 1 */
    int64_t len[4];
    assert_int_equal(ef_sample_ragged_lengths(b, "rows", len, 4), 4);
    assert_int_equal(len[0], 0);
    assert_int_equal(len[3], 3);
    ef_sample_free(b);
    ef_pipeline_destroy(p);

    rows_source bad = {.n = 4, .bad_at = 2};
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, rows_fn, &bad, NULL), EF_OK);
    tu_parse(p, "batch:4");
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "is i32 [2,3], expected "
                                                 "i32 [0,2] as in the first"));
    ef_pipeline_destroy(p);
}

/* Items whose field "t" is already a list of texts (as a Python map
 * returning a list of str makes it): four bytes as [1, 3] or [2, 2], so
 * every item has the same total. */
static int lists_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    int64_t *next = user;
    if (*next == 4)
        return EF_END;
    int64_t i = (*next)++;
    ef_sample *s = ef_sample_new((ef_sample_id){.index = i, .epoch = epoch});
    int64_t shape[1] = {4};
    const int64_t lengths[2][2] = {{1, 3}, {2, 2}};
    void *v;
    if (!s || ef_sample_add_new(s, "t", EF_U8, 1, shape, &v))
        return EF_ENOMEM;
    memcpy(v, i % 2 ? "aabb" : "abbb", 4);
    if (ef_sample_set_ragged(s, "t", lengths[i % 2], 2) != EF_OK)
        return EF_ENOMEM;
    *out = s;
    return EF_OK;
}

static void expect_ragged_refused(ef_pipeline *p, const char *where)
{
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    const char *msg = ef_pipeline_error(p);
    if (rc != EF_ESHAPE || !strstr(msg, where) ||
        !strstr(msg, "already ragged") || !strstr(msg, "batch once"))
        fail_msg("expected EF_ESHAPE naming %s as already ragged, got %s: "
                 "%s",
                 where, ef_strerror(rc), msg);
    ef_sample_free(s);
}

/* A field that is already ragged is refused, not joined: its values
 * would run together ("abbb" + "aabb"), and with equal totals would even
 * pass for a [2,4] tensor. The first part is checked too (a batch of
 * one). */
static void test_batch_refuses_ragged_field(void **state)
{
    (void)state;
    const char *const specs[] = {"batch:2", "batch:1", "echo:2 | batch:4"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int64_t next = 0;
        ef_pipeline *p = NULL;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        assert_int_equal(ef_pipeline_add_source(p, lists_fn, &next, NULL),
                         EF_OK);
        tu_parse(p, specs[i]);
        expect_ragged_refused(p, "field 't' of sample 0 of the batch");
        ef_pipeline_destroy(p);
    }

    /* a batch of batches: the keys of the inner batches are lists */
    write_shard(tu_at("twice.tar"), 4);
    const char *const twice[] = {"batch:2 | batch:2", "batch:2 | batch:1"};
    for (size_t i = 0; i < sizeof twice / sizeof twice[0]; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "tar:urls=\"%s\" | %s", tu_at("twice.tar"),
                 twice[i]);
        ef_pipeline *p = tu_pipeline(spec, 0);
        expect_ragged_refused(p, "of sample 0 of the batch (index 0)");
        ef_pipeline_destroy(p);
    }
}

static void test_set_ragged_checks_lengths(void **state)
{
    (void)state;
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    int64_t shape[1] = {5};
    assert_int_equal(ef_sample_add_new(s, "t", EF_U8, 1, shape, NULL), EF_OK);
    assert_int_equal(ef_sample_add_new(s, "scalar", EF_I64, 0, NULL, NULL),
                     EF_OK);
    const int64_t ok[2] = {2, 3}, short_[2] = {2, 2}, neg[2] = {6, -1};
    assert_int_equal(ef_sample_set_ragged(s, "t", short_, 2), EF_EINVAL);
    assert_int_equal(ef_sample_set_ragged(s, "t", neg, 2), EF_EINVAL);
    assert_int_equal(ef_sample_set_ragged(s, "t", ok, 0), EF_EINVAL);
    assert_int_equal(ef_sample_set_ragged(s, "nope", ok, 2), EF_EINVAL);
    assert_int_equal(ef_sample_set_ragged(s, "scalar", ok, 2), EF_EINVAL);
    assert_int_equal(ef_sample_ragged_lengths(s, "t", NULL, 0), 0);
    assert_int_equal(ef_sample_set_ragged(s, "t", ok, 2), EF_OK);
    int64_t got[2];
    assert_int_equal(ef_sample_ragged_lengths(s, "t", got, 2), 2);
    assert_int_equal(got[1], 3);
    ef_sample_free(s);
}

static void test_set_members_makes_a_batch(void **state)
{
    (void)state;
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 7, .fresh = 2});
    const ef_sample_id ids[2] = {{.index = 14}, {.index = 15, .epoch = 1}};
    assert_int_equal(ef_sample_set_members(NULL, ids, 2), EF_EINVAL);
    assert_int_equal(ef_sample_set_members(s, NULL, 2), EF_EINVAL);
    assert_int_equal(ef_sample_set_members(s, ids, 0), EF_EINVAL);
    assert_int_equal(ef_sample_members(s, NULL, 0), 0);
    assert_int_equal(ef_sample_set_members(s, ids, 1), EF_OK);
    assert_int_equal(ef_sample_set_members(s, ids, 2), EF_OK); /* replaces */
    ef_sample *copy = ef_sample_clone(s);
    ef_sample_free(s);
    ef_sample_id got[2];
    assert_int_equal(ef_sample_members(copy, got, 2), 2);
    assert_int_equal(got[1].index, 15);
    assert_int_equal(got[1].epoch, 1);
    assert_int_equal(ef_sample_identity(copy).index, 7);
    ef_sample_free(copy);
}

static void test_select_and_drop(void **state)
{
    (void)state;
    write_shard(tu_at("sel.tar"), 3);
    char spec[512];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s\" | select:fields=\"cls, __key__\" | batch:3",
             tu_at("sel.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *b = tu_next(p);
    assert_int_equal(ef_sample_field_count(b), 2);
    expect_text(b, "__key__", 2, "kkk");
    assert_memory_equal(tu_field(b, "cls").data, "012", 3);
    ef_sample_free(b);
    ef_pipeline_destroy(p);

    snprintf(spec, sizeof spec,
             "tar:urls=\"%s\" | drop:fields=\"__url__,txt,absent\"",
             tu_at("sel.tar"));
    p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_field_count(s), 10);
    ef_tensor t;
    assert_int_equal(ef_sample_get(s, "txt", &t), EF_EINVAL);
    assert_int_equal(ef_sample_get(s, "extra_member_number_7", &t), EF_OK);
    ef_sample_free(s);
    ef_pipeline_destroy(p);

    /* select names the sample and what it has when a field is missing;
     * under skip the sample is dropped and counted */
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | select:fields=\"cls,jpg\"",
             tu_at("sel.tar"));
    p = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    char want[600];
    snprintf(want, sizeof want,
             "select: item 0 (epoch 0), file '%s', key 'k' has no field "
             "'jpg' (it has: __key__, __url__, txt, cls, extra_member",
             tu_at("sel.tar"));
    if (!strstr(ef_pipeline_error(p), want))
        fail_msg("'%s' lacks '%s'", ef_pipeline_error(p), want);
    ef_pipeline_destroy(p);
    p = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_expect_end(p);
    assert_int_equal(ef_pipeline_skipped(p, NULL, 0), 3);
    ef_pipeline_destroy(p);

    static const char *const bad[] = {
        "range:n=2 | select", "range:n=2 | select:fields=\"a,,b\"",
        "range:n=2 | drop:fields=\"a,a\"", "range:n=2 | drop:fields=\"\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        assert_int_equal(ef_pipeline_parse(p, bad[i]), EF_ESPEC);
        ef_pipeline_destroy(p);
    }
}

/* A batch echo held across a checkpoint is made again from its members:
 * the ragged fields come back ragged. */
static void test_ragged_batch_restored(void **state)
{
    (void)state;
    write_shard(tu_at("st.tar"), 6);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | batch:3 | echo:2",
             tu_at("st.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample_free(tu_next(p)); /* batch 0, its echo held */
    unsigned char buf[1 << 16];
    size_t used = 0;
    assert_int_equal(ef_pipeline_save_state(p, buf, sizeof buf, &used), EF_OK);
    ef_sample *want = tu_next(p);
    ef_pipeline *q = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_restore_state(q, buf, used), EF_OK);
    ef_sample *got = tu_next(q);
    int64_t a[3], b[3];
    assert_int_equal(ef_sample_ragged_lengths(got, "__key__", a, 3), 3);
    assert_int_equal(ef_sample_ragged_lengths(want, "__key__", b, 3), 3);
    assert_memory_equal(a, b, sizeof a);
    expect_text(got, "txt", 1, "caption 1 long");
    ef_sample_free(want);
    ef_sample_free(got);
    ef_pipeline_destroy(p);
    ef_pipeline_destroy(q);
}

/* Lines of one length: a text is variable-length by nature, so a batch
 * of them is a list whatever their lengths, a batch of one too; with
 * ragged=error they stack as before. */
static void test_texts_of_one_length_batch_as_a_list(void **state)
{
    (void)state;
    FILE *f = fopen(tu_at("same.txt"), "w");
    assert_non_null(f);
    fputs("ab\ncd\nef\n", f);
    fclose(f);
    char spec[512];
    snprintf(spec, sizeof spec, "text:files=\"%s\" | batch:2",
             tu_at("same.txt"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t len[4] = {0};
    ef_sample *b = tu_next(p);
    assert_int_equal(ef_sample_ragged_lengths(b, "text", len, 4), 2);
    assert_int_equal(len[0], 2);
    assert_int_equal(len[1], 2);
    ef_sample_free(b);
    b = tu_next(p); /* a batch of one */
    assert_int_equal(ef_sample_ragged_lengths(b, "text", len, 4), 1);
    ef_sample_free(b);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec,
             "text:files=\"%s\" | batch:2,ragged=error", tu_at("same.txt"));
    p = tu_pipeline(spec, 0);
    b = tu_next(p);
    assert_int_equal(ef_sample_ragged_lengths(b, "text", NULL, 0), 0);
    assert_int_equal(tu_field(b, "text").ndim, 2);
    ef_sample_free(b);
    ef_pipeline_destroy(p);

    /* the mark of a C source's own; a field must be there and have a
     * dimension */
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    assert_non_null(s);
    int64_t n = 3;
    assert_int_equal(ef_sample_add_new(s, "t", EF_U8, 1, &n, NULL), EF_OK);
    assert_int_equal(ef_sample_add_new(s, "x", EF_I64, 0, NULL, NULL), EF_OK);
    assert_int_equal(ef_sample_set_variable(s, "t"), EF_OK);
    assert_int_equal(ef_sample_set_variable(s, "x"), EF_EINVAL);
    assert_int_equal(ef_sample_set_variable(s, "none"), EF_EINVAL);
    ef_sample_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_webdataset_keys_of_different_lengths_batch),
        cmocka_unit_test(test_variable_length_rows),
        cmocka_unit_test(test_texts_of_one_length_batch_as_a_list),
        cmocka_unit_test(test_set_ragged_checks_lengths),
        cmocka_unit_test(test_set_members_makes_a_batch),
        cmocka_unit_test(test_batch_refuses_ragged_field),
        cmocka_unit_test(test_select_and_drop),
        cmocka_unit_test(test_ragged_batch_restored),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
