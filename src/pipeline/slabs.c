/* SPDX-License-Identifier: Apache-2.0 */
/* The table of open batch slabs (slabs.h). */
#include <string.h>

#include "core/alloc.h"
#include "pipeline/slabs.h"

void ef__slabs_init(ef__slabs *t)
{
    memset(t, 0, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
}

int ef__slabs_on(ef__slabs *t, uint64_t n, uint64_t window)
{
    /* the seqs in flight span at most `window`, so at most window / n + 2
     * slabs can still be asked for; one more for slack */
    size_t cap = (size_t)(window / n) + 3;
    ef__slab *open = ef__calloc(cap, sizeof *open);
    if (!open)
        return EF_ENOMEM;
    ef__slabs_clear(t);
    ef__free(t->open);
    t->open = open;
    t->cap = cap;
    t->n = n;
    t->window = window;
    return EF_OK;
}

static void drop(ef__slabs *t, size_t i)
{
    ef_buffer_release(t->open[i].buf);
    t->open[i] = t->open[--t->nopen];
}

/* Drops the slabs no worker can ask for any more. A worker took `seq`
 * while fewer than `window` were taken and not yet emitted, and the ring
 * emits in order: so every seq still held or to come is above
 * seq - window, and a slab whose slots all lie at or below it is done
 * with. Dropping one early would cost only copies, never correctness. */
static void drop_stale(ef__slabs *t, uint64_t seq)
{
    for (size_t i = 0; i < t->nopen;) {
        uint64_t end = (t->open[i].batch + 1) * t->n; /* past its last */
        if (end + t->window <= seq)
            drop(t, i);
        else
            i++;
    }
}

ef_buffer *ef__slabs_take(ef__slabs *t, uint64_t seq, size_t nbytes,
                          size_t *offset)
{
    if (!t->n || nbytes == 0 || nbytes > SIZE_MAX / t->n)
        return NULL;
    uint64_t batch = seq / t->n;
    ef_buffer *b = NULL;
    pthread_mutex_lock(&t->mu);
    drop_stale(t, seq);
    size_t i = 0;
    while (i < t->nopen && t->open[i].batch != batch)
        i++;
    if (i == t->nopen && t->nopen < t->cap) {
        /* created under the lock: the other workers wait for it rather
         * than making one each; a slab is made once per batch */
        ef_buffer *nb = ef_buffer_new(nbytes * t->n);
        if (nb)
            t->open[t->nopen++] = (ef__slab){batch, nb, nbytes, 0};
    }
    if (i < t->nopen && t->open[i].nbytes == nbytes) {
        ef__slab *sl = &t->open[i];
        b = ef_buffer_retain(sl->buf);
        *offset = (size_t)(seq % t->n) * nbytes;
        if (++sl->handed == t->n)
            drop(t, i);
    }
    pthread_mutex_unlock(&t->mu);
    return b;
}

void ef__slabs_clear(ef__slabs *t)
{
    pthread_mutex_lock(&t->mu);
    while (t->nopen)
        drop(t, t->nopen - 1);
    pthread_mutex_unlock(&t->mu);
}

void ef__slabs_destroy(ef__slabs *t)
{
    ef__slabs_clear(t);
    ef__free(t->open);
    pthread_mutex_destroy(&t->mu);
}
