/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints: a pipeline saved after k items and restored into a new one
 * delivers exactly what the uninterrupted run delivers after item k,
 * identity and bytes; bad states give clear errors and change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "pipeline/state.h"
#include "state_test_util.h"

static ef_pipeline *seeded(const char *spec, const void *arg)
{
    (void)arg;
    return tu_pipeline(spec, 7);
}

/* Resumes at each cut equal the whole run (see tu_check_resume). */
static void check_resume(const char *spec, const char *restore_spec,
                         const size_t *cuts, size_t ncuts)
{
    tu_check_resume(seeded, NULL, spec, restore_spec, cuts, ncuts, 20000);
}

static const size_t cuts[] = {0, 1, 5, 99, 100, 101, 250, 777, 1999, 5000};
#define NCUTS (sizeof cuts / sizeof cuts[0])

static void test_shuffle_map_batch(void **state)
{
    (void)state;
    const char *spec = "range:n=1000,bytes=8 | shuffle:buffer=100 | "
                       "map:fn=noop,threads=3 | batch:size=7 | prefetch:depth=3";
    check_resume(spec, spec, cuts, NCUTS);
    /* threads and depth are speed settings: a state restores under others */
    check_resume(spec,
                 "range:n=1000,bytes=8 | shuffle:buffer=100 | "
                 "map:fn=noop,threads=1 | batch:size=7 | prefetch:depth=9",
                 cuts, NCUTS);
}

static void test_repeat_echo_shuffle(void **state)
{
    (void)state;
    const char *spec = "range:n=300,bytes=4 | repeat:count=3 | "
                       "shuffle:buffer=50 | echo:factor=2.5,shuffle=20 | "
                       "map:fn=to_f32,threads=2 | batch:size=4";
    check_resume(spec, spec, cuts, NCUTS);
}

static void test_echo_then_take(void **state)
{
    (void)state;
    const char *spec = "range:n=400,bytes=3 | echo:factor=3 | prefetch:2 | "
                       "take:count=1000 | repeat:count=2";
    check_resume(spec, spec, cuts, NCUTS);
}

static void test_batch_echo(void **state)
{
    (void)state;
    const char *spec = "range:n=500,bytes=16 | shuffle:buffer=64 | "
                       "batch:size=8 | echo:factor=2,shuffle=4 | "
                       "prefetch:depth=4 | repeat:count=2";
    check_resume(spec, spec, cuts, NCUTS);
}

/* ---- automatic echoing ------------------------------------------- */

/* Auto echoing depends on timing, but not the fresh items: after a
 * restore they go on exactly where they stopped, and the pool comes back
 * as it was (a second save, before any next(), gives the same bytes). */
static void test_auto_echo(void **state)
{
    (void)state;
    enum { N = 3000, MAX = 4 * N };
    const char *spec = "range:n=3000,bytes=32 | shuffle:buffer=200 | "
                       "map:fn=noop,threads=2 | echo:factor=auto,max=4,pool=64";
    tu_seen *order = malloc(N * sizeof *order), *got = malloc(MAX * sizeof *got);
    assert_non_null(order);
    assert_non_null(got);
    ef_pipeline *p = tu_pipeline(
        "range:n=3000,bytes=32 | shuffle:buffer=200 | map:fn=noop", 3);
    assert_int_equal(tu_pull_seen(p, order, N, "pipeline"), N); /* the fresh items' order */
    ef_pipeline_destroy(p);
    static const size_t auto_cuts[] = {0, 1, 17, 200, 2500};
    for (size_t c = 0; c < sizeof auto_cuts / sizeof auto_cuts[0]; c++) {
        size_t k = auto_cuts[c], fresh = 0;
        p = tu_pipeline(spec, 3);
        assert_int_equal(tu_pull_seen(p, got, k, spec), k);
        for (size_t i = 0; i < k; i++)
            fresh += got[i].id.echo_copy == 0;
        size_t size, size2;
        void *saved = tu_save(p, &size);
        ef_pipeline_destroy(p);
        ef_pipeline *q = tu_pipeline(spec, 3);
        assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
        void *again = tu_save(q, &size2);
        assert_int_equal(size, size2);
        assert_memory_equal(saved, again, size);
        size_t n = tu_pull_seen(q, got, MAX, spec), later = 0;
        for (size_t i = 0; i < n; i++) {
            if (got[i].id.echo_copy != 0)
                continue;
            assert_true(fresh + later < N);
            if (memcmp(&got[i].id, &order[fresh + later].id,
                       sizeof got[i].id) ||
                got[i].hash != order[fresh + later].hash)
                fail_msg("resumed after %zu items (%zu fresh): fresh item "
                         "%zu is index %lld, expected %lld",
                         k, fresh, fresh + later, (long long)got[i].id.index,
                         (long long)order[fresh + later].id.index);
            later++;
        }
        assert_int_equal(fresh + later, N);
        ef_pipeline_destroy(q);
        free(saved);
        free(again);
    }
    free(order);
    free(got);
}

