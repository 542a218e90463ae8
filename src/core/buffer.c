/* Reference-counted byte buffers. An owned buffer stores its bytes right
 * after the header (one allocation); a wrapped one points at memory owned
 * elsewhere and calls the owner's release function on the last reference. */
#include <stdalign.h>
#include <stdatomic.h>

#include "core/alloc.h"
#include "core/buffer.h"

struct ef_buffer {
    atomic_uint refs;
    size_t size;
    void *data;
    void (*release)(void *user); /* NULL for owned storage */
    void *user;
    alignas(16) unsigned char storage[];
};

ef_buffer *ef_buffer_new(size_t size)
{
    if (size > SIZE_MAX - sizeof(ef_buffer))
        return NULL;
    ef_buffer *b = ef__malloc(sizeof *b + size);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->size = size;
    b->data = b->storage;
    b->release = NULL;
    b->user = NULL;
    return b;
}

ef_buffer *ef_buffer_wrap(void *data, size_t size, void (*release)(void *user),
                          void *user)
{
    ef_buffer *b = ef__malloc(sizeof *b);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->size = size;
    b->data = data;
    b->release = release;
    b->user = user;
    return b;
}

ef_buffer *ef_buffer_retain(ef_buffer *b)
{
    atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}

void ef__buffer_retain_n(ef_buffer *b, unsigned n)
{
    atomic_fetch_add_explicit(&b->refs, n, memory_order_relaxed);
}

void ef__buffer_release_n(ef_buffer *b, unsigned n)
{
    if (!b || n == 0)
        return;
    /* acq_rel: every write made through other references happens before
     * the free (a release decrement plus an acquire fence would do, but
     * the thread sanitizer does not model lone fences) */
    if (atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) != n)
        return;
    if (b->release)
        b->release(b->user);
    ef__free(b);
}

void ef_buffer_release(ef_buffer *b)
{
    ef__buffer_release_n(b, 1);
}

void *ef_buffer_data(const ef_buffer *b)
{
    return b->data;
}

size_t ef_buffer_size(const ef_buffer *b)
{
    return b->size;
}

unsigned ef_buffer_refcount(const ef_buffer *b)
{
    return atomic_load_explicit(&((ef_buffer *)b)->refs, memory_order_acquire);
}
