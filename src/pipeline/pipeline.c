/* SPDX-License-Identifier: Apache-2.0 */
/* A pipeline: the chain of stages, building from specs, pulling, stopping,
 * statistics.
 *
 * Stages are created (options checked) when added, opened on the first
 * next(), cancelled then destroyed from the last to the first on
 * destroy: cancelling first wakes every thread, so no join can hang. */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/pipeline.h"
#include "pipeline/spec.h"

ef_status ef_pipeline_create(ef_pipeline **out)
{
    if (!out)
        return EF_EINVAL;
    ef_pipeline *p = ef__calloc(1, sizeof *p);
    *out = p;
    if (!p)
        return EF_ENOMEM;
    atomic_init(&p->ctx.cancelled, 0);
    pthread_mutex_init(&p->ctx.mu, NULL);
    pthread_mutex_init(&p->ctx.skip_mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&p->ctx.cond, &attr);
    pthread_condattr_destroy(&attr);
    ef__budget_init(&p->ctx.budget, EF__BUDGET_DEFAULT);
    return EF_OK;
}

void ef_pipeline_stop(ef_pipeline *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->ctx.mu);
    /* sequentially consistent: a stage that publishes a thread while this
     * runs checks the flag after publishing (see echo_open) */
    atomic_store(&p->ctx.cancelled, 1);
    pthread_cond_broadcast(&p->ctx.cond);
    pthread_mutex_unlock(&p->ctx.mu);
    /* every cancel hook is idempotent and never blocks */
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i]->def->cancel)
            p->stages[i]->def->cancel(p->stages[i]);
}

void ef_pipeline_destroy(ef_pipeline *p)
{
    if (!p)
        return;
    ef_pipeline_stop(p);
    for (int i = p->nstages - 1; i >= 0; i--)
        ef__stage_free(p->stages[i]);
    pthread_mutex_destroy(&p->ctx.mu);
    pthread_mutex_destroy(&p->ctx.skip_mu);
    pthread_cond_destroy(&p->ctx.cond);
    ef__budget_destroy(&p->ctx.budget);
    ef__free(p->saved);
    ef__free(p->bound.v);
    ef__free(p);
}

static int check_state(ef_pipeline *p)
{
    if (p->started)
        return ef__err_set(&p->err, EF_ESTATE,
                           "the pipeline is running: stages and the seed can "
                           "only be set before the first next()");
    return EF_OK;
}

ef_status ef_pipeline_set_seed(ef_pipeline *p, uint64_t seed)
{
    if (!p)
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc == EF_OK)
        p->ctx.seed = seed;
    return rc;
}

uint64_t ef_epoch_seed(uint64_t seed, uint64_t epoch, uint64_t part)
{
    /* odd constants far apart (the golden ratio's and another Weyl
     * increment), so that no small (epoch, part) pair lands on another's
     * seed */
    return seed + epoch * UINT64_C(0x9E3779B97F4A7C15) +
           part * UINT64_C(0xD1B54A32D192ED03);
}

ef_status ef_pipeline_set_on_error(ef_pipeline *p, ef_on_error policy)
{
    if (!p || (policy != EF_ON_ERROR_FAIL && policy != EF_ON_ERROR_SKIP))
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc == EF_OK)
        p->ctx.skip_bad = policy == EF_ON_ERROR_SKIP;
    return rc;
}

uint64_t ef_pipeline_skipped(ef_pipeline *p, char *buf, size_t cap)
{
    return ef_pipeline_skip(p, 0, buf, cap);
}

uint64_t ef_pipeline_skip(ef_pipeline *p, uint64_t i, char *buf, size_t cap)
{
    if (!p)
        return 0;
    pthread_mutex_lock(&p->ctx.skip_mu);
    uint64_t n = atomic_load(&p->ctx.skipped);
    if (buf && cap)
        snprintf(buf, cap, "%s",
                 i < n && i < EF_SKIPS_KEPT ? p->ctx.skip_msgs[i] : "");
    pthread_mutex_unlock(&p->ctx.skip_mu);
    return n;
}

