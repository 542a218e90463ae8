/* SPDX-License-Identifier: Apache-2.0 */
/* echo_pool: the echo stage's pool of recent fresh items, its use lists
 * and picks, and their checkpoints (echo_pool.h). */
#include "stages/flow/echo_pool.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "core/sample.h"
#include "pipeline/stage.h"

typedef struct {
    ef_sample *sample; /* a header of our own, sharing the payload */
    int uses;          /* times emitted so far, fresh included */
    size_t pos;        /* index in by_uses[uses].items */
} pooled;

/* The pooled items used u times: an array that grows and shrinks with its
 * count, so all lists together take memory in proportion to the pool. */
typedef struct {
    size_t *items;
    size_t n, cap;
} use_list;

struct ef__echo_pool {
    pooled *slots;
    size_t cap, n, next; /* ring: next is the oldest */
    int max;             /* uses per item at most */
    uint64_t bytes;      /* payload the pool keeps alive (memory budget) */
    /* by_uses[u] lists the pooled items used u times (u < max), so the
     * least-used are found without scanning the pool */
    use_list *by_uses;
    int least;                /* no list below this one is non-empty */
    uint64_t draws;           /* RNG counter for picks */
    ef__policy *policy;       /* borrowed; NULL for uniform */
    double mix;               /* the share of picks among the least-echoed */
    ef__sample_pool *headers; /* borrowed: where our headers come from */
    ef__budget *budget;       /* borrowed */
};

ef__echo_pool *ef__echo_pool_new(size_t cap, int max, ef__policy *policy,
                                 double mix, ef__sample_pool *headers,
                                 ef__budget *budget)
{
    assert(cap > 0 && max > 0);
    ef__echo_pool *p = ef__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->slots = ef__calloc(cap, sizeof *p->slots);
    p->by_uses = ef__calloc((size_t)max, sizeof *p->by_uses);
    if (!p->slots || !p->by_uses) {
        ef__free(p->by_uses);
        ef__free(p->slots);
        ef__free(p);
        return NULL;
    }
    p->cap = cap;
    p->max = max;
    p->least = max;
    p->policy = policy;
    p->mix = mix;
    p->headers = headers;
    p->budget = budget;
    return p;
}

void ef__echo_pool_free(ef__echo_pool *p)
{
    if (!p)
        return;
    ef__echo_pool_clear(p);
    ef__free(p->by_uses);
    ef__free(p->slots);
    ef__free(p);
}

/* Room for one more item in list u; -1 when out of memory. */
static int list_reserve(ef__echo_pool *p, int u)
{
    use_list *l = &p->by_uses[u];
    if (u >= p->max || l->n < l->cap)
        return 0;
    size_t *items = ef__grow(l->items, &l->cap, 8, sizeof *items);
    if (!items)
        return -1;
    l->items = items;
    return 0;
}

static void list_add(ef__echo_pool *p, size_t i)
{
    pooled *it = &p->slots[i];
    if (it->uses >= p->max) {
        if (p->policy)
            ef__policy_retire(p->policy, i);
        return; /* used up: in no list */
    }
    use_list *l = &p->by_uses[it->uses];
    assert(l->n < l->cap); /* reserved by the caller */
    it->pos = l->n++;
    l->items[it->pos] = i;
    if (it->uses < p->least)
        p->least = it->uses;
}

static void list_remove(ef__echo_pool *p, size_t i)
{
    pooled *it = &p->slots[i];
    if (it->uses >= p->max)
        return;
    use_list *l = &p->by_uses[it->uses];
    size_t last = l->items[--l->n];
    l->items[it->pos] = last;
    p->slots[last].pos = it->pos;
    if (l->n == 0) {
        ef__free(l->items);
        l->items = NULL;
        l->cap = 0;
    } else if (l->n < l->cap / 4) {
        size_t *items = ef__realloc(l->items, l->cap / 2 * sizeof *items);
        if (items) { /* a failed shrink keeps the larger array */
            l->items = items;
            l->cap /= 2;
        }
    }
}

