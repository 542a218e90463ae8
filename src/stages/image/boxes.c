/* SPDX-License-Identifier: Apache-2.0 */
/* Boxes through an image stage's geometry (see boxes.h). */
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "stages/image/boxes.h"
#include "stages/image/image_stage.h"

ef__box_map ef__box_map_window(const int64_t win[4], int64_t out_h,
                               int64_t out_w, int mirror)
{
    /* an image without pixels has no scale; no box stays in it */
    return (ef__box_map){.x0 = (double)win[1],
                         .y0 = (double)win[0],
                         .sx = win[3] ? (double)out_w / (double)win[3] : 1,
                         .sy = win[2] ? (double)out_h / (double)win[2] : 1,
                         .out_w = (double)out_w,
                         .out_h = (double)out_h,
                         .mirror = mirror};
}

static double clamp(double v, double hi)
{
    return v < 0 ? 0 : v > hi ? hi : v;
}

/* Area of a box, an inverted one counting as none. */
static double area(double x1, double y1, double x2, double y2)
{
    double w = x2 - x1, h = y2 - y1;
    return w > 0 && h > 0 ? w * h : 0;
}

int ef__box_map_one(const ef__box_map *m, double min_visible, const float in[4],
                    float out[4])
{
    double x1 = ((double)in[0] - m->x0) * m->sx;
    double x2 = ((double)in[2] - m->x0) * m->sx;
    double y1 = ((double)in[1] - m->y0) * m->sy;
    double y2 = ((double)in[3] - m->y0) * m->sy;
    if (m->mirror) {
        double t = m->out_w - x2;
        x2 = m->out_w - x1;
        x1 = t;
    }
    double cx1 = clamp(x1, m->out_w), cx2 = clamp(x2, m->out_w);
    double cy1 = clamp(y1, m->out_h), cy2 = clamp(y2, m->out_h);
    double full = area(x1, y1, x2, y2);
    int keep;
    if (!(m->out_w > 0 && m->out_h > 0)) {
        keep = 0; /* nothing to be seen in */
    } else if (min_visible > 0 && full > 0) {
        keep = area(cx1, cy1, cx2, cy2) >= min_visible * full;
    } else {
        /* the centre rule; written so that NaN is dropped */
        double cx = (x1 + x2) / 2, cy = (y1 + y2) / 2;
        keep = cx >= 0 && cx <= m->out_w && cy >= 0 && cy <= m->out_h;
    }
    out[0] = (float)cx1;
    out[1] = (float)cy1;
    out[2] = (float)cx2;
    out[3] = (float)cy2;
    return keep;
}

int64_t ef__box_map_all(const ef__box_map *m, double min_visible,
                        const float *in, int64_t n, float *out,
                        unsigned char *keep)
{
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++) {
        keep[i] = (unsigned char)ef__box_map_one(m, min_visible, in + 4 * i,
                                                 out + 4 * kept);
        kept += keep[i];
    }
    return kept;
}

double ef__box_window_iou(const float box[4], const int64_t win[4])
{
    double wx1 = (double)win[1], wy1 = (double)win[0];
    double wx2 = wx1 + (double)win[3], wy2 = wy1 + (double)win[2];
    double ix1 = box[0] > wx1 ? box[0] : wx1, iy1 = box[1] > wy1 ? box[1] : wy1;
    double ix2 = box[2] < wx2 ? box[2] : wx2, iy2 = box[3] < wy2 ? box[3] : wy2;
    double inter = area(ix1, iy1, ix2, iy2);
    double uni = area(box[0], box[1], box[2], box[3]) +
                 (double)win[2] * (double)win[3] - inter;
    return inter / uni;
}

double ef__box_window_overlap(const float box[4], const int64_t win[4])
{
    double wx1 = (double)win[1], wy1 = (double)win[0];
    double wx2 = wx1 + (double)win[3], wy2 = wy1 + (double)win[2];
    double ix1 = box[0] > wx1 ? box[0] : wx1, iy1 = box[1] > wy1 ? box[1] : wy1;
    double ix2 = box[2] < wx2 ? box[2] : wx2, iy2 = box[3] < wy2 ? box[3] : wy2;
    double full = area(box[0], box[1], box[2], box[3]);
    return full > 0 ? area(ix1, iy1, ix2, iy2) / full : 0;
}

