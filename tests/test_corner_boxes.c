/* SPDX-License-Identifier: Apache-2.0 */
/* corner_boxes: boxes (f32 [n,4], x1 y1 x2 y2 in pixels) from four
 * coordinate lists, normalized or in pixels, with the size of a decoded
 * image or of two size fields; every refusal names the field or box and
 * what was expected, and boxes=clip clips and drops with the labels. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ef_test_util.h"

#define MAXBOX 4

/* The sample the source gives, `count` times (index i for the i-th). */
typedef struct {
    int64_t count;
    int64_t n[4];          /* values of xmin, ymin, xmax, ymax */
    float c[4][MAXBOX];    /* their values */
    ef_dtype coord_dtype;  /* of all four (F32 unless a test says) */
    int64_t labels;        /* rows of `labels`; -1: no such field */
    int64_t crowd;         /* rows of `image/object/is_crowd`; 0: none */
    int64_t img_h, img_w;  /* a u8 [h,w,3] `image`; 0: none */
    int64_t width, height; /* i64 scalars image/width, image/height; 0: none */
    int next;
} corner_source;

static corner_source src;

static const char *const coord_name[4] = {
    "image/object/bbox/xmin", "image/object/bbox/ymin",
    "image/object/bbox/xmax", "image/object/bbox/ymax"};

static void add_i64(ef_sample *s, const char *name, int64_t v)
{
    int64_t *d;
    assert_int_equal(ef_sample_add_new(s, name, EF_I64, 0, NULL, (void **)&d),
                     EF_OK);
    *d = v;
}

static int source_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    corner_source *cs = user;
    (void)block;
    if (cs->next >= cs->count)
        return EF_END;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = cs->next++, .epoch = epoch});
    assert_non_null(s);
    if (cs->img_h) {
        int64_t shape[3] = {cs->img_h, cs->img_w, 3};
        assert_int_equal(ef_sample_add_new(s, "image", EF_U8, 3, shape, NULL),
                         EF_OK);
    }
    for (int k = 0; k < 4; k++) {
        void *d;
        assert_int_equal(ef_sample_add_new(s, coord_name[k], cs->coord_dtype, 1,
                                           &cs->n[k], &d),
                         EF_OK);
        for (int64_t i = 0; i < cs->n[k]; i++)
            if (cs->coord_dtype == EF_F32)
                ((float *)d)[i] = cs->c[k][i];
            else
                ((int64_t *)d)[i] = (int64_t)cs->c[k][i];
    }
    if (cs->labels >= 0) {
        int64_t *l;
        assert_int_equal(
            ef_sample_add_new(s, "labels", EF_I64, 1, &cs->labels, (void **)&l),
            EF_OK);
        for (int64_t i = 0; i < cs->labels; i++)
            l[i] = 100 + i;
    }
    if (cs->crowd) {
        int64_t *c;
        assert_int_equal(ef_sample_add_new(s, "image/object/is_crowd", EF_I64,
                                           1, &cs->crowd, (void **)&c),
                         EF_OK);
        for (int64_t i = 0; i < cs->crowd; i++)
            c[i] = 200 + i;
    }
    if (cs->width)
        add_i64(s, "image/width", cs->width);
    if (cs->height)
        add_i64(s, "image/height", cs->height);
    *out = s;
    return EF_OK;
}

/* The source: n boxes of the given corners, a 50 x 100 image and a label
 * per box. */
static void boxes_of(int n, const float (*box)[4])
{
    src = (corner_source){.count = 3,
                          .coord_dtype = EF_F32,
                          .labels = n,
                          .img_h = 50,
                          .img_w = 100};
    for (int k = 0; k < 4; k++) {
        src.n[k] = n;
        for (int i = 0; i < n; i++)
            src.c[k][i] = box[i][k];
    }
}

static ef_pipeline *pipeline(const char *stages)
{
    src.next = 0;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, source_fn, &src, NULL), EF_OK);
    tu_parse(p, stages);
    return p;
}

static void assert_boxes(const ef_sample *s, const char *name, int64_t n,
                         const float (*want)[4])
{
    ef_tensor t = tu_field(s, name);
    assert_int_equal(t.dtype, EF_F32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], n);
    assert_int_equal(t.shape[1], 4);
    const float *b = t.data;
    for (int64_t i = 0; i < 4 * n; i++)
        if (fabsf(b[i] - want[i / 4][i % 4]) > 1e-4f)
            fail_msg("box %lld coordinate %lld: %g, expected %g",
                     (long long)(i / 4), (long long)(i % 4), b[i],
                     want[i / 4][i % 4]);
}