uint64_t ef_pipeline_warning(ef_pipeline *p, uint64_t i, char *buf, size_t cap)
{
    if (!p)
        return 0;
    uint64_t n = atomic_load(&p->ctx.warned);
    if (buf && cap) {
        buf[0] = '\0';
        if (i < n && i < EF_WARNINGS_KEPT) {
            pthread_mutex_lock(&p->ctx.skip_mu);
            snprintf(buf, cap, "%s", p->ctx.warnings[i]);
            pthread_mutex_unlock(&p->ctx.skip_mu);
        }
    }
    return n;
}

uint64_t ef_pipeline_abandoned(ef_pipeline *p, char *buf, size_t cap)
{
    if (!p)
        return 0;
    if (buf && cap) {
        pthread_mutex_lock(&p->ctx.skip_mu);
        snprintf(buf, cap, "%s", p->ctx.abandon_msg);
        pthread_mutex_unlock(&p->ctx.skip_mu);
    }
    return atomic_load(&p->ctx.abandoned);
}

ef_status ef_pipeline_set_memory_budget(ef_pipeline *p, uint64_t bytes)
{
    if (!p)
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc == EF_OK)
        p->ctx.budget.limit = bytes;
    return rc;
}

/* Stages being added by one call: committed together or not at all. */
typedef struct {
    ef_pipeline *p;
    ef__stage *added[MAX_STAGES];
    int n;
    void (*fn)(void); /* a C callback for the stage */
    void *user;
} pending;

static int add_def(pending *pd, const ef__stage_def *def, const char *opts,
                   size_t opts_len, ef__err *err);

static int add_stage(pending *pd, const char *name, size_t name_len,
                     const char *opts, size_t opts_len, ef__err *err)
{
    char buf[64];
    if (name_len >= sizeof buf)
        name_len = sizeof buf - 1;
    memcpy(buf, name, name_len);
    buf[name_len] = '\0';
    const ef__stage_def *def = ef__stage_find(buf);
    if (!def) {
        char names[512];
        size_t used = 0;
        for (int i = 0; i < ef_stage_registry_count(); i++)
            used +=
                (size_t)snprintf(names + used, sizeof names - used, "%s%s",
                                 i ? ", " : "", ef_stage_registry_get(i)->name);
        return ef__err_set(err, EF_ESPEC, "unknown stage '%s' (stages: %s)",
                           buf, names);
    }
    return add_def(pd, def, opts, opts_len, err);
}

static int takes_shard(const ef__stage_def *def)
{
    for (int i = 0; i < def->info.noptions; i++)
        if (!strcmp(def->info.options[i].name, "shard"))
            return 1;
    return 0;
}

static int add_def(pending *pd, const ef__stage_def *def, const char *opts,
                   size_t opts_len, ef__err *err)
{
    const char *buf = def->info.name;
    int position = pd->p->nstages + pd->n;
    if (position >= MAX_STAGES)
        return ef__err_set(err, EF_ESPEC, "too many stages (at most %d)",
                           MAX_STAGES);
    if (position == 0 && !def->is_source)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s' needs an upstream: a pipeline starts "
                           "with a source (range, idx, tar, tfrecord, cifar)",
                           buf);
    if (position > 0 && def->is_source)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s' is a source: it can only be the first "
                           "stage",
                           buf);
    if (def->is_source && pd->p->ctx.shard_n > 0 && !takes_shard(def))
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s' cannot read part %lld of %lld: it has "
                           "no shard option",
                           buf, (long long)pd->p->ctx.shard_i,
                           (long long)pd->p->ctx.shard_n);
    ef__stage *s;
    int rc = ef__stage_create(&s, def, opts, opts_len, &pd->p->ctx, pd->fn,
                              pd->user, err);
    if (rc != EF_OK)
        return rc;
    s->index = position;
    s->up = position == 0 ? NULL
            : pd->n > 0   ? pd->added[pd->n - 1]
                          : pd->p->stages[pd->p->nstages - 1];
    pd->added[pd->n++] = s;
    return EF_OK;
}

