/* SPDX-License-Identifier: Apache-2.0 */
/* decode: turns the encoded fields of a WebDataset-style sample (u8 [N]
 * fields named by file extension) into tensors. The one field named in
 * `fields` (by default the extensions of every format torchvision's
 * ImageFolder opens: jpg, jpeg, png, ppm, bmp, pgm, tif, tiff, webp; gif
 * when named) becomes a u8 [H,W,C] image called
 * `as`; a `cls` field (ASCII decimal text) becomes the i64 scalar `label`.
 * The format is sniffed from the bytes, not the name. Other fields pass
 * through, sharing their payload (decode_fields.h). */
#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/decode_fields.h"
#include "stages/image/image_stage.h"

static int decode_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const ef__decode_fields *p = ef_map_ctx_user(ctx);
    ef__decode_plan plan;
    int rc = ef__decode_plan_sample(in, p, &plan, ctx);
    if (rc != EF_OK)
        return rc;
    ef_buffer *pixels;
    int64_t shape[3];
    ef__err err;
    ef__err_clear(&err);
    rc = ef__image_decode(plan.data, plan.size, p->channels, plan.what, &pixels,
                          shape, &err);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    const ef__decoded img = {
        pixels, 0, EF_U8, 3, {shape[0], shape[1], shape[2]}};
    rc = ef__decode_output(in, p, &plan, &img, out, ctx);
    ef_buffer_release(pixels); /* the sample holds its own reference */
    return rc;
}

static int decode_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    ef__decode_fields *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "decode: out of memory");
    int rc = ef__decode_fields_parse(o, "decode", p, err);
    p->budget = &s->ctx->budget;
    if (rc == EF_OK)
        rc = ef__map_setup(s, decode_fn, p, (int)ef__opt_int(o, "threads"), 1,
                           err);
    if (rc != EF_OK)
        ef__free(p);
    return rc;
}

static const ef__option_def decode_options[] = {
    EF__DECODE_FIELD_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_decode = {
    .info = {"decode",
             "JPEG/PNG/WebP/TIFF/BMP/PPM/PGM/GIF bytes to a u8 [H,W,C] "
             "image, 'cls' text to an i64 label",
             EF__OPTIONS(decode_options)},
    .create = decode_create,
    EF__IMAGE_STAGE_OPS,
};
