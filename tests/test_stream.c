/* SPDX-License-Identifier: Apache-2.0 */
/* Byte streams (src/io/stream.c, src/io/http.c): files, memory, gzip and
 * zstd on the fly, opening part way (a seek, a Range request, or inflating and
 * dropping), the truncation messages of read_full and skip, and HTTP against
 * tests/http_server.py started per test with the faults it needs (cuts,
 * 503s, ignored ranges, stalls, trickled headers and bodies, redirect
 * loops, huge headers, ranges that run long), checking that every byte arrives
 * once and in order, that retries are counted, and that giving up and
 * cancelling say what happened and where. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef EF_TEST_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef EF_TEST_HAVE_ZSTD
#include <zstd.h>
#endif

#include "echoflow/echoflow.h"
#include "ef_test_util.h"
#include "io/regular_file.h"
#include "io/stream.h"

#define BIG_SIZE 5000011u   /* "5 MB", odd so no piece size divides it */
#define SMALL_SIZE 1000003u /* for the quadratic --ignore-range test */
#define TEXT_SIZE 2000000u  /* compressible, for gzip */

static unsigned char *g_big, *g_small, *g_text;
#ifdef EF_TEST_HAVE_ZLIB
static unsigned char *g_gz; /* g_text gzipped */
static size_t g_gz_size;
#endif

/* ---- helpers ------------------------------------------------------- */

static void fill_random(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)(x >> 24);
    }
}

/* Writes data[0, n) as `name` in the temporary directory. */
static void write_file(const char *name, const void *data, size_t n)
{
    tu_write_file(tu_at(name), data, n);
}

/* Reads `s` to its end in odd-sized pieces into out (cap bytes, more than
 * the data should need); *total gets the count. Returns the status of the
 * last read. Checks the read contract: short only at the end. */
static int read_pieces(ef__stream *s, unsigned char *out, size_t cap,
                       size_t *total, ef__err *err)
{
    static const size_t sizes[] = {1, 7, 4093, 65537, 3, 200003, 17, 131071};
    *total = 0;
    for (size_t k = 0;; k++) {
        size_t want = sizes[k % (sizeof sizes / sizeof sizes[0])];
        assert_true(*total + want <= cap); /* more data than expected */
        size_t got = 12345;
        int rc = ef__stream_read(s, out + *total, want, &got, err);
        assert_true(got <= want);
        *total += got;
        assert_int_equal(ef__stream_offset(s), *total);
        if (rc != EF_OK)
            return rc;
        if (got < want) {
            /* the end, and it stays the end */
            rc = ef__stream_read(s, out, 1, &got, err);
            assert_int_equal(rc, EF_OK);
            assert_int_equal(got, 0);
            return EF_OK;
        }
    }
}

/* Reads all of `s` and checks it equals want[0, n). */
static void expect_content(ef__stream *s, const unsigned char *want, size_t n)
{
    ef__err err;
    ef__err_clear(&err);
    unsigned char *got = malloc(n + 300000);
    assert_non_null(got);
    size_t total = 0;
    int rc = read_pieces(s, got, n + 300000, &total, &err);
    if (rc != EF_OK)
        fail_msg("read failed after %zu bytes: %s: %s", total,
                 ef_status_name(rc), err.msg);
    assert_int_equal(total, n);
    assert_true(memcmp(got, want, n) == 0);
    free(got);
}

static void expect_msg(const ef__err *err, const char *part)
{
    if (!strstr(err->msg, part))
        fail_msg("message \"%s\" does not contain \"%s\"", err->msg, part);
}

#ifdef EF_TEST_HAVE_ZLIB
/* data[0, n) as one gzip member, in a malloc'd buffer. */
static unsigned char *gzip_bytes(const void *data, size_t n, size_t *out_n)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(
        deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    z.next_in = (unsigned char *)(uintptr_t)data;
    z.avail_in = (uInt)n;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_n = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}
#endif

/* ---- fixtures ------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    if (tu_dir_create("ef_test_stream") != 0)
        return -1;
    g_big = malloc(BIG_SIZE);
    g_small = malloc(SMALL_SIZE);
    g_text = malloc(TEXT_SIZE);
    if (!g_big || !g_small || !g_text)
        return -1;
    fill_random(g_big, BIG_SIZE, 1);
    fill_random(g_small, SMALL_SIZE, 2);
    /* text that compresses, with enough variety to need many blocks */
    size_t k = 0;
    for (unsigned line = 0; k < TEXT_SIZE; line++) {
        char tmpl[64];
        int m = snprintf(tmpl, sizeof tmpl, "line %u of the echoflow test %x\n",
                         line, line * 2654435761u);
        for (int i = 0; i < m && k < TEXT_SIZE; i++)
            g_text[k++] = (unsigned char)tmpl[i];
    }
    write_file("big.bin", g_big, BIG_SIZE);
    write_file("small.bin", g_small, SMALL_SIZE);
    write_file("empty.bin", "", 0);
#ifdef EF_TEST_HAVE_ZLIB
    g_gz = gzip_bytes(g_text, TEXT_SIZE, &g_gz_size);
    write_file("text.gz", g_gz, g_gz_size);
#endif
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    free(g_big);
    free(g_small);
    free(g_text);
#ifdef EF_TEST_HAVE_ZLIB
    free(g_gz);
#endif
    return tu_dir_remove();
}

/* ---- local streams ------------------------------------------------- */

static void test_file_plain(void **state)
{
    (void)state;
    write_file("plain.bin", g_small, SMALL_SIZE);
    const char *path = tu_at("plain.bin");
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_OK);
    assert_string_equal(ef__stream_name(s), path);
    expect_content(s, g_small, SMALL_SIZE);
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    assert_int_equal(st.raw_bytes, SMALL_SIZE);
    assert_int_equal(st.retries, 0);
    ef__stream_close(s);
    ef__stream_close(NULL);
}

static void test_memory(void **state)
{
    (void)state;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    /* empty, even with no data pointer at all */
    assert_int_equal(ef__stream_open_memory(&s, NULL, 0, "nothing", NULL, &err),
                     EF_OK);
    expect_content(s, (const unsigned char *)"", 0);
    ef__stream_close(s);

    /* one byte: too short to sniff for gzip, still delivered */
    assert_int_equal(ef__stream_open_memory(&s, "\x1f", 1, "one", NULL, &err),
                     EF_OK);
    expect_content(s, (const unsigned char *)"\x1f", 1);
    ef__stream_close(s);

    /* gzip=0: the magic is data like any other */
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.compression = 0;
    static const unsigned char magic[] = {0x1f, 0x8b, 8, 0, 1, 2, 3};
    assert_int_equal(
        ef__stream_open_memory(&s, magic, sizeof magic, "raw", &o, &err),
        EF_OK);
    expect_content(s, magic, sizeof magic);
    ef__stream_close(s);

    assert_int_equal(
        ef__stream_open_memory(&s, g_big, BIG_SIZE, "big", NULL, &err), EF_OK);
    expect_content(s, g_big, BIG_SIZE);
    ef__stream_close(s);
}

