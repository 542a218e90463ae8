/* SPDX-License-Identifier: Apache-2.0 */
/* service: the samples `echoflow serve` workers send, in a job started by
 * mpirun with trainers and workers (docs/distributed.md). The workers
 * run the upstream; this source hands their samples to the stages that
 * follow (echo, shuffle, batch). It joins the job as a trainer when the
 * pipeline is built, and reads one epoch per pass (or, epochs=0, every
 * epoch without end) from the first sample asked for. It can be polled,
 * so echo:factor=auto echoes while the workers fall behind.
 *
 * Its state is what the consumer was handed (the service's progress.c):
 * a restore has the workers send everything else of the epochs not
 * handed out whole, so the stages after it restart empty. */
#include "core/alloc.h"
#include "pipeline/service_link.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

typedef struct {
    int endless, credits;
    int64_t from_epoch; /* the first epoch a pass may read */
    double liveness;         /* seconds */
    ef__service_place place; /* once joined */
    ef__service_reader *r;
    int64_t epoch; /* the service's epoch this pass reads */
    /* restored from a checkpoint, for the first reader to go on from */
    ef__service_resume *resume;
} service_state;

static int service_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    if (!ef__service)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "service: echoflow was built without MPI; install "
                           "it (apt-get install libopenmpi-dev openmpi-bin) "
                           "and build again");
    service_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->endless = ef__opt_int(o, "epochs") == 0;
    st->credits = (int)ef__opt_int(o, "credits");
    st->from_epoch = ef__opt_int(o, "from_epoch");
    st->liveness = ef__opt_float(o, "liveness");
    ef__shard sh;
    int rc = ef__shard_parse(s, o, &sh, err);
    if (rc == EF_OK)
        rc = ef__service->join_trainer(&st->place, err);
    const ef__service_place *place = &st->place;
    /* the service gives each trainer a part of its own already: a part
     * asked for is one trainer's (echoflow train's shard=RANK/N) */
    if (rc == EF_OK && sh.n > 1 &&
        (sh.n != place->ntrainers || sh.i != place->role_rank))
        rc = ef__err_set(err, EF_ESPEC,
                         "service: asked for part %lld of %lld, but the "
                         "service hands each of its %d trainers a part of "
                         "its own (this one is trainer %d); leave shard "
                         "out",
                         (long long)sh.i, (long long)sh.n, place->ntrainers,
                         place->role_rank);
    if (rc == EF_OK && place->nworkers == 0)
        rc = ef__err_set(err, EF_ESPEC,
                         "service: no `echoflow serve` rank in this job; "
                         "start workers after a ':' in the mpirun command "
                         "(mpirun -np 1 TRAINER : -np 2 echoflow serve "
                         "SPEC)");
    return rc;
}

static int service_open(ef__stage *s, ef__err *err)
{
    service_state *st = s->state;
    ef__service_resume *from = st->resume;
    st->resume = NULL; /* the reader takes it */
    return ef__service->attach(st->endless, st->from_epoch, &s->ctx->budget,
                               st->credits, st->liveness, from, &st->r,
                               &st->epoch, err);
}

static int service_take(ef__stage *s, int block, ef_sample **out, ef__err *err)
{
    service_state *st = s->state;
    if (!st->r)
        return ef__err_set(err, EF_ESTATE, "service: not open");
    return ef__service->take(st->r, block, out, err);
}

static int service_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return service_take(s, 1, out, err);
}

static int service_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return service_take(s, 0, out, err);
}

/* A new pass (after `repeat`, say) reads the service's next epoch. */
static int service_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    service_state *st = s->state;
    if (st->r)
        ef__service->detach(st->r);
    st->r = NULL;
    return service_open(s, err);
}

static void service_cancel(ef__stage *s)
{
    service_state *st = s->state;
    if (st && st->r)
        ef__service->cancel(st->r);
}

static void service_destroy(ef__stage *s)
{
    service_state *st = s->state;
    if (st && st->r)
        ef__service->detach(st->r);
    if (st && st->resume)
        ef__service->release(st->resume);
    ef__free(st);
}

static void service_stats(const ef__stage *s, ef_stage_stats *out)
{
    const service_state *st = s->state;
    if (!st)
        return;
    ef__stats_extra(out, "workers", st->place.nworkers);
    ef__stats_extra(out, "epoch", (double)st->epoch);
    if (!st->r)
        return;
    ef__service_figures f;
    ef__service->figures(st->r, &f);
    ef__stats_extra(out, "messages", (double)f.messages);
    ef__stats_extra(out, "received_MB", (double)f.bytes / 1e6);
    ef__stats_extra(out, "receive_s", f.recv_s);
    ef__stats_extra(out, "receive_us_per_message",
                    f.messages ? 1e6 * f.recv_s / (double)f.messages : 0);
}

/* What the consumer was handed, by split and position (a position here
 * would not make the workers' samples again: they come as they are
 * ready). */
static int service_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    service_state *st = s->state;
    return ef__service->save(st->r, st->resume, o, err);
}

static int service_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    service_state *st = s->state;
    return ef__service->restore(in, &st->resume, err);
}

static void service_delivered(ef__stage *s, const ef_sample *out)
{
    service_state *st = s->state;
    if (st->r)
        ef__service->delivered(st->r, out);
}

static int service_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)s;
    (void)up;
    (void)n;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "service: the number of samples is the workers' "
                       "spec's, not known here");
}

static const ef__option_def service_options[] = {
    EF__OPT("epochs", EF_OPT_INT, "1",
            "epochs of the service one pass reads: 1, or 0 for every epoch "
            "without end",
            0, 1),
    EF__OPT("from_epoch", EF_OPT_INT, "0",
            "the first epoch of the service a pass reads: the epochs before "
            "it count as read (by a job this one resumes)",
            0, 1e12, EF__START_ONLY),
    EF__OPT("credits", EF_OPT_INT, "4",
            "messages each worker may have on their way to this process", 1,
            64),
    /* at least 1 s: a worker says it lives every EF__HEARTBEAT_MS */
    EF__OPT(
        "liveness", EF_OPT_FLOAT, "60",
        "seconds a worker may go without a word (each says it lives 4 times "
        "a second) before reading fails naming it",
        1, 86400),
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_service = {
    .info = {"service",
             "the samples of `echoflow serve` workers in an mpirun job "
             "(docs/distributed.md)",
             EF__OPTIONS(service_options)},
    .is_source = 1,
    .create = service_create,
    .next = service_next,
    .open = service_open,
    .poll = service_poll,
    .reset = service_reset,
    .cancel = service_cancel,
    .destroy = service_destroy,
    .stats = service_stats,
    .save = service_save,
    .restore = service_restore,
    .delivered = service_delivered,
    .save_collective = 1,
    .length = service_length,
};
