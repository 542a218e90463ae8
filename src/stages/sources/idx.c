/* SPDX-License-Identifier: Apache-2.0 */
/* idx: MNIST-style IDX files as a source. Images and labels are read at
 * open (gzip or not, through a stream), checked against each other, and every sample's
 * fields are views into those two buffers: no per-sample copy.
 * first= and count= read the records [first, first + count) only (a
 * held-out split of one file); identities keep the file's record index,
 * so checkpoints and fetch name the same record whatever the range.
 * shard=I/N keeps the range's r-th record when r % N == I. An indexed
 * source (indexed.h): the kit does the cursor, range, shard, checkpoints
 * and fetch. */
#include <stdio.h>
#include <string.h>

#include "codec/idx.h"
#include "core/alloc.h"
#include "core/buffer.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/indexed.h"

typedef struct {
    ef__indexed ix;    /* first: the kit's */
    ef_buffer *images; /* the whole images file, host byte order */
    ef_buffer *labels; /* i64 per record, or NULL without labels */
    ef__idx_header h;
} idx_state;

/* The first allocation for a file's contents. The header's announcement
 * is believed only as the bytes arrive: a short file that claims
 * gigabytes costs what it holds (twice at most), not what it claims. */
#define FIRST_ALLOC ((size_t)16 << 20)

static void free_data(void *data)
{
    ef__free(data);
}

/* Reads and checks the header into head (magic first: /dev/zero or a
 * file of another kind is refused after 4 bytes). */
static int read_header(ef__stream *in, const char *path, unsigned char *head,
                       ef__idx_header *h, ef__err *err)
{
    int rc = ef__stream_read_full(in, head, 4, "IDX header", err);
    if (rc == EF_END)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: empty file: expected an IDX header of at "
                           "least 4 bytes",
                           path);
    if (rc == EF_OK)
        rc = ef__idx_parse_magic(head, path, h, err);
    if (rc != EF_OK)
        return rc;
    rc = ef__stream_read_full(in, head + 4, h->header_bytes - 4,
                              "IDX header", err);
    if (rc == EF_END)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: truncated IDX header at offset 4: expected "
                           "%zu bytes of dimensions",
                           path, h->header_bytes - 4);
    return rc == EF_OK ? ef__idx_parse_dims(head + 4, path, h, err) : rc;
}

/* Reads the data the header announces after it, growing the buffer as
 * bytes arrive. *data holds the header and the data on return (or what
 * was read, for the caller to free). */
static int read_data(ef__stream *in, const char *path, const ef__idx_header *h,
                     unsigned char **data, ef__err *err)
{
    size_t total = h->header_bytes + (size_t)h->data_bytes;
    size_t cap = total < FIRST_ALLOC ? total : FIRST_ALLOC;
    size_t size = h->header_bytes;
    while (size < total) {
        if (size == cap) {
            cap = cap > total / 2 ? total : cap * 2;
            unsigned char *grown = ef__realloc(*data, cap);
            if (!grown)
                return ef__err_set(err, EF_ENOMEM,
                                   "%s: out of memory after %zu bytes of %zu",
                                   path, size, total);
            *data = grown;
        }
        size_t got;
        int rc = ef__stream_read(in, *data + size, cap - size, &got, err);
        if (rc != EF_OK)
            return rc;
        if (got == 0)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: truncated: the header announces %lld "
                               "records, %zu bytes in all, but the data ends "
                               "at offset %zu",
                               path, (long long)h->dims[0], total, size);
        size += got;
    }
    return EF_OK;
}

/* An IDX file is exactly its header and data, so bytes after the data
 * mean the header does not describe the file (a wrong dimension, two
 * files joined): an error, not ignored. The extra bytes are not counted:
 * that would mean reading them all, and they may never end. */
static int expect_end(ef__stream *in, const char *path,
                      const ef__idx_header *h, ef__err *err)
{
    unsigned char byte;
    size_t got;
    int rc = ef__stream_read(in, &byte, 1, &got, err);
    if (rc == EF_OK && got)
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: extra data after offset %llu, where the %lld "
                         "records the header announces end",
                         path,
                         (unsigned long long)(h->header_bytes + h->data_bytes),
                         (long long)h->dims[0]);
    return rc;
}

/* Reads an IDX file into a new buffer (header and data) and *h, reading
 * no further than the header announces (and one byte to see the end). A
 * file that announces more than the memory budget is refused at once. */
static int read_idx(const char *path, const ef__budget *budget,
                    ef_buffer **out, ef__idx_header *h, ef__err *err)
{
    *out = NULL;
    ef__stream *in;
    int rc = ef__stream_open(&in, path, NULL, err);
    if (rc != EF_OK)
        return rc;
    unsigned char head[4 + 4 * EF__IDX_MAX_DIMS];
    unsigned char *data = NULL;
    rc = read_header(in, path, head, h, err);
    if (rc == EF_OK) {
        char what[EF__ERR_MAX / 2];
        snprintf(what, sizeof what, "idx: %.200s: the data its header announces",
                 path);
        rc = ef__budget_check(budget, h->data_bytes, what, err);
    }
    if (rc == EF_OK) {
        size_t first = h->header_bytes + (size_t)h->data_bytes;
        data = ef__malloc(first < FIRST_ALLOC ? first : FIRST_ALLOC);
        if (!data)
            rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
        else
            memcpy(data, head, h->header_bytes);
    }
    if (rc == EF_OK)
        rc = read_data(in, path, h, &data, err);
    if (rc == EF_OK)
        rc = expect_end(in, path, h, err);
    ef__stream_close(in);
    if (rc == EF_OK) {
        *out = ef__buffer_adopt(data, h->header_bytes + (size_t)h->data_bytes,
                                free_data, data);
        if (!*out)
            rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
    }
    if (rc != EF_OK)
        ef__free(data);
    return rc;
}

