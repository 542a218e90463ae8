/* SPDX-License-Identifier: Apache-2.0 */
/* Tokenizers: text (UTF-8 bytes) to token ids, for the tokenize stage.
 *
 * Two kinds, each behind an optional dependency: SentencePiece models
 * (libsentencepiece, sentencepiece.h) and tiktoken rank files, byte-level
 * BPE as GPT-2 splits text (libpcre2-8, bpe.h). A loaded tokenizer is
 * immutable: encode() may run on any number of threads at once. */
#ifndef EF_TOKENIZER_TOKENIZER_H
#define EF_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum {
    EF__TOK_AUTO = 0,      /* from the file's first bytes */
    EF__TOK_SENTENCEPIECE, /* a SentencePiece model (a protobuf) */
    EF__TOK_TIKTOKEN       /* text lines "BASE64 RANK" */
} ef__tok_kind;

/* A growing array of ids; the tokenizers append to it. */
typedef struct {
    int32_t *v; /* owned (ef__free) */
    size_t n, cap;
} ef__ids;

/* Room for `more` ids after the n there are; EF_ENOMEM (ids unchanged)
 * when out of memory. */
int ef__ids_reserve(ef__ids *ids, size_t more);

typedef struct ef__tokenizer ef__tokenizer;

/* The largest model file read: SentencePiece models and tiktoken rank
 * files run to a few MB, and the whole file is held while it loads. */
#define EF__TOK_MAX_MODEL ((uint64_t)1 << 30)

/* Loads the model at `path` as `kind` (EF__TOK_AUTO: sniffed) into *out,
 * the caller's (ef__tokenizer_free). Errors name the path: EF_EIO when
 * it cannot be read or is not a regular file (a FIFO would block, a
 * device never end), EF_EFORMAT when it is larger than
 * EF__TOK_MAX_MODEL or not a model of the kind, EF_EUNSUPPORTED when
 * the build lacks the kind's library. */
int ef__tokenizer_load(const char *path, ef__tok_kind kind, ef__tokenizer **out,
                       ef__err *err);
void ef__tokenizer_free(ef__tokenizer *t); /* accepts NULL */

/* "sentencepiece" or "tiktoken". */
const char *ef__tokenizer_kind_name(const ef__tokenizer *t);

/* Working memory of one thread's encodes, kept between them; NULL when
 * out of memory. */
typedef struct ef__tok_scratch ef__tok_scratch;
ef__tok_scratch *ef__tokenizer_scratch_new(const ef__tokenizer *t);
void ef__tokenizer_scratch_free(ef__tok_scratch *s); /* accepts NULL */

/* Working memory counted as it is taken (the caller's memory budget):
 * fn(arg, +n, err) before the tokenizer takes n bytes beyond the ids,
 * which may refuse them (EF_ENOMEM, its message in err: the encode fails
 * with it, naming what needed them), and fn(arg, -n, NULL) once they are
 * freed. Without it (or with a NULL scratch) nothing is counted. */
typedef int (*ef__tok_charge)(void *arg, int64_t bytes, ef__err *err);
void ef__tokenizer_scratch_charge(ef__tok_scratch *s, ef__tok_charge fn,
                                  void *arg);

/* Appends the ids of text[0, n) (not NUL-terminated; any bytes, valid
 * UTF-8 or not) to `ids`, using `scratch` (one thread's at a time; NULL:
 * memory of its own for this call). Thread-safe. EF_ENOMEM, or another
 * error with its message in err. */
int ef__tokenizer_encode(const ef__tokenizer *t, ef__tok_scratch *scratch,
                         const void *text, size_t n, ef__ids *ids,
                         ef__err *err);

#endif
