/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for tiktoken rank files and the BPE encoder
 * (src/tokenizer/bpe.c).
 *
 * An input starting with "T" is text: the rest is encoded with a fixed
 * rank file (the 256 bytes and a few merges), and the ids' bytes put back
 * together must be the text, whatever its bytes (UTF-8 or not). Any other
 * input is a rank file: a failure is EF_EFORMAT naming the file and,
 * unless the file is refused whole, a line that exists; a success holds at
 * least the 256 bytes, and every non-empty line's token, decoded here
 * independently, has the line's rank. With PCRE2, the rank file that
 * loads also encodes its own bytes and the ids' bytes give them back. Any
 * violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "tokenizer/bpe.h"

#define NAME "fuzz.tiktoken"

/* A token of a rank file, decoded here: its bytes and rank. */
typedef struct {
    unsigned char bytes[64]; /* room enough for the fixed file's */
    size_t n;
    long rank;
    const unsigned char *long_bytes; /* when set, the bytes (in an arena) */
} token;

static const unsigned char *token_bytes(const token *t)
{
    return t->long_bytes ? t->long_bytes : t->bytes;
}

static int b64_digit(unsigned char c)
{
    const char *a =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = c ? strchr(a, c) : NULL;
    return p ? (int)(p - a) : -1;
}

/* Standard base64 s[0, n), padded, into out (t->n bytes); 0 when it is
 * not base64. */
static int decode_b64(const unsigned char *s, size_t n, token *t,
                      unsigned char *out)
{
    unsigned bits = 0, nbits = 0;
    t->n = 0;
    size_t end = n;
    while (end > 0 && s[end - 1] == '=')
        end--;
    if (n == 0 || n % 4 || n - end > 2)
        return 0;
    for (size_t i = 0; i < end; i++) {
        int d = b64_digit(s[i]);
        if (d < 0)
            return 0;
        bits = bits << 6 | (unsigned)d;
        nbits += 6;
        if (nbits >= 8) {
            nbits -= 8;
            out[t->n++] = (unsigned char)(bits >> nbits);
            bits &= (1u << nbits) - 1;
        }
    }
    return 1;
}

/* The bytes of ids[0, n) with the tokens of `toks` (bytes: rank < 256)
 * must be text[0, size). */
static void check_round_trip(const ef__ids *ids, const token *toks,
                             size_t ntoks, const unsigned char *text,
                             size_t size)
{
    size_t at = 0;
    for (size_t i = 0; i < ids->n; i++) {
        const token *t = NULL;
        for (size_t k = 0; k < ntoks && !t; k++)
            if (toks[k].rank == ids->v[i])
                t = &toks[k];
        CHECK(t != NULL);
        CHECK(at + t->n <= size && !memcmp(text + at, token_bytes(t), t->n));
        at += t->n;
    }
    CHECK(at == size);
}

static const char *const merges[] = {"th", "he",   "the",         " t",
                                     "in", "ing",  "\xc3\xa9",    "  ",
                                     "'s", "\n\n", "\xe6\x97\xa5"};
#define NMERGES (sizeof merges / sizeof merges[0])

