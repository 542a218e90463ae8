/* SPDX-License-Identifier: Apache-2.0 */
/* The sources that read text files line by line, `text` and `jsonl`: one
 * sample per line with one u8 1-D field (`field`, default "text") holding
 * the document's text. What the two share lives here: the files (paths or
 * http(s) URLs, brace-expanded; gzip or zstd inflated), the shards, the
 * errors and the checkpoints; each stage's file adds its options and calls
 * ef__lines_create.
 *
 * A line ends at '\n' (the last one may lack it). `text` takes the line
 * as it is, less a '\r' before the '\n'; `jsonl` takes the string value
 * of `key` in the line's JSON object. Blank lines (empty, or for jsonl
 * only whitespace) are no document: they are passed over and counted
 * (stats: blank). A sample's identity is (file << 32) + the line's number
 * in its file, from 0, blank lines counted, so it names the same line
 * however the text changes elsewhere.
 *
 * Errors name the file, the line and its offset. A line that is not JSON,
 * lacks the key or holds another kind of value is a format error; a line
 * longer than the memory budget (or 1 GiB) too. With on_error=skip such a
 * line is dropped alone (the next starts after its '\n'); a file that
 * cannot be opened, or whose bytes stop making sense (corrupt compressed
 * data, an HTTP transfer given up) is dropped from there on; each counts
 * once and reading goes on.
 *
 * Checkpoints: a sample's origin is its file and the bytes of its line
 * (offsets in the inflated data). The state saves the file being read,
 * the offset of its next line and that line's number; a restore opens the
 * file there (a seek, a Range request, or for compressed data inflating
 * from the start), and fetch() reads one line at its offset the same way,
 * on a stream of its own. */
#ifndef EF_STAGES_SOURCES_LINES_H
#define EF_STAGES_SOURCES_LINES_H

#include "pipeline/stage.h"
#include "stages/sources/stream_options.h"

/* The options both stages have: files, compression, field, the stream's
 * and the shard. */
#define EF__LINES_OPTIONS                                                      \
    {"files",                                                                  \
     EF_OPT_STRING,                                                            \
     NULL,                                                                     \
     "paths or http(s) URLs, space-separated, with {a,b} and {00..99} "        \
     "expansion",                                                              \
     0,                                                                        \
     0},                                                                       \
        {"compression",                                                        \
         EF_OPT_STRING,                                                        \
         "auto",                                                               \
         "auto (gzip or zstd when the data says so), none, gzip or zstd",      \
         0,                                                                    \
         0},                                                                   \
        {"field", EF_OPT_STRING,                                               \
         "text",  "name of the u8 field that holds each document's text",      \
         0,       0},                                                          \
        EF__STREAM_OPTIONS, EF__SHARD_OPTION

/* Sets s->state up for the stage `name` ("text" or "jsonl"); key: the
 * JSON key to read (jsonl), or NULL (text). */
int ef__lines_create(ef__stage *s, const ef__opts *o, const char *name,
                     const char *key, ef__err *err);

int ef__lines_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__lines_reset(ef__stage *s, int64_t epoch, ef__err *err);
void ef__lines_destroy(ef__stage *s);
void ef__lines_stats(const ef__stage *s, ef_stage_stats *out);
int ef__lines_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__lines_restore(ef__stage *s, ef__state_in *in, ef__err *err);
int ef__lines_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                    ef__err *err);
int ef__lines_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err);
const char *ef__lines_part_name(const ef__stage *s, int64_t part);

#endif
