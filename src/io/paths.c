/* SPDX-License-Identifier: Apache-2.0 */
/* Path lists with brace expansion (see paths.h).
 *
 * A word is parsed on the fly, never into a tree: a sequence is literal
 * runs and {groups}; a group is alternatives (sequences split at its
 * top-level commas) or a numeric range. Every part has a size (how many
 * names, how many bytes of names); sizes saturate, so absurd patterns are
 * measured (and refused) without ever being built. A good word is then
 * built as the product of its parts' lists, the first group varying
 * slowest, which is the order shells use. Nesting is capped, so recursion
 * is bounded whatever the input. */
#include "io/paths.h"

#include <ctype.h>
#include <string.h>

#include "core/alloc.h"

#define MAX_DEPTH 16
#define SAT ((uint64_t)1 << 62) /* sizes saturate here */
#define SHOW 200                /* bytes of a word quoted in messages */

typedef struct {
    uint64_t count, bytes;
} size2;

/* The word being parsed, for messages; err may be NULL once the word is
 * known to be good. */
typedef struct {
    const char *what;
    const char *word;
    size_t len;
    ef__err *err;
} ctx;

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a >= SAT || b >= SAT - a ? SAT : a + b;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    if (a == 0 || b == 0)
        return 0;
    return a >= SAT / b ? SAT : a * b;
}

static int bad(const ctx *c, const char *why)
{
    int shown = c->len > SHOW ? SHOW : (int)c->len;
    return ef__err_set(c->err, EF_ESPEC, "%s: %s in '%.*s%s'", c->what, why,
                       shown, c->word, c->len > SHOW ? "..." : "");
}

/* Index of the '}' closing the '{' at w[pos], or len when there is none. */
static size_t closing(const char *w, size_t len, size_t pos)
{
    size_t depth = 0;
    for (size_t i = pos; i < len; i++) {
        if (w[i] == '{')
            depth++;
        else if (w[i] == '}' && --depth == 0)
            return i;
    }
    return len;
}

/* ---- numeric ranges --------------------------------------------- */

typedef struct {
    uint64_t first, last;
    int width; /* zero-padded to this many digits; 0: no padding */
} range;

static int parse_number(const char *s, size_t len, uint64_t *v)
{
    if (len == 0 || len > 18)
        return 0;
    *v = 0;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return 0;
        *v = *v * 10 + (uint64_t)(s[i] - '0');
    }
    return 1;
}

/* "A..B", both decimal, up to 18 digits. */
static int parse_range(const char *s, size_t len, range *r)
{
    for (size_t i = 0; i + 1 < len; i++) {
        if (s[i] != '.' || s[i + 1] != '.')
            continue;
        size_t alen = i, blen = len - i - 2;
        const char *b = s + i + 2;
        if (!parse_number(s, alen, &r->first) ||
            !parse_number(b, blen, &r->last))
            return 0;
        int padded = (alen > 1 && s[0] == '0') || (blen > 1 && b[0] == '0');
        r->width = padded ? (int)(alen > blen ? alen : blen) : 0;
        return 1;
    }
    return 0;
}

static size2 range_size(const range *r)
{
    uint64_t lo = r->first < r->last ? r->first : r->last;
    uint64_t hi = r->first < r->last ? r->last : r->first;
    size2 sz = {hi - lo + 1, 0};
    /* bytes: count the values of each number of digits */
    uint64_t band_lo = 0, band_hi = 9;
    for (int d = 1; d <= 18; d++) {
        uint64_t a = lo > band_lo ? lo : band_lo;
        uint64_t b = hi < band_hi ? hi : band_hi;
        if (a <= b) {
            uint64_t w = (uint64_t)(d > r->width ? d : r->width);
            sz.bytes = sat_add(sz.bytes, sat_mul(b - a + 1, w));
        }
        band_lo = band_hi + 1;
        band_hi = band_hi * 10 + 9;
    }
    return sz;
}

/* ---- sizes ------------------------------------------------------- */

