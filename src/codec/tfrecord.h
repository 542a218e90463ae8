/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord framing: each record is
 *     u64 length (little-endian)
 *     u32 masked CRC-32C of the 8 length bytes
 *     `length` bytes of data
 *     u32 masked CRC-32C of the data
 * and a file is records back to back (gzip-compressed or not: the stream
 * inflates). */
#ifndef EF_CODEC_TFRECORD_H
#define EF_CODEC_TFRECORD_H

#include "io/stream.h"

/* Records longer than this are refused before anything is allocated. */
#define EF__TFRECORD_MAX ((uint64_t)1 << 30)

/* Reads the next record of `s` into a new buffer of exactly its data (the
 * caller owns *out). Returns EF_OK; EF_END when the data ends cleanly where
 * a record would start; EF_EFORMAT for a bad length CRC, a bad data CRC, a
 * length over EF__TFRECORD_MAX or a truncated record (the message names the
 * stream, the record's offset and what was wrong); or the stream's own
 * error. *in_sync says whether the stream still stands at the start of the
 * next record after a failure: 1 after a bad data CRC (only that record is
 * lost), 0 otherwise (the rest of the stream cannot be framed). A length
 * within the format's limit but over `budget` bytes (0: none), the
 * pipeline's memory budget, is EF_ENOMEM before anything is allocated. */
int ef__tfrecord_read(ef__stream *s, uint64_t budget, ef_buffer **out,
                      int *in_sync, ef__err *err);

#endif
