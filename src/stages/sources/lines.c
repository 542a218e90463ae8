/* SPDX-License-Identifier: Apache-2.0 */
/* The line sources, text and jsonl (see lines.h): files read through
 * streams into a buffer that grows to the longest line, cut at '\n'. */
#include "stages/sources/lines.h"

#include <stdio.h>
#include <string.h>

#include "codec/json.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "io/paths.h"
#include "stages/sources/checkpoint.h"
#include "pipeline/state.h"

#define FILE_SHIFT 32
#define FIRST_CAP ((size_t)1 << 16)
#define LINE_MAX_BYTES ((size_t)1 << 30)

typedef struct {
    const char *name; /* "text" or "jsonl", for messages */
    int jsonl;
    char key[EF_MAX_NAME];
    char field[EF_MAX_NAME];
    ef__paths files;
    ef__shard part; /* this part's files: i, i + n ... */
    ef__stream_opts sopts;
    ef__comp_seen comp; /* each file's compression, once read */
    size_t max_line;    /* the budget's limit, at most LINE_MAX_BYTES */
    /* the pass */
    int64_t file;       /* the file being read (or next to open) */
    ef__stream *stream; /* open on `file`, or NULL */
    int64_t line;       /* number of the next line in the file */
    /* bytes read ahead: buf[pos, len) is the data from offset buf_at +
     * pos on; eof once the stream has no more */
    char *buf;
    size_t cap, pos, len;
    uint64_t buf_at;
    int eof;
    /* after a restore, while `file` is not open yet: where its next line
     * starts, and its number (0, 0: the file's start) */
    uint64_t from_offset;
    int64_t from_line;
    /* statistics: written by the pulling thread only */
    _Atomic uint64_t files_read, bytes, read_ns, retries, blank;
} lines_state;

int ef__lines_create(ef__stage *s, const ef__opts *o, const char *name,
                     const char *key, ef__err *err)
{
    lines_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    st->name = name;
    ef__stream_opts_from(o, &st->sopts);
    st->sopts.cancelled = &s->ctx->cancelled;
    const char *comp = ef__opt_string(o, "compression");
    static const char *const comps[] = {"none", "gzip", "zstd"};
    st->sopts.compression = EF__COMP_SNIFF;
    for (int c = EF__COMP_NONE; c <= EF__COMP_ZSTD; c++)
        if (strcmp(comp, comps[c]) == 0)
            st->sopts.compression = c;
    if (st->sopts.compression == EF__COMP_SNIFF && strcmp(comp, "auto") != 0)
        return ef__err_set(err, EF_ESPEC,
                           "%s: option 'compression' must be auto, none, "
                           "gzip or zstd (got '%s')",
                           name, comp);
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= sizeof st->field)
        return ef__err_set(err, EF_ESPEC,
                           "%s: option 'field' must be 1 to %d bytes "
                           "(got '%s')",
                           name, EF_MAX_NAME - 1, field);
    strcpy(st->field, field);
    if (key) {
        if (!key[0] || strlen(key) >= sizeof st->key)
            return ef__err_set(err, EF_ESPEC,
                               "%s: option 'key' must be 1 to %d bytes "
                               "(got '%s')",
                               name, EF_MAX_NAME - 1, key);
        strcpy(st->key, key);
        st->jsonl = 1;
    }
    uint64_t limit = s->ctx->budget.limit;
    st->max_line =
        limit && limit < LINE_MAX_BYTES ? (size_t)limit : LINE_MAX_BYTES;
    char what[64];
    snprintf(what, sizeof what, "%s: option 'files'", name);
    ef__shard part;
    int rc = ef__shard_parse(s, o, &part, err);
    if (rc == EF_OK)
        rc =
            ef__paths_expand(ef__opt_string(o, "files"), what, &st->files, err);
    if (rc != EF_OK)
        return rc;
    if ((size_t)part.i >= st->files.n)
        return ef__err_set(err, EF_ESPEC,
                           "%s: part %lld of shard=%lld/%lld gets no file: "
                           "'files' lists %zu file%s",
                           name, (long long)part.i, (long long)part.i,
                           (long long)part.n, st->files.n,
                           st->files.n == 1 ? "" : "s");
    if (ef__comp_seen_init(&st->comp, st->files.n) != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    st->part = part;
    st->file = part.i;
    return EF_OK;
}

static void close_file(lines_state *st)
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
    st->file += st->part.n;
}

/* Names the file and what of it in a failure about it. */
static void locate(const lines_state *st, int64_t file, const char *what,
                   ef__err *err)
{
    char where[EF__ERR_MAX];
    snprintf(where, sizeof where, "%s: file %lld (%s), %s", st->name,
             (long long)file, st->files.names[file], what);
    ef__err_prefix(err, where);
}

