/* SPDX-License-Identifier: Apache-2.0 */
/* Writing samples as WebDataset tar shards (see ef_shard_writer in the
 * public header): the inverse of the tar source plus decode (and of
 * json_boxes for a sample with boxes, whose fields go into one KEY.json,
 * codec/json_boxes.h), used by `echoflow pack` to serve a data set over
 * HTTP. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "codec/image.h"
#include "codec/json_boxes.h"
#include "codec/tar_write.h"
#include "common/atomic_file.h"
#include "core/alloc.h"
#include "core/sample.h"

struct ef_shard_writer {
    char *prefix, *suffix; /* the pattern around its conversion */
    int width, zero_pad;   /* of the shard number */
    int64_t per_shard;
    ef__atomic_file shard; /* the shard being written: .f NULL when none */
    int64_t shards, samples, in_shard;
    ef__err err;
};

/* Splits "a/b-%06d.tar" into prefix, number format and suffix; exactly one
 * conversion, %d (or %i, %u) with an optional 0 flag and width; %% is a
 * literal percent. */
static int parse_pattern(ef_shard_writer *w, const char *pattern)
{
    const char *conv = NULL, *conv_end = NULL;
    for (const char *p = pattern; *p; p++) {
        if (*p != '%')
            continue;
        if (p[1] == '%') {
            p++;
            continue;
        }
        const char *q = p + 1;
        int zero = *q == '0';
        q += zero;
        int width = 0;
        while (isdigit((unsigned char)*q) && width < 100)
            width = width * 10 + (*q++ - '0');
        if (conv || (*q != 'd' && *q != 'i' && *q != 'u') || width > 20)
            return ef__err_set(&w->err, EF_ESPEC,
                               "shard pattern '%s': expected exactly one "
                               "%%d-style conversion for the shard number, "
                               "such as 'train-%%06d.tar'",
                               pattern);
        conv = p;
        conv_end = q + 1;
        w->zero_pad = zero;
        w->width = width;
    }
    if (!conv)
        return ef__err_set(&w->err, EF_ESPEC,
                           "shard pattern '%s' has no %%d for the shard "
                           "number (e.g. 'train-%%06d.tar')",
                           pattern);
    size_t pre = (size_t)(conv - pattern);
    w->prefix = ef__malloc(pre + 1);
    w->suffix = ef__strdup(conv_end);
    if (!w->prefix || !w->suffix)
        return ef__err_set(&w->err, EF_ENOMEM, "out of memory");
    /* "%%" in the fixed parts stands for one '%' */
    char *d = w->prefix;
    for (size_t i = 0; i < pre; i++) {
        *d++ = pattern[i];
        i += pattern[i] == '%';
    }
    *d = '\0';
    d = w->suffix;
    for (const char *p = conv_end; *p; p++) {
        *d++ = *p;
        p += *p == '%';
    }
    *d = '\0';
    return EF_OK;
}

void ef_shard_writer_name(const ef_shard_writer *w, int64_t shard, char *buf,
                          size_t cap)
{
    char num[32];
    snprintf(num, sizeof num, w->zero_pad ? "%0*" PRId64 : "%*" PRId64,
             w->width, shard);
    snprintf(buf, cap, "%s%s%s", w->prefix ? w->prefix : "", num,
             w->suffix ? w->suffix : "");
}

ef_status ef_shard_writer_create(ef_shard_writer **out, const char *pattern,
                           int64_t per_shard)
{
    if (!out)
        return EF_EINVAL;
    *out = NULL;
    if (!pattern || per_shard < 1)
        return EF_EINVAL;
    ef_shard_writer *w = ef__calloc(1, sizeof *w);
    if (!w)
        return EF_ENOMEM;
    *out = w;
    w->per_shard = per_shard;
    return parse_pattern(w, pattern);
}

static char *shard_name(const ef_shard_writer *w, int64_t shard)
{
    size_t cap = strlen(w->prefix) + strlen(w->suffix) + 32;
    char *name = ef__malloc(cap);
    if (name)
        ef_shard_writer_name(w, shard, name, cap);
    return name;
}

/* The shard file's failure as the writer's error. */
static int atomic_failure(ef_shard_writer *w)
{
    char msg[sizeof w->err.msg];
    ef__atomic_describe(&w->shard, msg, sizeof msg);
    return ef__err_set(&w->err,
                       w->shard.failed == EF__ATOMIC_NOMEM ? EF_ENOMEM : EF_EIO,
                       "%s", msg);
}

/* Ends the open shard: the end blocks, then the rename to its name. */
static int close_shard(ef_shard_writer *w)
{
    ef__atomic_file *a = &w->shard;
    if (!a->f)
        return EF_OK;
    int rc = ef__tar_write_end(a->f, &w->err);
    if (rc != EF_OK)
        ef__err_prefix(&w->err, a->tmp);
    if (rc == EF_OK && ef__atomic_commit(a) != 0)
        rc = atomic_failure(w);
    ef__atomic_abort(a);
    return rc;
}

