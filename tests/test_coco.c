/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON pull reader (codec/json_reader.h) on documents good and bad,
 * and the coco source on small COCO files and images written here: the
 * boxes' conversion to xyxy, the label mapping, the empty, crowd and
 * boxes options, and the refusals, whose messages name the file, the
 * image or annotation and the field. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "codec/coco.h"
#include "codec/image.h"
#include "codec/json_reader.h"
#include "core/buffer.h"
#include "ef_test_util.h"
#include "state_test_util.h"

/* ---- the JSON reader ---------------------------------------------------- */

/* Skips the document `text` whole; its status, its message in err. */
static int skip_all(const char *text, ef__err *err)
{
    ef__json_reader j;
    ef__json_reader_init(&j, text, strlen(text), "doc.json");
    ef__err_clear(err);
    int rc = ef__json_skip(&j, err);
    return rc == EF_OK ? ef__json_finish(&j, err) : rc;
}

static void expect_bad(const char *text, const char *needle)
{
    ef__err err;
    int rc = skip_all(text, &err);
    if (rc != EF_EFORMAT)
        fail_msg("'%s': expected EF_EFORMAT, got %d", text, rc);
    if (!strstr(err.msg, needle) || !strstr(err.msg, "doc.json: byte "))
        fail_msg("'%s': message \"%s\" lacks \"%s\"", text, err.msg, needle);
}

static void test_json_valid(void **state)
{
    (void)state;
    static const char *const good[] = {
        "{}",
        "[]",
        " [1, -0, 0.5, -1e3, 2E+2, 3e-1] ",
        "\"a\\u00e9\\n\"",
        "{\"a\": [true, false, null, {\"b\": {}}], \"c\": \"\\ud83d\\ude00\"}",
        "0",
        "\"\"",
        "[[[[[[[[[[]]]]]]]]]]"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ef__err err;
        if (skip_all(good[i], &err) != EF_OK)
            fail_msg("'%s': %s", good[i], err.msg);
    }
}

static void test_json_malformed(void **state)
{
    (void)state;
    expect_bad("{\"a\": [1, 2", "truncated");
    expect_bad("{\"a\": \"xy", "a string that does not end");
    expect_bad("{\"a\" 1}", "expected ':'");
    expect_bad("[1, 2,]", "expected a JSON value");
    expect_bad("{\"a\": 1,}", "expected a key");
    expect_bad("[1 2]", "expected ',' or ']'");
    expect_bad("[01]", "leading zero");
    expect_bad("[1.]", "after '.'");
    expect_bad("[1e]", "exponent");
    expect_bad("[-]", "expected a digit");
    expect_bad("[NaN]", "expected a JSON value");
    expect_bad("[tru]", "true, false or null");
    expect_bad("\"a\\x\"", "bad escape");
    expect_bad("\"\\u12g4\"", "4 hex digits");
    expect_bad("\"\\ud800\"", "high surrogate");
    expect_bad("\"\\udc00\"", "lone low surrogate");
    expect_bad("\"a\tb\"", "control character");
    expect_bad("{} {}", "end of the data after the document");
    expect_bad("", "expected a JSON value");
    /* nesting past the limit, however it is reached */
    char deep[2 * EF__JSON_MAX_DEPTH + 8];
    memset(deep, '[', EF__JSON_MAX_DEPTH + 1);
    memset(deep + EF__JSON_MAX_DEPTH + 1, ']', EF__JSON_MAX_DEPTH + 1);
    deep[2 * EF__JSON_MAX_DEPTH + 2] = '\0';
    expect_bad(deep, "nested deeper than 64");
    deep[2 * EF__JSON_MAX_DEPTH + 1] = '\0'; /* one level less: fine */
    ef__err err;
    assert_int_equal(skip_all(deep + 1, &err), EF_OK);
}

