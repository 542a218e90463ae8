/* `echoflow train` under mpirun: the trainer's collectives (eft_comm) over
 * MPI. Built when CMake finds MPI (EF_HAVE_MPI). */
#ifndef EF_TRAIN_MPI_H
#define EF_TRAIN_MPI_H

#include <stddef.h>

#include "trainer.h"

/* When a launcher (mpirun) started this process: initialises MPI, fills
 * *comm and returns 1. Otherwise returns 0 and MPI stays untouched, so a
 * plain run costs nothing. -1 with a message in err when MPI fails. */
int train_mpi_start(int *argc, char ***argv, eft_comm *comm, char *err,
                    size_t len);
/* Ends MPI when train_mpi_start() started it: in order after a run that
 * succeeded; otherwise by MPI_Abort, so that no process that is still in
 * a collective waits forever for this one. */
void train_mpi_finish(int exit_code);

#endif