/* Opens file f at `offset` (0: its start) up to byte `end` (0: the
 * file's end): a file opened part way has its compression as first seen,
 * when known. */
static int open_file(const lines_state *st, int64_t f, uint64_t offset,
                     uint64_t end, const atomic_int *cancelled,
                     ef__stream **out, ef__err *err)
{
    ef__stream_opts o = st->sopts;
    o.cancelled = cancelled;
    if (offset > 0 || end > 0)
        ef__comp_seen_opts(&st->comp, (size_t)f, &o);
    return ef__stream_open_range(out, st->files.names[f], &o, offset, end, err);
}

/* The next line of the open file: *p, *n (without its '\n'), starting at
 * offset *at; EF_END at the file's end. A line past max_line is
 * EF_EFORMAT with *too_long set: the stream is still in step. */
static int next_line(lines_state *st, const char **p, size_t *n, uint64_t *at,
                     int *too_long, ef__err *err)
{
    *too_long = 0;
    size_t scanned = 0; /* of buf[pos, len): no '\n' there */
    for (;;) {
        size_t left = st->len - st->pos - scanned;
        char *nl = left ? memchr(st->buf + st->pos + scanned, '\n', left)
                        : NULL; /* buf is NULL before the first read */
        if (nl || (st->eof && st->pos < st->len)) {
            size_t end = nl ? (size_t)(nl - st->buf) : st->len;
            *p = st->buf + st->pos;
            *n = end - st->pos;
            *at = st->buf_at + st->pos;
            st->pos = nl ? end + 1 : end;
            return EF_OK;
        }
        if (st->eof)
            return EF_END;
        scanned = st->len - st->pos;
        if (st->pos > 0) { /* keep only the line begun */
            memmove(st->buf, st->buf + st->pos, scanned);
            st->buf_at += st->pos;
            st->len = scanned;
            st->pos = 0;
        }
        if (st->len == st->cap) {
            if (st->cap >= st->max_line) {
                *too_long = 1;
                return ef__err_set(err, EF_EFORMAT,
                                   "offset %llu: no end of line in %zu "
                                   "bytes: not text, or a line longer than "
                                   "the memory budget allows (raise it: "
                                   "--memory-budget)",
                                   (unsigned long long)st->buf_at, st->cap);
            }
            size_t cap = st->cap ? st->cap * 2 : FIRST_CAP;
            if (cap > st->max_line)
                cap = st->max_line;
            char *b = ef__realloc(st->buf, cap);
            if (!b)
                return ef__err_set(err, EF_ENOMEM,
                                   "out of memory for a line of %zu bytes",
                                   cap);
            st->buf = b;
            st->cap = cap;
        }
        size_t got;
        int rc = ef__stream_read(st->stream, st->buf + st->len,
                                 st->cap - st->len, &got, err);
        if (rc != EF_OK)
            return rc;
        st->len += got;
        st->eof = got == 0;
    }
}

/* Drops the rest of a line too long to hold, up to its '\n'. */
static int skip_rest_of_line(lines_state *st, ef__err *err)
{
    for (;;) {
        char *nl = memchr(st->buf + st->pos, '\n', st->len - st->pos);
        if (nl) {
            st->pos = (size_t)(nl - st->buf) + 1;
            return EF_OK;
        }
        st->buf_at += st->len;
        st->pos = st->len = 0;
        if (st->eof)
            return EF_OK;
        size_t got;
        int rc = ef__stream_read(st->stream, st->buf, st->cap, &got, err);
        if (rc != EF_OK)
            return rc;
        st->len = got;
        st->eof = got == 0;
    }
}

static int is_blank(const lines_state *st, const char *p, size_t n)
{
    if (!st->jsonl)
        return n == 0 || (n == 1 && p[0] == '\r');
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r')
            return 0;
    return 1;
}

/* The sample of line p[0, n) (without '\n', not blank), from bytes [at,
 * end) of `file`. */
static int build(const lines_state *st, ef_sample_id id, int64_t file,
                 uint64_t at, uint64_t end, const char *p, size_t n,
                 ef_sample **out, ef__err *err)
{
    if (!st->jsonl && p[n - 1] == '\r')
        n--;
    ef_buffer *b = ef_buffer_new(n ? n : 1);
    if (!b)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", st->name);
    size_t len = n;
    int rc = EF_OK;
    if (st->jsonl)
        rc = ef__json_string(p, n, st->key, ef_buffer_data(b), &len, err);
    else
        memcpy(ef_buffer_data(b), p, n);
    if (rc == EF_OK && len < n) {
        /* the document alone, not its whole line: what the sample holds
         * is what it counts against the budget */
        ef_buffer *exact = ef_buffer_new(len ? len : 1);
        if (exact)
            memcpy(ef_buffer_data(exact), ef_buffer_data(b), len);
        else
            rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory", st->name);
        ef_buffer_release(b);
        b = exact;
    }
    ef_sample *smp = NULL;
    if (rc == EF_OK) {
        smp = ef_sample_new(id);
        rc = smp ? ef__sample_add_variable(smp, st->field, EF_U8,
                                           (int64_t)len, b, 0)
                 : EF_ENOMEM;
        if (rc != EF_OK)
            ef__err_set(err, rc, "cannot build a sample: %s", ef_strerror(rc));
    }
    ef_buffer_release(b);
    if (rc != EF_OK) {
        ef_sample_free(smp);
        return rc;
    }
    smp->origin.part = file;
    smp->origin.offset = (int64_t)at;
    smp->origin.end = (int64_t)end;
    *out = smp;
    return EF_OK;
}