static void test_json_values(void **state)
{
    (void)state;
    const char *text = "{\"n\": 7.0, \"big\": 99999999999999999999, "
                       "\"f\": 1.5, \"inf\": 1e999, \"s\": \"x\", "
                       "\"i\": -9223372036854775808}";
    ef__json_reader j;
    ef__err err;
    char key[16], s[4];
    int more;
    int64_t i;
    double d;
    ef__json_reader_init(&j, text, strlen(text), "v.json");
    assert_int_equal(ef__json_object(&j, "top", &err), EF_OK);
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    assert_true(more);
    assert_string_equal(key, "n");
    assert_int_equal(ef__json_int(&j, "n", &i, &err), EF_OK);
    assert_int_equal(i, 7);
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    ef__json_reader k = j; /* the same place, read two ways */
    assert_int_equal(ef__json_int(&j, "big", &i, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "big: an integer out of the int64 range"));
    assert_int_equal(ef__json_skip(&j, &err), EF_EFORMAT); /* spent */
    assert_non_null(strstr(err.msg, "after an error"));
    assert_int_equal(ef__json_number(&k, "big", &d, &err), EF_OK);
    assert_int_equal(ef__json_next_key(&k, key, sizeof key, &more, &err),
                     EF_OK);
    j = k;
    assert_int_equal(ef__json_int(&k, "f", &i, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "fraction"));
    assert_int_equal(ef__json_number(&j, "f", &d, &err), EF_OK);
    assert_true(d == 1.5);
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    k = j;
    assert_int_equal(ef__json_number(&k, "inf", &d, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "too large"));
    assert_int_equal(ef__json_skip(&j, &err), EF_OK);
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    k = j;
    assert_int_equal(ef__json_int(&k, "s", &i, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "expected s to be an integer, got a "
                                    "string"));
    k = j;
    assert_int_equal(ef__json_text(&k, "s", s, 1, NULL, &err), EF_EFORMAT);
    assert_non_null(strstr(err.msg, "a string of 1 bytes (at most 0)"));
    assert_int_equal(ef__json_text(&j, "s", s, sizeof s, NULL, &err), EF_OK);
    assert_string_equal(s, "x");
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    assert_int_equal(ef__json_int(&j, "i", &i, &err), EF_OK);
    assert_true(i == INT64_MIN);
    assert_int_equal(ef__json_next_key(&j, key, sizeof key, &more, &err),
                     EF_OK);
    assert_false(more);
    assert_int_equal(ef__json_finish(&j, &err), EF_OK);
}

/* ---- COCO files ---------------------------------------------------------- */

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_coco");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* A w x h image of colour v as a PNG (or JPEG) file at path. */
static void write_image(const char *path, int64_t w, int64_t h, int jpeg)
{
    unsigned char px[32 * 32 * 3];
    assert_true(w * h * 3 <= (int64_t)sizeof px);
    for (int64_t i = 0; i < w * h * 3; i++)
        px[i] = (unsigned char)(i * 7);
    ef_buffer *b = NULL;
    ef__err err;
    int rc = jpeg ? ef__jpeg_encode(px, h, w, 3, 90, &b, &err)
                  : ef__png_encode(px, h, w, 3, &b, &err);
    if (rc != EF_OK)
        fail_msg("encoding %s: %s", path, err.msg);
    tu_write_file(path, ef_buffer_data(b), ef_buffer_size(b));
    ef_buffer_release(b);
}

/* Three images: 1.png (20x10) with two boxes and a crowd one, 2.jpg
 * (16x16) with none, 3.png (8x6) with one; categories 3 and 1 (in
 * that order: contiguous labels follow ids, not the file). */
#define IMAGES                                                                 \
    "\"images\": [{\"id\": 11, \"file_name\": \"a/1.png\", \"width\": 20, "    \
    "\"height\": 10, \"license\": 2},"                                         \
    "{\"file_name\": \"2.jpg\", \"id\": 12, \"width\": 16, \"height\": 16},"   \
    "{\"id\": 13, \"file_name\": \"3.png\", \"width\": 8, \"height\": 6}]"
#define CATEGORIES                                                             \
    "\"categories\": [{\"id\": 3, \"name\": \"dog\"}, {\"id\": 1, \"name\": "  \
    "\"cat\", \"supercategory\": \"animal\"}]"

