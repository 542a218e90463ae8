/* SPDX-License-Identifier: Apache-2.0 */
/* NumPy .npy headers (npy.h). The dict is the subset of a Python literal
 * numpy writes: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
 * with either quote, any spacing, and Python 2's 'L' after an integer. */
#include "codec/npy.h"

#include <string.h>

static const unsigned char MAGIC[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int ef__npy_preamble(const unsigned char *p, size_t n, const char *name,
                     size_t *total, ef__err *err)
{
    if (n < EF__NPY_PREAMBLE)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated NPY file: %zu bytes, expected the "
                           "magic, version and header length (%d bytes)",
                           name, n, EF__NPY_PREAMBLE);
    if (memcmp(p, MAGIC, sizeof MAGIC) != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: not an NPY file: expected the magic "
                           "\"\\x93NUMPY\" at offset 0",
                           name);
    if (p[6] < 1 || p[6] > 3 || p[7] != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: NPY format version %u.%u at offset 6: "
                           "expected 1.0, 2.0 or 3.0",
                           name, p[6], p[7]);
    size_t len = p[8] | (size_t)p[9] << 8, at = 10;
    if (p[6] > 1) {
        len |= (size_t)p[10] << 16 | (size_t)p[11] << 24;
        at = 12;
    }
    if (len > EF__NPY_MAX_HEADER)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: NPY header length %zu at offset 8: expected "
                           "at most %zu bytes",
                           name, len, EF__NPY_MAX_HEADER);
    *total = at + len;
    return EF_OK;
}

/* A cursor over the dict, for the parse's messages. */
typedef struct {
    const unsigned char *p;
    size_t at, end;
    const char *name;
    ef__err *err;
} text;

static int bad(text *t, const char *expected)
{
    return ef__err_set(t->err, EF_EFORMAT,
                       "%s: NPY header at offset %zu: expected %s", t->name,
                       t->at, expected);
}

static void skip_space(text *t)
{
    while (t->at < t->end && (t->p[t->at] == ' ' || t->p[t->at] == '\t' ||
                              t->p[t->at] == '\r' || t->p[t->at] == '\n'))
        t->at++;
}

/* Skips spaces, then takes character c if it is next. */
static int take(text *t, char c)
{
    skip_space(t);
    if (t->at < t->end && t->p[t->at] == (unsigned char)c) {
        t->at++;
        return 1;
    }
    return 0;
}

/* A quoted string into buf (at most cap - 1 bytes, no escapes). */
static int string(text *t, char *buf, size_t cap, const char *what)
{
    skip_space(t);
    unsigned char q = t->at < t->end ? t->p[t->at] : 0;
    if (q != '\'' && q != '"')
        return bad(t, what);
    size_t n = 0;
    for (t->at++; t->at < t->end && t->p[t->at] != q; t->at++) {
        if (t->p[t->at] == '\\' || n + 1 >= cap)
            return bad(t, what);
        buf[n++] = (char)t->p[t->at];
    }
    if (t->at++ >= t->end)
        return bad(t, "the string's closing quote");
    buf[n] = 0;
    return EF_OK;
}

static const struct {
    const char *code;
    ef_dtype dtype;
} DTYPES[] = {{"b1", EF_BOOL}, {"u1", EF_U8},  {"i1", EF_I8},  {"i2", EF_I16},
              {"u2", EF_U16},  {"i4", EF_I32}, {"i8", EF_I64}, {"f2", EF_F16},
              {"f4", EF_F32},  {"f8", EF_F64}};

static int descr(text *t, ef__npy_header *h)
{
    char d[16];
    skip_space(t);
    if (t->at < t->end && t->p[t->at] == '[')
        return bad(t, "a plain dtype: structured dtypes are not read");
    int rc = string(t, d, sizeof d, "the dtype as a string ('<f4')");
    for (size_t i = 0; rc == EF_OK && i < sizeof DTYPES / sizeof *DTYPES; i++) {
        if (!d[0] || strcmp(d + 1, DTYPES[i].code) != 0)
            continue;
        if (ef_dtype_size(DTYPES[i].dtype) == 1 || d[0] == '<') {
            h->dtype = DTYPES[i].dtype;
            return EF_OK;
        }
        if (d[0] == '>')
            return ef__err_set(t->err, EF_EFORMAT,
                               "%s: NPY dtype '%s' is big-endian, which is "
                               "not read (the data is used as it lies): "
                               "expected '<%s'; save a.astype('<%s')",
                               t->name, d, d + 1, d + 1);
    }
    return rc == EF_OK ? ef__err_set(t->err, EF_EFORMAT,
                                     "%s: NPY dtype '%s': expected one of "
                                     "b1 u1 i1 i2 u2 i4 i8 f2 f4 f8, "
                                     "little-endian ('<f4')",
                                     t->name, d)
                       : rc;
}

static int order(text *t)
{
    skip_space(t);
    const char *rest = (const char *)t->p + t->at;
    size_t left = t->end - t->at;
    if (left >= 5 && memcmp(rest, "False", 5) == 0) {
        t->at += 5;
        return EF_OK;
    }
    if (left >= 4 && memcmp(rest, "True", 4) == 0)
        return bad(t, "fortran_order False: arrays in Fortran order are not "
                      "read (save np.ascontiguousarray(a))");
    return bad(t, "False or True for fortran_order");
}

