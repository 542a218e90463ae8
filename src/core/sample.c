/* SPDX-License-Identifier: Apache-2.0 */
/* Samples: named tensor fields viewing reference-counted buffers. */
#include "core/sample.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buffer.h"
#include "core/names.h"

static const struct {
    size_t size;
    const char *name;
} dtypes[EF__DTYPE_COUNT] = {
    [EF_U8] = {1, "u8"},
    [EF_I32] = {4, "i32"},
    [EF_I64] = {8, "i64"},
    [EF_F32] = {4, "f32"},
    [EF_BOOL] = {1, "bool"},
    [EF_I8] = {1, "i8"},
    [EF_I16] = {2, "i16"},
    [EF_U16] = {2, "u16"},
    [EF_F16] = {2, "f16"},
    [EF_BF16] = {2, "bf16"},
    [EF_F64] = {8, "f64"},
};

size_t ef_dtype_size(ef_dtype dtype)
{
    return (unsigned)dtype < EF__DTYPE_COUNT ? dtypes[dtype].size : 0;
}

const char *ef_dtype_name(ef_dtype dtype)
{
    return (unsigned)dtype < EF__DTYPE_COUNT ? dtypes[dtype].name : "?";
}

int64_t ef__shape_count(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    return n;
}

void ef__shape_format(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? "," : "",
                                 (long long)shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
}

static ef_sample *new_header(void);

ef_sample *ef_sample_new(ef_sample_id id)
{
    ef_sample *s = new_header();
    if (!s)
        return NULL;
    s->id = id;
    s->origin = (ef__origin){0, 0, 0, NULL};
    s->nfields = 0;
    s->cap = EF__INLINE_FIELDS;
    s->fields = s->inline_fields;
    return s;
}

/* ---- the header pool (see sample.h) ------------------------------- */

/* `returned` once the owner has let go: frees no longer push */
#define POOL_CLOSED ((uintptr_t)1)
/* What `left` starts at: more headers than will ever be out, so the
 * returns made after the close cannot bring it to 0 before the owner has
 * added the true count. */
#define POOL_BIAS (UINT64_C(1) << 62)
/* The owner takes the returned stack back at most once per this many
 * handouts, allocating a header instead when the spares run out sooner:
 * the working set grows until one exchange serves this many copies. */
#define POOL_BATCH 16

struct ef__sample_pool {
    _Atomic uintptr_t returned; /* stack of returned headers (any thread
                                   pushes, the owner takes it all), or
                                   POOL_CLOSED */
    _Atomic uint64_t left;      /* after the close: headers out, biased */
    /* owner only */
    ef_sample *spare;           /* headers taken back, to hand out again */
    uint64_t handed, recovered; /* handouts, and headers taken back */
    unsigned since_take;        /* handouts since the last exchange */
};

ef__sample_pool *ef__sample_pool_new(void)
{
    ef__sample_pool *p = ef__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    atomic_init(&p->returned, 0);
    atomic_init(&p->left, POOL_BIAS);
    return p;
}

/* Frees a list of headers; how many there were. */
static uint64_t free_list(ef_sample *s)
{
    uint64_t n = 0;
    for (; s; n++) {
        ef_sample *next = s->next_free;
        ef__free(s);
        s = next;
    }
    return n;
}

void ef__sample_pool_release(ef__sample_pool *p)
{
    if (!p)
        return;
    p->recovered += free_list(p->spare);
    /* from here on frees see POOL_CLOSED and count down `left` */
    uintptr_t last = atomic_exchange_explicit(&p->returned, POOL_CLOSED,
                                              memory_order_acq_rel);
    p->recovered += free_list((ef_sample *)last);
    uint64_t add = (p->handed - p->recovered) - POOL_BIAS; /* mod 2^64 */
    if (atomic_fetch_add_explicit(&p->left, add, memory_order_acq_rel) + add ==
        0)
        ef__free(p);
}

/* Gives a pooled header back: onto the stack while the owner holds the
 * pool (one CAS), else freed, the last one out freeing the pool. */
