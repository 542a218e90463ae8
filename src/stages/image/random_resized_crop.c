/* random_resized_crop: ImageNet-style training crops, as torchvision's
 * RandomResizedCrop: a crop of random area and aspect ratio, resampled
 * bilinearly to a square. u8 or f32, [H,W] or [H,W,C]. The crop is drawn
 * from the sample's keyed generator, echo copy included, so each echoed
 * copy gets a crop of its own. */
#include <math.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int64_t size;            /* output side */
    /* the crop's area and aspect ratio ranges */
    double scale_min, scale_max, ratio_min, ratio_max;
} rrc_params;

/* Python's round(): halves to even (what torchvision's crop sizes use). */
static int64_t round_even(double x)
{
    return (int64_t)nearbyint(x);
}

/* An integer in [0, n), n >= 1, from the keyed stream. */
static int64_t below(ef_map_ctx *ctx, int64_t n)
{
    int64_t k = (int64_t)(ef_map_ctx_uniform(ctx) * (double)n);
    return k < n ? k : n - 1; /* u * n may round up to n */
}

/* torchvision's RandomResizedCrop.get_params: ten tries at an area and a
 * log-uniform aspect ratio that fit, then the whole image cropped to the
 * nearest allowed ratio, centred. */
static void choose_crop(const rrc_params *p, int64_t h, int64_t w,
                        ef_map_ctx *ctx, int64_t crop[4])
{
    double area = (double)h * (double)w;
    double lr0 = log(p->ratio_min), lr1 = log(p->ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (p->scale_min + (p->scale_max - p->scale_min) *
                                                   ef_map_ctx_uniform(ctx));
        double ratio = exp(lr0 + (lr1 - lr0) * ef_map_ctx_uniform(ctx));
        int64_t cw = round_even(sqrt(target * ratio));
        int64_t ch = round_even(sqrt(target / ratio));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            crop[0] = below(ctx, h - ch + 1);
            crop[1] = below(ctx, w - cw + 1);
            crop[2] = ch;
            crop[3] = cw;
            return;
        }
    }
    double in_ratio = (double)w / (double)h;
    int64_t ch = h, cw = w;
    if (in_ratio < p->ratio_min)
        ch = round_even((double)w / p->ratio_min);
    else if (in_ratio > p->ratio_max)
        cw = round_even((double)h * p->ratio_max);
    /* a very thin image can round to nothing: keep a pixel */
    ch = ch < 1 ? 1 : ch > h ? h : ch;
    cw = cw < 1 ? 1 : cw > w ? w : cw;
    crop[0] = (h - ch) / 2;
    crop[1] = (w - cw) / 2;
    crop[2] = ch;
    crop[3] = cw;
}

static int random_resized_crop_fn(const ef_sample *in, ef_sample **out,
                                  ef_map_ctx *ctx)
{
    const rrc_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find_resamplable(in, p->field, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t crop[4];
    choose_crop(p, img.h, img.w, ctx, crop);
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
    p->scale_min = s0;
    p->scale_max = s1;
    p->ratio_min = r0;
    p->ratio_max = r1;
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
