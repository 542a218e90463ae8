/* SPDX-License-Identifier: Apache-2.0 */
/* The memory budget: queues wait for room and stay under it, a sample or
 * a buffer that cannot fit is a clear error, and gzip bombs stop early. */
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "codec/image.h"
#include "codec/tar_write.h"
#include "common/crc32c.h"
#include "echoflow/echoflow.h"
#include "ef_test_util.h"

#ifdef EF_HAVE_ZLIB
#include <zlib.h>
#endif

static int setup(void **state)
{
    (void)state;
    return tu_dir_create("ef_test_budget");
}

static int teardown(void **state)
{
    (void)state;
    return tu_dir_remove();
}

static ef_pipeline *budgeted(const char *spec, uint64_t budget, int skip)
{
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, budget), EF_OK);
    if (skip)
        assert_int_equal(ef_pipeline_set_on_error(p, EF_ON_ERROR_SKIP), EF_OK);
    tu_parse(p, spec);
    return p;
}

/* Pulls every sample, checking they come in source order (from `first`);
 * the status. */
static int drain_from(ef_pipeline *p, int64_t first, int64_t *n)
{
    ef_sample *s;
    int rc;
    *n = 0;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        assert_int_equal(ef_sample_identity(s).index, first + *n);
        ef_sample_free(s);
        (*n)++;
    }
    return rc;
}

/* Pulls until the end or a failure; the status. */
static int drain(ef_pipeline *p)
{
    ef_sample *s;
    int rc;
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK)
        ef_sample_free(s);
    return rc;
}

static void expect_failure(ef_pipeline *p, int status, const char *a,
                           const char *b)
{
    int rc = drain(p);
    if (rc != status)
        fail_msg("status %s, expected %s: %s", ef_status_name(rc),
                 ef_status_name(status), ef_pipeline_error(p));
    const char *msg = ef_pipeline_error(p);
    if (!strstr(msg, a) || (b && !strstr(msg, b)))
        fail_msg("'%s' lacks '%s' or '%s'", msg, a, b ? b : "");
}

static void test_queues_wait_for_room(void **state)
{
    (void)state;
    /* 1,008-byte samples (1,000 data + an 8-byte index) behind a queue of
     * 1,000: 1 MB without a budget; the budget holds it to 10 KiB, plus
     * the one sample an empty queue may always take */
    const char *spec = "range:n=3000,bytes=1000 | prefetch:depth=1000";
    ef_pipeline *p = budgeted(spec, 10240, 0);
    int64_t n;
    assert_int_equal(drain_from(p, 0, &n), EF_END);
    assert_int_equal(n, 3000);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_int_equal(ps.memory_budget, 10240);
    assert_true(ps.peak_bytes_held > 0);
    assert_true(ps.peak_bytes_held <= 10240 + 1008);
    assert_int_equal(ps.bytes_held, 0); /* all handed out */
    ef_pipeline_destroy(p);
    /* without a limit, the same queue fills up */
    p = budgeted(spec, 0, 0);
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    struct timespec pause = {0, 200000000}; /* the queue fills meanwhile */
    nanosleep(&pause, NULL);
    ef_pipeline_stats_get(p, &ps);
    assert_true(ps.bytes_held > 100 * 1008);
    assert_int_equal(drain_from(p, 1, &n), EF_END);
    ef_pipeline_destroy(p);
}

static void test_budget_option_rules(void **state)
{
    (void)state;
    assert_int_equal(ef_pipeline_set_memory_budget(NULL, 1), EF_EINVAL);
    ef_pipeline *p = tu_pipeline("range:n=3", 0);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_int_equal(ps.memory_budget, (uint64_t)1 << 30); /* the default */
    ef_sample *s = tu_next(p);
    ef_sample_free(s);
    assert_int_equal(ef_pipeline_set_memory_budget(p, 1), EF_ESTATE);
    ef_pipeline_destroy(p);
}

/* Items of 1,000 bytes, but item `big_at` of 9,000. */
typedef struct {
    int64_t next, n, big_at;
} growing;

