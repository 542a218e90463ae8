/* SPDX-License-Identifier: Apache-2.0 */
/* cifar: CIFAR-10 binary files as a source. Fields `image` (u8 [32,32,3],
 * height, width, channel) and `label` (i64 scalar).
 *
 * `files` lists the files (paths, brace-expanded: "data_batch_{1..5}.bin";
 * gzip is inflated), read at open through a stream, a chunk of records at
 * a time. A CIFAR-10 file holds 10000 records; one of more than
 * max_records (default 1000000, 3 GB) is refused as soon as the excess is
 * seen, so that /dev/zero or an endless stream cannot exhaust memory. Each file is converted once into
 * one buffer of images in HWC order and one of labels, and every sample's
 * fields are views into them: no per-sample copy. A sample's identity is
 * its record number counted across the files in order; shard=I/N keeps the
 * records r with r % N == I.
 *
 * A file whose size is not a whole number of records, or a label over 9,
 * is EF_EFORMAT naming the file and the offset. With on_error=skip what is
 * bad is dropped and counted once, when the files are read: a file that
 * cannot be read is abandoned (its records then count as none, its bytes
 * as lost), a partial record at the end and a record with a bad label
 * (its number stays taken) are skipped.
 *
 * An indexed source (indexed.h): the kit keeps the cursor, saves it in
 * checkpoints, and makes a record again from the files' buffers for a
 * fetch (read at the restore, once). */
#include <stdio.h>
#include <string.h>

#include "codec/cifar.h"
#include "core/alloc.h"
#include "core/buffer.h"
#include "io/paths.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "stages/sources/indexed.h"

typedef struct {
    ef_buffer *images; /* n x 3072 bytes, HWC; NULL for an unread file */
    ef_buffer *labels; /* n x i64 */
    int64_t n, base;   /* records, and the number of the first */
} cifar_file;

typedef struct {
    ef__indexed ix; /* first: the kit's */
    ef__paths paths;
    cifar_file *files;
} cifar_state;

/* Records read from the stream at a time (3 MB). */
#define CHUNK_RECORDS 1024

/* Grows the images and labels arrays to hold `want` records. */
static int grow(unsigned char **images, int64_t **labels,
                int64_t *cap, int64_t want)
{
    if (want <= *cap)
        return 1;
    int64_t n = *cap ? *cap : CHUNK_RECORDS;
    while (n < want)
        n *= 2;
    unsigned char *im = ef__realloc(*images, (size_t)n * EF__CIFAR_IMAGE);
    if (im)
        *images = im;
    int64_t *lb = im ? ef__realloc(*labels, (size_t)n * sizeof **labels) : NULL;
    if (lb)
        *labels = lb;
    if (!im || !lb)
        return 0;
    *cap = n;
    return 1;
}

static void free_data(void *data)
{
    ef__free(data);
}

/* Reads and converts the records of `in` into *images and *labels (*n of
 * them). A partial record at the end is ef__cifar_count's error, with *n
 * the whole records before it and *partial set; more than `max` records
 * is an error, and so are more bytes than the memory budget. */
static int read_records(ef__stream *in, const char *path, int64_t max,
                        const ef__budget *budget, unsigned char *chunk,
                        unsigned char **images, int64_t **labels, int64_t *n,
                        int *partial, ef__err *err)
{
    int64_t cap = 0;
    for (;;) {
        size_t got, want = (size_t)CHUNK_RECORDS * EF__CIFAR_RECORD;
        int rc = ef__stream_read(in, chunk, want, &got, err);
        if (rc != EF_OK)
            return rc;
        int64_t whole = (int64_t)(got / EF__CIFAR_RECORD);
        if (*n + whole > max)
            return ef__err_set(err, EF_EFORMAT,
                               "cifar: %s: more than max_records=%lld records "
                               "(a CIFAR-10 file holds 10000): stopped "
                               "reading at offset %lld",
                               path, (long long)max,
                               (long long)((*n + whole) * EF__CIFAR_RECORD));
        char what[EF__ERR_MAX / 2];
        snprintf(what, sizeof what, "cifar: %.200s: its first %lld records",
                 path, (long long)(*n + whole));
        rc = ef__budget_check(budget,
                              (uint64_t)(*n + whole) *
                                  (EF__CIFAR_IMAGE + sizeof(int64_t)),
                              what, err);
        if (rc != EF_OK)
            return rc;
        if (!grow(images, labels, &cap, *n + whole))
            return ef__err_set(err, EF_ENOMEM,
                               "cifar: %s: out of memory for %lld records",
                               path, (long long)(*n + whole));
        ef__cifar_convert(chunk, whole, *images + (size_t)*n * EF__CIFAR_IMAGE,
                          *labels + *n);
        *n += whole;
        if (got < want) { /* the end: a short read comes only there */
            size_t size = (size_t)*n * EF__CIFAR_RECORD + got % EF__CIFAR_RECORD;
            *partial = size % EF__CIFAR_RECORD != 0;
            return ef__cifar_count(size, path, &whole, err);
        }
    }
}

