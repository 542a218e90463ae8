/* SPDX-License-Identifier: Apache-2.0 */
/* echo_policy: priorities over the echo pool from fed-back values.
 *
 * Priorities live in a Fenwick (binary indexed) tree over the slots, so
 * changing one and drawing in proportion to all cost O(log n). The tree
 * holds integers (priorities in units of 2^-24): their sums are exact
 * whatever the order of the changes, so a pool restored from a checkpoint
 * draws exactly as the saved one would have. Identities find their slot
 * through an open-addressing hash table (linear probing). */
#include "stages/flow/echo_policy.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

/* priorities in the tree: units of 2^-24, at most 1e4 each, so that a
 * pool of 2^20 slots sums below 2^63 */
#define UNITS 16777216.0
#define MOST 1e4

typedef struct {
    int64_t index, epoch;
    unsigned char used;     /* holds an item */
    unsigned char eligible; /* may be picked */
    unsigned char valued;   /* a value was fed back */
    double value;           /* the last value fed back */
    double weight;          /* priority, whether eligible or not */
    uint64_t units;         /* the weight in the tree's units */
} slot_info;

struct ef__policy {
    const ef__policy_def *def;
    size_t n;
    slot_info *slots;
    uint64_t *weights; /* Fenwick tree of eligible slots' units, 1-based */
    size_t top;      /* the largest power of two <= n */
    uint32_t *table; /* slot + 1, or 0 when empty */
    size_t mask;     /* table size - 1 */
    double known_sum; /* weights of used slots with a priority of their own */
    long known_n;
    uint64_t stale; /* values since the weights were last computed */
    pthread_mutex_t mu;
};

#define EF__POLICY_REF(name) &ef__policy_##name,
static const ef__policy_def *const registered[] = {
    EF__ECHO_POLICIES(EF__POLICY_REF) NULL};

const ef__policy_def *ef__policy_at(int i)
{
    int n = (int)(sizeof registered / sizeof *registered) - 1;
    return i >= 0 && i < n ? registered[i] : NULL;
}

int ef__policy_parse(const char *name, const ef__policy_def **out)
{
    *out = NULL;
    if (strcmp(name, "uniform") == 0)
        return 0;
    for (int i = 0; ef__policy_at(i); i++)
        if (strcmp(name, ef__policy_at(i)->name) == 0) {
            *out = ef__policy_at(i);
            return 0;
        }
    return -1;
}

const char *ef__policy_names(void)
{
    return EF__POLICY_NAMES;
}

/* ---- trees ---------------------------------------------------------- */

static void tree_add(uint64_t *t, size_t n, size_t slot, uint64_t d)
{
    for (size_t i = slot + 1; i <= n; i += i & -i)
        t[i] += d; /* modulo 2^64: adding -x takes x away */
}

static uint64_t tree_total(const uint64_t *t, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = n; i > 0; i -= i & -i)
        sum += t[i];
    return sum;
}

/* The slot where the running sum first exceeds `target`. */
static size_t tree_find(const uint64_t *t, size_t n, size_t top,
                        uint64_t target)
{
    size_t pos = 0;
    for (size_t step = top; step > 0; step >>= 1)
        if (pos + step <= n && t[pos + step] <= target) {
            pos += step;
            target -= t[pos];
        }
    return pos < n ? pos : n - 1;
}

/* The tree again from the slots, in O(n). */
static void rebuild(ef__policy *p)
{
    for (size_t i = 1; i <= p->n; i++) {
        const slot_info *s = &p->slots[i - 1];
        p->weights[i] = s->eligible ? s->units : 0;
    }
    for (size_t i = 1; i <= p->n; i++) {
        size_t up = i + (i & -i);
        if (up <= p->n)
            p->weights[up] += p->weights[i];
    }
}

/* ---- priorities ------------------------------------------------------ */

/* The priority of a slot with no value yet: the mean of those with one,
 * so an item waiting for its first value is neither favoured nor
 * starved. */
static double unknown_weight(const ef__policy *p)
{
    return p->known_n > 0 ? p->known_sum / (double)p->known_n : 1.0;
}

static uint64_t units_of(double w)
{
    return (uint64_t)(fmax(0, fmin(w, MOST)) * UNITS) + 1;
}

static void set_weight(ef__policy *p, size_t i, double w)
{
    slot_info *s = &p->slots[i];
    uint64_t u = units_of(w);
    if (s->eligible)
        tree_add(p->weights, p->n, i, u - s->units);
    s->weight = w;
    s->units = u;
}

/* Takes the slot's weight out of, or into, the mean of the weights of
 * items with a value. */
static void count_known(ef__policy *p, const slot_info *s, double sign)
{
    if (s->used && s->valued) {
        p->known_sum += sign * s->weight;
        p->known_n += sign > 0 ? 1 : -1;
    }
}

static void set_eligible(ef__policy *p, size_t i, int on)
{
    slot_info *s = &p->slots[i];
    if (s->eligible == on)
        return;
    s->eligible = (unsigned char)on;
    tree_add(p->weights, p->n, i, on ? s->units : -s->units);
}

