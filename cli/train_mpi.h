/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow train` under mpirun: the trainer's collectives (eft_comm) over
 * MPI. Built when CMake finds MPI (EF_HAVE_MPI). */
#ifndef EF_TRAIN_MPI_H
#define EF_TRAIN_MPI_H

#include <stddef.h>

#include "trainer.h"

/* When a launcher (mpirun) started this process: joins the job as a
 * trainer (ef_service_join, which initialises MPI), fills *comm with the
 * trainers' collectives (`echoflow serve` workers take no part in them)
 * and returns 1. Otherwise returns 0 and MPI stays untouched, so a plain
 * run costs nothing. -1 when joining fails, with a message in err on the
 * process that says it ("" on the others); train_mpi_finish() then ends
 * in order. */
int train_mpi_start(eft_comm *comm, char *err, size_t len);
/* Checks that every process was started with the same settings: the
 * `n` option names and values (text) each process passes, in the same
 * order on all. Returns 0 when they agree; otherwise -1 on every process,
 * with in err, on process 0, the first option that differs and the two
 * values ("--lr differs between ranks: 0.05 on rank 0, 0.1 on rank 1")
 * and an empty err elsewhere; every process then knows, so
 * train_mpi_finish() ends MPI in order. -1 with a message when an MPI
 * call fails. A collective: every process calls it. */
int train_mpi_same_settings(const char *const *names, const char *const *values,
                            int n, char *err, size_t len);
/* Marks the run's failure as one every process met at the same
 * collective and knows of (eft_result.shared_failure), each with its
 * message printed: train_mpi_finish() then ends MPI in order, every
 * process exiting with its own status, rather than by MPI_Abort (which
 * could end a process before it printed why). */
void train_mpi_shared_failure(void);
/* Ends MPI when train_mpi_start() started it: in order after a run that
 * succeeded or that every process knows failed (train_mpi_same_settings);
 * otherwise by MPI_Abort, so that no process that is still in a
 * collective waits forever for this one. */
void train_mpi_finish(int exit_code);

#endif
