/* cifar: CIFAR-10 binary files as a source. Fields `image` (u8 [32,32,3],
 * height, width, channel) and `label` (i64 scalar).
 *
 * `files` lists the files (paths, brace-expanded: "data_batch_{1..5}.bin";
 * gzip is inflated), read whole at open. Each file is converted once into
 * one buffer of images in HWC order and one of labels, and every sample's
 * fields are views into them: no per-sample copy. A sample's identity is
 * its record number counted across the files in order; shard=I/N keeps the
 * records r with r % N == I.
 *
 * A file whose size is not a whole number of records, or a label over 9,
 * is EF_EFORMAT naming the file and the offset. With on_error=skip what is
 * bad is dropped and counted once, when the files are read: a file that
 * cannot be read (its records then count as none), a partial record at the
 * end, a record with a bad label (its number stays taken). */
#include <string.h>

#include "codec/cifar.h"
#include "core/alloc.h"
#include "io/file.h"
#include "stage.h"
#include "stages/paths.h"

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
    int64_t next; /* the next record of this pass */
    size_t cur;   /* the file holding `next` (records only grow in a pass) */
} cifar_state;

static int cifar_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    cifar_state *st = ef__calloc(1, sizeof *st);
    if (!st)
        return ef__err_set(err, EF_ENOMEM, "cifar: out of memory");
    s->state = st;
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

/* Reads and converts file f. Problems the policy lets us skip are counted
 * here; anything else is returned. */
static int load(ef__stage *s, cifar_state *st, size_t f, ef__err *err)
{
    const char *path = st->paths.names[f];
    cifar_file *cf = &st->files[f];
    ef_buffer *raw;
    int rc = ef__read_file(path, &raw, err);
    if (rc != EF_OK)
        return ef__stage_skip(s, err) ? EF_OK : rc;
    rc = ef__cifar_count(ef_buffer_size(raw), path, &cf->n, err);
    if (rc != EF_OK && !ef__stage_skip(s, err)) {
        ef_buffer_release(raw);
        return rc; /* else the whole records before the partial one stay */
    }
    cf->images = ef_buffer_new((size_t)cf->n * EF__CIFAR_IMAGE);
    cf->labels = ef_buffer_new((size_t)cf->n * sizeof(int64_t));
    if (!cf->images || !cf->labels) {
        ef_buffer_release(raw);
        return ef__err_set(err, EF_ENOMEM,
                           "cifar: %s: out of memory for %lld records", path,
                           (long long)cf->n);
    }
    int64_t *labels = ef_buffer_data(cf->labels);
    ef__cifar_convert(ef_buffer_data(raw), cf->n, ef_buffer_data(cf->images),
                      labels);
    ef_buffer_release(raw);
    for (int64_t r = 0; r < cf->n; r++) {
        rc = ef__cifar_check_label(path, r, labels[r], err);
        if (rc != EF_OK && !ef__stage_skip(s, err))
            return rc; /* under skip, next() passes over the record */
    }
    return EF_OK;
}

static int cifar_open(ef__stage *s, ef__err *err)
{
    cifar_state *st = s->state;
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

static int cifar_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    cifar_state *st = s->state;
    while (st->next < st->total) {
        int64_t r = st->next;
        st->next += st->shard.n;
        while (r >= st->files[st->cur].base + st->files[st->cur].n)
            st->cur++;
        const cifar_file *cf = &st->files[st->cur];
        int64_t local = r - cf->base;
        const int64_t *labels = ef_buffer_data(cf->labels);
        if (labels[local] < 0 || labels[local] >= EF__CIFAR_CLASSES)
            continue; /* counted as skipped when the file was read */
        static const int64_t shape[3] = {EF__CIFAR_SIDE, EF__CIFAR_SIDE, 3};
        ef_sample *smp =
            ef_sample_new((ef_sample_id){.index = r, .epoch = s->epoch});
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

static const ef__option_def cifar_options[] = {
    {"files", EF_OPT_STRING, NULL,
     "CIFAR-10 binary files (gzip or raw), space-separated, with {1..5} "
     "expansion",
     0, 0},
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_cifar = {
    .info = {"cifar", "CIFAR-10 binary files (fields image HWC u8, label)", 2,
             cifar_options},
    .is_source = 1,
    .create = cifar_create,
    .open = cifar_open,
    .next = cifar_next,
    .reset = cifar_reset,
    .destroy = cifar_destroy,
    .stats = cifar_stats,
};
