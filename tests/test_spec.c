/* SPDX-License-Identifier: Apache-2.0 */
/* The public helpers for programs around pipelines: ef_spec_stage, the
 * split of a text spec that ef_pipeline_parse uses itself, and
 * ef_epoch_seed, the seed of an epoch and part that the service and the
 * Python package use. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "echoflow/echoflow.h"

/* The stages of `spec` joined by ';' into `out`. */
static const char *split(const char *spec, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = '\0';
    for (const char *rest = spec; rest;) {
        const char *text;
        size_t len;
        rest = ef_spec_stage(rest, &text, &len);
        assert_true(text >= spec && text + len <= spec + strlen(spec));
        int n =
            snprintf(out + o, cap - o, "%s%.*s", o ? ";" : "", (int)len, text);
        assert_true(n >= 0 && (size_t)n < cap - o);
        o += (size_t)n;
    }
    return out;
}

static void test_spec_stage_split(void **state)
{
    (void)state;
    char out[256];
    assert_string_equal(split("idx:a | echo:2 |batch:128", out, sizeof out),
                        "idx:a;echo:2;batch:128");
    /* a '|' inside double quotes belongs to its value */
    assert_string_equal(split("a:x=\"1|2\" | b", out, sizeof out),
                        "a:x=\"1|2\";b");
    assert_string_equal(split("  one  ", out, sizeof out), "one");
    /* empty stages are kept: saying what is wrong is the parser's job */
    assert_string_equal(split("", out, sizeof out), "");
    assert_string_equal(split("a||b|", out, sizeof out), "a;;b;");
    /* an unbalanced quote runs to the end */
    assert_string_equal(split("a:x=\"1|2 | b", out, sizeof out),
                        "a:x=\"1|2 | b");
}

static void test_spec_stage_returns_the_rest(void **state)
{
    (void)state;
    const char *spec = "a | b", *text;
    size_t len;
    const char *rest = ef_spec_stage(spec, &text, &len);
    assert_ptr_equal(rest, spec + 3); /* just past the '|' */
    assert_ptr_equal(text, spec);
    assert_int_equal(len, 1);
    assert_null(ef_spec_stage(rest, &text, &len));
    assert_ptr_equal(text, spec + 4);
    assert_int_equal(len, 1);
}

/* The parser splits as ef_spec_stage does: an empty stage is named by
 * its position. */
static void test_parse_uses_the_split(void **state)
{
    (void)state;
    ef_pipeline *p;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "range:4 || batch:2"), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "stage 2 of the spec is "
                                                 "empty"));
    ef_pipeline_destroy(p);
}

static void test_epoch_seed(void **state)
{
    (void)state;
    assert_int_equal(ef_epoch_seed(5, 0, 0), 5);
    /* the values the Python package has always given */
    assert_true(ef_epoch_seed(5, 1, 0) ==
                UINT64_C(5) + UINT64_C(0x9E3779B97F4A7C15));
    assert_true(ef_epoch_seed(0, 0, 1) == UINT64_C(0xD1B54A32D192ED03));
    assert_true(ef_epoch_seed(UINT64_MAX, 3, 2) ==
                UINT64_MAX + 3 * UINT64_C(0x9E3779B97F4A7C15) +
                    2 * UINT64_C(0xD1B54A32D192ED03));
    /* every epoch and part of a run shuffles in an order of its own */
    uint64_t seen[16];
    for (int e = 0; e < 4; e++)
        for (int q = 0; q < 4; q++) {
            seen[e * 4 + q] = ef_epoch_seed(7, (uint64_t)e, (uint64_t)q);
            for (int k = 0; k < e * 4 + q; k++)
                assert_true(seen[k] != seen[e * 4 + q]);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_stage_split),
        cmocka_unit_test(test_spec_stage_returns_the_rest),
        cmocka_unit_test(test_parse_uses_the_split),
        cmocka_unit_test(test_epoch_seed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
