/* SPDX-License-Identifier: Apache-2.0 */
/* tfrecord: TFRecord files as a source, a format of the record-file kit
 * (record_file.h: the files, shards, identities, errors and checkpoints):
 * one sample per record with one u8 1-D field (`field`, default "record")
 * holding the record's bytes. compression=auto inflates files that start
 * with the gzip or zstd magic, gzip and zstd inflate always, none never.
 *
 * With on_error=skip, a bad data CRC drops that record only; a bad length
 * CRC, an absurd length or a truncation drops the rest of the file (the
 * records can no longer be framed). */
#include "codec/tfrecord.h"
#include "stages/sources/record_file.h"

static const ef__record_format tfrecord_format;

static int tfrecord_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return ef__record_file_create(s, o, &tfrecord_format,
                                  sizeof(ef__record_file), err);
}

/* Reads the record at the stream's offset, in a buffer of its own. */
static int read_record(const ef__record_file *rf, ef__stream *stream,
                       ef__record *rec, ef__err *err)
{
    rec->at = ef__stream_offset(stream);
    int rc = ef__tfrecord_read(stream, rf->stage->ctx->budget.limit, &rec->data,
                               &rec->in_step, err);
    rec->end = ef__stream_offset(stream);
    rec->len = rc == EF_OK ? (int64_t)ef_buffer_size(rec->data) : 0;
    return rc;
}

static int tfrecord_next(ef__record_file *rf, ef__record *rec, ef__err *err)
{
    return read_record(rf, rf->stream, rec, err);
}

static int tfrecord_at(const ef__record_file *rf, ef__stream *stream,
                       uint64_t at, uint64_t end, ef__record *rec, ef__err *err)
{
    (void)end;
    int rc = read_record(rf, stream, rec, err);
    if (rc == EF_END)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: no record at offset %llu: the data ends there",
                           ef__stream_name(stream), (unsigned long long)at);
    return rc;
}

static const ef__record_format tfrecord_format = {
    .unit = "record",
    .next = tfrecord_next,
    .at = tfrecord_at,
};

static const ef__option_def tfrecord_options[] = {
    EF__RECORD_FILE_OPTIONS("TFRecord paths", "record",
                            "name of the u8 field of each record"),
};

const ef__stage_def ef__stage_tfrecord = {
    .info = {"tfrecord", "TFRecord files, one u8 field per record",
             EF__OPTIONS(tfrecord_options)},
    .create = tfrecord_create,
    EF__RECORD_FILE_STAGE,
};
