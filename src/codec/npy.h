/* SPDX-License-Identifier: Apache-2.0 */
/* NumPy .npy headers (format versions 1.0, 2.0 and 3.0): the magic, the
 * version, the header length and the Python dict literal that gives the
 * dtype, the order and the shape. A pure parser over bytes in memory, so
 * that it can be fuzzed (tests/fuzz/fuzz_npy.c).
 *
 * Read: the dtypes echoflow has, little-endian ('<', or any order for one
 * byte): b1 u1 i1 i2 u2 i4 i8 f2 f4 f8. Refused, each with a message that
 * names the file, the offset and what was expected: big-endian data (it
 * would need a byte-swapped copy; the data is mapped as it is), Fortran
 * order, structured and other dtypes, a 0-d array (no rows), more than
 * EF_MAX_DIMS dimensions per row, sizes that overflow, and data that does
 * not start aligned to its elements. */
#ifndef EF_CODEC_NPY_H
#define EF_CODEC_NPY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Magic, version and header length: all the first bytes a header needs
 * to say how long it is (a 1.0 header needs 10 of them). */
#define EF__NPY_PREAMBLE 12
/* Headers longer than this are refused (numpy's own limit is 10000). */
#define EF__NPY_MAX_HEADER ((size_t)1 << 20)

typedef struct {
    ef_dtype dtype;
    int ndim;                       /* of the array: rows have ndim - 1 */
    int64_t shape[EF_MAX_DIMS + 1]; /* shape[0]: the rows */
    size_t data_offset;             /* the header's bytes, preamble too */
    uint64_t row_bytes, data_bytes; /* one row; all of them */
} ef__npy_header;

/* From the first n bytes of a file (n >= EF__NPY_PREAMBLE; fewer is
 * "truncated"): the size of the whole header into *total. EF_EFORMAT
 * naming `name` for a bad magic, an unknown version or a length over
 * EF__NPY_MAX_HEADER. */
int ef__npy_preamble(const unsigned char *p, size_t n, const char *name,
                     size_t *total, ef__err *err);
/* Parses the whole header, p[0..n) with n >= the preamble's total, into
 * *h. EF_EFORMAT naming `name`, the offset and what was expected. */
int ef__npy_parse(const unsigned char *p, size_t n, const char *name,
                  ef__npy_header *h, ef__err *err);
/* Whether a file of `size` bytes holds exactly the data h announces:
 * EF_EFORMAT naming the offset where it ends short or the extra starts. */
int ef__npy_check_size(const ef__npy_header *h, uint64_t size, const char *name,
                       ef__err *err);

#endif
