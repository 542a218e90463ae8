/* SPDX-License-Identifier: Apache-2.0 */
/* ef_pipeline_length: each stage's rule for the items a run yields, the
 * counts checked against what the pipeline then delivers, and the
 * unknown cases with the stage and reason their messages give. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

/* The length of p; fails the test unless EF_OK. */
static int64_t length_of(ef_pipeline *p, const char *what)
{
    int64_t n = -2;
    int rc = ef_pipeline_length(p, &n);
    if (rc != EF_OK)
        fail_msg("%s: ef_pipeline_length = %s: %s", what, ef_status_name(rc),
                 ef_pipeline_error(p));
    return n;
}

/* p's length is `want` before the first next(), after one, and after the
 * end; and a run delivers that many items. */
static void expect_run(ef_pipeline *p, const char *what, int64_t want)
{
    int64_t n = length_of(p, what);
    if (n != want)
        fail_msg("%s: length %lld before next(), expected %lld", what,
                 (long long)n, (long long)want);
    int64_t got = 0;
    ef_sample *s = tu_next_or_end(p, what);
    if (s) {
        got++;
        ef_sample_free(s);
        n = length_of(p, what);
        if (n != want)
            fail_msg("%s: length %lld after next(), expected %lld", what,
                     (long long)n, (long long)want);
        got += tu_drain(p);
    }
    if (got != want)
        fail_msg("%s: the run gave %lld items, its length said %lld", what,
                 (long long)got, (long long)want);
    n = length_of(p, what);
    if (n != want)
        fail_msg("%s: length %lld after the end, expected %lld", what,
                 (long long)n, (long long)want);
}

/* The pipeline of `spec` yields `want` items, as its length says. */
static void expect_known(const char *spec, int64_t want)
{
    ef_pipeline *p = tu_pipeline(spec, 7);
    expect_run(p, spec, want);
    ef_pipeline_destroy(p);
}

/* p's length is unknown: EF_EUNSUPPORTED, *out -1, and a message that
 * holds each of the NULL-terminated words; the pipeline is not failed. */
static void expect_unknown_p(ef_pipeline *p, const char *what, ...)
{
    int64_t n = 5;
    int rc = ef_pipeline_length(p, &n);
    if (rc != EF_EUNSUPPORTED)
        fail_msg("%s: expected EUNSUPPORTED, got %s (length %lld): %s", what,
                 ef_status_name(rc), (long long)n, ef_pipeline_error(p));
    assert_int_equal(n, -1);
    va_list ap;
    va_start(ap, what);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(ef_pipeline_error(p), w))
            fail_msg("%s: message \"%s\" lacks \"%s\"", what,
                     ef_pipeline_error(p), w);
    va_end(ap);
}

#define expect_unknown(p, what, ...)                                           \
    expect_unknown_p(p, what, __VA_ARGS__, (const char *)NULL)

/* The length of `spec` is unknown, its message naming what `needle` says,
 * and the pipeline still runs (its first item comes). */
static void expect_unknown_spec(const char *spec, const char *needle)
{
    ef_pipeline *p = tu_pipeline(spec, 7);
    expect_unknown(p, spec, needle);
    ef_sample_free(tu_next(p));
    expect_unknown(p, spec, needle);
    ef_pipeline_destroy(p);
}

/* ---- sources ------------------------------------------------------- */

/* range: n, and each shard=I/N part its exact share. */
static void test_range(void **state)
{
    (void)state;
    expect_known("range:n=10", 10);
    expect_known("range:n=0", 0);
    char spec[64];
    for (int parts = 1; parts <= 4; parts++) {
        int64_t sum = 0;
        for (int i = 0; i < parts; i++) {
            ef_pipeline *p = NULL;
            snprintf(spec, sizeof spec, "range:n=10,shard=%d/%d", i, parts);
            p = tu_pipeline(spec, 0);
            int64_t n = length_of(p, spec);
            expect_run(p, spec, n);
            sum += n;
            ef_pipeline_destroy(p);
        }
        assert_int_equal(sum, 10);
    }
    expect_known("range:n=2,shard=3/4", 0);
    /* the pipeline's part, as shard= would */
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_shard(p, 2, 3), EF_OK);
    tu_parse(p, "range:n=11");
    expect_run(p, "set_shard(2, 3)", 3);
    ef_pipeline_destroy(p);
}

