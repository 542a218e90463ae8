/* SPDX-License-Identifier: Apache-2.0 */
/* The entries of the `files` source (see files_list.h): the container,
 * extensions, list files and glob patterns. The folder walk is in
 * files_walk.c. */
#include "stages/sources/files_list.h"

#include <assert.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/buffer.h"
#include "io/regular_file.h"

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

int ef__file_exts_parse(const char *text, const char *what, ef__file_exts *out,
                        ef__err *err)
{
    out->n = 0;
    for (const char *s = text;;) {
        size_t n = strcspn(s, ",");
        const char *w = s;
        while (n && (*w == ' ' || *w == '.'))
            w++, n--;
        while (n && w[n - 1] == ' ')
            n--;
        if (!n || n >= EF_MAX_NAME || out->n == EF__FILES_MAX_EXTS)
            return ef__err_set(err, EF_ESPEC,
                               "%s: expected up to %d extensions such as "
                               "'jpg,png', each 1 to %d bytes (got '%s')",
                               what, EF__FILES_MAX_EXTS, EF_MAX_NAME - 1, text);
        char *e = out->v[out->n++];
        e[0] = '.';
        for (size_t i = 0; i < n; i++)
            e[1 + i] = lower(w[i]);
        e[n + 1] = '\0';
        s += strcspn(s, ",");
        if (!*s)
            return EF_OK;
        s++;
    }
}

int ef__file_exts_match(const ef__file_exts *e, const char *name)
{
    size_t len = strlen(name);
    for (int k = 0; k < e->n; k++) {
        size_t n = strlen(e->v[k]);
        if (n > len)
            continue;
        size_t i = 0;
        while (i < n && lower(name[len - n + i]) == e->v[k][i])
            i++;
        if (i == n)
            return 1;
    }
    return 0;
}

/* The last extension of the last path component, or NULL. */
static const char *extension(const char *url)
{
    const char *slash = strrchr(url, '/');
    const char *base = slash ? slash + 1 : url;
    const char *dot = strrchr(base, '.');
    return dot; /* ".jpg" too: torchvision keeps it */
}

/* Room for `more` bytes of strings after those there are. */
static int text_reserve(ef__file_list *l, size_t more)
{
    if (more <= l->text_cap - l->len)
        return EF_OK;
    size_t cap = l->text_cap ? l->text_cap : 1 << 16;
    while (cap - l->len < more) {
        if (cap > SIZE_MAX / 2)
            return EF_ENOMEM;
        cap *= 2;
    }
    char *t = ef__realloc(l->text, cap);
    if (!t)
        return EF_ENOMEM;
    l->text = t;
    l->text_cap = cap;
    return EF_OK;
}

/* Appends s[0, n) and a NUL to the strings; returns its offset. The
 * room is there (text_reserve). */
static size_t text_put(ef__file_list *l, const char *s, size_t n)
{
    size_t at = l->len;
    memcpy(l->text + at, s, n);
    l->text[at + n] = '\0';
    l->len += n + 1;
    return at;
}

int ef__file_list_add(ef__file_list *l, const char *url, const char *key,
                      size_t key_len, int64_t label, const char *where,
                      ef__err *err)
{
    assert(!l->buf); /* sealed: its text may not move */
    const char *dot = extension(url);
    size_t flen = dot ? strlen(dot + 1) : 0;
    if (!flen || flen >= EF_MAX_NAME)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: '%s' has %s; the sample's field is named by "
                           "the file's extension (1 to %d bytes)",
                           where, url,
                           flen ? "an extension too long" : "no extension",
                           EF_MAX_NAME - 1);
    char field[EF_MAX_NAME];
    for (size_t i = 0; i <= flen; i++)
        field[i] = lower(dot[1 + i]);
    /* lists hold runs of one extension: a run shares its field's bytes */
    const char *last = l->n ? ef__file_field(l, l->n - 1) : NULL;
    int same = last && strcmp(last, field) == 0;
    size_t ulen = strlen(url);
    size_t need = ulen + 1 + key_len + 1 + (same ? 0 : flen + 1);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        ef__file_entry *v = ef__realloc(l->v, cap * sizeof *v);
        if (!v)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory", where);
        l->v = v;
        l->cap = cap;
    }
    if (need < ulen || text_reserve(l, need) != EF_OK)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", where);
    ef__file_entry *e = &l->v[l->n];
    e->field = same ? l->v[l->n - 1].field : text_put(l, field, flen);
    e->url = text_put(l, url, ulen);
    e->key = text_put(l, key, key_len);
    e->label = label;
    l->n++;
    return EF_OK;
}

