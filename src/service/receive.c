/* The trainer's receiving side: one thread per process takes the
 * workers' messages and hands their samples to the reader attached now
 * (the `service` source of the pipeline reading), and gives the workers
 * credit back as those samples are taken.
 *
 * A reader reads one epoch (its end: an end-of-epoch mark from every
 * worker) or, endless, every epoch from its first. Samples of an epoch no
 * reader reads are dropped, their credit given back at once: a reader
 * closed before its epoch's end cuts that epoch (the workers stop making
 * it), and the next reader opens the next epoch.
 *
 * Memory: each worker holds `credits` messages of room, each of at most
 * room_bytes of payload, so the process never holds more than
 * workers x credits x room_bytes of samples not yet taken; the queue is
 * sized for that many samples and a push never waits. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/queue.h"
#include "service/chunk.h"
#include "service/service.h"

/* samples per message at most: echo's default pool, so that a message's
 * burst of fresh samples never looks to automatic echoing like its
 * downstream's (serve.c) */
#define ROOM_ITEMS 64
#define ROOM_MIN ((int64_t)64 << 10)
#define ROOM_MAX ((int64_t)64 << 20)
#define ROOM_DEFAULT ((int64_t)16 << 20)

typedef struct {
    int worker;
    int64_t left; /* its samples not taken yet */
} pending_msg;

struct ef__service_reader {
    ef__queue q;
    int64_t epoch;
    int endless, ended;
    int failed; /* an error was taken: sticky */
    ef__err failure;
    /* the messages of the queued samples, oldest first (rx.mu) */
    pending_msg *fifo;
    size_t head, count, cap;
    ef__service_figures fig; /* rx.mu */
};

static struct {
    pthread_mutex_t mu; /* guards everything but the thread's own fields */
    pthread_t thread;
    int running, shut;
    atomic_int stop;
    ef__service_reader *reader;
    int64_t *owed; /* per worker: credits to give back */
    int64_t room_bytes;
    int credits;
    int64_t next_epoch;
    int endless_closed;
    int64_t *eoe; /* end-of-epoch marks per epoch */
    int64_t neoe;
    ef__err failure; /* a worker's: every read after fails with it */
    /* the thread's own */
    unsigned char *head;
    size_t head_cap;
} rx = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Under rx.mu: records a failure for the reader and every later one. */
static void fail_locked(const ef__err *e)
{
    if (!rx.failure.status)
        rx.failure = *e;
    ef__service_reader *r = rx.reader;
    if (r) {
        ef__item item = {.status = e->status};
        item.msg = ef__malloc(strlen(e->msg) + 1);
        if (item.msg)
            strcpy(item.msg, e->msg);
        if (ef__queue_push(&r->q, &item, NULL) != EF_OK)
            ef__item_clear(&item);
    }
}

static void fail(const ef__err *e)
{
    pthread_mutex_lock(&rx.mu);
    fail_locked(e);
    pthread_mutex_unlock(&rx.mu);
}

/* Gives a received chunk's samples to the reader of their epoch, or
 * drops them and gives the credit back. */
