/* SPDX-License-Identifier: Apache-2.0 */
/* The tuner of threads=auto map stages: shares the cores among them by
 * what each costs per item the consumer takes. It runs on the consumer's
 * thread, inside ef_pipeline_next, at most every EF__TUNE_PERIOD_NS. */
#ifndef EF_PIPELINE_TUNE_H
#define EF_PIPELINE_TUNE_H

#include "pipeline/stage.h"

#define EF__TUNE_PERIOD_NS 50000000ull /* 50 ms */

typedef struct {
    int cores;               /* usable by the process, read once */
    int nauto;               /* stages with threads=auto; 0: nothing to do */
    uint64_t last_ns;        /* the end of the last window */
    uint64_t items, wait_ns; /* the consumer's counters then */
    double consumer_ns;      /* its own time per item (smoothed) */
} ef__tuner;

/* Counts the auto stages among `stages`; `now` starts the first window. */
void ef__tuner_init(ef__tuner *t, ef__stage *const *stages, int n,
                    uint64_t now);
/* After a consumer's next() ending at `now`, with its running totals of
 * items taken and time spent inside next(): once a window of
 * EF__TUNE_PERIOD_NS with at least one item has passed, measures it and
 * sets every auto stage's `allowed`. */
void ef__tuner_tick(ef__tuner *t, ef__stage *const *stages, int n, uint64_t now,
                    uint64_t items, uint64_t wait_ns);

#endif
