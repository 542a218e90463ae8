/* SPDX-License-Identifier: Apache-2.0 */
/* A trainer's record of what its consumer was handed from the service,
 * the `service` source's part of a checkpoint (service.h, ef__progress).
 *
 * The rule it keeps: a sample is delivered when ef_pipeline_next hands
 * it out fresh (echo copy 0), alone or in a batch. Each sample is named
 * by its split and its position in that split's order (its worker reads
 * the split in one order, the same on every run: chunk.h). A resumed
 * run leaves out exactly the positions delivered before the checkpoint;
 * everything else of the epochs not delivered whole comes again, in its
 * split's order, including what the stages after the source held then
 * (their buffers restart empty: pipeline_state.c).
 *
 * The record starts at `first`, the oldest epoch not delivered whole;
 * an epoch is dropped from the front once every worker ended it and
 * each of its splits was delivered whole (its length, which its worker
 * says at its end, equals the positions delivered).
 *
 * Record layout (state.h's varints): the workers' settings (count, then
 * each name and value), the workers' count, `first`, the epoch count,
 * then per epoch: its number, the count of splits named, and per split:
 * its number, its length (zigzag, -1: not known), its bitmap's word
 * count and words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "service/service.h"

/* bitmap words per split at most: 2^32 positions */
#define MAX_WORDS ((uint64_t)1 << 26)
#define MAX_SPLITS ((uint64_t)1 << 24)
#define MAX_EPOCHS 4096
#define MAX_SETTINGS 64

typedef struct {
    int64_t size;    /* the split's length, or -1 while not known */
    int64_t count;   /* positions delivered */
    uint64_t *words; /* bit p: position p delivered */
    int64_t nwords;
} split_rec;

typedef struct {
    int64_t epoch;
    int ends; /* workers that ended it */
    split_rec *splits; /* by split number */
    int64_t nsplits;
} epoch_rec;

struct ef__progress {
    int64_t first;
    epoch_rec *epochs; /* ascending, each >= first */
    int64_t n, cap;
    int failed; /* out of memory once: the record lost a delivery */
};

ef__progress *ef__progress_new(int64_t first)
{
    ef__progress *p = ef__calloc(1, sizeof *p);
    if (p)
        p->first = first;
    return p;
}

static void epoch_free(epoch_rec *e)
{
    for (int64_t k = 0; k < e->nsplits; k++)
        ef__free(e->splits[k].words);
    ef__free(e->splits);
}

void ef__progress_free(ef__progress *p)
{
    if (!p)
        return;
    for (int64_t i = 0; i < p->n; i++)
        epoch_free(&p->epochs[i]);
    ef__free(p->epochs);
    ef__free(p);
}

int64_t ef__progress_first(const ef__progress *p)
{
    return p->first;
}

/* Epoch e's record, made when `make`; NULL when e is before the record
 * (or out of memory: p->failed). */
static epoch_rec *epoch_at(ef__progress *p, int64_t e, int make)
{
    if (e < p->first)
        return NULL;
    int64_t i = 0;
    while (i < p->n && p->epochs[i].epoch < e)
        i++;
    if (i < p->n && p->epochs[i].epoch == e)
        return &p->epochs[i];
    if (!make)
        return NULL;
    if (p->n == p->cap) {
        int64_t cap = p->cap ? 2 * p->cap : 4;
        epoch_rec *v = ef__realloc(p->epochs, (size_t)cap * sizeof *v);
        if (!v) {
            p->failed = 1;
            return NULL;
        }
        p->epochs = v;
        p->cap = cap;
    }
    memmove(&p->epochs[i + 1], &p->epochs[i],
            (size_t)(p->n - i) * sizeof *p->epochs);
    p->epochs[i] = (epoch_rec){.epoch = e};
    p->n++;
    return &p->epochs[i];
}

/* Split k of epoch rec e, made with an unknown length when new. */
static split_rec *split_at(ef__progress *p, epoch_rec *e, int64_t k)
{
    if (k < 0 || (uint64_t)k >= MAX_SPLITS)
        return NULL;
    if (k >= e->nsplits) {
        int64_t n = k + 1 > 2 * e->nsplits ? k + 1 : 2 * e->nsplits;
        split_rec *v = ef__realloc(e->splits, (size_t)n * sizeof *v);
        if (!v) {
            p->failed = 1;
            return NULL;
        }
        for (int64_t i = e->nsplits; i < n; i++)
            v[i] = (split_rec){.size = -1};
        e->splits = v;
        e->nsplits = n;
    }
    return &e->splits[k];
}

