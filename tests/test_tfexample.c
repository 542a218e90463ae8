/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example: the wire-format reader (src/codec/tfexample.c) on
 * records built by hand here, byte by byte, and the `tfexample` stage
 * after `tfrecord`: fields, defaults, errors naming the file, record and
 * feature, on_error=skip, threads and checkpoints. The records TensorFlow's
 * own protobuf writes are read in python/tests/test_tfexample.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codec/tfexample.h"
#include "common/crc32c.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_tfexample");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* ---- a protobuf writer ------------------------------------------- */

typedef struct {
    uint8_t b[2048];
    size_t n;
} pb;

static void pb_raw(pb *m, const void *d, size_t n)
{
    assert_true(m->n + n <= sizeof m->b);
    memcpy(m->b + m->n, d, n);
    m->n += n;
}

static void pb_varint(pb *m, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)(v & 0x7f);
        v >>= 7;
        c |= v ? 0x80 : 0;
        pb_raw(m, &c, 1);
    } while (v);
}

static void pb_tag(pb *m, unsigned num, int wt)
{
    pb_varint(m, (uint64_t)num << 3 | (unsigned)wt);
}

static void pb_len(pb *m, unsigned num, const void *d, size_t n)
{
    pb_tag(m, num, 2);
    pb_varint(m, n);
    pb_raw(m, d, n);
}

static void pb_sub(pb *m, unsigned num, const pb *s)
{
    pb_len(m, num, s->b, s->n);
}

static void pb_fixed32(pb *m, unsigned num, uint32_t v)
{
    pb_tag(m, num, 5);
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
                     (uint8_t)(v >> 24)};
    pb_raw(m, le, 4);
}

static uint32_t float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Feature messages: kind 1 bytes, 2 float, 3 int64; packed or not. */
static pb int64_feature(const int64_t *v, size_t n, int packed)
{
    pb list = {0}, f = {0};
    if (packed) {
        pb body = {0};
        for (size_t i = 0; i < n; i++)
            pb_varint(&body, (uint64_t)v[i]);
        pb_sub(&list, 1, &body);
    } else {
        for (size_t i = 0; i < n; i++) {
            pb_tag(&list, 1, 0);
            pb_varint(&list, (uint64_t)v[i]);
        }
    }
    pb_sub(&f, 3, &list);
    return f;
}

static pb float_feature(const float *v, size_t n, int packed)
{
    pb list = {0}, f = {0};
    if (packed) {
        pb body = {0};
        for (size_t i = 0; i < n; i++) {
            uint32_t u = float_bits(v[i]);
            uint8_t le[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16),
                             (uint8_t)(u >> 24)};
            pb_raw(&body, le, 4);
        }
        pb_sub(&list, 1, &body);
    } else {
        for (size_t i = 0; i < n; i++)
            pb_fixed32(&list, 1, float_bits(v[i]));
    }
    pb_sub(&f, 2, &list);
    return f;
}

static pb bytes_feature(const char *const *v, size_t n)
{
    pb list = {0}, f = {0};
    for (size_t i = 0; i < n; i++)
        pb_len(&list, 1, v[i], strlen(v[i]));
    pb_sub(&f, 1, &list);
    return f;
}

/* A map entry `key` -> feature, appended to a Features message. */
static void pb_entry(pb *features, const char *key, const pb *feature)
{
    pb e = {0};
    pb_len(&e, 1, key, strlen(key));
    pb_sub(&e, 2, feature);
    pb_sub(features, 1, &e);
}

static pb example_of(const pb *features)
{
    pb ex = {0};
    pb_sub(&ex, 1, features);
    return ex;
}

/* The example most tests read: an image's bytes, a label, a packed and an
 * unpacked list. */
static pb standard_example(int64_t label)
{
    static const char *const jpg[] = {"\xff\xd8 not really a jpeg"};
    const int64_t lab[] = {label}, sizes[] = {28, 28, 3};
    const float box[] = {0.25f, -1.5f, 3e-8f};
    pb fs = {0};
    pb f = bytes_feature(jpg, 1);
    pb_entry(&fs, "image/encoded", &f);
    f = int64_feature(lab, 1, 0);
    pb_entry(&fs, "image/class/label", &f);
    f = int64_feature(sizes, 3, 1);
    pb_entry(&fs, "image/shape", &f);
    f = float_feature(box, 3, 0);
    pb_entry(&fs, "bbox/xmin", &f);
    return example_of(&fs);
}

