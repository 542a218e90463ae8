/* SPDX-License-Identifier: Apache-2.0 */
/* PNG through libspng: decoding to 8-bit gray or RGB, and encoding 8-bit
 * gray or RGB (what `echoflow pack` writes). libspng allocates through our
 * hook, so the allocation-failure tests reach inside it too. */
#include <string.h>

#include "codec/image.h"
#include "codec/pixels.h"
#include "core/alloc.h"
#include "core/buffer.h"

#ifdef EF_HAVE_SPNG
#include <spng.h>

/* Ancillary chunks (text, ICC profile), inflated or not, may not make
 * libspng keep more than this: a zTXt bomb must not cost gigabytes. Image
 * data (IDAT) is not bound by it. */
#define ANCILLARY_MAX (16u << 20)

static spng_ctx *new_ctx(int flags)
{
    struct spng_alloc alloc = {ef__malloc, ef__realloc, ef__calloc, ef__free};
    return spng_ctx_new2(&alloc, flags);
}

static int png_failed(int e, const char *what, const char *step, ef__err *err)
{
    /* zlib fails to start only for want of memory */
    int nomem = e == SPNG_EMEM || e == SPNG_EZLIB_INIT;
    const char *kind = e == SPNG_IO_EOF || e == SPNG_EIDAT_TOO_SHORT
                           ? "truncated PNG"
                           : "corrupt PNG";
    return ef__err_set(err, nomem ? EF_ENOMEM : EF_EFORMAT,
                       "%s: %s (in the %s): libspng: %s", what, kind, step,
                       spng_strerror(e));
}

/* Decodes the image of a context whose header was read and checked. */
static int decode_pixels(spng_ctx *ctx, const struct spng_ihdr *ihdr,
                         int channels, const char *what, ef_buffer **out,
                         int64_t shape[3], ef__err *err)
{
    int gray = ihdr->color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
               ihdr->color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
    int c = channels ? channels : gray ? 1 : 3;
    /* libspng gives 8-bit gray only from gray without alpha of 8 bits or
     * fewer; everything else comes as RGB, made gray here when asked */
    int direct = c == 3 || (ihdr->color_type == SPNG_COLOR_TYPE_GRAYSCALE &&
                            ihdr->bit_depth <= 8);
    int fmt = c == 3 ? SPNG_FMT_RGB8 : direct ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
    int rc =
        ef__image_alloc(ihdr->height, ihdr->width, c, what, out, shape, err);
    if (rc != EF_OK)
        return rc;
    size_t pixels = (size_t)ihdr->height * ihdr->width;
    size_t len = pixels * (fmt == SPNG_FMT_G8 ? 1 : 3);
    unsigned char *dst = ef_buffer_data(*out);
    unsigned char *px = direct ? dst : ef__malloc(len);
    int e;
    if (!px)
        rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory for RGB pixels",
                         what);
    else if ((e = spng_decode_image(ctx, px, len, fmt, 0)) != 0)
        rc = png_failed(e, what, "image data", err);
    else if (!direct)
        ef__image_rgb_to_gray(px, pixels, dst);
    return ef__image_decode_end(px, out, rc);
}

/* A decoder context in *out with the header read and checked; on
 * failure, *out is NULL. */
static int read_header(const unsigned char *data, size_t size, const char *what,
                       struct spng_ihdr *ihdr, spng_ctx **out, ef__err *err)
{
    spng_ctx *ctx = *out = new_ctx(0);
    if (!ctx)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for the PNG decoder", what);
    /* a bad checksum in a critical chunk is an error; in an ancillary one
     * the chunk is dropped (libspng's defaults, stated) */
    int e = spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
    if (!e)
        e = spng_set_chunk_limits(ctx, ANCILLARY_MAX, ANCILLARY_MAX);
    if (!e)
        e = spng_set_png_buffer(ctx, data, size);
    if (!e)
        e = spng_get_ihdr(ctx, ihdr);
    /* the size check is ours rather than spng_set_image_limits(), so that
     * the message says what the header claimed */
    int rc =
        e ? png_failed(e, what, "header", err)
          : ef__image_check_size(ihdr->height, ihdr->width, "PNG", what, err);
    if (rc != EF_OK) {
        spng_ctx_free(ctx);
        *out = NULL;
    }
    return rc;
}

int ef__png_probe(const unsigned char *data, size_t size, const char *what,
                  int64_t *h, int64_t *w, int *c, ef__err *err)
{
    struct spng_ihdr ihdr;
    spng_ctx *ctx;
    int rc = read_header(data, size, what, &ihdr, &ctx, err);
    if (rc != EF_OK)
        return rc;
    spng_ctx_free(ctx);
    *h = ihdr.height;
    *w = ihdr.width;
    *c = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
                 ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA
             ? 1
             : 3;
    return EF_OK;
}

int ef__png_decode(const unsigned char *data, size_t size, int channels,
                   const char *what, ef_buffer **out, int64_t shape[3],
                   ef__err *err)
{
    struct spng_ihdr ihdr;
    spng_ctx *ctx;
    int rc = read_header(data, size, what, &ihdr, &ctx, err);
    if (rc != EF_OK)
        return rc;
    rc = decode_pixels(ctx, &ihdr, channels, what, out, shape, err);
    spng_ctx_free(ctx);
    return rc;
}

int ef__png_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                   ef_buffer **out, ef__err *err)
{
    *out = NULL;
    int rc = ef__image_check_encode(h, w, c, "PNG", err);
    if (rc != EF_OK)
        return rc;
    spng_ctx *ctx = new_ctx(SPNG_CTX_ENCODER);
    if (!ctx)
        return ef__err_set(err, EF_ENOMEM,
                           "PNG encoder: out of memory for the encoder");
    struct spng_ihdr ihdr = {
        .width = (uint32_t)w,
        .height = (uint32_t)h,
        .bit_depth = 8,
        .color_type =
            c == 1 ? SPNG_COLOR_TYPE_GRAYSCALE : SPNG_COLOR_TYPE_TRUECOLOR,
    };
    size_t len = 0;
    void *png = NULL;
    int e = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!e)
        e = spng_set_ihdr(ctx, &ihdr);
    if (!e)
        e = spng_encode_image(ctx, pixels, (size_t)(h * w * c), SPNG_FMT_PNG,
                              SPNG_ENCODE_FINALIZE);
    if (!e)
        png = spng_get_png_buffer(ctx, &len, &e);
    spng_ctx_free(ctx);
    /* the PNG was allocated through our hook: the buffer frees it */
    if (png && !(*out = ef__buffer_adopt(png, len, ef__free, png)))
        ef__free(png);
    if (*out)
        return EF_OK;
    if (!e || e == SPNG_EMEM || e == SPNG_EZLIB_INIT) /* as in png_failed */
        return ef__err_set(err, EF_ENOMEM, "PNG encoder: out of memory");
    return ef__err_set(err, EF_EINVAL, "PNG encoder: libspng: %s",
                       spng_strerror(e));
}

#else /* no libspng */

#define NO_SPNG                                                                \
    "echoflow was built without libspng (apt-get install libspng-dev, then "   \
    "rebuild)"

int ef__png_encode(const unsigned char *pixels, int64_t h, int64_t w, int c,
                   ef_buffer **out, ef__err *err)
{
    (void)pixels, (void)h, (void)w, (void)c;
    *out = NULL;
    return ef__err_set(err, EF_EUNSUPPORTED, "PNG encoder: " NO_SPNG);
}

#endif
