/* SPDX-License-Identifier: Apache-2.0 */
/* echo_pool: the recent fresh items the echo stage draws its echoes from
 * (factor=auto, or a policy with any factor), and which one it echoes next.
 *
 * The pool is a ring of slots, the oldest item evicted when a fresh one
 * arrives at a full pool. Items are kept in lists by the times they were
 * used, so a pick among the least used costs O(1) rather than a scan; a
 * policy (echo_policy.h), when there is one, picks by priority instead.
 * Everything here runs on the thread that calls the stage's next, save
 * and restore; the policy guards itself against feedback from others. */
#ifndef EF_STAGES_FLOW_ECHO_POOL_H
#define EF_STAGES_FLOW_ECHO_POOL_H

#include <stddef.h>

#include "core/budget.h"
#include "core/err.h"
#include "core/sample.h"
#include "pipeline/state.h"
#include "stages/flow/echo_policy.h"

struct ef__stage;

typedef struct ef__echo_pool ef__echo_pool;

/* A pool of `cap` slots whose items are used `max` times at most, fresh
 * use included. `policy` picks by priority (NULL: every pick uniform
 * among the least used), except a share `mix` of picks made the uniform
 * way. The pool's own headers come from `headers`, and the payload it
 * keeps alive is charged to `budget`. All three are borrowed and must
 * outlive the pool. NULL when out of memory. */
ef__echo_pool *ef__echo_pool_new(size_t cap, int max, ef__policy *policy,
                                 double mix, ef__sample_pool *headers,
                                 ef__budget *budget);
/* Drops the items held, giving their bytes back to the budget. Accepts
 * NULL. */
void ef__echo_pool_free(ef__echo_pool *p);
/* Empties the pool for a new pass. The count of draws is kept: picks are
 * keyed by it. */
void ef__echo_pool_clear(ef__echo_pool *p);

/* Keeps a header of our own for `fresh` (the caller keeps `fresh`), used
 * once, evicting the oldest item when full. EF_ENOMEM, or the budget's
 * error when the pool's payload alone would pass it; the slot is then
 * left empty. */
int ef__echo_pool_add(ef__echo_pool *p, const ef_sample *fresh, ef__err *err);
/* A pooled item used fewer than max times, counted as used once more:
 * *smp (borrowed: valid until the next call that changes the pool) and
 * its uses so far, this one included. The draw is keyed by stage s's
 * seed, index and epoch. EF_OK, EF_AGAIN when every item is used up, or
 * EF_ENOMEM (no message set). */
int ef__echo_pool_pick(ef__echo_pool *p, const struct ef__stage *s,
                       const ef_sample **smp, int *uses);

/* Checkpoints (state.h): the draws made, the oldest slot (with a policy,
 * whose picks depend on where items sit), then the items oldest first,
 * each with its uses (-1: a slot left empty), identity and, with a
 * policy, its place in its use list and the policy's slot values; then
 * the policy's own counters. */
void ef__echo_pool_save(const ef__echo_pool *p, ef__state_out *o);
/* Makes an item of the state again as the fresh item it was: *out owned
 * by the caller, never NULL on EF_OK. */
typedef int (*ef__echo_pool_fetch)(void *arg, const ef__ident *d,
                                   ef_sample **out, ef__err *err);
/* Reads a saved pool back into an empty one, making its items with
 * `fetch` (given `arg`). */
int ef__echo_pool_restore(ef__echo_pool *p, ef__state_in *in,
                          ef__echo_pool_fetch fetch, void *arg, ef__err *err);

#endif
