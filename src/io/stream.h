/* SPDX-License-Identifier: Apache-2.0 */
/* Byte streams read front to back in pieces: local files, memory, and
 * http:// or https:// URLs (libcurl), with gzip or zstd inflated on the
 * fly. Parsers of container formats (tar, TFRecord) and of lines of text
 * read through this interface, so the same code serves a disk, a web
 * server and a fuzzer's bytes.
 *
 * A stream is used by one thread at a time. */
#ifndef EF_IO_STREAM_H
#define EF_IO_STREAM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct ef__stream ef__stream;

/* Compressions a stream inflates. */
enum {
    EF__COMP_SNIFF = -1, /* told by the data's first bytes */
    EF__COMP_NONE = 0,
    EF__COMP_GZIP = 1,
    EF__COMP_ZSTD = 2,
};

typedef struct {
    int compression;  /* EF__COMP_*: the data's compression, or
                         EF__COMP_SNIFF to tell it by the data's first
                         bytes (the gzip or zstd magic) */
    int tries;        /* HTTP: give up after this many failed attempts
                         in a row that delivered no byte (the one that
                         failed after data counts as the first) */
    double timeout_s; /* HTTP: connect timeout; an attempt fails when
                         it gets no byte for this long, when a reply's
                         headers are not complete this long after the
                         request, or when its body comes slower than
                         1 KiB/s over this long */
    double backoff_s; /* HTTP: wait before the first retry, doubled
                         after each failed attempt */
    const atomic_int *cancelled; /* optional: once non-zero, reads stop
                                    with EF_ECANCELED */
    int max_inflate;  /* compressed data: past the first EF__INFLATE_FREE
                         bytes, inflating more than this many bytes per
                         compressed byte is EF_EFORMAT (a decompression
                         bomb); 0: no limit */
    int regular_only; /* a local path must name a regular file: anything
                         else (a FIFO, a device, a directory) is EF_EIO
                         naming it, refused before a byte is read, as a
                         FIFO without a writer would block for good */
} ef__stream_opts;

/* Inflated bytes never checked against max_inflate: small files may
 * compress as well as they like. */
#define EF__INFLATE_FREE ((uint64_t)64 << 20)

typedef struct {
    uint64_t raw_bytes; /* bytes received from the file or the network
                           (none before an ef__stream_open_at offset that
                           was skipped by seeking or a Range request) */
    uint64_t retries;   /* HTTP attempts after the first */
    double read_s;      /* time spent inside reads */
} ef__stream_stats;

/* The defaults: gzip sniffed, 5 tries, 30 s timeout, 0.1 s backoff, no
 * inflation limit. */
void ef__stream_opts_init(ef__stream_opts *o);

/* Whether `location` is an http(s) URL, which ef__stream_open fetches,
 * rather than a path. */
int ef__is_url(const char *location);

/* Opens a path or an http(s) URL. `o` may be NULL for the defaults. The
 * caller owns *out (ef__stream_close). Errors name the location. */
int ef__stream_open(ef__stream **out, const char *location,
                    const ef__stream_opts *o, ef__err *err);
/* Like ef__stream_open, but the first byte read is byte `offset` of the
 * (inflated) data, and offsets count from the data's start as if the
 * bytes before had been read. Plain data is not read before the offset:
 * a local file seeks, a URL is asked for "Range: bytes=offset-".
 * Compressed data cannot seek, so it is inflated from its start and the
 * bytes before the offset are dropped; so is a pipe, and a URL whose
 * compression is not known (EF__COMP_SNIFF: the magic is in the first
 * bytes, which are not asked for). Data that ends before the offset is EF_EFORMAT (EF_EIO
 * over HTTP) naming the location, its size and the offset. */
int ef__stream_open_at(ef__stream **out, const char *location,
                       const ef__stream_opts *o, uint64_t offset,
                       ef__err *err);
/* Like ef__stream_open_at, for a record known to lie in [offset, end)
 * (end > offset): the data ends at `end` even where the file goes on,
 * and a URL of data known to be plain (EF__COMP_NONE) is asked for "Range:
 * bytes=offset-(end - 1)" only. Asked for the rest of the file, a server
 * would send as much of it as the connection holds before the reader
 * has its record and closes: megabytes for a record of a few kilobytes.
 * Data that ends before `end` ends the stream there, as usual. */
int ef__stream_open_range(ef__stream **out, const char *location,
                          const ef__stream_opts *o, uint64_t offset,
                          uint64_t end, ef__err *err);
/* A stream over `size` bytes at `data`, which must outlive it; `name`
 * stands for the location in messages. */
int ef__stream_open_memory(ef__stream **out, const void *data, size_t size,
                           const char *name, const ef__stream_opts *o,
                           ef__err *err);
void ef__stream_close(ef__stream *s);

/* Reads up to n bytes into buf; *got < n only at the end of the data
 * (*got == 0: nothing left). */
int ef__stream_read(ef__stream *s, void *buf, size_t n, size_t *got,
                    ef__err *err);
/* Reads exactly n bytes: EF_OK; EF_END when the data ended before the
 * first byte; EF_EFORMAT when it ended part way (the message names the
 * location, the offset and `what` was being read). */
int ef__stream_read_full(ef__stream *s, void *buf, size_t n, const char *what,
                         ef__err *err);
/* Discards n bytes, with read_full's statuses. */
int ef__stream_skip(ef__stream *s, uint64_t n, const char *what, ef__err *err);

/* Bytes of (inflated) data read so far: the offset of the next byte. */
uint64_t ef__stream_offset(const ef__stream *s);
/* Raw bytes (before inflating) of the file or resource consumed so far:
 * where the data stops making sense when a parser fails. */
uint64_t ef__stream_raw_offset(const ef__stream *s);
/* Raw size of the file or resource; -1 while unknown (a pipe, an HTTP
 * reply without a length). */
int64_t ef__stream_size(const ef__stream *s);
/* The data's compression, EF__COMP_*: EF__COMP_SNIFF while not yet known
 * (before the first read of a stream that sniffs). */
int ef__stream_compression(const ef__stream *s);
/* The path or URL given to open. */
const char *ef__stream_name(const ef__stream *s);
void ef__stream_get_stats(const ef__stream *s, ef__stream_stats *out);

#endif
