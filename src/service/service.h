/* SPDX-License-Identifier: Apache-2.0 */
/* The preprocessing service inside the library: the process's place in
 * the MPI job (session.c), the dispatcher (dispatch.c), a worker's loop
 * (serve.c) and the trainer's receiving side, which the `service` source
 * reads (receive.c). docs/design.md, "Preprocessing service", describes
 * the messages. Built with MPI only (EF_HAVE_MPI). */
#ifndef EF_SERVICE_SERVICE_H
#define EF_SERVICE_SERVICE_H

#include <mpi.h>
#include <stdint.h>

#include "core/budget.h"
#include "core/err.h"
#include "echoflow/echoflow.h"
#include "pipeline/service_link.h"
#include "pipeline/state.h"

/* Message tags. On the dispatch communicator, requests to the
 * dispatcher and its one kind of answer: */
enum {
    EF__TAG_ASK = 1, /* worker: i64 epoch: its next split in that epoch */
    EF__TAG_OPEN,    /* trainer: i64 {epoch, endless, resume...}: it reads
                        that epoch (endless: and every later one); after a
                        checkpoint, what it was handed already (resume.c) */
    EF__TAG_CUT,     /* trainer: i64 epoch: it stopped reading that epoch
                        (also to every worker) */
    EF__TAG_LEAVE,   /* trainer: it has left */
    EF__TAG_DONE,    /* worker: it asks no more */
    EF__TAG_REPLY,   /* -> worker: i64 {kind, epoch, split, words} */
    EF__TAG_SKIP,    /* -> worker, after a REPLY of words > 0: u64
                        words[], bit p set: position p of the split
                        reached the trainers before a checkpoint */
};
/* The kinds of reply. */
enum {
    EF__REPLY_SPLIT = 1,  /* read this split of that epoch */
    EF__REPLY_EPOCH_DONE, /* no split of that epoch is left */
    EF__REPLY_FINISH,     /* every trainer has left */
};
/* On the data communicator: */
enum {
    EF__TAG_CREDIT = 20, /* trainer -> worker: i64 {bytes, items, single}
                            of room for one message: up to `items`
                            samples in `bytes`, or one sample alone of
                            up to `single` bytes */
    EF__TAG_BYE,         /* trainer -> worker: it has left */
    EF__TAG_BYE_ACK,     /* worker -> trainer: nothing more will come */
    EF__TAG_DATA,        /* worker -> trainer: a chunk's header ... */
    EF__TAG_PAYLOAD,     /* ... and its payload (chunk.h) */
    EF__TAG_EOE,         /* worker -> trainer: i64 epoch: all its samples
                            of that epoch were sent */
    EF__TAG_ERROR,       /* worker -> trainer: "STATUS MESSAGE" (text) */
    EF__TAG_ALIVE,       /* worker -> trainer: nothing, but that it lives */
    EF__TAG_SPLIT_END,   /* worker -> trainer: i64 {epoch, split, samples}:
                            the split ended, its order this long */
};

/* A worker tells every trainer that it lives this often, whatever else
 * it does (serve.c); a trainer fails naming a worker it has not heard
 * from for its liveness timeout (receive.c, the `service` source's
 * `liveness`, at least 1 s), which leaves room for several of these. */
#define EF__HEARTBEAT_MS 250

/* The job as this process sees it (session.c); valid after join. */
typedef struct {
    int joined, role; /* EF_SERVICE_TRAINER or EF_SERVICE_WORKER */
    int rank, size;   /* in MPI_COMM_WORLD */
    MPI_Comm data, dispatch, role_comm;
    int ntrainers, nworkers;
    int *trainers, *workers; /* their ranks in MPI_COMM_WORLD */
    /* per rank of MPI_COMM_WORLD: its role and its place among its role's */
    int *role_of, *index_of;
    int role_rank;
    int dispatcher; /* the rank that hands out splits: the first worker */
    /* the workers' settings (their hello, which they share): each name
     * and value with its zero, `worker_settings_len` bytes; a trainer's
     * checkpoint holds them (progress.c) */
    char *worker_settings;
    int worker_settings_len;
} ef__service_job;

/* The job after a successful join; NULL before. */
const ef__service_job *ef__service_job_get(void);
/* The link's join_trainer (pipeline/service_link.h). */
int ef__service_join_trainer(ef__service_place *place, ef__err *err);
/* The place of `rank` among the trainers (role EF_SERVICE_TRAINER) or
 * the workers, or -1 when it has another role or is no rank of the job. */
int ef__service_index(const ef__service_job *job, int role, int rank);
/* "rank R (a worker)" for messages. */
void ef__service_rank_name(int rank, char *buf, size_t cap);
/* An MPI call's failure as an error: "<call> failed: <MPI's text>". */
int ef__service_mpi_error(int rc, const char *call, ef__err *err);
/* Sleeps a little, longer the longer nothing happened (*idle counts the
 * idle turns, 0 after something did): waiting ranks poll without taking
 * a core from the pipelines beside them. */
