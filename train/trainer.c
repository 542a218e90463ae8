/* SPDX-License-Identifier: Apache-2.0 */
/* The training loop (see trainer.h). */
#include "trainer.h"

#include "checkpoint.h"
#include "distributed.h"
#include "partitions.h"

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
    void *state; /* a partition's pipeline state, for checkpoints */
    size_t state_cap;
    /* the partitions this process hosts (eft_job), and the one that gave
     * the step's batch */
    eft_partition *parts;
    int nparts, cur;
    int partitions; /* of the run, on every process */
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
    eft_partition *part;
    int st = EF_END;
    while (st == EF_END) { /* the partition whose turn it is, or the next */
        int k = eft_partition_turn(t->parts, t->nparts);
        if (k < 0)
            return 1;
        part = &t->parts[k];
        t->cur = k;
        st = ef_pipeline_next(part->p, &s);
        part->ended = st == EF_END;
    }
    if (st != EF_OK)
        return fail(err, errlen, "%s", ef_pipeline_error(part->p));
    ef_sample_id id = ef_sample_identity(s);
    int rc = unpack(s, t->cfg->mean, t->cfg->std, t->cfg->batch, &t->dim,
                    t->x, t->y, &r->n, err, errlen);
    if (rc == 0)
        part->samples_hash = hash_batch(part->samples_hash, s, id);
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
    part->fresh += r->local_fresh;
    part->batches += r->n > 0;
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
    eft_partition *part = &t->parts[t->cur]; /* the batch's */
    int st = ef_pipeline_feedback(part->p, t->ids, t->values, (size_t)n);
    if (st != EF_OK)
        return fail(err, errlen, "train: feedback to the pipeline: %s",
                    ef_strerror(st));
    part->feedback_values += n;
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

/* With comm: makes a failure of any process every process's, after the
 * collective that tells them (-1 on all; 0 when none failed). A process
 * that did not fail itself says which did, `what` (after the path); each
 * that did keeps its own message. */
static int together(trainer *t, int failed, const char *what, char *err,
                    size_t errlen)
{
    int first;
    if (eft_dist_first_failed(&t->d, failed, &first, err, errlen))
        return -1;
    if (first < 0)
        return 0;
    t->res->shared_failure = 1;
    if (!failed)
        fail(err, errlen, "%s: rank %d %s (its own message says why)",
             t->cfg->checkpoint, first, what);
    return -1;
}

/* What this process's partitions gave, into the run's result: their sums
 * and one samples hash (the partition's own when it hosts one). */
static void sum_parts(trainer *t)
{
    eft_result *r = t->res;
    r->local_fresh = r->local_batches = r->feedback_values = 0;
    r->samples_hash = t->nparts == 1 ? t->parts[0].samples_hash : 0;
    for (int k = 0; k < t->nparts; k++) {
        const eft_partition *part = &t->parts[k];
        r->local_fresh += part->fresh;
        r->local_batches += part->batches;
        r->feedback_values += part->feedback_values;
        if (t->nparts > 1)
            r->samples_hash =
                eft_hash(r->samples_hash, &part->samples_hash,
                         sizeof part->samples_hash);
    }
}

/* A pipeline's state into t->state; its size into *n. */
static int save_pipeline(trainer *t, ef_pipeline *p, size_t *n, char *err,
                         size_t errlen)
{
    const char *path = t->cfg->checkpoint;
    int st = ef_pipeline_save_state(p, NULL, 0, n);
    if (st == EF_OK && *n > t->state_cap) {
        void *b = realloc(t->state, *n);
        if (!b)
            return fail(err, errlen, "%s: checkpoint: out of memory", path);
        t->state = b;
        t->state_cap = *n;
    }
    if (st == EF_OK)
        st = ef_pipeline_save_state(p, t->state, t->state_cap, n);
    if (st != EF_OK)
        return fail(err, errlen,
                    "%s: cannot save the training pipeline's position: %s",
                    path, ef_pipeline_error(p));
    return 0;
}

/* The parts (eft_part) of the partitions this process hosts, one after
 * another in the order it hosts them: allocated into *out (the caller
 * frees it). */