static const char *const good_anns =
    "\"annotations\": ["
    "{\"segmentation\": [[1, 2, 3, 4, 5, 6]], \"area\": 6, \"iscrowd\": 0, "
    "\"image_id\": 11, \"bbox\": [1, 2, 3, 4], \"category_id\": 3, \"id\": 1},"
    "{\"id\": 2, \"image_id\": 13, \"bbox\": [0.5, 0, 7.5, 6], "
    "\"category_id\": 1},"
    "{\"id\": 3, \"image_id\": 11, \"bbox\": [0, 0, 20, 10], "
    "\"category_id\": 1, \"iscrowd\": 1, \"segmentation\": {\"counts\": "
    "[1, 2], \"size\": [10, 20]}},"
    "{\"id\": 4, \"image_id\": 11, \"bbox\": [10, 5, 10, 5], "
    "\"category_id\": 1}]";

/* Writes the images and instances.json of `annotations` (the text of
 * its key and value). */
static void write_coco(const char *annotations)
{
    char dir[512], json[8192];
    snprintf(dir, sizeof dir, "%s/a", tu_dir());
    mkdir(dir, 0755);
    write_image(tu_at("a/1.png"), 20, 10, 0);
    write_image(tu_at("2.jpg"), 16, 16, 1);
    write_image(tu_at("3.png"), 8, 6, 0);
    snprintf(json, sizeof json,
             "{\"info\": {\"year\": 2017}, \"licenses\": [], " IMAGES
             ", %s, " CATEGORIES "}",
             annotations);
    tu_write_file(tu_at("instances.json"), json, strlen(json));
}

static ef_pipeline *open_coco(const char *options)
{
    char spec[1024];
    snprintf(spec, sizeof spec, "coco:annotations=%s,root=%s%s",
             tu_at("instances.json"), tu_dir(), options);
    return tu_pipeline(spec, 1);
}

/* Checks field `name` is f32 [n, 4] holding `want`. */
static void expect_boxes(const ef_sample *s, int64_t n, const float *want)
{
    ef_tensor t = tu_field(s, "boxes");
    assert_int_equal(t.dtype, EF_F32);
    assert_int_equal(t.ndim, 2);
    assert_int_equal(t.shape[0], n);
    assert_int_equal(t.shape[1], 4);
    for (int64_t i = 0; i < 4 * n; i++)
        if (((const float *)t.data)[i] != want[i])
            fail_msg("boxes[%lld] = %g, expected %g", (long long)i,
                     (double)((const float *)t.data)[i], (double)want[i]);
}

static void expect_labels(const ef_sample *s, const char *name, int64_t n,
                          const int64_t *want)
{
    ef_tensor t = tu_field(s, name);
    assert_int_equal(t.dtype, EF_I64);
    assert_int_equal(t.ndim, 1);
    assert_int_equal(t.shape[0], n);
    for (int64_t i = 0; i < n; i++)
        assert_int_equal(((const int64_t *)t.data)[i], want[i]);
}

/* The bytes of field `name` equal the file at path. */
static void expect_file_bytes(const ef_sample *s, const char *name,
                              const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ef_tensor t = tu_field(s, name);
    assert_int_equal(t.dtype, EF_U8);
    assert_int_equal(t.shape[0], (int64_t)n);
    assert_memory_equal(t.data, buf, n);
}

static void expect_text(const ef_sample *s, const char *name, const char *want)
{
    ef_tensor t = tu_field(s, name);
    assert_int_equal(t.shape[0], (int64_t)strlen(want));
    assert_memory_equal(t.data, want, strlen(want));
}

static void test_samples(void **state)
{
    (void)state;
    write_coco(good_anns);
    ef_pipeline *p = open_coco("");
    ef_sample *s = tu_next(p);
    static const float b1[] = {1, 2, 4, 6, 10, 5, 20, 10};
    static const int64_t l1[] = {1, 0}; /* ids 3, 1: 3 is the 2nd */
    expect_boxes(s, 2, b1);
    expect_labels(s, "labels", 2, l1);
    assert_int_equal(tu_i64(s, "image_id"), 11);
    expect_file_bytes(s, "png", tu_at("a/1.png"));
    expect_text(s, "__key__", "a/1");
    assert_int_equal(ef_sample_identity(s).index, 0);
    assert_int_equal(ef_sample_get(s, "iscrowd", &(ef_tensor){0}), EF_EINVAL);
    ef_sample_free(s);
    s = tu_next(p); /* no boxes: kept, [0, 4] */
    expect_boxes(s, 0, NULL);
    expect_labels(s, "labels", 0, NULL);
    assert_int_equal(tu_i64(s, "image_id"), 12);
    expect_file_bytes(s, "jpg", tu_at("2.jpg"));
    ef_sample_free(s);
    s = tu_next(p);
    static const float b3[] = {0.5f, 0, 8, 6};
    expect_boxes(s, 1, b3);
    expect_labels(s, "labels", 1, (const int64_t[]){0});
    ef_sample_free(s);
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "coco");
    assert_true(tu_extra(&st, "records") == 3);
    assert_true(tu_extra(&st, "categories") == 2);
    assert_true(tu_extra(&st, "boxes") == 3);
    assert_true(tu_extra(&st, "crowd_skipped") == 1);
    ef_pipeline_destroy(p);
}