static int open_next(ef__stage *s, lines_state *st, ef__err *err)
{
    uint64_t from = st->from_offset; /* a restore's */
    st->line = st->from_line;
    st->from_offset = 0;
    st->from_line = 0;
    st->pos = st->len = 0;
    st->buf_at = from;
    st->eof = 0;
    int rc =
        open_file(st, st->file, from, 0, st->sopts.cancelled, &st->stream, err);
    if (rc != EF_OK) {
        locate(st, st->file, "opening", err);
        if (!ef__stage_abandon(s, err, "file", (int64_t)from, -1))
            return rc;
        st->file += st->part.n; /* the whole file is dropped */
    }
    return EF_OK;
}

int ef__lines_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    lines_state *st = s->state;
    for (;;) {
        if (!st->stream) {
            if ((size_t)st->file >= st->files.n)
                return EF_END;
            int rc = open_next(s, st, err);
            if (rc != EF_OK)
                return rc;
            continue;
        }
        if (st->line >= (int64_t)1 << FILE_SHIFT)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: %s: more than 2^%d lines in one file",
                               st->name, st->files.names[st->file], FILE_SHIFT);
        const char *p = NULL;
        size_t n = 0;
        uint64_t at = 0;
        int too_long;
        int rc = next_line(st, &p, &n, &at, &too_long, err);
        ef__comp_seen_note(&st->comp, (size_t)st->file, st->stream);
        int64_t line = st->line;
        if (rc == EF_END) {
            close_file(st);
            continue;
        }
        st->line++;
        if (rc == EF_OK && is_blank(st, p, n)) {
            ef__stat_add(&st->blank, 1);
            continue;
        }
        int framed = too_long; /* a bad line, not bad bytes */
        if (rc == EF_OK) {
            ef_sample_id id = {.index = (st->file << FILE_SHIFT) + line,
                               .epoch = s->epoch};
            rc = build(st, id, st->file, at, st->buf_at + st->pos, p, n, out,
                       err);
            if (rc == EF_OK || rc == EF_ENOMEM)
                return rc;
            framed = 1;
        }
        char what[64];
        snprintf(what, sizeof what, "line %lld", (long long)line);
        locate(st, st->file, what, err);
        if (framed) {
            /* the line is framed: the next one starts after it */
            if (!ef__stage_skip(s, err))
                return rc;
            if (too_long && (rc = skip_rest_of_line(st, err)) != EF_OK) {
                locate(st, st->file, what, err);
                if (!ef__stage_abandon(
                        s, err, "file",
                        (int64_t)ef__stream_raw_offset(st->stream),
                        ef__stream_size(st->stream)))
                    return rc;
                close_file(st);
            }
        } else { /* the rest of the file cannot be read */
            if (!ef__stage_abandon(s, err, "file",
                                   (int64_t)ef__stream_raw_offset(st->stream),
                                   ef__stream_size(st->stream)))
                return rc;
            close_file(st);
        }
    }
}

int ef__lines_reset(ef__stage *s, int64_t epoch, ef__err *err)
{
    (void)epoch;
    (void)err;
    lines_state *st = s->state;
    close_file(st);
    st->file = st->part.i;
    st->from_offset = 0;
    st->from_line = 0;
    return EF_OK;
}

/* ---- checkpoints -------------------------------------------------- */

/* The record: the file list and part, the files' compression, then the
 * file being read (or next), the offset of its next line and that
 * line's number. */
int ef__lines_save(ef__stage *s, ef__state_out *o, ef__err *err)
{
    (void)err;
    lines_state *st = s->state;
    ef__files_save(&st->files, o);
    ef__part_save(&st->part, o);
    ef__comp_seen_save(&st->comp, o);
    if (st->stream)
        ef__file_place_save(o, st->file, st->buf_at + st->pos, st->line);
    else /* the next file's start, or where a restore left it */
        ef__file_place_save(o, st->file, st->from_offset, st->from_line);
    return EF_OK;
}

