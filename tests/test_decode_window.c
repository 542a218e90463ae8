/* SPDX-License-Identifier: Apache-2.0 */
/* Decoding a window of an image (ef__image_decode_window): unscaled, the
 * window equals a full decode cropped, bit for bit, for every JPEG layout
 * (4:2:0, 4:2:2, 4:4:4, 4:4:0, gray, CMYK, progressive, restart markers),
 * every channel count and windows at every edge, of one pixel and at
 * random; scaled, it is close to the full decode shrunk; and errors are
 * as strict as a full decode's in the part decoded. The JPEGs are written
 * here with libjpeg, which gives every layout; the test skips itself in a
 * build without libjpeg. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "ef_test_util.h"

#if defined(EF_HAVE_JPEG) && defined(EF_HAVE_TURBOJPEG)
#include <jpeglib.h>

typedef struct {
    int comps;       /* 1 gray, 3 YCbCr, 4 YCCK */
    int hs, vs;      /* luma sampling factors (chroma 1x1) */
    int progressive; /* 1: jpeg_simple_progression; 2: DC, then only the
                        luma's AC to 1 bit short: libjpeg's block smoothing
                        fills in the rest from neighbouring blocks */
    int restart;     /* restart interval in MCUs, 0 for none */
} layout;

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    return tu_xorshift(&rng_state);
}

/* A picture with sharp colour edges and noise, so that chroma matters. */
static unsigned char *picture(int h, int w, int c)
{
    unsigned char *px = malloc((size_t)h * w * c);
    assert_non_null(px);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int k = 0; k < c; k++)
                px[((size_t)y * w + x) * c + k] =
                    (unsigned char)(((x / 3 + y / 5 + k) % 4) * 60 +
                                    (int)(rnd() % 16) + k * 7);
    return px;
}

/* Encodes with libjpeg in the given layout; the caller frees *out. */
static void encode(const layout *l, int h, int w, unsigned char **out,
                   unsigned long *size)
{
    unsigned char *px = picture(h, w, l->comps);
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    *out = NULL;
    *size = 0;
    jpeg_mem_dest(&ci, out, size);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = l->comps;
    ci.in_color_space = l->comps == 1   ? JCS_GRAYSCALE
                        : l->comps == 3 ? JCS_RGB
                                        : JCS_CMYK;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 90, TRUE);
    if (l->comps == 4)
        jpeg_set_colorspace(&ci, JCS_YCCK);
    if (l->comps >= 3) {
        ci.comp_info[0].h_samp_factor = l->hs;
        ci.comp_info[0].v_samp_factor = l->vs;
        for (int k = 1; k < l->comps; k++)
            ci.comp_info[k].h_samp_factor = ci.comp_info[k].v_samp_factor = 1;
        if (l->comps == 4) { /* K as luma, as TurboJPEG writes it */
            ci.comp_info[3].h_samp_factor = l->hs;
            ci.comp_info[3].v_samp_factor = l->vs;
        }
    }
    static jpeg_scan_info partial[2] = {{3, {0, 1, 2, 0}, 0, 0, 0, 0},
                                        {1, {0, 0, 0, 0}, 1, 63, 0, 1}};
    partial[0].comps_in_scan = l->comps < 3 ? l->comps : 3;
    if (l->progressive == 1) {
        jpeg_simple_progression(&ci);
    } else if (l->progressive == 2) {
        ci.scan_info = partial;
        ci.num_scans = 2;
    }
    ci.restart_interval = (unsigned)l->restart;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW row = px + (size_t)ci.next_scanline * w * l->comps;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(px);
}

/* ef__window_fn: the window given in advance (user: int64_t[4]). */
static void fixed_window(int64_t h, int64_t w, void *user, int64_t win[4])
{
    (void)h, (void)w;
    memcpy(win, user, 4 * sizeof *win);
}

/* ef__window_fn: the whole image; its size goes to user (int64_t[2]). */
static void whole_window(int64_t h, int64_t w, void *user, int64_t win[4])
{
    int64_t *seen = user;
    seen[0] = h;
    seen[1] = w;
    win[0] = win[1] = 0;
    win[2] = h;
    win[3] = w;
}

