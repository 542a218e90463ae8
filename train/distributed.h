/* SPDX-License-Identifier: Apache-2.0 */
/* Data-parallel training over an eft_comm (trainer.h): every process trains
 * a replica of the model on its own part of the data, and each step uses
 * the gradient of the mean loss over all the processes' examples, so the
 * replicas stay equal and the run follows one process that reads every
 * part's batch of the step as one batch. */
#ifndef EFT_DISTRIBUTED_H
#define EFT_DISTRIBUTED_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "trainer.h"

typedef struct {
    const eft_comm *comm;
    float *buf;     /* every gradient, then the loss: one collective */
    size_t nparams; /* floats of gradient in buf */
    double comm_s;  /* time spent in collectives */
} eft_dist;

/* Returns 0, or -1 with a message (out of memory). */
int eft_dist_init(eft_dist *d, const eft_comm *comm, eft_model *m, char *err,
                  size_t len);
void eft_dist_free(eft_dist *d);

/* Every process takes process 0's weights. */
int eft_dist_share_weights(eft_dist *d, eft_model *m, char *err, size_t len);

/* Every process takes process 0's momentum (a resumed run's). */
int eft_dist_share_momentum(eft_dist *d, eft_model *m, char *err, size_t len);

/* A collective over every process's `failed`: *first becomes the lowest
 * rank that failed, or -1 when none did. */
int eft_dist_first_failed(eft_dist *d, int failed, int *first, char *err,
                          size_t len);

/* Sums v[0..n) across processes. */
int eft_dist_sum(eft_dist *d, double *v, size_t n, char *err, size_t len);

/* After this process's backward pass over n examples (n = 0: it had none,
 * its gradients do not count), makes every process's gradients those of
 * the mean loss over the step's `total` examples, and *loss that mean. */
int eft_dist_average(eft_dist *d, eft_model *m, int n, double local_loss,
                     double total, double *loss, char *err, size_t len);

/* Mean loss and accuracy over the whole of `test`, each process evaluating
 * its slice. */
int eft_dist_evaluate(eft_dist *d, eft_model *m, const float *x,
                      const int64_t *y, int n, double *loss, double *accuracy,
                      char *err, size_t len);

/* *same = 1 when every process holds the same weights, bit for bit. */
int eft_dist_in_sync(eft_dist *d, eft_model *m, int *same, char *err,
                     size_t len);

#endif