/* Forgets pooled sample i, giving its bytes back to the budget. */
static void drop(ef__echo_pool *p, size_t i)
{
    ef_sample *smp = p->slots[i].sample;
    if (!smp)
        return;
    uint64_t n = ef__sample_bytes(smp);
    p->bytes -= n;
    ef__budget_release(p->budget, n);
    ef_sample_free(smp);
    p->slots[i].sample = NULL;
    if (p->policy)
        ef__policy_leave(p->policy, i);
}

void ef__echo_pool_clear(ef__echo_pool *p)
{
    for (size_t k = 0; k < p->n; k++)
        drop(p, (p->next + k) % p->cap);
    p->n = p->next = 0;
    for (int u = 1; u < p->max; u++) {
        ef__free(p->by_uses[u].items);
        memset(&p->by_uses[u], 0, sizeof p->by_uses[u]);
    }
    p->least = p->max;
}

int ef__echo_pool_add(ef__echo_pool *p, const ef_sample *fresh, ef__err *err)
{
    uint64_t n = ef__sample_bytes(fresh);
    ef_sample *own = ef__sample_pool_clone(p->headers, fresh);
    if (!own)
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    size_t i;
    if (p->n < p->cap) {
        i = (p->next + p->n++) % p->cap;
    } else {
        i = p->next;
        p->next = (p->next + 1) % p->cap;
        list_remove(p, i);
        drop(p, i);
    }
    int rc = EF_OK;
    if (!ef__budget_fits(p->budget, p->bytes + n)) {
        char what[64];
        snprintf(what, sizeof what, "echo: its pool at %zu samples", p->n);
        rc = ef__budget_check(p->budget, p->bytes + n, what, err);
    }
    /* reserve after the eviction, which may have shrunk list 1 */
    if (rc == EF_OK && list_reserve(p, 1) != 0)
        rc = ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    if (rc != EF_OK) {
        /* leave the slot empty and used up: in no list, never picked */
        p->slots[i].sample = NULL;
        p->slots[i].uses = p->max;
        ef_sample_free(own);
        return rc;
    }
    p->bytes += n;
    ef__budget_hold(p->budget, n);
    p->slots[i].sample = own;
    p->slots[i].uses = 1;
    if (p->policy)
        ef__policy_enter(p->policy, i, own->id);
    list_add(p, i);
    return EF_OK;
}

/* By the policy's priorities, or (uniform, and the mix share of a
 * policy's picks) at random among the least used. */
int ef__echo_pool_pick(ef__echo_pool *p, const ef__stage *s,
                       const ef_sample **smp, int *uses)
{
    while (p->least < p->max && p->by_uses[p->least].n == 0)
        p->least++;
    if (p->least >= p->max)
        return EF_AGAIN;
    ef__rng r;
    ef__rng_init(&r, s->ctx->seed, (uint64_t)s->index, (int64_t)p->draws++,
                 s->epoch, 0);
    size_t i;
    if (p->policy && ef__rng_uniform(&r) >= p->mix) {
        if (ef__policy_pick(p->policy, ef__rng_uniform(&r), &i) != 0)
            return EF_AGAIN; /* not reached: the lists hold eligible ones */
    } else {
        use_list *l = &p->by_uses[p->least];
        i = l->items[ef__rng_below(&r, l->n)];
    }
    if (list_reserve(p, p->slots[i].uses + 1) != 0)
        return EF_ENOMEM;
    list_remove(p, i);
    p->slots[i].uses++;
    list_add(p, i);
    *smp = p->slots[i].sample;
    *uses = p->slots[i].uses;
    return EF_OK;
}

/* ---- checkpoints ---------------------------------------------------- */

void ef__echo_pool_save(const ef__echo_pool *p, ef__state_out *o)
{
    ef__put_u64(o, p->draws);
    if (p->policy) /* picks depend on where items sit */
        ef__put_u64(o, p->next);
    ef__put_u64(o, p->n);
    for (size_t k = 0; k < p->n; k++) {
        size_t i = (p->next + k) % p->cap;
        const pooled *it = &p->slots[i];
        ef__put_i64(o, it->sample ? it->uses : -1);
        if (it->sample) {
            ef__ident d = ef__ident_of(it->sample);
            ef__put_ident(o, &d);
            ef__ident_clear(&d);
            if (p->policy) {
                /* uniform picks index the lists: keep their order */
                if (it->uses < p->max)
                    ef__put_u64(o, it->pos);
                ef__policy_save_slot(p->policy, i, o);
            }
        }
    }
    if (p->policy)
        ef__policy_save(p->policy, o);
}

