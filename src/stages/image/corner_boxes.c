/* SPDX-License-Identifier: Apache-2.0 */
/* corner_boxes: the boxes of a sample (f32 [n,4], x1, y1, x2, y2 in
 * pixels, boxes.h) from four 1-D f32 fields of n coordinates each, as
 * the TF Object Detection API's tf.Examples hold them:
 *
 *     tfexample:features="image/encoded,
 *         image/object/bbox/xmin:float:var, image/object/bbox/ymin:float:var,
 *         image/object/bbox/xmax:float:var, image/object/bbox/ymax:float:var,
 *         image/object/class/label:int64:var as labels"
 *       | decode:fields=image/encoded | corner_boxes
 *
 * With normalized=1 (the default) the coordinates are shares of the
 * image's width and height, in [0, 1]; the size is the decoded image's
 * (field `image`, [H,W] or [H,W,C]), or, to build boxes before decoding
 * (for decode_crop), that of two scalar integer fields, width= and
 * height= (image/width and image/height in those records). With
 * normalized=0 they are pixels already, in [0, W] and [0, H].
 *
 * A box is x1 = xmin, y1 = ymin, x2 = xmax, y2 = ymax, scaled. Lists of
 * different lengths, a labels field without a row per box, and a
 * coordinate that is not finite are refused. As in the coco source, a box
 * of zero or negative size or one reaching out of its image is refused
 * with boxes=refuse (the default), naming the box and its coordinates;
 * boxes=clip clips it to the image and drops it, with its label, if
 * nothing is left, counting both. The errors are EF_ESHAPE (the fields
 * are not what the stage reads) and EF_EFORMAT (the values are bad), so
 * on_error=skip drops such a sample and counts it.
 *
 * The boxes field is variable-length (batch makes it a list, as the
 * labels); drop=1 (the default) removes the four coordinate fields. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

/* Spec errors begin with the stage; a sample's errors get it, with the
 * sample, from the map machinery (map.c). */
#define STAGE "corner_boxes"

enum { XMIN, YMIN, XMAX, YMAX };

static const char *const coord_option[4] = {"xmin", "ymin", "xmax", "ymax"};

typedef struct {
    char coord[4][EF_MAX_NAME]; /* the fields of xmin, ymin, xmax, ymax */
    char image[EF_MAX_NAME];    /* "" when the size comes from: */
    char width[EF_MAX_NAME], height[EF_MAX_NAME];
    char labels[EF_MAX_NAME]; /* "": none */
    char out[EF_MAX_NAME];
    /* the other per-box fields (box_fields), whose rows go with the
     * boxes' as the labels' do; .boxes and .labels name out and labels
     * for messages */
    ef__box_opts per_box;
    int normalized, clip, drop;
    _Atomic uint64_t clipped, dropped;
} corner_params;

/* ---- reading the fields -------------------------------------------- */

/* The index of field `name` of s, which option `option` names. */
static int find_field(const ef_sample *s, const char *option, const char *name,
                      ef_map_ctx *ctx)
{
    int i = ef__sample_find(s, name);
    if (i >= 0)
        return i;
    char names[EF__FIELD_NAMES_MAX];
    ef__image_field_names(s, names, sizeof names);
    return ef_map_ctx_fail(ctx, EF_ESHAPE,
                           "no field '%s' (option '%s'; the sample "
                           "has %s)",
                           name, option, names);
}

/* Coordinate field c of s, checked: f32 [n] of one example. */
static int find_coord(const ef_sample *s, const corner_params *p, int c,
                      ef_map_ctx *ctx)
{
    int i = find_field(s, coord_option[c], p->coord[c], ctx);
    if (i < 0)
        return i;
    const ef__field *f = &s->fields[i];
    if (f->dtype != EF_F32 || f->ndim != 1 || f->lengths) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "field '%s' (option '%s') is %s %s%s; "
                               "expected f32 [n], one coordinate per box of "
                               "one example (tfexample's NAME:float:var)",
                               p->coord[c], coord_option[c],
                               ef_dtype_name(f->dtype), shape,
                               f->lengths ? " (ragged, a batch)" : "");
    }
    return i;
}

