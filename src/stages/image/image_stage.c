/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the image map stages (see image_stage.h). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "stages/image/bilinear.h"
#include "stages/image/image_stage.h"

/* "u8 or f32", "any dtype" ... for messages. */
static void dtype_list(unsigned dtypes, char *buf, size_t cap)
{
    if (dtypes == EF__ANY_DTYPE) {
        snprintf(buf, cap, "any dtype");
        return;
    }
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0, n = 0; d < EF__DTYPE_COUNT && used < cap; d++)
        if (dtypes & EF__DTYPE_BIT(d))
            used +=
                (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 n++ ? " or " : "", ef_dtype_name((ef_dtype)d));
}

void ef__image_field_names(const ef_sample *s, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < s->nfields && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                                 s->fields[i].name);
    if (!s->nfields)
        snprintf(buf, cap, "no fields");
}

int ef__image_find(const ef_sample *in, const char *field, unsigned dtypes,
                   ef__image *img, ef_map_ctx *ctx)
{
    int i = ef__sample_find(in, field);
    if (i < 0) {
        char names[EF__FIELD_NAMES_MAX];
        ef__image_field_names(in, names, sizeof names);
        return ef_map_ctx_fail(
            ctx, EF_ESHAPE, "no field '%s' (the sample has %s)", field, names);
    }
    const ef__field *f = &in->fields[i];
    /* A batch of grey images, [B,H,W], has an image's rank: what marks a
     * batch is the list of its members (batch.c, or a source whose items
     * are batches: ef_sample_set_members), which its echoed copies and
     * every transform's output keep. A misplaced stage is a spec error,
     * never a bad sample to skip. */
    if (in->origin.members) {
        char shape[128];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        return ef_map_ctx_fail(ctx, EF_ESPEC,
                               "field '%s' (%s %s) is a batch of %lld "
                               "examples; this stage transforms one image: "
                               "place this stage before batch, or, where "
                               "the source yields batches, have it yield "
                               "examples (a Python source: unbatch=True)",
                               field, ef_dtype_name(f->dtype), shape,
                               (long long)ef_sample_members(in, NULL, 0));
    }
    if ((f->ndim != 2 && f->ndim != 3) || !(dtypes & EF__DTYPE_BIT(f->dtype))) {
        char shape[128], want[64];
        ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
        dtype_list(dtypes, want, sizeof want);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "field '%s' is %s %s; expected %s [H,W] or "
                               "[H,W,C], one example (place this stage "
                               "before batch)",
                               field, ef_dtype_name(f->dtype), shape, want);
    }
    img->index = i;
    img->f = f;
    img->h = f->shape[0];
    img->w = f->shape[1];
    img->c = f->ndim == 3 ? f->shape[2] : 1;
    img->data = (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    return EF_OK;
}

int ef__image_output(const ef_sample *in, int index, ef_dtype dtype, int ndim,
                     const int64_t *shape, ef_sample **out, void **data,
                     ef_map_ctx *ctx)
{
    /* an output size times an input's channels may not fit: check */
    size_t nbytes = ef_dtype_size(dtype);
    int fits = 1;
    for (int d = 0; d < ndim; d++) {
        fits = fits && shape[d] >= 0 &&
               (shape[d] == 0 || nbytes <= (SIZE_MAX / 2) / (size_t)shape[d]);
        nbytes = fits ? nbytes * (size_t)shape[d] : 0;
    }
    /* before a batch, the item's slot in the batch's buffer (map.h) */
    size_t offset = 0;
    ef_buffer *b = fits ? ef__map_ctx_output(ctx, nbytes, &offset) : NULL;
    *out = b ? ef_sample_clone(in) : NULL;
    if (!*out) {
        ef_buffer_release(b);
        char buf[128];
        ef__shape_format(buf, sizeof buf, ndim, shape);
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory for %s %s",
                               ef_dtype_name(dtype), buf);
    }
    ef__field *f = &(*out)->fields[index];
    ef_buffer_release(f->buf);
    f->buf = b;
    f->offset = offset;
    f->nbytes = nbytes;
    f->dtype = dtype;
    f->ndim = ndim;
    memcpy(f->shape, shape, (size_t)ndim * sizeof *shape);
    *data = (unsigned char *)ef_buffer_data(b) + offset;
    return EF_OK;
}

int ef__image_stage_setup(ef__stage *s, const ef__opts *o, ef_map_fn fn,
                          void *params, ef__err *err)
{
    const char *field = ef__opt_string(o, "field");
    if (!field[0] || strlen(field) >= EF_MAX_NAME) {
        ef__free(params);
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'field' must name a field "
                           "(1 to %d characters)",
                           s->def->info.name, EF_MAX_NAME - 1);
    }
    /* the parameters start with the field name (see image_stage.h) */
    strcpy((char *)params, field);
    int rc =
        ef__map_setup(s, fn, params, (int)ef__opt_int(o, "threads"), 1, err);
    if (rc != EF_OK)
        ef__free(params);
    return rc;
}

void ef__image_stage_destroy(ef__stage *s)
{
    void *params = ef__map_user(s);
    ef__map_destroy(s);
    ef__free(params);
}

int ef__image_same_shape_output(const ef_sample *in, const ef__image *img,
                                ef_sample **out, unsigned char **dst,
                                ef_map_ctx *ctx)
{
    return ef__image_output(in, img->index, img->f->dtype, img->f->ndim,
                            img->f->shape, out, (void **)dst, ctx);
}

int ef__image_find_resamplable(const ef_sample *in, const char *field,
                               ef__image *img, ef_map_ctx *ctx)
{
    int rc = ef__image_find(in, field, EF__U8_F32, img, ctx);
    if (rc != EF_OK || (img->h >= 1 && img->w >= 1))
        return rc;
    return ef_map_ctx_fail(ctx, EF_ESHAPE,
                           "field '%s' is an empty image (%lld x %lld); "
                           "nothing to resample",
                           field, (long long)img->h, (long long)img->w);
}

int ef__image_resample(const ef_sample *in, const ef__image *img, int64_t oh,
                       int64_t ow, int64_t y0, int64_t x0, int64_t ch,
                       int64_t cw, ef_sample **out, ef_map_ctx *ctx)
{
    int64_t shape[3] = {oh, ow, img->c};
    void *dst;
    int rc = ef__image_output(in, img->index, img->f->dtype, img->f->ndim,
                              shape, out, &dst, ctx);
    if (rc != EF_OK)
        return rc;
    size_t esize = ef_dtype_size(img->f->dtype);
    const unsigned char *src =
        img->data + (size_t)((y0 * img->w + x0) * img->c) * esize;
    if (ef__bilinear(src, img->f->dtype, img->w, ch, cw, img->c, dst, oh, ow) !=
        EF_OK) {
        ef_sample_free(*out);
        *out = NULL;
        return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    return EF_OK;
}
