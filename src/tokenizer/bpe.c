/* SPDX-License-Identifier: Apache-2.0 */
/* Byte-level BPE from tiktoken rank files (bpe.h): the rank file's
 * parser and hash map, tiktoken's pairwise merge, and the GPT-2 split
 * (PCRE2, when the build has it). */
#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "tokenizer/bpe.h"

#ifdef EF_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

#define NO_RANK INT32_MAX

/* A token: its bytes at `off` in the arena, its rank, and the line it
 * came from (for messages about duplicates). */
typedef struct {
    uint32_t off, len;
    int32_t rank;
    uint32_t line;
} entry;

struct ef__bpe_ranks {
    unsigned char *arena; /* every token's bytes */
    entry *e;
    size_t n;
    uint32_t *slot; /* open addressing: an entry's index + 1, 0 when free */
    size_t mask;    /* slots - 1, a power of 2 minus 1 */
    int32_t byte_rank[256];
};

static uint64_t hash(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* The slot of bytes[0, n): the one holding it, or the free one where it
 * would go. */
static uint32_t *find_slot(const ef__bpe_ranks *r, const unsigned char *p,
                           size_t n)
{
    for (size_t i = hash(p, n) & r->mask;; i = (i + 1) & r->mask) {
        uint32_t k = r->slot[i];
        if (!k)
            return &r->slot[i];
        const entry *e = &r->e[k - 1];
        if (e->len == n && !memcmp(r->arena + e->off, p, n))
            return &r->slot[i];
    }
}

int32_t ef__bpe_rank(const ef__bpe_ranks *r, const void *bytes, size_t n)
{
    if (n == 1)
        return r->byte_rank[*(const unsigned char *)bytes];
    uint32_t k = *find_slot(r, bytes, n);
    return k ? r->e[k - 1].rank : -1;
}

size_t ef__bpe_ranks_count(const ef__bpe_ranks *r)
{
    return r->n;
}

void ef__bpe_ranks_free(ef__bpe_ranks *r)
{
    if (!r)
        return;
    ef__free(r->arena);
    ef__free(r->e);
    ef__free(r->slot);
    ef__free(r);
}

/* ---- parsing ------------------------------------------------------ */

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes standard base64 s[0, n) into out; its length, or -1 when it
 * is not base64 (a length not a multiple of 4, a character outside the
 * alphabet, padding not at the end, bits set past the data). */
static long b64_decode(const unsigned char *s, size_t n, unsigned char *out)
{
    if (n == 0 || n % 4)
        return -1;
    size_t pad = s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    long len = 0;
    for (size_t i = 0; i < n; i += 4) {
        uint32_t v = 0;
        int last = i + 4 == n;
        for (size_t j = 0; j < 4; j++) {
            int d = last && j >= 4 - pad ? 0 : b64_value(s[i + j]);
            if (d < 0)
                return -1;
            v = v << 6 | (uint32_t)d;
        }
        out[len++] = (unsigned char)(v >> 16);
        if (!last || pad < 2)
            out[len++] = (unsigned char)(v >> 8);
        if (!last || pad < 1)
            out[len++] = (unsigned char)v;
        if (last && ((pad == 1 && (v & 0xff)) || (pad == 2 && (v & 0xffff))))
            return -1; /* bits after the data: not the canonical form */
    }
    return len;
}

/* "line 12: " and what is wrong with it. */
static int line_error(ef__err *err, const char *name, size_t line,
                      const char *what)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: line %zu: %s; expected a tiktoken rank file, "
                       "lines of \"BASE64 RANK\"",
                       name, line, what);
}

/* One line, s[0, n), into entry `r->n` (its bytes at *used in the
 * arena). */
