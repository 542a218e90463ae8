/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by every stage: timed pulls, resets, keyed RNG, creation,
 * cancellable sleeps. */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "core/sample.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"

/* After a restore: the next item the stage had taken from its upstream,
 * made again; EF_AGAIN when none is left. */
static int replay_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    ef__idents *l = s->replay;
    while (l && l->at < l->n) {
        ef__ident *d = &l->items[l->at];
        int rc = ef__stage_fetch(s->up, d, out, err);
        if (rc != EF_OK)
            return rc;
        l->at++;
        ef__ident_clear(d);
        if (*out) { /* NULL: dropped again under on_error=skip */
            ef__stat_add(&s->items_in, 1);
            return EF_OK;
        }
    }
    return EF_AGAIN;
}

int ef__stage_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                    ef__err *err)
{
    *out = NULL;
    if (s->def->fetch)
        return s->def->fetch(s, d, out, err);
    if (!s->up)
        return ef__err_set(err, EF_EUNSUPPORTED,
                           "%s: cannot read an item again by its identity",
                           s->def->info.name);
    return ef__stage_fetch(s->up, d, out, err);
}

int ef__stage_check_size(const ef__stage *from, ef_sample **smp, ef__err *err)
{
    const ef__budget *b = &from->ctx->budget;
    if (!b->limit)
        return EF_OK; /* no budget: nothing to measure */
    uint64_t n = ef__sample_bytes(*smp);
    if (ef__budget_fits(b, n))
        return EF_OK;
    char what[96];
    snprintf(what, sizeof what, "%s: sample %lld", from->def->info.name,
             (long long)ef_sample_identity(*smp).index);
    ef_sample_free(*smp);
    *smp = NULL;
    return ef__budget_check(b, n, what, err);
}

/* What a pull or poll gives before it asks the upstream: an item replayed
 * after a restore, or the end once the upstream has ended; EF_AGAIN when
 * the upstream is to be asked. */
static int before_upstream(ef__stage *s, ef_sample **out, ef__err *err)
{
    *out = NULL;
    if (s->replay) {
        int rc = replay_next(s, out, err);
        if (rc == EF_OK)
            rc = ef__stage_check_size(s->up, out, err);
        if (rc != EF_AGAIN)
            return rc;
    }
    return s->ended ? EF_END : EF_AGAIN;
}

/* The next item from upstream: its next() (blocking) or poll(). Time
 * counts as waiting on the upstream unless a poll found nothing. */
static inline int take_upstream(ef__stage *s, int poll, ef_sample **out,
                                ef__err *err)
{
    int rc = before_upstream(s, out, err);
    if (rc != EF_AGAIN)
        return rc;
    uint64_t t0 = ef__timer_ns();
    rc = poll ? s->up->def->poll(s->up, out, err)
              : s->up->def->next(s->up, out, err);
    if (rc == EF_OK || !poll)
        ef__stat_add(&s->wait_up_ns, ef__elapsed_ns(t0, ef__timer_ns()));
    if (rc == EF_OK) {
        ef__stat_add(&s->items_in, 1);
        ef__stat_add(&s->up->items_out, 1);
        rc = ef__stage_check_size(s->up, out, err);
    } else if (rc == EF_END) {
        s->ended = 1;
    }
    return rc;
}

int ef__stage_pull(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take_upstream(s, 0, out, err);
}

int ef__stage_poll(ef__stage *s, ef_sample **out, ef__err *err)
{
    return take_upstream(s, 1, out, err);
}

int ef__stage_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    s->epoch = epoch;
    /* `ended` is also read by a stage's own threads (a pump, map workers):
     * a stage with a reset of its own clears it once they are stopped, in
     * ef__stage_reset_upstream */
    if (s->def->reset)
        return s->def->reset(s, epoch, err);
    return ef__stage_reset_upstream(s, epoch, err);
}

/* What a restore left to take again belongs to the pass that ends. */
static void replay_drop(ef__stage *s)
{
    if (s->replay) {
        ef__idents_free(s->replay);
        ef__free(s->replay);
        s->replay = NULL;
    }
}

int ef__stage_reset_upstream(ef__stage *s, int64_t epoch, ef__err *err)
{
    s->ended = 0;
    replay_drop(s);
    return s->up ? ef__stage_reset(s->up, epoch, err) : EF_OK;
}

int ef__stage_stopped(const ef__stage *s, ef__err *err)
{
    return ef__err_set(err, EF_ECANCELED, "%s: the pipeline was stopped",
                       s->def->info.name);
}

/* A sample's __key__ as text for a message: the first 80 bytes, anything
 * unprintable shown as '?'; "" when it has none. */
