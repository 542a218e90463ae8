/* Element-wise and layout map stages for one example's image: normalize
 * (to f32, per-channel mean and std), to_chw (the layout PyTorch models
 * take) and cast (dtype conversion that refuses values the target cannot
 * hold, rather than clamping them). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "stages/image/image_stage.h"

#define MAX_CHANNELS 16 /* values in a mean or std list */

typedef struct {
    char field[EF_MAX_NAME]; /* first: see image_stage.h */
    int nmean, nstd;         /* normalize */
    double mean[MAX_CHANNELS], std[MAX_CHANNELS];
    ef_dtype dtype; /* cast */
} tensor_params;

/* ---- normalize ---------------------------------------------------- */

/* Checks that a list of n values suits c channels. */
static int channels_match(int n, int64_t c, const char *what, const char *field,
                          ef_map_ctx *ctx)
{
    if (n == 1 || n == c)
        return EF_OK;
    if (c == 1)
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "field '%s' has one channel but %s has %d "
                               "values; expected one",
                               field, what, n);
    return ef_map_ctx_fail(ctx, EF_ESHAPE,
                           "field '%s' has %lld channels but %s has %d "
                           "values; expected 1 or %lld",
                           field, (long long)c, what, n, (long long)c);
}

static int normalize_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const tensor_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__U8_F32, &img, ctx);
    if (rc == EF_OK)
        rc = channels_match(p->nmean, img.c, "mean", p->field, ctx);
    if (rc == EF_OK)
        rc = channels_match(p->nstd, img.c, "std", p->field, ctx);
    if (rc != EF_OK)
        return rc;
    /* one value each for every channel: treat the image as one channel
     * (it may have more than MAX_CHANNELS) */
    int64_t c = p->nmean == 1 && p->nstd == 1 ? 1 : img.c;
    int64_t pixels = img.h * img.w * img.c / c;
    /* (x * scale - mean) / std as one multiply-add per element */
    float a[MAX_CHANNELS], b[MAX_CHANNELS];
    double scale = img.f->dtype == EF_U8 ? 1.0 / 255.0 : 1.0;
    for (int64_t k = 0; k < c; k++) {
        double sd = p->std[p->nstd == 1 ? 0 : k];
        a[k] = (float)(scale / sd);
        b[k] = (float)(-p->mean[p->nmean == 1 ? 0 : k] / sd);
    }
    float *dst;
    rc = ef__image_output(in, img.index, EF_F32, img.f->ndim, img.f->shape, out,
                          (void **)&dst, ctx);
    if (rc != EF_OK)
        return rc;
    if (img.f->dtype == EF_U8) {
        for (int64_t i = 0; i < pixels; i++)
            for (int64_t k = 0; k < c; k++)
                dst[i * c + k] = (float)img.data[i * c + k] * a[k] + b[k];
    } else {
        const float *src = (const float *)img.data;
        for (int64_t i = 0; i < pixels; i++)
            for (int64_t k = 0; k < c; k++)
                dst[i * c + k] = src[i * c + k] * a[k] + b[k];
    }
    return EF_OK;
}

/* "0.5" or "0.485,0.456,0.406" into v; the count into *n. */
static int parse_list(const char *text, const char *option, int positive,
                      double *v, int *n, ef__err *err)
{
    const char *p = text;
    *n = 0;
    for (;;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        while (*end == ' ')
            end++;
        if (end == p || errno || !isfinite(x) || (*end && *end != ',') ||
            *n == MAX_CHANNELS)
            return ef__err_set(err, EF_ESPEC,
                               "stage 'normalize': option '%s' expects a "
                               "number or a quoted list of up to %d numbers "
                               "(\"0.485,0.456,0.406\"), got '%s'",
                               option, MAX_CHANNELS, text);
        if (positive && !(x > 0))
            return ef__err_set(err, EF_ESPEC,
                               "stage 'normalize': option '%s' values must "
                               "be > 0, got %g (value %d of '%s')",
                               option, x, *n + 1, text);
        v[(*n)++] = x;
        if (!*end)
            return EF_OK;
        p = end + 1;
    }
}

