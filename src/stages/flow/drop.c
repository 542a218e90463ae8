/* SPDX-License-Identifier: Apache-2.0 */
/* drop: remove the listed fields (absent ones ignored), sharing the payloads (field_list.h). */
#include "pipeline/stage.h"
#include "stages/flow/field_list.h"

static int drop_next(ef__stage *s, ef_sample **out, ef__err *err)
{
    return ef__field_list_next(s, 0, out, err);
}

static int drop_fetch(ef__stage *s, const struct ef__ident *d,
                      ef_sample **out, ef__err *err)
{
    return ef__field_list_fetch(s, 0, d, out, err);
}

static const ef__option_def drop_options[] = {
    EF__OPT("fields", EF_OPT_STRING, NULL,
            "comma-separated field names (quoted: fields=\"a,b\")", 0, 0),
};

const ef__stage_def ef__stage_drop = {
    .info = {"drop", "remove the listed fields (absent ones ignored)", EF__OPTIONS(drop_options)},
    .create = ef__field_list_create,
    .next = drop_next,
    .destroy = ef__field_list_destroy,
    .fetch = drop_fetch,
};
