/* SPDX-License-Identifier: Apache-2.0 */
/* random_crop and flip: pixel-exact results, keyed randomness (echoed
 * copies get their own), and clear errors on the wrong input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"

/* 50 samples: `index`, and `image` u8 [3,4] with pixel (y, x) = index +
 * 4y + x. */
static int image_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    int64_t *next = user;
    (void)block;
    if (*next >= 50)
        return EF_END;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = *next, .epoch = epoch});
    int64_t shape[2] = {3, 4}, *idx;
    unsigned char *img;
    assert_int_equal(
        ef_sample_add_new(s, "index", EF_I64, 0, NULL, (void **)&idx), EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "image", EF_U8, 2, shape, (void **)&img), EF_OK);
    *idx = *next;
    for (int i = 0; i < 12; i++)
        img[i] = (unsigned char)(*next + i);
    (*next)++;
    *out = s;
    return EF_OK;
}

static int64_t source_state;

static ef_pipeline *images(const char *stages, uint64_t seed)
{
    ef_pipeline *p;
    source_state = 0;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    assert_int_equal(
        ef_pipeline_add_source(p, image_source, &source_state, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

static int px(const ef_tensor *t, int y, int x)
{
    return ((const unsigned char *)t->data)[y * 4 + x];
}

static void crop_without_padding_is_identity(void **state)
{
    (void)state;
    ef_pipeline *p = images("random_crop:pad=0", 1);
    ef_sample *s;
    int n = 0;
    while (ef_pipeline_next(p, &s) == EF_OK) {
        ef_tensor t = tu_field(s, "image");
        assert_int_equal(t.ndim, 2);
        for (int i = 0; i < 12; i++)
            assert_int_equal(((const unsigned char *)t.data)[i],
                             (tu_i64(s, "index") + i) & 0xff);
        ef_sample_free(s);
        n++;
    }
    assert_int_equal(n, 50);
    ef_pipeline_destroy(p);
}

static void crop_shifts_and_zero_fills(void **state)
{
    (void)state;
    ef_pipeline *p = images("random_crop:pad=1", 3);
    ef_sample *s;
    int shifted = 0;
    while (ef_pipeline_next(p, &s) == EF_OK) {
        ef_tensor t = tu_field(s, "image");
        int64_t idx = tu_i64(s, "index");
        /* find the shift (dy, dx) in [-1, 1]^2 this output is */
        int found = 0;
        for (int dy = -1; dy <= 1 && !found; dy++)
            for (int dx = -1; dx <= 1 && !found; dx++) {
                int ok = 1;
                for (int y = 0; y < 3 && ok; y++)
                    for (int x = 0; x < 4 && ok; x++) {
                        int sy = y + dy, sx = x + dx;
                        int want = sy < 0 || sy >= 3 || sx < 0 || sx >= 4
                                       ? 0
                                       : (int)((idx + 4 * sy + sx) & 0xff);
                        ok = px(&t, y, x) == want;
                    }
                if (ok) {
                    found = 1;
                    shifted += dy != 0 || dx != 0;
                }
            }
        assert_true(found);
        ef_sample_free(s);
    }
    assert_true(shifted > 25); /* 8 of 9 shifts move the image */
    ef_pipeline_destroy(p);
}

/* Padding wider than the image: every shift is legal, most leave only
 * zeros, and none writes outside the image. */
static void crop_padding_wider_than_the_image(void **state)
{
    (void)state;
    ef_pipeline *p = images("random_crop:pad=9", 5);
    ef_sample *s;
    int blank = 0, n = 0;
    while (ef_pipeline_next(p, &s) == EF_OK) {
        ef_tensor t = tu_field(s, "image");
        int nonzero = 0;
        for (int i = 0; i < 12; i++)
            nonzero += ((const unsigned char *)t.data)[i] != 0;
        blank += nonzero == 0;
        ef_sample_free(s);
        n++;
    }
    assert_int_equal(n, 50);
    assert_true(blank > 25);
    ef_pipeline_destroy(p);
}

static void flip_mirrors_rows(void **state)
{
    (void)state;
    ef_pipeline *p = images("flip:p=1", 1);
    ef_sample *s = tu_next(p);
    ef_tensor t = tu_field(s, "image");
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++)
            assert_int_equal(px(&t, y, x), 4 * y + (3 - x));
    ef_sample_free(s);
    ef_pipeline_destroy(p);

    /* p = 0 never flips and shares the payload */
    p = images("flip:p=0", 1);
    s = tu_next(p);
    t = tu_field(s, "image");
    assert_int_equal(px(&t, 0, 0), 0);
    assert_int_equal(px(&t, 2, 3), 11);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* Echoed copies are augmented independently; the same seed repeats. */
static void echoed_copies_differ(void **state)
{
    (void)state;
    unsigned char first[2][50][12];
    for (int run = 0; run < 2; run++) {
        ef_pipeline *p = images("echo:2 | random_crop:pad=1,threads=3", 9);
        int differ = 0;
        for (int i = 0; i < 50; i++) {
            ef_sample *a = tu_next(p), *b = tu_next(p);
            ef_tensor ta = tu_field(a, "image"), tb = tu_field(b, "image");
            assert_int_equal(ef_sample_identity(b).echo_copy, 1);
            differ += memcmp(ta.data, tb.data, 12) != 0;
            memcpy(first[run][i], ta.data, 12);
            ef_sample_free(a);
            ef_sample_free(b);
        }
        assert_true(differ > 25);
        ef_pipeline_destroy(p);
    }
    assert_memory_equal(first[0], first[1], sizeof first[0]);
}

static void wrong_input_is_an_error(void **state)
{
    (void)state;
    /* a 1-D field is not an image */
    ef_pipeline *p = tu_pipeline("range:n=5,bytes=12 | flip:field=data", 1);
    ef_sample *s;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "[H,W]"));
    ef_pipeline_destroy(p);
    /* a missing field */
    p = tu_pipeline("range:n=5 | random_crop", 1);
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    assert_non_null(strstr(ef_pipeline_error(p), "no field 'image'"));
    ef_pipeline_destroy(p);
    /* options */
    ef_pipeline *q;
    assert_int_equal(ef_pipeline_create(&q), EF_OK);
    assert_int_equal(ef_pipeline_parse(q, "range:n=1 | flip:p=1.5"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(q), "'p'"));
    assert_int_equal(ef_pipeline_parse(q, "range:n=1 | random_crop:pad=-1"),
                     EF_ESPEC);
    assert_int_equal(ef_pipeline_parse(q, "range:n=1 | flip:field="), EF_ESPEC);
    ef_pipeline_destroy(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(crop_without_padding_is_identity),
        cmocka_unit_test(crop_shifts_and_zero_fills),
        cmocka_unit_test(crop_padding_wider_than_the_image),
        cmocka_unit_test(flip_mirrors_rows),
        cmocka_unit_test(echoed_copies_differ),
        cmocka_unit_test(wrong_input_is_an_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
