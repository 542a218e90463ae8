/* SPDX-License-Identifier: Apache-2.0 */
/* tfrecord: TFRecord files as a source, one sample per record with one u8
 * 1-D field (`field`, default "record") holding the record's bytes.
 *
 * `files` lists the files (paths or http(s) URLs, brace-expanded, see
 * paths.h), read in order on the pulling thread; shard=I/N keeps the files
 * f with f % N == I. compression=auto inflates files that start with the
 * gzip or zstd magic, gzip and zstd inflate always, none never. A sample's
 * identity is (file << 32) + the record's position in its file.
 *
 * Errors name the file, the record and its offset. With on_error=skip, a
 * bad data CRC drops that record only; a bad length CRC, an absurd length
 * or a truncation drops the rest of the file (the records can no longer be
 * framed), and a file that cannot be opened is dropped whole; each counts
 * once and reading goes on.
 *
 * Checkpoints: a sample's origin is its file and the bytes of its record
 * (offsets in the inflated data). The state saves the file being read,
 * the offset of the next record in it and that record's number; a
 * restore opens the file there (a seek, a Range request, or for gzip
 * inflating from the start), and fetch() reads one record at its offset
 * the same way, on a stream of its own. */
#include <stdio.h>
#include <string.h>

#include "codec/tfrecord.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/stage.h"
#include "stages/sources/stream_options.h"
#include "io/paths.h"
#include "stages/sources/checkpoint.h"
#include "pipeline/state.h"

#define FILE_SHIFT 32

typedef struct {
    ef__paths files;
    ef__shard part; /* this part's files: i, i + n ... */
    ef__stream_opts sopts;
    ef__comp_seen gz; /* each file's compression, once read */
    char field[EF_MAX_NAME];
    /* the pass */
    int64_t file;       /* the file being read (or next to open) */
    ef__stream *stream; /* open on `file`, or NULL */
    int64_t record;     /* position of the next record in the file */
    /* after a restore, while `file` is not open yet: where its next
     * record starts, and its number (0, 0: the file's start) */
    uint64_t from_offset;
    int64_t from_record;
    /* statistics: written by the pulling thread only */
    _Atomic uint64_t files_read, bytes, read_ns, retries; /* at file ends */
} tfrecord_state;

static int tfrecord_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tfrecord_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    ef__stream_opts_from(o, &st->sopts);
    st->sopts.cancelled = &s->ctx->cancelled;
    const char *comp = ef__opt_string(o, "compression");
    if (strcmp(comp, "auto") == 0)
        st->sopts.compression = EF__COMP_SNIFF;
    else if (strcmp(comp, "none") == 0)
        st->sopts.compression = EF__COMP_NONE;
    else if (strcmp(comp, "gzip") == 0)
        st->sopts.compression = EF__COMP_GZIP;
    else if (strcmp(comp, "zstd") == 0)
        st->sopts.compression = EF__COMP_ZSTD;
    else
        return ef__err_set(err, EF_ESPEC,
                           "tfrecord: option 'compression' must be auto, none, "
                           "gzip or zstd (got '%s')",
                           comp);
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= sizeof st->field)
        return ef__err_set(err, EF_ESPEC,
                           "tfrecord: option 'field' must be 1 to %d bytes "
                           "(got '%s')",
                           EF_MAX_NAME - 1, field);
    strcpy(st->field, field);
    ef__shard part;
    int rc = ef__shard_parse(s, o, &part, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "files"),
                              "tfrecord: option 'files'", &st->files, err);
    if (rc != EF_OK)
        return rc;
    if ((size_t)part.i >= st->files.n)
        return ef__err_set(err, EF_ESPEC,
                           "tfrecord: part %lld of shard=%lld/%lld gets no "
                           "file: 'files' lists %zu file%s",
                           (long long)part.i, (long long)part.i,
                           (long long)part.n, st->files.n,
                           st->files.n == 1 ? "" : "s");
    if (ef__comp_seen_init(&st->gz, st->files.n) != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "tfrecord: out of memory");
    st->part = part;
    st->file = part.i;
    return EF_OK;
}

static void close_file(tfrecord_state *st)
{
    if (!st->stream)
        return;
    ef__stream_stats ss;
    ef__stream_get_stats(st->stream, &ss);
    ef__stat_add(&st->bytes, ss.raw_bytes);
    ef__stat_add(&st->read_ns, ef__s_to_ns(ss.read_s));
    ef__stat_add(&st->retries, ss.retries);
    ef__stat_add(&st->files_read, 1);
    ef__stream_close(st->stream);
    st->stream = NULL;
    st->file += st->part.n;
}

/* Names the file and the record in a failure about it. */
static void locate(const tfrecord_state *st, const char *what, ef__err *err)
{
    char where[96];
    snprintf(where, sizeof where, "tfrecord: file %lld, %s",
             (long long)st->file, what);
    ef__err_prefix(err, where);
}