/* The policy's weights again for the items with a value, and the mean
 * for those without, in O(n) plus the policy's own cost: weights follow
 * every value (a rank changes with every other), so they are computed
 * again once an eighth of the pool's worth of values came in. */
static void reweigh(ef__policy *p)
{
    double *values = ef__malloc(2 * p->n * sizeof *values);
    size_t *slot = ef__malloc(p->n * sizeof *slot);
    size_t m = 0;
    if (values && slot)
        for (size_t i = 0; i < p->n; i++)
            if (p->slots[i].used && p->slots[i].valued) {
                values[m] = p->slots[i].value;
                slot[m++] = i;
            }
    double *weights = values ? values + p->n : NULL;
    if (!values || !slot || (m > 0 && p->def->weigh(values, m, weights))) {
        ef__free(values); /* out of memory: the old weights stay, a */
        ef__free(slot);   /* little out of date */
        return;
    }
    p->known_sum = 0;
    p->known_n = (long)m;
    for (size_t k = 0; k < m; k++) {
        slot_info *s = &p->slots[slot[k]];
        s->weight = weights[k];
        s->units = units_of(weights[k]);
        p->known_sum += weights[k];
    }
    double mean = unknown_weight(p);
    for (size_t i = 0; i < p->n; i++)
        if (p->slots[i].used && !p->slots[i].valued) {
            p->slots[i].weight = mean;
            p->slots[i].units = units_of(mean);
        }
    ef__free(values);
    ef__free(slot);
    rebuild(p);
    p->stale = 0;
}

/* ---- identities ------------------------------------------------------ */

static size_t home(const ef__policy *p, int64_t index, int64_t epoch)
{
    uint64_t h = (uint64_t)index * 0x9e3779b97f4a7c15u ^
                 (uint64_t)epoch * 0xc2b2ae3d27d4eb4fu;
    h ^= h >> 29;
    return (size_t)(h * 0xbf58476d1ce4e5b9u >> 17) & p->mask;
}

/* The table position of the slot holding (index, epoch), or -1. */
static long find(const ef__policy *p, int64_t index, int64_t epoch)
{
    for (size_t j = home(p, index, epoch);; j = (j + 1) & p->mask) {
        uint32_t e = p->table[j];
        if (!e)
            return -1;
        const slot_info *s = &p->slots[e - 1];
        if (s->index == index && s->epoch == epoch)
            return (long)j;
    }
}

/* Removes table entry j, moving later entries of the same run back so
 * that every entry stays reachable from its home. */
static void table_delete(ef__policy *p, size_t j)
{
    size_t i = j;
    for (;;) {
        j = (j + 1) & p->mask;
        uint32_t e = p->table[j];
        if (!e)
            break;
        const slot_info *s = &p->slots[e - 1];
        size_t k = home(p, s->index, s->epoch);
        /* entry j may move to i when its home is not within (i, j] */
        int stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            p->table[i] = e;
            i = j;
        }
    }
    p->table[i] = 0;
}

/* ---- the interface --------------------------------------------------- */

ef__policy *ef__policy_new(const ef__policy_def *def, size_t slots)
{
    assert(def && def->weigh);
    ef__policy *p = ef__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->def = def;
    p->n = slots;
    size_t cap = 16;
    while (cap < 2 * slots)
        cap *= 2;
    p->mask = cap - 1;
    for (p->top = 1; p->top * 2 <= slots; p->top *= 2)
        ;
    p->slots = ef__calloc(slots, sizeof *p->slots);
    p->weights = ef__calloc(slots + 1, sizeof *p->weights);
    p->table = ef__calloc(cap, sizeof *p->table);
    if (!p->slots || !p->weights || !p->table ||
        pthread_mutex_init(&p->mu, NULL) != 0) {
        ef__free(p->slots);
        ef__free(p->weights);
        ef__free(p->table);
        ef__free(p);
        return NULL;
    }
    return p;
}

void ef__policy_free(ef__policy *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    ef__free(p->slots);
    ef__free(p->weights);
    ef__free(p->table);
    ef__free(p);
}

/* Forgets slot i's item; the caller holds the lock. */
static void leave(ef__policy *p, size_t i)
{
    slot_info *s = &p->slots[i];
    if (!s->used)
        return;
    set_eligible(p, i, 0);
    count_known(p, s, -1);
    long j = find(p, s->index, s->epoch);
    if (j >= 0 && p->table[j] == i + 1)
        table_delete(p, (size_t)j);
    memset(s, 0, sizeof *s);
}

