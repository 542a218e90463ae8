/* SPDX-License-Identifier: Apache-2.0 */
/* Container formats and their sources: brace-expanded path lists, tar
 * (WebDataset grouping, pax and GNU long names, errors and on_error=skip,
 * shard order, cycle, parts), TFRecord (CRC-32C, framing, errors, gzip)
 * and CIFAR-10 (HWC conversion, errors). Fixtures are written to a
 * temporary directory by the tests themselves; the pax and GNU archives
 * are seeds of the tar fuzz corpus, made by Python's tarfile. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef EF_HAVE_ZLIB
#include <sys/resource.h>
#include <zlib.h>
#endif

#include "codec/tar_write.h"
#include "common/crc32c.h"
#include "core/alloc.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"
#include "io/paths.h"

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_formats");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* ---- fixtures ------------------------------------------------------ */

typedef struct {
    const char *name, *data;
} member;

static void write_tar(const char *path, const member *m, int n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    ef__err err;
    for (int i = 0; i < n; i++)
        if (ef__tar_write_member(f, m[i].name, m[i].data, strlen(m[i].data),
                                 &err) != EF_OK)
            fail_msg("%s", err.msg);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
}

/* Shard s of a set: `samples` samples "s<s>_<i>" with fields txt and cls. */
static void write_shard(const char *path, int s, int samples)
{
    member m[64];
    static char names[64][32], datas[64][32];
    assert_true(samples * 2 <= 64);
    for (int i = 0; i < samples; i++) {
        snprintf(names[2 * i], 32, "s%d_%d.txt", s, i);
        snprintf(datas[2 * i], 32, "text %d/%d", s, i);
        snprintf(names[2 * i + 1], 32, "s%d_%d.cls", s, i);
        snprintf(datas[2 * i + 1], 32, "%d", (s * 7 + i) % 10);
        m[2 * i] = (member){names[2 * i], datas[2 * i]};
        m[2 * i + 1] = (member){names[2 * i + 1], datas[2 * i + 1]};
    }
    write_tar(path, m, 2 * samples);
}

static size_t read_bytes(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* The text of a u8 field, NUL-terminated, in buf. */
static const char *text(const ef_sample *s, const char *field, char *buf,
                        size_t cap)
{
    ef_tensor t = tu_field(s, field);
    assert_int_equal(t.dtype, EF_U8);
    assert_int_equal(t.ndim, 1);
    assert_int_equal((size_t)t.shape[0], t.nbytes);
    assert_true(t.nbytes < cap);
    memcpy(buf, t.data, t.nbytes);
    buf[t.nbytes] = '\0';
    return buf;
}

/* A pipeline for `spec`, failing only when it is pulled. */
static ef_pipeline *pipeline(const char *spec, uint64_t seed, int skip)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, seed), EF_OK);
    if (skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* Pulls until the end or a failure; the final status. */
static int drain_ids(ef_pipeline *p, ef_sample_id *ids, int cap, int *n)
{
    *n = 0;
    for (;;) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc != EF_OK)
            return rc;
        assert_true(*n < cap);
        ids[(*n)++] = ef_sample_identity(s);
        ef_sample_free(s);
    }
}

static void expect_error(ef_pipeline *p, int status, const char *a,
                         const char *b)
{
    ef_sample_id ids[256];
    int n;
    int rc = drain_ids(p, ids, 256, &n);
    const char *msg = ef_pipeline_error(p);
    if (rc != status || (a && !strstr(msg, a)) || (b && !strstr(msg, b)))
        fail_msg("expected %s with '%s' and '%s', got %s: %s",
                 ef_status_name(status), a ? a : "", b ? b : "",
                 ef_status_name(rc), msg);
}

/* ---- paths --------------------------------------------------------- */

static void expect_names(const char *text_, const char *const *want, size_t n)
{
    ef__paths p;
    ef__err err;
    if (ef__paths_expand(text_, "test", &p, &err) != EF_OK)
        fail_msg("%s: %s", text_, err.msg);
    size_t count = 0;
    size_t bytes = 0, want_bytes = 0;
    assert_int_equal(ef__paths_count(text_, "test", &count, &bytes, &err),
                     EF_OK);
    assert_int_equal(count, n);
    for (size_t i = 0; i < n; i++)
        want_bytes += strlen(want[i]) + 1;
    assert_int_equal(bytes, want_bytes);
    assert_int_equal(p.n, n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(p.names[i], want[i]) != 0)
            fail_msg("%s: name %zu is '%s', expected '%s'", text_, i,
                     p.names[i], want[i]);
    ef__paths_free(&p);
}

static void expect_bad(const char *text_, const char *why)
{
    ef__paths p;
    ef__err err;
    ef__err_clear(&err);
    assert_int_equal(ef__paths_expand(text_, "tar: option 'urls'", &p, &err),
                     EF_ESPEC);
    assert_null(p.names);
    if (!strstr(err.msg, why) || !strstr(err.msg, "option 'urls'"))
        fail_msg("%s: message '%s' lacks '%s'", text_, err.msg, why);
}

