/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for TFRecord framing (src/codec/tfrecord.c) and CRC-32C
 * (src/common/crc32c.c).
 *
 * Each input is a whole file, read from a memory stream record by record
 * as the tfrecord source does under on_error=skip: after a failure that
 * leaves the stream in sync (a bad data CRC) reading goes on. Every record
 * is checked against the input itself: its length field, its bytes, and
 * both CRCs recomputed bit by bit (so the table-driven CRC is checked
 * against a plain one). A failure must be EF_EFORMAT naming the stream; a
 * clean end must fall exactly at the end of the input. Any violation
 * aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/tfrecord.h"
#include "common/crc32c.h"
#include "fuzz.h"

#define NAME "fuzz.tfrecord"

/* CRC-32C one bit at a time: slow, plain, and independent of the tables. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return ~c;
}

static uint32_t masked(const uint8_t *p, size_t n)
{
    uint32_t c = crc_bitwise(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the table-driven CRC in pieces equals the plain one */
    if (size > 0) {
        size_t cut = data[0] % (size + 1);
        CHECK(ef__crc32c(ef__crc32c(0, data, cut), data + cut, size - cut) ==
              crc_bitwise(data, size));
    }

    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.compression = 0;
    ef__stream *s;
    ef__err err;
    ef__err_clear(&err);
    CHECK(ef__stream_open_memory(&s, data, size, NAME, &o, &err) == EF_OK);
    for (;;) {
        uint64_t at = ef__stream_offset(s);
        ef_buffer *b = (ef_buffer *)&err; /* must be reset to NULL */
        int in_sync = -1;
        int rc = ef__tfrecord_read(s, 0, &b, &in_sync, &err);
        if (rc == EF_END) {
            CHECK(at == size && b == NULL);
            break;
        }
        if (rc == EF_OK) {
            CHECK(b != NULL && at + 16 <= size);
            uint64_t len = get_le(data + at, 8);
            CHECK(ef_buffer_size(b) == len && at + 16 + len <= size);
            CHECK(get_le(data + at + 8, 4) == masked(data + at, 8));
            CHECK(len == 0 ||
                  memcmp(ef_buffer_data(b), data + at + 12, len) == 0);
            CHECK(get_le(data + at + 12 + len, 4) ==
                  masked(data + at + 12, len));
            CHECK(ef__stream_offset(s) == at + 16 + len);
            ef_buffer_release(b);
            continue;
        }
        CHECK(b == NULL);
        CHECK(rc == EF_EFORMAT && err.status == rc);
        CHECK(strstr(err.msg, NAME) != NULL);
        CHECK(in_sync == 0 || in_sync == 1);
        if (!in_sync)
            break;
        /* only a bad data CRC keeps the stream in sync, past the record */
        CHECK(strstr(err.msg, "data CRC") != NULL);
        uint64_t len = get_le(data + at, 8);
        CHECK(ef__stream_offset(s) == at + 16 + len);
        CHECK(get_le(data + at + 12 + len, 4) != masked(data + at + 12, len));
    }
    ef__stream_close(s);
    return 0;
}