ef_buffer *ef__file_list_seal(ef__file_list *l)
{
    if (!l->buf) {
        /* nothing grows from here: give the growth room back */
        if (l->n && l->n < l->cap) {
            ef__file_entry *v = ef__realloc(l->v, l->n * sizeof *v);
            if (v) {
                l->v = v;
                l->cap = l->n;
            }
        }
        if (l->len < l->text_cap) {
            char *t = ef__realloc(l->text, l->len ? l->len : 1);
            if (t) {
                l->text = t;
                l->text_cap = l->len ? l->len : 1;
            }
        }
        if (!l->text && text_reserve(l, 1) != EF_OK)
            return NULL;
        l->buf = ef__buffer_adopt(l->text, l->len, ef__free, l->text);
        if (!l->buf)
            return NULL;
    }
    return ef_buffer_retain(l->buf);
}

void ef__file_list_free(ef__file_list *l)
{
    if (l->buf)
        ef_buffer_release(l->buf); /* the text goes with the last one */
    else
        ef__free(l->text);
    ef__free(l->v);
    memset(l, 0, sizeof *l);
}

/* ---- list files --------------------------------------------------- */

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* The length of the "http://" or "https://" that [s, s + n) starts
 * with and goes past, else 0. The line need not end in a NUL. */
static size_t url_scheme_len(const char *s, size_t n)
{
    if (n > 7 && !strncmp(s, "http://", 7))
        return 7;
    if (n > 8 && !strncmp(s, "https://", 8))
        return 8;
    return 0;
}

static int is_url(const char *s, size_t n)
{
    return url_scheme_len(s, n) != 0;
}

/* A decimal integer filling [s, s + n), into *v. */
static int parse_label(const char *s, size_t n, int64_t *v)
{
    char buf[32];
    if (!n || n >= sizeof buf)
        return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno || *end || end == buf || buf[0] == '+' || is_space(buf[0]))
        return 0;
    *v = x;
    return 1;
}

/* The key of a list entry: as written, without a URL's scheme and host,
 * leading '/' and the extension. */
static void list_key(const char *path, size_t n, const char **key,
                     size_t *key_len)
{
    const char *end = path + n;
    /* within the line: it ends at n, not at a NUL */
    const char *s = path + url_scheme_len(path, n);
    if (s != path)
        while (s < end && *s != '/')
            s++;
    while (s < end && *s == '/')
        s++;
    const char *slash = s, *dot = NULL;
    for (const char *c = s; c < end; c++)
        if (*c == '/')
            slash = c + 1;
    for (const char *c = slash; c < end; c++)
        if (*c == '.' && c > slash)
            dot = c;
    *key = s;
    *key_len = (size_t)((dot ? dot : end) - s);
}

