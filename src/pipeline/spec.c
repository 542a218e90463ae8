/* SPDX-License-Identifier: Apache-2.0 */
/* Splitting a text spec into stages; options are parsed by options.c. */
#include "pipeline/spec.h"

#include <ctype.h>
#include <string.h>

void ef__trim(const char **s, size_t *len)
{
    while (*len && isspace((unsigned char)**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len && isspace((unsigned char)(*s)[*len - 1]))
        (*len)--;
}

static int parse_stage(const char *text, size_t len, int position,
                       int (*fn)(void *, const ef__spec_stage *, ef__err *),
                       void *arg, ef__err *err)
{
    ef__spec_stage st = {0};
    st.position = position;
    ef__trim(&text, &len);
    if (len == 0)
        return ef__err_set(err, EF_ESPEC,
                           "stage %d of the spec is empty (two '|' in a row, "
                           "or a '|' at an end?)",
                           position);
    const char *colon = memchr(text, ':', len);
    st.name = text;
    st.name_len = colon ? (size_t)(colon - text) : len;
    ef__trim(&st.name, &st.name_len);
    if (st.name_len == 0)
        return ef__err_set(err, EF_ESPEC, "stage %d of the spec has no name",
                           position);
    for (size_t i = 0; i < st.name_len; i++)
        if (!isalnum((unsigned char)st.name[i]) && st.name[i] != '_')
            return ef__err_set(err, EF_ESPEC,
                               "stage %d: '%.*s' is not a stage name "
                               "(expected NAME[:OPTIONS])",
                               position, (int)st.name_len, st.name);
    if (colon) {
        st.opts = colon + 1;
        st.opts_len = len - (size_t)(st.opts - text);
        ef__trim(&st.opts, &st.opts_len);
        if (st.opts_len == 0)
            return ef__err_set(err, EF_ESPEC,
                               "stage '%.*s': ':' must be followed by options "
                               "(key=value,...)",
                               (int)st.name_len, st.name);
    } else {
        st.opts = text + len;
        st.opts_len = 0;
    }
    return fn(arg, &st, err);
}

const char *ef_spec_stage(const char *spec, const char **begin, size_t *len)
{
    const char *p = spec;
    for (int quoted = 0; *p && (*p != '|' || quoted); p++)
        quoted ^= *p == '"';
    *begin = spec;
    *len = (size_t)(p - spec);
    ef__trim(begin, len);
    return *p ? p + 1 : NULL;
}

int ef__spec_parse(const char *spec,
                   int (*fn)(void *arg, const ef__spec_stage *st, ef__err *err),
                   void *arg, ef__err *err)
{
    int quotes = 0;
    for (const char *p = spec; *p; p++)
        quotes += *p == '"';
    if (quotes % 2)
        return ef__err_set(err, EF_ESPEC,
                           "unbalanced '\"' in the spec: quotes come in pairs "
                           "around a value");
    int position = 1;
    for (const char *rest = spec; rest;) {
        const char *text;
        size_t len;
        rest = ef_spec_stage(rest, &text, &len);
        int rc = parse_stage(text, len, position++, fn, arg, err);
        if (rc != EF_OK)
            return rc;
    }
    return EF_OK;
}
