/* The `echoflow` command: list stages, run a pipeline and report where the
 * time went. Uses the public API only. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "echoflow/echoflow.h"
#include "report.h"

static void usage(FILE *f)
{
    fprintf(
        f, "usage: echoflow stages\n"
           "       echoflow run [--seed S] [--consume-us U] [--on-error "
           "fail|skip]\n"
           "                    [--memory-budget SIZE] [--json] SPEC\n"
           "       echoflow pack [--per-shard N] SPEC PATTERN\n"
           "       echoflow train --help\n"
           "       echoflow version\n"
           "\n"
           "SPEC is stages joined by '|', each NAME[:OPT[,OPT...]], OPT being\n"
           "key=value or a bare value for the first option, for example\n"
           "  \"range:n=100000 | echo:2 | batch:128\"\n"
           "--consume-us U emulates a training step: U microseconds of sleep\n"
           "per item pulled from the last stage.\n"
           "--on-error skip drops bad samples (corrupt records or images,\n"
           "unreadable shards) and counts them; the default fails the run.\n"
           "--memory-budget SIZE bounds the bytes the pipeline's queues and\n"
           "buffers hold (default 1G; 0: no limit), as 512M or 2G.\n");
}

static int cmd_stages(void)
{
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
            printf("    %-15s %-7s %-18s %s\n", o->name,
                   ef_opt_type_name(o->type), def, o->help);
        }
    }
    return 0;
}

/* --consume-us: the longest emulated step, 1000 s. A bound keeps
 * us * 1000 well inside a long long of nanoseconds in step(). */
#define CONSUME_US_MAX 1e9

