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
 * Checkpoints: the state saves the next record's number; fetch() makes a
 * record again from the files' buffers (read at the restore, once). */
#include <stdio.h>
#include <string.h>

#include "codec/cifar.h"
#include "core/alloc.h"
#include "core/buffer.h"
#include "io/stream.h"
#include "pipeline/stage.h"
#include "io/paths.h"
#include "pipeline/state.h"

typedef struct {
    ef_buffer *images; /* n x 3072 bytes, HWC; NULL for an unread file */
    ef_buffer *labels; /* n x i64 */
    int64_t n, base;   /* records, and the number of the first */
} cifar_file;

typedef struct {
    ef__paths paths;
    cifar_file *files;
    int64_t total; /* records in all files */
    ef__shard shard;
    int loaded;   /* the files were read (at open, or at a restore) */
    int64_t next; /* the next record of this pass */
    size_t cur;   /* the file holding `next` (records only grow in a pass) */
} cifar_state;

static int cifar_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    cifar_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    int rc = ef__shard_parse(s, o, &st->shard, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "files"),
                              "cifar: option 'files'", &st->paths, err);
    if (rc != EF_OK)
        return rc;
    st->files = ef__calloc(st->paths.n, sizeof *st->files);
    if (!st->files)
        return ef__err_set(err, EF_ENOMEM, "cifar: out of memory");
    st->next = st->shard.i;
    return EF_OK;
}

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

/* Reads the files, once: at open, or at a restore. */
static int cifar_open(ef__stage *s, ef__err *err)
{
    cifar_state *st = s->state;
    if (st->loaded)
        return EF_OK;
    st->loaded = 1; /* a failure fails the pipeline: no second try */
    for (size_t f = 0; f < st->paths.n; f++) {
        int rc = load(s, st, f, err);
        if (rc != EF_OK)
            return rc;
        st->files[f].base = st->total;
        st->total += st->files[f].n;
    }
    if (st->shard.i >= st->total)
        return ef__err_set(err, EF_EFORMAT,
                           "cifar: part %lld of shard=%lld/%lld gets no "
                           "record: the files hold %lld",
                           (long long)st->shard.i, (long long)st->shard.i,
                           (long long)st->shard.n, (long long)st->total);
    return EF_OK;
}

/* Whether record `local` of cf has a label in range: one that is not was
 * counted as skipped when the file was read, and is never emitted. */
static int good(const cifar_file *cf, int64_t local)
{
    const int64_t *labels = ef_buffer_data(cf->labels);
    return labels[local] >= 0 && labels[local] < EF__CIFAR_CLASSES;
}

/* Record r (record `local` of cf) of pass `epoch`: views into the file's
 * buffers. */
static int make(const cifar_file *cf, int64_t r, int64_t local, int64_t epoch,
                ef_sample **out, ef__err *err)
{
    static const int64_t shape[3] = {EF__CIFAR_SIDE, EF__CIFAR_SIDE, 3};
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = r, .epoch = epoch});
    int rc = smp ? ef_sample_add(smp, "image", EF_U8, 3, shape, cf->images,
                                 (size_t)local * EF__CIFAR_IMAGE)
                 : EF_ENOMEM;
    if (rc == EF_OK)
        rc = ef_sample_add(smp, "label", EF_I64, 0, NULL, cf->labels,
                           (size_t)local * sizeof(int64_t));
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "cifar: cannot build sample %lld: %s",
                           (long long)r, ef_strerror(rc));
    }
    *out = smp;
    return EF_OK;
}

static int cifar_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    cifar_state *st = s->state;
    while (st->next < st->total) {
        int64_t r = st->next;
        st->next += st->shard.n;
        while (r >= st->files[st->cur].base + st->files[st->cur].n)
            st->cur++;
        const cifar_file *cf = &st->files[st->cur];
        if (good(cf, r - cf->base))
            return make(cf, r, r - cf->base, s->epoch, out, err);
    }
    return EF_END;
}

static int cifar_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    cifar_state *st = s->state;
    st->next = st->shard.i;
    st->cur = 0;
    return EF_OK;
}

static int cifar_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    ef__put_i64(o, ((cifar_state *)s->state)->next);
    return EF_OK;
}

/* The record count is known once the files are read: checked then. */
static int cifar_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    cifar_state *st = s->state;
    int rc = cifar_open(s, err);
    if (rc == EF_OK)
        rc = ef__cursor_restore(in, &st->shard, st->total, &st->next);
    st->cur = 0; /* next() finds the file holding `next` from there */
    return rc;
}

static int cifar_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    cifar_state *st = s->state;
    int64_t r = d->id.index;
    int rc = cifar_open(s, err);
    if (rc == EF_OK)
        rc = ef__index_check(s, &st->shard, r, st->total, err);
    if (rc != EF_OK)
        return rc;
    size_t f = 0;
    while (r >= st->files[f].base + st->files[f].n)
        f++;
    const cifar_file *cf = &st->files[f];
    if (!good(cf, r - cf->base))
        return ef__err_set(err, EF_EFORMAT,
                           "cifar: the state names record %lld (record %lld "
                           "of %s), whose label is out of range: a record "
                           "never emitted (the file changed?)",
                           (long long)r, (long long)(r - cf->base),
                           st->paths.names[f]);
    return make(cf, r, r - cf->base, d->id.epoch, out, err);
}

static void cifar_destroy(ef__stage *s)
{
    cifar_state *st = s->state;
    for (size_t f = 0; st->files && f < st->paths.n; f++) {
        ef_buffer_release(st->files[f].images);
        ef_buffer_release(st->files[f].labels);
    }
    ef__free(st->files);
    ef__paths_free(&st->paths);
    ef__free(st);
}

static void cifar_stats(const ef__stage *s, ef_stage_stats *out)
{
    const cifar_state *st = s->state;
    ef__stats_extra(out, "records", (double)st->total);
    ef__stats_extra(out, "files", (double)st->paths.n);
}

/* The files' records in this part: known once they are read, which
 * this does before open (once: open then uses them). */
static int cifar_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    const cifar_state *st = s->state;
    int rc = cifar_open(s, err);
    if (rc == EF_OK)
        *n = ef__shard_count(&st->shard, st->total);
    return rc;
}

static const ef__option_def cifar_options[] = {
    {"files", EF_OPT_STRING, NULL,
     "CIFAR-10 binary files (gzip or raw), space-separated, with {1..5} "
     "expansion",
     0, 0},
    {"max_records", EF_OPT_INT, "1000000",
     "most records read from one file; more is an error (CIFAR-10 files "
     "hold 10000)",
     1, 1e9},
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_cifar = {
    .info = {"cifar", "CIFAR-10 binary files (fields image HWC u8, label)",
             EF__OPTIONS(cifar_options)},
    .is_source = 1,
    .create = cifar_create,
    .open = cifar_open,
    .next = cifar_next,
    .reset = cifar_reset,
    .destroy = cifar_destroy,
    .stats = cifar_stats,
    .save = cifar_save,
    .restore = cifar_restore,
    .fetch = cifar_fetch,
    .length = cifar_length,
};
