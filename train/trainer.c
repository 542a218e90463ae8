/* SPDX-License-Identifier: Apache-2.0 */
/* The training loop (see trainer.h). */
#include "trainer.h"

#include "checkpoint.h"
#include "distributed.h"

#include <math.h>
#include <stdarg.h>
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

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

void eft_config_defaults(eft_config *c)
{
    memset(c, 0, sizeof *c);
    c->arch = EFT_MLP;
    c->batch = 128;
    c->threads = 1;
    c->lr = 0.03;
    c->momentum = 0.9;
    c->nesterov = 1;
    c->eval_every = 10000;
    c->max_fresh = 3000000;
    c->mean = 0.2860; /* Fashion-MNIST training set */
    c->std = 0.3530;
}

EFT_VECTOR
static void normalise(float *restrict x, const unsigned char *restrict src,
                      size_t n, float scale, float shift)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)src[i] * scale - shift;
}

/* Converts a batch's images to normalised floats in x; *n gets the batch
 * size. Accepts u8 (normalised here) or f32 (taken as they are) images of
 * *dim values each (when *dim is 0, this batch's size sets it), and i64
 * labels. */
static int unpack(const ef_sample *s, double mean, double std, int max,
                  size_t *dim, float *x, int64_t *y, int *n, char *err,
                  size_t errlen)
{
    ef_tensor img, lab;
    if (ef_sample_get(s, "image", &img) != EF_OK ||
        ef_sample_get(s, "label", &lab) != EF_OK)
        return fail(err, errlen,
                    "train: each batch needs fields 'image' and 'label'");
    if (img.ndim < 2 || lab.ndim != 1 || lab.dtype != EF_I64 ||
        lab.shape[0] != img.shape[0])
        return fail(err, errlen,
                    "train: expected a batch: image [B,H,W] or [B,H,W,C] and "
                    "label [B] i64 (got %d-d image, %d-d %s label)",
                    img.ndim, lab.ndim, ef_dtype_name(lab.dtype));
    int64_t b = img.shape[0], per = 1;
    for (int d = 1; d < img.ndim; d++)
        per *= img.shape[d];
    if (!*dim)
        *dim = (size_t)per;
    if (per < 1 || (size_t)per != *dim || b > max || b < 1)
        return fail(err, errlen,
                    "train: batch of %lld images of %lld values: expected at "
                    "most %d images of %zu values",
                    (long long)b, (long long)per, max, *dim);
    size_t count = (size_t)b * *dim;
    if (img.dtype == EF_U8) {
        normalise(x, img.data, count, (float)(1.0 / (255.0 * std)),
                  (float)(mean / std));
    } else if (img.dtype == EF_F32) {
        memcpy(x, img.data, count * sizeof(float));
    } else {
        return fail(err, errlen, "train: images must be u8 or f32, not %s",
                    ef_dtype_name(img.dtype));
    }
    memcpy(y, lab.data, (size_t)b * sizeof(int64_t));
    *n = (int)b;
    return 0;
}

int eft_dataset_load(ef_pipeline *p, double mean, double std, eft_dataset *out,
                     char *err, size_t errlen)
{
    size_t cap = 0, n = 0, dim = 0;
    float *x = NULL;
    int64_t *y = NULL;
    ef_sample *s;
    int rc;
    memset(out, 0, sizeof *out);
    while ((rc = ef_pipeline_next(p, &s)) == EF_OK) {
        ef_tensor img;
        int have = ef_sample_get(s, "image", &img) == EF_OK;
        if (!have || img.ndim < 3) {
            ef_sample_free(s);
            free(x);
            free(y);
            return fail(err, errlen,
                        have ? "evaluation set: end the spec with batch"
                             : "evaluation set: its samples have no 'image' "
                               "field");
        }
        int64_t b = img.shape[0];
        if (!dim) { /* the first batch's images set the size */
            dim = 1;
            for (int d = 1; d < img.ndim; d++)
                dim *= (size_t)img.shape[d];
        }
        if (n + (size_t)b > cap) {
            cap = (n + (size_t)b) * 2;
            float *nx = realloc(x, cap * dim * sizeof(float));
            int64_t *ny = realloc(y, cap * sizeof(int64_t));
            x = nx ? nx : x;
            y = ny ? ny : y;
            if (!nx || !ny) {
                ef_sample_free(s);
                free(x);
                free(y);
                return fail(err, errlen, "evaluation set: out of memory");
            }
        }
        int got;
        rc = unpack(s, mean, std, (int)b, &dim, x + n * dim, y + n, &got, err,
                    errlen);
        ef_sample_free(s);
        if (rc != 0) {
            free(x);
            free(y);
            return -1;
        }
        n += (size_t)got;
    }
    if (rc != EF_END) {
        free(x);
        free(y);
        return fail(err, errlen, "evaluation set: %s", ef_pipeline_error(p));
    }
    out->x = x;
    out->y = y;
    out->n = (int)n;
    out->dim = dim;
    return 0;
}