static void test_paths(void **state)
{
    (void)state;
    static const char *const padded[] = {"a-000000.tar", "a-000001.tar",
                                         "a-000002.tar", "b.tar"};
    expect_names("a-{000000..000002}.tar  b.tar", padded, 4);
    static const char *const wider[] = {"x008", "x009", "x010"};
    expect_names("x{8..010}", wider, 3);
    static const char *const plain[] = {"9", "10", "11"};
    expect_names("{9..11}", plain, 3);
    static const char *const down[] = {"p3", "p2", "p1"};
    expect_names("p{3..1}", down, 3);
    static const char *const prod[] = {"tr-0", "tr-1", "va-0", "va-1"};
    expect_names("{tr,va}-{0..1}", prod, 4);
    static const char *const nest[] = {"x.t", "y1.t", "y2.t", "z"};
    expect_names("{x,y{1..2}}.t\tz\n", nest, 4);
    static const char *const empty_alt[] = {"ab", "a"};
    expect_names("a{b,}", empty_alt, 2);
    static const char *const url[] = {"http://h:80/d/s-0.tar",
                                      "http://h:80/d/s-1.tar"};
    expect_names("http://h:80/d/s-{0..1}.tar", url, 2);

    expect_bad("a-{0..3.tar", "'{' without its '}' in 'a-{0..3.tar'");
    expect_bad("a}b", "'}' without its '{' in 'a}b'");
    expect_bad("x{}", "empty '{}' in 'x{}'");
    expect_bad("{abc}", "neither a list {a,b} nor a range");
    expect_bad("{1..}", "in '{1..}'");
    expect_bad("{-1..3}", "in '{-1..3}'");
    expect_bad("   ", "no path or URL");
    expect_bad("{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}{0..9}",
               "more than 1000000 names");
    expect_bad("{0..999999} x{0..1}", "1000002 names");

    /* through the spec: double quotes protect the commas and spaces */
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "tar:urls=\"a-{0..3}.tar b.tar\""),
                     EF_OK);
    ef_pipeline_destroy(p);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, "tar:urls=\"s-{0..2.tar\""),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "'s-{0..2.tar'"));
    ef_pipeline_destroy(p);
}

/* ---- tar ----------------------------------------------------------- */

static void test_tar_writer_names(void **state)
{
    (void)state;
    char name[300];
    FILE *f = fopen(tu_at("names.tar"), "wb");
    assert_non_null(f);
    ef__err err;
    /* 150 + '/' + 99: fits with the prefix field */
    memset(name, 'd', 150);
    name[150] = '/';
    memset(name + 151, 'e', 95);
    strcpy(name + 246, ".dat");
    assert_int_equal(ef__tar_write_member(f, name, "x", 1, &err), EF_OK);
    /* 257 bytes, or no usable '/', cannot be stored */
    memset(name, 'a', 257);
    name[257] = '\0';
    assert_int_equal(ef__tar_write_member(f, name, "x", 1, &err), EF_EINVAL);
    assert_non_null(strstr(err.msg, "257 bytes"));
    name[101] = '\0';
    assert_int_equal(ef__tar_write_member(f, name, "x", 1, &err), EF_EINVAL);
    assert_int_equal(ef__tar_write_member(f, "", "x", 1, &err), EF_EINVAL);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    fclose(f);

    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("names.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    char buf[300], want[300];
    memset(want, 'd', 150);
    want[150] = '/';
    memset(want + 151, 'e', 95);
    want[246] = '\0';
    assert_string_equal(text(s, "__key__", buf, sizeof buf), want);
    assert_string_equal(text(s, "dat", buf, sizeof buf), "x");
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_tar_grouping(void **state)
{
    (void)state;
    static const member m[] = {
        {"a/b/x.seg.PNG", "png bytes"}, {"a/b/x.Cls", "3"},
        {"a/b/y.jpg", "jpeg"},          {"c.d/z.TXT", "zz"},
        {"c.d/z.json", "{}"},           {"e.f", ""},
    };
    write_tar(tu_at("group.tar"), m, 6);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("group.tar"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    char buf[128];
    static const char *const keys[] = {"a/b/x", "a/b/y", "c.d/z", "e"};
    static const int nfields[] = {4, 3, 4, 3};
    for (int i = 0; i < 4; i++) {
        ef_sample *s = tu_next(p);
        ef_sample_id id = ef_sample_identity(s);
        assert_int_equal(id.index, i); /* shard 0, position i */
        assert_int_equal(id.epoch, 0);
        assert_int_equal(ef_sample_field_count(s), nfields[i]);
        assert_string_equal(text(s, "__key__", buf, sizeof buf), keys[i]);
        assert_string_equal(text(s, "__url__", buf, sizeof buf),
                            tu_at("group.tar"));
        if (i == 0) {
            assert_string_equal(text(s, "seg.png", buf, sizeof buf),
                                "png bytes");
            assert_string_equal(text(s, "cls", buf, sizeof buf), "3");
        } else if (i == 1) {
            assert_string_equal(text(s, "jpg", buf, sizeof buf), "jpeg");
        } else if (i == 2) {
            assert_string_equal(text(s, "txt", buf, sizeof buf), "zz");
            assert_string_equal(text(s, "json", buf, sizeof buf), "{}");
        } else {
            assert_string_equal(text(s, "f", buf, sizeof buf), "");
        }
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_stage_stats st = tu_stage(p, "tar");
    assert_int_equal(st.items_out, 4);
    assert_true(tu_extra(&st, "shards") == 1);
    unsigned char whole[16384];
    size_t size = read_bytes(tu_at("group.tar"), whole, sizeof whole);
    assert_true(tu_extra(&st, "bytes") == (double)size);
    assert_true(tu_extra(&st, "retries") == 0);
    assert_true(tu_extra(&st, "MB/s") >= 0);
    ef_pipeline_destroy(p);
}

static void test_tar_long_names(void **state)
{
    (void)state;
    static const char *const seeds[] = {
        "seed-pax-long-names", "seed-gnu-long-names", "seed-ustar-prefix"};
    char want[256], buf[256];
    memset(want, 'd', 120);
    want[120] = '/';
    memset(want + 121, 'e', 60);
    strcpy(want + 181, "/k");
    for (int i = 0; i < 3; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "tar:urls=%s/%s", EF_TAR_CORPUS_DIR,
                 seeds[i]);
        ef_pipeline *p = tu_pipeline(spec, 0);
        ef_sample *s = tu_next(p);
        assert_string_equal(text(s, "__key__", buf, sizeof buf), want);
        assert_string_equal(text(s, "seg.png", buf, sizeof buf), "png");
        assert_string_equal(text(s, "txt", buf, sizeof buf), "text");
        ef_sample_free(s);
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
    /* pax `size` overrides the header's; pax global headers, directories,
     * links and FIFOs are skipped; sizes in base-256; pre-POSIX headers
     * without the ustar magic, and their directories (a trailing '/');
     * checksums summed as signed chars */
    static const char *const others[] = {
        "seed-pax-size-override", "seed-pax-global",  "seed-entries-skipped",
        "seed-base256-size",      "seed-v7-no-magic", "seed-signed-checksum",
        "seed-v7-directory"};
    static const char *const field[] = {"txt", "jpg", "txt", "txt",
                                        "txt", "txt", "txt"};
    static const char *const value[] = {
        "12345", "\xff\xd8jpeg0", "a", "xxxxx", "old", "s", "old"};
    for (int i = 0; i < 7; i++) {
        char spec[512];
        snprintf(spec, sizeof spec, "tar:urls=%s/%s", EF_TAR_CORPUS_DIR,
                 others[i]);
        ef_pipeline *p = tu_pipeline(spec, 0);
        ef_sample *s = tu_next(p);
        assert_string_equal(text(s, field[i], buf, sizeof buf), value[i]);
        ef_sample_free(s);
        tu_expect_end(p);
        ef_pipeline_destroy(p);
    }
}

/* Three good shards and two bad ones: g0 t1 g2 c3 g4. */
static void write_mixed_set(void)
{
    write_shard(tu_at("m-0.tar"), 0, 3);
    write_shard(tu_at("m-2.tar"), 2, 3);
    write_shard(tu_at("m-4.tar"), 4, 3);
    unsigned char buf[8192];
    write_shard(tu_at("m-1.tar"), 1, 3);
    size_t n = read_bytes(tu_at("m-1.tar"), buf, sizeof buf);
    assert_true(n > 1100);
    tu_write_file(tu_at("m-1.tar"), buf, 1100); /* cut inside the 2nd header */
    write_shard(tu_at("m-3.tar"), 3, 3);
    n = read_bytes(tu_at("m-3.tar"), buf, sizeof buf);
    buf[0] ^= 1; /* the first header's name: its checksum no longer holds */
    tu_write_file(tu_at("m-3.tar"), buf, n);
}

static void test_tar_errors(void **state)
{
    (void)state;
    write_mixed_set();
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s/m-1.tar,shuffle_shards=false",
             tu_dir());
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "tar: shard 0: ",
                 "m-1.tar: truncated tar header at offset 1024");
    tu_expect_once(ef_pipeline_error(p), "tar: shard 0: ");
    tu_expect_once(ef_pipeline_error(p), "m-1.tar");
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "tar:urls=%s/m-3.tar", tu_dir());
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "m-3.tar",
                 "bad tar header checksum at offset 0");
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "tar:urls=%s/m-9.tar", tu_dir());
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EIO, "m-9.tar: cannot open", NULL);
    ef_pipeline_destroy(p);

    /* under skip: the bad shards' unreadable rest is abandoned and counted
     * apart from bad samples, with the bytes left unread; every sample of
     * the good shards comes through */
    unsigned char buf[8192];
    uint64_t size3 = read_bytes(tu_at("m-3.tar"), buf, sizeof buf);
    for (int cycle = 1; cycle <= 3; cycle += 2) {
        snprintf(spec, sizeof spec, "tar:urls=\"%s/m-{0..4}.tar\",cycle=%d",
                 tu_dir(), cycle);
        p = pipeline(spec, 5, 1);
        ef_sample_id ids[64];
        int n;
        assert_int_equal(drain_ids(p, ids, 64, &n), EF_END);
        int seen[5][3] = {{0}};
        for (int i = 0; i < n; i++)
            seen[ids[i].index >> 32][ids[i].index & 0xffffffff]++;
        for (int s = 0; s < 5; s++)
            for (int k = 0; k < 3; k++)
                assert_int_equal(seen[s][k], s == 1 || s == 3 ? 0 : 1);
        /* (shard 1 is cut inside its first sample: nothing of it comes) */
        char why[512];
        assert_int_equal(ef_pipeline_skipped(p, NULL, 0), 0);
        assert_int_equal(ef_pipeline_abandoned(p, why, sizeof why), 2);
        /* m-1 was read to its end (1100 bytes) before its cut showed; m-3
         * failed at its first header, so all but that header is lost */
        char tail[96];
        snprintf(tail, sizeof tail, "shard abandoned at byte 512 of %llu",
                 (unsigned long long)size3);
        if (strstr(why, "m-1.tar"))
            assert_non_null(strstr(why, "shard abandoned at byte 1100 of 1100"));
        else
            assert_non_null(strstr(why, tail));
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(p, &ps);
        assert_int_equal(ps.abandoned, 2);
        assert_int_equal(ps.lost_bytes, size3 - 512);
        ef_stage_stats st = tu_stage(p, "tar");
        assert_int_equal(st.skipped, 0);
        assert_int_equal(st.abandoned, 2);
        assert_int_equal(st.lost_bytes, size3 - 512);
        ef_pipeline_destroy(p);
    }
}

