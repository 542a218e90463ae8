/* SPDX-License-Identifier: Apache-2.0 */
/* Byte streams (see stream.h): a raw backend (file, memory or HTTP) with
 * optional gzip or zstd inflation, the offset, cancellation and
 * statistics. */
#include "io/stream.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "io/regular_file.h"
#include "io/stream_backend.h"

#ifdef EF_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef EF_HAVE_ZSTD
#include <zstd.h>
#endif

#define RAW_CHUNK (1u << 16)

struct ef__stream {
    const ef__stream_backend *backend;
    void *impl;
    char *name;
    const atomic_int *cancelled;
    uint64_t offset;    /* offset of the next (inflated) byte handed out */
    uint64_t end;       /* the data ends here (ef__stream_open_range); 0:
                           where the file ends */
    uint64_t raw_base;  /* raw offset of the backend's first byte */
    uint64_t raw_bytes; /* bytes the backend gave */
    uint64_t read_ns;
    int compression; /* EF__COMP_*, after sniffing never EF__COMP_SNIFF */
    int max_inflate;
    /* raw bytes read ahead (for sniffing, and as inflater input) */
    unsigned char *in;
    size_t in_pos, in_len;
    int raw_end; /* the backend has no more */
#ifdef EF_HAVE_ZLIB
    z_stream z;
    int z_ready, z_member_done;
    uint64_t z_member_start; /* compressed offset of the current member */
#endif
#ifdef EF_HAVE_ZSTD
    ZSTD_DStream *zd;
    int zd_in_frame; /* a frame begun and not yet ended */
#endif
};

/* ---- file and memory backends ------------------------------------ */

typedef struct {
    FILE *f;
    const char *name;
    uint64_t pos;   /* for messages */
    int64_t size;   /* of a regular file; -1 for a pipe or a device */
} file_impl;

static int file_read(void *impl, void *buf, size_t n, size_t *got, ef__err *err)
{
    file_impl *fi = impl;
    *got = fread(buf, 1, n, fi->f);
    fi->pos += *got;
    if (*got < n && ferror(fi->f))
        return ef__err_set(err, EF_EIO, "%s: read error at byte %llu: %s",
                           fi->name, (unsigned long long)fi->pos,
                           strerror(errno));
    return EF_OK;
}

static void file_close(void *impl)
{
    file_impl *fi = impl;
    fclose(fi->f);
    ef__free(fi);
}

static int64_t file_size(const void *impl)
{
    return ((const file_impl *)impl)->size;
}

static const ef__stream_backend file_backend = {file_read, NULL, file_close,
                                                file_size};

typedef struct {
    const unsigned char *data;
    size_t size, pos;
} memory_impl;

static int memory_read(void *impl, void *buf, size_t n, size_t *got,
                       ef__err *err)
{
    (void)err;
    memory_impl *m = impl;
    *got = m->size - m->pos < n ? m->size - m->pos : n;
    if (*got == 0) /* data may be NULL for an empty stream */
        return EF_OK;
    memcpy(buf, m->data + m->pos, *got);
    m->pos += *got;
    return EF_OK;
}

static void memory_close(void *impl)
{
    ef__free(impl);
}

static int64_t memory_size(const void *impl)
{
    return (int64_t)((const memory_impl *)impl)->size;
}

static const ef__stream_backend memory_backend = {memory_read, NULL,
                                                  memory_close, memory_size};

/* ---- opening ----------------------------------------------------- */

/* The compression that n first bytes of data say (gzip's two-byte magic,
 * zstd's four-byte frame magic), EF__COMP_NONE otherwise. */
static int compression_of(const unsigned char *m, size_t n)
{
    if (n >= 2 && m[0] == 0x1f && m[1] == 0x8b)
        return EF__COMP_GZIP;
    if (n >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd)
        return EF__COMP_ZSTD;
    return EF__COMP_NONE;
}

void ef__stream_opts_init(ef__stream_opts *o)
{
    *o = (ef__stream_opts){
        .compression = -1, .tries = 5, .timeout_s = 30, .backoff_s = 0.1};
}

int ef__is_url(const char *s)
{
    return strncmp(s, "http://", 7) == 0 || strncmp(s, "https://", 8) == 0;
}

