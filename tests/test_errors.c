/* SPDX-License-Identifier: Apache-2.0 */
/* Failures and their messages: map callbacks that fail, IDX files that are
 * truncated, mismatched, malformed or missing, and bad pipeline specs. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

/* ---- map callbacks that fail -------------------------------------- */

typedef struct {
    int64_t fail_at;
    int status;       /* what to return at fail_at */
    int with_message; /* through ef_map_ctx_fail */
} fail_cfg;

static int failing_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const fail_cfg *cfg = ef_map_ctx_user(ctx);
    int64_t index = ef_sample_identity(in).index;
    if (index == cfg->fail_at) {
        if (cfg->with_message)
            return ef_map_ctx_fail(ctx, cfg->status, "bad item %d", (int)index);
        return cfg->status;
    }
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

/* before | MAP(threads) | after, failing at item k: exactly k items in
 * order, then the error, then the same error again. */
static void run_failing(const char *before, const char *after, int64_t k,
                        int threads, int status, int with_message)
{
    fail_cfg cfg = {k, status, with_message};
    char opts[48];
    snprintf(opts, sizeof opts, "threads=%d,ordered=true", threads);
    ef_pipeline *p = tu_pipeline(before, 0);
    if (ef_pipeline_add_map(p, failing_map, &cfg, opts) != EF_OK)
        fail_msg("add_map(%s): %s", opts, ef_pipeline_error(p));
    if (after)
        tu_parse(p, after);
    for (int64_t i = 0; i < k; i++) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc != EF_OK)
            fail_msg("k=%lld threads=%d: item %lld gave %s (%s); expected "
                     "the %lld items before the failing one",
                     (long long)k, threads, (long long)i, ef_status_name(rc),
                     ef_pipeline_error(p), (long long)k);
        ef_sample_id id = ef_sample_identity(s);
        if (id.index != i)
            fail_msg("k=%lld threads=%d: item %lld has index %lld",
                     (long long)k, threads, (long long)i, (long long)id.index);
        ef_sample_free(s);
    }
    char want[32];
    snprintf(want, sizeof want, "bad item %d", (int)k);
    for (int again = 0; again < 3; again++) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_sample_id id = ef_sample_identity(s);
            ef_sample_free(s);
            fail_msg("k=%lld threads=%d: got item %lld where the failure "
                     "was expected (call %d)",
                     (long long)k, threads, (long long)id.index, again + 1);
        }
        if (rc != status)
            fail_msg("k=%lld threads=%d: next = %s (call %d), expected %s; "
                     "message: %s",
                     (long long)k, threads, ef_status_name(rc), again + 1,
                     ef_status_name(status), ef_pipeline_error(p));
        const char *msg = ef_pipeline_error(p);
        assert_non_null(msg);
        if (with_message && strstr(msg, want) == NULL)
            fail_msg("k=%lld threads=%d: error message \"%s\" lacks \"%s\"",
                     (long long)k, threads, msg, want);
        if (!with_message && msg[0] == '\0')
            fail_msg("k=%lld threads=%d: empty error message", (long long)k,
                     threads);
    }
    ef_pipeline_destroy(p);
}

static void test_map_failure_ordered(void **state)
{
    (void)state;
    static const int64_t ks[] = {0, 1, 57};
    static const int threads[] = {1, 4};
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 2; b++)
            run_failing("range:n=200", NULL, ks[a], threads[b], EF_ECALLBACK,
                        1);
}

static void test_map_failure_through_queues(void **state)
{
    (void)state;
    /* the failure travels through prefetch queues in order */
    run_failing("range:n=300 | prefetch:depth=4", "prefetch:depth=3", 57, 4,
                EF_ECALLBACK, 1);
    run_failing("range:n=300 | prefetch:depth=4", "prefetch:depth=3", 0, 1,
                EF_ECALLBACK, 1);
}

static void test_map_failure_unordered(void **state)
{
    (void)state;
    /* unordered: some items (never the failing one, none twice), then the
     * error, sticky */
    for (int r = 0; r < 3; r++) {
        fail_cfg cfg = {57, EF_ECALLBACK, 1};
        ef_pipeline *p = tu_pipeline("range:n=200", 0);
        assert_int_equal(ef_pipeline_add_map(p, failing_map, &cfg,
                                             "threads=4,ordered=false"),
                         EF_OK);
        unsigned char seen[200];
        memset(seen, 0, sizeof seen);
        int rc, n = 0;
        for (;;) {
            ef_sample *s = NULL;
            rc = ef_pipeline_next(p, &s);
            if (rc != EF_OK)
                break;
            int64_t ix = ef_sample_identity(s).index;
            ef_sample_free(s);
            assert_true(ix >= 0 && ix < 200 && ix != 57);
            assert_int_equal(seen[ix], 0);
            seen[ix] = 1;
            n++;
        }
        if (rc != EF_ECALLBACK)
            fail_msg("unordered: next = %s after %d items: %s",
                     ef_status_name(rc), n, ef_pipeline_error(p));
        assert_non_null(strstr(ef_pipeline_error(p), "bad item 57"));
        ef_sample *s = NULL;
        assert_int_equal(ef_pipeline_next(p, &s), EF_ECALLBACK);
        ef_pipeline_destroy(p);
    }
}