/* An identity source of `n` samples, then the end; counts its passes. */
typedef struct {
    int64_t n, next;
} counter;

static int count_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    counter *c = user;
    if (c->next == c->n) {
        c->next = 0; /* the next pass starts over */
        return EF_END;
    }
    *out = ef_sample_new((ef_sample_id){.index = c->next++, .epoch = epoch});
    return *out ? EF_OK : EF_ENOMEM;
}

/* A C source: its length= option, or unknown without one. */
static void test_c_source(void **state)
{
    (void)state;
    counter c = {.n = 6};
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, count_source, &c, "length=6"),
                     EF_OK);
    tu_parse(p, "batch:4");
    expect_run(p, "source:length=6 | batch:4", 2);
    ef_pipeline_destroy(p);

    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, count_source, &c, NULL), EF_OK);
    expect_unknown(p, "source", "source:", "no length= option");
    assert_int_equal(tu_drain(p), 6);
    expect_unknown(p, "source", "source:", "no length= option");
    ef_pipeline_destroy(p);

    /* the option is checked like any other */
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, count_source, &c, "length=-1"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "length"));
    assert_int_equal(ef_pipeline_add_source(p, count_source, &c, "size=3"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "size"));
    assert_int_equal(ef_pipeline_add_source(p, count_source, &c, "length=0"),
                     EF_OK);
    int64_t n = -2;
    assert_int_equal(ef_pipeline_length(p, &n), EF_OK);
    assert_int_equal(n, 0);
    ef_pipeline_destroy(p);
}

/* A u8 IDX file of `n` records of 2 bytes. */
static void write_idx(const char *path, uint32_t n)
{
    unsigned char buf[16 + 2 * 64] = {0, 0, 0x08, 2};
    assert_true(n <= 64);
    const uint32_t dims[2] = {n, 2};
    for (int d = 0; d < 2; d++)
        for (int b = 0; b < 4; b++)
            buf[4 + 4 * d + b] = (unsigned char)(dims[d] >> (8 * (3 - b)));
    for (uint32_t i = 0; i < 2 * n; i++)
        buf[12 + i] = (unsigned char)i;
    tu_write_file(path, buf, 12 + 2 * (size_t)n);
}

/* idx: from the header before the files are read, first=, count= and
 * shard= applied; a file that cannot be read fails the pipeline. */
static void test_idx(void **state)
{
    (void)state;
    write_idx(tu_at("a.idx"), 9);
    char spec[512];
    snprintf(spec, sizeof spec, "idx:images=%s", tu_at("a.idx"));
    expect_known(spec, 9);
    snprintf(spec, sizeof spec, "idx:images=%s,first=2", tu_at("a.idx"));
    expect_known(spec, 7);
    snprintf(spec, sizeof spec, "idx:images=%s,first=2,count=5,shard=1/2",
             tu_at("a.idx"));
    expect_known(spec, 2);
    snprintf(spec, sizeof spec, "idx:images=%s,shard=2/4 | batch:2",
             tu_at("a.idx"));
    expect_known(spec, 1);

    /* a range past the records: the error the first next() gives */
    snprintf(spec, sizeof spec, "idx:images=%s,first=3,count=7",
             tu_at("a.idx"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t n = 0;
    assert_int_equal(ef_pipeline_length(p, &n), EF_ESPEC);
    assert_int_equal(n, -1);
    assert_non_null(strstr(ef_pipeline_error(p), "runs past the end"));
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "runs past the end"));
    ef_pipeline_destroy(p);

    /* a missing file fails the pipeline; the error stays its answer */
    snprintf(spec, sizeof spec, "idx:images=%s", tu_at("missing.idx"));
    p = tu_pipeline(spec, 0);
    int rc = ef_pipeline_length(p, &n);
    assert_true(rc < 0 && rc != EF_EUNSUPPORTED);
    assert_non_null(strstr(ef_pipeline_error(p), "missing.idx"));
    assert_int_equal(ef_pipeline_next(p, &s), rc);
    assert_int_equal(ef_pipeline_length(p, &n), rc);
    assert_non_null(strstr(ef_pipeline_error(p), "missing.idx"));
    ef_pipeline_destroy(p);
}

