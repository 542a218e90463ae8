/* Image decoding's front door: picks the decoder by magic bytes (never by
 * file name: datasets hold PNGs named .jpg). The decoders' shared checks
 * and helpers are in pixels.c, below both. */
#include <string.h>

#include "codec/image.h"

static const unsigned char jpeg_magic[3] = {0xFF, 0xD8, 0xFF};
static const unsigned char png_magic[8] = {0x89, 'P',  'N',  'G',
                                           '\r', '\n', 0x1A, '\n'};

enum { NEITHER, JPEG, PNG };

static int sniff(const unsigned char *p, size_t size)
{
    if (size >= sizeof jpeg_magic && !memcmp(p, jpeg_magic, sizeof jpeg_magic))
        return JPEG;
    if (size >= sizeof png_magic && !memcmp(p, png_magic, sizeof png_magic))
        return PNG;
    return NEITHER;
}

#if !defined(EF_HAVE_TURBOJPEG) || !defined(EF_HAVE_SPNG)
/* An image of a format whose library this build lacks. */
static int missing(const char *what, const char *format, const char *library,
                   const char *package, ef__err *err)
{
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: a %s image, but echoflow was built without %s "
                       "(apt-get install %s, then rebuild)",
                       what, format, library, package);
}
#endif

/* EF_EFORMAT for bytes that are neither format. */
static int not_an_image(const unsigned char *p, size_t size, const char *what,
                        ef__err *err)
{
    if (size == 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: empty, expected a JPEG or PNG image", what);
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
                       "%s: neither JPEG (ff d8 ff) nor PNG (89 50 4e 47 0d 0a "
                       "1a 0a): %zu bytes starting %s",
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

int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err)
{
    const unsigned char *p = data;
    (void)shape; /* in a build with neither codec */
    *out = NULL;
    int rc = check_channels(channels, what, err);
    if (rc != EF_OK)
        return rc;
    switch (sniff(p, size)) {
    case JPEG:
#ifdef EF_HAVE_TURBOJPEG
        return ef__jpeg_decode(p, size, channels, what, out, shape, err);
#else
        return missing(what, "JPEG", "libjpeg-turbo", "libturbojpeg0-dev", err);
#endif
    case PNG:
#ifdef EF_HAVE_SPNG
        return ef__png_decode(p, size, channels, what, out, shape, err);
#else
        return missing(what, "PNG", "libspng", "libspng-dev", err);
#endif
    default:
        return not_an_image(p, size, what, err);
    }
}

int ef__image_probe(const void *data, size_t size, int channels,
                    const char *what, int64_t shape[3], int *jpeg,
                    ef__err *err)
{
    const unsigned char *p = data;
    int rc = check_channels(channels, what, err);
    if (rc != EF_OK)
        return rc;
    int kind = sniff(p, size), stored = 3;
    *jpeg = kind == JPEG;
    switch (kind) {
    case JPEG:
#ifdef EF_HAVE_TURBOJPEG
        rc = ef__jpeg_probe(p, size, what, &shape[0], &shape[1], &stored, err);
        break;
#else
        return missing(what, "JPEG", "libjpeg-turbo", "libturbojpeg0-dev", err);
#endif
    case PNG:
#ifdef EF_HAVE_SPNG
        rc = ef__png_probe(p, size, what, &shape[0], &shape[1], &stored, err);
        break;
#else
        return missing(what, "PNG", "libspng", "libspng-dev", err);
#endif
    default:
        return not_an_image(p, size, what, err);
    }
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
    if (sniff(data, size) == JPEG)
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
