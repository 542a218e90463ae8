/* SPDX-License-Identifier: Apache-2.0 */
/* resize: an example's image resampled bilinearly (bilinear.h) to a fixed
 * size. u8 or f32, [H,W] or [H,W,C]. With `boxes`, the boxes scale with
 * the pixels (boxes.h). */
#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int64_t h, w;            /* output size */
    ef__box_opts box;
} resize_params;

static int resize_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const resize_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find_resamplable(in, p->field, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t whole[4] = {0, 0, img.h, img.w};
    ef__box_map m = ef__box_map_window(whole, p->h, p->w, 0);
    if (img.h == p->h && img.w == p->w) {
        /* half-pixel centres map every pixel onto itself: share it */
        *out = ef_sample_clone(in);
        if (!*out)
            return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    } else {
        rc = ef__image_resample(in, &img, p->h, p->w, whole[0], whole[1],
                                whole[2], whole[3], out, ctx);
        if (rc != EF_OK)
            return rc;
    }
    return ef__boxes_follow(&p->box, "resize", &m, out, ctx);
}

static int resize_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    int64_t size = ef__opt_int(o, "size");
    int64_t h = ef__opt_int(o, "height"), w = ef__opt_int(o, "width");
    h = h ? h : size;
    w = w ? w : size;
    if (!h || !w)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'resize': give 'size' (square), or "
                           "'height' and 'width' (got size=%lld, "
                           "height=%lld, width=%lld)",
                           (long long)size, (long long)ef__opt_int(o, "height"),
                           (long long)ef__opt_int(o, "width"));
    resize_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "resize: out of memory");
    p->h = h;
    p->w = w;
    int rc = ef__box_opts_parse(o, "resize", &p->box, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    return ef__image_stage_setup(s, o, resize_fn, p, err);
}

static const ef__option_def resize_options[] = {
    EF__OPT("size", EF_OPT_INT, "0",
            "output side of a square (0: give height and width)", 0,
            EF__IMAGE_MAX_SIDE),
    EF__OPT("height", EF_OPT_INT, "0", "output height (0: size)", 0,
            EF__IMAGE_MAX_SIDE),
    EF__OPT("width", EF_OPT_INT, "0", "output width (0: size)", 0,
            EF__IMAGE_MAX_SIDE),
    EF__IMAGE_FIELD_OPTION,
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_resize = {
    .info = {"resize",
             "bilinear resize of an image to size x size, or height x width",
             EF__OPTIONS(resize_options)},
    .create = resize_create,
    EF__IMAGE_STAGE_OPS,
};
