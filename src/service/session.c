/* SPDX-License-Identifier: Apache-2.0 */
/* This process's place in the service's MPI job: joining (MPI started,
 * roles and settings compared, communicators made) and leaving. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "pipeline/stage.h"
#include "service/service.h"

static ef__service_job job;
static pid_t joined_pid; /* the process that joined: a fork's child is not */
static int mpi_ours;     /* this library initialised MPI */
static int mpi_ended;    /* ... and finalised it */
static int join_tried;   /* join ran its collectives (once per process) */
static int join_status;
static char join_msg[EF__ERR_MAX];
static ef_service_info join_info;
static pthread_mutex_t join_mu = PTHREAD_MUTEX_INITIALIZER;

const ef__service_job *ef__service_job_get(void)
{
    return job.joined && getpid() == joined_pid ? &job : NULL;
}

int ef__service_mpi_error(int rc, const char *call, ef__err *err)
{
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", rc);
    return ef__err_set(err, EF_EIO, "service: %s failed: %s", call, text);
}

#define MPI_TRY(call, err)                                                     \
    do {                                                                       \
        int mpi_rc_ = (call);                                                  \
        if (mpi_rc_ != MPI_SUCCESS)                                            \
            return ef__service_mpi_error(mpi_rc_, #call, err);                 \
    } while (0)

int ef__service_index(const ef__service_job *j, int role, int rank)
{
    return rank >= 0 && rank < j->size && j->role_of[rank] == role
               ? j->index_of[rank]
               : -1;
}

void ef__service_rank_name(int rank, char *buf, size_t cap)
{
    const char *role = "";
    if (rank >= 0 && rank < job.size && job.role_of)
        role = job.role_of[rank] == EF_SERVICE_TRAINER ? " (a trainer)"
                                                       : " (a worker)";
    snprintf(buf, cap, "rank %d%s", rank, role);
}

void ef__service_idle(unsigned *idle)
{
    /* 50 us at first, 1 ms after a few hundred idle turns */
    unsigned n = *idle < 1000 ? *idle : 1000;
    long us = n < 100 ? 50 : n < 200 ? 200 : 1000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
    (*idle)++;
}

int ef__service_send(MPI_Comm comm, int to, int tag, const int64_t *v, int n,
                     ef__err *err)
{
    MPI_TRY(MPI_Send(v, n, MPI_INT64_T, to, tag, comm), err);
    return EF_OK;
}

static void leave_at_exit(void)
{
    ef_service_leave(0);
}

static int start_mpi(ef__err *err)
{
    int started = 0, provided = 0;
    MPI_Initialized(&started);
    if (!started) {
        if (!ef_service_launched())
            return ef__err_set(err, EF_ESTATE,
                               "service: this process was not started by "
                               "mpirun; start trainers and workers in one "
                               "job: mpirun -np 1 TRAINER : -np 2 echoflow "
                               "serve SPEC");
        /* waiting ranks share the cores with the pipelines: yield rather
         * than spin (the user's own setting wins) */
        setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
        MPI_TRY(MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided),
                err);
        mpi_ours = 1;
        atexit(leave_at_exit);
    } else {
        MPI_Query_thread(&provided);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_MULTIPLE)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "service: MPI gives thread level %d; the service "
                           "receives on a thread of its own beside the "
                           "program's: it needs MPI_THREAD_MULTIPLE (%d)",
                           provided, MPI_THREAD_MULTIPLE);
    return EF_OK;
}

/* The hello as text: the version, then each setting's name and value,
 * each ending in a zero. */
static char *hello_text(const ef_service_hello *h, int *len)
{
    size_t n = strlen(ef_version_string()) + 1;
    for (int i = 0; i < h->nsettings; i++)
        n += strlen(h->names[i]) + strlen(h->values[i]) + 2;
    char *t = ef__malloc(n), *at = t;
    if (!t)
        return NULL;
    at = stpcpy(at, ef_version_string()) + 1;
    for (int i = 0; i < h->nsettings; i++) {
        at = stpcpy(at, h->names[i]) + 1;
        at = stpcpy(at, h->values[i]) + 1;
    }
    *len = (int)n;
    return t;
}

