/* SPDX-License-Identifier: Apache-2.0 */
/* echo:factor=auto, tested without timing: a C source that has items ready
 * only when the test releases them, so every decision of the policy is
 * known in advance. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <pthread.h>
#include <time.h>

#include "ef_test_util.h"

/* A source of `total` items (index 0..total-1) of which only `ready` may
 * be taken. A blocking call with none ready returns END when `closed`, so a
 * test can end the stream where the policy would wait. */
typedef struct {
    int64_t next, total, ready;
    int closed;
} gated;

static int gated_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    gated *g = user;
    if (g->next >= g->total)
        return EF_END;
    if (g->ready == 0) {
        if (!block)
            return EF_AGAIN;
        if (g->closed)
            return EF_END;
        fail_msg("the stage waited for a fresh item the test did not expect "
                 "it to wait for");
    }
    g->ready--;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = g->next, .epoch = epoch});
    int64_t *v;
    assert_int_equal(
        ef_sample_add_new(s, "index", EF_I64, 0, NULL, (void **)&v), EF_OK);
    *v = g->next++;
    *out = s;
    return EF_OK;
}

static ef_pipeline *gated_pipeline(gated *g, const char *echo_spec)
{
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, gated_fn, g, NULL), EF_OK);
    tu_parse(p, echo_spec);
    return p;
}

/* Pulls one item and returns its (index, echo copy). */
static void pull(ef_pipeline *p, int64_t *index, int *copy)
{
    ef_sample *s = tu_next(p);
    *index = tu_i64(s, "index");
    *copy = ef_sample_identity(s).echo_copy;
    assert_int_equal(*index, ef_sample_identity(s).index);
    ef_sample_free(s);
}

static void fresh_goes_first(void **state)
{
    (void)state;
    gated g = {.total = 100, .ready = 3};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=4,pool=8");
    int64_t idx;
    int copy;
    for (int64_t i = 0; i < 3; i++) {
        pull(p, &idx, &copy);
        assert_int_equal(idx, i);
        assert_int_equal(copy, 0);
    }
    /* nothing ready: an echo of one of the three */
    pull(p, &idx, &copy);
    assert_true(idx >= 0 && idx < 3);
    assert_int_equal(copy, 1);
    /* a fresh item as soon as one is ready, even with echoes to spare */
    g.ready = 1;
    pull(p, &idx, &copy);
    assert_int_equal(idx, 3);
    assert_int_equal(copy, 0);
    ef_pipeline_destroy(p);
}

static void least_echoed_first(void **state)
{
    (void)state;
    gated g = {.total = 100, .ready = 4};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=8,pool=16");
    int64_t idx;
    int copy;
    for (int i = 0; i < 4; i++)
        pull(p, &idx, &copy);
    /* three rounds of four echoes: each round uses every item once */
    for (int round = 1; round <= 3; round++) {
        int seen[4] = {0};
        for (int k = 0; k < 4; k++) {
            pull(p, &idx, &copy);
            assert_true(idx >= 0 && idx < 4);
            assert_int_equal(copy, round);
            seen[idx]++;
        }
        for (int i = 0; i < 4; i++)
            assert_int_equal(seen[i], 1);
    }
    ef_pipeline_destroy(p);
}

static void cap_holds(void **state)
{
    (void)state;
    gated g = {.total = 100, .ready = 2};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=3,pool=8");
    int uses[2] = {0};
    int64_t idx;
    int copy;
    for (int k = 0; k < 6; k++) {
        pull(p, &idx, &copy);
        assert_true(idx >= 0 && idx < 2);
        uses[idx]++;
    }
    assert_int_equal(uses[0], 3);
    assert_int_equal(uses[1], 3);
    /* every pooled item used up: the stage must wait for fresh data, and
     * the source ends the stream there */
    g.closed = 1;
    ef_sample *s;
    assert_int_equal(ef_pipeline_next(p, &s), EF_END);
    ef_stage_stats st = tu_stage(p, "echo");
    assert_int_equal((int)tu_extra(&st, "fresh"), 2);
    assert_int_equal((int)tu_extra(&st, "echoed"), 4);
    assert_true(tu_extra(&st, "effective_factor") == 3.0);
    ef_pipeline_destroy(p);
}

static void pool_keeps_the_most_recent(void **state)
{
    (void)state;
    gated g = {.total = 100, .ready = 5};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=8,pool=2");
    int64_t idx;
    int copy;
    for (int i = 0; i < 5; i++)
        pull(p, &idx, &copy);
    /* items 0..2 were evicted: only 3 and 4 are echoed, 7 more times each */
    int uses[5] = {0};
    for (int k = 0; k < 14; k++) {
        pull(p, &idx, &copy);
        assert_true(idx == 3 || idx == 4);
        uses[idx]++;
    }
    assert_int_equal(uses[3], 7);
    assert_int_equal(uses[4], 7);
    g.closed = 1;
    ef_sample *s;
    assert_int_equal(ef_pipeline_next(p, &s), EF_END);
    ef_pipeline_destroy(p);
}

