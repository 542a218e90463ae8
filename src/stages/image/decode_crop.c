/* decode_crop: decode and random_resized_crop in one stage, decoding only
 * the crop's window of a JPEG (ef__image_decode_window). The window is
 * drawn from the image's size, read from its header, exactly as
 * random_resized_crop draws it from the decoded image, and resampled the
 * same way: with dct_scale=0 the output equals `decode |
 * random_resized_crop` bit for bit. With dct_scale=1, a window at least
 * twice the output size both ways is scaled down in the JPEG's IDCT by 2,
 * 4 or 8 first (cheaper, and an average of the pixels rather than a
 * sample of them), then resampled from that. Fields, label and options
 * as decode (decode_fields.h). */
#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/bilinear.h"
#include "stages/image/crop_window.h"
#include "stages/image/decode_fields.h"
#include "stages/image/image_stage.h"

typedef struct {
    ef__decode_fields fields;
    int64_t size; /* output side */
    ef__rrc_ranges ranges;
    int dct_scale;
} decode_crop_params;

/* The window at `inside` of the decoded pixels, resampled to a new
 * size x size buffer (NULL when out of memory). */
static ef_buffer *resample(const ef_buffer *px, const int64_t shape[3],
                           const int64_t inside[4], int64_t size)
{
    int64_t c = shape[2];
    ef_buffer *b = ef_buffer_new((size_t)(size * size * c));
    if (!b)
        return NULL;
    const unsigned char *src = (const unsigned char *)ef_buffer_data(px) +
                               (inside[0] * shape[1] + inside[1]) * c;
    if (ef__bilinear(src, EF_U8, shape[1], inside[2], inside[3], c,
                     ef_buffer_data(b), size, size) != EF_OK) {
        ef_buffer_release(b);
        return NULL;
    }
    return b;
}

static int decode_crop_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const decode_crop_params *p = ef_map_ctx_user(ctx);
    ef__decode_plan plan;
    int rc = ef__decode_plan_sample(in, &p->fields, &plan, ctx);
    if (rc != EF_OK)
        return rc;
    ef__err err;
    ef__err_clear(&err);
    int64_t h, w;
    rc = ef__image_probe(plan.data, plan.size, plan.what, &h, &w, &err);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    int64_t win[4], shape[3], inside[4];
    ef__rrc_window(&p->ranges, h, w, ctx, win);
    int64_t scale_to = p->dct_scale ? p->size : 0;
    ef_buffer *px;
    rc = ef__image_decode_window(plan.data, plan.size, p->fields.channels, win,
                                 scale_to, scale_to, plan.what, &px, shape,
                                 inside, &err);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    ef_buffer *crop = resample(px, shape, inside, p->size);
    ef_buffer_release(px);
    if (!crop)
        return ef_map_ctx_fail(ctx, EF_ENOMEM,
                               "out of memory for a %lld x %lld crop",
                               (long long)p->size, (long long)p->size);
    const int64_t oshape[3] = {p->size, p->size, shape[2]};
    rc = ef__decode_output(in, &p->fields, &plan, crop, oshape, out, ctx);
    ef_buffer_release(crop); /* the sample holds its own reference */
    return rc;
}

static int decode_crop_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    double s0 = ef__opt_float(o, "scale_min"),
           s1 = ef__opt_float(o, "scale_max");
    double r0 = ef__opt_float(o, "ratio_min"),
           r1 = ef__opt_float(o, "ratio_max");
    if (s0 > s1 || r0 > r1)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'decode_crop': ranges must not be reversed "
                           "(got scale %g to %g, ratio %g to %g)",
                           s0, s1, r0, r1);
    decode_crop_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "decode_crop: out of memory");
    p->size = ef__opt_int(o, "size");
    p->ranges = (ef__rrc_ranges){s0, s1, r0, r1};
    p->dct_scale = ef__opt_bool(o, "dct_scale");
    int rc = ef__decode_fields_parse(o, "decode_crop", &p->fields, err);
    if (rc == EF_OK)
        rc = ef__map_setup(s, decode_crop_fn, p, (int)ef__opt_int(o, "threads"),
                           1, err);
    if (rc != EF_OK)
        ef__free(p);
    return rc;
}

static const ef__option_def decode_crop_options[] = {
    EF__DECODE_FIELD_OPTIONS,
    {"size", EF_OPT_INT, "224", "output side (a square)", 1,
     EF__IMAGE_MAX_SIDE},
    {"scale_min", EF_OPT_FLOAT, "0.08", "smallest crop area, as a fraction", 0,
     1},
    {"scale_max", EF_OPT_FLOAT, "1", "largest crop area, as a fraction", 0, 1},
    {"ratio_min", EF_OPT_FLOAT, "0.75", "smallest aspect ratio (width/height)",
     0.001, 1000},
    {"ratio_max", EF_OPT_FLOAT, "1.3333333", "largest aspect ratio (4/3)",
     0.001, 1000},
    {"dct_scale", EF_OPT_BOOL, "true",
     "shrink a JPEG window at least twice the output size by 2, 4 or 8 in "
     "the IDCT (0: output equals decode | random_resized_crop)",
     0, 0},
    EF__THREADS_OPTION,
};

const ef__stage_def ef__stage_decode_crop = {
    .info = {"decode_crop",
             "decode + random_resized_crop, decoding only the crop of a JPEG",
             EF__OPTIONS(decode_crop_options)},
    .create = decode_crop_create,
    EF__IMAGE_STAGE_OPS,
};