/* ---- the codec ----------------------------------------------------- */

static int parse(const pb *ex, ef__tfx_feature *f, size_t n, ef__err *err, ...)
{
    va_list ap;
    va_start(ap, err);
    for (size_t i = 0; i < n; i++) {
        f[i].name = va_arg(ap, const char *);
        f[i].len = strlen(f[i].name);
    }
    va_end(ap);
    ef__err_clear(err);
    return ef__tfx_parse(ex->b, ex->n, f, n, err);
}

static void test_codec_reads_every_kind(void **state)
{
    (void)state;
    pb ex = standard_example(7);
    ef__tfx_feature f[5];
    ef__err err;
    assert_int_equal(parse(&ex, f, 5, &err, "image/encoded",
                           "image/class/label", "image/shape", "bbox/xmin",
                           "absent"),
                     EF_OK);
    assert_int_equal(f[0].kind, EF__TFX_BYTES);
    assert_int_equal(f[0].count, 1);
    const uint8_t *d;
    size_t n;
    ef__tfx_bytes(&f[0], &d, &n, 1);
    assert_int_equal(n, 20);
    assert_memory_equal(d, "\xff\xd8 not really a jpeg", 20);
    assert_true(d > ex.b && d + n <= ex.b + ex.n); /* a view: no copy */
    int64_t v[3];
    assert_int_equal(f[1].kind, EF__TFX_INT64);
    assert_int_equal(f[1].count, 1);
    ef__tfx_int64s(&f[1], v);
    assert_int_equal(v[0], 7);
    assert_int_equal(f[2].count, 3);
    ef__tfx_int64s(&f[2], v);
    assert_true(v[0] == 28 && v[1] == 28 && v[2] == 3);
    float x[3];
    assert_int_equal(f[3].kind, EF__TFX_FLOAT);
    assert_int_equal(f[3].count, 3);
    ef__tfx_floats(&f[3], x);
    assert_true(x[0] == 0.25f && x[1] == -1.5f && x[2] == 3e-8f);
    assert_int_equal(f[4].kind, EF__TFX_MISSING);
}

/* Negative int64s take 10-byte varints; packed floats; a list given in
 * pieces, packed and unpacked mixed, is their concatenation. */
static void test_codec_packed_and_unpacked(void **state)
{
    (void)state;
    const int64_t big[] = {-1, INT64_MIN, INT64_MAX, 0};
    const float fl[] = {1.0f, -0.0f, 1e30f};
    pb fs = {0};
    pb f = int64_feature(big, 4, 1);
    pb_entry(&fs, "packed", &f);
    f = float_feature(fl, 3, 1);
    pb_entry(&fs, "floats", &f);
    /* int64_list given as: packed {5, 6}, then unpacked 7 in a second
     * Int64List of the same Feature */
    pb mixed = {0}, list = {0}, body = {0};
    pb_varint(&body, 5);
    pb_varint(&body, 6);
    pb_sub(&list, 1, &body);
    pb_sub(&mixed, 3, &list);
    list.n = 0;
    pb_tag(&list, 1, 0);
    pb_varint(&list, 7);
    pb_sub(&mixed, 3, &list);
    pb_entry(&fs, "mixed", &mixed);
    pb ex = example_of(&fs);
    ef__tfx_feature r[3];
    ef__err err;
    assert_int_equal(parse(&ex, r, 3, &err, "packed", "floats", "mixed"),
                     EF_OK);
    int64_t v[4];
    ef__tfx_int64s(&r[0], v);
    assert_int_equal(r[0].count, 4);
    assert_true(v[0] == -1 && v[1] == INT64_MIN && v[2] == INT64_MAX &&
                v[3] == 0);
    float x[3];
    ef__tfx_floats(&r[1], x);
    assert_true(x[0] == 1.0f && x[1] == 0.0f && x[2] == 1e30f);
    assert_int_equal(r[2].count, 3);
    ef__tfx_int64s(&r[2], v);
    assert_true(v[0] == 5 && v[1] == 6 && v[2] == 7);
}

