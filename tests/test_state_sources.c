/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoints of the file sources: tar (one to several readers, gzip
 * shards, parts, on_error=skip), tfrecord and cifar pipelines saved after
 * k items and restored into a new one deliver exactly what the
 * uninterrupted run delivers after item k, identity and bytes, with
 * shuffle, echo, batch and repeat downstream. A resumed shard is not read
 * again from its start unless it is gzip. A state whose file list or part
 * differs, or whose shard changed on disk, is refused with a message
 * naming it; unordered tar refuses to save. Fixtures are written by the
 * tests into a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#ifdef EF_HAVE_ZLIB
#include <zlib.h>
#endif

#include "codec/tar_write.h"
#include "common/crc32c.h"
#include "ef_test_util.h"
#include "state_test_util.h"

/* ---- resuming ------------------------------------------------------ */

/* How the pipelines of a check are made: on_error=skip or not, and the
 * pipeline's part (ef_pipeline_set_shard; n = 0: none). */
typedef struct {
    int skip;
    int64_t part_i, part_n;
} how;

static ef_pipeline *make(const char *spec, const how *h)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_seed(p, 7), EF_OK);
    if (h && h->part_n)
        assert_int_equal(ef_pipeline_set_shard(p, h->part_i, h->part_n), EF_OK);
    if (h && h->skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    return p;
}

enum { MAX_ITEMS = 4000 };

/* Every cut of these short runs; under TSan, which starts each reader
 * thread many times slower, about 40 spread over each run. */
#ifdef __SANITIZE_THREAD__
#define ALL_CUTS 40
#else
#define ALL_CUTS 1000
#endif

static ef_pipeline *make_for(const char *spec, const void *arg)
{
    return make(spec, arg);
}

/* Resumes at ncuts evenly spaced points, and at the end, equal the whole
 * run; returns its items. */
static size_t check_resume(const char *spec, const char *restore_spec,
                           size_t ncuts, const how *h)
{
    return tu_check_resume(make_for, h, spec, restore_spec, NULL, ncuts,
                           MAX_ITEMS);
}

/* The state of `spec` after k items. */
static void *state_after(const char *spec, size_t k, const how *h, size_t *size)
{
    tu_seen *buf = malloc((k + 1) * sizeof *buf);
    assert_non_null(buf);
    ef_pipeline *p = make(spec, h);
    assert_int_equal(tu_pull_seen(p, buf, k, spec), k);
    void *state = tu_save(p, size);
    ef_pipeline_destroy(p);
    free(buf);
    return state;
}

/* Restoring `state` into `spec` fails with `status`, the message holding
 * each of the NULL-terminated words. */
static void expect_refused(const char *spec, const how *h, const void *state,
                           size_t size, int status, ...)
{
    ef_pipeline *q = make(spec, h);
    int rc = ef_pipeline_restore_state(q, state, size);
    if (rc != status)
        fail_msg("%s: restore = %s, expected %s: %s", spec, ef_status_name(rc),
                 ef_status_name(status), ef_pipeline_error(q));
    va_list ap;
    va_start(ap, status);
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(ef_pipeline_error(q), w))
            fail_msg("%s: message \"%s\" lacks \"%s\"", spec,
                     ef_pipeline_error(q), w);
    va_end(ap);
    ef_pipeline_destroy(q);
}

/* ---- fixtures ------------------------------------------------------ */

#define NSHARDS 6

static uint32_t g_rng = 12345;

/* Shard s of a set: 5 to 11 samples of random bytes. `ragged`: of random
 * sizes, some samples with a third member, so that samples start at many
 * offsets; otherwise of one size and two members, so that batch can stack
 * them. */
