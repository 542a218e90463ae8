/* Image decoding's front door: picks the decoder by magic bytes (never by
 * file name: datasets hold PNGs named .jpg), and the checks and helpers
 * both decoders share. */
#include <string.h>

#include "codec/image.h"

static const unsigned char jpeg_magic[3] = {0xFF, 0xD8, 0xFF};
static const unsigned char png_magic[8] = {0x89, 'P',  'N',  'G',
                                           '\r', '\n', 0x1A, '\n'};

int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err)
{
    const unsigned char *p = data;
    *out = NULL;
    if (channels != 0 && channels != 1 && channels != 3)
        return ef__err_set(err, EF_EINVAL,
                           "%s: cannot decode to %d channels (0, 1 or 3)", what,
                           channels);
    if (size >= sizeof jpeg_magic && !memcmp(p, jpeg_magic, sizeof jpeg_magic))
        return ef__jpeg_decode(p, size, channels, what, out, shape, err);
    if (size >= sizeof png_magic && !memcmp(p, png_magic, sizeof png_magic))
        return ef__png_decode(p, size, channels, what, out, shape, err);
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

int ef__image_check_size(int64_t h, int64_t w, const char *format,
                         const char *what, ef__err *err)
{
    if (h < 1 || w < 1 || h > EF__IMAGE_MAX_SIDE || w > EF__IMAGE_MAX_SIDE ||
        h * w > EF__IMAGE_MAX_PIXELS)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %s header says %lld x %lld pixels; expected "
                           "sides of 1 to %d and at most %lld pixels",
                           what, format, (long long)w, (long long)h,
                           EF__IMAGE_MAX_SIDE, (long long)EF__IMAGE_MAX_PIXELS);
    return EF_OK;
}

int ef__image_alloc(int64_t h, int64_t w, int c, const char *what,
                    ef_buffer **out, int64_t shape[3], ef__err *err)
{
    /* sizes were checked: h * w * c < 2^30 */
    *out = ef_buffer_new((size_t)(h * w * c));
    if (!*out)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for %lld x %lld x %d pixels",
                           what, (long long)h, (long long)w, c);
    shape[0] = h;
    shape[1] = w;
    shape[2] = c;
    return EF_OK;
}

void ef__image_rgb_to_gray(const unsigned char *src, size_t pixels,
                           unsigned char *dst)
{
    /* weights sum to 1000, so gray input (r = g = b) comes back exact */
    for (size_t i = 0; i < pixels; i++, src += 3)
        dst[i] = (unsigned char)((299u * src[0] + 587u * src[1] +
                                  114u * src[2] + 500u) /
                                 1000u);
}

int ef__image_check_encode(int64_t h, int64_t w, int c, const char *format,
                           ef__err *err)
{
    /* the decoder's limits, so that whatever is written reads back */
    if (h < 1 || w < 1 || h > EF__IMAGE_MAX_SIDE || w > EF__IMAGE_MAX_SIDE ||
        h * w > EF__IMAGE_MAX_PIXELS || (c != 1 && c != 3))
        return ef__err_set(err, EF_EINVAL,
                           "%s encoder: cannot encode [%lld,%lld,%d]; expected "
                           "sides of 1 to %d, at most %lld pixels, and 1 or 3 "
                           "channels",
                           format, (long long)h, (long long)w, c,
                           EF__IMAGE_MAX_SIDE, (long long)EF__IMAGE_MAX_PIXELS);
    return EF_OK;
}