static int encode_parts(trainer *t, unsigned char **out, size_t *out_n,
                        char *err, size_t errlen)
{
    *out = NULL;
    *out_n = 0;
    for (int k = 0; k < t->nparts; k++) {
        const eft_partition *part = &t->parts[k];
        size_t n;
        if (save_pipeline(t, part->p, &n, err, errlen))
            break;
        unsigned char *b = realloc(*out, *out_n + EFT_PART_HEADER + n);
        if (!b) {
            fail(err, errlen, "%s: checkpoint: out of memory",
                 t->cfg->checkpoint);
            break;
        }
        *out = b;
        const eft_part e = {part->fresh,        part->batches,
                            part->feedback_values, part->samples_hash,
                            t->state,           n};
        eft_part_encode(&e, *out + *out_n);
        *out_n += EFT_PART_HEADER + n;
        if (k == t->nparts - 1)
            return 0;
    }
    free(*out);
    *out = NULL;
    *out_n = 0;
    return -1;
}

/* Writes the checkpoint of a run of partitions from the processes' parts
 * (rank r's counts[r] bytes at all, one after another). */
static int save_parts(trainer *t, const eft_run_state *rs,
                      const unsigned char *all, const size_t *counts,
                      int ranks, char *err, size_t errlen)
{
    const char *path = t->cfg->checkpoint;
    size_t *part_n = malloc((size_t)t->partitions * sizeof *part_n);
    unsigned char *parts = NULL;
    int rc = part_n ? eft_parts_from_ranks(all, counts, ranks, t->partitions,
                                           &parts, part_n)
                    : -2;
    if (rc)
        fail(err, errlen, "%s: checkpoint: %s", path,
             rc == -1 ? "a process's parts are not whole" : "out of memory");
    else
        rc = eft_checkpoint_save_parts(path, &t->id, t->m, rs, t->partitions,
                                       parts, part_n, err, errlen);
    free(parts);
    free(part_n);
    return rc;
}

/* A data-parallel checkpoint, from every process at the same step: each
 * one's parts go to process 0, which writes the file alone; then every
 * process learns whether all went well. */
static int checkpoint_ranks(trainer *t, const eft_run_state *rs, char *err,
                            size_t errlen)
{
    const eft_comm *c = t->cfg->comm;
    unsigned char *mine = NULL;
    size_t mine_n = 0; /* a process that failed sends nothing */
    int failed = encode_parts(t, &mine, &mine_n, err, errlen) != 0;
    if (t->cfg->shared_state) { /* every part is the job's: process 0's */
        if (c->rank == 0 && !failed)
            failed = eft_checkpoint_save_parts(t->cfg->checkpoint, &t->id,
                                               t->m, rs, 1, mine, &mine_n,
                                               err, errlen) != 0;
        free(mine);
        return together(t, failed,
                        "could not save its part of the checkpoint", err,
                        errlen);
    }
    void *all = NULL;
    size_t *counts =
        c->rank == 0 ? calloc((size_t)c->size, sizeof *counts) : NULL;
    if (c->rank == 0 && !counts && !failed)
        failed = fail(err, errlen, "%s: checkpoint: out of memory",
                      t->cfg->checkpoint) != 0;
    size_t ignored[1];
    int rc = c->gather_bytes(c->user, mine, mine_n, &all,
                             counts ? counts : ignored, err, errlen);
    free(mine);
    if (rc == 0 && c->rank == 0 && !failed) {
        int whole = 1; /* no process sent nothing: none failed */
        for (int r = 0; r < c->size; r++)
            whole &= counts[r] > 0;
        if (whole)
            failed = save_parts(t, rs, all, counts, c->size, err, errlen) != 0;
    }
    free(all);
    free(counts);
    if (rc)
        return -1;
    return together(t, failed, "could not save its part of the checkpoint", err,
                    errlen);
}

/* Saves the run to cfg->checkpoint with its partitions' states; `ended`:
 * it trains no further. Its time is kept out of training time. */
