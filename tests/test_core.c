/* SPDX-License-Identifier: Apache-2.0 */
/* Core API: status codes, versions, dtypes, buffers, samples, and
 * allocation-failure injection through the whole pipeline. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/buffer.h"
#include "core/clock.h"
#include "core/queue.h"
#include "core/sample.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

/* ---- status codes ------------------------------------------------- */

typedef struct {
    int code;
    const char *name;
    const char *text;
} status_row;

static const status_row k_status[] = {
#define ROW(name, value, text) {value, #name, text},
    EF_STATUS_MAP(ROW)
#undef ROW
};
#define NSTATUS ((int)(sizeof k_status / sizeof k_status[0]))

static void test_status_names_and_texts(void **state)
{
    (void)state;
    assert_int_equal(NSTATUS, 13);
    for (int i = 0; i < NSTATUS; i++) {
        const char *text = ef_strerror(k_status[i].code);
        const char *name = ef_status_name(k_status[i].code);
        assert_non_null(text);
        assert_non_null(name);
        assert_true(strlen(text) > 0);
        assert_true(strlen(name) > 0);
        assert_string_equal(name, k_status[i].name);
        assert_string_equal(text, k_status[i].text);
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(text, ef_strerror(k_status[j].code));
            assert_string_not_equal(name, ef_status_name(k_status[j].code));
        }
    }
    /* the sign convention of the header */
    assert_int_equal(EF_OK, 0);
    assert_true(EF_END > 0);
    assert_true(EF_EINVAL < 0 && EF_ENOMEM < 0 && EF_ESHAPE < 0);
}

static void test_status_unknown_code(void **state)
{
    (void)state;
    int weird[] = {12345, -12345, 3, -11, 1 << 30};
    for (size_t i = 0; i < sizeof weird / sizeof weird[0]; i++) {
        const char *t = ef_strerror(weird[i]);
        const char *n = ef_status_name(weird[i]);
        assert_non_null(t);
        assert_non_null(n);
        assert_true(strlen(t) > 0);
        assert_true(strlen(n) > 0);
    }
}

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(ef_version_number(), EF_VERSION_NUMBER);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", EF_VERSION_MAJOR, EF_VERSION_MINOR,
             EF_VERSION_PATCH);
    assert_string_equal(ef_version_string(), want);
}

static void test_dtypes(void **state)
{
    (void)state;
    assert_int_equal(ef_dtype_size(EF_U8), 1);
    assert_int_equal(ef_dtype_size(EF_I32), 4);
    assert_int_equal(ef_dtype_size(EF_I64), 8);
    assert_int_equal(ef_dtype_size(EF_F32), 4);
    assert_int_equal(ef_dtype_size(EF__DTYPE_COUNT), 0);
    assert_int_equal(ef_dtype_size((ef_dtype)99), 0);
    assert_string_equal(ef_dtype_name(EF_U8), "u8");
    assert_string_equal(ef_dtype_name(EF_I32), "i32");
    assert_string_equal(ef_dtype_name(EF_I64), "i64");
    assert_string_equal(ef_dtype_name(EF_F32), "f32");
    assert_string_equal(ef_dtype_name(EF__DTYPE_COUNT), "?");
    assert_string_equal(ef_dtype_name((ef_dtype)99), "?");
}

static void test_opt_type_names(void **state)
{
    (void)state;
    assert_string_equal(ef_opt_type_name(EF_OPT_INT), "int");
    assert_string_equal(ef_opt_type_name(EF_OPT_FLOAT), "float");
    assert_string_equal(ef_opt_type_name(EF_OPT_BOOL), "bool");
    assert_string_equal(ef_opt_type_name(EF_OPT_STRING), "string");
    assert_string_equal(ef_opt_type_name(EF_OPT_FACTOR), "factor");
    assert_string_equal(ef_opt_type_name(EF_OPT_INT_AUTO), "int|auto");
}

/* ---- buffers ------------------------------------------------------ */

static void test_buffer_refcount(void **state)
{
    (void)state;
    ef_buffer *b = ef_buffer_new(16);
    assert_non_null(b);
    assert_non_null(ef_buffer_data(b));
    assert_int_equal(ef_buffer_size(b), 16);
    assert_int_equal(ef_buffer_refcount(b), 1);
    memset(ef_buffer_data(b), 0xab, 16); /* writable, all 16 bytes */

    assert_ptr_equal(ef_buffer_retain(b), b);
    assert_int_equal(ef_buffer_refcount(b), 2);
    assert_ptr_equal(ef_buffer_retain(b), b);
    assert_int_equal(ef_buffer_refcount(b), 3);
    ef_buffer_release(b);
    assert_int_equal(ef_buffer_refcount(b), 2);
    ef_buffer_release(b);
    assert_int_equal(ef_buffer_refcount(b), 1);
    assert_int_equal(((unsigned char *)ef_buffer_data(b))[15], 0xab);
    ef_buffer_release(b); /* frees: ASan reports a leak otherwise */
    ef_buffer_release(NULL);
}

typedef struct {
    int calls;
    void *last_user;
} release_log;

static void on_release(void *user)
{
    release_log *log = user;
    log->calls++;
    log->last_user = user;
}

