/* SPDX-License-Identifier: Apache-2.0 */
/* The sources that read text files line by line, `text` and `jsonl`: one
 * sample per line with one u8 1-D field (`field`, default "text") holding
 * the document's text. Lines are a format of the record-file kit
 * (record_file.h: the files, shards, identities, errors and checkpoints);
 * each stage's file adds its options and calls ef__lines_create.
 *
 * A line ends at '\n' (the last one may lack it). `text` takes the line
 * as it is, less a '\r' before the '\n'; `jsonl` takes the string value
 * of `key` in the line's JSON object. Blank lines (empty, or for jsonl
 * only whitespace) are no document: they are passed over and counted
 * (stats: blank), and numbered like the others.
 *
 * A line that is not JSON, lacks the key or holds another kind of value
 * is a format error; a line longer than the memory budget (or 1 GiB) too.
 * With on_error=skip such a line is dropped alone (the next starts after
 * its '\n'); a file whose bytes stop making sense (corrupt compressed
 * data, an HTTP transfer given up) is dropped from there on. */
#ifndef EF_STAGES_SOURCES_LINES_H
#define EF_STAGES_SOURCES_LINES_H

#include "stages/sources/record_file.h"

/* The options both stages have: files, compression, field, the stream's
 * and the shard (record_file.h). */
#define EF__LINES_OPTIONS                                                      \
    EF__RECORD_FILE_OPTIONS(                                                   \
        "paths", "text",                                                       \
        "name of the u8 field that holds each document's text")

/* Sets s->state up for a line source; key: the JSON key to read (jsonl),
 * or NULL (text). The stage def takes EF__RECORD_FILE_STAGE. */
int ef__lines_create(ef__stage *s, const ef__opts *o, const char *key,
                     ef__err *err);

#endif
