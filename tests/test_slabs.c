/* SPDX-License-Identifier: Apache-2.0 */
/* Batch slabs: an image stage right before `batch` writes each output into
 * its slot of the batch's buffer, and batch makes the batched field a view
 * of it (no copy). The batches must hold the very bytes the copying path
 * gives, whatever breaks the slots' order (a skipped item, a partial last
 * batch) and across passes (repeat, take); the slab table itself is
 * tested white-box. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "pipeline/slabs.h"

/* ---- the source: item i is an [H,W,C] u8 image and an i32 label ---- */

#define H 5
#define W 7
#define C 3
#define IMAGE_BYTES (H * W * C)
#define MAX_ITEMS 64

/* One per pipeline: the tests run two side by side. */
typedef struct {
    int64_t count;       /* items per pass */
    int64_t next, epoch; /* position in the current pass */
    int bad[MAX_ITEMS];  /* 1: the item's image has the wrong rank */
} source;

static source sources[2];

static unsigned char pixel(int64_t i, int y, int x, int k)
{
    return (unsigned char)(i * 31 + y * 7 + x * 3 + k * 11);
}

static int source_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    source *src = user;
    if (epoch != src->epoch) {
        src->epoch = epoch;
        src->next = 0;
    }
    if (src->next >= src->count)
        return EF_END;
    int64_t i = src->next++;
    ef_sample *s = ef_sample_new((ef_sample_id){.index = i, .epoch = epoch});
    int64_t shape[3] = {H, W, C}, flat[1] = {IMAGE_BYTES};
    unsigned char *px;
    int32_t *label;
    assert_int_equal(ef_sample_add_new(s, "image", EF_U8, src->bad[i] ? 1 : 3,
                                       src->bad[i] ? flat : shape,
                                       (void **)&px),
                     EF_OK);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int k = 0; k < C; k++)
                px[(y * W + x) * C + k] = pixel(i, y, x, k);
    assert_int_equal(
        ef_sample_add_new(s, "label", EF_I32, 0, NULL, (void **)&label), EF_OK);
    *label = (int32_t)i;
    *out = s;
    return EF_OK;
}

