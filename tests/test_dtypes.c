/* SPDX-License-Identifier: Apache-2.0 */
/* Every dtype through the library: names and sizes, a source's fields
 * batched and read back byte for byte, cast between every pair (and its
 * refusals, which name the field and both dtypes), and the shard writer's
 * integer scalars. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/half.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("test_dtypes");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static void test_names_and_sizes(void **state)
{
    (void)state;
    static const struct {
        ef_dtype dtype;
        const char *name;
        size_t size;
    } want[] = {
        {EF_U8, "u8", 1},     {EF_I32, "i32", 4},   {EF_I64, "i64", 8},
        {EF_F32, "f32", 4},   {EF_BOOL, "bool", 1}, {EF_I8, "i8", 1},
        {EF_I16, "i16", 2},   {EF_U16, "u16", 2},   {EF_F16, "f16", 2},
        {EF_BF16, "bf16", 2}, {EF_F64, "f64", 8},
    };
    assert_int_equal(EF__DTYPE_COUNT, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        /* appended: the first four keep their numbers */
        assert_int_equal(want[i].dtype, (int)i);
        assert_string_equal(ef_dtype_name(want[i].dtype), want[i].name);
        assert_int_equal(ef_dtype_size(want[i].dtype), want[i].size);
    }
    assert_string_equal(ef_dtype_name(EF__DTYPE_COUNT), "?");
    assert_int_equal(ef_dtype_size(EF__DTYPE_COUNT), 0);
}

/* Byte k of field `d` of sample i (bool: 0 or 1). */
static unsigned char byte_of(int d, int64_t i, size_t k)
{
    if (d == EF_BOOL)
        return (unsigned char)((i + (int64_t)k) & 1);
    return (unsigned char)(i * 31 + (int64_t)k * 7 + d);
}

/* Samples 0..5, each with a [2] field of every dtype, named by it. */
static int all_dtypes_source(void *user, int64_t epoch, int block,
                             ef_sample **out)
{
    int64_t *next = user;
    (void)block;
    if (*next >= 6)
        return EF_END;
    ef_sample *s = ef_sample_new((ef_sample_id){.index = *next, .epoch = epoch});
    for (int d = 0; d < EF__DTYPE_COUNT; d++) {
        int64_t shape[1] = {2};
        unsigned char *data;
        assert_int_equal(ef_sample_add_new(s, ef_dtype_name((ef_dtype)d),
                                           (ef_dtype)d, 1, shape,
                                           (void **)&data),
                         EF_OK);
        for (size_t k = 0; k < 2 * ef_dtype_size((ef_dtype)d); k++)
            data[k] = byte_of(d, *next, k);
    }
    (*next)++;
    *out = s;
    return EF_OK;
}

/* The public readers of 16-bit floats, at the values that test a format:
 * one, the smallest subnormal, the largest finite, infinity, NaN. */
static void test_half_readers(void **state)
{
    (void)state;
    assert_true(ef_f16_to_float(0x3C00) == 1.0f);
    assert_true(ef_f16_to_float(0xC000) == -2.0f);
    assert_true(ef_f16_to_float(0x0001) == ldexpf(1.0f, -24));
    assert_true(ef_f16_to_float(0x7BFF) == 65504.0f);
    assert_true(isinf(ef_f16_to_float(0x7C00)));
    assert_true(isnan(ef_f16_to_float(0x7E00)));
    assert_true(ef_bf16_to_float(0x3F80) == 1.0f);
    assert_true(ef_bf16_to_float(0xC040) == -3.0f);
    assert_true(isinf(ef_bf16_to_float(0xFF80)) &&
                ef_bf16_to_float(0xFF80) < 0);
    assert_true(isnan(ef_bf16_to_float(0x7FC0)));
}

