/* SPDX-License-Identifier: Apache-2.0 */
/* The echo stage's checkpoints: what it holds, saved by identity and read
 * again from its upstream on restore (state.h). */
#include <math.h>
#include <string.h>

#include "pipeline/state.h"
#include "stages/flow/echo_stage.h"

void ef__echo_pause(ef__stage *s)
{
    ef__echo_state *st = s->state;
    if (st->pump)
        ef__feed_pause(st->pump);
}

void ef__echo_resume(ef__stage *s)
{
    ef__echo_state *st = s->state;
    if (st->pump)
        ef__feed_resume(st->pump);
}

/* Fixed: the copies still due of the held item. Auto or a policy: the
 * pool, oldest first, with each item's uses (and values fed back), the
 * draws made (and the echoes due). All: the copy spreading buffer. The
 * pump's queue is the replay list. */
int ef__echo_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    ef__echo_state *st = s->state;
    if (!st->pool) {
        ef__put_i64(o, st->copies_left);
        ef__put_i64(o, st->next_copy);
        if (st->copies_left > 0) {
            ef__ident d = ef__ident_of(st->held);
            ef__put_ident(o, &d);
            ef__ident_clear(&d);
        }
    } else {
        ef__echo_pool_save(st->pool, o);
        if (st->policy && st->mode == EF__ECHO_FIXED) {
            uint64_t owed;
            memcpy(&owed, &st->owed, sizeof owed);
            ef__put_u64(o, owed);
        }
    }
    if (st->shuffle) {
        ef__put_u64(o, st->rng.counter);
        ef__shufbuf_save(&st->buf, o);
    }
    return st->pump ? ef__feed_save(st->pump, o, err) : EF_OK;
}

/* The upstream's item of identity d, as the fresh item it was. */
static int fetch_fresh(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    ef__ident fresh = *d;
    fresh.id.echo_copy = 0;
    int rc = ef__stage_fetch(s->up, &fresh, out, err);
    if (rc == EF_OK && !*out)
        rc = ef__err_set(err, EF_EFORMAT,
                         "echo: item %lld (epoch %lld) of the state could "
                         "not be read again",
                         (long long)d->id.index, (long long)d->id.epoch);
    return rc;
}

/* Our output of identity d: the fresh item, numbered as that copy. */
int ef__echo_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                   ef__err *err)
{
    int rc = fetch_fresh(s, d, out, err);
    if (rc == EF_OK && d->id.echo_copy > 0)
        ef__echo_mark_copy(*out, d->id.echo_copy);
    return rc;
}

static int restore_fixed(ef__stage *s, ef__echo_state *st, ef__state_in *in,
                         ef__err *err)
{
    int64_t left, next;
    ef__get_i64(in, "copies still due", &left);
    int rc = ef__get_i64(in, "the next copy's number", &next);
    if (rc == EF_OK && (left < 0 || left > ceil(st->factor) || next < 0 ||
                        next > ceil(st->factor)))
        return ef__state_bad(in,
                             "%lld copies due from copy %lld, expected at "
                             "most the factor %g",
                             (long long)left, (long long)next, st->factor);
    if (rc != EF_OK || left == 0)
        return rc;
    ef__ident d;
    if ((rc = ef__get_ident(in, "the item being echoed", &d)) != EF_OK)
        return rc;
    rc = fetch_fresh(s, &d, &st->held, err);
    ef__ident_clear(&d);
    if (rc != EF_OK)
        return rc;
    if (left > 1) /* the references of the copies before the last */
        ef__sample_refs_add(st->held, (unsigned)(left - 1));
    st->copies_left = (int)left;
    st->next_copy = (int)next;
    return EF_OK;
}

/* fetch_fresh as the pool restores its items: arg is the stage. */
static int fetch_pooled(void *arg, const ef__ident *d, ef_sample **out,
                        ef__err *err)
{
    return fetch_fresh(arg, d, out, err);
}

static int restore_pool(ef__stage *s, ef__echo_state *st, ef__state_in *in,
                        ef__err *err)
{
    int rc = ef__echo_pool_restore(st->pool, in, fetch_pooled, s, err);
    if (rc == EF_OK && st->policy && st->mode == EF__ECHO_FIXED) {
        uint64_t bits;
        rc = ef__get_u64(in, "the echoes due", &bits);
        memcpy(&st->owed, &bits, sizeof bits);
        if (rc == EF_OK && !(st->owed >= 0 && st->owed < st->factor))
            return ef__state_bad(in,
                                 "%g echoes due, expected 0 to the "
                                 "factor %g",
                                 st->owed, st->factor);
    }
    return rc;
}

int ef__echo_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    ef__echo_state *st = s->state;
    int rc =
        st->pool ? restore_pool(s, st, in, err) : restore_fixed(s, st, in, err);
    if (rc == EF_OK && st->shuffle) {
        ef__rng_init(&st->rng, s->ctx->seed, (uint64_t)s->index, -1, s->epoch,
                     0);
        st->restored = 1;
        rc = ef__get_u64(in, "the generator's counter", &st->rng.counter);
        if (rc == EF_OK)
            rc = ef__shufbuf_restore(&st->buf, in, s, err);
        if (rc == EF_OK && st->buf.n > 0)
            st->passing = 1; /* filled before the save */
    }
    return rc;
}
