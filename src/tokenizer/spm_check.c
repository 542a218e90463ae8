/* SPDX-License-Identifier: Apache-2.0 */
/* SentencePiece model checks (spm_check.h). The layouts are those of
 * sentencepiece's normalizer.cc (the charsmap blob) and darts-clone's
 * darts.h (the trie's units), which this file reads but does not use. */
#include "tokenizer/spm_check.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "echoflow/echoflow.h"

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(char *why, size_t cap, const char *fmt, ...)
{
    if (cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return EF_EFORMAT;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* ---- the trie: darts-clone's double array ------------------------------ */

/* A unit packs a label (low 8 bits, with bit 31 set on a value unit, so
 * that no byte matches one), a has-leaf bit (bit 8) and an offset to its
 * children (bits 10-31, shifted left 8 more when bit 9 is set); a value
 * unit holds a 31-bit value instead. From a state `base`, byte c leads to
 * unit base ^ c when that unit's label is c; the child's own state is
 * then (base ^ c) ^ offset, and when it has a leaf, the unit at that
 * state holds the match's value. */
static uint32_t label_of(uint32_t u)
{
    return u & (UINT32_C(1) << 31 | 0xFF);
}

static int has_leaf(uint32_t u)
{
    return (u >> 8) & 1;
}

static uint32_t offset_of(uint32_t u)
{
    return (u >> 10) << ((u & (UINT32_C(1) << 9)) >> 6);
}

static uint32_t value_of(uint32_t u)
{
    return u & ((UINT32_C(1) << 31) - 1);
}

typedef struct {
    const unsigned char *units; /* n of them, 4 bytes each */
    size_t n;
    size_t strings_end; /* values below it reach a NUL in the strings */
    size_t strings_len;
    unsigned char *seen; /* a bit per unit: reached already */
    size_t *todo;        /* states still to expand */
    size_t ntodo;
} trie_walk;

static uint32_t unit_at(const trie_walk *t, size_t i)
{
    return le32(t->units + 4 * i);
}

/* Whether every unit state `base` can read (base ^ c for any byte c)
 * lies inside the trie: the library reads the unit before it compares
 * the label. */
static int state_inside(const trie_walk *t, size_t base)
{
    return (base | 0xFF) < t->n;
}

/* Expands one state: each child it has must lead to a state inside the
 * trie and, when it matches, to a string; new states go on the list. */
static int expand(trie_walk *t, size_t base, char *why, size_t cap)
{
    for (uint32_t c = 0; c < 256; c++) {
        size_t child = base ^ c;
        uint32_t u = unit_at(t, child);
        if (label_of(u) != c || t->seen[child / 8] & 1u << child % 8)
            continue;
        t->seen[child / 8] |= (unsigned char)(1u << child % 8);
        size_t next = child ^ offset_of(u);
        if (!state_inside(t, next))
            return fail(why, cap,
                        "its trie's unit %zu leads to units %zu to %zu, past "
                        "the trie's %zu units",
                        child, next & ~(size_t)0xFF, next | 0xFF, t->n);
        if (has_leaf(u)) {
            uint32_t v = value_of(unit_at(t, next));
            if (v >= t->strings_end)
                return fail(why, cap,
                            "its trie's unit %zu maps to byte %u of the "
                            "normalized strings, which have %zu bytes and "
                            "%s",
                            child, v, t->strings_len,
                            v >= t->strings_len
                                ? "end before it"
                                : "no NUL from there to their end");
        }
        t->todo[t->ntodo++] = next;
    }
    return EF_OK;
}

/* Walks every state reachable from the root (unit 0), each once. */
static int walk_trie(trie_walk *t, char *why, size_t cap)
{
    size_t root = offset_of(unit_at(t, 0)); /* state 0 ^ the offset */
    if (!state_inside(t, root))
        return fail(why, cap,
                    "its trie's root leads to units %zu to %zu, past the "
                    "trie's %zu units",
                    root & ~(size_t)0xFF, root | 0xFF, t->n);
    /* each unit enters the list at most once, as a child first seen */
    t->seen = ef__calloc(t->n / 8 + 1, 1);
    t->todo = ef__malloc((t->n + 1) * sizeof *t->todo);
    int rc = t->seen && t->todo ? EF_OK : EF_ENOMEM;
    if (rc == EF_ENOMEM && cap)
        snprintf(why, cap, "out of memory checking its trie");
    if (rc == EF_OK)
        t->todo[t->ntodo++] = root;
    while (rc == EF_OK && t->ntodo)
        rc = expand(t, t->todo[--t->ntodo], why, cap);
    ef__free(t->seen);
    ef__free(t->todo);
    return rc;
}

int ef__spm_charsmap_check(const unsigned char *blob, size_t n, char *why,
                           size_t cap)
{
    if (n < 4)
        return fail(why, cap,
                    "%zu bytes, shorter than the 4-byte size of its trie", n);
    size_t trie = le32(blob);
    if (trie > n - 4)
        return fail(why, cap,
                    "a trie of %zu bytes, but %zu bytes follow its size", trie,
                    n - 4);
    if (trie == 0 || trie % 4)
        return fail(why, cap,
                    "a trie of %zu bytes, expected a whole number of 4-byte "
                    "units, at least one",
                    trie);
    trie_walk t = {.units = blob + 4, .n = trie / 4};
    const unsigned char *strings = blob + 4 + trie;
    t.strings_len = n - 4 - trie;
    /* a value v reaches a NUL when v is at most the last NUL's offset */
    for (size_t i = t.strings_len; i > 0 && !t.strings_end; i--)
        if (strings[i - 1] == '\0')
            t.strings_end = i;
    return walk_trie(&t, why, cap);
}

/* ---- the model: protobuf wire data ------------------------------------- */

typedef struct {
    const unsigned char *p; /* the model's first byte: offsets count from it */
    size_t at, end;         /* the message being read */
} wire;

typedef struct {
    uint64_t number;
    unsigned type;
    size_t at;  /* the field's key, from the model's start */
    size_t off; /* type 2: its bytes, from the model's start */
    size_t len;
} wire_field;

static int varint(wire *w, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && w->at < w->end; shift += 7) {
        unsigned char b = w->p[w->at++];
        *v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            return 1;
    }
    return 0;
}

static int malformed(char *why, size_t cap, size_t at, const char *what)
{
    return fail(why, cap, "not a protobuf message: byte %zu: %s", at, what);
}

static int next_field(wire *w, wire_field *f, int depth, char *why, size_t cap);

/* Skips a group's fields up to its end-group key, whose number is f's. */
static int skip_group(wire *w, const wire_field *f, int depth, char *why,
                      size_t cap)
{
    if (depth >= 100) /* protobuf's own nesting limit */
        return malformed(why, cap, f->at, "groups nested too deep");
    for (;;) {
        wire_field in;
        if (w->at >= w->end)
            return malformed(why, cap, f->at, "a group without its end");
        int rc = next_field(w, &in, depth + 1, why, cap);
        if (rc != EF_OK)
            return rc;
        if (in.type == 4)
            return in.number == f->number
                       ? EF_OK
                       : malformed(why, cap, in.at,
                                   "a group ends with another's number");
    }
}

/* Reads the field at w->at into *f and moves past it. An end-group key
 * (type 4) is returned for skip_group to match. */
static int next_field(wire *w, wire_field *f, int depth, char *why, size_t cap)
{
    uint64_t key, v;
    f->at = w->at;
    if (!varint(w, &key))
        return malformed(why, cap, f->at, "a field key cut short");
    f->number = key >> 3;
    f->type = (unsigned)(key & 7);
    if (f->number == 0 || f->number > 536870911)
        return malformed(why, cap, f->at, "a field number out of range");
    switch (f->type) {
    case 0:
        return varint(w, &v) ? EF_OK
                             : malformed(why, cap, f->at, "a varint cut short");
    case 1:
    case 5: {
        size_t size = f->type == 1 ? 8 : 4;
        if (w->end - w->at < size)
            return malformed(why, cap, f->at, "a fixed value cut short");
        w->at += size;
        return EF_OK;
    }
    case 2:
        if (!varint(w, &v) || v > w->end - w->at)
            return malformed(why, cap, f->at,
                             "a length past the message's end");
        f->off = w->at;
        f->len = (size_t)v;
        w->at += f->len;
        return EF_OK;
    case 3:
        return skip_group(w, f, depth, why, cap);
    case 4:
        if (depth == 0)
            return malformed(why, cap, f->at, "an end-group outside a group");
        return EF_OK;
    default:
        return malformed(why, cap, f->at, "wire type 6 or 7, which none has");
    }
}

/* Checks every precompiled_charsmap (field 2) of a NormalizerSpec, the
 * bytes [at, at + len) of the model. */
static int check_spec(const unsigned char *model, size_t at, size_t len,
                      const char *name, char *why, size_t cap)
{
    wire w = {model, at, at + len};
    while (w.at < w.end) {
        wire_field f;
        int rc = next_field(&w, &f, 0, why, cap);
        if (rc != EF_OK)
            return rc;
        if (f.number != 2 || f.type != 2 || f.len == 0) /* empty: none */
            continue;
        char what[200];
        rc = ef__spm_charsmap_check(model + f.off, f.len, what, sizeof what);
        if (rc == EF_ENOMEM) {
            fail(why, cap, "%s", what);
            return EF_ENOMEM;
        }
        if (rc != EF_OK)
            return fail(why, cap,
                        "%s.precompiled_charsmap (%zu bytes at byte %zu) is "
                        "corrupt: %s",
                        name, f.len, f.off, what);
    }
    return EF_OK;
}

int ef__spm_model_check(const void *model, size_t n, char *why, size_t cap)
{
    const unsigned char *p = model;
    wire w = {p, 0, n};
    while (w.at < w.end) {
        wire_field f;
        int rc = next_field(&w, &f, 0, why, cap);
        if (rc != EF_OK)
            return rc;
        /* ModelProto: normalizer_spec = 3, denormalizer_spec = 5; a
         * message given twice is merged, so each is checked */
        if (f.type == 2 && (f.number == 3 || f.number == 5))
            rc = check_spec(p, f.off, f.len,
                            f.number == 3 ? "normalizer_spec"
                                          : "denormalizer_spec",
                            why, cap);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}
