/* SPDX-License-Identifier: Apache-2.0 */
/* Layer forward and backward passes (see layers.h). The heavy work is three
 * GEMMs per dense or conv layer, done by BLAS. */
#include "layers.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

size_t eft_layer_in_size(const eft_layer *l)
{
    return (size_t)l->in_h * l->in_w * l->in_c;
}

size_t eft_layer_out_size(const eft_layer *l)
{
    return (size_t)l->out_h * l->out_w * l->out_c;
}

static float *falloc(size_t n)
{
    return calloc(n ? n : 1, sizeof(float));
}

/* Images per im2col block. The patch matrix of a whole batch (40 MB for
 * the cnn's second convolution at 64 images) does not stay in cache
 * between im2col writing it and the GEMM packing it; blocks of about 1 MB
 * do. */
#define CONV_BLOCK_FLOATS (1 << 18)

static int conv_chunk(const eft_layer *l)
{
    size_t per_image = (size_t)l->out_h * l->out_w * l->k * l->k * l->in_c;
    size_t n = CONV_BLOCK_FLOATS / per_image;
    return n ? (int)n : 1;
}

int eft_layer_alloc(eft_layer *l, int max_batch, const eft_layer *share)
{
    l->max_batch = max_batch;
    size_t nb = (size_t)max_batch;
    l->out = falloc(nb * eft_layer_out_size(l));
    if (!l->out)
        return -1;
    if (l->kind == EFT_DENSE || l->kind == EFT_CONV) {
        size_t fan_in = l->kind == EFT_DENSE ? eft_layer_in_size(l)
                                             : (size_t)l->k * l->k * l->in_c;
        l->nw = fan_in * (size_t)l->out_c;
        l->shares_wb = share != NULL;
        l->w = share ? share->w : falloc(l->nw);
        l->b = share ? share->b : falloc((size_t)l->out_c);
        l->dw = falloc(l->nw);
        l->db = falloc((size_t)l->out_c);
        if (!l->w || !l->dw || !l->b || !l->db)
            return -1;
        if (l->kind == EFT_CONV) {
            l->chunk = conv_chunk(l);
            if (l->chunk > max_batch)
                l->chunk = max_batch;
            l->col = falloc((size_t)l->chunk * l->out_h * l->out_w * fan_in);
            if (!l->col)
                return -1;
        }
    }
    if (l->kind == EFT_POOL) {
        l->argmax = calloc(nb * eft_layer_out_size(l), sizeof(int32_t));
        if (!l->argmax)
            return -1;
    }
    return 0;
}

void eft_layer_free(eft_layer *l)
{
    free(l->out);
    if (!l->shares_wb) {
        free(l->w);
        free(l->b);
    }
    free(l->dw);
    free(l->db);
    free(l->col);
    free(l->argmax);
    memset(l, 0, sizeof *l);
}

/* ---- convolution helpers: stride 1, same padding, NHWC ---------- */

/* col[(n*H + y)*W + x][(dy*k + dx)*C + c] = in[n][y+dy-p][x+dx-p][c]
 * For one (y, dy) the k*C values of a patch row are contiguous in the
 * input, so each is one copy clipped at the borders. */
static void im2col(const eft_layer *l, const float *in, float *col, int n)
{
    const int H = l->in_h, W = l->in_w, C = l->in_c, k = l->k, p = k / 2;
    const size_t row = (size_t)k * k * C;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                float *dst = col + (((size_t)i * H + y) * W + x) * row;
                int dx0 = p - x > 0 ? p - x : 0;         /* clipped */
                int dx1 = W - x + p < k ? W - x + p : k; /* left, right */
                for (int dy = 0; dy < k; dy++, dst += (size_t)k * C) {
                    int sy = y + dy - p;
                    if (sy < 0 || sy >= H) {
                        memset(dst, 0, sizeof(float) * (size_t)k * C);
                        continue;
                    }
                    const float *src =
                        in + (((size_t)i * H + sy) * W + (x + dx0 - p)) * C;
                    memset(dst, 0, sizeof(float) * (size_t)dx0 * C);
                    memcpy(dst + (size_t)dx0 * C, src,
                           sizeof(float) * (size_t)(dx1 - dx0) * C);
                    memset(dst + (size_t)dx1 * C, 0,
                           sizeof(float) * (size_t)(k - dx1) * C);
                }
            }
}

