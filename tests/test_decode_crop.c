/* SPDX-License-Identifier: Apache-2.0 */
/* The decode_crop stage: with dct_scale=0 it gives what `decode |
 * random_resized_crop` gives, bit for bit (labels and other fields too),
 * for JPEGs of many sizes, gray and colour, and PNGs; with dct_scale on,
 * the same shapes and labels and nearly the same pixels; its option
 * errors and a bad image's error. The images are written here
 * (ef__jpeg_encode, ef__png_encode) into a tar in a temporary directory;
 * the test skips itself in a build without libjpeg-turbo. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codec/image.h"
#include "codec/tar_write.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_decode_crop");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static uint32_t rng_state = 777;
static uint32_t rnd(void)
{
    return tu_xorshift(&rng_state);
}

/* Gradients with edges and noise: [h,w,c]. */
static unsigned char *picture(int64_t h, int64_t w, int c)
{
    unsigned char *px = malloc((size_t)(h * w * c));
    assert_non_null(px);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[(y * w + x) * c + k] =
                    (unsigned char)(y * 150 / h + x * (90 - 20 * k) / w +
                                    ((x / 7 + y / 11) % 2) * 12 +
                                    (int)(rnd() % 9));
    return px;
}

static void add(FILE *f, const char *name, const void *data, size_t n)
{
    ef__err err;
    if (ef__tar_write_member(f, name, data, n, &err) != EF_OK)
        fail_msg("%s", err.msg);
}

/* A tar of `count` images of various sizes with labels and a text field;
 * with_png adds PNGs. Returns its path. */
static const char *write_images(int count, int with_png)
{
    static const int64_t sizes[][3] = {
        {375, 500, 3}, {333, 211, 3}, {64, 480, 3},  {40, 40, 3},
        {17, 23, 3},   {600, 300, 3}, {256, 256, 1}, {1, 1, 3},
    };
    const char *path = tu_at(with_png ? "mixed.tar" : "jpegs.tar");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < count; i++) {
        const int64_t *s = sizes[i % 8];
        unsigned char *px = picture(s[0], s[1], (int)s[2]);
        ef_buffer *b;
        ef__err err;
        ef__err_clear(&err);
        int png = with_png && i % 3 == 1;
        int rc = png ? ef__png_encode(px, s[0], s[1], (int)s[2], &b, &err)
                     : ef__jpeg_encode(px, s[0], s[1], (int)s[2], 85, &b, &err);
        free(px);
        if (rc == EF_EUNSUPPORTED) {
            fclose(f);
            skip();
        }
        assert_int_equal(rc, EF_OK);
        char name[64], cls[16];
        snprintf(name, sizeof name, "img%03d.%s", i, png ? "png" : "jpg");
        add(f, name, ef_buffer_data(b), ef_buffer_size(b));
        ef_buffer_release(b);
        snprintf(name, sizeof name, "img%03d.cls", i);
        snprintf(cls, sizeof cls, "%d", i % 10);
        add(f, name, cls, strlen(cls));
        snprintf(name, sizeof name, "img%03d.txt", i);
        add(f, name, "caption", 7);
    }
    ef__err err;
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* tar:urls=path | stages, with a fixed seed. */
static ef_pipeline *open_spec(const char *path, const char *stages)
{
    char spec[1024];
    snprintf(spec, sizeof spec, "tar:urls=%s | %s", path, stages);
    return tu_pipeline(spec, 42);
}

/* Runs both pipelines over the tar (the croppers both third, as the
 * crops are keyed by the stage's index); each pair of samples must have
 * the same fields, and images within `tolerance` on average (0: equal). */
