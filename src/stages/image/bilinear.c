/* Bilinear resampling (see bilinear.h). The source coordinates and
 * weights of every output column and row are computed once per image, and
 * each source row's horizontal pass once: an output row is then one
 * vertical blend of two such rows. The arithmetic per value is that of
 * the direct formula, so the results are the same to the bit. */
#include <string.h>

#include "core/alloc.h"
#include "stages/image/bilinear.h"

/* Four floats, one operation each: the same arithmetic lane by lane. */
typedef float v4f __attribute__((vector_size(16)));

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

/* One source row resampled horizontally: out[x*c+k] = p0 + t * (p1 - p0)
 * between the row's two taps. A row feeds every output row that samples
 * it, so each is computed once per image, not once per output row. u8
 * rows are widened to float first (`wide`, iw * c values and one of
 * padding; `out` has one too): exact, and it leaves the blend one loop
 * for both dtypes. */
static void row_u8(const unsigned char *r, int64_t iw, int64_t c, const tap *tx,
                   int64_t ow, float *wide, float *out)
{
    for (int64_t i = 0; i < iw * c; i++)
        wide[i] = r[i];
    if (c == 3) { /* the common case: a pixel as one 4-lane vector */
        for (int64_t x = 0; x < ow; x++) {
            v4f p, q, t = {tx[x].t, tx[x].t, tx[x].t, tx[x].t};
            /* lane 3 reads the next pixel's first value (or the padding)
             * and writes into the next output pixel, rewritten next */
            memcpy(&p, wide + tx[x].i0 * 3, sizeof p);
            memcpy(&q, wide + tx[x].i1 * 3, sizeof q);
            p = p + t * (q - p);
            memcpy(out + x * 3, &p, sizeof p);
        }
        return;
    }
    for (int64_t x = 0; x < ow; x++) {
        const float *p = wide + tx[x].i0 * c, *q = wide + tx[x].i1 * c;
        float t = tx[x].t;
        for (int64_t k = 0; k < c; k++)
            *out++ = p[k] + t * (q[k] - p[k]);
    }
}

static void row_f32(const float *r, int64_t c, const tap *tx, int64_t ow,
                    float *out)
{
    for (int64_t x = 0; x < ow; x++) {
        const float *p = r + tx[x].i0 * c, *q = r + tx[x].i1 * c;
        float t = tx[x].t;
        for (int64_t k = 0; k < c; k++)
            *out++ = p[k] + t * (q[k] - p[k]);
    }
}

/* What the horizontal passes of one image need. */
typedef struct {
    const void *src;
    ef_dtype dtype;
    int64_t stride, iw, c, ow;
    const tap *tx;
    float *wide;    /* a u8 row as float, iw * c values */
    float *rows[2]; /* resampled rows, ow * c values each */
    int64_t held[2];
} rows_state;

/* Source row r resampled horizontally. A row's two taps are r and r + 1
 * (or r alone at the bottom edge), of different parity: slot r % 2 keeps
 * row r until another row of its parity is needed. */
static const float *row_at(rows_state *rs, int64_t r)
{
    int slot = (int)(r & 1);
    if (rs->held[slot] != r) {
        size_t at = (size_t)(r * rs->stride * rs->c);
        if (rs->dtype == EF_U8)
            row_u8((const unsigned char *)rs->src + at, rs->iw, rs->c, rs->tx,
                   rs->ow, rs->wide, rs->rows[slot]);
        else
            row_f32((const float *)rs->src + at, rs->c, rs->tx, rs->ow,
                    rs->rows[slot]);
        rs->held[slot] = r;
    }
    return rs->rows[slot];
}

int ef__bilinear(const void *src, ef_dtype dtype, int64_t stride, int64_t ih,
                 int64_t iw, int64_t c, void *dst, int64_t oh, int64_t ow)
{
    /* scratch: two resampled rows and a widened one, each padded by a
     * value for the vector loop in row_u8 */
    size_t n = (size_t)(ow * c), wide_n = (size_t)(iw * c);
    tap *ty = ef__malloc((size_t)(oh + ow) * sizeof *ty +
                         (2 * (n + 1) + wide_n + 1) * sizeof(float));
    if (!ty)
        return EF_ENOMEM;
    tap *tx = ty + oh;
    float *scratch = (float *)(tx + ow);
    scratch[2 * (n + 1) + wide_n] = 0; /* the padding lane 3 may read */
    rows_state rs = {.src = src,
                     .dtype = dtype,
                     .stride = stride,
                     .iw = iw,
                     .c = c,
                     .ow = ow,
                     .tx = tx,
                     .wide = scratch + 2 * (n + 1),
                     .rows = {scratch, scratch + n + 1},
                     .held = {-1, -1}};
    make_taps(ty, oh, ih);
    make_taps(tx, ow, iw);
    for (int64_t y = 0; y < oh; y++) {
        const float *top = row_at(&rs, ty[y].i0), *bot = row_at(&rs, ty[y].i1);
        float wy = ty[y].t;
        /* top + wy * (bot - top) lies between them up to a rounding error
         * far below 0.5, so for u8 v + 0.5 is in (0, 256) and truncates to
         * the nearest */
        if (dtype == EF_U8) {
            unsigned char *d = (unsigned char *)dst + (size_t)y * n;
            for (size_t i = 0; i < n; i++)
                d[i] = (unsigned char)(int)(top[i] + wy * (bot[i] - top[i]) +
                                            0.5f);
        } else {
            float *d = (float *)dst + (size_t)y * n;
            for (size_t i = 0; i < n; i++)
                d[i] = top[i] + wy * (bot[i] - top[i]);
        }
    }
    ef__free(ty);
    return EF_OK;
}
