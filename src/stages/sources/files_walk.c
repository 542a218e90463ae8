/* SPDX-License-Identifier: Apache-2.0 */
/* ImageFolder trees for the `files` source: the entries torchvision's
 * datasets.ImageFolder(root) lists, in its order, with its labels.
 *
 * torchvision (datasets/folder.py): the classes are the sorted names of
 * root's entries that are directories (symbolic links followed); for
 * each class in that order, make_dataset() runs
 *     for root, _, fnames in sorted(os.walk(class_dir, followlinks=True)):
 *         for fname in sorted(fnames): keep it if its lowercase name ends
 *         with an extension
 * Sorting the walk's tuples sorts the directories by their whole path
 * string, which is not a depth-first order ("a/b c" < "a/b/x", since
 * ' ' < '/'), so every directory is listed first and then sorted. A
 * name os.walk counts as a directory is one stat() (following links)
 * says is one; anything else, a dangling link too, is a file.
 *
 * Departures, for errors rather than silence: a directory that cannot be
 * read is an error naming it (os.walk ignores it), and a link back to a
 * directory being walked is not followed again (os.walk would descend
 * until the path is too long), and the walk stops with an error after
 * max_entries names (links can reach one folder by many paths: a chain
 * of folders each linking twice to the next is walked 2^depth times).
 * Names sort by bytes, which is Python's order for UTF-8 names. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "stages/sources/files_list.h"

typedef struct {
    char *path;
    char **files;
    size_t nfiles;
} dir_rec;

typedef struct {
    dir_rec *v;
    size_t n, cap;
    /* names read so far in the whole walk, and how many may be */
    int64_t *entries, max_entries;
    const char *root;
} dir_list;

/* The directories being walked, innermost first: a cycle guard. */
typedef struct ancestor {
    dev_t dev;
    ino_t ino;
    const struct ancestor *up;
} ancestor;

static void dirs_free(dir_list *d)
{
    for (size_t i = 0; i < d->n; i++) {
        for (size_t k = 0; k < d->v[i].nfiles; k++)
            ef__free(d->v[i].files[k]);
        ef__free(d->v[i].files);
        ef__free(d->v[i].path);
    }
    ef__free(d->v);
}

static char *join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/'; /* as os.path.join */
    char *p = ef__malloc(a + (size_t)slash + b + 1);
    if (p) {
        memcpy(p, dir, a);
        if (slash)
            p[a] = '/';
        memcpy(p + a + slash, name, b + 1);
    }
    return p;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int cmp_dir(const void *a, const void *b)
{
    return strcmp(((const dir_rec *)a)->path, ((const dir_rec *)b)->path);
}

static int oom(ef__err *err, const char *path)
{
    return ef__err_set(err, EF_ENOMEM, "files: %s: out of memory", path);
}

/* Appends name to a growing array of strings (takes it). */
static int push_name(char ***v, size_t *n, size_t *cap, char *name)
{
    if (!name)
        return EF_ENOMEM;
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 16;
        char **nv = ef__realloc(*v, c * sizeof *nv);
        if (!nv) {
            ef__free(name);
            return EF_ENOMEM;
        }
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = name;
    return EF_OK;
}

static int too_many(const dir_list *d, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "files: option 'root': %s has more than %lld files "
                       "and folders (links followed); the walk stopped "
                       "there: max_entries=N raises the limit",
                       d->root, (long long)d->max_entries);
}

/* Lists directory `path` (taken) and, recursively, those below it. */
static int scan(dir_list *d, char *path, const ancestor *up, ef__err *err)
{
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int rc = ef__err_set(err, EF_EIO, "files: directory %s: %s", path,
                             strerror(errno));
        ef__free(path);
        return rc;
    }
    const ancestor self = {sb.st_dev, sb.st_ino, up};
    for (const ancestor *a = up; a; a = a->up)
        if (a->dev == sb.st_dev && a->ino == sb.st_ino) {
            ef__free(path); /* a link back up: walked already */
            return EF_OK;
        }
    if (d->n == d->cap) {
        size_t c = d->cap ? d->cap * 2 : 16;
        dir_rec *v = ef__realloc(d->v, c * sizeof *v);
        if (!v) {
            int rc = oom(err, path);
            ef__free(path);
            return rc;
        }
        d->v = v;
        d->cap = c;
    }
    size_t me = d->n++;
    d->v[me] = (dir_rec){path, NULL, 0};
    DIR *dp = opendir(path);
    if (!dp)
        return ef__err_set(err, EF_EIO, "files: cannot read directory %s: %s",
                           path, strerror(errno));
    char **subs = NULL;
    size_t nsubs = 0, capsubs = 0, capfiles = 0;
    int rc = EF_OK;
    struct dirent *de;
    while (rc == EF_OK && (errno = 0, de = readdir(dp)) != NULL) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, ".."))
            continue;
        if (++*d->entries > d->max_entries) {
            rc = too_many(d, err);
            break;
        }
        char *full = join(path, name);
        if (!full) {
            rc = oom(err, path);
            break;
        }
        int is_dir = stat(full, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (is_dir) {
            rc = push_name(&subs, &nsubs, &capsubs, full);
        } else {
            ef__free(full);
            dir_rec *r = &d->v[me];
            rc = push_name(&r->files, &r->nfiles, &capfiles, ef__strdup(name));
        }
        if (rc != EF_OK)
            rc = oom(err, path);
    }
    if (rc == EF_OK && errno)
        rc = ef__err_set(err, EF_EIO, "files: cannot read directory %s: %s",
                         d->v[me].path, strerror(errno));
    closedir(dp);
    size_t i = 0;
    for (; i < nsubs && rc == EF_OK; i++)
        rc = scan(d, subs[i], &self, err); /* takes subs[i] */
    for (; i < nsubs; i++)
        ef__free(subs[i]);
    ef__free(subs);
    return rc;
}