static int growing_fn(void *user, int64_t epoch, int block, ef_sample **out)
{
    (void)block;
    growing *g = user;
    if (g->next == g->n)
        return EF_END;
    ef_sample *s =
        ef_sample_new((ef_sample_id){.index = g->next, .epoch = epoch});
    int64_t size = g->next == g->big_at ? 9000 : 1000;
    void *v;
    assert_int_equal(ef_sample_add_new(s, "bytes", EF_U8, 1, &size, &v),
                     EF_OK);
    memset(v, 0, (size_t)size);
    g->next++;
    *out = s;
    return EF_OK;
}

/* A buffer already full, one item in and one out each call (the shuffle
 * buffer's steady state), still refuses the item that passes the budget
 * with what it holds, and hands out nothing. */
static void test_full_buffer_refuses_what_passes_the_budget(void **state)
{
    (void)state;
    const char *specs[] = {"shuffle:5", "echo:factor=1,shuffle=5"};
    for (int k = 0; k < 2; k++) {
        growing g = {.n = 100, .big_at = 40};
        ef_pipeline *p = NULL;
        assert_int_equal(ef_pipeline_create(&p), EF_OK);
        assert_int_equal(ef_pipeline_set_memory_budget(p, 12000), EF_OK);
        assert_int_equal(ef_pipeline_add_source(p, growing_fn, &g, NULL),
                         EF_OK);
        tu_parse(p, specs[k]);
        ef_sample *s = NULL;
        int n = 0, rc;
        while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
            ef_sample_free(s);
            n++;
        }
        assert_int_equal(rc, EF_ENOMEM);
        assert_null(s);
        /* the buffer filled with items 0-4, then took one a call */
        assert_int_equal(n, 40 - 4);
        const char *msg = ef_pipeline_error(p);
        assert_non_null(strstr(msg, "its buffer at 5 samples (of 5): 13000 "
                                    "bytes, over the memory budget"));
        ef_pipeline_destroy(p);
    }
}

static void test_what_cannot_fit_is_an_error(void **state)
{
    (void)state;
    /* caught where range hands it to the prefetch's thread */
    ef_pipeline *p = budgeted("range:n=10,bytes=1000 | prefetch", 1000, 0);
    expect_failure(p, EF_ENOMEM,
                   "range: sample 0: 1008 bytes, over the memory budget "
                   "of 1000 bytes",
                   "--memory-budget");
    ef_pipeline_destroy(p);
    /* not a bad sample: skip does not pass over it */
    p = budgeted("range:n=10,bytes=1000 | prefetch", 1000, 1);
    expect_failure(p, EF_ENOMEM, "range: sample 0", NULL);
    ef_pipeline_destroy(p);
    p = budgeted("range:n=100,bytes=1000 | shuffle:50", 10000, 0);
    expect_failure(p, EF_ENOMEM,
                   "shuffle: its buffer at 10 samples (of 50): 10080 bytes",
                   NULL);
    ef_pipeline_destroy(p);
    p = budgeted("range:n=100,bytes=1000 | echo:factor=2,shuffle=50", 10000,
                 0);
    expect_failure(p, EF_ENOMEM, "echo: its buffer at 10 samples", NULL);
    ef_pipeline_destroy(p);
    p = budgeted("range:n=100,bytes=1000 | prefetch:depth=4 | "
                 "echo:factor=auto,max=4,pool=50",
                 20000, 0);
    expect_failure(p, EF_ENOMEM, "echo: its pool at", NULL);
    ef_pipeline_destroy(p);
    /* a buffer that fits alone runs, the queues before it waiting */
    p = budgeted("range:n=500,bytes=1000 | prefetch:depth=64 | shuffle:8 | "
                 "prefetch:depth=64",
                 20000, 0);
    assert_int_equal(tu_drain(p), 500);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_true(ps.peak_bytes_held <= 20000 + 2 * 1008);
    ef_pipeline_destroy(p);
}

