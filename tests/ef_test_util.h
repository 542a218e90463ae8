/* SPDX-License-Identifier: Apache-2.0 */
/* Small helpers shared by the test programs. Everything is static inline so
 * that a test which uses only some of them still compiles warning-free.
 * Include after <cmocka.h>. Their prefix is tu_ ("test utility"): eft_
 * belongs to the trainer in train/, which test_train.c also includes. */
#ifndef EF_TEST_UTIL_H
#define EF_TEST_UTIL_H

#include <ctype.h>
#include <stdarg.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "echoflow/echoflow.h"

/* A pipeline built from `spec` with `seed`; fails the test (naming the
 * library's message) when creation or parsing fails. */
static inline ef_pipeline *tu_pipeline(const char *spec, uint64_t seed)
{
    ef_pipeline *p = NULL;
    int rc = ef_pipeline_create(&p);
    if (rc != EF_OK || p == NULL)
        fail_msg("ef_pipeline_create: %d", rc);
    rc = ef_pipeline_set_seed(p, seed);
    if (rc != EF_OK)
        fail_msg("ef_pipeline_set_seed: %d (%s)", rc, ef_pipeline_error(p));
    rc = ef_pipeline_parse(p, spec);
    if (rc != EF_OK)
        fail_msg("ef_pipeline_parse(\"%s\") = %s: %s", spec, ef_status_name(rc),
                 ef_pipeline_error(p));
    return p;
}

/* Appends `spec` to p, failing the test with the library's message. */
static inline void tu_parse(ef_pipeline *p, const char *spec)
{
    int rc = ef_pipeline_parse(p, spec);
    if (rc != EF_OK)
        fail_msg("ef_pipeline_parse(\"%s\") = %s: %s", spec, ef_status_name(rc),
                 ef_pipeline_error(p));
}

/* The next sample; fails the test unless EF_OK. */
static inline ef_sample *tu_next(ef_pipeline *p)
{
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    if (rc != EF_OK || s == NULL)
        fail_msg("ef_pipeline_next = %s (%d): %s", ef_status_name(rc), rc,
                 ef_pipeline_error(p));
    return s;
}

/* The next sample, or NULL at the end; fails the test on any other status,
 * naming `what` (the spec, say). */
static inline ef_sample *tu_next_or_end(ef_pipeline *p, const char *what)
{
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    if (rc == EF_END)
        return NULL;
    if (rc != EF_OK || s == NULL)
        fail_msg("%s: ef_pipeline_next = %s (%d): %s", what, ef_status_name(rc),
                 rc, ef_pipeline_error(p));
    return s;
}

/* Asserts that the pipeline has ended (twice: END is sticky). */
static inline void tu_expect_end(ef_pipeline *p)
{
    for (int k = 0; k < 2; k++) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc != EF_END) {
            ef_sample_free(rc == EF_OK ? s : NULL);
            fail_msg("expected EF_END (call %d), got %s (%d): %s", k + 1,
                     ef_status_name(rc), rc, ef_pipeline_error(p));
        }
    }
}

/* Pulls everything; returns the number of samples; fails on an error. */
static inline long tu_drain(ef_pipeline *p)
{
    long n = 0;
    for (;;) {
        ef_sample *s = NULL;
        int rc = ef_pipeline_next(p, &s);
        if (rc == EF_END)
            return n;
        if (rc != EF_OK)
            fail_msg("ef_pipeline_next after %ld items = %s: %s", n,
                     ef_status_name(rc), ef_pipeline_error(p));
        ef_sample_free(s);
        n++;
    }
}

/* Field `name` of s; fails the test when absent. */
static inline ef_tensor tu_field(const ef_sample *s, const char *name)
{
    ef_tensor t;
    memset(&t, 0, sizeof t);
    int rc = ef_sample_get(s, name, &t);
    if (rc != EF_OK)
        fail_msg("sample has no field \"%s\" (%d)", name, rc);
    return t;
}

