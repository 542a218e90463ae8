/* SPDX-License-Identifier: Apache-2.0 */
/* The per-channel mean and std of the stages that normalize (normalize,
 * crop_mirror_normalize): their options, parsing them, checking them
 * against an image's channels, and the multiply-add they come to. One
 * place, so that both stages accept the same text, say the same thing
 * when it is wrong, and compute bit-identical values. */
#ifndef EF_STAGES_IMAGE_NORMALIZE_VALUES_H
#define EF_STAGES_IMAGE_NORMALIZE_VALUES_H

#include "pipeline/stage.h"

#define EF__NORM_MAX_CHANNELS 16 /* values in a mean or std list */

typedef struct {
    int nmean, nstd; /* 1, or one per channel */
    double mean[EF__NORM_MAX_CHANNELS], std[EF__NORM_MAX_CHANNELS];
} ef__norm_values;

/* Options `mean` and `std` of `stage` (its name, for messages) into v:
 * EF_ESPEC with a message naming the option on a malformed list or a std
 * that is not > 0. */
int ef__norm_parse(const ef__opts *o, const char *stage, ef__norm_values *v,
                   ef__err *err);

/* Checks that v suits an image of c channels in field `field`: EF_ESHAPE
 * through ctx otherwise. */
int ef__norm_check(const ef__norm_values *v, int64_t c, const char *field,
                   ef_map_ctx *ctx);

/* Whether one mean and one std serve every channel (then the image may
 * be treated as one channel, whatever its count). */
static inline int ef__norm_uniform(const ef__norm_values *v)
{
    return v->nmean == 1 && v->nstd == 1;
}

/* (x * scale - mean) / std as x * a[k] + b[k] for channel k < c, where
 * scale is 1/255 for u8 and 1 for f32; c <= EF__NORM_MAX_CHANNELS, and
 * c = 1 when ef__norm_uniform(v). */
void ef__norm_coeffs(const ef__norm_values *v, int64_t c, ef_dtype dtype,
                     float *a, float *b);

/* The option rows, in every normalizing stage's table. */
#define EF__NORM_MEAN_OPTION                                                   \
    EF__OPT("mean", EF_OPT_STRING, "0",                                        \
            "one value, or one per channel: \"0.485,0.456,0.406\"", 0, 0)
#define EF__NORM_STD_OPTION                                                    \
    EF__OPT("std", EF_OPT_STRING, "1", "one value > 0, or one per channel", 0, \
            0)

#endif
