/* SPDX-License-Identifier: Apache-2.0 */
/* The other stages: range, batch, take, repeat, prefetch, map (built-ins,
 * callbacks, names bound for a spec, ordered and unordered), throttle, and
 * pipeline statistics. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static void test_range(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=300,bytes=5", 0);
    for (int64_t i = 0; i < 300; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i);
        assert_int_equal(id.epoch, 0);
        assert_int_equal(id.echo_copy, 0);
        assert_int_equal(ef_sample_field_count(s), 2);
        assert_int_equal(tu_i64(s, "index"), i);
        ef_tensor d = tu_field(s, "data");
        assert_int_equal(d.dtype, EF_U8);
        assert_int_equal(d.ndim, 1);
        assert_int_equal(d.shape[0], 5);
        assert_int_equal(d.nbytes, 5);
        for (int j = 0; j < 5; j++)
            assert_int_equal(((const unsigned char *)d.data)[j],
                             (unsigned char)((i + j) & 0xff));
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* no bytes: the index field only */
    p = tu_pipeline("range:n=3", 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_field_count(s), 1);
    ef_tensor t;
    assert_int_equal(ef_sample_get(s, "data", &t), EF_EINVAL);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

static int empty_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)user, (void)epoch, (void)block, (void)out;
    return EF_END;
}

/* ef_pipeline_set_shard: the source reads its part, as with shard=I/N. */
static void test_pipeline_shard(void **state)
{
    (void)state;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_shard(p, 1, 3), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:n=10"), EF_OK);
    for (int64_t i = 1; i < 10; i += 3) {
        ef_sample *s = tu_next(p);
        assert_int_equal(tu_i64(s, "index"), i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    assert_int_equal(ef_pipeline_set_shard(p, 0, 2), EF_ESTATE);
    ef_pipeline_destroy(p);

    /* too late once the source is there */
    ef_pipeline_create(&p);
    assert_int_equal(ef_pipeline_parse(p, "range:n=10"), EF_OK);
    assert_int_equal(ef_pipeline_set_shard(p, 0, 2), EF_ESTATE);
    assert_non_null(strstr(ef_pipeline_error(p), "before adding the source"));
    ef_pipeline_destroy(p);

    ef_pipeline_create(&p);
    assert_int_equal(ef_pipeline_set_shard(p, 2, 2), EF_EINVAL);
    assert_non_null(strstr(ef_pipeline_error(p), "part 2 of 2"));
    assert_int_equal(ef_pipeline_set_shard(p, 0, 2), EF_OK);
    /* the source's own shard contradicts the pipeline's */
    assert_int_equal(ef_pipeline_parse(p, "range:n=10,shard=1/4"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "shard=1/4"));
    assert_non_null(strstr(ef_pipeline_error(p), "part 0 of 2"));
    /* a C source has no shard option */
    assert_int_equal(ef_pipeline_add_source(p, empty_source, NULL, NULL),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "no shard option"));
    ef_pipeline_destroy(p);
}

static void test_batch(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10,bytes=3 | batch:size=4", 0);
    static const int64_t rows[3] = {4, 4, 2};
    for (int b = 0; b < 3; b++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, b);
        ef_tensor ix = tu_field(s, "index"), d = tu_field(s, "data");
        assert_int_equal(ix.dtype, EF_I64);
        assert_int_equal(ix.ndim, 1);
        assert_int_equal(ix.shape[0], rows[b]);
        assert_int_equal(ix.nbytes, (size_t)rows[b] * 8);
        assert_int_equal(d.ndim, 2);
        assert_int_equal(d.shape[0], rows[b]);
        assert_int_equal(d.shape[1], 3);
        assert_int_equal(d.nbytes, (size_t)rows[b] * 3);
        for (int r = 0; r < rows[b]; r++) {
            int64_t want = b * 4 + r;
            assert_int_equal(((const int64_t *)ix.data)[r], want);
            for (int j = 0; j < 3; j++)
                assert_int_equal(((const unsigned char *)d.data)[r * 3 + j],
                                 (unsigned char)(want + j));
        }
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "batch");
    assert_int_equal(st.items_in, 10);
    assert_int_equal(st.items_out, 3);
    ef_pipeline_destroy(p);

    p = tu_pipeline("range:n=10 | batch:size=4,drop_remainder=true", 0);
    assert_int_equal(tu_drain(p), 2);
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=8 | batch:size=4,drop_remainder=false", 0);
    assert_int_equal(tu_drain(p), 2);
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=3 | batch:size=4,drop_remainder=true", 0);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* Each input gets a field whose shape depends on the index. */
static int ragged(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    ef_sample *s = ef_sample_clone(in);
    if (!s)
        return EF_ENOMEM;
    int64_t shape[1] = {1 + ef_sample_identity(in).index % 2};
    int rc = ef_sample_add_new(s, "ragged", EF_U8, 1, shape, NULL);
    if (rc != EF_OK) {
        ef_sample_free(s);
        return rc;
    }
    *out = s;
    return EF_OK;
}

static void test_batch_shape_mismatch(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=4", 0);
    assert_int_equal(ef_pipeline_add_map(p, ragged, NULL, NULL), EF_OK);
    tu_parse(p, "batch:2,ragged=error"); /* ragged=list: test_fields.c */
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    if (rc == EF_OK)
        ef_sample_free(s);
    assert_int_equal(rc, EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "ragged"));
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    ef_pipeline_destroy(p);
}

