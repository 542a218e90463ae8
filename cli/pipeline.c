/* SPDX-License-Identifier: Apache-2.0 */
/* Creating a subcommand's pipeline (see cli.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

ef_pipeline *cli_pipeline(const char *prog, const char *what,
                          const cli_pipeline_opts *o, const char *spec,
                          int64_t shard, int64_t nshards)
{
    ef_pipeline *p;
    if (ef_pipeline_create(&p) != EF_OK) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return NULL;
    }
    int skip = o->on_error && !strcmp(o->on_error, "skip");
    ef_status rc = ef_pipeline_set_seed(p, o->seed);
    if (rc == EF_OK)
        rc = ef_pipeline_set_on_error(p, skip ? EF_ON_ERROR_SKIP
                                              : EF_ON_ERROR_FAIL);
    if (rc == EF_OK && o->budget_given)
        rc = ef_pipeline_set_memory_budget(p, o->memory_budget);
    if (rc == EF_OK && nshards > 1)
        rc = ef_pipeline_set_shard(p, shard, nshards);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(p, spec);
    if (rc != EF_OK) {
        fprintf(stderr, "%s: %s%s%s\n", prog, what ? what : "",
                what ? ": " : "", ef_pipeline_error(p));
        ef_pipeline_destroy(p);
        return NULL;
    }
    return p;
}
