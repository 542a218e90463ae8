/* SPDX-License-Identifier: Apache-2.0 */
/* Saving and restoring a pipeline's position (state.h has the format).
 *
 * Saving pauses the stages' threads from the last stage to the first, so
 * that what each asynchronous stage took from its upstream is fixed
 * while the stages write their records, then lets them go on. Restoring
 * checks the whole state against the pipeline first, so a state of
 * another pipeline changes nothing, then hands each stage its record,
 * from the source down, before anything opens: a stage refills its
 * buffers by fetching their items through the stages above it. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "pipeline/pipeline.h"
#include "pipeline/state.h"

#define OPTS_TEXT 1024

static void stage_opts(const ef__stage *s, char *buf)
{
    ef__opts_format(&s->opts, buf, OPTS_TEXT);
}

/* ---- saving ------------------------------------------------------ */

/* Whether stage s restarts as built on a restore: a stage after a
 * source that deals again what the consumer was not handed (the
 * `service`), whose record names no item anyone holds. */
static int restarts(const ef__stage *s)
{
    const ef__stage *src = s;
    while (src->up)
        src = src->up;
    return s != src && src->def->delivered;
}

/* One stage: its name, options, pass, then its own record and the items
 * to take again from its upstream. */
static int save_stage(ef__stage *s, ef__state_out *o, ef__err *err)
{
    ef__idents replay = {0};
    ef__state_out rec = {.replay = &replay};
    /* the stage's record first: a stage that cannot be saved (an
     * unordered map) does not pause its threads, so it must refuse
     * before its fields, which those threads write, are read */
    int rc = s->def->save && !restarts(s) ? s->def->save(s, &rec, err) : EF_OK;
    if (rc == EF_OK && s->replay && !restarts(s)) /* owed from a restore */
        for (size_t i = s->replay->at; i < s->replay->n && rc == EF_OK; i++)
            rc = ef__idents_add(&replay, &s->replay->items[i]);
    if (rc == EF_OK) {
        char opts[OPTS_TEXT];
        stage_opts(s, opts);
        ef__put_str(o, s->def->info.name);
        ef__put_str(o, opts);
        ef__put_i64(o, s->epoch);
        /* a stage that restarts does so as built, not ended */
        int ended = rec.ends == EF__SAVE_AS_IS ? s->ended
                                                : rec.ends == EF__SAVE_ENDED;
        ef__put_u64(o, (uint64_t)(ended && !restarts(s)));
        ef__put_bytes(o, rec.buf, rec.len);
        ef__put_idents(o, replay.items, replay.n);
        if (rec.failed || o->failed)
            rc = EF_ENOMEM;
    }
    if (rc == EF_ENOMEM && !err->msg[0])
        ef__err_set(err, rc, "state: out of memory");
    if (rc != EF_OK && rc != EF_ENOMEM) {
        char where[96];
        snprintf(where, sizeof where, "state: stage %d '%s'", s->index,
                 s->def->info.name);
        ef__err_prefix(err, where);
    }
    ef__state_out_free(&rec);
    ef__idents_free(&replay);
    return rc;
}

static int save_payload(ef_pipeline *p, ef__state_out *o, ef__err *err)
{
    ef__put_u64(o, p->ctx.seed);
    ef__put_u64(o, ef__stat_get(&p->items));
    ef__put_u64(o, atomic_load(&p->final_status) == EF_END);
    ef__put_u64(o, (uint64_t)p->nstages);
    int opened = atomic_load(&p->opened);
    if (opened)
        for (int i = p->nstages - 1; i >= 0; i--)
            if (p->stages[i]->def->pause)
                p->stages[i]->def->pause(p->stages[i]);
    /* from the last stage up: one that cannot be saved (an unordered map,
     * which does not pause) fails before the stages above it are read */
    ef__state_out parts[MAX_STAGES] = {{0}};
    int rc = EF_OK;
    for (int i = p->nstages - 1; i >= 0 && rc == EF_OK; i--)
        rc = save_stage(p->stages[i], &parts[i], err);
    if (opened)
        for (int i = 0; i < p->nstages; i++)
            if (p->stages[i]->def->resume)
                p->stages[i]->def->resume(p->stages[i]);
    for (int i = 0; i < p->nstages; i++) {
        if (rc == EF_OK)
            ef__put_raw(o, &parts[i]);
        ef__state_out_free(&parts[i]);
    }
    return rc;
}

/* The state for the pipeline as it is, in p->saved; `asking`: for a
 * size query (buf NULL). */
