/* SPDX-License-Identifier: Apache-2.0 */
/* json_boxes: reads each sample's detection annotations from its JSON
 * field (a u8 [N], as `tar` gives the member KEY.json that `echoflow pack`
 * writes beside each image of a sample with boxes) into fields:
 *
 *     tar:urls=out/train-{000000..000099}.tar | json_boxes | decode
 *
 * gives the samples the coco source gave when packed: the image (jpg,
 * png...), boxes f32 [n,4], labels i64 [n], image_id, iscrowd with
 * crowd=keep. The JSON is one object (codec/json_boxes.h): `boxes` an
 * array of n rows [x1, y1, x2, y2]; every other key an array of n numbers
 * (a per-box field, [n]) or one number (a scalar), i64 unless named in
 * `floats` (f32). boxes and the per-box fields are variable-length, so
 * `batch` lays them out ragged.
 *
 * Strict: a field that is not one JSON object, a value of the wrong type,
 * a box row that is not 4 numbers, a per-box array whose length is not
 * the boxes', a fraction in an i64 value, an f32 value beyond f32's range,
 * a key twice, bytes after the object, or a key the sample already has as
 * a field are errors naming the stage, the sample (its file and key), the
 * byte in the JSON, the key and what was expected: EF_EFORMAT (EF_ESHAPE
 * for the clash), skipped and counted under on_error=skip.
 *
 * A map stage (threads, checkpoints by transforming the upstream's item
 * again, see map.c). The JSON field is dropped, other fields kept. */
#include <stdio.h>
#include <string.h>

#include "codec/json_boxes.h"
#include "core/alloc.h"
#include "core/sample.h"
#include "pipeline/map.h"

typedef struct {
    char *field;  /* the JSON's field */
    char *floats; /* keys read as f32 */
} params;

static void free_params(params *p)
{
    if (!p)
        return;
    ef__free(p->field);
    ef__free(p->floats);
    ef__free(p);
}

static int json_boxes_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const params *p = ef_map_ctx_user(ctx);
    int j = ef__sample_find(in, p->field);
    const ef__field *f = j >= 0 ? &in->fields[j] : NULL;
    if (!f || f->dtype != EF_U8 || f->ndim != 1 || f->lengths)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "no field '%s' of u8 [N] to read the boxes' "
                               "JSON from (one example's: place json_boxes "
                               "before batch; option 'field')",
                               p->field);
    ef_sample *o = ef_sample_new(in->id);
    if (!o)
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    int rc = EF_OK;
    /* the other fields first, in their order, then the JSON's */
    for (int i = 0; i < in->nfields && rc == EF_OK; i++)
        if (i != j && ef__sample_add_field(o, &in->fields[i]) != EF_OK)
            rc = ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    char name[EF_MAX_NAME + 16];
    snprintf(name, sizeof name, "field '%s'", p->field);
    ef__err err;
    ef__err_clear(&err);
    if (rc == EF_OK) {
        const char *text = (const char *)ef_buffer_data(f->buf) + f->offset;
        rc = ef__json_boxes_read(text, f->nbytes, name, p->floats, o, &err);
        if (rc != EF_OK)
            rc = ef_map_ctx_fail(ctx, rc, "%s", err.msg);
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return rc;
    }
    *out = o;
    return EF_OK;
}

static int json_boxes_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    params *p = ef__calloc(1, sizeof *p);
    if (p) {
        p->field = ef__strdup(ef__opt_string(o, "field"));
        p->floats = ef__strdup(ef__opt_string(o, "floats"));
    }
    if (!p || !p->field || !p->floats) {
        free_params(p);
        return ef__err_set(err, EF_ENOMEM, "json_boxes: out of memory");
    }
    int rc = p->field[0] ? EF_OK
                         : ef__err_set(err, EF_ESPEC,
                                       "json_boxes: option 'field' must name "
                                       "the field holding the JSON");
    if (rc == EF_OK)
        rc = ef__map_setup(s, json_boxes_fn, p, (int)ef__opt_int(o, "threads"),
                           1, err);
    if (rc != EF_OK)
        free_params(p);
    return rc;
}

static void json_boxes_destroy(ef__stage *s)
{
    params *p = ef__map_user(s);
    ef__map_destroy(s);
    free_params(p);
}

static const ef__option_def json_boxes_options[] = {
    EF__OPT("field", EF_OPT_STRING, "json",
            "the u8 field holding the JSON (the member KEY.json)", 0, 0),
    EF__OPT("floats", EF_OPT_STRING, "",
            "keys other than boxes read as f32 (a quoted comma-separated "
            "list); the others are i64",
            0, 0),
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_json_boxes = {
    .info = {"json_boxes",
             "a detection sample's JSON (as echoflow pack writes it) to "
             "fields: boxes f32 [n,4], per-box fields [n] and scalars",
             EF__OPTIONS(json_boxes_options)},
    .create = json_boxes_create,
    .destroy = json_boxes_destroy,
    EF__MAP_STAGE_OPS,
};