static void test_take_and_repeat(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10 | take:count=3", 0);
    for (int i = 0; i < 3; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    p = tu_pipeline("range:n=2 | take:count=5", 0);
    assert_int_equal(tu_drain(p), 2);
    ef_pipeline_destroy(p);

    p = tu_pipeline("range:n=4 | repeat:count=3", 0);
    for (int i = 0; i < 12; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i % 4);
        assert_int_equal(id.epoch, i / 4);
        assert_int_equal(tu_i64(s, "index"), i % 4);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* forever, cut by take */
    p = tu_pipeline("range:n=3 | repeat | take:count=100", 0);
    for (int i = 0; i < 100; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i % 3);
        assert_int_equal(id.epoch, i / 3);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* bare values */
    p = tu_pipeline("range:n=5 | repeat:2 | take:7", 0);
    assert_int_equal(tu_drain(p), 7);
    ef_pipeline_destroy(p);

    /* a repeated batch restarts the batching */
    p = tu_pipeline("range:n=5 | batch:2 | repeat:count=2", 0);
    static const int64_t rows[6] = {2, 2, 1, 2, 2, 1};
    for (int b = 0; b < 6; b++) {
        ef_sample *s = tu_next(p);
        ef_tensor ix = tu_field(s, "index");
        assert_int_equal(ix.shape[0], rows[b]);
        assert_int_equal(((const int64_t *)ix.data)[0], (b % 3) * 2);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_prefetch_keeps_order(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline(
        "range:n=2000,bytes=4 | prefetch:depth=3 | batch:5 | prefetch:1", 0);
    for (int b = 0; b < 400; b++) {
        ef_sample *s = tu_next(p);
        const int64_t *ix = tu_field(s, "index").data;
        for (int r = 0; r < 5; r++)
            assert_int_equal(ix[r], b * 5 + r);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "prefetch");
    assert_int_equal(st.items_out, 2000);
    ef_pipeline_destroy(p);

    /* prefetch under repeat */
    p = tu_pipeline("range:n=30 | prefetch:4 | repeat:count=3", 0);
    for (int i = 0; i < 90; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i % 30);
        assert_int_equal(id.epoch, i / 30);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_map_builtins(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "range:n=500,bytes=6 | map:fn=noop",
        "range:n=500,bytes=6 | map:noop,threads=4",
        "range:n=500,bytes=6 | map:fn=noop,threads=3,ordered=true"};
    for (size_t k = 0; k < 3; k++) {
        ef_pipeline *p = tu_pipeline(specs[k], 0);
        for (int64_t i = 0; i < 500; i++) {
            ef_sample *s = tu_next(p);
            assert_int_equal(ef_sample_identity(s).index, i);
            assert_int_equal(tu_i64(s, "index"), i);
            ef_tensor d = tu_field(s, "data");
            assert_int_equal(d.dtype, EF_U8);
            assert_int_equal(((const unsigned char *)d.data)[5],
                             (unsigned char)(i + 5));
            ef_sample_free(s);
        }
        tu_expect_end(p);
        ef_stage_stats st = tu_stage(p, "map");
        assert_int_equal(st.items_in, 500);
        assert_int_equal(st.items_out, 500);
        ef_pipeline_destroy(p);
    }

    ef_pipeline *p =
        tu_pipeline("range:n=300,bytes=4 | map:fn=to_f32,threads=2", 0);
    for (int64_t i = 0; i < 300; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor d = tu_field(s, "data");
        assert_int_equal(d.dtype, EF_F32);
        assert_int_equal(d.ndim, 1);
        assert_int_equal(d.shape[0], 4);
        assert_int_equal(d.nbytes, 16);
        const float *f = d.data;
        for (int j = 0; j < 4; j++) {
            float want = (float)((i + j) & 0xff) / 255.0f;
            if (fabsf(f[j] - want) > 1e-6f)
                fail_msg("to_f32 item %lld[%d] = %g, expected %g", (long long)i,
                         j, (double)f[j], (double)want);
        }
        assert_int_equal(tu_i64(s, "index"), i); /* not u8: unchanged */
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

typedef struct {
    atomic_long calls;
    atomic_int bad;
} cb_state;

/* Doubles the index into a new field "twice"; checks the keyed draws. */
static int twice_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    cb_state *cs = ef_map_ctx_user(ctx);
    atomic_fetch_add(&cs->calls, 1);
    double u = ef_map_ctx_uniform(ctx);
    if (!(u >= 0.0 && u < 1.0))
        atomic_store(&cs->bad, 1);
    ef_sample *s = ef_sample_clone(in);
    if (!s)
        return EF_ENOMEM;
    int64_t shape[1] = {0};
    void *d = NULL;
    int rc = ef_sample_add_new(s, "twice", EF_I64, 0, shape, &d);
    if (rc != EF_OK) {
        ef_sample_free(s);
        return rc;
    }
    int64_t v = 2 * ef_sample_identity(in).index;
    memcpy(d, &v, sizeof v);
    *out = s;
    return EF_OK;
}

static void test_map_callbacks(void **state)
{
    (void)state;
    cb_state cs;
    atomic_init(&cs.calls, 0);
    atomic_init(&cs.bad, 0);
    /* ordered (the default) */
    ef_pipeline *p = tu_pipeline("range:n=1000", 0);
    assert_int_equal(ef_pipeline_add_map(p, twice_fn, &cs, "threads=4"), EF_OK);
    for (int64_t i = 0; i < 1000; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, i);
        assert_int_equal(tu_i64(s, "twice"), 2 * i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    assert_int_equal(atomic_load(&cs.calls), 1000);
    assert_int_equal(atomic_load(&cs.bad), 0);

    /* unordered: the same multiset */
    atomic_store(&cs.calls, 0);
    p = tu_pipeline("range:n=1000", 0);
    assert_int_equal(
        ef_pipeline_add_map(p, twice_fn, &cs, "threads=4,ordered=false"),
        EF_OK);
    unsigned char seen[1000];
    memset(seen, 0, sizeof seen);
    for (int64_t i = 0; i < 1000; i++) {
        ef_sample *s = tu_next(p);
        int64_t ix = ef_sample_identity(s).index;
        assert_true(ix >= 0 && ix < 1000);
        assert_int_equal(seen[ix], 0);
        seen[ix] = 1;
        assert_int_equal(tu_i64(s, "twice"), 2 * ix);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    assert_int_equal(atomic_load(&cs.calls), 1000);

    /* NULL options: defaults */
    p = tu_pipeline("range:n=10", 0);
    assert_int_equal(ef_pipeline_add_map(p, twice_fn, &cs, NULL), EF_OK);
    assert_int_equal(tu_drain(p), 10);
    ef_pipeline_destroy(p);
}

/* Adds 1000 to the index into "plus". */
static int plus_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    ef_sample *s = ef_sample_clone(in);
    int64_t shape[1] = {0};
    void *d = NULL;
    if (!s || ef_sample_add_new(s, "plus", EF_I64, 0, shape, &d) != EF_OK) {
        ef_sample_free(s);
        return EF_ENOMEM;
    }
    int64_t v = 1000 + ef_sample_identity(in).index;
    memcpy(d, &v, sizeof v);
    *out = s;
    return EF_OK;
}

/* Passes the sample on, counting the calls. */
static int count_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    cb_state *cs = ef_map_ctx_user(ctx);
    atomic_fetch_add(&cs->calls, 1);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

/* Names bound with ef_pipeline_bind_map run at the spec's map:fn=NAME
 * stages, written as fn=NAME or bare, quoted or not, with the map's
 * other options; one name may serve two stages. */
static void test_map_bound_names(void **state)
{
    (void)state;
    cb_state cs;
    atomic_init(&cs.calls, 0);
    atomic_init(&cs.bad, 0);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "count", count_fn, &cs), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "plus", plus_fn, NULL), EF_OK);
    tu_parse(p, "range:n=100 | map:fn=count,threads=3 | map:plus | "
                "map:fn=\"count\",ordered=false | batch:10");
    assert_int_equal(ef_pipeline_stage_count(p), 5);
    ef_stage_stats st;
    assert_int_equal(ef_pipeline_stage_stats(p, 1, &st), EF_OK);
    assert_string_equal(st.name, "map");
    int64_t total = 0, plus = 0;
    for (int b = 0; b < 10; b++) {
        ef_sample *s = tu_next(p);
        ef_tensor t = tu_field(s, "plus");
        for (int i = 0; i < 10; i++)
            plus += ((const int64_t *)t.data)[i];
        total += 10;
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    assert_int_equal(total, 100);
    assert_int_equal(plus, 100 * 1000 + 4950);
    assert_int_equal(atomic_load(&cs.calls), 200); /* two stages */

    /* a bound name comes before the built-in it shadows; binding again
     * replaces the callback */
    p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "noop", twice_fn, &cs), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "noop", plus_fn, NULL), EF_OK);
    tu_parse(p, "range:n=3 | map:noop");
    ef_sample *s = tu_next(p);
    assert_int_equal(tu_i64(s, "plus"), 1000);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* trace appends each item's identities, a line per item (a batch's
 * members), and names a path it cannot open */
