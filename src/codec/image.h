/* Still images: JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libspng),
 * decoded to 8-bit [H,W,C] pixels, and encoded back for tools and tests.
 * A build without one of the libraries answers EF_EUNSUPPORTED for that
 * format, naming the Debian package to install. */
#ifndef EF_CODEC_IMAGE_H
#define EF_CODEC_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Headers claiming more than this are rejected before anything is
 * allocated: a corrupt or hostile file must not cost gigabytes. */
#define EF__IMAGE_MAX_SIDE 32768
#define EF__IMAGE_MAX_PIXELS (INT64_C(1) << 28)

/* Decodes a JPEG or PNG image held in memory, chosen by its magic bytes,
 * into a new buffer of u8 pixels, row-major [H,W,C]; the caller owns *out.
 * channels = 0 keeps the stored layout (1 for grayscale, 3 for colour;
 * alpha is dropped), 1 or 3 converts (ITU-R 601 luma for grayscale).
 * `what` names the input in messages ("field 'png'").
 * EF_EFORMAT for anything that is neither format, truncated or corrupt;
 * EF_EUNSUPPORTED when the format's library was not built in. */
int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err);

/* Encodes u8 pixels [h,w,c] (c = 1 gray or 3 RGB) as a PNG / a JPEG of
 * the given quality (1 to 100), into a new buffer the caller owns. */
int ef__png_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                   ef_buffer **out, ef__err *err);
int ef__jpeg_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                    int quality, ef_buffer **out, ef__err *err);

/* ---- for image.c, jpeg.c and png.c only ------------------------- */

/* The per-format decoders behind ef__image_decode (magic already
 * checked, channels already validated). */
int ef__jpeg_decode(const unsigned char *data, size_t size, int channels,
                    const char *what, ef_buffer **out, int64_t shape[3],
                    ef__err *err);
int ef__png_decode(const unsigned char *data, size_t size, int channels,
                   const char *what, ef_buffer **out, int64_t shape[3],
                   ef__err *err);

/* EF_EFORMAT naming the input when a header's size is zero or beyond the
 * limits above; EF_OK otherwise. `format` is "JPEG" or "PNG". */
int ef__image_check_size(int64_t h, int64_t w, const char *format,
                         const char *what, ef__err *err);
/* The shape and buffer of a decoded image: out = h*w*c bytes. */
int ef__image_alloc(int64_t h, int64_t w, int c, const char *what,
                    ef_buffer **out, int64_t shape[3], ef__err *err);
/* Packed RGB to ITU-R 601 luma; dst may equal src (it writes behind the
 * reads). */
void ef__image_rgb_to_gray(const unsigned char *src, size_t pixels,
                           unsigned char *dst);
/* Checks an encoder's arguments: sides 1 to EF__IMAGE_MAX_SIDE, c 1 or 3. */
int ef__image_check_encode(int64_t h, int64_t w, int c, const char *format,
                           ef__err *err);

#endif
