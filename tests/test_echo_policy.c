/* SPDX-License-Identifier: Apache-2.0 */
/* Echo policies: the priorities from fed-back values (echo_policy.c), the
 * feedback path through the public API (and whether a pipeline wants
 * it), batch members, and checkpoints of a pipeline whose echo has a
 * policy. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "stages/flow/echo_policy.h"
#include "state_test_util.h"

#define DRAWS 100000

static ef_sample_id id_of(int64_t index)
{
    return (ef_sample_id){.index = index, .epoch = 0};
}

/* A policy over `n` slots holding items 0..n-1. */
static ef__policy *filled(const ef__policy_def *kind, size_t n)
{
    ef__policy *p = ef__policy_new(kind, n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ef__policy_enter(p, i, id_of((int64_t)i)), 0);
    return p;
}

static void feed(ef__policy *p, const double *values, size_t n)
{
    ef_sample_id ids[64];
    assert_true(n <= 64);
    for (size_t i = 0; i < n; i++)
        ids[i] = id_of((int64_t)i);
    assert_int_equal(ef__policy_feedback(p, ids, values, n), n);
}

/* How often each of n slots is picked in DRAWS picks. */
static void pick_counts(ef__policy *p, size_t n, long *counts)
{
    uint32_t rng = 12345;
    memset(counts, 0, n * sizeof *counts);
    for (int k = 0; k < DRAWS; k++) {
        double v = tu_xorshift(&rng) / 4294967296.0;
        size_t slot;
        assert_int_equal(ef__policy_pick(p, v, &slot), 0);
        assert_true(slot < n);
        counts[slot]++;
    }
}

/* counts[i] within 5% of DRAWS * share[i] (a fixed generator: the counts
 * are the same on every run; the margin is about five standard
 * deviations). */
static void expect_shares(const long *counts, const double *share, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double want = DRAWS * share[i];
        if (fabs((double)counts[i] - want) > 0.05 * want + 50)
            fail_msg("slot %zu picked %ld times, expected about %.0f", i,
                     counts[i], want);
    }
}

/* Rank k of m (0 for the largest value) weighs 100^(-k / (m - 1)). */
static double rank_weight(size_t k, size_t m)
{
    return pow(100.0, -(double)k / (double)(m - 1));
}

static void test_rank_picks_by_rank(void **state)
{
    (void)state;
    ef__policy *p = filled(&ef__policy_rank, 4);
    feed(p, (double[]){1, 2, 3, 4}, 4);
    long c[4];
    pick_counts(p, 4, c);
    double w[4], sum = 0;
    for (size_t i = 0; i < 4; i++)
        sum += w[i] = rank_weight(3 - i, 4);
    expect_shares(c, (double[]){w[0] / sum, w[1] / sum, w[2] / sum,
                                w[3] / sum},
                  4);
    /* new values, a new order: negative ones rank like any other */
    feed(p, (double[]){-5, 10, 0, 3}, 4);
    pick_counts(p, 4, c);
    expect_shares(c, (double[]){w[0] / sum, w[3] / sum, w[1] / sum,
                                w[2] / sum},
                  4);
    ef__policy_free(p);
}

static void test_rank_waits_for_an_eighth(void **state)
{
    (void)state;
    /* 16 slots: ranks are assigned again once more than 16 / 8 values
     * came in since the last ranking, not on every value */
    enum { N = 16 };
    ef__policy *p = filled(&ef__policy_rank, N);
    double v[N];
    for (size_t i = 0; i < N; i++)
        v[i] = (double)i;
    feed(p, v, N);
    long before[N], after[N];
    pick_counts(p, N, before);
    assert_true(before[N - 1] > before[0] * 50);
    /* two values that would put slots 0 and 1 first: the old ranks stay */
    feed(p, (double[]){100, 99}, 2);
    pick_counts(p, N, after);
    assert_memory_equal(before, after, sizeof before);
    /* a third: ranked again, slot 0 first now and slot 3 last */
    feed(p, (double[]){100, 99, 98}, 3);
    pick_counts(p, N, after);
    assert_true(after[0] > after[N - 1] && after[0] > after[3] * 50);
    ef__policy_free(p);
}