static int parse_line(ef__bpe_ranks *r, const unsigned char *s, size_t n,
                      size_t line, size_t *used, const char *name, ef__err *err)
{
    const unsigned char *sp = memchr(s, ' ', n);
    if (!sp)
        return line_error(err, name, line, "no space before the rank");
    size_t tn = (size_t)(sp - s), rn = n - tn - 1;
    if (rn == 0 || rn > 10)
        return line_error(err, name, line,
                          rn ? "a rank too long" : "no rank after the space");
    int64_t rank = 0;
    for (size_t i = 0; i < rn; i++) {
        if (sp[1 + i] < '0' || sp[1 + i] > '9')
            return line_error(err, name, line,
                              "a rank that is not a decimal number");
        rank = rank * 10 + (sp[1 + i] - '0');
    }
    if (rank >= NO_RANK)
        return line_error(err, name, line, "a rank of 2^31 - 1 or more");
    long len = b64_decode(s, tn, r->arena + *used);
    if (len < 0)
        return line_error(err, name, line,
                          tn ? "a token that is not base64" : "an empty token");
    entry *e = &r->e[r->n];
    *e = (entry){(uint32_t)*used, (uint32_t)len, (int32_t)rank, (uint32_t)line};
    uint32_t *slot = find_slot(r, r->arena + e->off, e->len);
    if (*slot) {
        char what[96];
        snprintf(what, sizeof what, "a token that line %u has already",
                 r->e[*slot - 1].line);
        return line_error(err, name, line, what);
    }
    *slot = (uint32_t)++r->n;
    *used += (size_t)len;
    return EF_OK;
}

static int by_rank(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Every rank once, every single byte ranked. */
static int check_ranks(ef__bpe_ranks *r, const char *name, ef__err *err)
{
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        uint32_t k = *find_slot(r, &c, 1);
        if (!k)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: the byte 0x%02x has no rank; a tiktoken "
                               "rank file ranks each of the 256 bytes",
                               name, b);
        r->byte_rank[b] = r->e[k - 1].rank;
    }
    entry *sorted = ef__malloc(r->n * sizeof *sorted);
    if (!sorted)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    memcpy(sorted, r->e, r->n * sizeof *sorted);
    qsort(sorted, r->n, sizeof *sorted, by_rank);
    int rc = EF_OK;
    for (size_t i = 1; i < r->n && rc == EF_OK; i++)
        if (sorted[i].rank == sorted[i - 1].rank) {
            uint32_t a = sorted[i - 1].line, b = sorted[i].line;
            char what[96];
            snprintf(what, sizeof what, "rank %d, which line %u has already",
                     (int)sorted[i].rank, a < b ? a : b);
            rc = line_error(err, name, a < b ? b : a, what);
        }
    ef__free(sorted);
    return rc;
}

int ef__bpe_ranks_parse(const void *data, size_t size, const char *name,
                        ef__bpe_ranks **out, ef__err *err)
{
    *out = NULL;
    if (size > UINT32_MAX)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %zu bytes, more than a rank file may have "
                           "(4 GiB)",
                           name, size);
    const unsigned char *p = data, *end = p + size;
    size_t lines = 0;
    for (const unsigned char *q = p; q < end; q++)
        lines += *q == '\n';
    lines++;
    size_t slots = 16;
    while (slots < 2 * lines)
        slots *= 2;
    ef__bpe_ranks *r = ef__calloc(1, sizeof *r);
    if (r) {
        r->arena = ef__malloc(size ? size : 1);
        r->e = ef__malloc(lines * sizeof *r->e);
        r->slot = ef__calloc(slots, sizeof *r->slot);
        r->mask = slots - 1;
    }
    if (!r || !r->arena || !r->e || !r->slot) {
        ef__bpe_ranks_free(r);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    }
    size_t used = 0, line = 0;
    int rc = EF_OK;
    while (p < end && rc == EF_OK) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        line++;
        if (n && p[n - 1] == '\r')
            n--;
        if (n) /* empty lines are skipped, as tiktoken's loader does */
            rc = parse_line(r, p, n, line, &used, name, err);
        p = nl ? nl + 1 : end;
    }
    if (rc == EF_OK)
        rc = check_ranks(r, name, err);
    if (rc != EF_OK) {
        ef__bpe_ranks_free(r);
        return rc;
    }
    *out = r;
    return EF_OK;
}

/* ---- merging ------------------------------------------------------ */

/* The rank of bytes[a, b) as a pair's merge: NO_RANK when none. */
static int32_t pair_rank(const ef__bpe_ranks *r, const unsigned char *bytes,
                         size_t a, size_t b)
{
    int32_t k = ef__bpe_rank(r, bytes + a, b - a);
    return k >= 0 ? k : NO_RANK;
}

/* Appends the id of each part, parts starting at start[0 .. parts - 1)
 * and start[parts - 1] the end. */