/* Copies option `name` (a field name, may be empty) into dst. */
int ef__box_field_option(const ef__opts *o, const char *stage, const char *name,
                         int may_be_empty, char dst[EF_MAX_NAME], ef__err *err)
{
    const char *v = ef__opt_string(o, name);
    if ((!v[0] && !may_be_empty) || strlen(v) >= EF_MAX_NAME)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option '%s' must name a field (1 to "
                           "%d characters%s), not '%.*s'",
                           stage, name, EF_MAX_NAME - 1,
                           may_be_empty ? ", or empty for none" : "", 64, v);
    strcpy(dst, v);
    return EF_OK;
}

static int bad_fields(const char *stage, const char *text, const char *why,
                      ef__err *err)
{
    return ef__err_set(err, EF_ESPEC,
                       "stage '%s': option 'box_fields' %s in '%s'; expected "
                       "up to %d comma-separated field names of 1 to %d "
                       "bytes, each once, none the boxes field (quote the "
                       "list in a spec: box_fields=\"iscrowd,area\")",
                       stage, why, text, EF__BOX_FIELDS_MAX, EF_MAX_NAME - 1);
}

/* Whether b->fields holds `name` already. */
static int listed(const ef__box_opts *b, const char *name)
{
    for (int j = 0; j < b->nfields; j++)
        if (strcmp(name, b->fields[j]) == 0)
            return 1;
    return 0;
}

/* Adds the name of n bytes at p to b->fields. */
static int add_field(const char *stage, const char *text, const char *p,
                     size_t n, ef__box_opts *b, ef__err *err)
{
    if (n == 0)
        return bad_fields(stage, text, "has an empty name", err);
    if (n >= EF_MAX_NAME)
        return bad_fields(stage, text, "has a name too long", err);
    char name[EF_MAX_NAME];
    memcpy(name, p, n);
    name[n] = '\0';
    if (strcmp(name, b->boxes) == 0)
        return bad_fields(stage, text, "names the boxes field", err);
    if (strcmp(name, b->labels) == 0)
        return EF_OK; /* its rows go with the boxes already, once */
    if (listed(b, name))
        return bad_fields(stage, text, "names a field twice", err);
    if (b->nfields == EF__BOX_FIELDS_MAX)
        return bad_fields(stage, text, "has too many names", err);
    strcpy(b->fields[b->nfields++], name);
    return EF_OK;
}

int ef__box_fields_parse(const ef__opts *o, const char *stage, ef__box_opts *b,
                         ef__err *err)
{
    const char *text = ef__opt_string(o, "box_fields");
    b->nfields = 0;
    if (!*text)
        return EF_OK;
    for (const char *p = text;;) {
        size_t n = strcspn(p, ",");
        const char *end = p + n;
        while (n && *p == ' ')
            p++, n--;
        while (n && p[n - 1] == ' ')
            n--;
        int rc = add_field(stage, text, p, n, b, err);
        if (rc != EF_OK || !*end)
            return rc;
        p = end + 1;
    }
}

int ef__box_opts_parse(const ef__opts *o, const char *stage, ef__box_opts *b,
                       ef__err *err)
{
    memset(b, 0, sizeof *b);
    int center = 1;
    int rc = ef__box_field_option(o, stage, "boxes", 1, b->boxes, err);
    if (rc == EF_OK)
        rc = ef__box_field_option(o, stage, "labels", 1, b->labels, err);
    if (rc == EF_OK)
        rc = ef__box_fields_parse(o, stage, b, err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, stage, "box_keep", "center", "visible", &center,
                            err);
    if (rc != EF_OK)
        return rc;
    double share = ef__opt_float(o, "box_min_visible");
    /* a share given is the visible rule asked for; with box_keep=center
     * written too, one of them would be ignored */
    if (ef__opt_given(o, "box_min_visible")) {
        if (ef__opt_given(o, "box_keep") && center)
            return ef__err_set(err, EF_ESPEC,
                               "stage '%s': box_min_visible=%g is the rule "
                               "box_keep=visible; it cannot go with "
                               "box_keep=center",
                               stage, share);
        center = 0;
    }
    if (!center && !(share > 0))
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'box_min_visible' must be "
                           "above 0 (a share of a box's area; got %g)",
                           stage, share);
    b->min_visible = center ? 0 : share;
    return EF_OK;
}

