/* SPDX-License-Identifier: Apache-2.0 */
/* Data-parallel training steps (see distributed.h). */
#include "distributed.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int eft_dist_init(eft_dist *d, const eft_comm *comm, eft_model *m, char *err,
                  size_t len)
{
    memset(d, 0, sizeof *d);
    d->comm = comm;
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        d->nparams += n;
    }
    d->buf = malloc((d->nparams + 1) * sizeof(float));
    if (!d->buf) {
        snprintf(err, len, "train: out of memory for %zu gradients",
                 d->nparams);
        return -1;
    }
    return 0;
}

void eft_dist_free(eft_dist *d)
{
    free(d->buf);
    d->buf = NULL;
}

int eft_dist_share_weights(eft_dist *d, eft_model *m, char *err, size_t len)
{
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        if (d->comm->broadcast(d->comm->user, v, n, err, len))
            return -1;
    }
    return 0;
}

int eft_dist_share_momentum(eft_dist *d, eft_model *m, char *err, size_t len)
{
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        if (d->comm->broadcast(d->comm->user, eft_model_momentum(m, i), n, err,
                               len))
            return -1;
    }
    return 0;
}

int eft_dist_first_failed(eft_dist *d, int failed, int *first, char *err,
                          size_t len)
{
    const eft_comm *c = d->comm;
    /* one slot a process: the sum says which failed, not only how many */
    double *flags = calloc((size_t)c->size, sizeof *flags);
    if (!flags) {
        snprintf(err, len, "train: out of memory for %d flags", c->size);
        return -1;
    }
    flags[c->rank] = failed != 0;
    int rc = c->sum_doubles(c->user, flags, (size_t)c->size, err, len);
    *first = -1;
    for (int r = 0; rc == 0 && r < c->size && *first < 0; r++)
        if (flags[r] > 0)
            *first = r;
    free(flags);
    return rc;
}

int eft_dist_sum(eft_dist *d, double *v, size_t n, char *err, size_t len)
{
    double t = now_s();
    int rc = d->comm->sum_doubles(d->comm->user, v, n, err, len);
    d->comm_s += now_s() - t;
    return rc;
}

int eft_dist_average(eft_dist *d, eft_model *m, int n, double local_loss,
                     double total, double *loss, char *err, size_t len)
{
    /* each process's gradient is of its mean loss: weighted by its n, the
       sum over processes is the gradient of the summed loss */
    float *at = d->buf;
    int count = eft_model_param_count(m);
    for (int i = 0; i < count; i++) {
        float *v, *g;
        size_t k;
        eft_model_param(m, i, &v, &g, &k);
        for (size_t j = 0; j < k; j++)
            at[j] = n ? g[j] * (float)n : 0.0f;
        at += k;
    }
    *at = (float)(local_loss * n);
    double t = now_s();
    int rc = d->comm->sum_floats(d->comm->user, d->buf, d->nparams + 1, err,
                                 len);
    d->comm_s += now_s() - t;
    if (rc)
        return -1;
    const float scale = (float)(1.0 / total);
    at = d->buf;
    for (int i = 0; i < count; i++) {
        float *v, *g;
        size_t k;
        eft_model_param(m, i, &v, &g, &k);
        for (size_t j = 0; j < k; j++)
            g[j] = at[j] * scale;
        at += k;
    }
    *loss = (double)*at / total;
    return 0;
}

int eft_dist_evaluate(eft_dist *d, eft_model *m, const float *x,
                      const int64_t *y, int n, double *loss, double *accuracy,
                      char *err, size_t len)
{
    const eft_comm *c = d->comm;
    long lo = (long)n * c->rank / c->size;
    long hi = (long)n * (c->rank + 1) / c->size;
    size_t in = eft_layer_in_size(&m->reps[0].layers[0]);
    double part_loss = 0, part_acc = 0;
    if (hi > lo)
        eft_model_evaluate(m, x + (size_t)lo * in, y + lo, (int)(hi - lo),
                           &part_loss, &part_acc);
    /* back to sums, which add up across processes */
    double sums[2] = {part_loss * (double)(hi - lo),
                      part_acc * (double)(hi - lo)};
    if (c->sum_doubles(c->user, sums, 2, err, len))
        return -1;
    *loss = sums[0] / n;
    *accuracy = sums[1] / n;
    return 0;
}

/* FNV-1a over the bytes of every parameter. */
static uint64_t weights_hash(eft_model *m)
{
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        const unsigned char *b = (const unsigned char *)v;
        for (size_t j = 0; j < n * sizeof(float); j++)
            h = (h ^ b[j]) * 1099511628211u;
    }
    return h;
}

int eft_dist_in_sync(eft_dist *d, eft_model *m, int *same, char *err,
                     size_t len)
{
    return d->comm->agree(d->comm->user, weights_hash(m), same, err, len);
}
