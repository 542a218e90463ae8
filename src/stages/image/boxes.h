/* SPDX-License-Identifier: Apache-2.0 */
/* Boxes that follow the pixels: the geometry that maps a sample's boxes
 * through what an image stage does to its pixels (a window, a scale to
 * the output size, a horizontal flip), clips them to the output, and
 * drops those that left it, with their labels.
 *
 * Boxes are a field of f32 [n,4] (n may be 0): x1, y1, x2, y2 in pixels
 * of the image they belong to, edges rather than centres (torchvision's
 * XYXY). A pixel (y, x) covers [x, x + 1) x [y, y + 1), so a stage whose
 * output pixel u samples input coordinate x0 + (u + 0.5) * in / out - 0.5
 * (bilinear.h's half-pixel centres) maps edge coordinate X to
 * (X - x0) * out / in exactly; a flip of an output w wide maps X to
 * w - X. The labels are any field whose first dimension is n; they lose
 * the rows of the dropped boxes, and so do the other per-box fields
 * (box_fields: iscrowd, areas, track ids, [n,k] keypoints ...), so that
 * row i of each still describes box i. */
#ifndef EF_STAGES_IMAGE_BOXES_H
#define EF_STAGES_IMAGE_BOXES_H

#include <stdint.h>

#include "core/sample.h"
#include "echoflow/echoflow.h"
#include "pipeline/stage.h"

/* From input pixels to output pixels: X -> (X - x0) * sx, Y -> (Y - y0)
 * * sy, then X -> out_w - X when mirrored; the output is out_w x out_h. */
typedef struct {
    double x0, y0, sx, sy;
    double out_w, out_h;
    int mirror;
} ef__box_map;

/* The map of a stage that resamples the window {y0, x0, height, width}
 * of its input (an int64_t crop[4], as crop_window.h gives it) to
 * out_h x out_w, then flips it horizontally when `mirror`. */
ef__box_map ef__box_map_window(const int64_t win[4], int64_t out_h,
                               int64_t out_w, int mirror);

/* Most per-box fields a stage carries beside the labels. */
#define EF__BOX_FIELDS_MAX 16

/* Which boxes a stage carries and when a box stays (options below). */
typedef struct {
    char boxes[EF_MAX_NAME];  /* "": the stage moves no boxes */
    char labels[EF_MAX_NAME]; /* "": no labels to drop rows of */
    /* the other per-box fields: their rows go with the boxes' as the
     * labels' do, but a sample may lack them */
    char fields[EF__BOX_FIELDS_MAX][EF_MAX_NAME];
    int nfields;
    /* 0: keep a box whose centre lies in the output (edges included);
     * else keep a box when at least this share of its area stays (a box
     * of no area: when its centre stays) */
    double min_visible;
} ef__box_opts;

/* Maps box `in` (x1, y1, x2, y2) through m into `out`, clipped to the
 * output. Returns 1 when the box stays by the rule of min_visible
 * (ef__box_opts), 0 when it is dropped (out is then unspecified); no box
 * stays in an output without pixels. */
int ef__box_map_one(const ef__box_map *m, double min_visible, const float in[4],
                    float out[4]);

/* ef__box_map_one over n boxes of `in`, writing the kept ones in order
 * to the front of `out` (room for n) and keep[i] = whether box i stayed.
 * Returns how many stayed. */
int64_t ef__box_map_all(const ef__box_map *m, double min_visible,
                        const float *in, int64_t n, float *out,
                        unsigned char *keep);

/* Intersection over union of box (x1, y1, x2, y2) and the window
 * {y0, x0, height, width} (at least a pixel), in the same pixels. */
double ef__box_window_iou(const float box[4], const int64_t win[4]);

/* The share of box (x1, y1, x2, y2) that lies in the window {y0, x0,
 * height, width}: the intersection over the box's own area (DALI's
 * "overlap"); 0 for a box of no area. */
double ef__box_window_overlap(const float box[4], const int64_t win[4]);

/* Options boxes, labels, box_fields, box_keep and box_min_visible of
 * `stage` (its name, for messages) into b: EF_ESPEC for a name too long,
 * a bad list or a rule that contradicts itself. */
int ef__box_opts_parse(const ef__opts *o, const char *stage, ef__box_opts *b,
                       ef__err *err);

/* Option box_fields of `stage` into b->fields, for a stage that parsed
 * b->boxes and b->labels itself: a comma-separated list ("iscrowd,area",
 * quoted in a spec) of at most EF__BOX_FIELDS_MAX names, each once; ""
 * for none. The labels field may be listed (its rows go once); the boxes
 * field may not. */