/* Shards 0..n-1 of `per` samples with a 1,000-byte "bin" member each. */
static void write_shards(int n, int per)
{
    static unsigned char data[1000];
    for (int s = 0; s < n; s++) {
        char name[32];
        snprintf(name, sizeof name, "s-%d.tar", s);
        FILE *f = fopen(tu_at(name), "wb");
        assert_non_null(f);
        ef__err err;
        for (int i = 0; i < per; i++) {
            char member[32];
            snprintf(member, sizeof member, "%06d.bin", i);
            memset(data, s * 31 + i, sizeof data);
            assert_int_equal(ef__tar_write_member(f, member, data, sizeof data,
                                                  &err),
                             EF_OK);
        }
        assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
        fclose(f);
    }
}

static void test_tar_readers_share_the_budget(void **state)
{
    (void)state;
    write_shards(4, 200);
    /* ordered: the consumer waits on one reader's queue while the others
     * hold the budget; an empty queue always takes one sample, so this
     * cannot deadlock */
    for (int ordered = 0; ordered <= 1; ordered++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "tar:urls=\"%s/s-{0..3}.tar\",cycle=4,queue=256,ordered=%s",
                 tu_dir(), ordered ? "true" : "false");
        ef_pipeline *p = budgeted(spec, 8000, 0);
        int seen[4][200] = {{0}};
        ef_sample *s;
        int rc, n = 0;
        while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
            int64_t ix = ef_sample_identity(s).index;
            seen[ix >> 32][ix & 0xffffffff]++;
            ef_sample_free(s);
            n++;
        }
        assert_int_equal(rc, EF_END);
        assert_int_equal(n, 800);
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 200; i++)
                assert_int_equal(seen[k][i], 1);
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(p, &ps);
        /* a sample is its 1,000 data bytes and its key and url fields */
        assert_true(ps.peak_bytes_held <= 8000 + 4 * 1200);
        ef_pipeline_destroy(p);
    }
}

/* Shard `name` of the members names[i] with sizes[i] bytes each. */
static void write_members(const char *name, const char *const *names,
                          const size_t *sizes, int n)
{
    static unsigned char data[20000];
    FILE *f = fopen(tu_at(name), "wb");
    assert_non_null(f);
    ef__err err;
    for (int i = 0; i < n; i++) {
        assert_true(sizes[i] <= sizeof data);
        assert_int_equal(ef__tar_write_member(f, names[i], data, sizes[i],
                                              &err),
                         EF_OK);
    }
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    fclose(f);
}

static void test_tar_readers_hold_one_sample_past_the_budget(void **state)
{
    (void)state;
    /* 8 shards of 20 samples of 10,000 bytes, 8 readers, a budget of 3
     * samples: the readers charge what they read, so only the sample the
     * consumer waits for may pass the budget, not one per reader */
    static const size_t sizes[20] = {
        10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000,
        10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000, 10000};
    const char *names[20];
    char keys[20][16];
    for (int i = 0; i < 20; i++) {
        snprintf(keys[i], sizeof keys[i], "%06d.bin", i);
        names[i] = keys[i];
    }
    for (int k = 0; k < 8; k++) {
        char shard[32];
        snprintf(shard, sizeof shard, "w-%d.tar", k);
        write_members(shard, names, sizes, 20);
    }
    for (int ordered = 0; ordered <= 1; ordered++) {
        char spec[512];
        snprintf(spec, sizeof spec,
                 "tar:urls=\"%s/w-{0..7}.tar\",cycle=8,ordered=%s",
                 tu_dir(), ordered ? "true" : "false");
        ef_pipeline *p = budgeted(spec, 30000, 0);
        ef_sample *s = tu_next(p);
        uint64_t one = tu_field(s, "bin").nbytes +
                       tu_field(s, "__key__").nbytes +
                       tu_field(s, "__url__").nbytes;
        ef_sample_free(s);
        /* the readers read ahead as far as they may meanwhile */
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
        assert_int_equal(tu_drain(p), 159);
        ef_pipeline_stats ps;
        ef_pipeline_stats_get(p, &ps);
        /* the sample past the budget, and each reader's __key__ and
         * __url__ bytes, charged when its sample is whole */
        if (ps.peak_bytes_held > 30000 + one + 8 * (one - 10000))
            fail_msg("ordered=%d: %llu bytes held at the peak", ordered,
                     (unsigned long long)ps.peak_bytes_held);
        assert_int_equal(ps.bytes_held, 0); /* every charge given back */
        ef_pipeline_destroy(p);
    }
}

