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
#include "draw_test_util.h"
#include "ef_test_util.h"
#include "state_test_util.h"


static void test_same_output_any_runs_and_threads(void **state)
{
    (void)state;
    static const char *const runs[] = {"1", "7", "auto"};
    static const char *const threads[] = {"1", "2", "3"};
    tu_expect_same_passes("range:n=5000,bytes=3 | shuffle:64 | "
                          "map:fn=draw,threads=%s,run=%s | "
                          "prefetch:depth=auto | "
                          "map:fn=noop,threads=%s,run=%s | batch:9",
                          runs, threads, 5000 / 9 + 1, 11);
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
    return tu_with_draw(spec, 7);
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
    /* an item: 64 KiB of data and its i64 index; each of the three
     * queues, when empty (its consumer's cache too), takes one item over
     * the budget (budget.h) */
    const uint64_t item = (1 << 16) + 8;
    tu_expect_within_budget("range:n=2000,bytes=65536 | map:fn=noop,"
                            "threads=2 | prefetch:depth=auto | map:fn=noop,"
                            "threads=2,ordered=false | prefetch:64",
                            (uint64_t)1 << 19, 3 * item, 2000);
}

/* A stop is not kept waiting by a worker inside a long run of slow
 * items: it gives up the rest of its run. */
static void test_stop_inside_a_run(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "slow", tu_slow, NULL), EF_OK);
    tu_parse(p, "range:n=100000 | map:fn=slow,threads=2,run=50");
    ef_sample *s = tu_next(p); /* a worker is inside its second run now */
    ef_sample_free(s);
    double t0 = tu_now_s();
    ef_pipeline_stop(p);
    ef_pipeline_destroy(p);
    /* a run is 50 x 20 ms: without the cut this took about a second */
    double took = tu_now_s() - t0;
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
