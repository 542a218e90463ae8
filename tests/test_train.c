/* SPDX-License-Identifier: Apache-2.0 */
/* The reference trainer: finite-difference gradient checks for every layer
 * and both whole models, SGD's update rule, and a short run on
 * Fashion-MNIST that must lower the test loss. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <cblas.h>
#include <math.h>

#include "checkpoint.h"
#include "common/crc32c.h"
#include "ef_test_util.h"
#include "model.h"
#include "partitions.h"
#include "trainer.h"

static uint64_t rng_state;

/* Every test starts the generator afresh, so that no check depends on
 * which tests ran before it. */
static int reseed(void **state)
{
    (void)state;
    rng_state = 12345;
    return 0;
}

static float urand(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 11) * 0x1.0p-53 * 2 - 1);
}

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = urand() * scale;
}

/* |a - b| relative to their size, with a floor for values near zero. */
static double rel_err(double a, double b)
{
    return fabs(a - b) / fmax(1e-2, fabs(a) + fabs(b));
}

/* L = sum(out * g): a scalar whose gradient with respect to the layer's
 * output is g. */
static double layer_objective(eft_layer *l, const float *in, const float *g,
                              int n)
{
    eft_layer_forward(l, in, n);
    double s = 0;
    for (size_t i = 0; i < (size_t)n * eft_layer_out_size(l); i++)
        s += (double)l->out[i] * g[i];
    return s;
}

/* Checks dW, db and din of one layer against central differences; a conv
 * layer with block > 0 works through its images that many at a time. */
static void check_layer_blocks(eft_layer *l, int n, int block)
{
    assert_int_equal(eft_layer_alloc(l, n, NULL), 0);
    if (block > 0) {
        assert_true(block <= l->chunk); /* col holds at least that many */
        l->chunk = block;
    }
    size_t in_n = (size_t)n * eft_layer_in_size(l);
    size_t out_n = (size_t)n * eft_layer_out_size(l);
    float *in = malloc(in_n * sizeof(float));
    float *g = malloc(out_n * sizeof(float));
    float *din = malloc(in_n * sizeof(float));
    fill(in, in_n, 1);
    fill(g, out_n, 1);
    if (l->w) {
        fill(l->w, l->nw, 0.5f);
        fill(l->b, (size_t)l->out_c, 0.5f);
    }
    layer_objective(l, in, g, n);
    eft_layer_backward(l, g, din, n);
    const float eps = 1e-2f;
    double worst = 0;
    /* probe up to 40 entries of each tensor */
    float *tensors[3] = {in, l->w, l->b};
    float *grads[3] = {din, l->dw, l->db};
    size_t sizes[3] = {in_n, l->nw, l->w ? (size_t)l->out_c : 0};
    for (int t = 0; t < 3; t++) {
        if (!tensors[t])
            continue;
        /* the analytic gradient is overwritten by later forwards: copy */
        float *grad = malloc(sizes[t] * sizeof(float));
        memcpy(grad, grads[t], sizes[t] * sizeof(float));
        for (size_t k = 0; k < 40 && k < sizes[t]; k++) {
            size_t i = (k * 7919) % sizes[t];
            float keep = tensors[t][i];
            tensors[t][i] = keep + eps;
            double up = layer_objective(l, in, g, n);
            tensors[t][i] = keep - eps;
            double down = layer_objective(l, in, g, n);
            tensors[t][i] = keep;
            double numeric = (up - down) / (2 * eps);
            worst = fmax(worst, rel_err(numeric, grad[i]));
        }
        free(grad);
    }
    if (worst > 1e-2)
        fail_msg("layer kind %d: worst relative error %g", l->kind, worst);
    eft_layer_free(l);
    free(in);
    free(g);
    free(din);
}

static void check_layer(eft_layer *l, int n)
{
    check_layer_blocks(l, n, 0);
}

static void dense_gradients(void **state)
{
    (void)state;
    eft_layer l = {.kind = EFT_DENSE,
                   .in_h = 1,
                   .in_w = 1,
                   .in_c = 7,
                   .out_h = 1,
                   .out_w = 1,
                   .out_c = 5};
    check_layer(&l, 3);
}

/* A same-padding convolution of an h x w x c input. */
static eft_layer conv_layer(int h, int w, int c, int out_c, int k)
{
    eft_layer l = {.kind = EFT_CONV,
                   .in_h = h,
                   .in_w = w,
                   .in_c = c,
                   .out_h = h,
                   .out_w = w,
                   .out_c = out_c,
                   .k = k};
    return l;
}

static void conv_gradients(void **state)
{
    (void)state;
    eft_layer l = conv_layer(6, 5, 3, 4, 3);
    check_layer(&l, 2);
    eft_layer l5 = conv_layer(7, 7, 2, 3, 5);
    check_layer(&l5, 2);
}

/* Batches larger than a conv block: forward and backward go block by
 * block, a last block shorter than the rest included. */
static void conv_gradients_in_blocks(void **state)
{
    (void)state;
    for (int block = 1; block <= 2; block++) {
        eft_layer l = conv_layer(5, 4, 2, 3, 3);
        check_layer_blocks(&l, 5, block);
    }
}

static void relu_gradients(void **state)
{
    (void)state;
    eft_layer l = {.kind = EFT_RELU,
                   .in_h = 3,
                   .in_w = 3,
                   .in_c = 2,
                   .out_h = 3,
                   .out_w = 3,
                   .out_c = 2};
    check_layer(&l, 2);
}

