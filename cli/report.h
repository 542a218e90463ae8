/* SPDX-License-Identifier: Apache-2.0 */
/* Printing a run: a table for people, JSON for programs. */
#ifndef EF_CLI_REPORT_H
#define EF_CLI_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "echoflow/echoflow.h"

typedef struct {
    const char *spec;
    uint64_t seed;
    double consume_us;
    int skip_bad; /* --on-error skip */
    int status;   /* how the run ended: EF_END, or an error */
} run_info;

void report_text(FILE *f, const ef_pipeline *p, const run_info *ri);
void report_json(FILE *f, const ef_pipeline *p, const run_info *ri);
/* The stats while running, as one JSON line: `t` seconds from the start,
 * then the figures of report_json from "items" on. */
void report_stats_line(FILE *f, const ef_pipeline *p, double t);
/* Prints the pipeline's warnings from number *seen on, as "echoflow:
 * warning: ..." lines, and moves *seen past them. One atomic read when
 * there are none new: cheap after every next(). */
void report_warnings(FILE *f, ef_pipeline *p, uint64_t *seen);

#endif
