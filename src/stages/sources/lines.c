/* SPDX-License-Identifier: Apache-2.0 */
/* The line sources, text and jsonl (see lines.h): a format of the
 * record-file kit whose records are lines, read through the stream into a
 * buffer that grows to the longest line, cut at '\n'. */
#include "stages/sources/lines.h"

#include <string.h>

#include "codec/json.h"
#include "core/alloc.h"

#define FIRST_CAP ((size_t)1 << 16)
#define LINE_MAX_BYTES ((size_t)1 << 30)

typedef struct {
    ef__record_file rf; /* first: the kit's state */
    int jsonl;
    char key[EF_MAX_NAME];
    size_t max_line; /* the budget's limit, at most LINE_MAX_BYTES */
    /* bytes read ahead: buf[pos, len) is the data from offset buf_at +
     * pos on; eof once the stream has no more */
    char *buf;
    size_t cap, pos, len;
    uint64_t buf_at;
    int eof;
    _Atomic uint64_t blank; /* written by the pulling thread only */
} lines_state;

static const ef__record_format lines_format;

int ef__lines_create(ef__stage *s, const ef__opts *o, const char *key,
                     ef__err *err)
{
    int rc =
        ef__record_file_create(s, o, &lines_format, sizeof(lines_state), err);
    if (rc != EF_OK)
        return rc;
    lines_state *st = s->state;
    if (key) {
        if (!key[0] || strlen(key) >= sizeof st->key)
            return ef__err_set(err, EF_ESPEC,
                               "%s: option 'key' must be 1 to %d bytes "
                               "(got '%s')",
                               st->rf.name, EF_MAX_NAME - 1, key);
        strcpy(st->key, key);
        st->jsonl = 1;
    }
    uint64_t limit = s->ctx->budget.limit;
    st->max_line =
        limit && limit < LINE_MAX_BYTES ? (size_t)limit : LINE_MAX_BYTES;
    return EF_OK;
}

/* A pass over a file opened at `offset` starts with nothing read ahead. */
static int lines_open(ef__record_file *rf, uint64_t offset, ef__err *err)
{
    lines_state *st = (lines_state *)rf;
    st->pos = st->len = 0;
    st->buf_at = offset;
    st->eof = 0;
    return ef__record_file_open(rf, offset, err);
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
        int rc = ef__stream_read(st->rf.stream, st->buf + st->len,
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
        int rc = ef__stream_read(st->rf.stream, st->buf, st->cap, &got, err);
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

/* The field of line p[0, n) (without '\n', not blank) into rec->data
 * and rec->len: the line less a '\r' at its end (text), or its key's
 * string (jsonl). */
static int make_field(const lines_state *st, const char *p, size_t n,
                      ef__record *rec, ef__err *err)
{
    if (!st->jsonl && p[n - 1] == '\r')
        n--;
    ef_buffer *b = ef_buffer_new(n ? n : 1);
    if (!b)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", st->rf.name);
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
            rc = ef__err_set(err, EF_ENOMEM, "%s: out of memory", st->rf.name);
        ef_buffer_release(b);
        b = exact;
    }
    if (rc != EF_OK) {
        ef_buffer_release(b);
        return rc;
    }
    rec->data = b;
    rec->len = (int64_t)len;
    return EF_OK;
}

static int lines_next(ef__record_file *rf, ef__record *rec, ef__err *err)
{
    lines_state *st = (lines_state *)rf;
    const char *p = NULL;
    size_t n = 0;
    int too_long;
    int rc = next_line(st, &p, &n, &rec->at, &too_long, err);
    /* a line too long is framed once the rest of it is passed over; the
     * stream's failures leave nothing framed */
    rec->in_step = rec->unfinished = too_long;
    if (rc != EF_OK)
        return rc;
    rec->end = st->buf_at + st->pos;
    if (is_blank(st, p, n)) {
        ef__stat_add(&st->blank, 1);
        return EF_OK;
    }
    rec->in_step = 1; /* a line that is not the document expected */
    return make_field(st, p, n, rec, err);
}

static int lines_skip_rest(ef__record_file *rf, ef__err *err)
{
    return skip_rest_of_line((lines_state *)rf, err);
}

static uint64_t lines_tell(const ef__record_file *rf)
{
    const lines_state *st = (const lines_state *)rf;
    return st->buf_at + st->pos;
}

/* Line [at, end) read again on a stream of its own: the bytes the state
 * says, the last of them its '\n' unless the line ended the file. */
static int lines_at(const ef__record_file *rf, ef__stream *stream, uint64_t at,
                    uint64_t end, ef__record *rec, ef__err *err)
{
    const lines_state *st = (const lines_state *)rf;
    size_t want = (size_t)(end - at);
    if (end - at > st->max_line + 1)
        return ef__err_set(err, EF_EFORMAT,
                           "%llu bytes at offset %llu: longer than a line "
                           "can be (%zu bytes)",
                           (unsigned long long)(end - at),
                           (unsigned long long)at, st->max_line);
    char *text = ef__malloc(want);
    if (!text)
        return ef__err_set(err, EF_ENOMEM, "out of memory");
    size_t got = 0;
    int rc = ef__stream_read(stream, text, want, &got, err);
    size_t n = got && text[got - 1] == '\n' ? got - 1 : got;
    if (rc == EF_OK && (got != want || memchr(text, '\n', n) || n == 0))
        rc = ef__err_set(err, EF_EFORMAT,
                         "the line at offset %llu is not the %zu bytes the "
                         "state says",
                         (unsigned long long)at, want);
    if (rc == EF_OK)
        rc = make_field(st, text, n, rec, err);
    ef__free(text);
    rec->at = at;
    rec->end = end;
    return rc;
}

static void lines_stats(const ef__record_file *rf, ef_stage_stats *out)
{
    const lines_state *st = (const lines_state *)rf;
    ef__stats_extra(out, "blank", (double)ef__stat_get(&st->blank));
}

static void lines_destroy(ef__record_file *rf)
{
    ef__free(((lines_state *)rf)->buf);
}

static const ef__record_format lines_format = {
    .unit = "line",
    .open = lines_open,
    .next = lines_next,
    .skip_rest = lines_skip_rest,
    .tell = lines_tell,
    .at = lines_at,
    .stats = lines_stats,
    .destroy = lines_destroy,
};