static int group_size(const ctx *c, const char *g, size_t len, int depth,
                      size2 *out);

/* The size of the sequence w[0..len). */
static int seq_size(const ctx *c, const char *w, size_t len, int depth,
                    size2 *out)
{
    size2 acc = {1, 0};
    for (size_t i = 0; i < len;) {
        if (w[i] == '}')
            return bad(c, "'}' without its '{'");
        if (w[i] != '{') {
            size_t j = i;
            while (j < len && w[j] != '{' && w[j] != '}')
                j++;
            acc.bytes = sat_add(acc.bytes, sat_mul(j - i, acc.count));
            i = j;
            continue;
        }
        size_t end = closing(w, len, i);
        if (end == len)
            return bad(c, "'{' without its '}'");
        size2 g = {0, 0};
        int rc = group_size(c, w + i + 1, end - i - 1, depth + 1, &g);
        if (rc != EF_OK)
            return rc;
        acc.bytes =
            sat_add(sat_mul(acc.bytes, g.count), sat_mul(g.bytes, acc.count));
        acc.count = sat_mul(acc.count, g.count);
        i = end + 1;
    }
    *out = acc;
    return EF_OK;
}

/* Length of the alternative starting at g[0] (up to a top-level comma or
 * the end of the group). */
static size_t alt_len(const char *g, size_t len)
{
    size_t depth = 0, i = 0;
    for (; i < len; i++) {
        if (g[i] == '{')
            depth++;
        else if (g[i] == '}')
            depth--;
        else if (g[i] == ',' && depth == 0)
            break;
    }
    return i;
}

/* The size of the group whose content (between the braces) is g[0..len). */
static int group_size(const ctx *c, const char *g, size_t len, int depth,
                      size2 *out)
{
    if (depth > MAX_DEPTH)
        return bad(c, "braces nested more than 16 deep");
    if (len == 0)
        return bad(c, "empty '{}'");
    size_t first = alt_len(g, len);
    if (first == len) {
        range r;
        if (!parse_range(g, len, &r))
            return bad(c, "a brace group that is neither a list {a,b} nor "
                          "a range {0..9} (numbers of up to 18 digits)");
        *out = range_size(&r);
        return EF_OK;
    }
    size2 sum = {0, 0};
    for (size_t i = 0;;) {
        size_t n = alt_len(g + i, len - i);
        size2 a = {0, 0};
        int rc = seq_size(c, g + i, n, depth, &a);
        if (rc != EF_OK)
            return rc;
        sum.count = sat_add(sum.count, a.count);
        sum.bytes = sat_add(sum.bytes, a.bytes);
        if (i + n == len)
            break;
        i += n + 1; /* past the comma */
    }
    *out = sum;
    return EF_OK;
}

/* ---- building names --------------------------------------------- */

/* Strings back to back: string i is text[off[i] .. off[i + 1]). */
typedef struct {
    char *text;
    size_t *off; /* n + 1 offsets */
    size_t n;
} strlist;

static void strlist_free(strlist *l)
{
    ef__free(l->text);
    ef__free(l->off);
    l->text = NULL;
    l->off = NULL;
    l->n = 0;
}

static int strlist_alloc(strlist *l, size_t n, size_t bytes)
{
    l->text = ef__malloc(bytes);
    l->off = ef__malloc((n + 1) * sizeof *l->off);
    l->n = n;
    if (l->off)
        l->off[0] = 0;
    if (!l->text || !l->off) {
        strlist_free(l);
        return EF_ENOMEM;
    }
    return EF_OK;
}

static size_t strlist_bytes(const strlist *l)
{
    return l->off[l->n];
}

/* *a becomes every string of a followed by every string of b, a's
 * varying slowest. */