/* Large buffers are reused: a freed one serves the next request of up to
 * its size and at least half of it, as a new buffer. */
static void test_buffer_large_reused(void **state)
{
    (void)state;
    if (ef__buffer_keep_max() == 0)
        skip(); /* address sanitizer builds keep none */
    size_t big = 3 * EF__BUFFER_LARGE;
    ef_buffer *a = ef_buffer_new(big);
    assert_non_null(a);
    void *at = ef_buffer_data(a);
    memset(at, 0xab, big);
    ef_buffer_release(a);
    ef_buffer *b = ef_buffer_new(big - 1000);
    assert_ptr_equal(ef_buffer_data(b), at);
    assert_int_equal(ef_buffer_size(b), big - 1000);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
    /* less than half: a block of its own (the kept one is still kept,
     * so it cannot be this one) */
    ef_buffer *c = ef_buffer_new(big / 2 - 1);
    assert_ptr_not_equal(ef_buffer_data(c), at);
    ef_buffer_release(c);
    ef_buffer *d = ef_buffer_new(big);
    assert_ptr_equal(ef_buffer_data(d), at);
    ef_buffer_release(d);
    /* small buffers are malloc's business */
    ef_buffer *e = ef_buffer_new(1000);
    assert_non_null(e);
    ef_buffer_release(e);
}

static void test_buffer_wrap(void **state)
{
    (void)state;
    static unsigned char mem[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    release_log log = {0, NULL};
    ef_buffer *b = ef_buffer_wrap(mem, sizeof mem, on_release, &log);
    assert_non_null(b);
    assert_ptr_equal(ef_buffer_data(b), mem);
    assert_int_equal(ef_buffer_size(b), sizeof mem);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_retain(b);
    ef_buffer_release(b);
    assert_int_equal(log.calls, 0);

    /* a sample holding the buffer keeps it alive */
    ef_sample_id id = {.index = 3};
    ef_sample *s = ef_sample_new(id);
    assert_non_null(s);
    int64_t shape[1] = {10};
    assert_int_equal(ef_sample_add(s, "bytes", EF_U8, 1, shape, b, 0), EF_OK);
    assert_int_equal(ef_buffer_refcount(b), 2);
    ef_buffer_release(b);
    assert_int_equal(log.calls, 0);
    ef_tensor t = tu_field(s, "bytes");
    assert_ptr_equal(t.data, mem);
    ef_sample_free(s);
    assert_int_equal(log.calls, 1);
    assert_ptr_equal(log.last_user, &log);
}

/* Memory wrapped for a caller stays the caller's (borrowed: a binding
 * copies it before handing it out writable); memory echoflow allocated
 * and adopted, or a new buffer, is its own. */
static void test_buffer_borrowed(void **state)
{
    (void)state;
    static unsigned char mem[4];
    release_log log = {0, NULL};
    ef_buffer *b = ef_buffer_wrap(mem, sizeof mem, on_release, &log);
    assert_int_equal(ef_buffer_is_borrowed(b), 1);
    ef_buffer_release(b);
    assert_int_equal(log.calls, 1);
    ef_buffer *own = ef_buffer_new(16);
    assert_int_equal(ef_buffer_is_borrowed(own), 0);
    ef_buffer_release(own);
    void *data = ef__malloc(8);
    assert_non_null(data);
    ef_buffer *a = ef__buffer_adopt(data, 8, ef__free, data);
    assert_int_equal(ef_buffer_is_borrowed(a), 0);
    ef_buffer_release(a);
}

/* ---- samples ------------------------------------------------------ */

static ef_buffer *filled_buffer(size_t n)
{
    ef_buffer *b = ef_buffer_new(n);
    assert_non_null(b);
    unsigned char *d = ef_buffer_data(b);
    for (size_t i = 0; i < n; i++)
        d[i] = (unsigned char)(i * 7 + 1);
    return b;
}

static void test_sample_add_and_get(void **state)
{
    (void)state;
    ef_sample_id id = {.index = 42, .epoch = 3, .echo_copy = 2};
    ef_sample *s = ef_sample_new(id);
    assert_non_null(s);
    assert_int_equal(ef_sample_field_count(s), 0);
    ef_sample_id got = ef_sample_identity(s);
    assert_int_equal(got.index, 42);
    assert_int_equal(got.epoch, 3);
    assert_int_equal(got.echo_copy, 2);

    ef_buffer *b = filled_buffer(64);
    int64_t shape2[2] = {2, 3};
    /* 6 i32 = 24 bytes from offset 8 */
    assert_int_equal(ef_sample_add(s, "mat", EF_I32, 2, shape2, b, 8), EF_OK);
    assert_int_equal(ef_buffer_refcount(b), 2);
    int64_t scalar_shape[1] = {0};
    assert_int_equal(ef_sample_add(s, "scalar", EF_I64, 0, scalar_shape, b, 56),
                     EF_OK);
    assert_int_equal(ef_buffer_refcount(b), 3);
    assert_int_equal(ef_sample_field_count(s), 2);

    ef_tensor t;
    assert_int_equal(ef_sample_get(s, "mat", &t), EF_OK);
    assert_string_equal(t.name, "mat");
    assert_int_equal(t.dtype, EF_I32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], 2);
    assert_int_equal(t.shape[1], 3);
    assert_int_equal(t.nbytes, 24);
    assert_ptr_equal(t.data, (unsigned char *)ef_buffer_data(b) + 8);
    assert_ptr_equal(t.buffer, b);

    assert_int_equal(ef_sample_get(s, "scalar", &t), EF_OK);
    assert_int_equal(t.ndim, 0);
    assert_int_equal(t.nbytes, 8);
    assert_ptr_equal(t.data, (unsigned char *)ef_buffer_data(b) + 56);

    /* by position */
    assert_int_equal(ef_sample_field(s, 0, &t), EF_OK);
    assert_string_equal(t.name, "mat");
    assert_int_equal(ef_sample_field(s, 1, &t), EF_OK);
    assert_string_equal(t.name, "scalar");
    assert_int_equal(ef_sample_field(s, 2, &t), EF_EINVAL);
    assert_int_equal(ef_sample_field(s, -1, &t), EF_EINVAL);
    assert_int_equal(ef_sample_get(s, "nope", &t), EF_EINVAL);
    assert_int_equal(ef_sample_get(s, "ma", &t), EF_EINVAL);

    ef_buffer_release(b); /* the sample still holds two references */
    assert_int_equal(ef_buffer_refcount(b), 2);
    ef_sample_free(s);
    ef_sample_free(NULL);
}