static void test_batch_round_trip(void **state)
{
    (void)state;
    int64_t next = 0;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, all_dtypes_source, &next, NULL),
                     EF_OK);
    tu_parse(p, "echo:2 | batch:4");
    for (int b = 0; b < 3; b++) {
        ef_sample *s = tu_next(p);
        for (int d = 0; d < EF__DTYPE_COUNT; d++) {
            ef_tensor t;
            size_t size = ef_dtype_size((ef_dtype)d);
            assert_int_equal(ef_sample_get(s, ef_dtype_name((ef_dtype)d), &t),
                             EF_OK);
            assert_int_equal(t.dtype, d);
            assert_int_equal(t.ndim, 2);
            assert_int_equal(t.shape[0], 4);
            assert_int_equal(t.shape[1], 2);
            assert_int_equal(t.nbytes, 4 * 2 * size);
            for (int r = 0; r < 4; r++) {
                int64_t i = (b * 4 + r) / 2; /* echo:2: each twice */
                for (size_t k = 0; k < 2 * size; k++)
                    assert_int_equal(
                        ((const unsigned char *)t.data)[(size_t)r * 2 * size +
                                                        k],
                        byte_of(d, i, k));
            }
        }
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* ---- cast ---- */

/* Element i of t as a double. */
static double value_at(const ef_tensor *t, int64_t i)
{
    const unsigned char *p =
        (const unsigned char *)t->data + i * (int64_t)ef_dtype_size(t->dtype);
    int8_t i8;
    int16_t i16;
    uint16_t u16;
    int32_t i32;
    int64_t i64;
    float f;
    double d;
    switch (t->dtype) {
    case EF_U8:
    case EF_BOOL:
        return *p;
    case EF_I8:
        memcpy(&i8, p, 1);
        return i8;
    case EF_I16:
        memcpy(&i16, p, 2);
        return i16;
    case EF_U16:
        memcpy(&u16, p, 2);
        return u16;
    case EF_I32:
        memcpy(&i32, p, 4);
        return i32;
    case EF_I64:
        memcpy(&i64, p, 8);
        return (double)i64;
    case EF_F16:
        memcpy(&u16, p, 2);
        return ef__f16_to_f32(u16);
    case EF_BF16:
        memcpy(&u16, p, 2);
        return ef__bf16_to_f32(u16);
    case EF_F32:
        memcpy(&f, p, 4);
        return f;
    default:
        memcpy(&d, p, 8);
        return d;
    }
}

/* Stores v (which the dtype holds exactly) as element i of data. */
static void put_value(unsigned char *data, ef_dtype dt, int64_t i, double v)
{
    unsigned char *p = data + i * (int64_t)ef_dtype_size(dt);
    union {
        int8_t i8;
        int16_t i16;
        uint16_t u16;
        int32_t i32;
        int64_t i64;
        float f;
        double d;
    } u;
    switch (dt) {
    case EF_U8:
    case EF_BOOL:
        *p = (unsigned char)v;
        return;
    case EF_I8:
        u.i8 = (int8_t)v;
        break;
    case EF_I16:
        u.i16 = (int16_t)v;
        break;
    case EF_U16:
        u.u16 = (uint16_t)v;
        break;
    case EF_I32:
        u.i32 = (int32_t)v;
        break;
    case EF_I64:
        u.i64 = (int64_t)v;
        break;
    case EF_F16:
        u.u16 = ef__f32_to_f16((float)v);
        break;
    case EF_BF16:
        u.u16 = ef__f32_to_bf16((float)v);
        break;
    case EF_F32:
        u.f = (float)v;
        break;
    default:
        u.d = v;
        break;
    }
    memcpy(p, &u, ef_dtype_size(dt));
}

/* What the cast source emits: one sample, field "x" [1, n] of `dtype`. */
static struct {
    ef_dtype dtype;
    int n;
    double values[4];
    int done;
} cast_in;

static int cast_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)user;
    (void)block;
    if (cast_in.done)
        return EF_END;
    cast_in.done = 1;
    ef_sample *s = ef_sample_new((ef_sample_id){.epoch = epoch});
    int64_t shape[2] = {1, cast_in.n};
    unsigned char *data;
    assert_int_equal(
        ef_sample_add_new(s, "x", cast_in.dtype, 2, shape, (void **)&data),
        EF_OK);
    for (int i = 0; i < cast_in.n; i++)
        put_value(data, cast_in.dtype, i, cast_in.values[i]);
    *out = s;
    return EF_OK;
}

