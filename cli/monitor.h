/* SPDX-License-Identifier: Apache-2.0 */
/* Watching a running pipeline from a thread of its own: a progress line
 * on a terminal, and the stats as JSON lines every so often. Both read
 * the stats only, which the API allows from any thread. */
#ifndef EF_CLI_MONITOR_H
#define EF_CLI_MONITOR_H

#include <stdio.h>

#include "echoflow/echoflow.h"

typedef struct cli_monitor cli_monitor;

/* Starts watching `p`: with `progress`, a line on stderr twice a second
 * (items, rate and, with an echo stage, its factor over the last interval
 * and R); with stats_every_s > 0, a JSON line on `out` at that interval.
 * NULL when neither is asked for, or when no thread could start (then it
 * says so on stderr and the run goes on unwatched). */
cli_monitor *cli_monitor_start(const char *prog, ef_pipeline *p, int progress,
                               double stats_every_s, FILE *out);
/* Stops and joins the thread, erases the progress line. NULL is fine. */
void cli_monitor_stop(cli_monitor *m);

/* CLOCK_MONOTONIC in nanoseconds: the command's one clock (the monitor's
 * intervals, run's emulated steps). */
long long cli_now_ns(void);

#endif