/* One entry line (trimmed, not blank, not a comment). */
static int parse_line(const char *s, size_t n, const char *name, size_t line,
                      const char *base, ef__file_list *out, int *labelled,
                      char **pathbuf, size_t *pathcap, ef__err *err)
{
    char where[EF__ERR_MAX / 2], shown[200];
    ef__err_fit(shown, sizeof shown, name); /* a long name keeps its tail */
    snprintf(where, sizeof where, "%s: line %zu", shown, line);
    const char *path = s, *lab = NULL;
    size_t plen = n, llen = 0;
    const char *comma = NULL;
    for (size_t i = 0; i < n; i++)
        if (s[i] == ',')
            comma = s + i;
    if (comma) { /* CSV: path,label */
        plen = (size_t)(comma - s);
        lab = comma + 1;
        llen = n - plen - 1;
        while (plen && is_space(path[plen - 1]))
            plen--;
        while (llen && is_space(*lab))
            lab++, llen--;
    } else { /* path [label], separated by white space */
        plen = 0;
        while (plen < n && !is_space(s[plen]))
            plen++;
        if (plen < n) {
            lab = s + plen;
            llen = n - plen;
            while (llen && is_space(*lab))
                lab++, llen--;
            for (size_t i = 0; i < llen; i++)
                if (is_space(lab[i]))
                    return ef__err_set(err, EF_EFORMAT,
                                       "%s: expected 'path', 'path label' or "
                                       "'path,label', got more than two "
                                       "words",
                                       where);
        }
    }
    int64_t label = -1;
    int has = lab != NULL;
    if (has && !parse_label(lab, llen, &label))
        return ef__err_set(err, EF_EFORMAT,
                           "%s: the label '%.*s' is not a decimal integer "
                           "(expected 'path', 'path label' or 'path,label')",
                           where, (int)(llen > 64 ? 64 : llen), lab);
    if (!plen)
        return ef__err_set(err, EF_EFORMAT, "%s: no path before the label",
                           where);
    if (*labelled >= 0 && *labelled != has)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %s label, but the lines before %s (every "
                           "entry has a label or none has)",
                           where, has ? "has a" : "has no",
                           has ? "have none" : "have one");
    *labelled = has;
    /* relative paths are relative to the list's directory */
    int join = base[0] && path[0] != '/' && !is_url(path, plen);
    size_t blen = join ? strlen(base) : 0;
    size_t need = blen + 1 + plen + 1;
    if (need > *pathcap) {
        char *p = ef__realloc(*pathbuf, need);
        if (!p)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory", where);
        *pathbuf = p;
        *pathcap = need;
    }
    char *p = *pathbuf;
    if (join) {
        memcpy(p, base, blen);
        p[blen++] = '/';
    }
    memcpy(p + blen, path, plen);
    p[blen + plen] = '\0';
    const char *key;
    size_t key_len;
    list_key(path, plen, &key, &key_len);
    return ef__file_list_add(out, p, key, key_len, label, where, err);
}

/* The state of a list read line by line. */
typedef struct {
    const char *name, *base; /* the list's path, and its directory */
    int64_t max_entries;
    size_t line;   /* lines so far */
    int labelled;  /* -1 before the first entry */
    char *pathbuf; /* an entry's path joined to base */
    size_t pathcap;
    ef__file_list *out;
} list_parser;

/* One line of the list, s[0, n) without its '\n'. */
static int parse_list_line(list_parser *p, const char *s, size_t n,
                           ef__err *err)
{
    p->line++;
    /* a UTF-8 byte order mark (Windows editors write one) is no part of
     * the first path */
    if (p->line == 1 && n >= 3 && !memcmp(s, "\xEF\xBB\xBF", 3))
        s += 3, n -= 3;
    if (n > EF__FILES_MAX_LINE)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: line %zu: longer than %d bytes (expected "
                           "'path', 'path label' or 'path,label', a path "
                           "of at most %d bytes)",
                           p->name, p->line, EF__FILES_MAX_LINE, PATH_MAX);
    /* C strings would end at it, dropping the rest of the line: a label
     * "1\0junk" would read as 1 */
    const char *nul = memchr(s, '\0', n);
    if (nul)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: line %zu: a NUL byte at column %zu "
                           "(expected text: 'path', 'path label' or "
                           "'path,label')",
                           p->name, p->line, (size_t)(nul - s) + 1);
    while (n && is_space(*s))
        s++, n--;
    while (n && is_space(s[n - 1]))
        n--;
    if (!n || s[0] == '#')
        return EF_OK;
    if ((int64_t)p->out->n >= p->max_entries)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: line %zu: more than %lld entries; "
                           "max_entries=N raises the limit",
                           p->name, p->line, (long long)p->max_entries);
    return parse_line(s, n, p->name, p->line, p->base, p->out, &p->labelled,
                      &p->pathbuf, &p->pathcap, err);
}

/* Ends a list read that ended with status rc: no entries is an error,
 * and an error leaves the list empty. */
static int finish_list(list_parser *p, int rc, ef__err *err)
{
    ef__free(p->pathbuf);
    if (rc == EF_OK && p->out->n == 0)
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: no entries (%zu lines, blank or comments)",
                         p->name, p->line);
    if (rc != EF_OK) {
        ef__file_list_free(p->out);
        return rc;
    }
    p->out->labelled = p->labelled == 1;
    return EF_OK;
}

