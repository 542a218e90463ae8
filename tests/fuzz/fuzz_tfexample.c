/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the tf.train.Example reader (src/codec/tfexample.c).
 *
 * Each input is one serialized Example, read for a fixed set of feature
 * names (those of the seeds, the empty key among them). A failure must be
 * EF_EFORMAT with a message naming a byte. A success must give each
 * feature a kind, a count that the value functions fill exactly (ASan
 * watches the buffers, sized to the count), strings inside the input, and
 * nothing for a missing feature. The result must not depend on the order
 * of the requested names, and an unknown field appended to the Example
 * (field 15, a varint) must change nothing. Any violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/tfexample.h"
#include "fuzz.h"

static const char *const names[] = {"image/encoded", "label", "x", "", "k",
                                    "floats"};
#define N (sizeof names / sizeof names[0])

/* One parse's outcome, its values flattened for comparison. */
typedef struct {
    int rc;
    ef__tfx_kind kind[N];
    size_t count[N];
    uint64_t hash[N]; /* of the values (strings: their offsets and bytes) */
} outcome;

static uint64_t mix(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The values of feature f, checked, hashed. */
static uint64_t values(const ef__tfx_feature *f, const uint8_t *data,
                       size_t size)
{
    uint64_t h = 0xcbf29ce484222325ull;
    size_t n = f->count;
    if (f->kind == EF__TFX_MISSING) {
        CHECK(n == 0);
        return h;
    }
    CHECK(f->kind == EF__TFX_BYTES || f->kind == EF__TFX_FLOAT ||
          f->kind == EF__TFX_INT64);
    if (n == 0)
        return h;
    CHECK(n <= size); /* every value takes a byte at least */
    if (f->kind == EF__TFX_BYTES) {
        const uint8_t **p = malloc(n * sizeof *p);
        size_t *len = malloc(n * sizeof *len);
        CHECK(p && len);
        ef__tfx_bytes(f, p, len, n);
        for (size_t i = 0; i < n; i++) {
            CHECK(p[i] >= data && len[i] <= size &&
                  p[i] + len[i] <= data + size);
            h = mix(h, &len[i], sizeof len[i]);
            h = mix(h, p[i], len[i]);
        }
        free(p);
        free(len);
    } else if (f->kind == EF__TFX_INT64) {
        int64_t *v = malloc(n * sizeof *v);
        CHECK(v);
        ef__tfx_int64s(f, v);
        h = mix(h, v, n * sizeof *v);
        free(v);
    } else {
        float *v = malloc(n * sizeof *v);
        CHECK(v);
        ef__tfx_floats(f, v);
        h = mix(h, v, n * sizeof *v); /* the bits: NaNs compare too */
        free(v);
    }
    return h;
}

/* Parses data with the names in order (reverse: backwards). */
static outcome run(const uint8_t *data, size_t size, int reverse)
{
    ef__tfx_feature f[N];
    for (size_t i = 0; i < N; i++) {
        const char *name = names[reverse ? N - 1 - i : i];
        f[i].name = name;
        f[i].len = strlen(name);
    }
    ef__err err;
    ef__err_clear(&err);
    outcome o;
    memset(&o, 0, sizeof o);
    o.rc = ef__tfx_parse(data, size, f, N, &err);
    if (o.rc != EF_OK) {
        CHECK(o.rc == EF_EFORMAT && err.status == o.rc);
        fuzz_check_message(err.msg, sizeof err.msg, "byte ");
        return o;
    }
    for (size_t i = 0; i < N; i++) {
        size_t k = reverse ? N - 1 - i : i;
        o.kind[k] = f[i].kind;
        o.count[k] = f[i].count;
        o.hash[k] = values(&f[i], data, size);
    }
    return o;
}

static int same(const outcome *a, const outcome *b)
{
    if (a->rc != b->rc)
        return 0;
    for (size_t i = 0; i < N; i++)
        if (a->kind[i] != b->kind[i] || a->count[i] != b->count[i] ||
            a->hash[i] != b->hash[i])
            return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly the input's size, so that ASan sees any read
     * past it */
    uint8_t *copy = malloc(size + 2);
    CHECK(copy);
    if (size)
        memcpy(copy, data, size);
    outcome a = run(copy, size, 0), b = run(copy, size, 1);
    CHECK(same(&a, &b));
    /* an unknown field after the Example changes nothing */
    copy[size] = 15 << 3;
    copy[size + 1] = 0;
    outcome c = run(copy, size + 2, 0);
    if (a.rc == EF_OK)
        CHECK(same(&a, &c));
    free(copy);
    return 0;
}
