/* SPDX-License-Identifier: Apache-2.0 */
/* The fields of the decoding stages (see decode_fields.h): which field is
 * the image, the class label's text, and the output sample. */
#include <stdio.h>
#include <string.h>

#include "codec/image.h"
#include "stages/image/decode_fields.h"
#include "stages/image/image_stage.h"

static int is_image_field(const ef__decode_fields *p, const char *name)
{
    for (int i = 0; i < p->nfields; i++)
        if (strcmp(p->fields[i], name) == 0)
            return 1;
    return 0;
}

/* Encoded fields are bytes: u8 [N]. */
static int check_bytes(const ef__field *f, const char *what, ef_map_ctx *ctx)
{
    if (f->dtype == EF_U8 && f->ndim == 1)
        return EF_OK;
    char shape[128];
    ef__shape_format(shape, sizeof shape, f->ndim, f->shape);
    return ef_map_ctx_fail(ctx, EF_ESHAPE,
                           "field '%s' is %s %s; expected the encoded %s as "
                           "u8 [N]",
                           f->name, ef_dtype_name(f->dtype), shape, what);
}

static int blank(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* A class label: optional blanks, an optional sign, decimal digits,
 * optional blanks; nothing else, and no overflow. */
static int parse_cls(const unsigned char *t, size_t n, int64_t *out)
{
    size_t i = 0;
    while (i < n && blank(t[i]))
        i++;
    int neg = i < n && t[i] == '-';
    i += i < n && (t[i] == '-' || t[i] == '+');
    size_t digits = i;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : INT64_MAX;
    for (; i < n && t[i] >= '0' && t[i] <= '9'; i++) {
        unsigned d = t[i] - '0';
        if (v > (limit - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (i == digits)
        return -1;
    while (i < n && blank(t[i]))
        i++;
    if (i != n)
        return -1;
    *out = neg && v ? -(int64_t)(v - 1) - 1 : (int64_t)v; /* -2^63 too */
    return 0;
}

static int decode_cls(const ef__field *f, int64_t *label, ef_map_ctx *ctx)
{
    int rc = check_bytes(f, "text of a class number", ctx);
    if (rc != EF_OK)
        return rc;
    const unsigned char *t =
        (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    if (parse_cls(t, f->nbytes, label) == 0)
        return EF_OK;
    /* quote the text, escaped, and no more than 40 bytes of it */
    char shown[4 * 40 + 1];
    size_t used = 0;
    for (size_t i = 0; i < f->nbytes && i < 40; i++)
        used += (size_t)snprintf(
            shown + used, sizeof shown - used,
            t[i] >= 32 && t[i] < 127 && t[i] != '"' ? "%c" : "\\x%02x", t[i]);
    shown[used] = '\0';
    return ef_map_ctx_fail(ctx, EF_EFORMAT,
                           "field '%s': expected a decimal integer (the class "
                           "label) as ASCII text, got %zu bytes \"%s%s\"",
                           f->name, f->nbytes, shown,
                           f->nbytes > 40 ? "..." : "");
}

/* Finds the image and cls fields and checks that no output name is taken
 * twice. */
static int find_fields(const ef_sample *in, const ef__decode_fields *p,
                       int *img, int *cls, ef_map_ctx *ctx)
{
    *img = *cls = -1;
    for (int i = 0; i < in->nfields; i++) {
        const char *name = in->fields[i].name;
        if (is_image_field(p, name)) {
            if (*img >= 0)
                return ef_map_ctx_fail(
                    ctx, EF_ESHAPE,
                    "fields '%s' and '%s' would both become the image '%s'; "
                    "name one with option 'fields'",
                    in->fields[*img].name, name, p->as);
            *img = i;
        } else if (strcmp(name, "cls") == 0) {
            *cls = i;
        }
    }
    char names[EF__FIELD_NAMES_MAX];
    ef__image_field_names(in, names, sizeof names);
    if (*img < 0) {
        char wanted[EF__DECODE_MAX_FIELDS * (EF_MAX_NAME + 2)] = "";
        for (int i = 0; i < p->nfields; i++)
            strcat(strcat(wanted, i ? ", " : ""), p->fields[i]);
        return ef_map_ctx_fail(ctx, EF_ESHAPE,
                               "no field to decode as an image: none of %s "
                               "(option 'fields') in a sample with %s",
                               wanted, names);
    }
    for (int i = 0; i < in->nfields; i++) {
        const char *name = in->fields[i].name;
        if (i == *img || i == *cls)
            continue;
        if (strcmp(name, p->as) == 0 || (*cls >= 0 && !strcmp(name, "label")))
            return ef_map_ctx_fail(ctx, EF_ESHAPE,
                                   "the sample already has a field '%s' (it "
                                   "has %s); decoded fields would replace it",
                                   name, names);
    }
    return EF_OK;
}

/* The decoded pixels against the budget, from the image's header. A
 * header the decoder would refuse is left to it, whose message is the
 * same. A budget that holds the largest image the decoders accept (the
 * default 1 GiB does) needs no header read: nothing could be refused. */
static int check_budget(const ef__decode_fields *p,
                        const ef__decode_plan *plan, ef_map_ctx *ctx)
{
    int64_t shape[3];
    int jpeg;
    ef__err err;
    ef__err_clear(&err);
    if (!p->budget || !p->budget->limit ||
        p->budget->limit >= (uint64_t)EF__IMAGE_MAX_PIXELS * 3 ||
        ef__image_probe(plan->data, plan->size, p->channels, plan->what,
                        shape, &jpeg, &err) != EF_OK ||
        (jpeg && p->windowed))
        return EF_OK;
    uint64_t bytes = (uint64_t)shape[0] * (uint64_t)shape[1] *
                     (uint64_t)shape[2];
    int rc = ef__budget_check(p->budget, bytes, "its output", &err);
    return rc == EF_OK ? EF_OK : ef_map_ctx_fail(ctx, rc, "%s", err.msg);
}

int ef__decode_plan_sample(const ef_sample *in, const ef__decode_fields *p,
                           ef__decode_plan *plan, ef_map_ctx *ctx)
{
    int rc = find_fields(in, p, &plan->img, &plan->cls, ctx);
    plan->label = 0;
    if (rc == EF_OK && plan->cls >= 0)
        rc = decode_cls(&in->fields[plan->cls], &plan->label, ctx);
    if (rc == EF_OK)
        rc = check_bytes(&in->fields[plan->img], "image", ctx);
    if (rc != EF_OK)
        return rc;
    const ef__field *f = &in->fields[plan->img];
    plan->data = (const unsigned char *)ef_buffer_data(f->buf) + f->offset;
    plan->size = f->nbytes;
    snprintf(plan->what, sizeof plan->what, "field '%s'", f->name);
    return check_budget(p, plan, ctx);
}

static int add_label(ef_sample *o, int64_t label)
{
    int64_t *v;
    int rc = ef_sample_add_new(o, "label", EF_I64, 0, NULL, (void **)&v);
    if (rc == EF_OK)
        *v = label;
    return rc;
}

int ef__decode_output(const ef_sample *in, const ef__decode_fields *p,
                      const ef__decode_plan *plan, const ef__decoded *img,
                      ef_sample **out, ef_map_ctx *ctx)
{
    /* the fields in their order, decoded ones in place of their source */
    ef_sample *o = ef_sample_new(in->id);
    int rc = o ? EF_OK : EF_ENOMEM;
    for (int i = 0; i < in->nfields && rc == EF_OK; i++) {
        const ef__field *g = &in->fields[i];
        if (i == plan->img)
            rc = ef_sample_add(o, p->as, img->dtype, img->ndim, img->shape,
                               img->buf, img->offset);
        else if (i == plan->cls)
            rc = add_label(o, plan->label);
        else
            rc = ef__sample_add_field(o, g);
    }
    if (rc != EF_OK) {
        ef_sample_free(o);
        return ef_map_ctx_fail(ctx, rc, "out of memory");
    }
    *out = o;
    return EF_OK;
}

/* Splits option `fields` ("jpg,jpeg,png") into p->fields. */
static int parse_fields(const char *text, const char *stage,
                        ef__decode_fields *p, ef__err *err)
{
    const char *s = text;
    for (;;) {
        size_t n = strcspn(s, ",");
        while (n && s[0] == ' ')
            s++, n--;
        while (n && s[n - 1] == ' ')
            n--;
        const char *why =
            !n                                    ? "an empty name"
            : n >= EF_MAX_NAME                    ? "a name too long"
            : p->nfields == EF__DECODE_MAX_FIELDS ? "too many names"
            : n == 3 && !strncmp(s, "cls", 3)     ? "'cls' (the label field)"
                                                  : NULL;
        if (why)
            return ef__err_set(err, EF_ESPEC,
                               "stage '%s': option 'fields' has %s in "
                               "'%s'; expected up to %d comma-separated field "
                               "names of 1 to %d characters",
                               stage, why, text, EF__DECODE_MAX_FIELDS,
                               EF_MAX_NAME - 1);
        memcpy(p->fields[p->nfields], s, n);
        p->fields[p->nfields++][n] = '\0';
        s += strcspn(s, ",");
        if (!*s)
            return EF_OK;
        s++;
    }
}

int ef__decode_fields_parse(const ef__opts *o, const char *stage,
                            ef__decode_fields *p, ef__err *err)
{
    int channels = (int)ef__opt_int(o, "channels");
    const char *as = ef__opt_string(o, "as");
    if (channels == 2)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'channels' must be 0 (as "
                           "stored), 1 or 3, got 2",
                           stage);
    if (!as[0] || strlen(as) >= EF_MAX_NAME || !strcmp(as, "label"))
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option 'as' must name the image "
                           "field (1 to %d characters, not 'label'), got '%s'",
                           stage, EF_MAX_NAME - 1, as);
    strcpy(p->as, as);
    p->channels = channels;
    p->nfields = 0;
    return parse_fields(ef__opt_string(o, "fields"), stage, p, err);
}
