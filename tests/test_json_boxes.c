/* SPDX-License-Identifier: Apache-2.0 */
/* A detection sample through `pack`'s writer and back through tar and the
 * json_boxes stage: the same fields, dtypes, shapes and bits (values that
 * are hard to print and read again among them), what the writer refuses,
 * and every malformed JSON named by the stage, the sample, the key and
 * what was expected. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sample.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_json_boxes");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static const float hard[] = {0.1f,    -0.0f,      1e-45f, FLT_MAX,
                             -1e-10f, 16777215.f, 3.0f,   1.0f / 3.0f};

static void add_key(ef_sample *s, const char *key)
{
    void *d;
    int64_t len = (int64_t)strlen(key);
    assert_int_equal(ef_sample_add_new(s, "__key__", EF_U8, 1, &len, &d),
                     EF_OK);
    memcpy(d, key, (size_t)len);
}

/* Sample i of a detection set: jpg bytes, i % 3 boxes from `hard`, labels
 * (with int64's ends), per-box f32 scores, image_id, an f32 scalar and an
 * i32 scalar (written as before, not into the JSON). */
static ef_sample *detection(int i)
{
    ef_sample *s = ef_sample_new((ef_sample_id){.index = i});
    char key[32];
    snprintf(key, sizeof key, "img%02d", i);
    add_key(s, key);
    int64_t n = i % 3, bytes = 5, bshape[2] = {n, 4};
    unsigned char *jpg;
    float *boxes, *scores, *weight;
    int64_t *labels, *id;
    int32_t *cls;
    assert_int_equal(
        ef_sample_add_new(s, "jpg", EF_U8, 1, &bytes, (void **)&jpg), EF_OK);
    memcpy(jpg, "\xff\xd8x\xff\xd9", 5);
    assert_int_equal(
        ef_sample_add_new(s, "boxes", EF_F32, 2, bshape, (void **)&boxes),
        EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "labels", EF_I64, 1, &n, (void **)&labels), EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "scores", EF_F32, 1, &n, (void **)&scores), EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "image_id", EF_I64, 0, NULL, (void **)&id), EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "weight", EF_F32, 0, NULL, (void **)&weight),
        EF_OK);
    assert_int_equal(
        ef_sample_add_new(s, "cls", EF_I32, 0, NULL, (void **)&cls), EF_OK);
    for (int64_t k = 0; k < 4 * n; k++)
        boxes[k] = hard[(k + i) % 8];
    for (int64_t k = 0; k < n; k++) {
        labels[k] = k ? INT64_MIN : INT64_MAX - i;
        scores[k] = hard[(k + 3 * i) % 8];
    }
    *id = 1000000007LL * i;
    *weight = hard[i % 8];
    *cls = i;
    return s;
}

static void write_set(const char *pattern, int count)
{
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 4), EF_OK);
    for (int i = 0; i < count; i++) {
        ef_sample *s = detection(i);
        int rc = ef_shard_writer_add(w, s);
        if (rc != EF_OK)
            fail_msg("%s", ef_shard_writer_error(w));
        ef_sample_free(s);
    }
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    ef_shard_writer_destroy(w);
}

/* Field `name` of got equals want's: dtype, shape, bytes. */
static void same_field(const ef_sample *got, const ef_sample *want,
                       const char *name)
{
    ef_tensor g, w;
    if (ef_sample_get(got, name, &g) != EF_OK)
        fail_msg("field '%s' is missing", name);
    assert_int_equal(ef_sample_get(want, name, &w), EF_OK);
    assert_int_equal(g.dtype, w.dtype);
    assert_int_equal(g.ndim, w.ndim);
    for (int d = 0; d < w.ndim; d++)
        assert_int_equal(g.shape[d], w.shape[d]);
    assert_int_equal(g.nbytes, w.nbytes);
    if (w.nbytes && memcmp(g.data, w.data, w.nbytes))
        fail_msg("field '%s' differs", name);
}

static int variable(const ef_sample *s, const char *name)
{
    return s->fields[ef__sample_find(s, name)].variable != 0;
}

static void round_trip_is_bit_exact(void **state)
{
    (void)state;
    write_set(tu_at("det-%02d.tar"), 9);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "tar:urls=%s/det-{00..02}.tar,shuffle_shards=false,cycle=1 "
             "| json_boxes:floats=\"scores, weight\"",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < 9; i++) {
        ef_sample *got = tu_next(p), *want = detection(i);
        static const char *const names[] = {"jpg",    "boxes",    "labels",
                                            "scores", "image_id", "weight"};
        for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
            same_field(got, want, names[k]);
        /* the i32 scalar was its own member, as before: text */
        ef_tensor cls;
        assert_int_equal(ef_sample_get(got, "cls", &cls), EF_OK);
        assert_int_equal(cls.dtype, EF_U8);
        assert_true(variable(got, "boxes") && variable(got, "labels") &&
                    variable(got, "scores"));
        assert_false(variable(got, "image_id"));
        assert_int_equal(ef__sample_find(got, "json"), -1);
        ef_sample_free(got);
        ef_sample_free(want);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

/* The writer's error for sample s, which it must refuse with `status`. */
static const char *refused(ef_sample *s, int status)
{
    static char msg[1024];
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, tu_at("bad-%02d.tar"), 4),
                     EF_OK);
    assert_int_equal(ef_shard_writer_add(w, s), status);
    snprintf(msg, sizeof msg, "%s", ef_shard_writer_error(w));
    ef_shard_writer_destroy(w);
    ef_sample_free(s);
    return msg;
}

