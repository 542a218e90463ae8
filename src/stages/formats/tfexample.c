/* SPDX-License-Identifier: Apache-2.0 */
/* tfexample: parses the tf.train.Example in each sample's record field (a
 * u8 [N], as `tfrecord` gives it) into fields named after its features:
 *
 *     tfrecord:files=train-{0..9}.tfrecord
 *       | tfexample:features="image/encoded,image/class/label:int64,
 *                             image/object/bbox/xmin:float:var"
 *
 * `features` lists entries, separated by commas:
 *
 *     NAME[:KIND[:LEN]][=DEFAULT][ as OUT]
 *
 * KIND is bytes, int64 or float, checked against the record (omitted: the
 * record's kind, one value). LEN is omitted for one value (bytes: u8 [n],
 * the string; a number: a scalar, shape [], as TF's FixedLenFeature([])),
 * a count N for exactly N numbers (shape [N]), or var for however many the
 * record holds (shape [n]; a missing feature is empty), a variable-length
 * field that `batch` makes a list, as the TF Object Detection API's
 * per-object lists (image/object/bbox/xmin ...) want. A feature of one
 * value or N may have a DEFAULT used when it is missing: the text for
 * bytes, one number or N numbers separated by spaces. OUT renames the
 * field (default: NAME, '/' and all).
 *
 * Strings stay in the record's buffer (zero copy); int64 become i64 and
 * float f32. The record field is dropped, other fields kept. A bytes list
 * of more than one string is refused: one tensor of u8 holds one string.
 *
 * It is a map stage (threads, checkpoints by transforming the upstream's
 * fetched item again, see map.c). Errors name the sample (its file and
 * key), the record and its offset, and the feature; a malformed record, a
 * kind or count that does not match and a missing feature without a
 * default are EF_EFORMAT, skipped and counted under on_error=skip. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/tfexample.h"
#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/map.h"

enum { LEN_ONE = -2, LEN_VAR = -1 };

/* One entry of option `features`. Strings are the stage's own. */
typedef struct {
    char *name, *out;
    ef__tfx_kind kind; /* MISSING: whatever the record holds */
    int64_t len;       /* LEN_ONE, LEN_VAR or N */
    int has_default;
    char *text; /* bytes default */
    size_t ndef;
    int64_t *i64; /* number defaults: 1 or N of them */
    float *f32;
} entry;

typedef struct {
    char *field; /* the record's field */
    size_t n;
    entry *e;
} params;

/* ---- the option ---------------------------------------------------- */

static void free_params(params *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++) {
        ef__free(p->e[i].name);
        ef__free(p->e[i].out);
        ef__free(p->e[i].text);
        ef__free(p->e[i].i64);
        ef__free(p->e[i].f32);
    }
    ef__free(p->e);
    ef__free(p->field);
    ef__free(p);
}

/* Blanks around names: a quoted list may be spread over lines. */
static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* s in place without the blanks around it. */
static char *trim(char *s)
{
    while (blank(*s))
        s++;
    size_t n = strlen(s);
    while (n && blank(s[n - 1]))
        s[--n] = '\0';
    return s;
}