static void test_options(void **state)
{
    (void)state;
    write_coco(good_anns);
    /* crowd kept with its mark; category ids as labels; empty dropped */
    ef_pipeline *p =
        open_coco(",crowd=keep,labels=category,empty=drop,shard=0/1");
    ef_sample *s = tu_next(p);
    static const float b1[] = {1, 2, 4, 6, 0, 0, 20, 10, 10, 5, 20, 10};
    expect_boxes(s, 3, b1);
    expect_labels(s, "labels", 3, (const int64_t[]){3, 1, 1});
    expect_labels(s, "iscrowd", 3, (const int64_t[]){0, 1, 0});
    ef_sample_free(s);
    s = tu_next(p); /* 12 had none */
    assert_int_equal(tu_i64(s, "image_id"), 13);
    assert_int_equal(ef_sample_identity(s).index, 1);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "coco");
    assert_true(tu_extra(&st, "empty_dropped") == 1);
    ef_pipeline_destroy(p);
    /* shard 1 of 2: the second image only; decode reads the bytes */
    p = open_coco(",shard=1/2 | decode");
    s = tu_next(p);
    assert_int_equal(tu_i64(s, "image_id"), 12);
    ef_tensor im = tu_field(s, "image");
    assert_int_equal(im.shape[0], 16);
    assert_int_equal(im.shape[1], 16);
    expect_boxes(s, 0, NULL);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* batch lays boxes out ragged: 2, 0 and 1 boxes */
    p = open_coco(" | select:fields=\"boxes,labels,image_id\" "
                  "| batch:size=3");
    s = tu_next(p);
    ef_tensor t = tu_field(s, "boxes");
    assert_int_equal(t.shape[0], 3);
    assert_int_equal(t.shape[1], 4);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* The first pull fails with EF_EFORMAT naming each of the words. */
static void expect_error(const char *anns, const char *options, ...)
{
    write_coco(anns);
    ef_pipeline *p = open_coco(options);
    va_list ap;
    va_start(ap, options);
    tu_vexpect_first_error(p, anns, EF_EFORMAT, ap);
    va_end(ap);
    ef_pipeline_destroy(p);
}

static void test_bad_annotations(void **state)
{
    (void)state;
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, \"bbox\": "
                 "[1, 2, 3], \"category_id\": 1}]",
                 "", "instances.json", "annotation 5 of image 11",
                 "annotations[0]", "field 'bbox'", "expected 4 numbers", NULL);
    /* the ids after the bad field are named too */
    expect_error("\"annotations\": [{\"bbox\": [1, \"2\", 3, 4], "
                 "\"image_id\": 13, \"category_id\": 1, \"id\": 9}]",
                 "", "annotation 9 of image 13", "field 'bbox'",
                 "got a string at [1]", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"category_id\": 1}]",
                 "", "annotation 5 of image 11", "field 'bbox': missing", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": \"11\", "
                 "\"bbox\": [1, 2, 3, 4], \"category_id\": 1}]",
                 "", "annotation 5 ", "field 'image_id'",
                 "expected an integer, got a string", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 99, "
                 "\"bbox\": [1, 2, 3, 4], \"category_id\": 1}]",
                 "", "annotation 5 ", "field 'image_id'",
                 "image 99 is not in 'images'", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"bbox\": [1, 2, 3, 4], \"category_id\": 2}]",
                 "", "annotation 5 of image 11", "field 'category_id'",
                 "category 2 is not in 'categories'", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"bbox\": [1, 2, 3, 4], \"bbox\": [1, 2, 3, 4], "
                 "\"category_id\": 1}]",
                 "", "annotation 5 of image 11", "field 'bbox': given twice",
                 NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"bbox\": [1, 2, 3, 4], \"category_id\": 1, \"iscrowd\": "
                 "2}]",
                 "", "field 'iscrowd': expected 0 or 1, got 2", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"bbox\": [1, 2, 3, 1e999], \"category_id\": 1}]",
                 "", "instances.json", "annotations[0], field 'bbox'",
                 "too large", NULL);
    expect_error("\"annotations\": [{\"id\": 5, \"image_id\": 11, "
                 "\"bbox\": [1, 2, 3, 4], \"category_id\": 1",
                 "", "instances.json", "expected ',' or ']'", "truncated",
                 NULL);
    expect_error("\"annotations\": [], \"annotations\": []", "",
                 "key 'annotations' given twice", NULL);
    expect_error("\"annotations\": {}", "", "instances.json",
                 "expected annotations to be an array, got an object", NULL);
}

