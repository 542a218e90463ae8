/* SPDX-License-Identifier: Apache-2.0 */
/* The stage registry: every stage by name, for the spec parser, the C
 * builder and `echoflow stages`. */
#include <pthread.h>
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

/* What ef_stage_registry_get hands out: the stages' descriptions in the
 * public structs, whose layout is part of the ABI, copied once from the
 * library's own rows (which carry more, such as flags). */
static ef_stage_info public_stages[REGISTRY_SIZE];
static ef_option_info public_options[REGISTRY_SIZE][EF__MAX_OPTIONS];
static pthread_once_t public_once = PTHREAD_ONCE_INIT;

static ef_option_info public_option(const ef__option_def *d)
{
    return (ef_option_info){.name = d->name,
                            .type = d->type,
                            .default_value = d->default_value,
                            .help = d->help,
                            .min = d->min,
                            .max = d->max};
}

static void make_public(void)
{
    for (int i = 0; i < REGISTRY_SIZE; i++) {
        const ef__stage_info *in = &registry[i]->info;
        for (int k = 0; k < in->noptions; k++)
            public_options[i][k] = public_option(&in->options[k]);
        public_stages[i] = (ef_stage_info){.name = in->name,
                                           .help = in->help,
                                           .noptions = in->noptions,
                                           .options = public_options[i]};
    }
}

const ef_stage_info *ef_stage_registry_get(int i)
{
    if (i < 0 || i >= REGISTRY_SIZE)
        return NULL;
    pthread_once(&public_once, make_public);
    return &public_stages[i];
}
