/* SPDX-License-Identifier: Apache-2.0 */
/* tokens: nanoGPT-style token files as a source: raw little-endian uint16
 * (or uint32) token ids, no header, as numpy's tofile() writes them
 * (nanoGPT's prepare.py, `echoflow tokens`). Each sample is a block of
 * `block` tokens, `inputs`, and the same shifted by one, `targets`, both
 * i32 [block], as pack_tokens makes them.
 *
 * `files` lists paths or http(s) URLs (brace-expanded, paths.h). Each
 * file is cut on its own: a block never spans two files (they are
 * separate corpora, or shards of one whose seams are few), and a file of
 * fewer than block + 1 tokens, which holds no block, is an error naming
 * it. So is a file whose size is not a whole number of tokens.
 *
 * order=sequential: the blocks of each file at tokens 0, block, 2 block
 * ... (each needs block + 1 tokens), file after file. order=random: each
 * pass draws total_tokens / block blocks, block k at a window chosen
 * uniformly among all windows of block + 1 tokens of all the files, from
 * a counter-based generator keyed by the pipeline's seed, `seed`, the
 * pass and k: no state but the cursor, the same draws in every process
 * and after every restore, other draws each pass. A block's identity is
 * (k, pass); shard=I/N keeps the blocks k with k % N == I.
 *
 * Local files are read with pread, block by block, nothing else held;
 * URLs with one Range request per block (ef__stream_open_range). Sizes
 * are taken once, at open (stat, or a one-byte Range request), and
 * checked again against each read.
 *
 * An indexed source (indexed.h): block k of a pass is record k, the
 * cursor, shard=, fetch and length are the kit's. Checkpoints hold the
 * file list's checksum, the part and the total size before the cursor;
 * fetch() makes block k of a pass again from its identity alone (and
 * checks its origin: file and byte offset). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "io/paths.h"
#include "pipeline/stage.h"
#include "pipeline/state.h"
#include "stages/sources/checkpoint.h"
#include "stages/sources/indexed.h"
#include "stages/sources/stream_options.h"

typedef struct {
    ef__indexed ix; /* first: the kit's; a record is a block */
    ef__paths files;
    ef__stream_opts sopts;
    int64_t block;
    size_t dsize; /* bytes per token in the files: 2 or 4 */
    int random;
    uint64_t seed; /* the option's */
    /* taken by the kit's load */
    int64_t *cum;  /* blocks (sequential) or windows (random) before file
                      f; cum[n] all of them */
    int64_t total; /* tokens of all the files */
    /* the pulling thread's (make_next) */
    int fd;                 /* the local file next() reads, or -1 */
    int64_t fd_file;        /* its number */
    unsigned char *scratch; /* (block + 1) * dsize bytes, for next() */
    /* statistics */
    _Atomic uint64_t bytes, read_ns;
} tokens_state;

static const char *dtype_name(size_t dsize)
{
    return dsize == 2 ? "uint16" : "uint32";
}

/* The size in bytes of file or URL `name`. */
static int size_of(const tokens_state *st, const char *name, int64_t *size,
                   ef__err *err)
{
    if (!ef__is_url(name)) {
        struct stat sb;
        if (stat(name, &sb) != 0)
            return ef__err_set(err, EF_EIO, "tokens: %s: %s", name,
                               strerror(errno));
        if (!S_ISREG(sb.st_mode))
            return ef__err_set(err, EF_EIO,
                               "tokens: %s is not a regular file (token "
                               "files are read at offsets)",
                               name);
        *size = (int64_t)sb.st_size;
        return EF_OK;
    }
    /* one byte asked for: the reply's Content-Range says the size */
    ef__stream *in;
    unsigned char byte;
    int rc = ef__stream_open_range(&in, name, &st->sopts, 0, 1, err);
    if (rc != EF_OK)
        return rc;
    rc = ef__stream_read_full(in, &byte, 1, "the first token", err);
    *size = ef__stream_size(in);
    ef__stream_close(in);
    if (rc == EF_END)
        *size = 0;
    else if (rc != EF_OK)
        return rc;
    if (*size < 0)
        return ef__err_set(err, EF_EIO,
                           "tokens: %s: the server gave no size (no "
                           "Content-Range or Content-Length)",
                           name);
    return EF_OK;
}

