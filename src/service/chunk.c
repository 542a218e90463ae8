/* SPDX-License-Identifier: Apache-2.0 */
/* Chunk headers (see chunk.h). The layout, native byte order:
 *   u32 magic, u32 zero, i64 items, u64 payload bytes
 *   per sample: i64 index, i64 epoch, i32 echo_copy, i32 fresh,
 *               i64 split, i64 position (its place in the split's order),
 *               i32 fields
 *   per field:  u16 name length, the name, u8 dtype, u8 ndim,
 *               i64 shape[ndim], u64 offset, u64 nbytes,
 *               i64 ragged count, i64 lengths[count]
 * Every read is checked against the header's length: a header that does
 * not parse is an error naming the rank it came from, never a crash. */
#include "service/chunk.h"

#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"

#define MAGIC 0x32434645u /* "EFC2" */
/* the fewest header bytes a sample takes: its identity, place and field
 * count */
#define SAMPLE_HEAD 44

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return EF_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need)
        n *= 2;
    void *q = ef__realloc(*p, n * size);
    if (!q)
        return EF_ENOMEM;
    *p = q;
    *cap = n;
    return EF_OK;
}

static int put(ef__chunk_out *c, const void *v, size_t n)
{
    if (grow((void **)&c->head, &c->head_cap, c->head_len + n, 1))
        return EF_ENOMEM;
    memcpy(c->head + c->head_len, v, n);
    c->head_len += n;
    return EF_OK;
}

#define PUT(c, v) put(c, &(v), sizeof(v))

void ef__chunk_out_reset(ef__chunk_out *c)
{
    c->head_len = 0;
    c->nblocks = 0;
    c->payload = 0;
    c->items = 0;
    uint32_t magic = MAGIC, zero = 0;
    int64_t items = 0;
    uint64_t payload = 0;
    /* the counts are written in place as samples are added */
    if (PUT(c, magic) || PUT(c, zero) || PUT(c, items) || PUT(c, payload))
        c->head_len = 0; /* out of memory: add() fails */
}

void ef__chunk_out_free(ef__chunk_out *c)
{
    ef__free(c->head);
    ef__free(c->blocks);
    memset(c, 0, sizeof *c);
}

static uint64_t aligned(uint64_t n)
{
    return (n + EF__CHUNK_ALIGN - 1) / EF__CHUNK_ALIGN * EF__CHUNK_ALIGN;
}

uint64_t ef__chunk_sample_bytes(const ef_sample *s)
{
    uint64_t n = 0;
    ef_tensor t;
    for (int i = 0; i < ef_sample_field_count(s); i++)
        if (ef_sample_field(s, i, &t) == EF_OK)
            n += aligned(t.nbytes);
    return n;
}

int ef__chunk_out_add(ef__chunk_out *c, const ef_sample *s, int64_t epoch,
                      int64_t split, int64_t position, ef__err *err)
{
    if (c->head_len == 0)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    ef_sample_id id = ef_sample_identity(s);
    if (c->payload + ef__chunk_sample_bytes(s) > EF__CHUNK_MAX_PAYLOAD)
        return ef__err_set(err, EF_ESHAPE,
                           "service: item %lld of epoch %lld has %llu bytes "
                           "of fields; one message carries at most %llu",
                           (long long)id.index, (long long)epoch,
                           (unsigned long long)ef__chunk_sample_bytes(s),
                           (unsigned long long)EF__CHUNK_MAX_PAYLOAD);
    int32_t nfields = ef_sample_field_count(s);
    int rc = PUT(c, id.index) || PUT(c, epoch) || PUT(c, id.echo_copy) ||
             PUT(c, id.fresh) || PUT(c, split) || PUT(c, position) ||
             PUT(c, nfields);
    for (int i = 0; !rc && i < nfields; i++) {
        ef_tensor t;
        ef_sample_field(s, i, &t);
        uint16_t name_len = (uint16_t)strlen(t.name);
        uint8_t dtype = (uint8_t)t.dtype, ndim = (uint8_t)t.ndim;
        uint64_t offset = c->payload, nbytes = t.nbytes;
        int64_t nragged = ef_sample_ragged_lengths(s, t.name, NULL, 0);
        rc = PUT(c, name_len) || put(c, t.name, name_len) || PUT(c, dtype) ||
             PUT(c, ndim) ||
             put(c, t.shape, sizeof(int64_t) * (size_t)t.ndim) ||
             PUT(c, offset) || PUT(c, nbytes) || PUT(c, nragged);
        if (!rc && nragged > 0) {
            size_t at = c->head_len, n = sizeof(int64_t) * (size_t)nragged;
            rc = grow((void **)&c->head, &c->head_cap, at + n, 1);
            if (!rc) {
                ef_sample_ragged_lengths(
                    s, t.name, (int64_t *)(void *)(c->head + at), nragged);
                c->head_len += n;
            }
        }
        if (!rc && nbytes) {
            rc = grow((void **)&c->blocks, &c->blocks_cap, c->nblocks + 1,
                      sizeof *c->blocks);
            if (!rc)
                c->blocks[c->nblocks++] =
                    (ef__chunk_block){t.data, offset, nbytes};
        }
        c->payload += aligned(nbytes);
    }
    if (rc)
        return ef__err_set(err, EF_ENOMEM, "service: out of memory");
    c->items++;
    memcpy(c->head + 8, &c->items, sizeof c->items);
    memcpy(c->head + 16, &c->payload, sizeof c->payload);
    return EF_OK;
}

