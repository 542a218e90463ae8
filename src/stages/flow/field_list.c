/* SPDX-License-Identifier: Apache-2.0 */
/* select and drop (field_list.h). The output is a clone of the input
 * less some fields: no payload is copied, and a ragged field stays
 * ragged. */
#include "stages/flow/field_list.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/sample.h"

static int has(const ef__field_list *l, const char *name)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], name) == 0)
            return 1;
    return 0;
}

static int bad_list(ef__stage *s, const char *text, const char *why,
                    ef__err *err)
{
    return ef__err_set(err, EF_ESPEC,
                       "%s: option 'fields' %s in '%s'; expected 1 to %d "
                       "comma-separated field names of 1 to %d bytes, each "
                       "once (quote the list in a spec: fields=\"a,b\")",
                       s->def->info.name, why, text, EF_MAX_FIELDS,
                       EF_MAX_NAME - 1);
}

int ef__field_list_create(ef__stage *s, const ef__opts *o, ef__err *err)
{
    ef__field_list *l = ef__stage_new_state(s, sizeof *l, err);
    if (!l)
        return EF_ENOMEM;
    const char *text = ef__opt_string(o, "fields");
    for (const char *p = text;; p++) {
        size_t n = strcspn(p, ",");
        while (n && *p == ' ')
            p++, n--;
        while (n && p[n - 1] == ' ')
            n--;
        if (n == 0)
            return bad_list(s, text, "has an empty name", err);
        if (n >= EF_MAX_NAME)
            return bad_list(s, text, "has a name too long", err);
        if (l->n == EF_MAX_FIELDS)
            return bad_list(s, text, "has too many names", err);
        char *name = ef__malloc(n + 1);
        char **names = ef__realloc(l->names, (size_t)(l->n + 1) *
                                                 sizeof *names);
        if (names)
            l->names = names;
        if (!name || !names) {
            ef__free(name);
            return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                               s->def->info.name);
        }
        memcpy(name, p, n);
        name[n] = '\0';
        if (has(l, name)) {
            ef__free(name);
            return bad_list(s, text, "names a field twice", err);
        }
        l->names[l->n++] = name;
        p += strcspn(p, ",");
        if (!*p)
            return EF_OK;
    }
}

void ef__field_list_destroy(ef__stage *s)
{
    ef__field_list *l = s->state;
    for (int i = 0; l && i < l->n; i++)
        ef__free(l->names[i]);
    if (l)
        ef__free(l->names);
    ef__free(l);
}

/* The item in *out less the fields it should lose. Samples are immutable
 * once handed over, so they go from a clone, which shares the payloads. */
static int filter(ef__stage *s, int keep, ef_sample **out, ef__err *err)
{
    const ef__field_list *l = s->state;
    ef_sample *in = *out;
    *out = NULL;
    for (int i = 0; keep && i < l->n; i++) {
        if (ef__sample_find(in, l->names[i]) >= 0)
            continue;
        char where[EF__ERR_MAX / 2], names[EF__ERR_MAX / 2] = "none";
        ef__stage_where(s, in, where, sizeof where);
        size_t used = 0;
        for (int f = 0; f < in->nfields && used < sizeof names; f++)
            used += (size_t)snprintf(names + used, sizeof names - used,
                                     "%s%s", f ? ", " : "",
                                     in->fields[f].name);
        ef__err_set(err, EF_ESHAPE, "%s: %s has no field '%s' (it has: %s)",
                    s->def->info.name, where, l->names[i], names);
        ef_sample_free(in);
        return ef__stage_skip(s, err) ? EF_AGAIN : err->status;
    }
    ef_sample *c = ef_sample_clone(in);
    ef_sample_free(in);
    if (!c)
        return ef__err_set(err, EF_ENOMEM, "%s: out of memory",
                           s->def->info.name);
    for (int i = c->nfields - 1; i >= 0; i--)
        if (has(l, c->fields[i].name) != keep)
            ef__sample_remove(c, i);
    *out = c;
    return EF_OK;
}

int ef__field_list_next(ef__stage *s, int keep, ef_sample **out,
                        ef__err *err)
{
    for (;;) {
        int rc = ef__stage_pull(s, out, err);
        if (rc == EF_OK)
            rc = filter(s, keep, out, err);
        if (rc != EF_AGAIN) /* EF_AGAIN: skipped, take the next */
            return rc;
    }
}

int ef__field_list_fetch(ef__stage *s, int keep, const struct ef__ident *d,
                         ef_sample **out, ef__err *err)
{
    int rc = ef__stage_fetch(s->up, d, out, err);
    if (rc != EF_OK || !*out)
        return rc;
    rc = filter(s, keep, out, err);
    return rc == EF_AGAIN ? EF_OK : rc; /* skipped: *out is NULL */
}
