/* SPDX-License-Identifier: Apache-2.0 */
/* WebP through libwebp: lossy and lossless still images, decoded to RGB
 * (alpha dropped, as PIL's convert("RGB") drops it). Animated WebPs need
 * libwebp's demuxer and are refused by name. */
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/buffer.h"

#ifdef EF_HAVE_WEBP
#include <webp/decode.h>

static int webp_failed(VP8StatusCode e, const char *what, const char *step,
                       ef__err *err)
{
    static const char *const why[] = {
        "no error",          "out of memory",   "invalid parameter",
        "bitstream error",   "unsupported feature", "suspended",
        "aborted",           "not enough data",
    };
    const char *text = (unsigned)e < sizeof why / sizeof why[0] ? why[e]
                                                               : "unknown";
    if (e == VP8_STATUS_OUT_OF_MEMORY)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory in libwebp "
                                           "(in the %s)",
                           what, step);
    return ef__err_set(err, EF_EFORMAT, "%s: %s WebP (in the %s): libwebp: %s",
                       what,
                       e == VP8_STATUS_NOT_ENOUGH_DATA ? "truncated"
                                                       : "corrupt",
                       step, text);
}

static int read_header(const unsigned char *data, size_t size, const char *what,
                       WebPBitstreamFeatures *f, ef__err *err)
{
    VP8StatusCode e = WebPGetFeatures(data, size, f);
    if (e != VP8_STATUS_OK)
        return webp_failed(e, what, "header", err);
    if (f->has_animation)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: an animated WebP; echoflow reads still WebP "
                           "images only",
                           what);
    return ef__image_check_size(f->height, f->width, "WebP", what, err);
}

int ef__webp_probe(const unsigned char *data, size_t size, const char *what,
                   int64_t *h, int64_t *w, int *c, ef__err *err)
{
    WebPBitstreamFeatures f;
    int rc = read_header(data, size, what, &f, err);
    *h = f.height, *w = f.width, *c = 3;
    return rc;
}

int ef__webp_decode(const unsigned char *data, size_t size, int channels,
                    const char *what, ef_buffer **out, int64_t shape[3],
                    ef__err *err)
{
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config))
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: libwebp does not match the version echoflow "
                           "was built with",
                           what);
    int rc = read_header(data, size, what, &config.input, err);
    if (rc != EF_OK)
        return rc;
    int64_t h = config.input.height, w = config.input.width;
    int c = channels ? channels : 3;
    rc = ef__image_alloc(h, w, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    size_t pixels = (size_t)(h * w);
    unsigned char *px = ef__image_scratch(*out, c, 3, pixels);
    if (!px)
        return ef__image_decode_end(
            px, out,
            ef__err_set(err, EF_ENOMEM, "%s: out of memory for RGB pixels",
                        what));
    config.output.colorspace = MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = px;
    config.output.u.RGBA.stride = (int)(w * 3);
    config.output.u.RGBA.size = pixels * 3;
    VP8StatusCode e = WebPDecode(data, size, &config);
    WebPFreeDecBuffer(&config.output); /* external memory: frees nothing */
    if (e != VP8_STATUS_OK)
        rc = webp_failed(e, what, "image data", err);
    return ef__image_convert_end(px, 3, out, rc);
}

#endif