/* The scalar EF_I64 field `name`. */
static inline int64_t tu_i64(const ef_sample *s, const char *name)
{
    ef_tensor t = tu_field(s, name);
    if (t.dtype != EF_I64 || t.ndim != 0 || t.nbytes != 8 || t.data == NULL)
        fail_msg("field \"%s\": expected an i64 scalar, got dtype %d ndim %d "
                 "nbytes %zu",
                 name, (int)t.dtype, t.ndim, t.nbytes);
    int64_t v;
    memcpy(&v, t.data, sizeof v);
    return v;
}

/* Index of the first stage called `name`, or -1. */
static inline int tu_stage_index(const ef_pipeline *p, const char *name)
{
    int n = ef_pipeline_stage_count(p);
    for (int i = 0; i < n; i++) {
        ef_stage_stats st;
        memset(&st, 0, sizeof st);
        if (ef_pipeline_stage_stats(p, i, &st) == EF_OK && st.name != NULL &&
            strcmp(st.name, name) == 0)
            return i;
    }
    return -1;
}

/* Stats of the first stage called `name`; fails when absent. */
static inline ef_stage_stats tu_stage(const ef_pipeline *p, const char *name)
{
    ef_stage_stats st;
    memset(&st, 0, sizeof st);
    int i = tu_stage_index(p, name);
    if (i < 0)
        fail_msg("no stage called \"%s\" in the pipeline stats", name);
    if (ef_pipeline_stage_stats(p, i, &st) != EF_OK)
        fail_msg("ef_pipeline_stage_stats(%d) failed", i);
    return st;
}

/* An extra figure of a stage; fails when absent. */
static inline double tu_extra(const ef_stage_stats *st, const char *key)
{
    double v = -1.0;
    if (ef_stage_stats_extra(st, key, &v) != 1)
        fail_msg("stage \"%s\" has no stats extra \"%s\"",
                 st->name ? st->name : "?", key);
    return v;
}

/* Case-insensitive substring test (ASCII). */
static inline int tu_contains_ci(const char *hay, const char *needle)
{
    if (hay == NULL || needle == NULL)
        return 0;
    size_t n = strlen(needle);
    for (const char *h = hay;; h++) {
        size_t k = 0;
        while (k < n && h[k] &&
               tolower((unsigned char)h[k]) ==
                   tolower((unsigned char)needle[k]))
            k++;
        if (k == n)
            return 1;
        if (*h == '\0')
            return 0;
    }
}

/* How often `needle` (non-empty) occurs in `hay`, overlaps counted: a
 * message that names its context once, not twice. */
static inline int tu_count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *h = hay; (h = strstr(h, needle)) != NULL; h++)
        n++;
    return n;
}

/* Fails the test unless `msg` holds `needle` exactly once. */
/* A small deterministic generator (xorshift32) for test data. */
static inline uint32_t tu_xorshift(uint32_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    return *state;
}

/* The first pull of p fails with `status`, its message containing each
 * of the NULL-terminated words in ap; `what` names p in failures. */
static inline void tu_vexpect_first_error(ef_pipeline *p, const char *what,
                                          int status, va_list ap)
{
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    if (rc != status)
        fail_msg("%s: expected %s, got %s: %s", what, ef_status_name(status),
                 ef_status_name(rc), ef_pipeline_error(p));
    for (const char *w; (w = va_arg(ap, const char *)) != NULL;)
        if (!strstr(ef_pipeline_error(p), w))
            fail_msg("%s: message \"%s\" lacks \"%s\"", what,
                     ef_pipeline_error(p), w);
}

static inline void tu_expect_once(const char *msg, const char *needle)
{
    int n = tu_count(msg, needle);
    if (n != 1)
        fail_msg("'%s' occurs %d times in: %s", needle, n, msg);
}

/* ---- growable arrays ---------------------------------------------- */