static void test_tar_bad_samples(void **state)
{
    (void)state;
    static const member m[] = {
        {"a.jpg", "1"},
        {"b.jpg", "2"},
        {"b.JPG", "3"}, /* a second field "jpg": sample b is malformed */
        {"b.cls", "4"},
        {"c.image_class_label_text", "5"}, /* a 24-byte name is fine */
        {"d", "6"}, /* no field name */
        {"e.jpg", "7"},
    };
    write_tar(tu_at("bad.tar"), m, 7);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("bad.tar"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "member 'b.JPG' at offset 2048",
                 "a second field of the same name");
    /* the shard is named once, though the sample fails a layer below */
    tu_expect_once(ef_pipeline_error(p), "tar: shard 0: ");
    tu_expect_once(ef_pipeline_error(p), "bad.tar: ");
    ef_pipeline_destroy(p);

    p = pipeline(spec, 0, 1);
    ef_sample_id ids[16];
    int n;
    assert_int_equal(drain_ids(p, ids, 16, &n), EF_END);
    assert_int_equal(n, 3);
    static const int64_t want[] = {0, 2, 4}; /* a, c, e; b and d dropped */
    for (int i = 0; i < 3; i++)
        assert_int_equal(ids[i].index, want[i]);
    char why[512];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 2);
    tu_expect_once(why, "tar: shard 0: ");
    assert_non_null(strstr(why, "member 'b.JPG' at offset 2048"));
    ef_pipeline_destroy(p);
}

