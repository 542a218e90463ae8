/* SPDX-License-Identifier: Apache-2.0 */
/* A detection sample's annotations as one JSON object (json_boxes.h):
 * written from the sample's fields, read back into fields with the pull
 * reader (json_reader.h). */
#include "codec/json_boxes.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "codec/json_reader.h"
#include "core/alloc.h"

static int is_boxes(const ef__field *f)
{
    return !strcmp(f->name, "boxes") && f->dtype == EF_F32 && f->ndim == 2 &&
           f->shape[1] == 4 && !f->lengths;
}

int ef__json_boxes_find(const ef_sample *s)
{
    int i = ef__sample_find(s, "boxes");
    return i >= 0 && is_boxes(&s->fields[i]) ? i : -1;
}

int ef__json_boxes_holds(const ef__field *f, int64_t n)
{
    if (is_boxes(f))
        return 1;
    if (!strcmp(f->name, "__key__") || !strcmp(f->name, "__url__") ||
        f->lengths || (f->dtype != EF_I64 && f->dtype != EF_F32))
        return 0;
    return f->ndim == 0 || (f->ndim == 1 && f->shape[0] == n);
}

/* ---- writing ---------------------------------------------------------- */

/* The text being written; `nomem` once a growth failed. */
typedef struct {
    char *p;
    size_t n, cap;
    int nomem;
} out_text;

static void put(out_text *t, const char *s, size_t n)
{
    if (t->nomem)
        return;
    if (t->cap - t->n < n) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap - t->n < n)
            cap *= 2;
        char *p = ef__realloc(t->p, cap);
        if (!p) {
            t->nomem = 1;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
}

static void puts_(out_text *t, const char *s)
{
    put(t, s, strlen(s));
}

/* A field name as a JSON string: '"', '\' and control characters
 * escaped, other bytes as they are. */
static void put_name(out_text *t, const char *name)
{
    put(t, "\"", 1);
    for (const char *c = name; *c; c++) {
        char esc[8];
        unsigned char u = (unsigned char)*c;
        if (u == '"' || u == '\\') {
            esc[0] = '\\';
            esc[1] = *c;
            put(t, esc, 2);
        } else if (u < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", u);
            put(t, esc, 6);
        } else {
            put(t, c, 1);
        }
    }
    put(t, "\": ", 3);
}

/* Value i of field f: an i64 in full, an f32 with 9 significant digits
 * (enough to read back the same bits). A NaN or infinity has no JSON. */
static int put_value(out_text *t, const ef__field *f, const void *data,
                     size_t i)
{
    char num[48];
    int len;
    if (f->dtype == EF_I64) {
        int64_t v;
        memcpy(&v, (const char *)data + 8 * i, 8);
        len = snprintf(num, sizeof num, "%" PRId64, v);
    } else {
        float v;
        memcpy(&v, (const char *)data + 4 * i, 4);
        if (!isfinite(v))
            return -1;
        len = snprintf(num, sizeof num, "%.9g", (double)v);
    }
    put(t, num, (size_t)len);
    return 0;
}

/* Field f: a scalar, [v, ...], or boxes' [[x1, y1, x2, y2], ...]. */
static int put_field(out_text *t, const ef__field *f, ef__err *err)
{
    const void *data = (const char *)ef_buffer_data(f->buf) + f->offset;
    size_t rows = f->ndim ? (size_t)f->shape[0] : 1;
    size_t cols = f->ndim == 2 ? 4 : 1;
    put_name(t, f->name);
    if (f->ndim)
        put(t, "[", 1);
    for (size_t r = 0; r < rows; r++) {
        if (r)
            put(t, ", ", 2);
        if (cols > 1)
            put(t, "[", 1);
        for (size_t c = 0; c < cols; c++) {
            if (c)
                put(t, ", ", 2);
            if (put_value(t, f, data, r * cols + c) != 0)
                return ef__err_set(err, EF_EFORMAT,
                                   "field '%s': value %zu (row %zu) is a NaN "
                                   "or an infinity, which JSON cannot hold",
                                   f->name, r * cols + c, r);
        }
        if (cols > 1)
            put(t, "]", 1);
    }
    if (f->ndim)
        put(t, "]", 1);
    return EF_OK;
}

int ef__json_boxes_write(const ef_sample *s, char **out, size_t *len,
                         ef__err *err)
{
    int b = ef__json_boxes_find(s);
    if (b < 0)
        return ef__err_set(err, EF_ESHAPE,
                           "no field 'boxes' of f32 [n,4] to write a "
                           "detection annotation from");
    int64_t n = s->fields[b].shape[0];
    out_text t = {0};
    int rc = EF_OK, first = 1;
    puts_(&t, "{");
    for (int i = 0; i < s->nfields && rc == EF_OK; i++) {
        if (!ef__json_boxes_holds(&s->fields[i], n))
            continue;
        if (!first)
            puts_(&t, ", ");
        first = 0;
        rc = put_field(&t, &s->fields[i], err);
    }
    puts_(&t, "}");
    if (rc == EF_OK && t.nomem)
        rc = ef__err_set(err, EF_ENOMEM, "out of memory");
    if (rc != EF_OK) {
        ef__free(t.p);
        return rc;
    }
    *out = t.p;
    *len = t.n;
    return EF_OK;
}

