/* SPDX-License-Identifier: Apache-2.0 */
/* Models, data-parallel backpropagation and SGD (see model.h).
 *
 * Lock rules: `mu` guards generation, pending and stop. A job is published
 * by filling the replicas, then bumping generation under mu and
 * broadcasting `start`; each worker runs its replica and decrements
 * pending, the last one signalling `done`. The caller runs reps[0] itself
 * meanwhile, then waits for pending to reach zero. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomic_file.h" /* the library's own, src/common/ */

/* ---- building ------------------------------------------------------ */

static eft_layer *push(eft_model *m, eft_layer_kind kind)
{
    eft_layer *l = &m->reps[0].layers[m->nlayers];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    if (m->nlayers == 0) {
        l->in_h = EFT_INPUT_H;
        l->in_w = EFT_INPUT_W;
        l->in_c = EFT_INPUT_C;
    } else {
        const eft_layer *prev = &m->reps[0].layers[m->nlayers - 1];
        l->in_h = prev->out_h;
        l->in_w = prev->out_w;
        l->in_c = prev->out_c;
    }
    l->out_h = l->in_h;
    l->out_w = l->in_w;
    l->out_c = l->in_c;
    m->nlayers++;
    return l;
}

static void dense(eft_model *m, int out)
{
    eft_layer *l = push(m, EFT_DENSE);
    l->in_c = l->in_h * l->in_w * l->in_c; /* flatten (NHWC order) */
    l->in_h = l->in_w = 1;
    l->out_h = l->out_w = 1;
    l->out_c = out;
}

static void conv(eft_model *m, int k, int out)
{
    eft_layer *l = push(m, EFT_CONV);
    l->k = k;
    l->out_c = out;
}

static void relu(eft_model *m)
{
    push(m, EFT_RELU);
}

static void pool(eft_model *m)
{
    eft_layer *l = push(m, EFT_POOL);
    l->out_h = (l->in_h + 1) / 2;
    l->out_w = (l->in_w + 1) / 2;
}

/* Standard normal draws from a seeded SplitMix64 and Box-Muller. */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double normal(uint64_t *s)
{
    double u1 = ((double)(splitmix(s) >> 11) + 0.5) * 0x1.0p-53;
    double u2 = (double)(splitmix(s) >> 11) * 0x1.0p-53;
    return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

static void he_init(eft_model *m, uint64_t seed)
{
    uint64_t s = seed * 0x2545f4914f6cdd1dull + 1;
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer *l = &m->reps[0].layers[i];
        if (!l->w)
            continue;
        double std = sqrt(2.0 / (double)(l->nw / (size_t)l->out_c));
        for (size_t j = 0; j < l->nw; j++)
            l->w[j] = (float)(std * normal(&s));
    }
}

/* Allocates replica r's buffers; its layers' shapes are copied from
 * reps[0], its parameters shared with it. */
static int replica_alloc(eft_model *m, int r, int shard)
{
    eft_replica *rep = &m->reps[r];
    size_t widest = 0;
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer *l = &rep->layers[i];
        const eft_layer *master = &m->reps[0].layers[i];
        if (r > 0) {
            *l = *master;
            l->w = l->b = l->dw = l->db = l->out = l->col = NULL;
            l->argmax = NULL;
        }
        if (eft_layer_alloc(l, shard, r > 0 ? master : NULL) != 0)
            return -1;
        if (eft_layer_in_size(l) > widest)
            widest = eft_layer_in_size(l);
    }
    size_t n = (size_t)shard * widest;
    rep->grad_a = calloc(n, sizeof(float));
    rep->grad_b = calloc(n, sizeof(float));
    rep->dlogits = calloc((size_t)shard * m->classes, sizeof(float));
    return rep->grad_a && rep->grad_b && rep->dlogits ? 0 : -1;
}

