/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the IDX parser (src/codec/idx.c).
 *
 * Each input is a whole file. On failure the status and the message are
 * checked; on success the header is checked against the bytes (type, shape,
 * offsets, exact size, record size without overflow) and the data is
 * converted to host order on a copy, element by element. Any violation
 * aborts, which libFuzzer reports as a crash. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/idx.h"
#include "fuzz.h"

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* *acc *= x, returning 0 (and leaving *acc alone) on overflow. */
static int mul_ok(uint64_t *acc, uint64_t x)
{
    if (x && *acc > UINT64_MAX / x)
        return 0;
    *acc *= x;
    return 1;
}

static void check_failure(int rc, const ef__err *err)
{
    CHECK(rc == EF_EFORMAT);
    CHECK(err->status == rc);
    fuzz_check_message(err->msg, sizeof err->msg, NULL);
}

static void check_header(const unsigned char *data, size_t size,
                         const ef__idx_header *h)
{
    static const unsigned char codes[] = {
        [EF_U8] = 0x08, [EF_I32] = 0x0C, [EF_F32] = 0x0D};
    CHECK(size >= 4 && data[0] == 0 && data[1] == 0);
    CHECK(h->dtype == EF_U8 || h->dtype == EF_I32 || h->dtype == EF_F32);
    CHECK(data[2] == codes[h->dtype]);
    CHECK(h->ndim == data[3]);
    CHECK(h->ndim >= 1 && h->ndim <= EF__IDX_MAX_DIMS);
    CHECK(h->header_bytes == 4 + 4 * (size_t)h->ndim);
    CHECK(h->header_bytes <= size);
    for (int i = 0; i < h->ndim; i++)
        CHECK(h->dims[i] == (int64_t)be32(data + 4 + 4 * i));

    /* a record is esize * dims[1] * ... bytes: it must be representable
     * (a caller computes offsets header_bytes + i * item_bytes) */
    uint64_t esize = ef_dtype_size(h->dtype), record = esize;
    int fits = 1;
    for (int i = 1; i < h->ndim; i++)
        fits = fits && mul_ok(&record, (uint64_t)h->dims[i]);
    CHECK(fits && h->item_bytes == record);
    CHECK(record <= (UINT64_C(1) << 30)); /* the cap idx.c documents */

    /* and the file holds exactly dims[0] records after the header */
    uint64_t body = record;
    CHECK(mul_ok(&body, (uint64_t)h->dims[0]));
    CHECK(body == size - h->header_bytes);
}

static void check_to_host(const unsigned char *data, size_t size,
                          const ef__idx_header *h)
{
    unsigned char *copy = malloc(size);
    if (!copy)
        return;
    memcpy(copy, data, size);
    ef__idx_to_host(copy, h);
    size_t esize = ef_dtype_size(h->dtype);
    CHECK(memcmp(copy, data, h->header_bytes) == 0);
    if (esize == 1) {
        CHECK(memcmp(copy, data, size) == 0);
    } else {
        CHECK(esize == 4 && (size - h->header_bytes) % 4 == 0);
        for (size_t off = h->header_bytes; off < size; off += 4) {
            uint32_t v;
            memcpy(&v, copy + off, 4);
            CHECK(v == be32(data + off));
        }
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ef__idx_header h;
    ef__err err;
    memset(&h, 0, sizeof h);
    ef__err_clear(&err);
    int rc = ef__idx_parse(data, size, "fuzz.idx", &h, &err);
    if (rc != EF_OK) {
        check_failure(rc, &err);
        return 0;
    }
    check_header(data, size, &h);
    check_to_host(data, size, &h);
    return 0;
}