/* ---- errors -------------------------------------------------------- */

static void *saved_after(const char *spec, uint64_t seed, size_t k,
                         size_t *size)
{
    ef_pipeline *p = tu_pipeline(spec, seed);
    tu_seen junk[64];
    assert_int_equal(tu_pull_seen(p, junk, k, "pipeline"), k);
    void *buf = tu_save(p, size);
    ef_pipeline_destroy(p);
    return buf;
}

/* Restoring `state` into a pipeline of `spec` fails with `status` and a
 * message holding `needle`; the pipeline is untouched (it runs from the
 * start) unless the failure came after the checks. */
static void expect_refused(const char *spec, uint64_t seed, const void *state,
                           size_t size, int status, const char *needle)
{
    ef_pipeline *q = tu_pipeline(spec, seed);
    int rc = ef_pipeline_restore_state(q, state, size);
    if (rc != status || !strstr(ef_pipeline_error(q), needle))
        fail_msg("restore = %s (%s), expected %s with \"%s\"",
                 ef_status_name(rc), ef_pipeline_error(q),
                 ef_status_name(status), needle);
    ef_sample *s = tu_next(q);
    assert_int_equal(ef_sample_identity(s).index, 0);
    ef_sample_free(s);
    ef_pipeline_destroy(q);
}

static void test_bad_states(void **state)
{
    (void)state;
    const char *spec = "range:n=100,bytes=4 | echo:factor=2 | batch:size=3";
    size_t size;
    unsigned char *good = saved_after(spec, 5, 7, &size);
    unsigned char *bad = malloc(size + 8);
    assert_non_null(bad);

    memcpy(bad, good, size);
    bad[size / 2] ^= 0x40;
    expect_refused(spec, 5, bad, size, EF_EFORMAT, "checksum mismatch");
    for (size_t cut = 0; cut < size; cut += size / 7 + 1)
        expect_refused(spec, 5, good, cut, EF_EFORMAT, "state: ");
    memcpy(bad, good, size);
    memset(bad + size, 0, 8);
    expect_refused(spec, 5, bad, size + 8, EF_EFORMAT, "truncated or padded");
    memcpy(bad, good, size);
    bad[4] = 9;
    expect_refused(spec, 5, bad, size, EF_EFORMAT, "format version 9");
    memcpy(bad, "PNG!", 4);
    expect_refused(spec, 5, bad, size, EF_EFORMAT, "not an echoflow");

    /* another pipeline: the message names the first stage that differs */
    expect_refused("range:n=100,bytes=4 | echo:factor=3 | batch:size=3", 5,
                   good, size, EF_ESPEC,
                   "stage 1 'echo' differs: the state has options "
                   "'factor=2,shuffle=0,max=8,pool=64,policy=uniform,mix=0'");
    expect_refused("range:n=100,bytes=4 | shuffle:9 | batch:size=3", 5, good,
                   size, EF_ESPEC,
                   "stage 1 differs: the state has 'echo', the pipeline "
                   "'shuffle'");
    expect_refused("range:n=100,bytes=4 | echo:factor=2", 5, good, size,
                   EF_ESPEC, "pipeline of 3 stages, this one has 2");
    expect_refused(spec, 6, good, size, EF_ESPEC,
                   "saved with seed 5, the pipeline has seed 6");

    /* restore only before the first next() */
    ef_pipeline *q = tu_pipeline(spec, 5);
    ef_sample_free(tu_next(q));
    assert_int_equal(ef_pipeline_restore_state(q, good, size), EF_ESTATE);
    assert_non_null(strstr(ef_pipeline_error(q), "before its first next()"));
    /* a buffer too small for the state */
    size_t need;
    assert_int_equal(ef_pipeline_save_state(q, NULL, 0, &need), EF_OK);
    assert_int_equal(ef_pipeline_save_state(q, bad, need - 1, &need),
                     EF_EINVAL);
    assert_non_null(strstr(ef_pipeline_error(q), "the state needs"));
    assert_int_equal(ef_pipeline_save_state(NULL, NULL, 0, &need), EF_EINVAL);
    assert_int_equal(ef_pipeline_restore_state(q, NULL, 4), EF_EINVAL);
    ef_pipeline_destroy(q);
    free(good);
    free(bad);
}

