/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for PNG decoding (src/codec/png.c through ef__image_decode)
 * and encoding.
 *
 * Each input is one file. Beyond the checks of image_check.h, a small
 * image that decodes must also decode to gray and to RGB, agreeing with
 * each other (gray is the luma of RGB, for every colour type and depth)
 * and with the stored layout, and must survive ef__png_encode and a second
 * decode byte for byte.
 *
 * libspng is not instrumented, so libFuzzer cannot learn to get past its
 * chunk checksums: almost every mutation would die there. So each input is
 * also decoded with every chunk's CRC made right. */
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
    CHECK(memcmp(ef_buffer_data(d), ef_buffer_data(b), ef_buffer_size(b)) == 0);
    ef_buffer_release(d);
    ef_buffer_release(png);
}

static void check_one(const uint8_t *data, size_t size)
{
    int64_t shape[3];
    ef_buffer *b = fuzz_decode(data, size, 0, shape);
    if (!b)
        return;
    if (shape[0] * shape[1] <= FUZZ_SMALL) {
        check_layouts(data, size, b, shape);
        check_round_trip(b, shape);
    }
    ef_buffer_release(b);
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = crc & 1 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

/* Rewrites the CRC of every whole chunk after the signature; returns
 * whether any changed. */
static int fix_crcs(unsigned char *p, size_t size)
{
    int changed = 0;
    for (size_t off = 8; off + 12 <= size;) {
        uint32_t len = (uint32_t)p[off] << 24 | (uint32_t)p[off + 1] << 16 |
                       (uint32_t)p[off + 2] << 8 | p[off + 3];
        if (len > size - off - 12)
            break;
        uint32_t crc = crc32_of(p + off + 4, 4 + (size_t)len);
        unsigned char *at = p + off + 8 + len;
        for (int i = 0; i < 4; i++) {
            unsigned char byte = (unsigned char)(crc >> (24 - 8 * i));
            changed |= at[i] != byte;
            at[i] = byte;
        }
        off += 12 + (size_t)len;
    }
    return changed;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_one(data, size);
    unsigned char *copy = malloc(size ? size : 1);
    CHECK(copy != NULL);
    memcpy(copy, data, size);
    if (fix_crcs(copy, size))
        check_one(copy, size);
    free(copy);
    return 0;
}
