/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage: copy counts and numbering, consecutive copies, the
 * shuffle buffer, fractional factors, payload sharing, batch echoing,
 * statistics, seeds and epochs; the free list echoed headers come from. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

/* ---- helpers ------------------------------------------------------ */

typedef struct {
    int64_t index, epoch, copy, value; /* value: the `index` field */
} rec;

typedef TU_ARRAY(rec) stream;

/* TU_ARRAY_EQUAL compares bytes: a rec has no padding */
_Static_assert(sizeof(rec) == 4 * sizeof(int64_t), "rec has padding");

/* The whole stream of (identity, index field) of a scalar-sample spec. */
static stream record(const char *spec, uint64_t seed)
{
    stream st = {0};
    ef_pipeline *p = tu_pipeline(spec, seed);
    for (ef_sample *s; (s = tu_next_or_end(p, spec)) != NULL;) {
        ef_sample_id id = ef_sample_identity(s);
        rec r = {id.index, id.epoch, id.echo_copy, tu_i64(s, "index")};
        TU_PUSH(&st, r);
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
    return st;
}

/* Checks that every index 0..n-1 appears between lo and hi times, that its
 * copies are numbered 0..c-1 once each, and that identity matches the
 * `index` field. Returns the number of indices with more than lo copies. */
static long check_copies(const stream *st, int64_t n, int lo, int hi)
{
    int *count = calloc((size_t)n, sizeof *count);
    unsigned *mask = calloc((size_t)n, sizeof *mask);
    assert_non_null(count);
    assert_non_null(mask);
    for (size_t i = 0; i < st->n; i++) {
        const rec *r = &st->v[i];
        if (r->index < 0 || r->index >= n)
            fail_msg("item %zu: index %lld out of range", i,
                     (long long)r->index);
        assert_int_equal(r->value, r->index);
        if (r->copy < 0 || r->copy >= 31)
            fail_msg("item %zu: echo_copy %lld", i, (long long)r->copy);
        if (mask[r->index] & (1u << r->copy))
            fail_msg("index %lld: echo_copy %lld seen twice",
                     (long long)r->index, (long long)r->copy);
        mask[r->index] |= 1u << r->copy;
        count[r->index]++;
    }
    long more = 0;
    for (int64_t i = 0; i < n; i++) {
        if (count[i] < lo || count[i] > hi)
            fail_msg("index %lld appears %d times, expected %d..%d",
                     (long long)i, count[i], lo, hi);
        /* copies 0..count-1, no gaps */
        if (mask[i] != (1u << count[i]) - 1u)
            fail_msg("index %lld: copy numbers mask %#x for %d copies",
                     (long long)i, mask[i], count[i]);
        if (count[i] > lo)
            more++;
    }
    free(count);
    free(mask);
    return more;
}

/* ---- tests -------------------------------------------------------- */

static void test_echo3_consecutive(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=1000 | echo:3", 0);
    ef_sample *prev = NULL;
    for (int64_t k = 0; k < 3000; k++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        if (id.index != k / 3 || id.echo_copy != k % 3 || id.epoch != 0)
            fail_msg("item %lld: identity (%lld, epoch %lld, copy %d), "
                     "expected (%lld, 0, %lld)",
                     (long long)k, (long long)id.index, (long long)id.epoch,
                     id.echo_copy, (long long)(k / 3), (long long)(k % 3));
        assert_int_equal(tu_i64(s, "index"), k / 3);
        if (k % 3 != 0) {
            /* a copy shares the payload of the item before it */
            ef_tensor a = tu_field(prev, "index");
            ef_tensor b = tu_field(s, "index");
            assert_ptr_equal(a.data, b.data);
        }
        ef_sample_free(prev);
        prev = s;
    }
    ef_sample_free(prev);
    tu_expect_end(p);

    /* statistics */
    assert_int_equal(ef_pipeline_stage_count(p), 2);
    ef_stage_stats st = tu_stage(p, "echo");
    assert_int_equal(st.items_in, 1000);
    assert_int_equal(st.items_out, 3000);
    assert_true(fabs(tu_extra(&st, "fresh") - 1000.0) < 1e-9);
    assert_true(fabs(tu_extra(&st, "echoed") - 2000.0) < 1e-9);
    assert_true(fabs(tu_extra(&st, "effective_factor") - 3.0) < 1e-9);
    double unused;
    assert_int_equal(ef_stage_stats_extra(&st, "no_such_key", &unused), 0);
    ef_stage_stats rs = tu_stage(p, "range");
    assert_int_equal(rs.items_out, 1000);
    ef_pipeline_stats ps;
    assert_int_equal(ef_pipeline_stats_get(p, &ps), EF_OK);
    assert_int_equal(ps.items, 3000);
    ef_pipeline_destroy(p);
}

static void test_echo_factor_one_is_identity(void **state)
{
    (void)state;
    stream st = record("range:n=500 | echo:factor=1", 0);
    assert_int_equal(st.n, 500);
    for (size_t i = 0; i < st.n; i++) {
        assert_int_equal(st.v[i].index, (int64_t)i);
        assert_int_equal(st.v[i].copy, 0);
    }
    free(st.v);
}

static void test_echo_add_by_name(void **state)
{
    (void)state;
    /* the C builder and the bare value give the same as factor=2 */
    ef_pipeline *p = tu_pipeline("range:n=50", 0);
    assert_int_equal(ef_pipeline_add(p, "echo", "factor=2"), EF_OK);
    assert_int_equal(ef_pipeline_stage_count(p), 2);
    assert_int_equal(tu_drain(p), 100);
    ef_pipeline_destroy(p);
    stream a = record("range:n=50 | echo:2", 0);
    stream b = record("range:n=50|echo:factor=2.0", 0);
    assert_int_equal(a.n, 100);
    assert_true(TU_ARRAY_EQUAL(&a, &b));
    for (size_t i = 0; i < a.n; i++) {
        assert_int_equal(a.v[i].index, (int64_t)(i / 2));
        assert_int_equal(a.v[i].copy, (int64_t)(i % 2));
    }
    free(a.v);
    free(b.v);
}

static void test_echo3_shuffle(void **state)
{
    (void)state;
    stream st = record("range:n=1000 | echo:3,shuffle=100", 0);
    assert_int_equal(st.n, 3000);
    check_copies(&st, 1000, 3, 3);
    /* not the consecutive order, and copies are spread apart */
    long in_place = 0, adjacent_same = 0;
    for (size_t k = 0; k < st.n; k++) {
        if (st.v[k].index == (int64_t)(k / 3) &&
            st.v[k].copy == (int64_t)(k % 3))
            in_place++;
        if (k > 0 && st.v[k].index == st.v[k - 1].index)
            adjacent_same++;
    }
    if (in_place == 3000)
        fail_msg("echo:3,shuffle=100 gave the unshuffled order");
    if (adjacent_same >= 1000)
        fail_msg("echo:3,shuffle=100: %ld adjacent pairs share an index "
                 "(2000 when unshuffled)",
                 adjacent_same);
    free(st.v);

    ef_pipeline *p = tu_pipeline("range:n=1000 | echo:3,shuffle=100", 0);
    assert_int_equal(tu_drain(p), 3000);
    ef_stage_stats es = tu_stage(p, "echo");
    assert_int_equal(es.items_in, 1000);
    assert_int_equal(es.items_out, 3000);
    assert_true(fabs(tu_extra(&es, "fresh") - 1000.0) < 1e-9);
    assert_true(fabs(tu_extra(&es, "echoed") - 2000.0) < 1e-9);
    assert_true(fabs(tu_extra(&es, "effective_factor") - 3.0) < 1e-9);
    ef_pipeline_destroy(p);
}

static void test_echo_fractional_large(void **state)
{
    (void)state;
    const int64_t n = 100000;
    ef_pipeline *p = tu_pipeline("range:n=100000 | echo:1.5", 0);
    unsigned char *count = calloc((size_t)n, 1);
    assert_non_null(count);
    int64_t total = 0, last_index = -1, last_copy = -1;
    for (ef_sample *s; (s = tu_next_or_end(p, "echo:1.5")) != NULL;) {
        ef_sample_id id = ef_sample_identity(s);
        ef_sample_free(s);
        if (id.echo_copy == 0) {
            /* fresh items in source order */
            if (id.index != last_index + 1)
                fail_msg("item %lld: fresh index %lld after %lld",
                         (long long)total, (long long)id.index,
                         (long long)last_index);
        } else {
            /* a copy right after its original */
            if (id.echo_copy != 1 || id.index != last_index || last_copy != 0)
                fail_msg("item %lld: copy %d of index %lld after (%lld, copy "
                         "%lld)",
                         (long long)total, id.echo_copy, (long long)id.index,
                         (long long)last_index, (long long)last_copy);
        }
        count[id.index]++;
        last_index = id.index;
        last_copy = id.echo_copy;
        total++;
    }
    int64_t twice = 0;
    for (int64_t i = 0; i < n; i++) {
        if (count[i] < 1 || count[i] > 2)
            fail_msg("index %lld appeared %d times", (long long)i, count[i]);
        twice += count[i] == 2;
    }
    free(count);
    if (total < 148500 || total > 151500)
        fail_msg("echo:1.5 on 100000 items gave %lld items, expected "
                 "150000 +- 1%%",
                 (long long)total);
    assert_int_equal(total, n + twice);

    ef_stage_stats es = tu_stage(p, "echo");
    assert_int_equal(es.items_in, (uint64_t)n);
    assert_int_equal(es.items_out, (uint64_t)total);
    assert_true(fabs(tu_extra(&es, "fresh") - (double)n) < 1e-6);
    assert_true(fabs(tu_extra(&es, "echoed") - (double)twice) < 1e-6);
    assert_true(fabs(tu_extra(&es, "effective_factor") -
                     (double)total / (double)n) < 1e-6);
    ef_pipeline_destroy(p);
}

static void test_echo_fractional_shuffled(void **state)
{
    (void)state;
    stream st = record("range:n=2000 | echo:2.5,shuffle=30", 3);
    long more = check_copies(&st, 2000, 2, 3);
    assert_int_equal(st.n, 2000 * 2 + more);
    if (more < 800 || more > 1200)
        fail_msg("echo:2.5 gave a third copy to %ld of 2000 items", more);
    free(st.v);
}

static void test_echo_shares_payload_shuffled(void **state)
{
    (void)state;
    /* keep every sample alive so that addresses cannot be reused */
    enum { N = 200, F = 3 };
    ef_pipeline *p = tu_pipeline("range:n=200,bytes=16 | echo:3,shuffle=20", 0);
    ef_sample *all[N * F];
    const void *data_of[N];
    memset(data_of, 0, sizeof data_of);
    for (int k = 0; k < N * F; k++) {
        all[k] = tu_next(p);
        ef_sample_id id = ef_sample_identity(all[k]);
        assert_true(id.index >= 0 && id.index < N);
        ef_tensor t = tu_field(all[k], "data");
        assert_int_equal(t.dtype, EF_U8);
        assert_int_equal(t.ndim, 1);
        assert_int_equal(t.shape[0], 16);
        const unsigned char *d = t.data;
        for (int j = 0; j < 16; j++)
            assert_int_equal(d[j], (unsigned char)((id.index + j) & 0xff));
        if (data_of[id.index] == NULL)
            data_of[id.index] = t.data;
        else if (data_of[id.index] != t.data)
            fail_msg("copies of index %lld do not share the payload",
                     (long long)id.index);
    }
    tu_expect_end(p);
    for (int k = 0; k < N * F; k++)
        ef_sample_free(all[k]);
    ef_pipeline_destroy(p);
}

static void test_echo_after_batch(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10,bytes=8 | batch:4 | echo:2", 0);
    static const int64_t rows[3] = {4, 4, 2};
    for (int b = 0; b < 3; b++) {
        ef_sample *first = tu_next(p);
        ef_sample *second = tu_next(p);
        ef_sample_id i1 = ef_sample_identity(first);
        ef_sample_id i2 = ef_sample_identity(second);
        assert_int_equal(i1.echo_copy, 0);
        assert_int_equal(i2.echo_copy, 1);
        assert_int_equal(i1.index, i2.index);
        assert_int_equal(i1.epoch, i2.epoch);
        assert_int_equal(ef_sample_field_count(first),
                         ef_sample_field_count(second));

        ef_tensor d1 = tu_field(first, "data"), d2 = tu_field(second, "data");
        ef_tensor x1 = tu_field(first, "index"), x2 = tu_field(second, "index");
        assert_ptr_equal(d1.data, d2.data);
        assert_ptr_equal(x1.data, x2.data);
        assert_int_equal(d1.nbytes, d2.nbytes);
        assert_memory_equal(d1.data, d2.data, d1.nbytes);
        /* the batch itself is right: [rows, 8] u8 and [rows] i64 */
        assert_int_equal(d1.dtype, EF_U8);
        assert_int_equal(d1.ndim, 2);
        assert_int_equal(d1.shape[0], rows[b]);
        assert_int_equal(d1.shape[1], 8);
        assert_int_equal(x1.dtype, EF_I64);
        assert_int_equal(x1.ndim, 1);
        assert_int_equal(x1.shape[0], rows[b]);
        const int64_t *ix = x1.data;
        const unsigned char *px = d1.data;
        for (int r = 0; r < rows[b]; r++) {
            assert_int_equal(ix[r], b * 4 + r);
            for (int j = 0; j < 8; j++)
                assert_int_equal(px[r * 8 + j],
                                 (unsigned char)((b * 4 + r + j) & 0xff));
        }
        ef_sample_free(first);
        ef_sample_free(second);
    }
    tu_expect_end(p);
    ef_stage_stats es = tu_stage(p, "echo");
    assert_true(fabs(tu_extra(&es, "fresh") - 3.0) < 1e-9);
    assert_true(fabs(tu_extra(&es, "echoed") - 3.0) < 1e-9);
    ef_pipeline_destroy(p);
}

/* `fresh` of a batch counts its fresh examples; echoed copies of a batch
 * bring none. So over a pass the sum of `fresh` is the number of examples
 * read, wherever the echo stages stand and whatever their mode. */
static void test_echo_fresh_counted_once(void **state)
{
    (void)state;
    static const struct {
        const char *spec;
        int64_t examples;
    } cases[] = {
        {"range:n=100 | echo:2 | batch:10", 100},
        {"range:n=100 | batch:10 | echo:2", 100},
        {"range:n=95 | batch:10 | echo:3,shuffle=4", 95},
        {"range:n=100 | echo:2 | batch:10 | echo:3", 100},
        {"range:n=100 | echo:2,shuffle=16 | batch:7 | echo:2,shuffle=3", 100},
        {"range:n=100 | echo:1.5 | batch:10 | echo:2.5", 100},
        {"range:n=100 | batch:10 | echo:2.5,shuffle=5", 100},
        {"range:n=100 | batch:10 | echo:factor=auto,max=3", 100},
        {"range:n=100 | echo:factor=auto,max=3,shuffle=8 | batch:10 | "
         "echo:factor=auto,max=2,shuffle=2",
         100},
        {"range:n=100 | batch:10 | echo:factor=2,policy=rank", 100},
        {"range:n=60 | batch:6 | echo:2,shuffle=3 | repeat:count=2", 120},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ef_pipeline *p = tu_pipeline(cases[c].spec, 3);
        int64_t fresh = 0, batches = 0;
        for (ef_sample *s; (s = tu_next_or_end(p, cases[c].spec)) != NULL;) {
            ef_sample_id id = ef_sample_identity(s);
            if (id.echo_copy > 0 && id.fresh != 0)
                fail_msg("%s: echo %d of batch %lld says %d fresh",
                         cases[c].spec, id.echo_copy, (long long)id.index,
                         id.fresh);
            fresh += id.fresh;
            batches++;
            ef_sample_free(s);
        }
        if (fresh != cases[c].examples)
            fail_msg("%s: %lld fresh over %lld batches, expected %lld",
                     cases[c].spec, (long long)fresh, (long long)batches,
                     (long long)cases[c].examples);
        ef_pipeline_destroy(p);
    }
}

static void test_echo_seeds(void **state)
{
    (void)state;
    static const char *const specs[] = {"range:n=2000 | echo:1.5",
                                        "range:n=2000 | echo:3,shuffle=50"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        stream a = record(specs[i], 1);
        stream b = record(specs[i], 1);
        stream c = record(specs[i], 2);
        if (!TU_ARRAY_EQUAL(&a, &b))
            fail_msg("%s: the same seed gave different streams", specs[i]);
        if (TU_ARRAY_EQUAL(&a, &c))
            fail_msg("%s: seeds 1 and 2 gave the same stream", specs[i]);
        free(a.v);
        free(b.v);
        free(c.v);
    }
}

static void test_echo_with_repeat(void **state)
{
    (void)state;
    /* echo inside a repeat: consecutive pairs, epochs 0 then 1 */
    stream st = record("range:n=100 | echo:2 | repeat:count=2", 0);
    assert_int_equal(st.n, 400);
    for (size_t k = 0; k < st.n; k++) {
        assert_int_equal(st.v[k].epoch, (int64_t)(k / 200));
        assert_int_equal(st.v[k].index, (int64_t)((k % 200) / 2));
        assert_int_equal(st.v[k].copy, (int64_t)(k % 2));
    }
    free(st.v);

    /* a pass that ends mid-copies (take under repeat): the next pass
     * starts with its own fresh items, not the last pass's copies */
    st = record("range:n=10 | echo:3 | take:4 | repeat:count=2", 0);
    assert_int_equal(st.n, 8);
    for (size_t k = 0; k < st.n; k++) {
        assert_int_equal(st.v[k].epoch, (int64_t)(k / 4));
        assert_int_equal(st.v[k].index, (k % 4) < 3 ? 0 : 1);
        assert_int_equal(st.v[k].copy, (int64_t)((k % 4) % 3));
    }
    free(st.v);
    /* the same through the shuffle buffer */
    st = record("range:n=10 | echo:3,shuffle=4 | take:4 | repeat:count=2", 0);
    assert_int_equal(st.n, 8);
    for (size_t k = 4; k < st.n; k++)
        assert_int_equal(st.v[k].epoch, 1);
    free(st.v);

    /* fractional decisions are keyed by epoch: a new pass doubles
     * different items */
    st = record("range:n=1000 | echo:1.5 | repeat:count=2", 5);
    unsigned char twice[2][1000];
    memset(twice, 0, sizeof twice);
    long per_epoch[2] = {0, 0};
    for (size_t k = 0; k < st.n; k++) {
        const rec *r = &st.v[k];
        assert_true(r->epoch == 0 || r->epoch == 1);
        assert_true(r->index >= 0 && r->index < 1000);
        per_epoch[r->epoch]++;
        if (r->copy == 1)
            twice[r->epoch][r->index] = 1;
        if (k > 0 && st.v[k - 1].epoch > r->epoch)
            fail_msg("epoch went back at item %zu", k);
    }
    for (int e = 0; e < 2; e++)
        if (per_epoch[e] < 1400 || per_epoch[e] > 1600)
            fail_msg("epoch %d: %ld items from echo:1.5 on 1000", e,
                     per_epoch[e]);
    if (memcmp(twice[0], twice[1], 1000) == 0)
        fail_msg("echo:1.5 doubled the same items in epochs 0 and 1");
    free(st.v);
}

/* ---- the header free list ----------------------------------------- */

/* In steady state an echoed copy's header is one a consumer gave back:
 * the copies of an item allocate nothing. */
static void test_echo_copies_allocate_nothing(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=1000,bytes=16 | echo:4", 0);
    for (int item = 0; item < 100; item++) {
        ef_sample *fresh = tu_next(p); /* the source allocates for it */
        assert_int_equal(ef_sample_identity(fresh).echo_copy, 0);
        ef_sample_free(fresh);
        if (item >= 50) /* the free list has its working set */
            ef__alloc_fail_after(1);
        for (int k = 1; k < 4; k++) {
            ef_sample *copy = tu_next(p);
            assert_int_equal(ef_sample_identity(copy).index, item);
            assert_int_equal(ef_sample_identity(copy).echo_copy, k);
            assert_int_equal(tu_field(copy, "data").nbytes, 16);
            ef_sample_free(copy);
        }
        ef__alloc_fail_after(0);
    }
    ef_pipeline_destroy(p);
}

/* A fixed factor takes the copies' buffer references ahead, in one add;
 * each copy and the stage's end account for every one of them. */
static void test_echo_references_taken_ahead(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=10,bytes=16 | echo:5", 0);
    ef_sample *fresh = tu_next(p);
    ef_buffer *b = tu_field(fresh, "data").buffer;
    /* the fresh item's, the held header's and three owed to copies 1-3 */
    assert_int_equal(ef_buffer_refcount(b), 5);
    ef_sample *c1 = tu_next(p);
    assert_int_equal(ef_sample_identity(c1).echo_copy, 1);
    assert_ptr_equal(tu_field(c1, "data").buffer, b);
    assert_int_equal(ef_buffer_refcount(b), 5); /* c1 took an owed one */
    ef_sample_free(c1);
    assert_int_equal(ef_buffer_refcount(b), 4);
    /* ended with copies due: the owed references go with the stage */
    ef_pipeline_destroy(p);
    assert_int_equal(ef_buffer_refcount(b), 1);
    ef_sample_free(fresh);

    /* and a whole item's copies leave only what the consumer holds */
    p = tu_pipeline("range:n=10,bytes=16 | echo:4", 0);
    ef_sample *all[4];
    for (int k = 0; k < 4; k++)
        all[k] = tu_next(p);
    b = tu_field(all[0], "data").buffer;
    assert_int_equal(ef_buffer_refcount(b), 4);
    for (int k = 0; k < 4; k++)
        ef_sample_free(all[k]);
    ef_pipeline_destroy(p);
}

typedef struct {
    ef_sample **items;
    size_t n;
} held_items;

/* Checks each held copy's payload and frees it. */
static void *check_and_free(void *arg)
{
    held_items *h = arg;
    for (size_t k = 0; k < h->n; k++) {
        ef_sample_id id = ef_sample_identity(h->items[k]);
        const unsigned char *d = tu_field(h->items[k], "data").data;
        for (int j = 0; j < 16; j++)
            assert_int_equal(d[j], (unsigned char)((id.index + j) & 0xff));
        ef_sample_free(h->items[k]);
    }
    return NULL;
}

/* Copies held past the pipeline's end stay whole and are freed later, on
 * this thread or another (ASan: no leak, no use after free; TSan: no
 * race on the free list). */
static void run_outliving(const char *spec, int other_thread)
{
    enum { N = 600 };
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *all[N];
    held_items h = {all, 0};
    ef_sample *s;
    for (long k = 0; h.n < N && (s = tu_next_or_end(p, spec)) != NULL; k++) {
        if (k % 3 == 0) /* some go back while the stage runs */
            ef_sample_free(s);
        else
            all[h.n++] = s;
    }
    assert_true(h.n > 100);
    ef_pipeline_destroy(p);
    if (other_thread) {
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, check_and_free, &h), 0);
        pthread_join(t, NULL);
    } else {
        check_and_free(&h);
    }
}