/* cifar: the records of its files, read once to count them. */
static void test_cifar(void **state)
{
    (void)state;
    static unsigned char rec[5 * 3073];
    tu_write_file(tu_at("c-1.bin"), rec, 3 * 3073);
    tu_write_file(tu_at("c-2.bin"), rec, 2 * 3073);
    char spec[512];
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..2}.bin\"", tu_dir());
    expect_known(spec, 5);
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..2}.bin\",shard=1/2",
             tu_dir());
    expect_known(spec, 2);
    /* image stages pass every item on */
    snprintf(spec, sizeof spec,
             "cifar:files=\"%s/c-{1..2}.bin\" | flip | cast:f32 | to_chw | "
             "batch:2",
             tu_dir());
    expect_known(spec, 3);
    /* a part with no record is the open's error */
    snprintf(spec, sizeof spec, "cifar:files=%s,shard=3/4", tu_at("c-2.bin"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t n;
    assert_int_equal(ef_pipeline_length(p, &n), EF_EFORMAT);
    assert_non_null(strstr(ef_pipeline_error(p), "gets no record"));
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    ef_pipeline_destroy(p);
}

/* Sources that count only by reading everything. */
static void test_unknown_sources(void **state)
{
    (void)state;
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("none.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    expect_unknown(p, spec,
                   "tar: the number of samples in the shards is not "
                   "known before reading them");
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "tfrecord:files=%s | batch:2",
             tu_at("none.tfrecord"));
    p = tu_pipeline(spec, 0);
    expect_unknown(p, spec, "tfrecord: the number of records");
    ef_pipeline_destroy(p);
}

/* ---- flow stages ----------------------------------------------------- */

static void test_take(void **state)
{
    (void)state;
    expect_known("range:n=10 | take:4", 4);
    expect_known("range:n=3 | take:4", 3);
    expect_known("range:n=3 | take:0", 0);
    /* an endless upstream ends at the count */
    expect_known("range:n=3 | repeat | take:7", 7);
    /* an unknown upstream stays unknown: at most count */
    expect_unknown_spec("range:n=10 | echo:factor=1.5 | take:4",
                        "echo: factor=1.5");
}

static void test_repeat(void **state)
{
    (void)state;
    expect_known("range:n=5 | repeat:3", 15);
    expect_known("range:n=5 | take:2 | repeat:3", 6);
    expect_known("range:n=5 | batch:2 | repeat:2", 6);
    expect_known("range:n=5 | repeat:2 | batch:2", 5);
    expect_known("range:n=5 | repeat:2 | repeat:3", 30);
    /* an empty pass ends even repeat without a count */
    expect_known("range:n=0 | repeat", 0);
    expect_unknown_spec("range:n=5 | repeat", "repeat: never ends");
    /* what follows an endless stage keeps the repeat's message */
    expect_unknown_spec("range:n=5 | repeat | echo:2 | batch:3 | prefetch",
                        "repeat: never ends");
    ef_pipeline *p = tu_pipeline("range:n=9000000000000000000 | repeat:2", 0);
    expect_unknown(p, "overflow", "repeat:", "2^63");
    ef_pipeline_destroy(p);
}

static void test_echo(void **state)
{
    (void)state;
    expect_known("range:n=7 | echo:3", 21);
    expect_known("range:n=7 | echo:factor=3,shuffle=5", 21);
    expect_known("range:n=7 | echo:1", 7);
    expect_known("range:n=7 | batch:2 | echo:2", 8);
    expect_unknown_spec("range:n=7 | echo:factor=2.5",
                        "echo: factor=2.5 rounds each item's copies at random");
    expect_unknown_spec("range:n=7 | prefetch | echo:factor=auto",
                        "echo: factor=auto decides the number of copies at "
                        "run time");
    expect_unknown_spec("range:n=7 | echo:factor=2,policy=rank",
                        "echo: policy=rank");
    /* an endless upstream: endless, then cut by take */
    expect_known("range:n=4 | repeat | echo:factor=auto | take:9", 9);
    ef_pipeline *p = tu_pipeline("range:n=5000000000000000000 | echo:2", 0);
    expect_unknown(p, "overflow", "echo:", "2^63");
    ef_pipeline_destroy(p);
}

