/* SPDX-License-Identifier: Apache-2.0 */
/* Streaming tar reading: member after member, front to back, over a byte
 * stream (file, gzip, HTTP), never seeking.
 *
 * Understood: POSIX ustar headers (name with its prefix), the GNU format
 * ('L' long names), pax extended headers ('x': the `path` and `size`
 * keys), sizes in octal or base-256. Every header's checksum is verified.
 * Only regular files are returned; directories (also regular entries
 * named with a trailing '/', as pre-POSIX tars wrote them), links,
 * devices, FIFOs, pax global headers ('g'), GNU long link names ('K') and
 * unknown types are skipped. Sparse files (GNU 'S', pax GNU.sparse.*) are
 * refused rather than read wrongly. The archive ends at two zero blocks, a
 * zero block and the end of the data, or a clean end of the data at a
 * block boundary; whatever follows the end is not read. */
#ifndef EF_CODEC_TAR_H
#define EF_CODEC_TAR_H

#include <stdint.h>

#include "io/stream.h"

#define EF__TAR_BLOCK 512
/* Members larger than this are refused before anything is allocated. */
#define EF__TAR_MAX_MEMBER ((uint64_t)1 << 30)
/* The same for a pax extended header or a GNU long name. */
#define EF__TAR_MAX_META ((uint64_t)1 << 20)

typedef struct ef__tar ef__tar;

typedef struct {
    const char *name;     /* path in the archive; owned by the reader,
                             valid until its next call */
    uint64_t size;        /* bytes of data */
    uint64_t offset;      /* where the member's headers start (its first
                             extended header, if any) */
    uint64_t data_offset; /* where its data starts */
} ef__tar_member;

/* A reader over `s`, which it borrows (close the stream after the
 * reader). The caller owns *out (ef__tar_close). */
int ef__tar_open(ef__tar **out, ef__stream *s, ef__err *err);

/* The next regular file into *m: EF_OK, EF_END at the end of the archive,
 * or EF_EFORMAT (a bad checksum, an unreadable header, a truncation, a
 * member over EF__TAR_MAX_MEMBER: the message names the stream, the offset
 * and the member when known) or the stream's error. The data of the
 * previous member, if not read, is skipped. After an error the reader can
 * only be closed. */
int ef__tar_next(ef__tar *t, ef__tar_member *m, ef__err *err);

/* The data of the member the last ef__tar_next() returned, into a new
 * buffer of exactly its size (the caller owns *out). At most once per
 * member. A stream that ends early is EF_EFORMAT naming the member. */
int ef__tar_read(ef__tar *t, ef_buffer **out, ef__err *err);
/* As ef__tar_read, with the buffer allocated at the member's size before
 * its data is read (ef__stream_read_buffer_whole): for a caller that
 * charged that size to the memory budget first. */
int ef__tar_read_whole(ef__tar *t, ef_buffer **out, ef__err *err);

void ef__tar_close(ef__tar *t);

#endif