static int grow_words(split_rec *s, int64_t words)
{
    if (words <= s->nwords)
        return EF_OK;
    int64_t n = words > 2 * s->nwords ? words : 2 * s->nwords;
    uint64_t *v = ef__realloc(s->words, (size_t)n * sizeof *v);
    if (!v)
        return EF_ENOMEM;
    memset(v + s->nwords, 0, (size_t)(n - s->nwords) * sizeof *v);
    s->words = v;
    s->nwords = n;
    return EF_OK;
}

static int whole(const split_rec *s)
{
    return s->count == (s->size < 0 ? 0 : s->size) &&
           (s->size >= 0 || s->count == 0);
}

/* Drops the epochs at the front that were delivered whole. */
static void prune(ef__progress *p, int nworkers)
{
    while (p->n > 0 && p->epochs[0].epoch == p->first &&
           p->epochs[0].ends >= nworkers) {
        epoch_rec *e = &p->epochs[0];
        for (int64_t k = 0; k < e->nsplits; k++)
            if (!whole(&e->splits[k]))
                return;
        epoch_free(e);
        memmove(&p->epochs[0], &p->epochs[1],
                (size_t)(p->n - 1) * sizeof *p->epochs);
        p->n--;
        p->first++;
    }
}

int ef__progress_delivered(ef__progress *p, int64_t epoch, int64_t split,
                           int64_t position)
{
    epoch_rec *e = epoch_at(p, epoch, 1);
    split_rec *s = e ? split_at(p, e, split) : NULL;
    if (!s || position < 0 || (uint64_t)position / 64 >= MAX_WORDS)
        return p->failed ? EF_ENOMEM : EF_OK;
    if (grow_words(s, position / 64 + 1)) {
        p->failed = 1;
        return EF_ENOMEM;
    }
    uint64_t bit = (uint64_t)1 << (position % 64);
    if (!(s->words[position / 64] & bit)) {
        s->words[position / 64] |= bit;
        s->count++;
    }
    return EF_OK;
}

int ef__progress_split_end(ef__progress *p, int64_t epoch, int64_t split,
                           int64_t size)
{
    epoch_rec *e = epoch_at(p, epoch, 1);
    split_rec *s = e ? split_at(p, e, split) : NULL;
    if (s)
        s->size = size;
    return p->failed ? EF_ENOMEM : EF_OK;
}

int ef__progress_epoch_end(ef__progress *p, int64_t epoch, int nworkers)
{
    epoch_rec *e = epoch_at(p, epoch, 1);
    if (e)
        e->ends++;
    prune(p, nworkers);
    return p->failed ? EF_ENOMEM : EF_OK;
}

/* ---- the record ----------------------------------------------------- */

/* The settings in a hello text (name, value, each with its zero). */
static int count_settings(const char *text, int len)
{
    int n = 0;
    for (int i = 0; i < len; i++)
        n += text[i] == '\0';
    return n / 2;
}

/* The epochs of the record into o: `first`, the epoch count, then each
 * epoch (with its end marks when `ends`: a trainer's record for the
 * others, ef__progress_pack) and its splits named. p NULL: none. A
 * record that lost a delivery to memory is refused. */
