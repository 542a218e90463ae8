/* SPDX-License-Identifier: Apache-2.0 */
/* A feed: producer threads that fill a bounded queue for a stage, and the
 * consumer's side of it. Every asynchronous stage uses one: prefetch and
 * automatic echo as a pump (one thread pulling the upstream,
 * ef__feed_pump), map for its workers (unordered results go through
 * the queue), tar once per reader thread.
 *
 * The queue is charged to the pipeline's memory budget. END and errors
 * travel through it as items, in order; the first the consumer takes is
 * kept and returned again on every later take (sticky) until a rewind. A
 * closed queue, whoever closed it, reads as "<stage>: the pipeline was
 * stopped".
 *
 * Items cross in runs (core/run_length.h): a pump pulls a run and pushes
 * it at once, and the consumer takes what is ready into a cache of its
 * own (ef__queue_pop_run), handing items out from it without a lock.
 *
 * Threads: start() runs `nthreads` threads of main(arg). They end after
 * handing over END or an error, or when a push fails because the queue
 * was closed; stop(), rewind() and destroy() close it and join them.
 * cancel() may come from any thread and never blocks; everything else on
 * the consumer side (take, finish, stop, rewind, restart) is the
 * consumer's thread's. */
#ifndef EF_PIPELINE_FEED_H
#define EF_PIPELINE_FEED_H

#include "core/queue.h"
#include "pipeline/stage.h"

typedef struct {
    ef__stage *owner; /* names messages; its budget, flags and counters */
    ef__queue q;
    void *(*main)(void *);
    void *arg;
    pthread_t *threads;
    int nthreads;
    int started; /* threads started and not yet joined */
    /* a pump's checkpoint view (pause, save): `gate` is held around each
     * pull; `pulled` counts the samples pulled and `hands` holds the
     * identities of the run being pulled, `in_hand` of them, all under
     * the gate. The pump's own items are `run`. */
    pthread_mutex_t gate;
    uint64_t pulled;
    struct ef__ident *hands;
    size_t in_hand;
    ef__item *run;
    /* consumer side: items taken from the queue, handed out from
     * cache[cache_pos..cache_n) */
    ef__item *cache;
    size_t cache_n, cache_pos;
    uint64_t taken; /* samples taken */
    int finished;   /* END or an error was taken (sticky until rewind) */
    int final_status;
    ef__err final_err;
} ef__feed;

/* A feed of `nthreads` threads running main(arg) into a queue of
 * `depth` items; nothing runs until start(). On failure nothing is left
 * to free. */
int ef__feed_init(ef__feed *p, ef__stage *owner, size_t depth, int nthreads,
                  void *(*main)(void *), void *arg, ef__err *err);
/* Starts the threads. On failure those already started stay (stop()
 * joins them) and p->started says how many. */
int ef__feed_start(ef__feed *p, ef__err *err);
/* A pump's thread (arg: the feed): pulls the owner's upstream into
 * the queue until END or an error. */
void *ef__feed_pump(void *feed);

/* Producer side: queues an item, adding the time blocked to the owner's
 * wait_down (an atomic add: threads may share it). EF_OK, the queue owns
 * the item; EF_ECANCELED, the item was freed. */
int ef__feed_push(ef__feed *p, ef__item *item);
/* As push, for an item whose bytes the producer charged to the budget
 * already (item->charged): the queue takes the charge over (see
 * ef__queue_push_charged). */
int ef__feed_push_charged(ef__feed *p, ef__item *item);
/* Queues a run of items in order, as ef__feed_push each would; on
 * EF_ECANCELED those not queued were freed. */
int ef__feed_push_run(ef__feed *p, ef__item *items, size_t n);

/* Consumer side: the next sample (block = 0: EF_AGAIN when none is
 * ready). EF_OK with *out, which is NULL for an item without a sample (a
 * sample map dropped under on_error=skip); EF_END or an error (sticky);
 * EF_ECANCELED when the queue was closed. */
int ef__feed_take(ef__feed *p, ef_sample **out, int block, ef__err *err);
/* The sticky END or error (err filled for an error), or 0 when none was
 * taken yet. */
int ef__feed_final(const ef__feed *p, ef__err *err);
/* Keeps an END or error item the consumer took as the sticky final
 * status; frees the item and returns its status. */
int ef__feed_finish(ef__feed *p, ef__item *item, ef__err *err);

/* Items ready for the consumer: its cache's and the queue's. */
size_t ef__feed_ready(ef__feed *p);

/* Checkpoints, for a pump: pause() waits for a pull under way and keeps
 * the pump from pulling until resume(); save(), while paused, lists what
 * the pump took from the upstream and the consumer has not: the
 * consumer's cache, the queue's samples, then those the pump holds
 * (state.h). */
void ef__feed_pause(ef__feed *p);
void ef__feed_resume(ef__feed *p);
int ef__feed_save(ef__feed *p, ef__state_out *o, ef__err *err);

/* Closes the queue, waking the threads and every wait on it. */
void ef__feed_cancel(ef__feed *p);
/* Closes the queue and joins the threads. */
void ef__feed_stop(ef__feed *p);
/* For a new pass: stops, drops what was queued, opens the queue again and
 * forgets the final status. EF_ECANCELED if the pipeline was stopped. */
int ef__feed_rewind(ef__feed *p, ef__err *err);
/* Rewinds, resets the owner's upstream to `epoch` and starts again. */
int ef__feed_restart(ef__feed *p, int64_t epoch, ef__err *err);
/* Stops and frees; also after a failed or no init (p zeroed). */
void ef__feed_destroy(ef__feed *p);

#endif
