/* SPDX-License-Identifier: Apache-2.0 */
/* Reference-counted byte buffers. An owned buffer stores its bytes right
 * after the header (one allocation); a wrapped one points at memory owned
 * elsewhere and calls the owner's release function on the last reference.
 * Memory wrapped for a caller of the API (ef_buffer_wrap) is borrowed: its
 * owner may still read and write it, so nothing handed out for writing may
 * show it. Memory a stage allocated and wrapped itself (ef__buffer_adopt)
 * is echoflow's alone.
 *
 * Large owned buffers (decoded images, batches) are reused: the last few
 * freed are kept and handed out again. glibc gives a block that large its
 * own pages, and when it is freed on another thread than the one that
 * made it (a decoded image freed by the consumer) returns them to the
 * system, so every new one paid a page fault and the kernel's zeroing per
 * 4 KiB: `decode:threads=2` took 74 faults per image and ran slower on two
 * cores than one thread on one. Kept blocks serve a request of up to
 * their size and at least half of it, oldest dropped first; at most KEEP
 * blocks and KEEP_BYTES are held.
 *
 * Small owned buffers (a label, an index: a field per item of a cheap
 * source) come from a free list of the calling thread's and go back to
 * the list of the thread that frees them, up to SMALL_KEEP each: a batch
 * frees its examples' fields together, more than malloc's per-thread
 * cache holds, and malloc's slower bins then cost more than the item's
 * work. Every small buffer has SMALL bytes of storage, so any of them
 * serves any small request.
 *
 * Address sanitizer builds keep and list none, so that a use after free
 * stays visible. */
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>

#include "core/alloc.h"
#include "core/buffer.h"

struct ef_buffer {
    atomic_uint refs;
    size_t size;
    size_t cap; /* bytes of storage: at least size; 0 when wrapped */
    void *data;
    void (*release)(void *user); /* NULL for owned storage */
    void *user;
    int borrowed; /* wraps memory owned outside echoflow (ef_buffer_wrap) */
    alignas(16) unsigned char storage[];
};

#define LARGE EF__BUFFER_LARGE /* glibc's mmap threshold */
#if defined(__SANITIZE_ADDRESS__)
#define KEEP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KEEP 0
#endif
#endif
#ifndef KEEP
#define KEEP 32
#endif
#define SMALL 32       /* bytes of storage of every small buffer */
#define SMALL_KEEP 512 /* each thread's list at most; none where KEEP is 0 */
#define KEEP_BYTES ((size_t)128 << 20)

static pthread_mutex_t kept_mu = PTHREAD_MUTEX_INITIALIZER;
static ef_buffer *kept[KEEP + 1]; /* oldest first */
static size_t nkept, kept_bytes;

/* A process forked while a stage's thread held kept_mu would find it
 * locked for ever: fork waits until no thread holds it. */
static void lock_kept(void)
{
    pthread_mutex_lock(&kept_mu);
}

static void unlock_kept(void)
{
    pthread_mutex_unlock(&kept_mu);
}

static void at_fork_once(void)
{
    pthread_atfork(lock_kept, unlock_kept, unlock_kept);
}

static pthread_once_t at_fork = PTHREAD_ONCE_INIT;

/* The kept block that best fits `size` (the smallest of cap >= size and
 * cap <= 2 * size), taken out; NULL when none does. */
static ef_buffer *take_kept(size_t size)
{
    ef_buffer *b = NULL;
    pthread_once(&at_fork, at_fork_once);
    pthread_mutex_lock(&kept_mu);
    size_t best = nkept;
    for (size_t i = 0; i < nkept; i++)
        if (kept[i]->cap >= size && kept[i]->cap / 2 <= size &&
            (best == nkept || kept[i]->cap < kept[best]->cap))
            best = i;
    if (best < nkept) {
        b = kept[best];
        kept_bytes -= b->cap;
        for (size_t i = best; i + 1 < nkept; i++)
            kept[i] = kept[i + 1];
        nkept--;
    }
    pthread_mutex_unlock(&kept_mu);
    return b;
}

/* Keeps b for reuse, dropping the oldest kept blocks to make room;
 * returns 0 when b itself cannot be kept. */
