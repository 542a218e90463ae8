/* SPDX-License-Identifier: Apache-2.0 */
/* The pull reader of one JSON document (json_reader.h). */
#include "codec/json_reader.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Numbers converted are at most this long: enough for any double or
 * int64_t written out in full (skipped ones may be longer). */
#define NUMBER_MAX 64

void ef__json_reader_init(ef__json_reader *j, const char *text, size_t n,
                          const char *name)
{
    memset(j, 0, sizeof *j);
    j->text = text;
    j->n = n;
    j->name = name;
}

/* The error at byte `at`, which spends the reader. */
static int fail(ef__json_reader *j, size_t at, ef__err *err, const char *what)
{
    j->failed = 1;
    return ef__err_set(err, EF_EFORMAT, "%s: byte %zu: %s", j->name, at, what);
}

/* A short description of what lies at the reader's position. */
static const char *got(const ef__json_reader *j)
{
    if (j->pos >= j->n)
        return "the end of the data (truncated?)";
    switch (j->text[j->pos]) {
    case '{':
        return "an object";
    case '[':
        return "an array";
    case '"':
        return "a string";
    case ']':
    case '}':
        return "the end of a container";
    case ',':
        return "a comma";
    case ':':
        return "a colon";
    default:
        return "something that is no JSON value";
    }
}