static int commit(pending *pd, int rc)
{
    if (rc == EF_OK) {
        for (int i = 0; i < pd->n; i++)
            pd->p->stages[pd->p->nstages++] = pd->added[i];
    } else {
        for (int i = pd->n - 1; i >= 0; i--)
            ef__stage_free(pd->added[i]);
    }
    return rc;
}

static int spec_stage(void *arg, const ef__spec_stage *st, ef__err *err)
{
    return add_stage(arg, st->name, st->name_len, st->opts, st->opts_len, err);
}

ef_status ef_pipeline_set_shard(ef_pipeline *p, int64_t index, int64_t count)
{
    if (!p)
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc != EF_OK)
        return rc;
    if (count < 1 || count > 1000000 || index < 0 || index >= count)
        return ef__err_set(&p->err, EF_EINVAL,
                           "shard: part %lld of %lld: expected 0 <= part < "
                           "count <= 1000000",
                           (long long)index, (long long)count);
    if (p->nstages > 0)
        return ef__err_set(&p->err, EF_ESTATE,
                           "shard: set the part before adding the source");
    p->ctx.shard_i = index;
    p->ctx.shard_n = count;
    return EF_OK;
}

ef_status ef_pipeline_bind_map(ef_pipeline *p, const char *name, ef_map_fn fn,
                               void *user)
{
    if (!p || !name || !fn)
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc != EF_OK)
        return rc;
    size_t len = strlen(name);
    if (len == 0 || len >= EF__MAP_NAME_MAX)
        return ef__err_set(&p->err, EF_EINVAL,
                           "bind_map: a map's name has 1 to %d bytes, not "
                           "%zu",
                           EF__MAP_NAME_MAX - 1, len);
    ef__bound_maps *b = &p->bound;
    ef__bound_map *m = NULL;
    for (int i = 0; i < b->n && !m; i++)
        if (strcmp(b->v[i].name, name) == 0)
            m = &b->v[i]; /* bound again: the new callback replaces it */
    if (!m) {
        if (b->n == b->cap) {
            int cap = b->cap ? 2 * b->cap : 4;
            ef__bound_map *v = ef__realloc(b->v, (size_t)cap * sizeof *v);
            if (!v)
                return ef__err_set(&p->err, EF_ENOMEM, "out of memory");
            b->v = v;
            b->cap = cap;
        }
        m = &b->v[b->n++];
        memcpy(m->name, name, len + 1);
    }
    m->fn = fn;
    m->user = user;
    return EF_OK;
}

/* Every name bound for this parse must have been used by a stage of it. */
static int check_bound_used(ef_pipeline *p)
{
    char names[EF__ERR_MAX / 2];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < p->bound.n && used < sizeof names; i++)
        if (!p->bound.v[i].used)
            used +=
                (size_t)snprintf(names + used, sizeof names - used, "%s'%s'",
                                 used ? ", " : "", p->bound.v[i].name);
    if (used)
        return ef__err_set(&p->err, EF_ESPEC,
                           "maps: %s named by no map:fn=NAME stage of the spec",
                           names);
    return EF_OK;
}

ef_status ef_pipeline_parse(ef_pipeline *p, const char *spec)
{
    if (!p || !spec)
        return EF_EINVAL;
    int rc = check_state(p);
    if (rc != EF_OK)
        return rc;
    for (int i = 0; i < p->bound.n; i++)
        p->bound.v[i].used = 0;
    pending pd = {.p = p};
    p->ctx.bound = &p->bound; /* for the map stages this parse creates */
    rc = ef__spec_parse(spec, spec_stage, &pd, &p->err);
    p->ctx.bound = NULL;
    if (rc == EF_OK)
        rc = check_bound_used(p);
    if (rc == EF_OK)
        p->bound.n = 0; /* each parse binds its own */
    return commit(&pd, rc);
}

