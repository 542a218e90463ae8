/* SPDX-License-Identifier: Apache-2.0 */
/* Sample internals: an array of fields, each a view into a
 * reference-counted buffer. The first EF__INLINE_FIELDS live in the
 * header, so the common sample is one allocation (or none, from a pool);
 * a sample with more moves them all to the heap. Headers are copied by
 * value when cloned; payload bytes are shared, names are interned
 * (names.h). */
#ifndef EF_CORE_SAMPLE_H
#define EF_CORE_SAMPLE_H

#include "echoflow/echoflow.h"

typedef struct {
    const char *name; /* interned (names.h): never freed */
    ef_dtype dtype;
    int ndim;
    int64_t shape[EF_MAX_DIMS];
    ef_buffer *buf; /* owned reference */
    size_t offset;
    size_t nbytes;
    /* a ragged field of a batch (ef_sample_ragged_lengths): the examples'
     * first dimensions, i64 [n], an owned reference; NULL otherwise */
    ef_buffer *lengths;
    /* variable-length by nature (a text, an encoded file): batch lays it
     * out ragged even when a batch's lengths happen to be equal, so that
     * a consumer always gets a list (ef_sample_set_variable). Non-zero
     * for such a field: EF__VARIABLE, or EF__TEXT / EF__TEXT_LIST for one
     * marked as text (ef_sample_set_text) */
    unsigned char variable;
} ef__field;

/* ef__field.variable: EF_NOT_TEXT .. EF_TEXT_LIST, one past */
enum { EF__VARIABLE = 1, EF__TEXT = 1 + EF_TEXT, EF__TEXT_LIST = 1 + EF_TEXT_LIST };

/* Fields a sample holds without an allocation of their own. */
#define EF__INLINE_FIELDS 8

typedef struct ef__sample_pool ef__sample_pool;

/* Where a sample can be read again (checkpoints, state.h): the part of
 * the input (a file or shard number) and the byte offsets of its record,
 * [offset, end); a source that addresses records by id.index alone leaves
 * them 0. A batch lists its examples in `members` (an array of
 * ef__ident, below), shared by its copies. */
typedef struct {
    int64_t part, offset, end;
    ef_buffer *members; /* owned reference; NULL unless a batch */
} ef__origin;

/* An item's identity: enough to read it again (see ef__origin), as
 * checkpoints (state.h) name the items they hold. A batch's members are
 * the identities of its examples. */
typedef struct ef__ident {
    ef_sample_id id;
    int64_t part, offset, end;
    ef_buffer *members; /* owned reference; an array of ef__ident, or NULL */
} ef__ident;

/* The identity of `s`, taking a reference on its members (the caller
 * drops it with ef__ident_clear). */
ef__ident ef__ident_of(const ef_sample *s);
/* Drops d's reference on its members. */
void ef__ident_clear(ef__ident *d);
/* A batch's members: the array in d->members (borrowed from d), and its
 * count in *n. */
const ef__ident *ef__ident_members(const ef__ident *d, size_t *n);

struct ef_sample {
    ef_sample_id id;
    ef__origin origin;
    int nfields;
    int cap;          /* fields' room: EF__INLINE_FIELDS, or more on the heap */
    ef__field *fields; /* inline_fields, or an owned heap array */
    /* the pool the header returns to when freed (NULL: malloc'd), and the
     * link while it waits there; a copy leaves them alone. Before the
     * inline fields, so that a one-field sample spans as few cache lines
     * as it can: a shuffle buffer's picks touch them at random. */
    ef__sample_pool *pool;
    ef_sample *next_free;
    ef__field inline_fields[EF__INLINE_FIELDS];
};

/* Payload bytes of a sample: the sum of its fields' views. Inline: the
 * budget checks it for every item a stage hands on. */
static inline uint64_t ef__sample_bytes(const ef_sample *s)
{
    uint64_t n = 0;
    for (int i = 0; i < s->nfields; i++)
        n += s->fields[i].nbytes;
    return n;
}

/* A free list of sample headers for one producer (the echo stage), so
 * that steady-state cloning allocates nothing. The owner takes headers
 * with ef__sample_pool_clone (one thread at a time); ef_sample_free, on
 * any thread and at any time, puts a pooled header back instead of
 * freeing it. Headers may outlive the owner's release: the pool then
 * lives until the last one comes back, and that free releases it.
 *
 * The returned headers are a lock-free stack that any thread pushes onto
 * (one CAS) and only the owner empties, all at once (atomic exchange, so
 * no ABA), at most once per 16 handouts. Releasing swaps a "closed" mark
 * into the stack's head: later frees see it and free their header,
 * counting down the headers still out, and the count that reaches 0 frees
 * the pool. The pool keeps about as many headers as were ever out at
 * once, plus 16. */
/* A new pool, owned by the caller (ef__sample_pool_release); NULL when
 * out of memory. */
ef__sample_pool *ef__sample_pool_new(void);
/* The owner lets go: spare headers are freed now, the pool itself when
 * the last header out comes back (or now). Accepts NULL. */
void ef__sample_pool_release(ef__sample_pool *p);
/* Like ef_sample_clone, with the header taken from `p`; the caller owns
 * the copy (ef_sample_free). Owner only. NULL when out of memory. */
ef_sample *ef__sample_pool_clone(ef__sample_pool *p, const ef_sample *s);

/* Like ef__sample_pool_clone, but takes no buffer reference: the caller
 * took them ahead (ef__sample_refs_add on the sample copied), one per
 * field for each copy to be made. Owner only. NULL when out of memory. */
ef_sample *ef__sample_pool_copy(ef__sample_pool *p, const ef_sample *s);
/* n more references on each of s's buffers (one atomic add per field),
 * owed to copies made later with ef__sample_pool_copy. */
void ef__sample_refs_add(ef_sample *s, unsigned n);
/* Drops n references on each of s's buffers: copies owed that will not
 * be made. */
void ef__sample_refs_drop(ef_sample *s, unsigned n);

/* Gives dst the origin of src (a transform's output can be read again as
 * its input was). */
void ef__sample_origin_copy(ef_sample *dst, const ef_sample *src);

/* Makes field i ragged: `lengths` (i64, one per example, summing to the
 * field's first dimension) is retained by the sample. */
void ef__sample_set_lengths(ef_sample *s, int i, ef_buffer *lengths);
/* Adds a view of field f of another sample to s: the same bytes, ragged
 * lengths and variable mark (a stage passing a field through). */
int ef__sample_add_field(ef_sample *s, const ef__field *f);
/* ef_sample_add, the field marked variable-length (ef_sample_set_variable):
 * what a source reads as a text or an encoded file. */
int ef__sample_add_variable(ef_sample *s, const char *name, ef_dtype dtype,
                            int64_t length, ef_buffer *buf, size_t offset);
/* Removes field i, dropping its references; later fields move down. */
void ef__sample_remove(ef_sample *s, int i);

/* Index of the field called `name`, or -1. */
int ef__sample_find(const ef_sample *s, const char *name);
/* Number of elements of a shape (1 for ndim 0). */
int64_t ef__shape_count(int ndim, const int64_t *shape);
/* Writes "[28,28]" into buf. */
void ef__shape_format(char *buf, size_t cap, int ndim, const int64_t *shape);

#endif