static void test_trace_lines(void **state)
{
    (void)state;
    char path[] = "/tmp/ef_trace_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    char spec[128];
    snprintf(spec, sizeof spec, "range:n=5 | batch:2 | trace:path=%s", path);
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < 3; i++)
        ef_sample_free(tu_next(p));
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    char text[256] = "";
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    assert_string_equal(text, "0:0:0 0:1:0\n0:2:0 0:3:0\n0:4:0\n");

    ef_pipeline *q = NULL;
    assert_int_equal(ef_pipeline_create(&q), EF_OK);
    assert_int_equal(
        ef_pipeline_parse(q, "range:n=5 | trace:path=/nonexistent/dir/t.log"),
        EF_EIO);
    assert_non_null(strstr(ef_pipeline_error(q),
                           "trace: cannot open /nonexistent/dir/t.log"));
    ef_pipeline_destroy(q);
}

static void test_throttle_passes_items(void **state)
{
    (void)state;
    /* 20 items at 2000/s: about 10 ms; no timing assertion */
    ef_pipeline *p = tu_pipeline("range:n=20 | throttle:rate=2000", 0);
    for (int i = 0; i < 20; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "throttle");
    assert_int_equal(st.items_out, 20);
    ef_pipeline_destroy(p);
}

static void test_pipeline_stats(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline(
        "range:n=100 | map:fn=noop,threads=2 | echo:2 | batch:16 | prefetch:2",
        0);
    assert_int_equal(ef_pipeline_stage_count(p), 5);
    static const char *const names[5] = {"range", "map", "echo", "batch",
                                         "prefetch"};
    for (int i = 0; i < 5; i++) {
        ef_stage_stats st;
        assert_int_equal(ef_pipeline_stage_stats(p, i, &st), EF_OK);
        assert_string_equal(st.name, names[i]);
        assert_int_equal(st.items_out, 0);
    }
    assert_int_equal(tu_drain(p), 13); /* 200 items in batches of 16 */
    static const uint64_t out[5] = {100, 100, 200, 13, 13};
    static const uint64_t in[5] = {0, 100, 100, 200, 13};
    for (int i = 0; i < 5; i++) {
        ef_stage_stats st;
        assert_int_equal(ef_pipeline_stage_stats(p, i, &st), EF_OK);
        if (st.items_out != out[i] || (i > 0 && st.items_in != in[i]))
            fail_msg("stage %d (%s): in %llu out %llu, expected in %llu out "
                     "%llu",
                     i, st.name, (unsigned long long)st.items_in,
                     (unsigned long long)st.items_out,
                     (unsigned long long)in[i], (unsigned long long)out[i]);
        assert_true(st.wait_up_s >= 0.0);
        assert_true(st.wait_down_s >= 0.0);
        assert_true(st.nextra >= 0 && st.nextra <= EF_MAX_STAT_EXTRAS);
    }
    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get(p, &ps), EF_OK);
    assert_int_equal(ps.items, 13);
    assert_true(ps.elapsed_s >= 0.0);
    assert_true(ps.consumer_wait_s >= 0.0);
    assert_true(ps.consumer_wait_s <= ps.elapsed_s + 1e-6);
    assert_true(ps.consumer_wait_fraction >= 0.0 &&
                ps.consumer_wait_fraction <= 1.0 + 1e-9);
    ef_pipeline_destroy(p);
}

