/* A pump: one thread that pulls a stage's upstream and fills a bounded
 * queue, so the stage can take items without waiting on the upstream's
 * work (prefetch), or poll without blocking (automatic echo). */
#ifndef EF_STAGES_FLOW_PUMP_H
#define EF_STAGES_FLOW_PUMP_H

#include "core/queue.h"
#include "stage.h"

typedef struct {
    ef__stage *owner; /* pulls owner->up */
    ef__queue q;
    pthread_t thread;
    int running;  /* a thread was started and not yet joined */
    int finished; /* the consumer took END or an error (sticky) */
    int final_status;
    ef__err final_err;
} ef__pump;

int ef__pump_init(ef__pump *p, ef__stage *owner, size_t depth, ef__err *err);
int ef__pump_start(ef__pump *p, ef__err *err);
/* The next item; with block = 0 returns EF_AGAIN when none is ready. */
int ef__pump_next(ef__pump *p, ef_sample **out, int block, ef__err *err);
/* After END: joins the thread, resets the upstream, starts again. */
int ef__pump_restart(ef__pump *p, int64_t epoch, ef__err *err);
/* Wakes the thread and every waiter; never blocks. */
void ef__pump_cancel(ef__pump *p);
/* Joins the thread (after cancel) and frees what is queued. */
void ef__pump_destroy(ef__pump *p);

#endif
