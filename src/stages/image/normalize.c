/* normalize: an example's image to f32, (x * scale - mean) / std with one
 * mean and std per channel (or one for all); scale is 1/255 for u8. */
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
    int nmean, nstd;
    double mean[MAX_CHANNELS], std[MAX_CHANNELS];
} normalize_params;

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
    const normalize_params *p = ef_map_ctx_user(ctx);
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
    normalize_params *p = ef__calloc(1, sizeof *p);
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

static const ef__option_def normalize_options[] = {
    {"mean", EF_OPT_STRING, "0",
     "one value, or one per channel: \"0.485,0.456,0.406\"", 0, 0},
    {"std", EF_OPT_STRING, "1", "one value > 0, or one per channel", 0, 0},
    EF__IMAGE_FIELD_OPTION,
    EF__THREADS_OPTION,
};

const ef__stage_def ef__stage_normalize = {
    .info = {"normalize",
             "to f32: (x * scale - mean) / std, scale 1/255 for u8, 1 for f32",
             EF__OPTIONS(normalize_options)},
    .create = normalize_create,
    EF__IMAGE_STAGE_OPS,
};