static void write_shard(const char *path, int s, int ragged)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    ef__err err;
    int samples = 5 + (s * 3) % 7;
    static unsigned char data[5000];
    for (int i = 0; i < samples; i++) {
        char name[64];
        size_t n = ragged ? 1 + tu_xorshift(&g_rng) % sizeof data : 1500;
        for (size_t j = 0; j < n; j++)
            data[j] = (unsigned char)tu_xorshift(&g_rng);
        snprintf(name, sizeof name, "dir/s%d_%03d.bin", s, i);
        assert_int_equal(ef__tar_write_member(f, name, data, n, &err), EF_OK);
        char cls[16];
        snprintf(cls, sizeof cls, "%d", (s * 7 + i) % 10);
        snprintf(name, sizeof name, "dir/s%d_%03d.cls", s, i);
        assert_int_equal(ef__tar_write_member(f, name, cls, strlen(cls), &err),
                         EF_OK);
        if (ragged && i % 3 == 1) {
            snprintf(name, sizeof name, "dir/s%d_%03d.txt", s, i);
            assert_int_equal(ef__tar_write_member(f, name, "third", 5, &err),
                             EF_OK);
        }
    }
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
}

static size_t file_size(const char *path)
{
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    return (size_t)sb.st_size;
}

#ifdef EF_HAVE_ZLIB
/* Writes `from` gzip-compressed as `to`. */
static void gzip_file(const char *from, const char *to)
{
    size_t n = file_size(from);
    unsigned char *buf = malloc(n ? n : 1);
    assert_non_null(buf);
    FILE *f = fopen(from, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
    gzFile gz = gzopen(to, "wb");
    assert_non_null(gz);
    assert_int_equal(gzwrite(gz, buf, (unsigned)n), (int)n);
    assert_int_equal(gzclose(gz), Z_OK);
    free(buf);
}
#endif

static void put_le(unsigned char *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* TFRecord file f: 4 to 12 records of random bytes, of random sizes
 * (empty ones too) when `ragged`, else of one size (for batch). */
static void write_records(const char *path, int f, int ragged)
{
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    int n = 4 + (f * 5) % 9;
    static unsigned char rec[3000 + 16];
    for (int r = 0; r < n; r++) {
        size_t len = ragged ? tu_xorshift(&g_rng) % 3000 : 777;
        unsigned char *p = rec;
        put_le(p, len, 8);
        put_le(p + 8, ef__crc32c_mask(ef__crc32c(0, p, 8)), 4);
        for (size_t j = 0; j < len; j++)
            p[12 + j] = (unsigned char)tu_xorshift(&g_rng);
        put_le(p + 12 + len, ef__crc32c_mask(ef__crc32c(0, p + 12, len)), 4);
        assert_int_equal(fwrite(rec, 1, len + 16, out), len + 16);
    }
    assert_int_equal(fclose(out), 0);
}

/* A CIFAR-10 file of n records of random pixels, labels 0..9. */
static void write_cifar(const char *path, int n)
{
    FILE *out = fopen(path, "wb");
    assert_non_null(out);
    static unsigned char rec[3073];
    for (int r = 0; r < n; r++) {
        rec[0] = (unsigned char)(tu_xorshift(&g_rng) % 10);
        for (int j = 1; j < 3073; j++)
            rec[j] = (unsigned char)tu_xorshift(&g_rng);
        assert_int_equal(fwrite(rec, 1, sizeof rec, out), sizeof rec);
    }
    assert_int_equal(fclose(out), 0);
}

static int setup(void **state)
{
    (void)state;
    if (tu_dir_create("ef_test_state_sources") != 0)
        return -1;
    /* t-*: for batch; v-*: ragged; g-*: t-* compressed */
    for (int s = 0; s < NSHARDS; s++) {
        char name[32];
        snprintf(name, sizeof name, "t-%d.tar", s);
        write_shard(tu_at(name), s, 0);
        snprintf(name, sizeof name, "v-%d.tar", s);
        write_shard(tu_at(name), s, 1);
#ifdef EF_HAVE_ZLIB
        char gz[32];
        snprintf(name, sizeof name, "t-%d.tar", s);
        snprintf(gz, sizeof gz, "g-%d.tar.gz", s);
        gzip_file(tu_at(name), tu_at(gz));
#endif
    }
    /* r-*: for batch; q-*: ragged, every other one compressed */
    for (int f = 0; f < 4; f++) {
        char name[32];
        snprintf(name, sizeof name, "r-%d.tfrecord", f);
        write_records(tu_at(name), f, 0);
        snprintf(name, sizeof name, "q-%d.tfrecord", f);
        write_records(tu_at(name), f, 1);
#ifdef EF_HAVE_ZLIB
        if (f % 2) {
            char gz[32];
            snprintf(gz, sizeof gz, "q-%d.tfrecord.tmp", f);
            gzip_file(tu_at(name), tu_at(gz));
            assert_int_equal(rename(tu_at(gz), tu_at(name)), 0);
        }
#endif
    }
    write_cifar(tu_at("c-1.bin"), 23);
    write_cifar(tu_at("c-2.bin"), 17);
    write_cifar(tu_at("c-3.bin"), 30);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

/* ---- tar ------------------------------------------------------------ */

static void test_tar_one_reader(void **state)
{
    (void)state;
    char spec[2048];
    /* the samples alone, in order: every cut */
    snprintf(spec, sizeof spec, "tar:urls=\"%s/v-{0..5}.tar\"", tu_dir());
    assert_int_equal(check_resume(spec, spec, ALL_CUTS, NULL), 47);
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/v-{0..5}.tar\",cycle=3 | shuffle:buffer=9 | "
             "echo:factor=2,shuffle=5 | repeat:count=2",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",shuffle_shards=false | "
             "shuffle:buffer=9 | echo:factor=2,shuffle=5 | batch:size=4",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
}

static void test_tar_cycle(void **state)
{
    (void)state;
    char spec[2048], other[2048];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",cycle=3,queue=2 | "
             "shuffle:buffer=7 | echo:factor=1.5,shuffle=4 | batch:size=3 | "
             "repeat:count=2",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    /* the queue is a speed setting: a state restores under another */
    snprintf(other, sizeof other,
             "tar:urls=\"%s/t-{0..5}.tar\",cycle=3,queue=40 | "
             "shuffle:buffer=7 | echo:factor=1.5,shuffle=4 | batch:size=3 | "
             "repeat:count=2",
             tu_dir());
    check_resume(spec, other, 25, NULL);
    /* more readers than shards: one per shard */
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",cycle=8 | prefetch:depth=3 | "
             "map:fn=noop,threads=2 | batch:size=5,drop_remainder=true",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
}

/* cycle changes the order in which samples come: a state of one cycle
 * does not restore under another. */
static void test_tar_other_cycle(void **state)
{
    (void)state;
    char spec[2048], other[2048];
    snprintf(spec, sizeof spec, "tar:urls=\"%s/t-{0..5}.tar\",cycle=3",
             tu_dir());
    snprintf(other, sizeof other, "tar:urls=\"%s/t-{0..5}.tar\",cycle=2",
             tu_dir());
    size_t size;
    void *st = state_after(spec, 10, NULL, &size);
    expect_refused(other, NULL, st, size, EF_ESPEC, "stage 0 'tar' differs",
                   "cycle=3", "cycle=2", NULL);
    free(st);
}

/* The state after most of a single shard: the resumed reader reads the
 * rest only (seeks), and not the samples before. */
static void test_tar_reads_the_rest(void **state)
{
    (void)state;
    char spec[2048];
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("v-4.tar"));
    size_t size;
    void *st = state_after(spec, 8, NULL, &size); /* of 10 */
    ef_pipeline *q = make(spec, NULL);
    assert_int_equal(ef_pipeline_restore_state(q, st, size), EF_OK);
    assert_int_equal(tu_drain(q), 2);
    ef_stage_stats ss = tu_stage(q, "tar");
    double bytes = tu_extra(&ss, "bytes");
    double whole = (double)file_size(tu_at("v-4.tar"));
    if (!(bytes > 0 && bytes < whole * 0.4))
        fail_msg("resumed after 8 of 10 samples, read %.0f of %.0f bytes",
                 bytes, whole);
    ef_pipeline_destroy(q);
    free(st);
}

static void test_tar_gzip(void **state)
{
    (void)state;
#ifdef EF_HAVE_ZLIB
    char spec[2048];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/g-{0..5}.tar.gz\",cycle=2 | shuffle:buffer=6 | "
             "batch:size=2",
             tu_dir());
    check_resume(spec, spec, 30, NULL);
    /* plain and gzip shards in one list */
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..2}.tar %s/g-{3..5}.tar.gz\",cycle=2 | "
             "echo:factor=2,shuffle=3",
             tu_dir(), tu_dir());
    check_resume(spec, spec, 30, NULL);
    /* a gzip shard cannot seek: read again from its start */
    snprintf(spec, sizeof spec, "tar:urls=%s", tu_at("g-4.tar.gz"));
    size_t size;
    void *st = state_after(spec, 8, NULL, &size);
    ef_pipeline *q = make(spec, NULL);
    assert_int_equal(ef_pipeline_restore_state(q, st, size), EF_OK);
    assert_int_equal(tu_drain(q), 2);
    ef_stage_stats ss = tu_stage(q, "tar");
    assert_true(tu_extra(&ss, "bytes") ==
                (double)file_size(tu_at("g-4.tar.gz")));
    ef_pipeline_destroy(q);
    free(st);