/* A sample that fails after the source (a bad image at decode) is named
 * by its shard and key, not only by its identity number. */
static void test_errors_name_file_and_key(void **state)
{
    (void)state;
    const member m[] = {{"cats/n01.png", "not a png at all"}};
    write_tar(tu_at("bad-image.tar"), m, 1);
    char spec[512], want[600];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | decode",
             tu_at("bad-image.tar"));
    snprintf(want, sizeof want,
             "decode: item 0 (epoch 0), file '%s', key 'cats/n01': ",
             tu_at("bad-image.tar"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, want, "png");
    ef_pipeline_destroy(p);
    /* skipped: the message kept for the skip names them too */
    p = pipeline(spec, 0, 1);
    expect_error(p, EF_END, NULL, NULL);
    char why[600];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 1);
    if (!strstr(why, want))
        fail_msg("'%s' lacks '%s'", why, want);
    ef_pipeline_destroy(p);
}

static void test_tar_gzip(void **state)
{
    (void)state;
#ifdef EF_HAVE_ZLIB
    /* .tar.gz shards are inflated on the fly (the stream sniffs the magic) */
    unsigned char buf[16384];
    write_shard(tu_at("z.tar"), 0, 4);
    size_t n = read_bytes(tu_at("z.tar"), buf, sizeof buf);
    gzFile gz = gzopen(tu_at("z.tar.gz"), "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, buf, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("z.tar.gz"));
    ef_pipeline *p = tu_pipeline(spec, 0);
    char text_buf[64];
    for (int i = 0; i < 4; i++) {
        ef_sample *s = tu_next(p);
        char want[32];
        snprintf(want, sizeof want, "text 0/%d", i);
        assert_string_equal(text(s, "txt", text_buf, sizeof text_buf), want);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
#else
    skip();
#endif
}

/* Six shards of three samples. */
static void write_order_set(void)
{
    for (int s = 0; s < 6; s++) {
        char name[32];
        snprintf(name, sizeof name, "o-%d.tar", s);
        write_shard(tu_at(name), s, 3);
    }
}

/* The shards in the order their first samples came, per epoch; checks
 * that each epoch has every sample exactly once. */
static void shard_orders(const char *opts, uint64_t seed, int epochs,
                         int order[][6])
{
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s/o-{0..5}.tar\"%s | repeat:%d",
             tu_dir(), opts, epochs);
    ef_pipeline *p = pipeline(spec, seed, 0);
    ef_sample_id ids[128];
    int n;
    assert_int_equal(drain_ids(p, ids, 128, &n), EF_END);
    assert_int_equal(n, 18 * epochs);
    for (int e = 0; e < epochs; e++) {
        int seen[6][3] = {{0}}, k = 0, first[6] = {0};
        for (int i = 18 * e; i < 18 * (e + 1); i++) {
            assert_int_equal(ids[i].epoch, e);
            int64_t s = ids[i].index >> 32, pos = ids[i].index & 0xffffffff;
            assert_true(s >= 0 && s < 6 && pos >= 0 && pos < 3);
            seen[s][pos]++;
            if (!first[s]++)
                order[e][k++] = (int)s;
        }
        for (int s = 0; s < 6; s++)
            for (int j = 0; j < 3; j++)
                assert_int_equal(seen[s][j], 1);
    }
    ef_pipeline_destroy(p);
}

static void test_tar_shard_order(void **state)
{
    (void)state;
    write_order_set();
    int a[2][6], b[2][6], c[2][6];
    shard_orders("", 42, 2, a);
    shard_orders("", 42, 2, b);
    assert_memory_equal(a, b, sizeof a); /* the same for the same seed */
    assert_memory_not_equal(a[0], a[1], sizeof a[0]); /* new each epoch */
    shard_orders("", 43, 2, c);
    assert_memory_not_equal(a, c, sizeof a); /* and each seed */
    shard_orders(",shuffle_shards=false", 42, 2, c);
    for (int e = 0; e < 2; e++)
        for (int s = 0; s < 6; s++)
            assert_int_equal(c[e][s], s);
}

/* The full identity sequence of a run. */
static int run_ids(const char *opts, uint64_t seed, ef_sample_id *ids)
{
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s/o-{0..5}.tar\"%s", tu_dir(),
             opts);
    ef_pipeline *p = pipeline(spec, seed, 0);
    int n;
    assert_int_equal(drain_ids(p, ids, 64, &n), EF_END);
    ef_pipeline_destroy(p);
    return n;
}

static void expect_complete(const ef_sample_id *ids, int n)
{
    assert_int_equal(n, 18);
    int seen[6][3] = {{0}};
    for (int i = 0; i < n; i++)
        seen[ids[i].index >> 32][ids[i].index & 0xffffffff]++;
    for (int s = 0; s < 6; s++)
        for (int j = 0; j < 3; j++)
            assert_int_equal(seen[s][j], 1);
}

static void test_tar_cycle(void **state)
{
    (void)state;
    write_order_set();
    ef_sample_id a[64], b[64];
    int n = run_ids(",cycle=3", 7, a);
    expect_complete(a, n);
    for (int k = 0; k < 5; k++) { /* ordered: the same stream every time */
        assert_int_equal(run_ids(",cycle=3,ordered=true", 7, b), n);
        assert_memory_equal(a, b, (size_t)n * sizeof a[0]);
    }
    /* round robin over three readers: samples of three shards alternate */
    assert_int_not_equal(a[0].index >> 32, a[1].index >> 32);
    assert_int_not_equal(a[1].index >> 32, a[2].index >> 32);
    assert_int_equal(a[0].index >> 32, a[3].index >> 32);
    /* unordered, and more readers than shards: still every sample once */
    expect_complete(b, run_ids(",cycle=3,ordered=false", 7, b));
    expect_complete(b, run_ids(",cycle=8,ordered=false", 7, b));
    expect_complete(b, run_ids(",cycle=8", 7, b));

    /* automatic echoing polls the source directly */
    char spec[512];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/o-{0..5}.tar\",cycle=2,ordered=false | "
             "echo:factor=auto,max=3",
             tu_dir());
    ef_pipeline *p = pipeline(spec, 1, 0);
    long total = tu_drain(p);
    ef_stage_stats st = tu_stage(p, "echo");
    assert_true(tu_extra(&st, "fresh") == 18);
    assert_true(total >= 18 && total <= 54);
    ef_pipeline_destroy(p);
}

