/* SPDX-License-Identifier: Apache-2.0 */
/* The npy source on .npy files written here, header by hand: every dtype,
 * rows of 0 to 2 dimensions, several files, first/count and shards,
 * checkpoints mid-pass (the cursor, and a shuffle's buffer read again by
 * fetch), and each kind of hostile header refused with a message that
 * names the file and what was expected. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "state_test_util.h"

/* Writes an .npy file: the dict `dict` (a Python literal) padded to 64
 * bytes as numpy pads it, version 1 or 2, then `n` bytes of data. */
static void write_npy_dict(const char *path, int version, const char *dict,
                           const void *data, size_t n)
{
    unsigned char buf[1 << 14];
    size_t pre = version == 1 ? 10 : 12, len = strlen(dict);
    size_t total = (pre + len + 1 + 63) / 64 * 64;
    assert_true(total + n <= sizeof buf);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    size_t hl = total - pre;
    for (size_t b = 0; b < pre - 8; b++)
        buf[8 + b] = (unsigned char)(hl >> (8 * b));
    memset(buf + pre, ' ', hl);
    memcpy(buf + pre, dict, len);
    buf[total - 1] = '\n';
    memcpy(buf + total, data, n);
    tu_write_file(path, buf, total + n);
}

/* An array of `descr` and shape text "(a, b, )": its data is bytes
 * 0, 1, 2, ... (n of them). */
