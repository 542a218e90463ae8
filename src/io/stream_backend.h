/* SPDX-License-Identifier: Apache-2.0 */
/* What a source of raw bytes provides to stream.c, which adds gzip,
 * offsets, cancellation and statistics on top. */
#ifndef EF_IO_STREAM_BACKEND_H
#define EF_IO_STREAM_BACKEND_H

#include "io/stream.h"

typedef struct {
    /* Up to n raw bytes into buf; *got == 0 only at the end. */
    int (*read)(void *impl, void *buf, size_t n, size_t *got, ef__err *err);
    /* Attempts after the first so far (0 for backends that never retry). */
    uint64_t (*retries)(const void *impl);
    void (*close)(void *impl);
    /* Raw bytes in all, -1 while unknown. Optional (NULL: unknown). */
    int64_t (*size)(const void *impl);
} ef__stream_backend;

/* The HTTP backend (http.c), whose first byte is byte `offset` of the
 * resource (asked for with a Range request when not 0). With `end` past
 * 0, only the bytes before `end` are asked for ("Range: bytes=offset-
 * (end - 1)", retries too) and the data is complete once they came.
 * EF_EUNSUPPORTED, naming the package to install, when echoflow was built
 * without libcurl. */
int ef__http_open(void **impl, const ef__stream_backend **backend,
                  const char *url, const ef__stream_opts *o, uint64_t offset,
                  uint64_t end, ef__err *err);

#endif
