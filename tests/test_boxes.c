/* SPDX-License-Identifier: Apache-2.0 */
/* Boxes that follow the pixels (stages/image/boxes.h): the geometry of
 * one box, the keep rules at their edges, and the stages carrying a
 * sample's boxes and labels with the pixels, with errors that name the
 * stage and field. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "stages/image/boxes.h"

static void assert_box(const float got[4], double x1, double y1, double x2,
                       double y2)
{
    const double want[4] = {x1, y1, x2, y2};
    for (int i = 0; i < 4; i++)
        if (fabs(got[i] - want[i]) > 1e-4)
            fail_msg("box [%g %g %g %g], expected [%g %g %g %g]", got[0],
                     got[1], got[2], got[3], x1, y1, x2, y2);
}

static void window_scale_and_mirror(void **state)
{
    (void)state;
    float out[4];
    /* the 40 x 20 window at x 10, y 5, to 80 x 40: doubled */
    const int64_t win[4] = {5, 10, 20, 40};
    ef__box_map m = ef__box_map_window(win, 40, 80, 0);
    assert_true(ef__box_map_one(&m, 0, (float[]){12, 7, 22, 17}, out));
    assert_box(out, 4, 4, 24, 24);
    /* mirrored: x -> 80 - x, the edges swapped */
    m.mirror = 1;
    assert_true(ef__box_map_one(&m, 0, (float[]){12, 7, 22, 17}, out));
    assert_box(out, 56, 4, 76, 24);
    /* the whole image unchanged */
    const int64_t whole[4] = {0, 0, 30, 50};
    m = ef__box_map_window(whole, 30, 50, 0);
    assert_true(ef__box_map_one(&m, 0, (float[]){0, 0, 50, 30}, out));
    assert_box(out, 0, 0, 50, 30);
}

static void clipped_and_centre_rule(void **state)
{
    (void)state;
    float out[4];
    const int64_t win[4] = {10, 10, 20, 20};
    ef__box_map m = ef__box_map_window(win, 20, 20, 0);
    /* centre (12, 12) -> (2, 2): kept, clipped at the crop's corner */
    assert_true(ef__box_map_one(&m, 0, (float[]){4, 4, 20, 20}, out));
    assert_box(out, 0, 0, 10, 10);
    /* centre (8, 15) -> (-2, 5): dropped though partly inside */
    assert_false(ef__box_map_one(&m, 0, (float[]){0, 10, 16, 20}, out));
    /* a centre on the crop's edge stays (edges included) */
    assert_true(ef__box_map_one(&m, 0, (float[]){5, 10, 15, 20}, out));
    assert_box(out, 0, 0, 5, 10);
    assert_true(ef__box_map_one(&m, 0, (float[]){25, 25, 35, 35}, out));
    assert_box(out, 15, 15, 20, 20);
    /* wholly outside */
    assert_false(ef__box_map_one(&m, 0, (float[]){40, 40, 50, 50}, out));
    /* NaN never stays */
    assert_false(ef__box_map_one(&m, 0, (float[]){NAN, 12, 14, 14}, out));
}

static void visible_share_rule(void **state)
{
    (void)state;
    float out[4];
    const int64_t win[4] = {0, 10, 20, 20};
    ef__box_map m = ef__box_map_window(win, 20, 20, 0);
    /* x 6..16 keeps 6 of its 10 columns: 0.6 of its area */
    const float box[4] = {6, 0, 16, 10};
    assert_true(ef__box_map_one(&m, 0.6, box, out));
    assert_box(out, 0, 0, 6, 10);
    assert_false(ef__box_map_one(&m, 0.61, box, out));
    /* a box of no area stays by its centre */
    assert_true(ef__box_map_one(&m, 0.5, (float[]){15, 5, 15, 9}, out));
    assert_box(out, 5, 5, 5, 9);
    assert_false(ef__box_map_one(&m, 0.5, (float[]){5, 5, 5, 9}, out));
}

