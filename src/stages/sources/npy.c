/* SPDX-License-Identifier: Apache-2.0 */
/* npy: NumPy .npy files, one sample per row along the first axis: one
 * field (`field`, default "data") of the file's dtype, shaped as the
 * other dimensions (a 1-d array gives scalars). `files` lists the files
 * (brace-expanded, as cifar's), whose rows are numbered on across them;
 * they must agree on dtype and row shape. A local file is mapped: fields
 * are views into it (no copy, no memory budget taken), in a borrowed
 * buffer (ef_buffer_is_borrowed) that a consumer copies before writing;
 * it must not shrink while mapped (SIGBUS). An http(s) URL is read whole,
 * its announced size checked against the budget first. codec/npy.c
 * refuses big-endian data and Fortran order; data longer or shorter than
 * announced is refused. An indexed source (indexed.h): first=, count=,
 * shard=, checkpoints and fetch are the kit's; a sample's origin.part is
 * its file, which messages about it name. */
#include <stdio.h>
#include <string.h>

#include "codec/npy.h"
#include "core/alloc.h"
#include "core/sample.h"
#include "io/paths.h"
#include "io/regular_file.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/indexed.h"

typedef struct {
    ef_buffer *data; /* the whole file: mapped, or read (a URL) */
    ef__npy_header h;
    int64_t base; /* the number of its first row */
} npy_file;

typedef struct {
    ef__indexed ix; /* first: the kit's */
    ef__paths paths;
    npy_file *files;
} npy_state;

/* Maps a local file whole, header and size checked. */
static int map_file(const char *path, npy_file *nf, ef__err *err)
{
    int rc = ef__map_regular(path, "an NPY file", &nf->data, err);
    if (rc != EF_OK)
        return rc;
    const unsigned char *data = ef_buffer_data(nf->data);
    size_t size = ef_buffer_size(nf->data);
    if (size < EF__NPY_PREAMBLE) /* the preamble's "truncated" */
        rc = ef__npy_preamble(NULL, size, path, NULL, err);
    if (rc == EF_OK)
        rc = ef__npy_parse(data, size, path, &nf->h, err);
    if (rc == EF_OK)
        rc = ef__npy_check_size(&nf->h, size, path, err);
    if (rc != EF_OK) {
        ef_buffer_release(nf->data);
        nf->data = NULL;
    }
    return rc;
}

/* Reads a URL whole into one buffer: the header first, then the data it
 * announces (checked against the memory budget), then one byte more,
 * which must not come. */
static int read_url(const char *url, const ef__budget *budget, npy_file *nf,
                    ef__err *err)
{
    unsigned char pre[EF__NPY_PREAMBLE], extra;
    size_t total = 0, got = 0;
    ef__stream *in;
    int rc = ef__stream_open(&in, url, NULL, err);
    if (rc != EF_OK)
        return rc;
    rc = ef__stream_read(in, pre, sizeof pre, &got, err);
    if (rc == EF_OK)
        rc = ef__npy_preamble(pre, got, url, &total, err);
    unsigned char *head = rc == EF_OK ? ef__malloc(total) : NULL;
    if (rc == EF_OK && head) {
        memcpy(head, pre, sizeof pre);
        rc = ef__stream_read(in, head + sizeof pre, total - sizeof pre, &got,
                             err);
    }
    if (rc == EF_OK)
        rc = head ? ef__npy_parse(head, sizeof pre + got, url, &nf->h, err)
                  : ef__err_set(err, EF_ENOMEM, "npy: out of memory");
    char what[EF__ERR_MAX / 2];
    snprintf(what, sizeof what, "npy: %.200s: the data its header announces",
             url);
    if (rc == EF_OK)
        rc = ef__budget_check(budget, nf->h.data_bytes, what, err);
    if (rc == EF_OK && !(nf->data = ef_buffer_new(total + nf->h.data_bytes)))
        rc = ef__err_set(err, EF_ENOMEM, "npy: %s: out of memory", url);
    if (rc == EF_OK) {
        unsigned char *all = ef_buffer_data(nf->data);
        memcpy(all, head, total);
        rc = ef__stream_read(in, all + total, nf->h.data_bytes, &got, err);
    }
    if (rc == EF_OK && got == nf->h.data_bytes)
        rc = ef__stream_read(in, &extra, 1, &got, err);
    if (rc == EF_OK) /* the offset is past the data if a byte more came */
        rc = ef__npy_check_size(&nf->h, ef__stream_offset(in), url, err);
    ef__stream_close(in);
    ef__free(head);
    return rc;
}

