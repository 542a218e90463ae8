/* SPDX-License-Identifier: Apache-2.0 */
/* TFRecord reading (see tfrecord.h). */
#include "codec/tfrecord.h"

#include "common/crc32c.h"
#include "io/stream_buffer.h"

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

int ef__tfrecord_read(ef__stream *s, uint64_t budget, ef_buffer **out,
                      int *in_sync, ef__err *err)
{
    *out = NULL;
    *in_sync = 0;
    const char *name = ef__stream_name(s);
    uint64_t start = ef__stream_offset(s);
    unsigned char head[12];
    int rc = ef__stream_read_full(s, head, sizeof head,
                                  "TFRecord header (length and its CRC)", err);
    if (rc != EF_OK)
        return rc; /* EF_END here is the clean end of the data */
    uint32_t stored = le32(head + 8);
    uint32_t computed = ef__crc32c_mask(ef__crc32c(0, head, 8));
    if (stored != computed)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: bad length CRC of the record at offset %llu: "
                           "stored 0x%08x, computed 0x%08x (masked CRC-32C of "
                           "the 8 length bytes); not a TFRecord file, or "
                           "corrupt",
                           name, (unsigned long long)start, (unsigned)stored,
                           (unsigned)computed);
    uint64_t len = le64(head);
    if (len > EF__TFRECORD_MAX)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: the record at offset %llu claims %llu bytes, "
                           "over the %llu-byte limit",
                           name, (unsigned long long)start,
                           (unsigned long long)len,
                           (unsigned long long)EF__TFRECORD_MAX);
    if (budget && len > budget)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: the record at offset %llu: %llu bytes, over "
                           "the memory budget of %llu bytes (raise it: "
                           "--memory-budget, memory_budget= in Python, "
                           "ef_pipeline_set_memory_budget)",
                           name, (unsigned long long)start,
                           (unsigned long long)len,
                           (unsigned long long)budget);
    ef_buffer *data;
    rc = ef__stream_read_buffer(s, len, "TFRecord data", &data, err);
    if (rc != EF_OK)
        return rc;
    unsigned char tail[4];
    rc = ef__stream_read_full(s, tail, sizeof tail, "TFRecord data CRC", err);
    if (rc == EF_END)
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: truncated record at offset %llu: the data ends "
                         "before its CRC at offset %llu",
                         name, (unsigned long long)start,
                         (unsigned long long)ef__stream_offset(s));
    if (rc != EF_OK) {
        ef_buffer_release(data);
        return rc;
    }
    stored = le32(tail);
    computed =
        ef__crc32c_mask(ef__crc32c(0, ef_buffer_data(data), (size_t)len));
    if (stored != computed) {
        ef_buffer_release(data);
        *in_sync = 1;
        return ef__err_set(err, EF_EFORMAT,
                           "%s: bad data CRC of the record at offset %llu "
                           "(%llu bytes): stored 0x%08x, computed 0x%08x",
                           name, (unsigned long long)start,
                           (unsigned long long)len, (unsigned)stored,
                           (unsigned)computed);
    }
    *out = data;
    return EF_OK;
}
