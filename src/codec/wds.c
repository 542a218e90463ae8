/* SPDX-License-Identifier: Apache-2.0 */
/* WebDataset grouping (see wds.h). */
#include "codec/wds.h"

#include <string.h>

#include "core/alloc.h"
#include "core/names.h"
#include "core/sample.h"

#define SHOW 200 /* bytes of a member name quoted in messages */
#define EF__WDS_STR_(x) #x
#define EF__WDS_STR(x) EF__WDS_STR_(x)

int ef__wds_init(ef__wds *g, const char *url, int64_t shard, int64_t epoch,
                 ef__err *err)
{
    memset(g, 0, sizeof *g);
    g->shard_name = url;
    g->shard = shard;
    g->epoch = epoch;
    size_t n = strlen(url);
    g->url = ef_buffer_new(n);
    if (!g->url)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", url);
    memcpy(ef_buffer_data(g->url), url, n);
    return EF_OK;
}

void ef__wds_free(ef__wds *g)
{
    ef_sample_free(g->cur);
    ef_buffer_release(g->url);
    ef__free(g->key);
    memset(g, 0, sizeof *g);
}

void ef__wds_finish(ef__wds *g, ef_sample **done)
{
    if (g->cur)
        g->cur->origin = (ef__origin){g->shard, (int64_t)g->key_offset,
                                      (int64_t)g->key_end, NULL};
    *done = g->cur;
    g->cur = NULL;
    g->active = 0;
}

static int malformed(ef__wds *g, const char *name, uint64_t offset,
                     const char *why, ef__err *err)
{
    ef_sample_free(g->cur);
    g->cur = NULL; /* the group stays active: its members are absorbed */
    return ef__err_set(err, EF_EFORMAT,
                       "%s: member '%.*s' at offset %llu: %s; sample '%.*s' "
                       "dropped",
                       g->shard_name, SHOW, name, (unsigned long long)offset,
                       why, SHOW, g->key);
}

/* Adds a u8 1-D field viewing all of `b`. */
static int add_bytes(ef_sample *s, const char *field, ef_buffer *b)
{
    return ef__sample_add_variable(s, field, EF_U8,
                                   (int64_t)ef_buffer_size(b), b, 0);
}

/* Opens a new key group: the sample with its __key__ and __url__. */
static int begin(ef__wds *g, const char *key, size_t key_len, uint64_t offset,
                 ef__err *err)
{
    if (key_len + 1 > g->key_cap) {
        char *k = ef__realloc(g->key, key_len + 1);
        if (!k)
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                               g->shard_name);
        g->key = k;
        g->key_cap = key_len + 1;
    }
    memcpy(g->key, key, key_len);
    g->key[key_len] = '\0';
    g->key_len = key_len;
    g->key_offset = offset;
    g->active = 1;
    if (g->position >= (int64_t)1 << EF__WDS_SHARD_SHIFT)
        return ef__err_set(err, EF_EFORMAT,
                           "%s: more than 2^%d samples in one shard",
                           g->shard_name, EF__WDS_SHARD_SHIFT);
    ef_sample_id id = {.index =
                           (g->shard << EF__WDS_SHARD_SHIFT) + g->position++,
                       .epoch = g->epoch};
    g->cur = ef_sample_new(id);
    ef_buffer *kb = ef_buffer_new(key_len);
    int rc = g->cur && kb ? EF_OK : EF_ENOMEM;
    if (rc == EF_OK) {
        memcpy(ef_buffer_data(kb), key, key_len);
        rc = add_bytes(g->cur, "__key__", kb);
    }
    if (rc == EF_OK)
        rc = add_bytes(g->cur, "__url__", g->url);
    ef_buffer_release(kb);
    if (rc != EF_OK) {
        ef_sample_free(g->cur);
        g->cur = NULL;
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory", g->shard_name);
    }
    return EF_OK;
}

/* The dot that ends a member name's key (the first of its last path
 * component), or NULL when there is none: the key is the whole name. */
static const char *key_dot(const char *name)
{
    const char *slash = strrchr(name, '/');
    return strchr(slash ? slash + 1 : name, '.');
}

int ef__wds_continues(const ef__wds *g, const char *name)
{
    const char *dot = key_dot(name);
    size_t key_len = dot ? (size_t)(dot - name) : strlen(name);
    return g->active && key_len == g->key_len &&
           memcmp(name, g->key, key_len) == 0;
}

int ef__wds_add(ef__wds *g, const char *name, ef_buffer *data, uint64_t offset,
                uint64_t end, ef_sample **done, ef__err *err)
{
    *done = NULL;
    size_t len = strlen(name);
    const char *dot = key_dot(name);
    size_t key_len = dot ? (size_t)(dot - name) : len;
    if (!ef__wds_continues(g, name)) {
        ef__wds_finish(g, done);
        int rc = begin(g, name, key_len, offset, err);
        if (rc != EF_OK)
            return rc;
    }
    g->key_end = end;
    if (!g->cur)
        return EF_OK; /* a member of a malformed sample */
    char field[EF_MAX_NAME];
    size_t flen = dot ? len - key_len - 1 : 0;
    if (flen == 0)
        return malformed(g, name, offset,
                         "no field name (expected KEY.FIELD, with a '.' in "
                         "the last path component)",
                         err);
    if (flen >= sizeof field)
        return malformed(g, name, offset,
                         "the field name is longer than "
                         EF__WDS_STR(EF_MAX_NAME) " - 1 bytes",
                         err);
    for (size_t i = 0; i < flen; i++) {
        char c = dot[1 + i];
        field[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    field[flen] = '\0';
    ef_tensor t;
    if (ef_sample_get(g->cur, field, &t) == EF_OK)
        return malformed(g, name, offset,
                         "a second field of the same name (or one named like "
                         "__key__ or __url__)",
                         err);
    if (ef_sample_field_count(g->cur) >= EF_MAX_FIELDS)
        return malformed(g, name, offset,
                         "more than " EF__WDS_STR(EF_MAX_FIELDS) " fields "
                         "with __key__ and __url__",
                         err);
    if (add_bytes(g->cur, field, data) != EF_OK)
        return ef__err_set(err, EF_ENOMEM,
                           "%s: field '%s': out of memory (or more than %d "
                           "distinct field names seen)",
                           g->shard_name, field, EF__NAMES_MAX);
    return EF_OK;
}