static void compare(const char *path, const char *size, const char *opts,
                    double tolerance, int *scaled_differ)
{
    char a_spec[256], b_spec[256];
    snprintf(a_spec, sizeof a_spec, "repeat:2 | map:fn=noop | decode_crop:%s%s",
             size, opts);
    snprintf(b_spec, sizeof b_spec,
             "repeat:2 | decode | random_resized_crop:%s", size);
    ef_pipeline *a = open_spec(path, a_spec);
    ef_pipeline *b = open_spec(path, b_spec);
    int n = 0;
    for (;; n++) {
        ef_sample *x = tu_next_or_end(a, "decode_crop");
        ef_sample *y = tu_next_or_end(b, "decode | random_resized_crop");
        assert_true((x == NULL) == (y == NULL));
        if (!x)
            break;
        assert_int_equal(tu_i64(x, "label"), tu_i64(y, "label"));
        ef_tensor tx = tu_field(x, "image"), ty = tu_field(y, "image");
        assert_int_equal(tx.ndim, 3);
        assert_memory_equal(tx.shape, ty.shape, 3 * sizeof *tx.shape);
        size_t bytes = (size_t)(tx.shape[0] * tx.shape[1] * tx.shape[2]);
        const unsigned char *px = tx.data, *py = ty.data;
        if (tolerance == 0) {
            assert_memory_equal(px, py, bytes);
        } else {
            double diff = 0;
            for (size_t i = 0; i < bytes; i++)
                diff += fabs((double)px[i] - py[i]);
            if (diff / (double)bytes > tolerance)
                fail_msg("sample %d: mean difference %.2f", n,
                         diff / (double)bytes);
            *scaled_differ += memcmp(px, py, bytes) != 0;
        }
        assert_int_equal(tu_field(x, "txt").shape[0], 7);
        ef_sample_free(x);
        ef_sample_free(y);
    }
    assert_true(n > 0);
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
}

static void unscaled_equals_decode_then_crop(void **state)
{
    (void)state;
    const char *path = write_images(24, 0);
    compare(path, "size=224", ",dct_scale=0", 0, NULL);
    compare(path, "size=32", ",dct_scale=0,threads=3", 0, NULL);
    compare(path, "size=7,scale_min=0.01,ratio_min=0.2,ratio_max=5",
            ",dct_scale=false,channels=0", 0, NULL);
    /* PNGs are decoded whole, then cropped the same way */
    path = write_images(12, 1);
    compare(path, "size=50", ",dct_scale=0", 0, NULL);
    /* with dct_scale on, only the JPEGs' pixels may differ */
    int differ = 0;
    compare(path, "size=20", "", 6, &differ);
}

static void scaled_is_close(void **state)
{
    (void)state;
    const char *path = write_images(24, 0);
    int differ = 0;
    compare(path, "size=32", "", 6, &differ);
    assert_true(differ > 0); /* the scaled path was taken */
    /* an output as large as the image never scales: equal again */
    compare(path, "size=600", "", 0, NULL);
}

/* Runs a and b (stages after the tar) to the end: the same number of
 * samples, with the same fields, byte for byte. */
static void same_samples(const char *path, const char *a_stages,
                         const char *b_stages)
{
    ef_pipeline *a = open_spec(path, a_stages);
    ef_pipeline *b = open_spec(path, b_stages);
    int n = 0;
    for (;; n++) {
        ef_sample *x = tu_next_or_end(a, a_stages);
        ef_sample *y = tu_next_or_end(b, b_stages);
        assert_true((x == NULL) == (y == NULL));
        if (!x)
            break;
        assert_int_equal(ef_sample_field_count(x), ef_sample_field_count(y));
        for (int i = 0; i < ef_sample_field_count(x); i++) {
            ef_tensor tx, ty;
            assert_int_equal(ef_sample_field(x, i, &tx), EF_OK);
            ty = tu_field(y, tx.name);
            assert_int_equal(tx.dtype, ty.dtype);
            assert_int_equal(tx.ndim, ty.ndim);
            assert_memory_equal(tx.shape, ty.shape,
                                (size_t)tx.ndim * sizeof *tx.shape);
            assert_int_equal(tx.nbytes, ty.nbytes);
            assert_memory_equal(tx.data, ty.data, tx.nbytes);
        }
        ef_sample_free(x);
        ef_sample_free(y);
    }
    assert_true(n > 0);
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
}