/* The adjoint of im2col: din gets the sum of every patch entry. */
static void col2im(const eft_layer *l, const float *col, float *din, int n)
{
    const int H = l->in_h, W = l->in_w, C = l->in_c, k = l->k, p = k / 2;
    const size_t row = (size_t)k * k * C;
    memset(din, 0, sizeof(float) * (size_t)n * H * W * C);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < H; y++)
            for (int x = 0; x < W; x++) {
                const float *src = col + (((size_t)i * H + y) * W + x) * row;
                int dx0 = p - x > 0 ? p - x : 0;
                int dx1 = W - x + p < k ? W - x + p : k;
                for (int dy = 0; dy < k; dy++, src += (size_t)k * C) {
                    int sy = y + dy - p;
                    if (sy < 0 || sy >= H)
                        continue;
                    float *d =
                        din + (((size_t)i * H + sy) * W + (x + dx0 - p)) * C;
                    const float *s = src + (size_t)dx0 * C;
                    size_t len = (size_t)(dx1 - dx0) * C;
                    for (size_t j = 0; j < len; j++)
                        d[j] += s[j];
                }
            }
}

/* ---- elementwise kernels ------------------------------------------- */

EFT_VECTOR
static void add_bias(float *restrict out, const float *restrict b, int rows,
                     int cols)
{
    for (int r = 0; r < rows; r++, out += cols)
        for (int c = 0; c < cols; c++)
            out[c] += b[c];
}

EFT_VECTOR
static void relu_forward(float *restrict out, const float *restrict in,
                         size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = in[i] > 0 ? in[i] : 0;
}

EFT_VECTOR
static void relu_backward(float *restrict din, const float *restrict out,
                          const float *restrict dout, size_t n)
{
    for (size_t i = 0; i < n; i++)
        din[i] = out[i] > 0 ? dout[i] : 0;
}

/* db[c] = sum over rows of d[r][c] */
EFT_VECTOR
static void column_sums(float *restrict db, const float *restrict d, int rows,
                        int cols)
{
    memset(db, 0, sizeof(float) * (size_t)cols);
    for (int r = 0; r < rows; r++, d += cols)
        for (int c = 0; c < cols; c++)
            db[c] += d[c];
}

/* ---- forward ------------------------------------------------------- */

/* out[rows, out_c] = a[rows, fan_in] x W + b */
static void affine(const eft_layer *l, const float *a, int rows, int fan_in)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, l->out_c,
                fan_in, 1.0f, a, fan_in, l->w, l->out_c, 0.0f, l->out,
                l->out_c);
    add_bias(l->out, l->b, rows, l->out_c);
}

/* Even sizes (all the models use): windows tile the input exactly, so
 * the maximum of four rows of C values is a vector loop, and backward finds
 * the winner again by comparing with the output (the first of equal values
 * wins) instead of keeping indices. */
EFT_VECTOR
static void max4(float *restrict o, const float *restrict a,
                 const float *restrict b, const float *restrict c,
                 const float *restrict d, int n)
{
    for (int k = 0; k < n; k++) {
        float ab = a[k] > b[k] ? a[k] : b[k];
        float cd = c[k] > d[k] ? c[k] : d[k];
        o[k] = ab > cd ? ab : cd;
    }
}

