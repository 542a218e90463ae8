/* SPDX-License-Identifier: Apache-2.0 */
/* Typed stage options: parsing "key=value,..." against a stage's schema.
 * Out-of-range and malformed values are errors naming the stage, the option
 * and what is allowed; nothing is clamped. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "pipeline/spec.h"
#include "pipeline/stage.h"

static int find_def(const ef__stage_def *def, const char *key, size_t len)
{
    for (int i = 0; i < def->info.noptions; i++) {
        const char *name = def->info.options[i].name;
        if (strlen(name) == len && strncmp(name, key, len) == 0)
            return i;
    }
    return -1;
}

static void list_options(const ef__stage_def *def, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < def->info.noptions && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i ? ", " : "",
                                 def->info.options[i].name);
    if (def->info.noptions == 0)
        snprintf(buf, cap, "none");
}

/* Splits the next comma-separated token; a value in double quotes may hold
 * commas. Returns 0 at the end of the text. */
static int next_token(const char **p, const char *end, const char **tok,
                      size_t *len)
{
    if (*p > end)
        return 0;
    const char *s = *p;
    int quoted = 0;
    const char *q = s;
    for (; q < end; q++) {
        if (*q == '"')
            quoted = !quoted;
        else if (*q == ',' && !quoted)
            break;
    }
    *tok = s;
    *len = (size_t)(q - s);
    *p = q + 1;
    return 1;
}

static int range_error(const ef__stage_def *def, const ef__option_def *od,
                       const char *raw, ef__err *err)
{
    /* integer bounds print whole: "1 and 16777216", not "1.67772e+07" */
    char lo[32], hi[32];
    if (od->type == EF_OPT_INT || od->type == EF_OPT_INT_AUTO) {
        snprintf(lo, sizeof lo, "%.0f", od->min);
        snprintf(hi, sizeof hi, "%.0f", od->max);
    } else {
        snprintf(lo, sizeof lo, "%g", od->min);
        snprintf(hi, sizeof hi, "%g", od->max);
    }
    const char *or_auto = od->type == EF_OPT_INT_AUTO ? " or 'auto'" : "";
    if (od->max >= 1e300)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option '%s' must be >= %s%s (got %s)",
                           def->info.name, od->name, lo, or_auto, raw);
    return ef__err_set(err, EF_ESPEC,
                       "stage '%s': option '%s' must be between %s and %s%s "
                       "(got %s)",
                       def->info.name, od->name, lo, hi, or_auto, raw);
}

static int convert(const ef__stage_def *def, const ef__option_def *od,
                   const char *raw, ef__opt_value *v, ef__err *err)
{
    char *endp;
    const char *what = ef_opt_type_name(od->type);
    switch (od->type) {
    case EF_OPT_INT_AUTO:
        if (strcmp(raw, "auto") == 0) {
            v->i = 0; /* below every min: unambiguous */
            return EF_OK;
        }
        /* fall through */
    case EF_OPT_INT: {
        errno = 0;
        long long x = strtoll(raw, &endp, 10);
        if (!*raw || *endp || errno)
            break;
        /* compare as integers: near 2^63 a double cannot tell n from n+1
         * (every bound in the schemas is an exact integer below 2^63) */
        if (x < (long long)od->min || x > (long long)od->max)
            return range_error(def, od, raw, err);
        v->i = x;
        return EF_OK;
    }
    case EF_OPT_FACTOR:
        if (strcmp(raw, "auto") == 0) {
            v->f = 0;
            return EF_OK;
        }
        /* fall through */
    case EF_OPT_FLOAT: {
        errno = 0;
        double x = strtod(raw, &endp);
        if (!*raw || *endp || errno || !isfinite(x))
            break;
        if (x < od->min || x > od->max)
            return range_error(def, od, raw, err);
        v->f = x;
        return EF_OK;
    }
    case EF_OPT_BOOL:
        if (!strcasecmp(raw, "true") || !strcmp(raw, "1") ||
            !strcasecmp(raw, "yes") || !strcasecmp(raw, "on")) {
            v->b = 1;
            return EF_OK;
        }
        if (!strcasecmp(raw, "false") || !strcmp(raw, "0") ||
            !strcasecmp(raw, "no") || !strcasecmp(raw, "off")) {
            v->b = 0;
            return EF_OK;
        }
        what = "bool (true or false)";
        break;
    case EF_OPT_STRING:
        v->s = raw;
        return EF_OK;
    }
    if (od->type == EF_OPT_FACTOR)
        what = "number >= 1 or 'auto'";
    if (od->type == EF_OPT_INT_AUTO)
        what = "int or 'auto'";
    return ef__err_set(
        err, EF_ESPEC, "stage '%s': option '%s' expects %s %s, got '%s'",
        def->info.name, od->name,
        od->type == EF_OPT_INT || od->type == EF_OPT_INT_AUTO ? "an" : "a",
        what, raw);
}