static int put_epochs(const ef__progress *p, ef__state_out *o, int ends,
                      ef__err *err)
{
    if (p && p->failed)
        return ef__err_set(err, EF_ENOMEM,
                           "service: out of memory while recording what "
                           "the trainer was handed");
    ef__put_u64(o, p ? (uint64_t)p->first : 0);
    ef__put_u64(o, p ? (uint64_t)p->n : 0);
    for (int64_t i = 0; p && i < p->n; i++) {
        const epoch_rec *e = &p->epochs[i];
        int64_t named = 0;
        for (int64_t k = 0; k < e->nsplits; k++)
            named += e->splits[k].size >= 0 || e->splits[k].count > 0;
        ef__put_u64(o, (uint64_t)e->epoch);
        if (ends)
            ef__put_u64(o, (uint64_t)e->ends);
        ef__put_u64(o, (uint64_t)named);
        for (int64_t k = 0; k < e->nsplits; k++) {
            const split_rec *s = &e->splits[k];
            if (s->size < 0 && s->count == 0)
                continue;
            int64_t words = s->nwords;
            while (words > 0 && s->words[words - 1] == 0)
                words--;
            ef__put_u64(o, (uint64_t)k);
            ef__put_i64(o, s->size);
            ef__put_u64(o, (uint64_t)words);
            for (int64_t w = 0; w < words; w++)
                ef__put_u64(o, s->words[w]);
        }
    }
    return o->failed ? ef__err_set(err, EF_ENOMEM, "state: out of memory")
                     : EF_OK;
}

int ef__progress_save(ef__progress *p, const ef__service_job *job,
                      ef__state_out *o, ef__err *err)
{
    const char *t = job->worker_settings ? job->worker_settings : "";
    int len = job->worker_settings ? job->worker_settings_len : 0;
    ef__put_u64(o, (uint64_t)count_settings(t, len));
    for (int at = 0; at < len;) {
        ef__put_str(o, t + at); /* the name, then the value */
        at += (int)strlen(t + at) + 1;
    }
    ef__put_u64(o, (uint64_t)job->nworkers);
    if (p)
        prune(p, job->nworkers);
    return put_epochs(p, o, 0, err);
}

/* The value of setting `name` in the job's workers' hello, or NULL. */
static const char *job_setting(const ef__service_job *job, const char *name)
{
    const char *t = job->worker_settings;
    for (int at = 0; t && at < job->worker_settings_len;) {
        const char *n = t + at;
        at += (int)strlen(n) + 1;
        const char *v = at < job->worker_settings_len ? t + at : "";
        at += (int)strlen(v) + 1;
        if (!strcmp(n, name))
            return v;
    }
    return NULL;
}

/* Reads the workers' settings and count of the record, refusing those
 * that differ from this job's. */
static int check_settings(ef__state_in *in, const ef__service_job *job)
{
    uint64_t n, nworkers;
    if (ef__get_count(in, "the workers' setting count", MAX_SETTINGS, &n))
        return in->err->status;
    const char *splits = NULL;
    char splits_buf[64] = "";
    for (uint64_t i = 0; i < n; i++) {
        char name[64], value[4096];
        if (ef__get_str(in, "a setting's name", name, sizeof name) ||
            ef__get_str(in, "a setting's value", value, sizeof value))
            return in->err->status;
        const char *now = job_setting(job, name);
        if (!now || !ef__setting_same(name, value, now))
            return ef__err_set(in->err, EF_ESPEC,
                               "service: %s differs between the workers of "
                               "the checkpoint and this job's: %.300s then, "
                               "%.300s now (the workers' samples and splits "
                               "would differ)",
                               name, value, now ? now : "(none)");
        if (!strcmp(name, "--splits")) {
            snprintf(splits_buf, sizeof splits_buf, "%.60s", value);
            splits = splits_buf;
        }
    }
    if (ef__get_count(in, "the workers' count", INT32_MAX, &nworkers))
        return in->err->status;
    /* left to its default, --splits is a count per worker */
    char *end;
    if (nworkers != (uint64_t)job->nworkers &&
        (!splits || strtol(splits, &end, 10) <= 0 || *end))
        return ef__err_set(in->err, EF_ESPEC,
                           "service: the checkpoint was saved beside %llu "
                           "workers, this job has %d, and --splits was left "
                           "to its default of 8 per worker (the splits "
                           "would differ): give the workers --splits",
                           (unsigned long long)nworkers, job->nworkers);
    return EF_OK;
}

/* One epoch's record: its end marks (with `ends`), its splits, each
 * with its bitmap. */