static void map_all_keeps_order(void **state)
{
    (void)state;
    const int64_t win[4] = {0, 0, 10, 10};
    ef__box_map m = ef__box_map_window(win, 10, 10, 0);
    const float in[12] = {1, 1, 2, 2, 20, 20, 30, 30, 3, 3, 4, 4};
    float out[12];
    unsigned char keep[3];
    assert_int_equal(ef__box_map_all(&m, 0, in, 3, out, keep), 2);
    assert_int_equal(keep[0], 1);
    assert_int_equal(keep[1], 0);
    assert_int_equal(keep[2], 1);
    assert_box(out, 1, 1, 2, 2);
    assert_box(out + 4, 3, 3, 4, 4);
    assert_int_equal(ef__box_map_all(&m, 0, in, 0, out, keep), 0);
}

static void iou_with_a_window(void **state)
{
    (void)state;
    const int64_t win[4] = {0, 0, 10, 10}; /* x 0..10, y 0..10 */
    assert_float_equal(ef__box_window_iou((float[]){0, 0, 10, 10}, win), 1,
                       1e-12);
    /* half inside: 50 / (100 + 100 - 50) */
    assert_float_equal(ef__box_window_iou((float[]){5, 0, 15, 10}, win),
                       50.0 / 150, 1e-12);
    assert_float_equal(ef__box_window_iou((float[]){20, 0, 30, 10}, win), 0,
                       1e-12);
    /* a box of no area has none */
    assert_float_equal(ef__box_window_iou((float[]){5, 5, 5, 5}, win), 0,
                       1e-12);
}

/* DALI's "overlap": the share of the box's own area in the window */
static void overlap_with_a_window(void **state)
{
    (void)state;
    const int64_t win[4] = {0, 0, 10, 10}; /* x 0..10, y 0..10 */
    assert_float_equal(ef__box_window_overlap((float[]){2, 2, 4, 4}, win), 1,
                       1e-12);
    /* half the box inside; its IoU would be 50 / 150 */
    assert_float_equal(ef__box_window_overlap((float[]){5, 0, 15, 10}, win),
                       0.5, 1e-12);
    /* a box larger than the window: the window's share of it */
    assert_float_equal(ef__box_window_overlap((float[]){0, 0, 20, 20}, win),
                       0.25, 1e-12);
    assert_float_equal(ef__box_window_overlap((float[]){20, 0, 30, 10}, win), 0,
                       1e-12);
    assert_float_equal(ef__box_window_overlap((float[]){5, 5, 5, 5}, win), 0,
                       1e-12);
}

/* no box stays in an output without pixels */
static void empty_output_keeps_nothing(void **state)
{
    (void)state;
    float out[4];
    const int64_t win[4] = {0, 0, 0, 7};
    ef__box_map m = ef__box_map_window(win, 0, 7, 1);
    assert_false(ef__box_map_one(&m, 0, (float[]){0, 0, 0, 0}, out));
    assert_false(ef__box_map_one(&m, 0.5, (float[]){1, 0, 3, 0}, out));
}

/* ---- stages ---------------------------------------------------------- */

/* What the source yields: an 8 x 10 u8 image, white inside box 0 and
 * black elsewhere, with `nbox` boxes and labels 100 + i. Box 0 is
 * x 2..5, y 1..4; box 1 lies in the right half, box 2 in the corner.
 * With `per_box`, per-box fields too, of `extra_rows` rows (nbox unless
 * told): iscrowd i64 [rows] = 200 + i and kp f32 [rows,3] = 10 * i + j. */
typedef struct {
    int next, n, nbox;
    ef_dtype box_dtype;
    int label_rows; /* rows of the labels: nbox unless told */
    int per_box;    /* whether there are iscrowd and kp fields */
    int extra_rows; /* their rows */
} box_source;

static const float source_boxes[3][4] = {
    {2, 1, 5, 4}, {6, 2, 10, 8}, {0, 0, 1, 1}};