/* ---- reading ---------------------------------------------------------- */

enum { BOXES, LIST, SCALAR };

/* A key of the document, as the first pass found it. */
typedef struct {
    char name[EF_MAX_NAME];
    int shape;             /* BOXES, LIST or SCALAR */
    int f32;               /* else i64 */
    int64_t count;         /* rows (BOXES) or items (LIST) */
    ef__json_reader value; /* a copy of the reader where its value begins */
} key;

/* Whether `name` is one of the comma-separated list (blanks around the
 * names ignored). */
static int listed(const char *list, const char *name)
{
    size_t len = strlen(name);
    for (const char *s = list; *s;) {
        while (*s == ' ')
            s++;
        size_t n = strcspn(s, ",");
        size_t m = n;
        while (m && s[m - 1] == ' ')
            m--;
        if (m == len && !memcmp(s, name, len))
            return 1;
        s += n + (s[n] == ',');
    }
    return 0;
}

/* EF_EFORMAT at the reader's place: "<doc>: byte N: <message>", as the
 * reader's own errors read. */
static int fail(const ef__json_reader *j, ef__err *err, const char *fmt, ...)
{
    char msg[EF__ERR_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ef__err_set(err, EF_EFORMAT, "%s: byte %zu: %s", j->name,
                       ef__json_offset(j), msg);
}

/* One number of key k, `what` in messages, stored at dst[i] unless dst is
 * NULL (the first pass checks without storing). */
static int read_number(ef__json_reader *j, const key *k, const char *what,
                       void *dst, size_t i, ef__err *err)
{
    if (!k->f32) {
        int64_t v;
        int rc = ef__json_int(j, what, &v, err);
        if (rc == EF_OK && dst)
            ((int64_t *)dst)[i] = v;
        return rc;
    }
    size_t at = ef__json_offset(j);
    double v;
    int rc = ef__json_number(j, what, &v, err);
    if (rc != EF_OK)
        return rc;
    float f = (float)v;
    if (isinf(f)) {
        j->pos = at; /* the message names where the number starts */
        return fail(j, err, "%s: %g is beyond the range of f32", what, v);
    }
    if (dst)
        ((float *)dst)[i] = f;
    return EF_OK;
}

/* Row r of key k (boxes): [x1, y1, x2, y2] into dst + 4 r. */
static int read_row(ef__json_reader *j, const key *k, int64_t r, float *dst,
                    ef__err *err)
{
    char what[EF_MAX_NAME + 64];
    snprintf(what, sizeof what, "key '%s' row %" PRId64, k->name, r);
    int rc = ef__json_array(j, what, err), more = 1;
    size_t c = 0;
    while (rc == EF_OK && (rc = ef__json_next_item(j, &more, err)) == EF_OK &&
           more) {
        if (c == 4)
            return fail(j, err,
                        "%s: expected 4 numbers [x1, y1, x2, y2], got more",
                        what);
        char item[EF_MAX_NAME + 96];
        snprintf(item, sizeof item, "%s item %zu", what, c);
        rc = read_number(j, k, item, dst ? dst + 4 * r : NULL, c, err);
        c++;
    }
    if (rc == EF_OK && c != 4)
        return fail(j, err, "%s: expected 4 numbers [x1, y1, x2, y2], got %zu",
                    what, c);
    return rc;
}

/* The value of key k: its count into k->count, its numbers into dst
 * unless dst is NULL. */
static int read_value(ef__json_reader *j, key *k, void *dst, ef__err *err)
{
    char what[EF_MAX_NAME + 32];
    snprintf(what, sizeof what, "key '%s'", k->name);
    if (k->shape == SCALAR)
        return read_number(j, k, what, dst, 0, err);
    int rc = ef__json_array(j, what, err), more = 1;
    int64_t i = 0;
    while (rc == EF_OK && (rc = ef__json_next_item(j, &more, err)) == EF_OK &&
           more) {
        if (k->shape == BOXES) {
            rc = read_row(j, k, i, dst, err);
        } else {
            char item[EF_MAX_NAME + 64];
            snprintf(item, sizeof item, "key '%s' item %" PRId64, k->name, i);
            rc = read_number(j, k, item, dst, (size_t)i, err);
        }
        i++;
    }
    k->count = i;
    return rc;
}

/* The next key, checked, and its value: the first pass. */
static int scan_key(ef__json_reader *j, key *keys, size_t nk,
                    const char *floats, ef__err *err)
{
    key *k = &keys[nk];
    if (!k->name[0])
        return fail(j, err,
                    "a key that is empty or of %d bytes or more: expected a "
                    "field name",
                    EF_MAX_NAME);
    if (!strcmp(k->name, "__key__") || !strcmp(k->name, "__url__"))
        return fail(j, err,
                    "key '%s': a name kept for the sample's key and URL, not "
                    "a detection field",
                    k->name);
    for (size_t i = 0; i < nk; i++)
        if (!strcmp(keys[i].name, k->name))
            return fail(j, err, "key '%s' given twice", k->name);
    ef__json_kind kind;
    int rc = ef__json_peek(j, &kind, err);
    if (rc != EF_OK)
        return rc;
    if (!strcmp(k->name, "boxes"))
        k->shape = BOXES;
    else if (kind == EF__JSON_ARRAY)
        k->shape = LIST;
    else if (kind == EF__JSON_NUMBER)
        k->shape = SCALAR;
    else
        return fail(j, err,
                    "key '%s': expected an array of numbers (one per box) or "
                    "a number, got %s",
                    k->name,
                    kind == EF__JSON_STRING   ? "a string"
                    : kind == EF__JSON_OBJECT ? "an object"
                    : kind == EF__JSON_BOOL   ? "true or false"
                                              : "null");
    k->f32 = k->shape == BOXES || listed(floats, k->name);
    k->value = *j;
    return read_value(j, k, NULL, err);
}

/* Reads the document's keys and checks them all: the first pass. */
static int scan(ef__json_reader *j, key *keys, size_t *nk, const char *floats,
                ef__err *err)
{
    int rc = ef__json_object(j, "the document", err), more = 1;
    *nk = 0;
    while (rc == EF_OK) {
        if (*nk == EF__JSON_BOXES_MAX_KEYS) {
            char probe[1];
            rc = ef__json_next_key(j, probe, sizeof probe, &more, err);
            if (rc == EF_OK && more)
                rc = fail(j, err, "more than %d keys", EF__JSON_BOXES_MAX_KEYS);
            break;
        }
        key *k = &keys[*nk];
        rc = ef__json_next_key(j, k->name, sizeof k->name, &more, err);
        if (rc != EF_OK || !more)
            break;
        rc = scan_key(j, keys, *nk, floats, err);
        *nk += rc == EF_OK;
    }
    return rc == EF_OK ? ef__json_finish(j, err) : rc;
}

/* The boxes' row count, and every list's length checked against it. */
static int check_counts(const ef__json_reader *j, const key *keys, size_t nk,
                        ef__err *err)
{
    const key *b = NULL;
    for (size_t i = 0; i < nk; i++)
        if (keys[i].shape == BOXES)
            b = &keys[i];
    if (!b)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: no key 'boxes': expected an object such as "
                           "{\"boxes\": [[x1, y1, x2, y2], ...], \"labels\": "
                           "[...]}",
                           j->name);
    for (size_t i = 0; i < nk; i++)
        if (keys[i].shape == LIST && keys[i].count != b->count)
            return fail(&keys[i].value, err,
                        "key '%s' has %" PRId64 " items, expected %" PRId64
                        ", one per row of key 'boxes'",
                        keys[i].name, keys[i].count, b->count);
    return EF_OK;
}