static void test_map_failure_plain_status(void **state)
{
    (void)state;
    /* a bare negative status, no message: the pipeline still fails with
     * that status and some message */
    run_failing("range:n=100", NULL, 10, 1, EF_ECALLBACK, 0);
    run_failing("range:n=100", NULL, 10, 4, EF_ECALLBACK, 0);
    run_failing("range:n=100", NULL, 3, 4, EF_EFORMAT, 1);
}

/* ---- on_error=skip ------------------------------------------------ */

/* Fails every item whose index is 3 mod 7 with `status`. */
static int sevens_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const int *status = ef_map_ctx_user(ctx);
    int64_t index = ef_sample_identity(in).index;
    if (index % 7 == 3)
        return ef_map_ctx_fail(ctx, *status, "bad item %d", (int)index);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

static ef_pipeline *skipping_pipeline(int n, const char *map_opts, int *status)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    char spec[32];
    snprintf(spec, sizeof spec, "range:n=%d", n);
    tu_parse(p, spec);
    if (ef_pipeline_add_map(p, sevens_map, status, map_opts) != EF_OK)
        fail_msg("add_map(%s): %s", map_opts, ef_pipeline_error(p));
    return p;
}

static void test_skip_drops_and_counts(void **state)
{
    (void)state;
    static const char *opts[] = {"threads=1", "threads=4,ordered=true",
                                 "threads=4,ordered=false"};
    for (size_t k = 0; k < 3; k++) {
        int status = EF_EFORMAT;
        ef_pipeline *p = skipping_pipeline(200, opts[k], &status);
        unsigned char seen[200];
        memset(seen, 0, sizeof seen);
        int64_t last = -1, n = 0;
        ef_sample *s;
        int rc;
        while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
            int64_t ix = ef_sample_identity(s).index;
            ef_sample_free(s);
            assert_true(ix >= 0 && ix < 200 && ix % 7 != 3 && !seen[ix]);
            if (k < 2) /* ordered: in source order */
                assert_true(ix > last);
            last = ix;
            seen[ix] = 1;
            n++;
        }
        if (rc != EF_END)
            fail_msg("%s: next = %s: %s", opts[k], ef_status_name(rc),
                     ef_pipeline_error(p));
        int64_t bad = (200 + 3) / 7; /* 3, 10, ..., 199 */
        assert_int_equal(n, 200 - bad);
        char why[256];
        assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), bad);
        assert_non_null(strstr(why, "bad item"));
        assert_non_null(strstr(why, "map: item"));
        /* each of the first EF_SKIPS_KEPT is named, not only the first */
        int named = 0;
        for (uint64_t i = 0; i < EF_SKIPS_KEPT + 1; i++) {
            char one[256];
            assert_int_equal(ef_pipeline_skip(p, i, one, sizeof one), bad);
            named += one[0] != 0;
            char want[32]; /* in source order with one thread */
            snprintf(want, sizeof want, "bad item %d", 3 + 7 * (int)i);
            if (i < EF_SKIPS_KEPT && !strstr(one, k == 0 ? want : "bad item"))
                fail_msg("skip %llu: '%s'", (unsigned long long)i, one);
        }
        assert_int_equal(named, EF_SKIPS_KEPT);
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(p, &ps);
        assert_int_equal(ps.skipped, bad);
        ef_stage_stats st;
        assert_int_equal(ef_pipeline_stage_stats(p, 1, &st), EF_OK);
        assert_int_equal(st.skipped, bad);
        ef_pipeline_destroy(p);
    }
}

static void test_skip_leaves_other_errors_fatal(void **state)
{
    (void)state;
    /* out of memory is not about the data: it fails even under skip */
    int status = EF_ENOMEM;
    ef_pipeline *p = skipping_pipeline(20, "threads=2", &status);
    ef_sample *s;
    int rc;
    int n = 0;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_sample_free(s);
        n++;
    }
    assert_int_equal(rc, EF_ENOMEM);
    assert_int_equal(n, 3);
    assert_non_null(strstr(ef_pipeline_error(p), "bad item 3"));
    assert_int_equal(ef_pipeline_skipped(p, NULL, 0), 0);
    ef_pipeline_destroy(p);
}

static void test_on_error_arguments(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=3", 0);
    assert_int_equal(ef_pipeline_set_on_error(p, (ef_on_error)7), EF_EINVAL);
    assert_int_equal(ef_pipeline_set_on_error(NULL, EF_ON_ERROR_SKIP),
                     EF_EINVAL);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_ESTATE);
    char why[8] = "x";
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 0);
    assert_string_equal(why, "");
    ef_pipeline_destroy(p);
}

/* ---- shard=I/N ------------------------------------------------------ */