/* A pipeline casting field x of `values` (n of them, of dtype `from`) to
 * dtype `to`. */
static ef_pipeline *cast_pipeline(ef_dtype from, ef_dtype to,
                                  const double *values, int n)
{
    cast_in.dtype = from;
    cast_in.n = n;
    memcpy(cast_in.values, values, sizeof(double) * (size_t)n);
    cast_in.done = 0;
    ef_pipeline *p;
    char spec[64];
    snprintf(spec, sizeof spec, "cast:dtype=%s,field=x", ef_dtype_name(to));
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, cast_source, NULL, NULL), EF_OK);
    tu_parse(p, spec);
    return p;
}

static void expect_cast(ef_dtype from, ef_dtype to, const double *values,
                        const double *want, int n)
{
    ef_pipeline *p = cast_pipeline(from, to, values, n);
    ef_sample *s = tu_next(p);
    ef_tensor t;
    assert_int_equal(ef_sample_get(s, "x", &t), EF_OK);
    assert_int_equal(t.dtype, to);
    for (int i = 0; i < n; i++)
        if (value_at(&t, i) != want[i])
            fail_msg("cast %s -> %s of %.17g: %.17g, expected %.17g",
                     ef_dtype_name(from), ef_dtype_name(to), values[i],
                     value_at(&t, i), want[i]);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void expect_refused(ef_dtype from, ef_dtype to, double value,
                           const char *shown)
{
    ef_pipeline *p = cast_pipeline(from, to, &value, 1);
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    if (rc != EF_EFORMAT)
        fail_msg("cast %s -> %s of %.17g: status %d, expected EF_EFORMAT",
                 ef_dtype_name(from), ef_dtype_name(to), value, rc);
    const char *msg = ef_pipeline_error(p);
    char want[128];
    snprintf(want, sizeof want, "field 'x' (%s) element [0,0] is %s, which %s",
             ef_dtype_name(from), shown, ef_dtype_name(to));
    if (!strstr(msg, want))
        fail_msg("message \"%s\" lacks \"%s\"", msg, want);
    ef_pipeline_destroy(p);
}

static void test_cast_every_pair(void **state)
{
    (void)state;
    /* values every dtype holds exactly */
    const double values[2] = {0, 1};
    for (int from = 0; from < EF__DTYPE_COUNT; from++)
        for (int to = 0; to < EF__DTYPE_COUNT; to++)
            expect_cast((ef_dtype)from, (ef_dtype)to, values, values, 2);
}

static void test_cast_values(void **state)
{
    (void)state;
    /* floats round to nearest, halves away from zero, into integers */
    const double f[4] = {-2.5, 2.5, 126.6, -0.4};
    const double fi[4] = {-3, 3, 127, 0};
    expect_cast(EF_F64, EF_I8, f, fi, 4);
    expect_cast(EF_F16, EF_I16, f, (const double[4]){-3, 3, 127, 0}, 4);
    /* 16-bit floats: to nearest, ties to even; f16 reaches 65504 and
     * 2^-24 */
    const double h[4] = {65504, 0x1p-24, 1 + 0x1p-11, 1 + 3 * 0x1p-11};
    expect_cast(EF_F64, EF_F16, h,
                (const double[4]){65504, 0x1p-24, 1, 1 + 4 * 0x1p-11}, 4);
    const double b[3] = {1 + 0x1p-8, 1 + 3 * 0x1p-8, 3e38};
    expect_cast(EF_F32, EF_BF16, b,
                (const double[3]){1, 1 + 4 * 0x1p-8, 3.00405527047391e+38}, 3);
    /* integers at the edges of each */
    expect_cast(EF_I64, EF_U16, (const double[2]){0, 65535},
                (const double[2]){0, 65535}, 2);
    expect_cast(EF_I32, EF_I16, (const double[2]){-32768, 32767},
                (const double[2]){-32768, 32767}, 2);
    expect_cast(EF_U16, EF_F64, (const double[1]){65535},
                (const double[1]){65535}, 1);
}

static void test_cast_refuses(void **state)
{
    (void)state;
    expect_refused(EF_I16, EF_U8, -300, "-300");
    expect_refused(EF_I32, EF_BOOL, 2, "2");
    expect_refused(EF_I64, EF_U16, 65536, "65536");
    expect_refused(EF_U8, EF_I8, 200, "200");
    expect_refused(EF_F32, EF_F16, 70000, "70000");
    expect_refused(EF_F64, EF_F32, 1e300, "1.0000000000000001e+300");
    expect_refused(EF_F64, EF_I16, 40000.2, "40000.199999999997");
}

static void test_cast_bad_option(void **state)
{
    (void)state;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:3 | cast:dtype=c64"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p),
                           "must be u8, i32, i64, f32, bool, i8, i16, u16, "
                           "f16, bf16 or f64, got 'c64'"));
    ef_pipeline_destroy(p);
}

