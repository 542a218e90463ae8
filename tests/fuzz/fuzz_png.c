/* Fuzz target for PNG decoding (src/codec/png.c through ef__image_decode)
 * and encoding.
 *
 * Each input is one file. Beyond the checks of image_check.h, a small
 * image that decodes must also decode to gray and to RGB, agreeing with
 * each other (gray is the luma of RGB, for every colour type and depth)
 * and with the stored layout, and must survive ef__png_encode and a second
 * decode byte for byte. */
#include "fuzz.h"
#include "image_check.h"

static void check_layouts(const uint8_t *data, size_t size,
                          const ef_buffer *b, const int64_t shape[3])
{
    int64_t s1[3], s3[3];
    ef_buffer *g = fuzz_decode(data, size, 1, s1);
    ef_buffer *c = fuzz_decode(data, size, 3, s3);
    CHECK(g && c);
    CHECK(s1[0] == shape[0] && s1[1] == shape[1]);
    CHECK(s3[0] == shape[0] && s3[1] == shape[1]);
    size_t n = (size_t)(shape[0] * shape[1]);
    const unsigned char *pg = ef_buffer_data(g), *pc = ef_buffer_data(c);
    unsigned char *luma = malloc(n);
    CHECK(luma != NULL);
    ef__image_rgb_to_gray(pc, n, luma);
    CHECK(memcmp(luma, pg, n) == 0);
    CHECK(memcmp(ef_buffer_data(b), shape[2] == 1 ? pg : pc,
                 ef_buffer_size(b)) == 0);
    free(luma);
    ef_buffer_release(g);
    ef_buffer_release(c);
}

static void check_round_trip(const ef_buffer *b, const int64_t shape[3])
{
    ef_buffer *png = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__png_encode(ef_buffer_data(b), shape[0], shape[1],
                            (int)shape[2], &png, &err);
    CHECK(rc == EF_OK);
    int64_t again[3];
    ef_buffer *d =
        fuzz_decode(ef_buffer_data(png), ef_buffer_size(png), 0, again);
    CHECK(d != NULL);
    CHECK(memcmp(again, shape, sizeof again) == 0);
    CHECK(memcmp(ef_buffer_data(d), ef_buffer_data(b), ef_buffer_size(b)) ==
          0);
    ef_buffer_release(d);
    ef_buffer_release(png);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t shape[3];
    ef_buffer *b = fuzz_decode(data, size, 0, shape);
    if (!b)
        return 0;
    if (shape[0] * shape[1] <= FUZZ_SMALL) {
        check_layouts(data, size, b, shape);
        check_round_trip(b, shape);
    }
    ef_buffer_release(b);
    return 0;
}
