/* SPDX-License-Identifier: Apache-2.0 */
/* The record-file driver (see record_file.h): files opened in turn
 * through streams, records asked of the format one by one, failures
 * placed and handed to the pipeline's error policy. */
#include "stages/sources/record_file.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "pipeline/state.h"

#define FILE_SHIFT 32

static int parse_compression(ef__record_file *rf, const char *comp,
                             ef__err *err)
{
    static const char *const comps[] = {"none", "gzip", "zstd"};
    rf->sopts.compression = EF__COMP_SNIFF;
    for (int c = EF__COMP_NONE; c <= EF__COMP_ZSTD; c++)
        if (strcmp(comp, comps[c]) == 0)
            rf->sopts.compression = c;
    if (rf->sopts.compression == EF__COMP_SNIFF && strcmp(comp, "auto") != 0)
        return ef__err_set(err, EF_ESPEC,
                           "%s: option 'compression' must be auto, none, "
                           "gzip or zstd (got '%s')",
                           rf->name, comp);
    return EF_OK;
}

/* The files and this process's part of them. */
static int parse_files(ef__stage *s, ef__record_file *rf, const ef__opts *o,
                       ef__err *err)
{
    char what[64];
    snprintf(what, sizeof what, "%s: option 'files'", rf->name);
    int rc = ef__shard_parse(s, o, &rf->part, err);
    if (rc == EF_OK)
        rc =
            ef__paths_expand(ef__opt_string(o, "files"), what, &rf->files, err);
    if (rc != EF_OK)
        return rc;
    if ((size_t)rf->part.i >= rf->files.n)
        return ef__err_set(err, EF_ESPEC,
                           "%s: part %lld of shard=%lld/%lld gets no file: "
                           "'files' lists %zu file%s",
                           rf->name, (long long)rf->part.i,
                           (long long)rf->part.i, (long long)rf->part.n,
                           rf->files.n, rf->files.n == 1 ? "" : "s");
    if (ef__comp_seen_init(&rf->comp, rf->files.n) != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", rf->name);
    rf->file = rf->part.i;
    return EF_OK;
}

int ef__record_file_create(ef__stage *s, const ef__opts *o,
                           const ef__record_format *fmt, size_t size,
                           ef__err *err)
{
    assert(size >= sizeof(ef__record_file));
    ef__record_file *rf = ef__stage_new_state(s, size, err);
    if (!rf)
        return EF_ENOMEM;
    rf->fmt = fmt;
    rf->stage = s;
    rf->name = s->def->info.name;
    ef__stream_opts_from(o, &rf->sopts);
    rf->sopts.cancelled = &s->ctx->cancelled;
    int rc = parse_compression(rf, ef__opt_string(o, "compression"), err);
    if (rc != EF_OK)
        return rc;
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= sizeof rf->field)
        return ef__err_set(err, EF_ESPEC,
                           "%s: option 'field' must be 1 to %d bytes "
                           "(got '%s')",
                           rf->name, EF_MAX_NAME - 1, field);
    strcpy(rf->field, field);
    return parse_files(s, rf, o, err);
}

/* ---- reading ------------------------------------------------------ */

/* Opens file f at `offset` (0: its start) up to byte `end` (0: the
 * file's end): a file opened part way has its compression as first seen,
 * when known. */
static int open_file(const ef__record_file *rf, int64_t f, uint64_t offset,
                     uint64_t end, const atomic_int *cancelled,
                     ef__stream **out, ef__err *err)
{
    ef__stream_opts o = rf->sopts;
    o.cancelled = cancelled;
    if (offset > 0 || end > 0)
        ef__comp_seen_opts(&rf->comp, (size_t)f, &o);
    return ef__stream_open_range(out, rf->files.names[f], &o, offset, end, err);
}

int ef__record_file_open(ef__record_file *rf, uint64_t offset, ef__err *err)
{
    return open_file(rf, rf->file, offset, 0, rf->sopts.cancelled, &rf->stream,
                     err);
}

static void close_file(ef__record_file *rf)
{
    if (!rf->stream)
        return;
    ef__stream_stats ss;
    ef__stream_get_stats(rf->stream, &ss);
    ef__stat_add(&rf->bytes, ss.raw_bytes);
    ef__stat_add(&rf->read_ns, ef__s_to_ns(ss.read_s));
    ef__stat_add(&rf->retries, ss.retries);
    ef__stat_add(&rf->files_read, 1);
    ef__stream_close(rf->stream);
    rf->stream = NULL;
    rf->file += rf->part.n;
}

/* Names the file and what of it in a failure about it: its path too,
 * unless the message has it already (the stream's and the codecs' do). */
