/* SPDX-License-Identifier: Apache-2.0 */
/* threads=auto and prefetch:depth=auto: the output does not depend on
 * what the tuner chooses, the choices stay within their bounds, the
 * slower stage gets the threads, and a starved prefetch deepens within
 * the memory budget. No timing thresholds: only orderings and bounds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/cores.h"
#include "ef_test_util.h"

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* ---- map callbacks ---------------------------------------------- */

/* A value from the item's index and its keyed random draw, after a
 * little work, so that the tuner has something to share out. */
static int mixing_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    volatile uint64_t x = ef_map_ctx_random(ctx);
    for (int i = 0; i < 2000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    ef_sample *o = ef_sample_new(ef_sample_identity(in));
    int64_t *v;
    if (!o || ef_sample_add_new(o, "v", EF_I64, 0, NULL, (void **)&v) != EF_OK)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    *v = (int64_t)(x >> 1) ^ ef_sample_identity(in).index;
    *out = o;
    return EF_OK;
}

static int slow_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    sleep_us(2000);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

static int fast_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

/* ---- helpers ------------------------------------------------------ */

static ef_pipeline *range_pipeline(long n)
{
    char spec[64];
    snprintf(spec, sizeof spec, "range:n=%ld", n);
    return tu_pipeline(spec, 7);
}

static void add_map(ef_pipeline *p, ef_map_fn fn, const char *options)
{
    int rc = ef_pipeline_add_map(p, fn, NULL, options);
    if (rc != EF_OK)
        fail_msg("add_map(%s): %s", options, ef_pipeline_error(p));
}

/* Every item's "v" in order, into vs[n]; the stream must have n items. */
static void collect(ef_pipeline *p, int64_t *vs, long n)
{
    for (long i = 0; i < n; i++) {
        ef_sample *s = tu_next(p);
        vs[i] = tu_i64(s, "v");
        ef_sample_free(s);
    }
    tu_expect_end(p);
}

static ef_stage_stats stage_at(const ef_pipeline *p, int i)
{
    ef_stage_stats st;
    assert_int_equal(ef_pipeline_stage_stats(p, i, &st), EF_OK);
    return st;
}

/* ---- tests -------------------------------------------------------- */

/* Ordered auto gives the very stream threads=1 gives, while the tuner
 * moves `allowed` under it. */
static void test_auto_same_order(void **state)
{
    (void)state;
    enum { N = 6000 };
    static int64_t one[N], aut[N];
    ef_pipeline *p = range_pipeline(N);
    add_map(p, mixing_map, "threads=1");
    collect(p, one, N);
    ef_pipeline_destroy(p);

    p = range_pipeline(N);
    add_map(p, mixing_map, "threads=auto");
    tu_parse(p, "prefetch:depth=auto");
    collect(p, aut, N);
    ef_pipeline_destroy(p);
    assert_memory_equal(one, aut, sizeof one);

    /* a built-in the same way */
    ef_pipeline *a =
        tu_pipeline("range:n=3000,bytes=24 | map:fn=to_f32,threads=1", 3);
    ef_pipeline *b =
        tu_pipeline("range:n=3000,bytes=24 | map:fn=to_f32,threads=auto", 3);
    for (int i = 0; i < 3000; i++) {
        ef_sample *x = tu_next(a), *y = tu_next(b);
        ef_tensor tx = tu_field(x, "data"), ty = tu_field(y, "data");
        assert_int_equal(tx.nbytes, ty.nbytes);
        assert_memory_equal(tx.data, ty.data, tx.nbytes);
        assert_int_equal(tu_i64(x, "index"), tu_i64(y, "index"));
        ef_sample_free(x);
        ef_sample_free(y);
    }
    tu_expect_end(a);
    tu_expect_end(b);
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
}

/* Every map-based stage takes auto; a count still works. */
static void test_auto_accepted(void **state)
{
    (void)state;
    static const char *const specs[] = {
        "range:n=2 | flip:threads=auto",
        "range:n=2 | flip:threads=2",
        "range:n=2 | to_chw:threads=auto",
        "range:n=2 | map:fn=noop,threads=auto,ordered=false",
        "range:n=2 | prefetch:auto",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        ef_pipeline *p = tu_pipeline(specs[i], 1);
        assert_int_equal(ef_pipeline_stage_count(p), 2);
        ef_pipeline_destroy(p);
    }
}

