/* SPDX-License-Identifier: Apache-2.0 */
/* Destroying pipelines in every state: before the first next, mid-stream
 * with full queues and blocked threads, while a thread sleeps in throttle,
 * after the end, after an error. Nothing may hang or leak, and samples
 * already handed out stay valid after the pipeline is gone. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

enum { REPEATS = 3 };

static void pull(ef_pipeline *p, int n)
{
    for (int i = 0; i < n; i++)
        ef_sample_free(tu_next(p));
}

static void test_destroy_mid_stream_full_queues(void **state)
{
    (void)state;
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p =
            tu_pipeline("range:n=1000000,bytes=64 | map:fn=noop,threads=4 | "
                        "prefetch:depth=8 | echo:2 | prefetch:depth=4",
                        (uint64_t)r);
        for (int i = 0; i < 10; i++) {
            ef_sample *s = tu_next(p);
            ef_sample_id id = ef_sample_identity(s);
            assert_int_equal(id.index, i / 2);
            assert_int_equal(id.echo_copy, i % 2);
            ef_sample_free(s);
        }
        ef_pipeline_destroy(p); /* threads blocked on full queues */
    }
}

static void test_destroy_mid_stream_shuffle_repeat_forever(void **state)
{
    (void)state;
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p =
            tu_pipeline("range:n=100,bytes=8 | repeat | shuffle:buffer=50 | "
                        "map:fn=to_f32,threads=2 | prefetch:depth=4",
                        (uint64_t)r);
        pull(p, 250 + r);
        ef_pipeline_destroy(p);
    }
}

static void test_destroy_while_throttled(void **state)
{
    (void)state;
    /* one item per 10 s: after the first, the prefetch thread sleeps in
     * throttle; destroy must wake it rather than wait the sleep out */
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p =
            tu_pipeline("range:n=100 | throttle:rate=0.1 | prefetch:2", 0);
        ef_sample_free(tu_next(p));
        double t0 = tu_now_s();
        ef_pipeline_destroy(p);
        double dt = tu_now_s() - t0;
        if (dt >= 2.0)
            fail_msg("destroy took %.2f s with a thread asleep in throttle",
                     dt);
    }
}

static void test_destroy_before_next(void **state)
{
    (void)state;
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p = tu_pipeline(
            "range:n=1000,bytes=16 | map:fn=noop,threads=4 | shuffle:100 | "
            "prefetch:depth=4 | echo:2,shuffle=10 | batch:8 | prefetch:2",
            0);
        ef_pipeline_destroy(p);
    }
    /* an empty pipeline, and NULL */
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    ef_pipeline_destroy(p);
    ef_pipeline_destroy(NULL);
}

static void test_destroy_after_end(void **state)
{
    (void)state;
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p = tu_pipeline(
            "range:n=50,bytes=4 | map:fn=noop,threads=4 | prefetch:depth=4 | "
            "echo:2 | batch:7 | prefetch:depth=2",
            0);
        long rows = 0;
        for (ef_sample *s;
             (s = tu_next_or_end(p, "destroy after end")) != NULL;) {
            rows += tu_field(s, "index").shape[0];
            ef_sample_free(s);
        }
        assert_int_equal(rows, 100);
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

static int fail_at_20(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    if (ef_sample_identity(in).index == 20)
        return ef_map_ctx_fail(ctx, EF_ECALLBACK, "item 20 is bad");
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

static void test_destroy_after_error(void **state)
{
    (void)state;
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p = tu_pipeline("range:n=100000,bytes=8 | prefetch:4", 0);
        assert_int_equal(ef_pipeline_add_map(p, fail_at_20, NULL, "threads=4"),
                         EF_OK);
        tu_parse(p, "prefetch:depth=4");
        int rc;
        int n = 0;
        for (;;) {
            ef_sample *s = NULL;
            rc = ef_pipeline_next(p, &s);
            if (rc != EF_OK)
                break;
            ef_sample_free(s);
            n++;
        }
        assert_int_equal(rc, EF_ECALLBACK);
        assert_int_equal(n, 20);
        ef_pipeline_destroy(p);
    }
    /* and destroyed right after the failure happened upstream, before the
     * consumer has seen it */
    for (int r = 0; r < REPEATS; r++) {
        ef_pipeline *p = tu_pipeline("range:n=100000,bytes=8", 0);
        assert_int_equal(ef_pipeline_add_map(p, fail_at_20, NULL, "threads=4"),
                         EF_OK);
        tu_parse(p, "prefetch:depth=64");
        pull(p, 5);
        ef_pipeline_destroy(p);
    }
}

static void test_samples_outlive_pipeline(void **state)
{
    (void)state;
    ef_pipeline *p = tu_pipeline(
        "range:n=100,bytes=16 | map:fn=noop,threads=2 | echo:2 | prefetch:2",
        0);
    ef_sample *keep[6];
    for (int i = 0; i < 6; i++)
        keep[i] = tu_next(p);
    ef_tensor t = tu_field(keep[0], "data");
    ef_buffer *held = ef_buffer_retain(t.buffer);
    ef_pipeline_destroy(p);
    for (int i = 0; i < 6; i++) {
        ef_sample_id id = ef_sample_identity(keep[i]);
        assert_int_equal(id.index, i / 2);
        ef_tensor d = tu_field(keep[i], "data");
        const unsigned char *px = d.data;
        for (int j = 0; j < 16; j++)
            assert_int_equal(px[j], (unsigned char)((id.index + j) & 0xff));
        ef_sample_free(keep[i]);
    }
    /* a retained buffer outlives its samples (t.data points into it) */
    assert_int_equal(t.nbytes, 16);
    assert_int_equal(((const unsigned char *)t.data)[15], 15);
    ef_buffer_release(held);
}

static void test_many_short_pipelines(void **state)
{
    (void)state;
    /* start and stop threads many times */
    for (int r = 0; r < 20; r++) {
        ef_pipeline *p = tu_pipeline(
            "range:n=64 | map:fn=noop,threads=3 | prefetch:depth=2 | batch:4",
            (uint64_t)r);
        pull(p, r % 5);
        ef_pipeline_destroy(p);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_destroy_mid_stream_full_queues),
        cmocka_unit_test(test_destroy_mid_stream_shuffle_repeat_forever),
        cmocka_unit_test(test_destroy_while_throttled),
        cmocka_unit_test(test_destroy_before_next),
        cmocka_unit_test(test_destroy_after_end),
        cmocka_unit_test(test_destroy_after_error),
        cmocka_unit_test(test_samples_outlive_pipeline),
        cmocka_unit_test(test_many_short_pipelines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
