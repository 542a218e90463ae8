/* SPDX-License-Identifier: Apache-2.0 */
/* The stage registry: every stage by name, for the spec parser, the C
 * builder and `echoflow stages`. */
#include <string.h>

#include "pipeline/stage.h"

static const ef__stage_def *const registry[] = {
#define EF_STAGE(folder, name) &ef__stage_##name,
#include "stages/list.h"
#undef EF_STAGE
};

#define REGISTRY_SIZE ((int)(sizeof registry / sizeof registry[0]))

const ef__stage_def *ef__stage_find(const char *name)
{
    for (int i = 0; i < REGISTRY_SIZE; i++)
        if (strcmp(registry[i]->info.name, name) == 0)
            return registry[i];
    return NULL;
}

int ef_stage_registry_count(void)
{
    return REGISTRY_SIZE;
}

const ef_stage_info *ef_stage_registry_get(int i)
{
    return i >= 0 && i < REGISTRY_SIZE ? &registry[i]->info : NULL;
}