static void test_rank_follows_order_not_size(void **state)
{
    (void)state;
    /* the same order, very different sizes: the same picks */
    long a[3], b[3];
    ef__policy *p = filled(&ef__policy_rank, 3);
    feed(p, (double[]){0.5, 0.1, 0.2}, 3);
    pick_counts(p, 3, a);
    ef__policy_free(p);
    p = filled(&ef__policy_rank, 3);
    feed(p, (double[]){1000, 0.01, 7}, 3);
    pick_counts(p, 3, b);
    ef__policy_free(p);
    assert_memory_equal(a, b, sizeof a);
    /* weights 1, 10^-1, 10^-2 for ranks 0, 1, 2 (pressure 100) */
    double sum = 1 + 0.1 + 0.01;
    expect_shares(a, (double[]){1 / sum, 0.01 / sum, 0.1 / sum}, 3);
}

static void test_missing_values_get_the_mean(void **state)
{
    (void)state;
    ef__policy *p = ef__policy_new(&ef__policy_rank, 3);
    assert_non_null(p);
    ef__policy_enter(p, 0, id_of(0));
    ef__policy_enter(p, 1, id_of(1));
    feed(p, (double[]){1, 3}, 2);
    /* item 2 enters with no value: the mean of the others' priorities,
     * ranks 1 (item 1) and 0.01 (item 0) */
    ef__policy_enter(p, 2, id_of(2));
    long c[3];
    pick_counts(p, 3, c);
    double mean = (1 + 0.01) / 2, sum = 1 + 0.01 + mean;
    expect_shares(c, (double[]){0.01 / sum, 1 / sum, mean / sum}, 3);
    ef__policy_free(p);
}

static void test_stale_values_are_ignored(void **state)
{
    (void)state;
    ef__policy *p = filled(&ef__policy_rank, 2);
    feed(p, (double[]){1, 2}, 2);
    /* an item never pooled, and one of another epoch */
    ef_sample_id other[2] = {id_of(7), {.index = 0, .epoch = 1}};
    assert_int_equal(ef__policy_feedback(p, other, (double[]){50, 50}, 2), 0);
    /* a copy's value counts for its item: item 1 falls below item 0 */
    ef_sample_id copy = {.index = 1, .epoch = 0, .echo_copy = 3};
    assert_int_equal(ef__policy_feedback(p, &copy, (double[]){0.5}, 1), 1);
    long c[2];
    pick_counts(p, 2, c);
    expect_shares(c, (double[]){1 / 1.01, 0.01 / 1.01}, 2);
    /* slot 0 evicted and taken by item 5: item 0's value no longer lands,
     * and item 5 has none: the mean, item 1's weight alone */
    ef__policy_leave(p, 0);
    ef__policy_enter(p, 0, id_of(5));
    assert_int_equal(ef__policy_feedback(p, (ef_sample_id[]){id_of(0)},
                                         (double[]){100}, 1),
                     0);
    pick_counts(p, 2, c);
    expect_shares(c, (double[]){0.5, 0.5}, 2);
    ef__policy_free(p);
}

static void test_retired_items_are_not_picked(void **state)
{
    (void)state;
    ef__policy *p = filled(&ef__policy_rank, 3);
    feed(p, (double[]){10, 1, 2}, 3);
    ef__policy_retire(p, 0);
    /* item 0 ranks first but is used up; items 2 and 1 weigh 0.1, 0.01 */
    long c[3];
    pick_counts(p, 3, c);
    assert_int_equal(c[0], 0);
    expect_shares(c + 1, (double[]){0.01 / 0.11, 0.1 / 0.11}, 2);
    ef__policy_retire(p, 1);
    ef__policy_retire(p, 2);
    size_t slot;
    assert_int_equal(ef__policy_pick(p, 0.3, &slot), -1);
    ef__policy_free(p);
}