int ef__policy_enter(ef__policy *p, size_t i, ef_sample_id id)
{
    pthread_mutex_lock(&p->mu);
    leave(p, i);
    slot_info *s = &p->slots[i];
    s->index = id.index;
    s->epoch = id.epoch;
    s->used = 1;
    s->weight = unknown_weight(p);
    s->units = units_of(s->weight);
    /* a second item of the same identity takes the entry over */
    long j = find(p, id.index, id.epoch);
    if (j < 0)
        for (j = (long)home(p, id.index, id.epoch); p->table[j];
             j = (long)(((size_t)j + 1) & p->mask))
            ;
    p->table[j] = (uint32_t)(i + 1);
    set_eligible(p, i, 1);
    p->stale++;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void ef__policy_leave(ef__policy *p, size_t i)
{
    pthread_mutex_lock(&p->mu);
    leave(p, i);
    pthread_mutex_unlock(&p->mu);
}

void ef__policy_retire(ef__policy *p, size_t i)
{
    pthread_mutex_lock(&p->mu);
    set_eligible(p, i, 0);
    pthread_mutex_unlock(&p->mu);
}

int ef__policy_pick(ef__policy *p, double v, size_t *out)
{
    pthread_mutex_lock(&p->mu);
    if (p->stale >= p->n / 8 + 1)
        reweigh(p);
    /* every eligible slot weighs at least one unit */
    uint64_t total = tree_total(p->weights, p->n);
    int rc = -1;
    if (total > 0) {
        uint64_t target = (uint64_t)(v * (double)total);
        if (target >= total) /* v * total rounded up */
            target = total - 1;
        *out = tree_find(p->weights, p->n, p->top, target);
        assert(p->slots[*out].eligible);
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* Records value x for slot i; lock held. The priority stays until the
 * next ranking, but from now on the slot counts among those with a value
 * (with its weight so far: the mean it entered with, or its last rank's). */
static void record(ef__policy *p, size_t i, double x)
{
    slot_info *s = &p->slots[i];
    count_known(p, s, -1);
    s->value = x;
    s->valued = 1;
    p->stale++;
    count_known(p, s, +1);
}

size_t ef__policy_feedback(ef__policy *p, const ef_sample_id *ids,
                           const double *values, size_t n)
{
    size_t matched = 0;
    pthread_mutex_lock(&p->mu);
    for (size_t k = 0; k < n; k++) {
        long j = find(p, ids[k].index, ids[k].epoch);
        if (j < 0)
            continue; /* evicted, or never pooled */
        record(p, p->table[j] - 1, values[k]);
        matched++;
    }
    pthread_mutex_unlock(&p->mu);
    return matched;
}

static uint64_t bits_of(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static double double_of(uint64_t b)
{
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

/* The value as fed, and the weight as it stands: ranks and the mean
 * given to items without a value depend on when they were computed, so
 * weights are kept rather than computed again. */
void ef__policy_save_slot(ef__policy *p, size_t i, ef__state_out *o)
{
    pthread_mutex_lock(&p->mu);
    const slot_info *s = &p->slots[i];
    ef__put_u64(o, s->valued);
    ef__put_u64(o, bits_of(s->value));
    ef__put_u64(o, bits_of(s->weight));
    pthread_mutex_unlock(&p->mu);
}

int ef__policy_restore_slot(ef__policy *p, size_t i, ef__state_in *in)
{
    uint64_t n, b[2];
    int rc = ef__get_count(in, "a pooled item's values", 1, &n);
    for (int k = 0; k < 2 && rc == EF_OK; k++)
        rc = ef__get_u64(in, "a pooled item's value", &b[k]);
    if (rc != EF_OK)
        return rc;
    double value = double_of(b[0]), weight = double_of(b[1]);
    if (!isfinite(value) || !(weight >= 0) || !isfinite(weight))
        return ef__state_bad(in, "a pooled item's value or priority is "
                                 "not a finite number");
    pthread_mutex_lock(&p->mu);
    slot_info *s = &p->slots[i];
    s->valued = (unsigned char)n;
    s->value = value;
    set_weight(p, i, weight);
    pthread_mutex_unlock(&p->mu);
    return EF_OK;
}

void ef__policy_save(ef__policy *p, ef__state_out *o)
{
    pthread_mutex_lock(&p->mu);
    ef__put_u64(o, bits_of(p->known_sum));
    ef__put_i64(o, p->known_n);
    ef__put_u64(o, p->stale);
    pthread_mutex_unlock(&p->mu);
}

int ef__policy_restore(ef__policy *p, ef__state_in *in)
{
    uint64_t sum, stale;
    int64_t known;
    ef__get_u64(in, "the policy's sum of priorities", &sum);
    ef__get_i64(in, "the policy's items with a value", &known);
    int rc = ef__get_u64(in, "the policy's values since ranking", &stale);
    if (rc == EF_OK &&
        (known < 0 || (uint64_t)known > p->n || !(double_of(sum) >= 0) ||
         !isfinite(double_of(sum))))
        return ef__state_bad(in, "the policy's %lld items with a value "
                                 "(priorities summing to %g) do not fit a "
                                 "pool of %zu",
                             (long long)known, double_of(sum), p->n);
    if (rc != EF_OK)
        return rc;
    pthread_mutex_lock(&p->mu);
    p->known_sum = double_of(sum);
    p->known_n = known;
    p->stale = stale;
    pthread_mutex_unlock(&p->mu);
    return EF_OK;
}
