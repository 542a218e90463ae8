/* SPDX-License-Identifier: Apache-2.0 */
/* The IDX format of MNIST and Fashion-MNIST: a big-endian header (two zero
 * bytes, a type code, the number of dimensions, then each dimension as a
 * u32) followed by the data, big-endian, row-major. */
#ifndef EF_CODEC_IDX_H
#define EF_CODEC_IDX_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define EF__IDX_MAX_DIMS (EF_MAX_DIMS + 1)

typedef struct {
    ef_dtype dtype;
    int ndim;
    int64_t dims[EF__IDX_MAX_DIMS];
    size_t header_bytes; /* data starts here */
    size_t item_bytes;   /* bytes per record (product of dims[1..]) */
    uint64_t data_bytes; /* the data the header announces, after it */
} ef__idx_header;

/* The header in two steps, so that a reader can check each part before
 * it reads the next and never reads more than the header announces.
 *
 * Checks the first 4 bytes: two zero bytes, a known type code, 1 to
 * EF__IDX_MAX_DIMS dimensions; sets dtype, ndim and header_bytes. Errors
 * say "bad magic" and show the 4 bytes. */
int ef__idx_parse_magic(const unsigned char m[4], const char *path,
                        ef__idx_header *h, ef__err *err);
/* Reads the header_bytes - 4 bytes of dimensions at `d` (after the magic);
 * sets dims, item_bytes and data_bytes. Records over 1 GiB are refused. */
int ef__idx_parse_dims(const unsigned char *d, const char *path,
                       ef__idx_header *h, ef__err *err);

/* Parses and checks a whole IDX file held in memory: a known type code, a
 * sane number of dimensions, and a size that matches the header exactly.
 * `path` only names the file in messages. */
int ef__idx_parse(const unsigned char *data, size_t size, const char *path,
                  ef__idx_header *h, ef__err *err);

/* Converts the data of a parsed file from big-endian to host order in
 * place (a no-op for one-byte types). */
void ef__idx_to_host(unsigned char *data, const ef__idx_header *h);

#endif
