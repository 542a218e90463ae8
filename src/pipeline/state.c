/* SPDX-License-Identifier: Apache-2.0 */
/* The bytes of a saved state (see state.h). */
#include "pipeline/state.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/crc32c.h"
#include "core/alloc.h"

/* ---- identity lists ---------------------------------------------- */

int ef__idents_add(ef__idents *l, const ef__ident *d)
{
    if (l->n == l->cap) {
        ef__ident *items = ef__grow(l->items, &l->cap, 16, sizeof *items);
        if (!items)
            return EF_ENOMEM;
        l->items = items;
    }
    l->items[l->n] = *d;
    if (d->members)
        ef_buffer_retain(d->members);
    l->n++;
    return EF_OK;
}

void ef__idents_free(ef__idents *l)
{
    for (size_t i = 0; i < l->n; i++)
        ef__ident_clear(&l->items[i]);
    ef__free(l->items);
    memset(l, 0, sizeof *l);
}

/* ---- writing ----------------------------------------------------- */

static int reserve(ef__state_out *o, size_t n)
{
    if (o->failed)
        return -1;
    if (o->len + n <= o->cap)
        return 0;
    size_t cap = o->cap ? o->cap : 256;
    while (cap < o->len + n)
        cap *= 2;
    unsigned char *buf = ef__realloc(o->buf, cap);
    if (!buf) {
        o->failed = 1;
        return -1;
    }
    o->buf = buf;
    o->cap = cap;
    return 0;
}

void ef__put_u64(ef__state_out *o, uint64_t v)
{
    if (reserve(o, 10))
        return;
    do {
        unsigned char b = v & 0x7f;
        v >>= 7;
        o->buf[o->len++] = (unsigned char)(b | (v ? 0x80 : 0));
    } while (v);
}

