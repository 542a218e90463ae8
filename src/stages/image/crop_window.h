/* SPDX-License-Identifier: Apache-2.0 */
/* The window of torchvision's RandomResizedCrop, drawn from a stage's
 * keyed generator: shared by random_resized_crop and the stages that crop
 * the same way while doing more (decoding, normalizing). */
#ifndef EF_STAGES_IMAGE_CROP_WINDOW_H
#define EF_STAGES_IMAGE_CROP_WINDOW_H

#include <stdint.h>

#include "echoflow/echoflow.h"
#include "pipeline/stage.h"

/* The crop's area (a fraction of the image) and aspect ratio (width /
 * height) ranges. */
typedef struct {
    double scale_min, scale_max, ratio_min, ratio_max;
} ef__rrc_ranges;

/* Ten tries at an area and a log-uniform aspect ratio that fit an h x w
 * image, then the whole image cropped to the nearest allowed ratio,
 * centred. crop = {y0, x0, height, width}, inside the image. */
void ef__rrc_window(const ef__rrc_ranges *p, int64_t h, int64_t w,
                    ef_map_ctx *ctx, int64_t crop[4]);

/* Options scale_min, scale_max, ratio_min and ratio_max of `stage` (its
 * name, for messages) into r: EF_ESPEC when a range is reversed. */
int ef__rrc_ranges_parse(const ef__opts *o, const char *stage,
                         ef__rrc_ranges *r, ef__err *err);

/* The option rows of the ranges, in every such stage's table. */
/* clang-format off */
#define EF__RRC_RANGE_OPTIONS                                                  \
    EF__OPT("scale_min", EF_OPT_FLOAT, "0.08",                                 \
            "smallest crop area, as a fraction", 0, 1),                        \
    EF__OPT("scale_max", EF_OPT_FLOAT, "1",                                    \
            "largest crop area, as a fraction", 0, 1),                         \
    EF__OPT("ratio_min", EF_OPT_FLOAT, "0.75",                                 \
            "smallest aspect ratio (width/height)", 0.001, 1000),              \
    EF__OPT("ratio_max", EF_OPT_FLOAT, "1.3333333",                            \
            "largest aspect ratio (4/3)", 0.001, 1000)
/* clang-format on */

#endif
