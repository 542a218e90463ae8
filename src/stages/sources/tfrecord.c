/* tfrecord: TFRecord files as a source, one sample per record with one u8
 * 1-D field (`field`, default "record") holding the record's bytes.
 *
 * `files` lists the files (paths or http(s) URLs, brace-expanded, see
 * paths.h), read in order on the pulling thread; shard=I/N keeps the files
 * f with f % N == I. compression=auto inflates files that start with the
 * gzip magic, gzip always, none never. A sample's identity is
 * (file << 32) + the record's position in its file.
 *
 * Errors name the file, the record and its offset. With on_error=skip, a
 * bad data CRC drops that record only; a bad length CRC, an absurd length
 * or a truncation drops the rest of the file (the records can no longer be
 * framed), and a file that cannot be opened is dropped whole; each counts
 * once and reading goes on. */
#include <stdio.h>
#include <string.h>

#include "codec/tfrecord.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "stage.h"
#include "io/paths.h"

#define FILE_SHIFT 32

typedef struct {
    ef__paths files;
    int64_t first, step; /* this part's files: first, first + step ... */
    ef__stream_opts sopts;
    char field[EF_MAX_NAME];
    /* the pass */
    int64_t file;       /* the file being read (or next to open) */
    ef__stream *stream; /* open on `file`, or NULL */
    int64_t record;     /* position of the next record in the file */
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
        st->sopts.gzip = -1;
    else if (strcmp(comp, "none") == 0)
        st->sopts.gzip = 0;
    else if (strcmp(comp, "gzip") == 0)
        st->sopts.gzip = 1;
    else
        return ef__err_set(err, EF_ESPEC,
                           "tfrecord: option 'compression' must be auto, none "
                           "or gzip (got '%s')",
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
    st->first = st->file = part.i;
    st->step = part.n;
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
    st->file += st->step;
}

/* Names the file and the record in a failure about it. */
static void locate(const tfrecord_state *st, const char *what, ef__err *err)
{
    char where[96];
    snprintf(where, sizeof where, "tfrecord: file %lld, %s",
             (long long)st->file, what);
    ef__err_prefix(err, where);
}

static int build(ef__stage *s, tfrecord_state *st, ef_buffer *b,
                 ef_sample **out, ef__err *err)
{
    ef_sample_id id = {.index = (st->file << FILE_SHIFT) + st->record,
                       .epoch = s->epoch};
    st->record++;
    ef_sample *smp = ef_sample_new(id);
    int64_t shape[1] = {(int64_t)ef_buffer_size(b)};
    int rc =
        smp ? ef_sample_add(smp, st->field, EF_U8, 1, shape, b, 0) : EF_ENOMEM;
    ef_buffer_release(b);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "tfrecord: cannot build a sample: %s",
                           ef_strerror(rc));
    }
    *out = smp;
    return EF_OK;
}

static int tfrecord_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    tfrecord_state *st = s->state;
    for (;;) {
        if (!st->stream) {
            if ((size_t)st->file >= st->files.n)
                return EF_END;
            st->record = 0;
            int rc = ef__stream_open(&st->stream, st->files.names[st->file],
                                     &st->sopts, err);
            if (rc != EF_OK) {
                st->stream = NULL;
                locate(st, "opening", err);
                if (!ef__stage_abandon(s, err, "file", 0, -1))
                    return rc;
                st->file += st->step; /* the whole file is dropped */
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
        int rc = ef__tfrecord_read(st->stream, s->ctx->budget.limit, &b,
                                   &in_sync, err);
        if (rc == EF_OK)
            return build(s, st, b, out, err);
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
    st->file = st->first;
    return EF_OK;
}

static void tfrecord_destroy(ef__stage *s)
{
    tfrecord_state *st = s->state;
    ef__stream_close(st->stream);
    ef__paths_free(&st->files);
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
     "auto (gzip when the data says so), none or gzip", 0, 0},
    {"field", EF_OPT_STRING, "record", "name of the u8 field of each record", 0,
     0},
    EF__STREAM_OPTIONS,
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_tfrecord = {
    .info = {"tfrecord", "TFRecord files, one u8 field per record",
             EF__OPTIONS(tfrecord_options)},
    .is_source = 1,
    .create = tfrecord_create,
    .next = tfrecord_next,
    .reset = tfrecord_reset,
    .destroy = tfrecord_destroy,
    .stats = tfrecord_stats,
};