/* Text: encoded with the fixed rank file (built once). */
static void fuzz_text(const unsigned char *text, size_t size)
{
    static ef__bpe *b;
    static ef__bpe_ranks *ranks; /* b's */
    static token toks[256 + NMERGES];
    if (!b) {
        char *file = malloc(16384);
        CHECK(file != NULL);
        size_t n = 0;
        const char *a =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        for (int i = 0; i < 256 + (int)NMERGES; i++) {
            token *t = &toks[i];
            t->rank = i;
            t->long_bytes = NULL;
            if (i < 256) {
                t->bytes[0] = (unsigned char)i, t->n = 1;
            } else {
                t->n = strlen(merges[i - 256]);
                memcpy(t->bytes, merges[i - 256], t->n);
            }
            for (size_t j = 0; j < t->n; j += 3) {
                unsigned v = (unsigned)t->bytes[j] << 16;
                v |= j + 1 < t->n ? (unsigned)t->bytes[j + 1] << 8 : 0;
                v |= j + 2 < t->n ? t->bytes[j + 2] : 0;
                file[n++] = a[v >> 18 & 63];
                file[n++] = a[v >> 12 & 63];
                file[n++] = j + 1 < t->n ? a[v >> 6 & 63] : '=';
                file[n++] = j + 2 < t->n ? a[v & 63] : '=';
            }
            n += (size_t)snprintf(file + n, 32, " %d\n", i);
        }
        ef__err err;
        ef__err_clear(&err);
        ef__bpe_ranks *r;
        CHECK(ef__bpe_ranks_parse(file, n, NAME, &r, &err) == EF_OK);
        free(file);
        ranks = r;
        if (ef__bpe_new(r, &b, &err) != EF_OK) {
            CHECK(err.status == EF_EUNSUPPORTED); /* a build without PCRE2 */
            return;
        }
    }
    ef__ids ids = {0};
    ef__err err;
    ef__err_clear(&err);
    CHECK(ef__bpe_encode(b, NULL, text, size, &ids, &err) == EF_OK);
    check_round_trip(&ids, toks, 256 + NMERGES, text, size);
    /* a worker's scratch, kept from one text to the next: the same ids */
    static ef__bpe_scratch *scratch;
    if (!scratch)
        CHECK((scratch = ef__bpe_scratch_new(b)) != NULL);
    ef__ids again = {0};
    CHECK(ef__bpe_encode(b, scratch, text, size, &again, &err) == EF_OK);
    CHECK(again.n == ids.n &&
          (ids.n == 0 || !memcmp(again.v, ids.v, ids.n * sizeof *ids.v)));
    free(again.v);
    free(ids.v);
    /* the whole text as one piece: the heap's merges are the scan's */
    if (size > 0) {
        ef__ids scan = {0}, heap = {0};
        CHECK(ef__bpe_merge_how(ranks, text, size, &scan, 0) == EF_OK);
        CHECK(ef__bpe_merge_how(ranks, text, size, &heap, 1) == EF_OK);
        CHECK(scan.n == heap.n &&
              !memcmp(scan.v, heap.v, scan.n * sizeof *scan.v));
        check_round_trip(&heap, toks, 256 + NMERGES, text, size);
        free(scan.v);
        free(heap.v);
    }
}

/* A rank file. */
static void fuzz_ranks(const unsigned char *data, size_t size)
{
    ef__err err;
    ef__err_clear(&err);
    ef__bpe_ranks *r = NULL;
    int rc = ef__bpe_ranks_parse(data, size, NAME, &r, &err);
    size_t lines = 1;
    for (size_t i = 0; i < size; i++)
        lines += data[i] == '\n';
    if (rc != EF_OK) {
        CHECK(r == NULL);
        CHECK(rc == EF_EFORMAT || rc == EF_ENOMEM);
        fuzz_check_message(err.msg, sizeof err.msg, NAME);
        const char *at = strstr(err.msg, ": line ");
        if (at)
            CHECK((size_t)atol(at + 7) >= 1 && (size_t)atol(at + 7) <= lines);
        else
            CHECK(rc == EF_ENOMEM || strstr(err.msg, "has no rank"));
        return;
    }
    CHECK(ef__bpe_ranks_count(r) >= 256);
    token *toks = malloc(lines * sizeof *toks);
    unsigned char *arena = malloc(size + 1);
    CHECK(toks != NULL && arena != NULL);
    size_t used = 0;
    size_t ntoks = 0;
    for (const unsigned char *p = data, *end = data + size; p < end;) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = (size_t)((nl ? nl : end) - p);
        if (n && p[n - 1] == '\r')
            n--;
        if (n) {
            const unsigned char *sp = memchr(p, ' ', n);
            CHECK(sp != NULL);
            token *t = &toks[ntoks++];
            CHECK(decode_b64(p, (size_t)(sp - p), t, arena + used));
            t->long_bytes = arena + used;
            used += t->n;
            t->rank = atol((const char *)sp + 1);
            CHECK(ef__bpe_rank(r, t->long_bytes, t->n) == t->rank);
        }
        p = nl ? nl + 1 : end;
    }
    CHECK(ntoks == ef__bpe_ranks_count(r));
    ef__bpe *b;
    if (ef__bpe_new(r, &b, &err) == EF_OK) { /* r is b's now */
        ef__ids ids = {0};
        CHECK(ef__bpe_encode(b, NULL, data, size, &ids, &err) == EF_OK);
        check_round_trip(&ids, toks, ntoks, data, size);
        free(ids.v);
        ef__bpe_free(b);
    }
    free(toks);
    free(arena);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 0 && data[0] == 'T')
        fuzz_text(data + 1, size - 1);
    else
        fuzz_ranks(data, size);
    return 0;
}