/* ---- text fields ---- */

/* Samples 0..3: "name" a text of i + 1 letters, "tags" a list of i + 1
 * texts, "n" an i64. */
static int text_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    int64_t *next = user;
    (void)block;
    if (*next >= 4)
        return EF_END;
    int64_t i = *next, len = i + 1, tags_len = 2 * (i + 1);
    ef_sample *s = ef_sample_new((ef_sample_id){.index = i, .epoch = epoch});
    char *name, *tags;
    int64_t *n;
    assert_int_equal(ef_sample_add_new(s, "name", EF_U8, 1, &len,
                                       (void **)&name),
                     EF_OK);
    memset(name, 'a' + (int)i, (size_t)len);
    assert_int_equal(ef_sample_add_new(s, "tags", EF_U8, 1, &tags_len,
                                       (void **)&tags),
                     EF_OK);
    for (int64_t k = 0; k < len; k++) {
        tags[2 * k] = (char)('0' + k);
        tags[2 * k + 1] = '\0';
    }
    assert_int_equal(ef_sample_add_new(s, "n", EF_I64, 0, NULL, (void **)&n),
                     EF_OK);
    *n = i;
    assert_int_equal(ef_sample_set_text(s, "name", EF_TEXT), EF_OK);
    assert_int_equal(ef_sample_set_text(s, "tags", EF_TEXT_LIST), EF_OK);
    (*next)++;
    *out = s;
    return EF_OK;
}

static void test_text_marks(void **state)
{
    (void)state;
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    int64_t shape[2] = {2, 3};
    assert_int_equal(ef_sample_add_new(s, "t", EF_U8, 1, shape, NULL), EF_OK);
    assert_int_equal(ef_sample_add_new(s, "m", EF_U8, 2, shape, NULL), EF_OK);
    assert_int_equal(ef_sample_add_new(s, "i", EF_I32, 1, shape, NULL), EF_OK);
    assert_int_equal(ef_sample_text(s, "t"), EF_NOT_TEXT);
    assert_int_equal(ef_sample_set_text(s, "m", EF_TEXT), EF_EINVAL);
    assert_int_equal(ef_sample_set_text(s, "i", EF_TEXT), EF_EINVAL);
    assert_int_equal(ef_sample_set_text(s, "none", EF_TEXT), EF_EINVAL);
    assert_int_equal(ef_sample_set_text(s, "t", EF_NOT_TEXT), EF_EINVAL);
    assert_int_equal(ef_sample_set_text(s, "t", (ef_text_kind)7), EF_EINVAL);
    assert_int_equal(ef_sample_set_text(s, "t", EF_TEXT_LIST), EF_OK);
    assert_int_equal(ef_sample_text(s, "t"), EF_TEXT_LIST);
    assert_int_equal(ef_sample_text(s, "m"), EF_NOT_TEXT);
    assert_int_equal(ef_sample_text(s, "none"), EF_NOT_TEXT);
    /* a clone keeps the mark */
    ef_sample *c = ef_sample_clone(s);
    assert_int_equal(ef_sample_text(c, "t"), EF_TEXT_LIST);
    ef_sample_free(c);
    ef_sample_free(s);
}

