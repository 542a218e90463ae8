/* SPDX-License-Identifier: Apache-2.0 */
/* tf.train.Example records: a hand-written reader of the protobuf wire
 * format for the few messages an Example is made of (no libprotobuf):
 *
 *     Example  { Features features = 1; }
 *     Features { map<string, Feature> feature = 1; }
 *              (each entry a message: string key = 1; Feature value = 2)
 *     Feature  { oneof kind { BytesList bytes_list = 1;
 *                             FloatList float_list = 2;
 *                             Int64List int64_list = 3; } }
 *     BytesList { repeated bytes value = 1; }
 *     FloatList { repeated float value = 1 [packed = true]; }
 *     Int64List { repeated int64 value = 1 [packed = true]; }
 *
 * It reads what protobuf's own parsers read: repeated numbers packed or
 * not (or both, in pieces), fields it does not know skipped by their wire
 * type (as is a known field number with an unexpected wire type),
 * `features` given twice merged, a key given twice in the map resolved to
 * its last entry, a oneof set twice resolved to the last kind (a list
 * given in several pieces of one kind is their concatenation). A Feature
 * with no kind set counts as missing, as in TensorFlow's parser. It
 * refuses a varint over 10 bytes or 64 bits, a length past the end of its
 * message, field number 0, and wire types 3, 4 (groups, which no Example
 * holds), 6 and 7. Keys are compared as bytes (UTF-8 is not checked).
 *
 * Only the requested features' values are looked into, so a damaged list
 * of a feature nobody asked for goes unnoticed (the map's framing is
 * checked whole). */
#ifndef EF_CODEC_TFEXAMPLE_H
#define EF_CODEC_TFEXAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef enum {
    EF__TFX_MISSING = 0, /* no entry, or an entry whose Feature has no kind */
    EF__TFX_BYTES = 1,   /* the oneof's field numbers */
    EF__TFX_FLOAT = 2,
    EF__TFX_INT64 = 3,
} ef__tfx_kind;

/* "bytes", "float", "int64" or "missing". */
const char *ef__tfx_kind_name(ef__tfx_kind kind);

/* One requested feature. The caller sets `name` and `len` (the key's
 * bytes, borrowed); ef__tfx_parse sets the rest. */
typedef struct {
    const char *name;
    size_t len;
    ef__tfx_kind kind;
    size_t count; /* values in the list (bytes: strings) */
    /* where the values are: the Feature entry's bytes, and the position
     * from which fields of `kind` count (the last switch of the oneof) */
    const uint8_t *entry, *entry_end, *from;
} ef__tfx_feature;

/* Reads the Example of `n` bytes at `rec` (borrowed) and finds each of
 * the `nf` features of `f`: its kind and count of values, checking that
 * those values can be read. EF_OK, or EF_EFORMAT with a message naming
 * the byte of the record where it went wrong and, when the fault lies in
 * a requested feature's values, the feature. */
int ef__tfx_parse(const void *rec, size_t n, ef__tfx_feature *f, size_t nf,
                  ef__err *err);

/* The values of a feature ef__tfx_parse found, into out[0 .. count):
 * int64 for EF__TFX_INT64, float for EF__TFX_FLOAT. */
void ef__tfx_int64s(const ef__tfx_feature *f, int64_t *out);
void ef__tfx_floats(const ef__tfx_feature *f, float *out);
/* The first `cap` strings of a EF__TFX_BYTES feature: pointers into the
 * record (borrowed from it) and lengths. */
void ef__tfx_bytes(const ef__tfx_feature *f, const uint8_t **data, size_t *size,
                   size_t cap);

#endif
