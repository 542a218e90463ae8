/* SPDX-License-Identifier: Apache-2.0 */
/* The shuffle stage (permutations, bounded buffer, epochs, seeds) and the
 * determinism of a whole pipeline whatever the map thread count. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

/* ---- helpers ------------------------------------------------------ */

typedef TU_ARRAY(int64_t) vec;

/* Indices (identity) and epochs of every sample of `spec`. */
static void order_of(const char *spec, uint64_t seed, vec *index, vec *epoch)
{
    ef_pipeline *p = tu_pipeline(spec, seed);
    for (ef_sample *s; (s = tu_next_or_end(p, spec)) != NULL;) {
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(tu_i64(s, "index"), id.index);
        assert_int_equal(id.echo_copy, 0);
        TU_PUSH(index, id.index);
        if (epoch)
            TU_PUSH(epoch, id.epoch);
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
}

/* Asserts that v[from .. from+n) is a permutation of 0..n-1 other than the
 * identity. */
static void expect_permutation(const vec *v, size_t from, int64_t n)
{
    unsigned char *seen = calloc((size_t)n, 1);
    assert_non_null(seen);
    size_t in_place = 0;
    for (int64_t k = 0; k < n; k++) {
        int64_t x = v->v[from + (size_t)k];
        if (x < 0 || x >= n)
            fail_msg("position %lld: index %lld out of 0..%lld", (long long)k,
                     (long long)x, (long long)(n - 1));
        if (seen[x])
            fail_msg("index %lld emitted twice", (long long)x);
        seen[x] = 1;
        in_place += x == k;
    }
    free(seen);
    if (in_place == (size_t)n)
        fail_msg("shuffle left %lld items in source order", (long long)n);
}

/* ---- tests -------------------------------------------------------- */

static void test_shuffle_permutation(void **state)
{
    (void)state;
    vec v = {0};
    order_of("range:n=1000 | shuffle:buffer=100", 0, &v, NULL);
    assert_int_equal(v.n, 1000);
    expect_permutation(&v, 0, 1000);
    /* a buffer of 100 cannot emit an item it has not read yet */
    for (size_t k = 0; k < v.n; k++)
        if (v.v[k] > (int64_t)k + 100)
            fail_msg("position %zu: index %lld is beyond a 100-item buffer", k,
                     (long long)v.v[k]);
    free(v.v);

    /* a buffer larger than the data */
    vec w = {0};
    order_of("range:n=50 | shuffle:buffer=1000", 0, &w, NULL);
    assert_int_equal(w.n, 50);
    expect_permutation(&w, 0, 50);
    free(w.v);
}

static void test_shuffle_bare_value(void **state)
{
    (void)state;
    vec a = {0}, b = {0};
    order_of("range:n=300 | shuffle:100", 9, &a, NULL);
    order_of("range:n=300|shuffle:buffer=100", 9, &b, NULL);
    assert_true(TU_ARRAY_EQUAL(&a, &b));
    free(a.v);
    free(b.v);
}

static void test_shuffle_epochs_differ(void **state)
{
    (void)state;
    vec idx = {0}, ep = {0};
    order_of("range:n=5000 | shuffle:buffer=500 | repeat:count=2", 0, &idx,
             &ep);
    assert_int_equal(idx.n, 10000);
    expect_permutation(&idx, 0, 5000);
    expect_permutation(&idx, 5000, 5000);
    for (size_t k = 0; k < idx.n; k++)
        if (ep.v[k] != (int64_t)(k / 5000))
            fail_msg("item %zu: epoch %lld, expected %zu", k,
                     (long long)ep.v[k], k / 5000);
    if (memcmp(idx.v, idx.v + 5000, 5000 * sizeof *idx.v) == 0)
        fail_msg("both epochs were shuffled into the same order");
    free(idx.v);
    free(ep.v);
}

static void test_shuffle_seeds(void **state)
{
    (void)state;
    vec a = {0}, b = {0}, c = {0};
    order_of("range:n=1000 | shuffle:buffer=64", 11, &a, NULL);
    order_of("range:n=1000 | shuffle:buffer=64", 11, &b, NULL);
    order_of("range:n=1000 | shuffle:buffer=64", 12, &c, NULL);
    assert_true(TU_ARRAY_EQUAL(&a, &b));
    assert_false(TU_ARRAY_EQUAL(&a, &c));
    expect_permutation(&c, 0, 1000);
    free(a.v);
    free(b.v);
    free(c.v);
}

/* ---- determinism across thread counts ----------------------------- */

typedef struct {
    atomic_long calls;
} map_state;

/* *out: a clone of `in` with the i64 scalar `name` = v added. */
static int with_i64(const ef_sample *in, ef_sample **out, const char *name,
                    int64_t v)
{
    ef_sample *s = ef_sample_clone(in);
    if (s == NULL)
        return EF_ENOMEM;
    int64_t shape[1] = {0};
    void *data = NULL;
    int rc = ef_sample_add_new(s, name, EF_I64, 0, shape, &data);
    if (rc != EF_OK) {
        ef_sample_free(s);
        return rc;
    }
    memcpy(data, &v, sizeof v);
    *out = s;
    return EF_OK;
}

/* Adds "noise": an i64 scalar drawn from the keyed generator. */
static int add_noise(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    map_state *ms = ef_map_ctx_user(ctx);
    atomic_fetch_add(&ms->calls, 1);
    return with_i64(in, out, "noise", (int64_t)(ef_map_ctx_random(ctx) >> 1));
}

/* Adds "copy": the sample's echo copy number, so that it survives batch. */
static int tag_copy(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    map_state *ms = ef_map_ctx_user(ctx);
    atomic_fetch_add(&ms->calls, 1);
    return with_i64(in, out, "copy", ef_sample_identity(in).echo_copy);
}

static const int64_t *i64_rows(const ef_sample *s, const char *name,
                               int64_t rows)
{
    ef_tensor t = tu_field(s, name);
    if (t.dtype != EF_I64 || t.ndim != 1 || t.shape[0] != rows)
        fail_msg("batch field %s: dtype %d ndim %d rows %lld, expected i64 "
                 "[%lld]",
                 name, (int)t.dtype, t.ndim, (long long)t.shape[0],
                 (long long)rows);
    return t.data;
}

/* range:n=2000 | shuffle:100 | MAP(noise, threads) | echo:1.5,shuffle=20 |
 * MAP(copy, threads) | batch:7, flattened into one vector. */
static vec run_det(uint64_t seed, int threads)
{
    map_state ms1, ms2;
    atomic_init(&ms1.calls, 0);
    atomic_init(&ms2.calls, 0);
    char opts[32];
    snprintf(opts, sizeof opts, "threads=%d", threads);

    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    tu_parse(p, "range:n=2000 | shuffle:100");
    if (ef_pipeline_add_map(p, add_noise, &ms1, opts) != EF_OK)
        fail_msg("add_map(%s): %s", opts, ef_pipeline_error(p));
    tu_parse(p, "echo:1.5,shuffle=20");
    if (ef_pipeline_add_map(p, tag_copy, &ms2, opts) != EF_OK)
        fail_msg("add_map(%s): %s", opts, ef_pipeline_error(p));
    tu_parse(p, " batch:7 ");
    assert_int_equal(ef_pipeline_stage_count(p), 6);

    vec out = {0};
    int64_t rows_total = 0, batches = 0;
    int64_t *noise_of = malloc(2000 * sizeof *noise_of);
    int *count = calloc(2000, sizeof *count);
    unsigned *copies = calloc(2000, sizeof *copies);
    assert_non_null(noise_of);
    assert_non_null(count);
    assert_non_null(copies);
    char what[64];
    snprintf(what, sizeof what, "seed %llu threads %d",
             (unsigned long long)seed, threads);
    for (ef_sample *s; (s = tu_next_or_end(p, what)) != NULL;) {
        ef_sample_id id = ef_sample_identity(s);
        int64_t rows = tu_field(s, "index").shape[0];
        assert_true(rows >= 1 && rows <= 7);
        const int64_t *ix = i64_rows(s, "index", rows);
        const int64_t *nz = i64_rows(s, "noise", rows);
        const int64_t *cp = i64_rows(s, "copy", rows);
        TU_PUSH(&out, id.index);
        TU_PUSH(&out, id.epoch);
        TU_PUSH(&out, id.echo_copy);
        TU_PUSH(&out, rows);
        for (int64_t r = 0; r < rows; r++) {
            TU_PUSH(&out, ix[r]);
            TU_PUSH(&out, nz[r]);
            TU_PUSH(&out, cp[r]);
            if (ix[r] < 0 || ix[r] >= 2000)
                fail_msg("index %lld out of range", (long long)ix[r]);
            if (cp[r] < 0 || cp[r] > 1)
                fail_msg("echo:1.5 gave copy %lld", (long long)cp[r]);
            /* echoed copies carry the noise of their original */
            if (count[ix[r]] == 0)
                noise_of[ix[r]] = nz[r];
            else if (noise_of[ix[r]] != nz[r])
                fail_msg("index %lld: noise differs between copies",
                         (long long)ix[r]);
            if (copies[ix[r]] & (1u << cp[r]))
                fail_msg("index %lld: copy %lld twice", (long long)ix[r],
                         (long long)cp[r]);
            copies[ix[r]] |= 1u << cp[r];
            count[ix[r]]++;
        }
        rows_total += rows;
        batches++;
        ef_sample_free(s);
    }
    /* every item once or twice, copies 0 (and 1) */
    int64_t distinct_noise = 0;
    for (int i = 0; i < 2000; i++) {
        if (copies[i] != 1u && copies[i] != 3u)
            fail_msg("index %d: copies mask %#x", i, copies[i]);
        if (i > 0 && noise_of[i] != noise_of[i - 1])
            distinct_noise++;
    }
    assert_true(distinct_noise > 1900);
    assert_true(rows_total > 2800 && rows_total < 3200);
    assert_int_equal(batches, (rows_total + 6) / 7);
    assert_int_equal(atomic_load(&ms1.calls), 2000);
    assert_int_equal(atomic_load(&ms2.calls), rows_total);
    ef_pipeline_destroy(p);
    free(noise_of);
    free(count);
    free(copies);
    return out;
}

static void test_determinism_threads(void **state)
{
    (void)state;
    vec t1 = run_det(1, 1);
    vec t4 = run_det(1, 4);
    vec t3 = run_det(1, 3);
    vec s2 = run_det(2, 4);
    if (!TU_ARRAY_EQUAL(&t1, &t4))
        fail_msg("seed 1: threads=1 and threads=4 gave different streams "
                 "(%zu vs %zu values)",
                 t1.n, t4.n);
    if (!TU_ARRAY_EQUAL(&t1, &t3))
        fail_msg("seed 1: threads=1 and threads=3 gave different streams");
    if (TU_ARRAY_EQUAL(&t1, &s2))
        fail_msg("seeds 1 and 2 gave the same stream");
    free(t1.v);
    free(t4.v);
    free(t3.v);
    free(s2.v);
}

/* The seed may be set before or after the stages are added: the stream is
 * the same either way. */
static void test_seed_after_parse(void **state)
{
    (void)state;
    const char *spec = "range:n=500 | shuffle:50 | echo:1.5,shuffle=10";
    int64_t first[1000], n1 = 0, n2 = 0; /* at most 500 x 2 */
    ef_pipeline *p = tu_pipeline(spec, 77);
    ef_sample *s;
    while (n1 < 1000 && ef_pipeline_next(p, &s) == EF_OK) {
        first[n1++] = tu_i64(s, "index");
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);

    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    tu_parse(p, spec);
    assert_int_equal(ef_pipeline_set_seed(p, 77), EF_OK);
    while (n2 < 1000 && ef_pipeline_next(p, &s) == EF_OK) {
        assert_int_equal(tu_i64(s, "index"), first[n2++]);
        ef_sample_free(s);
    }
    assert_int_equal(n1, n2);
    ef_pipeline_destroy(p);
}

/* ---- the warning of a slow fill ------------------------------------ */

typedef struct {
    ef_pipeline *p;
    int rc;
} first_pull;

static void *pull_first(void *arg)
{
    first_pull *f = arg;
    ef_sample *s = NULL;
    f->rc = ef_pipeline_next(f->p, &s);
    ef_sample_free(s);
    return NULL;
}

/* Starts the first pull of `spec` on a thread, waits (on the event, with
 * a generous bound for a loaded machine) for the pipeline's first
 * warning, stops the fill and checks the text holds `label` and `advice`.
 * A throttle at 50 items/s makes the fill of 1000 items take 20 s at
 * least, on any machine: the warning comes after about half a second. */
static void expect_fill_warning(const char *spec, const char *label,
                                const char *advice)
{
    first_pull f = {.p = tu_pipeline(spec, 1)};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, pull_first, &f), 0);
    double give_up = tu_now_s() + 60;
    while (ef_pipeline_warning(f.p, 0, NULL, 0) == 0 && tu_now_s() < give_up)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    ef_pipeline_stop(f.p);
    pthread_join(t, NULL);
    assert_int_equal(f.rc, EF_ECANCELED); /* stopped mid-fill */
    char text[512];
    assert_int_equal(ef_pipeline_warning(f.p, 0, text, sizeof text), 1);
    if (!strstr(text, label) || !strstr(text, advice) ||
        !strstr(text, "must read 1000 items before its first; the upstream "
                      "gives ") ||
        !strstr(text, " items/s, so the first item waits about "))
        fail_msg("%s: unexpected warning: %s", spec, text);
    /* only warning 0 exists; a small buffer takes a cut text */
    assert_int_equal(ef_pipeline_warning(f.p, 1, text, sizeof text), 1);
    assert_string_equal(text, "");
    assert_int_equal(ef_pipeline_warning(f.p, 0, text, 6), 1);
    assert_string_equal(text, "stage");
    ef_pipeline_destroy(f.p);
}