static void pool_gradients(void **state)
{
    (void)state;
    /* odd sizes exercise the ragged last row and column */
    eft_layer l = {.kind = EFT_POOL,
                   .in_h = 5,
                   .in_w = 4,
                   .in_c = 3,
                   .out_h = 3,
                   .out_w = 2,
                   .out_c = 3};
    check_layer(&l, 2);
    /* even sizes take the vector path */
    eft_layer e = {.kind = EFT_POOL,
                   .in_h = 6,
                   .in_w = 4,
                   .in_c = 5,
                   .out_h = 3,
                   .out_w = 2,
                   .out_c = 5};
    check_layer(&e, 2);
}

static void softmax_gradients(void **state)
{
    (void)state;
    float z[3 * 4], dz[3 * 4], tmp[3 * 4];
    int64_t y[3] = {0, 3, 2};
    fill(z, 12, 2);
    /* the gradient is of the sum divided by norm */
    eft_softmax_xent(z, y, 3, 4, dz, 3, NULL, NULL);
    for (int i = 0; i < 12; i++) {
        memcpy(tmp, z, sizeof z);
        tmp[i] += 1e-3f;
        double up = eft_softmax_xent(tmp, y, 3, 4, NULL, 3, NULL, NULL);
        tmp[i] -= 2e-3f;
        double down = eft_softmax_xent(tmp, y, 3, 4, NULL, 3, NULL, NULL);
        assert_true(rel_err((up - down) / 2e-3 / 3, dz[i]) < 1e-2);
    }
    /* a label out of range counts as wrong and adds no gradient */
    int64_t bad[3] = {0, 9, -1};
    int correct;
    eft_softmax_xent(z, bad, 3, 4, dz, 3, &correct, NULL);
    for (int c = 0; c < 4; c++)
        assert_true(dz[4 + c] == 0 && dz[8 + c] == 0);
}

/* The whole model: parameter gradients of the mean cross-entropy against
 * central differences, as one relative error over the probes. A probe
 * whose one-sided differences disagree sits on a ReLU kink, where the loss
 * has no derivative: it is skipped, and at most a quarter may be.
 *
 * Moving one weight of an early layer moves thousands of activations, and
 * some cross a ReLU or max-pool switch within the step without tripping
 * the kink test. Over 40 random inputs the error measured up to 0.020 on
 * the CNN's first conv and 0.025 on the MLP's, with correct code, so the
 * bound is 0.05. One layer's gradient made 20% too large measured 0.13,
 * and the layer checks above hold each layer's arithmetic to 0.01 on
 * inputs small enough to have few kinks. */
static void check_model(eft_arch arch)
{
    const int n = 5;
    eft_model *m = eft_model_create(arch, n, 1, 7);
    assert_non_null(m);
    float *x = malloc((size_t)n * 784 * sizeof(float));
    fill(x, (size_t)n * 784, 1);
    int64_t y[5] = {1, 4, 9, 0, 4};
    eft_model_run(m, x, y, n, 1, NULL);
    for (int t = 0; t < eft_model_param_count(m); t++) {
        float *v, *g;
        size_t cnt;
        eft_model_param(m, t, &v, &g, &cnt);
        float *grad = malloc(cnt * sizeof(float));
        memcpy(grad, g, cnt * sizeof(float));
        double diff = 0, norm = 0, f0 = eft_model_run(m, x, y, n, 0, NULL);
        int kinks = 0;
        for (size_t k = 0; k < 24; k++) {
            size_t i = (k * 104729) % cnt;
            float keep = v[i];
            /* small: the logits of a He-initialised net on random inputs
             * are large, and a bigger step meets their curvature */
            const float eps = 1e-3f;
            v[i] = keep + eps;
            double up = eft_model_run(m, x, y, n, 0, NULL);
            v[i] = keep - eps;
            double down = eft_model_run(m, x, y, n, 0, NULL);
            v[i] = keep;
            double fwd = (up - f0) / eps, bwd = (f0 - down) / eps;
            if (fabs(fwd - bwd) > 0.1 * (fabs(fwd) + fabs(bwd)) + 1e-4) {
                kinks++;
                continue;
            }
            double numeric = (up - down) / (2 * eps);
            diff += (numeric - grad[i]) * (numeric - grad[i]);
            norm += numeric * numeric + (double)grad[i] * grad[i];
        }
        double err = sqrt(diff) / fmax(sqrt(norm), 1e-12);
        assert_true(kinks <= 6);
        if (err > 5e-2)
            fail_msg("%s parameter %d: relative error %g", eft_arch_name(arch),
                     t, err);
        free(grad);
    }
    free(x);
    eft_model_destroy(m);
}

/* Splitting the batch over replicas gives the gradients of one thread. */
static void check_replicas(eft_arch arch, int threads)
{
    const int n = 7;
    eft_model *one = eft_model_create(arch, n, 1, 3);
    eft_model *many = eft_model_create(arch, n, threads, 3);
    float *x = malloc((size_t)n * 784 * sizeof(float));
    fill(x, (size_t)n * 784, 1);
    int64_t y[7] = {0, 1, 2, 3, 4, 5, 6};
    int c1, c2;
    double l1 = eft_model_run(one, x, y, n, 1, &c1);
    double l2 = eft_model_run(many, x, y, n, 1, &c2);
    assert_true(fabs(l1 - l2) < 1e-5 * fabs(l1));
    assert_int_equal(c1, c2);
    for (int t = 0; t < eft_model_param_count(one); t++) {
        float *v1, *g1, *v2, *g2;
        size_t n1, n2;
        eft_model_param(one, t, &v1, &g1, &n1);
        eft_model_param(many, t, &v2, &g2, &n2);
        assert_int_equal(n1, n2);
        for (size_t i = 0; i < n1; i++)
            assert_true(fabs(g1[i] - g2[i]) <= 1e-5 + 1e-4 * fabs(g1[i]));
    }
    free(x);
    eft_model_destroy(one);
    eft_model_destroy(many);
}

