/* SPDX-License-Identifier: Apache-2.0 */
/* decode_crop: decode and random_resized_crop in one stage, decoding only
 * the crop's window of a JPEG (ef__image_decode_window), and optionally
 * the rest of a training augmentation in the same pass: a horizontal flip
 * (`mirror`) and, when `mean` or `std` is given, normalization to f32 in
 * `layout`. The window is drawn from the image's size, read from its
 * header, exactly as random_resized_crop draws it from the decoded image,
 * and resampled the same way: with dct_scale=0 the output equals
 *
 *   decode | random_resized_crop:size=S [| flip:p=M]
 *          [| normalize:mean=..,std=.. | to_chw]
 *
 * bit for bit, given the same window and flip. With dct_scale=1, a window
 * at least twice the output size both ways is scaled down in the JPEG's
 * IDCT by 2, 4 or 8 first (cheaper, and an average of the pixels rather
 * than a sample of them), then resampled from that. Fields, label and
 * options as decode (decode_fields.h).
 *
 * Draws, from the sample's keyed generator: the window (ef__rrc_window),
 * then, when mirror > 0, one uniform u, flipping when u < mirror.
 *
 * With `boxes`, the boxes of the image go through the same window, scale
 * and flip (boxes.h): the window that the decoded pixels cover, which
 * the IDCT's scaling rounds to its grid (ef__image_window_covered).
 *
 * Before `batch`, the output is written straight into its slot of the
 * batch's buffer (map.h). */
#include <string.h>

#include "codec/image.h"
#include "core/alloc.h"
#include "stages/image/bilinear.h"
#include "stages/image/boxes.h"
#include "stages/image/crop_window.h"
#include "stages/image/decode_fields.h"
#include "stages/image/image_stage.h"
#include "stages/image/normalize_values.h"

typedef struct {
    ef__decode_fields fields;
    int64_t size; /* output side */
    ef__rrc_ranges ranges;
    int dct_scale;
    double mirror; /* probability of a flip */
    int normalize; /* mean or std given: f32 output */
    int chw;       /* its layout */
    ef__norm_values v;
    ef__box_opts box;
} decode_crop_params;

/* Pixel order reversed in each of the h rows of w pixels of c bytes. */
static void mirror_u8(unsigned char *px, int64_t h, int64_t w, int64_t c)
{
    for (int64_t y = 0; y < h; y++) {
        unsigned char *row = px + y * w * c;
        for (int64_t l = 0, r = w - 1; l < r; l++, r--)
            for (int64_t k = 0; k < c; k++) {
                unsigned char t = row[l * c + k];
                row[l * c + k] = row[r * c + k];
                row[r * c + k] = t;
            }
    }
}

/* The window at `inside` of the decoded pixels `px` ([H,W,C] in shape),
 * resampled, flipped and normalized as p says, into img. */
