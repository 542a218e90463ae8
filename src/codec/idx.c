/* SPDX-License-Identifier: Apache-2.0 */
/* IDX parsing (see idx.h). */
#include "codec/idx.h"

#include <stdio.h>
#include <string.h>

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

static int type_of(unsigned code, ef_dtype *dtype)
{
    switch (code) {
    case 0x08:
        *dtype = EF_U8;
        return 1;
    case 0x0C:
        *dtype = EF_I32;
        return 1;
    case 0x0D:
        *dtype = EF_F32;
        return 1;
    }
    return 0;
}

/* The three ways the first four bytes can be wrong share one message
 * head, so that every one says "bad magic" and shows the bytes. */
static int bad_magic(const unsigned char m[4], const char *path,
                     const char *what, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: not an IDX file: bad magic %02x %02x %02x %02x at "
                       "offset 0: %s",
                       path, m[0], m[1], m[2], m[3], what);
}

int ef__idx_parse_magic(const unsigned char m[4], const char *path,
                        ef__idx_header *h, ef__err *err)
{
    char what[128];
    if (m[0] != 0 || m[1] != 0)
        return bad_magic(m, path, "expected 00 00 first", err);
    if (!type_of(m[2], &h->dtype)) {
        snprintf(what, sizeof what,
                 "type code 0x%02x at offset 2 (expected 0x08 u8, 0x0C i32 or "
                 "0x0D f32)",
                 m[2]);
        return bad_magic(m, path, what, err);
    }
    h->ndim = m[3];
    if (h->ndim < 1 || h->ndim > EF__IDX_MAX_DIMS) {
        snprintf(what, sizeof what,
                 "%d dimensions at offset 3 (expected 1 to %d)", h->ndim,
                 EF__IDX_MAX_DIMS);
        return bad_magic(m, path, what, err);
    }
    h->header_bytes = 4 + 4 * (size_t)h->ndim;
    return EF_OK;
}

int ef__idx_parse_dims(const unsigned char *d, const char *path,
                       ef__idx_header *h, ef__err *err)
{
    /* dims are u32, at most 7 of them: products can overflow 64 bits. A
     * record (dims after the first) is capped at 1 GiB, so the data, fewer
     * than 2^32 records, stays under 2^62 bytes: no overflow below. */
    size_t esize = ef_dtype_size(h->dtype);
    uint64_t record = esize;
    for (int i = 0; i < h->ndim; i++)
        h->dims[i] = be32(d + 4 * i);
    for (int i = 1; i < h->ndim; i++) {
        if (h->dims[i] && record > (UINT64_C(1) << 30) / (uint64_t)h->dims[i])
            return ef__err_set(err, EF_EFORMAT,
                               "%s: IDX records too large: dimension %d is "
                               "%lld, records over 1 GiB are not supported",
                               path, i, (long long)h->dims[i]);
        record *= (uint64_t)h->dims[i];
    }
    h->item_bytes = (size_t)record;
    h->data_bytes = (uint64_t)h->dims[0] * record;
    if (h->data_bytes > SIZE_MAX - h->header_bytes)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: the IDX header announces %lld records, %llu "
                           "bytes: more than this machine can address",
                           path, (long long)h->dims[0],
                           (unsigned long long)h->data_bytes);
    return EF_OK;
}

int ef__idx_parse(const unsigned char *data, size_t size, const char *path,
                  ef__idx_header *h, ef__err *err)
{
    if (size < 4)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated IDX header: %zu bytes, expected at "
                           "least 4",
                           path, size);
    int rc = ef__idx_parse_magic(data, path, h, err);
    if (rc != EF_OK)
        return rc;
    if (size < h->header_bytes)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated IDX header: %zu bytes, expected %zu",
                           path, size, h->header_bytes);
    rc = ef__idx_parse_dims(data + 4, path, h, err);
    if (rc != EF_OK)
        return rc;
    uint64_t expected = h->header_bytes + h->data_bytes;
    if (size < expected)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated: the header announces %llu "
                           "records, expected %llu bytes, the data ends at "
                           "offset %zu",
                           path, (unsigned long long)h->dims[0],
                           (unsigned long long)expected, size);
    if (size > expected)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %zu bytes of extra data after the announced "
                           "records, at offset %llu",
                           path, size - (size_t)expected,
                           (unsigned long long)expected);
    return EF_OK;
}

void ef__idx_to_host(unsigned char *data, const ef__idx_header *h)
{
    size_t esize = ef_dtype_size(h->dtype);
    if (esize == 1)
        return;
    uint64_t n = (uint64_t)h->dims[0] * h->item_bytes / esize;
    unsigned char *p = data + h->header_bytes;
    for (uint64_t i = 0; i < n; i++, p += 4) {
        uint32_t v = be32(p);
        memcpy(p, &v, 4);
    }
}