/* The value of a one-element integer field (width= or height=), >= 1. */
static int size_field(const ef_sample *s, const char *option, const char *name,
                      double *out, ef_map_ctx *ctx)
{
    int i = find_field(s, option, name, ctx);
    if (i < 0)
        return i;
    const ef__field *f = &s->fields[i];
    const unsigned char *d =
        (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    int64_t v = 0;
    int32_t v32;
    int ok = ef__shape_count(f->ndim, f->shape) == 1 && !f->lengths &&
             (f->dtype == EF_I64 || f->dtype == EF_I32);
    if (ok && f->dtype == EF_I64)
        memcpy(&v, d, sizeof v);
    else if (ok) {
        memcpy(&v32, d, sizeof v32);
        v = v32;
    }
    if (!ok || v < 1) {
        /* a field of the wrong kind is EF_ESHAPE, a bad size EF_EFORMAT */
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, ok ? EF_EFORMAT : EF_ESHAPE,
                               "field '%s' (option '%s') is %s %s%s; "
                               "expected one i64 or i32 of at least 1, the "
                               "image's size in pixels",
                               name, option, ef_dtype_name(f->dtype), shape,
                               ok ? " below 1" : "");
    }
    *out = (double)v;
    return EF_OK;
}

/* The image's width and height in pixels, from where p says. */
static int image_size(const ef_sample *s, const corner_params *p, double *w,
                      double *h, ef_map_ctx *ctx)
{
    if (!p->image[0]) {
        int rc = size_field(s, "width", p->width, w, ctx);
        return rc < 0 ? rc : size_field(s, "height", p->height, h, ctx);
    }
    ef__image img;
    int rc = ef__image_find(s, p->image, EF__ANY_DTYPE, &img, ctx);
    if (rc != EF_OK)
        return rc;
    if (img.h < 1 || img.w < 1)
        return ef_map_ctx_fail(ctx, EF_EFORMAT,
                               "image field '%s' is empty (%lld x "
                               "%lld); boxes need its size",
                               p->image, (long long)img.w, (long long)img.h);
    *w = (double)img.w;
    *h = (double)img.h;
    return EF_OK;
}

/* ---- one box --------------------------------------------------------- */

