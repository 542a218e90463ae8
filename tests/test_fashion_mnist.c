/* SPDX-License-Identifier: Apache-2.0 */
/* The idx source on the real Fashion-MNIST files (gzip), checked byte for
 * byte against an independent decompression by gzip(1). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

#ifndef EF_FASHION_MNIST_DIR
#define EF_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

static void need_file(const char *path)
{
    if (access(path, R_OK) != 0)
        fail_msg("Fashion-MNIST file %s is missing: install it with "
                 "`apt-get install dataset-fashion-mnist` (or configure with "
                 "-DEF_FASHION_MNIST_DIR=...)",
                 path);
}

/* A gzip -dc pipe positioned after the IDX header; checks the header. */
static FILE *open_ref(const char *path, uint32_t magic, uint32_t count,
                      int ndim_after)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s'", path);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        fail_msg("cannot run gzip for the reference decompression of %s", path);
    unsigned char h[16];
    size_t hn = 8 + 4 * (size_t)ndim_after;
    if (fread(h, 1, hn, f) != hn)
        fail_msg("gzip -dc %s: short header", path);
    uint32_t v[4];
    for (size_t i = 0; i < hn / 4; i++)
        v[i] = (uint32_t)h[4 * i] << 24 | (uint32_t)h[4 * i + 1] << 16 |
               (uint32_t)h[4 * i + 2] << 8 | h[4 * i + 3];
    assert_int_equal(v[0], magic);
    assert_int_equal(v[1], count);
    for (int d = 0; d < ndim_after; d++)
        assert_int_equal(v[2 + d], 28);
    return f;
}

static void check_set(const char *prefix, int64_t n)
{
    char images[512], labels[512], spec[1200];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz",
             EF_FASHION_MNIST_DIR, prefix);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz",
             EF_FASHION_MNIST_DIR, prefix);
    need_file(images);
    need_file(labels);
    FILE *ri = open_ref(images, 0x00000803u, (uint32_t)n, 2);
    FILE *rl = open_ref(labels, 0x00000801u, (uint32_t)n, 0);

    snprintf(spec, sizeof spec, "idx:images=%s,labels=%s", images, labels);
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t per_label[10] = {0};
    unsigned char ref[784];
    int64_t i = 0;
    for (;; i++) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_END)
            break;
        if (rc != EF_OK)
            fail_msg("%s: item %lld: %s: %s", prefix, (long long)i,
                     ef_status_name(rc), ef_pipeline_error(p));
        if (i >= n) {
            ef_sample_free(s);
            fail_msg("%s: more than %lld samples", prefix, (long long)n);
        }
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i);
        ef_tensor im = tu_field(s, "image");
        if (im.dtype != EF_U8 || im.ndim != 2 || im.shape[0] != 28 ||
            im.shape[1] != 28 || im.nbytes != 784)
            fail_msg("%s item %lld: image %s ndim %d [%lld,%lld], expected "
                     "u8 [28,28]",
                     prefix, (long long)i, ef_dtype_name(im.dtype), im.ndim,
                     (long long)im.shape[0], (long long)im.shape[1]);
        assert_int_equal(fread(ref, 1, 784, ri), 784);
        if (memcmp(ref, im.data, 784) != 0)
            fail_msg("%s item %lld: image bytes differ from gzip -dc", prefix,
                     (long long)i);
        int c = fgetc(rl);
        assert_true(c >= 0 && c <= 9);
        int64_t label = tu_i64(s, "label");
        if (label != c)
            fail_msg("%s item %lld: label %lld, file says %d", prefix,
                     (long long)i, (long long)label, c);
        per_label[label]++;
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    pclose(ri);
    pclose(rl);
    assert_int_equal(i, n);
    for (int k = 0; k < 10; k++)
        if (per_label[k] != n / 10)
            fail_msg("%s: label %d appears %lld times, expected %lld", prefix,
                     k, (long long)per_label[k], (long long)(n / 10));
}

static void test_train(void **state)
{
    (void)state;
    check_set("train", 60000);
}

static void test_t10k(void **state)
{
    (void)state;
    check_set("t10k", 10000);
}

static void test_t10k_batched_f32(void **state)
{
    (void)state;
    char images[512], labels[512], spec[1300];
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz",
             EF_FASHION_MNIST_DIR);
    snprintf(labels, sizeof labels, "%s/t10k-labels-idx1-ubyte.gz",
             EF_FASHION_MNIST_DIR);
    need_file(images);
    need_file(labels);
    FILE *ri = open_ref(images, 0x00000803u, 10000, 2);
    unsigned char *ref = malloc(128 * 784);
    assert_non_null(ref);
    assert_int_equal(fread(ref, 1, 128 * 784, ri), 128 * 784);
    pclose(ri);

    snprintf(spec, sizeof spec,
             "idx:images=%s,labels=%s | map:fn=to_f32,threads=2 | "
             "batch:size=128,drop_remainder=true",
             images, labels);
    ef_pipeline *p = tu_pipeline(spec, 0);
    long batches = 0;
    for (ef_sample *s; (s = tu_next_or_end(p, spec)) != NULL;) {
        ef_tensor im = tu_field(s, "image"), lb = tu_field(s, "label");
        assert_int_equal(im.dtype, EF_F32);
        assert_int_equal(im.ndim, 3);
        assert_int_equal(im.shape[0], 128);
        assert_int_equal(im.shape[1], 28);
        assert_int_equal(im.shape[2], 28);
        assert_int_equal(im.nbytes, 128 * 784 * 4);
        assert_int_equal(lb.dtype, EF_I64); /* labels are not u8: unchanged */
        assert_int_equal(lb.shape[0], 128);
        if (batches == 0) {
            const float *f = im.data;
            for (int k = 0; k < 128 * 784; k++)
                if (fabsf(f[k] - (float)ref[k] / 255.0f) > 1e-6f)
                    fail_msg("to_f32: element %d is %g, expected %d/255", k,
                             (double)f[k], ref[k]);
        }
        ef_sample_free(s);
        batches++;
    }
    free(ref);
    assert_int_equal(batches, 10000 / 128);
    ef_pipeline_destroy(p);
}

static void test_t10k_shards(void **state)
{
    (void)state;
    /* three processes with shard=I/3 read every test image exactly once */
    char images[512], spec[700];
    snprintf(images, sizeof images, "%s/t10k-images-idx3-ubyte.gz",
             EF_FASHION_MNIST_DIR);
    need_file(images);
    unsigned char *seen = calloc(10000, 1);
    assert_non_null(seen);
    for (int part = 0; part < 3; part++) {
        snprintf(spec, sizeof spec, "idx:images=%s,shard=%d/3", images, part);
        ef_pipeline *p = tu_pipeline(spec, 0);
        ef_sample *s;
        int n = 0;
        while (ef_pipeline_next(p, &s) == EF_OK) {
            int64_t ix = ef_sample_identity(s).index;
            ef_sample_free(s);
            assert_true(ix >= 0 && ix < 10000 && ix % 3 == part && !seen[ix]);
            seen[ix] = 1;
            n++;
        }
        assert_int_equal(n, part == 0 ? 3334 : 3333);
        ef_pipeline_destroy(p);
    }
    for (int ix = 0; ix < 10000; ix++)
        assert_int_equal(seen[ix], 1);
    free(seen);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_train),
        cmocka_unit_test(test_t10k),
        cmocka_unit_test(test_t10k_batched_f32),
        cmocka_unit_test(test_t10k_shards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
