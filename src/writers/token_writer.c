/* SPDX-License-Identifier: Apache-2.0 */
/* Writing token files (see ef_token_writer in the public header): raw
 * little-endian uint16 or uint32 ids, no header, what nanoGPT's
 * prepare.py writes with numpy and the tokens source reads. Used by
 * `echoflow tokens` and Python's echoflow.write_tokens. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/atomic_file.h"
#include "core/alloc.h"
#include "core/err.h"
#include "core/sample.h"

/* Tokens converted at a time into the chunk written. */
#define CHUNK 8192

struct ef_token_writer {
    ef__atomic_file file; /* .f open on .tmp until finish(), or NULL */
    size_t dsize;
    int64_t max_id;
    int64_t tokens, documents;
    int failed; /* a write failed: the file is unusable */
    unsigned char chunk[CHUNK * 4];
    ef__err err;
};

/* The file's failure as the writer's error. */
static int atomic_failure(ef_token_writer *w)
{
    char msg[sizeof w->err.msg];
    ef__atomic_describe(&w->file, msg, sizeof msg);
    return ef__err_set(&w->err, EF_EIO, "%s", msg);
}

ef_status ef_token_writer_create(ef_token_writer **out, const char *path,
                                 const char *dtype)
{
    if (!out)
        return EF_EINVAL;
    *out = NULL;
    if (!path || !path[0] || !dtype)
        return EF_EINVAL;
    ef_token_writer *w = ef__calloc(1, sizeof *w);
    if (!w)
        return EF_ENOMEM;
    *out = w;
    if (!strcmp(dtype, "uint16") || !strcmp(dtype, "uint32")) {
        w->dsize = dtype[4] == '1' ? 2 : 4;
    } else {
        w->failed = 1;
        return ef__err_set(&w->err, EF_ESPEC,
                           "token file %s: dtype '%s', expected uint16 or "
                           "uint32",
                           path, dtype);
    }
    w->max_id = w->dsize == 2 ? 65535 : INT32_MAX;
    if (ef__atomic_open(&w->file, path, NULL) != 0) {
        w->failed = 1;
        if (w->file.failed == EF__ATOMIC_NOMEM)
            return ef__err_set(&w->err, EF_ENOMEM,
                               "token file %s: out of memory", path);
        return atomic_failure(w);
    }
    return EF_OK;
}

static const char *dtype_name(const ef_token_writer *w)
{
    return w->dsize == 2 ? "uint16" : "uint32";
}

/* The sticky failure of a write, or EF_ESTATE after finish(). */
static int usable(ef_token_writer *w)
{
    if (w->failed)
        return w->err.status < 0 ? w->err.status : EF_EIO;
    if (!w->file.f)
        return ef__err_set(&w->err, EF_ESTATE,
                           "token file %s: already finished", w->file.path);
    return EF_OK;
}

/* Converts and writes the n ids of src, of `dtype` (all checked). */
static int put(ef_token_writer *w, const void *src, int dtype, size_t n)
{
    for (size_t at = 0; at < n;) {
        size_t k = n - at < CHUNK ? n - at : CHUNK;
        unsigned char *p = w->chunk;
        for (size_t i = 0; i < k; i++, p += w->dsize) {
            uint32_t v = dtype == EF_I32
                             ? (uint32_t)((const int32_t *)src)[at + i]
                         : dtype == EF_I64
                             ? (uint32_t)((const int64_t *)src)[at + i]
                             : (uint32_t)((const unsigned char *)src)[at + i];
            p[0] = (unsigned char)v;
            p[1] = (unsigned char)(v >> 8);
            if (w->dsize == 4) {
                p[2] = (unsigned char)(v >> 16);
                p[3] = (unsigned char)(v >> 24);
            }
        }
        if (fwrite(w->chunk, w->dsize, k, w->file.f) != k) {
            w->failed = 1;
            return ef__err_set(&w->err, EF_EIO, "%s: cannot write: %s",
                               w->file.tmp, strerror(errno));
        }
        at += k;
    }
    w->tokens += (int64_t)n;
    return EF_OK;
}

/* The first id of src[0..n) out of [0, max_id], as its position, or -1. */
static int64_t first_bad(const ef_token_writer *w, const void *src, int dtype,
                         size_t n, int64_t *value)
{
    for (size_t i = 0; i < n; i++) {
        int64_t v = dtype == EF_I32   ? ((const int32_t *)src)[i]
                    : dtype == EF_I64 ? ((const int64_t *)src)[i]
                                      : ((const unsigned char *)src)[i];
        if (v < 0 || v > w->max_id) {
            *value = v;
            return (int64_t)i;
        }
    }
    return -1;
}