static void deliver(int w, ef_sample **s, int64_t n)
{
    int64_t epoch = ef_sample_identity(s[0]).epoch;
    pthread_mutex_lock(&rx.mu);
    ef__service_reader *r = rx.reader;
    int wanted =
        r && !r->ended && (r->endless ? epoch >= r->epoch : epoch == r->epoch);
    if (wanted && r->count == r->cap) {
        size_t cap = r->cap ? 2 * r->cap : 64;
        pending_msg *v = ef__malloc(cap * sizeof *v);
        if (!v) {
            wanted = 0;
        } else {
            for (size_t i = 0; i < r->count; i++)
                v[i] = r->fifo[(r->head + i) % r->cap];
            ef__free(r->fifo);
            r->fifo = v;
            r->head = 0;
            r->cap = cap;
        }
    }
    int64_t pushed = 0;
    if (wanted) {
        r->fifo[(r->head + r->count++) % r->cap] = (pending_msg){w, n};
        for (; pushed < n; pushed++) {
            ef__item item = {.status = EF_OK, .sample = s[pushed]};
            if (ef__queue_push(&r->q, &item, NULL) != EF_OK)
                break; /* stopped: the rest is dropped below */
        }
        if (pushed < n)
            r->fifo[(r->head + r->count - 1) % r->cap].left = pushed;
        if (pushed == 0)
            r->count--;
        r->fig.items += (uint64_t)pushed;
    }
    for (int64_t i = pushed; i < n; i++)
        ef_sample_free(s[i]);
    if (pushed == 0 && rx.owed)
        rx.owed[w]++;
    pthread_mutex_unlock(&rx.mu);
}

static int grow_head(size_t need, ef__err *err)
{
    if (need <= rx.head_cap)
        return EF_OK;
    unsigned char *p = ef__realloc(rx.head, need);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    rx.head = p;
    rx.head_cap = need;
    return EF_OK;
}

/* Receives the payload of a chunk whose header is in rx.head. */
static int receive_payload(const ef__service_job *job, int src,
                           uint64_t payload, ef_buffer *buf, const char *from,
                           size_t head_len, ef__err *err)
{
    ef__chunk_block *blocks = NULL;
    size_t n = 0;
    int rc = ef__chunk_blocks(rx.head, head_len, &blocks, &n, from, err);
    int mpi;
    if (rc != EF_OK) {
        /* read it whole to keep the stream in step, then fail */
        mpi = MPI_Recv(ef_buffer_data(buf), (int)payload, MPI_BYTE, src,
                       EF__TAG_PAYLOAD, job->data, MPI_STATUS_IGNORE);
        return rc;
    }
    int *lens = ef__malloc((n ? n : 1) * sizeof *lens);
    MPI_Aint *at = ef__malloc((n ? n : 1) * sizeof *at);
    if (!lens || !at) {
        ef__free(lens);
        ef__free(at);
        ef__free(blocks);
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        lens[i] = (int)blocks[i].nbytes;
        at[i] = (MPI_Aint)blocks[i].offset;
    }
    /* each field lands at its aligned offset in the one buffer */
    MPI_Datatype type;
    mpi = MPI_Type_create_hindexed((int)n, lens, at, MPI_BYTE, &type);
    if (mpi == MPI_SUCCESS) {
        mpi = MPI_Type_commit(&type);
        if (mpi == MPI_SUCCESS)
            mpi = MPI_Recv(ef_buffer_data(buf), 1, type, src, EF__TAG_PAYLOAD,
                           job->data, MPI_STATUS_IGNORE);
        MPI_Type_free(&type);
    }
    ef__free(lens);
    ef__free(at);
    ef__free(blocks);
    return mpi == MPI_SUCCESS ? EF_OK
                              : ef__service_mpi_error(mpi, "MPI_Recv", err);
}

