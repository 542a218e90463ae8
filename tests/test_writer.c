/* SPDX-License-Identifier: Apache-2.0 */
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

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_writer");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
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
    char pattern[512], spec[1024];
    snprintf(pattern, sizeof pattern, "%s/part-%%03d.tar", tu_dir());
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 3), EF_OK);
    for (int i = 0; i < 7; i++) {
        ef_sample *s = image_sample(i, 5, 4, i % 2 ? 3 : 0, 100 + i);
        assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
        ef_sample_free(s);
    }
    /* the third shard is open, under its temporary name only */
    char name[512];
    ef_shard_writer_name(w, 2, name, sizeof name);
    assert_false(file_exists(name));
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    assert_true(file_exists(name));
    assert_int_equal(ef_shard_writer_shards(w), 3);
    assert_int_equal(ef_shard_writer_samples(w), 7);
    ef_shard_writer_destroy(w);

    snprintf(spec, sizeof spec,
             "tar:urls=%s/part-{000..002}.tar,shuffle_shards=false | decode",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int i = 0; i < 7; i++) {
        ef_sample *s = tu_next(p);
        ef_tensor im = tu_field(s, "image"), lb = tu_field(s, "label"),
                  key = tu_field(s, "__key__");
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
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_bytes_and_keys(void **state)
{
    (void)state;
    /* u8 byte fields go out as they are; __key__ names the sample; a key
     * with a dot would split when read back, so it is refused */
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/raw-%%d.tar", tu_dir());
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
    char name[512];
    snprintf(name, sizeof name, "%s/raw-0.tar", tu_dir());
    assert_false(file_exists(name));
    snprintf(name, sizeof name, "%s/raw-0.tar.partial", tu_dir());
    assert_false(file_exists(name));
}

/* A sample `index` with a "txt" field "abc" and the given __key__ bytes. */
static ef_sample *keyed_sample(int64_t index, const char *key, size_t len)
{
    ef_sample *s = ef_sample_new((ef_sample_id){.index = index});
    unsigned char *d;
    int64_t n3[1] = {3}, nk[1] = {(int64_t)len};
    assert_int_equal(ef_sample_add_new(s, "txt", EF_U8, 1, n3, (void **)&d),
                     EF_OK);
    memcpy(d, "abc", 3);
    assert_int_equal(ef_sample_add_new(s, "__key__", EF_U8, 1, nk, (void **)&d),
                     EF_OK);
    memcpy(d, key, len);
    return s;
}

static void test_unsafe_keys(void **state)
{
    (void)state;
    /* the key becomes the members' path, and tar unpacks them there: a key
     * that leaves the folder (or hides in it) is refused, naming the sample
     * and the key */
    static const struct {
        const char *key, *shown, *why;
    } bad[] = {
        {"../evil", "'../evil'", "'..' path component"},
        {"/abs", "'/abs'", "absolute path"},
        {"a/../b", "'a/../b'", "'..' path component"},
        {"a//b", "'a//b'", "empty path component"},
        {"a/", "'a/'", "empty path component"},
        {"./a", "'./a'", "'.' or '..' path component"},
        {"x/..", "'x/..'", "'..' path component"},
        {"a\tb", "'a\\x09b'", "control character"},
        {"a\x1b[2Jb", "'a\\x1b[2Jb'", "control character"},
    };
    char pattern[512], name[512];
    snprintf(pattern, sizeof pattern, "%s/unsafe-%%d.tar", tu_dir());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ef_shard_writer *w = NULL;
        assert_int_equal(ef_shard_writer_create(&w, pattern, 10), EF_OK);
        ef_sample *s = keyed_sample(7, bad[i].key, strlen(bad[i].key));
        int rc = ef_shard_writer_add(w, s);
        const char *msg = ef_shard_writer_error(w);
        if (rc != EF_ESHAPE || !strstr(msg, "sample 7: key ") ||
            !strstr(msg, bad[i].shown) || !strstr(msg, bad[i].why) ||
            !strstr(msg, "a key must be a relative path"))
            fail_msg("key %s: got %s: %s", bad[i].shown, ef_status_name(rc),
                     msg);
        assert_int_equal(ef_shard_writer_samples(w), 0);
        ef_sample_free(s);
        ef_shard_writer_destroy(w);
    }
    /* nothing was written beside (or above) the output folder */
    snprintf(name, sizeof name, "%s/unsafe-0.tar", tu_dir());
    assert_false(file_exists(name));
    snprintf(name, sizeof name, "%s/../evil.txt", tu_dir());
    assert_false(file_exists(name));
}

static void test_relative_key_round_trip(void **state)
{
    (void)state;
    /* a key with folders is ordinary WebDataset: it comes back whole */
    char pattern[512], spec[1024];
    snprintf(pattern, sizeof pattern, "%s/rel-%%d.tar", tu_dir());
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 10), EF_OK);
    ef_sample *s = keyed_sample(0, "dir/name", 8);
    assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
    ef_sample_free(s);
    s = keyed_sample(1, ".cache/x-1", 10); /* dots before the last part */
    assert_int_equal(ef_shard_writer_add(w, s), EF_OK);
    ef_sample_free(s);
    assert_int_equal(ef_shard_writer_finish(w), EF_OK);
    ef_shard_writer_destroy(w);

    snprintf(spec, sizeof spec, "tar:urls=%s/rel-0.tar,shuffle_shards=false",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    static const char *const want[] = {"dir/name", ".cache/x-1"};
    for (int i = 0; i < 2; i++) {
        s = tu_next(p);
        ef_tensor key = tu_field(s, "__key__"), txt = tu_field(s, "txt");
        assert_int_equal(key.nbytes, strlen(want[i]));
        assert_memory_equal(key.data, want[i], key.nbytes);
        assert_int_equal(txt.nbytes, 3);
        assert_memory_equal(txt.data, "abc", 3);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_field_without_form(void **state)
{
    (void)state;
    char pattern[512];
    snprintf(pattern, sizeof pattern, "%s/f32-%%02d.tar", tu_dir());
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
    /* the file is named once, not once per layer */
    const char *msg = ef_shard_writer_error(w);
    tu_expect_once(msg, "/nonexistent/dir/s-0.tar.partial");
    assert_non_null(strstr(msg, "cannot create"));
    ef_sample_free(s);
    ef_shard_writer_destroy(w);
}

static void test_member_name_too_long(void **state)
{
    (void)state;
    /* the tar writer refuses the member; the shard file is named once */
    char pattern[512], key[201], partial[512];
    snprintf(pattern, sizeof pattern, "%s/long-%%d.tar", tu_dir());
    memset(key, 'k', 200);
    key[200] = '\0';
    ef_shard_writer *w = NULL;
    assert_int_equal(ef_shard_writer_create(&w, pattern, 10), EF_OK);
    ef_sample *s = keyed_sample(3, key, 200);
    assert_int_equal(ef_shard_writer_add(w, s), EF_EINVAL);
    const char *msg = ef_shard_writer_error(w);
    snprintf(partial, sizeof partial, "%s/long-0.tar.partial", tu_dir());
    tu_expect_once(msg, partial);
    assert_non_null(strstr(msg, "cannot store the name"));
    ef_sample_free(s);
    ef_shard_writer_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_bytes_and_keys),
        cmocka_unit_test(test_unsafe_keys),
        cmocka_unit_test(test_relative_key_round_trip),
        cmocka_unit_test(test_field_without_form),
        cmocka_unit_test(test_bad_patterns),
        cmocka_unit_test(test_unwritable_directory),
        cmocka_unit_test(test_member_name_too_long),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
