/* SPDX-License-Identifier: Apache-2.0 */
/* Mean and std lists of the normalizing stages (see normalize_values.h). */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "stages/image/normalize_values.h"

/* "0.5" or "0.485,0.456,0.406" into vals; the count into *n. */
static int parse_list(const char *text, const char *stage, const char *option,
                      int positive, double *vals, int *n, ef__err *err)
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
            *n == EF__NORM_MAX_CHANNELS)
            return ef__err_set(err, EF_ESPEC,
                               "stage '%s': option '%s' expects a number or "
                               "a quoted list of up to %d numbers "
                               "(\"0.485,0.456,0.406\"), got '%s'",
                               stage, option, EF__NORM_MAX_CHANNELS, text);
        if (positive && !(x > 0))
            return ef__err_set(err, EF_ESPEC,
                               "stage '%s': option '%s' values must be > 0, "
                               "got %g (value %d of '%s')",
                               stage, option, x, *n + 1, text);
        vals[(*n)++] = x;
        if (!*end)
            return EF_OK;
        p = end + 1;
    }
}

int ef__norm_parse(const ef__opts *o, const char *stage, ef__norm_values *v,
                   ef__err *err)
{
    int rc = parse_list(ef__opt_string(o, "mean"), stage, "mean", 0, v->mean,
                        &v->nmean, err);
    if (rc == EF_OK)
        rc = parse_list(ef__opt_string(o, "std"), stage, "std", 1, v->std,
                        &v->nstd, err);
    return rc;
}

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

int ef__norm_check(const ef__norm_values *v, int64_t c, const char *field,
                   ef_map_ctx *ctx)
{
    int rc = channels_match(v->nmean, c, "mean", field, ctx);
    return rc == EF_OK ? channels_match(v->nstd, c, "std", field, ctx) : rc;
}

void ef__norm_coeffs(const ef__norm_values *v, int64_t c, ef_dtype dtype,
                     float *a, float *b)
{
    assert(c >= 1 && c <= EF__NORM_MAX_CHANNELS);
    double scale = dtype == EF_U8 ? 1.0 / 255.0 : 1.0;
    for (int64_t k = 0; k < c; k++) {
        double sd = v->std[v->nstd == 1 ? 0 : k];
        a[k] = (float)(scale / sd);
        b[k] = (float)(-v->mean[v->nmean == 1 ? 0 : k] / sd);
    }
}
