/* The trainer's collectives over MPI (see train_mpi.h). Only the main
 * thread calls MPI (MPI_THREAD_FUNNELED): the pipeline's and the model's
 * threads never do. Errors return instead of aborting, so each names the
 * call that failed. */
#include "train_mpi.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int started;

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
                                   MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Allreduce", err, len);
}

static int sum_doubles(void *user, double *v, size_t n, char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE,
                                   MPI_SUM, MPI_COMM_WORLD),
                     "MPI_Allreduce", err, len);
}

static int broadcast(void *user, float *v, size_t n, char *err, size_t len)
{
    (void)user;
    return mpi_check(MPI_Bcast(v, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD),
                     "MPI_Bcast", err, len);
}

static int agree(void *user, uint64_t value, int *same, char *err, size_t len)
{
    (void)user;
    /* the minimum of v and of ~v: equal values iff min(v) == max(v) */
    uint64_t v[2] = {value, ~value};
    if (mpi_check(MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_MIN,
                                MPI_COMM_WORLD),
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
                                MPI_DOUBLE, 0, MPI_COMM_WORLD),
                     "MPI_Gather", err, len);
}

/* Open MPI's launcher sets OMPI_COMM_WORLD_SIZE; PMIx and PMI launchers
 * (srun, hydra) set their own. */
static int launched(void)
{
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
           getenv("PMI_RANK");
}

int train_mpi_start(int *argc, char ***argv, eft_comm *comm, char *err,
                    size_t len)
{
    if (!launched())
        return 0;
    /* A process waiting in a collective spins by default, taking a core
     * from the pipeline's threads and the model's; with the input on the
     * same cores, yielding is worth more than the microseconds it costs.
     * The user's own setting wins. */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
    int provided;
    if (mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided),
                  "MPI_Init_thread", err, len))
        return -1;
    started = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (provided < MPI_THREAD_FUNNELED) {
        snprintf(err, len, "MPI provides no thread support: the trainer's "
                           "threads need MPI_THREAD_FUNNELED");
        return -1;
    }
    *comm = (eft_comm){0};
    MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &comm->size);
    comm->sum_floats = sum_floats;
    comm->sum_doubles = sum_doubles;
    comm->broadcast = broadcast;
    comm->agree = agree;
    comm->gather = gather;
    return 1;
}

void train_mpi_finish(int exit_code)
{
    if (started && exit_code)
        MPI_Abort(MPI_COMM_WORLD, exit_code);
    if (started)
        MPI_Finalize();
    started = 0;
}