static void mlp_gradients(void **state)
{
    (void)state;
    check_model(EFT_MLP);
    check_replicas(EFT_MLP, 2);
}

static void cnn_gradients(void **state)
{
    (void)state;
    check_model(EFT_CNN);
    check_replicas(EFT_CNN, 3);
}

/* Each example's loss, from the step's own forward pass: they sum to the
 * batch's loss, whatever the threads splitting it, each is that example's
 * loss alone, and asking for them changes neither loss nor gradients. */
static void check_losses(eft_arch arch, int threads)
{
    const int n = 7;
    eft_model *m = eft_model_create(arch, n, threads, 5);
    eft_model *plain = eft_model_create(arch, n, threads, 5);
    assert_true(m && plain);
    float *x = malloc((size_t)n * 784 * sizeof(float));
    fill(x, (size_t)n * 784, 1);
    int64_t y[7] = {3, 1, 4, 1, 5, 9, 2};
    double losses[7], alone[1];
    for (int backward = 0; backward <= 1; backward++) {
        for (int i = 0; i < n; i++)
            losses[i] = -1;
        double mean = eft_model_run_each(m, x, y, n, backward, NULL, losses);
        double sum = 0;
        for (int i = 0; i < n; i++) {
            assert_true(losses[i] > 0);
            sum += losses[i];
        }
        if (fabs(sum - n * mean) > 1e-9 * fabs(n * mean))
            fail_msg("%s, %d threads: losses sum to %.17g, batch loss x n "
                     "is %.17g",
                     eft_arch_name(arch), threads, sum, n * mean);
        assert_true(mean == eft_model_run(plain, x, y, n, backward, NULL));
    }
    for (int t = 0; t < eft_model_param_count(m); t++) {
        float *v1, *g1, *v2, *g2;
        size_t n1, n2;
        eft_model_param(m, t, &v1, &g1, &n1);
        eft_model_param(plain, t, &v2, &g2, &n2);
        assert_memory_equal(g1, g2, n1 * sizeof(float));
    }
    for (int i = 0; i < n; i++) {
        eft_model_run_each(plain, x + (size_t)i * 784, y + i, 1, 0, NULL,
                           alone);
        assert_true(fabs(alone[0] - losses[i]) <= 1e-4 * losses[i]);
    }
    free(x);
    eft_model_destroy(m);
    eft_model_destroy(plain);
}

static void per_example_losses(void **state)
{
    (void)state;
    check_losses(EFT_MLP, 1);
    check_losses(EFT_MLP, 3);
    check_losses(EFT_CNN, 2);
    /* a label out of range loses 0, like its share of the sum */
    float z[3 * 4];
    fill(z, 12, 2);
    int64_t bad[3] = {0, 9, -1};
    double each[3];
    double sum = eft_softmax_xent(z, bad, 3, 4, NULL, 3, NULL, each);
    assert_true(each[0] > 0 && each[1] == 0 && each[2] == 0);
    assert_true(sum == each[0]);
}

/* One step by hand: PyTorch's SGD with Nesterov momentum and decay. */
static void sgd_rule(void **state)
{
    (void)state;
    eft_model *m = eft_model_create(EFT_MLP, 1, 1, 1);
    float *v, *g;
    size_t n;
    eft_model_param(m, 1, &v, &g, &n); /* first bias */
    v[0] = 0.5f;
    g[0] = 0.2f;
    /* zero every other gradient so the step only moves what we watch */
    for (int t = 0; t < eft_model_param_count(m); t++) {
        float *vv, *gg;
        size_t k;
        eft_model_param(m, t, &vv, &gg, &k);
        if (t != 1)
            memset(gg, 0, k * sizeof(float));
    }
    eft_sgd opt = {.momentum = 0.9, .weight_decay = 0.1, .nesterov = 1};
    eft_model_sgd_step(m, &opt, 0.1);
    /* g' = 0.2 + 0.1 * 0.5 = 0.25; v = 0.25; step = 0.25 + 0.9 * 0.25 */
    assert_true(fabs(v[0] - (0.5 - 0.1 * 0.475)) < 1e-6);
    g[0] = 0.2f;
    eft_model_sgd_step(m, &opt, 0.1);
    double p1 = 0.5 - 0.1 * 0.475;
    double g2 = 0.2 + 0.1 * p1, v2 = 0.9 * 0.25 + g2;
    assert_true(fabs(v[0] - (p1 - 0.1 * (g2 + 0.9 * v2))) < 1e-6);
    eft_model_destroy(m);
}

static ef_pipeline *fmnist(const char *tail, uint64_t seed)
{
    char spec[1024];
    snprintf(spec, sizeof spec,
             "idx:images=" EF_FASHION_MNIST_DIR "/%s-images-idx3-ubyte.gz,"
             "labels=" EF_FASHION_MNIST_DIR "/%s-labels-idx1-ubyte.gz | %s",
             strstr(tail, "shuffle") ? "train" : "t10k",
             strstr(tail, "shuffle") ? "train" : "t10k", tail);
    return tu_pipeline(spec, seed);
}

/* The first 1,000 test images, the held-out set of the checkpoint and
 * feedback runs. */
