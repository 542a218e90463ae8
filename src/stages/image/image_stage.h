/* SPDX-License-Identifier: Apache-2.0 */
/* What the image map stages (random_crop, flip, resize,
 * random_resized_crop, normalize, to_chw, cast) share: their `field` and
 * `threads` options, finding and checking the image field of one example, and
 * building the output sample with that field replaced. Each stage keeps its
 * parameters in a struct that starts with `char field[EF_MAX_NAME]`, handed to
 * its map function as the user pointer. */
#ifndef EF_STAGES_IMAGE_IMAGE_STAGE_H
#define EF_STAGES_IMAGE_IMAGE_STAGE_H

#include "core/sample.h"
#include "pipeline/map.h"
#include "pipeline/stage.h"

/* Bit masks of the dtypes a stage accepts. */
#define EF__DTYPE_BIT(d) (1u << (d))
#define EF__U8_F32 (EF__DTYPE_BIT(EF_U8) | EF__DTYPE_BIT(EF_F32))
#define EF__ANY_DTYPE ((1u << EF__DTYPE_COUNT) - 1)

/* One example's image: [H,W] (c = 1) or [H,W,C]. */
typedef struct {
    int index; /* of the field in the sample */
    const ef__field *f;
    int64_t h, w, c;
    const unsigned char *data;
} ef__image;

/* The field names of a sample for messages ("jpg, cls"; "no fields"),
 * cut at a message's length. */
#define EF__FIELD_NAMES_MAX EF__ERR_MAX
void ef__image_field_names(const ef_sample *s, char *buf, size_t cap);

/* Finds field `field` of `in` and checks it is an example image of one of
 * `dtypes`; an error says what was found and what was expected. */
int ef__image_find(const ef_sample *in, const char *field, unsigned dtypes,
                   ef__image *img, ef_map_ctx *ctx);

/* A clone of `in` whose field `index` is a new tensor (dtype, shape) in a
 * new buffer, or, when the stage feeds a batch, in the item's slot of the
 * batch's buffer (ef__map_ctx_output); *data receives its bytes to fill, to
 * be written by this transform only. The caller owns *out. */
int ef__image_output(const ef_sample *in, int index, ef_dtype dtype, int ndim,
                     const int64_t *shape, ef_sample **out, void **data,
                     ef_map_ctx *ctx);

/* The same, keeping the image's dtype and shape. */
int ef__image_same_shape_output(const ef_sample *in, const ef__image *img,
                                ef_sample **out, unsigned char **dst,
                                ef_map_ctx *ctx);

/* ef__image_find for a u8 or f32 image to resample: one with no pixels
 * is EF_ESHAPE naming `field`. */
int ef__image_find_resamplable(const ef_sample *in, const char *field,
                               ef__image *img, ef_map_ctx *ctx);

/* A clone of `in` whose image is the crop (y0, x0, ch, cw) of img,
 * resampled bilinearly to oh x ow (bilinear.h). */
int ef__image_resample(const ef_sample *in, const ef__image *img, int64_t oh,
                       int64_t ow, int64_t y0, int64_t x0, int64_t ch,
                       int64_t cw, ef_sample **out, ef_map_ctx *ctx);

/* Creation: checks option `field` and copies it into params (whose first
 * member is the field name), then sets the map machinery up to run `fn`
 * with `params` on `threads` threads, in order. Frees params on failure;
 * on success the stage owns them (ef__image_stage_destroy). */
int ef__image_stage_setup(ef__stage *s, const ef__opts *o, ef_map_fn fn,
                          void *params, ef__err *err);
void ef__image_stage_destroy(ef__stage *s);


/* The option rows and vtable entries every image stage has. */
#define EF__IMAGE_FIELD_OPTION                                                 \
    EF__OPT("field", EF_OPT_STRING, "image", "the image field", 0, 0)
#define EF__IMAGE_STAGE_OPS                                                    \
    EF__MAP_STAGE_OPS, .feeds_batch = ef__map_feeds_batch,                     \
    .destroy = ef__image_stage_destroy

#endif