int ef__box_fields_parse(const ef__opts *o, const char *stage, ef__box_opts *b,
                         ef__err *err);

/* Option `name` of `stage` (its name, for messages), a field name, into
 * dst: EF_ESPEC naming the option when it is longer than EF_MAX_NAME - 1
 * bytes, or empty unless `may_be_empty`. */
int ef__box_field_option(const ef__opts *o, const char *stage, const char *name,
                         int may_be_empty, char dst[EF_MAX_NAME], ef__err *err);

/* Keeps the rows of f (its first dimension) whose keep[] is set, `kept`
 * of them, in a new buffer of the field's own. EF_ENOMEM, f unchanged,
 * when out of memory. */
int ef__box_drop_rows(ef__field *f, const unsigned char *keep, int64_t kept);

/* The index of field `name` of s (`what`: "boxes" or "labels", for the
 * message), or the error that names the fields the sample has. */
int ef__boxes_field(const ef_sample *s, const char *stage, const char *what,
                    const char *name, ef_map_ctx *ctx);

/* The boxes of `in` named by b, checked as ef__boxes_follow checks them:
 * *boxes (borrowed from in) and their count *n. */
int ef__boxes_read(const ef_sample *in, const ef__box_opts *b,
                   const char *stage, const float **boxes, int64_t *n,
                   ef_map_ctx *ctx);

/* The per-box fields of s that b lists (b->fields) and s has: idx[j] is
 * the index in s of b->fields[j], or -1 when s lacks it. Each one found
 * must have n rows (the boxes' count): [n] or [n,...], not ragged, not a
 * text; else EF_ESHAPE naming `stage`, the field, its shape and what was
 * expected. */
int ef__box_fields_find(const ef_sample *s, const ef__box_opts *b,
                        const char *stage, int64_t n,
                        int idx[EF__BOX_FIELDS_MAX], ef_map_ctx *ctx);

/* Bytes of one row (the first dimension's step) of field f. */
size_t ef__box_row_bytes(const ef__field *f);

/* Moves the boxes of `*out` (a sample the caller is building, whose
 * other fields are those of the stage's input) through m, and drops the
 * rows of the boxes that left from the labels and the per-box fields
 * (ef__box_fields_find): each gets a new buffer (the others keep theirs
 * when every box stayed). Nothing to do when b names no boxes. On
 * failure (a missing boxes or labels field, a wrong dtype or shape:
 * EF_ESHAPE naming `stage`, the field and what was expected; EF_ENOMEM)
 * *out is freed and set to NULL. */
int ef__boxes_follow(const ef__box_opts *b, const char *stage,
                     const ef__box_map *m, ef_sample **out, ef_map_ctx *ctx);

/* The row of the per-box fields, shared with pad_boxes. */
#define EF__BOX_FIELDS_OPTION                                                  \
    EF__OPT("box_fields", EF_OPT_STRING, "iscrowd",                            \
            "other fields of one row per box (\"a,b\"), whose rows go with "   \
            "the boxes; those a sample lacks are skipped",                     \
            0, 0)

/* The rows of the box options after the `boxes` row, which differs:
 * optional where the stage moves boxes beside its pixels, named by
 * default where boxes are the stage's point (ssd_crop). */
#define EF__BOX_RULE_OPTIONS                                                   \
    EF__OPT("labels", EF_OPT_STRING, "labels",                                 \
            "field whose rows are dropped with the boxes (empty: none)", 0,    \
            0),                                                                \
        EF__BOX_FIELDS_OPTION,                                                 \
        EF__OPT("box_keep", EF_OPT_STRING, "center",                           \
                "which boxes stay: center (centre inside the output) or "      \
                "visible (box_min_visible of the area)",                       \
                0, 0),                                                         \
        EF__OPT("box_min_visible", EF_OPT_FLOAT, "0.5",                        \
                "box_keep=visible: least share of a box's area that must "     \
                "stay",                                                        \
                0, 1)

/* The option rows, in the table of every stage whose boxes are
 * optional. */
#define EF__BOX_OPTIONS                                                        \
    EF__OPT("boxes", EF_OPT_STRING, "",                                        \
            "field of boxes (f32 [n,4], x1 y1 x2 y2 in pixels) that follow "   \
            "the pixels; empty: none",                                         \
            0, 0),                                                             \
        EF__BOX_RULE_OPTIONS

#endif
