/* idx: MNIST-style IDX files as a source. Images and labels are read whole
 * at open (gzip or not), checked against each other, and every sample's
 * fields are views into those two buffers: no per-sample copy. shard=I/N
 * keeps the records r with r % N == I. */
#include <string.h>

#include "codec/idx.h"
#include "core/alloc.h"
#include "io/file.h"
#include "stage.h"

typedef struct {
    ef_buffer *images; /* the whole images file, host byte order */
    ef_buffer *labels; /* i64 per record, or NULL without labels */
    ef__idx_header h;
    ef__shard shard;
    int64_t next; /* next record of this pass */
} idx_state;

static int idx_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    idx_state *st = ef__calloc(1, sizeof *st);
    s->state = st;
    if (!st)
        return ef__err_set(err, EF_ENOMEM, "idx: out of memory");
    int rc = ef__shard_parse(s, o, &st->shard, err);
    st->next = st->shard.i;
    return rc;
}

/* Reads the labels file into one i64 per record. */
static int load_labels(idx_state *st, const char *path, ef__err *err)
{
    ef_buffer *raw;
    int rc = ef__read_file(path, &raw, err);
    if (rc != EF_OK)
        return rc;
    ef__idx_header lh;
    const unsigned char *data = ef_buffer_data(raw);
    rc = ef__idx_parse(data, ef_buffer_size(raw), path, &lh, err);
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

static int idx_open(ef__stage *s, ef__err *err)
{
    idx_state *st = s->state;
    const char *images = ef__opt_string(&s->opts, "images");
    const char *labels = ef__opt_string(&s->opts, "labels");
    int rc = ef__read_file(images, &st->images, err);
    if (rc == EF_OK)
        rc = ef__idx_parse(ef_buffer_data(st->images),
                           ef_buffer_size(st->images), images, &st->h, err);
    if (rc == EF_OK)
        ef__idx_to_host(ef_buffer_data(st->images), &st->h);
    if (rc == EF_OK && labels[0])
        rc = load_labels(st, labels, err);
    return rc;
}

static int idx_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    idx_state *st = s->state;
    if (st->next >= st->h.dims[0])
        return EF_END;
    int64_t i = st->next;
    ef_sample *smp =
        ef_sample_new((ef_sample_id){.index = i, .epoch = s->epoch});
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
    st->next += st->shard.n;
    *out = smp;
    return EF_OK;
}

static int idx_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    idx_state *st = s->state;
    st->next = st->shard.i;
    return EF_OK;
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

static void idx_stats(const ef__stage *s, ef_stage_stats *out)
{
    const idx_state *st = s->state;
    ef__stats_extra(out, "records", st->images ? (double)st->h.dims[0] : 0);
}

static const ef__option_def idx_options[] = {
    {"images", EF_OPT_STRING, NULL, "IDX images file (gzip or raw)", 0, 0},
    {"labels", EF_OPT_STRING, "", "IDX labels file, paired with the images", 0,
     0},
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_idx = {
    .info = {"idx", "MNIST/Fashion-MNIST IDX files (fields image, label)", 3,
             idx_options},
    .is_source = 1,
    .create = idx_create,
    .open = idx_open,
    .next = idx_next,
    .reset = idx_reset,
    .destroy = idx_destroy,
    .stats = idx_stats,
};
