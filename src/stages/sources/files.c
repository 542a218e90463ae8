/* SPDX-License-Identifier: Apache-2.0 */
/* files: a folder, a list or a glob of single files as a source, one
 * sample per file, so that a plain folder of images trains without being
 * packed into shards first.
 *
 * Exactly one of `root` (a torchvision ImageFolder tree: files_walk.c),
 * `list` (a list file of paths or URLs, with or without labels) or `glob`
 * says which files (files_list.h). A sample holds the file's bytes as u8
 * [N] named by its lowercase extension (`jpg`, `png` ...), `label` (i64
 * scalar, when the entries have labels), `__key__` and `__url__`, as the
 * tar source gives them. Its identity is the file's index in the whole
 * list, and its origin that index and the bytes [0, size).
 *
 * A format of the reader-pool kit (reader_pool.h): the files are read in
 * list order, or shuffled per pass with shuffle=true, by `readers`
 * threads (R HTTP requests in flight), taken from each in turn. A reader
 * charges the budget for a file before it reads it (its size, or for a
 * body of unknown length each step of its growth); a file over the whole
 * budget, or a body that grows past it, fails. Under on_error=skip a file
 * that cannot be read is dropped and counted as skipped. The state is the
 * pass position of the next sample; fetch() reads a file whole again and
 * checks its size against the origin. */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/buffer.h"
#include "core/sample.h"
#include "io/paths.h"
#include "io/stream.h"
#include "stages/sources/files_list.h"
#include "stages/sources/reader_pool.h"
#include "stages/sources/stream_options.h"

typedef struct {
    ef__reader_pool pool; /* its names: a view of the entries' urls */
    ef__file_list list;
    /* every entry's __url__ and __key__ bytes (the list's sealed text,
     * at its entries' offsets), and label, in one buffer each, which
     * samples view: no allocation per sample for them */
    ef_buffer *text, *labels;
} files_state;

/* ---- one file --------------------------------------------------------- */

/* Reads all of stream s into *out: one allocation when the size is
 * known (a local file), a growing one otherwise (HTTP), which grows to
 * the budget at most. What it allocates is charged to reader r first (r
 * NULL: a fetch, which charges nothing), and on failure is still held
 * there for the driver to give back. */
static int read_all(const files_state *st, ef__stream *s, ef__pool_reader *r,
                    ef_buffer **out, ef__err *err)
{
    const ef__budget *budget = &st->pool.s->ctx->budget;
    int64_t size = ef__stream_size(s);
    *out = NULL;
    if (size >= 0) {
        if (!ef__budget_fits(budget, (uint64_t)size))
            return ef__budget_check(budget, (uint64_t)size, ef__stream_name(s),
                                    err);
        int rc = ef__reader_pool_hold(r, (uint64_t)size);
        if (rc != EF_OK)
            return rc;
        ef_buffer *b = ef_buffer_new((size_t)size);
        if (!b)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                               ef__stream_name(s));
        rc = size ? ef__stream_read_full(s, ef_buffer_data(b), (size_t)size,
                                         "the file", err)
                  : EF_OK;
        char more;
        size_t got = 0;
        if (rc == EF_END)
            rc = ef__err_set(err, EF_EFORMAT, "%s: empty, expected %lld bytes",
                             ef__stream_name(s), (long long)size);
        if (rc == EF_OK)
            rc = ef__stream_read(s, &more, 1, &got, err);
        if (rc == EF_OK && got)
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: longer than the %lld bytes it had when "
                             "opened (it changed while read)",
                             ef__stream_name(s), (long long)size);
        if (rc != EF_OK) {
            ef_buffer_release(b);
            return rc;
        }
        *out = b;
        return EF_OK;
    }
    unsigned char *data = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            /* double, up to the budget: a body that fills that is over
             * it, however long it goes on */
            size_t c = cap ? cap * 2 : (size_t)64 << 10;
            if (budget->limit && c > budget->limit)
                c = (size_t)budget->limit;
            int rc = c > cap ? ef__reader_pool_hold(r, c - cap)
                             : ef__budget_check(budget, (uint64_t)cap + 1,
                                                ef__stream_name(s), err);
            unsigned char *more = rc == EF_OK ? ef__realloc(data, c) : NULL;
            if (!more) {
                if (rc == EF_OK)
                    rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                                     ef__stream_name(s));
                ef__free(data); /* realloc failing keeps it: freed here */
                return rc;
            }
            data = more;
            cap = c;
        }
        size_t got;
        int rc = ef__stream_read(s, data + n, cap - n, &got, err);
        if (rc != EF_OK) {
            ef__free(data);
            return rc;
        }
        if (!got)
            break;
        n += got;
    }
    *out = ef__buffer_adopt(data, n, ef__free, data);
    if (!*out) {
        ef__free(data);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                           ef__stream_name(s));
    }
    return EF_OK;
}

