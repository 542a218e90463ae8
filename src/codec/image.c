/* SPDX-License-Identifier: Apache-2.0 */
/* Image decoding's front door: picks the decoder by magic bytes (never by
 * file name: datasets hold PNGs named .jpg). The decoders' shared checks
 * and helpers are in pixels.c, below them all. */
#include <string.h>

#include "codec/image.h"

/* A format: its magic bytes ('?' matches any byte) and its codec, NULL
 * in a build without its library, which `package` brings. */
typedef struct {
    const char *name;
    const char *magic;
    size_t len;
    ef__image_decoder *decode;
    ef__image_prober *probe;
    const char *library, *package;
} format;

#define MAGIC(s) s, sizeof s - 1
#ifdef EF_HAVE_TURBOJPEG
#define JPEG_CODEC ef__jpeg_decode, ef__jpeg_probe
#else
#define JPEG_CODEC NULL, NULL
#endif
#ifdef EF_HAVE_SPNG
#define PNG_CODEC ef__png_decode, ef__png_probe
#else
#define PNG_CODEC NULL, NULL
#endif
#ifdef EF_HAVE_WEBP
#define WEBP_CODEC ef__webp_decode, ef__webp_probe
#else
#define WEBP_CODEC NULL, NULL
#endif
#ifdef EF_HAVE_TIFF
#define TIFF_CODEC ef__tiff_decode, ef__tiff_probe
#else
#define TIFF_CODEC NULL, NULL
#endif
#ifdef EF_HAVE_GIF
#define GIF_CODEC ef__gif_decode, ef__gif_probe
#else
#define GIF_CODEC NULL, NULL
#endif

/* JPEG first: the table is searched in order and JPEG is the common case */
static const format formats[] = {
    {"JPEG", MAGIC("\xFF\xD8\xFF"), JPEG_CODEC, "libjpeg-turbo",
     "libturbojpeg0-dev"},
    {"PNG", MAGIC("\x89PNG\r\n\x1A\n"), PNG_CODEC, "libspng", "libspng-dev"},
    {"WebP", MAGIC("RIFF????WEBP"), WEBP_CODEC, "libwebp", "libwebp-dev"},
    {"TIFF", MAGIC("II*\0"), TIFF_CODEC, "libtiff", "libtiff-dev"},
    {"TIFF", MAGIC("MM\0*"), TIFF_CODEC, "libtiff", "libtiff-dev"},
    {"BigTIFF", MAGIC("II+\0"), TIFF_CODEC, "libtiff", "libtiff-dev"},
    {"BigTIFF", MAGIC("MM\0+"), TIFF_CODEC, "libtiff", "libtiff-dev"},
    {"GIF", MAGIC("GIF87a"), GIF_CODEC, "giflib", "libgif-dev"},
    {"GIF", MAGIC("GIF89a"), GIF_CODEC, "giflib", "libgif-dev"},
    {"BMP", MAGIC("BM"), ef__bmp_decode, ef__bmp_probe, NULL, NULL},
};

static int magic_matches(const format *f, const unsigned char *p, size_t size)
{
    if (size < f->len)
        return 0;
    for (size_t i = 0; i < f->len; i++)
        if (f->magic[i] != '?' && (unsigned char)f->magic[i] != p[i])
            return 0;
    return 1;
}

/* Netpbm has no fixed magic: 'P', a digit 1 to 6, then a blank or a
 * comment. */
static int is_pnm(const unsigned char *p, size_t size)
{
    return size >= 3 && p[0] == 'P' && p[1] >= '1' && p[1] <= '6' &&
           (p[2] == '#' || p[2] == ' ' || (p[2] >= '\t' && p[2] <= '\r'));
}

static const format pnm = {"Netpbm", "P", 1, ef__pnm_decode, ef__pnm_probe,
                           NULL, NULL};

static const format *sniff(const unsigned char *p, size_t size)
{
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++)
        if (magic_matches(&formats[i], p, size))
            return &formats[i];
    return is_pnm(p, size) ? &pnm : NULL;
}

/* An image of a format whose library this build lacks. */
static int missing(const char *what, const format *f, ef__err *err)
{
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: a %s image, but echoflow was built without %s "
                       "(apt-get install %s, then rebuild)",
                       what, f->name, f->library, f->package);
}

