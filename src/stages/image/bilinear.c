/* SPDX-License-Identifier: Apache-2.0 */
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

/* One image's resampling: the taps, and the scratch the horizontal
 * passes need. */
typedef struct {
    const void *src;
    ef_dtype dtype;
    int64_t stride, iw, c, oh, ow;
    tap *ty, *tx;
    int planar;     /* resampled rows as c planes of ow values */
    int mirror;     /* resampled rows with their columns reversed */
    float *wide;    /* a u8 row as float, iw * c values */
    float *rows[2]; /* resampled rows, ow * c values each */
    int64_t held[2];
} resampler;

static int resampler_init(resampler *rs, const void *src, ef_dtype dtype,
                          int64_t stride, int64_t ih, int64_t iw, int64_t c,
                          int64_t oh, int64_t ow)
{
    /* two resampled rows and a widened one, each padded by a value for
     * the 4-lane loops in hpass */
    size_t n = (size_t)(ow * c), wide_n = (size_t)(iw * c);
    tap *ty = ef__malloc((size_t)(oh + ow) * sizeof *ty +
                         (2 * (n + 1) + wide_n + 1) * sizeof(float));
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
        .held = {-1, -1}};
    rs->wide[wide_n] = 0; /* the padding lane 3 may read */
    make_taps(rs->ty, oh, ih);
    make_taps(rs->tx, ow, iw);
    return EF_OK;
}

/* One source row `in` (iw * c floats) resampled horizontally into `out`:
 * p0 + t * (p1 - p0) between each output column's two taps, pixel by
 * pixel (out[x*c+k]) or plane by plane (out[k*ow+x]), columns reversed
 * when mirrored. `padded`: `in` has a value past its end (the widened
 * row does), for the 4-lane loops; `out` always has one. */
static void hpass(const resampler *rs, const float *in, int padded, float *out)
{
    const tap *tx = rs->tx;
    int64_t c = rs->c, ow = rs->ow;
    if (c == 3 && padded) { /* the common case: a pixel as one vector */
        float *o0 = out, *o1 = out + ow, *o2 = out + 2 * ow;
        for (int64_t x = 0; x < ow; x++) {
            v4f p, q, t = {tx[x].t, tx[x].t, tx[x].t, tx[x].t};
            /* lane 3 reads the next pixel's first value (or the padding) */
            memcpy(&p, in + tx[x].i0 * 3, sizeof p);
            memcpy(&q, in + tx[x].i1 * 3, sizeof q);
            p = p + t * (q - p);
            if (!rs->planar && !rs->mirror) {
                /* lane 3 lands on the next pixel's first value (or the
                 * padding), written next */
                memcpy(out + x * 3, &p, sizeof p);
                continue;
            }
            int64_t to = rs->mirror ? ow - 1 - x : x;
            if (rs->planar) {
                o0[to] = p[0];
                o1[to] = p[1];
                o2[to] = p[2];
            } else {
                out[to * 3] = p[0];
                out[to * 3 + 1] = p[1];
                out[to * 3 + 2] = p[2];
            }
        }
        return;
    }
    for (int64_t x = 0; x < ow; x++) {
        const float *p = in + tx[x].i0 * c, *q = in + tx[x].i1 * c;
        float t = tx[x].t;
        int64_t to = rs->mirror ? ow - 1 - x : x;
        for (int64_t k = 0; k < c; k++)
            out[rs->planar ? k * ow + to : to * c + k] =
                p[k] + t * (q[k] - p[k]);
    }
}

/* Source row r resampled horizontally. A row's two taps are r and r + 1
 * (or r alone at the bottom edge), of different parity: slot r % 2 keeps
 * row r until another row of its parity is needed. */