static int make_state(ef_pipeline *p, int asking)
{
    uint64_t items = ef__stat_get(&p->items);
    /* a collective save is made at each call but the save after a size
     * query, so that every process takes part in every checkpoint's */
    int collective = p->stages[0]->def->save_collective;
    int asked = p->saved_asked;
    p->saved_asked = asking;
    if (p->saved && p->saved_items == items &&
        (!collective || (asked && !asking)))
        return EF_OK; /* no next() since: the same position */
    ef__state_out o = {0};
    ef__err err;
    ef__err_clear(&err);
    int rc = save_payload(p, &o, &err);
    if (rc == EF_OK && o.failed)
        rc = ef__err_set(&err, EF_ENOMEM, "state: out of memory");
    unsigned char *state =
        rc == EF_OK ? ef__malloc(EF__STATE_HEADER + o.len) : NULL;
    if (rc == EF_OK && !state)
        rc = ef__err_set(&err, EF_ENOMEM, "state: out of memory");
    if (rc != EF_OK) {
        ef__state_out_free(&o);
        return ef__err_set(&p->err, rc, "%s", err.msg);
    }
    if (o.len)
        memcpy(state + EF__STATE_HEADER, o.buf, o.len);
    ef__state_seal(state, state + EF__STATE_HEADER, o.len);
    ef__free(p->saved);
    p->saved = state;
    p->saved_size = EF__STATE_HEADER + o.len;
    ef__state_out_free(&o);
    p->saved_items = items;
    return EF_OK;
}

ef_status ef_pipeline_save_state(ef_pipeline *p, void *buf, size_t cap,
                                 size_t *size)
{
    if (!p || !size)
        return EF_EINVAL;
    int done = atomic_load(&p->final_status);
    if (done < 0)
        return done; /* the message of the failure stays */
    if (p->nstages == 0)
        return ef__err_set(&p->err, EF_ESPEC,
                           "state: the pipeline has no stages");
    int rc = make_state(p, buf == NULL);
    if (rc != EF_OK)
        return rc;
    *size = p->saved_size;
    if (!buf)
        return EF_OK;
    if (cap < p->saved_size)
        return ef__err_set(&p->err, EF_EINVAL,
                           "state: the buffer holds %zu bytes, the state "
                           "needs %zu (ask with buf NULL first)",
                           cap, p->saved_size);
    memcpy(buf, p->saved, p->saved_size);
    return EF_OK;
}

/* ---- restoring --------------------------------------------------- */

typedef struct {
    uint64_t seed, items, ended, nstages;
} head;

/* One stage's part of the state, read but not applied. */
typedef struct {
    char name[64];
    char opts[OPTS_TEXT];
    int64_t epoch;
    uint64_t ended;
    const void *rec;
    size_t rec_len;
    size_t rec_at; /* its offset in the state, for messages */
} stage_rec;

static int read_head(ef__state_in *in, head *h)
{
    ef__get_u64(in, "the seed", &h->seed);
    ef__get_u64(in, "the items delivered", &h->items);
    ef__get_count(in, "the end flag", 1, &h->ended);
    return ef__get_count(in, "the stage count", MAX_STAGES, &h->nstages);
}

static int read_stage(ef__state_in *in, stage_rec *r)
{
    ef__get_str(in, "a stage name", r->name, sizeof r->name);
    ef__get_str(in, "a stage's options", r->opts, sizeof r->opts);
    ef__get_i64(in, "a stage's pass", &r->epoch);
    ef__get_count(in, "a stage's end flag", 1, &r->ended);
    if (!in->failed && (r->epoch < 0 || r->epoch > EF__STATE_MAX_EPOCH))
        return ef__state_bad(in, "pass %lld, expected 0 to %lld",
                             (long long)r->epoch,
                             (long long)EF__STATE_MAX_EPOCH);
    r->rec_at = in->at;
    return ef__get_bytes(in, "a stage's record", &r->rec, &r->rec_len);
}

/* Whether the state's stage matches the pipeline's stage i. */
static int check_stage(ef_pipeline *p, int i, const stage_rec *r,
                       ef__err *err)
{
    const ef__stage *s = p->stages[i];
    char opts[OPTS_TEXT];
    stage_opts(s, opts);
    if (strcmp(r->name, s->def->info.name) != 0)
        return ef__err_set(err, EF_ESPEC,
                           "state: stage %d differs: the state has '%s', "
                           "the pipeline '%s'",
                           i, r->name, s->def->info.name);
    if (strcmp(r->opts, opts) != 0)
        return ef__err_set(err, EF_ESPEC,
                           "state: stage %d '%s' differs: the state has "
                           "options '%s', the pipeline '%s'",
                           i, r->name, r->opts, opts);
    return EF_OK;
}

