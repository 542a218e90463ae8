/* SPDX-License-Identifier: Apache-2.0 */
/* The echoflow command's subcommands and what they share. */
#ifndef EF_CLI_H
#define EF_CLI_H

#include <stdint.h>

#include "args.h"
#include "echoflow/echoflow.h"

int cmd_run(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_tokens(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* The options of every subcommand that runs a pipeline. */
typedef struct {
    uint64_t seed;
    const char *on_error; /* "fail" or "skip"; NULL: fail */
    uint64_t memory_budget;
    int seed_given, budget_given;
} cli_pipeline_opts;

/* Their entries in a subcommand's option table. */
#define CLI_PIPELINE_ARGS(o)                                                   \
    {"--seed", ARG_SEED, &(o)->seed, &(o)->seed_given, 0, 0, NULL, "S",        \
     "the seed of every random choice, 0 to 2^64 - 1\n"                     \
     "(default 0)"},            \
        {"--on-error", ARG_CHOICE, &(o)->on_error, NULL, 0, 0, "fail|skip",    \
         NULL,                                                                 \
         "skip: drop bad samples and unreadable shards,\n"                   \
         "and count them; fail (default): stop at the first"},                                \
        {"--memory-budget", ARG_SIZE, &(o)->memory_budget,                     \
         &(o)->budget_given, 0, 0, NULL, "SIZE",                               \
         "bytes the queues and buffers may hold, as 512M\n"                  \
         "or 2G (default 1G; 0: no limit)"}

/* A pipeline with the options applied and `spec` parsed; reading part
 * `shard` of `nshards` when nshards > 1. NULL with "PROG: [WHAT: ]error"
 * on stderr. */
ef_pipeline *cli_pipeline(const char *prog, const char *what,
                          const cli_pipeline_opts *o, const char *spec,
                          int64_t shard, int64_t nshards);

#endif
