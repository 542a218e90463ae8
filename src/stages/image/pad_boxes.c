/* SPDX-License-Identifier: Apache-2.0 */
/* pad_boxes: a sample's boxes (f32 [k,4], boxes.h) padded with zeros to
 * a fixed [n,4], its labels ([k] of i64, i32 or f32) to [n] with
 * `pad_label`, its other per-box fields (box_fields, [k,...] of any
 * dtype) to [n,...] with zeros, and a bool [n] mask field saying which
 * rows are boxes, so that `batch` stacks them densely ([B,n,4]) for a
 * trainer that wants tensors rather than lists. A sample with more than n
 * boxes is an error naming it (overflow=error), or keeps its first n
 * (overflow=drop), counted in the stage's stats as `boxes_dropped`. */
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

typedef struct {
    ef__box_opts box; /* boxes, labels, box_fields; no keep rule here */
    char mask[EF_MAX_NAME];
    int64_t n;
    int64_t pad_label;
    int drop; /* overflow=drop */
    _Atomic uint64_t dropped;
} pad_params;

/* The labels field of s: 1-D, k rows, of a dtype a pad value can be
 * written in. */
static int find_labels(const ef_sample *s, const pad_params *p, int64_t k,
                       ef_map_ctx *ctx)
{
    int i = ef__boxes_field(s, "pad_boxes", "labels", p->box.labels, ctx);
    if (i < 0)
        return i;
    const ef__field *f = &s->fields[i];
    if (f->ndim != 1 || f->shape[0] != k || f->lengths ||
        (f->dtype != EF_I64 && f->dtype != EF_I32 && f->dtype != EF_F32)) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage 'pad_boxes': labels field '%s' is %s "
                               "%s; expected i64, i32 or f32 [%lld], one per "
                               "box of '%s'",
                               p->box.labels, ef_dtype_name(f->dtype), shape,
                               (long long)k, p->box.boxes);
    }
    return i;
}

/* Field i of s replaced by n rows: its first k rows, then rows of `pad`
 * (row_bytes each), or of zeros when pad is NULL; a fixed shape from now
 * on, never ragged. */
static int pad_rows(ef_sample *s, int i, int64_t k, int64_t n, size_t row_bytes,
                    const void *pad)
{
    ef__field *f = &s->fields[i];
    ef_buffer *nb = ef_buffer_new((size_t)n * row_bytes);
    if (!nb)
        return EF_ENOMEM;
    unsigned char *dst = ef_buffer_data(nb);
    memcpy(dst, (const unsigned char *)ef_buffer_data(f->buf) + f->offset,
           (size_t)k * row_bytes);
    if (!pad)
        memset(dst + (size_t)k * row_bytes, 0, (size_t)(n - k) * row_bytes);
    for (int64_t r = k; pad && r < n; r++)
        memcpy(dst + (size_t)r * row_bytes, pad, row_bytes);
    ef_buffer_release(f->buf);
    f->buf = nb;
    f->offset = 0;
    f->nbytes = (size_t)n * row_bytes;
    f->shape[0] = n;
    f->variable = 0;
    return EF_OK;
}

/* The pad label in the labels' dtype, into pad. */
static void pad_label(const pad_params *p, ef_dtype dtype, unsigned char *pad)
{
    int32_t i32 = (int32_t)p->pad_label;
    float f32 = (float)p->pad_label;
    if (dtype == EF_I64)
        memcpy(pad, &p->pad_label, 8);
    else if (dtype == EF_I32)
        memcpy(pad, &i32, 4);
    else
        memcpy(pad, &f32, 4);
}

/* The per-box fields found (idx) padded with zeros to n rows. */
static int pad_fields(const pad_params *p, ef_sample *s, const int *idx,
                      int64_t k)
{
    int rc = EF_OK;
    for (int j = 0; rc == EF_OK && j < p->box.nfields; j++)
        if (idx[j] >= 0)
            rc = pad_rows(s, idx[j], k, p->n,
                          ef__box_row_bytes(&s->fields[idx[j]]), NULL);
    return rc;
}

/* Pads s (the caller's clone) in place: boxes, labels, per-box fields,
 * mask. */