/* The sample of file f for pass `epoch`, its bytes `b` (taken). */
static int build(const files_state *st, int64_t f, int64_t epoch, ef_buffer *b,
                 ef_sample **out, ef__err *err)
{
    const ef__file_entry *e = &st->list.v[f];
    const char *url = ef__file_url(&st->list, (size_t)f);
    ef_sample_id id = {.index = f, .epoch = epoch};
    ef_sample *smp = ef_sample_new(id);
    int64_t n = (int64_t)ef_buffer_size(b);
    int rc = smp ? ef__sample_add_variable(
                       smp, ef__file_field(&st->list, (size_t)f), EF_U8, n, b, 0)
                 : EF_ENOMEM;
    ef_buffer_release(b);
    if (rc == EF_OK && st->list.labelled)
        rc = ef_sample_add(smp, "label", EF_I64, 0, NULL, st->labels,
                           (size_t)f * sizeof(int64_t));
    int64_t kn = (int64_t)strlen(ef__file_key(&st->list, (size_t)f));
    int64_t un = (int64_t)strlen(url);
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "__key__", EF_U8, kn, st->text,
                                     e->key);
    if (rc == EF_OK)
        rc = ef__sample_add_variable(smp, "__url__", EF_U8, un, st->text,
                                     e->url);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return ef__err_set(err, rc, "files: %s: cannot build a sample: %s", url,
                           ef_strerror(rc));
    }
    smp->origin = (ef__origin){f, 0, n, NULL};
    *out = smp;
    return EF_OK;
}

/* Reads file f whole into a sample; errors name it. Reader `r` (NULL
 * for a fetch) counts the reading and is charged what it holds (see
 * read_all). */
static int read_file(const files_state *st, int64_t f, int64_t epoch,
                     const atomic_int *cancelled, ef__pool_reader *r,
                     ef_sample **out, ef__err *err)
{
    ef__stream_opts o = st->pool.sopts;
    o.cancelled = cancelled;
    ef__stream *s = NULL;
    ef_buffer *b = NULL;
    *out = NULL;
    int rc = ef__stream_open(&s, ef__file_url(&st->list, (size_t)f), &o, err);
    if (rc == EF_OK)
        rc = read_all(st, s, r, &b, err);
    if (s && r) {
        ef__stream_stats none = {0, 0, 0};
        ef__reader_pool_count(r, s, &none);
        ef__stat_add(&r->parts, 1);
    }
    ef__stream_close(s);
    if (rc == EF_OK)
        return build(st, f, epoch, b, out, err);
    ef__reader_pool_name_failure(&st->pool, err, rc, f);
    return rc;
}

/* The format's read_part: file f whole, handed over with its charge. */
static int read_part(ef__pool_reader *r, int64_t f, uint64_t offset,
                     int64_t position, ef__part_stop *stop, ef__err *err)
{
    (void)offset; /* a file is read whole: 0 */
    (void)position;
    (void)stop;
    files_state *st = (files_state *)r->pool;
    ef_sample *smp;
    int rc = read_file(st, f, r->pool->epoch, &r->pool->stop, r, &smp, err);
    return rc == EF_OK ? ef__reader_pool_push(r, smp, r->held) : rc;
}

