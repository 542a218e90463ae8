/* Bilinear resampling (see bilinear.h). The source coordinates and
 * weights of every output column and row are computed once per image. */
#include "stages/image/bilinear.h"
#include "core/alloc.h"

typedef struct {
    int64_t i0, i1; /* the two source pixels */
    float t;        /* weight of i1 */
} tap;

static void make_taps(tap *taps, int64_t out, int64_t in)
{
    double scale = (double)in / (double)out;
    for (int64_t o = 0; o < out; o++) {
        double s = ((double)o + 0.5) * scale - 0.5;
        if (s < 0) /* the first half pixel of an enlargement */
            s = 0;
        int64_t i0 = (int64_t)s;
        if (i0 > in - 1)
            i0 = in - 1;
        taps[o].i0 = i0;
        taps[o].i1 = i0 < in - 1 ? i0 + 1 : i0;
        taps[o].t = (float)(s - (double)i0);
    }
}

/* p0 + t * (p1 - p0) lies between p0 and p1 up to a rounding error far
 * below 0.5, so v + 0.5 is in (0, 256) and truncates to the nearest u8 */
static void resample_u8(const unsigned char *src, int64_t stride, int64_t c,
                        unsigned char *dst, int64_t oh, int64_t ow,
                        const tap *ty, const tap *tx)
{
    for (int64_t y = 0; y < oh; y++) {
        const unsigned char *r0 = src + ty[y].i0 * stride * c;
        const unsigned char *r1 = src + ty[y].i1 * stride * c;
        float wy = ty[y].t;
        for (int64_t x = 0; x < ow; x++) {
            int64_t a = tx[x].i0 * c, b = tx[x].i1 * c;
            float wx = tx[x].t;
            for (int64_t k = 0; k < c; k++) {
                float top = r0[a + k] + wx * (float)(r0[b + k] - r0[a + k]);
                float bot = r1[a + k] + wx * (float)(r1[b + k] - r1[a + k]);
                *dst++ = (unsigned char)(top + wy * (bot - top) + 0.5f);
            }
        }
    }
}

static void resample_f32(const float *src, int64_t stride, int64_t c,
                         float *dst, int64_t oh, int64_t ow, const tap *ty,
                         const tap *tx)
{
    for (int64_t y = 0; y < oh; y++) {
        const float *r0 = src + ty[y].i0 * stride * c;
        const float *r1 = src + ty[y].i1 * stride * c;
        float wy = ty[y].t;
        for (int64_t x = 0; x < ow; x++) {
            int64_t a = tx[x].i0 * c, b = tx[x].i1 * c;
            float wx = tx[x].t;
            for (int64_t k = 0; k < c; k++) {
                float top = r0[a + k] + wx * (r0[b + k] - r0[a + k]);
                float bot = r1[a + k] + wx * (r1[b + k] - r1[a + k]);
                *dst++ = top + wy * (bot - top);
            }
        }
    }
}

int ef__bilinear(const void *src, ef_dtype dtype, int64_t stride, int64_t ih,
                 int64_t iw, int64_t c, void *dst, int64_t oh, int64_t ow)
{
    tap *ty = ef__malloc((size_t)(oh + ow) * sizeof *ty);
    if (!ty)
        return EF_ENOMEM;
    tap *tx = ty + oh;
    make_taps(ty, oh, ih);
    make_taps(tx, ow, iw);
    if (dtype == EF_U8)
        resample_u8(src, stride, c, dst, oh, ow, ty, tx);
    else
        resample_f32(src, stride, c, dst, oh, ow, ty, tx);
    ef__free(ty);
    return EF_OK;
}
