/* SPDX-License-Identifier: Apache-2.0 */
/* WebDataset grouping: consecutive tar members with the same key form one
 * sample. The key is the member's path up to the first dot of its last
 * component, the field name the rest after that dot, lowercased:
 *     "a/b/x.seg.PNG" -> key "a/b/x", field "seg.png"
 * Each field is a u8 1-D tensor viewing the member's own buffer (no copy),
 * and every sample also gets `__key__` (the key) and `__url__` (the
 * shard's path or URL), u8 1-D, the text without a NUL.
 *
 * A sample's identity is (shard << 32) + its position in the shard (key
 * groups counted from 0, malformed ones included), so the same sample has
 * the same index whatever order the shards are read in. Its origin
 * (checkpoints, core/sample.h) is where it can be read again: part = the
 * shard, offset = where its first member's headers start, end = the
 * offset after its last member's data and padding. Single-threaded: one
 * grouper per shard being read. */
#ifndef EF_CODEC_WDS_H
#define EF_CODEC_WDS_H

#include <stdint.h>

#include "core/err.h"

#define EF__WDS_SHARD_SHIFT 32

typedef struct {
    const char *shard_name; /* path or URL, for messages; borrowed */
    ef_buffer *url;         /* the __url__ bytes, shared by all samples */
    int64_t shard, epoch;
    int64_t position; /* key groups begun so far; a reader that starts
                         part way into a shard sets it after init */
    ef_sample *cur;   /* the sample being built; NULL if none or bad */
    int active;       /* a key group is open (good or bad) */
    char *key;        /* its key */
    size_t key_len, key_cap;
    uint64_t key_offset; /* where its first member starts */
    uint64_t key_end;    /* the offset after its last member so far */
} ef__wds;

/* A grouper for shard number `shard` at `url` (copied; also used in
 * messages) in pass `epoch`. Free it with ef__wds_free. */
int ef__wds_init(ef__wds *g, const char *url, int64_t shard, int64_t epoch,
                 ef__err *err);

/* Adds the member `name` whose header starts at `offset` and whose data
 * and padding end at `end`, with its data in `data` (borrowed: the
 * sample takes a reference of its own). When the
 * member starts a new key, the previous sample, if it was good, is handed
 * over in *done (the caller owns it); otherwise *done is NULL. *done may be
 * set even when an error is returned.
 *
 * EF_EFORMAT when the member makes its sample malformed: a field name over
 * EF_MAX_NAME - 1 bytes or none (no dot), a field twice, more than
 * EF_MAX_FIELDS fields with __key__ and __url__. The message names the
 * shard, the member and its offset. The whole sample is then dropped: its
 * later members are taken in silently, and grouping goes on with the next
 * key, so a caller that skips bad samples simply calls on. */
int ef__wds_add(ef__wds *g, const char *name, ef_buffer *data, uint64_t offset,
                uint64_t end, ef_sample **done, ef__err *err);

/* Whether the member `name` belongs to the key group being read (good
 * or malformed): 0 when it starts a new one, whose first member hands the
 * one before over. A reader that asks before reading the member's data
 * can hand that sample over first with ef__wds_finish. */
int ef__wds_continues(const ef__wds *g, const char *name);

/* At the end of the shard, or before the first member of a new key
 * group: the sample being grouped into *done, if it was good. The next
 * member begins a new group. */
void ef__wds_finish(ef__wds *g, ef_sample **done);

/* Frees the grouper and the sample being built, if any. */
void ef__wds_free(ef__wds *g);

#endif