static void test_many_slots_and_changes(void **state)
{
    (void)state;
    /* a pool turning over many times: the hash table and the rebuilt
     * sums stay right */
    enum { N = 1000 };
    ef__policy *p = ef__policy_new(&ef__policy_rank, N);
    assert_non_null(p);
    uint32_t rng = 99;
    for (int64_t k = 0; k < 50 * N; k++) {
        size_t slot = (size_t)(k % N);
        ef__policy_enter(p, slot, id_of(k));
        double v = (k % 10) == 0 ? 9.0 : 1.0;
        ef_sample_id id = id_of(k);
        assert_int_equal(ef__policy_feedback(p, &id, &v, 1), 1);
        if (k % 97 == 0) { /* ranked again while the pool turns over */
            size_t any;
            assert_int_equal(
                ef__policy_pick(p, tu_xorshift(&rng) / 4294967296.0, &any),
                0);
            assert_true(any < N);
        }
    }
    /* items 49000..49999 are in the pool: a tenth of them at 9 */
    ef_sample_id old = id_of(48999);
    assert_int_equal(ef__policy_feedback(p, &old, (double[]){1}, 1), 0);
    long favoured = 0;
    for (int k = 0; k < DRAWS; k++) {
        size_t slot;
        assert_int_equal(
            ef__policy_pick(p, tu_xorshift(&rng) / 4294967296.0, &slot), 0);
        favoured += slot % 10 == 0;
    }
    /* 100 items at 9 take ranks 0..99 of 1000, whichever way ties fall */
    double top = 0, all = 0;
    for (size_t k = 0; k < N; k++) {
        all += rank_weight(k, N);
        top += k < 100 ? rank_weight(k, N) : 0;
    }
    long want = (long)(DRAWS * top / all); /* about 37% */
    if (labs(favoured - want) > DRAWS / 40)
        fail_msg("%ld picks of the favoured tenth, expected about %ld",
                 favoured, want);
    ef__policy_free(p);
}

/* ---- through the pipeline ------------------------------------------ */

static void test_batch_members(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10 | batch:4", 1);
    ef_sample *b = tu_next(p);
    ef_sample_id ids[8];
    assert_int_equal(ef_sample_members(b, ids, 8), 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(ids[i].index, i);
    /* a smaller array gets the first; the count is the batch's */
    memset(ids, 0xff, sizeof ids);
    assert_int_equal(ef_sample_members(b, ids, 2), 4);
    assert_int_equal(ids[1].index, 1);
    assert_int_equal(ids[2].index, -1);
    assert_int_equal(ef_sample_members(b, NULL, 0), 4);
    ef_sample_free(b);
    ef_pipeline_destroy(p);
    /* an example is no batch */
    p = tu_pipeline("range:n=3", 1);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_members(s, ids, 8), 0);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    assert_int_equal(ef_sample_members(NULL, ids, 8), 0);
}

/* Index i's value: a tenth of the items high. */
static double value_of(int64_t index)
{
    return index % 10 == 0 ? 5.0 : 0.01;
}

/* Pulls up to max items, feeding back each one's value as it comes (a
 * batch's: its members'). */
static size_t pull_feeding(ef_pipeline *p, tu_seen *out, size_t max)
{
    size_t n = 0;
    ef_sample *s;
    while (n < max && ef_pipeline_next(p, &s) == EF_OK) {
        ef_sample_id id = ef_sample_identity(s), m[64];
        double v[64];
        int64_t k = ef_sample_members(s, m, 64);
        assert_true(k <= 64);
        if (k == 0) /* an example: its own value */
            m[k++] = id;
        for (int64_t i = 0; i < k; i++)
            v[i] = value_of(m[i].index);
        assert_int_equal(ef_pipeline_feedback(p, m, v, (size_t)k), EF_OK);
        out[n].id = id;
        out[n].hash = tu_hash_sample(s);
        ef_sample_free(s);
        n++;
    }
    return n;
}