static int receive_chunk(const ef__service_job *job, const MPI_Status *st,
                         int w, ef__err *err)
{
    char from[96];
    ef__service_rank_name(st->MPI_SOURCE, from, sizeof from);
    int len = 0;
    MPI_Get_count(st, MPI_BYTE, &len);
    uint64_t t0 = ef__timer_ns();
    if (grow_head((size_t)len + 1, err))
        return err->status;
    int mpi = MPI_Recv(rx.head, len, MPI_BYTE, st->MPI_SOURCE, EF__TAG_DATA,
                       job->data, MPI_STATUS_IGNORE);
    if (mpi != MPI_SUCCESS)
        return ef__service_mpi_error(mpi, "MPI_Recv", err);
    int64_t items;
    uint64_t payload;
    if (ef__chunk_peek(rx.head, (size_t)len, &items, &payload, from, err))
        return err->status; /* the stream cannot be followed further */
    ef_buffer *buf = ef_buffer_new(payload ? payload : 1);
    ef_sample **s = ef__malloc((size_t)items * sizeof *s);
    int rc = buf && s ? EF_OK
                      : ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (rc == EF_OK && payload)
        rc = receive_payload(job, st->MPI_SOURCE, payload, buf, from,
                             (size_t)len, err);
    if (rc == EF_OK)
        rc = ef__chunk_samples(rx.head, (size_t)len, buf, s, items, from, err);
    ef_buffer_release(buf); /* the samples hold their own references */
    if (rc == EF_OK) {
        pthread_mutex_lock(&rx.mu);
        if (rx.reader) {
            rx.reader->fig.messages++;
            rx.reader->fig.bytes += payload;
            rx.reader->fig.recv_s +=
                ef__ns_to_s(ef__elapsed_ns(t0, ef__timer_ns()));
        }
        pthread_mutex_unlock(&rx.mu);
        deliver(w, s, items);
    }
    ef__free(s);
    return rc;
}

/* A worker's end of epoch e. The marks are counted per epoch for a
 * reader of one epoch; an endless reader ends with the job, so its
 * epochs' marks are not kept. A worker ends only epochs a reader opened
 * (rx.next_epoch counts them): a later one is refused, as the table of
 * marks is sized by it. */
static int end_of_epoch(const ef__service_job *job, int source, int64_t e,
                        ef__err *err)
{
    pthread_mutex_lock(&rx.mu);
    if (rx.next_epoch == INT64_MAX) { /* an endless reader's */
        pthread_mutex_unlock(&rx.mu);
        return EF_OK;
    }
    if (e >= rx.next_epoch) {
        int64_t opened = rx.next_epoch;
        pthread_mutex_unlock(&rx.mu);
        char from[96];
        ef__service_rank_name(source, from, sizeof from);
        return ef__err_set(err, EF_EFORMAT,
                           "service: %s ended epoch %lld, which no reader "
                           "has opened (epochs 0 to %lld are)",
                           from, (long long)e, (long long)opened - 1);
    }
    if (e >= rx.neoe) {
        int64_t n = e + 1 > 2 * rx.neoe ? e + 1 : 2 * rx.neoe;
        int64_t *v = ef__realloc(rx.eoe, (size_t)n * sizeof *v);
        if (!v) {
            pthread_mutex_unlock(&rx.mu);
            return EF_OK; /* as before: the epoch does not end */
        }
        memset(v + rx.neoe, 0, (size_t)(n - rx.neoe) * sizeof *v);
        rx.eoe = v;
        rx.neoe = n;
    }
    rx.eoe[e]++;
    ef__service_reader *r = rx.reader;
    if (r && !r->endless && r->epoch == e && rx.eoe[e] == job->nworkers) {
        ef__item item = {.status = EF_END};
        ef__queue_push(&r->q, &item, NULL);
    }
    pthread_mutex_unlock(&rx.mu);
    return EF_OK;
}