static void test_sample_add_validation(void **state)
{
    (void)state;
    ef_sample_id id = {.index = 0};
    ef_sample *s = ef_sample_new(id);
    assert_non_null(s);
    ef_buffer *b = filled_buffer(16);
    int64_t four[1] = {4};
    int64_t five[1] = {5};

    /* names: EF_MAX_NAME - 1 bytes is the longest allowed */
    char name_ok[EF_MAX_NAME];
    char name_long[EF_MAX_NAME + 1];
    memset(name_ok, 'a', sizeof name_ok);
    name_ok[EF_MAX_NAME - 1] = '\0';
    memset(name_long, 'b', sizeof name_long);
    name_long[EF_MAX_NAME] = '\0';
    assert_int_equal(ef_sample_add(s, name_long, EF_U8, 1, four, b, 0),
                     EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "", EF_U8, 1, four, b, 0), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, NULL, EF_U8, 1, four, b, 0), EF_EINVAL);

    /* size and range: 4 x i32 = 16 bytes fits only at offset 0 */
    assert_int_equal(ef_sample_add(s, "x", EF_I32, 1, five, b, 0), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_I32, 1, four, b, 4), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, b, 13), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, b, 17), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, b, (size_t)-1),
                     EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, b, (size_t)-3),
                     EF_EINVAL);
    int64_t huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40}; /* overflows */
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 2, huge, b, 0), EF_EINVAL);
    int64_t negative[1] = {-4};
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, negative, b, 0),
                     EF_EINVAL);
    int64_t dims7[EF_MAX_DIMS + 1] = {1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(ef_sample_add(s, "x", EF_U8, EF_MAX_DIMS + 1, dims7, b, 0),
                     EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, -1, four, b, 0), EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF__DTYPE_COUNT, 1, four, b, 0),
                     EF_EINVAL);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, NULL, 0), EF_EINVAL);

    /* nothing was added and no reference was taken by the failures */
    assert_int_equal(ef_sample_field_count(s), 0);
    assert_int_equal(ef_buffer_refcount(b), 1);

    /* good ones, then a duplicate name */
    assert_int_equal(ef_sample_add(s, name_ok, EF_U8, 1, four, b, 12), EF_OK);
    assert_int_equal(ef_sample_add(s, "x", EF_I32, 1, four, b, 0), EF_OK);
    assert_int_equal(ef_sample_add(s, "x", EF_U8, 1, four, b, 0), EF_EINVAL);
    assert_int_equal(ef_sample_field_count(s), 2);
    assert_int_equal(ef_buffer_refcount(b), 3);
    ef_tensor t = tu_field(s, name_ok);
    assert_int_equal(t.nbytes, 4);
    t = tu_field(s, "x");
    assert_int_equal(t.dtype, EF_I32); /* the duplicate did not replace it */

    /* at most EF_MAX_FIELDS fields */
    int64_t one[1] = {1};
    for (int i = 2; i < EF_MAX_FIELDS; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "f%d", i);
        assert_int_equal(ef_sample_add(s, nm, EF_U8, 1, one, b, 0), EF_OK);
    }
    assert_int_equal(ef_sample_field_count(s), EF_MAX_FIELDS);
    unsigned rc_before = ef_buffer_refcount(b);
    assert_true(ef_sample_add(s, "onemore", EF_U8, 1, one, b, 0) < 0);
    assert_int_equal(ef_sample_field_count(s), EF_MAX_FIELDS);
    assert_int_equal(ef_buffer_refcount(b), rc_before);

    ef_sample_free(s);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
}

/* More fields than a sample holds inline, with names past the old
 * 23-byte bound (tf.Example features, WebDataset samples with many
 * members): added, found, cloned through both paths and freed. */