/* The sample of record data `b` (the sample takes the reference), read
 * from bytes [offset, end) of `file`. */
static int build(const tfrecord_state *st, ef_sample_id id, int64_t file,
                 uint64_t offset, uint64_t end, ef_buffer *b, ef_sample **out,
                 ef__err *err)
{
    ef_sample *smp = ef_sample_new(id);
    int rc = smp ? ef__sample_add_variable(smp, st->field, EF_U8,
                                           (int64_t)ef_buffer_size(b), b, 0)
                 : EF_ENOMEM;
    ef_buffer_release(b);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "tfrecord: cannot build a sample: %s",
                           ef_strerror(rc));
    }
    smp->origin.part = file;
    smp->origin.offset = (int64_t)offset;
    smp->origin.end = (int64_t)end;
    *out = smp;
    return EF_OK;
}

/* Opens file f at `offset` (0: its start) up to byte `end` (0: the
 * file's end): a file opened part way has its compression as first seen,
 * when known. */
static int open_file(const tfrecord_state *st, int64_t f, uint64_t offset,
                     uint64_t end, const atomic_int *cancelled,
                     ef__stream **out, ef__err *err)
{
    ef__stream_opts o = st->sopts;
    o.cancelled = cancelled;
    if (offset > 0 || end > 0)
        ef__comp_seen_opts(&st->gz, (size_t)f, &o);
    return ef__stream_open_range(out, st->files.names[f], &o, offset, end, err);
}

static int tfrecord_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    tfrecord_state *st = s->state;
    for (;;) {
        if (!st->stream) {
            if ((size_t)st->file >= st->files.n)
                return EF_END;
            uint64_t from = st->from_offset; /* a restore's */
            st->record = st->from_record;
            st->from_offset = 0;
            st->from_record = 0;
            int rc = open_file(st, st->file, from, 0, st->sopts.cancelled,
                               &st->stream, err);
            if (rc != EF_OK) {
                locate(st, "opening", err);
                if (!ef__stage_abandon(s, err, "file", from, -1))
                    return rc;
                st->file += st->part.n; /* the whole file is dropped */
                continue;
            }
        }
        if (st->record >= (int64_t)1 << FILE_SHIFT)
            return ef__err_set(err, EF_EFORMAT,
                               "tfrecord: %s: more than 2^%d records in one "
                               "file",
                               st->files.names[st->file], FILE_SHIFT);
        ef_buffer *b;
        int in_sync;
        uint64_t at = ef__stream_offset(st->stream);
        int rc = ef__tfrecord_read(st->stream, s->ctx->budget.limit, &b,
                                   &in_sync, err);
        ef__comp_seen_note(&st->gz, (size_t)st->file, st->stream);
        if (rc == EF_OK) {
            ef_sample_id id = {.index = (st->file << FILE_SHIFT) + st->record,
                               .epoch = s->epoch};
            st->record++;
            return build(st, id, st->file, at, ef__stream_offset(st->stream), b,
                         out, err);
        }
        if (rc == EF_END) {
            close_file(st);
            continue;
        }
        char what[48];
        snprintf(what, sizeof what, "record %lld", (long long)st->record);
        locate(st, what, err);
        if (in_sync) {
            if (!ef__stage_skip(s, err))
                return rc;
        } else { /* the rest of the file cannot be framed */
            if (!ef__stage_abandon(s, err, "file",
                                   ef__stream_raw_offset(st->stream),
                                   ef__stream_size(st->stream)))
                return rc;
            close_file(st);
        }
        st->record++;
    }
}

static int tfrecord_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    tfrecord_state *st = s->state;
    close_file(st);
    st->file = st->part.i;
    st->from_offset = 0;
    st->from_record = 0;
    return EF_OK;
}

/* ---- checkpoints -------------------------------------------------- */

/* The record: the file list and part, the files' compression, then the
 * file being read (or next), the offset of its next record and that
 * record's number. */
static int tfrecord_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    tfrecord_state *st = s->state;
    ef__files_save(&st->files, o);
    ef__part_save(&st->part, o);
    ef__comp_seen_save(&st->gz, o);
    if (st->stream)
        ef__file_place_save(o, st->file, ef__stream_offset(st->stream),
                            st->record);
    else /* the next file's start, or where a restore left it */
        ef__file_place_save(o, st->file, st->from_offset, st->from_record);
    return EF_OK;
}

static int tfrecord_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    tfrecord_state *st = s->state;
    int64_t file, record;
    uint64_t offset;
    int rc = ef__files_restore(&st->files, "file", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&st->part, in);
    if (rc == EF_OK)
        rc = ef__comp_seen_restore(&st->gz, in);
    if (rc != EF_OK)
        return rc;
    rc = ef__file_place_restore(in, &st->part, st->files.n, "record", &file,
                                &offset, &record);
    if (rc != EF_OK)
        return rc;
    st->file = file;
    st->from_offset = offset;
    st->from_record = record;
    return EF_OK;
}

