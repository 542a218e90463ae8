/* SPDX-License-Identifier: Apache-2.0 */
/* The tokens source and the token writer: nanoGPT-style token files
 * written with ef_token_writer and read back as blocks of inputs and
 * next-token targets, sequential and random, resumed, sharded; the
 * errors of bad files and ids. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "ef_test_util.h"
#include "state_test_util.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_tokens");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* Writes ids[0..n) as token file `name` of `dtype` with the writer. */
static const char *write_ids(const char *name, const char *dtype,
                             const int32_t *ids, size_t n)
{
    const char *path = tu_at(name);
    ef_token_writer *w = NULL;
    assert_int_equal(ef_token_writer_create(&w, path, dtype), EF_OK);
    /* in two calls: the file is their concatenation */
    assert_int_equal(ef_token_writer_add_ids(w, ids, n / 3), EF_OK);
    assert_int_equal(ef_token_writer_add_ids(w, ids + n / 3, n - n / 3), EF_OK);
    assert_int_equal(ef_token_writer_tokens(w), (int64_t)n);
    if (ef_token_writer_finish(w) != EF_OK)
        fail_msg("finish: %s", ef_token_writer_error(w));
    ef_token_writer_destroy(w);
    return path;
}

/* Token file `name` of ids 0 .. n - 1 (each its own offset). */
static const char *write_iota(const char *name, const char *dtype, size_t n)
{
    int32_t *ids = malloc(n * sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        ids[i] = (int32_t)i;
    const char *path = write_ids(name, dtype, ids, n);
    free(ids);
    return path;
}

/* Checks block s: inputs ids[o .. o + n), targets one further. */
static void expect_block(const ef_sample *s, const int32_t *ids, int64_t o,
                         int64_t n)
{
    ef_tensor in = tu_field(s, "inputs"), tg = tu_field(s, "targets");
    assert_int_equal(in.dtype, EF_I32);
    assert_int_equal(tg.dtype, EF_I32);
    assert_int_equal(in.ndim, 1);
    assert_int_equal(in.shape[0], n);
    assert_int_equal(tg.shape[0], n);
    const int32_t *a = in.data, *b = tg.data;
    for (int64_t j = 0; j < n; j++)
        if (a[j] != ids[o + j] || b[j] != ids[o + j + 1])
            fail_msg("block at %lld, token %lld: %d/%d, expected %d/%d",
                     (long long)o, (long long)j, a[j], b[j], ids[o + j],
                     ids[o + j + 1]);
}

static void test_sequential_exact(void **state)
{
    (void)state;
    /* 1000 tokens, blocks of 64: at 0, 64 ... 896 (each needs 65) */
    int32_t ids[1000];
    for (int i = 0; i < 1000; i++)
        ids[i] = (i * 7919) % 65536;
    write_ids("a.bin", "uint16", ids, 1000);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s,block=64", tu_at("a.bin"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    int64_t len = -1;
    assert_int_equal(ef_pipeline_length(p, &len), EF_OK);
    assert_int_equal(len, 15);
    for (int64_t k = 0; k < 15; k++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, k);
        expect_block(s, ids, k * 64, 64);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* exactly block + 1 tokens: one block */
    write_iota("b.bin", "uint16", 65);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=64", tu_at("b.bin"));
    p = tu_pipeline(spec, 0);
    assert_int_equal(tu_drain(p), 1);
    ef_pipeline_destroy(p);
}

/* uint32 files: ids past 65535 */
static void test_uint32(void **state)
{
    (void)state;
    int32_t ids[300];
    for (int i = 0; i < 300; i++)
        ids[i] = 100000 + i * 1000003 % 2000000000;
    write_ids("c.bin", "uint32", ids, 300);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s,block=10,dtype=uint32",
             tu_at("c.bin"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int64_t k = 0; k < 29; k++) {
        ef_sample *s = tu_next(p);
        expect_block(s, ids, k * 10, 10);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* an id past INT32_MAX cannot be an i32: an error naming it */
    unsigned char raw[4 * 12] = {0};
    raw[4 * 5 + 3] = 0x80;
    tu_write_file(tu_at("big.bin"), raw, sizeof raw);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4,dtype=uint32",
             tu_at("big.bin"));
    p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    assert_non_null(strstr(ef_pipeline_error(p), "big.bin"));
    assert_non_null(strstr(ef_pipeline_error(p), "token id 2147483648"));
    assert_non_null(strstr(ef_pipeline_error(p), "at byte 20"));
    ef_pipeline_destroy(p);
}

/* Pulls n blocks of `spec` into starts[] (the ids are their offsets). */
static void random_starts(const char *spec, uint64_t seed, int64_t *starts,
                          int64_t *epochs, int n)
{
    ef_pipeline *p = tu_pipeline(spec, seed);
    for (int k = 0; k < n; k++) {
        ef_sample *s = tu_next(p);
        starts[k] = ((const int32_t *)tu_field(s, "inputs").data)[0];
        epochs[k] = ef_sample_identity(s).epoch;
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_random(void **state)
{
    (void)state;
    static int32_t ids[5000];
    for (int i = 0; i < 5000; i++)
        ids[i] = i;
    write_ids("r.bin", "uint16", ids, 5000);
    char spec[600], spec2[600];
    /* 5000 / 50 = 100 blocks a pass, two passes */
    snprintf(spec, sizeof spec,
             "tokens:files=%s,block=50,order=random | repeat:count=2",
             tu_at("r.bin"));
    int64_t a[200], b[200], c[200], e[200];
    random_starts(spec, 3, a, e, 200);
    random_starts(spec, 3, b, e, 200);
    assert_memory_equal(a, b, sizeof a); /* same seeds, same blocks */
    int differ = 0, spread = 0;
    for (int k = 0; k < 200; k++) {
        assert_true(a[k] >= 0 && a[k] <= 5000 - 51);
        assert_int_equal(e[k], k / 100);
        differ += k < 100 && a[k] != a[k + 100];
        spread += a[k] % 50 != 0;
    }
    assert_true(differ > 90);          /* each pass its own draws */
    assert_true(spread > 150);         /* any offset, not block multiples */
    random_starts(spec, 4, c, e, 200); /* another pipeline seed */
    assert_true(memcmp(a, c, sizeof a) != 0);
    snprintf(spec2, sizeof spec2,
             "tokens:files=%s,block=50,order=random,seed=9 | repeat:count=2",
             tu_at("r.bin"));
    random_starts(spec2, 3, c, e, 200); /* another option seed */
    assert_true(memcmp(a, c, sizeof a) != 0);
    /* the blocks' contents are the file's at their offsets */
    ef_pipeline *p = tu_pipeline(spec, 3);
    for (int k = 0; k < 200; k++) {
        ef_sample *s = tu_next(p);
        expect_block(s, ids, a[k], 50);
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
}

/* Several files: each cut on its own, file after file; {a,b} lists. */
static void test_files_and_shards(void **state)
{
    (void)state;
    int32_t x[100], y[57];
    for (int i = 0; i < 100; i++)
        x[i] = 1000 + i;
    for (int i = 0; i < 57; i++)
        y[i] = 2000 + i;
    write_ids("f0.bin", "uint16", x, 100);
    write_ids("f1.bin", "uint16", y, 57);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s/f{0..1}.bin,block=8",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    /* f0: 99 / 8 = 12 blocks, f1: 56 / 8 = 7 */
    for (int k = 0; k < 19; k++) {
        ef_sample *s = tu_next(p);
        if (k < 12)
            expect_block(s, x, k * 8, 8);
        else
            expect_block(s, y, (k - 12) * 8, 8);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    /* two parts: the blocks k % 2 == i, between them all of them */
    for (int part = 0; part < 2; part++) {
        char sharded[700];
        snprintf(sharded, sizeof sharded, "%s,shard=%d/2", spec, part);
        p = tu_pipeline(sharded, 0);
        int64_t len;
        assert_int_equal(ef_pipeline_length(p, &len), EF_OK);
        assert_int_equal(len, part == 0 ? 10 : 9);
        for (int64_t k = part; k < 19; k += 2) {
            ef_sample *s = tu_next(p);
            assert_int_equal(ef_sample_identity(s).index, k);
            ef_sample_free(s);
        }
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

/* The first next() of `spec` (or its parse) fails with `status`, the
 * message holding each of the NULL-terminated needles. */
static void expect_fail(const char *spec, int status, ...)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    int rc = ef_pipeline_parse(p, spec);
    ef_sample *s = NULL;
    if (rc == EF_OK)
        rc = ef_pipeline_next(p, &s);
    if (rc != status)
        fail_msg("%s: %s, expected %s (%s)", spec, ef_status_name(rc),
                 ef_status_name(status), ef_pipeline_error(p));
    va_list ap;
    va_start(ap, status);
    for (const char *n; (n = va_arg(ap, const char *)) != NULL;)
        if (!strstr(ef_pipeline_error(p), n))
            fail_msg("%s: '%s' does not say '%s'", spec, ef_pipeline_error(p),
                     n);
    va_end(ap);
    ef_pipeline_destroy(p);
}

static void test_bad_files(void **state)
{
    (void)state;
    char spec[700];
    unsigned char raw[64] = {1, 2, 3, 4, 5, 6, 7};
    /* a truncated uint16 file: an odd size */
    tu_write_file(tu_at("odd.bin"), raw, 21);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4", tu_at("odd.bin"));
    expect_fail(spec, EF_EFORMAT, "odd.bin is 21 bytes",
                "not a whole number of uint16 tokens", NULL);
    /* a uint16 file read as uint32 */
    tu_write_file(tu_at("six.bin"), raw, 46);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4,dtype=uint32",
             tu_at("six.bin"));
    expect_fail(spec, EF_EFORMAT, "six.bin is 46 bytes", "uint32", NULL);
    /* empty, and shorter than a block */
    tu_write_file(tu_at("empty.bin"), NULL, 0);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4", tu_at("empty.bin"));
    expect_fail(spec, EF_EFORMAT, "empty.bin holds 0 uint16 tokens",
                "fewer than the block + 1 = 5", NULL);
    tu_write_file(tu_at("short.bin"), raw, 8);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4", tu_at("short.bin"));
    expect_fail(spec, EF_EFORMAT, "short.bin holds 4 uint16 tokens", NULL);
    /* a missing file, a folder */
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4", tu_at("none.bin"));
    expect_fail(spec, EF_EIO, "none.bin", "No such file", NULL);
    snprintf(spec, sizeof spec, "tokens:files=%s,block=4", tu_dir());
    expect_fail(spec, EF_EIO, "not a regular file", NULL);
    /* options */
    expect_fail("tokens:files=x,block=4,dtype=int16", EF_ESPEC, "dtype",
                "uint16 or uint32", NULL);
    expect_fail("tokens:files=x,block=4,order=shuffled", EF_ESPEC, "order",
                "sequential or random", NULL);
    expect_fail("tokens:files=x,block=0", EF_ESPEC, "block", NULL);
    expect_fail("tokens:block=4", EF_ESPEC, "files", NULL);
}

/* A file cut short after it was sized: the read that finds it says so. */
static void test_truncated_while_read(void **state)
{
    (void)state;
    const char *path = write_iota("cut.bin", "uint16", 100);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s,block=10", path);
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(truncate(path, 50), 0);
    s = tu_next(p); /* tokens 10..20: still there */
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_next(p, &s), EF_EFORMAT);
    assert_non_null(strstr(ef_pipeline_error(p), "cut.bin ends at byte 50"));
    assert_non_null(strstr(ef_pipeline_error(p), "shrank"));
    ef_pipeline_destroy(p);
    /* a restore finds the size changed */
    write_iota("cut.bin", "uint16", 100);
    p = tu_pipeline(spec, 0);
    s = tu_next(p);
    ef_sample_free(s);
    size_t size;
    void *st = tu_save(p, &size);
    ef_pipeline_destroy(p);
    assert_int_equal(truncate(path, 150), 0);
    p = tu_pipeline(spec, 0);
    assert_int_not_equal(ef_pipeline_restore_state(p, st, size), EF_OK);
    assert_non_null(strstr(ef_pipeline_error(p), "the files held 100 tokens, "
                                                 "they hold 75 now"));
    ef_pipeline_destroy(p);
    free(st);
}

/* on_error=skip drops a block whose ids do not fit i32, counted */
static void test_skip(void **state)
{
    (void)state;
    unsigned char raw[4 * 31] = {0};
    raw[4 * 12 + 3] = 0xff; /* token 12 */
    tu_write_file(tu_at("skip.bin"), raw, sizeof raw);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s,block=10,dtype=uint32",
             tu_at("skip.bin"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    /* blocks at 0, 10, 20: the one at 10 holds token 12 */
    assert_int_equal(tu_drain(p), 2);
    char why[512];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 1);
    assert_non_null(strstr(why, "at byte 48"));
    ef_pipeline_destroy(p);
}

/* A message about a block names its file: block 1 is the second file's
 * first, as the first file holds one block. */
static void test_part_names(void **state)
{
    (void)state;
    write_iota("p1.bin", "uint16", 21);
    const char *second = write_iota("p2.bin", "uint16", 100);
    char spec[700], want[600];
    snprintf(spec, sizeof spec,
             "tokens:files=\"%s/p{1..2}.bin\",block=20,shard=1/2 | "
             "select:fields=absent",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *s = NULL;
    assert_int_equal(ef_pipeline_next(p, &s), EF_ESHAPE);
    snprintf(want, sizeof want, "item 1 (epoch 0), file '%s'", second);
    if (!strstr(ef_pipeline_error(p), want))
        fail_msg("\"%s\" does not say \"%s\"", ef_pipeline_error(p), want);
    ef_pipeline_destroy(p);
}

/* Blocks held by a shuffle are read again by identity, and checked: two
 * files that swapped sizes hold as many tokens, but blocks start
 * elsewhere. */
static void test_fetch_checks_origin(void **state)
{
    (void)state;
    write_iota("w1.bin", "uint16", 1000);
    write_iota("w2.bin", "uint16", 2000);
    char spec[700];
    snprintf(spec, sizeof spec,
             "tokens:files=\"%s/w{1..2}.bin\",block=10,order=random | "
             "shuffle:buffer=8",
             tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 3);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    size_t size;
    void *st = tu_save(p, &size);
    ef_pipeline_destroy(p);
    write_iota("w1.bin", "uint16", 2000);
    write_iota("w2.bin", "uint16", 1000);
    p = tu_pipeline(spec, 3);
    int rc = ef_pipeline_restore_state(p, st, size);
    if (rc == EF_OK)
        rc = ef_pipeline_next(p, &s);
    if (rc != EF_EFORMAT || !strstr(ef_pipeline_error(p), "the files or the "
                                                           "seed changed"))
        fail_msg("%s: %s", ef_status_name(rc), ef_pipeline_error(p));
    ef_pipeline_destroy(p);
    free(st);
}

static ef_pipeline *seeded(const char *spec, const void *arg)
{
    (void)arg;
    return tu_pipeline(spec, 11);
}

static void test_resume(void **state)
{
    (void)state;
    write_iota("s1.bin", "uint16", 3000);
    write_iota("s2.bin", "uint16", 1001);
    write_iota("t.bin", "uint32", 2500);
    static const size_t cuts[] = {0, 1, 5, 17, 40, 99, 100, 101, 150};
    const char *specs[] = {
        /* after "tokens:files=DIR/" */
        "s{1..2}.bin,block=20",
        "s{1..2}.bin,block=20,order=random | repeat:count=3",
        /* blocks held by a shuffle are read again by identity */
        "s{1..2}.bin,block=7,order=random | "
        "shuffle:buffer=30 | batch:size=3",
        "s{1..2}.bin,block=9,shard=1/3 | "
        "echo:factor=2,shuffle=5",
        "t.bin,block=13,dtype=uint32,order=random,seed=5 | "
        "shuffle:buffer=9",
    };
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        char spec[700];
        snprintf(spec, sizeof spec, "tokens:files=%s/%s", tu_dir(), specs[i]);
        tu_check_resume(seeded, NULL, spec, spec, cuts,
                        sizeof cuts / sizeof cuts[0], 2000);
    }
}

/* Documents written with eos by the writer and read as blocks equal
 * pack_tokens' blocks of the same documents. */
static int doc_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    int64_t i = ((const int64_t *)tu_field(in, "index").data)[0];
    int64_t n = (i * 5) % 13;
    ef_sample *s = ef_sample_new(ef_sample_identity(in));
    int32_t *tok;
    if (ef_sample_add_new(s, "tokens", EF_I32, 1, &n, (void **)&tok) != EF_OK) {
        ef_sample_free(s);
        return EF_ENOMEM;
    }
    for (int64_t j = 0; j < n; j++)
        tok[j] = (int32_t)(i * 31 + j);
    *out = s;
    return EF_OK;
}

static ef_pipeline *docs(const char *spec)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_bind_map(p, "doc", doc_map, NULL), EF_OK);
    tu_parse(p, spec);
    return p;
}

static void test_writer_round_trip(void **state)
{
    (void)state;
    const char *path = tu_at("docs.bin");
    ef_token_writer *w = NULL;
    assert_int_equal(ef_token_writer_create(&w, path, "uint16"), EF_OK);
    ef_pipeline *p = docs("range:n=300 | map:fn=doc");
    for (ef_sample *s; (s = tu_next_or_end(p, "docs")) != NULL;) {
        assert_int_equal(ef_token_writer_add(w, s, "tokens", 50000), EF_OK);
        ef_sample_free(s);
    }
    ef_pipeline_destroy(p);
    /* written under a temporary name until finished */
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(ef_token_writer_finish(w), EF_OK);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(ef_token_writer_documents(w), 300);
    int64_t tokens = ef_token_writer_tokens(w);
    ef_token_writer_destroy(w);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, 2 * tokens);
    char spec[600];
    snprintf(spec, sizeof spec, "tokens:files=%s,block=16", path);
    ef_pipeline *a = tu_pipeline(spec, 0);
    ef_pipeline *b = docs("range:n=300 | map:fn=doc | "
                          "pack_tokens:block=16,eos=50000");
    int64_t n = 0;
    for (ef_sample *x; (x = tu_next_or_end(a, spec)) != NULL; n++) {
        ef_sample *y = tu_next(b);
        assert_int_equal(ef_sample_identity(x).index,
                         ef_sample_identity(y).index);
        assert_int_equal(tu_hash_sample(x), tu_hash_sample(y));
        ef_sample_free(x);
        ef_sample_free(y);
    }
    tu_expect_end(b);
    assert_int_equal(n, (tokens - 1) / 16);
    ef_pipeline_destroy(a);
    ef_pipeline_destroy(b);
}

