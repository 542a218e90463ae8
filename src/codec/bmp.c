/* SPDX-License-Identifier: Apache-2.0 */
/* BMP, read here (the format is a header and rows of pixels): Windows
 * headers of 40 to 124 bytes and the OS/2 one of 12, palettes of 1, 4 and
 * 8 bits, and 16, 24 and 32-bit pixels, plain or with bit-field masks,
 * rows bottom-up or top-down. Decoded the way PIL does: a palette of
 * grays (index i is gray i, or black and white for 1 bit: what PIL writes
 * for a gray image) is stored gray, everything else RGB; a palette index
 * past the palette is the gray of its value (PIL's default palette), 5
 * and 6-bit fields are scaled by 255 / 31 or 63, alpha is dropped. Run-length (RLE4, RLE8) and embedded JPEG or PNG bitmaps are
 * refused by name. */
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/buffer.h"

enum { BI_RGB = 0, BI_RLE8 = 1, BI_RLE4 = 2, BI_BITFIELDS = 3, BI_ALPHA = 6 };

typedef struct {
    int64_t w, h;        /* h > 0 */
    int top_down;        /* rows stored first to last */
    int bits;            /* per pixel */
    size_t stride;       /* bytes per stored row, padded to 4 */
    size_t data;         /* offset of the first stored row */
    size_t palette;      /* offset of the palette (bits <= 8) */
    int entry;           /* bytes per palette entry: 4, or 3 for OS/2 */
    int colors;          /* palette entries, at most 256 */
    int native;          /* 1: a palette of grays, else 3 */
    uint32_t mask[3];    /* red, green, blue fields (bits 16 and 32) */
} bmp_header;

static uint32_t le16(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t le32(const unsigned char *p)
{
    return le16(p) | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int bad(const char *what, const char *why, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT, "%s: corrupt BMP: %s", what, why);
}

static int truncated(const char *what, const char *part, size_t need,
                     size_t size, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: truncated BMP: the %s needs %zu bytes, the file "
                       "has %zu",
                       what, part, need, size);
}

/* The masks of a BI_BITFIELDS image, or the defaults of a plain one;
 * each must be one run of set bits (or 0: that colour is black). */
static int read_masks(const unsigned char *p, size_t size, int compression,
                      bmp_header *b, const char *what,
                      ef__err *err)
{
    if (b->bits == 16) {
        b->mask[0] = 0x7C00, b->mask[1] = 0x03E0, b->mask[2] = 0x001F;
    } else {
        b->mask[0] = 0xFF0000, b->mask[1] = 0xFF00, b->mask[2] = 0xFF;
    }
    if (compression != BI_BITFIELDS && compression != BI_ALPHA)
        return EF_OK;
    if (b->bits != 16 && b->bits != 32)
        return bad(what, "bit-field masks on pixels that are not 16 or 32 "
                         "bits",
                   err);
    /* after a 40-byte header, or inside a longer one: at 54 either way */
    if (size < 54 + 12)
        return truncated(what, "bit-field masks", 54 + 12, size, err);
    uint32_t m[3] = {le32(p + 54), le32(p + 58), le32(p + 62)};
    if (!m[0] && !m[1] && !m[2])
        return EF_OK; /* none given: the defaults, as PIL reads it */
    for (int k = 0; k < 3; k++) {
        uint32_t low = m[k] & (~m[k] + 1); /* lowest set bit */
        if (m[k] && ((m[k] + low) & m[k]))
            return bad(what, "a bit-field mask that is not one run of bits",
                       err);
        b->mask[k] = m[k];
    }
    return EF_OK;
}

/* Whether the palette is PIL's sign of a gray image: entry i is gray i
 * (black and white for two entries). */
static int gray_palette(const unsigned char *pal, const bmp_header *b)
{
    for (int i = 0; i < b->colors; i++) {
        const unsigned char *e = pal + (size_t)i * b->entry;
        int want = b->colors == 2 ? 255 * i : i;
        if (e[0] != want || e[1] != want || e[2] != want)
            return 0;
    }
    return 1;
}

