/* SPDX-License-Identifier: Apache-2.0 */
/* The entries of the `files` source: which files it reads, each with the
 * name of its field, its WebDataset-style key and its label, built once
 * when the stage is created from one of three descriptions:
 *
 *   ef__files_from_folder  a torchvision ImageFolder tree (files_walk.c)
 *   ef__files_from_list    a list file: `path`, `path label` or
 *                          `path,label` per line
 *   ef__files_from_glob    a glob(3) pattern, sorted, no labels
 *
 * An entry's field is its name's last extension, lowercased ("x.JPG" ->
 * "jpg"); its key is its path without that extension, relative to the
 * root for a folder, as written for a list (a URL's path without the
 * scheme and host), and without leading '/' in every case, the way
 * WebDataset keys are relative. */
#ifndef EF_STAGES_SOURCES_FILES_LIST_H
#define EF_STAGES_SOURCES_FILES_LIST_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "codec/image.h"
#include "core/err.h"
#include "echoflow/echoflow.h"

/* An entry's strings are NUL-ended, in the list's one block of text (a
 * malloc per string cost more than the strings: lists run to millions). */
typedef struct {
    size_t url;    /* text offset of the path or URL opened */
    size_t key;    /* of its __key__ */
    size_t field;  /* of its field name, the lowercase extension */
    int64_t label; /* meaningless when the list has none */
} ef__file_entry;

typedef struct {
    ef__file_entry *v;
    size_t n, cap;
    char *text; /* the entries' strings (owned, or buf's once sealed) */
    size_t len, text_cap;
    ef_buffer *buf; /* text as a buffer, once sealed */
    int labelled;   /* every entry has a label */
} ef__file_list;

static inline const char *ef__file_url(const ef__file_list *l, size_t i)
{
    return l->text + l->v[i].url;
}

static inline const char *ef__file_key(const ef__file_list *l, size_t i)
{
    return l->text + l->v[i].key;
}

static inline const char *ef__file_field(const ef__file_list *l, size_t i)
{
    return l->text + l->v[i].field;
}

/* Extensions to keep, lowercase with their dot (".jpg"). */
#define EF__FILES_MAX_EXTS 32
typedef struct {
    int n;
    char v[EF__FILES_MAX_EXTS][EF_MAX_NAME + 1];
} ef__file_exts;

/* torchvision's IMG_EXTENSIONS, which are exactly what the decoding
 * stages decode by default. */
#define EF__FILES_IMG_EXTENSIONS EF__IMAGE_EXTENSIONS

/* Parses "jpg,.PNG, tif" (dots optional, case folded) into *out.
 * EF_ESPEC naming option `what` on an empty or overlong name. */
int ef__file_exts_parse(const char *text, const char *what, ef__file_exts *out,
                        ef__err *err);
/* Whether `name`, lowercased, ends with one of the extensions. */
int ef__file_exts_match(const ef__file_exts *e, const char *name);

/* Appends an entry for `url` (copied) with key `key` (key_len bytes,
 * copied) and `label`; the field is url's last extension. EF_EFORMAT
 * naming `where` when url has none or it is longer than a field name. */
int ef__file_list_add(ef__file_list *l, const char *url, const char *key,
                      size_t key_len, int64_t label, const char *where,
                      ef__err *err);
/* Ends the list: no entry may be added after, and the room kept for
 * more is given back. Returns its text as a buffer (a new reference,
 * the caller's to release) that samples can view at the entries'
 * offsets, or NULL when out of memory. Sealing again gives another
 * reference to the same buffer. */
ef_buffer *ef__file_list_seal(ef__file_list *l);
/* Frees everything, or drops the list's reference to its sealed text;
 * accepts an empty list. */
void ef__file_list_free(ef__file_list *l);

/* ImageFolder: see files_walk.c. Labels are the classes' indices. The
 * walk reads at most max_entries names (files and folders) in all. */
int ef__files_from_folder(const char *root, const ef__file_exts *exts,
                          int allow_empty, int64_t max_entries,
                          ef__file_list *out, ef__err *err);

/* The longest line of a list file: a path of PATH_MAX bytes, a label
 * and white space. */
#define EF__FILES_MAX_LINE (PATH_MAX + 256)

/* The lines of a list file, `len` bytes of `text` (need not end with a
 * NUL) read from `name`, whose relative paths are taken relative to
 * directory `base` ("" for none). Blank lines and lines starting with
 * '#' are skipped; every other is `path`, `path LABEL` (white space) or
 * `path,LABEL` (a comma: the last one splits), LABEL a decimal integer.
 * Either every entry has a label or none has. A bad line, or one longer
 * than EF__FILES_MAX_LINE, is EF_EFORMAT naming `name`, the line number
 * and what was expected. */
int ef__files_parse_list(const char *text, size_t len, const char *name,
                         const char *base, ef__file_list *out, ef__err *err);
/* Reads the list file at `path`, a local regular file (anything else is
 * EF_EIO naming it: a FIFO would block, a device never end), line by
 * line, and parses it as ef__files_parse_list does; more than
 * max_entries entries is EF_EFORMAT naming the line and the option. */
int ef__files_from_list(const char *path, int64_t max_entries,
                        ef__file_list *out, ef__err *err);

/* The paths glob(3) matches, in byte order; no labels. No match is
 * EF_ESPEC naming the pattern. */
int ef__files_from_glob(const char *pattern, ef__file_list *out, ef__err *err);

#endif