static void writer_refuses_what_json_cannot_hold(void **state)
{
    (void)state;
    ef_sample *s = detection(2);
    ef_tensor t;
    assert_int_equal(ef_sample_get(s, "scores", &t), EF_OK);
    ((float *)t.data)[1] = NAN;
    const char *msg = refused(s, EF_EFORMAT);
    assert_non_null(strstr(msg, "sample 2"));
    assert_non_null(strstr(msg, "field 'scores'"));
    assert_non_null(strstr(msg, "value 1"));
    assert_non_null(strstr(msg, "NaN or an infinity"));

    s = detection(1);
    assert_int_equal(ef_sample_add_new(s, "json", EF_U8, 0, NULL, NULL), EF_OK);
    msg = refused(s, EF_ESHAPE);
    assert_non_null(strstr(msg, "sample 1"));
    assert_non_null(strstr(msg, "field 'json'"));

    /* a per-box-looking field of another length is not the JSON's: it has
     * no form of its own, as before */
    s = detection(2);
    int64_t three = 3;
    assert_int_equal(ef_sample_add_new(s, "areas", EF_F32, 1, &three, NULL),
                     EF_OK);
    msg = refused(s, EF_ESHAPE);
    assert_non_null(strstr(msg, "'areas' (f32 [3])"));
}

/* A shard of one sample, key "k", whose json member is `text`, read by
 * json_boxes: the first pull fails with `status` and the words after it. */
static void expect_error(const char *text, int status, ...)
{
    static int count;
    char name[64], spec[1024];
    snprintf(name, sizeof name, "in-%03d-%%d.tar", count++);
    const char *pattern = tu_at(name);
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 4), EF_OK);
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    add_key(s, "k");
    int64_t len = (int64_t)strlen(text);
    void *d;
    assert_int_equal(ef_sample_add_new(s, "json", EF_U8, 1, &len, &d), EF_OK);
    memcpy(d, text, (size_t)len);
    assert_int_equal(ef_sample_add_new(s, "labels", EF_U8, 0, NULL, NULL),
                     EF_OK); /* a field a key may clash with */
    assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    char shard[512];
    ef_shard_writer_name(w, 0, shard, sizeof shard);
    ef_shard_writer_destroy(w);
    ef_sample_free(s);
    snprintf(spec, sizeof spec, "tar:urls=%s | json_boxes:floats=f", shard);
    ef_pipeline *p = tu_pipeline(spec, 0);
    va_list ap;
    va_start(ap, status);
    tu_vexpect_first_error(p, text, status, ap);
    va_end(ap);
    ef_pipeline_destroy(p);
}

#define NAMED "json_boxes: ", "key 'k'", "field 'json'"

