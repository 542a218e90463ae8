/* The window of torchvision's RandomResizedCrop, drawn from a stage's
 * keyed generator: shared by random_resized_crop and the stages that crop
 * the same way while doing more (decoding, normalizing). */
#ifndef EF_STAGES_IMAGE_CROP_WINDOW_H
#define EF_STAGES_IMAGE_CROP_WINDOW_H

#include <stdint.h>

#include "echoflow/echoflow.h"

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

#endif
