/* What the JPEG and PNG codecs share (see pixels.h). */
#include "codec/pixels.h"

#include "core/alloc.h"

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

int ef__image_decode_end(unsigned char *px, ef_buffer **out, int rc)
{
    if (px != ef_buffer_data(*out))
        ef__free(px);
    if (rc != EF_OK) {
        ef_buffer_release(*out);
        *out = NULL;
    }
    return rc;
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
