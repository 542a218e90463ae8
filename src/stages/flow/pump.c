/* The pump thread (see pump.h). The thread ends after pushing END or an
 * error, or when the queue is closed; so a restart after END only joins a
 * thread that has already finished, and a restart mid-pass closes the
 * queue first. */
#include "stages/flow/pump.h"

#include <string.h>

#include "core/alloc.h"

static void *pump_main(void *arg)
{
    ef__pump *p = arg;
    ef__stage *s = p->owner;
    ef__err err;
    for (;;) {
        ef__item item = {0};
        ef__err_clear(&err);
        item.status = ef__stage_pull(s, &item.sample, &err);
        if (item.status < 0)
            item.msg = ef__strdup(err.msg); /* NULL if out of memory: ok */
        uint64_t waited = 0;
        int rc = ef__queue_push(&p->q, &item, &waited);
        ef__stat_add(&s->wait_down_ns, waited);
        if (rc != EF_OK) {
            ef__item_clear(&item);
            break;
        }
        if (item.status != EF_OK)
            break;
    }
    return NULL;
}

int ef__pump_init(ef__pump *p, ef__stage *owner, size_t depth, ef__err *err)
{
    memset(p, 0, sizeof *p);
    p->owner = owner;
    if (ef__queue_init(&p->q, depth) != EF_OK)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: out of memory for a queue of "
                           "%zu",
                           owner->def->info.name, depth);
    ef__queue_set_budget(&p->q, &owner->ctx->budget, owner->def->info.name);
    return EF_OK;
}

int ef__pump_start(ef__pump *p, ef__err *err)
{
    int rc = pthread_create(&p->thread, NULL, pump_main, p);
    if (rc != 0)
        return ef__err_set(err, EF_ENOMEM, "%s: cannot start a thread: %s",
                           p->owner->def->info.name, strerror(rc));
    p->running = 1;
    return EF_OK;
}

int ef__pump_next(ef__pump *p, ef_sample **out, int block, ef__err *err)
{
    *out = NULL;
    if (p->finished) {
        if (p->final_status < 0)
            memcpy(err, &p->final_err, sizeof *err);
        return p->final_status;
    }
    ef__item item;
    uint64_t waited = 0;
    int rc = block ? ef__queue_pop(&p->q, &item, &waited)
                   : ef__queue_try_pop(&p->q, &item);
    if (rc == EF_AGAIN)
        return rc;
    if (rc == EF_ECANCELED)
        return ef__err_set(err, rc, "%s: the pipeline was stopped",
                           p->owner->def->info.name);
    if (item.status == EF_OK) {
        *out = item.sample;
        return EF_OK;
    }
    p->finished = 1;
    p->final_status = item.status;
    if (item.status < 0) {
        ef__err_set(&p->final_err, item.status, "%s",
                    item.msg ? item.msg : ef_strerror(item.status));
        memcpy(err, &p->final_err, sizeof *err);
    }
    ef__item_clear(&item);
    return p->final_status;
}

int ef__pump_restart(ef__pump *p, int64_t epoch, ef__err *err)
{
    /* Mid-pass (take under repeat), the thread may be blocked on a full
     * queue: close it to wake the thread, and drop what it had read. */
    int mid_pass = !p->finished;
    if (mid_pass)
        ef__queue_close(&p->q);
    if (p->running) {
        pthread_join(p->thread, NULL);
        p->running = 0;
    }
    if (mid_pass) {
        ef__queue_reopen(&p->q);
        /* a stop that closed the queue just before the reopen stays */
        if (ef__ctx_is_cancelled(p->owner->ctx)) {
            ef__queue_close(&p->q);
            return ef__err_set(err, EF_ECANCELED,
                               "%s: the pipeline was stopped",
                               p->owner->def->info.name);
        }
    }
    p->finished = 0;
    int rc = ef__stage_reset_upstream(p->owner, epoch, err);
    return rc == EF_OK ? ef__pump_start(p, err) : rc;
}

void ef__pump_cancel(ef__pump *p)
{
    if (p->q.ring)
        ef__queue_close(&p->q);
}

void ef__pump_destroy(ef__pump *p)
{
    ef__pump_cancel(p);
    if (p->running)
        pthread_join(p->thread, NULL);
    p->running = 0;
    ef__queue_destroy(&p->q);
}
