/* SPDX-License-Identifier: Apache-2.0 */
/* Byte-level BPE as tiktoken does it, from a tiktoken rank file.
 *
 * The file: one token a line, "BASE64 RANK", the token's bytes in
 * standard base64 (with padding) and its rank, a decimal below 2^31.
 * Ranks are the merge order and the ids. Every one of the 256 single
 * bytes must have a rank, so that any text encodes.
 *
 * Encoding is tiktoken's encode_ordinary (special tokens such as
 * <|endoftext|> are ordinary text): the text is split into pieces by the
 * GPT-2 pattern (PCRE2, JIT), and each piece's bytes are merged pairwise,
 * lowest rank first (the leftmost of equals). Bytes that are not valid
 * UTF-8 match no pattern item; each run of them between matches is a
 * piece of its own, so no byte is lost. */
#ifndef EF_TOKENIZER_BPE_H
#define EF_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tokenizer/tokenizer.h"

/* The ranks of a rank file: a hash map from token bytes to rank. */
typedef struct ef__bpe_ranks ef__bpe_ranks;

/* Parses a rank file's bytes data[0, size) (borrowed; `name` names it in
 * messages) into *out, the caller's (ef__bpe_ranks_free). EF_EFORMAT
 * naming the line (from 1) and what was expected there: bad base64, a
 * missing or bad rank, a token twice, a rank twice; or naming a single
 * byte that has no rank. Needs no PCRE2. */
int ef__bpe_ranks_parse(const void *data, size_t size, const char *name,
                        ef__bpe_ranks **out, ef__err *err);
void ef__bpe_ranks_free(ef__bpe_ranks *r); /* accepts NULL */
/* Tokens in the file. */
size_t ef__bpe_ranks_count(const ef__bpe_ranks *r);
/* The rank of the token bytes[0, n), or -1 when it has none. */
int32_t ef__bpe_rank(const ef__bpe_ranks *r, const void *bytes, size_t n);
/* Appends the ids of one piece, bytes[0, n) with n >= 1, merged pairwise
 * by rank. EF_ENOMEM when out of memory. */
int ef__bpe_merge(const ef__bpe_ranks *r, const unsigned char *bytes, size_t n,
                  ef__ids *ids);
/* Pieces longer than this merge through a heap, in O(n log n); shorter
 * ones by a scan per merge, O(n^2) but faster when short. The ids are the
 * same (tests compare the two through ef__bpe_merge_how, heap 0 or 1). */
#define EF__BPE_HEAP_FROM 128
int ef__bpe_merge_how(const ef__bpe_ranks *r, const unsigned char *bytes,
                      size_t n, ef__ids *ids, int heap);

/* A rank file with the GPT-2 pattern compiled: the encoder. */
typedef struct ef__bpe ef__bpe;

/* Takes ownership of `ranks` (freed on failure too). EF_EUNSUPPORTED in
 * a build without PCRE2. */
int ef__bpe_new(ef__bpe_ranks *ranks, ef__bpe **out, ef__err *err);
void ef__bpe_free(ef__bpe *b); /* accepts NULL */
/* Working memory of one thread's encodes (the split's match block), kept
 * between them; NULL when out of memory or without PCRE2. */
typedef struct ef__bpe_scratch ef__bpe_scratch;
ef__bpe_scratch *ef__bpe_scratch_new(const ef__bpe *b);
void ef__bpe_scratch_free(ef__bpe_scratch *s); /* accepts NULL */
/* Counts the working memory of long pieces' merges through fn (see
 * ef__tokenizer_scratch_charge). */
void ef__bpe_scratch_charge(ef__bpe_scratch *s, ef__tok_charge fn, void *arg);
/* Appends the ids of text[0, n), using `scratch` (one thread's; NULL:
 * memory of its own for this call). Thread-safe. */
int ef__bpe_encode(const ef__bpe *b, ef__bpe_scratch *scratch, const void *text,
                   size_t n, ef__ids *ids, ef__err *err);

#endif