static int emit_parts(const ef__bpe_ranks *r, const unsigned char *bytes,
                      const size_t *start, size_t parts, ef__ids *ids)
{
    if (ef__ids_reserve(ids, parts - 1) != EF_OK)
        return EF_ENOMEM;
    for (size_t i = 0; i + 1 < parts; i++) {
        int32_t k = ef__bpe_rank(r, bytes + start[i], start[i + 1] - start[i]);
        assert(k >= 0); /* merged parts are tokens; bytes all have ranks */
        ids->v[ids->n++] = k;
    }
    return EF_OK;
}

/* tiktoken's _byte_pair_merge: parts start at start[i], and rank[i] is
 * the rank of parts i and i + 1 together; the lowest such pair merges,
 * the leftmost of equals, until none is left. A scan per merge: O(n^2),
 * the fastest for the short pieces text is made of. */
static int merge_scan(const ef__bpe_ranks *r, const unsigned char *bytes,
                      size_t n, ef__ids *ids)
{
    size_t stack_start[64];
    int32_t stack_rank[64];
    size_t *start = stack_start;
    int32_t *rank = stack_rank;
    if (n + 1 > 64) {
        start = ef__malloc((n + 1) * sizeof *start);
        rank = ef__malloc((n + 1) * sizeof *rank);
        if (!start || !rank) {
            ef__free(start);
            ef__free(rank);
            return EF_ENOMEM;
        }
    }
    size_t parts = n + 1; /* the last is the end */
    for (size_t i = 0; i <= n; i++) {
        start[i] = i;
        rank[i] = i + 1 < n ? pair_rank(r, bytes, i, i + 2) : NO_RANK;
    }
    for (;;) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < parts; i++)
            if (rank[i] < rank[best])
                best = i;
        if (rank[best] == NO_RANK)
            break;
        /* part best + 1 joins part best */
        memmove(start + best + 1, start + best + 2,
                (parts - best - 2) * sizeof *start);
        memmove(rank + best + 1, rank + best + 2,
                (parts - best - 2) * sizeof *rank);
        parts--;
        for (size_t i = best ? best - 1 : 0; i <= best; i++)
            rank[i] = i + 2 < parts
                          ? pair_rank(r, bytes, start[i], start[i + 2])
                          : NO_RANK;
    }
    int rc = emit_parts(r, bytes, start, parts, ids);
    if (start != stack_start) {
        ef__free(start);
        ef__free(rank);
    }
    return rc;
}

/* A pair waiting in merge_heap's heap: its rank, the byte where its
 * first part starts, and that part's version when it was pushed. */
typedef struct {
    int32_t rank;
    uint32_t ver;
    size_t at;
} pair;

static int pair_before(const pair *x, const pair *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->at < y->at);
}

static void heap_push(pair *h, size_t *n, pair p)
{
    size_t i = (*n)++;
    while (i > 0 && pair_before(&p, &h[(i - 1) / 2])) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = p;
}