static double clamp(double v, double hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

/* Box i of n from the coordinates c[XMIN..YMAX][i] into out, in pixels of
 * a w x h image: EF_OK and *keep, or the refusal. */
static int make_box(corner_params *p, const float *const c[4], int64_t i,
                    int64_t n, double w, double h, float out[4], int *keep,
                    ef_map_ctx *ctx)
{
    double v[4];
    for (int k = 0; k < 4; k++) {
        v[k] = c[k][i];
        if (!isfinite(v[k]))
            return ef_map_ctx_fail(ctx, EF_EFORMAT,
                                   "box %lld of %lld: field '%s' "
                                   "(option '%s') holds %g; expected a "
                                   "finite coordinate",
                                   (long long)i, (long long)n, p->coord[k],
                                   coord_option[k], v[k]);
    }
    /* the image's extent in the coordinates' own units, and the scale to
     * pixels */
    double xhi = p->normalized ? 1 : w, yhi = p->normalized ? 1 : h;
    double xs = p->normalized ? w : 1, ys = p->normalized ? h : 1;
    int empty = !(v[XMAX] > v[XMIN] && v[YMAX] > v[YMIN]);
    int outside = v[XMIN] < 0 || v[YMIN] < 0 || v[XMAX] > xhi || v[YMAX] > yhi;
    if ((empty || outside) && !p->clip)
        return ef_map_ctx_fail(
            ctx, EF_EFORMAT,
            "box %lld of %lld: (xmin, ymin, xmax, ymax) = (%g, %g, "
            "%g, %g) from fields '%s', '%s', '%s', '%s' %s; expected 0 <= "
            "xmin < xmax <= %g and 0 <= ymin < ymax <= %g (%s); boxes=clip "
            "clips boxes to the image and drops empty ones",
            (long long)i, (long long)n, v[XMIN], v[YMIN], v[XMAX], v[YMAX],
            p->coord[XMIN], p->coord[YMIN], p->coord[XMAX], p->coord[YMAX],
            empty ? "has a width or height of zero or less"
                  : "reaches out of its image",
            xhi, yhi,
            p->normalized ? "normalized=1: shares of the image's size"
                          : "normalized=0: pixels");
    for (int k = 0; k < 4; k++)
        v[k] = clamp(v[k], k % 2 ? yhi : xhi) * (k % 2 ? ys : xs);
    *keep = v[XMAX] > v[XMIN] && v[YMAX] > v[YMIN];
    if (!*keep) {
        atomic_fetch_add(&p->dropped, 1);
        return EF_OK;
    }
    if (outside)
        atomic_fetch_add(&p->clipped, 1);
    for (int k = 0; k < 4; k++)
        out[k] = (float)v[k];
    return EF_OK;
}

/* ---- one sample ------------------------------------------------------ */

/* Whether field i of s is one of the coordinates that drop=1 removes. */
static int dropped_coord(const corner_params *p, const int ci[4], int i)
{
    return p->drop &&
           (i == ci[XMIN] || i == ci[YMIN] || i == ci[XMAX] || i == ci[YMAX]);
}

/* Whether field i of the input has a row per box: the labels' (li) or
 * one of the per-box fields' (idx[0..nidx)). */
static int per_box(int i, int li, const int *idx, int nidx)
{
    for (int j = 0; j < nidx; j++)
        if (idx[j] == i)
            return 1;
    return i == li;
}

/* The output: in's fields but the dropped coordinates (labels and the
 * per-box fields idx[] without the rows of dropped boxes), then the
 * boxes (taking the reference on `boxes`). */
static int build(const corner_params *p, const ef_sample *in, const int ci[4],
                 int li, const int *idx, ef_buffer *boxes, int64_t kept,
                 int64_t n, const unsigned char *keep, ef_sample **out,
                 ef_map_ctx *ctx)
{
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    for (int i = 0; i < in->nfields && rc == EF_OK; i++) {
        if (dropped_coord(p, ci, i))
            continue;
        rc = ef__sample_add_field(o, &in->fields[i]);
        if (rc == EF_OK && kept < n && per_box(i, li, idx, p->per_box.nfields))
            rc = ef__box_drop_rows(&o->fields[o->nfields - 1], keep, kept);
    }
    int64_t shape[2] = {kept, 4};
    int added = rc == EF_OK;
    if (added)
        rc = ef_sample_add(o, p->out, EF_F32, 2, shape, boxes, 0);
    ef_buffer_release(boxes);
    if (rc == EF_OK)
        rc = ef_sample_set_variable(o, p->out);
    if (rc != EF_OK) {
        ef_sample_free(o);
        if (added && rc == EF_EINVAL)
            return ef_map_ctx_fail(ctx, EF_ESHAPE,
                                   "the sample has a field '%s' "
                                   "already; name the boxes with out=NAME%s",
                                   p->out, p->drop ? "" : " (or drop=1)");
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    *out = o;
    return EF_OK;
}

/* The labels field of s (or -1 when p names none), checked: n rows. */
static int find_labels(const ef_sample *s, const corner_params *p, int64_t n,
                       ef_map_ctx *ctx)
{
    if (!p->labels[0])
        return -1;
    int i = find_field(s, "labels", p->labels, ctx);
    if (i < 0)
        return i;
    const ef__field *f = &s->fields[i];
    if (f->ndim < 1 || f->shape[0] != n || f->lengths) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "labels field '%s' is %s %s; expected "
                               "one row per box, [%lld], as field '%s' has "
                               "%lld coordinates (labels= names another "
                               "field, or none when empty)",
                               p->labels, ef_dtype_name(f->dtype), shape,
                               (long long)n, p->coord[XMIN], (long long)n);
    }
    return i;
}

