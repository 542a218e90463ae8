/* SPDX-License-Identifier: Apache-2.0 */
/* map: runs a transform, a built-in or a callback bound by name (or
 * handed over by ef_pipeline_add_map), on the map machinery
 * (pipeline/map.c): worker threads, runs, order, inline. */
#include <stdio.h>
#include <string.h>

#include "core/sample.h"
#include "pipeline/map.h"

/* ---- the built-in transforms ------------------------------------ */

static int map_noop(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    *out = ef_sample_clone(in);
    return *out ? EF_OK : ef_map_ctx_fail(ctx, EF_ENOMEM, "out of memory");
}

/* Every u8 field becomes f32 in [0, 1]; other fields are shared. */
static int map_to_f32(const ef_sample *in, ef_sample **out, ef_map_ctx *ctx)
{
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    for (int i = 0; i < in->nfields && rc == EF_OK; i++) {
        const ef__field *f = &in->fields[i];
        if (f->dtype != EF_U8) {
            rc = ef__sample_add_field(o, f);
            continue;
        }
        float *dst;
        rc = ef_sample_add_new(o, f->name, EF_F32, f->ndim, f->shape,
                               (void **)&dst);
        if (rc != EF_OK)
            break;
        const unsigned char *src =
            (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
        for (size_t j = 0; j < f->nbytes; j++)
            dst[j] = (float)src[j] * (1.0f / 255.0f);
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return ef_map_ctx_fail(ctx, rc, "%s", ef_strerror(rc));
    }
    *out = o;
    return EF_OK;
}

static const struct {
    const char *name;
    ef_map_fn fn;
} builtins[] = {
    {"noop", map_noop},
    {"to_f32", map_to_f32},
};

/* The names bound for the parse under way, "a, b", into buf. */
static void bound_names(const ef__ctx *ctx, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; ctx->bound && i < ctx->bound->n && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                                 ctx->bound->v[i].name);
}

static int map_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    const char *name = ef__opt_string(o, "fn");
    ef_map_fn fn = (ef_map_fn)s->user_fn;
    void *user = s->user_data;
    if (fn && name[0])
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' cannot be combined with a "
                           "C callback");
    /* a bound name comes first: it may shadow a built-in */
    const ef__bound_map *b = fn ? NULL : ef__ctx_use_map(s->ctx, name);
    if (b) {
        fn = b->fn;
        user = b->user;
    }
    for (size_t i = 0; !fn && i < sizeof builtins / sizeof builtins[0]; i++)
        if (strcmp(builtins[i].name, name) == 0)
            fn = builtins[i].fn;
    if (!fn && !name[0])
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' is required (built-ins: "
                           "noop, to_f32)");
    if (!fn) {
        char bound[256];
        bound_names(s->ctx, bound, sizeof bound);
        return ef__err_set(err, EF_ESPEC,
                           "stage 'map': option 'fn' names no %stransform: "
                           "'%s' (%s%s%sbuilt-ins: noop, to_f32)",
                           bound[0] ? "bound map or built-in " : "built-in ",
                           name, bound[0] ? "bound: " : "", bound,
                           bound[0] ? "; " : "");
    }
    return ef__map_setup(s, fn, user, (int)ef__opt_int(o, "threads"),
                         ef__opt_bool(o, "ordered"), err);
}

static const ef__option_def map_options[] = {
    EF__OPT("fn", EF_OPT_STRING, "",
            "built-in transform (noop, to_f32), or a name bound to a callback "
            "(ef_pipeline_bind_map)",
            0, 0),
    EF__MAP_OPTIONS,
    EF__OPT("ordered", EF_OPT_BOOL, "true",
            "keep the upstream's order (deterministic)", 0, 0),
};

const ef__stage_def ef__stage_map = {
    .info = {"map", "apply a transform on worker threads",
             EF__OPTIONS(map_options)},
    .create = map_create,
    .destroy = ef__map_destroy,
    EF__MAP_STAGE_OPS,
};