static void test_missing_file(void **state)
{
    (void)state;
    const char *path = tu_at("no/such/file.bin");
    ef__stream *s = (ef__stream *)&s; /* must be reset to NULL */
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_EIO);
    assert_null(s);
    assert_int_equal(err.status, EF_EIO);
    expect_msg(&err, path);
    expect_msg(&err, "cannot open");
}

static void test_read_full_and_skip(void **state)
{
    (void)state;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(
        ef__stream_open_memory(&s, "0123456789", 10, "digits", NULL, &err),
        EF_OK);
    char b[16];
    assert_int_equal(ef__stream_read_full(s, b, 4, "header", &err), EF_OK);
    assert_memory_equal(b, "0123", 4);
    assert_int_equal(ef__stream_skip(s, 3, "padding", &err), EF_OK);
    assert_int_equal(ef__stream_offset(s), 7);
    assert_int_equal(ef__stream_read_full(s, b, 5, "record", &err), EF_EFORMAT);
    expect_msg(&err, "digits: truncated record at offset 7");
    expect_msg(&err, "expected 5 bytes");
    expect_msg(&err, "ends after 3");
    assert_memory_equal(b, "789", 3);
    /* at the end: END, not an error, for both */
    assert_int_equal(ef__stream_read_full(s, b, 5, "record", &err), EF_END);
    assert_int_equal(ef__stream_skip(s, 5, "record", &err), EF_END);
    assert_int_equal(ef__stream_skip(s, 0, "nothing", &err), EF_OK);
    ef__stream_close(s);

    assert_int_equal(
        ef__stream_open_memory(&s, "0123456789", 10, "digits", NULL, &err),
        EF_OK);
    assert_int_equal(ef__stream_read_full(s, b, 2, "header", &err), EF_OK);
    ef__err_clear(&err);
    assert_int_equal(ef__stream_skip(s, 20000, "body", &err), EF_EFORMAT);
    expect_msg(&err, "digits: truncated body at offset 2");
    expect_msg(&err, "19992 more bytes expected");
    ef__stream_close(s);
}

/* Opens `location` at `offset` up to `end` (0: the data's end) and
 * checks it reads as want[offset, end) of want[0, n), with offsets
 * counted from the data's start; returns the raw bytes the stream read. */
static uint64_t expect_range(const char *location, const ef__stream_opts *o,
                             uint64_t offset, uint64_t end,
                             const unsigned char *want, size_t n)
{
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__stream_open_range(&s, location, o, offset, end, &err);
    if (rc != EF_OK)
        fail_msg("open %s at %llu: %s", location, (unsigned long long)offset,
                 err.msg);
    assert_int_equal(ef__stream_offset(s), offset);
    if (end > 0 && end < n)
        n = (size_t)end;
    size_t len = n - (size_t)offset;
    unsigned char *got = malloc(len + 1);
    assert_non_null(got);
    size_t total = 0;
    while (total <= len) {
        size_t k;
        rc = ef__stream_read(s, got + total, len + 1 - total, &k, &err);
        if (rc != EF_OK)
            fail_msg("read %s from %llu: %s", location,
                     (unsigned long long)offset, err.msg);
        if (k == 0)
            break;
        total += k;
    }
    assert_int_equal(total, len);
    assert_true(len == 0 || memcmp(got, want + offset, len) == 0);
    assert_int_equal(ef__stream_offset(s), n);
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    free(got);
    ef__stream_close(s);
    return st.raw_bytes;
}

/* expect_range to the data's end. */
static uint64_t expect_from(const char *location, const ef__stream_opts *o,
                            uint64_t offset, const unsigned char *want,
                            size_t n)
{
    return expect_range(location, o, offset, 0, want, n);
}

/* A file opened for a range ends at its end, the bytes before its start
 * not read; past the file's end, the file's end is the data's. */
static void test_open_range_file(void **state)
{
    (void)state;
    const char *path = tu_at("big.bin");
    /* one read ahead of a chunk, not the rest of the file */
    assert_true(expect_range(path, NULL, 4096, 5000, g_big, BIG_SIZE) <= 65536);
    expect_range(path, NULL, 0, 1, g_big, BIG_SIZE);
    expect_range(path, NULL, BIG_SIZE - 10, BIG_SIZE + 10, g_big, BIG_SIZE);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open_range(&s, path, NULL, 100, 110, &err),
                     EF_OK);
    unsigned char b[16];
    assert_int_equal(ef__stream_read_full(s, b, 6, "head", &err), EF_OK);
    assert_int_equal(ef__stream_read_full(s, b, 6, "tail", &err), EF_EFORMAT);
    expect_msg(&err, "truncated tail at offset 106: expected 6 bytes, the "
                     "data ends after 4");
    ef__stream_close(s);
}

/* A plain file opened part way seeks: the bytes before are never read,
 * and offsets (raw ones too) still count from the file's start. */
static void test_open_at_file(void **state)
{
    (void)state;
    const char *path = tu_at("big.bin");
    static const uint64_t offsets[] = {
        0, 1, 65536, 1234567, BIG_SIZE - 1, BIG_SIZE,
    };
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++)
        assert_int_equal(expect_from(path, NULL, offsets[i], g_big, BIG_SIZE),
                         BIG_SIZE - offsets[i]);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open_at(&s, path, NULL, 4096, &err), EF_OK);
    unsigned char b[10];
    assert_int_equal(ef__stream_read_full(s, b, 10, "head", &err), EF_OK);
    assert_int_equal(ef__stream_raw_offset(s), 4106);
    assert_int_equal(ef__stream_compression(s), 0);
    ef__stream_close(s);
    /* past the end: the file, its size and the offset are named */
    assert_int_equal(ef__stream_open_at(&s, path, NULL, BIG_SIZE + 1, &err),
                     EF_EFORMAT);
    assert_null(s);
    expect_msg(&err, path);
    expect_msg(&err, "cannot start reading at offset 5000012");
    expect_msg(&err, "the file has 5000011 bytes");
}

static void test_cancel_local(void **state)
{
    (void)state;
    atomic_int flag = 1;
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.cancelled = &flag;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open_memory(&s, "abc", 3, "mem", &o, &err),
                     EF_OK);
    char b[3];
    size_t got = 9;
    assert_int_equal(ef__stream_read(s, b, 3, &got, &err), EF_ECANCELED);
    assert_int_equal(got, 0);
    expect_msg(&err, "mem");
    ef__stream_close(s);
}

#ifdef EF_TEST_HAVE_ZLIB

static void test_gzip_file(void **state)
{
    (void)state;
    const char *path = tu_at("text.gz");
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_OK);
    expect_content(s, g_text, TEXT_SIZE);
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    assert_int_equal(st.raw_bytes, g_gz_size);
    ef__stream_close(s);

    /* gzip=1 without sniffing gives the same; gzip=0 the raw bytes */
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.compression = 1;
    assert_int_equal(ef__stream_open(&s, path, &o, &err), EF_OK);
    expect_content(s, g_text, TEXT_SIZE);
    ef__stream_close(s);
    o.compression = 0;
    assert_int_equal(ef__stream_open(&s, path, &o, &err), EF_OK);
    expect_content(s, g_gz, g_gz_size);
    ef__stream_close(s);
}