static int checkpoint(trainer *t, int ended, char *err, size_t errlen)
{
    double start = now_s();
    sum_parts(t);
    eft_run_state rs;
    memset(&rs, 0, sizeof rs);
    rs.res = *t->res;
    rs.next_eval = t->next_eval;
    rs.evaluated_at = t->evaluated_at;
    memcpy(rs.loss_window, t->loss_window, sizeof rs.loss_window);
    rs.finished = ended;
    if (t->cfg->comm) {
        if (checkpoint_ranks(t, &rs, err, errlen))
            return -1;
    } else if (t->partitions > 1) {
        unsigned char *mine;
        size_t n;
        if (encode_parts(t, &mine, &n, err, errlen))
            return -1;
        int rc = save_parts(t, &rs, mine, &n, 1, err, errlen);
        free(mine);
        if (rc)
            return -1;
    } else {
        size_t n = 0;
        if (save_pipeline(t, t->parts[0].p, &n, err, errlen) ||
            eft_checkpoint_save(t->cfg->checkpoint, &t->id, t->m, &rs,
                                t->state, n, err, errlen))
            return -1;
    }
    double took = now_s() - start;
    t->res->checkpoints++;
    t->res->checkpoint_s += took;
    t->ckpt_s += t->t0 > 0 ? took : 0;
    return 0;
}

/* Restores a pipeline's position from n bytes of state. */
static int restore_pipeline(trainer *t, ef_pipeline *p, const void *state,
                            size_t n, char *err, size_t errlen)
{
    const char *path = t->cfg->checkpoint;
    int st = ef_pipeline_restore_state(p, state, n);
    if (st == EF_ESPEC)
        return fail(err, errlen,
                    "%s: saved from another training pipeline: %s", path,
                    ef_pipeline_error(p));
    if (st != EF_OK)
        return fail(err, errlen,
                    "%s: cannot restore the training pipeline's position: "
                    "%s",
                    path, ef_pipeline_error(p));
    return 0;
}

/* Restores the partitions this process hosts from their parts, n bytes
 * one after another in the order it hosts them. */
static int restore_parts(trainer *t, const unsigned char *bytes, size_t n,
                         char *err, size_t errlen)
{
    for (int k = 0; k < t->nparts; k++) {
        size_t size = eft_part_size(bytes, n);
        eft_part e;
        if (size == 0 || eft_part_decode(bytes, size, &e))
            return fail(err, errlen,
                        "%s: corrupt: the part of this process's partition "
                        "%d is not whole",
                        t->cfg->checkpoint, k);
        eft_partition *part = &t->parts[k];
        if (restore_pipeline(t, part->p, e.state, e.state_n, err, errlen))
            return -1;
        part->fresh = e.fresh;
        part->batches = e.batches;
        part->feedback_values = e.feedback_values;
        part->samples_hash = e.samples_hash;
        bytes += size;
        n -= size;
    }
    if (n != 0)
        return fail(err, errlen, "%s: corrupt: %zu bytes after this process's "
                                 "parts",
                    t->cfg->checkpoint, n);
    return 0;
}

/* Goes on from the loaded run state rs: the counters, the loop's state and
 * the time before; `start`: when reading it began. */
static void resumed_from(trainer *t, const eft_run_state *rs, double start)
{
    *t->res = rs->res;
    t->res->resumed = 1;
    t->res->resumed_at_step = rs->res.final.steps;
    t->next_eval = rs->next_eval;
    t->evaluated_at = rs->evaluated_at;
    memcpy(t->loss_window, rs->loss_window, sizeof t->loss_window);
    t->finished = rs->finished;
    t->train_base = rs->res.final.train_s;
    t->eval_base = rs->res.final.eval_s;
    t->res->resume_s = now_s() - start;
    if (t->job->resumed)
        t->job->resumed(t->job->user, &t->res->final);
}

/* Loads cfg->checkpoint when there is one: the model, the counters and
 * the partitions' positions. Returns 0 (also when there is none: the run
 * starts afresh), or -1 with a message. */
