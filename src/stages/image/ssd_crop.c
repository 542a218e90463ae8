/* SPDX-License-Identifier: Apache-2.0 */
/* ssd_crop: the object detector's random crop (SSD; DALI's
 * RandomBBoxCrop, torchvision's RandomIoUCrop): a window that keeps at
 * least a minimum IoU (or, threshold_type=overlap, a minimum share of the
 * box's area) with one of the sample's boxes, the boxes moved into it,
 * clipped, and dropped with their labels and per-box fields when they
 * leave it (boxes.h). The pixels are copied, not resampled: a `resize`
 * with the same boxes usually follows. Any dtype, [H,W] or [H,W,C].
 *
 * Draws, from the sample's keyed generator (echo copy included): one
 * uniform u choosing among the thresholds (and "no crop", when allowed),
 * then per attempt four: the width's and height's shares of the image,
 * and the window's left and top. An attempt fails when the window's
 * aspect ratio is outside the range, when no box stays in it (by the
 * keep rule), or when none of those that stay has the chosen IoU (or
 * overlap) with it. After `attempts` failures the image stays whole, as
 * with "no crop".
 *
 * DALI's bbox_prune_threshold=F is the keep rule box_keep=visible,
 * box_min_visible=F that every box stage has: it is taken as another
 * name for it, never as a second rule. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

#define MAX_THRESHOLDS 16

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    ef__box_opts box;
    double thresholds[MAX_THRESHOLDS];
    int nthresholds;
    int allow_no_crop;
    int overlap; /* threshold_type=overlap: share of the box, not IoU */
    double scale_min, scale_max, ratio_min, ratio_max;
    int attempts;
} ssd_params;

/* An integer in [0, n), n >= 1, from the keyed stream. */
static int64_t below(ef_map_ctx *ctx, int64_t n)
{
    int64_t k = (int64_t)(ef_map_ctx_uniform(ctx) * (double)n);
    return k < n ? k : n - 1; /* u * n may round up to n */
}

/* One side of the window: a share in [lo, hi] of `side`, at least a
 * pixel and at most the side. */
static int64_t draw_side(ef_map_ctx *ctx, double lo, double hi, int64_t side)
{
    double u = ef_map_ctx_uniform(ctx);
    int64_t v = (int64_t)nearbyint((lo + (hi - lo) * u) * (double)side);
    return v < 1 ? 1 : v > side ? side : v;
}

/* Whether window win passes for the n boxes: one stays in it and the
 * largest IoU (or overlap) of those that stay is at least t. */
static int window_passes(const ssd_params *p, const float *boxes, int64_t n,
                         const int64_t win[4], double t)
{
    ef__box_map m = ef__box_map_window(win, win[2], win[3], 0);
    for (int64_t i = 0; i < n; i++) {
        float moved[4];
        if (!ef__box_map_one(&m, p->box.min_visible, boxes + 4 * i, moved))
            continue;
        double metric = p->overlap ? ef__box_window_overlap(boxes + 4 * i, win)
                                   : ef__box_window_iou(boxes + 4 * i, win);
        if (metric >= t)
            return 1;
    }
    return 0;
}

/* The window {y0, x0, height, width} of an h x w image; the whole image
 * for "no crop" and when every attempt failed. */
static void choose_window(const ssd_params *p, const float *boxes, int64_t n,
                          int64_t h, int64_t w, ef_map_ctx *ctx, int64_t win[4])
{
    int choices = p->nthresholds + (p->allow_no_crop ? 1 : 0);
    int64_t pick = below(ctx, choices);
    win[0] = 0, win[1] = 0, win[2] = h, win[3] = w;
    if (pick == p->nthresholds)
        return; /* no crop */
    double t = p->thresholds[pick];
    for (int a = 0; a < p->attempts; a++) {
        int64_t cw = draw_side(ctx, p->scale_min, p->scale_max, w);
        int64_t ch = draw_side(ctx, p->scale_min, p->scale_max, h);
        int64_t x0 = below(ctx, w - cw + 1), y0 = below(ctx, h - ch + 1);
        const int64_t cand[4] = {y0, x0, ch, cw};
        double ratio = (double)cw / (double)ch;
        if (ratio < p->ratio_min || ratio > p->ratio_max ||
            !window_passes(p, boxes, n, cand, t))
            continue;
        memcpy(win, cand, sizeof cand);
        return;
    }
}

