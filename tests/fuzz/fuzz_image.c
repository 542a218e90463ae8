/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the image formats beyond JPEG and PNG: WebP (libwebp),
 * TIFF (libtiff), GIF (giflib), BMP and Netpbm (src/codec/bmp.c, pnm.c),
 * each through ef__image_decode as the decode stage calls it.
 *
 * Each input is one file. Beyond the checks of image_check.h: the header
 * probe agrees with the decode (same size and stored layout, or an error
 * whenever the probe gave one), and a small image decodes to gray and to
 * RGB of the same size, gray being exactly the luma of RGB (every one of
 * these codecs decodes to gray or RGB and converts the same way), the
 * stored layout equal to one of them. */
#include "fuzz.h"
#include "image_check.h"

static void check_probe(const uint8_t *data, size_t size, const ef_buffer *b,
                        const int64_t shape[3])
{
    int64_t probed[3];
    int jpeg;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__image_probe(data, size, 0, FUZZ_WHAT, probed, &jpeg, &err);
    if (!b)
        return; /* a header may be fine and the pixels not */
    CHECK(rc == EF_OK);
    CHECK(memcmp(probed, shape, sizeof probed) == 0);
}

static void check_layouts(const uint8_t *data, size_t size, const ef_buffer *b,
                          const int64_t shape[3])
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t shape[3];
    ef_buffer *b = fuzz_decode(data, size, 0, shape);
    check_probe(data, size, b, shape);
    if (b && shape[0] * shape[1] <= FUZZ_SMALL)
        check_layouts(data, size, b, shape);
    ef_buffer_release(b);
    return 0;
}
