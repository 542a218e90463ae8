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

/* One image's resampling: the taps, and the scratch the horizontal
 * passes need. */
typedef struct {
    const void *src;
    ef_dtype dtype;
    int64_t stride, iw, c, oh, ow;
    tap *ty, *tx;
    float *wide;    /* a u8 row as float, iw * c values */
    float *rows[2]; /* resampled rows, ow * c values each */
    int64_t held[2];
    float *line; /* one output row, for ef__bilinear_normalize */
} resampler;

static int resampler_init(resampler *rs, const void *src, ef_dtype dtype,
                          int64_t stride, int64_t ih, int64_t iw, int64_t c,
                          int64_t oh, int64_t ow)
{
    /* two resampled rows, a widened one and an output line, each padded
     * by a value for the vector loop in row_u8 */
    size_t n = (size_t)(ow * c), wide_n = (size_t)(iw * c);
    tap *ty = ef__malloc((size_t)(oh + ow) * sizeof *ty +
                         (3 * (n + 1) + wide_n + 1) * sizeof(float));
    if (!ty)
        return EF_ENOMEM;
    float *scratch = (float *)(ty + oh + ow);
    *rs = (resampler){
        .src = src,
        .dtype = dtype,
        .stride = stride,
        .iw = iw,
        .c = c,
        .oh = oh,
        .ow = ow,
        .ty = ty,
        .tx = ty + oh,
        .wide = scratch,
        .rows = {scratch + wide_n + 1, scratch + wide_n + 1 + n + 1},
        .held = {-1, -1},
        .line = scratch + wide_n + 1 + 2 * (n + 1)};
    rs->wide[wide_n] = 0; /* the padding lane 3 may read */
    make_taps(rs->ty, oh, ih);
    make_taps(rs->tx, ow, iw);
    return EF_OK;
}

/* Source row r resampled horizontally. A row's two taps are r and r + 1
 * (or r alone at the bottom edge), of different parity: slot r % 2 keeps
 * row r until another row of its parity is needed. */
static const float *row_at(resampler *rs, int64_t r)
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

/* Output row y: the vertical blend of its two resampled rows, into u8
 * `d8` (rounded) or f32 `d32`, whichever is given. top + wy * (bot - top)
 * lies between them up to a rounding error far below 0.5, so for u8
 * v + 0.5 is in (0, 256) and truncates to the nearest. */
static void output_row(resampler *rs, int64_t y, unsigned char *d8, float *d32)
{
    const float *top = row_at(rs, rs->ty[y].i0),
                *bot = row_at(rs, rs->ty[y].i1);
    float wy = rs->ty[y].t;
    size_t n = (size_t)(rs->ow * rs->c);
    if (d8)
        for (size_t i = 0; i < n; i++)
            d8[i] =
                (unsigned char)(int)(top[i] + wy * (bot[i] - top[i]) + 0.5f);
    else
        for (size_t i = 0; i < n; i++)
            d32[i] = top[i] + wy * (bot[i] - top[i]);
}

int ef__bilinear(const void *src, ef_dtype dtype, int64_t stride, int64_t ih,
                 int64_t iw, int64_t c, void *dst, int64_t oh, int64_t ow)
{
    resampler rs;
    if (resampler_init(&rs, src, dtype, stride, ih, iw, c, oh, ow) != EF_OK)
        return EF_ENOMEM;
    size_t n = (size_t)(ow * c);
    for (int64_t y = 0; y < oh; y++) {
        if (dtype == EF_U8)
            output_row(&rs, y, (unsigned char *)dst + (size_t)y * n, NULL);
        else
            output_row(&rs, y, NULL, (float *)dst + (size_t)y * n);
    }
    ef__free(rs.ty);
    return EF_OK;
}

/* ---- resampled and normalized in one pass ------------------------- */

int ef__bilinear_normalize(const void *src, ef_dtype dtype, int64_t stride,
                           int64_t ih, int64_t iw, int64_t c,
                           const ef__bilinear_norm *how, float *dst, int64_t oh,
                           int64_t ow)
{
    resampler rs;
    if (resampler_init(&rs, src, dtype, stride, ih, iw, c, oh, ow) != EF_OK)
        return EF_ENOMEM;
    /* output (y, x, k) at y * ystep + x * xstep + k * kstep; a mirrored
     * row reads resampled column ow - 1 - x */
    int64_t ystep = how->chw ? ow : ow * c, xstep = how->chw ? 1 : c;
    int64_t kstep = how->chw ? oh * ow : 1;
    unsigned char *line8 = dtype == EF_U8 ? (unsigned char *)rs.line : NULL;
    for (int64_t y = 0; y < oh; y++) {
        output_row(&rs, y, line8, line8 ? NULL : rs.line);
        for (int64_t k = 0; k < c; k++) {
            /* normalize's arithmetic, on the value ef__bilinear stores */
            float a = how->a[how->per_channel ? k : 0],
                  b = how->b[how->per_channel ? k : 0];
            float *d = dst + y * ystep + k * kstep;
            int64_t from = how->mirror ? (ow - 1) * c + k : k,
                    step = how->mirror ? -c : c;
            if (line8)
                for (int64_t x = 0; x < ow; x++)
                    d[x * xstep] = (float)line8[from + x * step] * a + b;
            else
                for (int64_t x = 0; x < ow; x++)
                    d[x * xstep] = rs.line[from + x * step] * a + b;
        }
    }
    ef__free(rs.ty);
    return EF_OK;
}
