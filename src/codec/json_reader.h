/* SPDX-License-Identifier: Apache-2.0 */
/* A pull reader of one JSON document (RFC 8259) held in memory, for files
 * too large to hold as a tree (COCO's train2017 annotations are 450 MB):
 * the caller walks the document value by value, reading the values it
 * wants and skipping the others, and nothing is allocated per value.
 *
 * Strict: the grammar is RFC 8259's (no comments, no trailing commas, no
 * NaN, no leading zeros, no control characters inside strings), and
 * nesting deeper than EF__JSON_MAX_DEPTH is refused, skipped values
 * included, so a hostile file cannot exhaust the stack. Every error is
 * EF_EFORMAT naming the document, the byte offset (from 0) and what was
 * expected. After an error the reader is spent: its calls fail again.
 *
 * Escapes are decoded to UTF-8 (a \u surrogate pair to one code point; a
 * lone surrogate is an error). Other bytes of a string are kept as they
 * are. Duplicate keys are not detected here: a caller that reads an
 * object's keys sees each one and decides (codec/coco.c refuses them). */
#ifndef EF_CODEC_JSON_READER_H
#define EF_CODEC_JSON_READER_H

#include <stddef.h>
#include <stdint.h>

#include "codec/json.h" /* EF__JSON_MAX_DEPTH */
#include "core/err.h"

typedef enum {
    EF__JSON_NULL,
    EF__JSON_BOOL,
    EF__JSON_NUMBER,
    EF__JSON_STRING,
    EF__JSON_ARRAY,
    EF__JSON_OBJECT,
} ef__json_kind;

typedef struct {
    const char *text; /* the document, not NUL-ended */
    size_t n, pos;
    const char *name; /* for messages */
    int depth;        /* containers open */
    /* bit d: the container at depth d + 1 has not yet given an item */
    uint64_t fresh;
    int failed;
} ef__json_reader;

/* A reader of text[0, n), named `name` in messages; both must outlive
 * it. */
void ef__json_reader_init(ef__json_reader *j, const char *text, size_t n,
                          const char *name);

/* The kind of the next value, without reading it. EF_EFORMAT where no
 * value starts there. */
int ef__json_peek(ef__json_reader *j, ef__json_kind *kind, ef__err *err);

/* Opens the next value, which must be an array (object): `what` names it
 * in the message otherwise. */
int ef__json_array(ef__json_reader *j, const char *what, ef__err *err);
int ef__json_object(ef__json_reader *j, const char *what, ef__err *err);

/* Steps to the next item of the innermost open array: *more is 1 and the
 * item is next to read, or 0 and the array is closed. */
int ef__json_next_item(ef__json_reader *j, int *more, ef__err *err);

/* Steps to the next member of the innermost open object: *more is 1, its
 * key decoded into key (cap bytes, NUL-ended) and its value next to read,
 * or 0 and the object is closed. A key of cap bytes or more is read
 * whole but given as "" (no caller looks for one). */
int ef__json_next_key(ef__json_reader *j, char *key, size_t cap, int *more,
                      ef__err *err);

/* Reads past the next value, whatever it is. */
int ef__json_skip(ef__json_reader *j, ef__err *err);

/* Reads the next value as a number (any JSON number that is finite as a
 * double). `what` names it in messages. */
int ef__json_number(ef__json_reader *j, const char *what, double *out,
                    ef__err *err);

/* Reads the next value as an integer: a JSON number with an integral
 * value (7, or 7.0 as some writers give it) within int64_t's range
 * (exactly, for a written integer; within +-2^53 otherwise). */
int ef__json_int(ef__json_reader *j, const char *what, int64_t *out,
                 ef__err *err);

/* Reads the next value as a string, decoded into out (cap bytes,
 * NUL-ended). A string of cap bytes or more is EF_EFORMAT naming `what`.
 * *len (may be NULL) gets its length. */
int ef__json_text(ef__json_reader *j, const char *what, char *out, size_t cap,
                  size_t *len, ef__err *err);

/* Checks that nothing but whitespace follows the document's one value,
 * which has been read. */
int ef__json_finish(ef__json_reader *j, ef__err *err);

/* The byte offset of the next thing to read: where a value read next
 * begins (after whitespace once peeked), for messages. */
static inline size_t ef__json_offset(const ef__json_reader *j)
{
    return j->pos;
}

#endif
