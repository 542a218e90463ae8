/* SPDX-License-Identifier: Apache-2.0 */
/* What the image codecs share: the size limits every header is checked
 * against, the decoded buffer's allocation, and conversions between
 * layouts. The dependency runs one way: image.c dispatches to the
 * per-format codecs (jpeg.c, png.c, webp.c ...), which use this and
 * nothing of image.c. */
#ifndef EF_CODEC_PIXELS_H
#define EF_CODEC_PIXELS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Headers claiming more than this are rejected before anything is
 * allocated: a corrupt or hostile file must not cost gigabytes. */
#define EF__IMAGE_MAX_SIDE 32768
#define EF__IMAGE_MAX_PIXELS (INT64_C(1) << 28)

/* EF_EFORMAT naming the input when a header's size is zero or beyond the
 * limits above; EF_OK otherwise. `format` names it ("JPEG", "BMP" ...). */
int ef__image_check_size(int64_t h, int64_t w, const char *format,
                         const char *what, ef__err *err);
/* EF_EINVAL naming the input unless the window {y0, x0, height, width}
 * lies inside an h x w image and has at least one pixel. */
int ef__image_check_window(const int64_t win[4], int64_t h, int64_t w,
                           const char *what, ef__err *err);
/* The shape and buffer of a decoded image: out = h*w*c bytes. */
int ef__image_alloc(int64_t h, int64_t w, int c, const char *what,
                    ef_buffer **out, int64_t shape[3], ef__err *err);
/* Ends a decode into *out (from ef__image_alloc) that went through `px`,
 * a scratch buffer unless it is *out's own memory: frees it and, when rc
 * is an error, releases *out and sets it to NULL. Returns rc. */
int ef__image_decode_end(unsigned char *px, ef_buffer **out, int rc);
/* Packed RGB to ITU-R 601 luma; dst may equal src (it writes behind the
 * reads). */
void ef__image_rgb_to_gray(const unsigned char *src, size_t pixels,
                           unsigned char *dst);
/* Where a decoder writes pixels of `native` channels (1 or 3) when the
 * caller asked for `c`: *out's own memory when they agree, else a new
 * scratch buffer of pixels * native bytes (NULL: out of memory), which
 * ef__image_convert_end turns into *out's layout. */
unsigned char *ef__image_scratch(ef_buffer *out, int c, int native,
                                 size_t pixels);
/* Ends a decode through ef__image_scratch: when rc is EF_OK and px is a
 * scratch buffer, its `native` channels become *out's (gray replicated,
 * RGB to luma); then as ef__image_decode_end. */
int ef__image_convert_end(unsigned char *px, int native, ef_buffer **out,
                          int rc);
/* Adobe CMYK JPEG pixels (inverted inks, 255 = none) to packed RGB:
 * r = c * k / 255, and so on; dst may equal src. */
void ef__image_cmyk_to_rgb(const unsigned char *src, size_t pixels,
                           unsigned char *dst);
/* Checks an encoder's arguments: sides 1 to EF__IMAGE_MAX_SIDE, c 1 or 3. */
int ef__image_check_encode(int64_t h, int64_t w, int c, const char *format,
                           ef__err *err);

#endif