/* The four coordinate fields of s into ci and c, each of *n values. */
static int find_coords(const ef_sample *s, const corner_params *p, int ci[4],
                       const float *c[4], int64_t *n, ef_map_ctx *ctx)
{
    for (int k = 0; k < 4; k++) {
        ci[k] = find_coord(s, p, k, ctx);
        if (ci[k] < 0)
            return ci[k];
        const ef__field *f = &s->fields[ci[k]];
        c[k] = (const float *)((const unsigned char *)ef_buffer_data(f->buf) +
                               f->offset);
        if (k && f->shape[0] != *n)
            return ef_map_ctx_fail(
                ctx, EF_EFORMAT,
                "field '%s' (option '%s') holds %lld values and "
                "field '%s' (option 'xmin') %lld; expected one of each "
                "per box",
                p->coord[k], coord_option[k], (long long)f->shape[0],
                p->coord[XMIN], (long long)*n);
        *n = f->shape[0];
    }
    return EF_OK;
}

static int corner_boxes_fn(const ef_sample *in, ef_sample **out,
                           ef_map_ctx *ctx)
{
    corner_params *p = ef_map_ctx_user(ctx);
    if (in->origin.members)
        return ef_map_ctx_fail(ctx, EF_ESPEC,
                               "the sample is a batch; place "
                               "corner_boxes before batch");
    int ci[4];
    const float *c[4];
    int64_t n = 0;
    double w = 0, h = 0;
    int rc = find_coords(in, p, ci, c, &n, ctx);
    if (rc != EF_OK)
        return rc;
    int li = find_labels(in, p, n, ctx);
    if (p->labels[0] && li < 0)
        return li;
    int idx[EF__BOX_FIELDS_MAX];
    rc = ef__box_fields_find(in, &p->per_box, STAGE, n, idx, ctx);
    if (rc == EF_OK)
        rc = image_size(in, p, &w, &h, ctx);
    if (rc != EF_OK)
        return rc;
    ef_buffer *boxes = ef_buffer_new(n ? (size_t)n * 4 * sizeof(float) : 1);
    unsigned char *keep = ef__malloc(n ? (size_t)n : 1);
    if (!boxes || !keep) {
        ef_buffer_release(boxes);
        ef__free(keep);
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory for %lld boxes",
                               (long long)n);
    }
    float *dst = ef_buffer_data(boxes);
    int64_t kept = 0;
    for (int64_t i = 0; i < n && rc == EF_OK; i++) {
        int k = 0;
        rc = make_box(p, c, i, n, w, h, dst + 4 * kept, &k, ctx);
        keep[i] = (unsigned char)k;
        kept += k;
    }
    if (rc == EF_OK)
        rc = build(p, in, ci, li, idx, boxes, kept, n, keep, out, ctx);
    else
        ef_buffer_release(boxes);
    ef__free(keep);
    return rc;
}

/* ---- the stage ------------------------------------------------------- */

/* Where the image's size comes from: `image`, or width= and height=
 * together (then image= may not be written too). */
static int size_options(const ef__opts *o, corner_params *p, ef__err *err)
{
    int rc = ef__box_field_option(o, STAGE, "width", 1, p->width, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, STAGE, "height", 1, p->height, err);
    if (rc != EF_OK)
        return rc;
    if (!p->width[0] != !p->height[0])
        return ef__err_set(err, EF_ESPEC,
                           STAGE ": give both width= and height= (the "
                                 "fields of the image's size, as "
                                 "width=image/width,height=image/height), or "
                                 "neither to read the size of image=%s",
                           ef__opt_string(o, "image"));
    if (p->width[0] && ef__opt_given(o, "image"))
        return ef__err_set(err, EF_ESPEC,
                           STAGE ": the size comes from image= or from "
                                 "width= and height=, not both");
    return p->width[0]
               ? EF_OK
               : ef__box_field_option(o, STAGE, "image", 0, p->image, err);
}

static int corner_params_parse(const ef__opts *o, corner_params *p,
                               ef__err *err)
{
    int rc = EF_OK;
    for (int k = 0; k < 4 && rc == EF_OK; k++)
        rc = ef__box_field_option(o, STAGE, coord_option[k], 0, p->coord[k],
                                  err);
    for (int k = 0; k < 4 && rc == EF_OK; k++)
        for (int j = 0; j < k && rc == EF_OK; j++)
            if (!strcmp(p->coord[k], p->coord[j]))
                rc =
                    ef__err_set(err, EF_ESPEC,
                                STAGE ": options '%s' and '%s' both name "
                                      "field '%s'; each coordinate has its own",
                                coord_option[j], coord_option[k], p->coord[k]);
    if (rc == EF_OK)
        rc = size_options(o, p, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, STAGE, "labels", 1, p->labels, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, STAGE, "out", 0, p->out, err);
    memcpy(p->per_box.boxes, p->out, sizeof p->out);
    memcpy(p->per_box.labels, p->labels, sizeof p->labels);
    if (rc == EF_OK)
        rc = ef__box_fields_parse(o, STAGE, &p->per_box, err);
    int refuse = 1;
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "corner_boxes", "boxes", "refuse", "clip",
                            &refuse, err);
    p->clip = !refuse;
    p->normalized = ef__opt_bool(o, "normalized");
    p->drop = ef__opt_bool(o, "drop");
    return rc;
}