static void test_tar_parts(void **state)
{
    (void)state;
    write_order_set();
    int seen[6][3] = {{0}};
    for (int part = 0; part < 4; part++) {
        char opts[64];
        snprintf(opts, sizeof opts, ",shard=%d/4,cycle=2", part);
        ef_sample_id ids[64];
        int n = run_ids(opts, 3, ids);
        assert_int_equal(n, part < 2 ? 6 : 3); /* shards 0 4 | 1 5 | 2 | 3 */
        for (int i = 0; i < n; i++) {
            int64_t s = ids[i].index >> 32;
            assert_int_equal(s % 4, part);
            seen[s][ids[i].index & 0xffffffff]++;
        }
    }
    for (int s = 0; s < 6; s++)
        for (int j = 0; j < 3; j++)
            assert_int_equal(seen[s][j], 1); /* disjoint and covering */

    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s/o-{0..5}.tar\",shard=6/8",
             tu_dir());
    assert_int_equal(ef_pipeline_parse(p, spec), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "6 shards"));
    ef_pipeline_destroy(p);
}

static void test_tar_stop_midway(void **state)
{
    (void)state;
    write_order_set();
    /* readers blocked on full queues, a take that stops early under
     * repeat (reset mid-pass), then destroy: nothing hangs or leaks */
    char spec[512];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/o-{0..5}.tar\",cycle=3,queue=1 | take:4 | "
             "repeat:3",
             tu_dir());
    ef_pipeline *p = pipeline(spec, 0, 0);
    assert_int_equal(tu_drain(p), 12);
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/o-{0..5}.tar\",cycle=4,queue=1,ordered=false",
             tu_dir());
    p = pipeline(spec, 0, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
}

/* ---- TFRecord ------------------------------------------------------ */

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(ef__crc32c(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(ef__crc32c(0, "", 0), 0);
    uint32_t c = ef__crc32c(0, "1234", 4);
    assert_int_equal(ef__crc32c(c, "56789", 5), 0xE3069283u);
    /* 32 zero bytes: a published check value of CRC-32C (RFC 3720) */
    static const unsigned char zeros[32];
    assert_int_equal(ef__crc32c(0, zeros, 32), 0x8A9136AAu);
    assert_int_equal(ef__crc32c_mask(0), 0xa282ead8u);
    assert_int_equal(
        ef__crc32c_mask(0x12345678u),
        (((0x12345678u >> 15) | (0x12345678u << 17)) + 0xa282ead8u) &
            0xffffffffu);
}

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Appends a record at buf + *len; `bad` 1 spoils the length CRC, 2 the
 * data CRC. */
static void put_record(unsigned char *buf, size_t *len, const char *data,
                       int bad)
{
    size_t n = strlen(data);
    unsigned char *p = buf + *len;
    put_le(p, n, 8);
    put_le(p + 8, ef__crc32c_mask(ef__crc32c(0, p, 8)) ^ (bad == 1), 4);
    memcpy(p + 12, data, n);
    put_le(p + 12 + n, ef__crc32c_mask(ef__crc32c(0, data, n)) ^ (bad == 2), 4);
    *len += 16 + n;
}

static const char *const records[] = {"first", "", "third record",
                                      "the fourth"};

static size_t write_records(const char *path, int bad_at, int bad)
{
    unsigned char buf[512];
    size_t len = 0;
    for (int i = 0; i < 4; i++)
        put_record(buf, &len, records[i], i == bad_at ? bad : 0);
    tu_write_file(path, buf, len);
    return len;
}

static void expect_records(const char *spec, const int64_t *want_index,
                           const char *const *want, int n, const char *field)
{
    ef_pipeline *p = tu_pipeline(spec, 0);
    char buf[64];
    for (int i = 0; i < n; i++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, want_index[i]);
        assert_int_equal(ef_sample_field_count(s), 1);
        assert_string_equal(text(s, field, buf, sizeof buf), want[i]);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);
}

static void test_tfrecord_round_trip(void **state)
{
    (void)state;
    write_records(tu_at("r-0.tfrecord"), -1, 0);
    write_records(tu_at("r-1.tfrecord"), -1, 0);
    char spec[512];
    snprintf(spec, sizeof spec, "tfrecord:files=\"%s/r-{0..1}.tfrecord\"",
             tu_dir());
    static const int64_t idx[8] = {0,
                                   1,
                                   2,
                                   3,
                                   ((int64_t)1 << 32) + 0,
                                   ((int64_t)1 << 32) + 1,
                                   ((int64_t)1 << 32) + 2,
                                   ((int64_t)1 << 32) + 3};
    const char *want[8];
    for (int i = 0; i < 8; i++)
        want[i] = records[i % 4];
    expect_records(spec, idx, want, 8, "record");
    /* a field name of our own; part 1 of 2 is the second file */
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/r-{0..1}.tfrecord\",field=bytes,shard=1/2",
             tu_dir());
    expect_records(spec, idx + 4, want, 4, "bytes");
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/r-{0..1}.tfrecord\",shard=2/3", tu_dir());
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_parse(p, spec), EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "2 files"));
    assert_int_equal(ef_pipeline_parse(p, "tfrecord:files=x,compression=zip"),
                     EF_ESPEC);
    assert_non_null(strstr(ef_pipeline_error(p), "compression"));
    ef_pipeline_destroy(p);
}

