/* Image augmentations as map stages: random_crop (pad, then crop back to
 * the original size at a random offset, CIFAR style) and flip (horizontal,
 * with probability p). They work on one field (default `image`) of u8 or
 * f32 [H,W] or [H,W,C] examples. Every random choice is keyed by the
 * sample's identity, echo copy included: an echoed copy gets a crop and
 * flip of its own, which is what makes echoing before augmentation worth
 * more than echoing after it. */
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stage.h"
#include "stages/map.h"

typedef struct {
    char field[EF_MAX_NAME];
    int pad;  /* random_crop */
    double p; /* flip */
} augment_params;

/* Finds the field and its geometry; an error names what was expected. */
static int image_of(const ef_sample *in, const augment_params *ap,
                    const char *stage, int *index, int64_t *h, int64_t *w,
                    int64_t *c, ef_map_ctx *ctx)
{
    int i = ef__sample_find(in, ap->field);
    if (i < 0)
        return ef_map_ctx_fail(ctx, EF_ESHAPE, "%s: no field '%s'", stage,
                               ap->field);
    const ef__field *f = &in->fields[i];
    if ((f->ndim != 2 && f->ndim != 3) ||
        (f->dtype != EF_U8 && f->dtype != EF_F32))
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "%s: field '%s' is %s with %d dimensions; "
                               "expected u8 or f32 [H,W] or [H,W,C] (place it "
                               "before batch)",
                               stage, ap->field, ef_dtype_name(f->dtype),
                               f->ndim);
    *index = i;
    *h = f->shape[0];
    *w = f->shape[1];
    *c = f->ndim == 3 ? f->shape[2] : 1;
    return EF_OK;
}

/* A clone of `in` whose field `i` views a new buffer of the same size. */
static ef_sample *with_new_field(const ef_sample *in, int i,
                                 unsigned char **data)
{
    ef_buffer *b = ef_buffer_new(in->fields[i].nbytes);
    ef_sample *out = b ? ef_sample_clone(in) : NULL;
    if (!out) {
        ef_buffer_release(b);
        return NULL;
    }
    ef_buffer_release(out->fields[i].buf);
    out->fields[i].buf = b;
    out->fields[i].offset = 0;
    *data = ef_buffer_data(b);
    return out;
}

static const unsigned char *field_data(const ef_sample *s, int i)
{
    return (const unsigned char *)ef_buffer_data(s->fields[i].buf) +
           s->fields[i].offset;
}

static int random_crop_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const augment_params *ap = ef_map_ctx_user(ctx);
    int i;
    int64_t h, w, c;
    int rc = image_of(in, ap, "random_crop", &i, &h, &w, &c, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t span = 2 * (int64_t)ap->pad + 1;
    int64_t oy = (int64_t)(ef_map_ctx_random(ctx) % (uint64_t)span) - ap->pad;
    int64_t ox = (int64_t)(ef_map_ctx_random(ctx) % (uint64_t)span) - ap->pad;
    unsigned char *dst;
    *out = with_new_field(in, i, &dst);
    if (!*out)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "random_crop: out of memory");
    size_t px = ef_dtype_size(in->fields[i].dtype) * (size_t)c;
    const unsigned char *src = field_data(in, i);
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
    return EF_OK;
}

static int flip_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const augment_params *ap = ef_map_ctx_user(ctx);
    int i;
    int64_t h, w, c;
    int rc = image_of(in, ap, "flip", &i, &h, &w, &c, ctx);
    if (rc != EF_OK)
        return rc;
    if (ef_map_ctx_uniform(ctx) >= ap->p) {
        *out = ef_sample_clone(in); /* unflipped: shares the payload */
        return *out ? EF_OK
                    : ef_map_ctx_fail(ctx, EF_ENOMEM, "flip: out of memory");
    }
    unsigned char *dst;
    *out = with_new_field(in, i, &dst);
    if (!*out)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "flip: out of memory");
    size_t px = ef_dtype_size(in->fields[i].dtype) * (size_t)c;
    const unsigned char *src = field_data(in, i);
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            memcpy(dst + (size_t)(y * w + x) * px,
                   src + (size_t)(y * w + (w - 1 - x)) * px, px);
    return EF_OK;
}

static int augment_create(ef__stage *s, const ef__opts *o, ef_map_fn fn,
                          ef__err *err)
{
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= EF_MAX_NAME)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'field' must name a field "
                           "(1 to %d characters)",
                           s->def->info.name, EF_MAX_NAME - 1);
    augment_params *ap = ef__calloc(1, sizeof *ap);
    if (!ap)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                           s->def->info.name);
    strcpy(ap->field, field);
    if (fn == random_crop_fn)
        ap->pad = (int)ef__opt_int(o, "pad");
    else
        ap->p = ef__opt_float(o, "p");
    int rc = ef__map_setup(s, fn, ap, (int)ef__opt_int(o, "threads"), 1, err);
    if (rc != EF_OK)
        ef__free(ap);
    return rc;
}

static int random_crop_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return augment_create(s, o, random_crop_fn, err);
}

static int flip_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return augment_create(s, o, flip_fn, err);
}

static void augment_destroy(ef__stage *s)
{
    void *params = ef__map_user(s);
    ef__map_destroy(s);
    ef__free(params);
}

static const ef__option_def random_crop_options[] = {
    {"pad", EF_OPT_INT, "4", "zero padding on each side before cropping", 0,
     1 << 16},
    {"field", EF_OPT_STRING, "image", "the image field", 0, 0},
    {"threads", EF_OPT_INT, "1", "worker threads", 1, 256},
};

static const ef__option_def flip_options[] = {
    {"p", EF_OPT_FLOAT, "0.5", "probability of a horizontal flip", 0, 1},
    {"field", EF_OPT_STRING, "image", "the image field", 0, 0},
    {"threads", EF_OPT_INT, "1", "worker threads", 1, 256},
};

const ef__stage_def ef__stage_random_crop = {
    .info = {"random_crop", "pad, then crop back at a random offset", 3,
             random_crop_options},
    .create = random_crop_create,
    .open = ef__map_open,
    .next = ef__map_next,
    .reset = ef__map_reset,
    .cancel = ef__map_cancel,
    .destroy = augment_destroy,
};

const ef__stage_def ef__stage_flip = {
    .info = {"flip", "horizontal flip with probability p", 3, flip_options},
    .create = flip_create,
    .open = ef__map_open,
    .next = ef__map_next,
    .reset = ef__map_reset,
    .cancel = ef__map_cancel,
    .destroy = augment_destroy,
};