/* The size the window decoder reads from the header: the chooser's. */
static void expect_size(const void *data, size_t n, int64_t h, int64_t w)
{
    int64_t seen[2] = {-1, -1}, shape[3], in[4];
    ef_buffer *b;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode_window(data, n, 0, whole_window, seen, 0,
                                             0, "x", &b, shape, in, &err),
                     EF_OK);
    assert_true(seen[0] == h && seen[1] == w);
    ef_buffer_release(b);
}

static ef_buffer *full(const unsigned char *jpg, size_t n, int channels,
                       int64_t shape[3])
{
    ef_buffer *b;
    ef__err err;
    ef__err_clear(&err);
    if (ef__image_decode(jpg, n, channels, "field 'x'", &b, shape, &err) !=
        EF_OK)
        fail_msg("full decode: %s", err.msg);
    return b;
}

/* The window decoded unscaled equals the full decode cropped. */
static void check_window(const unsigned char *jpg, size_t n, int channels,
                         const ef_buffer *whole, const int64_t fs[3],
                         const int64_t win[4])
{
    ef_buffer *b;
    int64_t shape[3], in[4];
    ef__err err;
    ef__err_clear(&err);
    int rc =
        ef__image_decode_window(jpg, n, channels, fixed_window, (void *)win, 0,
                                0, "field 'x'", &b, shape, in, &err);
    if (rc != EF_OK)
        fail_msg("window %lld,%lld,%lld,%lld: %s", (long long)win[0],
                 (long long)win[1], (long long)win[2], (long long)win[3],
                 err.msg);
    assert_int_equal(shape[2], fs[2]);
    assert_int_equal(in[2], win[2]);
    assert_int_equal(in[3], win[3]);
    assert_true(in[0] >= 0 && in[0] + in[2] <= shape[0]);
    assert_true(in[1] >= 0 && in[1] + in[3] <= shape[1]);
    const unsigned char *a = ef_buffer_data(whole), *d = ef_buffer_data(b);
    int64_t c = fs[2];
    for (int64_t y = 0; y < win[2]; y++) {
        const unsigned char *ra = a + ((win[0] + y) * fs[1] + win[1]) * c;
        const unsigned char *rd = d + ((in[0] + y) * shape[1] + in[1]) * c;
        if (memcmp(ra, rd, (size_t)(win[3] * c)) != 0)
            fail_msg("window %lld,%lld,%lld,%lld of %lldx%lld (c %d): row %lld "
                     "differs",
                     (long long)win[0], (long long)win[1], (long long)win[2],
                     (long long)win[3], (long long)fs[0], (long long)fs[1],
                     channels, (long long)y);
    }
    ef_buffer_release(b);
}

static void check_layout(const layout *l, int h, int w)
{
    unsigned char *jpg;
    unsigned long n;
    encode(l, h, w, &jpg, &n);
    for (int channels = 0; channels <= 3; channels += channels ? 2 : 1) {
        int64_t fs[3];
        ef_buffer *whole = full(jpg, n, channels, fs);
        assert_int_equal(fs[0], h);
        assert_int_equal(fs[1], w);
        expect_size(jpg, n, h, w);
        /* the whole image, each corner's pixel, strips along each edge */
        int64_t fixed[][4] = {
            {0, 0, h, w},
            {0, 0, 1, 1},
            {h - 1, w - 1, 1, 1},
            {0, w - 1, 1, 1},
            {h - 1, 0, 1, 1},
            {0, 0, h, 1},
            {0, w - 1, h, 1},
            {0, 0, 1, w},
            {h - 1, 0, 1, w},
            {h / 2, w / 2, 1, 1},
            {h / 3, 0, h / 3 + 1, w},
        };
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            check_window(jpg, n, channels, whole, fs, fixed[i]);
        for (int i = 0; i < 60; i++) {
            int64_t wh = 1 + rnd() % h, ww = 1 + rnd() % w;
            int64_t win[4] = {rnd() % (h - wh + 1), rnd() % (w - ww + 1), wh,
                              ww};
            check_window(jpg, n, channels, whole, fs, win);
        }
        ef_buffer_release(whole);
    }
    free(jpg);
}