/* Reads the labels file into one i64 per record. */
static int load_labels(idx_state *st, const char *path,
                       const ef__budget *budget, ef__err *err)
{
    ef_buffer *raw;
    ef__idx_header lh;
    int rc = read_idx(path, budget, &raw, &lh, err);
    if (rc != EF_OK)
        return rc;
    const unsigned char *data = ef_buffer_data(raw);
    if (rc == EF_OK && (lh.ndim != 1 || lh.dtype != EF_U8))
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: not a labels file: expected a 1-dimensional u8 "
                         "IDX file, got %d dimensions of %s",
                         path, lh.ndim, ef_dtype_name(lh.dtype));
    if (rc == EF_OK && lh.dims[0] != st->h.dims[0])
        rc = ef__err_set(err, EF_EFORMAT,
                         "idx: %s has %lld labels but the images file has "
                         "%lld images",
                         path, (long long)lh.dims[0], (long long)st->h.dims[0]);
    if (rc == EF_OK) {
        st->labels = ef_buffer_new((size_t)lh.dims[0] * sizeof(int64_t));
        if (!st->labels)
            rc = ef__err_set(err, EF_ENOMEM, "idx: out of memory");
    }
    if (rc == EF_OK) {
        int64_t *dst = ef_buffer_data(st->labels);
        for (int64_t i = 0; i < lh.dims[0]; i++)
            dst[i] = data[lh.header_bytes + (size_t)i];
    }
    ef_buffer_release(raw);
    return rc;
}

/* Reads the files: the kit's load, once. */
static int idx_load(ef__stage *s, int64_t *records, ef__err *err)
{
    idx_state *st = s->state;
    const char *images = ef__opt_string(&s->opts, "images");
    const char *labels = ef__opt_string(&s->opts, "labels");
    int rc = read_idx(images, &s->ctx->budget, &st->images, &st->h, err);
    if (rc == EF_OK)
        ef__idx_to_host(ef_buffer_data(st->images), &st->h);
    if (rc == EF_OK && labels[0])
        rc = load_labels(st, labels, &s->ctx->budget, err);
    if (rc != EF_OK) { /* not half read: a retry reads the files again */
        ef_buffer_release(st->images);
        ef_buffer_release(st->labels);
        st->images = st->labels = NULL;
        return rc;
    }
    *records = st->h.dims[0];
    return EF_OK;
}

/* The record count from the images file's header alone: a few bytes,
 * for a length before open. */
static int idx_peek(ef__stage *s, int64_t *records, ef__err *err)
{
    const char *path = ef__opt_string(&s->opts, "images");
    unsigned char head[4 + 4 * EF__IDX_MAX_DIMS];
    ef__idx_header h;
    ef__stream *in;
    int rc = ef__stream_open(&in, path, NULL, err);
    if (rc == EF_OK) {
        rc = read_header(in, path, head, &h, err);
        ef__stream_close(in);
    }
    if (rc == EF_OK)
        *records = h.dims[0];
    return rc;
}

/* Record i of pass `epoch`: views into the files' buffers. */
static int make(const ef__stage *s, int64_t i, int64_t epoch, ef_sample **out,
                ef__err *err)
{
    const idx_state *st = s->state;
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = i, .epoch = epoch});
    int rc =
        smp ? ef_sample_add(smp, "image", st->h.dtype, st->h.ndim - 1,
                            st->h.dims + 1, st->images,
                            st->h.header_bytes + (size_t)i * st->h.item_bytes)
            : EF_ENOMEM;
    if (rc == EF_OK && st->labels)
        rc = ef_sample_add(smp, "label", EF_I64, 0, NULL, st->labels,
                           (size_t)i * sizeof(int64_t));
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "idx: cannot build sample %lld: %s",
                           (long long)i, ef_strerror(rc));
    }
    *out = smp;
    return EF_OK;
}

static const ef__indexed_ops idx_ops = {
    .load = idx_load, .make = make, .peek = idx_peek, .ranged = "images"};

static int idx_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    idx_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    return ef__indexed_init(s, o, &idx_ops, err);
}

static void idx_destroy(ef__stage *s)
{
    idx_state *st = s->state;
    if (!st)
        return;
    ef_buffer_release(st->images);
    ef_buffer_release(st->labels);
    ef__free(st);
}

static const ef__option_def idx_options[] = {
    EF__OPT("images", EF_OPT_STRING, NULL, "IDX images file (gzip or raw)", 0,
            0),
    EF__OPT("labels", EF_OPT_STRING, "",
            "IDX labels file, paired with the images", 0, 0),
    EF__INDEXED_RANGE_OPTIONS,
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_idx = {
    .info = {"idx", "MNIST/Fashion-MNIST IDX files (fields image, label)",
             EF__OPTIONS(idx_options)},
    EF__INDEXED_STAGE_OPS,
    .create = idx_create,
    .destroy = idx_destroy,
};
