/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for byte streams (src/io/stream.c): the sniffing, plain,
 * gzip and zstd reading that every file source reads through.
 *
 * Each input is read as a memory stream in large pieces and again in
 * small ones of varying sizes, forced plain, and from a temporary file
 * the way the sources open one: whole (idx, cifar), from an offset
 * (ef__stream_open_at, a restored tar or TFRecord reader) and as a range
 * (ef__stream_open_range, a fetched record). All must agree with the
 * first read: the same bytes and the same outcome. Input without the gzip
 * or zstd magic must come back byte for byte; compressed input must
 * inflate to its end or fail with EF_EFORMAT (EF_EUNSUPPORTED without the
 * library) and a message naming the stream. Any violation aborts, which
 * libFuzzer reports as a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "io/stream.h"

#define NAME "fuzz.stream"
/* inflated bytes kept per read; a libFuzzer input of 4 KiB inflates to
 * about 4 MiB at most, so this is only a guard */
#define KEEP ((size_t)64 << 20)

static char path[64];

static void remove_file(void)
{
    unlink(path);
}

/* What one read of a stream gave: its bytes up to the first failure, and
 * how it ended. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
    int rc;
    int kept_all; /* 0: more than KEEP bytes, the rest not compared */
    ef__err err;
} result;

/* Reads s from where it is to its end or first failure, in pieces of
 * steps[0], steps[1], ... in turn; closes s. */
static void read_all(ef__stream *s, const size_t *steps, size_t nsteps,
                     result *r)
{
    static unsigned char piece[1 << 17];
    uint64_t start = ef__stream_offset(s);
    memset(r, 0, sizeof *r);
    ef__err_clear(&r->err);
    r->kept_all = 1;
    for (size_t i = 0;; i = (i + 1) % nsteps) {
        size_t want = steps[i], got = 0;
        CHECK(want <= sizeof piece);
        r->rc = ef__stream_read(s, piece, want, &got, &r->err);
        if (r->rc != EF_OK)
            break;
        CHECK(got <= want);
        if (r->n + got > KEEP) {
            r->kept_all = 0;
            break;
        }
        /* doubling: a bomb read in small pieces costs linear time */
        if (r->n + got > r->cap) {
            r->cap = 2 * (r->n + got);
            r->p = realloc(r->p, r->cap);
            CHECK(r->p != NULL);
        }
        if (got > 0)
            memcpy(r->p + r->n, piece, got);
        r->n += got;
        CHECK(ef__stream_offset(s) == start + r->n);
        if (got < want) { /* the end: it stays the end */
            CHECK(ef__stream_read(s, piece, 1, &got, &r->err) == EF_OK);
            CHECK(got == 0);
            break;
        }
    }
    ef__stream_close(s);
}

/* A failure is a known status with a message naming `name`. */
static void check_failure(const result *r, const char *name)
{
    CHECK(r->rc == EF_EFORMAT || r->rc == EF_EUNSUPPORTED ||
          r->rc == EF_ENOMEM);
    CHECK(r->err.status == r->rc);
    fuzz_check_message(r->err.msg, sizeof r->err.msg, name);
}

/* b read the same data as a, perhaps from byte `from` on and up to `to`:
 * the same bytes and outcome. */
static void check_same(const result *a, const result *b, size_t from, size_t to)
{
    if (!a->kept_all || !b->kept_all)
        return;
    if (a->rc != EF_OK) {
        /* a range may end before the damage; otherwise b meets it too */
        CHECK(b->rc == a->rc || (b->rc == EF_OK && b->n == to - from));
        size_t n = a->n - (from < a->n ? from : a->n);
        n = n < b->n ? n : b->n;
        CHECK(n == 0 || memcmp(a->p + from, b->p, n) == 0);
        return;
    }
    CHECK(b->rc == EF_OK);
    size_t end = to < a->n ? to : a->n;
    CHECK(b->n == end - from);
    CHECK(b->n == 0 || memcmp(a->p + from, b->p, b->n) == 0);
}

static uint64_t hash(const uint8_t *data, size_t size)
{
    uint64_t h = 1469598103934665603u;
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211u;
    return h;
}

