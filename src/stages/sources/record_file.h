/* SPDX-License-Identifier: Apache-2.0 */
/* The kit of the sources that read files of records one after another
 * (tfrecord; text and jsonl through lines.c): the driver below does the
 * files, shards, errors, checkpoints and statistics once, and a format
 * (ef__record_format) says how its records are framed.
 *
 * `files` lists the files (paths or http(s) URLs, brace-expanded, see
 * paths.h), read in order on the pulling thread through streams (gzip or
 * zstd inflated as `compression` says, HTTP retried and resumed);
 * shard=I/N keeps the files f with f % N == I. Each record that holds a
 * sample gives one with one u8 1-D field, `field`. A sample's identity is
 * (file << 32) + the record's number in its file, from 0, records that
 * hold no sample (a blank line) counted too, so it names the same record
 * however the data changes elsewhere; its origin is the file and the
 * bytes of its record (offsets in the inflated data).
 *
 * Errors name the stage, the file (its number, and its path unless the
 * message does already), the record and what was wrong. Under
 * on_error=skip a bad record that the format could still frame is dropped
 * alone (ef__stage_skip); a file that cannot be opened, or whose records
 * can no longer be framed, is dropped from there on (ef__stage_abandon);
 * each counts once and reading goes on.
 *
 * Checkpoints: the state saves the file list, the part and the files'
 * compression as seen (checkpoint.h), then the file being read, the
 * offset of its next record and that record's number; a restore opens
 * the file there (a seek, a Range request, or for compressed data
 * inflating from the start), and fetch() reads one record at its offset
 * the same way, on a stream of its own.
 *
 * A new format: a state struct whose first member is an ef__record_file,
 * an ef__record_format, a create() that calls ef__record_file_create,
 * the options EF__RECORD_FILE_OPTIONS and a stage def with
 * EF__RECORD_FILE_STAGE. */
#ifndef EF_STAGES_SOURCES_RECORD_FILE_H
#define EF_STAGES_SOURCES_RECORD_FILE_H

#include "pipeline/stage.h"
#include "stages/sources/checkpoint.h"
#include "stages/sources/stream_options.h"

/* The options of every record-file source: files (`files_what`: "paths",
 * "TFRecord paths"), compression, field (its default and help), the
 * stream's and the shard. */
#define EF__RECORD_FILE_OPTIONS(files_what, field_default, field_help)         \
    EF__OPT("files", EF_OPT_STRING, NULL,                                      \
            files_what " or http(s) URLs, space-separated, with {a,b} and "    \
                       "{00..99} expansion",                                   \
            0, 0),                                                             \
        EF__OPT(                                                               \
            "compression", EF_OPT_STRING, "auto",                              \
            "auto (gzip or zstd when the data says so), none, gzip or zstd",   \
            0, 0),                                                             \
        EF__OPT("field", EF_OPT_STRING, field_default, field_help, 0, 0),      \
        EF__STREAM_OPTIONS, EF__SHARD_OPTION

typedef struct ef__record_file ef__record_file;

/* A record as a format reads it. */
typedef struct {
    /* the field's bytes (the driver takes the reference), or NULL: the
     * record holds no sample (a blank line), it is passed over */
    ef_buffer *data;
    int64_t len;      /* the field's length; data may hold more bytes */
    uint64_t at, end; /* its bytes [at, end) in the (inflated) file */
    /* after a failure: 1 when the stream still stands at the next record
     * (only this one is lost), 0 when the rest of the file cannot be
     * framed; with `unfinished` also set, the next record starts once the
     * format's skip_rest has passed over the rest of this one */
    int in_step, unfinished;
} ef__record;

/* How a format frames its records. Hooks run on the pulling thread,
 * except at(), which any thread may call. */