/* Receives one message the probe found. */
static int receive_one(const ef__service_job *job, const MPI_Status *st,
                       ef__err *err)
{
    int w = ef__service_index(job, EF_SERVICE_WORKER, st->MPI_SOURCE);
    if (st->MPI_TAG == EF__TAG_DATA && w >= 0)
        return receive_chunk(job, st, w, err);
    if (st->MPI_TAG == EF__TAG_ERROR) {
        /* "STATUS MESSAGE" (serve.c) */
        int len = 0;
        MPI_Get_count(st, MPI_CHAR, &len);
        char *text = ef__malloc((size_t)len + 1);
        if (!text)
            return ef__err_set(err, EF_ENOMEM, "service: out of memory");
        int mpi = MPI_Recv(text, len, MPI_CHAR, st->MPI_SOURCE, EF__TAG_ERROR,
                           job->data, MPI_STATUS_IGNORE);
        if (mpi != MPI_SUCCESS) {
            ef__free(text);
            return ef__service_mpi_error(mpi, "MPI_Recv", err);
        }
        text[len] = '\0';
        char *rest;
        long status = strtol(text, &rest, 10);
        if (status < EF_ESHAPE || status >= 0 || *rest != ' ') {
            status = EF_EIO; /* not ours: said as it came */
            rest = text;
        } else {
            rest++;
        }
        ef__err e;
        ef__err_set(&e, (int)status, "%s", rest);
        ef__free(text);
        fail(&e);
        return EF_OK;
    }
    int64_t v[2] = {0, 0};
    int n = 0;
    MPI_Get_count(st, MPI_INT64_T, &n);
    if (n < 0 || n > 2) {
        char from[96];
        ef__service_rank_name(st->MPI_SOURCE, from, sizeof from);
        return ef__err_set(err, EF_EFORMAT,
                           "service: %s sent a message (tag %d) that is none "
                           "of the service's",
                           from, st->MPI_TAG);
    }
    int mpi = MPI_Recv(v, n, MPI_INT64_T, st->MPI_SOURCE, st->MPI_TAG,
                       job->data, MPI_STATUS_IGNORE);
    if (mpi != MPI_SUCCESS)
        return ef__service_mpi_error(mpi, "MPI_Recv", err);
    if (st->MPI_TAG == EF__TAG_EOE && n == 1 && w >= 0 && v[0] >= 0)
        return end_of_epoch(job, st->MPI_SOURCE, v[0], err);
    return EF_OK;
}

/* Sends the credits owed: room for one more message per credit. */
static int give_back(const ef__service_job *job, ef__err *err)
{
    int64_t room[2] = {0, ROOM_ITEMS};
    for (int w = 0; w < job->nworkers; w++) {
        pthread_mutex_lock(&rx.mu);
        int64_t n = rx.owed[w];
        rx.owed[w] = 0;
        room[0] = rx.room_bytes;
        pthread_mutex_unlock(&rx.mu);
        for (int64_t k = 0; k < n; k++)
            if (ef__service_send(job->data, job->workers[w], EF__TAG_CREDIT,
                                 room, 2, err))
                return err->status;
    }
    return EF_OK;
}

static void *receive_main(void *arg)
{
    (void)arg;
    const ef__service_job *job = ef__service_job_get();
    unsigned idle = 0;
    ef__err err;
    ef__err_clear(&err);
    while (!atomic_load(&rx.stop)) {
        int flag = 0;
        MPI_Status st;
        int mpi =
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, job->data, &flag, &st);
        int rc = mpi == MPI_SUCCESS
                     ? EF_OK
                     : ef__service_mpi_error(mpi, "MPI_Iprobe", &err);
        if (rc == EF_OK && flag)
            rc = receive_one(job, &st, &err);
        if (rc == EF_OK)
            rc = give_back(job, &err);
        if (rc != EF_OK) {
            fail(&err); /* what comes next cannot be trusted */
            return NULL;
        }
        if (flag)
            idle = 0;
        else
            ef__service_idle(&idle);
    }
    return NULL;
}