static void test_tar_charges_come_back(void **state)
{
    (void)state;
    /* a malformed sample (a field twice), then a member whose data is cut
     * short: under skip, each gives back what its reader charged */
    static const char *const names[] = {"a.x", "b.x", "b.x", "c.x", "d.x"};
    static const size_t sizes[] = {3000, 3000, 3000, 3000, 3000};
    write_members("bad.tar", names, sizes, 5);
    assert_int_equal(truncate(tu_at("bad.tar"), 4 * 3584 + 512 + 1000), 0);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s %s\",cycle=2",
             tu_at("bad.tar"), tu_at("w-0.tar"));
    ef_pipeline *p = budgeted(spec, 20000, 1);
    /* a, c (whole before d's header), and the other shard's 20 */
    assert_int_equal(tu_drain(p), 22);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_int_equal(ps.skipped, 1);
    assert_int_equal(ps.bytes_held, 0);
    char why[512];
    assert_int_equal(ef_pipeline_abandoned(p, why, sizeof why), 1);
    assert_non_null(strstr(why, "truncated data of member 'd.x'"));
    ef_pipeline_destroy(p);
    /* without skip the truncation fails the pipeline, naming the member */
    p = budgeted(spec, 20000, 0);
    expect_failure(p, EF_EFORMAT, "bad.tar: member 'b.x' at offset 7168",
                   NULL);
    ef_pipeline_destroy(p);
}

static void test_tar_sample_over_the_budget(void **state)
{
    (void)state;
    /* two members that fit the budget alone, not together */
    static const char *const names[] = {"k.a", "k.b"};
    static const size_t sizes[] = {6000, 6000};
    write_members("two.tar", names, sizes, 2);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\"", tu_at("two.tar"));
    ef_pipeline *p = budgeted(spec, 10000, 0);
    expect_failure(p, EF_ENOMEM,
                   "two.tar: sample 'k' at offset 0, with its member 'k.b': "
                   "12000 bytes, over the memory budget of 10000 bytes",
                   NULL);
    tu_expect_once(ef_pipeline_error(p), "tar: shard 0: ");
    ef_pipeline_destroy(p);
}

#ifdef EF_HAVE_ZLIB
/* A tar of one member of `size` zero bytes, gzip-compressed: about a
 * thousandth of its size. */
static void write_bomb(const char *path, size_t size)
{
    unsigned char *zeros = calloc(1, size);
    assert_non_null(zeros);
    FILE *f = fopen(tu_at("bomb.tar"), "wb");
    ef__err err;
    assert_int_equal(ef__tar_write_member(f, "a.bin", zeros, size, &err),
                     EF_OK);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    fclose(f);
    gzFile gz = gzopen(path, "wb1");
    assert_non_null(gz);
    f = fopen(tu_at("bomb.tar"), "rb");
    size_t got;
    while ((got = fread(zeros, 1, 1 << 20, f)) > 0)
        assert_int_equal(gzwrite(gz, zeros, (unsigned)got), (int)got);
    fclose(f);
    assert_int_equal(gzclose(gz), Z_OK);
    free(zeros);
}
#endif

