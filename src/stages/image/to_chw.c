/* SPDX-License-Identifier: Apache-2.0 */
/* to_chw: an example's image from [H,W,C] to [C,H,W], the layout PyTorch
 * models take ([H,W] to [1,H,W], sharing the payload), any dtype. */
#include <string.h>

#include "core/alloc.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
} to_chw_params;

/* Plane k of dst gathers channel k of every pixel of src. */
#define GATHER(ES)                                                             \
    for (int64_t k = 0; k < c; k++)                                            \
        for (int64_t i = 0; i < hw; i++)                                       \
    memcpy(dst + (size_t)(k * hw + i) * ES, src + (size_t)(i * c + k) * ES, ES)

static void hwc_to_chw(const unsigned char *src, unsigned char *dst, int64_t hw,
                       int64_t c, size_t esize)
{
    /* constant sizes, so each memcpy is a single load and store */
    switch (esize) {
    case 1:
        GATHER(1);
        break;
    case 4:
        GATHER(4);
        break;
    default:
        GATHER(8);
        break;
    }
}

static int to_chw_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const to_chw_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__ANY_DTYPE, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t shape[3] = {img.c, img.h, img.w};
    if (img.c == 1) {
        /* one channel: the bytes are already in order, only the shape
         * changes, and the payload is shared */
        if (!(*out = ef_sample_clone(in)))
            return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
        ef__field *f = &(*out)->fields[img.index];
        f->ndim = 3;
        memcpy(f->shape, shape, sizeof shape);
        return EF_OK;
    }
    unsigned char *dst;
    rc = ef__image_output(in, img.index, img.f->dtype, 3, shape, out,
                          (void **)&dst, ctx);
    if (rc == EF_OK)
        hwc_to_chw(img.data, dst, img.h * img.w, img.c,
                   ef_dtype_size(img.f->dtype));
    return rc;
}

static int to_chw_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    to_chw_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "to_chw: out of memory");
    return ef__image_stage_setup(s, o, to_chw_fn, p, err);
}

static const ef__option_def to_chw_options[] = {
    EF__IMAGE_FIELD_OPTION,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_to_chw = {
    .info = {"to_chw", "[H,W,C] to [C,H,W] (and [H,W] to [1,H,W]), any dtype",
             EF__OPTIONS(to_chw_options)},
    .create = to_chw_create,
    EF__IMAGE_STAGE_OPS,
};