/* Unknown fields of every wire type at every level are skipped, as is a
 * known field number with another wire type. */
static void test_codec_skips_unknown_fields(void **state)
{
    (void)state;
    pb junk = {0};
    pb_tag(&junk, 9, 0);
    pb_varint(&junk, 300);
    pb_tag(&junk, 10, 1);
    pb_raw(&junk, "12345678", 8);
    pb_len(&junk, 11, "xyz", 3);
    pb_fixed32(&junk, 12, 42);
    /* in the list, field 1 is the value: as a fixed32 it is skipped */
    pb list = {0}, f = {0}, fs = {0}, e = {0}, ex = {0};
    pb_raw(&list, junk.b, junk.n);
    pb_fixed32(&list, 1, 99);
    pb_tag(&list, 1, 0);
    pb_varint(&list, 42);
    pb_raw(&list, junk.b, junk.n);
    /* elsewhere field 1 as a varint is unknown */
    pb_tag(&junk, 1, 0);
    pb_varint(&junk, 1);
    pb_raw(&f, junk.b, junk.n);
    pb_sub(&f, 3, &list);
    pb_raw(&f, junk.b, junk.n);
    pb_raw(&e, junk.b, junk.n);
    pb_len(&e, 1, "label", 5);
    pb_sub(&e, 2, &f);
    pb_raw(&e, junk.b, junk.n);
    pb_raw(&fs, junk.b, junk.n);
    pb_sub(&fs, 1, &e);
    pb_raw(&fs, junk.b, junk.n);
    pb_raw(&ex, junk.b, junk.n);
    pb_sub(&ex, 1, &fs);
    pb_raw(&ex, junk.b, junk.n);
    ef__tfx_feature r[1];
    ef__err err;
    assert_int_equal(parse(&ex, r, 1, &err, "label"), EF_OK);
    assert_int_equal(r[0].kind, EF__TFX_INT64);
    assert_int_equal(r[0].count, 1);
    int64_t v;
    ef__tfx_int64s(&r[0], &v);
    assert_int_equal(v, 42);
}

/* A key given twice: the last entry wins; `features` given twice merge;
 * a oneof set twice takes the last kind; a Feature with no kind is
 * missing; an entry with no key has the key "". */
static void test_codec_protobuf_merging(void **state)
{
    (void)state;
    const int64_t one[] = {1}, two[] = {2, 2};
    const float half[] = {0.5f};
    pb fs1 = {0}, fs2 = {0};
    pb f = int64_feature(one, 1, 1);
    pb_entry(&fs1, "k", &f);
    f = int64_feature(two, 2, 0);
    pb_entry(&fs1, "k", &f); /* replaces the first */
    f = int64_feature(one, 1, 1);
    pb_entry(&fs1, "later", &f);
    /* the second `features`: replaces "later" with a float */
    f = float_feature(half, 1, 1);
    pb_entry(&fs2, "later", &f);
    /* the oneof: int64 then bytes then float: float it is */
    pb sw = int64_feature(two, 2, 1);
    static const char *const s[] = {"s"};
    pb b = bytes_feature(s, 1), fl = float_feature(half, 1, 0);
    pb_raw(&sw, b.b, b.n);
    pb_raw(&sw, fl.b, fl.n);
    pb_entry(&fs2, "switch", &sw);
    pb none = {0};
    pb_entry(&fs2, "nokind", &none);
    pb keyless = {0}, e = {0};
    f = int64_feature(one, 1, 0);
    pb_sub(&e, 2, &f);
    pb_sub(&keyless, 1, &e);
    pb_raw(&fs2, keyless.b, keyless.n);
    pb ex = {0};
    pb_sub(&ex, 1, &fs1);
    pb_sub(&ex, 1, &fs2);
    ef__tfx_feature r[5];
    ef__err err;
    assert_int_equal(
        parse(&ex, r, 5, &err, "k", "later", "switch", "nokind", ""), EF_OK);
    int64_t v[2];
    assert_int_equal(r[0].count, 2);
    ef__tfx_int64s(&r[0], v);
    assert_true(v[0] == 2 && v[1] == 2);
    assert_int_equal(r[1].kind, EF__TFX_FLOAT);
    assert_int_equal(r[2].kind, EF__TFX_FLOAT);
    assert_int_equal(r[2].count, 1);
    float x;
    ef__tfx_floats(&r[2], &x);
    assert_true(x == 0.5f);
    assert_int_equal(r[3].kind, EF__TFX_MISSING);
    assert_int_equal(r[4].kind, EF__TFX_INT64);
}

