/* SPDX-License-Identifier: Apache-2.0 */
/* Items cross threads in runs (core/run_length.h): whatever the run
 * lengths and thread counts, a pipeline emits the same items in the same
 * order; checkpoints taken with runs in flight resume exactly; the memory
 * budget and stops hold as with single items. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <time.h>

#include "core/run_length.h"
#include "ef_test_util.h"
#include "state_test_util.h"

/* A transform that draws from the item's keyed generator: its output
 * depends on the item, never on the thread or run that made it. */
static int draw(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    ef_sample *o = ef_sample_clone(in);
    int64_t *v;
    if (!o ||
        ef_sample_add_new(o, "draw", EF_I64, 0, NULL, (void **)&v) != EF_OK) {
        ef_sample_free(o);
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    *v = (int64_t)(ef_map_ctx_random(ctx) >> 1);
    *out = o;
    return EF_OK;
}

static ef_pipeline *with_draw(const char *spec, uint64_t seed)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "draw", draw, NULL), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* A hash of every item's identity and bytes, in order, and the count. */
static uint64_t run_hash(const char *spec, long *count)
{
    ef_pipeline *p = with_draw(spec, 11);
    uint64_t h = 1469598103934665603u;
    long n = 0;
    ef_sample *s;
    while ((s = tu_next_or_end(p, spec)) != NULL) {
        h = (h ^ tu_hash_sample(s)) * 1099511628211u;
        ef_sample_free(s);
        n++;
    }
    ef_pipeline_destroy(p);
    *count = n;
    return h;
}

static void test_same_output_any_runs_and_threads(void **state)
{
    (void)state;
    static const char *const runs[] = {"1", "7", "auto"};
    static const char *const threads[] = {"1", "2", "3"};
    char spec[256];
    long n0 = 0;
    uint64_t h0 = 0;
    for (size_t r = 0; r < 3; r++)
        for (size_t t = 0; t < 3; t++) {
            snprintf(spec, sizeof spec,
                     "range:n=5000,bytes=3 | shuffle:64 | "
                     "map:fn=draw,threads=%s,run=%s | prefetch:depth=auto | "
                     "map:fn=noop,threads=%s,run=%s | batch:9",
                     threads[t], runs[r], threads[2 - t], runs[2 - r]);
            long n;
            uint64_t h = run_hash(spec, &n);
            if (r == 0 && t == 0) {
                h0 = h;
                n0 = n;
                assert_int_equal(n0, 5000 / 9 + 1);
            } else if (h != h0 || n != n0) {
                fail_msg("%s: %ld items, hash %llx; expected %ld, %llx", spec,
                         n, (unsigned long long)h, n0, (unsigned long long)h0);
            }
        }
}

/* Unordered mode hands runs over as they finish: every item once. */
static void test_unordered_runs_every_item_once(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline(
        "range:n=20000 | map:fn=noop,threads=3,run=13,ordered=false", 1);
    static unsigned char seen[20000];
    memset(seen, 0, sizeof seen);
    ef_sample *s;
    long n = 0;
    while ((s = tu_next_or_end(p, "unordered")) != NULL) {
        int64_t i = tu_i64(s, "index");
        assert_true(i >= 0 && i < 20000);
        assert_int_equal(seen[i], 0);
        seen[i] = 1;
        ef_sample_free(s);
        n++;
    }
    assert_int_equal(n, 20000);
    ef_pipeline_destroy(p);
}

static ef_pipeline *seeded_draw(const char *spec, const void *arg)
{
    (void)arg;
    return with_draw(spec, 7);
}

/* A state saved while workers hold runs, and the consumer is inside one,
 * resumes to the same sequence; runs are a speed setting, so it resumes
 * under other run lengths too. */
static void test_checkpoint_mid_run(void **state)
{
    (void)state;
    static const size_t cuts[] = {0, 1, 3, 6, 7, 8, 50, 99, 500, 1234};
    const char *spec = "range:n=2000,bytes=5 | shuffle:100 | "
                       "map:fn=draw,threads=2,run=7 | prefetch:4 | "
                       "map:fn=noop,threads=3,run=auto | batch:3";
    tu_check_resume(seeded_draw, NULL, spec, spec, cuts,
                    sizeof cuts / sizeof cuts[0], 20000);
    tu_check_resume(seeded_draw, NULL, spec,
                    "range:n=2000,bytes=5 | shuffle:100 | "
                    "map:fn=draw,threads=1,run=1 | prefetch:4 | "
                    "map:fn=noop,threads=2,run=50 | batch:3",
                    cuts, sizeof cuts / sizeof cuts[0], 20000);
    /* single items through a pump, the consumer one item at a time */
    const char *items = "range:n=3000,bytes=2 | prefetch:depth=auto | "
                        "map:fn=draw,threads=2,run=auto";
    tu_check_resume(seeded_draw, NULL, items, items, cuts,
                    sizeof cuts / sizeof cuts[0], 20000);
}