static int pad_sample(pad_params *p, ef_sample *s, int64_t k, ef_map_ctx *ctx)
{
    int bi = ef__sample_find(s, p->box.boxes);
    int64_t rows = s->fields[bi].shape[0];
    int li = p->box.labels[0] ? find_labels(s, p, rows, ctx) : -1;
    if (p->box.labels[0] && li < 0)
        return li;
    int idx[EF__BOX_FIELDS_MAX];
    int rc = ef__box_fields_find(s, &p->box, "pad_boxes", rows, idx, ctx);
    if (rc != EF_OK)
        return rc;
    static const float zero_box[4];
    unsigned char pad[8];
    unsigned char *mask; /* EF_BOOL: one byte, 0 or 1 */
    rc = pad_rows(s, bi, k, p->n, sizeof zero_box, zero_box);
    if (rc == EF_OK && li >= 0) {
        pad_label(p, s->fields[li].dtype, pad);
        rc = pad_rows(s, li, k, p->n, ef_dtype_size(s->fields[li].dtype), pad);
    }
    if (rc == EF_OK)
        rc = pad_fields(p, s, idx, k);
    if (rc == EF_OK)
        rc = ef_sample_add_new(s, p->mask, EF_BOOL, 1, &p->n, (void **)&mask);
    if (rc == EF_EINVAL)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage 'pad_boxes': the sample has a field "
                               "'%s' already; name the mask with mask=NAME",
                               p->mask);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "pad_boxes: out of memory");
    for (int64_t r = 0; r < p->n; r++)
        mask[r] = r < k;
    return EF_OK;
}

static int pad_boxes_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    pad_params *p = ef_map_ctx_user(ctx);
    const float *boxes;
    int64_t k;
    int rc = ef__boxes_read(in, &p->box, "pad_boxes", &boxes, &k, ctx);
    if (rc != EF_OK)
        return rc;
    if (k > p->n && !p->drop)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage 'pad_boxes': %lld boxes in field '%s', "
                               "more than n=%lld; give a larger n, or "
                               "overflow=drop to keep the first n",
                               (long long)k, p->box.boxes, (long long)p->n);
    if (k > p->n) {
        atomic_fetch_add(&p->dropped, (uint64_t)(k - p->n));
        k = p->n;
    }
    *out = ef_sample_clone(in);
    if (!*out)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "pad_boxes: out of memory");
    rc = pad_sample(p, *out, k, ctx);
    if (rc != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
    }
    return rc;
}

static int pad_boxes_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    if (ef__opt_int(o, "n") < 1)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'pad_boxes': give n, the rows to pad the "
                           "boxes to (pad_boxes:n=100)");
    pad_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "pad_boxes: out of memory");
    p->n = ef__opt_int(o, "n");
    p->pad_label = ef__opt_int(o, "pad_label");
    int rc =
        ef__box_field_option(o, "pad_boxes", "boxes", 0, p->box.boxes, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, "pad_boxes", "labels", 1, p->box.labels,
                                  err);
    if (rc == EF_OK)
        rc = ef__box_fields_parse(o, "pad_boxes", &p->box, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, "pad_boxes", "mask", 0, p->mask, err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "pad_boxes", "overflow", "drop", "error",
                            &p->drop, err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    rc = ef__map_setup(s, pad_boxes_fn, p, (int)ef__opt_int(o, "threads"), 1,
                       err);
    if (rc != EF_OK)
        ef__free(p);
    return rc;
}

static const ef__option_def pad_boxes_options[] = {
    EF__OPT("n", EF_OPT_INT, "0", "rows to pad the boxes to (required)", 0,
            1 << 24),
    EF__OPT("boxes", EF_OPT_STRING, "boxes",
            "field of boxes (f32 [k,4], x1 y1 x2 y2 in pixels)", 0, 0),
    EF__OPT(
        "labels", EF_OPT_STRING, "labels",
        "field of one label per box (i64, i32 or f32), padded with pad_label "
        "(empty: none)",
        0, 0),
    EF__OPT("pad_label", EF_OPT_INT, "-1", "label of the padding rows",
            INT32_MIN, INT32_MAX),
    EF__BOX_FIELDS_OPTION,
    EF__OPT("mask", EF_OPT_STRING, "boxes_mask",
            "new bool [n] field: which rows are boxes", 0, 0),
    EF__OPT(
        "overflow", EF_OPT_STRING, "error",
        "more than n boxes: error (naming the sample) or drop (keep the first "
        "n, counted)",
        0, 0),
    EF__MAP_OPTIONS,
};

static void pad_boxes_stats(const ef__stage *s, ef_stage_stats *out)
{
    pad_params *p = ef__map_user(s);
    ef__stats_extra(out, "boxes_dropped", (double)atomic_load(&p->dropped));
}

const ef__stage_def ef__stage_pad_boxes = {
    .info = {"pad_boxes",
             "boxes, labels and per-box fields padded to n rows with a "
             "mask, for dense batches",
             EF__OPTIONS(pad_boxes_options)},
    .create = pad_boxes_create,
    EF__MAP_STAGE_OPS,
    .destroy = ef__image_stage_destroy,
    .stats = pad_boxes_stats,
};
