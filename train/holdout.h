/* The irreducible-loss (IL) model of RHO-LOSS (Mindermann et al. 2022,
 * "Prioritized training on points that are learnable, worth learning, and
 * not yet learnt"): a small model trained once, before training, on
 * records held out of the training data. An example's reducible loss is
 * its training loss less its loss under this model: high for what the
 * model has not learnt yet but can, low for what is learnt already (low
 * training loss) and for what cannot be (noisy or ambiguous: high IL
 * loss too). Echo policy `reducible` echoes by that value. */
#ifndef EFT_HOLDOUT_H
#define EFT_HOLDOUT_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "trainer.h"

typedef struct {
    eft_arch arch;
    int passes, batch, threads;
    double lr, momentum;
    uint64_t seed;
} eft_holdout_config;

/* The defaults (see holdout.c for why), seeded by `seed`. */
void eft_holdout_defaults(eft_holdout_config *c, uint64_t seed);

/* Trains a new model on every example of `data` (passes over it in a
 * seeded order). The model takes batches of up to max(max_batch,
 * c->batch) for the trainer's forward passes; the caller frees it with
 * eft_model_destroy. NULL with a message in err (no memory, no data,
 * inputs the model does not take). */
eft_model *eft_holdout_train(const eft_holdout_config *c,
                             const eft_dataset *data, int max_batch, char *err,
                             size_t errlen);

#endif
