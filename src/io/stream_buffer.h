/* SPDX-License-Identifier: Apache-2.0 */
/* Reading a length-prefixed piece of a stream (a tar member, a TFRecord
 * record) into a buffer of its own, without trusting the length: a header
 * can claim a gigabyte in a file of a few hundred bytes. */
#ifndef EF_IO_STREAM_BUFFER_H
#define EF_IO_STREAM_BUFFER_H

#include <stdint.h>

#include "io/stream.h"

/* Reads exactly n bytes of `s` into a new buffer (the caller owns *out).
 * Memory grows with the bytes that actually arrive (from 1 MiB, doubling),
 * so a false length costs at most twice what the stream holds. A stream
 * that ends early is EF_EFORMAT naming the stream, the offset where the
 * piece starts, `what` it is, and how many bytes came; *out is then NULL.
 * The caller bounds n (a sane cap) before calling. */
int ef__stream_read_buffer(ef__stream *s, uint64_t n, const char *what,
                           ef_buffer **out, ef__err *err);
/* As ef__stream_read_buffer, with the buffer allocated at n bytes before
 * anything is read: for a caller that holds n bytes of the memory budget
 * for it already, which bounds what a false length costs. One allocation
 * instead of a growing one, which leaves a thread's allocator arena with
 * free pieces of every size it grew through. */
int ef__stream_read_buffer_whole(ef__stream *s, uint64_t n, const char *what,
                                 ef_buffer **out, ef__err *err);

#endif
