/* SPDX-License-Identifier: Apache-2.0 */
/* A worker (ef_service_serve): asks the dispatcher for splits, runs the
 * spec on each, and sends its samples in chunks to the trainers that
 * have room.
 *
 * Flow control is by credits: a trainer grants each worker a few
 * messages of room (CREDIT: bytes and samples at most), and grants one
 * more each time one of them has been read. A worker sends only with a
 * credit in hand, so neither side queues more than the credits allow,
 * and a chunk is sent straight from the samples' buffers. A chunk keeps
 * to the room of the trainer it goes to (a trainer refuses more), so
 * chunks are filled to the smallest room of the trainers known.
 *
 * A thread of its own tells every trainer that this worker lives
 * (heartbeat), so that a trainer can tell a stopped worker from a slow
 * one: a slow sample, a wait for credit or for a split still beats. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/budget.h"
#include "core/clock.h"
#include "service/chunk.h"
#include "service/service.h"

/* A chunk goes out once it is this old, full or not, so that a slow
 * split reaches the trainers steadily: automatic echoing reads a burst
 * of fresh items larger than its pool as the downstream's burst and
 * waits for fresh data instead of echoing (measured: chunks 20 ms old
 * echoed 4.5x where a steady upstream of the same rate echoed 7.4x). */
#define CHUNK_AGE_NS 2000000ull
/* The room of one message before a trainer said (it says at once). */
#define DEFAULT_BYTES ((int64_t)16 << 20)
#define DEFAULT_ITEMS 64
#define CUTS_KEPT 8

/* Sends under way at most: the worker goes on making samples while
 * MPI moves the last chunks (each waits for its trainer to receive it). */
#define IN_FLIGHT 4

/* The heartbeat's thread. */
typedef struct {
    pthread_t thread;
    pthread_mutex_t mu; /* guards `to` and `stop`; held over each beat, so
                           that no beat follows the answer to a goodbye */
    pthread_cond_t wake;
    const ef__service_job *job;
    int *to; /* per trainer: 1 while it hears the beats */
    int stop, started;
} heartbeat;

/* A chunk's header and payload blocks, and the samples whose buffers
 * the payload is sent from, held until the send completes. */
typedef struct {
    ef__chunk_out out;
    ef_sample **held;
    size_t nheld, cap;
    MPI_Request req[2];
} chunk;

typedef struct {
    const ef__service_job *job;
    const ef_serve_config *c;
    ef_serve_report *rep;
    int64_t splits;
    ef__err err;
    int *alive, nalive;
    int64_t *credits; /* per trainer: messages it has room for */
    /* per trainer, from its credits (0 before the first): the payload a
     * message of several samples may have, and one sample alone */
    int64_t *room_of, *single_of;
    int64_t room_items;
    heartbeat beat;
    int next_trainer; /* round robin among those with room */
    /* the split being read */
    ef_pipeline *p;
    int64_t epoch, split;
    int64_t position; /* of the split's next sample in its order */
    /* the split's positions to leave out (bit p: position p), those that
     * reached the trainers before a checkpoint; nskip words */
    uint64_t *skip;
    int64_t nskip;
    size_t skip_cap;
    int cut; /* a trainer stopped reading the split's epoch */
    int64_t cuts[CUTS_KEPT];
    int ncuts;
    int64_t asking_epoch; /* the epoch whose splits it asks for */
    int asking, finished, failed;
    MPI_Request ask;
    int64_t answer[4];
    uint64_t ask_t0;
    /* the chunk being filled */
    chunk cur;
    uint64_t chunk_t0;
    /* chunks being sent, oldest first from flight[first], and their
     * payload bytes */
    chunk flight[IN_FLIGHT];
    int first, nflight;
    uint64_t flight_bytes;
    /* this worker's own bound on what its chunks hold: a chunk at most a
     * quarter of its memory budget, those being sent half (0: none) */
    uint64_t budget;
} worker;

static void report_failure(worker *w);
static int complete_all(worker *w);

static void *beat_main(void *arg)
{
    heartbeat *b = arg;
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        for (int t = 0; t < b->job->ntrainers; t++)
            if (b->to[t]) /* nothing to say if it fails: the job is ending */
                MPI_Send(NULL, 0, MPI_BYTE, b->job->trainers[t], EF__TAG_ALIVE,
                         b->job->data);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += EF__HEARTBEAT_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&b->wake, &b->mu, &until);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Starts beating to every trainer (b->to must be allocated). */
