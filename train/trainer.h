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
} eft_config;

/* Set where config fields have no default of their own. */
void eft_config_defaults(eft_config *c);

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
} eft_result;

/* Called after every evaluation (evaluated = 1) and every `every_steps`
 * steps otherwise. */
typedef void (*eft_progress_fn)(void *user, const eft_progress *p,
                                int evaluated);

typedef struct {
    const float *x; /* n x 784 floats, normalised like training inputs */
    const int64_t *y;
    int n;
} eft_dataset;

/* Loads every sample of `p` (fields image and label) into memory, images
 * normalised with mean and std. The caller frees x and y with free().
 * Returns 0, or -1 with a message in err. */
int eft_dataset_load(ef_pipeline *p, double mean, double std, eft_dataset *out,
                     char *err, size_t errlen);

/* Trains until the target or the budget. Returns 0, or -1 with a message
 * in err (a pipeline error, a batch of the wrong shape, no memory). */
int eft_train(const eft_config *cfg, ef_pipeline *train,
              const eft_dataset *test, eft_progress_fn progress,
              long every_steps, void *user, eft_result *res, char *err,
              size_t errlen);

#endif
