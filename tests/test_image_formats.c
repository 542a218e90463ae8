/* SPDX-License-Identifier: Apache-2.0 */
/* The image formats beyond JPEG and PNG (src/codec/bmp.c, pnm.c, webp.c,
 * tiff.c, gif.c): known pixels of hand-made files, every truncation of a
 * small file of each format an error naming the format and the input,
 * and sizes beyond the limits refused before anything is allocated. The
 * pixels against PIL's are python/tests/test_image_formats.py. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "ef_test_util.h"

/* Written by PIL: [[red, green, blue], [(10,20,30), (40,50,60),
 * (70,80,90)]], 2 rows of 3 pixels. */
static const char webp_2x3[] =
    "\x52\x49\x46\x46\x42\x00\x00\x00\x57\x45\x42\x50\x56\x50\x38\x4c"
    "\x35\x00\x00\x00\x2f\x02\x40\x00\x00\x2f\x40\x98\x6d\xb4\x39\xdc"
    "\x7b\xfe\x96\xa7\x21\x24\x20\x74\x1f\xfc\x7f\x89\x20\xdb\x66\x17"
    "\xa9\xbf\xe5\xe7\x3f\xe0\xcf\x78\x26\x45\x01\x85\x6c\x23\xc0\xa1"
    "\x7b\x05\x4e\xe9\x22\xfa\x1f\xc3\x0b\x00";
static const char tiff_2x3[] =
    "\x49\x49\x2a\x00\x08\x00\x00\x00\x0a\x00\x00\x01\x04\x00\x01\x00"
    "\x00\x00\x03\x00\x00\x00\x01\x01\x04\x00\x01\x00\x00\x00\x02\x00"
    "\x00\x00\x02\x01\x03\x00\x03\x00\x00\x00\x86\x00\x00\x00\x03\x01"
    "\x03\x00\x01\x00\x00\x00\x01\x00\x00\x00\x06\x01\x03\x00\x01\x00"
    "\x00\x00\x02\x00\x00\x00\x11\x01\x04\x00\x01\x00\x00\x00\x8c\x00"
    "\x00\x00\x15\x01\x03\x00\x01\x00\x00\x00\x03\x00\x00\x00\x16\x01"
    "\x04\x00\x01\x00\x00\x00\x02\x00\x00\x00\x17\x01\x04\x00\x01\x00"
    "\x00\x00\x12\x00\x00\x00\x1c\x01\x03\x00\x01\x00\x00\x00\x01\x00"
    "\x00\x00\x00\x00\x00\x00\x08\x00\x08\x00\x08\x00\xff\x00\x00\x00"
    "\xff\x00\x00\x00\xff\x0a\x14\x1e\x28\x32\x3c\x46\x50\x5a";
static const char gif_2x3[] =
    "\x47\x49\x46\x38\x37\x61\x03\x00\x02\x00\x82\x00\x00\x00\xff\x00"
    "\x46\x50\x5a\x28\x32\x3c\x0a\x14\x1e\xff\x00\x00\x00\x00\xff\x00"
    "\x00\x00\x00\x00\x00\x2c\x00\x00\x00\x00\x03\x00\x02\x00\x00\x08"
    "\x09\x00\x09\x00\x28\x30\x40\x40\x80\x80\x00\x3b";

/* The same pixels as a BMP (24 bits, rows bottom-up, padded to 12
 * bytes) and a PPM. */
static const char bmp_2x3[] =
    "BM\x4e\0\0\0\0\0\0\0\x36\0\0\0"           /* file header */
    "\x28\0\0\0\3\0\0\0\2\0\0\0\1\0\x18\0"     /* 40 bytes: 3 x 2, 24 bits */
    "\0\0\0\0\x18\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0"
    "\x1e\x14\x0a\x3c\x32\x28\x5a\x50\x46\0\0\0" /* bottom row, BGR */
    "\0\0\xff\0\xff\0\xff\0\0\0\0\0";           /* top row */
