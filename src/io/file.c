/* Whole-file reads with transparent gzip (see file.h). */
#include "io/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#ifdef EF_HAVE_ZLIB
#include <zlib.h>
#endif

typedef struct {
    unsigned char *data;
    size_t size, cap;
} growbuf;

static int grow(growbuf *g, size_t want)
{
    if (g->cap - g->size >= want)
        return 1;
    size_t cap = g->cap ? g->cap : 1 << 20;
    while (cap - g->size < want)
        cap *= 2;
    unsigned char *d = ef__realloc(g->data, cap);
    if (!d)
        return 0;
    g->data = d;
    g->cap = cap;
    return 1;
}

static void free_data(void *data)
{
    ef__free(data);
}

static int finish(growbuf *g, ef_buffer **out, const char *path, ef__err *err)
{
    *out = ef_buffer_wrap(g->data, g->size, free_data, g->data);
    if (!*out) {
        ef__free(g->data);
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", path);
    }
    return EF_OK;
}

static int read_plain(FILE *f, const char *path, ef_buffer **out, ef__err *err)
{
    growbuf g = {0};
    for (;;) {
        if (!grow(&g, 1 << 16)) {
            ef__free(g.data);
            return ef__err_set(err, EF_ENOMEM,
                               "%s: out of memory after %zu "
                               "bytes",
                               path, g.size);
        }
        size_t n = fread(g.data + g.size, 1, g.cap - g.size, f);
        g.size += n;
        if (n == 0) {
            if (ferror(f)) {
                ef__free(g.data);
                return ef__err_set(err, EF_EIO,
                                   "%s: read error at byte %zu: "
                                   "%s",
                                   path, g.size, strerror(errno));
            }
            break;
        }
    }
    return finish(&g, out, path, err);
}

#ifdef EF_HAVE_ZLIB
static int read_gzip(const char *path, ef_buffer **out, ef__err *err)
{
    gzFile gz = gzopen(path, "rb");
    if (!gz)
        return ef__err_set(err, EF_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
    gzbuffer(gz, 1 << 17);
    growbuf g = {0};
    int rc = EF_OK;
    for (;;) {
        if (!grow(&g, 1 << 20)) {
            rc = ef__err_set(err, EF_ENOMEM,
                             "%s: out of memory after %zu "
                             "bytes",
                             path, g.size);
            break;
        }
        size_t room = g.cap - g.size;
        int n = gzread(gz, g.data + g.size,
                       room > (1u << 30) ? 1u << 30 : (unsigned)room);
        int errnum = Z_OK;
        const char *msg = gzerror(gz, &errnum);
        if (n < 0 || (errnum != Z_OK && errnum != Z_STREAM_END)) {
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: corrupt or truncated gzip data after %zu "
                             "uncompressed bytes (%s)",
                             path, g.size + (n > 0 ? (size_t)n : 0), msg);
            break;
        }
        if (n == 0)
            break;
        g.size += (size_t)n;
    }
    gzclose(gz);
    if (rc != EF_OK) {
        ef__free(g.data);
        return rc;
    }
    return finish(&g, out, path, err);
}
#endif

int ef__read_file(const char *path, ef_buffer **out, ef__err *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ef__err_set(err, EF_EIO, "%s: cannot open: %s", path,
                           strerror(errno));
    unsigned char magic[2] = {0, 0};
    size_t got = fread(magic, 1, 2, f);
    int gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (!gzip) {
        rewind(f);
        int rc = read_plain(f, path, out, err);
        fclose(f);
        return rc;
    }
    fclose(f);
#ifdef EF_HAVE_ZLIB
    return read_gzip(path, out, err);
#else
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: gzip-compressed, but echoflow was built without "
                       "zlib (apt-get install zlib1g-dev, then rebuild)",
                       path);
#endif
}
