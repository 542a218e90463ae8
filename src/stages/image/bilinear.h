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

#endif