static void pool_return(ef_sample *s)
{
    ef__sample_pool *p = s->pool;
    uintptr_t head = atomic_load_explicit(&p->returned, memory_order_acquire);
    for (;;) {
        if (head == POOL_CLOSED) {
            ef__free(s);
            if (atomic_fetch_sub_explicit(&p->left, 1, memory_order_acq_rel) ==
                1)
                ef__free(p);
            return;
        }
        s->next_free = (ef_sample *)head;
        /* once pushed, s may be handed out again and p let go: touch
         * neither after a successful exchange */
        if (atomic_compare_exchange_weak_explicit(
                &p->returned, &head, (uintptr_t)s, memory_order_release,
                memory_order_acquire))
            return;
    }
}

static int own_pool_is(const ef__sample_pool *p);

void ef_sample_free(ef_sample *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nfields; i++) {
        ef_buffer_release(s->fields[i].buf);
        ef_buffer_release(s->fields[i].lengths);
    }
    if (s->origin.members) /* batches only: no call for every example */
        ef_buffer_release(s->origin.members);
    if (s->fields != s->inline_fields)
        ef__free(s->fields);
    if (s->pool && own_pool_is(s->pool)) {
        /* back on its own thread: straight onto the spares, no CAS */
        s->next_free = s->pool->spare;
        s->pool->spare = s;
    } else if (s->pool) {
        pool_return(s);
    } else {
        ef__free(s);
    }
}

/* Copies the header and its fields in use into c (samples are copied
 * once per echo), leaving c's pool link alone; fields past the inline
 * ones go to a heap array of c's own. NULL when out of memory. */
static ef_sample *copy_into(ef_sample *c, const ef_sample *s)
{
    int n = s->nfields;
    ef__field *fields = c->inline_fields;
    if (n > EF__INLINE_FIELDS) {
        fields = ef__malloc((size_t)n * sizeof *fields);
        if (!fields)
            return NULL;
    }
    c->id = s->id;
    c->origin = s->origin;
    c->nfields = n;
    c->cap = n > EF__INLINE_FIELDS ? n : EF__INLINE_FIELDS;
    c->fields = fields;
    memcpy(fields, s->fields, (size_t)n * sizeof *fields);
    return c;
}

/* A header taken for a copy that failed goes back where it came from. */
static void drop_header(ef_sample *c)
{
    c->nfields = 0;
    c->fields = c->inline_fields;
    c->origin.members = NULL;
    ef_sample_free(c);
}

/* The copy, and a reference on each buffer. */
static ef_sample *clone_into(ef_sample *c, const ef_sample *s)
{
    if (!copy_into(c, s)) {
        drop_header(c);
        return NULL;
    }
    for (int i = 0; i < c->nfields; i++) {
        ef_buffer_retain(c->fields[i].buf);
        if (c->fields[i].lengths)
            ef_buffer_retain(c->fields[i].lengths);
    }
    if (c->origin.members)
        ef_buffer_retain(c->origin.members);
    return c;
}

void ef__sample_refs_add(ef_sample *s, unsigned n)
{
    for (int i = 0; i < s->nfields; i++) {
        ef__buffer_retain_n(s->fields[i].buf, n);
        if (s->fields[i].lengths)
            ef__buffer_retain_n(s->fields[i].lengths, n);
    }
    if (s->origin.members)
        ef__buffer_retain_n(s->origin.members, n);
}

void ef__sample_refs_drop(ef_sample *s, unsigned n)
{
    for (int i = 0; i < s->nfields; i++) {
        ef__buffer_release_n(s->fields[i].buf, n);
        if (s->fields[i].lengths)
            ef__buffer_release_n(s->fields[i].lengths, n);
    }
    if (s->origin.members)
        ef__buffer_release_n(s->origin.members, n);
}

ef_sample *ef_sample_clone(const ef_sample *s)
{
    ef_sample *c = new_header();
    return c ? clone_into(c, s) : NULL;
}

/* A header from the pool (or a new one); NULL when out of memory. */
static ef_sample *pool_take(ef__sample_pool *p)
{
    if (!p->spare && p->since_take >= POOL_BATCH) {
        p->spare = (ef_sample *)atomic_exchange_explicit(&p->returned, 0,
                                                         memory_order_acquire);
        p->since_take = 0;
    }
    ef_sample *c = p->spare;
    if (c) {
        p->spare = c->next_free;
        p->recovered++;
    } else {
        c = ef__malloc(sizeof *c);
        if (!c)
            return NULL;
        c->pool = p;
    }
    p->handed++;
    p->since_take++;
    return c;
}