/* A pool of one: every fresh item evicts the only pooled one, emptying
 * the list of once-used items just before the new item joins it. */
static void pool_of_one(void **state)
{
    (void)state;
    gated g = {.total = 100, .ready = 3};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=3,pool=1");
    int64_t idx;
    int copy;
    for (int64_t i = 0; i < 3; i++) {
        pull(p, &idx, &copy);
        assert_int_equal(idx, i);
    }
    for (int k = 1; k <= 2; k++) {
        pull(p, &idx, &copy);
        assert_int_equal(idx, 2);
        assert_int_equal(copy, k);
    }
    g.closed = 1;
    ef_sample *s;
    assert_int_equal(ef_pipeline_next(p, &s), EF_END);
    ef_pipeline_destroy(p);
}

static void max_one_never_echoes(void **state)
{
    (void)state;
    gated g = {.total = 3, .ready = 1};
    ef_pipeline *p = gated_pipeline(&g, "echo:factor=auto,max=1");
    int64_t idx;
    int copy;
    pull(p, &idx, &copy);
    g.ready = 2;
    pull(p, &idx, &copy);
    assert_int_equal(idx, 1);
    pull(p, &idx, &copy);
    assert_int_equal(idx, 2);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* The consumer is blocked in next(): the pool is used up and the upstream
 * (behind a pump) sleeps in a throttle for 100 s. Stop must wake it. */
typedef struct {
    ef_pipeline *p;
    int rc;
    double returned_at;
} consumer;

static void *consume_all(void *arg)
{
    consumer *c = arg;
    ef_sample *s;
    while ((c->rc = ef_pipeline_next(c->p, &s)) == EF_OK)
        ef_sample_free(s);
    c->returned_at = tu_now_s();
    return NULL;
}

static void stop_while_waiting(void **state)
{
    (void)state;
    consumer c = {.p = tu_pipeline("range:n=10 | throttle:rate=0.01 | "
                                   "echo:factor=auto,max=2",
                                   1)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, consume_all, &c), 0);
    nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    double stopped_at = tu_now_s();
    ef_pipeline_stop(c.p);
    pthread_join(t, NULL);
    assert_int_equal(c.rc, EF_ECANCELED);
    assert_true(c.returned_at - stopped_at < 2.0);
    ef_stage_stats st = tu_stage(c.p, "echo");
    assert_int_equal((int)tu_extra(&st, "fresh"), 1);
    assert_int_equal((int)tu_extra(&st, "echoed"), 1);
    ef_sample *s;
    assert_int_equal(ef_pipeline_next(c.p, &s), EF_ECANCELED);
    ef_pipeline_destroy(c.p);
}

/* A synchronous upstream gets a pump: the whole stream arrives, each item
 * at most max times, whatever the timing. */
static void pump_keeps_every_item(void **state)
{
    (void)state;
    for (int rep = 0; rep < 3; rep++) {
        ef_pipeline *p =
            tu_pipeline("range:n=2000 | echo:factor=auto,max=3,pool=16", rep);
        int uses[2000] = {0};
        ef_sample *s;
        int rc;
        while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
            int64_t i = tu_i64(s, "index");
            assert_true(i >= 0 && i < 2000);
            uses[i]++;
            ef_sample_free(s);
        }
        assert_int_equal(rc, EF_END);
        for (int i = 0; i < 2000; i++)
            assert_true(uses[i] >= 1 && uses[i] <= 3);
        ef_pipeline_destroy(p);
    }
}

static void auto_after_batch(void **state)
{
    (void)state;
    ef_pipeline *p =
        tu_pipeline("range:n=1000 | batch:10 | echo:factor=auto,max=4", 3);
    int fresh_batches = 0;
    ef_sample *s;
    int rc;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_tensor t = tu_field(s, "index");
        assert_int_equal(t.shape[0], 10);
        fresh_batches += ef_sample_identity(s).echo_copy == 0;
        assert_true(ef_sample_identity(s).echo_copy < 4);
        ef_sample_free(s);
    }
    assert_int_equal(rc, EF_END);
    assert_int_equal(fresh_batches, 100);
    ef_pipeline_destroy(p);
}

/* A source that is never ready when polled but gives an item at once when
 * the stage waits: a fast upstream the stage always finds between items. */