static int strlist_product(strlist *a, const strlist *b)
{
    strlist out;
    size_t bytes = strlist_bytes(a) * b->n + strlist_bytes(b) * a->n;
    if (strlist_alloc(&out, a->n * b->n, bytes) != EF_OK)
        return EF_ENOMEM;
    size_t k = 0, pos = 0;
    for (size_t i = 0; i < a->n; i++) {
        size_t alen = a->off[i + 1] - a->off[i];
        for (size_t j = 0; j < b->n; j++) {
            size_t blen = b->off[j + 1] - b->off[j];
            memcpy(out.text + pos, a->text + a->off[i], alen);
            memcpy(out.text + pos + alen, b->text + b->off[j], blen);
            pos += alen + blen;
            out.off[++k] = pos;
        }
    }
    strlist_free(a);
    *a = out;
    return EF_OK;
}

/* Appends the strings of b to *a. */
static int strlist_concat(strlist *a, const strlist *b)
{
    strlist out;
    size_t abytes = strlist_bytes(a);
    if (strlist_alloc(&out, a->n + b->n, abytes + strlist_bytes(b)) != EF_OK)
        return EF_ENOMEM;
    memcpy(out.text, a->text, abytes);
    memcpy(out.text + abytes, b->text, strlist_bytes(b));
    memcpy(out.off, a->off, (a->n + 1) * sizeof *a->off);
    for (size_t j = 1; j <= b->n; j++)
        out.off[a->n + j] = abytes + b->off[j];
    strlist_free(a);
    *a = out;
    return EF_OK;
}

static int literal_list(strlist *l, const char *s, size_t len)
{
    if (strlist_alloc(l, 1, len) != EF_OK)
        return EF_ENOMEM;
    memcpy(l->text, s, len);
    l->off[1] = len;
    return EF_OK;
}