static void test_feedback_steers_fixed_factor(void **state)
{
    (void)state;
    enum { N = 2000 };
    ef_pipeline *p =
        tu_pipeline("range:n=2000 | echo:factor=3,policy=rank,pool=500", 3);
    tu_seen *seen = malloc(4 * N * sizeof *seen);
    assert_non_null(seen);
    size_t n = pull_feeding(p, seen, 4 * N);
    /* the budget: exactly factor - 1 echoes per fresh item */
    assert_int_equal(n, 3 * N);
    long echoes = 0, favoured = 0;
    for (size_t i = 0; i < n; i++)
        if (seen[i].id.echo_copy > 0) {
            echoes++;
            favoured += seen[i].id.index % 10 == 0;
            /* never more than max = 8 (at least 2 * factor) uses */
            assert_true(seen[i].id.echo_copy < 8);
        }
    assert_int_equal(echoes, 2 * N);
    /* uniform picks would give the favoured tenth a tenth, 400 of the
     * 4,000. Rank weighs by order, not size: the tenth on top of a pool
     * of 500 holds ranks 0..49, about 37% of the weight (100^(-k/499)
     * summed), less while the pool fills and items wait for their first
     * value, and capped at 7 echoes an item; this run gives 1,159 (a
     * value-proportional policy at 500 times the value gave 1,400) */
    if (favoured < 1000)
        fail_msg("%ld of %ld echoes went to the favoured tenth", favoured,
                 echoes);
    ef_stage_stats st = tu_stage(p, "echo");
    assert_true(tu_extra(&st, "feedback_matched") > 0);
    ef_pipeline_destroy(p);
    free(seen);
}

/* Echoes per index of `spec` run with fed-back values, into counts[n]. */
static void echoes_per_item(const char *spec, long *counts, size_t n)
{
    ef_pipeline *p = tu_pipeline(spec, 3);
    tu_seen *seen = malloc(8 * n * sizeof *seen);
    assert_non_null(seen);
    size_t got = pull_feeding(p, seen, 8 * n);
    memset(counts, 0, n * sizeof *counts);
    for (size_t i = 0; i < got; i++)
        if (seen[i].id.echo_copy > 0) {
            assert_true((size_t)seen[i].id.index < n);
            counts[seen[i].id.index]++;
        }
    ef_pipeline_destroy(p);
    free(seen);
}

static void test_mix_keeps_a_share_uniform(void **state)
{
    (void)state;
    enum { N = 2000 };
    long c[N];
    /* mix=1: every pick the uniform way, so every item is emitted exactly
     * factor times, whatever the values */
    echoes_per_item("range:n=2000 | echo:factor=3,policy=rank,mix=1,pool=500",
                    c, N);
    for (int i = 0; i < N; i++)
        if (c[i] != 2)
            fail_msg("mix=1: item %d echoed %ld times, expected 2", i, c[i]);
    /* mix=0.5: half the echoes by value; the favoured tenth gets more than
     * its tenth, less than with no mix */
    long half = 0, none = 0;
    echoes_per_item("range:n=2000 | echo:factor=3,policy=rank,mix=0.5,"
                    "pool=500",
                    c, N);
    for (int i = 0; i < N; i += 10)
        half += c[i];
    echoes_per_item("range:n=2000 | echo:factor=3,policy=rank,pool=500", c, N);
    for (int i = 0; i < N; i += 10)
        none += c[i];
    if (!(half > 2 * N / 10 + 200 && half < none))
        fail_msg("the favoured tenth got %ld echoes with mix=0.5, %ld without "
                 "mix, expected between %d and the latter",
                 half, none, 2 * N / 10 + 200);
}

/* A pollable source of `total` items that has one ready on every fifth
 * poll only: an upstream a fifth of the consumer's speed, without
 * timing. */
typedef struct {
    int64_t next, total;
    int polls;
} slow_source;