/* One stage, by registry name or by definition, with an optional C
 * callback: the path every ef_pipeline_add* call takes. */
static int add_one(ef_pipeline *p, const char *name, const ef__stage_def *def,
                   void (*fn)(void), void *user, const char *options)
{
    int rc = check_state(p);
    if (rc != EF_OK)
        return rc;
    pending pd = {.p = p, .fn = fn, .user = user};
    const char *o = options ? options : "";
    return commit(
        &pd, def ? add_def(&pd, def, o, strlen(o), &p->err)
                 : add_stage(&pd, name, strlen(name), o, strlen(o), &p->err));
}

ef_status ef_pipeline_add(ef_pipeline *p, const char *stage, const char *options)
{
    if (!p || !stage)
        return EF_EINVAL;
    return add_one(p, stage, NULL, NULL, NULL, options);
}

ef_status ef_pipeline_add_map(ef_pipeline *p, ef_map_fn fn, void *user,
                        const char *options)
{
    if (!p || !fn)
        return EF_EINVAL;
    return add_one(p, NULL, &ef__stage_map, (void (*)(void))fn, user, options);
}

ef_status ef_pipeline_add_source(ef_pipeline *p, ef_source_fn fn, void *user,
                           const char *options)
{
    if (!p || !fn)
        return EF_EINVAL;
    return add_one(p, NULL, &ef__stage_source, (void (*)(void))fn, user,
                   options);
}

int ef__pipeline_finish(ef_pipeline *p, int status)
{
    atomic_store(&p->final_status, status);
    return status;
}

static int start(ef_pipeline *p)
{
    uint64_t now = ef__timer_ns();
    atomic_store(&p->t_open_ns, now);
    atomic_store(&p->t_start_ns, now);
    atomic_store(&p->t_last_ns, now);
    atomic_store(&p->started, 1);
    if (p->nstages == 0)
        return ef__err_set(&p->err, EF_ESPEC, "the pipeline has no stages");
    for (int i = 0; i < p->nstages; i++) {
        p->stages[i]->pulled_ns = i + 1 < p->nstages
                                      ? &p->stages[i + 1]->wait_up_ns
                                      : &p->consumer_wait.done_ns;
        p->stages[i]->consumer_wait = &p->consumer_wait;
    }
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i]->def->link)
            p->stages[i]->def->link(p->stages[i]);
    for (int i = 0; i < p->nstages; i++) {
        ef__stage *s = p->stages[i];
        if (s->def->open) {
            int rc = s->def->open(s, &p->err);
            if (rc != EF_OK)
                return rc;
        }
    }
    now = ef__timer_ns();
    atomic_store(&p->t_start_ns, now);
    atomic_store(&p->t_last_ns, now);
    ef__tuner_init(&p->tuner, p->stages, p->nstages, now);
    atomic_store(&p->opened, 1);
    return EF_OK;
}

