/* SPDX-License-Identifier: Apache-2.0 */
/* The training loop: pulls batches from an echoflow pipeline, trains a
 * model, evaluates on a held-out set every so many fresh examples, and
 * stops at a target accuracy or a budget of fresh examples. Uses the
 * public echoflow API only. */
#ifndef EFT_TRAINER_H
#define EFT_TRAINER_H

#include <stddef.h>
#include <stdint.h>

#include "echoflow/echoflow.h"
#include "model.h"

typedef enum { EFT_LR_CONSTANT = 0, EFT_LR_LINEAR } eft_schedule;

/* Collectives among the processes of a data-parallel run, each training a
 * replica of the model on its own part of the data (see distributed.h).
 * The trainer stays free of any communication library: the caller (the
 * echoflow command, with MPI) supplies them. Each returns 0, or -1 with a
 * message in err. */
typedef struct {
    int rank, size;
    void *user;
    /* v[i] becomes the sum of v[i] over the processes, on every one */
    int (*sum_floats)(void *user, float *v, size_t n, char *err, size_t len);
    int (*sum_doubles)(void *user, double *v, size_t n, char *err,
                       size_t len);
    /* v becomes process 0's v on every process */
    int (*broadcast)(void *user, float *v, size_t n, char *err, size_t len);
    /* *same becomes 1 when every process passed the same value */
    int (*agree)(void *user, uint64_t value, int *same, char *err, size_t len);
    /* process 0 gets every process's n values, by rank, in all[] */
    int (*gather)(void *user, const double *mine, size_t n, double *all,
                  char *err, size_t len);
    /* Checkpoints. Process 0 gets every process's bytes (n at mine),
     * one after another by rank, in *all (allocated; the caller frees
     * it) and their sizes in counts[] (size entries, allocated by the
     * caller); elsewhere *all and counts are left alone. */
    int (*gather_bytes)(void *user, const void *mine, size_t n, void **all,
                        size_t *counts, char *err, size_t len);
    /* Each process gets its part of process 0's `all` (counts[r] bytes
     * for rank r, one after another; read on process 0 only) in *mine
     * (allocated; the caller frees it) and *n. */
    int (*scatter_bytes)(void *user, const void *all, const size_t *counts,
                         void **mine, size_t *n, char *err, size_t len);
    /* n bytes at buf become process 0's on every process */
    int (*broadcast_bytes)(void *user, void *buf, size_t n, char *err,
                           size_t len);
} eft_comm;

typedef struct {
    eft_arch arch;
    int batch;   /* the largest batch the pipeline yields */
    int threads; /* data-parallel threads (see model.h) */
    uint64_t seed;
    double lr, momentum, weight_decay;
    int nesterov;
    eft_schedule schedule; /* linear: decays to 0 at max_fresh */
    long warmup_steps;     /* linear warm-up from 0 over this many steps */
    double target_acc;     /* stop when reached (0: never) */
    long eval_every;       /* fresh examples between evaluations */
    long max_fresh;        /* stop after this many fresh examples */
    double mean, std;      /* u8 images become (x / 255 - mean) / std */
    const eft_comm *comm;  /* a data-parallel run; NULL: one process */
    int check_sync;        /* with comm: after every step, check that every
                              process holds the same weights, bit for bit */
    const char *save_model; /* eft_model_save() the weights here at the
                               end (process 0 of a data-parallel run) */
    /* Checkpoints (checkpoint.h): the run is saved to `checkpoint`
     * before the first step (unless resumed), every `checkpoint_every`
     * steps and at the end. With `resume`, a checkpoint already there is
     * loaded first and the run goes on from it (the training pipeline
     * restored before its first next()); without, it is overwritten.
     * With comm, process 0 alone locks, reads and writes the file: each
     * partition's pipeline state is gathered to it after the step's
     * collective, and dealt back from it on resuming, on any number of
     * processes that divides the partitions (see eft_job). */
    const char *checkpoint;
    long checkpoint_every; /* steps; 0: at the start and the end only */
    int resume;
    /* Echo policies (ef_pipeline_feedback): after each step, every
     * example's value goes back to the training pipeline by identity:
     * its loss in the step's forward pass. Off, nothing is fed back and
     * the run is what it was without. */
    int feedback;
    /* The data's partitions (see eft_job): a multiple of the processes;
     * 0 is one per process. */
    int partitions;
    /* The pipelines' states are the job's, the same on every process (a
     * `service` spec: each process's state is what every trainer was
     * handed, the service deals the data): one partition per process,
     * and a checkpoint keeps one part, process 0's, which every process
     * restores, on any number of processes. Each process's own counters
     * (local_fresh, local_batches, samples_hash) then count from the
     * resume. */
    int shared_state;
} eft_config;

