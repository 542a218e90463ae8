/* SPDX-License-Identifier: Apache-2.0 */
/* The JSON writer (see json.h). */
#include "json.h"

#include <assert.h>
#include <math.h>

void json_init(json_writer *w, FILE *f)
{
    w->f = f;
    w->depth = 0;
    w->count[0] = 0;
}

/* The length of the well-formed UTF-8 sequence at s (Unicode table 3-7:
 * no overlong forms, no surrogates, nothing above U+10FFFF), or, negated,
 * the length of its longest invalid start (at least 1). Stops at the
 * terminating NUL, which is no continuation byte. */
static int utf8_length(const unsigned char *s)
{
    unsigned char lo = 0x80, hi = 0xbf; /* the second byte's range */
    int n;
    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        n = 2;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        n = 3;
        lo = s[0] == 0xe0 ? 0xa0 : lo; /* overlong */
        hi = s[0] == 0xed ? 0x9f : hi; /* surrogates */
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        n = 4;
        lo = s[0] == 0xf0 ? 0x90 : lo; /* overlong */
        hi = s[0] == 0xf4 ? 0x8f : hi; /* above U+10FFFF */
    } else {
        return -1;
    }
    for (int i = 1; i < n; i++, lo = 0x80, hi = 0xbf)
        if (s[i] < lo || s[i] > hi)
            return -i;
    return n;
}

/* Paths and messages are bytes, not necessarily UTF-8, and a message may
 * be cut mid-character; JSON must be UTF-8. Valid sequences pass through,
 * each invalid byte or cut sequence becomes U+FFFD, the usual
 * replacement. */
static void quoted(FILE *f, const char *text)
{
    const unsigned char *s = (const unsigned char *)text;
    fputc('"', f);
    while (*s) {
        int n = utf8_length(s);
        if (n < 0) {
            fputs("\\ufffd", f);
            s += -n;
        } else if (*s == '"' || *s == '\\') {
            fprintf(f, "\\%c", *s++);
        } else if (*s < 0x20) {
            fprintf(f, "\\u%04x", *s++);
        } else {
            fwrite(s, 1, (size_t)n, f);
            s += n;
        }
    }
    fputc('"', f);
}

/* The comma and key before a value. */
static void prefix(json_writer *w, const char *key)
{
    if (w->count[w->depth]++)
        fputs(", ", w->f);
    if (key) {
        quoted(w->f, key);
        fputs(": ", w->f);
    }
}

static void begin(json_writer *w, const char *key, char open, char close)
{
    assert(w->depth + 1 < JSON_MAX_DEPTH);
    prefix(w, key);
    fputc(open, w->f);
    w->depth++;
    w->count[w->depth] = 0;
    w->closer[w->depth] = close;
}

void json_begin_object(json_writer *w, const char *key)
{
    begin(w, key, '{', '}');
}

void json_begin_array(json_writer *w, const char *key)
{
    begin(w, key, '[', ']');
}

void json_end(json_writer *w)
{
    assert(w->depth > 0);
    fputc(w->closer[w->depth], w->f);
    w->depth--;
}

void json_number(json_writer *w, const char *key, double v)
{
    prefix(w, key);
    if (!isfinite(v))
        fputs("null", w->f);
    else if (v == floor(v) && fabs(v) <= 9007199254740992.0)
        fprintf(w->f, "%.0f", v);
    else
        fprintf(w->f, "%.9g", v);
}

void json_uint(json_writer *w, const char *key, uint64_t v)
{
    prefix(w, key);
    fprintf(w->f, "%llu", (unsigned long long)v);
}

void json_bool(json_writer *w, const char *key, int v)
{
    prefix(w, key);
    fputs(v ? "true" : "false", w->f);
}

void json_null(json_writer *w, const char *key)
{
    prefix(w, key);
    fputs("null", w->f);
}

void json_string(json_writer *w, const char *key, const char *text)
{
    prefix(w, key);
    quoted(w->f, text);
}