static void test_gzip_members(void **state)
{
    (void)state;
    /* three members, the middle one empty, as `cat a.gz b.gz c.gz` makes */
    size_t n1, n2, n3;
    unsigned char *m1 = gzip_bytes(g_text, 300000, &n1);
    unsigned char *m2 = gzip_bytes("", 0, &n2);
    unsigned char *m3 = gzip_bytes(g_big, 100000, &n3);
    unsigned char *cat = malloc(n1 + n2 + n3);
    unsigned char *want = malloc(400000);
    assert_non_null(cat);
    assert_non_null(want);
    memcpy(cat, m1, n1);
    memcpy(cat + n1, m2, n2);
    memcpy(cat + n1 + n2, m3, n3);
    memcpy(want, g_text, 300000);
    memcpy(want + 300000, g_big, 100000);
    write_file("two.gz", cat, n1 + n2 + n3);

    const char *path = tu_at("two.gz");
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_OK);
    expect_content(s, want, 400000);
    ef__stream_close(s);
    /* the same from memory */
    assert_int_equal(
        ef__stream_open_memory(&s, cat, n1 + n2 + n3, "cat.gz", NULL, &err),
        EF_OK);
    expect_content(s, want, 400000);
    ef__stream_close(s);
    free(m1);
    free(m2);
    free(m3);
    free(cat);
    free(want);
}

static void test_gzip_truncated(void **state)
{
    (void)state;
    size_t cut = g_gz_size / 2;
    write_file("cut.gz", g_gz, cut);
    const char *path = tu_at("cut.gz");
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_OK);
    unsigned char *buf = malloc(TEXT_SIZE + 300000);
    assert_non_null(buf);
    size_t total = 0;
    int rc = read_pieces(s, buf, TEXT_SIZE + 300000, &total, &err);
    assert_int_equal(rc, EF_EFORMAT);
    assert_true(total > 0 && total < TEXT_SIZE);
    assert_true(memcmp(buf, g_text, total) == 0); /* what came was right */
    char want[128];
    snprintf(want, sizeof want, "truncated after %zu compressed bytes", cut);
    expect_msg(&err, path);
    expect_msg(&err, want);
    ef__stream_close(s);

    /* damage in the middle: a format error naming a compressed offset */
    unsigned char *bad = malloc(g_gz_size);
    assert_non_null(bad);
    memcpy(bad, g_gz, g_gz_size);
    for (size_t i = g_gz_size / 3; i < g_gz_size / 3 + 64; i++)
        bad[i] ^= 0x5a;
    assert_int_equal(
        ef__stream_open_memory(&s, bad, g_gz_size, "bad.gz", NULL, &err),
        EF_OK);
    rc = read_pieces(s, buf, TEXT_SIZE + 300000, &total, &err);
    assert_int_equal(rc, EF_EFORMAT);
    expect_msg(&err, "bad.gz: corrupt gzip data near compressed offset");
    ef__stream_close(s);

    /* a gzip header and nothing more */
    assert_int_equal(
        ef__stream_open_memory(&s, g_gz, 10, "head.gz", NULL, &err), EF_OK);
    rc = read_pieces(s, buf, TEXT_SIZE + 300000, &total, &err);
    assert_int_equal(rc, EF_EFORMAT);
    expect_msg(&err, "head.gz: gzip stream truncated after 10 compressed");
    ef__stream_close(s);

    /* junk after the last member is not taken for another member: the
     * data is all there, then the error says where the junk starts */
    free(bad);
    bad = malloc(g_gz_size + 4);
    assert_non_null(bad);
    memcpy(bad, g_gz, g_gz_size);
    memcpy(bad + g_gz_size, "junk", 4);
    assert_int_equal(
        ef__stream_open_memory(&s, bad, g_gz_size + 4, "junk.gz", NULL, &err),
        EF_OK);
    rc = read_pieces(s, buf, TEXT_SIZE + 300000, &total, &err);
    assert_int_equal(rc, EF_EFORMAT);
    assert_int_equal(total, TEXT_SIZE);
    assert_true(memcmp(buf, g_text, TEXT_SIZE) == 0);
    snprintf(want, sizeof want, "(in the member starting at %zu)", g_gz_size);
    expect_msg(&err, "junk.gz: corrupt gzip data near compressed offset");
    expect_msg(&err, want);
    ef__stream_close(s);
    free(bad);
    free(buf);
}

/* gzip cannot seek: inflated from the start, the bytes before the
 * offset dropped, whether the magic is sniffed or the kind is given. */
static void test_open_at_gzip(void **state)
{
    (void)state;
    const char *path = tu_at("text.gz");
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    for (int gz = -1; gz <= 1; gz += 2) {
        o.compression = gz;
        assert_int_equal(expect_from(path, &o, 1000001, g_text, TEXT_SIZE),
                         g_gz_size);
        assert_int_equal(expect_from(path, &o, TEXT_SIZE, g_text, TEXT_SIZE),
                         g_gz_size);
        /* the end counts inflated bytes too */
        expect_range(path, &o, 1000001, 1000301, g_text, TEXT_SIZE);
    }
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open_at(&s, path, NULL, TEXT_SIZE + 5, &err),
                     EF_EFORMAT);
    assert_null(s);
    expect_msg(&err, path);
    expect_msg(&err, "cannot start reading at offset 2000005: the data ends "
                     "at offset 2000000");
}

#else /* !EF_TEST_HAVE_ZLIB */

static void test_gzip_unsupported(void **state)
{
    (void)state;
    static const unsigned char gz[] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3};
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(
        ef__stream_open_memory(&s, gz, sizeof gz, "x.gz", NULL, &err), EF_OK);
    unsigned char b[4];
    size_t got;
    assert_int_equal(ef__stream_read(s, b, sizeof b, &got, &err),
                     EF_EUNSUPPORTED);
    expect_msg(&err, "x.gz");
    expect_msg(&err, "zlib1g-dev");
    ef__stream_close(s);
}

#endif /* EF_TEST_HAVE_ZLIB */

#ifdef EF_TEST_HAVE_ZSTD

/* data[0, n) as one zstd frame, in a malloc'd buffer. */
static unsigned char *zstd_bytes(const void *data, size_t n, size_t *out_n)
{
    size_t cap = ZSTD_compressBound(n);
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    *out_n = ZSTD_compress(out, cap, data, n, 3);
    assert_false(ZSTD_isError(*out_n));
    return out;
}

/* Sniffed or given, whole or from an offset, in several frames: the
 * bytes that went in; truncation and damage name the place. */