typedef struct {
    int64_t next, total, waits;
} lagging;

static int lagging_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    lagging *l = user;
    if (l->next >= l->total)
        return EF_END;
    if (!block)
        return EF_AGAIN;
    l->waits++;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = l->next, .epoch = epoch});
    int64_t *v;
    assert_int_equal(
        ef_sample_add_new(s, "index", EF_I64, 0, NULL, (void **)&v), EF_OK);
    *v = l->next++;
    *out = s;
    return EF_OK;
}

/* The copy spreading buffer fills before the first item goes out; the
 * downstream waits for that whatever the stage does, so the fill takes
 * fresh items only, waiting for each, and echoes none. Afterwards, one
 * request at a time, nothing ready means an echo again. */
static void spreading_fill_echoes_nothing(void **state)
{
    (void)state;
    lagging l = {.total = 100};
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, lagging_fn, &l, NULL), EF_OK);
    tu_parse(p, "echo:factor=auto,max=4,pool=8,shuffle=16");
    ef_sample_free(tu_next(p));
    ef_stage_stats st = tu_stage(p, "echo");
    assert_int_equal(l.waits, 16);
    assert_true(tu_extra(&st, "fresh") == 16);
    assert_true(tu_extra(&st, "echoed") == 0);
    ef_sample_free(tu_next(p));
    st = tu_stage(p, "echo");
    assert_int_equal(l.waits, 16); /* polled, none ready: an echo */
    assert_true(tu_extra(&st, "echoed") == 1);
    ef_pipeline_destroy(p);

    /* the same behind the stage's own pump, whatever the threads' pace */
    for (int rep = 0; rep < 3; rep++) {
        p = tu_pipeline("range:n=5000 | echo:factor=auto,max=4,shuffle=512",
                        (uint64_t)rep);
        ef_sample_free(tu_next(p));
        st = tu_stage(p, "echo");
        assert_true(tu_extra(&st, "fresh") == 512);
        assert_true(tu_extra(&st, "echoed") == 0);
        ef_pipeline_destroy(p);
    }
}

static void stats_carry_r_estimate(void **state)
{
    (void)state;
    const char *specs[] = {"range:n=3000 | echo:2 | batch:8",
                           "range:n=3000 | echo:factor=auto,max=4 | batch:8"};
    for (int i = 0; i < 2; i++) {
        ef_pipeline *p = tu_pipeline(specs[i], 1);
        tu_drain(p);
        ef_stage_stats st = tu_stage(p, "echo");
        double v;
        assert_true(ef_stage_stats_extra(&st, "r_estimate", &v));
        assert_true(v >= 0);
        assert_true(ef_stage_stats_extra(&st, "upstream_busy", &v));
        assert_true(v >= 0 && v <= 1);
        assert_true(ef_stage_stats_extra(&st, "auto", &v));
        assert_true(v == i);
        ef_pipeline_destroy(p);
    }
}

static void bad_auto_options(void **state)
{
    (void)state;
    const char *bad[] = {"range:n=1 | echo:factor=auto,max=0",
                         "range:n=1 | echo:factor=auto,pool=0",
                         "range:n=1 | echo:factor=automatic",
                         "range:n=1 | echo:factor=auto,max=x",
                         /* auto's options with a fixed factor: an error,
                          * not silently ignored (the default written out
                          * too) */
                         "range:n=1 | echo:factor=2,max=8",
                         "range:n=1 | echo:factor=2,pool=64",
                         "range:n=1 | echo:1.5,max=4"};
    const char *names[] = {"max",
                           "pool",
                           "factor",
                           "max",
                           "'max' and 'pool' apply to factor=auto only",
                           "'max' and 'pool' apply to factor=auto only",
                           "with factor=1.5"};
    for (int i = 0; i < 7; i++) {
        ef_pipeline *p;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        assert_int_equal(ef_pipeline_parse(p, bad[i]), EF_ESPEC);
        assert_non_null(strstr(ef_pipeline_error(p), names[i]));
        ef_pipeline_destroy(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fresh_goes_first),
        cmocka_unit_test(least_echoed_first),
        cmocka_unit_test(cap_holds),
        cmocka_unit_test(pool_keeps_the_most_recent),
        cmocka_unit_test(pool_of_one),
        cmocka_unit_test(max_one_never_echoes),
        cmocka_unit_test(stop_while_waiting),
        cmocka_unit_test(pump_keeps_every_item),
        cmocka_unit_test(auto_after_batch),
        cmocka_unit_test(spreading_fill_echoes_nothing),
        cmocka_unit_test(stats_carry_r_estimate),
        cmocka_unit_test(bad_auto_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