static int resume(trainer *t, char *err, size_t errlen)
{
    double start = now_s();
    eft_run_state rs;
    unsigned char *parts = NULL;
    size_t *part_n = NULL, n = 0;
    int one = t->partitions == 1, rc;
    if (one)
        rc = eft_checkpoint_load(t->cfg->checkpoint, &t->id, t->m, &rs,
                                 (void **)&parts, &n, err, errlen);
    else
        rc = eft_checkpoint_load_parts(t->cfg->checkpoint, &t->id,
                                       t->partitions, t->m, &rs, &parts,
                                       &part_n, err, errlen);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    for (int p = 0; !one && p < t->partitions; p++)
        n += part_n[p];
    rc = one ? restore_pipeline(t, t->parts[0].p, parts, n, err, errlen)
             : restore_parts(t, parts, n, err, errlen);
    free(parts);
    free(part_n);
    if (rc)
        return -1;
    resumed_from(t, &rs, start);
    if (one) { /* version 1 keeps them in the run's counters */
        eft_partition *part = &t->parts[0];
        part->fresh = rs.res.local_fresh;
        part->batches = rs.res.local_batches;
        part->samples_hash = rs.res.samples_hash;
        /* it fed back every example it trained on: the count need not be
           saved */
        part->feedback_values = t->ids ? rs.res.final.examples : 0;
    }
    return 0;
}

/* The partitions a checkpoint of this run holds: one when their states
 * are the job's (eft_config.shared_state). */
static int file_parts(const trainer *t)
{
    return t->cfg->shared_state ? 1 : t->partitions;
}

/* The one part of a run whose states are the job's, n bytes, dealt to
 * every one of `ranks` processes: into *out (allocated; the caller frees
 * it) with each one's size in counts[]. Returns 0, or -1 without
 * memory. */
static int share_part(const unsigned char *part, size_t n, int ranks,
                      unsigned char **out, size_t *counts)
{
    *out = malloc(n * (size_t)ranks + 1);
    for (int r = 0; *out && r < ranks; r++) {
        memcpy(*out + n * (size_t)r, part, n);
        counts[r] = n;
    }
    return *out ? 0 : -1;
}

/* Process 0 reads the checkpoint of a data-parallel run and tells every
 * process how that went (*status: 0 read, 1 none there, -1 failed, its
 * message on process 0); with one read, its model, momentum and run state
 * *rs go to every process and the parts of the partitions each hosts to
 * it, into *mine (allocated; the caller frees it). */
static int deal_checkpoint(trainer *t, eft_run_state *rs, int32_t *status,
                           void **mine, size_t *mine_n, char *err,
                           size_t errlen)
{
    const eft_comm *c = t->cfg->comm;
    unsigned char *parts = NULL, *by_rank = NULL;
    size_t *part_n = NULL, *counts = NULL;
    if (c->rank == 0) {
        *status = (int32_t)eft_checkpoint_load_parts(
            t->cfg->checkpoint, &t->id, file_parts(t), t->m, rs, &parts,
            &part_n, err, errlen);
        counts = calloc((size_t)c->size, sizeof *counts);
        if (*status == 0 &&
            (!counts ||
             (t->cfg->shared_state
                  ? share_part(parts, part_n[0], c->size, &by_rank, counts)
                  : eft_parts_to_ranks(parts, part_n, c->size, t->partitions,
                                       &by_rank, counts))))
            *status = fail(err, errlen, "%s: out of memory",
                           t->cfg->checkpoint);
    }
    int rc = c->broadcast_bytes(c->user, status, sizeof *status, err, errlen);
    if (rc == 0 && *status == 0)
        rc = eft_dist_share_weights(&t->d, t->m, err, errlen) ||
             eft_dist_share_momentum(&t->d, t->m, err, errlen) ||
             c->broadcast_bytes(c->user, rs, sizeof *rs, err, errlen) ||
             c->scatter_bytes(c->user, by_rank, counts, mine, mine_n, err,
                              errlen);
    free(parts);
    free(part_n);
    free(by_rank);
    free(counts);
    return rc ? -1 : 0;
}

/* resume() for a data-parallel run: process 0 reads the file, every
 * process restores the partitions it hosts, and a failure anywhere ends
 * every process, the one that failed naming itself. */
