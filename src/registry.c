/* The stage registry: every stage by name, for the spec parser, the C
 * builder and `echoflow stages`. */
#include <string.h>

#include "stage.h"

static const ef__stage_def *const registry[] = {
    &ef__stage_range,
    &ef__stage_idx,
    &ef__stage_map,
    &ef__stage_shuffle,
    &ef__stage_echo,
    &ef__stage_batch,
    &ef__stage_prefetch,
    &ef__stage_repeat,
    &ef__stage_take,
    &ef__stage_throttle,
    &ef__stage_random_crop,
    &ef__stage_flip,
    &ef__stage_decode,
    &ef__stage_resize,
    &ef__stage_random_resized_crop,
    &ef__stage_normalize,
    &ef__stage_to_chw,
    &ef__stage_cast,
    &ef__stage_tar,
    &ef__stage_tfrecord,
    &ef__stage_cifar,
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