static void test_tfrecord_errors(void **state)
{
    (void)state;
    /* record 2 starts at 16 + 5 + 16 = 37 */
    write_records(tu_at("bad-data.tfrecord"), 2, 2);
    write_records(tu_at("bad-len.tfrecord"), 2, 1);
    char spec[1024];
    snprintf(spec, sizeof spec, "tfrecord:files=%s",
             tu_at("bad-data.tfrecord"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "file 0, record 2: ",
                 "bad-data.tfrecord: bad data CRC of the record at offset 37");
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "tfrecord:files=%s", tu_at("bad-len.tfrecord"));
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "record 2",
                 "bad-len.tfrecord: bad length CRC of the record at offset "
                 "37");
    ef_pipeline_destroy(p);

    /* truncated in the data of the last record */
    unsigned char buf[512];
    size_t n = write_records(tu_at("cut.tfrecord"), -1, 0);
    read_bytes(tu_at("cut.tfrecord"), buf, sizeof buf);
    tu_write_file(tu_at("cut.tfrecord"), buf, n - 6);
    snprintf(spec, sizeof spec, "tfrecord:files=%s", tu_at("cut.tfrecord"));
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "truncated TFRecord data at offset",
                 "cut.tfrecord");
    ef_pipeline_destroy(p);

    /* under skip: a bad data CRC drops its record, a bad length CRC the
     * rest of its file, a truncation the rest too */
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/bad-data.tfrecord %s/bad-len.tfrecord "
             "%s/cut.tfrecord\"",
             tu_dir(), tu_dir(), tu_dir());
    p = pipeline(spec, 0, 1);
    ef_sample_id ids[16];
    int got;
    assert_int_equal(drain_ids(p, ids, 16, &got), EF_END);
    static const int64_t want[] = {0,
                                   1,
                                   3,
                                   ((int64_t)1 << 32) + 0,
                                   ((int64_t)1 << 32) + 1,
                                   ((int64_t)2 << 32) + 0,
                                   ((int64_t)2 << 32) + 1,
                                   ((int64_t)2 << 32) + 2};
    assert_int_equal(got, 8);
    for (int i = 0; i < got; i++)
        assert_int_equal(ids[i].index, want[i]);
    char why[512];
    assert_int_equal(ef_pipeline_skipped(p, why, sizeof why), 1);
    assert_non_null(strstr(why, "bad data CRC"));
    /* bad-len fails after reading record 2's 12 header bytes at 37: the
     * rest is lost; cut was read to its end */
    assert_int_equal(ef_pipeline_abandoned(p, why, sizeof why), 2);
    unsigned char whole[512];
    uint64_t size = read_bytes(tu_at("bad-len.tfrecord"), whole, sizeof whole);
    char tail[96];
    snprintf(tail, sizeof tail, "file abandoned at byte 49 of %llu",
             (unsigned long long)size);
    assert_non_null(strstr(why, tail));
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_int_equal(ps.lost_bytes, size - 49);
    ef_pipeline_destroy(p);
}

static void test_tfrecord_gzip(void **state)
{
    (void)state;
#ifdef EF_HAVE_ZLIB
    unsigned char buf[512];
    size_t n = write_records(tu_at("plain.tfrecord"), -1, 0);
    read_bytes(tu_at("plain.tfrecord"), buf, sizeof buf);
    gzFile gz = gzopen(tu_at("z.tfrecord.gz"), "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, buf, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
    static const int64_t idx[4] = {0, 1, 2, 3};
    char spec[512];
    static const char *const modes[] = {"", ",compression=gzip",
                                        ",compression=auto"};
    for (int m = 0; m < 3; m++) {
        snprintf(spec, sizeof spec, "tfrecord:files=%s%s",
                 tu_at("z.tfrecord.gz"), modes[m]);
        expect_records(spec, idx, records, 4, "record");
    }
    /* read as is, the gzip bytes are no TFRecord */
    snprintf(spec, sizeof spec, "tfrecord:files=%s,compression=none",
             tu_at("z.tfrecord.gz"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "bad length CRC", "offset 0");
    ef_pipeline_destroy(p);
#else
    skip();
#endif
}

/* ---- CIFAR-10 ------------------------------------------------------- */

static unsigned char pixel(int r, int y, int x, int c)
{
    return (unsigned char)(r * 11 + y * 3 + x * 5 + c * 101);
}

/* n records, labels from `labels`, planes R, G, B. */
static void write_cifar(const char *path, const unsigned char *labels, int n,
                        size_t cut)
{
    static unsigned char buf[8 * 3073];
    assert_true(n <= 8);
    for (int r = 0; r < n; r++) {
        unsigned char *rec = buf + r * 3073;
        rec[0] = labels[r];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++)
                    rec[1 + c * 1024 + y * 32 + x] = pixel(r, y, x, c);
    }
    tu_write_file(path, buf, (size_t)n * 3073 - cut);
}

static void test_cifar(void **state)
{
    (void)state;
    static const unsigned char labels[] = {3, 9, 0, 5};
    write_cifar(tu_at("c-1.bin"), labels, 3, 0);
    write_cifar(tu_at("c-2.bin"), labels + 3, 1, 0);
    char spec[512];
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..2}.bin\"", tu_dir());
    ef_pipeline *p = tu_pipeline(spec, 0);
    for (int r = 0; r < 4; r++) {
        ef_sample *s = tu_next(p);
        assert_int_equal(ef_sample_identity(s).index, r);
        ef_tensor im = tu_field(s, "image");
        assert_int_equal(im.dtype, EF_U8);
        assert_int_equal(im.ndim, 3);
        assert_int_equal(im.shape[0], 32);
        assert_int_equal(im.shape[1], 32);
        assert_int_equal(im.shape[2], 3);
        const unsigned char *d = im.data;
        int local = r < 3 ? r : 0;
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                for (int c = 0; c < 3; c++)
                    if (d[(y * 32 + x) * 3 + c] != pixel(local, y, x, c))
                        fail_msg("record %d pixel (%d,%d,%d) is %d, expected "
                                 "%d",
                                 r, y, x, c, d[(y * 32 + x) * 3 + c],
                                 pixel(local, y, x, c));
        assert_int_equal(tu_i64(s, "label"), labels[r]);
        ef_sample_free(s);
    }
    tu_expect_end(p);
    ef_pipeline_destroy(p);

    /* part 1 of 3: records 1 (file 1) */
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..2}.bin\",shard=1/3",
             tu_dir());
    p = tu_pipeline(spec, 0);
    ef_sample *s = tu_next(p);
    assert_int_equal(ef_sample_identity(s).index, 1);
    ef_sample_free(s);
    tu_expect_end(p);
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "cifar:files=%s,shard=3/4", tu_at("c-1.bin"));
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "gets no record", "hold 3");
    ef_pipeline_destroy(p);
}

