/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for pipeline checkpoints: ef_pipeline_restore_state
 * (src/pipeline/state.c, src/pipeline/pipeline_state.c and the stages' restore and fetch
 * hooks), then a few pulls.
 *
 * Byte 0 of an input picks one of the fixed pipelines below (its value
 * modulo their count) and how the rest is handed over: with bit 7 set, as
 * it is; otherwise sealed, so that the fuzzer explores the parser and not
 * the checksum: a rest that starts with "EFST" keeps its bytes after the
 * header as the payload, any other rest is the payload itself, and the
 * header (magic, version, length, CRC-32C) is written anew.
 *
 * Checked: a failed restore returns EF_EFORMAT, EF_ESPEC or
 * EF_EUNSUPPORTED with a message, and leaves the pipeline either as it
 * was (it runs from the start) or failed with that status. After a
 * restore that succeeded, a second one is refused (EF_ESTATE), and pulls
 * give well-formed samples, or the end or
 * one of those errors, sticky. Then the pipeline is saved again and that
 * state restored into a new pipeline: it must be accepted, and, for the
 * deterministic pipelines, deliver what the first one delivers next,
 * identity and bytes.
 *
 * Built with -DFUZZ_STATE_SEEDS instead, this file is the program that
 * writes the seed corpus: states saved from each pipeline at several
 * points (`fuzz_state_seeds DIR`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "echoflow/echoflow.h"
#include "fuzz.h"
#include "pipeline/state.h"

#define SEED 7

/* Small pipelines, so that a restore and its pulls take milliseconds;
 * between them every stage with a record, fixed and auto echo. */
static const struct {
    const char *spec;
    int deterministic; /* auto echo depends on timing */
} pipelines[] = {
    {"range:n=50,bytes=4 | shuffle:buffer=8 | echo:factor=2,shuffle=4 | "
     "batch:size=3 | prefetch:depth=2",
     1},
    {"range:n=40,bytes=2 | echo:factor=auto,max=3,pool=8 | batch:size=4", 0},
    {"range:n=30,bytes=3 | repeat:count=3 | shuffle:buffer=5 | "
     "take:count=50 | echo:factor=2.5",
     1},
    {"range:n=24 | batch:size=4 | echo:factor=2,shuffle=3 | "
     "prefetch:depth=3 | repeat:count=2",
     1},
    {"range:n=20,bytes=1 | map:fn=noop,threads=2 | shuffle:buffer=6 | "
     "batch:size=5 | take:count=3 | repeat",
     1},
    {"range:n=16,bytes=2 | prefetch:depth=2 | "
     "echo:factor=auto,max=2,pool=4,shuffle=3 | take:count=30",
     0},
    /* a policy fed each item's value as it is pulled (pull_one) */
    {"range:n=30,bytes=2 | echo:factor=2.5,policy=rank,pool=6,max=4,"
     "mix=0.5 | batch:size=3",
     1},
};
#define NPIPELINES ((int)(sizeof pipelines / sizeof pipelines[0]))
#define RAW 0x80
#define PULLS 24

static ef_pipeline *build(int which)
{
    ef_pipeline *p = NULL;
    CHECK(ef_pipeline_create(&p) == EF_OK && p);
    CHECK(ef_pipeline_set_seed(p, SEED) == EF_OK);
    CHECK(ef_pipeline_parse(p, pipelines[which].spec) == EF_OK);
    return p;
}

static void check_message(const ef_pipeline *p)
{
    fuzz_check_message(ef_pipeline_error(p), EF__ERR_MAX, NULL);
}

/* The failures a state about the data may cause. */
static int state_error(int rc)
{
    return rc == EF_EFORMAT || rc == EF_ESPEC || rc == EF_EUNSUPPORTED;
}

/* An item as the consumer sees it: identity and a hash of every field. */
typedef struct {
    int rc;
    ef_sample_id id;
    uint64_t hash;
} seen;

static seen pull_one(ef_pipeline *p)
{
    seen v = {0};
    ef_sample *s = NULL;
    v.rc = ef_pipeline_next(p, &s);
    if (v.rc != EF_OK) {
        CHECK(s == NULL);
        return v;
    }
    CHECK(s != NULL);
    v.id = ef_sample_identity(s);
    CHECK(v.id.index >= 0 && v.id.epoch >= 0 && v.id.echo_copy >= 0);
    /* values for echo policies: a batch's members', by index */
    ef_sample_id m[16];
    double values[16];
    int64_t k = ef_sample_members(s, m, 16);
    CHECK(k >= 0 && k <= 16);
    for (int64_t i = 0; i < k; i++)
        values[i] = (double)(m[i].index % 7);
    CHECK(ef_pipeline_feedback(p, m, values, (size_t)k) == EF_OK);
    v.hash = 1469598103934665603ull;
    int nf = ef_sample_field_count(s);
    CHECK(nf >= 0 && nf <= EF_MAX_FIELDS);
    for (int f = 0; f < nf; f++) {
        ef_tensor t;
        CHECK(ef_sample_field(s, f, &t) == EF_OK);
        size_t n = ef_dtype_size(t.dtype);
        CHECK(n > 0 && t.ndim >= 0 && t.ndim <= EF_MAX_DIMS);
        for (int d = 0; d < t.ndim; d++) {
            CHECK(t.shape[d] >= 0);
            n *= (size_t)t.shape[d];
            v.hash = (v.hash ^ (uint64_t)t.shape[d]) * 1099511628211ull;
        }
        CHECK(n == t.nbytes && (n == 0 || t.data));
        /* every byte read: a view of freed or short memory shows up
         * under ASan */
        for (size_t j = 0; j < t.nbytes; j++)
            v.hash = (v.hash ^ ((const unsigned char *)t.data)[j]) *
                     1099511628211ull;
    }
    ef_sample_free(s);
    return v;
}

/* Pulls up to `max` items into out (NULL: not kept); returns the count.
 * An end or an error stops it and must be sticky. */
static int pull_checked(ef_pipeline *p, seen *out, int max, int *last)
{
    int n = 0;
    *last = EF_OK;
    while (n < max) {
        seen v = pull_one(p);
        if (v.rc != EF_OK) {
            *last = v.rc;
            CHECK(v.rc == EF_END || state_error(v.rc));
            if (v.rc < 0)
                check_message(p);
            CHECK(pull_one(p).rc == v.rc);
            break;
        }
        if (out)
            out[n] = v;
        n++;
    }
    return n;
}

/* Saves p and restores the state into a new pipeline, which must then
 * deliver what p delivers. */
static void check_round_trip(ef_pipeline *p, int which)
{
    size_t size = 0, again = 0;
    int rc = ef_pipeline_save_state(p, NULL, 0, &size);
    if (rc != EF_OK) {
        CHECK(state_error(rc));
        check_message(p);
        return;
    }
    CHECK(size >= EF__STATE_HEADER);
    unsigned char *state = malloc(size);
    CHECK(state);
    CHECK(ef_pipeline_save_state(p, state, size, &again) == EF_OK);
    CHECK(again == size);

    ef_pipeline *q = build(which);
    rc = ef_pipeline_restore_state(q, state, size);
    if (rc != EF_OK)
        fprintf(stderr, "restoring a saved state: %s\n",
                ef_pipeline_error(q));
    CHECK(rc == EF_OK);
    seen a[PULLS], b[PULLS];
    int last_a, last_b;
    int na = pull_checked(p, a, PULLS, &last_a);
    int nb = pull_checked(q, b, PULLS, &last_b);
    if (pipelines[which].deterministic) {
        CHECK(na == nb && last_a == last_b);
        for (int i = 0; i < na; i++)
            CHECK(memcmp(&a[i].id, &b[i].id, sizeof a[i].id) == 0 &&
                  a[i].hash == b[i].hash);
    }
    ef_pipeline_destroy(q);
    free(state);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 16384)
        return 0;
    int which = data[0] % NPIPELINES;
    const uint8_t *rest = data + 1;
    size_t n = size - 1;
    unsigned char *state = NULL;
    if (!(data[0] & RAW)) { /* sealed: a header made right */
        if (n >= EF__STATE_HEADER && memcmp(rest, EF__STATE_MAGIC, 4) == 0) {
            rest += EF__STATE_HEADER;
            n -= EF__STATE_HEADER;
        }
        state = malloc(EF__STATE_HEADER + n);
        CHECK(state);
        memcpy(state + EF__STATE_HEADER, rest, n);
        ef__state_seal(state, state + EF__STATE_HEADER, n);
        rest = state;
        n += EF__STATE_HEADER;
    }

    ef_pipeline *p = build(which);
    int rc = ef_pipeline_restore_state(p, rest, n);
    int last;
    if (rc != EF_OK) {
        CHECK(state_error(rc));
        check_message(p);
        /* untouched (a run from the start) or failed with that status */
        seen v = pull_one(p);
        CHECK(v.rc == EF_OK || v.rc == rc);
    } else {
        /* a second state would land on the first: refused */
        CHECK(ef_pipeline_restore_state(p, rest, n) == EF_ESTATE);
        pull_checked(p, NULL, PULLS / 2, &last);
        if (last == EF_OK)
            check_round_trip(p, which);
    }
    ef_pipeline_destroy(p);
    free(state);
    return 0;
}

