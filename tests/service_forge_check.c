/* SPDX-License-Identifier: Apache-2.0 */
/* A worker that claims more than its credit, or stops halfway through a
 * message, is caught by the trainer instead of holding its receiving
 * thread (and every worker behind it) for good.
 *
 * Run under mpirun with two processes: rank 0 a trainer reading one epoch
 * of `service:liveness=2` under a 64 MiB budget, rank 1 posing as a
 * worker that, once it holds a credit, sends one forged chunk header:
 *   several  2 samples claiming 1 GiB of payload: refused at once;
 *   single   1 sample claiming 1 GiB, over what a credit of this budget
 *            lets one sample have: refused at once;
 *   stall    1 sample of 1 MiB, and then nothing of its payload: reading
 *            fails after the liveness timeout, naming the worker (the job
 *            then ends by MPI_Abort: the script checks the message).
 * Exit status 0 when rank 0 got the refusal it expects. */
#include <stdio.h>
#include <string.h>

#include "echoflow/echoflow.h"
#include "service/chunk.h"
#include "service/service.h"

static const char *mode;

static int trainer(void)
{
    ef_pipeline *p = NULL;
    if (ef_pipeline_create(&p) != EF_OK ||
        ef_pipeline_set_memory_budget(p, (uint64_t)64 << 20) != EF_OK ||
        ef_pipeline_parse(p, "service:epochs=1,liveness=2") != EF_OK) {
        fprintf(stderr, "trainer: %s\n",
                p ? ef_pipeline_error(p) : "no pipeline");
        ef_pipeline_destroy(p);
        return 1;
    }
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(p, &s);
    const char *msg = ef_pipeline_error(p);
    const char *want =
        !strcmp(mode, "several")
            ? "sent a message of 1073741824 bytes in 2 samples; the credit "
              "it answers allows 8388608 bytes in at most 64 samples"
        : !strcmp(mode, "single")
            ? "sent a sample of 1073741824 bytes; the credit it answers "
              "allows one sample of 67108864 bytes at most"
            : "sent nothing for 2 s (liveness timeout, option "
              "service:liveness) after announcing a message of 1048576 "
              "bytes";
    int ok = rc == (strcmp(mode, "stall") ? EF_EFORMAT : EF_EIO) &&
             strstr(msg, "service: rank 1 (a worker) ") && strstr(msg, want);
    fprintf(stderr, "trainer: %s: %s\n", ef_status_name(rc), msg);
    ef_sample_free(s);
    ef_pipeline_destroy(p);
    return !ok;
}

/* A chunk header of `n` samples of 16 bytes each, its payload count then
 * overwritten with `claim`. */
static int forge(ef__chunk_out *c, int n, uint64_t claim)
{
    ef__err err;
    ef__chunk_out_reset(c);
    for (int i = 0; i < n; i++) {
        ef_sample *s = ef_sample_new((ef_sample_id){.index = i, .fresh = 1});
        int64_t shape[1] = {16};
        void *data = NULL;
        int rc = s ? ef_sample_add_new(s, "x", EF_U8, 1, shape, &data)
                   : EF_ENOMEM;
        if (rc == EF_OK) {
            memset(data, 0, 16);
            rc = ef__chunk_out_add(c, s, 0, 0, i, &err);
        }
        ef_sample_free(s); /* the header keeps no reference */
        if (rc != EF_OK)
            return rc;
    }
    memcpy(c->head + 16, &claim, sizeof claim);
    return EF_OK;
}

/* Waits for a credit, sends the forged header, then takes what the
 * trainer sends until its BYE, which it acknowledges, as a worker does,
 * so that the trainer leaves (after a refusal; after a stall the job is
 * aborted). Never beats: in `stall`, nothing more comes from it. */
static int fake_worker(void)
{
    const ef__service_job *job = ef__service_job_get();
    int t = job->trainers[0];
    int64_t v[3];
    MPI_Status st;
    ef__err err;
    ef__err_clear(&err);
    do {
        if (MPI_Recv(v, 3, MPI_INT64_T, t, MPI_ANY_TAG, job->data, &st) !=
            MPI_SUCCESS)
            return 1;
    } while (st.MPI_TAG != EF__TAG_CREDIT);
    ef__chunk_out c = {0};
    int several = !strcmp(mode, "several");
    uint64_t claim =
        !strcmp(mode, "stall") ? (uint64_t)1 << 20 : (uint64_t)1 << 30;
    if (forge(&c, several ? 2 : 1, claim) != EF_OK ||
        MPI_Send(c.head, (int)c.head_len, MPI_BYTE, t, EF__TAG_DATA,
                 job->data) != MPI_SUCCESS) {
        ef__chunk_out_free(&c);
        return 1;
    }
    ef__chunk_out_free(&c);
    for (;;) {
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
    mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "several") && strcmp(mode, "single") &&
        strcmp(mode, "stall")) {
        fprintf(stderr, "usage: service_forge_check several|single|stall\n");
        MPI_Finalize();
        return 2;
    }
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