static int keep(ef_buffer *b)
{
    if (KEEP == 0 || b->cap > KEEP_BYTES)
        return 0;
    ef_buffer *drop[KEEP + 1];
    size_t ndrop = 0;
    pthread_once(&at_fork, at_fork_once);
    pthread_mutex_lock(&kept_mu);
    while (nkept && (nkept == KEEP || kept_bytes + b->cap > KEEP_BYTES)) {
        drop[ndrop++] = kept[0];
        kept_bytes -= kept[0]->cap;
        for (size_t i = 0; i + 1 < nkept; i++)
            kept[i] = kept[i + 1];
        nkept--;
    }
    kept[nkept++] = b;
    kept_bytes += b->cap;
    pthread_mutex_unlock(&kept_mu);
    for (size_t i = 0; i < ndrop; i++)
        ef__free(drop[i]);
    return 1;
}

/* ---- each thread's small buffers ------------------------------------ */

static _Thread_local ef_buffer *small_list; /* linked through ->user */
static _Thread_local unsigned small_n;
static _Thread_local int small_registered; /* its end frees the list */
static pthread_key_t small_key;
static pthread_once_t small_once = PTHREAD_ONCE_INIT;
static int small_key_made;

/* A thread ends: its list goes. */
static void small_thread_ends(void *unused)
{
    (void)unused;
    while (small_list) {
        ef_buffer *b = small_list;
        small_list = b->user;
        ef__free(b);
    }
    small_n = 0;
    small_registered = 0; /* a later keep registers again */
}

static void make_small_key(void)
{
    small_key_made = pthread_key_create(&small_key, small_thread_ends) == 0;
}

/* A small buffer from the thread's list; NULL when it is empty. */
static ef_buffer *small_take(void)
{
    ef_buffer *b = small_list;
    if (b) {
        small_list = b->user;
        small_n--;
    }
    return b;
}

/* Puts a small buffer on the thread's list; 0 when the list is full or
 * the thread cannot have one. */
static int small_keep(ef_buffer *b)
{
    if (small_n >= SMALL_KEEP)
        return 0;
    if (!small_registered) {
        /* the key's value makes the thread's end call the destructor */
        pthread_once(&small_once, make_small_key);
        if (!small_key_made || pthread_setspecific(small_key, &small_list) != 0)
            return 0;
        small_registered = 1;
    }
    b->user = small_list;
    small_list = b;
    small_n++;
    return 1;
}

int ef__buffer_keep_max(void)
{
    return KEEP;
}

ef_buffer *ef_buffer_new(size_t size)
{
    if (size > SIZE_MAX - sizeof(ef_buffer))
        return NULL;
    ef_buffer *b = size >= LARGE ? take_kept(size) : NULL;
    if (size <= SMALL && KEEP) {
        b = small_take();
        if (!b && (b = ef__malloc(sizeof *b + SMALL)) != NULL)
            b->cap = SMALL;
        if (!b)
            return NULL;
    } else if (!b) {
        b = ef__malloc(sizeof *b + size);
        if (!b)
            return NULL;
        b->cap = size;
    }
    atomic_init(&b->refs, 1);
    b->size = size;
    b->data = b->storage;
    b->release = NULL;
    b->user = NULL;
    b->borrowed = 0;
    return b;
}

static ef_buffer *wrap(void *data, size_t size, void (*release)(void *user),
                       void *user, int borrowed)
{
    ef_buffer *b = ef__malloc(sizeof *b);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->size = size;
    b->cap = 0;
    b->data = data;
    b->release = release;
    b->user = user;
    b->borrowed = borrowed;
    return b;
}

ef_buffer *ef_buffer_wrap(void *data, size_t size, void (*release)(void *user),
                          void *user)
{
    return wrap(data, size, release, user, 1);
}

ef_buffer *ef__buffer_adopt(void *data, size_t size,
                            void (*release)(void *user), void *user)
{
    return wrap(data, size, release, user, 0);
}

int ef_buffer_is_borrowed(const ef_buffer *b)
{
    return b->borrowed;
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
    /* Holding every reference, the caller is the only one who could
     * take another: no other thread touches the count, and the free
     * needs no atomic write (most buffers die with their one owner).
     * Otherwise acq_rel: every write made through other references
     * happens before the free (a release decrement plus an acquire fence
     * would do, but the thread sanitizer does not model lone fences). */
    if (atomic_load_explicit(&b->refs, memory_order_acquire) != n &&
        atomic_fetch_sub_explicit(&b->refs, n, memory_order_acq_rel) != n)
        return;
    if (b->release)
        b->release(b->user);
    else if (b->cap >= LARGE && keep(b))
        return;
    else if (KEEP && b->cap == SMALL && small_keep(b))
        return;
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
