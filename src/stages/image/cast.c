/* cast: an example's image to another dtype (f32 rounds to nearest),
 * refusing a value the target cannot hold rather than clamping it. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    ef_dtype dtype;
} cast_params;

/* Element i of a tensor, as an integer (u8, i32, i64) or a double (f32). */
static int64_t int_at(const unsigned char *data, ef_dtype dt, int64_t i)
{
    if (dt == EF_U8)
        return data[i];
    if (dt == EF_I32) {
        int32_t v;
        memcpy(&v, data + i * 4, 4);
        return v;
    }
    int64_t v;
    memcpy(&v, data + i * 8, 8);
    return v;
}

static void store(unsigned char *dst, ef_dtype dt, int64_t i, int64_t iv,
                  double fv)
{
    switch (dt) {
    case EF_U8:
        dst[i] = (unsigned char)iv;
        break;
    case EF_I32: {
        int32_t v = (int32_t)iv;
        memcpy(dst + i * 4, &v, 4);
        break;
    }
    case EF_I64:
        memcpy(dst + i * 8, &iv, 8);
        break;
    default: {
        float v = (float)fv;
        memcpy(dst + i * 4, &v, 4);
        break;
    }
    }
}

/* The error for element i that does not fit: its coordinates and value. */
static int does_not_fit(const ef__image *img, int64_t i, const char *value,
                        ef_dtype to, const char *field, ef_map_ctx *ctx)
{
    static const char *const range[] = {
        [EF_U8] = "0 to 255",
        [EF_I32] = "-2147483648 to 2147483647",
        [EF_I64] = "-2^63 to 2^63-1",
        [EF_F32] = "finite numbers",
    };
    int64_t y = i / (img->w * img->c), x = i / img->c % img->w, k = i % img->c;
    char at[80];
    if (img->f->ndim == 3)
        snprintf(at, sizeof at, "[%lld,%lld,%lld]", (long long)y, (long long)x,
                 (long long)k);
    else
        snprintf(at, sizeof at, "[%lld,%lld]", (long long)y, (long long)x);
    return ef_map_ctx_fail(ctx, EF_EFORMAT,
                           "field '%s' element %s is %s, which %s does not "
                           "hold (%s); cast never clamps",
                           field, at, value, ef_dtype_name(to), range[to]);
}

static int cast_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const cast_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__ANY_DTYPE, &img, ctx);
    if (rc != EF_OK)
        return rc;
    ef_dtype from = img.f->dtype, to = p->dtype;
    if (from == to) { /* nothing to convert: share the payload */
        *out = ef_sample_clone(in);
        return *out ? EF_OK : ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
    }
    unsigned char *dst;
    rc = ef__image_output(in, img.index, to, img.f->ndim, img.f->shape, out,
                          (void **)&dst, ctx);
    if (rc != EF_OK)
        return rc;
    /* integers a target holds: [lo, hi]; as doubles, [dlo, dhi) */
    static const int64_t lo[] = {
        [EF_U8] = 0, [EF_I32] = INT32_MIN, [EF_I64] = INT64_MIN};
    static const int64_t hi[] = {
        [EF_U8] = 255, [EF_I32] = INT32_MAX, [EF_I64] = INT64_MAX};
    static const double dlo[] = {[EF_U8] = -0.5,
                                 [EF_I32] = -2147483648.5,
                                 [EF_I64] = -9223372036854775808.0};
    static const double dhi[] = {[EF_U8] = 255.5,
                                 [EF_I32] = 2147483647.5,
                                 [EF_I64] = 9223372036854775808.0};
    int64_t n = img.h * img.w * img.c;
    for (int64_t i = 0; i < n; i++) {
        char value[48];
        if (from != EF_F32) {
            int64_t v = int_at(img.data, from, i);
            if (to == EF_F32 || (v >= lo[to] && v <= hi[to])) {
                store(dst, to, i, v, (double)v);
                continue;
            }
            snprintf(value, sizeof value, "%lld", (long long)v);
        } else {
            float f;
            memcpy(&f, img.data + i * 4, 4);
            /* round to nearest, halves away from zero */
            double r = round((double)f);
            if (r >= dlo[to] && r < dhi[to]) {
                store(dst, to, i, (int64_t)r, r);
                continue;
            }
            snprintf(value, sizeof value, "%.9g", (double)f);
        }
        ef_sample_free(*out);
        *out = NULL;
        return does_not_fit(&img, i, value, to, p->field, ctx);
    }
    return EF_OK;
}

static int cast_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    const char *name = ef__opt_string(o, "dtype");
    int dtype = -1;
    for (int d = 0; d < EF__DTYPE_COUNT; d++)
        if (strcmp(name, ef_dtype_name((ef_dtype)d)) == 0)
            dtype = d;
    if (dtype < 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage 'cast': option 'dtype' must be u8, i32, i64 "
                           "or f32, got '%s'",
                           name);
    cast_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "cast: out of memory");
    p->dtype = (ef_dtype)dtype;
    return ef__image_stage_setup(s, o, cast_fn, p, err);
}

static const ef__option_def cast_options[] = {
    {"dtype", EF_OPT_STRING, NULL, "target dtype: u8, i32, i64 or f32", 0, 0},
    EF__IMAGE_FIELD_OPTION,
    EF__MAP_OPTIONS,
};

const ef__stage_def ef__stage_cast = {
    .info = {"cast",
             "convert dtype (f32 rounds to nearest); out-of-range values are "
             "errors",
             EF__OPTIONS(cast_options)},
    .create = cast_create,
    EF__IMAGE_STAGE_OPS,
};
