/* SPDX-License-Identifier: Apache-2.0 */
/* The dispatcher: hands out the splits of each epoch to the workers as
 * they ask (dynamic sharding), so a slow worker takes fewer. It runs on
 * a thread of the first worker.
 *
 * Epoch e opens once every trainer still in the job reads it (OPEN);
 * then each worker that asks gets the next split of e's order (a keyed
 * permutation of the splits), until none is left or a trainer stopped
 * reading e (CUT): that worker then hears EPOCH_DONE and sends its last
 * samples of e and an end-of-epoch mark to every trainer. Each split is
 * handed out once per epoch, so every sample reaches the trainers once
 * per epoch. When every trainer has left, every ask is answered FINISH;
 * the thread ends when every worker has said DONE.
 *
 * The epochs before the first that any trainer opens are done: a job
 * that resumes one which read them. A trainer resumed from a checkpoint
 * opens its first epoch with what it had been handed before (OPEN's
 * resume records): each split named is handed out again with its
 * positions already delivered, which the worker leaves out (SKIP); a
 * split whose every position was delivered is not handed out. The
 * records of several trainers are joined (their positions ORed). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "service/service.h"

/* What a resumed trainer had been handed of one split. */
typedef struct {
    uint64_t *words; /* bit p: position p was delivered */
    int64_t nwords;
    int64_t size; /* the positions the split has, or -1: not known */
} split_skip;

/* An epoch's progress. */
typedef struct {
    int64_t *order; /* the splits in the order they are handed out */
    int64_t next;   /* how many were handed out */
    int cut;
    split_skip *skips; /* per split, after a resume naming this epoch */
} epoch_state;

struct ef__dispatcher {
    pthread_t thread;
    const ef__service_job *job;
    int64_t splits;
    uint64_t seed;
    epoch_state *epochs; /* by epoch number */
    int64_t nepochs;
    int64_t *wanted;  /* per trainer: epochs below this one are open to it */
    int *left;        /* per trainer */
    int *opened;      /* per trainer: it opened an epoch */
    int64_t *pending; /* per worker: the epoch it asked for, or -1 */
    int ntrainers_left, nworkers_done, nopened;
    /* the epochs below this one were read before: the lowest first
     * epoch the trainers opened */
    int64_t done_below;
    int64_t *msg; /* an OPEN being read, and its room */
    int msg_cap;
    ef__err err;
};

/* Epoch e's state, made with its split order when first needed. */
static epoch_state *epoch_of(ef__dispatcher *d, int64_t e)
{
    if (e >= d->nepochs) {
        int64_t n = e + 1 > 2 * d->nepochs ? e + 1 : 2 * d->nepochs;
        epoch_state *v = ef__realloc(d->epochs, (size_t)n * sizeof *v);
        if (!v)
            return NULL;
        memset(v + d->nepochs, 0, (size_t)(n - d->nepochs) * sizeof *v);
        d->epochs = v;
        d->nepochs = n;
    }
    epoch_state *st = &d->epochs[e];
    if (!st->order) {
        st->order = ef__malloc((size_t)d->splits * sizeof *st->order);
        if (!st->order)
            return NULL;
        for (int64_t i = 0; i < d->splits; i++)
            st->order[i] = i;
        /* keyed by (seed, epoch): every run with this seed hands the
         * splits out in this order */
        ef__rng r;
        ef__rng_init(&r, d->seed, UINT64_C(0x5e7c1ce), 0, e, 0);
        for (int64_t i = d->splits - 1; i > 0; i--) {
            int64_t j = (int64_t)ef__rng_below(&r, (uint64_t)i + 1);
            int64_t t = st->order[i];
            st->order[i] = st->order[j];
            st->order[j] = t;
        }
    }
    return st;
}

static int is_open(const ef__dispatcher *d, int64_t e)
{
    for (int t = 0; t < d->job->ntrainers; t++)
        if (!d->left[t] && d->wanted[t] <= e)
            return 0;
    return 1;
}

static int reply(ef__dispatcher *d, int w, int64_t kind, int64_t e,
                 int64_t split, const split_skip *skip)
{
    int64_t words = skip ? skip->nwords : 0;
    int64_t v[4] = {kind, e, split, words};
    d->pending[w] = -1;
    int to = d->job->workers[w];
    if (ef__service_send(d->job->dispatch, to, EF__TAG_REPLY, v, 4, &d->err))
        return -1;
    int rc = words ? MPI_Send(skip->words, (int)words, MPI_UINT64_T, to,
                              EF__TAG_SKIP, d->job->dispatch)
                   : MPI_SUCCESS;
    return rc == MPI_SUCCESS ? 0
                             : ef__service_mpi_error(rc, "MPI_Send", &d->err);
}