static void test_sample_many_fields_and_long_names(void **state)
{
    (void)state;
    ef_buffer *b = filled_buffer(16);
    int64_t one[1] = {1};
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 7});
    assert_non_null(s);
    char nm[64];
    for (int i = 0; i < 20; i++) {
        snprintf(nm, sizeof nm, "image/object/bbox/field_%02d", i);
        assert_int_equal(ef_sample_add(s, nm, EF_U8, 1, one, b, (size_t)i % 16),
                         EF_OK);
    }
    assert_int_equal(ef_sample_field_count(s), 20);
    assert_int_equal(ef_buffer_refcount(b), 21);
    ef__sample_pool *pool = ef__sample_pool_new();
    assert_non_null(pool);
    ef_sample *c1 = ef_sample_clone(s);
    ef_sample *c2 = ef__sample_pool_clone(pool, s);
    assert_non_null(c1);
    assert_non_null(c2);
    ef_sample_free(s); /* the clones own their field arrays */
    assert_int_equal(ef_buffer_refcount(b), 41);
    for (int i = 0; i < 20; i++) {
        snprintf(nm, sizeof nm, "image/object/bbox/field_%02d", i);
        ef_tensor t1 = tu_field(c1, nm), t2 = tu_field(c2, nm);
        assert_string_equal(t1.name, nm);
        assert_ptr_equal(t1.data, (const char *)ef_buffer_data(b) + i % 16);
        assert_ptr_equal(t2.data, t1.data);
    }
    ef_sample_free(c1);
    ef_sample_free(c2);
    ef__sample_pool_release(pool);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
}

static void test_sample_add_new(void **state)
{
    (void)state;
    ef_sample_id id = {.index = 1};
    ef_sample *s = ef_sample_new(id);
    assert_non_null(s);
    int64_t shape[2] = {3, 5};
    void *data = NULL;
    assert_int_equal(ef_sample_add_new(s, "f", EF_F32, 2, shape, &data), EF_OK);
    assert_non_null(data);
    float *f = data;
    for (int i = 0; i < 15; i++)
        f[i] = (float)i * 0.5f;
    ef_tensor t = tu_field(s, "f");
    assert_ptr_equal(t.data, data);
    assert_int_equal(t.nbytes, 60);
    assert_int_equal(t.dtype, EF_F32);
    assert_true(((const float *)t.data)[14] == 7.0f);
    assert_int_equal(ef_sample_add_new(s, "f", EF_U8, 2, shape, NULL),
                     EF_EINVAL);
    assert_int_equal(ef_sample_add_new(s, "g", EF_U8, 2, shape, NULL), EF_OK);
    assert_int_equal(ef_sample_field_count(s), 2);
    ef_sample_free(s);
}

static void test_sample_clone(void **state)
{
    (void)state;
    ef_sample_id id = {.index = 7, .epoch = 2, .echo_copy = 1};
    ef_sample *s = ef_sample_new(id);
    assert_non_null(s);
    ef_buffer *b = filled_buffer(32);
    int64_t shape[1] = {8};
    assert_int_equal(ef_sample_add(s, "a", EF_U8, 1, shape, b, 0), EF_OK);
    assert_int_equal(ef_sample_add(s, "b", EF_I32, 1, shape, b, 0), EF_OK);
    unsigned before = ef_buffer_refcount(b);

    ef_sample *c = ef_sample_clone(s);
    assert_non_null(c);
    assert_true(ef_buffer_refcount(b) > before); /* shares, not copies */
    ef_sample_id cid = ef_sample_identity(c);
    assert_int_equal(cid.index, 7);
    assert_int_equal(cid.epoch, 2);
    assert_int_equal(cid.echo_copy, 1);
    assert_int_equal(ef_sample_field_count(c), 2);
    for (int i = 0; i < 2; i++) {
        ef_tensor ts, tc;
        assert_int_equal(ef_sample_field(s, i, &ts), EF_OK);
        assert_int_equal(ef_sample_field(c, i, &tc), EF_OK);
        assert_string_equal(ts.name, tc.name);
        assert_ptr_equal(ts.data, tc.data);
        assert_ptr_equal(ts.buffer, tc.buffer);
        assert_int_equal(ts.dtype, tc.dtype);
        assert_int_equal(ts.nbytes, tc.nbytes);
        assert_int_equal(ts.ndim, tc.ndim);
        assert_int_equal(ts.shape[0], tc.shape[0]);
    }
    /* a clone is independent: adding to it leaves the original alone */
    assert_int_equal(ef_sample_add_new(c, "extra", EF_U8, 1, shape, NULL),
                     EF_OK);
    assert_int_equal(ef_sample_field_count(c), 3);
    assert_int_equal(ef_sample_field_count(s), 2);

    /* the clone outlives the original */
    ef_buffer_release(b);
    ef_sample_free(s);
    ef_tensor t = tu_field(c, "a");
    const unsigned char *d = t.data;
    for (int i = 0; i < 8; i++)
        assert_int_equal(d[i], (unsigned char)(i * 7 + 1));
    /* a retained buffer outlives the clone */
    ef_buffer *keep = ef_buffer_retain(t.buffer);
    ef_sample_free(c);
    assert_int_equal(ef_buffer_refcount(keep), 1);
    assert_int_equal(((unsigned char *)ef_buffer_data(keep))[3], 22);
    ef_buffer_release(keep);
}