static int slow_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    slow_source *g = user;
    if (g->next >= g->total)
        return EF_END;
    if (!block && ++g->polls % 5 != 0)
        return EF_AGAIN;
    *out = ef_sample_new((ef_sample_id){.index = g->next++, .epoch = epoch});
    return *out ? EF_OK : EF_ENOMEM;
}

static void test_feedback_steers_auto(void **state)
{
    (void)state;
    /* about four echoes per fresh item; max is high enough that the
     * favoured items are not used up, or every item would end up echoed
     * alike */
    slow_source g = {.total = 2000};
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, slow_fn, &g, NULL), EF_OK);
    tu_parse(p, "echo:factor=auto,max=64,pool=200,policy=rank");
    long echoes = 0, favoured = 0;
    ef_sample *s;
    while (ef_pipeline_next(p, &s) == EF_OK) {
        ef_sample_id id = ef_sample_identity(s);
        double v = value_of(id.index);
        assert_int_equal(ef_pipeline_feedback(p, &id, &v, 1), EF_OK);
        if (id.echo_copy > 0) {
            echoes++;
            favoured += id.index % 10 == 0;
        }
        ef_sample_free(s);
    }
    /* four per fresh item, but for the first polls, when nothing was
     * pooled yet */
    assert_in_range(echoes, 4 * 2000 - 10, 4 * 2000);
    /* uniform picks would give the favoured tenth a tenth; rank gives
     * the 20 on top of a pool of 200 about 37% of the weight
     * (100^(-k/199) for ranks 0..19 against all 200); this run gives
     * 36.9% */
    if (favoured <= echoes * 3 / 10)
        fail_msg("%ld of %ld echoes went to the favoured tenth", favoured,
                 echoes);
    ef_pipeline_destroy(p);
}

static void test_every_figure_is_reported(void **state)
{
    (void)state;
    /* automatic echoing with a policy gives the most figures of any
       stage; the last of them used to be dropped for want of room */
    ef_pipeline *p =
        tu_pipeline("range:n=100 | echo:factor=auto,max=4,policy=rank", 3);
    ef_sample *s;
    while (ef_pipeline_next(p, &s) == EF_OK)
        ef_sample_free(s);
    ef_stage_stats st;
    assert_int_equal(ef_pipeline_stage_stats(p, 1, &st), EF_OK);
    static const char *const keys[] = {
        "auto",           "max",           "fresh",
        "echoed",         "effective_factor", "reads_ahead", "fresh_fraction",
        "feedback_matched", "feedback_stale", "r_estimate",
        "upstream_rate",  "downstream_rate", "upstream_busy",
        "downstream_wait_s"};
    double v;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!ef_stage_stats_extra(&st, keys[i], &v))
            fail_msg("the echo stage's '%s' is missing", keys[i]);
    assert_int_equal(st.nextra, sizeof keys / sizeof keys[0]);
    ef_pipeline_destroy(p);
}

static void test_feedback_errors(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10 | echo:factor=2,policy=rank", 1);
    ef_sample_id id = id_of(0);
    double nan_value = NAN, inf_value = INFINITY, ok = 1;
    assert_int_equal(ef_pipeline_feedback(p, &id, &nan_value, 1), EF_EINVAL);
    assert_int_equal(ef_pipeline_feedback(p, &id, &inf_value, 1), EF_EINVAL);
    assert_int_equal(ef_pipeline_feedback(p, NULL, &ok, 1), EF_EINVAL);
    assert_int_equal(ef_pipeline_feedback(p, &id, NULL, 1), EF_EINVAL);
    assert_int_equal(ef_pipeline_feedback(NULL, &id, &ok, 1), EF_EINVAL);
    assert_int_equal(ef_pipeline_feedback(p, NULL, NULL, 0), EF_OK);
    /* before the first item, and for items not held: accepted, unused */
    assert_int_equal(ef_pipeline_feedback(p, &id, &ok, 1), EF_OK);
    assert_string_equal(ef_pipeline_error(p), "");
    ef_pipeline_destroy(p);
    /* no policy: accepted and ignored */
    p = tu_pipeline("range:n=10 | echo:2 | batch:2", 1);
    assert_int_equal(ef_pipeline_feedback(p, &id, &ok, 1), EF_OK);
    assert_int_equal(tu_drain(p), 10);
    ef_pipeline_destroy(p);
}