/* Set where config fields have no default of their own. */
void eft_config_defaults(eft_config *c);

/* With comm, fresh, steps and examples count every process's, and the
 * evaluation is of the whole held-out set, split across processes. */
typedef struct {
    long fresh, steps, examples; /* examples: fresh + echoed, trained on */
    double train_s, eval_s;      /* wall time training / evaluating */
    double accuracy, loss;       /* of the last evaluation */
    double train_loss;           /* mean over the last 50 steps */
    int evaluated;               /* at least one evaluation */
} eft_progress;

typedef struct {
    int reached;
    long fresh_to_target, steps_to_target;
    double time_to_target_s; /* training time, evaluation excluded */
    long diverged_at_step;   /* the step whose loss was not finite, or 0 */
    eft_progress final;
    double train_examples_per_s; /* examples trained on per training second */
    /* this process's part, with comm */
    long local_fresh, local_batches;
    double comm_s; /* time in collectives during training steps */
    /* What was trained on and what came of it, to compare runs bit for
     * bit: a hash chained over every batch of this process in order (its
     * identity, image bytes and labels), and one of the final weights. */
    uint64_t samples_hash, weights_hash;
    /* checkpoints, of this invocation */
    int resumed;          /* it went on from a checkpoint ... */
    long resumed_at_step; /* ... saved after this many steps */
    long checkpoints;     /* checkpoints written */
    double checkpoint_s;  /* time writing them (not training time) */
    double resume_s;      /* time reading one and restoring the pipeline */
    long feedback_values; /* values this process fed back (cfg.feedback) */
    /* with comm, after a failure: every process failed at the same
     * collective and knows it (each with its own message), so the job
     * can end in order rather than be aborted */
    int shared_failure;
} eft_result;

/* Called after every evaluation (evaluated = 1) and every `every_steps`
 * steps otherwise. */
typedef void (*eft_progress_fn)(void *user, const eft_progress *p,
                                int evaluated);

typedef struct {
    const float *x; /* n x dim floats, normalised like training inputs */
    const int64_t *y;
    int n;
    size_t dim; /* floats per example: the product of an image's shape */
} eft_dataset;

/* Loads every sample of `p` (fields image and label) into memory, images
 * normalised with mean and std. The caller frees x and y with free().
 * Returns 0, or -1 with a message in err. */
int eft_dataset_load(ef_pipeline *p, double mean, double std, eft_dataset *out,
                     char *err, size_t errlen);

/* What to train on and whom to tell.
 *
 * Partitions: the data is read as cfg->partitions partitions P, fixed for
 * the run whatever the number of processes M. Partition p is one pipeline
 * reading part p of P (shard=p/P), with its own shuffle and echo state;
 * the process of rank r hosts the partitions p with p % M == r, and each
 * step takes a batch from the one of them that has given the fewest
 * batches (the lowest p among equals; one whose data has ended is passed
 * over). So every partition's batches come in the same order whatever M,
 * and every round of P batches takes one from each partition; a
 * checkpoint holds each partition's state, and a run of P partitions
 * resumes on any M that divides P, each partition going on exactly where
 * it was saved. */
typedef struct {
    const eft_config *cfg;
    ef_pipeline *train;       /* batches of fields image and label: the
                                 one partition this process hosts */
    const eft_dataset *test;  /* the held-out set; NULL: no evaluations */
    eft_progress_fn progress; /* may be NULL */
    long progress_steps;      /* steps between progress calls besides
                                 evaluations; 0: at evaluations only */
    void *user;               /* passed to progress and resumed */
    /* Called once a checkpoint is loaded, with the progress it holds;
     * may be NULL. */
    void (*resumed)(void *user, const eft_progress *p);
    /* When this process hosts several partitions: their pipelines, nparts
     * of them (P / M), partitions rank, rank + M, ... in that order;
     * `train` is then unused. */
    ef_pipeline *const *parts;
    int nparts;
} eft_job;

/* Trains until the target or the budget. Returns 0, or -1 with a message
 * in err (a pipeline error, a batch of the wrong shape, a held-out set
 * whose examples the model does not take, a checkpoint that cannot be
 * written, or read, or is of another run, no memory). A run resumed from
 * a checkpoint of a run that had ended trains no further: it reports
 * what that run reported. */
int eft_train(const eft_job *job, eft_result *res, char *err, size_t errlen);

#endif
