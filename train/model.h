/* SPDX-License-Identifier: Apache-2.0 */
/* The reference trainer's models and optimiser.
 *
 * mlp: 784-256-256-10 with ReLU. cnn: conv5x5x32 - pool - conv5x5x64 - pool
 * - fc256 - fc10, same padding, ReLU after each hidden layer. Inputs are
 * 28x28x1 floats (NHWC), outputs 10 logits. Weights start He-normal
 * (std sqrt(2 / fan_in)), biases at zero.
 *
 * With threads > 1 a batch is split into shards, one per thread; each
 * thread runs a replica of the layers (its own activations and gradients,
 * the shared parameters) with single-threaded BLAS, and the gradients are
 * summed before the update. On few cores this beats threading inside each
 * GEMM, whose matrices are small. */
#ifndef EFT_MODEL_H
#define EFT_MODEL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "layers.h"

typedef enum { EFT_MLP = 0, EFT_CNN } eft_arch;

/* The inputs both models take: Fashion-MNIST's 28x28 gray images. */
#define EFT_INPUT_H 28
#define EFT_INPUT_W 28
#define EFT_INPUT_C 1

#define EFT_MAX_LAYERS 12
#define EFT_MAX_THREADS 16

/* One thread's copy of the layers and its share of the work. */
typedef struct {
    eft_layer layers[EFT_MAX_LAYERS];
    float *grad_a, *grad_b; /* ping-pong buffers for activation gradients */
    float *dlogits;
    /* the current job */
    const float *x;
    const int64_t *y;
    int n, backward;
    double *losses; /* each example's loss goes here; NULL: not wanted */
    double norm;    /* the whole batch's size: gradients are of its mean */
    double loss;    /* summed over the shard */
    int correct;
} eft_replica;

typedef struct {
    eft_arch arch;
    int nlayers, classes, max_batch, threads;
    eft_replica reps[EFT_MAX_THREADS]; /* reps[0] owns the parameters */
    float *vel[EFT_MAX_LAYERS][2];     /* momentum for w and b */
    /* the worker pool: reps[1..threads) run on workers */
    pthread_t workers[EFT_MAX_THREADS];
    struct eft_worker_arg {
        void *model;
        int r;
    } worker_args[EFT_MAX_THREADS];
    int started; /* workers running */
    pthread_mutex_t mu;
    pthread_cond_t start, done;
    uint64_t generation; /* bumped for each job */
    int pending, stop;
} eft_model;

/* SGD with (Nesterov) momentum and L2 weight decay, as PyTorch's SGD:
 * g = grad + wd * p; v = mu * v + g; p -= lr * (nesterov ? g + mu * v : v). */
typedef struct {
    double momentum, weight_decay;
    int nesterov;
} eft_sgd;

/* NULL when out of memory or threads is out of 1..EFT_MAX_THREADS. Free
 * with eft_model_destroy. */
eft_model *eft_model_create(eft_arch arch, int max_batch, int threads,
                            uint64_t seed);
void eft_model_destroy(eft_model *m);
/* "mlp" or "cnn" into *arch; -1 for anything else. */
int eft_arch_parse(const char *name, eft_arch *arch);
const char *eft_arch_name(eft_arch arch);
/* Floats per input example: its height x width x channels. */
size_t eft_model_input_size(const eft_model *m);

/* Forward (and, with labels and backward, backward) over n <= max_batch
 * inputs. Returns the mean loss; *correct (if not NULL) gets the hits.
 * After a backward pass the parameters' gradients hold the batch's. */
double eft_model_run(eft_model *m, const float *x, const int64_t *labels, int n,
                     int backward, int *correct);
/* eft_model_run, and each example's loss into losses[0..n) (NULL: as
 * eft_model_run): the loss of the same forward pass the gradients are
 * of, for feedback to the pipeline at no extra pass. Their sum over the
 * batch is n times the mean returned, up to rounding. */
double eft_model_run_each(eft_model *m, const float *x, const int64_t *labels,
                          int n, int backward, int *correct, double *losses);
void eft_model_sgd_step(eft_model *m, const eft_sgd *opt, double lr);
/* One training step on a batch; returns the loss. */
double eft_model_train_batch(eft_model *m, const float *x,
                             const int64_t *labels, int n, const eft_sgd *opt,
                             double lr, int *correct);
/* Mean loss and accuracy over n examples, in chunks of max_batch. */
void eft_model_evaluate(eft_model *m, const float *x, const int64_t *labels,
                        int n, double *loss, double *accuracy);

/* Parameter tensors, for gradient checks: 2 per dense or conv layer. */
int eft_model_param_count(const eft_model *m);
void eft_model_param(eft_model *m, int i, float **value, float **grad,
                     size_t *n);
/* Parameter i's momentum buffer: as many values as eft_model_param()
 * gives it; NULL for an i out of range. For checkpoints. */
float *eft_model_momentum(eft_model *m, int i);

/* Writes the weights to `path` (through a temporary file and a rename, so
 * the file is whole or absent): "EFTMODEL", then little-endian u32 format
 * version (1), architecture (0 mlp, 1 cnn) and tensor count, then for
 * each tensor of eft_model_param() a u64 element count and its f32
 * values. Returns 0, or -1 with a message in err. */
int eft_model_save(eft_model *m, const char *path, char *err, size_t len);

#endif
