/* The reference trainer's models and optimiser.
 *
 * mlp: 784-256-256-10 with ReLU. cnn: conv5x5x32 - pool - conv5x5x64 - pool
 * - fc256 - fc10, same padding, ReLU after each hidden layer. Inputs are
 * 28x28x1 floats (NHWC), outputs 10 logits. Weights start He-normal
 * (std sqrt(2 / fan_in)), biases at zero. */
#ifndef EFT_MODEL_H
#define EFT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "layers.h"

typedef enum { EFT_MLP = 0, EFT_CNN } eft_arch;

#define EFT_MAX_LAYERS 12

typedef struct {
    eft_arch arch;
    int nlayers;
    eft_layer layers[EFT_MAX_LAYERS];
    int classes, max_batch;
    float *grad_a, *grad_b; /* ping-pong buffers for activation gradients */
    float *dlogits;
    float *vel[EFT_MAX_LAYERS][2]; /* momentum for w and b */
} eft_model;

/* SGD with (Nesterov) momentum and L2 weight decay, as PyTorch's SGD:
 * g = grad + wd * p; v = mu * v + g; p -= lr * (nesterov ? g + mu * v : v). */
typedef struct {
    double momentum, weight_decay;
    int nesterov;
} eft_sgd;

/* NULL when out of memory. Free with eft_model_destroy. */
eft_model *eft_model_create(eft_arch arch, int max_batch, uint64_t seed);
void eft_model_destroy(eft_model *m);
/* "mlp" or "cnn" into *arch; -1 for anything else. */
int eft_arch_parse(const char *name, eft_arch *arch);
const char *eft_arch_name(eft_arch arch);

/* Logits [n, classes] for n <= max_batch inputs; owned by the model. */
const float *eft_model_forward(eft_model *m, const float *x, int n);
/* Gradients of the mean cross-entropy of the last forward, into every
 * layer's dw and db. Returns the loss; *correct gets the hits. */
double eft_model_backward(eft_model *m, const int64_t *labels, int n,
                          int *correct);
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

#endif
