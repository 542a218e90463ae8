/* SPDX-License-Identifier: Apache-2.0 */
/* Service chunks (src/service/chunk.c): samples written into a header
 * and a payload's blocks, moved here as MPI would move them (each block
 * copied to its offset of one buffer), and read back: identities, names,
 * shapes, bytes and ragged lengths come through, and the receiver's
 * samples view the one buffer. A header cut short, or one with a bad
 * magic, count or field, is EF_EFORMAT naming the rank it came from.
 * The settings the ranks compare when they meet agree by value. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "ef_test_util.h"
#include "pipeline/stage.h"
#include "service/chunk.h"

#define FROM "rank 3 (a worker)"

/* Sample i: an image u8 [3,4] of (i + k) bytes, an i64 label, and, on
 * odd i, a ragged u8 field of two rows of lengths (1, 2). */
static ef_sample *make(int64_t i)
{
    ef_sample *s = ef_sample_new((ef_sample_id){
        .index = 100 + i, .echo_copy = (int32_t)i % 2, .fresh = 7});
    int64_t shape[2] = {3, 4}, one = 3;
    uint8_t *img;
    int64_t *label;
    assert_int_equal(
        ef_sample_add_new(s, "image", EF_U8, 2, shape, (void **)&img), EF_OK);
    for (int k = 0; k < 12; k++)
        img[k] = (uint8_t)(i + k);
    assert_int_equal(
        ef_sample_add_new(s, "label", EF_I64, 0, NULL, (void **)&label), EF_OK);
    *label = i * 3;
    if (i % 2) {
        uint8_t *text;
        assert_int_equal(
            ef_sample_add_new(s, "text", EF_U8, 1, &one, (void **)&text),
            EF_OK);
        memcpy(text, "abc", 3);
        int64_t lengths[2] = {1, 2};
        assert_int_equal(ef_sample_set_ragged(s, "text", lengths, 2), EF_OK);
    }
    return s;
}

/* The payload as the receiver gets it: each block at its offset. */
static ef_buffer *transport(const ef__chunk_out *c)
{
    ef_buffer *b = ef_buffer_new(c->payload ? c->payload : 1);
    assert_non_null(b);
    memset(ef_buffer_data(b), 0xee, c->payload);
    for (size_t i = 0; i < c->nblocks; i++)
        memcpy((char *)ef_buffer_data(b) + c->blocks[i].offset,
               c->blocks[i].data, c->blocks[i].nbytes);
    return b;
}

static void test_round_trip(void **state)
{
    (void)state;
    ef__chunk_out c = {0};
    ef__chunk_out_reset(&c);
    ef_sample *in[5];
    ef__err err;
    for (int i = 0; i < 5; i++) {
        in[i] = make(i);
        assert_int_equal(ef__chunk_out_add(&c, in[i], 42, 3, 10 + i, &err),
                         EF_OK);
    }
    int64_t items;
    uint64_t payload;
    assert_int_equal(
        ef__chunk_peek(c.head, c.head_len, &items, &payload, FROM, &err),
        EF_OK);
    assert_int_equal(items, 5);
    assert_int_equal(payload, c.payload);
    ef__chunk_block *blocks;
    size_t n;
    assert_int_equal(
        ef__chunk_blocks(c.head, c.head_len, &blocks, &n, FROM, &err), EF_OK);
    assert_int_equal(n, c.nblocks);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(blocks[k].offset, c.blocks[k].offset);
        assert_int_equal(blocks[k].offset % EF__CHUNK_ALIGN, 0);
    }
    ef__free(blocks);
    ef_buffer *buf = transport(&c);
    ef_sample *out[5];
    assert_int_equal(
        ef__chunk_samples(c.head, c.head_len, buf, out, 5, FROM, &err), EF_OK);
    for (int i = 0; i < 5; i++) {
        ef_sample_id a = ef_sample_identity(in[i]);
        ef_sample_id b = ef_sample_identity(out[i]);
        assert_int_equal(b.index, a.index);
        assert_int_equal(b.epoch, 42); /* the epoch the chunk was made for */
        assert_int_equal(b.echo_copy, a.echo_copy);
        assert_int_equal(b.fresh, a.fresh);
        /* the split and the place in it become the origin's part and
         * offset, by which a trainer's checkpoint names the sample */
        ef__ident where = ef__ident_of(out[i]);
        assert_int_equal(where.part, 3);
        assert_int_equal(where.offset, 10 + i);
        ef__ident_clear(&where);
        assert_int_equal(ef_sample_field_count(out[i]),
                         ef_sample_field_count(in[i]));
        for (int k = 0; k < ef_sample_field_count(in[i]); k++) {
            ef_tensor ta, tb;
            ef_sample_field(in[i], k, &ta);
            ef_sample_field(out[i], k, &tb);
            assert_string_equal(tb.name, ta.name);
            assert_int_equal(tb.dtype, ta.dtype);
            assert_int_equal(tb.ndim, ta.ndim);
            for (int d = 0; d < ta.ndim; d++)
                assert_int_equal(tb.shape[d], ta.shape[d]);
            assert_int_equal(tb.nbytes, ta.nbytes);
            assert_memory_equal(tb.data, ta.data, ta.nbytes);
            /* no copy on this side: the fields view the one buffer */
            assert_ptr_equal(tb.buffer, buf);
        }
        int64_t la[4], lb[4];
        int64_t na = ef_sample_ragged_lengths(in[i], "text", la, 4);
        assert_int_equal(ef_sample_ragged_lengths(out[i], "text", lb, 4), na);
        for (int64_t k = 0; k < na; k++)
            assert_int_equal(lb[k], la[k]);
    }
    ef_buffer_release(buf);
    for (int i = 0; i < 5; i++) {
        ef_sample_free(in[i]);
        ef_sample_free(out[i]);
    }
    ef__chunk_out_free(&c);
}

