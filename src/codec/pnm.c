/* SPDX-License-Identifier: Apache-2.0 */
/* Netpbm images, read here: PBM (P1, P4), PGM (P2, P5) and PPM (P3, P6),
 * plain (ASCII) and binary, with '#' comments in the header. Samples of
 * any maxval up to 65535 (two bytes, big-endian, above 255) are scaled to
 * 0..255 as PIL scales them, round(v / maxval * 255) in doubles, ties to
 * even; bitmaps are 0 (black) and 255. PIL gives a 16-bit PGM as 32-bit
 * integers, which its own conversion to 8 bits clips; here it is scaled
 * like every other maxval. */
#include <math.h>
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/buffer.h"

typedef struct {
    char kind;      /* '1' to '6' */
    int64_t w, h;
    unsigned maxval; /* 1 for bitmaps */
    int c;           /* 1 gray or bitmap, 3 colour */
    size_t data;     /* offset of the first sample */
} pnm_header;

static const char *format_name(char kind)
{
    return kind == '1' || kind == '4'   ? "PBM"
           : kind == '2' || kind == '5' ? "PGM"
                                        : "PPM";
}

static int space(unsigned char ch)
{
    return ch == ' ' || (ch >= '\t' && ch <= '\r');
}

/* Skips blanks and comments from *at; returns whether a byte is left. */
static int skip_blanks(const unsigned char *p, size_t size, size_t *at)
{
    while (*at < size) {
        if (p[*at] == '#') {
            while (*at < size && p[*at] != '\n' && p[*at] != '\r')
                (*at)++;
        } else if (space(p[*at])) {
            (*at)++;
        } else {
            return 1;
        }
    }
    return 0;
}

/* A decimal number of at most `digits` digits (1 for plain bitmaps) at
 * *at, after blanks; -1 at the end of the data, -2 for anything else. */
static int64_t number(const unsigned char *p, size_t size, size_t *at,
                      int digits)
{
    if (!skip_blanks(p, size, at))
        return -1;
    int64_t v = 0;
    int n = 0;
    while (*at < size && p[*at] >= '0' && p[*at] <= '9' && n < digits)
        v = v * 10 + (p[(*at)++] - '0'), n++;
    if (!n || (digits > 1 && *at < size && !space(p[*at]) && p[*at] != '#'))
        return -2;
    return v;
}

static int read_header(const unsigned char *p, size_t size, const char *what,
                       pnm_header *b, ef__err *err)
{
    memset(b, 0, sizeof *b);
    b->kind = size >= 2 ? (char)p[1] : '6';
    const char *name = format_name(b->kind);
    int bitmap = b->kind == '1' || b->kind == '4';
    b->c = b->kind == '3' || b->kind == '6' ? 3 : 1;
    size_t at = 2;
    int64_t v[3] = {0, 0, 1};
    static const char *const field[3] = {"width", "height", "maxval"};
    for (int i = 0; i < (bitmap ? 2 : 3); i++) {
        v[i] = number(p, size, &at, 9);
        if (v[i] == -1)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: truncated %s: the header ends before its "
                               "%s",
                               what, name, field[i]);
        if (v[i] < 0)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: corrupt %s: expected the %s as a "
                               "decimal number at byte %zu",
                               what, name, field[i], at);
    }
    b->w = v[0], b->h = v[1], b->maxval = (unsigned)v[2];
    if (v[2] < 1 || v[2] > 65535)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: corrupt %s: maxval %lld; expected 1 to 65535",
                           what, name, (long long)v[2]);
    int rc = ef__image_check_size(b->h, b->w, name, what, err);
    if (rc != EF_OK)
        return rc;
    /* binary samples start after the one blank that ends the header */
    b->data = at + (b->kind >= '4');
    size_t samples = (size_t)(b->w * b->h) * (size_t)b->c;
    size_t need = b->kind == '4'   ? (size_t)(b->w + 7) / 8 * (size_t)b->h
                  : b->kind >= '5' ? samples * (b->maxval > 255 ? 2 : 1)
                                   : samples; /* a byte each, at least */
    if (b->data > size || size - b->data < need)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated %s: %lld x %lld pixels need %s%zu "
                           "bytes of samples, the file has %zu after the "
                           "header",
                           what, name, (long long)b->w, (long long)b->h,
                           b->kind < '4' ? "at least " : "", need,
                           b->data > size ? 0 : size - b->data);
    return EF_OK;
}

int ef__pnm_probe(const unsigned char *data, size_t size, const char *what,
                  int64_t *h, int64_t *w, int *c, ef__err *err)
{
    pnm_header b;
    int rc = read_header(data, size, what, &b, err);
    *h = b.h, *w = b.w, *c = b.c;
    return rc;
}

/* A sample of 0..maxval as 0..255, as PIL computes it. */
static unsigned char scale(unsigned v, unsigned maxval)
{
    if (maxval == 255)
        return (unsigned char)v;
    double s = nearbyint((double)v / maxval * 255.0);
    return (unsigned char)(s > 255 ? 255 : s);
}

static void read_binary(const unsigned char *p, const pnm_header *b,
                        unsigned char *dst)
{
    size_t n = (size_t)(b->w * b->h) * (size_t)b->c;
    p += b->data;
    if (b->kind == '4') {
        size_t stride = (size_t)(b->w + 7) / 8;
        for (int64_t y = 0; y < b->h; y++)
            for (int64_t x = 0; x < b->w; x++)
                *dst++ = p[(size_t)y * stride + (size_t)x / 8] >>
                                 (7 - x % 8) & 1
                             ? 0
                             : 255;
    } else if (b->maxval > 255) {
        for (size_t i = 0; i < n; i++)
            dst[i] = scale((unsigned)p[2 * i] << 8 | p[2 * i + 1], b->maxval);
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = scale(p[i] > b->maxval ? b->maxval : p[i], b->maxval);
    }
}

static int read_plain(const unsigned char *p, size_t size, const pnm_header *b,
                      const char *what, unsigned char *dst, ef__err *err)
{
    size_t n = (size_t)(b->w * b->h) * (size_t)b->c, at = b->data;
    for (size_t i = 0; i < n; i++) {
        int64_t v = number(p, size, &at, b->kind == '1' ? 1 : 5);
        if (v == -1)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: truncated %s: %zu of %zu samples",
                               what, format_name(b->kind), i, n);
        if (v < 0 || v > b->maxval)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: corrupt %s: sample %zu at byte %zu is "
                               "not a number of 0 to %u",
                               what, format_name(b->kind), i, at, b->maxval);
        dst[i] = b->kind == '1' ? (v ? 0 : 255)
                                : scale((unsigned)v, b->maxval);
    }
    return EF_OK;
}

int ef__pnm_decode(const unsigned char *data, size_t size, int channels,
                   const char *what, ef_buffer **out, int64_t shape[3],
                   ef__err *err)
{
    pnm_header b;
    int rc = read_header(data, size, what, &b, err);
    if (rc != EF_OK)
        return rc;
    int c = channels ? channels : b.c;
    rc = ef__image_alloc(b.h, b.w, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    unsigned char *px = ef__image_scratch(*out, c, b.c, (size_t)(b.h * b.w));
    if (!px)
        rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory for pixels",
                         what);
    else if (b.kind >= '4')
        read_binary(data, &b, px);
    else
        rc = read_plain(data, size, &b, what, px, err);
    return ef__image_convert_end(px, b.c, out, rc);
}