/* Reads and converts file f. Problems the policy lets us skip are counted
 * here; anything else is returned. */
static int load(ef__stage *s, cifar_state *st, size_t f, ef__err *err)
{
    const char *path = st->paths.names[f];
    cifar_file *cf = &st->files[f];
    ef__stream *in = NULL;
    unsigned char *chunk = NULL, *images = NULL;
    int64_t *labels = NULL, n = 0;
    int partial = 0, rc = ef__stream_open(&in, path, NULL, err);
    if (rc == EF_OK) {
        chunk = ef__malloc((size_t)CHUNK_RECORDS * EF__CIFAR_RECORD);
        rc = chunk ? read_records(in, path, ef__opt_int(&s->opts, "max_records"),
                                  &s->ctx->budget, chunk, &images, &labels, &n, &partial,
                                  err)
                   : ef__err_set(err, EF_ENOMEM, "cifar: out of memory");
    }
    int64_t size = in ? ef__stream_size(in) : -1;
    ef__stream_close(in);
    ef__free(chunk);
    /* a partial record at the end keeps the whole ones before it under
     * skip; any other failure drops the file, all of it: its records are
     * read whole before any is used */
    if (rc != EF_OK && !partial) {
        ef__free(images);
        ef__free(labels);
        return ef__stage_abandon(s, err, "file (read whole or not at all)",
                                 0, size)
                   ? EF_OK
                   : rc;
    }
    if (rc != EF_OK && !ef__stage_skip(s, err)) {
        ef__free(images);
        ef__free(labels);
        return rc;
    }
    cf->n = n;
    if (n > 0) {
        cf->images = ef__buffer_adopt(images, (size_t)n * EF__CIFAR_IMAGE,
                                      free_data, images);
        if (!cf->images)
            ef__free(images);
        cf->labels = ef__buffer_adopt(labels, (size_t)n * sizeof(int64_t),
                                      free_data, labels);
        if (!cf->labels)
            ef__free(labels);
        if (!cf->images || !cf->labels)
            return ef__err_set(err, EF_ENOMEM,
                               "cifar: %s: out of memory for %lld records",
                               path, (long long)n);
    }
    for (int64_t r = 0; r < cf->n; r++) {
        rc = ef__cifar_check_label(path, r, labels[r], err);
        if (rc != EF_OK && !ef__stage_skip(s, err))
            return rc; /* under skip, next() passes over the record */
    }
    return EF_OK;
}

/* Drops what the files held: a failed load keeps nothing. */
static void unload(cifar_state *st)
{
    for (size_t f = 0; f < st->paths.n; f++) {
        ef_buffer_release(st->files[f].images);
        ef_buffer_release(st->files[f].labels);
        memset(&st->files[f], 0, sizeof st->files[f]);
    }
}

