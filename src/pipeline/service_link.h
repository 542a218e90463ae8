/* SPDX-License-Identifier: Apache-2.0 */
/* The preprocessing service as the `service` source sees it
 * (stages/sources/service.c): joining the MPI job as a trainer and
 * reading the samples the workers send. The service layer (src/service/)
 * sits above the pipeline, as its workers build pipelines; it provides
 * this table (receive.c), so that the source reaches the service without
 * including anything of src/service/. */
#ifndef EF_PIPELINE_SERVICE_LINK_H
#define EF_PIPELINE_SERVICE_LINK_H

#include <stdint.h>

#include "core/budget.h"
#include "core/err.h"
#include "echoflow/echoflow.h"

/* One reader at a time per process reads an epoch (or every epoch) of
 * the service. */
typedef struct ef__service_reader ef__service_reader;
/* What a trainer had been handed when its checkpoint was saved, read
 * back from the checkpoint and not yet attached. */
typedef struct ef__progress ef__service_resume;

struct ef__state_out;
struct ef__state_in;

/* This process's place in the job, once joined. */
typedef struct {
    int ntrainers, nworkers;
    int role_rank; /* its place among the trainers */
} ef__service_place;

/* Figures for the source's stats. */
typedef struct {
    uint64_t messages, bytes, items;
    double recv_s; /* inside MPI receives */
} ef__service_figures;

typedef struct {
    /* Joins as a trainer with no settings of its own, once; *place is
     * this process's place in the job. */
    int (*join_trainer)(ef__service_place *place, ef__err *err);
    /* Attaches a reader for the next epoch, `first` or a later one
     * (endless: for every epoch from it); *epoch is its number. The
     * epochs before a trainer's first are done for it (a job that
     * resumes one which read them). The messages received for it are
     * charged to `budget` (its pipeline's, which must outlive the
     * reader; its limit also sizes the workers' room, 0: none) until
     * their samples are taken; `credits` is the messages per worker; a
     * worker not heard from for `liveness_s` seconds fails the
     * reading. With `from` (which it takes, also on failure), the reader
     * goes on where a checkpoint stood: from its first epoch not handed
     * out whole, the workers leaving out what was handed out. */
    int (*attach)(int endless, int64_t first, ef__budget *budget,
                  int credits, double liveness_s, ef__service_resume *from,
                  ef__service_reader **out, int64_t *epoch, ef__err *err);
    /* The next sample: EF_OK, EF_END after the epoch's last, EF_AGAIN
     * when !block and none is ready, or an error (a worker's, with its
     * rank). */
    int (*take)(ef__service_reader *r, int block, ef_sample **out,
                ef__err *err);
    /* Wakes a take() waiting; later takes fail as stopped. Never
     * blocks. */
    void (*cancel)(ef__service_reader *r);
    /* Detaches: what was not read of an unfinished epoch is dropped,
     * and the workers stop making it. */
    void (*detach)(ef__service_reader *r);
    void (*figures)(const ef__service_reader *r, ef__service_figures *out);
    /* ---- checkpoints: what the consumer was handed ----
     * The consumer was handed `s` (an item of the pipeline's last
     * stage): its examples from the service count as delivered. */
    void (*delivered)(ef__service_reader *r, const ef_sample *s);
    /* Writes the record of reader r, or with r NULL of `pending` (a
     * restored record not attached yet; NULL: nothing was read). With
     * several trainers, a collective among them that writes the job's
     * record, the union of theirs, on every one. */
    int (*save)(ef__service_reader *r, const ef__service_resume *pending,
                struct ef__state_out *o, ef__err *err);
    /* Reads a record back into *out (freed with release, or taken by
     * attach); EF_ESPEC when it was saved beside workers of other
     * settings, naming the setting. */
    int (*restore)(struct ef__state_in *in, ef__service_resume **out,
                   ef__err *err);
    void (*release)(ef__service_resume *p);
} ef__service_link;

/* The service's side; NULL in a build without MPI (service/none.c). */
extern const ef__service_link *const ef__service;

#endif
