/* Shuffle buffer (see shuffle_buffer.h). */
#include "stages/shuffle_buffer.h"

#include "core/alloc.h"

int ef__shufbuf_init(ef__shufbuf *b, size_t cap)
{
    b->items = ef__calloc(cap, sizeof *b->items);
    b->cap = cap;
    b->n = 0;
    b->ended = 0;
    return b->items ? EF_OK : EF_ENOMEM;
}

void ef__shufbuf_destroy(ef__shufbuf *b)
{
    for (size_t i = 0; i < b->n; i++)
        ef_sample_free(b->items[i]);
    ef__free(b->items);
    b->items = NULL;
    b->n = 0;
}

int ef__shufbuf_next(ef__shufbuf *b, ef__producer produce, void *arg,
                     ef__rng *rng, ef_sample **out, ef__err *err)
{
    *out = NULL;
    while (!b->ended && b->n < b->cap) {
        ef_sample *smp;
        int rc = produce(arg, &smp, err);
        if (rc == EF_END)
            b->ended = 1;
        else if (rc != EF_OK)
            return rc;
        else
            b->items[b->n++] = smp;
    }
    if (b->n == 0)
        return EF_END;
    size_t i = (size_t)ef__rng_below(rng, b->n);
    *out = b->items[i];
    b->items[i] = b->items[--b->n];
    return EF_OK;
}

void ef__shufbuf_reset(ef__shufbuf *b)
{
    b->ended = 0;
}