static void expect_bad(const pb *ex, const char *name, const char *want)
{
    ef__tfx_feature r[1];
    ef__err err;
    int rc = parse(ex, r, 1, &err, name);
    if (rc != EF_EFORMAT || !strstr(err.msg, want))
        fail_msg("got %d '%s', expected EF_EFORMAT with '%s'", rc, err.msg,
                 want);
}

static void test_codec_rejects_malformed(void **state)
{
    (void)state;
    pb ex = standard_example(3);
    /* every cut of the record either still parses or fails cleanly */
    for (size_t n = 0; n < ex.n; n++) {
        pb cut = ex;
        cut.n = n;
        ef__tfx_feature r[2];
        ef__err err;
        int rc = parse(&cut, r, 2, &err, "image/class/label", "bbox/xmin");
        assert_true(rc == EF_OK || (rc == EF_EFORMAT && err.msg[0]));
    }
    /* the label's list cut short: names the feature */
    pb fs = {0}, f = {0}, list = {0};
    pb_tag(&list, 1, 2);
    pb_varint(&list, 5); /* packed: 5 bytes claimed, 1 given */
    pb_varint(&list, 1);
    pb_sub(&f, 3, &list);
    pb_entry(&fs, "image/class/label", &f);
    pb bad = example_of(&fs);
    expect_bad(&bad, "image/class/label",
               "feature 'image/class/label' (int64_list): field 1 claims 5 "
               "bytes");
    /* a varint of 11 bytes in a requested list */
    list.n = f.n = fs.n = 0;
    pb_tag(&list, 1, 0);
    pb_raw(&list, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 11);
    pb_sub(&f, 3, &list);
    pb_entry(&fs, "x", &f);
    bad = example_of(&fs);
    expect_bad(&bad, "x", "longer than 10 bytes");
    /* a 10-byte varint over 64 bits */
    list.n = f.n = fs.n = 0;
    pb_tag(&list, 1, 0);
    pb_raw(&list, "\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", 10);
    pb_sub(&f, 3, &list);
    pb_entry(&fs, "x", &f);
    bad = example_of(&fs);
    expect_bad(&bad, "x", "over 64 bits");
    /* packed floats not a multiple of 4 */
    list.n = f.n = fs.n = 0;
    pb_len(&list, 1, "abcdef", 6);
    pb_sub(&f, 2, &list);
    pb_entry(&fs, "x", &f);
    bad = example_of(&fs);
    expect_bad(&bad, "x", "not a multiple of 4");
    /* wire types: a group, a 7, field number 0, in the Example itself */
    pb g = {0};
    pb_tag(&g, 2, 3);
    expect_bad(&g, "x",
               "byte 0: the Example: field 2 has wire type 3 (a "
               "group");
    g.n = 0;
    pb_tag(&g, 2, 7);
    expect_bad(&g, "x", "wire type 7 (no such wire type)");
    g.n = 0;
    pb_tag(&g, 0, 0);
    expect_bad(&g, "x", "field number 0");
    /* a length past the end, in the map's framing: whatever is asked */
    g.n = 0;
    pb_tag(&g, 1, 2);
    pb_varint(&g, 1000);
    pb_raw(&g, "abc", 3);
    expect_bad(&g, "x", "the Example: field 1 claims 1000 bytes, past the end");
    /* a fixed32 cut short, inside an entry's Feature */
    list.n = f.n = fs.n = 0;
    pb_tag(&f, 2, 5);
    pb_raw(&f, "ab", 2);
    pb_entry(&fs, "x", &f);
    bad = example_of(&fs);
    expect_bad(&bad, "x", "feature 'x': field 2's 4-byte value runs past");
}