static int normalize_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tensor_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "normalize: out of memory");
    int rc = parse_list(ef__opt_string(o, "mean"), "mean", 0, p->mean,
                        &p->nmean, err);
    if (rc == EF_OK)
        rc = parse_list(ef__opt_string(o, "std"), "std", 1, p->std, &p->nstd,
                        err);
    if (rc != EF_OK) {
        ef__free(p);
        return rc;
    }
    return ef__image_stage_setup(s, o, normalize_fn, p, err);
}

/* ---- to_chw ------------------------------------------------------- */

/* Plane k of dst gathers channel k of every pixel of src. */
#define GATHER(ES)                                                             \
    for (int64_t k = 0; k < c; k++)                                            \
        for (int64_t i = 0; i < hw; i++)                                       \
    memcpy(dst + (size_t)(k * hw + i) * ES, src + (size_t)(i * c + k) * ES, ES)

static void hwc_to_chw(const unsigned char *src, unsigned char *dst, int64_t hw,
                       int64_t c, size_t esize)
{
    /* constant sizes, so each memcpy is a single load and store */
    switch (esize) {
    case 1:
        GATHER(1);
        break;
    case 4:
        GATHER(4);
        break;
    default:
        GATHER(8);
        break;
    }
}

static int to_chw_fn(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    const tensor_params *p = ef_map_ctx_user(ctx);
    ef__image img;
    int rc = ef__image_find(in, p->field, EF__ANY_DTYPE, &img, ctx);
    if (rc != EF_OK)
        return rc;
    int64_t shape[3] = {img.c, img.h, img.w};
    if (img.c == 1) {
        /* one channel: the bytes are already in order, only the shape
         * changes, and the payload is shared */
        if (!(*out = ef_sample_clone(in)))
            return ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
        ef__field *f = &(*out)->fields[img.index];
        f->ndim = 3;
        memcpy(f->shape, shape, sizeof shape);
        return EF_OK;
    }
    unsigned char *dst;
    rc = ef__image_output(in, img.index, img.f->dtype, 3, shape, out,
                          (void **)&dst, ctx);
    if (rc == EF_OK)
        hwc_to_chw(img.data, dst, img.h * img.w, img.c,
                   ef_dtype_size(img.f->dtype));
    return rc;
}

static int to_chw_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    tensor_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "to_chw: out of memory");
    return ef__image_stage_setup(s, o, to_chw_fn, p, err);
}

/* ---- cast --------------------------------------------------------- */

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
    const tensor_params *p = ef_map_ctx_user(ctx);
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
    tensor_params *p = ef__calloc(1, sizeof *p);
    if (!p)
        return ef__err_set(err, EF_ENOMEM, "cast: out of memory");
    p->dtype = (ef_dtype)dtype;
    return ef__image_stage_setup(s, o, cast_fn, p, err);
}

/* ---- registration ------------------------------------------------- */

static const ef__option_def normalize_options[] = {
    {"mean", EF_OPT_STRING, "0",
     "one value, or one per channel: \"0.485,0.456,0.406\"", 0, 0},
    {"std", EF_OPT_STRING, "1", "one value > 0, or one per channel", 0, 0},
    EF__IMAGE_FIELD_OPTION,
    EF__THREADS_OPTION,
};

static const ef__option_def to_chw_options[] = {
    EF__IMAGE_FIELD_OPTION,
    EF__THREADS_OPTION,
};

static const ef__option_def cast_options[] = {
    {"dtype", EF_OPT_STRING, NULL, "target dtype: u8, i32, i64 or f32", 0, 0},
    EF__IMAGE_FIELD_OPTION,
    EF__THREADS_OPTION,
};

const ef__stage_def ef__stage_normalize = {
    .info = {"normalize",
             "to f32: (x * scale - mean) / std, scale 1/255 for u8, 1 for f32",
             4, normalize_options},
    .create = normalize_create,
    EF__IMAGE_STAGE_OPS,
};

const ef__stage_def ef__stage_to_chw = {
    .info = {"to_chw", "[H,W,C] to [C,H,W] (and [H,W] to [1,H,W]), any dtype",
             2, to_chw_options},
    .create = to_chw_create,
    EF__IMAGE_STAGE_OPS,
};

const ef__stage_def ef__stage_cast = {
    .info = {"cast",
             "convert dtype (f32 rounds to nearest); out-of-range values are "
             "errors",
             3, cast_options},
    .create = cast_create,
    EF__IMAGE_STAGE_OPS,
};