static void test_gzip_bomb_stops_early(void **state)
{
    (void)state;
#ifdef EF_HAVE_ZLIB
    write_bomb(tu_at("bomb.tar.gz"), (size_t)100 << 20);
    char spec[512];
    /* past 64 MiB inflated at over 200 to 1: stopped, a format error */
    snprintf(spec, sizeof spec, "tar:urls=%s | take:count=1",
             tu_at("bomb.tar.gz"));
    ef_pipeline *p = budgeted(spec, (uint64_t)1 << 30, 0);
    expect_failure(p, EF_EFORMAT, "bomb.tar.gz: gzip data inflates to",
                   "a gzip bomb");
    ef_stage_stats st = tu_stage(p, "tar");
    assert_true(tu_extra(&st, "bytes") < 1e6); /* compressed bytes read */
    ef_pipeline_destroy(p);
    /* under skip, the shard is abandoned */
    p = budgeted(spec, (uint64_t)1 << 30, 1);
    assert_int_equal(tu_drain(p), 0);
    char why[512];
    assert_int_equal(ef_pipeline_abandoned(p, why, sizeof why), 1);
    assert_non_null(strstr(why, "a gzip bomb"));
    ef_pipeline_destroy(p);
    /* with the ratio allowed, the budget refuses the member before its
     * 100 MiB are allocated */
    snprintf(spec, sizeof spec, "tar:urls=%s,max_inflate=0 | take:count=1",
             tu_at("bomb.tar.gz"));
    p = budgeted(spec, 16 << 20, 0);
    expect_failure(p, EF_ENOMEM,
                   "bomb.tar.gz: member 'a.bin' at offset 0: 104857600 "
                   "bytes, over the memory budget of 16777216 bytes",
                   NULL);
    tu_expect_once(ef_pipeline_error(p), "tar: shard 0: ");
    ef_pipeline_destroy(p);
#else
    skip();
#endif
}

static void test_tfrecord_over_budget(void **state)
{
    (void)state;
    /* a record that claims 2 MB, with a true length CRC */
    unsigned char head[12];
    uint64_t len = 2000000;
    for (int i = 0; i < 8; i++)
        head[i] = (unsigned char)(len >> (8 * i));
    uint32_t crc = ef__crc32c_mask(ef__crc32c(0, head, 8));
    for (int i = 0; i < 4; i++)
        head[8 + i] = (unsigned char)(crc >> (8 * i));
    FILE *f = fopen(tu_at("big.tfrecord"), "wb");
    assert_int_equal(fwrite(head, 1, sizeof head, f), sizeof head);
    fclose(f);
    char spec[512];
    snprintf(spec, sizeof spec, "tfrecord:files=%s", tu_at("big.tfrecord"));
    ef_pipeline *p = budgeted(spec, 1000000, 0);
    expect_failure(p, EF_ENOMEM,
                   "the record at offset 0: 2000000 bytes, over the memory "
                   "budget of 1000000 bytes",
                   NULL);
    ef_pipeline_destroy(p);
}

static void test_whole_file_sources_check_the_budget(void **state)
{
    (void)state;
    /* idx reads its file whole: a header that announces more than the
     * budget is refused before the data is read */
    char spec[512];
    snprintf(spec, sizeof spec,
             "idx:images=%s/t10k-images-idx3-ubyte.gz", EF_FASHION_MNIST_DIR);
    ef_pipeline *p = budgeted(spec, 1 << 20, 0);
    expect_failure(p, EF_ENOMEM,
                   "t10k-images-idx3-ubyte.gz: the data its header "
                   "announces: 7840000 bytes, over the memory budget of "
                   "1048576 bytes",
                   NULL);
    ef_pipeline_destroy(p);
    p = budgeted(spec, 8 << 20, 0);
    assert_int_equal(tu_drain(p), 10000);
    ef_pipeline_destroy(p);
    /* cifar, whose size shows only as it is read: 40 records of 3,073 */
    static unsigned char record[3073];
    FILE *f = fopen(tu_at("c.bin"), "wb");
    for (int i = 0; i < 40; i++) {
        record[0] = (unsigned char)(i % 10);
        assert_int_equal(fwrite(record, 1, sizeof record, f), sizeof record);
    }
    fclose(f);
    snprintf(spec, sizeof spec, "cifar:files=%s", tu_at("c.bin"));
    p = budgeted(spec, 100000, 0);
    expect_failure(p, EF_ENOMEM,
                   "c.bin: its first 40 records: 123200 bytes, over the "
                   "memory budget of 100000 bytes",
                   NULL);
    ef_pipeline_destroy(p);
    p = budgeted(spec, 200000, 0);
    assert_int_equal(tu_drain(p), 40);
    ef_pipeline_destroy(p);
}

