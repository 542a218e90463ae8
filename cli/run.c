/* SPDX-License-Identifier: Apache-2.0 */
/* `echoflow run`: runs a pipeline, optionally emulating a training step
 * per item, and reports where the time went. Uses the public API only. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "monitor.h"
#include "report.h"

/* --consume-us: the longest emulated step, 1000 s. A bound keeps
 * us * 1000 well inside a long long of nanoseconds in step(). */
#define CONSUME_US_MAX 1e9

/* The emulated training step. Steps follow a schedule: a step starts when
 * the previous one ended plus the time the consumer then waited for data,
 * and lasts `us`. A late wake-up (the scheduler's, tens of microseconds on a
 * busy machine) is caught up by a shorter sleep next time, so steps last
 * `us` on average; a stall beyond CATCH_UP restarts the schedule. */
#define CATCH_UP_NS 2000000LL

typedef struct {
    long long end_ns; /* when the current step is due to end */
} step_clock;

static void step(step_clock *c, double us, long long waited_ns)
{
    long long now = cli_now_ns();
    long long start = c->end_ns + waited_ns;
    if (c->end_ns == 0 || start < now - CATCH_UP_NS)
        start = now;
    c->end_ns = start + (long long)(us * 1000.0);
    struct timespec ts = {.tv_sec = (time_t)(c->end_ns / 1000000000LL),
                          .tv_nsec = (long)(c->end_ns % 1000000000LL)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

int cmd_run(int argc, char **argv)
{
    run_info ri = {0};
    cli_pipeline_opts po = {0};
    int json = 0;
    double stats_every = 0;
    const arg_opt opts[] = {
        CLI_PIPELINE_ARGS(&po),
        {"--consume-us", ARG_DOUBLE, &ri.consume_us, NULL, 0, CONSUME_US_MAX,
         NULL, "U",
         "emulate a training step: U microseconds of sleep\n"
         "per item pulled from the last stage"},
        {"--json", ARG_FLAG, &json, NULL, 0, 0, NULL, NULL,
         "the report as one JSON object instead of a table"},
        {"--stats-every", ARG_DOUBLE, &stats_every, NULL, 0.01, 86400, NULL,
         "SECONDS",
         "while running, print the stats as a JSON line\n"
         "on stdout every SECONDS: t, items, each stage's\n"
         "figures"},
    };
    const arg_command cmd = {
        "echoflow run", "SPEC", 1,
        "Runs the pipeline SPEC to its end, then reports items, rate, the\n"
        "time the consumer waited and each stage's figures. On a terminal,\n"
        "a progress line on stderr shows items, rate and, with an echo\n"
        "stage, its factor over the last half second and the R it\n"
        "measures. SPEC is stages joined by '|', for example\n"
        "  \"range:n=100000 | echo:2 | batch:128\"; `echoflow stages` lists "
        "them.\n",
        opts, (int)(sizeof opts / sizeof opts[0])};
    int parsed = args_parse(&cmd, argc, argv, &ri.spec);
    if (parsed)
        return parsed == 1 ? 0 : 2;
    ri.seed = po.seed;
    /* precise emulated steps: the default 50 us timer slack would add up */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

    ef_pipeline *p = cli_pipeline("echoflow run", NULL, &po, ri.spec, 0, 1);
    if (!p)
        return 2;
    cli_monitor *mon =
        cli_monitor_start("echoflow run", p, isatty(2), stats_every, stdout);
    ef_sample *s;
    step_clock clock = {0};
    ef_status rc;
    uint64_t warned = 0;
    for (;;) {
        long long t0 = cli_now_ns();
        rc = ef_pipeline_next(p, &s);
        report_warnings(stderr, p, &warned);
        if (rc != EF_OK)
            break;
        ef_sample_free(s);
        if (ri.consume_us > 0)
            step(&clock, ri.consume_us, cli_now_ns() - t0);
    }
    cli_monitor_stop(mon);
    ri.status = rc;
    if (rc < 0)
        fprintf(stderr, "echoflow run: %s\n", ef_pipeline_error(p));
    if (json)
        report_json(stdout, p, &ri);
    else
        report_text(stdout, p, &ri);
    ef_pipeline_destroy(p);
    return rc < 0 ? 1 : 0;
}
