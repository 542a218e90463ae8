/* SPDX-License-Identifier: Apache-2.0 */
/* Streaming tar reading (see tar.h).
 *
 * Header layout (POSIX.1-1988 ustar; offsets in the 512-byte block):
 *   0 name[100]  100 mode[8]  108 uid[8]  116 gid[8]  124 size[12]
 *   136 mtime[12]  148 chksum[8]  156 typeflag  157 linkname[100]
 *   257 magic[6]  263 version[2]  265 uname[32]  297 gname[32]
 *   329 devmajor[8]  337 devminor[8]  345 prefix[155]
 * The checksum is the sum of the header's bytes with the checksum field
 * read as eight spaces; old writers summed signed chars, so both sums are
 * accepted. Extended headers ('x' pax, 'L' GNU long name) describe the
 * member whose header follows them. */
#include "codec/tar.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "io/stream_buffer.h"

#define SHOW 200 /* bytes of a member name quoted in messages */

struct ef__tar {
    ef__stream *s;
    char *name; /* the current member's path */
    size_t name_cap;
    /* extended headers waiting for the member they describe */
    int pending;             /* one was read */
    uint64_t pending_offset; /* where the first of them starts */
    char *long_name;         /* GNU 'L', or NULL */
    char *pax_path;          /* pax `path`, or NULL */
    int pax_has_size;
    uint64_t pax_size;
    /* the current member */
    int in_member; /* its data and padding are still in the stream */
    uint64_t size;
    int failed, ended;
};

static const char *sname(const ef__tar *t)
{
    return ef__stream_name(t->s);
}

static uint64_t padding(uint64_t size)
{
    return (EF__TAR_BLOCK - size % EF__TAR_BLOCK) % EF__TAR_BLOCK;
}

int ef__tar_open(ef__tar **out, ef__stream *s, ef__err *err)
{
    *out = ef__calloc(1, sizeof **out);
    if (!*out)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                           ef__stream_name(s));
    (*out)->s = s;
    return EF_OK;
}

static void clear_pending(ef__tar *t)
{
    ef__free(t->long_name);
    ef__free(t->pax_path);
    t->long_name = t->pax_path = NULL;
    t->pax_has_size = 0;
    t->pending = 0;
}

void ef__tar_close(ef__tar *t)
{
    if (!t)
        return;
    clear_pending(t);
    ef__free(t->name);
    ef__free(t);
}

/* ---- numeric fields --------------------------------------------- */

/* Octal digits after optional spaces, ended by a space, a NUL or the end
 * of the field (what follows the terminator is not read). A field with no
 * digit reads as 0 and *digits tells. Returns 0 on anything else. */
static int parse_octal(const unsigned char *f, size_t len, uint64_t *v,
                       int *digits)
{
    size_t i = 0;
    while (i < len && f[i] == ' ')
        i++;
    uint64_t x = 0;
    *digits = 0;
    for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, (*digits)++) {
        if (x > (UINT64_MAX >> 3))
            return 0;
        x = x << 3 | (uint64_t)(f[i] - '0');
    }
    if (i < len && f[i] != ' ' && f[i] != '\0')
        return 0;
    *v = x;
    return 1;
}

/* The size field: octal, or base-256 (first byte's top bit set: the rest
 * of the bits, big-endian; a first byte of 0xff is a negative number). */
static int parse_size(const ef__tar *t, const unsigned char *h, uint64_t off,
                      uint64_t *size, ef__err *err)
{
    const unsigned char *f = h + 124;
    if (f[0] & 0x80) {
        uint64_t x = f[0] & 0x7f;
        int ok = f[0] != 0xff;
        for (int i = 1; i < 12 && ok; i++) {
            ok = x <= (UINT64_MAX >> 8);
            x = x << 8 | f[i];
        }
        if (ok && x <= (uint64_t)INT64_MAX) {
            *size = x;
            return EF_OK;
        }
    } else {
        int digits;
        if (parse_octal(f, 12, size, &digits))
            return EF_OK;
    }
    return ef__err_set(err, EF_EFORMAT,
                       "%s: tar header at offset %llu: unreadable size field "
                       "(expected octal digits or a base-256 number)",
                       sname(t), (unsigned long long)off);
}

static int check_checksum(const ef__tar *t, const unsigned char *h,
                          uint64_t off, ef__err *err)
{
    uint64_t stored;
    int digits;
    if (!parse_octal(h + 148, 8, &stored, &digits) || digits == 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: bad tar header at offset %llu: the checksum "
                           "field holds no octal number (not a tar file, or "
                           "corrupt)",
                           sname(t), (unsigned long long)off);
    uint64_t sum = 0;
    int64_t ssum = 0;
    for (int i = 0; i < EF__TAR_BLOCK; i++) {
        unsigned char b = i >= 148 && i < 156 ? ' ' : h[i];
        sum += b;
        ssum += (signed char)b;
    }
    if (stored == sum || (int64_t)stored == ssum)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "%s: bad tar header checksum at offset %llu: stored "
                       "%llu, computed %llu (not a tar file, or corrupt)",
                       sname(t), (unsigned long long)off,
                       (unsigned long long)stored, (unsigned long long)sum);
}

