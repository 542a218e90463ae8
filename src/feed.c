/* Producer threads feeding a stage's queue (see feed.h). The queue
 * does the locking; the fields here are the consumer thread's, except
 * what cancel() touches, which is only the queue. */
#include "feed.h"

#include <string.h>

#include "core/alloc.h"
#include "state.h"

int ef__feed_init(ef__feed *p, ef__stage *owner, size_t depth, int nthreads,
                  void *(*main)(void *), void *arg, ef__err *err)
{
    memset(p, 0, sizeof *p);
    p->owner = owner;
    p->main = main;
    p->arg = arg;
    p->nthreads = nthreads;
    p->threads = ef__calloc((size_t)nthreads, sizeof *p->threads);
    p->last = ef__calloc(1, sizeof *p->last);
    pthread_mutex_init(&p->gate, NULL);
    if (!p->threads || !p->last || ef__queue_init(&p->q, depth) != EF_OK) {
        ef__feed_destroy(p);
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for a queue of %zu",
                           owner->def->info.name, depth);
    }
    ef__queue_set_budget(&p->q, &owner->ctx->budget, owner->def->info.name);
    return EF_OK;
}

int ef__feed_start(ef__feed *p, ef__err *err)
{
    for (; p->started < p->nthreads; p->started++) {
        int rc = pthread_create(&p->threads[p->started], NULL, p->main, p->arg);
        if (rc != 0)
            return ef__err_set(err, EF_ENOMEM, "%s: cannot start a thread: %s",
                               p->owner->def->info.name, strerror(rc));
    }
    return EF_OK;
}

void *ef__feed_pump(void *feed)
{
    ef__feed *p = feed;
    ef__err err;
    for (;;) {
        ef__item item = {0};
        ef__err_clear(&err);
        pthread_mutex_lock(&p->gate);
        item.status = ef__stage_pull(p->owner, &item.sample, &err);
        if (item.status == EF_OK) {
            p->pulled++;
            ef__ident_clear(p->last);
            *p->last = ef__ident_of(item.sample);
        }
        pthread_mutex_unlock(&p->gate);
        if (item.status < 0)
            item.msg = ef__strdup(err.msg); /* NULL if out of memory: ok */
        if (ef__feed_push(p, &item) != EF_OK || item.status != EF_OK)
            break;
    }
    return NULL;
}

int ef__feed_push(ef__feed *p, ef__item *item)
{
    uint64_t waited = 0;
    int rc = ef__queue_push(&p->q, item, &waited);
    atomic_fetch_add_explicit(&p->owner->wait_down_ns, waited,
                              memory_order_relaxed);
    if (rc != EF_OK)
        ef__item_clear(item);
    return rc;
}

int ef__feed_take(ef__feed *p, ef_sample **out, int block, ef__err *err)
{
    *out = NULL;
    int rc = ef__feed_final(p, err);
    if (rc)
        return rc;
    ef__item item;
    rc = block ? ef__queue_pop(&p->q, &item, NULL)
               : ef__queue_try_pop(&p->q, &item);
    if (rc == EF_AGAIN)
        return rc;
    if (rc != EF_OK)
        return ef__stage_stopped(p->owner, err);
    if (item.status != EF_OK)
        return ef__feed_finish(p, &item, err);
    p->taken += item.sample != NULL;
    *out = item.sample;
    return EF_OK;
}

void ef__feed_pause(ef__feed *p)
{
    pthread_mutex_lock(&p->gate);
}

void ef__feed_resume(ef__feed *p)
{
    pthread_mutex_unlock(&p->gate);
}

typedef struct {
    ef__state_out *o;
    uint64_t n;
} listing;

static void list_item(void *arg, const ef__item *item)
{
    listing *l = arg;
    if (item->status == EF_OK && item->sample) {
        ef__state_replay(l->o, item->sample);
        l->n++;
    }
}

int ef__feed_save(ef__feed *p, ef__state_out *o, ef__err *err)
{
    (void)err;
    listing l = {o, 0};
    ef__queue_each(&p->q, list_item, &l);
    /* pulled, and neither queued nor taken: still in the pump's hands */
    if (p->pulled > p->taken + l.n)
        ef__state_replay_ident(o, p->last);
    return EF_OK;
}

int ef__feed_final(const ef__feed *p, ef__err *err)
{
    if (!p->finished)
        return 0;
    if (p->final_status < 0)
        *err = p->final_err;
    return p->final_status;
}

int ef__feed_finish(ef__feed *p, ef__item *item, ef__err *err)
{
    p->finished = 1;
    p->final_status = item->status;
    if (item->status < 0)
        ef__err_set(&p->final_err, item->status, "%s",
                    item->msg ? item->msg : ef_strerror(item->status));
    ef__item_clear(item);
    return ef__feed_final(p, err);
}

void ef__feed_cancel(ef__feed *p)
{
    if (p->q.ring)
        ef__queue_close(&p->q);
}

void ef__feed_stop(ef__feed *p)
{
    ef__feed_cancel(p);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->threads[i], NULL);
    p->started = 0;
}

int ef__feed_rewind(ef__feed *p, ef__err *err)
{
    ef__feed_stop(p); /* mid-pass, a thread may wait on a full queue */
    ef__queue_reopen(&p->q);
    p->finished = 0;
    p->pulled = p->taken = 0;
    /* the pipeline's flag is set before any cancel() closes the queue: a
     * stop that came just before the reopen is seen here */
    if (ef__ctx_is_cancelled(p->owner->ctx)) {
        ef__queue_close(&p->q);
        return ef__stage_stopped(p->owner, err);
    }
    return EF_OK;
}

int ef__feed_restart(ef__feed *p, int64_t epoch, ef__err *err)
{
    int rc = ef__feed_rewind(p, err);
    if (rc == EF_OK)
        rc = ef__stage_reset_upstream(p->owner, epoch, err);
    return rc == EF_OK ? ef__feed_start(p, err) : rc;
}

void ef__feed_destroy(ef__feed *p)
{
    ef__feed_stop(p);
    ef__queue_destroy(&p->q);
    ef__free(p->threads);
    p->threads = NULL;
    if (p->last) {
        ef__ident_clear(p->last);
        ef__free(p->last);
        p->last = NULL;
        pthread_mutex_destroy(&p->gate);
    }
}