ef_status ef_pipeline_next(ef_pipeline *p, ef_sample **out)
{
    if (!p || !out)
        return EF_EINVAL;
    *out = NULL;
    int done = atomic_load(&p->final_status);
    if (done)
        return done;
    if (ef__ctx_is_cancelled(&p->ctx))
        return ef__pipeline_finish(p, ef__err_set(&p->err, EF_ECANCELED,
                                     "the pipeline was stopped"));
    if (!atomic_load(&p->started)) {
        int rc = start(p);
        if (rc != EF_OK)
            return ef__pipeline_finish(p, rc);
    }
    ef__stage *last = p->stages[p->nstages - 1];
    uint64_t t0 = ef__timer_ns();
    atomic_store_explicit(&p->consumer_wait.since_ns, t0, memory_order_relaxed);
    int rc = last->def->next(last, out, &p->err);
    uint64_t t1 = ef__timer_ns();
    ef__stat_add(&p->consumer_wait.done_ns, ef__elapsed_ns(t0, t1));
    atomic_store_explicit(&p->consumer_wait.since_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&p->t_last_ns, t1, memory_order_relaxed);
    if (rc == EF_OK)
        rc = ef__stage_check_size(last, out, &p->err);
    if (rc == EF_OK) {
        const ef__stage *src = p->stages[0];
        if (src->def->delivered)
            src->def->delivered(p->stages[0], *out);
        ef__stat_add(&p->items, 1);
        ef__stat_add(&last->items_out, 1);
        if (p->tuner.nauto)
            ef__tuner_tick(&p->tuner, p->stages, p->nstages, t1,
                           ef__stat_get(&p->items),
                           ef__stat_get(&p->consumer_wait.done_ns));
        return EF_OK;
    }
    if (rc != EF_END && ef__ctx_is_cancelled(&p->ctx))
        rc = ef__err_set(&p->err, EF_ECANCELED, "the pipeline was stopped");
    if (rc != EF_END && !p->err.msg[0])
        ef__err_set(&p->err, rc, "%s", ef_strerror(rc));
    return ef__pipeline_finish(p, rc);
}

const char *ef_pipeline_error(const ef_pipeline *p)
{
    return p ? p->err.msg : "";
}

/* Stage s's length from its upstream's `up` (see the def's length). */
static int stage_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    if (s->def->length)
        return s->def->length(s, up, n, err);
    if (s->def->is_source)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: the number of items is not known before "
                           "reading them",
                           s->def->info.name);
    *n = up;
    return EF_OK;
}

ef_status ef_pipeline_length(ef_pipeline *p, int64_t *out)
{
    if (!p || !out)
        return EF_EINVAL;
    *out = -1;
    int done = atomic_load(&p->final_status);
    if (done < 0)
        return done;
    if (p->nstages == 0)
        return ef__err_set(&p->err, EF_ESPEC, "the pipeline has no stages");
    int64_t n = 0;
    ef__err err, endless; /* why the first stage that never ends does not */
    ef__err_clear(&endless);
    for (int i = 0; i < p->nstages; i++) {
        int64_t up = n;
        ef__err_clear(&err);
        int rc = stage_length(p->stages[i], up, &n, &err);
        if (rc == EF_EUNSUPPORTED) {
            p->err = err;
            return rc;
        }
        if (rc != EF_OK) { /* a source could not be read: as at open */
            p->err = err;
            atomic_store(&p->started, 1);
            return ef__pipeline_finish(p, rc);
        }
        assert(n >= 0 || n == EF__LENGTH_ENDLESS);
        if (n == EF__LENGTH_ENDLESS && up != EF__LENGTH_ENDLESS)
            endless = err;
    }
    if (n == EF__LENGTH_ENDLESS) {
        p->err = endless;
        p->err.status = EF_EUNSUPPORTED;
        return EF_EUNSUPPORTED;
    }
    *out = n;
    return EF_OK;
}

ef_status ef_pipeline_feedback(ef_pipeline *p, const ef_sample_id *ids,
                               const double *values, size_t n)
{
    if (!p || (n && (!ids || !values)))
        return EF_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(values[i]))
            return EF_EINVAL;
    /* the stage list is fixed once the pipeline runs */
    for (int i = 0; i < p->nstages; i++)
        if (p->stages[i]->def->feedback)
            p->stages[i]->def->feedback(p->stages[i], ids, values, n);
    return EF_OK;
}

int ef_pipeline_wants_feedback(const ef_pipeline *p, char *buf, size_t cap)
{
    const char *what = NULL;
    for (int i = 0; p && !what && i < p->nstages; i++)
        if (p->stages[i]->def->listens)
            what = p->stages[i]->def->listens(p->stages[i]);
    if (buf && cap)
        snprintf(buf, cap, "%s", what ? what : "uniform");
    return what != NULL;
}