/* Takes every file's size, checks it and counts the blocks: the kit's
 * load. */
static int tokens_load(ef__stage *s, int64_t *blocks, ef__err *err)
{
    tokens_state *st = s->state;
    size_t n = st->files.n;
    int64_t need = st->block + 1;
    st->total = 0;
    for (size_t f = 0; f < n; f++) {
        const char *name = st->files.names[f];
        int64_t size = 0;
        int rc = size_of(st, name, &size, err);
        if (rc != EF_OK)
            return rc;
        if (size % (int64_t)st->dsize != 0)
            return ef__err_set(err, EF_EFORMAT,
                               "tokens: %s is %lld bytes, not a whole number "
                               "of %s tokens (%zu bytes each): truncated, or "
                               "not a token file of dtype=%s",
                               name, (long long)size, dtype_name(st->dsize),
                               st->dsize, dtype_name(st->dsize));
        int64_t t = size / (int64_t)st->dsize;
        if (t < need)
            return ef__err_set(err, EF_EFORMAT,
                               "tokens: %s holds %lld %s tokens (%lld "
                               "bytes), fewer than the block + 1 = %lld a "
                               "block needs",
                               name, (long long)t, dtype_name(st->dsize),
                               (long long)size, (long long)need);
        st->total += t;
        /* sequential: blocks at 0, block, ... with block + 1 tokens;
         * random: windows at 0 to t - block - 1 */
        st->cum[f + 1] =
            st->cum[f] + (st->random ? t - st->block : (t - 1) / st->block);
    }
    *blocks = st->random ? st->total / st->block : st->cum[n];
    return EF_OK;
}

/* The file of position `at` among cum[0..n]: the last f with cum[f] <=
 * at (files holding none are never chosen, as cum[f] == cum[f + 1]). */
static size_t file_of(const tokens_state *st, int64_t at)
{
    size_t lo = 0, hi = st->files.n; /* cum[lo] <= at < cum[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (st->cum[mid] <= at)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Where block k of pass `epoch` starts: file *f, token *t. */
static void locate(const ef__stage *s, const tokens_state *st, int64_t k,
                   int64_t epoch, size_t *f, int64_t *t)
{
    int64_t at = k;
    if (st->random) {
        ef__rng r;
        ef__rng_init(&r, s->ctx->seed ^ (st->seed * 0x9e3779b97f4a7c15ull),
                     (uint64_t)s->index, k, epoch, 0);
        at = (int64_t)ef__rng_below(&r, (uint64_t)st->cum[st->files.n]);
    }
    *f = file_of(st, at);
    *t = (at - st->cum[*f]) * (st->random ? 1 : st->block);
}

/* Reads bytes [off, off + n) of local file `fd` into buf. */
static int read_local(int fd, const char *name, uint64_t off, size_t n,
                      unsigned char *buf, ef__err *err)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ef__err_set(err, EF_EIO, "tokens: %s: read at byte %llu: %s",
                               name, (unsigned long long)(off + got),
                               strerror(errno));
        if (r == 0)
            return ef__err_set(err, EF_EFORMAT,
                               "tokens: %s ends at byte %llu, before the "
                               "block at bytes %llu-%llu: the file shrank "
                               "since it was sized",
                               name, (unsigned long long)(off + got),
                               (unsigned long long)off,
                               (unsigned long long)(off + n));
        got += (size_t)r;
    }
    return EF_OK;
}

