/* SPDX-License-Identifier: Apache-2.0 */
/* SentencePiece models through libsentencepiece (C++), behind a C
 * interface: sentencepiece.cc catches every C++ exception at this
 * boundary. Built only when the library is found (EF_HAVE_SENTENCEPIECE).
 * One processor serves every thread: its Encode is const. */
#ifndef EF_TOKENIZER_SENTENCEPIECE_H
#define EF_TOKENIZER_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ef__spm ef__spm;

/* Status codes of this interface (the caller maps them to ef_status). */
enum { EF__SPM_OK = 0, EF__SPM_NOMEM = -1, EF__SPM_FAILED = -2 };

/* Loads the model from its file's bytes, data[0, size) (borrowed), into
 * *out, the caller's (ef__spm_free). On failure, why (SentencePiece's
 * message) into why[0, cap). */
int ef__spm_load(const void *data, size_t size, ef__spm **out, char *why,
                 size_t cap);
void ef__spm_free(ef__spm *m); /* accepts NULL */

/* Appends the ids of text[0, n) to the *count ids in *ids (room for
 * *cap), which grows with ef__realloc when too small and stays the
 * caller's. Thread-safe. On failure, why into why[0, why_cap). */
int ef__spm_encode(const ef__spm *m, const char *text, size_t n, int32_t **ids,
                   size_t *count, size_t *cap, char *why, size_t why_cap);

#ifdef __cplusplus
}
#endif

#endif
