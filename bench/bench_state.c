/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint sizes and times: for each pipeline, pulls K items, saves the
 * state, and restores it into a new pipeline; reports the state's size,
 * the save, the restore up to the first item, and, to compare, a cold
 * start up to the first item and the time the K items took to pull (what
 * replaying from the start would cost).
 *
 *   build/bench/bench_state [FASHION_MNIST_DIR]
 *
 * Each figure is the median of 5 rounds in one process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echoflow/echoflow.h"

#define ROUNDS 5

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static ef_pipeline *build(const char *spec)
{
    ef_pipeline *p;
    if (ef_pipeline_create(&p) != EF_OK || ef_pipeline_set_seed(p, 1) != EF_OK ||
        ef_pipeline_parse(p, spec) != EF_OK) {
        fprintf(stderr, "bench_state: %s: %s\n", spec, ef_pipeline_error(p));
        exit(1);
    }
    return p;
}

static void pull(ef_pipeline *p, long n)
{
    for (long i = 0; i < n; i++) {
        ef_sample *s;
        int rc = ef_pipeline_next(p, &s);
        if (rc != EF_OK) {
            fprintf(stderr, "bench_state: next = %s: %s\n", ef_status_name(rc),
                    ef_pipeline_error(p));
            exit(1);
        }
        ef_sample_free(s);
    }
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v)
{
    qsort(v, ROUNDS, sizeof *v, cmp);
    return v[ROUNDS / 2];
}

static void measure(const char *name, const char *spec, long k)
{
    double cold[ROUNDS], run[ROUNDS], save[ROUNDS], restore[ROUNDS];
    size_t size = 0;
    for (int r = 0; r < ROUNDS; r++) {
        double t0 = now_s();
        ef_pipeline *p = build(spec);
        pull(p, 1);
        cold[r] = now_s() - t0;
        pull(p, k - 1);
        run[r] = now_s() - t0;
        t0 = now_s();
        void *buf = NULL;
        if (ef_pipeline_save_state(p, NULL, 0, &size) != EF_OK ||
            !(buf = malloc(size)) ||
            ef_pipeline_save_state(p, buf, size, &size) != EF_OK) {
            fprintf(stderr, "bench_state: save: %s\n", ef_pipeline_error(p));
            exit(1);
        }
        save[r] = now_s() - t0;
        ef_pipeline_destroy(p);
        t0 = now_s();
        ef_pipeline *q = build(spec);
        if (ef_pipeline_restore_state(q, buf, size) != EF_OK) {
            fprintf(stderr, "bench_state: restore: %s\n",
                    ef_pipeline_error(q));
            exit(1);
        }
        pull(q, 1);
        restore[r] = now_s() - t0;
        ef_pipeline_destroy(q);
        free(buf);
    }
    printf("| %s | %ld | %.1f KiB | %.2f ms | %.0f ms | %.0f ms | %.0f ms |\n",
           name, k, (double)size / 1024, 1e3 * median(save),
           1e3 * median(restore), 1e3 * median(cold), 1e3 * median(run));
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "/usr/share/datasets/fashion-mnist";
    char idx[1024], spec[2048];
    snprintf(idx, sizeof idx,
             "idx:images=%s/train-images-idx3-ubyte.gz,"
             "labels=%s/train-labels-idx1-ubyte.gz",
             dir, dir);
    printf("| pipeline | items before the save | state | save | restore to "
           "the first item | cold start to the first item | pulling the "
           "items before the save |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    snprintf(spec, sizeof spec,
             "%s | repeat | shuffle:buffer=10000 | echo:factor=auto,pool=64 | "
             "batch:size=64 | prefetch:4",
             idx);
    measure("Fashion-MNIST, `shuffle:10000 \\| echo:factor=auto,pool=64 "
            "\\| batch:64 \\| prefetch:4`, mid-epoch",
            spec, 470);
    snprintf(spec, sizeof spec,
             "%s | shuffle:buffer=10000 | echo:factor=2,shuffle=1000 | "
             "map:fn=to_f32,threads=2 | batch:size=64 | prefetch:2",
             idx);
    measure("Fashion-MNIST, `shuffle:10000 \\| echo:2,shuffle=1000 \\| "
            "map:to_f32,threads=2 \\| batch:64 \\| prefetch:2`, mid-epoch",
            spec, 470);
    measure("range, `shuffle:10000 \\| echo:factor=3,shuffle=1000 \\| "
            "batch:64`",
            "range:n=1000000,bytes=64 | shuffle:buffer=10000 | "
            "echo:factor=3,shuffle=1000 | batch:size=64",
            5000);
    return 0;
}