static int finish(const decode_crop_params *p, const ef_buffer *px,
                  const int64_t shape[3], const int64_t inside[4], int mirror,
                  ef__decoded *img, ef_map_ctx *ctx)
{
    int64_t s = p->size, c = shape[2];
    const unsigned char *src = (const unsigned char *)ef_buffer_data(px) +
                               (inside[0] * shape[1] + inside[1]) * c;
    size_t nbytes = (size_t)(s * s * c) * (p->normalize ? sizeof(float) : 1);
    *img = (ef__decoded){
        .dtype = p->normalize ? EF_F32 : EF_U8, .ndim = 3, .shape = {s, s, c}};
    if (p->normalize && p->chw) {
        img->shape[0] = c;
        img->shape[2] = s;
    }
    img->buf = ef__map_ctx_output(ctx, nbytes, &img->offset);
    if (!img->buf)
        return ef_map_ctx_fail(ctx, EF_ENOMEM,
                               "out of memory for a %lld x %lld crop",
                               (long long)s, (long long)s);
    unsigned char *dst =
        (unsigned char *)ef_buffer_data(img->buf) + img->offset;
    int rc;
    if (p->normalize) {
        float a[EF__NORM_MAX_CHANNELS], b[EF__NORM_MAX_CHANNELS];
        int uniform = ef__norm_uniform(&p->v);
        ef__norm_coeffs(&p->v, uniform ? 1 : c, EF_U8, a, b);
        const ef__bilinear_norm how = {a, b, !uniform, mirror, p->chw};
        rc = ef__bilinear_normalize(src, EF_U8, shape[1], inside[2], inside[3],
                                    c, &how, (float *)dst, s, s);
    } else {
        rc = ef__bilinear(src, EF_U8, shape[1], inside[2], inside[3], c, dst, s,
                          s);
        if (rc == EF_OK && mirror)
            mirror_u8(dst, s, s, c);
    }
    if (rc != EF_OK) {
        ef_buffer_release(img->buf);
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    return EF_OK;
}

/* The window chosen, and the image's full size, for the boxes. */
typedef struct {
    ef_map_ctx *ctx;
    int64_t h, w, win[4];
} chosen;

/* ef__window_fn: random_resized_crop's window of an h x w image, drawn
 * from the sample's keyed generator (user: a `chosen`, which keeps it). */
static void choose_window(int64_t h, int64_t w, void *user, int64_t win[4])
{
    chosen *c = user;
    const decode_crop_params *p = ef_map_ctx_user(c->ctx);
    ef__rrc_window(&p->ranges, h, w, c->ctx, win);
    c->h = h;
    c->w = w;
    memcpy(c->win, win, sizeof c->win);
}

/* The boxes of `out` through the window the decoded pixels cover. */
static int follow_boxes(const decode_crop_params *p, const ef__decode_plan *plan,
                        const chosen *c, int mirror, ef_sample **out,
                        ef_map_ctx *ctx)
{
    if (!p->box.boxes[0])
        return EF_OK;
    int64_t scale_to = p->dct_scale ? p->size : 0, covered[4];
    ef__image_window_covered(plan->data, plan->size, c->win, c->h, c->w,
                             scale_to, scale_to, covered);
    ef__box_map m = ef__box_map_window(covered, p->size, p->size, mirror);
    return ef__boxes_follow(&p->box, "decode_crop", &m, out, ctx);
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
    int64_t shape[3], inside[4];
    int64_t scale_to = p->dct_scale ? p->size : 0;
    ef_buffer *px;
    chosen c = {.ctx = ctx};
    rc = ef__image_decode_window(plan.data, plan.size, p->fields.channels,
                                 choose_window, &c, scale_to, scale_to,
                                 plan.what, &px, shape, inside, &err);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    /* drawn after the window, as its draws come first */
    int mirror = p->mirror > 0 && ef_map_ctx_uniform(ctx) < p->mirror;
    if (p->normalize)
        rc = ef__norm_check(&p->v, shape[2], p->fields.as, ctx);
    ef__decoded img;
    if (rc == EF_OK)
        rc = finish(p, px, shape, inside, mirror, &img, ctx);
    ef_buffer_release(px);
    if (rc != EF_OK)
        return rc;
    rc = ef__decode_output(in, &p->fields, &plan, &img, out, ctx);
    ef_buffer_release(img.buf); /* the sample holds its own reference */
    if (rc != EF_OK)
        return rc;
    return follow_boxes(p, &plan, &c, mirror, out, ctx);
}

static int decode_crop_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    const char *name = "decode_crop";
    decode_crop_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "decode_crop: out of memory");
    p->size = ef__opt_int(o, "size");
    p->dct_scale = ef__opt_bool(o, "dct_scale");
    p->mirror = ef__opt_float(o, "mirror");
    p->normalize = ef__opt_given(o, "mean") || ef__opt_given(o, "std");
    int rc = ef__rrc_ranges_parse(o, name, &p->ranges, err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, name, "layout", "chw", "hwc", &p->chw, err);
    if (rc == EF_OK && !p->normalize && ef__opt_given(o, "layout"))
        rc = ef__err_set(err, EF_ESPEC,
                         "stage 'decode_crop': option 'layout' is the layout "
                         "of the normalized output; give 'mean' or 'std' "
                         "with it (u8 output is [H,W,C])");
    if (rc == EF_OK)
        rc = ef__norm_parse(o, name, &p->v, err);
    if (rc == EF_OK)
        rc = ef__decode_fields_parse(o, name, &p->fields, err);
    if (rc == EF_OK)
        rc = ef__box_opts_parse(o, name, &p->box, err);
    p->fields.budget = &s->ctx->budget;
    p->fields.windowed = 1;
    if (rc == EF_OK)
        rc = ef__map_setup(s, decode_crop_fn, p, (int)ef__opt_int(o, "threads"),
                           1, err);
    if (rc != EF_OK)
        ef__free(p);
    return rc;
}

static const ef__option_def decode_crop_options[] = {
    EF__DECODE_FIELD_OPTIONS,
    EF__OPT("size", EF_OPT_INT, "224", "output side (a square)", 1,
            EF__IMAGE_MAX_SIDE),
    EF__RRC_RANGE_OPTIONS,
    EF__OPT(
        "dct_scale", EF_OPT_BOOL, "true",
        "shrink a JPEG window at least twice the output size by 2, 4 or 8 in "
        "the IDCT (0: output equals decode | random_resized_crop)",
        0, 0),
    EF__OPT("mirror", EF_OPT_FLOAT, "0", "probability of a horizontal flip", 0,
            1),
    EF__OPT(
        "mean", EF_OPT_STRING, "0",
        "given (or std): normalize to f32, (x/255 - mean) / std; one value, or "
        "one per channel",
        0, 0),
    EF__NORM_STD_OPTION,
    EF__OPT("layout", EF_OPT_STRING, "chw",
            "of the normalized output: chw ([C,H,W], as to_chw) or hwc", 0, 0),
    EF__BOX_OPTIONS,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_decode_crop = {
    .info = {"decode_crop",
             "decode + random_resized_crop (+ flip, normalize, to_chw), "
             "decoding only the crop of a JPEG",
             EF__OPTIONS(decode_crop_options)},
    .create = decode_crop_create,
    EF__IMAGE_STAGE_OPS,
};
