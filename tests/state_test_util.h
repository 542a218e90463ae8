/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the checkpoint tests (test_state.c, test_state_sources.c):
 * what a consumer saw, pulling, saving, comparing. Include after
 * ef_test_util.h. */
#ifndef EF_STATE_TEST_UTIL_H
#define EF_STATE_TEST_UTIL_H

#include "ef_test_util.h"

/* An item as the consumer sees it: identity and a hash of every field. */
typedef struct {
    ef_sample_id id;
    uint64_t hash;
} tu_seen;

static inline uint64_t tu_hash_sample(const ef_sample *s)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ef_sample_field_count(s); i++) {
        ef_tensor t;
        assert_int_equal(ef_sample_field(s, i, &t), EF_OK);
        const unsigned char *p = t.data;
        for (size_t j = 0; j < t.nbytes; j++)
            h = (h ^ p[j]) * 1099511628211ull;
        for (int d = 0; d < t.ndim; d++)
            h = (h ^ (uint64_t)t.shape[d]) * 1099511628211ull;
        for (const char *c = t.name; *c; c++)
            h = (h ^ (unsigned char)*c) * 1099511628211ull;
    }
    return h;
}

/* Pulls up to max items into out; returns how many (fewer at the end).
 * `what` names the pipeline in a failure. */
static inline size_t tu_pull_seen(ef_pipeline *p, tu_seen *out, size_t max,
                                  const char *what)
{
    size_t n = 0;
    while (n < max) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_END)
            break;
        if (rc != EF_OK)
            fail_msg("%s: next after %zu = %s: %s", what, n,
                     ef_status_name(rc), ef_pipeline_error(p));
        out[n].id = ef_sample_identity(s);
        out[n].hash = tu_hash_sample(s);
        ef_sample_free(s);
        n++;
    }
    return n;
}

/* The state of p, asked for its size first (the caller frees it). */
static inline void *tu_save(ef_pipeline *p, size_t *size)
{
    int rc = ef_pipeline_save_state(p, NULL, 0, size);
    if (rc != EF_OK)
        fail_msg("save (size) = %s: %s", ef_status_name(rc),
                 ef_pipeline_error(p));
    void *buf = malloc(*size);
    assert_non_null(buf);
    rc = ef_pipeline_save_state(p, buf, *size, size);
    if (rc != EF_OK)
        fail_msg("save = %s: %s", ef_status_name(rc), ef_pipeline_error(p));
    return buf;
}

/* b[0..n) must equal a[0..n): a run resumed after item `from`. */
static inline void tu_expect_same(const tu_seen *a, const tu_seen *b,
                                  size_t n, size_t from, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i].id, &b[i].id, sizeof a[i].id) != 0 ||
            a[i].hash != b[i].hash)
            fail_msg("%s: resumed at %zu, item %zu differs (%s): index "
                     "%lld epoch %lld copy %d, expected index %lld epoch "
                     "%lld copy %d",
                     what, from, from + i,
                     a[i].hash != b[i].hash ? "its bytes" : "its identity",
                     (long long)b[i].id.index, (long long)b[i].id.epoch,
                     b[i].id.echo_copy, (long long)a[i].id.index,
                     (long long)a[i].id.epoch, a[i].id.echo_copy);
}

/* Builds the pipeline of `spec` (arg: the caller's settings). */
typedef ef_pipeline *(*tu_make_fn)(const char *spec, const void *arg);

/* Runs `spec` through (fewer than max items), then for each cut k saves
 * after k items, restores into a new pipeline of `restore_spec` (which may
 * differ in speed settings only) and checks the rest against the whole
 * run. cuts NULL: ncuts evenly spaced, and the end. Returns the items of
 * the whole run. */
static inline size_t tu_check_resume(tu_make_fn make, const void *arg,
                                     const char *spec,
                                     const char *restore_spec,
                                     const size_t *cuts, size_t ncuts,
                                     size_t max)
{
    tu_seen *all = malloc(max * sizeof *all), *rest = malloc(max * sizeof *rest);
    assert_non_null(all);
    assert_non_null(rest);
    ef_pipeline *p = make(spec, arg);
    size_t total = tu_pull_seen(p, all, max, spec);
    ef_pipeline_destroy(p);
    if (total == 0 || total >= max)
        fail_msg("%s: %zu items, expected 1 to %zu", spec, total, max - 1);
    size_t step = ncuts && total / ncuts ? total / ncuts : 1;
    for (size_t c = 0; c < (cuts ? ncuts : ncuts + 1); c++) {
        size_t k = cuts ? cuts[c] : c * step;
        if (k > total || (!cuts && c == ncuts))
            k = total;
        p = make(spec, arg);
        assert_int_equal(tu_pull_seen(p, rest, k, spec), k);
        tu_expect_same(all, rest, k, 0, spec);
        size_t size;
        void *state = tu_save(p, &size);
        ef_pipeline_destroy(p);
        ef_pipeline *q = make(restore_spec, arg);
        int rc = ef_pipeline_restore_state(q, state, size);
        if (rc != EF_OK)
            fail_msg("%s: restore at %zu = %s: %s", spec, k,
                     ef_status_name(rc), ef_pipeline_error(q));
        size_t n = tu_pull_seen(q, rest, max, spec);
        if (n != total - k)
            fail_msg("%s: resumed at %zu: %zu items, expected %zu", spec, k, n,
                     total - k);
        tu_expect_same(all + k, rest, n, k, spec);
        ef_pipeline_destroy(q);
        free(state);
    }
    free(all);
    free(rest);
    return total;
}

#endif