/* ---- each thread's pool ------------------------------------------
 *
 * ef_sample_new and ef_sample_clone take headers from a pool of the
 * calling thread's. Samples are made on one thread (a source's reader, a
 * map worker) and freed on another (the consumer): with malloc, each such
 * free and each allocation took the lock of the maker's malloc arena, and
 * the two threads queued on it for every item. A pool's returns are one
 * CAS instead. The pool is let go when its thread ends (a key's
 * destructor); headers still out then free themselves as they come back.
 * Address sanitizer builds use malloc, so that a use after free stays
 * visible. */
#if defined(__SANITIZE_ADDRESS__)
#define THREAD_POOLS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define THREAD_POOLS 0
#endif
#endif
#ifndef THREAD_POOLS
#define THREAD_POOLS 1
#endif

static _Thread_local ef__sample_pool *thread_pool;
static pthread_key_t pool_key;
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;
static int pool_key_made;

static void pool_thread_ends(void *p)
{
    thread_pool = NULL; /* a later sample of this thread makes another */
    ef__sample_pool_release(p);
}

static void make_pool_key(void)
{
    pool_key_made = pthread_key_create(&pool_key, pool_thread_ends) == 0;
}

/* Whether p is the calling thread's pool, whose spares are its own. */
static int own_pool_is(const ef__sample_pool *p)
{
    return p == thread_pool;
}

/* The calling thread's pool, made on first use; NULL without one. */
static ef__sample_pool *own_pool(void)
{
    if (!THREAD_POOLS || thread_pool)
        return thread_pool;
    pthread_once(&pool_once, make_pool_key);
    ef__sample_pool *p = pool_key_made ? ef__sample_pool_new() : NULL;
    if (p && pthread_setspecific(pool_key, p) != 0) {
        ef__sample_pool_release(p);
        p = NULL;
    }
    return thread_pool = p;
}

/* A header for a new sample: from the thread's pool, or malloc'd. */
static ef_sample *new_header(void)
{
    ef__sample_pool *p = own_pool();
    if (p)
        return pool_take(p);
    ef_sample *s = ef__malloc(sizeof *s);
    if (s)
        s->pool = NULL;
    return s;
}

ef_sample *ef__sample_pool_clone(ef__sample_pool *p, const ef_sample *s)
{
    ef_sample *c = pool_take(p);
    return c ? clone_into(c, s) : NULL;
}

ef_sample *ef__sample_pool_copy(ef__sample_pool *p, const ef_sample *s)
{
    ef_sample *c = pool_take(p);
    if (c && !copy_into(c, s)) {
        drop_header(c);
        return NULL;
    }
    return c;
}

void ef__sample_origin_copy(ef_sample *dst, const ef_sample *src)
{
    if (src->origin.members)
        ef_buffer_retain(src->origin.members);
    ef_buffer_release(dst->origin.members);
    dst->origin = src->origin;
}

ef__ident ef__ident_of(const ef_sample *s)
{
    ef__ident d = {s->id, s->origin.part, s->origin.offset, s->origin.end,
                   s->origin.members};
    if (d.members)
        ef_buffer_retain(d.members);
    return d;
}

void ef__ident_clear(ef__ident *d)
{
    ef_buffer_release(d->members);
    d->members = NULL;
}

const ef__ident *ef__ident_members(const ef__ident *d, size_t *n)
{
    *n = d->members ? ef_buffer_size(d->members) / sizeof(ef__ident) : 0;
    return d->members ? ef_buffer_data(d->members) : NULL;
}

int ef__sample_find(const ef_sample *s, const char *name)
{
    for (int i = 0; i < s->nfields; i++)
        if (s->fields[i].name == name || strcmp(s->fields[i].name, name) == 0)
            return i;
    return -1;
}

/* Room for one more field: the inline array, then a heap one that
 * doubles. */
static int room_for_one(ef_sample *s)
{
    if (s->nfields < s->cap)
        return 0;
    int cap = s->cap * 2;
    ef__field *f = ef__malloc((size_t)cap * sizeof *f);
    if (!f)
        return -1;
    memcpy(f, s->fields, (size_t)s->nfields * sizeof *f);
    if (s->fields != s->inline_fields)
        ef__free(s->fields);
    s->fields = f;
    s->cap = cap;
    return 0;
}

/* ef_sample_add, but the field takes over the caller's reference to buf
 * (none is taken on failure). */