static void test_echo_copies_outlive_pipeline(void **state)
{
    (void)state;
    run_outliving("range:n=300,bytes=16 | echo:3", 0);
    run_outliving("range:n=300,bytes=16 | echo:3,shuffle=50", 1);
    run_outliving("range:n=2000,bytes=16 | echo:factor=auto,max=4", 1);
    run_outliving("range:n=300,bytes=16 | echo:3 | prefetch:8", 1);
}

/* The upstream gives far faster than a throttled downstream takes: R is
 * near 0, and a factor of 4 only makes echo the bottleneck. Once R's
 * window has filled (2 s), the stage says so, once. */
static void test_factor_above_r_warns(void **state)
{
    (void)state;
    ef_pipeline *p =
        tu_pipeline("range:n=2000 | echo:factor=4 | throttle:rate=2000", 1);
    assert_int_equal(tu_drain(p), 8000);
    char text[512];
    assert_int_equal(ef_pipeline_warning(p, 0, text, sizeof text), 1);
    if (!strstr(text, "stage 1 echo:factor=4 is the bottleneck: the factor "
                      "exceeds the measured R = ") ||
        !strstr(text, "or factor=auto"))
        fail_msg("unexpected warning: %s", text);
    ef_pipeline_destroy(p);
    /* an upstream slower than the downstream: a factor below R is quiet */
    p = tu_pipeline("range:n=3000 | throttle:rate=1000 | echo:factor=2", 1);
    assert_int_equal(tu_drain(p), 6000);
    assert_int_equal(ef_pipeline_warning(p, 0, NULL, 0), 0);
    ef_pipeline_destroy(p);
}