/* ---- reading ------------------------------------------------------ */

typedef struct {
    const unsigned char *p;
    size_t len, at;
    const char *from;
    ef__err *err;
} reader;

static int take(reader *r, void *v, size_t n)
{
    if (r->len - r->at < n)
        return ef__err_set(r->err, EF_EFORMAT,
                           "service: the message from %s ends at byte %zu "
                           "of its header, inside a sample's description",
                           r->from, r->len);
    memcpy(v, r->p + r->at, n);
    r->at += n;
    return EF_OK;
}

#define TAKE(r, v) take(r, &(v), sizeof(v))

static int bad(reader *r, const char *what)
{
    return ef__err_set(r->err, EF_EFORMAT,
                       "service: the message from %s has %s at byte %zu of "
                       "its header",
                       r->from, what, r->at);
}

int ef__chunk_peek(const unsigned char *head, size_t len, int64_t *items,
                   uint64_t *payload, const char *from, ef__err *err)
{
    reader r = {head, len, 0, from, err};
    uint32_t magic = 0, zero = 0;
    if (TAKE(&r, magic) || TAKE(&r, zero) || TAKE(&r, *items) ||
        TAKE(&r, *payload))
        return err->status;
    if (magic != MAGIC || zero != 0)
        return bad(&r, "no chunk header (another program, or another "
                       "version of echoflow?)");
    if (*items < 1 || (uint64_t)*items > len / SAMPLE_HEAD)
        return bad(&r, "an impossible sample count");
    if (*payload > EF__CHUNK_MAX_PAYLOAD)
        return bad(&r, "a payload over 1 GiB");
    return EF_OK;
}

/* One field's description; `name` gets a terminated copy. */
typedef struct {
    char name[EF_MAX_NAME];
    uint8_t dtype, ndim;
    int64_t shape[EF_MAX_DIMS];
    uint64_t offset, nbytes;
    int64_t nragged;
    const unsigned char *lengths; /* nragged i64s, unaligned */
} field_desc;

static int take_field(reader *r, uint64_t payload, field_desc *f)
{
    uint16_t name_len;
    if (TAKE(r, name_len))
        return r->err->status;
    if (name_len == 0 || name_len >= EF_MAX_NAME)
        return bad(r, "a field name of a bad length");
    if (take(r, f->name, name_len))
        return r->err->status;
    f->name[name_len] = '\0';
    if (TAKE(r, f->dtype) || TAKE(r, f->ndim))
        return r->err->status;
    if (f->dtype >= EF__DTYPE_COUNT || f->ndim > EF_MAX_DIMS)
        return bad(r, "a bad dtype or rank");
    if (take(r, f->shape, sizeof(int64_t) * f->ndim) || TAKE(r, f->offset) ||
        TAKE(r, f->nbytes) || TAKE(r, f->nragged))
        return r->err->status;
    if (f->offset > payload || f->nbytes > payload - f->offset ||
        f->offset % EF__CHUNK_ALIGN)
        return bad(r, "a field outside the payload");
    if (f->nragged < 0 || (uint64_t)f->nragged > (r->len - r->at) / 8)
        return bad(r, "a bad ragged count");
    f->lengths = r->p + r->at;
    r->at += 8 * (size_t)f->nragged;
    return EF_OK;
}

/* Walks the header, calling fn on each field of each sample. */
typedef int (*field_fn)(void *arg, int64_t item, const ef_sample_id *id,
                        const int64_t place[2], int32_t nfields,
                        const field_desc *f);

