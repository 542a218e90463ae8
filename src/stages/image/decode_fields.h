/* SPDX-License-Identifier: Apache-2.0 */
/* What the decoding stages (decode, decode_crop) share: their options
 * `channels`, `as` and `fields`, finding the encoded image and the `cls`
 * label in a WebDataset-style sample, and the output sample, with the
 * decoded image and the label in place of their sources and every other
 * field passed through, sharing its payload. */
#ifndef EF_STAGES_IMAGE_DECODE_FIELDS_H
#define EF_STAGES_IMAGE_DECODE_FIELDS_H

#include <stddef.h>
#include <stdint.h>

#include "codec/image.h"
#include "core/sample.h"
#include "pipeline/map.h"
#include "pipeline/stage.h"

#define EF__DECODE_MAX_FIELDS 16

/* The options every decoding stage has. */
typedef struct {
    char as[EF_MAX_NAME]; /* name of the decoded image */
    int channels;         /* 0 (as stored), 1 or 3 */
    int nfields;
    char fields[EF__DECODE_MAX_FIELDS][EF_MAX_NAME]; /* may hold the image */
    /* the pipeline's: an image whose pixels can never fit it is refused
     * from its header, before they are allocated (set by the stage) */
    const ef__budget *budget;
    int windowed; /* a JPEG is decoded only as far as its window */
} ef__decode_fields;

/* Checks options channels, as and fields of stage `stage` (its name, for
 * messages) into *p. EF_ESPEC naming the option on bad values. */
int ef__decode_fields_parse(const ef__opts *o, const char *stage,
                            ef__decode_fields *p, ef__err *err);

/* One sample's encoded image and label, found by ef__decode_plan. */
typedef struct {
    int img, cls;     /* field indices; cls -1 when there is none */
    int64_t label;    /* cls parsed, when there is one */
    const void *data; /* the encoded image, borrowed from the sample */
    size_t size;
    char what[EF_MAX_NAME + 16]; /* "field 'jpg'", for the codec */
} ef__decode_plan;

/* Finds the image field (exactly one of p->fields) and `cls` in `in`,
 * checks both are bytes (u8 [N]) and that no output name is taken twice,
 * parses the label, and reads the image's header: pixels larger than the
 * whole budget are EF_ENOMEM now, not after a header's claim of up to
 * 2^28 pixels was allocated. Errors go through ctx. */
int ef__decode_plan_sample(const ef_sample *in, const ef__decode_fields *p,
                           ef__decode_plan *plan, ef_map_ctx *ctx);

/* The decoded image of an output sample: `ndim` dims of `dtype` at
 * `offset` in `buf` (borrowed: the sample takes its own reference). */
typedef struct {
    ef_buffer *buf;
    size_t offset;
    ef_dtype dtype;
    int ndim;
    int64_t shape[3];
} ef__decoded;

/* The output sample: `in`'s fields in order, the image field replaced by
 * `img` named p->as, cls by the i64 scalar `label`. The caller owns
 * *out. */
int ef__decode_output(const ef_sample *in, const ef__decode_fields *p,
                      const ef__decode_plan *plan, const ef__decoded *img,
                      ef_sample **out, ef_map_ctx *ctx);

/* The option rows of ef__decode_fields. */
/* clang-format off */
#define EF__DECODE_FIELD_OPTIONS                                               \
    EF__OPT("channels", EF_OPT_INT, "0",                                       \
            "0: as stored (1 gray, 3 colour), 1: gray, 3: RGB; alpha is "      \
            "dropped", 0, 3),                                                  \
    EF__OPT("as", EF_OPT_STRING, "image",                                      \
            "name of the decoded image field", 0, 0),                          \
    EF__OPT("fields", EF_OPT_STRING, EF__IMAGE_EXTENSIONS,                     \
            "fields that may hold the image (quoted list; gif too when "       \
            "named); one per sample", 0, 0)
/* clang-format on */

#endif