static int read_epoch(ef__state_in *in, ef__progress *p, int64_t before,
                      int ends)
{
    uint64_t epoch, marks = 0, named;
    if (ef__get_u64(in, "an epoch", &epoch) ||
        (ends && ef__get_count(in, "an epoch's end marks", INT32_MAX,
                               &marks)) ||
        ef__get_count(in, "a split count", MAX_SPLITS, &named))
        return in->err->status;
    if ((int64_t)epoch < p->first || (int64_t)epoch <= before ||
        epoch > (uint64_t)INT64_MAX / 2)
        return ef__state_bad(in, "epoch %llu out of order",
                             (unsigned long long)epoch);
    epoch_rec *e = epoch_at(p, (int64_t)epoch, 1);
    if (!e)
        return ef__err_set(in->err, EF_ENOMEM, "state: out of memory");
    e->ends = (int)marks;
    for (uint64_t i = 0; i < named; i++) {
        uint64_t k, words;
        int64_t size;
        if (ef__get_count(in, "a split", MAX_SPLITS - 1, &k) ||
            ef__get_i64(in, "a split's length", &size) ||
            ef__get_count(in, "a bitmap's size", MAX_WORDS, &words))
            return in->err->status;
        if (size < -1)
            return ef__state_bad(in, "a split of length %lld",
                                 (long long)size);
        split_rec *s = split_at(p, e, (int64_t)k);
        if (!s || grow_words(s, (int64_t)words))
            return ef__err_set(in->err, EF_ENOMEM, "state: out of memory");
        if (s->count || s->size >= 0)
            return ef__state_bad(in, "split %llu named twice",
                                 (unsigned long long)k);
        s->size = size;
        for (uint64_t w = 0; w < words; w++) {
            if (ef__get_u64(in, "a bitmap word", &s->words[w]))
                return in->err->status;
            s->count += __builtin_popcountll(s->words[w]);
        }
        if (size >= 0 && s->count > size)
            return ef__state_bad(in, "split %llu: %lld positions delivered "
                                     "of %lld",
                                 (unsigned long long)k, (long long)s->count,
                                 (long long)size);
    }
    return EF_OK;
}

/* The epochs put_epochs() wrote into a new record, *out. */
static int read_epochs(ef__state_in *in, int ends, ef__progress **out)
{
    uint64_t first, n;
    if (ef__get_count(in, "the first epoch", (uint64_t)INT64_MAX / 2,
                      &first) ||
        ef__get_count(in, "the epoch count", MAX_EPOCHS, &n))
        return in->err->status;
    ef__progress *p = ef__progress_new((int64_t)first);
    if (!p)
        return ef__err_set(in->err, EF_ENOMEM, "state: out of memory");
    int64_t before = -1;
    for (uint64_t i = 0; i < n; i++) {
        if (read_epoch(in, p, before, ends)) {
            ef__progress_free(p);
            return in->err->status;
        }
        before = p->epochs[p->n - 1].epoch;
    }
    *out = p;
    return EF_OK;
}

int ef__progress_restore(ef__state_in *in, const ef__service_job *job,
                         ef__progress **out, ef__err *err)
{
    (void)err; /* in->err */
    if (check_settings(in, job))
        return in->err->status;
    return read_epochs(in, 0, out);
}

/* ---- the trainers' records joined ---------------------------------- */

int ef__progress_pack(const ef__progress *p, ef__state_out *o, ef__err *err)
{
    return put_epochs(p, o, 1, err);
}

/* Joins split `from` of epoch e into `to`: lengths taken where unknown,
 * positions ORed; a length the records disagree on, or more positions
 * than the length, is refused. */
static int merge_split(split_rec *to, const split_rec *from, int64_t e,
                       int64_t k, ef__err *err)
{
    if (to->size >= 0 && from->size >= 0 && to->size != from->size)
        return ef__err_set(err, EF_EFORMAT,
                           "service: the trainers' records differ: split "
                           "%lld of epoch %lld is %lld samples long in "
                           "one, %lld in another",
                           (long long)k, (long long)e, (long long)to->size,
                           (long long)from->size);
    if (to->size < 0)
        to->size = from->size;
    if (grow_words(to, from->nwords))
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    to->count = 0;
    for (int64_t w = 0; w < to->nwords; w++) {
        if (w < from->nwords)
            to->words[w] |= from->words[w];
        to->count += __builtin_popcountll(to->words[w]);
    }
    if (to->size >= 0 && to->count > to->size)
        return ef__err_set(err, EF_EFORMAT,
                           "service: the trainers' records differ: split "
                           "%lld of epoch %lld has %lld positions delivered "
                           "of %lld",
                           (long long)k, (long long)e, (long long)to->count,
                           (long long)to->size);
    return EF_OK;
}

