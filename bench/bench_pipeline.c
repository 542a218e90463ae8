/* Throughput of the pipeline engine and the echo stage's cost per item.
 *
 *   build/bench/bench_pipeline [ITEMS] [REPEATS]
 *
 * Every configuration runs REPEATS times in one process; the table shows
 * the median. The echo stage's own time per item is measured from the
 * stage stats: the time its downstream spent inside echo's next() minus
 * the time echo spent inside its upstream's next(), divided by the items
 * it emitted. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echoflow/echoflow.h"

typedef struct {
    double seconds;
    double items;
    double echo_self_ns; /* per emitted item; 0 without an echo stage */
} result;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int run(const char *spec, result *r)
{
    ef_pipeline *p;
    ef_sample *s;
    int rc;
    if (ef_pipeline_create(&p) != EF_OK)
        return -1;
    if (ef_pipeline_parse(p, spec) != EF_OK) {
        fprintf(stderr, "bench: %s\n", ef_pipeline_error(p));
        ef_pipeline_destroy(p);
        return -1;
    }
    double t0 = now_s();
    uint64_t n = 0;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_tensor t;
        ef_sample_get(s, "index", &t); /* touch the batch like a consumer */
        n += (uint64_t)t.shape[0];
        ef_sample_free(s);
    }
    r->seconds = now_s() - t0;
    r->items = (double)n;
    r->echo_self_ns = 0;
    for (int i = 1; i + 1 < ef_pipeline_stage_count(p); i++) {
        ef_stage_stats st, down;
        ef_pipeline_stage_stats(p, i, &st);
        ef_pipeline_stage_stats(p, i + 1, &down);
        if (strcmp(st.name, "echo") == 0 && st.items_out > 0)
            r->echo_self_ns =
                (down.wait_up_s - st.wait_up_s) * 1e9 / (double)st.items_out;
    }
    ef_pipeline_destroy(p);
    return rc == EF_END ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over `repeats` runs of items/s and echo self time. */
static int measure(const char *spec, int repeats, double *rate, double *echo_ns)
{
    double rates[64], selfs[64];
    for (int i = 0; i < repeats; i++) {
        result r;
        if (run(spec, &r) != 0)
            return -1;
        rates[i] = r.items / r.seconds;
        selfs[i] = r.echo_self_ns;
    }
    qsort(rates, (size_t)repeats, sizeof rates[0], cmp_double);
    qsort(selfs, (size_t)repeats, sizeof selfs[0], cmp_double);
    *rate = rates[repeats / 2];
    *echo_ns = selfs[repeats / 2];
    return 0;
}

int main(int argc, char **argv)
{
    long items = argc > 1 ? atol(argv[1]) : 2000000;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    if (items < 1000 || repeats < 1 || repeats > 64) {
        fprintf(stderr,
                "usage: bench_pipeline [ITEMS >= 1000] [REPEATS 1..64]\n");
        return 2;
    }
    char specs[5][256];
    snprintf(specs[0], sizeof specs[0], "range:n=%ld | batch:128", items);
    snprintf(specs[1], sizeof specs[1], "range:n=%ld | echo:1 | batch:128",
             items);
    snprintf(specs[2], sizeof specs[2], "range:n=%ld | echo:4 | batch:128",
             items / 4);
    snprintf(specs[3], sizeof specs[3],
             "range:n=%ld | echo:4,shuffle=1000 | batch:128", items / 4);
    snprintf(specs[4], sizeof specs[4],
             "range:n=%ld | map:fn=noop,threads=2 | batch:128 | prefetch",
             items);
    printf("echoflow %s, %ld items out per run, median of %d runs\n\n",
           ef_version_string(), items, repeats);
    printf("%-58s %14s %12s %14s\n", "pipeline", "items/s", "ns/item",
           "echo self ns");
    for (int i = 0; i < 5; i++) {
        double rate, echo_ns;
        if (measure(specs[i], repeats, &rate, &echo_ns) != 0)
            return 1;
        printf("%-58s %14.0f %12.1f ", specs[i], rate, 1e9 / rate);
        if (echo_ns > 0)
            printf("%14.1f\n", echo_ns);
        else
            printf("%14s\n", "-");
    }
    return 0;
}