static int beat_start(heartbeat *b, ef__err *err)
{
    for (int t = 0; t < b->job->ntrainers; t++)
        b->to[t] = 1;
    if (pthread_create(&b->thread, NULL, beat_main, b))
        return ef__err_set(err, EF_ENOMEM,
                           "service: cannot start the heartbeat's thread");
    b->started = 1;
    return EF_OK;
}

static void beat_stop(heartbeat *b)
{
    if (!b->started)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->thread, NULL);
    b->started = 0;
}

static int was_cut(const worker *w, int64_t epoch)
{
    for (int i = 0; i < w->ncuts && i < CUTS_KEPT; i++)
        if (w->cuts[i] == epoch)
            return 1;
    return 0;
}

/* Takes every message the trainers sent: credits, cuts, goodbyes. */
static int take_messages(worker *w)
{
    for (;;) {
        int flag = 0;
        MPI_Status st;
        int rc =
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, w->job->data, &flag, &st);
        if (rc != MPI_SUCCESS)
            return ef__service_mpi_error(rc, "MPI_Iprobe", &w->err);
        if (!flag)
            return EF_OK;
        int64_t v[3] = {0, 0, 0};
        int n = 0;
        MPI_Get_count(&st, MPI_INT64_T, &n);
        if (n < 0 || n > 3)
            return ef__err_set(&w->err, EF_EFORMAT,
                               "service: rank %d sent this worker a message "
                               "(tag %d) that is none of the service's",
                               st.MPI_SOURCE, st.MPI_TAG);
        rc = MPI_Recv(v, n, MPI_INT64_T, st.MPI_SOURCE, st.MPI_TAG,
                      w->job->data, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS)
            return ef__service_mpi_error(rc, "MPI_Recv", &w->err);
        int t = ef__service_index(w->job, EF_SERVICE_TRAINER, st.MPI_SOURCE);
        if (t < 0 || !w->alive[t])
            continue;
        if (st.MPI_TAG == EF__TAG_CREDIT && n == 3) {
            w->credits[t]++;
            w->room_of[t] = v[0] > 0 ? v[0] : DEFAULT_BYTES;
            w->room_items = v[1] > 0 ? v[1] : DEFAULT_ITEMS;
            w->single_of[t] = v[2] > 0 ? v[2] : w->room_of[t];
        } else if (st.MPI_TAG == EF__TAG_CUT && n >= 1) {
            w->cuts[w->ncuts++ % CUTS_KEPT] = v[0];
            if (w->p && w->epoch == v[0])
                w->cut = 1;
        } else if (st.MPI_TAG == EF__TAG_BYE) {
            if (complete_all(w))
                return w->err.status;
            w->alive[t] = 0;
            w->credits[t] = 0;
            w->nalive--;
            pthread_mutex_lock(&w->beat.mu);
            w->beat.to[t] = 0;
            pthread_mutex_unlock(&w->beat.mu);
            /* after every sample sent to it: nothing more will come */
            if (ef__service_send(w->job->data, st.MPI_SOURCE, EF__TAG_BYE_ACK,
                                 v, 0, &w->err))
                return w->err.status;
        }
    }
}

static void chunk_clear(chunk *c)
{
    for (size_t i = 0; i < c->nheld; i++)
        ef_sample_free(c->held[i]);
    c->nheld = 0;
    ef__chunk_out_reset(&c->out);
}

static void drop_chunk(worker *w)
{
    chunk_clear(&w->cur);
}

/* The payload's send: the fields where they lie, MPI reading them from
 * the samples (a datatype over their addresses). */
