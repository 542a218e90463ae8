/* SPDX-License-Identifier: Apache-2.0 */
/* echo_policy: which pooled item the echo stage repeats next, chosen by
 * values the consumer feeds back (ef_pipeline_feedback), such as each
 * example's training loss.
 *
 * The pool's slots are the echo stage's; this module keeps, per slot, the
 * item's identity, its last value and its priority, in a sum tree so
 * that a pick in proportion to priority costs O(log slots). Feedback
 * arrives from the consumer's thread while the stage picks from its own:
 * one mutex guards everything here. */
#ifndef EF_STAGES_FLOW_ECHO_POLICY_H
#define EF_STAGES_FLOW_ECHO_POLICY_H

#include <stddef.h>

#include "echoflow/echoflow.h"
#include "pipeline/state.h"
#include "stages/flow/echo_policies.h"

/* A policy: how the values fed back weigh the pooled items that have one.
 * The machinery here keeps the values, asks the policy for weights again
 * once an eighth of the pool's worth of values came in, gives an item
 * without a value the mean weight, and draws in proportion to weight.
 * A policy is a file echo_policy_NAME.c defining ef__policy_NAME, and a
 * line in echo_policies.h. */
typedef struct {
    const char *name;
    /* weights[k] of the item whose value is values[k], for the m items of
     * the pool with a value (m >= 1), each in (0, 1e4]; -1 when out of
     * memory (the weights stay as they were) */
    int (*weigh)(const double *values, size_t m, double *weights);
} ef__policy_def;

#define EF__POLICY_DECLARE(name) extern const ef__policy_def ef__policy_##name;
EF__ECHO_POLICIES(EF__POLICY_DECLARE)

/* The names a spec may give, as a string literal: "uniform, rank" */
#define EF__POLICY_NAME(name) ", " #name
#define EF__POLICY_NAMES "uniform" EF__ECHO_POLICIES(EF__POLICY_NAME)

/* The policy called `name` into *out, NULL for "uniform" (no priorities:
 * the echo stage's own scheme); -1 for an unknown name. */
int ef__policy_parse(const char *name, const ef__policy_def **out);
/* The names, for messages: "uniform, rank". */
const char *ef__policy_names(void);
/* Registered policy i (0 <= i), or NULL past the last. */
const ef__policy_def *ef__policy_at(int i);

typedef struct ef__policy ef__policy;

/* A policy `def` (not uniform, which needs none) over `slots` pool slots;
 * NULL when out of memory. */
ef__policy *ef__policy_new(const ef__policy_def *def, size_t slots);
void ef__policy_free(ef__policy *p);

/* Slot `slot` now holds the fresh item `id` (echo_copy ignored), eligible
 * for picks; it has no value until one is fed back. */
int ef__policy_enter(ef__policy *p, size_t slot, ef_sample_id id);
/* The slot's item is gone (evicted): its values are forgotten. */
void ef__policy_leave(ef__policy *p, size_t slot);
/* The slot's item stays but may not be picked again (used up). */
void ef__policy_retire(ef__policy *p, size_t slot);

/* An eligible slot into *slot, drawn in proportion to priority with the
 * uniform v in [0, 1): 0, or -1 when no slot is eligible. */
int ef__policy_pick(ef__policy *p, double v, size_t *slot);

/* Values by identity; those of items not in the pool are ignored. Returns
 * how many matched an item in the pool. */
size_t ef__policy_feedback(ef__policy *p, const ef_sample_id *ids,
                           const double *values, size_t n);

/* Checkpoints: a slot's value and priority, written after the slot's
 * item (entered before its restore); then, after every slot, the
 * policy's own counters. */
void ef__policy_save_slot(ef__policy *p, size_t slot, ef__state_out *o);
int ef__policy_restore_slot(ef__policy *p, size_t slot, ef__state_in *in);
void ef__policy_save(ef__policy *p, ef__state_out *o);
int ef__policy_restore(ef__policy *p, ef__state_in *in);

#endif
