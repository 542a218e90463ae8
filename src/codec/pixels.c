/* SPDX-License-Identifier: Apache-2.0 */
/* What the image codecs share (see pixels.h). */
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

int ef__image_check_window(const int64_t win[4], int64_t h, int64_t w,
                           const char *what, ef__err *err)
{
    if (win[0] >= 0 && win[1] >= 0 && win[2] >= 1 && win[3] >= 1 &&
        win[2] <= h - win[0] && win[3] <= w - win[1])
        return EF_OK;
    return ef__err_set(err, EF_EINVAL,
                       "%s: window of %lld x %lld pixels at row %lld, column "
                       "%lld; expected one inside the %lld x %lld image",
                       what, (long long)win[3], (long long)win[2],
                       (long long)win[0], (long long)win[1], (long long)w,
                       (long long)h);
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

unsigned char *ef__image_scratch(ef_buffer *out, int c, int native,
                                 size_t pixels)
{
    return c == native ? ef_buffer_data(out)
                       : ef__malloc(pixels * (size_t)native);
}

int ef__image_convert_end(unsigned char *px, int native, ef_buffer **out,
                          int rc)
{
    unsigned char *dst = ef_buffer_data(*out);
    size_t pixels = ef_buffer_size(*out) / (native == 1 ? 3 : 1);
    if (rc == EF_OK && px != dst) {
        if (native == 3) {
            ef__image_rgb_to_gray(px, pixels, dst);
        } else {
            for (size_t i = 0; i < pixels; i++)
                dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = px[i];
        }
    }
    return ef__image_decode_end(px, out, rc);
}

void ef__image_cmyk_to_rgb(const unsigned char *src, size_t pixels,
                           unsigned char *dst)
{
    /* pixel i is written at 3i, behind the reads at 4i */
    for (size_t i = 0; i < pixels; i++, src += 4) {
        unsigned c = src[0], m = src[1], y = src[2], k = src[3];
        dst[3 * i] = (unsigned char)((c * k + 127) / 255);
        dst[3 * i + 1] = (unsigned char)((m * k + 127) / 255);
        dst[3 * i + 2] = (unsigned char)((y * k + 127) / 255);
    }
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