/* A caller built against an older header passes a smaller struct and gets
 * exactly the fields it knows; a newer one gets zeros past ours. */
static void test_stats_struct_sizes(void **state)
{
    (void)state;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:n=5"), EF_OK);
    ef_sample *s;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(ef_pipeline_next(p, &s), EF_OK);
        ef_sample_free(s);
    }

    size_t old = offsetof(ef_pipeline_stats, startup_s);
    unsigned char buf[sizeof(ef_pipeline_stats) + 64];
    memset(buf, 0xAB, sizeof buf);
    assert_int_equal(ef_pipeline_stats_get_sized(p, (void *)buf, old), EF_OK);
    uint64_t items;
    memcpy(&items, buf, sizeof items);
    assert_int_equal(items, 5);
    for (size_t k = old; k < sizeof buf; k++)
        assert_int_equal(buf[k], 0xAB); /* nothing written past `old` */

    memset(buf, 0xAB, sizeof buf);
    assert_int_equal(ef_pipeline_stats_get_sized(p, (void *)buf, sizeof buf),
                     EF_OK);
    for (size_t k = sizeof(ef_pipeline_stats); k < sizeof buf; k++)
        assert_int_equal(buf[k], 0); /* fields this library lacks: zero */

    unsigned char sbuf[sizeof(ef_stage_stats) + 16];
    memset(sbuf, 0xAB, sizeof sbuf);
    size_t name_only = sizeof(const char *);
    assert_int_equal(
        ef_pipeline_stage_stats_sized(p, 0, (void *)sbuf, name_only), EF_OK);
    const char *name;
    memcpy(&name, sbuf, sizeof name);
    assert_string_equal(name, "range");
    assert_int_equal(sbuf[name_only], 0xAB);

    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get_sized(p, &ps, 0), EF_EINVAL);
    assert_int_equal(ef_pipeline_stage_stats_sized(p, 0, (void *)sbuf, 0),
                     EF_EINVAL);
    ef_pipeline_destroy(p);
}

