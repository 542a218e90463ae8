/* SPDX-License-Identifier: Apache-2.0 */
/* A chunk: the samples of one service message (docs/design.md,
 * "Preprocessing service"). A worker sends a chunk as two MPI messages:
 * the header, which describes every sample and field, and the payload,
 * every field's bytes. The payload is sent straight from the samples'
 * buffers and received into one new buffer, each field at an offset
 * aligned to EF__CHUNK_ALIGN, so no side copies a field (MPI may pack
 * them into its own transfer buffers).
 *
 * This file holds no MPI: it writes and reads headers. Ranks are
 * expected to share a byte order and type sizes (one architecture). */
#ifndef EF_SERVICE_CHUNK_H
#define EF_SERVICE_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "echoflow/echoflow.h"

#define EF__CHUNK_ALIGN 16
/* A chunk's payload stays under what one MPI message counts in an int. */
#define EF__CHUNK_MAX_PAYLOAD ((uint64_t)1 << 30)

/* One field's bytes in the payload: where they are on the sender
 * (`data`), and at which offset of the receiver's buffer they land. */
typedef struct {
    const void *data;
    uint64_t offset, nbytes;
} ef__chunk_block;

/* A header being written and the payload's blocks, for one chunk. */
typedef struct {
    unsigned char *head;
    size_t head_len, head_cap;
    ef__chunk_block *blocks;
    size_t nblocks, blocks_cap;
    uint64_t payload; /* bytes of the payload, alignment included */
    int64_t items;
} ef__chunk_out;

/* Starts an empty chunk (keeping the memory of the last). */
void ef__chunk_out_reset(ef__chunk_out *c);
void ef__chunk_out_free(ef__chunk_out *c);
/* Appends sample `s` with `epoch` as its epoch, from `split` of that
 * epoch, where it is the sample at `position` (0 first) of the split's
 * order; the receiver's sample has them as its origin's part and offset
 * (the trainer's checkpoints name samples by them). The sample must outlive
 * the chunk's sending (its fields' bytes are read then). EF_ENOMEM, or
 * EF_ESHAPE for a sample the payload cannot carry (over
 * EF__CHUNK_MAX_PAYLOAD). */
int ef__chunk_out_add(ef__chunk_out *c, const ef_sample *s, int64_t epoch,
                      int64_t split, int64_t position, ef__err *err);
/* The payload's bytes `s` would add (fields and alignment). */
uint64_t ef__chunk_sample_bytes(const ef_sample *s);

/* What a header says: its sample count and payload size, read first so
 * the receiver can allocate the payload's buffer. EF_EFORMAT naming
 * `from` when the header is not one. */
int ef__chunk_peek(const unsigned char *head, size_t len, int64_t *items,
                   uint64_t *payload, const char *from, ef__err *err);
/* The receiver's blocks: the offset and size of every field in the
 * payload, in order, into *blocks (ef__free'd by the caller) and *n. */
int ef__chunk_blocks(const unsigned char *head, size_t len,
                     ef__chunk_block **blocks, size_t *n, const char *from,
                     ef__err *err);
/* The samples of a received chunk, their fields viewing `payload` (each
 * takes a reference), into out[0..items). On error nothing is left
 * allocated. */
int ef__chunk_samples(const unsigned char *head, size_t len, ef_buffer *payload,
                      ef_sample **out, int64_t items, const char *from,
                      ef__err *err);

#endif