static int no_source(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)user;
    (void)epoch;
    (void)block;
    (void)out;
    return EF_END;
}

static void test_unsaveable(void **state)
{
    (void)state;
    size_t size;
    ef_pipeline *p = tu_pipeline("range:n=10 | map:fn=noop,ordered=false", 1);
    ef_sample_free(tu_next(p));
    assert_int_equal(ef_pipeline_save_state(p, NULL, 0, &size),
                     EF_EUNSUPPORTED);
    assert_non_null(strstr(ef_pipeline_error(p), "map with ordered=false"));
    ef_pipeline_destroy(p);

    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_add_source(p, no_source, NULL, NULL), EF_OK);
    assert_int_equal(ef_pipeline_save_state(p, NULL, 0, &size),
                     EF_EUNSUPPORTED);
    assert_non_null(strstr(ef_pipeline_error(p), "C callback source"));
    ef_pipeline_destroy(p);
}

/* ---- Fashion-MNIST ------------------------------------------------- */

#define FMNIST(set)                                                            \
    "idx:images=" EF_FASHION_MNIST_DIR "/" set "-images-idx3-ubyte.gz,"        \
    "labels=" EF_FASHION_MNIST_DIR "/" set "-labels-idx1-ubyte.gz"

/* The training set mid-epoch behind a shuffle of 10,000 and an automatic
 * echo's pool of 64: the state stays small (identities, not images). */
static void test_fashion_mnist_state_size(void **state)
{
    (void)state;
    const char *spec = FMNIST("train") " | repeat | shuffle:buffer=10000 | "
                                       "echo:factor=auto,pool=64 | "
                                       "batch:size=64 | prefetch:4";
    ef_pipeline *p = tu_pipeline(spec, 11);
    tu_seen junk[512];
    assert_int_equal(tu_pull_seen(p, junk, 500, "pipeline"), 500);
    size_t size;
    void *saved = tu_save(p, &size);
    ef_pipeline_destroy(p);
    if (size >= 256 * 1024)
        fail_msg("state of %zu bytes, expected under 256 KiB", size);
    ef_pipeline *q = tu_pipeline(spec, 11);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(tu_pull_seen(q, junk, 10, "pipeline"), 10);
    ef_pipeline_destroy(q);
    free(saved);
}

static void test_fashion_mnist_exact(void **state)
{
    (void)state;
    const char *spec = FMNIST("t10k") " | shuffle:buffer=1000 | "
                                      "echo:factor=2,shuffle=100 | "
                                      "map:fn=to_f32,threads=2 | "
                                      "batch:size=32 | prefetch:2";
    static const size_t fm_cuts[] = {0, 3, 312, 600};
    check_resume(spec, spec, fm_cuts, sizeof fm_cuts / sizeof fm_cuts[0]);
}

/* Echoing before augmentation: every copy is augmented anew, keyed by its
 * identity, so a held copy made again is augmented the same way. */