static pair heap_pop(pair *h, size_t *n)
{
    pair top = h[0], last = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && pair_before(&h[c + 1], &h[c]))
            c++;
        if (!pair_before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

/* The same merges as merge_scan, in O(n log n) for long pieces (a run of
 * one letter, a base64 blob): the pairs wait in a heap ordered by rank,
 * then position (which is merge_scan's leftmost), the parts are a list
 * over their first bytes, and a pair whose first part changed since it
 * was pushed (another version) is stale and dropped. */
static int merge_heap(const ef__bpe_ranks *r, const unsigned char *bytes,
                      size_t n, ef__ids *ids)
{
    size_t *next = ef__malloc((n + 1) * sizeof *next);
    size_t *prev = ef__malloc((n + 1) * sizeof *prev);
    uint32_t *ver = ef__calloc(n + 1, sizeof *ver);
    pair *h = ef__malloc(3 * n * sizeof *h); /* n, then 2 per merge */
    int rc = next && prev && ver && h ? EF_OK : EF_ENOMEM;
    size_t hn = 0;
    for (size_t i = 0; rc == EF_OK && i <= n; i++) {
        next[i] = i + 1;
        prev[i] = i - 1; /* prev[0] is never read */
        if (i + 1 < n) {
            int32_t k = pair_rank(r, bytes, i, i + 2);
            if (k != NO_RANK)
                heap_push(h, &hn, (pair){k, 0, i});
        }
    }
    while (rc == EF_OK && hn) {
        pair p = heap_pop(h, &hn);
        size_t i = p.at;
        if (p.ver != ver[i])
            continue;       /* part i changed (or was merged away) since */
        size_t j = next[i]; /* joins i */
        next[i] = next[j];
        prev[next[j]] = i;
        ver[j]++;
        /* the pairs of i's neighbour before it and of i itself are new */
        size_t firsts[2] = {i ? prev[i] : SIZE_MAX, i};
        for (int k = 0; k < 2; k++) {
            size_t a = firsts[k];
            if (a == SIZE_MAX)
                continue;
            ver[a]++;
            if (next[a] < n) {
                int32_t q = pair_rank(r, bytes, a, next[next[a]]);
                if (q != NO_RANK)
                    heap_push(h, &hn, (pair){q, ver[a], a});
            }
        }
    }
    if (rc == EF_OK) {
        /* the parts' starts, in order, into prev (no longer needed) */
        size_t parts = 0;
        for (size_t i = 0; i < n; i = next[i])
            prev[parts++] = i;
        prev[parts++] = n;
        rc = emit_parts(r, bytes, prev, parts, ids);
    }
    ef__free(next);
    ef__free(prev);
    ef__free(ver);
    ef__free(h);
    return rc;
}

int ef__bpe_merge_how(const ef__bpe_ranks *r, const unsigned char *bytes,
                      size_t n, ef__ids *ids, int heap)
{
    assert(n >= 1);
    int32_t whole = ef__bpe_rank(r, bytes, n);
    if (whole >= 0 || n == 1) {
        if (ef__ids_reserve(ids, 1) != EF_OK)
            return EF_ENOMEM;
        ids->v[ids->n++] = whole;
        return EF_OK;
    }
    return heap ? merge_heap(r, bytes, n, ids) : merge_scan(r, bytes, n, ids);
}

int ef__bpe_merge(const ef__bpe_ranks *r, const unsigned char *bytes, size_t n,
                  ef__ids *ids)
{
    return ef__bpe_merge_how(r, bytes, n, ids, n > EF__BPE_HEAP_FROM);
}

/* ---- the GPT-2 split ---------------------------------------------- */

struct ef__bpe {
    ef__bpe_ranks *ranks;
#ifdef EF_HAVE_PCRE2
    pcre2_code *re;
#endif
};

void ef__bpe_free(ef__bpe *b)
{
    if (!b)
        return;
    ef__bpe_ranks_free(b->ranks);
#ifdef EF_HAVE_PCRE2
    pcre2_code_free(b->re);
#endif
    ef__free(b);
}

#ifdef EF_HAVE_PCRE2

/* GPT-2's pattern, with \s spelled out as Unicode's White_Space, which is
 * what tiktoken's (Rust) regex means by it; PCRE2's \s differs at U+180E.
 * (JavaScript's \s, as js-tiktoken uses it, differs at U+0085, which it
 * leaves out, and U+FEFF, which it takes in.) */
#define WS                                                                     \
    "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}"           \
    "\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+"
    "|[" WS "]+(?![^" WS "])|[" WS "]+";

int ef__bpe_new(ef__bpe_ranks *ranks, ef__bpe **out, ef__err *err)
{
    *out = NULL;
    ef__bpe *b = ef__calloc(1, sizeof *b);
    if (!b) {
        ef__bpe_ranks_free(ranks);
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    }
    b->ranks = ranks;
    int code;
    PCRE2_SIZE at;
    b->re = pcre2_compile((PCRE2_SPTR)gpt2_pattern, PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF,
                          &code, &at, NULL);
    if (!b->re) {
        char why[256];
        pcre2_get_error_message(code, (PCRE2_UCHAR *)why, sizeof why);
        ef__bpe_free(b);
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "the GPT-2 pattern does not compile with this "
                           "PCRE2 (at %zu: %s)",
                           (size_t)at, why);
    }
    /* without the JIT (a platform PCRE2 has none for), the interpreter
     * gives the same matches, slower */
    (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE);
    *out = b;
    return EF_OK;
}

/* A match block: the split reads only the whole match's bounds. */
struct ef__bpe_scratch {
    pcre2_match_data *md;
    ef__tok_charge charge; /* NULL: nothing counted */
    void *charge_arg;
};