/* Unordered auto: every item once, whatever the workers' order. */
static void test_auto_unordered_all_items(void **state)
{
    (void)state;
    enum { N = 4000 };
    ef_pipeline *p = range_pipeline(N);
    add_map(p, fast_map, "threads=auto,ordered=false");
    static unsigned char seen[N];
    memset(seen, 0, sizeof seen);
    for (long i = 0; i < N; i++) {
        ef_sample *s = tu_next(p);
        int64_t k = tu_i64(s, "index");
        assert_true(k >= 0 && k < N);
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* The stats' threads: a fixed count as given, auto within [1, cores],
 * 0 for a stage without workers; and a second pass keeps working. */
static void test_threads_in_stats(void **state)
{
    (void)state;
    int cores = ef__usable_cores();
    ef_pipeline *p = tu_pipeline("range:n=3000 | repeat:count=2", 1);
    /* on the workers: a map running its cheap items inline reads 0 */
    add_map(p, mixing_map, "threads=auto,inline=never");
    add_map(p, fast_map, "threads=3,inline=never");
    tu_parse(p, "prefetch:depth=5");
    long got = 0;
    ef_sample *s;
    while ((s = tu_next_or_end(p, "auto stats")) != NULL) {
        ef_sample_free(s);
        if (++got % 500 == 0) {
            int t = stage_at(p, 2).threads;
            if (t < 1 || t > cores)
                fail_msg("threads=auto chose %d with %d cores", t, cores);
        }
    }
    assert_int_equal(got, 6000);
    int t = stage_at(p, 2).threads;
    assert_true(t >= 1 && t <= cores);
    assert_int_equal(stage_at(p, 3).threads, 3);
    assert_int_equal(stage_at(p, 4).depth, 5);
    assert_int_equal(stage_at(p, 0).threads, 0);
    assert_int_equal(stage_at(p, 0).depth, 0);
    assert_int_equal(stage_at(p, 2).depth, 0);
    /* a caller built against the header before these fields gets the
     * fields it knows and nothing written past them */
    unsigned char buf[sizeof(ef_stage_stats) + 8];
    memset(buf, 0xab, sizeof buf);
    size_t old = offsetof(ef_stage_stats, threads);
    assert_int_equal(
        ef_pipeline_stage_stats_sized(p, 2, (ef_stage_stats *)buf, old), EF_OK);
    for (size_t i = old; i < sizeof buf; i++)
        assert_int_equal(buf[i], 0xab);
    ef_pipeline_destroy(p);
}

/* Two auto stages, one far slower: once the tuner has looked, the slow
 * one has at least as many threads as the fast one, and on more than
 * one core more than one. Runs on slow items until the tuner has had
 * several windows. */
static void run_slow_fast(int slow_first)
{
    ef_pipeline *p = range_pipeline(1000000);
    add_map(p, slow_first ? slow_map : fast_map, "threads=auto");
    add_map(p, slow_first ? fast_map : slow_map, "threads=auto");
    int slow = slow_first ? 1 : 2, fast = slow_first ? 2 : 1;
    double t0 = tu_now_s();
    long n = 0;
    /* six tuner periods of 50 ms, and enough items for each */
    while (tu_now_s() - t0 < 0.3 || n < 100) {
        ef_sample_free(tu_next(p));
        n++;
    }
    ef_stage_stats s = stage_at(p, slow), f = stage_at(p, fast);
    if (s.threads < f.threads)
        fail_msg("after %ld items the slow stage has %d threads, the fast "
                 "one %d",
                 n, s.threads, f.threads);
    if (ef__usable_cores() > 1)
        assert_true(s.threads > 1);
    ef_pipeline_destroy(p);
}

static void test_slow_stage_gets_threads(void **state)
{
    (void)state;
    run_slow_fast(0);
    run_slow_fast(1);
}

/* ---- prefetch depth=auto ------------------------------------------ */

enum { ITEM_BYTES = 1000 };

/* Items of ITEM_BYTES that come in bursts: every 32nd takes 10 ms. */
static int bursty_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    int64_t *next = user;
    if (*next >= 600)
        return EF_END;
    if (*next % 32 == 31)
        sleep_us(10000);
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = *next, .epoch = epoch});
    int64_t shape[1] = {ITEM_BYTES};
    void *data;
    assert_int_equal(ef_sample_add_new(s, "data", EF_U8, 1, shape, &data),
                     EF_OK);
    memset(data, (int)(*next & 0xff), ITEM_BYTES);
    (*next)++;
    *out = s;
    return EF_OK;
}

/* A consumer slower than the source on average but starved at each
 * burst: the depth grows from 2, and never past a quarter of the budget
 * at ITEM_BYTES an item. */
static void test_depth_grows_within_budget(void **state)
{
    (void)state;
    const uint64_t budget = 32000;
    const int bound = (int)(budget / 4 / ITEM_BYTES); /* 8 */
    int64_t next = 0;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, budget), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, bursty_source, &next, NULL),
                     EF_OK);
    tu_parse(p, "prefetch:depth=auto");
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(stage_at(p, 1).depth, 2);
    int deepest = 2;
    long n = 1;
    while ((s = tu_next_or_end(p, "bursty")) != NULL) {
        ef_tensor t = tu_field(s, "data");
        assert_int_equal(((const unsigned char *)t.data)[0], n & 0xff);
        ef_sample_free(s);
        n++;
        sleep_us(500);
        int d = stage_at(p, 1).depth;
        if (d > bound)
            fail_msg("depth %d after %ld items, over the budget's %d", d, n,
                     bound);
        deepest = d > deepest ? d : deepest;
    }
    assert_int_equal(n, 600);
    if (deepest <= 2)
        fail_msg("the consumer was starved at every burst but the depth "
                 "stayed %d",
                 deepest);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_true(ps.peak_bytes_held <= budget);
    ef_pipeline_destroy(p);
}

/* A fixed depth never moves, starved or not. */
static void test_fixed_depth_stays(void **state)
{
    (void)state;
    int64_t next = 0;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, bursty_source, &next, NULL),
                     EF_OK);
    tu_parse(p, "prefetch:depth=3");
    assert_int_equal(tu_drain(p), 600);
    assert_int_equal(stage_at(p, 1).depth, 3);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auto_same_order),
        cmocka_unit_test(test_auto_accepted),
        cmocka_unit_test(test_auto_unordered_all_items),
        cmocka_unit_test(test_threads_in_stats),
        cmocka_unit_test(test_slow_stage_gets_threads),
        cmocka_unit_test(test_depth_grows_within_budget),
        cmocka_unit_test(test_fixed_depth_stays),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
