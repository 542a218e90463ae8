/* SPDX-License-Identifier: Apache-2.0 */
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
 * room_bytes of payload or one sample of at most single_bytes (the
 * budget's limit), and a message claiming more than the credit it
 * answers is refused. A message's payload is charged to the reader's
 * budget before its buffer is made, waiting for room while the reader
 * has samples left to take (a reader with none takes one message
 * whatever its size, as budget.h's queues do), and given back when the
 * message's last sample is taken. The queue is sized for every sample
 * the credits let in, so a push never waits.
 *
 * Liveness: every worker says it lives every EF__HEARTBEAT_MS (serve.c).
 * When the thread finds nothing waiting, a worker it has not heard from
 * for the liveness timeout fails the reading, naming it; a message whose
 * header came but whose body does not come within the timeout does too.
 * Checking only with nothing waiting means that time this thread spent
 * elsewhere (receiving, waiting for the budget) never counts against a
 * worker whose messages were queued meanwhile. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/queue.h"
#include "core/sample.h"
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
    int64_t left;   /* its samples not taken yet */
    uint64_t bytes; /* charged to the reader's budget until then */
} pending_msg;

struct ef__service_reader {
    ef__queue q;
    int64_t epoch;
    int endless, ended;
    int failed; /* an error was taken: sticky */
    ef__err failure;
    ef__budget *budget; /* the pipeline's (NULL: none) */
    /* the messages of the queued samples, oldest first (rx.mu) */
    pending_msg *fifo;
    size_t head, count, cap;
    ef__service_figures fig; /* rx.mu */
    /* what its consumer was handed, for checkpoints (rx.mu) */
    ef__progress *progress;
    int resumed; /* progress was restored from a checkpoint */
};

static struct {
    pthread_mutex_t mu; /* guards everything but the thread's own fields */
    pthread_t thread;
    int running, shut;
    atomic_int stop;
    ef__service_reader *reader;
    int64_t *owed;    /* per worker: credits to give back */
    int64_t *granted; /* per worker: credits given and not used yet */
    int64_t room_bytes, single_bytes;
    int credits;
    uint64_t liveness_ns; /* the last reader's */
    int silent;           /* a worker went silent: no orderly end */
    /* a message's payload charged before its samples reach a reader:
     * the bytes and the reader whose budget holds them (NULL: none) */
    uint64_t charged;
    ef__service_reader *charged_reader;
    int64_t next_epoch;
    int endless_closed;
    int64_t *eoe; /* end-of-epoch marks per epoch */
    int64_t neoe;
    ef__err failure; /* a worker's: every read after fails with it */
    /* the thread's own (and leave's, once the thread has ended) */
    unsigned char *head;
    size_t head_cap;
    uint64_t *heard; /* per worker: when its last message came */
} rx = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Whether reader r reads samples of `epoch`. */
static int wants(const ef__service_reader *r, int64_t epoch)
{
    return r && !r->ended &&
           (r->endless ? epoch >= r->epoch : epoch == r->epoch);
}

/* Under rx.mu: gives a message's charge back to r's budget. */
static void release(ef__service_reader *r, uint64_t bytes)
{
    if (bytes && r->budget)
        ef__budget_release(r->budget, bytes);
}

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
    int wanted = wants(r, epoch);
    /* the charge made for this message, if its reader is still there
     * (a reader that left gave it back) */
    uint64_t bytes = r && rx.charged_reader == r ? rx.charged : 0;
    rx.charged = 0;
    rx.charged_reader = NULL;
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
        r->fifo[(r->head + r->count++) % r->cap] = (pending_msg){w, n, bytes};
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
    if (pushed == 0 && r)
        release(r, bytes);
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

static uint64_t liveness_ns(void)
{
    pthread_mutex_lock(&rx.mu);
    uint64_t t = rx.liveness_ns;
    pthread_mutex_unlock(&rx.mu);
    return t;
}

/* Receives a message the probe announced, failing when it has not come
 * whole within the liveness timeout: a sender stopped halfway (a header
 * and then nothing) must not hold this thread, and every worker behind
 * it, for good. On that failure MPI may still write into buf later, so
 * the caller must not free it (the job ends: rx.silent). */
static int recv_within(void *buf, int count, MPI_Datatype type, int src,
                       int tag, const char *what, const char *from,
                       ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    MPI_Request req;
    int mpi = MPI_Irecv(buf, count, type, src, tag, job->data, &req);
    if (mpi != MPI_SUCCESS)
        return ef__service_mpi_error(mpi, "MPI_Irecv", err);
    uint64_t t0 = ef__now_ns(), limit = liveness_ns();
    unsigned idle = 0;
    for (;;) {
        int done = 0;
        mpi = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (mpi != MPI_SUCCESS)
            return ef__service_mpi_error(mpi, "MPI_Test", err);
        if (done)
            return EF_OK;
        if (ef__elapsed_ns(t0, ef__now_ns()) > limit)
            break;
        ef__service_idle(&idle);
    }
    MPI_Cancel(&req);
    pthread_mutex_lock(&rx.mu);
    rx.silent = 1;
    pthread_mutex_unlock(&rx.mu);
    return ef__err_set(err, EF_EIO,
                       "service: %s sent nothing for %.3g s (liveness "
                       "timeout, option service:liveness) after announcing "
                       "%s: it is stopped, hung or cut off; a link that "
                       "needs longer for one message needs a larger "
                       "liveness",
                       from, ef__ns_to_s(limit), what);
}

/* Receives the payload of a chunk whose header is in rx.head. On a
 * liveness failure *keep is set: buf must stay (recv_within). */
static int receive_payload(int src, uint64_t payload, ef_buffer *buf,
                           const char *from, size_t head_len, int *keep,
                           ef__err *err)
{
    char what[96];
    snprintf(what, sizeof what, "a message of %llu bytes",
             (unsigned long long)payload);
    ef__chunk_block *blocks = NULL;
    size_t n = 0;
    int rc = ef__chunk_blocks(rx.head, head_len, &blocks, &n, from, err);
    if (rc != EF_OK) {
        /* read it whole to keep the stream in step, then fail */
        ef__err ignored;
        *keep = recv_within(ef_buffer_data(buf), (int)payload, MPI_BYTE, src,
                            EF__TAG_PAYLOAD, what, from, &ignored) != EF_OK;
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
    int mpi = MPI_Type_create_hindexed((int)n, lens, at, MPI_BYTE, &type);
    if (mpi == MPI_SUCCESS) {
        mpi = MPI_Type_commit(&type);
        if (mpi == MPI_SUCCESS) {
            rc = recv_within(ef_buffer_data(buf), 1, type, src,
                             EF__TAG_PAYLOAD, what, from, err);
            *keep = rc != EF_OK && rx.silent;
        }
        MPI_Type_free(&type);
    }
    ef__free(lens);
    ef__free(at);
    ef__free(blocks);
    if (mpi != MPI_SUCCESS)
        return ef__service_mpi_error(mpi, "MPI_Type_commit", err);
    return rc;
}

/* Checks what a chunk's header claims against the credit it answers: at
 * most ROOM_ITEMS samples in room_bytes, or one sample of single_bytes.
 * A worker that claims more is refused before anything is allocated. */
static int check_claim(int w, int64_t items, uint64_t payload,
                       const char *from, ef__err *err)
{
    pthread_mutex_lock(&rx.mu);
    int64_t granted = rx.granted ? rx.granted[w] : 0;
    if (granted > 0)
        rx.granted[w]--;
    uint64_t room = (uint64_t)rx.room_bytes,
             single = (uint64_t)rx.single_bytes;
    pthread_mutex_unlock(&rx.mu);
    if (granted <= 0)
        return ef__err_set(err, EF_EFORMAT,
                           "service: %s sent a message with no credit of "
                           "this process left (each message answers one)",
                           from);
    if (items > 1 && (items > ROOM_ITEMS || payload > room))
        return ef__err_set(err, EF_EFORMAT,
                           "service: %s sent a message of %llu bytes in %lld "
                           "samples; the credit it answers allows %llu bytes "
                           "in at most %d samples",
                           from, (unsigned long long)payload,
                           (long long)items, (unsigned long long)room,
                           ROOM_ITEMS);
    if (items == 1 && payload > single)
        return ef__err_set(err, EF_EFORMAT,
                           "service: %s sent a sample of %llu bytes; the "
                           "credit it answers allows one sample of %llu "
                           "bytes at most",
                           from, (unsigned long long)payload,
                           (unsigned long long)single);
    return EF_OK;
}

/* Charges a chunk's payload to the budget of the reader its samples go
 * to, before its buffer is made (rx.charged, rx.charged_reader; nothing
 * when no reader wants them). Waits while the budget has no room and the
 * reader has samples left to take; a reader with none takes the message
 * whatever its size, so the pipeline never waits on itself. A message
 * larger than the reader's whole budget fails that reader with the
 * budget's out-of-memory error, and is received and dropped. */
static void reserve(int64_t items, int64_t epoch, uint64_t payload,
                    const char *from)
{
    unsigned idle = 0;
    pthread_mutex_lock(&rx.mu);
    while (!atomic_load(&rx.stop)) {
        ef__service_reader *r = rx.reader;
        if (!wants(r, epoch) || !r->budget || !payload)
            break; /* dropped on delivery, or nothing to count */
        if (!ef__budget_fits(r->budget, payload)) {
            char what[160];
            snprintf(what, sizeof what,
                     "service: a message of %lld samples from %s",
                     (long long)items, from);
            ef__err e;
            ef__budget_check(r->budget, payload, what, &e);
            fail_locked(&e);
            break;
        }
        int took = ef__budget_try_take(r->budget, payload);
        if (!took && r->count == 0) {
            ef__budget_hold(r->budget, payload);
            took = 1;
        }
        if (took) {
            rx.charged = payload;
            rx.charged_reader = r;
            break;
        }
        pthread_mutex_unlock(&rx.mu);
        ef__service_idle(&idle);
        pthread_mutex_lock(&rx.mu);
    }
    pthread_mutex_unlock(&rx.mu);
}

/* The epoch of a chunk's first sample (chunk.c: after the 24 bytes of
 * counts, its index, then its epoch); the header was peeked. */
static int64_t first_epoch(const unsigned char *head, size_t len)
{
    int64_t e = -1; /* too short: no reader wants it, and walk() fails */
    if (len >= 40)
        memcpy(&e, head + 32, sizeof e);
    return e;
}

static int receive_chunk(const MPI_Status *st, int w, ef__err *err)
{
    char from[96];
    ef__service_rank_name(st->MPI_SOURCE, from, sizeof from);
    int len = 0;
    MPI_Get_count(st, MPI_BYTE, &len);
    uint64_t t0 = ef__timer_ns();
    if (grow_head((size_t)len + 1, err))
        return err->status;
    int rc = recv_within(rx.head, len, MPI_BYTE, st->MPI_SOURCE, EF__TAG_DATA,
                         "a message", from, err);
    if (rc != EF_OK) {
        rx.head = NULL; /* MPI may still write there (recv_within) */
        rx.head_cap = 0;
        return rc;
    }
    int64_t items;
    uint64_t payload;
    if (ef__chunk_peek(rx.head, (size_t)len, &items, &payload, from, err) ||
        check_claim(w, items, payload, from, err))
        return err->status; /* the stream cannot be followed further */
    reserve(items, first_epoch(rx.head, (size_t)len), payload, from);
    ef_buffer *buf = ef_buffer_new(payload ? payload : 1);
    ef_sample **s = ef__malloc((size_t)items * sizeof *s);
    rc = buf && s ? EF_OK
                  : ef__err_set(err, EF_ENOMEM, "service: out of memory");
    int keep = 0;
    if (rc == EF_OK && payload)
        rc = receive_payload(st->MPI_SOURCE, payload, buf, from, (size_t)len,
                             &keep, err);
    if (rc == EF_OK)
        rc = ef__chunk_samples(rx.head, (size_t)len, buf, s, items, from, err);
    if (!keep)
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
    } else {
        pthread_mutex_lock(&rx.mu);
        if (rx.charged_reader)
            release(rx.charged_reader, rx.charged);
        rx.charged = 0;
        rx.charged_reader = NULL;
        pthread_mutex_unlock(&rx.mu);
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
    ef__service_reader *reading = rx.reader;
    /* out of memory fails the record's next save */
    if (wants(reading, e))
        (void)ef__progress_epoch_end(reading->progress, e, job->nworkers);
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

/* A worker's split ended, its order `size` samples long: recorded for
 * the reader's checkpoints. */
static void split_end(int64_t epoch, int64_t split, int64_t size)
{
    pthread_mutex_lock(&rx.mu);
    ef__service_reader *r = rx.reader;
    if (wants(r, epoch) && size >= 0)
        (void)ef__progress_split_end(r->progress, epoch, split, size);
    pthread_mutex_unlock(&rx.mu);
}

/* Receives one message the probe found. */
static int receive_one(const ef__service_job *job, const MPI_Status *st,
                       ef__err *err)
{
    int w = ef__service_index(job, EF_SERVICE_WORKER, st->MPI_SOURCE);
    if (w >= 0 && rx.heard)
        rx.heard[w] = ef__now_ns();
    if (st->MPI_TAG == EF__TAG_DATA && w >= 0)
        return receive_chunk(st, w, err);
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
    int64_t v[3] = {0, 0, 0};
    int n = 0;
    MPI_Get_count(st, MPI_INT64_T, &n);
    if (n < 0 || n > 3) {
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
    if (st->MPI_TAG == EF__TAG_SPLIT_END && n == 3 && w >= 0)
        split_end(v[0], v[1], v[2]);
    return EF_OK;
}

/* Sends the credits owed: room for one more message per credit. */
static int give_back(const ef__service_job *job, ef__err *err)
{
    int64_t room[3] = {0, ROOM_ITEMS, 0};
    for (int w = 0; w < job->nworkers; w++) {
        pthread_mutex_lock(&rx.mu);
        int64_t n = rx.owed[w];
        rx.owed[w] = 0;
        rx.granted[w] += n;
        room[0] = rx.room_bytes;
        room[2] = rx.single_bytes;
        pthread_mutex_unlock(&rx.mu);
        for (int64_t k = 0; k < n; k++)
            if (ef__service_send(job->data, job->workers[w], EF__TAG_CREDIT,
                                 room, 3, err))
                return err->status;
    }
    return EF_OK;
}

/* With nothing waiting to be received: fails naming the first worker
 * not heard from for the liveness timeout. */
static int check_liveness(const ef__service_job *job, ef__err *err)
{
    uint64_t now = ef__now_ns(), limit = liveness_ns();
    for (int w = 0; w < job->nworkers; w++) {
        if (ef__elapsed_ns(rx.heard[w], now) <= limit)
            continue;
        pthread_mutex_lock(&rx.mu);
        rx.silent = 1;
        pthread_mutex_unlock(&rx.mu);
        char from[96];
        ef__service_rank_name(job->workers[w], from, sizeof from);
        return ef__err_set(err, EF_EIO,
                           "service: %s sent nothing for %.3g s (liveness "
                           "timeout, option service:liveness): it is "
                           "stopped, hung or cut off (a worker says it lives "
                           "every %d ms, however slow its pipeline); on a "
                           "slow or loaded link raise it, as in "
                           "service:liveness=600",
                           from, ef__ns_to_s(limit), EF__HEARTBEAT_MS);
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
        if (rc == EF_OK && !flag)
            rc = check_liveness(job, &err);
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

/* A new reader with a queue of `depth` items; NULL when out of memory. */
static ef__service_reader *new_reader(size_t depth)
{
    ef__service_reader *r = ef__calloc(1, sizeof *r);
    if (r && ef__queue_init(&r->q, depth) != EF_OK) {
        ef__free(r);
        r = NULL;
    }
    return r;
}

/* Undoes an attach that failed after new_reader(): `r` stops being the
 * process's reader if it became it, and goes. Accepts NULL. */
static void drop_reader(ef__service_reader *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&rx.mu);
    if (rx.reader == r)
        rx.reader = NULL;
    pthread_mutex_unlock(&rx.mu);
    ef__queue_destroy(&r->q);
    ef__progress_free(r->progress);
    ef__free(r);
}

/* Why this process cannot attach a reader now, or EF_OK. Under rx.mu. */
static int attach_refusal(ef__err *err)
{
    if (rx.shut)
        return ef__err_set(err, EF_ESTATE,
                           "service: this process has left the job");
    if (rx.reader)
        return ef__err_set(err, EF_ESTATE,
                           "service: another pipeline of this process reads "
                           "the service now; one reads it at a time");
    if (rx.endless_closed)
        return ef__err_set(err, EF_ESTATE,
                           "service: a reader of every epoch (epochs=0) was "
                           "closed; this process cannot read the service "
                           "again");
    if (rx.failure.status)
        return ef__err_set(err, rx.failure.status, "%s", rx.failure.msg);
    return EF_OK;
}

/* The first attach of the process: the room of a message, the credits,
 * and the receiving thread. Under rx.mu. */
static int start_receiving(const ef__service_job *job, const ef__budget *budget,
                           int credits, ef__err *err)
{
    int rc = EF_OK;
    /* the room of one message: a share of the budget; one sample
     * alone may take the whole budget */
    uint64_t limit = budget ? budget->limit : 0;
    int64_t room = ROOM_DEFAULT;
    if (limit)
        room =
            (int64_t)(limit / 2 / (uint64_t)job->nworkers / (uint64_t)credits);
    rx.room_bytes = room < ROOM_MIN   ? ROOM_MIN
                    : room > ROOM_MAX ? ROOM_MAX
                                      : room;
    rx.single_bytes = (int64_t)(limit && limit < EF__CHUNK_MAX_PAYLOAD
                                    ? limit
                                    : EF__CHUNK_MAX_PAYLOAD);
    if (rx.single_bytes < rx.room_bytes)
        rx.single_bytes = rx.room_bytes;
    rx.credits = credits;
    rx.owed = ef__calloc((size_t)job->nworkers, sizeof *rx.owed);
    rx.granted = ef__calloc((size_t)job->nworkers, sizeof *rx.granted);
    rx.heard = ef__calloc((size_t)job->nworkers, sizeof *rx.heard);
    if (!rx.owed || !rx.granted || !rx.heard)
        rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    for (int w = 0; rc == EF_OK && w < job->nworkers; w++) {
        rx.owed[w] = credits;
        rx.heard[w] = ef__now_ns(); /* each owes word from now */
    }
    if (rc == EF_OK && pthread_create(&rx.thread, NULL, receive_main, NULL))
        rc = ef__err_set(err, EF_ENOMEM,
                         "service: cannot start the receiving thread");
    rx.running = rc == EF_OK;
    return rc;
}

/* Tells the dispatcher that r reads its epoch (or every one from it),
 * with what a resumed reader was handed before. */
static int open_epoch(const ef__service_job *job, ef__service_reader *r,
                      ef__err *err)
{
    int64_t *msg = NULL;
    int n = 0;
    pthread_mutex_lock(&rx.mu);
    int rc = ef__progress_open_msg(r->resumed ? r->progress : NULL, r->epoch,
                                   r->endless, &msg, &n);
    pthread_mutex_unlock(&rx.mu);
    if (rc != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    rc = ef__service_send(job->dispatch, job->dispatcher, EF__TAG_OPEN, msg, n,
                          err);
    ef__free(msg);
    return rc;
}

int ef__service_attach(int endless, int64_t first, ef__budget *budget,
                       int credits, double liveness_s,
                       ef__service_resume *from, ef__service_reader **out,
                       int64_t *epoch, ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    if (!job || job->role != EF_SERVICE_TRAINER) {
        ef__progress_free(from);
        return ef__err_set(err, EF_ESTATE,
                           "service: this process has not joined the job as "
                           "a trainer");
    }
    if (job->nworkers == 0) {
        ef__progress_free(from);
        return ef__err_set(err, EF_ESTATE,
                           "service: no `echoflow serve` rank in this job; "
                           "start workers after a ':' in the mpirun command "
                           "(mpirun -np 1 TRAINER : -np 2 echoflow serve "
                           "SPEC)");
    }
    pthread_mutex_lock(&rx.mu);
    /* room for every sample the credits let the workers send (those of
     * the first reader: credits are given once per process), and the
     * ends and errors: a push never waits */
    int given = rx.running ? rx.credits : credits;
    size_t depth = (size_t)job->nworkers * (size_t)given * ROOM_ITEMS +
                   4 * (size_t)job->nworkers + 64;
    ef__service_reader *r = new_reader(depth);
    int rc = r ? attach_refusal(err)
               : ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (rc == EF_OK) /* every reader's own, from now */
        rx.liveness_ns = (uint64_t)(liveness_s * 1e9);
    if (rc == EF_OK && !rx.running)
        rc = start_receiving(job, budget, credits, err);
    if (rc == EF_OK) {
        r->epoch = rx.next_epoch > first ? rx.next_epoch : first;
        /* a resumed reader goes on from its first epoch not handed out
         * whole */
        if (from && ef__progress_first(from) > r->epoch)
            r->epoch = ef__progress_first(from);
        r->progress = from ? from : ef__progress_new(r->epoch);
        r->resumed = from != NULL;
        from = NULL;
        if (!r->progress)
            rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    }
    if (rc == EF_OK) {
        r->endless = endless;
        r->budget = budget;
        rx.next_epoch = endless ? INT64_MAX : r->epoch + 1;
        rx.reader = r;
    }
    pthread_mutex_unlock(&rx.mu);
    ef__progress_free(from); /* not taken: attach failed before */
    if (rc == EF_OK)
        rc = open_epoch(job, r, err);
    if (rc != EF_OK) {
        drop_reader(r);
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
            release(r, m->bytes);
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
    for (size_t i = 0; i < r->count; i++) {
        const pending_msg *m = &r->fifo[(r->head + i) % r->cap];
        if (rx.owed)
            rx.owed[m->worker]++;
        release(r, m->bytes);
    }
    if (rx.charged_reader == r) { /* a message on its way to it */
        release(r, rx.charged);
        rx.charged = 0;
        rx.charged_reader = NULL;
    }
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
    ef__progress_free(r->progress);
    ef__free(r);
}

void ef__service_delivered(ef__service_reader *r, const ef_sample *s)
{
    ef__ident d = ef__ident_of(s);
    size_t n;
    const ef__ident *m = ef__ident_members(&d, &n);
    if (!m) { /* an example alone */
        m = &d;
        n = 1;
    }
    pthread_mutex_lock(&rx.mu);
    for (size_t i = 0; i < n; i++)
        if (m[i].id.echo_copy == 0)
            (void)ef__progress_delivered(r->progress, m[i].id.epoch,
                                         m[i].part, m[i].offset);
    pthread_mutex_unlock(&rx.mu);
    ef__ident_clear(&d);
}

/* With several trainers, a save is a collective among them: `failed`
 * (this trainer's status) becomes every trainer's, the first that
 * failed named to the others; `what` says what it could not do. */
static int trainers_agree(const ef__service_job *job, int failed,
                          const char *what, ef__err *err)
{
    /* the lowest trainer that failed, and its status, in one value */
    int64_t v = failed ? (int64_t)job->role_rank << 32 | (uint32_t)-failed
                       : INT64_MAX;
    int mpi = MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT64_T, MPI_MIN,
                            job->role_comm);
    if (mpi != MPI_SUCCESS) /* every trainer fails it alike */
        return ef__service_mpi_error(mpi, "MPI_Allreduce", err);
    if (failed || v == INT64_MAX)
        return failed;
    char name[96];
    ef__service_rank_name(job->trainers[v >> 32], name, sizeof name);
    return ef__err_set(err, -(int)(uint32_t)v,
                       "service: the trainers' checkpoint: %s could not %s "
                       "(its own message says why)",
                       name, what);
}

/* The job's record saved into o, made from every trainer's (a
 * collective: each trainer calls it at the same checkpoint), and its
 * first epoch not delivered whole in *first. `mine` is this trainer's
 * packed record, or NULL when it failed (err says why). */
static int save_job_record(const ef__service_job *job, ef__state_out *mine,
                           int failed, ef__state_out *o, int64_t *first,
                           ef__err *err)
{
    int n = job->ntrainers;
    /* first its size, so that each trainer makes room for all */
    int64_t len = failed || mine->len > INT32_MAX ? -1 : (int64_t)mine->len;
    if (!failed && len < 0)
        failed = ef__err_set(err, EF_ENOMEM,
                             "service: a record of %zu bytes, more than "
                             "MPI sends at once",
                             mine->len);
    int64_t *lens = ef__malloc((size_t)n * sizeof *lens);
    int *counts = ef__malloc((size_t)n * sizeof *counts);
    int *displ = ef__malloc((size_t)n * sizeof *displ);
    size_t *sizes = ef__malloc((size_t)n * sizeof *sizes);
    if (!failed && (!lens || !counts || !displ || !sizes))
        failed = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    int rc = trainers_agree(job, failed, "record what it was handed", err);
    int mpi = MPI_SUCCESS;
    if (rc == EF_OK)
        mpi = MPI_Allgather(&len, 1, MPI_INT64_T, lens, 1, MPI_INT64_T,
                            job->role_comm);
    if (rc == EF_OK && mpi != MPI_SUCCESS)
        rc = ef__service_mpi_error(mpi, "MPI_Allgather", err);
    int64_t total = 0;
    for (int t = 0; rc == EF_OK && t < n; t++) {
        displ[t] = (int)total;
        counts[t] = (int)lens[t];
        sizes[t] = (size_t)lens[t];
        total += lens[t];
    }
    /* every trainer knows the total: all refuse it alike */
    if (rc == EF_OK && total > INT32_MAX)
        rc = ef__err_set(err, EF_ENOMEM,
                         "service: the trainers' records are %lld bytes, "
                         "more than MPI sends at once",
                         (long long)total);
    unsigned char *all = NULL;
    failed = EF_OK;
    if (rc == EF_OK && !(all = ef__malloc(total ? (size_t)total : 1)))
        failed = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (rc == EF_OK)
        rc = trainers_agree(job, failed, "make room for the trainers' records",
                            err);
    if (rc == EF_OK &&
        (mpi = MPI_Allgatherv(mine->buf, counts[job->role_rank], MPI_BYTE,
                              all, counts, displ, MPI_BYTE,
                              job->role_comm)) != MPI_SUCCESS)
        rc = ef__service_mpi_error(mpi, "MPI_Allgatherv", err);
    ef__progress *joined = NULL;
    if (rc == EF_OK) {
        failed = ef__progress_join(all, sizes, n, &joined, err);
        if (failed == EF_OK) {
            failed = ef__progress_save(joined, job, o, err);
            *first = ef__progress_first(joined);
        }
        rc = trainers_agree(job, failed, "join the trainers' records", err);
    }
    ef__progress_free(joined);
    ef__free(all);
    ef__free(lens);
    ef__free(counts);
    ef__free(displ);
    ef__free(sizes);
    return rc;
}

int ef__service_save(ef__service_reader *r, const ef__service_resume *pending,
                     ef__state_out *o, ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    if (!job)
        return ef__err_set(err, EF_ESTATE,
                           "service: this process has not joined the job");
    pthread_mutex_lock(&rx.mu);
    /* a restored record not attached yet is saved as it was read */
    ef__progress *p = r ? r->progress : (ef__progress *)pending;
    ef__state_out mine = {0};
    int rc = job->ntrainers > 1 ? ef__progress_pack(p, &mine, err)
                                : ef__progress_save(p, job, o, err);
    /* a reader of one epoch (not one restored and not attached, saved
     * as it was read) has ended when the record holds that epoch whole */
    int reads_one = r && !r->endless;
    int64_t first = reads_one ? ef__progress_first(p) : 0;
    int64_t epoch = reads_one ? r->epoch : 0;
    pthread_mutex_unlock(&rx.mu);
    /* several trainers: the job's record, the same on every one */
    if (job->ntrainers > 1)
        rc = save_job_record(job, &mine, rc, o, &first, err);
    ef__state_out_free(&mine);
    /* samples of its epoch that were not delivered come again, also
     * after the source had that epoch's end; once all were, a resumed
     * pass ends there, also before the source had the end */
    if (reads_one)
        o->ends = first > epoch ? EF__SAVE_ENDED : EF__SAVE_OPEN;
    return rc;
}

static int restore_progress(ef__state_in *in, ef__service_resume **out,
                            ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    if (!job)
        return ef__err_set(err, EF_ESTATE,
                           "service: this process has not joined the job");
    return ef__progress_restore(in, job, out, err);
}

void ef__service_figures_get(const ef__service_reader *r,
                             ef__service_figures *out)
{
    pthread_mutex_lock(&rx.mu);
    *out = r->fig;
    pthread_mutex_unlock(&rx.mu);
}

int ef__service_receive_shutdown(void)
{
    const ef__service_job *job = ef__service_job_get();
    pthread_mutex_lock(&rx.mu);
    int was = rx.shut;
    rx.shut = 1;
    rx.reader = NULL; /* what still comes is dropped */
    pthread_mutex_unlock(&rx.mu);
    if (was || !job)
        return rx.silent;
    if (rx.running) {
        atomic_store(&rx.stop, 1);
        pthread_join(rx.thread, NULL);
        rx.running = 0;
    }
    /* a silent worker would never answer: the job ends by abort */
    if (job->nworkers && !rx.silent) {
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
                (flag && receive_one(job, &st, &err) != EF_OK) ||
                (!flag && rx.heard && check_liveness(job, &err) != EF_OK))
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
    ef__free(rx.granted);
    ef__free(rx.heard);
    ef__free(rx.eoe);
    if (!rx.silent) /* else MPI may still write there (recv_within) */
        ef__free(rx.head);
    rx.owed = rx.granted = NULL;
    rx.heard = NULL;
    rx.eoe = NULL;
    rx.head = NULL;
    int silent = rx.silent;
    pthread_mutex_unlock(&rx.mu);
    return silent;
}

static const ef__service_link trainer_side = {
    .join_trainer = ef__service_join_trainer,
    .attach = ef__service_attach,
    .take = ef__service_take,
    .cancel = ef__service_cancel,
    .detach = ef__service_detach,
    .figures = ef__service_figures_get,
    .delivered = ef__service_delivered,
    .save = ef__service_save,
    .restore = restore_progress,
    .release = ef__progress_free,
};
const ef__service_link *const ef__service = &trainer_side;