static void test_zstd(void **state)
{
    (void)state;
    size_t zn;
    unsigned char *z = zstd_bytes(g_text, TEXT_SIZE, &zn);
    write_file("text.zst", z, zn);
    const char *path = tu_at("text.zst");
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, path, NULL, &err), EF_OK);
    expect_content(s, g_text, TEXT_SIZE);
    assert_int_equal(ef__stream_compression(s), EF__COMP_ZSTD);
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    assert_int_equal(st.raw_bytes, zn);
    ef__stream_close(s);
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    for (int c = EF__COMP_SNIFF; c <= EF__COMP_ZSTD; c += 3) {
        o.compression = c;
        assert_int_equal(expect_from(path, &o, 1000001, g_text, TEXT_SIZE), zn);
        expect_range(path, &o, 1000001, 1000301, g_text, TEXT_SIZE);
    }

    /* two frames, as `cat a.zst b.zst` makes, from memory */
    size_t n2;
    unsigned char *z2 = zstd_bytes(g_big, 100000, &n2);
    unsigned char *cat = malloc(zn + n2), *want = malloc(TEXT_SIZE + 100000);
    assert_non_null(cat);
    assert_non_null(want);
    memcpy(cat, z, zn);
    memcpy(cat + zn, z2, n2);
    memcpy(want, g_text, TEXT_SIZE);
    memcpy(want + TEXT_SIZE, g_big, 100000);
    assert_int_equal(
        ef__stream_open_memory(&s, cat, zn + n2, "cat.zst", NULL, &err), EF_OK);
    expect_content(s, want, TEXT_SIZE + 100000);
    ef__stream_close(s);

    /* cut in the middle of the second frame */
    unsigned char *buf = malloc(TEXT_SIZE + 400000);
    assert_non_null(buf);
    size_t total;
    assert_int_equal(
        ef__stream_open_memory(&s, cat, zn + n2 / 2, "cut.zst", NULL, &err),
        EF_OK);
    assert_int_equal(read_pieces(s, buf, TEXT_SIZE + 400000, &total, &err),
                     EF_EFORMAT);
    assert_true(total >= TEXT_SIZE && total < TEXT_SIZE + 100000);
    assert_true(memcmp(buf, want, total) == 0); /* what came was right */
    char msg[128];
    snprintf(msg, sizeof msg,
             "cut.zst: zstd stream truncated after %zu compressed bytes",
             zn + n2 / 2);
    expect_msg(&err, msg);
    ef__stream_close(s);

    /* damage: a format error naming a compressed offset */
    for (size_t i = zn / 3; i < zn / 3 + 64; i++)
        cat[i] ^= 0x5a;
    assert_int_equal(ef__stream_open_memory(&s, cat, zn, "bad.zst", NULL, &err),
                     EF_OK);
    assert_int_equal(read_pieces(s, buf, TEXT_SIZE + 400000, &total, &err),
                     EF_EFORMAT);
    expect_msg(&err, "bad.zst: corrupt zstd data near compressed offset");
    ef__stream_close(s);

    /* a bomb: all zeros compress far past max_inflate */
    size_t zeros = EF__INFLATE_FREE + (8u << 20), bn;
    unsigned char *zero = calloc(zeros, 1);
    assert_non_null(zero);
    unsigned char *bomb = zstd_bytes(zero, zeros, &bn);
    o.compression = EF__COMP_SNIFF;
    o.max_inflate = 100;
    assert_int_equal(ef__stream_open_memory(&s, bomb, bn, "bomb.zst", &o, &err),
                     EF_OK);
    unsigned char *big = malloc(zeros + 300000);
    assert_non_null(big);
    assert_int_equal(read_pieces(s, big, zeros + 300000, &total, &err),
                     EF_EFORMAT);
    expect_msg(&err, "bomb.zst: zstd data inflates to");
    expect_msg(&err, "max_inflate");
    ef__stream_close(s);
    free(big);
    free(bomb);
    free(zero);
    free(buf);
    free(cat);
    free(want);
    free(z2);
    free(z);
}

#endif /* EF_TEST_HAVE_ZSTD */

/* ---- HTTP ---------------------------------------------------------- */

#ifdef EF_TEST_HAVE_CURL

static ef__stream_opts opts_with(int tries, double timeout_s, double backoff_s)
{
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.tries = tries;
    o.timeout_s = timeout_s;
    o.backoff_s = backoff_s;
    return o;
}

typedef struct {
    pid_t pid;
    int port;
} server;

/* Starts http_server.py on tu_dir() with the extra arguments (NULL-ended);
 * waits until it says its port. */
static server server_start(const char *const *extra)
{
    static int serial;
    /* a missing interpreter fails the test: a skip here once hid every
     * HTTP case */
    if (access(EF_TEST_PYTHON, X_OK) != 0)
        fail_msg("%s cannot be run: the HTTP tests need it (set "
                 "EF_TEST_PYTHON)",
                 EF_TEST_PYTHON);
    char port_file[512], name[32];
    snprintf(name, sizeof name, "port.%d", serial++);
    snprintf(port_file, sizeof port_file, "%s", tu_at(name));
    const char *argv[24];
    int k = 0;
    argv[k++] = EF_TEST_PYTHON;
    argv[k++] = EF_TEST_HTTP_SERVER;
    argv[k++] = "--root";
    argv[k++] = tu_dir();
    argv[k++] = "--port-file";
    argv[k++] = port_file;
    if (!getenv("EF_TEST_HTTP_LOG"))
        argv[k++] = "--quiet";
    for (; extra && *extra; extra++) {
        assert_true(k < 23);
        argv[k++] = *extra;
    }
    argv[k] = NULL;
    server sv = {-1, 0};
    sv.pid = fork();
    assert_true(sv.pid >= 0);
    if (sv.pid == 0) {
        /* a failed assertion skips server_stop: the server must not
         * outlive the test (it would also hold ctest's output pipe) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(argv[0], (char *const *)(uintptr_t)argv);
        _exit(127);
    }
    double t0 = tu_now_s();
    while (tu_now_s() - t0 < 20) {
        FILE *f = fopen(port_file, "r");
        if (f) {
            int ok = fscanf(f, "%d", &sv.port) == 1;
            fclose(f);
            unlink(port_file);
            if (ok && sv.port > 0)
                return sv;
        }
        int status;
        if (waitpid(sv.pid, &status, WNOHANG) == sv.pid)
            fail_msg("%s exited before listening (status %d)",
                     EF_TEST_HTTP_SERVER, status);
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    kill(sv.pid, SIGKILL);
    waitpid(sv.pid, NULL, 0);
    fail_msg("%s did not write its port within 20 s", EF_TEST_HTTP_SERVER);
    return sv;
}

static void server_stop(server *sv)
{
    if (sv->pid > 0) {
        kill(sv->pid, SIGTERM);
        waitpid(sv->pid, NULL, 0);
        sv->pid = -1;
    }
}

static void url_of(char *out, size_t cap, const server *sv, const char *name)
{
    snprintf(out, cap, "http://127.0.0.1:%d/%s", sv->port, name);
}

/* Opens `name` on the server and checks it reads back as want[0, n);
 * returns the number of retries. */
static uint64_t http_expect(const server *sv, const char *name,
                            const ef__stream_opts *o, const unsigned char *want,
                            size_t n)
{
    char url[128];
    url_of(url, sizeof url, sv, name);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__stream_open(&s, url, o, &err);
    if (rc != EF_OK)
        fail_msg("open %s: %s", url, err.msg);
    expect_content(s, want, n);
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    ef__stream_close(s);
    return st.retries;
}

/* Cancels a read that runs past WATCHDOG_S, so that a fault the stream
 * fails to time out ends the test (as a failure) instead of hanging it. */
#define WATCHDOG_S 15.0

typedef struct {
    atomic_int flag; /* the stream's cancel flag */
    atomic_int stop; /* the read is over: the watchdog may go */
} watchdog;

static void *watch(void *arg)
{
    watchdog *w = arg;
    double t0 = tu_now_s();
    while (!atomic_load(&w->stop) && tu_now_s() - t0 < WATCHDOG_S) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&w->flag, 1);
    return NULL;
}

/* Reads `name` from a server started with `args` until a read fails, with
 * a watchdog; checks that what was handed out before is g_big's start (or
 * all of it, for big.bin read to the end). Returns the failing status;
 * *total, *dt (seconds) and *st describe the read, err the failure. */
static int http_read_failing(const char *const *args, ef__stream_opts o,
                             ef__err *err, size_t *total, double *dt,
                             ef__stream_stats *st, char *url, size_t url_cap)
{
    server sv = server_start(args);
    url_of(url, url_cap, &sv, "big.bin");
    watchdog w;
    atomic_init(&w.flag, 0);
    atomic_init(&w.stop, 0);
    o.cancelled = &w.flag;
    ef__stream *s = NULL;
    ef__err_clear(err);
    assert_int_equal(ef__stream_open(&s, url, &o, err), EF_OK);
    unsigned char *buf = malloc(BIG_SIZE);
    assert_non_null(buf);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, watch, &w), 0);
    double t0 = tu_now_s();
    int rc = read_pieces(s, buf, BIG_SIZE, total, err);
    *dt = tu_now_s() - t0;
    atomic_store(&w.stop, 1);
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_true(memcmp(buf, g_big, *total) == 0);
    ef__stream_get_stats(s, st);
    ef__stream_close(s);
    free(buf);
    server_stop(&sv);
    if (rc == EF_ECANCELED)
        fail_msg("the watchdog stopped the read after %.1f s (%zu bytes): %s",
                 *dt, *total, err->msg);
    return rc;
}