static void test_range_shards_partition(void **state)
{
    (void)state;
    unsigned char seen[101];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < 4; i++) {
        char spec[48];
        snprintf(spec, sizeof spec, "range:n=101,shard=%d/4", i);
        ef_pipeline *p = tu_pipeline(spec, 0);
        ef_sample *s;
        while (ef_pipeline_next(p, &s) == EF_OK) {
            int64_t ix = ef_sample_identity(s).index;
            ef_sample_free(s);
            assert_true(ix >= 0 && ix < 101 && ix % 4 == i && !seen[ix]);
            seen[ix] = 1;
        }
        ef_pipeline_destroy(p);
    }
    for (int ix = 0; ix < 101; ix++)
        assert_int_equal(seen[ix], 1);
}

/* ---- IDX fixtures ------------------------------------------------- */

static size_t put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
    return 4;
}

/* A u8 IDX file: dims[0] items of dims[1..] each, pixel = item*10 + j;
 * `keep` bytes of the payload (all when -1), magic overridable. */
static void write_idx(const char *name, int ndim, const uint32_t *dims,
                      long keep, uint32_t magic)
{
    unsigned char buf[4096];
    size_t n = 0;
    n += put_be32(buf + n, magic ? magic : (0x0800u | (uint32_t)ndim));
    size_t items = 1;
    for (int d = 0; d < ndim; d++) {
        n += put_be32(buf + n, dims[d]);
        items *= dims[d];
    }
    size_t per = ndim > 1 ? items / dims[0] : 1;
    for (size_t i = 0; i < items; i++) {
        size_t item = i / per, j = i % per;
        buf[n++] = (unsigned char)(ndim > 1 ? item * 10 + j : item);
    }
    size_t header = 4 + 4 * (size_t)ndim;
    if (keep >= 0)
        n = header + (size_t)keep;
    assert_true(n <= sizeof buf);
    tu_write_file(tu_at(name), buf, n);
}

static int fixture_setup(void **state)
{
    (void)state;
    if (tu_dir_create("ef_idx") != 0)
        return -1;
    uint32_t img[3] = {5, 2, 3}, lab[1] = {5}, vec4[2] = {3, 4};
    uint32_t many[3] = {13, 2, 3}, few[1] = {11};
    write_idx("ok-images", 3, img, -1, 0);
    write_idx("ok-labels", 1, lab, -1, 0);
    write_idx("vec-images", 2, vec4, -1, 0);
    write_idx("trunc-images", 3, img, 20, 0); /* 30 bytes due */
    write_idx("many-images", 3, many, -1, 0);
    write_idx("few-labels", 1, few, -1, 0);
    write_idx("magic-images", 3, img, -1, 0x12345678u);
    write_idx("magic-labels", 1, lab, -1, 0x00000803u);
    tu_write_file(tu_at("empty-images"), NULL, 0);
    /* a header cut in the middle of the dimensions */
    static const unsigned char head[6] = {0, 0, 8, 3, 0, 0};
    tu_write_file(tu_at("head-images"), head, sizeof head);
    return 0;
}

