/* SPDX-License-Identifier: Apache-2.0 */
/* The service's calls in a build without MPI: each says what to install
 * (the `service` source says so too). */
#include <stdio.h>

#include "echoflow/echoflow.h"
#include "pipeline/service_link.h"

#define NO_MPI                                                                 \
    "echoflow was built without MPI; install it (apt-get install "             \
    "libopenmpi-dev openmpi-bin) and build again"

ef_status ef_service_join(const ef_service_hello *hello, ef_service_info *info,
                          char *err, size_t len)
{
    (void)hello;
    (void)info;
    snprintf(err, len, "%s", NO_MPI);
    return EF_EUNSUPPORTED;
}

ef_status ef_service_serve(const ef_serve_config *config,
                           ef_serve_report *report, char *err, size_t len)
{
    (void)config;
    (void)report;
    snprintf(err, len, "%s", NO_MPI);
    return EF_EUNSUPPORTED;
}

ef_status ef_service_trainers_bcast(void *buf, size_t len, char *err,
                                    size_t errlen)
{
    (void)buf;
    (void)len;
    snprintf(err, errlen, "%s", NO_MPI);
    return EF_EUNSUPPORTED;
}

void ef_service_leave(int status)
{
    (void)status;
}

/* the `service` source says what to install */
const ef__service_link *const ef__service = NULL;
