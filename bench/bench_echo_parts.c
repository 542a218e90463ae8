/* SPDX-License-Identifier: Apache-2.0 */
/* What one echoed item is made of, each part timed alone in a loop:
 *
 *   build/bench/bench_echo_parts [ITERATIONS] [REPEATS]
 *
 * the two clocks a pull between stages can be timed with (ef__now_ns is
 * CLOCK_MONOTONIC, ef__timer_ns the one the pulls use), a copy of a
 * one-field sample made and freed with malloc (ef_sample_clone) and with
 * the echo stage's free list, and malloc + free of a header's size alone.
 * Internal functions, so it builds against src/ like the tests. Median of
 * REPEATS loops of ITERATIONS each, ns per operation. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/clock.h"
#include "core/sample.h"

static volatile uint64_t sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { NOW, TIMER, CLONE, POOL, MALLOC, NPARTS };
static const char *const names[NPARTS] = {
    "ef__now_ns (CLOCK_MONOTONIC)", "ef__timer_ns (per-pull clock)",
    "clone + free, malloc'd header", "clone + free, pooled header",
    "malloc + free of a header's size"};

static double run(int part, long n, const ef_sample *s, ef__sample_pool *pool)
{
    uint64_t acc = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        switch (part) {
        case NOW:
            acc += ef__now_ns();
            break;
        case TIMER:
            acc += ef__timer_ns();
            break;
        case CLONE:
        case POOL: {
            ef_sample *c = part == CLONE ? ef_sample_clone(s)
                                         : ef__sample_pool_clone(pool, s);
            if (!c)
                abort();
            c->id.echo_copy = (int32_t)i;
            acc += (uint64_t)c->id.echo_copy;
            ef_sample_free(c);
            break;
        }
        default: {
            void *p = malloc(sizeof(ef_sample));
            acc += (uint64_t)(uintptr_t)p;
            free(p);
        }
        }
    }
    sink = acc;
    return (now_s() - t0) / (double)n * 1e9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 5000000;
    int repeats = argc > 2 ? atoi(argv[2]) : 7;
    if (n < 1000 || repeats < 1 || repeats > 64) {
        fprintf(stderr, "usage: bench_echo_parts [ITERATIONS >= 1000] "
                        "[REPEATS 1..64]\n");
        return 2;
    }
    /* like the range source's samples: one i64 scalar field */
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    ef__sample_pool *pool = ef__sample_pool_new();
    if (!s || !pool ||
        ef_sample_add_new(s, "index", EF_I64, 0, NULL, NULL) != EF_OK)
        return 1;
    (void)ef__timer_ns(); /* calibrated outside the loops */
    printf("%-34s %8s\n", "part", "ns/op");
    for (int part = 0; part < NPARTS; part++) {
        double t[64];
        for (int r = 0; r < repeats; r++)
            t[r] = run(part, n, s, pool);
        qsort(t, (size_t)repeats, sizeof t[0], cmp_double);
        printf("%-34s %8.1f\n", names[part], t[repeats / 2]);
    }
    ef_sample_free(s);
    ef__sample_pool_release(pool);
    return 0;
}