/* ---- data of extended headers and skipped entries ---------------- */

/* Skips n bytes that must be there. */
static int skip_exact(ef__tar *t, uint64_t n, const char *what, ef__err *err)
{
    uint64_t start = ef__stream_offset(t->s);
    int rc = ef__stream_skip(t->s, n, what, err);
    if (rc == EF_END)
        rc = ef__err_set(err, EF_EFORMAT,
                         "%s: truncated %s at offset %llu: %llu bytes "
                         "expected, the data ends there",
                         sname(t), what, (unsigned long long)start,
                         (unsigned long long)n);
    return rc;
}

/* Reads the data of an extended header (bounded) and its padding. */
/* Parses a metadata member's bytes p[0..n), read from `base` on. */
typedef int (*meta_parser)(ef__tar *t, const char *p, size_t n, uint64_t base,
                           ef__err *err);

/* Reads a metadata member (a pax header, a GNU long name) of `size` bytes
 * whose header is at `off`, and hands its bytes to `parse`. */
static int read_meta(ef__tar *t, uint64_t size, uint64_t off, const char *what,
                     meta_parser parse, ef__err *err)
{
    if (size > EF__TAR_MAX_META)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: %s at offset %llu claims %llu bytes, over the "
                           "%llu-byte limit",
                           sname(t), what, (unsigned long long)off,
                           (unsigned long long)size,
                           (unsigned long long)EF__TAR_MAX_META);
    ef_buffer *b = NULL;
    int rc = ef__stream_read_buffer(t->s, size, what, &b, err);
    if (rc == EF_OK)
        rc = skip_exact(t, padding(size), "tar padding", err);
    if (rc == EF_OK)
        rc = parse(t, ef_buffer_data(b), ef_buffer_size(b),
                   off + EF__TAR_BLOCK, err);
    ef_buffer_release(b);
    return rc;
}

static char *dup_bytes(const char *p, size_t n)
{
    char *s = ef__malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = '\0';
    }
    return s;
}

/* One "key=value" of a pax header (value not NUL-terminated). */
static int pax_keyword(ef__tar *t, const char *key, size_t klen,
                       const char *val, size_t vlen, uint64_t at, ef__err *err)
{
    if (klen == 4 && memcmp(key, "path", 4) == 0) {
        ef__free(t->pax_path);
        t->pax_path = NULL;
        if (vlen == 0) /* an empty value cancels the keyword */
            return EF_OK;
        if (memchr(val, '\0', vlen))
            return ef__err_set(err, EF_EFORMAT,
                               "%s: pax record at offset %llu: the path "
                               "holds a NUL byte",
                               sname(t), (unsigned long long)at);
        t->pax_path = dup_bytes(val, vlen);
        return t->pax_path
                   ? EF_OK
                   : ef__err_set(err, EF_ENOMEM, "%s: out of memory", sname(t));
    }
    if (klen == 4 && memcmp(key, "size", 4) == 0) {
        t->pax_has_size = vlen > 0;
        uint64_t x = 0;
        for (size_t i = 0; i < vlen; i++) {
            if (val[i] < '0' || val[i] > '9' || x > (uint64_t)INT64_MAX / 10)
                return ef__err_set(err, EF_EFORMAT,
                                   "%s: pax record at offset %llu: size "
                                   "'%.*s' is not a decimal number below "
                                   "2^63",
                                   sname(t), (unsigned long long)at,
                                   (int)(vlen > 40 ? 40 : vlen), val);
            x = x * 10 + (uint64_t)(val[i] - '0');
        }
        t->pax_size = x;
        return EF_OK;
    }
    if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: pax record at offset %llu: GNU sparse files "
                           "are not supported (%.*s)",
                           sname(t), (unsigned long long)at,
                           (int)(klen > 40 ? 40 : klen), key);
    return EF_OK; /* mtime, uid, linkpath ...: nothing we use */
}

/* A pax extended header: records "LENGTH key=value\n", LENGTH counting
 * the whole record in decimal. */