/* Reads bytes [off, off + n) of URL `name` into buf: one Range request. */
static int read_url(const tokens_state *st, const char *name, uint64_t off,
                    size_t n, unsigned char *buf, ef__err *err)
{
    ef__stream *in;
    int rc = ef__stream_open_range(&in, name, &st->sopts, off, off + n, err);
    if (rc != EF_OK)
        return rc;
    rc = ef__stream_read_full(in, buf, n, "a block of tokens", err);
    if (rc == EF_END)
        rc = ef__err_set(err, EF_EFORMAT,
                         "tokens: %s ends before byte %llu, where a block "
                         "starts: the file shrank since it was sized",
                         name, (unsigned long long)off);
    ef__stream_close(in);
    return rc;
}

/* Widens the block + 1 raw tokens into inputs and targets. */
static int widen(const tokens_state *st, const unsigned char *raw, int32_t *dst,
                 const char *name, uint64_t off, ef__err *err)
{
    int64_t n = st->block;
    if (st->dsize == 2) {
        for (int64_t j = 0; j < n; j++)
            dst[j] = raw[2 * j] | raw[2 * j + 1] << 8;
        memcpy(dst + n, dst + 1, (size_t)(n - 1) * sizeof *dst);
        dst[2 * n - 1] = raw[2 * n] | raw[2 * n + 1] << 8;
        return EF_OK;
    }
    uint32_t high = 0;
    for (int64_t j = 0; j <= n; j++) {
        const unsigned char *p = raw + 4 * j;
        uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        high |= v;
        dst[j < n ? j : 2 * n - 1] = (int32_t)(v & 0x7fffffff);
    }
    if (high >> 31) { /* rare: find the id for the message */
        for (int64_t j = 0; j <= n; j++)
            if (raw[4 * j + 3] & 0x80) {
                const unsigned char *p = raw + 4 * j;
                uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                             (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
                return ef__err_set(err, EF_EFORMAT,
                                   "tokens: %s: token id %lu at byte %llu "
                                   "does not fit i32 (at most 2147483647)",
                                   name, (unsigned long)v,
                                   (unsigned long long)(off + 4 * (uint64_t)j));
            }
    }
    memcpy(dst + n, dst + 1, (size_t)(n - 1) * sizeof *dst);
    return EF_OK;
}

/* Block k of pass `epoch`, read through `fd` (open on file *fd_file, or
 * -1; updated) into scratch. */
static int read_block(const ef__stage *s, int64_t k, int64_t epoch, int *fd,
                      int64_t *fd_file, unsigned char *scratch, ef_sample **out,
                      ef__err *err)
{
    tokens_state *st = s->state;
    size_t f;
    int64_t t;
    locate(s, st, k, epoch, &f, &t);
    const char *name = st->files.names[f];
    uint64_t off = (uint64_t)t * st->dsize;
    size_t n = (size_t)(st->block + 1) * st->dsize;
    uint64_t t0 = ef__timer_ns();
    int rc;
    if (ef__is_url(name)) {
        rc = read_url(st, name, off, n, scratch, err);
    } else {
        if (*fd >= 0 && *fd_file != (int64_t)f) {
            close(*fd);
            *fd = -1;
        }
        if (*fd < 0 && (*fd = open(name, O_RDONLY | O_CLOEXEC)) < 0)
            return ef__err_set(err, EF_EIO, "tokens: %s: %s", name,
                               strerror(errno));
        *fd_file = (int64_t)f;
        rc = read_local(*fd, name, off, n, scratch, err);
    }
    ef__stat_add(&st->read_ns, ef__elapsed_ns(t0, ef__timer_ns()));
    if (rc != EF_OK)
        return rc;
    ef__stat_add(&st->bytes, n);
    int64_t shape[1] = {st->block};
    ef_sample *smp = ef_sample_new((ef_sample_id){.index = k, .epoch = epoch});
    ef_buffer *buf =
        smp ? ef_buffer_new((size_t)st->block * 2 * sizeof(int32_t)) : NULL;
    rc = buf ? ef_sample_add(smp, "inputs", EF_I32, 1, shape, buf, 0)
             : EF_ENOMEM;
    if (rc == EF_OK)
        rc = ef_sample_add(smp, "targets", EF_I32, 1, shape, buf,
                           (size_t)st->block * sizeof(int32_t));
    if (rc == EF_OK)
        rc = widen(st, scratch, ef_buffer_data(buf), name, off, err);
    else
        ef__err_set(err, rc, "tokens: block %lld: %s", (long long)k,
                    ef_strerror(rc));
    ef_buffer_release(buf);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return rc;
    }
    smp->origin.part = (int64_t)f;
    smp->origin.offset = (int64_t)off;
    smp->origin.end = (int64_t)(off + n);
    *out = smp;
    return EF_OK;
}