static void write_npy(const char *path, const char *descr, const char *shape,
                      size_t n)
{
    char dict[256];
    unsigned char data[4096];
    for (size_t i = 0; i < n; i++)
        data[i] = (unsigned char)i;
    snprintf(dict, sizeof dict,
             "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    write_npy_dict(path, 1, dict, data, n);
}

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_npy");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* Every dtype: rows of [2] elements, their bytes the file's. */
static void test_every_dtype(void **state)
{
    (void)state;
    static const struct {
        const char *descr;
        ef_dtype dtype;
    } cases[] = {{"|b1", EF_BOOL}, {"|u1", EF_U8},  {"|i1", EF_I8},
                 {"<i2", EF_I16},  {"<u2", EF_U16}, {"<i4", EF_I32},
                 {"<i8", EF_I64},  {"<f2", EF_F16}, {"<f4", EF_F32},
                 {"<f8", EF_F64},  {"<u1", EF_U8},  {">i1", EF_I8}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t esize = ef_dtype_size(cases[c].dtype);
        write_npy(tu_at("d.npy"), cases[c].descr, "(3, 2)", 6 * esize);
        char spec[512];
        snprintf(spec, sizeof spec, "npy:files=%s", tu_at("d.npy"));
        ef_pipeline *p = tu_pipeline(spec, 0);
        for (int64_t r = 0; r < 3; r++) {
            ef_sample *s = tu_next(p);
            ef_tensor t = tu_field(s, "data");
            assert_int_equal(t.dtype, cases[c].dtype);
            assert_int_equal(t.ndim, 1);
            assert_int_equal(t.shape[0], 2);
            assert_int_equal(ef_sample_identity(s).index, r);
            const unsigned char *b = t.data;
            for (size_t k = 0; k < 2 * esize; k++)
                assert_int_equal(b[k], (unsigned char)(r * 2 * esize + k));
            ef_sample_free(s);
        }
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

/* A 1-d array gives scalars; a 3-d one rows of 2 dimensions; field=
 * names the field; version 2.0 headers read as 1.0. */
static void test_shapes(void **state)
{
    (void)state;
    write_npy(tu_at("v.npy"), "<i2", "(4,)", 8);
    write_npy(tu_at("m.npy"), "|u1", "(2, 3, 4)", 24);
    char spec[512];
    snprintf(spec, sizeof spec, "npy:files=%s,field=x", tu_at("v.npy"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int r = 0; r < 4; r++) {
        ef_sample *s = tu_next(p);
        ef_tensor t = tu_field(s, "x");
        assert_int_equal(t.ndim, 0);
        assert_int_equal(*(const int16_t *)t.data, 2 * r + (2 * r + 1) * 256);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    snprintf(spec, sizeof spec, "npy:%s", tu_at("m.npy"));
    p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    s = (ef_sample_free(s), tu_next(p));
    ef_tensor t = tu_field(s, "data");
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 3);
    assert_int_equal(t.shape[1], 4);
    assert_int_equal(((const unsigned char *)t.data)[0], 12);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    unsigned char data[6] = {1, 2, 3, 4, 5, 6};
    write_npy_dict(tu_at("v2.npy"), 2,
                   "{\"descr\": \"|u1\", \"fortran_order\": False, "
                   "\"shape\": (3L, 2L)}",
                   data, sizeof data);
    snprintf(spec, sizeof spec, "npy:%s", tu_at("v2.npy"));
    p = tu_pipeline(spec, 0);
    assert_int_equal(tu_drain(p), 3);
    ef_pipeline_destroy(p);
}

/* The identities of a pass of `spec`, into ids (at most max). */
static size_t indices(const char *spec, int64_t *ids, size_t max)
{
    ef_pipeline *p = tu_pipeline(spec, 0);
    size_t n = 0;
    for (ef_sample *s; (s = tu_next_or_end(p, spec)) != NULL;) {
        assert_true(n < max);
        ids[n++] = ef_sample_identity(s).index;
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
    return n;
}

/* Two files' rows numbered on; shard=, first= and count= over them;
 * the length before open. */
static void test_files_shards_range(void **state)
{
    (void)state;
    write_npy(tu_at("a.npy"), "<i4", "(3,)", 12);
    write_npy(tu_at("e.npy"), "<i4", "(0,)", 0);
    write_npy(tu_at("b.npy"), "<i4", "(4,)", 16);
    char spec[512];
    int64_t ids[16];
    snprintf(spec, sizeof spec, "npy:files=\"%s %s %s\",shard=1/3",
             tu_at("a.npy"), tu_at("e.npy"), tu_at("b.npy"));
    assert_int_equal(indices(spec, ids, 16), 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 4);
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t n = 0;
    assert_int_equal(ef_pipeline_length(p, &n), EF_OK);
    assert_int_equal(n, 2);
    /* row 4 is file b's row 1: its bytes 4..7 */
    ef_sample *s = tu_next(p);
    s = (ef_sample_free(s), tu_next(p));
    assert_int_equal(((const unsigned char *)tu_field(s, "data").data)[0], 4);
    ef_sample_free(s);
    ef_pipeline_destroy(p);

    snprintf(spec, sizeof spec, "npy:files=\"%s %s\",first=2,count=3",
             tu_at("a.npy"), tu_at("b.npy"));
    assert_int_equal(indices(spec, ids, 16), 3);
    assert_int_equal(ids[0], 2);
    assert_int_equal(ids[2], 4);

    /* files that disagree on the rows */
    write_npy(tu_at("c.npy"), "<i2", "(3,)", 6);
    snprintf(spec, sizeof spec, "npy:files=\"%s %s\"", tu_at("a.npy"),
             tu_at("c.npy"));
    p = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    assert_non_null(strstr(ef_pipeline_error(p), "c.npy"));
    assert_non_null(strstr(ef_pipeline_error(p), "same dtype and row shape"));
    ef_pipeline_destroy(p);
}

/* A message about a row names the file that holds it: b.npy for row 3,
 * its row 0, whichever of the files came first. */
static void test_part_names(void **state)
{
    (void)state;
    write_npy(tu_at("a.npy"), "<i4", "(3,)", 12);
    write_npy(tu_at("b.npy"), "<i4", "(4,)", 16);
    char spec[512], want[600];
    snprintf(spec, sizeof spec,
             "npy:files=\"%s %s\",first=3 | select:fields=absent",
             tu_at("a.npy"), tu_at("b.npy"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    snprintf(want, sizeof want, "item 3 (epoch 0), file '%s'", tu_at("b.npy"));
    if (!strstr(ef_pipeline_error(p), want))
        fail_msg("\"%s\" does not say \"%s\"", ef_pipeline_error(p), want);
    ef_pipeline_destroy(p);
}

static ef_pipeline *make(const char *spec, const void *arg)
{
    (void)arg;
    return tu_pipeline(spec, 7);
}

/* Saved mid-pass and restored: the same rest, with the cursor alone and
 * with a shuffle's buffer read again by identity (fetch), over passes. */
static void test_checkpoint(void **state)
{
    (void)state;
    write_npy(tu_at("k.npy"), "<f4", "(20, 2)", 160);
    char spec[512];
    snprintf(spec, sizeof spec, "npy:files=%s,shard=1/2 | take:7",
             tu_at("k.npy"));
    tu_check_resume(make, NULL, spec, spec, NULL, 4, 64);
    snprintf(spec, sizeof spec,
             "npy:files=%s | shuffle:5 | repeat:2 | batch:3", tu_at("k.npy"));
    tu_check_resume(make, NULL, spec, spec, NULL, 6, 64);
}

/* The first pull of `spec` over a file holding `dict` and n bytes fails
 * with EF_EFORMAT, naming the file and `words`. */
static void expect_refused(const char *name, int version, const char *dict,
                           size_t n, const char *words)
{
    static unsigned char zeros[64];
    write_npy_dict(tu_at(name), version, dict, zeros, n);
    char spec[512];
    snprintf(spec, sizeof spec, "npy:files=%s", tu_at(name));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, name) || !strstr(msg, words))
        fail_msg("%s: message \"%s\" lacks \"%s\"", name, msg, words);
    ef_pipeline_destroy(p);
}

static void test_hostile_headers(void **state)
{
    (void)state;
    const char *ok = "{'descr': '<i4', 'fortran_order': False, 'shape': (2,)}";
    expect_refused("big.npy", 1,
                   "{'descr': '>i4', 'fortran_order': False, 'shape': (2,)}",
                   8, "big-endian");
    expect_refused("fortran.npy", 1,
                   "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 1)}",
                   8, "Fortran order");
    expect_refused("u4.npy", 1,
                   "{'descr': '<u4', 'fortran_order': False, 'shape': (2,)}",
                   8, "expected one of b1 u1");
    expect_refused("struct.npy", 1,
                   "{'descr': [('a', '<i4')], 'fortran_order': False, "
                   "'shape': (2,)}",
                   8, "structured");
    expect_refused("list.npy", 1, "['<i4', False, (2,)]", 8, "a dict");
    expect_refused("missing.npy", 1, "{'descr': '<i4', 'shape': (2,)}", 8,
                   "all three");
    expect_refused("extra-key.npy", 1,
                   "{'descr': '<i4', 'fortran_order': False, 'shape': (2,), "
                   "'x': 1}",
                   8, "and no other");
    expect_refused("neg.npy", 1,
                   "{'descr': '<i4', 'fortran_order': False, 'shape': (-2,)}",
                   8, "negative");
    expect_refused("over.npy", 1,
                   "{'descr': '<f8', 'fortran_order': False, "
                   "'shape': (4294967296, 4294967296)}",
                   0, "too large");
    expect_refused("big-dim.npy", 1,
                   "{'descr': '<f8', 'fortran_order': False, "
                   "'shape': (99999999999999999999,)}",
                   0, "below 2^63");
    expect_refused("0d.npy", 1,
                   "{'descr': '<i4', 'fortran_order': False, 'shape': ()}", 8,
                   "0-d array has no rows");
    expect_refused("short.npy", 2, ok, 5, "truncated");
    expect_refused("long.npy", 1, ok, 9, "extra data after offset");
    expect_refused("junk.npy", 1, "{'descr': '<i4', 'fortran_order': False, "
                   "'shape': (2,)} x", 8, "only spaces");

    /* the preamble: magic, version, a header length past the file */
    unsigned char bytes[80] = "\x93NUMPZ\x01";
    tu_write_file(tu_at("magic.npy"), bytes, sizeof bytes);
    memcpy(bytes, "\x93NUMPY\x04\x00", 8);
    tu_write_file(tu_at("version.npy"), bytes, sizeof bytes);
    memcpy(bytes, "\x93NUMPY\x01\x00\xff\x00", 10);
    tu_write_file(tu_at("past.npy"), bytes, sizeof bytes);
    tu_write_file(tu_at("tiny.npy"), bytes, 7);
    static const char *const cases[][2] = {
        {"magic.npy", "expected the magic"},
        {"version.npy", "version 4.0 at offset 6: expected 1.0, 2.0 or 3.0"},
        {"past.npy", "past the file's end at 80"},
        {"tiny.npy", "truncated NPY file: 7 bytes"}};
    for (size_t c = 0; c < 4; c++) {
        char spec[512];
        snprintf(spec, sizeof spec, "npy:files=%s", tu_at(cases[c][0]));
        ef_pipeline *p = tu_pipeline(spec, 0);
        ef_sample *s = NULL;
        assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
        if (!strstr(ef_pipeline_error(p), cases[c][0]) ||
            !strstr(ef_pipeline_error(p), cases[c][1]))
            fail_msg("%s: \"%s\"", cases[c][0], ef_pipeline_error(p));
        ef_pipeline_destroy(p);
    }
}

/* A missing file and a directory are I/O errors naming them. */
static void test_not_a_file(void **state)
{
    (void)state;
    char spec[512];
    snprintf(spec, sizeof spec, "npy:files=%s", tu_at("none.npy"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t n;
    assert_int_equal(ef_pipeline_length(p, &n), EF_EIO);
    assert_non_null(strstr(ef_pipeline_error(p), "none.npy"));
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "npy:files=%s", tu_dir());
    p = tu_pipeline(spec, 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_EIO);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_dtype),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_files_shards_range),
        cmocka_unit_test(test_part_names),
        cmocka_unit_test(test_checkpoint),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_not_a_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
