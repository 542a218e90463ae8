/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the tar reader (src/codec/tar.c) and WebDataset grouping
 * (src/codec/wds.c).
 *
 * Each input is a whole archive, read from a memory stream twice: once
 * reading every member's data, once skipping it. Both passes must see the
 * same members and end the same way (the end, or an EF_EFORMAT naming the
 * stream). Read data must be exactly the input's bytes at the member's
 * data offset. The members of the first pass are grouped into samples as
 * the tar source does under on_error=skip, and every sample is checked:
 * __key__ and __url__, at most EF_MAX_FIELDS u8 1-D fields with lowercase
 * names, identities counting up, origins (where a checkpoint reads the
 * sample again) block-aligned, inside the input and in order. Any
 * violation aborts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/tar.h"
#include "codec/wds.h"
#include "core/sample.h"
#include "fuzz.h"

#define NAME "fuzz.tar"
#define MAX_SEEN 256

typedef struct {
    uint64_t size, offset, data_offset;
    size_t name_hash;
} seen;

static size_t hash(const char *s)
{
    size_t h = 5381;
    while (*s)
        h = h * 33 + (unsigned char)*s++;
    return h;
}

static void check_failure(int rc, const ef__err *err)
{
    CHECK(rc == EF_EFORMAT);
    CHECK(err->status == rc);
    fuzz_check_message(err->msg, sizeof err->msg, NAME);
}

/* The samples so far: the last identity and where the last one ended. */
typedef struct {
    int64_t index;
    int64_t end;
} order;

static void check_sample(ef_sample *s, order *last, size_t size)
{
    ef_sample_id id = ef_sample_identity(s);
    CHECK(id.index > last->index && id.epoch == 3 && id.echo_copy == 0);
    CHECK((id.index >> EF__WDS_SHARD_SHIFT) == 7);
    last->index = id.index;
    const ef__origin *o = &s->origin;
    CHECK(o->part == 7 && o->members == NULL);
    CHECK(o->offset % EF__TAR_BLOCK == 0 && o->end % EF__TAR_BLOCK == 0);
    CHECK(o->offset >= last->end && o->end > o->offset);
    CHECK((uint64_t)o->end <= size);
    last->end = o->end;
    int n = ef_sample_field_count(s);
    CHECK(n >= 3 && n <= EF_MAX_FIELDS);
    ef_tensor t;
    CHECK(ef_sample_get(s, "__key__", &t) == EF_OK);
    CHECK(ef_sample_get(s, "__url__", &t) == EF_OK);
    CHECK(t.nbytes == strlen(NAME) && memcmp(t.data, NAME, t.nbytes) == 0);
    for (int i = 0; i < n; i++) {
        CHECK(ef_sample_field(s, i, &t) == EF_OK);
        CHECK(t.dtype == EF_U8 && t.ndim == 1);
        CHECK((size_t)t.shape[0] == t.nbytes);
        size_t len = strlen(t.name);
        CHECK(len > 0 && len < EF_MAX_NAME);
        for (size_t k = 0; k < len; k++)
            CHECK(!(t.name[k] >= 'A' && t.name[k] <= 'Z'));
    }
    ef_sample_free(s);
}

/* Pass 1: reads every member, checks its bytes, groups the members. */
static int read_pass(const uint8_t *data, size_t size, seen *members,
                     int *count)
{
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.compression = 0;
    ef__stream *s;
    ef__err err;
    ef__err_clear(&err);
    CHECK(ef__stream_open_memory(&s, data, size, NAME, &o, &err) == EF_OK);
    ef__tar *t;
    CHECK(ef__tar_open(&t, s, &err) == EF_OK);
    ef__wds g;
    CHECK(ef__wds_init(&g, NAME, 7, 3, &err) == EF_OK);
    order last = {-1, 0};
    ef_sample *done;
    ef__tar_member m;
    int rc;
    *count = 0;
    while ((rc = ef__tar_next(t, &m, &err)) == EF_OK) {
        CHECK(m.name != NULL);
        CHECK(m.size <= EF__TAR_MAX_MEMBER);
        CHECK(m.offset % EF__TAR_BLOCK == 0);
        CHECK(m.data_offset % EF__TAR_BLOCK == 0);
        CHECK(m.data_offset >= m.offset + EF__TAR_BLOCK);
        CHECK(m.data_offset <= size);
        if (*count < MAX_SEEN)
            members[*count] =
                (seen){m.size, m.offset, m.data_offset, hash(m.name)};
        (*count)++;
        ef_buffer *b;
        rc = ef__tar_read(t, &b, &err);
        if (rc != EF_OK) {
            CHECK(b == NULL);
            break;
        }
        CHECK(ef_buffer_size(b) == m.size);
        CHECK(m.data_offset + m.size <= size);
        CHECK(m.size == 0 ||
              memcmp(ef_buffer_data(b), data + m.data_offset, m.size) == 0);
        ef__err gerr;
        ef__err_clear(&gerr);
        int grc = ef__wds_add(&g, m.name, b, m.offset, ef__stream_offset(s),
                              &done, &gerr);
        if (done)
            check_sample(done, &last, size);
        if (grc != EF_OK) {
            check_failure(grc, &gerr);
            CHECK(strstr(gerr.msg, "member") != NULL);
        }
        ef_buffer_release(b);
    }
    if (rc == EF_END) {
        ef__wds_finish(&g, &done);
        if (done)
            check_sample(done, &last, size);
        CHECK(ef__tar_next(t, &m, &err) == EF_END); /* sticky */
    } else {
        check_failure(rc, &err);
    }
    ef__wds_free(&g);
    ef__tar_close(t);
    ef__stream_close(s);
    return rc;
}

/* Pass 2: skips every member's data; must see what pass 1 saw. */
static void skip_pass(const uint8_t *data, size_t size, const seen *members,
                      int count, int rc1)
{
    ef__stream_opts o;
    ef__stream_opts_init(&o);
    o.compression = 0;
    ef__stream *s;
    ef__err err;
    ef__err_clear(&err);
    CHECK(ef__stream_open_memory(&s, data, size, NAME, &o, &err) == EF_OK);
    ef__tar *t;
    CHECK(ef__tar_open(&t, s, &err) == EF_OK);
    ef__tar_member m;
    int rc, n = 0;
    while ((rc = ef__tar_next(t, &m, &err)) == EF_OK) {
        if (n < MAX_SEEN && n < count) {
            CHECK(members[n].size == m.size);
            CHECK(members[n].offset == m.offset);
            CHECK(members[n].data_offset == m.data_offset);
            CHECK(members[n].name_hash == hash(m.name));
        }
        n++;
    }
    /* pass 1 stops at a member whose data is cut; pass 2 notices the same
     * cut one call later, when skipping it */
    CHECK(n == count);
    CHECK((rc == EF_END) == (rc1 == EF_END));
    if (rc != EF_END)
        check_failure(rc, &err);
    ef__tar_close(t);
    ef__stream_close(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static seen members[MAX_SEEN];
    int count;
    int rc = read_pass(data, size, members, &count);
    skip_pass(data, size, members, count, rc);
    return 0;
}