/* ---- HTTP reads that succeed: the table -------------------------- */

/* Stands for the retries a server cutting every `cut` bytes causes: one
 * per reply after the first, over the bytes it serves. */
#define RETRIES_PER_CUT (-1)

typedef struct {
    const char *name;
    const char *args[8]; /* http_server.py's, NULL-ended */
    int tries;
    double timeout_s, backoff_s;
    const char *file; /* read from the server: big.bin, small.bin ... */
    long retries;     /* counted while reading it, or RETRIES_PER_CUT */
    size_t cut;       /* with RETRIES_PER_CUT: the --cut-every */
    double min_s;     /* the read takes at least this long (backoffs) */
} http_read_case;

static const http_read_case k_http_reads[] = {
    {.name = "test_http_plain",
     .tries = 1,
     .timeout_s = 10,
     .backoff_s = 0.01,
     .file = "big.bin",
     .retries = 0},
    {.name = "test_http_plain_empty",
     .tries = 1,
     .timeout_s = 10,
     .backoff_s = 0.01,
     .file = "empty.bin",
     .retries = 0},
    /* every reply carries 300000 bytes: 17 replies, 16 of them retries */
    {.name = "test_http_cuts",
     .args = {"--cut-every", "300000"},
     .tries = 30,
     .timeout_s = 10,
     .file = "big.bin",
     .retries = BIG_SIZE / 300000},
    /* two backoffs: 0.05 s, then 0.1 s */
    {.name = "test_http_fail_first",
     .args = {"--fail-first", "2"},
     .tries = 5,
     .timeout_s = 10,
     .backoff_s = 0.05,
     .file = "big.bin",
     .retries = 2,
     .min_s = 0.15},
    /* each 200 reply starts at 0; the stream drops what it already has and
     * gets 300000 new bytes before the next cut */
    {.name = "test_http_ignore_range",
     .args = {"--ignore-range", "--cut-every", "300000"},
     .tries = 10,
     .timeout_s = 10,
     .file = "small.bin",
     .retries = SMALL_SIZE / 300000},
    /* 17 cuts with tries=2: each attempt delivers data, so none of them
     * counts against the budget and the whole file comes */
    {.name = "test_http_progress_resets_tries",
     .args = {"--cut-every", "300000"},
     .tries = 2,
     .timeout_s = 10,
     .file = "big.bin",
     .retries = (BIG_SIZE - 1) / 300000},
#ifdef EF_TEST_HAVE_ZLIB
    /* inflated on the fly, also across resumed replies */
    {.name = "test_http_gzip",
     .args = {"--cut-every", "100000"},
     .tries = 100,
     .timeout_s = 10,
     .file = "text.gz",
     .retries = RETRIES_PER_CUT,
     .cut = 100000},
#endif
    /* The first reply is cut at 300000 bytes; the 206 to the range request
     * that follows carries 1000 bytes past its Content-Range. Those are
     * dropped, that attempt counts as failed, and the next one (a 416 at
     * the end of the file) shows the data is complete: every byte right,
     * none extra. */
    {.name = "test_http_range_overrun",
     .args = {"--cut-first", "300000", "--range-overrun", "1000"},
     .tries = 3,
     .timeout_s = 10,
     .file = "big.bin",
     .retries = 2},
};

/* What a file of the temporary directory should read back as (*want, *n;
 * text.gz inflated), and its size on the server (*served). */
static void body_of(const char *file, const unsigned char **want, size_t *n,
                    size_t *served)
{
    if (strcmp(file, "big.bin") == 0) {
        *want = g_big;
        *n = *served = BIG_SIZE;
    } else if (strcmp(file, "small.bin") == 0) {
        *want = g_small;
        *n = *served = SMALL_SIZE;
    } else if (strcmp(file, "empty.bin") == 0) {
        *want = g_big;
        *n = *served = 0;
#ifdef EF_TEST_HAVE_ZLIB
    } else if (strcmp(file, "text.gz") == 0) {
        *want = g_text;
        *n = TEXT_SIZE;
        *served = g_gz_size;
#endif
    } else {
        fail_msg("no test data called %s", file);
    }
}

/* One row of k_http_reads: the file reads back whole and right, with the
 * retries and the time the row says. */
static void test_http_read(void **state)
{
    const http_read_case *c = *state;
    const unsigned char *want = NULL;
    size_t n = 0, served = 0;
    body_of(c->file, &want, &n, &served);
    uint64_t retries = (uint64_t)c->retries;
    if (c->retries == RETRIES_PER_CUT) {
        assert_true(c->cut > 0 && served > 0);
        retries = (served - 1) / c->cut;
    }
    server sv = server_start(c->args);
    ef__stream_opts o = opts_with(c->tries, c->timeout_s, c->backoff_s);
    double t0 = tu_now_s();
    assert_int_equal(http_expect(&sv, c->file, &o, want, n), retries);
    assert_true(tu_now_s() - t0 >= c->min_s);
    server_stop(&sv);
}

/* ---- HTTP reads that fail: the table ------------------------------ */

typedef struct {
    const char *name;
    const char *args[8]; /* http_server.py's, NULL-ended */
    int tries;
    double timeout_s, backoff_s;
    size_t total_min, total_max; /* bytes of big.bin handed out first */
    const char *msgs[3];         /* in the message besides the URL */
    long retries;                /* counted, or -1: not checked */
    double min_s, max_s;         /* the read's seconds, when max_s > 0 */
    /* further checks of the message, or NULL */
    void (*check)(const ef__err *err, const char *url);
} http_fail_case;