static void test_bad_policy_options(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *needle;
    } cases[] = {
        {"range:n=5 | echo:factor=2,policy=hardest", "expected uniform, rank"},
        /* retired after the experiments of docs/RESULTS.md */
        {"range:n=5 | echo:factor=2,policy=loss", "expected uniform, rank"},
        {"range:n=5 | echo:factor=2,policy=reducible", "uniform, rank"},
        {"range:n=5 | echo:factor=2,mix=0.5", "option 'mix'"},
        {"range:n=5 | echo:factor=2,policy=rank,mix=1.5", "mix"},
        {"range:n=5 | echo:factor=2,pool=10", "set a policy"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ef_pipeline *p;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        int rc = ef_pipeline_parse(p, cases[i].spec);
        if (rc == EF_OK)
            rc = ef_pipeline_next(p, &(ef_sample *){NULL});
        assert_int_not_equal(rc, EF_OK);
        if (!tu_contains_ci(ef_pipeline_error(p), cases[i].needle))
            fail_msg("%s: '%s' lacks '%s'", cases[i].spec,
                     ef_pipeline_error(p), cases[i].needle);
        ef_pipeline_destroy(p);
    }
}

/* A run cut at k, saved, restored and fed on gives what the whole run
 * gave: the pool, its values, the draws and the echoes due are in the
 * state. */
static void check_policy_resume(const char *spec)
{
    enum { MAX = 20000 };
    tu_seen *all = malloc(MAX * sizeof *all), *rest = malloc(MAX * sizeof *rest);
    assert_non_null(all);
    assert_non_null(rest);
    ef_pipeline *p = tu_pipeline(spec, 7);
    size_t total = pull_feeding(p, all, MAX);
    ef_pipeline_destroy(p);
    assert_true(total > 100 && total < MAX);
    const size_t cuts[] = {0, 1, 17, 333, total / 2, total - 1, total};
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++) {
        size_t k = cuts[c];
        p = tu_pipeline(spec, 7);
        assert_int_equal(pull_feeding(p, rest, k), k);
        size_t size;
        void *st = tu_save(p, &size);
        ef_pipeline_destroy(p);
        ef_pipeline *q = tu_pipeline(spec, 7);
        int rc = ef_pipeline_restore_state(q, st, size);
        if (rc != EF_OK)
            fail_msg("%s: restore at %zu: %s", spec, k, ef_pipeline_error(q));
        size_t n = pull_feeding(q, rest, MAX);
        assert_int_equal(n, total - k);
        tu_expect_same(all + k, rest, n, k, spec);
        ef_pipeline_destroy(q);
        free(st);
    }
    free(all);
    free(rest);
}

static void test_policy_resume(void **state)
{
    (void)state;
    check_policy_resume("range:n=1500 | echo:factor=2.5,policy=rank,pool=300,"
                        "shuffle=50");
    check_policy_resume("range:n=1500 | echo:factor=3,policy=rank,pool=300");
    check_policy_resume("range:n=1500 | echo:factor=2,policy=rank,"
                        "mix=0.3,pool=100 | batch:7");
}

/* Every registered policy, by name from a spec: it parses, keeps a fixed
 * factor's budget of echoes drawn from the pool, takes the values fed
 * back, and resumes exactly. */