static void load_small_test_set(eft_dataset *test)
{
    char err[1024];
    ef_pipeline *tp = fmnist("take:1000 | batch:500", 1);
    if (eft_dataset_load(tp, 0.286, 0.353, test, err, sizeof err) != 0)
        fail_msg("loading the test set: %s", err);
    ef_pipeline_destroy(tp);
}

/* A short run on the real data lowers the test loss and beats chance by
 * far: the whole path from IDX files to SGD works. */
static void short_run_learns(void **state)
{
    (void)state;
    char err[512];
    eft_dataset test;
    ef_pipeline *tp = fmnist("take:2000 | batch:500", 1);
    assert_int_equal(eft_dataset_load(tp, 0.286, 0.353, &test, err, sizeof err),
                     0);
    assert_int_equal(test.n, 2000);
    ef_pipeline_destroy(tp);

    eft_config cfg;
    eft_config_defaults(&cfg);
    cfg.max_fresh = 12800;
    cfg.eval_every = 1000000; /* only the final evaluation */
    eft_model *m = eft_model_create(EFT_MLP, 500, 1, cfg.seed);
    double loss0, acc0;
    eft_model_evaluate(m, test.x, test.y, test.n, &loss0, &acc0);
    eft_model_destroy(m);

    ef_pipeline *p = fmnist("shuffle:10000 | echo:2 | batch:128", 1);
    eft_result r;
    const eft_job job = {.cfg = &cfg, .train = p, .test = &test};
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    assert_int_equal(test.dim, 784);
    assert_int_equal(r.final.fresh, 12800);
    /* every other example was an echo */
    assert_true(r.final.examples >= 2 * 12800 - 128);
    assert_true(r.final.evaluated);
    assert_true(r.final.loss < loss0 * 0.6);
    assert_true(r.final.accuracy > 0.7);
    ef_pipeline_destroy(p);
    free((void *)test.x);
    free((void *)test.y);
}

static void bad_batches_fail_cleanly(void **state)
{
    (void)state;
    char err[512];
    eft_config cfg;
    eft_config_defaults(&cfg);
    cfg.max_fresh = 1000;
    eft_result r;
    /* no label field */
    ef_pipeline *p = tu_pipeline("range:n=10,bytes=784 | batch:5", 1);
    eft_job job = {.cfg = &cfg, .train = p};
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "label"));
    ef_pipeline_destroy(p);
    /* images of another size than the model takes */
    job.train = p = fmnist("resize:14 | batch:5", 1);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "images of 196 values: expected at most 128 "
                                "images of 784 values"));
    ef_pipeline_destroy(p);
    /* a held-out set of another size, refused before training */
    float x[2 * 196] = {0};
    int64_t y[2] = {0, 1};
    const eft_dataset small = {x, y, 2, 196};
    job.train = p = fmnist("batch:5", 1);
    job.test = &small;
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    assert_string_equal(err, "evaluation set: images of 196 values; the mlp "
                             "takes 784");
    assert_int_equal(r.final.steps, 0);
    ef_pipeline_destroy(p);
    job.test = NULL;
    /* a batch larger than the configured one */
    cfg.batch = 4;
    job.train = p = fmnist("batch:8", 1);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    assert_non_null(strstr(err, "at most 4"));
    ef_pipeline_destroy(p);
}

/* CRC-32C's check value, and the same CRC whatever the pieces it is
 * computed over (eight bytes at a time, then one). */
static void crc32c_values(void **state)
{
    (void)state;
    assert_int_equal(ef__crc32c(0, "123456789", 9), 0xe3069283u);
    assert_int_equal(ef__crc32c(0, "", 0), 0);
    unsigned char buf[1000];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (unsigned char)(i * 131 + 7);
    uint32_t whole = ef__crc32c(0, buf, sizeof buf);
    for (size_t cut = 0; cut < 40; cut++)
        assert_int_equal(
            ef__crc32c(ef__crc32c(0, buf, cut), buf + cut, sizeof buf - cut),
            whole);
    buf[500] ^= 1;
    assert_int_not_equal(ef__crc32c(0, buf, sizeof buf), whole);
}

/* The copy of the checkpoint taken at one step of run_copying(). */
typedef struct {
    const char *path, *copy;
    long at_step;
} ckpt_copier;