static int walk(const unsigned char *head, size_t len, const char *from,
                ef__err *err, field_fn fn, void *arg)
{
    int64_t items;
    uint64_t payload;
    if (ef__chunk_peek(head, len, &items, &payload, from, err))
        return err->status;
    reader r = {head, len, 24, from, err};
    for (int64_t i = 0; i < items; i++) {
        ef_sample_id id;
        int64_t place[2]; /* split, position */
        int32_t nfields;
        if (TAKE(&r, id.index) || TAKE(&r, id.epoch) ||
            TAKE(&r, id.echo_copy) || TAKE(&r, id.fresh) ||
            TAKE(&r, place[0]) || TAKE(&r, place[1]) || TAKE(&r, nfields))
            return err->status;
        if (nfields < 0 || nfields > EF_MAX_FIELDS)
            return bad(&r, "a bad field count");
        if (place[0] < 0 || place[1] < 0)
            return bad(&r, "a negative split or position");
        if (nfields == 0 && fn(arg, i, &id, place, 0, NULL))
            return err->status;
        for (int32_t k = 0; k < nfields; k++) {
            field_desc f;
            if (take_field(&r, payload, &f) ||
                fn(arg, i, &id, place, nfields, &f))
                return err->status;
        }
    }
    if (r.at != len)
        return bad(&r, "bytes after the last sample");
    return EF_OK;
}

typedef struct {
    ef__chunk_block *v;
    size_t n, cap;
    ef__err *err;
} block_list;

static int add_block(void *arg, int64_t item, const ef_sample_id *id,
                     const int64_t place[2], int32_t nfields,
                     const field_desc *f)
{
    (void)item;
    (void)id;
    (void)place;
    (void)nfields;
    block_list *b = arg;
    if (!f || !f->nbytes)
        return EF_OK;
    /* MPI receives into these: they must not overlap */
    if (b->n && f->offset < b->v[b->n - 1].offset + b->v[b->n - 1].nbytes)
        return ef__err_set(b->err, EF_EFORMAT,
                           "service: a message's fields overlap in its "
                           "payload");
    if (grow((void **)&b->v, &b->cap, b->n + 1, sizeof *b->v))
        return ef__err_set(b->err, EF_ENOMEM, "service: out of memory");
    b->v[b->n++] = (ef__chunk_block){NULL, f->offset, f->nbytes};
    return EF_OK;
}

int ef__chunk_blocks(const unsigned char *head, size_t len,
                     ef__chunk_block **blocks, size_t *n, const char *from,
                     ef__err *err)
{
    block_list b = {NULL, 0, 0, err};
    if (walk(head, len, from, err, add_block, &b)) {
        ef__free(b.v);
        return err->status;
    }
    *blocks = b.v;
    *n = b.n;
    return EF_OK;
}

typedef struct {
    ef_buffer *payload;
    ef_sample **out;
    const char *from;
    ef__err *err;
} sample_maker;

static int add_field(void *arg, int64_t item, const ef_sample_id *id,
                     const int64_t place[2], int32_t nfields,
                     const field_desc *f)
{
    (void)nfields;
    sample_maker *m = arg;
    if (!m->out[item]) {
        m->out[item] = ef_sample_new(*id);
        if (!m->out[item])
            return ef__err_set(m->err, EF_ENOMEM, "service: out of memory");
        /* where the sample lies in the service's epoch: the trainer's
         * checkpoints name what it was handed by split and position */
        m->out[item]->origin.part = place[0];
        m->out[item]->origin.offset = place[1];
    }
    if (!f)
        return EF_OK;
    int rc = ef_sample_add(m->out[item], f->name, (ef_dtype)f->dtype, f->ndim,
                           f->shape, m->payload, f->offset);
    if (rc == EF_OK && ef_sample_field_count(m->out[item]) > 0) {
        ef_tensor t;
        ef_sample_get(m->out[item], f->name, &t);
        if (t.nbytes != f->nbytes)
            rc = EF_EINVAL;
    }
    if (rc == EF_OK && f->nragged > 0) {
        int64_t *lengths = ef__malloc(8 * (size_t)f->nragged);
        if (!lengths)
            return ef__err_set(m->err, EF_ENOMEM, "service: out of memory");
        memcpy(lengths, f->lengths, 8 * (size_t)f->nragged);
        rc = ef_sample_set_ragged(m->out[item], f->name, lengths, f->nragged);
        ef__free(lengths);
    }
    if (rc != EF_OK)
        return ef__err_set(m->err, EF_EFORMAT,
                           "service: the message from %s describes field "
                           "'%s' of its sample %lld inconsistently (shape, "
                           "size or ragged lengths)",
                           m->from, f->name, (long long)item);
    return EF_OK;
}

int ef__chunk_samples(const unsigned char *head, size_t len, ef_buffer *payload,
                      ef_sample **out, int64_t items, const char *from,
                      ef__err *err)
{
    for (int64_t i = 0; i < items; i++)
        out[i] = NULL;
    sample_maker m = {payload, out, from, err};
    int rc = walk(head, len, from, err, add_field, &m);
    for (int64_t i = 0; rc == EF_OK && i < items; i++)
        if (!out[i])
            rc = ef__err_set(err, EF_EFORMAT,
                             "service: the message from %s has fewer "
                             "samples than it says",
                             from);
    if (rc != EF_OK)
        for (int64_t i = 0; i < items; i++) {
            ef_sample_free(out[i]);
            out[i] = NULL;
        }
    return rc;
}