static void skip_space(ef__json_reader *j)
{
    while (j->pos < j->n) {
        char c = j->text[j->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        j->pos++;
    }
}

/* The reader is usable: a spent one fails again with a message. */
static int usable(ef__json_reader *j, ef__err *err)
{
    return j->failed
               ? ef__err_set(err, EF_EFORMAT,
                             "%s: read after an error in the JSON", j->name)
               : EF_OK;
}

int ef__json_peek(ef__json_reader *j, ef__json_kind *kind, ef__err *err)
{
    int rc = usable(j, err);
    if (rc != EF_OK)
        return rc;
    skip_space(j);
    char c = j->pos < j->n ? j->text[j->pos] : 0;
    if (c == '{')
        *kind = EF__JSON_OBJECT;
    else if (c == '[')
        *kind = EF__JSON_ARRAY;
    else if (c == '"')
        *kind = EF__JSON_STRING;
    else if (c == '-' || (c >= '0' && c <= '9'))
        *kind = EF__JSON_NUMBER;
    else if (c == 't' || c == 'f')
        *kind = EF__JSON_BOOL;
    else if (c == 'n')
        *kind = EF__JSON_NULL;
    else {
        char msg[96];
        snprintf(msg, sizeof msg, "expected a JSON value, got %s", got(j));
        return fail(j, j->pos, err, msg);
    }
    return EF_OK;
}

/* The message "expected <what> (<kind>), got <what is there>". */
static int expected(ef__json_reader *j, const char *what, const char *kind,
                    ef__err *err)
{
    char msg[EF__ERR_MAX / 2];
    snprintf(msg, sizeof msg, "expected %s to be %s, got %.60s", what, kind,
             got(j));
    return fail(j, j->pos, err, msg);
}

/* Opens a container: `open` is '[' or '{'. */
static int open_container(ef__json_reader *j, char open, const char *what,
                          ef__err *err)
{
    ef__json_kind kind;
    int rc = ef__json_peek(j, &kind, err);
    if (rc != EF_OK)
        return rc;
    if (j->text[j->pos] != open)
        return expected(j, what, open == '[' ? "an array" : "an object", err);
    if (j->depth >= EF__JSON_MAX_DEPTH) {
        char msg[96];
        snprintf(msg, sizeof msg, "nested deeper than %d arrays and objects",
                 EF__JSON_MAX_DEPTH);
        return fail(j, j->pos, err, msg);
    }
    j->pos++;
    j->fresh |= (uint64_t)1 << j->depth;
    j->depth++;
    return EF_OK;
}

int ef__json_array(ef__json_reader *j, const char *what, ef__err *err)
{
    return open_container(j, '[', what, err);
}

int ef__json_object(ef__json_reader *j, const char *what, ef__err *err)
{
    return open_container(j, '{', what, err);
}

/* Before an item of the innermost container, which `close` ends: closes
 * it (*more = 0) or reads the comma before an item that is not the
 * first (*more = 1). */
static int step(ef__json_reader *j, char close, int *more, ef__err *err)
{
    int rc = usable(j, err);
    if (rc != EF_OK)
        return rc;
    if (j->depth == 0)
        return fail(j, j->pos, err, "no array or object is open");
    uint64_t bit = (uint64_t)1 << (j->depth - 1);
    int first = (j->fresh & bit) != 0;
    skip_space(j);
    if (j->pos < j->n && j->text[j->pos] == close) {
        j->pos++;
        j->depth--;
        *more = 0;
        return EF_OK;
    }
    if (!first) { /* a comma, then an item: a close after it is no item */
        if (j->pos >= j->n || j->text[j->pos] != ',') {
            char msg[96];
            snprintf(msg, sizeof msg, "expected ',' or '%c', got %s", close,
                     got(j));
            return fail(j, j->pos, err, msg);
        }
        j->pos++;
        skip_space(j);
    }
    j->fresh &= ~bit;
    *more = 1;
    return EF_OK;
}

int ef__json_next_item(ef__json_reader *j, int *more, ef__err *err)
{
    return step(j, ']', more, err);
}

/* Reads four hex digits at p. */
static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Appends code point cp as UTF-8 to out at *len, where it fits below cap
 * (it always counts). */
static void put_utf8(char *out, size_t cap, size_t *len, unsigned cp)
{
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | (cp >> 18));
        b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (unsigned char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    for (size_t i = 0; i < n; i++, (*len)++)
        if (*len < cap)
            out[*len] = (char)b[i];
}

/* Decodes the \u escape at j->pos (just past the backslash and 'u'),
 * with its low surrogate where it is a high one. */
static int unicode_escape(ef__json_reader *j, char *out, size_t cap,
                          size_t *len, ef__err *err)
{
    size_t at = j->pos - 2;
    unsigned cp, lo;
    if (j->n - j->pos < 4 || hex4(j->text + j->pos, &cp) != 0)
        return fail(j, at, err, "expected 4 hex digits after \\u");
    j->pos += 4;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return fail(j, at, err, "a lone low surrogate \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (j->n - j->pos < 6 || j->text[j->pos] != '\\' ||
            j->text[j->pos + 1] != 'u' ||
            hex4(j->text + j->pos + 2, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
            return fail(j, at, err,
                        "a high surrogate \\u escape without its low one");
        j->pos += 6;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    put_utf8(out, cap, len, cp);
    return EF_OK;
}

/* Reads the string at j->pos (its opening quote), decoding as much of
 * it as fits below cap into out; *len gets its whole decoded length. */
static int read_string(ef__json_reader *j, char *out, size_t cap, size_t *len,
                       ef__err *err)
{
    size_t start = j->pos;
    *len = 0;
    j->pos++; /* the quote */
    for (;;) {
        if (j->pos >= j->n)
            return fail(j, start, err, "a string that does not end");
        unsigned char c = (unsigned char)j->text[j->pos++];
        if (c == '"')
            return EF_OK;
        if (c < 0x20)
            return fail(j, j->pos - 1, err,
                        "a control character inside a string (expected "
                        "it escaped)");
        if (c != '\\') {
            if (*len < cap)
                out[*len] = (char)c;
            (*len)++;
            continue;
        }
        if (j->pos >= j->n)
            return fail(j, start, err, "a string that does not end");
        char e = j->text[j->pos++];
        const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
        const char *hit = e ? strchr(from, e) : NULL;
        if (e == 'u') {
            int rc = unicode_escape(j, out, cap, len, err);
            if (rc != EF_OK)
                return rc;
        } else if (hit) {
            if (*len < cap)
                out[*len] = to[hit - from];
            (*len)++;
        } else {
            return fail(j, j->pos - 2, err,
                        "a bad escape (expected one of \\\" \\\\ \\/ \\b "
                        "\\f \\n \\r \\t \\uXXXX)");
        }
    }
}

int ef__json_next_key(ef__json_reader *j, char *key, size_t cap, int *more,
                      ef__err *err)
{
    int rc = step(j, '}', more, err);
    if (rc != EF_OK || !*more)
        return rc;
    if (j->pos >= j->n || j->text[j->pos] != '"') {
        char msg[96];
        snprintf(msg, sizeof msg, "expected a key (a string), got %s", got(j));
        return fail(j, j->pos, err, msg);
    }
    size_t len;
    rc = read_string(j, key, cap, &len, err);
    if (rc != EF_OK)
        return rc;
    key[len < cap ? len : 0] = '\0';
    skip_space(j);
    if (j->pos >= j->n || j->text[j->pos] != ':') {
        char msg[96];
        snprintf(msg, sizeof msg, "expected ':' after a key, got %s", got(j));
        return fail(j, j->pos, err, msg);
    }
    j->pos++;
    return EF_OK;
}

/* The span of the number at j->pos, checked against the grammar:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?. *integral: no fraction
 * or exponent. Moves past it. */
static int scan_number(ef__json_reader *j, size_t *start, int *integral,
                       ef__err *err)
{
    const char *t = j->text;
    size_t p = j->pos, n = j->n;
    *start = p;
    *integral = 1;
#define DIGIT(i) ((i) < n && t[i] >= '0' && t[i] <= '9')
    if (p < n && t[p] == '-')
        p++;
    if (!DIGIT(p))
        return fail(j, *start, err, "expected a digit in a number");
    if (t[p] == '0' && DIGIT(p + 1))
        return fail(j, *start, err, "a number with a leading zero");
    while (DIGIT(p))
        p++;
    if (p < n && t[p] == '.') {
        *integral = 0;
        p++;
        if (!DIGIT(p))
            return fail(j, p, err, "expected a digit after '.' in a number");
        while (DIGIT(p))
            p++;
    }
    if (p < n && (t[p] == 'e' || t[p] == 'E')) {
        *integral = 0;
        p++;
        if (p < n && (t[p] == '+' || t[p] == '-'))
            p++;
        if (!DIGIT(p))
            return fail(j, p, err, "expected a digit in a number's exponent");
        while (DIGIT(p))
            p++;
    }
#undef DIGIT
    j->pos = p;
    return EF_OK;
}

/* Reads a literal (true, false, null) that starts at j->pos. */
static int literal(ef__json_reader *j, ef__err *err)
{
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(words[i]);
        if (j->n - j->pos >= len && !memcmp(j->text + j->pos, words[i], len)) {
            j->pos += len;
            return EF_OK;
        }
    }
    return fail(j, j->pos, err, "expected true, false or null");
}

int ef__json_skip(ef__json_reader *j, ef__err *err)
{
    ef__json_kind kind;
    int rc = ef__json_peek(j, &kind, err);
    if (rc != EF_OK)
        return rc;
    size_t start, len;
    int integral, more = 1;
    char key[1];
    switch (kind) {
    case EF__JSON_NUMBER:
        return scan_number(j, &start, &integral, err);
    case EF__JSON_STRING:
        return read_string(j, NULL, 0, &len, err);
    case EF__JSON_ARRAY: /* recursion bounded by the depth limit */
        rc = ef__json_array(j, "a value", err);
        while (rc == EF_OK &&
               (rc = ef__json_next_item(j, &more, err)) == EF_OK && more)
            rc = ef__json_skip(j, err);
        return rc;
    case EF__JSON_OBJECT:
        rc = ef__json_object(j, "a value", err);
        while (rc == EF_OK &&
               (rc = ef__json_next_key(j, key, sizeof key, &more, err)) ==
                   EF_OK &&
               more)
            rc = ef__json_skip(j, err);
        return rc;
    default:
        return literal(j, err);
    }
}

/* Copies the number text [start, j->pos) into buf (NUMBER_MAX bytes)
 * for strtod/strtoll; too long is an error naming `what`. */
static int number_text(ef__json_reader *j, size_t start, const char *what,
                       char *buf, ef__err *err)
{
    size_t len = j->pos - start;
    if (len >= NUMBER_MAX) {
        char msg[EF__ERR_MAX / 2];
        snprintf(msg, sizeof msg, "%s: a number of %zu characters (at most %d)",
                 what, len, NUMBER_MAX - 1);
        return fail(j, start, err, msg);
    }
    memcpy(buf, j->text + start, len);
    buf[len] = '\0';
    return EF_OK;
}

/* The message "<what>: <problem>" at byte `at`. */
static int fail_what(ef__json_reader *j, size_t at, const char *what,
                     const char *problem, ef__err *err)
{
    char msg[EF__ERR_MAX / 2];
    snprintf(msg, sizeof msg, "%s: %s", what, problem);
    return fail(j, at, err, msg);
}

/* The number at the reader's place, as NUL-ended text in buf (which
 * holds NUMBER_MAX bytes); *start its offset, *integral whether it has
 * neither fraction nor exponent. Anything else is refused as not
 * `wanted` ("a number", "an integer"). */
static int read_number(ef__json_reader *j, const char *what,
                       const char *wanted, char *buf, size_t *start,
                       int *integral, ef__err *err)
{
    ef__json_kind kind;
    int rc = ef__json_peek(j, &kind, err);
    if (rc == EF_OK && kind != EF__JSON_NUMBER)
        return expected(j, what, wanted, err);
    if (rc == EF_OK)
        rc = scan_number(j, start, integral, err);
    if (rc == EF_OK)
        rc = number_text(j, *start, what, buf, err);
    return rc;
}

int ef__json_number(ef__json_reader *j, const char *what, double *out,
                    ef__err *err)
{
    size_t start;
    int integral;
    char buf[NUMBER_MAX];
    int rc = read_number(j, what, "a number", buf, &start, &integral, err);
    if (rc != EF_OK)
        return rc;
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return fail_what(j, start, what, "a number too large for a double",
                         err);
    *out = v;
    return EF_OK;
}

int ef__json_int(ef__json_reader *j, const char *what, int64_t *out,
                 ef__err *err)
{
    size_t start;
    int integral;
    char buf[NUMBER_MAX];
    int rc = read_number(j, what, "an integer", buf, &start, &integral, err);
    if (rc != EF_OK)
        return rc;
    if (integral) {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE)
            return fail_what(j, start, what,
                             "an integer out of the int64 range", err);
        *out = v;
        return EF_OK;
    }
    double v = strtod(buf, NULL);
    if (!isfinite(v) || v != floor(v) || fabs(v) > 9007199254740992.0)
        return fail_what(j, start, what,
                         "expected an integer, got a number with a "
                         "fraction or beyond 2^53",
                         err);
    *out = (int64_t)v;
    return EF_OK;
}

int ef__json_text(ef__json_reader *j, const char *what, char *out, size_t cap,
                  size_t *len, ef__err *err)
{
    ef__json_kind kind;
    int rc = ef__json_peek(j, &kind, err);
    if (rc == EF_OK && kind != EF__JSON_STRING)
        return expected(j, what, "a string", err);
    size_t start = j->pos, n = 0;
    if (rc == EF_OK)
        rc = read_string(j, out, cap, &n, err);
    if (rc != EF_OK)
        return rc;
    if (n >= cap) {
        char msg[EF__ERR_MAX / 2];
        snprintf(msg, sizeof msg, "%s: a string of %zu bytes (at most %zu)",
                 what, n, cap - 1);
        return fail(j, start, err, msg);
    }
    out[n] = '\0';
    if (len)
        *len = n;
    return EF_OK;
}

int ef__json_finish(ef__json_reader *j, ef__err *err)
{
    int rc = usable(j, err);
    if (rc != EF_OK)
        return rc;
    if (j->depth)
        return fail(j, j->pos, err, "an array or object is still open");
    skip_space(j);
    if (j->pos < j->n)
        return fail(j, j->pos, err,
                    "expected the end of the data after the document");
    return EF_OK;
}