/* iscrowd i64 [rows] = 200 + i and kp f32 [rows,3] = 10 * i + j. */
static void add_per_box_fields(ef_sample *s, int rows)
{
    int64_t cshape[1] = {rows}, kshape[2] = {rows, 3};
    int64_t *crowd;
    float *kp;
    assert_int_equal(
        ef_sample_add_new(s, "iscrowd", EF_I64, 1, cshape, (void **)&crowd),
        EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "kp", EF_F32, 2, kshape, (void **)&kp), EF_OK);
    for (int i = 0; i < rows; i++) {
        crowd[i] = 200 + i;
        for (int j = 0; j < 3; j++)
            kp[3 * i + j] = (float)(10 * i + j);
    }
}

static int boxes_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    box_source *src = user;
    (void)block;
    if (src->next >= src->n)
        return EF_END;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = src->next++, .epoch = epoch});
    int64_t ishape[2] = {8, 10}, bshape[2] = {src->nbox, 4};
    int64_t lshape[1] = {src->label_rows};
    unsigned char *img;
    void *boxes;
    int64_t *labels;
    assert_int_equal(
        ef_sample_add_new(s, "image", EF_U8, 2, ishape, (void **)&img), EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "boxes", src->box_dtype, 2, bshape, &boxes),
        EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "labels", EF_I64, 1, lshape, (void **)&labels),
        EF_OK);
    for (int y = 0; y < 8; y++)
        for (int x = 0; x < 10; x++)
            img[y * 10 + x] = x >= 2 && x < 5 && y >= 1 && y < 4 ? 255 : 0;
    if (src->box_dtype == EF_F32)
        memcpy(boxes, source_boxes, (size_t)src->nbox * sizeof source_boxes[0]);
    for (int i = 0; i < src->label_rows; i++)
        labels[i] = 100 + i;
    if (src->per_box)
        add_per_box_fields(s, src->extra_rows);
    *out = s;
    return EF_OK;
}

static box_source source;

static ef_pipeline *box_pipeline(const char *stages, int nbox)
{
    source = (box_source){
        .n = 40, .nbox = nbox, .box_dtype = EF_F32, .label_rows = nbox};
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 7), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, boxes_source, &source, NULL),
                     EF_OK);
    tu_parse(p, stages);
    return p;
}

/* The bounding box of the white pixels of a u8 [h,w] image, edges as
 * boxes have them; 0 when there are none. */
static int white_box(const ef_tensor *t, float box[4])
{
    int64_t h = t->shape[0], w = t->shape[1];
    const unsigned char *px = t->data;
    box[0] = (float)w, box[1] = (float)h, box[2] = 0, box[3] = 0;
    int any = 0;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++)
            if (px[y * w + x] == 255) {
                any = 1;
                box[0] = fminf(box[0], (float)x);
                box[1] = fminf(box[1], (float)y);
                box[2] = fmaxf(box[2], (float)(x + 1));
                box[3] = fmaxf(box[3], (float)(y + 1));
            }
    return any;
}

/* A pipeline of `stages` over a source of 3 boxes of its own, src, for
 * a test that runs pipelines side by side. */
static ef_pipeline *own_pipeline(const char *stages, box_source *src)
{
    *src =
        (box_source){.n = 40, .nbox = 3, .box_dtype = EF_F32, .label_rows = 3};
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 7), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, boxes_source, src, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

/* A pipeline of `stages` over the source with per-box fields. */
static ef_pipeline *fields_pipeline(const char *stages, int nbox)
{
    ef_pipeline *p = box_pipeline(stages, nbox);
    source.per_box = 1;
    source.extra_rows = nbox;
    return p;
}

/* Pixels and boxes agree: where box 0's white pixels went is where box 0
 * went, clipped, and it is there exactly when its label is. */