/* Wraps an opened backend; sniffs for gzip. Frees impl on failure. */
static int finish_open(ef__stream **out, const ef__stream_backend *b,
                       void *impl, const char *name, const ef__stream_opts *o,
                       ef__err *err)
{
    ef__stream_opts def;
    if (!o) {
        ef__stream_opts_init(&def);
        o = &def;
    }
    ef__stream *s = ef__calloc(1, sizeof *s);
    if (s) {
        s->name = ef__strdup(name);
        s->in = ef__malloc(RAW_CHUNK);
    }
    if (!s || !s->name || !s->in) {
        b->close(impl);
        if (s) {
            ef__free(s->name);
            ef__free(s->in);
            ef__free(s);
        }
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    }
    s->backend = b;
    s->impl = impl;
    s->cancelled = o->cancelled;
    s->compression = o->compression;
    s->max_inflate = o->max_inflate;
    *out = s;
    return EF_OK;
}

/* fopen(location, "rb"), or with o->regular_only, the same for a
 * regular file only (regular_file.h). NULL with the reason in err. */
static FILE *open_local(const char *location, const ef__stream_opts *o,
                        ef__err *err)
{
    int fd = -1;
    uint64_t size;
    if (o->regular_only &&
        ef__open_regular(location, "a file this source reads", &fd, &size,
                         err) != EF_OK)
        return NULL;
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : fopen(location, "rb");
    if (!f) {
        ef__err_set(err, EF_EIO, "%s: cannot open: %s", location,
                    strerror(errno));
        if (fd >= 0)
            close(fd);
    }
    return f;
}

/* Opens a local file; for an `offset` past 0, seeks there when the data
 * is plain and the file regular, and says so in *seeked (the bytes
 * before were then not read). gzip data (EF__COMP_GZIP, or sniffed and
 * the magic at byte 0) and pipes start at byte 0: the caller skips. */
static int open_file(ef__stream **out, const char *location,
                     const ef__stream_opts *o, uint64_t offset, int *seeked,
                     ef__err *err)
{
    *seeked = 0;
    file_impl *fi = ef__calloc(1, sizeof *fi);
    if (!fi)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", location);
    fi->f = open_local(location, o, err);
    if (!fi->f) {
        ef__free(fi);
        return err->status;
    }
    struct stat sb;
    fi->size = fstat(fileno(fi->f), &sb) == 0 && S_ISREG(sb.st_mode)
                   ? (int64_t)sb.st_size
                   : -1;
    ef__stream_opts use = *o;
    int rc = EF_OK;
    if (offset > 0 && fi->size >= 0) {
        if (use.compression < 0) { /* the magic, read without moving the FILE */
            unsigned char m[4];
            ssize_t got = pread(fileno(fi->f), m, sizeof m, 0);
            use.compression = compression_of(m, got > 0 ? (size_t)got : 0);
        }
        if (use.compression == 0 && offset > (uint64_t)fi->size)
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: cannot start reading at offset %llu: the "
                             "file has %lld bytes",
                             location, (unsigned long long)offset,
                             (long long)fi->size);
        else if (use.compression == 0 &&
                 fseeko(fi->f, (off_t)offset, SEEK_SET) != 0)
            rc = ef__err_set(err, EF_EIO, "%s: cannot seek to offset %llu: %s",
                             location, (unsigned long long)offset,
                             strerror(errno));
        *seeked = use.compression == 0;
    }
    if (rc != EF_OK) {
        fclose(fi->f);
        ef__free(fi);
        return rc;
    }
    fi->pos = *seeked ? offset : 0;
    rc = finish_open(out, &file_backend, fi, location, &use, err);
    if (rc == EF_OK)
        fi->name = (*out)->name;
    return rc;
}

/* Reads and drops the data up to `offset` (the stream is at its start). */
static int skip_to(ef__stream *s, uint64_t offset, ef__err *err)
{
    unsigned char scratch[16384];
    while (s->offset < offset) {
        uint64_t left = offset - s->offset;
        size_t got;
        int rc = ef__stream_read(
            s, scratch, left < sizeof scratch ? (size_t)left : sizeof scratch,
            &got, err);
        if (rc != EF_OK)
            return rc;
        if (got == 0)
            return ef__err_set(err, EF_EFORMAT,
                               "%s: cannot start reading at offset %llu: the "
                               "data ends at offset %llu",
                               s->name, (unsigned long long)offset,
                               (unsigned long long)s->offset);
    }
    return EF_OK;
}