/* The redirect loop's message names the URL that redirects to itself. */
static void expect_redirect_again(const ef__err *err, const char *url)
{
    char again[300];
    snprintf(again, sizeof again, "%s redirects again to %s", url, url);
    expect_msg(err, again);
}

static const http_fail_case k_http_fails[] = {
    /* three replies of 300000 bytes, then the server answers 503 only;
     * everything received before giving up is handed out, and right */
    {.name = "test_http_give_up",
     .args = {"--cut-every", "300000", "--fail-from", "3"},
     .tries = 3,
     .timeout_s = 10,
     .backoff_s = 0.01,
     .total_min = 900000,
     .total_max = 900000,
     .msgs = {"giving up at byte 900000 after 3 tries in a row "
              "without progress (5 in all)",
              "HTTP status 503"}, /* the last failure */
     .retries = 4},
    /* A cache that answers a range with bytes from before it: refused,
     * since taking them would repeat data. */
    {.name = "test_http_wrong_range",
     .args = {"--cut-every", "300000", "--range-shift", "1000"},
     .tries = 3,
     .timeout_s = 10,
     .total_min = 300000,
     .total_max = 300000,
     .msgs = {"giving up at byte 300000 after 3 tries in a row",
              "HTTP 206 for bytes 299000-5000010, expected a range "
              "starting at 300000"},
     .retries = -1},
    /* tries=1: the stall itself ends the read, in its own words */
    {.name = "test_http_stall_timeout",
     .args = {"--stall-after", "100000"},
     .tries = 1,
     .timeout_s = 0.3,
     .backoff_s = 0.01,
     .total_min = 100000,
     .total_max = 100000,
     .msgs = {"no data for 0.3 s"},
     .retries = -1},
    /* the first reply stalls after 100000 bytes; then the server fails */
    {.name = "test_http_stall",
     .args = {"--stall-after", "100000", "--fail-from", "1"},
     .tries = 2,
     .timeout_s = 0.3,
     .backoff_s = 0.01,
     .total_min = 100000,
     .total_max = 100000,
     .msgs = {"giving up at byte 100000 after 2 tries in a row"},
     .retries = 1,
     .min_s = 0.25,
     .max_s = 10},
    /* A server that sends a header line every 0.5 s and never ends them:
     * the header bytes must not count as progress for ever. */
    {.name = "test_http_slow_headers",
     .args = {"--slow-headers", "0.5"},
     .tries = 1,
     .timeout_s = 1,
     .backoff_s = 0.01,
     .msgs = {"giving up at byte 0 after 1 try",
              "headers did not complete within 1 s"},
     .retries = -1,
     .min_s = 0.9,
     .max_s = WATCHDOG_S},
    /* A body of one byte every 0.5 s: a stall, though bytes keep coming;
     * the bytes that came were handed out. */
    {.name = "test_http_slow_body",
     .args = {"--slow-body", "0.5"},
     .tries = 1,
     .timeout_s = 1,
     .backoff_s = 0.01,
     .total_max = 19,
     .msgs = {"giving up at byte", "body slower than 1024 bytes/s for 1"},
     .retries = -1,
     .min_s = 0.9,
     .max_s = WATCHDOG_S},
    /* A 302 to itself: the message names the redirects, not whatever curl
     * wrote first into its error buffer on the way. */
    {.name = "test_http_redirect_loop",
     .args = {"--redirect-loop"},
     .tries = 3,
     .timeout_s = 10,
     .backoff_s = 0.01,
     .msgs = {"too many redirects: 10 followed (the limit)", "not retried"},
     .retries = 0,
     .check = expect_redirect_again},
    /* A 10 MB header line: the server's fault (EF_EIO), not this process
     * running out of memory. */
    {.name = "test_http_huge_header",
     .args = {"--huge-header", "10000000"},
     .tries = 3,
     .timeout_s = 10,
     .backoff_s = 0.01,
     .msgs = {"the server sent a header line larger than curl accepts",
              "not retried"},
     .retries = 0},
};

/* One row of k_http_fails: reading big.bin ends in EF_EIO naming the URL,
 * after the bytes, in the time, with the retries and the words the row
 * says. */
static void test_http_fail(void **state)
{
    const http_fail_case *c = *state;
    ef__err err;
    ef__stream_stats st;
    char url[128];
    size_t total;
    double dt;
    int rc = http_read_failing(c->args,
                               opts_with(c->tries, c->timeout_s, c->backoff_s),
                               &err, &total, &dt, &st, url, sizeof url);
    if (rc != EF_EIO)
        fail_msg("%s: status %s, expected EF_EIO: %s", c->name,
                 ef_status_name(rc), err.msg);
    if (total < c->total_min || total > c->total_max)
        fail_msg("%s: %zu bytes before the failure, expected %zu to %zu",
                 c->name, total, c->total_min, c->total_max);
    if (c->max_s > 0 && !(dt >= c->min_s && dt < c->max_s))
        fail_msg("%s: the read took %.2f s, expected %.2f to %.2f", c->name, dt,
                 c->min_s, c->max_s);
    expect_msg(&err, url);
    for (size_t i = 0; i < sizeof c->msgs / sizeof c->msgs[0] && c->msgs[i];
         i++)
        expect_msg(&err, c->msgs[i]);
    if (c->check)
        c->check(&err, url);
    if (c->retries >= 0)
        assert_int_equal(st.retries, (uint64_t)c->retries);
}

/* ---- HTTP cases of their own --------------------------------------- */

static void test_http_not_found(void **state)
{
    (void)state;
    server sv = server_start(NULL);
    char url[128];
    url_of(url, sizeof url, &sv, "missing.bin");
    ef__stream_opts o = opts_with(5, 10, 1.0);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
    double t0 = tu_now_s();
    unsigned char b[16];
    size_t got = 7;
    assert_int_equal(ef__stream_read(s, b, sizeof b, &got, &err), EF_EIO);
    assert_int_equal(got, 0);
    assert_true(tu_now_s() - t0 < 0.9); /* no 1 s backoff: no retry */
    expect_msg(&err, url);
    expect_msg(&err, "404");
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    assert_int_equal(st.retries, 0);
    /* the failure stays */
    ef__err_clear(&err);
    assert_int_equal(ef__stream_read(s, b, sizeof b, &got, &err), EF_EIO);
    expect_msg(&err, "404");
    ef__stream_close(s);
    server_stop(&sv);
}

/* The file changes size between two attempts: the bytes handed out may no
 * longer belong to it, so the stream fails rather than splice. Shrunk to
 * 350000 bytes the retry gets a 206 with the new size; shrunk to exactly
 * the bytes read, a 416 that must not pass for the end of the data. */
