/* random_resized_crop: ImageNet-style training crops, as torchvision's
 * RandomResizedCrop: a crop of random area and aspect ratio, resampled
 * bilinearly to a square. u8 or f32, [H,W] or [H,W,C]. The crop is drawn
 * from the sample's keyed generator, echo copy included, so each echoed
 * copy gets a crop of its own. */
#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/crop_window.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int64_t size;            /* output side */
    ef__rrc_ranges ranges;
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
    return ef__image_resample(in, &img, p->size, p->size, crop[0], crop[1],
                              crop[2], crop[3], out, ctx);
}

static int random_resized_crop_create(ef__stage *s, const ef__opts *o,
                                      ef__err *err)
{
    double s0 = ef__opt_float(o, "scale_min"),
           s1 = ef__opt_float(o, "scale_max");
    double r0 = ef__opt_float(o, "ratio_min"),
           r1 = ef__opt_float(o, "ratio_max");
    if (s0 > s1 || r0 > r1)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'random_resized_crop': ranges must not be "
                           "reversed (got scale %g to %g, ratio %g to %g)",
                           s0, s1, r0, r1);
    rrc_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM,
                           "random_resized_crop: out of memory");
    p->size = ef__opt_int(o, "size");
    p->ranges = (ef__rrc_ranges){s0, s1, r0, r1};
    return ef__image_stage_setup(s, o, random_resized_crop_fn, p, err);
}

static const ef__option_def random_resized_crop_options[] = {
    {"size", EF_OPT_INT, "224", "output side (a square)", 1,
     EF__IMAGE_MAX_SIDE},
    {"scale_min", EF_OPT_FLOAT, "0.08", "smallest crop area, as a fraction", 0,
     1},
    {"scale_max", EF_OPT_FLOAT, "1", "largest crop area, as a fraction", 0, 1},
    {"ratio_min", EF_OPT_FLOAT, "0.75", "smallest aspect ratio (width/height)",
     0.001, 1000},
    {"ratio_max", EF_OPT_FLOAT, "1.3333333", "largest aspect ratio (4/3)",
     0.001, 1000},
    EF__IMAGE_FIELD_OPTION,
    EF__THREADS_OPTION,
};

const ef__stage_def ef__stage_random_resized_crop = {
    .info = {"random_resized_crop",
             "crop of random area and aspect ratio, resized to a square "
             "(ImageNet)",
             EF__OPTIONS(random_resized_crop_options)},
    .create = random_resized_crop_create,
    EF__IMAGE_STAGE_OPS,
};