static char *dup_trimmed(const char *s, size_t n)
{
    while (n && blank(*s))
        s++, n--;
    while (n && blank(s[n - 1]))
        n--;
    char *d = ef__malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

#define BAD(...)                                                               \
    ef__err_set(err, EF_ESPEC, "tfexample: option 'features': " __VA_ARGS__)

/* The numbers of a default (space-separated) into e->i64 or e->f32. */
static int parse_numbers(entry *e, const char *text, ef__err *err)
{
    size_t want = e->len > 0 ? (size_t)e->len : 1, cap = want;
    if (e->kind == EF__TFX_INT64)
        e->i64 = ef__calloc(cap, sizeof *e->i64);
    else
        e->f32 = ef__calloc(cap, sizeof *e->f32);
    if (!e->i64 && !e->f32)
        return ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    const char *s = text;
    for (;;) {
        while (*s == ' ')
            s++;
        if (!*s)
            break;
        if (e->ndef == cap)
            return BAD("feature '%s': default '%s' has more than %zu "
                       "values",
                       e->name, text, cap);
        char *end;
        errno = 0;
        if (e->i64)
            e->i64[e->ndef] = strtoll(s, &end, 10);
        else
            e->f32[e->ndef] = strtof(s, &end);
        if (end == s || (*end && *end != ' ') || errno == ERANGE)
            return BAD("feature '%s': default '%s' is not %s %s", e->name, text,
                       e->i64 ? "an" : "a",
                       e->i64 ? "int64 (or a list of them)"
                              : "float (or a list of them)");
        e->ndef++;
        s = end;
    }
    if (e->ndef != 1 && e->ndef != want)
        return BAD("feature '%s': default '%s' has %zu values; expected 1 "
                   "(repeated) or %zu",
                   e->name, text, e->ndef, want);
    return EF_OK;
}

static int parse_kind(entry *e, const char *k, ef__err *err)
{
    static const ef__tfx_kind kinds[] = {EF__TFX_BYTES, EF__TFX_INT64,
                                         EF__TFX_FLOAT};
    for (size_t i = 0; i < 3; i++)
        if (!strcmp(k, ef__tfx_kind_name(kinds[i]))) {
            e->kind = kinds[i];
            return EF_OK;
        }
    return BAD("feature '%s': kind '%s'; expected bytes, int64 or float",
               e->name, k);
}

static int parse_len(entry *e, const char *t, ef__err *err)
{
    if (!strcmp(t, "var")) {
        e->len = LEN_VAR;
        return EF_OK;
    }
    char *end;
    errno = 0;
    long long n = strtoll(t, &end, 10);
    if (end == t || *end || errno || n < 1 || n > (1 << 24))
        return BAD("feature '%s': length '%s'; expected a count (1 to "
                   "16777216), var, or nothing for one value",
                   e->name, t);
    if (e->kind == EF__TFX_BYTES)
        return BAD("feature '%s': a bytes feature is one string (u8 [n]): "
                   "give no length, or var for zero or one",
                   e->name);
    e->len = n;
    return EF_OK;
}

/* One entry, text [s, s + n): NAME[:KIND[:LEN]][=DEFAULT][ as OUT]. */
static int parse_entry(entry *e, const char *s, size_t n, ef__err *err)
{
    char *t = dup_trimmed(s, n);
    if (!t)
        return ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    e->len = LEN_ONE;
    /* the rename, then the default, then the name's parts */
    char *as = NULL;
    for (char *q = strstr(t, " as "); q; q = strstr(q + 1, " as "))
        as = q;
    if (as) {
        *as = '\0';
        e->out = dup_trimmed(as + 4, strlen(as + 4));
    }
    char *def = strchr(t, '=');
    if (def)
        *def++ = '\0';
    char *kind = strchr(t, ':'), *len = NULL;
    if (kind) {
        *kind++ = '\0';
        len = strchr(kind, ':');
        if (len)
            *len++ = '\0';
    }
    e->name = dup_trimmed(t, strlen(t));
    if (!e->out && e->name)
        e->out = dup_trimmed(e->name, strlen(e->name));
    int rc = e->name && e->out
                 ? EF_OK
                 : ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    if (rc == EF_OK && (!e->name[0] || !e->out[0] || strchr(e->out, ' ')))
        rc = BAD("'%.*s': expected NAME[:KIND[:LEN]][=DEFAULT][ as OUT], "
                 "with a name and an output name (no spaces)",
                 (int)n, s);
    if (rc == EF_OK && kind)
        rc = parse_kind(e, trim(kind), err);
    if (rc == EF_OK && len)
        rc = parse_len(e, trim(len), err);
    if (rc == EF_OK && def && !kind)
        rc = BAD("feature '%s': a default needs a kind (%s:int64=0)", e->name,
                 e->name);
    if (rc == EF_OK && def && e->len == LEN_VAR)
        rc = BAD("feature '%s': a var feature has no default (it is empty "
                 "when missing)",
                 e->name);
    if (rc == EF_OK && def) {
        e->has_default = 1;
        if (e->kind == EF__TFX_BYTES)
            rc = (e->text = dup_trimmed(def, strlen(def)))
                     ? EF_OK
                     : ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
        else
            rc = parse_numbers(e, def, err);
    }
    ef__free(t);
    return rc;
}

/* Checks the output names: each once, none the record's, and each one a
 * sample can hold (asked of the sample itself, so that the check follows
 * the core's limits). */
static int check_outputs(const params *p, ef__err *err)
{
    for (size_t i = 0; i < p->n; i++) {
        if (!strcmp(p->e[i].out, p->field))
            return BAD("output '%s' is the record's field, which is dropped",
                       p->e[i].out);
        for (size_t j = 0; j < i; j++)
            if (!strcmp(p->e[i].out, p->e[j].out))
                return BAD("two features would become field '%s' (rename "
                           "one: NAME as OUT)",
                           p->e[i].out);
    }
    ef_sample *probe = ef_sample_new((ef_sample_id){0});
    if (!probe)
        return ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    int rc = EF_OK;
    for (size_t i = 0; i < p->n && rc == EF_OK; i++)
        if (ef_sample_add_new(probe, p->e[i].out, EF_U8, 0, NULL, NULL) !=
            EF_OK)
            rc = BAD("a sample cannot hold field '%s' (%zu features asked; "
                     "at most %d fields of up to %d bytes)",
                     p->e[i].out, p->n, EF_MAX_FIELDS, EF_MAX_NAME - 1);
    ef_sample_free(probe);
    return rc;
}

static int parse_features(params *p, const char *text, ef__err *err)
{
    size_t n = 1;
    for (const char *s = text; *s; s++)
        n += *s == ',';
    p->e = ef__calloc(n, sizeof *p->e);
    if (!p->e)
        return ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    for (const char *s = text;; s++) {
        size_t len = strcspn(s, ",");
        int rc = parse_entry(&p->e[p->n++], s, len, err);
        if (rc != EF_OK)
            return rc;
        s += len;
        if (!*s)
            break;
    }
    return check_outputs(p, err);
}

/* ---- one sample ---------------------------------------------------- */

/* A new field `name` of `nbytes` (0 allowed) into *data. */
static int add_new(ef_sample *o, const char *name, ef_dtype dtype, int ndim,
                   const int64_t *shape, size_t nbytes, void **data)
{
    ef_buffer *b = ef_buffer_new(nbytes ? nbytes : 1);
    if (!b)
        return EF_ENOMEM;
    int rc = ef_sample_add(o, name, dtype, ndim, shape, b, 0);
    *data = ef_buffer_data(b);
    ef_buffer_release(b);
    return rc;
}

/* "one value", "3 values (shape [3])", "any number of values". */
static void wanted(const entry *e, char *buf, size_t cap)
{
    if (e->len == LEN_ONE)
        snprintf(buf, cap, "one value");
    else if (e->len == LEN_VAR)
        snprintf(buf, cap, "any number");
    else
        snprintf(buf, cap, "%lld (shape [%lld])", (long long)e->len,
                 (long long)e->len);
}

/* Field e->out of `o` from the feature as found (f), or its default. The
 * record's field `rec` holds the bytes f points into; `where` begins each
 * message (record_where). */
static int add_feature(ef_sample *o, const entry *e, const ef__tfx_feature *f,
                       const ef__field *rec, const char *where, ef_map_ctx *ctx)
{
    ef__tfx_kind kind = f->kind;
    size_t count = f->count;
    int use_default = kind == EF__TFX_MISSING;
    if (use_default && !e->has_default && e->len != LEN_VAR)
        return ef_map_ctx_fail(ctx, EF_EFORMAT,
                               "%sfeature '%s' is missing (give a default: "
                               "%s:%s=..., or var if it may be absent)",
                               where, e->name, e->name,
                               e->kind ? ef__tfx_kind_name(e->kind) : "KIND");
    if (use_default) {
        kind = e->kind;
        count = e->len == LEN_VAR ? 0 : e->len > 0 ? (size_t)e->len : 1;
    } else if (e->kind && kind != e->kind) {
        return ef_map_ctx_fail(ctx, EF_EFORMAT,
                               "%sfeature '%s' is a %s_list in the record, "
                               "expected %s (option 'features')",
                               where, e->name, ef__tfx_kind_name(kind),
                               ef__tfx_kind_name(e->kind));
    }
    char want[64];
    wanted(e, want, sizeof want);
    if (kind == EF__TFX_BYTES && count > 1)
        return ef_map_ctx_fail(ctx, EF_EFORMAT,
                               "%sfeature '%s' holds %zu strings; tfexample "
                               "takes one string (u8 [n]) per bytes feature",
                               where, e->name, count);
    if ((e->len == LEN_ONE && count != 1 && kind != EF__TFX_BYTES) ||
        (e->len == LEN_ONE && kind == EF__TFX_BYTES && count == 0) ||
        (e->len > 0 && count != (size_t)e->len))
        return ef_map_ctx_fail(ctx, EF_EFORMAT,
                               "%sfeature '%s' holds %zu %s values, expected "
                               "%s",
                               where, e->name, count, ef__tfx_kind_name(kind),
                               want);
    int64_t shape[1] = {(int64_t)count};
    int ndim = e->len == LEN_ONE ? 0 : 1;
    void *dst;
    int rc;
    if (kind == EF__TFX_BYTES) {
        const uint8_t *data = NULL;
        size_t size = 0;
        if (!use_default && count) {
            ef__tfx_bytes(f, &data, &size, 1);
            const uint8_t *base =
                (const uint8_t *)ef_buffer_data(rec->buf) + rec->offset;
            /* a view of the record: no copy */
            rc = ef__sample_add_variable(o, e->out, EF_U8, (int64_t)size,
                                         rec->buf,
                                         rec->offset + (size_t)(data - base));
        } else {
            size = use_default && e->text ? strlen(e->text) : 0;
            shape[0] = (int64_t)size;
            rc = add_new(o, e->out, EF_U8, 1, shape, size, &dst);
            if (rc == EF_OK && size)
                memcpy(dst, e->text, size);
            if (rc == EF_OK)
                o->fields[o->nfields - 1].variable = 1;
        }
    } else {
        ef_dtype dt = kind == EF__TFX_INT64 ? EF_I64 : EF_F32;
        rc = add_new(o, e->out, dt, ndim, shape, count * ef_dtype_size(dt),
                     &dst);
        if (rc == EF_OK && !use_default && dt == EF_I64)
            ef__tfx_int64s(f, dst);
        else if (rc == EF_OK && !use_default)
            ef__tfx_floats(f, dst);
        for (size_t i = 0; rc == EF_OK && use_default && i < count; i++) {
            size_t k = e->ndef == 1 ? 0 : i;
            if (dt == EF_I64)
                ((int64_t *)dst)[i] = e->i64[k];
            else
                ((float *)dst)[i] = e->f32[k];
        }
        /* a var list's length is the record's: batch makes it a list
         * every time, not a [B, n] tensor when a batch's lengths agree */
        if (rc == EF_OK && e->len == LEN_VAR)
            rc = ef_sample_set_variable(o, e->out);
    }
    if (rc != EF_OK)
        return ef_map_ctx_fail(ctx, rc,
                               "%scannot add field '%s' for feature "
                               "'%s': %s",
                               where, e->out, e->name, ef_strerror(rc));
    return EF_OK;
}

/* The record and where it was read, for messages: "record 3 at offset
 * 120" from a source that gave the sample a byte range (tfrecord's
 * identity is (file << 32) + record). */
static void record_where(const ef_sample *in, char *buf, size_t cap)
{
    if (in->origin.end > in->origin.offset)
        snprintf(buf, cap, "record %lld at offset %lld: ",
                 (long long)(in->id.index & 0xffffffff),
                 (long long)in->origin.offset);
    else
        buf[0] = '\0';
}

static int tfexample_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const params *p = ef_map_ctx_user(ctx);
    char where[64];
    record_where(in, where, sizeof where);
    int r = ef__sample_find(in, p->field);
    const ef__field *rec = r >= 0 ? &in->fields[r] : NULL;
    if (!rec || rec->dtype != EF_U8 || rec->ndim != 1 || in->origin.members)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "%sno field '%s' of u8 [N] to read an Example "
                               "from (one example's record: place tfexample "
                               "before batch; option 'field')",
                               where, p->field);
    for (int i = 0; i < in->nfields; i++)
        for (size_t j = 0; j < p->n; j++)
            if (i != r && !strcmp(in->fields[i].name, p->e[j].out))
                return ef_map_ctx_fail(ctx, EF_ESHAPE,
                                       "%sthe sample already has a field "
                                       "'%s'; rename the feature (%s as "
                                       "OUT)",
                                       where, p->e[j].out, p->e[j].name);
    /* the worker's slots, or (an item made alone for a restore) new ones */
    ef__tfx_feature *kept = ef__map_ctx_scratch(ctx);
    ef__tfx_feature *fs = kept ? kept : ef__malloc(p->n * sizeof *fs);
    ef_sample *o = ef_sample_new(in->id);
    if (!fs || !o) {
        if (!kept)
            ef__free(fs);
        ef_sample_free(o);
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    memset(fs, 0, p->n * sizeof *fs);
    for (size_t j = 0; j < p->n; j++) {
        fs[j].name = p->e[j].name;
        fs[j].len = strlen(p->e[j].name);
    }
    ef__err err;
    ef__err_clear(&err);
    const uint8_t *data =
        (const uint8_t *)ef_buffer_data(rec->buf) + rec->offset;
    int rc = ef__tfx_parse(data, rec->nbytes, fs, p->n, &err);
    if (rc != EF_OK)
        rc = ef_map_ctx_fail(ctx, rc, "%smalformed Example (%zu bytes): %s",
                             where, rec->nbytes, err.msg);
    /* the other fields first, in their order, then the features */
    for (int i = 0; i < in->nfields && rc == EF_OK; i++) {
        if (i != r && ef__sample_add_field(o, &in->fields[i]) != EF_OK)
            rc = ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    for (size_t j = 0; j < p->n && rc == EF_OK; j++)
        rc = add_feature(o, &p->e[j], &fs[j], rec, where, ctx);
    if (!kept)
        ef__free(fs);
    if (rc != EF_OK) {
        ef_sample_free(o);
        return rc;
    }
    *out = o;
    return EF_OK;
}

/* A worker's feature slots, kept from one record to the next
 * (ef__map_kernel): no allocation per record. */
static void *slots_new(void *user)
{
    const params *p = user;
    return ef__malloc(p->n * sizeof(ef__tfx_feature));
}

static void slots_free(void *user, void *slots)
{
    (void)user;
    ef__free(slots);
}

/* ---- the stage ----------------------------------------------------- */

static int tfexample_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    params *p = ef__calloc(1, sizeof *p);
    const char *field = ef__opt_string(o, "field");
    if (!p || !(p->field = dup_trimmed(field, strlen(field)))) {
        free_params(p);
        return ef__err_set(err, EF_ENOMEM, "tfexample: out of memory");
    }
    int rc = p->field[0] ? EF_OK
                         : ef__err_set(err, EF_ESPEC,
                                       "tfexample: option 'field' must name "
                                       "the record's field");
    const char *features = ef__opt_string(o, "features");
    if (rc == EF_OK && !features[0])
        rc = ef__err_set(err, EF_ESPEC,
                         "tfexample: option 'features' is required: a quoted "
                         "list of NAME[:KIND[:LEN]][=DEFAULT][ as OUT]");
    if (rc == EF_OK)
        rc = parse_features(p, features, err);
    if (rc == EF_OK)
        rc = ef__map_setup(s, tfexample_fn, p, (int)ef__opt_int(o, "threads"),
                           1, err);
    if (rc != EF_OK) {
        free_params(p);
        return rc;
    }
    static const ef__map_kernel kernel = {slots_new, slots_free, NULL};
    ef__map_set_kernel(s, &kernel);
    return EF_OK;
}

static void tfexample_destroy(ef__stage *s)
{
    params *p = ef__map_user(s);
    ef__map_destroy(s);
    free_params(p);
}

static const ef__option_def tfexample_options[] = {
    EF__OPT("features", EF_OPT_STRING, NULL,
            "quoted list of NAME[:KIND[:LEN]][=DEFAULT][ as OUT]; KIND bytes, "
            "int64 or float; LEN omitted (one value: a string or a scalar), "
            "N (shape [N]) or var",
            0, 0),
    EF__OPT("field", EF_OPT_STRING, "record",
            "the u8 field holding the Example", 0, 0),
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_tfexample = {
    .info = {"tfexample",
             "tf.train.Example records to fields by feature name (strings "
             "as u8 views of the record, int64 as i64, float as f32)",
             EF__OPTIONS(tfexample_options)},
    .create = tfexample_create,
    .destroy = tfexample_destroy,
    EF__MAP_STAGE_OPS,
};