static int parse_pax(ef__tar *t, const char *p, size_t n, uint64_t base,
                     ef__err *err)
{
    int rc = EF_OK;
    size_t i = 0;
    while (rc == EF_OK && i < n && p[i] != '\0') {
        size_t len = 0, j = i;
        while (j < n && p[j] >= '0' && p[j] <= '9' && len <= n)
            len = len * 10 + (size_t)(p[j++] - '0');
        const char *eq = NULL;
        if (j > i && j < n && p[j] == ' ' && len > j - i + 1 && len <= n - i &&
            p[i + len - 1] == '\n')
            eq = memchr(p + j + 1, '=', i + len - 1 - (j + 1));
        if (!eq) {
            rc = ef__err_set(err, EF_EFORMAT,
                             "%s: bad pax record at offset %llu (expected "
                             "\"LENGTH key=value\\n\" within the header's "
                             "%zu bytes)",
                             sname(t), (unsigned long long)(base + i), n);
            break;
        }
        const char *key = p + j + 1, *val = eq + 1;
        rc = pax_keyword(t, key, (size_t)(eq - key), val,
                         (size_t)(p + i + len - 1 - val), base + i, err);
        i += len;
    }
    return rc;
}

/* A GNU long name ('L'): the name of the next member, NUL-terminated. */
static int parse_long_name(ef__tar *t, const char *p, size_t n,
                           uint64_t base, ef__err *err)
{
    (void)base;
    ef__free(t->long_name);
    t->long_name = dup_bytes(p, strnlen(p, n));
    return t->long_name
               ? EF_OK
               : ef__err_set(err, EF_ENOMEM, "%s: out of memory", sname(t));
}

/* ---- members ----------------------------------------------------- */

static int set_name(ef__tar *t, const char *a, size_t alen, const char *b,
                    size_t blen, ef__err *err)
{
    size_t need = alen + (alen ? 1 : 0) + blen + 1;
    if (need > t->name_cap) {
        char *n = ef__realloc(t->name, need);
        if (!n)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory", sname(t));
        t->name = n;
        t->name_cap = need;
    }
    size_t k = 0;
    if (alen) {
        memcpy(t->name, a, alen);
        t->name[alen] = '/';
        k = alen + 1;
    }
    memcpy(t->name + k, b, blen);
    t->name[k + blen] = '\0';
    return EF_OK;
}

/* The member's path: pax `path`, else a GNU long name, else the header's
 * name, behind its prefix in POSIX ustar headers (GNU headers use the
 * prefix's bytes for other things). */
static int member_name(ef__tar *t, const unsigned char *h, ef__err *err)
{
    const char *p = t->pax_path ? t->pax_path : t->long_name;
    if (p)
        return set_name(t, NULL, 0, p, strlen(p), err);
    const char *name = (const char *)h, *prefix = (const char *)h + 345;
    size_t plen = memcmp(h + 257, "ustar\0", 6) == 0 ? strnlen(prefix, 155) : 0;
    return set_name(t, prefix, plen, name, strnlen(name, 100), err);
}

/* One non-zero header block at offset `off`. *found is set when it starts
 * a regular member, which is then described in *m. */
static int header(ef__tar *t, const unsigned char *h, uint64_t off,
                  ef__tar_member *m, int *found, ef__err *err)
{
    *found = 0;
    uint64_t size = 0;
    int rc = check_checksum(t, h, off, err);
    if (rc == EF_OK)
        rc = parse_size(t, h, off, &size, err);
    if (rc != EF_OK)
        return rc;
    char type = (char)h[156];
    if (type == 'x' || type == 'L' || type == 'K') {
        if (!t->pending)
            t->pending_offset = off;
        t->pending = 1;
        if (type == 'x')
            return read_meta(t, size, off, "pax extended header", parse_pax,
                             err);
        if (type == 'L')
            return read_meta(t, size, off, "GNU long name", parse_long_name,
                             err);
        return skip_exact(t, size + padding(size), "GNU long link name", err);
    }
    if (type == 'g')
        return skip_exact(t, size + padding(size), "pax global header", err);
    if (type == 'S')
        return ef__err_set(err, EF_EFORMAT,
                           "%s: tar header at offset %llu: GNU sparse files "
                           "are not supported",
                           sname(t), (unsigned long long)off);
    if (t->pax_has_size)
        size = t->pax_size;
    uint64_t start = t->pending ? t->pending_offset : off;
    int regular = type == '0' || type == '\0' || type == '7';
    int has_data = !(type >= '1' && type <= '6'); /* links, devices, dirs */
    if (!regular) {
        clear_pending(t);
        return has_data ? skip_exact(t, size + padding(size),
                                     "data of a skipped tar entry", err)
                        : EF_OK;
    }
    rc = member_name(t, h, err);
    clear_pending(t);
    if (rc != EF_OK)
        return rc;
    size_t len = strlen(t->name);
    if (len > 0 && t->name[len - 1] == '/') /* a pre-POSIX directory */
        return skip_exact(t, size + padding(size), "data of a directory", err);
    if (size > EF__TAR_MAX_MEMBER)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: member '%.*s' at offset %llu claims %llu "
                           "bytes, over the %llu-byte limit",
                           sname(t), SHOW, t->name, (unsigned long long)start,
                           (unsigned long long)size,
                           (unsigned long long)EF__TAR_MAX_MEMBER);
    t->in_member = 1;
    t->size = size;
    m->name = t->name;
    m->size = size;
    m->offset = start;
    m->data_offset = ef__stream_offset(t->s);
    *found = 1;
    return EF_OK;
}

