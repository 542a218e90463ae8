/* SPDX-License-Identifier: Apache-2.0 */
/* Still images: JPEG (libjpeg-turbo's TurboJPEG API; windows through its
 * libjpeg API), PNG (libspng), WebP (libwebp), TIFF (libtiff), GIF's first
 * frame (giflib), and BMP and Netpbm (PBM, PGM, PPM: read here), decoded
 * to 8-bit [H,W,C] pixels; JPEG and PNG are also encoded back for tools
 * and tests.
 * A build without one of the libraries answers EF_EUNSUPPORTED for that
 * format, naming the Debian package to install. */
#ifndef EF_CODEC_IMAGE_H
#define EF_CODEC_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "codec/pixels.h"
#include "core/err.h"

/* The extensions (field names) of the formats ef__image_decode reads
 * that torchvision's ImageFolder lists too: the default of the decoding
 * stages' `fields` and of the files source's `extensions`, so that what
 * one lists the other decodes. GIF is read when named. */
#define EF__IMAGE_EXTENSIONS "jpg,jpeg,png,ppm,bmp,pgm,tif,tiff,webp"

/* Decodes an image held in memory, its format chosen by its magic bytes,
 * into a new buffer of u8 pixels, row-major [H,W,C]; the caller owns *out.
 * channels = 0 keeps the stored layout (1 for grayscale, 3 for colour,
 * palettes included; alpha is dropped), 1 or 3 converts (ITU-R 601 luma
 * for grayscale).
 * `what` names the input in messages ("field 'png'").
 * EF_EFORMAT for anything that is none of the formats, truncated or
 * corrupt; EF_EUNSUPPORTED when the format's library was not built in, or
 * for a variant of it not read (animated WebP, run-length BMP ...). */
int ef__image_decode(const void *data, size_t size, int channels,
                     const char *what, ef_buffer **out, int64_t shape[3],
                     ef__err *err);

/* The shape ef__image_decode would give the image, [H,W,C] for
 * `channels` as there, read from its header with the same checks and
 * nothing decoded or allocated, so that a stage can refuse what it
 * cannot hold before paying for it; *jpeg tells a JPEG from the rest.
 * Errors as ef__image_decode's. */
int ef__image_probe(const void *data, size_t size, int channels,
                    const char *what, int64_t shape[3], int *jpeg,
                    ef__err *err);

/* Chooses the window to decode once the image's size (h x w) is known:
 * win = {y0, x0, height, width}, in full-size pixels. */
typedef void (*ef__window_fn)(int64_t h, int64_t w, void *user, int64_t win[4]);

/* Decodes the window `choose` picks (called once, with `user`, after the
 * header passed the checks ef__image_decode makes of it; a window not
 * inside the image is EF_EINVAL) of an image into a new buffer of u8
 * [shape] pixels the caller owns; channels and errors as
 * ef__image_decode. The buffer may hold more than the window:
 * inside = {y0, x0, height, width} says where in *out the window lies.
 * A JPEG is decoded only as far as the window needs (jpeg_window.c), and
 * when out_h and out_w are not 0 and the window is at least twice that
 * size both ways, scaled down by 2, 4 or 8 in the IDCT (the largest that
 * keeps the window at least out_h x out_w): `inside` is then in scaled
 * pixels, rounded. Unscaled, the window's pixels are ef__image_decode's,
 * bit for bit. Any other format (or a JPEG in a build without libjpeg) is
 * decoded whole, inside = the window. */
int ef__image_decode_window(const void *data, size_t size, int channels,
                            ef__window_fn choose, void *user, int64_t out_h,
                            int64_t out_w, const char *what, ef_buffer **out,
                            int64_t shape[3], int64_t inside[4], ef__err *err);

/* The full-size pixels {y0, x0, height, width} whose decoded pixels
 * ef__image_decode_window returns as the window `win` of the h x w image
 * `data` when asked for out_h x out_w: win itself, unless the IDCT
 * scaled it by f, when its edges are rounded to multiples of f (a scaled
 * pixel covers f x f full-size ones; at the image's far edge, in part). */
void ef__image_window_covered(const void *data, size_t size,
                              const int64_t win[4], int64_t h, int64_t w,
                              int64_t out_h, int64_t out_w, int64_t covered[4]);

/* Encodes u8 pixels [h,w,c] (c = 1 gray or 3 RGB) as a PNG / a JPEG of
 * the given quality (1 to 100), into a new buffer the caller owns. */
int ef__png_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                   ef_buffer **out, ef__err *err);
int ef__jpeg_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                    int quality, ef_buffer **out, ef__err *err);

/* ---- the per-format codecs, for image.c ------------------------- */

/* A per-format decoder behind ef__image_decode (magic already checked,
 * channels already validated). */
typedef int ef__image_decoder(const unsigned char *data, size_t size,
                              int channels, const char *what, ef_buffer **out,
                              int64_t shape[3], ef__err *err);
/* A per-format probe behind ef__image_probe: the image's height and
 * width, and its channels as stored (1 gray, else 3), with its decoder's
 * checks of the header. */
typedef int ef__image_prober(const unsigned char *data, size_t size,
                             const char *what, int64_t *h, int64_t *w, int *c,
                             ef__err *err);

/* JPEG (TurboJPEG), PNG (libspng), WebP (libwebp), TIFF (libtiff) and
 * GIF (giflib) in builds with their library; BMP and Netpbm always. */
ef__image_decoder ef__jpeg_decode, ef__png_decode, ef__webp_decode,
    ef__tiff_decode, ef__gif_decode, ef__bmp_decode, ef__pnm_decode;
ef__image_prober ef__jpeg_probe, ef__png_probe, ef__webp_probe, ef__tiff_probe,
    ef__gif_probe, ef__bmp_probe, ef__pnm_probe;

/* In builds with libjpeg and TurboJPEG. */
void ef__jpeg_window_covered(const int64_t win[4], int64_t h, int64_t w,
                             int64_t out_h, int64_t out_w, int64_t covered[4]);
int ef__jpeg_decode_window(const unsigned char *data, size_t size, int channels,
                           ef__window_fn choose, void *user, int64_t out_h,
                           int64_t out_w, const char *what, ef_buffer **out,
                           int64_t shape[3], int64_t inside[4], ef__err *err);

#endif
