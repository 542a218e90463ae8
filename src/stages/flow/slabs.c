/* The table of open batch slabs (slabs.h). */
#include <string.h>

#include "core/alloc.h"
#include "stages/flow/slabs.h"

/* ---- reused slab memory -------------------------------------------- */

#define SPARES 4 /* slabs kept for reuse */

/* A slab's memory, behind its header. */
typedef struct {
    ef__slab_spares *owner;
    size_t size;
    unsigned char data[]; /* malloc's alignment: the header is 16 bytes */
} block;

struct ef__slab_spares {
    pthread_mutex_t mu;
    unsigned refs; /* the table's (until destroy) and one per block out */
    int open;      /* the table still wants spares back */
    int nspare;
    block *spare[SPARES];
};

/* Frees the spares' record once its last reference went (`last`). */
static void spares_free_if(ef__slab_spares *p, int last)
{
    if (last) {
        pthread_mutex_destroy(&p->mu);
        ef__free(p);
    }
}

/* ef_buffer_wrap's release: back to the spares, or freed. */
static void block_release(void *user)
{
    block *b = user;
    ef__slab_spares *p = b->owner;
    pthread_mutex_lock(&p->mu);
    if (p->open && p->nspare < SPARES) {
        p->spare[p->nspare++] = b;
        b = NULL;
    }
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    ef__free(b);
    spares_free_if(p, last);
}

/* A buffer of `size` bytes, from a spare when one has that size. */
static ef_buffer *block_take(ef__slab_spares *p, size_t size)
{
    block *b = NULL;
    pthread_mutex_lock(&p->mu);
    while (!b && p->nspare) {
        b = p->spare[--p->nspare];
        if (b->size != size) { /* another size: its time is over */
            ef__free(b);
            b = NULL;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (!b && size <= SIZE_MAX - sizeof *b) {
        b = ef__malloc(sizeof *b + size);
        if (b) {
            b->owner = p;
            b->size = size;
        }
    }
    if (!b)
        return NULL;
    ef_buffer *buf = ef_buffer_wrap(b->data, size, block_release, b);
    if (!buf) {
        ef__free(b);
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    p->refs++;
    pthread_mutex_unlock(&p->mu);
    return buf;
}

static ef__slab_spares *spares_new(void)
{
    ef__slab_spares *p = ef__calloc(1, sizeof *p);
    if (p) {
        pthread_mutex_init(&p->mu, NULL);
        p->refs = 1;
        p->open = 1;
    }
    return p;
}

/* The table lets go: spares freed, blocks still out freed when done. */
static void spares_close(ef__slab_spares *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->open = 0;
    while (p->nspare)
        ef__free(p->spare[--p->nspare]);
    int last = --p->refs == 0;
    pthread_mutex_unlock(&p->mu);
    spares_free_if(p, last);
}

/* ---- the table ------------------------------------------------------ */

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
    ef__slab_spares *spares = t->spares ? t->spares : spares_new();
    if (!open || !spares) {
        ef__free(open);
        if (!t->spares)
            spares_close(spares);
        return EF_ENOMEM;
    }
    t->spares = spares;
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
        ef_buffer *nb = block_take(t->spares, nbytes * t->n);
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
    spares_close(t->spares);
    pthread_mutex_destroy(&t->mu);
}
