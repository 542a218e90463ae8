/* Checkpoints: a pipeline saved after k items and restored into a new one
 * delivers exactly what the uninterrupted run delivers after item k,
 * identity and bytes; bad states give clear errors and change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"

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
            fail_msg("%s: resumed at %zu, item %zu differs: index %lld "
                     "epoch %lld copy %d, expected index %lld epoch %lld "
                     "copy %d",
                     spec, from, from + i, (long long)b[i].id.index,
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shuffle_map_batch),
        cmocka_unit_test(test_repeat_echo_shuffle),
        cmocka_unit_test(test_echo_then_take),
        cmocka_unit_test(test_batch_echo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