static int post_payload(worker *w, chunk *c, int to)
{
    size_t n = c->out.nblocks;
    int *lens = ef__malloc((n ? n : 1) * sizeof *lens);
    MPI_Aint *at = ef__malloc((n ? n : 1) * sizeof *at);
    if (!lens || !at) {
        ef__free(lens);
        ef__free(at);
        return ef__err_set(&w->err, EF_ENOMEM, "service: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        lens[i] = (int)c->out.blocks[i].nbytes;
        MPI_Get_address(c->out.blocks[i].data, &at[i]);
    }
    MPI_Datatype type;
    int rc = MPI_Type_create_hindexed((int)n, lens, at, MPI_BYTE, &type);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Type_commit(&type);
        if (rc == MPI_SUCCESS)
            rc = MPI_Isend(MPI_BOTTOM, 1, type, to, EF__TAG_PAYLOAD,
                           w->job->data, &c->req[1]);
        MPI_Type_free(&type); /* freed once the send is done with it */
    }
    ef__free(lens);
    ef__free(at);
    return rc == MPI_SUCCESS ? EF_OK
                             : ef__service_mpi_error(rc, "MPI_Isend", &w->err);
}

/* Completes the oldest send (waiting for it when `wait`): 1 when one
 * completed, 0 when none did, or an error. */
static int complete_oldest(worker *w, int wait)
{
    if (!w->nflight)
        return 0;
    chunk *c = &w->flight[w->first];
    uint64_t t0 = ef__timer_ns();
    unsigned idle = 0;
    int done = 0;
    for (;;) {
        int rc = MPI_Testall(2, c->req, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS)
            return ef__service_mpi_error(rc, "MPI_Testall", &w->err);
        if (done || !wait)
            break;
        ef__service_idle(&idle);
    }
    w->rep->send_s += ef__ns_to_s(ef__elapsed_ns(t0, ef__timer_ns()));
    if (!done)
        return 0;
    w->flight_bytes -= c->out.payload;
    chunk_clear(c);
    w->first = (w->first + 1) % IN_FLIGHT;
    w->nflight--;
    return 1;
}

/* Completes every send under way (before a goodbye: nothing may follow
 * it to that trainer, and the samples must be let go). */
static int complete_all(worker *w)
{
    while (w->nflight)
        if (complete_oldest(w, 1) < 0)
            return w->err.status;
    return EF_OK;
}

/* Whether trainer t's credit allows the chunk being filled: several
 * samples within its room, or one sample alone within what it takes. */
static int allows(const worker *w, int t)
{
    const ef__chunk_out *c = &w->cur.out;
    return (uint64_t)(c->items == 1 ? w->single_of[t] : w->room_of[t]) >=
           c->payload;
}

/* No trainer still reading can take the chunk: a sample over every
 * trainer's memory budget (or, for several, a room that shrank as the
 * trainers that had more left). Reported as the split's failure. */
static int unsendable(worker *w)
{
    const ef__chunk_out *c = &w->cur.out;
    int64_t most = 0;
    for (int t = 0; t < w->job->ntrainers; t++)
        if (w->alive[t]) {
            int64_t m = c->items == 1 ? w->single_of[t] : w->room_of[t];
            most = m > most ? m : most;
        }
    if (c->items == 1)
        ef__err_set(&w->err, EF_ENOMEM,
                    "service: item %lld: %llu bytes, over the memory budget "
                    "of every trainer (one sample may take %lld bytes at "
                    "most; raise the trainers' budget: --memory-budget, "
                    "memory_budget= in Python, ef_pipeline_set_memory_budget)",
                    (long long)ef_sample_identity(w->cur.held[0]).index,
                    (unsigned long long)c->payload, (long long)most);
    else
        ef__err_set(&w->err, EF_ESTATE,
                    "service: a message of %lld samples and %llu bytes fits "
                    "the room of no trainer still reading (%lld bytes at "
                    "most)",
                    (long long)c->items, (unsigned long long)c->payload,
                    (long long)most);
    report_failure(w);
    return EF_OK;
}