#else
    skip();
#endif
}

/* Parts: by the stage's option (compared as an option), and by the
 * pipeline's (saved in the stage's record). */
static void test_tar_parts(void **state)
{
    (void)state;
    char spec[2048];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",shard=1/2,cycle=2 | "
             "shuffle:buffer=5",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",cycle=2 | shuffle:buffer=5",
             tu_dir());
    how part = {0, 2, 3};
    check_resume(spec, spec, ALL_CUTS, &part);
    size_t size;
    void *st = state_after(spec, 3, &part, &size);
    how other = {0, 1, 3};
    expect_refused(spec, &other, st, size, EF_EFORMAT, "stage 0 'tar'",
                   "saved while reading part 2 of 3",
                   "the pipeline reads part 1 of 3", NULL);
    free(st);
}

/* Paths made long with "./" so that the option text, which a state keeps
 * only so far, cannot tell the lists apart: the stage's own record does. */
static void test_tar_list_changed(void **state)
{
    (void)state;
    char pad[256] = "";
    for (int i = 0; i < 80; i++)
        strcat(pad, "./");
    char list[4096] = "", spec[5000], more[5000], renamed[5000];
    for (int s = 0; s < NSHARDS; s++) {
        size_t n = strlen(list);
        snprintf(list + n, sizeof list - n, "%s%s/%st-%d.tar", s ? " " : "",
                 tu_dir(), pad, s);
    }
    snprintf(spec, sizeof spec, "tar:urls=\"%s\",cycle=2", list);
    snprintf(more, sizeof more, "tar:urls=\"%s %s\",cycle=2", list,
             tu_at("t-0.tar"));
    /* the same count, the last name spelled otherwise */
    snprintf(renamed, sizeof renamed, "tar:urls=\"%s\",cycle=2", list);
    char *last = strstr(renamed, "t-5.tar");
    assert_non_null(last);
    memcpy(last, "t-4.tar", 7);
    assert_true(strlen(spec) > 1150); /* past what a state keeps */
    size_t size;
    void *st = state_after(spec, 5, NULL, &size);
    expect_refused(more, NULL, st, size, EF_EFORMAT, "stage 0 'tar'",
                   "saved over 6 shards, the pipeline lists 7", NULL);
    expect_refused(renamed, NULL, st, size, EF_EFORMAT, "stage 0 'tar'",
                   "another list of 6 shards: the names differ", NULL);
    /* the state still restores where it came from */
    ef_pipeline *q = make(spec, NULL);
    assert_int_equal(ef_pipeline_restore_state(q, st, size), EF_OK);
    ef_pipeline_destroy(q);
    free(st);
    /* a list that differs early differs in the options already */
    snprintf(spec, sizeof spec, "tar:urls=\"%s/t-{0..5}.tar\"", tu_dir());
    snprintf(more, sizeof more, "tar:urls=\"%s/t-{0..4}.tar\"", tu_dir());
    st = state_after(spec, 5, NULL, &size);
    expect_refused(more, NULL, st, size, EF_ESPEC, "stage 0 'tar' differs",
                   "t-{0..4}.tar", NULL);
    free(st);
}

