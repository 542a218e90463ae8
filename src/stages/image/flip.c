/* SPDX-License-Identifier: Apache-2.0 */
/* flip: a horizontal flip of an example's image with probability p, drawn
 * from the sample's keyed generator (echo copy included). u8 or f32,
 * [H,W] or [H,W,C]; an unflipped example shares its payload. With
 * `boxes`, the boxes are mirrored with it (boxes.h). */
#include <string.h>

#include "core/alloc.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    double p;
    ef__box_opts box;
} flip_params;

static int flip_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const flip_params *ap = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, ap->field, EF__U8_F32, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t whole[4] = {0, 0, img.h, img.w};
    int mirror = ef_map_ctx_uniform(ctx) < ap->p;
    ef__box_map m = ef__box_map_window(whole, img.h, img.w, mirror);
    if (!mirror) {
        *out = ef_sample_clone(in); /* unflipped: shares the payload */
        return *out ? ef__boxes_follow(&ap->box, "flip", &m, out, ctx)
                    : ef_map_ctx_fail(ctx, EF_ENOMEM, "flip: out of memory");
    }
    unsigned char *dst;
    rc = ef__image_same_shape_output(in, &img, out, &dst, ctx);
    if (rc != EF_OK)
        return rc;
    size_t px = ef_dtype_size(img.f->dtype) * (size_t)img.c;
    for (int64_t y = 0; y < img.h; y++)
        for (int64_t x = 0; x < img.w; x++)
            memcpy(dst + (size_t)(y * img.w + x) * px,
                   img.data + (size_t)(y * img.w + (img.w - 1 - x)) * px, px);
    return ef__boxes_follow(&ap->box, "flip", &m, out, ctx);
}

static int flip_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    flip_params *ap = ef__calloc(1, sizeof *ap);
    if (!ap)
        return ef__err_set(err, EF_ENOMEM, "flip: out of memory");
    ap->p = ef__opt_float(o, "p");
    int rc = ef__box_opts_parse(o, "flip", &ap->box, err);
    if (rc != EF_OK) {
        ef__free(ap);
        return rc;
    }
    return ef__image_stage_setup(s, o, flip_fn, ap, err);
}

static const ef__option_def flip_options[] = {
    EF__OPT("p", EF_OPT_FLOAT, "0.5", "probability of a horizontal flip", 0, 1),
    EF__IMAGE_FIELD_OPTION,
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_flip = {
    .info = {"flip", "horizontal flip with probability p",
             EF__OPTIONS(flip_options)},
    .create = flip_create,
    EF__IMAGE_STAGE_OPS,
};