EFT_VECTOR
static void max4_backward(float *restrict da, float *restrict db,
                          float *restrict dc, float *restrict dd,
                          const float *restrict a, const float *restrict b,
                          const float *restrict c, const float *restrict o,
                          const float *restrict g, int n)
{
    for (int k = 0; k < n; k++) {
        int ia = a[k] == o[k];
        int ib = !ia && b[k] == o[k];
        int ic = !ia && !ib && c[k] == o[k];
        int id = !ia && !ib && !ic;
        da[k] = ia ? g[k] : 0;
        db[k] = ib ? g[k] : 0;
        dc[k] = ic ? g[k] : 0;
        dd[k] = id ? g[k] : 0;
    }
}

static int pool_is_even(const eft_layer *l)
{
    return l->in_h % 2 == 0 && l->in_w % 2 == 0;
}

/* The four input rows of window (i, y, x): pointers into `base`. */
#define POOL_WINDOW(base, i, y, x)                                             \
    float *w00 = (base) + (((size_t)(i)*H + 2 * (y)) * W + 2 * (x)) * C,       \
          *w01 = w00 + C, *w10 = w00 + (size_t)W * C, *w11 = w10 + C

static void pool_forward_even(eft_layer *l, const float *in, int n)
{
    const int H = l->in_h, W = l->in_w, C = l->in_c;
    const int OH = l->out_h, OW = l->out_w;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
                POOL_WINDOW((float *)in, i, y, x);
                max4(l->out + (((size_t)i * OH + y) * OW + x) * C, w00, w01,
                     w10, w11, C);
            }
}

static void pool_backward_even(const eft_layer *l, const float *dout,
                               float *din, int n)
{
    const int H = l->in_h, W = l->in_w, C = l->in_c;
    const int OH = l->out_h, OW = l->out_w;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++) {
                size_t o = (((size_t)i * OH + y) * OW + x) * C;
                POOL_WINDOW((float *)l->in, i, y, x);
                float *d00 = din + (w00 - l->in), *d01 = din + (w01 - l->in);
                float *d10 = din + (w10 - l->in), *d11 = din + (w11 - l->in);
                (void)w11;
                max4_backward(d00, d01, d10, d11, w00, w01, w10, l->out + o,
                              dout + o, C);
            }
}

static void pool_forward(eft_layer *l, const float *in, int n)
{
    if (pool_is_even(l)) {
        pool_forward_even(l, in, n);
        return;
    }
    const int H = l->in_h, W = l->in_w, C = l->in_c;
    const int OH = l->out_h, OW = l->out_w;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < OH; y++)
            for (int x = 0; x < OW; x++)
                for (int c = 0; c < C; c++) {
                    float best = -FLT_MAX;
                    int32_t at = 0;
                    for (int dy = 0; dy < 2; dy++)
                        for (int dx = 0; dx < 2; dx++) {
                            int sy = 2 * y + dy, sx = 2 * x + dx;
                            if (sy >= H || sx >= W)
                                continue;
                            int32_t idx =
                                (int32_t)(((size_t)i * H + sy) * W + sx) * C +
                                c;
                            if (in[idx] > best) {
                                best = in[idx];
                                at = idx;
                            }
                        }
                    size_t o = (((size_t)i * OH + y) * OW + x) * C + c;
                    l->out[o] = best;
                    l->argmax[o] = at;
                }
}

void eft_layer_forward(eft_layer *l, const float *in, int n)
{
    size_t out_n = (size_t)n * eft_layer_out_size(l);
    l->in = in;
    switch (l->kind) {
    case EFT_DENSE:
        affine(l, in, n, (int)eft_layer_in_size(l));
        break;
    case EFT_CONV: {
        const int hw = l->out_h * l->out_w, fan_in = l->k * l->k * l->in_c;
        const size_t in_size = eft_layer_in_size(l);
        for (int i = 0; i < n; i += l->chunk) {
            int m = n - i < l->chunk ? n - i : l->chunk;
            im2col(l, in + (size_t)i * in_size, l->col, m);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m * hw,
                        l->out_c, fan_in, 1.0f, l->col, fan_in, l->w, l->out_c,
                        0.0f, l->out + (size_t)i * hw * l->out_c, l->out_c);
        }
        add_bias(l->out, l->b, n * hw, l->out_c);
        break;
    }
    case EFT_RELU:
        relu_forward(l->out, in, out_n);
        break;
    case EFT_POOL:
        pool_forward(l, in, n);
        break;
    }
}