void ef__put_i64(ef__state_out *o, int64_t v)
{
    ef__put_u64(o, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void ef__put_bytes(ef__state_out *o, const void *data, size_t n)
{
    ef__put_u64(o, n);
    if (n == 0 || reserve(o, n))
        return;
    memcpy(o->buf + o->len, data, n);
    o->len += n;
}

void ef__put_raw(ef__state_out *o, const ef__state_out *part)
{
    if (part->failed)
        o->failed = 1;
    if (part->len == 0 || reserve(o, part->len))
        return;
    memcpy(o->buf + o->len, part->buf, part->len);
    o->len += part->len;
}

void ef__put_str(ef__state_out *o, const char *s)
{
    ef__put_bytes(o, s, strlen(s));
}

void ef__put_ident(ef__state_out *o, const ef__ident *d)
{
    ef__put_i64(o, d->id.index);
    ef__put_i64(o, d->id.epoch);
    ef__put_i64(o, d->id.echo_copy);
    ef__put_i64(o, d->id.fresh);
    ef__put_i64(o, d->part);
    ef__put_i64(o, d->offset);
    ef__put_i64(o, d->end - d->offset);
    size_t n;
    const ef__ident *m = ef__ident_members(d, &n);
    ef__put_idents(o, m, n);
}

void ef__put_idents(ef__state_out *o, const ef__ident *d, size_t n)
{
    ef__put_u64(o, n);
    for (size_t i = 0; i < n; i++)
        ef__put_ident(o, &d[i]);
}

void ef__state_replay_ident(ef__state_out *o, const ef__ident *d)
{
    if (ef__idents_add(o->replay, d) != EF_OK)
        o->failed = 1;
}

void ef__state_replay(ef__state_out *o, const ef_sample *s)
{
    ef__ident d = ef__ident_of(s);
    ef__state_replay_ident(o, &d);
    ef__ident_clear(&d);
}

void ef__state_out_free(ef__state_out *o)
{
    ef__free(o->buf);
    memset(o, 0, sizeof *o);
}

/* ---- reading ----------------------------------------------------- */

static int fail(ef__state_in *in, const char *what, const char *expected)
{
    if (in->failed)
        return EF_EFORMAT;
    in->failed = 1;
    return ef__err_set(in->err, EF_EFORMAT,
                       "state: %s%s%s at byte %zu: %s", in->where ? in->where : "",
                       in->where ? ": " : "", what, in->base + in->at,
                       expected);
}

int ef__state_bad(ef__state_in *in, const char *fmt, ...)
{
    if (in->failed)
        return EF_EFORMAT;
    char msg[EF__ERR_MAX / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    in->failed = 1;
    return ef__err_set(in->err, EF_EFORMAT, "state: %s%s%s (byte %zu)",
                       in->where ? in->where : "", in->where ? ": " : "", msg,
                       in->base + in->at);
}

int ef__get_u64(ef__state_in *in, const char *what, uint64_t *v)
{
    *v = 0;
    if (in->failed)
        return EF_EFORMAT;
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (in->at >= in->len)
            return fail(in, what, "the state ends inside a number");
        unsigned char b = in->p[in->at++];
        if (shift == 63 && b > 1)
            return fail(in, what, "a number of more than 64 bits");
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return EF_OK;
        }
    }
    return fail(in, what, "a number of more than 10 bytes");
}

int ef__get_i64(ef__state_in *in, const char *what, int64_t *v)
{
    uint64_t u;
    int rc = ef__get_u64(in, what, &u);
    *v = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
    return rc;
}

int ef__get_count(ef__state_in *in, const char *what, uint64_t max,
                  uint64_t *v)
{
    int rc = ef__get_u64(in, what, v);
    if (rc == EF_OK && *v > max) {
        char expected[96];
        snprintf(expected, sizeof expected, "%llu, expected at most %llu",
                 (unsigned long long)*v, (unsigned long long)max);
        *v = 0;
        return fail(in, what, expected);
    }
    return rc;
}

int ef__get_bytes(ef__state_in *in, const char *what, const void **data,
                  size_t *n)
{
    uint64_t len;
    *data = NULL;
    *n = 0;
    int rc = ef__get_u64(in, what, &len);
    if (rc != EF_OK)
        return rc;
    if (len > in->len - in->at)
        return fail(in, what, "a length past the end of the state");
    *data = in->p + in->at;
    *n = (size_t)len;
    in->at += (size_t)len;
    return EF_OK;
}

int ef__get_str(ef__state_in *in, const char *what, char *buf, size_t cap)
{
    const void *data;
    size_t n;
    int rc = ef__get_bytes(in, what, &data, &n);
    if (rc != EF_OK) {
        buf[0] = '\0';
        return rc;
    }
    if (memchr(data, '\0', n))
        return fail(in, what, "a text with a NUL byte");
    size_t keep = n < cap - 1 ? n : cap - 1;
    memcpy(buf, data, keep);
    buf[keep] = '\0';
    return EF_OK;
}

/* The smallest identity is 8 bytes (one per number, one for the count
 * of members): no list may claim more than the bytes left allow. */
#define IDENT_MIN_BYTES 8

int ef__get_ident(ef__state_in *in, const char *what, ef__ident *d)
{
    memset(d, 0, sizeof *d);
    int64_t copy, fresh, len;
    ef__get_i64(in, what, &d->id.index);
    ef__get_i64(in, what, &d->id.epoch);
    ef__get_i64(in, what, &copy);
    ef__get_i64(in, what, &fresh);
    ef__get_i64(in, what, &d->part);
    ef__get_i64(in, what, &d->offset);
    int rc = ef__get_i64(in, what, &len);
    if (rc != EF_OK)
        return rc;
    /* every number counts from 0: a batch made again by fetch takes its
     * index from here, unchecked by any source */
    if (d->id.index < 0 || copy < 0 || copy > INT32_MAX || fresh < 0 ||
        fresh > INT32_MAX || d->id.epoch < 0 ||
        d->id.epoch > EF__STATE_MAX_EPOCH || d->part < 0 || len < 0 ||
        d->offset < 0 || len > INT64_MAX - d->offset)
        return fail(in, what,
                    "an identity with a negative or out-of-range number");
    d->id.echo_copy = (int32_t)copy;
    d->id.fresh = (int32_t)fresh;
    d->end = d->offset + len;
    uint64_t n;
    rc = ef__get_count(in, what, (in->len - in->at) / IDENT_MIN_BYTES, &n);
    if (rc != EF_OK || n == 0)
        return rc;
    ef_buffer *b = ef_buffer_new((size_t)n * sizeof(ef__ident));
    if (!b)
        return ef__err_set(in->err, EF_ENOMEM, "state: out of memory");
    ef__ident *m = ef_buffer_data(b);
    memset(m, 0, (size_t)n * sizeof *m);
    d->members = b;
    for (uint64_t i = 0; i < n && rc == EF_OK; i++) {
        rc = ef__get_ident(in, what, &m[i]);
        if (rc == EF_OK && m[i].members) {
            ef__ident_clear(&m[i]);
            rc = fail(in, what, "a batch whose members are batches");
        }
    }
    if (rc != EF_OK)
        ef__ident_clear(d);
    return rc;
}

int ef__get_idents(ef__state_in *in, const char *what, ef__idents *l)
{
    uint64_t n;
    int rc =
        ef__get_count(in, what, (in->len - in->at) / IDENT_MIN_BYTES, &n);
    for (uint64_t i = 0; i < n && rc == EF_OK; i++) {
        ef__ident d;
        if ((rc = ef__get_ident(in, what, &d)) != EF_OK)
            break;
        rc = ef__idents_add(l, &d);
        ef__ident_clear(&d);
        if (rc != EF_OK)
            rc = ef__err_set(in->err, EF_ENOMEM, "state: out of memory");
    }
    return rc;
}

int ef__state_in_done(ef__state_in *in)
{
    if (in->failed)
        return EF_EFORMAT;
    if (in->at == in->len)
        return EF_OK;
    char left[64];
    snprintf(left, sizeof left, "%zu bytes left over, expected none",
             in->len - in->at);
    return fail(in, "the end of the record", left);
}

/* ---- sources that address records by index ---------------------- */

int ef__index_check(const ef__stage *s, const ef__shard *shard,
                    int64_t index, int64_t count, ef__err *err)
{
    if (index >= 0 && index < count && index % shard->n == shard->i)
        return EF_OK;
    return ef__err_set(err, EF_EFORMAT,
                       "%s: the state names record %lld, which part %lld "
                       "of %lld of %lld records does not hold",
                       s->def->info.name, (long long)index,
                       (long long)shard->i, (long long)shard->n,
                       (long long)count);
}

int ef__cursor_restore(ef__state_in *in, const ef__shard *shard,
                       int64_t count, int64_t *next)
{
    int64_t v;
    int rc = ef__get_i64(in, "the next record", &v);
    if (rc != EF_OK)
        return rc;
    /* past the end is the end: a cursor steps by shard->n */
    if (v < shard->i || (v < count && v % shard->n != shard->i) ||
        v > count + shard->n)
        return ef__state_bad(in,
                             "next record %lld, expected one of part %lld "
                             "of %lld, up to %lld records",
                             (long long)v, (long long)shard->i,
                             (long long)shard->n, (long long)count);
    *next = v;
    return EF_OK;
}

/* ---- the envelope ------------------------------------------------ */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

void ef__state_seal(unsigned char *out, const unsigned char *payload, size_t n)
{
    memcpy(out, EF__STATE_MAGIC, 4);
    put32(out + 4, EF__STATE_VERSION);
    put32(out + 8, (uint32_t)n);
    put32(out + 12, (uint32_t)((uint64_t)n >> 32));
    put32(out + 16, ef__crc32c(0, payload, n));
}

int ef__state_open(const void *state, size_t size,
                   const unsigned char **payload, size_t *n, ef__err *err)
{
    const unsigned char *p = state;
    if (size < EF__STATE_HEADER)
        return ef__err_set(err, EF_EFORMAT,
                           "state: %zu bytes, expected at least the %d of "
                           "its header",
                           size, EF__STATE_HEADER);
    if (memcmp(p, EF__STATE_MAGIC, 4) != 0)
        return ef__err_set(err, EF_EFORMAT,
                           "state: not an echoflow pipeline state (bytes "
                           "0-3 are not \"EFST\")");
    uint32_t version = get32(p + 4);
    if (version != EF__STATE_VERSION)
        return ef__err_set(err, EF_EFORMAT,
                           "state: format version %u, this echoflow reads "
                           "version %d",
                           version, EF__STATE_VERSION);
    uint64_t len = get32(p + 8) | (uint64_t)get32(p + 12) << 32;
    if (len != size - EF__STATE_HEADER)
        return ef__err_set(err, EF_EFORMAT,
                           "state: truncated or padded: the header says %llu "
                           "bytes of payload, %zu follow it",
                           (unsigned long long)len, size - EF__STATE_HEADER);
    uint32_t want = get32(p + 16);
    uint32_t got = ef__crc32c(0, p + EF__STATE_HEADER, (size_t)len);
    if (want != got)
        return ef__err_set(err, EF_EFORMAT,
                           "state: checksum mismatch (CRC-32C 0x%08x, the "
                           "header says 0x%08x): the state is corrupt",
                           got, want);
    *payload = p + EF__STATE_HEADER;
    *n = (size_t)len;
    return EF_OK;
}