static void key_text(const ef_sample *smp, char *buf, size_t cap)
{
    ef_tensor t;
    buf[0] = '\0';
    if (smp->origin.members || /* a batch: its keys run together */
        ef_sample_get(smp, "__key__", &t) != EF_OK || t.dtype != EF_U8 ||
        t.ndim != 1 || cap < 4)
        return;
    size_t n = t.nbytes < 80 ? t.nbytes : 80;
    if (n > cap - 4)
        n = cap - 4;
    const unsigned char *k = t.data;
    for (size_t i = 0; i < n; i++)
        buf[i] = k[i] >= 0x20 && k[i] < 0x7f ? (char)k[i] : '?';
    strcpy(buf + n, n < t.nbytes ? "..." : "");
}

void ef__stage_where(const ef__stage *s, const ef_sample *smp, char *buf,
                     size_t cap)
{
    const ef__stage *src = s;
    while (src->up)
        src = src->up;
    /* a batch's part is its first example's: no one file to name */
    const char *part = !smp->origin.members && src->def->part_name
                           ? src->def->part_name(src, smp->origin.part)
                           : NULL;
    char key[96], fit[EF__ERR_MAX / 2];
    key_text(smp, key, sizeof key);
    /* a long path keeps its tail, which names the file, and leaves room
     * for the key */
    if (part && cap >= 8) {
        ef__err_fit(fit, cap / 2 < sizeof fit ? cap / 2 : sizeof fit, part);
        part = fit;
    }
    /* the item's place in the file named beside it, not the identity
     * that holds the file's number too (4294967673 for item 377 of the
     * second file) */
    int64_t index = smp->id.index;
    if (part && src->def->index_in_part)
        index &= ((int64_t)1 << 32) - 1;
    int n = snprintf(buf, cap, "item %lld (epoch %lld)", (long long)index,
                     (long long)smp->id.epoch);
    if (part && n >= 0 && (size_t)n < cap)
        n += snprintf(buf + n, cap - (size_t)n, ", file '%s'", part);
    if (key[0] && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, ", key '%s'", key);
}

void ef__stage_rng(const ef__stage *s, ef__rng *r, ef_sample_id id)
{
    ef__rng_init(r, s->ctx->seed, (uint64_t)s->index, id.index, id.epoch,
                 id.echo_copy);
}

void ef__shard_shuffle(const ef__stage *s, int64_t epoch, int64_t *order,
                       size_t n)
{
    ef__rng rng;
    ef__rng_init(&rng, s->ctx->seed, (uint64_t)s->index, -1, epoch, 0);
    for (size_t i = n > 1 ? n - 1 : 0; i > 0; i--) {
        size_t j = (size_t)ef__rng_below(&rng, i + 1);
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

int ef__shard_parse(const ef__stage *s, const ef__opts *o, ef__shard *out,
                    ef__err *err)
{
    const char *text = ef__opt_string(o, "shard");
    long long i, n;
    int used = 0;
    const ef__ctx *ctx = s->ctx;
    if (ctx->shard_n > 0) {
        if (strcmp(text, "0/1") != 0)
            return ef__err_set(err, EF_ESPEC,
                               "stage '%s': shard=%s, but the pipeline "
                               "reads part %lld of %lld already; give one "
                               "or the other",
                               s->def->info.name, text,
                               (long long)ctx->shard_i,
                               (long long)ctx->shard_n);
        out->i = ctx->shard_i;
        out->n = ctx->shard_n;
        return EF_OK;
    }
    if (sscanf(text, "%lld/%lld%n", &i, &n, &used) != 2 ||
        (size_t)used != strlen(text) || n < 1 || n > 1000000 || i < 0 || i >= n)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'shard' must be I/N with "
                           "0 <= I < N <= 1000000 (got '%s')",
                           s->def->info.name, text);
    out->i = i;
    out->n = n;
    return EF_OK;
}

int64_t ef__shard_count(const ef__shard *sh, int64_t records)
{
    assert(sh->n >= 1 && sh->i >= 0 && sh->i < sh->n);
    return records > sh->i ? (records - sh->i - 1) / sh->n + 1 : 0;
}

/* Whether the policy lets the failure in err be passed over. */
static int skippable(ef__ctx *ctx, const ef__err *err)
{
    int about_data = err->status == EF_EFORMAT || err->status == EF_EIO ||
                     err->status == EF_ESHAPE || err->status == EF_ECALLBACK;
    return ctx->skip_bad && about_data && !ef__ctx_is_cancelled(ctx);
}

int ef__stage_skip(ef__stage *s, ef__err *err)
{
    ef__ctx *ctx = s->ctx;
    if (!skippable(ctx, err))
        return 0;
    atomic_fetch_add_explicit(&s->skipped, 1, memory_order_relaxed);
    pthread_mutex_lock(&ctx->skip_mu);
    uint64_t n = atomic_load(&ctx->skipped);
    if (n < EF_SKIPS_KEPT)
        memcpy(ctx->skip_msgs[n], err->msg, sizeof ctx->skip_msgs[n]);
    atomic_store(&ctx->skipped, n + 1);
    pthread_mutex_unlock(&ctx->skip_mu);
    ef__err_clear(err);
    return 1;
}

int ef__stage_abandon(ef__stage *s, ef__err *err, const char *part,
                      uint64_t at, int64_t size)
{
    ef__ctx *ctx = s->ctx;
    if (!skippable(ctx, err))
        return 0;
    uint64_t lost = size >= 0 && (uint64_t)size > at ? (uint64_t)size - at : 0;
    atomic_fetch_add_explicit(&s->abandoned, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->abandoned, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->lost_bytes, lost, memory_order_relaxed);
    atomic_fetch_add_explicit(&ctx->lost_bytes, lost, memory_order_relaxed);
    char where[160];
    if (size >= 0)
        snprintf(where, sizeof where, "%s abandoned at byte %llu of %lld",
                 part, (unsigned long long)at, (long long)size);
    else
        snprintf(where, sizeof where,
                 "%s abandoned at byte %llu (its size is unknown)", part,
                 (unsigned long long)at);
    pthread_mutex_lock(&ctx->skip_mu);
    if (!ctx->abandon_msg[0])
        snprintf(ctx->abandon_msg, sizeof ctx->abandon_msg, "%.*s; %s",
                 (int)(sizeof ctx->abandon_msg - sizeof where - 3), err->msg,
                 where);
    pthread_mutex_unlock(&ctx->skip_mu);
    ef__err_clear(err);
    return 1;
}

void ef__warn(ef__ctx *ctx, const char *fmt, ...)
{
    pthread_mutex_lock(&ctx->skip_mu);
    uint64_t n = atomic_load(&ctx->warned);
    if (n < EF_WARNINGS_KEPT) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->warnings[n], sizeof ctx->warnings[n], fmt, ap);
        va_end(ap);
    }
    /* after the text: a reader that sees the count finds it (and takes
     * the lock to copy it anyway) */
    atomic_store(&ctx->warned, n + 1);
    pthread_mutex_unlock(&ctx->skip_mu);
}

