/* SPDX-License-Identifier: Apache-2.0 */
/* Checks of a SentencePiece model's bytes that libsentencepiece does not
 * make: its normalizers' precompiled_charsmap, a double-array trie that
 * the library walks without bounds checks, so a corrupt one crashes the
 * first encode (or the load itself, whose self-test encodes). Pure C, no
 * libsentencepiece needed: the model is read as protobuf wire data. */
#ifndef EF_TOKENIZER_SPM_CHECK_H
#define EF_TOKENIZER_SPM_CHECK_H

#include <stddef.h>

/* Checks a precompiled_charsmap, blob[0, n): a little-endian uint32 trie
 * size, a Darts-clone double array of that many bytes, then the
 * NUL-terminated normalized strings. Every state an input can reach must
 * read units inside the trie, and every match must lead to a
 * NUL-terminated string inside the normalized strings. EF_OK, or
 * EF_EFORMAT with what is wrong in why[0, cap), or EF_ENOMEM. */
int ef__spm_charsmap_check(const unsigned char *blob, size_t n, char *why,
                           size_t cap);

/* Checks the charsmaps of a serialized ModelProto, model[0, n): those of
 * normalizer_spec and denormalizer_spec. EF_EFORMAT with why when the
 * bytes are no protobuf message or a charsmap is corrupt (the why names
 * which), or EF_ENOMEM. */
int ef__spm_model_check(const void *model, size_t n, char *why, size_t cap);

#endif