int ef__service_attach(int endless, uint64_t budget, int credits,
                       ef__service_reader **out, int64_t *epoch, ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    if (!job || job->role != EF_SERVICE_TRAINER)
        return ef__err_set(err, EF_ESTATE,
                           "service: this process has not joined the job as "
                           "a trainer");
    if (job->nworkers == 0)
        return ef__err_set(err, EF_ESTATE,
                           "service: no `echoflow serve` rank in this job; "
                           "start workers after a ':' in the mpirun command "
                           "(mpirun -np 1 TRAINER : -np 2 echoflow serve "
                           "SPEC)");
    ef__service_reader *r = ef__calloc(1, sizeof *r);
    if (!r)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    pthread_mutex_lock(&rx.mu);
    /* room for every sample the credits let the workers send (those of
     * the first reader: credits are given once per process), and the
     * ends and errors: a push never waits */
    int given = rx.running ? rx.credits : credits;
    size_t depth = (size_t)job->nworkers * (size_t)given * ROOM_ITEMS +
                   4 * (size_t)job->nworkers + 64;
    int rc = ef__queue_init(&r->q, depth) == EF_OK
                 ? EF_OK
                 : ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (rc != EF_OK) {
        pthread_mutex_unlock(&rx.mu);
        ef__free(r);
        return rc;
    }
    if (rc == EF_OK && rx.shut)
        rc = ef__err_set(err, EF_ESTATE,
                         "service: this process has left the job");
    else if (rc == EF_OK && rx.reader)
        rc = ef__err_set(err, EF_ESTATE,
                         "service: another pipeline of this process reads "
                         "the service now; one reads it at a time");
    else if (rc == EF_OK && rx.endless_closed)
        rc = ef__err_set(err, EF_ESTATE,
                         "service: a reader of every epoch (epochs=0) was "
                         "closed; this process cannot read the service "
                         "again");
    else if (rc == EF_OK && rx.failure.status)
        rc = ef__err_set(err, rx.failure.status, "%s", rx.failure.msg);
    if (rc == EF_OK && !rx.running) {
        /* the room of one message: a share of the budget */
        int64_t room = ROOM_DEFAULT;
        if (budget)
            room = (int64_t)(budget / 2 / (uint64_t)job->nworkers /
                             (uint64_t)credits);
        rx.room_bytes = room < ROOM_MIN   ? ROOM_MIN
                        : room > ROOM_MAX ? ROOM_MAX
                                          : room;
        rx.credits = credits;
        rx.owed = ef__calloc((size_t)job->nworkers, sizeof *rx.owed);
        if (!rx.owed)
            rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
        for (int w = 0; rc == EF_OK && w < job->nworkers; w++)
            rx.owed[w] = credits;
        if (rc == EF_OK && pthread_create(&rx.thread, NULL, receive_main, NULL))
            rc = ef__err_set(err, EF_ENOMEM,
                             "service: cannot start the receiving thread");
        rx.running = rc == EF_OK;
    }
    if (rc == EF_OK) {
        r->epoch = rx.next_epoch;
        r->endless = endless;
        rx.next_epoch = endless ? INT64_MAX : r->epoch + 1;
        rx.reader = r;
    }
    pthread_mutex_unlock(&rx.mu);
    int64_t open[2] = {r->epoch, endless};
    if (rc == EF_OK)
        rc = ef__service_send(job->dispatch, job->dispatcher, EF__TAG_OPEN,
                              open, 2, err);
    if (rc != EF_OK) {
        pthread_mutex_lock(&rx.mu);
        if (rx.reader == r)
            rx.reader = NULL;
        pthread_mutex_unlock(&rx.mu);
        ef__queue_destroy(&r->q);
        ef__free(r);
        return rc;
    }
    *out = r;
    *epoch = r->epoch;
    return EF_OK;
}

int ef__service_take(ef__service_reader *r, int block, ef_sample **out,
                     ef__err *err)
{
    if (r->ended)
        return EF_END;
    if (r->failed)
        return ef__err_set(err, r->failure.status, "%s", r->failure.msg);
    ef__item item;
    int rc = block ? ef__queue_pop(&r->q, &item, NULL)
                   : ef__queue_try_pop(&r->q, &item);
    if (rc == EF_AGAIN)
        return EF_AGAIN;
    if (rc != EF_OK)
        return ef__err_set(err, EF_ECANCELED,
                           "service: the pipeline was stopped");
    if (item.status == EF_OK) {
        pthread_mutex_lock(&rx.mu);
        pending_msg *m = &r->fifo[r->head];
        if (--m->left == 0) {
            if (rx.owed) /* NULL once this process has left */
                rx.owed[m->worker]++;
            r->head = (r->head + 1) % r->cap;
            r->count--;
        }
        pthread_mutex_unlock(&rx.mu);
        *out = item.sample;
        return EF_OK;
    }
    if (item.status == EF_END) {
        r->ended = 1;
        return EF_END;
    }
    r->failed = 1;
    ef__err_set(&r->failure, item.status, "%s",
                item.msg ? item.msg : "service: a worker failed");
    ef__item_clear(&item);
    return ef__err_set(err, r->failure.status, "%s", r->failure.msg);
}

