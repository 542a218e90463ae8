/* SPDX-License-Identifier: Apache-2.0 */
/* random_resized_crop: ImageNet-style training crops, as torchvision's
 * RandomResizedCrop: a crop of random area and aspect ratio, resampled
 * bilinearly to a square. u8 or f32, [H,W] or [H,W,C]. The crop is drawn
 * from the sample's keyed generator, echo copy included, so each echoed
 * copy gets a crop of its own. With `boxes`, the boxes are cropped and
 * scaled with the pixels (boxes.h). */
#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/boxes.h"
#include "stages/image/crop_window.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int64_t size;            /* output side */
    ef__rrc_ranges ranges;
    ef__box_opts box;
} rrc_params;

static int random_resized_crop_fn(const ef_sample *in, ef_sample **out,
                                  ef_map_ctx *ctx)
{
    const rrc_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find_resamplable(in, p->field, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t crop[4];
    ef__rrc_window(&p->ranges, img.h, img.w, ctx, crop);
    rc = ef__image_resample(in, &img, p->size, p->size, crop[0], crop[1],
                            crop[2], crop[3], out, ctx);
    if (rc != EF_OK)
        return rc;
    ef__box_map m = ef__box_map_window(crop, p->size, p->size, 0);
    return ef__boxes_follow(&p->box, "random_resized_crop", &m, out, ctx);
}

static int random_resized_crop_create(ef__stage *s, const ef__opts *o,
                                      ef__err *err)
{
    ef__rrc_ranges ranges;
    int rc = ef__rrc_ranges_parse(o, "random_resized_crop", &ranges, err);
    if (rc != EF_OK)
        return rc;
    rrc_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM,
                           "random_resized_crop: out of memory");
    p->size = ef__opt_int(o, "size");
    p->ranges = ranges;
    rc = ef__box_opts_parse(o, "random_resized_crop", &p->box, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    return ef__image_stage_setup(s, o, random_resized_crop_fn, p, err);
}

static const ef__option_def random_resized_crop_options[] = {
    EF__OPT("size", EF_OPT_INT, "224", "output side (a square)", 1,
            EF__IMAGE_MAX_SIDE),
    EF__RRC_RANGE_OPTIONS,
    EF__IMAGE_FIELD_OPTION,
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_random_resized_crop = {
    .info = {"random_resized_crop",
             "crop of random area and aspect ratio, resized to a square "
             "(ImageNet)",
             EF__OPTIONS(random_resized_crop_options)},
    .create = random_resized_crop_create,
    EF__IMAGE_STAGE_OPS,
};