/* Copies a value, dropping surrounding double quotes. */
static char *copy_value(const char *v, size_t len)
{
    if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
        v++;
        len -= 2;
    }
    char *s = ef__malloc(len + 1);
    if (s) {
        memcpy(s, v, len);
        s[len] = '\0';
    }
    return s;
}

/* The option a key=value token names (`eq` at its '='), and the value's
 * text as [*val, *val + *vlen). */
static int keyed_option(const ef__stage_def *def, const char *tok, size_t tlen,
                        const char *eq, int *idx, const char **val,
                        size_t *vlen, ef__err *err)
{
    const char *name = def->info.name;
    size_t klen = (size_t)(eq - tok);
    const char *key = tok;
    ef__trim(&key, &klen);
    if (klen == 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option '%.*s' has no name", name,
                           (int)tlen, tok);
    *idx = find_def(def, key, klen);
    if (*idx < 0) {
        char opts[256];
        list_options(def, opts, sizeof opts);
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': unknown option '%.*s' (options: %s)",
                           name, (int)klen, key, opts);
    }
    *val = eq + 1;
    *vlen = tlen - (size_t)(*val - tok);
    ef__trim(val, vlen);
    return EF_OK;
}

/* A bare value is the first option's, and only when given first; `last`
 * is the option given last (-1 for none) and given[] their values. */
static int bare_option(const ef__stage_def *def, const char *tok, size_t tlen,
                       int last, char *const *given, ef__err *err)
{
    const char *name = def->info.name;
    if (last >= 0) /* a list with commas, not quoted? */
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': '%.*s' needs a name (key=value); "
                           "only the first option may be given bare. "
                           "If it is part of the list before it, quote "
                           "the list: %s=\"%s,%.*s\"",
                           name, (int)tlen, tok, def->info.options[last].name,
                           given[last], (int)tlen, tok);
    if (def->info.noptions == 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': '%.*s' needs a name (key=value); "
                           "only the first option may be given bare",
                           name, (int)tlen, tok);
    return EF_OK;
}

/* One option of the text, key=value or bare: its value's copy goes to
 * given[] and its bit to o->given; *last becomes its index. */
static int take_option(ef__opts *o, const ef__stage_def *def, const char *tok,
                       size_t tlen, char **given, int *last, ef__err *err)
{
    const char *name = def->info.name;
    ef__trim(&tok, &tlen);
    if (tlen == 0)
        return ef__err_set(err, EF_ESPEC, "stage '%s': empty option", name);
    const char *eq = memchr(tok, '=', tlen);
    int idx = 0;
    const char *val = tok;
    size_t vlen = tlen;
    int rc = eq ? keyed_option(def, tok, tlen, eq, &idx, &val, &vlen, err)
                : bare_option(def, tok, tlen, *last, given, err);
    if (rc != EF_OK)
        return rc;
    if (given[idx])
        return ef__err_set(err, EF_ESPEC, "stage '%s': option '%s' given twice",
                           name, def->info.options[idx].name);
    given[idx] = copy_value(val, vlen);
    o->given |= 1u << idx;
    *last = idx;
    return given[idx] ? EF_OK : ef__err_set(err, EF_ENOMEM, "out of memory");
}