static void copy_file(const char *from, const char *to)
{
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    assert_non_null(in);
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void copy_at_step(void *user, const eft_progress *p, int evaluated)
{
    (void)evaluated;
    ckpt_copier *c = user;
    if (p->steps == c->at_step)
        copy_file(c->path, c->copy);
}

/* A run resumed from a checkpoint taken midway ends as the run it was
 * taken from: the same steps, samples and weights. Checkpoints of another
 * run, or damaged ones, are refused with a message. */
static void checkpoint_resumes_exactly(void **state)
{
    (void)state;
    char err[1024], dir[] = "/tmp/eft_ckpt.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], copy[128];
    snprintf(path, sizeof path, "%s/run.ck", dir);
    snprintf(copy, sizeof copy, "%s/mid.ck", dir);
    const char *spec = "shuffle:1000 | echo:factor=2,shuffle=50 | batch:64 | "
                       "prefetch:2";
    eft_dataset test;
    load_small_test_set(&test);
    eft_config cfg;
    eft_config_defaults(&cfg);
    cfg.batch = 64;
    cfg.max_fresh = 3200;
    cfg.eval_every = 1000;

    /* the whole run, without checkpoints */
    eft_result full, r;
    ef_pipeline *p = fmnist(spec, 3);
    eft_job job = {.cfg = &cfg, .train = p, .test = &test};
    assert_int_equal(eft_train(&job, &full, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_true(full.final.steps > 90);

    /* again with checkpoints every 7 steps, copying the file at step 40
       (it holds step 35 then) */
    cfg.checkpoint = path;
    cfg.checkpoint_every = 7;
    cfg.resume = 1; /* no file yet: starts afresh */
    ckpt_copier c = {path, copy, 40};
    job.train = p = fmnist(spec, 3);
    job.progress = copy_at_step;
    job.progress_steps = 1;
    job.user = &c;
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_false(r.resumed);
    /* at the start, every 7 steps, at the end */
    assert_int_equal(r.checkpoints, 1 + full.final.steps / 7 + 1);
    assert_int_equal(r.weights_hash, full.weights_hash);
    assert_int_equal(r.samples_hash, full.samples_hash);

    /* resumed from the copy: the rest of the same run */
    cfg.checkpoint = copy;
    job.train = p = fmnist(spec, 3);
    job.progress = NULL;
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_true(r.resumed);
    assert_int_equal(r.resumed_at_step, 35);
    assert_int_equal(r.final.steps, full.final.steps);
    assert_int_equal(r.final.fresh, full.final.fresh);
    assert_int_equal(r.final.examples, full.final.examples);
    assert_int_equal(r.samples_hash, full.samples_hash);
    assert_int_equal(r.weights_hash, full.weights_hash);
    assert_true(r.final.accuracy == full.final.accuracy);

    /* a finished run resumed trains no further and reports the same */
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_int_equal(r.resumed_at_step, full.final.steps);
    assert_int_equal(r.checkpoints, 0);
    assert_int_equal(r.weights_hash, full.weights_hash);

    /* a path that cannot be written fails before the first step */
    cfg.checkpoint = "/nonexistent-folder/run.ck";
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    /* the run's lock beside it, taken first */
    const char *want = "/nonexistent-folder/run.ck.lock: cannot create: "
                       "No such file or directory";
    assert_non_null(strstr(err, want));
    assert_int_equal(r.final.steps, 0);
    /* so does a pipeline whose position cannot be saved */
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/fresh.ck", dir);
    cfg.checkpoint = fresh;
    job.train = p = fmnist("shuffle:100 | map:fn=noop,threads=2,ordered=false "
                           "| batch:64",
                           3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "fresh.ck: cannot save the training "
                                "pipeline's position: "));
    assert_int_equal(r.final.steps, 0);
    assert_int_equal(access(fresh, F_OK), -1);
    cfg.checkpoint = copy;

    /* another learning rate, another pipeline, another held-out set */
    cfg.lr = 0.05;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "mid.ck: saved by another run: lr 0.03 "
                                "there, 0.05 here"));
    cfg.lr = 0.03;
    job.train = p = fmnist(spec, 4);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "mid.ck: saved from another training "
                                "pipeline: state: saved with seed 3"));
    eft_dataset other = test;
    other.n = 999;
    job.test = &other;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "saved by another run: held-out set hash"));
    job.test = &test;

    /* cut short, or one bit changed */
    FILE *f = fopen(copy, "rb");
    assert_non_null(f);
    static unsigned char bytes[4 << 20];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    assert_true(n > 1000 && n < sizeof bytes);
    f = fopen(copy, "wb");
    assert_int_equal(fwrite(bytes, 1, n - 7, f), n - 7);
    fclose(f);
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "mid.ck: truncated"));
    bytes[n / 2] ^= 4;
    f = fopen(copy, "wb");
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "mid.ck: corrupt: its checksum"));

    /* a checkpoint of a RHO-LOSS run (policy=reducible, retired with
     * --holdout): the same file with a setting 'holdout' (u8 name length,
     * name, u8 kind 0, u64 value) inserted after the settings' count, its
     * payload size and CRC fixed; refused, naming the setting */
    bytes[n / 2] ^= 4;
    static unsigned char rho[(4 << 20) + 32];
    const unsigned char extra[17] = {7, 'h', 'o', 'l', 'd', 'o', 'u', 't', 0,
                                     0xe8, 0x03, 0, 0, 0, 0, 0, 0};
    memcpy(rho, bytes, 28);
    memcpy(rho + 28, extra, sizeof extra);
    memcpy(rho + 28 + sizeof extra, bytes + 28, n - 4 - 28);
    size_t m = n + sizeof extra;
    uint64_t payload = 0;
    for (int i = 0; i < 8; i++)
        payload |= (uint64_t)rho[16 + i] << (8 * i);
    payload += sizeof extra;
    for (int i = 0; i < 8; i++)
        rho[16 + i] = (unsigned char)(payload >> (8 * i));
    rho[24]++; /* the count, little-endian u32 below 255 */
    uint32_t crc = ef__crc32c(0, rho, m - 4);
    for (int i = 0; i < 4; i++)
        rho[m - 4 + i] = (unsigned char)(crc >> (8 * i));
    f = fopen(copy, "wb");
    assert_int_equal(fwrite(rho, 1, m, f), m);
    fclose(f);
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    if (!strstr(err, "mid.ck: saved by a run with a setting this one lacks: "
                     "'holdout'"))
        fail_msg("a RHO-LOSS checkpoint: %s", err);

    remove(path);
    remove(copy);
    rmdir(dir);
    free((void *)test.x);
    free((void *)test.y);
}

/* ---- checkpoints of data-parallel runs ------------------------------- */

/* A file's bytes (at most cap) into buf; returns how many. */
static size_t read_all(const char *path, unsigned char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t n = fread(buf, 1, cap, f);
    fclose(f);
    return n;
}

