/* SPDX-License-Identifier: Apache-2.0 */
/* cast: an example's image to another dtype (floats round to nearest),
 * refusing a value the target cannot hold rather than clamping it. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/half.h"
#include "core/alloc.h"
#include "stages/image/image_stage.h"

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    ef_dtype dtype;
} cast_params;

static int is_float(ef_dtype dt)
{
    return dt == EF_F32 || dt == EF_F64 || dt == EF_F16 || dt == EF_BF16;
}

/* Element i of an integer (or bool) tensor. */
static int64_t int_at(const unsigned char *data, ef_dtype dt, int64_t i)
{
    const unsigned char *p = data + i * (int64_t)ef_dtype_size(dt);
    switch (dt) {
    case EF_U8:
    case EF_BOOL:
        return *p;
    case EF_I8:
        return (int8_t)*p;
    case EF_I16: {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case EF_U16: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case EF_I32: {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        int64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

/* Element i of a float tensor, as a double (exact for every format). */
static double float_at(const unsigned char *data, ef_dtype dt, int64_t i)
{
    const unsigned char *p = data + i * (int64_t)ef_dtype_size(dt);
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case EF_F16:
        memcpy(&h, p, 2);
        return ef__f16_to_f32(h);
    case EF_BF16:
        memcpy(&h, p, 2);
        return ef__bf16_to_f32(h);
    case EF_F32:
        memcpy(&f, p, 4);
        return f;
    default:
        memcpy(&d, p, 8);
        return d;
    }
}

/* Stores an integer the target holds (checked by the caller). */
static void store_int(unsigned char *dst, ef_dtype dt, int64_t i, int64_t iv)
{
    size_t size = ef_dtype_size(dt);
    unsigned char *p = dst + i * (int64_t)size;
    int8_t b = (int8_t)iv;
    int16_t s = (int16_t)iv;
    uint16_t u = (uint16_t)iv;
    int32_t w = (int32_t)iv;
    switch (dt) {
    case EF_U8:
    case EF_BOOL:
        *p = (unsigned char)iv;
        break;
    case EF_I8:
        memcpy(p, &b, 1);
        break;
    case EF_I16:
        memcpy(p, &s, 2);
        break;
    case EF_U16:
        memcpy(p, &u, 2);
        break;
    case EF_I32:
        memcpy(p, &w, 4);
        break;
    default:
        memcpy(p, &iv, 8);
        break;
    }
}

/* Stores v into a float target; 0 when v is finite and the target rounds
 * it to infinity (too large for it), else 1. */
static int store_float(unsigned char *dst, ef_dtype dt, int64_t i, double v)
{
    unsigned char *p = dst + i * (int64_t)ef_dtype_size(dt);
    /* a double beyond float's range has no float (converting it is
     * undefined): it overflows every target but f64 */
    float f = fabs(v) <= FLT_MAX || !isfinite(v) ? (float)v
              : v > 0                           ? INFINITY
                                                : -INFINITY;
    uint16_t h;
    double back;
    switch (dt) {
    case EF_F16:
        h = ef__f32_to_f16(f);
        back = ef__f16_to_f32(h);
        memcpy(p, &h, 2);
        break;
    case EF_BF16:
        h = ef__f32_to_bf16(f);
        back = ef__bf16_to_f32(h);
        memcpy(p, &h, 2);
        break;
    case EF_F32:
        back = f;
        memcpy(p, &f, 4);
        break;
    default:
        back = v;
        memcpy(p, &v, 8);
        break;
    }
    return !(isinf(back) && isfinite(v));
}

/* The values each target holds, for messages. */
static const char *const range[EF__DTYPE_COUNT] = {
    [EF_U8] = "0 to 255",
    [EF_I32] = "-2147483648 to 2147483647",
    [EF_I64] = "-2^63 to 2^63-1",
    [EF_F32] = "numbers of magnitude below 3.4e38",
    [EF_BOOL] = "0 and 1",
    [EF_I8] = "-128 to 127",
    [EF_I16] = "-32768 to 32767",
    [EF_U16] = "0 to 65535",
    [EF_F16] = "numbers of magnitude below 65520",
    [EF_BF16] = "numbers of magnitude below 3.4e38",
    [EF_F64] = "any number",
};

/* The error for element i that does not fit: its coordinates and value. */
static int does_not_fit(const ef__image *img, int64_t i, const char *value,
                        ef_dtype from, ef_dtype to, const char *field,
                        ef_map_ctx *ctx)
{
    int64_t y = i / (img->w * img->c), x = i / img->c % img->w, k = i % img->c;
    char at[80];
    if (img->f->ndim == 3)
        snprintf(at, sizeof at, "[%lld,%lld,%lld]", (long long)y, (long long)x,
                 (long long)k);
    else
        snprintf(at, sizeof at, "[%lld,%lld]", (long long)y, (long long)x);
    return ef_map_ctx_fail(ctx, EF_EFORMAT,
                           "field '%s' (%s) element %s is %s, which %s does "
                           "not hold (%s); cast never clamps",
                           field, ef_dtype_name(from), at, value,
                           ef_dtype_name(to), range[to]);
}

/* Integers each target holds: [lo, hi]; as doubles, [dlo, dhi). */
static const int64_t lo[EF__DTYPE_COUNT] = {
    [EF_U8] = 0,          [EF_I32] = INT32_MIN, [EF_I64] = INT64_MIN,
    [EF_BOOL] = 0,        [EF_I8] = INT8_MIN,   [EF_I16] = INT16_MIN,
    [EF_U16] = 0,
};
static const int64_t hi[EF__DTYPE_COUNT] = {
    [EF_U8] = 255,        [EF_I32] = INT32_MAX, [EF_I64] = INT64_MAX,
    [EF_BOOL] = 1,        [EF_I8] = INT8_MAX,   [EF_I16] = INT16_MAX,
    [EF_U16] = UINT16_MAX,
};
static const double dlo[EF__DTYPE_COUNT] = {
    [EF_U8] = -0.5,          [EF_I32] = -2147483648.5,
    [EF_I64] = -9223372036854775808.0,
    [EF_BOOL] = -0.5,        [EF_I8] = -128.5,
    [EF_I16] = -32768.5,     [EF_U16] = -0.5,
};
static const double dhi[EF__DTYPE_COUNT] = {
    [EF_U8] = 255.5,         [EF_I32] = 2147483647.5,
    [EF_I64] = 9223372036854775808.0,
    [EF_BOOL] = 1.5,         [EF_I8] = 127.5,
    [EF_I16] = 32767.5,      [EF_U16] = 65535.5,
};

/* Converts element i; 0 with its value as text in `value` when the target
 * does not hold it. */
static int convert_one(const unsigned char *src, ef_dtype from,
                       unsigned char *dst, ef_dtype to, int64_t i,
                       char *value, size_t cap)
{
    if (!is_float(from)) {
        int64_t v = int_at(src, from, i);
        if (is_float(to) ? store_float(dst, to, i, (double)v)
                         : v >= lo[to] && v <= hi[to]) {
            if (!is_float(to))
                store_int(dst, to, i, v);
            return 1;
        }
        snprintf(value, cap, "%lld", (long long)v);
        return 0;
    }
    double f = float_at(src, from, i);
    if (is_float(to)) {
        if (store_float(dst, to, i, f))
            return 1;
    } else {
        /* round to nearest, halves away from zero */
        double r = round(f);
        if (r >= dlo[to] && r < dhi[to]) {
            store_int(dst, to, i, (int64_t)r);
            return 1;
        }
    }
    snprintf(value, cap, "%.17g", f);
    return 0;
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
    int64_t n = img.h * img.w * img.c;
    for (int64_t i = 0; i < n; i++) {
        char value[48];
        if (convert_one(img.data, from, dst, to, i, value, sizeof value))
            continue;
        ef_sample_free(*out);
        *out = NULL;
        return does_not_fit(&img, i, value, from, to, p->field, ctx);
    }
    return EF_OK;
}

/* "u8, i32, ... or f64", for messages and help. */
static void dtype_names(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < EF__DTYPE_COUNT && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s",
                                 !d                        ? ""
                                 : d == EF__DTYPE_COUNT - 1 ? " or "
                                                           : ", ",
                                 ef_dtype_name((ef_dtype)d));
}

static int cast_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    const char *name = ef__opt_string(o, "dtype");
    int dtype = -1;
    for (int d = 0; d < EF__DTYPE_COUNT; d++)
        if (strcmp(name, ef_dtype_name((ef_dtype)d)) == 0)
            dtype = d;
    if (dtype < 0) {
        char names[128];
        dtype_names(names, sizeof names);
        return ef__err_set(err, EF_ESPEC,
                           "stage 'cast': option 'dtype' must be %s, got '%s'",
                           names, name);
    }
    cast_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "cast: out of memory");
    p->dtype = (ef_dtype)dtype;
    return ef__image_stage_setup(s, o, cast_fn, p, err);
}

static const ef__option_def cast_options[] = {
    EF__OPT("dtype", EF_OPT_STRING, NULL,
            "target dtype: u8, i32, i64, f32, bool, i8, i16, u16, "
            "f16, bf16 or f64",
            0, 0),
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