int ef__stream_open_range(ef__stream **out, const char *location,
                          const ef__stream_opts *o, uint64_t offset,
                          uint64_t end, ef__err *err)
{
    assert(end == 0 || end > offset);
    *out = NULL;
    ef__stream_opts def;
    if (!o) {
        ef__stream_opts_init(&def);
        o = &def;
    }
    int rc, seeked = 0;
    if (ef__is_url(location)) {
        /* only data known to be plain is asked for from the offset on */
        seeked = offset > 0 && o->compression == 0;
        void *impl;
        const ef__stream_backend *b;
        /* an end in inflated bytes says nothing of the raw ones */
        rc = ef__http_open(&impl, &b, location, o, seeked ? offset : 0,
                           o->compression == 0 ? end : 0, err);
        if (rc == EF_OK)
            rc = finish_open(out, b, impl, location, o, err);
    } else {
        rc = open_file(out, location, o, offset, &seeked, err);
    }
    if (rc != EF_OK)
        return rc;
    (*out)->end = end;
    if (seeked) {
        (*out)->compression = 0;
        (*out)->offset = (*out)->raw_base = offset;
    } else if (offset > 0) {
        rc = skip_to(*out, offset, err);
    }
    if (rc != EF_OK) {
        ef__stream_close(*out);
        *out = NULL;
    }
    return rc;
}

int ef__stream_open_at(ef__stream **out, const char *location,
                       const ef__stream_opts *o, uint64_t offset, ef__err *err)
{
    return ef__stream_open_range(out, location, o, offset, 0, err);
}

int ef__stream_open(ef__stream **out, const char *location,
                    const ef__stream_opts *o, ef__err *err)
{
    return ef__stream_open_range(out, location, o, 0, 0, err);
}

int ef__stream_open_memory(ef__stream **out, const void *data, size_t size,
                           const char *name, const ef__stream_opts *o,
                           ef__err *err)
{
    *out = NULL;
    memory_impl *m = ef__calloc(1, sizeof *m);
    if (!m)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", name);
    m->data = data;
    m->size = size;
    return finish_open(out, &memory_backend, m, name, o, err);
}

void ef__stream_close(ef__stream *s)
{
    if (!s)
        return;
#ifdef EF_HAVE_ZLIB
    if (s->z_ready)
        inflateEnd(&s->z);
#endif
#ifdef EF_HAVE_ZSTD
    ZSTD_freeDStream(s->zd);
#endif
    s->backend->close(s->impl);
    ef__free(s->in);
    ef__free(s->name);
    ef__free(s);
}

/* ---- reading ----------------------------------------------------- */

static int check_cancel(const ef__stream *s, ef__err *err)
{
    if (s->cancelled && atomic_load(s->cancelled))
        return ef__err_set(err, EF_ECANCELED, "%s: the pipeline was stopped",
                           s->name);
    return EF_OK;
}

/* Refills s->in when it is used up; leaves in_len == in_pos at the end. */
static int fill_raw(ef__stream *s, ef__err *err)
{
    if (s->in_pos < s->in_len || s->raw_end)
        return EF_OK;
    int rc = check_cancel(s, err);
    if (rc != EF_OK)
        return rc;
    size_t got = 0;
    rc = s->backend->read(s->impl, s->in, RAW_CHUNK, &got, err);
    if (rc != EF_OK)
        return rc;
    s->in_pos = 0;
    s->in_len = got;
    s->raw_bytes += got;
    if (got == 0)
        s->raw_end = 1;
    return EF_OK;
}

static int read_raw(ef__stream *s, unsigned char *buf, size_t n, size_t *got,
                    ef__err *err)
{
    *got = 0;
    while (*got < n) {
        int rc = fill_raw(s, err);
        if (rc != EF_OK)
            return rc;
        if (s->in_pos == s->in_len)
            break;
        size_t k = s->in_len - s->in_pos;
        if (k > n - *got)
            k = n - *got;
        memcpy(buf + *got, s->in + s->in_pos, k);
        s->in_pos += k;
        *got += k;
    }
    return EF_OK;
}

#if defined(EF_HAVE_ZLIB) || defined(EF_HAVE_ZSTD)
/* Stops a decompression bomb: `inflated` bytes from the compressed bytes
 * consumed so far, against the stream's max_inflate. */
static int check_ratio(const ef__stream *s, uint64_t inflated, ef__err *err)
{
    uint64_t raw = ef__stream_raw_offset(s);
    if (!s->max_inflate || inflated <= EF__INFLATE_FREE ||
        inflated / (raw ? raw : 1) < (uint64_t)s->max_inflate)
        return EF_OK;
    const char *kind = s->compression == EF__COMP_ZSTD ? "zstd" : "gzip";
    return ef__err_set(err, EF_EFORMAT,
                       "%s: %s data inflates to %llu bytes from %llu "
                       "(over %d to 1): a %s bomb, or data more "
                       "compressible than the max_inflate option allows",
                       s->name, kind, (unsigned long long)inflated,
                       (unsigned long long)raw, s->max_inflate, kind);
}
#endif

