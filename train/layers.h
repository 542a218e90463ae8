/* SPDX-License-Identifier: Apache-2.0 */
/* Layers of the reference trainer: dense, 2-D convolution (im2col + GEMM),
 * ReLU, 2x2 max-pooling, softmax cross-entropy. Activations are NHWC floats,
 * batch first; every layer keeps what its backward pass needs. */
#ifndef EFT_LAYERS_H
#define EFT_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* Elementwise loops run many times a step: on x86-64 they are also built
 * for AVX2 and the best version is chosen when the program starts (an
 * ifunc). Sanitizer builds leave that out: the choice runs before the
 * thread sanitizer's runtime is up. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(EFT_NO_CLONES)
#define EFT_VECTOR __attribute__((target_clones("avx2", "default")))
#else
#define EFT_VECTOR
#endif

typedef enum { EFT_DENSE, EFT_CONV, EFT_RELU, EFT_POOL } eft_layer_kind;

typedef struct {
    eft_layer_kind kind;
    int in_h, in_w, in_c;    /* input per example (dense: 1 x 1 x features) */
    int out_h, out_w, out_c; /* output per example */
    int k;                   /* conv: kernel size (odd; same padding) */
    int max_batch;
    /* parameters (dense, conv): W is [fan_in, out_c], fan_in = k*k*in_c */
    float *w, *b, *dw, *db;
    size_t nw;     /* elements of w */
    int shares_wb; /* w and b belong to another layer (a replica) */
    /* saved for backward */
    const float *in; /* the input of the last forward (borrowed) */
    float *out;      /* [batch, out] */
    float *col;      /* conv: im2col of a block of the input's images */
    int chunk;       /* conv: images per block */
    int32_t *argmax; /* pool: where each output came from */
} eft_layer;

/* Allocates a sized layer's buffers for batches of up to max_batch. With
 * `share` (a layer of the same shape), w and b are share's: replicas of a
 * model for data-parallel threads keep one set of parameters and their
 * own activations and gradients. Returns 0, or -1 when out of memory. */
int eft_layer_alloc(eft_layer *l, int max_batch, const eft_layer *share);
void eft_layer_free(eft_layer *l);
size_t eft_layer_in_size(const eft_layer *l);
size_t eft_layer_out_size(const eft_layer *l);

/* out = f(in) for `n` examples; `in` must stay valid until backward. */
void eft_layer_forward(eft_layer *l, const float *in, int n);
/* Accumulates nothing: overwrites dw/db with this batch's gradients and,
 * if din is not NULL, writes the gradient with respect to the input. */
void eft_layer_backward(eft_layer *l, const float *dout, float *din, int n);

/* Softmax cross-entropy of logits [n, classes] against labels, summed;
 * the gradient of the sum divided by `norm` (the whole batch when n is a
 * shard of it) goes to dlogits (may be NULL), and each example's loss to
 * losses[0..n) (may be NULL).
 * Labels out of range count as wrong, lose 0 and add no gradient. Returns
 * the sum of the losses; *correct gets the number of argmax hits. */
double eft_softmax_xent(const float *logits, const int64_t *labels, int n,
                        int classes, float *dlogits, double norm, int *correct,
                        double *losses);

#endif