static void test_every_policy_runs(void **state)
{
    (void)state;
    enum { N = 600 };
    assert_non_null(ef__policy_at(0));
    tu_seen *seen = malloc(4 * N * sizeof *seen);
    assert_non_null(seen);
    for (int i = 0; ef__policy_at(i); i++) {
        const char *name = ef__policy_at(i)->name;
        const ef__policy_def *def;
        assert_int_equal(ef__policy_parse(name, &def), 0);
        assert_ptr_equal(def, ef__policy_at(i));
        if (!strstr(ef__policy_names(), name))
            fail_msg("'%s' is not among the names '%s'", name,
                     ef__policy_names());
        char spec[160];
        snprintf(spec, sizeof spec,
                 "range:n=%d | echo:factor=3,policy=%s,pool=100", N, name);
        ef_pipeline *p = tu_pipeline(spec, 5);
        assert_int_equal(pull_feeding(p, seen, 4 * N), 3 * N);
        ef_stage_stats st = tu_stage(p, "echo");
        if (!(tu_extra(&st, "feedback_matched") > 0))
            fail_msg("%s: no value fed back was taken", spec);
        ef_pipeline_destroy(p);
        snprintf(spec, sizeof spec,
                 "range:n=%d | echo:factor=2.5,policy=%s,pool=100,"
                 "shuffle=20",
                 N, name);
        check_policy_resume(spec);
    }
    free(seen);
}

/* ef_pipeline_wants_feedback: the first echo stage with a policy other
 * than uniform, however the spec writes it. */
static void test_wants_feedback(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *policy;
    } cases[] = {
        {"range:n=10", "uniform"},
        {"range:n=10 | echo:2", "uniform"},
        {"range:n=10 | echo:factor=auto,max=4", "uniform"},
        {"range:n=10 | echo:factor=2,policy=uniform | batch:2", "uniform"},
        {"range:n=10 | echo:factor=2,policy=rank", "rank"},
        {"range:n=10 | echo: factor=2 , policy = \"rank\" | prefetch:2",
         "rank"},
        {"range:n=10 | echo:2 | batch:2 | echo:factor=auto,policy=rank",
         "rank"},
    };
    char buf[16];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ef_pipeline *p = tu_pipeline(cases[i].spec, 0);
        int want = strcmp(cases[i].policy, "uniform") != 0;
        memset(buf, 'x', sizeof buf);
        int got = ef_pipeline_wants_feedback(p, buf, sizeof buf);
        if (got != want || strcmp(buf, cases[i].policy) != 0)
            fail_msg("%s: wants_feedback %d, '%s'; expected %d, '%s'",
                     cases[i].spec, got, buf, want, cases[i].policy);
        /* also once it runs, and without a buffer */
        tu_drain(p);
        assert_int_equal(ef_pipeline_wants_feedback(p, NULL, 0), want);
        ef_pipeline_destroy(p);
    }
    /* cut to cap; NULL and empty pipelines listen to nothing */
    ef_pipeline *p = tu_pipeline("range:n=1 | echo:factor=2,policy=rank", 0);
    assert_int_equal(ef_pipeline_wants_feedback(p, buf, 3), 1);
    assert_string_equal(buf, "ra");
    ef_pipeline_destroy(p);
    assert_int_equal(ef_pipeline_wants_feedback(NULL, buf, sizeof buf), 0);
    assert_string_equal(buf, "uniform");
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_wants_feedback(p, NULL, 0), 0);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank_picks_by_rank),
        cmocka_unit_test(test_rank_follows_order_not_size),
        cmocka_unit_test(test_rank_waits_for_an_eighth),
        cmocka_unit_test(test_missing_values_get_the_mean),
        cmocka_unit_test(test_stale_values_are_ignored),
        cmocka_unit_test(test_retired_items_are_not_picked),
        cmocka_unit_test(test_many_slots_and_changes),
        cmocka_unit_test(test_batch_members),
        cmocka_unit_test(test_feedback_steers_fixed_factor),
        cmocka_unit_test(test_mix_keeps_a_share_uniform),
        cmocka_unit_test(test_feedback_steers_auto),
        cmocka_unit_test(test_every_figure_is_reported),
        cmocka_unit_test(test_feedback_errors),
        cmocka_unit_test(test_wants_feedback),
        cmocka_unit_test(test_bad_policy_options),
        cmocka_unit_test(test_policy_resume),
        cmocka_unit_test(test_every_policy_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
