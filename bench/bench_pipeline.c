/* SPDX-License-Identifier: Apache-2.0 */
/* Throughput of the pipeline engine and the echo stage's cost per item.
 *
 *   build/bench/bench_pipeline [ITEMS] [REPEATS] [MATCH]
 *
 * With MATCH, only the pipelines whose spec contains it run (for example
 * `shuffle=` for the echo stage's copy spreading alone).
 * Every configuration runs REPEATS times in one process; the table shows
 * the median. The echo stage's own time per item is measured from the
 * stage stats: the time its downstream spent inside echo's next() minus
 * the time echo spent inside its upstream's next(), divided by the items
 * it emitted.
 *
 * A second table shows what the map's run length is worth when it is
 * wrong both ways, against run=auto: cheap items handed over one at a
 * time (run=1), and slow items (WORK_US of work each, the callback
 * `work`) in long runs (run=64), where the first item waits for its whole
 * run. And the same for inline (map.c): tiny items kept on the workers
 * (inline=never), slow ones all on the consumer's thread (inline=always).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "echoflow/echoflow.h"

typedef struct {
    double seconds;
    double items;
    double echo_self_ns; /* per emitted item; 0 without an echo stage */
    double first_s;      /* until the first batch */
} result;

/* The slow items' work, a busy wait (a decode's worth of CPU). */
#define WORK_US 200

static int work(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) <
           WORK_US * 1000L);
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

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
    /* a name bound must be used: only the specs that name it */
    if ((strstr(spec, "fn=work") &&
         ef_pipeline_bind_map(p, "work", work, NULL) != EF_OK) ||
        ef_pipeline_parse(p, spec) != EF_OK) {
        fprintf(stderr, "bench: %s\n", ef_pipeline_error(p));
        ef_pipeline_destroy(p);
        return -1;
    }
    double t0 = now_s();
    uint64_t n = 0;
    r->first_s = 0;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        if (n == 0)
            r->first_s = now_s() - t0;
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

/* Medians over `repeats` runs of items/s, echo self time and the time to
 * the first batch. */
static int measure(const char *spec, int repeats, double *rate, double *echo_ns,
                   double *first_s)
{
    double rates[64], selfs[64], firsts[64];
    for (int i = 0; i < repeats; i++) {
        result r;
        if (run(spec, &r) != 0)
            return -1;
        rates[i] = r.items / r.seconds;
        selfs[i] = r.echo_self_ns;
        firsts[i] = r.first_s;
    }
    qsort(rates, (size_t)repeats, sizeof rates[0], cmp_double);
    qsort(selfs, (size_t)repeats, sizeof selfs[0], cmp_double);
    qsort(firsts, (size_t)repeats, sizeof firsts[0], cmp_double);
    *rate = rates[repeats / 2];
    *echo_ns = selfs[repeats / 2];
    *first_s = firsts[repeats / 2];
    return 0;
}

int main(int argc, char **argv)
{
    long items = argc > 1 ? atol(argv[1]) : 2000000;
    int repeats = argc > 2 ? atoi(argv[2]) : 5;
    const char *match = argc > 3 ? argv[3] : "";
    if (items < 1000 || repeats < 1 || repeats > 64 || argc > 4) {
        fprintf(stderr, "usage: bench_pipeline [ITEMS >= 1000] [REPEATS 1..64] "
                        "[MATCH]\n");
        return 2;
    }
    enum { NSPECS = 7, NRUNS = 7 };
    char specs[NSPECS][256], runs[NRUNS][256];
    snprintf(specs[0], sizeof specs[0], "range:n=%ld | batch:128", items);
    snprintf(specs[1], sizeof specs[1], "range:n=%ld | echo:1 | batch:128",
             items);
    snprintf(specs[2], sizeof specs[2], "range:n=%ld | echo:4 | batch:128",
             items / 4);
    snprintf(specs[3], sizeof specs[3],
             "range:n=%ld | echo:4,shuffle=1000 | batch:128", items / 4);
    for (int t = 1; t <= 2; t++)
        snprintf(specs[3 + t], sizeof specs[3 + t],
                 "range:n=%ld | map:fn=noop,threads=%d | batch:128 | prefetch",
                 items, t);
    /* the map without the batches' hand-off to another thread */
    snprintf(specs[6], sizeof specs[6],
             "range:n=%ld | map:fn=noop,threads=2 | batch:128", items);
    /* tiny items one at a time, against auto */
    for (int k = 0; k < 2; k++)
        snprintf(runs[k], sizeof runs[k],
                 "range:n=%ld | map:fn=noop,threads=2,run=%s | batch:128 | "
                 "prefetch",
                 items, k ? "1" : "auto");
    /* slow items in long runs, against auto: a pass of about a second */
    long slow = 2 * 1000000L / WORK_US;
    for (int k = 0; k < 2; k++)
        snprintf(runs[2 + k], sizeof runs[2 + k],
                 "range:n=%ld | map:fn=work,threads=2,run=%s | batch:8", slow,
                 k ? "64" : "auto");
    /* the way a map runs, wrong both ways: tiny items on the workers
     * (against the rows above, where auto runs them inline), slow items
     * on the consumer alone (against work with run=auto, on workers) */
    for (int t = 1; t <= 2; t++)
        snprintf(runs[3 + t], sizeof runs[3 + t],
                 "range:n=%ld | map:fn=noop,threads=%d,inline=never | "
                 "batch:128 | prefetch",
                 items, t);
    snprintf(runs[6], sizeof runs[6],
             "range:n=%ld | map:fn=work,threads=2,inline=always | batch:8",
             slow);
    printf("echoflow %s, %ld items out per run, median of %d runs\n\n",
           ef_version_string(), items, repeats);
    printf("%-62s %14s %12s %14s\n", "pipeline", "items/s", "ns/item",
           "echo self ns");
    for (int i = 0; i < NSPECS; i++) {
        double rate, echo_ns, first_s;
        if (!strstr(specs[i], match))
            continue;
        if (measure(specs[i], repeats, &rate, &echo_ns, &first_s) != 0)
            return 1;
        printf("%-62s %14.0f %12.1f ", specs[i], rate, 1e9 / rate);
        if (echo_ns > 0)
            printf("%14.1f\n", echo_ns);
        else
            printf("%14s\n", "-");
    }
    printf("\nrun lengths and inline wrong both ways (work: %d us of CPU per "
           "item)\n\n",
           WORK_US);
    printf("%-62s %14s %12s %14s\n", "pipeline", "items/s", "ns/item",
           "first batch ms");
    for (int i = 0; i < NRUNS; i++) {
        double rate, echo_ns, first_s;
        if (!strstr(runs[i], match))
            continue;
        if (measure(runs[i], repeats, &rate, &echo_ns, &first_s) != 0)
            return 1;
        printf("%-62s %14.0f %12.1f %14.2f\n", runs[i], rate, 1e9 / rate,
               first_s * 1e3);
    }
    return 0;
}