/* The archive or the data ends at `off` while an extended header still
 * waits for the member it describes. */
static int orphan_header(ef__tar *t, const char *end, uint64_t off,
                         ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: %s at offset %llu, after an extended header at "
                       "offset %llu that describes no member",
                       sname(t), end, (unsigned long long)off,
                       (unsigned long long)t->pending_offset);
}

/* A zero block at `off`: the end, if a second one or the end of the data
 * follows. */
static int zero_block(ef__tar *t, uint64_t off, ef__err *err)
{
    if (t->pending)
        return orphan_header(t, "the archive ends with a zero block", off,
                             err);
    unsigned char blk[EF__TAR_BLOCK];
    int rc = ef__stream_read_full(t->s, blk, sizeof blk, "tar end block", err);
    if (rc == EF_END)
        return EF_END;
    if (rc != EF_OK)
        return rc;
    for (size_t i = 0; i < sizeof blk; i++)
        if (blk[i])
            return ef__err_set(err, EF_EFORMAT,
                               "%s: a lone zero block at offset %llu before a "
                               "header at offset %llu (expected a second zero "
                               "block to end the archive; concatenated "
                               "archives are not read)",
                               sname(t), (unsigned long long)off,
                               (unsigned long long)(off + EF__TAR_BLOCK));
    return EF_END;
}

/* Skips what is left of the current member. */
static int finish_member(ef__tar *t, ef__err *err)
{
    if (!t->in_member)
        return EF_OK;
    t->in_member = 0;
    return skip_exact(t, t->size + padding(t->size), "member data", err);
}

static int next_member(ef__tar *t, ef__tar_member *m, ef__err *err)
{
    int rc = finish_member(t, err);
    while (rc == EF_OK) {
        uint64_t off = ef__stream_offset(t->s);
        unsigned char blk[EF__TAR_BLOCK];
        rc = ef__stream_read_full(t->s, blk, sizeof blk, "tar header", err);
        if (rc == EF_END && t->pending)
            return orphan_header(t, "the data ends", off, err);
        if (rc != EF_OK)
            return rc;
        int zero = 1;
        for (size_t i = 0; i < sizeof blk && zero; i++)
            zero = blk[i] == 0;
        if (zero)
            return zero_block(t, off, err);
        int found;
        rc = header(t, blk, off, m, &found, err);
        if (rc == EF_OK && found)
            return EF_OK;
    }
    return rc;
}

int ef__tar_next(ef__tar *t, ef__tar_member *m, ef__err *err)
{
    if (t->ended)
        return EF_END;
    if (t->failed)
        return ef__err_set(err, EF_ESTATE, "%s: the tar reader failed earlier",
                           sname(t));
    int rc = next_member(t, m, err);
    t->ended = rc == EF_END;
    t->failed = rc < 0;
    return rc;
}

/* The current member's data and padding; `whole`: its buffer allocated
 * at once (see tar.h). */
static int read_data(ef__tar *t, int whole, ef_buffer **out, ef__err *err)
{
    *out = NULL;
    if (t->failed || !t->in_member)
        return ef__err_set(err, EF_ESTATE,
                           "%s: no tar member to read (read twice, or after "
                           "an error)",
                           sname(t));
    t->in_member = 0;
    char what[SHOW + 32];
    snprintf(what, sizeof what, "data of member '%.*s'", SHOW, t->name);
    int rc = whole ? ef__stream_read_buffer_whole(t->s, t->size, what, out, err)
                   : ef__stream_read_buffer(t->s, t->size, what, out, err);
    if (rc == EF_OK) {
        snprintf(what, sizeof what, "padding after member '%.*s'", SHOW,
                 t->name);
        rc = skip_exact(t, padding(t->size), what, err);
    }
    if (rc != EF_OK) {
        ef_buffer_release(*out);
        *out = NULL;
        t->failed = 1;
    }
    return rc;
}

int ef__tar_read(ef__tar *t, ef_buffer **out, ef__err *err)
{
    return read_data(t, 0, out, err);
}

int ef__tar_read_whole(ef__tar *t, ef_buffer **out, ef__err *err)
{
    return read_data(t, 1, out, err);
}