static void assert_labels(const ef_sample *s, int64_t n, const int64_t *want)
{
    ef_tensor t = tu_field(s, "labels");
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.shape[0], n);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(((const int64_t *)t.data)[i], want[i]);
}

/* Normalized corners times the image's 100 x 50; the lists go. */
static void normalized_by_the_image(void **state)
{
    (void)state;
    static const float in[2][4] = {{0.1f, 0.2f, 0.3f, 0.4f},
                                   {0.5f, 0.0f, 1.0f, 1.0f}};
    static const float want[2][4] = {{10, 10, 30, 20}, {50, 0, 100, 50}};
    boxes_of(2, in);
    ef_pipeline *p = pipeline("corner_boxes");
    ef_sample *s = tu_next(p);
    assert_boxes(s, "boxes", 2, want);
    assert_labels(s, 2, (const int64_t[]){100, 101});
    ef_tensor t;
    for (int k = 0; k < 4; k++)
        assert_int_equal(ef_sample_get(s, coord_name[k], &t), EF_EINVAL);
    assert_int_equal(ef_sample_field_count(s), 3); /* image, labels, boxes */
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* Pixels as they are, the size from two fields; drop=0 keeps the lists;
 * the output named by out=. */
static void pixels_with_size_fields(void **state)
{
    (void)state;
    static const float in[1][4] = {{3, 4, 60, 7.5f}};
    boxes_of(1, in);
    src.img_h = 0; /* no image: the size fields only */
    src.width = 60;
    src.height = 8;
    ef_pipeline *p = pipeline("corner_boxes:normalized=0,width=image/width,"
                              "height=image/height,drop=0,out=bbox");
    ef_sample *s = tu_next(p);
    assert_boxes(s, "bbox", 1, in);
    for (int k = 0; k < 4; k++)
        assert_int_equal(tu_field(s, coord_name[k]).shape[0], 1);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    /* normalized, by the same fields */
    static const float half[1][4] = {{0.5f, 0.5f, 1, 1}};
    static const float want[1][4] = {{30, 4, 60, 8}};
    boxes_of(1, half);
    src.width = 60;
    src.height = 8;
    p = pipeline("corner_boxes:width=image/width,height=image/height");
    s = tu_next(p);
    assert_boxes(s, "boxes", 1, want);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* No boxes: f32 [0,4]; and boxes batch as a list whatever their count. */
static void empty_and_batched(void **state)
{
    (void)state;
    boxes_of(0, NULL);
    ef_pipeline *p = pipeline("corner_boxes");
    ef_sample *s = tu_next(p);
    assert_boxes(s, "boxes", 0, NULL);
    assert_labels(s, 0, NULL);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    static const float in[2][4] = {{0, 0, 1, 1}, {0.25f, 0.25f, 0.5f, 0.5f}};
    boxes_of(2, in);
    p = pipeline("corner_boxes | batch:3");
    s = tu_next(p);
    int64_t len[3];
    assert_int_equal(ef_sample_ragged_lengths(s, "boxes", len, 3), 3);
    assert_true(len[0] == 2 && len[1] == 2 && len[2] == 2);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* boxes=clip: reaching out is clipped, empty and reversed are dropped
 * with their labels, counted (on two threads); the rest as with
 * refuse. */
static void clip_clips_and_drops(void **state)
{
    (void)state;
    static const float in[4][4] = {{-0.1f, 0.2f, 0.3f, 1.5f}, /* clipped */
                                   {0.5f, 0.5f, 0.5f, 0.6f},  /* empty */
                                   {0.4f, 0.1f, 0.2f, 0.3f},  /* reversed */
                                   {1.2f, 0.1f, 1.4f, 0.3f}}; /* outside */
    static const float want[1][4] = {{0, 10, 30, 50}};
    boxes_of(4, in);
    ef_pipeline *p = pipeline("corner_boxes:boxes=clip,threads=2");
    for (int i = 0; i < 3; i++) {
        ef_sample *s = tu_next(p);
        assert_boxes(s, "boxes", 1, want);
        assert_labels(s, 1, (const int64_t[]){100});
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "corner_boxes");
    assert_true(tu_extra(&st, "boxes_clipped") == 3);
    assert_true(tu_extra(&st, "boxes_dropped") == 9);
    ef_pipeline_destroy(p);
    /* labels=: none to carry */
    boxes_of(4, in);
    src.labels = -1;
    p = pipeline("corner_boxes:boxes=clip,labels=");
    ef_sample *s = tu_next(p);
    assert_boxes(s, "boxes", 1, want);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

static void expect_error(const char *stages, int status, ...);

/* box_fields: the rows of other per-box fields go with the boxes that
 * clip drops; one of another row count is refused, naming it. */
static void per_box_fields_follow(void **state)
{
    (void)state;
    static const float in[3][4] = {{0.5f, 0.5f, 0.5f, 0.6f},  /* empty */
                                   {-0.1f, 0.2f, 0.3f, 1.5f}, /* clipped */
                                   {0.4f, 0.1f, 0.2f, 0.3f}}; /* reversed */
    boxes_of(3, in);
    src.crowd = 3;
    ef_pipeline *p = pipeline(
        "corner_boxes:boxes=clip,box_fields=\"image/object/is_crowd\"");
    ef_sample *s = tu_next(p);
    assert_labels(s, 1, (const int64_t[]){101});
    ef_tensor t = tu_field(s, "image/object/is_crowd");
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.shape[0], 1);
    assert_int_equal(((const int64_t *)t.data)[0], 201);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    src.crowd = 2;
    expect_error("corner_boxes:box_fields=\"image/object/is_crowd\"", EF_ESHAPE,
                 "per-box field 'image/object/is_crowd'", "[3]", NULL);
}

/* The first pull of `stages` over src fails with `status`, the message
 * holding each of the NULL-terminated words. */
static void expect_error(const char *stages, int status, ...)
{
    ef_pipeline *p = pipeline(stages);
    va_list ap;
    va_start(ap, status);
    tu_vexpect_first_error(p, stages, status, ap);
    va_end(ap);
    ef_pipeline_destroy(p);
}

static void one_box(float x1, float y1, float x2, float y2)
{
    const float box[1][4] = {{x1, y1, x2, y2}};
    boxes_of(1, box);
}

static void bad_values_are_refused(void **state)
{
    (void)state;
    one_box(0.1f, 0.2f, NAN, 0.4f);
    expect_error("corner_boxes", EF_EFORMAT, "corner_boxes: item 0",
                 "box 0 of 1", "field 'image/object/bbox/xmax'",
                 "option 'xmax'", "expected a finite coordinate", NULL);
    /* under clip too: a NaN is no place to clip to */
    expect_error("corner_boxes:boxes=clip", EF_EFORMAT, "finite", NULL);
    one_box(0.1f, 0.2f, 0.3f, INFINITY);
    expect_error("corner_boxes", EF_EFORMAT, "option 'ymax') holds inf", NULL);
    one_box(0.4f, 0.2f, 0.3f, 0.5f);
    expect_error("corner_boxes", EF_EFORMAT,
                 "(xmin, ymin, xmax, ymax) = (0.4, 0.2, 0.3, 0.5)",
                 "'image/object/bbox/xmin', 'image/object/bbox/ymin'",
                 "has a width or height of zero or less",
                 "expected 0 <= xmin < xmax <= 1 and 0 <= ymin < ymax <= 1",
                 "normalized=1", "boxes=clip", NULL);
    one_box(0.1f, 0.2f, 0.1f, 0.5f);
    expect_error("corner_boxes", EF_EFORMAT, "zero or less", NULL);
    one_box(0.1f, 0.2f, 1.01f, 0.5f);
    expect_error("corner_boxes", EF_EFORMAT, "reaches out of its image", NULL);
    one_box(-0.01f, 0.2f, 0.5f, 0.5f);
    expect_error("corner_boxes", EF_EFORMAT, "reaches out of its image", NULL);
    /* in pixels, against the image's 100 x 50 */
    one_box(10, 20, 100, 51);
    expect_error("corner_boxes:normalized=0", EF_EFORMAT,
                 "reaches out of its image",
                 "0 <= xmin < xmax <= 100 and 0 <= ymin < ymax <= 50",
                 "normalized=0: pixels", NULL);
}

static void bad_fields_are_named(void **state)
{
    (void)state;
    static const float two[2][4] = {{0, 0, 1, 1}, {0, 0, 1, 1}};
    boxes_of(2, two);
    src.n[2] = 1;
    expect_error("corner_boxes", EF_EFORMAT,
                 "field 'image/object/bbox/xmax' (option 'xmax') holds 1 "
                 "values and field 'image/object/bbox/xmin' (option 'xmin') "
                 "2; expected one of each per box",
                 NULL);
    boxes_of(2, two);
    src.labels = 3;
    expect_error("corner_boxes", EF_ESHAPE, "labels field 'labels' is i64 [3]",
                 "expected one row per box, [2]", NULL);
    boxes_of(2, two);
    src.labels = -1;
    expect_error("corner_boxes", EF_ESHAPE,
                 "no field 'labels' (option "
                 "'labels'; the sample has image, image/object/bbox/xmin",
                 NULL);
    boxes_of(2, two);
    expect_error("corner_boxes:ymin=y", EF_ESHAPE,
                 "no field 'y' (option 'ymin'", NULL);
    boxes_of(2, two);
    src.coord_dtype = EF_I64;
    expect_error("corner_boxes", EF_ESHAPE,
                 "field 'image/object/bbox/xmin' (option 'xmin') is i64 [2]; "
                 "expected f32 [n]",
                 NULL);
    boxes_of(2, two);
    src.img_h = 0;
    expect_error("corner_boxes", EF_ESHAPE, "no field 'image'", NULL);
    boxes_of(2, two);
    src.img_h = 0;
    src.width = 10;
    expect_error("corner_boxes:width=image/width,height=image/height",
                 EF_ESHAPE, "no field 'image/height' (option 'height'", NULL);
    boxes_of(2, two);
    src.width = -4;
    src.height = 9;
    expect_error("corner_boxes:width=image/width,height=image/height",
                 EF_EFORMAT,
                 "field 'image/width' (option 'width') is i64 [] below 1; "
                 "expected one i64 or i32 of at least 1",
                 NULL);
    boxes_of(2, two);
    expect_error("corner_boxes:width=labels,height=labels", EF_ESHAPE,
                 "field 'labels' (option 'width') is i64 [2]; expected one "
                 "i64 or i32",
                 NULL);
    boxes_of(2, two);
    expect_error("corner_boxes:drop=0,out=image/object/bbox/ymin", EF_ESHAPE,
                 "the sample has a field 'image/object/bbox/ymin' already; "
                 "name the boxes with out=NAME (or drop=1)",
                 NULL);
    boxes_of(2, two);
    expect_error("batch:3 | corner_boxes", EF_ESPEC,
                 "the sample is a batch; place corner_boxes before batch",
                 NULL);
}

/* Under on_error=skip a refused sample is dropped and counted. */
static void refused_samples_skip(void **state)
{
    (void)state;
    one_box(0.1f, 0.2f, 1.5f, 0.5f);
    ef_pipeline *p = pipeline("corner_boxes");
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_expect_end(p);
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

static void bad_options_are_refused(void **state)
{
    (void)state;
    expect_spec_error("range:3 | corner_boxes:width=w",
                      "corner_boxes: give both width= and height=");
    expect_spec_error("range:3 | corner_boxes:height=h",
                      "give both width= and height=");
    expect_spec_error("range:3 | corner_boxes:image=im,width=w,height=h",
                      "from image= or from width= and height=, not both");
    expect_spec_error("range:3 | corner_boxes:xmin=a,xmax=a",
                      "options 'xmin' and 'xmax' both name field 'a'");
    expect_spec_error("range:3 | corner_boxes:out=",
                      "option 'out' must name a field");
    expect_spec_error("range:3 | corner_boxes:image=",
                      "option 'image' must name a field");
    expect_spec_error("range:3 | corner_boxes:boxes=keep", "boxes");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(normalized_by_the_image),
        cmocka_unit_test(pixels_with_size_fields),
        cmocka_unit_test(empty_and_batched),
        cmocka_unit_test(clip_clips_and_drops),
        cmocka_unit_test(per_box_fields_follow),
        cmocka_unit_test(bad_values_are_refused),
        cmocka_unit_test(bad_fields_are_named),
        cmocka_unit_test(refused_samples_skip),
        cmocka_unit_test(bad_options_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