static void write_file(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        strcpy(path, "/tmp/ef_fuzz_stream.XXXXXX");
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        close(fd);
        atexit(remove_file);
    }
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const size_t big[] = {1 << 16};
    static const size_t small[] = {1, 7, 2, 4093, 3, 65537, 64};
    int kind = size >= 2 && data[0] == 0x1f && data[1] == 0x8b ? EF__COMP_GZIP
               : size >= 4 && data[0] == 0x28 && data[1] == 0xb5 &&
                       data[2] == 0x2f && data[3] == 0xfd
                   ? EF__COMP_ZSTD
                   : EF__COMP_NONE;
    ef__stream *s;
    ef__err err;
    ef__err_clear(&err);

    /* sniffing, in large pieces: the reference read */
    result a;
    CHECK(ef__stream_open_memory(&s, data, size, NAME, NULL, &err) == EF_OK);
    CHECK(ef__stream_compression(s) == -1);
    CHECK(ef__stream_size(s) == (int64_t)size);
    CHECK(strcmp(ef__stream_name(s), NAME) == 0);
    {
        size_t got;
        unsigned char first;
        ef__stream *t;
        CHECK(ef__stream_open_memory(&t, data, size, NAME, NULL, &err) ==
              EF_OK);
        int rc = ef__stream_read(t, &first, 1, &got, &err);
        CHECK(rc != EF_OK || ef__stream_compression(t) == kind);
        ef__stream_close(t);
    }
    read_all(s, big, 1, &a);
    if (kind == EF__COMP_NONE) {
        CHECK(a.rc == EF_OK && a.kept_all);
        CHECK(a.n == size && (size == 0 || memcmp(a.p, data, size) == 0));
    } else if (a.rc != EF_OK) {
        check_failure(&a, NAME);
    }

    /* in small pieces of changing sizes */
    result b;
    CHECK(ef__stream_open_memory(&s, data, size, NAME, NULL, &err) == EF_OK);
    read_all(s, small, sizeof small / sizeof *small, &b);
    check_same(&a, &b, 0, SIZE_MAX);
    if (b.rc != EF_OK)
        check_failure(&b, NAME);
    free(b.p);

    /* forced plain: the bytes as they are, magic or not */
    ef__stream_opts plain;
    ef__stream_opts_init(&plain);
    plain.compression = 0;
    CHECK(ef__stream_open_memory(&s, data, size, NAME, &plain, &err) == EF_OK);
    read_all(s, small, sizeof small / sizeof *small, &b);
    CHECK(b.rc == EF_OK && b.n == size);
    CHECK(size == 0 || memcmp(b.p, data, size) == 0);
    free(b.p);

    /* a file, opened as the idx and cifar sources open theirs */
    write_file(data, size);
    CHECK(ef__stream_open(&s, path, NULL, &err) == EF_OK);
    CHECK(ef__stream_size(s) == (int64_t)size);
    read_all(s, big, 1, &b);
    check_same(&a, &b, 0, SIZE_MAX);
    if (b.rc != EF_OK)
        check_failure(&b, path);
    free(b.p);

    /* from an offset (restored readers), and as a range (fetched
     * records): an offset just past the data's end is refused */
    uint64_t h = hash(data, size);
    size_t at = (size_t)(h % (a.n + 2)), to = at + 1 + (size_t)(h >> 32) % 97;
    for (int range = 0; range < 2 && a.kept_all; range++) {
        int rc = range ? ef__stream_open_range(&s, path, NULL, at, to, &err)
                       : ef__stream_open_at(&s, path, NULL, at, &err);
        if (rc != EF_OK) {
            CHECK(s == NULL);
            CHECK(rc == a.rc || (a.rc == EF_OK && at > a.n));
            CHECK(rc == EF_EFORMAT || rc == EF_EUNSUPPORTED);
            fuzz_check_message(err.msg, sizeof err.msg, path);
            continue;
        }
        CHECK(a.rc != EF_OK || at <= a.n);
        CHECK(ef__stream_offset(s) == at);
        read_all(s, small, sizeof small / sizeof *small, &b);
        check_same(&a, &b, at, range ? to : SIZE_MAX);
        if (b.rc != EF_OK)
            check_failure(&b, path);
        free(b.p);
    }
    free(a.p);
    return 0;
}
