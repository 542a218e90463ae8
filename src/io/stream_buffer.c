/* SPDX-License-Identifier: Apache-2.0 */
/* Untrusted-length reads into buffers (see stream_buffer.h). */
#include "io/stream_buffer.h"

#include "core/alloc.h"
#include "core/buffer.h"

/* Pieces up to this size get their buffer at once: the waste on a false
 * length is bounded, and a small piece costs one allocation. */
#define DIRECT_MAX ((uint64_t)1 << 20)

static void free_data(void *data)
{
    ef__free(data);
}

static int truncated(ef__stream *s, uint64_t start, uint64_t n, uint64_t got,
                     const char *what, ef__err *err)
{
    return ef__err_set(err, EF_EFORMAT,
                       "%s: truncated %s at offset %llu: expected %llu bytes, "
                       "the data ends after %llu",
                       ef__stream_name(s), what, (unsigned long long)start,
                       (unsigned long long)n, (unsigned long long)got);
}

static int out_of_memory(ef__stream *s, uint64_t n, const char *what,
                         ef__err *err)
{
    return ef__err_set(err, EF_ENOMEM, "%s: out of memory for %s of %llu bytes",
                       ef__stream_name(s), what, (unsigned long long)n);
}

static int read_direct(ef__stream *s, uint64_t n, const char *what,
                       ef_buffer **out, ef__err *err)
{
    uint64_t start = ef__stream_offset(s);
    ef_buffer *b = ef_buffer_new((size_t)n);
    if (!b)
        return out_of_memory(s, n, what, err);
    size_t got = 0;
    int rc =
        n ? ef__stream_read(s, ef_buffer_data(b), (size_t)n, &got, err) : EF_OK;
    if (rc == EF_OK && got < n)
        rc = truncated(s, start, n, got, what, err);
    if (rc != EF_OK) {
        ef_buffer_release(b);
        return rc;
    }
    *out = b;
    return EF_OK;
}

int ef__stream_read_buffer_whole(ef__stream *s, uint64_t n, const char *what,
                                 ef_buffer **out, ef__err *err)
{
    *out = NULL;
    if (n > SIZE_MAX / 2)
        return out_of_memory(s, n, what, err);
    return read_direct(s, n, what, out, err);
}

int ef__stream_read_buffer(ef__stream *s, uint64_t n, const char *what,
                           ef_buffer **out, ef__err *err)
{
    *out = NULL;
    if (n > SIZE_MAX / 2)
        return out_of_memory(s, n, what, err);
    if (n <= DIRECT_MAX)
        return read_direct(s, n, what, out, err);
    uint64_t start = ef__stream_offset(s);
    unsigned char *data = NULL;
    size_t cap = 0, have = 0;
    int rc = EF_OK;
    while (have < n) {
        if (have == cap) {
            size_t want = cap ? 2 * cap : (size_t)DIRECT_MAX;
            if (want > n)
                want = (size_t)n;
            unsigned char *d = ef__realloc(data, want);
            if (!d) {
                rc = out_of_memory(s, n, what, err);
                break;
            }
            data = d;
            cap = want;
        }
        size_t got = 0;
        rc = ef__stream_read(s, data + have, cap - have, &got, err);
        if (rc != EF_OK)
            break;
        have += got;
        if (have < cap) { /* a short read is the end of the data */
            rc = truncated(s, start, n, have, what, err);
            break;
        }
    }
    if (rc == EF_OK) {
        *out = ef__buffer_adopt(data, (size_t)n, free_data, data);
        if (!*out)
            rc = out_of_memory(s, n, what, err);
    }
    if (rc != EF_OK)
        ef__free(data);
    return rc;
}