/* Puts item smp, used `uses` times, at the pool's newest place. */
static int put(ef__echo_pool *p, ef_sample *smp, int uses, ef__err *err)
{
    uint64_t n = ef__sample_bytes(smp);
    if (!ef__budget_fits(p->budget, p->bytes + n)) {
        ef_sample_free(smp);
        return ef__budget_check(p->budget, p->bytes + n, "echo: its pool", err);
    }
    if (list_reserve(p, uses) != 0) {
        ef_sample_free(smp);
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    }
    size_t i = (p->next + p->n++) % p->cap;
    p->bytes += n;
    ef__budget_hold(p->budget, n);
    p->slots[i].sample = smp;
    p->slots[i].uses = uses;
    if (p->policy)
        ef__policy_enter(p->policy, i, smp->id);
    list_add(p, i);
    return EF_OK;
}

/* Puts every use list's items back at their saved places, want[slot]. */
static int lists_reorder(ef__echo_pool *p, const size_t *want, size_t *tmp,
                         ef__state_in *in)
{
    for (int u = 1; u < p->max; u++) {
        use_list *l = &p->by_uses[u];
        for (size_t k = 0; k < l->n; k++)
            tmp[k] = SIZE_MAX;
        for (size_t k = 0; k < l->n; k++) {
            size_t i = l->items[k];
            if (want[i] >= l->n || tmp[want[i]] != SIZE_MAX)
                return ef__state_bad(in,
                                     "pooled items used %d times are "
                                     "not in a valid order",
                                     u);
            tmp[want[i]] = i;
        }
        for (size_t k = 0; k < l->n; k++) {
            l->items[k] = tmp[k];
            p->slots[tmp[k]].pos = k;
        }
    }
    return EF_OK;
}

int ef__echo_pool_restore(ef__echo_pool *p, ef__state_in *in,
                          ef__echo_pool_fetch fetch, void *arg, ef__err *err)
{
    uint64_t n, next = 0;
    ef__get_u64(in, "the pool's draws", &p->draws);
    if (p->policy)
        ef__get_count(in, "the pool's oldest place", p->cap - 1, &next);
    p->next = (size_t)next;
    /* a policy's saved places in the use lists, and room to sort them */
    size_t *want = NULL;
    if (p->policy && !(want = ef__calloc(2 * p->cap, sizeof *want)))
        return ef__err_set(err, EF_ENOMEM, "echo: out of memory");
    int rc = ef__get_count(in, "the pool's items", p->cap, &n);
    for (uint64_t k = 0; k < n && rc == EF_OK; k++) {
        int64_t uses;
        if ((rc = ef__get_i64(in, "a pooled item's uses", &uses)) != EF_OK)
            break;
        if (uses == -1) { /* a slot left empty and used up */
            size_t i = (p->next + p->n++) % p->cap;
            p->slots[i].sample = NULL;
            p->slots[i].uses = p->max;
            continue;
        }
        if (uses < 1 || uses > p->max) {
            rc = ef__state_bad(in,
                               "a pooled item used %lld times, expected "
                               "1 to max=%d",
                               (long long)uses, p->max);
            break;
        }
        ef__ident d;
        ef_sample *smp;
        if ((rc = ef__get_ident(in, "a pooled item", &d)) != EF_OK)
            break;
        rc = fetch(arg, &d, &smp, err);
        ef__ident_clear(&d);
        if (rc == EF_OK)
            rc = put(p, smp, (int)uses, err);
        size_t i = (p->next + p->n - 1) % p->cap;
        uint64_t at = 0;
        if (rc == EF_OK && p->policy && uses < p->max)
            rc = ef__get_count(in, "a pooled item's place", p->cap, &at);
        if (rc == EF_OK && p->policy) {
            want[i] = (size_t)at;
            rc = ef__policy_restore_slot(p->policy, i, in);
        }
    }
    if (rc == EF_OK && p->policy)
        rc = lists_reorder(p, want, want + p->cap, in);
    ef__free(want);
    if (rc == EF_OK && p->policy)
        rc = ef__policy_restore(p->policy, in);
    return rc;
}