/* ---- the stage ----------------------------------------------------------- */

/* Exactly one of root, list, glob builds the entries. */
static int make_list(files_state *st, const ef__opts *o, ef__err *err)
{
    const char *root = ef__opt_string(o, "root");
    const char *list = ef__opt_string(o, "list");
    const char *glob = ef__opt_string(o, "glob");
    int given = !!root[0] + !!list[0] + !!glob[0];
    if (given != 1)
        return ef__err_set(err, EF_ESPEC,
                           "files: expected exactly one of the options "
                           "'root' (an ImageFolder directory), 'list' (a "
                           "list file) or 'glob' (a pattern), got %d",
                           given);
    if (!root[0] &&
        (ef__opt_given(o, "extensions") || ef__opt_given(o, "allow_empty")))
        return ef__err_set(err, EF_ESPEC,
                           "files: options 'extensions' and 'allow_empty' "
                           "apply to 'root' only");
    if (glob[0] && ef__opt_given(o, "max_entries"))
        return ef__err_set(err, EF_ESPEC,
                           "files: option 'max_entries' applies to 'root' "
                           "and 'list' only");
    if (list[0])
        return ef__files_from_list(list, ef__opt_int(o, "max_entries"),
                                   &st->list, err);
    if (glob[0])
        return ef__files_from_glob(glob, &st->list, err);
    ef__file_exts exts;
    int rc = ef__file_exts_parse(ef__opt_string(o, "extensions"),
                                 "files: option 'extensions'", &exts, err);
    if (rc != EF_OK)
        return rc;
    return ef__files_from_folder(root, &exts, ef__opt_bool(o, "allow_empty"),
                                 ef__opt_int(o, "max_entries"), &st->list, err);
}

/* The shared buffers of url and key bytes and labels, and the names. */
static int make_buffers(files_state *st, ef__err *err)
{
    size_t n = st->list.n;
    st->text = ef__file_list_seal(&st->list);
    st->labels = ef_buffer_new(n * sizeof(int64_t));
    ef__paths *names = &st->pool.names;
    names->names = ef__malloc(n * sizeof *names->names);
    if (!st->text || !st->labels || !names->names)
        return ef__err_set(err, EF_ENOMEM, "files: out of memory");
    names->n = n;
    int64_t *lab = ef_buffer_data(st->labels);
    for (size_t i = 0; i < n; i++) {
        lab[i] = st->list.v[i].label;
        names->names[i] = st->list.text + st->list.v[i].url;
    }
    return EF_OK;
}

/* The pool's list hook: the files, and how they are opened. */
static int list_files(ef__reader_pool *p, const ef__opts *o, ef__err *err)
{
    files_state *st = (files_state *)p;
    /* no max_inflate, as nothing is inflated (a file.gz is its bytes) */
    ef__stream_opts_http(o, &p->sopts);
    p->sopts.compression = 0;
    /* a FIFO listed or found in the tree would block its reader for good,
     * and close() with it */
    p->sopts.regular_only = 1;
    int rc = make_list(st, o, err);
    return rc == EF_OK ? make_buffers(st, err) : rc;
}

static void files_destroy(ef__reader_pool *p)
{
    files_state *st = (files_state *)p;
    ef_buffer_release(st->text);
    ef_buffer_release(st->labels);
    ef__free(p->names.names); /* a view: the entries own the urls */
    ef__file_list_free(&st->list);
}

static const ef__reader_format files_format = {
    .unit = "file",
    .units = "files",
    .shuffle_opt = "shuffle",
    .readers_opt = "readers",
    .count_words = "there are",
    .one_per_part = 1,
    .list = list_files,
    .read_part = read_part,
    .destroy = files_destroy,
};

static int files_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    return ef__reader_pool_create(s, o, &files_format, sizeof(files_state),
                                  err);
}