static void locate(const ef__record_file *rf, int64_t file, const char *what,
                   ef__err *err)
{
    const char *path = rf->files.names[file];
    char where[EF__ERR_MAX];
    if (strstr(err->msg, path))
        snprintf(where, sizeof where, "%s: file %lld, %s", rf->name,
                 (long long)file, what);
    else
        snprintf(where, sizeof where, "%s: file %lld (%s), %s", rf->name,
                 (long long)file, path, what);
    ef__err_prefix(err, where);
}

/* Record `number`'s failure, placed in its file. */
static void locate_record(const ef__record_file *rf, int64_t file,
                          int64_t number, ef__err *err)
{
    char what[64];
    snprintf(what, sizeof what, "%s %lld", rf->fmt->unit, (long long)number);
    locate(rf, file, what, err);
}

/* The sample of record `rec` of `file` (the sample takes rec->data). */
static int build(const ef__record_file *rf, ef_sample_id id, int64_t file,
                 const ef__record *rec, ef_sample **out, ef__err *err)
{
    ef_sample *smp = ef_sample_new(id);
    int rc = smp ? ef__sample_add_variable(smp, rf->field, EF_U8, rec->len,
                                           rec->data, 0)
                 : EF_ENOMEM;
    ef_buffer_release(rec->data);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "%s: cannot build a sample: %s", rf->name,
                           ef_strerror(rc));
    }
    smp->origin.part = file;
    smp->origin.offset = (int64_t)rec->at;
    smp->origin.end = (int64_t)rec->end;
    *out = smp;
    return EF_OK;
}

static int open_next(ef__stage *s, ef__record_file *rf, ef__err *err)
{
    uint64_t from = rf->from_offset; /* a restore's */
    rf->number = rf->from_number;
    rf->from_offset = 0;
    rf->from_number = 0;
    int rc = rf->fmt->open ? rf->fmt->open(rf, from, err)
                           : ef__record_file_open(rf, from, err);
    if (rc != EF_OK) {
        locate(rf, rf->file, "opening", err);
        if (!ef__stage_abandon(s, err, "file", from, -1))
            return rc;
        rf->file += rf->part.n; /* the whole file is dropped */
    }
    return EF_OK;
}

/* The error policy on record `number`'s failure rc: EF_OK to read on
 * (the record, or the rest of its file, dropped), else rc. */
static int record_failed(ef__stage *s, ef__record_file *rf, int64_t number,
                         const ef__record *rec, int rc, ef__err *err)
{
    locate_record(rf, rf->file, number, err);
    if (rec->in_step) {
        if (!ef__stage_skip(s, err))
            return rc;
        if (!rec->unfinished || (rc = rf->fmt->skip_rest(rf, err)) == EF_OK)
            return EF_OK;
        locate_record(rf, rf->file, number, err);
    }
    if (!ef__stage_abandon(s, err, "file", ef__stream_raw_offset(rf->stream),
                           ef__stream_size(rf->stream)))
        return rc;
    close_file(rf);
    return EF_OK;
}

int ef__record_file_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    ef__record_file *rf = s->state;
    for (;;) {
        if (!rf->stream) {
            if ((size_t)rf->file >= rf->files.n)
                return EF_END;
            int rc = open_next(s, rf, err);
            if (rc != EF_OK)
                return rc;
            continue;
        }
        if (rf->number >= (int64_t)1 << FILE_SHIFT)
            return ef__err_set(
                err, EF_EFORMAT, "%s: %s: more than 2^%d %ss in one file",
                rf->name, rf->files.names[rf->file], FILE_SHIFT, rf->fmt->unit);
        ef__record rec = {0};
        int rc = rf->fmt->next(rf, &rec, err);
        ef__comp_seen_note(&rf->comp, (size_t)rf->file, rf->stream);
        if (rc == EF_END) {
            close_file(rf);
            continue;
        }
        int64_t number = rf->number++;
        if (rc == EF_OK && !rec.data)
            continue; /* a record without a sample */
        if (rc == EF_OK) {
            ef_sample_id id = {.index = (rf->file << FILE_SHIFT) + number,
                               .epoch = s->epoch};
            return build(rf, id, rf->file, &rec, out, err);
        }
        rc = record_failed(s, rf, number, &rec, rc, err);
        if (rc != EF_OK)
            return rc;
    }
}

int ef__record_file_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    ef__record_file *rf = s->state;
    close_file(rf);
    rf->file = rf->part.i;
    rf->from_offset = 0;
    rf->from_number = 0;
    return EF_OK;
}

/* ---- checkpoints -------------------------------------------------- */

/* The record: the file list and part, the files' compression, then the
 * file being read (or next), the offset of its next record and that
 * record's number. */