static int fixture_teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static void test_idx_valid(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024];
    snprintf(spec, sizeof spec, "idx:images=%s/ok-images,labels=%s/ok-labels",
             dir, dir);
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < 5; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i);
        assert_int_equal(id.epoch, 0);
        assert_int_equal(id.echo_copy, 0);
        ef_tensor im = tu_field(s, "image");
        assert_int_equal(im.dtype, EF_U8);
        assert_int_equal(im.ndim, 2);
        assert_int_equal(im.shape[0], 2);
        assert_int_equal(im.shape[1], 3);
        assert_int_equal(im.nbytes, 6);
        const unsigned char *px = im.data;
        for (int j = 0; j < 6; j++)
            assert_int_equal(px[j], i * 10 + j);
        assert_int_equal(tu_i64(s, "label"), i);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* images alone: no label field */
    snprintf(spec, sizeof spec, "idx:%s/ok-images", dir);
    p = tu_pipeline(spec, 0);
    for (int i = 0; i < 5; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor t;
        assert_int_equal(ef_sample_get(s, "label", &t), EF_EINVAL);
        assert_int_equal(((const unsigned char *)tu_field(s, "image").data)[5],
                         i * 10 + 5);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* through the C builder, and batched */
    char opts[1024];
    snprintf(opts, sizeof opts, "images=%s/ok-images,labels=%s/ok-labels", dir,
             dir);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    if (ef_pipeline_add(p, "idx", opts) != EF_OK)
        fail_msg("ef_pipeline_add(idx, %s): %s", opts, ef_pipeline_error(p));
    tu_parse(p, "batch:size=2");
    static const int64_t rows[3] = {2, 2, 1};
    for (int b = 0; b < 3; b++) {
        ef_sample *s = tu_next(p);
        ef_tensor im = tu_field(s, "image"), lb = tu_field(s, "label");
        assert_int_equal(im.ndim, 3);
        assert_int_equal(im.shape[0], rows[b]);
        assert_int_equal(im.shape[1], 2);
        assert_int_equal(im.shape[2], 3);
        assert_int_equal(lb.ndim, 1);
        assert_int_equal(lb.dtype, EF_I64);
        assert_int_equal(lb.shape[0], rows[b]);
        for (int r = 0; r < rows[b]; r++) {
            assert_int_equal(((const int64_t *)lb.data)[r], b * 2 + r);
            assert_int_equal(((const unsigned char *)im.data)[r * 6 + 4],
                             (b * 2 + r) * 10 + 4);
        }
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* a 2-D IDX file: each item is a vector */
    snprintf(spec, sizeof spec, "idx:images=%s/vec-images", dir);
    p = tu_pipeline(spec, 0);
    for (int i = 0; i < 3; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor im = tu_field(s, "image");
        assert_int_equal(im.ndim, 1);
        assert_int_equal(im.shape[0], 4);
        assert_int_equal(((const unsigned char *)im.data)[3], i * 10 + 3);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* Builds `spec`; the failure must come from parse or from the first next.
 * Copies the message into msg. Returns the status. */
static int first_failure(const char *spec, char *msg, size_t cap)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    int rc = ef_pipeline_parse(p, spec);
    if (rc != EF_OK) {
        assert_int_equal(ef_pipeline_stage_count(p), 0);
    } else {
        ef_sample *s = NULL;
        rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_sample_free(s);
            ef_pipeline_destroy(p);
            fail_msg("%s: the first next returned a sample; expected an "
                     "error",
                     spec);
        }
        if (rc == EF_END) {
            ef_pipeline_destroy(p);
            fail_msg("%s: the first next returned END; expected an error",
                     spec);
        }
        /* sticky */
        assert_int_equal(ef_pipeline_next(p, &s), rc);
    }
    snprintf(msg, cap, "%s", ef_pipeline_error(p));
    ef_pipeline_destroy(p);
    return rc;
}

/* The message with every occurrence of `cut` removed (so that digits in a
 * temporary path cannot satisfy a search for a count). */
static void strip(char *msg, const char *cut)
{
    size_t n = strlen(cut);
    char *at;
    while (n && (at = strstr(msg, cut)) != NULL)
        memmove(at, at + n, strlen(at + n) + 1);
}

static void expect_idx_error(const char *spec, int want, const char *path,
                             const char *const *words, int nwords,
                             const char *dir)
{
    char msg[1024];
    int rc = first_failure(spec, msg, sizeof msg);
    if (rc != want)
        fail_msg("%s: status %s, expected %s; message: %s", spec,
                 ef_status_name(rc), ef_status_name(want), msg);
    if (path && strstr(msg, path) == NULL)
        fail_msg("%s: message \"%s\" does not name the file %s", spec, msg,
                 path);
    strip(msg, dir);
    if (nwords == 0)
        return;
    int any = 0;
    for (int i = 0; i < nwords; i++)
        any |= tu_contains_ci(msg, words[i]);
    if (!any)
        fail_msg("%s: message (paths removed) \"%s\" lacks \"%s\"", spec, msg,
                 words[0]);
}

static void test_idx_truncated(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024], path[512];
    static const char *const trunc_words[] = {"truncated", "expected"};
    snprintf(path, sizeof path, "%s/trunc-images", dir);
    snprintf(spec, sizeof spec, "idx:images=%s,labels=%s/ok-labels", path, dir);
    expect_idx_error(spec, EF_EFORMAT, path, trunc_words, 2, dir);

    snprintf(path, sizeof path, "%s/head-images", dir);
    snprintf(spec, sizeof spec, "idx:images=%s", path);
    expect_idx_error(spec, EF_EFORMAT, path, trunc_words, 2, dir);

    snprintf(path, sizeof path, "%s/empty-images", dir);
    snprintf(spec, sizeof spec, "idx:images=%s", path);
    expect_idx_error(spec, EF_EFORMAT, path, NULL, 0, dir);
}

static void test_idx_count_mismatch(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024];
    snprintf(spec, sizeof spec,
             "idx:images=%s/many-images,labels=%s/few-labels", dir, dir);
    static const char *const w13[] = {"13"};
    static const char *const w11[] = {"11"};
    expect_idx_error(spec, EF_EFORMAT, NULL, w13, 1, dir);
    expect_idx_error(spec, EF_EFORMAT, NULL, w11, 1, dir);
}

static void test_idx_bad_magic(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024], path[512];
    snprintf(path, sizeof path, "%s/magic-images", dir);
    snprintf(spec, sizeof spec, "idx:images=%s,labels=%s/ok-labels", path, dir);
    expect_idx_error(spec, EF_EFORMAT, path, NULL, 0, dir);

    /* an image file given as labels */
    snprintf(path, sizeof path, "%s/magic-labels", dir);
    snprintf(spec, sizeof spec, "idx:images=%s/ok-images,labels=%s", dir, path);
    expect_idx_error(spec, EF_EFORMAT, path, NULL, 0, dir);
}