static void windows_equal_full_decode(void **state)
{
    (void)state;
    const layout layouts[] = {
        {3, 2, 2, 0, 0}, /* 4:2:0 */
        {3, 2, 1, 0, 0}, /* 4:2:2 */
        {3, 1, 1, 0, 0}, /* 4:4:4 */
        {3, 1, 2, 0, 0}, /* 4:4:0 */
        {1, 1, 1, 0, 0}, /* gray */
        {4, 1, 1, 0, 0}, /* CMYK (YCCK) */
        {4, 2, 2, 0, 0}, /* CMYK, subsampled */
        {3, 2, 2, 1, 0}, /* progressive 4:2:0 */
        {3, 2, 1, 1, 0}, /* progressive 4:2:2 */
        {1, 1, 1, 1, 0}, /* progressive gray */
        {3, 2, 2, 2, 0}, /* progressive 4:2:0, smoothed */
        {3, 1, 1, 2, 0}, /* progressive 4:4:4, smoothed */
        {1, 1, 1, 2, 0}, /* progressive gray, smoothed */
        {3, 2, 2, 0, 3}, /* restart markers */
        {3, 2, 2, 1, 2}, /* both */
    };
    const int sizes[][2] = {{61, 83}, {37, 100}, {16, 17}, {1, 1}, {130, 9}};
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_layout(&layouts[i], sizes[s][0], sizes[s][1]);
}

/* Scaled by 1/f, the window is at least the output size and close to
 * the full decode shrunk by averaging. */
static void scaled_windows(void **state)
{
    (void)state;
    const layout l = {3, 2, 2, 0, 0};
    int h = 300, w = 410;
    unsigned char *jpg;
    unsigned long n;
    encode(&l, h, w, &jpg, &n);
    int64_t fs[3];
    ef_buffer *whole = full(jpg, n, 3, fs);
    const struct {
        int64_t win[4], out;
        int f;
    } cases[] = {
        {{0, 0, 300, 410}, 224, 1},  {{10, 20, 200, 250}, 100, 2},
        {{3, 5, 290, 400}, 70, 4},   {{17, 33, 256, 300}, 30, 8},
        {{17, 33, 256, 300}, 16, 8}, /* never beyond 1/8 */
        {{0, 0, 50, 400}, 26, 1},    /* too short to halve */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ef_buffer *b;
        int64_t shape[3], in[4];
        ef__err err;
        ef__err_clear(&err);
        assert_int_equal(ef__image_decode_window(jpg, n, 3, fixed_window,
                                                 (void *)cases[i].win,
                                                 cases[i].out, cases[i].out,
                                                 "x", &b, shape, in, &err),
                         EF_OK);
        int f = cases[i].f;
        const int64_t *win = cases[i].win;
        assert_true(in[2] >= cases[i].out && in[3] >= cases[i].out);
        assert_true(llabs(in[2] - win[2] / f) <= 1);
        assert_true(llabs(in[3] - win[3] / f) <= 1);
        assert_true(in[0] >= 0 && in[0] + in[2] <= shape[0]);
        assert_true(in[1] >= 0 && in[1] + in[3] <= shape[1]);
        /* the full-size pixels the window's scaled ones cover: on the
         * grid of f, as many as decoded, within half a scaled pixel */
        int64_t cov[4];
        ef__image_window_covered(jpg, n, win, h, w, cases[i].out,
                                 cases[i].out, cov);
        for (int k = 0; k < 4; k++)
            assert_int_equal(cov[k] % f, 0);
        assert_int_equal(cov[2], in[2] * f);
        assert_int_equal(cov[3], in[3] * f);
        assert_true(llabs(cov[0] - win[0]) <= f / 2);
        assert_true(llabs(cov[1] - win[1]) <= f / 2);
        assert_true(llabs(cov[0] + cov[2] - win[0] - win[2]) <= f / 2);
        assert_true(llabs(cov[1] + cov[3] - win[1] - win[3]) <= f / 2);
        /* mean difference from f x f averages of the full decode */
        const unsigned char *a = ef_buffer_data(whole), *d = ef_buffer_data(b);
        double diff = 0;
        int64_t count = 0;
        for (int64_t y = 0; y + 1 < in[2]; y++)
            for (int64_t x = 0; x + 1 < in[3]; x++)
                for (int k = 0; k < 3; k++) {
                    int64_t sy = (win[0] / f + y) * f,
                            sx = (win[1] / f + x) * f;
                    if (sy + f > h || sx + f > w)
                        continue;
                    double avg = 0;
                    for (int dy = 0; dy < f; dy++)
                        for (int dx = 0; dx < f; dx++)
                            avg += a[((sy + dy) * w + sx + dx) * 3 + k];
                    avg /= f * f;
                    int64_t oy =
                        in[0] + y + (win[0] / f - (win[0] * 2 + f) / (2 * f));
                    int64_t ox =
                        in[1] + x + (win[1] / f - (win[1] * 2 + f) / (2 * f));
                    diff += fabs(avg - d[(oy * shape[1] + ox) * 3 + k]);
                    count++;
                }
        assert_true(count > 0);
        if (diff / count > 16) /* noise averages differently */
            fail_msg("case %zu: mean difference %.1f", i, diff / count);
        ef_buffer_release(b);
    }
    ef_buffer_release(whole);
    free(jpg);
}