static double lr_at(const eft_config *c, long steps, long fresh)
{
    double lr = c->lr;
    if (c->schedule == EFT_LR_LINEAR && c->max_fresh > 0)
        lr *= 1.0 - (double)fresh / (double)c->max_fresh;
    if (c->warmup_steps > 0 && steps < c->warmup_steps)
        lr *= (double)(steps + 1) / (double)c->warmup_steps;
    return lr > 0 ? lr : 0;
}

/* A training run's state. */
typedef struct {
    const eft_job *job;
    const eft_config *cfg;
    eft_model *m;
    eft_dist d;
    eft_sgd opt;
    size_t dim; /* floats per example, as the model takes them */
    float *x;   /* the batch: cfg->batch x dim */
    int64_t *y;
    eft_result *res;
    double t0;          /* the first batch's arrival: startup is not counted */
    long evaluated_at;  /* fresh count of the last evaluation, or -1 */
    long next_eval;     /* fresh count of the next evaluation */
    double loss_window[EFT_LOSS_WINDOW];
    /* a resumed run's training and evaluation time before this process */
    double train_base, eval_base;
    int finished; /* resumed from a checkpoint of a run that had ended */
    double ckpt_s; /* time writing checkpoints since t0 */
    eft_run_id id;
    void *state; /* the training pipeline's state, for checkpoints */
    size_t state_cap;
    /* with cfg->feedback, cfg->batch of each, allocated once: the batch's
     * identities and its examples' values */
    ef_sample_id *ids;
    double *values;
} trainer;

/* What one step did: this process's share and the step's in all. */
typedef struct {
    int n;            /* this process's examples */
    long local_fresh; /* ... of them fresh */
    double total_n, total_fresh, loss;
} step_result;

/* Chains a batch's identity, image bytes and labels into h. */
static uint64_t hash_batch(uint64_t h, const ef_sample *s, ef_sample_id id)
{
    const int64_t ident[4] = {id.index, id.epoch, id.echo_copy, id.fresh};
    ef_tensor t;
    h = eft_hash(h, ident, sizeof ident);
    if (ef_sample_get(s, "image", &t) == EF_OK)
        h = eft_hash(h, t.data, t.nbytes);
    if (ef_sample_get(s, "label", &t) == EF_OK)
        h = eft_hash(h, t.data, t.nbytes);
    return h;
}

/* This process's next batch into t->x and t->y: its size and fresh
 * examples into r->n and r->local_fresh. 0, 1 at the end of the data, or
 * -1 with a message (a pipeline error, a batch of the wrong shape). */
static int next_batch(trainer *t, step_result *r, char *err, size_t errlen)
{
    ef_sample *s;
    int st = ef_pipeline_next(t->job->train, &s);
    if (st == EF_END)
        return 1;
    if (st != EF_OK)
        return fail(err, errlen, "%s", ef_pipeline_error(t->job->train));
    ef_sample_id id = ef_sample_identity(s);
    int rc = unpack(s, t->cfg->mean, t->cfg->std, t->cfg->batch, &t->dim,
                    t->x, t->y, &r->n, err, errlen);
    if (rc == 0)
        t->res->samples_hash = hash_batch(t->res->samples_hash, s, id);
    if (rc == 0 && t->ids) { /* before the free: the batch holds them */
        int64_t k = ef_sample_members(s, t->ids, t->cfg->batch);
        if (k != r->n)
            rc = fail(err, errlen,
                      "train: the echo policy's feedback needs each batch's "
                      "examples by identity, but this batch of %d names %lld",
                      r->n, (long long)k);
    }
    ef_sample_free(s);
    r->local_fresh = id.echo_copy == 0 ? id.fresh : 0;
    return rc;
}

/* Feeds the values of the step's n examples back to the training pipeline
 * (t->values holds their training losses). A step
 * with a loss that is not finite feeds nothing: the pipeline would refuse
 * it, and the run stops there as diverged. */