static void test_writer_errors(void **state)
{
    (void)state;
    ef_token_writer *w = NULL;
    assert_int_equal(ef_token_writer_create(&w, tu_at("e.bin"), "int8"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_token_writer_error(w), "uint16 or uint32"));
    ef_token_writer_destroy(w);
    assert_int_equal(
        ef_token_writer_create(&w, "/nonexistent/dir/x.bin", "uint16"), EF_EIO);
    assert_non_null(strstr(ef_token_writer_error(w), "/nonexistent/dir/x.bin"));
    ef_token_writer_destroy(w);
    assert_int_equal(ef_token_writer_create(NULL, "x", "uint16"), EF_EINVAL);

    assert_int_equal(ef_token_writer_create(&w, tu_at("e.bin"), "uint16"),
                     EF_OK);
    int32_t ids[] = {1, 2, 65535, 65536, 3};
    /* no silent clamp: the id, its position and the dtype; nothing written */
    assert_int_equal(ef_token_writer_add_ids(w, ids, 5), EF_EINVAL);
    assert_non_null(strstr(ef_token_writer_error(w), "id 65536"));
    assert_non_null(strstr(ef_token_writer_error(w), "position 3"));
    assert_non_null(strstr(ef_token_writer_error(w), "uint16"));
    assert_int_equal(ef_token_writer_tokens(w), 0);
    int32_t neg = -1;
    assert_int_equal(ef_token_writer_add_ids(w, &neg, 1), EF_EINVAL);
    assert_int_equal(ef_token_writer_add_ids(w, ids, 3), EF_OK);
    /* a sample: the field must be integer ids [n] */
    ef_sample *s = ef_sample_new((ef_sample_id){.index = 4});
    float *f;
    int64_t two = 2;
    assert_int_equal(ef_sample_add_new(s, "x", EF_F32, 1, &two, (void **)&f),
                     EF_OK);
    assert_int_equal(ef_token_writer_add(w, s, "tokens", -1), EF_ESHAPE);
    assert_non_null(strstr(ef_token_writer_error(w), "no field 'tokens'"));
    assert_int_equal(ef_token_writer_add(w, s, "x", -1), EF_ESHAPE);
    assert_non_null(strstr(ef_token_writer_error(w), "field 'x' of sample 4"));
    assert_non_null(strstr(ef_token_writer_error(w), "f32 [2]"));
    int64_t *big;
    assert_int_equal(ef_sample_add_new(s, "y", EF_I64, 1, &two, (void **)&big),
                     EF_OK);
    big[0] = 7;
    big[1] = 1 << 20;
    assert_int_equal(ef_token_writer_add(w, s, "y", -1), EF_EINVAL);
    assert_non_null(strstr(ef_token_writer_error(w), "id 1048576"));
    big[1] = 8;
    assert_int_equal(ef_token_writer_add(w, s, "y", 70000), EF_EINVAL);
    assert_non_null(strstr(ef_token_writer_error(w), "eos 70000"));
    assert_int_equal(ef_token_writer_tokens(w), 3);
    assert_int_equal(ef_token_writer_add(w, s, "y", 9), EF_OK);
    assert_int_equal(ef_token_writer_tokens(w), 6);
    ef_sample_free(s);
    /* destroyed unfinished: nothing left behind */
    ef_token_writer_destroy(w);
    assert_int_equal(access(tu_at("e.bin"), F_OK), -1);
    DIR *d = opendir(tu_dir());
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, "e.bin"))
            fail_msg("left behind: %s", e->d_name);
    closedir(d);
    /* finished twice */
    assert_int_equal(ef_token_writer_create(&w, tu_at("g.bin"), "uint32"),
                     EF_OK);
    assert_int_equal(ef_token_writer_finish(w), EF_OK);
    assert_int_equal(ef_token_writer_finish(w), EF_ESTATE);
    assert_int_equal(ef_token_writer_add_ids(w, ids, 1), EF_ESTATE);
    ef_token_writer_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequential_exact),
        cmocka_unit_test(test_uint32),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_files_and_shards),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_truncated_while_read),
        cmocka_unit_test(test_skip),
        cmocka_unit_test(test_part_names),
        cmocka_unit_test(test_fetch_checks_origin),
        cmocka_unit_test(test_resume),
        cmocka_unit_test(test_writer_round_trip),
        cmocka_unit_test(test_writer_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