static void window_errors(void **state)
{
    (void)state;
    const layout l = {3, 2, 2, 0, 0};
    unsigned char *jpg;
    unsigned long n;
    encode(&l, 64, 64, &jpg, &n);
    ef_buffer *b = (ef_buffer *)&b;
    int64_t shape[3], in[4];
    ef__err err;
    /* windows outside the image */
    const int64_t bad[][4] = {
        {0, 0, 65, 1}, {-1, 0, 1, 1}, {0, 60, 1, 5}, {0, 0, 0, 1}};
    for (size_t i = 0; i < 4; i++) {
        ef__err_clear(&err);
        assert_int_equal(
            ef__image_decode_window(jpg, n, 3, fixed_window, (void *)bad[i], 0,
                                    0, "field 'jpg'", &b, shape, in, &err),
            EF_EINVAL);
        assert_null(b);
        assert_non_null(strstr(err.msg, "field 'jpg'"));
    }
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode_window(jpg, n, 2, fixed_window,
                                             (void *)(int64_t[]){0, 0, 1, 1}, 0,
                                             0, "x", &b, shape, in, &err),
                     EF_EINVAL);
    /* truncated inside the window: an error naming the input; a window
     * above the cut still decodes (rows below are not read) */
    size_t cut = n * 2 / 3;
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode_window(jpg, cut, 3, fixed_window,
                                             (void *)(int64_t[]){50, 0, 14, 64},
                                             0, 0, "field 'jpg'", &b, shape, in,
                                             &err),
                     EF_EFORMAT);
    assert_null(b);
    assert_non_null(strstr(err.msg, "field 'jpg'"));
    assert_non_null(strstr(err.msg, "truncated or corrupt JPEG data"));
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode_window(jpg, cut, 3, fixed_window,
                                             (void *)(int64_t[]){0, 0, 8, 64},
                                             0, 0, "x", &b, shape, in, &err),
                     EF_OK);
    ef_buffer_release(b);
    /* damaged entropy data where the window is: every byte of a stretch
     * of the scan set to a marker that cannot be there */
    unsigned char *bad_jpg = malloc(n);
    memcpy(bad_jpg, jpg, n);
    for (size_t i = n / 2; i < n / 2 + 8; i++)
        bad_jpg[i] = 0xFF, bad_jpg[++i] = 0xC4;
    ef__err_clear(&err);
    int rc = ef__image_decode_window(bad_jpg, n, 3, fixed_window,
                                     (void *)(int64_t[]){0, 0, 64, 64}, 0, 0,
                                     "field 'jpg'", &b, shape, in, &err);
    assert_int_equal(rc, EF_EFORMAT);
    assert_non_null(strstr(err.msg, "field 'jpg'"));
    free(bad_jpg);
    free(jpg);
}