static int parse_number(const char *opt, const char *text, double min,
                        double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    /* strtod takes "nan" and "inf": both fail the finite range test */
    if (!*text || *end || errno || !isfinite(v) || v < min || v > max) {
        fprintf(stderr,
                "echoflow: option %s expects a number from %g to %g, got "
                "'%s'\n",
                opt, min, max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_seed(const char *prog, const char *opt, const char *text,
                   uint64_t *out)
{
    char *end = (char *)text;
    unsigned long long v = 0;
    errno = 0;
    /* digits only: strtoull would take spaces, '+', and a '-' that wraps */
    if (text[0] >= '0' && text[0] <= '9')
        v = strtoull(text, &end, 10);
    if (end == text || *end || errno == ERANGE) {
        fprintf(stderr,
                "%s: %s expects a whole number from 0 to %llu, got '%s'\n",
                prog, opt, (unsigned long long)UINT64_MAX, text);
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

int cli_parse_size(const char *prog, const char *opt, const char *text,
                   uint64_t *out)
{
    static const char suffixes[] = "KMGT";
    char *end = (char *)text;
    unsigned long long v = 0;
    errno = 0;
    if (text[0] >= '0' && text[0] <= '9')
        v = strtoull(text, &end, 10);
    int digits = end != text, shift = 0;
    const char *sfx = *end ? strchr(suffixes, *end) : NULL;
    if (sfx) {
        shift = 10 * (int)(sfx - suffixes + 1);
        end++;
    }
    if (!digits || *end || errno == ERANGE ||
        (shift && v > (UINT64_MAX >> shift))) {
        fprintf(stderr,
                "%s: %s expects a size in bytes, with K, M, G or T for "
                "binary multiples (512M, 2G), or 0 for no limit; got '%s'\n",
                prog, opt, text);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

/* Runs at exit, whichever command ran and however it ended (train --help
 * calls exit()): stdout is buffered, so a report that did not fit (a full
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

/* The emulated training step. Steps follow a schedule: a step starts when
 * the previous one ended plus the time the consumer then waited for data,
 * and lasts `us`. A late wake-up (the scheduler's, tens of microseconds on a
 * busy machine) is caught up by a shorter sleep next time, so steps last
 * `us` on average; a stall beyond CATCH_UP restarts the schedule. */
#define CATCH_UP_NS 2000000LL

typedef struct {
    long long end_ns; /* when the current step is due to end */
} step_clock;

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void step(step_clock *c, double us, long long waited_ns)
{
    long long now = mono_ns();
    long long start = c->end_ns + waited_ns;
    if (c->end_ns == 0 || start < now - CATCH_UP_NS)
        start = now;
    c->end_ns = start + (long long)(us * 1000.0);
    struct timespec ts = {.tv_sec = (time_t)(c->end_ns / 1000000000LL),
                          .tv_nsec = (long)(c->end_ns % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int cmd_run(int argc, char **argv)
{
    run_info ri = {0};
    int json = 0;
    uint64_t budget = 0;
    int budget_given = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--on-error")) {
            if (i + 1 >= argc ||
                (strcmp(argv[i + 1], "fail") && strcmp(argv[i + 1], "skip"))) {
                fprintf(stderr,
                        "echoflow: --on-error expects fail or skip, "
                        "got '%s'\n",
                        i + 1 < argc ? argv[i + 1] : "");
                return 2;
            }
            ri.skip_bad = !strcmp(argv[++i], "skip");
        } else if (!strcmp(argv[i], "--memory-budget")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "echoflow: option %s needs a value\n", argv[i]);
                return 2;
            }
            if (cli_parse_size("echoflow", "option --memory-budget",
                               argv[++i], &budget))
                return 2;
            budget_given = 1;
        } else if (!strcmp(argv[i], "--seed") ||
                   !strcmp(argv[i], "--consume-us")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "echoflow: option %s needs a value\n", argv[i]);
                return 2;
            }
            int bad = !strcmp(argv[i], "--seed")
                          ? cli_parse_seed("echoflow", "option --seed",
                                           argv[i + 1], &ri.seed)
                          : parse_number(argv[i], argv[i + 1], 0,
                                         CONSUME_US_MAX, &ri.consume_us);
            if (bad)
                return 2;
            i++;
        } else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "echoflow: unknown option '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (ri.spec) {
            fprintf(stderr, "echoflow: one SPEC only (quote it): '%s'\n",
                    argv[i]);
            return 2;
        } else {
            ri.spec = argv[i];
        }
    }
    if (!ri.spec) {
        fprintf(stderr, "echoflow: run needs a SPEC\n");
        usage(stderr);
        return 2;
    }
    /* precise emulated steps: the default 50 us timer slack would add up */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    ef_pipeline *p;
    if (ef_pipeline_create(&p) != EF_OK) {
        fprintf(stderr, "echoflow: out of memory\n");
        return 1;
    }
    int rc = ef_pipeline_set_seed(p, ri.seed);
    if (rc == EF_OK)
        rc = ef_pipeline_set_on_error(p, ri.skip_bad ? EF_ON_ERROR_SKIP
                                                     : EF_ON_ERROR_FAIL);
    if (rc == EF_OK && budget_given)
        rc = ef_pipeline_set_memory_budget(p, budget);
    if (rc == EF_OK)
        rc = ef_pipeline_parse(p, ri.spec);
    if (rc != EF_OK) {
        fprintf(stderr, "echoflow: %s\n", ef_pipeline_error(p));
        ef_pipeline_destroy(p);
        return 2;
    }
    ef_sample *s;
    step_clock clock = {0};
    for (;;) {
        long long t0 = mono_ns();
        rc = ef_pipeline_next(p, &s);
        if (rc != EF_OK)
            break;
        ef_sample_free(s);
        if (ri.consume_us > 0)
            step(&clock, ri.consume_us, mono_ns() - t0);
    }
    ri.status = rc;
    if (rc < 0)
        fprintf(stderr, "echoflow: %s\n", ef_pipeline_error(p));
    if (json)
        report_json(stdout, p, &ri);
    else
        report_text(stdout, p, &ri);
    ef_pipeline_destroy(p);
    return rc < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    atexit(close_stdout);
    if (!strcmp(argv[1], "stages"))
        return cmd_stages();
    if (!strcmp(argv[1], "run"))
        return cmd_run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "train"))
        return cmd_train(argc - 2, argv + 2);
    if (!strcmp(argv[1], "pack"))
        return cmd_pack(argc - 2, argv + 2);
    if (!strcmp(argv[1], "version") || !strcmp(argv[1], "--version")) {
        printf("echoflow %s\n", ef_version_string());
        return 0;
    }
    if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") ||
        !strcmp(argv[1], "-h")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "echoflow: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