static int resume_ranks(trainer *t, char *err, size_t errlen)
{
    double start = now_s();
    eft_run_state rs;
    memset(&rs, 0, sizeof rs);
    int32_t status = 0;
    void *bytes = NULL;
    size_t n = 0;
    if (deal_checkpoint(t, &rs, &status, &bytes, &n, err, errlen))
        return -1;
    if (status == 1)
        return 0; /* none yet: every process starts afresh */
    if (status < 0) {
        t->res->shared_failure = 1;
        if (t->cfg->comm->rank != 0)
            fail(err, errlen,
                 "%s: rank 0 could not read it (its own message "
                 "says why)",
                 t->cfg->checkpoint);
        return -1;
    }
    int failed = restore_parts(t, bytes, n, err, errlen);
    free(bytes);
    /* process 0's counters are not this one's: its own count from here */
    for (int k = 0; t->cfg->shared_state && k < t->nparts; k++) {
        eft_partition *part = &t->parts[k];
        part->fresh = part->batches = part->feedback_values = 0;
        part->samples_hash = 0;
    }
    if (together(t, failed != 0, "could not restore its part of the checkpoint",
                 err, errlen))
        return -1;
    resumed_from(t, &rs, start);
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
    t->id.cfg = cfg;
    if (test) {
        uint64_t h = eft_hash(0, &test->dim, sizeof test->dim);
        h = eft_hash(h, test->x, (size_t)test->n * test->dim * sizeof(float));
        t->id.test_hash =
            eft_hash(h, test->y, (size_t)test->n * sizeof(int64_t));
    }
    if (cfg->resume &&
        (cfg->comm ? resume_ranks(t, err, errlen) : resume(t, err, errlen)))
        return -1;
    return t->res->resumed ? 0 : checkpoint(t, 0, err, errlen);
}

/* The partitions this process hosts, from the job, into t; -1 with a
 * message when they are not the rank's share of cfg->partitions. */
static int host_partitions(trainer *t, char *err, size_t errlen)
{
    const eft_job *job = t->job;
    const eft_comm *c = t->cfg->comm;
    int ranks = c ? c->size : 1;
    t->partitions = t->cfg->partitions > 0 ? t->cfg->partitions : ranks;
    t->nparts = job->parts ? job->nparts : 1;
    if (t->cfg->shared_state && t->partitions != ranks)
        return fail(err, errlen,
                    "train: %d partitions on %d processes: a pipeline whose "
                    "state is the job's (the service, which deals the "
                    "data) takes one partition per process",
                    t->partitions, ranks);
    if (t->partitions % ranks != 0 || t->nparts != t->partitions / ranks)
        return fail(err, errlen,
                    "train: %d partitions on %d processes: each hosts %g, "
                    "and this one was given %d pipelines",
                    t->partitions, ranks, (double)t->partitions / ranks,
                    t->nparts);
    t->parts = calloc((size_t)t->nparts, sizeof *t->parts);
    if (!t->parts)
        return fail(err, errlen, "train: out of memory");
    for (int k = 0; k < t->nparts; k++)
        t->parts[k].p = job->parts ? job->parts[k] : job->train;
    return 0;
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
    else if (host_partitions(&t, err, errlen))
        rc = -1;
    else if (job->test && job->test->dim != t.dim)
        rc = fail(err, errlen,
                  "evaluation set: images of %zu values; the %s takes %zu",
                  job->test->dim, eft_arch_name(cfg->arch), t.dim);
    else if (cfg->comm && (eft_dist_init(&t.d, cfg->comm, t.m, err, errlen) ||
                           eft_dist_share_weights(&t.d, t.m, err, errlen)))
        rc = -1;
    /* the checkpoint path is this run's alone; in a data-parallel run,
     * process 0's, which alone writes it */
    int lock = -1, locking = rc == 0 && cfg->checkpoint;
    if (locking && (!cfg->comm || cfg->comm->rank == 0) &&
        (lock = eft_checkpoint_lock(cfg->checkpoint, err, errlen)) < 0)
        rc = -1;
    if (locking && cfg->comm)
        rc = together(&t, rc != 0, "could not lock it", err, errlen);
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
    if (t.parts)
        sum_parts(&t);
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
    free(t.parts);
    return rc;
}