/* Copies the first `size` bytes of `all` to `out`, zero past its end: the
 * caller's struct may be older (smaller) or newer (larger) than ours. */
static void copy_sized(void *out, size_t size, const void *all, size_t n)
{
    memcpy(out, all, size < n ? size : n);
    if (size > n)
        memset((char *)out + n, 0, size - n);
}

static void pipeline_stats(const ef_pipeline *p, ef_pipeline_stats *out)
{
    memset(out, 0, sizeof *out);
    out->items = ef__stat_get(&p->items);
    ef__ctx *ctx = &((ef_pipeline *)p)->ctx;
    out->skipped = atomic_load(&ctx->skipped);
    out->abandoned = atomic_load(&ctx->abandoned);
    out->lost_bytes = atomic_load(&ctx->lost_bytes);
    out->memory_budget = ctx->budget.limit;
    out->bytes_held = atomic_load(&ctx->budget.held);
    out->peak_bytes_held = atomic_load(&ctx->budget.peak);
    ef_pipeline *q = (ef_pipeline *)p; /* atomics are read, not changed */
    if (!atomic_load(&q->started))
        return;
    /* while running, elapsed time runs to now; once ended, to the last
     * next(), so time spent after the end is not counted */
    uint64_t end = atomic_load(&q->final_status) ? atomic_load(&q->t_last_ns)
                                                 : ef__timer_ns();
    uint64_t t_start = atomic_load(&q->t_start_ns);
    out->startup_s =
        ef__ns_to_s(ef__elapsed_ns(atomic_load(&q->t_open_ns), t_start));
    out->elapsed_s = ef__ns_to_s(ef__elapsed_ns(t_start, end));
    out->consumer_wait_s = ef__ns_to_s(ef__stat_get(&p->consumer_wait.done_ns));
    out->consumer_wait_fraction =
        out->elapsed_s > 0 ? out->consumer_wait_s / out->elapsed_s : 0;
}

ef_status ef_pipeline_stats_get_sized(const ef_pipeline *p,
                                      ef_pipeline_stats *out, size_t size)
{
    if (!p || !out || !size)
        return EF_EINVAL;
    ef_pipeline_stats all;
    pipeline_stats(p, &all);
    copy_sized(out, size, &all, sizeof all);
    return EF_OK;
}

int ef_pipeline_stage_count(const ef_pipeline *p)
{
    return p ? p->nstages : 0;
}

static void stage_stats(const ef_pipeline *p, const ef__stage *s,
                        ef_stage_stats *out)
{
    memset(out, 0, sizeof *out);
    out->name = s->def->info.name;
    out->items_in = ef__stat_get(&s->items_in);
    out->items_out = ef__stat_get(&s->items_out);
    out->wait_up_s = ef__ns_to_s(ef__stat_get(&s->wait_up_ns));
    out->wait_down_s = ef__ns_to_s(ef__stat_get(&s->wait_down_ns));
    out->skipped = atomic_load(&((ef__stage *)s)->skipped);
    out->abandoned = atomic_load(&((ef__stage *)s)->abandoned);
    out->lost_bytes = atomic_load(&((ef__stage *)s)->lost_bytes);
    out->threads = atomic_load(&((ef__stage *)s)->threads_now);
    out->depth = atomic_load(&((ef__stage *)s)->depth_now);
    /* a stage's own figures only once it is open: open() sets up what
     * they read */
    if (s->def->stats && atomic_load(&((ef_pipeline *)p)->opened))
        s->def->stats(s, out);
}

ef_status ef_pipeline_stage_stats_sized(const ef_pipeline *p, int i,
                                        ef_stage_stats *out, size_t size)
{
    if (!p || !out || !size || i < 0 || i >= p->nstages)
        return EF_EINVAL;
    ef_stage_stats all;
    stage_stats(p, p->stages[i], &all);
    copy_sized(out, size, &all, sizeof all);
    return EF_OK;
}
