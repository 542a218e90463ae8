/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example reading (see tfexample.h).
 *
 * One pass over the Example's framing finds the last map entry of each
 * requested key; a second walk, over those entries only, settles each
 * feature's kind and counts (and so checks) its values. The value
 * functions walk the same bytes again: they meet nothing the count did
 * not already accept. */
#include "codec/tfexample.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

/* Wire types. */
enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* A message being read: [p, end) of a record that starts at `base` (for
 * the offsets in messages). */
typedef struct {
    const uint8_t *p, *end, *base;
} cursor;

/* One field: its number, wire type, where its tag starts, and for WT_LEN
 * its body [body, body + len); for a number, its value. */
typedef struct {
    uint32_t num;
    int wt;
    const uint8_t *at, *body;
    size_t len;
    uint64_t value;
} field;

const char *ef__tfx_kind_name(ef__tfx_kind kind)
{
    switch (kind) {
    case EF__TFX_BYTES:
        return "bytes";
    case EF__TFX_FLOAT:
        return "float";
    case EF__TFX_INT64:
        return "int64";
    default:
        return "missing";
    }
}

static size_t at(const cursor *c, const uint8_t *p)
{
    return (size_t)(p - c->base);
}

/* A varint of at most 10 bytes whose value fits 64 bits. */
static int varint(cursor *c, uint64_t *v, const char *what, ef__err *err)
{
    const uint8_t *start = c->p;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (c->p == c->end)
            return ef__err_set(err, EF_EFORMAT,
                               "byte %zu: %s: a varint runs past the end of "
                               "its message (byte %zu)",
                               at(c, start), what, at(c, c->end));
        uint8_t b = *c->p++;
        /* the 10th byte is the last, and holds bit 63 only */
        if (i == 9 && b > 1)
            return ef__err_set(
                err, EF_EFORMAT, "byte %zu: %s: a varint %s", at(c, start),
                what, b & 0x80 ? "longer than 10 bytes" : "over 64 bits");
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            return EF_OK;
        }
    }
    assert(0); /* the 10th byte always ends the loop */
    return EF_EFORMAT;
}

/* The next field of the message; `what` names the message for errors. */
static int next_field(cursor *c, field *f, const char *what, ef__err *err)
{
    f->at = c->p;
    uint64_t tag;
    int rc = varint(c, &tag, what, err);
    if (rc != EF_OK)
        return rc;
    f->wt = (int)(tag & 7);
    if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff)
        return ef__err_set(err, EF_EFORMAT,
                           "byte %zu: %s: field number %llu (expected 1 to "
                           "2^29-1)",
                           at(c, f->at), what, (unsigned long long)(tag >> 3));
    f->num = (uint32_t)(tag >> 3);
    f->body = NULL;
    f->len = 0;
    f->value = 0;
    size_t left = (size_t)(c->end - c->p);
    switch (f->wt) {
    case WT_VARINT:
        return varint(c, &f->value, what, err);
    case WT_I64:
    case WT_I32: {
        size_t n = f->wt == WT_I64 ? 8 : 4;
        if (left < n)
            return ef__err_set(err, EF_EFORMAT,
                               "byte %zu: %s: field %u's %zu-byte value runs "
                               "past the end of its message (byte %zu)",
                               at(c, f->at), what, (unsigned)f->num, n,
                               at(c, c->end));
        for (size_t i = n; i-- > 0;)
            f->value = f->value << 8 | c->p[i];
        f->body = c->p;
        f->len = n;
        c->p += n;
        return EF_OK;
    }
    case WT_LEN: {
        uint64_t len;
        rc = varint(c, &len, what, err);
        if (rc != EF_OK)
            return rc;
        left = (size_t)(c->end - c->p);
        if (len > left)
            return ef__err_set(err, EF_EFORMAT,
                               "byte %zu: %s: field %u claims %llu bytes, "
                               "past the end of its message (%zu left)",
                               at(c, f->at), what, (unsigned)f->num,
                               (unsigned long long)len, left);
        f->body = c->p;
        f->len = (size_t)len;
        c->p += len;
        return EF_OK;
    }
    default:
        return ef__err_set(
            err, EF_EFORMAT, "byte %zu: %s: field %u has wire type %d (%s)",
            at(c, f->at), what, (unsigned)f->num, f->wt,
            f->wt == 3 || f->wt == 4 ? "a group, which no Example holds"
                                     : "no such wire type");
    }
}