typedef struct {
    const char *unit; /* a record's name: "line", "record" */
    /* Opens rf->file for reading from `offset` of its data (0: its
     * start) into rf->stream. Optional: ef__record_file_open; a format
     * that reads ahead calls that and forgets what it held. */
    int (*open)(ef__record_file *rf, uint64_t offset, ef__err *err);
    /* Reads the next record of rf->stream into *rec: EF_OK, EF_END where
     * the file ends cleanly, or an error in err with rec->in_step (and
     * rec->unfinished) set. */
    int (*next)(ef__record_file *rf, ef__record *rec, ef__err *err);
    /* Passes over the rest of a record read with rec->unfinished set.
     * Optional where next() never sets it. */
    int (*skip_rest)(ef__record_file *rf, ef__err *err);
    /* The offset of the next record of rf->stream. Optional: the
     * stream's offset (a format that reads no further than a record). */
    uint64_t (*tell)(const ef__record_file *rf);
    /* Reads the record of bytes [at, end) from `stream`, opened on just
     * those bytes, into *rec: EF_OK (rec->data set, rec->end where the
     * record ended) or an error in err. */
    int (*at)(const ef__record_file *rf, ef__stream *stream, uint64_t at,
              uint64_t end, ef__record *rec, ef__err *err);
    /* Adds the format's own figures to the stats. Optional. */
    void (*stats)(const ef__record_file *rf, ef_stage_stats *out);
    /* Frees what the format holds beyond the driver's. Optional. */
    void (*destroy)(ef__record_file *rf);
} ef__record_format;

/* The driver's state: the first member of a format's. */
struct ef__record_file {
    const ef__record_format *fmt;
    ef__stage *stage;
    const char *name; /* the stage's, for messages */
    char field[EF_MAX_NAME];
    ef__paths files;
    ef__shard part; /* this part's files: i, i + n ... */
    ef__stream_opts sopts;
    ef__comp_seen comp; /* each file's compression, once read */
    /* the pass */
    int64_t file;       /* the file being read (or next to open) */
    ef__stream *stream; /* open on `file`, or NULL */
    int64_t number;     /* number of the next record in the file */
    /* after a restore, while `file` is not open yet: where its next
     * record starts, and its number (0, 0: the file's start) */
    uint64_t from_offset;
    int64_t from_number;
    /* statistics: written by the pulling thread only, at file ends */
    _Atomic uint64_t files_read, bytes, read_ns, retries;
};

/* For a format's create(): sets s->state to `size` zeroed bytes (at
 * least an ef__record_file, its first member) and reads the options of
 * EF__RECORD_FILE_OPTIONS into it. On failure s->state may be set; the
 * stage's destroy frees it. */
int ef__record_file_create(ef__stage *s, const ef__opts *o,
                           const ef__record_format *fmt, size_t size,
                           ef__err *err);
/* Opens rf->file at `offset` of its data into rf->stream (the default
 * open). */
int ef__record_file_open(ef__record_file *rf, uint64_t offset, ef__err *err);

int ef__record_file_next(ef__stage *s, ef_sample **out, ef__err *err);
int ef__record_file_reset(ef__stage *s, int64_t epoch, ef__err *err);
void ef__record_file_destroy(ef__stage *s);
void ef__record_file_stats(const ef__stage *s, ef_stage_stats *out);
int ef__record_file_save(ef__stage *s, ef__state_out *o, ef__err *err);
int ef__record_file_restore(ef__stage *s, ef__state_in *in, ef__err *err);
int ef__record_file_fetch(ef__stage *s, const struct ef__ident *d,
                          ef_sample **out, ef__err *err);
int ef__record_file_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err);
const char *ef__record_file_part_name(const ef__stage *s, int64_t part);

/* The members of a record-file source's stage def, after its info and
 * create. */
#define EF__RECORD_FILE_STAGE                                                  \
    .is_source = 1, .next = ef__record_file_next,                              \
    .reset = ef__record_file_reset, .destroy = ef__record_file_destroy,        \
    .stats = ef__record_file_stats, .save = ef__record_file_save,              \
    .restore = ef__record_file_restore, .fetch = ef__record_file_fetch,        \
    .length = ef__record_file_length, .part_name = ef__record_file_part_name,  \
    .index_in_part = 1

#endif
