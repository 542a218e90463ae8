/* SPDX-License-Identifier: Apache-2.0 */
/* JPEG through libjpeg-turbo's TurboJPEG API.
 *
 * libjpeg treats a truncated or damaged stream as a warning and fills the
 * rest of the image with grey; a training set must not silently learn from
 * those, so decoding stops at the first warning and reports the image as
 * corrupt. */
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/alloc.h"

#ifdef EF_HAVE_TURBOJPEG
#include <turbojpeg.h>

_Static_assert(SIZE_MAX <= ULONG_MAX, "TurboJPEG takes sizes as unsigned long");

/* The decoder's complaint, warnings included, as EF_EFORMAT. */
static int jpeg_failed(tjhandle tj, const char *what, const char *step,
                       ef__err *err)
{
    const char *kind = tjGetErrorCode(tj) == TJERR_WARNING
                           ? "truncated or corrupt JPEG data"
                           : "corrupt JPEG";
    return ef__err_set(err, EF_EFORMAT, "%s: %s (in the %s): libjpeg-turbo: %s",
                       what, kind, step, tjGetErrorStr2(tj));
}

static int decode_pixels(tjhandle tj, const unsigned char *data, size_t size,
                         int h, int w, int colorspace, int channels,
                         const char *what, ef_buffer **out, int64_t shape[3],
                         ef__err *err)
{
    int c = channels ? channels : colorspace == TJCS_GRAY ? 1 : 3;
    /* TurboJPEG cannot turn CMYK into RGB itself: decode the inks, convert
     * here */
    int cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
    int rc = ef__image_alloc(h, w, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    size_t pixels = (size_t)h * (size_t)w;
    unsigned char *dst = ef_buffer_data(*out), *px = dst;
    if (cmyk && !(px = ef__malloc(pixels * 4))) {
        rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory for CMYK pixels",
                         what);
    } else if (tjDecompress2(tj, data, (unsigned long)size, px, w, 0, h,
                             cmyk     ? TJPF_CMYK
                             : c == 1 ? TJPF_GRAY
                                      : TJPF_RGB,
                             TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
        rc = jpeg_failed(tj, what, "image data", err);
    } else if (cmyk) {
        ef__image_cmyk_to_rgb(px, pixels, px);
        if (c == 3)
            memcpy(dst, px, pixels * 3);
        else
            ef__image_rgb_to_gray(px, pixels, dst);
    }
    return ef__image_decode_end(px, out, rc);
}

/* Reads and checks the header: the frame's size within the limits, a
 * layout TurboJPEG can name. */
static int read_header(tjhandle tj, const unsigned char *data, size_t size,
                       const char *what, int *h, int *w, int *colorspace,
                       ef__err *err)
{
    /* a tables-only stream "succeeds" without setting the size: start
     * from none */
    int subsamp = -1;
    *w = *h = 0;
    *colorspace = -1;
    if (tjDecompressHeader3(tj, data, (unsigned long)size, w, h, &subsamp,
                            colorspace) != 0)
        return jpeg_failed(tj, what, "header", err);
    if (*w == 0 && *h == 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: JPEG without a frame header (tables only, or "
                           "truncated before the image)",
                           what);
    return ef__image_check_size(*h, *w, "JPEG", what, err);
}

static tjhandle start(const char *what, ef__err *err)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        ef__err_set(err, EF_ENOMEM, "%s: cannot start the JPEG decoder: %s",
                    what, tjGetErrorStr2(NULL));
    return tj;
}

int ef__jpeg_decode(const unsigned char *data, size_t size, int channels,
                    const char *what, ef_buffer **out, int64_t shape[3],
                    ef__err *err)
{
    tjhandle tj = start(what, err);
    if (!tj)
        return EF_ENOMEM;
    int w, h, colorspace;
    int rc = read_header(tj, data, size, what, &h, &w, &colorspace, err);
    if (rc == EF_OK)
        rc = decode_pixels(tj, data, size, h, w, colorspace, channels, what,
                           out, shape, err);
    tjDestroy(tj);
    return rc;
}

int ef__jpeg_probe(const unsigned char *data, size_t size, const char *what,
                   int64_t *h, int64_t *w, int *c, ef__err *err)
{
    tjhandle tj = start(what, err);
    if (!tj)
        return EF_ENOMEM;
    int ih, iw, colorspace;
    int rc = read_header(tj, data, size, what, &ih, &iw, &colorspace, err);
    tjDestroy(tj);
    *h = ih;
    *w = iw;
    *c = colorspace == TJCS_GRAY ? 1 : 3;
    return rc;
}

int ef__jpeg_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                    int quality, ef_buffer **out, ef__err *err)
{
    *out = NULL;
    int rc = ef__image_check_encode(h, w, c, "JPEG", err);
    if (rc != EF_OK)
        return rc;
    if (quality < 1 || quality > 100)
        return ef__err_set(err, EF_EINVAL,
                           "JPEG encoder: quality %d, expected 1 to 100",
                           quality);
    tjhandle tj = tjInitCompress();
    if (!tj)
        return ef__err_set(err, EF_ENOMEM, "cannot start the JPEG encoder: %s",
                           tjGetErrorStr2(NULL));
    unsigned char *jpeg = NULL;
    unsigned long len = 0;
    /* colour as most cameras and PIL write it: chroma halved both ways */
    if (tjCompress2(tj, pixels, (int)w, 0, (int)h,
                    c == 1 ? TJPF_GRAY : TJPF_RGB, &jpeg, &len,
                    c == 1 ? TJSAMP_GRAY : TJSAMP_420, quality, 0) != 0)
        rc = ef__err_set(err, EF_EINVAL, "JPEG encoder: libjpeg-turbo: %s",
                         tjGetErrorStr2(tj));
    else if (!(*out = ef_buffer_new(len)))
        rc = ef__err_set(err, EF_ENOMEM, "JPEG encoder: out of memory");
    else
        memcpy(ef_buffer_data(*out), jpeg, len);
    tjFree(jpeg);
    tjDestroy(tj);
    return rc;
}

#else /* no libjpeg-turbo */

#define NO_TURBOJPEG                                                           \
    "echoflow was built without libjpeg-turbo (apt-get install "               \
    "libturbojpeg0-dev, then rebuild)"

int ef__jpeg_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                    int quality, ef_buffer **out, ef__err *err)
{
    (void)pixels, (void)h, (void)w, (void)c, (void)quality;
    *out = NULL;
    return ef__err_set(err, EF_EUNSUPPORTED, "JPEG encoder: " NO_TURBOJPEG);
}

#endif
