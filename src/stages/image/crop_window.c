/* SPDX-License-Identifier: Apache-2.0 */
/* The window of a random resized crop, drawn as torchvision's
 * RandomResizedCrop.get_params draws it (see crop_window.h). */
#include <math.h>

#include "stages/image/crop_window.h"

/* Python's round(): halves to even (what torchvision's crop sizes use). */
static int64_t round_even(double x)
{
    return (int64_t)nearbyint(x);
}

/* An integer in [0, n), n >= 1, from the keyed stream. */
static int64_t below(ef_map_ctx *ctx, int64_t n)
{
    int64_t k = (int64_t)(ef_map_ctx_uniform(ctx) * (double)n);
    return k < n ? k : n - 1; /* u * n may round up to n */
}

void ef__rrc_window(const ef__rrc_ranges *p, int64_t h, int64_t w,
                    ef_map_ctx *ctx, int64_t crop[4])
{
    double area = (double)h * (double)w;
    double lr0 = log(p->ratio_min), lr1 = log(p->ratio_max);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (p->scale_min + (p->scale_max - p->scale_min) *
                                                   ef_map_ctx_uniform(ctx));
        double ratio = exp(lr0 + (lr1 - lr0) * ef_map_ctx_uniform(ctx));
        int64_t cw = round_even(sqrt(target * ratio));
        int64_t ch = round_even(sqrt(target / ratio));
        if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
            crop[0] = below(ctx, h - ch + 1);
            crop[1] = below(ctx, w - cw + 1);
            crop[2] = ch;
            crop[3] = cw;
            return;
        }
    }
    double in_ratio = (double)w / (double)h;
    int64_t ch = h, cw = w;
    if (in_ratio < p->ratio_min)
        ch = round_even((double)w / p->ratio_min);
    else if (in_ratio > p->ratio_max)
        cw = round_even((double)h * p->ratio_max);
    /* a very thin image can round to nothing: keep a pixel */
    ch = ch < 1 ? 1 : ch > h ? h : ch;
    cw = cw < 1 ? 1 : cw > w ? w : cw;
    crop[0] = (h - ch) / 2;
    crop[1] = (w - cw) / 2;
    crop[2] = ch;
    crop[3] = cw;
}

int ef__rrc_ranges_parse(const ef__opts *o, const char *stage,
                         ef__rrc_ranges *r, ef__err *err)
{
    *r = (ef__rrc_ranges){
        ef__opt_float(o, "scale_min"), ef__opt_float(o, "scale_max"),
        ef__opt_float(o, "ratio_min"), ef__opt_float(o, "ratio_max")};
    if (r->scale_min > r->scale_max || r->ratio_min > r->ratio_max)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': ranges must not be reversed (got "
                           "scale %g to %g, ratio %g to %g)",
                           stage, r->scale_min, r->scale_max, r->ratio_min,
                           r->ratio_max);
    return EF_OK;
}