ef__bpe_scratch *ef__bpe_scratch_new(const ef__bpe *b)
{
    ef__bpe_scratch *s = ef__calloc(1, sizeof *s);
    if (s && !(s->md = pcre2_match_data_create_from_pattern(b->re, NULL))) {
        ef__free(s);
        s = NULL;
    }
    return s;
}

void ef__bpe_scratch_free(ef__bpe_scratch *s)
{
    if (s)
        pcre2_match_data_free(s->md);
    ef__free(s);
}

void ef__bpe_scratch_charge(ef__bpe_scratch *s, ef__tok_charge fn, void *arg)
{
    s->charge = fn;
    s->charge_arg = arg;
}

/* The bytes merge_heap allocates for a piece of n bytes. */
static uint64_t heap_work(size_t n)
{
    return (uint64_t)(n + 1) * (2 * sizeof(size_t) + sizeof(uint32_t)) +
           (uint64_t)3 * n * sizeof(pair);
}

/* Merges the piece t[at, at + n), its working memory counted through
 * the scratch (may be NULL): merge_heap's arrays, which a long piece (a
 * word without a break, a blob) makes large. EF_ENOMEM says why in err. */
static int merge_piece(const ef__bpe *b, ef__bpe_scratch *scratch,
                       const unsigned char *t, size_t at, size_t n,
                       ef__ids *ids, ef__err *err)
{
    int64_t work = 0;
    if (scratch && scratch->charge && n > EF__BPE_HEAP_FROM) {
        work = (int64_t)heap_work(n);
        int rc = scratch->charge(scratch->charge_arg, work, err);
        if (rc != EF_OK) {
            char what[96];
            snprintf(what, sizeof what, "merging the piece of %zu bytes at "
                     "byte %zu", n, at);
            ef__err_prefix(err, what);
            return rc;
        }
    }
    int rc = ef__bpe_merge(b->ranks, t + at, n, ids);
    if (work)
        scratch->charge(scratch->charge_arg, -work, NULL);
    if (rc == EF_ENOMEM)
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    return rc;
}

int ef__bpe_encode(const ef__bpe *b, ef__bpe_scratch *scratch, const void *text,
                   size_t n, ef__ids *ids, ef__err *err)
{
    const unsigned char *t = text;
    pcre2_match_data *md =
        scratch ? scratch->md
                : pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!md)
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    int rc = EF_OK;
    size_t pos = 0;
    while (pos < n && rc == EF_OK) {
        int m = pcre2_match(b->re, t, n, pos, 0, md, NULL);
        size_t s = n, e = n;
        if (m >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            s = ov[0];
            e = ov[1] > s ? ov[1] : s + 1; /* no item matches empty */
        } else if (m != PCRE2_ERROR_NOMATCH) {
            char why[256];
            pcre2_get_error_message(m, (PCRE2_UCHAR *)why, sizeof why);
            rc = ef__err_set(err, EF_EFORMAT,
                             "splitting the text at byte %zu: %s", pos, why);
            break;
        }
        /* bytes no item matched (not UTF-8): a piece of their own */
        if (s > pos)
            rc = merge_piece(b, scratch, t, pos, s - pos, ids, err);
        if (rc == EF_OK && e > s)
            rc = merge_piece(b, scratch, t, s, e - s, ids, err);
        pos = e;
    }
    if (!scratch)
        pcre2_match_data_free(md);
    return rc;
}

#else

int ef__bpe_new(ef__bpe_ranks *ranks, ef__bpe **out, ef__err *err)
{
    *out = NULL;
    ef__bpe_ranks_free(ranks);
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "tiktoken rank files need PCRE2, which this build "
                       "lacks; install libpcre2-dev and build again");
}

ef__bpe_scratch *ef__bpe_scratch_new(const ef__bpe *b)
{
    (void)b;
    return NULL;
}

void ef__bpe_scratch_free(ef__bpe_scratch *s)
{
    (void)s;
}

void ef__bpe_scratch_charge(ef__bpe_scratch *s, ef__tok_charge fn, void *arg)
{
    (void)s, (void)fn, (void)arg;
}

int ef__bpe_encode(const ef__bpe *b, ef__bpe_scratch *scratch, const void *text,
                   size_t n, ef__ids *ids, ef__err *err)
{
    (void)b, (void)scratch, (void)text, (void)n, (void)ids;
    return ef__err_set(err, EF_EUNSUPPORTED, "built without PCRE2");
}

#endif