static int feed_back(trainer *t, int n, char *err, size_t errlen)
{
    if (!t->ids || n == 0)
        return 0;
    for (int i = 0; i < n; i++)
        if (!isfinite(t->values[i]))
            return 0;
    int st = ef_pipeline_feedback(t->job->train, t->ids, t->values, (size_t)n);
    if (st != EF_OK)
        return fail(err, errlen, "train: feedback to the pipeline: %s",
                    ef_strerror(st));
    t->res->feedback_values += n;
    return 0;
}

/* One step of a data-parallel run: every process takes part in each, one
 * whose data ran out with no examples, until every one's has run out
 * (returns 1). A process that failed makes every one stop (-1). */
static int dist_step(trainer *t, double lr, step_result *r, char *err,
                     size_t errlen)
{
    memset(r, 0, sizeof *r);
    int failed = next_batch(t, r, err, errlen) < 0;
    if (failed)
        r->n = 0, r->local_fresh = 0;
    double counts[3] = {r->n, (double)r->local_fresh, failed};
    if (eft_dist_sum(&t->d, counts, 3, err, errlen))
        return -1;
    if (counts[2] > 0) {
        if (!failed)
            fail(err, errlen,
                 "another process failed (its own message says why)");
        return -1;
    }
    if (counts[0] == 0)
        return 1; /* every process's data ran out */
    r->total_n = counts[0];
    r->total_fresh = counts[1];
    double local_loss =
        r->n ? eft_model_run_each(t->m, t->x, t->y, r->n, 1, NULL, t->values)
             : 0;
    if (eft_dist_average(&t->d, t->m, r->n, local_loss, r->total_n, &r->loss,
                         err, errlen))
        return -1;
    eft_model_sgd_step(t->m, &t->opt, lr);
    if (t->cfg->check_sync) {
        int same;
        if (eft_dist_in_sync(&t->d, t->m, &same, err, errlen))
            return -1;
        if (!same) {
            fail(err, errlen,
                 "the processes' weights differ after a step: their "
                 "gradients did not sum to the same values");
            return -1;
        }
    }
    /* each process its own examples, to its own pipeline */
    return feed_back(t, r->n, err, errlen);
}

/* One step of a single process; returns 1 when the data ran out. */
static int local_step(trainer *t, double lr, step_result *r, char *err,
                      size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = next_batch(t, r, err, errlen);
    if (rc != 0)
        return rc;
    r->total_n = r->n;
    r->total_fresh = (double)r->local_fresh;
    /* eft_model_train_batch, with each example's loss when fed back */
    r->loss = eft_model_run_each(t->m, t->x, t->y, r->n, 1, NULL, t->values);
    eft_model_sgd_step(t->m, &t->opt, lr);
    return feed_back(t, r->n, err, errlen);
}

/* Evaluates on the held-out set (each process its slice, in a data-parallel
 * run) into p, timed apart from training. */
static int evaluate(trainer *t, eft_progress *p, char *err, size_t errlen)
{
    const eft_dataset *test = t->job->test;
    double te = now_s();
    int rc = 0;
    if (t->d.comm)
        rc = eft_dist_evaluate(&t->d, t->m, test->x, test->y, test->n,
                               &p->loss, &p->accuracy, err, errlen);
    else
        eft_model_evaluate(t->m, test->x, test->y, test->n, &p->loss,
                           &p->accuracy);
    p->eval_s += now_s() - te;
    p->evaluated = rc == 0;
    t->evaluated_at = p->fresh;
    return rc;
}

/* Training time so far: this process's since its first batch, less
 * evaluations and checkpoints, and a resumed run's before it. */
static double train_time(const trainer *t)
{
    const eft_result *res = t->res;
    return t->train_base + (now_s() - t->t0) -
           (res->final.eval_s - t->eval_base) - t->ckpt_s;
}

/* Saves the run to cfg->checkpoint with the training pipeline's state;
 * `ended`: it trains no further. Its time is kept out of training time. */
static int checkpoint(trainer *t, int ended, char *err, size_t errlen)
{
    const char *path = t->cfg->checkpoint;
    ef_pipeline *train = t->job->train;
    double start = now_s();
    size_t n;
    int st = ef_pipeline_save_state(train, NULL, 0, &n);
    if (st == EF_OK && n > t->state_cap) {
        void *b = realloc(t->state, n);
        if (!b)
            return fail(err, errlen, "%s: checkpoint: out of memory", path);
        t->state = b;
        t->state_cap = n;
    }
    if (st == EF_OK)
        st = ef_pipeline_save_state(train, t->state, t->state_cap, &n);
    if (st != EF_OK)
        return fail(err, errlen,
                    "%s: cannot save the training pipeline's position: %s",
                    path, ef_pipeline_error(train));
    eft_run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.res = *t->res;
    rs.next_eval = t->next_eval;
    rs.evaluated_at = t->evaluated_at;
    memcpy(rs.loss_window, t->loss_window, sizeof rs.loss_window);
    rs.finished = ended;
    if (eft_checkpoint_save(path, &t->id, t->m, &rs, t->state, n, err,
                            errlen))
        return -1;
    double took = now_s() - start;
    t->res->checkpoints++;
    t->res->checkpoint_s += took;
    t->ckpt_s += t->t0 > 0 ? took : 0;
    return 0;
}

