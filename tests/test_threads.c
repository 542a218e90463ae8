/* SPDX-License-Identifier: Apache-2.0 */
/* What the header promises other threads while a pipeline runs: reading
 * its stats (pipeline, every stage, the loss counts and messages) and
 * stopping it. Run under TSan, a data race here fails the build. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

typedef struct {
    ef_pipeline *p;
    atomic_int done;
    atomic_long reads;
} watcher;

/* Reads everything a monitor would, as fast as it can, until told. */
static void *watch(void *arg)
{
    watcher *w = arg;
    while (!atomic_load(&w->done)) {
        ef_pipeline_stats ps;
        assert_int_equal(ef_pipeline_stats_get(w->p, &ps), EF_OK);
        assert_true(ps.elapsed_s >= 0 && ps.startup_s >= 0);
        for (int i = 0; i < ef_pipeline_stage_count(w->p); i++) {
            ef_stage_stats st;
            assert_int_equal(ef_pipeline_stage_stats(w->p, i, &st), EF_OK);
        }
        char why[128];
        ef_pipeline_skipped(w->p, why, sizeof why);
        ef_pipeline_abandoned(w->p, why, sizeof why);
        atomic_fetch_add(&w->reads, 1);
    }
    return NULL;
}

static void test_stats_from_another_thread(void **state)
{
    (void)state;
    static const char *specs[] = {
        "range:n=20000,bytes=16 | prefetch | shuffle:100 | "
        "echo:factor=auto,max=4 | batch:32 | prefetch",
        "range:n=20000,bytes=16 | echo:factor=2,shuffle=64 | batch:16",
    };
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        watcher w = {.p = tu_pipeline(specs[k], 3)};
        atomic_init(&w.done, 0);
        atomic_init(&w.reads, 0);
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, watch, &w), 0);
        /* the watcher reads before, during and after the run: wait for its
         * first read before pulling, and for one more after the end */
        while (atomic_load(&w.reads) == 0)
            sched_yield();
        long n = tu_drain(w.p);
        assert_true(n > 0);
        long at_end = atomic_load(&w.reads);
        while (atomic_load(&w.reads) == at_end)
            sched_yield();
        atomic_store(&w.done, 1);
        pthread_join(t, NULL);
        ef_pipeline_destroy(w.p);
    }
}

static void *stop_later(void *arg)
{
    ef_pipeline *p = arg;
    ef_pipeline_stats ps;
    do /* once the consumer is under way */
        ef_pipeline_stats_get(p, &ps);
    while (ps.items < 100);
    ef_pipeline_stop(p);
    return NULL;
}

static void test_stop_from_another_thread(void **state)
{
    (void)state;
    ef_pipeline *p =
        tu_pipeline("range:n=100000000 | prefetch | echo:factor=auto", 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stop_later, p), 0);
    ef_sample *s;
    int rc;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK)
        ef_sample_free(s);
    pthread_join(t, NULL);
    assert_int_equal(rc, EF_ECANCELED);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_true(ps.items >= 100);
    ef_pipeline_destroy(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stats_from_another_thread),
        cmocka_unit_test(test_stop_from_another_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