#ifdef FUZZ_STATE_SEEDS
/* ---- the seed corpus: `fuzz_state_seeds DIR` ---------------------- */

/* seed-P-after-K[-how]: byte 0 (pipeline P, RAW or not), then the state
 * saved after K items. */
static void write_seed(const char *dir, int head, int at, const char *how,
                       const void *state, size_t size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/seed-%d-after-%d%s", dir, head & ~RAW, at,
             how);
    FILE *f = fopen(path, "wb");
    CHECK(f);
    unsigned char b = (unsigned char)head;
    CHECK(fwrite(&b, 1, 1, f) == 1 && fwrite(state, 1, size, f) == size);
    CHECK(fclose(f) == 0);
}

/* Damaged envelopes, handed over as they are. */
static void write_raw(const char *dir, int which, const unsigned char *state,
                      size_t size)
{
    unsigned char *bad = malloc(size);
    CHECK(bad);
    write_seed(dir, which | RAW, 7, "-raw", state, size);
    write_seed(dir, which | RAW, 7, "-raw-truncated", state, size - 1);
    memcpy(bad, state, size);
    bad[4] = 2; /* version */
    write_seed(dir, which | RAW, 7, "-raw-version-2", bad, size);
    memcpy(bad, state, size);
    bad[size - 1] ^= 1; /* the checksum no longer matches */
    write_seed(dir, which | RAW, 7, "-raw-bad-crc", bad, size);
    free(bad);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR\n", argv[0]);
        return 2;
    }
    static const int cuts[] = {0, 1, 3, 7, 12, 20, 40};
    for (int which = 0; which < NPIPELINES; which++) {
        ef_pipeline *p = build(which);
        int done = 0;
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            int last;
            done += pull_checked(p, NULL, cuts[c] - done, &last);
            if (done < cuts[c])
                break; /* the end: the cut before was the last */
            size_t size;
            CHECK(ef_pipeline_save_state(p, NULL, 0, &size) == EF_OK);
            void *state = malloc(size);
            CHECK(state &&
                  ef_pipeline_save_state(p, state, size, &size) == EF_OK);
            write_seed(argv[1], which, done, "", state, size);
            if (which == 0 && done == 7) /* the envelope's checks, raw */
                write_raw(argv[1], which, state, size);
            free(state);
        }
        ef_pipeline_destroy(p);
    }
    return 0;
}
#endif
