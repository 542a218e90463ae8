/* SPDX-License-Identifier: Apache-2.0 */
/* The pipeline's struct, shared by pipeline.c (building, pulling,
 * statistics) and pipeline_state.c (checkpoints). */
#ifndef EF_PIPELINE_PIPELINE_H
#define EF_PIPELINE_PIPELINE_H

#include "pipeline/stage.h"
#include "pipeline/tune.h"

#define MAX_STAGES 64

struct ef_pipeline {
    ef__ctx ctx;
    ef__stage *stages[MAX_STAGES];
    int nstages;
    /* written by the consumer's next(), read by stats from any thread */
    atomic_int started;
    atomic_int final_status; /* END or an error, once reached */
    /* every stage opened: what open() wrote may be read by stats (the
     * store releases it, the stats' load acquires it) */
    atomic_int opened;
    ef__err err;
    _Atomic uint64_t t_open_ns, t_start_ns; /* first next(); end of startup */
    _Atomic uint64_t t_last_ns;     /* end of the last next() */
    _Atomic uint64_t items;
    ef__consumer_wait consumer_wait;
    ef__tuner tuner; /* threads=auto; the consumer's thread's */
    /* the last saved state, kept so that a size query and the save that
     * follows give the same bytes (pipeline_state.c) */
    unsigned char *saved;
    size_t saved_size;
    uint64_t saved_items; /* items delivered when it was made */
    int saved_asked;      /* made by a size query not yet followed */
    /* a state was applied: the stages hold its items, and a second one
     * would be applied on top of them */
    int restored;
    /* ef_pipeline_bind_map(): names for the next ef_pipeline_parse() */
    ef__bound_maps bound;
};

/* Records the end of the data or the failure; every later next()
 * returns it. */
int ef__pipeline_finish(ef_pipeline *p, int status);

#endif
