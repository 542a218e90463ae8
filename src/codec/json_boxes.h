/* SPDX-License-Identifier: Apache-2.0 */
/* A detection sample's annotations as one JSON object, the member KEY.json
 * that `echoflow pack` writes beside each image of a sample with boxes and
 * the json_boxes stage reads back:
 *
 *     {"boxes": [[x1, y1, x2, y2], ...], "labels": [3, 7],
 *      "iscrowd": [0, 0], "image_id": 42}
 *
 * `boxes` is required: an array of n rows of 4 numbers, f32 [n, 4] (the
 * boxes stages' xyxy pixels, though nothing here depends on the
 * convention). Every other key is a field of the same name: an array of n
 * numbers, one per box, shape [n], or one number, a scalar. Their dtype is
 * i64 (a number with an integral value, within int64's range), or f32 for
 * the keys named in `floats`. f32 values must be finite and within f32's
 * range. A key may appear once, `__key__` and `__url__` not at all (the
 * names of a sample's key and URL); at most EF__JSON_BOXES_MAX_KEYS keys.
 *
 * Written from a sample (ef__json_boxes_write) when it has a field `boxes`
 * of f32 [n, 4] (not a batch's ragged field): the JSON then holds boxes and
 * every i64 or f32 field that is a scalar or of shape [n] (ef__json_boxes
 * _holds), in the sample's order. f32 values are written with 9
 * significant digits, so that they read back bit for bit; i64 values in
 * full. Reading back gives the same names, dtypes, shapes and values,
 * f32 fields other than boxes named in `floats`. */
#ifndef EF_CODEC_JSON_BOXES_H
#define EF_CODEC_JSON_BOXES_H

#include <stddef.h>

#include "core/err.h"
#include "core/sample.h"

#define EF__JSON_BOXES_MAX_KEYS 64

/* The index of the field `boxes` of s when s has the detection form above
 * (f32 [n, 4], not ragged), or -1. */
int ef__json_boxes_find(const ef_sample *s);

/* Whether field f goes into the JSON of a sample whose boxes field has n
 * rows: boxes itself, and each i64 or f32 field that is a scalar or of
 * shape [n] (neither ragged nor __key__ / __url__). */
int ef__json_boxes_holds(const ef__field *f, int64_t n);

/* The JSON of s, which has the detection form, as text[0, *len) in a new
 * allocation (*text, the caller's to free with ef__free). EF_EFORMAT for
 * a value JSON cannot hold (an f32 NaN or infinity), naming the field and
 * the value's place; EF_ENOMEM. */
int ef__json_boxes_write(const ef_sample *s, char **text, size_t *len,
                         ef__err *err);

/* Reads the document text[0, n), named `name` in messages, into new
 * fields of `out` (boxes and the per-box fields marked variable-length, as
 * the coco source gives them), after the fields it has. `floats` is a
 * comma-separated list of keys read as f32 ("" for none). EF_EFORMAT for
 * anything the header says is checked, with the byte offset, the key and
 * what was expected; EF_ESHAPE for a key that `out` already has as a
 * field; EF_ENOMEM. On failure `out` may hold some of the new fields. */
int ef__json_boxes_read(const char *text, size_t n, const char *name,
                        const char *floats, ef_sample *out, ef__err *err);

#endif