static int64_t ones(const uint64_t *w, int64_t n)
{
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++)
        k += __builtin_popcountll(w[i]);
    return k;
}

/* Split `split` of epoch st was delivered whole before the checkpoint. */
static int delivered_whole(const epoch_state *st, int64_t split)
{
    const split_skip *k = st->skips ? &st->skips[split] : NULL;
    return k && k->size >= 0 && ones(k->words, k->nwords) == k->size;
}

/* The next split of epoch e to hand out, skipping those delivered
 * whole, or -1 when none is left. */
static int64_t next_split(ef__dispatcher *d, int64_t e, epoch_state *st)
{
    if (st->cut || e < d->done_below)
        return -1;
    while (st->next < d->splits && delivered_whole(st, st->order[st->next]))
        st->next++;
    return st->next < d->splits ? st->order[st->next++] : -1;
}

/* Answers the asks that can be answered now. */
static int answer(ef__dispatcher *d)
{
    for (int w = 0; w < d->job->nworkers; w++) {
        int64_t e = d->pending[w];
        if (e < 0)
            continue;
        if (d->ntrainers_left == d->job->ntrainers) {
            if (reply(d, w, EF__REPLY_FINISH, e, 0, NULL))
                return -1;
            continue;
        }
        if (!is_open(d, e))
            continue;
        epoch_state *st = epoch_of(d, e);
        if (!st)
            return ef__err_set(&d->err, EF_ENOMEM, "service: out of memory");
        int64_t split = next_split(d, e, st);
        int rc = split < 0 ? reply(d, w, EF__REPLY_EPOCH_DONE, e, 0, NULL)
                           : reply(d, w, EF__REPLY_SPLIT, e, split,
                                   st->skips ? &st->skips[split] : NULL);
        if (rc)
            return -1;
    }
    return 0;
}

/* Joins a resumed trainer's records (OPEN from `from`: v[0] its first
 * epoch, then from v[2] the count of records and each one: epoch,
 * split, size, words, the words). A record that does not fit this job
 * fails the dispatcher: the trainer compared the workers' settings
 * with its checkpoint's, so it is not ours. */
static int resume(ef__dispatcher *d, int from, const int64_t *v, int n)
{
    int64_t count = v[2];
    int at = 3;
    for (int64_t r = 0; r < count; r++) {
        if (n - at < 4 || v[at + 3] < 0 || v[at + 3] > n - at - 4 ||
            v[at] < v[0] || v[at + 1] < 0 || v[at + 1] >= d->splits)
            return ef__err_set(&d->err, EF_EFORMAT,
                               "service: rank %d resumed from a checkpoint "
                               "whose record %lld does not fit this job's "
                               "%lld splits",
                               from, (long long)r, (long long)d->splits),
                   -1;
        epoch_state *st = epoch_of(d, v[at]);
        if (st && !st->skips) {
            st->skips = ef__calloc((size_t)d->splits, sizeof *st->skips);
            for (int64_t k = 0; st->skips && k < d->splits; k++)
                st->skips[k].size = -1;
        }
        if (!st || !st->skips)
            return ef__err_set(&d->err, EF_ENOMEM, "service: out of memory"),
                   -1;
        split_skip *k = &st->skips[v[at + 1]];
        int64_t words = v[at + 3];
        if (words > k->nwords) {
            uint64_t *w = ef__realloc(k->words, (size_t)words * sizeof *w);
            if (!w)
                return ef__err_set(&d->err, EF_ENOMEM,
                                   "service: out of memory"),
                       -1;
            memset(w + k->nwords, 0, (size_t)(words - k->nwords) * sizeof *w);
            k->words = w;
            k->nwords = words;
        }
        for (int64_t i = 0; i < words; i++)
            k->words[i] |= (uint64_t)v[at + 4 + i];
        if (v[at + 2] > k->size)
            k->size = v[at + 2];
        at += 4 + (int)words;
    }
    return 0;
}

/* Takes one request of kind `tag` if one is waiting: 1, 0 when none, -1
 * on failure. */