static ef_status add_adopting(ef_sample *s, const char *name, ef_dtype dtype,
                              int ndim, const int64_t *shape, ef_buffer *buf,
                              size_t offset)
{
    if (!s || !name || !buf || !name[0] ||
        strnlen(name, EF_MAX_NAME) >= EF_MAX_NAME ||
        s->nfields >= EF_MAX_FIELDS || ef_dtype_size(dtype) == 0 || ndim < 0 ||
        ndim > EF_MAX_DIMS || (ndim > 0 && !shape) ||
        ef__sample_find(s, name) >= 0)
        return EF_EINVAL;
    uint64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 ||
            (shape[i] > 0 && count > UINT64_MAX / (uint64_t)shape[i]))
            return EF_EINVAL;
        count *= (uint64_t)shape[i];
    }
    size_t esize = ef_dtype_size(dtype);
    if (count > SIZE_MAX / esize)
        return EF_EINVAL;
    size_t nbytes = (size_t)count * esize;
    size_t bsize = ef_buffer_size(buf);
    if (offset > bsize || nbytes > bsize - offset)
        return EF_EINVAL;
    const char *stored = ef__name_intern(name, strlen(name));
    if (!stored || room_for_one(s) != 0)
        return EF_ENOMEM;
    ef__field *f = &s->fields[s->nfields++];
    memset(f, 0, sizeof *f);
    f->name = stored;
    f->dtype = dtype;
    f->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        f->shape[i] = shape[i];
    f->buf = buf;
    f->offset = offset;
    f->nbytes = nbytes;
    return EF_OK;
}

ef_status ef_sample_add(ef_sample *s, const char *name, ef_dtype dtype,
                        int ndim, const int64_t *shape, ef_buffer *buf,
                        size_t offset)
{
    int rc = add_adopting(s, name, dtype, ndim, shape, buf, offset);
    if (rc == EF_OK)
        ef_buffer_retain(buf);
    return rc;
}

ef_status ef_sample_add_new(ef_sample *s, const char *name, ef_dtype dtype,
                            int ndim, const int64_t *shape, void **data)
{
    if (ndim < 0 || ndim > EF_MAX_DIMS || (ndim > 0 && !shape))
        return EF_EINVAL;
    int64_t count = ef__shape_count(ndim, shape);
    if (count < 0)
        return EF_EINVAL;
    ef_buffer *b = ef_buffer_new((size_t)count * ef_dtype_size(dtype));
    if (!b)
        return EF_ENOMEM;
    int rc = add_adopting(s, name, dtype, ndim, shape, b, 0);
    if (rc != EF_OK)
        ef_buffer_release(b);
    else if (data)
        *data = ef_buffer_data(b);
    return rc;
}

int ef_sample_field_count(const ef_sample *s)
{
    return s->nfields;
}