/* A progressive colour JPEG of 1 + 3 * 63 * 3 = 568 scans: each AC
 * coefficient of each component in a scan of its own, then refined
 * twice. A full decode refuses it (TJFLAG_LIMITSCANS); so must a window. */
static void too_many_scans(void **state)
{
    (void)state;
    static jpeg_scan_info scans[568];
    int n = 0;
    scans[n++] = (jpeg_scan_info){3, {0, 1, 2, 0}, 0, 0, 0, 0};
    for (int ah = 0; ah <= 2; ah++)
        for (int k = 1; k < 64; k++)
            for (int ci = 0; ci < 3; ci++)
                scans[n++] = (jpeg_scan_info){1, {ci, 0, 0, 0},   k,
                                              k, ah ? 3 - ah : 0, 2 - ah};
    assert_int_equal(n, 568);
    unsigned char *px = picture(16, 16, 3), *jpg = NULL;
    unsigned long size = 0;
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr jerr;
    ci.err = jpeg_std_error(&jerr);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &jpg, &size);
    ci.image_width = ci.image_height = 16;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    ci.scan_info = scans;
    ci.num_scans = n;
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < 16) {
        JSAMPROW row = px + ci.next_scanline * 16 * 3;
        jpeg_write_scanlines(&ci, &row, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(px);
    ef_buffer *b;
    int64_t shape[3], in[4];
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode(jpg, size, 3, "x", &b, shape, &err),
                     EF_EFORMAT);
    ef__err_clear(&err);
    assert_int_equal(ef__image_decode_window(jpg, size, 3, fixed_window,
                                             (void *)(int64_t[]){0, 0, 1, 1}, 0,
                                             0, "field 'jpg'", &b, shape, in,
                                             &err),
                     EF_EFORMAT);
    assert_null(b);
    assert_non_null(strstr(err.msg, "field 'jpg'"));
    assert_non_null(strstr(err.msg, "more than 500 scans"));
    free(jpg);
}

/* PNG: decoded whole, the window where it was. */
static void png_window(void **state)
{
    (void)state;
    unsigned char *px = picture(20, 30, 3);
    ef_buffer *png;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__png_encode(px, 20, 30, 3, &png, &err);
    free(px);
    if (rc == EF_EUNSUPPORTED)
        skip();
    assert_int_equal(rc, EF_OK);
    int64_t shape[3], in[4];
    expect_size(ef_buffer_data(png), ef_buffer_size(png), 20, 30);
    ef_buffer *b;
    const int64_t win[4] = {2, 3, 10, 11};
    assert_int_equal(ef__image_decode_window(ef_buffer_data(png),
                                             ef_buffer_size(png), 0,
                                             fixed_window, (void *)win, 5, 5,
                                             "x", &b, shape, in, &err),
                     EF_OK);
    assert_memory_equal(in, win, sizeof win);
    assert_true(shape[0] == 20 && shape[1] == 30 && shape[2] == 3);
    int64_t cov[4];
    ef__image_window_covered(ef_buffer_data(png), ef_buffer_size(png), win,
                             20, 30, 5, 5, cov);
    assert_memory_equal(cov, win, sizeof win);
    ef_buffer_release(b);
    ef_buffer_release(png);
    /* neither format: said before any window is chosen */
    assert_int_equal(ef__image_decode_window("<html>", 6, 0, fixed_window,
                                             (void *)win, 0, 0, "field 'x'", &b,
                                             shape, in, &err),
                     EF_EFORMAT);
    assert_null(b);
    assert_non_null(strstr(err.msg, "3c 68 74 6d"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(windows_equal_full_decode),
        cmocka_unit_test(scaled_windows),
        cmocka_unit_test(window_errors),
        cmocka_unit_test(too_many_scans),
        cmocka_unit_test(png_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

static void no_libjpeg(void **state)
{
    (void)state;
    skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(no_libjpeg)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
#endif