int ef__boxes_field(const ef_sample *s, const char *stage, const char *what,
                    const char *name, ef_map_ctx *ctx)
{
    int i = ef__sample_find(s, name);
    if (i < 0) {
        char names[EF__FIELD_NAMES_MAX];
        ef__image_field_names(s, names, sizeof names);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage '%s': no %s field '%s' (the sample has "
                               "%s)",
                               stage, what, name, names);
    }
    return i;
}

/* The boxes field of s, checked: f32 [n,4]. */
static int find_boxes(const ef_sample *s, const ef__box_opts *b,
                      const char *stage, ef_map_ctx *ctx)
{
    int i = ef__boxes_field(s, stage, "boxes", b->boxes, ctx);
    if (i < 0)
        return i;
    const ef__field *f = &s->fields[i];
    if (f->dtype != EF_F32 || f->ndim != 2 || f->shape[1] != 4 || f->lengths) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage '%s': boxes field '%s' is %s %s%s; "
                               "expected f32 [n,4] (x1, y1, x2, y2 in pixels) "
                               "of one example",
                               stage, b->boxes, ef_dtype_name(f->dtype), shape,
                               f->lengths ? " (ragged, a batch)" : "");
    }
    return i;
}

/* Field i of s (`what`: "labels" or "per-box", for the message),
 * checked: n rows of a fixed size. Returns i or the error. */
static int check_rows(const ef_sample *s, int i, const ef__box_opts *b,
                      const char *stage, const char *what, int64_t n,
                      ef_map_ctx *ctx)
{
    const ef__field *f = &s->fields[i];
    /* a text's rows are bytes, not one per box */
    int text = f->variable >= EF__TEXT;
    if (f->ndim < 1 || f->shape[0] != n || f->lengths || text) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "stage '%s': %s field '%s' is %s %s%s%s; "
                               "expected one row per box, [%lld] or "
                               "[%lld,...], as boxes field '%s' has %lld",
                               stage, what, f->name, ef_dtype_name(f->dtype),
                               shape, f->lengths ? " (ragged, a batch)" : "",
                               text ? " (a text)" : "", (long long)n,
                               (long long)n, b->boxes, (long long)n);
    }
    return i;
}

/* The labels field of s, checked: n rows. */
static int find_labels(const ef_sample *s, const ef__box_opts *b,
                       const char *stage, int64_t n, ef_map_ctx *ctx)
{
    int i = ef__boxes_field(s, stage, "labels", b->labels, ctx);
    return i < 0 ? i : check_rows(s, i, b, stage, "labels", n, ctx);
}

int ef__box_fields_find(const ef_sample *s, const ef__box_opts *b,
                        const char *stage, int64_t n,
                        int idx[EF__BOX_FIELDS_MAX], ef_map_ctx *ctx)
{
    for (int j = 0; j < b->nfields; j++) {
        idx[j] = ef__sample_find(s, b->fields[j]);
        int rc = idx[j] < 0
                     ? EF_OK
                     : check_rows(s, idx[j], b, stage, "per-box", n, ctx);
        if (rc < 0)
            return rc;
    }
    return EF_OK;
}

size_t ef__box_row_bytes(const ef__field *f)
{
    size_t row = ef_dtype_size(f->dtype);
    for (int d = 1; d < f->ndim; d++)
        row *= (size_t)f->shape[d];
    return row;
}