/* ---- the stage ----------------------------------------------------- */

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A TFRecord file of the `n` examples. */
static void write_tfrecord(const char *path, const pb *ex, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < n; i++) {
        uint8_t head[12], tail[4];
        put_le(head, ex[i].n, 8);
        put_le(head + 8, ef__crc32c_mask(ef__crc32c(0, head, 8)), 4);
        put_le(tail, ef__crc32c_mask(ef__crc32c(0, ex[i].b, ex[i].n)), 4);
        assert_int_equal(fwrite(head, 1, 12, f), 12);
        assert_int_equal(fwrite(ex[i].b, 1, ex[i].n, f), ex[i].n);
        assert_int_equal(fwrite(tail, 1, 4, f), 4);
    }
    assert_int_equal(fclose(f), 0);
}

#define FEATURES                                                               \
    "image/encoded,image/class/label:int64 as label,"                          \
    "image/shape:int64:3,bbox/xmin:float:var,"                                 \
    "image/id:int64=-1 as id,bbox/ymin:float:var,"                             \
    "image/format:bytes=jpeg as format"

/* Five examples, labels 0 to 4. */
static const char *five(const char *name)
{
    pb ex[5];
    for (int i = 0; i < 5; i++)
        ex[i] = standard_example(i);
    write_tfrecord(tu_at(name), ex, 5);
    return tu_at(name);
}