/* ---- bounded reads of IDX and CIFAR files -------------------------- */

/* Writes a gzip file: `head` (n bytes) then `zeros` zero bytes. Z_RLE
 * keeps a gigabyte of zeros quick to compress (about 1 MB out). */
static void write_gzip_zeros(const char *path, const unsigned char *head,
                             size_t n, uint64_t zeros)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_RLE), Z_OK);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    static unsigned char in[1 << 20], out[1 << 16];
    memset(in, 0, sizeof in);
    const unsigned char *src = head;
    size_t left = n;
    for (int flush = Z_NO_FLUSH; flush != Z_FINISH;) {
        if (left == 0 && zeros > 0) {
            src = in;
            left = zeros < sizeof in ? (size_t)zeros : sizeof in;
            zeros -= left;
        }
        flush = left == 0 && zeros == 0 ? Z_FINISH : Z_NO_FLUSH;
        z.next_in = (unsigned char *)src;
        z.avail_in = (unsigned)left;
        do {
            z.next_out = out;
            z.avail_out = sizeof out;
            assert_true(deflate(&z, flush) != Z_STREAM_ERROR);
            size_t have = sizeof out - z.avail_out;
            assert_int_equal(fwrite(out, 1, have, f), have);
        } while (z.avail_out == 0);
        left = 0;
    }
    deflateEnd(&z);
    assert_int_equal(fclose(f), 0);
}

/* A u8 IDX header: magic then the dims, big-endian. Returns its size. */
static size_t idx_header(unsigned char *h, int ndim, const uint32_t *dims)
{
    size_t n = 0;
    h[n++] = 0;
    h[n++] = 0;
    h[n++] = 0x08;
    h[n++] = (unsigned char)ndim;
    for (int d = 0; d < ndim; d++)
        for (int b = 3; b >= 0; b--)
            h[n++] = (unsigned char)(dims[d] >> (8 * b));
    return n;
}

static long max_rss_mb(void)
{
    struct rusage ru;
    assert_int_equal(getrusage(RUSAGE_SELF, &ru), 0);
    return ru.ru_maxrss / 1024;
}

/* /dev/zero is refused on its magic after 4 bytes, not read to the end
 * of memory. */
static void test_idx_dev_zero(void **state)
{
    (void)state;
    ef_pipeline *p = pipeline("idx:images=/dev/zero", 0, 0);
    expect_error(p, EF_EFORMAT, "/dev/zero: not an IDX file",
                 "bad magic 00 00 00 00 at offset 0");
    ef_pipeline_destroy(p);
    char spec[512];
    snprintf(spec, sizeof spec, "idx:images=%s,labels=/dev/zero",
             tu_at("zero-ok.idx"));
    static const uint32_t dims[3] = {2, 2, 2};
    unsigned char buf[64];
    size_t n = idx_header(buf, 3, dims);
    memset(buf + n, 7, 8);
    tu_write_file(tu_at("zero-ok.idx"), buf, n + 8);
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "/dev/zero", "bad magic");
    ef_pipeline_destroy(p);
}

/* A small gzip file whose header announces 784 MB: "truncated" with the
 * offset where the data ends, and no allocation of the announced size. */
static void test_idx_gzip_truncated(void **state)
{
    (void)state;
    static const uint32_t dims[3] = {1000000, 28, 28};
    unsigned char head[32];
    size_t n = idx_header(head, 3, dims);
    write_gzip_zeros(tu_at("short.idx.gz"), head, n, 100);
    char spec[512];
    snprintf(spec, sizeof spec, "idx:images=%s", tu_at("short.idx.gz"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "short.idx.gz: truncated",
                 "the data ends at offset 116");
    ef_pipeline_destroy(p);
    assert_true(max_rss_mb() < 400);
}

/* A gzip bomb: a valid header for 60000 x 28 x 28 then 1 GiB of zeros.
 * The reader stops one byte past the announced data and names the extra
 * data (an IDX file is exactly its header and data); memory stays far
 * below the gigabyte. */
static void test_idx_gzip_bomb(void **state)
{
    (void)state;
    static const uint32_t dims[3] = {60000, 28, 28};
    unsigned char head[32];
    size_t n = idx_header(head, 3, dims);
    write_gzip_zeros(tu_at("bomb.idx.gz"), head, n, (uint64_t)1 << 30);
    char spec[512];
    snprintf(spec, sizeof spec, "idx:images=%s", tu_at("bomb.idx.gz"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "bomb.idx.gz: extra data after offset",
                 "47040016");
    ef_pipeline_destroy(p);
    if (max_rss_mb() >= 400)
        fail_msg("max RSS %ld MB reading a gzip bomb", max_rss_mb());

    /* exactly the announced data reads back */
    static const uint32_t small[3] = {600, 28, 28};
    n = idx_header(head, 3, small);
    write_gzip_zeros(tu_at("exact.idx.gz"), head, n, 600 * 28 * 28);
    snprintf(spec, sizeof spec, "idx:images=%s", tu_at("exact.idx.gz"));
    p = pipeline(spec, 0, 0);
    ef_sample_id ids[1024];
    int got;
    assert_int_equal(drain_ids(p, ids, 1024, &got), EF_END);
    assert_int_equal(got, 600);
    ef_pipeline_destroy(p);
}

/* CIFAR files are read a chunk at a time up to max_records: /dev/zero
 * (records of label 0, endless) is refused, not read to exhaustion. */
static void test_cifar_bounded(void **state)
{
    (void)state;
    ef_pipeline *p = pipeline("cifar:files=/dev/zero,max_records=2000", 0, 0);
    expect_error(p, EF_EFORMAT, "/dev/zero: more than max_records=2000",
                 "stopped reading at offset");
    ef_pipeline_destroy(p);
    static const unsigned char labels[] = {1, 2, 3};
    write_cifar(tu_at("three.bin"), labels, 3, 0);
    char spec[512];
    snprintf(spec, sizeof spec, "cifar:files=%s,max_records=2",
             tu_at("three.bin"));
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "three.bin: more than max_records=2", NULL);
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "cifar:files=%s,max_records=3",
             tu_at("three.bin"));
    p = pipeline(spec, 0, 0);
    ef_sample_id ids[8];
    int got;
    assert_int_equal(drain_ids(p, ids, 8, &got), EF_END);
    assert_int_equal(got, 3);
    ef_pipeline_destroy(p);
}

