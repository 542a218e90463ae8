/* The echoflow command's subcommands. */
#ifndef EF_CLI_H
#define EF_CLI_H

#include <stdint.h>

int cmd_train(int argc, char **argv);
int cmd_pack(int argc, char **argv);

/* A --seed value: a whole number from 0 to 2^64 - 1, digits only. On a bad
 * one, prints "PROG: OPT expects ..." on stderr and returns -1. */
int cli_parse_seed(const char *prog, const char *opt, const char *text,
                   uint64_t *out);

/* A --memory-budget value: whole bytes with an optional binary suffix K,
 * M, G or T (512M is 512 MiB), or 0 for no limit. On a bad one, prints
 * "PROG: OPT expects ..." on stderr and returns -1. */
int cli_parse_size(const char *prog, const char *opt, const char *text,
                   uint64_t *out);

#endif