/* The class names: root's entries that are directories, sorted. */
static int find_classes(const char *root, char ***out, size_t *n, ef__err *err)
{
    *out = NULL;
    *n = 0;
    DIR *dp = opendir(root);
    if (!dp)
        return ef__err_set(err, EF_EIO,
                           "files: option 'root': cannot read directory %s: "
                           "%s",
                           root, strerror(errno));
    size_t cap = 0;
    int rc = EF_OK;
    struct dirent *de;
    while (rc == EF_OK && (de = readdir(dp)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *full = join(root, de->d_name);
        struct stat sb;
        int is_dir = full && stat(full, &sb) == 0 && S_ISDIR(sb.st_mode);
        ef__free(full);
        if (!full || (is_dir &&
                      push_name(out, n, &cap, ef__strdup(de->d_name)) != EF_OK))
            rc = oom(err, root);
    }
    closedir(dp);
    if (rc == EF_OK && *n == 0)
        rc = ef__err_set(err, EF_EFORMAT,
                         "files: option 'root': no class folder in %s "
                         "(ImageFolder expects ROOT/CLASS/FILE)",
                         root);
    if (rc != EF_OK) {
        for (size_t i = 0; i < *n; i++)
            ef__free((*out)[i]);
        ef__free(*out);
        *out = NULL;
        *n = 0;
        return rc;
    }
    qsort(*out, *n, sizeof **out, cmp_str);
    return EF_OK;
}

/* Adds class `label`'s files (the tree at class_dir) to out; *found
 * says whether it had any. */
static int add_class(const char *class_dir, size_t root_len,
                     const ef__file_exts *exts, int64_t label,
                     const dir_list *walk, ef__file_list *out, int *found,
                     ef__err *err)
{
    dir_list d = *walk;
    char *top = ef__strdup(class_dir);
    int rc = top ? scan(&d, top, NULL, err) : oom(err, class_dir);
    /* qsort takes no NULL, which an empty list may be */
    if (rc == EF_OK && d.n > 1)
        qsort(d.v, d.n, sizeof *d.v, cmp_dir);
    *found = 0;
    for (size_t i = 0; i < d.n && rc == EF_OK; i++) {
        dir_rec *r = &d.v[i];
        if (r->nfiles > 1)
            qsort(r->files, r->nfiles, sizeof *r->files, cmp_str);
        for (size_t k = 0; k < r->nfiles && rc == EF_OK; k++) {
            if (!ef__file_exts_match(exts, r->files[k]))
                continue;
            char *url = join(r->path, r->files[k]);
            if (!url) {
                rc = oom(err, r->path);
                break;
            }
            /* the key: relative to the root, without the extension */
            const char *key = url + root_len;
            const char *dot = strrchr(key, '.');
            rc = ef__file_list_add(out, url, key, (size_t)(dot - key), label,
                                   "files: option 'root'", err);
            ef__free(url);
            *found = 1;
        }
    }
    dirs_free(&d);
    return rc;
}

int ef__files_from_folder(const char *root, const ef__file_exts *exts,
                          int allow_empty, int64_t max_entries,
                          ef__file_list *out, ef__err *err)
{
    memset(out, 0, sizeof *out);
    char **classes;
    size_t nclasses;
    int rc = find_classes(root, &classes, &nclasses, err);
    if (rc != EF_OK)
        return rc;
    /* keys start after "root/" */
    size_t rl = strlen(root);
    size_t root_len = rl + (rl > 0 && root[rl - 1] != '/');
    char empty[EF__ERR_MAX / 2] = "";
    size_t nempty = 0;
    int64_t entries = (int64_t)nclasses;
    const dir_list walk = {NULL, 0, 0, &entries, max_entries, root};
    if (entries > max_entries)
        rc = too_many(&walk, err);
    for (size_t c = 0; c < nclasses && rc == EF_OK; c++) {
        char *dir = join(root, classes[c]);
        int found = 0;
        rc = dir ? add_class(dir, root_len, exts, (int64_t)c, &walk, out,
                             &found, err)
                 : oom(err, root);
        ef__free(dir);
        if (rc == EF_OK && !found) {
            size_t used = strlen(empty);
            if (used + strlen(classes[c]) + 8 < sizeof empty)
                snprintf(empty + used, sizeof empty - used, "%s%s",
                         nempty ? ", " : "", classes[c]);
            else if (!strstr(empty, "..."))
                strcat(empty, ", ...");
            nempty++;
        }
    }
    for (size_t c = 0; c < nclasses; c++)
        ef__free(classes[c]);
    ef__free(classes);
    if (rc == EF_OK && nempty && !allow_empty) {
        char list[EF__FILES_MAX_EXTS * (EF_MAX_NAME + 3)] = "";
        for (int i = 0; i < exts->n; i++)
            strcat(strcat(list, i ? ", " : ""), exts->v[i]);
        rc = ef__err_set(err, EF_EFORMAT,
                         "files: option 'root': no valid file for the "
                         "class%s %s in %s (extensions: %s); allow_empty=true "
                         "keeps empty classes",
                         nempty == 1 ? "" : "es", empty, root, list);
    }
    if (rc == EF_OK && out->n == 0)
        rc = ef__err_set(err, EF_EFORMAT,
                         "files: option 'root': no valid file in %s", root);
    if (rc != EF_OK) {
        ef__file_list_free(out);
        return rc;
    }
    out->labelled = 1;
    return EF_OK;
}