/* The records of `spec` (a source over ok-images) are want[0..n). */
static void expect_range(const char *spec, const int64_t *want, int n)
{
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < n; i++) {
        ef_sample *s = tu_next(p);
        /* the identity is the file's record index, not the range's */
        assert_int_equal(ef_sample_identity(s).index, want[i]);
        assert_int_equal(((const unsigned char *)tu_field(s, "image").data)[2],
                         want[i] * 10 + 2);
        assert_int_equal(tu_i64(s, "label"), want[i]);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_idx_range(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024];
    static const int64_t all[5] = {0, 1, 2, 3, 4};
#define RANGE(opts)                                                            \
    snprintf(spec, sizeof spec,                                                \
             "idx:images=%s/ok-images,labels=%s/ok-labels," opts, dir, dir)
    RANGE("first=1,count=3");
    expect_range(spec, all + 1, 3);
    RANGE("first=2"); /* to the end */
    expect_range(spec, all + 2, 3);
    RANGE("count=2");
    expect_range(spec, all, 2);
    RANGE("first=0,count=5");
    expect_range(spec, all, 5);
    RANGE("first=4,count=1");
    expect_range(spec, all + 4, 1);
    /* shards part the range: its records 0 and 2 are the file's 1 and 3 */
    static const int64_t part0[2] = {1, 3}, part1[2] = {2, 4};
    RANGE("first=1,shard=0/2");
    expect_range(spec, part0, 2);
    RANGE("first=1,shard=1/2");
    expect_range(spec, part1, 2);

    /* a checkpoint names records by their index in the file: restored
       into a pipeline over the same range, reading goes on where it was */
    RANGE("first=2,count=3 | shuffle:3");
    ef_pipeline *p = tu_pipeline(spec, 7);
    ef_sample *s = tu_next(p);
    int64_t seen = ef_sample_identity(s).index;
    ef_sample_free(s);
    unsigned char buf[4096];
    size_t n;
    assert_int_equal(ef_pipeline_save_state(p, buf, sizeof buf, &n), EF_OK);
    int64_t rest[2];
    for (int i = 0; i < 2; i++) {
        s = tu_next(p);
        rest[i] = ef_sample_identity(s).index;
        assert_true(rest[i] >= 2 && rest[i] != seen);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    p = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(p, buf, n), EF_OK);
    for (int i = 0; i < 2; i++) {
        s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, rest[i]);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
#undef RANGE
}

/* A range outside the file names the option, the file and its count. */
static void test_idx_range_errors(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024], path[512];
    snprintf(path, sizeof path, "%s/ok-images", dir);
    static const struct {
        const char *opts, *word;
    } bad[] = {
        {"first=5", "first=5"},         /* past the end: nothing to read */
        {"first=9", "first=9"},
        {"first=3,count=3", "count=3"}, /* runs past the end */
        {"count=6", "count=6"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char spec_i[1024];
        snprintf(spec_i, sizeof spec_i, "idx:images=%s,labels=%s/ok-labels,%s",
                 path, dir, bad[i].opts);
        const char *const words[] = {bad[i].word};
        expect_idx_error(spec_i, EF_ESPEC, path, words, 1, dir);
        const char *const five[] = {"5 records"};
        expect_idx_error(spec_i, EF_ESPEC, path, five, 1, dir);
    }
    /* an empty range or a negative first is refused by the option's bounds */
    static const char *const count_word[] = {"count"};
    snprintf(spec, sizeof spec, "idx:images=%s,count=0", path);
    expect_idx_error(spec, EF_ESPEC, NULL, count_word, 1, dir);
    static const char *const first_word[] = {"first"};
    snprintf(spec, sizeof spec, "idx:images=%s,first=-1", path);
    expect_idx_error(spec, EF_ESPEC, NULL, first_word, 1, dir);
}

static void test_idx_missing_file(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char spec[1024], path[512];
    snprintf(path, sizeof path, "%s/no-such-images", dir);
    snprintf(spec, sizeof spec, "idx:images=%s,labels=%s/ok-labels", path, dir);
    expect_idx_error(spec, EF_EIO, path, NULL, 0, dir);

    snprintf(path, sizeof path, "%s/no-such-labels", dir);
    snprintf(spec, sizeof spec, "idx:images=%s/ok-images,labels=%s", dir, path);
    expect_idx_error(spec, EF_EIO, path, NULL, 0, dir);
}

/* ---- long paths --------------------------------------------------- */

/* dir/ + nine 100-byte folders + tail: about 1000 bytes */
static void long_path(char *buf, size_t cap, const char *dir, const char *tail)
{
    int n = snprintf(buf, cap, "%s", dir);
    for (int i = 0; i < 9; i++) {
        n += snprintf(buf + n, cap - (size_t)n, "/%c", 'a' + i);
        for (int j = 0; j < 99; j++)
            buf[n++] = (char)('a' + i);
        buf[n] = '\0';
    }
    snprintf(buf + n, cap - (size_t)n, "/%s", tail);
}

/* A message naming a 1000-byte path still ends with why it failed and
 * names the file by its path's tail. */
static void expect_reason_kept(const char *what, const char *msg,
                               const char *tail, const char *reason)
{
    size_t n = strlen(msg), r = strlen(reason);
    if (n < r || strcmp(msg + n - r, reason) != 0 || !strstr(msg, tail))
        fail_msg("%s: message \"%s\" does not end with \"%s\" or lacks "
                 "\"%s\"",
                 what, msg, reason, tail);
}

