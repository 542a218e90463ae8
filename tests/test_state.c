/* Checkpoints: a pipeline saved after k items and restored into a new one
 * delivers exactly what the uninterrupted run delivers after item k,
 * identity and bytes; bad states give clear errors and change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "state.h"

/* An item as the consumer sees it: identity and a hash of every field. */
typedef struct {
    ef_sample_id id;
    uint64_t hash;
} seen;

static uint64_t hash_sample(const ef_sample *s)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ef_sample_field_count(s); i++) {
        ef_tensor t;
        assert_int_equal(ef_sample_field(s, i, &t), EF_OK);
        const unsigned char *p = t.data;
        for (size_t j = 0; j < t.nbytes; j++)
            h = (h ^ p[j]) * 1099511628211ull;
        for (int d = 0; d < t.ndim; d++)
            h = (h ^ (uint64_t)t.shape[d]) * 1099511628211ull;
    }
    return h;
}

/* Pulls up to max items into out; returns how many (fewer at the end). */
static size_t pull(ef_pipeline *p, seen *out, size_t max)
{
    size_t n = 0;
    while (n < max) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_END)
            break;
        if (rc != EF_OK)
            fail_msg("next = %s: %s", ef_status_name(rc), ef_pipeline_error(p));
        out[n].id = ef_sample_identity(s);
        out[n].hash = hash_sample(s);
        ef_sample_free(s);
        n++;
    }
    return n;
}

static void *save(ef_pipeline *p, size_t *size)
{
    int rc = ef_pipeline_save_state(p, NULL, 0, size);
    if (rc != EF_OK)
        fail_msg("save (size) = %s: %s", ef_status_name(rc),
                 ef_pipeline_error(p));
    void *buf = malloc(*size);
    assert_non_null(buf);
    rc = ef_pipeline_save_state(p, buf, *size, size);
    if (rc != EF_OK)
        fail_msg("save = %s: %s", ef_status_name(rc), ef_pipeline_error(p));
    return buf;
}

static void expect_same(const seen *a, const seen *b, size_t n, size_t from,
                        const char *spec)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i].id, &b[i].id, sizeof a[i].id) != 0 ||
            a[i].hash != b[i].hash)
            fail_msg("%s: resumed at %zu, item %zu differs (%s): index "
                     "%lld epoch %lld copy %d, expected index %lld epoch "
                     "%lld copy %d",
                     spec, from, from + i,
                     a[i].hash != b[i].hash ? "its bytes" : "its identity",
                     (long long)b[i].id.index,
                     (long long)b[i].id.epoch, b[i].id.echo_copy,
                     (long long)a[i].id.index, (long long)a[i].id.epoch,
                     a[i].id.echo_copy);
}

/* Runs `spec` through, then for each cut k saves after k items, restores
 * into a new pipeline (of `restore_spec`, which may differ in speed
 * settings only) and checks the rest. */
static void check_resume(const char *spec, const char *restore_spec,
                         const size_t *cuts, size_t ncuts)
{
    enum { MAX = 20000 };
    seen *all = malloc(MAX * sizeof *all), *rest = malloc(MAX * sizeof *rest);
    assert_non_null(all);
    assert_non_null(rest);
    ef_pipeline *p = tu_pipeline(spec, 7);
    size_t total = pull(p, all, MAX);
    ef_pipeline_destroy(p);
    assert_true(total > 0 && total < MAX);
    for (size_t c = 0; c < ncuts; c++) {
        size_t k = cuts[c] < total ? cuts[c] : total;
        p = tu_pipeline(spec, 7);
        assert_int_equal(pull(p, rest, k), k);
        expect_same(all, rest, k, 0, spec);
        size_t size;
        void *state = save(p, &size);
        ef_pipeline_destroy(p);
        ef_pipeline *q = tu_pipeline(restore_spec, 7);
        int rc = ef_pipeline_restore_state(q, state, size);
        if (rc != EF_OK)
            fail_msg("%s: restore at %zu = %s: %s", spec, k,
                     ef_status_name(rc), ef_pipeline_error(q));
        size_t n = pull(q, rest, MAX);
        if (n != total - k)
            fail_msg("%s: resumed at %zu: %zu items, expected %zu", spec, k, n,
                     total - k);
        expect_same(all + k, rest, n, k, spec);
        ef_pipeline_destroy(q);
        free(state);
    }
    free(all);
    free(rest);
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
    seen *order = malloc(N * sizeof *order), *got = malloc(MAX * sizeof *got);
    assert_non_null(order);
    assert_non_null(got);
    ef_pipeline *p = tu_pipeline(
        "range:n=3000,bytes=32 | shuffle:buffer=200 | map:fn=noop", 3);
    assert_int_equal(pull(p, order, N), N); /* the fresh items' order */
    ef_pipeline_destroy(p);
    static const size_t auto_cuts[] = {0, 1, 17, 200, 2500};
    for (size_t c = 0; c < sizeof auto_cuts / sizeof auto_cuts[0]; c++) {
        size_t k = auto_cuts[c], fresh = 0;
        p = tu_pipeline(spec, 3);
        assert_int_equal(pull(p, got, k), k);
        for (size_t i = 0; i < k; i++)
            fresh += got[i].id.echo_copy == 0;
        size_t size, size2;
        void *saved = save(p, &size);
        ef_pipeline_destroy(p);
        ef_pipeline *q = tu_pipeline(spec, 3);
        assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
        void *again = save(q, &size2);
        assert_int_equal(size, size2);
        assert_memory_equal(saved, again, size);
        size_t n = pull(q, got, MAX), later = 0;
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
    seen junk[64];
    assert_int_equal(pull(p, junk, k), k);
    void *buf = save(p, size);
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
                   "'factor=2,shuffle=0,max=8,pool=64'");
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
    seen junk[512];
    assert_int_equal(pull(p, junk, 500), 500);
    size_t size;
    void *saved = save(p, &size);
    ef_pipeline_destroy(p);
    if (size >= 256 * 1024)
        fail_msg("state of %zu bytes, expected under 256 KiB", size);
    ef_pipeline *q = tu_pipeline(spec, 11);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(pull(q, junk, 10), 10);
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
    seen got[20];
    assert_int_equal(pull(p, got, 4), 4);
    size_t size;
    unsigned char *saved = save(p, &size);
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
    assert_int_equal(pull(q, got, 20), 17);
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
    seen all[MAX], rest[MAX];
    ef_pipeline *p = tu_pipeline(spec, 7);
    size_t total = pull(p, all, MAX);
    ef_pipeline_destroy(p);
    p = tu_pipeline(spec, 7);
    assert_int_equal(pull(p, rest, K), K);
    size_t size;
    void *saved = save(p, &size);
    ef_pipeline_destroy(p);

    ef_pipeline *q = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_ESTATE);
    assert_non_null(strstr(ef_pipeline_error(q), "restored already"));
    size_t n = pull(q, rest, MAX);
    assert_int_equal(n, total - K);
    expect_same(all + K, rest, n, K, spec);
    ef_pipeline_destroy(q);

    /* a state refused before anything changed does not count */
    q = tu_pipeline(spec, 7);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size - 1),
                     EF_EFORMAT);
    assert_int_equal(ef_pipeline_restore_state(q, saved, size), EF_OK);
    assert_int_equal(pull(q, rest, MAX), total - K);
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