/* Two processes' parts (a part: the process's counters and its pipeline
 * state) in one version-2 file read back as written, with process 0's
 * model; a file is read only by a run of its kind and size, the message
 * naming both. */
static void checkpoint_of_ranks(void **state)
{
    (void)state;
    char err[1024], dir[] = "/tmp/eft_ranks.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], one[128];
    snprintf(path, sizeof path, "%s/run.ck", dir);
    snprintf(one, sizeof one, "%s/one.ck", dir);
    eft_config cfg;
    eft_config_defaults(&cfg);
    const eft_run_id id = {&cfg, 0};
    eft_model *m = eft_model_create(EFT_MLP, 8, 1, 1);
    eft_model *back = eft_model_create(EFT_MLP, 8, 1, 2);
    assert_int_not_equal(eft_model_hash(m), eft_model_hash(back));
    eft_run_state st, got;
    memset(&st, 0, sizeof st);
    st.res.final.steps = 42;
    st.res.final.fresh = 4096;

    const eft_part in[2] = {{100, 7, 3, 0x1234567890abcdefull, "abc", 3},
                                 {200, 8, 0, 99, "defgh", 5}};
    unsigned char parts[2 * EFT_PART_HEADER + 8];
    size_t sizes[2] = {EFT_PART_HEADER + 3, EFT_PART_HEADER + 5};
    eft_part_encode(&in[0], parts);
    eft_part_encode(&in[1], parts + sizes[0]);
    assert_int_equal(eft_checkpoint_save_parts(path, &id, m, &st, 2, parts,
                                               sizes, err, sizeof err),
                     0);
    unsigned char head[24];
    assert_int_equal(read_all(path, head, sizeof head), sizeof head);
    assert_int_equal(head[8], 2);  /* format version 2 */
    assert_int_equal(head[12], 2); /* of two processes */

    unsigned char *out = NULL;
    size_t *out_n = NULL;
    assert_int_equal(eft_checkpoint_load_parts(path, &id, 2, back, &got, &out,
                                               &out_n, err, sizeof err),
                     0);
    assert_int_equal(eft_model_hash(back), eft_model_hash(m));
    assert_int_equal(got.res.final.steps, 42);
    assert_int_equal(got.res.final.fresh, 4096);
    assert_int_equal(out_n[0], sizes[0]);
    assert_int_equal(out_n[1], sizes[1]);
    assert_memory_equal(out, parts, sizes[0] + sizes[1]);
    eft_part p1;
    assert_int_equal(eft_part_decode(out + out_n[0], out_n[1], &p1), 0);
    assert_int_equal(p1.fresh, 200);
    assert_int_equal(p1.batches, 8);
    assert_int_equal(p1.feedback_values, 0);
    assert_int_equal(p1.samples_hash, 99);
    assert_int_equal(p1.state_n, 5);
    assert_memory_equal(p1.state, "defgh", 5);
    /* a part whose state size disagrees with its bytes */
    assert_int_equal(eft_part_decode(out, out_n[0] - 1, &p1), -1);
    assert_int_equal(eft_part_decode(out, 10, &p1), -1);
    free(out);
    free(out_n);

    /* with another number of partitions, or by one process outside mpirun */
    assert_int_equal(eft_checkpoint_load_parts(path, &id, 3, back, &got, &out,
                                               &out_n, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "run.ck: saved by a run of 2 partitions; this "
                                "run has 3 partitions"));
    void *pipe = NULL;
    size_t pipe_n = 0;
    assert_int_equal(eft_checkpoint_load(path, &id, back, &got, &pipe, &pipe_n,
                                         err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "this run has one process outside mpirun"));
    /* one process's checkpoint (version 1) under mpirun */
    assert_int_equal(
        eft_checkpoint_save(one, &id, m, &st, "xyz", 3, err, sizeof err), 0);
    assert_int_equal(eft_checkpoint_load_parts(one, &id, 1, back, &got, &out,
                                               &out_n, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "one.ck: saved by a run of one process "
                                "outside mpirun, one partition; this run has "
                                "1 partition"));
    assert_int_equal(eft_checkpoint_load(one, &id, back, &got, &pipe, &pipe_n,
                                         err, sizeof err),
                     0);
    assert_int_equal(pipe_n, 3);
    assert_memory_equal(pipe, "xyz", 3);
    free(pipe);
    /* none there: nothing to resume */
    remove(path);
    assert_int_equal(eft_checkpoint_load_parts(path, &id, 2, back, &got, &out,
                                               &out_n, err, sizeof err),
                     1);
    remove(one);
    rmdir(dir);
    eft_model_destroy(m);
    eft_model_destroy(back);
}

/* The collectives of one process alone: each leaves its values as they
 * are, as MPI's would with one rank. */
static int one_sum_floats(void *u, float *v, size_t n, char *e, size_t l)
{
    (void)u, (void)v, (void)n, (void)e, (void)l;
    return 0;
}

static int one_sum_doubles(void *u, double *v, size_t n, char *e, size_t l)
{
    (void)u, (void)v, (void)n, (void)e, (void)l;
    return 0;
}

static int one_agree(void *u, uint64_t v, int *same, char *e, size_t l)
{
    (void)u, (void)v, (void)e, (void)l;
    *same = 1;
    return 0;
}

static int one_gather(void *u, const double *mine, size_t n, double *all,
                      char *e, size_t l)
{
    (void)u, (void)e, (void)l;
    memcpy(all, mine, n * sizeof *all);
    return 0;
}