ef_status ef_token_writer_add_ids(ef_token_writer *w, const int32_t *ids,
                                  size_t n)
{
    if (!w || (!ids && n))
        return EF_EINVAL;
    int rc = usable(w);
    if (rc != EF_OK)
        return rc;
    int64_t v, at = first_bad(w, ids, EF_I32, n, &v);
    if (at >= 0)
        return ef__err_set(&w->err, EF_EINVAL,
                           "token file %s: id %" PRId64 " (position %" PRId64
                           " of %zu) does not fit %s (0 to %" PRId64 ")",
                           w->file.path, v, at, n, dtype_name(w), w->max_id);
    return put(w, ids, EF_I32, n);
}

/* EF_ESHAPE unless field `field` of s is integer ids [n]. */
static int check_field(ef_token_writer *w, const ef_sample *s,
                       const char *field, const ef__field *x)
{
    if (x && x->ndim == 1 &&
        (x->dtype == EF_U8 || x->dtype == EF_I32 || x->dtype == EF_I64))
        return EF_OK;
    if (!x)
        return ef__err_set(&w->err, EF_ESHAPE,
                           "token file %s: sample %" PRId64 " (epoch %" PRId64
                           ") has no field '%s', expected token ids [n] there",
                           w->file.path, s->id.index, s->id.epoch, field);
    char shape[96];
    ef__shape_format(shape, sizeof shape, x->ndim, x->shape);
    return ef__err_set(&w->err, EF_ESHAPE,
                       "token file %s: field '%s' of sample %" PRId64
                       " (epoch %" PRId64 ") is %s %s, expected integer "
                       "token ids [n] (i32, i64 or u8)",
                       w->file.path, field, s->id.index, s->id.epoch,
                       ef_dtype_name(x->dtype), shape);
}

ef_status ef_token_writer_add(ef_token_writer *w, const ef_sample *s,
                              const char *field, int64_t eos)
{
    if (!w || !s || !field)
        return EF_EINVAL;
    int rc = usable(w);
    if (rc != EF_OK)
        return rc;
    int i = ef__sample_find(s, field);
    const ef__field *x = i >= 0 ? &s->fields[i] : NULL;
    rc = check_field(w, s, field, x);
    if (rc != EF_OK)
        return rc;
    const void *ids = (const unsigned char *)ef_buffer_data(x->buf) + x->offset;
    size_t n = (size_t)x->shape[0];
    int64_t v, at = first_bad(w, ids, x->dtype, n, &v);
    if (at >= 0)
        return ef__err_set(&w->err, EF_EINVAL,
                           "token file %s: sample %" PRId64 " (epoch %" PRId64
                           "): field '%s' holds id %" PRId64
                           " at position %" PRId64
                           ", which does not fit %s (0 to %" PRId64 ")",
                           w->file.path, s->id.index, s->id.epoch, field, v, at,
                           dtype_name(w), w->max_id);
    if (eos > w->max_id)
        return ef__err_set(&w->err, EF_EINVAL,
                           "token file %s: eos %" PRId64 " does not fit %s (0 "
                           "to %" PRId64 ")",
                           w->file.path, eos, dtype_name(w), w->max_id);
    rc = put(w, ids, x->dtype, n);
    if (rc == EF_OK && eos >= 0) {
        int32_t e = (int32_t)eos;
        rc = put(w, &e, EF_I32, 1);
    }
    w->documents += rc == EF_OK;
    return rc;
}

ef_status ef_token_writer_finish(ef_token_writer *w)
{
    if (!w)
        return EF_EINVAL;
    int rc = usable(w);
    if (rc != EF_OK)
        return rc;
    if (ef__atomic_commit(&w->file) != 0) {
        w->failed = 1;
        return atomic_failure(w);
    }
    return EF_OK;
}

int64_t ef_token_writer_tokens(const ef_token_writer *w)
{
    return w ? w->tokens : 0;
}

int64_t ef_token_writer_documents(const ef_token_writer *w)
{
    return w ? w->documents : 0;
}

const char *ef_token_writer_error(const ef_token_writer *w)
{
    return w ? w->err.msg : "";
}

void ef_token_writer_destroy(ef_token_writer *w)
{
    if (!w)
        return;
    ef__atomic_abort(&w->file);
    ef__free(w);
}