/* Loads cfg->checkpoint when there is one: the model, the counters and
 * the training pipeline's position. Returns 0 (also when there is none:
 * the run starts afresh), or -1 with a message. */
static int resume(trainer *t, char *err, size_t errlen)
{
    const char *path = t->cfg->checkpoint;
    ef_pipeline *train = t->job->train;
    double start = now_s();
    eft_run_state rs;
    void *state = NULL;
    size_t n = 0;
    int rc = eft_checkpoint_load(path, &t->id, t->m, &rs, &state, &n, err,
                                 errlen);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    int st = ef_pipeline_restore_state(train, state, n);
    free(state);
    if (st == EF_ESPEC)
        return fail(err, errlen,
                    "%s: saved from another training pipeline: %s", path,
                    ef_pipeline_error(train));
    if (st != EF_OK)
        return fail(err, errlen,
                    "%s: cannot restore the training pipeline's position: "
                    "%s",
                    path, ef_pipeline_error(train));
    *t->res = rs.res;
    t->res->resumed = 1;
    t->res->resumed_at_step = rs.res.final.steps;
    t->next_eval = rs.next_eval;
    t->evaluated_at = rs.evaluated_at;
    memcpy(t->loss_window, rs.loss_window, sizeof t->loss_window);
    t->finished = rs.finished;
    /* a checkpoint is of one process, which fed back every example it
       trained on: the count need not be saved */
    t->res->feedback_values = t->ids ? rs.res.final.examples : 0;
    t->train_base = rs.res.final.train_s;
    t->eval_base = rs.res.final.eval_s;
    t->res->resume_s = now_s() - start;
    if (t->job->resumed)
        t->job->resumed(t->job->user, &t->res->final);
    return 0;
}

/* The loop: steps until the target, the budget or the end of the data. */
static int train_loop(trainer *t, eft_result *res, char *err, size_t errlen)
{
    const eft_config *cfg = t->cfg;
    const eft_job *job = t->job;
    eft_progress *p = &res->final;
    double *loss_window = t->loss_window;
    while (p->fresh < cfg->max_fresh) {
        step_result r;
        double lr = lr_at(cfg, p->steps, p->fresh);
        int st = cfg->comm ? dist_step(t, lr, &r, err, errlen)
                           : local_step(t, lr, &r, err, errlen);
        if (t->t0 == 0)
            t->t0 = now_s();
        if (st != 0)
            return st < 0 ? -1 : 0; /* 1: the data ran out before the budget */
        loss_window[p->steps % EFT_LOSS_WINDOW] = r.loss;
        p->steps++;
        if (!isfinite(r.loss)) {
            /* the weights are NaN or infinite now; no step brings them
               back, so training on would only burn the budget */
            res->diverged_at_step = p->steps;
        }
        p->examples += (long)r.total_n;
        p->fresh += (long)r.total_fresh;
        res->local_fresh += r.local_fresh;
        res->local_batches += r.n > 0;
        int window =
            p->steps < EFT_LOSS_WINDOW ? (int)p->steps : EFT_LOSS_WINDOW;
        p->train_loss = 0;
        for (int i = 0; i < window; i++)
            p->train_loss += loss_window[i] / window;

        int evaluate_now = job->test && p->fresh >= t->next_eval;
        if (evaluate_now) {
            p->train_s = train_time(t);
            if (evaluate(t, p, err, errlen))
                return -1;
            while (t->next_eval <= p->fresh)
                t->next_eval += cfg->eval_every;
            if (!res->reached && cfg->target_acc > 0 &&
                p->accuracy >= cfg->target_acc) {
                res->reached = 1;
                res->fresh_to_target = p->fresh;
                res->steps_to_target = p->steps;
                res->time_to_target_s = p->train_s;
            }
        }
        p->train_s = train_time(t);
        if (job->progress &&
            (evaluate_now ||
             (job->progress_steps > 0 && p->steps % job->progress_steps == 0)))
            job->progress(job->user, p, evaluate_now);
        if (res->reached || res->diverged_at_step)
            return 0;
        if (cfg->checkpoint && cfg->checkpoint_every > 0 &&
            p->steps % cfg->checkpoint_every == 0 &&
            checkpoint(t, 0, err, errlen))
            return -1;
    }
    return 0;
}

