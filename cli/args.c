/* SPDX-License-Identifier: Apache-2.0 */
/* The argument parser (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A seed: digits only, every value to 2^64 - 1. 0, or -1 with
 * "PROG: OPT expects ..." on stderr. */
static int args_seed(const char *prog, const char *opt, const char *text,
                     uint64_t *out)
{
    char *end = (char *)text;
    unsigned long long v = 0;
    errno = 0;
    /* digits only: strtoull would take spaces, '+', and a '-' that wraps */
    if (text[0] >= '0' && text[0] <= '9')
        v = strtoull(text, &end, 10);
    if (end == text || *end || errno == ERANGE) {
        fprintf(stderr,
                "%s: %s expects a whole number from 0 to %llu, got '%s'\n",
                prog, opt, (unsigned long long)UINT64_MAX, text);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

/* A size in bytes, with K, M, G or T (binary). As args_seed. */
static int args_size(const char *prog, const char *opt, const char *text,
                     uint64_t *out)
{
    static const char suffixes[] = "KMGT";
    char *end = (char *)text;
    unsigned long long v = 0;
    errno = 0;
    if (text[0] >= '0' && text[0] <= '9')
        v = strtoull(text, &end, 10);
    int digits = end != text, shift = 0;
    const char *sfx = *end ? strchr(suffixes, *end) : NULL;
    if (sfx) {
        shift = 10 * (int)(sfx - suffixes + 1);
        end++;
    }
    if (!digits || *end || errno == ERANGE ||
        (shift && v > (UINT64_MAX >> shift))) {
        fprintf(stderr,
                "%s: %s expects a size in bytes, with K, M, G or T for "
                "binary multiples (512M, 2G), or 0 for no limit; got '%s'\n",
                prog, opt, text);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* A number in [min, max]; `whole` refuses fractions. strtod takes "nan"
 * and "inf": both fail the finite range test. */
static int number(const char *prog, const arg_opt *o, const char *text,
                  int whole, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno || !isfinite(v) || v < o->min ||
        v > o->max || (whole && v != floor(v))) {
        fprintf(stderr, "%s: %s expects a %s from %.15g to %.15g, got '%s'\n",
                prog, o->name, whole ? "whole number" : "number", o->min,
                o->max, text);
        return -1;
    }
    *out = v;
    return 0;
}

/* Whether `text` is one of the '|'-separated `choices`. */
static int is_choice(const char *choices, const char *text)
{
    size_t n = strlen(text);
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        if (n && len == n && !strncmp(c, text, n))
            return 1;
        c += len + (c[len] == '|');
    }
    return 0;
}

/* "a|b|c" as people write it: "a, b or c". */
static void print_choices(FILE *f, const char *choices)
{
    for (const char *c = choices; *c;) {
        size_t len = strcspn(c, "|");
        fprintf(f, "%.*s", (int)len, c);
        c += len + (c[len] == '|');
        if (*c)
            fputs(strchr(c, '|') ? ", " : " or ", f);
    }
}

static int take_value(const char *prog, const arg_opt *o, const char *text)
{
    double v;
    switch (o->kind) {
    case ARG_STRING:
        *(const char **)o->dest = text;
        return 0;
    case ARG_CHOICE:
        if (!is_choice(o->choices, text)) {
            fprintf(stderr, "%s: %s expects ", prog, o->name);
            print_choices(stderr, o->choices);
            fprintf(stderr, ", got '%s'\n", text);
            return -1;
        }
        *(const char **)o->dest = text;
        return 0;
    case ARG_DOUBLE:
        return number(prog, o, text, 0, (double *)o->dest);
    case ARG_INT:
        if (number(prog, o, text, 1, &v))
            return -1;
        *(int *)o->dest = (int)v;
        return 0;
    case ARG_LONG:
        if (number(prog, o, text, 1, &v))
            return -1;
        *(long *)o->dest = (long)v;
        return 0;
    case ARG_SEED:
        return args_seed(prog, o->name, text, (uint64_t *)o->dest);
    case ARG_SIZE:
        return args_size(prog, o->name, text, (uint64_t *)o->dest);
    default:
        return -1;
    }
}

static const arg_opt *find(const arg_command *c, const char *name, size_t n)
{
    for (int i = 0; i < c->nopts; i++) {
        const arg_opt *o = &c->opts[i];
        if (o->kind != ARG_HEADING && strlen(o->name) == n &&
            !strncmp(o->name, name, n))
            return o;
    }
    return NULL;
}

static int refuse(const arg_command *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int refuse(const arg_command *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", c->prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    args_usage(c, stderr);
    return -1;
}

int args_parse(const arg_command *c, int argc, char **argv, const char **pos)
{
    int npos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            args_usage(c, stdout);
            return 1;
        }
        if (a[0] != '-' || !a[1]) { /* "-" alone is a value */
            if (npos == c->npositional)
                return refuse(c, "unexpected argument '%s' (quote a SPEC "
                                 "that holds spaces)",
                              a);
            pos[npos++] = a;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t n = eq ? (size_t)(eq - a) : strlen(a);
        const arg_opt *o = find(c, a, n);
        if (!o)
            return refuse(c, "unknown option '%s'", a);
        if (o->kind == ARG_FLAG) {
            if (eq)
                return refuse(c, "option '%s' takes no value", a);
            *(int *)o->dest = 1;
        } else {
            if (!eq && i + 1 >= argc)
                return refuse(c, "option %s needs a value", a);
            if (take_value(c->prog, o, eq ? eq + 1 : argv[++i]))
                return -1;
        }
        if (o->given)
            *o->given = 1;
    }
    if (npos < c->npositional)
        return refuse(c, "needs %s", c->positional);
    return 0;
}

/* The value an option holds before parsing, as "(default X)"; "" when
 * there is none: flags, seeds and sizes (their help says), strings still
 * NULL, and numbers outside their range, which mean "not given". */
static void default_text(const arg_opt *o, char *buf, size_t len)
{
    double v = 0;
    buf[0] = 0;
    switch (o->kind) {
    case ARG_DOUBLE:
        v = *(const double *)o->dest;
        break;
    case ARG_INT:
        v = *(const int *)o->dest;
        break;
    case ARG_LONG:
        v = (double)*(const long *)o->dest;
        break;
    case ARG_STRING:
    case ARG_CHOICE:
        if (*(const char *const *)o->dest)
            snprintf(buf, len, "(default %s)",
                     *(const char *const *)o->dest);
        return;
    default:
        return;
    }
    if (v >= o->min && v <= o->max)
        snprintf(buf, len, "(default %.15g)", v);
}

void args_usage(const arg_command *c, FILE *f)
{
    fprintf(f, "usage: %s [options]%s%s\n", c->prog, c->npositional ? " " : "",
            c->npositional ? c->positional : "");
    for (int i = 0; i < c->nopts; i++) {
        const arg_opt *o = &c->opts[i];
        if (o->kind == ARG_HEADING) {
            fprintf(f, "%s\n", o->name);
            continue;
        }
        char left[64];
        const char *value = o->kind == ARG_FLAG ? ""
                            : o->value          ? o->value
                            : o->choices        ? o->choices
                                                : "VALUE";
        snprintf(left, sizeof left, "%s%s%s", o->name, *value ? " " : "",
                 value);
        char def[96];
        default_text(o, def, sizeof def);
        /* the help's lines, the first beside the option, the rest under */
        const char *h = o->help;
        for (int first = 1;; first = 0) {
            size_t len = strcspn(h, "\n");
            int last = !h[len];
            if (first && strlen(left) > 24)
                fprintf(f, "  %s\n%28s", left, "");
            else
                fprintf(f, "  %-26s", first ? left : "");
            fprintf(f, "%.*s", (int)len, h);
            if (last && *def && 28 + len + 1 + strlen(def) > 80)
                fprintf(f, "\n%28s%s", "", def); /* too long for the line */
            else if (last && *def)
                fprintf(f, " %s", def);
            fputc('\n', f);
            if (last)
                break;
            h += len + 1;
        }
    }
    if (c->about)
        fprintf(f, "\n%s", c->about);
}
