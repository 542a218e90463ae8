/* SPDX-License-Identifier: Apache-2.0 */
/* The trainer's collectives over MPI (see train_mpi.h), among the
 * trainers of the job: the library joins it (ef_service_join), which
 * sets `echoflow serve` workers, if any, apart. Only the main thread
 * makes these calls; the library's service thread makes its own. Errors
 * return instead of aborting, so each names the call that failed. */
#include "train_mpi.h"

#include <limits.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echoflow/echoflow.h"

static int started;
static int orderly; /* a failure every process knows of: no MPI_Abort */
static MPI_Comm trainers; /* the trainers' communicator */

/* A message from one process to process 0 about its settings. */
#define DIFF_MSG 512

static int mpi_check(int rc, const char *call, char *err, size_t len)
{
    if (rc == MPI_SUCCESS)
        return 0;
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS)
        snprintf(text, sizeof text, "error %d", rc);
    snprintf(err, len, "%s failed: %s", call, text);
    return -1;
}

static int sum_floats(void *user, float *v, size_t n, char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_FLOAT,
                                   MPI_SUM, trainers),
                     "MPI_Allreduce", err, len);
}

static int sum_doubles(void *user, double *v, size_t n, char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE,
                                   MPI_SUM, trainers),
                     "MPI_Allreduce", err, len);
}

static int broadcast(void *user, float *v, size_t n, char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Bcast(v, (int)n, MPI_FLOAT, 0, trainers),
                     "MPI_Bcast", err, len);
}

static int agree(void *user, uint64_t value, int *same, char *err, size_t len)
{
    (void)user;
    /* the minimum of v and of ~v: equal values iff min(v) == max(v) */
    uint64_t v[2] = {value, ~value};
    if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MIN,
                                trainers),
                  "MPI_Allreduce", err, len))
        return -1;
    *same = v[0] == ~v[1];
    return 0;
}

static int gather(void *user, const double *mine, size_t n, double *all,
                  char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Gather(mine, (int)n, MPI_DOUBLE, all, (int)n,
                                MPI_DOUBLE, 0, trainers),
                     "MPI_Gather", err, len);
}

/* MPI counts bytes in ints: a part of a checkpoint that every process
 * may send at once, the whole within INT_MAX. */
static size_t largest_part(void)
{
    int size;
    MPI_Comm_size(trainers, &size);
    return (size_t)INT_MAX / (size_t)size;
}

/* Byte offsets of the parts from their sizes; 0, or -1 past INT_MAX. */
static int offsets(const size_t *counts, int size, int *icounts, int *displs)
{
    size_t at = 0;
    for (int r = 0; r < size; r++) {
        if (counts[r] > (size_t)INT_MAX - at)
            return -1;
        icounts[r] = (int)counts[r];
        displs[r] = (int)at;
        at += counts[r];
    }
    return 0;
}

static int gather_bytes(void *user, const void *mine, size_t n, void **all,
                        size_t *counts, char *err, size_t len)
{
    (void)user;
    int rank, size, failed = 0;
    MPI_Comm_rank(trainers, &rank);
    MPI_Comm_size(trainers, &size);
    if (n > largest_part()) { /* sent as nothing: a part that failed */
        snprintf(err, len,
                 "checkpoint: a part of %zu bytes is more than "
                 "MPI sends at once",
                 n);
        n = 0;
        failed = 1;
    }
    uint64_t n64 = n, *sizes = NULL;
    int *icounts = NULL, *displs = NULL;
    char *buf = NULL;
    if (rank == 0) {
        sizes = calloc((size_t)size, sizeof *sizes);
        icounts = calloc((size_t)size, sizeof *icounts);
        displs = calloc((size_t)size, sizeof *displs);
    }
    int rc = mpi_check(
        MPI_Gather(&n64, 1, MPI_UINT64_T, sizes, 1, MPI_UINT64_T, 0, trainers),
        "MPI_Gather", err, len);
    size_t total = 0;
    for (int r = 0; rc == 0 && rank == 0 && r < size; r++) {
        counts[r] = (size_t)sizes[r];
        total += counts[r];
    }
    if (rc == 0 && rank == 0 &&
        (!sizes || !icounts || !displs || !(buf = malloc(total ? total : 1)))) {
        /* the others are in the next collective: end the job */
        snprintf(err, len, "checkpoint: out of memory for %zu bytes", total);
        rc = -1;
    }
    if (rc == 0 && rank == 0)
        offsets(counts, size, icounts, displs); /* each part fits */
    if (rc == 0)
        rc = mpi_check(MPI_Gatherv(mine, (int)n, MPI_BYTE, buf, icounts, displs,
                                   MPI_BYTE, 0, trainers),
                       "MPI_Gatherv", err, len);
    free(sizes);
    free(icounts);
    free(displs);
    if (rc == 0 && rank == 0)
        *all = buf;
    else
        free(buf);
    return rc ? rc : failed ? -1 : 0;
}