/* Forward, and backward when asked, over the replica's shard. */
static void run_replica(eft_model *m, eft_replica *rep)
{
    const float *a = rep->x;
    rep->loss = 0;
    rep->correct = 0;
    if (rep->n == 0)
        return;
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer_forward(&rep->layers[i], a, rep->n);
        a = rep->layers[i].out;
    }
    rep->loss = eft_softmax_xent(a, rep->y, rep->n, m->classes,
                                 rep->backward ? rep->dlogits : NULL, rep->norm,
                                 &rep->correct, rep->losses);
    if (!rep->backward)
        return;
    const float *dout = rep->dlogits;
    float *bufs[2] = {rep->grad_a, rep->grad_b};
    for (int i = m->nlayers - 1; i >= 0; i--) {
        float *din = i > 0 ? bufs[i % 2] : NULL; /* no gradient for x */
        eft_layer_backward(&rep->layers[i], dout, din, rep->n);
        dout = din;
    }
}

static void *worker_loop(void *arg)
{
    struct eft_worker_arg *wa = arg;
    eft_model *m = wa->model;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&m->mu);
        while (m->generation == seen && !m->stop)
            pthread_cond_wait(&m->start, &m->mu);
        if (m->stop) {
            pthread_mutex_unlock(&m->mu);
            return NULL;
        }
        seen = m->generation;
        pthread_mutex_unlock(&m->mu);
        run_replica(m, &m->reps[wa->r]);
        pthread_mutex_lock(&m->mu);
        if (--m->pending == 0)
            pthread_cond_signal(&m->done);
        pthread_mutex_unlock(&m->mu);
    }
}

size_t eft_model_input_size(const eft_model *m)
{
    const eft_layer *first = &m->reps[0].layers[0];
    return (size_t)first->in_h * (size_t)first->in_w * (size_t)first->in_c;
}

eft_model *eft_model_create(eft_arch arch, int max_batch, int threads,
                            uint64_t seed)
{
    if (threads < 1 || threads > EFT_MAX_THREADS || max_batch < 1)
        return NULL;
    eft_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->arch = arch;
    m->classes = 10;
    m->max_batch = max_batch;
    m->threads = threads;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->start, NULL);
    pthread_cond_init(&m->done, NULL);
    if (arch == EFT_MLP) {
        dense(m, 256);
        relu(m);
        dense(m, 256);
        relu(m);
        dense(m, 10);
    } else {
        conv(m, 5, 32);
        relu(m);
        pool(m);
        conv(m, 5, 64);
        relu(m);
        pool(m);
        dense(m, 256);
        relu(m);
        dense(m, 10);
    }
    int shard = (max_batch + threads - 1) / threads;
    int ok = 1;
    for (int r = 0; r < threads && ok; r++)
        ok = replica_alloc(m, r, r == 0 ? max_batch : shard) == 0;
    for (int i = 0; i < m->nlayers && ok; i++) {
        const eft_layer *l = &m->reps[0].layers[i];
        if (l->w) {
            m->vel[i][0] = calloc(l->nw, sizeof(float));
            m->vel[i][1] = calloc((size_t)l->out_c, sizeof(float));
            ok = m->vel[i][0] && m->vel[i][1];
        }
    }
    for (int r = 1; r < threads && ok; r++) {
        m->worker_args[r].model = m;
        m->worker_args[r].r = r;
        ok = pthread_create(&m->workers[r], NULL, worker_loop,
                            &m->worker_args[r]) == 0;
        if (ok)
            m->started = r;
    }
    if (!ok) {
        eft_model_destroy(m);
        return NULL;
    }
    he_init(m, seed);
    return m;
}

void eft_model_destroy(eft_model *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = 1;
    pthread_cond_broadcast(&m->start);
    pthread_mutex_unlock(&m->mu);
    for (int r = 1; r <= m->started; r++)
        pthread_join(m->workers[r], NULL);
    /* replicas share reps[0]'s parameters: free those last */
    for (int r = m->threads - 1; r >= 0; r--) {
        eft_replica *rep = &m->reps[r];
        for (int i = 0; i < m->nlayers; i++)
            eft_layer_free(&rep->layers[i]);
        free(rep->grad_a);
        free(rep->grad_b);
        free(rep->dlogits);
    }
    for (int i = 0; i < m->nlayers; i++) {
        free(m->vel[i][0]);
        free(m->vel[i][1]);
    }
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->start);
    pthread_cond_destroy(&m->done);
    free(m);
}

