/* SPDX-License-Identifier: Apache-2.0 */
/* One argument parser for every subcommand: a table of options drives the
 * parsing, the checks, the error messages and the --help text. */
#ifndef EF_CLI_ARGS_H
#define EF_CLI_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum {
    ARG_HEADING, /* no option: a line of the help ("data (one of):") */
    ARG_FLAG,    /* int, set to 1 */
    ARG_STRING,  /* const char * */
    ARG_CHOICE,  /* const char *, one of `choices` ("fail|skip") */
    ARG_DOUBLE,  /* double in [min, max], finite */
    ARG_INT,     /* int, a whole number in [min, max] */
    ARG_LONG,    /* long, a whole number in [min, max] */
    ARG_SEED,    /* uint64_t, digits only: every value to 2^64 - 1 */
    ARG_SIZE     /* uint64_t bytes, with K, M, G or T (binary) */
} arg_kind;

typedef struct {
    const char *name; /* "--seed"; for ARG_HEADING, the heading's text */
    arg_kind kind;
    void *dest;         /* of the type the kind says */
    int *given;         /* set to 1 when the option is given; may be NULL */
    double min, max;    /* ARG_DOUBLE, ARG_INT, ARG_LONG */
    const char *choices; /* ARG_CHOICE */
    const char *value;  /* the value's name in the help: "N", "SPEC" */
    const char *help;   /* may hold '\n' for more lines */
} arg_opt;

typedef struct {
    const char *prog;       /* "echoflow run" */
    const char *positional; /* names, as the usage shows them: "SPEC" */
    int npositional;        /* exactly this many */
    const char *about;      /* text after the options in --help */
    const arg_opt *opts;
    int nopts;
} arg_command;

/* Parses argv into the options' destinations and the positional
 * arguments (`pos`, room for npositional). Returns 0 to go on, 1 when
 * --help was printed on stdout (exit 0), -1 when a message is on stderr
 * (exit 2). Takes --opt VALUE and --opt=VALUE. */
int args_parse(const arg_command *c, int argc, char **argv, const char **pos);
void args_usage(const arg_command *c, FILE *f);

#endif
