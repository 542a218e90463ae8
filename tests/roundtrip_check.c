/* SPDX-License-Identifier: Apache-2.0 */
/* Checks that a pipeline reading packed shards back (tar source, decode)
 * gives exactly the samples of an IDX data set: every image and label
 * byte-exact, each once, none missing. Used by the HTTP integration test.
 *
 * usage: roundtrip_check SPEC IMAGES_IDX LABELS_IDX [MIN_RETRIES]
 * Prints the count and the tar stage's retries; exits 1 on any mismatch. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echoflow/echoflow.h"

#define MAX_N 1000000

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "roundtrip_check: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static ef_pipeline *open_pipeline(const char *spec)
{
    ef_pipeline *p = NULL;
    if (ef_pipeline_create(&p) != EF_OK ||
        ef_pipeline_parse(p, spec) != EF_OK) {
        fprintf(stderr, "roundtrip_check: %s: %s\n", spec,
                p ? ef_pipeline_error(p) : "out of memory");
        ef_pipeline_destroy(p);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: roundtrip_check SPEC IMAGES LABELS "
                        "[MIN_RETRIES]\n");
        return 2;
    }
    long long min_retries = argc > 4 ? atoll(argv[4]) : 0;
    char ref_spec[4096];
    snprintf(ref_spec, sizeof ref_spec, "idx:images=%s,labels=%s", argv[2],
             argv[3]);
    ef_pipeline *ref = open_pipeline(ref_spec);
    if (!ref)
        return 1;
    /* the reference, held whole: image bytes and labels by index */
    size_t item = 0, n = 0;
    unsigned char *images = NULL;
    int64_t *labels = malloc(MAX_N * sizeof *labels);
    ef_sample *s;
    while (ef_pipeline_next(ref, &s) == EF_OK) {
        ef_tensor im, lb;
        ef_sample_get(s, "image", &im);
        ef_sample_get(s, "label", &lb);
        if (!images) {
            item = im.nbytes;
            images = malloc(MAX_N * item);
        }
        if (!images || !labels || n >= MAX_N || im.nbytes != item)
            return fail("%s: cannot hold the reference (%zu items)", argv[2],
                        n);
        memcpy(images + n * item, im.data, item);
        labels[n++] = *(const int64_t *)lb.data;
        ef_sample_free(s);
    }
    ef_pipeline_destroy(ref);

    ef_pipeline *p = open_pipeline(argv[1]);
    if (!p)
        return 1;
    unsigned char *seen = calloc(n ? n : 1, 1);
    size_t got = 0;
    int rc;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_tensor key, im, lb;
        if (ef_sample_get(s, "__key__", &key) != EF_OK ||
            ef_sample_get(s, "image", &im) != EF_OK ||
            ef_sample_get(s, "label", &lb) != EF_OK)
            return fail("%s: sample %lld lacks __key__, image or label",
                        argv[1], (long long)got);
        char text[32] = {0};
        memcpy(text, key.data, key.nbytes < 31 ? key.nbytes : 31);
        char *end;
        long long ix = strtoll(text, &end, 10);
        if (*end || ix < 0 || (size_t)ix >= n)
            return fail("key '%s' is not an index of the reference (%zu)", text,
                        n);
        if (seen[ix])
            return fail("sample %lld came twice", ix);
        seen[ix] = 1;
        if (im.dtype != EF_U8 || im.nbytes != item ||
            memcmp(im.data, images + (size_t)ix * item, item) != 0)
            return fail("image of sample %lld differs from the IDX file", ix);
        if (lb.dtype != EF_I64 || *(const int64_t *)lb.data != labels[ix])
            return fail("label of sample %lld differs from the IDX file", ix);
        ef_sample_free(s);
        got++;
    }
    if (rc != EF_END)
        return fail("reading failed: %s", ef_pipeline_error(p));
    if (got != n)
        return fail("read back %zu samples of %zu", got, n);
    double retries = 0;
    ef_stage_stats st;
    if (ef_pipeline_stage_stats(p, 0, &st) == EF_OK)
        ef_stage_stats_extra(&st, "retries", &retries);
    printf("roundtrip_check: %zu samples byte-exact, none twice, none "
           "missing; %.0f retries\n",
           got, retries);
    if (retries < (double)min_retries)
        return fail("expected at least %lld retries (connections cut)",
                    min_retries);
    ef_pipeline_destroy(p);
    free(seen);
    free(images);
    free(labels);
    return 0;
}
