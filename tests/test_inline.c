/* SPDX-License-Identifier: Apache-2.0 */
/* A map that runs its items inline, on the consumer's thread (option
 * inline, core/inline_choice.h), emits what its workers would have, in
 * the same order; checkpoints resume exactly across the two ways; the
 * memory budget and stops hold; the comparison keeps the faster way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <time.h>

#include "core/inline_choice.h"
#include "draw_test_util.h"
#include "ef_test_util.h"
#include "state_test_util.h"

static ef_pipeline *with_draw(const char *spec, const void *arg)
{
    (void)arg;
    return tu_with_draw(spec, 5);
}

/* inline=always, never or auto (which times both ways on these cheap
 * items, and may switch more than once), before a batch (slabs) or not:
 * the same items in the same order. */
static void test_same_output_either_way(void **state)
{
    (void)state;
    static const char *const ways[] = {"never", "always", "auto"};
    static const char *const threads[] = {"1", "2", "auto"};
    tu_expect_same_passes("range:n=60000,bytes=3 | shuffle:64 | "
                          "map:fn=draw,threads=%s,inline=%s | "
                          "map:fn=noop,threads=%s,inline=%s | batch:7",
                          ways, threads, 60000 / 7 + 1, 5);
}

/* A state saved inline, mid-run, resumes exactly, inline or on workers:
 * the way is a speed setting. */
static void test_checkpoint_inline(void **state)
{
    (void)state;
    static const size_t cuts[] = {0, 1, 2, 5, 17, 64, 333, 1000};
    const char *spec = "range:n=3000,bytes=5 | shuffle:100 | "
                       "map:fn=draw,threads=2,inline=always | batch:3";
    tu_check_resume(with_draw, NULL, spec, spec, cuts,
                    sizeof cuts / sizeof cuts[0], 20000);
    tu_check_resume(with_draw, NULL, spec,
                    "range:n=3000,bytes=5 | shuffle:100 | "
                    "map:fn=draw,threads=2,inline=never | batch:3",
                    cuts, sizeof cuts / sizeof cuts[0], 20000);
    tu_check_resume(with_draw, NULL,
                    "range:n=3000,bytes=5 | shuffle:100 | "
                    "map:fn=draw,threads=2,inline=never | batch:3",
                    spec, cuts, sizeof cuts / sizeof cuts[0], 20000);
}

/* The workers park while the map runs inline: the stats say 0 threads,
 * and say again how many once the map is back on its workers (after a
 * reset the way stays). */
static void test_threads_stat(void **state)
{
    (void)state;
    ef_pipeline *p =
        tu_pipeline("range:n=100 | map:fn=noop,threads=2,inline=always", 1);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(tu_stage(p, "map").threads, 0);
    assert_int_equal(tu_drain(p), 99);
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=100 | map:fn=noop,threads=2,inline=never", 1);
    s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(tu_stage(p, "map").threads, 2);
    ef_pipeline_destroy(p);
}

/* Inline items are held by the consumer's run: the budget holds as on
 * the workers. */
static void test_budget_inline(void **state)
{
    (void)state;
    /* two queues, each one item over when empty (test_runs.c) */
    const uint64_t item = (1 << 16) + 8;
    tu_expect_within_budget("range:n=2000,bytes=65536 | map:fn=noop,"
                            "threads=2,inline=always | prefetch:depth=auto | "
                            "map:fn=noop,threads=2,inline=always | "
                            "prefetch:64",
                            (uint64_t)1 << 19, 2 * item, 2000);
}

static void *stop_later(void *arg)
{
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    ef_pipeline_stop(arg);
    return NULL;
}

/* A stop from another thread ends a consumer inside an inline run of
 * slow items within an item's time, as on the workers. */
static void test_stop_inline(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "slow", tu_slow, NULL), EF_OK);
    tu_parse(p, "range:n=100000 | map:fn=slow,threads=2,inline=always | "
                "batch:1000");
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stop_later, p), 0);
    double t0 = tu_now_s();
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    double took = tu_now_s() - t0;
    assert_int_equal(rc, EF_ECANCELED);
    assert_null(s);
    pthread_join(t, NULL);
    ef_pipeline_destroy(p);
    /* a batch is 1000 x 20 ms: 20 s without the stop */
    if (took > 1.0)
        fail_msg("the stop took %.3f s", took);
}

/* Wrong values are refused, naming the option. */
static void test_inline_option_errors(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:n=3 | map:fn=noop,inline=no"),
                     EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p),
                   "option 'inline' must be auto, always or never, not 'no'");
    assert_int_equal(
        ef_pipeline_parse(
            p, "range:n=3 | map:fn=noop,inline=always,ordered=false"),
        EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "ordered=false");
    ef_pipeline_destroy(p);
}

#define MS 1000000u

/* The comparison on a made-up clock: a warm-up window (unless the
 * workers are warm), one threaded, one inline, and the faster way;
 * inline when as fast; a new comparison after
 * EF__INLINE_COMPARE_EVERY_NS, threaded first. */
static void test_choice(void **state)
{
    (void)state;
    ef__inline_choice c;
    uint64_t now = 1000 * MS;
    ef__inline_choice_init(&c, now, 0);
    /* windows need both the time and the items */
    assert_int_equal(ef__inline_choice_note(&c, 100000, now + 5 * MS), -1);
    assert_int_equal(ef__inline_choice_note(&c, 0, now + 25 * MS), -1);
    now += 25 * MS; /* warmed: the threaded window starts */
    assert_int_equal(ef__inline_choice_note(&c, 1500, now + 30 * MS), -1);
    assert_int_equal(ef__inline_choice_note(&c, 1500, now + 40 * MS), 1);
    now += 40 * MS; /* 3000 items in 40 ms threaded; now inline */
    assert_int_equal(ef__inline_choice_note(&c, 3000, now + 40 * MS), 1);
    now += 40 * MS; /* as fast: inline stays, until the next comparison */
    assert_int_equal(
        ef__inline_choice_note(&c, 100000,
                               now + EF__INLINE_COMPARE_EVERY_NS - 1),
        -1);
    now += EF__INLINE_COMPARE_EVERY_NS;
    assert_int_equal(ef__inline_choice_note(&c, 1, now), 0);
    assert_int_equal(ef__inline_choice_note(&c, 5000, now + 20 * MS), -1);
    now += 20 * MS;
    assert_int_equal(ef__inline_choice_note(&c, 5000, now + 20 * MS), 1);
    now += 20 * MS; /* 5000 in 20 ms threaded; inline only 3000 */
    assert_int_equal(ef__inline_choice_note(&c, 3000, now + 20 * MS), 0);
    /* workers already running: no warm-up */
    ef__inline_choice_init(&c, now, 1);
    assert_int_equal(ef__inline_choice_note(&c, 3000, now + 20 * MS), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_output_either_way),
        cmocka_unit_test(test_checkpoint_inline),
        cmocka_unit_test(test_threads_stat),
        cmocka_unit_test(test_budget_inline),
        cmocka_unit_test(test_stop_inline),
        cmocka_unit_test(test_inline_option_errors),
        cmocka_unit_test(test_choice),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