/* A pipeline of `stages` after a source of `count` items, sources[k]. */
static ef_pipeline *pipeline_k(int k, int64_t count, const char *stages,
                               int skip)
{
    source *src = &sources[k];
    memset(src, 0, sizeof *src);
    src->count = count;
    src->epoch = -1;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    if (skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, src, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

static ef_pipeline *pipeline(int64_t count, const char *stages, int skip)
{
    return pipeline_k(0, count, stages, skip);
}

/* Batch `b` holds items idx[0..n) of the pass, their images to_chw'd. */
static void expect_chw_batch(const ef_sample *b, const int64_t *idx, int64_t n)
{
    ef_tensor t = tu_field(b, "image");
    assert_int_equal(t.dtype, EF_U8);
    assert_int_equal(t.ndim, 4);
    assert_int_equal(t.shape[0], n);
    assert_int_equal(t.shape[1], C);
    assert_int_equal(t.shape[2], H);
    assert_int_equal(t.shape[3], W);
    const unsigned char *d = t.data;
    for (int64_t j = 0; j < n; j++)
        for (int k = 0; k < C; k++)
            for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++) {
                    unsigned char want = pixel(idx[j], y, x, k);
                    unsigned char got = *d++;
                    if (got != want)
                        fail_msg("part %lld (item %lld), channel %d, (%d, %d):"
                                 " %u, expected %u",
                                 (long long)j, (long long)idx[j], k, y, x, got,
                                 want);
                }
    ef_tensor l = tu_field(b, "label");
    assert_int_equal(l.shape[0], n);
    for (int64_t j = 0; j < n; j++)
        assert_int_equal(((const int32_t *)l.data)[j], idx[j]);
}

/* Figure `key` of stage i's stats. */
static double extra(ef_pipeline *p, int i, const char *key)
{
    ef_stage_stats st;
    double v = -1;
    assert_int_equal(ef_pipeline_stage_stats(p, i, &st), EF_OK);
    if (!ef_stage_stats_extra(&st, key, &v))
        fail_msg("stage %d has no figure '%s'", i, key);
    return v;
}

/* Reads every batch of a pass of `count` items less the bad ones, in
 * batches of `size` (a last smaller one unless dropped), checking each. */
static int64_t expect_pass(ef_pipeline *p, int64_t count, int64_t size,
                           int drop_remainder, int64_t epoch)
{
    int64_t idx[MAX_ITEMS], n = 0, batches = 0;
    for (int64_t i = 0; i < count; i++)
        if (!sources[0].bad[i])
            idx[n++] = i;
    for (int64_t at = 0; at < n; at += size) {
        int64_t len = n - at < size ? n - at : size;
        if (len < size && drop_remainder)
            break;
        ef_sample *b = tu_next(p);
        assert_int_equal(ef_sample_identity(b).epoch, epoch);
        expect_chw_batch(b, idx + at, len);
        ef_sample_free(b);
        batches++;
    }
    return batches;
}

/* ---- tests ---------------------------------------------------------- */

static void full_batches_are_views(void **state)
{
    (void)state;
    const char *specs[] = {"to_chw | batch:4", "to_chw:threads=4 | batch:4"};
    for (int k = 0; k < 2; k++) {
        ef_pipeline *p = pipeline(24, specs[k], 0);
        ef_buffer *seen[6];
        for (int b = 0; b < 6; b++) {
            ef_sample *s = tu_next(p);
            int64_t idx[4] = {4 * b, 4 * b + 1, 4 * b + 2, 4 * b + 3};
            expect_chw_batch(s, idx, 4);
            /* the batch is a whole slab of its own, held by it alone */
            ef_tensor t = tu_field(s, "image");
            assert_ptr_equal(t.data, ef_buffer_data(t.buffer));
            assert_int_equal(ef_buffer_size(t.buffer), 4 * IMAGE_BYTES);
            assert_int_equal(ef_buffer_refcount(t.buffer), 1);
            seen[b] = t.buffer;
            for (int a = 0; a < b; a++)
                assert_ptr_not_equal(seen[a], seen[b]);
            /* kept alive: a freed buffer's address may come back */
            ef_buffer_retain(t.buffer);
            ef_sample_free(s);
        }
        tu_expect_end(p);
        assert_int_equal(extra(p, 2, "fields_viewed"), 6); /* the images */
        assert_int_equal(extra(p, 2, "fields_copied"), 6); /* the labels */
        for (int b = 0; b < 6; b++)
            ef_buffer_release(seen[b]);
        ef_pipeline_destroy(p);
    }
}

static void copying_path_gives_the_same_bytes(void **state)
{
    (void)state;
    /* a map between them keeps the image stage from knowing of the batch:
     * today's copy, to compare the views with byte for byte */
    const char *specs[] = {"to_chw | batch:4",
                           "to_chw | map:fn=noop | batch:4"};
    ef_pipeline *p[2];
    for (int k = 0; k < 2; k++)
        p[k] = pipeline_k(k, 12, specs[k], 0);
    for (int b = 0; b < 3; b++) {
        ef_sample *s[2];
        for (int k = 0; k < 2; k++)
            s[k] = tu_next(p[k]);
        ef_tensor a = tu_field(s[0], "image"), c = tu_field(s[1], "image");
        assert_int_equal(a.nbytes, c.nbytes);
        assert_memory_equal(a.data, c.data, a.nbytes);
        ef_sample_free(s[0]);
        ef_sample_free(s[1]);
    }
    assert_int_equal(extra(p[0], 2, "fields_viewed"), 3);
    assert_int_equal(extra(p[1], 3, "fields_viewed"), 0);
    assert_int_equal(extra(p[1], 3, "fields_copied"), 6);
    ef_pipeline_destroy(p[0]);
    ef_pipeline_destroy(p[1]);
}

static void normalize_writes_into_the_slab(void **state)
{
    (void)state;
    for (int threads = 1; threads <= 4; threads += 3) {
        char spec[2][128];
        snprintf(spec[0], sizeof spec[0],
                 "normalize:mean=0.4,std=0.3,threads=%d | batch:3", threads);
        snprintf(spec[1], sizeof spec[1],
                 "normalize:mean=0.4,std=0.3,threads=%d | map:fn=noop | "
                 "batch:3",
                 threads);
        ef_pipeline *p[2];
        for (int k = 0; k < 2; k++)
            p[k] = pipeline_k(k, 9, spec[k], 0);
        for (int b = 0; b < 3; b++) {
            ef_sample *s[2];
            for (int k = 0; k < 2; k++)
                s[k] = tu_next(p[k]);
            ef_tensor a = tu_field(s[0], "image"), c = tu_field(s[1], "image");
            assert_int_equal(a.dtype, EF_F32);
            assert_int_equal(a.nbytes, 3 * IMAGE_BYTES * sizeof(float));
            assert_memory_equal(a.data, c.data, a.nbytes);
            ef_sample_free(s[0]);
            ef_sample_free(s[1]);
        }
        assert_int_equal(extra(p[0], 2, "fields_viewed"), 3);
        ef_pipeline_destroy(p[0]);
        ef_pipeline_destroy(p[1]);
    }
}

static void skipped_item_falls_back_to_copies(void **state)
{
    (void)state;
    const char *specs[] = {"to_chw | batch:4", "to_chw:threads=4 | batch:4"};
    for (int k = 0; k < 2; k++) {
        ef_pipeline *p = pipeline(24, specs[k], 1);
        sources[0].bad[5] = 1;
        /* items 0-3 in slab 0; then 4,6,7,8 straddle slabs 1 and 2, and so
         * do the next ones: copied, with the right bytes. The last, 21-23,
         * are slots 1-3 of slab 5, whose slot 0 went into a copy: a view */
        assert_int_equal(expect_pass(p, 24, 4, 0, 0), 6);
        tu_expect_end(p);
        assert_int_equal(ef_pipeline_skipped(p, NULL, 0), 1);
        assert_int_equal(extra(p, 2, "fields_viewed"), 2);
        assert_int_equal(extra(p, 2, "fields_copied"), 10);
        ef_pipeline_destroy(p);
    }
}

static void partial_last_batch(void **state)
{
    (void)state;
    for (int drop = 0; drop <= 1; drop++) {
        char spec[64];
        snprintf(spec, sizeof spec,
                 "to_chw:threads=4 | batch:4,drop_remainder=%s",
                 drop ? "true" : "false");
        ef_pipeline *p = pipeline(10, spec, 0);
        assert_int_equal(expect_pass(p, 10, 4, drop, 0), drop ? 2 : 3);
        tu_expect_end(p);
        /* the last slab's table still holds it (slots 2, 3 never handed
         * out): the partial batch is a copy */
        assert_int_equal(extra(p, 2, "fields_viewed"), 2);
        assert_int_equal(extra(p, 2, "fields_copied"), drop ? 2 : 4);
        ef_pipeline_destroy(p);
    }
}

static void passes_start_at_slot_zero(void **state)
{
    (void)state;
    /* batch resets the map: each pass numbers its items from 0 again */
    ef_pipeline *p = pipeline(10, "to_chw:threads=4 | batch:4 | repeat:3", 0);
    for (int64_t e = 0; e < 3; e++)
        assert_int_equal(expect_pass(p, 10, 4, 0, e), 3);
    tu_expect_end(p);
    assert_int_equal(extra(p, 2, "fields_viewed"), 6);
    ef_pipeline_destroy(p);

    /* cut short mid-pass: the workers were ahead, in later slabs */
    p = pipeline(24, "to_chw:threads=4 | batch:4 | take:2 | repeat:3", 0);
    for (int64_t e = 0; e < 3; e++) {
        int64_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
        for (int b = 0; b < 2; b++) {
            ef_sample *s = tu_next(p);
            assert_int_equal(ef_sample_identity(s).epoch, e);
            expect_chw_batch(s, idx + 4 * b, 4);
            ef_sample_free(s);
        }
    }
    tu_expect_end(p);
    assert_int_equal(extra(p, 2, "fields_viewed"), 6);
    ef_pipeline_destroy(p);
}

static void repeat_before_the_map_runs_on(void **state)
{
    (void)state;
    /* the map sees one stream of 30 items: batches straddle passes and
     * are still whole slabs */
    ef_pipeline *p = pipeline(10, "repeat:3 | to_chw:threads=4 | batch:4", 0);
    for (int b = 0; b < 8; b++) {
        ef_sample *s = tu_next(p);
        int64_t n = b < 7 ? 4 : 2, idx[4];
        for (int j = 0; j < n; j++)
            idx[j] = (4 * b + j) % 10;
        expect_chw_batch(s, idx, n);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    assert_int_equal(extra(p, 3, "fields_viewed"), 7);
    ef_pipeline_destroy(p);
}

/* ---- the slab table, white-box -------------------------------------- */

static void slab_table(void **state)
{
    (void)state;
    ef__slabs t;
    ef__slabs_init(&t);
    size_t off = 99;
    assert_null(ef__slabs_take(&t, 0, 16, &off)); /* off */
    assert_int_equal(ef__slabs_on(&t, 4, 8), EF_OK);

    /* slots 0..3 of batch 0: one buffer, consecutive offsets */
    ef_buffer *b[4];
    for (int i = 0; i < 4; i++) {
        b[i] = ef__slabs_take(&t, (uint64_t)i, 16, &off);
        assert_non_null(b[i]);
        assert_ptr_equal(b[i], b[0]);
        assert_int_equal(off, 16 * i);
    }
    assert_int_equal(ef_buffer_size(b[0]), 64);
    /* all handed out: the table let go of it */
    assert_int_equal(t.nopen, 0);
    assert_int_equal(ef_buffer_refcount(b[0]), 4);
    for (int i = 0; i < 4; i++)
        ef_buffer_release(b[i]);

    /* batch 1 made by the size its first output has; another size gets
     * no slot */
    ef_buffer *c = ef__slabs_take(&t, 5, 8, &off);
    assert_non_null(c);
    assert_int_equal(off, 8);
    assert_null(ef__slabs_take(&t, 4, 16, &off));
    assert_int_equal(t.nopen, 1);

    /* out of reach of any worker (8 behind): dropped */
    ef_buffer *d = ef__slabs_take(&t, 16, 8, &off);
    assert_non_null(d);
    assert_int_equal(off, 0);
    assert_int_equal(t.nopen, 1);
    assert_int_equal(ef_buffer_refcount(c), 1);
    ef_buffer *e = ef__slabs_take(&t, 17, 8, &off);
    assert_ptr_equal(e, d);
    ef_buffer_release(c);
    ef_buffer_release(d);
    ef_buffer_release(e);

    /* a new pass: nothing kept */
    ef__slabs_clear(&t);
    assert_int_equal(t.nopen, 0);
    ef_buffer *f = ef__slabs_take(&t, 0, 16, &off);
    assert_non_null(f);
    assert_int_equal(ef_buffer_refcount(f), 2);
    ef__slabs_destroy(&t);
    assert_int_equal(ef_buffer_refcount(f), 1);
    ef_buffer_release(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(full_batches_are_views),
        cmocka_unit_test(copying_path_gives_the_same_bytes),
        cmocka_unit_test(normalize_writes_into_the_slab),
        cmocka_unit_test(skipped_item_falls_back_to_copies),
        cmocka_unit_test(partial_last_batch),
        cmocka_unit_test(passes_start_at_slot_zero),
        cmocka_unit_test(repeat_before_the_map_runs_on),
        cmocka_unit_test(slab_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