/* A shard rewritten after the save: the samples a shuffle buffer held
 * are no longer where the state says. */
static void test_tar_shard_changed(void **state)
{
    (void)state;
    char spec[2048];
    write_shard(tu_at("changing-0.tar"), 0, 1);
    write_shard(tu_at("changing-1.tar"), 1, 1);
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/changing-{0..1}.tar\",shuffle_shards=false | "
             "shuffle:buffer=4",
             tu_dir());
    size_t size;
    void *st = state_after(spec, 3, NULL, &size);
    write_shard(tu_at("changing-0.tar"), 0, 1); /* new random sizes */
    expect_refused(spec, NULL, st, size, EF_EFORMAT, "tar: shard 0",
                   "changing-0.tar", "the shard changed", NULL);
    free(st);
}

static void test_tar_unordered(void **state)
{
    (void)state;
    char spec[2048];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/t-{0..5}.tar\",cycle=2,ordered=false", tu_dir());
    ef_pipeline *p = make(spec, NULL);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    size_t size = 0;
    assert_int_equal(ef_pipeline_save_state(p, NULL, 0, &size),
                     EF_EUNSUPPORTED);
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, "stage 0 'tar'") || !strstr(msg, "ordered=false") ||
        !strstr(msg, "cannot be saved") || !strstr(msg, "ordered=true"))
        fail_msg("unexpected message: %s", msg);
    /* the pipeline goes on */
    assert_int_equal(tu_drain(p), 46);
    ef_pipeline_destroy(p);
}