/* Key k as a new field of out, its values read again from its place. */
static int add_key(key *k, ef_sample *out, ef__err *err)
{
    if (ef__sample_find(out, k->name) >= 0)
        return ef__err_set(err, EF_ESHAPE,
                           "%s: key '%s': the sample already has a field "
                           "'%s'",
                           k->value.name, k->name, k->name);
    int64_t shape[2] = {k->count, 4};
    int ndim = k->shape == BOXES ? 2 : k->shape == LIST ? 1 : 0;
    void *dst;
    int rc = ef_sample_add_new(out, k->name, k->f32 ? EF_F32 : EF_I64, ndim,
                               shape, &dst);
    if (rc != EF_OK)
        return ef__err_set(err, rc, "%s: key '%s': cannot add its field: %s",
                           k->value.name, k->name, ef_strerror(rc));
    if (ndim)
        ef_sample_set_variable(out, k->name);
    ef__json_reader j = k->value;
    return read_value(&j, k, dst, err);
}

int ef__json_boxes_read(const char *text, size_t n, const char *name,
                        const char *floats, ef_sample *out, ef__err *err)
{
    key *keys = ef__malloc(EF__JSON_BOXES_MAX_KEYS * sizeof *keys);
    if (!keys)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    ef__json_reader j;
    ef__json_reader_init(&j, text, n, name);
    size_t nk = 0;
    int rc = scan(&j, keys, &nk, floats, err);
    if (rc == EF_OK)
        rc = check_counts(&j, keys, nk, err);
    for (size_t i = 0; i < nk && rc == EF_OK; i++)
        rc = add_key(&keys[i], out, err);
    ef__free(keys);
    return rc;
}