static void check_follows(const char *spec, int *moved)
{
    ef_pipeline *p = box_pipeline(spec, 3);
    ef_sample *s;
    while ((s = tu_next_or_end(p, spec)) != NULL) {
        ef_tensor img = tu_field(s, "image"), b = tu_field(s, "boxes");
        ef_tensor l = tu_field(s, "labels");
        assert_int_equal(b.dtype, EF_F32);
        assert_int_equal(b.ndim, 2);
        assert_int_equal(b.shape[1], 4);
        assert_int_equal(l.shape[0], b.shape[0]);
        const float *boxes = b.data;
        const int64_t *labels = l.data;
        float white[4];
        int seen = white_box(&img, white);
        int found = 0;
        for (int64_t i = 0; i < b.shape[0]; i++) {
            assert_true(labels[i] >= 100 && labels[i] < 103);
            if (i)
                assert_true(labels[i] > labels[i - 1]); /* order kept */
            if (labels[i] != 100)
                continue;
            found = 1;
            assert_true(seen);
            assert_box(boxes + 4 * i, white[0], white[1], white[2], white[3]);
            *moved += boxes[4 * i] != 2 || boxes[4 * i + 1] != 1;
        }
        /* dropped only when its centre left */
        if (!found && seen) {
            float cx = (white[0] + white[2]) / 2,
                  cy = (white[1] + white[3]) / 2;
            assert_true(cx <= 0.5f || cy <= 0.5f ||
                        cx >= (float)img.shape[1] - 0.5f ||
                        cy >= (float)img.shape[0] - 0.5f);
        }
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
}

static void flip_and_random_crop_move_boxes(void **state)
{
    (void)state;
    int moved = 0;
    check_follows("flip:boxes=boxes", &moved);
    assert_true(moved > 0);
    moved = 0;
    check_follows("random_crop:pad=3,boxes=boxes", &moved);
    assert_true(moved > 0);
    moved = 0;
    check_follows("flip:boxes=boxes | random_crop:pad=2,boxes=boxes", &moved);
    assert_true(moved > 0);
}

/* resize by a whole factor: box edges scale with it */
static void resize_scales_boxes(void **state)
{
    (void)state;
    ef_pipeline *p = box_pipeline("resize:height=16,width=30,boxes=boxes", 3);
    ef_sample *s = tu_next(p);
    ef_tensor b = tu_field(s, "boxes");
    assert_int_equal(b.shape[0], 3);
    const float *boxes = b.data;
    assert_box(boxes, 6, 2, 15, 8);
    assert_box(boxes + 4, 18, 4, 30, 16);
    assert_box(boxes + 8, 0, 0, 3, 2);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* Without `boxes` the stages leave the fields alone, as before. */
static void without_boxes_nothing_moves(void **state)
{
    (void)state;
    ef_pipeline *p = box_pipeline("flip:p=1 | resize:size=4", 3);
    ef_sample *s = tu_next(p);
    ef_tensor b = tu_field(s, "boxes");
    assert_int_equal(b.shape[0], 3);
    assert_memory_equal(b.data, source_boxes, sizeof source_boxes);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* A crop that leaves no box: [0,4] and [0] come out. */
static void all_boxes_cropped_out(void **state)
{
    (void)state;
    ef_pipeline *p =
        box_pipeline("random_resized_crop:size=4,scale_min=0.01,scale_max=0.01,"
                     "ratio_min=1,ratio_max=1,boxes=boxes,box_keep=visible,"
                     "box_min_visible=1",
                     3);
    int empty = 0;
    ef_sample *s;
    while ((s = tu_next_or_end(p, "rrc")) != NULL) {
        ef_tensor b = tu_field(s, "boxes"), l = tu_field(s, "labels");
        assert_int_equal(b.ndim, 2);
        assert_int_equal(b.shape[1], 4);
        assert_int_equal(l.ndim, 1);
        assert_int_equal(l.shape[0], b.shape[0]);
        empty += b.shape[0] == 0;
        ef_sample_free(s);
    }
    assert_true(empty > 0);
    ef_pipeline_destroy(p);
}

/* No boxes in, none out. */
static void no_boxes(void **state)
{
    (void)state;
    ef_pipeline *p =
        box_pipeline("crop_mirror_normalize:size=4,boxes=boxes,mirror=1", 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(tu_field(s, "boxes").shape[0], 0);
    assert_int_equal(tu_field(s, "labels").shape[0], 0);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* Row i of iscrowd (and of kp, when `kp_listed`; else kp is as the
 * source made it) belongs to the box of row i: label 100 + k has
 * iscrowd 200 + k and kp 10 * k + j. */
static void check_rows_follow(const ef_sample *s, int nbox, int kp_listed)
{
    ef_tensor b = tu_field(s, "boxes"), l = tu_field(s, "labels");
    ef_tensor c = tu_field(s, "iscrowd"), kp = tu_field(s, "kp");
    int64_t n = b.shape[0];
    assert_int_equal(c.ndim, 1);
    assert_int_equal(c.shape[0], n);
    assert_int_equal(kp.ndim, 2);
    assert_int_equal(kp.shape[0], kp_listed ? n : nbox);
    assert_int_equal(kp.shape[1], 3);
    const int64_t *labels = l.data, *crowd = c.data;
    const float *k = kp.data;
    for (int64_t i = 0; i < n; i++) {
        assert_int_equal(crowd[i], labels[i] + 100);
        for (int j = 0; kp_listed && j < 3; j++)
            assert_true(k[3 * i + j] == (float)(10 * (labels[i] - 100) + j));
    }
}

/* Every box stage drops the rows of the per-box fields with their
 * boxes: iscrowd by default, kp when listed too; none dropped at n = 0,
 * all of them when every box left. */
static void per_box_fields_follow_every_stage(void **state)
{
    (void)state;
    static const char *const stages[] = {
        "flip:boxes=boxes",
        "resize:height=4,width=5,boxes=boxes",
        "random_crop:pad=3,boxes=boxes",
        "random_resized_crop:size=4,scale_min=0.05,scale_max=0.3,boxes=boxes",
        "random_resized_crop:size=4,scale_min=0.01,scale_max=0.01,"
        "ratio_min=1,ratio_max=1,boxes=boxes,box_keep=visible,"
        "box_min_visible=1",
        "crop_mirror_normalize:size=4,scale_min=0.05,scale_max=0.3,"
        "boxes=boxes,mirror=0.5",
        "ssd_crop:thresholds=0.1,allow_no_crop=false",
    };
    int dropped = 0, emptied = 0;
    char spec[512];
    for (int kp_listed = 0; kp_listed < 2; kp_listed++)
        for (size_t i = 0; i < sizeof stages / sizeof *stages; i++)
            for (int nbox = 0; nbox <= 3; nbox += 3) {
                snprintf(spec, sizeof spec, "%s%s", stages[i],
                         kp_listed ? ",box_fields=\"iscrowd, kp\"" : "");
                ef_pipeline *p = fields_pipeline(spec, nbox);
                ef_sample *s;
                while ((s = tu_next_or_end(p, spec)) != NULL) {
                    check_rows_follow(s, nbox, kp_listed);
                    int64_t n = tu_field(s, "boxes").shape[0];
                    dropped += n < nbox;
                    emptied += nbox && n == 0;
                    ef_sample_free(s);
                }
                ef_pipeline_destroy(p);
            }
    assert_true(dropped > 0);
    assert_true(emptied > 0);
}

/* A listed field the sample lacks is no error; labels listed go once. */
static void absent_per_box_fields_are_skipped(void **state)
{
    (void)state;
    ef_pipeline *p = fields_pipeline(
        "random_crop:pad=4,boxes=boxes,box_fields=\"area,labels,iscrowd\"", 3);
    ef_sample *s;
    while ((s = tu_next_or_end(p, "absent")) != NULL) {
        check_rows_follow(s, 3, 0);
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
}

/* pad_boxes pads the per-box fields with zeros, and keeps the first n
 * rows of them as of the boxes with overflow=drop. */
static void pad_boxes_pads_per_box_fields(void **state)
{
    (void)state;
    ef_pipeline *p = fields_pipeline(
        "pad_boxes:n=5,box_fields=\"iscrowd,kp\" | batch:size=2", 3);
    ef_sample *s = tu_next(p);
    ef_tensor c = tu_field(s, "iscrowd"), kp = tu_field(s, "kp");
    assert_int_equal(c.ndim, 2);
    assert_int_equal(c.shape[1], 5);
    assert_int_equal(kp.ndim, 3);
    assert_int_equal(kp.shape[1], 5);
    assert_int_equal(kp.shape[2], 3);
    const int64_t *crowd = c.data;
    const float *k = kp.data;
    for (int r = 0; r < 5; r++) {
        assert_int_equal(crowd[5 + r], r < 3 ? 200 + r : 0);
        for (int j = 0; j < 3; j++)
            assert_true(k[15 + 3 * r + j] == (r < 3 ? 10 * r + j : 0));
    }
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    p = fields_pipeline("pad_boxes:n=2,overflow=drop", 3);
    s = tu_next(p);
    check_rows_follow(s, 3, 0);
    assert_int_equal(tu_field(s, "iscrowd").shape[0], 2);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

static void expect_spec_error(const char *spec, const char *needle)
{
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, spec), EF_ESPEC);
    if (!strstr(ef_pipeline_error(p), needle))
        fail_msg("%s: \"%s\" lacks \"%s\"", spec, ef_pipeline_error(p), needle);
    ef_pipeline_destroy(p);
}

/* The first pull of `spec` over source src fails with `status`, its
 * message holding each word of ap. */
static void expect_error_from(box_source src, const char *spec, int status,
                              va_list ap)
{
    source = src;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, boxes_source, &source, NULL),
                     EF_OK);
    tu_parse(p, spec);
    tu_vexpect_first_error(p, spec, status, ap);
    ef_pipeline_destroy(p);
}

static void expect_error(const char *spec, ef_dtype dtype, int label_rows,
                         int status, ...)
{
    va_list ap;
    va_start(ap, status);
    expect_error_from(
        (box_source){
            .n = 4, .nbox = 2, .box_dtype = dtype, .label_rows = label_rows},
        spec, status, ap);
    va_end(ap);
}

/* expect_error over 2 boxes and labels, with per-box fields of `rows`. */
static void expect_fields_error(const char *spec, int rows, int status, ...)
{
    va_list ap;
    va_start(ap, status);
    expect_error_from((box_source){.n = 4,
                                   .nbox = 2,
                                   .box_dtype = EF_F32,
                                   .label_rows = 2,
                                   .per_box = 1,
                                   .extra_rows = rows},
                      spec, status, ap);
    va_end(ap);
}

/* A per-box field of another count of rows than the boxes is an error
 * naming the stage, the sample, the field, its shape and what was
 * expected; so is a bad box_fields list, when the spec is read. */
static void per_box_field_errors_are_named(void **state)
{
    (void)state;
    expect_fields_error("flip:boxes=boxes", 3, EF_ESHAPE, "'flip'",
                        "per-box field 'iscrowd' is i64 [3]",
                        "expected one row per box, [2] or [2,...]",
                        "boxes field 'boxes' has 2", "item 0", NULL);
    expect_fields_error("ssd_crop:box_fields=kp", 1, EF_ESHAPE, "'ssd_crop'",
                        "per-box field 'kp' is f32 [1,3]", "[2] or [2,...]",
                        NULL);
    expect_fields_error("pad_boxes:n=4,box_fields=kp", 3, EF_ESHAPE,
                        "'pad_boxes'", "per-box field 'kp' is f32 [3,3]", NULL);
    expect_spec_error("range:3 | flip:boxes=b,box_fields=\"a,,c\"",
                      "option 'box_fields' has an empty name");
    expect_spec_error("range:3 | resize:size=3,boxes=b,box_fields=\"a,b\"",
                      "names the boxes field");
    expect_spec_error("range:3 | ssd_crop:box_fields=\"a, a\"",
                      "names a field twice");
    expect_spec_error("range:3 | pad_boxes:n=3,box_fields=\"a,\"",
                      "'pad_boxes': option 'box_fields' has an empty name");
}

static void wrong_fields_are_named(void **state)
{
    (void)state;
    expect_error("flip:boxes=bbox", EF_F32, 2, EF_ESHAPE, "'flip'", "'bbox'",
                 "image, boxes, labels", NULL);
    expect_error("resize:size=4,boxes=boxes", EF_I64, 2, EF_ESHAPE, "'resize'",
                 "'boxes'", "i64 [2,4]", "expected f32 [n,4]", NULL);
    expect_error("random_crop:boxes=boxes", EF_F32, 3, EF_ESHAPE,
                 "'random_crop'", "labels field 'labels'", "[3]",
                 "one row per box", NULL);
    expect_error("flip:boxes=boxes,labels=cls", EF_F32, 2, EF_ESHAPE,
                 "no labels field 'cls'", NULL);
}

/* ssd_crop: the pixels and boxes of one window, inside the output */
static void ssd_crop_crops_boxes_with_pixels(void **state)
{
    (void)state;
    int moved = 0;
    check_follows("ssd_crop:thresholds=0.1,allow_no_crop=false", &moved);
    assert_true(moved > 0);
    ef_pipeline *p = box_pipeline("ssd_crop:thresholds=0.5", 3);
    ef_sample *s;
    int cropped = 0;
    while ((s = tu_next_or_end(p, "ssd_crop")) != NULL) {
        ef_tensor img = tu_field(s, "image"), b = tu_field(s, "boxes");
        const float *boxes = b.data;
        for (int64_t i = 0; i < 4 * b.shape[0]; i++)
            assert_true(boxes[i] >= 0 &&
                        boxes[i] <= (float)img.shape[i % 2 ? 0 : 1]);
        cropped += img.shape[0] != 8 || img.shape[1] != 10;
        ef_sample_free(s);
    }
    assert_true(cropped > 0);
    ef_pipeline_destroy(p);
}

/* threshold_type=overlap with a threshold of 1: every window that was
 * cropped holds one of the boxes whole, which comes out at its size */
static void ssd_crop_overlap_threshold(void **state)
{
    (void)state;
    ef_pipeline *p =
        box_pipeline("ssd_crop:thresholds=1,threshold_type=overlap,"
                     "allow_no_crop=false,scale_min=0.3",
                     3);
    ef_sample *s;
    int cropped = 0;
    while ((s = tu_next_or_end(p, "overlap")) != NULL) {
        ef_tensor img = tu_field(s, "image"), b = tu_field(s, "boxes");
        const float *boxes = b.data;
        const int64_t *labels = tu_field(s, "labels").data;
        int whole = 0;
        for (int64_t i = 0; i < b.shape[0]; i++) {
            const float *src = source_boxes[labels[i] - 100];
            whole |= boxes[4 * i + 2] - boxes[4 * i] == src[2] - src[0] &&
                     boxes[4 * i + 3] - boxes[4 * i + 1] == src[3] - src[1];
        }
        if (img.shape[0] != 8 || img.shape[1] != 10) {
            cropped++;
            assert_true(whole);
        }
        ef_sample_free(s);
    }
    assert_true(cropped > 0);
    ef_pipeline_destroy(p);
    expect_spec_error("range:3 | ssd_crop:threshold_type=area",
                      "option 'threshold_type' must be iou or overlap");
}

/* bbox_prune_threshold=F is box_keep=visible,box_min_visible=F: the same
 * windows and boxes; written beside either, or at 0, it is refused */
static void ssd_crop_prune_threshold_is_the_visible_rule(void **state)
{
    (void)state;
    box_source src[3];
    ef_pipeline *a = own_pipeline("ssd_crop:bbox_prune_threshold=0.6", &src[0]);
    ef_pipeline *b =
        own_pipeline("ssd_crop:box_keep=visible,box_min_visible=0.6", &src[1]);
    ef_pipeline *c = own_pipeline("ssd_crop", &src[2]);
    ef_sample *sa, *sb, *sc;
    int differs = 0;
    while ((sa = tu_next_or_end(a, "prune")) != NULL) {
        sb = tu_next(b);
        sc = tu_next(c);
        ef_tensor ba = tu_field(sa, "boxes"), bb = tu_field(sb, "boxes");
        ef_tensor bc = tu_field(sc, "boxes");
        assert_int_equal(ba.shape[0], bb.shape[0]);
        assert_memory_equal(ba.data, bb.data, (size_t)ba.shape[0] * 16);
        assert_memory_equal(tu_field(sa, "labels").data,
                            tu_field(sb, "labels").data,
                            (size_t)ba.shape[0] * 8);
        differs |= ba.shape[0] != bc.shape[0] ||
                   memcmp(ba.data, bc.data, (size_t)ba.shape[0] * 16) != 0;
        ef_sample_free(sa);
        ef_sample_free(sb);
        ef_sample_free(sc);
    }
    assert_true(differs); /* not the centre rule */
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
    ef_pipeline_destroy(c);
    expect_spec_error("range:3 | ssd_crop:bbox_prune_threshold=0.5,"
                      "box_min_visible=0.5",
                      "give one or the other");
    expect_spec_error("range:3 | ssd_crop:bbox_prune_threshold=0.5,"
                      "box_keep=center",
                      "give one or the other");
    expect_spec_error("range:3 | ssd_crop:bbox_prune_threshold=0",
                      "must be above 0");
}

/* pad_boxes, then batch: dense [B,n,4], labels padded, a mask */
static void pad_boxes_batches_densely(void **state)
{
    (void)state;
    ef_pipeline *p = box_pipeline("pad_boxes:n=5 | batch:size=4", 3);
    ef_sample *s = tu_next(p);
    ef_tensor b = tu_field(s, "boxes"), l = tu_field(s, "labels");
    ef_tensor m = tu_field(s, "boxes_mask");
    assert_int_equal(b.ndim, 3);
    assert_int_equal(b.shape[0], 4);
    assert_int_equal(b.shape[1], 5);
    assert_int_equal(l.shape[1], 5);
    assert_int_equal(m.dtype, EF_BOOL);
    const unsigned char *mask = m.data;
    const int64_t *labels = l.data;
    const float *boxes = b.data;
    for (int k = 0; k < 5; k++) {
        assert_int_equal(mask[5 + k], k < 3);
        assert_int_equal(labels[5 + k], k < 3 ? 100 + k : -1);
    }
    assert_memory_equal(boxes + 20, source_boxes, sizeof source_boxes);
    for (int k = 12; k < 20; k++)
        assert_true(boxes[20 + k] == 0);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    expect_error("pad_boxes:n=1", EF_F32, 2, EF_ESHAPE,
                 "2 boxes in field 'boxes', more than n=1", NULL);
}

static void contradicting_rules_are_refused(void **state)
{
    (void)state;
    expect_spec_error("range:3 | flip:boxes=b,box_keep=middle", "box_keep");
    expect_spec_error("range:3 | flip:boxes=b,box_keep=center,"
                      "box_min_visible=0.3",
                      "box_keep=center");
    expect_spec_error("range:3 | resize:size=3,box_keep=visible,"
                      "box_min_visible=0",
                      "above 0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(window_scale_and_mirror),
        cmocka_unit_test(clipped_and_centre_rule),
        cmocka_unit_test(visible_share_rule),
        cmocka_unit_test(map_all_keeps_order),
        cmocka_unit_test(iou_with_a_window),
        cmocka_unit_test(empty_output_keeps_nothing),
        cmocka_unit_test(flip_and_random_crop_move_boxes),
        cmocka_unit_test(resize_scales_boxes),
        cmocka_unit_test(without_boxes_nothing_moves),
        cmocka_unit_test(all_boxes_cropped_out),
        cmocka_unit_test(no_boxes),
        cmocka_unit_test(wrong_fields_are_named),
        cmocka_unit_test(contradicting_rules_are_refused),
        cmocka_unit_test(ssd_crop_crops_boxes_with_pixels),
        cmocka_unit_test(pad_boxes_batches_densely),
        cmocka_unit_test(overlap_with_a_window),
        cmocka_unit_test(per_box_fields_follow_every_stage),
        cmocka_unit_test(absent_per_box_fields_are_skipped),
        cmocka_unit_test(pad_boxes_pads_per_box_fields),
        cmocka_unit_test(per_box_field_errors_are_named),
        cmocka_unit_test(ssd_crop_overlap_threshold),
        cmocka_unit_test(ssd_crop_prune_threshold_is_the_visible_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
