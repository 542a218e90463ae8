/* SPDX-License-Identifier: Apache-2.0 */
/* The `echoflow` command: list stages, and hand the other subcommands
 * their arguments. Uses the public API only. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void usage(FILE *f)
{
    fprintf(
        f, "usage: echoflow stages         the stages and their options\n"
           "       echoflow run SPEC       run a pipeline, report where the "
           "time went\n"
           "       echoflow pack SPEC PATTERN  write a pipeline's samples as "
           "tar shards\n"
           "       echoflow tokens SPEC OUT    write documents' token ids as "
           "a token file\n"
           "       echoflow train          the reference trainer\n"
           "       echoflow serve SPEC     a worker of the preprocessing "
           "service (mpirun)\n"
           "       echoflow version\n"
           "Each command answers --help.\n"
           "\n"
           "SPEC is stages joined by '|', each NAME[:OPT[,OPT...]], OPT being\n"
           "key=value or a bare value for the first option, for example\n"
           "  \"range:n=100000 | echo:2 | batch:128\"\n");
}

/* A subcommand without options: answers --help, refuses anything else. */
static int no_options(const char *prog, const char *about, int argc,
                      char **argv)
{
    const arg_command c = {prog, "", 0, about, NULL, 0};
    int rc = args_parse(&c, argc, argv, NULL);
    return rc < 0 ? 2 : rc;
}

static int cmd_stages(int argc, char **argv)
{
    int rc = no_options("echoflow stages",
                        "Lists every stage with its options: name, type, "
                        "default and meaning.\n",
                        argc, argv);
    if (rc)
        return rc == 1 ? 0 : rc;
    for (int i = 0; i < ef_stage_registry_count(); i++) {
        const ef_stage_info *si = ef_stage_registry_get(i);
        printf("%s\n    %s\n", si->name, si->help);
        for (int k = 0; k < si->noptions; k++) {
            const ef_option_info *o = &si->options[k];
            char def[64];
            if (!o->default_value)
                snprintf(def, sizeof def, "required");
            else if (!o->default_value[0])
                snprintf(def, sizeof def, "default: none");
            else
                snprintf(def, sizeof def, "default: %s", o->default_value);
            printf("    %-15s %-8s %-18s %s\n", o->name,
                   ef_opt_type_name(o->type), def, o->help);
        }
    }
    return 0;
}

static int cmd_version(int argc, char **argv)
{
    int rc = no_options("echoflow version",
                        "Prints the version of the library it runs with.\n",
                        argc, argv);
    if (rc)
        return rc == 1 ? 0 : rc;
    printf("echoflow %s\n", ef_version_string());
    return 0;
}

/* Runs at exit, whichever command ran and however it ended: stdout is buffered, so a report that did not fit (a full
 * disk, /dev/full) is only known to be lost here, and a script reading it
 * must see a failure instead of exit status 0. */
static void close_stdout(void)
{
    int failed = ferror(stdout);
    errno = 0;
    if (fflush(stdout) != 0)
        failed = 1;
    int err = errno;
    /* EBADF with nothing pending: stdout was closed, nothing was lost */
    if (fclose(stdout) != 0 && errno != EBADF) {
        failed = 1;
        err = err ? err : errno;
    }
    if (!failed)
        return;
    fprintf(stderr, "echoflow: writing the report to stdout failed: %s\n",
            err ? strerror(err) : "an earlier write failed");
    _exit(1);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    atexit(close_stdout);
    static const struct {
        const char *name;
        int (*fn)(int argc, char **argv);
    } commands[] = {{"stages", cmd_stages}, {"run", cmd_run},
                    {"pack", cmd_pack},     {"train", cmd_train},
                    {"version", cmd_version}, {"--version", cmd_version},
                    {"tokens", cmd_tokens}, {"serve", cmd_serve}};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 2, argv + 2);
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "echoflow: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
