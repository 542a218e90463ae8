/* SPDX-License-Identifier: Apache-2.0 */
/* Batch slabs: one buffer per batch that an ordered map stage feeding
 * `batch` writes its outputs into, so that the batch is a view of it
 * instead of a copy of its parts (batch.c).
 *
 * Item `seq` of the pass (the map numbers items as they are pulled) goes
 * into slot seq % n of the slab of batch seq / n. Whichever worker first needs a
 * slab creates it; the table keeps it open until its n slots were handed
 * out, or until no worker can still ask for it (see ef__slabs_take), or
 * until ef__slabs_clear. A slot is handed out once: only the worker
 * holding `seq` asks for it, and a slab that left the table is never
 * found again (a later ask makes a new one). Whatever goes wrong (another
 * size, a full table, no memory) only means no slot: the caller makes a
 * buffer of its own, and batch copies as it would anyway.
 *
 * Memory budget: slabs are not charged, as the ordered ring's outputs are
 * not (map.c); a slab holds the bytes of outputs the ring and the batch
 * being built hold anyway, plus the slots not yet written, and the batch
 * made of it is charged wherever a queue downstream takes it, as a
 * copied batch is.
 *
 * Thread-safe: `mu` guards the table; it is a leaf lock (nothing else is
 * taken under it). */
#ifndef EF_PIPELINE_SLABS_H
#define EF_PIPELINE_SLABS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "echoflow/echoflow.h"

typedef struct {
    uint64_t batch;  /* seq / n of its slots */
    ef_buffer *buf;  /* the table's reference */
    size_t nbytes;   /* of one slot */
    uint64_t handed; /* slots handed out */
} ef__slab;

typedef struct {
    pthread_mutex_t mu;
    uint64_t n;      /* slots per slab; 0: off */
    uint64_t window; /* seqs a worker may still hold behind the newest */
    ef__slab *open;
    size_t nopen, cap;
} ef__slabs;

/* Off until ef__slabs_on. */
void ef__slabs_init(ef__slabs *t);
/* Slabs of n slots for a map whose workers hold item numbers at most
 * `window` apart (its ring's capacity in items: runs times their most
 * items). Before the workers start.
 * EF_ENOMEM leaves slabs off. */
int ef__slabs_on(ef__slabs *t, uint64_t n, uint64_t window);
/* The slot for `seq`, to fill with nbytes: a new reference on the slab
 * (the caller's) and the slot's offset in it; NULL when there is none. */
ef_buffer *ef__slabs_take(ef__slabs *t, uint64_t seq, size_t nbytes,
                          size_t *offset);
/* Drops every open slab (a new pass numbers from 0 again). The workers
 * must be stopped. */
void ef__slabs_clear(ef__slabs *t);
void ef__slabs_destroy(ef__slabs *t);

#endif