#ifdef EF_HAVE_ZLIB
static int read_gzip(ef__stream *s, unsigned char *buf, size_t n, size_t *got,
                     ef__err *err)
{
    *got = 0;
    if (!s->z_ready) {
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) /* gzip wrapper only */
            return ef__err_set(err, EF_ENOMEM, "%s: cannot start inflating",
                               s->name);
        s->z_ready = 1;
    }
    while (*got < n) {
        int rc = fill_raw(s, err);
        if (rc != EF_OK)
            return rc;
        if (s->in_pos == s->in_len) {
            if (!s->z_member_done)
                return ef__err_set(err, EF_EFORMAT,
                                   "%s: gzip stream truncated after %llu "
                                   "compressed bytes (%llu inflated)",
                                   s->name, (unsigned long long)s->raw_bytes,
                                   (unsigned long long)(s->offset + *got));
            break;
        }
        if (s->z_member_done) { /* another gzip member follows */
            inflateReset(&s->z);
            s->z_member_done = 0;
            s->z_member_start = s->raw_bytes - (s->in_len - s->in_pos);
        }
        s->z.next_in = s->in + s->in_pos;
        s->z.avail_in = (uInt)(s->in_len - s->in_pos);
        s->z.next_out = buf + *got;
        size_t room = n - *got;
        s->z.avail_out = room > (1u << 30) ? 1u << 30 : (uInt)room;
        uInt before = s->z.avail_out;
        int zr = inflate(&s->z, Z_NO_FLUSH);
        s->in_pos = s->in_len - s->z.avail_in;
        *got += before - s->z.avail_out;
        rc = EF_OK;
        if (zr == Z_STREAM_END)
            s->z_member_done = 1;
        else if (zr == Z_MEM_ERROR)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory inflating",
                               s->name);
        else if (zr == Z_OK || zr == Z_BUF_ERROR)
            rc = check_ratio(s, s->offset + *got, err);
        else
            /* the member's start tells junk after the data (a member that
             * fails at once) from damage inside it */
            return ef__err_set(
                err, EF_EFORMAT,
                "%s: corrupt gzip data near compressed offset %llu (in the "
                "member starting at %llu): %s",
                s->name,
                (unsigned long long)(s->raw_bytes - (s->in_len - s->in_pos)),
                (unsigned long long)s->z_member_start,
                s->z.msg ? s->z.msg : "inflate failed");
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}
#endif