/* Every option's value, from its text in given[] or else its default,
 * converted into o->values; the texts stay in given[]. */
static int convert_all(ef__opts *o, const ef__stage_def *def, char **given,
                       ef__err *err)
{
    int rc = EF_OK;
    for (int i = 0; i < o->n && rc == EF_OK; i++) {
        const ef__option_def *od = &def->info.options[i];
        if (!given[i]) {
            if (!od->default_value)
                return ef__err_set(err, EF_ESPEC,
                                   "stage '%s': option '%s' is required (%s)",
                                   def->info.name, od->name, od->help);
            given[i] = ef__strdup(od->default_value);
            if (!given[i])
                return ef__err_set(err, EF_ENOMEM, "out of memory");
            if (!given[i][0]) /* no default: leave the value zero */
                continue;
        }
        rc = convert(def, od, given[i], &o->values[i], err);
    }
    return rc;
}

int ef__opts_parse(ef__opts *o, const ef__stage_def *def, const char *text,
                   size_t len, ef__err *err)
{
    char *given[EF__MAX_OPTIONS] = {0};
    int rc = EF_OK;
    memset(o, 0, sizeof *o);
    o->n = def->info.noptions;
    o->defs = def->info.options;

    const char *p = text;
    const char *tok;
    size_t tlen;
    int last = -1; /* the option given last */
    ef__trim(&p, &len);
    const char *end = p + len;
    while (len && rc == EF_OK && next_token(&p, end, &tok, &tlen))
        rc = take_option(o, def, tok, tlen, given, &last, err);
    if (rc == EF_OK)
        rc = convert_all(o, def, given, err);
    for (int i = 0; i < EF__MAX_OPTIONS; i++)
        o->strings[i] = given[i];
    if (rc != EF_OK)
        ef__opts_free(o);
    return rc;
}

void ef__opts_free(ef__opts *o)
{
    for (int i = 0; i < EF__MAX_OPTIONS; i++) {
        ef__free(o->strings[i]);
        o->strings[i] = NULL;
    }
}

static int index_of(const ef__opts *o, const char *name)
{
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->defs[i].name, name) == 0)
            return i;
    /* asking for an option the schema lacks is a programming error */
    fprintf(stderr, "echoflow: internal error: no option '%s'\n", name);
    abort();
}

int64_t ef__opt_int(const ef__opts *o, const char *name)
{
    return o->values[index_of(o, name)].i;
}

double ef__opt_float(const ef__opts *o, const char *name)
{
    return o->values[index_of(o, name)].f;
}

double ef__opt_factor(const ef__opts *o, const char *name)
{
    return o->values[index_of(o, name)].f;
}

int ef__opt_given(const ef__opts *o, const char *name)
{
    return (o->given >> index_of(o, name)) & 1u;
}

int ef__opt_bool(const ef__opts *o, const char *name)
{
    return o->values[index_of(o, name)].b;
}

const char *ef__opt_string(const ef__opts *o, const char *name)
{
    const char *s = o->strings[index_of(o, name)];
    return s ? s : "";
}

const char *ef_opt_type_name(ef_opt_type type)
{
    switch (type) {
    case EF_OPT_INT:
        return "int";
    case EF_OPT_FLOAT:
        return "float";
    case EF_OPT_BOOL:
        return "bool";
    case EF_OPT_STRING:
        return "string";
    case EF_OPT_FACTOR:
        return "factor";
    case EF_OPT_INT_AUTO:
        return "int|auto";
    }
    return "?";
}

/* Whether an option shapes what a stage emits from a state: those
 * flagged EF__SPEED_ONLY or EF__START_ONLY on their rows do not, and a
 * state saved with one value of them restores under another. */
static int changes_output(const ef__option_def *d)
{
    return !(d->flags & (EF__SPEED_ONLY | EF__START_ONLY));
}

