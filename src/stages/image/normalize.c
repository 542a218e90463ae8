/* SPDX-License-Identifier: Apache-2.0 */
/* normalize: an example's image to f32, (x * scale - mean) / std with one
 * mean and std per channel (or one for all); scale is 1/255 for u8. The
 * lists and their arithmetic are shared with crop_mirror_normalize
 * (normalize_values.h). */
#include "core/alloc.h"
#include "stages/image/image_stage.h"
#include "stages/image/normalize_values.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    ef__norm_values v;
} normalize_params;

static int normalize_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const normalize_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__U8_F32, &img, ctx);
    if (rc == EF_OK)
        rc = ef__norm_check(&p->v, img.c, p->field, ctx);
    if (rc != EF_OK)
        return rc;
    /* one value each for every channel: treat the image as one channel
     * (it may have more than EF__NORM_MAX_CHANNELS) */
    int64_t c = ef__norm_uniform(&p->v) ? 1 : img.c;
    int64_t pixels = img.h * img.w * img.c / c;
    /* (x * scale - mean) / std as one multiply-add per element */
    float a[EF__NORM_MAX_CHANNELS], b[EF__NORM_MAX_CHANNELS];
    ef__norm_coeffs(&p->v, c, img.f->dtype, a, b);
    float *dst;
    rc = ef__image_output(in, img.index, EF_F32, img.f->ndim, img.f->shape, out,
                          (void **)&dst, ctx);
    if (rc != EF_OK)
        return rc;
    if (img.f->dtype == EF_U8) {
        for (int64_t i = 0; i < pixels; i++)
            for (int64_t k = 0; k < c; k++)
                dst[i * c + k] = (float)img.data[i * c + k] * a[k] + b[k];
    } else {
        const float *src = (const float *)img.data;
        for (int64_t i = 0; i < pixels; i++)
            for (int64_t k = 0; k < c; k++)
                dst[i * c + k] = src[i * c + k] * a[k] + b[k];
    }
    return EF_OK;
}

static int normalize_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    normalize_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "normalize: out of memory");
    int rc = ef__norm_parse(o, "normalize", &p->v, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    return ef__image_stage_setup(s, o, normalize_fn, p, err);
}

static const ef__option_def normalize_options[] = {
    EF__NORM_MEAN_OPTION,
    EF__NORM_STD_OPTION,
    EF__IMAGE_FIELD_OPTION,
    EF__MAP_OPTIONS,
};
const ef__stage_def ef__stage_normalize = {
    .info = {"normalize",
             "to f32: (x * scale - mean) / std, scale 1/255 for u8, 1 for f32",
             EF__OPTIONS(normalize_options)},
    .create = normalize_create,
    EF__IMAGE_STAGE_OPS,
};