int ef__record_file_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__record_file *rf = s->state;
    ef__files_save(&rf->files, o);
    ef__part_save(&rf->part, o);
    ef__comp_seen_save(&rf->comp, o);
    if (rf->stream) {
        uint64_t at =
            rf->fmt->tell ? rf->fmt->tell(rf) : ef__stream_offset(rf->stream);
        ef__file_place_save(o, rf->file, at, rf->number);
    } else { /* the next file's start, or where a restore left it */
        ef__file_place_save(o, rf->file, rf->from_offset, rf->from_number);
    }
    return EF_OK;
}

int ef__record_file_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    ef__record_file *rf = s->state;
    int64_t file, number;
    uint64_t offset;
    int rc = ef__files_restore(&rf->files, "file", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&rf->part, in);
    if (rc == EF_OK)
        rc = ef__comp_seen_restore(&rf->comp, in);
    if (rc == EF_OK)
        rc = ef__file_place_restore(in, &rf->part, rf->files.n, rf->fmt->unit,
                                    &file, &offset, &number);
    if (rc != EF_OK)
        return rc;
    rf->file = file;
    rf->from_offset = offset;
    rf->from_number = number;
    return EF_OK;
}

/* Record d read again, at its offset, on a stream of its own: any
 * thread, any time. A record that is not there, or ends elsewhere, means
 * the file is not the one the state was saved from. */
int ef__record_file_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                          ef__err *err)
{
    ef__record_file *rf = s->state;
    *out = NULL;
    int64_t f = d->part, number = d->id.index & 0xffffffff;
    if (f < 0 || f >= (int64_t)rf->files.n || f % rf->part.n != rf->part.i ||
        (d->id.index >> FILE_SHIFT) != f || d->end <= d->offset)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: the state names %s %lld at bytes %lld-%lld "
                           "of file %lld: expected a %s of part %lld of "
                           "%lld of the %zu files",
                           rf->name, rf->fmt->unit, (long long)number,
                           (long long)d->offset, (long long)d->end,
                           (long long)f, rf->fmt->unit, (long long)rf->part.i,
                           (long long)rf->part.n, rf->files.n);
    uint64_t at = (uint64_t)d->offset, end = (uint64_t)d->end;
    ef__stream *stream = NULL;
    ef__record rec = {0};
    int rc = open_file(rf, f, at, end, &s->ctx->cancelled, &stream, err);
    if (rc == EF_OK)
        rc = rf->fmt->at(rf, stream, at, end, &rec, err);
    if (rc == EF_OK && rec.end != end) {
        ef_buffer_release(rec.data);
        rc = ef__err_set(err, EF_EFORMAT,
                         "the %s at offset %llu ends at %llu, the state "
                         "says %llu",
                         rf->fmt->unit, (unsigned long long)at,
                         (unsigned long long)rec.end, (unsigned long long)end);
    }
    if (stream)
        ef__comp_seen_note(&rf->comp, (size_t)f, stream);
    ef__stream_close(stream);
    if (rc != EF_OK) {
        ef__fetch_failed(err, rc, "file");
        locate_record(rf, f, number, err);
        return rc;
    }
    ef_sample_id id = {.index = d->id.index, .epoch = d->id.epoch};
    return build(rf, id, f, &rec, out, err);
}

/* ---- the rest ----------------------------------------------------- */

void ef__record_file_destroy(ef__stage *s)
{
    ef__record_file *rf = s->state;
    if (rf->fmt && rf->fmt->destroy)
        rf->fmt->destroy(rf);
    ef__stream_close(rf->stream);
    ef__paths_free(&rf->files);
    ef__comp_seen_free(&rf->comp);
    ef__free(rf);
}

void ef__record_file_stats(const ef__stage *s, ef_stage_stats *out)
{
    const ef__record_file *rf = s->state;
    ef__stats_extra(out, "files", (double)ef__stat_get(&rf->files_read));
    double bytes = (double)ef__stat_get(&rf->bytes),
           read_s = ef__ns_to_s(ef__stat_get(&rf->read_ns));
    ef__stats_extra(out, "bytes", bytes);
    /* bytes over the time spent reading them, not over the whole run */
    ef__stats_extra(out, "MB/s", read_s > 0 ? bytes / 1e6 / read_s : 0);
    ef__stats_extra(out, "retries", (double)ef__stat_get(&rf->retries));
    if (rf->fmt->stats)
        rf->fmt->stats(rf, out);
}

/* Record files have no index: records are counted by framing them. */
int ef__record_file_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    (void)n;
    const ef__record_file *rf = s->state;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: the number of %ss in the files is not known "
                       "before reading them (they have no index)",
                       rf->name, rf->fmt->unit);
}

/* The file or URL of a sample's origin.part (its index in the list). */
const char *ef__record_file_part_name(const ef__stage *s, int64_t part)
{
    const ef__record_file *rf = s->state;
    return ef__paths_at(&rf->files, part);
}
