/* SPDX-License-Identifier: Apache-2.0 */
/* crop_mirror_normalize: the training augmentation of an image model in
 * one pass over the output, reading each source pixel where it lies:
 * a crop (torchvision's RandomResizedCrop window, or the whole image),
 * bilinear resampling to size x size, a horizontal flip with probability
 * `mirror`, (x * scale - mean) / std to f32, and the [C,H,W] layout.
 * u8 or f32, [H,W] or [H,W,C]. The result equals, to the bit,
 *
 *   random_resized_crop:size=S | flip:p=M | normalize:mean=..,std=.. | to_chw
 *
 * given the same window and flip (crop=none: resize:S in place of the
 * crop; layout=hwc: without to_chw), because it computes each value with
 * the arithmetic of those stages (bilinear.h, normalize_values.h).
 *
 * Draws, from the sample's keyed generator (echo copy included): first
 * the window as ef__rrc_window draws it (crop=random_resized; none for
 * crop=none), then one uniform u, flipping when u < mirror. The stream
 * differs from the separate stages', whose draws are keyed by their own
 * positions in the pipeline.
 *
 * With `boxes`, the boxes go through the same window, scale and flip
 * (boxes.h). */
#include <string.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/bilinear.h"
#include "stages/image/boxes.h"
#include "stages/image/crop_window.h"
#include "stages/image/image_stage.h"
#include "stages/image/normalize_values.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int64_t size;            /* output side */
    int random_crop;         /* crop=random_resized, else the whole image */
    ef__rrc_ranges ranges;
    double mirror; /* probability of a flip */
    int chw;       /* layout=chw */
    ef__norm_values v;
    ef__box_opts box;
} cmn_params;

static int crop_mirror_normalize_fn(const ef_sample *in, ef_sample **out,
                                    ef_map_ctx *ctx)
{
    const cmn_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find_resamplable(in, p->field, &img, ctx);
    if (rc == EF_OK)
        rc = ef__norm_check(&p->v, img.c, p->field, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t crop[4] = {0, 0, img.h, img.w};
    if (p->random_crop)
        ef__rrc_window(&p->ranges, img.h, img.w, ctx, crop);
    int mirror = ef_map_ctx_uniform(ctx) < p->mirror;

    /* normalize's coefficients: one pair for all channels, or one each */
    float a[EF__NORM_MAX_CHANNELS], b[EF__NORM_MAX_CHANNELS];
    int uniform = ef__norm_uniform(&p->v);
    ef__norm_coeffs(&p->v, uniform ? 1 : img.c, img.f->dtype, a, b);

    /* [C,S,S] as to_chw gives it (a 2-D image too), or the input's own
     * [S,S] or [S,S,C] */
    int64_t s = p->size, shape[3] = {img.c, s, s};
    int ndim = 3;
    if (!p->chw) {
        ndim = img.f->ndim;
        shape[0] = s;
        shape[2] = img.c;
    }
    float *dst;
    rc = ef__image_output(in, img.index, EF_F32, ndim, shape, out,
                          (void **)&dst, ctx);
    if (rc != EF_OK)
        return rc;
    size_t esize = ef_dtype_size(img.f->dtype);
    const unsigned char *src =
        img.data + (size_t)((crop[0] * img.w + crop[1]) * img.c) * esize;
    const ef__bilinear_norm how = {a, b, !uniform, mirror, p->chw};
    if (ef__bilinear_normalize(src, img.f->dtype, img.w, crop[2], crop[3],
                               img.c, &how, dst, s, s) != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    ef__box_map m = ef__box_map_window(crop, s, s, mirror);
    return ef__boxes_follow(&p->box, "crop_mirror_normalize", &m, out, ctx);
}

static int crop_mirror_normalize_create(ef__stage *s, const ef__opts *o,
                                        ef__err *err)
{
    cmn_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM,
                           "crop_mirror_normalize: out of memory");
    const char *name = "crop_mirror_normalize";
    int rc = ef__opt_choice(o, name, "crop", "random_resized", "none",
                              &p->random_crop, err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, name, "layout", "chw", "hwc", &p->chw, err);
    if (rc == EF_OK)
        rc = ef__rrc_ranges_parse(o, name, &p->ranges, err);
    if (rc == EF_OK)
        rc = ef__norm_parse(o, name, &p->v, err);
    if (rc == EF_OK)
        rc = ef__box_opts_parse(o, name, &p->box, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    p->size = ef__opt_int(o, "size");
    p->mirror = ef__opt_float(o, "mirror");
    return ef__image_stage_setup(s, o, crop_mirror_normalize_fn, p, err);
}

static const ef__option_def crop_mirror_normalize_options[] = {
    EF__OPT("size", EF_OPT_INT, "224", "output side (a square)", 1,
            EF__IMAGE_MAX_SIDE),
    EF__OPT("crop", EF_OPT_STRING, "random_resized",
            "random_resized (as random_resized_crop) or none (the whole image)",
            0, 0),
    EF__RRC_RANGE_OPTIONS,
    EF__OPT("mirror", EF_OPT_FLOAT, "0.5", "probability of a horizontal flip",
            0, 1),
    EF__NORM_MEAN_OPTION,
    EF__NORM_STD_OPTION,
    EF__OPT("layout", EF_OPT_STRING, "chw", "chw ([C,H,W], as to_chw) or hwc",
            0, 0),
    EF__IMAGE_FIELD_OPTION,
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_crop_mirror_normalize = {
    .info = {"crop_mirror_normalize",
             "random_resized_crop | flip | normalize | to_chw in one pass, "
             "to f32",
             EF__OPTIONS(crop_mirror_normalize_options)},
    .create = crop_mirror_normalize_create,
    EF__IMAGE_STAGE_OPS,
};
