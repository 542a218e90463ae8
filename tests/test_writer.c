/* The shard writer (ef_shard_writer, behind `echoflow pack`): patterns,
 * what each kind of field becomes, shard boundaries, and errors. Shards are
 * read back through the tar source, so a round trip checks both ends. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "echoflow/echoflow.h"
#include "ef_test_util.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/ef_writer.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
}

static int file_exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* A sample: u8 image [h,w,c] with pixel k = (seed + k) & 255, a label. */
static ef_sample *image_sample(int64_t index, int h, int w, int c,
                               int64_t label)
{
    ef_sample *s = ef_sample_new((ef_sample_id){.index = index});
    unsigned char *px;
    int64_t *lb;
    int64_t shape[3] = {h, w, c};
    assert_int_equal(
        ef_sample_add_new(s, "image", EF_U8, c ? 3 : 2, shape, (void **)&px),
        EF_OK);
    for (int k = 0; k < h * w * (c ? c : 1); k++)
        px[k] = (unsigned char)(index * 7 + k);
    assert_int_equal(
        ef_sample_add_new(s, "label", EF_I64, 0, NULL, (void **)&lb), EF_OK);
    *lb = label;
    return s;
}

static void test_round_trip(void **state)
{
    (void)state;
    char pattern[128], spec[256];
    snprintf(pattern, sizeof pattern, "%s/part-%%03d.tar", dir);
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 3), EF_OK);
    for (int i = 0; i < 7; i++) {
        ef_sample *s = image_sample(i, 5, 4, i % 2 ? 3 : 0, 100 + i);
        assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
        ef_sample_free(s);
    }
    /* the third shard is open, under its temporary name only */
    char name[160];
    ef_shard_writer_name(w, 2, name, sizeof name);
    assert_false(file_exists(name));
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    assert_true(file_exists(name));
    assert_int_equal(ef_shard_writer_shards(w), 3);
    assert_int_equal(ef_shard_writer_samples(w), 7);
    ef_shard_writer_destroy(w);

    snprintf(spec, sizeof spec,
             "tar:urls=%s/part-{000..002}.tar,shuffle_shards=false | decode",
             dir);
    ef_pipeline *p = eft_pipeline(spec, 0);
    for (int i = 0; i < 7; i++) {
        ef_sample *s = eft_next(p);
        ef_tensor im = eft_field(s, "image"), lb = eft_field(s, "label"),
                  key = eft_field(s, "__key__");
        char want[16];
        snprintf(want, sizeof want, "%09d", i);
        assert_int_equal(key.nbytes, 9);
        assert_memory_equal(key.data, want, 9);
        int c = i % 2 ? 3 : 1;
        assert_int_equal(im.shape[0], 5);
        assert_int_equal(im.shape[1], 4);
        assert_int_equal(im.shape[2], c);
        for (int k = 0; k < 5 * 4 * c; k++)
            assert_int_equal(((const unsigned char *)im.data)[k],
                             (unsigned char)(i * 7 + k));
        assert_int_equal(*(const int64_t *)lb.data, 100 + i);
        ef_sample_free(s);
    }
    eft_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_bytes_and_keys(void **state)
{
    (void)state;
    /* u8 byte fields go out as they are; __key__ names the sample; a key
     * with a dot would split when read back, so it is refused */
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/raw-%%d.tar", dir);
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 100), EF_OK);
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 4});
    unsigned char *d;
    int64_t n3[1] = {3}, n5[1] = {5};
    assert_int_equal(ef_sample_add_new(s, "txt", EF_U8, 1, n3, (void **)&d),
                     EF_OK);
    memcpy(d, "abc", 3);
    assert_int_equal(ef_sample_add_new(s, "__key__", EF_U8, 1, n5, (void **)&d),
                     EF_OK);
    memcpy(d, "alpha", 5);
    assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
    memcpy(d, "a.pha", 5);
    assert_int_equal(ef_shard_writer_add(w, s), EF_ESHAPE);
    assert_non_null(strstr(ef_shard_writer_error(w), "a.pha"));
    /* a failed writer stays failed, and its partial shard goes */
    assert_int_equal(ef_shard_writer_finish(w), EF_ESHAPE);
    ef_shard_writer_destroy(w);
    ef_sample_free(s);
    char name[160];
    snprintf(name, sizeof name, "%s/raw-0.tar", dir);
    assert_false(file_exists(name));
    snprintf(name, sizeof name, "%s/raw-0.tar.partial", dir);
    assert_false(file_exists(name));
}

static void test_field_without_form(void **state)
{
    (void)state;
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/f32-%%02d.tar", dir);
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 10), EF_OK);
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 2});
    int64_t shape[2] = {2, 2};
    assert_int_equal(ef_sample_add_new(s, "weights", EF_F32, 2, shape, NULL),
                     EF_OK);
    assert_int_equal(ef_shard_writer_add(w, s), EF_ESHAPE);
    const char *msg = ef_shard_writer_error(w);
    assert_non_null(strstr(msg, "sample 2"));
    assert_non_null(strstr(msg, "'weights'"));
    assert_non_null(strstr(msg, "f32 [2,2]"));
    ef_sample_free(s);
    ef_shard_writer_destroy(w);
}

static void test_bad_patterns(void **state)
{
    (void)state;
    static const char *bad[] = {"out.tar", "out-%s.tar", "a-%d-%d.tar",
                                "a-%f.tar", "a-%999d.tar"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ef_shard_writer *w = NULL;
        assert_int_equal(ef_shard_writer_create(&w, bad[i], 10), EF_ESPEC);
        assert_non_null(w);
        if (!strstr(ef_shard_writer_error(w), bad[i]))
            fail_msg("'%s': message '%s' does not name it", bad[i],
                     ef_shard_writer_error(w));
        ef_sample *s = image_sample(0, 2, 2, 0, 1);
        assert_int_equal(ef_shard_writer_add(w, s), EF_ESPEC);
        ef_sample_free(s);
        ef_shard_writer_destroy(w);
    }
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, "x-%d.tar", 0), EF_EINVAL);
    assert_null(w);
    /* %% is a literal percent */
    assert_int_equal(ef_shard_writer_create(&w, "100%%-%04d.tar", 1), EF_OK);
    char name[64];
    ef_shard_writer_name(w, 12, name, sizeof name);
    assert_string_equal(name, "100%-0012.tar");
    ef_shard_writer_destroy(w);
}

static void test_unwritable_directory(void **state)
{
    (void)state;
    ef_shard_writer *w = NULL;
    assert_int_equal(
        ef_shard_writer_create(&w, "/nonexistent/dir/s-%d.tar", 10), EF_OK);
    ef_sample *s = image_sample(0, 2, 2, 0, 1);
    assert_int_equal(ef_shard_writer_add(w, s), EF_EIO);
    assert_non_null(strstr(ef_shard_writer_error(w), "/nonexistent/dir"));
    ef_sample_free(s);
    ef_shard_writer_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bytes_and_keys),
        cmocka_unit_test(test_field_without_form),
        cmocka_unit_test(test_bad_patterns),
        cmocka_unit_test(test_unwritable_directory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