/* ---- backward ------------------------------------------------------ */

/* Gradients of out = a x W + b: dw = a^T dout, db = sum dout,
 * da = dout W^T (when wanted). */
static void affine_backward(eft_layer *l, const float *a, const float *dout,
                            float *da, int rows, int fan_in)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, fan_in, l->out_c, rows,
                1.0f, a, fan_in, dout, l->out_c, 0.0f, l->dw, l->out_c);
    column_sums(l->db, dout, rows, l->out_c);
    if (da)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, fan_in,
                    l->out_c, 1.0f, dout, l->out_c, l->w, l->out_c, 0.0f, da,
                    fan_in);
}

void eft_layer_backward(eft_layer *l, const float *dout, float *din, int n)
{
    size_t out_n = (size_t)n * eft_layer_out_size(l);
    switch (l->kind) {
    case EFT_DENSE:
        affine_backward(l, l->in, dout, din, n, (int)eft_layer_in_size(l));
        break;
    case EFT_CONV: {
        const int hw = l->out_h * l->out_w, fan_in = l->k * l->k * l->in_c;
        const size_t in_size = eft_layer_in_size(l);
        column_sums(l->db, dout, n * hw, l->out_c);
        /* block by block, last first: forward left the last block's
         * patches in col */
        int last = (n - 1) / l->chunk * l->chunk;
        for (int i = last; i >= 0; i -= l->chunk) {
            int m = n - i < l->chunk ? n - i : l->chunk;
            const float *d = dout + (size_t)i * hw * l->out_c;
            if (i != last)
                im2col(l, l->in + (size_t)i * in_size, l->col, m);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, fan_in,
                        l->out_c, m * hw, 1.0f, l->col, fan_in, d, l->out_c,
                        i == last ? 0.0f : 1.0f, l->dw, l->out_c);
            if (din) {
                /* the input gradient goes through col, which the weight
                 * gradient has used */
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m * hw,
                            fan_in, l->out_c, 1.0f, d, l->out_c, l->w, l->out_c,
                            0.0f, l->col, fan_in);
                col2im(l, l->col, din + (size_t)i * in_size, m);
            }
        }
        break;
    }
    case EFT_RELU:
        if (din)
            relu_backward(din, l->out, dout, out_n);
        break;
    case EFT_POOL:
        if (din && pool_is_even(l)) {
            pool_backward_even(l, dout, din, n);
        } else if (din) {
            memset(din, 0, sizeof(float) * (size_t)n * eft_layer_in_size(l));
            for (size_t i = 0; i < out_n; i++)
                din[l->argmax[i]] += dout[i];
        }
        break;
    }
}

double eft_softmax_xent(const float *logits, const int64_t *labels, int n,
                        int classes, float *dlogits, double norm, int *correct,
                        double *losses)
{
    double loss = 0;
    int hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *dz = dlogits ? dlogits + (size_t)i * classes : NULL;
        int best = 0;
        float zmax = z[0];
        for (int c = 1; c < classes; c++)
            if (z[c] > zmax) {
                zmax = z[c];
                best = c;
            }
        double sum = 0;
        for (int c = 0; c < classes; c++)
            sum += exp((double)(z[c] - zmax));
        int64_t y = labels[i];
        int valid = y >= 0 && y < classes;
        hits += valid && best == y;
        double li = valid ? log(sum) - (double)(z[y] - zmax) : 0;
        loss += li;
        if (losses)
            losses[i] = li;
        if (dz)
            for (int c = 0; c < classes; c++) {
                double p = exp((double)(z[c] - zmax)) / sum;
                dz[c] = valid ? (float)((p - (c == y)) / norm) : 0.0f;
            }
    }
    if (correct)
        *correct = hits;
    return loss;
}