/* Sends the chunk to the next trainer with room, waiting for one. */
static int send_chunk(worker *w)
{
    if (!w->cur.nheld)
        return EF_OK;
    if (!w->cur.out.head_len)
        return ef__err_set(&w->err, EF_ENOMEM, "service: out of memory");
    uint64_t t0 = ef__timer_ns();
    unsigned idle = 0;
    int t = -1;
    while (t < 0) {
        if (take_messages(w) || complete_oldest(w, 0) < 0)
            return w->err.status;
        if (w->cut || !w->nalive) {
            drop_chunk(w);
            return EF_OK;
        }
        int could = 0; /* a trainer that takes it, now or later */
        for (int k = 0; k < w->job->ntrainers; k++) {
            int i = (w->next_trainer + k) % w->job->ntrainers;
            /* before its first credit, a trainer's room is not known */
            if (!w->alive[i] || (w->room_of[i] && !allows(w, i)))
                continue;
            could = 1;
            if (t < 0 && w->credits[i] > 0)
                t = i;
        }
        if (!could)
            return unsendable(w);
        if (t < 0)
            ef__service_idle(&idle);
    }
    w->rep->credit_wait_s += ef__ns_to_s(ef__elapsed_ns(t0, ef__timer_ns()));
    while (w->nflight == IN_FLIGHT ||
           (w->nflight && w->budget &&
            w->flight_bytes + w->cur.out.payload > w->budget / 2))
        if (complete_oldest(w, 1) < 0)
            return w->err.status;
    w->next_trainer = (t + 1) % w->job->ntrainers;
    w->credits[t]--;
    int to = w->job->trainers[t];
    /* the chunk moves to the flight slot; the slot's memory is reused */
    chunk *c = &w->flight[(w->first + w->nflight) % IN_FLIGHT];
    chunk spare = *c;
    *c = w->cur;
    w->cur = spare;
    ef__chunk_out_reset(&w->cur.out);
    w->nflight++;
    c->req[0] = c->req[1] = MPI_REQUEST_NULL;
    uint64_t t1 = ef__timer_ns();
    int rc = MPI_Isend(c->out.head, (int)c->out.head_len, MPI_BYTE, to,
                       EF__TAG_DATA, w->job->data, &c->req[0]);
    if (rc != MPI_SUCCESS)
        return ef__service_mpi_error(rc, "MPI_Isend", &w->err);
    if (c->out.payload && post_payload(w, c, to))
        return w->err.status;
    w->flight_bytes += c->out.payload;
    w->rep->send_s += ef__ns_to_s(ef__elapsed_ns(t1, ef__timer_ns()));
    w->rep->messages++;
    w->rep->items += c->out.items;
    w->rep->bytes += c->out.payload;
    return EF_OK;
}

/* The payload bytes a chunk may hold: the smallest room of the trainers
 * still reading (as far as their credits said), within this worker's
 * own budget. */
static uint64_t room(const worker *w)
{
    uint64_t r = 0;
    for (int t = 0; t < w->job->ntrainers; t++)
        if (w->alive[t] && w->room_of[t] &&
            (!r || (uint64_t)w->room_of[t] < r))
            r = (uint64_t)w->room_of[t];
    if (!r)
        r = (uint64_t)DEFAULT_BYTES;
    return w->budget && w->budget / 4 < r ? w->budget / 4 : r;
}

/* Room in c->held for one more sample. */
static int reserve_held(worker *w, chunk *c)
{
    if (c->nheld < c->cap)
        return EF_OK;
    ef_sample **v = ef__grow(c->held, &c->cap, 64, sizeof *v);
    if (!v)
        return ef__err_set(&w->err, EF_ENOMEM, "service: out of memory");
    c->held = v;
    return EF_OK;
}

/* Sample `s`, at `position` of its split, into the chunk being
 * filled. */
static int hold(worker *w, ef_sample *s, int64_t position)
{
    chunk *c = &w->cur;
    /* a chunk holds one epoch's samples; a big sample goes alone */
    if (c->nheld && c->out.payload + ef__chunk_sample_bytes(s) > room(w) &&
        send_chunk(w)) {
        ef_sample_free(s);
        return w->err.status;
    }
    if (w->cut || w->failed) {
        ef_sample_free(s);
        return EF_OK;
    }
    /* only now: sending swapped the chunk being filled for a spare one,
     * whose array may be smaller, or none yet */
    if (reserve_held(w, c)) {
        ef_sample_free(s);
        return w->err.status;
    }
    if (!c->nheld)
        w->chunk_t0 = ef__timer_ns();
    c->held[c->nheld++] = s;
    if (ef__chunk_out_add(&c->out, s, w->epoch, w->split, position,
                          &w->err)) {
        report_failure(w); /* a sample no message can carry */
        return EF_OK;
    }
    if ((int64_t)c->nheld >= w->room_items || c->out.payload >= room(w) ||
        ef__elapsed_ns(w->chunk_t0, ef__timer_ns()) >= CHUNK_AGE_NS)
        return send_chunk(w);
    return EF_OK;
}

/* The pipeline of split `split` of epoch `epoch`; a failure to make it
 * is the split's failure (report_failure). */
