/* SPDX-License-Identifier: Apache-2.0 */
/* Bilinear resampling with half-pixel centres, as PyTorch's
 * interpolate(mode="bilinear", align_corners=False, antialias=False) and
 * torchvision's resize without antialiasing: output pixel o samples input
 * coordinate (o + 0.5) * in / out - 0.5, clamped at the edges. Shrinking
 * by much more than 2 aliases, as it does there. */
#ifndef EF_STAGES_IMAGE_BILINEAR_H
#define EF_STAGES_IMAGE_BILINEAR_H

#include <stdint.h>

#include "echoflow/echoflow.h"

/* Resamples the [ih, iw, c] window at `src`, whose rows are `stride`
 * pixels apart (stride >= iw), into [oh, ow, c] at `dst`. dtype is EF_U8
 * (results rounded to nearest, halves up) or EF_F32. All sizes >= 1.
 * EF_ENOMEM when the column tables cannot be allocated. */
int ef__bilinear(const void *src, ef_dtype dtype, int64_t stride, int64_t ih,
                 int64_t iw, int64_t c, void *dst, int64_t oh, int64_t ow);

/* How ef__bilinear_normalize writes its f32 output. */
typedef struct {
    /* each resampled value x (a u8 result rounded first, as ef__bilinear
     * rounds it) becomes x * a[k] + b[k] for channel k, as normalize
     * computes it (normalize_values.h); with per_channel 0, a[0] and b[0]
     * serve every channel */
    const float *a, *b;
    int per_channel;
    int mirror; /* flip horizontally: output column x is resampled column
                   ow - 1 - x */
    int chw;    /* the layout: [c, oh, ow] when set, else [oh, ow, c] */
} ef__bilinear_norm;

/* ef__bilinear, then mirrored, normalized and laid out as `how` says, in
 * one pass into the f32 `dst`. The result equals the separate steps to
 * the bit. EF_ENOMEM when its tables cannot be allocated. */
int ef__bilinear_normalize(const void *src, ef_dtype dtype, int64_t stride,
                           int64_t ih, int64_t iw, int64_t c,
                           const ef__bilinear_norm *how, float *dst, int64_t oh,
                           int64_t ow);

#endif