static int one_gather_bytes(void *u, const void *mine, size_t n, void **all,
                            size_t *counts, char *e, size_t l)
{
    (void)u, (void)e, (void)l;
    *all = malloc(n ? n : 1);
    assert_non_null(*all);
    if (n)
        memcpy(*all, mine, n);
    counts[0] = n;
    return 0;
}

static int one_scatter_bytes(void *u, const void *all, const size_t *counts,
                             void **mine, size_t *n, char *e, size_t l)
{
    (void)u, (void)e, (void)l;
    *mine = malloc(counts[0] ? counts[0] : 1);
    assert_non_null(*mine);
    memcpy(*mine, all, counts[0]);
    *n = counts[0];
    return 0;
}

static int one_broadcast_bytes(void *u, void *buf, size_t n, char *e, size_t l)
{
    (void)u, (void)buf, (void)n, (void)e, (void)l;
    return 0;
}

/* The data-parallel checkpoint's path through the trainer, on a run of
 * one process: saved as version 2, resumed midway to the uninterrupted
 * run's samples and weights, with this process's own counters; refused
 * by a run outside mpirun; a failure to save, every process's. */
static void checkpoint_of_one_rank(void **state)
{
    (void)state;
    char err[1024], dir[] = "/tmp/eft_rank.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128], copy[128];
    snprintf(path, sizeof path, "%s/run.ck", dir);
    snprintf(copy, sizeof copy, "%s/mid.ck", dir);
    const char *spec = "shuffle:1000 | echo:factor=2,shuffle=50 | batch:64";
    const eft_comm comm = {.rank = 0,
                           .size = 1,
                           .sum_floats = one_sum_floats,
                           .sum_doubles = one_sum_doubles,
                           .broadcast = one_sum_floats,
                           .agree = one_agree,
                           .gather = one_gather,
                           .gather_bytes = one_gather_bytes,
                           .scatter_bytes = one_scatter_bytes,
                           .broadcast_bytes = one_broadcast_bytes};
    eft_dataset test;
    load_small_test_set(&test);
    eft_config cfg;
    eft_config_defaults(&cfg);
    cfg.batch = 64;
    cfg.max_fresh = 1920;
    cfg.eval_every = 1000;
    cfg.comm = &comm;

    eft_result full, r;
    ef_pipeline *p = fmnist(spec, 3);
    eft_job job = {.cfg = &cfg, .train = p, .test = &test};
    assert_int_equal(eft_train(&job, &full, err, sizeof err), 0);
    ef_pipeline_destroy(p);

    cfg.checkpoint = path;
    cfg.checkpoint_every = 5;
    cfg.resume = 1;
    ckpt_copier c = {path, copy, 22}; /* it holds step 20 then */
    job.train = p = fmnist(spec, 3);
    job.progress = copy_at_step;
    job.progress_steps = 1;
    job.user = &c;
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_int_equal(r.weights_hash, full.weights_hash);
    unsigned char head[24];
    assert_int_equal(read_all(copy, head, sizeof head), sizeof head);
    assert_int_equal(head[8], 2);
    assert_int_equal(head[12], 1);

    cfg.checkpoint = copy;
    job.train = p = fmnist(spec, 3);
    job.progress = NULL;
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_true(r.resumed);
    assert_int_equal(r.resumed_at_step, 20);
    assert_int_equal(r.final.steps, full.final.steps);
    assert_int_equal(r.final.fresh, full.final.fresh);
    assert_int_equal(r.local_fresh, full.local_fresh);
    assert_int_equal(r.local_batches, full.local_batches);
    assert_int_equal(r.samples_hash, full.samples_hash);
    assert_int_equal(r.weights_hash, full.weights_hash);

    /* the same file, outside mpirun */
    cfg.comm = NULL;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "mid.ck: saved by a run of 1 partition; this "
                                "run has one process outside mpirun, one "
                                "partition"));
    assert_false(r.shared_failure);
    cfg.comm = &comm;

    /* a pipeline whose position cannot be saved fails every process */
    char fresh[128];
    snprintf(fresh, sizeof fresh, "%s/fresh.ck", dir);
    cfg.checkpoint = fresh;
    job.train = p = fmnist("shuffle:100 | map:fn=noop,threads=2,ordered=false "
                           "| batch:64",
                           3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), -1);
    ef_pipeline_destroy(p);
    assert_non_null(strstr(err, "fresh.ck: cannot save the training "
                                "pipeline's position: "));
    assert_true(r.shared_failure);
    assert_int_equal(access(fresh, F_OK), -1);

    remove(path);
    remove(copy);
    rmdir(dir);
    free((void *)test.x);
    free((void *)test.y);
}

/* Feeding values back: every example of every step, by identity, from the
 * step's own forward pass; to a pipeline with no policy that listens it
 * changes nothing, and a resumed run counts on from its checkpoint. */