void ef__service_cancel(ef__service_reader *r)
{
    ef__queue_close(&r->q);
}

void ef__service_detach(ef__service_reader *r)
{
    const ef__service_job *job = ef__service_job_get();
    pthread_mutex_lock(&rx.mu);
    if (rx.reader == r)
        rx.reader = NULL;
    for (size_t i = 0; rx.owed && i < r->count; i++)
        rx.owed[r->fifo[(r->head + i) % r->cap].worker]++;
    /* after leaving (ef_service_leave before the pipeline's end) there is
     * no one to tell */
    int cut = job && !r->endless && !r->ended && !rx.shut;
    if (r->endless)
        rx.endless_closed = 1;
    pthread_mutex_unlock(&rx.mu);
    if (cut) {
        /* the rest of the epoch would be dropped: the workers stop */
        ef__err err;
        ef__service_send(job->dispatch, job->dispatcher, EF__TAG_CUT, &r->epoch,
                         1, &err);
        for (int w = 0; w < job->nworkers; w++)
            ef__service_send(job->data, job->workers[w], EF__TAG_CUT, &r->epoch,
                             1, &err);
    }
    ef__queue_destroy(&r->q);
    ef__free(r->fifo);
    ef__free(r);
}

void ef__service_figures_get(const ef__service_reader *r,
                             ef__service_figures *out)
{
    pthread_mutex_lock(&rx.mu);
    *out = r->fig;
    pthread_mutex_unlock(&rx.mu);
}

void ef__service_receive_shutdown(void)
{
    const ef__service_job *job = ef__service_job_get();
    pthread_mutex_lock(&rx.mu);
    int was = rx.shut;
    rx.shut = 1;
    rx.reader = NULL; /* what still comes is dropped */
    pthread_mutex_unlock(&rx.mu);
    if (was || !job)
        return;
    if (rx.running) {
        atomic_store(&rx.stop, 1);
        pthread_join(rx.thread, NULL);
        rx.running = 0;
    }
    if (job->nworkers) {
        /* the dispatcher first, so that it answers FINISH to the workers
         * once every trainer has left; then each worker, whose last
         * message to this process is its answer */
        ef__err err;
        int64_t none = 0;
        ef__service_send(job->dispatch, job->dispatcher, EF__TAG_LEAVE, &none,
                         1, &err);
        for (int w = 0; w < job->nworkers; w++)
            ef__service_send(job->data, job->workers[w], EF__TAG_BYE, &none, 0,
                             &err);
        /* received as ever, with no reader: dropped */
        int acked = 0;
        unsigned idle = 0;
        while (acked < job->nworkers) {
            int flag = 0;
            MPI_Status st;
            if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, job->data, &flag,
                           &st) != MPI_SUCCESS ||
                (flag && receive_one(job, &st, &err) != EF_OK))
                break;
            acked += flag && st.MPI_TAG == EF__TAG_BYE_ACK;
            if (flag)
                idle = 0;
            else
                ef__service_idle(&idle);
        }
    }
    pthread_mutex_lock(&rx.mu);
    ef__free(rx.owed);
    ef__free(rx.eoe);
    ef__free(rx.head);
    rx.owed = NULL;
    rx.eoe = NULL;
    rx.head = NULL;
    pthread_mutex_unlock(&rx.mu);
}
