/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for service chunk headers (src/service/chunk.c): what a
 * trainer reads from a worker's message.
 *
 * The input is a header. Reading it must either fail with EF_EFORMAT and
 * a message naming where it came from, or give the samples it describes,
 * their fields inside a payload of the size the header says (ASan
 * watches the buffer's edges). Samples read are written into a chunk
 * again and read back from it: the second reading must give the same
 * identities, names, shapes and ragged lengths. Any violation aborts. */
#include <stdlib.h>
#include <string.h>

#include "core/sample.h"
#include "fuzz.h"
#include "service/chunk.h"

#define FROM "rank 7"

static void same(const ef_sample *a, const ef_sample *b)
{
    ef_sample_id x = ef_sample_identity(a), y = ef_sample_identity(b);
    CHECK(x.index == y.index && x.epoch == y.epoch &&
          x.echo_copy == y.echo_copy && x.fresh == y.fresh);
    /* the split and position: the origin's part and offset */
    CHECK(a->origin.part == b->origin.part &&
          a->origin.offset == b->origin.offset);
    CHECK(ef_sample_field_count(a) == ef_sample_field_count(b));
    for (int k = 0; k < ef_sample_field_count(a); k++) {
        ef_tensor ta, tb;
        CHECK(ef_sample_field(a, k, &ta) == EF_OK);
        CHECK(ef_sample_field(b, k, &tb) == EF_OK);
        CHECK(strcmp(ta.name, tb.name) == 0 && ta.dtype == tb.dtype &&
              ta.ndim == tb.ndim && ta.nbytes == tb.nbytes);
        CHECK(memcmp(ta.data, tb.data, ta.nbytes) == 0);
        CHECK(ef_sample_ragged_lengths(a, ta.name, NULL, 0) ==
              ef_sample_ragged_lengths(b, tb.name, NULL, 0));
    }
}

/* Writes the samples into a chunk, moves its payload and reads it. */
static void round_trip(ef_sample **s, int64_t n)
{
    ef__chunk_out c = {0};
    ef__chunk_out_reset(&c);
    ef__err err;
    for (int64_t i = 0; i < n; i++)
        CHECK(ef__chunk_out_add(&c, s[i], ef_sample_identity(s[i]).epoch,
                                s[i]->origin.part, s[i]->origin.offset,
                                &err) == EF_OK);
    ef_buffer *b = ef_buffer_new(c.payload ? c.payload : 1);
    CHECK(b != NULL);
    for (size_t i = 0; i < c.nblocks; i++)
        memcpy((char *)ef_buffer_data(b) + c.blocks[i].offset, c.blocks[i].data,
               c.blocks[i].nbytes);
    ef_sample **again = malloc((size_t)n * sizeof *again);
    CHECK(again != NULL);
    CHECK(ef__chunk_samples(c.head, c.head_len, b, again, n, FROM, &err) ==
          EF_OK);
    for (int64_t i = 0; i < n; i++) {
        same(s[i], again[i]);
        ef_sample_free(again[i]);
    }
    free(again);
    ef_buffer_release(b);
    ef__chunk_out_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t items;
    uint64_t payload;
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__chunk_peek(data, size, &items, &payload, FROM, &err);
    if (rc != EF_OK) {
        CHECK(rc == EF_EFORMAT);
        fuzz_check_message(err.msg, sizeof err.msg, FROM);
        return 0;
    }
    ef__chunk_block *blocks = NULL;
    size_t n = 0;
    rc = ef__chunk_blocks(data, size, &blocks, &n, FROM, &err);
    CHECK(rc == EF_OK || rc == EF_EFORMAT);
    for (size_t i = 0; rc == EF_OK && i < n; i++) {
        CHECK(blocks[i].offset + blocks[i].nbytes <= payload);
        CHECK(i == 0 ||
              blocks[i].offset >= blocks[i - 1].offset + blocks[i - 1].nbytes);
    }
    free(blocks);
    /* samples over a big payload would only time the allocation */
    if (payload > ((uint64_t)16 << 20))
        return 0;
    ef_buffer *b = ef_buffer_new(payload ? payload : 1);
    ef_sample **s = malloc((size_t)items * sizeof *s);
    CHECK(b != NULL && s != NULL);
    memset(ef_buffer_data(b), 0x5a, payload);
    rc = ef__chunk_samples(data, size, b, s, items, FROM, &err);
    CHECK(rc == EF_OK || rc == EF_EFORMAT);
    if (rc == EF_OK) {
        round_trip(s, items);
        for (int64_t i = 0; i < items; i++)
            ef_sample_free(s[i]);
    } else {
        fuzz_check_message(err.msg, sizeof err.msg, FROM);
        for (int64_t i = 0; i < items; i++)
            CHECK(s[i] == NULL);
    }
    free(s);
    ef_buffer_release(b);
    return 0;
}
