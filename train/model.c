/* Models, backpropagation and SGD (see model.h). */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ------------------------------------------------------ */

static eft_layer *push(eft_model *m, eft_layer_kind kind)
{
    eft_layer *l = &m->layers[m->nlayers];
    memset(l, 0, sizeof *l);
    l->kind = kind;
    if (m->nlayers == 0) {
        l->in_h = 28;
        l->in_w = 28;
        l->in_c = 1;
    } else {
        const eft_layer *prev = &m->layers[m->nlayers - 1];
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
        eft_layer *l = &m->layers[i];
        if (!l->w)
            continue;
        double std = sqrt(2.0 / (double)(l->nw / (size_t)l->out_c));
        for (size_t j = 0; j < l->nw; j++)
            l->w[j] = (float)(std * normal(&s));
    }
}

eft_model *eft_model_create(eft_arch arch, int max_batch, uint64_t seed)
{
    eft_model *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->arch = arch;
    m->classes = 10;
    m->max_batch = max_batch;
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
    size_t widest = 0;
    int ok = 1;
    for (int i = 0; i < m->nlayers && ok; i++) {
        eft_layer *l = &m->layers[i];
        ok = eft_layer_alloc(l, max_batch) == 0;
        if (eft_layer_in_size(l) > widest)
            widest = eft_layer_in_size(l);
        if (ok && l->w) {
            m->vel[i][0] = calloc(l->nw, sizeof(float));
            m->vel[i][1] = calloc((size_t)l->out_c, sizeof(float));
            ok = m->vel[i][0] && m->vel[i][1];
        }
    }
    size_t n = (size_t)max_batch * widest;
    if (ok) {
        m->grad_a = calloc(n, sizeof(float));
        m->grad_b = calloc(n, sizeof(float));
        m->dlogits = calloc((size_t)max_batch * m->classes, sizeof(float));
        ok = m->grad_a && m->grad_b && m->dlogits;
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
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer_free(&m->layers[i]);
        free(m->vel[i][0]);
        free(m->vel[i][1]);
    }
    free(m->grad_a);
    free(m->grad_b);
    free(m->dlogits);
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

const float *eft_model_forward(eft_model *m, const float *x, int n)
{
    const float *a = x;
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer_forward(&m->layers[i], a, n);
        a = m->layers[i].out;
    }
    return a;
}

double eft_model_backward(eft_model *m, const int64_t *labels, int n,
                          int *correct)
{
    const float *logits = m->layers[m->nlayers - 1].out;
    double loss = eft_softmax_xent(logits, labels, n, m->classes, m->dlogits,
                                   correct);
    const float *dout = m->dlogits;
    float *bufs[2] = {m->grad_a, m->grad_b};
    for (int i = m->nlayers - 1; i >= 0; i--) {
        float *din = i > 0 ? bufs[i % 2] : NULL; /* no gradient for x */
        eft_layer_backward(&m->layers[i], dout, din, n);
        dout = din;
    }
    return loss;
}

static void sgd(float *p, const float *g, float *v, size_t n, double lr,
                const eft_sgd *o)
{
    const float mu = (float)o->momentum, wd = (float)o->weight_decay;
    const float step = (float)lr;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * p[i];
        v[i] = mu * v[i] + gi;
        p[i] -= step * (o->nesterov ? gi + mu * v[i] : v[i]);
    }
}

void eft_model_sgd_step(eft_model *m, const eft_sgd *opt, double lr)
{
    for (int i = 0; i < m->nlayers; i++) {
        eft_layer *l = &m->layers[i];
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
    eft_model_forward(m, x, n);
    double loss = eft_model_backward(m, labels, n, correct);
    eft_model_sgd_step(m, opt, lr);
    return loss;
}

void eft_model_evaluate(eft_model *m, const float *x, const int64_t *labels,
                        int n, double *loss, double *accuracy)
{
    double total = 0;
    long hits = 0;
    size_t in = eft_layer_in_size(&m->layers[0]);
    for (int at = 0; at < n; at += m->max_batch) {
        int k = n - at < m->max_batch ? n - at : m->max_batch;
        const float *logits = eft_model_forward(m, x + (size_t)at * in, k);
        int c;
        total += eft_softmax_xent(logits, labels + at, k, m->classes, NULL,
                                  &c) *
                 k;
        hits += c;
    }
    *loss = n ? total / n : 0;
    *accuracy = n ? (double)hits / n : 0;
}

int eft_model_param_count(const eft_model *m)
{
    int n = 0;
    for (int i = 0; i < m->nlayers; i++)
        n += m->layers[i].w ? 2 : 0;
    return n;
}

void eft_model_param(eft_model *m, int i, float **value, float **grad,
                     size_t *n)
{
    for (int k = 0; k < m->nlayers; k++) {
        eft_layer *l = &m->layers[k];
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