static void test_slow_fill_warns(void **state)
{
    (void)state;
    expect_fill_warning("range:n=5000 | throttle:rate=50 | shuffle:1000",
                        "stage 2 shuffle:buffer=1000 ",
                        ": use a smaller buffer, or place echo before it");
    /* the echo stage's own buffer: copies too, 100 items/s */
    expect_fill_warning("range:n=5000 | throttle:rate=50 | "
                        "echo:factor=2,shuffle=1000",
                        "stage 2 echo:shuffle=1000 ",
                        ": use a smaller "
                        "shuffle=");
}

/* Fills that take no time warn of nothing. */
static void test_fast_fill_is_quiet(void **state)
{
    (void)state;
    const char *spec = "range:n=3000 | shuffle:1000 | "
                       "echo:factor=2,shuffle=500 | batch:10 | repeat:count=2";
    ef_pipeline *p = tu_pipeline(spec, 1);
    assert_int_equal(tu_drain(p), 1200);
    char text[16] = "x";
    assert_int_equal(ef_pipeline_warning(p, 0, text, sizeof text), 0);
    assert_string_equal(text, "");
    assert_int_equal(ef_pipeline_warning(NULL, 0, text, sizeof text), 0);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_permutation),
        cmocka_unit_test(test_shuffle_bare_value),
        cmocka_unit_test(test_shuffle_epochs_differ),
        cmocka_unit_test(test_shuffle_seeds),
        cmocka_unit_test(test_seed_after_parse),
        cmocka_unit_test(test_determinism_threads),
        cmocka_unit_test(test_slow_fill_warns),
        cmocka_unit_test(test_fast_fill_is_quiet),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