/* The window's pixels, copied into a new image field of *out. */
static int copy_window(const ef_sample *in, const ef__image *img,
                       const int64_t win[4], ef_sample **out, ef_map_ctx *ctx)
{
    int64_t shape[3] = {win[2], win[3], img->c};
    unsigned char *dst;
    int rc = ef__image_output(in, img->index, img->f->dtype, img->f->ndim,
                              shape, out, (void **)&dst, ctx);
    if (rc != EF_OK)
        return rc;
    size_t px = ef_dtype_size(img->f->dtype) * (size_t)img->c;
    for (int64_t y = 0; y < win[2]; y++)
        memcpy(dst + (size_t)(y * win[3]) * px,
               img->data + (size_t)((win[0] + y) * img->w + win[1]) * px,
               (size_t)win[3] * px);
    return EF_OK;
}

static int ssd_crop_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const ssd_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__ANY_DTYPE, &img, ctx);
    const float *boxes = NULL;
    int64_t n = 0;
    if (rc == EF_OK)
        rc = ef__boxes_read(in, &p->box, "ssd_crop", &boxes, &n, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t win[4] = {0, 0, img.h, img.w};
    if (img.h >= 1 && img.w >= 1)
        choose_window(p, boxes, n, img.h, img.w, ctx, win);
    if (win[2] == img.h && win[3] == img.w) {
        *out = ef_sample_clone(in); /* uncropped: shares the payload */
        if (!*out)
            return ef_map_ctx_fail(ctx, EF_ENOMEM, "ssd_crop: out of memory");
    } else {
        rc = copy_window(in, &img, win, out, ctx);
        if (rc != EF_OK)
            return rc;
    }
    ef__box_map m = ef__box_map_window(win, win[2], win[3], 0);
    return ef__boxes_follow(&p->box, "ssd_crop", &m, out, ctx);
}

/* "0,0.1,0.3" into p's thresholds, each in [0, 1]. */
static int parse_thresholds(const char *text, ssd_params *p, ef__err *err)
{
    const char *s = text;
    p->nthresholds = 0;
    while (*s) {
        char *end;
        errno = 0;
        double t = strtod(s, &end);
        while (*end == ' ')
            end++;
        if (end == s || errno || !(t >= 0 && t <= 1) || (*end && *end != ',') ||
            p->nthresholds == MAX_THRESHOLDS)
            return ef__err_set(err, EF_ESPEC,
                               "stage 'ssd_crop': option 'thresholds' "
                               "expects a quoted list of up to %d minimum "
                               "IoUs between 0 and 1 (\"0.1,0.3,0.5\"), got "
                               "'%s'",
                               MAX_THRESHOLDS, text);
        p->thresholds[p->nthresholds++] = t;
        s = *end ? end + 1 : end;
    }
    if (!p->nthresholds && !p->allow_no_crop)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'ssd_crop': nothing to choose from: give "
                           "'thresholds' or allow_no_crop=true");
    return EF_OK;
}

/* DALI's bbox_prune_threshold=F into b: box_keep=visible,
 * box_min_visible=F under its other name, so written beside either of
 * those it would be a second rule. */
static int prune_alias(const ef__opts *o, ef__box_opts *b, ef__err *err)
{
    if (!ef__opt_given(o, "bbox_prune_threshold"))
        return EF_OK;
    double f = ef__opt_float(o, "bbox_prune_threshold");
    if (ef__opt_given(o, "box_keep") || ef__opt_given(o, "box_min_visible"))
        return ef__err_set(err, EF_ESPEC,
                           "stage 'ssd_crop': bbox_prune_threshold=%g is "
                           "box_keep=visible,box_min_visible=%g under DALI's "
                           "name; give one or the other, not both",
                           f, f);
    if (!(f > 0))
        return ef__err_set(err, EF_ESPEC,
                           "stage 'ssd_crop': option 'bbox_prune_threshold' "
                           "must be above 0 (the least share of a box's area "
                           "that stays; got %g)",
                           f);
    b->min_visible = f;
    return EF_OK;
}