int eft_arch_parse(const char *name, eft_arch *arch)
{
    if (strcmp(name, "mlp") == 0)
        *arch = EFT_MLP;
    else if (strcmp(name, "cnn") == 0)
        *arch = EFT_CNN;
    else
        return -1;
    return 0;
}

const char *eft_arch_name(eft_arch arch)
{
    return arch == EFT_MLP ? "mlp" : "cnn";
}

/* ---- training ------------------------------------------------------ */

EFT_VECTOR
static void add_into(float *restrict dst, const float *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += src[i];
}

/* Adds every replica's gradients into reps[0]'s. */
static void reduce_gradients(eft_model *m)
{
    for (int r = 1; r < m->threads; r++) {
        if (m->reps[r].n == 0)
            continue;
        for (int i = 0; i < m->nlayers; i++) {
            eft_layer *dst = &m->reps[0].layers[i];
            const eft_layer *src = &m->reps[r].layers[i];
            if (!dst->w)
                continue;
            add_into(dst->dw, src->dw, dst->nw);
            add_into(dst->db, src->db, (size_t)dst->out_c);
        }
    }
}

double eft_model_run(eft_model *m, const float *x, const int64_t *labels, int n,
                     int backward, int *correct)
{
    return eft_model_run_each(m, x, labels, n, backward, correct, NULL);
}

double eft_model_run_each(eft_model *m, const float *x, const int64_t *labels,
                          int n, int backward, int *correct, double *losses)
{
    size_t in = eft_layer_in_size(&m->reps[0].layers[0]);
    /* shards of at most `shard` examples; reps[0] takes the first */
    int shard = (n + m->threads - 1) / m->threads;
    int workers = 0;
    for (int r = 0; r < m->threads; r++) {
        eft_replica *rep = &m->reps[r];
        int at = r * shard;
        rep->n = at >= n ? 0 : (n - at < shard ? n - at : shard);
        rep->x = x + (size_t)(at < n ? at : 0) * in;
        rep->y = labels + (at < n ? at : 0);
        rep->losses = losses ? losses + (at < n ? at : 0) : NULL;
        rep->backward = backward;
        rep->norm = n;
        workers += r > 0;
    }
    if (workers > 0) {
        pthread_mutex_lock(&m->mu);
        m->pending = workers;
        m->generation++;
        pthread_cond_broadcast(&m->start);
        pthread_mutex_unlock(&m->mu);
    }
    run_replica(m, &m->reps[0]);
    if (workers > 0) {
        pthread_mutex_lock(&m->mu);
        while (m->pending > 0)
            pthread_cond_wait(&m->done, &m->mu);
        pthread_mutex_unlock(&m->mu);
    }
    if (backward)
        reduce_gradients(m);
    double loss = 0;
    int hits = 0;
    for (int r = 0; r < m->threads; r++) {
        loss += m->reps[r].loss;
        hits += m->reps[r].correct;
    }
    if (correct)
        *correct = hits;
    return n ? loss / n : 0;
}

EFT_VECTOR
static void sgd(float *restrict p, const float *restrict g, float *restrict v,
                size_t n, double lr, const eft_sgd *o)
{
    const float mu = (float)o->momentum, wd = (float)o->weight_decay;
    const float step = (float)lr;
    if (o->nesterov) {
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + wd * p[i];
            float vi = mu * v[i] + gi;
            v[i] = vi;
            p[i] -= step * (gi + mu * vi);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float vi = mu * v[i] + g[i] + wd * p[i];
            v[i] = vi;
            p[i] -= step * vi;
        }
    }
}