/* ---- clocks ------------------------------------------------------ */

/* The per-item timer runs with CLOCK_MONOTONIC: same origin and rate, so
 * its durations mix with the pipeline's other times. */
static void test_timer_follows_monotonic(void **state)
{
    (void)state;
    uint64_t t0 = ef__timer_ns(), m0 = ef__now_ns();
    uint64_t prev = t0;
    for (int i = 0; i < 100000; i++) {
        uint64_t t = ef__timer_ns();
        assert_true(t >= prev); /* one thread: never backwards */
        prev = t;
    }
    struct timespec wait = {0, 50000000};
    nanosleep(&wait, NULL);
    uint64_t t1 = ef__timer_ns(), m1 = ef__now_ns();
    double dt = (double)(t1 - t0), dm = (double)(m1 - m0);
    assert_true(dm >= 50e6);
    assert_true(fabs(dt - dm) < 1e-3 * dm + 20000);     /* rate */
    assert_true(llabs((long long)(t1 - m1)) < 1000000); /* origin */
    assert_int_equal(ef__elapsed_ns(5, 3), 0);
    assert_int_equal(ef__elapsed_ns(3, 5), 2);
}

/* ---- the header pool (echo's free list) -------------------------- */

static ef_sample *two_field_sample(ef_buffer *b)
{
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 3, .epoch = 1});
    assert_non_null(s);
    int64_t shape[1] = {8};
    assert_int_equal(ef_sample_add(s, "a", EF_U8, 1, shape, b, 0), EF_OK);
    assert_int_equal(ef_sample_add(s, "b", EF_U8, 1, shape, b, 8), EF_OK);
    return s;
}

static void test_sample_pool_reuse(void **state)
{
    (void)state;
    ef_buffer *b = filled_buffer(16);
    ef_sample *s = two_field_sample(b);
    ef__sample_pool *pool = ef__sample_pool_new();
    assert_non_null(pool);

    ef_sample *c1 = ef__sample_pool_clone(pool, s);
    assert_non_null(c1);
    assert_int_equal(ef_buffer_refcount(b), 5); /* ours, s's two, c1's two */
    c1->id.echo_copy = 5;
    ef_sample_free(c1);
    assert_int_equal(ef_buffer_refcount(b), 3);

    /* once the pool has a working set, freed headers come back, with
     * nothing allocated for them, each a full clone again (the old copy
     * number is gone) */
    ef_sample *seen[64];
    int nseen = 0;
    for (int i = 0; i < 40; i++) {
        ef_sample *c = ef__sample_pool_clone(pool, s);
        assert_non_null(c);
        if (nseen < 64)
            seen[nseen++] = c;
        ef_sample_free(c);
    }
    ef__alloc_fail_after(1);
    ef_sample *c2 = NULL;
    for (int i = 0; i < 100; i++) {
        c2 = ef__sample_pool_clone(pool, s);
        assert_non_null(c2);
        int known = c2 == c1;
        for (int k = 0; k < nseen; k++)
            known |= c2 == seen[k];
        assert_true(known);
        if (i < 99)
            ef_sample_free(c2);
    }
    ef__alloc_fail_after(0);
    assert_int_equal(ef_sample_identity(c2).index, 3);
    assert_int_equal(ef_sample_identity(c2).echo_copy, 0);
    assert_int_equal(ef_sample_field_count(c2), 2);
    assert_ptr_equal(tu_field(c2, "b").data,
                     (unsigned char *)ef_buffer_data(b) + 8);
    /* a pooled header is a whole sample: fields can be added to it */
    int64_t shape[1] = {4};
    assert_int_equal(ef_sample_add_new(c2, "extra", EF_U8, 1, shape, NULL),
                     EF_OK);

    /* with no spare header the pool allocates, and says so on failure */
    ef_sample *many[40];
    ef__alloc_fail_after(1);
    int got = 0;
    while (got < 40 && (many[got] = ef__sample_pool_clone(pool, s)) != NULL)
        got++;
    ef__alloc_fail_after(0);
    assert_true(got < 40); /* the spares, then the failed allocation */
    for (int i = 0; i < got; i++)
        ef_sample_free(many[i]);
    assert_int_equal(ef_buffer_refcount(b), 5);

    /* the owner lets go while c2 is out: c2 stays whole, and its free
     * frees the pool (ASan reports a leak or a use after free otherwise) */
    ef__sample_pool_release(pool);
    assert_int_equal(((const unsigned char *)tu_field(c2, "a").data)[3], 22);
    ef_sample_free(c2);
    ef_sample_free(s);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
    ef__sample_pool_release(NULL);
}

static void test_sample_pool_release_idle(void **state)
{
    (void)state;
    ef_buffer *b = filled_buffer(16);
    ef_sample *s = two_field_sample(b);
    ef__sample_pool *pool = ef__sample_pool_new();
    assert_non_null(pool);
    ef_sample *c[3];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 3; i++)
            assert_non_null(c[i] = ef__sample_pool_clone(pool, s));
        for (int i = 0; i < 3; i++)
            ef_sample_free(c[i]);
    }
    /* everything back: the release frees the pool and its headers now */
    ef__sample_pool_release(pool);
    ef_sample_free(s);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
}