/* on_error=skip: a truncated shard is abandoned and a malformed sample
 * dropped, again after the restore, and the rest comes the same. */
static void test_tar_skip(void **state)
{
    (void)state;
    /* b-1: t-1 cut in its middle; b-2: a sample with a field twice */
    FILE *f = fopen(tu_at("v-1.tar"), "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    tu_write_file(tu_at("b-1.tar"), buf, n / 2 + 100);
    f = fopen(tu_at("b-2.tar"), "wb");
    assert_non_null(f);
    ef__err err;
    static const char *const names[] = {"a.x", "b.x", "b.x", "c.x", "c.y"};
    for (int i = 0; i < 5; i++)
        assert_int_equal(ef__tar_write_member(f, names[i], "data", 4, &err),
                         EF_OK);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    assert_int_equal(fclose(f), 0);
    char spec[2048];
    snprintf(spec, sizeof spec,
             "tar:urls=\"%s/v-0.tar %s/b-1.tar %s/b-2.tar %s/v-3.tar\","
             "cycle=2 | shuffle:buffer=3",
             tu_dir(), tu_dir(), tu_dir(), tu_dir());
    how skip = {1, 0, 0};
    check_resume(spec, spec, ALL_CUTS, &skip);
}

/* ---- tfrecord ---------------------------------------------------- */

static void test_tfrecord(void **state)
{
    (void)state;
    char spec[2048];
    snprintf(spec, sizeof spec, "tfrecord:files=\"%s/r-{0..3}.tfrecord\"",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/r-{0..3}.tfrecord\" | shuffle:buffer=6 | "
             "echo:factor=2,shuffle=4 | batch:size=3 | repeat:count=2",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/r-{0..3}.tfrecord\",shard=1/2 | "
             "prefetch:2 | shuffle:buffer=5",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    /* ragged records; with zlib, every other file compressed */
    snprintf(spec, sizeof spec,
             "tfrecord:files=\"%s/q-{0..3}.tfrecord\" | shuffle:buffer=6 | "
             "echo:factor=2,shuffle=3",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    /* another list */
    snprintf(spec, sizeof spec, "tfrecord:files=\"%s/r-{0..3}.tfrecord\"",
             tu_dir());
    char other[2048];
    snprintf(other, sizeof other, "tfrecord:files=\"%s/r-{0..2}.tfrecord\"",
             tu_dir());
    size_t size;
    void *st = state_after(spec, 5, NULL, &size);
    expect_refused(other, NULL, st, size, EF_ESPEC,
                   "stage 0 'tfrecord' differs", NULL);
    free(st);
}

/* A record no longer where the state says. */
static void test_tfrecord_changed(void **state)
{
    (void)state;
    write_records(tu_at("changing.tfrecord"), 4, 1);
    char spec[2048];
    snprintf(spec, sizeof spec, "tfrecord:files=%s | shuffle:buffer=3",
             tu_at("changing.tfrecord"));
    size_t size;
    void *st = state_after(spec, 2, NULL, &size);
    write_records(tu_at("changing.tfrecord"), 4, 1);
    expect_refused(spec, NULL, st, size, EF_EFORMAT, "tfrecord: file 0",
                   "changing.tfrecord", "the file changed", NULL);
    free(st);
}

/* A record that the file, cut short, no longer holds. */
static void test_tfrecord_cut(void **state)
{
    (void)state;
    write_records(tu_at("cut.tfrecord"), 0, 0); /* 4 of 793 bytes */
    char spec[2048];
    snprintf(spec, sizeof spec, "tfrecord:files=%s | shuffle:buffer=3",
             tu_at("cut.tfrecord"));
    size_t size;
    void *st = state_after(spec, 1, NULL, &size);
    /* the first two records: the state holds record 2, at their end */
    unsigned char two[2 * 793];
    FILE *f = fopen(tu_at("cut.tfrecord"), "rb");
    assert_non_null(f);
    assert_int_equal(fread(two, 1, sizeof two, f), sizeof two);
    fclose(f);
    tu_write_file(tu_at("cut.tfrecord"), two, sizeof two);
    expect_refused(spec, NULL, st, size, EF_EFORMAT,
                   "tfrecord: file 0, record 2", "no record at offset 1586",
                   "the file changed", NULL);
    free(st);
}

/* ---- text ---------------------------------------------------------- */

/* A line no longer where the state says: each was made longer. */
static void test_text_changed(void **state)
{
    (void)state;
    static const char before[] = "a0\na1\na2\na3\na4\na5\n";
    static const char after[] = "bb0\nbb1\nbb2\nbb3\nbb4\nbb5\n";
    tu_write_file(tu_at("changing.txt"), before, sizeof before - 1);
    char spec[2048];
    snprintf(spec, sizeof spec, "text:files=%s | shuffle:buffer=3",
             tu_at("changing.txt"));
    size_t size;
    void *st = state_after(spec, 2, NULL, &size);
    tu_write_file(tu_at("changing.txt"), after, sizeof after - 1);
    char where[1024];
    snprintf(where, sizeof where, "text: file 0 (%s), line ",
             tu_at("changing.txt"));
    expect_refused(spec, NULL, st, size, EF_EFORMAT, where,
                   "is not the 3 bytes the state says", "the file changed",
                   NULL);
    free(st);
}

/* ---- cifar --------------------------------------------------------- */

static void test_cifar(void **state)
{
    (void)state;
    char spec[2048];
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..3}.bin\"", tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    snprintf(spec, sizeof spec,
             "cifar:files=\"%s/c-{1..3}.bin\",shard=1/3 | shuffle:buffer=8 "
             "| echo:factor=3,shuffle=5 | batch:size=4 | repeat:count=2",
             tu_dir());
    check_resume(spec, spec, ALL_CUTS, NULL);
    /* a state past the end of fewer records */
    snprintf(spec, sizeof spec, "cifar:files=\"%s/c-{1..3}.bin\"", tu_dir());
    char other[2048];
    snprintf(other, sizeof other, "cifar:files=\"%s/c-{1..3}.bin\"", tu_dir());
    size_t size;
    void *st = state_after(spec, 60, NULL, &size);
    write_cifar(tu_at("c-3.bin"), 5);
    expect_refused(other, NULL, st, size, EF_EFORMAT, "next record 60",
                   "up to 45 records", NULL);
    write_cifar(tu_at("c-3.bin"), 30);
    free(st);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tar_one_reader),
        cmocka_unit_test(test_tar_cycle),
        cmocka_unit_test(test_tar_other_cycle),
        cmocka_unit_test(test_tar_reads_the_rest),
        cmocka_unit_test(test_tar_gzip),
        cmocka_unit_test(test_tar_parts),
        cmocka_unit_test(test_tar_list_changed),
        cmocka_unit_test(test_tar_shard_changed),
        cmocka_unit_test(test_tar_unordered),
        cmocka_unit_test(test_tar_skip),
        cmocka_unit_test(test_tfrecord),
        cmocka_unit_test(test_tfrecord_changed),
        cmocka_unit_test(test_tfrecord_cut),
        cmocka_unit_test(test_text_changed),
        cmocka_unit_test(test_cifar),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