void eft_model_sgd_step(eft_model *m, const eft_sgd *opt, double lr)
{
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer *l = &m->reps[0].layers[i];
        if (!l->w)
            continue;
        sgd(l->w, l->dw, m->vel[i][0], l->nw, lr, opt);
        sgd(l->b, l->db, m->vel[i][1], (size_t)l->out_c, lr, opt);
    }
}

double eft_model_train_batch(eft_model *m, const float *x,
                             const int64_t *labels, int n, const eft_sgd *opt,
                             double lr, int *correct)
{
    double loss = eft_model_run(m, x, labels, n, 1, correct);
    eft_model_sgd_step(m, opt, lr);
    return loss;
}

void eft_model_evaluate(eft_model *m, const float *x, const int64_t *labels,
                        int n, double *loss, double *accuracy)
{
    double total = 0;
    long hits = 0;
    size_t in = eft_layer_in_size(&m->reps[0].layers[0]);
    for (int at = 0; at < n; at += m->max_batch) {
        int k = n - at < m->max_batch ? n - at : m->max_batch;
        int c;
        total +=
            eft_model_run(m, x + (size_t)at * in, labels + at, k, 0, &c) * k;
        hits += c;
    }
    *loss = n ? total / n : 0;
    *accuracy = n ? (double)hits / n : 0;
}

int eft_model_param_count(const eft_model *m)
{
    int n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += m->reps[0].layers[i].w ? 2 : 0;
    return n;
}

void eft_model_param(eft_model *m, int i, float **value, float **grad,
                     size_t *n)
{
    for (int k = 0; k < m->nlayers; k++) {
        eft_layer *l = &m->reps[0].layers[k];
        if (!l->w)
            continue;
        if (i == 0) {
            *value = l->w;
            *grad = l->dw;
            *n = l->nw;
            return;
        }
        if (i == 1) {
            *value = l->b;
            *grad = l->db;
            *n = (size_t)l->out_c;
            return;
        }
        i -= 2;
    }
    *value = *grad = NULL;
    *n = 0;
}

float *eft_model_momentum(eft_model *m, int i)
{
    if (i < 0)
        return NULL;
    for (int k = 0; k < m->nlayers; k++) {
        if (!m->reps[0].layers[k].w)
            continue;
        if (i < 2)
            return m->vel[k][i];
        i -= 2;
    }
    return NULL;
}

/* ---- saving ---------------------------------------------------------- */

static int put(FILE *f, const void *p, size_t n)
{
    return fwrite(p, 1, n, f) == n ? 0 : -1;
}

int eft_model_save(eft_model *m, const char *path, char *err, size_t len)
{
    if (strlen(path) + sizeof ".partial" > 4096) {
        snprintf(err, len, "--save-model: path too long");
        return -1;
    }
    ef__atomic_file a;
    if (ef__atomic_open(&a, path, ".partial") != 0) {
        snprintf(err, len, "%s: cannot create: %s", a.tmp ? a.tmp : path,
                 strerror(a.error));
        ef__atomic_abort(&a);
        return -1;
    }
    /* the machines this builds for are little-endian, as the format */
    uint32_t head[3] = {1, (uint32_t)m->arch,
                        (uint32_t)eft_model_param_count(m)};
    int rc = put(a.f, "EFTMODEL", 8) | put(a.f, head, sizeof head);
    for (int i = 0; rc == 0 && i < eft_model_param_count(m); i++) {
        float *v, *g;
        size_t n;
        eft_model_param(m, i, &v, &g, &n);
        uint64_t count = n;
        rc = put(a.f, &count, sizeof count) | put(a.f, v, n * sizeof *v);
    }
    int e = errno;
    if (rc == 0 && ef__atomic_commit(&a) != 0) {
        rc = -1;
        e = a.error;
    }
    if (rc != 0)
        snprintf(err, len, "%s: cannot write: %s", path, strerror(e));
    ef__atomic_abort(&a);
    return rc;
}