/* Copies handed to other threads through a small locked ring, freed there
 * while the owner keeps cloning (TSan checks the free list). */
enum { RING = 16, POOL_THREADS = 2, POOL_ITEMS = 20000 };

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    ef_sample *ring[RING];
    int head, n, done;
} handoff;

static void *free_from_ring(void *arg)
{
    handoff *h = arg;
    for (;;) {
        pthread_mutex_lock(&h->mu);
        while (h->n == 0 && !h->done)
            pthread_cond_wait(&h->cond, &h->mu);
        if (h->n == 0) {
            pthread_mutex_unlock(&h->mu);
            return NULL;
        }
        ef_sample *s = h->ring[h->head];
        h->head = (h->head + 1) % RING;
        h->n--;
        pthread_cond_broadcast(&h->cond);
        pthread_mutex_unlock(&h->mu);
        assert_int_equal(ef_sample_field_count(s), 2);
        ef_sample_free(s);
    }
}

static void test_sample_pool_threads(void **state)
{
    (void)state;
    ef_buffer *b = filled_buffer(16);
    ef_sample *s = two_field_sample(b);
    ef__sample_pool *pool = ef__sample_pool_new();
    assert_non_null(pool);
    handoff h = {.head = 0};
    pthread_mutex_init(&h.mu, NULL);
    pthread_cond_init(&h.cond, NULL);
    pthread_t t[POOL_THREADS];
    for (int i = 0; i < POOL_THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, free_from_ring, &h), 0);
    for (int i = 0; i < POOL_ITEMS; i++) {
        ef_sample *c = ef__sample_pool_clone(pool, s);
        assert_non_null(c);
        c->id.echo_copy = i;
        if (i == POOL_ITEMS - 1) /* c at least is still out: its free,
                                    on a thread, frees the pool */
            ef__sample_pool_release(pool);
        pthread_mutex_lock(&h.mu);
        while (h.n == RING)
            pthread_cond_wait(&h.cond, &h.mu);
        h.ring[(h.head + h.n) % RING] = c;
        h.n++;
        pthread_cond_broadcast(&h.cond);
        pthread_mutex_unlock(&h.mu);
    }
    pthread_mutex_lock(&h.mu);
    h.done = 1;
    pthread_cond_broadcast(&h.cond);
    pthread_mutex_unlock(&h.mu);
    for (int i = 0; i < POOL_THREADS; i++)
        pthread_join(t[i], NULL);
    pthread_cond_destroy(&h.cond);
    pthread_mutex_destroy(&h.mu);
    ef_sample_free(s);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_buffer_release(b);
}

/* ---- registry ----------------------------------------------------- */

static void test_registry(void **state)
{
    (void)state;
    static const char *const want[] = {
        "range", "idx",      "map",    "shuffle", "echo",
        "batch", "prefetch", "repeat", "take",    "throttle"};
    int n = ef_stage_registry_count();
    assert_true(n >= (int)(sizeof want / sizeof want[0]));
    assert_null(ef_stage_registry_get(-1));
    assert_null(ef_stage_registry_get(n));
    for (size_t w = 0; w < sizeof want / sizeof want[0]; w++) {
        const ef_stage_info *found = NULL;
        for (int i = 0; i < n; i++) {
            const ef_stage_info *si = ef_stage_registry_get(i);
            assert_non_null(si);
            if (strcmp(si->name, want[w]) == 0)
                found = si;
        }
        if (!found)
            fail_msg("stage \"%s\" is not in the registry", want[w]);
        assert_non_null(found->help);
        assert_true(strlen(found->help) > 0);
        for (int o = 0; o < found->noptions; o++) {
            assert_non_null(found->options[o].name);
            assert_non_null(found->options[o].help);
            assert_true(strlen(found->options[o].name) > 0);
        }
    }
    /* option schemas the spec syntax relies on: the first option */
    static const struct {
        const char *stage, *first;
    } firsts[] = {{"range", "n"},        {"idx", "images"},   {"map", "fn"},
                  {"shuffle", "buffer"}, {"echo", "factor"},  {"batch", "size"},
                  {"prefetch", "depth"}, {"repeat", "count"}, {"take", "count"},
                  {"throttle", "rate"}};
    for (size_t k = 0; k < sizeof firsts / sizeof firsts[0]; k++) {
        for (int i = 0; i < n; i++) {
            const ef_stage_info *si = ef_stage_registry_get(i);
            if (strcmp(si->name, firsts[k].stage) != 0)
                continue;
            assert_true(si->noptions >= 1);
            if (strcmp(si->options[0].name, firsts[k].first) != 0)
                fail_msg("stage %s: first option is \"%s\", expected \"%s\"",
                         si->name, si->options[0].name, firsts[k].first);
        }
    }
}

/* ---- the queue's runs ---------------------------------------------- */

typedef struct {
    ef__queue *q;
    size_t n;
    int rc;
} run_push;

/* Pushes a run of n samples into q. */
static void *push_samples(void *arg)
{
    run_push *rp = arg;
    ef__item items[8];
    size_t queued;
    for (size_t i = 0; i < rp->n; i++)
        items[i] = (ef__item){
            .status = EF_OK,
            .sample = ef_sample_new((ef_sample_id){.index = (int64_t)i})};
    rp->rc = ef__queue_push_run(rp->q, items, rp->n, &queued, NULL);
    for (size_t i = queued; i < rp->n; i++)
        ef__item_clear(&items[i]);
    return NULL;
}