/* mirror, mean and std: the chain to f32 [C,H,W] (or [H,W,C]), bit for
 * bit, one sample at a time or in batches (written into the batch's
 * buffer). The flip is drawn from the stage's own stream, so mirror is
 * 0 or 1 here, against flip:p=0 or 1. */
static void augmented_equals_the_chain(void **state)
{
    (void)state;
    const char *path = write_images(24, 0);
    const char *norm = "mean=\"0.485,0.456,0.406\",std=\"0.229,0.224,0.225\"";
    static const struct {
        const char *mirror, *layout, *tail;
    } cases[] = {
        {"1", "", ""},
        {"0", "", ""},
        {"1", "", " | batch:4"},
        {"1", ",layout=hwc", ""},
        {"0", ",layout=hwc", " | batch:5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[512], b[512];
        int hwc = cases[i].layout[0] != '\0';
        snprintf(a, sizeof a,
                 "repeat:2 | map:fn=noop | decode_crop:size=48,channels=3,"
                 "dct_scale=0,mirror=%s,%s%s%s",
                 cases[i].mirror, norm, cases[i].layout, cases[i].tail);
        snprintf(b, sizeof b,
                 "repeat:2 | decode:channels=3 | random_resized_crop:size=48 "
                 "| flip:p=%s | normalize:%s%s%s",
                 cases[i].mirror, norm, hwc ? "" : " | to_chw", cases[i].tail);
        same_samples(path, a, b);
    }
    /* one mean and std for every channel, gray images kept gray */
    same_samples(path,
                 "repeat:2 | map:fn=noop | decode_crop:size=31,dct_scale=0,"
                 "mirror=1,mean=0.5,std=0.25",
                 "repeat:2 | decode | random_resized_crop:size=31 | flip:p=1 "
                 "| normalize:mean=0.5,std=0.25 | to_chw");
    /* u8 output, flipped */
    same_samples(path,
                 "repeat:2 | map:fn=noop | decode_crop:size=40,dct_scale=0,"
                 "mirror=1",
                 "repeat:2 | decode | random_resized_crop:size=40 | flip:p=1");
}

static void errors(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:3 | decode_crop:scale_min=0.9,"
                                          "scale_max=0.5"),
                     EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "reversed");
    assert_int_equal(ef_pipeline_parse(p, "range:3 | decode_crop:channels=2"),
                     EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "decode_crop");
    ef_pipeline_destroy(p);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:3 | decode_crop:layout=hwc"),
                     EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "give 'mean' or 'std'");
    assert_int_equal(
        ef_pipeline_parse(p, "range:3 | decode_crop:mean=0.5,layout=nchw"),
        EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "must be chw or hwc, got 'nchw'");
    assert_int_equal(ef_pipeline_parse(p, "range:3 | decode_crop:std=0"),
                     EF_ESPEC);
    tu_expect_once(ef_pipeline_error(p), "std");
    ef_pipeline_destroy(p);

    /* three means for a gray image: named, with the channel count */
    p = open_spec(write_images(8, 0),
                  "decode_crop:size=8,mean=\"0.1,0.2,0.3\"");
    ef_sample *g = NULL;
    int rc;
    while ((rc = ef_pipeline_next(p, &g)) == EF_OK)
        ef_sample_free(g);
    assert_int_equal(rc, EF_ESHAPE);
    tu_expect_once(ef_pipeline_error(p), "one channel but mean has 3 values");
    ef_pipeline_destroy(p);

    /* an HTML page saved as a .jpg: the message names the field */
    const char *path = tu_at("bad.tar");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    add(f, "a.jpg", "<html>", 6);
    ef__err err;
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
    p = open_spec(path, "decode_crop");
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    tu_expect_once(ef_pipeline_error(p), "field 'jpg'");
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unscaled_equals_decode_then_crop),
        cmocka_unit_test(scaled_is_close),
        cmocka_unit_test(augmented_equals_the_chain),
        cmocka_unit_test(errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