static int range_list(strlist *l, const range *r)
{
    size2 sz = range_size(r);
    if (strlist_alloc(l, (size_t)sz.count, (size_t)sz.bytes) != EF_OK)
        return EF_ENOMEM;
    size_t pos = 0;
    for (uint64_t k = 0; k < sz.count; k++) {
        uint64_t v = r->first <= r->last ? r->first + k : r->first - k;
        char digits[24];
        int nd = 0;
        do {
            digits[nd++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        for (int i = nd; i < r->width; i++)
            l->text[pos++] = '0';
        while (nd)
            l->text[pos++] = digits[--nd];
        l->off[k + 1] = pos;
    }
    return EF_OK;
}

static int group_list(const char *g, size_t len, strlist *out);

/* Every name of the sequence w[0..len), which passed the checks: the
 * product of its literal runs and groups, in order. The work is about
 * (number of parts) x (bytes of the result), never a name rebuilt from
 * scratch. */
static int seq_list(const char *w, size_t len, strlist *out)
{
    int rc = literal_list(out, "", 0);
    for (size_t i = 0; rc == EF_OK && i < len;) {
        strlist part = {0};
        size_t next;
        if (w[i] != '{') {
            next = i;
            while (next < len && w[next] != '{')
                next++;
            rc = literal_list(&part, w + i, next - i);
        } else {
            size_t end = closing(w, len, i);
            rc = group_list(w + i + 1, end - i - 1, &part);
            next = end + 1;
        }
        if (rc == EF_OK)
            rc = strlist_product(out, &part);
        strlist_free(&part);
        i = next;
    }
    if (rc != EF_OK)
        strlist_free(out);
    return rc;
}

static int group_list(const char *g, size_t len, strlist *out)
{
    if (alt_len(g, len) == len) {
        range r;
        parse_range(g, len, &r);
        return range_list(out, &r);
    }
    int rc = strlist_alloc(out, 0, 0);
    for (size_t i = 0; rc == EF_OK;) {
        size_t n = alt_len(g + i, len - i);
        strlist alt = {0};
        rc = seq_list(g + i, n, &alt);
        if (rc == EF_OK)
            rc = strlist_concat(out, &alt);
        strlist_free(&alt);
        if (i + n == len)
            break;
        i += n + 1;
    }
    if (rc != EF_OK)
        strlist_free(out);
    return rc;
}

/* ---- lists ------------------------------------------------------- */

/* The next word of the list at *p, or 0 at the end. */
static int next_word(const char **p, const char **w, size_t *len)
{
    const char *s = *p;
    while (*s && isspace((unsigned char)*s))
        s++;
    if (!*s)
        return 0;
    const char *e = s;
    while (*e && !isspace((unsigned char)*e))
        e++;
    *w = s;
    *len = (size_t)(e - s);
    *p = e;
    return 1;
}

/* Checks every word; the list's total names and bytes (NULs included). */
static int list_size(const char *text, const char *what, size2 *total,
                     ef__err *err)
{
    size2 sum = {0, 0};
    const char *p = text, *w;
    size_t len;
    while (next_word(&p, &w, &len)) {
        ctx c = {what, w, len, err};
        size2 sz;
        int rc = seq_size(&c, w, len, 0, &sz);
        if (rc != EF_OK)
            return rc;
        if (sz.count > EF__PATHS_MAX_NAMES)
            return bad(&c, "more than 1000000 names (the cap on a list)");
        sum.count = sat_add(sum.count, sz.count);
        sum.bytes = sat_add(sum.bytes, sat_add(sz.bytes, sz.count));
    }
    if (sum.count == 0)
        return ef__err_set(err, EF_ESPEC,
                           "%s: no path or URL given (expected a list "
                           "separated by spaces, such as \"a-{0..9}.tar\")",
                           what);
    if (sum.count > EF__PATHS_MAX_NAMES)
        return ef__err_set(err, EF_ESPEC,
                           "%s: the list expands to %s%llu names, more than "
                           "the %d allowed",
                           what, sum.count >= SAT ? "over " : "",
                           (unsigned long long)sum.count, EF__PATHS_MAX_NAMES);
    if (sum.bytes > EF__PATHS_MAX_BYTES)
        return ef__err_set(err, EF_ESPEC,
                           "%s: the list expands to %s%llu bytes of names, "
                           "more than the %llu allowed",
                           what, sum.bytes >= SAT ? "over " : "",
                           (unsigned long long)sum.bytes,
                           (unsigned long long)EF__PATHS_MAX_BYTES);
    *total = sum;
    return EF_OK;
}

int ef__paths_count(const char *text, const char *what, size_t *n,
                    size_t *bytes, ef__err *err)
{
    size2 total = {0, 0};
    int rc = list_size(text, what, &total, err);
    *n = (size_t)total.count;
    if (bytes)
        *bytes = (size_t)total.bytes;
    return rc;
}

int ef__paths_expand(const char *text, const char *what, ef__paths *out,
                     ef__err *err)
{
    out->names = NULL;
    out->n = 0;
    size2 total;
    int rc = list_size(text, what, &total, err);
    if (rc != EF_OK)
        return rc;
    /* one allocation: the pointers, then the names they point to */
    size_t n = (size_t)total.count;
    char **names = ef__malloc(n * sizeof *names + (size_t)total.bytes);
    if (!names)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory for %zu names",
                           what, n);
    char *buf = (char *)(names + n);
    size_t pos = 0, i = 0;
    const char *p = text, *w;
    size_t len;
    while (next_word(&p, &w, &len)) {
        strlist l = {0};
        if (seq_list(w, len, &l) != EF_OK) {
            ef__free(names);
            return ef__err_set(err, EF_ENOMEM,
                               "%s: out of memory expanding '%.*s'", what,
                               len > SHOW ? SHOW : (int)len, w);
        }
        for (size_t k = 0; k < l.n; k++) {
            size_t m = l.off[k + 1] - l.off[k];
            names[i++] = buf + pos;
            memcpy(buf + pos, l.text + l.off[k], m);
            buf[pos + m] = '\0';
            pos += m + 1;
        }
        strlist_free(&l);
    }
    out->names = names;
    out->n = n;
    return EF_OK;
}

void ef__paths_free(ef__paths *p)
{
    ef__free(p->names);
    p->names = NULL;
    p->n = 0;
}