static void test_bad_images(void **state)
{
    (void)state;
    write_coco("\"annotations\": []");
    static const struct {
        const char *json, *words[3];
    } cases[] = {
        {"{\"images\": [{\"id\": 1, \"file_name\": \"x.png\", \"width\": 0, "
         "\"height\": 4}]}",
         {"image 1 (images[0]", "field 'width'", "expected a positive"}},
        {"{\"images\": [{\"file_name\": \"x.png\", \"width\": 4, "
         "\"height\": 4}]}",
         {"images[0] (byte", "field 'id': missing", NULL}},
        {"{\"images\": [{\"id\": 1, \"file_name\": 7, \"width\": 4, "
         "\"height\": 4}]}",
         {"image 1", "field 'file_name'", "expected a string, got a number"}},
        {"{\"images\": [{\"id\": 1, \"file_name\": \"x.png\", \"width\": 4, "
         "\"height\": 4}, {\"id\": 1, \"file_name\": \"y.png\", \"width\": "
         "4, \"height\": 4}]}",
         {"image id 1 given twice", "images[0] and images[1]", NULL}},
        {"{\"images\": [{\"id\": 1, \"file_name\": \"x\", \"width\": 4, "
         "\"height\": 4}]}",
         {"image 1, field 'file_name'", "no extension", NULL}},
        {"{\"categories\": []}", {"no 'images' array", NULL}},
        {"{\"images\": [], \"categories\": [{\"id\": 1}, {\"id\": 1}]}",
         {"category id 1 given twice", NULL}},
        {"{\"images\": [{\"id\": 1, \"file_name\": \"x.png\", \"width\": 4, "
         "\"height\": 4, \"deep\": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
         "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]"
         "]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}]}",
         {"instances.json: byte ", "nested deeper than 64", NULL}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_write_file(tu_at("instances.json"), cases[c].json,
                      strlen(cases[c].json));
        ef_pipeline *p = open_coco("");
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc != EF_EFORMAT)
            fail_msg("case %zu: %d: %s", c, rc, ef_pipeline_error(p));
        const char *msg = ef_pipeline_error(p);
        if (!strstr(msg, "coco: "))
            fail_msg("case %zu: \"%s\" lacks coco:", c, msg);
        for (int w = 0; w < 3 && cases[c].words[w]; w++)
            if (!strstr(msg, cases[c].words[w]))
                fail_msg("case %zu: \"%s\" lacks \"%s\"", c, msg,
                         cases[c].words[w]);
        ef_pipeline_destroy(p);
    }
}