void ef__stats_extra(ef_stage_stats *st, const char *key, double value)
{
    /* a stage with more figures needs a larger EF_MAX_STAT_EXTRAS (an ABI
       change): debug builds say so, others drop the figure */
    assert(st->nextra < EF_MAX_STAT_EXTRAS);
    if (st->nextra < EF_MAX_STAT_EXTRAS) {
        st->extra[st->nextra].key = key;
        st->extra[st->nextra].value = value;
        st->nextra++;
    }
}

int ef_stage_stats_extra(const ef_stage_stats *st, const char *key,
                         double *value)
{
    for (int i = 0; i < st->nextra; i++) {
        if (strcmp(st->extra[i].key, key) == 0) {
            *value = st->extra[i].value;
            return 1;
        }
    }
    return 0;
}

int ef__stage_create(ef__stage **out, const ef__stage_def *def,
                     const char *opts, size_t len, ef__ctx *ctx,
                     void (*fn)(void), void *user, ef__err *err)
{
    *out = NULL;
    ef__stage *s = ef__calloc(1, sizeof *s);
    if (!s)
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    s->def = def;
    s->ctx = ctx;
    s->user_fn = fn;
    s->user_data = user;
    int rc = ef__opts_parse(&s->opts, def, opts ? opts : "", len, err);
    if (rc == EF_OK)
        rc = def->create(s, &s->opts, err);
    if (rc != EF_OK) {
        ef__stage_free(s); /* destroy() also frees a partial state */
        return rc;
    }
    *out = s;
    return EF_OK;
}

void *ef__stage_new_state(ef__stage *s, size_t size, ef__err *err)
{
    s->state = ef__calloc(1, size);
    if (!s->state)
        ef__err_set(err, EF_ENOMEM, "%s: out of memory", s->def->info.name);
    return s->state;
}

void ef__stage_free(ef__stage *s)
{
    if (!s)
        return;
    if (s->state && s->def->destroy)
        s->def->destroy(s);
    replay_drop(s);
    ef__opts_free(&s->opts);
    ef__free(s);
}

int ef__ctx_is_cancelled(ef__ctx *ctx)
{
    return atomic_load_explicit(&ctx->cancelled, memory_order_acquire);
}

const ef__bound_map *ef__ctx_use_map(ef__ctx *ctx, const char *name)
{
    for (int i = 0; ctx->bound && i < ctx->bound->n; i++)
        if (strcmp(ctx->bound->v[i].name, name) == 0) {
            ctx->bound->v[i].used = 1;
            return &ctx->bound->v[i];
        }
    return NULL;
}

int ef__ctx_sleep_until(ef__ctx *ctx, uint64_t deadline_ns)
{
    struct timespec ts = ef__ns_to_timespec(deadline_ns);
    int rc = EF_OK;
    pthread_mutex_lock(&ctx->mu);
    for (;;) {
        if (ef__ctx_is_cancelled(ctx)) {
            rc = EF_ECANCELED;
            break;
        }
        if (pthread_cond_timedwait(&ctx->cond, &ctx->mu, &ts) == ETIMEDOUT)
            break;
    }
    pthread_mutex_unlock(&ctx->mu);
    return rc;
}
