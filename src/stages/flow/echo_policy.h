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
#ifndef EF_ECHO_POLICY_H
#define EF_ECHO_POLICY_H

#include <stddef.h>

#include "echoflow/echoflow.h"
#include "state.h"

typedef enum {
    EF__POLICY_UNIFORM, /* no priorities: the stage's own scheme */
    EF__POLICY_RANK,    /* by the value's rank in the pool */
} ef__policy_kind;

/* The kind called `name`; -1 for an unknown name. */
int ef__policy_parse(const char *name, ef__policy_kind *out);
/* The names, for messages: "uniform or rank". */
const char *ef__policy_names(void);

typedef struct ef__policy ef__policy;

/* A policy of `kind` (not uniform, which needs none) over `slots` pool
 * slots; NULL when out of memory. */
ef__policy *ef__policy_new(ef__policy_kind kind, size_t slots);
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