static void test_boxes_option(void **state)
{
    (void)state;
    const char *outside = "\"annotations\": ["
                          "{\"id\": 7, \"image_id\": 13, \"bbox\": [-1, 2, "
                          "5, 5], \"category_id\": 1},"
                          "{\"id\": 8, \"image_id\": 13, \"bbox\": [2, 2, 0, "
                          "3], \"category_id\": 3},"
                          "{\"id\": 9, \"image_id\": 13, \"bbox\": [9, 0, 2, "
                          "3], \"category_id\": 3},"
                          "{\"id\": 10, \"image_id\": 13, \"bbox\": [1, 1, 2, "
                          "2], \"category_id\": 3}]";
    expect_error(outside, "", "instances.json", "annotation 7 of image 13",
                 "field 'bbox'", "[-1, 2, 5, 5] reaches out of its image",
                 "boxes=clip", NULL);
    char zero[1024];
    snprintf(zero, sizeof zero,
             "\"annotations\": [{\"id\": 8, \"image_id\": 13, \"bbox\": [2, "
             "2, 0, 3], \"category_id\": 3}]");
    expect_error(zero, "", "annotation 8 of image 13",
                 "has a width or height of zero or less", NULL);
    write_coco(outside);
    ef_pipeline *p = open_coco(",boxes=clip,empty=drop");
    ef_sample *s = tu_next(p);
    assert_int_equal(tu_i64(s, "image_id"), 13);
    /* -1..4 clipped to 0..4; zero width and wholly outside: dropped */
    static const float want[] = {0, 2, 4, 6, 1, 1, 3, 3};
    expect_boxes(s, 2, want);
    expect_labels(s, "labels", 2, (const int64_t[]){0, 1});
    ef_sample_free(s);
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "coco");
    assert_true(tu_extra(&st, "boxes_clipped") == 1);
    assert_true(tu_extra(&st, "boxes_dropped") == 2);
    assert_true(tu_extra(&st, "empty_dropped") == 2);
    ef_pipeline_destroy(p);
}

static void test_spec_errors(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "coco:annotations=x.json,empty=no", "coco:annotations=x.json,boxes=fix",
        "coco:annotations=x.json,crowd=drop",
        "coco:annotations=x.json,labels=names", "coco:annotations="};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ef_pipeline *p = NULL;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        int rc = ef_pipeline_parse(p, bad[i]);
        if (rc != EF_ESPEC)
            fail_msg("%s: %d: %s", bad[i], rc, ef_pipeline_error(p));
        assert_non_null(strstr(ef_pipeline_error(p), "coco"));
        ef_pipeline_destroy(p);
    }
    /* an image that is not there is named */
    write_coco("\"annotations\": []");
    remove(tu_at("2.jpg"));
    ef_pipeline *p = open_coco(",first=1");
    ef_sample *s = NULL;
    assert_int_not_equal(ef_pipeline_next(p, &s), EF_OK);
    assert_non_null(strstr(ef_pipeline_error(p), "2.jpg"));
    ef_pipeline_destroy(p);
}

static ef_pipeline *make(const char *spec, const void *arg)
{
    (void)arg;
    return tu_pipeline(spec, 7);
}

/* Saved mid-pass and restored: the same rest, boxes included, with the
 * cursor alone and with a shuffle's buffer made again by identity. */
static void test_checkpoint(void **state)
{
    (void)state;
    write_coco(good_anns);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "coco:annotations=%s,root=%s,shard=0/1 | repeat:3",
             tu_at("instances.json"), tu_dir());
    tu_check_resume(make, NULL, spec, spec, NULL, 4, 64);
    snprintf(spec, sizeof spec,
             "coco:annotations=%s,root=%s | shuffle:2 | repeat:2",
             tu_at("instances.json"), tu_dir());
    tu_check_resume(make, NULL, spec, spec, NULL, 5, 64);
}

/* An annotations file over the memory budget is refused, naming it;
 * one within it is read. */
static void test_budget(void **state)
{
    (void)state;
    write_coco(good_anns);
    ef_pipeline *p = NULL;
    char spec[1024];
    snprintf(spec, sizeof spec, "coco:annotations=%s,root=%s",
             tu_at("instances.json"), tu_dir());
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, 512), EF_OK);
    tu_parse(p, spec);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ENOMEM);
    assert_non_null(strstr(ef_pipeline_error(p), "instances.json"));
    assert_non_null(strstr(ef_pipeline_error(p), "budget"));
    ef_pipeline_destroy(p);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, 8192), EF_OK);
    tu_parse(p, spec);
    s = tu_next(p);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_valid),
        cmocka_unit_test(test_json_malformed),
        cmocka_unit_test(test_json_values),
        cmocka_unit_test_setup_teardown(test_samples, setup, teardown),
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_annotations, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_images, setup, teardown),
        cmocka_unit_test_setup_teardown(test_boxes_option, setup, teardown),
        cmocka_unit_test_setup_teardown(test_spec_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_budget, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoint, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