static ef_pipeline *tfexample_pipeline(const char *file, const char *features,
                                       const char *after, int skip)
{
    static char spec[2048];
    snprintf(spec, sizeof spec,
             "tfrecord:files=%s | tfexample:features=\"%s\"%s", file, features,
             after);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    if (skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    return p;
}

static void test_stage_fields(void **state)
{
    (void)state;
    ef_pipeline *p =
        tfexample_pipeline(five("five.tfrecord"), FEATURES, ",threads=3", 0);
    for (int i = 0; i < 5; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_field_count(s), 7); /* record dropped */
        ef_tensor t = tu_field(s, "image/encoded");
        assert_true(t.dtype == EF_U8 && t.ndim == 1 && t.shape[0] == 20);
        assert_memory_equal(t.data, "\xff\xd8 not really a jpeg", 20);
        assert_int_equal(tu_i64(s, "label"), i);
        assert_int_equal(tu_i64(s, "id"), -1); /* the default */
        t = tu_field(s, "image/shape");
        assert_true(t.dtype == EF_I64 && t.ndim == 1 && t.shape[0] == 3);
        const int64_t *sh = t.data;
        assert_true(sh[0] == 28 && sh[1] == 28 && sh[2] == 3);
        t = tu_field(s, "bbox/xmin");
        assert_true(t.dtype == EF_F32 && t.ndim == 1 && t.shape[0] == 3);
        assert_true(((const float *)t.data)[2] == 3e-8f);
        t = tu_field(s, "bbox/ymin"); /* var, missing: empty */
        assert_true(t.dtype == EF_F32 && t.ndim == 1 && t.shape[0] == 0);
        t = tu_field(s, "format");
        assert_true(t.ndim == 1 && t.shape[0] == 4);
        assert_memory_equal(t.data, "jpeg", 4);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* The TF Object Detection API's per-object lists: `var` features of n
 * values, n = 0 included (an empty list given, or none), are 1-D fields
 * of length n, and variable-length, so `batch` makes them lists even when
 * a batch's lengths happen to agree. */
static pb object_example(int nobj, int given)
{
    const float xmin[] = {0.125f, 0.5f};
    const int64_t label[] = {3, 17};
    pb fs = {0};
    pb f = float_feature(xmin, (size_t)nobj, 1);
    if (given)
        pb_entry(&fs, "image/object/bbox/xmin", &f);
    f = int64_feature(label, (size_t)nobj, 1);
    if (given)
        pb_entry(&fs, "image/object/class/label", &f);
    return example_of(&fs);
}

static void test_stage_var_lists_are_variable(void **state)
{
    (void)state;
    pb ex[4] = {object_example(2, 1), object_example(0, 1),
                object_example(0, 0), object_example(2, 1)};
    write_tfrecord(tu_at("objects.tfrecord"), ex, 4);
    const char *features = "image/object/bbox/xmin:float:var,"
                           "image/object/class/label:int64:var as labels";
    ef_pipeline *p =
        tfexample_pipeline(tu_at("objects.tfrecord"), features, "", 0);
    static const int64_t n[4] = {2, 0, 0, 2};
    for (int i = 0; i < 4; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor x = tu_field(s, "image/object/bbox/xmin");
        ef_tensor l = tu_field(s, "labels");
        assert_true(x.dtype == EF_F32 && x.ndim == 1 && x.shape[0] == n[i]);
        assert_true(l.dtype == EF_I64 && l.ndim == 1 && l.shape[0] == n[i]);
        if (n[i])
            assert_true(((const float *)x.data)[1] == 0.5f &&
                        ((const int64_t *)l.data)[1] == 17);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* batches of lengths 2, 0 and 0, 2: lists; then 2, 2: a list too */
    pb same[2] = {object_example(2, 1), object_example(2, 1)};
    write_tfrecord(tu_at("same.tfrecord"), same, 2);
    const char *files[2] = {tu_at("objects.tfrecord"), tu_at("same.tfrecord")};
    for (int k = 0; k < 2; k++) {
        p = tfexample_pipeline(files[k], features, " | batch:2", 0);
        ef_sample *b;
        for (int j = 0; (b = tu_next_or_end(p, files[k])) != NULL; j++) {
            int64_t len[2];
            for (int f = 0; f < 2; f++) {
                const char *name = f ? "labels" : "image/object/bbox/xmin";
                if (ef_sample_ragged_lengths(b, name, len, 2) != 2)
                    fail_msg("batch %d of %s: field '%s' is not a list", j,
                             files[k], name);
                assert_int_equal(len[0], k ? 2 : n[2 * j]);
                assert_int_equal(len[1], k ? 2 : n[2 * j + 1]);
            }
            ef_sample_free(b);
        }
        ef_pipeline_destroy(p);
    }
}

/* Errors name the file, the record, its offset and the feature. */
static void expect_error(ef_pipeline *p, int status, const char *a,
                         const char *b)
{
    ef_sample *s = NULL;
    for (;;) {
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_sample_free(s);
            continue;
        }
        if (rc != status || !strstr(ef_pipeline_error(p), a) ||
            (b && !strstr(ef_pipeline_error(p), b)))
            fail_msg("got %s '%s'; expected %s with '%s' and '%s'",
                     ef_status_name(rc), ef_pipeline_error(p),
                     ef_status_name(status), a, b ? b : "");
        return;
    }
}

static void test_stage_errors(void **state)
{
    (void)state;
    const char *file = five("errs.tfrecord");
    char want[600];
    /* record 0 starts at offset 0; each is 16 + its bytes long */
    snprintf(want, sizeof want,
             "tfexample: item 0 (epoch 0), file '%s': record 0 at offset 0: "
             "feature 'image/class/label' is a int64_list in the record, "
             "expected float",
             file);
    ef_pipeline *p = tfexample_pipeline(file, "image/class/label:float", "", 0);
    expect_error(p, EF_EFORMAT, want, NULL);
    ef_pipeline_destroy(p);
    p = tfexample_pipeline(file, "image/shape:int64:2", "", 0);
    expect_error(p, EF_EFORMAT,
                 "feature 'image/shape' holds 3 int64 values, expected 2 "
                 "(shape [2])",
                 file);
    ef_pipeline_destroy(p);
    p = tfexample_pipeline(file, "image/shape:int64", "", 0);
    expect_error(p, EF_EFORMAT, "expected one value", NULL);
    ef_pipeline_destroy(p);
    p = tfexample_pipeline(file, "nope:int64", "", 0);
    expect_error(p, EF_EFORMAT, "feature 'nope' is missing", NULL);
    ef_pipeline_destroy(p);
    /* two strings in one bytes feature */
    static const char *const two[] = {"a", "b"};
    pb fs = {0};
    pb f = bytes_feature(two, 2);
    pb_entry(&fs, "texts", &f);
    pb ex[2] = {standard_example(0), example_of(&fs)};
    write_tfrecord(tu_at("two.tfrecord"), ex, 2);
    p = tfexample_pipeline(tu_at("two.tfrecord"), "texts:bytes:var", "", 0);
    snprintf(want, sizeof want,
             "file '%s': record 1 at offset %zu: feature "
             "'texts' holds 2 strings",
             tu_at("two.tfrecord"), 16 + ex[0].n);
    expect_error(p, EF_EFORMAT, want, NULL);
    ef_pipeline_destroy(p);
}

/* Output names must not take a field the sample keeps (range's index). */
static void test_stage_name_taken(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=2,bytes=4 | tfexample:field=data,"
                                 "features=\"x:int64:var as index\"",
                                 0);
    expect_error(p, EF_ESHAPE,
                 "tfexample: item 0 (epoch 0): the sample already has a "
                 "field 'index'; rename the feature (x as OUT)",
                 NULL);
    ef_pipeline_destroy(p);
}

/* A record whose CRCs are right but whose protobuf is not: an error naming
 * the file, record and byte; under skip, dropped and counted. */
static void test_stage_malformed_and_skip(void **state)
{
    (void)state;
    pb ex[3] = {standard_example(0), standard_example(1), standard_example(2)};
    ex[1].n -= 3; /* the last entry cut short */
    write_tfrecord(tu_at("bad.tfrecord"), ex, 3);
    char want[600];
    snprintf(want, sizeof want,
             "file '%s': record 1 at offset %zu: malformed Example (%zu "
             "bytes): byte ",
             tu_at("bad.tfrecord"), 16 + ex[0].n, ex[1].n);
    ef_pipeline *p = tfexample_pipeline(tu_at("bad.tfrecord"),
                                        "image/class/label:int64", "", 0);
    expect_error(p, EF_EFORMAT, want, "past the end");
    ef_pipeline_destroy(p);

    p = tfexample_pipeline(tu_at("bad.tfrecord"), "image/class/label:int64",
                           ",threads=2", 1);
    ef_sample *s = tu_next(p);
    assert_int_equal(tu_i64(s, "image/class/label"), 0);
    ef_sample_free(s);
    s = tu_next(p);
    assert_int_equal(tu_i64(s, "image/class/label"), 2);
    ef_sample_free(s);
    tu_expect_end(p);
    char why[600];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 1);
    assert_non_null(strstr(why, want));
    ef_pipeline_destroy(p);
}