static int open_split(worker *w)
{
    const ef_serve_config *c = w->c;
    /* each split and epoch shuffles in an order of its own, the same on
     * every run */
    uint64_t seed =
        ef_epoch_seed(c->seed, (uint64_t)w->epoch, (uint64_t)w->split);
    ef_pipeline *p = NULL;
    int rc = ef_pipeline_create(&p);
    if (rc == EF_OK)
        rc = ef_pipeline_set_seed(p, seed);
    if (rc == EF_OK)
        rc = ef_pipeline_set_on_error(p, c->on_error);
    if (rc == EF_OK && c->memory_budget >= 0)
        rc = ef_pipeline_set_memory_budget(p, (uint64_t)c->memory_budget);
    if (rc == EF_OK && w->splits > 1)
        rc = ef_pipeline_set_shard(p, w->split, w->splits);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(p, c->spec);
    if (rc == EF_OK && c->throttle > 0) {
        char opt[64];
        snprintf(opt, sizeof opt, "rate=%.17g", c->throttle);
        rc = ef_pipeline_add(p, "throttle", opt);
    }
    if (rc != EF_OK) {
        ef__err_set(&w->err, rc, "%s",
                    p ? ef_pipeline_error(p) : "out of memory");
        ef_pipeline_destroy(p);
        report_failure(w);
        return EF_OK;
    }
    w->p = p;
    w->position = 0;
    w->cut = was_cut(w, w->epoch);
    return EF_OK;
}

static void close_split(worker *w)
{
    ef_pipeline_destroy(w->p);
    w->p = NULL;
    w->cut = 0;
}

/* Tells every trainer still there why this worker stopped. */
static void report_failure(worker *w)
{
    char where[96];
    ef__service_rank_name(w->job->rank, where, sizeof where);
    char msg[EF__ERR_MAX + 160];
    if (w->p || w->split >= 0)
        snprintf(msg, sizeof msg,
                 "echoflow serve, %s, split %lld of %lld in epoch %lld: %s",
                 where, (long long)w->split, (long long)w->splits,
                 (long long)w->epoch, w->err.msg);
    else
        snprintf(msg, sizeof msg, "echoflow serve, %s: %s", where, w->err.msg);
    if (w->err.status == EF_ESPEC && w->split >= 0) {
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n,
                 " (a spec that cannot be read in %lld splits: give "
                 "--splits at most the source's shard or file count)",
                 (long long)w->splits);
    }
    /* "STATUS MESSAGE": the trainer fails with the worker's status */
    char sent[sizeof msg + 16];
    snprintf(sent, sizeof sent, "%d %s", w->err.status, msg);
    for (int t = 0; t < w->job->ntrainers; t++)
        if (w->alive[t])
            MPI_Send(sent, (int)strlen(sent) + 1, MPI_CHAR, w->job->trainers[t],
                     EF__TAG_ERROR, w->job->data);
    ef__err_set(&w->err, w->err.status, "%s", msg);
    w->failed = 1;
    drop_chunk(w);
    close_split(w);
}

/* The positions of the split handed out to leave out: `words` words
 * that the dispatcher sends after its answer (none: leave none out). */
