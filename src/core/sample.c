/* Samples: named tensor fields viewing reference-counted buffers. */
#include "core/sample.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"

static const struct {
    size_t size;
    const char *name;
} dtypes[EF__DTYPE_COUNT] = {
    [EF_U8] = {1, "u8"},
    [EF_I32] = {4, "i32"},
    [EF_I64] = {8, "i64"},
    [EF_F32] = {4, "f32"},
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

ef_sample *ef_sample_new(ef_sample_id id)
{
    ef_sample *s = ef__malloc(sizeof *s);
    if (!s)
        return NULL;
    s->id = id;
    s->nfields = 0;
    s->pool = NULL;
    return s;
}

/* ---- the header pool (see sample.h) ------------------------------- */

/* The bias `live` carries while the owner holds the pool: more than the
 * headers that will ever be handed out, so the count cannot reach 0
 * before the owner lets go. */
#define POOL_OWNER_BIAS (UINT64_C(1) << 62)

struct ef__sample_pool {
    _Atomic(ef_sample *) returned; /* pushed by any thread, emptied by the
                                      owner (or the last one out) */
    _Atomic uint64_t live;
    ef_sample *spare; /* owner only: headers taken from `returned` */
    uint64_t handed;  /* owner only: headers handed out, ever */
};

ef__sample_pool *ef__sample_pool_new(void)
{
    ef__sample_pool *p = ef__calloc(1, sizeof *p);
    if (!p)
        return NULL;
    atomic_init(&p->returned, NULL);
    atomic_init(&p->live, POOL_OWNER_BIAS);
    return p;
}

static void free_list(ef_sample *s)
{
    while (s) {
        ef_sample *next = s->next_free;
        ef__free(s);
        s = next;
    }
}

/* Called by whoever brought `live` to 0: nobody else can reach p. */
static void pool_destroy(ef__sample_pool *p)
{
    free_list(
        atomic_exchange_explicit(&p->returned, NULL, memory_order_acquire));
    ef__free(p);
}

void ef__sample_pool_release(ef__sample_pool *p)
{
    if (!p)
        return;
    free_list(p->spare);
    p->spare = NULL;
    /* live becomes handed - returned: the headers still out */
    uint64_t add = p->handed - POOL_OWNER_BIAS;
    if (atomic_fetch_add_explicit(&p->live, add, memory_order_acq_rel) + add ==
        0)
        pool_destroy(p);
}

/* Puts a pooled header back; frees the pool when it was the last out and
 * the owner has let go. */
static void pool_return(ef_sample *s)
{
    ef__sample_pool *p = s->pool;
    ef_sample *head = atomic_load_explicit(&p->returned, memory_order_relaxed);
    do
        s->next_free = head;
    while (!atomic_compare_exchange_weak_explicit(
        &p->returned, &head, s, memory_order_release, memory_order_relaxed));
    /* s may be reused from here on; p lives until our count goes */
    if (atomic_fetch_sub_explicit(&p->live, 1, memory_order_acq_rel) == 1)
        pool_destroy(p);
}

void ef_sample_free(ef_sample *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nfields; i++)
        ef_buffer_release(s->fields[i].buf);
    if (s->pool)
        pool_return(s);
    else
        ef__free(s);
}

/* Copies the header's fields in use into c and takes a reference on each
 * buffer: samples are cloned once per echo. */
static ef_sample *clone_into(ef_sample *c, const ef_sample *s)
{
    size_t used =
        offsetof(ef_sample, fields) + (size_t)s->nfields * sizeof(s->fields[0]);
    memcpy(c, s, used);
    for (int i = 0; i < c->nfields; i++)
        ef_buffer_retain(c->fields[i].buf);
    return c;
}

ef_sample *ef_sample_clone(const ef_sample *s)
{
    ef_sample *c = ef__malloc(sizeof *c);
    if (!c)
        return NULL;
    c->pool = NULL;
    return clone_into(c, s);
}

ef_sample *ef__sample_pool_clone(ef__sample_pool *p, const ef_sample *s)
{
    ef_sample *c = p->spare;
    if (!c)
        c = atomic_exchange_explicit(&p->returned, NULL, memory_order_acquire);
    if (c) {
        p->spare = c->next_free;
    } else {
        c = ef__malloc(sizeof *c);
        if (!c)
            return NULL;
        c->pool = p;
    }
    p->handed++;
    return clone_into(c, s);
}

int ef__sample_find(const ef_sample *s, const char *name)
{
    for (int i = 0; i < s->nfields; i++)
        if (strcmp(s->fields[i].name, name) == 0)
            return i;
    return -1;
}

ef_status ef_sample_add(ef_sample *s, const char *name, ef_dtype dtype, int ndim,
                  const int64_t *shape, ef_buffer *buf, size_t offset)
{
    if (!s || !name || !buf || !name[0] || strlen(name) >= EF_MAX_NAME ||
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
    ef__field *f = &s->fields[s->nfields++];
    memset(f, 0, sizeof *f);
    strcpy(f->name, name);
    f->dtype = dtype;
    f->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        f->shape[i] = shape[i];
    f->buf = ef_buffer_retain(buf);
    f->offset = offset;
    f->nbytes = nbytes;
    return EF_OK;
}

ef_status ef_sample_add_new(ef_sample *s, const char *name, ef_dtype dtype, int ndim,
                      const int64_t *shape, void **data)
{
    if (ndim < 0 || ndim > EF_MAX_DIMS || (ndim > 0 && !shape))
        return EF_EINVAL;
    int64_t count = ef__shape_count(ndim, shape);
    if (count < 0)
        return EF_EINVAL;
    ef_buffer *b = ef_buffer_new((size_t)count * ef_dtype_size(dtype));
    if (!b)
        return EF_ENOMEM;
    int rc = ef_sample_add(s, name, dtype, ndim, shape, b, 0);
    if (rc == EF_OK && data)
        *data = ef_buffer_data(b);
    ef_buffer_release(b);
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

ef_sample_id ef_sample_identity(const ef_sample *s)
{
    return s->id;
}
