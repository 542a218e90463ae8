/* SPDX-License-Identifier: Apache-2.0 */
/* select: keep only the listed fields (each one required), sharing the payloads (field_list.h). */
#include "pipeline/stage.h"
#include "stages/flow/field_list.h"

static int select_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return ef__field_list_next(s, 1, out, err);
}

static int select_fetch(ef__stage *s, const struct ef__ident *d,
                      ef_sample **out, ef__err *err)
{
    return ef__field_list_fetch(s, 1, d, out, err);
}

static const ef__option_def select_options[] = {
    EF__OPT("fields", EF_OPT_STRING, NULL,
            "comma-separated field names (quoted: fields=\"a,b\")", 0, 0),
};

const ef__stage_def ef__stage_select = {
    .info = {"select", "keep only the listed fields (each one required)", EF__OPTIONS(select_options)},
    .create = ef__field_list_create,
    .next = select_next,
    .destroy = ef__field_list_destroy,
    .fetch = select_fetch,
};