static void test_cifar_errors(void **state)
{
    (void)state;
    static const unsigned char labels[] = {1, 12, 2};
    write_cifar(tu_at("badlabel.bin"), labels, 3, 0);
    static const unsigned char good[] = {1, 2, 3};
    write_cifar(tu_at("short.bin"), good, 3, 100);
    char spec[512];
    snprintf(spec, sizeof spec, "cifar:files=%s", tu_at("badlabel.bin"));
    ef_pipeline *p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "badlabel.bin: record 1 at offset 3073",
                 "label 12");
    ef_pipeline_destroy(p);
    snprintf(spec, sizeof spec, "cifar:files=%s", tu_at("short.bin"));
    p = pipeline(spec, 0, 0);
    expect_error(p, EF_EFORMAT, "short.bin",
                 "a partial record of 2973 bytes starts at offset 6146");
    ef_pipeline_destroy(p);

    /* under skip: the bad record and the partial one are dropped */
    snprintf(spec, sizeof spec, "cifar:files=\"%s %s\"", tu_at("badlabel.bin"),
             tu_at("short.bin"));
    p = pipeline(spec, 0, 1);
    ef_sample_id ids[8];
    int n;
    assert_int_equal(drain_ids(p, ids, 8, &n), EF_END);
    static const int64_t want[] = {0, 2, 3, 4};
    assert_int_equal(n, 4);
    for (int i = 0; i < n; i++)
        assert_int_equal(ids[i].index, want[i]);
    assert_int_equal(ef_pipeline_skipped(p, NULL, 0), 2);
    ef_pipeline_destroy(p);
}

/* ---- allocation failures --------------------------------------------- */

/* One run of `spec` with the n-th allocation failing: 1 when it completed
 * with `want` samples, 0 when it failed with ENOMEM (anything else fails
 * the test; leaks show in the sanitizer builds). */
static int alloc_run(const char *spec, long n, long want)
{
    ef_pipeline *p = NULL;
    ef__alloc_fail_after(n);
    int rc = ef_pipeline_create(&p);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(p, spec);
    long items = 0;
    while (rc == EF_OK) {
        ef_sample *s = NULL;
        rc = ef_pipeline_next(p, &s);
        if (rc == EF_OK) {
            ef_sample_free(s);
            items++;
        }
    }
    ef__alloc_fail_after(0);
    const char *msg = p ? ef_pipeline_error(p) : "";
    if (rc != EF_END && rc != EF_ENOMEM)
        fail_msg("%s: n=%ld: %s (%s), expected ENOMEM", spec, n,
                 ef_status_name(rc), msg);
    if (rc == EF_END && items != want)
        fail_msg("%s: n=%ld: %ld samples, expected %ld", spec, n, items, want);
    ef_pipeline_destroy(p);
    return rc == EF_END;
}

static void alloc_sweep(const char *spec, long want)
{
    int in_a_row = 0;
    long failures = 0;
    for (long n = 1; n <= 5000 && in_a_row < 8; n++) {
        if (alloc_run(spec, n, want)) {
            in_a_row++;
        } else {
            in_a_row = 0;
            failures++;
        }
    }
    assert_true(in_a_row >= 8); /* reached the end of the allocations */
    assert_true(failures >= 5);
}

static void test_alloc_failures(void **state)
{
    (void)state;
    char spec[512];
    write_shard(tu_at("a-0.tar"), 0, 3);
    write_shard(tu_at("a-1.tar"), 1, 2);
    snprintf(spec, sizeof spec, "tar:urls=\"%s/a-{0..1}.tar\"", tu_dir());
    alloc_sweep(spec, 5);
    snprintf(spec, sizeof spec, "tar:urls=\"%s/a-{0..1}.tar\",cycle=2",
             tu_dir());
    alloc_sweep(spec, 5);
    write_records(tu_at("a.tfrecord"), -1, 0);
    snprintf(spec, sizeof spec, "tfrecord:files=%s", tu_at("a.tfrecord"));
    alloc_sweep(spec, 4);
    static const unsigned char labels[] = {1, 2};
    write_cifar(tu_at("a.bin"), labels, 2, 0);
    snprintf(spec, sizeof spec, "cifar:files=%s", tu_at("a.bin"));
    alloc_sweep(spec, 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test(test_tar_writer_names),
        cmocka_unit_test(test_tar_grouping),
        cmocka_unit_test(test_tar_long_names),
        cmocka_unit_test(test_tar_errors),
        cmocka_unit_test(test_tar_bad_samples),
        cmocka_unit_test(test_tar_gzip),
        cmocka_unit_test(test_tar_shard_order),
        cmocka_unit_test(test_tar_cycle),
        cmocka_unit_test(test_tar_parts),
        cmocka_unit_test(test_tar_stop_midway),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_tfrecord_round_trip),
        cmocka_unit_test(test_tfrecord_errors),
        cmocka_unit_test(test_tfrecord_gzip),
        cmocka_unit_test(test_cifar),
        cmocka_unit_test(test_cifar_errors),
        cmocka_unit_test(test_cifar_bounded),
        cmocka_unit_test(test_idx_dev_zero),
        cmocka_unit_test(test_idx_gzip_truncated),
        cmocka_unit_test(test_idx_gzip_bomb),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_errors_name_file_and_key),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