/* File d->part read again whole, on a stream of its own: any thread, any
 * time. Another size than the origin's means the file changed. */
static int files_fetch(ef__stage *s, const ef__ident *d, ef_sample **out,
                       ef__err *err)
{
    files_state *st = s->state;
    *out = NULL;
    int64_t f = d->part;
    if (!ef__reader_pool_keeps(&st->pool, f) || d->id.index != f ||
        d->offset != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "files: the state names file %lld (sample %lld, "
                           "bytes %lld-%lld): expected a file of part %lld "
                           "of %lld of the %zu files, from byte 0",
                           (long long)f, (long long)d->id.index,
                           (long long)d->offset, (long long)d->end,
                           (long long)st->pool.part.i,
                           (long long)st->pool.part.n, st->list.n);
    ef_sample *smp;
    int rc =
        read_file(st, f, d->id.epoch, &s->ctx->cancelled, NULL, &smp, err);
    if (rc != EF_OK) {
        ef__fetch_failed(err, rc, "file");
        return rc;
    }
    if (smp->origin.end != d->end) {
        long long got = (long long)smp->origin.end;
        ef_sample_free(smp);
        return ef__err_set(err, EF_EFORMAT,
                           "files: file %lld: %s has %lld bytes, the state "
                           "says %lld: the file changed since the state was "
                           "saved",
                           (long long)f, ef__file_url(&st->list, (size_t)f),
                           got, (long long)d->end);
    }
    *out = smp;
    return EF_OK;
}

static const ef__option_def files_options[] = {
    EF__OPT(
        "root", EF_OPT_STRING, "",
        "ImageFolder directory: ROOT/CLASS/.../FILE, label = class index in "
        "sorted order (torchvision's order)",
        0, 0),
    EF__OPT("list", EF_OPT_STRING, "",
            "list file: lines 'path', 'path label' or 'path,label'; paths or "
            "http(s) URLs, relative to the list's directory; '#' comments",
            0, 0),
    EF__OPT("glob", EF_OPT_STRING, "",
            "glob(3) pattern, matches in byte order, no labels", 0, 0),
    EF__OPT("extensions", EF_OPT_STRING, EF__FILES_IMG_EXTENSIONS,
            "root: extensions kept, case-insensitive", 0, 0),
    EF__OPT("allow_empty", EF_OPT_BOOL, "false",
            "root: a class folder without a file is no error", 0, 0),
    /* a guard: a walk that ends lists the same files whatever it is */
    EF__OPT("max_entries", EF_OPT_INT, "20000000",
            "root: files and folders walked at most (links can reach a folder "
            "by many paths); list: entries read at most",
            1, 1e12, EF__SPEED_ONLY),
    EF__OPT("shuffle", EF_OPT_BOOL, "false",
            "read the files in a seeded order, new each epoch", 0, 0),
    EF__OPT("readers", EF_OPT_INT, "8",
            "threads reading files ahead (HTTP requests in flight)", 1, 256,
            EF__SPEED_ONLY),
    EF__OPT("queue", EF_OPT_INT, "4", "files read ahead per reader", 1,
            1 << 16, EF__SPEED_ONLY),
    EF__OPT("tries", EF_OPT_INT, "5", "HTTP attempts per file before giving up",
            1, 100, EF__SPEED_ONLY),
    EF__OPT(
        "timeout", EF_OPT_FLOAT, "30",
        "HTTP: seconds an attempt may go without a byte, wait for its headers, "
        "or get under 1 KiB/s of body",
        0.001, 86400, EF__SPEED_ONLY),
    EF__SHARD_OPTION,
};

const ef__stage_def ef__stage_files = {
    .info = {"files",
             "single files (an ImageFolder tree, a list, a glob): bytes as "
             "a field named by the extension, label, __key__, __url__",
             EF__OPTIONS(files_options)},
    .create = files_create,
    EF__READER_POOL_STAGE,
    .fetch = files_fetch,
    .length = ef__reader_pool_length,
};