static int identity_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    *out = ef_sample_clone(in);
    return *out ? EF_OK : EF_ENOMEM;
}

static void test_unordered_map_queue_is_budgeted(void **state)
{
    (void)state;
    ef_pipeline *p = NULL;
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, 5000), EF_OK);
    tu_parse(p, "range:n=1000,bytes=1000");
    assert_int_equal(ef_pipeline_add_map(p, identity_map, NULL,
                                         "threads=2,ordered=false"),
                     EF_OK);
    assert_int_equal(tu_drain(p), 1000);
    ef_pipeline_stats ps;
    ef_pipeline_stats_get(p, &ps);
    assert_true(ps.peak_bytes_held > 0 && ps.peak_bytes_held <= 5000 + 1008);
    ef_pipeline_destroy(p);
}

/* A map whose output is 3,000 bytes, whatever its input; counts calls. */
static atomic_int big_calls;

static int big_map(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    (void)ctx;
    atomic_fetch_add(&big_calls, 1);
    *out = ef_sample_new(ef_sample_identity(in));
    int64_t shape[1] = {3000};
    void *data;
    if (!*out || ef_sample_add_new(*out, "x", EF_U8, 1, shape, &data) != EF_OK)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    memset(data, 0, 3000);
    return EF_OK;
}

/* No queue sees what batch, a map or a source builds before the consumer
 * takes it: the budget still refuses one larger than itself. */
static void test_items_no_queue_sees_fit_the_budget(void **state)
{
    (void)state;
    ef_pipeline *p = budgeted("range:n=10,bytes=1000 | batch:10", 5000, 0);
    expect_failure(p, EF_ENOMEM,
                   "batch: sample 0: 10080 bytes, over the memory budget "
                   "of 5000 bytes",
                   "--memory-budget");
    ef_stage_stats st = tu_stage(p, "batch");
    assert_true(tu_extra(&st, "fields_copied") == 0); /* refused unbuilt */
    ef_pipeline_destroy(p);
    p = budgeted("range:n=10,bytes=1000 | batch:10", 5000, 1);
    expect_failure(p, EF_ENOMEM, "batch: sample 0", NULL); /* not skipped */
    ef_pipeline_destroy(p);
    p = budgeted("range:n=10,bytes=1000 | batch:10 | take:1", 5000, 0);
    expect_failure(p, EF_ENOMEM, "batch: sample 0: 10080 bytes", NULL);
    ef_pipeline_destroy(p);
    p = budgeted("range:n=3,bytes=2000", 1000, 0);
    expect_failure(p, EF_ENOMEM, "range: sample 0: 2008 bytes", NULL);
    ef_pipeline_destroy(p);
    /* batches that fit pass */
    p = budgeted("range:n=10,bytes=100 | batch:4", 1000, 0);
    assert_int_equal(tu_drain(p), 3);
    ef_pipeline_destroy(p);
    /* a map's output fails on its worker, which stops there rather than
     * fill the ordered ring with more */
    atomic_store(&big_calls, 0);
    assert_int_equal(ef_pipeline_create(&p), EF_OK);
    assert_int_equal(ef_pipeline_set_memory_budget(p, 1000), EF_OK);
    tu_parse(p, "range:n=100");
    assert_int_equal(ef_pipeline_add_map(p, big_map, NULL, "threads=1"), EF_OK);
    expect_failure(p, EF_ENOMEM,
                   "map: item 0 (epoch 0): its output: 3000 bytes, over the "
                   "memory budget of 1000 bytes",
                   "--memory-budget");
    ef_pipeline_destroy(p);
    assert_int_equal(atomic_load(&big_calls), 1);
}