static void malformed_json_is_named(void **state)
{
    (void)state;
    expect_error("", EF_EFORMAT, NAMED, "byte 0", "expected a JSON value",
                 NULL);
    expect_error("[[1, 2, 3, 4]]", EF_EFORMAT, NAMED,
                 "expected the document to be an object, got an array", NULL);
    expect_error("{\"image_id\": 3}", EF_EFORMAT, NAMED, "no key 'boxes'",
                 NULL);
    expect_error("{\"boxes\": {}}", EF_EFORMAT, NAMED,
                 "expected key 'boxes' to be an array, got an object", NULL);
    expect_error("{\"boxes\": [1, 2, 3, 4]}", EF_EFORMAT, NAMED,
                 "expected key 'boxes' row 0 to be an array", NULL);
    expect_error("{\"boxes\": [[1, 2, 3, 4], [1, 2, 3]]}", EF_EFORMAT, NAMED,
                 "key 'boxes' row 1: expected 4 numbers [x1, y1, x2, y2], "
                 "got 3",
                 NULL);
    expect_error("{\"boxes\": [[1, 2, 3, 4, 5]]}", EF_EFORMAT, NAMED,
                 "key 'boxes' row 0: expected 4 numbers", "got more", NULL);
    expect_error("{\"boxes\": [[1, 2, \"3\", 4]]}", EF_EFORMAT, NAMED,
                 "expected key 'boxes' row 0 item 2 to be a number, got a "
                 "string",
                 NULL);
    expect_error("{\"boxes\": [[1, 2, 3, 4]], \"x\": [1, 2]}", EF_EFORMAT,
                 NAMED, "key 'x' has 2 items, expected 1, one per row", NULL);
    expect_error("{\"x\": [], \"boxes\": [[1, 2, 3, 4]]}", EF_EFORMAT, NAMED,
                 "key 'x' has 0 items, expected 1", NULL);
    expect_error("{\"boxes\": [], \"x\": [[1]]}", EF_EFORMAT, NAMED,
                 "expected key 'x' item 0 to be an integer, got an array",
                 NULL);
    expect_error("{\"boxes\": [], \"x\": \"a\"}", EF_EFORMAT, NAMED,
                 "key 'x': expected an array of numbers (one per box) or a "
                 "number, got a string",
                 NULL);
    expect_error("{\"boxes\": [], \"x\": null}", EF_EFORMAT, NAMED, "got null",
                 NULL);
    expect_error("{\"boxes\": [], \"x\": 2.5}", EF_EFORMAT, NAMED,
                 "key 'x': expected an integer, got a number with a fraction",
                 NULL);
    expect_error("{\"boxes\": [], \"x\": 1e400}", EF_EFORMAT, NAMED, "key 'x'",
                 NULL);
    expect_error("{\"boxes\": [[0, 0, 1e39, 1]]}", EF_EFORMAT, NAMED,
                 "key 'boxes' row 0 item 2: 1e+39 is beyond the range of f32",
                 NULL);
    expect_error("{\"boxes\": [], \"f\": -1e300}", EF_EFORMAT, NAMED,
                 "key 'f': -1e+300 is beyond the range of f32", NULL);
    expect_error("{\"boxes\": [], \"boxes\": []}", EF_EFORMAT, NAMED,
                 "key 'boxes' given twice", NULL);
    expect_error("{\"boxes\": [], \"__url__\": 1}", EF_EFORMAT, NAMED,
                 "key '__url__': a name kept for the sample's key and URL",
                 NULL);
    expect_error("{\"boxes\": [], \"\": 1}", EF_EFORMAT, NAMED,
                 "a key that is empty", NULL);
    expect_error("{\"boxes\": []} {}", EF_EFORMAT, NAMED, "byte 14",
                 "expected the end of the data after the document", NULL);
    expect_error("{\"boxes\": [NaN]}", EF_EFORMAT, NAMED, "byte 11", NULL);
    expect_error("{\"boxes\": [], \"labels\": []}", EF_ESHAPE, NAMED,
                 "key 'labels': the sample already has a field 'labels'", NULL);
    /* more keys than a detection annotation has */
    char many[2048] = "{\"boxes\": []";
    for (int i = 0; i < 70; i++)
        snprintf(many + strlen(many), sizeof many - strlen(many),
                 ", \"k%d\": %d", i, i);
    strcat(many, "}");
    expect_error(many, EF_EFORMAT, NAMED, "more than 64 keys", NULL);
}

static void expect_first(ef_pipeline *p, const char *what, int status, ...)
{
    va_list ap;
    va_start(ap, status);
    tu_vexpect_first_error(p, what, status, ap);
    va_end(ap);
}

static void missing_field(void **state)
{
    (void)state;
    char spec[1024];
    write_set(tu_at("ok-%02d.tar"), 3);
    snprintf(spec, sizeof spec, "tar:urls=%s | json_boxes:field=ann",
             tu_at("ok-00.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    expect_first(p, spec, EF_ESHAPE, "json_boxes: ", "key 'img00'",
                 "no field 'ann' of u8 [N]", "option 'field'", NULL);
    ef_pipeline_destroy(p);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:n=2 | json_boxes:field=\"\""),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "option 'field'"));
    ef_pipeline_destroy(p);
}

/* on_error=skip drops the sample whose JSON is bad, and counts it. */
static void bad_sample_skipped(void **state)
{
    (void)state;
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, tu_at("skip-%d.tar"), 9),
                     EF_OK);
    for (int i = 0; i < 3; i++) {
        ef_sample *s = detection(i);
        if (i == 1) {
            ef_sample_free(s);
            s = ef_sample_new((ef_sample_id){.index = i});
            add_key(s, "bad");
            int64_t len = 1;
            void *d;
            assert_int_equal(ef_sample_add_new(s, "json", EF_U8, 1, &len, &d),
                             EF_OK);
            memcpy(d, "{", 1);
        }
        assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
        ef_sample_free(s);
    }
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    ef_shard_writer_destroy(w);
    char spec[1024];
    snprintf(spec, sizeof spec,
             "tar:urls=%s | json_boxes:floats=\"scores,weight\"",
             tu_at("skip-0.tar"));
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    assert_int_equal(tu_drain(p), 2);
    char why[1024];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 1);
    assert_non_null(strstr(why, "key 'bad'"));
    assert_non_null(strstr(why, "field 'json'"));
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_is_bit_exact),
        cmocka_unit_test(writer_refuses_what_json_cannot_hold),
        cmocka_unit_test(malformed_json_is_named),
        cmocka_unit_test(missing_field),
        cmocka_unit_test(bad_sample_skipped),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