void ef__service_idle(unsigned *idle);
/* Sends a small message and waits for it to leave (MPI_Ssend-free: an
 * eager send that completes at once). */
int ef__service_send(MPI_Comm comm, int to, int tag, const int64_t *v, int n,
                     ef__err *err);

/* The dispatcher, a thread of the first worker (dispatch.c). */
typedef struct ef__dispatcher ef__dispatcher;
int ef__dispatcher_start(int64_t splits, uint64_t seed, ef__dispatcher **out,
                         ef__err *err);
/* Waits for it to end: every worker said DONE, every trainer left. */
void ef__dispatcher_join(ef__dispatcher *d);

/* The trainer's receiving side (receive.c): the link's members, which
 * pipeline/service_link.h describes. */
int ef__service_attach(int endless, int64_t first, ef__budget *budget,
                       int credits, double liveness_s,
                       ef__service_resume *from, ef__service_reader **out,
                       int64_t *epoch, ef__err *err);
void ef__service_delivered(ef__service_reader *r, const ef_sample *s);
int ef__service_save(ef__service_reader *r, const ef__service_resume *pending,
                     ef__state_out *o, ef__err *err);

/* A trainer's record of what the consumer was handed, epoch by epoch
 * (progress.c): for each split, the positions of its order delivered
 * (a sample reaches the consumer when ef_pipeline_next hands it out,
 * fresh, alone or in a batch), the split's length once its worker said
 * it, and each epoch's end marks. The ef__service_resume of the link is
 * one, restored and not yet attached. */
typedef struct ef__progress ef__progress;
ef__progress *ef__progress_new(int64_t first);
void ef__progress_free(ef__progress *p);
int64_t ef__progress_first(const ef__progress *p);
/* Each returns EF_OK or EF_ENOMEM (the record is then incomplete: the
 * saves after it fail). */
int ef__progress_delivered(ef__progress *p, int64_t epoch, int64_t split,
                           int64_t position);
int ef__progress_split_end(ef__progress *p, int64_t epoch, int64_t split,
                           int64_t size);
/* One worker's end of `epoch` (of nworkers). */
int ef__progress_epoch_end(ef__progress *p, int64_t epoch, int nworkers);
/* The record, after the workers' settings, into o. */
int ef__progress_save(ef__progress *p, const ef__service_job *job,
                      ef__state_out *o, ef__err *err);
/* Reads a record saved by ef__progress_save, refusing one saved beside
 * workers of other settings (EF_ESPEC naming the setting). */
int ef__progress_restore(ef__state_in *in, const ef__service_job *job,
                         ef__progress **out, ef__err *err);
/* Several trainers: each delivers a part of every split, so a
 * checkpoint holds the job's record, the union of theirs
 * (ef__service_save). A trainer's record for the others, with each
 * epoch's end marks, into o (after what o holds). */
int ef__progress_pack(const ef__progress *p, ef__state_out *o, ef__err *err);
/* Joins `from` into `into`: every position delivered in either, each
 * split's length where one knows it, the later `first` (an epoch before
 * a record's first was delivered whole by that trainer alone), the most
 * end marks per epoch; an epoch leaves the joined record at its next
 * save only when whole in it. EF_EFORMAT when they disagree on a
 * split's length or the union holds more positions than it; EF_ENOMEM.
 * `into` is then partly joined. */
int ef__progress_merge(ef__progress *into, const ef__progress *from,
                       ef__err *err);
/* The job's record from n trainers' packed records, counts[t] bytes of
 * trainer t one after another at `all`, into *out (the caller frees it;
 * n 0: an empty record); errors name the trainer whose record failed. */
int ef__progress_join(const unsigned char *all, const size_t *counts, int n,
                      ef__progress **out, ef__err *err);
/* OPEN's message for a reader of `epoch` (endless or not) that resumes
 * from p (NULL: none), into *msg (ef__free'd by the caller), *n values. */
int ef__progress_open_msg(const ef__progress *p, int64_t epoch, int endless,
                          int64_t **msg, int *n);
int ef__service_take(ef__service_reader *r, int block, ef_sample **out,
                     ef__err *err);
void ef__service_cancel(ef__service_reader *r);
void ef__service_detach(ef__service_reader *r);
void ef__service_figures_get(const ef__service_reader *r,
                             ef__service_figures *out);
/* Stops the receiving thread and says goodbye to the workers (leave).
 * Nonzero when the job cannot end in order: a worker went silent (it
 * would never answer the goodbye, nor meet MPI_Finalize), so the caller
 * must end the job with MPI_Abort. */
int ef__service_receive_shutdown(void);

#endif