static int scatter_bytes(void *user, const void *all, const size_t *counts,
                         void **mine, size_t *n, char *err, size_t len)
{
    (void)user;
    int rank, size, rc = 0;
    MPI_Comm_rank(trainers, &rank);
    MPI_Comm_size(trainers, &size);
    uint64_t *sizes = NULL, n64 = 0;
    int *icounts = NULL, *displs = NULL;
    if (rank == 0) {
        sizes = calloc((size_t)size, sizeof *sizes);
        icounts = calloc((size_t)size, sizeof *icounts);
        displs = calloc((size_t)size, sizeof *displs);
        if (!sizes || !icounts || !displs) {
            snprintf(err, len, "checkpoint: out of memory");
            rc = -1; /* the others are in the collective: end the job */
        } else if (offsets(counts, size, icounts, displs)) {
            /* each process then gets nothing, which it cannot restore */
            memset(icounts, 0, (size_t)size * sizeof *icounts);
            memset(displs, 0, (size_t)size * sizeof *displs);
        }
        for (int r = 0; rc == 0 && r < size; r++)
            sizes[r] = (uint64_t)icounts[r];
    }
    if (rc == 0)
        rc = mpi_check(MPI_Scatter(sizes, 1, MPI_UINT64_T, &n64, 1,
                                   MPI_UINT64_T, 0, trainers),
                       "MPI_Scatter", err, len);
    char *buf = rc == 0 ? malloc(n64 ? (size_t)n64 : 1) : NULL;
    if (rc == 0 && !buf) {
        snprintf(err, len, "checkpoint: out of memory for %llu bytes",
                 (unsigned long long)n64);
        rc = -1;
    }
    if (rc == 0)
        rc = mpi_check(MPI_Scatterv(all, icounts, displs, MPI_BYTE, buf,
                                    (int)n64, MPI_BYTE, 0, trainers),
                       "MPI_Scatterv", err, len);
    free(sizes);
    free(icounts);
    free(displs);
    if (rc == 0) {
        *mine = buf;
        *n = (size_t)n64;
    } else {
        free(buf);
    }
    return rc;
}

static int broadcast_bytes(void *user, void *buf, size_t n, char *err,
                           size_t len)
{
    (void)user;
    if (n > INT_MAX) {
        snprintf(err, len,
                 "MPI_Bcast of %zu bytes: more than MPI sends at "
                 "once",
                 n);
        return -1;
    }
    return mpi_check(MPI_Bcast(buf, (int)n, MPI_BYTE, 0, trainers), "MPI_Bcast",
                     err, len);
}

int train_mpi_start(eft_comm *comm, char *err, size_t len)
{
    if (!ef_service_launched())
        return 0;
    ef_service_hello hello = {.size = sizeof hello,
                              .role = EF_SERVICE_TRAINER};
    ef_service_info info = {.size = sizeof info};
    started = 1;
    if (ef_service_join(&hello, &info, err, len) != EF_OK) {
        orderly = 1; /* every process failed to join alike */
        return -1;
    }
    trainers = MPI_Comm_f2c((MPI_Fint)info.trainer_comm);
    *comm = (eft_comm){0};
    MPI_Comm_rank(trainers, &comm->rank);
    MPI_Comm_size(trainers, &comm->size);
    comm->sum_floats = sum_floats;
    comm->sum_doubles = sum_doubles;
    comm->broadcast = broadcast;
    comm->agree = agree;
    comm->gather = gather;
    comm->gather_bytes = gather_bytes;
    comm->scatter_bytes = scatter_bytes;
    comm->broadcast_bytes = broadcast_bytes;
    return 1;
}

/* The settings as one buffer: each name and value with its zero. */
static char *pack_settings(const char *const *names, const char *const *values,
                           int n, int *size)
{
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += strlen(names[i]) + strlen(values[i]) + 2;
    char *buf = malloc(total ? total : 1), *at = buf;
    for (int i = 0; buf && i < n; i++) {
        size_t a = strlen(names[i]) + 1, b = strlen(values[i]) + 1;
        memcpy(at, names[i], a);
        memcpy(at + a, values[i], b);
        at += a + b;
    }
    *size = (int)total;
    return buf;
}

