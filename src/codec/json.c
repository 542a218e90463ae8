/* SPDX-License-Identifier: Apache-2.0 */
/* JSON Lines: one key's string value (see json.h). A recursive descent
 * over the line's bytes; nothing is allocated. */
#include "codec/json.h"

#include <string.h>

typedef struct {
    const unsigned char *s;
    size_t n, i;
    ef__err *err;
} parser;

static int fail(parser *p, const char *expected)
{
    if (p->i >= p->n)
        return ef__err_set(p->err, EF_EFORMAT,
                           "byte %zu: expected %s, found the end of the line",
                           p->i, expected);
    unsigned char c = p->s[p->i];
    if (c >= 0x20 && c < 0x7f)
        return ef__err_set(p->err, EF_EFORMAT,
                           "byte %zu: expected %s, found '%c'", p->i, expected,
                           c);
    return ef__err_set(p->err, EF_EFORMAT,
                       "byte %zu: expected %s, found byte 0x%02x", p->i,
                       expected, c);
}

static void skip_ws(parser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' ||
                           p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static int hex4(parser *p, unsigned *out)
{
    unsigned v = 0;
    for (int k = 0; k < 4; k++, p->i++) {
        unsigned char c = p->i < p->n ? p->s[p->i] : 0;
        unsigned d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return fail(p, "a hex digit of a \\u escape");
        v = v * 16 + d;
    }
    *out = v;
    return EF_OK;
}

static size_t put_utf8(unsigned char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xc0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xe0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        o[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (unsigned char)(0xf0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    o[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A \u escape, the 'u' next: one code point, or a surrogate pair. */
static int unicode_escape(parser *p, unsigned *cp)
{
    size_t at = p->i - 1;
    p->i++; /* the 'u' */
    int rc = hex4(p, cp);
    if (rc != EF_OK || *cp < 0xd800 || *cp > 0xdfff)
        return rc;
    unsigned lo = 0;
    if (*cp <= 0xdbff && p->i + 1 < p->n && p->s[p->i] == '\\' &&
        p->s[p->i + 1] == 'u') {
        p->i += 2;
        rc = hex4(p, &lo);
        if (rc != EF_OK)
            return rc;
    }
    if (lo < 0xdc00 || lo > 0xdfff)
        return ef__err_set(p->err, EF_EFORMAT,
                           "byte %zu: \\u%04X is half of a surrogate pair "
                           "without its other half: no character",
                           at, *cp);
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    return EF_OK;
}

/* A string, the opening quote next; decoded into out when not NULL. */
static int string(parser *p, unsigned char *out, size_t *len)
{
    size_t o = 0;
    p->i++;
    for (;;) {
        if (p->i >= p->n)
            return fail(p, "the closing '\"' of a string");
        unsigned char c = p->s[p->i];
        if (c == '"') {
            p->i++;
            if (len)
                *len = o;
            return EF_OK;
        }
        if (c < 0x20)
            return ef__err_set(p->err, EF_EFORMAT,
                               "byte %zu: control character 0x%02x inside a "
                               "string (JSON needs it escaped)",
                               p->i, c);
        if (c != '\\') {
            if (out)
                out[o] = c;
            o++;
            p->i++;
            continue;
        }
        p->i++;
        unsigned char e = p->i < p->n ? p->s[p->i] : 0;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k) {
            if (out)
                out[o] = (unsigned char)to[k - from];
            o++;
            p->i++;
        } else if (e == 'u') {
            unsigned cp;
            int rc = unicode_escape(p, &cp);
            if (rc != EF_OK)
                return rc;
            unsigned char tmp[4];
            size_t k2 = put_utf8(out ? out + o : tmp, cp);
            o += k2;
        } else {
            return fail(p, "an escape (one of \\\" \\\\ \\/ \\b \\f \\n \\r "
                           "\\t \\uXXXX)");
        }
    }
}

static int digits(parser *p)
{
    size_t start = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    return p->i > start ? EF_OK : fail(p, "a digit");
}

static int number(parser *p)
{
    if (p->s[p->i] == '-')
        p->i++;
    if (p->i < p->n && p->s[p->i] == '0')
        p->i++;
    else if (digits(p) != EF_OK)
        return EF_EFORMAT;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (digits(p) != EF_OK)
            return EF_EFORMAT;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (digits(p) != EF_OK)
            return EF_EFORMAT;
    }
    return EF_OK;
}

#define A_VALUE "a value (a string, number, object, array, true, false or null)"

static int literal(parser *p, const char *word)
{
    size_t k = strlen(word);
    if (p->n - p->i < k || memcmp(p->s + p->i, word, k) != 0)
        return fail(p, A_VALUE);
    p->i += k;
    return EF_OK;
}

static int value(parser *p, int depth);

/* The members of an object or the elements of an array, after the
 * opening bracket. */
static int container(parser *p, int depth, int is_object)
{
    if (depth >= EF__JSON_MAX_DEPTH)
        return ef__err_set(p->err, EF_EFORMAT,
                           "byte %zu: objects and arrays nested more than "
                           "%d deep",
                           p->i, EF__JSON_MAX_DEPTH);
    char close = is_object ? '}' : ']';
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        return EF_OK;
    }
    for (;;) {
        int rc;
        if (is_object) {
            if (p->i >= p->n || p->s[p->i] != '"')
                return fail(p, "a key (a string)");
            if ((rc = string(p, NULL, NULL)) != EF_OK)
                return rc;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return fail(p, "':' after a key");
            p->i++;
        }
        if ((rc = value(p, depth + 1)) != EF_OK)
            return rc;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            skip_ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            return EF_OK;
        }
        return fail(p, is_object ? "',' or '}'" : "',' or ']'");
    }
}

static int value(parser *p, int depth)
{
    skip_ws(p);
    unsigned char c = p->i < p->n ? p->s[p->i] : 0;
    switch (c) {
    case '"':
        return string(p, NULL, NULL);
    case '{':
        return container(p, depth, 1);
    case '[':
        return container(p, depth, 0);
    case 't':
        return literal(p, "true");
    case 'f':
        return literal(p, "false");
    case 'n':
        return literal(p, "null");
    default:
        if (c == '-' || (c >= '0' && c <= '9'))
            return number(p);
        return fail(p, A_VALUE);
    }
}

static const char *kind_at(const parser *p, size_t at)
{
    switch (p->s[at]) {
    case '{':
        return "an object";
    case '[':
        return "an array";
    case 't':
    case 'f':
        return "a boolean";
    case 'n':
        return "null";
    default:
        return "a number";
    }
}

int ef__json_string(const char *line, size_t n, const char *key, char *out,
                    size_t *out_len, ef__err *err)
{
    parser p = {(const unsigned char *)line, n, 0, err};
    size_t klen = strlen(key);
    size_t found = (size_t)-1; /* where the last value of `key` starts */
    skip_ws(&p);
    if (p.i >= p.n || p.s[p.i] != '{')
        return fail(&p, "'{': each line must be one JSON object");
    p.i++;
    skip_ws(&p);
    int rc = EF_OK;
    if (p.i < p.n && p.s[p.i] == '}')
        p.i++;
    else
        for (;;) {
            if (p.i >= p.n || p.s[p.i] != '"')
                return fail(&p, "a key (a string)");
            size_t len; /* the key, decoded into out as scratch */
            if ((rc = string(&p, (unsigned char *)out, &len)) != EF_OK)
                return rc;
            int match = len == klen && memcmp(out, key, klen) == 0;
            skip_ws(&p);
            if (p.i >= p.n || p.s[p.i] != ':')
                return fail(&p, "':' after a key");
            p.i++;
            skip_ws(&p);
            if (match)
                found = p.i;
            if ((rc = value(&p, 1)) != EF_OK)
                return rc;
            skip_ws(&p);
            if (p.i < p.n && p.s[p.i] == ',') {
                p.i++;
                skip_ws(&p);
                continue;
            }
            if (p.i < p.n && p.s[p.i] == '}') {
                p.i++;
                break;
            }
            return fail(&p, "',' or '}'");
        }
    skip_ws(&p);
    if (p.i < p.n)
        return fail(&p, "the end of the line after the object");
    if (found == (size_t)-1)
        return ef__err_set(err, EF_EFORMAT, "no key \"%s\" in the object", key);
    if (p.s[found] != '"')
        return ef__err_set(err, EF_EFORMAT,
                           "byte %zu: key \"%s\" holds %s, expected a string",
                           found, key, kind_at(&p, found));
    p.i = found;
    return string(&p, (unsigned char *)out, out_len);
}