static const float *row_at(resampler *rs, int64_t r)
{
    int slot = (int)(r & 1);
    if (rs->held[slot] != r) {
        size_t at = (size_t)(r * rs->stride * rs->c);
        if (rs->dtype == EF_U8) {
            /* widened to float first: exact, and one pass for both */
            const unsigned char *px = (const unsigned char *)rs->src + at;
            for (int64_t i = 0; i < rs->iw * rs->c; i++)
                rs->wide[i] = px[i];
            hpass(rs, rs->wide, 1, rs->rows[slot]);
        } else {
            hpass(rs, (const float *)rs->src + at, 0, rs->rows[slot]);
        }
        rs->held[slot] = r;
    }
    return rs->rows[slot];
}

/* The vertical blend of output row y, v = top + wy * (bot - top), over n
 * values starting at value `from` of its resampled rows, into d: v as is
 * (ab NULL), or v * ab[0] + ab[1] (normalize's arithmetic). `round`, with
 * ab: v is rounded to u8 first, as ef__bilinear stores a u8 result (see
 * blend_u8). */
static void blend(resampler *rs, int64_t y, int64_t from, int64_t n, int round,
                  const float *ab, float *d)
{
    const float *top = row_at(rs, rs->ty[y].i0) + from,
                *bot = row_at(rs, rs->ty[y].i1) + from;
    float wy = rs->ty[y].t;
    if (!ab) {
        for (int64_t i = 0; i < n; i++)
            d[i] = top[i] + wy * (bot[i] - top[i]);
        return;
    }
    float a = ab[0], b = ab[1];
    if (round)
        for (int64_t i = 0; i < n; i++)
            d[i] = (float)(int)(top[i] + wy * (bot[i] - top[i]) + 0.5f) * a + b;
    else
        for (int64_t i = 0; i < n; i++)
            d[i] = (top[i] + wy * (bot[i] - top[i])) * a + b;
}

/* The blend into u8, rounded: v lies between top and bot up to a
 * rounding error far below 0.5, so v + 0.5 is in (0, 256) and truncates
 * to the nearest. */
static void blend_u8(resampler *rs, int64_t y, unsigned char *d)
{
    const float *top = row_at(rs, rs->ty[y].i0),
                *bot = row_at(rs, rs->ty[y].i1);
    float wy = rs->ty[y].t;
    for (int64_t i = 0; i < rs->ow * rs->c; i++)
        d[i] = (unsigned char)(int)(top[i] + wy * (bot[i] - top[i]) + 0.5f);
}

int ef__bilinear(const void *src, ef_dtype dtype, int64_t stride, int64_t ih,
                 int64_t iw, int64_t c, void *dst, int64_t oh, int64_t ow)
{
    resampler rs;
    if (resampler_init(&rs, src, dtype, stride, ih, iw, c, oh, ow) != EF_OK)
        return EF_ENOMEM;
    int64_t n = ow * c;
    for (int64_t y = 0; y < oh; y++) {
        if (dtype == EF_U8)
            blend_u8(&rs, y, (unsigned char *)dst + y * n);
        else
            blend(&rs, y, 0, n, 0, NULL, (float *)dst + y * n);
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
    /* the resampled rows come mirrored, and in planes for [C,H,W]: each
     * output row of a plane is then one blend */
    rs.mirror = how->mirror;
    rs.planar = how->chw;
    int round = dtype == EF_U8;
    for (int64_t y = 0; y < oh; y++) {
        if (how->chw) {
            for (int64_t k = 0; k < c; k++) {
                int64_t j = how->per_channel ? k : 0;
                const float ab[2] = {how->a[j], how->b[j]};
                blend(&rs, y, k * ow, ow, round, ab, dst + (k * oh + y) * ow);
            }
        } else if (!how->per_channel) {
            const float ab[2] = {how->a[0], how->b[0]};
            blend(&rs, y, 0, ow * c, round, ab, dst + y * ow * c);
        } else {
            /* [H,W,C] with a pair per channel: pixel by pixel */
            float *d = dst + y * ow * c;
            for (int64_t x = 0; x < ow; x++)
                for (int64_t k = 0; k < c; k++) {
                    const float ab[2] = {how->a[k], how->b[k]};
                    blend(&rs, y, x * c + k, 1, round, ab, d + x * c + k);
                }
        }
    }
    ef__free(rs.ty);
    return EF_OK;
}