/* The next zero-ended string of a hello at *at (end: one past its last
 * byte), or "" past the end. */
static const char *next_string(const char *all, int *at, int end)
{
    if (*at >= end)
        return "";
    const char *s = all + *at;
    *at += (int)strnlen(s, (size_t)(end - *at)) + 1;
    return s;
}

/* Compares the hellos: the first difference into msg ("" when none),
 * and *speaker, the rank that says it. */
static void compare(const int *head, const char *all, const int *displ,
                    int size, char *msg, size_t cap, int *speaker)
{
    msg[0] = '\0';
    *speaker = 0;
    for (int r = 0; r < size; r++)
        if (head[3 * r + 1]) {
            snprintf(msg, cap,
                     "rank %d was started with options it refused (its own "
                     "message says which)",
                     r);
            *speaker = -1; /* the refused rank spoke already */
            return;
        }
    const char *v0 = all + displ[0];
    for (int r = 1; r < size; r++)
        if (strcmp(v0, all + displ[r])) {
            snprintf(msg, cap,
                     "the echoflow version differs between ranks: %.40s on "
                     "rank 0, %.40s on rank %d",
                     v0, all + displ[r], r);
            return;
        }
    for (int r = 0; r < size; r++) {
        int first = 0; /* the first rank of r's role */
        while (head[3 * first] != head[3 * r])
            first++;
        if (first == r)
            continue;
        int a = displ[first], b = displ[r];
        int ea = a + head[3 * first + 2], eb = b + head[3 * r + 2];
        next_string(all, &a, ea); /* the versions, compared above */
        next_string(all, &b, eb);
        while (a < ea || b < eb) {
            const char *na = next_string(all, &a, ea);
            const char *va = next_string(all, &a, ea);
            const char *nb = next_string(all, &b, eb);
            const char *vb = next_string(all, &b, eb);
            if (strcmp(na, nb))
                snprintf(msg, cap,
                         "the settings differ between ranks: %s on rank %d, "
                         "%s on rank %d",
                         na[0] ? na : "(none)", first, nb[0] ? nb : "(none)",
                         r);
            else if (!ef__setting_same(na, va, vb))
                snprintf(msg, cap,
                         "%s differs between ranks: %.200s on rank %d, "
                         "%.200s on rank %d",
                         na, va, first, vb, r);
            if (msg[0]) {
                *speaker = first;
                return;
            }
        }
    }
}

/* Keeps the first worker's settings (those every worker shares, once
 * compared): the hello after its version. */
static int keep_worker_settings(const int *head, const char *all,
                                const int *displ, int size, ef__err *err)
{
    for (int r = 0; r < size; r++) {
        if (head[3 * r] != EF_SERVICE_WORKER)
            continue;
        int at = displ[r], end = displ[r] + head[3 * r + 2];
        next_string(all, &at, end); /* the version */
        job.worker_settings = ef__malloc((size_t)(end - at) + 1);
        if (!job.worker_settings)
            return ef__err_set(err, EF_ENOMEM, "service: out of memory");
        memcpy(job.worker_settings, all + at, (size_t)(end - at));
        job.worker_settings[end - at] = '\0';
        job.worker_settings_len = end - at;
        return EF_OK;
    }
    return EF_OK;
}