/* Waits up to 2 s for q to hold n items; whether it did. */
static int queue_reaches(ef__queue *q, size_t n)
{
    for (int i = 0; i < 2000 && ef__queue_count(q) < n; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return ef__queue_count(q) >= n;
}

/* Hands out items got[from..to) taken with pop_run. */
static void hand_out(ef__queue *q, ef__item *got, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++) {
        ef__queue_handed(q, &got[i]);
        ef__item_clear(&got[i]);
    }
}

/* A queue at most half full takes a whole run past its limit, so a fast
 * consumer wakes once per run; fuller, a run keeps to the limit and
 * waits until the queue is half empty, then goes in whole, not item by
 * item. */
static void test_queue_takes_whole_runs(void **state)
{
    (void)state;
    ef__queue q;
    assert_int_equal(ef__queue_init(&q, 4), EF_OK);
    run_push six = {&q, 6, -1}, five = {&q, 5, -1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, push_samples, &six), 0);
    int whole = queue_reaches(&q, 6);
    if (!whole)
        ef__queue_close(&q); /* the run waited for room: end the push */
    pthread_join(t, NULL);
    assert_true(whole);
    assert_int_equal(six.rc, EF_OK);

    /* the consumer holds all six: the next run waits */
    ef__item got[8];
    size_t n;
    assert_int_equal(ef__queue_pop_run(&q, got, 8, &n, 1), EF_OK);
    assert_int_equal(n, 6);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i].sample->id.index, (int64_t)i);
    assert_int_equal(pthread_create(&t, NULL, push_samples, &five), 0);
    /* three held, more than half of 4: the run keeps to the limit (it
     * fills the room if it came after the hand-outs, else it sleeps
     * until the queue is half empty) */
    hand_out(&q, got, 0, 3);
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    assert_true(ef__queue_count(&q) <= 1);
    /* at most half full now: the rest goes in whole */
    hand_out(&q, got, 3, 5);
    whole = queue_reaches(&q, 5);
    if (!whole)
        ef__queue_close(&q);
    pthread_join(t, NULL);
    assert_true(whole);
    assert_int_equal(five.rc, EF_OK);
    hand_out(&q, got, 5, 6);
    assert_int_equal(ef__queue_pop_run(&q, got, 8, &n, 1), EF_OK);
    assert_int_equal(n, 5);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(got[i].sample->id.index, (int64_t)i);
    hand_out(&q, got, 0, n);
    ef__queue_destroy(&q);
}

/* ---- allocation failure injection --------------------------------- */

/* Buffers and samples made with allocations failing, each on a thread of
 * its own: a new thread has no spare sample headers or small buffers, so
 * they must be allocated (a thread that freed some before reuses them). */
static void *buffer_failing(void *arg)
{
    (void)arg;
    ef__alloc_fail_after(1);
    ef_buffer *b = ef_buffer_new(8);
    ef__alloc_fail_after(0);
    return b;
}

static void *add_new_failing(void *arg)
{
    int64_t shape[1] = {4};
    ef__alloc_fail_after(1);
    intptr_t rc = ef_sample_add_new(arg, "x", EF_U8, 1, shape, NULL);
    ef__alloc_fail_after(0);
    return (void *)rc;
}

static void *new_sample_failing(void *arg)
{
    (void)arg;
    ef__alloc_fail_after(1);
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 0});
    ef__alloc_fail_after(0);
    return s;
}

static void *clone_failing(void *arg)
{
    ef__alloc_fail_after(1);
    ef_sample *c = ef_sample_clone(arg);
    ef__alloc_fail_after(0);
    return c;
}

/* fn(arg) on a new thread; what it returned. */
static void *on_new_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    void *made = NULL;
    assert_int_equal(pthread_create(&t, NULL, fn, arg), 0);
    assert_int_equal(pthread_join(t, &made), 0);
    return made;
}

static void test_alloc_hook_basic(void **state)
{
    (void)state;
    ef_buffer *b = on_new_thread(buffer_failing, NULL);
    ef_buffer_release(b);
    assert_null(b);

    ef_sample_id id = {.index = 0};
    ef_sample *s = on_new_thread(new_sample_failing, NULL);
    ef_sample_free(s); /* NULL expected, but never leak if not */
    assert_null(s);

    s = ef_sample_new(id);
    assert_non_null(s);
    int64_t shape[1] = {4};
    int rc = (int)(intptr_t)on_new_thread(add_new_failing, s);
    assert_int_equal(rc, EF_ENOMEM);
    assert_int_equal(ef_sample_field_count(s), 0);

    assert_int_equal(ef_sample_add_new(s, "x", EF_U8, 1, shape, NULL), EF_OK);
    ef_sample *c = on_new_thread(clone_failing, s);
    ef_sample_free(c);
    assert_null(c);
    ef_sample_free(s);

    ef_pipeline *p = NULL;
    ef__alloc_fail_after(1);
    rc = ef_pipeline_create(&p);
    ef__alloc_fail_after(0);
    assert_int_equal(rc, EF_ENOMEM);
    assert_null(p);
}

