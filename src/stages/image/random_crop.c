/* SPDX-License-Identifier: Apache-2.0 */
/* random_crop: pads an example's image with zeros, then crops it back to
 * its size at a random offset (CIFAR style). u8 or f32, [H,W] or [H,W,C].
 * The offset is keyed by the sample's identity, echo copy included: an
 * echoed copy gets a crop of its own, which is what makes echoing before
 * augmentation worth more than echoing after it. With `boxes`, the boxes
 * shift with the pixels (boxes.h). */
#include <string.h>

#include "core/alloc.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int pad;
    ef__box_opts box;
} random_crop_params;

static int random_crop_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const random_crop_params *ap = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, ap->field, EF__U8_F32, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t h = img.h, w = img.w;
    int64_t span = 2 * (int64_t)ap->pad + 1;
    int64_t oy = (int64_t)(ef_map_ctx_random(ctx) % (uint64_t)span) - ap->pad;
    int64_t ox = (int64_t)(ef_map_ctx_random(ctx) % (uint64_t)span) - ap->pad;
    unsigned char *dst;
    rc = ef__image_same_shape_output(in, &img, out, &dst, ctx);
    if (rc != EF_OK)
        return rc;
    size_t px = ef_dtype_size(img.f->dtype) * (size_t)img.c;
    const unsigned char *src = img.data;
    /* output pixel (y, x) comes from input (y + oy, x + ox), zero outside */
    for (int64_t y = 0; y < h; y++) {
        int64_t sy = y + oy;
        unsigned char *row = dst + (size_t)(y * w) * px;
        if (sy < 0 || sy >= h) {
            memset(row, 0, (size_t)w * px);
            continue;
        }
        /* columns [x0, x1) have a source pixel; a shift of the whole
         * width or more (pad >= w) leaves none */
        int64_t x0 = ox < 0 ? -ox : 0, x1 = ox > 0 ? w - ox : w;
        if (x0 > w)
            x0 = w;
        if (x1 < x0)
            x1 = x0;
        memset(row, 0, (size_t)x0 * px);
        memcpy(row + (size_t)x0 * px, src + (size_t)(sy * w + x0 + ox) * px,
               (size_t)(x1 - x0) * px);
        memset(row + (size_t)x1 * px, 0, (size_t)(w - x1) * px);
    }
    /* the window the loop above copies: rows oy.., columns ox.. */
    int64_t win[4] = {oy, ox, h, w};
    ef__box_map m = ef__box_map_window(win, h, w, 0);
    return ef__boxes_follow(&ap->box, "random_crop", &m, out, ctx);
}

static int random_crop_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    random_crop_params *ap = ef__calloc(1, sizeof *ap);
    if (!ap)
        return ef__err_set(err, EF_ENOMEM, "random_crop: out of memory");
    ap->pad = (int)ef__opt_int(o, "pad");
    int rc = ef__box_opts_parse(o, "random_crop", &ap->box, err);
    if (rc != EF_OK) {
        ef__free(ap);
        return rc;
    }
    return ef__image_stage_setup(s, o, random_crop_fn, ap, err);
}

static const ef__option_def random_crop_options[] = {
    EF__OPT("pad", EF_OPT_INT, "4", "zero padding on each side before cropping",
            0, 1 << 16),
    EF__IMAGE_FIELD_OPTION,
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_random_crop = {
    .info = {"random_crop", "pad, then crop back at a random offset",
             EF__OPTIONS(random_crop_options)},
    .create = random_crop_create,
    EF__IMAGE_STAGE_OPS,
};
