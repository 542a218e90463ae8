/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the NPY header parser (src/codec/npy.c).
 *
 * Each input is a whole file, parsed as the npy source parses a mapped
 * one: header, then the size check. A failure must be EF_EFORMAT with a
 * message naming the file. A success must describe the bytes: a version
 * and magic as written, a known dtype, 1 to EF_MAX_DIMS + 1 dimensions
 * none negative, the row and data sizes as the exact products, data
 * aligned to its elements, and header plus data exactly the input. Each
 * row's last byte is read, so that a wrong offset shows under ASan. */
#include <string.h>

#include "codec/npy.h"
#include "fuzz.h"

static void check_header(const uint8_t *data, size_t size,
                         const ef__npy_header *h)
{
    CHECK(size >= EF__NPY_PREAMBLE && memcmp(data, "\x93NUMPY", 6) == 0);
    CHECK(data[6] >= 1 && data[6] <= 3 && data[7] == 0);
    size_t esize = ef_dtype_size(h->dtype);
    CHECK(esize > 0 && h->dtype != EF_BF16);
    CHECK(h->ndim >= 1 && h->ndim <= EF_MAX_DIMS + 1);
    CHECK(h->data_offset > EF__NPY_PREAMBLE && h->data_offset <= size);
    CHECK(h->data_offset % esize == 0);
    uint64_t row = esize;
    int empty = 0;
    for (int i = 0; i < h->ndim; i++) {
        CHECK(h->shape[i] >= 0);
        empty |= i > 0 && h->shape[i] == 0;
    }
    for (int i = 1; i < h->ndim && !empty; i++)
        row *= (uint64_t)h->shape[i]; /* below 2^62: no overflow */
    CHECK(h->row_bytes == (empty ? 0 : row));
    CHECK(h->data_bytes == h->row_bytes * (uint64_t)h->shape[0]);
    CHECK(h->data_offset + h->data_bytes == size);
    volatile uint8_t sink = 0;
    for (int64_t r = 0; h->row_bytes && r < h->shape[0]; r++)
        sink ^= data[h->data_offset + (size_t)r * h->row_bytes +
                     h->row_bytes - 1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ef__npy_header h;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__npy_parse(data, size, "fuzz.npy", &h, &err);
    if (rc == EF_OK)
        rc = ef__npy_check_size(&h, size, "fuzz.npy", &err);
    if (rc != EF_OK) {
        CHECK(rc == EF_EFORMAT && err.status == rc);
        fuzz_check_message(err.msg, sizeof err.msg, "fuzz.npy");
        return 0;
    }
    check_header(data, size, &h);
    return 0;
}