/* One run of the pipeline with the n-th allocation failing. Returns 1 when
 * the run completed with the right output, 0 when it failed with ENOMEM. */
static int alloc_run(long n)
{
    static const char *spec = "range:n=10,bytes=4 | echo:2 | batch:3";
    ef_pipeline *p = NULL;
    int ok = 0;
    ef__alloc_fail_after(n);
    int rc = ef_pipeline_create(&p);
    if (rc != EF_OK) {
        ef__alloc_fail_after(0);
        if (rc != EF_ENOMEM)
            fail_msg("n=%ld: ef_pipeline_create = %d, expected ENOMEM", n, rc);
        return 0;
    }
    rc = ef_pipeline_parse(p, spec);
    if (rc != EF_OK) {
        int count = ef_pipeline_stage_count(p);
        ef__alloc_fail_after(0);
        if (rc != EF_ENOMEM)
            fail_msg("n=%ld: parse = %s (%s), expected ENOMEM", n,
                     ef_status_name(rc), ef_pipeline_error(p));
        if (count != 0)
            fail_msg("n=%ld: a failed parse left %d stages", n, count);
        ef_pipeline_destroy(p);
        return 0;
    }
    long items = 0, rows = 0;
    for (;;) {
        ef_sample *s = NULL;
        rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_tensor t;
            if (ef_sample_get(s, "index", &t) == EF_OK && t.ndim == 1)
                rows += t.shape[0];
            ef_sample_free(s);
            items++;
            continue;
        }
        break;
    }
    if (rc == EF_END) {
        ef__alloc_fail_after(0);
        if (items != 7 || rows != 20)
            fail_msg("n=%ld: completed with %ld batches / %ld rows, expected "
                     "7 / 20",
                     n, items, rows);
        ok = 1;
    } else {
        /* the failure is sticky, even while allocation still fails */
        ef_sample *s = NULL;
        int again = ef_pipeline_next(p, &s);
        ef__alloc_fail_after(0);
        if (rc != EF_ENOMEM)
            fail_msg("n=%ld: next failed with %s (%s), expected ENOMEM", n,
                     ef_status_name(rc), ef_pipeline_error(p));
        if (again != rc) {
            if (again == EF_OK)
                ef_sample_free(s);
            fail_msg("n=%ld: next after ENOMEM = %s, expected the same "
                     "error again",
                     n, ef_status_name(again));
        }
    }
    ef_pipeline_destroy(p);
    return ok;
}

static void test_alloc_failure_pipeline(void **state)
{
    (void)state;
    int successes_in_a_row = 0;
    long failures = 0;
    long n;
    for (n = 1; n <= 3000 && successes_in_a_row < 8; n++) {
        if (alloc_run(n))
            successes_in_a_row++;
        else {
            successes_in_a_row = 0;
            failures++;
        }
    }
    ef__alloc_fail_after(0);
    assert_true(successes_in_a_row >= 8); /* reached the allocation count */
    assert_true(failures >= 3);           /* the hook really did something */
    /* and a normal run afterwards is unaffected */
    assert_int_equal(alloc_run(0), 1);
}

/* ef__grow doubles, starts at `first`, and leaves the array and its
 * count as they were when it cannot grow. */
static void test_grow(void **state)
{
    (void)state;
    size_t cap = 0;
    int *v = ef__grow(NULL, &cap, 4, sizeof *v);
    assert_non_null(v);
    assert_int_equal(cap, 4);
    for (int i = 0; i < 4; i++)
        v[i] = i;
    int *w = ef__grow(v, &cap, 4, sizeof *w);
    assert_non_null(w);
    assert_int_equal(cap, 8);
    assert_int_equal(w[3], 3);
    size_t huge = SIZE_MAX / 2;
    assert_null(ef__grow(w, &huge, 4, sizeof *w));
    assert_int_equal(huge, SIZE_MAX / 2);
    ef__alloc_fail_after(1);
    assert_null(ef__grow(w, &cap, 4, sizeof *w));
    ef__alloc_fail_after(0);
    assert_int_equal(cap, 8);
    assert_int_equal(w[3], 3);
    ef__free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_names_and_texts),
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_status_unknown_code),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_opt_type_names),
        cmocka_unit_test(test_buffer_refcount),
        cmocka_unit_test(test_buffer_large_reused),
        cmocka_unit_test(test_buffer_wrap),
        cmocka_unit_test(test_buffer_borrowed),
        cmocka_unit_test(test_sample_add_and_get),
        cmocka_unit_test(test_sample_add_validation),
        cmocka_unit_test(test_sample_many_fields_and_long_names),
        cmocka_unit_test(test_sample_add_new),
        cmocka_unit_test(test_sample_clone),
        cmocka_unit_test(test_timer_follows_monotonic),
        cmocka_unit_test(test_sample_pool_reuse),
        cmocka_unit_test(test_sample_pool_release_idle),
        cmocka_unit_test(test_sample_pool_threads),
        cmocka_unit_test(test_registry),
        cmocka_unit_test(test_queue_takes_whole_runs),
        cmocka_unit_test(test_alloc_hook_basic),
        cmocka_unit_test(test_alloc_failure_pipeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