static void expect_spec_error(const char *features, const char *want)
{
    char spec[1024];
    snprintf(spec, sizeof spec, "tfrecord:files=x | tfexample:features=\"%s\"",
             features);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    int rc = ef_pipeline_parse(p, spec);
    if (rc != EF_ESPEC || !strstr(ef_pipeline_error(p), want))
        fail_msg("'%s': got %d '%s', expected '%s'", features, rc,
                 ef_pipeline_error(p), want);
    ef_pipeline_destroy(p);
}

static void test_stage_spec_errors(void **state)
{
    (void)state;
    expect_spec_error("a:int32", "kind 'int32'; expected bytes, int64 or");
    expect_spec_error("a:bytes:2", "a bytes feature is one string");
    expect_spec_error("a:int64:0", "length '0'");
    expect_spec_error("a:float:var=1", "a var feature has no default");
    expect_spec_error("a=1", "a default needs a kind");
    expect_spec_error("a:int64:2=1 2 3", "has more than 2 values");
    expect_spec_error("a:int64:3=1 2", "has 2 values; expected 1");
    expect_spec_error("a:int64=x", "is not an int64");
    expect_spec_error("a,b as a", "two features would become field 'a'");
    expect_spec_error("a,", "expected NAME[:KIND[:LEN]]");
    expect_spec_error("a as record", "the record's field");
    expect_spec_error("", "option 'features' is required");
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "tfrecord:files=x | tfexample"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p),
                           "stage 'tfexample': option 'features' is required"));
    ef_pipeline_destroy(p);
    /* a list with commas left unquoted: the message shows it quoted */
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "tfrecord:files=x | tfexample:"
                                          "features=image/encoded,"
                                          "image/class/label:int64 as label"),
                     EF_ESPEC);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, "quote the list: features=\"image/encoded,image/class/"
                     "label:int64 as label\""))
        fail_msg("%s", msg);
    ef_pipeline_destroy(p);
}

/* Whether a sample can hold `n` fields named like `name` (the core's
 * limits, which are being lifted: the tests follow them). */
static int sample_holds(const char *name, int n)
{
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    int ok = s != NULL;
    for (int i = 0; ok && i < n; i++) {
        char nm[128];
        snprintf(nm, sizeof nm, "%s%d", name, i);
        ok = ef_sample_add_new(s, nm, EF_U8, 0, NULL, NULL) == EF_OK;
    }
    ef_sample_free(s);
    return ok;
}

