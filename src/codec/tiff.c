/* SPDX-License-Identifier: Apache-2.0 */
/* TIFF through libtiff: the first image of the file. 8-bit gray and RGB
 * in strips (any compression libtiff has: none, LZW, deflate, PackBits
 * ...) are read row by row and keep their samples exactly, extra samples
 * (alpha) dropped, as PIL reads them; everything else libtiff can turn
 * into RGBA (tiles, palettes, bilevel, 16 bits, YCbCr, CMYK ...) goes
 * through TIFFReadRGBAImageOriented. Gray images (min-is-black or
 * min-is-white) are stored as one channel, the rest as RGB.
 *
 * libtiff reports through handlers: each file opened here has its own,
 * which keeps the first message for ours, so that nothing is printed and
 * threads do not share one. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/alloc.h"
#include "core/buffer.h"

#ifdef EF_HAVE_TIFF
#include <tiffio.h>

typedef struct {
    const unsigned char *data;
    size_t size;
    uint64_t at;
    char msg[200]; /* libtiff's first complaint */
} source;

static tmsize_t read_fn(thandle_t h, void *buf, tmsize_t n)
{
    source *s = h;
    if (n < 0 || s->at >= s->size)
        return 0;
    size_t left = s->size - (size_t)s->at;
    size_t k = (size_t)n < left ? (size_t)n : left;
    memcpy(buf, s->data + s->at, k);
    s->at += k;
    return (tmsize_t)k;
}

static tmsize_t write_fn(thandle_t h, void *buf, tmsize_t n)
{
    (void)h, (void)buf, (void)n;
    return -1;
}

static toff_t seek_fn(thandle_t h, toff_t off, int whence)
{
    source *s = h;
    uint64_t base = whence == SEEK_CUR ? s->at
                    : whence == SEEK_END ? s->size
                                         : 0;
    s->at = base + off; /* past the end reads nothing */
    return s->at;
}

static int close_fn(thandle_t h)
{
    (void)h;
    return 0;
}

static toff_t size_fn(thandle_t h)
{
    return ((source *)h)->size;
}

static int map_fn(thandle_t h, void **base, toff_t *size)
{
    (void)h, (void)base, (void)size;
    return 0;
}

static void unmap_fn(thandle_t h, void *base, toff_t size)
{
    (void)h, (void)base, (void)size;
}

static int on_error(TIFF *tif, void *user, const char *module, const char *fmt,
                    va_list ap)
{
    (void)tif, (void)module;
    source *s = user;
    if (!s->msg[0])
        vsnprintf(s->msg, sizeof s->msg, fmt, ap);
    return 1; /* handled: libtiff's global handler stays quiet */
}

static int on_warning(TIFF *tif, void *user, const char *module,
                      const char *fmt, va_list ap)
{
    (void)tif, (void)user, (void)module, (void)fmt, (void)ap;
    return 1;
}

static int tiff_failed(const source *s, const char *what, const char *step,
                       ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: truncated or corrupt TIFF (in the %s): libtiff: %s",
                       what, step, s->msg[0] ? s->msg : "no message");
}

/* The first image's header, read and checked. */
typedef struct {
    TIFF *tif;
    uint32_t w, h;
    uint16_t bits, spp, photometric, planar, format;
    int native; /* 1 gray, 3 colour */
    int direct; /* read row by row (else through RGBA) */
} header;

static int open_tiff(source *s, const char *what, header *t, ef__err *err)
{
    TIFFOpenOptions *o = TIFFOpenOptionsAlloc();
    if (!o)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory for libtiff",
                           what);
    TIFFOpenOptionsSetErrorHandlerExtR(o, on_error, s);
    TIFFOpenOptionsSetWarningHandlerExtR(o, on_warning, s);
    /* no single buffer beyond the largest image the limits allow, in
     * RGBA: a hostile strip size is refused, not allocated */
    TIFFOpenOptionsSetMaxSingleMemAlloc(o, (tmsize_t)EF__IMAGE_MAX_PIXELS * 4);
    t->tif = TIFFClientOpenExt(what, "rm", s, read_fn, write_fn, seek_fn,
                               close_fn, size_fn, map_fn, unmap_fn, o);
    TIFFOpenOptionsFree(o);
    if (!t->tif)
        return tiff_failed(s, what, "header", err);
    return EF_OK;
}