/* Reads and checks everything before the pixels. */
static int read_header(const unsigned char *p, size_t size, const char *what,
                       bmp_header *b, ef__err *err)
{
    if (size < 14 + 4)
        return truncated(what, "file header", 18, size, err);
    uint32_t hsize = le32(p + 14);
    int compression = BI_RGB;
    memset(b, 0, sizeof *b);
    if (hsize == 12) { /* OS/2 1.x: 16-bit sides */
        if (size < 14 + 12)
            return truncated(what, "OS/2 header", 26, size, err);
        b->w = le16(p + 18);
        b->h = le16(p + 20);
        b->bits = (int)le16(p + 24);
        b->entry = 3;
    } else if (hsize >= 40 && hsize <= 124) {
        if (size < 14 + 40)
            return truncated(what, "header", 54, size, err);
        b->w = (int32_t)le32(p + 18);
        b->h = (int32_t)le32(p + 22);
        b->bits = (int)le16(p + 28);
        compression = (int)le32(p + 30);
        b->colors = (int)(le32(p + 46) > 256 ? 256 : le32(p + 46));
        b->entry = 4;
    } else {
        return ef__err_set(err, EF_EFORMAT,
                           "%s: corrupt BMP: a header of %u bytes; expected "
                           "12 or 40 to 124",
                           what, (unsigned)hsize);
    }
    b->top_down = b->h < 0;
    b->h = b->h < 0 ? -b->h : b->h;
    int rc = ef__image_check_size(b->h, b->w, "BMP", what, err);
    if (rc != EF_OK)
        return rc;
    if (compression == BI_RLE8 || compression == BI_RLE4)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: a run-length (RLE%d) BMP; echoflow reads "
                           "uncompressed and bit-field BMPs only",
                           what, compression == BI_RLE8 ? 8 : 4);
    if (compression != BI_RGB && compression != BI_BITFIELDS &&
        compression != BI_ALPHA)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: a BMP of compression %d (JPEG or PNG inside, "
                           "or unknown); echoflow reads uncompressed and "
                           "bit-field BMPs only",
                           what, compression);
    if (b->bits != 1 && b->bits != 4 && b->bits != 8 && b->bits != 16 &&
        b->bits != 24 && b->bits != 32)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: corrupt BMP: %d bits per pixel; expected 1, "
                           "4, 8, 16, 24 or 32",
                           what, b->bits);
    rc = read_masks(p, size, compression, b, what, err);
    if (rc != EF_OK)
        return rc;
    b->palette = 14 + hsize;
    if (b->bits <= 8 && (!b->colors || b->colors > 1 << b->bits))
        b->colors = 1 << b->bits;
    if (b->bits <= 8 && b->palette + (size_t)b->colors * b->entry > size)
        return truncated(what, "palette",
                         b->palette + (size_t)b->colors * b->entry, size, err);
    b->native = b->bits <= 8 && gray_palette(p + b->palette, b) ? 1 : 3;
    /* sides are at most 32768: no overflow */
    b->stride = ((size_t)b->w * (size_t)b->bits + 31) / 32 * 4;
    b->data = le32(p + 10);
    if (b->data > size || b->stride * (size_t)b->h > size - b->data)
        return truncated(what, "pixel data",
                         b->data + b->stride * (size_t)b->h, size, err);
    return EF_OK;
}

int ef__bmp_probe(const unsigned char *data, size_t size, const char *what,
                  int64_t *h, int64_t *w, int *c, ef__err *err)
{
    bmp_header b;
    int rc = read_header(data, size, what, &b, err);
    *h = b.h, *w = b.w, *c = b.native;
    return rc;
}

/* One field of a pixel, scaled to 0..255 as PIL scales 5 and 6 bits. */
static unsigned char field(uint32_t v, uint32_t mask)
{
    if (!mask)
        return 0;
    int shift = 0;
    while (!(mask >> shift & 1))
        shift++;
    uint64_t max = mask >> shift;
    return (unsigned char)((uint64_t)((v & mask) >> shift) * 255u / max);
}

static void palette_row(const unsigned char *row, const bmp_header *b,
                        const unsigned char pal[256][3], unsigned char *dst)
{
    int per_byte = 8 / b->bits, mask = (1 << b->bits) - 1;
    for (int64_t x = 0; x < b->w; x++) {
        int shift = 8 - b->bits * (int)(x % per_byte + 1);
        int i = row[x / per_byte] >> shift & mask;
        if (b->native == 1)
            dst[x] = pal[i][0];
        else
            memcpy(dst + 3 * x, pal[i], 3);
    }
}

static void rgb_row(const unsigned char *row, const bmp_header *b,
                    unsigned char *dst)
{
    for (int64_t x = 0; x < b->w; x++, dst += 3) {
        if (b->bits == 24) {
            const unsigned char *s = row + 3 * x;
            dst[0] = s[2], dst[1] = s[1], dst[2] = s[0];
            continue;
        }
        uint32_t v = b->bits == 16 ? le16(row + 2 * x) : le32(row + 4 * x);
        for (int k = 0; k < 3; k++)
            dst[k] = field(v, b->mask[k]);
    }
}

int ef__bmp_decode(const unsigned char *data, size_t size, int channels,
                   const char *what, ef_buffer **out, int64_t shape[3],
                   ef__err *err)
{
    bmp_header b;
    int rc = read_header(data, size, what, &b, err);
    if (rc != EF_OK)
        return rc;
    int c = channels ? channels : b.native;
    rc = ef__image_alloc(b.h, b.w, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    size_t pixels = (size_t)(b.h * b.w);
    unsigned char *px = ef__image_scratch(*out, c, b.native, pixels);
    if (!px)
        return ef__image_decode_end(
            px, out,
            ef__err_set(err, EF_ENOMEM, "%s: out of memory for RGB pixels",
                        what));
    unsigned char pal[256][3];
    for (int i = 0; i < 256; i++) /* PIL's default palette: grays */
        pal[i][0] = pal[i][1] = pal[i][2] = (unsigned char)i;
    for (int i = 0; i < b.colors && b.bits <= 8; i++) {
        const unsigned char *e = data + b.palette + (size_t)i * b.entry;
        pal[i][0] = e[2], pal[i][1] = e[1], pal[i][2] = e[0];
    }
    for (int64_t y = 0; y < b.h; y++) {
        const unsigned char *row =
            data + b.data + b.stride * (size_t)(b.top_down ? y : b.h - 1 - y);
        unsigned char *dst = px + (size_t)(y * b.w) * (size_t)b.native;
        if (b.bits <= 8)
            palette_row(row, &b, (const unsigned char(*)[3])pal, dst);
        else
            rgb_row(row, &b, dst);
    }
    return ef__image_convert_end(px, b.native, out, EF_OK);
}