#ifdef EF_HAVE_ZSTD
static int read_zstd(ef__stream *s, unsigned char *buf, size_t n, size_t *got,
                     ef__err *err)
{
    *got = 0;
    if (!s->zd) {
        s->zd = ZSTD_createDStream();
        if (!s->zd || ZSTD_isError(ZSTD_initDStream(s->zd)))
            return ef__err_set(err, EF_ENOMEM, "%s: cannot start inflating",
                               s->name);
    }
    while (*got < n) {
        int rc = fill_raw(s, err);
        if (rc != EF_OK)
            return rc;
        if (s->in_pos == s->in_len) {
            if (s->zd_in_frame)
                return ef__err_set(err, EF_EFORMAT,
                                   "%s: zstd stream truncated after %llu "
                                   "compressed bytes (%llu inflated)",
                                   s->name, (unsigned long long)s->raw_bytes,
                                   (unsigned long long)(s->offset + *got));
            break;
        }
        ZSTD_inBuffer in = {s->in, s->in_len, s->in_pos};
        ZSTD_outBuffer out = {buf, n, *got};
        size_t zr = ZSTD_decompressStream(s->zd, &out, &in);
        if (ZSTD_isError(zr))
            return ef__err_set(
                err, EF_EFORMAT,
                "%s: corrupt zstd data near compressed offset "
                "%llu: %s",
                s->name,
                (unsigned long long)(s->raw_bytes - (s->in_len - in.pos)),
                ZSTD_getErrorName(zr));
        s->in_pos = in.pos;
        *got = out.pos;
        /* 0: a frame ended and all of it is out; frames may follow */
        s->zd_in_frame = zr != 0;
        rc = check_ratio(s, s->offset + *got, err);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}
#endif

/* Decides the compression from the first raw bytes, once. */
static int sniff(ef__stream *s, ef__err *err)
{
    if (s->compression >= 0)
        return EF_OK;
    int rc = fill_raw(s, err);
    if (rc != EF_OK)
        return rc;
    /* a short first read cannot show a magic; compressed data never comes
     * that short from a file, and a short HTTP chunk only delays nothing
     * but this guess, so read on until four bytes are here */
    while (s->in_len - s->in_pos < 4 && !s->raw_end) {
        size_t have = s->in_len - s->in_pos, got = 0;
        memmove(s->in, s->in + s->in_pos, have);
        rc = s->backend->read(s->impl, s->in + have, RAW_CHUNK - have, &got,
                              err);
        if (rc != EF_OK)
            return rc;
        s->in_pos = 0;
        s->in_len = have + got;
        s->raw_bytes += got;
        if (got == 0)
            s->raw_end = 1;
    }
    s->compression = compression_of(s->in + s->in_pos, s->in_len - s->in_pos);
    return EF_OK;
}

#if !defined(EF_HAVE_ZLIB) || !defined(EF_HAVE_ZSTD)
/* "was built without LIB (apt-get install PACKAGE, then rebuild)" */
static int unsupported(const ef__stream *s, const char *kind, const char *lib,
                       const char *package, ef__err *err)
{
    return ef__err_set(err, EF_EUNSUPPORTED,
                       "%s: %s data, but echoflow was built without %s "
                       "(apt-get install %s, then rebuild)",
                       s->name, kind, lib, package);
}
#endif

int ef__stream_read(ef__stream *s, void *buf, size_t n, size_t *got,
                    ef__err *err)
{
    *got = 0;
    if (s->end > 0) { /* ef__stream_open_range's end */
        if (s->offset >= s->end)
            return EF_OK;
        if (n > s->end - s->offset)
            n = (size_t)(s->end - s->offset);
    }
    uint64_t t0 = ef__now_ns();
    int rc = sniff(s, err);
    if (rc == EF_OK) {
        if (s->compression == EF__COMP_GZIP) {
#ifdef EF_HAVE_ZLIB
            rc = read_gzip(s, buf, n, got, err);
#else
            rc = unsupported(s, "gzip", "zlib", "zlib1g-dev", err);
#endif
        } else if (s->compression == EF__COMP_ZSTD) {
#ifdef EF_HAVE_ZSTD
            rc = read_zstd(s, buf, n, got, err);
#else
            rc = unsupported(s, "zstd", "libzstd", "libzstd-dev", err);
#endif
        } else {
            rc = read_raw(s, buf, n, got, err);
        }
    }
    s->offset += *got;
    s->read_ns += ef__now_ns() - t0;
    return rc;
}

int ef__stream_read_full(ef__stream *s, void *buf, size_t n, const char *what,
                         ef__err *err)
{
    uint64_t start = s->offset;
    size_t got;
    int rc = ef__stream_read(s, buf, n, &got, err);
    if (rc != EF_OK || got == n)
        return rc;
    if (got == 0)
        return EF_END;
    return ef__err_set(err, EF_EFORMAT,
                       "%s: truncated %s at offset %llu: expected %zu bytes, "
                       "the data ends after %zu",
                       s->name, what, (unsigned long long)start, n, got);
}

int ef__stream_skip(ef__stream *s, uint64_t n, const char *what, ef__err *err)
{
    unsigned char scratch[4096];
    uint64_t start = s->offset;
    while (n > 0) {
        size_t k = n < sizeof scratch ? (size_t)n : sizeof scratch;
        size_t got;
        int rc = ef__stream_read(s, scratch, k, &got, err);
        if (rc != EF_OK)
            return rc;
        if (got < k) {
            if (s->offset == start)
                return EF_END;
            return ef__err_set(err, EF_EFORMAT,
                               "%s: truncated %s at offset %llu: %llu more "
                               "bytes expected",
                               s->name, what, (unsigned long long)start,
                               (unsigned long long)(n - got));
        }
        n -= k;
    }
    return EF_OK;
}

uint64_t ef__stream_offset(const ef__stream *s)
{
    return s->offset;
}

uint64_t ef__stream_raw_offset(const ef__stream *s)
{
    return s->raw_base + s->raw_bytes - (s->in_len - s->in_pos);
}

int ef__stream_compression(const ef__stream *s)
{
    return s->compression;
}

int64_t ef__stream_size(const ef__stream *s)
{
    return s->backend->size ? s->backend->size(s->impl) : -1;
}

const char *ef__stream_name(const ef__stream *s)
{
    return s->name;
}

void ef__stream_get_stats(const ef__stream *s, ef__stream_stats *out)
{
    out->raw_bytes = s->raw_bytes;
    out->retries = s->backend->retries ? s->backend->retries(s->impl) : 0;
    out->read_s = ef__ns_to_s(s->read_ns);
}