static int corner_boxes_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    corner_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "corner_boxes: out of memory");
    int rc = corner_params_parse(o, p, err);
    if (rc == EF_OK)
        rc = ef__map_setup(s, corner_boxes_fn, p,
                           (int)ef__opt_int(o, "threads"), 1, err);
    if (rc != EF_OK)
        ef__free(p);
    return rc;
}

static void corner_boxes_destroy(ef__stage *s)
{
    corner_params *p = ef__map_user(s);
    ef__map_destroy(s);
    ef__free(p);
}

static void corner_boxes_stats(const ef__stage *s, ef_stage_stats *out)
{
    corner_params *p = ef__map_user(s);
    ef__stats_extra(out, "boxes_clipped", (double)atomic_load(&p->clipped));
    ef__stats_extra(out, "boxes_dropped", (double)atomic_load(&p->dropped));
}

static const ef__option_def corner_boxes_options[] = {
    EF__OPT("xmin", EF_OPT_STRING, "image/object/bbox/xmin",
            "f32 [n] field of the boxes' left edges", 0, 0),
    EF__OPT("ymin", EF_OPT_STRING, "image/object/bbox/ymin",
            "f32 [n] field of the boxes' top edges", 0, 0),
    EF__OPT("xmax", EF_OPT_STRING, "image/object/bbox/xmax",
            "f32 [n] field of the boxes' right edges", 0, 0),
    EF__OPT("ymax", EF_OPT_STRING, "image/object/bbox/ymax",
            "f32 [n] field of the boxes' bottom edges", 0, 0),
    EF__OPT("normalized", EF_OPT_BOOL, "true",
            "coordinates in [0, 1], shares of the image's size (false: "
            "pixels)",
            0, 0),
    EF__OPT("image", EF_OPT_STRING, "image",
            "decoded image field ([H,W] or [H,W,C]) whose size the boxes "
            "have",
            0, 0),
    EF__OPT("width", EF_OPT_STRING, "",
            "instead of image: scalar int field of the image's width "
            "(image/width), with height",
            0, 0),
    EF__OPT("height", EF_OPT_STRING, "",
            "instead of image: scalar int field of the image's height "
            "(image/height), with width",
            0, 0),
    EF__OPT("labels", EF_OPT_STRING, "labels",
            "field of one row per box, checked and dropped with its box "
            "(empty: none)",
            0, 0),
    EF__OPT("box_fields", EF_OPT_STRING, "",
            "other fields of one row per box (\"a,b\"), as "
            "image/object/is_crowd, whose rows go with the boxes; those a "
            "sample lacks are skipped",
            0, 0),
    EF__OPT("out", EF_OPT_STRING, "boxes",
            "new field of the boxes, f32 [n,4] x1 y1 x2 y2 in pixels", 0, 0),
    EF__OPT("boxes", EF_OPT_STRING, "refuse",
            "refuse|clip: boxes empty or reaching out of the image", 0, 0),
    EF__OPT("drop", EF_OPT_BOOL, "true", "remove the four coordinate fields", 0,
            0),
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_corner_boxes = {
    .info = {"corner_boxes",
             "boxes (f32 [n,4], xyxy pixels) from four coordinate lists, "
             "as the TF Object Detection API's tf.Examples hold them",
             EF__OPTIONS(corner_boxes_options)},
    .create = corner_boxes_create,
    .destroy = corner_boxes_destroy,
    .stats = corner_boxes_stats,
    EF__MAP_STAGE_OPS,
};