/* EF_EFORMAT for bytes that are none of the formats. */
static int not_an_image(const unsigned char *p, size_t size, const char *what,
                        ef__err *err)
{
    if (size == 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: empty, expected an image (JPEG, PNG, WebP, "
                           "TIFF, GIF, BMP or Netpbm)",
                           what);
    /* the first bytes, in hex, say what it is instead ("3c 68 74 6d": an
     * HTML error page saved as an image) */
    char head[3 * 8 + 1];
    size_t n = size < 8 ? size : 8;
    for (size_t i = 0; i < n; i++) {
        static const char hex[] = "0123456789abcdef";
        head[3 * i] = hex[p[i] >> 4];
        head[3 * i + 1] = hex[p[i] & 15];
        head[3 * i + 2] = i + 1 < n ? ' ' : '\0';
    }
    return ef__err_set(err, EF_EFORMAT,
                       "%s: neither JPEG (ff d8 ff), PNG (89 50 4e 47), WebP "
                       "(RIFF....WEBP), TIFF (II*, MM*), GIF (GIF8), BMP (BM) "
                       "nor Netpbm (P1 to P6): %zu bytes starting %s",
                       what, size, head);
}

static int check_channels(int channels, const char *what, ef__err *err)
{
    if (channels != 0 && channels != 1 && channels != 3)
        return ef__err_set(err, EF_EINVAL,
                           "%s: cannot decode to %d channels (0, 1 or 3)", what,
                           channels);
    return EF_OK;
}

/* The format of `size` bytes at p, for decoding to `channels`: EF_OK
 * with *f, or the error that says why there is none (bad channels, not an
 * image, or a format this build cannot read). */
static int find_format(const unsigned char *p, size_t size, int channels,
                       const char *what, int decoding, const format **f,
                       ef__err *err)
{
    int rc = check_channels(channels, what, err);
    if (rc != EF_OK)
        return rc;
    *f = sniff(p, size);
    if (!*f)
        return not_an_image(p, size, what, err);
    if (decoding ? !(*f)->decode : !(*f)->probe)
        return missing(what, *f, err);
    return EF_OK;
}

int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err)
{
    const format *f;
    *out = NULL;
    int rc = find_format(data, size, channels, what, 1, &f, err);
    return rc == EF_OK ? f->decode(data, size, channels, what, out, shape, err)
                       : rc;
}

int ef__image_probe(const void *data, size_t size, int channels,
                    const char *what, int64_t shape[3], int *jpeg,
                    ef__err *err)
{
    const format *f = NULL;
    int rc = find_format(data, size, channels, what, 0, &f, err);
    *jpeg = f == &formats[0];
    if (rc != EF_OK)
        return rc;
    int stored = 3;
    rc = f->probe(data, size, what, &shape[0], &shape[1], &stored, err);
    shape[2] = channels ? channels : stored;
    return rc;
}

int ef__image_decode_window(const void *data, size_t size, int channels,
                            ef__window_fn choose, void *user, int64_t out_h,
                            int64_t out_w, const char *what, ef_buffer **out,
                            int64_t shape[3], int64_t inside[4], ef__err *err)
{
    *out = NULL;
    int rc = check_channels(channels, what, err);
    if (rc != EF_OK)
        return rc;
#if defined(EF_HAVE_JPEG) && defined(EF_HAVE_TURBOJPEG)
    if (sniff(data, size) == &formats[0])
        return ef__jpeg_decode_window(data, size, channels, choose, user, out_h,
                                      out_w, what, out, shape, inside, err);
#else
    (void)out_h, (void)out_w;
#endif
    /* everything else is decoded whole; the window is where it was */
    rc = ef__image_decode(data, size, channels, what, out, shape, err);
    if (rc == EF_OK) {
        choose(shape[0], shape[1], user, inside);
        rc = ef__image_check_window(inside, shape[0], shape[1], what, err);
    }
    if (rc != EF_OK) {
        ef_buffer_release(*out);
        *out = NULL;
    }
    return rc;
}

void ef__image_window_covered(const void *data, size_t size,
                              const int64_t win[4], int64_t h, int64_t w,
                              int64_t out_h, int64_t out_w, int64_t covered[4])
{
#if defined(EF_HAVE_JPEG) && defined(EF_HAVE_TURBOJPEG)
    if (sniff(data, size) == &formats[0]) {
        ef__jpeg_window_covered(win, h, w, out_h, out_w, covered);
        return;
    }
#else
    (void)data, (void)size, (void)h, (void)w, (void)out_h, (void)out_w;
#endif
    memcpy(covered, win, 4 * sizeof *win);
}