static void test_batch(void **state)
{
    (void)state;
    expect_known("range:n=10 | batch:3", 4);
    expect_known("range:n=10 | batch:size=3,drop_remainder=true", 3);
    expect_known("range:n=9 | batch:3", 3);
    expect_known("range:n=9 | batch:size=3,drop_remainder=true", 3);
    expect_known("range:n=2 | batch:size=3,drop_remainder=true", 0);
    expect_known("range:n=0 | batch:3", 0);
    expect_known("range:n=10 | batch:size=3,drop_remainder=true | batch:2", 2);
}

static int identity_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

/* Stages that pass every item on: their upstream's count. */
static void test_one_to_one(void **state)
{
    (void)state;
    expect_known("range:n=11 | shuffle:4 | prefetch:3", 11);
    expect_known("range:n=11 | throttle:rate=1e9 | prefetch", 11);
    ef_pipeline *p = tu_pipeline("range:n=11", 0);
    assert_int_equal(ef_pipeline_add_map(p, identity_map, NULL, "threads=2"),
                     EF_OK);
    tu_parse(p, "batch:5");
    expect_run(p, "map", 3);
    ef_pipeline_destroy(p);
    /* on_error=skip: the count with nothing dropped */
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, "range:n=4 | shuffle:2");
    expect_run(p, "on_error=skip", 4);
    ef_pipeline_destroy(p);
}

/* A restored run has the whole run's length, not what is left. */
static void test_restore(void **state)
{
    (void)state;
    const char *spec = "range:n=10 | shuffle:3 | batch:2";
    ef_pipeline *p = tu_pipeline(spec, 3);
    for (int i = 0; i < 2; i++)
        ef_sample_free(tu_next(p));
    unsigned char buf[4096];
    size_t size = 0;
    assert_int_equal(ef_pipeline_save_state(p, buf, sizeof buf, &size), EF_OK);
    ef_pipeline_destroy(p);
    p = tu_pipeline(spec, 3);
    assert_int_equal(ef_pipeline_restore_state(p, buf, size), EF_OK);
    assert_int_equal(length_of(p, "restored"), 5);
    assert_int_equal(tu_drain(p), 3);
    assert_int_equal(length_of(p, "restored"), 5);
    ef_pipeline_destroy(p);
}

/* ---- the call itself --------------------------------------------------- */

static void test_errors(void **state)
{
    (void)state;
    int64_t n = 0;
    assert_int_equal(ef_pipeline_length(NULL, &n), EF_EINVAL);
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_length(p, NULL), EF_EINVAL);
    assert_int_equal(ef_pipeline_length(p, &n), EF_ESPEC);
    assert_int_equal(n, -1);
    assert_non_null(strstr(ef_pipeline_error(p), "no stages"));
    ef_pipeline_destroy(p);

    /* a failed pipeline answers with its failure, message untouched */
    p = tu_pipeline("range:n=3 | batch:2", 0);
    ef_pipeline_stop(p);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ECANCELED);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", ef_pipeline_error(p));
    assert_int_equal(ef_pipeline_length(p, &n), EF_ECANCELED);
    assert_string_equal(ef_pipeline_error(p), msg);
    ef_pipeline_destroy(p);
}

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_length");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_c_source),
        cmocka_unit_test(test_idx),
        cmocka_unit_test(test_cifar),
        cmocka_unit_test(test_unknown_sources),
        cmocka_unit_test(test_take),
        cmocka_unit_test(test_repeat),
        cmocka_unit_test(test_echo),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_one_to_one),
        cmocka_unit_test(test_restore),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