/* Record d read again, at its offset, on a stream of its own: any
 * thread, any time. A record that is not there, or ends elsewhere, means
 * the file is not the one the state was saved from. */
static int tfrecord_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                          ef__err *err)
{
    tfrecord_state *st = s->state;
    *out = NULL;
    int64_t f = d->part;
    if (f < 0 || f >= (int64_t)st->files.n || f % st->part.n != st->part.i ||
        (d->id.index >> FILE_SHIFT) != f || d->end <= d->offset)
        return ef__err_set(err, EF_EFORMAT,
                           "tfrecord: the state names record %lld at bytes "
                           "%lld-%lld of file %lld: expected a record of "
                           "part %lld of %lld of the %zu files",
                           (long long)d->id.index, (long long)d->offset,
                           (long long)d->end, (long long)f,
                           (long long)st->part.i, (long long)st->part.n,
                           st->files.n);
    ef__stream *stream = NULL;
    ef_buffer *b = NULL;
    int in_sync;
    int rc = open_file(st, f, (uint64_t)d->offset, (uint64_t)d->end,
                       &s->ctx->cancelled, &stream, err);
    if (rc == EF_OK)
        rc = ef__tfrecord_read(stream, s->ctx->budget.limit, &b, &in_sync, err);
    if (rc != EF_OK && rc != EF_END)
        ef__fetch_failed(err, rc, "file");
    uint64_t end = stream ? ef__stream_offset(stream) : 0;
    if (stream)
        ef__comp_seen_note(&st->gz, (size_t)f, stream);
    ef__stream_close(stream);
    if (rc == EF_END || (rc == EF_OK && end != (uint64_t)d->end)) {
        ef_buffer_release(b);
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: the record at offset %lld ends at %llu, the "
                         "state says %lld: the file changed since the state "
                         "was saved",
                         st->files.names[f], (long long)d->offset,
                         (unsigned long long)end, (long long)d->end);
    }
    if (rc != EF_OK) {
        char where[96];
        snprintf(where, sizeof where, "tfrecord: file %lld, record %lld",
                 (long long)f, (long long)(d->id.index & 0xffffffff));
        ef__err_prefix(err, where);
        return rc;
    }
    ef_sample_id id = {.index = d->id.index, .epoch = d->id.epoch};
    return build(st, id, f, (uint64_t)d->offset, end, b, out, err);
}

static void tfrecord_destroy(ef__stage *s)
{
    tfrecord_state *st = s->state;
    ef__stream_close(st->stream);
    ef__paths_free(&st->files);
    ef__comp_seen_free(&st->gz);
    ef__free(st);
}

static void tfrecord_stats(const ef__stage *s, ef_stage_stats *out)
{
    const tfrecord_state *st = s->state;
    ef__stats_extra(out, "files", (double)ef__stat_get(&st->files_read));
    double bytes = (double)ef__stat_get(&st->bytes),
           read_s = ef__ns_to_s(ef__stat_get(&st->read_ns));
    ef__stats_extra(out, "bytes", bytes);
    /* bytes over the time spent reading them, not over the whole run */
    ef__stats_extra(out, "MB/s", read_s > 0 ? bytes / 1e6 / read_s : 0);
    ef__stats_extra(out, "retries", (double)ef__stat_get(&st->retries));
}

static const ef__option_def tfrecord_options[] = {
    {"files", EF_OPT_STRING, NULL,
     "TFRecord paths or http(s) URLs, space-separated, with {a,b} and "
     "{00..99} expansion",
     0, 0},
    {"compression", EF_OPT_STRING, "auto",
     "auto (gzip or zstd when the data says so), none, gzip or zstd", 0, 0},
    {"field", EF_OPT_STRING, "record", "name of the u8 field of each record", 0,
     0},
    EF__STREAM_OPTIONS,
    EF__SHARD_OPTION,
};

/* TFRecord files have no index: records are counted by framing them. */
static int tfrecord_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)s;
    (void)up;
    (void)n;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "tfrecord: the number of records in the files is "
                       "not known before reading them (they have no index)");
}

/* The file or URL of a sample's origin.part (its index in the list). */
static const char *tfrecord_part_name(const ef__stage *s, int64_t part)
{
    const tfrecord_state *st = s->state;
    return part >= 0 && (size_t)part < st->files.n ? st->files.names[part]
                                                   : NULL;
}

const ef__stage_def ef__stage_tfrecord = {
    .info = {"tfrecord", "TFRecord files, one u8 field per record",
             EF__OPTIONS(tfrecord_options)},
    .is_source = 1,
    .create = tfrecord_create,
    .next = tfrecord_next,
    .reset = tfrecord_reset,
    .destroy = tfrecord_destroy,
    .stats = tfrecord_stats,
    .save = tfrecord_save,
    .restore = tfrecord_restore,
    .fetch = tfrecord_fetch,
    .length = tfrecord_length,
    .part_name = tfrecord_part_name,
    .index_in_part = 1,
};