static void test_text_batched(void **state)
{
    (void)state;
    int64_t next = 0;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, text_source, &next, NULL),
                     EF_OK);
    tu_parse(p, "echo:1 | batch:2");
    for (int b = 0; b < 2; b++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_text(s, "name"), EF_TEXT);
        assert_int_equal(ef_sample_text(s, "tags"), EF_TEXT_LIST);
        assert_int_equal(ef_sample_text(s, "n"), EF_NOT_TEXT);
        int64_t lengths[2];
        assert_int_equal(ef_sample_ragged_lengths(s, "name", lengths, 2), 2);
        assert_int_equal(lengths[0], 2 * b + 1);
        assert_int_equal(lengths[1], 2 * b + 2);
        assert_int_equal(ef_sample_ragged_lengths(s, "tags", lengths, 2), 2);
        assert_int_equal(lengths[0], 2 * (2 * b + 1));
        ef_tensor t;
        assert_int_equal(ef_sample_get(s, "tags", &t), EF_OK);
        assert_memory_equal(t.data, b ? "0\0001\0002\0" : "0\0", 2 * (2 * b + 1));
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* ---- the shard writer ---- */

static void test_writer_integer_scalars(void **state)
{
    (void)state;
    char pattern[512], spec[1024];
    snprintf(pattern, sizeof pattern, "%s/scalars-%%03d.tar", tu_dir());
    static const struct {
        ef_dtype dtype;
        double value;
        const char *text;
    } cases[] = {
        {EF_BOOL, 1, "1"},         {EF_I8, -128, "-128"},
        {EF_I16, -32768, "-32768"}, {EF_U16, 65535, "65535"},
        {EF_U8, 255, "255"},       {EF_I32, -7, "-7"},
        {EF_I64, 1e15, "1000000000000000"},
    };
    enum { N = sizeof cases / sizeof cases[0] };
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 100), EF_OK);
    for (int i = 0; i < N; i++) {
        ef_sample *s = ef_sample_new((ef_sample_id){.index = i});
        unsigned char *data;
        assert_int_equal(
            ef_sample_add_new(s, "v", cases[i].dtype, 0, NULL, (void **)&data),
            EF_OK);
        put_value(data, cases[i].dtype, 0, cases[i].value);
        assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
        ef_sample_free(s);
    }
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    ef_shard_writer_destroy(w);

    /* a float scalar has no exact text here: refused by field and dtype */
    snprintf(pattern, sizeof pattern, "%s/float-%%03d.tar", tu_dir());
    assert_int_equal(ef_shard_writer_create(&w, pattern, 100), EF_OK);
    ef_sample *s = ef_sample_new((ef_sample_id){.index = N});
    assert_int_equal(ef_sample_add_new(s, "v", EF_F64, 0, NULL, NULL), EF_OK);
    assert_int_equal(ef_shard_writer_add(w, s), EF_ESHAPE);
    assert_non_null(strstr(ef_shard_writer_error(w), "field 'v' (f64 [])"));
    ef_sample_free(s);
    ef_shard_writer_destroy(w);

    snprintf(spec, sizeof spec, "tar:urls=%s/scalars-000.tar,"
             "shuffle_shards=false", tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < N; i++) {
        ef_sample *r = tu_next(p);
        ef_tensor t;
        assert_int_equal(ef_sample_get(r, "v", &t), EF_OK);
        assert_int_equal(t.nbytes, strlen(cases[i].text));
        assert_memory_equal(t.data, cases[i].text, t.nbytes);
        ef_sample_free(r);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_half_readers),
        cmocka_unit_test(test_batch_round_trip),
        cmocka_unit_test(test_cast_every_pair),
        cmocka_unit_test(test_cast_values),
        cmocka_unit_test(test_cast_refuses),
        cmocka_unit_test(test_cast_bad_option),
        cmocka_unit_test(test_text_marks),
        cmocka_unit_test(test_text_batched),
        cmocka_unit_test(test_writer_integer_scalars),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