static const char ppm_2x3[] = "P6\n# two rows\n3 2\n255\n"
                              "\xff\0\0\0\xff\0\0\0\xff"
                              "\x0a\x14\x1e\x28\x32\x3c\x46\x50\x5a";

static const unsigned char want_2x3[18] = {255, 0,  0,  0,  255, 0,
                                           0,   0,  255, 10, 20, 30,
                                           40,  50, 60, 70, 80, 90};

static int decode(const void *data, size_t size, int channels,
                  ef_buffer **out, int64_t shape[3], ef__err *err)
{
    ef__err_clear(err);
    *out = NULL;
    return ef__image_decode(data, size, channels, "field 'x'", out, shape,
                            err);
}

static void expect_pixels(const char *data, size_t size)
{
    ef_buffer *b;
    int64_t shape[3];
    ef__err err;
    int rc = decode(data, size, 3, &b, shape, &err);
    if (rc == EF_EUNSUPPORTED)
        skip(); /* a build without the format's library */
    if (rc != EF_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(shape[0], 2);
    assert_int_equal(shape[1], 3);
    assert_int_equal(shape[2], 3);
    assert_memory_equal(ef_buffer_data(b), want_2x3, sizeof want_2x3);
    ef_buffer_release(b);
}

static void known_pixels(void **state)
{
    (void)state;
    expect_pixels(bmp_2x3, sizeof bmp_2x3 - 1);
    expect_pixels(ppm_2x3, sizeof ppm_2x3 - 1);
    expect_pixels(webp_2x3, sizeof webp_2x3 - 1);
    expect_pixels(tiff_2x3, sizeof tiff_2x3 - 1);
    expect_pixels(gif_2x3, sizeof gif_2x3 - 1);
}

/* Plain Netpbm, and samples scaled as PIL scales them: round(v / maxval
 * * 255), ties to even (1 of 2 is 127.5: 128). */
static void netpbm_scales_like_pil(void **state)
{
    (void)state;
#define CASE(text, ...) {text, sizeof text - 1, {__VA_ARGS__}}
    static const struct {
        const char *text;
        size_t n;
        unsigned char want[4];
    } cases[] = {
        CASE("P2 4 1 2\n0 1 2 2\n", 0, 128, 255, 255),
        CASE("P5 4 1 2\n\0\1\2\3", 0, 128, 255, 255), /* 3: clipped */
        CASE("P1\n# bits\n4 1 0110", 255, 0, 0, 255),
        CASE("P4 4 1\n\x60", 255, 0, 0, 255),
        CASE("P5 2 1 65535\n\x80\x00\xff\xff", 128, 255),
    };
#undef CASE
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *t = cases[i].text;
        size_t n = cases[i].n;
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        int rc = decode(t, n, 0, &b, shape, &err);
        if (rc != EF_OK)
            fail_msg("case %zu: %s", i, err.msg);
        assert_int_equal(shape[2], 1);
        assert_memory_equal(ef_buffer_data(b), cases[i].want,
                            (size_t)shape[1]);
        ef_buffer_release(b);
    }
}

/* Every prefix of a good file is an error naming the input and, once
 * the magic is there, the format; nothing crashes (the ASan build). */
static void expect_truncations_fail(const char *data, size_t n,
                                    size_t magic, const char *format)
{
    for (size_t k = 0; k < n; k++) {
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        int rc = decode(data, k, 0, &b, shape, &err);
        if (rc == EF_EUNSUPPORTED && k >= magic)
            skip(); /* a build without the format's library */
        if (rc != EF_EFORMAT)
            fail_msg("%s cut to %zu bytes: expected EF_EFORMAT, got %s: %s",
                     format, k, ef_status_name(rc), err.msg);
        assert_null(b);
        assert_non_null(strstr(err.msg, "field 'x'"));
        if (k >= magic && !strstr(err.msg, format))
            fail_msg("%s cut to %zu bytes: \"%s\"", format, k, err.msg);
    }
}