static void test_http_changed(void **state)
{
    (void)state;
    const char *args[] = {"--cut-every", "300000", NULL};
    server sv = server_start(args);
    char url[128];
    url_of(url, sizeof url, &sv, "changing.bin");
    static const size_t shrink_to[] = {350000, 300000};
    for (int k = 0; k < 2; k++) {
        write_file("changing.bin", g_big, 400000);
        ef__stream_opts o = opts_with(5, 10, 0);
        ef__stream *s = NULL;
        ef__err err;
        ef__err_clear(&err);
        assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
        unsigned char *buf = malloc(300000);
        assert_non_null(buf);
        /* exactly what the first reply carried; the cut comes next */
        assert_int_equal(ef__stream_read_full(s, buf, 300000, "head", &err),
                         EF_OK);
        assert_true(memcmp(buf, g_big, 300000) == 0);
        write_file("changing.bin", g_big, shrink_to[k]);
        size_t got = 0;
        assert_int_equal(ef__stream_read(s, buf, 1000, &got, &err), EF_EIO);
        assert_int_equal(got, 0);
        expect_msg(&err, url);
        expect_msg(&err, "the resource changed between attempts");
        ef__stream_stats st;
        ef__stream_get_stats(s, &st);
        assert_int_equal(st.retries, 1); /* no retry after that */
        ef__stream_close(s);
        free(buf);
    }
    server_stop(&sv);
}

/* A URL opened part way: plain data is asked for from the offset on
 * (the bytes before are not downloaded), also from a server that
 * ignores Range and a server that cuts; data of unknown kind is read
 * from the start, where the gzip magic would be. Past the end, the
 * message gives the size. */
static void test_http_open_at(void **state)
{
    (void)state;
    const char *log = tu_at("open_at.log");
    unlink(log);
    const char *const plain[] = {"--request-log", log, NULL};
    static const char *const ignore[] = {"--ignore-range", NULL};
    static const char *const cuts[] = {"--cut-every", "300000", NULL};
    const char *const *servers[] = {plain, ignore, cuts};
    for (int k = 0; k < 3; k++) {
        server sv = server_start(servers[k]);
        char url[128];
        url_of(url, sizeof url, &sv, "big.bin");
        ef__stream_opts o = opts_with(30, 10, 0.01);
        o.compression = 0;
        /* (a 200 to a Range request sends the head too: dropped, and not
         * counted, as with a retry) */
        assert_int_equal(expect_from(url, &o, 3000000, g_big, BIG_SIZE),
                         BIG_SIZE - 3000000);
        assert_int_equal(expect_from(url, &o, BIG_SIZE, g_big, BIG_SIZE), 0);
        if (k == 0) {
            o.compression = -1;
            assert_int_equal(expect_from(url, &o, 3000000, g_big, BIG_SIZE),
                             BIG_SIZE);
            o.compression = 0;
            ef__stream *s = NULL;
            ef__err err;
            ef__err_clear(&err);
            assert_int_equal(
                ef__stream_open_at(&s, url, &o, BIG_SIZE + 10, &err), EF_OK);
            unsigned char b[4];
            size_t got;
            assert_int_equal(ef__stream_read(s, b, 4, &got, &err), EF_EIO);
            expect_msg(&err, url);
            expect_msg(&err, "cannot read from byte 5000021: the resource "
                             "has 5000011 bytes (HTTP 416)");
            ef__stream_close(s);
            /* what was asked for, request by request */
            char lines[512] = "";
            FILE *f = fopen(log, "r");
            assert_non_null(f);
            size_t got_n = fread(lines, 1, sizeof lines - 1, f);
            lines[got_n] = '\0';
            fclose(f);
            assert_string_equal(lines, "GET /big.bin bytes=3000000-\n"
                                       "GET /big.bin bytes=5000011-\n"
                                       "GET /big.bin -\n"
                                       "GET /big.bin bytes=5000021-\n");
        }
        server_stop(&sv);
    }
}

/* Reads `log` (a server's --request-log) into out[cap] and empties it. */
static void take_log(const char *log, char *out, size_t cap)
{
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
    unlink(log);
}

/* A URL opened for a range of plain data is asked for that range alone,
 * again after a cut (from where it was cut), and it ends there also when
 * a server ignores Range and sends the whole file; data of unknown kind
 * is read from its start, with no end in the request (an end counts
 * inflated bytes), and still ends where asked. */
static void test_http_open_range(void **state)
{
    (void)state;
    const char *log = tu_at("open_range.log");
    unlink(log);
    const char *const plain[] = {"--request-log", log, NULL};
    const char *const cuts[] = {"--request-log", log, "--cut-every", "300",
                                NULL};
    const char *const ignore[] = {"--request-log", log, "--ignore-range", NULL};
    static const char *const want[] = {
        "GET /big.bin bytes=3000000-3000999\n"
        "GET /big.bin bytes=0-0\n"
        "GET /big.bin bytes=5000001-5000020\n"
        "GET /big.bin -\n",
        "GET /big.bin bytes=3000000-3000999\n"
        "GET /big.bin bytes=3000300-3000999\n"
        "GET /big.bin bytes=3000600-3000999\n"
        "GET /big.bin bytes=3000900-3000999\n"
        "GET /big.bin bytes=0-0\n"
        "GET /big.bin bytes=5000001-5000020\n",
        "GET /big.bin bytes=3000000-3000999\n",
    };
    const char *const *servers[] = {plain, cuts, ignore};
    for (int k = 0; k < 3; k++) {
        server sv = server_start(servers[k]);
        char url[128], lines[512];
        url_of(url, sizeof url, &sv, "big.bin");
        ef__stream_opts o = opts_with(30, 10, 0.01);
        o.compression = 0;
        uint64_t raw = expect_range(url, &o, 3000000, 3001000, g_big, BIG_SIZE);
        if (k < 2) {
            assert_int_equal(raw, 1000); /* nothing past the end came */
            expect_range(url, &o, 0, 1, g_big, BIG_SIZE);
            expect_range(url, &o, BIG_SIZE - 10, BIG_SIZE + 10, g_big,
                         BIG_SIZE);
        }
        if (k == 0) {
            o.compression = -1;
            assert_true(expect_range(url, &o, 3000000, 3001000, g_big,
                                     BIG_SIZE) >= 3001000);
        }
        server_stop(&sv);
        take_log(log, lines, sizeof lines);
        assert_string_equal(lines, want[k]);
    }
}

/* A request curl cannot even make is not retried. */
static void test_http_bad_url(void **state)
{
    (void)state;
    const char *url = "http://127.0.0.1:99999/x";
    ef__stream_opts o = opts_with(5, 10, 1.0);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
    unsigned char b[8];
    size_t got;
    double t0 = tu_now_s();
    assert_int_equal(ef__stream_read(s, b, sizeof b, &got, &err), EF_EIO);
    assert_true(tu_now_s() - t0 < 0.9);
    expect_msg(&err, url);
    expect_msg(&err, "not retried");
    ef__stream_stats st;
    ef__stream_get_stats(s, &st);
    assert_int_equal(st.retries, 0);
    ef__stream_close(s);
}

typedef struct {
    atomic_int flag;
    double set_at;
} canceller;

static void *cancel_later(void *arg)
{
    canceller *c = arg;
    struct timespec ts = {0, 300 * 1000 * 1000};
    nanosleep(&ts, NULL);
    c->set_at = tu_now_s();
    atomic_store(&c->flag, 1);
    return NULL;
}