/* An array of `type` that grows as it is pushed to: `typedef
 * TU_ARRAY(int64_t) vec;`, zero-initialised when empty, freed with
 * free(a.v). */
#define TU_ARRAY(type)                                                         \
    struct {                                                                   \
        type *v;                                                               \
        size_t n, cap;                                                         \
    }

/* `v` (of `*cap` items of `size` bytes) reallocated to twice the room;
 * fails the test when memory runs out. The caller owns the result. */
static inline void *tu_grow(void *v, size_t *cap, size_t size)
{
    size_t want = *cap ? 2 * *cap : 1024;
    void *w = realloc(v, want * size);
    if (w == NULL)
        fail_msg("out of memory growing an array to %zu items", want);
    *cap = want;
    return w;
}

/* Appends `x` to the TU_ARRAY behind pointer `a`. */
#define TU_PUSH(a, x)                                                          \
    do {                                                                       \
        if ((a)->n == (a)->cap)                                                \
            (a)->v = tu_grow((a)->v, &(a)->cap, sizeof *(a)->v);               \
        (a)->v[(a)->n++] = (x);                                                \
    } while (0)

/* Whether two TU_ARRAYs of one type hold the same bytes (for element types
 * without padding). */
#define TU_ARRAY_EQUAL(a, b)                                                   \
    ((a)->n == (b)->n &&                                                       \
     ((a)->n == 0 || memcmp((a)->v, (b)->v, (a)->n * sizeof *(a)->v) == 0))

/* ---- files --------------------------------------------------------- */

/* The temporary directory of tu_dir_create; empty before. */
static inline char *tu_dir(void)
{
    static char dir[256];
    return dir;
}

/* Creates $TMPDIR/<name>.XXXXXX (TMPDIR defaulting to /tmp) as tu_dir().
 * Returns 0, or -1 when it cannot: the result a cmocka setup returns. */
static inline int tu_dir_create(const char *name)
{
    const char *tmp = getenv("TMPDIR");
    char *dir = tu_dir();
    int k =
        snprintf(dir, 256, "%s/%s.XXXXXX", tmp && *tmp ? tmp : "/tmp", name);
    if (k <= 0 || k >= 256 || mkdtemp(dir) == NULL) {
        dir[0] = '\0';
        return -1;
    }
    return 0;
}

/* Removes `path` and, when it is a directory, what it holds (links are
 * removed, not followed). Returns 0 or -1. */
static inline int tu_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode))
        return unlink(path);
    DIR *d = opendir(path);
    if (d == NULL)
        return -1;
    int rc = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char sub[1024];
        int n = snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        if (n <= 0 || (size_t)n >= sizeof sub || tu_remove_tree(sub) != 0)
            rc = -1;
    }
    closedir(d);
    return rmdir(path) == 0 ? rc : -1;
}

/* Removes tu_dir() and everything in it. Returns 0, or -1 when something
 * stays behind: the result a cmocka teardown returns. */
static inline int tu_dir_remove(void)
{
    char *dir = tu_dir();
    if (dir[0] == '\0')
        return -1;
    int rc = tu_remove_tree(dir);
    dir[0] = '\0';
    return rc == 0 ? 0 : -1;
}

/* The path of `name` in tu_dir(), in static storage: the last 8 stay valid. */
static inline const char *tu_at(const char *name)
{
    static char bufs[8][512];
    static unsigned k;
    char *b = bufs[k++ % 8];
    int n = snprintf(b, sizeof bufs[0], "%s/%s", tu_dir(), name);
    if (n <= 0 || (size_t)n >= sizeof bufs[0])
        fail_msg("path too long: %s/%s", tu_dir(), name);
    return b;
}

/* Writes data[0, n) as the whole file `path`; fails the test on an error.
 * `data` may be NULL when n is 0. */
static inline void tu_write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        fail_msg("cannot create %s", path);
    if (n)
        assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* ---- time ---------------------------------------------------------- */

static inline double tu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
