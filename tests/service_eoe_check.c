/* SPDX-License-Identifier: Apache-2.0 */
/* A worker's end-of-epoch mark for an epoch no reader opened is refused,
 * naming the rank and the epoch, instead of sizing the trainer's table of
 * marks by it (epoch 1e8 would take 800 MB).
 *
 * Run under mpirun with two processes: rank 0 a trainer reading one epoch
 * of the `service` source, rank 1 posing as a worker that sends only the
 * bad mark. Exit status 0 when rank 0 got the refusal. */
#include <stdio.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "service/service.h"

static int trainer(void)
{
    ef_pipeline *p = NULL;
    if (ef_pipeline_create(&p) != EF_OK ||
        ef_pipeline_parse(p, "service:epochs=1") != EF_OK) {
        fprintf(stderr, "trainer: %s\n",
                p ? ef_pipeline_error(p) : "no pipeline");
        ef_pipeline_destroy(p);
        return 1;
    }
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    const char *msg = ef_pipeline_error(p);
    int ok = rc == EF_EFORMAT && strstr(msg, "rank 1") &&
             strstr(msg, "ended epoch 100000000, which no reader has opened");
    fprintf(stderr, "trainer: %s: %s\n", ef_status_name(rc), msg);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    return !ok;
}

/* Sends the bad mark, then takes what the trainer sends until its BYE,
 * which it acknowledges, as a worker does, so that the trainer leaves. */
static int fake_worker(void)
{
    const ef__service_job *job = ef__service_job_get();
    int t = job->trainers[0];
    int64_t e = 100000000, v[3];
    ef__err err;
    ef__err_clear(&err);
    if (ef__service_send(job->data, t, EF__TAG_EOE, &e, 1, &err)) {
        fprintf(stderr, "worker: %s\n", err.msg);
        return 1;
    }
    for (;;) {
        MPI_Status st;
        if (MPI_Recv(v, 3, MPI_INT64_T, t, MPI_ANY_TAG, job->data, &st) !=
            MPI_SUCCESS)
            return 1;
        if (st.MPI_TAG == EF__TAG_BYE)
            return ef__service_send(job->data, t, EF__TAG_BYE_ACK, v, 0, &err);
    }
}

int main(int argc, char **argv)
{
    int provided = 0, rank = -1;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ef_service_hello hello = {.size = sizeof hello,
                              .role = rank == 1 ? EF_SERVICE_WORKER
                                                : EF_SERVICE_TRAINER};
    ef_service_info info = {.size = sizeof info};
    char err[512];
    int rc = ef_service_join(&hello, &info, err, sizeof err);
    if (rc != EF_OK)
        fprintf(stderr, "join: %s\n", err);
    else
        rc = rank == 0 ? trainer() : fake_worker();
    ef_service_leave(0);
    MPI_Finalize();
    return rc != 0;
}