/* Reads the whole state and checks it against the pipeline, applying
 * nothing. */
static int check_all(ef_pipeline *p, ef__state_in *in, head *h)
{
    int rc = read_head(in, h);
    if (rc != EF_OK)
        return rc;
    if (h->seed != p->ctx.seed)
        return ef__err_set(in->err, EF_ESPEC,
                           "state: saved with seed %llu, the pipeline has "
                           "seed %llu",
                           (unsigned long long)h->seed,
                           (unsigned long long)p->ctx.seed);
    if (h->nstages != (uint64_t)p->nstages)
        return ef__err_set(in->err, EF_ESPEC,
                           "state: saved from a pipeline of %llu stages, "
                           "this one has %d",
                           (unsigned long long)h->nstages, p->nstages);
    char where[96];
    for (int i = 0; i < p->nstages; i++) {
        /* a message about the bytes names the stage they belong to */
        snprintf(where, sizeof where, "stage %d '%s'", i,
                 p->stages[i]->def->info.name);
        in->where = where;
        stage_rec r;
        if ((rc = read_stage(in, &r)) != EF_OK ||
            (rc = check_stage(p, i, &r, in->err)) != EF_OK)
            return rc;
        ef__idents skip = {0};
        rc = ef__get_idents(in, "a stage's replay list", &skip);
        ef__idents_free(&skip);
        if (rc != EF_OK)
            return rc;
    }
    in->where = NULL;
    return ef__state_in_done(in);
}

/* Applies stage i's part: its record to its restore(), its replay list
 * to its next pulls. */
static int apply_stage(ef_pipeline *p, int i, ef__state_in *in, ef__err *err)
{
    ef__stage *s = p->stages[i];
    stage_rec r;
    int rc = read_stage(in, &r);
    if (rc != EF_OK)
        return rc;
    char where[96];
    snprintf(where, sizeof where, "stage %d '%s'", i, s->def->info.name);
    ef__state_in rec = {.p = r.rec,
                        .len = r.rec_len,
                        .base = in->base + r.rec_at,
                        .where = where,
                        .err = err};
    s->epoch = r.epoch;
    if (s->def->restore && !restarts(s))
        rc = s->def->restore(s, &rec, err);
    if (rc == EF_OK)
        rc = ef__state_in_done(&rec);
    if (rc != EF_OK)
        return rc;
    s->ended = (int)r.ended;
    ef__idents *replay = ef__calloc(1, sizeof *replay);
    if (!replay)
        return ef__err_set(err, EF_ENOMEM, "state: out of memory");
    rc = ef__get_idents(in, "a stage's replay list", replay);
    if (rc != EF_OK || replay->n == 0) {
        ef__idents_free(replay);
        ef__free(replay);
        return rc;
    }
    s->replay = replay;
    return EF_OK;
}

ef_status ef_pipeline_restore_state(ef_pipeline *p, const void *buf,
                                    size_t size)
{
    if (!p || (!buf && size))
        return EF_EINVAL;
    if (atomic_load(&p->started))
        return ef__err_set(&p->err, EF_ESTATE,
                           "state: restore a pipeline before its first "
                           "next() (build a new one to go back)");
    if (p->restored)
        return ef__err_set(&p->err, EF_ESTATE,
                           "state: the pipeline was restored already "
                           "(build a new one to restore another state)");
    const unsigned char *payload;
    size_t n;
    int rc = ef__state_open(buf, size, &payload, &n, &p->err);
    if (rc != EF_OK)
        return rc;
    head h;
    ef__state_in check = {
        .p = payload, .len = n, .base = EF__STATE_HEADER, .err = &p->err};
    if ((rc = check_all(p, &check, &h)) != EF_OK)
        return rc;
    /* from here on the pipeline changes: a failure leaves it failed */
    p->restored = 1;
    ef__state_in in = {
        .p = payload, .len = n, .base = EF__STATE_HEADER, .err = &p->err};
    read_head(&in, &h);
    for (int i = 0; i < p->nstages && rc == EF_OK; i++)
        rc = apply_stage(p, i, &in, &p->err);
    if (rc != EF_OK) {
        atomic_store(&p->started, 1); /* no open after a half restore */
        return ef__pipeline_finish(p, rc);
    }
    atomic_store(&p->items, h.items);
    if (h.ended)
        ef__pipeline_finish(p, EF_END);
    return EF_OK;
}
