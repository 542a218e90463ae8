/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for a detection sample's JSON (src/codec/json_boxes.c), as
 * the json_boxes stage reads it, with keys `f` and `scores` read as f32.
 *
 * Each input is one document. A failure must be EF_EFORMAT (EF_ENOMEM
 * once the process's field names are all taken) with a message naming
 * the document. A success must give boxes f32 [n,4] and every other field
 * an i64 or f32 scalar or [n], f32 values finite; and the sample must
 * write back (ef__json_boxes_write, as `echoflow pack` does) into a
 * document that reads again to the same fields, bit for bit, and writes
 * again to the same text. Any violation aborts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json_boxes.h"
#include "core/alloc.h"
#include "fuzz.h"

#define FLOATS "f, scores"

/* The document read into a new sample, or NULL when it fails (checked). */
static ef_sample *read_doc(const char *text, size_t size)
{
    ef_sample *s = ef_sample_new((ef_sample_id){0});
    CHECK(s);
    ef__err err;
    ef__err_clear(&err);
    int rc = ef__json_boxes_read(text, size, "doc", FLOATS, s, &err);
    if (rc == EF_OK)
        return s;
    CHECK(rc == EF_EFORMAT || rc == EF_ENOMEM);
    CHECK(err.status == rc);
    fuzz_check_message(err.msg, sizeof err.msg, "doc");
    ef_sample_free(s);
    return NULL;
}

/* The sample has the form the header promises. */
static void check_form(const ef_sample *s)
{
    int b = ef__json_boxes_find(s);
    CHECK(b >= 0);
    int64_t n = s->fields[b].shape[0];
    for (int i = 0; i < s->nfields; i++) {
        const ef__field *f = &s->fields[i];
        CHECK(ef__json_boxes_holds(f, n));
        CHECK(f->variable == (f->ndim > 0));
        if (f->dtype != EF_F32)
            continue;
        const float *v =
            (const float *)((const char *)ef_buffer_data(f->buf) + f->offset);
        for (size_t k = 0; k < f->nbytes / 4; k++)
            CHECK(isfinite(v[k]));
    }
}

static int same(const ef_sample *a, const ef_sample *b)
{
    if (a->nfields != b->nfields)
        return 0;
    for (int i = 0; i < a->nfields; i++) {
        const ef__field *x = &a->fields[i], *y = &b->fields[i];
        if (strcmp(x->name, y->name) || x->dtype != y->dtype ||
            x->ndim != y->ndim || x->nbytes != y->nbytes ||
            memcmp(x->shape, y->shape, sizeof x->shape) ||
            memcmp((const char *)ef_buffer_data(x->buf) + x->offset,
                   (const char *)ef_buffer_data(y->buf) + y->offset, x->nbytes))
            return 0;
    }
    return 1;
}

static char *write_doc(const ef_sample *s, size_t *len)
{
    ef__err err;
    ef__err_clear(&err);
    char *text = NULL;
    CHECK(ef__json_boxes_write(s, &text, len, &err) == EF_OK);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* a copy of exactly the input's size, so that ASan sees any read
     * past it */
    char *copy = malloc(size ? size : 1);
    CHECK(copy);
    if (size)
        memcpy(copy, data, size);
    ef_sample *s = read_doc(copy, size);
    free(copy);
    if (!s)
        return 0;
    check_form(s);
    size_t len, len2;
    char *text = write_doc(s, &len);
    ef_sample *again = read_doc(text, len);
    CHECK(again && same(s, again));
    char *text2 = write_doc(again, &len2);
    CHECK(len2 == len && !memcmp(text, text2, len));
    ef__free(text);
    ef__free(text2);
    ef_sample_free(s);
    ef_sample_free(again);
    return 0;
}