/* This process's settings against process 0's (`theirs`, `size` bytes
 * of pack_settings): the first difference into msg, or an empty msg. */
static void compare_settings(const char *theirs, int size,
                             const char *const *names,
                             const char *const *values, int n, int rank,
                             char *msg, size_t len)
{
    size_t at = 0, end = (size_t)size; /* theirs[end] is a zero */
    msg[0] = '\0';
    for (int i = 0; i < n && !msg[0]; i++) {
        const char *name = at < end ? theirs + at : "";
        at += at < end ? strlen(name) + 1 : 0;
        const char *value = at < end ? theirs + at : "";
        at += at < end ? strlen(value) + 1 : 0;
        if (strcmp(name, names[i]))
            snprintf(msg, len,
                     "the settings differ between ranks: %s on rank 0, %s "
                     "on rank %d",
                     name[0] ? name : "(none)", names[i], rank);
        else if (strcmp(value, values[i]))
            snprintf(msg, len,
                     "%s differs between ranks: %.200s on rank 0, %.200s on "
                     "rank %d",
                     names[i], value, values[i], rank);
    }
    if (!msg[0] && at < end)
        snprintf(msg, len,
                 "the settings differ between ranks: rank 0 has more than "
                 "rank %d",
                 rank);
}

int train_mpi_same_settings(const char *const *names, const char *const *values,
                            int n, char *err, size_t len)
{
    int rank, nprocs, size;
    MPI_Comm_rank(trainers, &rank);
    MPI_Comm_size(trainers, &nprocs);
    char *mine = pack_settings(names, values, n, &size);
    if (!mine) {
        snprintf(err, len, "out of memory");
        return -1;
    }
    /* process 0's settings to every process, each comparing its own */
    char *theirs = NULL;
    int rc = mpi_check(MPI_Bcast(&size, 1, MPI_INT, 0, trainers),
                       "MPI_Bcast", err, len);
    if (rc == 0) {
        theirs = rank == 0 ? mine : malloc((size_t)size + 1);
        if (!theirs) {
            snprintf(err, len, "out of memory");
            rc = -1;
        }
    }
    if (rc == 0)
        rc = mpi_check(MPI_Bcast(theirs, size, MPI_CHAR, 0, trainers),
                       "MPI_Bcast", err, len);
    char msg[DIFF_MSG] = "";
    if (rc == 0 && rank != 0) {
        theirs[size] = '\0'; /* ends in one already, unless corrupt */
        compare_settings(theirs, size, names, values, n, rank, msg, sizeof msg);
    }
    if (theirs != mine)
        free(theirs);
    free(mine);
    if (rc)
        return rc;
    /* does any process differ? then process 0 says which, first by rank */
    int differs = msg[0] != '\0';
    if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, &differs, 1, MPI_INT, MPI_MAX,
                                trainers),
                  "MPI_Allreduce", err, len))
        return -1;
    if (!differs)
        return 0;
    char *all = rank == 0 ? calloc((size_t)nprocs, DIFF_MSG) : NULL;
    if (rank == 0 && !all) { /* the others are ended by MPI_Abort */
        snprintf(err, len,
                 "the settings differ between ranks (out of "
                 "memory to say which)");
        return -1;
    }
    rc = mpi_check(MPI_Gather(msg, DIFF_MSG, MPI_CHAR, all, DIFF_MSG, MPI_CHAR,
                              0, trainers),
                   "MPI_Gather", err, len);
    if (rc)
        return rc;
    orderly = 1;
    err[0] = '\0';
    int others = 0;
    for (int r = 1; rank == 0 && r < nprocs; r++) {
        const char *m = all + (size_t)r * DIFF_MSG;
        if (m[0] && !err[0])
            snprintf(err, len, "%.*s", DIFF_MSG, m);
        else if (m[0])
            others++;
    }
    if (others && err[0]) {
        size_t used = strlen(err);
        snprintf(err + used, len - used, " (and %d more rank%s)", others,
                 others > 1 ? "s differ" : " differs");
    }
    free(all);
    return -1;
}

void train_mpi_shared_failure(void)
{
    orderly = 1;
}

void train_mpi_finish(int exit_code)
{
    if (started)
        ef_service_leave(exit_code && !orderly ? exit_code : 0);
    started = 0;
}
