/* SPDX-License-Identifier: Apache-2.0 */
/* What `select` and `drop` share: their list of field names, and the
 * sample that keeps or loses those fields. */
#ifndef EF_STAGES_FLOW_FIELD_LIST_H
#define EF_STAGES_FLOW_FIELD_LIST_H

#include "pipeline/stage.h"

typedef struct {
    char **names;
    int n;
} ef__field_list;

/* Option `fields` of stage s ("jpg,cls"; quoted in a spec when it holds a
 * comma) into s->state, a new ef__field_list: 1 to EF_MAX_FIELDS names
 * of 1 to EF_MAX_NAME - 1 bytes, none twice. */
int ef__field_list_create(ef__stage *s, const ef__opts *o, ef__err *err);
/* Frees the stage's list. */
void ef__field_list_destroy(ef__stage *s);

/* The next item of the upstream with only the listed fields (keep = 1,
 * every one of them required) or without them (keep = 0, those absent
 * ignored). */
int ef__field_list_next(ef__stage *s, int keep, ef_sample **out,
                        ef__err *err);
/* The same for the upstream's item made again (fetch). */
int ef__field_list_fetch(ef__stage *s, int keep, const struct ef__ident *d,
                         ef_sample **out, ef__err *err);

#endif