static void test_http_cancel(void **state)
{
    (void)state;
    /* the first reply stalls after 100000 bytes; then the server fails */
    const char *args[] = {"--stall-after", "100000", "--fail-from", "1", NULL};
    server sv = server_start(args);
    char url[128];
    url_of(url, sizeof url, &sv, "big.bin");
    canceller c;
    atomic_init(&c.flag, 0);
    c.set_at = 0;
    ef__stream_opts o = opts_with(5, 30, 0.01);
    o.cancelled = &c.flag;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
    unsigned char *buf = malloc(BIG_SIZE);
    assert_non_null(buf);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
    size_t total = 0;
    int rc = read_pieces(s, buf, BIG_SIZE, &total, &err);
    double done = tu_now_s();
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(rc, EF_ECANCELED);
    assert_true(c.set_at > 0 && done - c.set_at < 1.0);
    assert_int_equal(total, 100000);
    expect_msg(&err, url);
    ef__stream_close(s);
    free(buf);
    server_stop(&sv);
}

/* Cancelling during the wait between tries (a 10 s backoff). */
static void test_http_cancel_backoff(void **state)
{
    (void)state;
    const char *args[] = {"--fail-first", "1", NULL};
    server sv = server_start(args);
    char url[128];
    url_of(url, sizeof url, &sv, "big.bin");
    canceller c;
    atomic_init(&c.flag, 0);
    c.set_at = 0;
    ef__stream_opts o = opts_with(5, 30, 10);
    o.cancelled = &c.flag;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &c), 0);
    unsigned char b[64];
    size_t got = 0;
    int rc = ef__stream_read(s, b, sizeof b, &got, &err);
    double done = tu_now_s();
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(rc, EF_ECANCELED);
    assert_true(c.set_at > 0 && done - c.set_at < 1.0);
    ef__stream_close(s);
    server_stop(&sv);
}

static void test_http_refused(void **state)
{
    (void)state;
    /* a port nobody listens on: bound, then released */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/x", ntohs(a.sin_port));
    ef__stream_opts o = opts_with(2, 5, 0.01);
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, url, &o, &err), EF_OK);
    unsigned char b[8];
    size_t got;
    assert_int_equal(ef__stream_read(s, b, sizeof b, &got, &err), EF_EIO);
    expect_msg(&err, url);
    expect_msg(&err, "giving up at byte 0 after 2 tries in a row");
    ef__stream_close(s);
}

static void test_http_bad_options(void **state)
{
    (void)state;
    ef__stream *s = (ef__stream *)&s;
    ef__err err;
    ef__err_clear(&err);
    ef__stream_opts o = opts_with(0, 10, 0.1);
    assert_int_equal(ef__stream_open(&s, "http://127.0.0.1:1/x", &o, &err),
                     EF_EINVAL);
    assert_null(s);
    expect_msg(&err, "tries must be at least 1, got 0");
    o = opts_with(3, -1, 0.1);
    assert_int_equal(ef__stream_open(&s, "http://127.0.0.1:1/x", &o, &err),
                     EF_EINVAL);
    expect_msg(&err, "timeout_s");
    o = opts_with(3, 1, -0.5);
    assert_int_equal(ef__stream_open(&s, "https://127.0.0.1:1/x", &o, &err),
                     EF_EINVAL);
    expect_msg(&err, "backoff_s");
}

#else /* !EF_TEST_HAVE_CURL */

static void test_http_unsupported(void **state)
{
    (void)state;
    ef__stream *s = NULL;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__stream_open(&s, "http://127.0.0.1:1/x", NULL, &err),
                     EF_EUNSUPPORTED);
    assert_null(s);
    expect_msg(&err, "http://127.0.0.1:1/x");
    expect_msg(&err, "libcurl4-openssl-dev");
}

#endif /* EF_TEST_HAVE_CURL */

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ef__map_regular: a file's bytes as a borrowed buffer, an empty file as
 * an empty buffer, and anything but a regular file refused by name. */
static void test_map_regular(void **state)
{
    (void)state;
    ef__err err = {0};
    ef_buffer *b = NULL;
    tu_write_file(tu_at("mapped.bin"), "0123456789", 10);
    assert_int_equal(ef__map_regular(tu_at("mapped.bin"), "a test file", &b,
                                     &err),
                     EF_OK);
    assert_int_equal(ef_buffer_size(b), 10);
    assert_memory_equal(ef_buffer_data(b), "0123456789", 10);
    assert_true(ef_buffer_is_borrowed(b));
    ef_buffer_release(b);
    tu_write_file(tu_at("empty.bin"), "", 0);
    assert_int_equal(
        ef__map_regular(tu_at("empty.bin"), "a test file", &b, &err), EF_OK);
    assert_int_equal(ef_buffer_size(b), 0);
    ef_buffer_release(b);
    assert_int_equal(ef__map_regular(tu_at("."), "a test file", &b, &err),
                     EF_EIO);
    assert_null(b);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(
        ef__map_regular(tu_at("no/such.bin"), "a test file", &b, &err), EF_EIO);
    assert_non_null(strstr(err.msg, "cannot open a test file"));
}

int main(void)
{
    /* the test server is local: never send its requests to a proxy */
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
    static const struct CMUnitTest own[] = {
        cmocka_unit_test(test_file_plain),
        cmocka_unit_test(test_map_regular),
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_read_full_and_skip),
        cmocka_unit_test(test_cancel_local),
        cmocka_unit_test(test_open_at_file),
        cmocka_unit_test(test_open_range_file),
#ifdef EF_TEST_HAVE_ZLIB
        cmocka_unit_test(test_open_at_gzip),
        cmocka_unit_test(test_gzip_file),
        cmocka_unit_test(test_gzip_members),
        cmocka_unit_test(test_gzip_truncated),
#else
        cmocka_unit_test(test_gzip_unsupported),
#endif
#ifdef EF_TEST_HAVE_ZSTD
        cmocka_unit_test(test_zstd),
#endif
#ifdef EF_TEST_HAVE_CURL
        cmocka_unit_test(test_http_not_found),
        cmocka_unit_test(test_http_open_at),
        cmocka_unit_test(test_http_open_range),
        cmocka_unit_test(test_http_changed),
        cmocka_unit_test(test_http_bad_url),
        cmocka_unit_test(test_http_cancel),
        cmocka_unit_test(test_http_cancel_backoff),
        cmocka_unit_test(test_http_refused),
        cmocka_unit_test(test_http_bad_options),
#else
        cmocka_unit_test(test_http_unsupported),
#endif
    };
#ifdef EF_TEST_HAVE_CURL
    /* each row of the HTTP tables runs as a test of its own name */
    struct CMUnitTest
        tests[COUNT(own) + COUNT(k_http_reads) + COUNT(k_http_fails)];
#else
    struct CMUnitTest tests[COUNT(own)];
#endif
    size_t n = 0;
    for (size_t i = 0; i < COUNT(own); i++)
        tests[n++] = own[i];
#ifdef EF_TEST_HAVE_CURL
    for (size_t i = 0; i < COUNT(k_http_reads); i++)
        tests[n++] = (struct CMUnitTest){
            .name = k_http_reads[i].name,
            .test_func = test_http_read,
            .initial_state = (void *)(uintptr_t)&k_http_reads[i]};
    for (size_t i = 0; i < COUNT(k_http_fails); i++)
        tests[n++] = (struct CMUnitTest){
            .name = k_http_fails[i].name,
            .test_func = test_http_fail,
            .initial_state = (void *)(uintptr_t)&k_http_fails[i]};
#endif
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
