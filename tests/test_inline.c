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
#include "ef_test_util.h"
#include "state_test_util.h"

/* The item's keyed draw, as a field: its output depends on the item,
 * never on the thread that made it. */
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

static ef_pipeline *with_draw(const char *spec, const void *arg)
{
    (void)arg;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 5), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "draw", draw, NULL), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* A hash of every item's identity and bytes, in order; the count. */
static uint64_t run_hash(const char *spec, long *count)
{
    ef_pipeline *p = with_draw(spec, NULL);
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

/* inline=always, never or auto (which times both ways on these cheap
 * items, and may switch more than once), before a batch (slabs) or not:
 * the same items in the same order. */
static void test_same_output_either_way(void **state)
{
    (void)state;
    static const char *const ways[] = {"never", "always", "auto"};
    static const char *const threads[] = {"1", "2", "auto"};
    char spec[320];
    long n0 = 0;
    uint64_t h0 = 0;
    for (size_t w = 0; w < 3; w++)
        for (size_t t = 0; t < 3; t++) {
            snprintf(spec, sizeof spec,
                     "range:n=60000,bytes=3 | shuffle:64 | "
                     "map:fn=draw,threads=%s,inline=%s | "
                     "map:fn=noop,threads=%s,inline=%s | batch:7",
                     threads[t], ways[w], threads[2 - t], ways[2 - w]);
            long n;
            uint64_t h = run_hash(spec, &n);
            if (w == 0 && t == 0) {
                h0 = h;
                n0 = n;
                assert_int_equal(n0, 60000 / 7 + 1);
            } else if (h != h0 || n != n0) {
                fail_msg("%s: %ld items, hash %llx; expected %ld, %llx", spec,
                         n, (unsigned long long)h, n0, (unsigned long long)h0);
            }
        }
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
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    const uint64_t budget = (uint64_t)1 << 19, item = (1 << 16) + 8;
    assert_int_equal(ef_pipeline_set_memory_budget(p, budget), EF_OK);
    tu_parse(p, "range:n=2000,bytes=65536 | map:fn=noop,threads=2,"
                "inline=always | prefetch:depth=auto | map:fn=noop,"
                "threads=2,inline=always | prefetch:64");
    assert_int_equal(tu_drain(p), 2000);
    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get(p, &ps), EF_OK);
    assert_true(ps.peak_bytes_held > 0);
    if (ps.peak_bytes_held > budget + 2 * item)
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
    assert_int_equal(ef_pipeline_bind_map(p, "slow", slow, NULL), EF_OK);
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