static int make_comms(const int *head, int size, ef__err *err)
{
    job.trainers = ef__calloc((size_t)size, sizeof(int));
    job.workers = ef__calloc((size_t)size, sizeof(int));
    job.role_of = ef__calloc((size_t)size, sizeof(int));
    job.index_of = ef__calloc((size_t)size, sizeof(int));
    if (!job.trainers || !job.workers || !job.role_of || !job.index_of)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    for (int r = 0; r < size; r++) {
        job.role_of[r] = head[3 * r];
        if (head[3 * r] == EF_SERVICE_TRAINER) {
            job.index_of[r] = job.ntrainers;
            job.trainers[job.ntrainers++] = r;
        } else {
            job.index_of[r] = job.nworkers;
            job.workers[job.nworkers++] = r;
        }
    }
    job.role_rank = job.index_of[job.rank];
    job.dispatcher = job.nworkers ? job.workers[0] : -1;
    MPI_TRY(MPI_Comm_split(MPI_COMM_WORLD, job.role, job.rank, &job.role_comm),
            err);
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &job.data), err);
    MPI_TRY(MPI_Comm_dup(MPI_COMM_WORLD, &job.dispatch), err);
    MPI_Comm_set_errhandler(job.data, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(job.dispatch, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(job.role_comm, MPI_ERRORS_RETURN);
    return EF_OK;
}

/* Meets the other processes: every process's role, refusal and
 * settings to every process, compared alike everywhere. */
static int meet(const ef_service_hello *h, ef__err *err)
{
    MPI_Comm_rank(MPI_COMM_WORLD, &job.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &job.size);
    job.role = h->role;
    int len = 0;
    char *mine = hello_text(h, &len);
    int *head = ef__calloc((size_t)job.size, 3 * sizeof(int));
    int *counts = ef__calloc((size_t)job.size, 2 * sizeof(int));
    char *all = NULL;
    int rc = EF_OK;
    if (!mine || !head || !counts)
        rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    int me[3] = {h->role, h->refused ? 1 : 0, len};
    int mpi =
        rc ? MPI_SUCCESS
           : MPI_Allgather(me, 3, MPI_INT, head, 3, MPI_INT, MPI_COMM_WORLD);
    if (!rc && mpi != MPI_SUCCESS)
        rc = ef__service_mpi_error(mpi, "MPI_Allgather", err);
    int total = 0, *displ = counts + job.size;
    for (int r = 0; !rc && r < job.size; r++) {
        counts[r] = head[3 * r + 2];
        displ[r] = total;
        total += counts[r];
    }
    if (!rc && !(all = ef__malloc((size_t)total + 1)))
        rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (!rc) {
        mpi = MPI_Allgatherv(mine, len, MPI_CHAR, all, counts, displ, MPI_CHAR,
                             MPI_COMM_WORLD);
        if (mpi != MPI_SUCCESS)
            rc = ef__service_mpi_error(mpi, "MPI_Allgatherv", err);
    }
    if (!rc) {
        all[total] = '\0';
        char msg[EF__ERR_MAX];
        int speaker;
        compare(head, all, displ, job.size, msg, sizeof msg, &speaker);
        if (msg[0])
            rc = ef__err_set(err, EF_ESPEC, "%s",
                             speaker == job.rank ? msg : "");
    }
    if (!rc)
        rc = make_comms(head, job.size, err);
    if (!rc)
        rc = keep_worker_settings(head, all, displ, job.size, err);
    ef__free(mine);
    ef__free(head);
    ef__free(counts);
    ef__free(all);
    return rc;
}

ef_status ef_service_join(const ef_service_hello *hello, ef_service_info *info,
                          char *errbuf, size_t len)
{
    ef__err err;
    ef__err_clear(&err);
    pthread_mutex_lock(&join_mu);
    if (join_tried && getpid() != joined_pid) {
        pthread_mutex_unlock(&join_mu);
        snprintf(errbuf, len,
                 "service: this process is a fork of the one mpirun started "
                 "(a DataLoader worker?), which MPI cannot use; read the "
                 "service in the process mpirun started (DataLoader "
                 "num_workers=0)");
        return EF_ESTATE;
    }
    if (!join_tried) {
        joined_pid = getpid();
        join_tried = 1;
        int rc = start_mpi(&err);
        if (rc == EF_OK)
            rc = meet(hello, &err);
        if (rc == EF_OK)
            job.joined = 1;
        join_status = rc;
        snprintf(join_msg, sizeof join_msg, "%s", rc ? err.msg : "");
        join_info = (ef_service_info){
            .size = sizeof join_info,
            .rank = job.rank,
            .size_of_job = job.size,
            .trainers = job.ntrainers,
            .workers = job.nworkers,
            .role_rank = job.role_rank,
            .trainer_comm = job.role == EF_SERVICE_TRAINER && job.joined
                                ? (int64_t)MPI_Comm_c2f(job.role_comm)
                                : -1,
        };
    } else if (job.joined && job.role != (int)hello->role) {
        pthread_mutex_unlock(&join_mu);
        snprintf(errbuf, len,
                 "service: this process joined the job as a %s already",
                 job.role == EF_SERVICE_TRAINER ? "trainer" : "worker");
        return EF_ESTATE;
    }
    int rc = join_status;
    if (info) {
        size_t n =
            info->size < sizeof join_info ? info->size : sizeof join_info;
        ef_service_info copy = join_info;
        copy.size = info->size;
        memcpy(info, &copy, n);
    }
    snprintf(errbuf, len, "%s", join_msg);
    pthread_mutex_unlock(&join_mu);
    return rc;
}

ef_status ef_service_trainers_bcast(void *buf, size_t len, char *errbuf,
                                    size_t errlen)
{
    ef__err err;
    ef__err_clear(&err);
    int rc = EF_OK;
    pthread_mutex_lock(&join_mu);
    int trainer = ef__service_job_get() && job.role == EF_SERVICE_TRAINER;
    pthread_mutex_unlock(&join_mu);
    if (!trainer)
        rc = ef__err_set(&err, EF_ESTATE,
                         "service: ef_service_trainers_bcast: this process "
                         "has not joined the job as a trainer "
                         "(ef_service_join first)");
    else if (len > INT_MAX)
        rc = ef__err_set(&err, EF_EINVAL,
                         "service: ef_service_trainers_bcast: %zu bytes, "
                         "expected at most %d",
                         len, INT_MAX);
    else {
        int mpi = MPI_Bcast(buf, (int)len, MPI_BYTE, 0, job.role_comm);
        if (mpi != MPI_SUCCESS)
            rc = ef__service_mpi_error(mpi, "MPI_Bcast", &err);
    }
    snprintf(errbuf, errlen, "%s", rc ? err.msg : "");
    return rc;
}

int ef__service_join_trainer(ef__service_place *place, ef__err *err)
{
    ef_service_hello h = {.size = sizeof h, .role = EF_SERVICE_TRAINER};
    char msg[EF__ERR_MAX];
    int rc = ef_service_join(&h, NULL, msg, sizeof msg);
    if (rc != EF_OK)
        return ef__err_set(err, rc, "%s",
                           msg[0] ? msg
                                  : "service: the job's processes differ "
                                    "(another rank says how)");
    place->ntrainers = job.ntrainers;
    place->nworkers = job.nworkers;
    place->role_rank = job.role_rank;
    return EF_OK;
}

void ef_service_leave(int status)
{
    if (join_tried && getpid() != joined_pid)
        return; /* a fork's child: the MPI state is its parent's */
    pthread_mutex_lock(&join_mu);
    int mine = mpi_ours && !mpi_ended;
    if (status != 0 && join_tried && !mpi_ended)
        MPI_Abort(MPI_COMM_WORLD, status);
    /* a worker that went silent can take part in no orderly end
     * (MPI_Finalize waits for every rank): end the job */
    if (job.joined && job.role == EF_SERVICE_TRAINER &&
        ef__service_receive_shutdown() && !mpi_ended)
        MPI_Abort(MPI_COMM_WORLD, 1);
    if (mine) {
        MPI_Finalize();
        mpi_ended = 1;
    }
    pthread_mutex_unlock(&join_mu);
}
