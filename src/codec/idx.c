/* IDX parsing (see idx.h). */
#include "codec/idx.h"

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

int ef__idx_parse(const unsigned char *data, size_t size, const char *path,
                  ef__idx_header *h, ef__err *err)
{
    if (size < 4)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated IDX header: %zu bytes, expected at "
                           "least 4",
                           path, size);
    if (data[0] != 0 || data[1] != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: not an IDX file: bad magic at offset 0 "
                           "(expected 00 00, got %02x %02x)",
                           path, data[0], data[1]);
    if (!type_of(data[2], &h->dtype))
        return ef__err_set(err, EF_EFORMAT,
                           "%s: unsupported IDX type code 0x%02x at offset 2 "
                           "(expected 0x08 u8, 0x0C i32 or 0x0D f32)",
                           path, data[2]);
    h->ndim = data[3];
    if (h->ndim < 1 || h->ndim > EF__IDX_MAX_DIMS)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: IDX file with %d dimensions at offset 3 "
                           "(expected 1 to %d)",
                           path, h->ndim, EF__IDX_MAX_DIMS);
    h->header_bytes = 4 + 4 * (size_t)h->ndim;
    if (size < h->header_bytes)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated IDX header: %zu bytes, expected %zu",
                           path, size, h->header_bytes);
    /* dims are u32, at most 7 of them: products can overflow 64 bits. A
     * record (dims after the first) is capped at 1 GiB, which also bounds
     * every offset computed later; the whole is checked against the file
     * size step by step. */
    size_t esize = ef_dtype_size(h->dtype);
    uint64_t record = esize;
    for (int i = 0; i < h->ndim; i++)
        h->dims[i] = be32(data + 4 + 4 * i);
    for (int i = 1; i < h->ndim; i++) {
        if (h->dims[i] && record > (UINT64_C(1) << 30) / (uint64_t)h->dims[i])
            return ef__err_set(err, EF_EFORMAT,
                               "%s: IDX records too large: dimension %d is "
                               "%lld, records over 1 GiB are not supported",
                               path, i, (long long)h->dims[i]);
        record *= (uint64_t)h->dims[i];
    }
    uint64_t items = 1;
    uint64_t limit = (uint64_t)size / esize + 1;
    for (int i = 0; i < h->ndim; i++) {
        if (h->dims[i] && items > limit / (uint64_t)h->dims[i]) {
            items = limit; /* more than the file could hold */
            break;
        }
        items *= (uint64_t)h->dims[i];
    }
    if (items >= limit)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated: the header announces %llu records, "
                           "more data than the file's %zu bytes",
                           path, (unsigned long long)h->dims[0], size);
    uint64_t expected = h->header_bytes + items * esize;
    if (size < expected)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated: the header announces %llu "
                           "records, expected %llu bytes, the file has %zu",
                           path, (unsigned long long)h->dims[0],
                           (unsigned long long)expected, size);
    if (size > expected)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %zu unexpected bytes after the data at offset "
                           "%llu",
                           path, size - (size_t)expected,
                           (unsigned long long)expected);
    h->item_bytes = (size_t)record;
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
