/* SPDX-License-Identifier: Apache-2.0 */
/* trace: passes every item on and appends its identity to a file, one
 * line per item: each example's epoch:index:echo_copy (a batch's
 * members, space-separated). Placed last, the file lists what the
 * consumer was handed, in order: a test of a resumed run counts its
 * samples there. Each line is one write(2) to a file opened for
 * appending, so a process killed mid-run leaves every line before the
 * last whole. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/stage.h"

/* the text of one example at most: three int64s and separators */
#define EXAMPLE_TEXT 64

typedef struct {
    int fd;
    char *line; /* room for the longest line so far */
    size_t cap;
} trace_state;

static int trace_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    trace_state *st = ef__stage_new_state(s, sizeof *st, err);
    if (!st)
        return EF_ENOMEM;
    const char *path = ef__opt_string(o, "path");
    st->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (st->fd < 0)
        return ef__err_set(err, EF_EIO, "trace: cannot open %s for appending: %s",
                           path, strerror(errno));
    return EF_OK;
}

/* Appends item s's line. */
static int write_line(trace_state *st, const ef_sample *s, const char *path,
                      ef__err *err)
{
    ef__ident d = ef__ident_of(s);
    size_t n;
    const ef__ident *m = ef__ident_members(&d, &n);
    if (!m) {
        m = &d;
        n = 1;
    }
    int rc = EF_OK;
    if (n * EXAMPLE_TEXT + 2 > st->cap) {
        char *v = ef__realloc(st->line, n * EXAMPLE_TEXT + 2);
        if (v) {
            st->line = v;
            st->cap = n * EXAMPLE_TEXT + 2;
        } else {
            rc = ef__err_set(err, EF_ENOMEM, "trace: out of memory");
        }
    }
    size_t at = 0;
    for (size_t i = 0; rc == EF_OK && i < n; i++)
        at += (size_t)snprintf(st->line + at, st->cap - at, "%s%lld:%lld:%d",
                               i ? " " : "", (long long)m[i].id.epoch,
                               (long long)m[i].id.index, m[i].id.echo_copy);
    ef__ident_clear(&d);
    if (rc != EF_OK)
        return rc;
    st->line[at++] = '\n';
    ssize_t put = write(st->fd, st->line, at);
    if (put != (ssize_t)at)
        return ef__err_set(err, EF_EIO, "trace: writing to %s: %s", path,
                           put < 0 ? strerror(errno) : "short write");
    return EF_OK;
}

static int trace_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    int rc = ef__stage_pull(s, out, err);
    if (rc != EF_OK)
        return rc;
    rc = write_line(s->state, *out, ef__opt_string(&s->opts, "path"), err);
    if (rc != EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
    }
    return rc;
}

static void trace_destroy(ef__stage *s)
{
    trace_state *st = s->state;
    if (st && st->fd >= 0)
        close(st->fd);
    if (st)
        ef__free(st->line);
    ef__free(st);
}

static const ef__option_def trace_options[] = {
    EF__OPT("path", EF_OPT_STRING, NULL,
            "file to append each item's identities to, one line per item", 0,
            0),
};

const ef__stage_def ef__stage_trace = {
    .info = {"trace",
             "passes items on, appending each one's identity (its examples' "
             "epoch:index:echo_copy) to a file, a line per item",
             EF__OPTIONS(trace_options)},
    .create = trace_create,
    .next = trace_next,
    .destroy = trace_destroy,
};