/* The ranges, each in order. */
static int check_ranges(const ssd_params *p, ef__err *err)
{
    if (p->scale_min > p->scale_max || p->ratio_min > p->ratio_max)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'ssd_crop': ranges must not be reversed "
                           "(got scale %g to %g, ratio %g to %g)",
                           p->scale_min, p->scale_max, p->ratio_min,
                           p->ratio_max);
    return EF_OK;
}

static int ssd_crop_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    ssd_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "ssd_crop: out of memory");
    p->allow_no_crop = ef__opt_bool(o, "allow_no_crop");
    p->scale_min = ef__opt_float(o, "scale_min");
    p->scale_max = ef__opt_float(o, "scale_max");
    p->ratio_min = ef__opt_float(o, "ratio_min");
    p->ratio_max = ef__opt_float(o, "ratio_max");
    p->attempts = (int)ef__opt_int(o, "attempts");
    int rc = ef__box_opts_parse(o, "ssd_crop", &p->box, err);
    if (rc == EF_OK)
        rc = prune_alias(o, &p->box, err);
    int iou = 1;
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "ssd_crop", "threshold_type", "iou", "overlap",
                            &iou, err);
    p->overlap = !iou;
    if (rc == EF_OK && !p->box.boxes[0])
        rc = ef__err_set(err, EF_ESPEC,
                         "stage 'ssd_crop': option 'boxes' must name the "
                         "boxes field");
    if (rc == EF_OK)
        rc = parse_thresholds(ef__opt_string(o, "thresholds"), p, err);
    if (rc == EF_OK)
        rc = check_ranges(p, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    return ef__image_stage_setup(s, o, ssd_crop_fn, p, err);
}

static const ef__option_def ssd_crop_options[] = {
    EF__OPT("thresholds", EF_OPT_STRING, "0,0.1,0.3,0.5,0.7,0.9",
            "minimum IoUs (or overlaps) with a box to choose from, one per "
            "sample",
            0, 0),
    EF__OPT("threshold_type", EF_OPT_STRING, "iou",
            "what thresholds measure: iou (box and window) or overlap (share "
            "of the box's area inside the window), as DALI's",
            0, 0),
    EF__OPT("allow_no_crop", EF_OPT_BOOL, "true",
            "\"no crop\" is one more choice beside the thresholds", 0, 0),
    EF__OPT("scale_min", EF_OPT_FLOAT, "0.3",
            "smallest share of the image's width and of its height", 0.001, 1),
    EF__OPT("scale_max", EF_OPT_FLOAT, "1",
            "largest share of the image's width and of its height", 0.001, 1),
    EF__OPT("ratio_min", EF_OPT_FLOAT, "0.5",
            "smallest aspect ratio (width/height) of the window", 0.001, 1000),
    EF__OPT("ratio_max", EF_OPT_FLOAT, "2",
            "largest aspect ratio (width/height) of the window", 0.001, 1000),
    EF__OPT("attempts", EF_OPT_INT, "50",
            "windows tried for the chosen threshold before keeping the whole "
            "image",
            1, 1000000),
    EF__OPT("boxes", EF_OPT_STRING, "boxes",
            "field of boxes (f32 [n,4], x1 y1 x2 y2 in pixels)", 0, 0),
    EF__BOX_RULE_OPTIONS,
    EF__OPT("bbox_prune_threshold", EF_OPT_FLOAT, "0",
            "DALI's name for box_keep=visible,box_min_visible=F: a box stays "
            "when at least this share of its area does",
            0, 1),
    EF__IMAGE_FIELD_OPTION,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_ssd_crop = {
    .info = {"ssd_crop",
             "random crop keeping a minimum IoU with a box (SSD), boxes, "
             "labels and per-box fields cropped with it",
             EF__OPTIONS(ssd_crop_options)},
    .create = ssd_crop_create,
    EF__IMAGE_STAGE_OPS,
};
