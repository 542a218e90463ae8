/* SPDX-License-Identifier: Apache-2.0 */
/* A file written whole or not at all: the content goes to a temporary file
 * beside the target, and commit makes it the target in one rename, after
 * an fsync, then fsyncs the folder so that the rename itself is on disk.
 * A reader of the target sees the old file or the new one, never half of
 * one. Depends only on libc, so that the programs (train/) share it. */
#ifndef EF_COMMON_ATOMIC_FILE_H
#define EF_COMMON_ATOMIC_FILE_H

#include <stdio.h>

/* The step that failed, for the caller's message. */
typedef enum {
    EF__ATOMIC_OK = 0,
    EF__ATOMIC_NOMEM,      /* the names could not be allocated */
    EF__ATOMIC_CREATE,     /* the temporary file could not be created */
    EF__ATOMIC_WRITE,      /* flushing what was written failed */
    EF__ATOMIC_FSYNC,      /* fsync of the temporary file failed */
    EF__ATOMIC_CLOSE,      /* closing it failed */
    EF__ATOMIC_RENAME,     /* renaming it over the target failed */
    EF__ATOMIC_SYNC_FOLDER /* fsync of the target's folder failed; the
                              target is already the new file */
} ef__atomic_step;

typedef struct {
    FILE *f;    /* write the content here; NULL once committed or aborted */
    char *path; /* the target */
    char *tmp;  /* the temporary file beside it */
    ef__atomic_step failed; /* the step that failed, or EF__ATOMIC_OK */
    int error;              /* its errno */
} ef__atomic_file;

/* Creates the temporary file `path` + `suffix` (suffix NULL: ".tmp.<pid>",
 * a name of this process's own, so that two processes writing one target
 * never write into each other's file) and opens a->f on it. Returns 0, or
 * -1 with a->failed and a->error set; a->path and a->tmp stay readable for
 * the message either way until ef__atomic_abort(). */
int ef__atomic_open(ef__atomic_file *a, const char *path, const char *suffix);

/* Flushes, fsyncs and closes the temporary file, renames it over the
 * target and fsyncs the target's folder. Returns 0, or -1 with a->failed
 * and a->error set; a failure before the rename removes the temporary
 * file. Either way a->f is closed; call ef__atomic_abort() to free the
 * names once the message is written. */
int ef__atomic_commit(ef__atomic_file *a);

/* Closes the temporary file when still open and removes it, and frees the
 * names. Safe after commit (it then removes nothing), after a failed open,
 * on a zeroed struct, and twice. */
void ef__atomic_abort(ef__atomic_file *a);

/* The failure in words, as the library's writers say it: "<tmp>: cannot
 * create: <why>", "<tmp>: cannot write: <why>" (for a failed flush, fsync
 * or close), "cannot rename <tmp> to <path>: <why>", "<path>: cannot
 * fsync its folder: <why>", or "out of memory". */
void ef__atomic_describe(const ef__atomic_file *a, char *buf, size_t cap);

#endif