int ef__progress_merge(ef__progress *into, const ef__progress *from,
                       ef__err *err)
{
    if (into->failed || from->failed)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    /* an epoch before a record's first was delivered whole by that
     * trainer alone, every position of it */
    while (into->n > 0 && into->epochs[0].epoch < from->first) {
        epoch_free(&into->epochs[0]);
        memmove(&into->epochs[0], &into->epochs[1],
                (size_t)(into->n - 1) * sizeof *into->epochs);
        into->n--;
    }
    if (from->first > into->first)
        into->first = from->first;
    for (int64_t i = 0; i < from->n; i++) {
        const epoch_rec *f = &from->epochs[i];
        if (f->epoch < into->first)
            continue;
        epoch_rec *e = epoch_at(into, f->epoch, 1);
        if (!e)
            return ef__err_set(err, EF_ENOMEM, "service: out of memory");
        /* each worker ends each epoch to every trainer */
        if (f->ends > e->ends)
            e->ends = f->ends;
        for (int64_t k = 0; k < f->nsplits; k++) {
            const split_rec *s = &f->splits[k];
            if (s->size < 0 && s->count == 0)
                continue;
            split_rec *t = split_at(into, e, k);
            if (!t)
                return ef__err_set(err, EF_ENOMEM, "service: out of memory");
            int rc = merge_split(t, s, f->epoch, k, err);
            if (rc != EF_OK)
                return rc;
        }
    }
    return EF_OK;
}

int ef__progress_join(const unsigned char *all, const size_t *counts, int n,
                      ef__progress **out, ef__err *err)
{
    ef__progress *job = NULL;
    int rc = EF_OK;
    size_t at = 0;
    for (int t = 0; t < n && rc == EF_OK; t++) {
        ef__state_in in = {.p = all + at, .len = counts[t], .err = err};
        ef__progress *one = NULL;
        rc = read_epochs(&in, 1, &one);
        if (rc == EF_OK)
            rc = ef__state_in_done(&in);
        if (rc == EF_OK && job)
            rc = ef__progress_merge(job, one, err);
        if (rc == EF_OK && !job) {
            job = one;
            one = NULL;
        }
        ef__progress_free(one);
        if (rc != EF_OK) { /* said again, naming the trainer */
            char why[EF__ERR_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            ef__err_set(err, rc, "service: trainer %d's record: %s", t, why);
        }
        at += counts[t];
    }
    if (rc == EF_OK && !job && !(job = ef__progress_new(0)))
        rc = ef__err_set(err, EF_ENOMEM, "service: out of memory");
    if (rc != EF_OK) {
        ef__progress_free(job);
        return rc;
    }
    *out = job;
    return EF_OK;
}

int ef__progress_open_msg(const ef__progress *p, int64_t epoch, int endless,
                          int64_t **msg, int *n)
{
    size_t count = 2;
    int64_t records = 0;
    for (int64_t i = 0; p && i < p->n; i++)
        for (int64_t k = 0; k < p->epochs[i].nsplits; k++) {
            const split_rec *s = &p->epochs[i].splits[k];
            if (s->size >= 0 || s->count > 0) {
                count += 4 + (size_t)s->nwords;
                records++;
            }
        }
    if (p)
        count++;
    if (count > INT32_MAX)
        return EF_ENOMEM;
    int64_t *v = ef__malloc(count * sizeof *v);
    if (!v)
        return EF_ENOMEM;
    size_t at = 0;
    v[at++] = epoch;
    v[at++] = endless;
    if (p)
        v[at++] = records;
    for (int64_t i = 0; p && i < p->n; i++)
        for (int64_t k = 0; k < p->epochs[i].nsplits; k++) {
            const split_rec *s = &p->epochs[i].splits[k];
            if (s->size < 0 && s->count == 0)
                continue;
            v[at++] = p->epochs[i].epoch;
            v[at++] = k;
            v[at++] = s->size;
            v[at++] = s->nwords;
            memcpy(&v[at], s->words, (size_t)s->nwords * sizeof *v);
            at += (size_t)s->nwords;
        }
    *msg = v;
    *n = (int)count;
    return EF_OK;
}