static void test_long_path_keeps_reason(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char path[2048], list[600], spec[4096], msg[1024];
    long_path(path, sizeof path, dir, "the-missing-tail.jpg");
    snprintf(list, sizeof list, "%s/long.txt", dir);
    FILE *f = fopen(list, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", path);
    fclose(f);
    snprintf(spec, sizeof spec, "files:list=%s", list);
    assert_int_equal(first_failure(spec, msg, sizeof msg), EF_EIO);
    expect_reason_kept("files", msg, "the-missing-tail.jpg",
                       "No such file or directory");

    snprintf(spec, sizeof spec, "idx:images=%s,labels=%s/ok-labels", path, dir);
    assert_int_equal(first_failure(spec, msg, sizeof msg), EF_EIO);
    expect_reason_kept("idx", msg, "the-missing-tail.jpg",
                       "No such file or directory");
}

/* A failing map names the sample's file by its tail, and its own
 * message survives whole. */
static void test_long_path_in_sample_where(void **state)
{
    (void)state;
    const char *dir = tu_dir();
    char path[2048], list[600], spec[700];
    long_path(path, sizeof path, dir, "");
    for (char *c = path + strlen(dir) + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            assert_int_equal(mkdir(path, 0700), 0);
            *c = '/';
        }
    strcat(path, "the-present-tail.jpg");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("x", f);
    fclose(f);
    snprintf(list, sizeof list, "%s/present.txt", dir);
    f = fopen(list, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", path);
    fclose(f);
    snprintf(spec, sizeof spec, "files:list=%s", list);
    fail_cfg cfg = {0, EF_ECALLBACK, 1};
    ef_pipeline *p = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_add_map(p, failing_map, &cfg, "threads=1"),
                     EF_OK);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ECALLBACK);
    expect_reason_kept("map", ef_pipeline_error(p), "the-present-tail.jpg",
                       "bad item 0");
    ef_pipeline_destroy(p);
}

/* ---- bad specs ---------------------------------------------------- */

typedef struct {
    const char *spec;
    int status;
    const char *words[2]; /* must appear in the message */
} bad_spec;

static const bad_spec k_bad[] = {
    {"range:n=3 | nosuch:1", EF_ESPEC, {"nosuch", NULL}},
    {"range:n=3,shard=4/4", EF_ESPEC, {"shard", "4/4"}},
    {"range:n=3,shard=1", EF_ESPEC, {"shard", "I/N"}},
    {"range:n=3,shard=-1/2", EF_ESPEC, {"shard", "-1/2"}},
    {"range:n=3,shard=0/2x", EF_ESPEC, {"shard", "0/2x"}},
    {"range:n=3,shard=0/0", EF_ESPEC, {"shard", "0/0"}},
    {"range:n=3,foo=1", EF_ESPEC, {"range", "foo"}},
    {"range:n=3 | batch:size=abc", EF_ESPEC, {"batch", "size"}},
    {"range:n=3 | batch:size=2.5", EF_ESPEC, {"batch", "size"}},
    {"range:n=3 | batch:size=99999999999999999999999",
     EF_ESPEC,
     {"batch", "size"}},
    {"range:n=3 | take:count=1x", EF_ESPEC, {"take", "count"}},
    {"range:n=3 | echo:factor=0.5", EF_ESPEC, {"echo", "factor"}},
    {"range:n=3 | echo:factor=-2", EF_ESPEC, {"echo", "factor"}},
    {"range:n=3 | echo:factor=abc", EF_ESPEC, {"echo", "factor"}},
    {"range:n=3 | batch:size=0", EF_ESPEC, {"batch", "size"}},
    /* one past the bound, where a double cannot tell the two apart */
    {"range:n=9200000000000000001", EF_ESPEC, {"range", "9200000000000000000"}},
    {"range:n=3 | shuffle:buffer=0", EF_ESPEC, {"shuffle", "buffer"}},
    {"range:n=3 | prefetch:depth=0", EF_ESPEC, {"prefetch", "depth"}},
    {"range:n=3 | map:fn=noop,threads=0", EF_ESPEC, {"map", "threads"}},
    /* int-or-auto options say both what they take and what they got */
    {"range:n=3 | map:fn=noop,threads=0",
     EF_ESPEC,
     {"between 1 and 256 or 'auto'", "(got 0)"}},
    {"range:n=3 | map:fn=noop,threads=abc",
     EF_ESPEC,
     {"option 'threads' expects an int or 'auto'", "got 'abc'"}},
    {"range:n=3 | flip:threads=autox", EF_ESPEC, {"flip", "'autox'"}},
    {"range:n=3 | prefetch:depth=abc",
     EF_ESPEC,
     {"option 'depth' expects an int or 'auto'", "prefetch"}},
    {"range:n=3 | throttle:rate=abc", EF_ESPEC, {"throttle", "rate"}},
    {"range:n=3 | batch", EF_ESPEC, {"batch", "size"}},
    {"idx:labels=/nonexistent/labels", EF_ESPEC, {"idx", "images"}},
    {"range:n=3 | batch:size=2,size=3", EF_ESPEC, {"batch", "size"}},
    {"range:n=3 | batch:2,size=3", EF_ESPEC, {"batch", "size"}},
    {"range:n=3 | echo:3,factor=2", EF_ESPEC, {"echo", "factor"}},
    {"range:n=3 | batch:size=2,drop_remainder=maybe",
     EF_ESPEC,
     {"batch", "drop_remainder"}},
    {"range:n=3 | map:fn=noop,ordered=perhaps", EF_ESPEC, {"map", "ordered"}},
    {"range:n=3 | batch:", EF_ESPEC, {"batch", NULL}},
    {"range:n=3 | batch:size=", EF_ESPEC, {"batch", "size"}},
    {"range:n=3 | batch:size=2,", EF_ESPEC, {"batch", NULL}},
    {"range:n=3 | batch:size=2,=3", EF_ESPEC, {"batch", NULL}},
    {"range:n=3 | range:n=4", EF_ESPEC, {"range", NULL}},
    {"range:n=3 || batch:2", EF_ESPEC, {NULL, NULL}},
    {"range:n=3 |", EF_ESPEC, {NULL, NULL}},
    {"| range:n=3", EF_ESPEC, {NULL, NULL}},
    {"", EF_ESPEC, {NULL, NULL}},
    {"   ", EF_ESPEC, {NULL, NULL}},
};