/* decode turns a small PNG into pixels larger than the budget. */
static void test_decode_output_fits_the_budget(void **state)
{
    (void)state;
    static unsigned char px[100 * 100 * 3];
    ef_buffer *png = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__png_encode(px, 100, 100, 3, &png, &err);
    if (rc == EF_EUNSUPPORTED)
        skip();
    assert_int_equal(rc, EF_OK);
    assert_true(ef_buffer_size(png) < 5000);
    FILE *f = fopen(tu_at("img.tar"), "wb");
    assert_non_null(f);
    assert_int_equal(ef__tar_write_member(f, "000000.png", ef_buffer_data(png),
                                          ef_buffer_size(png), &err),
                     EF_OK);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    fclose(f);
    ef_buffer_release(png);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | decode", tu_at("img.tar"));
    ef_pipeline *p = budgeted(spec, 10000, 0);
    /* the message names the shard and the sample's key */
    char where[600];
    snprintf(where, sizeof where,
             "decode: item 0 (epoch 0), file '%s', key '000000': its output: "
             "30",
             tu_at("img.tar"));
    expect_failure(p, EF_ENOMEM, where,
                   "bytes, over the memory budget of 10000 bytes");
    ef_pipeline_destroy(p);
}

#ifdef EF_HAVE_ZLIB
/* A PNG whose header claims 16384 x 16384 RGB pixels (768 MiB) over a
 * few bytes of data: decode refuses it from the header, under a 100 MB
 * budget, before allocating the pixels (it used to allocate them, then
 * fail on the missing data). */
static void test_hostile_png_header_is_refused_before_decoding(void **state)
{
    (void)state;
    static unsigned char px[4 * 4 * 3];
    ef_buffer *png = NULL;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__png_encode(px, 4, 4, 3, &png, &err);
    if (rc == EF_EUNSUPPORTED)
        skip();
    assert_int_equal(rc, EF_OK);
    unsigned char *b = ef_buffer_data(png);
    /* IHDR: length (8), type (12), width (16), height (20) ... crc (29) */
    assert_memory_equal(b + 12, "IHDR", 4);
    const unsigned char side[4] = {0, 0, 0x40, 0}; /* 16384, big-endian */
    memcpy(b + 16, side, 4);
    memcpy(b + 20, side, 4);
    uLong crc = crc32(crc32(0, NULL, 0), b + 12, 17);
    for (int i = 0; i < 4; i++)
        b[29 + i] = (unsigned char)(crc >> (24 - 8 * i));
    FILE *f = fopen(tu_at("hostile.tar"), "wb");
    assert_non_null(f);
    assert_int_equal(ef__tar_write_member(f, "big.png", b, ef_buffer_size(png),
                                          &err),
                     EF_OK);
    assert_int_equal(ef__tar_write_end(f, &err), EF_OK);
    fclose(f);
    ef_buffer_release(png);
    char spec[512];
    snprintf(spec, sizeof spec, "tar:urls=\"%s\" | decode",
             tu_at("hostile.tar"));
    ef_pipeline *p = budgeted(spec, 100000000, 0);
    expect_failure(p, EF_ENOMEM,
                   "key 'big': its output: 805306368 bytes, over the memory "
                   "budget of 100000000 bytes",
                   NULL);
    ef_pipeline_destroy(p);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queues_wait_for_room),
        cmocka_unit_test(test_budget_option_rules),
        cmocka_unit_test(test_what_cannot_fit_is_an_error),
        cmocka_unit_test(test_full_buffer_refuses_what_passes_the_budget),
        cmocka_unit_test(test_tar_readers_share_the_budget),
        cmocka_unit_test(test_tar_readers_hold_one_sample_past_the_budget),
        cmocka_unit_test(test_tar_charges_come_back),
        cmocka_unit_test(test_tar_sample_over_the_budget),
        cmocka_unit_test(test_gzip_bomb_stops_early),
        cmocka_unit_test(test_tfrecord_over_budget),
        cmocka_unit_test(test_whole_file_sources_check_the_budget),
#ifdef EF_HAVE_ZLIB
        cmocka_unit_test(test_hostile_png_header_is_refused_before_decoding),
#endif
        cmocka_unit_test(test_unordered_map_queue_is_budgeted),
        cmocka_unit_test(test_items_no_queue_sees_fit_the_budget),
        cmocka_unit_test(test_decode_output_fits_the_budget),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