static int take(ef__dispatcher *d, int tag)
{
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Iprobe(MPI_ANY_SOURCE, tag, d->job->dispatch, &flag, &st);
    if (rc != MPI_SUCCESS)
        return ef__service_mpi_error(rc, "MPI_Iprobe", &d->err), -1;
    if (!flag)
        return 0;
    int n = 0;
    MPI_Get_count(&st, MPI_INT64_T, &n);
    if (n < 2)
        n = 2;
    if (n > d->msg_cap) {
        int64_t *m = ef__realloc(d->msg, (size_t)n * sizeof *m);
        if (!m)
            return ef__err_set(&d->err, EF_ENOMEM, "service: out of memory"),
                   -1;
        d->msg = m;
        d->msg_cap = n;
    }
    int64_t *v = d->msg;
    v[0] = v[1] = 0;
    rc = MPI_Recv(v, n, MPI_INT64_T, st.MPI_SOURCE, tag, d->job->dispatch,
                  MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
        return ef__service_mpi_error(rc, "MPI_Recv", &d->err), -1;
    int w = ef__service_index(d->job, EF_SERVICE_WORKER, st.MPI_SOURCE);
    int t = ef__service_index(d->job, EF_SERVICE_TRAINER, st.MPI_SOURCE);
    if (tag == EF__TAG_ASK && w >= 0)
        d->pending[w] = v[0] < 0 ? 0 : v[0];
    else if (tag == EF__TAG_DONE && w >= 0)
        d->nworkers_done++;
    else if (tag == EF__TAG_OPEN && t >= 0) {
        d->wanted[t] = v[1] ? INT64_MAX : v[0] + 1;
        /* a trainer's first epoch is its lowest: each reader opens a
         * later one */
        if (!d->opened[t] && (!d->nopened++ || v[0] < d->done_below))
            d->done_below = v[0];
        d->opened[t] = 1;
        if (n > 2 && resume(d, st.MPI_SOURCE, v, n))
            return -1;
    }
    else if (tag == EF__TAG_CUT && t >= 0 && v[0] >= 0) {
        epoch_state *es = epoch_of(d, v[0]);
        if (!es)
            return ef__err_set(&d->err, EF_ENOMEM, "service: out of memory"),
                   -1;
        es->cut = 1;
    } else if (tag == EF__TAG_LEAVE && t >= 0 && !d->left[t]) {
        d->left[t] = 1;
        d->ntrainers_left++;
    }
    return 1;
}

/* The workers wait for answers only this thread gives: a failure here
 * ends the job rather than leave them waiting. */
static void *fail(ef__dispatcher *d)
{
    fprintf(stderr, "echoflow serve: rank %d, the dispatcher: %s\n",
            d->job->rank, d->err.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
    return NULL;
}

static void *run(void *arg)
{
    ef__dispatcher *d = arg;
    static const int tags[] = {EF__TAG_ASK, EF__TAG_OPEN, EF__TAG_CUT,
                               EF__TAG_LEAVE, EF__TAG_DONE};
    unsigned idle = 0;
    while (d->nworkers_done < d->job->nworkers) {
        int got = 0;
        for (size_t i = 0; i < sizeof tags / sizeof tags[0]; i++) {
            int rc = take(d, tags[i]);
            if (rc < 0)
                return fail(d);
            got += rc;
        }
        if (answer(d))
            return fail(d);
        if (got)
            idle = 0;
        else
            ef__service_idle(&idle);
    }
    return NULL;
}

int ef__dispatcher_start(int64_t splits, uint64_t seed, ef__dispatcher **out,
                         ef__err *err)
{
    const ef__service_job *job = ef__service_job_get();
    ef__dispatcher *d = ef__calloc(1, sizeof *d);
    if (d) {
        d->job = job;
        d->splits = splits;
        d->seed = seed;
        d->wanted = ef__calloc((size_t)job->ntrainers + 1, sizeof *d->wanted);
        d->left = ef__calloc((size_t)job->ntrainers + 1, sizeof *d->left);
        d->opened =
            ef__calloc((size_t)job->ntrainers + 1, sizeof *d->opened);
        d->pending = ef__malloc((size_t)job->nworkers * sizeof *d->pending);
    }
    if (!d || !d->wanted || !d->left || !d->opened || !d->pending) {
        if (d) {
            ef__free(d->wanted);
            ef__free(d->left);
            ef__free(d->opened);
            ef__free(d->pending);
            ef__free(d);
        }
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    }
    for (int w = 0; w < job->nworkers; w++)
        d->pending[w] = -1;
    ef__err_clear(&d->err);
    if (pthread_create(&d->thread, NULL, run, d)) {
        ef__free(d->wanted);
        ef__free(d->left);
        ef__free(d->opened);
        ef__free(d->pending);
        ef__free(d);
        return ef__err_set(err, EF_ENOMEM,
                           "service: cannot start the dispatcher's thread");
    }
    *out = d;
    return EF_OK;
}

void ef__dispatcher_join(ef__dispatcher *d)
{
    if (!d)
        return;
    pthread_join(d->thread, NULL);
    for (int64_t e = 0; e < d->nepochs; e++) {
        ef__free(d->epochs[e].order);
        for (int64_t k = 0; d->epochs[e].skips && k < d->splits; k++)
            ef__free(d->epochs[e].skips[k].words);
        ef__free(d->epochs[e].skips);
    }
    ef__free(d->msg);
    ef__free(d->epochs);
    ef__free(d->wanted);
    ef__free(d->left);
    ef__free(d->opened);
    ef__free(d->pending);
    ef__free(d);
}
