/* Image decoding's front door: picks the decoder by magic bytes (never by
 * file name: datasets hold PNGs named .jpg). The decoders' shared checks
 * and helpers are in pixels.c, below both. */
#include <string.h>

#include "codec/image.h"

static const unsigned char jpeg_magic[3] = {0xFF, 0xD8, 0xFF};
static const unsigned char png_magic[8] = {0x89, 'P',  'N',  'G',
                                           '\r', '\n', 0x1A, '\n'};

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

int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err)
{
    const unsigned char *p = data;
    (void)shape; /* in a build with neither codec */
    *out = NULL;
    if (channels != 0 && channels != 1 && channels != 3)
        return ef__err_set(err, EF_EINVAL,
                           "%s: cannot decode to %d channels (0, 1 or 3)", what,
                           channels);
    if (size >= sizeof jpeg_magic && !memcmp(p, jpeg_magic, sizeof jpeg_magic))
#ifdef EF_HAVE_TURBOJPEG
        return ef__jpeg_decode(p, size, channels, what, out, shape, err);
#else
        return missing(what, "JPEG", "libjpeg-turbo", "libturbojpeg0-dev", err);
#endif
    if (size >= sizeof png_magic && !memcmp(p, png_magic, sizeof png_magic))
#ifdef EF_HAVE_SPNG
        return ef__png_decode(p, size, channels, what, out, shape, err);
#else
        return missing(what, "PNG", "libspng", "libspng-dev", err);
#endif
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