/* TF's long names (image/object/bbox/xmin, 22 bytes, and longer) and many
 * features: refused at parse time, naming the field, while the core's
 * sample cannot hold them; read whole once it can. */
static void test_stage_long_names_and_many_fields(void **state)
{
    (void)state;
    const char *longname = "image/object/bbox/xmin/of/a/long/name/";
    const int64_t v[] = {11};
    pb fs = {0};
    char names[12][64];
    for (int i = 0; i < 12; i++) {
        snprintf(names[i], sizeof names[i], "%s%d", longname, i);
        pb f = int64_feature(v, 1, i % 2);
        pb_entry(&fs, names[i], &f);
    }
    pb ex = example_of(&fs);
    write_tfrecord(tu_at("long.tfrecord"), &ex, 1);
    char features[1024] = "";
    for (int i = 0; i < 12; i++)
        snprintf(features + strlen(features),
                 sizeof features - strlen(features), "%s%s:int64", i ? "," : "",
                 names[i]);
    if (!sample_holds(longname, 12)) {
        expect_spec_error(features, "a sample cannot hold field");
        expect_spec_error("a,b,c,d,e,f,g,h,i,j,k,l",
                          "a sample cannot hold field");
        return;
    }
    ef_pipeline *p =
        tfexample_pipeline(tu_at("long.tfrecord"), features, "", 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_field_count(s), 12);
    for (int i = 0; i < 12; i++)
        assert_int_equal(tu_i64(s, names[i]), 11);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* Checkpoints: a shuffle after tfexample holds parsed items at the save;
 * the restored pipeline fetches them again through tfexample and gives
 * the rest as the first run did. */
static void test_stage_checkpoint(void **state)
{
    (void)state;
    pb ex[12];
    for (int i = 0; i < 12; i++)
        ex[i] = standard_example(100 + i);
    write_tfrecord(tu_at("twelve.tfrecord"), ex, 12);
    const char *after = ",threads=2 | shuffle:4";
    /* a list spread over lines, blanks around the parts */
    const char *features = "image/class/label : int64,\n  bbox/xmin:float: 3";
    ef_pipeline *a =
        tfexample_pipeline(tu_at("twelve.tfrecord"), features, after, 0);
    for (int i = 0; i < 3; i++)
        ef_sample_free(tu_next(a));
    size_t size;
    assert_int_equal(ef_pipeline_save_state(a, NULL, 0, &size), EF_OK);
    void *buf = malloc(size);
    assert_int_equal(ef_pipeline_save_state(a, buf, size, &size), EF_OK);
    ef_pipeline *b =
        tfexample_pipeline(tu_at("twelve.tfrecord"), features, after, 0);
    int rc = ef_pipeline_restore_state(b, buf, size);
    if (rc != EF_OK)
        fail_msg("restore: %s", ef_pipeline_error(b));
    free(buf);
    for (int i = 3; i < 12; i++) {
        ef_sample *x = tu_next(a), *y = tu_next(b);
        assert_int_equal(tu_i64(x, "image/class/label"),
                         tu_i64(y, "image/class/label"));
        assert_int_equal(ef_sample_field_count(y), 2);
        ef_tensor t = tu_field(y, "bbox/xmin");
        assert_true(t.dtype == EF_F32 && t.shape[0] == 3);
        ef_sample_free(x);
        ef_sample_free(y);
    }
    tu_expect_end(a);
    tu_expect_end(b);
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec_reads_every_kind),
        cmocka_unit_test(test_codec_packed_and_unpacked),
        cmocka_unit_test(test_codec_skips_unknown_fields),
        cmocka_unit_test(test_codec_protobuf_merging),
        cmocka_unit_test(test_codec_rejects_malformed),
        cmocka_unit_test(test_stage_fields),
        cmocka_unit_test(test_stage_errors),
        cmocka_unit_test(test_stage_var_lists_are_variable),
        cmocka_unit_test(test_stage_name_taken),
        cmocka_unit_test(test_stage_malformed_and_skip),
        cmocka_unit_test(test_stage_spec_errors),
        cmocka_unit_test(test_stage_checkpoint),
        cmocka_unit_test(test_stage_long_names_and_many_fields),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