static double echo_extra(const ef_pipeline *p, const char *name)
{
    ef_stage_stats st = tu_stage(p, "echo");
    double v = -1;
    assert_true(ef_stage_stats_extra(&st, name, &v));
    return v;
}

/* Nothing threaded before a fixed factor, and an upstream that proves
 * slow: the stage reads it ahead on a thread of its own while the
 * downstream works on the copies, says so in its statistics, and hands
 * out the same items in the same order. (Whether a fast upstream keeps
 * the direct pull depends on the machine's speed: not asserted.) */
static void test_fixed_factor_reads_a_slow_upstream_ahead(void **state)
{
    (void)state;
    const char *spec = "range:n=200 | throttle:rate=10000 | echo:factor=3";
    ef_pipeline *p = tu_pipeline(spec, 1);
    /* 17 fresh items: the stage decides after its 16th */
    for (int i = 0; i < 17 * 3; i++)
        ef_sample_free(tu_next_or_end(p, spec));
    assert_true(echo_extra(p, "reads_ahead") == 1);
    struct timespec pause = {0, 200 * 1000 * 1000};
    nanosleep(&pause, NULL); /* the downstream busy: 2,000 items' time */
    uint64_t read = tu_stage(p, "throttle").items_out;
    if (read < 17 + 8)
        fail_msg("%llu items read upstream while the downstream was busy "
                 "with the 17th's copies; expected the stage to read ahead",
                 (unsigned long long)read);
    ef_pipeline_destroy(p);
    stream slow = record(spec, 1);
    stream fast = record("range:n=200 | echo:factor=3", 1);
    assert_int_equal(slow.n, 600);
    assert_true(TU_ARRAY_EQUAL(&slow, &fast));
    free(slow.v);
    free(fast.v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo3_consecutive),
        cmocka_unit_test(test_echo_factor_one_is_identity),
        cmocka_unit_test(test_echo_add_by_name),
        cmocka_unit_test(test_echo3_shuffle),
        cmocka_unit_test(test_echo_fractional_large),
        cmocka_unit_test(test_echo_fractional_shuffled),
        cmocka_unit_test(test_echo_shares_payload_shuffled),
        cmocka_unit_test(test_echo_after_batch),
        cmocka_unit_test(test_echo_fresh_counted_once),
        cmocka_unit_test(test_echo_seeds),
        cmocka_unit_test(test_echo_with_repeat),
        cmocka_unit_test(test_echo_copies_allocate_nothing),
        cmocka_unit_test(test_echo_references_taken_ahead),
        cmocka_unit_test(test_echo_copies_outlive_pipeline),
        cmocka_unit_test(test_factor_above_r_warns),
        cmocka_unit_test(test_fixed_factor_reads_a_slow_upstream_ahead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
