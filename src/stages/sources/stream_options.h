/* SPDX-License-Identifier: Apache-2.0 */
/* The options of sources that read files or URLs through streams
 * (io/stream.h): HTTP retries and timeout, and the gzip bomb guard. Kept
 * beside the sources that declare them, so that the stage framework
 * needs nothing of io/. */
#ifndef EF_STAGES_SOURCES_STREAM_OPTIONS_H
#define EF_STAGES_SOURCES_STREAM_OPTIONS_H

#include "io/stream.h"
#include "pipeline/stage.h"

/* The options' table entries, in a source's option list. */
#define EF__STREAM_OPTIONS                                                     \
    EF__OPT("tries", EF_OPT_INT, "5",                                          \
            "HTTP attempts per file before giving up", 1, 100,                 \
            EF__SPEED_ONLY),                                                   \
        EF__OPT("max_inflate", EF_OPT_INT, "200",                              \
                "gzip: most bytes inflated per compressed byte, past the "     \
                "first 64 MiB (0: no limit)",                                  \
                0, 1 << 20),                                                   \
        EF__OPT(                                                               \
            "timeout", EF_OPT_FLOAT, "30",                                     \
            "HTTP: seconds an attempt may go without a byte, wait for its "    \
            "headers, or get under 1 KiB/s of body",                           \
            0.001, 86400, EF__SPEED_ONLY)

/* Stream options from a source's EF__STREAM_OPTIONS; the rest default. */
void ef__stream_opts_from(const ef__opts *o, ef__stream_opts *out);
/* The same from a source that declares only `tries` and `timeout` (it
 * inflates nothing); the rest default. */
void ef__stream_opts_http(const ef__opts *o, ef__stream_opts *out);

#endif