static void test_fashion_mnist_augment(void **state)
{
    (void)state;
    const char *spec = FMNIST("t10k") " | shuffle:buffer=500 | "
                                      "echo:factor=3,shuffle=200 | "
                                      "random_crop:pad=2,threads=2 | "
                                      "flip:p=0.5 | batch:size=16 | take:400";
    static const size_t aug_cuts[] = {1, 77, 399};
    check_resume(spec, spec, aug_cuts, sizeof aug_cuts / sizeof aug_cuts[0]);
}

/* A payload cut short inside a stage, sealed again so that the checksum
 * holds: the parser's message names that stage and the byte, and the
 * pipeline still runs from its start. */
static void test_damaged_payload_names_the_stage(void **state)
{
    (void)state;
    const char *spec = "range:n=50,bytes=4 | shuffle:buffer=8 | batch:size=3";
    ef_pipeline *p = tu_pipeline(spec, 7);
    tu_seen got[20];
    assert_int_equal(tu_pull_seen(p, got, 4, "pipeline"), 4);
    size_t size;
    unsigned char *saved = tu_save(p, &size);
    ef_pipeline_destroy(p);
    size_t n = size - EF__STATE_HEADER - 1; /* the last byte gone */
    unsigned char *cut = malloc(EF__STATE_HEADER + n);
    assert_non_null(cut);
    memcpy(cut + EF__STATE_HEADER, saved + EF__STATE_HEADER, n);
    ef__state_seal(cut, cut + EF__STATE_HEADER, n);

    ef_pipeline *q = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(q, cut, EF__STATE_HEADER + n),
                     EF_EFORMAT);
    const char *msg = ef_pipeline_error(q);
    if (!strstr(msg, "state: stage 2 'batch': ") || !strstr(msg, "at byte"))
        fail_msg("message: %s", msg);
    assert_int_equal(tu_pull_seen(q, got, 20, "pipeline"), 17);
    ef_pipeline_destroy(q);
    free(cut);
    free(saved);
}

/* A second state applied on top of the first would overfill the buffers
 * the first refilled: it is refused, and the first still holds. */
static void test_second_restore_refused(void **state)
{
    (void)state;
    const char *spec = "range:n=50,bytes=4 | shuffle:buffer=8 | "
                       "echo:factor=2,shuffle=4 | batch:size=3 | "
                       "prefetch:depth=2";
    enum { K = 5, MAX = 200 };
    tu_seen all[MAX], rest[MAX];
    ef_pipeline *p = tu_pipeline(spec, 7);
    size_t total = tu_pull_seen(p, all, MAX, "pipeline");
    ef_pipeline_destroy(p);
    p = tu_pipeline(spec, 7);
    assert_int_equal(tu_pull_seen(p, rest, K, "pipeline"), K);
    size_t size;
    void *saved = tu_save(p, &size);
    ef_pipeline_destroy(p);

    ef_pipeline *q = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_ESTATE);
    assert_non_null(strstr(ef_pipeline_error(q), "restored already"));
    size_t n = tu_pull_seen(q, rest, MAX, "pipeline");
    assert_int_equal(n, total - K);
    tu_expect_same(all + K, rest, n, K, spec);
    ef_pipeline_destroy(q);

    /* a state refused before anything changed does not count */
    q = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size - 1),
                     EF_EFORMAT);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(tu_pull_seen(q, rest, MAX, "pipeline"), total - K);
    ef_pipeline_destroy(q);
    free(saved);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_map_batch),
        cmocka_unit_test(test_repeat_echo_shuffle),
        cmocka_unit_test(test_echo_then_take),
        cmocka_unit_test(test_batch_echo),
        cmocka_unit_test(test_auto_echo),
        cmocka_unit_test(test_bad_states),
        cmocka_unit_test(test_unsaveable),
        cmocka_unit_test(test_fashion_mnist_state_size),
        cmocka_unit_test(test_fashion_mnist_exact),
        cmocka_unit_test(test_fashion_mnist_augment),
        cmocka_unit_test(test_damaged_payload_names_the_stage),
        cmocka_unit_test(test_second_restore_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