/* Runs of cheap items under a budget a few items wide: the queues charge
 * every item until it is handed on, cached by a consumer or not, and
 * nothing waits for ever on a budget its own cache holds. */
static void test_budget_with_runs(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    /* an item: 64 KiB of data and its i64 index */
    const uint64_t budget = (uint64_t)1 << 19, item = (1 << 16) + 8;
    assert_int_equal(ef_pipeline_set_memory_budget(p, budget), EF_OK);
    tu_parse(p, "range:n=2000,bytes=65536 | map:fn=noop,threads=2 | "
                "prefetch:depth=auto | map:fn=noop,threads=2,"
                "ordered=false | prefetch:64");
    assert_int_equal(tu_drain(p), 2000);
    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get(p, &ps), EF_OK);
    assert_true(ps.peak_bytes_held > 0);
    /* each of the three queues, when empty (its consumer's cache too),
     * takes one item over the budget (budget.h) */
    if (ps.peak_bytes_held > budget + 3 * item)
        fail_msg("held %llu bytes at once, over the budget of %llu",
                 (unsigned long long)ps.peak_bytes_held,
                 (unsigned long long)budget);
    ef_pipeline_destroy(p);
}

static int slow(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A stop is not kept waiting by a worker inside a long run of slow
 * items: it gives up the rest of its run. */
static void test_stop_inside_a_run(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "slow", slow, NULL), EF_OK);
    tu_parse(p, "range:n=100000 | map:fn=slow,threads=2,run=50");
    ef_sample *s = tu_next(p); /* a worker is inside its second run now */
    ef_sample_free(s);
    double t0 = now_s();
    ef_pipeline_stop(p);
    ef_pipeline_destroy(p);
    /* a run is 50 x 20 ms: without the cut this took about a second */
    double took = now_s() - t0;
    if (took > 0.3)
        fail_msg("the stop took %.3f s", took);
}

/* The estimator: single items until a cost is known, then runs that
 * hold the target's work, within the bounds given. */
static void test_run_length_estimator(void **state)
{
    (void)state;
    ef__run_length r;
    ef__run_length_init(&r, EF__RUN_MAX, 0);
    assert_int_equal(ef__run_length_next(&r), 1);
    /* cheap items: the length doubles (plus one) up to the bound */
    size_t n = 1, steps = 0;
    while (n < EF__RUN_MAX && steps++ < 20) {
        ef__run_length_note(&r, n, 10 * n, 0);
        size_t next = ef__run_length_next(&r);
        assert_true(next == 2 * n + 1 || next == EF__RUN_MAX);
        n = next;
    }
    assert_int_equal(n, EF__RUN_MAX);
    /* slow items go one by one */
    ef__run_length_init(&r, EF__RUN_MAX, 0);
    for (int i = 0; i < 5; i++)
        ef__run_length_note(&r, 1, 10 * EF__RUN_TARGET_NS, 0);
    assert_int_equal(ef__run_length_next(&r), 1);
    /* items of 1 us: about the target's worth */
    ef__run_length_init(&r, EF__RUN_MAX, 0);
    for (int i = 0; i < 20; i++)
        ef__run_length_note(&r, ef__run_length_next(&r),
                            1000 * ef__run_length_next(&r), 0);
    assert_int_equal(ef__run_length_next(&r), EF__RUN_TARGET_NS / 1000);
    /* large items: the bytes bound; a bound on items */
    ef__run_length_init(&r, EF__RUN_MAX, 1 << 20);
    for (int i = 0; i < 20; i++)
        ef__run_length_note(&r, 8, 800, 8 << 18);
    assert_int_equal(ef__run_length_next(&r), 4);
    ef__run_length_init(&r, 16, 0);
    for (int i = 0; i < 20; i++)
        ef__run_length_note(&r, 8, 800, 0);
    assert_int_equal(ef__run_length_next(&r), 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output_any_runs_and_threads),
        cmocka_unit_test(test_unordered_runs_every_item_once),
        cmocka_unit_test(test_checkpoint_mid_run),
        cmocka_unit_test(test_budget_with_runs),
        cmocka_unit_test(test_stop_inside_a_run),
        cmocka_unit_test(test_run_length_estimator),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