ef_status ef_sample_field(const ef_sample *s, int i, ef_tensor *out)
{
    if (i < 0 || i >= s->nfields)
        return EF_EINVAL;
    const ef__field *f = &s->fields[i];
    out->name = f->name;
    out->dtype = f->dtype;
    out->ndim = f->ndim;
    for (int d = 0; d < EF_MAX_DIMS; d++)
        out->shape[d] = d < f->ndim ? f->shape[d] : 0;
    out->data = (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    out->nbytes = f->nbytes;
    out->buffer = f->buf;
    return EF_OK;
}

ef_status ef_sample_get(const ef_sample *s, const char *name, ef_tensor *out)
{
    int i = ef__sample_find(s, name);
    return i < 0 ? EF_EINVAL : ef_sample_field(s, i, out);
}

int64_t ef_sample_ragged_lengths(const ef_sample *s, const char *name,
                                 int64_t *out, int64_t cap)
{
    int i = s && name ? ef__sample_find(s, name) : -1;
    if (i < 0 || !s->fields[i].lengths)
        return 0;
    const ef_buffer *l = s->fields[i].lengths;
    int64_t n = (int64_t)(ef_buffer_size(l) / sizeof(int64_t));
    if (out && cap > 0)
        memcpy(out, ef_buffer_data(l),
               (size_t)(cap < n ? cap : n) * sizeof(int64_t));
    return n;
}

ef_status ef_sample_set_ragged(ef_sample *s, const char *name,
                               const int64_t *lengths, int64_t n)
{
    int i = s && name ? ef__sample_find(s, name) : -1;
    if (i < 0 || !lengths || n < 1 || s->fields[i].ndim < 1 ||
        (uint64_t)n > SIZE_MAX / sizeof(int64_t))
        return EF_EINVAL;
    int64_t sum = 0;
    for (int64_t k = 0; k < n; k++) {
        if (lengths[k] < 0 || lengths[k] > s->fields[i].shape[0] - sum)
            return EF_EINVAL;
        sum += lengths[k];
    }
    if (sum != s->fields[i].shape[0])
        return EF_EINVAL;
    ef_buffer *l = ef_buffer_new((size_t)n * sizeof(int64_t));
    if (!l)
        return EF_ENOMEM;
    memcpy(ef_buffer_data(l), lengths, (size_t)n * sizeof(int64_t));
    ef__sample_set_lengths(s, i, l);
    ef_buffer_release(l);
    return EF_OK;
}

ef_status ef_sample_set_variable(ef_sample *s, const char *name)
{
    int i = s && name ? ef__sample_find(s, name) : -1;
    if (i < 0 || s->fields[i].ndim < 1)
        return EF_EINVAL;
    s->fields[i].variable = 1;
    return EF_OK;
}

ef_status ef_sample_set_text(ef_sample *s, const char *name,
                             ef_text_kind kind)
{
    int i = s && name ? ef__sample_find(s, name) : -1;
    if (i < 0 || s->fields[i].ndim != 1 || s->fields[i].dtype != EF_U8 ||
        (kind != EF_TEXT && kind != EF_TEXT_LIST))
        return EF_EINVAL;
    s->fields[i].variable = (unsigned char)(1 + kind);
    return EF_OK;
}

ef_text_kind ef_sample_text(const ef_sample *s, const char *name)
{
    int i = s && name ? ef__sample_find(s, name) : -1;
    if (i < 0 || s->fields[i].variable <= EF__VARIABLE)
        return EF_NOT_TEXT;
    return (ef_text_kind)(s->fields[i].variable - 1);
}

int ef__sample_add_field(ef_sample *s, const ef__field *f)
{
    int rc = ef_sample_add(s, f->name, f->dtype, f->ndim, f->shape, f->buf,
                           f->offset);
    if (rc == EF_OK) {
        ef__field *g = &s->fields[s->nfields - 1];
        g->variable = f->variable;
        if (f->lengths)
            g->lengths = ef_buffer_retain(f->lengths);
    }
    return rc;
}

int ef__sample_add_variable(ef_sample *s, const char *name, ef_dtype dtype,
                            int64_t length, ef_buffer *buf, size_t offset)
{
    int rc = ef_sample_add(s, name, dtype, 1, &length, buf, offset);
    if (rc == EF_OK)
        s->fields[s->nfields - 1].variable = 1;
    return rc;
}

void ef__sample_set_lengths(ef_sample *s, int i, ef_buffer *lengths)
{
    ef_buffer_release(s->fields[i].lengths);
    s->fields[i].lengths = ef_buffer_retain(lengths);
}

void ef__sample_remove(ef_sample *s, int i)
{
    ef_buffer_release(s->fields[i].buf);
    ef_buffer_release(s->fields[i].lengths);
    memmove(&s->fields[i], &s->fields[i + 1],
            (size_t)(s->nfields - i - 1) * sizeof s->fields[0]);
    s->nfields--;
}

ef_sample_id ef_sample_identity(const ef_sample *s)
{
    return s->id;
}

ef_status ef_sample_set_members(ef_sample *s, const ef_sample_id *ids,
                                int64_t n)
{
    if (!s || !ids || n < 1 || (uint64_t)n > SIZE_MAX / sizeof(ef__ident))
        return EF_EINVAL;
    ef_buffer *m = ef_buffer_new((size_t)n * sizeof(ef__ident));
    if (!m)
        return EF_ENOMEM;
    ef__ident *d = ef_buffer_data(m);
    for (int64_t i = 0; i < n; i++) /* read again by identity alone */
        d[i] = (ef__ident){.id = ids[i]};
    ef_buffer_release(s->origin.members);
    s->origin.members = m;
    return EF_OK;
}

int64_t ef_sample_members(const ef_sample *s, ef_sample_id *out, int64_t cap)
{
    size_t n = 0;
    const ef__ident *m =
        s ? ef__ident_members(&(ef__ident){.members = s->origin.members}, &n)
          : NULL;
    for (int64_t i = 0; i < cap && (size_t)i < n; i++)
        out[i] = m[i].id;
    return (int64_t)n;
}