static int read_header(source *s, const char *what, header *t, ef__err *err)
{
    int rc = open_tiff(s, what, t, err);
    if (rc != EF_OK)
        return rc;
    TIFF *tif = t->tif;
    t->w = t->h = 0;
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &t->w);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &t->h);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &t->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &t->spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &t->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &t->format);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &t->photometric))
        t->photometric = t->spp >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK;
    rc = ef__image_check_size(t->h, t->w, "TIFF", what, err);
    char why[1024];
    if (rc == EF_OK && !TIFFRGBAImageOK(tif, why))
        rc = ef__err_set(err, EF_EUNSUPPORTED,
                         "%s: a TIFF libtiff cannot turn into RGB "
                         "(photometric %u, %u samples of %u bits): %s",
                         what, t->photometric, t->spp, t->bits, why);
    if (rc != EF_OK) {
        TIFFClose(tif);
        return rc;
    }
    int gray = t->photometric == PHOTOMETRIC_MINISBLACK ||
               t->photometric == PHOTOMETRIC_MINISWHITE;
    t->native = gray ? 1 : 3;
    t->direct = !TIFFIsTiled(tif) && t->planar == PLANARCONFIG_CONTIG &&
                t->bits == 8 && t->format == SAMPLEFORMAT_UINT &&
                ((t->photometric == PHOTOMETRIC_MINISBLACK && t->spp >= 1) ||
                 (t->photometric == PHOTOMETRIC_RGB && t->spp >= 3));
    return EF_OK;
}

int ef__tiff_probe(const unsigned char *data, size_t size, const char *what,
                   int64_t *h, int64_t *w, int *c, ef__err *err)
{
    source s = {data, size, 0, ""};
    header t;
    int rc = read_header(&s, what, &t, err);
    if (rc != EF_OK)
        return rc;
    *h = t.h, *w = t.w, *c = t.native;
    TIFFClose(t.tif);
    return EF_OK;
}

/* 8-bit gray or RGB in strips, a row at a time. */
static int read_rows(source *s, const header *t, const char *what,
                     unsigned char *px, ef__err *err)
{
    tmsize_t len = TIFFScanlineSize(t->tif);
    unsigned char *row = len > 0 ? ef__malloc((size_t)len) : NULL;
    if (!row)
        return len > 0 ? ef__err_set(err, EF_ENOMEM,
                                     "%s: out of memory for a TIFF row", what)
                       : tiff_failed(s, what, "header", err);
    int rc = EF_OK;
    for (uint32_t y = 0; y < t->h && rc == EF_OK; y++) {
        unsigned char *dst = px + (size_t)y * t->w * (size_t)t->native;
        if (TIFFReadScanline(t->tif, row, y, 0) < 0) {
            rc = tiff_failed(s, what, "image data", err);
            break;
        }
        for (uint32_t x = 0; x < t->w; x++)
            memcpy(dst + (size_t)x * t->native, row + (size_t)x * t->spp,
                   (size_t)t->native);
    }
    ef__free(row);
    return rc;
}

/* Anything else libtiff reads, through its RGBA rendering. */
static int read_rgba(source *s, const header *t, const char *what,
                     unsigned char *px, ef__err *err)
{
    size_t pixels = (size_t)t->w * t->h;
    uint32_t *raster = ef__malloc(pixels * sizeof *raster);
    if (!raster)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for TIFF RGBA pixels", what);
    int rc = EF_OK;
    if (!TIFFReadRGBAImageOriented(t->tif, t->w, t->h, raster,
                                   ORIENTATION_TOPLEFT, 1))
        rc = tiff_failed(s, what, "image data", err);
    for (size_t i = 0; i < pixels && rc == EF_OK; i++) {
        uint32_t v = raster[i];
        if (t->native == 1) {
            px[i] = (unsigned char)TIFFGetR(v);
        } else {
            px[3 * i] = (unsigned char)TIFFGetR(v);
            px[3 * i + 1] = (unsigned char)TIFFGetG(v);
            px[3 * i + 2] = (unsigned char)TIFFGetB(v);
        }
    }
    ef__free(raster);
    return rc;
}

int ef__tiff_decode(const unsigned char *data, size_t size, int channels,
                    const char *what, ef_buffer **out, int64_t shape[3],
                    ef__err *err)
{
    source s = {data, size, 0, ""};
    header t;
    int rc = read_header(&s, what, &t, err);
    if (rc != EF_OK)
        return rc;
    int c = channels ? channels : t.native;
    rc = ef__image_alloc(t.h, t.w, c, what, out, shape, err);
    if (rc == EF_OK) {
        unsigned char *px =
            ef__image_scratch(*out, c, t.native, (size_t)t.w * t.h);
        if (!px)
            rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory for pixels",
                             what);
        else if (t.direct)
            rc = read_rows(&s, &t, what, px, err);
        else
            rc = read_rgba(&s, &t, what, px, err);
        rc = ef__image_convert_end(px, t.native, out, rc);
    }
    TIFFClose(t.tif);
    return rc;
}

#endif
