/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the tests that run items through maps in runs or inline
 * (test_runs.c, test_inline.c): a transform whose output depends on the
 * item only, and a hash of a whole pass. Include after state_test_util.h. */
#ifndef EF_DRAW_TEST_UTIL_H
#define EF_DRAW_TEST_UTIL_H

#include "state_test_util.h"

/* Adds a field "draw" from the item's keyed generator: its output
 * depends on the item, never on the thread or run that made it. */
static int tu_draw(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
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

/* `spec` with seed `seed`, where map:fn=draw is tu_draw. */
static inline ef_pipeline *tu_with_draw(const char *spec, uint64_t seed)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "draw", tu_draw, NULL), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* A hash of every item's identity and bytes of a pass of `spec`, in
 * order, and the count. */
static inline uint64_t tu_draw_hash(const char *spec, uint64_t seed,
                                    long *count)
{
    ef_pipeline *p = tu_with_draw(spec, seed);
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

/* Each of the nine specs `fmt` makes of (b[j], a[i], b[2 - j], a[2 - i])
 * gives the same pass, of `items` items, as the first. */
static inline void tu_expect_same_passes(const char *fmt,
                                         const char *const a[3],
                                         const char *const b[3], long items,
                                         uint64_t seed)
{
    char spec[320];
    uint64_t h0 = 0;
    for (size_t i = 0; i < 3; i++)
        for (size_t j = 0; j < 3; j++) {
/* fmt: a literal of the caller's, with four %s */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
            snprintf(spec, sizeof spec, fmt, b[j], a[i], b[2 - j], a[2 - i]);
#pragma GCC diagnostic pop
            long n;
            uint64_t h = tu_draw_hash(spec, seed, &n);
            if (n != items)
                fail_msg("%s: %ld items, expected %ld", spec, n, items);
            if (i == 0 && j == 0)
                h0 = h;
            else if (h != h0)
                fail_msg("%s: hash %llx; expected %llx", spec,
                         (unsigned long long)h, (unsigned long long)h0);
        }
}

/* A pass of `spec` under a memory budget of `budget` bytes holds at
 * most `slack` bytes over it at once. */
static inline void tu_expect_within_budget(const char *spec, uint64_t budget,
                                           uint64_t slack, long items)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, budget), EF_OK);
    tu_parse(p, spec);
    assert_int_equal(tu_drain(p), items);
    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get(p, &ps), EF_OK);
    assert_true(ps.peak_bytes_held > 0);
    if (ps.peak_bytes_held > budget + slack)
        fail_msg("%s: held %llu bytes at once, over the budget of %llu", spec,
                 (unsigned long long)ps.peak_bytes_held,
                 (unsigned long long)budget);
    ef_pipeline_destroy(p);
}

/* A transform of 20 ms an item. */
static int tu_slow(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

#endif