static int open_shard(ef_shard_writer *w)
{
    ef__atomic_file *a = &w->shard;
    char *final = shard_name(w, w->shards);
    if (!final)
        return ef__err_set(&w->err, EF_ENOMEM, "out of memory");
    int rc = ef__atomic_open(a, final, ".partial");
    ef__free(final);
    if (rc != 0) {
        rc = atomic_failure(w);
        ef__atomic_abort(a);
        return rc;
    }
    w->shards++;
    w->in_shard = 0;
    return EF_OK;
}

/* What is wrong with `key` as a member name, or NULL when it is fine.
 * The key goes into the shard as the path of its members, and whoever
 * unpacks the shard with tar writes it there: it must stay a relative
 * path below the folder it is unpacked in. */
static const char *key_problem(const char *key, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f)
            return "holds a control character (or a NUL)";
    if (key[0] == '/')
        return "is an absolute path";
    for (const char *c = key;;) {
        const char *end = strchr(c, '/');
        size_t n = end ? (size_t)(end - c) : strlen(c);
        if (n == 0)
            return "has an empty path component";
        if (c[0] == '.' && (n == 1 || (n == 2 && c[1] == '.')))
            return "has a '.' or '..' path component";
        if (!end) /* a reader ends the key at the first dot of the last
                   * component */
            return memchr(c, '.', n) ? "has a '.' in its last path component"
                                     : NULL;
        c = end + 1;
    }
}

/* `key` for a message: control characters as \xNN, cut to fit. */
static void quote_key(char *out, size_t cap, const char *key, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f)
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}

/* The sample's key: its __key__ text, or its index. */
static int sample_key(ef_shard_writer *w, const ef_sample *s, char *key,
                      size_t cap)
{
    int k = ef__sample_find(s, "__key__");
    if (k < 0) {
        snprintf(key, cap, "%09" PRId64, s->id.index);
        return EF_OK;
    }
    const ef__field *f = &s->fields[k];
    if (f->dtype != EF_U8 || f->ndim != 1 || f->nbytes == 0 || f->nbytes >= cap)
        return ef__err_set(&w->err, EF_ESHAPE,
                           "sample %" PRId64 ": field '__key__' must be text "
                           "of 1 to %zu bytes",
                           s->id.index, cap - 1);
    memcpy(key, (const char *)ef_buffer_data(f->buf) + f->offset, f->nbytes);
    key[f->nbytes] = '\0';
    const char *why = key_problem(key, f->nbytes);
    if (!why)
        return EF_OK;
    char shown[256];
    quote_key(shown, sizeof shown, key, f->nbytes);
    return ef__err_set(&w->err, EF_ESHAPE,
                       "sample %" PRId64 ": key '%s' %s; a key must be a "
                       "relative path such as 'dir/name': components of "
                       "printable characters separated by single '/', none "
                       "of them '.' or '..', and no '.' in the last one "
                       "(it would split the key when read back)",
                       s->id.index, shown, why);
}

static int is_image(const ef__field *f)
{
    int64_t c = f->ndim == 3 ? f->shape[2] : 1;
    return f->dtype == EF_U8 && (f->ndim == 2 || f->ndim == 3) &&
           (c == 1 || c == 3);
}

/* Writes one member into the open shard. The tar writer has only the
 * FILE, so the shard's name is added here, and only here. */
static int put_member(ef_shard_writer *w, const char *name, const void *data,
                      size_t size)
{
    int rc = ef__tar_write_member(w->shard.f, name, data, size, &w->err);
    if (rc != EF_OK)
        ef__err_prefix(&w->err, w->shard.tmp);
    return rc;
}

/* *v the value of a scalar of integer dtype (bool is 0 or 1); 0 for a
 * float dtype, which has no exact decimal text here. */
static int integer_scalar(ef_dtype dt, const unsigned char *data, int64_t *v)
{
    int8_t b;
    int16_t i16;
    uint16_t u16;
    int32_t i32;
    switch (dt) {
    case EF_U8:
    case EF_BOOL:
        *v = data[0];
        return 1;
    case EF_I8:
        memcpy(&b, data, 1);
        *v = b;
        return 1;
    case EF_I16:
        memcpy(&i16, data, 2);
        *v = i16;
        return 1;
    case EF_U16:
        memcpy(&u16, data, 2);
        *v = u16;
        return 1;
    case EF_I32:
        memcpy(&i32, data, 4);
        *v = i32;
        return 1;
    case EF_I64:
        memcpy(v, data, 8);
        return 1;
    default:
        return 0;
    }
}