static cursor sub(const cursor *c, const field *f)
{
    cursor s = {f->body, f->body + f->len, c->base};
    return s;
}

/* ---- finding the entries ------------------------------------------ */

/* One map entry: its key (the last given; "" when none) and whether it
 * names a requested feature, which then takes the entry (the last entry
 * of a key wins, as in protobuf). */
static int entry(const cursor *c, const field *e, ef__tfx_feature *f, size_t nf,
                 ef__err *err)
{
    cursor m = sub(c, e);
    const uint8_t *key = NULL;
    size_t klen = 0;
    while (m.p < m.end) {
        field k;
        int rc = next_field(&m, &k, "a features map entry", err);
        if (rc != EF_OK)
            return rc;
        if (k.num == 1 && k.wt == WT_LEN) {
            key = k.body;
            klen = k.len;
        }
    }
    for (size_t i = 0; i < nf; i++)
        if (f[i].len == klen && (klen == 0 || !memcmp(f[i].name, key, klen))) {
            f[i].entry = e->body;
            f[i].entry_end = e->body + e->len;
        }
    return EF_OK;
}

static int features(const cursor *c, const field *fs, ef__tfx_feature *f,
                    size_t nf, ef__err *err)
{
    cursor m = sub(c, fs);
    while (m.p < m.end) {
        field e;
        int rc = next_field(&m, &e, "the features map", err);
        if (rc == EF_OK && e.num == 1 && e.wt == WT_LEN)
            rc = entry(&m, &e, f, nf, err);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}

/* ---- one feature's values ------------------------------------------ */

/* Calls `fn` on each field of the Feature messages of entry `f` (an entry
 * may give its value in pieces, which merge as one message) from
 * position `from` on. Stops at the first error. */
typedef int (*feature_fn)(const cursor *c, const field *k, void *arg,
                          ef__err *err);

static int each_feature_field(const ef__tfx_feature *f, const uint8_t *base,
                              const uint8_t *from, feature_fn fn, void *arg,
                              ef__err *err)
{
    cursor m = {f->entry, f->entry_end, base};
    char what[EF__ERR_MAX / 4];
    snprintf(what, sizeof what, "feature '%.*s'",
             (int)(f->len < 200 ? f->len : 200), f->name);
    while (m.p < m.end) {
        field v;
        int rc = next_field(&m, &v, what, err);
        if (rc != EF_OK)
            return rc;
        if (v.num != 2 || v.wt != WT_LEN)
            continue;
        cursor fc = sub(&m, &v);
        while (fc.p < fc.end) {
            field k;
            rc = next_field(&fc, &k, what, err);
            if (rc == EF_OK && k.at >= from)
                rc = fn(&fc, &k, arg, err);
            if (rc != EF_OK)
                return rc;
        }
    }
    return EF_OK;
}

/* The oneof: the last of fields 1-3 (as messages) sets the kind, and
 * values count from where it switched. */
static int note_kind(const cursor *c, const field *k, void *arg, ef__err *err)
{
    (void)c;
    (void)err;
    ef__tfx_feature *f = arg;
    if (k->num >= 1 && k->num <= 3 && k->wt == WT_LEN &&
        (ef__tfx_kind)k->num != f->kind) {
        f->kind = (ef__tfx_kind)k->num;
        f->from = k->at;
    }
    return EF_OK;
}

/* What reading a list does with each value: count it, or store it. */
typedef struct {
    const ef__tfx_feature *f;
    size_t n; /* values met */
    int64_t *i64;
    float *f32;
    const uint8_t **data;
    size_t *size, cap;
} lister;

static void put_number(lister *l, uint64_t bits)
{
    if (l->i64)
        l->i64[l->n] = (int64_t)bits;
    if (l->f32) {
        uint32_t b = (uint32_t)bits;
        memcpy(&l->f32[l->n], &b, sizeof b);
    }
    l->n++;
}

/* The values of one piece of the list (a field of the kind's number). */
static int list_values(const cursor *c, const field *k, void *arg, ef__err *err)
{
    lister *l = arg;
    if (k->num != (uint32_t)l->f->kind || k->wt != WT_LEN)
        return EF_OK; /* another field of the Feature: skipped */
    cursor m = sub(c, k);
    char what[EF__ERR_MAX / 4];
    snprintf(what, sizeof what, "feature '%.*s' (%s_list)",
             (int)(l->f->len < 200 ? l->f->len : 200), l->f->name,
             ef__tfx_kind_name(l->f->kind));
    while (m.p < m.end) {
        field v;
        int rc = next_field(&m, &v, what, err);
        if (rc != EF_OK)
            return rc;
        if (v.num != 1)
            continue;
        if (l->f->kind == EF__TFX_BYTES && v.wt == WT_LEN) {
            if (l->data && l->n < l->cap) {
                l->data[l->n] = v.body;
                l->size[l->n] = v.len;
            }
            l->n++;
        } else if (l->f->kind == EF__TFX_FLOAT && v.wt == WT_I32) {
            put_number(l, v.value);
        } else if (l->f->kind == EF__TFX_FLOAT && v.wt == WT_LEN) {
            if (v.len % 4)
                return ef__err_set(err, EF_EFORMAT,
                                   "byte %zu: %s: packed floats of %zu bytes, "
                                   "not a multiple of 4",
                                   at(c, v.at), what, v.len);
            for (size_t i = 0; i < v.len; i += 4)
                put_number(l, (uint64_t)v.body[i] |
                                  (uint64_t)v.body[i + 1] << 8 |
                                  (uint64_t)v.body[i + 2] << 16 |
                                  (uint64_t)v.body[i + 3] << 24);
        } else if (l->f->kind == EF__TFX_INT64 && v.wt == WT_VARINT) {
            put_number(l, v.value);
        } else if (l->f->kind == EF__TFX_INT64 && v.wt == WT_LEN) {
            cursor p = sub(&m, &v);
            while (p.p < p.end) {
                uint64_t x;
                rc = varint(&p, &x, what, err);
                if (rc != EF_OK)
                    return rc;
                put_number(l, x);
            }
        } /* else: a wire type the field does not have, skipped */
    }
    return EF_OK;
}

static int resolve(ef__tfx_feature *f, const uint8_t *base, ef__err *err)
{
    f->kind = EF__TFX_MISSING;
    f->count = 0;
    f->from = f->entry;
    if (!f->entry)
        return EF_OK;
    int rc = each_feature_field(f, base, f->entry, note_kind, f, err);
    if (rc != EF_OK || f->kind == EF__TFX_MISSING)
        return rc;
    lister l = {.f = f};
    rc = each_feature_field(f, base, f->from, list_values, &l, err);
    f->count = l.n;
    return rc;
}

int ef__tfx_parse(const void *rec, size_t n, ef__tfx_feature *f, size_t nf,
                  ef__err *err)
{
    const uint8_t *base = rec;
    cursor c = {base, base + n, base};
    for (size_t i = 0; i < nf; i++) {
        f[i].kind = EF__TFX_MISSING;
        f[i].count = 0;
        f[i].entry = f[i].entry_end = f[i].from = NULL;
    }
    while (c.p < c.end) {
        field fs;
        int rc = next_field(&c, &fs, "the Example", err);
        if (rc == EF_OK && fs.num == 1 && fs.wt == WT_LEN)
            rc = features(&c, &fs, f, nf, err);
        if (rc != EF_OK)
            return rc;
    }
    for (size_t i = 0; i < nf; i++) {
        int rc = resolve(&f[i], base, err);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}

/* ---- values ------------------------------------------------------- */

/* The record's start is not kept in a feature: offsets in messages are
 * only for ef__tfx_parse, which has already checked these bytes. */
static void list(const ef__tfx_feature *f, lister *l)
{
    ef__err err;
    ef__err_clear(&err);
    int rc = each_feature_field(f, f->entry, f->from, list_values, l, &err);
    assert(rc == EF_OK && l->n == f->count);
    (void)rc;
}

void ef__tfx_int64s(const ef__tfx_feature *f, int64_t *out)
{
    assert(f->kind == EF__TFX_INT64);
    lister l = {.f = f, .i64 = out};
    list(f, &l);
}

void ef__tfx_floats(const ef__tfx_feature *f, float *out)
{
    assert(f->kind == EF__TFX_FLOAT);
    lister l = {.f = f, .f32 = out};
    list(f, &l);
}

void ef__tfx_bytes(const ef__tfx_feature *f, const uint8_t **data, size_t *size,
                   size_t cap)
{
    assert(f->kind == EF__TFX_BYTES);
    lister l = {.f = f, .data = data, .size = size, .cap = cap};
    list(f, &l);
}