static void feedback_runs(void **state)
{
    (void)state;
    char err[1024], dir[] = "/tmp/eft_feedback.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/run.ck", dir);
    const char *spec = "shuffle:1000 | echo:factor=2,shuffle=50 | batch:64";
    eft_dataset test;
    load_small_test_set(&test);
    eft_config cfg;
    eft_config_defaults(&cfg);
    cfg.batch = 64;
    cfg.max_fresh = 1280;
    cfg.eval_every = 100000;

    eft_result plain, fed, r;
    ef_pipeline *p = fmnist(spec, 3);
    eft_job job = {.cfg = &cfg, .train = p, .test = &test};
    assert_int_equal(eft_train(&job, &plain, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_int_equal(plain.feedback_values, 0);

    cfg.feedback = 1;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &fed, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_int_equal(fed.feedback_values, fed.final.examples);
    assert_int_equal(fed.samples_hash, plain.samples_hash);
    assert_int_equal(fed.weights_hash, plain.weights_hash);

    cfg.checkpoint = path;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_int_equal(r.feedback_values, r.final.examples);
    assert_int_equal(r.weights_hash, plain.weights_hash);
    /* resumed: the count goes on from the checkpoint's */
    cfg.resume = 1;
    job.train = p = fmnist(spec, 3);
    assert_int_equal(eft_train(&job, &r, err, sizeof err), 0);
    ef_pipeline_destroy(p);
    assert_true(r.resumed);
    assert_int_equal(r.feedback_values, r.final.examples);
    cfg.checkpoint = NULL;
    cfg.resume = 0;

    remove(path);
    rmdir(dir);
    free((void *)test.x);
    free((void *)test.y);
}

/* Encodes partition p's part, its state p + 1 bytes of 'a' + p, at out;
 * returns its size. */
static size_t part_of(int p, unsigned char *out)
{
    char state[8];
    memset(state, 'a' + p, sizeof state);
    const eft_part e = {100 + p, p, 0, (uint64_t)p, state, (size_t)p + 1};
    eft_part_encode(&e, out);
    return EFT_PART_HEADER + (size_t)p + 1;
}

/* The parts of 6 partitions go from 2 processes to the file's order, and
 * from it to 3 and back: process r hosts r, r + M, ...; bytes that are
 * not whole parts are refused. The turn goes to the fewest batches. */
static void partitions_dealt_to_processes(void **state)
{
    (void)state;
    unsigned char file[6 * 64], by_two[6 * 64];
    size_t part_n[6], used = 0, counts[3] = {0, 0, 0};
    for (int p = 0; p < 6; p++)
        used += part_n[p] = part_of(p, file + used);
    /* what 2 processes send: 0, 2, 4 then 1, 3, 5 */
    size_t two_n[2] = {0, 0}, at = 0;
    for (int r = 0; r < 2; r++)
        for (int p = r; p < 6; p += 2) {
            size_t n = part_of(p, by_two + at);
            at += n;
            two_n[r] += n;
        }
    unsigned char *ordered;
    size_t got_n[6];
    assert_int_equal(eft_parts_from_ranks(by_two, two_n, 2, 6, &ordered, got_n),
                     0);
    assert_memory_equal(ordered, file, used);
    assert_memory_equal(got_n, part_n, sizeof part_n);
    free(ordered);

    unsigned char *dealt;
    assert_int_equal(eft_parts_to_ranks(file, part_n, 3, 6, &dealt, counts), 0);
    assert_int_equal(counts[0], part_n[0] + part_n[3]);
    assert_int_equal(counts[1], part_n[1] + part_n[4]);
    assert_int_equal(counts[2], part_n[2] + part_n[5]);
    eft_part e;
    size_t n = eft_part_size(dealt + counts[0], counts[1]);
    assert_int_equal(eft_part_decode(dealt + counts[0], n, &e), 0);
    assert_int_equal(e.fresh, 101); /* process 1's first: partition 1 */
    assert_int_equal(eft_part_decode(dealt + counts[0] + n, counts[1] - n, &e),
                     0);
    assert_int_equal(e.fresh, 104);
    assert_memory_equal(e.state, "eeeee", 5);
    /* and back from those 3 */
    assert_int_equal(eft_parts_from_ranks(dealt, counts, 3, 6, &ordered, got_n),
                     0);
    assert_memory_equal(ordered, file, used);
    free(ordered);
    /* a process's bytes one short, or one part too few */
    counts[2]--;
    assert_int_equal(eft_parts_from_ranks(dealt, counts, 3, 6, &ordered, got_n),
                     -1);
    assert_null(ordered);
    counts[2] = part_n[2];
    assert_int_equal(eft_parts_from_ranks(dealt, counts, 3, 6, &ordered, got_n),
                     -1);
    free(dealt);

    eft_partition parts[3] = {{.batches = 4}, {.batches = 3}, {.batches = 3}};
    assert_int_equal(eft_partition_turn(parts, 3), 1);
    parts[1].ended = 1;
    assert_int_equal(eft_partition_turn(parts, 3), 2);
    parts[0].ended = parts[2].ended = 1;
    assert_int_equal(eft_partition_turn(parts, 3), -1);
}

int main(void)
{
    /* BLAS threads are invisible to the thread sanitizer: keep it to one */
    openblas_set_num_threads(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(dense_gradients, reseed),
        cmocka_unit_test_setup(conv_gradients, reseed),
        cmocka_unit_test_setup(conv_gradients_in_blocks, reseed),
        cmocka_unit_test_setup(relu_gradients, reseed),
        cmocka_unit_test_setup(pool_gradients, reseed),
        cmocka_unit_test_setup(softmax_gradients, reseed),
        cmocka_unit_test_setup(mlp_gradients, reseed),
        cmocka_unit_test_setup(cnn_gradients, reseed),
        cmocka_unit_test_setup(per_example_losses, reseed),
        cmocka_unit_test_setup(sgd_rule, reseed),
        cmocka_unit_test_setup(short_run_learns, reseed),
        cmocka_unit_test_setup(bad_batches_fail_cleanly, reseed),
        cmocka_unit_test(crc32c_values),
        cmocka_unit_test(checkpoint_resumes_exactly),
        cmocka_unit_test(feedback_runs),
        cmocka_unit_test(checkpoint_of_ranks),
        cmocka_unit_test(partitions_dealt_to_processes),
        cmocka_unit_test(checkpoint_of_one_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