void ef__opts_format(const ef__opts *o, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < o->n && used < cap; i++) {
        const ef__option_def *d = &o->defs[i];
        if (!changes_output(d))
            continue;
        const char *sep = used ? "," : "";
        const ef__opt_value *v = &o->values[i];
        switch (d->type) {
        case EF_OPT_INT:
        case EF_OPT_INT_AUTO:
            used += (size_t)snprintf(buf + used, cap - used, "%s%s=%lld", sep,
                                     d->name, (long long)v->i);
            break;
        case EF_OPT_FLOAT:
        case EF_OPT_FACTOR:
            used += (size_t)snprintf(buf + used, cap - used, "%s%s=%.17g",
                                     sep, d->name, v->f);
            break;
        case EF_OPT_BOOL:
            used += (size_t)snprintf(buf + used, cap - used, "%s%s=%s", sep,
                                     d->name, v->b ? "true" : "false");
            break;
        case EF_OPT_STRING:
            used += (size_t)snprintf(buf + used, cap - used, "%s%s=%s", sep,
                                     d->name,
                                     o->strings[i] ? o->strings[i] : "");
            break;
        }
    }
}

int ef__opt_choice(const ef__opts *o, const char *stage, const char *name,
                   const char *a, const char *b, int *is_a, ef__err *err)
{
    const char *v = ef__opt_string(o, name);
    if (strcmp(v, a) && strcmp(v, b))
        return ef__err_set(err, EF_ESPEC,
                           "stage '%s': option '%s' must be %s or %s, got "
                           "'%s'",
                           stage, name, a, b, v);
    *is_a = !strcmp(v, a);
    return EF_OK;
}

typedef struct {
    char *buf;
    size_t cap, used;
} canon_out;

static int canon_stage(void *arg, const ef__spec_stage *st, ef__err *err)
{
    canon_out *c = arg;
    char name[64];
    if (st->name_len >= sizeof name)
        return ef__err_set(err, EF_ESPEC, "stage %d: name too long",
                           st->position);
    memcpy(name, st->name, st->name_len);
    name[st->name_len] = '\0';
    const ef__stage_def *def = ef__stage_find(name);
    if (!def)
        return ef__err_set(err, EF_ESPEC, "stage %d: no stage '%s'",
                           st->position, name);
    ef__opts o;
    int rc = ef__opts_parse(&o, def, st->opts, st->opts_len, err);
    if (rc != EF_OK)
        return rc;
    char opts[1024];
    ef__opts_format(&o, opts, sizeof opts);
    ef__opts_free(&o);
    if (strlen(opts) >= sizeof opts - 1) /* perhaps cut: no telling */
        return ef__err_set(err, EF_ESPEC, "the spec is too long to compare");
    int n = snprintf(c->buf + c->used, c->cap - c->used, "%s%s:%s",
                     c->used ? " | " : "", name, opts);
    if (n < 0 || (size_t)n >= c->cap - c->used)
        return ef__err_set(err, EF_ESPEC, "the spec is too long to compare");
    c->used += (size_t)n;
    return EF_OK;
}

int ef__spec_canonical(const char *spec, char *buf, size_t cap, ef__err *err)
{
    assert(cap > 0);
    canon_out c = {buf, cap, 0};
    buf[0] = '\0';
    return ef__spec_parse(spec, canon_stage, &c, err);
}

/* Whether s is a number and nothing else; its value in *v. */
static int number(const char *s, double *v)
{
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return end != s && *end == '\0' && errno == 0;
}

int ef__setting_same(const char *name, const char *a, const char *b)
{
    double x, y;
    if (strcmp(a, b) == 0)
        return 1;
    if (number(a, &x) && number(b, &y))
        return x == y;
    if (strcmp(name, "the spec") != 0)
        return 0;
    char ca[4096], cb[4096];
    ef__err err;
    ef__err_clear(&err);
    return ef__spec_canonical(a, ca, sizeof ca, &err) == EF_OK &&
           ef__spec_canonical(b, cb, sizeof cb, &err) == EF_OK &&
           strcmp(ca, cb) == 0;
}