int ef__lines_restore(ef__stage *s, ef__state_in *in, ef__err *err)
{
    (void)err;
    lines_state *st = s->state;
    int64_t file, line;
    uint64_t offset;
    int rc = ef__files_restore(&st->files, "file", in);
    if (rc == EF_OK)
        rc = ef__part_restore(&st->part, in);
    if (rc == EF_OK)
        rc = ef__comp_seen_restore(&st->comp, in);
    if (rc != EF_OK)
        return rc;
    rc = ef__file_place_restore(in, &st->part, st->files.n, "line", &file,
                                &offset, &line);
    if (rc != EF_OK)
        return rc;
    st->file = file;
    st->from_offset = offset;
    st->from_line = line;
    return EF_OK;
}

/* Line d read again, at its offset, on a stream of its own: any thread,
 * any time. A line that is not there, or ends elsewhere, means the file
 * is not the one the state was saved from. */
int ef__lines_fetch(ef__stage *s, const struct ef__ident *d, ef_sample **out,
                    ef__err *err)
{
    lines_state *st = s->state;
    *out = NULL;
    int64_t f = d->part;
    if (f < 0 || f >= (int64_t)st->files.n || f % st->part.n != st->part.i ||
        (d->id.index >> FILE_SHIFT) != f || d->end <= d->offset ||
        (uint64_t)(d->end - d->offset) > st->max_line + 1)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: the state names line %lld at bytes "
                           "%lld-%lld of file %lld: expected a line of "
                           "part %lld of %lld of the %zu files",
                           st->name, (long long)(d->id.index & 0xffffffff),
                           (long long)d->offset, (long long)d->end,
                           (long long)f, (long long)st->part.i,
                           (long long)st->part.n, st->files.n);
    size_t want = (size_t)(d->end - d->offset);
    char *text = ef__malloc(want);
    ef__stream *stream = NULL;
    size_t got = 0;
    int rc = text ? open_file(st, f, (uint64_t)d->offset, (uint64_t)d->end,
                              &s->ctx->cancelled, &stream, err)
                  : ef__err_set(err, EF_ENOMEM, "out of memory");
    if (rc == EF_OK)
        rc = ef__stream_read(stream, text, want, &got, err);
    if (rc != EF_OK)
        ef__fetch_failed(err, rc, "file");
    if (stream)
        ef__comp_seen_note(&st->comp, (size_t)f, stream);
    ef__stream_close(stream);
    /* the line, and its '\n' unless it ended the file */
    size_t n = got && text[got - 1] == '\n' ? got - 1 : got;
    if (rc == EF_OK && (got != want || memchr(text, '\n', n) || n == 0))
        rc = ef__err_set(err, EF_EFORMAT,
                         "the line at offset %lld is not the %zu bytes the "
                         "state says: the file changed since the state was "
                         "saved",
                         (long long)d->offset, want);
    ef_sample_id id = {.index = d->id.index, .epoch = d->id.epoch};
    if (rc == EF_OK)
        rc = build(st, id, f, (uint64_t)d->offset, (uint64_t)d->end, text, n,
                   out, err);
    ef__free(text);
    if (rc != EF_OK) {
        char what[64];
        snprintf(what, sizeof what, "line %lld",
                 (long long)(d->id.index & 0xffffffff));
        locate(st, f, what, err);
    }
    return rc;
}

void ef__lines_destroy(ef__stage *s)
{
    lines_state *st = s->state;
    ef__stream_close(st->stream);
    ef__paths_free(&st->files);
    ef__comp_seen_free(&st->comp);
    ef__free(st->buf);
    ef__free(st);
}

void ef__lines_stats(const ef__stage *s, ef_stage_stats *out)
{
    const lines_state *st = s->state;
    ef__stats_extra(out, "files", (double)ef__stat_get(&st->files_read));
    double bytes = (double)ef__stat_get(&st->bytes),
           read_s = ef__ns_to_s(ef__stat_get(&st->read_ns));
    ef__stats_extra(out, "bytes", bytes);
    /* bytes over the time spent reading them, not over the whole run */
    ef__stats_extra(out, "MB/s", read_s > 0 ? bytes / 1e6 / read_s : 0);
    ef__stats_extra(out, "retries", (double)ef__stat_get(&st->retries));
    ef__stats_extra(out, "blank", (double)ef__stat_get(&st->blank));
}

/* Lines are counted by reading them: files of text have no index. */
int ef__lines_length(ef__stage *s, int64_t up, int64_t *n, ef__err *err)
{
    (void)up;
    (void)n;
    const lines_state *st = s->state;
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: the number of lines in the files is not known "
                       "before reading them (they have no index)",
                       st->name);
}

const char *ef__lines_part_name(const ef__stage *s, int64_t part)
{
    const lines_state *st = s->state;
    return part >= 0 && (size_t)part < st->files.n ? st->files.names[part]
                                                   : NULL;
}