/* One field as one member. */
static int write_field(ef_shard_writer *w, const ef_sample *s,
                       const ef__field *f, const char *key)
{
    const unsigned char *data =
        (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    char name[1024], text[32];
    if ((!strcmp(f->name, "image") || !strcmp(f->name, "png")) && is_image(f)) {
        ef_buffer *png;
        int rc =
            ef__png_encode(data, f->shape[0], f->shape[1],
                           f->ndim == 3 ? (int)f->shape[2] : 1, &png, &w->err);
        if (rc != EF_OK) {
            char where[64 + EF_MAX_NAME];
            snprintf(where, sizeof where, "sample %" PRId64 ": field '%s'",
                     s->id.index, f->name);
            return ef__err_prefix(&w->err, where);
        }
        snprintf(name, sizeof name, "%s.png", key);
        rc = put_member(w, name, ef_buffer_data(png), ef_buffer_size(png));
        ef_buffer_release(png);
        return rc;
    }
    int64_t v;
    if (f->ndim == 0 && integer_scalar(f->dtype, data, &v)) {
        /* integers as decimal text; a label under WebDataset's "cls" */
        const char *ext = strcmp(f->name, "label") ? f->name : "cls";
        int n = snprintf(text, sizeof text, "%" PRId64, v);
        snprintf(name, sizeof name, "%s.%s", key, ext);
        return put_member(w, name, text, (size_t)n);
    }
    if (f->dtype == EF_U8 && f->ndim == 1) {
        snprintf(name, sizeof name, "%s.%s", key, f->name);
        return put_member(w, name, data, f->nbytes);
    }
    char shape[64];
    ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
    return ef__err_set(&w->err, EF_ESHAPE,
                       "sample %" PRId64 ": field '%s' (%s %s) has no "
                       "WebDataset form: expected a u8 image [H,W] or "
                       "[H,W,1|3] named image, a scalar of an integer "
                       "dtype or bool, or u8 bytes [N] (or, beside boxes "
                       "f32 [n,4], an i64 or f32 scalar or [n])",
                       s->id.index, f->name, ef_dtype_name(f->dtype), shape);
}

/* A sample with boxes (codec/json_boxes.h): its boxes and the fields
 * that go with them as one member KEY.json. */
static int write_boxes_json(ef_shard_writer *w, const ef_sample *s,
                            const char *key)
{
    if (ef__sample_find(s, "json") >= 0)
        return ef__err_set(&w->err, EF_ESHAPE,
                           "sample %" PRId64 ": a field 'json' and boxes: the "
                           "boxes' annotations are written as KEY.json (drop "
                           "or rename the field)",
                           s->id.index);
    char *text;
    size_t len;
    int rc = ef__json_boxes_write(s, &text, &len, &w->err);
    if (rc != EF_OK) {
        char where[64];
        snprintf(where, sizeof where, "sample %" PRId64, s->id.index);
        return ef__err_prefix(&w->err, where);
    }
    char name[1024];
    snprintf(name, sizeof name, "%s.json", key);
    rc = put_member(w, name, text, len);
    ef__free(text);
    return rc;
}

/* Whether field i of s is written as a member of its own: not a name
 * kept out of shards, nor held by the sample's KEY.json (boxes: the rows
 * of field `boxes`, else -1). */
static int own_member(const ef_sample *s, int i, int boxes)
{
    const ef__field *f = &s->fields[i];
    if (!strcmp(f->name, "__key__") || !strcmp(f->name, "__url__"))
        return 0;
    return boxes < 0 || !ef__json_boxes_holds(f, s->fields[boxes].shape[0]);
}

ef_status ef_shard_writer_add(ef_shard_writer *w, const ef_sample *s)
{
    if (!w || !s)
        return EF_EINVAL;
    if (w->err.status < 0)
        return w->err.status;
    int rc = EF_OK;
    if (w->shard.f && w->in_shard == w->per_shard)
        rc = close_shard(w);
    if (rc == EF_OK && !w->shard.f)
        rc = open_shard(w);
    char key[256];
    if (rc == EF_OK)
        rc = sample_key(w, s, key, sizeof key);
    int boxes = ef__json_boxes_find(s);
    for (int i = 0; i < s->nfields && rc == EF_OK; i++)
        if (own_member(s, i, boxes))
            rc = write_field(w, s, &s->fields[i], key);
    if (rc == EF_OK && boxes >= 0)
        rc = write_boxes_json(w, s, key);
    /* each message names its shard file where it arises (open_shard,
     * close_shard, put_member): adding it here again would repeat it */
    if (rc == EF_OK) {
        w->in_shard++;
        w->samples++;
    }
    return rc;
}

ef_status ef_shard_writer_finish(ef_shard_writer *w)
{
    if (!w)
        return EF_EINVAL;
    if (w->err.status < 0)
        return w->err.status;
    return close_shard(w);
}

int64_t ef_shard_writer_shards(const ef_shard_writer *w)
{
    return w ? w->shards : 0;
}

int64_t ef_shard_writer_samples(const ef_shard_writer *w)
{
    return w ? w->samples : 0;
}

const char *ef_shard_writer_error(const ef_shard_writer *w)
{
    return w ? w->err.msg : "";
}

void ef_shard_writer_destroy(ef_shard_writer *w)
{
    if (!w)
        return;
    ef__atomic_abort(&w->shard);
    ef__free(w->prefix);
    ef__free(w->suffix);
    ef__free(w);
}