/* Every header cut short is refused, naming the rank, with nothing
 * left allocated (the leak checker of the sanitizer build watches). */
static void test_cut_headers(void **state)
{
    (void)state;
    ef__chunk_out c = {0};
    ef__chunk_out_reset(&c);
    ef__err err;
    ef_sample *s[2] = {make(0), make(1)};
    for (int i = 0; i < 2; i++)
        assert_int_equal(ef__chunk_out_add(&c, s[i], 0, 0, i, &err), EF_OK);
    ef_buffer *buf = transport(&c);
    for (size_t len = 0; len < c.head_len; len++) {
        unsigned char *head = ef__malloc(len ? len : 1);
        memcpy(head, c.head, len);
        /* the counts say the whole chunk: read it whole or not at all */
        ef_sample *out[2];
        int rc = ef__chunk_samples(head, len, buf, out, 2, FROM, &err);
        assert_int_equal(rc, EF_EFORMAT);
        assert_non_null(strstr(err.msg, FROM));
        ef__free(head);
    }
    ef_buffer_release(buf);
    ef_sample_free(s[0]);
    ef_sample_free(s[1]);
    ef__chunk_out_free(&c);
}

static void test_bad_headers(void **state)
{
    (void)state;
    ef__chunk_out c = {0};
    ef__chunk_out_reset(&c);
    ef__err err;
    ef_sample *s = make(0);
    assert_int_equal(ef__chunk_out_add(&c, s, 0, 0, 0, &err), EF_OK);
    int64_t items;
    uint64_t payload;
    /* another program's message */
    unsigned char *h = ef__malloc(c.head_len);
    memcpy(h, c.head, c.head_len);
    h[0] ^= 1;
    assert_int_equal(
        ef__chunk_peek(h, c.head_len, &items, &payload, FROM, &err),
        EF_EFORMAT);
    assert_non_null(strstr(err.msg, "no chunk header"));
    /* more samples than the header could describe */
    memcpy(h, c.head, c.head_len);
    int64_t many = 1000000;
    memcpy(h + 8, &many, sizeof many);
    assert_int_equal(
        ef__chunk_peek(h, c.head_len, &items, &payload, FROM, &err),
        EF_EFORMAT);
    assert_non_null(strstr(err.msg, "impossible sample count"));
    /* a payload smaller than the fields it holds */
    memcpy(h, c.head, c.head_len);
    uint64_t small = 8;
    memcpy(h + 16, &small, sizeof small);
    ef__chunk_block *blocks = NULL;
    size_t n = 0;
    assert_int_equal(ef__chunk_blocks(h, c.head_len, &blocks, &n, FROM, &err),
                     EF_EFORMAT);
    assert_non_null(strstr(err.msg, "outside the payload"));
    assert_null(blocks);
    /* bytes after the last sample */
    unsigned char *longer = ef__malloc(c.head_len + 1);
    memcpy(longer, c.head, c.head_len);
    longer[c.head_len] = 0;
    assert_int_equal(
        ef__chunk_blocks(longer, c.head_len + 1, &blocks, &n, FROM, &err),
        EF_EFORMAT);
    assert_non_null(strstr(err.msg, "after the last sample"));
    ef__free(longer);
    ef__free(h);
    ef_sample_free(s);
    ef__chunk_out_free(&c);
}

/* Settings that mean the same agree however they are written; others
 * do not. */
static void test_settings_compared_by_value(void **state)
{
    (void)state;
    static const char *const same[][3] = {
        {"--splits", "6", "6"},
        {"--splits", "6", "06"},
        {"--seed", "1e3", "1000"},
        {"the spec", "range:n=8 | batch:size=2", "range:n=8|batch:size=2"},
        {"the spec", "range:n=8 | batch:2", " range : n = 08 | batch:size=2 "},
        {"the spec", "range:n=8 | map:fn=noop,threads=2",
         "range:n=8 | map:fn=noop"}, /* threads: speed, not samples */
    };
    static const char *const differ[][3] = {
        {"--splits", "6", "(default)"},
        {"--splits", "6", "7"},
        {"--on-error", "fail", "skip"},
        {"the spec", "range:n=8 | batch:2", "range:n=9 | batch:2"},
        {"the spec", "range:n=8 | batch:2", "range:n=8"},
        {"the spec", "range:n=8 | nosuch", "range:n=8 |nosuch"},
        {"--data", "range:n=8", "range:n=8 "}, /* only the spec is parsed */
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        if (!ef__setting_same(same[i][0], same[i][1], same[i][2]))
            fail_msg("%s: '%s' and '%s' should agree", same[i][0], same[i][1],
                     same[i][2]);
    for (size_t i = 0; i < sizeof differ / sizeof differ[0]; i++)
        if (ef__setting_same(differ[i][0], differ[i][1], differ[i][2]))
            fail_msg("%s: '%s' and '%s' should differ", differ[i][0],
                     differ[i][1], differ[i][2]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_cut_headers),
        cmocka_unit_test(test_bad_headers),
        cmocka_unit_test(test_settings_compared_by_value),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
