/* SPDX-License-Identifier: Apache-2.0 */
/* JSON Lines: the string value of one key of an object (RFC 8259), as the
 * jsonl source reads a document's text from each line.
 *
 * The whole line is checked, not only up to the key: a line that is not
 * one JSON object (with nothing but whitespace after it) is an error, as
 * Python's json.loads would find it, so a corrupt line never passes for a
 * document. Values of other keys are checked and skipped, nested at most
 * EF__JSON_MAX_DEPTH deep. Where a key appears twice the last one counts,
 * as in Python. Escapes are decoded to UTF-8 (a \u surrogate pair to one
 * code point; a lone surrogate is an error, since it has no UTF-8). Bytes
 * that are not valid UTF-8 inside a string are kept as they are: the text
 * goes on to a tokenizer, which has its own rule for them. */
#ifndef EF_CODEC_JSON_H
#define EF_CODEC_JSON_H

#include <stddef.h>

#include "core/err.h"

#define EF__JSON_MAX_DEPTH 64

/* Finds `key` in the object line[0, n) and decodes its string value into
 * out, which must hold n bytes (a decoded string is never longer than its
 * text); *out_len gets its length. EF_EFORMAT when the line is not a JSON
 * object, the key is missing or its value is not a string: the message
 * says what was expected and at which byte of the line (counted from 0). */
int ef__json_string(const char *line, size_t n, const char *key, char *out,
                    size_t *out_len, ef__err *err);

#endif