/* Before the first step of a run with checkpoints: what identifies the
 * run, then the checkpoint to go on from (with resume), or else a first
 * checkpoint, so that a path that cannot be written or a pipeline whose
 * position cannot be saved fails now rather than steps later. */
static int setup_checkpoints(trainer *t, char *err, size_t errlen)
{
    const eft_config *cfg = t->cfg;
    const eft_dataset *test = t->job->test;
    if (cfg->comm && cfg->comm->size > 1)
        return fail(err, errlen,
                    "%s: a checkpoint holds one process's run; this is "
                    "one of %d",
                    cfg->checkpoint, cfg->comm->size);
    t->id.cfg = cfg;
    if (test) {
        uint64_t h = eft_hash(0, &test->dim, sizeof test->dim);
        h = eft_hash(h, test->x, (size_t)test->n * test->dim * sizeof(float));
        t->id.test_hash =
            eft_hash(h, test->y, (size_t)test->n * sizeof(int64_t));
    }
    if (cfg->resume && resume(t, err, errlen))
        return -1;
    return t->res->resumed ? 0 : checkpoint(t, 0, err, errlen);
}

int eft_train(const eft_job *job, eft_result *res, char *err, size_t errlen)
{
    const eft_config *cfg = job->cfg;
    memset(res, 0, sizeof *res);
    trainer t = {.job = job,
                 .cfg = cfg,
                 .opt = {cfg->momentum, cfg->weight_decay, cfg->nesterov},
                 .res = res,
                 .evaluated_at = -1,
                 .next_eval = cfg->eval_every};
    t.m = eft_model_create(cfg->arch, cfg->batch, cfg->threads, cfg->seed);
    if (t.m) {
        t.dim = eft_model_input_size(t.m);
        t.x = malloc((size_t)cfg->batch * t.dim * sizeof(float));
        t.y = malloc((size_t)cfg->batch * sizeof(int64_t));
    }
    int rc = 0, feedback_ok = 1;
    if (cfg->feedback) {
        t.ids = malloc((size_t)cfg->batch * sizeof *t.ids);
        t.values = malloc((size_t)cfg->batch * sizeof *t.values);
        feedback_ok = t.ids && t.values;
    }
    if (!t.m || !t.x || !t.y || !feedback_ok)
        rc = fail(err, errlen, "train: out of memory");
    else if (job->test && job->test->dim != t.dim)
        rc = fail(err, errlen,
                  "evaluation set: images of %zu values; the %s takes %zu",
                  job->test->dim, eft_arch_name(cfg->arch), t.dim);
    else if (cfg->comm && (eft_dist_init(&t.d, cfg->comm, t.m, err, errlen) ||
                           eft_dist_share_weights(&t.d, t.m, err, errlen)))
        rc = -1;
    int lock = -1; /* the checkpoint path is this run's alone */
    if (rc == 0 && cfg->checkpoint &&
        (lock = eft_checkpoint_lock(cfg->checkpoint, err, errlen)) < 0)
        rc = -1;
    if (rc == 0 && cfg->checkpoint)
        rc = setup_checkpoints(&t, err, errlen);
    if (rc == 0 && !t.finished)
        rc = train_loop(&t, res, err, errlen);
    eft_progress *p = &res->final;
    /* a final evaluation when the last one is stale */
    if (rc == 0 && !t.finished && job->test && !res->reached &&
        t.evaluated_at != p->fresh) {
        rc = evaluate(&t, p, err, errlen);
        if (job->progress && rc == 0)
            job->progress(job->user, p, 1);
    }
    res->train_examples_per_s =
        p->train_s > 0 ? (double)p->examples / p->train_s : 0;
    res->comm_s = t.d.comm_s;
    if (rc == 0 && cfg->checkpoint && !t.finished)
        rc = checkpoint(&t, 1, err, errlen);
    eft_checkpoint_unlock(cfg->checkpoint, lock);
    if (t.m)
        res->weights_hash = eft_model_hash(t.m);
    if (rc == 0 && cfg->save_model && (!cfg->comm || cfg->comm->rank == 0))
        rc = eft_model_save(t.m, cfg->save_model, err, errlen);
    eft_dist_free(&t.d);
    eft_model_destroy(t.m);
    free(t.x);
    free(t.y);
    free(t.state);
    free(t.ids);
    free(t.values);
    return rc;
}