/* Reads the files: the kit's load, once. */
static int cifar_load(ef__stage *s, int64_t *records, ef__err *err)
{
    cifar_state *st = s->state;
    int64_t total = 0;
    int rc = EF_OK;
    for (size_t f = 0; f < st->paths.n && rc == EF_OK; f++) {
        rc = load(s, st, f, err);
        st->files[f].base = total;
        total += st->files[f].n;
    }
    if (rc == EF_OK && st->ix.shard.i >= total)
        rc = ef__err_set(err, EF_EFORMAT,
                         "cifar: part %lld of shard=%lld/%lld gets no "
                         "record: the files hold %lld",
                         (long long)st->ix.shard.i, (long long)st->ix.shard.i,
                         (long long)st->ix.shard.n, (long long)total);
    if (rc != EF_OK)
        unload(st);
    *records = total;
    return rc;
}

/* The file holding record r: the last whose base is at most r. */
static const cifar_file *file_of(const cifar_state *st, int64_t r, size_t *f)
{
    size_t lo = 0, hi = st->paths.n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (st->files[mid].base <= r)
            lo = mid;
        else
            hi = mid - 1;
    }
    *f = lo;
    return &st->files[lo];
}

/* Whether record r has a label in range: one that is not was counted as
 * skipped when its file was read, and is never emitted. */
static int check(const ef__stage *s, int64_t r, ef__err *err)
{
    const cifar_state *st = s->state;
    size_t f;
    const cifar_file *cf = file_of(st, r, &f);
    const int64_t *labels = ef_buffer_data(cf->labels);
    int64_t label = labels[r - cf->base];
    if (label >= 0 && label < EF__CIFAR_CLASSES)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "cifar: the state names record %lld (record %lld "
                       "of %s), whose label is out of range: a record "
                       "never emitted (the file changed?)",
                       (long long)r, (long long)(r - cf->base),
                       st->paths.names[f]);
}

/* Record r of pass `epoch`: views into its file's buffers. */
static int make(const ef__stage *s, int64_t r, int64_t epoch, ef_sample **out,
                ef__err *err)
{
    static const int64_t shape[3] = {EF__CIFAR_SIDE, EF__CIFAR_SIDE, 3};
    size_t f;
    const cifar_file *cf = file_of(s->state, r, &f);
    size_t local = (size_t)(r - cf->base);
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = r, .epoch = epoch});
    int rc = smp ? ef_sample_add(smp, "image", EF_U8, 3, shape, cf->images,
                                 local * EF__CIFAR_IMAGE)
                 : EF_ENOMEM;
    if (rc == EF_OK)
        rc = ef_sample_add(smp, "label", EF_I64, 0, NULL, cf->labels,
                           local * sizeof(int64_t));
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "cifar: cannot build sample %lld: %s",
                           (long long)r, ef_strerror(rc));
    }
    *out = smp;
    return EF_OK;
}

static void cifar_stats(const ef__stage *s, ef_stage_stats *out)
{
    const cifar_state *st = s->state;
    ef__stats_extra(out, "files", (double)st->paths.n);
}

static const ef__indexed_ops cifar_ops = {
    .load = cifar_load, .make = make, .check = check, .stats = cifar_stats};

static int cifar_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    cifar_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    int rc = ef__indexed_init(s, o, &cifar_ops, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "files"),
                              "cifar: option 'files'", &st->paths, err);
    if (rc != EF_OK)
        return rc;
    st->files = ef__calloc(st->paths.n, sizeof *st->files);
    if (!st->files)
        return ef__err_set(err, EF_ENOMEM, "cifar: out of memory");
    return EF_OK;
}

static void cifar_destroy(ef__stage *s)
{
    cifar_state *st = s->state;
    if (st->files)
        unload(st);
    ef__free(st->files);
    ef__paths_free(&st->paths);
    ef__free(st);
}

static const ef__option_def cifar_options[] = {
    EF__OPT("files", EF_OPT_STRING, NULL,
            "CIFAR-10 binary files (gzip or raw), space-separated, with {1..5} "
            "expansion",
            0, 0),
    EF__OPT("max_records", EF_OPT_INT, "1000000",
            "most records read from one file; more is an error (CIFAR-10 files "
            "hold 10000)",
            1, 1e9),
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_cifar = {
    .info = {"cifar", "CIFAR-10 binary files (fields image HWC u8, label)",
             EF__OPTIONS(cifar_options)},
    EF__INDEXED_STAGE_OPS,
    .create = cifar_create,
    .destroy = cifar_destroy,
};