/* A dimension: digits, and Python 2's 'L'. */
static int dim(text *t, int64_t *v)
{
    skip_space(t);
    if (t->at < t->end && t->p[t->at] == '-')
        return bad(t, "a dimension of 0 or more, not a negative one");
    if (t->at >= t->end || t->p[t->at] < '0' || t->p[t->at] > '9')
        return bad(t, "a dimension (an integer)");
    for (*v = 0; t->at < t->end && t->p[t->at] >= '0' && t->p[t->at] <= '9';
         t->at++) {
        if (*v > (INT64_MAX - 9) / 10)
            return bad(t, "a dimension below 2^63");
        *v = *v * 10 + (t->p[t->at] - '0');
    }
    if (t->at < t->end && t->p[t->at] == 'L')
        t->at++;
    return EF_OK;
}

static int shape(text *t, ef__npy_header *h)
{
    if (!take(t, '('))
        return bad(t, "the shape as a tuple ('(3, 4)')");
    if (take(t, ')'))
        return bad(t, "a shape of at least one dimension: a 0-d array has "
                      "no rows");
    for (h->ndim = 0;;) {
        if (h->ndim == EF_MAX_DIMS + 1)
            return bad(t, "at most 7 dimensions (rows of at most 6)");
        int rc = dim(t, &h->shape[h->ndim++]);
        if (rc != EF_OK || take(t, ')'))
            return rc != EF_OK || h->ndim > 1
                       ? rc
                       : bad(t, "a tuple for the shape, '(n,)', not '(n)'");
        if (!take(t, ','))
            return bad(t, "',' or ')' in the shape");
        if (take(t, ')'))
            return EF_OK;
    }
}

/* The dict: each of the three keys once, nothing else. */
static int dict(text *t, ef__npy_header *h)
{
    static const char *const keys[3] = {"descr", "fortran_order", "shape"};
    int seen[3] = {0, 0, 0};
    if (!take(t, '{'))
        return bad(t, "a dict '{'");
    while (!take(t, '}')) {
        char key[16];
        int k = 0, rc = string(t, key, sizeof key,
                               "a key: 'descr', 'fortran_order' or 'shape'");
        while (rc == EF_OK && k < 3 && strcmp(key, keys[k]) != 0)
            k++;
        if (rc == EF_OK && (k == 3 || seen[k]))
            rc = bad(t, "each of the keys 'descr', 'fortran_order' and "
                        "'shape' once, and no other");
        if (rc == EF_OK && !take(t, ':'))
            rc = bad(t, "':' after the key");
        if (rc == EF_OK)
            rc = k == 0 ? descr(t, h) : k == 1 ? order(t) : shape(t, h);
        if (rc != EF_OK)
            return rc;
        seen[k] = 1;
        if (take(t, '}'))
            break;
        if (!take(t, ','))
            return bad(t, "',' or '}' in the dict");
    }
    if (!(seen[0] && seen[1] && seen[2]))
        return bad(t, "the keys 'descr', 'fortran_order' and 'shape', all "
                      "three, before '}'");
    skip_space(t);
    return t->at == t->end ? EF_OK
                           : bad(t, "only spaces and a newline after the dict");
}

/* The sizes of a row and of the data, below 2^62 bytes (a dimension of
 * 0 makes them 0, whatever the others), and the data's alignment. */
static int sizes(ef__npy_header *h, const char *name, ef__err *err)
{
    const uint64_t max = UINT64_C(1) << 62;
    uint64_t row = ef_dtype_size(h->dtype);
    int empty = 0, over = 0;
    for (int i = 1; i < h->ndim; i++)
        empty |= h->shape[i] == 0;
    for (int i = 1; i < h->ndim && !empty && !over; i++)
        if (!(over = row > max / (uint64_t)h->shape[i]))
            row *= (uint64_t)h->shape[i];
    h->row_bytes = empty ? 0 : row;
    if (over || (h->row_bytes && (uint64_t)h->shape[0] > max / h->row_bytes))
        return ef__err_set(err, EF_EFORMAT,
                           "%s: NPY shape too large: expected fewer than "
                           "2^62 bytes of data",
                           name);
    h->data_bytes = h->row_bytes * (uint64_t)h->shape[0];
    if (h->data_offset % ef_dtype_size(h->dtype))
        return ef__err_set(err, EF_EFORMAT,
                           "%s: NPY data at offset %zu: expected it aligned "
                           "to its %zu-byte elements (numpy pads to 64)",
                           name, h->data_offset, ef_dtype_size(h->dtype));
    return EF_OK;
}

int ef__npy_parse(const unsigned char *p, size_t n, const char *name,
                  ef__npy_header *h, ef__err *err)
{
    size_t total;
    int rc = ef__npy_preamble(p, n, name, &total, err);
    if (rc != EF_OK)
        return rc;
    if (total > n)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated NPY header: it ends at offset %zu, "
                           "past the file's end at %zu",
                           name, total, n);
    memset(h, 0, sizeof *h);
    text t = {p, p[6] > 1 ? 12 : 10, total, name, err};
    h->data_offset = total;
    rc = dict(&t, h);
    return rc == EF_OK ? sizes(h, name, err) : rc;
}

int ef__npy_check_size(const ef__npy_header *h, uint64_t size, const char *name,
                       ef__err *err)
{
    uint64_t end = h->data_offset + h->data_bytes;
    if (size < end)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated: the NPY header announces %lld "
                           "rows, data up to offset %llu, but the file ends "
                           "at offset %llu",
                           name, (long long)h->shape[0],
                           (unsigned long long)end, (unsigned long long)size);
    if (size > end)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: extra data after offset %llu, where the %lld "
                           "rows the NPY header announces end",
                           name, (unsigned long long)end,
                           (long long)h->shape[0]);
    return EF_OK;
}