/* next(): through the file and buffer the pulling thread keeps. */
static int make_next(ef__stage *s, int64_t k, int64_t epoch, ef_sample **out,
                     ef__err *err)
{
    tokens_state *st = s->state;
    return read_block(s, k, epoch, &st->fd, &st->fd_file, st->scratch, out,
                      err);
}

/* fetch(): any thread, any time, on a file descriptor and a buffer of
 * its own. */
static int make(const ef__stage *s, int64_t k, int64_t epoch, ef_sample **out,
                ef__err *err)
{
    const tokens_state *st = s->state;
    unsigned char *scratch = ef__malloc((size_t)(st->block + 1) * st->dsize);
    if (!scratch)
        return ef__err_set(err, EF_ENOMEM, "tokens: out of memory");
    int fd = -1;
    int64_t fd_file = -1;
    int rc = read_block(s, k, epoch, &fd, &fd_file, scratch, out, err);
    if (fd >= 0)
        close(fd);
    ef__free(scratch);
    return rc;
}

/* A fetched block starts where its identity says: the same file and
 * byte offset. */
static int check_origin(const ef__stage *s, const ef__ident *d, ef__err *err)
{
    const tokens_state *st = s->state;
    size_t f;
    int64_t t;
    locate(s, st, d->id.index, d->id.epoch, &f, &t);
    if (d->part == (int64_t)f && d->offset == t * (int64_t)st->dsize)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "tokens: the state names block %lld at byte %lld "
                       "of file %lld, but it starts at byte %lld of file "
                       "%zu now: the files or the seed changed",
                       (long long)d->id.index, (long long)d->offset,
                       (long long)d->part, (long long)(t * (int64_t)st->dsize),
                       f);
}

/* Before the cursor: the file list and part, the tokens of all the files
 * (a file that changed size moves every block after it). */
static void tokens_save(const ef__stage *s, ef__state_out *o)
{
    const tokens_state *st = s->state;
    ef__files_save(&st->files, o);
    ef__part_save(&st->ix.shard, o);
    ef__put_i64(o, st->ix.loaded ? st->total : -1);
}

static int tokens_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    tokens_state *st = s->state;
    int64_t total;
    int rc = ef__files_restore(&st->files, "file", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&st->ix.shard, in);
    if (rc == EF_OK)
        rc = ef__get_i64(in, "the tokens of the files", &total);
    if (rc == EF_OK)
        rc = ef__indexed_ready(s, err);
    if (rc == EF_OK && total >= 0 && total != st->total)
        rc = ef__state_bad(in,
                           "the files held %lld tokens, they hold %lld now: "
                           "they changed since the state was saved",
                           (long long)total, (long long)st->total);
    return rc;
}

static void tokens_stats(const ef__stage *s, ef_stage_stats *out)
{
    const tokens_state *st = s->state;
    ef__stats_extra(out, "tokens_in_files",
                    st->ix.loaded ? (double)st->total : 0);
    ef__stats_extra(out, "blocks_per_pass",
                    st->ix.loaded ? (double)st->ix.records : 0);
    double bytes = (double)ef__stat_get(&st->bytes),
           read_s = ef__ns_to_s(ef__stat_get(&st->read_ns));
    ef__stats_extra(out, "bytes", bytes);
    ef__stats_extra(out, "MB/s", read_s > 0 ? bytes / 1e6 / read_s : 0);
}

