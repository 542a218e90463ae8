/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for JPEG decoding (src/codec/jpeg.c through
 * ef__image_decode) and encoding.
 *
 * Each input is one file. Beyond the checks of image_check.h, a small
 * image that decodes must also decode to gray and to RGB with the same
 * size (the stored layout byte for byte), and survive ef__jpeg_encode and a
 * second decode with its shape (JPEG is lossy: the pixels may differ). */
#include "fuzz.h"
#include "image_check.h"

static void check_layouts(const uint8_t *data, size_t size, const ef_buffer *b,
                          const int64_t shape[3])
{
    int64_t s1[3], s3[3];
    ef_buffer *g = fuzz_decode(data, size, 1, s1);
    ef_buffer *c = fuzz_decode(data, size, 3, s3);
    CHECK(g && c);
    CHECK(s1[0] == shape[0] && s1[1] == shape[1]);
    CHECK(s3[0] == shape[0] && s3[1] == shape[1]);
    CHECK(memcmp(ef_buffer_data(b), ef_buffer_data(shape[2] == 1 ? g : c),
                 ef_buffer_size(b)) == 0);
    ef_buffer_release(g);
    ef_buffer_release(c);
}

static void check_round_trip(const ef_buffer *b, const int64_t shape[3])
{
    ef_buffer *jpg = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__jpeg_encode(ef_buffer_data(b), shape[0], shape[1],
                             (int)shape[2], 90, &jpg, &err);
    CHECK(rc == EF_OK);
    int64_t again[3];
    ef_buffer *d =
        fuzz_decode(ef_buffer_data(jpg), ef_buffer_size(jpg), 0, again);
    CHECK(d != NULL);
    CHECK(memcmp(again, shape, sizeof again) == 0);
    ef_buffer_release(d);
    ef_buffer_release(jpg);
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