int ef__files_parse_list(const char *text, size_t len, const char *name,
                         const char *base, ef__file_list *out, ef__err *err)
{
    memset(out, 0, sizeof *out);
    list_parser p = {name, base, INT64_MAX, 0, -1, NULL, 0, out};
    int rc = EF_OK;
    for (size_t at = 0; at < len && rc == EF_OK;) {
        const char *s = text + at;
        const char *nl = memchr(s, '\n', len - at);
        size_t n = nl ? (size_t)(nl - s) : len - at;
        at += n + 1;
        rc = parse_list_line(&p, s, n, err);
    }
    return finish_list(&p, rc, err);
}

/* Reads the list at fd line by line through one buffer that holds a
 * longest line and more: a longer line stops the read whatever follows
 * (/dev/zero, had it been let in, has no newline at all). */
static int read_list_lines(int fd, list_parser *p, ef__err *err)
{
    enum { CAP = 1 << 16 };
    _Static_assert(CAP > EF__FILES_MAX_LINE + 1, "a line fits the buffer");
    char *buf = ef__malloc(CAP);
    if (!buf)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", p->name);
    size_t start = 0, end = 0; /* the bytes not parsed yet */
    uint64_t done = 0;         /* bytes read before buf[0] */
    int eof = 0, rc = EF_OK;
    while (rc == EF_OK) {
        char *nl = memchr(buf + start, '\n', end - start);
        if (nl) {
            rc = parse_list_line(p, buf + start, (size_t)(nl - buf) - start,
                                 err);
            start = (size_t)(nl - buf) + 1;
            continue;
        }
        /* the last line, or one too long (which the parser names) */
        if (eof || end - start > EF__FILES_MAX_LINE) {
            if (end > start)
                rc = parse_list_line(p, buf + start, end - start, err);
            break;
        }
        memmove(buf, buf + start, end - start);
        done += start;
        end -= start;
        start = 0;
        ssize_t got = read(fd, buf + end, CAP - end);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            rc = ef__err_set(
                err, EF_EIO, "%s: cannot read the list file at byte %llu: %s",
                p->name, (unsigned long long)(done + end), strerror(errno));
        else if (got == 0)
            eof = 1;
        else
            end += (size_t)got;
    }
    ef__free(buf);
    return rc;
}

int ef__files_from_list(const char *path, int64_t max_entries,
                        ef__file_list *out, ef__err *err)
{
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    int rc = ef__open_regular(path, "the list file", &fd, &size, err);
    if (rc != EF_OK)
        return rc;
    /* the list's directory: relative entries are relative to it */
    const char *slash = strrchr(path, '/');
    size_t blen = slash ? (size_t)(slash - path) : 0;
    char *base = ef__malloc(blen + 2);
    if (!base) {
        close(fd);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
    }
    if (slash && blen == 0) /* "/list.txt" */
        blen = 1;
    memcpy(base, path, blen);
    base[blen] = '\0';
    list_parser p = {path, base, max_entries, 0, -1, NULL, 0, out};
    rc = finish_list(&p, read_list_lines(fd, &p, err), err);
    close(fd);
    ef__free(base);
    return rc;
}

/* ---- glob ------------------------------------------------------------ */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int ef__files_from_glob(const char *pattern, ef__file_list *out, ef__err *err)
{
    memset(out, 0, sizeof *out);
    glob_t g;
    /* GLOB_NOSORT: sorted below in byte order, whatever the locale */
    int grc = glob(pattern, GLOB_NOSORT, NULL, &g);
    if (grc == GLOB_NOMATCH)
        return ef__err_set(err, EF_ESPEC,
                           "files: option 'glob': '%s' matches no file",
                           pattern);
    if (grc != 0) {
        globfree(&g);
        return ef__err_set(err, grc == GLOB_NOSPACE ? EF_ENOMEM : EF_EIO,
                           "files: option 'glob': '%s': %s", pattern,
                           grc == GLOB_NOSPACE ? "out of memory"
                                               : "a directory cannot be read");
    }
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_str);
    int rc = EF_OK;
    for (size_t i = 0; i < g.gl_pathc && rc == EF_OK; i++) {
        const char *p = g.gl_pathv[i], *key;
        size_t key_len;
        list_key(p, strlen(p), &key, &key_len);
        char where[EF__ERR_MAX / 2];
        snprintf(where, sizeof where, "files: option 'glob' '%.200s'", pattern);
        rc = ef__file_list_add(out, p, key, key_len, -1, where, err);
    }
    globfree(&g);
    if (rc != EF_OK)
        ef__file_list_free(out);
    return rc;
}