static void test_bad_specs(void **state)
{
    (void)state;
    size_t n = sizeof k_bad / sizeof k_bad[0];
    assert_true(n >= 15);
    for (size_t i = 0; i < n; i++) {
        const bad_spec *b = &k_bad[i];
        ef_pipeline *p = NULL;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        int rc = ef_pipeline_parse(p, b->spec);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ef_pipeline_error(p));
        int count = ef_pipeline_stage_count(p);
        ef_pipeline_destroy(p);
        if (rc != b->status)
            fail_msg("\"%s\": parse = %s (%d), expected %s; message: %s",
                     b->spec, ef_status_name(rc), rc, ef_status_name(b->status),
                     msg);
        if (count != 0)
            fail_msg("\"%s\": the failed parse left %d stages", b->spec, count);
        if (msg[0] == '\0')
            fail_msg("\"%s\": empty error message", b->spec);
        for (int w = 0; w < 2; w++)
            if (b->words[w] && strstr(msg, b->words[w]) == NULL)
                fail_msg("\"%s\": message \"%s\" does not name \"%s\"", b->spec,
                         msg, b->words[w]);
    }
}

static void test_failed_parse_leaves_pipeline_unchanged(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("range:n=5", 0);
    assert_int_equal(ef_pipeline_stage_count(p), 1);
    assert_int_equal(ef_pipeline_parse(p, "batch:size=0"), EF_ESPEC);
    assert_int_equal(ef_pipeline_stage_count(p), 1);
    /* a valid stage followed by a bad one: nothing appended */
    assert_int_equal(ef_pipeline_parse(p, "batch:size=2 | nosuch"), EF_ESPEC);
    assert_int_equal(ef_pipeline_stage_count(p), 1);
    assert_non_null(strstr(ef_pipeline_error(p), "nosuch"));
    assert_int_equal(ef_pipeline_parse(p, "echo:2 | range:n=3"), EF_ESPEC);
    assert_int_equal(ef_pipeline_stage_count(p), 1);
    assert_int_equal(ef_pipeline_add(p, "nosuch", NULL), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "nosuch"));
    assert_int_equal(ef_pipeline_add(p, "batch", "size=0"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "size"));
    assert_int_equal(ef_pipeline_add(p, "batch", "sise=2"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "sise"));
    assert_int_equal(ef_pipeline_add_map(p, failing_map, NULL, "threads=0"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "threads"));
    assert_int_equal(ef_pipeline_stage_count(p), 1);
    /* still usable */
    tu_parse(p, "batch:size=2");
    assert_int_equal(ef_pipeline_stage_count(p), 2);
    assert_int_equal(tu_drain(p), 3);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_bad_arguments(void **state)
{
    (void)state;
    assert_int_equal(ef_pipeline_create(NULL), EF_EINVAL);
    ef_pipeline_destroy(NULL);
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_non_null(p);
    assert_string_equal(ef_pipeline_error(p), "");
    assert_int_equal(ef_pipeline_parse(p, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_add(p, NULL, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_add_map(p, NULL, NULL, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_stage_count(p), 0);
    /* nothing to pull from */
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    assert_true(rc < 0);
    ef_pipeline_destroy(p);

    p = tu_pipeline("range:n=3", 0);
    assert_int_equal(ef_pipeline_next(p, NULL), EF_EINVAL);
    ef_stage_stats st;
    assert_int_equal(ef_pipeline_stage_stats(p, 1, &st), EF_EINVAL);
    assert_int_equal(ef_pipeline_stage_stats(p, -1, &st), EF_EINVAL);
    ef_pipeline_destroy(p);
}

static int bound_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

/* ef_pipeline_bind_map: every name bound for a parse must be used by it,
 * a name no callback is bound to is named, a failed parse appends nothing
 * and keeps the bindings, a successful one drops them. */
static void test_bound_map_errors(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(NULL, "x", bound_map, NULL),
                     EF_EINVAL);
    assert_int_equal(ef_pipeline_bind_map(p, NULL, bound_map, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_bind_map(p, "x", NULL, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_bind_map(p, "", bound_map, NULL), EF_EINVAL);
    char longname[80];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_int_equal(ef_pipeline_bind_map(p, longname, bound_map, NULL),
                     EF_EINVAL);
    assert_non_null(strstr(ef_pipeline_error(p), "79"));

    assert_int_equal(ef_pipeline_bind_map(p, "x", bound_map, NULL), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "unused", bound_map, NULL), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "other", bound_map, NULL), EF_OK);
    /* unused names: all named, nothing appended */
    assert_int_equal(ef_pipeline_parse(p, "range:n=4 | map:fn=x"), EF_ESPEC);
    assert_string_equal(ef_pipeline_error(p),
                        "maps: 'unused', 'other' named by no map:fn=NAME "
                        "stage of the spec");
    assert_int_equal(ef_pipeline_stage_count(p), 0);
    /* a name bound to nothing: the bound names are listed */
    assert_int_equal(ef_pipeline_parse(p, "range:n=4 | map:nosuch"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "'nosuch'"));
    assert_non_null(strstr(ef_pipeline_error(p), "bound: x, unused, other"));
    assert_int_equal(ef_pipeline_stage_count(p), 0);
    /* a C callback named by a spec still cannot take fn= */
    assert_int_equal(ef_pipeline_add(p, "range", "n=4"), EF_OK);
    assert_int_equal(ef_pipeline_add_map(p, bound_map, NULL, "fn=x"), EF_ESPEC);
    /* ef_pipeline_add does not read them */
    assert_int_equal(ef_pipeline_add(p, "map", "fn=x"), EF_ESPEC);
    assert_null(strstr(ef_pipeline_error(p), "bound"));
    /* the failed parses kept them: this one uses them all */
    tu_parse(p, "map:fn=x | map:unused,threads=2 | map:other");
    assert_int_equal(ef_pipeline_stage_count(p), 4);
    /* and dropped them */
    assert_int_equal(ef_pipeline_parse(p, "map:fn=x"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "built-in transform: 'x'"));
    assert_int_equal(tu_drain(p), 4);
    /* not once the pipeline runs */
    assert_int_equal(ef_pipeline_bind_map(p, "x", bound_map, NULL), EF_ESTATE);
    ef_pipeline_destroy(p);
}

static void test_spec_whitespace_and_bare_values(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline("  range:n=7   |   batch:3  ", 0);
    assert_int_equal(ef_pipeline_stage_count(p), 2);
    assert_int_equal(tu_drain(p), 3);
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:7|batch:size=3,drop_remainder=true", 0);
    assert_int_equal(tu_drain(p), 2);
    ef_pipeline_destroy(p);
    p = tu_pipeline("range:n=7 |take:2", 0);
    assert_int_equal(tu_drain(p), 2);
    ef_pipeline_destroy(p);
}

static void test_missing_source(void **state)
{
    (void)state;
    char msg[1024];
    int rc = first_failure("echo:2", msg, sizeof msg);
    assert_true(rc < 0);
    if (!tu_contains_ci(msg, "source"))
        fail_msg("\"echo:2\": message \"%s\" does not say a source is needed",
                 msg);
    rc = first_failure("range:n=3 | map:fn=nosuchfn", msg, sizeof msg);
    assert_true(rc < 0);
    if (strstr(msg, "nosuchfn") == NULL)
        fail_msg("map:fn=nosuchfn: message \"%s\" does not name it", msg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_failure_ordered),
        cmocka_unit_test(test_map_failure_through_queues),
        cmocka_unit_test(test_map_failure_unordered),
        cmocka_unit_test(test_map_failure_plain_status),
        cmocka_unit_test(test_skip_drops_and_counts),
        cmocka_unit_test(test_skip_leaves_other_errors_fatal),
        cmocka_unit_test(test_on_error_arguments),
        cmocka_unit_test(test_range_shards_partition),
        cmocka_unit_test_setup_teardown(test_idx_valid, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_truncated, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_count_mismatch, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_bad_magic, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_range, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_range_errors, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_idx_missing_file, fixture_setup,
                                        fixture_teardown),
        cmocka_unit_test_setup_teardown(test_long_path_keeps_reason,
                                        fixture_setup, fixture_teardown),
        cmocka_unit_test_setup_teardown(test_long_path_in_sample_where,
                                        fixture_setup, fixture_teardown),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_failed_parse_leaves_pipeline_unchanged),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_bound_map_errors),
        cmocka_unit_test(test_spec_whitespace_and_bare_values),
        cmocka_unit_test(test_missing_source),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
