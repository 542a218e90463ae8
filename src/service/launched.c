/* SPDX-License-Identifier: Apache-2.0 */
/* Whether a launcher started this process: in every build, with MPI or
 * without (session.c, none.c). */
#include <stdlib.h>

#include "echoflow/echoflow.h"

int ef_service_launched(void)
{
    /* Open MPI's launcher sets OMPI_COMM_WORLD_SIZE; PMIx and PMI
     * launchers (srun, hydra) set their own */
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") ||
           getenv("PMI_RANK");
}