static void test_restart_mid_pass(void **state)
{
    (void)state;
    /* take under repeat restarts a pass before its end, while a pump
     * thread is blocked on its full queue: the restart must not hang, and
     * every pass starts at the beginning */
    static const char *specs[] = {
        "range:n=100 | prefetch:1 | take:3 | repeat:3",
        "range:n=100 | prefetch:2 | prefetch:1 | take:3 | repeat:3",
        "range:n=1000 | map:fn=noop,threads=2 | take:3 | repeat:3",
        "range:n=1000 | map:fn=noop,threads=3 | prefetch:1 | take:3 | "
        "repeat:3",
    };
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        ef_pipeline *p = tu_pipeline(specs[k], 0);
        for (int64_t epoch = 0; epoch < 3; epoch++)
            for (int64_t i = 0; i < 3; i++) {
                ef_sample *s = tu_next(p);
                ef_sample_id id = ef_sample_identity(s);
                if (id.index != i || id.epoch != epoch)
                    fail_msg("%s: got index %lld epoch %lld, expected %lld "
                             "and %lld",
                             specs[k], (long long)id.index, (long long)id.epoch,
                             (long long)i, (long long)epoch);
                ef_sample_free(s);
            }
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
    /* a shuffle buffer cut short drops its leftovers: every item of a
     * pass is of that pass */
    ef_pipeline *sp =
        tu_pipeline("range:n=100 | shuffle:10 | take:3 | repeat:3", 0);
    for (int64_t epoch = 0; epoch < 3; epoch++)
        for (int i = 0; i < 3; i++) {
            ef_sample *s = tu_next(sp);
            assert_int_equal(ef_sample_identity(s).epoch, epoch);
            ef_sample_free(s);
        }
    tu_expect_end(sp);
    ef_pipeline_destroy(sp);
    /* automatic echo pumps its upstream the same way; unordered map
     * workers push into a queue */
    static const char *unordered[] = {
        "range:n=100 | echo:factor=auto,max=2 | take:3 | repeat:3",
        "range:n=1000 | map:fn=noop,threads=2,ordered=false | take:3 | "
        "repeat:3",
    };
    for (size_t k = 0; k < 2; k++) {
        ef_pipeline *p = tu_pipeline(unordered[k], 0);
        int n = 0;
        ef_sample *s;
        while (ef_pipeline_next(p, &s) == EF_OK) {
            ef_sample_free(s);
            n++;
        }
        assert_int_equal(n, 9);
        ef_pipeline_destroy(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_pipeline_shard),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_batch_shape_mismatch),
        cmocka_unit_test(test_take_and_repeat),
        cmocka_unit_test(test_prefetch_keeps_order),
        cmocka_unit_test(test_map_builtins),
        cmocka_unit_test(test_map_callbacks),
        cmocka_unit_test(test_map_bound_names),
        cmocka_unit_test(test_throttle_passes_items),
        cmocka_unit_test(test_trace_lines),
        cmocka_unit_test(test_pipeline_stats),
        cmocka_unit_test(test_stats_struct_sizes),
        cmocka_unit_test(test_restart_mid_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