static const char *tokens_part_name(const ef__stage *s, int64_t part)
{
    const tokens_state *st = s->state;
    return ef__paths_at(&st->files, part);
}

static const ef__indexed_ops tokens_ops = {.load = tokens_load,
                                           .make = make,
                                           .make_next = make_next,
                                           .check_origin = check_origin,
                                           .save = tokens_save,
                                           .restore = tokens_restore,
                                           .stats = tokens_stats,
                                           .part_name = tokens_part_name};

static int tokens_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tokens_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->fd = -1;
    st->block = ef__opt_int(o, "block");
    st->seed = (uint64_t)ef__opt_int(o, "seed");
    ef__stream_opts_from(o, &st->sopts);
    st->sopts.compression = 0; /* token files are raw: Range requests fit */
    st->sopts.cancelled = &s->ctx->cancelled;
    int u16, seq;
    int rc =
        ef__opt_choice(o, "tokens", "dtype", "uint16", "uint32", &u16, err);
    if (rc == EF_OK)
        rc = ef__opt_choice(o, "tokens", "order", "sequential", "random", &seq,
                            err);
    if (rc == EF_OK)
        rc = ef__indexed_init(s, o, &tokens_ops, err);
    if (rc == EF_OK)
        rc = ef__paths_expand(ef__opt_string(o, "files"),
                              "tokens: option 'files'", &st->files, err);
    if (rc != EF_OK)
        return rc;
    if (st->files.n == 0)
        return ef__err_set(err, EF_ESPEC,
                           "tokens: option 'files' lists no "
                           "file");
    st->dsize = u16 ? 2 : 4;
    st->random = !seq;
    st->scratch = ef__malloc((size_t)(st->block + 1) * st->dsize);
    st->cum = ef__calloc(st->files.n + 1, sizeof *st->cum);
    if (!st->scratch || !st->cum)
        return ef__err_set(err, EF_ENOMEM, "tokens: out of memory");
    return EF_OK;
}

static void tokens_destroy(ef__stage *s)
{
    tokens_state *st = s->state;
    if (!st)
        return;
    if (st->fd >= 0)
        close(st->fd);
    ef__paths_free(&st->files);
    ef__free(st->cum);
    ef__free(st->scratch);
    ef__free(st);
}

static const ef__option_def tokens_options[] = {
    EF__OPT("files", EF_OPT_STRING, NULL,
            "token files (raw little-endian ids, no header): paths or http(s) "
            "URLs, space-separated, with {a,b} and {00..99} expansion; each is "
            "cut into blocks on its own",
            0, 0),
    EF__OPT("block", EF_OPT_INT, NULL,
            "tokens per sample: inputs and targets are i32 [block]", 1,
            1 << 26),
    EF__OPT("dtype", EF_OPT_STRING, "uint16",
            "the files' token type: uint16 or uint32", 0, 0),
    EF__OPT(
        "order", EF_OPT_STRING, "sequential",
        "sequential (blocks at 0, block, 2 block ... of each file) or random "
        "(total/block blocks a pass at uniform offsets, keyed by the seeds "
        "and the pass)",
        0, 0),
    EF__OPT("seed", EF_OPT_INT, "0",
            "order=random: mixed into the pipeline's seed", 0, 9.2e18),
    EF__STREAM_OPTIONS,
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_tokens = {
    .info = {"tokens",
             "nanoGPT token files (uint16/uint32) as blocks of inputs and "
             "next-token targets, i32 [block]",
             EF__OPTIONS(tokens_options)},
    EF__INDEXED_STAGE_OPS,
    .create = tokens_create,
    .destroy = tokens_destroy,
};