static void truncated_files_are_errors(void **state)
{
    (void)state;
    expect_truncations_fail(bmp_2x3, sizeof bmp_2x3 - 1, 2, "BMP");
    expect_truncations_fail(ppm_2x3, sizeof ppm_2x3 - 1, 3, "PPM");
    expect_truncations_fail(webp_2x3, sizeof webp_2x3 - 1, 12, "WebP");
    expect_truncations_fail(tiff_2x3, sizeof tiff_2x3 - 1, 4, "TIFF");
    /* the first frame needs all but the trailer (';') */
    expect_truncations_fail(gif_2x3, sizeof gif_2x3 - 2, 6, "GIF");
}

/* A header beyond the limits, or claiming more pixels than the file
 * holds, fails before the pixels are allocated: with every allocation
 * failing, the answer is still the header's fault, not EF_ENOMEM. */
static void absurd_sizes_fail_before_allocating(void **state)
{
    (void)state;
    char bmp[sizeof bmp_2x3];
    memcpy(bmp, bmp_2x3, sizeof bmp);
    char gif[sizeof gif_2x3];
    memcpy(gif, gif_2x3, sizeof gif);
    gif[6] = gif[7] = gif[8] = gif[9] = '\xff'; /* a 65535 x 65535 screen */
    static const char pgm_huge[] = "P5 20000 20000 255\n\0\0\0\0";
    static const char pgm_short[] = "P5 16000 16000 255\n\0\0\0\0";
    static const char ppm_plain_short[] = "P3 10000 10000 255\n1 2 3\n";
    const struct {
        const char *data;
        size_t n;
        const char *words;
    } cases[] = {
        {bmp, sizeof bmp - 1, "40000 x 2"},
        {bmp, sizeof bmp - 1, "truncated BMP"},
        {gif, sizeof gif - 1, "65535 x 65535"},
        {pgm_huge, sizeof pgm_huge - 1, "at most"},
        {pgm_short, sizeof pgm_short - 1, "truncated PGM"},
        {ppm_plain_short, sizeof ppm_plain_short - 1, "truncated PPM"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* the BMP: 40000 x 2, then 16000 x 16000 with 24 bytes of pixels */
        memcpy(bmp + 18, i == 0 ? "\x40\x9c\0\0" : "\x80\x3e\0\0", 4);
        memcpy(bmp + 22, i == 0 ? "\2\0\0\0" : "\x80\x3e\0\0", 4);
        ef_buffer *b;
        int64_t shape[3];
        ef__err err;
        ef__alloc_fail_after(1);
        int rc = decode(cases[i].data, cases[i].n, 0, &b, shape, &err);
        ef__alloc_fail_after(0);
        if (rc == EF_EUNSUPPORTED)
            continue; /* GIF in a build without giflib */
        if (rc != EF_EFORMAT || !strstr(err.msg, cases[i].words))
            fail_msg("case %zu: %s: %s", i, ef_status_name(rc), err.msg);
        assert_null(b);
    }
}

/* Variants not read are named, not mistaken for corruption. */
static void unsupported_variants_are_named(void **state)
{
    (void)state;
    char rle[sizeof bmp_2x3];
    memcpy(rle, bmp_2x3, sizeof rle);
    rle[28] = 8;  /* 8 bits */
    rle[30] = 1;  /* BI_RLE8 */
    ef_buffer *b;
    int64_t shape[3];
    ef__err err;
    assert_int_equal(decode(rle, sizeof rle - 1, 0, &b, shape, &err),
                     EF_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "RLE8"));
    assert_non_null(strstr(err.msg, "field 'x'"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_pixels),
        cmocka_unit_test(netpbm_scales_like_pil),
        cmocka_unit_test(truncated_files_are_errors),
        cmocka_unit_test(absurd_sizes_fail_before_allocating),
        cmocka_unit_test(unsupported_variants_are_named),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