static int take_skip(worker *w, int64_t words)
{
    w->nskip = 0;
    if (words <= 0)
        return EF_OK;
    if ((size_t)words > w->skip_cap) {
        uint64_t *v = ef__realloc(w->skip, (size_t)words * sizeof *v);
        if (!v)
            return ef__err_set(&w->err, EF_ENOMEM, "service: out of memory");
        w->skip = v;
        w->skip_cap = (size_t)words;
    }
    int rc = MPI_Recv(w->skip, (int)words, MPI_UINT64_T, w->job->dispatcher,
                      EF__TAG_SKIP, w->job->dispatch, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return ef__service_mpi_error(rc, "MPI_Recv", &w->err);
    w->nskip = words;
    return EF_OK;
}

/* Whether the split's sample at `position` reached the trainers before
 * the checkpoint they resumed from. */
static int skipped(const worker *w, int64_t position)
{
    int64_t word = position / 64;
    return word < w->nskip && (w->skip[word] >> (position % 64) & 1);
}

/* Tells every trainer that the split ended and how many samples its
 * order holds, those left out included: a trainer's checkpoint counts a
 * split done when it was handed all of them. */
static int say_split_end(worker *w)
{
    int64_t v[3] = {w->epoch, w->split, w->position};
    for (int t = 0; t < w->job->ntrainers; t++)
        if (w->alive[t] && ef__service_send(w->job->data, w->job->trainers[t],
                                            EF__TAG_SPLIT_END, v, 3, &w->err))
            return w->err.status;
    return EF_OK;
}

/* One turn without a split: ask for the next, or act on the answer. */
static int next_split(worker *w, unsigned *idle)
{
    if (!w->asking) {
        int rc = MPI_Irecv(w->answer, 4, MPI_INT64_T, w->job->dispatcher,
                           EF__TAG_REPLY, w->job->dispatch, &w->ask);
        if (rc != MPI_SUCCESS)
            return ef__service_mpi_error(rc, "MPI_Irecv", &w->err);
        if (ef__service_send(w->job->dispatch, w->job->dispatcher, EF__TAG_ASK,
                             &w->asking_epoch, 1, &w->err))
            return w->err.status;
        w->asking = 1;
        w->ask_t0 = ef__timer_ns();
    }
    int done = 0;
    int rc = MPI_Test(&w->ask, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return ef__service_mpi_error(rc, "MPI_Test", &w->err);
    if (!done) {
        ef__service_idle(idle);
        return EF_OK;
    }
    *idle = 0;
    w->asking = 0;
    w->rep->dispatch_wait_s +=
        ef__ns_to_s(ef__elapsed_ns(w->ask_t0, ef__timer_ns()));
    if (w->answer[0] == EF__REPLY_SPLIT) {
        w->epoch = w->answer[1];
        w->split = w->answer[2];
        if (take_skip(w, w->answer[3]))
            return w->err.status;
        return open_split(w);
    }
    if (w->answer[0] == EF__REPLY_EPOCH_DONE) {
        /* every sample of that epoch was sent: say so to each trainer */
        for (int t = 0; t < w->job->ntrainers; t++)
            if (w->alive[t] &&
                ef__service_send(w->job->data, w->job->trainers[t], EF__TAG_EOE,
                                 &w->answer[1], 1, &w->err))
                return w->err.status;
        w->asking_epoch = w->answer[1] + 1;
    } else {
        w->finished = 1;
    }
    return EF_OK;
}

/* One turn with a split: its next sample into the chunk. A failure of
 * the pipeline is reported to the trainers; what is returned is MPI's. */
static int read_split(worker *w)
{
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(w->p, &s);
    if (rc == EF_OK) {
        int64_t at = w->position++;
        if (!skipped(w, at))
            return hold(w, s, at);
        ef_sample_free(s); /* the trainers had it before their checkpoint */
        return EF_OK;
    }
    if (rc == EF_END) {
        if (send_chunk(w))
            return w->err.status;
        if (!w->failed && !w->cut && say_split_end(w))
            return w->err.status;
        if (!w->failed) /* else reported, and closed */
            w->rep->splits++;
        close_split(w);
        return EF_OK;
    }
    ef__err_set(&w->err, rc, "%s", ef_pipeline_error(w->p));
    report_failure(w);
    return EF_OK;
}

/* The first worker tries the last split before any is handed out, so
 * that a source that cannot split its data that finely (a tar of fewer
 * shards) is reported at the start, with what to do. */
static void check_splits(worker *w)
{
    w->epoch = 0;
    w->split = w->splits - 1;
    if (open_split(w) != EF_OK || !w->p)
        return; /* reported */
    ef_sample *s = NULL;
    int rc = ef_pipeline_next(w->p, &s);
    ef_sample_free(s);
    if (rc == EF_ESPEC) {
        ef__err_set(&w->err, rc, "%s", ef_pipeline_error(w->p));
        report_failure(w);
        return;
    }
    close_split(w);
    w->split = -1;
}

static int serve(worker *w)
{
    unsigned idle = 0;
    while (w->nalive > 0) {
        if (take_messages(w))
            return w->err.status;
        if (!w->nalive)
            break;
        if (w->cut) {
            drop_chunk(w);
            close_split(w);
        }
        int rc = EF_OK;
        if (w->failed || (w->finished && !w->p))
            ef__service_idle(&idle);
        else if (!w->p)
            rc = next_split(w, &idle);
        else
            rc = read_split(w);
        if (rc != EF_OK)
            return rc; /* MPI failed, or memory */
    }
    /* an answer still on its way is received, whatever it says */
    while (w->asking) {
        int done = 0;
        if (MPI_Test(&w->ask, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            break;
        w->asking = !done;
        if (!done)
            ef__service_idle(&idle);
    }
    int64_t none = 0;
    return ef__service_send(w->job->dispatch, w->job->dispatcher, EF__TAG_DONE,
                            &none, 1, &w->err);
}

ef_status ef_service_serve(const ef_serve_config *c, ef_serve_report *rep,
                           char *errbuf, size_t len)
{
    const ef__service_job *job = ef__service_job_get();
    if (!job || job->role != EF_SERVICE_WORKER) {
        snprintf(errbuf, len,
                 "service: join the job as a worker first (ef_service_join)");
        return EF_ESTATE;
    }
    ef_serve_report r = {.size = sizeof r};
    worker w = {.job = job, .c = c, .rep = &r, .split = -1};
    w.splits = c->splits > 0 ? c->splits : 8 * (int64_t)job->nworkers;
    w.budget =
        c->memory_budget >= 0 ? (uint64_t)c->memory_budget : EF__BUDGET_DEFAULT;
    w.room_items = DEFAULT_ITEMS;
    ef__err_clear(&w.err);
    w.alive = ef__calloc((size_t)job->ntrainers + 1, sizeof *w.alive);
    w.credits = ef__calloc((size_t)job->ntrainers + 1, sizeof *w.credits);
    w.room_of = ef__calloc((size_t)job->ntrainers + 1, sizeof *w.room_of);
    w.single_of = ef__calloc((size_t)job->ntrainers + 1, sizeof *w.single_of);
    w.beat.job = job;
    w.beat.to = ef__calloc((size_t)job->ntrainers + 1, sizeof *w.beat.to);
    pthread_mutex_init(&w.beat.mu, NULL);
    pthread_cond_init(&w.beat.wake, NULL);
    ef__dispatcher *d = NULL;
    int rc = EF_OK;
    if (!w.alive || !w.credits || !w.room_of || !w.single_of || !w.beat.to)
        rc = ef__err_set(&w.err, EF_ENOMEM, "service: out of memory");
    for (int t = 0; t < job->ntrainers; t++)
        w.alive[t] = 1;
    w.nalive = job->ntrainers;
    ef__chunk_out_reset(&w.cur.out);
    uint64_t t0 = ef__timer_ns();
    if (rc == EF_OK)
        rc = beat_start(&w.beat, &w.err);
    if (rc == EF_OK && job->rank == job->dispatcher)
        rc = ef__dispatcher_start(w.splits, c->seed, &d, &w.err);
    if (rc == EF_OK && job->rank == job->dispatcher)
        check_splits(&w);
    if (rc == EF_OK) {
        rc = serve(&w);
        r.trainers_left = w.nalive == 0;
    }
    if (rc == EF_OK && w.failed)
        rc = w.err.status;
    if (rc == EF_OK)
        rc = complete_all(&w);
    beat_stop(&w.beat);
    ef__dispatcher_join(d);
    close_split(&w);
    /* the slots of sends that MPI failed are let go without waiting */
    for (int i = 0; i < IN_FLIGHT; i++) {
        chunk_clear(&w.flight[i]);
        ef__chunk_out_free(&w.flight[i].out);
        ef__free(w.flight[i].held);
    }
    chunk_clear(&w.cur);
    ef__chunk_out_free(&w.cur.out);
    ef__free(w.cur.held);
    ef__free(w.skip);
    ef__free(w.alive);
    ef__free(w.credits);
    ef__free(w.room_of);
    ef__free(w.single_of);
    ef__free(w.beat.to);
    pthread_mutex_destroy(&w.beat.mu);
    pthread_cond_destroy(&w.beat.wake);
    r.seconds = ef__ns_to_s(ef__elapsed_ns(t0, ef__timer_ns()));
    if (rep) {
        size_t n = rep->size < sizeof r ? rep->size : sizeof r;
        r.size = rep->size;
        memcpy(rep, &r, n);
    }
    snprintf(errbuf, len, "%s", rc ? w.err.msg : "");
    return rc;
}