int ef__boxes_read(const ef_sample *in, const ef__box_opts *b,
                   const char *stage, const float **boxes, int64_t *n,
                   ef_map_ctx *ctx)
{
    int i = find_boxes(in, b, stage, ctx);
    if (i < 0)
        return i;
    const ef__field *f = &in->fields[i];
    *boxes = (const float *)((const unsigned char *)ef_buffer_data(f->buf) +
                             f->offset);
    *n = f->shape[0];
    return EF_OK;
}

/* Points field f at `nrows` rows of the new buffer nb (taking its
 * reference). */
static void replace_rows(ef__field *f, ef_buffer *nb, int64_t nrows,
                         size_t row_bytes)
{
    ef_buffer_release(f->buf);
    f->buf = nb;
    f->offset = 0;
    f->nbytes = (size_t)nrows * row_bytes;
    f->shape[0] = nrows;
}

int ef__box_drop_rows(ef__field *f, const unsigned char *keep, int64_t kept)
{
    int64_t n = f->shape[0];
    size_t row = ef__box_row_bytes(f);
    ef_buffer *nb = ef_buffer_new((size_t)kept * row);
    if (!nb)
        return EF_ENOMEM;
    const unsigned char *src =
        (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    unsigned char *dst = ef_buffer_data(nb);
    for (int64_t i = 0, j = 0; i < n; i++)
        if (keep[i])
            memcpy(dst + (size_t)j++ * row, src + (size_t)i * row, row);
    replace_rows(f, nb, kept, row);
    return EF_OK;
}

/* Drops the rows of the labels (field li, or none when -1) and of the
 * per-box fields found (idx) whose keep[] is clear. */
static int drop_rows_of(ef_sample *s, int li, const ef__box_opts *b,
                        const int *idx, const unsigned char *keep, int64_t kept)
{
    int rc = li >= 0 ? ef__box_drop_rows(&s->fields[li], keep, kept) : EF_OK;
    for (int j = 0; rc == EF_OK && j < b->nfields; j++)
        if (idx[j] >= 0)
            rc = ef__box_drop_rows(&s->fields[idx[j]], keep, kept);
    return rc;
}

/* ef__boxes_follow, leaving *out to the caller on failure. */
static int follow(const ef__box_opts *b, const char *stage,
                  const ef__box_map *m, ef_sample *s, ef_map_ctx *ctx)
{
    int bi = find_boxes(s, b, stage, ctx);
    if (bi < 0)
        return bi;
    int64_t n = s->fields[bi].shape[0];
    int li = b->labels[0] ? find_labels(s, b, stage, n, ctx) : -1;
    if (b->labels[0] && li < 0)
        return li;
    int idx[EF__BOX_FIELDS_MAX];
    int rc = ef__box_fields_find(s, b, stage, n, idx, ctx);
    if (rc != EF_OK)
        return rc;
    ef_buffer *nb = ef_buffer_new((size_t)n * 4 * sizeof(float));
    unsigned char *keep = ef__malloc(n ? (size_t)n : 1);
    if (!nb || !keep) {
        ef_buffer_release(nb);
        ef__free(keep);
        return ef_map_ctx_fail(ctx, EF_ENOMEM,
                               "stage '%s': out of memory for "
                               "%lld boxes",
                               stage, (long long)n);
    }
    ef__field *f = &s->fields[bi];
    const float *src =
        (const float *)((const unsigned char *)ef_buffer_data(f->buf) +
                        f->offset);
    int64_t kept =
        ef__box_map_all(m, b->min_visible, src, n, ef_buffer_data(nb), keep);
    replace_rows(f, nb, kept, 4 * sizeof(float));
    if (kept < n)
        rc = drop_rows_of(s, li, b, idx, keep, kept);
    ef__free(keep);
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc,
                               "stage '%s': out of memory for the rows of "
                               "%lld boxes",
                               stage, (long long)kept);
    return EF_OK;
}

int ef__boxes_follow(const ef__box_opts *b, const char *stage,
                     const ef__box_map *m, ef_sample **out, ef_map_ctx *ctx)
{
    if (!b->boxes[0])
        return EF_OK;
    int rc = follow(b, stage, m, *out, ctx);
    if (rc != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
    }
    return rc;
}