/* Whether file f's rows are like file 0's. */
static int same_rows(const npy_state *st, size_t f, ef__err *err)
{
    const ef__npy_header *a = &st->files[0].h, *b = &st->files[f].h;
    int same = a->dtype == b->dtype && a->ndim == b->ndim;
    for (int i = 1; same && i < a->ndim; i++)
        same = a->shape[i] == b->shape[i];
    return same ? EF_OK
                : ef__err_set(err, EF_EFORMAT,
                              "npy: %s: rows of %s unlike %s's of %s: "
                              "expected the same dtype and row shape",
                              st->paths.names[f], ef_dtype_name(b->dtype),
                              st->paths.names[0], ef_dtype_name(a->dtype));
}

static void unload(npy_state *st)
{
    for (size_t f = 0; f < st->paths.n; f++) {
        ef_buffer_release(st->files[f].data);
        st->files[f].data = NULL;
    }
}

/* Maps or reads every file: the kit's load. */
static int npy_load(ef__stage *s, int64_t *records, ef__err *err)
{
    npy_state *st = s->state;
    int64_t total = 0;
    int rc = EF_OK;
    for (size_t f = 0; f < st->paths.n && rc == EF_OK; f++) {
        const char *path = st->paths.names[f];
        npy_file *nf = &st->files[f];
        rc = ef__is_url(path) ? read_url(path, &s->ctx->budget, nf, err)
                 : map_file(path, nf, err);
        if (rc == EF_OK)
            rc = same_rows(st, f, err);
        nf->base = total;
        total += nf->h.shape[0];
    }
    if (rc != EF_OK)
        unload(st);
    *records = total;
    return rc;
}

/* Row r of pass `epoch`: a view into its file's buffer. */
static int make(const ef__stage *s, int64_t r, int64_t epoch, ef_sample **out,
                ef__err *err)
{
    const npy_state *st = s->state;
    size_t f = st->paths.n - 1;
    while (st->files[f].base > r || !st->files[f].h.shape[0])
        f--; /* the last file holding rows from r on */
    const npy_file *nf = &st->files[f];
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = r, .epoch = epoch});
    int rc =
        smp ? ef_sample_add(smp, ef__opt_string(&s->opts, "field"), nf->h.dtype,
                            nf->h.ndim - 1, nf->h.shape + 1, nf->data,
                            nf->h.data_offset +
                                (size_t)(r - nf->base) * nf->h.row_bytes)
            : EF_ENOMEM;
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "npy: cannot build sample %lld: %s",
                           (long long)r, ef_strerror(rc));
    }
    smp->origin.part = (int64_t)f; /* the file, for messages */
    *out = smp;
    return EF_OK;
}

static const char *npy_part_name(const ef__stage *s, int64_t part)
{
    const npy_state *st = s->state;
    return ef__paths_at(&st->paths, part);
}

static void npy_stats(const ef__stage *s, ef_stage_stats *out)
{
    ef__stats_extra(out, "files", (double)((npy_state *)s->state)->paths.n);
}

static const ef__indexed_ops npy_ops = {.load = npy_load,
                                        .make = make,
                                        .stats = npy_stats,
                                        .part_name = npy_part_name,
                                        .ranged = "files"};

static int npy_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    npy_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    int rc = ef__indexed_init(s, o, &npy_ops, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "files"), "npy: option 'files'",
                              &st->paths, err);
    if (rc == EF_OK &&
        !(st->files = ef__calloc(st->paths.n, sizeof *st->files)))
        rc = ef__err_set(err, EF_ENOMEM, "npy: out of memory");
    return rc;
}

static void npy_destroy(ef__stage *s)
{
    npy_state *st = s->state;
    if (st->files)
        unload(st);
    ef__free(st->files);
    ef__paths_free(&st->paths);
    ef__free(st);
}

static const ef__option_def npy_options[] = {
    EF__OPT(
        "files", EF_OPT_STRING, NULL,
        "NPY files or http(s) URLs, space-separated, with {1..5} expansion; "
        "their rows in order",
        0, 0),
    EF__OPT("field", EF_OPT_STRING, "data", "name of the field holding a row",
            0, 0),
    EF__INDEXED_RANGE_OPTIONS,
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_npy = {
    .info = {"npy", "NumPy .npy files, one sample per row (field data)",
             EF__OPTIONS(npy_options)},
    EF__INDEXED_STAGE_OPS,
    .create = npy_create,
    .destroy = npy_destroy,
};
